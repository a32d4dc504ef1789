//! Query diagnostics: `currentOp` (and the documents of the `$currentOp` stage, which `aggregate`
//! asks for through [`current_ops`]), `killOp`, `profile`, and mongod's test-only `sleep`. The
//! op registry is `crate::ops`, the profiler's rules `crate::profiler`; these handlers parse,
//! call them, and reply.

use bson::{doc, Bson, Document};

use crate::auth::privileges::{Action, Target};
use crate::client::ClientInfo;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::validate_database_name;
use crate::ops::CURRENT_OP_COMMAND_BYTES;
use crate::profiler::{ProfileFilter, PROFILE_COLLECTION};
use crate::state::ServerState;
use crate::{async_handler, sync_handler};
use tideway_base::command::is_generic_argument;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::{CurrentOpRequest, Filter};
use tideway_storage::{Namespace, StorageError};

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "currentOp",
        aliases: &[],
        help: "Running operations: {currentOp: 1, $all, $ownOps, <filter on the output fields>}.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(current_op),
    },
    CommandSpec {
        name: "killOp",
        aliases: &[],
        help: "Interrupt a running operation: {killOp: 1, op: <opid>}.",
        admin_only: true,
        test_only: false,
        handler: async_handler!(kill_op),
    },
    CommandSpec {
        name: "profile",
        aliases: &[],
        help: "The database profiler: {profile: <-1|0|1|2>, slowms, sampleRate, filter}; entries go to <db>.system.profile.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(profile),
    },
    CommandSpec {
        name: "sleep",
        aliases: &[],
        help: "Test only: run for secs/millis (10 s by default) without holding locks; killOp and maxTimeMS interrupt it.",
        admin_only: true,
        test_only: true,
        handler: async_handler!(sleep),
    },
];

/// The documents `$currentOp` produces: every running op (the caller's own included) and, with
/// `idleConnections`, every connection with nothing running. Commands are cut to 1000 bytes
/// with `truncateOps`. `allUsers`, `idleSessions`, `localOps` and `backtrace` change nothing on a
/// server without users, sessions, shards or latches; `idleCursors` is refused.
pub(crate) fn current_ops(
    state: &ServerState,
    viewer: &ClientInfo,
    request: &CurrentOpRequest,
) -> CommandResult<Vec<Document>> {
    if request.idle_cursors {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not report idle cursors in $currentOp",
        ));
    }
    let host = format!("{}:{}", state.hostname, state.config.port);
    let now = state.clock.now();
    let limit = request.truncate_ops.then_some(CURRENT_OP_COMMAND_BYTES);
    // `allUsers: false` ($ownOps) under --auth: the operations of the viewer's own users.
    let shown = |client: &ClientInfo| {
        request.all_users
            || crate::access::enforce::coauthorized(state, viewer, &client.auth.users())
    };
    let running = state.ops.running();
    let mut out: Vec<Document> = running
        .iter()
        .filter(|op| shown(&op.client))
        .map(|op| op.report(&host, now, limit))
        .collect();
    if request.idle_connections {
        for client in state.ops.connections() {
            if shown(&client)
                && !running
                    .iter()
                    .any(|op| op.client.connection_id == client.connection_id)
            {
                out.push(crate::ops::idle_connection_report(&client, &host, now));
            }
        }
    }
    Ok(out)
}

/// mongod runs `currentOp` as `[{$currentOp: {idleConnections: $all, allUsers: !$ownOps,
/// truncateOps: true}}, {$match: <other fields>}]` and replies `{inprog: [...]}`.
fn current_op(ctx: &CommandContext, body: &Document) -> CommandResult {
    let truthy = |field: &str| {
        body.get(field)
            .is_some_and(tideway_base::bsonutil::is_truthy)
    };
    let mut filter = Document::new();
    for (name, value) in body.iter().skip(1) {
        if !matches!(name.as_str(), "$all" | "$ownOps" | "$truncateOps")
            && !is_generic_argument(name)
        {
            filter.insert(name.clone(), value.clone());
        }
    }
    let filter = Filter::parse(&filter)?;
    let request = CurrentOpRequest {
        idle_connections: truthy("$all"),
        all_users: !truthy("$ownOps"),
        // `$truncateOps: false` is honoured only with test commands, as in mongod.
        truncate_ops: !ctx.state.params.test_commands_enabled()
            || body
                .get("$truncateOps")
                .is_none_or(tideway_base::bsonutil::is_truthy),
        idle_sessions: true,
        ..CurrentOpRequest::default()
    };
    let inprog: Vec<Bson> = current_ops(ctx.state, ctx.client, &request)?
        .into_iter()
        .filter(|op| filter.matches(op))
        .map(Bson::Document)
        .collect();
    Ok(doc! {"inprog": inprog})
}

/// mongod's `KillOpCmdBase::parseOpId`: an integer that fits in 32 bits (negative values are
/// the unsigned opid wrapped, as the output of `currentOp` shows them).
fn parse_opid(body: &Document) -> CommandResult<i64> {
    let value = body
        .get("op")
        .ok_or_else(|| CommandError::new(ErrorCode::NoSuchKey, "Missing expected field \"op\""))?;
    let op = match value {
        Bson::Int32(op) => i64::from(*op),
        Bson::Int64(op) => *op,
        Bson::Double(op) => {
            let exact = op.fract() == 0.0 && *op >= i64::MIN as f64 && *op < i64::MAX as f64;
            if !exact {
                return Err(CommandError::bad_value(format!(
                    "Expected field \"op\" to have a value exactly representable as a 64-bit integer, but found op: {op}"
                )));
            }
            *op as i64
        }
        Bson::Decimal128(_) => {
            return Err(CommandError::bad_value(format!(
                "Expected field \"op\" to have a value exactly representable as a 64-bit integer, but found op: {}",
                value_string(value)
            )))
        }
        other => {
            return Err(CommandError::type_mismatch(format!(
                "Expected field \"op\" to have numeric type, but found {}",
                type_name(other)
            )))
        }
    };
    let op = if (i64::from(i32::MIN)..0).contains(&op) {
        op + (1 << 32)
    } else {
        op
    };
    if !(0..=i64::from(u32::MAX)).contains(&op) {
        return Err(CommandError::new(
            ErrorCode::Location26823,
            format!("invalid op : {op}. Op ID cannot be represented with 32 bits"),
        ));
    }
    Ok(op)
}

/// Marks the op killed; it fails with 11601 at its next check. Unknown ops are not an error.
/// mongod's `killOp`: any operation with the `killop` action, else only the caller's own (an
/// operation of another user is refused with 13, as mongod's `KillOpCmdBase`).
async fn kill_op(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let opid = parse_opid(body)?;
    if let Some(privileges) = crate::access::enforce::privileges(ctx.state, ctx.client).await? {
        let owned = i32::try_from(opid).ok().is_some_and(|opid| {
            ctx.state.ops.running().iter().any(|op| {
                op.opid == opid
                    && crate::access::enforce::coauthorized(
                        ctx.state,
                        ctx.client,
                        &op.client.auth.users(),
                    )
            })
        });
        if !owned && !privileges.allows(Target::Cluster, Action::killop) {
            return Err(crate::access::enforce::unauthorized(ctx.db, body));
        }
    }
    tracing::info!(op_id = opid, "Going to kill op");
    if let Ok(opid) = i32::try_from(opid) {
        ctx.state.ops.kill(opid);
    }
    Ok(doc! {"info": "attempting to kill op"})
}

/// mongod's `profile`: `{was, slowms, sampleRate, filter?, note?}` with the settings before the
/// change. Levels outside 0..=2 only read. `slowms` and `sampleRate` are server-wide (they also
/// govern the slow-query log); the level and filter belong to the database.
async fn profile(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let level = match body.get("profile") {
        Some(value @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            tideway_base::bsonutil::as_f64(value)
                .filter(|level| level.is_finite())
                .map_or(-1, |level| level.trunc().clamp(-1e18, 1e18) as i64)
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'profile.profile' is the wrong type '{}', expected types '[long, int, decimal, double']",
                type_name(other)
            )))
        }
        None => -1,
    };
    let slowms = match body.get("slowms") {
        None | Some(Bson::Null) => None,
        Some(value) => tideway_base::bsonutil::as_f64(value).map(|ms| ms.trunc() as i64),
    };
    let sample_rate = match body.get("sampleRate") {
        Some(Bson::Double(rate)) => Some(*rate),
        _ => None,
    };
    if sample_rate.is_some_and(|rate| !(0.0..=1.0).contains(&rate)) {
        return Err(CommandError::bad_value(
            "'sampleRate' must be between 0.0 and 1.0 inclusive",
        ));
    }
    // `Some(None)` is `filter: "unset"`.
    let filter = match body.get("filter") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(spec)) => Some(Some(std::sync::Arc::new(ProfileFilter::parse(spec)?))),
        Some(Bson::String(unset)) if unset == "unset" => Some(None),
        Some(_) => {
            return Err(CommandError::bad_value(
                "Expected an object, or the string 'unset'.",
            ))
        }
    };
    validate_database_name(ctx.db)?;
    let profiler = &ctx.state.profiler;
    let old = profiler.settings(ctx.db);
    let old_slowms = profiler.slowms_setting();
    let old_sample_rate = profiler.sample_rate();
    let changes_level = (0..=2).contains(&level);
    if changes_level || filter.is_some() {
        let mut new = old.clone();
        if changes_level {
            new.level = i32::try_from(level).unwrap_or(0);
        }
        if let Some(filter) = filter.clone() {
            new.filter = filter;
        }
        if new.level > 0 {
            create_profile_collection(ctx, ctx.db).await?;
        }
        profiler.set(ctx.db, new);
    }
    let mut reply = doc! {
        "was": old.level,
        "slowms": i32::try_from(old_slowms).map_or(Bson::Int64(old_slowms), Bson::Int32),
        "sampleRate": old_sample_rate,
    };
    if let Some(old_filter) = &old.filter {
        reply.insert("filter", old_filter.spec.clone());
    }
    if old.filter.is_some() || filter.is_some() {
        reply.insert(
            "note",
            "When a filter expression is set, slowms and sampleRate are not used for profiling and slow-query log lines.",
        );
    }
    if let Some(slowms) = slowms {
        profiler.set_slowms(slowms);
    }
    if let Some(rate) = sample_rate {
        profiler.set_sample_rate(rate);
    }
    if changes_level || slowms.is_some() || sample_rate.is_some() || filter.is_some() {
        let new = profiler.settings(ctx.db);
        tracing::info!(
            db = ctx.db,
            from_level = old.level,
            to_level = new.level,
            from_slowms = old_slowms,
            to_slowms = profiler.slowms_setting(),
            to_sample_rate = profiler.sample_rate(),
            "Profiler settings changed"
        );
    }
    Ok(reply)
}

/// mongod creates `system.profile` when profiling is turned on (as a 1 MiB capped collection;
/// tideway's is bounded by the profiler instead).
async fn create_profile_collection(ctx: &CommandContext<'_>, db: &str) -> CommandResult<()> {
    let ns = Namespace::new(db, PROFILE_COLLECTION);
    let storage = ctx.storage();
    if storage.collection(&ns).await?.is_some() {
        return Ok(());
    }
    match storage
        .create_collection(&ns, Document::new(), Vec::new())
        .await
    {
        Ok(_) | Err(StorageError::NamespaceExists(_)) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Whether dropping `ns` must be refused because the profiler is writing to it (mongod's
/// IllegalOperation).
pub(crate) fn check_profile_drop(ctx: &CommandContext, ns: &Namespace) -> CommandResult<()> {
    if ns.coll == PROFILE_COLLECTION && ctx.state.profiler.level(&ns.db) != 0 {
        return Err(CommandError::new(
            ErrorCode::IllegalOperation,
            "turn off profiling before dropping system.profile collection",
        ));
    }
    Ok(())
}

/// mongod's test-only `sleep`: `secs`/`seconds` and `millis` add up (10 s when none is given).
/// tideway has no lock manager, so the command never blocks others: `lock` may be `none`, `ir`
/// or `iw` (intent locks block nothing else tideway runs), or absent; exclusive or shared locks
/// (`r`, `w`, `w: true`) and `lockTarget` are refused.
async fn sleep(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let number = |field: &str, code: ErrorCode| -> CommandResult<Option<i64>> {
        match body.get(field) {
            None => Ok(None),
            Some(value) => tideway_base::bsonutil::as_f64(value)
                .map(|n| Some(n as i64))
                .ok_or_else(|| CommandError::new(code, format!("'{field}' must be a number."))),
        }
    };
    if body.contains_key("secs") && body.contains_key("seconds") {
        return Err(CommandError::new(
            ErrorCode::Location51153,
            "Only one of 'secs' and 'seconds' may be specified",
        ));
    }
    let secs = number("secs", ErrorCode::Location34344)?;
    let seconds = number("seconds", ErrorCode::Location51154)?;
    let millis = number("millis", ErrorCode::Location34345)?;
    let total_ms = if secs.is_none() && seconds.is_none() && millis.is_none() {
        10_000
    } else {
        secs.or(seconds)
            .unwrap_or(0)
            .saturating_mul(1000)
            .saturating_add(millis.unwrap_or(0))
    };
    if let Some(lock) = body.get("lock") {
        if body.contains_key("w") {
            return Err(CommandError::new(
                ErrorCode::Location34346,
                "Only one of 'w' and 'lock' may be set.",
            ));
        }
        match lock.as_str().unwrap_or("") {
            "none" | "ir" | "iw" => {}
            "r" | "w" => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "tideway has no lock manager: sleep cannot hold a shared or exclusive lock",
                ))
            }
            _ => {
                return Err(CommandError::new(
                    ErrorCode::Location34347,
                    "'lock' must be one of 'r', 'ir', 'w', 'iw', 'none'.",
                ))
            }
        }
    }
    if body.get("w").is_some_and(tideway_base::bsonutil::is_truthy)
        || body.contains_key("lockTarget")
    {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway has no lock manager: sleep cannot hold a lock",
        ));
    }
    let duration = std::time::Duration::from_millis(u64::try_from(total_ms).unwrap_or(0));
    tokio::time::sleep(duration).await;
    // An interruption point, as mongod's (a kill or maxTimeMS that raced the wake-up).
    ctx.deadline.check()?;
    Ok(Document::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opids_parse_as_mongod() {
        assert_eq!(parse_opid(&doc! {"op": 5}).unwrap(), 5);
        assert_eq!(parse_opid(&doc! {"op": 5.0}).unwrap(), 5);
        assert_eq!(parse_opid(&doc! {"op": -1}).unwrap(), (1 << 32) - 1);
        let error = parse_opid(&doc! {}).unwrap_err();
        assert_eq!(
            (error.code, error.errmsg.as_str()),
            (ErrorCode::NoSuchKey, "Missing expected field \"op\"")
        );
        let error = parse_opid(&doc! {"op": "x"}).unwrap_err();
        assert_eq!(
            error.errmsg,
            "Expected field \"op\" to have numeric type, but found string"
        );
        let error = parse_opid(&doc! {"op": 1.1}).unwrap_err();
        assert_eq!(error.code, ErrorCode::BadValue);
        assert_eq!(
            error.errmsg,
            "Expected field \"op\" to have a value exactly representable as a 64-bit integer, but found op: 1.1"
        );
        let error = parse_opid(&doc! {"op": i64::MAX}).unwrap_err();
        assert_eq!(error.code, ErrorCode::Location26823);
        assert_eq!(
            error.errmsg,
            "invalid op : 9223372036854775807. Op ID cannot be represented with 32 bits"
        );
    }
}
