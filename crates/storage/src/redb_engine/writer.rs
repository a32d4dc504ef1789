//! The writer thread: the only owner of redb write transactions (data and catalog alike), with
//! group commit.
//!
//! Loop: wait for a job, drain whatever else is already queued into a group (foreground jobs up
//! to [`MAX_GROUP_JOBS`] jobs / [`MAX_GROUP_BYTES`]; background jobs set aside), add at most
//! [`MAX_BACKGROUND_JOBS_PER_GROUP`] set-aside background jobs (oldest first), open one write
//! transaction, apply every job in group order, commit once, publish the staged catalog, then
//! answer every job. Each job validates before it mutates, so a job that fails leaves nothing
//! behind and the others still commit. An I/O error poisons the group: the transaction is
//! aborted and every job of the group gets the error; the published catalog never shows
//! uncommitted changes.
//!
//! Recovery: redb refuses to go on after an I/O error (a full disk, a failed fsync), so after a
//! failed group that left the database unusable the writer reopens it (`database.rs`: redb's
//! crash recovery, back to the last durable commit), reloads and publishes the catalog from it,
//! and only then answers the group. The id counters stay (they only move forward). For a backoff
//! ([`FAILURE_BACKOFF`], doubling while failures repeat, at most [`MAX_FAILURE_BACKOFF`]) groups
//! then fail at once with the same error, so a full disk costs one reopen per backoff, not one
//! per write; the first commit that succeeds ends it. A database that cannot be reopened stays
//! closed (reads and writes get the error) and is tried again by the next group after the
//! backoff; readers that meet an I/O error queue an empty background job for that.
//!
//! Fairness: background jobs (TTL reaping) never delay a foreground job by more than
//! [`MAX_BACKGROUND_JOBS_PER_GROUP`] background jobs in its group (the reaper bounds each job's
//! size); they still progress by at least one job per commit, so they cannot starve either.
//! Jobs queued concurrently by different callers carry no order promise (none was acknowledged),
//! so moving a background job behind later foreground jobs is allowed; one caller's sequential
//! writes await each other and are never reordered.
//!
//! Durability: `Durable` commits a group with `redb::Durability::Immediate` (acknowledged after
//! the fsync) unless every job of the group is a background job; `Relaxed` commits with
//! `Durability::None` (acknowledged before any fsync) unless a job forces durability. Once the
//! oldest non-durable commit is `sync_delay` old (`Relaxed`: the configured delay; `Durable`:
//! [`BACKGROUND_SYNC_DELAY`], only background groups are non-durable there) the next commit is
//! durable (an empty one if idle); a durable commit makes every earlier commit durable. A failed
//! sync is retried after another delay. The thread exits when every sender is gone, after
//! finishing the queued jobs (set-aside background jobs included) and making pending commits
//! durable.
//!
//! Must not: hold a read transaction, block on anything but the job channel, or answer a job
//! before its group's commit returned.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redb::WriteTransaction;

use super::catalog::Catalog;
use super::database::{BeginError, DbSlot};
use super::format::{io, COUNTERS, SIZES};
use crate::{LastWriteRule, StorageError, StorageResult};

/// Most jobs committed together.
pub(super) const MAX_GROUP_JOBS: usize = 1024;
/// Most payload bytes committed together (a single larger job still commits alone).
pub(super) const MAX_GROUP_BYTES: usize = 8 << 20;
/// Most background jobs in one group.
pub(super) const MAX_BACKGROUND_JOBS_PER_GROUP: usize = 1;
/// In `Durable` mode, how long a background-only commit may stay non-durable.
pub(super) const BACKGROUND_SYNC_DELAY: Duration = Duration::from_millis(1000);
/// After a failure that made the database unusable, how long groups fail at once with its error.
pub(super) const FAILURE_BACKOFF: Duration = Duration::from_millis(200);
/// The longest backoff, reached while failures repeat: at most this long after space returns,
/// writes succeed again.
pub(super) const MAX_FAILURE_BACKOFF: Duration = Duration::from_secs(2);

/// State shared by the engine handle (readers) and the writer thread.
pub(super) struct Shared {
    /// The open database; reopened by the writer after an I/O error.
    pub db: DbSlot,
    /// The committed catalog; replaced (never mutated) by the writer after each commit.
    pub catalog: RwLock<Arc<Catalog>>,
    /// Write transactions committed (for tests and metrics).
    pub commits: AtomicU64,
    /// The newest cluster time a committed write took (`seconds << 32 | increment`).
    pub cluster_time: AtomicU64,
    /// Odd from just before a commit that changes the catalog until its catalog is published
    /// (a seqlock: `read::View::consistent` takes its catalog and data in an even, unchanged
    /// period, so both describe the same commit).
    pub catalog_seq: AtomicU64,
    /// Woken after every commit while the oplog exists (`Storage::oplog_appended`): change
    /// streams waiting for entries read on.
    pub oplog_appended: tokio::sync::Notify,
    /// Which collections keep `lw.` (applied by `apply::put_entry` to every catalog change).
    pub last_write_rule: LastWriteRule,
}

impl Shared {
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn publish(&self, catalog: Arc<Catalog>) {
        *self
            .catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = catalog;
    }
}

/// Id counters and the cluster time, persisted in `sizes` with every commit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Counters {
    pub next_rev: u64,
    pub next_collection_id: u64,
    pub next_index_id: u64,
    /// The newest cluster time handed out (`seconds << 32 | increment`; 0 before the first).
    pub last_timestamp: u64,
}

impl Counters {
    /// A new file's counters.
    pub(super) const INITIAL: [u64; 4] = [1, 1, 1, 0];

    /// The counters in [`COUNTERS`] order.
    pub(super) fn values(&self) -> [u64; 4] {
        [
            self.next_rev,
            self.next_collection_id,
            self.next_index_id,
            self.last_timestamp,
        ]
    }

    /// The counters from their values in [`COUNTERS`] order.
    pub(super) fn from_values(values: [u64; 4]) -> Counters {
        let [next_rev, next_collection_id, next_index_id, last_timestamp] = values;
        Counters {
            next_rev,
            next_collection_id,
            next_index_id,
            last_timestamp,
        }
    }

    pub(crate) fn take_rev(&mut self) -> u64 {
        let rev = self.next_rev;
        self.next_rev += 1;
        rev
    }

    pub(crate) fn take_collection_id(&mut self) -> u64 {
        let id = self.next_collection_id;
        self.next_collection_id += 1;
        id
    }

    pub(crate) fn take_index_id(&mut self) -> u64 {
        let id = self.next_index_id;
        self.next_index_id += 1;
        id
    }

    /// The next cluster time: the wall clock's second (never going back), the increment
    /// counting within it, so times only grow, in commit order.
    pub(crate) fn take_timestamp(&mut self) -> u64 {
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs())
            .min(u64::from(u32::MAX));
        let last_secs = self.last_timestamp >> 32;
        self.last_timestamp = if now_secs > last_secs {
            now_secs << 32 | 1
        } else {
            self.last_timestamp + 1
        };
        self.last_timestamp
    }

    pub fn save(&self, txn: &WriteTransaction) -> StorageResult<()> {
        let mut sizes = txn.open_table(SIZES).map_err(io)?;
        for ((name, _), value) in COUNTERS.iter().zip(self.values()) {
            sizes.insert(*name, (value, 0)).map_err(io)?;
        }
        Ok(())
    }
}

/// Delivers a job's answer once its group's commit outcome is known.
pub(super) type Finish = Box<dyn FnOnce(StorageResult<()>) + Send>;
/// Runs a job in the group's batch (`None` if no transaction could be started; the returned
/// `Finish` then receives that error).
pub(super) type Apply = Box<dyn FnOnce(Option<&mut Batch>) -> Finish + Send>;

/// One unit of work for the writer.
pub(super) struct Job {
    pub apply: Apply,
    pub force_durable: bool,
    /// Background maintenance: needs no durable commit of its own (never set with
    /// `force_durable`).
    pub background: bool,
    /// Approximate payload size, for bounding a group.
    pub bytes: usize,
    /// Committed in a group of its own, so that failing it can roll back everything it did: a
    /// job that poisons its batch aborts only itself (a transaction's commit).
    pub alone: bool,
}

/// What a job sees: the group's transaction, the staged catalog and the counters.
pub(super) struct Batch {
    pub txn: WriteTransaction,
    catalog: Arc<Catalog>,
    pub counters: Counters,
    poisoned: Option<StorageError>,
    /// [`Shared::last_write_rule`].
    pub last_write_rule: LastWriteRule,
}

impl Batch {
    /// The catalog as staged by earlier jobs of the group.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Stages a catalog change (published only if the group commits).
    pub(crate) fn catalog_mut(&mut self) -> &mut Catalog {
        Arc::make_mut(&mut self.catalog)
    }

    /// The error that doomed this group, if any; later jobs must not run.
    pub fn poisoned(&self) -> Option<StorageError> {
        self.poisoned.clone()
    }

    pub(crate) fn poison(&mut self, error: StorageError) {
        self.poisoned.get_or_insert(error);
    }
}

/// How commits reach stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Every commit is fsynced before it is acknowledged.
    Durable,
    /// Commits are acknowledged before the fsync; a durable commit follows within
    /// `sync_delay_ms` while non-durable commits are pending.
    Relaxed { sync_delay_ms: u64 },
}

/// The job channel plus the background jobs set aside while forming groups.
struct Queue {
    jobs: Receiver<Job>,
    deferred: VecDeque<Job>,
    /// A job to commit alone, met while forming the previous group: the next group.
    held: Option<Job>,
    /// False once every sender is gone.
    open: bool,
}

/// What waiting for work gave.
enum Wait {
    /// A group can be formed.
    Ready(Vec<Job>),
    /// The timeout passed with nothing queued.
    Idle,
    /// No more jobs will come.
    Closed,
}

impl Queue {
    fn new(jobs: Receiver<Job>) -> Queue {
        Queue {
            jobs,
            deferred: VecDeque::new(),
            held: None,
            open: true,
        }
    }

    /// Waits (at most `timeout`, if given) unless set-aside jobs are waiting, then forms a group.
    fn next_group(&mut self, timeout: Option<Duration>) -> Wait {
        if let Some(job) = self.held.take() {
            return Wait::Ready(vec![job]);
        }
        let mut group = Vec::new();
        let mut bytes = 0;
        if self.deferred.is_empty() {
            if !self.open {
                return Wait::Closed;
            }
            let first = match timeout {
                Some(timeout) => match self.jobs.recv_timeout(timeout) {
                    Ok(job) => Some(job),
                    Err(RecvTimeoutError::Timeout) => return Wait::Idle,
                    Err(RecvTimeoutError::Disconnected) => None,
                },
                None => self.jobs.recv().ok(),
            };
            match first {
                Some(job) => self.route(job, &mut group, &mut bytes),
                None => {
                    self.open = false;
                    return Wait::Closed;
                }
            }
        }
        let alone = |group: &[Job]| group.first().is_some_and(|job| job.alone);
        while self.open
            && !alone(&group)
            && self.held.is_none()
            && group.len() < MAX_GROUP_JOBS
            && bytes < MAX_GROUP_BYTES
        {
            match self.jobs.try_recv() {
                Ok(job) => self.route(job, &mut group, &mut bytes),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.open = false,
            }
        }
        for _ in 0..MAX_BACKGROUND_JOBS_PER_GROUP {
            if alone(&group) {
                break;
            }
            // A set-aside job always fits an empty group.
            match self.deferred.front() {
                Some(job) if group.is_empty() || bytes + job.bytes <= MAX_GROUP_BYTES => {}
                _ => break,
            }
            if let Some(job) = self.deferred.pop_front() {
                bytes += job.bytes;
                group.push(job);
            }
        }
        if group.is_empty() {
            // Unreachable: a first job is either in the group or set aside and then taken.
            return Wait::Idle;
        }
        Wait::Ready(group)
    }

    /// Foreground jobs join the group; background jobs are set aside; a job to commit alone
    /// starts an empty group, or is held for the next one.
    fn route(&mut self, job: Job, group: &mut Vec<Job>, bytes: &mut usize) {
        if job.background {
            self.deferred.push_back(job);
        } else if job.alone && !group.is_empty() {
            self.held = Some(job);
        } else {
            *bytes += job.bytes;
            group.push(job);
        }
    }
}

pub(super) struct Writer {
    shared: Arc<Shared>,
    counters: Counters,
    durability: Durability,
    /// The last failure that made the database unusable, until a commit succeeds.
    failure: Option<Failure>,
}

/// A failure that made the database unusable, and when writing is tried again.
struct Failure {
    error: StorageError,
    retry_at: Instant,
    backoff: Duration,
}

impl Writer {
    pub fn new(shared: Arc<Shared>, counters: Counters, durability: Durability) -> Writer {
        Writer {
            shared,
            counters,
            durability,
            failure: None,
        }
    }

    pub fn run(mut self, jobs: Receiver<Job>) {
        let mut queue = Queue::new(jobs);
        // Set while non-durable commits are pending: when the oldest was made.
        let mut unsynced_since: Option<Instant> = None;
        loop {
            let timeout = unsynced_since
                .map(|since| (since + self.sync_delay()).saturating_duration_since(Instant::now()));
            let group = match queue.next_group(timeout) {
                Wait::Ready(group) => group,
                Wait::Idle => {
                    if unsynced_since.is_some_and(|since| since.elapsed() >= self.sync_delay()) {
                        // On failure, retry after another delay rather than spin.
                        unsynced_since = if self.commit_group(Vec::new(), true) {
                            None
                        } else {
                            Some(Instant::now())
                        };
                    }
                    continue;
                }
                Wait::Closed => break,
            };
            let sync_due = unsynced_since.is_some_and(|since| since.elapsed() >= self.sync_delay());
            let durable = sync_due || group.iter().any(|job| self.needs_durable(job));
            if self.commit_group(group, durable) {
                if durable {
                    unsynced_since = None;
                } else {
                    unsynced_since.get_or_insert_with(Instant::now);
                }
            }
        }
        if unsynced_since.is_some() {
            self.commit_group(Vec::new(), true);
        }
    }

    /// Whether `job` must be acknowledged only after a durable commit.
    fn needs_durable(&self, job: &Job) -> bool {
        job.force_durable || (self.durability == Durability::Durable && !job.background)
    }

    /// How long a non-durable commit may stay so.
    fn sync_delay(&self) -> Duration {
        match self.durability {
            Durability::Durable => BACKGROUND_SYNC_DELAY,
            Durability::Relaxed { sync_delay_ms } => Duration::from_millis(sync_delay_ms),
        }
    }

    /// Applies and commits `group`, then answers every job. Returns whether the commit succeeded.
    fn commit_group(&mut self, group: Vec<Job>, durable: bool) -> bool {
        let begun = match self.backing_off() {
            Some(error) => Err(error),
            None => self.begin(durable),
        };
        let txn = match begun {
            Ok(txn) => txn,
            Err(error) => {
                for job in group {
                    (job.apply)(None)(Err(error.clone()));
                }
                return false;
            }
        };
        let published = self.shared.catalog();
        let mut batch = Batch {
            txn,
            catalog: Arc::clone(&published),
            counters: self.counters,
            poisoned: None,
            last_write_rule: self.shared.last_write_rule,
        };
        let finishes: Vec<Finish> = group
            .into_iter()
            .map(|job| (job.apply)(Some(&mut batch)))
            .collect();
        let Batch {
            txn,
            catalog,
            counters,
            poisoned,
            last_write_rule: _,
        } = batch;
        // Ids handed out stay used even if the commit fails: counters only move forward.
        self.counters = counters;
        let catalog_changed = !Arc::ptr_eq(&published, &catalog);
        let poisoned_was_none = poisoned.is_none();
        let outcome = match poisoned {
            Some(error) => {
                let _ = txn.abort();
                Err(error)
            }
            None => {
                if catalog_changed {
                    self.shared.catalog_seq.fetch_add(1, Ordering::AcqRel);
                }
                counters.save(&txn).and_then(|()| txn.commit().map_err(io))
            }
        };
        let outcome = outcome.map_err(|error| match error {
            StorageError::OutOfDiskSpace(_) => StorageError::OutOfDiskSpace(format!(
                "committing writes to {}",
                self.shared.db.describe()
            )),
            error => error,
        });
        let committed = outcome.is_ok();
        if committed {
            self.shared.commits.fetch_add(1, Ordering::Relaxed);
            self.shared
                .cluster_time
                .store(counters.last_timestamp, Ordering::Release);
            let logs = catalog
                .collections
                .contains_key(&crate::oplog::oplog_namespace());
            self.shared.publish(catalog);
            if catalog_changed {
                self.shared.catalog_seq.fetch_add(1, Ordering::AcqRel);
            }
            if logs {
                self.shared.oplog_appended.notify_waiters();
            }
            self.failure = None;
        } else if let Err(error) = &outcome {
            if catalog_changed && poisoned_was_none {
                self.shared.catalog_seq.fetch_add(1, Ordering::AcqRel);
            }
            // Before answering: the next request then finds the database reopened.
            self.recover_after(error);
        }
        for finish in finishes {
            finish(outcome.clone());
        }
        committed
    }

    fn begin(&mut self, durable: bool) -> StorageResult<WriteTransaction> {
        let mut txn = match self.shared.db.begin_write() {
            Ok(txn) => txn,
            Err(BeginError::Other(error)) => return Err(error),
            // Closed (a reopen failed) or failed under a reader: reopen, then begin there.
            Err(BeginError::Failed(error)) => {
                if let Err(reopen_error) = self.reopen(&error) {
                    self.note_failure(reopen_error.clone());
                    return Err(reopen_error);
                }
                match self.shared.db.begin_write() {
                    Ok(txn) => txn,
                    Err(BeginError::Failed(error) | BeginError::Other(error)) => return Err(error),
                }
            }
        };
        let durability = if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        txn.set_durability(durability).map_err(io)?;
        Ok(txn)
    }

    /// The error groups fail with at once, while backing off after a failure.
    fn backing_off(&self) -> Option<StorageError> {
        self.failure
            .as_ref()
            .filter(|failure| Instant::now() < failure.retry_at)
            .map(|failure| failure.error.clone())
    }

    /// After a failed group: if its I/O error left the database unusable, reopens it and backs
    /// off.
    fn recover_after(&mut self, error: &StorageError) {
        if !matches!(error, StorageError::Io(_) | StorageError::OutOfDiskSpace(_))
            || !self.shared.db.failed()
        {
            return;
        }
        let error = match self.reopen(error) {
            Ok(()) => error.clone(),
            Err(reopen_error) => reopen_error,
        };
        self.note_failure(error);
    }

    /// Starts (or doubles) the backoff, with `error` as the answer meanwhile.
    fn note_failure(&mut self, error: StorageError) {
        let backoff = self.failure.as_ref().map_or(FAILURE_BACKOFF, |failure| {
            (failure.backoff * 2).min(MAX_FAILURE_BACKOFF)
        });
        self.failure = Some(Failure {
            error,
            retry_at: Instant::now() + backoff,
            backoff,
        });
    }

    /// Reopens the database and publishes the catalog read from it (non-durable commits since
    /// the last durable one are gone, and a commit that failed in its fsync may be there).
    fn reopen(&self, error: &StorageError) -> StorageResult<()> {
        let database = self.shared.db.describe();
        tracing::warn!(%error, %database, "reopening the database after an I/O error");
        let shared = Arc::clone(&self.shared);
        let reopened = self.shared.db.reopen(|db| {
            shared.publish(Arc::new(super::load_catalog(db)?));
            Ok(())
        });
        match &reopened {
            Ok(()) => tracing::info!(%database, "database reopened"),
            Err(error) => tracing::error!(%error, %database, "cannot reopen the database"),
        }
        reopened
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A job tagged by its `bytes`.
    fn job(tag: usize, background: bool) -> Job {
        Job {
            apply: Box::new(|_| Box::new(|_| {})),
            force_durable: false,
            background,
            bytes: tag,
            alone: false,
        }
    }

    fn alone(tag: usize) -> Job {
        Job {
            alone: true,
            ..job(tag, false)
        }
    }

    #[test]
    fn a_job_to_commit_alone_gets_a_group_of_its_own() {
        let (sender, receiver) = mpsc::channel();
        let mut queue = Queue::new(receiver);
        for job in [job(1, false), alone(2), job(3, false), job(4, true)] {
            sender.send(job).unwrap();
        }
        // The group closes before the lone job, which is held for the next group.
        assert_eq!(tags(queue.next_group(None)), vec![1]);
        assert_eq!(tags(queue.next_group(None)), vec![2]);
        assert_eq!(tags(queue.next_group(None)), vec![3, 4]);
        // First in the queue, it is alone too: neither foreground nor background jobs join it.
        sender.send(alone(5)).unwrap();
        sender.send(job(6, false)).unwrap();
        sender.send(job(7, true)).unwrap();
        assert_eq!(tags(queue.next_group(None)), vec![5]);
        assert_eq!(tags(queue.next_group(None)), vec![6, 7]);
    }

    fn tags(wait: Wait) -> Vec<usize> {
        match wait {
            Wait::Ready(group) => group.iter().map(|job| job.bytes).collect(),
            Wait::Idle => panic!("idle"),
            Wait::Closed => panic!("closed"),
        }
    }

    #[test]
    fn foreground_jobs_go_first_and_background_jobs_are_capped_per_group() {
        let (sender, receiver) = mpsc::channel();
        let mut queue = Queue::new(receiver);
        for (tag, background) in [(1, true), (2, true), (10, false), (11, false), (3, true)] {
            sender.send(job(tag, background)).unwrap();
        }
        assert_eq!(tags(queue.next_group(None)), vec![10, 11, 1]);
        assert_eq!(tags(queue.next_group(None)), vec![2]);
        // A foreground job that arrives meanwhile still goes ahead of the set-aside ones.
        sender.send(job(12, false)).unwrap();
        assert_eq!(tags(queue.next_group(None)), vec![12, 3]);
        assert!(matches!(
            queue.next_group(Some(Duration::from_millis(5))),
            Wait::Idle
        ));
        // A set-aside background job that does not fit a full group waits for the next one.
        sender.send(job(4, true)).unwrap();
        sender.send(job(MAX_GROUP_BYTES, false)).unwrap();
        assert_eq!(tags(queue.next_group(None)), vec![MAX_GROUP_BYTES]);
        // Set-aside jobs are still run after every sender is gone.
        sender.send(job(5, true)).unwrap();
        drop(sender);
        assert_eq!(tags(queue.next_group(None)), vec![4]);
        assert_eq!(tags(queue.next_group(None)), vec![5]);
        assert!(matches!(queue.next_group(None), Wait::Closed));
    }
}
