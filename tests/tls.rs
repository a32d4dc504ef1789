//! TLS through the official driver: a test CA, a server certificate for 127.0.0.1/localhost and a
//! client certificate are generated with rcgen for each test; the expected behaviour of each mode
//! is mongod's (`--tlsMode` in the manual's "mongod" options page; "Configure mongod and mongos
//! for TLS/SSL"), and of `--tlsCAFile` / `--tlsAllowConnectionsWithoutCertificates` ("TLS/SSL
//! Configuration for Clients": with a CA file, clients must present a certificate unless
//! connections without one are allowed).

mod common;

use std::time::Duration;

use bson::doc;
use mongodb::Client;

use common::pki::{tls_client, Pki};
use common::{client_options, test_config, TestServer};
use tideway::config::TlsMode;
use tideway::Config;

fn plain_client(server: &TestServer) -> Client {
    let mut options = client_options(&server.addr);
    options.server_selection_timeout = Some(Duration::from_secs(2));
    Client::with_options(options).unwrap()
}

async fn ping(client: &Client) -> mongodb::error::Result<bson::Document> {
    client.database("admin").run_command(doc! {"ping": 1}).await
}

#[tokio::test]
async fn require_tls_serves_tls_clients_and_refuses_plain_ones() {
    let pki = Pki::new();
    let server = TestServer::start_with(pki.config(TlsMode::RequireTls)).await;
    let client = tls_client(&server, &pki.ca, None);
    assert_eq!(ping(&client).await.unwrap().get_f64("ok").unwrap(), 1.0);
    let collection = client.database("app").collection::<bson::Document>("items");
    collection.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(collection.count_documents(doc! {}).await.unwrap(), 1);

    let error = ping(&plain_client(&server)).await.unwrap_err();
    assert!(
        matches!(
            *error.kind,
            mongodb::error::ErrorKind::ServerSelection { .. }
        ),
        "a plain connection is closed: {error}"
    );
    let status = client
        .database("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .unwrap();
    let security = status.get_document("transportSecurity").unwrap();
    assert!(
        security.get_i64("1.2").unwrap() + security.get_i64("1.3").unwrap() >= 1,
        "{security}"
    );
    server.stop().await;
}

#[tokio::test]
async fn prefer_tls_and_allow_tls_accept_plain_and_tls_on_one_port() {
    let pki = Pki::new();
    for mode in [TlsMode::PreferTls, TlsMode::AllowTls] {
        let server = TestServer::start_with(pki.config(mode)).await;
        ping(&tls_client(&server, &pki.ca, None)).await.unwrap();
        ping(&plain_client(&server)).await.unwrap();
        server.stop().await;
    }
}

#[tokio::test]
async fn a_ca_file_requires_a_client_certificate_it_signed() {
    let pki = Pki::new();
    let other = Pki::in_dir(tempfile::tempdir().unwrap(), "other-");
    let config = Config {
        tls_ca_file: Some(pki.ca.clone()),
        ..pki.config(TlsMode::RequireTls)
    };
    let server = TestServer::start_with(config).await;
    ping(&tls_client(&server, &pki.ca, Some(&pki.client)))
        .await
        .unwrap();
    // mongod: "no SSL certificate provided by peer; connection rejected".
    assert!(ping(&tls_client(&server, &pki.ca, None)).await.is_err());
    // A certificate from another CA fails verification.
    assert!(ping(&tls_client(&server, &pki.ca, Some(&other.client)))
        .await
        .is_err());
    server.stop().await;
}

#[tokio::test]
async fn allow_connections_without_certificates_still_verifies_presented_ones() {
    let pki = Pki::new();
    let other = Pki::in_dir(tempfile::tempdir().unwrap(), "other-");
    let config = Config {
        tls_ca_file: Some(pki.ca.clone()),
        tls_allow_connections_without_certificates: true,
        ..pki.config(TlsMode::RequireTls)
    };
    let server = TestServer::start_with(config).await;
    ping(&tls_client(&server, &pki.ca, None)).await.unwrap();
    ping(&tls_client(&server, &pki.ca, Some(&pki.client)))
        .await
        .unwrap();
    assert!(ping(&tls_client(&server, &pki.ca, Some(&other.client)))
        .await
        .is_err());
    server.stop().await;
}

#[tokio::test]
async fn a_reload_serves_the_new_certificate_without_dropping_connections() {
    let pki = Pki::new();
    let server = TestServer::start_with(pki.config(TlsMode::RequireTls)).await;
    let before = tls_client(&server, &pki.ca, None);
    ping(&before).await.unwrap();
    // Replace the certificate key file with one from another CA, then reload (what SIGHUP does).
    let dir = pki.dir.path().to_path_buf();
    let renewed = Pki::in_dir(tempfile::tempdir().unwrap(), "renewed-");
    std::fs::copy(&renewed.server, dir.join("server.pem")).unwrap();
    server.state.tls.as_ref().unwrap().reload().unwrap();
    ping(&tls_client(&server, &renewed.ca, None)).await.unwrap();
    assert!(ping(&tls_client(&server, &pki.ca, None)).await.is_err());
    // The connection made before the reload goes on.
    ping(&before).await.unwrap();
    // A broken file is refused and the certificate in force stays.
    std::fs::write(dir.join("server.pem"), "not a certificate").unwrap();
    assert!(server.state.tls.as_ref().unwrap().reload().is_err());
    ping(&tls_client(&server, &renewed.ca, None)).await.unwrap();
    server.stop().await;
}

/// A real SIGHUP to this process reloads the files (tokio's handler is process-wide: the test
/// registers one first, so the signal can never take the default action and end the process;
/// it is raised again until the server's own listener, started with the server, has seen one).
#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_certificate() {
    let mut hangups =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).unwrap();
    let pki = Pki::new();
    let server = TestServer::start_with(pki.config(TlsMode::RequireTls)).await;
    let renewed = Pki::in_dir(tempfile::tempdir().unwrap(), "renewed-");
    std::fs::copy(&renewed.server, &pki.server).unwrap();
    let mut reloaded = false;
    for _ in 0..100 {
        // SAFETY: raising a signal whose handler is installed (above) has no other effect.
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        hangups.recv().await;
        if ping(&tls_client(&server, &renewed.ca, None)).await.is_ok() {
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "the renewed certificate is served after SIGHUP");
    server.stop().await;
}

#[tokio::test]
async fn get_cmd_line_opts_shows_the_tls_settings() {
    let pki = Pki::new();
    let config = Config {
        tls_ca_file: Some(pki.ca.clone()),
        tls_allow_connections_without_certificates: true,
        ..pki.config(TlsMode::PreferTls)
    };
    let server = TestServer::start_with(config).await;
    let opts = ping_admin(
        &tls_client(&server, &pki.ca, None),
        doc! {"getCmdLineOpts": 1},
    )
    .await;
    let tls = opts
        .get_document("parsed")
        .unwrap()
        .get_document("net")
        .unwrap()
        .get_document("tls")
        .unwrap();
    assert_eq!(tls.get_str("mode").unwrap(), "preferTLS");
    assert_eq!(
        tls.get_str("certificateKeyFile").unwrap(),
        pki.server.to_str().unwrap()
    );
    assert_eq!(tls.get_str("CAFile").unwrap(), pki.ca.to_str().unwrap());
    assert!(tls.get_bool("allowConnectionsWithoutCertificates").unwrap());
    server.stop().await;
}

async fn ping_admin(client: &Client, command: bson::Document) -> bson::Document {
    client.database("admin").run_command(command).await.unwrap()
}

#[test]
fn inconsistent_settings_are_refused_as_mongod_refuses_them() {
    let pki = Pki::new();
    let build = |config: &Config| {
        let storage =
            std::sync::Arc::new(tideway_storage::redb_engine::RedbStorage::in_memory().unwrap());
        tideway::ServerState::new(
            config.clone(),
            std::sync::Arc::new(tideway_base::clock::SystemClock::default()),
            storage,
        )
        .map(|_| ())
        .unwrap_err()
    };
    let no_key_file = Config {
        tls_mode: TlsMode::RequireTls,
        ..test_config()
    };
    assert_eq!(
        build(&no_key_file).errmsg,
        "need tlsCertificateKeyFile or certificateSelector when TLS is enabled"
    );
    let disabled_with_files = Config {
        tls_ca_file: Some(pki.ca.clone()),
        ..test_config()
    };
    assert_eq!(
        build(&disabled_with_files).errmsg,
        "need to enable TLS via the sslMode/tlsMode flag when using TLS configuration parameters"
    );
    let missing = Config {
        tls_certificate_key_file: Some(pki.dir.path().join("missing.pem")),
        ..pki.config(TlsMode::RequireTls)
    };
    // A file that cannot be used: mongod's 140 InvalidSSLConfiguration.
    let error = build(&missing);
    assert_eq!(error.code.code(), 140);
    assert!(error.errmsg.contains("missing.pem"));
    // The CA file alone has no key.
    let key_missing = Config {
        tls_certificate_key_file: Some(pki.ca.clone()),
        ..pki.config(TlsMode::RequireTls)
    };
    let error = build(&key_missing);
    assert_eq!(error.code.code(), 140);
    assert!(error.errmsg.contains("private key"));
}

/// mongod names an X.509 user by the subject in RFC 2253 form: the last RDN of the encoded
/// subject first (the manual's example `CN=myName,OU=myOrgUnit,O=myOrg,...`).
#[test]
fn the_client_certificate_subject_is_in_rfc2253_form() {
    let pki = Pki::new();
    let pem = std::fs::read(&pki.client).unwrap();
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap();
    assert_eq!(
        tideway::tls::certificate_subject(&der).as_deref(),
        Some("CN=client,OU=tests,O=tideway")
    );
}
