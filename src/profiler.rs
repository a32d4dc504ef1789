//! The database profiler (mongod's `profile` levels): per-database settings (level 0/1/2 and an
//! optional filter; the server default level comes from `--profile`), the server-wide `slowms`
//! and `sampleRate` (which also govern the slow-query log), the decision whether a finished op is
//! profiled, the mongod-shaped entry, and writing it to `<db>.system.profile`.
//!
//! Invariants:
//! - Level 0 everywhere costs a command one atomic load ([`Profiler::settings_at_start`]).
//! - The level a command sees is the one in force when it started (mongod reads it then), so
//!   `{profile: 2}` itself is not profiled and `{profile: 0}` run at level 2 is.
//! - Entries are written through `Storage::write` as background writes (committed before the
//!   command replies, durable within about a second), never through the command layer, so
//!   writing one is never itself profiled: reads of `system.profile` are profiled like any read,
//!   and nothing loops. A failed write is logged and dropped: it never fails the user's command.
//! - `system.profile` is bounded: after each write, while the collection's data size exceeds
//!   [`PROFILE_COLLECTION_BYTES`] (mongod's 1 MiB), the oldest entries — the first of a
//!   collection scan, which is insertion order — are deleted (trims run one at a time, so two
//!   never delete the same entries). Entries carry an ObjectId `_id` made of the server clock's
//!   seconds and a process-wide counter.
//!
//! Must not: run commands, or touch storage for an op that is not profiled.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};

use crate::ops::Op;
use tideway_base::clock::Clock;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::Filter;
use tideway_storage::{
    Namespace, ScanRequest, ScanSource, Storage, StorageResult, TtlClass, WriteMeta, WriteOp,
    WriteOptions,
};

/// mongod's `system.profile` capped size.
pub(crate) const PROFILE_COLLECTION_BYTES: u64 = 1024 * 1024;
/// The profile collection's name in every database.
pub(crate) const PROFILE_COLLECTION: &str = "system.profile";

/// A database's profiling settings.
#[derive(Clone, Debug)]
pub struct DbSettings {
    pub level: i32,
    pub filter: Option<Arc<ProfileFilter>>,
}

/// A `profile` filter: a query over the profile entry.
#[derive(Debug)]
pub struct ProfileFilter {
    /// As the user gave it (reported back by `profile`).
    pub spec: Document,
    filter: Filter,
}

/// Fields a profile filter may name (mongod's `OpDebug::appendStaged`).
const FILTER_FIELDS: &[&str] = &[
    "ts",
    "client",
    "appName",
    "allUsers",
    "user",
    "op",
    "ns",
    "command",
    "originatingCommand",
    "nShards",
    "cursorid",
    "mongot",
    "exhaust",
    "keysExamined",
    "docsExamined",
    "hasSortStage",
    "usedDisk",
    "fromMultiPlanner",
    "fromPlanCache",
    "replanned",
    "replanReason",
    "nMatched",
    "nModified",
    "ninserted",
    "ndeleted",
    "nUpserted",
    "cursorExhausted",
    "keysInserted",
    "keysDeleted",
    "prepareReadConflicts",
    "writeConflicts",
    "temporarilyUnavailableErrors",
    "dataThroughputLastSecond",
    "dataThroughputAverage",
    "numYield",
    "nreturned",
    "queryHash",
    "planCacheKey",
    "queryFramework",
    "locks",
    "authorization",
    "flowControl",
    "writeConcern",
    "storage",
    "ok",
    "errMsg",
    "errName",
    "errCode",
    "responseLength",
    "protocol",
    "remoteOpWaitMillis",
    "millis",
    "durationMillis",
    "planningTimeMicros",
    "planSummary",
    "execStats",
    "operationMetrics",
];

impl ProfileFilter {
    /// Parses a filter; fields a profile entry does not have are 4910200, as mongod.
    pub fn parse(spec: &Document) -> CommandResult<ProfileFilter> {
        let filter = Filter::parse(spec)?;
        let mut unknown = BTreeSet::new();
        top_level_fields(spec, &mut unknown);
        unknown.retain(|field| !FILTER_FIELDS.contains(&field.as_str()));
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.into_iter().collect();
            return Err(CommandError::new(
                ErrorCode::Location4910200,
                format!(
                    "No such field (or fields) available for profile filter: {}",
                    names.join(", ")
                ),
            ));
        }
        Ok(ProfileFilter {
            spec: spec.clone(),
            filter,
        })
    }

    fn matches(&self, entry: &Document) -> bool {
        self.filter.matches(entry)
    }
}

/// The top-level fields a filter names (through `$and`/`$or`/`$nor`).
fn top_level_fields(filter: &Document, out: &mut BTreeSet<String>) {
    let mut pending = vec![filter];
    while let Some(filter) = pending.pop() {
        for (key, value) in filter {
            match (key.as_str(), value) {
                ("$and" | "$or" | "$nor", Bson::Array(clauses)) => {
                    pending.extend(clauses.iter().filter_map(Bson::as_document));
                }
                (operator, _) if operator.starts_with('$') => {}
                (path, _) => {
                    let first = path.split('.').next().unwrap_or(path);
                    out.insert(first.to_owned());
                }
            }
        }
    }
}

/// Every database's settings and the server-wide thresholds.
#[derive(Debug)]
pub struct Profiler {
    default_level: i32,
    slowms: AtomicI64,
    /// `f64` bits.
    sample_rate: AtomicU64,
    /// Whether any database (or the default) has a level above 0: the one load on the hot path.
    enabled: AtomicBool,
    settings: RwLock<HashMap<String, DbSettings>>,
    /// Held while a write trims a profile collection (one trim at a time).
    trimming: tokio::sync::Mutex<()>,
}

impl Profiler {
    pub fn new(default_level: i32, slowms: i64) -> Profiler {
        Profiler {
            default_level,
            slowms: AtomicI64::new(slowms),
            sample_rate: AtomicU64::new(1.0f64.to_bits()),
            enabled: AtomicBool::new(default_level > 0),
            settings: RwLock::new(HashMap::new()),
            trimming: tokio::sync::Mutex::new(()),
        }
    }

    /// Operations at least this slow are logged, and profiled at level 1.
    pub fn slowms(&self) -> u64 {
        u64::try_from(self.slowms.load(Ordering::Relaxed)).unwrap_or(0)
    }

    pub(crate) fn slowms_setting(&self) -> i64 {
        self.slowms.load(Ordering::Relaxed)
    }

    pub(crate) fn set_slowms(&self, slowms: i64) {
        self.slowms.store(slowms, Ordering::Relaxed);
    }

    pub(crate) fn sample_rate(&self) -> f64 {
        f64::from_bits(self.sample_rate.load(Ordering::Relaxed))
    }

    pub(crate) fn set_sample_rate(&self, rate: f64) {
        self.sample_rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    /// `db`'s settings (the server default if it has none of its own).
    pub fn settings(&self, db: &str) -> DbSettings {
        let settings = self
            .settings
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        settings.get(db).cloned().unwrap_or(DbSettings {
            level: self.default_level,
            filter: None,
        })
    }

    pub fn level(&self, db: &str) -> i32 {
        if !self.enabled.load(Ordering::Relaxed) {
            return 0;
        }
        self.settings(db).level
    }

    /// The settings a command starting now on `db` is profiled under; `None` at level 0.
    pub(crate) fn settings_at_start(&self, db: &str) -> Option<DbSettings> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.settings(db)).filter(|settings| settings.level > 0)
    }

    /// Replaces `db`'s settings.
    pub fn set(&self, db: &str, settings: DbSettings) {
        let mut all = self
            .settings
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.insert(db.to_owned(), settings);
        self.refresh_enabled(&all);
    }

    /// Forgets `db`'s settings (`dropDatabase`): it is back to the server default.
    pub fn clear(&self, db: &str) {
        let mut all = self
            .settings
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.remove(db);
        self.refresh_enabled(&all);
    }

    fn refresh_enabled(&self, all: &HashMap<String, DbSettings>) {
        let enabled = self.default_level > 0 || all.values().any(|settings| settings.level > 0);
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    fn sampled(&self) -> bool {
        let rate = self.sample_rate();
        rate >= 1.0 || (rate > 0.0 && random_unit() < rate)
    }
}

/// A uniform number in [0, 1) (splitmix64 over a process-wide counter; sampling needs no more).
fn random_unit() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A command that finished under a profiling level above 0.
pub struct Finished {
    pub settings: DbSettings,
    pub op: Arc<Op>,
    pub db: String,
    pub error: Option<CommandError>,
}

/// mongod's `appendNumber(long long)`: an int when it fits, else a long.
fn number(value: i64) -> Bson {
    i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32)
}

/// Profiles `finished` if its settings say so. Never fails: a write error is logged.
pub async fn finish(
    profiler: &Profiler,
    storage: &dyn Storage,
    clock: &dyn Clock,
    finished: Finished,
    reply: &tideway_wire::Reply,
) {
    let millis = i64::try_from(finished.op.started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let Finished {
        settings,
        op,
        db,
        error,
    } = finished;
    let unfiltered_level_one = settings.level == 1 && settings.filter.is_none();
    if unfiltered_level_one && millis < profiler.slowms_setting() {
        return;
    }
    let entry = entry(clock, &op, millis, reply, error.as_ref());
    let profile = match (settings.level, &settings.filter) {
        (level, _) if level >= 2 => true,
        (_, Some(filter)) => {
            let mut staged = entry.clone();
            staged.insert("durationMillis", number(millis));
            filter.matches(&staged)
        }
        _ => profiler.sampled(),
    };
    if !profile {
        return;
    }
    if let Err(error) = write_entry(profiler, storage, clock, &db, entry).await {
        tracing::warn!(%error, op = op.name, ns = %op.ns, "could not write a profile entry");
    }
}

/// The `system.profile` entry of `op`, in mongod's field order (`OpDebug::append`, then `ts`,
/// `client`, `appName`, `allUsers`, `user`).
pub fn entry(
    clock: &dyn Clock,
    op: &Op,
    millis: i64,
    reply: &tideway_wire::Reply,
    error: Option<&CommandError>,
) -> Document {
    use crate::ops::Metric;
    let mut out = doc! {
        "op": op.kind.name(),
        "ns": op.ns.as_str(),
        "command": op.command(),
    };
    if let Some(originating) = op.originating_command() {
        out.insert("originatingCommand", originating.clone());
    }
    let metric = |out: &mut Document, metric: Metric| {
        if let Some(value) = op.metric(metric) {
            out.insert(metric.field(), number(value));
        }
    };
    metric(&mut out, Metric::CursorId);
    metric(&mut out, Metric::KeysExamined);
    metric(&mut out, Metric::DocsExamined);
    if op.has_sort_stage() {
        out.insert("hasSortStage", true);
    }
    if op.used_disk() {
        out.insert("usedDisk", true);
    }
    for counter in [
        Metric::NMatched,
        Metric::NModified,
        Metric::NInserted,
        Metric::NDeleted,
        Metric::NUpserted,
    ] {
        metric(&mut out, counter);
    }
    if op.cursor_exhausted() {
        out.insert("cursorExhausted", true);
    }
    metric(&mut out, Metric::KeysInserted);
    metric(&mut out, Metric::KeysDeleted);
    out.insert("numYield", 0);
    metric(&mut out, Metric::NReturned);
    out.insert("locks", Document::new());
    out.insert("flowControl", Document::new());
    if let Some(error) = error {
        out.insert("ok", 0.0);
        out.insert("errMsg", error.errmsg.as_str());
        out.insert("errName", error.code.name());
        out.insert("errCode", error.code.code());
    }
    // The OP_MSG body as sent: flag bits, section kind, document.
    let reply_bytes = reply.encoded_len();
    out.insert("responseLength", number(reply_bytes as i64 + 5));
    out.insert("protocol", "op_msg");
    out.insert("millis", number(millis));
    out.insert("planningTimeMicros", 0);
    if let Some(summary) = op.plan_summary() {
        out.insert("planSummary", summary);
    }
    out.insert("ts", clock.now());
    out.insert("client", op.client.host());
    if let Some(app_name) = op.client.app_name() {
        out.insert("appName", app_name);
    }
    out.insert("allUsers", Bson::Array(Vec::new()));
    out.insert("user", "");
    out
}

/// An `_id` that sorts in insertion order: the server clock's seconds, then a process-wide
/// counter (seeded from the wall clock, so it keeps increasing across restarts).
fn entry_id(clock: &dyn Clock) -> ObjectId {
    static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    let counter = NEXT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        AtomicU64::new(nanos)
    });
    let seconds = u32::try_from(clock.now_ms().max(0) / 1000).unwrap_or(u32::MAX);
    let sequence = counter.fetch_add(1, Ordering::Relaxed);
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&seconds.to_be_bytes());
    bytes[4..].copy_from_slice(&sequence.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// Writes `entry` to `<db>.system.profile`, then keeps the collection within its bound.
async fn write_entry(
    profiler: &Profiler,
    storage: &dyn Storage,
    clock: &dyn Clock,
    db: &str,
    entry: Document,
) -> StorageResult<()> {
    let ns = Namespace::new(db, PROFILE_COLLECTION);
    let mut document = doc! {"_id": entry_id(clock)};
    document.extend(entry);
    let op = WriteOp::Insert {
        doc: document,
        meta: WriteMeta {
            last_write_ms: clock.now_ms(),
            ttl: TtlClass::Default,
        },
        supersede: None,
    };
    let options = WriteOptions {
        ordered: true,
        force_durable: false,
        background: true,
    };
    for result in storage.write(&ns, vec![op], options).await? {
        result?;
    }
    trim(profiler, storage, &ns).await
}

/// Deletes the oldest entries while the collection holds more than its bound.
async fn trim(profiler: &Profiler, storage: &dyn Storage, ns: &Namespace) -> StorageResult<()> {
    let _trimming = profiler.trimming.lock().await;
    let size = storage.stats(ns).await?.data_size;
    let Some(mut excess) = size
        .checked_sub(PROFILE_COLLECTION_BYTES)
        .filter(|e| *e > 0)
    else {
        return Ok(());
    };
    let options = WriteOptions {
        ordered: false,
        force_durable: false,
        background: true,
    };
    let mut resume_after = None;
    while excess > 0 {
        let page = storage
            .scan(
                ns,
                ScanRequest {
                    source: ScanSource::Collection,
                    resume_after: resume_after.take(),
                    reverse: false,
                    limit: 64,
                    hide: None,
                    key_filter: None,
                    covered: false,
                },
            )
            .await?;
        let mut deletes = Vec::new();
        for record in &page.records {
            if excess == 0 {
                break;
            }
            excess =
                excess.saturating_sub(tideway_base::bsonutil::encoded_size(&record.doc) as u64);
            deletes.push(WriteOp::Delete {
                id: tideway_exec::executor::document_id(&record.doc),
                expected_rev: None,
            });
        }
        if !deletes.is_empty() {
            // A concurrent drop or delete of an entry is fine: it is gone either way.
            let _ = storage.write(ns, deletes, options).await?;
        }
        match page.resume {
            Some(resume) if excess > 0 => resume_after = Some(resume),
            _ => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_may_name_only_profile_fields() {
        assert!(ProfileFilter::parse(&doc! {"millis": {"$gt": 5}, "op": "query"}).is_ok());
        assert!(ProfileFilter::parse(&doc! {"$or": [{"command.find": "c"}, {"ns": "x"}]}).is_ok());
        let error = ProfileFilter::parse(&doc! {"$or": [{"zeta": 1}, {"alpha.b": 1}]})
            .expect_err("unknown fields");
        assert_eq!(error.code, ErrorCode::Location4910200);
        assert_eq!(
            error.errmsg,
            "No such field (or fields) available for profile filter: alpha, zeta"
        );
    }

    #[test]
    fn level_zero_everywhere_is_one_load() {
        let profiler = Profiler::new(0, 100);
        assert!(profiler.settings_at_start("db").is_none());
        profiler.set(
            "db",
            DbSettings {
                level: 2,
                filter: None,
            },
        );
        assert_eq!(profiler.settings_at_start("db").map(|s| s.level), Some(2));
        assert!(profiler.settings_at_start("other").is_none());
        profiler.clear("db");
        assert!(!profiler.enabled.load(Ordering::Relaxed));
    }

    #[test]
    fn numbers_are_ints_when_they_fit() {
        assert_eq!(number(5), Bson::Int32(5));
        assert_eq!(number(1 << 40), Bson::Int64(1 << 40));
    }

    #[test]
    fn random_unit_is_in_range() {
        for _ in 0..1000 {
            let x = random_unit();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
