//! Enforcement under `--auth`, through the official driver and raw sockets: the localhost
//! exception creates the first user and then ends; before login only mongod's pre-authentication
//! commands answer (every other registered command gets 13 "Command <name> requires
//! authentication"); built-in roles allow exactly their actions (13 "not authorized on <db> to
//! execute command ..." otherwise); `listDatabases`/`listCollections` show a user what it may
//! see; a cursor serves only the user who opened it; role changes apply to open connections.
//! Expected behaviour is mongod's: the manual's "Enable Access Control", "Localhost Exception",
//! "Built-In Roles", `listDatabases`/`listCollections` (`authorizedDatabases`,
//! `authorizedCollections`), and mongod's source (`requiresAuth()` of each command; the
//! messages of `checkAuthorizationImplPreParse`, `CommandHelpers::auditLogAuthEvent` callers and
//! getMore's cursor check); jstests/auth/listcommands_preauth_base.js for the localhost
//! exception allowing everything while no user exists.

mod common;

use bson::{doc, Bson, Document};
use common::raw::{connect, kind0, op_msg, roundtrip};
use common::{command_error, first_batch, test_config, TestServer};
use mongodb::options::Credential;
use mongodb::Client;

async fn auth_server() -> TestServer {
    let mut config = test_config();
    config.auth = true;
    config.enable_test_commands = true;
    TestServer::start_with(config).await
}

fn client_as(server: &TestServer, user: &str, pwd: &str, source: &str) -> Client {
    let mut options = server.options();
    options.credential = Some(
        Credential::builder()
            .username(user.to_owned())
            .password(pwd.to_owned())
            .source(source.to_owned())
            .build(),
    );
    Client::with_options(options).expect("client options")
}

/// A server whose first user, `root`/`pw` with role root, was created through the localhost
/// exception; returns it and a client logged in as that user.
async fn server_with_root() -> (TestServer, Client) {
    let server = auth_server().await;
    server
        .client()
        .database("admin")
        .run_command(doc! {"createUser": "root", "pwd": "pw", "roles": ["root"]})
        .await
        .expect("the localhost exception allows the first user");
    let root = client_as(&server, "root", "pw", "admin");
    (server, root)
}

async fn create_user(root: &Client, db: &str, user: &str, roles: Bson) {
    root.database(db)
        .run_command(doc! {"createUser": user, "pwd": "pw", "roles": roles})
        .await
        .unwrap_or_else(|error| panic!("createUser {user}: {error}"));
}

fn assert_unauthorized<T: std::fmt::Debug>(result: mongodb::error::Result<T>, message_start: &str) {
    let (code, code_name, message) = command_error(result);
    assert_eq!(
        (code, code_name.as_str()),
        (13, "Unauthorized"),
        "{message}"
    );
    assert!(message.starts_with(message_start), "{message}");
}

#[tokio::test]
async fn the_localhost_exception_allows_the_first_user_and_then_ends() {
    let server = auth_server().await;
    let local = server.client();
    let admin = local.database("admin");
    // No user yet: a loopback connection may do anything (listDatabases included).
    admin
        .run_command(doc! {"listDatabases": 1})
        .await
        .expect("allowed while no user exists");
    admin
        .run_command(doc! {"createUser": "first", "pwd": "pw", "roles": ["userAdminAnyDatabase"]})
        .await
        .expect("the first user");
    assert_unauthorized(
        admin.run_command(doc! {"listDatabases": 1}).await,
        "Command listDatabases requires authentication",
    );
    assert_unauthorized(
        admin
            .run_command(doc! {"createUser": "second", "pwd": "pw", "roles": []})
            .await,
        "Command createUser requires authentication",
    );
    // The pre-authentication commands still answer.
    for command in [
        "ping",
        "hello",
        "buildInfo",
        "listCommands",
        "connectionStatus",
    ] {
        admin
            .run_command(doc! {command: 1})
            .await
            .unwrap_or_else(|error| panic!("{command}: {error}"));
    }
    // The first user can create the next ones.
    let first = client_as(&server, "first", "pw", "admin");
    first
        .database("admin")
        .run_command(doc! {"createUser": "second", "pwd": "pw", "roles": ["read"]})
        .await
        .expect("userAdminAnyDatabase creates users");
    server.stop().await;
}

/// mongod's commands with `requiresAuth() == false` that tideway registers (or will).
const PRE_AUTH: &[&str] = &[
    "hello",
    "isMaster",
    "ismaster",
    "ping",
    "buildInfo",
    "buildinfo",
    "listCommands",
    "connectionStatus",
    "saslStart",
    "saslContinue",
    "authenticate",
    "logout",
];

#[tokio::test]
async fn before_login_every_registered_command_but_the_handshake_gets_13() {
    let (server, _root) = server_with_root().await;
    let mut stream = connect(&server).await;
    let mut checked = 0;
    for (index, spec) in tideway::commands::registry::visible_commands(&server.state)
        .into_iter()
        .enumerate()
    {
        for name in std::iter::once(&spec.name).chain(spec.aliases) {
            let body = doc! {*name: 1, "$db": "admin"};
            let reply = roundtrip(&mut stream, &op_msg(index as i32, 0, &[kind0(&body)])).await;
            let document = reply.document;
            if PRE_AUTH.contains(name) {
                assert_ne!(document.get_i32("code"), Ok(13), "{name}: {document}");
            } else {
                assert_eq!(document.get_f64("ok"), Ok(0.0), "{name}: {document}");
                assert_eq!(document.get_i32("code"), Ok(13), "{name}: {document}");
                assert_eq!(
                    document.get_str("errmsg"),
                    Ok(format!("Command {} requires authentication", spec.name).as_str()),
                    "{name}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} commands checked");
    // listCommands reports it, as mongod.
    let reply = roundtrip(
        &mut stream,
        &op_msg(7, 0, &[kind0(&doc! {"listCommands": 1, "$db": "admin"})]),
    )
    .await
    .document;
    let commands = reply.get_document("commands").expect("commands");
    assert_eq!(
        commands
            .get_document("find")
            .unwrap()
            .get_bool("requiresAuth"),
        Ok(true)
    );
    assert_eq!(
        commands
            .get_document("hello")
            .unwrap()
            .get_bool("requiresAuth"),
        Ok(false)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_read_user_reads_but_cannot_write() {
    let (server, root) = server_with_root().await;
    root.database("app")
        .collection::<Document>("things")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();
    create_user(&root, "app", "reader", Bson::Array(vec!["read".into()])).await;
    let reader = client_as(&server, "reader", "pw", "app");
    let things = reader.database("app").collection::<Document>("things");
    assert_eq!(things.count_documents(doc! {}).await.unwrap(), 1);
    assert_unauthorized(
        things.insert_one(doc! {"_id": 2}).await,
        "not authorized on app to execute command { insert: \"things\"",
    );
    assert_unauthorized(
        things.delete_many(doc! {}).await,
        "not authorized on app to execute command { delete: \"things\"",
    );
    assert_unauthorized(
        reader.database("app").drop().await,
        "not authorized on app to execute command { dropDatabase: 1",
    );
    // Another database is out of reach, and so is the cluster.
    assert_unauthorized(
        reader
            .database("other")
            .collection::<Document>("c")
            .find_one(doc! {})
            .await,
        "not authorized on other to execute command { find: \"c\"",
    );
    assert_unauthorized(
        reader
            .database("admin")
            .run_command(doc! {"serverStatus": 1})
            .await,
        "not authorized on admin to execute command { serverStatus: 1",
    );
    // A user may always view itself (mongod's usersInfo check), nobody else without viewUser.
    let me = reader
        .database("app")
        .run_command(doc! {"usersInfo": "reader"})
        .await
        .expect("usersInfo of oneself");
    assert_eq!(me.get_array("users").map(Vec::len), Ok(1), "{me}");
    reader
        .database("app")
        .run_command(doc! {"usersInfo": [{"user": "reader", "db": "app"}], "showPrivileges": true})
        .await
        .expect("usersInfo of oneself, with privileges");
    for query in [
        Bson::from("root"),
        Bson::Int32(1),
        Bson::Array(vec!["reader".into(), "root".into()]),
    ] {
        assert_unauthorized(
            reader
                .database("app")
                .run_command(doc! {"usersInfo": query})
                .await,
            "not authorized on",
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn read_write_on_one_database_cannot_read_another() {
    let (server, root) = server_with_root().await;
    root.database("b")
        .collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    create_user(
        &root,
        "admin",
        "writer",
        Bson::Array(vec![doc! {"role": "readWrite", "db": "a"}.into()]),
    )
    .await;
    let writer = client_as(&server, "writer", "pw", "admin");
    let mine = writer.database("a").collection::<Document>("c");
    mine.insert_one(doc! {"x": 1}).await.expect("insert in a");
    mine.update_one(doc! {"x": 1}, doc! {"$set": {"y": 2}})
        .upsert(true)
        .await
        .expect("upsert in a");
    writer
        .database("a")
        .run_command(doc! {"aggregate": "c", "pipeline": [{"$out": "copy"}], "cursor": {}})
        .await
        .expect("$out in a");
    assert_unauthorized(
        writer
            .database("b")
            .collection::<Document>("c")
            .find_one(doc! {})
            .await,
        "not authorized on b to execute command { find: \"c\"",
    );
    // Reading b through a pipeline on a is refused too.
    assert_unauthorized(
        writer
            .database("a")
            .run_command(doc! {"aggregate": "c", "pipeline": [
                {"$unionWith": {"coll": "c", "pipeline": [{"$out": {"db": "b", "coll": "stolen"}}]}},
            ], "cursor": {}})
            .await,
        "not authorized on a to execute command { aggregate: \"c\"",
    );
    assert_unauthorized(
        writer
            .database("a")
            .run_command(doc! {"aggregate": "c", "pipeline": [{"$out": {"db": "b", "coll": "x"}}], "cursor": {}})
            .await,
        "not authorized on a",
    );
    // listDatabases shows only a (and nothing of b), as mongod's authorizedDatabases.
    let names: Vec<String> = writer.list_database_names().await.expect("listDatabases");
    assert_eq!(names, vec!["a".to_owned()]);
    assert_unauthorized(
        writer
            .database("admin")
            .run_command(doc! {"listDatabases": 1, "authorizedDatabases": false})
            .await,
        "not authorized on admin to execute command { listDatabases: 1",
    );
    server.stop().await;
}

#[tokio::test]
async fn list_collections_with_authorized_collections_shows_what_the_user_may_touch() {
    let (server, root) = server_with_root().await;
    root.database("app")
        .create_collection("things")
        .await
        .expect("create");
    create_user(&root, "app", "reader", Bson::Array(vec!["read".into()])).await;
    create_user(&root, "app", "nobody", Bson::Array(vec![])).await;
    let list = doc! {"listCollections": 1, "nameOnly": true, "authorizedCollections": true};
    let reader = client_as(&server, "reader", "pw", "app");
    let reply = reader
        .database("app")
        .run_command(list.clone())
        .await
        .expect("listCollections");
    assert_eq!(first_batch(&reply).len(), 1, "{reply}");
    // A user with no privilege on the database may ask, and sees nothing.
    let nobody = client_as(&server, "nobody", "pw", "app");
    let reply = nobody
        .database("app")
        .run_command(list)
        .await
        .expect("allowed with authorizedCollections and nameOnly");
    assert!(first_batch(&reply).is_empty(), "{reply}");
    assert_unauthorized(
        nobody
            .database("app")
            .run_command(doc! {"listCollections": 1})
            .await,
        "not authorized on app to execute command { listCollections: 1",
    );
    server.stop().await;
}

#[tokio::test]
async fn a_cursor_serves_only_the_user_who_opened_it() {
    let (server, root) = server_with_root().await;
    let things = root.database("app").collection::<Document>("things");
    things
        .insert_many((0..10).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    create_user(&root, "app", "other", Bson::Array(vec!["read".into()])).await;
    let reply = root
        .database("app")
        .run_command(doc! {"find": "things", "batchSize": 2})
        .await
        .unwrap();
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    let other = client_as(&server, "other", "pw", "app");
    let (code, _, message) = command_error(
        other
            .database("app")
            .run_command(doc! {"getMore": id, "collection": "things"})
            .await,
    );
    assert_eq!(code, 13);
    assert_eq!(
        message,
        format!("cursor id {id} was not created by the authenticated user")
    );
    let (code, _, _) = command_error(
        other
            .database("app")
            .run_command(doc! {"killCursors": "things", "cursors": [id]})
            .await,
    );
    assert_eq!(code, 13);
    // The owner reads on.
    root.database("app")
        .run_command(doc! {"getMore": id, "collection": "things"})
        .await
        .expect("the owner's getMore");
    server.stop().await;
}

#[tokio::test]
async fn role_changes_apply_to_open_connections_and_logout_ends_the_login() {
    let (server, root) = server_with_root().await;
    create_user(&root, "app", "grower", Bson::Array(vec!["read".into()])).await;
    let grower = client_as(&server, "grower", "pw", "app");
    let things = grower.database("app").collection::<Document>("things");
    things.find_one(doc! {}).await.expect("read");
    assert_unauthorized(things.insert_one(doc! {"x": 1}).await, "not authorized");
    root.database("app")
        .run_command(doc! {"grantRolesToUser": "grower", "roles": ["readWrite"]})
        .await
        .unwrap();
    things
        .insert_one(doc! {"x": 1})
        .await
        .expect("readWrite granted to a logged-in user");
    root.database("app")
        .run_command(doc! {"revokeRolesFromUser": "grower", "roles": ["readWrite"]})
        .await
        .unwrap();
    assert_unauthorized(things.insert_one(doc! {"x": 2}).await, "not authorized");
    root.database("app")
        .run_command(doc! {"dropUser": "grower"})
        .await
        .unwrap();
    assert_unauthorized(things.find_one(doc! {}).await, "not authorized");

    // logout: the connection is unauthenticated again (one pooled connection).
    create_user(&root, "app", "leaver", Bson::Array(vec!["read".into()])).await;
    let mut options = server.options();
    options.max_pool_size = Some(1);
    options.credential = Some(
        Credential::builder()
            .username("leaver".to_owned())
            .password("pw".to_owned())
            .source("app".to_owned())
            .build(),
    );
    let leaver = Client::with_options(options).unwrap();
    let app = leaver.database("app");
    app.collection::<Document>("things")
        .find_one(doc! {})
        .await
        .expect("logged in");
    app.run_command(doc! {"logout": 1}).await.expect("logout");
    assert_unauthorized(
        app.collection::<Document>("things").find_one(doc! {}).await,
        "Command find requires authentication",
    );
    server.stop().await;
}

#[tokio::test]
async fn built_in_roles_cover_their_commands() {
    let (server, root) = server_with_root().await;
    create_user(&root, "app", "owner", Bson::Array(vec!["dbOwner".into()])).await;
    create_user(
        &root,
        "admin",
        "monitor",
        Bson::Array(vec!["clusterMonitor".into()]),
    )
    .await;
    let owner = client_as(&server, "owner", "pw", "app");
    let app = owner.database("app");
    app.collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    app.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
        .await
        .expect("createIndex");
    app.run_command(doc! {"createUser": "helper", "pwd": "pw", "roles": ["read"]})
        .await
        .expect("dbOwner creates users on its database");
    assert_unauthorized(
        owner
            .database("admin")
            .run_command(doc! {"createUser": "x", "pwd": "pw", "roles": ["root"]})
            .await,
        "not authorized on admin",
    );
    app.run_command(doc! {"dbStats": 1}).await.expect("dbStats");
    app.drop().await.expect("dropDatabase");

    let monitor = client_as(&server, "monitor", "pw", "admin");
    for command in ["serverStatus", "hostInfo", "getCmdLineOpts", "currentOp"] {
        monitor
            .database("admin")
            .run_command(doc! {command: 1})
            .await
            .unwrap_or_else(|error| panic!("{command}: {error}"));
    }
    monitor
        .database("admin")
        .run_command(doc! {"getLog": "startupWarnings"})
        .await
        .expect("getLog");
    assert_unauthorized(
        monitor
            .database("app")
            .collection::<Document>("c")
            .find_one(doc! {})
            .await,
        "not authorized on app",
    );
    server.stop().await;
}

#[tokio::test]
async fn with_auth_there_is_no_access_control_warning() {
    let server = auth_server().await;
    let reply = server
        .client()
        .database("admin")
        .run_command(doc! {"getLog": "startupWarnings"})
        .await
        .expect("getLog through the localhost exception");
    assert_eq!(reply.get_array("log").map(Vec::len), Ok(0), "{reply}");
    server.stop().await;
}

#[tokio::test]
async fn the_session_cache_refresh_runs_as_the_server_under_auth() {
    let (server, root) = server_with_root().await;
    root.database("app")
        .collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    root.database("admin")
        .run_command(doc! {"refreshLogicalSessionCacheNow": 1})
        .await
        .expect("refresh");
    // collStats (clusterMonitor's, part of root) counts the records the refresh wrote.
    let stats = root
        .database("config")
        .run_command(doc! {"collStats": "system.sessions"})
        .await
        .expect("clusterMonitor's collStats on config.system.sessions");
    assert!(
        stats
            .get_i32("count")
            .map(i64::from)
            .or(stats.get_i64("count"))
            .unwrap_or(0)
            >= 1,
        "{stats}"
    );
    server.stop().await;
}

#[tokio::test]
async fn current_op_and_kill_op_without_the_cluster_actions_see_only_the_users_own() {
    let (server, root) = server_with_root().await;
    create_user(&root, "app", "worker", Bson::Array(vec!["read".into()])).await;
    let worker = client_as(&server, "worker", "pw", "app");
    let admin = worker.database("admin");
    assert_unauthorized(
        admin.run_command(doc! {"currentOp": 1}).await,
        "not authorized on admin to execute command { currentOp: 1",
    );
    // $ownOps: the worker's own operations only (its currentOp itself), never root's.
    let _root_connection = root
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
    let reply = admin
        .run_command(doc! {"currentOp": 1, "$ownOps": true, "$all": true})
        .await
        .expect("$ownOps needs no privilege");
    let ops = reply.get_array("inprog").unwrap();
    assert!(!ops.is_empty(), "{reply}");
    // Each entry names the user it runs as (mongod's `effectiveUsers`).
    for op in ops {
        assert_eq!(
            op.as_document()
                .unwrap()
                .get_array("effectiveUsers")
                .unwrap(),
            &vec![Bson::Document(doc! {"user": "worker", "db": "app"})],
            "{op}"
        );
    }
    let all = root
        .database("admin")
        .run_command(doc! {"currentOp": 1, "$all": true})
        .await
        .unwrap();
    assert!(
        all.get_array("inprog").unwrap().len() > ops.len(),
        "root sees more: {all}"
    );
    // killOp of an operation that is not the worker's needs `killop`.
    assert_unauthorized(
        admin.run_command(doc! {"killOp": 1, "op": 123456}).await,
        "not authorized on admin to execute command { killOp: 1",
    );
    root.database("admin")
        .run_command(doc! {"killOp": 1, "op": 123456})
        .await
        .expect("root kills anything");
    server.stop().await;
}
