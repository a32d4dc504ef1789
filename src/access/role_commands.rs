//! The role-management commands, as mongod's (`user_management_commands.cpp`): `createRole`,
//! `updateRole`, `dropRole`, `dropAllRolesFromDatabase`, `grantPrivilegesToRole`,
//! `revokePrivilegesFromRole`, `grantRolesToRole`, `revokeRolesFromRole` and `rolesInfo`, over
//! the role documents `roles` reads (`admin.system.roles`).
//!
//! Invariants, mongod's: built-in roles are never stored, created over or modified; a role on a
//! database other than `admin` holds only privileges on its own database (its database or its
//! collections) and only roles of its own database; the role graph has no cycle (a grant that
//! would close one is refused); every granted role exists; dropping a role removes it from every
//! user's and every role's `roles` (users first, then roles, then the role itself, mongod's
//! order; a crash between the steps leaves at worst the role with fewer holders). Every write
//! goes through `store` (durable, bumps the auth generation). `authenticationRestrictions` are
//! not enforced by tideway, so a non-empty one is refused (238) rather than stored and ignored.

use std::collections::BTreeSet;

use bson::{doc, Bson, Document};

use super::roles::{self, role_id, roles_ns};
use super::users::{self, command_name, parse_role_names, roles_array, roles_of};
use super::{store, RoleName};
use crate::async_handler;
use crate::auth::privileges::{Action, ActionSet, Privilege, PrivilegeSet, ResourcePattern};
use crate::command::{CommandContext, CommandSpec};
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::WriteOp;

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "createRole",
        "Adds a user-defined role: privileges and the roles it inherits.",
        async_handler!(create_role),
    ),
    spec(
        "updateRole",
        "Replaces a user-defined role's privileges and/or roles.",
        async_handler!(update_role),
    ),
    spec(
        "dropRole",
        "Removes a user-defined role, and it from every user and role holding it.",
        async_handler!(drop_role),
    ),
    spec(
        "dropAllRolesFromDatabase",
        "Removes every user-defined role of the command's database.",
        async_handler!(drop_all_roles_from_database),
    ),
    spec(
        "grantPrivilegesToRole",
        "Adds privileges to a user-defined role.",
        async_handler!(change_privileges),
    ),
    spec(
        "revokePrivilegesFromRole",
        "Removes privileges from a user-defined role.",
        async_handler!(change_privileges),
    ),
    spec(
        "grantRolesToRole",
        "Adds inherited roles to a user-defined role.",
        async_handler!(change_roles),
    ),
    spec(
        "revokeRolesFromRole",
        "Removes inherited roles from a user-defined role.",
        async_handler!(change_roles),
    ),
    spec(
        "rolesInfo",
        "Describes roles: 1 (this database), a name, {role, db}, or an array; showPrivileges, showBuiltinRoles.",
        async_handler!(roles_info),
    ),
];

const fn spec(
    name: &'static str,
    help: &'static str,
    handler: crate::command::Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        aliases: &[],
        help,
        admin_only: false,
        test_only: false,
        handler,
    }
}

/// The role a command names in its first field, on the command's database.
fn command_role(ctx: &CommandContext, body: &Document) -> CommandResult<RoleName> {
    Ok(RoleName {
        role: command_name(ctx, body)?.to_owned(),
        db: ctx.db.to_owned(),
    })
}

fn refuse_builtin(role: &RoleName) -> CommandResult<()> {
    if role.is_builtin() {
        return Err(CommandError::bad_value(format!(
            "{role} is a built-in role and cannot be modified"
        )));
    }
    Ok(())
}

/// A command's `privileges` array as mongod parses it: each `{resource, actions}`, privileges on
/// the same resource merged (first appearance keeps its place); every unknown action name is
/// reported at once, as mongod's `uassertNoUnrecognizedActions` (BadValue).
pub(crate) fn parse_privileges(
    context: &str,
    privileges: &[Bson],
) -> CommandResult<Vec<Privilege>> {
    let field = format!("{context}.privileges");
    let mut parsed: Vec<Privilege> = Vec::new();
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    for privilege in privileges {
        let Bson::Document(privilege) = privilege else {
            return Err(CommandError::idl_wrong_type(
                context,
                "privileges",
                tideway_base::display::type_name(privilege),
                "object",
            ));
        };
        for key in privilege.keys() {
            if key != "resource" && key != "actions" {
                return Err(CommandError::idl_unknown_field(&field, key));
            }
        }
        let resource = match privilege.get("resource") {
            Some(Bson::Document(resource)) => {
                ResourcePattern::from_document(resource).map_err(CommandError::bad_value)?
            }
            Some(other) => {
                return Err(CommandError::idl_wrong_type(
                    &field,
                    "resource",
                    tideway_base::display::type_name(other),
                    "object",
                ))
            }
            None => return Err(CommandError::idl_missing_field(&field, "resource")),
        };
        let names = match privilege.get("actions") {
            Some(Bson::Array(names)) => names,
            Some(other) => {
                return Err(CommandError::idl_wrong_type(
                    &field,
                    "actions",
                    tideway_base::display::type_name(other),
                    "array",
                ))
            }
            None => return Err(CommandError::idl_missing_field(&field, "actions")),
        };
        let mut actions = ActionSet::default();
        for name in names {
            let Bson::String(name) = name else {
                return Err(CommandError::idl_wrong_type(
                    &field,
                    "actions",
                    tideway_base::display::type_name(name),
                    "string",
                ));
            };
            match Action::from_name(name) {
                Some(action) => actions.insert(action),
                None => {
                    unknown.insert(name.clone());
                }
            }
        }
        match parsed.iter_mut().find(|p| p.resource == resource) {
            Some(existing) => existing.actions.union(actions),
            None => parsed.push(Privilege { resource, actions }),
        }
    }
    if !unknown.is_empty() {
        let plural = if unknown.len() > 1 { "s" } else { "" };
        let listed: Vec<String> = unknown.iter().map(|name| format!(" '{name}'")).collect();
        return Err(CommandError::bad_value(format!(
            "Unknown action type{plural} in privilege set:{}",
            listed.join(",")
        )));
    }
    Ok(parsed)
}

fn privileges_array(privileges: &[Privilege]) -> Bson {
    Bson::Array(
        privileges
            .iter()
            .map(|p| Bson::Document(p.to_document()))
            .collect(),
    )
}

/// A required array field, or mongod's IDL errors.
fn required_array<'b>(
    ctx: &CommandContext,
    body: &'b Document,
    field: &str,
) -> CommandResult<&'b [Bson]> {
    optional_array(ctx, body, field)?
        .ok_or_else(|| CommandError::idl_missing_field(ctx.name, field))
}

fn optional_array<'b>(
    ctx: &CommandContext,
    body: &'b Document,
    field: &str,
) -> CommandResult<Option<&'b [Bson]>> {
    match body.get(field) {
        None => Ok(None),
        Some(Bson::Array(values)) => Ok(Some(values)),
        Some(other) => Err(CommandError::idl_wrong_type(
            ctx.name,
            field,
            tideway_base::display::type_name(other),
            "array",
        )),
    }
}

/// `authenticationRestrictions`: tideway enforces none, so only an empty one is accepted.
fn refuse_authentication_restrictions(ctx: &CommandContext, body: &Document) -> CommandResult<()> {
    match optional_array(ctx, body, "authenticationRestrictions")? {
        Some(restrictions) if !restrictions.is_empty() => Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not support authenticationRestrictions yet",
        )),
        _ => Ok(()),
    }
}

/// mongod's `checkOkayToGrantPrivilegesToRole`: outside `admin`, a role's privileges target its
/// own database or collections in it.
fn check_grant_privileges(role: &RoleName, privileges: &[Privilege]) -> CommandResult<()> {
    if role.db == "admin" {
        return Ok(());
    }
    for privilege in privileges {
        let own = match &privilege.resource {
            ResourcePattern::Database(db) | ResourcePattern::Namespace(db, _) => *db == role.db,
            _ => false,
        };
        if !own {
            return Err(CommandError::new(
                ErrorCode::InvalidRoleModification,
                format!(
                    "Roles on the '{}' database cannot be granted privileges that target other databases or the cluster",
                    role.db
                ),
            ));
        }
    }
    Ok(())
}

/// mongod's `checkOkayToGrantRolesToRole`: not itself, same database unless `admin`, each
/// existing, and none already holding `role` (which would close a cycle).
async fn check_grant_roles(
    state: &ServerState,
    role: &RoleName,
    granted: &[RoleName],
) -> CommandResult<()> {
    for other in granted {
        if other == role {
            return Err(CommandError::new(
                ErrorCode::InvalidRoleModification,
                format!("Cannot grant role {role} to itself."),
            ));
        }
        if role.db != "admin" && other.db != role.db {
            return Err(CommandError::new(
                ErrorCode::InvalidRoleModification,
                format!(
                    "Roles on the '{}' database cannot be granted roles from other databases",
                    role.db
                ),
            ));
        }
    }
    roles::check_exist(state, granted).await.map_err(|error| {
        CommandError::new(
            error.code,
            format!("Cannot grant roles to '{role}': {}", error.errmsg),
        )
    })?;
    if roles::resolve_graph(state, granted)
        .await?
        .roles
        .contains(role)
    {
        return Err(CommandError::new(
            ErrorCode::InvalidRoleModification,
            format!("Granting roles to {role} would introduce a cycle in the role graph"),
        ));
    }
    Ok(())
}

/// How many times a role update is retried when a concurrent one changed the document first.
const UPDATE_ATTEMPTS: usize = 3;

/// Rewrites the stored document of `role` with `change`; mongod's RoleNotFound "Role r@db not
/// found" if there is none (a built-in role is never stored).
async fn update_role_document(
    state: &ServerState,
    role: &RoleName,
    change: impl Fn(&mut Document),
) -> CommandResult<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some((mut document, rev)) = store::get(state, &roles_ns(), &role_id(role)).await?
        else {
            return Err(CommandError::new(
                ErrorCode::RoleNotFound,
                format!("Role {role} not found"),
            ));
        };
        change(&mut document);
        match store::write_one(state, &roles_ns(), store::replace_op(state, document, rev)).await {
            Err(error) if error.code == ErrorCode::WriteConflict && attempt < UPDATE_ATTEMPTS => {}
            other => return other,
        }
    }
}

/// The privileges stored in a role document, in their stored order; one that cannot be read
/// (never written by these commands) is left out alone, not with the others.
fn stored_privileges(document: &Document) -> Vec<Privilege> {
    document
        .get_array("privileges")
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|privilege| {
            parse_privileges("privileges", std::slice::from_ref(privilege))
                .ok()?
                .pop()
        })
        .collect()
}

async fn create_role(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let role = command_role(ctx, body)?;
    if role.role.is_empty() {
        return Err(CommandError::bad_value("Role name must be non-empty"));
    }
    if ctx.db == "local" {
        return Err(CommandError::bad_value(
            "Cannot create roles in the local database",
        ));
    }
    if ctx.db == "$external" {
        return Err(CommandError::bad_value(
            "Cannot create roles in the $external database",
        ));
    }
    if role.is_builtin() {
        return Err(CommandError::bad_value(
            "Cannot create roles with the same name as a built-in role",
        ));
    }
    let privileges = parse_privileges(ctx.name, required_array(ctx, body, "privileges")?)?;
    let granted = parse_role_names(ctx, required_array(ctx, body, "roles")?)?;
    refuse_authentication_restrictions(ctx, body)?;
    check_grant_roles(ctx.state, &role, &granted).await?;
    check_grant_privileges(&role, &privileges)?;
    let document = doc! {
        "_id": role_id(&role),
        "role": &role.role,
        "db": &role.db,
        "privileges": privileges_array(&privileges),
        "roles": roles_array(&granted),
    };
    let op = WriteOp::Insert {
        doc: document,
        meta: store::meta(ctx.state),
        supersede: None,
    };
    match store::write_one(ctx.state, &roles_ns(), op).await {
        Err(error) if error.code == ErrorCode::DuplicateKey => Err(CommandError::new(
            ErrorCode::Location51002,
            format!("Role \"{role}\" already exists"),
        )),
        other => other.map(|()| Document::new()),
    }
}

async fn update_role(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let role = command_role(ctx, body)?;
    let privileges = optional_array(ctx, body, "privileges")?;
    let granted = optional_array(ctx, body, "roles")?;
    if privileges.is_none() && granted.is_none() && !body.contains_key("authenticationRestrictions")
    {
        return Err(CommandError::bad_value(
            "Must specify at least one field to update in updateRole",
        ));
    }
    let privileges = privileges
        .map(|privileges| parse_privileges(ctx.name, privileges))
        .transpose()?;
    let granted = granted
        .map(|granted| parse_role_names(ctx, granted))
        .transpose()?;
    refuse_authentication_restrictions(ctx, body)?;
    roles::check_exist(ctx.state, std::slice::from_ref(&role)).await?;
    if let Some(granted) = &granted {
        check_grant_roles(ctx.state, &role, granted).await?;
    }
    if let Some(privileges) = &privileges {
        check_grant_privileges(&role, privileges)?;
    }
    update_role_document(ctx.state, &role, |document| {
        if let Some(privileges) = &privileges {
            document.insert("privileges", privileges_array(privileges));
        }
        if let Some(granted) = &granted {
            document.insert("roles", roles_array(granted));
        }
    })
    .await?;
    Ok(Document::new())
}

/// `grantPrivilegesToRole` and `revokePrivilegesFromRole`.
async fn change_privileges(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let role = command_role(ctx, body)?;
    let requested = required_array(ctx, body, "privileges")?;
    if requested.is_empty() {
        return Err(CommandError::bad_value(format!(
            "{} command requires a non-empty \"privileges\" array",
            ctx.name
        )));
    }
    refuse_builtin(&role)?;
    let changed = parse_privileges(ctx.name, requested)?;
    let granting = ctx.name == "grantPrivilegesToRole";
    if granting {
        check_grant_privileges(&role, &changed)?;
    }
    update_role_document(ctx.state, &role, |document| {
        let mut privileges = stored_privileges(document);
        for change in &changed {
            let existing = privileges
                .iter()
                .position(|p| p.resource == change.resource);
            match (existing, granting) {
                (Some(at), true) => privileges[at].actions.union(change.actions),
                (None, true) => privileges.push(change.clone()),
                (Some(at), false) => {
                    if !privileges[at].actions.remove_all(change.actions) {
                        privileges.remove(at);
                    }
                }
                (None, false) => {}
            }
        }
        document.insert("privileges", privileges_array(&privileges));
    })
    .await?;
    Ok(Document::new())
}

/// `grantRolesToRole` and `revokeRolesFromRole`.
async fn change_roles(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let role = command_role(ctx, body)?;
    let requested = required_array(ctx, body, "roles")?;
    if requested.is_empty() {
        return Err(CommandError::bad_value(format!(
            "{} command requires a non-empty \"roles\" array",
            ctx.name
        )));
    }
    refuse_builtin(&role)?;
    let changed = parse_role_names(ctx, requested)?;
    let granting = ctx.name == "grantRolesToRole";
    if granting {
        check_grant_roles(ctx.state, &role, &changed).await?;
    }
    update_role_document(ctx.state, &role, |document| {
        let mut held = roles_of(document);
        if granting {
            for added in &changed {
                if !held.contains(added) {
                    held.push(added.clone());
                }
            }
        } else {
            held.retain(|r| !changed.contains(r));
        }
        document.insert("roles", roles_array(&held));
    })
    .await?;
    Ok(Document::new())
}

/// Removes every role `doomed` matches from the `roles` of every document of `ns` (users or
/// roles) holding one. A document changed concurrently is read again and retried (up to
/// [`UPDATE_ATTEMPTS`] passes), so no holder keeps a dropped role: were it left, a role created
/// later under the same name would silently come back to it.
async fn pull_roles(
    state: &ServerState,
    ns: &tideway_storage::Namespace,
    doomed: impl Fn(&RoleName) -> bool,
) -> CommandResult<()> {
    for _ in 0..UPDATE_ATTEMPTS {
        let mut ops = Vec::new();
        for (mut document, rev) in store::all_records(state, ns).await? {
            let held = roles_of(&document);
            if !held.iter().any(&doomed) {
                continue;
            }
            let kept: Vec<RoleName> = held.into_iter().filter(|r| !doomed(r)).collect();
            document.insert("roles", roles_array(&kept));
            ops.push(store::replace_op(state, document, rev));
        }
        let wanted = ops.len();
        if store::write_each(state, ns, ops).await? == i32::try_from(wanted).unwrap_or(i32::MAX) {
            return Ok(());
        }
    }
    Err(CommandError::new(
        ErrorCode::WriteConflict,
        "Failed to remove the dropped role from every holder: concurrent changes; try again",
    ))
}

async fn drop_role(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let role = command_role(ctx, body)?;
    refuse_builtin(&role)?;
    roles::check_exist(ctx.state, std::slice::from_ref(&role)).await?;
    pull_roles(ctx.state, &users::users_ns(), |r| *r == role).await?;
    pull_roles(ctx.state, &roles_ns(), |r| *r == role).await?;
    let op = WriteOp::Delete {
        id: Bson::String(role_id(&role)),
        expected_rev: None,
    };
    match store::write_one(ctx.state, &roles_ns(), op).await {
        // Dropped concurrently: it is gone either way.
        Err(error) if error.code == ErrorCode::WriteConflict => Ok(Document::new()),
        other => other.map(|()| Document::new()),
    }
}

async fn drop_all_roles_from_database(ctx: &CommandContext<'_>, _body: &Document) -> CommandResult {
    let db = ctx.db;
    pull_roles(ctx.state, &users::users_ns(), |r| r.db == db).await?;
    pull_roles(ctx.state, &roles_ns(), |r| r.db == db).await?;
    let doomed: Vec<WriteOp> = store::all(ctx.state, &roles_ns())
        .await?
        .into_iter()
        .filter(|role| role.get_str("db") == Ok(db))
        .filter_map(|role| role.get("_id").cloned())
        .map(|id| WriteOp::Delete {
            id,
            expected_rev: None,
        })
        .collect();
    let removed = store::write_each(ctx.state, &roles_ns(), doomed).await?;
    Ok(doc! {"n": removed})
}

/// Which roles `rolesInfo` asks about.
enum RolesQuery {
    /// `1`: the command database's roles (built-in ones with `showBuiltinRoles`).
    Database,
    Names(Vec<RoleName>),
}

fn parse_role_name(ctx: &CommandContext, value: &Bson) -> CommandResult<RoleName> {
    let (role, db) = crate::auth::name_and_db(value, "role", ctx.db).ok_or_else(|| {
        CommandError::bad_value(if value.as_document().is_some() {
            "Role name must contain 'role' and 'db' string fields"
        } else {
            "Role names must be either strings or objects"
        })
    })?;
    Ok(RoleName {
        role: role.to_owned(),
        db: db.to_owned(),
    })
}

fn parse_roles_query(ctx: &CommandContext, value: Option<&Bson>) -> CommandResult<RolesQuery> {
    match value {
        Some(number) if tideway_base::bsonutil::as_f64(number) == Some(1.0) => {
            Ok(RolesQuery::Database)
        }
        Some(Bson::Array(names)) => Ok(RolesQuery::Names(
            names
                .iter()
                .map(|name| parse_role_name(ctx, name))
                .collect::<CommandResult<_>>()?,
        )),
        Some(other @ (Bson::String(_) | Bson::Document(_))) => {
            Ok(RolesQuery::Names(vec![parse_role_name(ctx, other)?]))
        }
        _ => Err(CommandError::bad_value(
            "rolesInfo must be 1, a role name, a {role, db} document, or an array of those",
        )),
    }
}

/// `showPrivileges`: false, true, or `"asUserFragment"`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShowPrivileges {
    Omit,
    Separate,
    AsUserFragment,
}

fn parse_show_privileges(value: Option<&Bson>) -> CommandResult<ShowPrivileges> {
    match value {
        None => Ok(ShowPrivileges::Omit),
        Some(Bson::String(format)) if format == "asUserFragment" => {
            Ok(ShowPrivileges::AsUserFragment)
        }
        Some(Bson::String(_)) => Err(CommandError::bad_value(
            "showPrivileges must be a boolean or the string 'asUserFragment'",
        )),
        Some(flag) if tideway_base::bsonutil::is_truthy(flag) => Ok(ShowPrivileges::Separate),
        Some(_) => Ok(ShowPrivileges::Omit),
    }
}

fn flag(body: &Document, field: &str) -> bool {
    body.get(field)
        .is_some_and(tideway_base::bsonutil::is_truthy)
}

fn privilege_documents(privileges: &PrivilegeSet) -> Vec<Bson> {
    privileges
        .privileges()
        .into_iter()
        .map(|p| Bson::Document(p.to_document()))
        .collect()
}

fn role_documents<'a>(roles: impl IntoIterator<Item = &'a RoleName>) -> Vec<Bson> {
    roles
        .into_iter()
        .map(|r| Bson::Document(r.to_document()))
        .collect()
}

/// Appends mongod's `serializeResolvedRoles` for a role holding `subroles`: `inheritedRoles`
/// (the subroles and all they reach), `inheritedPrivileges` (the role's own privileges as
/// listed, then those of everything it inherits) and `inheritedAuthenticationRestrictions`.
async fn append_resolved(
    state: &ServerState,
    out: &mut Document,
    subroles: &[RoleName],
    own_privileges: Option<&Bson>,
    show_privileges: bool,
    show_restrictions: bool,
) -> CommandResult<()> {
    let resolved = roles::resolve_graph(state, subroles).await?;
    let mut inherited = resolved.roles;
    inherited.extend(subroles.iter().cloned());
    out.insert("inheritedRoles", role_documents(&inherited));
    if show_privileges {
        let mut privileges: Vec<Bson> = own_privileges
            .and_then(Bson::as_array)
            .cloned()
            .unwrap_or_default();
        privileges.extend(privilege_documents(&resolved.privileges));
        out.insert("inheritedPrivileges", privileges);
    }
    if show_restrictions {
        out.insert("inheritedAuthenticationRestrictions", Bson::Array(vec![]));
    }
    Ok(())
}

/// A stored role's fields as `rolesInfo` shows them (mongod's `filterAndMapRole`): `privileges`
/// only when asked, `authenticationRestrictions` (none are stored) only when asked.
fn filtered_role(stored: &Document, show_privileges: bool, show_restrictions: bool) -> Document {
    let mut out: Document = stored
        .iter()
        .filter(|(key, _)| show_privileges || key.as_str() != "privileges")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if show_restrictions {
        out.insert("authenticationRestrictions", Bson::Array(vec![]));
    }
    out
}

async fn roles_info(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let query = parse_roles_query(ctx, body.get("rolesInfo"))?;
    let show = parse_show_privileges(body.get("showPrivileges"))?;
    let show_privileges = show != ShowPrivileges::Omit;
    let show_restrictions = flag(body, "showAuthenticationRestrictions");
    let names = match query {
        RolesQuery::Database if show == ShowPrivileges::AsUserFragment => {
            return Err(CommandError::new(
                ErrorCode::IllegalOperation,
                "Cannot get user fragment for all roles in a database",
            ))
        }
        RolesQuery::Database => {
            return database_roles(ctx, body, show_privileges, show_restrictions).await
        }
        RolesQuery::Names(names) => names,
    };
    if show == ShowPrivileges::AsUserFragment {
        let mut fragment = doc! {"roles": role_documents(&names)};
        append_resolved(
            ctx.state,
            &mut fragment,
            &names,
            None,
            true,
            show_restrictions,
        )
        .await?;
        return Ok(doc! {"userFragment": fragment});
    }
    let mut described = Vec::new();
    for name in &names {
        let stored =
            match crate::auth::privileges::builtin_privileges_transitive(&name.role, &name.db) {
                // A built-in role is synthesized from its definition, with no roles of its own
                // (its privileges already include theirs).
                Some(privileges) => {
                    let mut synthesized = doc! {"db": &name.db, "role": &name.role, "roles": []};
                    if show_privileges {
                        synthesized.insert("privileges", privilege_documents(&privileges));
                    }
                    synthesized
                }
                None => match roles::find_role_document(ctx.state, name).await? {
                    Some(stored) => stored,
                    None => continue,
                },
            };
        let subroles = roles_of(&stored);
        let mut role = filtered_role(&stored, show_privileges, show_restrictions);
        append_resolved(
            ctx.state,
            &mut role,
            &subroles,
            stored.get("privileges"),
            show_privileges,
            show_restrictions,
        )
        .await?;
        role.insert("isBuiltin", name.is_builtin());
        described.push(Bson::Document(role));
    }
    Ok(doc! {"roles": described})
}

/// `rolesInfo: 1`: mongod's `getRoleDescriptionsForDB`.
async fn database_roles(
    ctx: &CommandContext<'_>,
    body: &Document,
    show_privileges: bool,
    show_restrictions: bool,
) -> CommandResult {
    let mut described = Vec::new();
    if flag(body, "showBuiltinRoles") {
        for name in crate::auth::privileges::builtin_role_names(ctx.db) {
            let mut role = doc! {
                "role": name,
                "db": ctx.db,
                "isBuiltin": true,
                "roles": [],
                "inheritedRoles": [],
            };
            if show_privileges {
                let privileges =
                    crate::auth::privileges::builtin_privileges_transitive(name, ctx.db)
                        .map(|privileges| privilege_documents(&privileges))
                        .unwrap_or_default();
                role.insert("privileges", privileges.clone());
                role.insert("inheritedPrivileges", privileges);
            }
            if show_restrictions {
                role.insert("authenticationRestrictions", Bson::Array(vec![]));
                role.insert("inheritedAuthenticationRestrictions", Bson::Array(vec![]));
            }
            described.push(Bson::Document(role));
        }
    }
    for stored in store::all(ctx.state, &roles_ns()).await? {
        if stored.get_str("db") != Ok(ctx.db) {
            continue;
        }
        let mut role = filtered_role(&stored, show_privileges, show_restrictions);
        role.insert("isBuiltin", false);
        append_resolved(
            ctx.state,
            &mut role,
            &roles_of(&stored),
            stored.get("privileges"),
            show_privileges,
            show_restrictions,
        )
        .await?;
        described.push(Bson::Document(role));
    }
    Ok(doc! {"roles": described})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(role: &str, db: &str) -> RoleName {
        RoleName {
            role: role.into(),
            db: db.into(),
        }
    }

    fn privilege(resource: Document, actions: &[&str]) -> Bson {
        Bson::Document(doc! {"resource": resource, "actions": actions})
    }

    // user_management_commands.cpp, uassertNoUnrecognizedActions: every unknown name, sorted,
    // one message (BadValue).
    #[test]
    fn unknown_actions_are_listed_once_each() {
        let error = parse_privileges(
            "createRole",
            &[
                privilege(
                    doc! {"db": "a", "collection": "c"},
                    &["find", "fly", "swim"],
                ),
                privilege(doc! {"db": "a", "collection": ""}, &["fly"]),
            ],
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::BadValue);
        assert_eq!(
            error.errmsg,
            "Unknown action types in privilege set: 'fly', 'swim'"
        );
        let error = parse_privileges("createRole", &[privilege(doc! {"cluster": true}, &["fly"])])
            .unwrap_err();
        assert_eq!(error.errmsg, "Unknown action type in privilege set: 'fly'");
    }

    #[test]
    fn privileges_on_one_resource_merge_in_first_place() {
        let parsed = parse_privileges(
            "createRole",
            &[
                privilege(doc! {"db": "a", "collection": "c"}, &["find"]),
                privilege(doc! {"db": "a", "collection": ""}, &["insert"]),
                privilege(doc! {"db": "a", "collection": "c"}, &["update"]),
            ],
        )
        .unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[0].to_document(),
            doc! {"resource": {"db": "a", "collection": "c"}, "actions": ["find", "update"]}
        );
    }

    #[test]
    fn malformed_privileges_are_refused() {
        let missing = parse_privileges("createRole", &[Bson::Document(doc! {"actions": ["find"]})])
            .unwrap_err();
        assert_eq!(missing.code, ErrorCode::Location40414);
        let unknown = parse_privileges(
            "createRole",
            &[Bson::Document(
                doc! {"resource": {"cluster": true}, "actions": ["find"], "x": 1},
            )],
        )
        .unwrap_err();
        assert_eq!(unknown.code, ErrorCode::Location40415);
        let bad_resource =
            parse_privileges("createRole", &[privilege(doc! {"db": "a"}, &["find"])]).unwrap_err();
        assert_eq!(bad_resource.code, ErrorCode::BadValue);
    }

    // checkOkayToGrantPrivilegesToRole: outside admin, only the role's own database.
    #[test]
    fn non_admin_roles_hold_only_their_database() {
        let own = parse_privileges(
            "createRole",
            &[
                privilege(doc! {"db": "app", "collection": "c"}, &["find"]),
                privilege(doc! {"db": "app", "collection": ""}, &["find"]),
            ],
        )
        .unwrap();
        assert!(check_grant_privileges(&role("r", "app"), &own).is_ok());
        for resource in [
            doc! {"db": "other", "collection": "c"},
            doc! {"db": "", "collection": "c"},
            doc! {"db": "", "collection": ""},
            doc! {"cluster": true},
            doc! {"anyResource": true},
        ] {
            let foreign =
                parse_privileges("createRole", &[privilege(resource.clone(), &["find"])]).unwrap();
            let error = check_grant_privileges(&role("r", "app"), &foreign).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidRoleModification, "{resource}");
            assert!(check_grant_privileges(&role("r", "admin"), &foreign).is_ok());
        }
    }
}
