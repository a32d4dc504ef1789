//! Enforcement under `--auth`: before a command runs, whether the client is authenticated and
//! holds what the command needs (the rules and needs are `crate::auth::authz`'s); who may use
//! another connection's cursors and operations.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::{Bson, Document};

use crate::auth::authz::{rule, rule_needs, Needs, Rule};
use crate::auth::privileges::PrivilegeSet;
use crate::auth::{name_and_db, UserName};
use crate::client::ClientInfo;
use crate::command::CommandSpec;
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// Whether the localhost exception lets `client` do anything: no user exists yet and the
/// connection comes from a loopback address.
async fn localhost_bypass(state: &ServerState, client: &ClientInfo) -> CommandResult<bool> {
    // Once a user exists (the steady state), one atomic load decides.
    let known = state.auth.users_exist.load(Ordering::Acquire);
    if known == 2
        || !state.params.enable_localhost_auth_bypass()
        || !super::client_host(client).is_some_and(|ip| ip.is_loopback())
    {
        return Ok(false);
    }
    let exist = known == 0 && super::users::any_user_exists(state).await?;
    state
        .auth
        .users_exist
        .store(if exist { 2 } else { 1 }, Ordering::Release);
    Ok(!exist)
}

/// The privileges of the connection's users; `None` when nothing is checked (no `--auth`, or
/// the localhost exception). Resolved once per connection and change of users or roles.
pub async fn privileges(
    state: &ServerState,
    client: &ClientInfo,
) -> CommandResult<Option<Arc<PrivilegeSet>>> {
    if !state.auth.enabled || client.internal || localhost_bypass(state, client).await? {
        return Ok(None);
    }
    let generation = state.auth.generation();
    if let Some(set) = client.auth.privileges.at(generation) {
        return Ok(Some(set));
    }
    let mut set = PrivilegeSet::default();
    for (_, roles) in super::authenticated_users(state, client).await? {
        set.extend(&super::roles::resolve(state, &roles).await?);
    }
    let set = Arc::new(set);
    client.auth.privileges.keep(generation, Arc::clone(&set));
    Ok(Some(set))
}

/// The check dispatch runs before parsing a command's arguments: an unauthenticated
/// connection may run only the pre-authentication commands. Answers the command's rule for
/// [`check_privileges`] (`None`: nothing is checked, no `--auth` or the server's own client).
pub(crate) async fn check_authenticated(
    state: &ServerState,
    client: &ClientInfo,
    spec: &CommandSpec,
    db: &str,
    body: &Document,
) -> CommandResult<Option<Rule>> {
    if !state.auth.enabled || client.internal {
        return Ok(None);
    }
    let Some(rule) = rule(spec.name) else {
        // Unreachable for a registered command (see the registry test); refuse, never allow.
        return Err(unauthorized(db, body));
    };
    if matches!(rule, Rule::PreAuth)
        || client.auth.is_authenticated()
        || localhost_bypass(state, client).await?
    {
        return Ok(Some(rule));
    }
    Err(CommandError::new(
        ErrorCode::Unauthorized,
        format!("Command {} requires authentication", spec.name),
    ))
}

/// The privilege check dispatch runs once the arguments are known to be well formed, with the
/// rule [`check_authenticated`] answered.
pub(crate) async fn check_privileges(
    state: &ServerState,
    client: &ClientInfo,
    rule: Option<Rule>,
    db: &str,
    body: &Document,
) -> CommandResult<()> {
    let Some(rule) = rule else {
        return Ok(());
    };
    let mut needs = Needs::default();
    rule_needs(rule, db, body, &mut needs);
    if needs.is_empty() || views_only_itself(db, body, client) {
        return Ok(());
    }
    match privileges(state, client).await? {
        None => Ok(()),
        Some(privileges) if needs.allowed_by(&privileges) => Ok(()),
        Some(_) => Err(unauthorized(db, body)),
    }
}

/// mongod lets a user always view its own user document: `usersInfo` naming only users the
/// connection is authenticated as needs no `viewUser`.
fn views_only_itself(db: &str, body: &Document, client: &ClientInfo) -> bool {
    if body.keys().next().map(String::as_str) != Some("usersInfo") {
        return false;
    }
    let users = client.auth.users();
    let is_caller = |value: &Bson| {
        name_and_db(value, "user", db).is_some_and(|(user, user_db)| {
            users
                .iter()
                .any(|known| known.user == user && known.db == user_db)
        })
    };
    match body.get("usersInfo") {
        Some(Bson::Array(named)) => !named.is_empty() && named.iter().all(is_caller),
        Some(value) => is_caller(value),
        None => false,
    }
}

/// Whether `viewer` runs as the same user as something `owner` started (an operation, a
/// cursor): mongod's `isCoauthorizedWith`. Always without `--auth` and for the server's own
/// client; else when both are unauthenticated or they share a user.
pub(crate) fn coauthorized(state: &ServerState, viewer: &ClientInfo, owner: &[UserName]) -> bool {
    if !state.auth.enabled || viewer.internal {
        return true;
    }
    let mine = viewer.auth.users();
    (mine.is_empty() && owner.is_empty()) || mine.iter().any(|user| owner.contains(user))
}

pub(crate) fn foreign_cursor(id: i64) -> CommandError {
    CommandError::new(
        ErrorCode::Unauthorized,
        format!("cursor id {id} was not created by the authenticated user"),
    )
}

/// Fields drivers send as OP_MSG document sequences, which mongod's message (the command
/// body alone) does not show.
const SEQUENCE_FIELDS: &[&str] = &["documents", "updates", "deletes", "ops", "nsInfo"];

/// mongod's refusal of a command the caller lacks a privilege for: the command as mongod
/// prints a BSON object, without its document sequences.
pub(crate) fn unauthorized(db: &str, body: &Document) -> CommandError {
    let shown: Document = body
        .iter()
        .filter(|(field, _)| !SEQUENCE_FIELDS.contains(&field.as_str()))
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    CommandError::new(
        ErrorCode::Unauthorized,
        format!(
            "not authorized on {db} to execute command {}",
            tideway_base::display::value_string(&Bson::Document(shown))
        ),
    )
}
