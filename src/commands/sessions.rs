//! Logical sessions' commands: `startSession`, `refreshSessions`, `endSessions`,
//! `killSessions`, `killAllSessions`, and the test-only `refreshLogicalSessionCacheNow`. The
//! session cache itself (use, records in `config.system.sessions`, expiry) is
//! [`crate::sessions`]. The server state of a session is its open cursors, its retryable
//! writes' slot and its transaction (replica-set mode): `killSessions`/`killAllSessions` close
//! the cursors and abort the transaction at once; `endSessions` only marks the sessions ended
//! (their records go, and their cursors close, at the next refresh) and leaves the transaction to
//! its lifetime limit as mongod does (drivers abort it first). Arguments are type-checked, so a
//! malformed call gets mongod's error.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::client::ClientInfo;
use crate::command::{CommandContext, CommandSpec, InternalDispatch};
use crate::session_id::lsid_key;
use crate::state::ServerState;
use crate::sync_handler;
use tideway_base::error::{CommandError, CommandResult};
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "startSession",
        aliases: &[],
        help: "Mints a new logical session id.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(start_session),
    },
    CommandSpec {
        name: "endSessions",
        aliases: &[],
        help: "Ends the listed sessions.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(end_sessions),
    },
    CommandSpec {
        name: "killSessions",
        aliases: &[],
        help: "Kills the listed sessions (aborting their transactions).",
        admin_only: false,
        test_only: false,
        handler: crate::async_handler!(kill_sessions),
    },
    CommandSpec {
        name: "refreshSessions",
        aliases: &[],
        help: "Keeps the listed sessions alive.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(refresh_sessions),
    },
    CommandSpec {
        name: "refreshLogicalSessionCacheNow",
        aliases: &[],
        help: "force the logical session cache to refresh. Test command only.",
        admin_only: false,
        test_only: true,
        handler: crate::async_handler!(refresh_cache_now),
    },
    CommandSpec {
        name: "killAllSessions",
        aliases: &[],
        help: "Kills every session of the listed users (all sessions for an empty list).",
        admin_only: false,
        test_only: false,
        handler: crate::async_handler!(kill_sessions),
    },
];

fn start_session(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let id = uuid::Uuid::new_v4().as_bytes().to_vec();
    ctx.state.sessions.vivify(&id, ctx.state.clock.now_ms());
    let id = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: id,
    };
    Ok(
        doc! {"id": {"id": id}, "timeoutMinutes": crate::sessions::timeout_minutes(&ctx.state.params)},
    )
}

/// `refreshSessions`: the listed sessions are in use now.
fn refresh_sessions(ctx: &CommandContext, body: &Document) -> CommandResult {
    let now_ms = ctx.state.clock.now_ms();
    for key in session_keys(ctx, body)? {
        ctx.state.sessions.vivify(&key, now_ms);
    }
    Ok(Document::new())
}

/// `endSessions`: the listed sessions' records go at the next refresh.
fn end_sessions(ctx: &CommandContext, body: &Document) -> CommandResult {
    let keys = session_keys(ctx, body)?;
    ctx.state.sessions.end(keys);
    Ok(Document::new())
}

/// `refreshLogicalSessionCacheNow` (test only): flushes the session cache now.
async fn refresh_cache_now(ctx: &CommandContext<'_>, _body: &Document) -> CommandResult {
    refresh(ctx.state, ctx.dispatch).await?;
    Ok(Document::new())
}

/// `killSessions` and `killAllSessions`: close the sessions' cursors and abort their running
/// transactions (mongod's `killSessionsLocal`: cursors, then
/// `killSessionsAbortUnpreparedTransactions`). `killAllSessions` names users, and without
/// authentication every session belongs to the one unauthenticated user: it kills them all.
async fn kill_sessions(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    if ctx.name == "killAllSessions" {
        session_list(ctx, body)?;
        ctx.state.cursors.kill_sessions(|_| true);
        if let Some(repl) = &ctx.state.repl {
            repl.transactions.abort_all().await;
        }
        return Ok(Document::new());
    }
    let keys = session_keys(ctx, body)?;
    ctx.state
        .cursors
        .kill_sessions(|key| keys.iter().any(|killed| killed.as_slice() == key));
    if let Some(repl) = &ctx.state.repl {
        repl.transactions.abort_sessions(&keys).await;
    }
    Ok(Document::new())
}

/// The keys of the sessions a command lists (`[{id: UUID}, ...]`, mongod's
/// `LogicalSessionFromClient`): 40414 for an entry without `id`, 14 for an `id` that is not a
/// UUID.
fn session_keys(ctx: &CommandContext, body: &Document) -> CommandResult<Vec<Vec<u8>>> {
    session_list(ctx, body)?;
    let entries = body
        .get_array(ctx.name)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut keys = Vec::with_capacity(entries.len());
    for entry in entries.iter().filter_map(Bson::as_document) {
        let key = lsid_key(entry).ok_or_else(|| match entry.get("id") {
            None => CommandError::idl_missing_field(
                error_context(ctx.name),
                &format!("{}.id", ctx.name),
            ),
            Some(id) => CommandError::wrong_type(
                error_context(ctx.name),
                &format!("{}.id", ctx.name),
                id,
                "UUID",
            ),
        })?;
        keys.push(key);
    }
    Ok(keys)
}

/// What mongod's errors name a command's arguments after: killSessions and killAllSessions
/// are parsed into structs named so.
fn error_context(command: &str) -> &str {
    match command {
        "killSessions" => "KillSessionsCmd",
        "killAllSessions" => "KillAllSessionsCmd",
        other => other,
    }
}

/// The four commands whose argument is an array of documents (session ids or users).
fn session_list(ctx: &CommandContext, body: &Document) -> CommandResult {
    let context = error_context(ctx.name);
    let argument = body.get(ctx.name).unwrap_or(&Bson::Null);
    let Bson::Array(entries) = argument else {
        return Err(CommandError::wrong_type(
            context, ctx.name, argument, "array",
        ));
    };
    if let Some((index, bad)) = entries
        .iter()
        .enumerate()
        .find(|(_, entry)| !matches!(entry, Bson::Document(_)))
    {
        return Err(CommandError::wrong_type(
            context,
            &format!("{}.{index}", ctx.name),
            bad,
            "object",
        ));
    }
    Ok(Document::new())
}

/// Flushes the logical session cache (see [`crate::sessions`]), running its writes through
/// `dispatch` as the server itself.
pub(crate) async fn refresh(
    state: &Arc<ServerState>,
    dispatch: InternalDispatch,
) -> CommandResult<crate::sessions::Refreshed> {
    let client = Arc::new(ClientInfo::internal());
    let run = |command: Document| -> BoxFuture<'_, Reply> {
        let client = &client;
        Box::pin(async move { dispatch(state, client, &Arc::new(command)).await })
    };
    let host = crate::sessions::RefreshHost {
        storage: state.storage.as_ref(),
        clock: state.clock.as_ref(),
        timeout_minutes: state.params.logical_session_timeout_minutes(),
        cursors: &state.cursors,
        repl: state.repl.as_ref(),
        run: &run,
    };
    state.sessions.refresh(&host).await
}
