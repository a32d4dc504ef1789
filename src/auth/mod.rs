//! Identities and the privilege model: the users a connection authenticated as
//! ([`UserName`], in [`ClientAuth`], kept on `ClientInfo`, with the state of its SASL
//! conversation), role names ([`RoleName`]), the SCRAM-SHA-1/SCRAM-SHA-256 server side
//! (`scram`), actions, resources and built-in roles (`privileges`), what each command needs
//! (`authz`), and the failed-login throttle (`ratelimit`). Logins, stored users and roles, and
//! enforcement use these at run time: `crate::access`.
//!
//! Invariants: a connection runs at most one conversation at a time (mongod's `conversationId`
//! is always 1) and a new `saslStart` replaces it; a user counts as authenticated only once its
//! conversation is done; mongod keeps one user per database, so authenticating again on a
//! database replaces its user.

pub mod authz;
pub mod privileges;
pub mod ratelimit;
pub mod scram;

use std::sync::Mutex;

use bson::{doc, Bson, Document};

use scram::{Mechanism, ServerConversation};

/// A user a connection authenticated as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserName {
    pub user: String,
    pub db: String,
}

/// Where a connection's SASL conversation stands.
#[derive(Debug)]
pub(crate) enum Conversation {
    /// Server-first sent; waiting for client-final.
    AwaitingProof {
        db: String,
        scram: Box<ServerConversation>,
        skip_empty_exchange: bool,
    },
    /// Server-final sent; waiting for the client's empty last message.
    AwaitingEmpty {
        user: UserName,
        mechanism: Mechanism,
    },
}

/// The authentication state of one connection.
#[derive(Debug, Default)]
pub struct ClientAuth {
    inner: Mutex<AuthState>,
    /// The users' privileges, resolved by `authz` (cleared whenever the users change).
    pub privileges: authz::PrivilegeCache,
}

#[derive(Debug, Default)]
struct AuthState {
    users: Vec<UserName>,
    conversation: Option<Conversation>,
}

impl ClientAuth {
    fn lock(&self) -> std::sync::MutexGuard<'_, AuthState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the connection has authenticated as anyone (no copy of the users).
    pub(crate) fn is_authenticated(&self) -> bool {
        !self.lock().users.is_empty()
    }

    /// The users this connection authenticated as, in order.
    pub fn users(&self) -> Vec<UserName> {
        self.lock().users.clone()
    }

    /// Replaces the connection's conversation (`None` ends it).
    pub(crate) fn set_conversation(&self, conversation: Option<Conversation>) {
        self.lock().conversation = conversation;
    }

    /// Takes the connection's conversation, ending it.
    pub(crate) fn take_conversation(&self) -> Option<Conversation> {
        self.lock().conversation.take()
    }

    /// `logout` on `db`: the connection's user on `db` is no longer authenticated.
    pub(crate) fn log_out(&self, db: &str) {
        self.lock().users.retain(|user| user.db != db);
        self.privileges.clear();
    }

    pub(crate) fn add_user(&self, user: UserName) {
        let mut state = self.lock();
        // mongod keeps one user per database: authenticating again on a database replaces it.
        state.users.retain(|known| known.db != user.db);
        state.users.push(user);
        self.privileges.clear();
    }
}

/// A user or role name as commands give it: `"<name>"` (on `default_db`) or `{<field>: name,
/// db}`; `None` for anything else (each caller answers its own error).
pub(crate) fn name_and_db<'a>(
    value: &'a Bson,
    field: &str,
    default_db: &'a str,
) -> Option<(&'a str, &'a str)> {
    match value {
        Bson::String(name) => Some((name, default_db)),
        Bson::Document(named) => Some((named.get_str(field).ok()?, named.get_str("db").ok()?)),
        _ => None,
    }
}

/// A role as a user holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RoleName {
    pub role: String,
    pub db: String,
}

impl RoleName {
    pub fn to_document(&self) -> Document {
        doc! {"role": &self.role, "db": &self.db}
    }

    pub(crate) fn is_builtin(&self) -> bool {
        privileges::is_builtin_role(&self.role, &self.db)
    }
}

impl std::fmt::Display for RoleName {
    /// mongod's `RoleName` in messages: `role@db`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.role, self.db)
    }
}
