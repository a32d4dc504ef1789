//! Blocking operations within a memory limit, as mongod's sorter does them: items are kept in
//! memory up to the limit; past it, with disk use allowed, the buffer is sorted and written as a
//! run to a temporary file, and the runs are merged when read back; without it, the operation
//! fails with `QueryExceededMemoryLimitNoDiskUseAllowed` (292). With a limit of k only the best k
//! items are kept (top-k), so `sort + limit` holds k items, not the input.
//!
//! Invariants: the order is total and stable (equal keys keep their input order, by a sequence
//! number that travels with each item through the runs); memory in use stays near the limit plus
//! one item per run while merging; temporary files live under the spill directory and are deleted
//! when the sorter or its output is dropped, however the operation ends; long sorts check the
//! operation's deadline. Items say how big they are and how to round-trip through a spill file
//! ([`Spillable`]); this module knows nothing else about them.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use bson::{doc, Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;

/// mongod's default for `internalQueryMaxBlockingSortMemoryUsageBytes`,
/// `internalDocumentSourceGroupMaxMemoryBytes`, `internalDocumentSourceBucketAutoMaxMemoryBytes`,
/// `internalDocumentSourceDensifyMaxMemoryBytes`, `internalQueryFacetBufferSizeBytes` and
/// `internalQueryFacetMaxOutputDocSizeBytes`.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 100 * 1024 * 1024;
/// Bookkeeping per item beyond its own bytes (key vector, sequence number, vector slot).
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// Comparisons between deadline checks while sorting in memory.
const COMPARISONS_PER_DEADLINE_CHECK: u32 = 4096;

/// Something a sorter can hold and spill.
pub trait Spillable: Sized {
    /// Approximate bytes it occupies in memory.
    fn memory_bytes(&self) -> usize;
    fn into_document(self) -> Document;
    fn from_document(document: Document) -> Option<Self>;
}

impl Spillable for Document {
    fn memory_bytes(&self) -> usize {
        tideway_base::bsonutil::encoded_size(self)
    }

    fn into_document(self) -> Document {
        self
    }

    fn from_document(document: Document) -> Option<Self> {
        Some(document)
    }
}

pub(crate) use crate::sort::KeyOrder;

/// The limits of one blocking operation.
#[derive(Clone, Debug)]
pub struct SortLimits {
    pub max_memory_bytes: usize,
    pub allow_disk_use: bool,
    /// Where runs are written (created on first spill).
    pub spill_dir: PathBuf,
    /// The error when the limit is reached without disk use (mongod's wording per operation).
    pub exceeded_message: String,
    pub deadline: Deadline,
}

impl SortLimits {
    fn exceeded(&self) -> CommandError {
        CommandError::new(
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
            self.exceeded_message.clone(),
        )
    }
}

/// mongod's message for a blocking sort over its memory limit without disk use.
pub fn sort_exceeded_message(max_memory_bytes: usize) -> String {
    format!(
        "Sort exceeded memory limit of {max_memory_bytes} bytes, but did not opt in to external sorting. Aborting operation. Pass allowDiskUse:true to opt in."
    )
}

struct Entry<T> {
    key: Vec<Bson>,
    seq: u64,
    item: T,
}

/// A blocking sort (or, with empty keys, an order-keeping buffer) within [`SortLimits`].
pub struct Sorter<T> {
    order: KeyOrder,
    limit: Option<usize>,
    limits: SortLimits,
    entries: Vec<Entry<T>>,
    memory_bytes: usize,
    runs: Vec<SpillFile>,
    next_seq: u64,
}

impl<T: Spillable> Sorter<T> {
    /// A sorter keeping at most `limit` items (the first in order), if given.
    pub fn new(order: KeyOrder, limit: Option<usize>, limits: SortLimits) -> Sorter<T> {
        Sorter {
            order,
            limit,
            limits,
            entries: Vec::new(),
            memory_bytes: 0,
            runs: Vec::new(),
            next_seq: 0,
        }
    }

    /// Whether anything was written to disk.
    pub fn spilled(&self) -> bool {
        !self.runs.is_empty()
    }

    pub fn push(&mut self, key: Vec<Bson>, item: T) -> CommandResult<()> {
        if self.limit == Some(0) {
            return Ok(());
        }
        self.memory_bytes += entry_bytes(&key, &item);
        self.entries.push(Entry {
            key,
            seq: self.next_seq,
            item,
        });
        self.next_seq += 1;
        if let Some(limit) = self.limit {
            // Keep at most twice the limit: trimming to the best `limit` is then amortized O(1).
            if self.entries.len() >= limit.saturating_mul(2).max(64) {
                self.keep_best(limit)?;
            }
        }
        if self.memory_bytes > self.limits.max_memory_bytes {
            // A top-k holds its best k before it needs a disk (mongod's TopKSorter does too).
            if let Some(limit) = self.limit {
                self.keep_best(limit)?;
            }
            if self.memory_bytes > self.limits.max_memory_bytes {
                self.spill()?;
            }
        }
        Ok(())
    }

    fn keep_best(&mut self, limit: usize) -> CommandResult<()> {
        if self.entries.len() <= limit {
            return Ok(());
        }
        let order = self.order.clone();
        self.entries
            .select_nth_unstable_by(limit, |a, b| compare_entries(&order, a, b));
        self.entries.truncate(limit);
        self.memory_bytes = self
            .entries
            .iter()
            .map(|entry| entry_bytes(&entry.key, &entry.item))
            .sum();
        self.limits.deadline.check()
    }

    fn sort_entries(&mut self) -> CommandResult<()> {
        let order = self.order.clone();
        let deadline = &self.limits.deadline;
        let mut comparisons = 0u32;
        let mut expired = false;
        self.entries.sort_by(|a, b| {
            comparisons += 1;
            if comparisons.is_multiple_of(COMPARISONS_PER_DEADLINE_CHECK)
                && deadline.check().is_err()
            {
                expired = true;
            }
            if expired {
                // The result is discarded: finish cheaply.
                return a.seq.cmp(&b.seq);
            }
            compare_entries(&order, a, b)
        });
        if expired {
            return Err(Deadline::exceeded());
        }
        if let Some(limit) = self.limit {
            self.entries.truncate(limit);
        }
        Ok(())
    }

    /// Writes the buffer as a sorted run, or fails if disk use is not allowed.
    fn spill(&mut self) -> CommandResult<()> {
        if !self.limits.allow_disk_use {
            return Err(self.limits.exceeded());
        }
        self.sort_entries()?;
        let mut run = SpillFile::create(&self.limits.spill_dir)?;
        for entry in self.entries.drain(..) {
            run.write(&doc! {
                "k": entry.key,
                "s": entry.seq as i64,
                "d": entry.item.into_document(),
            })?;
        }
        run.finish()?;
        self.runs.push(run);
        self.memory_bytes = 0;
        Ok(())
    }

    /// Everything pushed, in order (at most `limit` items).
    pub fn finish(mut self) -> CommandResult<Sorted<T>> {
        if self.runs.is_empty() {
            self.sort_entries()?;
            return Ok(Sorted::Memory(
                self.entries.drain(..).map(|entry| entry.item).collect(),
            ));
        }
        if !self.entries.is_empty() {
            self.spill()?;
        }
        let mut merge = Merge {
            order: self.order.clone(),
            readers: Vec::new(),
            heap: BinaryHeap::new(),
            remaining: self.limit,
            runs: std::mem::take(&mut self.runs),
            items: std::marker::PhantomData,
        };
        for (index, run) in merge.runs.iter().enumerate() {
            let mut reader = run.reader()?;
            if let Some(head) = reader.next_entry()? {
                merge.heap.push(MergeHead {
                    order: merge.order.clone(),
                    key: head.0,
                    seq: head.1,
                    document: head.2,
                    run: index,
                });
            }
            merge.readers.push(reader);
        }
        Ok(Sorted::Merge(Box::new(merge)))
    }
}

fn entry_bytes<T: Spillable>(key: &[Bson], item: &T) -> usize {
    let key_bytes: usize = key
        .iter()
        .map(|value| tideway_base::bsonutil::encoded_size(&doc! {"": value.clone()}))
        .sum();
    item.memory_bytes() + key_bytes + ENTRY_OVERHEAD_BYTES
}

fn compare_entries<T>(order: &KeyOrder, a: &Entry<T>, b: &Entry<T>) -> Ordering {
    order(&a.key, &b.key).then(a.seq.cmp(&b.seq))
}

/// The sorted output: from memory, or merged from runs on disk.
pub enum Sorted<T> {
    Memory(VecDeque<T>),
    Merge(Box<Merge<T>>),
}

impl<T: Spillable> Sorted<T> {
    pub fn next_item(&mut self) -> CommandResult<Option<T>> {
        match self {
            Sorted::Memory(items) => Ok(items.pop_front()),
            Sorted::Merge(merge) => merge.next_item(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Sorted::Memory(items) => items.is_empty(),
            Sorted::Merge(merge) => merge.heap.is_empty() || merge.remaining == Some(0),
        }
    }
}

impl<T: Spillable> Iterator for Sorted<T> {
    type Item = CommandResult<T>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}

/// A k-way merge of sorted runs: one item per run in memory.
pub struct Merge<T> {
    order: KeyOrder,
    readers: Vec<RunReader>,
    heap: BinaryHeap<MergeHead>,
    remaining: Option<usize>,
    /// Owns the files (deleted on drop).
    runs: Vec<SpillFile>,
    items: std::marker::PhantomData<T>,
}

impl<T: Spillable> Merge<T> {
    fn next_item(&mut self) -> CommandResult<Option<T>> {
        if self.remaining == Some(0) {
            return Ok(None);
        }
        let Some(head) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(next) = self.readers[head.run].next_entry()? {
            self.heap.push(MergeHead {
                order: self.order.clone(),
                key: next.0,
                seq: next.1,
                document: next.2,
                run: head.run,
            });
        }
        if let Some(remaining) = &mut self.remaining {
            *remaining -= 1;
        }
        T::from_document(head.document)
            .map(Some)
            .ok_or_else(|| CommandError::internal("a spilled item did not read back"))
    }
}

/// The next item of one run, ordered for a max-heap so the smallest pops first.
struct MergeHead {
    order: KeyOrder,
    key: Vec<Bson>,
    seq: u64,
    document: Document,
    run: usize,
}

impl MergeHead {
    fn compare(&self, other: &Self) -> Ordering {
        (self.order)(&self.key, &other.key).then(self.seq.cmp(&other.seq))
    }
}

impl PartialEq for MergeHead {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other) == Ordering::Equal
    }
}

impl Eq for MergeHead {}

impl PartialOrd for MergeHead {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MergeHead {
    fn cmp(&self, other: &Self) -> Ordering {
        self.compare(other).reverse()
    }
}

/// A temporary file of BSON documents, deleted when dropped.
struct SpillFile {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
}

static NEXT_SPILL_FILE: AtomicU64 = AtomicU64::new(0);

fn spill_error(what: &str, path: &Path, error: &std::io::Error) -> CommandError {
    let code = if error.kind() == std::io::ErrorKind::StorageFull {
        ErrorCode::OutOfDiskSpace
    } else {
        ErrorCode::InternalError
    };
    CommandError::new(code, format!("{what} {}: {error}", path.display()))
}

impl SpillFile {
    fn create(dir: &Path) -> CommandResult<SpillFile> {
        std::fs::create_dir_all(dir)
            .map_err(|error| spill_error("cannot create the spill directory", dir, &error))?;
        let path = dir.join(format!(
            "sort-{}-{}.bson",
            std::process::id(),
            NEXT_SPILL_FILE.fetch_add(1, AtomicOrdering::Relaxed)
        ));
        let file = File::create(&path)
            .map_err(|error| spill_error("cannot create the spill file", &path, &error))?;
        Ok(SpillFile {
            path,
            writer: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    fn write(&mut self, document: &Document) -> CommandResult<()> {
        let bytes =
            tideway_base::bsonutil::encode_document(document).map_err(CommandError::internal)?;
        if let Some(writer) = &mut self.writer {
            writer
                .write_all(&bytes)
                .map_err(|error| spill_error("cannot write the spill file", &self.path, &error))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> CommandResult<()> {
        if let Some(mut writer) = self.writer.take() {
            writer
                .flush()
                .map_err(|error| spill_error("cannot write the spill file", &self.path, &error))?;
        }
        Ok(())
    }

    fn reader(&self) -> CommandResult<RunReader> {
        let file = File::open(&self.path)
            .map_err(|error| spill_error("cannot read the spill file", &self.path, &error))?;
        Ok(RunReader {
            reader: BufReader::with_capacity(64 * 1024, file),
            path: self.path.clone(),
        })
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        self.writer.take();
        let _ = std::fs::remove_file(&self.path);
    }
}

struct RunReader {
    reader: BufReader<File>,
    path: PathBuf,
}

impl RunReader {
    /// The next (key, sequence, item) of the run.
    fn next_entry(&mut self) -> CommandResult<Option<(Vec<Bson>, u64, Document)>> {
        let failed =
            |error: std::io::Error| spill_error("cannot read the spill file", &self.path, &error);
        let mut length = [0u8; 4];
        match self.reader.read_exact(&mut length) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(error) => return Err(failed(error)),
        }
        let size = i32::from_le_bytes(length);
        let size = usize::try_from(size)
            .ok()
            .filter(|size| *size >= 5)
            .ok_or_else(|| CommandError::internal("corrupt spill file"))?;
        let mut bytes = vec![0u8; size];
        bytes[..4].copy_from_slice(&length);
        self.reader.read_exact(&mut bytes[4..]).map_err(failed)?;
        let mut entry =
            tideway_base::bsonutil::decode_document(&bytes).map_err(CommandError::internal)?;
        let key = match entry.remove("k") {
            Some(Bson::Array(key)) => key,
            _ => return Err(CommandError::internal("corrupt spill file")),
        };
        let seq = entry.get_i64("s").unwrap_or(0) as u64;
        let item = match entry.remove("d") {
            Some(Bson::Document(item)) => item,
            _ => return Err(CommandError::internal("corrupt spill file")),
        };
        Ok(Some((key, seq, item)))
    }
}

/// Removes spill files a previous process left in `dir` (it was killed mid-sort).
pub fn clear_spill_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("sort-") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::compare_values;
    use std::sync::Arc;

    fn ascending() -> KeyOrder {
        Arc::new(|a: &[Bson], b: &[Bson]| compare_values(&a[0], &b[0]))
    }

    fn limits(dir: &Path, max_memory_bytes: usize, allow_disk_use: bool) -> SortLimits {
        SortLimits {
            max_memory_bytes,
            allow_disk_use,
            spill_dir: dir.to_path_buf(),
            exceeded_message: sort_exceeded_message(max_memory_bytes),
            deadline: Deadline::none(),
        }
    }

    /// 2,000 documents with keys in a scrambled order, several per key.
    fn input() -> Vec<(i32, Document)> {
        (0..2000)
            .map(|i| {
                let key = (i * 7919) % 500;
                (key, doc! {"key": key, "i": i, "pad": "x".repeat(100)})
            })
            .collect()
    }

    fn expected(limit: Option<usize>) -> Vec<(i32, i32)> {
        let mut all: Vec<(i32, i32)> = input()
            .into_iter()
            .map(|(key, document)| (key, document.get_i32("i").unwrap()))
            .collect();
        // Stable: equal keys in input order.
        all.sort_by_key(|(key, _)| *key);
        all.truncate(limit.unwrap_or(usize::MAX));
        all
    }

    fn run(dir: &Path, max_memory_bytes: usize, limit: Option<usize>) -> (Vec<(i32, i32)>, bool) {
        let mut sorter = Sorter::new(ascending(), limit, limits(dir, max_memory_bytes, true));
        for (key, document) in input() {
            sorter.push(vec![Bson::Int32(key)], document).unwrap();
        }
        let spilled = sorter.spilled();
        let output = sorter
            .finish()
            .unwrap()
            .map(|document| {
                let document = document.unwrap();
                (
                    document.get_i32("key").unwrap(),
                    document.get_i32("i").unwrap(),
                )
            })
            .collect();
        (output, spilled)
    }

    #[test]
    fn in_memory_and_spilled_sorts_agree_and_are_stable() {
        let dir = tempfile::tempdir().unwrap();
        let (in_memory, spilled) = run(dir.path(), usize::MAX, None);
        assert!(!spilled);
        assert_eq!(in_memory, expected(None));
        let (merged, spilled) = run(dir.path(), 20_000, None);
        assert!(spilled);
        assert_eq!(merged, expected(None));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "runs deleted"
        );
    }

    #[test]
    fn top_k_keeps_the_first_k_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for limit in [1, 5, 150, 5000] {
            assert_eq!(
                run(dir.path(), usize::MAX, Some(limit)).0,
                expected(Some(limit))
            );
            assert_eq!(
                run(dir.path(), 20_000, Some(limit)).0,
                expected(Some(limit))
            );
        }
        // A small k never spills however much goes in.
        assert!(!run(dir.path(), 20_000, Some(10)).1);
    }

    #[test]
    fn without_disk_use_the_limit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter = Sorter::new(ascending(), None, limits(dir.path(), 20_000, false));
        let error = input()
            .into_iter()
            .map(|(key, document)| sorter.push(vec![Bson::Int32(key)], document))
            .find_map(Result::err)
            .expect("the limit is reached");
        assert_eq!(
            error.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
        );
        assert!(error
            .errmsg
            .starts_with("Sort exceeded memory limit of 20000 bytes"));
    }

    #[test]
    fn a_passed_deadline_stops_the_sort() {
        let dir = tempfile::tempdir().unwrap();
        let mut limits = limits(dir.path(), usize::MAX, true);
        limits.deadline = Deadline::at(std::time::Instant::now());
        let mut sorter = Sorter::new(ascending(), None, limits);
        for (key, document) in input() {
            sorter.push(vec![Bson::Int32(key)], document).unwrap();
        }
        let error = sorter.finish().err().expect("the deadline has passed");
        assert_eq!(error.code, ErrorCode::MaxTimeMSExpired);
    }

    #[test]
    fn empty_keys_keep_input_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter: Sorter<Document> = Sorter::new(
            Arc::new(|_: &[Bson], _: &[Bson]| Ordering::Equal),
            None,
            limits(dir.path(), 10_000, true),
        );
        for i in 0..500 {
            sorter
                .push(Vec::new(), doc! {"i": i, "pad": "y".repeat(50)})
                .unwrap();
        }
        let order: Vec<i32> = sorter
            .finish()
            .unwrap()
            .map(|document| document.unwrap().get_i32("i").unwrap())
            .collect();
        assert_eq!(order, (0..500).collect::<Vec<_>>());
    }
}
