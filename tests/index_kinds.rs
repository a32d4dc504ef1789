//! Hashed, wildcard and text indexes through the driver: creation and validation with mongod's
//! errors, listIndexes shapes, writes with those indexes present, and finds that stay correct
//! (the planner does not use these kinds yet, so they are collection scans).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;

async fn run(db: &mongodb::Database, command: Document) -> Document {
    db.run_command(command).await.expect("command succeeds")
}

/// The (code, message) of a failed write: a write error of a single-document write, or a
/// command error.
fn write_error<T: std::fmt::Debug>(result: mongodb::error::Result<T>) -> (i32, String) {
    let error = result.expect_err("write fails");
    match *error.kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref write)) => {
            (write.code, write.message.clone())
        }
        mongodb::error::ErrorKind::Command(ref command) => (command.code, command.message.clone()),
        ref other => panic!("expected a write error, got {other:?}"),
    }
}

fn create(spec: Document) -> Document {
    doc! {"createIndexes": "c", "indexes": [spec]}
}

async fn list(db: &mongodb::Database) -> Vec<Document> {
    common::first_batch(&run(db, doc! {"listIndexes": "c"}).await)
}

async fn ids(coll: &mongodb::Collection<Document>, filter: Document) -> Vec<i32> {
    let mut found: Vec<i32> = coll
        .find(filter)
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    found.sort_unstable();
    found
}

#[tokio::test]
async fn hashed_indexes_are_created_listed_and_refuse_arrays() {
    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let coll = db.collection::<Document>("c");
    coll.insert_many(vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": "x"}])
        .await
        .unwrap();
    run(
        &db,
        create(doc! {"key": {"a": "hashed"}, "name": "a_hashed"}),
    )
    .await;
    run(
        &db,
        create(doc! {"key": {"b": 1, "h": "hashed", "c": -1}, "name": "compound"}),
    )
    .await;
    let specs = list(&db).await;
    assert_eq!(
        specs[1],
        doc! {"v": 2, "key": {"a": "hashed"}, "name": "a_hashed"}
    );
    assert_eq!(
        specs[2],
        doc! {"v": 2, "key": {"b": 1, "h": "hashed", "c": -1}, "name": "compound"}
    );

    let error = write_error(coll.insert_one(doc! {"_id": 3, "a": [1, 2]}).await);
    assert_eq!(error.0, 16766);
    assert_eq!(
        error.1,
        "Error: hashed indexes do not currently support array values. Found array at path: a"
    );
    let error = write_error(coll.insert_one(doc! {"_id": 4, "c": [1]}).await);
    assert_eq!(error.0, 16766, "every field of a compound hashed index");
    let error = write_error(
        coll.update_one(doc! {"_id": 1}, doc! {"$set": {"a": [1]}})
            .await,
    );
    assert_eq!(error.0, 16766);
    coll.insert_one(doc! {"_id": 5, "a": 1.5}).await.unwrap();
    coll.update_one(doc! {"_id": 5}, doc! {"$set": {"a": 2}})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(ids(&coll, doc! {"a": 1}).await, vec![1]);
    assert_eq!(ids(&coll, doc! {"a": {"$gte": 1}}).await, vec![1, 5]);

    // Building over an array fails like an insert.
    let other = db.collection::<Document>("arrays");
    other.insert_one(doc! {"_id": 1, "a": [1]}).await.unwrap();
    let error = command_error(
        db.run_command(doc! {"createIndexes": "arrays", "indexes": [{"key": {"a": "hashed"}, "name": "a_hashed"}]})
            .await,
    );
    assert_eq!(error.0, 16766);

    // Validation.
    let cases: [(Document, i32, &str); 4] = [
        (
            doc! {"key": {"a": "hashed"}, "name": "u", "unique": true},
            16764,
            "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
        ),
        (
            doc! {"key": {"a": "hashed", "b": "hashed"}, "name": "two"},
            31303,
            "A maximum of one index field is allowed to be hashed but found 2 for 'key' { a: \"hashed\", b: \"hashed\" }",
        ),
        (
            doc! {"key": {"a": "hashed", "b": "text"}, "name": "mixed"},
            67,
            "Can't use more than one index plugin for a single index.",
        ),
        (
            // validateIndexSpecTTL: a single-field hashed index may be TTL, a compound one not.
            doc! {"key": {"a": 1, "b": "hashed"}, "name": "ttl", "expireAfterSeconds": 10},
            67,
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        ),
    ];
    for (spec, code, message) in cases {
        let error = command_error(db.run_command(create(spec.clone())).await);
        assert_eq!(error.0, code, "{spec}");
        assert!(error.2.contains(message), "{spec}: {}", error.2);
    }
    // coll_mod.cpp counts the key pattern's fields only: a single-field hashed index takes a
    // TTL (which mongod's TTL monitor then skips).
    let reply = run(
        &db,
        doc! {"collMod": "c", "index": {"name": "a_hashed", "expireAfterSeconds": 5}},
    )
    .await;
    assert_eq!(reply.get_i64("expireAfterSeconds_new"), Ok(5), "{reply}");
    run(
        &db,
        doc! {"collMod": "c", "index": {"name": "a_hashed", "hidden": true}},
    )
    .await;
    assert_eq!(list(&db).await[1].get_bool("hidden"), Ok(true));
    run(&db, doc! {"dropIndexes": "c", "index": "a_hashed"}).await;
    run(
        &db,
        doc! {"dropIndexes": "c", "index": {"b": 1, "h": "hashed", "c": -1}},
    )
    .await;
    assert_eq!(list(&db).await.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn wildcard_indexes_validate_and_keep_finds_correct() {
    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let coll = db.collection::<Document>("c");
    run(&db, create(doc! {"key": {"$**": 1}, "name": "all"})).await;
    run(&db, create(doc! {"key": {"a.$**": 1}, "name": "a_sub"})).await;
    let specs = list(&db).await;
    assert_eq!(specs[1], doc! {"v": 2, "key": {"$**": 1}, "name": "all"});
    assert_eq!(
        specs[2],
        doc! {"v": 2, "key": {"a.$**": 1}, "name": "a_sub"}
    );
    run(&db, doc! {"dropIndexes": "c", "index": "all"}).await;
    run(
        &db,
        create(doc! {"key": {"$**": 1}, "name": "proj", "wildcardProjection": {"a": 1, "_id": 0}}),
    )
    .await;
    assert_eq!(
        list(&db).await[2],
        doc! {"v": 2, "key": {"$**": 1}, "name": "proj", "wildcardProjection": {"a": 1, "_id": 0}}
    );
    coll.insert_many(vec![
        doc! {"_id": 1, "a": {"b": [1, 2], "c": {}}, "d": "x"},
        doc! {"_id": 2, "a": 5, "e": [[1], []]},
        doc! {"_id": 3, "b.c": 1},
    ])
    .await
    .unwrap();
    coll.update_one(doc! {"_id": 2}, doc! {"$set": {"a": {"b": 2}}})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 3}).await.unwrap();
    assert_eq!(ids(&coll, doc! {"a.b": 2}).await, vec![1, 2]);
    assert_eq!(ids(&coll, doc! {"a.b": {"$gt": 1}}).await, vec![1, 2]);

    let cases: [(Document, i32, &str); 8] = [
        (
            doc! {"key": {"$**": 1, "b": 1}, "name": "x"},
            67,
            "wildcard indexes do not allow compounding",
        ),
        (
            doc! {"key": {"$**": -1}, "name": "x"},
            67,
            "A numeric value in a $** index key pattern must be positive.",
        ),
        (
            doc! {"key": {"$**": 1}, "name": "x", "unique": true},
            67,
            "Index type 'wildcard' does not support the unique option",
        ),
        (
            doc! {"key": {"$**": 1}, "name": "x", "sparse": true},
            67,
            "Index type 'wildcard' does not support the sparse option",
        ),
        (
            doc! {"key": {"a": 1}, "name": "x", "wildcardProjection": {"a": 1}},
            2,
            "The field 'wildcardProjection' is only allowed in 'wildcard' indexes",
        ),
        (
            doc! {"key": {"a.$**": 1}, "name": "x", "wildcardProjection": {"a": 1}},
            9,
            "The field 'wildcardProjection' is only allowed when 'key' is",
        ),
        (
            doc! {"key": {"$**": 1}, "name": "x", "wildcardProjection": {}},
            9,
            "The 'wildcardProjection' field can't be an empty object",
        ),
        (
            doc! {"key": {"$**": 1}, "name": "x", "wildcardProjection": {"a": 1, "b": 0}},
            31253,
            "Cannot do exclusion on field b in inclusion projection",
        ),
    ];
    for (spec, code, message) in cases {
        let error = command_error(db.run_command(create(spec.clone())).await);
        assert_eq!(error.0, code, "{spec}");
        assert!(error.2.contains(message), "{spec}: {}", error.2);
    }
    server.stop().await;
}

#[tokio::test]
async fn text_indexes_are_normalised_unique_per_collection_and_maintained() {
    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let coll = db.collection::<Document>("c");
    let documents: Vec<Document> = (0..500)
        .map(|i| {
            doc! {"_id": i, "subject": format!("coffee number {i} and cakes"), "n": i % 7,
            "tags": ["baking", "cafés"]}
        })
        .collect();
    coll.insert_many(documents).await.unwrap();
    run(
        &db,
        create(doc! {"key": {"subject": "text", "tags": "text"}, "name": "search", "weights": {"subject": 10}}),
    )
    .await;
    assert_eq!(
        list(&db).await[1],
        doc! {"v": 2, "key": {"_fts": "text", "_ftsx": 1}, "name": "search",
        "weights": {"subject": 10, "tags": 1}, "default_language": "english",
        "language_override": "language", "textIndexVersion": 3}
    );
    // The same spec again is a no-op; another text index is refused.
    let again = run(
        &db,
        create(doc! {"key": {"subject": "text", "tags": "text"}, "name": "search", "weights": {"subject": 10}}),
    )
    .await;
    assert_eq!(again.get_str("note"), Ok("all indexes already exist"));
    let error = command_error(
        db.run_command(create(
            doc! {"key": {"n": 1, "other": "text"}, "name": "second"},
        ))
        .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            67,
            "only one text index per collection allowed, found existing text index \"search\""
        )
    );
    let error = command_error(
        db.run_command(create(doc! {"key": {"other": "text"}, "name": "second"}))
            .await,
    );
    assert_eq!(
        error.0, 85,
        "same normalised key, different name and options"
    );

    // Writes with the index present; bad language overrides fail like mongod.
    coll.insert_one(doc! {"_id": 1000, "subject": "el café", "language": "spanish"})
        .await
        .unwrap();
    let error = write_error(
        coll.insert_one(doc! {"_id": 1001, "subject": "x", "language": "klingon"})
            .await,
    );
    assert_eq!(
        (error.0, error.1.as_str()),
        (17262, "language override unsupported: klingon")
    );
    let error = write_error(
        coll.insert_one(doc! {"_id": 1002, "subject": "x", "language": 5})
            .await,
    );
    assert_eq!(error.0, 17261);
    coll.update_many(doc! {"n": 3}, doc! {"$set": {"subject": "tea"}})
        .await
        .unwrap();
    coll.delete_many(doc! {"n": 4}).await.unwrap();
    assert_eq!(
        coll.count_documents(doc! {"n": {"$in": [3, 4]}})
            .await
            .unwrap(),
        71
    );
    run(&db, doc! {"dropIndexes": "c", "index": "search"}).await;
    assert_eq!(list(&db).await.len(), 1);

    // Compound text keys and the other options.
    run(
        &db,
        create(
            doc! {"key": {"n": 1, "t": "text", "z": -1}, "name": "compound",
            "default_language": "es", "language_override": "idioma", "textIndexVersion": 3},
        ),
    )
    .await;
    assert_eq!(
        list(&db).await[1],
        doc! {"v": 2, "key": {"n": 1, "_fts": "text", "_ftsx": 1, "z": -1}, "name": "compound",
        "weights": {"t": 1}, "default_language": "es", "language_override": "idioma",
        "textIndexVersion": 3}
    );
    let error = write_error(
        coll.insert_one(doc! {"_id": 2000, "n": [1], "t": "x"})
            .await,
    );
    assert_eq!(error.0, 16675);
    server.stop().await;
}

#[tokio::test]
async fn text_and_plugin_validation_errors() {
    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let cases: [(Document, i32, &str); 11] = [
        (
            doc! {"key": {"a": "text", "b": 1, "c": "text"}, "name": "x"},
            67,
            "'text' fields in index must all be adjacent",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "weights": {"a": 0}},
            67,
            "text index weight must be in the exclusive interval (0,100000) but found: 0",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "weights": {"a": "x"}},
            67,
            "weight for text index needs numeric type",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "default_language": "klingon"},
            67,
            "default_language is not valid",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "language_override": "a.b"},
            67,
            "language_override is not valid",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "textIndexVersion": 9},
            67,
            "bad textIndexVersion: 9",
        ),
        (
            doc! {"key": {"a": "text"}, "name": "x", "unique": true},
            67,
            "Index type 'text' does not support the unique option",
        ),
        (
            doc! {"key": {"a": 1}, "name": "x", "weights": {"a": 1}},
            67,
            "the field 'weights' can only be specified with text indexes",
        ),
        (
            doc! {"key": {"a": "bogus"}, "name": "x"},
            67,
            "Unknown index plugin 'bogus'",
        ),
        (
            doc! {"key": {"a": "geoHaystack"}, "name": "x"},
            67,
            "GeoHaystack indexes cannot be created in version 5.0 and above",
        ),
        (
            doc! {"key": {"a": "2d"}, "name": "x"},
            238,
            "tideway does not support '2d' indexes",
        ),
    ];
    for (spec, code, message) in cases {
        let error = command_error(db.run_command(create(spec.clone())).await);
        assert_eq!(error.0, code, "{spec}");
        assert!(error.2.contains(message), "{spec}: {}", error.2);
    }
    // Nothing was created.
    let error = command_error(db.run_command(doc! {"listIndexes": "c"}).await);
    assert_eq!(error.0, 26);
    server.stop().await;
}

/// A file database keeps the index kinds across a restart.
#[tokio::test]
async fn index_kinds_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = tideway::Config {
        storage: tideway::config::StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        ..common::test_config()
    };
    {
        let server = TestServer::start_with(config.clone()).await;
        let db = server.client().database("kinds");
        run(&db, create(doc! {"key": {"a": "hashed"}, "name": "h"})).await;
        run(&db, create(doc! {"key": {"$**": 1}, "name": "w"})).await;
        run(&db, create(doc! {"key": {"t": "text"}, "name": "t"})).await;
        db.collection::<Document>("c")
            .insert_one(doc! {"_id": 1, "a": 1, "t": "hello"})
            .await
            .unwrap();
        server.stop().await;
    }
    let server = TestServer::start_with(config).await;
    let db = server.client().database("kinds");
    let names: Vec<String> = list(&db)
        .await
        .iter()
        .map(|spec| spec.get_str("name").unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["_id_", "h", "w", "t"]);
    let error = write_error(
        db.collection::<Document>("c")
            .insert_one(doc! {"_id": 2, "a": [1]})
            .await,
    );
    assert_eq!(error.0, 16766);
    server.stop().await;
}

/// What the planner will do: scan each kind's entries through `Storage::scan` with the key
/// prefixes the kind's module builds.
#[tokio::test]
async fn index_entries_are_scannable_with_the_planner_api() {
    use std::ops::Bound;
    use tideway_query::hash::hashed_value;
    use tideway_query::keycodec::{self, Direction};
    use tideway_storage::{textkeys, wildcard, Namespace, ScanRequest, ScanSource};

    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let coll = db.collection::<Document>("c");
    coll.insert_many(vec![
        doc! {"_id": 1, "h": 1, "a": {"b": [1, 2]}, "t": "Coffee and cakes"},
        doc! {"_id": 2, "h": "one", "a": {"b": 2}, "t": "tea and cake"},
        doc! {"_id": 3, "h": 1.0, "a": 3, "t": "coffee"},
    ])
    .await
    .unwrap();
    run(&db, create(doc! {"key": {"h": "hashed"}, "name": "h"})).await;
    run(
        &db,
        create(doc! {"key": {"$**": 1}, "name": "w", "wildcardProjection": {"a": 1}}),
    )
    .await;
    run(&db, create(doc! {"key": {"t": "text"}, "name": "t"})).await;

    let storage = server.state.storage.clone();
    let ns = Namespace::new("kinds", "c");
    let scan = |name: &str, ranges: Vec<tideway_storage::KeyRange>| {
        let storage = storage.clone();
        let ns = ns.clone();
        let name = name.to_string();
        async move {
            let page = storage
                .scan(
                    &ns,
                    ScanRequest {
                        source: ScanSource::Index { name, ranges },
                        resume_after: None,
                        reverse: false,
                        limit: 100,
                        hide: None,
                        key_filter: None,
                        covered: false,
                    },
                )
                .await
                .unwrap();
            let mut ids: Vec<i32> = page
                .records
                .iter()
                .map(|record| record.doc.get_i32("_id").unwrap())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        }
    };
    let point = |bytes: Vec<u8>| (Bound::Included(bytes.clone()), Bound::Included(bytes));

    // Hashed: an equality is the point hashed_value(v); 1 and 1.0 hash alike.
    let mut key = Vec::new();
    keycodec::encode_value(
        &mut key,
        &Bson::Int64(hashed_value(&Bson::Int32(1))),
        Direction::Ascending,
    );
    assert_eq!(scan("h", vec![point(key)]).await, vec![1, 3]);

    // Wildcard: a path's value range, prefixed by the path.
    let mut two = Vec::new();
    keycodec::encode_value(&mut two, &Bson::Int32(2), Direction::Ascending);
    assert_eq!(
        scan("w", wildcard::wildcard_ranges("a.b", &[point(two)])).await,
        vec![1, 2]
    );
    let everything = (Bound::Unbounded, Bound::Unbounded);
    assert_eq!(
        scan("w", wildcard::wildcard_ranges("a", &[everything])).await,
        vec![3]
    );
    assert_eq!(
        scan("w", vec![point(wildcard::multikey_path_key("a.b"))]).await,
        vec![1],
        "a.b is multikey in document 1 only"
    );

    // Text: each term of the search is a key prefix; the score comes from the document.
    let index = tideway_query::text::TextIndex::from_spec(&list(&db).await[3]).unwrap();
    let query =
        tideway_query::text::TextQuery::parse(&Bson::Document(doc! {"$search": "coffee -tea"}))
            .unwrap();
    let mut found = Vec::new();
    for term in query.terms_to_scan(&index) {
        let prefix = textkeys::text_term_prefix(&[], &term);
        found.extend(scan("t", vec![point(prefix)]).await);
    }
    assert_eq!(found, vec![1, 3]);
    let third = coll.find_one(doc! {"_id": 3}).await.unwrap().unwrap();
    assert_eq!(index.score(&query, &third), Some(1.0));
    server.stop().await;
}
