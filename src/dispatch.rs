//! Command dispatch: the registry of commands (as data: name, aliases, help, admin-only, handler),
//! the checks every command shares (`$db`, authentication and privileges under `--auth` through
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bson::{Bson, Document};
use futures::future::BoxFuture;
use tracing::Instrument;

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::limits::Deadline;
use crate::sorter::SortLimits;
use crate::state::{bump, ServerState};
use crate::wire::Reply;

/// Who sent a command: what handlers may know about the connection, without the socket.
#[derive(Debug)]
pub struct ClientInfo {
    pub connection_id: i32,
    /// The peer's `ip:port`.
    pub remote: String,
    /// Set once the first `hello` carrying `client` metadata has been seen.
    pub metadata_received: AtomicBool,
    /// That metadata (`currentOp`'s `clientMetadata`, and its `application.name` as `appName`).
    metadata: OnceLock<Document>,
    /// The users this connection authenticated as, and its SASL conversation (`crate::auth`).
    pub auth: crate::auth::ClientAuth,
    /// Whether the connection is TLS (`crate::tls`).
    pub tls: bool,
    /// The RFC 2253 subject of the client certificate the TLS handshake verified against
    /// `--tlsCAFile`: the user name MONGODB-X509 authenticates (`auth::x509`).
    pub peer_certificate_subject: Option<String>,
    /// The server itself running a command through dispatch (the session cache's refresh):
    /// never subject to authorization, as mongod's internal clients.
    pub internal: bool,
}

impl ClientInfo {
    pub fn new(connection_id: i32, remote: String) -> Self {
        ClientInfo {
            connection_id,
            remote,
            metadata_received: AtomicBool::new(false),
            metadata: OnceLock::new(),
            auth: crate::auth::ClientAuth::default(),
            tls: false,
            peer_certificate_subject: None,
            internal: false,
        }
    }

    /// The server's own client, for commands it runs on itself.
    pub fn internal() -> Self {
        ClientInfo {
            internal: true,
            ..ClientInfo::new(0, "(internal)".to_owned())
        }
    }

    /// A TLS connection, with the subject of the verified client certificate if one was
    /// presented.
    pub fn with_tls(mut self, peer_certificate_subject: Option<String>) -> Self {
        self.tls = true;
        self.peer_certificate_subject = peer_certificate_subject;
        self
    }

    /// Keeps the `client` document of the connection's first `hello`.
    pub fn set_metadata(&self, metadata: Document) {
        let _ = self.metadata.set(metadata);
    }

    pub fn metadata(&self) -> Option<&Document> {
        self.metadata.get()
    }

    /// `client.application.name` from the handshake, if the driver sent one.
    pub fn app_name(&self) -> Option<&str> {
        self.metadata
            .get()?
            .get_document("application")
            .ok()?
            .get_str("name")
            .ok()
            .filter(|name| !name.is_empty())
    }

    /// The peer's address without the port (the profiler's `client`).
    pub fn host(&self) -> &str {
        match self.remote.rsplit_once(':') {
            Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => &self.remote,
        }
    }
}

/// What a handler gets besides the command body.
pub struct CommandContext<'a> {
    pub state: &'a Arc<ServerState>,
    pub client: &'a Arc<ClientInfo>,
    /// The command's database (`$db`).
    pub db: &'a str,
    /// The command's registered name (the first key of the body, canonical casing).
    pub name: &'static str,
    /// When `maxTimeMS` runs out or `killOp` kills the command: long CPU-bound work checks it
    /// (dispatch only interrupts the handler at await points).
    pub deadline: Deadline,
    /// The running op: `currentOp` shows it, the profiler records it. Handlers and the query
    /// layer report what they do through its setters (`set_plan_summary`, `add_examined`,
    /// `set_nreturned`, `add_inserted`, ...).
    pub op: &'a crate::ops::Op,
    /// The multi-document transaction the command is a statement of: it reads and writes
    /// through the transaction's storage and at its time.
    pub txn: Option<&'a Arc<crate::txn::TxnStorage>>,
    /// The key of the command's logical session (`lsid`), which the session cache marked used
    /// (`crate::sessions`).
    pub session: Option<&'a [u8]>,
}

impl<'a> CommandContext<'a> {
    /// The same command context under another command's name (a command run inside another,
    /// such as the one `explain` describes).
    pub fn renamed(&self, name: &'static str) -> CommandContext<'a> {
        CommandContext {
            state: self.state,
            client: self.client,
            db: self.db,
            name,
            deadline: self.deadline,
            op: self.op,
            txn: self.txn,
            session: self.session,
        }
    }

    /// The storage the command reads and writes: the server's, or inside a transaction the
    /// transaction's.
    pub fn storage(&self) -> &'a dyn crate::storage::Storage {
        match self.txn {
            Some(txn) => txn.as_ref(),
            None => self.state.storage.as_ref(),
        }
    }

    /// The clock the command reads: the server's, or inside a transaction the instant its
    /// snapshot was taken.
    pub fn clock(&self) -> &'a dyn crate::clock::Clock {
        match self.txn {
            Some(txn) => txn.clock.as_ref(),
            None => self.state.clock.as_ref(),
        }
    }

    /// `ns` as the command sees it now (see [`crate::exec::CollectionView::open`]). Inside a
    /// transaction, waiting for a collection another operation holds exclusively is bounded by
    /// `maxTransactionLockRequestTimeoutMillis` (then `LockTimeout`).
    pub async fn view(
        &self,
        ns: &crate::storage::Namespace,
    ) -> CommandResult<crate::exec::CollectionView> {
        let open = crate::exec::CollectionView::open(
            &self.state.policy_gates,
            self.storage(),
            self.clock(),
            ns,
        );
        let limit_ms = self.state.params.max_transaction_lock_request_timeout_ms();
        match (self.txn, u64::try_from(limit_ms)) {
            (Some(_), Ok(limit_ms)) => {
                match tokio::time::timeout(std::time::Duration::from_millis(limit_ms), open).await {
                    Ok(view) => Ok(view?),
                    Err(_) => Err(CommandError::new(
                        ErrorCode::LockTimeout,
                        format!("Unable to acquire IX lock on '{ns}' within {limit_ms}ms."),
                    )),
                }
            }
            _ => Ok(open.await?),
        }
    }

    /// The limits of one blocking operation of this command: `max_memory_bytes`, spilling under
    /// the server's spill directory if `allow_disk_use` (or, when the command does not say,
    /// `allowDiskUseByDefault`) permits, else failing with `exceeded_message`.
    pub fn blocking_limits(
        &self,
        allow_disk_use: Option<bool>,
        max_memory_bytes: u64,
        exceeded_message: String,
    ) -> SortLimits {
        SortLimits {
            max_memory_bytes: usize::try_from(max_memory_bytes).unwrap_or(usize::MAX),
            allow_disk_use: allow_disk_use
                .unwrap_or_else(|| self.state.params.allow_disk_use_by_default()),
            spill_dir: self.state.spill_dir.clone(),
            exceeded_message,
            deadline: self.deadline,
        }
    }
}

pub type Handler =
    for<'a> fn(&'a CommandContext<'a>, &'a Document) -> BoxFuture<'a, CommandResult<Reply>>;

/// One entry of the registry.
pub struct CommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub help: &'static str,
    /// Only runs against the `admin` database (else 13 Unauthorized, as mongod).
    pub admin_only: bool,
    /// Exists only with `enableTestCommands`; otherwise unknown, like any other name.
    pub test_only: bool,
    pub handler: Handler,
}

/// Wraps an `async fn(&CommandContext, &Document) -> CommandResult<T>` as a [`Handler`], for a
/// reply `T` that is a `Document` or a [`Reply`].
#[macro_export]
macro_rules! async_handler {
    ($function:path) => {{
        fn boxed<'a>(
            ctx: &'a $crate::dispatch::CommandContext<'a>,
            body: &'a ::bson::Document,
        ) -> ::futures::future::BoxFuture<'a, $crate::error::CommandResult<$crate::wire::Reply>>
        {
            Box::pin(async move { $function(ctx, body).await.map(Into::into) })
        }
        boxed as $crate::dispatch::Handler
    }};
}

/// Wraps a plain `fn(&CommandContext, &Document) -> CommandResult` as a [`Handler`].
#[macro_export]
macro_rules! sync_handler {
    ($function:path) => {{
        fn boxed<'a>(
            ctx: &'a $crate::dispatch::CommandContext<'a>,
            body: &'a ::bson::Document,
        ) -> ::futures::future::BoxFuture<'a, $crate::error::CommandResult<$crate::wire::Reply>>
        {
            Box::pin(::std::future::ready($function(ctx, body).map(Into::into)))
        }
        boxed as $crate::dispatch::Handler
    }};
}

/// Arguments any command may carry (mongod's generic_argument.idl); handlers that check for unknown
/// fields must skip these.
pub const GENERIC_ARGUMENTS: &[&str] = &[
    "$db",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "readConcern",
    "writeConcern",
    "lsid",
    "clientOperationKey",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "stmtId",
    "comment",
    "$readPreference",
    "$clusterTime",
    "$audit",
    "$client",
    "allowImplicitCollectionCreation",
    "$queryOptions",
    "mayBypassWriteBlocking",
    "txnRetryCounter",
    "expectPrefix",
    "databaseVersion",
    "shardVersion",
    "help",
];

pub fn is_generic_argument(field: &str) -> bool {
    GENERIC_ARGUMENTS.contains(&field)
}

/// The command's own fields after the command name, without generic arguments.
pub fn command_fields(body: &Document) -> impl Iterator<Item = (&String, &Bson)> {
    body.iter()
        .skip(1)
        .filter(|(key, _)| !is_generic_argument(key))
}

/// Commands that `serverStatus.opcounters` counts in their own counters instead of `command`
/// (`bulkWrite` counts its ops as inserts, updates and deletes).
const OWN_OPCOUNTER: &[&str] = &["insert", "find", "update", "delete", "getMore", "bulkWrite"];

/// Per-command counters for `serverStatus.metrics.commands`.
#[derive(Debug, Default)]
pub struct CommandCounters {
    pub total: AtomicU64,
    pub failed: AtomicU64,
}

struct Registry {
    by_name: HashMap<&'static str, &'static CommandSpec>,
    counters: HashMap<&'static str, CommandCounters>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut by_name = HashMap::new();
        let mut counters = HashMap::new();
        for spec in crate::commands::all() {
            for name in std::iter::once(&spec.name).chain(spec.aliases) {
                let previous = by_name.insert(*name, spec);
                debug_assert!(previous.is_none(), "command {name} registered twice");
            }
            counters.insert(spec.name, CommandCounters::default());
        }
        Registry { by_name, counters }
    })
}

/// The commands this server answers, test-only ones included only when enabled.
pub fn visible_commands(state: &ServerState) -> Vec<&'static CommandSpec> {
    let enabled = state.params.test_commands_enabled();
    let mut specs: Vec<_> = crate::commands::all()
        .filter(|spec| enabled || !spec.test_only)
        .collect();
    specs.sort_by_key(|spec| spec.name);
    specs
}

/// Every registered command's counters, by canonical name.
pub fn command_counters() -> impl Iterator<Item = (&'static str, &'static CommandCounters)> {
    registry()
        .counters
        .iter()
        .map(|(name, counters)| (*name, counters))
}

fn lookup(state: &ServerState, name: &str) -> Option<&'static CommandSpec> {
    registry()
        .by_name
        .get(name)
        .copied()
        .filter(|spec| !spec.test_only || state.params.test_commands_enabled())
}

/// Runs one command and returns its reply document (success or error); never fails.
pub async fn dispatch(
    state: &Arc<ServerState>,
    client: &Arc<ClientInfo>,
    body: &Document,
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
            let canonical = registry().by_name.get(name).map(|spec| spec.name);
            if let Some(counters) = canonical.and_then(|name| registry().counters.get(name)) {
                bump(&counters.failed, 1);
            }
            tracing::debug!(name, elapsed_ms, code = error.code.code(), errmsg = %error.errmsg, "command failed");
            Reply::from(error.to_reply())
        }
    };
    // Replica-set mode: every reply gossips the cluster time.
    crate::repl::decorate_reply(state, &mut reply);
    if elapsed_ms >= state.profiler.slowms() {
        tracing::info!(name, elapsed_ms, conn = client.connection_id, "Slow query");
    }
    if let Some(finished) = finished {
        crate::profiler::finish(state, finished, &reply).await;
    }
    reply
}

async fn run(
    state: &Arc<ServerState>,
    client: &Arc<ClientInfo>,
    body: &Document,
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
    let result = run_handler(state, client, body, spec, db, &guard.op).await;
    let finished = profile.map(|settings| crate::profiler::Finished {
        settings,
        op: guard.op.clone(),
        db: db.to_owned(),
        error: result.as_ref().err().cloned(),
    });
    drop(guard);
    (result, finished)
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
    let spec = lookup(state, name).ok_or_else(|| {
        CommandError::new(
            ErrorCode::CommandNotFound,
            format!("no such command: '{name}'"),
        )
    })?;
    if let Some(counters) = registry().counters.get(spec.name) {
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
                crate::query::display::type_name(other)
            )))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40571,
                "OP_MSG requests require a $db argument",
            ))
        }
    };
    let auth_rule = crate::auth::authz::check_authenticated(state, client, spec, db, body).await?;
    if spec.admin_only && db != "admin" {
        return Err(CommandError::new(
            ErrorCode::Unauthorized,
            format!("{} may only be run against the admin database.", spec.name),
        ));
    }
    crate::repl::check_session_options(state, spec.name, body)?;
    if !OWN_OPCOUNTER.contains(&spec.name) {
        bump(&state.stats.opcounters.command, 1);
    }
    if let Some(args) = crate::commands::schema::args_for(spec.name) {
        crate::commands::schema::validate(spec.name, args, body)?;
    }
    crate::auth::authz::check_privileges(state, client, auth_rule, db, body).await?;
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
        Some(repl) => repl.transactions.enter(state, spec.name, body).await?,
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
    };
    // Server-side JavaScript the handler runs sees the switch, the budgets and this deadline.
    let work = crate::js::scoped(
        state.config.js_limits(),
        ctx.deadline,
        Box::pin(async {
            // Replica-set mode: `readConcern` (`afterClusterTime` may wait) before the command.
            crate::repl::check_read_concern(state, body)?;
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
    match (statement, &state.repl) {
        (Some(statement), Some(repl)) => repl.transactions.leave(statement, result),
        _ => result,
    }
}

/// `maxTimeMS`, honoured for every command: a non-negative 32-bit number; 0 means no limit.
fn max_time_ms(body: &Document) -> CommandResult<Option<u64>> {
    let Some(value) = body.get("maxTimeMS") else {
        return Ok(None);
    };
    let limit = crate::bsonutil::as_f64(value)
        .filter(|ms| ms.fract() == 0.0 && (0.0..=f64::from(i32::MAX)).contains(ms))
        .ok_or_else(|| CommandError::bad_value(format!("{value} is not a valid value for maxTimeMS: it must be a non-negative 32-bit integer")))?;
    Ok((limit > 0.0).then_some(limit as u64))
}
