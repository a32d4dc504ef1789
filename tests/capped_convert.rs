//! `convertToCapped`, `cloneCollectionAsCapped` and CappedPositionLost through the driver.
//! Expected values come from jstests/core/ddl/convert_to_capped.js, the manual's
//! convertToCapped page ("traverses the documents in the original collection in natural order",
//! "will not recreate indexes ... other than the index on the _id field"), and mongod's
//! src/mongo/db/commands/collection_to_capped.cpp, catalog/capped_utils.cpp,
//! catalog/collection_options.cpp and exec/collection_scan.cpp (named at each test).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use tideway_base::clock::Clock;

async fn run(db: &mongodb::Database, command: Document) -> Document {
    db.run_command(command).await.expect("command succeeds")
}

async fn options_of(db: &mongodb::Database, name: &str) -> Document {
    let reply = run(db, doc! {"listCollections": 1, "filter": {"name": name}}).await;
    let entries = first_batch(&reply);
    assert_eq!(entries.len(), 1, "{name} is listed once");
    entries[0].get_document("options").unwrap().clone()
}

async fn index_names(db: &mongodb::Database, name: &str) -> Vec<String> {
    let reply = run(db, doc! {"listIndexes": name}).await;
    first_batch(&reply)
        .iter()
        .map(|index| index.get_str("name").unwrap().to_owned())
        .collect()
}

async fn ids(db: &mongodb::Database, name: &str) -> Vec<i32> {
    let reply = run(db, doc! {"find": name, "batchSize": 10_000}).await;
    first_batch(&reply)
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect()
}

async fn is_capped(db: &mongodb::Database, name: &str) -> bool {
    run(db, doc! {"collStats": name})
        .await
        .get_bool("capped")
        .unwrap()
}

/// jstests/core/ddl/convert_to_capped.js: size required (72), a size past long long (2), a
/// view (166), a missing collection (26), then the conversion works, also of a capped one.
#[tokio::test]
async fn convert_to_capped_follows_the_jstest() {
    let server = TestServer::start().await;
    let db = server.client().database("convert_to_capped");
    for i in 0..10 {
        run(&db, doc! {"insert": "coll", "documents": [{"_id": i}]}).await;
    }
    let error = command_error(db.run_command(doc! {"convertToCapped": "coll"}).await);
    // collection_to_capped.cpp: safeNumberLong of the missing size is 0.
    assert_eq!(
        (error.0, error.2.as_str()),
        (72, "Capped collection size must be greater than zero")
    );
    assert!(!is_capped(&db, "coll").await);
    let error = command_error(
        db.run_command(
            doc! {"convertToCapped": "coll", "size": 5_308_156_746_568_725_891_247.0_f64},
        )
        .await,
    );
    // collection_options.cpp checkAndAdjustCappedSize.
    assert_eq!((error.0, error.2.as_str()), (2, "size cannot exceed 1 PB"));
    assert!(!is_capped(&db, "coll").await);

    run(
        &db,
        doc! {"create": "viewNss", "viewOn": "coll", "pipeline": [{"$match": {"x": 1}}]},
    )
    .await;
    let error = command_error(
        db.run_command(doc! {"convertToCapped": "viewNss", "size": 1000})
            .await,
    );
    assert_eq!(error.0, 166);
    let error = command_error(
        db.run_command(doc! {"convertToCapped": "nonExistingColl", "size": 1000})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            26,
            "source collection convert_to_capped.nonExistingColl does not exist"
        )
    );

    run(&db, doc! {"convertToCapped": "coll", "size": 1000}).await;
    assert!(is_capped(&db, "coll").await);
    // Rounded up to a multiple of 256 as `create` stores it (adjustCappedSize).
    assert_eq!(
        options_of(&db, "coll").await,
        doc! {"capped": true, "size": 1024}
    );
    assert_eq!(ids(&db, "coll").await, (0..10).collect::<Vec<_>>());
    // "Calling convertToCapped over an already capped collection should work".
    run(&db, doc! {"convertToCapped": "coll", "size": 1000}).await;
    assert!(is_capped(&db, "coll").await);
    // No temporary collection is left behind.
    let names = db.list_collection_names().await.unwrap();
    assert!(
        names.iter().all(|name| !name.contains("convertToCapped")),
        "{names:?}"
    );
}

/// The manual: documents go in natural order and the cap overwrites the oldest; only `_id_`
/// is recreated (so TTL and secondary indexes go); capped_utils.cpp keeps the other options
/// (here the validator) and copies without validating.
#[tokio::test]
async fn convert_keeps_the_newest_documents_that_fit_and_only_the_id_index() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"create": "events", "validator": {"n": {"$type": "int"}}, "validationLevel": "moderate"},
    )
    .await;
    let pad = "p".repeat(400);
    let documents: Vec<Document> = (0..30)
        .map(|i| doc! {"_id": i, "n": i, "pad": &pad})
        .collect();
    run(&db, doc! {"insert": "events", "documents": documents}).await;
    // A document the validator would refuse, stored with bypassDocumentValidation.
    run(
        &db,
        doc! {"insert": "events", "documents": [{"_id": 30, "n": "thirty", "pad": &pad}], "bypassDocumentValidation": true},
    )
    .await;
    run(
        &db,
        doc! {"createIndexes": "events", "indexes": [
            {"key": {"n": 1}, "name": "n_1"},
            {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 3600},
        ]},
    )
    .await;
    run(&db, doc! {"convertToCapped": "events", "size": 4096}).await;
    let doc_size = bson::to_vec(&doc! {"_id": 10, "n": 10, "pad": &pad})
        .unwrap()
        .len();
    let kept = (4096 / doc_size) as i32;
    assert_eq!(
        ids(&db, "events").await,
        ((31 - kept)..31).collect::<Vec<_>>()
    );
    assert_eq!(index_names(&db, "events").await, vec!["_id_".to_owned()]);
    let options = options_of(&db, "events").await;
    assert_eq!(
        options.get_document("validator"),
        Ok(&doc! {"n": {"$type": "int"}})
    );
    assert_eq!(options.get_bool("capped"), Ok(true));
    assert_eq!(options.get_i32("size"), Ok(4096));
    // It rolls over as a capped collection from now on.
    let more: Vec<Document> = (100..110)
        .map(|i| doc! {"_id": i, "n": i, "pad": &pad})
        .collect();
    run(&db, doc! {"insert": "events", "documents": more}).await;
    let now = ids(&db, "events").await;
    assert_eq!(now.len(), kept as usize);
    assert_eq!(now.last(), Some(&109));
}

/// cloneCollectionAsCapped: mongod's argument errors (collection_to_capped.cpp), 26 and 48
/// with capped_utils.cpp's messages, a view (166); the source stays as it was; the copy of a
/// capped collection keeps its `max` (capped_utils.cpp takes the source's options).
#[tokio::test]
async fn clone_collection_as_capped_copies_and_refuses_as_mongod() {
    let server = TestServer::start().await;
    let db = server.client().database("clone");
    let documents: Vec<Document> = (0..5).map(|i| doc! {"_id": i}).collect();
    run(&db, doc! {"insert": "src", "documents": documents}).await;
    run(
        &db,
        doc! {"createIndexes": "src", "indexes": [{"key": {"a": 1}, "name": "a_1"}]},
    )
    .await;

    let error = command_error(
        db.run_command(doc! {"cloneCollectionAsCapped": "src", "size": 4096})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (14, "'toCollection' must be of type String")
    );
    let error = command_error(
        db.run_command(doc! {"cloneCollectionAsCapped": "src", "toCollection": "dst", "size": 0})
            .await,
    );
    assert_eq!(error.0, 72);
    let error = command_error(
        db.run_command(
            doc! {"cloneCollectionAsCapped": "missing", "toCollection": "dst", "size": 4096},
        )
        .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (26, "source collection clone.missing does not exist")
    );
    run(&db, doc! {"create": "taken"}).await;
    let error = command_error(
        db.run_command(
            doc! {"cloneCollectionAsCapped": "src", "toCollection": "taken", "size": 4096},
        )
        .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            48,
            "cloneCollectionAsCapped failed - destination collection clone.taken already exists. source collection: clone.src"
        )
    );
    run(
        &db,
        doc! {"create": "view", "viewOn": "src", "pipeline": []},
    )
    .await;
    let error = command_error(
        db.run_command(
            doc! {"cloneCollectionAsCapped": "view", "toCollection": "testcapped", "size": 10240},
        )
        .await,
    );
    assert_eq!(error.0, 166);

    run(
        &db,
        doc! {"cloneCollectionAsCapped": "src", "toCollection": "dst", "size": 4096},
    )
    .await;
    assert_eq!(ids(&db, "dst").await, (0..5).collect::<Vec<_>>());
    assert_eq!(index_names(&db, "dst").await, vec!["_id_".to_owned()]);
    assert_eq!(
        options_of(&db, "dst").await,
        doc! {"capped": true, "size": 4096}
    );
    assert!(!is_capped(&db, "src").await);
    assert_eq!(index_names(&db, "src").await, vec!["_id_", "a_1"]);

    run(
        &db,
        doc! {"create": "small", "capped": true, "size": 4096, "max": 3},
    )
    .await;
    let documents: Vec<Document> = (0..3).map(|i| doc! {"_id": i}).collect();
    run(&db, doc! {"insert": "small", "documents": documents}).await;
    run(
        &db,
        doc! {"cloneCollectionAsCapped": "small", "toCollection": "small2", "size": 10000},
    )
    .await;
    assert_eq!(
        options_of(&db, "small2").await,
        doc! {"capped": true, "size": 10240, "max": 3}
    );
    assert_eq!(ids(&db, "small2").await, vec![0, 1, 2]);
}

/// tideway's rule: an expired document is absent everywhere, so it is not copied; the copy has
/// no TTL policy (TTL indexes do not carry over to a capped collection).
#[tokio::test]
async fn expired_documents_are_not_copied() {
    let t0 = 1_700_000_000_000;
    let (server, clock) = TestServer::start_at(t0).await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"createIndexes": "sessions", "indexes": [{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 10}]},
    )
    .await;
    let at = bson::DateTime::from_millis(t0);
    let later = bson::DateTime::from_millis(t0 + 60_000);
    run(
        &db,
        doc! {"insert": "sessions", "documents": [
            {"_id": 1, "at": at}, {"_id": 2, "at": later}, {"_id": 3},
        ]},
    )
    .await;
    clock.advance_ms(10_000);
    run(
        &db,
        doc! {"cloneCollectionAsCapped": "sessions", "toCollection": "copy", "size": 4096},
    )
    .await;
    assert_eq!(ids(&db, "copy").await, vec![2, 3]);
    run(&db, doc! {"convertToCapped": "sessions", "size": 4096}).await;
    assert_eq!(ids(&db, "sessions").await, vec![2, 3]);
    assert_eq!(index_names(&db, "sessions").await, vec!["_id_".to_owned()]);
    clock.advance_ms(600_000);
    assert_eq!(ids(&db, "sessions").await, vec![2, 3]);
}

fn cursor_id(reply: &Document) -> i64 {
    reply.get_document("cursor").unwrap().get_i64("id").unwrap()
}

fn next_batch_ids(reply: &Document) -> Vec<i32> {
    reply
        .get_document("cursor")
        .unwrap()
        .get_array("nextBatch")
        .unwrap()
        .iter()
        .map(|d| match d {
            Bson::Document(d) => d.get_i32("_id").unwrap(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// exec/collection_scan.cpp: a collection scan of a capped collection restored after its
/// position was deleted fails with 136 "CollectionScan died due to position in capped collection
/// being deleted. Last seen record id: RecordId(…)", tailable or not; a tailable scan that had
/// reached the end and finds its last record gone fails with "… failure to restore tailable
/// cursor position …". A position that survives reads on.
#[tokio::test]
async fn rolled_over_position_fails_the_get_more_with_capped_position_lost() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"create": "ring", "capped": true, "size": 4096, "max": 3},
    )
    .await;
    let insert = |ids: std::ops::Range<i32>| {
        let db = db.clone();
        async move {
            for id in ids {
                run(&db, doc! {"insert": "ring", "documents": [{"_id": id}]}).await;
            }
        }
    };
    insert(0..3).await;

    // Mid-scan, tailable: the getMore resumes after _id 1, which rolled over.
    let reply = run(&db, doc! {"find": "ring", "tailable": true, "batchSize": 2}).await;
    let tailing = cursor_id(&reply);
    // Mid-scan, not tailable.
    let reply = run(&db, doc! {"find": "ring", "batchSize": 2}).await;
    let plain = cursor_id(&reply);
    // At the end, tailable: all three returned.
    let reply = run(&db, doc! {"find": "ring", "tailable": true}).await;
    assert_eq!(first_batch(&reply).len(), 3);
    let at_end = cursor_id(&reply);
    // Survives: its position (_id 2) stays after one rollover.
    let reply = run(&db, doc! {"find": "ring", "tailable": true}).await;
    let survivor = cursor_id(&reply);

    insert(3..4).await;
    let reply = run(&db, doc! {"getMore": survivor, "collection": "ring"}).await;
    assert_eq!(next_batch_ids(&reply), vec![3]);

    insert(4..6).await;
    for id in [tailing, plain] {
        let error = command_error(
            db.run_command(doc! {"getMore": id, "collection": "ring"})
                .await,
        );
        assert_eq!((error.0, error.1.as_str()), (136, "CappedPositionLost"));
        assert!(
            error.2.contains(
                "CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId("
            ),
            "{}",
            error.2
        );
    }
    let error = command_error(
        db.run_command(doc! {"getMore": at_end, "collection": "ring"})
            .await,
    );
    assert_eq!(error.0, 136);
    assert!(
        error.2.contains(
            "CollectionScan died due to failure to restore tailable cursor position. Last seen record id: RecordId("
        ),
        "{}",
        error.2
    );
    // The survivor's last record (_id 3) is still there: it reads on.
    let reply = run(&db, doc! {"getMore": survivor, "collection": "ring"}).await;
    assert_eq!(next_batch_ids(&reply), vec![4, 5]);
}

/// mongod holds the collection exclusively while converting it; tideway holds its policy gate:
/// a write that races the conversion either reaches the source before the copy reads it or
/// waits and lands in the capped collection, and is never lost with the replaced source.
#[tokio::test]
async fn writes_racing_a_conversion_are_never_lost() {
    let server = TestServer::start().await;
    let db = server.client().database("race");
    let coll = db.collection::<Document>("c");
    let initial: Vec<Document> = (0..20_000).map(|i| doc! {"_id": i, "pad": "x"}).collect();
    coll.insert_many(initial).await.unwrap();
    let writer = {
        let coll = coll.clone();
        tokio::spawn(async move {
            for i in 100_000..100_200 {
                coll.insert_one(doc! {"_id": i}).await.unwrap();
            }
        })
    };
    run(&db, doc! {"convertToCapped": "c", "size": 100_000_000}).await;
    writer.await.unwrap();
    let counted = run(&db, doc! {"count": "c"}).await;
    assert_eq!(
        counted.get_i32("n").unwrap(),
        20_200,
        "every acknowledged write is there"
    );
    assert!(options_of(&db, "c").await.get_bool("capped").unwrap());
}
