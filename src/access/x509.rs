//! MONGODB-X509 authentication: the `authenticate` command and hello's
//! `speculativeAuthenticate: {authenticate: 1, mechanism: "MONGODB-X509", db: "$external"}`. The
//! user is the subject (RFC 2253) of the client certificate the TLS handshake verified
//! (`ClientInfo::peer_certificate_subject`, set by `crate::tls`), and must exist on `$external`.
//!
//! Invariants: mongod's checks in mongod's order (`authentication_commands.cpp`, `authCommand`
//! and `_authenticateX509`), and its one rule for what the client is told: ProtocolError (17)
//! and UserNotFound (11) reach the client, every other failure is 18 "Authentication failed."
//! with the reason only logged; every failure goes through `super::failed` (log line, per-host
//! throttle). A speculative attempt that fails answers nothing, as mongod. Nothing here reads
//! certificates: a connection without a verified certificate has no subject.

use bson::{doc, Bson, Document};

use super::{users, Attempt, UserName};
use crate::client::ClientInfo;
use crate::command::CommandContext;
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

pub(crate) const MECHANISM: &str = "MONGODB-X509";
/// The database external users (X.509, and in mongod Kerberos/LDAP) live on.
pub(crate) const EXTERNAL_DB: &str = "$external";

/// An `authenticate` request, its fields checked as mongod's IDL checks them.
struct Request<'a> {
    mechanism: &'a str,
    user: Option<&'a str>,
}

/// `None` when a field has the wrong type (the command's schema refuses those before the handler
/// runs; a speculative request is dropped, as mongod drops any failure).
fn parse(body: &Document) -> Option<Request<'_>> {
    let mechanism = body.get_str("mechanism").ok()?;
    let user = match body.get("user") {
        None => None,
        Some(Bson::String(user)) => Some(user.as_str()),
        Some(_) => return None,
    };
    Some(Request { mechanism, user })
}

/// The `authenticate` command.
pub async fn authenticate(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let request = parse(body).ok_or_else(|| {
        CommandError::type_mismatch("BSON field 'authenticate.mechanism' is the wrong type")
    })?;
    run(ctx.state, ctx.client, ctx.db, &request, false).await
}

/// Hello's `speculativeAuthenticate` carrying `authenticate`: its database is the `db` field
/// (`$external` when absent); the reply document, or `None` on any failure.
pub(crate) async fn speculative_authenticate(
    state: &ServerState,
    client: &ClientInfo,
    request: &Document,
) -> Option<Document> {
    let db = match request.get("db") {
        None => EXTERNAL_DB,
        Some(Bson::String(db)) => db.as_str(),
        Some(_) => return None,
    };
    // mongod parses it as the strict `authenticate` command (`db` standing for `$db`): any
    // other field fails it, silently.
    if request
        .keys()
        .any(|key| !matches!(key.as_str(), "authenticate" | "mechanism" | "user" | "db"))
    {
        return None;
    }
    let parsed = parse(request)?;
    run(state, client, db, &parsed, true).await.ok()
}

async fn run(
    state: &ServerState,
    client: &ClientInfo,
    db: &str,
    request: &Request<'_>,
    speculative: bool,
) -> CommandResult {
    match check(state, client, db, request).await {
        Ok(subject) => {
            let user = UserName {
                user: subject,
                db: db.to_owned(),
            };
            let reply = doc! {"dbname": &user.db, "user": &user.user};
            super::authenticated(client, user, MECHANISM);
            Ok(reply)
        }
        Err(Failure { reason, error }) => {
            let attempt = Attempt {
                mechanism: request.mechanism,
                user: request
                    .user
                    .or(client.peer_certificate_subject.as_deref())
                    .unwrap_or_default(),
                db,
                speculative,
            };
            Err(super::failed(state, client, &attempt, &reason, error).await)
        }
    }
}

/// Why an attempt failed (logged) and what the client is told.
struct Failure {
    reason: String,
    error: CommandError,
}

impl Failure {
    /// A failure the client sees only as 18 "Authentication failed.".
    fn hidden(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            error: super::authentication_failed(),
        }
    }

    /// A failure mongod lets through to the client (ProtocolError, UserNotFound).
    fn shown(code: ErrorCode, message: String) -> Failure {
        Failure {
            reason: message.clone(),
            error: CommandError::new(code, message),
        }
    }
}

/// mongod's checks, in its order; the authenticated subject on success.
async fn check(
    state: &ServerState,
    client: &ClientInfo,
    db: &str,
    request: &Request<'_>,
) -> Result<String, Failure> {
    if request.mechanism.is_empty() {
        return Err(Failure::hidden("Auth mechanism not specified"));
    }
    if request.mechanism != MECHANISM {
        // SCRAM is a SASL mechanism: `saslStart`, never `authenticate`.
        return Err(Failure::hidden(format!(
            "Unsupported mechanism: {}",
            request.mechanism
        )));
    }
    let Some(subject) = client
        .peer_certificate_subject
        .as_deref()
        .filter(|subject| !subject.is_empty())
    else {
        return Err(Failure::hidden(
            "No verified subject name available from client",
        ));
    };
    if request.user.is_some_and(|user| user != subject) {
        return Err(Failure::hidden(
            "There is no x.509 client certificate matching the user.",
        ));
    }
    if !client.tls {
        return Err(Failure::shown(
            ErrorCode::ProtocolError,
            "SSL support is required for the MONGODB-X509 mechanism.".to_owned(),
        ));
    }
    if db != EXTERNAL_DB {
        return Err(Failure::shown(
            ErrorCode::ProtocolError,
            "X.509 authentication must always use the $external database.".to_owned(),
        ));
    }
    match users::find_user(state, EXTERNAL_DB, subject).await {
        Ok(Some(_)) => Ok(subject.to_owned()),
        Ok(None) => Err(Failure::shown(
            ErrorCode::UserNotFound,
            format!("Could not find user \"{subject}\" for db \"{EXTERNAL_DB}\""),
        )),
        Err(error) => Err(Failure::hidden(error.errmsg)),
    }
}
