//! Command dispatch: finds a command in the registry (`commands::registry`), makes the checks
//! every command shares (`$db`, authentication and privileges under `--auth` through
//! `auth::authz`, admin-only, transactions on a standalone), the running
//! op (`ops`: registered for the handler's lifetime, interrupted by `maxTimeMS` or `killOp` at
//! await points, its `Deadline` carrying both into CPU-bound loops), timing, logging and
//! profiling (`profiler`), and the single place where a handler's `CommandError` becomes an error
//! reply.
//!
//! Invariants: handlers never write `ok`; dispatch appends `ok: 1.0` to a success and builds
//! `{ok: 0.0, errmsg, code, codeName}` for a failure. Profiling never fails or delays an
//! unprofiled command (level 0 costs one atomic load). Nothing here knows about sockets or wire
//! formats.

use std::sync::Arc;
use std::time::Instant;

use bson::{Bson, Document};
use tracing::Instrument;

use crate::client::ClientInfo;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::registry;
use crate::state::{bump, ServerState};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;
use tideway_wire::Reply;

/// Commands that `serverStatus.opcounters` counts in their own counters instead of `command`
/// (`bulkWrite` counts its ops as inserts, updates and deletes).
const OWN_OPCOUNTER: &[&str] = &["insert", "find", "update", "delete", "getMore", "bulkWrite"];

/// Runs one command and returns its reply document (success or error); never fails.
/// [`dispatch`] as a [`crate::command::InternalDispatch`] value.
pub fn dispatch_boxed<'a>(
    state: &'a Arc<ServerState>,
    client: &'a Arc<ClientInfo>,
    body: &'a Arc<Document>,
) -> futures::future::BoxFuture<'a, Reply> {
    Box::pin(dispatch(state, client, body))
}

pub async fn dispatch(
    state: &Arc<ServerState>,
    client: &Arc<ClientInfo>,
    body: &Arc<Document>,
) -> Reply {
    let started = Instant::now();
    let name = body.keys().next().map(String::as_str).unwrap_or("");
    let span = tracing::debug_span!("command", name, conn = client.connection_id);
    let (result, finished) = run(state, client, body, name).instrument(span).await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let mut reply = match result {
        Ok(mut reply) => {
            reply.append_ok();
            tracing::debug!(name, elapsed_ms, "command succeeded");
            reply
        }
        Err(error) => {
            // Counters are kept under canonical names; `name` may be an alias.
            if let Some(counters) = registry::counters_of(name) {
                bump(&counters.failed, 1);
            }
            tracing::debug!(name, elapsed_ms, code = error.code.code(), errmsg = %error.errmsg, "command failed");
            Reply::from(error.to_reply())
        }
    };
    // Replica-set mode: every reply gossips the cluster time.
    if state.repl.is_some() {
        crate::repl::decorate_reply(state.storage.as_ref(), &mut reply);
    }
    if elapsed_ms >= state.profiler.slowms() {
        tracing::info!(name, elapsed_ms, conn = client.connection_id, "Slow query");
    }
    if let Some(finished) = finished {
        crate::profiler::finish(
            &state.profiler,
            state.storage.as_ref(),
            state.clock.as_ref(),
            finished,
            &reply,
        )
        .await;
    }
    reply
}

async fn run(
    state: &Arc<ServerState>,
    client: &Arc<ClientInfo>,
    body: &Arc<Document>,
    name: &str,
) -> (CommandResult<Reply>, Option<crate::profiler::Finished>) {
    let spec = match checked_spec(state, client, body, name).await {
        Ok(spec) => spec,
        Err(error) => return (Err(error), None),
    };
    let db = match body.get("$db") {
        Some(Bson::String(db)) => db.as_str(),
        _ => "",
    };
    let guard = state.ops.start(crate::ops::OpStart {
        client,
        name: spec.name,
        db,
        body,
    });
    // The level when the command starts decides (mongod reads it as the command begins).
    let profile = state.profiler.settings_at_start(db);
    let rerunnable = !body.contains_key("autocommit") && !RUN_ONCE.contains(&spec.name);
    let (result, round_trips) = run_on_current_catalog(state, rerunnable, || {
        run_handler(state, client, body, spec, db, &guard.op)
    })
    .await;
    state.stats.round_trips.record(spec.name, round_trips);
    let finished = profile.map(|settings| crate::profiler::Finished {
        settings,
        op: guard.op.clone(),
        db: db.to_owned(),
        error: result.as_ref().err().cloned(),
    });
    drop(guard);
    (result, finished)
}

/// How often a command runs again because the catalog it was answered from turned out stale
/// (another node sharing the database changed it); the last attempt's answer stands.
const CATALOG_RESTARTS: usize = 3;

/// Commands that change the server's state before their first storage statement, so they never
/// run again (`getMore` has taken its cursor out: it goes on with the plan it has).
const RUN_ONCE: &[&str] = &["getMore"];

/// Runs the command (`run`) in a command scope, again while the storage engine found the
/// catalog it used stale before the command changed anything (`command_scope::Ran`): so a
/// command sees every catalog change another node committed before it began. Only a
/// `rerunnable` command runs again: not a statement of a multi-document transaction (its
/// snapshot holds its own catalog), nor one of [`RUN_ONCE`]. Also the round trips to the
/// engine's database, every attempt's.
async fn run_on_current_catalog<F: std::future::Future<Output = CommandResult<Reply>>>(
    state: &Arc<ServerState>,
    rerunnable: bool,
    run: impl Fn() -> F,
) -> (CommandResult<Reply>, u64) {
    use tideway_storage::command_scope;
    let mut round_trips = 0;
    let mut attempt = 0;
    loop {
        let ran = command_scope::run(run(), rerunnable).await;
        round_trips += ran.round_trips;
        if attempt == CATALOG_RESTARTS {
            return (ran.output, round_trips);
        }
        let stale = ran.restart
            || (ran.unchecked && {
                // An unreachable database leaves the answer from the cache standing.
                let current = command_scope::run(state.storage.catalog_current(), false).await;
                round_trips += current.round_trips;
                matches!(current.output, Ok(false))
            });
        if !stale {
            return (ran.output, round_trips);
        }
        attempt += 1;
    }
}

/// The command's registry entry after the checks that need no op: known name, valid `$db`,
/// authenticated (before the arguments are parsed, as mongod), admin-only, no transactions,
/// valid arguments, authorized.
async fn checked_spec(
    state: &Arc<ServerState>,
    client: &ClientInfo,
    body: &Document,
    name: &str,
) -> CommandResult<&'static CommandSpec> {
    let spec = registry::lookup(state, name).ok_or_else(|| {
        CommandError::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{name}'"),
        )
    })?;
    if let Some(counters) = registry::counters_of(spec.name) {
        bump(&counters.total, 1);
    }
    let db = match body.get("$db") {
        Some(Bson::String(db)) if !db.is_empty() => db.as_str(),
        Some(Bson::String(_)) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                "Invalid database name: ''",
            ))
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '$db' is the wrong type '{}', expected type 'string'",
                tideway_base::display::type_name(other)
            )))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40571,
                "OP_MSG requests require a $db argument",
            ))
        }
    };
    let auth_rule =
        crate::access::enforce::check_authenticated(state, client, spec, db, body).await?;
    if spec.admin_only && db != "admin" {
        return Err(CommandError::new(
            ErrorCode::Unauthorized,
            format!("{} may only be run against the admin database.", spec.name),
        ));
    }
    crate::repl::check_session_options(state.repl.as_ref(), spec.name, body)?;
    if !OWN_OPCOUNTER.contains(&spec.name) {
        bump(&state.stats.opcounters.command, 1);
    }
    if let Some(args) = crate::commands::schema::args_for(spec.name) {
        crate::commands::schema::validate(spec.name, args, body)?;
    }
    crate::access::enforce::check_privileges(state, client, auth_rule, db, body).await?;
    Ok(spec)
}

/// Runs the handler until it finishes, `maxTimeMS` passes (50) or the op is killed (11601).
async fn run_handler(
    state: &Arc<ServerState>,
    client: &Arc<ClientInfo>,
    body: &Document,
    spec: &'static CommandSpec,
    db: &str,
    op: &crate::ops::Op,
) -> CommandResult<Reply> {
    let max_time_ms = max_time_ms(body)?;
    // A getMore's `maxTimeMS` is how long an `awaitData` cursor waits for documents (its
    // handler honours it), not a limit on the command.
    let max_time_ms = max_time_ms.filter(|_| spec.name != "getMore");
    let deadline = max_time_ms.map_or(Deadline::none(), |limit| {
        Deadline::at(Instant::now() + std::time::Duration::from_millis(limit))
    });
    // Its logical session is in use now (one hash-map touch).
    let session = state.sessions.touch(body, state.clock.now_ms());
    // A statement of a multi-document transaction runs inside it (replica-set mode).
    let statement = match &state.repl {
        Some(repl) => {
            repl.transactions
                .enter(&state.storage, state.clock.as_ref(), spec.name, body)
                .await?
        }
        None => None,
    };
    let ctx = CommandContext {
        state,
        client,
        db,
        name: spec.name,
        deadline: deadline.with_kill_switch(op.kill_switch()),
        op,
        txn: statement.as_ref().map(|statement| &statement.storage),
        session: session.as_deref(),
        dispatch: dispatch_boxed,
    };
    // Server-side JavaScript the handler runs sees the switch, the budgets and this deadline.
    let work = tideway_query::js::scoped(
        state.config.js_limits(),
        ctx.deadline,
        Box::pin(async {
            // Replica-set mode: `readConcern` (`afterClusterTime` may wait) before the command.
            if state.repl.is_some() {
                crate::repl::check_read_concern(state.storage.as_ref(), body)?;
            }
            // A command naming a view is served by `commands::views`, any other by its handler.
            crate::commands::views::run(&ctx, spec, body).await
        }),
    );
    let time_limit = async {
        match max_time_ms {
            Some(limit) => tokio::time::sleep(std::time::Duration::from_millis(limit)).await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        biased;
        result = work => result,
        () = op.killed() => Err(Deadline::interrupted()),
        () = time_limit => Err(Deadline::exceeded()),
    };
    let result = match (statement, &state.repl) {
        (Some(statement), Some(repl)) => repl.transactions.leave(statement, result),
        _ => result,
    };
    result.map_err(|error| crate::repl::label_retryable_write(error, spec.name, body))
}

/// `maxTimeMS`, honoured for every command: a non-negative 32-bit number; 0 means no limit.
fn max_time_ms(body: &Document) -> CommandResult<Option<u64>> {
    let Some(value) = body.get("maxTimeMS") else {
        return Ok(None);
    };
    let limit = tideway_base::bsonutil::as_f64(value)
        .filter(|ms| ms.fract() == 0.0 && (0.0..=f64::from(i32::MAX)).contains(ms))
        .ok_or_else(|| CommandError::bad_value(format!("{value} is not a valid value for maxTimeMS: it must be a non-negative 32-bit integer")))?;
    Ok((limit > 0.0).then_some(limit as u64))
}
