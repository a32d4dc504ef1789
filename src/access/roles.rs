//! Roles as privileges: a user's roles resolved, with every role they hold, into one
//! [`PrivilegeSet`]; built-in roles from `privileges`, user-defined roles from
//! `admin.system.roles` as mongod stores them (`_id: "<db>.<role>"`, `role`, `db`, `privileges:
//! [{resource, actions}]`, `roles: [{role, db}]`).
//!
//! Invariants: resolution visits each role once (a cycle cannot loop) and at most
//! [`MAX_ROLES_RESOLVED`] roles per user; a stored role that cannot be read grants nothing (it
//! is logged), never more than it says. The role commands over these documents are
//! `role_commands`.

use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::{store, RoleName};
use crate::auth::privileges::{
    builtin_privileges_transitive, Action, ActionSet, PrivilegeSet, ResourcePattern,
};
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::Namespace;

pub(crate) const ROLES_COLLECTION: &str = "system.roles";

/// More roles than any real role graph has; beyond it resolution stops.
pub(crate) const MAX_ROLES_RESOLVED: usize = 10_000;

pub(crate) fn roles_ns() -> Namespace {
    Namespace::new(super::users::USERS_DB, ROLES_COLLECTION)
}

/// A user-defined role as stored.
#[derive(Debug, Default)]
pub(crate) struct StoredRole {
    pub privileges: PrivilegeSet,
    pub roles: Vec<RoleName>,
}

/// The stored document of user-defined role `role`, if any.
pub(crate) async fn find_role_document(
    state: &ServerState,
    role: &RoleName,
) -> CommandResult<Option<Document>> {
    Ok(store::get(state, &roles_ns(), &role_id(role))
        .await?
        .map(|(document, _)| document))
}

/// Reads a stored role document's privileges and roles; what cannot be read is skipped.
pub(crate) fn parse_stored_role(document: &Document) -> StoredRole {
    let mut stored = StoredRole::default();
    for privilege in document
        .get_array("privileges")
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(Bson::as_document)
    {
        let resource = privilege
            .get_document("resource")
            .ok()
            .and_then(|resource| ResourcePattern::from_document(resource).ok());
        let actions: Vec<Action> = privilege
            .get_array("actions")
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .filter_map(|action| Action::from_name(action.as_str()?))
            .collect();
        if let Some(resource) = resource {
            stored.privileges.grant(resource, ActionSet::of(&actions));
        }
    }
    stored.roles = super::users::roles_of(document);
    stored
}

/// What a set of roles resolves to (mongod's `resolveRoles`).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// Every role reached through a user-defined role's `roles`, transitively (not the starting
    /// roles themselves, unless reached again); built-in roles are not walked into, as mongod
    /// lists them: their privileges already include those of the roles they hold.
    pub roles: BTreeSet<RoleName>,
    /// The privileges of the starting roles and of every role reached, merged per resource.
    pub privileges: PrivilegeSet,
}

/// Resolves `roles` breadth-first; a role that does not exist grants nothing (logged).
pub(crate) async fn resolve_graph(
    state: &ServerState,
    roles: &[RoleName],
) -> CommandResult<Resolved> {
    let mut resolved = Resolved::default();
    let mut frontier: Vec<RoleName> = roles.to_vec();
    let mut visited: BTreeSet<RoleName> = BTreeSet::new();
    while !frontier.is_empty() && visited.len() < MAX_ROLES_RESOLVED {
        let mut next: Vec<RoleName> = Vec::new();
        for role in frontier {
            if !visited.insert(role.clone()) {
                continue;
            }
            if let Some(privileges) = builtin_privileges_transitive(&role.role, &role.db) {
                resolved.privileges.extend(&privileges);
                continue;
            }
            let Some(document) = find_role_document(state, &role).await? else {
                tracing::debug!(
                    role = role.role,
                    db = role.db,
                    "role not found: grants nothing"
                );
                continue;
            };
            let stored = parse_stored_role(&document);
            resolved.privileges.extend(&stored.privileges);
            for subrole in stored.roles {
                if visited.contains(&subrole) || next.contains(&subrole) {
                    continue;
                }
                resolved.roles.insert(subrole.clone());
                next.push(subrole);
            }
        }
        frontier = next;
    }
    Ok(resolved)
}

/// The privileges of `roles` and of every role they hold, transitively.
pub async fn resolve(state: &ServerState, roles: &[RoleName]) -> CommandResult<PrivilegeSet> {
    Ok(resolve_graph(state, roles).await?.privileges)
}

/// Whether `role` exists: built in, or stored.
pub async fn exists(state: &ServerState, role: &RoleName) -> CommandResult<bool> {
    Ok(role.is_builtin() || find_role_document(state, role).await?.is_some())
}

/// mongod's `rolesExist`: every role exists, else RoleNotFound naming the missing ones
/// ("Could not find role: r@db", "Could not find roles: a@db, b@db").
pub(crate) async fn check_exist(state: &ServerState, roles: &[RoleName]) -> CommandResult<()> {
    let mut unknown = Vec::new();
    for role in roles {
        if !exists(state, role).await? {
            unknown.push(role.to_string());
        }
    }
    if unknown.is_empty() {
        return Ok(());
    }
    let plural = if unknown.len() > 1 { "s" } else { "" };
    Err(CommandError::new(
        ErrorCode::RoleNotFound,
        format!("Could not find role{plural}: {}", unknown.join(", ")),
    ))
}

/// mongod's `_id` of a role document (`RoleName::getUnambiguousName`).
pub(crate) fn role_id(role: &RoleName) -> String {
    format!("{}.{}", role.db, role.role)
}
