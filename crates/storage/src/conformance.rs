//! The storage conformance suite: checks every part of the [`Storage`] contract through
//! `&dyn Storage` only, so every engine (redb today, others later) runs the same checks.
//!
//! Test support, not server code: checks panic (assert) on the first violation. Each check uses
//! its own database (`conf_<check>`) and drops it at the end, so checks can run in any order on
//! one engine; [`run_all`] runs them all.

use std::ops::Bound;

use bson::{doc, Bson, Document};

use super::{
    CollectionMeta, ExpiryOrder, IndexSpec, KeyRange, Namespace, RawRecord, ReapRequest,
    ReapSource, Record, RecordPredicate, ScanPage, ScanRequest, ScanSource, Storage, StorageError,
    TimeRange, TtlClass, WriteMeta, WriteOp, WriteOptions, WriteOutcome,
};
use tideway_query::keycodec::{encode_id, encode_key, Direction};

mod sessions;
pub use sessions::{concurrent_single_writes, session_records};

pub const META: WriteMeta = WriteMeta {
    last_write_ms: 1_700_000_000_000,
    ttl: TtlClass::Default,
};
pub const ORDERED: WriteOptions = WriteOptions {
    ordered: true,
    force_durable: false,
    background: false,
};
const UNORDERED: WriteOptions = WriteOptions {
    ordered: false,
    force_durable: false,
    background: false,
};

/// Runs every check.
pub async fn run_all(storage: &dyn Storage) {
    catalog(storage).await;
    documents(storage).await;
    numeric_ids(storage).await;
    duplicate_keys(storage).await;
    batches(storage).await;
    indexes(storage).await;
    scans(storage).await;
    natural_order(storage).await;
    snapshot_positions(storage).await;
    stats(storage).await;
    expiry(storage).await;
    supersede(storage).await;
    catalog_only_indexes(storage).await;
    background_writes(storage).await;
    reaping(storage).await;
    reaping_between_pages(storage).await;
    hidden_scans(storage).await;
    session_records(storage).await;
    concurrent_single_writes(storage).await;
}

// ---- helpers ----

pub fn insert(doc: Document) -> WriteOp {
    insert_with(doc, META, None)
}

pub fn insert_with(doc: Document, meta: WriteMeta, supersede: Option<RecordPredicate>) -> WriteOp {
    WriteOp::Insert {
        doc,
        meta,
        supersede,
    }
}

pub fn replace(id: impl Into<Bson>, expected_rev: u64, doc: Document) -> WriteOp {
    replace_with(id, expected_rev, doc, META, None)
}

pub fn replace_with(
    id: impl Into<Bson>,
    expected_rev: u64,
    doc: Document,
    meta: WriteMeta,
    supersede: Option<RecordPredicate>,
) -> WriteOp {
    WriteOp::Replace {
        replacement: true,
        id: id.into(),
        expected_rev,
        doc,
        meta,
        supersede,
    }
}

pub fn delete(id: impl Into<Bson>, expected_rev: Option<u64>) -> WriteOp {
    WriteOp::Delete {
        id: id.into(),
        expected_rev,
    }
}

/// An index spec as the command layer builds it (`{v: 2, key, name, unique?, sparse?, ...}`).
pub fn index_spec(
    name: &str,
    key: &[(&str, i32)],
    unique: bool,
    sparse: bool,
    partial_filter: Option<Document>,
) -> IndexSpec {
    let key_pattern: Document = key
        .iter()
        .map(|(field, direction)| (field.to_string(), Bson::Int32(*direction)))
        .collect();
    let mut spec = doc! {"v": 2, "key": key_pattern, "name": name};
    if unique {
        spec.insert("unique", true);
    }
    if sparse {
        spec.insert("sparse", true);
    }
    if let Some(filter) = &partial_filter {
        spec.insert("partialFilterExpression", filter.clone());
    }
    IndexSpec {
        name: name.to_string(),
        key: key
            .iter()
            .map(|(field, direction)| (field.to_string(), direction_of(*direction)))
            .collect(),
        unique,
        sparse,
        partial_filter,
        spec,
        catalog_only: false,
        collation: None,
    }
}

fn direction_of(direction: i32) -> Direction {
    if direction < 0 {
        Direction::Descending
    } else {
        Direction::Ascending
    }
}

/// Writes `ops` and asserts every operation succeeded.
pub async fn write_ok(
    storage: &dyn Storage,
    ns: &Namespace,
    ops: Vec<WriteOp>,
) -> Vec<WriteOutcome> {
    let count = ops.len();
    let results = storage.write(ns, ops, ORDERED).await.expect("write batch");
    assert_eq!(
        results.len(),
        count,
        "one result per operation: {results:?}"
    );
    results
        .into_iter()
        .map(|result| result.expect("write operation"))
        .collect()
}

fn superseded_count(outcome: WriteOutcome) -> u32 {
    match outcome {
        WriteOutcome::Inserted { superseded, .. } | WriteOutcome::Replaced { superseded, .. } => {
            superseded
        }
        WriteOutcome::Deleted => panic!("expected an insert or replace, got Deleted"),
    }
}

fn inserted_rev(outcome: WriteOutcome) -> u64 {
    match outcome {
        WriteOutcome::Inserted { rev, .. } | WriteOutcome::Replaced { rev, .. } => rev,
        WriteOutcome::Deleted => panic!("expected a revision, got Deleted"),
    }
}

/// Pages through a whole scan with `page` records per call; asserts the paging contract.
pub async fn scan_all(
    storage: &dyn Storage,
    ns: &Namespace,
    source: ScanSource,
    reverse: bool,
    page: usize,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut resume = None;
    for _ in 0..100_000 {
        let result = storage
            .scan(
                ns,
                ScanRequest {
                    source: source.clone(),
                    resume_after: resume.take(),
                    reverse,
                    limit: page,
                    hide: None,
                    key_filter: None,
                    covered: false,
                },
            )
            .await
            .expect("scan");
        assert!(result.records.len() <= page.max(1), "page over its limit");
        records.extend(result.records);
        match result.resume {
            Some(key) => resume = Some(key),
            None => {
                if let ScanSource::Index { name, ranges } = &source {
                    if name == IndexSpec::ID_INDEX_NAME {
                        // Not a source of expiry entries (`_id` is never a TTL index).
                        return records;
                    }
                    // Counting keys finds the same documents as scanning them.
                    let distinct: std::collections::HashSet<Vec<u8>> = records
                        .iter()
                        .map(|record| {
                            tideway_query::keycodec::encode_id(
                                record.doc.get("_id").unwrap_or(&Bson::Null),
                            )
                        })
                        .collect();
                    let sources = ranges
                        .iter()
                        .map(|range| ReapSource::Index {
                            name: name.clone(),
                            range: range.clone(),
                        })
                        .collect();
                    let counted = storage
                        .count_entries(ns, sources)
                        .await
                        .expect("count entries");
                    assert_eq!(
                        counted.in_sources,
                        distinct.len() as u64,
                        "count_entries of {name} over {ranges:?}"
                    );
                }
                return records;
            }
        }
    }
    panic!("scan did not terminate");
}

/// Every time.
pub const ALL_TIMES: TimeRange = (Bound::Unbounded, Bound::Unbounded);

pub fn meta(last_write_ms: i64, ttl: TtlClass) -> WriteMeta {
    WriteMeta { last_write_ms, ttl }
}

pub fn own(expire_at_ms: i64) -> TtlClass {
    TtlClass::Own { expire_at_ms }
}

/// Pages through a whole expiry scan with `page` records per call; asserts the paging contract.
pub async fn expiry_all(
    storage: &dyn Storage,
    ns: &Namespace,
    order: ExpiryOrder,
    range: TimeRange,
    page: usize,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut resume = None;
    for _ in 0..100_000 {
        let result = storage
            .expiry_scan(ns, order, range, resume.take(), page)
            .await
            .expect("expiry scan");
        assert!(result.records.len() <= page.max(1), "page over its limit");
        records.extend(result.records);
        match result.resume {
            Some(key) => resume = Some(key),
            None => {
                // Counting keys agrees with scanning.
                let counted = storage
                    .count_entries(ns, vec![ReapSource::Expiry { order, range }])
                    .await
                    .expect("count entries");
                assert_eq!(
                    counted.in_sources,
                    records.len() as u64,
                    "count_entries over {range:?}"
                );
                return records;
            }
        }
    }
    panic!("expiry scan did not terminate");
}

/// The revision of the stored document `_id: id`.
async fn current_rev_of(storage: &dyn Storage, ns: &Namespace, id: &Bson) -> u64 {
    storage
        .get(ns, id)
        .await
        .expect("get")
        .expect("document exists")
        .rev
}

async fn current_rev(storage: &dyn Storage, ns: &Namespace, id: i32) -> u64 {
    current_rev_of(storage, ns, &Bson::Int32(id)).await
}

/// The `_id`s of both expiry structures, in order: (last write, own expiry).
async fn expiry_ids(storage: &dyn Storage, ns: &Namespace) -> (Vec<Bson>, Vec<Bson>) {
    (
        ids(&expiry_all(storage, ns, ExpiryOrder::LastWrite, ALL_TIMES, 2).await),
        ids(&expiry_all(storage, ns, ExpiryOrder::OwnExpiry, ALL_TIMES, 2).await),
    )
}

fn ids(records: &[Record]) -> Vec<Bson> {
    records
        .iter()
        .map(|record| record.doc.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

fn int_ids(range: impl IntoIterator<Item = i32>) -> Vec<Bson> {
    range.into_iter().map(Bson::Int32).collect()
}

fn key(values: &[(Bson, i32)]) -> Vec<u8> {
    let values: Vec<(&Bson, Direction)> = values
        .iter()
        .map(|(value, direction)| (value, direction_of(*direction)))
        .collect();
    encode_key(&values)
}

fn point(value: Vec<u8>) -> KeyRange {
    (Bound::Included(value.clone()), Bound::Included(value))
}

fn index_source(name: &str, ranges: Vec<KeyRange>) -> ScanSource {
    ScanSource::Index {
        name: name.to_string(),
        ranges,
    }
}

fn index_names(meta: &CollectionMeta) -> Vec<&str> {
    meta.indexes
        .iter()
        .map(|index| index.name.as_str())
        .collect()
}

async fn cleanup(storage: &dyn Storage, db: &str) {
    storage.drop_database(db).await.expect("drop database");
    assert!(storage.list_collections(db).await.expect("list").is_empty());
}

/// The option that makes [`rule_by_option`] select a collection.
pub const LAST_WRITE_OPTION: &str = "conformanceKeepsLastWrite";

/// The [`crate::LastWriteRule`] [`last_write_rule`] needs its engine opened with: a collection
/// keeps its `LastWrite` order while its options say `conformanceKeepsLastWrite: true`.
pub fn rule_by_option(meta: &CollectionMeta) -> bool {
    meta.options.get_bool(LAST_WRITE_OPTION) == Ok(true)
}

// ---- checks ----

/// Collections: create, exists, list, options, rename (same db, across dbs, drop_target), drop,
/// drop database.
pub async fn catalog(storage: &dyn Storage) {
    let db = "conf_catalog";
    let a = Namespace::new(db, "a");
    let b = Namespace::new(db, "b");
    assert_eq!(storage.collection(&a).await.unwrap(), None);

    let meta = storage
        .create_collection(&b, doc! {"capped": false}, Vec::new())
        .await
        .unwrap();
    assert_eq!(meta.ns, b);
    assert_eq!(meta.options, doc! {"capped": false});
    assert_eq!(index_names(&meta), vec!["_id_"]);
    assert_eq!(
        meta.indexes[0].spec,
        doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    );
    assert!(meta.indexes[0].is_id_index());
    assert_ne!(meta.uuid, [0; 16]);
    assert_eq!(storage.collection(&b).await.unwrap(), Some(meta.clone()));
    assert!(matches!(
        storage.create_collection(&b, Document::new(), Vec::new()).await,
        Err(StorageError::NamespaceExists(ns)) if ns == b
    ));

    let meta_a = storage
        .create_collection(&a, Document::new(), Vec::new())
        .await
        .unwrap();
    assert_ne!(meta_a.uuid, meta.uuid, "uuids are unique");
    let listed: Vec<Namespace> = storage
        .list_collections(db)
        .await
        .unwrap()
        .into_iter()
        .map(|meta| meta.ns)
        .collect();
    assert_eq!(listed, vec![a.clone(), b.clone()], "sorted by name");
    let databases = storage.list_databases().await.unwrap();
    assert!(databases.iter().any(|(name, _)| name == db));
    let names: Vec<&String> = databases.iter().map(|(name, _)| name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "databases sorted by name");
    assert_eq!(
        storage.list_database_names().await.unwrap(),
        names.into_iter().cloned().collect::<Vec<_>>(),
        "the names are those of list_databases"
    );

    storage
        .set_collection_options(&b, doc! {"validator": {"x": 1}})
        .await
        .unwrap();
    assert_eq!(
        storage.collection(&b).await.unwrap().unwrap().options,
        doc! {"validator": {"x": 1}}
    );
    assert!(matches!(
        storage
            .set_collection_options(&Namespace::new(db, "missing"), Document::new())
            .await,
        Err(StorageError::NamespaceNotFound(_))
    ));

    // Rename within the database keeps documents, indexes, options and uuid.
    write_ok(storage, &b, vec![insert(doc! {"_id": 1, "k": "b"})]).await;
    storage
        .create_indexes(&b, vec![index_spec("k_1", &[("k", 1)], true, false, None)])
        .await
        .unwrap();
    let before = storage.collection(&b).await.unwrap().unwrap();
    let c = Namespace::new(db, "c");
    storage.rename_collection(&b, &c, false).await.unwrap();
    assert_eq!(storage.collection(&b).await.unwrap(), None);
    let after = storage.collection(&c).await.unwrap().unwrap();
    assert_eq!(after.ns, c);
    assert_eq!(after.uuid, before.uuid);
    assert_eq!(after.options, before.options);
    assert_eq!(after.indexes, before.indexes);
    assert_eq!(
        storage.get(&c, &Bson::Int32(1)).await.unwrap().unwrap().doc,
        doc! {"_id": 1, "k": "b"}
    );
    assert_eq!(storage.get(&b, &Bson::Int32(1)).await.unwrap(), None);
    // The unique index still works under the new name.
    let results = storage
        .write(&c, vec![insert(doc! {"_id": 2, "k": "b"})], ORDERED)
        .await
        .unwrap();
    assert!(matches!(&results[0], Err(StorageError::DuplicateKey { ns, .. }) if *ns == c));

    // Rename onto an existing collection.
    write_ok(storage, &a, vec![insert(doc! {"_id": "in a"})]).await;
    assert!(matches!(
        storage.rename_collection(&c, &a, false).await,
        Err(StorageError::NamespaceExists(ns)) if ns == a
    ));
    storage.rename_collection(&c, &a, true).await.unwrap();
    assert_eq!(storage.collection(&c).await.unwrap(), None);
    assert_eq!(
        storage.collection(&a).await.unwrap().unwrap().uuid,
        before.uuid
    );
    assert_eq!(
        storage.get(&a, &Bson::String("in a".into())).await.unwrap(),
        None
    );
    assert!(storage.get(&a, &Bson::Int32(1)).await.unwrap().is_some());
    assert!(matches!(
        storage.rename_collection(&c, &b, false).await,
        Err(StorageError::NamespaceNotFound(ns)) if ns == c
    ));

    // Across databases.
    let other_db = "conf_catalog_other";
    let moved = Namespace::new(other_db, "moved");
    storage.rename_collection(&a, &moved, false).await.unwrap();
    assert!(storage.list_collections(db).await.unwrap().is_empty());
    assert_eq!(
        storage.collection(&moved).await.unwrap().unwrap().uuid,
        before.uuid
    );
    assert!(storage
        .get(&moved, &Bson::Int32(1))
        .await
        .unwrap()
        .is_some());

    // Drop.
    assert!(storage.drop_collection(&moved).await.unwrap());
    assert!(!storage.drop_collection(&moved).await.unwrap());
    assert_eq!(storage.get(&moved, &Bson::Int32(1)).await.unwrap(), None);
    let recreated = storage
        .create_collection(&moved, Document::new(), Vec::new())
        .await
        .unwrap();
    assert_eq!(
        index_names(&recreated),
        vec!["_id_"],
        "drop removed the indexes"
    );
    assert_eq!(
        scan_all(storage, &moved, ScanSource::Collection, false, 10).await,
        vec![]
    );

    // Drop database.
    storage
        .create_collection(&a, Document::new(), Vec::new())
        .await
        .unwrap();
    write_ok(storage, &b, vec![insert(doc! {"_id": 1})]).await;
    cleanup(storage, db).await;
    cleanup(storage, other_db).await;
    let databases = storage.list_databases().await.unwrap();
    assert!(!databases
        .iter()
        .any(|(name, _)| name == db || name == other_db));
}

/// Insert, get, replace, delete, revisions and write conflicts.
pub async fn documents(storage: &dyn Storage) {
    let db = "conf_documents";
    let ns = Namespace::new(db, "docs");
    assert_eq!(storage.get(&ns, &Bson::Int32(1)).await.unwrap(), None);

    // Implicit creation.
    let outcomes = write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 1, "v": "one"}),
            insert(doc! {"_id": 2, "v": "two"}),
        ],
    )
    .await;
    assert!(storage.collection(&ns).await.unwrap().is_some());
    let rev1 = inserted_rev(outcomes[0]);
    let rev2 = inserted_rev(outcomes[1]);
    assert_ne!(rev1, rev2);
    let record = storage.get(&ns, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(
        record,
        Record {
            doc: doc! {"_id": 1, "v": "one"}.into(),
            rev: rev1,
            last_write_ms: META.last_write_ms,
            ttl: TtlClass::Default,
        }
    );

    // Replace with the current revision.
    let replaced = write_ok(
        storage,
        &ns,
        vec![replace_with(
            1,
            rev1,
            doc! {"_id": 1, "v": "uno"},
            WriteMeta {
                last_write_ms: 7,
                ttl: TtlClass::Default,
            },
            None,
        )],
    )
    .await;
    let rev1b = inserted_rev(replaced[0]);
    assert!(matches!(replaced[0], WriteOutcome::Replaced { .. }));
    assert_ne!(rev1b, rev1, "revision changes on every write");
    let record = storage.get(&ns, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(record.doc, doc! {"_id": 1, "v": "uno"});
    assert_eq!((record.rev, record.last_write_ms), (rev1b, 7));

    // Stale revisions conflict and change nothing.
    let results = storage
        .write(
            &ns,
            vec![replace(1, rev1, doc! {"_id": 1, "v": "stale"})],
            ORDERED,
        )
        .await
        .unwrap();
    assert_eq!(results, vec![Err(StorageError::WriteConflict)]);
    let results = storage
        .write(&ns, vec![delete(1, Some(rev1))], ORDERED)
        .await
        .unwrap();
    assert_eq!(results, vec![Err(StorageError::WriteConflict)]);
    assert_eq!(
        storage
            .get(&ns, &Bson::Int32(1))
            .await
            .unwrap()
            .unwrap()
            .doc,
        doc! {"_id": 1, "v": "uno"}
    );
    // A missing document conflicts too.
    let results = storage
        .write(
            &ns,
            vec![
                replace(99, 1, doc! {"_id": 99}),
                delete(99, None),
                delete(99, Some(1)),
            ],
            UNORDERED,
        )
        .await
        .unwrap();
    assert_eq!(results, vec![Err(StorageError::WriteConflict); 3]);
    assert_eq!(storage.get(&ns, &Bson::Int32(99)).await.unwrap(), None);

    // Delete with and without a revision.
    assert_eq!(
        write_ok(storage, &ns, vec![delete(1, Some(rev1b)), delete(2, None)]).await,
        vec![WriteOutcome::Deleted, WriteOutcome::Deleted]
    );
    assert_eq!(storage.get(&ns, &Bson::Int32(1)).await.unwrap(), None);
    assert_eq!(storage.get(&ns, &Bson::Int32(2)).await.unwrap(), None);

    // Re-inserting a deleted _id gets a fresh revision.
    let again = write_ok(storage, &ns, vec![insert(doc! {"_id": 1, "v": "again"})]).await;
    let rev_again = inserted_rev(again[0]);
    assert!(rev_again != rev1 && rev_again != rev1b);

    // Replace/delete on a missing collection fail without creating it.
    let missing = Namespace::new(db, "missing");
    let results = storage
        .write(
            &missing,
            vec![delete(1, None), replace(1, 1, doc! {"_id": 1})],
            UNORDERED,
        )
        .await
        .unwrap();
    assert_eq!(results, vec![Err(StorageError::WriteConflict); 2]);
    assert_eq!(storage.collection(&missing).await.unwrap(), None);

    // Documents of every _id type round-trip.
    let values = vec![
        Bson::String("text".into()),
        Bson::ObjectId(bson::oid::ObjectId::from_bytes([7; 12])),
        Bson::Document(doc! {"a": 1, "b": [1, 2]}),
        Bson::Boolean(true),
        Bson::Null,
        Bson::Double(2.5),
    ];
    for value in &values {
        write_ok(
            storage,
            &ns,
            vec![insert(doc! {"_id": value.clone(), "x": 1})],
        )
        .await;
        let record = storage.get(&ns, value).await.unwrap().unwrap();
        assert_eq!(record.doc, doc! {"_id": value.clone(), "x": 1});
    }
    cleanup(storage, db).await;
}

/// 1, 1.0 and NumberLong(1) are the same `_id`.
pub async fn numeric_ids(storage: &dyn Storage) {
    let db = "conf_numeric";
    let ns = Namespace::new(db, "n");
    write_ok(storage, &ns, vec![insert(doc! {"_id": 1, "t": "int"})]).await;
    for id in [Bson::Double(1.0), Bson::Int64(1), Bson::Int32(1)] {
        let record = storage.get(&ns, &id).await.unwrap().unwrap();
        assert_eq!(record.doc, doc! {"_id": 1, "t": "int"});
        let results = storage
            .write(&ns, vec![insert(doc! {"_id": id.clone()})], ORDERED)
            .await
            .unwrap();
        match &results[0] {
            Err(StorageError::DuplicateKey {
                index,
                key_pattern,
                key_value,
                ..
            }) => {
                assert_eq!(index, "_id_");
                assert_eq!(**key_pattern, doc! {"_id": 1});
                assert_eq!(**key_value, doc! {"_id": id.clone()});
            }
            other => panic!("expected DuplicateKey, got {other:?}"),
        }
    }
    let rev = storage
        .get(&ns, &Bson::Int32(1))
        .await
        .unwrap()
        .unwrap()
        .rev;
    write_ok(
        storage,
        &ns,
        vec![replace(
            Bson::Int64(1),
            rev,
            doc! {"_id": 1.0, "t": "double"},
        )],
    )
    .await;
    assert_eq!(
        storage
            .get(&ns, &Bson::Int64(1))
            .await
            .unwrap()
            .unwrap()
            .doc,
        doc! {"_id": 1.0, "t": "double"}
    );
    write_ok(storage, &ns, vec![delete(Bson::Double(1.0), None)]).await;
    assert_eq!(storage.get(&ns, &Bson::Int32(1)).await.unwrap(), None);
    cleanup(storage, db).await;
}

/// Duplicate `_id` and unique index violations on insert, on replace and when building an index.
pub async fn duplicate_keys(storage: &dyn Storage) {
    let db = "conf_dup";
    let ns = Namespace::new(db, "d");
    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 1, "email": "a@x"}),
            insert(doc! {"_id": 2, "email": "b@x"}),
        ],
    )
    .await;
    let results = storage
        .write(&ns, vec![insert(doc! {"_id": 1, "email": "c@x"})], ORDERED)
        .await
        .unwrap();
    let Err(error) = &results[0] else {
        panic!("expected a duplicate _id");
    };
    assert_eq!(
        error.to_string(),
        "E11000 duplicate key error collection: conf_dup.d index: _id_ dup key: { _id: 1 }"
    );

    storage
        .create_indexes(
            &ns,
            vec![index_spec("email_1", &[("email", 1)], true, false, None)],
        )
        .await
        .unwrap();
    // Insert violating the unique index.
    let results = storage
        .write(&ns, vec![insert(doc! {"_id": 3, "email": "a@x"})], ORDERED)
        .await
        .unwrap();
    match &results[0] {
        Err(
            error @ StorageError::DuplicateKey {
                ns: error_ns,
                index,
                key_pattern,
                key_value,
            },
        ) => {
            assert_eq!(error_ns, &ns);
            assert_eq!(index, "email_1");
            assert_eq!(**key_pattern, doc! {"email": 1});
            assert_eq!(**key_value, doc! {"email": "a@x"});
            assert_eq!(
                error.to_string(),
                "E11000 duplicate key error collection: conf_dup.d index: email_1 dup key: { email: \"a@x\" }"
            );
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    assert_eq!(
        storage.get(&ns, &Bson::Int32(3)).await.unwrap(),
        None,
        "nothing applied"
    );
    // A missing field is a Null key: only one document may lack it.
    write_ok(storage, &ns, vec![insert(doc! {"_id": 4})]).await;
    let results = storage
        .write(&ns, vec![insert(doc! {"_id": 5})], ORDERED)
        .await
        .unwrap();
    assert!(
        matches!(&results[0], Err(StorageError::DuplicateKey { key_value, .. }) if **key_value == doc! {"email": Bson::Null})
    );

    // Replace: keeping its own key is fine, taking another's is not.
    let rev = storage
        .get(&ns, &Bson::Int32(1))
        .await
        .unwrap()
        .unwrap()
        .rev;
    let outcome = write_ok(
        storage,
        &ns,
        vec![replace(1, rev, doc! {"_id": 1, "email": "a@x", "n": 1})],
    )
    .await;
    let rev = inserted_rev(outcome[0]);
    let results = storage
        .write(
            &ns,
            vec![replace(1, rev, doc! {"_id": 1, "email": "b@x"})],
            ORDERED,
        )
        .await
        .unwrap();
    assert!(
        matches!(&results[0], Err(StorageError::DuplicateKey { index, .. }) if index == "email_1")
    );
    let record = storage.get(&ns, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(
        (record.rev, record.doc.into_document()),
        (rev, doc! {"_id": 1, "email": "a@x", "n": 1})
    );
    // Moving to a free key releases the old one.
    write_ok(
        storage,
        &ns,
        vec![replace(1, rev, doc! {"_id": 1, "email": "z@x"})],
    )
    .await;
    write_ok(storage, &ns, vec![insert(doc! {"_id": 6, "email": "a@x"})]).await;
    // Deleting releases keys.
    write_ok(storage, &ns, vec![delete(6, None)]).await;
    write_ok(storage, &ns, vec![insert(doc! {"_id": 7, "email": "a@x"})]).await;

    // Building a unique index over duplicates fails and creates nothing (all or nothing).
    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 10, "email": "t10@x", "team": "red"}),
            insert(doc! {"_id": 11, "email": "t11@x", "team": "red"}),
        ],
    )
    .await;
    let result = storage
        .create_indexes(
            &ns,
            vec![
                index_spec("ok_1", &[("ok", 1)], false, false, None),
                index_spec("team_1", &[("team", 1)], true, true, None),
            ],
        )
        .await;
    match result {
        Err(StorageError::DuplicateKey {
            index, key_value, ..
        }) => {
            assert_eq!(index, "team_1");
            assert_eq!(*key_value, doc! {"team": "red"});
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    let meta = storage.collection(&ns).await.unwrap().unwrap();
    assert_eq!(index_names(&meta), vec!["_id_", "email_1"]);
    // Duplicates inside one insert batch.
    let results = storage
        .write(
            &ns,
            vec![
                insert(doc! {"_id": 20, "email": "n@x"}),
                insert(doc! {"_id": 21, "email": "n@x"}),
            ],
            UNORDERED,
        )
        .await
        .unwrap();
    assert!(results[0].is_ok());
    assert!(matches!(
        &results[1],
        Err(StorageError::DuplicateKey { .. })
    ));
    cleanup(storage, db).await;
}

/// Ordered batches stop at the first failure; unordered ones attempt everything.
pub async fn batches(storage: &dyn Storage) {
    let db = "conf_batches";
    let ns = Namespace::new(db, "b");
    write_ok(storage, &ns, vec![insert(doc! {"_id": 2})]).await;
    let ops = || {
        vec![
            insert(doc! {"_id": 1}),
            insert(doc! {"_id": 2}),
            insert(doc! {"_id": 3}),
            delete(42, None),
            insert(doc! {"_id": 4}),
        ]
    };
    let results = storage.write(&ns, ops(), ORDERED).await.unwrap();
    assert_eq!(results.len(), 2, "ordered stops after the first failure");
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(StorageError::DuplicateKey { .. })));
    assert_eq!(storage.get(&ns, &Bson::Int32(3)).await.unwrap(), None);

    let ns2 = Namespace::new(db, "b2");
    write_ok(storage, &ns2, vec![insert(doc! {"_id": 2})]).await;
    let results = storage.write(&ns2, ops(), UNORDERED).await.unwrap();
    assert_eq!(results.len(), 5);
    assert!(results[0].is_ok() && results[2].is_ok() && results[4].is_ok());
    assert!(matches!(results[1], Err(StorageError::DuplicateKey { .. })));
    assert_eq!(results[3], Err(StorageError::WriteConflict));
    // In insertion order: 2 was stored before the batch, which applies in order.
    let all = scan_all(storage, &ns2, ScanSource::Collection, false, 10).await;
    assert_eq!(ids(&all), int_ids([2, 1, 3, 4]));

    let empty = storage.write(&ns2, Vec::new(), ORDERED).await.unwrap();
    assert!(empty.is_empty());

    // Each insert's outcome carries its own document's stored revision (`_id`s descending:
    // not the order of their keys).
    let ns3 = Namespace::new(db, "b3");
    let ids_descending = || (10..15).rev();
    let results = storage
        .write(
            &ns3,
            ids_descending().map(|i| insert(doc! {"_id": i})).collect(),
            ORDERED,
        )
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    for (i, result) in ids_descending().zip(results) {
        let rev = inserted_rev(result.expect("inserted"));
        assert_eq!(
            current_rev_of(storage, &ns3, &Bson::Int32(i)).await,
            rev,
            "_id {i}"
        );
    }

    // A large batch (an engine may draw its revisions in blocks: several here) still gives each
    // document its stored revision, increasing in batch order, which is natural order.
    let ns4 = Namespace::new(db, "b4");
    let many_descending = || (0..2_500).rev();
    let results = storage
        .write(
            &ns4,
            many_descending().map(|i| insert(doc! {"_id": i})).collect(),
            ORDERED,
        )
        .await
        .unwrap();
    let revs: Vec<u64> = results
        .into_iter()
        .map(|result| inserted_rev(result.expect("inserted")))
        .collect();
    assert!(
        revs.windows(2).all(|pair| pair[0] < pair[1]),
        "revisions increase in batch order"
    );
    let stored = scan_all(storage, &ns4, ScanSource::Collection, false, 1000).await;
    assert_eq!(ids(&stored), int_ids(many_descending()));
    assert_eq!(
        stored.iter().map(|record| record.rev).collect::<Vec<_>>(),
        revs
    );
    cleanup(storage, db).await;
}

/// Multikey, sparse, partial and compound indexes; parallel arrays; index DDL.
pub async fn indexes(storage: &dyn Storage) {
    let db = "conf_indexes";
    let ns = Namespace::new(db, "i");
    // create_indexes creates the collection.
    let meta = storage
        .create_indexes(
            &ns,
            vec![
                index_spec("tags_1", &[("tags", 1)], false, false, None),
                index_spec("s_1", &[("s", 1)], true, true, None),
                index_spec("p_1", &[("p", 1)], true, false, Some(doc! {"live": true})),
                index_spec("a_1_b_1", &[("a", 1), ("b", 1)], false, false, None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        index_names(&meta),
        vec!["_id_", "tags_1", "s_1", "p_1", "a_1_b_1"]
    );
    assert_eq!(meta.indexes[2].spec.get_bool("unique"), Ok(true));
    assert_eq!(meta.indexes[3].partial_filter, Some(doc! {"live": true}));
    // Existing names are skipped; the _id_ spec is never duplicated.
    let again = storage
        .create_indexes(
            &ns,
            vec![
                index_spec("tags_1", &[("tags", 1)], false, false, None),
                index_spec("_id_", &[("_id", 1)], true, false, None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(again.indexes, meta.indexes);

    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 1, "tags": ["x", "y", "x"], "p": 1, "live": true}),
            insert(doc! {"_id": 2, "tags": "y", "p": 1, "live": false}),
            insert(doc! {"_id": 3, "tags": [], "p": 1}),
            insert(doc! {"_id": 4, "s": 1}),
        ],
    )
    .await;

    // Multikey: one entry per distinct element.
    let y = key(&[(Bson::String("y".into()), 1)]);
    let x = key(&[(Bson::String("x".into()), 1)]);
    let by_y = scan_all(
        storage,
        &ns,
        index_source("tags_1", vec![point(y)]),
        false,
        10,
    )
    .await;
    assert_eq!(ids(&by_y), int_ids([1, 2]));
    let all_tags = scan_all(
        storage,
        &ns,
        index_source("tags_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        10,
    )
    .await;
    // [] is Undefined (3), missing is Null (4), then "x" (1), "y" (1, 2).
    assert_eq!(ids(&all_tags), int_ids([3, 4, 1, 1, 2]));
    let by_x = scan_all(
        storage,
        &ns,
        index_source("tags_1", vec![point(x)]),
        false,
        10,
    )
    .await;
    assert_eq!(ids(&by_x), int_ids([1]));

    // Sparse unique: documents without the field are not indexed (and not duplicates).
    let sparse = scan_all(
        storage,
        &ns,
        index_source("s_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        10,
    )
    .await;
    assert_eq!(ids(&sparse), int_ids([4]));
    let results = storage
        .write(&ns, vec![insert(doc! {"_id": 5, "s": 1})], ORDERED)
        .await
        .unwrap();
    assert!(matches!(&results[0], Err(StorageError::DuplicateKey { index, .. }) if index == "s_1"));

    // Partial unique: only live documents are indexed, so p: 1 repeats outside the filter.
    let partial = scan_all(
        storage,
        &ns,
        index_source("p_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        10,
    )
    .await;
    assert_eq!(ids(&partial), int_ids([1]));
    let results = storage
        .write(
            &ns,
            vec![insert(doc! {"_id": 6, "p": 1, "live": true})],
            ORDERED,
        )
        .await
        .unwrap();
    assert!(matches!(&results[0], Err(StorageError::DuplicateKey { index, .. }) if index == "p_1"));
    // Leaving the filter by replace removes the entry.
    let rev = storage
        .get(&ns, &Bson::Int32(1))
        .await
        .unwrap()
        .unwrap()
        .rev;
    write_ok(
        storage,
        &ns,
        vec![replace(1, rev, doc! {"_id": 1, "p": 1, "live": false})],
    )
    .await;
    write_ok(
        storage,
        &ns,
        vec![insert(doc! {"_id": 6, "p": 1, "live": true})],
    )
    .await;
    let by_y = scan_all(
        storage,
        &ns,
        index_source("tags_1", vec![point(key(&[(Bson::String("y".into()), 1)]))]),
        false,
        10,
    )
    .await;
    assert_eq!(
        ids(&by_y),
        int_ids([2]),
        "replace removed the old multikey entries"
    );

    // Parallel arrays.
    let results = storage
        .write(
            &ns,
            vec![insert(doc! {"_id": 7, "a": [1, 2], "b": [3, 4]})],
            ORDERED,
        )
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![Err(StorageError::CannotIndexParallelArrays(
            "b".into(),
            "a".into()
        ))]
    );
    assert_eq!(storage.get(&ns, &Bson::Int32(7)).await.unwrap(), None);
    write_ok(
        storage,
        &ns,
        vec![insert(doc! {"_id": 7, "a": [1, 2], "b": 3})],
    )
    .await;
    let rev = storage
        .get(&ns, &Bson::Int32(7))
        .await
        .unwrap()
        .unwrap()
        .rev;
    let results = storage
        .write(
            &ns,
            vec![replace(7, rev, doc! {"_id": 7, "a": [1], "b": [2, 3]})],
            ORDERED,
        )
        .await
        .unwrap();
    assert!(matches!(
        results[0],
        Err(StorageError::CannotIndexParallelArrays(..))
    ));
    let ns_parallel = Namespace::new(db, "parallel");
    write_ok(
        storage,
        &ns_parallel,
        vec![insert(doc! {"_id": 1, "c": [1], "d": [2]})],
    )
    .await;
    let result = storage
        .create_indexes(
            &ns_parallel,
            vec![index_spec(
                "c_1_d_1",
                &[("c", 1), ("d", 1)],
                false,
                false,
                None,
            )],
        )
        .await;
    assert!(matches!(
        result,
        Err(StorageError::CannotIndexParallelArrays(..))
    ));
    assert_eq!(
        index_names(&storage.collection(&ns_parallel).await.unwrap().unwrap()),
        vec!["_id_"]
    );

    // Unsupported index types, and a text key pattern without a text spec.
    let mut geo = index_spec("t_2dsphere", &[("t", 1)], false, false, None);
    geo.spec.insert("key", doc! {"t": "2dsphere"});
    assert!(matches!(
        storage.create_indexes(&ns, vec![geo]).await,
        Err(StorageError::InvalidIndex(_))
    ));
    let mut text = index_spec("t_text", &[("t", 1)], false, false, None);
    text.spec.insert("key", doc! {"_fts": "text", "_ftsx": 1});
    assert!(matches!(
        storage.create_indexes(&ns, vec![text]).await,
        Err(StorageError::InvalidIndex(_))
    ));

    // update_index_spec keeps the key; drop_indexes.
    let mut ttl_spec = meta.indexes[1].spec.clone();
    ttl_spec.insert("expireAfterSeconds", 60);
    storage
        .update_index_spec(&ns, "tags_1", ttl_spec.clone())
        .await
        .unwrap();
    let updated = storage.collection(&ns).await.unwrap().unwrap();
    assert_eq!(updated.indexes[1].spec, ttl_spec);
    assert_eq!(updated.indexes[1].key, meta.indexes[1].key);
    assert!(matches!(
        storage
            .update_index_spec(&ns, "nope", Document::new())
            .await,
        Err(StorageError::IndexNotFound(_))
    ));
    assert!(matches!(
        storage.drop_indexes(&ns, &["nope".to_string()]).await,
        Err(StorageError::IndexNotFound(name)) if name == "nope"
    ));
    assert!(storage
        .drop_indexes(&ns, &["_id_".to_string()])
        .await
        .is_err());
    storage
        .drop_indexes(&ns, &["s_1".to_string(), "p_1".to_string()])
        .await
        .unwrap();
    let after_drop = storage.collection(&ns).await.unwrap().unwrap();
    assert_eq!(index_names(&after_drop), vec!["_id_", "tags_1", "a_1_b_1"]);
    // The dropped unique index no longer constrains.
    write_ok(storage, &ns, vec![insert(doc! {"_id": 8, "s": 1})]).await;
    assert!(matches!(
        storage
            .scan(
                &ns,
                ScanRequest {
                    source: index_source("s_1", vec![]),
                    resume_after: None,
                    reverse: false,
                    limit: 1,
                    hide: None,
                    key_filter: None,
                    covered: false,
                }
            )
            .await,
        Err(StorageError::IndexNotFound(_))
    ));
    assert!(matches!(
        storage
            .drop_indexes(&Namespace::new(db, "missing"), &[])
            .await,
        Err(StorageError::NamespaceNotFound(_))
    ));
    // Recreating an index rebuilds it from the documents.
    storage
        .create_indexes(&ns, vec![index_spec("s_1", &[("s", 1)], false, true, None)])
        .await
        .unwrap();
    let rebuilt = scan_all(
        storage,
        &ns,
        index_source("s_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        10,
    )
    .await;
    assert_eq!(ids(&rebuilt), int_ids([4, 8]));
    cleanup(storage, db).await;
}

/// Collection and index scans: forward/reverse, multiple ranges, paging with resume keys.
pub async fn scans(storage: &dyn Storage) {
    let db = "conf_scans";
    let ns = Namespace::new(db, "s");
    const N: i32 = 40;
    let docs: Vec<WriteOp> = (0..N)
        .rev()
        .map(|i| insert(doc! {"_id": i, "a": i % 5, "b": -i, "m": [i % 3, 10 + i % 3]}))
        .collect();
    write_ok(storage, &ns, docs).await;
    storage
        .create_indexes(
            &ns,
            vec![
                index_spec("a_1", &[("a", 1)], false, false, None),
                index_spec("b_-1", &[("b", -1)], true, false, None),
                index_spec("m_1", &[("m", 1)], false, false, None),
            ],
        )
        .await
        .unwrap();

    let forward = int_ids(0..N);
    // Collection scans are in insertion order: `_id` N - 1 down to 0.
    let inserted = int_ids((0..N).rev());
    for page in [1, 3, 7, 40, 1000] {
        let all = scan_all(storage, &ns, ScanSource::Collection, false, page).await;
        assert_eq!(ids(&all), inserted, "collection scan, page {page}");
        let all = scan_all(storage, &ns, ScanSource::Collection, true, page).await;
        assert_eq!(ids(&all), forward, "reverse collection scan, page {page}");
    }

    // a in {1} ∪ [3, 4]: order by (a, _id).
    let ranges = vec![
        point(key(&[(Bson::Int32(1), 1)])),
        (
            Bound::Included(key(&[(Bson::Int32(3), 1)])),
            Bound::Included(key(&[(Bson::Int32(4), 1)])),
        ),
    ];
    let mut expected: Vec<(i32, i32)> = (0..N)
        .filter(|i| matches!(i % 5, 1 | 3 | 4))
        .map(|i| (i % 5, i))
        .collect();
    expected.sort();
    let expected_ids: Vec<Bson> = expected.iter().map(|(_, id)| Bson::Int32(*id)).collect();
    let expected_reverse: Vec<Bson> = expected_ids.iter().rev().cloned().collect();
    for page in [1, 2, 5, 100] {
        let found = scan_all(
            storage,
            &ns,
            index_source("a_1", ranges.clone()),
            false,
            page,
        )
        .await;
        assert_eq!(ids(&found), expected_ids, "index scan, page {page}");
        let found = scan_all(
            storage,
            &ns,
            index_source("a_1", ranges.clone()),
            true,
            page,
        )
        .await;
        assert_eq!(
            ids(&found),
            expected_reverse,
            "reverse index scan, page {page}"
        );
    }
    // Exclusive bounds: 1 < a < 4.
    let exclusive = vec![(
        Bound::Excluded(key(&[(Bson::Int32(1), 1)])),
        Bound::Excluded(key(&[(Bson::Int32(4), 1)])),
    )];
    let found = scan_all(storage, &ns, index_source("a_1", exclusive), false, 3).await;
    let mut expected: Vec<(i32, i32)> = (0..N)
        .filter(|i| matches!(i % 5, 2 | 3))
        .map(|i| (i % 5, i))
        .collect();
    expected.sort();
    assert_eq!(
        ids(&found),
        expected
            .iter()
            .map(|(_, id)| Bson::Int32(*id))
            .collect::<Vec<_>>()
    );

    // Descending unique index: b = -i descending is _id ascending.
    let found = scan_all(
        storage,
        &ns,
        index_source("b_-1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        6,
    )
    .await;
    assert_eq!(ids(&found), forward);
    // -10 >= b >= -12 in descending key order: bounds are over the descending encoding.
    let found = scan_all(
        storage,
        &ns,
        index_source(
            "b_-1",
            vec![(
                Bound::Included(key(&[(Bson::Int32(-10), -1)])),
                Bound::Included(key(&[(Bson::Int32(-12), -1)])),
            )],
        ),
        true,
        1,
    )
    .await;
    assert_eq!(ids(&found), int_ids([12, 11, 10]));

    // Multikey: a document appears once per matching entry.
    let found = scan_all(
        storage,
        &ns,
        index_source("m_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        4,
    )
    .await;
    assert_eq!(found.len(), 2 * N as usize);

    // The _id_ index scans the collection by _id ranges.
    let found = scan_all(
        storage,
        &ns,
        index_source(
            "_id_",
            vec![
                (
                    Bound::Included(encode_id(&Bson::Int32(5))),
                    Bound::Excluded(encode_id(&Bson::Int32(8))),
                ),
                point(encode_id(&Bson::Double(20.0))),
            ],
        ),
        false,
        2,
    )
    .await;
    assert_eq!(ids(&found), int_ids([5, 6, 7, 20]));

    // Empty results, missing collection and unknown index.
    let found = scan_all(
        storage,
        &ns,
        index_source("a_1", vec![point(key(&[(Bson::Int32(9), 1)]))]),
        false,
        5,
    )
    .await;
    assert!(found.is_empty());
    let found = scan_all(storage, &ns, index_source("a_1", vec![]), false, 5).await;
    assert!(found.is_empty());
    let missing = Namespace::new(db, "missing");
    assert!(
        scan_all(storage, &missing, ScanSource::Collection, false, 5)
            .await
            .is_empty()
    );
    assert!(
        scan_all(storage, &missing, index_source("a_1", vec![]), false, 5)
            .await
            .is_empty()
    );
    assert!(matches!(
        storage
            .scan(
                &ns,
                ScanRequest {
                    source: index_source("nope", vec![]),
                    resume_after: None,
                    reverse: false,
                    limit: 5,
                    hide: None,
                    key_filter: None,
                    covered: false,
                }
            )
            .await,
        Err(StorageError::IndexNotFound(_))
    ));

    // Writes between pages: the scan continues after the resume key.
    let first = collection_page(storage, &ns, None, false, 10).await;
    assert_eq!(ids(&first.records), int_ids((30..N).rev()));
    // The resume key's own document goes too: the scan continues after its place.
    write_ok(
        storage,
        &ns,
        vec![
            delete(10, None),
            delete(30, None),
            insert(doc! {"_id": 5.5, "b": 1000}),
        ],
    )
    .await;
    let rest = collection_page(storage, &ns, first.resume, false, 1000).await;
    let mut expected = int_ids((11..30).rev());
    expected.extend(int_ids((0..10).rev()));
    expected.push(Bson::Double(5.5));
    assert_eq!(ids(&rest.records), expected, "inserted since: at the end");
    assert_eq!(rest.resume, None);
    cleanup(storage, db).await;
}

/// The `_id`s of a whole collection scan, paged by `page`, forward or in reverse.
async fn natural_ids(
    storage: &dyn Storage,
    ns: &Namespace,
    reverse: bool,
    page: usize,
) -> Vec<Bson> {
    ids(&scan_all(storage, ns, ScanSource::Collection, reverse, page).await)
}

/// Asserts that collection scans of `ns` return `expected` forward and its reverse backward,
/// whatever the page size.
async fn assert_natural(storage: &dyn Storage, ns: &Namespace, expected: &[Bson], what: &str) {
    let reversed: Vec<Bson> = expected.iter().rev().cloned().collect();
    for page in [1, 2, 3, 1000] {
        assert_eq!(
            natural_ids(storage, ns, false, page).await,
            expected,
            "{what}: forward, page {page}"
        );
        assert_eq!(
            natural_ids(storage, ns, true, page).await,
            reversed,
            "{what}: reverse, page {page}"
        );
    }
}

/// Natural order is insertion order (mongod's record ids): whatever the `_id`s and their types,
/// forward and reverse, across batches; a replaced document keeps its place, whether it grows
/// or shrinks; one deleted and inserted again, one whose insert superseded its `_id` twin, and
/// one inserted again after reaping are new documents at the end; paging resumes after a deleted
/// position; a capped collection resumes only where it stopped; a clustered collection's natural
/// order is `_id` order. `_id` reads are unaffected.
pub async fn natural_order(storage: &dyn Storage) {
    let db = "conf_natural";
    let ns = Namespace::new(db, "n");
    let first: Vec<Bson> = vec![
        Bson::String("Bob".into()),
        Bson::String("Barak".into()),
        Bson::String("Al".into()),
        Bson::Int32(3),
    ];
    let second: Vec<Bson> = vec![
        Bson::Double(1.5),
        Bson::Document(doc! {"k": 1}),
        Bson::Int64(-7),
        Bson::String("Zed".into()),
        Bson::Boolean(true),
    ];
    let docs = |batch: &[Bson]| -> Vec<WriteOp> {
        batch
            .iter()
            .map(|id| insert(doc! {"_id": id.clone(), "v": 1}))
            .collect()
    };
    write_ok(storage, &ns, docs(&first)).await;
    write_ok(storage, &ns, docs(&second)).await;
    let mut expected: Vec<Bson> = first.iter().chain(&second).cloned().collect();
    assert_natural(storage, &ns, &expected, "inserted").await;
    // `_id` reads still go by `_id`.
    let by_id = scan_all(
        storage,
        &ns,
        index_source(
            IndexSpec::ID_INDEX_NAME,
            vec![(Bound::Unbounded, Bound::Unbounded)],
        ),
        false,
        2,
    )
    .await;
    let mut sorted = expected.clone();
    sorted.sort_by_key(encode_id);
    assert_eq!(ids(&by_id), sorted, "_id_ scan");
    let al = storage.get(&ns, &Bson::String("Al".into())).await.unwrap();
    assert_eq!(
        al.map(|record| record.doc.into_document()),
        Some(doc! {"_id": "Al", "v": 1})
    );

    // Replacements keep their place, growing or shrinking.
    let barak = Bson::String("Barak".into());
    let rev = current_rev_of(storage, &ns, &barak).await;
    let big = doc! {"_id": "Barak", "v": 2, "pad": "x".repeat(10_000)};
    write_ok(storage, &ns, vec![replace(barak.clone(), rev, big)]).await;
    let rev = current_rev_of(storage, &ns, &Bson::Int32(3)).await;
    write_ok(storage, &ns, vec![replace(3, rev, doc! {"_id": 3})]).await;
    assert_natural(storage, &ns, &expected, "after replacements").await;

    // Deleted and inserted again: a new document at the end.
    let bob = Bson::String("Bob".into());
    write_ok(storage, &ns, vec![delete(bob.clone(), None)]).await;
    write_ok(storage, &ns, vec![insert(doc! {"_id": "Bob", "v": 3})]).await;
    expected.retain(|id| *id != bob);
    expected.push(bob.clone());
    assert_natural(storage, &ns, &expected, "reinserted").await;

    // An insert that supersedes its `_id` twin: also at the end.
    let anything = RecordPredicate::new(|_| true);
    let outcomes = write_ok(
        storage,
        &ns,
        vec![insert_with(doc! {"_id": 1.5, "v": 4}, META, Some(anything))],
    )
    .await;
    assert_eq!(superseded_count(outcomes[0]), 1);
    expected.retain(|id| *id != Bson::Double(1.5));
    expected.push(Bson::Double(1.5));
    assert_natural(storage, &ns, &expected, "superseding insert").await;

    // Paging: the page's last document is deleted; the scan goes on after its place, and sees
    // what was inserted since at the end.
    let page = collection_page(storage, &ns, None, false, 3).await;
    assert_eq!(ids(&page.records), expected[..3].to_vec());
    assert!(!page.position_lost);
    let last = expected[2].clone();
    write_ok(
        storage,
        &ns,
        vec![delete(last.clone(), None), insert(doc! {"_id": "Cy"})],
    )
    .await;
    expected.retain(|id| *id != last);
    expected.push(Bson::String("Cy".into()));
    let rest = scan_all_after(storage, &ns, page.resume, false).await;
    assert_eq!(
        rest,
        expected[2..].to_vec(),
        "resumed after a deleted position"
    );
    // In reverse too.
    let page = collection_page(storage, &ns, None, true, 2).await;
    let reversed: Vec<Bson> = expected.iter().rev().cloned().collect();
    assert_eq!(ids(&page.records), reversed[..2].to_vec());
    let second_last = reversed[1].clone();
    write_ok(storage, &ns, vec![delete(second_last.clone(), None)]).await;
    expected.retain(|id| *id != second_last);
    let rest = scan_all_after(storage, &ns, page.resume, true).await;
    let reversed: Vec<Bson> = expected.iter().rev().cloned().collect();
    assert_eq!(
        rest,
        reversed[1..].to_vec(),
        "reverse, resumed after a deleted position"
    );

    // Reaping removes documents from natural order; one inserted again goes to the end.
    let reaped = Bson::String("Zed".into());
    let rev = current_rev_of(storage, &ns, &reaped).await;
    write_ok(
        storage,
        &ns,
        vec![replace_with(
            reaped.clone(),
            rev,
            doc! {"_id": "Zed"},
            meta(5, own(10)),
            None,
        )],
    )
    .await;
    let expired = RecordPredicate::new(|record| record.ttl == own(10));
    let source = ReapSource::Expiry {
        order: ExpiryOrder::OwnExpiry,
        range: ALL_TIMES,
    };
    assert_eq!(reap_all(storage, &ns, source, 10, &expired).await, 1);
    expected.retain(|id| *id != reaped);
    assert_natural(storage, &ns, &expected, "reaped").await;
    write_ok(storage, &ns, vec![insert(doc! {"_id": "Zed"})]).await;
    expected.push(reaped);
    assert_natural(storage, &ns, &expected, "inserted after reaping").await;

    // A renamed collection keeps its order.
    let renamed = Namespace::new(db, "renamed");
    storage
        .rename_collection(&ns, &renamed, false)
        .await
        .unwrap();
    assert_natural(storage, &renamed, &expected, "renamed").await;

    // Capped: insertion order, rollover takes the oldest, and a scan resumes only where it
    // stopped.
    let capped = Namespace::new(db, "capped");
    storage
        .create_collection(
            &capped,
            doc! {"capped": true, "size": 1_000_000, "max": 4},
            Vec::new(),
        )
        .await
        .unwrap();
    write_ok(storage, &capped, docs(&first)).await;
    assert_natural(storage, &capped, &first, "capped").await;
    let page = collection_page(storage, &capped, None, false, 1).await;
    assert_eq!(page.positions.len(), 1, "capped scans list positions");
    // Two more: "Bob" and "Barak" roll over.
    write_ok(storage, &capped, docs(&second[..2])).await;
    let mut kept: Vec<Bson> = first[2..].to_vec();
    kept.extend_from_slice(&second[..2]);
    assert_natural(storage, &capped, &kept, "capped after rollover").await;
    let lost = collection_page(storage, &capped, page.resume, false, 10).await;
    assert!(
        lost.position_lost && lost.records.is_empty(),
        "capped resume after rollover"
    );

    // Clustered: natural order is `_id` order.
    let clustered = Namespace::new(db, "clustered");
    let created = storage
        .create_collection(
            &clustered,
            doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}},
            Vec::new(),
        )
        .await
        .unwrap();
    assert!(created.clustered());
    write_ok(storage, &clustered, docs(&first)).await;
    write_ok(storage, &clustered, docs(&second)).await;
    let mut in_id_order: Vec<Bson> = first.iter().chain(&second).cloned().collect();
    in_id_order.sort_by_key(encode_id);
    assert_natural(storage, &clustered, &in_id_order, "clustered").await;
    let rev = current_rev_of(storage, &clustered, &bob).await;
    write_ok(storage, &clustered, vec![delete(bob.clone(), Some(rev))]).await;
    write_ok(storage, &clustered, vec![insert(doc! {"_id": "Bob"})]).await;
    assert_natural(storage, &clustered, &in_id_order, "clustered, reinserted").await;
    // Clusteredness is fixed at creation.
    assert!(matches!(
        storage.set_collection_options(&clustered, doc! {}).await,
        Err(StorageError::InvalidIndex(_))
    ));
    assert!(matches!(
        storage
            .set_collection_options(&renamed, doc! {"clusteredIndex": {"key": {"_id": 1}}})
            .await,
        Err(StorageError::InvalidIndex(_))
    ));
    storage
        .set_collection_options(&clustered, created.options.clone())
        .await
        .unwrap();
    cleanup(storage, db).await;
}

/// One page of a collection scan: at most `limit` records after `resume_after`.
async fn collection_page(
    storage: &dyn Storage,
    ns: &Namespace,
    resume_after: Option<Vec<u8>>,
    reverse: bool,
    limit: usize,
) -> ScanPage {
    storage
        .scan(
            ns,
            ScanRequest {
                source: ScanSource::Collection,
                resume_after,
                reverse,
                limit,
                hide: None,
                key_filter: None,
                covered: false,
            },
        )
        .await
        .expect("scan")
}

/// The rest of a collection scan after `resume` (`None`: nothing more), in one call per record.
async fn scan_all_after(
    storage: &dyn Storage,
    ns: &Namespace,
    mut resume: Option<Vec<u8>>,
    reverse: bool,
) -> Vec<Bson> {
    let mut found = Vec::new();
    while let Some(after) = resume.take() {
        let page = collection_page(storage, ns, Some(after), reverse, 1).await;
        assert!(
            !page.position_lost,
            "only capped collections lose positions"
        );
        found.extend(ids(&page.records));
        resume = page.resume;
    }
    found
}

/// A snapshot's collection scan positions: what `Snapshot::record_position` says of a stored
/// document is where its scan puts it; `Snapshot::appended_position` places new documents after
/// every stored one, in insert order (in a clustered collection, at their `_id`); resuming a
/// snapshot scan after such a position finds nothing more.
pub async fn snapshot_positions(storage: &dyn Storage) {
    let db = "conf_snapshot_positions";
    let ns = Namespace::new(db, "p");
    let clustered = Namespace::new(db, "c");
    storage
        .create_collection(
            &clustered,
            doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}},
            Vec::new(),
        )
        .await
        .unwrap();
    for coll in [&ns, &clustered] {
        write_ok(
            storage,
            coll,
            [9, 2, 7, 4]
                .into_iter()
                .map(|id| insert(doc! {"_id": id}))
                .collect(),
        )
        .await;
    }
    let snapshot = storage.snapshot().await.unwrap();
    for coll in [&ns, &clustered] {
        for reverse in [false, true] {
            let page = snapshot
                .scan(
                    coll,
                    ScanRequest {
                        source: ScanSource::Collection,
                        resume_after: None,
                        reverse,
                        limit: 100,
                        hide: None,
                        key_filter: None,
                        covered: false,
                    },
                )
                .await
                .unwrap();
            assert_eq!(page.positions.len(), page.records.len());
            for (position, record) in page.positions.iter().zip(&page.records) {
                let id_key = encode_id(&record.doc.id());
                assert_eq!(
                    snapshot
                        .record_position(coll, &id_key)
                        .await
                        .unwrap()
                        .as_ref(),
                    Some(position),
                    "{coll}: record_position of {:?}",
                    record.doc.id()
                );
            }
            let mut sorted = page.positions.clone();
            sorted.sort();
            if reverse {
                sorted.reverse();
            }
            assert_eq!(
                sorted, page.positions,
                "{coll}: positions order as the scan"
            );
        }
        assert_eq!(
            snapshot
                .record_position(coll, &encode_id(&Bson::Int32(5)))
                .await
                .unwrap(),
            None
        );
    }
    // New documents: after every stored one, by insert order.
    let stored: Vec<Vec<u8>> = [9, 2, 7, 4]
        .into_iter()
        .map(|id| encode_id(&Bson::Int32(id)))
        .collect();
    let mut last = Vec::new();
    for id in &stored {
        last = last.max(snapshot.record_position(&ns, id).await.unwrap().unwrap());
    }
    let new_b = snapshot
        .appended_position(&ns, &encode_id(&Bson::Int32(1)), 20)
        .unwrap();
    let new_a = snapshot
        .appended_position(&ns, &encode_id(&Bson::Int32(100)), 10)
        .unwrap();
    assert!(
        last < new_a && new_a < new_b,
        "appended after the stored, in insert order"
    );
    let after = snapshot
        .scan(
            &ns,
            ScanRequest {
                source: ScanSource::Collection,
                resume_after: Some(new_a.clone()),
                reverse: false,
                limit: 100,
                hide: None,
                key_filter: None,
                covered: false,
            },
        )
        .await
        .unwrap();
    assert!(after.records.is_empty() && !after.position_lost);
    let before = snapshot
        .scan(
            &ns,
            ScanRequest {
                source: ScanSource::Collection,
                resume_after: Some(new_a),
                reverse: true,
                limit: 100,
                hide: None,
                key_filter: None,
                covered: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&before.records), int_ids([4, 7, 2, 9]));
    // Clustered: at its `_id`.
    let five = snapshot
        .appended_position(&clustered, &encode_id(&Bson::Int32(5)), 1)
        .unwrap();
    let four = snapshot
        .record_position(&clustered, &encode_id(&Bson::Int32(4)))
        .await
        .unwrap()
        .unwrap();
    let seven = snapshot
        .record_position(&clustered, &encode_id(&Bson::Int32(7)))
        .await
        .unwrap()
        .unwrap();
    assert!(four < five && five < seven);
    assert_eq!(
        snapshot.appended_position(&Namespace::new(db, "missing"), &stored[0], 1),
        None
    );
    drop(snapshot);
    cleanup(storage, db).await;
}

/// Counts and sizes.
pub async fn stats(storage: &dyn Storage) {
    let db = "conf_stats";
    let ns = Namespace::new(db, "st");
    assert!(matches!(
        storage.stats(&ns).await,
        Err(StorageError::NamespaceNotFound(_))
    ));
    storage
        .create_collection(&ns, Document::new(), Vec::new())
        .await
        .unwrap();
    let empty = storage.stats(&ns).await.unwrap();
    assert_eq!((empty.count, empty.data_size), (0, 0));
    storage
        .create_indexes(
            &ns,
            vec![index_spec("a_1", &[("a", 1)], false, false, None)],
        )
        .await
        .unwrap();
    let docs: Vec<Document> = (0..25)
        .map(|i| doc! {"_id": i, "a": i, "pad": "x".repeat(i as usize)})
        .collect();
    let data_size: u64 = docs
        .iter()
        .map(|doc| {
            bson::to_vec(doc)
                .map(|bytes| bytes.len() as u64)
                .unwrap_or(0)
        })
        .sum();
    write_ok(storage, &ns, docs.into_iter().map(insert).collect()).await;
    let stats = storage.stats(&ns).await.unwrap();
    assert_eq!(stats.count, 25);
    assert_eq!(stats.data_size, data_size);
    assert!(stats.storage_size >= stats.data_size);
    let names: Vec<&str> = stats
        .index_sizes
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, vec!["_id_", "a_1"]);
    assert!(stats.index_sizes.iter().all(|(_, size)| *size > 0));

    let rev = storage
        .get(&ns, &Bson::Int32(0))
        .await
        .unwrap()
        .unwrap()
        .rev;
    let bigger = doc! {"_id": 0, "a": 0, "pad": "y".repeat(100)};
    let growth = bson::to_vec(&bigger).unwrap().len() as u64
        - bson::to_vec(&doc! {"_id": 0, "a": 0, "pad": ""})
            .unwrap()
            .len() as u64;
    write_ok(
        storage,
        &ns,
        vec![replace(0, rev, bigger), delete(24, None)],
    )
    .await;
    let after = storage.stats(&ns).await.unwrap();
    assert_eq!(after.count, 24);
    let last = bson::to_vec(&doc! {"_id": 24, "a": 24, "pad": "x".repeat(24)})
        .unwrap()
        .len() as u64;
    assert_eq!(after.data_size, data_size + growth - last);

    let databases = storage.list_databases().await.unwrap();
    let size = databases
        .iter()
        .find(|(name, _)| name == db)
        .map(|(_, size)| *size)
        .expect("database listed");
    assert_eq!(size, after.storage_size);
    cleanup(storage, db).await;
}

/// The expiry structures: which documents each holds (by class) and in which order, through
/// inserts, replaces that change the class or the time, deletes, ranges, paging, resume across
/// writes, rename and drop.
pub async fn expiry(storage: &dyn Storage) {
    use ExpiryOrder::{LastWrite, OwnExpiry};
    let db = "conf_expiry";
    let ns = Namespace::new(db, "e");
    assert!(expiry_all(storage, &ns, LastWrite, ALL_TIMES, 3)
        .await
        .is_empty());
    assert!(expiry_all(storage, &ns, OwnExpiry, ALL_TIMES, 3)
        .await
        .is_empty());

    // Negative times sort first; equal times order by _id.
    write_ok(
        storage,
        &ns,
        vec![
            insert_with(doc! {"_id": 1}, meta(30, TtlClass::Default), None),
            insert_with(doc! {"_id": 2}, meta(-5, TtlClass::Default), None),
            insert_with(doc! {"_id": 3}, meta(30, TtlClass::Default), None),
            insert_with(doc! {"_id": 4}, meta(10, TtlClass::Never), None),
            insert_with(doc! {"_id": 5}, meta(10, own(100)), None),
            insert_with(doc! {"_id": 6}, meta(10, own(-100)), None),
            insert_with(doc! {"_id": 7}, meta(20, own(100)), None),
        ],
    )
    .await;
    let record = storage.get(&ns, &Bson::Int32(5)).await.unwrap().unwrap();
    assert_eq!((record.last_write_ms, record.ttl), (10, own(100)));
    let record = storage.get(&ns, &Bson::Int32(4)).await.unwrap().unwrap();
    assert_eq!(record.ttl, TtlClass::Never);
    for page in [1, 2, 3, 100] {
        let found = expiry_all(storage, &ns, LastWrite, ALL_TIMES, page).await;
        assert_eq!(ids(&found), int_ids([2, 1, 3]), "last write, page {page}");
        assert!(found.iter().all(|record| record.ttl == TtlClass::Default));
        let found = expiry_all(storage, &ns, OwnExpiry, ALL_TIMES, page).await;
        assert_eq!(ids(&found), int_ids([6, 5, 7]), "own expiry, page {page}");
        assert_eq!(
            found.iter().map(|record| record.ttl).collect::<Vec<_>>(),
            vec![own(-100), own(100), own(100)]
        );
    }

    // Ranges: every bound kind, at and around the stored times.
    let cases: Vec<(ExpiryOrder, TimeRange, Vec<i32>)> = vec![
        (
            LastWrite,
            (Bound::Included(-5), Bound::Excluded(30)),
            vec![2],
        ),
        (
            LastWrite,
            (Bound::Excluded(-5), Bound::Included(30)),
            vec![1, 3],
        ),
        (LastWrite, (Bound::Unbounded, Bound::Excluded(-5)), vec![]),
        (LastWrite, (Bound::Unbounded, Bound::Included(-5)), vec![2]),
        (
            LastWrite,
            (Bound::Included(30), Bound::Unbounded),
            vec![1, 3],
        ),
        (LastWrite, (Bound::Excluded(30), Bound::Unbounded), vec![]),
        (
            LastWrite,
            (Bound::Included(31), Bound::Included(29)),
            vec![],
        ),
        (LastWrite, (Bound::Included(7), Bound::Excluded(7)), vec![]),
        (
            OwnExpiry,
            (Bound::Included(-100), Bound::Included(99)),
            vec![6],
        ),
        (
            OwnExpiry,
            (Bound::Included(i64::MIN), Bound::Included(i64::MAX)),
            vec![6, 5, 7],
        ),
        (
            OwnExpiry,
            (Bound::Excluded(i64::MAX), Bound::Unbounded),
            vec![],
        ),
        (
            OwnExpiry,
            (Bound::Included(100), Bound::Included(100)),
            vec![5, 7],
        ),
    ];
    for (order, range, expected) in cases {
        for page in [1, 2, 10] {
            let found = expiry_all(storage, &ns, order, range, page).await;
            assert_eq!(
                ids(&found),
                int_ids(expected.clone()),
                "{order:?} {range:?}, page {page}"
            );
        }
    }

    // Replaces move documents between and within the structures, using the old header.
    let rev = |id: i32| current_rev(storage, &ns, id);
    let ops = vec![
        // Default → Own, Own → Never, Never → Default, Default → Default at a later time.
        replace_with(
            1,
            rev(1).await,
            doc! {"_id": 1, "v": 1},
            meta(40, own(50)),
            None,
        ),
        replace_with(
            5,
            rev(5).await,
            doc! {"_id": 5, "v": 1},
            meta(40, TtlClass::Never),
            None,
        ),
        replace_with(
            4,
            rev(4).await,
            doc! {"_id": 4, "v": 1},
            meta(0, TtlClass::Default),
            None,
        ),
        replace_with(
            2,
            rev(2).await,
            doc! {"_id": 2, "v": 1},
            meta(60, TtlClass::Default),
            None,
        ),
        // Own → Own with a different expiry.
        replace_with(
            7,
            rev(7).await,
            doc! {"_id": 7, "v": 1},
            meta(40, own(-200)),
            None,
        ),
    ];
    let outcomes = write_ok(storage, &ns, ops).await;
    assert!(outcomes
        .iter()
        .all(|outcome| superseded_count(*outcome) == 0));
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([4, 3, 2]), int_ids([7, 6, 1]))
    );
    let found = expiry_all(storage, &ns, LastWrite, ALL_TIMES, 10).await;
    assert_eq!(
        found
            .iter()
            .map(|record| record.last_write_ms)
            .collect::<Vec<_>>(),
        vec![0, 30, 60]
    );

    // Deletes remove the entries.
    write_ok(storage, &ns, vec![delete(3, None), delete(6, None)]).await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([4, 2]), int_ids([7, 1]))
    );
    // A failed write leaves the structures alone.
    let results = storage
        .write(
            &ns,
            vec![
                insert_with(doc! {"_id": 4}, meta(-1, own(-1)), None),
                replace_with(2, 1, doc! {"_id": 2}, meta(-1, own(-1)), None),
            ],
            UNORDERED,
        )
        .await
        .unwrap();
    assert!(matches!(results[0], Err(StorageError::DuplicateKey { .. })));
    assert_eq!(results[1], Err(StorageError::WriteConflict));
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([4, 2]), int_ids([7, 1]))
    );

    // Resume after writes between pages: continues strictly after the last returned entry.
    let first = storage
        .expiry_scan(&ns, LastWrite, ALL_TIMES, None, 1)
        .await
        .unwrap();
    assert_eq!(ids(&first.records), int_ids([4]));
    write_ok(
        storage,
        &ns,
        vec![
            insert_with(doc! {"_id": 8}, meta(-50, TtlClass::Default), None),
            insert_with(doc! {"_id": 9}, meta(1000, TtlClass::Default), None),
            insert_with(doc! {"_id": 0}, meta(0, TtlClass::Default), None),
        ],
    )
    .await;
    let rest = storage
        .expiry_scan(&ns, LastWrite, ALL_TIMES, first.resume, 100)
        .await
        .unwrap();
    assert_eq!(ids(&rest.records), int_ids([2, 9]));
    assert_eq!(rest.resume, None);

    // Rename keeps the structures; drop removes them.
    let renamed = Namespace::new(db, "renamed");
    storage
        .rename_collection(&ns, &renamed, false)
        .await
        .unwrap();
    assert_eq!(
        expiry_ids(storage, &renamed).await,
        (int_ids([8, 0, 4, 2, 9]), int_ids([7, 1]))
    );
    assert_eq!(expiry_ids(storage, &ns).await, (vec![], vec![]));
    assert!(storage.drop_collection(&renamed).await.unwrap());
    assert_eq!(expiry_ids(storage, &renamed).await, (vec![], vec![]));
    write_ok(
        storage,
        &renamed,
        vec![insert_with(doc! {"_id": 1}, meta(5, own(6)), None)],
    )
    .await;
    assert_eq!(
        expiry_ids(storage, &renamed).await,
        (vec![], int_ids([1])),
        "a recreated collection starts empty"
    );
    cleanup(storage, db).await;
    assert_eq!(expiry_ids(storage, &renamed).await, (vec![], vec![]));
}

/// Superseding conflicting documents: on `_id` and on unique keys, for insert and replace, with
/// no predicate, a false one and a true one; all or nothing; counted once per document; the
/// superseded documents' index and expiry entries are gone.
pub async fn supersede(storage: &dyn Storage) {
    let db = "conf_supersede";
    let ns = Namespace::new(db, "s");
    storage
        .create_indexes(
            &ns,
            vec![
                index_spec("u_1", &[("u", 1)], true, false, None),
                index_spec("v_1", &[("v", 1)], true, true, None),
                index_spec("a_1", &[("a", 1)], false, false, None),
            ],
        )
        .await
        .unwrap();
    let always = RecordPredicate::new(|_: &RawRecord| true);
    let never = RecordPredicate::new(|_: &RawRecord| false);
    // A caller rule over the stored record (here: a flag in the document).
    let expired =
        RecordPredicate::new(|record: &RawRecord| record.doc.get_bool("expired").unwrap_or(false));
    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 1, "u": 1, "a": "x", "expired": true}),
            insert_with(
                doc! {"_id": 2, "u": 2, "a": "y", "expired": false},
                meta(10, own(500)),
                None,
            ),
            insert_with(
                doc! {"_id": 3, "u": 3, "a": "z", "expired": true},
                meta(20, own(600)),
                None,
            ),
        ],
    )
    .await;
    let by = |index: &str, value: Bson| {
        let source = index_source(index, vec![point(key(&[(value, 1)]))]);
        let ns = &ns;
        async move { ids(&scan_all(storage, ns, source, false, 10).await) }
    };
    let duplicate = |results: &[Result<WriteOutcome, StorageError>], expected: &str| {
        assert!(
            matches!(&results[0], Err(StorageError::DuplicateKey { index, .. }) if index == expected),
            "expected a duplicate key on {expected}: {results:?}"
        );
    };

    // _id conflict: no predicate, a false predicate, a predicate false for this document.
    for supersede in [None, Some(never.clone())] {
        let results = storage
            .write(
                &ns,
                vec![insert_with(doc! {"_id": 1, "u": 10}, META, supersede)],
                ORDERED,
            )
            .await
            .unwrap();
        duplicate(&results, "_id_");
    }
    let results = storage
        .write(
            &ns,
            vec![insert_with(
                doc! {"_id": 2, "u": 10},
                META,
                Some(expired.clone()),
            )],
            ORDERED,
        )
        .await
        .unwrap();
    duplicate(&results, "_id_");
    assert_eq!(by("u_1", Bson::Int32(10)).await, vec![]);

    // _id conflict, predicate true: the old document and all its entries are replaced.
    let outcome = write_ok(
        storage,
        &ns,
        vec![insert_with(
            doc! {"_id": 1, "u": 11, "a": "new"},
            meta(40, TtlClass::Never),
            Some(expired.clone()),
        )],
    )
    .await;
    assert_eq!(superseded_count(outcome[0]), 1);
    let record = storage.get(&ns, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(record.doc, doc! {"_id": 1, "u": 11, "a": "new"});
    assert_eq!(record.ttl, TtlClass::Never);
    assert_eq!(by("a_1", Bson::String("x".into())).await, vec![]);
    assert_eq!(by("u_1", Bson::Int32(1)).await, vec![]);
    assert_eq!(by("u_1", Bson::Int32(11)).await, int_ids([1]));
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (vec![], int_ids([2, 3])),
        "the superseded Default-class entry is gone; the new document is Never"
    );

    // Unique-key conflict on insert, predicate false for the holder.
    let results = storage
        .write(
            &ns,
            vec![insert_with(
                doc! {"_id": 5, "u": 2},
                META,
                Some(expired.clone()),
            )],
            ORDERED,
        )
        .await
        .unwrap();
    duplicate(&results, "u_1");
    assert_eq!(storage.get(&ns, &Bson::Int32(5)).await.unwrap(), None);
    // ... and true: the holder (another _id) is deleted with its entries.
    let outcome = write_ok(
        storage,
        &ns,
        vec![insert_with(
            doc! {"_id": 4, "u": 3},
            meta(50, TtlClass::Default),
            Some(expired.clone()),
        )],
    )
    .await;
    assert_eq!(superseded_count(outcome[0]), 1);
    assert_eq!(storage.get(&ns, &Bson::Int32(3)).await.unwrap(), None);
    assert_eq!(by("a_1", Bson::String("z".into())).await, vec![]);
    assert_eq!(by("u_1", Bson::Int32(3)).await, int_ids([4]));
    assert_eq!(expiry_ids(storage, &ns).await, (int_ids([4]), int_ids([2])));

    // Two conflicting documents, one not supersedable: nothing happens at all.
    let only_4 =
        RecordPredicate::new(|record: &RawRecord| record.doc.get_i32("_id").ok() == Some(4));
    let results = storage
        .write(
            &ns,
            vec![insert_with(
                doc! {"_id": 4, "u": 2},
                META,
                Some(only_4.clone()),
            )],
            ORDERED,
        )
        .await
        .unwrap();
    duplicate(&results, "u_1");
    assert_eq!(
        storage
            .get(&ns, &Bson::Int32(4))
            .await
            .unwrap()
            .unwrap()
            .doc,
        doc! {"_id": 4, "u": 3}
    );
    assert!(storage.get(&ns, &Bson::Int32(2)).await.unwrap().is_some());
    assert_eq!(expiry_ids(storage, &ns).await, (int_ids([4]), int_ids([2])));
    // Both supersedable: both go.
    let outcome = write_ok(
        storage,
        &ns,
        vec![insert_with(
            doc! {"_id": 4, "u": 2, "a": "w"},
            meta(60, own(70)),
            Some(always.clone()),
        )],
    )
    .await;
    assert_eq!(superseded_count(outcome[0]), 2);
    assert_eq!(storage.get(&ns, &Bson::Int32(2)).await.unwrap(), None);
    assert_eq!(by("a_1", Bson::String("y".into())).await, vec![]);
    assert_eq!(by("u_1", Bson::Int32(2)).await, int_ids([4]));
    assert_eq!(by("u_1", Bson::Int32(3)).await, vec![]);
    assert_eq!(expiry_ids(storage, &ns).await, (vec![], int_ids([4])));

    // One document conflicting on two unique indexes counts once.
    write_ok(
        storage,
        &ns,
        vec![insert(doc! {"_id": 10, "u": 20, "v": 20})],
    )
    .await;
    let outcome = write_ok(
        storage,
        &ns,
        vec![insert_with(
            doc! {"_id": 11, "u": 20, "v": 20},
            META,
            Some(always.clone()),
        )],
    )
    .await;
    assert_eq!(superseded_count(outcome[0]), 1);
    assert_eq!(storage.get(&ns, &Bson::Int32(10)).await.unwrap(), None);
    assert_eq!(by("v_1", Bson::Int32(20)).await, int_ids([11]));

    // Replace: a unique conflict with another document.
    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 20, "u": 30, "a": "r"}),
            insert_with(
                doc! {"_id": 21, "u": 31, "a": "s", "expired": true},
                meta(5, own(6)),
                None,
            ),
        ],
    )
    .await;
    let rev20 = current_rev(storage, &ns, 20).await;
    for supersede in [None, Some(never.clone())] {
        let results = storage
            .write(
                &ns,
                vec![replace_with(
                    20,
                    rev20,
                    doc! {"_id": 20, "u": 31},
                    META,
                    supersede,
                )],
                ORDERED,
            )
            .await
            .unwrap();
        duplicate(&results, "u_1");
    }
    assert_eq!(
        storage
            .get(&ns, &Bson::Int32(20))
            .await
            .unwrap()
            .unwrap()
            .rev,
        rev20
    );
    let outcome = write_ok(
        storage,
        &ns,
        vec![replace_with(
            20,
            rev20,
            doc! {"_id": 20, "u": 31},
            META,
            Some(expired.clone()),
        )],
    )
    .await;
    assert!(matches!(
        outcome[0],
        WriteOutcome::Replaced { superseded: 1, .. }
    ));
    assert_eq!(storage.get(&ns, &Bson::Int32(21)).await.unwrap(), None);
    assert_eq!(by("a_1", Bson::String("s".into())).await, vec![]);
    assert_eq!(by("a_1", Bson::String("r".into())).await, vec![]);
    assert_eq!(by("u_1", Bson::Int32(31)).await, int_ids([20]));
    assert_eq!(by("u_1", Bson::Int32(30)).await, vec![]);
    assert_eq!(
        expiry_ids(storage, &ns).await.1,
        int_ids([4]),
        "the superseded Own-class entry is gone"
    );
    // The replaced document itself is never superseded (its own keys are no conflict).
    let rev20 = current_rev(storage, &ns, 20).await;
    let outcome = write_ok(
        storage,
        &ns,
        vec![replace_with(
            20,
            rev20,
            doc! {"_id": 20, "u": 31, "b": 1},
            META,
            Some(always.clone()),
        )],
    )
    .await;
    assert!(matches!(
        outcome[0],
        WriteOutcome::Replaced { superseded: 0, .. }
    ));
    assert!(storage.get(&ns, &Bson::Int32(20)).await.unwrap().is_some());
    // Without conflicts a predicate is never consulted and supersedes nothing.
    let outcome = write_ok(
        storage,
        &ns,
        vec![insert_with(doc! {"_id": 30, "u": 40}, META, Some(always))],
    )
    .await;
    assert_eq!(superseded_count(outcome[0]), 0);
    let count = storage.stats(&ns).await.unwrap().count;
    assert_eq!(count, 5, "documents 1, 4, 11, 20 and 30 remain");
    cleanup(storage, db).await;
}

/// Catalog-only indexes: recorded and listed, never built or maintained, empty scans, no
/// constraint; spec updates (for any index) rewrite no document; droppable.
pub async fn catalog_only_indexes(storage: &dyn Storage) {
    let db = "conf_catalog_only";
    let ns = Namespace::new(db, "c");
    write_ok(
        storage,
        &ns,
        vec![
            insert(doc! {"_id": 1, "_ts": 5, "a": 1}),
            insert(doc! {"_id": 2, "_ts": 5, "a": 2}),
        ],
    )
    .await;
    let mut ts = index_spec("_ts_1", &[("_ts", 1)], true, false, None);
    ts.catalog_only = true;
    ts.spec.insert("expireAfterSeconds", 60);
    let meta = storage
        .create_indexes(
            &ns,
            vec![
                ts.clone(),
                index_spec("a_1", &[("a", 1)], false, false, None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(index_names(&meta), vec!["_id_", "_ts_1", "a_1"]);
    assert_eq!(*meta.indexes[1], ts);
    assert!(!meta.indexes[2].catalog_only);
    let all = || index_source("_ts_1", vec![(Bound::Unbounded, Bound::Unbounded)]);
    assert!(scan_all(storage, &ns, all(), false, 5).await.is_empty());
    // Writes maintain nothing for it and it constrains nothing (not even unique).
    write_ok(storage, &ns, vec![insert(doc! {"_id": 3, "_ts": 5})]).await;
    let rev = current_rev(storage, &ns, 1).await;
    write_ok(
        storage,
        &ns,
        vec![
            replace(1, rev, doc! {"_id": 1, "_ts": 6, "a": 1}),
            delete(2, None),
        ],
    )
    .await;
    assert!(scan_all(storage, &ns, all(), true, 5).await.is_empty());
    // Creating it again is a no-op.
    let again = storage.create_indexes(&ns, vec![ts.clone()]).await.unwrap();
    assert_eq!(
        again.indexes,
        storage.collection(&ns).await.unwrap().unwrap().indexes
    );

    // update_index_spec replaces the spec document only, for any index, rewriting no document.
    let revs: Vec<u64> = scan_all(storage, &ns, ScanSource::Collection, false, 10)
        .await
        .iter()
        .map(|record| record.rev)
        .collect();
    let mut new_spec = ts.spec.clone();
    new_spec.insert("expireAfterSeconds", 120);
    storage
        .update_index_spec(&ns, "_ts_1", new_spec.clone())
        .await
        .unwrap();
    let mut a_spec = meta.indexes[2].spec.clone();
    a_spec.insert("expireAfterSeconds", 5);
    storage
        .update_index_spec(&ns, "a_1", a_spec.clone())
        .await
        .unwrap();
    let mut id_spec = meta.indexes[0].spec.clone();
    id_spec.insert("comment", "x");
    storage
        .update_index_spec(&ns, "_id_", id_spec.clone())
        .await
        .unwrap();
    let updated = storage.collection(&ns).await.unwrap().unwrap();
    assert_eq!(updated.indexes[0].spec, id_spec);
    assert_eq!(updated.indexes[1].spec, new_spec);
    assert!(updated.indexes[1].catalog_only);
    assert_eq!(updated.indexes[1].key, ts.key);
    assert_eq!(updated.indexes[2].spec, a_spec);
    let after: Vec<u64> = scan_all(storage, &ns, ScanSource::Collection, false, 10)
        .await
        .iter()
        .map(|record| record.rev)
        .collect();
    assert_eq!(after, revs, "no document was rewritten");
    let by_a = scan_all(
        storage,
        &ns,
        index_source("a_1", vec![(Bound::Unbounded, Bound::Unbounded)]),
        false,
        10,
    )
    .await;
    assert_eq!(
        ids(&by_a),
        int_ids([3, 1]),
        "entries kept (missing a is Null)"
    );
    assert!(scan_all(storage, &ns, all(), false, 5).await.is_empty());

    // Drop it.
    storage
        .drop_indexes(&ns, &["_ts_1".to_string()])
        .await
        .unwrap();
    let dropped = storage.collection(&ns).await.unwrap().unwrap();
    assert_eq!(index_names(&dropped), vec!["_id_", "a_1"]);
    assert!(matches!(
        storage
            .scan(
                &ns,
                ScanRequest {
                    source: all(),
                    resume_after: None,
                    reverse: false,
                    limit: 1,
                    hide: None,
                    key_filter: None,
                    covered: false,
                }
            )
            .await,
        Err(StorageError::IndexNotFound(_))
    ));
    // On a new collection (created by create_indexes).
    let fresh = Namespace::new(db, "fresh");
    let created = storage
        .create_indexes(&fresh, vec![ts.clone()])
        .await
        .unwrap();
    assert_eq!(index_names(&created), vec!["_id_", "_ts_1"]);
    write_ok(storage, &fresh, vec![insert(doc! {"_id": 1, "_ts": 1})]).await;
    assert!(scan_all(storage, &fresh, all(), false, 5).await.is_empty());
    cleanup(storage, db).await;
}

/// Background writes succeed and are visible as soon as acknowledged, alone or with
/// `force_durable`.
pub async fn background_writes(storage: &dyn Storage) {
    let db = "conf_background";
    let ns = Namespace::new(db, "b");
    let background = WriteOptions {
        background: true,
        ..ORDERED
    };
    write_ok(
        storage,
        &ns,
        vec![insert(doc! {"_id": 1}), insert(doc! {"_id": 2})],
    )
    .await;
    let results = storage
        .write(&ns, vec![delete(1, None)], background)
        .await
        .unwrap();
    assert_eq!(results, vec![Ok(WriteOutcome::Deleted)]);
    assert_eq!(storage.get(&ns, &Bson::Int32(1)).await.unwrap(), None);
    let results = storage
        .write(
            &ns,
            vec![delete(2, None), insert(doc! {"_id": 3})],
            WriteOptions {
                force_durable: true,
                ..background
            },
        )
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(storage.get(&ns, &Bson::Int32(2)).await.unwrap(), None);
    assert!(storage.get(&ns, &Bson::Int32(3)).await.unwrap().is_some());
    cleanup(storage, db).await;
}

/// Reaps every batch of `source` on `ns` with `limit` entries per call; the total deleted.
pub async fn reap_all(
    storage: &dyn Storage,
    ns: &Namespace,
    source: ReapSource,
    limit: usize,
    expired: &RecordPredicate,
) -> u64 {
    let mut deleted = 0;
    let mut resume_after = None;
    for _ in 0..100_000 {
        let page = storage
            .reap(
                ns,
                ReapRequest {
                    expire_at: None,
                    source: source.clone(),
                    resume_after: resume_after.take(),
                    limit,
                    expired: expired.clone(),
                },
            )
            .await
            .expect("reap");
        deleted += page.deleted;
        match page.resume {
            Some(resume) => resume_after = Some(resume),
            None => return deleted,
        }
    }
    panic!("reaping did not terminate");
}

/// A reap judges each page's documents as read, and an engine may read a page ahead (during
/// the call before): whether a page sees what was written between two calls or not, a document
/// rewritten since its page was read survives, and one deleted meanwhile is not counted.
pub async fn reaping_between_pages(storage: &dyn Storage) {
    let db = "conf_reaping_pages";
    let ns = Namespace::new(db, "r");
    let ops = (1..=6)
        .map(|i| insert_with(doc! {"_id": i}, meta(0, own(i64::from(i) * 10)), None))
        .collect();
    write_ok(storage, &ns, ops).await;
    let expired =
        RecordPredicate::new(|record: &RawRecord| !record.doc.get_bool("keep").unwrap_or(false));
    let request = |resume_after| ReapRequest {
        expire_at: None,
        source: ReapSource::Expiry {
            order: ExpiryOrder::OwnExpiry,
            range: ALL_TIMES,
        },
        resume_after,
        limit: 2,
        expired: expired.clone(),
    };
    let first = storage.reap(&ns, request(None)).await.expect("reap");
    assert_eq!(first.deleted, 2);
    assert!(first.resume.is_some());
    // Between two calls: 3 rewritten to be kept (same expiry), 4 deleted by a client.
    let rev = current_rev_of(storage, &ns, &Bson::Int32(3)).await;
    write_ok(
        storage,
        &ns,
        vec![
            replace_with(
                3,
                rev,
                doc! {"_id": 3, "keep": true},
                meta(0, own(30)),
                None,
            ),
            delete(4, None),
        ],
    )
    .await;
    let mut deleted = 0;
    let mut resume_after = first.resume;
    while let Some(resume) = resume_after {
        let page = storage
            .reap(&ns, request(Some(resume)))
            .await
            .expect("reap");
        deleted += page.deleted;
        resume_after = page.resume;
    }
    assert_eq!(deleted, 2, "5 and 6; neither the kept 3 nor the deleted 4");
    let left = scan_all(storage, &ns, ScanSource::Collection, false, 10).await;
    assert_eq!(ids(&left), vec![Bson::Int32(3)]);
    cleanup(storage, db).await;
}

/// The `LastWrite` order follows the engine's rule (for an engine opened with
/// [`rule_by_option`]; [`run_all`] needs one that selects every collection): a collection it
/// does not select has an empty order while its `OwnExpiry` order is kept; the catalog change
/// that selects it fills the order from the stored documents, by their current write times;
/// later writes keep it, and reaping through it deletes; the change that unselects it empties
/// it, writes leave it empty, and reaping through it finds nothing.
pub async fn last_write_rule(storage: &dyn Storage) {
    use ExpiryOrder::LastWrite;
    let db = "conf_last_write_rule";
    let ns = Namespace::new(db, "l");
    /// Makes [`rule_by_option`] select `ns` or not, by a catalog change.
    async fn select(storage: &dyn Storage, ns: &Namespace, selected: bool) {
        let options = match selected {
            true => doc! {LAST_WRITE_OPTION: true},
            false => doc! {},
        };
        storage
            .set_collection_options(ns, options)
            .await
            .expect("set the option the rule reads");
    }
    storage
        .create_collection(&ns, doc! {}, Vec::new())
        .await
        .expect("create");
    write_ok(
        storage,
        &ns,
        vec![
            insert_with(doc! {"_id": 1}, meta(30, TtlClass::Default), None),
            insert_with(doc! {"_id": 2}, meta(-5, TtlClass::Default), None),
            insert_with(doc! {"_id": 3}, meta(10, TtlClass::Never), None),
            insert_with(doc! {"_id": 4}, meta(10, own(100)), None),
        ],
    )
    .await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (Vec::new(), int_ids([4])),
        "not selected: no last-write entries, own expiry kept"
    );
    let rev = current_rev(storage, &ns, 1).await;
    write_ok(
        storage,
        &ns,
        vec![replace_with(
            1,
            rev,
            doc! {"_id": 1, "x": 1},
            meta(40, TtlClass::Default),
            None,
        )],
    )
    .await;

    select(storage, &ns, true).await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([2, 1]), int_ids([4])),
        "selected: filled from the stored documents"
    );
    let at_40 = (Bound::Included(40), Bound::Included(40));
    assert_eq!(
        ids(&expiry_all(storage, &ns, LastWrite, at_40, 5).await),
        int_ids([1]),
        "filled by the current write time"
    );
    let rev = current_rev(storage, &ns, 2).await;
    write_ok(
        storage,
        &ns,
        vec![
            insert_with(doc! {"_id": 5}, meta(20, TtlClass::Default), None),
            delete(2, Some(rev)),
        ],
    )
    .await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([5, 1]), int_ids([4])),
        "selected: writes keep the order"
    );
    let always = RecordPredicate::new(|_| true);
    let up_to_25 = ReapSource::Expiry {
        order: LastWrite,
        range: (Bound::Unbounded, Bound::Included(25)),
    };
    assert_eq!(reap_all(storage, &ns, up_to_25, 10, &always).await, 1);
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([1]), int_ids([4])),
        "selected: reaped through the order"
    );

    select(storage, &ns, false).await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (Vec::new(), int_ids([4])),
        "unselected: emptied"
    );
    write_ok(
        storage,
        &ns,
        vec![insert_with(
            doc! {"_id": 6},
            meta(0, TtlClass::Default),
            None,
        )],
    )
    .await;
    let every_time = ReapSource::Expiry {
        order: LastWrite,
        range: ALL_TIMES,
    };
    assert_eq!(reap_all(storage, &ns, every_time, 10, &always).await, 0);
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (Vec::new(), int_ids([4])),
        "unselected: writes and reaping leave it empty"
    );
    assert_eq!(
        ids(&scan_all(storage, &ns, ScanSource::Collection, false, 10).await),
        int_ids([1, 3, 4, 6]),
        "every document is still there, in insertion order"
    );

    select(storage, &ns, true).await;
    assert_eq!(
        expiry_ids(storage, &ns).await,
        (int_ids([6, 1]), int_ids([4])),
        "selected again: filled again"
    );
    cleanup(storage, db).await;
}

/// Counting entries of expiry sources, and reaping: from each kind of source, only documents the
/// predicate calls expired, with every index and expiry entry; in batches that resume; for `_id`s
/// that lie together in the data table and for scattered ones; nothing for a missing collection or
/// index.
pub async fn reaping(storage: &dyn Storage) {
    let db = "conf_reaping";
    let ns = Namespace::new(db, "r");
    storage
        .create_indexes(
            &ns,
            vec![
                index_spec("a_1", &[("a", 1)], false, false, None),
                index_spec("u_1", &[("u", 1)], true, false, None),
                index_spec("d_1", &[("d", 1)], false, false, None),
            ],
        )
        .await
        .expect("create indexes");
    // Default class: every third of 0..90 written at 0..30 (scattered `_id`s), the rest late;
    // 200..260 written at 100..160 (`_id`s together). Own class: 300..320 expiring at 1000..1020.
    // Never: 400..405. `d` is a Date on 500..530 only (multikey for 500..510).
    let mut docs = Vec::new();
    for i in 0..90 {
        let written = if i % 3 == 0 { i / 3 } else { 10_000 + i };
        docs.push((i, meta(written.into(), TtlClass::Default)));
    }
    for i in 200..260 {
        docs.push((i, meta((i - 100).into(), TtlClass::Default)));
    }
    for i in 300..320 {
        docs.push((i, meta(0, own((700 + i).into()))));
    }
    for i in 400..405 {
        docs.push((i, meta(0, TtlClass::Never)));
    }
    for i in 500..530 {
        docs.push((i, meta(20_000, TtlClass::Default)));
    }
    let ops = docs
        .iter()
        .map(|(i, meta)| {
            let mut doc = doc! {"_id": *i, "a": i % 7, "u": *i};
            if *i >= 500 {
                let date = bson::DateTime::from_millis(i64::from(*i));
                doc.insert(
                    "d",
                    if *i < 510 {
                        Bson::Array(vec![date.into(), bson::DateTime::from_millis(9_999).into()])
                    } else {
                        date.into()
                    },
                );
            }
            insert_with(doc, *meta, None)
        })
        .collect();
    write_ok(storage, &ns, ops).await;
    let expired_before = |cutoff_ms: i64| {
        RecordPredicate::new(move |record: &RawRecord| match record.ttl {
            TtlClass::Default => record.last_write_ms <= cutoff_ms,
            TtlClass::Own { expire_at_ms } => expire_at_ms <= cutoff_ms,
            TtlClass::Never => false,
        })
    };
    let never = RecordPredicate::new(|_: &RawRecord| false);
    let last_write = |upper: i64| ReapSource::Expiry {
        order: ExpiryOrder::LastWrite,
        range: (Bound::Unbounded, Bound::Included(upper)),
    };

    // Counting entries: each document once, across multikey entries and overlapping sources.
    let all_dates = ReapSource::Index {
        name: "d_1".to_string(),
        range: (
            Bound::Included(key(&[(Bson::DateTime(bson::DateTime::MIN), 1)])),
            Bound::Included(key(&[(Bson::DateTime(bson::DateTime::MAX), 1)])),
        ),
    };
    let count = |sources: Vec<ReapSource>| {
        let ns = &ns;
        async move {
            storage
                .count_entries(ns, sources)
                .await
                .expect("count entries")
        }
    };
    let counted = count(vec![all_dates.clone()]).await;
    assert_eq!((counted.documents, counted.in_sources), (205, 30));
    let counted = count(vec![last_write(i64::MAX), all_dates]).await;
    assert_eq!((counted.documents, counted.in_sources), (205, 180));
    assert_eq!(
        count(vec![ReapSource::Expiry {
            order: ExpiryOrder::OwnExpiry,
            range: ALL_TIMES
        }])
        .await
        .in_sources,
        20
    );

    // A predicate that holds for nothing deletes nothing, and the batches still end.
    assert_eq!(reap_all(storage, &ns, last_write(200), 4, &never).await, 0);
    // Last write ≤ 160: 30 scattered + 60 together, in batches of 7 and of 1000.
    assert_eq!(
        reap_all(storage, &ns, last_write(29), 7, &expired_before(29)).await,
        30
    );
    assert_eq!(
        reap_all(storage, &ns, last_write(160), 1000, &expired_before(160)).await,
        60
    );
    // Own expiry ≤ 1009: 300..310.
    let own_expiry = ReapSource::Expiry {
        order: ExpiryOrder::OwnExpiry,
        range: (Bound::Unbounded, Bound::Included(1009)),
    };
    assert_eq!(
        reap_all(storage, &ns, own_expiry, 3, &expired_before(1009)).await,
        10
    );
    // A date index: entries ≤ 519 ms (500..520, each document once although 500..510 have two
    // dates), judged by the document's field.
    let dated_before = RecordPredicate::new(|record: &RawRecord| {
        record.doc.get_i32("_id").is_ok_and(|id| id < 520)
    });
    let dates = (
        Bound::Included(key(&[(Bson::DateTime(bson::DateTime::MIN), 1)])),
        Bound::Included(key(&[(
            Bson::DateTime(bson::DateTime::from_millis(519)),
            1,
        )])),
    );
    let by_date = ReapSource::Index {
        name: "d_1".to_string(),
        range: dates,
    };
    assert_eq!(
        reap_all(storage, &ns, by_date.clone(), 4, &dated_before).await,
        20
    );
    assert_eq!(reap_all(storage, &ns, by_date, 4, &dated_before).await, 0);

    // What is left, everywhere: data, every index, both expiry tables, counts.
    let mut live: Vec<i32> = (0..90).filter(|i| i % 3 != 0).collect();
    live.extend(310..320);
    live.extend(400..405);
    live.extend(520..530);
    let live_ids: Vec<Bson> = live.iter().copied().map(Bson::Int32).collect();
    let sorted_by = |records: Vec<Record>| {
        let mut found = ids(&records);
        found.sort_by_key(|id| id.as_i32());
        found
    };
    assert_eq!(
        sorted_by(scan_all(storage, &ns, ScanSource::Collection, false, 50).await),
        live_ids
    );
    for index in ["a_1", "u_1", "d_1"] {
        let all = vec![(Bound::Unbounded, Bound::Unbounded)];
        assert_eq!(
            sorted_by(scan_all(storage, &ns, index_source(index, all), false, 50).await),
            live_ids,
            "entries of {index}"
        );
    }
    let (by_last_write, by_own_expiry) = expiry_ids(storage, &ns).await;
    let mut default_live: Vec<Bson> = (0..90).filter(|i| i % 3 != 0).map(Bson::Int32).collect();
    default_live.extend(int_ids(520..530));
    assert_eq!(by_last_write, default_live);
    assert_eq!(by_own_expiry, int_ids(310..320));
    assert_eq!(
        storage.stats(&ns).await.expect("stats").count,
        live.len() as u64
    );
    // A reaped unique key is free again.
    write_ok(storage, &ns, vec![insert(doc! {"_id": 1000, "u": 0})]).await;

    // Missing collection or index: nothing, and no more batches.
    let missing = Namespace::new(db, "missing");
    let page = storage
        .reap(
            &missing,
            ReapRequest {
                expire_at: None,
                source: last_write(i64::MAX),
                resume_after: None,
                limit: 10,
                expired: expired_before(i64::MAX),
            },
        )
        .await
        .expect("reap a missing collection");
    assert_eq!((page.deleted, page.resume), (0, None));
    let no_index = ReapSource::Index {
        name: "nope_1".to_string(),
        range: (Bound::Unbounded, Bound::Unbounded),
    };
    assert_eq!(
        reap_all(storage, &ns, no_index, 10, &expired_before(i64::MAX)).await,
        0
    );
    cleanup(storage, db).await;
}

/// Scans with `hide`: hidden records never come back, whatever their number, through pages that
/// may hold fewer records than asked (none even) but always resume until the end.
pub async fn hidden_scans(storage: &dyn Storage) {
    let db = "conf_hidden";
    let ns = Namespace::new(db, "h");
    storage
        .create_indexes(
            &ns,
            vec![index_spec("a_1", &[("a", 1)], false, false, None)],
        )
        .await
        .expect("create index");
    write_ok(
        storage,
        &ns,
        (0..6000)
            .map(|i| insert(doc! {"_id": i, "a": i % 3}))
            .collect(),
    )
    .await;
    let hide = RecordPredicate::new(|record: &RawRecord| {
        record.doc.get_i32("_id").is_ok_and(|id| id % 2000 != 1999)
    });
    for source in [
        ScanSource::Collection,
        index_source("a_1", vec![point(key(&[(Bson::Int32(1), 1)]))]),
    ] {
        for reverse in [false, true] {
            let mut found = Vec::new();
            let mut resume = None;
            let mut pages = 0;
            loop {
                pages += 1;
                assert!(pages < 10_000, "scan did not terminate");
                let page = storage
                    .scan(
                        &ns,
                        ScanRequest {
                            source: source.clone(),
                            resume_after: resume.take(),
                            reverse,
                            limit: 2,
                            hide: Some(hide.clone()),
                            key_filter: None,
                            covered: false,
                        },
                    )
                    .await
                    .expect("scan");
                assert!(page.records.len() <= 2, "page over its limit");
                found.extend(ids(&page.records));
                match page.resume {
                    Some(key) => resume = Some(key),
                    None => break,
                }
            }
            found.sort_by_key(|id| id.as_i32());
            let expected = match source {
                ScanSource::Collection => int_ids([1999, 3999, 5999]),
                // a == 1: ids ≡ 1 (mod 3).
                _ => int_ids([1999, 3999, 5999].into_iter().filter(|id| id % 3 == 1)),
            };
            assert_eq!(found, expected, "{source:?} reverse={reverse}");
        }
    }
    cleanup(storage, db).await;
}
