//! `--crash-loop`: proves that no acknowledged write is lost when the server is killed with
//! SIGKILL in the middle of writing, cycle after cycle.
//!
//! Each cycle starts the server binary (`--server-bin`) on a free loopback port and the same
//! `--dbpath`, waits until it accepts TCP, checks everything acknowledged in earlier cycles,
//! then runs `--writers` tasks for a random (seeded) time between `--run-ms-min` and
//! `--run-ms-max` and SIGKILLs the server while they write; their errors drain and the process
//! is reaped. After the last cycle the server is started once more for a final check.
//!
//! The [`Ledger`] holds what the writers were told: every acknowledged insert `_id` and, per
//! writer's counter, how many `$inc`s were acknowledged and how many were sent (sent includes
//! those whose reply never came). After a restart every acknowledged insert must be there,
//! every counter must satisfy acknowledged ≤ n ≤ sent, and no document may exist that no
//! writer sent. Only a definite reply counts as acknowledged: a timeout or a lost connection
//! is "sent", never "acknowledged". Retryable writes are off, so one call sends one request.
//!
//! This module kills only the server processes it spawned (by their `Child` handle, also on
//! every error path) and talks only to 127.0.0.1.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::future::IntoFuture;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bson::{doc, Document, RawBsonRef, RawDocument, RawDocumentBuf};
use mongodb::error::{Error as DriverError, ErrorKind};
use mongodb::options::ClientOptions;
use mongodb::{Client, Collection};
use tokio::task::JoinSet;

use crate::report::{thousands, Column, Output, Table};
use crate::rng::SplitMix64;
use crate::runner::ErrorLog;
use crate::workload::{random_payload, OpError};

/// Collection written and checked (dropped when the loop starts).
pub const CRASH_COLLECTION: &str = "crashloop";

/// Longest wait for a started server to accept TCP (it recovers the database first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between connection attempts while waiting for the server.
const READY_POLL: Duration = Duration::from_millis(10);
/// A server that exits before listening is retried on another port this many times in all
/// (the free port may have been taken between choosing it and the server binding it).
const START_ATTEMPTS: usize = 3;
/// Driver timeouts: short, so that operations fail fast once the server is dead.
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Documents per batch of the verification scan.
const SCAN_BATCH: u32 = 10_000;
/// Operation mix, by a roll in 0..100: `insert_one` below the first bound, `$inc` below the
/// second, `insert_many` of `BATCH_DOCS` documents otherwise.
const INSERT_ONE_BELOW: u64 = 55;
const INC_BELOW: u64 = 95;
const BATCH_DOCS: std::ops::RangeInclusive<u64> = 2..=8;
/// BSON bytes of an insert document besides its pad (so that documents are about `--doc-bytes`).
const DOC_OVERHEAD: usize = 70;
/// Lost or unexpected documents listed by name in the report.
const EXAMPLES: usize = 5;

/// The writers the crash loop and the node kill run (`--writers`, `--doc-bytes`, `--db`,
/// `--seed`, `--op-timeout-secs`).
#[derive(Clone, Debug)]
pub struct Writers {
    /// Concurrent writer tasks.
    pub count: u32,
    /// Approximate BSON size of each inserted document.
    pub doc_bytes: usize,
    pub database: String,
    pub seed: u64,
    /// A writer abandons an operation after this long (it then counts as sent, unacknowledged).
    pub op_timeout: Duration,
}

impl Writers {
    /// The length of an inserted document's pad.
    pub(crate) fn pad_len(&self) -> usize {
        self.doc_bytes.saturating_sub(DOC_OVERHEAD)
    }
}

/// The `--crash-loop` options.
#[derive(Clone, Debug)]
pub struct CrashLoopSettings {
    /// The server binary, started as `<bin> --port P --dbpath D <server_args>`.
    pub server_bin: PathBuf,
    pub server_args: Vec<String>,
    /// Data directory kept across cycles; `None`: a fresh one in the temp directory, removed
    /// after a passing run.
    pub dbpath: Option<PathBuf>,
    pub cycles: u32,
    /// Writing time per cycle before the kill, drawn uniformly in `run_ms_min..=run_ms_max`.
    pub run_ms_min: u64,
    pub run_ms_max: u64,
    pub writers: Writers,
}

/// `_id` of an inserted document: `"<cycle>-<writer>-<seq>"`, `seq` counting the writer's
/// inserted documents within the cycle from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct InsertId {
    cycle: u32,
    writer: u32,
    seq: u64,
}

impl fmt::Display for InsertId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.cycle, self.writer, self.seq)
    }
}

impl InsertId {
    /// The id written as `text`, only in its canonical spelling.
    fn parse(text: &str) -> Option<InsertId> {
        let mut parts = text.split('-');
        let id = InsertId {
            cycle: parts.next()?.parse().ok()?,
            writer: parts.next()?.parse().ok()?,
            seq: parts.next()?.parse().ok()?,
        };
        (parts.next().is_none() && id.to_string() == text).then_some(id)
    }
}

/// `_id` of writer `writer`'s counter document.
fn counter_id(writer: u32) -> String {
    format!("counter-{writer}")
}

fn parse_counter_id(text: &str) -> Option<u32> {
    let writer: u32 = text.strip_prefix("counter-")?.parse().ok()?;
    (counter_id(writer) == text).then_some(writer)
}

/// One counter's `$inc`s over all cycles so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CounterTally {
    acknowledged: u64,
    /// Acknowledged, failed, abandoned and in flight at a kill.
    sent: u64,
}

/// What the writers were told, over all cycles so far.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Every acknowledged insert: each must be found after every restart.
    acknowledged: Vec<InsertId>,
    /// Per (cycle, writer): inserts sent, i.e. sequence numbers `0..n` were used.
    sent: HashMap<(u32, u32), u64>,
    /// Indexed by writer.
    counters: Vec<CounterTally>,
}

impl Ledger {
    pub(crate) fn new(writers: u32) -> Self {
        Ledger {
            counters: vec![CounterTally::default(); writers as usize],
            ..Ledger::default()
        }
    }

    pub(crate) fn record(&mut self, cycle: u32, trace: &WriterTrace) {
        let writer = trace.writer;
        self.acknowledged
            .extend(
                trace
                    .acknowledged_seqs
                    .iter()
                    .map(|&seq| InsertId { cycle, writer, seq }),
            );
        *self.sent.entry((cycle, writer)).or_default() += trace.inserts_sent;
        let tally = &mut self.counters[writer as usize];
        tally.acknowledged += trace.incs_acknowledged;
        tally.sent += trace.incs_sent;
    }

    fn was_sent(&self, id: InsertId) -> bool {
        self.sent
            .get(&(id.cycle, id.writer))
            .is_some_and(|&sent| id.seq < sent)
    }

    /// Compares what a scan found after a restart with what was acknowledged and sent.
    pub(crate) fn check(&self, found: &Found) -> Check {
        let lost: Vec<InsertId> = self
            .acknowledged
            .iter()
            .filter(|id| !found.inserts.contains(id))
            .copied()
            .collect();
        let mut phantom = found.malformed.clone();
        let mut sent_found: usize = 0;
        for &id in &found.inserts {
            if self.was_sent(id) {
                sent_found += 1;
            } else {
                phantom.push(format!("{id}: never sent"));
            }
        }
        let mut counter_violations = Vec::new();
        let mut lost_incs = 0;
        for (writer, tally) in self.counters.iter().enumerate() {
            let n = found.counters.get(&(writer as u32)).copied().unwrap_or(0);
            if n < tally.acknowledged as i64 {
                lost_incs += tally.acknowledged - n.max(0) as u64;
                counter_violations.push(format!(
                    "{}: n = {n} < {} acknowledged $inc",
                    counter_id(writer as u32),
                    tally.acknowledged
                ));
            } else if n > tally.sent as i64 {
                counter_violations.push(format!(
                    "{}: n = {n} > {} $inc sent",
                    counter_id(writer as u32),
                    tally.sent
                ));
            }
        }
        for (&writer, &n) in &found.counters {
            if writer as usize >= self.counters.len() {
                phantom.push(format!("{}: n = {n}, no such writer", counter_id(writer)));
            }
        }
        phantom.sort();
        let acknowledged_found = self.acknowledged.len() - lost.len();
        Check {
            inserts_found: found.inserts.len(),
            unacknowledged_found: sent_found.saturating_sub(acknowledged_found),
            lost,
            lost_incs,
            counter_violations,
            phantom,
        }
    }
}

/// What one scan of the collection found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    inserts: HashSet<InsertId>,
    /// Counter `n` by writer.
    counters: HashMap<u32, i64>,
    /// Documents no writer wrote like this: an unknown `_id`, fields that disagree with the
    /// `_id`, a pad of the wrong length, a counter without an integer `n`.
    malformed: Vec<String>,
}

/// An integral number of any BSON numeric type.
fn integer(value: Option<RawBsonRef<'_>>) -> Option<i64> {
    match value? {
        RawBsonRef::Int32(n) => Some(i64::from(n)),
        RawBsonRef::Int64(n) => Some(n),
        RawBsonRef::Double(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Some(n as i64),
        _ => None,
    }
}

impl Found {
    fn add(&mut self, document: &RawDocument, pad_len: usize) {
        let field = |name: &str| document.get(name).ok().flatten();
        let id = match field("_id") {
            Some(RawBsonRef::String(text)) => text,
            other => {
                self.malformed
                    .push(format!("a document with _id {other:?}"));
                return;
            }
        };
        if let Some(writer) = parse_counter_id(id) {
            match integer(field("n")) {
                Some(n) => {
                    self.counters.insert(writer, n);
                }
                None => self.malformed.push(format!("{id}: n is {:?}", field("n"))),
            }
            return;
        }
        let Some(insert) = InsertId::parse(id) else {
            self.malformed.push(format!("{id}: unknown _id"));
            return;
        };
        let fields_agree = integer(field("cycle")) == Some(i64::from(insert.cycle))
            && integer(field("writer")) == Some(i64::from(insert.writer))
            && integer(field("seq")) == i64::try_from(insert.seq).ok()
            && matches!(field("pad"), Some(RawBsonRef::String(pad)) if pad.len() == pad_len);
        if !fields_agree {
            self.malformed
                .push(format!("{id}: fields differ from what was written"));
        }
        self.inserts.insert(insert);
    }
}

/// The result of one check after a restart.
#[derive(Debug, Default)]
pub(crate) struct Check {
    /// Insert documents found.
    pub(crate) inserts_found: usize,
    /// Acknowledged inserts that are missing.
    pub(crate) lost: Vec<InsertId>,
    /// Inserts sent without an acknowledgement that were applied anyway.
    pub(crate) unacknowledged_found: usize,
    /// Acknowledged `$inc`s missing from the counters (sum of the shortfalls).
    pub(crate) lost_incs: u64,
    /// Counters outside acknowledged ≤ n ≤ sent.
    pub(crate) counter_violations: Vec<String>,
    /// Documents that were never sent, or not as they were sent.
    pub(crate) phantom: Vec<String>,
}

/// One writer's cycle.
#[derive(Debug, Default)]
pub(crate) struct WriterTrace {
    pub(crate) writer: u32,
    /// Sequence numbers of its acknowledged inserts.
    pub(crate) acknowledged_seqs: Vec<u64>,
    /// Documents sent for insertion (the next sequence number).
    pub(crate) inserts_sent: u64,
    pub(crate) incs_acknowledged: u64,
    pub(crate) incs_sent: u64,
    /// Operations sent while the server was up that failed once it was killed.
    pub(crate) in_flight_at_kill: u64,
    /// Errors before the kill: none are expected.
    pub(crate) errors_while_up: ErrorLog,
    pub(crate) errors_after_kill: ErrorLog,
}

/// Everything one writer task needs.
pub(crate) struct Writer {
    pub(crate) collection: Collection<Document>,
    pub(crate) cycle: u32,
    pub(crate) writer: u32,
    pub(crate) rng: SplitMix64,
    pub(crate) pad_len: usize,
    pub(crate) op_timeout: Duration,
    /// Set just before the server is killed.
    pub(crate) killed: Arc<AtomicBool>,
    /// Set once the server is dead and reaped: finish the current operation and return.
    pub(crate) stop: Arc<AtomicBool>,
}

impl Writer {
    fn document(&mut self, seq: u64) -> Document {
        let id = InsertId {
            cycle: self.cycle,
            writer: self.writer,
            seq,
        };
        doc! {
            "_id": id.to_string(),
            "cycle": i64::from(id.cycle),
            "writer": i64::from(id.writer),
            "seq": seq as i64,
            "pad": random_payload(&mut self.rng, self.pad_len),
        }
    }

    pub(crate) async fn run(mut self) -> WriterTrace {
        let mut trace = WriterTrace {
            writer: self.writer,
            ..WriterTrace::default()
        };
        let counter = doc! {"_id": counter_id(self.writer)};
        while !self.stop.load(Ordering::SeqCst) {
            let sent_while_up = !self.killed.load(Ordering::SeqCst);
            let roll = self.rng.below(100);
            let outcome = if roll < INSERT_ONE_BELOW {
                let seq = trace.inserts_sent;
                let document = self.document(seq);
                trace.inserts_sent += 1;
                let outcome = timed(self.op_timeout, self.collection.insert_one(document)).await;
                outcome.map(|_| trace.acknowledged_seqs.push(seq))
            } else if roll < INC_BELOW {
                trace.incs_sent += 1;
                let update = self
                    .collection
                    .update_one(counter.clone(), doc! {"$inc": {"n": 1}})
                    .upsert(true);
                match timed(self.op_timeout, update).await {
                    Ok(result) if result.matched_count == 1 || result.upserted_id.is_some() => {
                        trace.incs_acknowledged += 1;
                        Ok(())
                    }
                    Ok(result) => Err(OpError::new(
                        "upsert applied to nothing",
                        format!("$inc upsert reply: {result:?}"),
                    )),
                    Err(error) => Err(error),
                }
            } else {
                let docs =
                    BATCH_DOCS.start() + self.rng.below(BATCH_DOCS.end() - BATCH_DOCS.start() + 1);
                let first = trace.inserts_sent;
                let documents: Vec<Document> = (first..first + docs)
                    .map(|seq| self.document(seq))
                    .collect();
                trace.inserts_sent += docs;
                match tokio::time::timeout(self.op_timeout, self.collection.insert_many(documents))
                    .await
                {
                    Ok(Ok(_)) => {
                        trace.acknowledged_seqs.extend(first..first + docs);
                        Ok(())
                    }
                    Ok(Err(error)) => {
                        let applied = applied_before(&error) as u64;
                        trace
                            .acknowledged_seqs
                            .extend(first..first + applied.min(docs));
                        Err(OpError::from(error))
                    }
                    Err(_) => Err(timeout_error(self.op_timeout)),
                }
            };
            if let Err(error) = outcome {
                if self.killed.load(Ordering::SeqCst) {
                    trace.in_flight_at_kill += u64::from(sent_while_up);
                    trace.errors_after_kill.record(error);
                } else {
                    trace.errors_while_up.record(error);
                }
            }
        }
        trace
    }
}

/// The documents of a failed ordered `insert_many` that were applied: those before its first
/// write error (an ordered insert stops there); none for any other failure.
fn applied_before(error: &DriverError) -> usize {
    match &*error.kind {
        ErrorKind::InsertMany(failure) => failure
            .write_errors
            .as_ref()
            .and_then(|errors| errors.iter().map(|error| error.index).min())
            .unwrap_or(0),
        _ => 0,
    }
}

fn timeout_error(limit: Duration) -> OpError {
    OpError::new(
        "timeout",
        format!("no reply within {} s", limit.as_secs_f64()),
    )
}

/// Runs a driver operation with a time limit.
pub(crate) async fn timed<T, F>(limit: Duration, operation: F) -> Result<T, OpError>
where
    F: IntoFuture<Output = mongodb::error::Result<T>>,
{
    match tokio::time::timeout(limit, operation).await {
        Ok(result) => result.map_err(OpError::from),
        Err(_) => Err(timeout_error(limit)),
    }
}

/// A started server process, killed and reaped when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
}

impl Server {
    /// Starts the server on a free port and waits until it accepts TCP; returns it and the
    /// time from spawning to the first accepted connection.
    /// The server is `bin --port P args…`; its standard error goes to ours with
    /// `show_stderr`, nowhere otherwise.
    pub(crate) async fn start(
        bin: &Path,
        args: &[OsString],
        show_stderr: bool,
    ) -> Result<(Server, Duration), String> {
        let mut attempt = 1;
        loop {
            let port = free_port()?;
            let began = Instant::now();
            let child = Command::new(bin)
                .arg("--port")
                .arg(port.to_string())
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(if show_stderr {
                    Stdio::inherit()
                } else {
                    Stdio::null()
                })
                .spawn()
                .map_err(|error| format!("cannot start {}: {error}", bin.display()))?;
            let mut server = Server { child, port };
            match server.wait_ready(began + STARTUP_TIMEOUT).await {
                Ok(()) => return Ok((server, began.elapsed())),
                Err(Some(status)) if attempt < START_ATTEMPTS => {
                    eprintln!(
                        "  the server exited before listening on port {port} ({status}); \
                         retrying on another port"
                    );
                    attempt += 1;
                }
                Err(Some(status)) => {
                    return Err(format!(
                        "the server exited before listening ({status}), {START_ATTEMPTS} times"
                    ))
                }
                Err(None) => {
                    return Err(format!(
                        "the server did not accept connections on port {port} within {} s",
                        STARTUP_TIMEOUT.as_secs()
                    ))
                }
            }
        }
    }

    /// Waits for the port to accept TCP; `Err(Some(status))` if the process exited first,
    /// `Err(None)` at the deadline.
    async fn wait_ready(&mut self, deadline: Instant) -> Result<(), Option<ExitStatus>> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(Some(status));
            }
            if Instant::now() >= deadline {
                return Err(None);
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGKILL (`Child::kill` on Unix); the process dies asynchronously.
    pub(crate) fn signal_kill(&mut self) -> Result<(), String> {
        let pid = self.child.id();
        self.child
            .kill()
            .map_err(|error| format!("cannot kill the server (pid {pid}): {error}"))
    }

    /// Waits for the process to end (after which its `--dbpath` lock is free).
    pub(crate) fn reap(&mut self) -> Result<(), String> {
        let pid = self.child.id();
        self.child
            .wait()
            .map(drop)
            .map_err(|error| format!("cannot reap the server (pid {pid}): {error}"))
    }

    fn kill(&mut self) -> Result<(), String> {
        self.signal_kill()?;
        self.reap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Never leave a server behind on an error path; a no-op once it has been reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| format!("cannot find a free port: {error}"))
}

/// A driver client for exactly this server: direct connection, short timeouts, no retries,
/// a pool for every writer; pinged once.
pub(crate) async fn connect(port: u16, writers: u32) -> Result<Client, String> {
    let uri = format!("mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false");
    let mut options = ClientOptions::parse(&uri)
        .await
        .map_err(|error| format!("{uri}: {error}"))?;
    options.server_selection_timeout = Some(SERVER_SELECTION_TIMEOUT);
    options.connect_timeout = Some(CONNECT_TIMEOUT);
    options.max_pool_size = Some(writers.saturating_add(2));
    options.app_name = Some("tideway-bench".to_string());
    let client = Client::with_options(options).map_err(|error| format!("{uri}: {error}"))?;
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .map_err(|error| format!("{uri}: ping failed: {error}"))?;
    Ok(client)
}

/// Reads the whole collection.
pub(crate) async fn scan(
    collection: &Collection<RawDocumentBuf>,
    pad_len: usize,
) -> Result<Found, String> {
    let failed = |error: DriverError| format!("scanning {CRASH_COLLECTION} failed: {error}");
    let mut cursor = collection
        .find(doc! {})
        .batch_size(SCAN_BATCH)
        .await
        .map_err(failed)?;
    let mut found = Found::default();
    while cursor.advance().await.map_err(failed)? {
        found.add(cursor.current(), pad_len);
    }
    Ok(found)
}

/// One cycle's writes.
#[derive(Debug, Default)]
pub(crate) struct CycleWrites {
    pub(crate) run: Duration,
    pub(crate) inserts_acknowledged: u64,
    pub(crate) inserts_unacknowledged: u64,
    pub(crate) incs_acknowledged: u64,
    pub(crate) incs_unacknowledged: u64,
    pub(crate) in_flight_at_kill: u64,
    pub(crate) errors_while_up: ErrorLog,
    pub(crate) errors_after_kill: ErrorLog,
}

impl CycleWrites {
    pub(crate) fn add(&mut self, trace: &WriterTrace) {
        let acknowledged = trace.acknowledged_seqs.len() as u64;
        self.inserts_acknowledged += acknowledged;
        self.inserts_unacknowledged += trace.inserts_sent - acknowledged;
        self.incs_acknowledged += trace.incs_acknowledged;
        self.incs_unacknowledged += trace.incs_sent - trace.incs_acknowledged;
        self.in_flight_at_kill += trace.in_flight_at_kill;
        self.errors_while_up.merge(trace.errors_while_up.clone());
        self.errors_after_kill
            .merge(trace.errors_after_kill.clone());
    }
}

fn cycle_table() -> Table {
    Table::new(vec![
        Column::text("cycle", 5),
        Column::number("start_ms", 8),
        Column::number("check_ms", 8),
        Column::number("docs", 9),
        Column::number("lost", 5),
        Column::number("bad_ctr", 7),
        Column::number("phantom", 7),
        Column::number("run_ms", 6),
        Column::number("ins_ack", 8),
        Column::number("inc_ack", 8),
        Column::number("unacked", 7),
        Column::number("in_flight", 9),
        Column::number("errors", 6),
    ])
}

/// Totals over the whole loop.
#[derive(Default)]
struct Totals {
    inserts_acknowledged: u64,
    inserts_unacknowledged: u64,
    incs_acknowledged: u64,
    incs_unacknowledged: u64,
    in_flight_at_kill: u64,
    /// Acknowledged inserts found missing by any check.
    lost_inserts: HashSet<InsertId>,
    /// Unacknowledged inserts found applied by the latest check (it sees all earlier cycles).
    unacknowledged_found: usize,
    /// The largest `$inc` shortfall any check saw.
    lost_incs: u64,
    counter_violations: u64,
    phantom: HashSet<String>,
    errors_while_up: ErrorLog,
    errors_after_kill: ErrorLog,
    /// Cycles in which the server exited before it was killed.
    self_exits: Vec<String>,
    start_ms: Vec<u64>,
    check_ms: Vec<u64>,
}

impl Totals {
    fn add_check(&mut self, check: &Check) {
        self.lost_inserts.extend(check.lost.iter().copied());
        self.lost_incs = self.lost_incs.max(check.lost_incs);
        self.unacknowledged_found = check.unacknowledged_found;
        self.counter_violations += check.counter_violations.len() as u64;
        self.phantom.extend(check.phantom.iter().cloned());
    }

    fn add_writes(&mut self, writes: &CycleWrites) {
        self.inserts_acknowledged += writes.inserts_acknowledged;
        self.inserts_unacknowledged += writes.inserts_unacknowledged;
        self.incs_acknowledged += writes.incs_acknowledged;
        self.incs_unacknowledged += writes.incs_unacknowledged;
        self.in_flight_at_kill += writes.in_flight_at_kill;
        self.errors_while_up.merge(writes.errors_while_up.clone());
        self.errors_after_kill
            .merge(writes.errors_after_kill.clone());
    }

    fn lost(&self) -> u64 {
        self.lost_inserts.len() as u64 + self.lost_incs
    }

    fn failed(&self) -> bool {
        self.lost() > 0
            || self.counter_violations > 0
            || !self.phantom.is_empty()
            || !self.self_exits.is_empty()
    }
}

/// The `dbpath` to use, and whether this run created it (then it is removed after a pass).
fn prepare_dbpath(settings: &CrashLoopSettings) -> Result<(PathBuf, bool), String> {
    let (path, created) = match &settings.dbpath {
        Some(path) => (path.clone(), false),
        None => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.subsec_nanos());
            let name = format!("tideway-crashloop-{}-{nanos}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    std::fs::create_dir_all(&path)
        .map_err(|error| format!("cannot create --dbpath {}: {error}", path.display()))?;
    Ok((path, created))
}

/// A restarted server with a client on it.
struct Restarted {
    server: Server,
    client: Client,
    start: Duration,
}

async fn restart(settings: &CrashLoopSettings, dbpath: &Path) -> Result<Restarted, String> {
    let mut args = vec![OsString::from("--dbpath"), dbpath.into()];
    args.extend(settings.server_args.iter().map(OsString::from));
    let (server, start) = Server::start(&settings.server_bin, &args, false).await?;
    let client = connect(server.port, settings.writers.count).await?;
    Ok(Restarted {
        server,
        client,
        start,
    })
}

/// Runs the crash loop; `Err` when a write was lost, a check failed, or the loop could not run.
pub async fn run(settings: CrashLoopSettings, output: Output) -> Result<(), String> {
    if !settings.server_bin.is_file() {
        return Err(format!(
            "--server-bin {} is not a file (build it with cargo build --release -p tideway)",
            settings.server_bin.display()
        ));
    }
    let (dbpath, created) = prepare_dbpath(&settings)?;
    let outcome = run_cycles(&settings, &dbpath, output).await;
    match &outcome {
        Ok(()) if created => {
            let _ = std::fs::remove_dir_all(&dbpath);
        }
        Ok(()) => {}
        Err(_) => eprintln!(
            "crash loop: the data directory is kept for inspection: {}",
            dbpath.display()
        ),
    }
    outcome
}

async fn run_cycles(
    settings: &CrashLoopSettings,
    dbpath: &Path,
    output: Output,
) -> Result<(), String> {
    let began = Instant::now();
    let pad_len = settings.writers.pad_len();
    output.text(&format!(
        "crash loop: {} cycles of: start {} --dbpath {}{}, check every earlier acknowledged \
         write, {} writers for {}–{} ms (insert_one ~{} B documents, $inc upserts on one counter \
         per writer, insert_many of {}–{}), SIGKILL; then a final restart and check",
        settings.cycles,
        settings.server_bin.display(),
        dbpath.display(),
        if settings.server_args.is_empty() {
            String::new()
        } else {
            format!(" {}", settings.server_args.join(" "))
        },
        settings.writers.count,
        settings.run_ms_min,
        settings.run_ms_max,
        settings.writers.doc_bytes,
        BATCH_DOCS.start(),
        BATCH_DOCS.end(),
    ));
    output.text(
        "each row: the restart (start_ms: spawn → accepting TCP), the check of all earlier \
         cycles (check_ms, docs found, lost acknowledged writes, counters outside \
         acknowledged ≤ n ≤ sent, phantom documents), then the cycle's writes until the kill \
         (acknowledged inserts and $inc, unacknowledged writes, operations in flight at the \
         kill, errors while the server was up)",
    );
    let table = cycle_table();
    output.text(&table.header());

    let mut ledger = Ledger::new(settings.writers.count);
    let mut totals = Totals::default();
    let mut schedule = SplitMix64::new(settings.writers.seed, u64::MAX);
    for cycle in 1..=settings.cycles + 1 {
        let last = cycle > settings.cycles;
        let mut up = restart(settings, dbpath).await?;
        let collection = up
            .client
            .database(&settings.writers.database)
            .collection::<Document>(CRASH_COLLECTION);
        totals.start_ms.push(up.start.as_millis() as u64);
        let check = if cycle == 1 {
            // A reused --dbpath may hold an earlier run's documents.
            collection
                .drop()
                .await
                .map_err(|error| format!("dropping {CRASH_COLLECTION} failed: {error}"))?;
            None
        } else {
            let checking = Instant::now();
            let found = scan(&collection.clone_with_type(), pad_len).await?;
            let check = ledger.check(&found);
            let elapsed = checking.elapsed();
            totals.check_ms.push(elapsed.as_millis() as u64);
            totals.add_check(&check);
            report_check(&format!("check at the start of cycle {cycle}"), &check);
            Some((check, elapsed))
        };
        let writes = if last {
            None
        } else {
            let run_ms =
                settings.run_ms_min + schedule.below(settings.run_ms_max - settings.run_ms_min + 1);
            let (writes, self_exit) = write_and_kill(
                settings,
                cycle,
                &collection,
                &mut up.server,
                run_ms,
                &mut ledger,
            )
            .await?;
            if let Some(status) = self_exit {
                totals.self_exits.push(format!("cycle {cycle}: {status}"));
            }
            totals.add_writes(&writes);
            Some(writes)
        };
        if last {
            up.server.kill()?;
        }
        drop(up);
        print_row(
            &table,
            output,
            cycle,
            last,
            totals.start_ms.last().copied(),
            check.as_ref(),
            writes.as_ref(),
        );
    }
    print_summary(settings, output, &totals, began.elapsed());
    if totals.failed() {
        Err(format!(
            "crash loop FAILED: {} acknowledged writes lost, {} counter violations, {} phantom \
             documents{}",
            totals.lost(),
            totals.counter_violations,
            totals.phantom.len(),
            if totals.self_exits.is_empty() {
                String::new()
            } else {
                format!(
                    ", server exited by itself in {}",
                    totals.self_exits.join(", ")
                )
            }
        ))
    } else {
        Ok(())
    }
}

/// `writers` writer tasks of one cycle, stopped together.
pub(crate) struct WriterGroup {
    tasks: JoinSet<WriterTrace>,
    /// Set just before the server is killed.
    pub(crate) killed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl WriterGroup {
    /// Starts the writers of `cycle` (each draws from the seed, its cycle and its number).
    pub(crate) fn spawn(
        collection: &Collection<Document>,
        cycle: u32,
        writers: &Writers,
    ) -> WriterGroup {
        let killed = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for writer in 0..writers.count {
            tasks.spawn(
                Writer {
                    collection: collection.clone(),
                    cycle,
                    writer,
                    rng: SplitMix64::new(
                        writers.seed,
                        (u64::from(cycle) << 32) | u64::from(writer),
                    ),
                    pad_len: writers.pad_len(),
                    op_timeout: writers.op_timeout,
                    killed: Arc::clone(&killed),
                    stop: Arc::clone(&stop),
                }
                .run(),
            );
        }
        WriterGroup {
            tasks,
            killed,
            stop,
        }
    }

    /// Stops the writers (each finishes its current operation) and records what they did.
    pub(crate) async fn finish(
        mut self,
        cycle: u32,
        ledger: &mut Ledger,
    ) -> Result<CycleWrites, String> {
        self.stop.store(true, Ordering::SeqCst);
        let mut writes = CycleWrites::default();
        let mut failure = None;
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok(trace) => {
                    ledger.record(cycle, &trace);
                    writes.add(&trace);
                }
                Err(error) => failure = Some(format!("a writer task failed: {error}")),
            }
        }
        failure.map_or(Ok(writes), Err)
    }
}

/// Writes for `run_ms`, kills the server mid-write, reaps it and collects the writers. Also
/// returns the server's exit status if it had exited before the kill.
async fn write_and_kill(
    settings: &CrashLoopSettings,
    cycle: u32,
    collection: &Collection<Document>,
    server: &mut Server,
    run_ms: u64,
    ledger: &mut Ledger,
) -> Result<(CycleWrites, Option<ExitStatus>), String> {
    let writing = Instant::now();
    let group = WriterGroup::spawn(collection, cycle, &settings.writers);
    tokio::time::sleep(Duration::from_millis(run_ms)).await;
    let self_exit = server.exited();
    group.killed.store(true, Ordering::SeqCst);
    let signalled = server.signal_kill();
    let run = writing.elapsed();
    // Operations in flight now fail (the connection dies); none start after this (a new one
    // would wait out server selection against a dead port).
    let finished = group.finish(cycle, ledger).await;
    let reaped = server.reap();
    signalled?;
    reaped?;
    let writes = finished?;
    Ok((CycleWrites { run, ..writes }, self_exit))
}

/// Details of a failed check, on stderr.
pub(crate) fn report_check(context: &str, check: &Check) {
    if !check.lost.is_empty() {
        let mut lost = check.lost.clone();
        lost.sort();
        let examples: Vec<String> = lost
            .iter()
            .take(EXAMPLES)
            .map(InsertId::to_string)
            .collect();
        eprintln!(
            "  {context}: {} acknowledged inserts missing, e.g. {}",
            lost.len(),
            examples.join(", ")
        );
    }
    for violation in &check.counter_violations {
        eprintln!("  {context}: counter violation: {violation}");
    }
    for phantom in check.phantom.iter().take(EXAMPLES) {
        eprintln!("  {context}: unexpected document: {phantom}");
    }
}

fn print_row(
    table: &Table,
    output: Output,
    cycle: u32,
    last: bool,
    start_ms: Option<u64>,
    check: Option<&(Check, Duration)>,
    writes: Option<&CycleWrites>,
) {
    let dash = || "-".to_string();
    let mut cells = vec![
        if last {
            "final".to_string()
        } else {
            cycle.to_string()
        },
        start_ms.map_or_else(dash, |ms| ms.to_string()),
    ];
    let mut record = doc! {
        "type": "crash_loop_cycle",
        "cycle": if last { bson::Bson::String("final".into()) } else { bson::Bson::Int64(i64::from(cycle)) },
        "start_ms": start_ms.map_or(bson::Bson::Null, |ms| bson::Bson::Int64(ms as i64)),
    };
    match check {
        Some((check, elapsed)) => {
            cells.extend([
                elapsed.as_millis().to_string(),
                check.inserts_found.to_string(),
                (check.lost.len() as u64 + check.lost_incs).to_string(),
                check.counter_violations.len().to_string(),
                check.phantom.len().to_string(),
            ]);
            record.insert("check_ms", elapsed.as_millis() as i64);
            record.insert("docs_found", check.inserts_found as i64);
            record.insert("lost_inserts", check.lost.len() as i64);
            record.insert("lost_incs", check.lost_incs as i64);
            record.insert("counter_violations", check.counter_violations.len() as i64);
            record.insert("phantom", check.phantom.len() as i64);
            record.insert("unacknowledged_found", check.unacknowledged_found as i64);
        }
        None => cells.extend(std::iter::repeat_n(dash(), 5)),
    }
    match writes {
        Some(writes) => {
            cells.extend([
                writes.run.as_millis().to_string(),
                writes.inserts_acknowledged.to_string(),
                writes.incs_acknowledged.to_string(),
                (writes.inserts_unacknowledged + writes.incs_unacknowledged).to_string(),
                writes.in_flight_at_kill.to_string(),
                writes.errors_while_up.total().to_string(),
            ]);
            record.insert("run_ms", writes.run.as_millis() as i64);
            record.insert("inserts_acknowledged", writes.inserts_acknowledged as i64);
            record.insert(
                "inserts_unacknowledged",
                writes.inserts_unacknowledged as i64,
            );
            record.insert("incs_acknowledged", writes.incs_acknowledged as i64);
            record.insert("incs_unacknowledged", writes.incs_unacknowledged as i64);
            record.insert("in_flight_at_kill", writes.in_flight_at_kill as i64);
            record.insert("errors_while_up", writes.errors_while_up.total() as i64);
        }
        None => cells.extend(std::iter::repeat_n(dash(), 6)),
    }
    output.text(&table.row(&cells));
    output.json(record);
}

fn percentile(values: &[u64], quantile: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    match sorted.len() {
        0 => 0,
        len => sorted[((len - 1) as f64 * quantile).round() as usize],
    }
}

fn print_summary(settings: &CrashLoopSettings, output: Output, totals: &Totals, elapsed: Duration) {
    let verdict = if totals.failed() { "FAIL" } else { "PASS" };
    output.text("");
    output.text(&format!(
        "crash loop summary: {} cycles (SIGKILL mid-write) + final restart, {} writers",
        settings.cycles, settings.writers.count
    ));
    output.text(&format!(
        "  acknowledged: {} inserts, {} $inc; sent without a reply: {} inserts ({} of them \
         found after the restarts), {} $inc ({} operations in flight at a kill)",
        thousands(totals.inserts_acknowledged as f64),
        thousands(totals.incs_acknowledged as f64),
        thousands(totals.inserts_unacknowledged as f64),
        thousands(totals.unacknowledged_found as f64),
        thousands(totals.incs_unacknowledged as f64),
        thousands(totals.in_flight_at_kill as f64),
    ));
    output.text(&format!(
        "  lost acknowledged writes: {} ({} inserts, {} $inc)",
        thousands(totals.lost() as f64),
        thousands(totals.lost_inserts.len() as f64),
        thousands(totals.lost_incs as f64)
    ));
    output.text(&format!(
        "  counter violations: {} (checks of acknowledged ≤ n ≤ sent that failed); phantom or \
         altered documents: {}",
        totals.counter_violations,
        totals.phantom.len()
    ));
    if !totals.self_exits.is_empty() {
        output.text(&format!(
            "  the server exited before it was killed: {}",
            totals.self_exits.join(", ")
        ));
    }
    output.text(&format!(
        "  errors while the server was up: {}; after the kills: {}",
        totals.errors_while_up.total(),
        totals.errors_after_kill.total()
    ));
    output.text(&format!(
        "  restarts: spawn → accepting TCP p50 {} ms, max {} ms; checks p50 {} ms, max {} ms",
        percentile(&totals.start_ms, 0.5),
        totals.start_ms.iter().max().copied().unwrap_or(0),
        percentile(&totals.check_ms, 0.5),
        totals.check_ms.iter().max().copied().unwrap_or(0),
    ));
    output.text(&format!(
        "  total time: {:.1} s; result: {verdict}",
        elapsed.as_secs_f64()
    ));
    for (kind, count, message) in totals.errors_while_up.kinds() {
        eprintln!("  errors while the server was up: {count} x {kind}; first: {message}");
    }
    for (kind, count, message) in totals.errors_after_kill.kinds() {
        eprintln!("  errors after the kills (expected): {count} x {kind}; first: {message}");
    }
    output.json(doc! {
        "type": "crash_loop",
        "cycles": i64::from(settings.cycles),
        "writers": i64::from(settings.writers.count),
        "inserts_acknowledged": totals.inserts_acknowledged as i64,
        "incs_acknowledged": totals.incs_acknowledged as i64,
        "inserts_unacknowledged": totals.inserts_unacknowledged as i64,
        "incs_unacknowledged": totals.incs_unacknowledged as i64,
        "unacknowledged_inserts_found": totals.unacknowledged_found as i64,
        "in_flight_at_kill": totals.in_flight_at_kill as i64,
        "lost": totals.lost() as i64,
        "lost_inserts": totals.lost_inserts.len() as i64,
        "lost_incs": totals.lost_incs as i64,
        "counter_violations": totals.counter_violations as i64,
        "phantom": totals.phantom.len() as i64,
        "server_self_exits": totals.self_exits.len() as i64,
        "errors_while_up": totals.errors_while_up.total() as i64,
        "errors_after_kill": totals.errors_after_kill.total() as i64,
        "start_ms_p50": percentile(&totals.start_ms, 0.5) as i64,
        "check_ms_max": totals.check_ms.iter().max().copied().unwrap_or(0) as i64,
        "seconds": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "passed": !totals.failed(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(cycle: u32, writer: u32, seq: u64) -> InsertId {
        InsertId { cycle, writer, seq }
    }

    fn trace(writer: u32, acknowledged: &[u64], sent: u64, incs: (u64, u64)) -> WriterTrace {
        WriterTrace {
            writer,
            acknowledged_seqs: acknowledged.to_vec(),
            inserts_sent: sent,
            incs_acknowledged: incs.0,
            incs_sent: incs.1,
            ..WriterTrace::default()
        }
    }

    fn insert_document(id: InsertId, pad_len: usize) -> RawDocumentBuf {
        RawDocumentBuf::from_document(&doc! {
            "_id": id.to_string(),
            "cycle": i64::from(id.cycle),
            "writer": i64::from(id.writer),
            "seq": id.seq as i64,
            "pad": "x".repeat(pad_len),
        })
        .unwrap()
    }

    /// Two writers in cycle 1: writer 0 had inserts 0 and 1 acknowledged and 2 in flight,
    /// 3 of 4 `$inc`s acknowledged; writer 1 nothing acknowledged.
    fn ledger() -> Ledger {
        let mut ledger = Ledger::new(2);
        ledger.record(1, &trace(0, &[0, 1], 3, (3, 4)));
        ledger.record(1, &trace(1, &[], 1, (0, 1)));
        ledger
    }

    fn found(ids: &[InsertId], counters: &[(u32, i64)]) -> Found {
        Found {
            inserts: ids.iter().copied().collect(),
            counters: counters.iter().copied().collect(),
            malformed: Vec::new(),
        }
    }

    #[test]
    fn ids_round_trip_and_only_canonical_spellings_parse() {
        let insert = id(12, 3, 4567);
        assert_eq!(insert.to_string(), "12-3-4567");
        assert_eq!(InsertId::parse("12-3-4567"), Some(insert));
        for bad in ["12-3", "12-3-4-5", "+1-2-3", "01-2-3", "a-2-3", "counter-1"] {
            assert_eq!(InsertId::parse(bad), None, "{bad}");
        }
        assert_eq!(parse_counter_id("counter-7"), Some(7));
        assert_eq!(parse_counter_id("counter-07"), None);
        assert_eq!(parse_counter_id("1-2-3"), None);
    }

    #[test]
    fn everything_acknowledged_present_passes() {
        // The in-flight insert 1-0-2 and one unacknowledged $inc were applied: allowed.
        let check = ledger().check(&found(&[id(1, 0, 0), id(1, 0, 1), id(1, 0, 2)], &[(0, 4)]));
        assert!(check.lost.is_empty());
        assert!(check.counter_violations.is_empty());
        assert!(check.phantom.is_empty());
        assert_eq!(check.unacknowledged_found, 1);
        assert_eq!(check.inserts_found, 3);
    }

    #[test]
    fn a_missing_acknowledged_insert_is_lost() {
        let check = ledger().check(&found(&[id(1, 0, 0), id(1, 0, 2)], &[(0, 3)]));
        assert_eq!(check.lost, vec![id(1, 0, 1)]);
        assert_eq!(check.unacknowledged_found, 1);
    }

    #[test]
    fn counters_must_lie_between_acknowledged_and_sent() {
        let inserts = [id(1, 0, 0), id(1, 0, 1)];
        let below = ledger().check(&found(&inserts, &[(0, 2)]));
        assert_eq!(below.counter_violations.len(), 1);
        assert_eq!(below.lost_incs, 1);
        let above = ledger().check(&found(&inserts, &[(0, 5)]));
        assert_eq!(above.counter_violations.len(), 1);
        assert_eq!(above.lost_incs, 0);
        // A counter that was never created holds 0: fine for writer 1 (0 acknowledged),
        // 3 lost $inc for writer 0.
        let missing = ledger().check(&found(&inserts, &[]));
        assert_eq!(missing.lost_incs, 3);
        let extra_writer = ledger().check(&found(&inserts, &[(0, 3), (1, 1), (9, 1)]));
        assert!(extra_writer.counter_violations.is_empty());
        assert_eq!(extra_writer.phantom.len(), 1);
    }

    #[test]
    fn documents_never_sent_are_phantoms() {
        let check = ledger().check(&found(
            &[
                id(1, 0, 0),
                id(1, 0, 1),
                id(1, 0, 3),
                id(2, 0, 0),
                id(1, 1, 0),
            ],
            &[(0, 3)],
        ));
        assert!(check.lost.is_empty());
        assert_eq!(
            check.phantom,
            vec!["1-0-3: never sent", "2-0-0: never sent"]
        );
        assert_eq!(check.unacknowledged_found, 1);
    }

    #[test]
    fn scanned_documents_are_checked_against_their_id() {
        let mut found = Found::default();
        found.add(&insert_document(id(1, 0, 0), 10), 10);
        found.add(
            &RawDocumentBuf::from_document(&doc! {"_id": "counter-1", "n": 4}).unwrap(),
            10,
        );
        assert!(found.malformed.is_empty(), "{:?}", found.malformed);
        assert_eq!(found.counters.get(&1), Some(&4));
        // Wrong pad length, fields that disagree with the _id, unknown ids.
        found.add(&insert_document(id(1, 0, 1), 9), 10);
        let mut altered = insert_document(id(1, 0, 2), 10).to_document().unwrap();
        altered.insert("seq", 7_i64);
        found.add(&RawDocumentBuf::from_document(&altered).unwrap(), 10);
        found.add(
            &RawDocumentBuf::from_document(&doc! {"_id": "x"}).unwrap(),
            10,
        );
        found.add(
            &RawDocumentBuf::from_document(&doc! {"_id": 5}).unwrap(),
            10,
        );
        found.add(
            &RawDocumentBuf::from_document(&doc! {"_id": "counter-2", "n": "a"}).unwrap(),
            10,
        );
        assert_eq!(found.malformed.len(), 5, "{:?}", found.malformed);
        assert_eq!(found.inserts.len(), 3);
    }
}
