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
