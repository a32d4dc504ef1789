//! Users as mongod stores them, in `admin.system.users` (`_id: "<db>.<user>"`, `userId`, `user`,
//! `db`, `credentials.<mechanism>`, `roles: [{role, db}]`, `customData`), and the user-management
//! commands over them: `createUser`, `updateUser`, `dropUser`, `dropAllUsersFromDatabase`,
//! `usersInfo`, `grantRolesToUser`, `revokeRolesFromUser`.
//!
//! Invariants: a password is never stored, only SCRAM credentials (`scram::Credential`); a user
//! on `$external` has no password, only mongod's `credentials: {external: true}` (X.509, see
//! `x509`), and every user elsewhere has one; a user's roles exist when granted (mongod's
//! built-in roles, the `*AnyDatabase`/cluster ones only on `admin`, or user-defined roles in
//! `admin.system.roles`); user documents are read and written only through `store` (durable,
//! outside transactions, bumping the auth generation).

use std::collections::BTreeSet;

use bson::{doc, Binary, Bson, Document};

use super::store;
use crate::auth::scram::{Credential, Mechanism};
use crate::auth::RoleName;
use crate::command::CommandContext;
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::{Namespace, WriteOp};

pub(crate) const USERS_DB: &str = "admin";
pub(crate) const USERS_COLLECTION: &str = "system.users";

pub(crate) fn users_ns() -> Namespace {
    Namespace::new(USERS_DB, USERS_COLLECTION)
}

/// mongod's `_id` of a user document (`UserName::getUnambiguousName`).
pub(crate) fn user_id(db: &str, user: &str) -> String {
    format!("{db}.{user}")
}

/// The stored document of `user@db`, if any.
pub(crate) async fn find_user(
    state: &ServerState,
    db: &str,
    user: &str,
) -> CommandResult<Option<Document>> {
    Ok(store::get(state, &users_ns(), &user_id(db, user))
        .await?
        .map(|(document, _)| document))
}

/// The user's SCRAM credential for `mechanism`, if the user exists and has one.
pub async fn credential(
    state: &ServerState,
    db: &str,
    user: &str,
    mechanism: Mechanism,
) -> CommandResult<Option<Credential>> {
    let Some(document) = find_user(state, db, user).await? else {
        return Ok(None);
    };
    Ok(document
        .get_document("credentials")
        .and_then(|credentials| credentials.get_document(mechanism.name()))
        .ok()
        .and_then(|stored| Credential::from_document(stored).ok()))
}

/// The names of a stored user's credentials (usersInfo's `mechanisms`, as mongod: `external`
/// for an `$external` user), which for a SCRAM user are also the mechanisms it can log in with
/// (hello's `saslSupportedMechs`).
pub(crate) fn mechanisms_of(document: &Document) -> Vec<Bson> {
    let credentials = document.get_document("credentials").ok();
    let mut mechanisms: Vec<Bson> = Mechanism::ALL
        .into_iter()
        .filter(|m| credentials.is_some_and(|c| c.contains_key(m.name())))
        .map(|m| Bson::from(m.name()))
        .collect();
    if is_external(document) {
        mechanisms.push(Bson::from("external"));
    }
    mechanisms
}

/// Whether a stored user is an external one (`credentials.external`: authenticated by
/// MONGODB-X509, never by a password).
pub(crate) fn is_external(document: &Document) -> bool {
    document
        .get_document("credentials")
        .is_ok_and(|credentials| credentials.get_bool("external") == Ok(true))
}

/// The roles of a stored user.
pub fn roles_of(document: &Document) -> Vec<RoleName> {
    document
        .get_array("roles")
        .map(|roles| {
            roles
                .iter()
                .filter_map(|role| {
                    let role = role.as_document()?;
                    Some(RoleName {
                        role: role.get_str("role").ok()?.to_owned(),
                        db: role.get_str("db").ok()?.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every stored user.
async fn all_users(state: &ServerState) -> CommandResult<Vec<Document>> {
    store::all(state, &users_ns()).await
}

/// Whether any user exists (the localhost exception ends with the first one).
pub(crate) async fn any_user_exists(state: &ServerState) -> CommandResult<bool> {
    Ok(!store::is_empty(state, &users_ns()).await?)
}

/// The user or role name a command names in its first field.
pub(super) fn command_name<'b>(ctx: &CommandContext, body: &'b Document) -> CommandResult<&'b str> {
    match body.get(ctx.name) {
        Some(Bson::String(user)) => Ok(user),
        Some(other) => Err(CommandError::idl_wrong_type(
            ctx.name,
            ctx.name,
            tideway_base::display::type_name(other),
            "string",
        )),
        None => Err(CommandError::idl_missing_field(ctx.name, ctx.name)),
    }
}

/// `roles` as mongod resolves them (`auth::resolveRoleNames`): a string names a role on the
/// command's database; duplicates count once. Whether they exist is `roles::check_exist`.
pub(super) fn parse_role_names(
    ctx: &CommandContext,
    roles: &[Bson],
) -> CommandResult<Vec<RoleName>> {
    let mut resolved = Vec::with_capacity(roles.len());
    for role in roles {
        let (name, db) = crate::auth::name_and_db(role, "role", ctx.db).ok_or_else(|| {
            CommandError::bad_value(if role.as_document().is_some() {
                "Role names must be either strings or objects with 'role' and 'db' fields"
            } else {
                "Role names must be either strings or objects"
            })
        })?;
        let role = RoleName {
            role: name.to_owned(),
            db: db.to_owned(),
        };
        if !resolved.contains(&role) {
            resolved.push(role);
        }
    }
    Ok(resolved)
}

/// `roles` parsed, each an existing role (built-in or in `admin.system.roles`), else mongod's
/// RoleNotFound.
async fn parse_roles(ctx: &CommandContext<'_>, roles: &[Bson]) -> CommandResult<Vec<RoleName>> {
    let roles = parse_role_names(ctx, roles)?;
    super::roles::check_exist(ctx.state, &roles).await?;
    Ok(roles)
}

pub(super) fn roles_array(roles: &[RoleName]) -> Bson {
    Bson::Array(
        roles
            .iter()
            .map(|r| Bson::Document(r.to_document()))
            .collect(),
    )
}

/// `mechanisms` (default: both), each a SCRAM mechanism mongod offers.
fn parse_mechanisms(body: &Document) -> CommandResult<Vec<Mechanism>> {
    let Ok(requested) = body.get_array("mechanisms") else {
        return Ok(Mechanism::ALL.to_vec());
    };
    if requested.is_empty() {
        return Err(CommandError::bad_value(
            "mechanisms field must not be empty",
        ));
    }
    let mut mechanisms = Vec::new();
    for name in requested {
        let name = name.as_str().unwrap_or_default();
        let mechanism = Mechanism::from_name(name)
            .ok_or_else(|| CommandError::bad_value(format!("Unknown auth mechanism '{name}'")))?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    Ok(mechanisms)
}

/// `credentials` for `pwd` (mongod's `buildCredentials`): fresh salt per mechanism.
fn build_credentials(
    user: &str,
    password: &str,
    digest_password: bool,
    mechanisms: &[Mechanism],
) -> CommandResult<Document> {
    if password.is_empty() {
        return Err(CommandError::bad_value("User passwords must not be empty"));
    }
    if !digest_password && mechanisms.contains(&Mechanism::Sha256) {
        return Err(CommandError::bad_value(
            "Use of SCRAM-SHA-256 requires undigested passwords",
        ));
    }
    let mut credentials = Document::new();
    for mechanism in mechanisms {
        let prepared = mechanism
            .prepare_password(user, password, digest_password)
            .map_err(|error| {
                CommandError::bad_value(format!("Error preparing password: {error}"))
            })?;
        let salt: Vec<u8> = (0..mechanism.salt_len())
            .map(|_| rand::random::<u8>())
            .collect();
        let credential =
            Credential::derive(*mechanism, &prepared, &salt, mechanism.default_iterations());
        credentials.insert(mechanism.name(), credential.to_document());
    }
    Ok(credentials)
}

fn digest_password(body: &Document) -> bool {
    body.get_bool("digestPassword").unwrap_or(true)
}

pub async fn create_user(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let user = command_name(ctx, body)?;
    if ctx.db == "local" {
        return Err(CommandError::bad_value(
            "Cannot create users in the local database",
        ));
    }
    if user.contains('\0') {
        return Err(CommandError::bad_value(
            "Username cannot contain NULL characters",
        ));
    }
    // mongod's checks, in its order (`user_management_commands.cpp`, createUser).
    let external = ctx.db == super::x509::EXTERNAL_DB;
    let password = body.get_str("pwd").ok();
    if password.is_none() && !external {
        return Err(CommandError::bad_value(
            "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db",
        ));
    }
    if password.is_some() && external {
        return Err(external_password());
    }
    let mechanisms = parse_mechanisms(body)?;
    let roles = parse_roles(
        ctx,
        body.get_array("roles").map(Vec::as_slice).unwrap_or(&[]),
    )
    .await?;
    let credentials = match password {
        // mongod's `buildCredentials` for `$external`: no SCRAM credential, whatever
        // `mechanisms` says.
        None => doc! {"external": true},
        Some(password) => build_credentials(user, password, digest_password(body), &mechanisms)?,
    };
    let mut document = doc! {
        "_id": user_id(ctx.db, user),
        "userId": Bson::Binary(Binary::from_uuid(bson::Uuid::new())),
        "user": user,
        "db": ctx.db,
        "credentials": credentials,
    };
    if let Ok(custom) = body.get_document("customData") {
        document.insert("customData", custom.clone());
    }
    document.insert("roles", roles_array(&roles));
    let op = WriteOp::Insert {
        doc: document,
        meta: store::meta(ctx.state),
        supersede: None,
    };
    match store::write_one(ctx.state, &users_ns(), op).await {
        Err(error) if error.code == ErrorCode::DuplicateKey => Err(CommandError::new(
            ErrorCode::Location51003,
            format!("User \"{user}@{}\" already exists", ctx.db),
        )),
        Err(error) => Err(error),
        Ok(()) => {
            ctx.state.auth.user_created();
            Ok(Document::new())
        }
    }
}

/// mongod's refusal of a password for an `$external` user (createUser, updateUser).
fn external_password() -> CommandError {
    CommandError::bad_value("Cannot set the password for users defined on the '$external' database")
}

/// Reads `user@db` for a change, or mongod's UserNotFound.
async fn existing(ctx: &CommandContext<'_>, user: &str) -> CommandResult<(Document, u64)> {
    match store::get(ctx.state, &users_ns(), &user_id(ctx.db, user)).await? {
        Some(found) => Ok(found),
        None => Err(CommandError::new(
            ErrorCode::UserNotFound,
            format!("Could not find user \"{user}\" for db \"{}\"", ctx.db),
        )),
    }
}

async fn replace(ctx: &CommandContext<'_>, document: Document, rev: u64) -> CommandResult<()> {
    store::write_one(
        ctx.state,
        &users_ns(),
        store::replace_op(ctx.state, document, rev),
    )
    .await
}

pub(crate) async fn update_user(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let user = command_name(ctx, body)?;
    let mechanisms = match body.get("mechanisms") {
        Some(_) => Some(parse_mechanisms(body)?),
        None => None,
    };
    let password = body.get_str("pwd").ok();
    let roles = match body.get_array("roles") {
        Ok(roles) => Some(parse_roles(ctx, roles).await?),
        Err(_) => None,
    };
    let custom = body.get_document("customData").ok();
    if password.is_none() && mechanisms.is_none() && roles.is_none() && custom.is_none() {
        return Err(CommandError::bad_value(
            "Must specify at least one field to update in updateUser",
        ));
    }
    if password.is_some() && ctx.db == super::x509::EXTERNAL_DB {
        return Err(external_password());
    }
    let (mut document, rev) = existing(ctx, user).await?;
    if let Some(password) = password {
        let mechanisms = mechanisms.unwrap_or_else(|| Mechanism::ALL.to_vec());
        let credentials = build_credentials(user, password, digest_password(body), &mechanisms)?;
        document.insert("credentials", credentials);
    } else if let Some(mechanisms) = mechanisms {
        // Without a password, `mechanisms` may only narrow the stored credentials (mongod's
        // `trimCredentials`).
        let credentials = document
            .get_document("credentials")
            .cloned()
            .unwrap_or_default();
        for mechanism in &mechanisms {
            if !credentials.contains_key(mechanism.name()) {
                return Err(CommandError::bad_value(
                    "mechanisms field must be a subset of previously set mechanisms",
                ));
            }
        }
        let credentials: Document = credentials
            .into_iter()
            .filter(|(name, _)| Mechanism::from_name(name).is_some_and(|m| mechanisms.contains(&m)))
            .collect();
        document.insert("credentials", credentials);
    }
    if let Some(custom) = custom {
        document.insert("customData", custom.clone());
    }
    if let Some(roles) = roles {
        document.insert("roles", roles_array(&roles));
    }
    replace(ctx, document, rev).await.map(|()| Document::new())
}

pub(crate) async fn drop_user(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let user = command_name(ctx, body)?;
    let op = WriteOp::Delete {
        id: Bson::String(user_id(ctx.db, user)),
        expected_rev: None,
    };
    match store::write_one(ctx.state, &users_ns(), op).await {
        Err(error) if error.code == ErrorCode::WriteConflict => Err(CommandError::new(
            ErrorCode::UserNotFound,
            format!("User '{user}@{}' not found", ctx.db),
        )),
        other => other.map(|()| Document::new()),
    }
}

pub(crate) async fn drop_all_users_from_database(
    ctx: &CommandContext<'_>,
    _body: &Document,
) -> CommandResult {
    let doomed: Vec<WriteOp> = all_users(ctx.state)
        .await?
        .into_iter()
        .filter(|user| user.get_str("db") == Ok(ctx.db))
        .filter_map(|user| user.get("_id").cloned())
        .map(|id| WriteOp::Delete {
            id,
            expected_rev: None,
        })
        .collect();
    let removed = store::write_each(ctx.state, &users_ns(), doomed).await?;
    Ok(doc! {"n": removed})
}

/// `grantRolesToUser` and `revokeRolesFromUser`.
pub(crate) async fn change_roles(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let user = command_name(ctx, body)?;
    let requested = body.get_array("roles").map(Vec::as_slice).unwrap_or(&[]);
    if requested.is_empty() {
        return Err(CommandError::bad_value(format!(
            "{} command requires a non-empty \"roles\" array",
            ctx.name
        )));
    }
    let (mut document, rev) = existing(ctx, user).await?;
    let changed = parse_roles(ctx, requested).await?;
    let mut roles: BTreeSet<RoleName> = roles_of(&document).into_iter().collect();
    for role in changed {
        if ctx.name == "grantRolesToUser" {
            roles.insert(role);
        } else {
            roles.remove(&role);
        }
    }
    let roles: Vec<RoleName> = roles.into_iter().collect();
    document.insert("roles", roles_array(&roles));
    replace(ctx, document, rev).await.map(|()| Document::new())
}

/// Which users `usersInfo` asks about.
enum UsersQuery {
    /// `1`: every user of the command's database; `{forAllDBs: true}`: every user.
    Database(Option<String>),
    Names(Vec<(String, String)>),
}

fn parse_user_name(ctx: &CommandContext, value: &Bson) -> CommandResult<(String, String)> {
    let (user, db) = crate::auth::name_and_db(value, "user", ctx.db).ok_or_else(|| {
        CommandError::bad_value(if value.as_document().is_some() {
            "User name must contain 'user' and 'db' string fields"
        } else {
            "User names must be either strings or objects"
        })
    })?;
    Ok((user.to_owned(), db.to_owned()))
}

fn parse_users_query(ctx: &CommandContext, value: Option<&Bson>) -> CommandResult<UsersQuery> {
    match value {
        Some(Bson::Int32(1) | Bson::Int64(1)) => Ok(UsersQuery::Database(Some(ctx.db.to_owned()))),
        Some(Bson::Double(one)) if *one == 1.0 => Ok(UsersQuery::Database(Some(ctx.db.to_owned()))),
        Some(Bson::Document(spec)) if spec.contains_key("forAllDBs") => {
            if spec.get_bool("forAllDBs") == Ok(true) && spec.len() == 1 {
                Ok(UsersQuery::Database(None))
            } else {
                Err(CommandError::bad_value("forAllDBs must be true"))
            }
        }
        Some(Bson::Array(names)) => Ok(UsersQuery::Names(
            names
                .iter()
                .map(|name| parse_user_name(ctx, name))
                .collect::<CommandResult<_>>()?,
        )),
        Some(other @ (Bson::String(_) | Bson::Document(_))) => {
            Ok(UsersQuery::Names(vec![parse_user_name(ctx, other)?]))
        }
        _ => Err(CommandError::bad_value(
            "usersInfo must be 1, a user name, a {user, db} document, an array of those, or {forAllDBs: true}",
        )),
    }
}

pub(crate) async fn users_info(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let query = parse_users_query(ctx, body.get("usersInfo"))?;
    let show_credentials = body
        .get("showCredentials")
        .is_some_and(tideway_base::bsonutil::is_truthy);
    let show_custom_data = body
        .get("showCustomData")
        .is_none_or(tideway_base::bsonutil::is_truthy);
    let show_privileges = body
        .get("showPrivileges")
        .is_some_and(tideway_base::bsonutil::is_truthy);
    let show_restrictions = body
        .get("showAuthenticationRestrictions")
        .is_some_and(tideway_base::bsonutil::is_truthy);
    if show_privileges || show_restrictions {
        let UsersQuery::Names(names) = query else {
            return Err(CommandError::new(
                ErrorCode::IllegalOperation,
                "Privilege or restriction details require exact-match usersInfo queries",
            ));
        };
        let mut users = Vec::new();
        for (user, db) in names {
            if let Some(document) = find_user(ctx.state, &db, &user).await? {
                let description = describe_user(
                    ctx.state,
                    &document,
                    show_credentials,
                    show_custom_data,
                    show_restrictions,
                )
                .await?;
                users.push(Bson::Document(description));
            }
        }
        return Ok(doc! {"users": users});
    }
    let mut found = Vec::new();
    match query {
        UsersQuery::Database(db) => {
            for user in all_users(ctx.state).await? {
                if db.as_deref().is_none_or(|db| user.get_str("db") == Ok(db)) {
                    found.push(user);
                }
            }
        }
        UsersQuery::Names(names) => {
            for (user, db) in names {
                if let Some(document) = find_user(ctx.state, &db, &user).await? {
                    if !found.contains(&document) {
                        found.push(document);
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| {
        (a.get_str("user").ok(), a.get_str("db").ok())
            .cmp(&(b.get_str("user").ok(), b.get_str("db").ok()))
    });
    let users: Vec<Bson> = found
        .into_iter()
        .map(|mut user| {
            let mechanisms = mechanisms_of(&user);
            if !show_credentials {
                user.remove("credentials");
            }
            if !show_custom_data {
                user.remove("customData");
            }
            user.insert("mechanisms", mechanisms);
            Bson::Document(user)
        })
        .collect();
    Ok(doc! {"users": users})
}

/// A user as `usersInfo` describes it with privileges or restrictions. With `showCustomData`
/// (the default) it is mongod's `getUserDescription`: the stored fields in order, `credentials`
/// shown as `mechanisms` in its place (and kept only with `showCredentials`); without it,
/// mongod's `User::reportForUsersInfo` (`_id`, `userId`, `user`, `db`, `mechanisms`, `roles`,
/// `credentials` when asked). Then `inheritedRoles` (its roles and every role they reach),
/// `inheritedPrivileges` (all they grant, merged per resource) and
/// `inheritedAuthenticationRestrictions` (tideway stores none).
async fn describe_user(
    state: &ServerState,
    user: &Document,
    show_credentials: bool,
    show_custom_data: bool,
    show_restrictions: bool,
) -> CommandResult<Document> {
    let mut description = Document::new();
    if show_custom_data {
        for (key, value) in user {
            if key == "credentials" {
                description.insert("mechanisms", mechanisms_of(user));
                if !show_credentials {
                    continue;
                }
            }
            description.insert(key.clone(), value.clone());
        }
        if show_restrictions {
            description.insert("authenticationRestrictions", Bson::Array(vec![]));
        }
    } else {
        for key in ["_id", "userId", "user", "db"] {
            if let Some(value) = user.get(key) {
                description.insert(key, value.clone());
            }
        }
        description.insert("mechanisms", mechanisms_of(user));
        description.insert("roles", roles_array(&roles_of(user)));
        if let (true, Some(credentials)) = (show_credentials, user.get("credentials")) {
            description.insert("credentials", credentials.clone());
        }
    }
    let direct = roles_of(user);
    let resolved = super::roles::resolve_graph(state, &direct).await?;
    let mut inherited = resolved.roles;
    inherited.extend(direct);
    description.insert(
        "inheritedRoles",
        roles_array(&inherited.into_iter().collect::<Vec<_>>()),
    );
    description.insert(
        "inheritedPrivileges",
        resolved
            .privileges
            .privileges()
            .into_iter()
            .map(|p| Bson::Document(p.to_document()))
            .collect::<Vec<_>>(),
    );
    description.insert("inheritedAuthenticationRestrictions", Bson::Array(vec![]));
    if show_restrictions && !show_custom_data {
        description.insert("authenticationRestrictions", Bson::Array(vec![]));
    }
    Ok(description)
}
