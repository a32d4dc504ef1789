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
use tideway_base::clock::{Clock, ManualClock};

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
    assert_eq!((code, name.as_str()), (5, "GraphContainsCycle"));
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
        // "doomed" last in natural order: the open cursor below leaves it for its getMore.
        .insert_many(vec![
            doc! {"_id": "alive", "k": 2, "ttl": -1},
            doc! {"_id": "doomed", "k": 1},
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

/// views_aggregation.js's cities and views.
async fn with_cities(server: &TestServer) -> Database {
    let db = server.client().database("views_aggregation");
    db.collection::<Document>("coll")
        .insert_many(vec![
            doc! {"_id": "New York", "state": "NY", "pop": 7},
            doc! {"_id": "Newark", "state": "NJ", "pop": 3},
            doc! {"_id": "Palo Alto", "state": "CA", "pop": 10},
            doc! {"_id": "San Francisco", "state": "CA", "pop": 4},
            doc! {"_id": "Trenton", "state": "NJ", "pop": 5},
        ])
        .await
        .unwrap();
    for command in [
        doc! {"create": "emptyPipelineView", "viewOn": "coll"},
        doc! {"create": "identityView", "viewOn": "coll", "pipeline": [{"$match": {}}]},
        doc! {"create": "noIdView", "viewOn": "coll", "pipeline": [{"$project": {"_id": 0, "state": 1, "pop": 1}}]},
        doc! {"create": "popSortedView", "viewOn": "identityView",
        "pipeline": [{"$match": {"pop": {"$gte": 0}}}, {"$sort": {"pop": 1}}]},
        doc! {"create": "viewWithLookupInside", "viewOn": "coll", "pipeline": [
            {"$lookup": {"from": "identityView", "localField": "_id", "foreignField": "_id", "as": "matched"}},
            {"$unwind": "$matched"},
            {"$project": {"_id": 1, "matchedId": "$matched._id"}},
        ]},
    ] {
        run(&db, command).await;
    }
    db
}

async fn aggregate(db: &Database, coll: &str, pipeline: Vec<Document>) -> Vec<Document> {
    db.collection::<Document>(coll)
        .aggregate(pipeline)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn lookup_and_graph_lookup_read_views() {
    // views_aggregation.js, testLookupAndGraphLookup.
    let server = TestServer::start().await;
    let db = with_cities(&server).await;
    let new_york = vec![doc! {"_id": "New York", "matchedId": "New York"}];
    let found = aggregate(&db, "coll", vec![
        doc! {"$match": {"_id": "New York"}},
        doc! {"$lookup": {"from": "identityView", "localField": "_id", "foreignField": "_id", "as": "matched"}},
        doc! {"$unwind": "$matched"},
        doc! {"$project": {"_id": 1, "matchedId": "$matched._id"}},
    ])
    .await;
    assert_eq!(found, new_york);
    let found = aggregate(
        &db,
        "coll",
        vec![
            doc! {"$match": {"_id": "New York"}},
            doc! {"$graphLookup": {"from": "identityView", "startWith": "$_id",
            "connectFromField": "_id", "connectToField": "_id", "as": "matched"}},
            doc! {"$unwind": "$matched"},
            doc! {"$project": {"_id": 1, "matchedId": "$matched._id"}},
        ],
    )
    .await;
    assert_eq!(found, new_york);
    // A view whose pipeline itself looks up a view.
    let both = vec![doc! {"_id": "New York", "matchedId1": "New York", "matchedId2": "New York"}];
    let found = aggregate(&db, "coll", vec![
        doc! {"$match": {"_id": "New York"}},
        doc! {"$lookup": {"from": "viewWithLookupInside", "localField": "_id", "foreignField": "matchedId", "as": "matched"}},
        doc! {"$unwind": "$matched"},
        doc! {"$project": {"_id": 1, "matchedId1": "$matched._id", "matchedId2": "$matched.matchedId"}},
    ])
    .await;
    assert_eq!(found, both);
    let graph_pipeline = vec![
        doc! {"$match": {"_id": "New York"}},
        doc! {"$graphLookup": {"from": "viewWithLookupInside", "startWith": "$_id",
        "connectFromField": "_id", "connectToField": "matchedId", "as": "matched"}},
        doc! {"$unwind": "$matched"},
        doc! {"$project": {"_id": 1, "matchedId1": "$matched._id", "matchedId2": "$matched.matchedId"}},
    ];
    assert_eq!(aggregate(&db, "coll", graph_pipeline.clone()).await, both);
    // The pipeline form, with a view on a view (sorted by its pipeline) looked up inside.
    let found = aggregate(
        &db,
        "coll",
        vec![
            doc! {"$match": {"_id": "Trenton"}},
            doc! {"$project": {"state": 1}},
            doc! {"$lookup": {"from": "identityView", "as": "lookup1", "pipeline": [
                {"$match": {"_id": "Trenton"}},
                {"$project": {"state": 1}},
                {"$lookup": {"from": "popSortedView", "as": "lookup2", "pipeline": []}},
            ]}},
        ],
    )
    .await;
    assert_eq!(
        found,
        vec![doc! {"_id": "Trenton", "state": "NJ", "lookup1": [{
        "_id": "Trenton", "state": "NJ", "lookup2": [
            {"_id": "Newark", "state": "NJ", "pop": 3},
            {"_id": "San Francisco", "state": "CA", "pop": 4},
            {"_id": "Trenton", "state": "NJ", "pop": 5},
            {"_id": "New York", "state": "NY", "pop": 7},
            {"_id": "Palo Alto", "state": "CA", "pop": 10},
        ]}]}]
    );
    // In a $facet branch.
    let found = aggregate(
        &db,
        "coll",
        vec![doc! {"$facet": {"nested": graph_pipeline
        .into_iter()
        .map(Bson::Document)
        .collect::<Vec<_>>()}}],
    )
    .await;
    assert_eq!(
        found,
        vec![doc! {"nested": both.into_iter().map(Bson::Document).collect::<Vec<_>>()}]
    );
}

#[tokio::test]
async fn union_with_reads_views() {
    // views_aggregation.js, testUnionReadFromView and testUnionInViewDefinition.
    let server = TestServer::start().await;
    let db = with_cities(&server).await;
    let count = |pipeline: Vec<Document>| {
        let db = db.clone();
        async move { aggregate(&db, "coll", pipeline).await.len() }
    };
    assert_eq!(count(vec![]).await, 5);
    assert_eq!(
        count(vec![doc! {"$unionWith": "emptyPipelineView"}]).await,
        10
    );
    assert_eq!(count(vec![doc! {"$unionWith": "identityView"}]).await, 10);
    assert_eq!(
        count(vec![doc! {"$unionWith": {"coll": "noIdView", "pipeline": [{"$match": {"_id": {"$exists": false}}}]}}]).await,
        10
    );
    assert_eq!(
        count(vec![doc! {"$unionWith": {"coll": "identityView", "pipeline": [{"$match": {"_id": "New York"}}]}}]).await,
        6
    );
    // The view's own stages run before the stage's pipeline: popSortedView's order is kept.
    let found = aggregate(
        &db,
        "coll",
        vec![
            doc! {"$match": {"_id": "none"}},
            doc! {"$unionWith": {"coll": "popSortedView", "pipeline": [{"$project": {"_id": 1}}]}},
        ],
    )
    .await;
    assert_eq!(
        found,
        vec![
            doc! {"_id": "Newark"},
            doc! {"_id": "San Francisco"},
            doc! {"_id": "Trenton"},
            doc! {"_id": "New York"},
            doc! {"_id": "Palo Alto"},
        ]
    );
    // A view defined with a $unionWith.
    db.collection::<Document>("secondCollection")
        .insert_many(aggregate(&db, "coll", vec![]).await)
        .await
        .unwrap();
    run(&db, doc! {"create": "unionView", "viewOn": "coll", "pipeline": [{"$unionWith": "secondCollection"}]}).await;
    let found = run(&db, doc! {"find": "unionView"}).await;
    assert_eq!(first_batch(&found).len(), 10);
    let grouped = aggregate(
        &db,
        "unionView",
        vec![doc! {"$group": {"_id": "$_id"}}, doc! {"$sort": {"_id": 1}}],
    )
    .await;
    assert_eq!(
        grouped,
        vec![
            doc! {"_id": "New York"},
            doc! {"_id": "Newark"},
            doc! {"_id": "Palo Alto"},
            doc! {"_id": "San Francisco"},
            doc! {"_id": "Trenton"},
        ]
    );
}

#[tokio::test]
async fn views_read_by_a_pipeline_must_share_its_collation() {
    // views_collation.js: every view a pipeline reads has the pipeline's collation (mongod's
    // collatorCompatibleWithPipeline, 167 "Cannot override default collation of view <ns>").
    let server = TestServer::start().await;
    let db = server.client().database("views_collation");
    for command in [
        doc! {"create": "simpleCollection"},
        doc! {"create": "ukCollection", "collation": {"locale": "uk"}},
        doc! {"create": "filCollection", "collation": {"locale": "fil"}},
        doc! {"create": "simpleView", "viewOn": "ukCollection"},
        doc! {"create": "filView", "viewOn": "ukCollection", "collation": {"locale": "fil"}},
    ] {
        run(&db, command).await;
    }
    let lookup_simple = doc! {"$lookup": {"from": "simpleView", "localField": "x", "foreignField": "x", "as": "result"}};
    let nested_simple = doc! {"$lookup": {"from": "simpleCollection", "as": "result",
    "pipeline": [{"$lookup": {"from": "simpleView", "localField": "x", "foreignField": "x", "as": "inner_result"}}]}};
    let graph_simple = doc! {"$graphLookup": {"from": "simpleView", "startWith": "$_id",
    "connectFromField": "_id", "connectToField": "matchedId", "as": "matched"}};
    let lookup_fil = doc! {"$lookup": {"from": "filView", "localField": "x", "foreignField": "x", "as": "result"}};
    let graph_fil = doc! {"$graphLookup": {"from": "filView", "startWith": "$_id",
    "connectFromField": "_id", "connectToField": "matchedId", "as": "matched"}};
    let aggregate = |coll: &str, stage: &Document, collation: Option<&str>| {
        let mut command = doc! {"aggregate": coll, "pipeline": [stage.clone()], "cursor": {}};
        if let Some(locale) = collation {
            command.insert("collation", doc! {"locale": locale});
        }
        command
    };
    for command in [
        aggregate("simpleCollection", &lookup_simple, None),
        aggregate("simpleCollection", &nested_simple, None),
        aggregate("simpleCollection", &graph_simple, None),
        aggregate("ukCollection", &lookup_simple, Some("simple")),
        aggregate("ukCollection", &graph_simple, Some("simple")),
        aggregate("filCollection", &lookup_fil, None),
        aggregate("filCollection", &graph_fil, None),
        aggregate("ukCollection", &lookup_fil, Some("fil")),
    ] {
        run(&db, command).await;
    }
    for (command, view) in [
        (
            aggregate("simpleCollection", &lookup_simple, Some("en")),
            "simpleView",
        ),
        (
            aggregate("simpleCollection", &nested_simple, Some("en")),
            "simpleView",
        ),
        (
            aggregate("simpleCollection", &graph_simple, Some("zh")),
            "simpleView",
        ),
        (aggregate("simpleCollection", &lookup_fil, None), "filView"),
        (aggregate("simpleCollection", &graph_fil, None), "filView"),
        (
            aggregate("filCollection", &lookup_fil, Some("zh")),
            "filView",
        ),
        (aggregate("filView", &lookup_simple, None), "simpleView"),
        (aggregate("simpleView", &lookup_fil, None), "filView"),
    ] {
        let (code, _, message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(code, 167, "{command}");
        assert_eq!(
            message,
            format!("Cannot override default collation of view views_collation.{view}")
        );
    }
    // A view cannot read a view of another collation.
    let (code, _, _) = command_error(
        db.run_command(doc! {"create": "zhView", "viewOn": "simpleCollection",
        "pipeline": [lookup_fil.clone()], "collation": {"locale": "zh"}})
            .await,
    );
    assert_eq!(code, 167);
    run(
        &db,
        doc! {"create": "esView", "viewOn": "simpleCollection", "collation": {"locale": "es"}},
    )
    .await;
    let (code, _, _) = command_error(
        db.run_command(doc! {"collMod": "esView", "viewOn": "simpleCollection", "pipeline": [lookup_simple.clone()]})
            .await,
    );
    assert_eq!(code, 167);
    // Nor itself (view_graph.cpp: the pipeline's namespaces are edges of the graph).
    let (code, name, _) = command_error(
        db.run_command(doc! {"create": "selfLookup", "viewOn": "simpleCollection",
            "pipeline": [{"$lookup": {"from": "selfLookup", "localField": "x", "foreignField": "x", "as": "r"}}]})
            .await,
    );
    assert_eq!((code, name.as_str()), (5, "GraphContainsCycle"));
}

#[tokio::test]
async fn an_expiring_collection_read_through_a_view_by_lookup_never_yields_an_expired_document() {
    let (server, clock) = TestServer::start_at(1_700_000_000_000).await;
    let db = server.client().database("ttlviewjoins");
    // Every document of `stock` expires 10 s after its last write (docs/ttl.md), but "kept".
    run(&db, doc! {"createIndexes": "stock", "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 10}]}).await;
    db.collection::<Document>("stock")
        .insert_many(vec![
            doc! {"_id": "doomed", "sku": "a", "next": "kept"},
            doc! {"_id": "kept", "sku": "a", "ttl": -1},
        ])
        .await
        .unwrap();
    db.collection::<Document>("orders")
        .insert_one(doc! {"_id": 1, "sku": "a", "first": "doomed"})
        .await
        .unwrap();
    run(&db, doc! {"create": "inStock", "viewOn": "stock", "pipeline": [{"$project": {"sku": 1, "next": 1}}]}).await;
    let joined = |pipeline: Vec<Document>| {
        let db = db.clone();
        async move {
            aggregate(&db, "orders", pipeline)
                .await
                .into_iter()
                .map(|document| {
                    let ids = |field: &str| -> Vec<String> {
                        let mut ids: Vec<String> = document
                            .get_array(field)
                            .map(|found| {
                                found
                                    .iter()
                                    .filter_map(Bson::as_document)
                                    .map(|d| d.get_str("_id").unwrap().to_owned())
                                    .collect()
                            })
                            .unwrap_or_default();
                        ids.sort();
                        ids
                    };
                    (ids("byField"), ids("byPipeline"), ids("graph"))
                })
                .collect::<Vec<_>>()
        }
    };
    let pipeline = vec![
        doc! {"$lookup": {"from": "inStock", "localField": "sku", "foreignField": "sku", "as": "byField"}},
        doc! {"$lookup": {"from": "inStock", "let": {"sku": "$sku"}, "as": "byPipeline",
        "pipeline": [{"$match": {"$expr": {"$eq": ["$sku", "$$sku"]}}}]}},
        doc! {"$graphLookup": {"from": "inStock", "startWith": "$first",
        "connectFromField": "next", "connectToField": "_id", "as": "graph"}},
    ];
    let union = vec![
        doc! {"$unionWith": "inStock"},
        doc! {"$project": {"_id": 1}},
    ];
    let both = vec!["doomed".to_owned(), "kept".to_owned()];
    clock.advance_ms(10_000 - 1);
    assert_eq!(
        joined(pipeline.clone()).await,
        vec![(both.clone(), both.clone(), both.clone())]
    );
    assert_eq!(aggregate(&db, "orders", union.clone()).await.len(), 3);
    // At the expiry instant, before any reaper pass: gone from every join through the view.
    clock.advance_ms(1);
    let kept = vec!["kept".to_owned()];
    assert_eq!(
        joined(pipeline).await,
        vec![(kept.clone(), kept, Vec::new())]
    );
    assert_eq!(
        aggregate(&db, "orders", union).await,
        vec![doc! {"_id": 1}, doc! {"_id": "kept"}]
    );
}

#[tokio::test]
async fn out_merge_rename_and_bulk_write_refuse_views() {
    let server = TestServer::start().await;
    let db = with_students(&server).await;
    let not_a_collection = "Namespace views.firstYears is a view, not a collection";
    // views_aggregation.js, testAggStagesWritingToViews: $out and $merge into a view → 166.
    for stage in [
        doc! {"$out": "firstYears"},
        doc! {"$merge": {"into": "firstYears"}},
        doc! {"$merge": {"into": "firstYears", "whenMatched": "replace", "whenNotMatched": "insert"}},
        doc! {"$merge": {"into": {"db": "views", "coll": "firstYears"}, "whenMatched": "keepExisting"}},
    ] {
        let command = doc! {"aggregate": "students", "pipeline": [stage], "cursor": {}};
        let (code, name, message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(
            (code, name.as_str()),
            (166, "CommandNotSupportedOnView"),
            "{command}"
        );
        assert_eq!(message, not_a_collection);
    }
    // rename_collection.cpp checkSourceAndTargetNamespaces (views_all_commands.js codes).
    let admin = server.client().database("admin");
    let (code, _, message) = command_error(
        admin
            .run_command(doc! {"renameCollection": "views.firstYears", "to": "views.other"})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (166, "cannot rename view: views.firstYears")
    );
    for drop_target in [false, true] {
        let (code, name, message) = command_error(
            admin
                .run_command(doc! {"renameCollection": "views.students", "to": "views.firstYears", "dropTarget": drop_target})
                .await,
        );
        assert_eq!((code, name.as_str()), (48, "NamespaceExists"));
        assert_eq!(
            message,
            "a view already exists with that name: views.firstYears"
        );
    }
    // bulkWrite: an op on a view fails alone with 166 (ordered: the ops after it wait).
    let reply = run(
        &admin,
        doc! {"bulkWrite": 1, "ordered": false, "nsInfo": [{"ns": "views.firstYears"}, {"ns": "views.students"}],
        "ops": [
            {"insert": 0, "document": {"x": 1}},
            {"insert": 1, "document": {"x": 1}},
            {"update": 0, "filter": {}, "updateMods": {"$set": {"x": 2}}},
            {"delete": 0, "filter": {}},
        ]},
    )
    .await;
    assert_eq!(reply.get_i32("nErrors").unwrap(), 3, "{reply}");
    assert_eq!(reply.get_i32("nInserted").unwrap(), 1);
    let results = first_batch(&reply);
    for index in [0, 2, 3] {
        assert_eq!(results[index].get_i32("code").unwrap(), 166, "{reply}");
        assert_eq!(results[index].get_str("errmsg").unwrap(), not_a_collection);
    }
    let reply = run(
        &admin,
        doc! {"bulkWrite": 1, "nsInfo": [{"ns": "views.firstYears"}, {"ns": "views.students"}],
        "ops": [{"insert": 0, "document": {"x": 1}}, {"insert": 1, "document": {"x": 1}}]},
    )
    .await;
    assert_eq!(reply.get_i32("nErrors").unwrap(), 1, "{reply}");
    assert_eq!(reply.get_i32("nInserted").unwrap(), 0);
    assert_eq!(first_batch(&reply).len(), 1);
    // Nothing replaced the view.
    assert_eq!(
        run(&db, doc! {"count": "firstYears"})
            .await
            .get_i32("n")
            .unwrap(),
        3
    );
}

#[tokio::test]
async fn explain_through_a_view_at_every_verbosity() {
    // views_aggregation.js, testExplainOnView.
    let server = TestServer::start().await;
    let db = with_cities(&server).await;
    let explain = |verbosity: &str| {
        doc! {"explain": {"aggregate": "popSortedView", "pipeline": [{"$limit": 1}, {"$match": {"pop": 3}}], "cursor": {}},
        "verbosity": verbosity}
    };
    for verbosity in ["queryPlanner", "executionStats", "allPlansExecution"] {
        let reply = run(&db, explain(verbosity)).await;
        let cursor = reply.get_array("stages").unwrap()[0]
            .as_document()
            .unwrap()
            .get_document("$cursor")
            .unwrap()
            .clone();
        assert_eq!(
            cursor
                .get_document("queryPlanner")
                .unwrap()
                .get_str("namespace")
                .unwrap(),
            "views_aggregation.coll"
        );
        match verbosity {
            "queryPlanner" => assert!(!cursor.contains_key("executionStats"), "{reply}"),
            _ => {
                let stats = cursor.get_document("executionStats").unwrap();
                assert_eq!(
                    stats.contains_key("allPlansExecution"),
                    verbosity == "allPlansExecution",
                    "{reply}"
                );
            }
        }
    }
    // The aggregate's own explain: true is the queryPlanner explain.
    let reply = run(
        &db,
        doc! {"aggregate": "popSortedView", "pipeline": [{"$limit": 1}], "explain": true},
    )
    .await;
    let cursor = reply.get_array("stages").unwrap()[0]
        .as_document()
        .unwrap()
        .get_document("$cursor")
        .unwrap()
        .clone();
    assert!(!cursor.contains_key("executionStats"));
}
