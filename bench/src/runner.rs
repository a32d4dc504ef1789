//! The shared timed runner: N client tasks repeat one workload's operation against one
//! collection for a warmup and then a measured period, recording per-operation latency.
//!
//! What is measured: an operation counts (in ops, docs and the latency histogram) when it
//! *started* after the warmup ended and succeeded. Tasks stop starting operations at the
//! deadline; the measured time runs from the end of the warmup to the last counted completion,
//! so ops/s = counted operations / measured seconds. Errors are counted over the whole run.
//! A transaction's whole-transaction retries count with the operation they delayed (only when
//! it counts), and its latency is from the first attempt to the successful commit.
//! [`run`] times a driver [`Workload`]; [`run_ops`] times any [`Operation`] (the raw-socket
//! connection setup of `connect.rs`) with the same rules.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use bson::Document;
use hdrhistogram::Histogram;
use mongodb::Collection;
use tokio::task::JoinSet;

use crate::rng::SplitMix64;
use crate::workload::{ClientOp, OpError, OpParams, Workload};

/// Timing of one run.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Longest one operation may take before it is abandoned and counted as an error.
    pub op_timeout: Duration,
    pub seed: u64,
}

/// Error counts by kind, with the first message seen for each kind.
#[derive(Clone, Debug, Default)]
pub struct ErrorLog {
    kinds: BTreeMap<String, (u64, String)>,
}

impl ErrorLog {
    pub fn record(&mut self, error: OpError) {
        self.kinds
            .entry(error.kind)
            .or_insert_with(|| (0, error.message))
            .0 += 1;
    }

    pub fn merge(&mut self, other: ErrorLog) {
        for (kind, (count, message)) in other.kinds {
            self.kinds.entry(kind).or_insert((0, message)).0 += count;
        }
    }

    pub fn total(&self) -> u64 {
        self.kinds.values().map(|(count, _)| count).sum()
    }

    /// `(kind, count, first message)` for every kind seen.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, u64, &str)> {
        self.kinds
            .iter()
            .map(|(kind, (count, message))| (kind.as_str(), *count, message.as_str()))
    }
}

/// What one run (or several runs merged) measured.
#[derive(Clone, Debug)]
pub struct RunStats {
    /// Successful operations started after the warmup.
    pub ops: u64,
    /// Documents those operations wrote or read.
    pub docs: u64,
    /// Whole-transaction retries those operations needed (transaction workloads).
    pub retries: u64,
    /// From the end of the warmup to the last counted completion.
    pub measured: Duration,
    /// Per-operation latency in microseconds.
    pub latency: Histogram<u64>,
    pub errors: ErrorLog,
}

impl RunStats {
    pub fn empty() -> Self {
        RunStats {
            ops: 0,
            docs: 0,
            retries: 0,
            measured: Duration::ZERO,
            latency: new_histogram(),
            errors: ErrorLog::default(),
        }
    }

    pub fn ops_per_sec(&self) -> f64 {
        per_second(self.ops, self.measured)
    }

    pub fn docs_per_sec(&self) -> f64 {
        per_second(self.docs, self.measured)
    }

    /// Latency at `quantile` (0..=1) in microseconds, 0 when nothing was recorded.
    pub fn latency_us(&self, quantile: f64) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.latency.value_at_quantile(quantile)
        }
    }

    /// The slowest recorded operation in microseconds (0 when nothing was recorded).
    pub fn max_latency_us(&self) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.latency.max()
        }
    }

    /// Adds another run of the same kind: counts and times add up, histograms combine.
    pub fn merge(&mut self, other: &RunStats) {
        self.ops += other.ops;
        self.docs += other.docs;
        self.retries += other.retries;
        self.measured += other.measured;
        // Both histograms auto-resize, so adding cannot fail for lack of range.
        let _ = self.latency.add(&other.latency);
        self.errors.merge(other.errors.clone());
    }

    /// Several runs merged into one.
    pub fn merged<'a>(runs: impl IntoIterator<Item = &'a RunStats>) -> RunStats {
        let mut total = RunStats::empty();
        for run in runs {
            total.merge(run);
        }
        total
    }
}

fn per_second(count: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        count as f64 / elapsed.as_secs_f64()
    }
}

fn new_histogram() -> Histogram<u64> {
    // Auto-resizing, 3 significant digits: exact enough for p99.9, never out of range.
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

/// Records one latency. `record` grows the auto-resizing histogram as needed
/// (`saturating_record` would clamp to its current, small range instead).
pub fn record_latency(histogram: &mut Histogram<u64>, micros: u64) {
    let micros = micros.max(1);
    if histogram.record(micros).is_err() {
        histogram.saturating_record(micros);
    }
}

/// One client task's share of the results.
struct TaskStats {
    ops: u64,
    docs: u64,
    retries: u64,
    last_counted_end: Option<Instant>,
    latency: Histogram<u64>,
    errors: ErrorLog,
}

/// One client task's repeated operation: what the runner times.
pub trait Operation: Send + 'static {
    /// Runs one operation; `Ok` carries the documents it read or wrote.
    fn execute(&mut self) -> impl Future<Output = Result<u64, OpError>> + Send;

    /// Whole-transaction retries since the last call (0 for operations that never retry).
    fn take_retries(&mut self) -> u64 {
        0
    }
}

impl Operation for ClientOp {
    fn execute(&mut self) -> impl Future<Output = Result<u64, OpError>> + Send {
        ClientOp::execute(self)
    }

    fn take_retries(&mut self) -> u64 {
        ClientOp::take_retries(self)
    }
}

/// Runs `workload` with `config.clients` concurrent tasks against `collection` and returns the
/// merged statistics. Ends by itself after warmup + duration (+ at most one op timeout).
pub async fn run(
    workload: Workload,
    collection: &Collection<Document>,
    params: OpParams,
    config: RunConfig,
) -> RunStats {
    run_ops(config, |rng| {
        ClientOp::new(workload, collection.clone(), params, rng)
    })
    .await
}

/// Runs `config.clients` tasks, each repeating the operation `make_op` builds for it (given the
/// task's own random generator), and returns the merged statistics.
pub async fn run_ops<O: Operation>(
    config: RunConfig,
    mut make_op: impl FnMut(SplitMix64) -> O,
) -> RunStats {
    let start = Instant::now();
    let measure_from = start + config.warmup;
    let deadline = measure_from + config.duration;

    let mut tasks = JoinSet::new();
    for index in 0..config.clients {
        let op = make_op(SplitMix64::new(config.seed, index as u64));
        tasks.spawn(client_loop(op, measure_from, deadline, config.op_timeout));
    }

    let mut total = RunStats::empty();
    let mut last_end: Option<Instant> = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(task) => {
                total.ops += task.ops;
                total.docs += task.docs;
                total.retries += task.retries;
                let _ = total.latency.add(&task.latency);
                total.errors.merge(task.errors);
                last_end = last_end.max(task.last_counted_end);
            }
            Err(join_error) => total
                .errors
                .record(OpError::new("client task failed", join_error.to_string())),
        }
    }
    total.measured = match last_end {
        Some(end) => end.saturating_duration_since(measure_from),
        None => config.duration,
    };
    total
}

/// One client: repeat the operation until the deadline, timing each one.
async fn client_loop<O: Operation>(
    mut op: O,
    measure_from: Instant,
    deadline: Instant,
    op_timeout: Duration,
) -> TaskStats {
    let mut stats = TaskStats {
        ops: 0,
        docs: 0,
        retries: 0,
        last_counted_end: None,
        latency: new_histogram(),
        errors: ErrorLog::default(),
    };
    loop {
        let began = Instant::now();
        if began >= deadline {
            break;
        }
        let outcome = tokio::time::timeout(op_timeout, op.execute()).await;
        let ended = Instant::now();
        let retries = op.take_retries();
        match outcome {
            Ok(Ok(docs)) => {
                if began >= measure_from {
                    let micros = ended.duration_since(began).as_micros();
                    record_latency(
                        &mut stats.latency,
                        u64::try_from(micros).unwrap_or(u64::MAX),
                    );
                    stats.ops += 1;
                    stats.docs += docs;
                    stats.retries += retries;
                    stats.last_counted_end = Some(ended);
                }
            }
            Ok(Err(error)) => stats.errors.record(error),
            Err(_) => stats.errors.record(OpError::new(
                "operation timed out",
                format!("no reply within {:?}", op_timeout),
            )),
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_log_keeps_first_message_and_counts() {
        let mut log = ErrorLog::default();
        log.record(OpError::new("a", "first"));
        log.record(OpError::new("a", "second"));
        let mut other = ErrorLog::default();
        other.record(OpError::new("b", "only"));
        other.record(OpError::new("a", "third"));
        log.merge(other);
        let kinds: Vec<_> = log.kinds().collect();
        assert_eq!(kinds, vec![("a", 3, "first"), ("b", 1, "only")]);
        assert_eq!(log.total(), 4);
    }

    #[test]
    fn merged_stats_add_up() {
        let mut one = RunStats::empty();
        one.ops = 100;
        one.retries = 7;
        one.measured = Duration::from_secs(1);
        record_latency(&mut one.latency, 10);
        let mut two = one.clone();
        record_latency(&mut two.latency, 30_000_000);
        let total = RunStats::merged([&one, &two]);
        assert_eq!(total.ops, 200);
        assert_eq!(total.retries, 14);
        assert!((total.ops_per_sec() - 100.0).abs() < 1e-9);
        assert_eq!(total.latency.len(), 3);
        // Large values are kept, not clamped to the histogram's initial range.
        assert!(total.latency_us(1.0) >= 29_000_000);
    }
}
