//! Roles as privileges: a user's roles resolved, with every role they hold, into one
//! [`PrivilegeSet`]; built-in roles from `privileges`, user-defined roles from
//! `admin.system.roles` as mongod stores them (`_id: "<db>.<role>"`, `role`, `db`, `privileges:
//! [{resource, actions}]`, `roles: [{role, db}]`).
//!
//! Invariants: resolution visits each role once (a cycle cannot loop) and at most
//! [`MAX_ROLES_RESOLVED`] roles per user; a stored role that cannot be read grants nothing (it
//! is logged), never more than it says.

use bson::{Bson, Document};

use super::privileges::{
    builtin_privileges, builtin_subroles, Action, ActionSet, PrivilegeSet, ResourcePattern,
};
use super::RoleName;
use crate::error::CommandResult;
use crate::state::ServerState;
use crate::storage::Namespace;

pub const ROLES_COLLECTION: &str = "system.roles";

/// More roles than any real role graph has; beyond it resolution stops.
pub const MAX_ROLES_RESOLVED: usize = 10_000;

pub fn roles_ns() -> Namespace {
    Namespace::new(super::users::USERS_DB, ROLES_COLLECTION)
}

/// A user-defined role as stored.
#[derive(Debug, Default)]
pub struct StoredRole {
    pub privileges: PrivilegeSet,
    pub roles: Vec<RoleName>,
}

/// The stored document of user-defined role `role`, if any.
pub async fn find_role_document(
    state: &ServerState,
    role: &RoleName,
) -> CommandResult<Option<Document>> {
    let id = Bson::String(format!("{}.{}", role.db, role.role));
    let record = state.storage.get(&roles_ns(), &id).await?;
    Ok(record.map(|record| record.doc.into_document()))
}

/// Reads a stored role document's privileges and roles; what cannot be read is skipped.
pub fn parse_stored_role(document: &Document) -> StoredRole {
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

/// The privileges of `roles` and of every role they hold, transitively.
pub async fn resolve(state: &ServerState, roles: &[RoleName]) -> CommandResult<PrivilegeSet> {
    let mut set = PrivilegeSet::default();
    let mut pending: Vec<RoleName> = roles.to_vec();
    let mut seen: Vec<RoleName> = Vec::new();
    while let Some(role) = pending.pop() {
        if seen.contains(&role) || seen.len() >= MAX_ROLES_RESOLVED {
            continue;
        }
        if let Some(privileges) = builtin_privileges(&role.role, &role.db) {
            set.extend(&privileges);
            pending.extend(
                builtin_subroles(&role.role, &role.db)
                    .into_iter()
                    .map(|(role, db)| RoleName {
                        role: role.to_owned(),
                        db,
                    }),
            );
        } else if let Some(document) = find_role_document(state, &role).await? {
            let stored = parse_stored_role(&document);
            set.extend(&stored.privileges);
            pending.extend(stored.roles);
        } else {
            tracing::debug!(
                role = role.role,
                db = role.db,
                "role not found: grants nothing"
            );
        }
        seen.push(role);
    }
    Ok(set)
}
