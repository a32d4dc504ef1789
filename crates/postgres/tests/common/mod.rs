//! What the PostgreSQL tests share: the test server's URI and scratch databases.
#![allow(dead_code)]

use tideway_postgres::Database;
use tokio_postgres::NoTls;

/// The server's URI, if the environment names one.
pub fn server_uri() -> Option<String> {
    match std::env::var("TIDEWAY_TEST_PG_URI") {
        Ok(uri) => Some(uri),
        Err(_) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TIDEWAY_TEST_PG_URI is unset: .ci/run starts a cluster and sets it")
        }
        Err(_) => {
            eprintln!("TIDEWAY_TEST_PG_URI is unset: PostgreSQL tests skipped");
            None
        }
    }
}

/// A fresh database on the test server ([`server_uri`]), if there is one; dropped by
/// [`Scratch::drop_database`] (which ends the connections still open to it).
pub async fn scratch() -> Option<Scratch> {
    let server = server_uri()?;
    Some(Scratch::create(&server).await)
}

/// What [`Database::connect`] to `uri` fails with, as text (it must fail).
pub async fn refusal(uri: &str) -> String {
    match Database::connect(uri, 1).await {
        Ok(_) => panic!("connecting to {uri} succeeded"),
        Err(error) => error.to_string(),
    }
}

/// A database of its own for one test.
pub struct Scratch {
    admin: tokio_postgres::Client,
    name: String,
    /// The test server's URI.
    pub server: String,
    /// This database's URI.
    pub uri: String,
}

impl Scratch {
    async fn create(server: &str) -> Scratch {
        let (admin, connection) = tokio_postgres::connect(server, NoTls)
            .await
            .expect("test server");
        tokio::spawn(connection);
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let uri = tideway_postgres::uri_with_database(server, &name);
        Scratch {
            admin,
            name,
            server: server.to_string(),
            uri,
        }
    }

    /// Connects with a pool of `pool_size`, creating or checking the schema.
    pub async fn connect(&self, pool_size: usize) -> Database {
        Database::connect(&self.uri, pool_size)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }

    pub async fn drop_database(self) {
        self.admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .unwrap();
    }
}

/// The password in `uri`'s user information ("" without one).
pub fn password_of(uri: &str) -> String {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .and_then(|(user_info, _)| user_info.split_once(':'))
        .map(|(_, password)| password.to_string())
        .unwrap_or_default()
}

/// `uri` with its user information's password replaced (`None` if it has none).
pub fn with_password(uri: &str, password: &str) -> Option<String> {
    let old = password_of(uri);
    (!old.is_empty()).then(|| uri.replacen(&format!(":{old}@"), &format!(":{password}@"), 1))
}
