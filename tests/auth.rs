//! SCRAM authentication and users through the official driver: users created with
//! `createUser` log in with SCRAM-SHA-256 and SCRAM-SHA-1 (the driver speculates inside `hello`
//! and negotiates with `saslSupportedMechs`), a wrong password is refused with mongod's 18, the
//! stored document holds mongod's credential fields and never the password, and the user
//! commands (`usersInfo`, `updateUser`, `dropUser`, roles) change what a login finds.
//! Expected codes and messages are mongod's (user_management_commands.cpp, sasl_commands.cpp,
//! jstests/core/administrative/user_management_helpers.js).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use mongodb::options::{ClientOptions, Credential};
use mongodb::Client;

fn client_as(server: &TestServer, user: &str, pwd: &str, mechanism: Option<&str>) -> Client {
    Client::with_options(options_as(server, user, pwd, mechanism)).expect("client options")
}

fn options_as(
    server: &TestServer,
    user: &str,
    pwd: &str,
    mechanism: Option<&str>,
) -> ClientOptions {
    let mut options: ClientOptions = server.options();
    let mut credential = Credential::builder()
        .username(user.to_owned())
        .password(pwd.to_owned())
        .source("admin".to_owned())
        .build();
    credential.mechanism = mechanism.map(|name| name.parse().expect("a mechanism"));
    options.credential = Some(credential);
    options
}

async fn admin(client: &Client, command: Document) -> mongodb::error::Result<Document> {
    client.database("admin").run_command(command).await
}

async fn connection_status(client: &Client) -> Document {
    admin(client, doc! {"connectionStatus": 1})
        .await
        .expect("connectionStatus")
        .get_document("authInfo")
        .expect("authInfo")
        .clone()
}

/// The login error's code: 18 AuthenticationFailed for a wrong password (mongod masks the
/// reason as "Authentication failed.").
fn assert_authentication_failed(error: mongodb::error::Error) {
    let text = format!("{error:?}");
    assert!(
        text.contains("code: 18") && text.contains("Authentication failed."),
        "{text}"
    );
}

#[tokio::test]
async fn scram_sha_256_and_sha_1_logins_and_a_wrong_password() {
    let server = TestServer::start().await;
    let owner = server.client();
    admin(
        &owner,
        doc! {"createUser": "alice", "pwd": "s3cret", "roles": [{"role": "readWrite", "db": "app"}]},
    )
    .await
    .expect("createUser");

    for mechanism in [Some("SCRAM-SHA-256"), Some("SCRAM-SHA-1"), None] {
        let alice = client_as(&server, "alice", "s3cret", mechanism);
        alice
            .database("app")
            .collection::<Document>("things")
            .insert_one(doc! {"x": 1})
            .await
            .unwrap_or_else(|error| panic!("{mechanism:?} login: {error}"));
        let info = connection_status(&alice).await;
        assert_eq!(
            info.get_array("authenticatedUsers").unwrap(),
            &vec![Bson::Document(doc! {"user": "alice", "db": "admin"})]
        );
        assert_eq!(
            info.get_array("authenticatedUserRoles").unwrap(),
            &vec![Bson::Document(doc! {"role": "readWrite", "db": "app"})]
        );
    }

    let intruder = client_as(&server, "alice", "wrong", Some("SCRAM-SHA-256"));
    let error = admin(&intruder, doc! {"ping": 1})
        .await
        .expect_err("refused");
    assert_authentication_failed(error);
    let nobody = client_as(&server, "nobody", "s3cret", Some("SCRAM-SHA-1"));
    let error = admin(&nobody, doc! {"ping": 1}).await.expect_err("refused");
    assert_authentication_failed(error);

    // An unauthenticated connection has no users (enforcement is a later step).
    let info = connection_status(&owner).await;
    assert_eq!(
        info.get_array("authenticatedUsers").unwrap(),
        &Vec::<Bson>::new()
    );
    server.stop().await;
}

#[tokio::test]
async fn stored_user_has_mongods_credentials_and_no_password() {
    let server = TestServer::start().await;
    let client = server.client();
    admin(
        &client,
        doc! {"createUser": "bob", "pwd": "pencil", "roles": ["root"]},
    )
    .await
    .expect("createUser");
    let stored = client
        .database("admin")
        .collection::<Document>("system.users")
        .find_one(doc! {"_id": "admin.bob"})
        .await
        .expect("find")
        .expect("the user document");
    assert_eq!(stored.get_str("user").unwrap(), "bob");
    assert_eq!(stored.get_str("db").unwrap(), "admin");
    assert!(
        matches!(stored.get("userId"), Some(Bson::Binary(b)) if b.subtype == bson::spec::BinarySubtype::Uuid)
    );
    assert_eq!(
        stored.get_array("roles").unwrap(),
        &vec![Bson::Document(doc! {"role": "root", "db": "admin"})]
    );
    let credentials = stored.get_document("credentials").unwrap();
    for (mechanism, iterations, salt_len, key_len) in [
        ("SCRAM-SHA-1", 10000, 16, 20),
        ("SCRAM-SHA-256", 15000, 28, 32),
    ] {
        let credential = credentials.get_document(mechanism).unwrap();
        assert_eq!(credential.get_i32("iterationCount").unwrap(), iterations);
        let decoded = |field: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(credential.get_str(field).unwrap())
                .unwrap()
                .len()
        };
        assert_eq!(decoded("salt"), salt_len);
        assert_eq!(decoded("storedKey"), key_len);
        assert_eq!(decoded("serverKey"), key_len);
    }
    let text = format!("{stored:?}");
    assert!(!text.contains("pencil") && !text.contains("pwd"), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn create_user_errors_are_mongods() {
    let server = TestServer::start().await;
    let db = server.client().database("test");
    db.run_command(doc! {"createUser": "carol", "pwd": "x", "roles": []})
        .await
        .expect("createUser");
    assert_eq!(
        command_error(
            db.run_command(doc! {"createUser": "carol", "pwd": "y", "roles": []})
                .await
        ),
        (
            51003,
            "Location51003".to_owned(),
            "User \"carol@test\" already exists".to_owned()
        )
    );
    let (code, _, message) = command_error(
        db.run_command(doc! {"createUser": "dave", "roles": []})
            .await,
    );
    assert_eq!(code, 2);
    assert_eq!(message, "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db");
    // Built-in roles only; the *AnyDatabase roles exist only on admin.
    let (code, name, message) = command_error(
        db.run_command(doc! {"createUser": "dave", "pwd": "x", "roles": ["readAnyDatabase"]})
            .await,
    );
    assert_eq!((code, name.as_str()), (31, "RoleNotFound"));
    assert_eq!(message, "Could not find role: readAnyDatabase@test");
    let (code, _, message) = command_error(
        db.run_command(doc! {"createUser": "dave", "pwd": "x", "roles": [], "mechanisms": []})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (2, "mechanisms field must not be empty")
    );
    let (code, _, _) = command_error(
        db.run_command(doc! {"createUser": "dave", "pwd": "x", "roles": [], "bogus": 1})
            .await,
    );
    assert_eq!(code, 40415);
    server.stop().await;
}

#[tokio::test]
async fn users_info_update_and_drop() {
    let server = TestServer::start().await;
    let owner = server.client();
    admin(&owner, doc! {"createUser": "erin", "pwd": "old", "roles": ["read"], "mechanisms": ["SCRAM-SHA-256"]})
        .await
        .expect("createUser");
    admin(
        &owner,
        doc! {"createUser": "frank", "pwd": "pw", "roles": []},
    )
    .await
    .expect("createUser");

    let info = admin(&owner, doc! {"usersInfo": "erin"}).await.unwrap();
    let users = info.get_array("users").unwrap();
    assert_eq!(users.len(), 1);
    let erin = users[0].as_document().unwrap();
    assert_eq!(erin.get_str("_id").unwrap(), "admin.erin");
    assert_eq!(
        erin.get_array("mechanisms").unwrap(),
        &vec![Bson::from("SCRAM-SHA-256")]
    );
    assert!(!erin.contains_key("credentials"));
    let all = admin(&owner, doc! {"usersInfo": 1}).await.unwrap();
    let names: Vec<&str> = all
        .get_array("users")
        .unwrap()
        .iter()
        .map(|u| u.as_document().unwrap().get_str("user").unwrap())
        .collect();
    assert_eq!(names, ["erin", "frank"]);
    let shown = admin(
        &owner,
        doc! {"usersInfo": {"user": "frank", "db": "admin"}, "showCredentials": true},
    )
    .await
    .unwrap();
    let frank = shown.get_array("users").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert!(frank
        .get_document("credentials")
        .unwrap()
        .contains_key("SCRAM-SHA-1"));

    // A changed password works, the old one no longer does.
    admin(&owner, doc! {"updateUser": "erin", "pwd": "new"})
        .await
        .expect("updateUser");
    admin(
        &client_as(&server, "erin", "new", Some("SCRAM-SHA-256")),
        doc! {"ping": 1},
    )
    .await
    .expect("the new password logs in");
    let error = admin(
        &client_as(&server, "erin", "old", Some("SCRAM-SHA-256")),
        doc! {"ping": 1},
    )
    .await
    .expect_err("the old password is refused");
    assert_authentication_failed(error);

    // Roles granted and revoked show in connectionStatus of a new login.
    admin(
        &owner,
        doc! {"grantRolesToUser": "erin", "roles": [{"role": "readWrite", "db": "app"}]},
    )
    .await
    .expect("grant");
    admin(
        &owner,
        doc! {"revokeRolesFromUser": "erin", "roles": ["read"]},
    )
    .await
    .expect("revoke");
    let erin_client = client_as(&server, "erin", "new", None);
    let status = connection_status(&erin_client).await;
    assert_eq!(
        status.get_array("authenticatedUserRoles").unwrap(),
        &vec![Bson::Document(doc! {"role": "readWrite", "db": "app"})]
    );

    admin(&owner, doc! {"dropUser": "erin"})
        .await
        .expect("dropUser");
    assert_eq!(
        command_error(admin(&owner, doc! {"dropUser": "erin"}).await),
        (
            11,
            "UserNotFound".to_owned(),
            "User 'erin@admin' not found".to_owned()
        )
    );
    let error = admin(&client_as(&server, "erin", "new", None), doc! {"ping": 1})
        .await
        .expect_err("a dropped user cannot log in");
    assert_authentication_failed(error);

    let dropped = admin(&owner, doc! {"dropAllUsersFromDatabase": 1})
        .await
        .unwrap();
    assert_eq!(dropped.get_i32("n").unwrap(), 1);
    let none = admin(&owner, doc! {"usersInfo": 1}).await.unwrap();
    assert!(none.get_array("users").unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn hello_answers_sasl_supported_mechs() {
    let server = TestServer::start().await;
    let client = server.client();
    admin(
        &client,
        doc! {"createUser": "gina", "pwd": "pw", "roles": [], "mechanisms": ["SCRAM-SHA-1"]},
    )
    .await
    .unwrap();
    let hello = admin(
        &client,
        doc! {"hello": 1, "saslSupportedMechs": "admin.gina"},
    )
    .await
    .unwrap();
    assert_eq!(
        hello.get_array("saslSupportedMechs").unwrap(),
        &vec![Bson::from("SCRAM-SHA-1")]
    );
    let hello = admin(
        &client,
        doc! {"hello": 1, "saslSupportedMechs": "admin.nobody"},
    )
    .await
    .unwrap();
    assert!(!hello.contains_key("saslSupportedMechs"));
    // A SHA-1-only user logs in through negotiation (no mechanism in the URI).
    admin(&client_as(&server, "gina", "pw", None), doc! {"ping": 1})
        .await
        .expect("negotiated login");
    server.stop().await;
}

#[tokio::test]
async fn sasl_errors_and_logout() {
    let server = TestServer::start().await;
    let client = server.client();
    let (code, name, message) = command_error(
        admin(
            &client,
            doc! {"saslStart": 1, "mechanism": "PLAIN", "payload": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![] }},
        )
        .await,
    );
    assert_eq!((code, name.as_str()), (334, "MechanismUnavailable"));
    assert_eq!(
        message,
        "Received authentication for mechanism PLAIN which is not enabled"
    );
    let (code, _, message) = command_error(
        admin(
            &client,
            doc! {"saslContinue": 1, "conversationId": 2, "payload": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![] }},
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (17, "sasl: Mismatched conversation id")
    );

    admin(
        &client,
        doc! {"createUser": "hank", "pwd": "pw", "roles": []},
    )
    .await
    .unwrap();
    // A speculative saslStart inside hello is answered inside hello's reply.
    let hello = admin(
        &client,
        doc! {"hello": 1, "speculativeAuthenticate": {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "db": "admin",
            "payload": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"n,,n=hank,r=clientnonce".to_vec() },
            "options": {"skipEmptyExchange": true},
        }},
    )
    .await
    .unwrap();
    let speculative = hello.get_document("speculativeAuthenticate").unwrap();
    assert_eq!(speculative.get_i32("conversationId").unwrap(), 1);
    assert!(!speculative.get_bool("done").unwrap());
    let server_first =
        String::from_utf8(speculative.get_binary_generic("payload").unwrap().clone()).unwrap();
    assert!(
        server_first.starts_with("r=clientnonce") && server_first.ends_with(",i=15000"),
        "{server_first}"
    );

    // One pooled connection, so logout and connectionStatus run where the login happened.
    let mut options = options_as(&server, "hank", "pw", None);
    options.max_pool_size = Some(1);
    let hank = Client::with_options(options).unwrap();
    let status = connection_status(&hank).await;
    assert_eq!(status.get_array("authenticatedUsers").unwrap().len(), 1);
    admin(&hank, doc! {"logout": 1}).await.expect("logout");
    let status = connection_status(&hank).await;
    assert!(status.get_array("authenticatedUsers").unwrap().is_empty());
    server.stop().await;
}

/// A flood of failing logins from many connections at once (all from 127.0.0.1, so the host is
/// throttled: its failures are answered late, up to the bound) while a correct client logs in
/// and works: every failure is still mongod's 18, and the correct client's login and commands
/// all succeed (its successes are never delayed). No timing is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_login_flood_does_not_stop_a_correct_client() {
    let server = TestServer::start().await;
    admin(
        &server.client(),
        doc! {"createUser": "alice", "pwd": "s3cret", "roles": [{"role": "readWrite", "db": "app"}]},
    )
    .await
    .expect("createUser");

    let mut flood = tokio::task::JoinSet::new();
    for attacker in 0..12 {
        let options = options_as(&server, "alice", &format!("guess{attacker}"), None);
        flood.spawn(async move {
            let mut errors = Vec::new();
            for _ in 0..3 {
                // A fresh client each time: a new connection, a new login attempt.
                let client = Client::with_options(options.clone()).expect("client options");
                errors.push(admin(&client, doc! {"ping": 1}).await.expect_err("refused"));
            }
            errors
        });
    }

    let alice = client_as(&server, "alice", "s3cret", None);
    let things = alice.database("app").collection::<Document>("things");
    for n in 0..20 {
        things.insert_one(doc! {"n": n}).await.expect("insert");
        assert_eq!(
            things.count_documents(doc! {}).await.expect("count"),
            u64::try_from(n + 1).unwrap()
        );
    }
    // Every other command of any client goes on too.
    admin(&server.client(), doc! {"ping": 1})
        .await
        .expect("ping");

    while let Some(errors) = flood.join_next().await {
        for error in errors.expect("attacker task") {
            assert_authentication_failed(error);
        }
    }
    // The host's further failures are held back, never more than the bound.
    let policy = *server.state.failed_logins.hosts.policy();
    assert!(
        policy.delay_for(36) <= std::time::Duration::from_millis(policy.max_delay_ms),
        "{policy:?}"
    );
    assert_eq!(server.state.failed_logins.hosts.hosts(), 1);
    server.stop().await;
}

/// The legacy handshake (OP_QUERY on `admin.$cmd`, which old drivers and the shell's first
/// messages use) carries a whole SCRAM-SHA-256 conversation, answered in OP_REPLY; the login
/// then holds for OP_MSG commands on the connection. The client side is computed here from
/// RFC 5802's definitions with the server crate's primitives (HMAC, H, Hi).
#[tokio::test]
async fn a_scram_conversation_over_op_query() {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine as _;
    use common::raw::{connect, kind0, op_msg, op_query, roundtrip, OP_REPLY};
    use tideway::auth::scram::Mechanism;

    let server = TestServer::start().await;
    admin(
        &server.client(),
        doc! {"createUser": "legacy", "pwd": "pw", "roles": ["root"], "mechanisms": ["SCRAM-SHA-256"]},
    )
    .await
    .expect("createUser");
    let payload = |text: &str| {
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: text.as_bytes().to_vec(),
        })
    };
    let text_of = |reply: &Document| {
        String::from_utf8(
            reply
                .get_binary_generic("payload")
                .expect("payload")
                .clone(),
        )
        .unwrap()
    };
    let mut stream = connect(&server).await;
    let client_nonce = "fyko+d2lbbFgONRv9qkxdawL";
    let client_first_bare = format!("n=legacy,r={client_nonce}");
    let start = roundtrip(
        &mut stream,
        &op_query(
            1,
            "admin.$cmd",
            &doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
            "payload": payload(&format!("n,,{client_first_bare}")),
            "options": {"skipEmptyExchange": true}},
        ),
    )
    .await;
    assert_eq!(start.op_code, OP_REPLY);
    assert_eq!(start.document.get_f64("ok"), Ok(1.0), "{}", start.document);
    let server_first = text_of(&start.document);
    let field = |name: &str| {
        server_first
            .split(',')
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .expect("server-first field")
            .to_owned()
    };
    let (nonce, salt, iterations) = (field("r"), field("s"), field("i"));
    assert!(nonce.starts_with(client_nonce));
    let mechanism = Mechanism::Sha256;
    let salted = mechanism.salted_password(
        "pw",
        &BASE64.decode(salt).unwrap(),
        iterations.parse().unwrap(),
    );
    let client_key = mechanism.hmac(&salted, b"Client Key");
    let stored_key = mechanism.hash(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let finish = roundtrip(
        &mut stream,
        &op_query(
            2,
            "admin.$cmd",
            &doc! {"saslContinue": 1, "conversationId": 1,
            "payload": payload(&format!("{without_proof},p={}", BASE64.encode(proof)))},
        ),
    )
    .await;
    assert_eq!(finish.op_code, OP_REPLY);
    assert_eq!(
        finish.document.get_bool("done"),
        Ok(true),
        "{}",
        finish.document
    );
    let server_key = mechanism.hmac(&salted, b"Server Key");
    let expected = BASE64.encode(mechanism.hmac(&server_key, auth_message.as_bytes()));
    assert_eq!(text_of(&finish.document), format!("v={expected}"));
    let status = roundtrip(
        &mut stream,
        &op_msg(
            3,
            0,
            &[kind0(&doc! {"connectionStatus": 1, "$db": "admin"})],
        ),
    )
    .await
    .document;
    assert_eq!(
        status
            .get_document("authInfo")
            .unwrap()
            .get_array("authenticatedUsers")
            .unwrap(),
        &vec![Bson::Document(doc! {"user": "legacy", "db": "admin"})]
    );
    server.stop().await;
}
