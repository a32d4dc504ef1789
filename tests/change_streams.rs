//! Change streams through the Rust driver's `watch()`: event shapes (the manual's change-event
//! pages: https://www.mongodb.com/docs/manual/reference/change-events/), updateLookup and
//! pre-images, `$match` after `$changeStream`, expiry events at the reaper pass, resume tokens
//! (also across a restart), history lost, invalidate, and the standalone answer without oplog.

mod common;

use std::time::Duration;

use bson::{doc, Bson, Document};
use common::{test_config, TestServer};
use futures::StreamExt;
use mongodb::change_stream::ChangeStream;
use mongodb::options::FullDocumentType;
use mongodb::Collection;
use tideway::Config;
use tideway_base::clock::{Clock, ManualClock};

fn oplog_config() -> Config {
    Config {
        oplog_size_mb: Some(64),
        set_parameter: vec![
            "enableTestCommands=1".into(),
            "ttlMonitorEnabled=false".into(),
        ],
        ..test_config()
    }
}

async fn start() -> TestServer {
    TestServer::start_with(oplog_config()).await
}

/// The next event, failing the test if none comes within 5 s.
async fn next(stream: &mut ChangeStream<Document>) -> Document {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream is open")
        .expect("no error")
}

/// The event without the fields that vary run to run (`_id`, `clusterTime`, `wallTime`).
fn stable(mut event: Document) -> Document {
    for field in ["_id", "clusterTime", "wallTime"] {
        assert!(event.contains_key(field), "{field} in {event}");
        event.remove(field);
    }
    event
}

#[tokio::test]
async fn crud_events_have_mongods_shape() {
    let server = start().await;
    let coll: Collection<Document> = server.client().database("app").collection("users");
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    coll.insert_one(doc! {"_id": 1, "a": 1, "b": {"c": 1}})
        .await
        .unwrap();
    coll.update_one(
        doc! {"_id": 1},
        doc! {"$set": {"a": 2, "b.c": 3}, "$unset": {"gone": ""}},
    )
    .await
    .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$unset": {"a": ""}})
        .await
        .unwrap();
    coll.replace_one(doc! {"_id": 1}, doc! {"z": 1})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 1}).await.unwrap();
    let ns = doc! {"db": "app", "coll": "users"};
    let insert = next(&mut stream).await;
    assert!(matches!(
        insert.get("clusterTime"),
        Some(Bson::Timestamp(_))
    ));
    assert!(matches!(insert.get("wallTime"), Some(Bson::DateTime(_))));
    assert_eq!(
        stable(insert),
        doc! {"operationType": "insert", "fullDocument": {"_id": 1, "a": 1, "b": {"c": 1}}, "ns": ns.clone(), "documentKey": {"_id": 1}}
    );
    assert_eq!(
        stable(next(&mut stream).await),
        doc! {"operationType": "update", "ns": ns.clone(), "documentKey": {"_id": 1},
        "updateDescription": {"updatedFields": {"a": 2, "b.c": 3}, "removedFields": [], "truncatedArrays": []}}
    );
    assert_eq!(
        stable(next(&mut stream).await)
            .get_document("updateDescription")
            .unwrap(),
        &doc! {"updatedFields": {}, "removedFields": ["a"], "truncatedArrays": []}
    );
    assert_eq!(
        stable(next(&mut stream).await),
        doc! {"operationType": "replace", "fullDocument": {"_id": 1, "z": 1}, "ns": ns.clone(), "documentKey": {"_id": 1}}
    );
    assert_eq!(
        stable(next(&mut stream).await),
        doc! {"operationType": "delete", "ns": ns, "documentKey": {"_id": 1}}
    );
    server.stop().await;
}

#[tokio::test]
async fn update_lookup_match_and_database_and_cluster_streams() {
    let server = start().await;
    let client = server.client();
    let db = client.database("app");
    let coll: Collection<Document> = db.collection("items");
    let mut lookup = coll
        .watch()
        .full_document(FullDocumentType::UpdateLookup)
        .await
        .unwrap()
        .with_type::<Document>();
    let mut deletes_only = db
        .watch()
        .pipeline([doc! {"$match": {"operationType": "delete"}}])
        .await
        .unwrap()
        .with_type::<Document>();
    let mut cluster = client.watch().await.unwrap().with_type::<Document>();
    coll.insert_one(doc! {"_id": 1, "n": 1}).await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    db.collection::<Document>("other")
        .delete_many(doc! {})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 1}).await.unwrap();
    next(&mut lookup).await;
    let update = next(&mut lookup).await;
    assert_eq!(update.get_str("operationType").unwrap(), "update");
    // The document as it is when the event is read: already deleted by then, or the update's.
    assert!(matches!(
        update.get("fullDocument"),
        Some(Bson::Null) | Some(Bson::Document(_))
    ));
    let deleted = next(&mut deletes_only).await;
    assert_eq!(deleted.get_str("operationType").unwrap(), "delete");
    assert_eq!(
        deleted.get_document("ns").unwrap(),
        &doc! {"db": "app", "coll": "items"}
    );
    let first = next(&mut cluster).await;
    assert_eq!(first.get_str("operationType").unwrap(), "insert");
    server.stop().await;
}

#[tokio::test]
async fn pre_and_post_images_come_from_the_oplog_when_enabled() {
    let server = start().await;
    let db = server.client().database("app");
    db.run_command(doc! {"create": "imaged", "changeStreamPreAndPostImages": {"enabled": true}})
        .await
        .unwrap();
    let coll: Collection<Document> = db.collection("imaged");
    coll.insert_one(doc! {"_id": 1, "v": 1}).await.unwrap();
    let mut stream = coll
        .watch()
        .full_document(FullDocumentType::Required)
        .full_document_before_change(mongodb::options::FullDocumentBeforeChangeType::Required)
        .await
        .unwrap()
        .with_type::<Document>();
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"v": 2}})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 1}).await.unwrap();
    let update = next(&mut stream).await;
    assert_eq!(
        update.get_document("fullDocument").unwrap(),
        &doc! {"_id": 1, "v": 2}
    );
    assert_eq!(
        update.get_document("fullDocumentBeforeChange").unwrap(),
        &doc! {"_id": 1, "v": 1}
    );
    let delete = next(&mut stream).await;
    assert_eq!(
        delete.get_document("fullDocumentBeforeChange").unwrap(),
        &doc! {"_id": 1, "v": 2}
    );
    // Without the option there is no pre-image: `required` fails (NoMatchingDocument).
    let plain: Collection<Document> = db.collection("plain");
    plain.insert_one(doc! {"_id": 1}).await.unwrap();
    let mut strict = plain
        .watch()
        .full_document_before_change(mongodb::options::FullDocumentBeforeChangeType::Required)
        .await
        .unwrap()
        .with_type::<Document>();
    plain.delete_one(doc! {"_id": 1}).await.unwrap();
    let error = tokio::time::timeout(Duration::from_secs(5), strict.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 47),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test]
async fn expiry_is_a_delete_event_at_the_reaper_pass_never_before() {
    const T0: i64 = 1_700_000_000_000;
    let clock = std::sync::Arc::new(ManualClock::new(T0));
    let server = TestServer::start_with_clock(oplog_config(), clock.clone()).await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("sessions");
    coll.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"at": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .expire_after(Duration::from_secs(60))
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let mut expiries = coll
        .watch()
        .pipeline([doc! {"$match": {"expired": true}}])
        .max_await_time(Duration::from_millis(100))
        .await
        .unwrap()
        .with_type::<Document>();
    coll.insert_one(doc! {"_id": 1, "at": bson::DateTime::from_millis(T0)})
        .await
        .unwrap();
    let pass = || async {
        client
            .database("admin")
            .run_command(doc! {"runTtlPass": 1})
            .await
            .unwrap()
    };
    // Not expired yet: the pass deletes nothing, and no event comes.
    clock.advance_ms(59_999);
    pass().await;
    assert!(expiries.next_if_any().await.unwrap().is_none());
    clock.advance_ms(1);
    pass().await;
    let expired = next(&mut expiries).await;
    assert_eq!(
        stable(expired),
        doc! {"operationType": "delete", "ns": {"db": "app", "coll": "sessions"}, "documentKey": {"_id": 1},
        "expired": true, "expireAt": bson::DateTime::from_millis(T0 + 60_000)}
    );
    server.stop().await;
}

#[tokio::test]
async fn resume_after_a_token_and_history_lost() {
    let server = start().await;
    let coll: Collection<Document> = server.client().database("app").collection("r");
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    for id in 1..=3 {
        coll.insert_one(doc! {"_id": id}).await.unwrap();
    }
    let first = next(&mut stream).await;
    let token: mongodb::change_stream::event::ResumeToken =
        bson::from_bson(first.get("_id").unwrap().clone()).unwrap();
    drop(stream);
    let mut resumed = coll
        .watch()
        .resume_after(token)
        .await
        .unwrap()
        .with_type::<Document>();
    let ids: Vec<Bson> = [next(&mut resumed).await, next(&mut resumed).await]
        .iter()
        .map(|event| event.get_document("documentKey").unwrap()["_id"].clone())
        .collect();
    assert_eq!(ids, vec![Bson::Int32(2), Bson::Int32(3)]);
    // A token from before the oldest entry the oplog holds.
    let ancient = doc! {"_data": "01000000010000000000"};
    let error = coll
        .watch()
        .resume_after(
            bson::from_document::<mongodb::change_stream::event::ResumeToken>(ancient).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 286),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test]
async fn drop_invalidates_a_collection_stream_and_start_after_continues() {
    let server = start().await;
    let db = server.client().database("app");
    let coll: Collection<Document> = db.collection("doomed");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    coll.drop().await.unwrap();
    assert_eq!(
        stable(next(&mut stream).await),
        doc! {"operationType": "drop", "ns": {"db": "app", "coll": "doomed"}}
    );
    let invalidate = next(&mut stream).await;
    assert_eq!(invalidate.get_str("operationType").unwrap(), "invalidate");
    let token: mongodb::change_stream::event::ResumeToken =
        bson::from_bson(invalidate.get("_id").unwrap().clone()).unwrap();
    let error = coll.watch().resume_after(token.clone()).await.unwrap_err();
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 260),
        "{error}"
    );
    let mut after = coll
        .watch()
        .start_after(token)
        .await
        .unwrap()
        .with_type::<Document>();
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let event = next(&mut after).await;
    assert_eq!(event.get_str("operationType").unwrap(), "insert");
    server.stop().await;
}

#[tokio::test]
async fn without_an_oplog_change_streams_answer_as_a_standalone() {
    let server = TestServer::start().await;
    let coll: Collection<Document> = server.client().database("app").collection("c");
    let error = coll.watch().await.unwrap_err();
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 40573),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test]
async fn stages_mongod_refuses_after_change_stream() {
    let server = start().await;
    let db = server.client().database("app");
    let reply = db
        .run_command(doc! {"aggregate": "c", "pipeline": [{"$changeStream": {}}, {"$group": {"_id": 1}}], "cursor": {}})
        .await
        .unwrap_err();
    assert!(matches!(*reply.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 20));
    let both = db
        .run_command(doc! {"aggregate": "c", "pipeline": [{"$changeStream": {"resumeAfter": {"_data": "01000000010000000000"}, "startAfter": {"_data": "01000000010000000000"}}}], "cursor": {}})
        .await
        .unwrap_err();
    assert!(matches!(*both.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 50865));
    let mode = db
        .run_command(doc! {"aggregate": "c", "pipeline": [{"$changeStream": {"fullDocument": "sometimes"}}], "cursor": {}})
        .await
        .unwrap_err();
    assert!(matches!(*mode.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 2));
    let cluster_elsewhere = db
        .run_command(doc! {"aggregate": 1, "pipeline": [{"$changeStream": {"allChangesForCluster": true}}], "cursor": {}})
        .await
        .unwrap_err();
    assert!(
        matches!(*cluster_elsewhere.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 72)
    );
    server.stop().await;
}

#[tokio::test]
async fn resume_across_a_restart_from_a_saved_token() {
    let dir = tempfile::tempdir().unwrap();
    let process = common::process::Process::start_disk(dir.path(), &["--oplogSize", "16"]);
    let coll: Collection<Document> = process.client().database("app").collection("kept");
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let first = next(&mut stream).await;
    let token: mongodb::change_stream::event::ResumeToken =
        bson::from_bson(first.get("_id").unwrap().clone()).unwrap();
    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    drop(stream);
    process.kill();
    let process = common::process::Process::start_disk(dir.path(), &["--oplogSize", "16"]);
    let coll: Collection<Document> = process.client().database("app").collection("kept");
    let mut resumed = coll
        .watch()
        .resume_after(token)
        .await
        .unwrap()
        .with_type::<Document>();
    let event = next(&mut resumed).await;
    assert_eq!(event.get_document("documentKey").unwrap(), &doc! {"_id": 2});
    process.terminate();
}

/// The manual's rename and dropDatabase events: a collection stream sees `rename` (with `to`)
/// and then `invalidate`; a database stream sees each collection's `drop`, `dropDatabase`, then
/// `invalidate`.
#[tokio::test]
async fn rename_and_drop_database_invalidate_their_streams() {
    let server = start().await;
    let client = server.client();
    let db = client.database("moving");
    let coll: Collection<Document> = db.collection("old");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    client
        .database("admin")
        .run_command(doc! {"renameCollection": "moving.old", "to": "moving.new"})
        .await
        .unwrap();
    assert_eq!(
        stable(next(&mut stream).await),
        doc! {"operationType": "rename", "ns": {"db": "moving", "coll": "old"}, "to": {"db": "moving", "coll": "new"}}
    );
    assert_eq!(
        next(&mut stream).await.get_str("operationType").unwrap(),
        "invalidate"
    );

    let mut database_stream = db.watch().await.unwrap().with_type::<Document>();
    db.drop().await.unwrap();
    assert_eq!(
        stable(next(&mut database_stream).await),
        doc! {"operationType": "drop", "ns": {"db": "moving", "coll": "new"}}
    );
    assert_eq!(
        stable(next(&mut database_stream).await),
        doc! {"operationType": "dropDatabase", "ns": {"db": "moving"}}
    );
    assert_eq!(
        next(&mut database_stream)
            .await
            .get_str("operationType")
            .unwrap(),
        "invalidate"
    );
    server.stop().await;
}

/// `startAtOperationTime` starts at the given cluster time, inclusive (the manual: "the change
/// stream will return changes that occurred at or after the specified timestamp").
#[tokio::test]
async fn start_at_operation_time_is_inclusive() {
    let server = start().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("timed");
    coll.insert_one(doc! {"_id": "before"}).await.unwrap();
    coll.insert_one(doc! {"_id": "at"}).await.unwrap();
    let entry = client
        .database("local")
        .run_command(doc! {"find": "oplog.rs", "filter": {"op": "i", "o._id": "at"}})
        .await
        .unwrap();
    let at = common::first_batch(&entry)[0].get_timestamp("ts").unwrap();
    let mut stream = coll
        .watch()
        .start_at_operation_time(at)
        .await
        .unwrap()
        .with_type::<Document>();
    coll.insert_one(doc! {"_id": "after"}).await.unwrap();
    let first = next(&mut stream).await;
    assert_eq!(
        first.get_document("documentKey").unwrap(),
        &doc! {"_id": "at"}
    );
    assert_eq!(first.get_timestamp("clusterTime").unwrap(), at);
    let second = next(&mut stream).await;
    assert_eq!(
        second.get_document("documentKey").unwrap(),
        &doc! {"_id": "after"}
    );
    server.stop().await;
}

/// `showExpandedEvents` adds the DDL events (the manual's create and createIndexes events,
/// with `collectionUUID` and `operationDescription`).
#[tokio::test]
async fn expanded_events_report_create_and_create_indexes() {
    let server = start().await;
    let db = server.client().database("ddl");
    let mut stream = db
        .watch()
        .show_expanded_events(true)
        .await
        .unwrap()
        .with_type::<Document>();
    db.create_collection("made").await.unwrap();
    db.collection::<Document>("made")
        .create_index(mongodb::IndexModel::builder().keys(doc! {"a": 1}).build())
        .await
        .unwrap();
    let created = next(&mut stream).await;
    assert_eq!(created.get_str("operationType").unwrap(), "create");
    assert_eq!(
        created.get_document("ns").unwrap(),
        &doc! {"db": "ddl", "coll": "made"}
    );
    assert!(
        matches!(created.get("collectionUUID"), Some(Bson::Binary(_))),
        "{created}"
    );
    let indexed = next(&mut stream).await;
    assert_eq!(indexed.get_str("operationType").unwrap(), "createIndexes");
    let indexes = indexed
        .get_document("operationDescription")
        .unwrap()
        .get_array("indexes")
        .unwrap();
    assert_eq!(
        indexes[0].as_document().unwrap().get_str("name").unwrap(),
        "a_1"
    );
    server.stop().await;
}

/// A backlog larger than a reply may hold is served over several batches, each within the
/// 16 MiB batch bound (`Cursor::next_batch`'s), never one reply past the wire limit.
#[tokio::test]
async fn a_large_backlog_comes_in_bounded_batches() {
    let server = TestServer::start_with(Config {
        oplog_size_mb: Some(256),
        ..test_config()
    })
    .await;
    let coll: Collection<Document> = server.client().database("app").collection("large");
    let mut stream = coll.watch().await.unwrap().with_type::<Document>();
    let pad = "x".repeat(1024 * 1024);
    for chunk in 0..6 {
        let documents: Vec<Document> = (0..10)
            .map(|i| doc! {"_id": chunk * 10 + i, "pad": pad.as_str()})
            .collect();
        coll.insert_many(documents).await.unwrap();
    }
    for expected in 0..60 {
        let event = next(&mut stream).await;
        assert_eq!(
            event.get_document("documentKey").unwrap(),
            &doc! {"_id": expected}
        );
    }
    server.stop().await;
}
