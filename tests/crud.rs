//! CRUD and cursors through the official driver, with mongod's reply shapes.

mod common;

use std::sync::Arc;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;
use mongodb::options::ReturnDocument;
use tideway_base::clock::{Clock, ManualClock};

async fn run(db: &mongodb::Database, command: Document) -> Document {
    db.run_command(command).await.expect("command succeeds")
}

#[tokio::test]
async fn insert_generates_id_first_and_find_returns_it() {
    let server = TestServer::start().await;
    let client = server.client();
    let coll = client.database("app").collection::<Document>("people");
    let inserted = coll
        .insert_one(doc! {"name": "ada", "_id_like": 1})
        .await
        .unwrap();
    assert!(matches!(inserted.inserted_id, Bson::ObjectId(_)));
    coll.insert_one(doc! {"name": "bob", "_id": 7})
        .await
        .unwrap();
    let found: Vec<Document> = coll
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    for document in &found {
        assert_eq!(document.keys().next().map(String::as_str), Some("_id"));
    }
    let bob = coll.find_one(doc! {"_id": 7}).await.unwrap().unwrap();
    assert_eq!(bob.get_str("name"), Ok("bob"));
    server.stop().await;
}

#[tokio::test]
async fn ordered_and_unordered_inserts_with_a_duplicate() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let docs = vec![
        doc! {"_id": 1},
        doc! {"_id": 2},
        doc! {"_id": 1},
        doc! {"_id": 3},
    ];
    let ordered = run(&db, doc! {"insert": "o", "documents": docs.clone()}).await;
    assert_eq!(ordered.get_i32("n"), Ok(2));
    let errors = ordered.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    let error = errors[0].as_document().unwrap();
    assert_eq!(error.get_i32("index"), Ok(2));
    assert_eq!(error.get_i32("code"), Ok(11000));
    assert_eq!(error.get_document("keyPattern").unwrap(), &doc! {"_id": 1});
    assert_eq!(error.get_document("keyValue").unwrap(), &doc! {"_id": 1});
    assert_eq!(
        error.get_str("errmsg").unwrap(),
        "E11000 duplicate key error collection: app.o index: _id_ dup key: { _id: 1 }"
    );

    let unordered = run(
        &db,
        doc! {"insert": "u", "documents": docs, "ordered": false},
    )
    .await;
    assert_eq!(unordered.get_i32("n"), Ok(3));
    let errors = unordered.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].as_document().unwrap().get_i32("index"), Ok(2));
    let count = run(&db, doc! {"count": "u"}).await;
    assert_eq!(count.get_i32("n"), Ok(3));
    server.stop().await;
}

#[tokio::test]
async fn invalid_documents_get_write_errors() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let reply = run(
        &db,
        doc! {"insert": "c", "documents": [{"_id": [1, 2]}, {"_id": 5}], "ordered": false},
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    let error = reply.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        (error.get_i32("index"), error.get_i32("code")),
        (Ok(0), Ok(53))
    );

    let big = "x".repeat(16 * 1024 * 1024);
    let reply = run(&db, doc! {"insert": "c", "documents": [{"big": big}]}).await;
    let error = reply.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(10334));

    let error = command_error(db.run_command(doc! {"insert": "c", "documents": []}).await);
    assert_eq!(error.0, 16);
    let error = command_error(
        db.run_command(doc! {"insert": "bad$name", "documents": [{}]})
            .await,
    );
    assert_eq!(error.0, 73);
    server.stop().await;
}

#[tokio::test]
async fn cursors_page_with_batch_size_and_get_more() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let docs: Vec<Document> = (0..250).map(|i| doc! {"_id": i, "v": i % 7}).collect();
    run(&db, doc! {"insert": "c", "documents": docs}).await;

    let first = run(&db, doc! {"find": "c", "batchSize": 100}).await;
    let cursor = first.get_document("cursor").unwrap();
    assert_eq!(cursor.get_str("ns"), Ok("app.c"));
    assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 100);
    let id = cursor.get_i64("id").unwrap();
    assert_ne!(id, 0);
    let mut seen = 100;
    let mut current = id;
    while current != 0 {
        let more = run(
            &db,
            doc! {"getMore": current, "collection": "c", "batchSize": 60},
        )
        .await;
        let cursor = more.get_document("cursor").unwrap();
        seen += cursor.get_array("nextBatch").unwrap().len();
        current = cursor.get_i64("id").unwrap();
    }
    assert_eq!(seen, 250);
    let gone = command_error(
        db.run_command(doc! {"getMore": id, "collection": "c"})
            .await,
    );
    assert_eq!((gone.0, gone.1.as_str()), (43, "CursorNotFound"));

    // The driver drives the same protocol.
    let coll = db.collection::<Document>("c");
    let all: Vec<Document> = coll
        .find(doc! {"v": 3})
        .batch_size(5)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), (0..250).filter(|i| i % 7 == 3).count());

    // batchSize 0 opens a cursor with an empty first batch; singleBatch closes it.
    let empty = run(&db, doc! {"find": "c", "batchSize": 0}).await;
    let cursor = empty.get_document("cursor").unwrap();
    assert!(cursor.get_array("firstBatch").unwrap().is_empty());
    assert_ne!(cursor.get_i64("id").unwrap(), 0);
    let single = run(&db, doc! {"find": "c", "batchSize": 5, "singleBatch": true}).await;
    assert_eq!(single.get_document("cursor").unwrap().get_i64("id"), Ok(0));

    // A limit is a total over all batches.
    let limited = run(&db, doc! {"find": "c", "limit": 30, "batchSize": 20}).await;
    let cursor = limited.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").unwrap();
    let more = run(&db, doc! {"getMore": id, "collection": "c"}).await;
    let next = more.get_document("cursor").unwrap();
    assert_eq!(next.get_array("nextBatch").unwrap().len(), 10);
    assert_eq!(next.get_i64("id"), Ok(0));
    server.stop().await;
}

#[tokio::test]
async fn kill_cursors_and_wrong_namespace() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let docs: Vec<Document> = (0..10).map(|i| doc! {"_id": i}).collect();
    run(&db, doc! {"insert": "c", "documents": docs}).await;
    let reply = run(&db, doc! {"find": "c", "batchSize": 2}).await;
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    let wrong = command_error(
        db.run_command(doc! {"getMore": id, "collection": "other"})
            .await,
    );
    assert_eq!(wrong.0, 13);
    let killed = run(&db, doc! {"killCursors": "c", "cursors": [id, 12345_i64]}).await;
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
    assert_eq!(
        killed.get_array("cursorsNotFound").unwrap(),
        &vec![Bson::Int64(12345)]
    );
    let gone = command_error(
        db.run_command(doc! {"getMore": id, "collection": "c"})
            .await,
    );
    assert_eq!(gone.0, 43);
    server.stop().await;
}

#[tokio::test]
async fn idle_cursors_time_out_by_the_server_clock() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let server = TestServer::start_with_clock(common::test_config(), clock.clone()).await;
    let db = server.client().database("app");
    let docs: Vec<Document> = (0..10).map(|i| doc! {"_id": i}).collect();
    run(&db, doc! {"insert": "c", "documents": docs}).await;
    let open = |no_timeout: bool| {
        let db = db.clone();
        async move {
            let reply = run(
                &db,
                doc! {"find": "c", "batchSize": 2, "noCursorTimeout": no_timeout},
            )
            .await;
            reply.get_document("cursor").unwrap().get_i64("id").unwrap()
        }
    };
    let fresh = open(false).await;
    let kept = open(true).await;
    clock.advance_ms(9 * 60 * 1000);
    run(
        &db,
        doc! {"getMore": fresh, "collection": "c", "batchSize": 1},
    )
    .await;
    clock.advance_ms(10 * 60 * 1000 + 1);
    let timed_out = command_error(
        db.run_command(doc! {"getMore": fresh, "collection": "c"})
            .await,
    );
    assert_eq!(timed_out.0, 43);
    run(
        &db,
        doc! {"getMore": kept, "collection": "c", "batchSize": 1},
    )
    .await;
    assert!(server.state.cursors.reap_idle(clock.now_ms()) == 0);
    server.stop().await;
}

#[tokio::test]
async fn sort_skip_limit_and_projection() {
    let server = TestServer::start().await;
    let coll = server.client().database("app").collection::<Document>("c");
    let docs: Vec<Document> = (0..20)
        .map(|i| doc! {"_id": i, "k": (i * 7) % 20, "tags": ["x", i.to_string()]})
        .collect();
    coll.insert_many(docs).await.unwrap();
    let found: Vec<Document> = coll
        .find(doc! {"k": {"$gte": 5}})
        .sort(doc! {"k": -1})
        .skip(2)
        .limit(3)
        .projection(doc! {"k": 1, "_id": 0})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found, vec![doc! {"k": 17}, doc! {"k": 16}, doc! {"k": 15}]);
    let by_id_desc: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! {"_id": -1})
        .limit(2)
        .projection(doc! {"tags": 0, "k": 0})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(by_id_desc, vec![doc! {"_id": 19}, doc! {"_id": 18}]);
    server.stop().await;
}

#[tokio::test]
async fn updates_replace_modify_upsert_and_protect_id() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    run(&db, doc! {"insert": "c", "documents": [{"_id": 1, "a": 1}, {"_id": 2, "a": 1}, {"_id": 3, "a": 2}]}).await;
    let reply = run(
        &db,
        doc! {"update": "c", "updates": [
            {"q": {"a": 1}, "u": {"$inc": {"n": 5}}, "multi": true},
            {"q": {"_id": 3}, "u": {"b": "replaced"}},
            {"q": {"_id": 3}, "u": {"b": "replaced"}},
            {"q": {"k": "new", "z": {"$gt": 1}}, "u": {"$set": {"w": 1}}, "upsert": true},
        ]},
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(5));
    assert_eq!(reply.get_i32("nModified"), Ok(3));
    let upserted = reply.get_array("upserted").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(upserted.get_i32("index"), Ok(3));
    let coll = db.collection::<Document>("c");
    let new_doc = coll.find_one(doc! {"k": "new"}).await.unwrap().unwrap();
    assert_eq!(new_doc.get_i32("w"), Ok(1));
    assert!(
        new_doc.get("z").is_none(),
        "only equality fields seed an upsert"
    );
    assert_eq!(new_doc.get("_id"), upserted.get("_id"));
    let replaced = coll.find_one(doc! {"_id": 3}).await.unwrap().unwrap();
    assert_eq!(replaced, doc! {"_id": 3, "b": "replaced"});

    let immutable = run(
        &db,
        doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"_id": 9}}}]},
    )
    .await;
    let error = immutable.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(66));
    let unknown = run(
        &db,
        doc! {"update": "c", "updates": [{"q": {}, "u": {"$frobnicate": {"a": 1}}}]},
    )
    .await;
    let error = unknown.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(9));

    let result = coll
        .update_one(doc! {"_id": 42}, doc! {"$set": {"x": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(result.upserted_id, Some(Bson::Int32(42)));
    let result = coll
        .update_many(doc! {"a": 1}, doc! {"$set": {"n": 5}})
        .await
        .unwrap();
    assert_eq!((result.matched_count, result.modified_count), (2, 0));
    server.stop().await;
}

#[tokio::test]
async fn deletes_with_limit_zero_and_one() {
    let server = TestServer::start().await;
    let coll = server.client().database("app").collection::<Document>("c");
    let docs: Vec<Document> = (0..10)
        .map(|i| doc! {"_id": i, "even": i % 2 == 0})
        .collect();
    coll.insert_many(docs).await.unwrap();
    assert_eq!(
        coll.delete_one(doc! {"even": true})
            .await
            .unwrap()
            .deleted_count,
        1
    );
    assert_eq!(
        coll.delete_many(doc! {"even": true})
            .await
            .unwrap()
            .deleted_count,
        4
    );
    assert_eq!(
        coll.delete_many(doc! {"even": true})
            .await
            .unwrap()
            .deleted_count,
        0
    );
    assert_eq!(coll.estimated_document_count().await.unwrap(), 5);
    let db = server.client().database("app");
    let bad = run(
        &db,
        doc! {"delete": "c", "deletes": [{"q": {}, "limit": 5}]},
    )
    .await;
    assert_eq!(
        bad.get_array("writeErrors").unwrap()[0]
            .as_document()
            .unwrap()
            .get_i32("code"),
        Ok(9)
    );
    server.stop().await;
}

#[tokio::test]
async fn find_and_modify_returns_before_or_after() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let coll = db.collection::<Document>("c");
    coll.insert_many(vec![doc! {"_id": 1, "q": 5}, doc! {"_id": 2, "q": 1}])
        .await
        .unwrap();
    let after = coll
        .find_one_and_update(doc! {}, doc! {"$inc": {"q": 1}})
        .sort(doc! {"q": 1})
        .return_document(ReturnDocument::After)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, doc! {"_id": 2, "q": 2});
    let raw = run(&db, doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"q": 0}}, "fields": {"q": 1}}).await;
    assert_eq!(raw.get_document("value").unwrap(), &doc! {"_id": 1, "q": 5});
    assert_eq!(
        raw.get_document("lastErrorObject").unwrap(),
        &doc! {"n": 1, "updatedExisting": true}
    );
    let upsert = run(&db, doc! {"findAndModify": "c", "query": {"_id": 9}, "update": {"$set": {"q": 9}}, "upsert": true, "new": true}).await;
    assert_eq!(
        upsert.get_document("value").unwrap(),
        &doc! {"_id": 9, "q": 9}
    );
    let last = upsert.get_document("lastErrorObject").unwrap();
    assert_eq!(last.get_bool("updatedExisting"), Ok(false));
    assert_eq!(last.get_i32("upserted"), Ok(9));
    let removed = coll
        .find_one_and_delete(doc! {"_id": 9})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(removed.get_i32("q"), Ok(9));
    let none = run(
        &db,
        doc! {"findAndModify": "c", "query": {"_id": 100}, "remove": true},
    )
    .await;
    assert_eq!(none.get("value"), Some(&Bson::Null));
    assert_eq!(
        none.get_document("lastErrorObject").unwrap(),
        &doc! {"n": 0}
    );
    let both = command_error(
        db.run_command(doc! {"findAndModify": "c", "remove": true, "update": {}})
            .await,
    );
    assert_eq!(both.0, 9);
    server.stop().await;
}

#[tokio::test]
async fn count_and_distinct() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    run(
        &db,
        doc! {"insert": "c", "documents": [
            {"_id": 1, "t": ["a", "b"], "n": 1},
            {"_id": 2, "t": "b", "n": 2},
            {"_id": 3, "t": ["c", ["d"]], "n": 3},
            {"_id": 4, "n": 4},
        ]},
    )
    .await;
    let count = run(
        &db,
        doc! {"count": "c", "query": {"n": {"$gt": 1}}, "skip": 1, "limit": 5},
    )
    .await;
    assert_eq!(count.get_i32("n"), Ok(2));
    let distinct = run(&db, doc! {"distinct": "c", "key": "t"}).await;
    assert_eq!(
        distinct.get_array("values").unwrap(),
        &vec![
            Bson::from("a"),
            Bson::from("b"),
            Bson::from("c"),
            Bson::Array(vec![Bson::from("d")])
        ]
    );
    let coll = db.collection::<Document>("c");
    let values = coll.distinct("t", doc! {"n": {"$lt": 3}}).await.unwrap();
    assert_eq!(values, vec![Bson::from("a"), Bson::from("b")]);
    let missing = run(&db, doc! {"count": "nothing"}).await;
    assert_eq!(missing.get_i32("n"), Ok(0));
    server.stop().await;
}

#[tokio::test]
async fn concurrent_increments_add_up() {
    let server = TestServer::start().await;
    let client = server.client();
    let coll = client.database("app").collection::<Document>("counters");
    coll.insert_many((0..4).map(|i| doc! {"_id": i, "n": 0}).collect::<Vec<_>>())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let coll = coll.clone();
            tokio::spawn(async move {
                for round in 0..50 {
                    coll.update_one(doc! {"_id": 0}, doc! {"$inc": {"n": 1}})
                        .await
                        .unwrap();
                    let other = (task + round) % 3 + 1;
                    coll.update_one(doc! {"_id": other}, doc! {"$inc": {"n": 2}})
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let shared = coll.find_one(doc! {"_id": 0}).await.unwrap().unwrap();
    assert_eq!(shared.get_i32("n"), Ok(16 * 50));
    let others: Vec<Document> = coll
        .find(doc! {"_id": {"$gt": 0}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let total: i32 = others.iter().map(|d| d.get_i32("n").unwrap()).sum();
    assert_eq!(total, 16 * 50 * 2);
    server.stop().await;
}

#[tokio::test]
async fn max_time_ms_is_honoured() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let docs: Vec<Document> = (0..30_000)
        .map(|i| doc! {"_id": i, "r": (i * 7919) % 30_000})
        .collect();
    run(&db, doc! {"insert": "big", "documents": docs}).await;
    let slow = command_error(
        db.run_command(doc! {"find": "big", "filter": {"nope": {"$exists": false}}, "sort": {"r": 1}, "maxTimeMS": 1})
            .await,
    );
    assert_eq!((slow.0, slow.1.as_str()), (50, "MaxTimeMSExpired"));
    let invalid = command_error(db.run_command(doc! {"find": "big", "maxTimeMS": -5}).await);
    assert_eq!(invalid.0, 2);
    let fine = run(
        &db,
        doc! {"find": "big", "filter": {"_id": 5}, "maxTimeMS": 10_000},
    )
    .await;
    assert_eq!(
        fine.get_document("cursor")
            .unwrap()
            .get_array("firstBatch")
            .unwrap()
            .len(),
        1
    );
    server.stop().await;
}

/// MongoDB 8.0's `sort` on an update statement (the CRUD spec's `UpdateOne`/`ReplaceOne` `sort`):
/// the first document in sort order is the one changed; with `multi` the command fails.
#[tokio::test]
async fn update_one_and_replace_one_follow_sort() {
    let server = TestServer::start().await;
    let db = server.client().database("app");
    let coll = db.collection::<Document>("sorted");
    coll.insert_many([
        doc! {"_id": 1, "v": 3},
        doc! {"_id": 2, "v": 1},
        doc! {"_id": 3, "v": 2},
    ])
    .await
    .unwrap();
    let changed = |label: &'static str| {
        let coll = coll.clone();
        async move {
            let found = coll.find_one(doc! {label: true}).await.unwrap().unwrap();
            found.get_i32("_id").unwrap()
        }
    };
    coll.update_one(doc! {}, doc! {"$set": {"low": true}})
        .sort(doc! {"v": 1})
        .await
        .unwrap();
    assert_eq!(changed("low").await, 2);
    coll.update_one(doc! {}, doc! {"$set": {"high": true}})
        .sort(doc! {"v": -1})
        .await
        .unwrap();
    assert_eq!(changed("high").await, 1);
    coll.replace_one(doc! {"v": {"$gte": 2}}, doc! {"v": 20, "replaced": true})
        .sort(doc! {"v": 1})
        .await
        .unwrap();
    assert_eq!(changed("replaced").await, 3);
    let result = coll
        .update_one(doc! {"v": 99}, doc! {"$set": {"z": 1}})
        .sort(doc! {"v": 1})
        .upsert(true)
        .await
        .unwrap();
    assert!(result.upserted_id.is_some());

    let (code, code_name, message) = command_error(
        db.run_command(doc! {"update": "sorted", "updates": [
            {"q": {}, "u": {"$set": {"z": 2}}, "multi": true, "sort": {"v": 1}},
        ]})
        .await,
    );
    assert_eq!(
        (code, code_name.as_str(), message.as_str()),
        (9, "FailedToParse", "Cannot specify sort with multi=true")
    );
    assert_eq!(coll.count_documents(doc! {"z": 2}).await.unwrap(), 0);
    server.stop().await;
}
