//! `RedbStorage`: the embedded [`Storage`] engine on redb, file-backed (`--dbpath`) or in memory
//! (same code on redb's `InMemoryBackend`).
//!
//! Structure: one writer thread (`writer.rs`) owns every write transaction and commits queued jobs
//! in groups (background jobs capped per group, committed without their own fsync); callers
//! submit a job and await its answer on a oneshot channel. Reads (`read.rs`) run inline on the
//! caller's task in short read transactions (key counts over whole ranges on a blocking thread),
//! concurrently with the writer, against the published catalog (`catalog.rs`). The on-disk layout
//! (data, index, per-collection expiry and natural order tables) is in `format.rs`, natural order
//! and the conversion of older files to it in `natural.rs`; the work done inside a write
//! transaction is in `apply.rs`; retryable-write session records (a header row and one row per
//! statement) in `sessions.rs`. Reaping (`reap.rs`) reads and plans on a low-priority thread
//! (`background.rs`) and deletes in the writer. After an I/O error (a full disk) the writer
//! reopens the database (`database.rs`); a read that failed meanwhile asks the writer to and runs
//! again on the reopened database, so reads go on and writes resume without a restart.
//!
//! Invariants: a dbpath is used by one engine at a time (an exclusive lock on
//! `<dbpath>/tideway.lock`, held for the engine's lifetime); dropping the engine finishes the
//! queued writes, makes them durable and joins the writer before the database and the lock are
//! released. Must not: write outside the writer thread, or hold a read transaction across calls.

mod apply;
mod background;
mod catalog;
mod database;
pub mod faults;
mod format;
mod natural;
mod read;
mod reap;
mod sessions;
mod writer;

#[cfg(test)]
mod tests;

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::future::Future;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bson::{Bson, Document};
use redb::{Database, ReadableDatabase, ReadableTable};
use tokio::sync::oneshot;

use self::apply::PreparedOp;
use self::background::{BackgroundReader, Pending};
use self::catalog::{Catalog, CollectionEntry};
use self::database::{DbSlot, Source};
use self::format::{
    io, CATALOG, COUNTERS, FORMAT_VERSION, META, META_FORMAT_VERSION, META_TIME_HIGH_WATER,
    OLDEST_READABLE_FORMAT_VERSION, SIZES,
};
use self::writer::{Batch, Counters, Finish, Job, Shared, Writer};
use super::{
    every_collection, CollectionMeta, CollectionStats, EntryCount, ExpiryOrder, IndexSpec,
    LastWriteRule, Namespace, ReapPage, ReapRequest, ReapSource, Record, RecordSession, ScanPage,
    ScanRequest, SessionClaim, Snapshot, Storage, StorageError, StorageResult, TransactionCommit,
    WriteOp, WriteOptions, WriteOutcome,
};

pub use self::writer::Durability;

/// Name of the redb file inside the dbpath.
pub const DATA_FILE_NAME: &str = "tideway.redb";
/// Name of the lock file inside the dbpath.
pub(crate) const LOCK_FILE_NAME: &str = "tideway.lock";

/// The redb storage engine. Cheap to share behind an `Arc`; see the module documentation.
pub struct RedbStorage {
    shared: Arc<Shared>,
    /// Runs the read phase of reaping at low CPU priority.
    background_reader: BackgroundReader,
    /// The reaping batch read ahead for the request expected next.
    read_ahead: Mutex<Option<ReadAhead>>,
    /// `None` once dropping.
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    dbpath: Option<PathBuf>,
    /// The server time recorded last before this engine opened.
    time_high_water_ms: i64,
    /// Held (locked) for the engine's lifetime; declared last so it is released last.
    _lock: Option<File>,
}

impl RedbStorage {
    /// Opens (creating if needed) the database in directory `dbpath`, which it locks; every
    /// collection keeps its `LastWrite` order ([`every_collection`]).
    pub fn open(dbpath: &Path, durability: Durability) -> StorageResult<RedbStorage> {
        Self::open_with_rule(dbpath, durability, every_collection)
    }

    /// [`RedbStorage::open`], keeping the `LastWrite` order of the collections `rule` selects.
    pub fn open_with_rule(
        dbpath: &Path,
        durability: Durability,
        rule: LastWriteRule,
    ) -> StorageResult<RedbStorage> {
        std::fs::create_dir_all(dbpath).map_err(|error| {
            StorageError::Io(format!(
                "cannot create --dbpath {}: {error}",
                dbpath.display()
            ))
        })?;
        let lock_path = dbpath.join(LOCK_FILE_NAME);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|error| {
                StorageError::Io(format!(
                    "cannot open lock file {}: {error}",
                    lock_path.display()
                ))
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StorageError::Io(format!(
                    "another tideway server is using --dbpath {} (lock file {} is held)",
                    dbpath.display(),
                    lock_path.display()
                )))
            }
            Err(TryLockError::Error(error)) => {
                return Err(StorageError::Io(format!(
                    "cannot lock {}: {error}",
                    lock_path.display()
                )))
            }
        }
        let source = Source::File(dbpath.join(DATA_FILE_NAME));
        Self::start(
            source,
            durability,
            rule,
            Some(dbpath.to_path_buf()),
            Some(lock),
        )
    }

    /// A fresh database in memory (lost on drop); every collection keeps its `LastWrite` order.
    pub fn in_memory() -> StorageResult<RedbStorage> {
        Self::in_memory_with_rule(every_collection)
    }

    /// [`RedbStorage::in_memory`], keeping the `LastWrite` order of the collections `rule`
    /// selects.
    pub fn in_memory_with_rule(rule: LastWriteRule) -> StorageResult<RedbStorage> {
        let backend = Arc::new(redb::backends::InMemoryBackend::new());
        let source = Source::Backend {
            backend,
            name: "the in-memory database",
        };
        Self::start(source, Durability::Durable, rule, None, None)
    }

    /// A durable engine on `backend` (opening the database already there, or creating one): for
    /// tests that inject faults (see [`faults`]). After an I/O error the engine reopens the
    /// database on the same backend, so the backend must stay usable after redb closes it (as
    /// redb's `InMemoryBackend` and `FileBackend` do).
    pub fn with_backend(backend: impl redb::StorageBackend) -> StorageResult<RedbStorage> {
        let source = Source::Backend {
            backend: Arc::new(backend),
            name: "the storage backend",
        };
        Self::start(source, Durability::Durable, every_collection, None, None)
    }

    fn start(
        source: Source,
        durability: Durability,
        last_write_rule: LastWriteRule,
        dbpath: Option<PathBuf>,
        lock: Option<File>,
    ) -> StorageResult<RedbStorage> {
        let db = source.open()?;
        let counters = init_meta(&db)?;
        let time_high_water_ms = read_time_high_water(&db)?;
        let mut catalog = load_catalog(&db)?;
        let txn = db.begin_write().map_err(io)?;
        let dropped = apply::drop_interrupted_builds(&txn, &mut catalog)?;
        let reordered = apply::apply_last_write_rule_at_open(&txn, &mut catalog, last_write_rule)?;
        if dropped || reordered {
            txn.commit().map_err(io)?;
        }
        let shared = Arc::new(Shared {
            db: DbSlot::new(db, source),
            catalog: RwLock::new(Arc::new(catalog)),
            commits: AtomicU64::new(0),
            cluster_time: AtomicU64::new(counters.last_timestamp),
            catalog_seq: AtomicU64::new(0),
            oplog_appended: tokio::sync::Notify::new(),
            last_write_rule,
        });
        let (jobs, receiver) = mpsc::channel();
        let writer = Writer::new(shared.clone(), counters, durability);
        let writer = std::thread::Builder::new()
            .name("tideway-writer".to_string())
            .stack_size(tideway_base::limits::THREAD_STACK_BYTES)
            .spawn(move || writer.run(receiver))
            .map_err(|error| {
                StorageError::Io(format!("cannot start the writer thread: {error}"))
            })?;
        Ok(RedbStorage {
            background_reader: BackgroundReader::start()?,
            read_ahead: Mutex::new(None),
            shared,
            jobs: Some(jobs),
            writer: Some(writer),
            dbpath,
            time_high_water_ms,
            _lock: lock,
        })
    }

    /// Write transactions committed since the engine started (one per group).
    pub(crate) fn commit_count(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// Runs `work` on the writer thread inside a group's transaction and returns its result once
    /// the group committed (or the commit's error). `options` only matter through
    /// `force_durable` and `background` (DDL passes [`DDL`]).
    async fn submit<T, F>(&self, options: WriteOptions, bytes: usize, work: F) -> StorageResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Batch) -> StorageResult<T> + Send + 'static,
    {
        self.submit_job(options, bytes, false, work).await
    }

    /// [`RedbStorage::submit`]; with `alone`, the job is committed in a group of its own and any
    /// error it returns rolls back everything it did.
    async fn submit_job<T, F>(
        &self,
        options: WriteOptions,
        bytes: usize,
        alone: bool,
        work: F,
    ) -> StorageResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Batch) -> StorageResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            force_durable: options.force_durable,
            background: options.background && !options.force_durable,
            bytes,
            alone,
            apply: Box::new(move |batch: Option<&mut Batch>| -> Finish {
                let result = match batch {
                    Some(batch) => match batch.poisoned() {
                        Some(error) => Err(error),
                        None => {
                            let result = work(batch);
                            match &result {
                                Err(
                                    error @ (StorageError::Io(_) | StorageError::OutOfDiskSpace(_)),
                                ) => batch.poison(error.clone()),
                                Err(error) if alone => batch.poison(error.clone()),
                                _ => {}
                            }
                            result
                        }
                    },
                    // The finish call carries the real error.
                    None => Err(StorageError::Io("no write transaction".to_string())),
                };
                Box::new(move |committed: StorageResult<()>| {
                    // The caller may have gone away; nothing to do then.
                    let _ = reply.send(committed.and(result));
                })
            }),
        };
        let stopped = || StorageError::Io("the storage writer has stopped".to_string());
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs `read`; if it failed with an I/O error, lets the writer reopen the database if that
    /// (or an error the writer met) made it unusable, and runs `read` again on a reopened one.
    async fn read<T, F, Fut>(&self, read: F) -> StorageResult<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = StorageResult<T>>,
    {
        let mut retries = 0;
        loop {
            let generation = self.shared.db.generation();
            match read().await {
                Err(error) if is_io_failure(&error) && retries < MAX_READ_RETRIES => {
                    retries += 1;
                    self.let_writer_recover().await;
                    if self.shared.db.generation() == generation {
                        return Err(error);
                    }
                }
                result => return result,
            }
        }
    }

    /// Returns once the writer has run an empty job: it reopens an unusable database (unless it
    /// is backing off after a failure) before it runs a group.
    async fn let_writer_recover(&self) {
        let options = WriteOptions {
            ordered: true,
            force_durable: false,
            background: true,
        };
        let _ = self.submit(options, 0, |_| Ok(())).await;
    }
}

/// Reads retried after an I/O error (each after the writer had a chance to reopen the database).
const MAX_READ_RETRIES: usize = 2;

/// Failures that may mean the database must be reopened.
fn is_io_failure(error: &StorageError) -> bool {
    matches!(error, StorageError::Io(_) | StorageError::OutOfDiskSpace(_))
}

/// A [`Snapshot`]: one read transaction held with the catalog committed with it.
struct RedbSnapshot {
    view: Arc<read::View>,
}

impl fmt::Debug for RedbSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedbSnapshot")
    }
}

#[async_trait]
impl Snapshot for RedbSnapshot {
    fn list_collections(&self, db: &str) -> Vec<CollectionMeta> {
        self.view.catalog.metas_of(db)
    }

    fn collection(&self, ns: &Namespace) -> Option<CollectionMeta> {
        self.view.catalog.meta(ns)
    }

    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>> {
        read::get(&self.view, ns, id)
    }

    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        read::scan(&self.view, ns, request, true)
    }

    fn entry_position(
        &self,
        ns: &Namespace,
        index: &str,
        index_key: &[u8],
        id_key: &[u8],
    ) -> Option<Vec<u8>> {
        read::entry_position(&self.view, ns, index, index_key, id_key)
    }

    async fn record_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
    ) -> StorageResult<Option<Vec<u8>>> {
        read::record_position(&self.view, ns, id_key)
    }

    fn appended_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
        insert_order: u64,
    ) -> Option<Vec<u8>> {
        read::appended_position(&self.view, ns, id_key, insert_order)
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount> {
        let (view, ns) = (Arc::clone(&self.view), ns.clone());
        tokio::task::spawn_blocking(move || read::count_entries(&view, &ns, &sources))
            .await
            .map_err(|error| StorageError::Io(format!("counting entries failed: {error}")))?
    }

    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        read::stats(&self.view, ns)
    }
}

/// A reaping batch planned before it was asked for: [`Storage::reap`] with `request` on `ns`
/// takes it instead of planning again (a plan is only a proposal: the write phase re-checks every
/// document's revision and the catalog).
struct ReadAhead {
    ns: Namespace,
    request: ReapRequest,
    plan: Pending<StorageResult<Option<reap::ReapPlan>>>,
}

/// How catalog changes are submitted: foreground, with the engine's durability.
/// Documents one step of an index build indexes: other writes wait at most one step.
const INDEX_BUILD_STEP_DOCS: usize = 5_000;

const DDL: WriteOptions = WriteOptions {
    ordered: true,
    force_durable: false,
    background: false,
};

/// How index build steps are submitted: as background jobs, without their own fsync. A crash
/// that loses steps leaves the index *building*, and the next open drops it; the build's
/// durable last job (publishing the index) makes every step before it durable.
const BUILD_STEP: WriteOptions = WriteOptions {
    ordered: true,
    force_durable: false,
    background: true,
};

fn read_time_high_water(db: &Database) -> StorageResult<i64> {
    let txn = db.begin_read().map_err(io)?;
    let meta = txn.open_table(META).map_err(io)?;
    let recorded = meta.get(META_TIME_HIGH_WATER).map_err(io)?;
    Ok(recorded.map_or(0, |value| i64::try_from(value.value()).unwrap_or(i64::MAX)))
}

/// Checks the format version (initializing a new database, converting an older one) and loads
/// the id counters.
fn init_meta(db: &Database) -> StorageResult<Counters> {
    let txn = db.begin_write().map_err(io)?;
    let (version, mut counters) = {
        let meta = txn.open_table(META).map_err(io)?;
        let sizes = txn.open_table(SIZES).map_err(io)?;
        let version = meta
            .get(META_FORMAT_VERSION)
            .map_err(io)?
            .map(|version| version.value());
        // Format versions 2 to 5 kept the counters in `meta`.
        let moved = version.is_none_or(|version| version >= 6);
        let mut values = Counters::INITIAL;
        for (value, (name, old_name)) in values.iter_mut().zip(COUNTERS) {
            let stored = if moved {
                sizes.get(name).map_err(io)?.map(|value| value.value().0)
            } else {
                meta.get(old_name).map_err(io)?.map(|value| value.value())
            };
            if let Some(stored) = stored {
                *value = stored;
            }
        }
        (version, Counters::from_values(values))
    };
    match version {
        Some(FORMAT_VERSION) | None => {}
        Some(older) if (OLDEST_READABLE_FORMAT_VERSION..FORMAT_VERSION).contains(&older) => {
            // Each conversion runs once, in the commit that marks the file current (below).
            if older < 4 {
                // Versions 2 and 3 kept each session's record whole.
                sessions::convert_whole_records(&txn)?;
            }
            if older < 5 {
                // Versions 2 to 4 had no record ids, and natural order for capped collections
                // only.
                natural::convert(&txn, &mut counters)?;
            }
            // Versions 2 to 5 kept the counters in `meta`.
            counters.save(&txn)?;
            let mut meta = txn.open_table(META).map_err(io)?;
            for (_, old_name) in COUNTERS {
                meta.remove(old_name).map_err(io)?;
            }
        }
        Some(other) => {
            return Err(StorageError::Corrupt(format!(
                "unsupported data format version {other}: this build reads versions \
                 {OLDEST_READABLE_FORMAT_VERSION} to {FORMAT_VERSION} and does not migrate \
                 others; start with an empty --dbpath (or use the tideway build that wrote it)"
            )))
        }
    }
    if version != Some(FORMAT_VERSION) {
        txn.open_table(META)
            .map_err(io)?
            .insert(META_FORMAT_VERSION, FORMAT_VERSION)
            .map_err(io)?;
    }
    // Create the fixed tables so readers always find them.
    txn.open_table(CATALOG).map_err(io)?;
    txn.open_table(SIZES).map_err(io)?;
    txn.commit().map_err(io)?;
    Ok(counters)
}

fn load_catalog(db: &Database) -> StorageResult<Catalog> {
    let txn = db.begin_read().map_err(io)?;
    let table = txn.open_table(CATALOG).map_err(io)?;
    let mut catalog = Catalog::default();
    for item in table.iter().map_err(io)? {
        let (id, bytes) = item.map_err(io)?;
        let entry = CollectionEntry::decode(id.value(), bytes.value())?;
        catalog
            .collections
            .insert(entry.meta.ns.clone(), Arc::new(entry));
    }
    Ok(catalog)
}

impl Drop for RedbStorage {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish the queued jobs and exit.
        self.jobs = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStorage")
            .field("dbpath", &self.dbpath)
            .field("commits", &self.commit_count())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Storage for RedbStorage {
    fn engine_name(&self) -> &'static str {
        "redb"
    }

    async fn list_databases(&self) -> StorageResult<Vec<(String, u64)>> {
        self.read(|| async { read::list_databases(&self.shared) })
            .await
    }

    async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>> {
        Ok(self.shared.catalog().metas_of(db))
    }

    async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>> {
        Ok(self.shared.catalog().meta(ns))
    }

    async fn create_collection(
        &self,
        ns: &Namespace,
        options: Document,
        indexes: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        let ns = ns.clone();
        self.submit(DDL, 0, move |batch| {
            apply::create_collection(batch, &ns, options, indexes)
        })
        .await
    }

    async fn drop_collection(&self, ns: &Namespace) -> StorageResult<bool> {
        let ns = ns.clone();
        self.submit(DDL, 0, move |batch| apply::drop_collection(batch, &ns))
            .await
    }

    async fn drop_database(&self, db: &str) -> StorageResult<()> {
        let db = db.to_string();
        self.submit(DDL, 0, move |batch| apply::drop_database(batch, &db))
            .await
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StorageResult<()> {
        let (from, to) = (from.clone(), to.clone());
        self.submit(DDL, 0, move |batch| {
            apply::rename_collection(batch, &from, &to, drop_target)
        })
        .await
    }

    async fn set_collection_options(&self, ns: &Namespace, options: Document) -> StorageResult<()> {
        let ns = ns.clone();
        self.submit(DDL, 0, move |batch| {
            apply::set_collection_options(batch, &ns, options)
        })
        .await
    }

    async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        // Registered first, built in steps (other writes go on between them), then published;
        // a failed build is undone, one a crash interrupts is dropped at the next open.
        let ids = {
            let ns = ns.clone();
            self.submit(DDL, 0, move |batch| {
                apply::begin_index_build(batch, &ns, specs)
            })
            .await?
        };
        let mut after = None;
        while !ids.is_empty() {
            let (step_ns, step_ids) = (ns.clone(), ids.clone());
            let step = self
                .submit(BUILD_STEP, 0, move |batch| {
                    apply::index_build_step(
                        batch,
                        &step_ns,
                        &step_ids,
                        after,
                        INDEX_BUILD_STEP_DOCS,
                    )
                })
                .await;
            match step {
                Ok(Some(next)) => after = Some(next),
                Ok(None) => break,
                Err(error) => {
                    let (abort_ns, abort_ids) = (ns.clone(), ids.clone());
                    // If this fails too, the next open drops the half-built indexes.
                    let _ = self
                        .submit(DDL, 0, move |batch| {
                            apply::abort_index_build(batch, &abort_ns, &abort_ids)
                        })
                        .await;
                    return Err(error);
                }
            }
        }
        let ns = ns.clone();
        self.submit(DDL, 0, move |batch| {
            apply::finish_index_build(batch, &ns, &ids)
        })
        .await
    }

    async fn drop_indexes(&self, ns: &Namespace, names: &[String]) -> StorageResult<()> {
        let (ns, names) = (ns.clone(), names.to_vec());
        self.submit(DDL, 0, move |batch| apply::drop_indexes(batch, &ns, &names))
            .await
    }

    async fn update_index_spec(
        &self,
        ns: &Namespace,
        name: &str,
        spec: Document,
    ) -> StorageResult<()> {
        let (ns, name) = (ns.clone(), name.to_string());
        self.submit(DDL, 0, move |batch| {
            apply::update_index_spec(batch, &ns, &name, spec)
        })
        .await
    }

    fn time_high_water_ms(&self) -> i64 {
        self.time_high_water_ms
    }

    fn oplog_appended(&self) -> &tokio::sync::Notify {
        &self.shared.oplog_appended
    }

    fn cluster_time(&self) -> bson::Timestamp {
        let packed = self.shared.cluster_time.load(Ordering::Acquire);
        bson::Timestamp {
            time: (packed >> 32) as u32,
            increment: packed as u32,
        }
    }

    async fn record_time(&self, now_ms: i64) -> StorageResult<()> {
        let options = WriteOptions {
            ordered: true,
            force_durable: false,
            background: true,
        };
        let now = u64::try_from(now_ms).unwrap_or(0);
        self.submit(options, 0, move |batch| {
            let mut meta = batch.txn.open_table(META).map_err(io)?;
            let recorded = meta
                .get(META_TIME_HIGH_WATER)
                .map_err(io)?
                .map_or(0, |value| value.value());
            meta.insert(META_TIME_HIGH_WATER, recorded.max(now))
                .map_err(io)?;
            Ok(())
        })
        .await
    }

    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>> {
        self.read(|| async { read::get(&read::View::begin(&self.shared)?, ns, id) })
            .await
    }

    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        self.read(|| async {
            read::scan(
                &read::View::begin(&self.shared)?,
                ns,
                request.clone(),
                false,
            )
        })
        .await
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount> {
        // Up to every entry of a large expired range: off the async workers, so that requests
        // they serve meanwhile do not wait for it.
        self.read(|| async {
            let (shared, ns, sources) = (Arc::clone(&self.shared), ns.clone(), sources.clone());
            tokio::task::spawn_blocking(move || {
                read::count_entries(&read::View::begin(&shared)?, &ns, &sources)
            })
            .await
            .map_err(|error| StorageError::Io(format!("counting entries failed: {error}")))?
        })
        .await
    }

    async fn expiry_scan(
        &self,
        ns: &Namespace,
        order: ExpiryOrder,
        range: (Bound<i64>, Bound<i64>),
        resume_after: Option<Vec<u8>>,
        limit: usize,
    ) -> StorageResult<ScanPage> {
        self.read(|| async {
            read::expiry_scan(
                &self.shared,
                ns,
                order,
                range,
                resume_after.as_deref(),
                limit,
            )
        })
        .await
    }

    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        self.read(|| async { read::stats(&read::View::begin(&self.shared)?, ns) })
            .await
    }

    async fn write(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        self.write_recorded(ns, ops, options, None, Box::new(|_, _| None))
            .await
    }

    async fn write_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: RecordSession,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        let ops: Vec<PreparedOp> = ops.into_iter().map(PreparedOp::prepare).collect();
        let bytes = ops.iter().map(PreparedOp::bytes).sum();
        let ns = ns.clone();
        self.submit(options, bytes, move |batch| {
            // Checked before anything is written: a refused claim leaves the batch untouched.
            if let Some(claim) = &claim {
                sessions::check_claim(&batch.txn, claim)?;
            }
            let results = apply::write(batch, &ns, ops, options.ordered, None)?;
            // Every successful write took a time: the newest is this batch's last write's.
            let time = crate::oplog::EntryTime::now(batch.counters.last_timestamp);
            if let Some(session) = record(&crate::successes(&results), time) {
                sessions::put(&batch.txn, &session)?;
            }
            Ok(results)
        })
        .await
    }

    async fn session_record(&self, key: &[u8]) -> StorageResult<Option<Document>> {
        self.read(|| async { read::session_record(&self.shared, key) })
            .await
    }

    async fn session_statements(
        &self,
        key: &[u8],
        txn_number: i64,
    ) -> StorageResult<Vec<(i32, Document)>> {
        self.read(|| async { read::session_statements(&self.shared, key, txn_number) })
            .await
    }

    async fn snapshot(&self) -> StorageResult<Arc<dyn Snapshot>> {
        let view = self
            .read(|| async { read::View::consistent(&self.shared).await })
            .await?;
        Ok(Arc::new(RedbSnapshot {
            view: Arc::new(view),
        }))
    }

    async fn commit_transaction(&self, commit: TransactionCommit) -> StorageResult<()> {
        let options = WriteOptions {
            ordered: true,
            force_durable: commit.force_durable,
            background: false,
        };
        let writes: Vec<_> = commit
            .writes
            .into_iter()
            .map(|(ns, ops, stale)| {
                let ops: Vec<PreparedOp> = ops.into_iter().map(PreparedOp::prepare).collect();
                (ns, ops, stale)
            })
            .collect();
        let bytes = writes
            .iter()
            .flat_map(|(_, ops, _)| ops.iter().map(PreparedOp::bytes))
            .sum();
        let (creates, session, record) = (commit.creates, commit.session, commit.record);
        self.submit_job(options, bytes, true, move |batch| {
            for (ns, options, indexes) in creates {
                apply::create_collection(batch, &ns, options, indexes).map_err(
                    |error| match error {
                        StorageError::NamespaceExists(_) => StorageError::WriteConflict,
                        error => error,
                    },
                )?;
            }
            for (ns, ops, stale) in writes {
                if let Some(stale) = &stale {
                    apply::check_not_stale(batch, &ns, &ops, stale)?;
                }
                for result in apply::write(batch, &ns, ops, true, Some(&session))? {
                    result?;
                }
            }
            if let Some(record) = &record {
                sessions::put(&batch.txn, record)?;
            }
            Ok(())
        })
        .await
    }

    async fn session_records(&self) -> StorageResult<Vec<(Vec<u8>, Document)>> {
        self.read(|| async { read::session_records(&self.shared) })
            .await
    }

    async fn reap(&self, ns: &Namespace, request: ReapRequest) -> StorageResult<ReapPage> {
        let read_ahead = self
            .read_ahead
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .filter(|ahead| ahead.ns == *ns && ahead.request == request);
        let planned = match read_ahead {
            Some(ahead) => match ahead.plan.wait().await? {
                // Read before an I/O error: plan again (on the reopened database).
                Err(error) if is_io_failure(&error) => None,
                planned => Some(planned?),
            },
            None => None,
        };
        let planned = match planned {
            Some(planned) => planned,
            None => {
                self.read(|| async {
                    let (shared, ns) = (Arc::clone(&self.shared), ns.clone());
                    let request = request.clone();
                    self.background_reader
                        .run(move || reap::plan(&shared, &ns, &request))
                        .await?
                })
                .await?
            }
        };
        let Some(plan) = planned else {
            return Ok(ReapPage {
                deleted: 0,
                resume: None,
            });
        };
        let resume = plan.resume.clone();
        if let Some(resume) = &resume {
            // Read the next batch while this one is deleted: the caller asks for it next.
            let next = ReapRequest {
                resume_after: Some(resume.clone()),
                ..request
            };
            let plan = {
                let (shared, ns, next) = (Arc::clone(&self.shared), ns.clone(), next.clone());
                self.background_reader
                    .queue(move || reap::plan(&shared, &ns, &next))?
            };
            *self
                .read_ahead
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(ReadAhead {
                ns: ns.clone(),
                request: next,
                plan,
            });
        }
        let deleted = if plan.is_empty() {
            0
        } else {
            let options = WriteOptions {
                ordered: false,
                force_durable: false,
                background: true,
            };
            // Keys to remove dominate the job's size.
            let bytes = plan.len().saturating_mul(64);
            let ns = ns.clone();
            self.submit(options, bytes, move |batch| reap::apply(batch, &ns, plan))
                .await?
        };
        Ok(ReapPage { deleted, resume })
    }
}
