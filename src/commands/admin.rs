//! Server administration: `setParameter`, and the test-only commands that make time deterministic
//! (`advanceClock`, `runTtlPass`), which exist only with `enableTestCommands`.

use bson::{doc, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::sync_handler;
use tideway_base::command::command_fields;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "setParameter",
        aliases: &[],
        help: "Change a server parameter at runtime: {setParameter: 1, <name>: <value>}.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(set_parameter),
    },
    CommandSpec {
        name: "advanceClock",
        aliases: &[],
        help: "Test only: move the server's clock forward by this many seconds.",
        admin_only: true,
        test_only: true,
        handler: sync_handler!(advance_clock),
    },
    CommandSpec {
        name: "runTtlPass",
        aliases: &[],
        help: "Test only: run one TTL reaper pass now and report how many documents it deleted.",
        admin_only: true,
        test_only: true,
        handler: async_handler!(run_ttl_pass),
    },
];

fn set_parameter(ctx: &CommandContext, body: &Document) -> CommandResult {
    let mut fields = command_fields(body);
    let (Some((name, value)), None) = (fields.next(), fields.next()) else {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "setParameter takes exactly one parameter: {setParameter: 1, <name>: <value>}",
        ));
    };
    let was = ctx.state.params.set(name, value)?;
    if name.starts_with("ttlMonitor") {
        ctx.state.reaper.wake.notify_one();
    }
    Ok(doc! {"was": was})
}

fn advance_clock(ctx: &CommandContext, body: &Document) -> CommandResult {
    let seconds = body
        .get("advanceClock")
        .and_then(tideway_base::bsonutil::as_f64)
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .ok_or_else(|| {
            CommandError::bad_value("advanceClock takes a non-negative number of seconds")
        })?;
    ctx.state
        .clock
        .advance_ms((seconds * 1000.0).round() as i64);
    Ok(doc! {"now": ctx.state.clock.now()})
}

async fn run_ttl_pass(ctx: &CommandContext<'_>, _body: &Document) -> CommandResult {
    let now_ms = ctx.state.clock.now_ms();
    let deleted = ctx
        .state
        .reaper
        .run_once(ctx.state.storage.as_ref(), now_ms)
        .await?;
    Ok(doc! {"deleted": deleted as i64})
}
