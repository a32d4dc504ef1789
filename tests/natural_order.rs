//! Natural order through the official driver. Expected values come from MongoDB's documented
//! behaviour: a collection scan returns documents in the order they were inserted (record ids;
//! the manual's `$natural`: "the order in which the database refers to documents on disk", which
//! for WiredTiger collections is insertion order), an update keeps a document's place, a
//! document deleted and inserted again is a new record at the end; `sort({$natural: ±1})` and
//! `hint({$natural: ±1})` are collection scans in that direction; a clustered collection's
//! natural order is its cluster key's (`_id`) order. The `$natural` sort/hint errors are
//! mongod's (parsed_find_command.cpp `isValid`, jstests/core/natural.js).

mod common;

use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};
use common::{command_error, test_config, TestServer};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use tideway::Config;
use tideway_base::clock::ManualClock;

/// The `_id`s `find` returns for `filter` with `options` (`sort`, `hint`, ...), in order.
async fn find_ids(db: &Database, coll: &str, filter: Document, options: Document) -> Vec<Bson> {
    let mut command = doc! {"find": coll, "filter": filter, "batchSize": 2};
    command.extend(options);
    let reply = db.run_command(command).await.expect("find succeeds");
    let mut ids = batch_ids(reply.get_document("cursor").unwrap(), "firstBatch");
    let mut cursor_id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    while cursor_id != 0 {
        let reply = db
            .run_command(doc! {"getMore": cursor_id, "collection": coll, "batchSize": 2})
            .await
            .expect("getMore succeeds");
        let cursor = reply.get_document("cursor").unwrap();
        ids.extend(batch_ids(cursor, "nextBatch"));
        cursor_id = cursor.get_i64("id").unwrap();
    }
    ids
}

fn batch_ids(cursor: &Document, batch: &str) -> Vec<Bson> {
    cursor
        .get_array(batch)
        .unwrap()
        .iter()
        .map(|document| document.as_document().unwrap().get("_id").unwrap().clone())
        .collect()
}

/// The `_id`s of an unsorted read of the whole collection through the driver.
/// The `_id`s of `documents`, in their order.
fn ids_of(documents: Vec<Document>) -> Vec<Bson> {
    documents
        .into_iter()
        .map(|document| document.get("_id").unwrap().clone())
        .collect()
}

async fn unsorted(coll: &Collection<Document>) -> Vec<Bson> {
    let documents: Vec<Document> = coll
        .find(doc! {})
        .batch_size(3)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    ids_of(documents)
}

fn reversed(ids: &[Bson]) -> Vec<Bson> {
    ids.iter().rev().cloned().collect()
}

/// The ids [`insert_mixed`] inserts, in `_id` order: MongoDB's comparison order puts numbers
/// (by value) before strings (binary) before objects before ObjectIds before booleans.
fn mixed_in_id_order() -> Vec<Bson> {
    vec![
        Bson::Int64(-3),
        Bson::Double(2.5),
        Bson::Int32(10),
        Bson::String("Aaron".into()),
        Bson::String("Al".into()),
        Bson::String("Barak".into()),
        Bson::String("Bob".into()),
        Bson::Document(doc! {"x": 1}),
        Bson::ObjectId(ObjectId::parse_str("65a000000000000000000001").unwrap()),
        Bson::Boolean(true),
    ]
}

/// "Bob", "Barak", "Al" one by one, then numbers of three types, an ObjectId, a document, a
/// boolean and another string in one batch: none of it in `_id` order.
async fn insert_mixed(coll: &Collection<Document>) -> Vec<Bson> {
    let mut ids: Vec<Bson> = Vec::new();
    for name in ["Bob", "Barak", "Al"] {
        coll.insert_one(doc! {"_id": name, "v": 1}).await.unwrap();
        ids.push(Bson::String(name.into()));
    }
    let batch = vec![
        Bson::Int32(10),
        Bson::Double(2.5),
        Bson::Int64(-3),
        Bson::ObjectId(ObjectId::parse_str("65a000000000000000000001").unwrap()),
        Bson::Document(doc! {"x": 1}),
        Bson::Boolean(true),
        Bson::String("Aaron".into()),
    ];
    coll.insert_many(
        batch
            .iter()
            .map(|id| doc! {"_id": id.clone(), "v": 1})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    ids.extend(batch);
    ids
}

#[tokio::test]
async fn unsorted_reads_return_documents_in_insertion_order() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    let ids = insert_mixed(&coll).await;
    assert_eq!(unsorted(&coll).await, ids);
    // Paged through getMore, filtered, limited: still insertion order.
    assert_eq!(find_ids(&db, "people", doc! {}, doc! {}).await, ids);
    let strings: Vec<Bson> = ids
        .iter()
        .filter(|id| matches!(id, Bson::String(_)))
        .cloned()
        .collect();
    assert_eq!(
        // (`$expr` bounds no index: a collection scan, as in mongod.)
        find_ids(
            &db,
            "people",
            doc! {"$expr": {"$eq": [{"$type": "$_id"}, "string"]}},
            doc! {}
        )
        .await,
        strings
    );
    assert_eq!(
        find_ids(&db, "people", doc! {}, doc! {"limit": 4}).await,
        ids[..4].to_vec()
    );
    assert_eq!(
        find_ids(&db, "people", doc! {}, doc! {"skip": 8}).await,
        ids[8..].to_vec()
    );
    // A sort on `_id` is still `_id` order.
    let by_id = mixed_in_id_order();
    assert_eq!(
        find_ids(&db, "people", doc! {}, doc! {"sort": {"_id": 1}}).await,
        by_id
    );
    assert_eq!(
        find_ids(&db, "people", doc! {}, doc! {"sort": {"_id": -1}}).await,
        reversed(&by_id)
    );
    // `_id` lookups are unaffected.
    let found = coll.find_one(doc! {"_id": "Barak"}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": "Barak", "v": 1}));
    server.stop().await;
}

#[tokio::test]
async fn an_updated_document_keeps_its_place_and_a_reinserted_one_goes_last() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    let mut ids = insert_mixed(&coll).await;
    // Updates of every kind keep the place, including one that grows the document a lot.
    coll.update_one(doc! {"_id": "Barak"}, doc! {"$set": {"v": 2}})
        .await
        .unwrap();
    coll.update_one(
        doc! {"_id": "Bob"},
        doc! {"$set": {"pad": "x".repeat(200_000)}},
    )
    .await
    .unwrap();
    coll.replace_one(doc! {"_id": 10}, doc! {"replaced": true})
        .await
        .unwrap();
    coll.find_one_and_update(doc! {"_id": "Al"}, doc! {"$inc": {"v": 1}})
        .await
        .unwrap();
    coll.update_many(doc! {}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    assert_eq!(unsorted(&coll).await, ids);
    // Deleted, then inserted again: a new document at the end.
    coll.delete_one(doc! {"_id": "Barak"}).await.unwrap();
    coll.insert_one(doc! {"_id": "Barak", "v": 3})
        .await
        .unwrap();
    let barak = ids.remove(1);
    ids.push(barak);
    assert_eq!(unsorted(&coll).await, ids);
    // An upsert inserts at the end too; updating it later keeps it there.
    coll.update_one(doc! {"_id": "Zoe"}, doc! {"$set": {"v": 1}})
        .upsert(true)
        .await
        .unwrap();
    ids.push(Bson::String("Zoe".into()));
    coll.update_one(doc! {"_id": "Al"}, doc! {"$set": {"v": 9}})
        .await
        .unwrap();
    assert_eq!(unsorted(&coll).await, ids);
    // A whole-collection delete and refill starts over in the new insertion order.
    coll.delete_many(doc! {}).await.unwrap();
    coll.insert_many(vec![doc! {"_id": 2}, doc! {"_id": 1}])
        .await
        .unwrap();
    assert_eq!(unsorted(&coll).await, vec![Bson::Int32(2), Bson::Int32(1)]);
    server.stop().await;
}

#[tokio::test]
async fn natural_sorts_and_hints_follow_insertion_order() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    let ids = insert_mixed(&coll).await;
    db.run_command(doc! {"createIndexes": "people", "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
        .await
        .unwrap();
    for (options, expected) in [
        (doc! {"sort": {"$natural": 1}}, ids.clone()),
        (doc! {"sort": {"$natural": -1}}, reversed(&ids)),
        (doc! {"hint": {"$natural": 1}}, ids.clone()),
        (doc! {"hint": {"$natural": -1}}, reversed(&ids)),
        // Any number: its sign is the direction.
        (doc! {"sort": {"$natural": -1.0}}, reversed(&ids)),
        (doc! {"sort": {"$natural": 1_i64}}, ids.clone()),
        // A $natural hint and sort of the same direction.
        (
            doc! {"sort": {"$natural": -1}, "hint": {"$natural": -1}},
            reversed(&ids),
        ),
        // A filter the `v_1` index could serve is still read by a collection scan.
        (
            doc! {"filter": {"v": 1}, "sort": {"$natural": -1}},
            reversed(&ids),
        ),
    ] {
        let mut options = options;
        let filter = match options.remove("filter") {
            Some(Bson::Document(filter)) => filter,
            _ => doc! {},
        };
        assert_eq!(
            find_ids(&db, "people", filter, options.clone()).await,
            expected,
            "{options}"
        );
    }
    // A `$natural` hint with another sort is sorted (jstests/core/natural.js).
    let small = db.collection::<Document>("small");
    small
        .insert_many(vec![
            doc! {"_id": 1, "a": 3},
            doc! {"_id": 2, "a": 2},
            doc! {"_id": 3, "a": 1},
        ])
        .await
        .unwrap();
    assert_eq!(
        find_ids(
            &db,
            "small",
            doc! {},
            doc! {"hint": {"$natural": 1}, "sort": {"a": 1}}
        )
        .await,
        vec![Bson::Int32(3), Bson::Int32(2), Bson::Int32(1)]
    );
    // The explained plan is a collection scan in that direction.
    let explained = db
        .run_command(doc! {"explain": {"find": "people", "sort": {"$natural": -1}}})
        .await
        .unwrap();
    let winning = explained
        .get_document("queryPlanner")
        .unwrap()
        .get_document("winningPlan")
        .unwrap();
    assert_eq!(winning.get_str("stage"), Ok("COLLSCAN"), "{winning}");
    assert_eq!(winning.get_str("direction"), Ok("backward"), "{winning}");
    // mongod's refusals (all BadValue).
    for (options, message) in [
        (
            doc! {"sort": {"$natural": 1}, "hint": {"v": 1}},
            "index hint not allowed with $natural sort order",
        ),
        (
            doc! {"sort": {"$natural": 1}, "hint": "v_1"},
            "index hint not allowed with $natural sort order",
        ),
        (
            doc! {"sort": {"$natural": 1}, "hint": {"$natural": -1}},
            "$natural hint must be in the same direction as $natural sort order",
        ),
        (
            doc! {"sort": {"v": 1, "$natural": 1}},
            "Cannot include '$natural' in compound sort: { v: 1, $natural: 1 }",
        ),
        (
            doc! {"sort": {"$natural": 1, "v": 1}},
            "Cannot include '$natural' in compound sort: { $natural: 1, v: 1 }",
        ),
        (
            doc! {"hint": {"v": 1, "$natural": 1}},
            "Cannot include '$natural' in compound hint: { v: 1, $natural: 1 }",
        ),
    ] {
        let mut command = doc! {"find": "people"};
        command.extend(options.clone());
        let (code, code_name, errmsg) = command_error(db.run_command(command).await);
        assert_eq!((code, code_name.as_str()), (2, "BadValue"), "{options}");
        assert_eq!(errmsg, message, "{options}");
    }
    server.stop().await;
}

#[tokio::test]
async fn aggregate_count_and_map_reads_without_a_sort_follow_insertion_order() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    let ids = insert_mixed(&coll).await;
    for pipeline in [
        vec![],
        vec![doc! {"$match": {}}],
        vec![doc! {"$match": {"v": 1}}, doc! {"$project": {"v": 1}}],
        vec![doc! {"$addFields": {"w": 1}}],
    ] {
        let documents: Vec<Document> = coll
            .aggregate(pipeline.clone())
            .batch_size(2)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let found: Vec<Bson> = ids_of(documents);
        assert_eq!(found, ids, "{pipeline:?}");
    }
    // `$natural` hints reach the aggregation's read too.
    let documents: Vec<Document> = coll
        .aggregate(vec![doc! {"$match": {}}])
        .hint(mongodb::options::Hint::Keys(doc! {"$natural": -1}))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let found: Vec<Bson> = ids_of(documents);
    assert_eq!(found, reversed(&ids));
    // `$group` with `$push` and `$first` see documents in natural order.
    let grouped: Vec<Document> = coll
        .aggregate(vec![
            doc! {"$group": {"_id": null, "all": {"$push": "$_id"}, "first": {"$first": "$_id"}}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(grouped[0].get_array("all").unwrap(), &ids);
    assert_eq!(grouped[0].get("first"), Some(&ids[0]));
    // findOne without a filter: the first inserted.
    assert_eq!(
        coll.find_one(doc! {})
            .await
            .unwrap()
            .and_then(|d| d.get("_id").cloned()),
        Some(ids[0].clone())
    );
    // A single delete without a sort takes the first match in natural order.
    coll.delete_one(doc! {"v": 1}).await.unwrap();
    assert_eq!(unsorted(&coll).await, ids[1..].to_vec());
    server.stop().await;
}

/// `mapReduce` reads its input as `find` does: a `{$natural: ±1}` sort is the read's direction, so
/// with `limit: 1` the first or the last inserted document is mapped.
#[tokio::test]
async fn map_reduce_with_a_natural_sort_maps_in_insertion_order() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    let ids = insert_mixed(&coll).await;
    for (direction, expected) in [(1, &ids[0]), (-1, &ids[ids.len() - 1])] {
        let reply = db
            .run_command(doc! {
                "mapReduce": "people",
                "map": "function() { emit(1, this._id); }",
                "reduce": "function(key, values) { return values[0]; }",
                "sort": {"$natural": direction},
                "limit": 1,
                "out": {"inline": 1},
            })
            .await
            .unwrap();
        let results = reply.get_array("results").unwrap();
        assert_eq!(results.len(), 1, "{reply}");
        let result = results[0].as_document().unwrap();
        assert_eq!(result.get("value"), Some(expected), "{direction}: {reply}");
    }
    server.stop().await;
}

#[tokio::test]
async fn insertion_order_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = Config {
        storage: tideway::config::StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        ..test_config()
    };
    let server = TestServer::start_with_clock(config.clone(), clock.clone()).await;
    let coll = server
        .client()
        .database("natural")
        .collection::<Document>("people");
    let mut ids = insert_mixed(&coll).await;
    coll.update_one(
        doc! {"_id": "Bob"},
        doc! {"$set": {"pad": "y".repeat(50_000)}},
    )
    .await
    .unwrap();
    server.stop().await;

    let server = TestServer::start_with_clock(config.clone(), clock.clone()).await;
    let db = server.client().database("natural");
    let coll = db.collection::<Document>("people");
    assert_eq!(unsorted(&coll).await, ids);
    // New documents go after the ones stored before the restart.
    coll.insert_one(doc! {"_id": "Abe"}).await.unwrap();
    coll.delete_one(doc! {"_id": 2.5}).await.unwrap();
    coll.insert_one(doc! {"_id": 2.5}).await.unwrap();
    ids.push(Bson::String("Abe".into()));
    ids.retain(|id| *id != Bson::Double(2.5));
    ids.push(Bson::Double(2.5));
    assert_eq!(unsorted(&coll).await, ids);
    assert_eq!(
        find_ids(&db, "people", doc! {}, doc! {"sort": {"$natural": -1}}).await,
        reversed(&ids)
    );
    server.stop().await;

    let server = TestServer::start_with_clock(config, clock).await;
    let coll = server
        .client()
        .database("natural")
        .collection::<Document>("people");
    assert_eq!(unsorted(&coll).await, ids);
    server.stop().await;
}

#[tokio::test]
async fn a_clustered_collection_reads_in_id_order() {
    let server = TestServer::start().await;
    let db = server.client().database("natural");
    db.run_command(doc! {
        "create": "clustered",
        "clusteredIndex": {"key": {"_id": 1}, "unique": true},
    })
    .await
    .unwrap();
    let coll = db.collection::<Document>("clustered");
    let ids = insert_mixed(&coll).await;
    let by_id = mixed_in_id_order();
    assert_ne!(by_id, ids);
    assert_eq!(unsorted(&coll).await, by_id);
    assert_eq!(
        find_ids(&db, "clustered", doc! {}, doc! {"sort": {"$natural": -1}}).await,
        reversed(&by_id)
    );
    assert_eq!(
        find_ids(&db, "clustered", doc! {}, doc! {"hint": {"$natural": 1}}).await,
        by_id
    );
    // Deleted and inserted again: back at its `_id`.
    coll.delete_one(doc! {"_id": "Barak"}).await.unwrap();
    coll.insert_one(doc! {"_id": "Barak"}).await.unwrap();
    assert_eq!(unsorted(&coll).await, by_id);
    // Its collection scan gives `_id` order: no blocking sort is needed for it.
    let explained = db
        .run_command(
            doc! {"explain": {"find": "clustered", "sort": {"_id": -1}, "hint": {"$natural": -1}}},
        )
        .await
        .unwrap();
    let winning = explained
        .get_document("queryPlanner")
        .unwrap()
        .get_document("winningPlan")
        .unwrap();
    assert_eq!(winning.get_str("stage"), Ok("COLLSCAN"), "{winning}");
    server.stop().await;
}

#[tokio::test]
async fn a_transaction_reads_its_own_writes_in_natural_order_and_commits_it() {
    let config = Config {
        repl_set: Some("rs0".to_owned()),
        ..test_config()
    };
    let server = TestServer::start_with(config).await;
    let client = server.client();
    let coll = client.database("natural").collection::<Document>("people");
    coll.insert_many(vec![
        doc! {"_id": "Bob"},
        doc! {"_id": "Barak"},
        doc! {"_id": "Al"},
    ])
    .await
    .unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    // Inserted in the transaction: after every stored document, in statement order.
    coll.insert_one(doc! {"_id": "Zed"})
        .session(&mut session)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": "Abe"})
        .session(&mut session)
        .await
        .unwrap();
    // Updated: keeps its place. Deleted and inserted again: goes to the end.
    coll.update_one(doc! {"_id": "Barak"}, doc! {"$set": {"v": 1}})
        .session(&mut session)
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": "Bob"})
        .session(&mut session)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": "Bob", "again": true})
        .session(&mut session)
        .await
        .unwrap();
    let expected: Vec<Bson> = ["Barak", "Al", "Zed", "Abe", "Bob"]
        .into_iter()
        .map(|id| Bson::String(id.into()))
        .collect();
    for (sort, expected) in [
        (None, expected.clone()),
        (Some(doc! {"$natural": -1}), reversed(&expected)),
    ] {
        let mut find = coll.find(doc! {}).batch_size(2);
        if let Some(sort) = sort {
            find = find.sort(sort);
        }
        let mut cursor = find.session(&mut session).await.unwrap();
        let documents: Vec<Document> = cursor.stream(&mut session).try_collect().await.unwrap();
        let found: Vec<Bson> = ids_of(documents);
        assert_eq!(found, expected, "inside the transaction");
    }
    // Outside it, nothing yet.
    let outside: Vec<Bson> = ["Bob", "Barak", "Al"]
        .into_iter()
        .map(|id| Bson::String(id.into()))
        .collect();
    assert_eq!(unsorted(&coll).await, outside);
    session.commit_transaction().await.unwrap();
    assert_eq!(unsorted(&coll).await, expected, "committed");
    server.stop().await;
}
