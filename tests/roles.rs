//! User-defined roles through the official driver: `createRole` and the other role commands,
//! users holding custom roles under `--auth` (a role's privileges allow exactly what they name,
//! inherited roles' privileges count, changes take effect at once), `rolesInfo` shapes for
//! built-in and custom roles, `usersInfo`/`connectionStatus` with `showPrivileges`, and mongod's
//! errors. Expected shapes, codes and messages are mongod's (user_management_commands.cpp,
//! authorization_backend_local.cpp's getRolesDescription / getRoleDescriptionsForDB /
//! makeRoleNotFoundStatus, error_codes.yml) and the manual's `rolesInfo` and `createRole` pages.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, test_config, TestServer};
use mongodb::options::Credential;
use mongodb::Client;

fn client_as(server: &TestServer, user: &str, pwd: &str) -> Client {
    let mut options = server.options();
    options.credential = Some(
        Credential::builder()
            .username(user.to_owned())
            .password(pwd.to_owned())
            .source("admin".to_owned())
            .build(),
    );
    Client::with_options(options).expect("client options")
}

async fn run(client: &Client, db: &str, command: Document) -> Document {
    client
        .database(db)
        .run_command(command.clone())
        .await
        .unwrap_or_else(|error| panic!("{command}: {error}"))
}

async fn error(client: &Client, db: &str, command: Document) -> (i32, String) {
    let (code, _, message) = command_error(client.database(db).run_command(command).await);
    (code, message)
}

/// A server under `--auth` with a `root` user made through the localhost exception, and a
/// client authenticated as it.
async fn auth_server() -> (TestServer, Client) {
    let server = TestServer::start_with(mongodb_auth_config()).await;
    run(
        &server.client(),
        "admin",
        doc! {"createUser": "admin", "pwd": "adminpw", "roles": ["root"]},
    )
    .await;
    let admin = client_as(&server, "admin", "adminpw");
    (server, admin)
}

fn mongodb_auth_config() -> tideway::Config {
    tideway::Config {
        auth: true,
        ..test_config()
    }
}

fn find_privilege(db: &str, collection: &str) -> Document {
    doc! {"resource": {"db": db, "collection": collection}, "actions": ["find"]}
}

async fn can_find(client: &Client, db: &str, collection: &str) -> Result<(), i32> {
    match client
        .database(db)
        .run_command(doc! {"find": collection, "filter": {}})
        .await
    {
        Ok(_) => Ok(()),
        Err(error) => match *error.kind {
            mongodb::error::ErrorKind::Command(ref command) => Err(command.code),
            ref other => panic!("find {db}.{collection}: {other:?}"),
        },
    }
}

#[tokio::test]
async fn a_custom_role_allows_exactly_its_privileges_and_changes_apply_at_once() {
    let (_server, admin) = auth_server().await;
    for collection in ["visible", "hidden"] {
        run(
            &admin,
            "app",
            doc! {"insert": collection, "documents": [{"x": 1}]},
        )
        .await;
    }
    run(
        &admin,
        "app",
        doc! {"createRole": "reader", "privileges": [find_privilege("app", "visible")], "roles": []},
    )
    .await;
    run(
        &admin,
        "admin",
        doc! {"createUser": "alice", "pwd": "alicepw", "roles": [{"role": "reader", "db": "app"}]},
    )
    .await;
    let alice = client_as(&_server, "alice", "alicepw");
    assert_eq!(can_find(&alice, "app", "visible").await, Ok(()));
    // 13 Unauthorized: mongod's answer to a command the user's privileges do not cover.
    assert_eq!(can_find(&alice, "app", "hidden").await, Err(13));
    let insert = alice
        .database("app")
        .run_command(doc! {"insert": "visible", "documents": [{"x": 2}]})
        .await;
    assert_eq!(command_error(insert).0, 13);

    run(
        &admin,
        "app",
        doc! {"grantPrivilegesToRole": "reader", "privileges": [find_privilege("app", "hidden")]},
    )
    .await;
    assert_eq!(can_find(&alice, "app", "hidden").await, Ok(()));

    run(
        &admin,
        "app",
        doc! {"revokePrivilegesFromRole": "reader", "privileges": [find_privilege("app", "visible")]},
    )
    .await;
    assert_eq!(can_find(&alice, "app", "visible").await, Err(13));
    assert_eq!(can_find(&alice, "app", "hidden").await, Ok(()));

    // Dropping the role takes it from alice (mongod pulls it from every user).
    run(&admin, "app", doc! {"dropRole": "reader"}).await;
    assert_eq!(can_find(&alice, "app", "hidden").await, Err(13));
    let info = run(&admin, "admin", doc! {"usersInfo": "alice"}).await;
    let users = info.get_array("users").expect("users");
    let alice_doc = users[0].as_document().expect("a user");
    assert_eq!(
        alice_doc.get_array("roles").expect("roles"),
        &Vec::<Bson>::new()
    );
}

#[tokio::test]
async fn inherited_roles_grant_their_privileges() {
    let (server, admin) = auth_server().await;
    run(&admin, "app", doc! {"insert": "c", "documents": [{"x": 1}]}).await;
    run(
        &admin,
        "app",
        doc! {"createRole": "base", "privileges": [find_privilege("app", "c")], "roles": []},
    )
    .await;
    run(
        &admin,
        "app",
        doc! {"createRole": "mid", "privileges": [], "roles": ["base"]},
    )
    .await;
    run(
        &admin,
        "admin",
        doc! {"createRole": "top", "privileges": [], "roles": [{"role": "mid", "db": "app"}]},
    )
    .await;
    run(
        &admin,
        "admin",
        doc! {"createUser": "bob", "pwd": "bobpw", "roles": ["top"]},
    )
    .await;
    let bob = client_as(&server, "bob", "bobpw");
    assert_eq!(can_find(&bob, "app", "c").await, Ok(()));
    assert_eq!(can_find(&bob, "app", "other").await, Err(13));
    // A built-in role inherited through a custom one counts too.
    run(
        &admin,
        "app",
        doc! {"grantRolesToRole": "mid", "roles": ["read"]},
    )
    .await;
    assert_eq!(can_find(&bob, "app", "other").await, Ok(()));
    run(
        &admin,
        "app",
        doc! {"revokeRolesFromRole": "mid", "roles": ["read", "base"]},
    )
    .await;
    assert_eq!(can_find(&bob, "app", "c").await, Err(13));
}

fn keys(document: &Document) -> Vec<&str> {
    document.keys().map(String::as_str).collect()
}

fn roles_of(reply: &Document) -> Vec<Document> {
    reply
        .get_array("roles")
        .expect("roles")
        .iter()
        .map(|role| role.as_document().expect("a role").clone())
        .collect()
}

// getRolesDescription: a built-in role is synthesized as {db, role, roles: []}, then
// inheritedRoles (empty: built-in roles are not walked into) and isBuiltin: true; with
// showPrivileges its privileges and the same inheritedPrivileges.
#[tokio::test]
async fn roles_info_describes_builtin_roles() {
    let server = TestServer::start().await;
    let client = server.client();
    let reply = run(&client, "app", doc! {"rolesInfo": "read"}).await;
    let roles = roles_of(&reply);
    assert_eq!(roles.len(), 1);
    assert_eq!(
        roles[0],
        doc! {"db": "app", "role": "read", "roles": [], "inheritedRoles": [], "isBuiltin": true}
    );
    let reply = run(
        &client,
        "app",
        doc! {"rolesInfo": {"role": "read", "db": "app"}, "showPrivileges": true},
    )
    .await;
    let read = &roles_of(&reply)[0];
    assert_eq!(
        keys(read),
        [
            "db",
            "role",
            "roles",
            "privileges",
            "inheritedRoles",
            "inheritedPrivileges",
            "isBuiltin"
        ]
    );
    assert_eq!(read.get("privileges"), read.get("inheritedPrivileges"));
    // The manual's "Built-In Roles": read grants find on its database.
    let privileges = read.get_array("privileges").expect("privileges");
    assert!(privileges.iter().any(|p| {
        let p = p.as_document().expect("a privilege");
        p.get_document("resource").ok() == Some(&doc! {"db": "app", "collection": ""})
            && p.get_array("actions")
                .is_ok_and(|actions| actions.contains(&Bson::from("find")))
    }));
    // An admin-only built-in role does not exist elsewhere: nothing is described.
    let reply = run(&client, "app", doc! {"rolesInfo": "readAnyDatabase"}).await;
    assert!(roles_of(&reply).is_empty());
}

// The manual's db.getRole() example: `associate` on `products` inheriting readWrite, with
// mongod's field order for a stored role (_id, role, db, privileges only when asked, roles) and
// inheritedRoles / inheritedPrivileges / isBuiltin after it.
#[tokio::test]
async fn roles_info_describes_custom_roles() {
    let server = TestServer::start().await;
    let client = server.client();
    run(
        &client,
        "products",
        doc! {
            "createRole": "associate",
            "privileges": [{"resource": {"db": "products", "collection": ""}, "actions": ["bypassDocumentValidation"]}],
            "roles": [{"role": "readWrite", "db": "products"}],
        },
    )
    .await;
    let reply = run(&client, "products", doc! {"rolesInfo": "associate"}).await;
    assert_eq!(
        roles_of(&reply),
        vec![doc! {
            "_id": "products.associate",
            "role": "associate",
            "db": "products",
            "roles": [{"role": "readWrite", "db": "products"}],
            "inheritedRoles": [{"role": "readWrite", "db": "products"}],
            "isBuiltin": false,
        }]
    );
    let reply = run(
        &client,
        "products",
        doc! {"rolesInfo": [{"role": "associate", "db": "products"}], "showPrivileges": true},
    )
    .await;
    let associate = &roles_of(&reply)[0];
    assert_eq!(
        keys(associate),
        [
            "_id",
            "role",
            "db",
            "privileges",
            "roles",
            "inheritedRoles",
            "inheritedPrivileges",
            "isBuiltin"
        ]
    );
    assert_eq!(
        associate.get_array("privileges").expect("privileges"),
        &vec![Bson::Document(
            doc! {"resource": {"db": "products", "collection": ""}, "actions": ["bypassDocumentValidation"]}
        )]
    );
    // Its own privilege first, then readWrite's (which include insert on the database).
    let inherited = associate
        .get_array("inheritedPrivileges")
        .expect("inheritedPrivileges");
    assert_eq!(inherited[0], associate.get_array("privileges").unwrap()[0]);
    assert!(inherited.iter().skip(1).any(|p| {
        p.as_document()
            .and_then(|p| p.get_array("actions").ok())
            .is_some_and(|actions| actions.contains(&Bson::from("insert")))
    }));

    // rolesInfo: 1 lists the database's user-defined roles only, unless showBuiltinRoles.
    let reply = run(&client, "products", doc! {"rolesInfo": 1}).await;
    let listed = roles_of(&reply);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        keys(&listed[0]),
        ["_id", "role", "db", "roles", "isBuiltin", "inheritedRoles"]
    );
    let reply = run(
        &client,
        "products",
        doc! {"rolesInfo": 1, "showBuiltinRoles": true},
    )
    .await;
    let names: Vec<String> = roles_of(&reply)
        .iter()
        .map(|role| role.get_str("role").expect("role").to_owned())
        .collect();
    for expected in [
        "read",
        "readWrite",
        "dbAdmin",
        "dbOwner",
        "userAdmin",
        "associate",
    ] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(!names.iter().any(|name| name == "root"), "{names:?}");
}

#[tokio::test]
async fn users_info_and_connection_status_show_privileges() {
    let server = TestServer::start().await;
    let owner = server.client();
    run(
        &owner,
        "app",
        doc! {"createRole": "reader", "privileges": [find_privilege("app", "c")], "roles": []},
    )
    .await;
    run(
        &owner,
        "admin",
        doc! {"createUser": "carol", "pwd": "carolpw", "roles": [{"role": "reader", "db": "app"}]},
    )
    .await;
    let reply = run(
        &owner,
        "admin",
        doc! {"usersInfo": "carol", "showPrivileges": true},
    )
    .await;
    let carol = reply.get_array("users").expect("users")[0]
        .as_document()
        .expect("a user")
        .clone();
    assert_eq!(
        carol.get_array("inheritedRoles").expect("inheritedRoles"),
        &vec![Bson::Document(doc! {"role": "reader", "db": "app"})]
    );
    assert_eq!(
        carol
            .get_array("inheritedPrivileges")
            .expect("inheritedPrivileges"),
        &vec![Bson::Document(find_privilege("app", "c"))]
    );
    assert!(carol.contains_key("mechanisms") && !carol.contains_key("credentials"));
    // Without customData, mongod's User::reportForUsersInfo field order.
    let reply = run(
        &owner,
        "admin",
        doc! {"usersInfo": {"user": "carol", "db": "admin"}, "showPrivileges": true, "showCustomData": false},
    )
    .await;
    let carol = reply.get_array("users").expect("users")[0]
        .as_document()
        .expect("a user")
        .clone();
    assert_eq!(
        keys(&carol),
        [
            "_id",
            "userId",
            "user",
            "db",
            "mechanisms",
            "roles",
            "inheritedRoles",
            "inheritedPrivileges",
            "inheritedAuthenticationRestrictions"
        ]
    );
    // IllegalOperation (20): privileges need exact-match queries.
    let (code, message) = error(
        &owner,
        "admin",
        doc! {"usersInfo": 1, "showPrivileges": true},
    )
    .await;
    assert_eq!(
        (code, message.as_str()),
        (
            20,
            "Privilege or restriction details require exact-match usersInfo queries"
        )
    );

    let carol_client = client_as(&server, "carol", "carolpw");
    let status = run(
        &carol_client,
        "admin",
        doc! {"connectionStatus": 1, "showPrivileges": true},
    )
    .await;
    let auth_info = status.get_document("authInfo").expect("authInfo");
    assert_eq!(
        auth_info
            .get_array("authenticatedUserPrivileges")
            .expect("authenticatedUserPrivileges"),
        &vec![Bson::Document(find_privilege("app", "c"))]
    );
}

#[tokio::test]
async fn dropping_roles_removes_them_from_holders() {
    let server = TestServer::start().await;
    let client = server.client();
    for role in ["a", "b"] {
        run(
            &client,
            "app",
            doc! {"createRole": role, "privileges": [], "roles": []},
        )
        .await;
    }
    run(
        &client,
        "admin",
        doc! {"createRole": "holder", "privileges": [], "roles": [{"role": "a", "db": "app"}, {"role": "b", "db": "app"}, "read"]},
    )
    .await;
    run(
        &client,
        "admin",
        doc! {"createUser": "dave", "pwd": "davepw", "roles": [{"role": "a", "db": "app"}, "read"]},
    )
    .await;
    run(&client, "app", doc! {"dropRole": "a"}).await;
    let holder = &roles_of(&run(&client, "admin", doc! {"rolesInfo": "holder"}).await)[0];
    assert_eq!(
        holder.get_array("roles").expect("roles"),
        &vec![
            Bson::Document(doc! {"role": "b", "db": "app"}),
            Bson::Document(doc! {"role": "read", "db": "admin"}),
        ]
    );
    let reply = run(&client, "app", doc! {"dropAllRolesFromDatabase": 1}).await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    let holder = &roles_of(&run(&client, "admin", doc! {"rolesInfo": "holder"}).await)[0];
    assert_eq!(
        holder.get_array("roles").expect("roles"),
        &vec![Bson::Document(doc! {"role": "read", "db": "admin"})]
    );
    let dave = run(&client, "admin", doc! {"usersInfo": "dave"}).await;
    let dave = dave.get_array("users").expect("users")[0]
        .as_document()
        .expect("a user")
        .clone();
    assert_eq!(
        dave.get_array("roles").expect("roles"),
        &vec![Bson::Document(doc! {"role": "read", "db": "admin"})]
    );
    assert!(roles_of(&run(&client, "app", doc! {"rolesInfo": 1}).await).is_empty());
}

/// mongod's codes and messages for the role commands' refusals.
#[tokio::test]
async fn role_command_errors_match_mongod() {
    let server = TestServer::start().await;
    let client = server.client();
    run(
        &client,
        "app",
        doc! {"createRole": "a", "privileges": [], "roles": []},
    )
    .await;
    run(
        &client,
        "app",
        doc! {"createRole": "b", "privileges": [], "roles": ["a"]},
    )
    .await;
    let cases: Vec<(&str, Document, i32, &str)> = vec![
        (
            "app",
            doc! {"createRole": "a", "privileges": [], "roles": []},
            51002,
            "Role \"a@app\" already exists",
        ),
        (
            "app",
            doc! {"createRole": "read", "privileges": [], "roles": []},
            2,
            "Cannot create roles with the same name as a built-in role",
        ),
        (
            "local",
            doc! {"createRole": "x", "privileges": [], "roles": []},
            2,
            "Cannot create roles in the local database",
        ),
        (
            "app",
            doc! {"createRole": "", "privileges": [], "roles": []},
            2,
            "Role name must be non-empty",
        ),
        (
            "app",
            doc! {"createRole": "x", "privileges": [{"resource": {"db": "app", "collection": ""}, "actions": ["fly"]}], "roles": []},
            2,
            "Unknown action type in privilege set: 'fly'",
        ),
        (
            "app",
            doc! {"createRole": "x", "privileges": [find_privilege("other", "c")], "roles": []},
            49,
            "Roles on the 'app' database cannot be granted privileges that target other databases or the cluster",
        ),
        (
            "app",
            doc! {"createRole": "x", "privileges": [{"resource": {"cluster": true}, "actions": ["serverStatus"]}], "roles": []},
            49,
            "Roles on the 'app' database cannot be granted privileges that target other databases or the cluster",
        ),
        (
            "app",
            doc! {"createRole": "x", "privileges": [], "roles": [{"role": "read", "db": "other"}]},
            49,
            "Roles on the 'app' database cannot be granted roles from other databases",
        ),
        (
            "app",
            doc! {"createRole": "x", "privileges": [], "roles": ["ghost"]},
            31,
            "Cannot grant roles to 'x@app': Could not find role: ghost@app",
        ),
        (
            "app",
            doc! {"grantRolesToRole": "a", "roles": ["b"]},
            49,
            "Granting roles to a@app would introduce a cycle in the role graph",
        ),
        (
            "app",
            doc! {"grantRolesToRole": "a", "roles": ["a"]},
            49,
            "Cannot grant role a@app to itself.",
        ),
        (
            "app",
            doc! {"grantRolesToRole": "ghost", "roles": ["read"]},
            31,
            "Role ghost@app not found",
        ),
        (
            "app",
            doc! {"grantRolesToRole": "read", "roles": ["a"]},
            2,
            "read@app is a built-in role and cannot be modified",
        ),
        (
            "app",
            doc! {"grantPrivilegesToRole": "a", "privileges": []},
            2,
            "grantPrivilegesToRole command requires a non-empty \"privileges\" array",
        ),
        (
            "app",
            doc! {"revokeRolesFromRole": "a", "roles": []},
            2,
            "revokeRolesFromRole command requires a non-empty \"roles\" array",
        ),
        (
            "app",
            doc! {"updateRole": "a"},
            2,
            "Must specify at least one field to update in updateRole",
        ),
        (
            "app",
            doc! {"updateRole": "ghost", "roles": []},
            31,
            "Could not find role: ghost@app",
        ),
        (
            "app",
            doc! {"dropRole": "ghost"},
            31,
            "Could not find role: ghost@app",
        ),
        (
            "app",
            doc! {"dropRole": "read"},
            2,
            "read@app is a built-in role and cannot be modified",
        ),
        (
            "app",
            doc! {"createRole": "x", "roles": []},
            40414,
            "BSON field 'createRole.privileges' is missing but a required field",
        ),
        (
            "admin",
            doc! {"createUser": "eve", "pwd": "evepw", "roles": [{"role": "ghost", "db": "app"}]},
            31,
            "Could not find role: ghost@app",
        ),
        (
            "app",
            doc! {"rolesInfo": 1, "showPrivileges": "asUserFragment"},
            20,
            "Cannot get user fragment for all roles in a database",
        ),
    ];
    for (db, command, code, message) in cases {
        let (actual_code, actual_message) = error(&client, db, command.clone()).await;
        assert_eq!(
            (actual_code, actual_message.as_str()),
            (code, message),
            "{command}"
        );
    }
    // Honest refusal: restrictions are not enforced, so they are not accepted.
    let (code, _) = error(
        &client,
        "app",
        doc! {"createRole": "x", "privileges": [], "roles": [], "authenticationRestrictions": [{"clientSource": ["127.0.0.1"]}]},
    )
    .await;
    assert_eq!(code, 238);
    // Nothing of the refused commands was stored.
    let reply = run(&client, "app", doc! {"rolesInfo": 1}).await;
    let names: Vec<&str> = reply
        .get_array("roles")
        .expect("roles")
        .iter()
        .filter_map(|role| role.as_document()?.get_str("role").ok())
        .collect();
    assert_eq!(names, ["a", "b"]);
}

#[tokio::test]
async fn roles_info_as_user_fragment() {
    let server = TestServer::start().await;
    let client = server.client();
    run(
        &client,
        "app",
        doc! {"createRole": "reader", "privileges": [find_privilege("app", "c")], "roles": []},
    )
    .await;
    let reply = run(
        &client,
        "app",
        doc! {"rolesInfo": ["reader"], "showPrivileges": "asUserFragment"},
    )
    .await;
    assert_eq!(
        reply.get_document("userFragment").expect("userFragment"),
        &doc! {
            "roles": [{"role": "reader", "db": "app"}],
            "inheritedRoles": [{"role": "reader", "db": "app"}],
            "inheritedPrivileges": [find_privilege("app", "c")],
        }
    );
}

// checkOkayToGrantPrivilegesToRole lets an `admin` role hold privileges on any database and
// the cluster; a user holding it gets exactly those.
#[tokio::test]
async fn an_admin_role_may_hold_privileges_anywhere() {
    let (server, admin) = auth_server().await;
    run(&admin, "app", doc! {"insert": "c", "documents": [{"x": 1}]}).await;
    run(
        &admin,
        "admin",
        doc! {
            "createRole": "ops",
            "privileges": [
                find_privilege("app", "c"),
                {"resource": {"cluster": true}, "actions": ["serverStatus"]},
            ],
            "roles": [],
        },
    )
    .await;
    run(
        &admin,
        "admin",
        doc! {"createUser": "olga", "pwd": "olgapw", "roles": ["ops"]},
    )
    .await;
    let olga = client_as(&server, "olga", "olgapw");
    assert_eq!(can_find(&olga, "app", "c").await, Ok(()));
    assert_eq!(can_find(&olga, "app", "d").await, Err(13));
    run(&olga, "admin", doc! {"serverStatus": 1}).await;
    let status = run(
        &olga,
        "admin",
        doc! {"connectionStatus": 1, "showPrivileges": true},
    )
    .await;
    let privileges = status
        .get_document("authInfo")
        .and_then(|info| info.get_array("authenticatedUserPrivileges"))
        .expect("authenticatedUserPrivileges");
    assert_eq!(privileges.len(), 2);
}
