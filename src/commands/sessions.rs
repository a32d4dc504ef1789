//! Logical sessions: `startSession`, `endSessions`, `killSessions`, `killAllSessions`,
//! `refreshSessions`. tideway is a standalone without transactions or retryable writes, so a session
//! carries no server-side state: ids are minted on request and ending or refreshing one has nothing to
//! release, exactly as mongod answers for sessions it holds no records for. Arguments are still
//! type-checked, so a malformed call gets mongod's error.

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
        help: "Kills the listed sessions.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(session_list),
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
        handler: sync_handler!(session_list),
    },
];

fn start_session(_ctx: &CommandContext, _body: &Document) -> CommandResult {
    let id = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: uuid::Uuid::new_v4().as_bytes().to_vec(),
    };
    Ok(doc! {"id": {"id": id}, "timeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES})
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
