//! TLS to the database with libpq's `sslmode` and `sslrootcert`. Needs `TIDEWAY_TEST_PG_URI` and
//! `TIDEWAY_TEST_PG_CA` (the CA of the test cluster's certificate, which names 127.0.0.1 and
//! localhost; `.ci/pg-cluster` makes both, and an unrelated `other-ca.pem` beside the CA).

mod common;

use common::{refusal, server_uri};
use tideway_postgres::Database;

/// The test cluster's CA file, when the URI is set (required then: the cluster always has one).
fn ca_file() -> String {
    std::env::var("TIDEWAY_TEST_PG_CA")
        .expect("TIDEWAY_TEST_PG_CA names the test cluster's CA (.ci/run sets it)")
}

/// `server` with `parameters` added to its query.
fn with_parameters(server: &str, parameters: &str) -> String {
    match server.contains('?') {
        true => format!("{server}&{parameters}"),
        false => format!("{server}?{parameters}"),
    }
}

/// Whether the pool's connection is encrypted, by the server's own account.
async fn encrypted(database: &Database) -> bool {
    database
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn each_sslmode_negotiates_and_verifies_as_libpq() {
    let Some(server) = server_uri() else { return };
    let ca = ca_file();
    let cases = [
        ("sslmode=disable".to_string(), false),
        ("sslmode=prefer".to_string(), true),
        ("sslmode=require".to_string(), true),
        (format!("sslmode=verify-ca&sslrootcert={ca}"), true),
        (format!("sslmode=verify-full&sslrootcert={ca}"), true),
    ];
    for (parameters, expected) in cases {
        let uri = with_parameters(&server, &parameters);
        let database = Database::connect(&uri, 1)
            .await
            .unwrap_or_else(|error| panic!("{parameters}: {error}"));
        assert_eq!(encrypted(&database).await, expected, "{parameters}");
    }
}

#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some(server) = server_uri() else { return };
    let ca = ca_file();
    // The same server under a name its certificate does not carry: `hostaddr` connects to
    // 127.0.0.1 while TLS checks the name in the URI's host.
    let Some(renamed) = server
        .contains("@127.0.0.1:")
        .then(|| server.replacen("@127.0.0.1:", "@tideway-test.invalid:", 1))
    else {
        return;
    };
    let renamed = with_parameters(&renamed, "hostaddr=127.0.0.1");
    let full = with_parameters(&renamed, &format!("sslmode=verify-full&sslrootcert={ca}"));
    let message = refusal(&full).await;
    assert!(
        message.contains("cannot connect to PostgreSQL"),
        "{message}"
    );
    assert!(
        message.contains("certificate not valid for name \"tideway-test.invalid\""),
        "{message}"
    );
    let chain_only = with_parameters(&renamed, &format!("sslmode=verify-ca&sslrootcert={ca}"));
    let database = Database::connect(&chain_only, 1)
        .await
        .expect("verify-ca ignores the name");
    assert!(encrypted(&database).await);
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let Some(server) = server_uri() else { return };
    // A CA that signed nothing the server has (made beside the test CA by `.ci/pg-cluster`).
    let other_ca = std::path::Path::new(&ca_file()).with_file_name("other-ca.pem");
    let other_ca = other_ca.display();
    let uri = with_parameters(
        &server,
        &format!("sslmode=verify-ca&sslrootcert={other_ca}"),
    );
    let message = refusal(&uri).await;
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
    assert!(
        !message.contains(&common::password_of(&server)),
        "{message}"
    );
}
