//! Server-side JavaScript through the official driver: `$where`, `$function`, `$accumulator`,
//! `mapReduce`, their budgets and `--noscripting` (expected values from MongoDB's manual pages
//! of each).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, find_all, first_batch, test_config, TestServer};

async fn players(server: &TestServer) -> mongodb::Collection<Document> {
    let players = server
        .client()
        .database("js")
        .collection::<Document>("players");
    players
        .insert_many([
            doc! {"_id": 12378, "name": "Steve", "username": "steveisawesome", "first_login": "2017-01-01"},
            doc! {"_id": 2, "name": "Anya", "username": "anya", "first_login": "2001-02-02"},
        ])
        .await
        .unwrap();
    players
}

#[tokio::test]
async fn where_matches_as_the_manual_example() {
    let server = TestServer::start().await;
    let players = players(&server).await;
    // The $where manual page: a function, and the same test as a string.
    for filter in [
        doc! {"$where": Bson::JavaScriptCode("function() { return (hex_md5(this.name) == \"9b53e667f30cd329dca1ec9e6a83e994\") }".into())},
        doc! {"$where": "hex_md5(obj.name) == \"9b53e667f30cd329dca1ec9e6a83e994\""},
    ] {
        assert_eq!(
            find_all(&players, filter, doc! {}).await,
            vec![doc! {"_id": 2, "name": "Anya", "username": "anya", "first_login": "2001-02-02"}]
        );
    }
    // Combined with other conditions, with a scope, in count and delete. (The driver's
    // countDocuments is an aggregation, whose $match refuses $where on mongod too.)
    let db = server.client().database("js");
    let count = |query: Document| {
        let db = db.clone();
        async move {
            db.run_command(doc! {"count": "players", "query": query})
                .await
                .unwrap()
                .get_i32("n")
                .unwrap()
        }
    };
    let scoped = doc! {"$where": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
        code: "this._id > limit".into(),
        scope: doc! {"limit": 100},
    })};
    assert_eq!(count(scoped.clone()).await, 1);
    assert_eq!(
        count(doc! {"name": "Steve", "$where": "this._id < 100"}).await,
        0
    );
    let deleted = players.delete_many(scoped).await.unwrap();
    assert_eq!(deleted.deleted_count, 1);
    assert_eq!(players.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn where_errors_are_mongods() {
    let server = TestServer::start().await;
    let players = players(&server).await;
    let db = server.client().database("js");
    let cases: Vec<(Document, i32, &str)> = vec![
        (
            doc! {"find": "players", "filter": {"$where": 5}},
            2,
            "$where got bad type",
        ),
        (
            doc! {"find": "players", "filter": {"a": {"$elemMatch": {"$where": "true"}}}},
            2,
            "$where can only be applied to the top-level document",
        ),
        (
            doc! {"aggregate": "players", "pipeline": [{"$match": {"$where": "true"}}], "cursor": {}},
            2,
            "$where is not allowed in this context",
        ),
        (
            doc! {"aggregate": "players", "pipeline": [{"$project": {"a": 1}}, {"$match": {"$or": [{"$where": "true"}]}}], "cursor": {}},
            2,
            "$where is not allowed in this context",
        ),
        (
            doc! {"find": "players", "filter": {"$where": "throw new Error('boom')"}},
            139,
            "Error: boom",
        ),
        (
            doc! {"find": "players", "filter": {"$where": "function( {"}},
            139,
            "SyntaxError",
        ),
    ];
    for (command, code, message) in cases {
        let (got_code, _, got_message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(got_code, code, "{command}: {got_message}");
        assert!(got_message.contains(message), "{command}: {got_message}");
    }
    drop(players);
}

#[tokio::test]
async fn an_infinite_where_loop_ends_at_max_time_ms() {
    let server = TestServer::start().await;
    players(&server).await;
    let db = server.client().database("js");
    let started = std::time::Instant::now();
    let (code, name, _) = command_error(
        db.run_command(
            doc! {"find": "players", "filter": {"$where": "while (true) {}"}, "maxTimeMS": 300},
        )
        .await,
    );
    assert_eq!((code, name.as_str()), (50, "MaxTimeMSExpired"));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn budgets_end_runaway_javascript_without_max_time_ms() {
    let mut config = test_config();
    config.js_time_limit_ms = 300;
    config.js_memory_limit_mb = 32;
    let server = TestServer::start_with(config).await;
    players(&server).await;
    let db = server.client().database("js");
    let started = std::time::Instant::now();
    let (code, _, message) = command_error(
        db.run_command(doc! {"find": "players", "filter": {"$where": "while (true) {}"}})
            .await,
    );
    assert_eq!(code, 139, "{message}");
    assert!(message.contains("300 ms"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let (code, _, message) = command_error(
        db.run_command(doc! {"find": "players", "filter": {"$where": "var a = []; while (true) a.push('x'.repeat(1 << 20) + a.length); true"}})
            .await,
    );
    assert_eq!(code, 139, "{message}");
    assert!(message.contains("Out of memory"), "{message}");
    // The server goes on answering JavaScript afterwards.
    let reply = db
        .run_command(doc! {"count": "players", "query": {"$where": "true"}})
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n").unwrap(), 2);
}

#[tokio::test]
async fn noscripting_refuses_every_javascript_feature() {
    let mut config = test_config();
    config.noscripting = true;
    let server = TestServer::start_with(config).await;
    players(&server).await;
    let db = server.client().database("js");
    let cases: Vec<(Document, i32)> = vec![
        (
            doc! {"find": "players", "filter": {"$where": "true"}},
            6108304,
        ),
        (
            doc! {"count": "players", "query": {"$where": "true"}},
            6108304,
        ),
        // An aggregation $match refuses $where before it needs a script engine.
        (
            doc! {"aggregate": "players", "pipeline": [{"$match": {"$where": "true"}}], "cursor": {}},
            2,
        ),
    ];
    for (command, code) in cases {
        let (got, _, message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(got, code, "{command}: {message}");
    }
    let reply = db.run_command(doc! {"buildInfo": 1}).await.unwrap();
    assert!(reply.get_str("javascriptEngine").is_ok());
    let _ = first_batch;
}

#[tokio::test]
async fn function_computes_as_the_manual_example() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    let players = db.collection::<Document>("fn_players");
    players
        .insert_many([
            doc! {"_id": 1, "name": "Miss Cheevous", "scores": [10, 5, 10]},
            doc! {"_id": 2, "name": "Miss Ann Thrope", "scores": [10, 10, 10]},
            doc! {"_id": 3, "name": "Mrs. Eppie Delta ", "scores": [9, 8, 8]},
        ])
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {"aggregate": "fn_players", "cursor": {}, "pipeline": [
            {"$addFields": {
                "isFound": {"$function": {
                    "body": Bson::JavaScriptCode("function(name) { return hex_md5(name) == \"15b0a220baa16331e8d80e15367677ad\" }".into()),
                    "args": ["$name"],
                    "lang": "js",
                }},
                "message": {"$function": {
                    "body": "function(name, scores) { let total = Array.sum(scores); return `Hello ${name}.  Your total score is ${total}.` }",
                    "args": ["$name", "$scores"],
                    "lang": "js",
                }},
            }},
            {"$project": {"isFound": 1, "message": 1}},
        ]})
        .await
        .unwrap();
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"_id": 1, "isFound": false, "message": "Hello Miss Cheevous.  Your total score is 25."},
            doc! {"_id": 2, "isFound": true, "message": "Hello Miss Ann Thrope.  Your total score is 30."},
            doc! {"_id": 3, "isFound": false, "message": "Hello Mrs. Eppie Delta .  Your total score is 25."},
        ]
    );
}

#[tokio::test]
async fn function_errors_are_mongods() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    db.collection::<Document>("one")
        .insert_one(doc! {"_id": 1, "a": 1})
        .await
        .unwrap();
    let project = |function: Bson| {
        doc! {"aggregate": "one", "cursor": {}, "pipeline": [{"$project": {"x": {"$function": function}}}]}
    };
    let cases: Vec<(Bson, i32)> = vec![
        (Bson::String("x".into()), 31260),
        (Bson::Document(doc! {"args": [], "lang": "js"}), 31261),
        (
            Bson::Document(doc! {"body": 5, "args": [], "lang": "js"}),
            31262,
        ),
        (
            Bson::Document(doc! {"body": "$a", "args": [], "lang": "js"}),
            31432,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "lang": "js"}),
            31263,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": []}),
            31418,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": [], "lang": "py"}),
            31419,
        ),
        (
            Bson::Document(doc! {"body": "function() {}", "args": "$a", "lang": "js"}),
            31266,
        ),
        (
            Bson::Document(doc! {"body": "function() { throw 'no' }", "args": [], "lang": "js"}),
            139,
        ),
    ];
    for (function, code) in cases {
        let (got, _, message) = command_error(db.run_command(project(function.clone())).await);
        assert_eq!(got, code, "{function}: {message}");
    }
    let (code, _, _) = command_error(
        db.run_command(doc! {"aggregate": "one", "cursor": {}, "maxTimeMS": 300, "pipeline": [
            {"$project": {"x": {"$function": {"body": "function() { while (true) {} }", "args": [], "lang": "js"}}}}
        ]})
        .await,
    );
    assert_eq!(code, 50);
}

#[tokio::test]
async fn noscripting_refuses_function() {
    let mut config = test_config();
    config.noscripting = true;
    let server = TestServer::start_with(config).await;
    let db = server.client().database("js");
    db.collection::<Document>("one")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();
    let (code, _, message) = command_error(
        db.run_command(doc! {"aggregate": "one", "cursor": {}, "pipeline": [
            {"$project": {"x": {"$function": {"body": "function() { return 1 }", "args": [], "lang": "js"}}}}
        ]})
        .await,
    );
    assert_eq!(code, 31264, "{message}");
}

/// Every document of `collection`, in `_id` order.
async fn by_id(collection: &mongodb::Collection<Document>) -> Vec<Document> {
    use futures::TryStreamExt;
    collection
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// The `orders` collection of the mapReduce manual page.
async fn orders(db: &mongodb::Database) {
    let date = |day: i64| bson::DateTime::from_millis(1_583_020_800_000 + (day - 1) * 86_400_000);
    let item = |sku: &str, qty: i32, price: f64| doc! {"sku": sku, "qty": qty, "price": price};
    let orders = vec![
        doc! {"_id": 1, "cust_id": "Ant O. Knee", "ord_date": date(1), "price": 25, "items": [item("oranges", 5, 2.5), item("apples", 5, 2.5)], "status": "A"},
        doc! {"_id": 2, "cust_id": "Ant O. Knee", "ord_date": date(8), "price": 70, "items": [item("oranges", 8, 2.5), item("chocolates", 5, 10.0)], "status": "A"},
        doc! {"_id": 3, "cust_id": "Busby Bee", "ord_date": date(8), "price": 50, "items": [item("oranges", 10, 2.5), item("pears", 10, 2.5)], "status": "A"},
        doc! {"_id": 4, "cust_id": "Busby Bee", "ord_date": date(18), "price": 25, "items": [item("oranges", 10, 2.5)], "status": "A"},
        doc! {"_id": 5, "cust_id": "Busby Bee", "ord_date": date(19), "price": 50, "items": [item("chocolates", 5, 10.0)], "status": "A"},
        doc! {"_id": 6, "cust_id": "Cam Elot", "ord_date": date(19), "price": 35, "items": [item("carrots", 10, 1.0), item("apples", 10, 2.5)], "status": "A"},
        doc! {"_id": 7, "cust_id": "Cam Elot", "ord_date": date(20), "price": 25, "items": [item("oranges", 10, 2.5)], "status": "A"},
        doc! {"_id": 8, "cust_id": "Don Quis", "ord_date": date(20), "price": 75, "items": [item("chocolates", 5, 10.0), item("apples", 10, 2.5)], "status": "A"},
        doc! {"_id": 9, "cust_id": "Don Quis", "ord_date": date(20), "price": 55, "items": [item("carrots", 5, 1.0), item("apples", 10, 2.5), item("oranges", 10, 2.5)], "status": "A"},
        doc! {"_id": 10, "cust_id": "Don Quis", "ord_date": date(23), "price": 25, "items": [item("oranges", 10, 2.5)], "status": "A"},
    ];
    db.collection::<Document>("orders")
        .insert_many(orders)
        .await
        .unwrap();
}

const TOTAL_MAP: &str = "function() { emit(this.cust_id, this.price); }";
const TOTAL_REDUCE: &str = "function(keyCustId, valuesPrices) { return Array.sum(valuesPrices); }";

fn customer_totals() -> Vec<Document> {
    vec![
        doc! {"_id": "Ant O. Knee", "value": 95.0},
        doc! {"_id": "Busby Bee", "value": 125.0},
        doc! {"_id": "Cam Elot", "value": 60.0},
        doc! {"_id": "Don Quis", "value": 155.0},
    ]
}

#[tokio::test]
async fn map_reduce_totals_per_customer_as_the_manual_example() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    orders(&db).await;
    // Into a collection (a string `out` replaces it).
    db.collection::<Document>("map_reduce_example")
        .insert_one(doc! {"_id": "stale"})
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {
            "mapReduce": "orders",
            "map": Bson::JavaScriptCode(TOTAL_MAP.into()),
            "reduce": Bson::JavaScriptCode(TOTAL_REDUCE.into()),
            "out": "map_reduce_example",
        })
        .await
        .unwrap();
    assert_eq!(reply.get_str("result").unwrap(), "map_reduce_example");
    let out = db.collection::<Document>("map_reduce_example");
    assert_eq!(by_id(&out).await, customer_totals());
    // Inline.
    let reply = db
        .run_command(doc! {
            "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE,
            "out": {"inline": 1},
        })
        .await
        .unwrap();
    let results: Vec<Document> = reply
        .get_array("results")
        .unwrap()
        .iter()
        .map(|result| result.as_document().unwrap().clone())
        .collect();
    assert_eq!(results, customer_totals());
    // Into another database: the reply names it.
    let reply = db
        .run_command(doc! {
            "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE,
            "out": {"replace": "totals", "db": "js_out"},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("result").unwrap(),
        &doc! {"db": "js_out", "collection": "totals"}
    );
    let out = server
        .client()
        .database("js_out")
        .collection::<Document>("totals");
    assert_eq!(by_id(&out).await, customer_totals());
}

#[tokio::test]
async fn map_reduce_finalize_computes_the_manual_average() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    orders(&db).await;
    let command = |out: Bson| {
        doc! {
            "mapReduce": "orders",
            "map": "function() { for (var idx = 0; idx < this.items.length; idx++) { var key = this.items[idx].sku; var value = { count: 1, qty: this.items[idx].qty }; emit(key, value); } }",
            "reduce": "function(keySKU, countObjVals) { reducedVal = { count: 0, qty: 0 }; for (var idx = 0; idx < countObjVals.length; idx++) { reducedVal.count += countObjVals[idx].count; reducedVal.qty += countObjVals[idx].qty; } return reducedVal; }",
            "finalize": "function(key, reducedVal) { reducedVal.avg = reducedVal.qty/reducedVal.count; return reducedVal; }",
            "query": {"ord_date": {"$gte": bson::DateTime::from_millis(1_583_020_800_000)}},
            "out": out,
        }
    };
    let expected = vec![
        doc! {"_id": "apples", "value": {"count": 4.0, "qty": 35.0, "avg": 8.75}},
        doc! {"_id": "carrots", "value": {"count": 2.0, "qty": 15.0, "avg": 7.5}},
        doc! {"_id": "chocolates", "value": {"count": 3.0, "qty": 15.0, "avg": 5.0}},
        doc! {"_id": "oranges", "value": {"count": 7.0, "qty": 63.0, "avg": 9.0}},
        doc! {"_id": "pears", "value": {"count": 1.0, "qty": 10.0, "avg": 10.0}},
    ];
    let out = db.collection::<Document>("map_reduce_example2");
    out.insert_one(doc! {"_id": "kept", "value": 1})
        .await
        .unwrap();
    db.run_command(command(Bson::Document(
        doc! {"merge": "map_reduce_example2"},
    )))
    .await
    .unwrap();
    let mut merged = expected.clone();
    merged.insert(3, doc! {"_id": "kept", "value": 1});
    assert_eq!(by_id(&out).await, merged);
}

#[tokio::test]
async fn map_reduce_reads_query_sort_limit_and_scope() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    orders(&db).await;
    let reply = db
        .run_command(doc! {
            "mapReduce": "orders",
            // The three most expensive orders of customers other than Cam Elot, doubled by a
            // scope global.
            "map": "function() { emit(this.cust_id, this.price * factor); }",
            "reduce": TOTAL_REDUCE,
            "query": {"cust_id": {"$ne": "Cam Elot"}},
            "sort": {"price": -1},
            "limit": 3,
            "scope": {"factor": 2},
            "out": {"inline": 1},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_array("results").unwrap(),
        &vec![
            Bson::Document(doc! {"_id": "Ant O. Knee", "value": 140.0}),
            Bson::Document(doc! {"_id": "Don Quis", "value": 260.0}),
        ]
    );
    // `out: {reduce}` folds the new values into those already there.
    let out = db.collection::<Document>("running");
    out.insert_one(doc! {"_id": "Don Quis", "value": 1000.0})
        .await
        .unwrap();
    db.run_command(doc! {
        "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE,
        "out": {"reduce": "running"},
    })
    .await
    .unwrap();
    let mut expected = customer_totals();
    expected[3] = doc! {"_id": "Don Quis", "value": 1155.0};
    assert_eq!(by_id(&out).await, expected);
    // With `finalize`, the re-reduced value is finalized again (mongod's `$merge` pipeline):
    // Don Quis: finalize(reduce([1155, finalize(155)])) = (1155 + 156) + 1.
    db.run_command(doc! {
        "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE,
        "finalize": "function(key, value) { return value + 1 }",
        "out": {"reduce": "running"},
    })
    .await
    .unwrap();
    let values: Vec<Bson> = by_id(&out)
        .await
        .iter()
        .map(|document| document.get("value").unwrap().clone())
        .collect();
    assert_eq!(
        values,
        vec![
            Bson::Double(95.0 + 96.0 + 1.0),
            Bson::Double(125.0 + 126.0 + 1.0),
            Bson::Double(60.0 + 61.0 + 1.0),
            Bson::Double(1155.0 + 156.0 + 1.0),
        ]
    );
}

#[tokio::test]
async fn map_reduce_never_maps_expired_documents() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    db.run_command(doc! {"createIndexes": "events", "indexes": [
        {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60},
    ]})
    .await
    .unwrap();
    let now = 1_700_000_000_000;
    db.collection::<Document>("events")
        .insert_many([
            doc! {"_id": 1, "k": "a", "at": bson::DateTime::from_millis(now - 3_600_000)},
            doc! {"_id": 2, "k": "a", "at": bson::DateTime::from_millis(now)},
            doc! {"_id": 3, "k": "b", "at": bson::DateTime::from_millis(now)},
        ])
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {
            "mapReduce": "events",
            "map": "function() { emit(this.k, 1); }",
            "reduce": "function(k, values) { return Array.sum(values); }",
            "out": {"inline": 1},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_array("results").unwrap(),
        &vec![
            Bson::Document(doc! {"_id": "a", "value": 1.0}),
            Bson::Document(doc! {"_id": "b", "value": 1.0}),
        ]
    );
}

#[tokio::test]
async fn map_reduce_errors_are_mongods() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    orders(&db).await;
    let cases: Vec<(Document, i32)> = vec![
        (
            doc! {"mapReduce": "orders", "reduce": TOTAL_REDUCE, "out": {"inline": 1}},
            40414,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "out": {"inline": 1}},
            40414,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE},
            40414,
        ),
        (
            doc! {"mapReduce": "orders", "map": 5, "reduce": TOTAL_REDUCE, "out": {"inline": 1}},
            2,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": 5},
            2,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1, "db": "x"}},
            72,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"db": "x"}},
            2,
        ),
        (
            doc! {"mapReduce": "orders", "map": "function() { throw new Error('boom') }", "reduce": TOTAL_REDUCE, "out": {"inline": 1}},
            139,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1}, "limit": 0},
            15958,
        ),
        (
            doc! {"mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1}, "sort": {}},
            15976,
        ),
    ];
    for (command, code) in cases {
        let (got, _, message) = command_error(db.run_command(command.clone()).await);
        assert_eq!(got, code, "{command}: {message}");
    }
    // Not mongod's: tideway does not explain mapReduce (238).
    let (code, _, message) = command_error(
        db.run_command(doc! {"explain": {
            "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1},
        }})
        .await,
    );
    assert_eq!(code, 238, "{message}");
}

#[tokio::test]
async fn noscripting_refuses_map_reduce_and_accumulator() {
    let mut config = test_config();
    config.noscripting = true;
    let server = TestServer::start_with(config).await;
    let db = server.client().database("js");
    orders(&db).await;
    let (code, _, message) = command_error(
        db.run_command(doc! {
            "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1},
        })
        .await,
    );
    assert_eq!(code, 31246, "{message}");
    // No document, no map: mongod answers without needing the engine.
    let reply = db
        .run_command(doc! {
            "mapReduce": "orders", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1},
            "query": {"_id": -1},
        })
        .await
        .unwrap();
    assert_eq!(reply.get_array("results").unwrap(), &Vec::<Bson>::new());
    let (code, _, message) = command_error(
        db.run_command(doc! {"aggregate": "orders", "cursor": {}, "pipeline": [
            {"$group": {"_id": "$cust_id", "total": {"$accumulator": {
                "init": "function() { return 0 }",
                "accumulate": "function(state, price) { return state + price }",
                "accumulateArgs": ["$price"],
                "merge": "function(a, b) { return a + b }",
                "lang": "js",
            }}}},
        ]})
        .await,
    );
    assert_eq!(code, 31264, "{message}");
}

#[tokio::test]
async fn accumulator_averages_as_the_manual_example() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    db.collection::<Document>("books")
        .insert_many([
            doc! {"_id": 8751, "title": "The Banquet", "author": "Dante", "copies": 2},
            doc! {"_id": 8752, "title": "Divine Comedy", "author": "Dante", "copies": 1},
            doc! {"_id": 8645, "title": "Eclogues", "author": "Dante", "copies": 2},
            doc! {"_id": 7000, "title": "The Odyssey", "author": "Homer", "copies": 10},
            doc! {"_id": 7020, "title": "Iliad", "author": "Homer", "copies": 10},
        ])
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {"aggregate": "books", "cursor": {}, "pipeline": [
            {"$group": {"_id": "$author", "avgCopies": {"$accumulator": {
                "init": Bson::JavaScriptCode("function() { return { count: 0, sum: 0 } }".into()),
                "accumulate": Bson::JavaScriptCode("function(state, numCopies) { return { count: state.count + 1, sum: state.sum + numCopies } }".into()),
                "accumulateArgs": ["$copies"],
                "merge": Bson::JavaScriptCode("function(state1, state2) { return { count: state1.count + state2.count, sum: state1.sum + state2.sum } }".into()),
                "finalize": Bson::JavaScriptCode("function(state) { return (state.sum / state.count) }".into()),
                "lang": "js",
            }}}},
            {"$sort": {"_id": 1}},
        ]})
        .await
        .unwrap();
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"_id": "Dante", "avgCopies": 5.0 / 3.0},
            doc! {"_id": "Homer", "avgCopies": 10.0},
        ]
    );
    let (code, _, message) = command_error(
        db.run_command(doc! {"aggregate": "books", "cursor": {}, "pipeline": [
            {"$group": {"_id": null, "x": {"$accumulator": {"init": "function() {}", "accumulate": "function() {}", "accumulateArgs": []}}}},
        ]})
        .await,
    );
    assert_eq!(code, 4544709, "{message}");
}

#[tokio::test]
async fn map_reduce_groups_keys_under_the_collation() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    db.collection::<Document>("tags")
        .insert_many([
            doc! {"_id": 1, "tag": "Rust"},
            doc! {"_id": 2, "tag": "rust"},
            doc! {"_id": 3, "tag": "Go"},
        ])
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {
            "mapReduce": "tags",
            "map": "function() { emit(this.tag, 1); }",
            "reduce": "function(k, values) { return Array.sum(values); }",
            "query": {"tag": {"$in": ["rust", "go"]}},
            "collation": {"locale": "en", "strength": 2},
            "out": {"inline": 1},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_array("results").unwrap(),
        &vec![
            Bson::Document(doc! {"_id": "Go", "value": 1.0}),
            Bson::Document(doc! {"_id": "Rust", "value": 2.0}),
        ]
    );
}

#[tokio::test]
async fn map_reduce_of_a_missing_collection_is_empty_and_emitted_values_are_bounded() {
    let server = TestServer::start().await;
    let db = server.client().database("js");
    let reply = db
        .run_command(doc! {
            "mapReduce": "nothing", "map": TOTAL_MAP, "reduce": TOTAL_REDUCE, "out": {"inline": 1},
        })
        .await
        .unwrap();
    assert_eq!(reply.get_array("results").unwrap(), &Vec::<Bson>::new());
    orders(&db).await;
    server
        .client()
        .database("admin")
        .run_command(doc! {"setParameter": 1, "internalDocumentSourceGroupMaxMemoryBytes": 1000})
        .await
        .unwrap();
    let (code, _, message) = command_error(
        db.run_command(doc! {
            "mapReduce": "orders",
            "map": "function() { for (var i = 0; i < 100; i++) emit(i, 'x'.repeat(10)); }",
            "reduce": "function(k, v) { return v[0] }",
            "out": {"inline": 1},
        })
        .await,
    );
    assert_eq!(code, 292, "{message}");
}

#[tokio::test]
async fn map_reduce_reduces_single_values_unless_the_optimization_is_on() {
    // mongod 4.4+ (SERVER-68766): reduce runs on a key's single value unless
    // `mrEnableSingleReduceOptimization` is set.
    let server = TestServer::start().await;
    let db = server.client().database("js");
    db.collection::<Document>("one")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    let command = doc! {
        "mapReduce": "one",
        "map": "function() { emit(0, 'mapped value'); }",
        "reduce": "function(key, values) { return 'reduced value'; }",
        "out": {"inline": 1},
    };
    let results = |reply: Document| reply.get_array("results").unwrap().clone();
    assert_eq!(
        results(db.run_command(command.clone()).await.unwrap()),
        vec![Bson::Document(doc! {"_id": 0.0, "value": "reduced value"})]
    );
    server
        .client()
        .database("admin")
        .run_command(doc! {"setParameter": 1, "mrEnableSingleReduceOptimization": true})
        .await
        .unwrap();
    assert_eq!(
        results(db.run_command(command).await.unwrap()),
        vec![Bson::Document(doc! {"_id": 0.0, "value": "mapped value"})]
    );
}

#[tokio::test]
async fn accumulator_states_survive_a_group_spill() {
    // A $group over 64 KiB of memory spills; each group's $accumulator state must come out as
    // an unspilled run computes it.
    let server = TestServer::start_with(tideway::Config {
        set_parameter: vec!["internalDocumentSourceGroupMaxMemoryBytes=65536".into()],
        ..test_config()
    })
    .await;
    let db = server.client().database("js");
    let documents: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "group": i % 300, "n": i, "pad": "p".repeat(200)})
        .collect();
    db.collection::<Document>("many")
        .insert_many(documents)
        .await
        .unwrap();
    let reply = db
        .run_command(doc! {"aggregate": "many", "allowDiskUse": true, "cursor": {"batchSize": 1000}, "pipeline": [
            {"$group": {"_id": "$group", "stats": {"$accumulator": {
                "init": "function(group) { return {group: group, count: 0, sum: 0} }",
                "initArgs": ["$_id"],
                "accumulate": "function(state, n, pad) { return {group: state.group, count: state.count + 1, sum: state.sum + n} }",
                "accumulateArgs": ["$n", "$pad"],
                "merge": "function(a, b) { return {group: a.group, count: a.count + b.count, sum: a.sum + b.sum} }",
                "finalize": "function(state) { return [state.group, state.count, state.sum] }",
            }}}},
            {"$sort": {"_id": 1}},
        ]})
        .await
        .unwrap();
    let groups = first_batch(&reply);
    assert_eq!(groups.len(), 300);
    for (group, document) in groups.iter().enumerate() {
        let members: Vec<i64> = (0..2000).filter(|i| i % 300 == group as i64).collect();
        assert_eq!(
            document.get_array("stats").unwrap(),
            &vec![
                // `initArgs` reads the key: `_id` is not a document here, so `$_id` is missing.
                Bson::Null,
                Bson::Double(members.len() as f64),
                Bson::Double(members.iter().sum::<i64>() as f64),
            ],
            "group {group}"
        );
    }
}
