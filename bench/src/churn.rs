//! `ttl_churn`: many documents expiring together while clients keep reading and writing.
//!
//! One run, per server (and per `--clients` count and round):
//!
//! 1. drop `churn`, create the MongoDB TTL index `{expireAt: 1}` with `expireAfterSeconds: 0`,
//!    and load `--churn-docs` documents that all carry the same `expireAt` date T = (time the
//!    load starts) + `--expire-in-secs`;
//! 2. start the foreground: `--clients` tasks doing `read_update` (50% find by `_id`, 50%
//!    `$inc` update) on the `preloaded` collection, each operation's start time and latency
//!    kept, until a few seconds after the churn documents are all deleted;
//! 3. at T + 50 ms and T + 500 ms count the visible churn documents (`countDocuments({})`,
//!    an aggregation, and `estimatedDocumentCount`) — after expiry they must be 0;
//! 4. every `--poll-ms` (100) read `serverStatus().metrics.ttl.deletedDocuments`: its value
//!    before T is the baseline, and T + the time at which it first rises / reaches baseline +
//!    `--churn-docs` are the first deletion and "all deleted";
//! 5. report per time window — *before* (foreground start → T), *deleting* (T → all deleted,
//!    at most T + 15 s), *after* (`--after-secs` from there) — the foreground ops/s and
//!    latency, and check the targets: visible count 0, all deleted ≤ 5 s after expiry,
//!    ≥ 100,000 deletions/s, foreground throughput drop < 15% while deleting.
//!
//! Every wait is bounded: the run ends at the latest at T + 60 s plus one operation timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bson::{doc, Bson, Document};
use mongodb::options::IndexOptions;
use mongodb::{Collection, IndexModel};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::MissedTickBehavior;

use crate::report::{print_errors, thousands, Column, Output, Table};
use crate::rng::SplitMix64;
use crate::runner::{record_latency, ErrorLog, RunStats};
use crate::target::Target;
use crate::workload::{ClientOp, OpError, OpParams, Workload, PRELOADED_COLLECTION};
use crate::{dataset, Settings};

/// Collection of the expiring documents (dropped at the start of every run).
pub const CHURN_COLLECTION: &str = "churn";

/// The deleting window ends when all churn documents are deleted, or this long after expiry.
const DELETING_WINDOW_MAX: Duration = Duration::from_secs(15);
/// Waiting for all churn documents to be deleted stops this long after expiry.
const ALL_DELETED_WAIT: Duration = Duration::from_secs(60);
/// Loading should end at least this long before expiry, to leave a "before" window.
const MIN_BEFORE_WINDOW: Duration = Duration::from_secs(5);
/// When the visible churn documents are counted, after expiry.
const VISIBLE_CHECKS: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(500)];
/// The foreground timeline: slices of this length, starting this long before expiry.
const TIMELINE_SLICE: Duration = Duration::from_millis(250);
const TIMELINE_LEAD: Duration = Duration::from_secs(1);
/// Longest wait for one `serverStatus` poll.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// Target: all deleted within this many seconds of expiry.
const TARGET_ALL_DELETED_SECS: f64 = 5.0;
/// Target: sustained deletions per second.
const TARGET_DELETIONS_PER_SEC: f64 = 100_000.0;
/// Target: foreground throughput drop while deleting, as a fraction of the "before" ops/s.
const TARGET_MAX_DROP: f64 = 0.15;

/// The `ttl_churn` options.
#[derive(Clone, Copy, Debug)]
pub struct ChurnSettings {
    /// Documents that expire together.
    pub docs: u64,
    /// From the start of loading to their expiry.
    pub expire_in: Duration,
    /// Length of the "after" window.
    pub after: Duration,
    /// `serverStatus` poll interval.
    pub poll: Duration,
    /// Polls ask for the whole `serverStatus`, with the per-collection `ttl` section.
    pub poll_ttl_section: bool,
    /// Documents in the `preloaded` collection the foreground reads and updates.
    pub preloaded_docs: u64,
}

/// Runs the workload against every server, for each `--clients` count and round (servers
/// interleaved); setup failures are added to `problems` and skip that run.
pub async fn run(
    targets: &[Target],
    churn: ChurnSettings,
    settings: &Settings,
    problems: &mut Vec<String>,
) {
    let output = settings.output;
    output.text("");
    output.text(&format!(
        "ttl_churn: {} docs (~{} B) with one expireAt = load start + {} s (TTL index \
         expireAfterSeconds 0) while the foreground runs read_update on {} ({} docs); \
         serverStatus{} polled every {} ms",
        thousands(churn.docs as f64),
        settings.doc_bytes,
        churn.expire_in.as_secs_f64(),
        PRELOADED_COLLECTION,
        churn.preloaded_docs,
        if churn.poll_ttl_section {
            " (with its ttl section)"
        } else {
            " (without its ttl section)"
        },
        churn.poll.as_millis()
    ));
    let mut preloaded = vec![false; targets.len()];
    for (index, target) in targets.iter().enumerate() {
        eprintln!(
            "preparing {}.{} on {} ({} docs)",
            target.database_name(),
            PRELOADED_COLLECTION,
            target.label,
            churn.preloaded_docs
        );
        let collection = target.collection(PRELOADED_COLLECTION);
        match dataset::ensure_preloaded(
            &collection,
            churn.preloaded_docs,
            settings.doc_bytes,
            settings.reload,
            settings.seed,
        )
        .await
        {
            Ok(false) => {
                eprintln!("  reusing the existing {} documents", churn.preloaded_docs);
                preloaded[index] = true;
            }
            Ok(true) => preloaded[index] = true,
            Err(error) => problems.push(format!(
                "preloading {} failed, its ttl_churn runs were skipped: {}",
                target.label, error.message
            )),
        }
    }
    for &clients in &settings.clients {
        for round in 0..settings.rounds {
            for (index, target) in targets.iter().enumerate() {
                if !preloaded[index] {
                    continue;
                }
                eprintln!(
                    "running ttl_churn clients={clients} round={} on {}",
                    round + 1,
                    target.label
                );
                match run_one(target, churn, settings, clients, round).await {
                    Ok(result) => result.print(target, churn, settings, clients, round, output),
                    Err(message) => {
                        problems.push(format!("{}: ttl_churn: {message}", target.label))
                    }
                }
            }
        }
    }
}

/// One foreground operation: start (µs after the foreground started) and latency (µs).
#[derive(Clone, Copy, Debug)]
struct Sample {
    start_us: u32,
    latency_us: u32,
}

/// What one foreground client saw.
struct ClientTrace {
    samples: Vec<Sample>,
    /// Start times (µs after the foreground started) of failed operations.
    error_starts: Vec<u32>,
    errors: ErrorLog,
}

fn micros_since(origin: Instant, at: Instant) -> u32 {
    u32::try_from(at.saturating_duration_since(origin).as_micros()).unwrap_or(u32::MAX)
}

async fn foreground_client(
    mut op: ClientOp,
    origin: Instant,
    stop: Arc<AtomicBool>,
    op_timeout: Duration,
) -> ClientTrace {
    let mut trace = ClientTrace {
        samples: Vec::with_capacity(1 << 16),
        error_starts: Vec::new(),
        errors: ErrorLog::default(),
    };
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let outcome = tokio::time::timeout(op_timeout, op.execute()).await;
        let start_us = micros_since(origin, began);
        let error = match outcome {
            Ok(Ok(_)) => {
                let latency = began.elapsed().as_micros();
                trace.samples.push(Sample {
                    start_us,
                    latency_us: u32::try_from(latency).unwrap_or(u32::MAX),
                });
                continue;
            }
            Ok(Err(error)) => error,
            Err(_) => OpError::new(
                "operation timed out",
                format!("no reply within {op_timeout:?}"),
            ),
        };
        trace.error_starts.push(start_us);
        trace.errors.record(error);
    }
    trace
}

/// One `serverStatus` poll.
#[derive(Clone, Debug)]
struct Poll {
    sent: Instant,
    received: Instant,
    /// `metrics.ttl.deletedDocuments`, if the reply had it.
    deleted: Option<i64>,
    /// `ttl.<ns>.expiredPending` and `.oldestExpiredAgeMillis` (tideway only).
    pending: Option<i64>,
    oldest_age_ms: Option<i64>,
}

fn as_i64(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        Bson::Double(v) if v.is_finite() => Some(*v as i64),
        _ => None,
    }
}

/// `metrics.ttl.deletedDocuments` of a `serverStatus` reply.
pub(crate) fn deleted_documents(status: &Document) -> Option<i64> {
    let ttl = status
        .get_document("metrics")
        .ok()?
        .get_document("ttl")
        .ok()?;
    as_i64(ttl.get("deletedDocuments")?)
}

/// `ttl.<namespace>` of a `serverStatus` reply (tideway's per-collection TTL section).
pub(crate) fn ttl_section<'a>(status: &'a Document, namespace: &str) -> Option<&'a Document> {
    status
        .get_document("ttl")
        .ok()?
        .get_document(namespace)
        .ok()
}

/// `serverStatus`, whole or (`with_ttl_section` false) without its per-collection `ttl`
/// section, which the polls do not need and which tideway computes from the expired backlog.
/// With several hosts (nodes on one database, each reaping the collections it holds the lease
/// of) `metrics.ttl.deletedDocuments` is the sum of every host's, each as it last answered
/// (`member_deleted`, one per host).
async fn server_status(
    target: &Target,
    with_ttl_section: bool,
    member_deleted: &mut [i64],
) -> Result<Document, OpError> {
    let mut command = doc! {"serverStatus": 1};
    if !with_ttl_section {
        command.insert("ttl", 0);
    }
    let mut reply = run_status(target.admin(), command).await?;
    let mut total = None;
    for (admin, last_known) in target.member_admins().zip(member_deleted.iter_mut()) {
        // A host that does not answer (killed) counts what it last reported.
        if let Ok(member) = run_status(admin, doc! {"serverStatus": 1, "ttl": 0}).await {
            *last_known = deleted_documents(&member).unwrap_or(*last_known);
        }
        *total.get_or_insert(0) += *last_known;
    }
    if let (Some(total), Ok(metrics)) = (total, reply.get_document_mut("metrics")) {
        if let Ok(ttl) = metrics.get_document_mut("ttl") {
            ttl.insert("deletedDocuments", total);
        }
    }
    Ok(reply)
}

async fn run_status(admin: mongodb::Database, command: Document) -> Result<Document, OpError> {
    match tokio::time::timeout(POLL_TIMEOUT, admin.run_command(command)).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(OpError::new(
            "serverStatus timed out",
            format!("no reply within {POLL_TIMEOUT:?}"),
        )),
    }
}

/// A count of the visible churn documents, some time after expiry.
#[derive(Clone, Debug)]
struct VisibleCheck {
    /// Planned delay after expiry.
    planned: Duration,
    /// Actual delay after expiry when the `countDocuments` was sent.
    sent_after: Duration,
    count_documents: Result<u64, String>,
    count_documents_ms: f64,
    estimated: Result<u64, String>,
}

async fn visible_check(
    collection: Collection<Document>,
    expiry: Instant,
    planned: Duration,
    op_timeout: Duration,
) -> VisibleCheck {
    tokio::time::sleep_until((expiry + planned).into()).await;
    let sent = Instant::now();
    let count_documents =
        match tokio::time::timeout(op_timeout, collection.count_documents(doc! {})).await {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(error)) => Err(OpError::from(error).message),
            Err(_) => Err(format!("no reply within {op_timeout:?}")),
        };
    let count_documents_ms = sent.elapsed().as_secs_f64() * 1000.0;
    let estimated =
        match tokio::time::timeout(op_timeout, collection.estimated_document_count()).await {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(error)) => Err(OpError::from(error).message),
            Err(_) => Err(format!("no reply within {op_timeout:?}")),
        };
    VisibleCheck {
        planned,
        sent_after: sent.saturating_duration_since(expiry),
        count_documents,
        count_documents_ms,
        estimated,
    }
}

/// Foreground figures over one time window.
#[derive(Clone, Debug)]
struct WindowFigures {
    name: &'static str,
    /// Window start and end, seconds relative to expiry.
    from_s: f64,
    to_s: f64,
    ops: u64,
    ops_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    errors: u64,
}

fn window_figures(
    name: &'static str,
    traces: &[ClientTrace],
    origin: Instant,
    expiry: Instant,
    from: Instant,
    to: Instant,
) -> WindowFigures {
    let from = from.max(origin);
    let to = to.max(from);
    let (from_us, to_us) = (micros_since(origin, from), micros_since(origin, to));
    let mut stats = RunStats::empty();
    let mut errors = 0;
    for trace in traces {
        for sample in &trace.samples {
            if (from_us..to_us).contains(&sample.start_us) {
                stats.ops += 1;
                record_latency(&mut stats.latency, u64::from(sample.latency_us));
            }
        }
        errors += trace
            .error_starts
            .iter()
            .filter(|start| (from_us..to_us).contains(start))
            .count() as u64;
    }
    stats.measured = to.duration_since(from);
    let relative = |at: Instant| {
        if at >= expiry {
            at.duration_since(expiry).as_secs_f64()
        } else {
            -expiry.duration_since(at).as_secs_f64()
        }
    };
    WindowFigures {
        name,
        from_s: relative(from),
        to_s: relative(to),
        ops: stats.ops,
        ops_per_sec: stats.ops_per_sec(),
        p50_us: stats.latency_us(0.5),
        p99_us: stats.latency_us(0.99),
        p999_us: stats.latency_us(0.999),
        max_us: stats.max_latency_us(),
        errors,
    }
}

/// Everything one run measured.
struct ChurnResult {
    /// Seconds the load took, and how long before expiry it ended (negative: after).
    load_secs: f64,
    load_margin_secs: f64,
    /// estimatedDocumentCount right after loading.
    loaded_count: Result<u64, String>,
    checks: Vec<VisibleCheck>,
    /// The metric was seen at all.
    metric_available: bool,
    baseline: Option<i64>,
    /// Deletions seen by the last poll, counted from the baseline.
    deleted_seen: i64,
    first_deletion_s: Option<f64>,
    all_deleted_s: Option<f64>,
    /// Sustained rate, the two polls it spans (seconds after expiry), and whether it is only a
    /// lower bound (all deletions seen by a single poll).
    sustained: Option<(f64, f64, f64, bool)>,
    max_pending: Option<i64>,
    max_oldest_age_ms: Option<i64>,
    polls: usize,
    poll_rtt_ms: (u64, u64, u64),
    poll_errors: ErrorLog,
    windows: Vec<WindowFigures>,
    /// Foreground ops/s per [`TIMELINE_SLICE`] from 1 s before expiry to the end of the
    /// deleting window.
    timeline: Vec<f64>,
    deleting_finished: bool,
    foreground_errors: RunStats,
    final_ttl_section: Option<Document>,
}

async fn run_one(
    target: &Target,
    churn: ChurnSettings,
    settings: &Settings,
    clients: usize,
    round: usize,
) -> Result<ChurnResult, String> {
    let collection = target.collection(CHURN_COLLECTION);
    dataset::drop(&collection)
        .await
        .map_err(|error| format!("dropping {CHURN_COLLECTION} failed: {}", error.message))?;
    let index = IndexModel::builder()
        .keys(doc! {"expireAt": 1})
        .options(IndexOptions::builder().expire_after(Duration::ZERO).build())
        .build();
    collection.create_index(index).await.map_err(|error| {
        format!(
            "creating the TTL index failed: {}",
            OpError::from(error).message
        )
    })?;
    let mut poll_errors = ErrorLog::default();
    let mut member_deleted = vec![0; target.member_admins().count()];
    // Deletions so far, in case no poll happens before expiry (a load that ends late).
    let pre_load_deleted = match server_status(target, false, &mut member_deleted).await {
        Ok(status) => deleted_documents(&status),
        Err(error) => {
            poll_errors.record(error);
            None
        }
    };

    // Expiry instant T, as a Date (server clock, same machine) and as an Instant.
    let load_start = Instant::now();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0);
    let expire_ms = now_ms + churn.expire_in.as_millis() as i64;
    let expiry = load_start + churn.expire_in;
    let extra = doc! {"expireAt": bson::DateTime::from_millis(expire_ms)};
    eprintln!(
        "  loading {} churn docs expiring at {} (in {} s)",
        churn.docs,
        bson::DateTime::from_millis(expire_ms),
        churn.expire_in.as_secs_f64()
    );
    let seed = settings.seed.wrapping_add(round as u64);
    dataset::grow_with(&collection, 0, churn.docs, settings.doc_bytes, seed, &extra)
        .await
        .map_err(|error| format!("loading {CHURN_COLLECTION} failed: {}", error.message))?;
    let loaded = Instant::now();
    let load_secs = loaded.duration_since(load_start).as_secs_f64();
    let load_margin_secs = if loaded <= expiry {
        expiry.duration_since(loaded).as_secs_f64()
    } else {
        -loaded.duration_since(expiry).as_secs_f64()
    };
    if loaded + MIN_BEFORE_WINDOW > expiry {
        eprintln!(
            "  warning: loading ended {load_margin_secs:.1} s before expiry (wanted ≥ {} s): the \
             'before' window is short; raise --expire-in-secs",
            MIN_BEFORE_WINDOW.as_secs()
        );
    }
    let loaded_count = match tokio::time::timeout(
        settings.op_timeout,
        collection.estimated_document_count(),
    )
    .await
    {
        Ok(Ok(count)) => Ok(count),
        Ok(Err(error)) => Err(OpError::from(error).message),
        Err(_) => Err("timed out".to_string()),
    };

    // Foreground.
    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    let params = OpParams {
        doc_bytes: settings.doc_bytes,
        batch_size: 1,
        id_bound: churn.preloaded_docs,
    };
    let preloaded = target.collection(PRELOADED_COLLECTION);
    let mut foreground = JoinSet::new();
    for task in 0..clients {
        let rng = SplitMix64::new(seed, task as u64);
        let op = ClientOp::new(Workload::ReadUpdate, preloaded.clone(), params, rng);
        foreground.spawn(foreground_client(
            op,
            origin,
            Arc::clone(&stop),
            settings.op_timeout,
        ));
    }
    let checks: Vec<JoinHandle<VisibleCheck>> = VISIBLE_CHECKS
        .iter()
        .map(|&planned| {
            tokio::spawn(visible_check(
                collection.clone(),
                expiry,
                planned,
                settings.op_timeout,
            ))
        })
        .collect();

    // Poll serverStatus from the foreground's start until all churn documents are deleted (or
    // T + 60 s) and the foreground has stopped.
    let namespace = format!("{}.{CHURN_COLLECTION}", target.database_name());
    let mut polls: Vec<Poll> = Vec::new();
    let mut baseline = pre_load_deleted;
    let mut first_deletion: Option<Instant> = None;
    let mut all_deleted: Option<Instant> = None;
    let mut deleting_end: Option<Instant> = None;
    let mut stopped = false;
    let give_up = expiry + ALL_DELETED_WAIT;
    let mut ticker = tokio::time::interval(churn.poll);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let now = Instant::now();
        if deleting_end.is_none() && now >= expiry + DELETING_WINDOW_MAX {
            deleting_end = Some(expiry + DELETING_WINDOW_MAX);
        }
        if !stopped && deleting_end.is_some_and(|end| now >= end + churn.after) {
            stop.store(true, Ordering::Relaxed);
            stopped = true;
        }
        let waiting_for_deletions = all_deleted.is_none() && now < give_up;
        if stopped && !waiting_for_deletions {
            break;
        }
        if !waiting_for_deletions {
            continue;
        }
        let sent = Instant::now();
        let status = match server_status(target, churn.poll_ttl_section, &mut member_deleted).await
        {
            Ok(status) => status,
            Err(error) => {
                poll_errors.record(error);
                continue;
            }
        };
        let received = Instant::now();
        let ttl = ttl_section(&status, &namespace);
        let poll = Poll {
            sent,
            received,
            deleted: deleted_documents(&status),
            pending: ttl.and_then(|section| section.get("expiredPending").and_then(as_i64)),
            oldest_age_ms: ttl
                .and_then(|section| section.get("oldestExpiredAgeMillis").and_then(as_i64)),
        };
        if let Some(deleted) = poll.deleted {
            if sent < expiry {
                // Nothing of ours can have been deleted before expiry.
                baseline = Some(deleted);
            } else if let Some(base) = baseline {
                if deleted > base && first_deletion.is_none() {
                    first_deletion = Some(received);
                }
                if deleted - base >= churn.docs as i64 && all_deleted.is_none() {
                    all_deleted = Some(received);
                    if deleting_end.is_none() {
                        deleting_end = Some(received.min(expiry + DELETING_WINDOW_MAX));
                    }
                }
            } else {
                baseline = Some(deleted);
            }
        }
        polls.push(poll);
    }

    let mut traces = Vec::with_capacity(clients);
    let mut foreground_errors = RunStats::empty();
    while let Some(joined) = foreground.join_next().await {
        match joined {
            Ok(trace) => {
                foreground_errors.errors.merge(trace.errors.clone());
                traces.push(trace);
            }
            Err(join_error) => foreground_errors
                .errors
                .record(OpError::new("client task failed", join_error.to_string())),
        }
    }
    let mut visible = Vec::new();
    for check in checks {
        match check.await {
            Ok(result) => visible.push(result),
            Err(join_error) => {
                poll_errors.record(OpError::new("count task failed", join_error.to_string()))
            }
        }
    }
    let final_ttl_section = match server_status(target, true, &mut member_deleted).await {
        Ok(status) => ttl_section(&status, &namespace).cloned(),
        Err(error) => {
            poll_errors.record(error);
            None
        }
    };

    // Windows (the deleting window always ends: at all-deleted, or T + 15 s).
    let deleting_end = deleting_end.unwrap_or(expiry + DELETING_WINDOW_MAX);
    let mut windows = vec![
        window_figures("before", &traces, origin, expiry, origin, expiry),
        window_figures("deleting", &traces, origin, expiry, expiry, deleting_end),
    ];
    if !churn.after.is_zero() {
        windows.push(window_figures(
            "after",
            &traces,
            origin,
            expiry,
            deleting_end,
            deleting_end + churn.after,
        ));
    }

    // Deletion figures.
    let seconds_after = |at: Instant| at.saturating_duration_since(expiry).as_secs_f64();
    let after_expiry: Vec<&Poll> = polls
        .iter()
        .filter(|poll| poll.sent >= expiry && poll.deleted.is_some())
        .collect();
    let deleted_seen = match (baseline, after_expiry.last().and_then(|poll| poll.deleted)) {
        (Some(base), Some(last)) => last - base,
        _ => 0,
    };
    let sustained = sustained_rate(baseline, &after_expiry, expiry);
    let mut rtts: Vec<u64> = polls
        .iter()
        .map(|poll| poll.received.duration_since(poll.sent).as_millis() as u64)
        .collect();
    rtts.sort_unstable();
    let poll_rtt_ms = if rtts.is_empty() {
        (0, 0, 0)
    } else {
        (
            rtts[rtts.len() / 2],
            rtts[rtts.len() * 99 / 100],
            rtts[rtts.len() - 1],
        )
    };
    Ok(ChurnResult {
        load_secs,
        load_margin_secs,
        loaded_count,
        checks: visible,
        metric_available: polls.iter().any(|poll| poll.deleted.is_some()),
        baseline,
        deleted_seen,
        first_deletion_s: first_deletion.map(seconds_after),
        all_deleted_s: all_deleted.map(seconds_after),
        sustained,
        max_pending: polls.iter().filter_map(|poll| poll.pending).max(),
        max_oldest_age_ms: polls.iter().filter_map(|poll| poll.oldest_age_ms).max(),
        polls: polls.len(),
        poll_rtt_ms,
        poll_errors,
        timeline: (0..)
            .map(|slice| expiry - TIMELINE_LEAD + TIMELINE_SLICE * slice)
            .take_while(|from| *from < deleting_end)
            .map(|from| {
                window_figures("", &traces, origin, expiry, from, from + TIMELINE_SLICE).ops_per_sec
            })
            .collect(),
        windows,
        deleting_finished: all_deleted.is_some_and(|at| at <= expiry + DELETING_WINDOW_MAX),
        foreground_errors,
        final_ttl_section,
    })
}

/// Deletions per second between the first and the last poll (after expiry) whose count rose:
/// `(rate, from_s, to_s, lower_bound)`. With a single rising poll, all its deletions over the
/// time since the poll before it, a lower bound.
fn sustained_rate(
    baseline: Option<i64>,
    polls: &[&Poll],
    expiry: Instant,
) -> Option<(f64, f64, f64, bool)> {
    let base = baseline?;
    let mut previous = (expiry, base);
    let mut rises: Vec<(Instant, i64, Instant, i64)> = Vec::new();
    for poll in polls {
        let deleted = poll.deleted?;
        if deleted > previous.1 {
            rises.push((previous.0, previous.1, poll.received, deleted));
        }
        previous = (poll.received, deleted);
    }
    let seconds_after = |at: Instant| at.saturating_duration_since(expiry).as_secs_f64();
    match rises.as_slice() {
        [] => None,
        [(before, before_count, at, count)] => {
            let secs = at.duration_since(*before).as_secs_f64();
            (secs > 0.0).then(|| {
                (
                    (count - before_count) as f64 / secs,
                    seconds_after(*before),
                    seconds_after(*at),
                    true,
                )
            })
        }
        [(_, _, first_at, first_count), .., (_, _, last_at, last_count)] => {
            let secs = last_at.duration_since(*first_at).as_secs_f64();
            (secs > 0.0).then(|| {
                (
                    (last_count - first_count) as f64 / secs,
                    seconds_after(*first_at),
                    seconds_after(*last_at),
                    false,
                )
            })
        }
    }
}

/// "met" / "NOT met" / "unknown".
fn verdict(outcome: Option<bool>) -> &'static str {
    match outcome {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "unknown",
    }
}

fn count_text(result: &Result<u64, String>) -> String {
    match result {
        Ok(count) => thousands(*count as f64),
        Err(message) => format!("error ({message})"),
    }
}

impl ChurnResult {
    fn drop_fraction(&self) -> Option<f64> {
        let before = self.windows.iter().find(|w| w.name == "before")?;
        let deleting = self.windows.iter().find(|w| w.name == "deleting")?;
        (before.ops_per_sec > 0.0 && deleting.ops > 0)
            .then(|| (before.ops_per_sec - deleting.ops_per_sec) / before.ops_per_sec)
    }

    fn print(
        &self,
        target: &Target,
        churn: ChurnSettings,
        settings: &Settings,
        clients: usize,
        round: usize,
        output: Output,
    ) {
        let first_check = self.checks.first();
        let visible_zero = first_check
            .and_then(|check| check.count_documents.as_ref().ok().map(|count| *count == 0));
        let all_deleted_met = if self.metric_available {
            Some(
                self.all_deleted_s
                    .is_some_and(|secs| secs <= TARGET_ALL_DELETED_SECS),
            )
        } else {
            None
        };
        let rate_met = self
            .sustained
            .map(|(rate, ..)| rate >= TARGET_DELETIONS_PER_SEC);
        let drop = self.drop_fraction();
        let drop_met = drop.map(|fraction| fraction < TARGET_MAX_DROP);

        output.text("");
        output.text(&format!(
            "ttl_churn on {} ({}), clients={clients}, round {}:",
            target.label,
            target.display_uri,
            round + 1
        ));
        output.text(&format!(
            "  loaded {} docs in {:.1} s, {} (estimatedDocumentCount after loading: {})",
            thousands(churn.docs as f64),
            self.load_secs,
            if self.load_margin_secs >= MIN_BEFORE_WINDOW.as_secs_f64() {
                format!("{:.1} s before expiry", self.load_margin_secs)
            } else if self.load_margin_secs >= 0.0 {
                format!(
                    "only {:.1} s before expiry: the 'before' window is short",
                    self.load_margin_secs
                )
            } else {
                format!(
                    "{:.1} s AFTER expiry: no 'before' window; raise --expire-in-secs",
                    -self.load_margin_secs
                )
            },
            count_text(&self.loaded_count)
        ));
        for check in &self.checks {
            output.text(&format!(
                "  visible at T+{} ms (sent at T+{:.0} ms): countDocuments {} ({:.0} ms), \
                 estimatedDocumentCount {}",
                check.planned.as_millis(),
                check.sent_after.as_secs_f64() * 1000.0,
                count_text(&check.count_documents),
                check.count_documents_ms,
                count_text(&check.estimated)
            ));
        }
        if self.metric_available {
            output.text(&format!(
                "  metrics.ttl.deletedDocuments: baseline {}, +{} seen after expiry; first \
                 deletion {}; {}",
                self.baseline
                    .map_or("-".to_string(), |base| base.to_string()),
                thousands(self.deleted_seen as f64),
                self.first_deletion_s
                    .map_or("never seen".to_string(), |secs| format!(
                        "{secs:.2} s after expiry"
                    )),
                match self.all_deleted_s {
                    Some(secs) => format!("all deleted {secs:.2} s after expiry"),
                    None => format!(
                        "not all deleted: {} of {} within {} s",
                        thousands(self.deleted_seen as f64),
                        thousands(churn.docs as f64),
                        ALL_DELETED_WAIT.as_secs()
                    ),
                }
            ));
            if let Some((rate, from_s, to_s, lower_bound)) = self.sustained {
                output.text(&format!(
                    "  sustained deletions: {}{}/s (polls at T+{from_s:.2} s → T+{to_s:.2} s){}",
                    if lower_bound { "≥ " } else { "" },
                    thousands(rate),
                    match self.all_deleted_s {
                        Some(secs) if secs > 0.0 => format!(
                            "; {}/s from expiry to all deleted",
                            thousands(churn.docs as f64 / secs)
                        ),
                        _ => String::new(),
                    }
                ));
            }
        } else {
            output.text("  metrics.ttl.deletedDocuments: not reported by this server");
        }
        output.text(&format!(
            "  serverStatus polls: {} (round trip p50 {} ms, p99 {} ms, max {} ms; {} errors){}",
            self.polls,
            self.poll_rtt_ms.0,
            self.poll_rtt_ms.1,
            self.poll_rtt_ms.2,
            self.poll_errors.total(),
            match (self.max_pending, self.max_oldest_age_ms) {
                (Some(pending), Some(age)) => format!(
                    "; max ttl.expiredPending {}, max oldestExpiredAgeMillis {age}",
                    thousands(pending as f64)
                ),
                _ => String::new(),
            }
        ));
        let table = Table::new(vec![
            Column::text("window", 8),
            Column::number("from_s", 7),
            Column::number("to_s", 7),
            Column::number("ops", 9),
            Column::number("ops/s", 10),
            Column::number("p50_us", 8),
            Column::number("p99_us", 8),
            Column::number("p99.9_us", 8),
            Column::number("max_us", 8),
            Column::number("errors", 6),
        ]);
        output.text(&format!(
            "  foreground read_update, {clients} clients (times relative to expiry T; deleting ends \
             when all are deleted{}):",
            if self.deleting_finished {
                ""
            } else {
                ", here at the T+15 s cap"
            }
        ));
        output.text(&format!("  {}", table.header()));
        for window in &self.windows {
            output.text(&format!(
                "  {}",
                table.row(&[
                    window.name.to_string(),
                    format!("{:.2}", window.from_s),
                    format!("{:.2}", window.to_s),
                    window.ops.to_string(),
                    thousands(window.ops_per_sec),
                    window.p50_us.to_string(),
                    window.p99_us.to_string(),
                    window.p999_us.to_string(),
                    window.max_us.to_string(),
                    window.errors.to_string(),
                ])
            ));
        }
        output.text(&format!(
            "  foreground ops/s per {} ms from T-{} s: {}",
            TIMELINE_SLICE.as_millis(),
            TIMELINE_LEAD.as_secs(),
            self.timeline
                .iter()
                .map(|ops| thousands(*ops))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        if let Some(section) = &self.final_ttl_section {
            output.text(&format!(
                "  serverStatus.ttl[\"{}.{CHURN_COLLECTION}\"] at the end: {section}",
                target.database_name()
            ));
        }
        output.text("  targets:");
        output.text(&format!(
            "    visible count right after expiry = 0: {}",
            match first_check {
                Some(check) => format!(
                    "{} (countDocuments at T+{} ms = {})",
                    verdict(visible_zero),
                    check.planned.as_millis(),
                    count_text(&check.count_documents)
                ),
                None => "unknown".to_string(),
            }
        ));
        output.text(&format!(
            "    all deleted ≤ {TARGET_ALL_DELETED_SECS} s after expiry: {} ({})",
            verdict(all_deleted_met),
            match (self.metric_available, self.all_deleted_s) {
                (false, _) => "no deletion metric".to_string(),
                (true, Some(secs)) => format!("{secs:.2} s"),
                (true, None) => format!(
                    "not all deleted: {} of {}",
                    thousands(self.deleted_seen as f64),
                    thousands(churn.docs as f64)
                ),
            }
        ));
        output.text(&format!(
            "    ≥ {} deletions/s sustained: {} ({})",
            thousands(TARGET_DELETIONS_PER_SEC),
            verdict(rate_met),
            self.sustained.map_or(
                "no deletions seen".to_string(),
                |(rate, _, _, lower)| format!(
                    "{}{}/s",
                    if lower { "≥ " } else { "" },
                    thousands(rate)
                )
            )
        ));
        output.text(&format!(
            "    foreground throughput drop < {:.0}% while deleting: {} ({})",
            TARGET_MAX_DROP * 100.0,
            verdict(drop_met),
            drop.map_or(
                "no before/deleting figures".to_string(),
                |fraction| format!("{:.1}%", fraction * 100.0)
            )
        ));
        print_errors(
            &format!("{} ttl_churn foreground", target.label),
            &self.foreground_errors,
        );
        let mut poll_errors = RunStats::empty();
        poll_errors.errors = self.poll_errors.clone();
        print_errors(
            &format!("{} ttl_churn serverStatus/count", target.label),
            &poll_errors,
        );

        // JSON.
        let mut record = doc! {
            "type": "ttl_churn",
            "server": &target.label,
            "uri": &target.display_uri,
            "clients": clients as i64,
            "round": (round + 1) as i64,
            "churn_docs": churn.docs as i64,
            "doc_bytes": settings.doc_bytes as i64,
            "expire_in_secs": churn.expire_in.as_secs_f64(),
            "after_secs": churn.after.as_secs_f64(),
            "poll_ms": churn.poll.as_millis() as i64,
            "poll_ttl_section": churn.poll_ttl_section,
            "preloaded_docs": churn.preloaded_docs as i64,
            "load_secs": round3(self.load_secs),
            "load_margin_secs": round3(self.load_margin_secs),
            "loaded_count": result_bson(&self.loaded_count),
            "metric_available": self.metric_available,
            "baseline_deleted": self.baseline.map_or(Bson::Null, Bson::Int64),
            "deleted_seen": self.deleted_seen,
            "first_deletion_secs": opt_f64(self.first_deletion_s),
            "all_deleted_secs": opt_f64(self.all_deleted_s),
            "sustained_deletions_per_sec": opt_f64(self.sustained.map(|(rate, ..)| rate)),
            "sustained_is_lower_bound": self.sustained.is_some_and(|(.., lower)| lower),
            "max_expired_pending": self.max_pending.map_or(Bson::Null, Bson::Int64),
            "max_oldest_expired_age_ms": self.max_oldest_age_ms.map_or(Bson::Null, Bson::Int64),
            "polls": self.polls as i64,
            "poll_rtt_p50_ms": self.poll_rtt_ms.0 as i64,
            "poll_rtt_max_ms": self.poll_rtt_ms.2 as i64,
            "poll_errors": self.poll_errors.total() as i64,
            "foreground_errors": self.foreground_errors.errors.total() as i64,
            "deleting_finished": self.deleting_finished,
            "throughput_drop": opt_f64(drop),
            "final_ttl_section": self.final_ttl_section.clone().map_or(Bson::Null, Bson::Document),
        };
        let checks: Vec<Bson> = self
            .checks
            .iter()
            .map(|check| {
                Bson::Document(doc! {
                    "planned_ms": check.planned.as_millis() as i64,
                    "sent_after_ms": round3(check.sent_after.as_secs_f64() * 1000.0),
                    "count_documents": result_bson(&check.count_documents),
                    "count_documents_ms": round3(check.count_documents_ms),
                    "estimated_document_count": result_bson(&check.estimated),
                })
            })
            .collect();
        record.insert("visible_checks", checks);
        let windows: Vec<Bson> = self
            .windows
            .iter()
            .map(|window| {
                Bson::Document(doc! {
                    "window": window.name,
                    "from_secs": round3(window.from_s),
                    "to_secs": round3(window.to_s),
                    "ops": window.ops as i64,
                    "ops_per_sec": round3(window.ops_per_sec),
                    "p50_us": window.p50_us as i64,
                    "p99_us": window.p99_us as i64,
                    "p999_us": window.p999_us as i64,
                    "max_us": window.max_us as i64,
                    "errors": window.errors as i64,
                })
            })
            .collect();
        record.insert("windows", windows);
        record.insert(
            "timeline",
            doc! {
                "slice_ms": TIMELINE_SLICE.as_millis() as i64,
                "from_secs": -TIMELINE_LEAD.as_secs_f64(),
                "ops_per_sec": self.timeline.iter().map(|ops| Bson::Double(round3(*ops))).collect::<Vec<_>>(),
            },
        );
        record.insert(
            "targets",
            doc! {
                "visible_zero": opt_bool(visible_zero),
                "all_deleted_within_secs": TARGET_ALL_DELETED_SECS,
                "all_deleted_met": opt_bool(all_deleted_met),
                "deletions_per_sec_min": TARGET_DELETIONS_PER_SEC,
                "deletions_per_sec_met": opt_bool(rate_met),
                "max_throughput_drop": TARGET_MAX_DROP,
                "throughput_drop_met": opt_bool(drop_met),
            },
        );
        output.json(record);
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

fn opt_f64(value: Option<f64>) -> Bson {
    value.map_or(Bson::Null, |v| Bson::Double(round3(v)))
}

fn opt_bool(value: Option<bool>) -> Bson {
    value.map_or(Bson::Null, Bson::Boolean)
}

fn result_bson(result: &Result<u64, String>) -> Bson {
    match result {
        Ok(count) => Bson::Int64(*count as i64),
        Err(message) => Bson::Document(doc! {"error": message}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(expiry: Instant, at_ms: u64, deleted: i64) -> Poll {
        let at = expiry + Duration::from_millis(at_ms);
        Poll {
            sent: at,
            received: at,
            deleted: Some(deleted),
            pending: None,
            oldest_age_ms: None,
        }
    }

    #[test]
    fn sustained_rate_spans_first_to_last_rise() {
        let expiry = Instant::now();
        let polls = [
            poll(expiry, 100, 10),
            poll(expiry, 1100, 10_010),
            poll(expiry, 2100, 110_010),
            poll(expiry, 3100, 210_010),
            poll(expiry, 4100, 210_010),
        ];
        let refs: Vec<&Poll> = polls.iter().collect();
        let (rate, from_s, to_s, lower) = sustained_rate(Some(10), &refs, expiry).unwrap();
        assert!((rate - 100_000.0).abs() < 1e-6);
        assert!((from_s - 1.1).abs() < 1e-9 && (to_s - 3.1).abs() < 1e-9);
        assert!(!lower);
    }

    #[test]
    fn single_rise_is_a_lower_bound() {
        let expiry = Instant::now();
        let polls = [poll(expiry, 1000, 0), poll(expiry, 1500, 300_000)];
        let refs: Vec<&Poll> = polls.iter().collect();
        let (rate, _, _, lower) = sustained_rate(Some(0), &refs, expiry).unwrap();
        assert!((rate - 600_000.0).abs() < 1e-6);
        assert!(lower);
        assert!(sustained_rate(Some(0), &refs[..1], expiry).is_none());
    }

    #[test]
    fn windows_count_operations_by_start() {
        let origin = Instant::now();
        let expiry = origin + Duration::from_secs(2);
        let trace = ClientTrace {
            samples: vec![
                Sample {
                    start_us: 500_000,
                    latency_us: 100,
                },
                Sample {
                    start_us: 1_999_999,
                    latency_us: 300,
                },
                Sample {
                    start_us: 2_000_000,
                    latency_us: 1000,
                },
            ],
            error_starts: vec![2_500_000],
            errors: ErrorLog::default(),
        };
        let traces = [trace];
        let before = window_figures("before", &traces, origin, expiry, origin, expiry);
        assert_eq!(before.ops, 2);
        assert!((before.ops_per_sec - 1.0).abs() < 1e-9);
        assert!((before.from_s + 2.0).abs() < 1e-9);
        let deleting = window_figures(
            "deleting",
            &traces,
            origin,
            expiry,
            expiry,
            expiry + Duration::from_secs(1),
        );
        assert_eq!((deleting.ops, deleting.errors), (1, 1));
        assert_eq!(deleting.p99_us, 1000);
    }

    #[test]
    fn deleted_documents_reads_any_number() {
        let status = doc! {"metrics": {"ttl": {"deletedDocuments": 7_i64}}};
        assert_eq!(deleted_documents(&status), Some(7));
        let status = doc! {"metrics": {"ttl": {"deletedDocuments": 7_i32}}};
        assert_eq!(deleted_documents(&status), Some(7));
        assert_eq!(deleted_documents(&doc! {"metrics": {}}), None);
    }
}
