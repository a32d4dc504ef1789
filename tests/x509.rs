//! MONGODB-X509 through the official driver (`AuthMechanism::MongoDbX509` with a client
//! certificate, which authenticates speculatively inside `hello`) and through raw commands on
//! one connection: `authenticate`, hello's `speculativeAuthenticate` and `saslSupportedMechs`,
//! `$external` users, `connectionStatus`, and `rotateCertificates`. Expected codes and messages
//! are mongod's: `authentication_commands.cpp` (`_authenticateX509`, `CmdAuthenticate`, which
//! lets only ProtocolError and UserNotFound through and answers 18 "Authentication failed." for
//! everything else), `authentication_commands.idl` (the reply `{dbname, user}`),
//! `user_management_commands.cpp` (createUser/updateUser on `$external`, usersInfo's
//! `mechanisms` = the credential names), `authz_manager_external_state_local.cpp` (UserNotFound's
//! message), `sasl_x509_server_conversation.h` (`X509ServerFactory`: MONGODB-X509 for external
//! users) and `rotate_certificates_command.cpp` / the manual's rotateCertificates page.

mod common;

use bson::{doc, Bson, Document};
use mongodb::options::{AuthMechanism, Credential};
use mongodb::Client;

use common::pki::{tls_options, Pki, CLIENT_SUBJECT};
use common::{command_error, TestServer};
use tideway::config::TlsMode;
use tideway::Config;

const EXTERNAL: &str = "$external";

/// A server requiring TLS with client certificates from `pki`'s CA (`allow_without`: also
/// connections without one).
async fn start(pki: &Pki, allow_without: bool) -> TestServer {
    let config = Config {
        tls_ca_file: Some(pki.ca.clone()),
        tls_allow_connections_without_certificates: allow_without,
        ..pki.config(TlsMode::RequireTls)
    };
    TestServer::start_with(config).await
}

/// A client presenting `pki`'s client certificate (or none), not authenticated, on one
/// connection so that raw `authenticate` and what follows share it.
fn one_connection(server: &TestServer, pki: &Pki, certificate: bool) -> Client {
    let mut options = tls_options(server, &pki.ca, certificate.then_some(pki.client.as_path()));
    options.max_pool_size = Some(1);
    Client::with_options(options).unwrap()
}

/// A client that authenticates with MONGODB-X509 (`user`: the optional user name it sends).
fn x509_client(server: &TestServer, pki: &Pki, user: Option<&str>) -> Client {
    let mut options = tls_options(server, &pki.ca, Some(&pki.client));
    options.credential = Some(
        Credential::builder()
            .mechanism(AuthMechanism::MongoDbX509)
            .username(user.map(str::to_owned))
            .build(),
    );
    Client::with_options(options).unwrap()
}

async fn run(client: &Client, db: &str, command: Document) -> mongodb::error::Result<Document> {
    client.database(db).run_command(command).await
}

async fn create_external_user(client: &Client) {
    run(
        client,
        EXTERNAL,
        doc! {"createUser": CLIENT_SUBJECT, "roles": [{"role": "readWrite", "db": "app"}]},
    )
    .await
    .unwrap();
}

fn authenticated_users(status: &Document) -> Vec<Bson> {
    status
        .get_document("authInfo")
        .unwrap()
        .get_array("authenticatedUsers")
        .unwrap()
        .clone()
}

fn x509_request(user: Option<&str>) -> Document {
    let mut request = doc! {"authenticate": 1, "mechanism": "MONGODB-X509"};
    if let Some(user) = user {
        request.insert("user", user);
    }
    request
}

#[tokio::test]
async fn the_driver_authenticates_with_a_client_certificate() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    create_external_user(&one_connection(&server, &pki, true)).await;

    {
        let client = x509_client(&server, &pki, None);
        let items = client.database("app").collection::<Document>("items");
        items.insert_one(doc! {"n": 1}).await.unwrap();
        assert!(items.count_documents(doc! {}).await.unwrap() >= 1);
        let status = run(&client, "admin", doc! {"connectionStatus": 1})
            .await
            .unwrap();
        assert_eq!(
            authenticated_users(&status),
            vec![Bson::Document(
                doc! {"user": CLIENT_SUBJECT, "db": EXTERNAL}
            )]
        );
    }

    // The driver (3.9) sends a credential's user name as `username`, a field mongod's strict
    // `authenticate` does not know (40415; the speculative attempt fails silently on it too):
    // its login fails whatever the name (the driver reports no code).
    let error = x509_client(&server, &pki, Some(CLIENT_SUBJECT))
        .database("app")
        .collection::<Document>("items")
        .count_documents(doc! {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            *error.kind,
            mongodb::error::ErrorKind::Authentication { .. }
        ),
        "{error:?}"
    );
    let (code, _, message) = command_error(
        run(
            &one_connection(&server, &pki, true),
            EXTERNAL,
            doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "username": CLIENT_SUBJECT},
        )
        .await,
    );
    assert_eq!(code, 40415, "{message}");
    server.stop().await;
}

#[tokio::test]
async fn authenticate_answers_as_mongod() {
    let pki = Pki::new();
    let server = start(&pki, true).await;
    let client = one_connection(&server, &pki, true);

    // No such user on $external yet: UserNotFound passes through, as mongod.
    let (code, name, message) = command_error(run(&client, EXTERNAL, x509_request(None)).await);
    assert_eq!((code, name.as_str()), (11, "UserNotFound"));
    assert_eq!(
        message,
        format!("Could not find user \"{CLIENT_SUBJECT}\" for db \"$external\"")
    );

    create_external_user(&client).await;
    // Another database: mongod's ProtocolError.
    let (code, _, message) = command_error(run(&client, "app", x509_request(None)).await);
    assert_eq!(code, 17);
    assert_eq!(
        message,
        "X.509 authentication must always use the $external database."
    );
    // A user that is not the certificate's subject, another mechanism, an empty one: 18.
    for request in [
        x509_request(Some("CN=someone-else")),
        doc! {"authenticate": 1, "mechanism": "SCRAM-SHA-256", "user": CLIENT_SUBJECT},
        doc! {"authenticate": 1, "mechanism": ""},
    ] {
        let (code, _, message) = command_error(run(&client, EXTERNAL, request.clone()).await);
        assert_eq!(
            (code, message.as_str()),
            (18, "Authentication failed."),
            "{request}"
        );
    }
    // mongod's IDL: `mechanism` is required, `user` a string, no other field.
    let (code, _, _) = command_error(run(&client, EXTERNAL, doc! {"authenticate": 1}).await);
    assert_eq!(code, 40414);
    let (code, _, _) = command_error(
        run(
            &client,
            EXTERNAL,
            doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "user": 1},
        )
        .await,
    );
    assert_eq!(code, 14);

    // Success: mongod's AuthenticateReply, and the connection now has the user.
    let reply = run(&client, EXTERNAL, x509_request(Some(CLIENT_SUBJECT)))
        .await
        .unwrap();
    assert_eq!(reply.get_str("dbname").unwrap(), EXTERNAL);
    assert_eq!(reply.get_str("user").unwrap(), CLIENT_SUBJECT);
    let status = run(&client, "admin", doc! {"connectionStatus": 1})
        .await
        .unwrap();
    assert_eq!(
        authenticated_users(&status),
        vec![Bson::Document(
            doc! {"user": CLIENT_SUBJECT, "db": EXTERNAL}
        )]
    );
    assert_eq!(
        status
            .get_document("authInfo")
            .unwrap()
            .get_array("authenticatedUserRoles")
            .unwrap(),
        &vec![Bson::Document(doc! {"role": "readWrite", "db": "app"})]
    );

    // Without a client certificate there is no subject: 18.
    let anonymous = one_connection(&server, &pki, false);
    let (code, _, message) = command_error(run(&anonymous, EXTERNAL, x509_request(None)).await);
    assert_eq!((code, message.as_str()), (18, "Authentication failed."));
    server.stop().await;
}

#[tokio::test]
async fn hello_authenticates_speculatively_and_names_the_mechanism() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    let client = one_connection(&server, &pki, true);
    let speculative = doc! {
        "hello": 1,
        "speculativeAuthenticate": {"authenticate": 1, "mechanism": "MONGODB-X509", "db": EXTERNAL},
    };
    // No user yet: the failure answers nothing, as mongod.
    let reply = run(&client, "admin", speculative.clone()).await.unwrap();
    assert!(!reply.contains_key("speculativeAuthenticate"), "{reply}");

    create_external_user(&client).await;
    let reply = run(&client, "admin", speculative).await.unwrap();
    assert_eq!(
        reply.get_document("speculativeAuthenticate").unwrap(),
        &doc! {"dbname": EXTERNAL, "user": CLIENT_SUBJECT}
    );
    let status = run(&client, "admin", doc! {"connectionStatus": 1})
        .await
        .unwrap();
    assert_eq!(authenticated_users(&status).len(), 1);

    let reply = run(
        &client,
        "admin",
        doc! {"hello": 1, "saslSupportedMechs": format!("$external.{CLIENT_SUBJECT}")},
    )
    .await
    .unwrap();
    assert_eq!(
        reply.get_array("saslSupportedMechs").unwrap(),
        &vec![Bson::from("MONGODB-X509")]
    );
    server.stop().await;
}

#[tokio::test]
async fn external_users_have_no_password_and_others_need_one() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    let client = one_connection(&server, &pki, true);
    create_external_user(&client).await;

    let info = run(
        &client,
        EXTERNAL,
        doc! {"usersInfo": CLIENT_SUBJECT, "showCredentials": true},
    )
    .await
    .unwrap();
    let user = info.get_array("users").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        user.get_str("_id").unwrap(),
        format!("$external.{CLIENT_SUBJECT}")
    );
    assert_eq!(
        user.get_document("credentials").unwrap(),
        &doc! {"external": true}
    );
    assert_eq!(
        user.get_array("mechanisms").unwrap(),
        &vec![Bson::from("external")]
    );

    let (code, _, message) = command_error(
        run(
            &client,
            EXTERNAL,
            doc! {"createUser": "CN=other", "pwd": "secret", "roles": []},
        )
        .await,
    );
    assert_eq!(code, 2);
    assert_eq!(
        message,
        "Cannot set the password for users defined on the '$external' database"
    );
    let (code, _, message) = command_error(
        run(
            &client,
            EXTERNAL,
            doc! {"updateUser": CLIENT_SUBJECT, "pwd": "secret"},
        )
        .await,
    );
    assert_eq!(code, 2);
    assert_eq!(
        message,
        "Cannot set the password for users defined on the '$external' database"
    );
    let (code, _, message) =
        command_error(run(&client, "app", doc! {"createUser": "nopwd", "roles": []}).await);
    assert_eq!(code, 2);
    assert_eq!(message, "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db");
    server.stop().await;
}

#[tokio::test]
async fn rotate_certificates_reloads_the_files_for_new_connections() {
    let pki = Pki::new();
    let server = TestServer::start_with(pki.config(TlsMode::RequireTls)).await;
    let before = Client::with_options(tls_options(&server, &pki.ca, None)).unwrap();
    run(&before, "admin", doc! {"ping": 1}).await.unwrap();

    let renewed = Pki::in_dir(tempfile::tempdir().unwrap(), "renewed-");
    std::fs::copy(&renewed.server, &pki.server).unwrap();
    let reply = run(
        &before,
        "admin",
        doc! {"rotateCertificates": 1, "message": "renewed"},
    )
    .await
    .unwrap();
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0);
    let after = Client::with_options(tls_options(&server, &renewed.ca, None)).unwrap();
    run(&after, "admin", doc! {"ping": 1}).await.unwrap();
    // The connection made before goes on.
    run(&before, "admin", doc! {"ping": 1}).await.unwrap();

    // Admin only; `message` a string (mongod's IDL).
    let (code, _, _) = command_error(run(&before, "app", doc! {"rotateCertificates": 1}).await);
    assert_eq!(code, 13);
    let (code, _, _) = command_error(
        run(
            &before,
            "admin",
            doc! {"rotateCertificates": 1, "message": 5},
        )
        .await,
    );
    assert_eq!(code, 14);
    // A file that cannot be used: 140, and the certificate in force stays.
    std::fs::write(&pki.server, "not a certificate").unwrap();
    let (code, _, _) = command_error(run(&before, "admin", doc! {"rotateCertificates": 1}).await);
    assert_eq!(code, 140);
    let again = Client::with_options(tls_options(&server, &renewed.ca, None)).unwrap();
    run(&again, "admin", doc! {"ping": 1}).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn rotate_certificates_without_tls_succeeds_as_mongod() {
    let server = TestServer::start().await;
    let reply = run(&server.client(), "admin", doc! {"rotateCertificates": 1})
        .await
        .unwrap();
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0);
    server.stop().await;
}
