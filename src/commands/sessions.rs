//! Logical sessions: `startSession`, `endSessions`, `killSessions`, `killAllSessions`,
//! `refreshSessions`. Ids are minted on request; the server state of a session is its retryable
//! writes' record and its transaction (replica-set mode): `killSessions`/`killAllSessions` abort
//! the transaction, `endSessions` leaves it to its lifetime limit as mongod does (drivers abort
//! it first). Arguments are type-checked, so a malformed call gets mongod's error.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};

use crate::commands::args::wrong_type;
use crate::commands::handshake::LOGICAL_SESSION_TIMEOUT_MINUTES;
use crate::dispatch::{CommandContext, CommandSpec};
use crate::error::CommandResult;
use crate::sync_handler;

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
        handler: sync_handler!(session_list),
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
        handler: sync_handler!(session_list),
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

fn start_session(_ctx: &CommandContext, _body: &Document) -> CommandResult {
    let id = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: uuid::Uuid::new_v4().as_bytes().to_vec(),
    };
    Ok(doc! {"id": {"id": id}, "timeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES})
}

/// `killSessions` and `killAllSessions`: abort the sessions' running transactions (mongod's
/// `killSessionsAbortUnpreparedTransactions`). `killAllSessions` names users, and without
/// authentication every session belongs to the one unauthenticated user: it kills them all.
async fn kill_sessions(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    session_list(ctx, body)?;
    let Some(repl) = &ctx.state.repl else {
        return Ok(Document::new());
    };
    let Ok(entries) = body.get_array(ctx.name) else {
        return Ok(Document::new());
    };
    if ctx.name == "killAllSessions" {
        repl.transactions.abort_all().await;
        return Ok(Document::new());
    }
    let mut keys = Vec::new();
    for entry in entries.iter().filter_map(Bson::as_document) {
        let (key, _) = crate::commands::retryable::session_key(&doc! {"lsid": entry.clone()})?;
        keys.push(key);
    }
    repl.transactions.abort_sessions(&keys).await;
    Ok(Document::new())
}

/// The four commands whose argument is an array of documents (session ids or users).
fn session_list(ctx: &CommandContext, body: &Document) -> CommandResult {
    // mongod parses killSessions and killAllSessions into structs its errors are named after.
    let context = match ctx.name {
        "killSessions" => "KillSessionsCmd",
        "killAllSessions" => "KillAllSessionsCmd",
        other => other,
    };
    let argument = body.get(ctx.name).unwrap_or(&Bson::Null);
    let Bson::Array(entries) = argument else {
        return Err(wrong_type(context, ctx.name, argument, "array"));
    };
    if let Some((index, bad)) = entries
        .iter()
        .enumerate()
        .find(|(_, entry)| !matches!(entry, Bson::Document(_)))
    {
        return Err(wrong_type(
            context,
            &format!("{}.{index}", ctx.name),
            bad,
            "object",
        ));
    }
    Ok(Document::new())
}
