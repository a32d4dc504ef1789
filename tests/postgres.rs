//! The server over PostgreSQL as a driver sees it: a router (`hello` as mongos), sessions and
//! transactions without a replica set, the clock and floor in the database, and the costs it
//! reports (`serverStatus.postgres`: the pool, round trips per command — one for a point read,
//! one for a single insert). Needs `TIDEWAY_TEST_PG_URI` (required under `CI=true`).

mod common;

use bson::{doc, Bson, Document};
use mongodb::Collection;

use common::raw::{connect, kind0, op_msg, roundtrip};
use common::{command_error, TestServer};

fn round_trips_of(status: &Document, command: &str) -> (i64, i64) {
    let counted = status
        .get_document("postgres")
        .and_then(|postgres| postgres.get_document("commands"))
        .and_then(|commands| commands.get_document(command))
        .cloned()
        .unwrap_or_default();
    (
        counted.get_i64("count").unwrap_or(0),
        counted.get_i64("roundTrips").unwrap_or(0),
    )
}

/// How the server's tables lie in the database (`serverStatus.postgres.layout`).
async fn layout_of(server: &TestServer) -> String {
    let status = server.server_status().await;
    let postgres = status.get_document("postgres").unwrap();
    postgres.get_str("layout").unwrap().to_owned()
}

/// The password in a `postgresql://user:password@…` URI.
fn common_password(uri: &str) -> String {
    let authority = uri.split("://").nth(1).unwrap_or_default();
    let user_info = authority.split('@').next().unwrap_or_default();
    user_info.split(':').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_server_answers_as_a_router_and_reports_its_round_trips() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    let server = TestServer::start_with(config).await;
    let client = server.client();
    let admin = client.database("admin");
    let hello = admin.run_command(doc! {"hello": 1}).await.unwrap();
    assert_eq!(hello.get_str("msg"), Ok("isdbgrid"), "{hello}");
    assert!(!hello.contains_key("setName"), "{hello}");
    assert!(hello.get_i32("logicalSessionTimeoutMinutes").is_ok());
    // A router has no replication commands (mongos: no such command).
    let (code, _, _) = command_error(admin.run_command(doc! {"replSetGetStatus": 1}).await);
    assert_eq!(code, 59);

    let coll: Collection<Document> = client.database("app").collection("sessions");
    coll.insert_one(doc! {"_id": 1, "user": "ada"})
        .await
        .unwrap();
    let db = client.database("app");
    // Once each, so the catalog is cached (a collection is read from the catalog once).
    db.run_command(doc! {"insert": "sessions", "documents": [{"_id": 0}]})
        .await
        .unwrap();
    db.run_command(doc! {"find": "sessions", "filter": {"_id": 0}})
        .await
        .unwrap();
    let before = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    for id in 2..12 {
        db.run_command(doc! {"insert": "sessions", "documents": [{"_id": id}]})
            .await
            .unwrap();
    }
    for id in 1..11 {
        db.run_command(doc! {"find": "sessions", "filter": {"_id": id}})
            .await
            .unwrap();
    }
    let after = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    let postgres = after.get_document("postgres").unwrap();
    let pool = postgres.get_document("pool").unwrap();
    for field in [
        "maxSize",
        "size",
        "available",
        "inUse",
        "waiting",
        "waits",
        "waitMicros",
    ] {
        assert!(pool.contains_key(field), "pool.{field} in {pool}");
    }
    assert_eq!(pool.get_i64("maxSize"), Ok(8));
    let layout = match common::citus_distribution() {
        Some(_) => "citus",
        None => "local",
    };
    assert_eq!(postgres.get_str("layout"), Ok(layout), "{postgres}");
    // Single inserts go through the group commit, one at a time here (not on Citus, where
    // each goes alone: docs/scale-out.md).
    let groups = postgres.get_document("insertGroups").unwrap();
    let grouped = groups.get_i64("inserts").unwrap();
    match layout {
        "local" => assert!(grouped >= 10, "{groups}"),
        _ => assert_eq!(grouped, 0, "{groups}"),
    }
    assert!(groups.get_i64("groups").unwrap() <= grouped, "{groups}");
    let uri = postgres.get_str("uri").unwrap();
    let password = common_password(server.state.config.pg_uri.as_deref().unwrap());
    assert!(
        password.is_empty() || !uri.contains(&password),
        "the password is not shown: {uri}"
    );
    let delta = |command: &str| {
        let (count_before, trips_before) = round_trips_of(&before, command);
        let (count_after, trips_after) = round_trips_of(&after, command);
        (count_after - count_before, trips_after - trips_before)
    };
    assert_eq!(
        delta("insert"),
        (10, 10),
        "one round trip per single insert"
    );
    assert_eq!(delta("find"), (10, 10), "one round trip per point read");
}

/// On a Citus coordinator (`TIDEWAY_TEST_PG_CITUS_WORKERS`), `--pgDistribute citus` turns the
/// local tables of a database a node already used into distributed ones: every document, index
/// entry and unique key is still there, and no copy stays behind in the coordinator's tables.
#[tokio::test]
async fn local_tables_are_distributed_with_their_rows() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    if common::citus_distribution().is_none() {
        return; // Needs a Citus coordinator.
    }
    let local = tideway::config::Config {
        pg_distribute: None,
        ..config.clone()
    };
    let server = TestServer::start_with(local).await;
    let coll: Collection<Document> = server.client().database("app").collection("things");
    let documents: Vec<Document> = (0..300)
        .map(|id| doc! {"_id": id, "x": id % 10, "email": format!("u{id}@x")})
        .collect();
    coll.insert_many(documents).await.unwrap();
    let unique = mongodb::options::IndexOptions::builder()
        .unique(true)
        .build();
    coll.create_indexes([
        mongodb::IndexModel::builder().keys(doc! {"x": 1}).build(),
        mongodb::IndexModel::builder()
            .keys(doc! {"email": 1})
            .options(unique)
            .build(),
    ])
    .await
    .unwrap();
    assert_eq!(layout_of(&server).await, "local");
    server.stop().await;

    let server = TestServer::start_with(config.clone()).await;
    assert_eq!(layout_of(&server).await, "citus");
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("things");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 300);
    assert_eq!(coll.count_documents(doc! {"x": 3}).await.unwrap(), 30);
    let found = coll.find_one(doc! {"email": "u7@x"}).await.unwrap();
    assert_eq!(found.and_then(|found| found.get_i32("_id").ok()), Some(7));
    let duplicate = coll.insert_one(doc! {"_id": 1000, "email": "u7@x"}).await;
    match duplicate.map_err(|error| *error.kind) {
        Err(mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(error))) => {
            assert_eq!(error.code, 11000)
        }
        other => panic!("a duplicate key was not refused: {other:?}"),
    }
    server.stop().await;
    let database = common::connect_plainly(config.pg_uri.as_deref().unwrap()).await;
    let left_behind = database
        .query_one(
            "SELECT pg_relation_size('tideway.documents') + pg_relation_size('tideway.index_entries')
                    + pg_relation_size('tideway.unique_entries')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        left_behind.get::<_, i64>(0),
        0,
        "rows left in the coordinator's tables"
    );
}

/// `--pgDistribute citus` on a database without Citus stops startup with what is missing,
/// having created nothing.
#[tokio::test]
async fn distributing_needs_citus_in_the_database() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    if common::citus_distribution().is_some() {
        return; // The test server has Citus.
    }
    let config = tideway::config::Config {
        pg_distribute: Some(tideway::config::PgDistribute::Citus),
        ..config
    };
    let error = tideway::state::open_storage(&config)
        .await
        .expect_err("no citus extension")
        .to_string();
    assert!(
        error.contains("--pgDistribute citus needs the citus extension in the database"),
        "{error}"
    );
    let database = common::connect_plainly(config.pg_uri.as_deref().unwrap()).await;
    let tables = database
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'tideway' AND tablename <> 'meta'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(tables.get::<_, i64>(0), 0, "the bootstrap rolled back");
}

#[tokio::test]
async fn transactions_and_retryable_writes_work_without_a_replica_set() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    let server = TestServer::start_with(config).await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("orders");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 2})
        .session(&mut session)
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut session)
        .await
        .unwrap();
    // Not visible outside before the commit.
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    session.commit_transaction().await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
    assert_eq!(
        coll.find_one(doc! {"_id": 1})
            .await
            .unwrap()
            .unwrap()
            .get("n"),
        Some(&Bson::Int32(1))
    );
    // A retried statement is answered from its record, not applied twice.
    let db = client.database("app");
    let lsid = doc! {"id": Bson::Binary(bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: uuid::Uuid::new_v4().as_bytes().to_vec(),
    })};
    let insert = doc! {
        "insert": "orders", "documents": [{"_id": 3}], "lsid": lsid.clone(),
        "txnNumber": 7_i64,
    };
    let first = db.run_command(insert.clone()).await.unwrap();
    let retried = db.run_command(insert).await.unwrap();
    assert_eq!(first.get_i32("n"), Ok(1));
    assert_eq!(retried.get_i32("n"), Ok(1), "{retried}");
    assert!(!retried.contains_key("writeErrors"), "{retried}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 3);
}

/// The reply of `command` run on database `app` over a raw connection to `server`: nothing
/// added by a driver (no implicit session of its own), so two nodes see the same `lsid`.
async fn run_on(server: &TestServer, mut command: Document) -> Document {
    command.insert("$db", "app");
    let mut stream = connect(server).await;
    roundtrip(&mut stream, &op_msg(1, 0, &[kind0(&command)]))
        .await
        .document
}

#[tokio::test]
async fn a_retry_on_another_node_is_answered_from_the_record() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    let first_node = TestServer::start_with(config.clone()).await;
    let second_node = TestServer::start_with(config).await;
    let (first, second) = (&first_node, &second_node);
    let lsid = doc! {"id": Bson::Binary(bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: uuid::Uuid::new_v4().as_bytes().to_vec(),
    })};
    let insert = doc! {
        "insert": "carts", "documents": [{"_id": 1, "items": 0}], "lsid": lsid.clone(),
        "txnNumber": 1_i64,
    };
    // Twice without a record, so the collection exists and the catalog (views included) is
    // cached: creating the collection forgot what the first insert looked up.
    for id in [-1, 0] {
        run_on(first, doc! {"insert": "carts", "documents": [{"_id": id}]}).await;
    }
    let admin = first_node.client().database("admin");
    let before = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    assert_eq!(run_on(first, insert.clone()).await.get_i32("n"), Ok(1));
    let after = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    let (count_before, trips_before) = round_trips_of(&before, "insert");
    let (count_after, trips_after) = round_trips_of(&after, "insert");
    assert_eq!(
        (count_after - count_before, trips_after - trips_before),
        (1, 1),
        "a first attempt sends BEGIN, its claim and record, the insert and COMMIT at once"
    );
    // A statement that would match nothing when run again: its retry must still report it.
    let update = doc! {
        "update": "carts", "updates": [{"q": {"_id": 1, "items": 0}, "u": {"$set": {"items": 5}}}],
        "lsid": lsid.clone(), "txnNumber": 2_i64,
    };
    let updated = run_on(first, update.clone()).await;
    assert_eq!(
        (updated.get_i32("n"), updated.get_i32("nModified")),
        (Ok(1), Ok(1))
    );

    // The second node never saw the session: its retries are answered from the record.
    let retried = run_on(second, update).await;
    assert_eq!(
        (retried.get_i32("n"), retried.get_i32("nModified")),
        (Ok(1), Ok(1)),
        "{retried}"
    );
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    let retried_insert = run_on(second, insert).await;
    // txnNumber 1 is older than the session's 2 now.
    assert_eq!(retried_insert.get_i32("code"), Ok(225), "{retried_insert}");
    let carts: Collection<Document> = second_node.client().database("app").collection("carts");
    assert_eq!(carts.count_documents(doc! {}).await.unwrap(), 3);
    assert_eq!(
        carts
            .find_one(doc! {"_id": 1})
            .await
            .unwrap()
            .unwrap()
            .get("items"),
        Some(&Bson::Int32(5))
    );
    // A newer number on the second node is a first attempt there.
    let next = run_on(
        second,
        doc! {
            "delete": "carts", "deletes": [{"q": {"_id": 1}, "limit": 1}],
            "lsid": lsid, "txnNumber": 3_i64,
        },
    )
    .await;
    assert_eq!(next.get_i32("n"), Ok(1), "{next}");
    assert!(!next.contains_key("retriedStmtIds"), "{next}");
}
