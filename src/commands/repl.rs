//! The replication commands of a one-node set: `replSetInitiate` (the set initiates itself on
//! first start, so it answers AlreadyInitialized), `replSetGetStatus`, `replSetGetConfig`,
//! `replSetStepDown` (no other member can take over). On a standalone server each answers
//! mongod's 76 NoReplicationEnabled.

use bson::{doc, Document};

use crate::command::{CommandContext, CommandSpec};
use crate::repl::{cluster_time, ReplSet, TERM};
use crate::sync_handler;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "replSetInitiate",
        aliases: &[],
        help: "Initiates the replica set (a one-node set initiates itself on first start).",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(repl_set_initiate),
    },
    CommandSpec {
        name: "replSetGetStatus",
        aliases: &[],
        help: "The state of the replica set's members (one primary).",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(repl_set_get_status),
    },
    CommandSpec {
        name: "replSetGetConfig",
        aliases: &[],
        help: "The replica set's stored configuration.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(repl_set_get_config),
    },
    CommandSpec {
        name: "replSetStepDown",
        aliases: &[],
        help: "Steps the primary down (refused: a one-node set has no other member to elect).",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(repl_set_step_down),
    },
];

/// The set, or mongod's standalone answer with `message`; a router (`mongos`) has no such
/// command.
fn repl_set<'a>(ctx: &'a CommandContext, message: &str) -> CommandResult<&'a ReplSet> {
    match &ctx.state.repl {
        Some(repl) if repl.router => Err(CommandError::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{}'", ctx.name),
        )),
        Some(repl) => Ok(repl),
        None => Err(CommandError::new(ErrorCode::NoReplicationEnabled, message)),
    }
}

const NOT_RUNNING: &str = "not running with --replSet";

fn repl_set_initiate(ctx: &CommandContext, _body: &Document) -> CommandResult {
    repl_set(ctx, "This node was not started with replication enabled.")?;
    Err(
        CommandError::new(ErrorCode::AlreadyInitialized, "already initialized").with_extra(
            doc! {"info": "try querying local.system.replset to see current configuration"},
        ),
    )
}

fn repl_set_get_status(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let repl = repl_set(ctx, NOT_RUNNING)?;
    let time = cluster_time(ctx.state.storage.as_ref());
    let optime = doc! {"ts": time, "t": TERM};
    let date = bson::DateTime::from_millis(i64::from(time.time) * 1000);
    Ok(doc! {
        "set": repl.name.as_str(),
        "date": ctx.state.clock.now(),
        "myState": 1,
        "term": TERM,
        "syncSourceHost": "",
        "syncSourceId": -1,
        "heartbeatIntervalMillis": 2000_i64,
        "majorityVoteCount": 1,
        "writeMajorityCount": 1,
        "votingMembersCount": 1,
        "writableVotingMembersCount": 1,
        "optimes": {
            "lastCommittedOpTime": optime.clone(),
            "lastCommittedWallTime": date,
            "readConcernMajorityOpTime": optime.clone(),
            "appliedOpTime": optime.clone(),
            "durableOpTime": optime,
            "lastAppliedWallTime": date,
            "lastDurableWallTime": date,
        },
        "members": [repl.status_member(ctx.state.storage.as_ref(), ctx.state.started)?],
    })
}

fn repl_set_get_config(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let repl = repl_set(ctx, NOT_RUNNING)?;
    Ok(doc! {"config": repl.member()?.config.clone()})
}

fn repl_set_step_down(ctx: &CommandContext, body: &Document) -> CommandResult {
    repl_set(ctx, NOT_RUNNING)?;
    if body.get_bool("force").unwrap_or(false) {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway's one-node replica set cannot step down: it has no other member to elect",
        ));
    }
    // mongod waits `secondaryCatchUpPeriodSecs` for a secondary to catch up; none ever will.
    let now = chrono_free_iso(ctx.state.clock.now());
    Err(CommandError::new(
        ErrorCode::ExceededTimeLimit,
        format!("No electable secondaries caught up as of {now}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down."),
    ))
}

/// A date as ISO-8601 text (mongod's `dateToISOStringLocal`, in UTC here).
fn chrono_free_iso(date: bson::DateTime) -> String {
    date.try_to_rfc3339_string()
        .unwrap_or_else(|_| date.timestamp_millis().to_string())
}
