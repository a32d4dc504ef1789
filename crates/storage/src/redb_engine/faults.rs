//! Fault injection for tests: a redb storage backend whose disk can be filled and freed on
//! demand, for [`RedbStorage::with_backend`](super::RedbStorage::with_backend). Used by the
//! engine's tests and by `tests/disk_full.rs`; the server never uses it.
//!
//! Model: a file system with 4 KiB blocks. While the disk is full, a write that touches a block
//! the file has never held data in fails with ENOSPC (`ErrorKind::StorageFull`, os error 28), as
//! on ext4 or tmpfs: rewriting blocks already written works, extending the length works (the
//! extension is sparse), and syncs and reads are untouched.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{BackendError, StorageBackend};

const BLOCK_BYTES: u64 = 4096;

/// The switch of a [`DiskFullBackend`]; clones switch the same disk.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    full: Arc<AtomicBool>,
}

impl Disk {
    /// From now on, writes that need a new block fail with ENOSPC.
    pub fn fill(&self) {
        self.full.store(true, Ordering::SeqCst);
    }

    /// Space is back: every write works again.
    pub fn free(&self) {
        self.full.store(false, Ordering::SeqCst);
    }

    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }
}

/// `inner` (a memory or file backend) on a disk that [`Disk::fill`] fills; see the module
/// documentation.
#[derive(Debug)]
pub struct DiskFullBackend<B> {
    inner: B,
    disk: Disk,
    /// Per block of the file: whether it holds data (blocks present when wrapped count as such).
    written: Mutex<Vec<bool>>,
}

impl<B: StorageBackend> DiskFullBackend<B> {
    /// Wraps `inner`; returns the backend and its switch.
    pub fn new(inner: B) -> std::io::Result<(DiskFullBackend<B>, Disk)> {
        let blocks = usize::try_from(inner.len()?.div_ceil(BLOCK_BYTES)).unwrap_or(usize::MAX);
        let disk = Disk::default();
        let backend = DiskFullBackend {
            inner,
            disk: disk.clone(),
            written: Mutex::new(vec![true; blocks]),
        };
        Ok((backend, disk))
    }

    fn written(&self) -> MutexGuard<'_, Vec<bool>> {
        self.written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn block_range(offset: u64, len: usize) -> std::ops::Range<usize> {
    let to_index = |block: u64| usize::try_from(block).unwrap_or(usize::MAX);
    let end = offset.saturating_add(len as u64);
    to_index(offset / BLOCK_BYTES)..to_index(end.div_ceil(BLOCK_BYTES))
}

impl<B: StorageBackend> StorageBackend for DiskFullBackend<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut written = self.written();
        self.inner.set_len(len)?;
        // Blocks cut off are freed (an extension holds no data yet).
        let blocks = usize::try_from(len.div_ceil(BLOCK_BYTES)).unwrap_or(usize::MAX);
        written.truncate(blocks);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut written = self.written();
        let blocks = block_range(offset, data.len());
        let needs_space = blocks
            .clone()
            .any(|block| !written.get(block).copied().unwrap_or(false));
        if needs_space && self.disk.is_full() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.write(offset, data)?;
        if written.len() < blocks.end {
            written.resize(blocks.end, false);
        }
        written[blocks].fill(true);
        Ok(())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
