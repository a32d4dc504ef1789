//! Authentication and authorization at run time: the login conversations (`saslStart`,
//! `saslContinue`, `authenticate` with MONGODB-X509 in `x509`, and speculatively inside
//! `hello`), `logout` and `connectionStatus`; the users and roles stored in `admin` (`store`,
//! `users`, `roles`) and their commands (`users`, `role_commands`); and enforcement before
//! every command under `--auth` (`enforce`). The identities and the privilege model these work
//! on are `crate::auth`'s.
//!
//! Invariants: a failed conversation tells the client only mongod's 18 "Authentication failed."
//! (the reason is logged; X.509 lets mongod's ProtocolError and UserNotFound through, as mongod
//! does); every failure goes through [`failed`]; a user counts as authenticated only once its
//! conversation is done.

pub mod enforce;
pub mod role_commands;
pub mod roles;
pub mod store;
pub mod users;
pub mod x509;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};

use crate::auth::scram::{self, Mechanism, ServerConversation};
use crate::auth::{ratelimit, Conversation, RoleName, UserName};
use crate::client::ClientInfo;
use crate::command::{CommandContext, CommandSpec};
use crate::state::ServerState;
use crate::{async_handler, sync_handler};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The connection's users with their current roles (re-read, so `updateUser`/`dropUser` take
/// effect at once, as mongod's user cache invalidation does): what enforcement will check.
pub async fn authenticated_users(
    state: &ServerState,
    client: &ClientInfo,
) -> CommandResult<Vec<(UserName, Vec<RoleName>)>> {
    let mut users = Vec::new();
    for user in client.auth.users() {
        if let Some(document) = users::find_user(state, &user.db, &user.user).await? {
            users.push((user, users::roles_of(&document)));
        }
    }
    Ok(users)
}

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "saslStart",
        aliases: &[],
        help: "First step in a SASL authentication conversation (SCRAM-SHA-1, SCRAM-SHA-256).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(sasl_start),
    },
    CommandSpec {
        name: "saslContinue",
        aliases: &[],
        help: "Subsequent steps in a SASL authentication conversation.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(sasl_continue),
    },
    CommandSpec {
        name: "authenticate",
        aliases: &[],
        help: "Authenticates with MONGODB-X509: the verified client certificate's subject, on $external.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(x509::authenticate),
    },
    CommandSpec {
        name: "logout",
        aliases: &[],
        help: "Ends the authentication of this connection's user on the command's database.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(logout),
    },
    CommandSpec {
        name: "connectionStatus",
        aliases: &[],
        help: "Authentication state of this connection: its users and their roles.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(connection_status),
    },
    CommandSpec {
        name: "createUser",
        aliases: &[],
        help: "Adds a user (SCRAM credentials, never the password) with built-in or user-defined roles.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::create_user),
    },
    CommandSpec {
        name: "updateUser",
        aliases: &[],
        help: "Changes a user's password, mechanisms, roles or customData.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::update_user),
    },
    CommandSpec {
        name: "dropUser",
        aliases: &[],
        help: "Removes a user.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::drop_user),
    },
    CommandSpec {
        name: "dropAllUsersFromDatabase",
        aliases: &[],
        help: "Removes every user of the command's database.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::drop_all_users_from_database),
    },
    CommandSpec {
        name: "usersInfo",
        aliases: &[],
        help: "Describes users: 1 (this database), a name, {user, db}, an array, or {forAllDBs: true}.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::users_info),
    },
    CommandSpec {
        name: "grantRolesToUser",
        aliases: &[],
        help: "Adds roles to a user.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::change_roles),
    },
    CommandSpec {
        name: "revokeRolesFromUser",
        aliases: &[],
        help: "Removes roles from a user.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(users::change_roles),
    },
];

/// mongod's one answer to every failed login.
fn authentication_failed() -> CommandError {
    CommandError::new(ErrorCode::AuthenticationFailed, "Authentication failed.")
}

/// One login attempt, as the failure log names it.
struct Attempt<'a> {
    mechanism: &'a str,
    user: &'a str,
    db: &'a str,
    /// Inside hello: a failure answers nothing and is not counted against the host (the driver
    /// follows it with an explicit attempt, which is).
    speculative: bool,
}

/// A failed login: logged as mongod's 20249 "Authentication failed" (attributes as mongod's
/// `sasl_commands.cpp` names them) unless the log budget is spent (then counted, and the count
/// rides on the next line), counted against the client's host, and its reply held back as
/// long as the host's record says (an async sleep of this connection's task alone). Returns
/// `error`, the reply.
async fn failed(
    state: &ServerState,
    client: &ClientInfo,
    attempt: &Attempt<'_>,
    reason: &str,
    error: CommandError,
) -> CommandError {
    let now_ms = state.clock.now_ms();
    let throttle = &state.failed_logins;
    if let ratelimit::LogDecision::Log { suppressed_before } = throttle.log.admit(now_ms) {
        tracing::info!(
            id = 20249,
            mechanism = attempt.mechanism,
            principalName = attempt.user,
            authenticationDatabase = attempt.db,
            client = %client.remote,
            speculative = attempt.speculative,
            result = format_args!("{}: {reason}", error.code.name()),
            suppressedFailures = suppressed_before,
            "Authentication failed"
        );
    }
    if !attempt.speculative {
        if let Some(host) = client_host(client) {
            let delay = throttle.hosts.record_failure(host, now_ms);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
    }
    error
}

/// The IP address of the client (`ClientInfo::remote` is `ip:port`).
pub(super) fn client_host(client: &ClientInfo) -> Option<std::net::IpAddr> {
    client
        .remote
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|addr| addr.ip())
}

/// A SASL payload: BinData, or a base64 string (answered in the same form, as mongod does).
fn read_payload(body: &Document) -> CommandResult<(Vec<u8>, bool)> {
    match body.get("payload") {
        Some(Bson::Binary(binary)) => Ok((binary.bytes.clone(), false)),
        Some(Bson::String(text)) => BASE64
            .decode(text)
            .map(|bytes| (bytes, true))
            .map_err(|_| CommandError::bad_value("Invalid base64 in SASL payload")),
        Some(_) => Err(CommandError::type_mismatch(
            "BSON field 'payload' is the wrong type, expected types '[string, binData']",
        )),
        None => Err(CommandError::idl_missing_field("saslStart", "payload")),
    }
}

fn sasl_reply(payload: &str, as_base64: bool, done: bool) -> Document {
    let payload = if as_base64 {
        Bson::String(BASE64.encode(payload))
    } else {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: payload.as_bytes().to_vec(),
        })
    };
    doc! {"conversationId": 1, "done": done, "payload": payload}
}

async fn sasl_start(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    start(ctx.state, ctx.client, ctx.db, body, false).await
}

/// `saslStart` on `db` (also the speculative one inside `hello`).
async fn start(
    state: &ServerState,
    client: &ClientInfo,
    db: &str,
    body: &Document,
    speculative: bool,
) -> CommandResult {
    let name = body.get_str("mechanism").unwrap_or_default();
    let mechanism = Mechanism::from_name(name).ok_or_else(|| {
        CommandError::new(
            ErrorCode::MechanismUnavailable,
            format!("Received authentication for mechanism {name} which is not enabled"),
        )
    })?;
    let (payload, as_base64) = read_payload(body)?;
    let skip_empty_exchange = body
        .get_document("options")
        .ok()
        .and_then(|options| options.get("skipEmptyExchange"))
        .is_some_and(tideway_base::bsonutil::is_truthy);
    // A new conversation replaces any unfinished one.
    client.auth.set_conversation(None);
    let mut user_name = String::new();
    let outcome = async {
        let message = std::str::from_utf8(&payload)
            .map_err(|_| scram::ScramError::Malformed("payload is not UTF-8"))?;
        let client_first = scram::parse_client_first(message)?;
        user_name.clone_from(&client_first.user);
        let credential = users::credential(state, db, &client_first.user, mechanism)
            .await
            .ok()
            .flatten();
        let Some(credential) = credential else {
            return Err(scram::ScramError::Malformed(
                "no such user or no credential for the mechanism",
            ));
        };
        let nonce: [u8; 24] = rand::random();
        let (scram, server_first) =
            ServerConversation::start(mechanism, client_first, credential, &BASE64.encode(nonce));
        Ok((scram, server_first))
    }
    .await;
    match outcome {
        Ok((scram, server_first)) => {
            client
                .auth
                .set_conversation(Some(Conversation::AwaitingProof {
                    db: db.to_owned(),
                    scram: Box::new(scram),
                    skip_empty_exchange,
                }));
            Ok(sasl_reply(&server_first, as_base64, false))
        }
        Err(error) => {
            let attempt = Attempt {
                mechanism: name,
                user: &user_name,
                db,
                speculative,
            };
            Err(failed(
                state,
                client,
                &attempt,
                &error.to_string(),
                authentication_failed(),
            )
            .await)
        }
    }
}

async fn sasl_continue(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    if body
        .get("conversationId")
        .and_then(tideway_base::bsonutil::as_f64)
        != Some(1.0)
    {
        return Err(CommandError::new(
            ErrorCode::ProtocolError,
            "sasl: Mismatched conversation id",
        ));
    }
    let (payload, as_base64) = read_payload(body)?;
    let client = ctx.client;
    let conversation = client.auth.take_conversation();
    match conversation {
        Some(Conversation::AwaitingProof {
            db,
            scram,
            skip_empty_exchange,
        }) => {
            let message = std::str::from_utf8(&payload).unwrap_or_default();
            let server_final = match scram.finish(message) {
                Ok(server_final) => server_final,
                Err(error) => {
                    return continue_failed(
                        ctx,
                        scram.mechanism.name(),
                        scram.user(),
                        &error.to_string(),
                    )
                    .await
                }
            };
            let user = UserName {
                user: scram.user().to_owned(),
                db,
            };
            if skip_empty_exchange {
                authenticated(client, user, scram.mechanism.name());
                Ok(sasl_reply(&server_final, as_base64, true))
            } else {
                client
                    .auth
                    .set_conversation(Some(Conversation::AwaitingEmpty {
                        user,
                        mechanism: scram.mechanism,
                    }));
                Ok(sasl_reply(&server_final, as_base64, false))
            }
        }
        Some(Conversation::AwaitingEmpty { user, mechanism }) if payload.is_empty() => {
            authenticated(client, user, mechanism.name());
            Ok(sasl_reply("", as_base64, true))
        }
        Some(Conversation::AwaitingEmpty { user, mechanism }) => {
            continue_failed(
                ctx,
                mechanism.name(),
                &user.user,
                "unexpected payload after server-final",
            )
            .await
        }
        None => continue_failed(ctx, "", "", "no conversation in progress").await,
    }
}

/// A failed `saslContinue` (see [`failed`]).
async fn continue_failed(
    ctx: &CommandContext<'_>,
    mechanism: &str,
    user: &str,
    reason: &str,
) -> CommandResult {
    let attempt = Attempt {
        mechanism,
        user,
        db: ctx.db,
        speculative: false,
    };
    Err(failed(
        ctx.state,
        ctx.client,
        &attempt,
        reason,
        authentication_failed(),
    )
    .await)
}

fn authenticated(client: &ClientInfo, user: UserName, mechanism: &str) {
    tracing::info!(
        id = 20250,
        mechanism,
        principalName = user.user,
        authenticationDatabase = user.db,
        client = %client.remote,
        "Successful authentication"
    );
    client.auth.add_user(user);
}

/// Hello's `speculativeAuthenticate`: runs the `saslStart` (database in its `db` field) or the
/// X.509 `authenticate` it carries and answers its reply; any failure is as if nothing had been
/// sent (mongod).
pub(crate) async fn speculative_authenticate(
    state: &ServerState,
    client: &ClientInfo,
    hello: &Document,
) -> Option<Document> {
    let request = hello.get_document("speculativeAuthenticate").ok()?;
    if request.contains_key("authenticate") {
        return x509::speculative_authenticate(state, client, request).await;
    }
    request.get("saslStart")?;
    let db = request.get_str("db").ok()?;
    start(state, client, db, request, true).await.ok()
}

/// Hello's `saslSupportedMechs: "<db>.<user>"`: the mechanisms that can authenticate the user
/// (mongod's mechanism registry: SCRAM for its credentials, MONGODB-X509 for an external user),
/// `None` for no such user.
pub(crate) async fn sasl_supported_mechs(
    state: &ServerState,
    hello: &Document,
) -> Option<Vec<Bson>> {
    let name = hello.get_str("saslSupportedMechs").ok()?;
    let (db, user) = name.split_once('.')?;
    let document = users::find_user(state, db, user).await.ok()??;
    if users::is_external(&document) {
        return Some(vec![Bson::from(x509::MECHANISM)]);
    }
    Some(users::mechanisms_of(&document))
}

fn logout(ctx: &CommandContext, _body: &Document) -> CommandResult {
    ctx.client.auth.log_out(ctx.db);
    Ok(Document::new())
}

async fn connection_status(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let users = authenticated_users(ctx.state, ctx.client).await?;
    let mut roles: Vec<&RoleName> = Vec::new();
    for (_, user_roles) in &users {
        for role in user_roles {
            if !roles.contains(&role) {
                roles.push(role);
            }
        }
    }
    let mut auth_info = doc! {
        "authenticatedUsers": users
            .iter()
            .map(|(user, _)| Bson::Document(doc! {"user": &user.user, "db": &user.db}))
            .collect::<Vec<_>>(),
        "authenticatedUserRoles": roles
            .iter()
            .map(|role| Bson::Document(role.to_document()))
            .collect::<Vec<_>>(),
    };
    if body
        .get("showPrivileges")
        .is_some_and(tideway_base::bsonutil::is_truthy)
    {
        // The union of every authenticated user's privileges, one entry per resource (mongod's
        // unified resource map).
        let all_roles: Vec<RoleName> = roles.iter().map(|role| (*role).clone()).collect();
        let privileges = self::roles::resolve(ctx.state, &all_roles).await?;
        auth_info.insert(
            "authenticatedUserPrivileges",
            privileges
                .privileges()
                .into_iter()
                .map(|privilege| Bson::Document(privilege.to_document()))
                .collect::<Vec<_>>(),
        );
    }
    Ok(doc! {"authInfo": auth_info})
}
