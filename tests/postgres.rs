//! The server over PostgreSQL as a driver sees it: a router (`hello` as mongos), sessions and
//! transactions without a replica set, the clock and floor in the database, and the costs it
//! reports (`serverStatus.postgres`: the pool, round trips per command — one for a point read,
//! one for a single insert). Needs `TIDEWAY_TEST_PG_URI` (required under `CI=true`).

mod common;

use bson::{doc, Bson, Document};
use mongodb::Collection;

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
    let uri = postgres.get_str("uri").unwrap();
    let password = common_password(server.state.config.pg_uri.as_deref().unwrap());
    assert!(!uri.contains(&password), "the password is not shown: {uri}");
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
