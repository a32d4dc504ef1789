//! The writer thread: the only owner of redb write transactions (data and catalog alike), with
//! group commit.
//!
//! Loop: take the first queued job, drain whatever else is already queued (at most
//! [`MAX_GROUP_JOBS`] jobs / [`MAX_GROUP_BYTES`]), open one write transaction, apply every job in
//! order, commit once, publish the staged catalog, then answer every job. Each job validates
//! before it mutates, so a job that fails leaves nothing behind and the others still commit. An
//! I/O error poisons the group: the transaction is aborted and every job of the group gets the
//! error; the published catalog never shows uncommitted changes.
//!
//! Durability: `Durable` commits every group with `redb::Durability::Immediate` (acknowledged
//! after the fsync). `Relaxed` commits with `Durability::None` (acknowledged before any fsync)
//! unless a job forces durability, and makes a durable commit (an empty one if idle) once the
//! oldest non-durable commit is `sync_delay` old. The thread exits when every sender is gone,
//! after finishing the queued jobs and making pending commits durable.
//!
//! Must not: hold a read transaction, block on anything but the job channel, or answer a job
//! before its group's commit returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, WriteTransaction};

use super::catalog::Catalog;
use super::format::{io, META, META_NEXT_COLLECTION_ID, META_NEXT_INDEX_ID, META_NEXT_REV};
use crate::storage::{StorageError, StorageResult};

/// Most jobs committed together.
pub(super) const MAX_GROUP_JOBS: usize = 1024;
/// Most payload bytes committed together (a single larger job still commits alone).
pub(super) const MAX_GROUP_BYTES: usize = 8 << 20;

/// State shared by the engine handle (readers) and the writer thread.
pub(super) struct Shared {
    pub db: Database,
    /// The committed catalog; replaced (never mutated) by the writer after each commit.
    pub catalog: RwLock<Arc<Catalog>>,
    /// Write transactions committed (for tests and metrics).
    pub commits: AtomicU64,
}

impl Shared {
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn publish(&self, catalog: Arc<Catalog>) {
        *self
            .catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = catalog;
    }
}

/// Id counters, persisted in `meta` with every commit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Counters {
    pub next_rev: u64,
    pub next_collection_id: u64,
    pub next_index_id: u64,
}

impl Counters {
    pub fn take_rev(&mut self) -> u64 {
        let rev = self.next_rev;
        self.next_rev += 1;
        rev
    }

    pub fn take_collection_id(&mut self) -> u64 {
        let id = self.next_collection_id;
        self.next_collection_id += 1;
        id
    }

    pub fn take_index_id(&mut self) -> u64 {
        let id = self.next_index_id;
        self.next_index_id += 1;
        id
    }

    fn save(&self, txn: &WriteTransaction) -> StorageResult<()> {
        let mut meta = txn.open_table(META).map_err(io)?;
        meta.insert(META_NEXT_REV, self.next_rev).map_err(io)?;
        meta.insert(META_NEXT_COLLECTION_ID, self.next_collection_id)
            .map_err(io)?;
        meta.insert(META_NEXT_INDEX_ID, self.next_index_id)
            .map_err(io)?;
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
    /// Approximate payload size, for bounding a group.
    pub bytes: usize,
}

/// What a job sees: the group's transaction, the staged catalog and the counters.
pub(super) struct Batch {
    pub txn: WriteTransaction,
    catalog: Arc<Catalog>,
    pub counters: Counters,
    poisoned: Option<StorageError>,
}

impl Batch {
    /// The catalog as staged by earlier jobs of the group.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Stages a catalog change (published only if the group commits).
    pub fn catalog_mut(&mut self) -> &mut Catalog {
        Arc::make_mut(&mut self.catalog)
    }

    /// The error that doomed this group, if any; later jobs must not run.
    pub fn poisoned(&self) -> Option<StorageError> {
        self.poisoned.clone()
    }

    pub fn poison(&mut self, error: StorageError) {
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

pub(super) struct Writer {
    shared: Arc<Shared>,
    counters: Counters,
    durability: Durability,
}

impl Writer {
    pub fn new(shared: Arc<Shared>, counters: Counters, durability: Durability) -> Writer {
        Writer {
            shared,
            counters,
            durability,
        }
    }

    pub fn run(mut self, jobs: Receiver<Job>) {
        // Set while non-durable commits are pending: when the oldest was made.
        let mut unsynced_since: Option<Instant> = None;
        loop {
            let first = match (unsynced_since, self.sync_delay()) {
                (Some(since), Some(delay)) => {
                    let wait = (since + delay).saturating_duration_since(Instant::now());
                    match jobs.recv_timeout(wait) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => {
                            if self.commit_group(Vec::new(), true) {
                                unsynced_since = None;
                            }
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            };
            let mut bytes = first.bytes;
            let mut group = vec![first];
            while group.len() < MAX_GROUP_JOBS && bytes < MAX_GROUP_BYTES {
                match jobs.try_recv() {
                    Ok(job) => {
                        bytes += job.bytes;
                        group.push(job);
                    }
                    Err(_) => break,
                }
            }
            let sync_due = match (unsynced_since, self.sync_delay()) {
                (Some(since), Some(delay)) => since.elapsed() >= delay,
                _ => false,
            };
            let durable = self.sync_delay().is_none()
                || sync_due
                || group.iter().any(|job| job.force_durable);
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

    fn sync_delay(&self) -> Option<Duration> {
        match self.durability {
            Durability::Durable => None,
            Durability::Relaxed { sync_delay_ms } => Some(Duration::from_millis(sync_delay_ms)),
        }
    }

    /// Applies and commits `group`, then answers every job. Returns whether the commit succeeded.
    fn commit_group(&mut self, group: Vec<Job>, durable: bool) -> bool {
        let txn = match self.begin(durable) {
            Ok(txn) => txn,
            Err(error) => {
                for job in group {
                    (job.apply)(None)(Err(error.clone()));
                }
                return false;
            }
        };
        let mut batch = Batch {
            txn,
            catalog: self.shared.catalog(),
            counters: self.counters,
            poisoned: None,
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
        } = batch;
        // Ids handed out stay used even if the commit fails: counters only move forward.
        self.counters = counters;
        let outcome = match poisoned {
            Some(error) => {
                let _ = txn.abort();
                Err(error)
            }
            None => counters.save(&txn).and_then(|()| txn.commit().map_err(io)),
        };
        let committed = outcome.is_ok();
        if committed {
            self.shared.commits.fetch_add(1, Ordering::Relaxed);
            self.shared.publish(catalog);
        }
        for finish in finishes {
            finish(outcome.clone());
        }
        committed
    }

    fn begin(&self, durable: bool) -> StorageResult<WriteTransaction> {
        let mut txn = self.shared.db.begin_write().map_err(io)?;
        let durability = if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        txn.set_durability(durability).map_err(io)?;
        Ok(txn)
    }
}
