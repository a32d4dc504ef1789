//! Handshake, diagnostics and session commands through the official Rust driver.

mod common;

use bson::{doc, Bson, Document};
use common::TestServer;
use mongodb::options::Compressor;

async fn run(client: &mongodb::Client, db: &str, command: Document) -> Document {
    client
        .database(db)
        .run_command(command)
        .await
        .expect("command succeeds")
}

async fn run_error(client: &mongodb::Client, db: &str, command: Document) -> (i32, String, String) {
    common::command_error(client.database(db).run_command(command).await)
}

#[tokio::test]
async fn driver_connects_and_pings() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(&client, "admin", doc! {"ping": 1}).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0));
    server.stop().await;
}

#[tokio::test]
async fn hello_describes_a_writable_standalone() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(&client, "admin", doc! {"hello": 1, "helloOk": true}).await;
    assert_eq!(reply.get_bool("helloOk"), Ok(true));
    assert_eq!(reply.get_bool("isWritablePrimary"), Ok(true));
    assert!(reply.get("ismaster").is_none());
    assert_eq!(reply.get_i32("maxBsonObjectSize"), Ok(16_777_216));
    assert_eq!(reply.get_i32("maxMessageSizeBytes"), Ok(48_000_000));
    assert_eq!(reply.get_i32("maxWriteBatchSize"), Ok(100_000));
    assert_eq!(reply.get_i32("logicalSessionTimeoutMinutes"), Ok(30));
    assert_eq!(reply.get_i32("minWireVersion"), Ok(0));
    assert_eq!(reply.get_i32("maxWireVersion"), Ok(25));
    assert_eq!(reply.get_bool("readOnly"), Ok(false));
    assert!(reply.get_datetime("localTime").is_ok());
    assert!(reply.get_i32("connectionId").unwrap() > 0);
    for absent in ["topologyVersion", "setName", "hosts", "msg", "isreplicaset"] {
        assert!(reply.get(absent).is_none(), "{absent} must be absent");
    }
    let legacy = run(&client, "admin", doc! {"isMaster": 1}).await;
    assert_eq!(legacy.get_bool("ismaster"), Ok(true));
    assert!(legacy.get("helloOk").is_none());
    let lower = run(&client, "test", doc! {"ismaster": 1}).await;
    assert_eq!(lower.get_bool("ismaster"), Ok(true));
    server.stop().await;
}

#[tokio::test]
async fn hello_negotiates_compression_as_an_intersection() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(
        &client,
        "admin",
        doc! {"hello": 1, "compression": ["lz4", "zstd", "zlib"]},
    )
    .await;
    let agreed: Vec<&str> = reply
        .get_array("compression")
        .unwrap()
        .iter()
        .filter_map(Bson::as_str)
        .collect();
    assert_eq!(agreed, vec!["zstd", "zlib"]);
    let none = run(&client, "admin", doc! {"hello": 1, "compression": ["lz4"]}).await;
    assert!(none.get("compression").is_none());
    server.stop().await;
}

#[tokio::test]
async fn build_info_reports_a_semver_version() {
    let server = TestServer::start().await;
    let client = server.client();
    for name in ["buildInfo", "buildinfo"] {
        let reply = run(&client, "admin", doc! {name: 1}).await;
        let version = reply.get_str("version").unwrap();
        let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(parts.len(), 3, "{version} is X.Y.Z");
        let array: Vec<i32> = reply
            .get_array("versionArray")
            .unwrap()
            .iter()
            .map(|v| v.as_i32().unwrap())
            .collect();
        assert_eq!(
            &array[..3],
            &[parts[0] as i32, parts[1] as i32, parts[2] as i32]
        );
        assert!(reply.get_str("gitVersion").is_ok());
        assert_eq!(reply.get_i32("maxBsonObjectSize"), Ok(16_777_216));
        assert!(reply.get("ferretdb").is_none());
    }
    server.stop().await;
}

#[tokio::test]
async fn get_parameter_star_single_and_unknown() {
    let server = TestServer::start().await;
    let client = server.client();
    let all = run(&client, "admin", doc! {"getParameter": "*"}).await;
    assert_eq!(all.get_bool("enableTestCommands"), Ok(false));
    assert_eq!(
        all.get_document("featureCompatibilityVersion")
            .unwrap()
            .get_str("version"),
        Ok("8.0")
    );
    let one = run(
        &client,
        "admin",
        doc! {"getParameter": 1, "featureCompatibilityVersion": 1},
    )
    .await;
    assert!(one.get_document("featureCompatibilityVersion").is_ok());
    assert!(one.get("enableTestCommands").is_none());
    let (code, name, message) =
        run_error(&client, "admin", doc! {"getParameter": 1, "foo": 1}).await;
    assert_eq!(
        (code, name.as_str(), message.as_str()),
        (72, "InvalidOptions", "no option found to get")
    );
    let detailed = run(
        &client,
        "admin",
        doc! {"getParameter": {"showDetails": true}, "enableTestCommands": 1},
    )
    .await;
    assert_eq!(
        detailed
            .get_document("enableTestCommands")
            .unwrap()
            .get_bool("value"),
        Ok(false)
    );
    server.stop().await;
}

#[tokio::test]
async fn get_parameter_reports_enabled_test_commands() {
    let config = tideway::Config {
        set_parameter: vec!["enableTestCommands=1".into()],
        ..common::test_config()
    };
    let server = TestServer::start_with(config).await;
    let all = run(&server.client(), "admin", doc! {"getParameter": "*"}).await;
    assert_eq!(all.get_bool("enableTestCommands"), Ok(true));
    server.stop().await;
}

#[tokio::test]
async fn server_status_has_the_sections_tools_read() {
    let server = TestServer::start().await;
    let client = server.client();
    run(&client, "admin", doc! {"ping": 1}).await;
    let status = run(&client, "admin", doc! {"serverStatus": 1}).await;
    for field in [
        "host",
        "version",
        "process",
        "pid",
        "uptime",
        "uptimeMillis",
        "localTime",
    ] {
        assert!(status.get(field).is_some(), "{field}");
    }
    let connections = status.get_document("connections").unwrap();
    assert!(connections.get_i32("current").unwrap() >= 1);
    assert!(connections.get_i32("available").unwrap() > 0);
    assert!(connections.get_i64("totalCreated").unwrap() >= 1);
    let opcounters = status.get_document("opcounters").unwrap();
    assert!(opcounters.get_i64("command").unwrap() >= 2);
    let network = status.get_document("network").unwrap();
    assert!(network.get_i64("bytesIn").unwrap() > 0);
    assert!(network.get_i64("numRequests").unwrap() > 0);
    let engine = status.get_document("storageEngine").unwrap();
    assert_eq!(engine.get_str("name"), Ok("redb"));
    assert_eq!(engine.get_bool("persistent"), Ok(false));
    let ping = status
        .get_document("metrics")
        .unwrap()
        .get_document("commands")
        .unwrap()
        .get_document("ping")
        .unwrap();
    assert!(ping.get_i64("total").unwrap() >= 1);
    let trimmed = run(
        &client,
        "admin",
        doc! {"serverStatus": 1, "metrics": 0, "network": false},
    )
    .await;
    assert!(trimmed.get("metrics").is_none() && trimmed.get("network").is_none());
    assert!(trimmed.get("opcounters").is_some());
    server.stop().await;
}

#[tokio::test]
async fn list_commands_is_generated_from_the_registry() {
    let server = TestServer::start().await;
    let reply = run(&server.client(), "admin", doc! {"listCommands": 1}).await;
    let commands = reply.get_document("commands").unwrap();
    for name in [
        "hello",
        "isMaster",
        "ismaster",
        "buildInfo",
        "buildinfo",
        "ping",
        "serverStatus",
        "listCommands",
        "endSessions",
    ] {
        let entry = commands
            .get_document(name)
            .unwrap_or_else(|_| panic!("{name} listed"));
        assert!(!entry.get_str("help").unwrap().is_empty());
    }
    assert_eq!(
        commands
            .get_document("getLog")
            .unwrap()
            .get_bool("adminOnly"),
        Ok(true)
    );
    server.stop().await;
}

#[tokio::test]
async fn unknown_commands_and_admin_only_commands_fail_like_mongod() {
    let server = TestServer::start().await;
    let client = server.client();
    let (code, name, message) = run_error(&client, "admin", doc! {"atlasVersion": 1}).await;
    assert_eq!((code, name.as_str()), (59, "CommandNotFound"));
    assert_eq!(message, "no such command: 'atlasVersion'");
    let (code, name, message) = run_error(&client, "test", doc! {"getCmdLineOpts": 1}).await;
    assert_eq!((code, name.as_str()), (13, "Unauthorized"));
    assert_eq!(
        message,
        "getCmdLineOpts may only be run against the admin database."
    );
    let (code, ..) = run_error(&client, "admin", doc! {"ping": 1, "txnNumber": 1_i64}).await;
    assert_eq!(code, 20);
    server.stop().await;
}

#[tokio::test]
async fn generic_arguments_are_accepted_everywhere() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(
        &client,
        "admin",
        doc! {
            "ping": 1,
            "comment": "why",
            "maxTimeMS": 1000,
            "readConcern": {"level": "local"},
            "writeConcern": {"w": 1},
            "apiVersion": "1",
            "$readPreference": {"mode": "primary"},
        },
    )
    .await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0));
    server.stop().await;
}

#[tokio::test]
async fn diagnostics_commands_answer() {
    let server = TestServer::start().await;
    let client = server.client();
    let uri = run(&client, "admin", doc! {"whatsmyuri": 1}).await;
    assert!(uri.get_str("you").unwrap().starts_with("127.0.0.1:"));
    let status = run(
        &client,
        "admin",
        doc! {"connectionStatus": 1, "showPrivileges": true},
    )
    .await;
    let auth = status.get_document("authInfo").unwrap();
    assert!(auth.get_array("authenticatedUsers").unwrap().is_empty());
    assert!(auth.get_array("authenticatedUserPrivileges").is_ok());
    let host = run(&client, "admin", doc! {"hostInfo": 1}).await;
    assert!(
        host.get_document("system")
            .unwrap()
            .get_i32("numCores")
            .unwrap()
            >= 1
    );
    let opts = run(&client, "admin", doc! {"getCmdLineOpts": 1}).await;
    assert!(opts.get_array("argv").is_ok());
    assert_eq!(
        opts.get_document("parsed")
            .unwrap()
            .get_document("net")
            .unwrap()
            .get_i32("port"),
        Ok(27017)
    );
    server.stop().await;
}

#[tokio::test]
async fn get_log_lists_and_returns_logs() {
    let server = TestServer::start().await;
    let client = server.client();
    let names = run(&client, "admin", doc! {"getLog": "*"}).await;
    let names: Vec<&str> = names
        .get_array("names")
        .unwrap()
        .iter()
        .filter_map(Bson::as_str)
        .collect();
    assert_eq!(names, vec!["global", "startupWarnings"]);
    let warnings = run(&client, "admin", doc! {"getLog": "startupWarnings"}).await;
    let lines = warnings.get_array("log").unwrap();
    assert!(!lines.is_empty());
    let first: serde_json::Value = serde_json::from_str(lines[0].as_str().unwrap()).unwrap();
    assert_eq!(first["s"], "W");
    assert!(warnings.get_i64("totalLinesWritten").unwrap() >= 1);
    let global = run(&client, "admin", doc! {"getLog": "global"}).await;
    assert!(global.get_array("log").is_ok());
    let (code, ..) = run_error(&client, "admin", doc! {"getLog": "nope"}).await;
    assert_eq!(code, 96);
    server.stop().await;
}

#[tokio::test]
async fn sessions_start_and_end() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(&client, "admin", doc! {"startSession": 1}).await;
    let Some(Bson::Binary(id)) = reply.get_document("id").unwrap().get("id") else {
        panic!("session id is binary: {reply}");
    };
    assert_eq!(id.subtype, bson::spec::BinarySubtype::Uuid);
    assert_eq!(id.bytes.len(), 16);
    assert_eq!(reply.get_i32("timeoutMinutes"), Ok(30));
    let session = reply.get_document("id").unwrap().clone();
    for command in ["endSessions", "killSessions", "refreshSessions"] {
        run(&client, "admin", doc! {command: [session.clone()]}).await;
    }
    run(&client, "admin", doc! {"killAllSessions": []}).await;
    let (code, ..) = run_error(&client, "admin", doc! {"endSessions": 1}).await;
    assert_eq!(code, 14);
    // The driver's own implicit sessions work end to end.
    let mut explicit = client.start_session().await.unwrap();
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .session(&mut explicit)
        .await
        .unwrap();
    drop(explicit);
    server.stop().await;
}

#[tokio::test]
async fn driver_compression_round_trips_with_every_compressor() {
    let server = TestServer::start().await;
    let compressors = [
        ("snappy", Compressor::Snappy),
        ("zlib", Compressor::Zlib { level: Some(6) }),
        ("zstd", Compressor::Zstd { level: Some(3) }),
    ];
    for (name, compressor) in compressors {
        let client = server.client_with_compressor(compressor);
        let big = "x".repeat(10_000);
        let reply = run(&client, "admin", doc! {"ping": 1, "comment": big.as_str()}).await;
        assert_eq!(reply.get_f64("ok"), Ok(1.0));
        let status = run(&client, "admin", doc! {"serverStatus": 1}).await;
        let counters = status
            .get_document("network")
            .unwrap()
            .get_document("compression")
            .unwrap()
            .get_document(name)
            .unwrap();
        let decompressed = counters
            .get_document("decompressor")
            .unwrap()
            .get_i64("bytesOut")
            .unwrap();
        let compressed_out = counters
            .get_document("compressor")
            .unwrap()
            .get_i64("bytesOut")
            .unwrap();
        assert!(
            decompressed > 10_000,
            "{name}: the server decompressed the request ({decompressed})"
        );
        assert!(
            compressed_out > 0,
            "{name}: the server compressed its replies"
        );
        client.shutdown().await;
    }
    server.stop().await;
}

#[tokio::test]
async fn failures_under_an_alias_count_for_the_command() {
    let server = TestServer::start().await;
    let client = server.client();
    // The driver's handshake already sent client metadata on this connection: a second is refused.
    let (code, ..) = run_error(
        &client,
        "admin",
        doc! {"ismaster": 1, "client": {"driver": {"name": "x", "version": "1"}}},
    )
    .await;
    assert_eq!(code, 186);
    let status = run(&client, "admin", doc! {"serverStatus": 1}).await;
    let is_master = status
        .get_document("metrics")
        .unwrap()
        .get_document("commands")
        .unwrap()
        .get_document("isMaster")
        .unwrap()
        .clone();
    assert!(is_master.get_i64("failed").unwrap() >= 1, "{is_master}");
    server.stop().await;
}
