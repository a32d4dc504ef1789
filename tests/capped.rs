//! Capped collections and tailable cursors through the driver: `create`'s options and errors,
//! rollover by `max` and by `size`, natural and reverse order, `collStats`, `collMod`, the TTL
//! refusals, and tailable `awaitData` cursors receiving documents inserted after they opened.
//! Expected values come from the manual's capped-collection pages, jstests/core/capped_max1.js
//! and mongod's source (named at each test).

mod common;

use std::time::Duration;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use futures::TryStreamExt;
use mongodb::options::{CursorType, FindOptions};

async fn run(db: &mongodb::Database, command: Document) -> Document {
    db.run_command(command).await.expect("command succeeds")
}

async fn xs(coll: &mongodb::Collection<Document>, sort: Option<Document>) -> Vec<i64> {
    let mut find = coll.find(doc! {});
    if let Some(sort) = sort {
        find = find.sort(sort);
    }
    let docs: Vec<Document> = find.await.unwrap().try_collect().await.unwrap();
    docs.iter()
        .map(|d| match d.get("x") {
            Some(Bson::Int32(x)) => i64::from(*x),
            Some(Bson::Int64(x)) => *x,
            other => panic!("x: {other:?}"),
        })
        .collect()
}

/// jstests/core/capped_max1.js: `max: 10`, `size: 64 * 1024`; 20 inserts leave 10; `stats()`
/// shows `max`, `maxSize` and `maxSize` scaled by 1000.
#[tokio::test]
async fn max_rolls_over_the_oldest_documents() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"create": "capped_max1", "capped": true, "size": 64 * 1024, "max": 10},
    )
    .await;
    let coll = db.collection::<Document>("capped_max1");
    for i in 0..20 {
        coll.insert_one(doc! {"x": i}).await.unwrap();
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 10);
    assert_eq!(xs(&coll, None).await, (10..20).collect::<Vec<_>>());
    let stats = run(&db, doc! {"collStats": "capped_max1"}).await;
    assert_eq!(stats.get_bool("capped"), Ok(true));
    assert_eq!(stats.get_i64("max"), Ok(10));
    assert_eq!(stats.get_i64("maxSize"), Ok(64 * 1024));
    let scaled = run(&db, doc! {"collStats": "capped_max1", "scale": 1000}).await;
    assert_eq!(scaled.get_i64("maxSize"), Ok(64 * 1024 / 1000));
}

/// The size limit: the sum of the documents' BSON sizes stays within `size`, oldest first out.
#[tokio::test]
async fn size_rolls_over_in_insertion_order_not_id_order() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    // 4096 is a multiple of 256: stored as given (collection_options.cpp adjustCappedSize).
    run(&db, doc! {"create": "log", "capped": true, "size": 4096}).await;
    let coll = db.collection::<Document>("log");
    let pad = "p".repeat(400);
    // Descending `_id`s: natural order must still be insertion order.
    for i in 0..30 {
        coll.insert_one(doc! {"_id": 1000 - i, "x": i, "pad": &pad})
            .await
            .unwrap();
    }
    let doc_size = bson::to_vec(&doc! {"_id": 1000, "x": 0, "pad": &pad})
        .unwrap()
        .len();
    let kept = 4096 / doc_size;
    let remaining = xs(&coll, None).await;
    assert_eq!(remaining, ((30 - kept as i64)..30).collect::<Vec<_>>());
    let stats = run(&db, doc! {"collStats": "log"}).await;
    assert!(stats.get_i64("size").unwrap() <= 4096);
    // {$natural: -1}: newest first.
    let reversed = xs(&coll, Some(doc! {"$natural": -1})).await;
    assert_eq!(reversed, ((30 - kept as i64)..30).rev().collect::<Vec<_>>());
    // A document larger than the collection: mongod's record store refuses it (2).
    let huge = "h".repeat(5000);
    let error = coll
        .insert_one(doc! {"x": 99, "pad": huge})
        .await
        .expect_err("too large");
    match *error.kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref e)) => {
            assert_eq!(
                (e.code, e.message.as_str()),
                (2, "object to insert exceeds cappedMaxSize")
            );
        }
        ref other => panic!("expected a write error, got {other:?}"),
    }
    assert_eq!(xs(&coll, None).await.len(), kept, "nothing was removed");
}

/// create.idl / create.cpp: ranges (51024) then the capped rules (72); listCollections shows
/// the size rounded up to a multiple of 256.
#[tokio::test]
async fn create_validates_and_lists_options_as_mongod() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    let error = command_error(db.run_command(doc! {"create": "a", "capped": true}).await);
    assert_eq!(
        (error.0, error.2.as_str()),
        (72, "the 'size' field is required when 'capped' is true")
    );
    let error = command_error(db.run_command(doc! {"create": "a", "size": 1000}).await);
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            72,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are present"
        )
    );
    let error = command_error(
        db.run_command(doc! {"create": "a", "capped": true, "size": 0})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            51024,
            "BSON field 'size' value must be >= 1, actual value '0'"
        )
    );
    let error = command_error(
        db.run_command(doc! {"create": "a", "capped": true, "size": 1000, "max": 1_i64 << 31})
            .await,
    );
    assert_eq!(error.0, 51024);
    run(
        &db,
        doc! {"create": "log", "capped": true, "size": 1000, "max": 5},
    )
    .await;
    let listed = run(&db, doc! {"listCollections": 1, "filter": {"name": "log"}}).await;
    let entry = &first_batch(&listed)[0];
    assert_eq!(
        entry.get_document("options").unwrap(),
        &doc! {"capped": true, "size": 1024, "max": 5}
    );
    // The same options again: ok, as for any create.
    run(
        &db,
        doc! {"create": "log", "capped": true, "size": 1000, "max": 5},
    )
    .await;
}

/// Deletes and updates of any size are allowed (SERVER-58865 lifted the size rule; deletes
/// since 5.0); only inserts roll over.
#[tokio::test]
async fn deletes_and_growing_updates_are_allowed() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"create": "c", "capped": true, "size": 4096, "max": 3},
    )
    .await;
    let coll = db.collection::<Document>("c");
    for i in 0..3 {
        coll.insert_one(doc! {"x": i}).await.unwrap();
    }
    coll.update_one(doc! {"x": 1}, doc! {"$set": {"grown": "g".repeat(100)}})
        .await
        .unwrap();
    coll.delete_one(doc! {"x": 0}).await.unwrap();
    assert_eq!(xs(&coll, None).await, vec![1, 2]);
    coll.insert_one(doc! {"x": 3}).await.unwrap();
    coll.insert_one(doc! {"x": 4}).await.unwrap();
    assert_eq!(xs(&coll, None).await, vec![2, 3, 4]);
}

/// collMod cappedMax/cappedSize (manual: "Change Maximum Documents in a Capped Collection"):
/// excess documents go on the next insert.
#[tokio::test]
async fn coll_mod_changes_the_limits() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(
        &db,
        doc! {"create": "log", "capped": true, "size": 5242880, "max": 20000},
    )
    .await;
    let coll = db.collection::<Document>("log");
    for i in 0..10 {
        coll.insert_one(doc! {"x": i}).await.unwrap();
    }
    run(&db, doc! {"collMod": "log", "cappedMax": 5}).await;
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 10);
    coll.insert_one(doc! {"x": 10}).await.unwrap();
    assert_eq!(xs(&coll, None).await, (6..=10).collect::<Vec<_>>());
    run(&db, doc! {"collMod": "log", "cappedSize": 2621440}).await;
    let stats = run(&db, doc! {"collStats": "log"}).await;
    assert_eq!(stats.get_i64("maxSize"), Ok(2621440));
    assert_eq!(stats.get_i64("max"), Ok(5));
}

/// index_catalog_impl.cpp (67) and coll_mod.cpp (72).
#[tokio::test]
async fn ttl_indexes_are_refused_on_capped_collections() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(&db, doc! {"create": "c", "capped": true, "size": 4096}).await;
    let error = command_error(
        db.run_command(doc! {"createIndexes": "c", "indexes": [
            {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60}
        ]})
        .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (67, "Cannot create TTL index on a capped collection")
    );
    run(
        &db,
        doc! {"createIndexes": "c", "indexes": [{"key": {"at": 1}, "name": "at_1"}]},
    )
    .await;
    let error = command_error(
        db.run_command(doc! {"collMod": "c", "index": {"name": "at_1", "expireAfterSeconds": 60}})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (72, "TTL indexes are not supported for capped collections.")
    );
}

/// Tailable cursors: refused on non-capped collections (2), awaitData needs tailable (9,
/// tailable_mode.cpp), and an awaitData cursor receives a document inserted after it opened.
#[tokio::test]
async fn tailable_await_data_cursor_receives_later_inserts() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("capped");
    db.collection::<Document>("plain")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    let error = command_error(
        db.run_command(doc! {"find": "plain", "tailable": true})
            .await,
    );
    assert_eq!(error.0, 2);
    let error = command_error(
        db.run_command(doc! {"find": "plain", "awaitData": true})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (9, "Cannot set 'awaitData' without also setting 'tailable'")
    );

    run(&db, doc! {"create": "feed", "capped": true, "size": 100000}).await;
    let coll = db.collection::<Document>("feed");
    coll.insert_one(doc! {"x": 0}).await.unwrap();
    // query_request_helper.cpp compares the sort with `{$natural: 1}` numerically.
    for one in [Bson::Double(1.0), Bson::Int64(1)] {
        run(
            &db,
            doc! {"find": "feed", "tailable": true, "sort": {"$natural": one}},
        )
        .await;
    }
    let options = FindOptions::builder()
        .cursor_type(CursorType::TailableAwait)
        .max_await_time(Duration::from_secs(5))
        .build();
    let mut cursor = coll.find(doc! {}).with_options(options).await.unwrap();
    let first = cursor.try_next().await.unwrap().unwrap();
    assert_eq!(first.get_i32("x"), Ok(0));
    let writer = coll.clone();
    let insert = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.insert_one(doc! {"x": 1}).await.unwrap();
    });
    let started = std::time::Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(10), cursor.try_next())
        .await
        .expect("the getMore returns once the insert arrives")
        .unwrap()
        .unwrap();
    assert_eq!(next.get_i32("x"), Ok(1));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woken, not timed out"
    );
    insert.await.unwrap();
    // Not closed at the end: a later insert is read by the same cursor.
    coll.insert_one(doc! {"x": 2}).await.unwrap();
    let next = cursor.try_next().await.unwrap().unwrap();
    assert_eq!(next.get_i32("x"), Ok(2));
}

/// An awaitData getMore with nothing new returns an empty batch after its maxTimeMS, and the
/// cursor stays open; a non-awaitData cursor refuses a getMore maxTimeMS (getmore_cmd.cpp).
#[tokio::test]
async fn await_data_get_more_times_out_with_an_open_cursor() {
    let server = TestServer::start().await;
    let db = server.client().database("capped");
    run(&db, doc! {"create": "feed", "capped": true, "size": 100000}).await;
    db.collection::<Document>("feed")
        .insert_one(doc! {"x": 0})
        .await
        .unwrap();
    let reply = run(
        &db,
        doc! {"find": "feed", "tailable": true, "awaitData": true},
    )
    .await;
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);
    let started = std::time::Instant::now();
    let more = run(
        &db,
        doc! {"getMore": id, "collection": "feed", "maxTimeMS": 300},
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    let cursor = more.get_document("cursor").unwrap();
    assert_eq!(cursor.get_i64("id"), Ok(id));
    assert!(cursor.get_array("nextBatch").unwrap().is_empty());

    let reply = run(&db, doc! {"find": "feed", "tailable": true, "batchSize": 0}).await;
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    let error = command_error(
        db.run_command(doc! {"getMore": id, "collection": "feed", "maxTimeMS": 100})
            .await,
    );
    assert_eq!(
        (error.0, error.2.as_str()),
        (
            2,
            "cannot set maxTimeMS on getMore command for a non-awaitData cursor"
        )
    );
}
