//! The engine's redb `Database`, and opening it again after an I/O error.
//!
//! redb stops using its file after any failed write, sync, resize or read: every later call
//! returns `PreviousIo` until the `Database` is dropped and opened again, and opening runs redb's
//! crash recovery (back to the last durable commit). [`DbSlot`] holds the open database for the
//! readers and the writer; only the writer thread replaces it ([`DbSlot::reopen`]), between two
//! groups, so no write transaction is live and the old handle has released its file locks before
//! the new one takes them. [`Source`] says what to open again: the file, by path, or a backend the
//! closed handle shared (`--storage memory` and fault-injection backends: the bytes live in the
//! backend, so they survive the reopen).
//!
//! Invariants: the slot holds at most one open `Database`; [`DbSlot::generation`] changes exactly
//! when a new one is installed; a reader holds the slot's lock only to begin a transaction.
//! Must not: reopen while a write transaction of the old handle is live (the close would be
//! deferred and the file still locked).

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use redb::{
    BackendError, Database, ReadTransaction, ReadableDatabase, StorageBackend, TransactionError,
    WriteTransaction,
};

use super::format::io;
use crate::{StorageError, StorageResult};

/// What the database is opened from, again after an I/O error.
pub(super) enum Source {
    /// A redb file.
    File(PathBuf),
    /// A backend kept alive across reopens (it must stay usable after redb closes it, as
    /// `InMemoryBackend` and `FileBackend` do), and what to call it in messages.
    Backend {
        backend: Arc<dyn StorageBackend>,
        name: &'static str,
    },
}

impl Source {
    pub fn open(&self) -> StorageResult<Database> {
        match self {
            Source::File(path) => Database::builder().create(path).map_err(io),
            Source::Backend { backend, .. } => Database::builder()
                .create_with_backend(SharedBackend(Arc::clone(backend)))
                .map_err(io),
        }
    }

    /// For messages: the file's path, or the backend's name.
    pub fn describe(&self) -> String {
        match self {
            Source::File(path) => path.display().to_string(),
            Source::Backend { name, .. } => (*name).to_string(),
        }
    }
}

/// Why a write transaction could not begin.
pub(super) enum BeginError {
    /// The database is unusable until reopened (an earlier I/O error, or closed after one).
    Failed(StorageError),
    Other(StorageError),
}

enum Slot {
    Open(Database),
    /// Closed after an I/O error; the error says why (and is what readers get until a reopen).
    Closed(StorageError),
}

/// The open database, shared by readers and the writer; see the module documentation.
pub(super) struct DbSlot {
    slot: RwLock<Slot>,
    generation: AtomicU64,
    source: Source,
}

impl DbSlot {
    pub fn new(db: Database, source: Source) -> DbSlot {
        DbSlot {
            slot: RwLock::new(Slot::Open(db)),
            generation: AtomicU64::new(0),
            source,
        }
    }

    /// Changes each time a reopened database is installed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn describe(&self) -> String {
        self.source.describe()
    }

    fn read_slot(&self) -> RwLockReadGuard<'_, Slot> {
        self.slot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_slot(&self) -> RwLockWriteGuard<'_, Slot> {
        self.slot
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn begin_read(&self) -> StorageResult<ReadTransaction> {
        match &*self.read_slot() {
            Slot::Open(db) => db.begin_read().map_err(io),
            Slot::Closed(error) => Err(error.clone()),
        }
    }

    /// For the writer thread only.
    pub(crate) fn begin_write(&self) -> Result<WriteTransaction, BeginError> {
        match &*self.read_slot() {
            Slot::Open(db) => db.begin_write().map_err(|error| {
                if needs_reopen(&error) {
                    BeginError::Failed(io(error))
                } else {
                    BeginError::Other(io(error))
                }
            }),
            Slot::Closed(error) => Err(BeginError::Failed(error.clone())),
        }
    }

    /// Whether the database must be reopened before it can be used again. For the writer thread
    /// only, between groups (it begins and aborts a write transaction).
    pub fn failed(&self) -> bool {
        match self.begin_write() {
            Ok(txn) => {
                let _ = txn.abort();
                false
            }
            Err(BeginError::Failed(_)) => true,
            Err(BeginError::Other(_)) => false,
        }
    }

    /// Closes the database and opens it again from its source; `prepare` runs on the new one
    /// before it is installed (the writer reloads the catalog there). On failure the slot stays
    /// closed with the error. For the writer thread only, with no write transaction live.
    pub(crate) fn reopen(
        &self,
        prepare: impl FnOnce(&Database) -> StorageResult<()>,
    ) -> StorageResult<()> {
        let reopening = StorageError::Io(format!(
            "{} is being reopened after an I/O error",
            self.describe()
        ));
        // Dropped here, outside the lock: closing releases the file's locks, which the open
        // below takes again. Readers meanwhile get the error above.
        let closed = std::mem::replace(&mut *self.write_slot(), Slot::Closed(reopening));
        drop(closed);
        let reopened = self.source.open().and_then(|db| {
            prepare(&db)?;
            Ok(db)
        });
        match reopened {
            Ok(db) => {
                *self.write_slot() = Slot::Open(db);
                self.generation.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            Err(error) => {
                let error = match error {
                    StorageError::OutOfDiskSpace(_) => StorageError::OutOfDiskSpace(format!(
                        "reopening {} after an I/O error",
                        self.describe()
                    )),
                    other => StorageError::Io(format!(
                        "cannot reopen {} after an I/O error: {other}",
                        self.describe()
                    )),
                };
                *self.write_slot() = Slot::Closed(error.clone());
                Err(error)
            }
        }
    }
}

/// Whether redb refuses to go on with this database after an I/O error.
fn needs_reopen(error: &TransactionError) -> bool {
    matches!(
        error,
        TransactionError::Storage(
            redb::StorageError::PreviousIo
                | redb::StorageError::DatabaseClosed
                | redb::StorageError::Io(_)
        )
    )
}

/// A backend shared by successive `Database`s of one engine (each reopen wraps it again).
#[derive(Debug)]
struct SharedBackend(Arc<dyn StorageBackend>);

impl StorageBackend for SharedBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}
