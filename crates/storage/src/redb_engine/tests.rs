//! Tests of the redb engine: the conformance suite on the memory and file backends, plus what is
//! specific to this engine (persistence of documents, indexes, expiry structures and catalog-only
//! indexes; refusal of older formats; the dbpath lock; group commit; relaxed durability and
//! background writes; concurrent read-modify-write; and a randomized comparison of documents,
//! indexes, supersede and the expiry structures against a `BTreeMap` model).

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bson::{doc, Bson, Document};
use tempfile::TempDir;

use super::faults::{Disk, DiskFullBackend};
use super::{Durability, RedbStorage};
use crate::conformance::{
    self, delete, index_spec, insert, insert_with, replace, replace_with, scan_all, write_ok,
    ALL_TIMES,
};
use crate::{
    ExpiryOrder, Namespace, RecordPredicate, ScanSource, Storage, StorageError, TtlClass,
    WriteMeta, WriteOptions, WriteOutcome,
};
use tideway_query::keycodec::{encode_id, encode_key, Direction};

const ORDERED: WriteOptions = WriteOptions {
    ordered: true,
    force_durable: false,
    background: false,
};

fn ns_in(db: &str, coll: &str) -> Namespace {
    Namespace::new(db, coll)
}

fn ns(coll: &str) -> Namespace {
    Namespace::new("enginetest", coll)
}

#[tokio::test]
async fn conformance_in_memory() {
    let storage = RedbStorage::in_memory().unwrap();
    conformance::run_all(&storage).await;
}

#[tokio::test]
async fn conformance_file_durable() {
    let dir = TempDir::new().unwrap();
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    conformance::run_all(&storage).await;
}

#[tokio::test]
async fn conformance_file_relaxed() {
    let dir = TempDir::new().unwrap();
    let storage = RedbStorage::open(dir.path(), Durability::Relaxed { sync_delay_ms: 20 }).unwrap();
    conformance::run_all(&storage).await;
}

#[tokio::test]
async fn conformance_last_write_rule_in_memory() {
    let storage = RedbStorage::in_memory_with_rule(conformance::rule_by_option).unwrap();
    conformance::last_write_rule(&storage).await;
}

#[tokio::test]
async fn conformance_last_write_rule_file() {
    let dir = TempDir::new().unwrap();
    let storage =
        RedbStorage::open_with_rule(dir.path(), Durability::Durable, conformance::rule_by_option)
            .unwrap();
    conformance::last_write_rule(&storage).await;
}

/// Opening applies the rule to every collection: a file written under one rule (or by format
/// 6 and older, which kept `lw.` everywhere, as [`every_collection`] does) gets its orders
/// emptied or filled to match the rule it is opened with, durably.
#[tokio::test]
async fn opening_applies_the_last_write_rule() {
    use crate::every_collection;
    let dir = TempDir::new().unwrap();
    let kept = ns("kept");
    let dropped = ns("dropped");
    let open = |rule: crate::LastWriteRule| {
        RedbStorage::open_with_rule(dir.path(), Durability::Durable, rule).unwrap()
    };
    async fn last_write_ids(storage: &RedbStorage, coll: &Namespace) -> Vec<Bson> {
        conformance::expiry_all(storage, coll, ExpiryOrder::LastWrite, ALL_TIMES, 10)
            .await
            .iter()
            .map(|record| record.doc.get("_id").cloned().unwrap())
            .collect()
    }
    {
        let storage = open(every_collection);
        let keep = doc! {conformance::LAST_WRITE_OPTION: true};
        storage
            .create_collection(&kept, keep, Vec::new())
            .await
            .unwrap();
        for coll in [&kept, &dropped] {
            write_ok(
                &storage,
                coll,
                vec![
                    insert_with(
                        doc! {"_id": 1},
                        conformance::meta(20, TtlClass::Default),
                        None,
                    ),
                    insert_with(
                        doc! {"_id": 2},
                        conformance::meta(10, TtlClass::Default),
                        None,
                    ),
                ],
            )
            .await;
            assert_eq!(
                last_write_ids(&storage, coll).await,
                [Bson::Int32(2), Bson::Int32(1)]
            );
        }
    }
    {
        let storage = open(conformance::rule_by_option);
        assert_eq!(
            last_write_ids(&storage, &kept).await,
            [Bson::Int32(2), Bson::Int32(1)]
        );
        assert!(last_write_ids(&storage, &dropped).await.is_empty());
        write_ok(
            &storage,
            &dropped,
            vec![insert_with(
                doc! {"_id": 3},
                conformance::meta(0, TtlClass::Default),
                None,
            )],
        )
        .await;
        assert!(last_write_ids(&storage, &dropped).await.is_empty());
    }
    {
        // Emptied for good: reopening with the same rule finds nothing to do.
        let storage = open(conformance::rule_by_option);
        assert!(last_write_ids(&storage, &dropped).await.is_empty());
    }
    let storage = open(every_collection);
    assert_eq!(
        last_write_ids(&storage, &dropped).await,
        [Bson::Int32(3), Bson::Int32(2), Bson::Int32(1)]
    );
    assert_eq!(
        last_write_ids(&storage, &kept).await,
        [Bson::Int32(2), Bson::Int32(1)]
    );
}

#[tokio::test]
async fn everything_persists_across_reopen() {
    let dir = TempDir::new().unwrap();
    let coll = ns("persist");
    let (meta, rev) = {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        storage
            .create_collection(
                &coll,
                doc! {"validator": {"a": {"$exists": true}}},
                Vec::new(),
            )
            .await
            .unwrap();
        storage
            .create_indexes(
                &coll,
                vec![
                    index_spec("a_1", &[("a", 1)], true, false, None),
                    index_spec(
                        "b_-1",
                        &[("b", -1)],
                        false,
                        true,
                        Some(doc! {"b": {"$gt": 0}}),
                    ),
                ],
            )
            .await
            .unwrap();
        let outcomes = write_ok(
            &storage,
            &coll,
            (0..20)
                .map(|i| insert(doc! {"_id": i, "a": i, "b": i % 4}))
                .collect(),
        )
        .await;
        let WriteOutcome::Inserted { rev, .. } = outcomes[19] else {
            panic!("insert outcome");
        };
        storage
            .create_collection(&ns("other"), Document::new(), Vec::new())
            .await
            .unwrap();
        storage.drop_collection(&ns("other")).await.unwrap();
        (storage.collection(&coll).await.unwrap().unwrap(), rev)
    };
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(storage.collection(&coll).await.unwrap(), Some(meta));
    assert_eq!(storage.collection(&ns("other")).await.unwrap(), None);
    let all = scan_all(&storage, &coll, ScanSource::Collection, false, 7).await;
    assert_eq!(all.len(), 20);
    assert_eq!(all[3].doc, doc! {"_id": 3, "a": 3, "b": 3});
    // Indexes came back with their entries and constraints.
    let b_entries = scan_all(
        &storage,
        &coll,
        ScanSource::Index {
            name: "b_-1".into(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        4,
    )
    .await;
    assert_eq!(b_entries.len(), 15, "partial filter b > 0");
    let results = storage
        .write(&coll, vec![insert(doc! {"_id": 100, "a": 5})], ORDERED)
        .await
        .unwrap();
    assert!(matches!(&results[0], Err(StorageError::DuplicateKey { index, .. }) if index == "a_1"));
    // Revisions keep increasing; ids are not reused.
    let outcome = write_ok(&storage, &coll, vec![insert(doc! {"_id": 101, "a": 101})]).await;
    assert!(matches!(outcome[0], WriteOutcome::Inserted { rev: new, .. } if new > rev));
    let stats = storage.stats(&coll).await.unwrap();
    assert_eq!(stats.count, 21);
}

#[tokio::test]
async fn expiry_structures_and_catalog_only_indexes_persist_across_reopen() {
    let dir = TempDir::new().unwrap();
    let coll = ns("ttl_persist");
    let mut ts = index_spec("_ts_1", &[("_ts", 1)], false, false, None);
    ts.catalog_only = true;
    ts.spec.insert("expireAfterSeconds", 30);
    let meta = {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        storage
            .create_indexes(&coll, vec![ts.clone()])
            .await
            .unwrap();
        let at = |last_write_ms, ttl| WriteMeta { last_write_ms, ttl };
        write_ok(
            &storage,
            &coll,
            vec![
                insert_with(doc! {"_id": 1, "_ts": 1}, at(20, TtlClass::Default), None),
                insert_with(doc! {"_id": 2, "_ts": 1}, at(10, TtlClass::Default), None),
                insert_with(doc! {"_id": 3}, at(10, TtlClass::Never), None),
                insert_with(
                    doc! {"_id": 4},
                    at(10, TtlClass::Own { expire_at_ms: 99 }),
                    None,
                ),
            ],
        )
        .await;
        storage.collection(&coll).await.unwrap().unwrap()
    };
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    let reopened = storage.collection(&coll).await.unwrap().unwrap();
    assert_eq!(reopened, meta);
    assert!(reopened.indexes[1].catalog_only);
    let ts_scan = ScanSource::Index {
        name: "_ts_1".into(),
        ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
    };
    assert!(scan_all(&storage, &coll, ts_scan.clone(), false, 5)
        .await
        .is_empty());
    let ids = |records: Vec<crate::Record>| -> Vec<Bson> {
        records
            .into_iter()
            .filter_map(|record| record.doc.get("_id").cloned())
            .collect()
    };
    let last_write =
        conformance::expiry_all(&storage, &coll, ExpiryOrder::LastWrite, ALL_TIMES, 1).await;
    assert_eq!(ids(last_write), vec![Bson::Int32(2), Bson::Int32(1)]);
    let own = conformance::expiry_all(&storage, &coll, ExpiryOrder::OwnExpiry, ALL_TIMES, 1).await;
    assert_eq!(own[0].ttl, TtlClass::Own { expire_at_ms: 99 });
    // Still maintained (and the catalog-only index still not) after the reopen.
    write_ok(
        &storage,
        &coll,
        vec![delete(2, None), insert(doc! {"_id": 5, "_ts": 2})],
    )
    .await;
    let last_write =
        conformance::expiry_all(&storage, &coll, ExpiryOrder::LastWrite, ALL_TIMES, 2).await;
    assert_eq!(ids(last_write), vec![Bson::Int32(1), Bson::Int32(5)]);
    assert!(scan_all(&storage, &coll, ts_scan, false, 5)
        .await
        .is_empty());
}

#[tokio::test]
async fn older_format_versions_are_refused() {
    let dir = TempDir::new().unwrap();
    {
        let db = redb::Database::create(dir.path().join(super::DATA_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(super::format::META)
            .unwrap()
            .insert(super::format::META_FORMAT_VERSION, 1)
            .unwrap();
        txn.commit().unwrap();
    }
    let error = RedbStorage::open(dir.path(), Durability::Durable).unwrap_err();
    assert!(matches!(error, StorageError::Corrupt(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("unsupported data format version 1: this build reads versions 2 to 7"),
        "{message}"
    );
}

/// One covered scan of all of `index` in a single page: its documents and how many it fetched.
async fn covered_scan(
    storage: &RedbStorage,
    coll: &Namespace,
    index: &str,
) -> (Vec<Document>, u64) {
    let page = storage
        .scan(
            coll,
            crate::ScanRequest {
                source: ScanSource::Index {
                    name: index.into(),
                    ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
                },
                resume_after: None,
                reverse: false,
                limit: 100,
                hide: None,
                key_filter: None,
                covered: true,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.resume, None);
    let documents = page
        .records
        .into_iter()
        .map(|r| r.doc.into_document())
        .collect();
    (documents, page.docs_examined)
}

#[tokio::test]
async fn version_2_files_open_and_their_entries_without_type_bits_are_fetched() {
    let dir = TempDir::new().unwrap();
    let coll = ns("upgrade");
    let expected: Vec<Document> = (0..6).map(|i| doc! {"a": i as i64, "b": 0.5}).collect();
    {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        storage
            .create_indexes(
                &coll,
                vec![
                    index_spec("a_1_b_1", &[("a", 1), ("b", 1)], true, false, None),
                    index_spec("b_1_a_1", &[("b", 1), ("a", 1)], false, false, None),
                ],
            )
            .await
            .unwrap();
        write_ok(
            &storage,
            &coll,
            (0..6)
                .map(|i| insert(doc! {"_id": i, "b": 0.5, "a": i as i64, "c": "x"}))
                .collect(),
        )
        .await;
        // Entries written now have type bits: answered from keys alone.
        let (documents, fetched) = covered_scan(&storage, &coll, "a_1_b_1").await;
        assert_eq!((documents, fetched), (expected.clone(), 0));
    }
    // Rewrite the file as version 2 wrote it: no type bits in any index entry.
    {
        let db = redb::Database::create(dir.path().join(super::DATA_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        let mut tables: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|table| redb::TableHandle::name(&table).to_string())
            .filter(|name| name.starts_with("i."))
            .collect();
        tables.sort();
        assert_eq!(tables.len(), 2);
        for (name, unique) in tables.iter().zip([true, false]) {
            let mut table = txn.open_table(super::format::bytes_table(name)).unwrap();
            let entries: Vec<(Vec<u8>, Vec<u8>)> = redb::ReadableTable::iter(&table)
                .unwrap()
                .map(|entry| {
                    let (key, value) = entry.unwrap();
                    (key.value().to_vec(), value.value().to_vec())
                })
                .collect();
            for (key, value) in entries {
                assert!(super::format::entry_type_bits(&value, unique)
                    .unwrap()
                    .is_some());
                let id = super::format::entry_id(&key, &value, unique)
                    .unwrap()
                    .to_vec();
                let old = super::format::entry_value(&id, None, unique);
                table.insert(key.as_slice(), old.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    // And its records and natural order as version 2 wrote them.
    write_format_4_layout(dir.path(), 2);
    {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        // Entries without type bits fetch their documents, reduced to the key fields.
        for index in ["a_1_b_1", "b_1_a_1"] {
            let (documents, fetched) = covered_scan(&storage, &coll, index).await;
            assert_eq!((documents, fetched), (expected.clone(), 6), "{index}");
        }
        // Type bits come back when an entry is rewritten: its key or its types change (Int64 0
        // becoming Int32 0 keeps the key). Entries a write leaves alone stay as they were.
        let record = storage.get(&coll, &Bson::Int32(0)).await.unwrap().unwrap();
        let mut document = record.doc.into_document();
        document.insert("a", 0);
        write_ok(&storage, &coll, vec![replace(0, record.rev, document)]).await;
        let (documents, fetched) = covered_scan(&storage, &coll, "a_1_b_1").await;
        let mut rewritten = expected.clone();
        rewritten[0] = doc! {"a": 0, "b": 0.5};
        assert_eq!((documents, fetched), (rewritten, 5));
        // Unique constraints still read the owners of version 2 entries.
        let results = storage
            .write(
                &coll,
                vec![insert(doc! {"_id": 50, "a": 3_i64, "b": 0.5})],
                ORDERED,
            )
            .await
            .unwrap();
        assert!(matches!(
            &results[0],
            Err(StorageError::DuplicateKey { .. })
        ));
    }
    // Opening marked the file with the current version.
    assert_eq!(
        stored_format_version(dir.path()),
        super::format::FORMAT_VERSION
    );
}

/// The format version the redb file in `dir` is marked with.
fn stored_format_version(dir: &std::path::Path) -> u64 {
    let db = redb::Database::create(dir.join(super::DATA_FILE_NAME)).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(super::format::META).unwrap();
    let version = meta
        .get(super::format::META_FORMAT_VERSION)
        .unwrap()
        .unwrap()
        .value();
    version
}

/// Rewrites the redb file in `dir` the way format versions 2 to 4 stored it, and marks it
/// `version`: version 2 record headers (no record id, [`FORMAT_4_RECORD_HEADER_LEN`] bytes),
/// natural order for capped collections only — `n.` (insertion number → `_id` key) and beside it
/// `np.` (`_id` key → insertion number) —, each data table's value bytes counted with the
/// shorter headers.
///
/// [`FORMAT_4_RECORD_HEADER_LEN`]: super::format::FORMAT_4_RECORD_HEADER_LEN
fn write_format_4_layout(dir: &std::path::Path, version: u64) {
    use super::format::{
        bytes_table, format_4_natural_position_table_name, natural_table_name, record_header,
        record_id_key, CATALOG, FORMAT_4_RECORD_HEADER_LEN, FORMAT_4_RECORD_VERSION,
        RECORD_HEADER_LEN, SIZES,
    };
    use redb::ReadableTable;
    let db = redb::Database::create(dir.join(super::DATA_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    let entries: Vec<super::catalog::CollectionEntry> = txn
        .open_table(CATALOG)
        .unwrap()
        .iter()
        .unwrap()
        .map(|item| {
            let (id, bytes) = item.unwrap();
            super::catalog::CollectionEntry::decode(id.value(), bytes.value()).unwrap()
        })
        .collect();
    for entry in entries {
        let capped = entry.meta.capped().is_some();
        let records: Vec<(Vec<u8>, Vec<u8>)> = txn
            .open_table(bytes_table(&entry.data_table))
            .unwrap()
            .iter()
            .unwrap()
            .map(|item| {
                let (key, value) = item.unwrap();
                (key.value().to_vec(), value.value().to_vec())
            })
            .collect();
        {
            let mut data = txn.open_table(bytes_table(&entry.data_table)).unwrap();
            let positions_name = format_4_natural_position_table_name(entry.id);
            let mut positions = txn.open_table(bytes_table(&positions_name)).unwrap();
            for (id_key, record) in &records {
                let header = record_header(record).unwrap();
                let mut old = record[..FORMAT_4_RECORD_HEADER_LEN].to_vec();
                old[0] = FORMAT_4_RECORD_VERSION;
                old.extend_from_slice(&record[RECORD_HEADER_LEN..]);
                data.insert(id_key.as_slice(), old.as_slice()).unwrap();
                if capped {
                    let number = record_id_key(header.record_id);
                    positions.insert(id_key.as_slice(), &number[..]).unwrap();
                }
            }
        }
        if !capped {
            txn.delete_table(bytes_table(&natural_table_name(entry.id)))
                .unwrap();
            txn.delete_table(bytes_table(&format_4_natural_position_table_name(entry.id)))
                .unwrap();
        }
        let mut sizes = txn.open_table(SIZES).unwrap();
        let stored = sizes
            .get(entry.data_table.as_str())
            .unwrap()
            .map(|s| s.value());
        if let Some((key_bytes, value_bytes)) = stored {
            let shrunk = (RECORD_HEADER_LEN - FORMAT_4_RECORD_HEADER_LEN) * records.len();
            sizes
                .insert(
                    entry.data_table.as_str(),
                    (key_bytes, value_bytes - shrunk as u64),
                )
                .unwrap();
        }
    }
    mark_format_version(&txn, version);
    txn.commit().unwrap();
}

/// Marks the file of `txn` with format `version`; below 6, with the writer's counters where those
/// versions kept them (`meta`, not `sizes`).
fn mark_format_version(txn: &redb::WriteTransaction, version: u64) {
    use super::format::{COUNTERS, META, META_FORMAT_VERSION, SIZES};
    let mut meta = txn.open_table(META).unwrap();
    meta.insert(META_FORMAT_VERSION, version).unwrap();
    if version < 6 {
        let mut sizes = txn.open_table(SIZES).unwrap();
        for (name, old_name) in COUNTERS {
            if let Some((value, _)) = sizes.remove(name).unwrap().map(|value| value.value()) {
                meta.insert(old_name, value).unwrap();
            }
        }
    }
}

/// The names of the tables in the redb file in `dir` that start with `prefix`, sorted.
fn tables_named(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    let db = redb::Database::create(dir.join(super::DATA_FILE_NAME)).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let mut names: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|table| redb::TableHandle::name(&table).to_string())
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// The `_id`s of a whole forward collection scan.
async fn natural_ids(storage: &RedbStorage, coll: &Namespace) -> Vec<Bson> {
    scan_all(storage, coll, ScanSource::Collection, false, 3)
        .await
        .into_iter()
        .map(|record| record.doc.id())
        .collect()
}

/// A format 4 file (version 2 record headers, natural order for capped collections only) is
/// converted when opened: an ordinary collection's documents get record ids in `_id` order
/// (the only order a format 4 file knows), a capped one keeps its insertion order, a clustered
/// one reads in `_id` order; documents, revisions, sizes, indexes and expiry entries are
/// unchanged; later inserts go to the end; the file is marked version 5 and no `np.` is left.
/// Format 6 keeps the writer's counters in `sizes`; a format 5 file kept them in `meta`. Opening
/// one moves them, so revisions, record ids and collection ids go on from where they were (a
/// counter read as its initial value would hand out a record id twice).
#[tokio::test]
async fn format_5_counters_move_to_sizes_when_opened() {
    use super::format::{COUNTERS, META, SIZES};
    let dir = TempDir::new().unwrap();
    let (first, second) = (ns("first"), ns("second"));
    let first_revs = {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        let outcomes = write_ok(
            &storage,
            &first,
            vec![insert(doc! {"_id": "b"}), insert(doc! {"_id": "a"})],
        )
        .await;
        outcomes
            .iter()
            .map(|outcome| match outcome {
                WriteOutcome::Inserted { rev, .. } => *rev,
                other => panic!("{other:?}"),
            })
            .collect::<Vec<u64>>()
    };
    {
        let db = redb::Database::create(dir.path().join(super::DATA_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        mark_format_version(&txn, 5);
        txn.commit().unwrap();
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    let outcomes = write_ok(&storage, &first, vec![insert(doc! {"_id": "0"})]).await;
    let WriteOutcome::Inserted { rev, .. } = outcomes[0] else {
        panic!("{outcomes:?}");
    };
    assert!(
        first_revs.iter().all(|old| *old < rev),
        "{first_revs:?} then {rev}"
    );
    // Natural order: the document inserted after reopening comes last.
    assert_eq!(
        natural_ids(&storage, &first).await,
        vec![Bson::from("b"), Bson::from("a"), Bson::from("0")]
    );
    // A new collection does not reuse the first one's id (its tables would be the first's).
    write_ok(&storage, &second, vec![insert(doc! {"_id": 1})]).await;
    assert_eq!(natural_ids(&storage, &first).await.len(), 3);
    drop(storage);
    assert_eq!(
        stored_format_version(dir.path()),
        super::format::FORMAT_VERSION
    );
    let db = redb::Database::create(dir.path().join(super::DATA_FILE_NAME)).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(META).unwrap();
    for (_, old_name) in COUNTERS {
        assert!(
            meta.get(old_name).unwrap().is_none(),
            "{old_name} left in meta"
        );
    }
    let sizes = txn.open_table(SIZES).unwrap();
    for (name, _) in COUNTERS {
        assert!(
            sizes.get(name).unwrap().is_some(),
            "{name:?} missing from sizes"
        );
    }
}

#[tokio::test]
async fn format_4_files_get_record_ids_when_opened() {
    let dir = TempDir::new().unwrap();
    let (plain, capped, clustered) = (ns("plain"), ns("capped"), ns("clustered"));
    let names: Vec<Bson> = ["Bob", "Barak", "Al"]
        .into_iter()
        .map(|name| Bson::String(name.into()))
        .chain([Bson::Int32(3), Bson::Double(-1.5)])
        .collect();
    let before = {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        storage
            .create_indexes(
                &plain,
                vec![index_spec("a_1", &[("a", 1)], false, false, None)],
            )
            .await
            .unwrap();
        storage
            .create_collection(
                &capped,
                doc! {"capped": true, "size": 100_000, "max": 5},
                vec![],
            )
            .await
            .unwrap();
        storage
            .create_collection(
                &clustered,
                doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}},
                vec![],
            )
            .await
            .unwrap();
        for (position, id) in names.iter().enumerate() {
            let ttl = match position % 3 {
                0 => TtlClass::Default,
                1 => TtlClass::Never,
                _ => TtlClass::Own { expire_at_ms: 50 },
            };
            let meta = WriteMeta {
                last_write_ms: position as i64,
                ttl,
            };
            let document = doc! {"_id": id.clone(), "a": position as i32};
            for coll in [&plain, &capped, &clustered] {
                write_ok(
                    &storage,
                    coll,
                    vec![insert_with(document.clone(), meta, None)],
                )
                .await;
            }
        }
        assert_eq!(natural_ids(&storage, &plain).await, names);
        let mut before = Vec::new();
        for coll in [&plain, &capped, &clustered] {
            let records = scan_all(
                &storage,
                coll,
                ScanSource::Index {
                    name: "_id_".into(),
                    ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
                },
                false,
                10,
            )
            .await;
            before.push((records, storage.stats(coll).await.unwrap()));
        }
        before
    };
    write_format_4_layout(dir.path(), 4);
    assert_eq!(tables_named(dir.path(), "np."), vec!["np.2".to_string()]);
    assert_eq!(tables_named(dir.path(), "n."), vec!["n.2".to_string()]);

    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    let mut in_id_order = names.clone();
    in_id_order.sort_by_key(encode_id);
    assert_eq!(
        natural_ids(&storage, &plain).await,
        in_id_order,
        "ordinary: _id order"
    );
    assert_eq!(
        natural_ids(&storage, &capped).await,
        names,
        "capped: insertion order"
    );
    assert_eq!(
        natural_ids(&storage, &clustered).await,
        in_id_order,
        "clustered"
    );
    for (coll, (records, stats)) in [&plain, &capped, &clustered].into_iter().zip(&before) {
        let now = scan_all(
            &storage,
            coll,
            ScanSource::Index {
                name: "_id_".into(),
                ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
            },
            false,
            10,
        )
        .await;
        assert_eq!(&now, records, "{coll}: documents, revisions and metadata");
        assert_eq!(&storage.stats(coll).await.unwrap(), stats, "{coll}: sizes");
    }
    let by_a = scan_all(
        &storage,
        &plain,
        ScanSource::Index {
            name: "a_1".into(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        10,
    )
    .await;
    assert_eq!(by_a.iter().map(|r| r.doc.id()).collect::<Vec<_>>(), names);
    let own = conformance::expiry_all(&storage, &plain, ExpiryOrder::OwnExpiry, ALL_TIMES, 2).await;
    assert_eq!(
        own.iter().map(|r| r.doc.id()).collect::<Vec<_>>(),
        vec![names[2].clone()]
    );

    // New documents go after the converted ones; a deleted one leaves natural order.
    write_ok(
        &storage,
        &plain,
        vec![
            insert(doc! {"_id": "Aaron"}),
            delete(names[0].clone(), None),
        ],
    )
    .await;
    let mut expected: Vec<Bson> = in_id_order
        .iter()
        .filter(|id| **id != names[0])
        .cloned()
        .collect();
    expected.push(Bson::String("Aaron".into()));
    assert_eq!(natural_ids(&storage, &plain).await, expected);
    // The capped collection rolls over from its oldest converted document.
    write_ok(&storage, &capped, vec![insert(doc! {"_id": "Aaron"})]).await;
    let mut kept = names[1..].to_vec();
    kept.push(Bson::String("Aaron".into()));
    assert_eq!(natural_ids(&storage, &capped).await, kept);
    drop(storage);
    assert_eq!(
        stored_format_version(dir.path()),
        super::format::FORMAT_VERSION
    );
    assert!(tables_named(dir.path(), "np.").is_empty());
    // Opening again converts nothing more.
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(natural_ids(&storage, &plain).await, expected);
}

#[tokio::test]
async fn dbpath_is_locked_while_open() {
    let dir = TempDir::new().unwrap();
    let first = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    let error = RedbStorage::open(dir.path(), Durability::Durable).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "another tideway server is using --dbpath {} (lock file {}/tideway.lock is held)",
            dir.path().display(),
            dir.path().display()
        )),
        "{message}"
    );
    drop(first);
    let again = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_commits() {
    let dir = TempDir::new().unwrap();
    let storage = Arc::new(RedbStorage::open(dir.path(), Durability::Durable).unwrap());
    let coll = ns("group");
    storage
        .create_collection(&coll, Document::new(), Vec::new())
        .await
        .unwrap();
    let before = storage.commit_count();
    const WRITES: i32 = 50;
    let tasks: Vec<_> = (0..WRITES)
        .map(|i| {
            let storage = storage.clone();
            let coll = coll.clone();
            tokio::spawn(async move {
                storage
                    .write(&coll, vec![insert(doc! {"_id": i})], ORDERED)
                    .await
            })
        })
        .collect();
    for task in tasks {
        let results = task.await.unwrap().unwrap();
        assert!(results[0].is_ok());
    }
    let commits = storage.commit_count() - before;
    eprintln!("group commit: {WRITES} durable single-insert writes used {commits} commits");
    assert!(
        commits < WRITES as u64,
        "{commits} commits for {WRITES} writes"
    );
    assert_eq!(storage.stats(&coll).await.unwrap().count, WRITES as u64);
}

#[tokio::test]
async fn relaxed_durability_syncs_in_background_and_on_close() {
    let dir = TempDir::new().unwrap();
    let coll = ns("relaxed");
    {
        let storage =
            RedbStorage::open(dir.path(), Durability::Relaxed { sync_delay_ms: 10 }).unwrap();
        write_ok(&storage, &coll, vec![insert(doc! {"_id": 1})]).await;
        let after_write = storage.commit_count();
        // The background durable commit follows within the delay.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            storage.commit_count(),
            after_write + 1,
            "one background sync"
        );
        // Forced durability commits durably right away (no extra sync pending afterwards).
        let results = storage
            .write(
                &coll,
                vec![insert(doc! {"_id": 2})],
                WriteOptions {
                    ordered: true,
                    force_durable: true,
                    background: false,
                },
            )
            .await
            .unwrap();
        assert!(results[0].is_ok());
        let after_forced = storage.commit_count();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(storage.commit_count(), after_forced, "nothing left to sync");
        write_ok(&storage, &coll, vec![insert(doc! {"_id": 3})]).await;
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(storage.stats(&coll).await.unwrap().count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_read_modify_write_is_exact() {
    let storage = Arc::new(RedbStorage::in_memory().unwrap());
    let coll = ns("counter");
    write_ok(&*storage, &coll, vec![insert(doc! {"_id": 1, "n": 0i64})]).await;
    const TASKS: i64 = 16;
    const INCREMENTS: i64 = 25;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let storage = storage.clone();
            let coll = coll.clone();
            tokio::spawn(async move {
                let mut conflicts = 0u64;
                for _ in 0..INCREMENTS {
                    loop {
                        let record = storage.get(&coll, &Bson::Int32(1)).await.unwrap().unwrap();
                        let n = record.doc.get_i64("n").unwrap();
                        let results = storage
                            .write(
                                &coll,
                                vec![replace(1, record.rev, doc! {"_id": 1, "n": n + 1})],
                                ORDERED,
                            )
                            .await
                            .unwrap();
                        match &results[0] {
                            Ok(_) => break,
                            Err(StorageError::WriteConflict) => conflicts += 1,
                            Err(other) => panic!("unexpected {other:?}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let record = storage.get(&coll, &Bson::Int32(1)).await.unwrap().unwrap();
    eprintln!(
        "read-modify-write: {} increments, {conflicts} conflicts retried",
        TASKS * INCREMENTS
    );
    assert_eq!(record.doc.get_i64("n").unwrap(), TASKS * INCREMENTS);
}

const BACKGROUND: WriteOptions = WriteOptions {
    ordered: true,
    force_durable: false,
    background: true,
};

#[tokio::test]
async fn background_writes_skip_their_fsync_and_sync_within_a_second() {
    let fail_sync = Arc::new(AtomicBool::new(false));
    let storage = RedbStorage::with_backend(FailingSyncBackend {
        inner: redb::backends::InMemoryBackend::new(),
        fail_sync: fail_sync.clone(),
    })
    .unwrap();
    let coll = ns("background");
    write_ok(
        &storage,
        &coll,
        vec![insert(doc! {"_id": 1}), insert(doc! {"_id": 2})],
    )
    .await;
    // A durable engine acknowledges a background write without any fsync.
    fail_sync.store(true, Ordering::SeqCst);
    let results = storage
        .write(&coll, vec![delete(1, None)], BACKGROUND)
        .await
        .unwrap();
    assert_eq!(results, vec![Ok(WriteOutcome::Deleted)]);
    assert_eq!(storage.get(&coll, &Bson::Int32(1)).await.unwrap(), None);
    fail_sync.store(false, Ordering::SeqCst);
    let after_write = storage.commit_count();
    // The durable commit follows within about a second (and only one).
    tokio::time::sleep(std::time::Duration::from_millis(1400)).await;
    assert_eq!(
        storage.commit_count(),
        after_write + 1,
        "one background sync"
    );
    // A foreground durable write makes pending background writes durable: nothing left to sync.
    let results = storage
        .write(&coll, vec![delete(2, None)], BACKGROUND)
        .await
        .unwrap();
    assert!(results[0].is_ok());
    write_ok(&storage, &coll, vec![insert(doc! {"_id": 3})]).await;
    let after_foreground = storage.commit_count();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(
        storage.commit_count(),
        after_foreground,
        "nothing left to sync"
    );
}

#[tokio::test]
async fn background_writes_are_durable_after_close() {
    let dir = TempDir::new().unwrap();
    let coll = ns("background_close");
    {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        write_ok(
            &storage,
            &coll,
            (0..10).map(|i| insert(doc! {"_id": i})).collect(),
        )
        .await;
        let results = storage
            .write(&coll, (0..5).map(|i| delete(i, None)).collect(), BACKGROUND)
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok));
        // Dropped at once: closing makes the background commit durable.
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(storage.stats(&coll).await.unwrap().count, 5);
    assert_eq!(storage.get(&coll, &Bson::Int32(0)).await.unwrap(), None);
}

/// xorshift64*: small, deterministic.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// A stored document in the model.
#[derive(Clone, Debug, PartialEq)]
struct Modeled {
    doc: Document,
    rev: u64,
    meta: WriteMeta,
    /// Its place in natural order: the step that inserted it (a replacement keeps it).
    place: i32,
}

type Model = BTreeMap<Vec<u8>, Modeled>;

/// The model's rule for the supersede predicate the test passes: documents written at a
/// negative time may be superseded.
fn supersedable(last_write_ms: i64) -> bool {
    last_write_ms < 0
}

/// The documents (by encoded `_id`) a write of `document` conflicts with: its `_id` twin (insert
/// only) and the other holder of its `u` (sparse unique index `u_1`).
fn model_conflicts(
    model: &Model,
    id_key: &[u8],
    document: &Document,
    insert: bool,
) -> Vec<Vec<u8>> {
    let mut conflicts = Vec::new();
    if insert && model.contains_key(id_key) {
        conflicts.push(id_key.to_vec());
    }
    if let Some(u) = document.get("u") {
        conflicts.extend(
            model
                .iter()
                .filter(|(key, stored)| key.as_slice() != id_key && stored.doc.get("u") == Some(u))
                .map(|(key, _)| key.clone()),
        );
    }
    conflicts
}

/// What the model expects of a write with these conflicts: `Ok(superseded)` (after removing
/// them from the model) or a duplicate key.
fn model_resolve(model: &mut Model, conflicts: &[Vec<u8>], with_predicate: bool) -> Option<u32> {
    let all_supersedable = conflicts.iter().all(|key| {
        model
            .get(key)
            .is_some_and(|stored| supersedable(stored.meta.last_write_ms))
    });
    if conflicts.is_empty() || (with_predicate && all_supersedable) {
        for key in conflicts {
            model.remove(key);
        }
        Some(conflicts.len() as u32)
    } else {
        None
    }
}

#[tokio::test]
async fn randomized_against_a_model() {
    let storage = RedbStorage::in_memory().unwrap();
    let coll = ns("model");
    storage
        .create_indexes(
            &coll,
            vec![
                index_spec("a_1", &[("a", 1)], false, false, None),
                index_spec("u_1", &[("u", 1)], true, true, None),
            ],
        )
        .await
        .unwrap();
    let predicate = RecordPredicate::new(|record| supersedable(record.last_write_ms));
    let mut model: Model = BTreeMap::new();
    let mut rng = Prng(0x9E37_79B9_7F4A_7C15);
    // (documents superseded, writes refused as duplicates)
    let (mut superseded_total, mut duplicates) = (0, 0);
    for step in 0..4000 {
        let id = Bson::Int64(rng.below(60) as i64);
        let key = encode_id(&id);
        let a_value = match rng.below(4) {
            0 => Bson::Array(vec![
                Bson::Int32(rng.below(5) as i32),
                Bson::Int32(rng.below(5) as i32),
            ]),
            1 => Bson::Null,
            _ => Bson::Int32(rng.below(8) as i32),
        };
        let mut document = doc! {"_id": id.clone(), "a": a_value, "step": step};
        if rng.below(3) == 0 {
            document.insert("u", rng.below(12) as i32);
        }
        // Times in -10..10, so about half the documents are supersedable.
        let time = |rng: &mut Prng| rng.below(20) as i64 - 10;
        let last_write_ms = time(&mut rng);
        let ttl = match rng.below(3) {
            0 => TtlClass::Default,
            1 => TtlClass::Never,
            _ => TtlClass::Own {
                expire_at_ms: time(&mut rng),
            },
        };
        let meta = WriteMeta { last_write_ms, ttl };
        let supersede = (rng.below(2) == 0).then(|| predicate.clone());
        let with_predicate = supersede.is_some();
        match rng.below(10) {
            0..=3 => {
                let results = storage
                    .write(
                        &coll,
                        vec![insert_with(document.clone(), meta, supersede)],
                        ORDERED,
                    )
                    .await
                    .unwrap();
                let conflicts = model_conflicts(&model, &key, &document, true);
                match (
                    &results[0],
                    model_resolve(&mut model, &conflicts, with_predicate),
                ) {
                    (Ok(WriteOutcome::Inserted { rev, superseded }), Some(expected)) => {
                        assert_eq!(*superseded, expected, "step {step}: superseded");
                        superseded_total += expected;
                        let (doc, rev) = (document, *rev);
                        let place = step;
                        model.insert(
                            key,
                            Modeled {
                                doc,
                                rev,
                                meta,
                                place,
                            },
                        );
                    }
                    (Err(StorageError::DuplicateKey { .. }), None) => duplicates += 1,
                    other => panic!("step {step}: insert gave {other:?}"),
                }
            }
            4..=6 => {
                let current = model.get(&key).map(|stored| stored.rev);
                let place = model.get(&key).map_or(step, |stored| stored.place);
                let stale = rng.below(4) == 0;
                let expected_rev = match (current, stale) {
                    (Some(rev), false) => rev,
                    (Some(rev), true) => rev.saturating_sub(1),
                    (None, _) => 1,
                };
                let results = storage
                    .write(
                        &coll,
                        vec![replace_with(
                            id.clone(),
                            expected_rev,
                            document.clone(),
                            meta,
                            supersede,
                        )],
                        ORDERED,
                    )
                    .await
                    .unwrap();
                if current.is_none() || stale {
                    assert_eq!(results[0], Err(StorageError::WriteConflict), "step {step}");
                    continue;
                }
                let conflicts = model_conflicts(&model, &key, &document, false);
                match (
                    &results[0],
                    model_resolve(&mut model, &conflicts, with_predicate),
                ) {
                    (Ok(WriteOutcome::Replaced { rev, superseded }), Some(expected)) => {
                        assert_eq!(*superseded, expected, "step {step}: superseded");
                        superseded_total += expected;
                        assert!(Some(*rev) > current);
                        let (doc, rev) = (document, *rev);
                        model.insert(
                            key,
                            Modeled {
                                doc,
                                rev,
                                meta,
                                place,
                            },
                        );
                    }
                    (Err(StorageError::DuplicateKey { .. }), None) => duplicates += 1,
                    other => panic!("step {step}: replace gave {other:?}"),
                }
            }
            7..=8 => {
                let expected_rev = model.get(&key).map(|stored| stored.rev);
                let results = storage
                    .write(&coll, vec![delete(id.clone(), expected_rev)], ORDERED)
                    .await
                    .unwrap();
                match (&results[0], model.remove(&key)) {
                    (Ok(WriteOutcome::Deleted), Some(_)) => {}
                    (Err(StorageError::WriteConflict), None) => {}
                    other => panic!("step {step}: delete gave {other:?}"),
                }
            }
            _ => {
                let page = 1 + rng.below(9) as usize;
                let reverse = rng.below(2) == 0;
                let scanned =
                    scan_all(&storage, &coll, ScanSource::Collection, reverse, page).await;
                // Natural order: insertion order.
                let mut expected: Vec<(Document, u64, WriteMeta)> = {
                    let mut stored: Vec<&Modeled> = model.values().collect();
                    stored.sort_by_key(|stored| stored.place);
                    stored
                        .into_iter()
                        .map(|stored| (stored.doc.clone(), stored.rev, stored.meta))
                        .collect()
                };
                if reverse {
                    expected.reverse();
                }
                let found: Vec<(Document, u64, WriteMeta)> = scanned
                    .into_iter()
                    .map(|record| {
                        let meta = WriteMeta {
                            last_write_ms: record.last_write_ms,
                            ttl: record.ttl,
                        };
                        (record.doc.into_document(), record.rev, meta)
                    })
                    .collect();
                assert_eq!(found, expected, "step {step}: collection scan");
                check_index_against_model(&storage, &coll, &model, page, step).await;
                let bound = |rng: &mut Prng| {
                    let at = rng.below(24) as i64 - 12;
                    match rng.below(3) {
                        0 => Bound::Included(at),
                        1 => Bound::Excluded(at),
                        _ => Bound::Unbounded,
                    }
                };
                let range = (bound(&mut rng), bound(&mut rng));
                check_expiry_against_model(&storage, &coll, &model, range, page, step).await;
                check_expiry_against_model(&storage, &coll, &model, ALL_TIMES, page, step).await;
            }
        }
    }
    eprintln!(
        "model: {superseded_total} documents superseded, {duplicates} duplicate-key refusals"
    );
    assert!(
        superseded_total > 50 && duplicates > 50,
        "both paths exercised"
    );
    check_index_against_model(&storage, &coll, &model, 5, 4000).await;
    check_expiry_against_model(&storage, &coll, &model, ALL_TIMES, 3, 4000).await;
    assert_eq!(
        storage.stats(&coll).await.unwrap().count,
        model.len() as u64
    );
}

/// Both expiry structures hold exactly the model's documents of their class within `range`,
/// ordered by (time, encoded `_id`).
async fn check_expiry_against_model(
    storage: &RedbStorage,
    coll: &Namespace,
    model: &Model,
    range: (Bound<i64>, Bound<i64>),
    page: usize,
    step: i32,
) {
    for order in [ExpiryOrder::LastWrite, ExpiryOrder::OwnExpiry] {
        let mut expected: Vec<(i64, Vec<u8>, u64)> = model
            .iter()
            .filter_map(|(id_key, stored)| {
                let at = match (order, stored.meta.ttl) {
                    (ExpiryOrder::LastWrite, TtlClass::Default) => stored.meta.last_write_ms,
                    (ExpiryOrder::OwnExpiry, TtlClass::Own { expire_at_ms }) => expire_at_ms,
                    _ => return None,
                };
                range
                    .contains(&at)
                    .then(|| (at, id_key.clone(), stored.rev))
            })
            .collect();
        expected.sort();
        let found: Vec<(i64, Vec<u8>, u64)> =
            conformance::expiry_all(storage, coll, order, range, page)
                .await
                .into_iter()
                .map(|record| {
                    let at = match record.ttl {
                        TtlClass::Own { expire_at_ms } => expire_at_ms,
                        _ => record.last_write_ms,
                    };
                    (
                        at,
                        encode_id(record.doc.get("_id").unwrap_or(&Bson::Null)),
                        record.rev,
                    )
                })
                .collect();
        assert_eq!(found, expected, "step {step}: {order:?} scan of {range:?}");
    }
}

/// The `a_1` index holds exactly one entry per (distinct key value, document), in key order.
async fn check_index_against_model(
    storage: &RedbStorage,
    coll: &Namespace,
    model: &Model,
    page: usize,
    step: i32,
) {
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (id_key, stored) in model {
        let mut keys: Vec<Vec<u8>> = match stored.doc.get("a") {
            Some(Bson::Array(values)) => values
                .iter()
                .map(|value| encode_key(&[(value, Direction::Ascending)]))
                .collect(),
            Some(value) => vec![encode_key(&[(value, Direction::Ascending)])],
            None => vec![encode_key(&[(&Bson::Null, Direction::Ascending)])],
        };
        keys.sort();
        keys.dedup();
        expected.extend(keys.into_iter().map(|key| (key, id_key.clone())));
    }
    expected.sort();
    let scanned = scan_all(
        storage,
        coll,
        ScanSource::Index {
            name: "a_1".into(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        page,
    )
    .await;
    let found: Vec<Vec<u8>> = scanned
        .iter()
        .map(|record| encode_id(record.doc.get("_id").unwrap_or(&Bson::Null)))
        .collect();
    let expected: Vec<Vec<u8>> = expected.into_iter().map(|(_, id_key)| id_key).collect();
    assert_eq!(found, expected, "step {step}: index scan");
}

#[tokio::test]
async fn large_insert_batch_is_one_write() {
    let storage = RedbStorage::in_memory().unwrap();
    let coll = ns("large");
    let ops = (0..100_000)
        .map(|i| insert(doc! {"_id": i, "name": format!("user{i}"), "n": i % 100}))
        .collect();
    let started = Instant::now();
    let results = storage.write(&coll, ops, ORDERED).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(results.len(), 100_000);
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(storage.stats(&coll).await.unwrap().count, 100_000);
    eprintln!("100k-document insert batch (memory backend): {elapsed:?}");
}

/// Throughput numbers; run with `cargo test --release -- --ignored --nocapture throughput`.
#[tokio::test]
#[ignore]
async fn throughput() {
    let storage = RedbStorage::in_memory().unwrap();
    let coll = ns("throughput");
    const N: i32 = 100_000;
    let ops = (0..N)
        .map(|i| insert(doc! {"_id": i, "name": format!("user{i}"), "n": i % 100}))
        .collect();
    let started = Instant::now();
    storage.write(&coll, ops, ORDERED).await.unwrap();
    eprintln!("insert batch of {N}: {:?}", started.elapsed());
    let started = Instant::now();
    for i in 0..N {
        let record = storage.get(&coll, &Bson::Int32(i)).await.unwrap();
        assert!(record.is_some());
    }
    let elapsed = started.elapsed();
    eprintln!("point gets: {:.0}/s", f64::from(N) / elapsed.as_secs_f64());
    let started = Instant::now();
    let all = scan_all(&storage, &coll, ScanSource::Collection, false, 1000).await;
    eprintln!(
        "full scan of {} in pages of 1000: {:?}",
        all.len(),
        started.elapsed()
    );
    storage
        .create_indexes(
            &coll,
            vec![index_spec("n_1", &[("n", 1)], false, false, None)],
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut writes = 0;
    for i in 0..2000 {
        let storage = &storage;
        write_ok(storage, &coll, vec![insert(doc! {"_id": N + i, "n": i})]).await;
        writes += 1;
    }
    eprintln!(
        "sequential single inserts (memory, durable): {:.0}/s",
        f64::from(writes) / started.elapsed().as_secs_f64()
    );
}

/// An in-memory backend whose `sync_data` fails while `fail_sync` is set.
#[derive(Debug)]
struct FailingSyncBackend {
    inner: redb::backends::InMemoryBackend,
    fail_sync: Arc<AtomicBool>,
}

impl redb::StorageBackend for FailingSyncBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected sync failure"));
        }
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.inner.write(offset, data)
    }
}

/// Syncs failing (EIO) also fail the reopen: reads and writes then get an I/O error, never a
/// panic; once syncs work again, both come back on the same engine with nothing lost.
#[tokio::test]
async fn failed_commit_answers_the_error_publishes_nothing_and_recovers() {
    let fail_sync = Arc::new(AtomicBool::new(false));
    let storage = RedbStorage::with_backend(FailingSyncBackend {
        inner: redb::backends::InMemoryBackend::new(),
        fail_sync: fail_sync.clone(),
    })
    .unwrap();
    let kept = ns("kept");
    write_ok(&storage, &kept, vec![insert(doc! {"_id": 1})]).await;
    fail_sync.store(true, Ordering::SeqCst);
    let failed = ns("failed");
    let error = storage
        .create_collection(&failed, Document::new(), Vec::new())
        .await
        .unwrap_err();
    assert!(matches!(error, StorageError::Io(_)), "{error:?}");
    assert_eq!(storage.collection(&failed).await.unwrap(), None);
    let error = storage
        .write(&failed, vec![insert(doc! {"_id": 2})], ORDERED)
        .await
        .unwrap_err();
    assert!(matches!(error, StorageError::Io(_)), "{error:?}");
    assert_eq!(storage.collection(&failed).await.unwrap(), None);
    let error = storage.get(&kept, &Bson::Int32(1)).await.unwrap_err();
    assert!(matches!(error, StorageError::Io(_)), "{error:?}");
    fail_sync.store(false, Ordering::SeqCst);
    let record = eventually(|| storage.get(&kept, &Bson::Int32(1))).await;
    assert!(record.is_some());
    assert_eq!(storage.get(&failed, &Bson::Int32(2)).await.unwrap(), None);
    eventually(|| storage.write(&kept, vec![insert(doc! {"_id": 3})], ORDERED)).await;
    let ids: Vec<Bson> = scan_all(&storage, &kept, ScanSource::Collection, false, 10)
        .await
        .into_iter()
        .map(|record| record.doc.get("_id").cloned().unwrap())
        .collect();
    assert_eq!(ids, vec![Bson::Int32(1), Bson::Int32(3)]);
}

/// Retries `attempt` until it succeeds (the writer backs off for up to two seconds after a
/// failure); panics after ten seconds.
async fn eventually<T, F, Fut>(attempt: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>>,
{
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) if Instant::now() < deadline => {
                assert!(
                    matches!(error, StorageError::Io(_) | StorageError::OutOfDiskSpace(_)),
                    "{error:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(error) => panic!("still failing after 10 s: {error:?}"),
        }
    }
}

/// A document with a 2 MiB payload: never fits in space a full disk has left.
fn big_document(id: i32) -> Document {
    let blob = bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: vec![u8::try_from(id % 251).unwrap(); 2 << 20],
    };
    doc! {"_id": id, "a": id, "blob": blob}
}

fn assert_out_of_disk_space(error: &StorageError) {
    assert!(
        matches!(error, StorageError::OutOfDiskSpace(_)),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with("No space left on device: "),
        "{error}"
    );
}

/// Every acknowledged document of `coll` is there (by `_id`, by scan and through index `a_1`),
/// and nothing else.
async fn assert_holds_exactly(
    storage: &RedbStorage,
    coll: &Namespace,
    acknowledged: &BTreeMap<i32, Document>,
) {
    for (id, document) in acknowledged {
        let record = storage.get(coll, &Bson::Int32(*id)).await.unwrap();
        assert_eq!(
            record.map(|record| record.doc.into_document()).as_ref(),
            Some(document)
        );
    }
    let scanned: Vec<Document> = scan_all(storage, coll, ScanSource::Collection, false, 16)
        .await
        .into_iter()
        .map(|record| record.doc.into_document())
        .collect();
    assert_eq!(scanned, acknowledged.values().cloned().collect::<Vec<_>>());
    let index_entries = scan_all(
        storage,
        coll,
        ScanSource::Index {
            name: "a_1".to_string(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        16,
    )
    .await;
    assert_eq!(index_entries.len(), acknowledged.len());
}

/// Runs writes before, during and after a full disk under `storage`; returns the documents of
/// `ns("disk_full")` that were acknowledged, which must all be there at every step.
async fn write_through_a_full_disk(storage: &RedbStorage, disk: &Disk) -> BTreeMap<i32, Document> {
    let coll = ns("disk_full");
    storage
        .create_indexes(
            &coll,
            vec![index_spec("a_1", &[("a", 1)], false, false, None)],
        )
        .await
        .unwrap();
    let mut acknowledged: BTreeMap<i32, Document> = (0..200)
        .map(|id| (id, doc! {"_id": id, "a": id, "pad": "x".repeat(300)}))
        .collect();
    for chunk in acknowledged.values().collect::<Vec<_>>().chunks(50) {
        write_ok(
            storage,
            &coll,
            chunk.iter().map(|d| insert((*d).clone())).collect(),
        )
        .await;
    }
    let commits_before = storage.commit_count();
    let generation_before = storage.shared.db.generation();

    disk.fill();
    // Inserts, updates, deletes and DDL fail with OutOfDiskSpace and leave nothing behind (the
    // first on the disk itself, the others at once while the writer backs off).
    let error = storage
        .write(&coll, vec![insert(big_document(1000))], ORDERED)
        .await
        .unwrap_err();
    assert_out_of_disk_space(&error);
    assert_eq!(
        storage.shared.db.generation(),
        generation_before + 1,
        "the failed commit made redb refuse the database: it was reopened"
    );
    let record = storage.get(&coll, &Bson::Int32(5)).await.unwrap().unwrap();
    let error = storage
        .write(
            &coll,
            vec![replace(5, record.rev, big_document(5))],
            ORDERED,
        )
        .await
        .unwrap_err();
    assert_out_of_disk_space(&error);
    let error = storage
        .write(&coll, vec![delete(6, None)], ORDERED)
        .await
        .unwrap_err();
    assert_out_of_disk_space(&error);
    let error = storage
        .create_collection(&ns("disk_full_other"), Document::new(), Vec::new())
        .await
        .unwrap_err();
    assert_out_of_disk_space(&error);
    // Still failing after the backoff: each attempt reaches the disk again.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let error = storage
        .write(&coll, vec![insert(big_document(1001))], ORDERED)
        .await
        .unwrap_err();
    assert_out_of_disk_space(&error);
    assert_eq!(storage.commit_count(), commits_before, "nothing committed");
    // Reads go on and see exactly what was acknowledged.
    assert_holds_exactly(storage, &coll, &acknowledged).await;
    assert_eq!(
        storage.collection(&ns("disk_full_other")).await.unwrap(),
        None
    );
    assert_eq!(storage.stats(&coll).await.unwrap().count, 200);

    disk.free();
    // The same engine writes again once space is back (after the backoff).
    eventually(|| storage.write(&coll, vec![insert(big_document(1000))], ORDERED)).await;
    acknowledged.insert(1000, big_document(1000));
    let record = storage.get(&coll, &Bson::Int32(5)).await.unwrap().unwrap();
    let outcomes = write_ok(
        storage,
        &coll,
        vec![replace(5, record.rev, big_document(5)), delete(6, None)],
    )
    .await;
    assert!(matches!(outcomes[1], WriteOutcome::Deleted), "{outcomes:?}");
    acknowledged.insert(5, big_document(5));
    acknowledged.remove(&6);
    storage
        .create_collection(&ns("disk_full_other"), Document::new(), Vec::new())
        .await
        .unwrap();
    assert_holds_exactly(storage, &coll, &acknowledged).await;
    acknowledged
}

#[tokio::test]
async fn full_disk_fails_writes_keeps_reads_and_recovers_without_restart() {
    let (backend, disk) = DiskFullBackend::new(redb::backends::InMemoryBackend::new()).unwrap();
    let storage = RedbStorage::with_backend(backend).unwrap();
    write_through_a_full_disk(&storage, &disk).await;
}

#[tokio::test]
async fn full_disk_on_a_file_loses_nothing_acknowledged_across_reopen() {
    let dir = TempDir::new().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(super::DATA_FILE_NAME))
        .unwrap();
    let (backend, disk) =
        DiskFullBackend::new(redb::backends::FileBackend::new(file).unwrap()).unwrap();
    let acknowledged = {
        let storage = RedbStorage::with_backend(backend).unwrap();
        write_through_a_full_disk(&storage, &disk).await
    };
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_holds_exactly(&storage, &ns("disk_full"), &acknowledged).await;
    assert!(storage
        .collection(&ns("disk_full_other"))
        .await
        .unwrap()
        .is_some());
}

/// A document rewritten between the read phase of reaping and its write phase keeps its new
/// version, and so do its index and expiry entries; the others of the batch go. Also the read
/// ahead: a plan made before the rewrite and taken by the next call spares it the same way.
#[tokio::test]
async fn reaping_spares_documents_rewritten_after_planning() {
    use crate::{RawRecord, ReapRequest, ReapSource};

    let storage = RedbStorage::in_memory().unwrap();
    let coll = ns("reap_rewrite");
    storage
        .create_indexes(
            &coll,
            vec![index_spec("a_1", &[("a", 1)], false, false, None)],
        )
        .await
        .unwrap();
    let old = WriteMeta {
        last_write_ms: 10,
        ttl: TtlClass::Default,
    };
    write_ok(
        &storage,
        &coll,
        (0..60)
            .map(|i| insert_with(doc! {"_id": i, "a": i}, old, None))
            .collect(),
    )
    .await;
    let request = |resume_after: Option<Vec<u8>>| ReapRequest {
        expire_at: None,
        source: ReapSource::Expiry {
            order: ExpiryOrder::LastWrite,
            range: (Bound::Unbounded, Bound::Included(10)),
        },
        resume_after,
        limit: 20,
        // Judged by the document alone: a rewritten document is still "expired".
        expired: RecordPredicate::new(|record: &RawRecord| record.doc.get_i32("a").is_ok()),
    };
    let rewrite = |id: i32, rev: u64| {
        replace_with(
            id,
            rev,
            doc! {"_id": id, "a": 1000 + id},
            // Out of the range reaped, so only the revision check can spare it the first time.
            WriteMeta {
                last_write_ms: 50,
                ttl: TtlClass::Default,
            },
            None,
        )
    };

    // Plan, rewrite one planned document, then delete.
    let plan = super::reap::plan(&storage.shared, &coll, &request(None))
        .unwrap()
        .unwrap();
    let rev = storage
        .get(&coll, &Bson::Int32(3))
        .await
        .unwrap()
        .unwrap()
        .rev;
    write_ok(&storage, &coll, vec![rewrite(3, rev)]).await;
    let options = WriteOptions {
        background: true,
        ..ORDERED
    };
    let deleted = {
        let coll = coll.clone();
        storage
            .submit(options, 0, move |batch| {
                super::reap::apply(batch, &coll, plan)
            })
            .await
            .unwrap()
    };
    assert_eq!(deleted, 19);
    let survivor = storage.get(&coll, &Bson::Int32(3)).await.unwrap().unwrap();
    assert_eq!(survivor.doc, doc! {"_id": 3, "a": 1003});
    assert_eq!(survivor.last_write_ms, 50);

    // Through the API: the first call reads the next batch ahead; a rewrite made meanwhile is
    // spared by the second call, which deletes the rest.
    let first = storage.reap(&coll, request(None)).await.unwrap();
    assert_eq!(first.deleted, 20);
    let rev = storage
        .get(&coll, &Bson::Int32(50))
        .await
        .unwrap()
        .unwrap()
        .rev;
    write_ok(&storage, &coll, vec![rewrite(50, rev)]).await;
    let second = storage.reap(&coll, request(first.resume)).await.unwrap();
    assert_eq!(second.deleted, 19);
    assert_eq!(second.resume, None);

    let mut left: Vec<Bson> = scan_all(&storage, &coll, ScanSource::Collection, false, 10)
        .await
        .iter()
        .map(|record| record.doc.get("_id").cloned().unwrap())
        .collect();
    left.sort_by_key(|id| id.as_i32());
    assert_eq!(left, vec![Bson::Int32(3), Bson::Int32(50)]);
    let index_entries = scan_all(
        &storage,
        &coll,
        ScanSource::Index {
            name: "a_1".to_string(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        10,
    )
    .await;
    assert_eq!(
        index_entries.len(),
        2,
        "only the survivors' index entries are left"
    );
    let by_last_write =
        conformance::expiry_all(&storage, &coll, ExpiryOrder::LastWrite, ALL_TIMES, 10).await;
    assert_eq!(
        by_last_write.len(),
        2,
        "only the survivors' expiry entries are left"
    );
}

/// An index build a crash interrupts (registered, partly filled, never finished) is dropped when
/// the database opens again: no index, no table, no size entry; the name can be built again.
#[tokio::test]
async fn an_interrupted_index_build_is_dropped_at_open() {
    let dir = TempDir::new().unwrap();
    let coll = ns("builds");
    {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        let ops = (0..20).map(|i| insert(doc! {"_id": i, "k": i})).collect();
        write_ok(&storage, &coll, ops).await;
        let specs = vec![index_spec("k_1", &[("k", 1)], false, false, None)];
        let step_ns = coll.clone();
        let ids = storage
            .submit(super::DDL, 0, move |batch| {
                super::apply::begin_index_build(batch, &step_ns, specs)
            })
            .await
            .unwrap();
        let step_ns = coll.clone();
        let step_ids = ids.clone();
        let next = storage
            .submit(super::DDL, 0, move |batch| {
                super::apply::index_build_step(batch, &step_ns, &step_ids, None, 10)
            })
            .await
            .unwrap();
        assert!(next.is_some());
        // Building indexes are maintained but not visible.
        let meta = storage.collection(&coll).await.unwrap().unwrap();
        assert_eq!(meta.indexes.len(), 1);
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    let meta = storage.collection(&coll).await.unwrap().unwrap();
    assert_eq!(meta.indexes.len(), 1);
    let entry = storage
        .shared
        .catalog()
        .collections
        .get(&coll)
        .cloned()
        .unwrap();
    assert!(entry.indexes.is_empty());
    let stats = storage.stats(&coll).await.unwrap();
    assert_eq!(stats.index_sizes.len(), 1, "{:?}", stats.index_sizes);
    let meta = storage
        .create_indexes(
            &coll,
            vec![index_spec("k_1", &[("k", 1)], false, false, None)],
        )
        .await
        .unwrap();
    assert_eq!(meta.indexes.len(), 2);
    let found = scan_all(
        &storage,
        &coll,
        ScanSource::Index {
            name: "k_1".into(),
            ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
        },
        false,
        7,
    )
    .await;
    assert_eq!(found.len(), 20);
}

#[tokio::test]
async fn every_write_takes_a_greater_cluster_time_which_survives_reopen() {
    let dir = TempDir::new().unwrap();
    let after_writes = {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        assert_eq!(
            storage.cluster_time(),
            bson::Timestamp {
                time: 0,
                increment: 0
            }
        );
        let mut seen = Vec::new();
        for id in 0..5 {
            write_ok(&storage, &ns("c"), vec![insert(doc! {"_id": id})]).await;
            seen.push(storage.cluster_time());
        }
        write_ok(
            &storage,
            &ns("c"),
            vec![insert(doc! {"_id": 10}), insert(doc! {"_id": 11})],
        )
        .await;
        seen.push(storage.cluster_time());
        let packed = |t: &bson::Timestamp| (u64::from(t.time) << 32) | u64::from(t.increment);
        assert!(
            seen.windows(2)
                .all(|pair| packed(&pair[0]) < packed(&pair[1])),
            "{seen:?}"
        );
        // A batch of two writes took two times.
        assert!(packed(&seen[5]) >= packed(&seen[4]) + 2);
        seen[5]
    };
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(storage.cluster_time(), after_writes);
}

#[tokio::test]
async fn a_session_record_is_stored_with_its_write_and_survives_reopen() {
    use crate::SessionRecord;
    let dir = TempDir::new().unwrap();
    {
        let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
        let results = storage
            .write_recorded(
                &ns("c"),
                vec![insert(doc! {"_id": 1}), insert(doc! {"_id": 1})],
                WriteOptions {
                    ordered: false,
                    ..ORDERED
                },
                None,
                Box::new(|succeeded, _| {
                    let done = succeeded.iter().filter(|ok| **ok).count();
                    Some(SessionRecord {
                        key: b"session-a".to_vec(),
                        txn_number: 7,
                        statements: vec![(0, std::sync::Arc::new(doc! {"n": 1}))],
                        header: doc! {"n": done as i32},
                    })
                }),
            )
            .await
            .unwrap();
        assert!(results[0].is_ok() && results[1].is_err());
        storage
            .write_recorded(
                &ns("c"),
                vec![insert(doc! {"_id": 2})],
                ORDERED,
                None,
                Box::new(|_, _| None),
            )
            .await
            .unwrap();
        assert_eq!(storage.session_record(b"session-b").await.unwrap(), None);
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(
        storage.session_record(b"session-a").await.unwrap(),
        Some(doc! {"txnNumber": 7_i64, "n": 1})
    );
    assert_eq!(
        storage.session_statements(b"session-a", 7).await.unwrap(),
        vec![(0, doc! {"n": 1})]
    );
    assert_eq!(
        storage.session_records().await.unwrap(),
        vec![(b"session-a".to_vec(), doc! {"txnNumber": 7_i64, "n": 1})]
    );
    assert_eq!(
        scan_all(&storage, &ns("c"), ScanSource::Collection, false, 10)
            .await
            .len(),
        2
    );
}

/// A recorded write of `statements` under `txn_number` for session `key` (one insert each).
async fn record_statements(
    storage: &RedbStorage,
    key: &[u8],
    txn_number: i64,
    statements: std::ops::Range<i32>,
) {
    use crate::SessionRecord;
    let session = String::from_utf8_lossy(key).into_owned();
    let key = key.to_vec();
    let ops = statements
        .clone()
        .map(|stmt_id| insert(doc! {"_id": format!("{session}/{txn_number}/{stmt_id}")}))
        .collect();
    let rows: Vec<(i32, std::sync::Arc<bson::Document>)> = statements
        .map(|stmt_id| (stmt_id, std::sync::Arc::new(doc! {"n": 1, "stmt": stmt_id})))
        .collect();
    let results = storage
        .write_recorded(
            &ns("rows"),
            ops,
            ORDERED,
            None,
            Box::new(move |_, time| {
                Some(SessionRecord {
                    key: key.clone(),
                    txn_number,
                    statements: rows.clone(),
                    header: doc! {"ts": time.ts},
                })
            }),
        )
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok));
}

/// Every row of the statement table, as (key, value) bytes.
fn statement_rows(storage: &RedbStorage) -> Vec<(Vec<u8>, Vec<u8>)> {
    let txn = super::read::begin(&storage.shared).unwrap();
    let table = txn.open_table(super::format::SESSION_STATEMENTS).unwrap();
    redb::ReadableTable::iter(&table)
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value().to_vec(), value.value().to_vec())
        })
        .collect()
}

#[tokio::test]
async fn session_statements_are_one_row_each_and_a_newer_txn_number_drops_the_older_rows() {
    let storage = RedbStorage::in_memory().unwrap();
    // Two commits of one txnNumber each write only their own statements.
    record_statements(&storage, b"session-a", 5, 0..3).await;
    assert_eq!(statement_rows(&storage).len(), 3);
    record_statements(&storage, b"session-a", 5, 3..5).await;
    // A session whose key extends session-a's: its rows are never read as session-a's.
    record_statements(&storage, b"session-ab", 5, 0..2).await;
    let rows = statement_rows(&storage);
    assert_eq!(rows.len(), 7);
    // Keys: u32 BE key length ++ session key ++ txnNumber ++ stmtId, order-preserving.
    let (key, value) = &rows[0];
    let mut expected = vec![0, 0, 0, 9];
    expected.extend_from_slice(b"session-a");
    expected.extend_from_slice(&(5_u64 ^ (1 << 63)).to_be_bytes());
    expected.extend_from_slice(&(1_u32 << 31).to_be_bytes());
    assert_eq!(key, &expected);
    assert_eq!(
        bson::from_slice::<bson::Document>(value).unwrap(),
        doc! {"n": 1, "stmt": 0}
    );
    let statements = storage.session_statements(b"session-a", 5).await.unwrap();
    assert_eq!(
        statements.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(statements[4].1, doc! {"n": 1, "stmt": 4});
    assert_eq!(
        storage
            .session_statements(b"session-ab", 5)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(storage
        .session_statements(b"session-a", 4)
        .await
        .unwrap()
        .is_empty());
    // Negative stmtIds sort before the others.
    record_statements(&storage, b"session-a", 5, -2..0).await;
    let ids: Vec<i32> = storage
        .session_statements(b"session-a", 5)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, vec![-2, -1, 0, 1, 2, 3, 4]);
    // The first commit of txnNumber 6 deletes session-a's txnNumber 5 rows, not session-ab's.
    record_statements(&storage, b"session-a", 6, 0..1).await;
    assert!(storage
        .session_statements(b"session-a", 5)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        storage.session_statements(b"session-a", 6).await.unwrap(),
        vec![(0, doc! {"n": 1, "stmt": 0})]
    );
    assert_eq!(statement_rows(&storage).len(), 3);
    let headers = storage.session_records().await.unwrap();
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[0].0, b"session-a".to_vec());
    assert_eq!(headers[0].1.get_i64("txnNumber").unwrap(), 6);
    assert_eq!(headers[1].1.get_i64("txnNumber").unwrap(), 5);
}

#[tokio::test]
async fn whole_session_records_of_format_version_3_are_split_into_rows_when_opened() {
    let dir = TempDir::new().unwrap();
    drop(RedbStorage::open(dir.path(), Durability::Durable).unwrap());
    {
        // A version 3 file: one whole record per session.
        let db = redb::Database::create(dir.path().join(super::DATA_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        let whole = doc! {
            "txnNumber": 3_i64,
            "statements": {"0": {"n": 1}, "2": {"n": 1, "nModified": 1}},
            "lastWriteOpTime": {"ts": bson::Timestamp { time: 9, increment: 1 }, "t": 1_i64},
        };
        txn.open_table(super::format::SESSIONS)
            .unwrap()
            .insert(
                &b"session-old"[..],
                bson::to_vec(&whole).unwrap().as_slice(),
            )
            .unwrap();
        mark_format_version(&txn, 3);
        txn.commit().unwrap();
    }
    let storage = RedbStorage::open(dir.path(), Durability::Durable).unwrap();
    assert_eq!(
        storage.session_record(b"session-old").await.unwrap(),
        Some(doc! {
            "txnNumber": 3_i64,
            "lastWriteOpTime": {"ts": bson::Timestamp { time: 9, increment: 1 }, "t": 1_i64},
        })
    );
    assert_eq!(
        storage.session_statements(b"session-old", 3).await.unwrap(),
        vec![(0, doc! {"n": 1}), (2, doc! {"n": 1, "nModified": 1})]
    );
    // A retry goes on where the old record left off; a newer txnNumber drops it.
    record_statements(&storage, b"session-old", 3, 3..4).await;
    assert_eq!(
        storage
            .session_statements(b"session-old", 3)
            .await
            .unwrap()
            .len(),
        3
    );
    record_statements(&storage, b"session-old", 4, 0..1).await;
    assert_eq!(statement_rows(&storage).len(), 1);
    drop(storage);
    assert_eq!(
        stored_format_version(dir.path()),
        super::format::FORMAT_VERSION
    );
}

#[tokio::test]
async fn with_an_oplog_every_write_and_expiry_appends_an_entry_in_the_same_commit() {
    use crate::oplog::oplog_namespace;
    use crate::{ReapRequest, ReapSource, RecordInstant, WriteOp};
    let storage = RedbStorage::in_memory().unwrap();
    storage
        .create_collection(
            &oplog_namespace(),
            doc! {"capped": true, "size": 1_048_576},
            Vec::new(),
        )
        .await
        .unwrap();
    let coll = ns("c");
    let outcomes = write_ok(
        &storage,
        &coll,
        vec![
            insert(doc! {"_id": 1, "a": 1}),
            insert(doc! {"_id": 2, "a": 2}),
        ],
    )
    .await;
    let rev = |outcome: &WriteOutcome| match outcome {
        WriteOutcome::Inserted { rev, .. } | WriteOutcome::Replaced { rev, .. } => *rev,
        WriteOutcome::Deleted => 0,
    };
    let update = WriteOp::Replace {
        id: Bson::Int32(1),
        expected_rev: rev(&outcomes[0]),
        doc: doc! {"_id": 1, "a": 5, "b": true},
        meta: conformance::META,
        supersede: None,
        replacement: false,
    };
    write_ok(&storage, &coll, vec![update, delete(2, None)]).await;
    // A write to `local` is not logged.
    write_ok(
        &storage,
        &ns_in("local", "other"),
        vec![insert(doc! {"_id": 1})],
    )
    .await;
    // The reaper's deletion is an expiry entry with the instant it reports.
    let page = storage
        .reap(
            &coll,
            ReapRequest {
                source: ReapSource::Index {
                    name: "_id_".into(),
                    range: (Bound::Unbounded, Bound::Unbounded),
                },
                resume_after: None,
                limit: 10,
                expired: RecordPredicate::new(|_| true),
                expire_at: Some(RecordInstant::new(|_| Some(42_000))),
            },
        )
        .await
        .unwrap();
    assert_eq!(page.deleted, 1);
    let entries: Vec<Document> = scan_all(
        &storage,
        &oplog_namespace(),
        ScanSource::Collection,
        false,
        100,
    )
    .await
    .into_iter()
    .map(|record| record.doc.into_document())
    .collect();
    let ops: Vec<(&str, &str)> = entries
        .iter()
        .map(|entry| (entry.get_str("op").unwrap(), entry.get_str("ns").unwrap()))
        .collect();
    assert_eq!(
        ops,
        [
            ("c", "enginetest.$cmd"),
            ("i", "enginetest.c"),
            ("i", "enginetest.c"),
            ("u", "enginetest.c"),
            ("d", "enginetest.c"),
            ("d", "enginetest.c"),
        ]
    );
    // The implicit creation is logged as mongod logs `create`.
    assert_eq!(
        entries[0].get_document("o").unwrap(),
        &doc! {"create": "c", "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
    );
    let entries = &entries[1..];
    assert_eq!(
        entries[2].get_document("o").unwrap(),
        &doc! {"$v": 2, "diff": {"u": {"a": 5}, "i": {"b": true}}}
    );
    assert_eq!(entries[2].get_document("o2").unwrap(), &doc! {"_id": 1});
    assert!(!entries[3].contains_key("expired"));
    assert_eq!(entries[4].get_bool("expired"), Ok(true));
    assert_eq!(
        entries[4]
            .get_datetime("expireAt")
            .unwrap()
            .timestamp_millis(),
        42_000
    );
    let times: Vec<bson::Timestamp> = entries
        .iter()
        .map(|entry| entry.get_timestamp("ts").unwrap())
        .collect();
    assert!(times
        .windows(2)
        .all(|pair| (pair[0].time, pair[0].increment) < (pair[1].time, pair[1].increment)));
    assert!(entries
        .iter()
        .all(|entry| entry.get("_id") == entry.get("ts")));
    assert_eq!(storage.cluster_time(), *times.last().unwrap());
}

#[tokio::test]
async fn a_snapshot_sees_neither_later_writes_nor_later_collections() {
    let storage = RedbStorage::in_memory().unwrap();
    let (a, b) = (ns("snap_a"), ns("snap_b"));
    write_ok(&storage, &a, vec![insert(doc! {"_id": 1, "v": 1})]).await;
    let snapshot = storage.snapshot().await.unwrap();
    let rev = storage.get(&a, &Bson::Int32(1)).await.unwrap().unwrap().rev;
    write_ok(
        &storage,
        &a,
        vec![
            replace(1, rev, doc! {"_id": 1, "v": 2}),
            insert(doc! {"_id": 2}),
        ],
    )
    .await;
    write_ok(&storage, &b, vec![insert(doc! {"_id": 1})]).await;
    let seen = snapshot.get(&a, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(seen.doc.document(), &doc! {"_id": 1, "v": 1});
    assert!(snapshot.get(&a, &Bson::Int32(2)).await.unwrap().is_none());
    assert!(snapshot.collection(&b).is_none());
    assert_eq!(snapshot.list_collections("enginetest").len(), 1);
    let counted = snapshot.count_entries(&a, Vec::new()).await.unwrap();
    assert_eq!(counted.documents, 1);
}

#[tokio::test]
async fn a_failing_transaction_commit_leaves_nothing_and_costs_no_one_else() {
    let storage = Arc::new(RedbStorage::in_memory().unwrap());
    let (a, created) = (ns("txn_a"), ns("txn_created"));
    write_ok(storage.as_ref(), &a, vec![insert(doc! {"_id": 1, "v": 1})]).await;
    let rev = storage.get(&a, &Bson::Int32(1)).await.unwrap().unwrap().rev;
    let commit = |expected_rev: u64| crate::TransactionCommit {
        creates: vec![(created.clone(), Document::new(), Vec::new())],
        writes: vec![
            (created.clone(), vec![insert(doc! {"_id": "x"})], None),
            (
                a.clone(),
                vec![
                    insert(doc! {"_id": 2}),
                    replace(1, expected_rev, doc! {"_id": 1, "v": 10}),
                ],
                None,
            ),
        ],
        session: doc! {"txnNumber": 1_i64},
        record: None,
        force_durable: false,
    };
    // A stale revision fails the last operation: the collection created, the insert before it
    // and everything else of the commit are rolled back, while concurrent writes commit.
    let concurrent = {
        let storage = Arc::clone(&storage);
        let a = a.clone();
        tokio::spawn(async move {
            for id in 100..150 {
                write_ok(storage.as_ref(), &a, vec![insert(doc! {"_id": id})]).await;
            }
        })
    };
    let failed = storage.commit_transaction(commit(rev + 1_000)).await;
    assert_eq!(failed, Err(StorageError::WriteConflict));
    concurrent.await.unwrap();
    assert!(storage.collection(&created).await.unwrap().is_none());
    assert!(storage.get(&a, &Bson::Int32(2)).await.unwrap().is_none());
    let one = storage.get(&a, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(one.doc.document(), &doc! {"_id": 1, "v": 1});
    assert_eq!(
        scan_all(storage.as_ref(), &a, ScanSource::Collection, false, 64)
            .await
            .len(),
        51
    );
    // With the right revision everything applies at once.
    storage.commit_transaction(commit(rev)).await.unwrap();
    assert!(storage
        .get(&created, &Bson::from("x"))
        .await
        .unwrap()
        .is_some());
    assert!(storage.get(&a, &Bson::Int32(2)).await.unwrap().is_some());
    let one = storage.get(&a, &Bson::Int32(1)).await.unwrap().unwrap();
    assert_eq!(one.doc.document(), &doc! {"_id": 1, "v": 10});
}
