//! `bulkWrite` (MongoDB 8.0) through the official driver: the command as `db.adminCommand` sends
//! it, and `Client::bulk_write`. Expected replies come from the command's reference page
//! (docs/reference/command/bulkWrite: the pizzas examples), mongod's jstests
//! (jstests/core/write/bulk/bulk_write_non_transaction.js, bulk_write_cursor.js), the driver
//! CRUD spec (source/crud/bulk-write.md) and mongod's `bulk_write.idl` / `bulk_write.cpp`.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use futures::TryStreamExt;
use mongodb::error::ErrorKind;
use mongodb::options::{
    DeleteManyModel, DeleteOneModel, InsertOneModel, UpdateManyModel, UpdateOneModel, WriteModel,
};
use mongodb::{Client, Namespace};

async fn bulk(client: &Client, command: Document) -> Document {
    client
        .database("admin")
        .run_command(command)
        .await
        .expect("bulkWrite succeeds")
}

/// `nErrors, nInserted, nMatched, nModified, nUpserted, nDeleted`, in that order.
fn summary(reply: &Document) -> [i32; 6] {
    [
        "nErrors",
        "nInserted",
        "nMatched",
        "nModified",
        "nUpserted",
        "nDeleted",
    ]
    .map(|field| reply.get_i32(field).expect(field))
}

async fn ids(client: &Client, db: &str, coll: &str) -> Vec<Bson> {
    let documents: Vec<Document> = client
        .database(db)
        .collection::<Document>(coll)
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    documents
        .iter()
        .map(|document| document.get("_id").cloned().unwrap())
        .collect()
}

/// The documentation's pizzas collection.
async fn pizzas(client: &Client) {
    let coll = client.database("test").collection::<Document>("pizzas");
    coll.drop().await.unwrap();
    coll.insert_many([
        doc! {"_id": 0, "type": "pepperoni", "size": "small", "price": 4},
        doc! {"_id": 1, "type": "cheese", "size": "medium", "price": 7},
        doc! {"_id": 2, "type": "vegan", "size": "large", "price": 8},
    ])
    .await
    .unwrap();
}

fn date(rfc3339: &str) -> bson::DateTime {
    bson::DateTime::parse_rfc3339_str(rfc3339).unwrap()
}

#[tokio::test]
async fn documentation_example_across_two_namespaces() {
    let server = TestServer::start().await;
    let client = server.client();
    pizzas(&client).await;
    client
        .database("test")
        .collection::<Document>("pizzaOrders")
        .insert_many([
            doc! {"_id": 0, "type": "pepperoni", "number": 5, "orderDate": date("2023-01-15T12:00:00Z")},
            doc! {"_id": 1, "type": "cheese", "number": 15, "orderDate": date("2023-01-23T11:12:32Z")},
            doc! {"_id": 2, "type": "vegan", "number": 20, "orderDate": date("2023-03-20T10:01:12Z")},
        ])
        .await
        .unwrap();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"insert": 0, "document": {"_id": 5, "type": "sausage", "size": "small", "price": 12}},
                {"insert": 0, "document": {"_id": 6, "type": "vegan cheese", "size": "large", "price": 25}},
                {"update": 0, "filter": {"type": "cheese"}, "updateMods": {"$set": {"price": 15}}},
                {"delete": 0, "filter": {"price": {"$lt": 7}}},
                {"insert": 1, "document": {"_id": 3, "type": "sausage", "number": 7, "orderDate": date("2023-04-15T12:02:15Z")}},
                {"insert": 1, "document": {"_id": 4, "type": "vegan", "number": 16, "orderDate": date("2023-05-12T11:03:11Z")}},
                {"update": 1, "filter": {"type": "cheese"}, "updateMods": {"$set": {"number": 50}}},
                {"delete": 1, "filter": {"_id": 2}},
                {"delete": 1, "filter": {"orderDate": {"$lte": date("2023-03-15T00:00:00Z")}}},
            ],
            "nsInfo": [{"ns": "test.pizzas"}, {"ns": "test.pizzaOrders"}],
        },
    )
    .await;
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get("id"), Some(&Bson::Int64(0)));
    assert_eq!(cursor.get_str("ns"), Ok("admin.$cmd.bulkWrite"));
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"ok": 1.0, "idx": 0, "n": 1},
            doc! {"ok": 1.0, "idx": 1, "n": 1},
            doc! {"ok": 1.0, "idx": 2, "n": 1, "nModified": 1},
            doc! {"ok": 1.0, "idx": 3, "n": 1},
            doc! {"ok": 1.0, "idx": 4, "n": 1},
            doc! {"ok": 1.0, "idx": 5, "n": 1},
            doc! {"ok": 1.0, "idx": 6, "n": 1, "nModified": 1},
            doc! {"ok": 1.0, "idx": 7, "n": 1},
            doc! {"ok": 1.0, "idx": 8, "n": 1},
        ]
    );
    assert_eq!(summary(&reply), [0, 4, 2, 2, 0, 3]);
    let keys: Vec<&str> = reply.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "cursor",
            "nErrors",
            "nInserted",
            "nMatched",
            "nModified",
            "nUpserted",
            "nDeleted",
            "ok"
        ]
    );
    assert_eq!(
        ids(&client, "test", "pizzas").await,
        [1, 2, 5, 6].map(Bson::Int32)
    );
    assert_eq!(
        ids(&client, "test", "pizzaOrders").await,
        [1, 3, 4].map(Bson::Int32)
    );
    server.stop().await;
}

#[tokio::test]
async fn documentation_example_with_errors_unordered() {
    let server = TestServer::start().await;
    let client = server.client();
    pizzas(&client).await;
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"insert": 0, "document": {"_id": 1, "type": "tomato", "size": "small", "price": 12}},
                {"insert": 0, "document": {"_id": 2, "type": "pepper", "size": "small", "price": 12}},
                {"update": 0, "filter": {"size": "extra large"}, "updateMods": {"$set": {"price": 15}}},
                {"delete": 0, "filter": {"_id": 8}},
            ],
            "nsInfo": [{"ns": "test.pizzas"}],
            "ordered": false,
        },
    )
    .await;
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {
                "ok": 0.0, "idx": 0, "code": 11000,
                "errmsg": "E11000 duplicate key error collection: test.pizzas index: _id_ dup key: { _id: 1 }",
                "keyPattern": {"_id": 1}, "keyValue": {"_id": 1}, "n": 0,
            },
            doc! {
                "ok": 0.0, "idx": 1, "code": 11000,
                "errmsg": "E11000 duplicate key error collection: test.pizzas index: _id_ dup key: { _id: 2 }",
                "keyPattern": {"_id": 1}, "keyValue": {"_id": 2}, "n": 0,
            },
            doc! {"ok": 1.0, "idx": 2, "n": 0, "nModified": 0},
            doc! {"ok": 1.0, "idx": 3, "n": 0},
        ]
    );
    assert_eq!(summary(&reply), [2, 0, 0, 0, 0, 0]);
    server.stop().await;
}

/// jstests/core/write/bulk/bulk_write_non_transaction.js: "a write can fail part way through"
/// and "we continue processing after an error for ordered:false".
#[tokio::test]
async fn ordered_stops_at_the_first_error_and_unordered_goes_on() {
    let server = TestServer::start().await;
    let client = server.client();
    let ops = bson::bson!([
        {"insert": 0, "document": {"_id": 1, "skey": "MongoDB"}},
        {"insert": 0, "document": {"_id": 1, "skey": "MongoDB"}},
        {"insert": 1, "document": {"skey": "MongoDB"}},
    ]);
    let ns_info = bson::bson!([{"ns": "test.coll"}, {"ns": "test.coll1"}]);

    let reply = bulk(
        &client,
        doc! {"bulkWrite": 1, "ops": ops.clone(), "nsInfo": ns_info.clone()},
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0], doc! {"ok": 1.0, "idx": 0, "n": 1});
    assert_eq!(batch[1].get_i32("code"), Ok(11000));
    assert_eq!(batch[1].get_document("keyPattern"), Ok(&doc! {"_id": 1}));
    assert_eq!(batch[1].get_document("keyValue"), Ok(&doc! {"_id": 1}));
    assert_eq!(batch[1].get_i32("n"), Ok(0));
    assert_eq!(summary(&reply), [1, 1, 0, 0, 0, 0]);
    assert_eq!(ids(&client, "test", "coll").await.len(), 1);
    assert!(ids(&client, "test", "coll1").await.is_empty());

    client.database("test").drop().await.unwrap();
    let reply = bulk(
        &client,
        doc! {"bulkWrite": 1, "ops": ops, "nsInfo": ns_info, "ordered": false},
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[1].get_i32("code"), Ok(11000));
    assert_eq!(batch[2], doc! {"ok": 1.0, "idx": 2, "n": 1});
    assert_eq!(summary(&reply), [1, 2, 0, 0, 0, 0]);
    assert_eq!(ids(&client, "test", "coll").await.len(), 1);
    assert_eq!(ids(&client, "test", "coll1").await.len(), 1);
    server.stop().await;
}

/// bulk_write_non_transaction.js: "Checking n and nModified on update success and failure".
#[tokio::test]
async fn failed_updates_report_n_and_n_modified_zero() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"insert": 0, "document": {"_id": 1, "skey": "MongoDB"}},
                {"update": 0, "filter": {"_id": 1}, "updateMods": {"$set": {"skey": "MongoDB2"}}},
                {"update": 0, "filter": {"_id": 1}, "updateMods": {"$set": {"_id": 2}}},
            ],
            "nsInfo": [{"ns": "test.coll"}],
        },
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[0], doc! {"ok": 1.0, "idx": 0, "n": 1});
    assert_eq!(batch[1], doc! {"ok": 1.0, "idx": 1, "n": 1, "nModified": 1});
    assert_eq!(batch[2].get_f64("ok"), Ok(0.0));
    assert_eq!(batch[2].get_i32("idx"), Ok(2));
    assert_eq!(
        batch[2].get_i32("code"),
        Ok(66),
        "ImmutableField: {}",
        batch[2]
    );
    // A failed update's item ends with `n: 0, nModified: 0`.
    let keys: Vec<&str> = batch[2].keys().map(String::as_str).collect();
    assert_eq!(keys[keys.len() - 2..], ["n", "nModified"]);
    assert_eq!(batch[2].get_i32("n"), Ok(0));
    assert_eq!(batch[2].get_i32("nModified"), Ok(0));
    assert_eq!(summary(&reply), [1, 1, 1, 1, 0, 0]);
    server.stop().await;
}

/// bulk_write_non_transaction.js: "Test update continues on error with ordered:false" and its
/// ordered twin.
#[tokio::test]
async fn upserts_report_the_id_and_count_as_upserted() {
    let server = TestServer::start().await;
    let client = server.client();
    let coll2 = client.database("test").collection::<Document>("coll2");
    coll2
        .insert_many([doc! {"_id": 3}, doc! {"_id": 4}])
        .await
        .unwrap();
    let ops = bson::bson!([
        {"update": 0, "filter": {"_id": 3}, "updateMods": {"$inc": {"_id": 1}}, "upsert": true},
        {"update": 1, "filter": {"_id": 1}, "updateMods": {"$set": {"skey": "MongoDB2"}}, "upsert": true},
    ]);
    let ns_info = bson::bson!([{"ns": "test.coll2"}, {"ns": "test.coll"}]);
    let reply = bulk(
        &client,
        doc! {"bulkWrite": 1, "ops": ops.clone(), "nsInfo": ns_info.clone(), "ordered": false},
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0].get_i32("code"), Ok(66), "{}", batch[0]);
    assert_eq!(batch[0].get_i32("n"), Ok(0));
    assert_eq!(batch[0].get_i32("nModified"), Ok(0));
    assert_eq!(
        batch[1],
        doc! {"ok": 1.0, "idx": 1, "n": 1, "nModified": 0, "upserted": {"_id": 1}}
    );
    assert_eq!(summary(&reply), [1, 0, 0, 0, 1, 0]);
    let upserted = client
        .database("test")
        .collection::<Document>("coll")
        .find_one(doc! {})
        .await
        .unwrap();
    assert_eq!(upserted, Some(doc! {"_id": 1, "skey": "MongoDB2"}));

    client
        .database("test")
        .collection::<Document>("coll")
        .drop()
        .await
        .unwrap();
    let mut ops = ops.as_array().unwrap().clone();
    ops.push(Bson::Document(
        doc! {"insert": 0, "document": {"_id": 1, "skey": "MongoDB"}},
    ));
    let reply = bulk(
        &client,
        doc! {"bulkWrite": 1, "ops": ops, "nsInfo": ns_info},
    )
    .await;
    assert_eq!(first_batch(&reply).len(), 1);
    assert_eq!(summary(&reply), [1, 0, 0, 0, 0, 0]);
    assert!(ids(&client, "test", "coll").await.is_empty());
    server.stop().await;
}

/// bulk_write_non_transaction.js: "Test errorsOnly with a failure"; with no failure the batch is
/// empty and there is no cursor.
#[tokio::test]
async fn errors_only_returns_the_errors_alone() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [{"insert": 0, "document": {"_id": 1}}, {"insert": 0, "document": {"_id": 1}}],
            "nsInfo": [{"ns": "test.coll"}],
            "errorsOnly": true,
        },
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].get_i32("idx"), Ok(1));
    assert_eq!(batch[0].get_i32("code"), Ok(11000));
    assert_eq!(batch[0].get_i32("n"), Ok(0));
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get("id"), Some(&Bson::Int64(0)));
    assert_eq!(cursor.get_str("ns"), Ok("admin.$cmd.bulkWrite"));
    assert_eq!(summary(&reply), [1, 1, 0, 0, 0, 0]);

    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [{"insert": 0, "document": {"_id": 2}}],
            "nsInfo": [{"ns": "test.coll"}],
            "errorsOnly": true,
            "cursor": {"batchSize": 0},
        },
    )
    .await;
    assert!(first_batch(&reply).is_empty());
    assert_eq!(
        reply.get_document("cursor").unwrap().get("id"),
        Some(&Bson::Int64(0))
    );
    assert_eq!(summary(&reply), [0, 1, 0, 0, 0, 0]);
    server.stop().await;
}

/// jstests/core/write/bulk/bulk_write_cursor.js: with `cursor.batchSize` 1, the second result
/// comes from a getMore on `admin.$cmd.bulkWrite`.
#[tokio::test]
async fn results_past_the_batch_size_come_through_get_more() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [{"insert": 1, "document": {"skey": "MongoDB"}}, {"insert": 0, "document": {"skey": "MongoDB"}}],
            "nsInfo": [{"ns": "test.coll"}, {"ns": "test.coll1"}],
            "cursor": {"batchSize": 1},
        },
    )
    .await;
    let cursor = reply.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").unwrap();
    assert_ne!(id, 0);
    assert_eq!(
        first_batch(&reply),
        vec![doc! {"ok": 1.0, "idx": 0, "n": 1}]
    );
    assert_eq!(summary(&reply), [0, 2, 0, 0, 0, 0]);
    let more = bulk(
        &client,
        doc! {"getMore": id, "collection": "$cmd.bulkWrite"},
    )
    .await;
    let cursor = more.get_document("cursor").unwrap();
    assert_eq!(cursor.get_i64("id"), Ok(0));
    assert_eq!(cursor.get_str("ns"), Ok("admin.$cmd.bulkWrite"));
    assert_eq!(
        cursor.get_array("nextBatch").unwrap(),
        &vec![Bson::Document(doc! {"ok": 1.0, "idx": 1, "n": 1})]
    );
    server.stop().await;
}

/// A results cursor the driver abandons is killed under its namespace, as the CRUD spec has
/// drivers do after a top-level error (`killCursors: "$cmd.bulkWrite"` on admin).
#[tokio::test]
async fn an_abandoned_results_cursor_is_killed() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [{"insert": 0, "document": {}}, {"insert": 0, "document": {}}],
            "nsInfo": [{"ns": "test.coll"}],
            "cursor": {"batchSize": 0},
        },
    )
    .await;
    assert!(first_batch(&reply).is_empty());
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);
    let killed = bulk(
        &client,
        doc! {"killCursors": "$cmd.bulkWrite", "cursors": [id]},
    )
    .await;
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
    let (code, _, _) = command_error(
        client
            .database("admin")
            .run_command(doc! {"getMore": id, "collection": "$cmd.bulkWrite"})
            .await,
    );
    assert_eq!(code, 43);
    server.stop().await;
}

/// The update documentation's arrayFilters example (`grades.$[element]`) and its pipeline example
/// (students3: `$avg`, `$trunc`, `$switch`), as bulkWrite update ops.
#[tokio::test]
async fn array_filters_and_pipeline_updates() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("test");
    db.collection::<Document>("students")
        .insert_many([
            doc! {"_id": 1, "grades": [95, 92, 90]},
            doc! {"_id": 2, "grades": [98, 100, 102]},
            doc! {"_id": 3, "grades": [95, 110, 100]},
        ])
        .await
        .unwrap();
    db.collection::<Document>("students3")
        .insert_many([
            doc! {"_id": 1, "tests": [95, 92, 90]},
            doc! {"_id": 2, "tests": [94, 88, 90]},
            doc! {"_id": 3, "tests": [70, 75, 82]},
        ])
        .await
        .unwrap();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {
                    "update": 0, "filter": {"grades": {"$gte": 100}},
                    "updateMods": {"$set": {"grades.$[element]": 100}},
                    "arrayFilters": [{"element": {"$gte": 100}}], "multi": true,
                },
                {
                    "update": 1, "filter": {}, "multi": true,
                    "updateMods": [
                        {"$set": {"average": {"$trunc": [{"$avg": "$tests"}, 0]}}},
                        {"$set": {"grade": {"$switch": {
                            "branches": [
                                {"case": {"$gte": ["$average", 90]}, "then": "A"},
                                {"case": {"$gte": ["$average", 80]}, "then": "B"},
                                {"case": {"$gte": ["$average", 70]}, "then": "C"},
                                {"case": {"$gte": ["$average", 60]}, "then": "D"},
                            ],
                            "default": "F",
                        }}}},
                    ],
                },
            ],
            "nsInfo": [{"ns": "test.students"}, {"ns": "test.students3"}],
        },
    )
    .await;
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"ok": 1.0, "idx": 0, "n": 2, "nModified": 2},
            doc! {"ok": 1.0, "idx": 1, "n": 3, "nModified": 3},
        ]
    );
    assert_eq!(summary(&reply), [0, 0, 5, 5, 0, 0]);
    let students: Vec<Document> = db
        .collection::<Document>("students")
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        students,
        vec![
            doc! {"_id": 1, "grades": [95, 92, 90]},
            doc! {"_id": 2, "grades": [98, 100, 100]},
            doc! {"_id": 3, "grades": [95, 100, 100]},
        ]
    );
    let graded: Vec<Document> = db
        .collection::<Document>("students3")
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let summaries: Vec<(f64, &str)> = graded
        .iter()
        .map(|student| {
            let average = tideway_base::bsonutil::as_f64(student.get("average").unwrap()).unwrap();
            (average, student.get_str("grade").unwrap())
        })
        .collect();
    assert_eq!(summaries, [(92.0, "A"), (90.0, "A"), (75.0, "C")]);
    server.stop().await;
}

/// mongod 8.0: an update op's `sort` picks the document a single update changes; with `multi`
/// the op fails.
#[tokio::test]
async fn sort_chooses_the_updated_document() {
    let server = TestServer::start().await;
    let client = server.client();
    let coll = client.database("srt").collection::<Document>("c");
    coll.insert_many([
        doc! {"_id": 1, "v": 3},
        doc! {"_id": 2, "v": 1},
        doc! {"_id": 3, "v": 2},
    ])
    .await
    .unwrap();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"update": 0, "filter": {}, "updateMods": {"$set": {"low": true}}, "sort": {"v": 1}},
                {"update": 0, "filter": {}, "updateMods": {"$set": {"high": true}}, "sort": {"v": -1}},
                {"update": 0, "filter": {}, "updateMods": {"$set": {"x": 1}}, "sort": {"v": 1}, "multi": true},
            ],
            "nsInfo": [{"ns": "srt.c"}],
            "ordered": false,
        },
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch[0], doc! {"ok": 1.0, "idx": 0, "n": 1, "nModified": 1});
    assert_eq!(batch[1], doc! {"ok": 1.0, "idx": 1, "n": 1, "nModified": 1});
    assert_eq!(batch[2].get_i32("code"), Ok(9));
    assert_eq!(
        batch[2].get_str("errmsg"),
        Ok("Cannot specify sort with multi=true")
    );
    let low = coll.find_one(doc! {"low": true}).await.unwrap().unwrap();
    assert_eq!(low.get_i32("_id"), Ok(2));
    let high = coll.find_one(doc! {"high": true}).await.unwrap().unwrap();
    assert_eq!(high.get_i32("_id"), Ok(1));
    server.stop().await;
}

/// Namespaces: an update or delete on a namespace no write may touch fails that op
/// (bulk_write_non_transaction.js, `test.system.profile`); an insert into one fails the command.
#[tokio::test]
async fn unwritable_namespaces() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"update": 0, "filter": {"_id": 1}, "updateMods": {"$set": {"skey": "MongoDB2"}}},
                {"delete": 0, "filter": {"_id": 1}},
                {"insert": 1, "document": {"_id": 1}},
            ],
            "nsInfo": [{"ns": "test.system.profile"}, {"ns": "test.coll"}],
            "ordered": false,
        },
    )
    .await;
    let batch = first_batch(&reply);
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[0].get_i32("code"), Ok(73));
    assert_eq!(batch[0].get_i32("nModified"), Ok(0));
    assert_eq!(batch[1].get_i32("code"), Ok(73));
    assert!(batch[1].get("nModified").is_none());
    assert_eq!(batch[2], doc! {"ok": 1.0, "idx": 2, "n": 1});

    let (code, _, _) = command_error(
        client
            .database("admin")
            .run_command(doc! {
                "bulkWrite": 1,
                "ops": [{"insert": 0, "document": {"_id": 2}}, {"insert": 1, "document": {"_id": 3}}],
                "nsInfo": [{"ns": "test.coll"}, {"ns": "test.system.views"}],
            })
            .await,
    );
    assert_eq!(code, 73);
    // The insert grouped before the failing one was not written either.
    assert_eq!(ids(&client, "test", "coll").await, [Bson::Int32(1)]);
    server.stop().await;
}

#[tokio::test]
async fn runs_only_against_admin() {
    let server = TestServer::start().await;
    let client = server.client();
    let (code, code_name, message) = command_error(
        client
            .database("test")
            .run_command(doc! {
                "bulkWrite": 1,
                "ops": [{"insert": 0, "document": {"x": 1}}],
                "nsInfo": [{"ns": "test.coll"}],
            })
            .await,
    );
    assert_eq!(
        (code, code_name.as_str(), message.as_str()),
        (
            13,
            "Unauthorized",
            "bulkWrite may only be run against the admin database."
        )
    );
    assert!(ids(&client, "test", "coll").await.is_empty());
    server.stop().await;
}

/// `let` reaches every op's `$expr` and pipeline, and an update op's `constants` its own (the
/// update statement's `c`); constants with a non-pipeline update fail that op with 51198.
#[tokio::test]
async fn let_and_constants_reach_the_ops() {
    let server = TestServer::start().await;
    let client = server.client();
    let coll = client.database("test").collection::<Document>("coll");
    coll.insert_many([doc! {"_id": 1, "k": "a"}, doc! {"_id": 2, "k": "b"}])
        .await
        .unwrap();
    let reply = client
        .database("admin")
        .run_command(doc! {
            "bulkWrite": 1,
            "ops": [
                {"update": 0, "filter": {"$expr": {"$eq": ["$k", "$$target"]}},
                 "updateMods": [{"$set": {"v": "$$val"}}]},
                {"update": 0, "filter": {"_id": 2}, "updateMods": [{"$set": {"v": "$$val"}}],
                 "constants": {"val": 7}},
                {"update": 0, "filter": {"_id": 2}, "updateMods": {"$set": {"w": 1}},
                 "constants": {"val": 8}},
                {"delete": 0, "filter": {"$expr": {"$eq": ["$v", "$$gone"]}}},
            ],
            "nsInfo": [{"ns": "test.coll"}],
            "ordered": false,
            "let": {"target": "a", "val": 5, "gone": 100},
        })
        .await
        .unwrap();
    let items = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .clone();
    assert_eq!(items.len(), 4);
    let error = items[2].as_document().unwrap();
    assert_eq!(error.get_i32("code"), Ok(51198));
    assert_eq!(
        (reply.get_i32("nErrors"), reply.get_i32("nModified")),
        (Ok(1), Ok(2))
    );
    assert_eq!(
        common::find_all(&coll, doc! {}, doc! {}).await,
        vec![
            doc! {"_id": 1, "k": "a", "v": 5},
            doc! {"_id": 2, "k": "b", "v": 7}
        ]
    );
    server.stop().await;
}

/// The command is checked whole before anything is written, with mongod's codes and messages
/// (bulk_write_non_transaction.js, and mongod's IDL for the ops and `nsInfo`).
#[tokio::test]
async fn malformed_commands_are_refused_before_any_write() {
    let server = TestServer::start().await;
    let client = server.client();
    let good = doc! {"insert": 0, "document": {"_id": 1}};
    let ns = bson::bson!([{"ns": "test.coll"}]);
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"nsInfo": ns.clone()}, 40414, "BSON field 'bulkWrite.ops' is missing but a required field"),
        (doc! {"ops": [good.clone()]}, 40414, "BSON field 'bulkWrite.nsInfo' is missing but a required field"),
        (doc! {"ops": "test", "nsInfo": ns.clone()}, 14, "BSON field 'bulkWrite.ops' is the wrong type 'string', expected type 'array'"),
        (doc! {"ops": [], "nsInfo": 5}, 14, "BSON field 'bulkWrite.nsInfo' is the wrong type 'int', expected type 'array'"),
        (doc! {"ops": [good.clone()], "nsInfo": [5]}, 14, "BSON field 'bulkWrite.nsInfo.0' is the wrong type 'int', expected type 'object'"),
        (doc! {"ops": [good.clone()], "nsInfo": [{"x": 1}]}, 40415, "BSON field 'bulkWrite.nsInfo.x' is an unknown field."),
        (doc! {"ops": [], "nsInfo": ns.clone()}, 16, "Write batch sizes must be between 1 and 100000. Got 0 operations."),
        (doc! {"ops": [good.clone()], "nsInfo": ns.clone(), "fooField": 0}, 40415, "BSON field 'bulkWrite.fooField' is an unknown field."),
        (doc! {"ops": [good.clone(), {"insert": 2, "document": {"skey": "MongoDB"}}], "nsInfo": ns.clone()}, 2, "BulkWrite ops entry { insert: 2, document: { skey: \"MongoDB\" } } has an invalid nsInfo index."),
        (doc! {"ops": [good.clone(), {"insert": -1, "document": {}}], "nsInfo": ns.clone()}, 2, "BSON field 'insert' value must be >= 0, actual value '-1'"),
        (doc! {"ops": [good.clone(), {"insert": "0", "document": {}}], "nsInfo": ns.clone()}, 14, "BSON field 'bulkWrite.ops.insert' is the wrong type 'string', expected types '[long, int, decimal, double']"),
        (doc! {"ops": [good.clone(), {"insert": 0, "document": "test"}], "nsInfo": ns.clone()}, 14, "BSON field 'bulkWrite.ops.document' is the wrong type 'string', expected type 'object'"),
        (doc! {"ops": [good.clone(), {"insert": 0}], "nsInfo": ns.clone()}, 40414, "BSON field 'bulkWrite.ops.document' is missing but a required field"),
        (doc! {"ops": [good.clone(), {"frobnicate": 0, "document": {}}], "nsInfo": ns.clone()}, 40415, "BSON field 'bulkWrite.frobnicate' is an unknown field."),
        (doc! {"ops": [good.clone(), {"document": {}, "insert": 0}], "nsInfo": ns.clone()}, 40415, "BSON field 'bulkWrite.document' is an unknown field."),
        (doc! {"ops": [good.clone(), {"delete": 0, "filter": {}, "bogus": 1}], "nsInfo": ns.clone()}, 40415, "BSON field 'bulkWrite.ops.bogus' is an unknown field."),
        (doc! {"ops": [good.clone(), {"update": 0, "updateMods": {"$set": {"a": 1}}}], "nsInfo": ns.clone()}, 40414, "BSON field 'bulkWrite.ops.filter' is missing but a required field"),
        (doc! {"ops": [good.clone(), {"update": 0, "filter": {}}], "nsInfo": ns.clone()}, 40414, "BSON field 'bulkWrite.ops.updateMods' is missing but a required field"),
        (doc! {"ops": [good.clone(), {"update": 0, "filter": {}, "updateMods": 5}], "nsInfo": ns.clone()}, 9, "Update argument must be either an object or an array"),
        (doc! {"ops": [good.clone(), {"delete": 0, "filter": {}, "hint": 5}], "nsInfo": ns.clone()}, 9, "Hint must be a string or an object"),
        (doc! {"ops": [good.clone(), {"delete": 0, "filter": {}, "multi": 1}], "nsInfo": ns.clone()}, 14, "BSON field 'bulkWrite.ops.multi' is the wrong type 'int', expected type 'bool'"),
        (doc! {"ops": [good.clone()], "nsInfo": [{"ns": "nodot"}]}, 73, "Invalid namespace specified for bulkWrite: 'nodot'"),
        (doc! {"ops": [good.clone()], "nsInfo": [{"ns": "."}]}, 73, "Invalid namespace specified for bulkWrite: ''"),
        (doc! {"ops": [good.clone()], "nsInfo": [{"ns": "test.coll", "collectionUUID": bson::Uuid::new()}]}, 238, "tideway does not support the bulkWrite.nsInfo option 'collectionUUID'"),
    ];
    let mut failures = Vec::new();
    for (fields, code, message) in cases {
        let mut command = doc! {"bulkWrite": 1};
        command.extend(fields);
        let result = client.database("admin").run_command(command.clone()).await;
        let outcome = match result {
            Ok(reply) => format!("succeeded: {reply}"),
            Err(error) => match *error.kind {
                ErrorKind::Command(ref failure)
                    if failure.code == code && failure.message == message =>
                {
                    continue
                }
                ref other => format!("{other:?}"),
            },
        };
        failures.push(format!("{command} → {outcome}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ids(&client, "test", "coll").await.is_empty());
    server.stop().await;
}

/// `writeConcern: {w: 0}`: the counts, and no results (mongod skips the cursor).
#[tokio::test]
async fn unacknowledged_writes_report_counts_only() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = bulk(
        &client,
        doc! {
            "bulkWrite": 1,
            "ops": [{"insert": 0, "document": {"_id": 3}}, {"insert": 0, "document": {"_id": 3}}],
            "nsInfo": [{"ns": "test.coll"}],
            "writeConcern": {"w": 0},
        },
    )
    .await;
    assert!(first_batch(&reply).is_empty());
    assert_eq!(summary(&reply), [1, 1, 0, 0, 0, 0]);
    server.stop().await;
}

fn namespace(db: &str, coll: &str) -> Namespace {
    Namespace::new(db, coll)
}

/// `Client::bulk_write` (the driver's `MongoClient.bulkWrite`), summary and verbose results as the
/// CRUD spec's bulk-write.md defines them.
#[tokio::test]
async fn the_driver_client_bulk_write() {
    let server = TestServer::start().await;
    let client = server.client();
    pizzas(&client).await;
    let models: Vec<WriteModel> = vec![
        InsertOneModel::builder()
            .namespace(namespace("test", "pizzas"))
            .document(doc! {"_id": 3, "type": "beef", "size": "medium", "price": 6})
            .build()
            .into(),
        UpdateOneModel::builder()
            .namespace(namespace("test", "pizzas"))
            .filter(doc! {"type": "cheese"})
            .update(doc! {"$set": {"price": 8}})
            .build()
            .into(),
        UpdateManyModel::builder()
            .namespace(namespace("test", "pizzas"))
            .filter(doc! {"size": "small"})
            .update(doc! {"$inc": {"price": 1}})
            .build()
            .into(),
        UpdateOneModel::builder()
            .namespace(namespace("shop", "orders"))
            .filter(doc! {"_id": "o1"})
            .update(doc! {"$set": {"qty": 2}})
            .upsert(true)
            .build()
            .into(),
        DeleteOneModel::builder()
            .namespace(namespace("test", "pizzas"))
            .filter(doc! {"type": "pepperoni"})
            .build()
            .into(),
        DeleteManyModel::builder()
            .namespace(namespace("test", "pizzas"))
            .filter(doc! {"price": {"$gte": 100}})
            .build()
            .into(),
    ];
    let summary = client
        .bulk_write(models.clone())
        .await
        .expect("bulk write succeeds");
    assert_eq!(
        (
            summary.inserted_count,
            summary.matched_count,
            summary.modified_count,
            summary.upserted_count,
            summary.deleted_count
        ),
        (1, 2, 2, 1, 1)
    );

    pizzas(&client).await;
    client
        .database("shop")
        .collection::<Document>("orders")
        .drop()
        .await
        .unwrap();
    let verbose = client
        .bulk_write(models.clone())
        .verbose_results()
        .await
        .expect("bulk write succeeds");
    assert_eq!(verbose.insert_results[&0].inserted_id, Bson::Int32(3));
    assert_eq!(verbose.update_results[&1].matched_count, 1);
    assert_eq!(verbose.update_results[&1].modified_count, 1);
    assert_eq!(verbose.update_results[&2].matched_count, 1);
    assert_eq!(verbose.update_results[&2].modified_count, 1);
    assert_eq!(
        verbose.update_results[&3].upserted_id,
        Some(Bson::String("o1".into()))
    );
    assert_eq!(verbose.delete_results[&4].deleted_count, 1);
    assert_eq!(verbose.delete_results[&5].deleted_count, 0);
    assert_eq!(
        ids(&client, "test", "pizzas").await,
        [1, 2, 3].map(Bson::Int32)
    );

    // Ordered: the duplicate insert stops the batch; the error and the partial result come back.
    let error = client
        .bulk_write(models)
        .verbose_results()
        .await
        .expect_err("the duplicate `_id: 3` fails");
    let ErrorKind::BulkWrite(ref failure) = *error.kind else {
        panic!("expected a bulk write error, got {error:?}");
    };
    assert_eq!(failure.write_errors.len(), 1);
    assert_eq!(failure.write_errors[&0].code, 11000);
    assert!(failure.partial_result.is_none(), "{failure:?}");
    server.stop().await;
}
