//! Startup against a real PostgreSQL: schema creation and its checks, and errors that name the
//! database without its password. Needs `TIDEWAY_TEST_PG_URI` (a superuser's URI, as `.ci/run`
//! exports for the throwaway cluster it starts with `.ci/pg-cluster`); each test works in a
//! database of its own, dropped at the end. Without the variable the tests say so and pass,
//! except under `CI=true`, where a missing database is a failure.

mod common;

use common::{password_of, refusal, scratch, server_uri, with_password};
use tideway_postgres::schema::SCHEMA_VERSION;
use tideway_postgres::{Database, Target};

/// The schema version the database records.
async fn stored_version(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT value FROM tideway.meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Opens the scratch database (upgrading its schema) and checks that it is this build's version
/// now; returns the storage and a client of the database beside it.
async fn open_upgraded(
    scratch: &common::Scratch,
) -> (tideway_postgres::PgStorage, deadpool_postgres::Object) {
    let storage = tideway_postgres::PgStorage::open(&scratch.uri, 2)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let client = scratch.connect(1).await.client().await.unwrap();
    assert_eq!(stored_version(&client).await, SCHEMA_VERSION);
    (storage, client)
}

#[tokio::test]
async fn bootstrap_creates_the_schema_once_and_checks_it_after() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let first = scratch.connect(2).await;
    let client = first.client().await.unwrap();
    assert_eq!(stored_version(&client).await, SCHEMA_VERSION);
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
            "nodes",
            "reaper_leases",
            "session_commits",
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
async fn a_version_1_database_is_upgraded_keeping_its_session_records() {
    let Some(scratch) = scratch().await else {
        return;
    };
    // Version 1's session tables, with one retryable write's record of two statements and a
    // transaction's header without statements.
    let bson = |document: bson::Document| bson::to_vec(&document).unwrap();
    {
        let database = scratch.connect(1).await;
        let client = database.client().await.unwrap();
        client
            .batch_execute(
                "DROP TABLE tideway.session_commits;
                 ALTER TABLE tideway.sessions DROP COLUMN txn_number, DROP COLUMN stmt_ids,
                    DROP COLUMN bodies;
                 ALTER TABLE tideway.sessions ALTER COLUMN header SET NOT NULL;
                 CREATE TABLE tideway.session_statements (
                    key bytea NOT NULL, txn_number bigint NOT NULL, stmt_id integer NOT NULL,
                    body bytea NOT NULL, PRIMARY KEY (key, txn_number, stmt_id));
                 ALTER TABLE tideway.collections DROP COLUMN version;
                 DROP TABLE tideway.nodes, tideway.reaper_leases;
                 UPDATE tideway.meta SET value = 1 WHERE name = 'schema_version'",
            )
            .await
            .unwrap();
        for (key, txn) in [(&b"write"[..], 7_i64), (&b"txn"[..], 3)] {
            client
                .execute(
                    "INSERT INTO tideway.sessions (key, header) VALUES ($1, $2)",
                    &[&key, &bson(bson::doc! {"txnNumber": txn})],
                )
                .await
                .unwrap();
        }
        for (stmt_id, reply) in [(0, bson::doc! {"n": 1}), (1, bson::doc! {"n": 2})] {
            client
                .execute(
                    "INSERT INTO tideway.session_statements VALUES ($1, 7, $2, $3)",
                    &[&&b"write"[..], &stmt_id, &bson(reply)],
                )
                .await
                .unwrap();
        }
    }
    let (storage, _client) = open_upgraded(&scratch).await;
    use tideway_storage::{Namespace, SessionClaim, Storage, StorageError, WriteOptions};
    assert_eq!(
        storage.session_record(b"write").await.unwrap(),
        Some(bson::doc! {"txnNumber": 7_i64})
    );
    assert_eq!(
        storage.session_statements(b"write", 7).await.unwrap(),
        [(0, bson::doc! {"n": 1}), (1, bson::doc! {"n": 2})]
    );
    async fn claimed(
        storage: &tideway_postgres::PgStorage,
        key: &[u8],
        txn_number: i64,
    ) -> Result<(), StorageError> {
        let claim = SessionClaim {
            key: key.to_vec(),
            txn_number,
        };
        let options = WriteOptions {
            ordered: true,
            force_durable: false,
            background: false,
        };
        storage
            .write_recorded(
                &Namespace::new("upgraded", "c"),
                Vec::new(),
                options,
                Some(claim),
                Box::new(|_, _| None),
            )
            .await
            .map(|_| ())
    }
    // The retryable write's number was found from its statements; the transaction's was not,
    // so its next claim is refused (the caller then reads the header).
    assert!(matches!(
        claimed(&storage, b"write", 7).await,
        Err(StorageError::TxnNumberUsed)
    ));
    assert!(claimed(&storage, b"write", 8).await.is_ok());
    assert!(matches!(
        claimed(&storage, b"txn", 4).await,
        Err(StorageError::TxnNumberUsed)
    ));
    drop(storage);
    scratch.drop_database().await;
}

#[tokio::test]
async fn a_version_2_database_is_upgraded_to_revision_blocks_that_continue_its_revisions() {
    let Some(scratch) = scratch().await else {
        return;
    };
    use tideway_storage::{Namespace, Storage, WriteMeta, WriteOp, WriteOptions};
    let ns = Namespace::new("upgraded", "c");
    let options = WriteOptions {
        ordered: true,
        force_durable: false,
        background: false,
    };
    let insert = |id: i32| WriteOp::Insert {
        doc: bson::doc! {"_id": id},
        meta: WriteMeta {
            last_write_ms: 0,
            ttl: tideway_storage::TtlClass::Default,
        },
        supersede: None,
    };
    let rev = |result: tideway_storage::StorageResult<tideway_storage::WriteOutcome>| match result {
        Ok(tideway_storage::WriteOutcome::Inserted { rev, .. }) => rev,
        other => panic!("expected an insert, got {other:?}"),
    };
    // Version 2: a sequence that increments by one, which has handed out revisions up to 5,000.
    {
        let database = scratch.connect(1).await;
        let client = database.client().await.unwrap();
        client
            .batch_execute(
                "ALTER SEQUENCE tideway.revisions INCREMENT BY 1;
                 SELECT setval('tideway.revisions', 5000);
                 ALTER TABLE tideway.collections DROP COLUMN version;
                 DROP TABLE tideway.nodes, tideway.reaper_leases;
                 UPDATE tideway.meta SET value = 2 WHERE name = 'schema_version'",
            )
            .await
            .unwrap();
    }
    let (storage, client) = open_upgraded(&scratch).await;
    let increment: i64 = client
        .query_one(
            "SELECT increment_by FROM pg_sequences
             WHERE schemaname = 'tideway' AND sequencename = 'revisions'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(increment, 1024);
    let after: Vec<u64> = storage
        .write(&ns, vec![insert(2), insert(3)], options)
        .await
        .unwrap()
        .into_iter()
        .map(rev)
        .collect();
    assert!(
        5000 < after[0] && after[0] < after[1],
        "revisions continue after 5,000: {after:?}"
    );
    drop(storage);
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
