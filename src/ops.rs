//! The registry of running operations: every command dispatch runs is an [`Op`] here while it runs
//! (mongod's `CurOp`), with its `opid`, client, namespace, its command document (shared, not copied),
//! start instant, kill flag and the counters the query layer fills in (`keysExamined`,
//! `docsExamined`, `nreturned`, `planSummary`, write counts). `currentOp`/`$currentOp` report
//! them, `killOp` kills them, and the profiler (`profiler.rs`) turns a finished one into a
//! `system.profile` entry. Also the connections, for `$currentOp`'s `idleConnections`.
//!
//! Invariants:
//! - An op is registered for exactly as long as its [`OpGuard`] lives (dispatch holds it around
//!   the handler); opids increase (wrapping within positive `i32`).
//! - Killing sets a flag that two things observe: dispatch's wait on [`Op::killed`] (await
//!   points) and `KillSwitch::is_killed`, which `limits::Deadline::check` calls inside
//!   CPU-bound loops. A `KillSwitch` is `Copy` (so `Deadline` stays `Copy`): an atomic cell
//!   (pooled by the registry's shards, reused, never freed) plus a token unique to the op, so a
//!   stale switch (copied into a cursor that outlives its command) never sees a later op's kill.
//! - The request path costs an opid increment, one short lock of one of 16 shards to register and
//!   one to unregister (each shard also pools the kill cells of its ops), and a reference to the
//!   command document the request decoded (cut to `$truncated` only when reported). Counters
//!   are atomics; only `planSummary` takes a (per-op) lock.
//!
//! Must not: know about sockets, storage or profiling rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;
use tideway_base::limits::KillSwitch;

use bson::{doc, Bson, Document};

use crate::client::ClientInfo;

/// mongod keeps at most this much of a command for the profiler (`appendMaxElementSize`); bigger
/// commands are kept as `{$truncated: "<rendering>..."}`.
pub(crate) const MAX_REPORTED_COMMAND_BYTES: usize = 50 * 1024;
/// The `currentOp` command (and `$currentOp` with `truncateOps`) cuts commands to this size.
pub(crate) const CURRENT_OP_COMMAND_BYTES: usize = 1000;

/// mongod's logical op kinds (`logicalOpToString`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Query,
    GetMore,
    Insert,
    Update,
    Remove,
    KillCursors,
    Command,
}

impl OpKind {
    /// The kind of a command, by its canonical name.
    pub(crate) fn of_command(name: &str) -> OpKind {
        match name {
            "find" => OpKind::Query,
            "getMore" => OpKind::GetMore,
            "insert" => OpKind::Insert,
            "update" => OpKind::Update,
            "delete" => OpKind::Remove,
            "killCursors" => OpKind::KillCursors,
            _ => OpKind::Command,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Query => "query",
            OpKind::GetMore => "getmore",
            OpKind::Insert => "insert",
            OpKind::Update => "update",
            OpKind::Remove => "remove",
            OpKind::KillCursors => "killcursors",
            OpKind::Command => "command",
        }
    }
}

/// The counters of one op. Each is reported only once something set it (as mongod's optional
/// metrics); `set` has one bit per counter.
#[derive(Debug, Default)]
struct Metrics {
    set: AtomicU32,
    values: [AtomicI64; Metric::COUNT],
}

/// A counter of [`Metrics`], in the order mongod's profiler writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Metric {
    CursorId,
    KeysExamined,
    DocsExamined,
    NMatched,
    NModified,
    NInserted,
    NDeleted,
    NUpserted,
    KeysInserted,
    KeysDeleted,
    NReturned,
}

impl Metric {
    const COUNT: usize = 11;
    const ALL: [Metric; Metric::COUNT] = [
        Metric::CursorId,
        Metric::KeysExamined,
        Metric::DocsExamined,
        Metric::NMatched,
        Metric::NModified,
        Metric::NInserted,
        Metric::NDeleted,
        Metric::NUpserted,
        Metric::KeysInserted,
        Metric::KeysDeleted,
        Metric::NReturned,
    ];

    /// The field name in profile entries and slow-query lines.
    pub fn field(self) -> &'static str {
        match self {
            Metric::CursorId => "cursorid",
            Metric::KeysExamined => "keysExamined",
            Metric::DocsExamined => "docsExamined",
            Metric::NMatched => "nMatched",
            Metric::NModified => "nModified",
            Metric::NInserted => "ninserted",
            Metric::NDeleted => "ndeleted",
            Metric::NUpserted => "nUpserted",
            Metric::KeysInserted => "keysInserted",
            Metric::KeysDeleted => "keysDeleted",
            Metric::NReturned => "nreturned",
        }
    }
}

/// One running command.
#[derive(Debug)]
pub struct Op {
    pub opid: i32,
    pub client: Arc<ClientInfo>,
    /// `<db>.<collection>`, `<db>.$cmd.aggregate`, or the database alone (mongod's rules).
    pub ns: String,
    /// The command document (`$db` and generic arguments included, as mongod shows it).
    command: Arc<Document>,
    pub kind: OpKind,
    /// The command's registered name.
    pub name: &'static str,
    pub started: Instant,
    kill: KillSwitch,
    killed: tokio::sync::Notify,
    metrics: Metrics,
    plan_summary: Mutex<Option<String>>,
    originating_command: std::sync::OnceLock<Document>,
    flags: AtomicU32,
}

const FLAG_CURSOR_EXHAUSTED: u32 = 1;
const FLAG_HAS_SORT_STAGE: u32 = 2;
const FLAG_USED_DISK: u32 = 4;

impl Op {
    /// The switch `Deadline` checks in CPU-bound loops.
    pub(crate) fn kill_switch(&self) -> KillSwitch {
        self.kill
    }

    pub fn is_killed(&self) -> bool {
        self.kill.is_killed()
    }

    /// Resolves once the op is killed (at once if it already is).
    pub async fn killed(&self) {
        loop {
            let notified = self.killed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_killed() {
                return;
            }
            notified.await;
        }
    }

    fn kill(&self) {
        self.kill.trip();
        self.killed.notify_waiters();
    }

    fn set_metric(&self, metric: Metric, value: i64) {
        self.metrics.values[metric as usize].store(value, Ordering::Relaxed);
        self.metrics
            .set
            .fetch_or(1 << metric as u32, Ordering::Relaxed);
    }

    fn add_metric(&self, metric: Metric, by: u64) {
        let by = i64::try_from(by).unwrap_or(i64::MAX);
        self.metrics.values[metric as usize].fetch_add(by, Ordering::Relaxed);
        self.metrics
            .set
            .fetch_or(1 << metric as u32, Ordering::Relaxed);
    }

    /// The value of `metric`, if anything set it.
    pub fn metric(&self, metric: Metric) -> Option<i64> {
        let set = self.metrics.set.load(Ordering::Relaxed) & (1 << metric as u32) != 0;
        set.then(|| self.metrics.values[metric as usize].load(Ordering::Relaxed))
    }

    // The setters the command handlers and the query layer call.

    /// The plan the query runs, in mongod's words (`COLLSCAN`, `IXSCAN { a: 1 }`, `IDHACK`).
    pub(crate) fn set_plan_summary(&self, summary: impl Into<String>) {
        *lock(&self.plan_summary) = Some(summary.into());
    }

    /// Index keys and documents the query examined (adds to what was counted before).
    pub(crate) fn add_examined(&self, keys: u64, docs: u64) {
        self.add_metric(Metric::KeysExamined, keys);
        self.add_metric(Metric::DocsExamined, docs);
    }

    /// Documents the command returned to the client (its batch).
    pub(crate) fn set_nreturned(&self, n: usize) {
        self.set_metric(Metric::NReturned, n as i64);
    }

    /// The cursor the command left open (find, aggregate) or read from (getMore).
    pub(crate) fn set_cursor_id(&self, id: i64) {
        self.set_metric(Metric::CursorId, id);
    }

    /// A getMore returned the cursor's last batch.
    pub(crate) fn set_cursor_exhausted(&self) {
        self.flags
            .fetch_or(FLAG_CURSOR_EXHAUSTED, Ordering::Relaxed);
    }

    /// A cursor's first batch of `returned` documents; `cursor_id` 0 when nothing is left open.
    pub(crate) fn set_first_batch(&self, cursor_id: i64, returned: usize) {
        self.set_nreturned(returned);
        if cursor_id != 0 {
            self.set_cursor_id(cursor_id);
        }
    }

    /// A getMore on `cursor_id` returned `returned` documents, the last ones if `exhausted`;
    /// `originating` is the command that opened the cursor.
    pub(crate) fn set_get_more_batch(
        &self,
        cursor_id: i64,
        returned: usize,
        exhausted: bool,
        originating: &Option<Document>,
    ) {
        self.set_nreturned(returned);
        self.set_cursor_id(cursor_id);
        if exhausted {
            self.set_cursor_exhausted();
        }
        if let Some(command) = originating {
            let _ = self.originating_command.set(command.clone());
        }
    }

    /// The command as the profiler records it: whole up to [`MAX_REPORTED_COMMAND_BYTES`], else
    /// `{$truncated: ...}`.
    pub fn command(&self) -> Document {
        bounded_command(&self.command, MAX_REPORTED_COMMAND_BYTES)
    }

    /// The command that opened the cursor a getMore reads.
    pub(crate) fn originating_command(&self) -> Option<&Document> {
        self.originating_command.get()
    }

    /// The plan has a blocking sort (`hasSortStage`); `used_disk` when it spilled.
    pub(crate) fn set_sort_stage(&self, used_disk: bool) {
        let flags = FLAG_HAS_SORT_STAGE | if used_disk { FLAG_USED_DISK } else { 0 };
        self.flags.fetch_or(flags, Ordering::Relaxed);
    }

    /// Documents an update matched and modified, and upserts (adds to earlier statements).
    pub(crate) fn add_updated(&self, matched: usize, modified: usize, upserted: usize) {
        self.add_metric(Metric::NMatched, matched as u64);
        self.add_metric(Metric::NModified, modified as u64);
        if upserted > 0 {
            self.add_metric(Metric::NUpserted, upserted as u64);
        }
    }

    /// Documents inserted (adds to what was counted before).
    pub(crate) fn add_inserted(&self, n: usize) {
        self.add_metric(Metric::NInserted, n as u64);
    }

    /// Documents deleted (adds to what was counted before).
    pub(crate) fn add_deleted(&self, n: usize) {
        self.add_metric(Metric::NDeleted, n as u64);
    }

    pub fn plan_summary(&self) -> Option<String> {
        lock(&self.plan_summary).clone()
    }

    pub(crate) fn cursor_exhausted(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & FLAG_CURSOR_EXHAUSTED != 0
    }

    pub(crate) fn has_sort_stage(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & FLAG_HAS_SORT_STAGE != 0
    }

    pub(crate) fn used_disk(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & FLAG_USED_DISK != 0
    }

    /// Every set counter as `(field, value)`, in the profiler's order.
    pub fn metrics(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        Metric::ALL
            .iter()
            .filter_map(|metric| self.metric(*metric).map(|value| (metric.field(), value)))
    }

    /// This op as `currentOp` reports it (`type: "op"` entries), with the command cut to
    /// `command_bytes` when given. `host` is `<hostname>:<port>`; `now` the wall clock.
    pub fn report(
        &self,
        host: &str,
        now: bson::DateTime,
        command_bytes: Option<usize>,
    ) -> Document {
        let elapsed = self.started.elapsed();
        let mut out = client_report(&self.client, host);
        out.insert("active", true);
        out.insert("currentOpTime", current_op_time(now));
        out.insert("opid", self.opid);
        if self.is_killed() {
            out.insert("killPending", true);
        }
        out.insert(
            "secs_running",
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX),
        );
        out.insert(
            "microsecs_running",
            i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX),
        );
        out.insert("op", self.kind.name());
        out.insert("ns", self.ns.as_str());
        let limit = command_bytes.map_or(MAX_REPORTED_COMMAND_BYTES, |limit| {
            limit.min(MAX_REPORTED_COMMAND_BYTES)
        });
        out.insert("command", bounded_command(&self.command, limit));
        if let Some(summary) = self.plan_summary() {
            out.insert("planSummary", summary);
        }
        out.insert("numYields", 0);
        out.insert("locks", Document::new());
        out.insert("waitingForLock", false);
        out.insert("lockStats", Document::new());
        out
    }
}

/// mongod's `currentOpTime`: the wall clock as an ISO-8601 string with the offset.
fn current_op_time(now: bson::DateTime) -> String {
    let millis = now.timestamp_millis();
    match time_parts(millis) {
        Some(text) => text,
        None => millis.to_string(),
    }
}

fn time_parts(millis: i64) -> Option<String> {
    let rfc = bson::DateTime::from_millis(millis)
        .try_to_rfc3339_string()
        .ok()?;
    // `2023-11-14T22:13:20Z` or with fractional seconds: mongod prints milliseconds and `+00:00`.
    let trimmed = rfc.strip_suffix('Z')?;
    let (seconds, _) = trimmed.split_once('.').unwrap_or((trimmed, ""));
    Some(format!("{seconds}.{:03}+00:00", millis.rem_euclid(1000)))
}

/// The fields mongod's `Client::reportState` and `reportCurrentOpForClient` give every entry.
fn client_report(client: &ClientInfo, host: &str) -> Document {
    let mut out = doc! {
        "type": "op",
        "host": host,
        "desc": format!("conn{}", client.connection_id),
        "connectionId": client.connection_id,
        "client": client.remote.as_str(),
    };
    if let Some(app_name) = client.app_name() {
        out.insert("appName", app_name);
    }
    if let Some(metadata) = client.metadata() {
        out.insert("clientMetadata", metadata.clone());
    }
    let users = client.auth.users();
    if !users.is_empty() {
        let users: Vec<bson::Bson> = users
            .iter()
            .map(|user| bson::Bson::Document(doc! {"user": &user.user, "db": &user.db}))
            .collect();
        out.insert("effectiveUsers", users);
    }
    out
}

/// An idle connection as `$currentOp` with `idleConnections` reports it.
pub(crate) fn idle_connection_report(
    client: &ClientInfo,
    host: &str,
    now: bson::DateTime,
) -> Document {
    let mut out = client_report(client, host);
    out.insert("active", false);
    out.insert("currentOpTime", current_op_time(now));
    out
}

/// `command` as mongod reports it when it may be at most `limit` bytes: itself if small enough,
/// else `{$truncated: "<rendering cut to limit>...", comment}`. Costs at most about `limit`.
pub(crate) fn bounded_command(command: &Document, limit: usize) -> Document {
    if fits_within(command, limit) {
        return command.clone();
    }
    truncated(
        &prefix_copy(command, limit.saturating_mul(2)),
        command.get("comment"),
        limit,
    )
}

/// `{$truncated: "<rendering of prefix cut to limit>...", comment}`. The prefix renders to about
/// twice the limit, so the cut always falls inside it, and ends with "..." as mongod's does.
fn truncated(prefix: &Document, comment: Option<&Bson>, limit: usize) -> Document {
    let mut rendering = tideway_base::display::document_string(prefix);
    let mut cut = rendering.len().min(limit.saturating_sub(3));
    while !rendering.is_char_boundary(cut) {
        cut -= 1;
    }
    rendering.truncate(cut);
    rendering.push_str("...");
    let mut out = doc! {"$truncated": rendering};
    if let Some(comment) = comment {
        out.insert("comment", comment.clone());
    }
    out
}

/// Whether `document`'s BSON size is at most `limit`, walking at most about `limit` bytes of it.
fn fits_within(document: &Document, limit: usize) -> bool {
    enum Level<'a> {
        Fields(bson::document::Iter<'a>),
        Elements(std::slice::Iter<'a, Bson>),
    }
    let mut size = 5usize;
    let mut open = vec![Level::Fields(document.iter())];
    while let Some(level) = open.last_mut() {
        let (name_len, value) = match level {
            Level::Fields(fields) => match fields.next() {
                Some((name, value)) => (name.len(), value),
                None => {
                    open.pop();
                    continue;
                }
            },
            Level::Elements(elements) => match elements.next() {
                // Array keys are decimal indexes; a few bytes each.
                Some(value) => (4, value),
                None => {
                    open.pop();
                    continue;
                }
            },
        };
        size += 2 + name_len;
        size += match value {
            Bson::Document(inner) => {
                open.push(Level::Fields(inner.iter()));
                5
            }
            Bson::Array(inner) => {
                open.push(Level::Elements(inner.iter()));
                5
            }
            Bson::String(text) | Bson::JavaScriptCode(text) | Bson::Symbol(text) => 5 + text.len(),
            Bson::Binary(binary) => 5 + binary.bytes.len(),
            Bson::RegularExpression(regex) => 2 + regex.pattern.len() + regex.options.len(),
            Bson::JavaScriptCodeWithScope(code) => {
                open.push(Level::Fields(code.scope.iter()));
                14 + code.code.len()
            }
            Bson::Decimal128(_) => 16,
            Bson::ObjectId(_) => 12,
            Bson::Int32(_) => 4,
            Bson::Boolean(_) => 1,
            Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
            _ => 8,
        };
        if size > limit {
            return false;
        }
    }
    true
}

/// The leading fields (and array elements) of `document` that fit in about `limit` bytes.
fn prefix_copy(document: &Document, limit: usize) -> Document {
    let mut out = Document::new();
    let mut budget = limit;
    for (name, value) in document
        .iter()
        .filter(|(name, _)| name.as_str() != "comment")
    {
        if budget == 0 {
            break;
        }
        let copied = match value {
            Bson::Array(elements) => {
                let mut kept = Vec::new();
                for element in elements {
                    if budget == 0 {
                        break;
                    }
                    let element = shallow_prefix(element, budget);
                    budget = budget.saturating_sub(approximate_size(&element));
                    kept.push(element);
                }
                Bson::Array(kept)
            }
            other => {
                let value = shallow_prefix(other, budget);
                budget = budget.saturating_sub(approximate_size(&value));
                value
            }
        };
        budget = budget.saturating_sub(name.len() + 2);
        out.insert(name.clone(), copied);
    }
    out
}

fn shallow_prefix(value: &Bson, budget: usize) -> Bson {
    match value {
        Bson::Document(inner) if !fits_within(inner, budget) => {
            Bson::Document(prefix_copy(inner, budget))
        }
        other => other.clone(),
    }
}

fn approximate_size(value: &Bson) -> usize {
    match value {
        Bson::Document(inner) => tideway_base::bsonutil::encoded_size(inner),
        Bson::String(text) => text.len() + 5,
        _ => 16,
    }
}

/// mongod's namespace of a command's op: `<db>.<first field>` when the first field is a string
/// (`getMore`: its `collection`), `<db>.$cmd.aggregate` for a collection-less aggregation (and
/// `currentOp`, which runs one), else the database alone.
pub(crate) fn command_namespace(name: &str, db: &str, body: &Document) -> String {
    match (name, body.iter().next().map(|(_, value)| value)) {
        ("getMore", _) => match body.get("collection") {
            Some(Bson::String(coll)) => format!("{db}.{coll}"),
            _ => db.to_owned(),
        },
        ("currentOp", _) => format!("{db}.$cmd.aggregate"),
        (_, Some(Bson::String(coll))) if !coll.is_empty() => format!("{db}.{coll}"),
        ("aggregate", _) => format!("{db}.$cmd.aggregate"),
        _ => db.to_owned(),
    }
}

const SHARDS: usize = 16;

/// Every running op and every open connection.
#[derive(Debug)]
pub struct OpRegistry {
    next_opid: AtomicU32,
    shards: [Mutex<Shard>; SHARDS],
    connections: Mutex<BTreeMap<i32, Weak<ClientInfo>>>,
}

/// The ops whose opid falls in one shard, and the kill cells they gave back.
#[derive(Debug, Default)]
struct Shard {
    ops: HashMap<i32, Arc<Op>>,
    free_cells: Vec<&'static AtomicU64>,
}

impl Default for OpRegistry {
    fn default() -> Self {
        OpRegistry {
            next_opid: AtomicU32::new(1),
            shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
            connections: Mutex::new(BTreeMap::new()),
        }
    }
}

/// What dispatch knows of a command when it starts.
pub struct OpStart<'a> {
    pub client: &'a Arc<ClientInfo>,
    pub name: &'static str,
    pub db: &'a str,
    pub body: &'a Arc<Document>,
}

impl OpRegistry {
    fn shard(&self, opid: i32) -> MutexGuard<'_, Shard> {
        lock(&self.shards[opid.unsigned_abs() as usize % SHARDS])
    }

    /// Registers a starting command; it is unregistered when the guard drops.
    pub fn start(&self, start: OpStart<'_>) -> OpGuard<'_> {
        let raw = self.next_opid.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff;
        let opid = i32::try_from(raw).unwrap_or(i32::MAX).max(1);
        let ns = command_namespace(start.name, start.db, start.body);
        let command = Arc::clone(start.body);
        let mut shard = self.shard(opid);
        let op = Arc::new(Op {
            opid,
            client: start.client.clone(),
            ns,
            command,
            kind: OpKind::of_command(start.name),
            name: start.name,
            started: Instant::now(),
            kill: KillSwitch::acquire(&mut shard.free_cells),
            killed: tokio::sync::Notify::new(),
            metrics: Metrics::default(),
            plan_summary: Mutex::new(None),
            originating_command: std::sync::OnceLock::new(),
            flags: AtomicU32::new(0),
        });
        shard.ops.insert(opid, op.clone());
        drop(shard);
        OpGuard { registry: self, op }
    }

    /// Marks the op killed; whether it was running.
    pub fn kill(&self, opid: i32) -> bool {
        let op = self.shard(opid).ops.get(&opid).cloned();
        match op {
            Some(op) => {
                op.kill();
                true
            }
            None => false,
        }
    }

    /// Every running op, by opid.
    pub fn running(&self) -> Vec<Arc<Op>> {
        let mut ops: Vec<Arc<Op>> = self
            .shards
            .iter()
            .flat_map(|shard| lock(shard).ops.values().cloned().collect::<Vec<_>>())
            .collect();
        ops.sort_by_key(|op| op.opid);
        ops
    }

    /// Registers an open connection until the guard drops.
    pub(crate) fn connection_opened(&self, client: &Arc<ClientInfo>) -> ConnectionGuard<'_> {
        lock(&self.connections).insert(client.connection_id, Arc::downgrade(client));
        ConnectionGuard {
            registry: self,
            connection_id: client.connection_id,
        }
    }

    /// Every open connection, by connection id.
    pub fn connections(&self) -> Vec<Arc<ClientInfo>> {
        lock(&self.connections)
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// A registered op; unregisters it on drop.
pub struct OpGuard<'r> {
    registry: &'r OpRegistry,
    pub op: Arc<Op>,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        let mut shard = self.registry.shard(self.op.opid);
        shard.ops.remove(&self.op.opid);
        self.op.kill.release(&mut shard.free_cells);
    }
}

/// A registered connection; unregisters it on drop.
pub(crate) struct ConnectionGuard<'r> {
    registry: &'r OpRegistry,
    connection_id: i32,
}

impl Drop for ConnectionGuard<'_> {
    fn drop(&mut self) {
        lock(&self.registry.connections).remove(&self.connection_id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Arc<ClientInfo> {
        Arc::new(ClientInfo::new(7, "127.0.0.1:5000".into()))
    }

    #[test]
    fn ops_are_registered_while_their_guard_lives() {
        let registry = OpRegistry::default();
        let client = client();
        let body = Arc::new(doc! {"find": "c", "filter": {"a": 1}, "$db": "test"});
        let guard = registry.start(OpStart {
            client: &client,
            name: "find",
            db: "test",
            body: &body,
        });
        let running = registry.running();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].ns, "test.c");
        assert_eq!(running[0].kind.name(), "query");
        assert_eq!(running[0].command(), *body);
        let opid = guard.op.opid;
        drop(guard);
        assert!(registry.running().is_empty());
        assert!(!registry.kill(opid));
    }

    #[test]
    fn a_kill_trips_the_switch_and_a_stale_switch_stays_untripped() {
        let registry = OpRegistry::default();
        let client = client();
        let body = Arc::new(doc! {"ping": 1});
        let first = registry.start(OpStart {
            client: &client,
            name: "ping",
            db: "admin",
            body: &body,
        });
        let stale = first.op.kill_switch();
        let shard = first.op.opid as usize % SHARDS;
        drop(first);
        // The next op of the same shard reuses the cell; killing it must not trip the stale
        // switch.
        let second = loop {
            let next = registry.start(OpStart {
                client: &client,
                name: "ping",
                db: "admin",
                body: &body,
            });
            if next.op.opid as usize % SHARDS == shard {
                break next;
            }
        };
        assert!(second.op.kill.shares_cell_with(&stale));
        let deadline =
            tideway_base::limits::Deadline::none().with_kill_switch(second.op.kill_switch());
        assert!(deadline.check().is_ok());
        assert!(registry.kill(second.op.opid));
        assert!(second.op.kill_switch().is_killed());
        assert!(!stale.is_killed());
        // CPU-bound loops see the kill through their (copied) deadline.
        let error = deadline.check().unwrap_err();
        assert_eq!(error.code, tideway_base::error::ErrorCode::Interrupted);
        assert_eq!(error.errmsg, "operation was interrupted");
    }

    #[test]
    fn metrics_are_reported_only_once_set() {
        let registry = OpRegistry::default();
        let client = client();
        let body = Arc::new(doc! {"find": "c"});
        let guard = registry.start(OpStart {
            client: &client,
            name: "find",
            db: "test",
            body: &body,
        });
        assert_eq!(guard.op.metrics().count(), 0);
        guard.op.add_examined(0, 3);
        guard.op.add_examined(0, 2);
        guard.op.set_nreturned(4);
        let metrics: Vec<_> = guard.op.metrics().collect();
        assert_eq!(
            metrics,
            vec![("keysExamined", 0), ("docsExamined", 5), ("nreturned", 4)]
        );
    }

    #[test]
    fn namespaces_follow_mongod() {
        assert_eq!(command_namespace("find", "db", &doc! {"find": "c"}), "db.c");
        assert_eq!(
            command_namespace("ping", "admin", &doc! {"ping": 1}),
            "admin"
        );
        assert_eq!(
            command_namespace("aggregate", "db", &doc! {"aggregate": 1}),
            "db.$cmd.aggregate"
        );
        assert_eq!(
            command_namespace("getMore", "db", &doc! {"getMore": 5_i64, "collection": "c"}),
            "db.c"
        );
    }

    #[test]
    fn big_commands_are_truncated_with_their_comment() {
        let documents: Vec<Bson> = (0..10_000)
            .map(|i| Bson::Document(doc! {"_id": i, "pad": "x".repeat(20)}))
            .collect();
        let body = Arc::new(doc! {"insert": "c", "documents": documents, "comment": "mine"});
        let copy = bounded_command(&body, 1000);
        let truncated = copy.get_str("$truncated").unwrap();
        assert!(truncated.len() <= 1000);
        assert!(truncated.ends_with("..."));
        assert!(truncated.starts_with("{insert: \"c\", documents: [ { _id: 0"));
        assert_eq!(copy.get_str("comment").unwrap(), "mine");
        let small = doc! {"find": "c"};
        assert_eq!(bounded_command(&small, 1000), small);
        // A big command renders to exactly the limit, from a prefix of about twice that.
        let documents: Vec<Bson> = (0..10_000)
            .map(|i| Bson::Document(doc! {"_id": i, "pad": "x".repeat(20)}))
            .collect();
        let huge = doc! {"insert": "c", "documents": documents.clone(), "more": documents};
        let rendered = bounded_command(&huge, MAX_REPORTED_COMMAND_BYTES);
        assert_eq!(
            rendered.get_str("$truncated").unwrap().len(),
            MAX_REPORTED_COMMAND_BYTES
        );
    }

    #[test]
    fn current_op_time_is_iso_with_offset() {
        assert_eq!(
            current_op_time(bson::DateTime::from_millis(1_700_000_000_123)),
            "2023-11-14T22:13:20.123+00:00"
        );
        assert_eq!(
            current_op_time(bson::DateTime::from_millis(1_700_000_000_000)),
            "2023-11-14T22:13:20.000+00:00"
        );
    }
}
