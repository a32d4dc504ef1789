//! Startup against a real PostgreSQL: schema creation and its checks, and errors that name the
//! database without its password. Needs `TIDEWAY_TEST_PG_URI` (a superuser's URI, as `.ci/run`
//! exports for the throwaway cluster it starts with `.ci/pg-cluster`); each test works in a
//! database of its own, dropped at the end. Without the variable the tests say so and pass,
//! except under `CI=true`, where a missing database is a failure.

mod common;

use common::{password_of, refusal, scratch, server_uri, with_password};
use tideway_postgres::schema::SCHEMA_VERSION;
use tideway_postgres::{Database, Target};

#[tokio::test]
async fn bootstrap_creates_the_schema_once_and_checks_it_after() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let first = scratch.connect(2).await;
    let client = first.client().await.unwrap();
    let version: i64 = client
        .query_one(
            "SELECT value FROM tideway.meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'tideway' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        tables,
        [
            "collections",
            "documents",
            "index_entries",
            "meta",
            "session_statements",
            "sessions",
            "unique_entries"
        ]
    );
    client
        .execute(
            "INSERT INTO tideway.collections VALUES (1, 'db', 'c', '\\x00')",
            &[],
        )
        .await
        .unwrap();
    drop(client);
    drop(first);
    // A second start finds the schema and keeps what it holds.
    let second = scratch.connect(2).await;
    let kept: i64 = second
        .client()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM tideway.collections", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1);
    scratch.drop_database().await;
}

#[tokio::test]
async fn concurrent_startups_create_the_schema_once() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let uri = scratch.uri.clone();
            tokio::spawn(async move { Database::connect(&uri, 1).await.map(|_| ()) })
        })
        .collect();
    for start in starts {
        start.await.unwrap().expect("every node starts");
    }
    scratch.drop_database().await;
}

#[tokio::test]
async fn a_newer_schema_stops_startup_naming_both_versions() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let database = scratch.connect(1).await;
    database
        .client()
        .await
        .unwrap()
        .execute(
            "UPDATE tideway.meta SET value = $1 WHERE name = 'schema_version'",
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    drop(database);
    let message = refusal(&scratch.uri).await;
    let newer = SCHEMA_VERSION + 1;
    assert!(
        message.contains(&format!(
            "holds tideway schema version {newer}, newer than this build's {SCHEMA_VERSION}"
        )),
        "{message}"
    );
    assert!(
        !message.contains(&password_of(&scratch.server)),
        "{message}"
    );
    scratch.drop_database().await;
}

#[tokio::test]
async fn an_unreachable_database_is_named_without_its_password() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("postgresql://tideway:s3cret@127.0.0.1:{port}/tideway?connect_timeout=5");
    let message = refusal(&uri).await;
    assert!(
        message.contains(&format!("cannot connect to PostgreSQL (postgresql://tideway@127.0.0.1:{port}/tideway?connect_timeout=5)")),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
    assert_eq!(
        Target::parse(&uri).unwrap().redacted(),
        format!("postgresql://tideway@127.0.0.1:{port}/tideway?connect_timeout=5")
    );
}

#[tokio::test]
async fn refused_credentials_are_named_without_the_password() {
    let Some(server) = server_uri() else { return };
    let Some(wrong) = with_password(&server, "not-the-password") else {
        return;
    };
    let message = refusal(&wrong).await;
    assert!(
        message.contains("cannot connect to PostgreSQL"),
        "{message}"
    );
    assert!(
        message.contains("password authentication failed"),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");
}
