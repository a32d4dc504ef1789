//! Views through the official driver: creation, reads through a view (find, aggregate, count,
//! distinct, explain, getMore), views on views, `collMod` and `drop` of a view, listings, mongod's
//! refusals, and TTL (an expired document is never seen through a view). Expected values come from
//! the manual's "Create and Query a View" page and mongod's jstests (core/views/*.js) and source
//! (view_catalog.cpp, view_graph.cpp, query_request_conversion.cpp).

mod common;

use std::sync::Arc;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use futures::TryStreamExt;
use mongodb::Database;
use tideway::clock::{Clock, ManualClock};

/// The manual's `students` collection ("Create and Query a View").
fn students() -> Vec<Document> {
    vec![
        doc! {"sID": 22001, "name": "Alex", "year": 1, "score": 4.0},
        doc! {"sID": 21001, "name": "bernie", "year": 2, "score": 3.7},
        doc! {"sID": 20010, "name": "Chris", "year": 3, "score": 2.5},
        doc! {"sID": 22021, "name": "Drew", "year": 1, "score": 3.2},
        doc! {"sID": 17301, "name": "harley", "year": 6, "score": 3.1},
        doc! {"sID": 21022, "name": "Farmer", "year": 1, "score": 2.2},
        doc! {"sID": 20020, "name": "george", "year": 3, "score": 2.8},
        doc! {"sID": 18020, "name": "Harley", "year": 5, "score": 2.8},
    ]
}

async fn with_students(server: &TestServer) -> Database {
    let db = server.client().database("views");
    db.collection::<Document>("students")
        .insert_many(students())
        .await
        .unwrap();
    db.run_command(
        doc! {"create": "firstYears", "viewOn": "students", "pipeline": [{"$match": {"year": 1}}]},
    )
    .await
    .unwrap();
    db
}

async fn run(db: &Database, command: Document) -> Document {
    db.run_command(command.clone())
        .await
        .unwrap_or_else(|error| panic!("{command}: {error}"))
}

#[tokio::test]
async fn the_manuals_first_years_view() {
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    // db.firstYears.find({}, {_id: 0}): the manual's output.
    let found: Vec<Document> = db
        .collection::<Document>("firstYears")
        .find(doc! {})
        .projection(doc! {"_id": 0})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        found,
        vec![
            doc! {"sID": 22001, "name": "Alex", "year": 1, "score": 4.0},
            doc! {"sID": 22021, "name": "Drew", "year": 1, "score": 3.2},
            doc! {"sID": 21022, "name": "Farmer", "year": 1, "score": 2.2},
        ]
    );
    // filter, sort, skip, limit and projection become stages after the view's.
    let reply = run(
        &db,
        doc! {"find": "firstYears", "filter": {"score": {"$gt": 2.5}}, "sort": {"score": 1},
        "projection": {"_id": 0, "name": 1}, "skip": 1, "limit": 5},
    )
    .await;
    assert_eq!(first_batch(&reply), vec![doc! {"name": "Alex"}]);
    assert_eq!(
        reply.get_document("cursor").unwrap().get_str("ns").unwrap(),
        "views.firstYears"
    );
    let counted = run(
        &db,
        doc! {"count": "firstYears", "query": {"score": {"$lt": 4}}},
    )
    .await;
    assert_eq!(counted.get_i32("n").unwrap(), 2);
    let counted = run(&db, doc! {"count": "firstYears", "skip": 1, "limit": -1}).await;
    assert_eq!(counted.get_i32("n").unwrap(), 1);
    let mut names = run(&db, doc! {"distinct": "firstYears", "key": "name"})
        .await
        .get_array("values")
        .unwrap()
        .clone();
    names.sort_by_key(|name| name.as_str().unwrap_or("").to_owned());
    assert_eq!(
        names,
        vec![Bson::from("Alex"), Bson::from("Drew"), Bson::from("Farmer")]
    );
    // aggregate: the view's pipeline runs first.
    let reply = run(
        &db,
        doc! {"aggregate": "firstYears", "pipeline": [{"$group": {"_id": "$year", "n": {"$sum": 1}}}], "cursor": {}},
    )
    .await;
    assert_eq!(first_batch(&reply), vec![doc! {"_id": 1, "n": 3}]);
}

#[tokio::test]
async fn views_are_listed_as_mongod_lists_them() {
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    let reply = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "firstYears"}},
    )
    .await;
    assert_eq!(
        first_batch(&reply),
        vec![doc! {
            "name": "firstYears",
            "type": "view",
            "options": {"viewOn": "students", "pipeline": [{"$match": {"year": 1}}]},
            "info": {"readOnly": true},
        }]
    );
    // mongod keeps definitions in system.views, listed as a collection.
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["firstYears", "students", "system.views"]);
    let reply = run(
        &db,
        doc! {"listCollections": 1, "nameOnly": true, "filter": {"type": "view"}},
    )
    .await;
    assert_eq!(
        first_batch(&reply),
        vec![doc! {"name": "firstYears", "type": "view"}]
    );
    let stats = run(&db, doc! {"dbStats": 1}).await;
    assert_eq!(stats.get_i64("views").unwrap(), 1);
}

#[tokio::test]
async fn get_more_through_a_view_keeps_the_view_namespace() {
    // jstests/core/views/views_all_commands.js, getMore.
    let server = TestServer::start().await;
    let db = server.client().database("test");
    db.collection::<Document>("collection")
        .insert_many(vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 3}])
        .await
        .unwrap();
    run(&db, doc! {"create": "view", "viewOn": "collection"}).await;
    for command in [
        doc! {"find": "view", "filter": {"_id": {"$gt": 0}}, "batchSize": 2},
        doc! {"aggregate": "view", "pipeline": [{"$match": {"_id": {"$gt": 0}}}], "cursor": {"batchSize": 2}},
    ] {
        let reply = run(&db, command).await;
        let cursor = reply.get_document("cursor").unwrap();
        assert_eq!(cursor.get_str("ns").unwrap(), "test.view");
        assert_eq!(first_batch(&reply), vec![doc! {"_id": 1}, doc! {"_id": 2}]);
        let more = run(
            &db,
            doc! {"getMore": cursor.get_i64("id").unwrap(), "collection": "view"},
        )
        .await;
        let next = more.get_document("cursor").unwrap();
        assert_eq!(next.get_str("ns").unwrap(), "test.view");
        assert_eq!(
            next.get_array("nextBatch").unwrap(),
            &vec![Bson::Document(doc! {"_id": 3})]
        );
    }
    // explain of a count through a view works (views_all_commands.js).
    run(&db, doc! {"explain": {"count": "view"}}).await;
}

#[tokio::test]
async fn views_on_views_and_coll_mod_and_drop() {
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    run(
        &db,
        doc! {"create": "goodFirstYears", "viewOn": "firstYears", "pipeline": [{"$match": {"score": {"$gte": 3}}}, {"$project": {"_id": 0, "name": 1}}]},
    )
    .await;
    let reply = run(&db, doc! {"find": "goodFirstYears", "sort": {"name": 1}}).await;
    assert_eq!(
        first_batch(&reply),
        vec![doc! {"name": "Alex"}, doc! {"name": "Drew"}]
    );
    // collMod redefines the view underneath: goodFirstYears now reads third years.
    run(
        &db,
        doc! {"collMod": "firstYears", "viewOn": "students", "pipeline": [{"$match": {"year": 3}}]},
    )
    .await;
    let reply = run(&db, doc! {"find": "goodFirstYears"}).await;
    assert_eq!(first_batch(&reply), Vec::<Document>::new());
    let reply = run(&db, doc! {"count": "firstYears"}).await;
    assert_eq!(reply.get_i32("n").unwrap(), 2);
    // drop of a view answers its namespace and leaves the source alone.
    let reply = run(&db, doc! {"drop": "goodFirstYears"}).await;
    assert_eq!(reply.get_str("ns").unwrap(), "views.goodFirstYears");
    let reply = run(&db, doc! {"count": "students"}).await;
    assert_eq!(reply.get_i32("n").unwrap(), 8);
    let names = db.list_collection_names().await.unwrap();
    assert!(!names.contains(&"goodFirstYears".to_string()));
}

#[tokio::test]
async fn writes_and_collection_commands_on_a_view_are_refused() {
    // views_all_commands.js: expectFailure with CommandNotSupportedOnView.
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    for command in [
        doc! {"insert": "firstYears", "documents": [{"x": 1}]},
        doc! {"update": "firstYears", "updates": [{"q": {}, "u": {"$set": {"x": 1}}}]},
        doc! {"delete": "firstYears", "deletes": [{"q": {"x": 1}, "limit": 1}]},
        doc! {"findAndModify": "firstYears", "query": {"a": 1}, "update": {"$set": {"a": 2}}},
        doc! {"createIndexes": "firstYears", "indexes": [{"key": {"x": 1}, "name": "x_1"}]},
        doc! {"dropIndexes": "firstYears", "index": "*"},
        doc! {"listIndexes": "firstYears"},
    ] {
        let (code, name, message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(
            (code, name.as_str()),
            (166, "CommandNotSupportedOnView"),
            "{command}"
        );
        assert_eq!(
            message,
            "Namespace views.firstYears is a view, not a collection"
        );
    }
    // The view is still a view: nothing was created in its place.
    let reply = run(&db, doc! {"count": "firstYears"}).await;
    assert_eq!(reply.get_i32("n").unwrap(), 3);
}

#[tokio::test]
async fn invalid_definitions_are_refused_with_mongods_errors() {
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    let error = |command: Document| {
        let db = db.clone();
        async move { command_error(db.run_command(command).await) }
    };
    // A definition may not write (view_catalog.cpp validatePipeline).
    let (code, _, message) =
        error(doc! {"create": "v", "viewOn": "students", "pipeline": [{"$out": "elsewhere"}]})
            .await;
    assert_eq!(code, 167);
    assert!(message.contains("The aggregation stage $out in location 0 of the pipeline cannot be used in the view definition of views.v because it writes to disk"), "{message}");
    let (code, _, _) = error(doc! {"create": "v", "viewOn": "students", "pipeline": [{"$match": {}}, {"$merge": {"into": "x"}}]}).await;
    assert_eq!(code, 167);
    // A name that is taken.
    let (code, _, _) = error(doc! {"create": "students", "viewOn": "firstYears"}).await;
    assert_eq!(code, 48);
    let (code, _, _) = error(doc! {"create": "firstYears", "viewOn": "students"}).await;
    assert_eq!(code, 48);
    // A cycle (view_graph.cpp: GraphContainsCycle).
    run(&db, doc! {"create": "a", "viewOn": "firstYears"}).await;
    let (code, name, _) =
        error(doc! {"collMod": "firstYears", "viewOn": "a", "pipeline": []}).await;
    assert_eq!((code, name.as_str()), (93, "GraphContainsCycle"));
    // collMod of a view with a collection option, and of a collection with a view option.
    let (code, _, message) =
        error(doc! {"collMod": "firstYears", "index": {"name": "x_1", "hidden": true}}).await;
    assert_eq!(
        (code, message.as_str()),
        (72, "option not supported on a view: index")
    );
    let (code, _, message) =
        error(doc! {"collMod": "students", "viewOn": "a", "pipeline": []}).await;
    assert_eq!(
        (code, message.as_str()),
        (72, "option only supported on a view: viewOn")
    );
    // A read may not override the view's collation.
    let (code, _, _) = error(doc! {"find": "firstYears", "collation": {"locale": "fr"}}).await;
    assert_eq!(code, 167);
    // find options an aggregation has no equivalent for (query_request_conversion.cpp).
    let (code, _, message) = error(doc! {"find": "firstYears", "noCursorTimeout": true}).await;
    assert_eq!(
        (code, message.as_str()),
        (168, "Option noCursorTimeout not supported in aggregation.")
    );
    let (code, _, message) = error(doc! {"find": "firstYears", "singleBatch": true}).await;
    assert_eq!(
        (code, message.as_str()),
        (168, "Option singleBatch not supported in aggregation.")
    );
}

#[tokio::test]
async fn views_deeper_than_twenty_are_refused() {
    // ViewGraph::kMaxViewDepth = 20: ViewDepthLimitExceeded (279).
    let server = TestServer::start().await;
    let db = server.client().database("deep");
    db.collection::<Document>("base")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();
    let mut on = "base".to_string();
    for level in 1..=20 {
        let name = format!("v{level}");
        run(
            &db,
            doc! {"create": name.as_str(), "viewOn": on.as_str(), "pipeline": []},
        )
        .await;
        on = name;
    }
    let reply = run(&db, doc! {"count": "v20"}).await;
    assert_eq!(reply.get_i32("n").unwrap(), 1);
    let (code, name, message) = command_error(
        db.run_command(doc! {"create": "v21", "viewOn": "v20", "pipeline": []})
            .await,
    );
    assert_eq!((code, name.as_str()), (279, "ViewDepthLimitExceeded"));
    assert_eq!(
        message,
        "View depth too deep or view cycle detected; maximum depth is 20"
    );
}

#[tokio::test]
async fn a_view_with_a_lookup_reads_the_other_collection() {
    let server = TestServer::start().await;
    let db = server.client().database("joined");
    db.collection::<Document>("orders")
        .insert_many(vec![
            doc! {"_id": 1, "item": "a"},
            doc! {"_id": 2, "item": "b"},
        ])
        .await
        .unwrap();
    db.collection::<Document>("items")
        .insert_many(vec![
            doc! {"_id": "a", "price": 5},
            doc! {"_id": "b", "price": 7},
        ])
        .await
        .unwrap();
    run(
        &db,
        doc! {"create": "priced", "viewOn": "orders", "pipeline": [
            {"$lookup": {"from": "items", "localField": "item", "foreignField": "_id", "as": "it"}},
            {"$project": {"price": {"$first": "$it.price"}}},
        ]},
    )
    .await;
    let reply = run(
        &db,
        doc! {"find": "priced", "filter": {"price": {"$gt": 6}}},
    )
    .await;
    assert_eq!(first_batch(&reply), vec![doc! {"_id": 2, "price": 7}]);
}

#[tokio::test]
async fn an_expired_document_is_never_seen_through_a_view() {
    const T0: i64 = 1_700_000_000_000;
    let clock = Arc::new(ManualClock::new(T0));
    let config = tideway::Config {
        set_parameter: vec!["ttlMonitorEnabled=false".into()],
        ..common::test_config()
    };
    let server = TestServer::start_with_clock(config, clock.clone()).await;
    let db = server.client().database("ttlviews");
    // Documents expire 10 s after their last write (Cosmos default TTL).
    run(&db, doc! {"createIndexes": "c", "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 10}]}).await;
    db.collection::<Document>("c")
        .insert_many(vec![
            doc! {"_id": "doomed", "k": 1},
            doc! {"_id": "alive", "k": 2, "ttl": -1},
        ])
        .await
        .unwrap();
    run(
        &db,
        doc! {"create": "v", "viewOn": "c", "pipeline": [{"$project": {"k": 1}}]},
    )
    .await;
    let ids = |reply: Document| -> Vec<String> {
        first_batch(&reply)
            .iter()
            .map(|d| d.get_str("_id").unwrap().to_owned())
            .collect()
    };
    // One millisecond before the expiry instant: visible through every read.
    clock.advance_ms(10_000 - 1);
    assert_eq!(
        ids(run(&db, doc! {"find": "v", "sort": {"_id": 1}}).await),
        vec!["alive", "doomed"]
    );
    assert_eq!(run(&db, doc! {"count": "v"}).await.get_i32("n").unwrap(), 2);
    // A cursor opened before the instant, with a document left for getMore (no blocking stage:
    // each batch is read, and judged, when it is asked for).
    let open = run(&db, doc! {"find": "v", "batchSize": 1}).await;
    assert_eq!(ids(open.clone()), vec!["alive"]);
    // At the instant: gone from find, count, distinct, aggregate and the open cursor.
    clock.advance_ms(1);
    assert_eq!(clock.now_ms(), T0 + 10_000);
    assert_eq!(ids(run(&db, doc! {"find": "v"}).await), vec!["alive"]);
    assert_eq!(run(&db, doc! {"count": "v"}).await.get_i32("n").unwrap(), 1);
    assert_eq!(
        run(&db, doc! {"distinct": "v", "key": "k"})
            .await
            .get_array("values")
            .unwrap(),
        &vec![Bson::Int32(2)]
    );
    let reply = run(&db, doc! {"aggregate": "v", "pipeline": [{"$group": {"_id": null, "n": {"$sum": 1}}}], "cursor": {}}).await;
    assert_eq!(first_batch(&reply), vec![doc! {"_id": Bson::Null, "n": 1}]);
    let cursor_id = open.get_document("cursor").unwrap().get_i64("id").unwrap();
    let more = run(&db, doc! {"getMore": cursor_id, "collection": "v"}).await;
    let next = more
        .get_document("cursor")
        .unwrap()
        .get_array("nextBatch")
        .unwrap();
    assert_eq!(next, &Vec::<Bson>::new());
}
