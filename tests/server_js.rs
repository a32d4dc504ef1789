//! Server-side JavaScript through the official driver: `$where`, `$function`, `$accumulator`,
//! their budgets and `--noscripting` (expected values from MongoDB's manual pages of each).

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
        db.run_command(doc! {"find": "players", "filter": {"$where": "var a = []; while (true) a.push(new Array(1e6)); true"}})
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
