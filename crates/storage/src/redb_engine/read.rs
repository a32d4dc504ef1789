//! Reads: point gets, paged scans (collection, index or expiry table; forward or reverse; keyset
//! resume) and size statistics. Each call is one short redb read transaction that ends before it
//! returns; nothing here blocks on the writer. Every paged scan shares [`page`].
//!
//! Scan ranges are over encoded index keys and are treated as key *prefixes*: an Included bound
//! `b` covers every stored key starting with `b` (for non-unique indexes the stored key is the
//! index key followed by the `_id` suffix), an Excluded bound excludes them. Resume keys are
//! stored keys of the scanned table; the next page starts strictly after (before, in reverse).
//!
//! Collection scans read natural order: the `n.` table (record id → `_id` key) of a collection
//! that is not clustered, fetching each document from the data table, or the data table itself
//! (`_id` order) of a clustered one. Their resume keys are record ids, which are never reused, so
//! a resume key whose document is gone still marks a place; only a capped collection refuses to
//! go on from one (`ScanPage::position_lost`).
//!
//! Expiry scans (`lw.`/`ox.` tables) turn an i64 time range into a range over the 8-byte
//! order-preserving time prefix of the stored keys; resume keys are stored keys there too. They
//! read one index entry and one record per returned document, whatever the collection's size.
//!
//! Must not: keep a read transaction beyond one call, or return fewer records than the ranges
//! describe (dangling index entries are skipped; they point to no document).

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::Document;
use redb::{ReadOnlyTable, ReadTransaction, ReadableTableMetadata, TableError};

use super::catalog::Catalog;
use super::catalog::{CollectionEntry, IndexEntry};
use super::format::{
    bytes_table, decode_record, entry_id, entry_type_bits, expiry_entry_id, io, raw_record,
    record_header, record_id_key, ENTRY_OVERHEAD_BYTES, RECORD_HEADER_LEN, SIZES,
};
use super::writer::Shared;
pub(super) use crate::entry_keys::{after_resume, expiry_range, is_empty, stored_range};
use crate::{
    CollectionStats, EntryCount, ExpiryOrder, IndexKind, IndexSpec, KeyRange, Namespace,
    ReapSource, Record, RecordPredicate, ScanPage, ScanRequest, ScanSource, StorageError,
    StorageResult, TtlClass,
};
use tideway_query::keycodec::encode_id;

pub(super) type BytesReadTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// A page reads at most this many entries per record it may return, and at least
/// [`MIN_VISITS`].
const VISITS_PER_RECORD: usize = 16;
const MIN_VISITS: usize = 1024;

pub(super) fn begin(shared: &Shared) -> StorageResult<ReadTransaction> {
    shared.db.begin_read()
}

/// A read transaction and the catalog it reads under. [`View::begin`] reads the catalog first:
/// it may be older than the data (a table it names may be gone: read as empty), never newer.
/// [`View::consistent`] waits out catalog changes being committed, so the two describe the
/// same commit (a transaction's snapshot).
pub(super) struct View {
    pub txn: ReadTransaction,
    pub catalog: Arc<Catalog>,
}

impl View {
    pub fn begin(shared: &Shared) -> StorageResult<View> {
        let catalog = shared.catalog();
        Ok(View {
            txn: begin(shared)?,
            catalog,
        })
    }

    /// A view whose catalog is exactly the one committed with its data: no catalog change was
    /// between committing and publishing while it was taken (the writer's `catalog_seq` is even
    /// and unchanged across).
    pub async fn consistent(shared: &Shared) -> StorageResult<View> {
        loop {
            let before = shared.catalog_seq.load(Ordering::Acquire);
            if before.is_multiple_of(2) {
                let view = View::begin(shared)?;
                if shared.catalog_seq.load(Ordering::Acquire) == before {
                    return Ok(view);
                }
            }
            tokio::task::yield_now().await;
        }
    }

    fn entry(&self, ns: &Namespace) -> Option<&Arc<CollectionEntry>> {
        self.catalog.collections.get(ns)
    }
}

/// A data or index table, or `None` if it was never written (or was dropped meanwhile).
pub(super) fn open_table(
    txn: &ReadTransaction,
    name: &str,
) -> StorageResult<Option<BytesReadTable>> {
    match txn.open_table(bytes_table(name)) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(error) => Err(io(error)),
    }
}

pub(super) fn get(view: &View, ns: &Namespace, id: &bson::Bson) -> StorageResult<Option<Record>> {
    let Some(entry) = view.entry(ns) else {
        return Ok(None);
    };
    let Some(data) = open_table(&view.txn, &entry.data_table)? else {
        return Ok(None);
    };
    let record = data.get(encode_id(id).as_slice()).map_err(io)?;
    record
        .map(|record| decode_record(record.value()))
        .transpose()
}

/// The session record header under `key` (`Storage::session_record`).
pub(super) fn session_record(shared: &Shared, key: &[u8]) -> StorageResult<Option<Document>> {
    super::sessions::header(&begin(shared)?, key)
}

/// The statements of `txn_number` recorded for session `key` (`Storage::session_statements`).
pub(super) fn session_statements(
    shared: &Shared,
    key: &[u8],
    txn_number: i64,
) -> StorageResult<Vec<(i32, Document)>> {
    super::sessions::statements(&begin(shared)?, key, txn_number)
}

/// Every session record header, in key order (`Storage::session_records`).
pub(super) fn session_records(shared: &Shared) -> StorageResult<Vec<(Vec<u8>, Document)>> {
    super::sessions::headers(&begin(shared)?)
}

pub(super) fn as_slices(range: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        range.0.as_ref().map(Vec::as_slice),
        range.1.as_ref().map(Vec::as_slice),
    )
}

/// A scan page; with `positioned`, every page lists each record's stored key
/// (`ScanPage::positions`), as collection scans of a capped collection always do.
pub(super) fn scan(
    view: &View,
    ns: &Namespace,
    request: ScanRequest,
    positioned: bool,
) -> StorageResult<ScanPage> {
    let empty = ScanPage::default();
    let Some(entry) = view.entry(ns) else {
        return Ok(empty);
    };
    // An `_id_` scan reads the data table by its keys: each entry is a key and a document.
    let reads_index = matches!(request.source, ScanSource::Index { .. });
    let (index, ranges): (Option<&IndexEntry>, Vec<KeyRange>) = match request.source {
        ScanSource::Collection => (None, vec![(Bound::Unbounded, Bound::Unbounded)]),
        ScanSource::Index { name, ranges } => {
            let ranges = ranges.into_iter().filter_map(stored_range).collect();
            if name == IndexSpec::ID_INDEX_NAME {
                (None, ranges)
            } else {
                let index = entry
                    .index_named(&name)
                    .ok_or(StorageError::IndexNotFound(name))?;
                (Some(index), ranges)
            }
        }
    };
    let txn = &view.txn;
    let Some(data) = open_table(txn, &entry.data_table)? else {
        return Ok(empty);
    };
    let index_table = match index {
        // Catalog-only indexes have no entries (and no table).
        Some(index) if !index.maintained() => return Ok(empty),
        Some(index) => match open_table(txn, &index.table)? {
            Some(table) => Some(table),
            None => return Ok(empty),
        },
        None => None,
    };
    // A collection scan reads natural order: the `n.` table (record id → `_id` key), except in
    // a clustered collection, whose data table is in `_id` order. Positions are record ids.
    let natural = match (&index, reads_index, entry.natural_table.as_deref()) {
        (None, false, Some(name)) => match open_table(txn, name)? {
            Some(table) => Some(table),
            None => return Ok(empty),
        },
        _ => None,
    };
    let capped = natural.is_some() && entry.meta.capped().is_some();
    // A capped scan resumes exactly where it stopped or not at all: if the entry it stopped at
    // is gone (rolled over, deleted), documents would be skipped unseen (mongod's
    // CappedPositionLost; the reader decides what to answer). Other scans go on after it.
    if let (Some(natural), Some(resume), true) = (&natural, request.resume_after.as_deref(), capped)
    {
        if natural.get(resume).map_err(io)?.is_none() {
            return Ok(ScanPage {
                position_lost: true,
                ..empty
            });
        }
    }
    let scanned = index_table.as_ref().or(natural.as_ref()).unwrap_or(&data);
    let hide = request.hide.as_ref();
    let key_filter = request.key_filter.as_ref();
    let covering =
        index.filter(|index| request.covered && index.spec().kind() == IndexKind::Ordered);
    page(
        scanned,
        ranges,
        request.resume_after.as_deref(),
        request.reverse,
        request.limit,
        reads_index,
        positioned || capped,
        |key, value| {
            if key_filter.is_some_and(|filter| !filter.holds(key)) {
                return Ok(Visit::Skipped);
            }
            if let Some(index) = covering {
                if let Some(bits) =
                    entry_type_bits(value, index.unique())?.filter(|_| hide.is_none())
                {
                    return covered_record(index, key, bits).map(Visit::Covered);
                }
            }
            let mut record = match index {
                None if natural.is_some() => fetch(&data, value, hide)?,
                None => unless_hidden(value, hide)?,
                Some(index) => fetch(&data, entry_id(key, value, index.unique())?, hide)?,
            };
            if let (Some(index), Some(record)) = (covering, record.as_mut()) {
                record.doc = index.keyer.key_fields_of(&record.doc).into();
            }
            Ok(Visit::Read(record))
        },
    )
}

/// The stored key an entry of index `index` for `index_key` and `id_key` has (or would have):
/// what a positioned scan reports and resumes after. `None` for an index the catalog does not
/// have.
pub(super) fn entry_position(
    view: &View,
    ns: &Namespace,
    index: &str,
    index_key: &[u8],
    id_key: &[u8],
) -> Option<Vec<u8>> {
    if index == IndexSpec::ID_INDEX_NAME {
        return Some(id_key.to_vec());
    }
    let entry = view.entry(ns)?.index_named(index)?;
    Some(super::format::entry_key(index_key, id_key, entry.unique()))
}

/// The position a collection scan gives the stored document `id_key` (its record id, or its
/// `_id` key in a clustered collection); `None` if it is not stored.
pub(super) fn record_position(
    view: &View,
    ns: &Namespace,
    id_key: &[u8],
) -> StorageResult<Option<Vec<u8>>> {
    let Some(entry) = view.entry(ns) else {
        return Ok(None);
    };
    let Some(data) = open_table(&view.txn, &entry.data_table)? else {
        return Ok(None);
    };
    let Some(record) = data.get(id_key).map_err(io)? else {
        return Ok(None);
    };
    Ok(Some(match entry.natural_table.as_deref() {
        Some(_) => record_id_key(record_header(record.value())?.record_id).to_vec(),
        None => id_key.to_vec(),
    }))
}

/// The position a collection scan of the view would give a document inserted after it, the
/// `insert_order`-th (see `Snapshot::appended_position`): u64::MAX ++ `insert_order`, both big
/// endian, which sorts after every record id (ids are revisions, far below u64::MAX), or its
/// `_id` key in a clustered collection. Never stored; a scan resumed after it has nothing more.
pub(super) fn appended_position(
    view: &View,
    ns: &Namespace,
    id_key: &[u8],
    insert_order: u64,
) -> Option<Vec<u8>> {
    let entry = view.entry(ns)?;
    Some(match entry.natural_table.as_deref() {
        Some(_) => [record_id_key(u64::MAX), record_id_key(insert_order)].concat(),
        None => id_key.to_vec(),
    })
}

/// What one entry of a paged scan gave.
enum Visit {
    /// Rejected by its key; no document was read.
    Skipped,
    /// A document was read (`None`: hidden, or the entry dangles).
    Read(Option<Record>),
    /// The entry's key answered for its document (a covered read).
    Covered(Record),
}

/// The record a covered read makes of an index entry with type bits.
fn covered_record(index: &IndexEntry, key: &[u8], type_bits: &[u8]) -> StorageResult<Record> {
    Ok(Record {
        doc: index.keyer.covered_document(key, type_bits)?.into(),
        rev: 0,
        last_write_ms: 0,
        ttl: TtlClass::Never,
    })
}

/// The record of `id_key` unless `hide` holds for it; `None` also if the entry pointing to it
/// dangles.
fn fetch(
    data: &BytesReadTable,
    id_key: &[u8],
    hide: Option<&RecordPredicate>,
) -> StorageResult<Option<Record>> {
    match data.get(id_key).map_err(io)? {
        Some(record) => unless_hidden(record.value(), hide),
        None => Ok(None),
    }
}

/// The decoded record, or `None` if `hide` holds for it (judged before decoding the document).
fn unless_hidden(record: &[u8], hide: Option<&RecordPredicate>) -> StorageResult<Option<Record>> {
    if let Some(hide) = hide {
        if hide.holds(&raw_record(record)?) {
            return Ok(None);
        }
    }
    decode_record(record).map(Some)
}

/// One page of `scanned` over stored-key `ranges` (in scan order, already stored ranges),
/// strictly after `resume`; `visit` maps a (key, value) entry to its record. `resume` in the
/// result is the last entry's key when more may follow. `reads_index`: entries are index keys
/// (counted as keys examined), not documents. `with_positions`: the page lists the key of each
/// record it holds (`ScanPage::positions`).
#[allow(clippy::too_many_arguments)]
fn page(
    scanned: &BytesReadTable,
    mut ranges: Vec<KeyRange>,
    resume: Option<&[u8]>,
    reverse: bool,
    limit: usize,
    reads_index: bool,
    with_positions: bool,
    visit: impl Fn(&[u8], &[u8]) -> StorageResult<Visit>,
) -> StorageResult<ScanPage> {
    let limit = limit.max(1);
    // Skipped entries (hidden records, dangling entries) count too, so one call stays short.
    let max_visited = limit.saturating_mul(VISITS_PER_RECORD).max(MIN_VISITS);
    if reverse {
        ranges.reverse();
    }
    let mut records = Vec::new();
    let mut positions = Vec::new();
    let mut visited = 0;
    let mut docs_examined = 0;
    let mut last_key: Option<Vec<u8>> = None;
    for range in &ranges {
        let range = after_resume(range, resume, reverse);
        if is_empty(&range) {
            continue;
        }
        let mut entries = scanned.range::<&[u8]>(as_slices(&range)).map_err(io)?;
        loop {
            let next = if reverse {
                entries.next_back()
            } else {
                entries.next()
            };
            let Some(item) = next else {
                break;
            };
            if records.len() == limit || visited == max_visited {
                // There is at least one more entry.
                return Ok(ScanPage {
                    records,
                    last: last_key.clone(),
                    resume: last_key,
                    keys_examined: if reads_index { visited as u64 } else { 0 },
                    docs_examined,
                    positions,
                    position_lost: false,
                });
            }
            visited += 1;
            let (key, value) = item.map_err(io)?;
            let key = key.value();
            match visit(key, value.value())? {
                Visit::Read(record) => {
                    docs_examined += 1;
                    if with_positions && record.is_some() {
                        positions.push(key.to_vec());
                    }
                    records.extend(record);
                }
                Visit::Covered(record) => {
                    if with_positions {
                        positions.push(key.to_vec());
                    }
                    records.push(record)
                }
                Visit::Skipped => {}
            }
            last_key = Some(key.to_vec());
        }
    }
    Ok(ScanPage {
        records,
        resume: None,
        last: last_key,
        keys_examined: if reads_index { visited as u64 } else { 0 },
        docs_examined,
        positions,
        position_lost: false,
    })
}

pub(super) fn expiry_scan(
    shared: &Shared,
    ns: &Namespace,
    order: ExpiryOrder,
    range: (Bound<i64>, Bound<i64>),
    resume_after: Option<&[u8]>,
    limit: usize,
) -> StorageResult<ScanPage> {
    let empty = ScanPage::default();
    let Some(entry) = shared.catalog().collections.get(ns).cloned() else {
        return Ok(empty);
    };
    let Some(range) = expiry_range(range) else {
        return Ok(empty);
    };
    let txn = begin(shared)?;
    let (Some(data), Some(expiry)) = (
        open_table(&txn, &entry.data_table)?,
        open_table(&txn, &entry.expiry_table(order))?,
    ) else {
        return Ok(empty);
    };
    page(
        &expiry,
        vec![range],
        resume_after,
        false,
        limit,
        true,
        false,
        |key, _| fetch(&data, expiry_entry_id(key)?, None).map(Visit::Read),
    )
}

/// How to read the `_id` key out of an entry of a source table.
#[derive(Clone, Copy)]
pub(super) enum EntryId {
    /// Expiry tables: the key after its time prefix.
    Expiry,
    /// Index tables.
    Index { unique: bool },
    /// The data table (the `_id_` index): the key is the `_id` key.
    Data,
}

impl EntryId {
    pub fn of<'a>(self, key: &'a [u8], value: &'a [u8]) -> StorageResult<&'a [u8]> {
        match self {
            EntryId::Expiry => expiry_entry_id(key),
            EntryId::Index { unique } => entry_id(key, value, unique),
            EntryId::Data => Ok(key),
        }
    }
}

/// A source's table, read.
pub(super) struct SourceTable {
    pub table: BytesReadTable,
    /// The source's range, as stored keys.
    pub range: KeyRange,
    pub ids: EntryId,
    /// Each document has at most one entry (expiry tables; indexes not multikey).
    pub one_per_document: bool,
}

/// The table of `source`; `None` if the table (or index) does not exist or the range is empty.
pub(super) fn source_table(
    txn: &ReadTransaction,
    entry: &CollectionEntry,
    source: &ReapSource,
) -> StorageResult<Option<SourceTable>> {
    let (name, range, ids, one_per_document) = match source {
        ReapSource::Expiry { order, range } => (
            entry.expiry_table(*order),
            expiry_range(*range),
            EntryId::Expiry,
            true,
        ),
        // `_id_` is the data table itself, keyed by `_id` (a clustered collection's TTL).
        ReapSource::Index { name, range } if name == IndexSpec::ID_INDEX_NAME => (
            entry.data_table.clone(),
            stored_range(range.clone()),
            EntryId::Data,
            true,
        ),
        ReapSource::Index { name, range } => {
            let Some(index) = entry.index_named(name).filter(|index| index.maintained()) else {
                return Ok(None);
            };
            (
                index.table.clone(),
                stored_range(range.clone()),
                EntryId::Index {
                    unique: index.unique(),
                },
                !index.multikey,
            )
        }
    };
    let (Some(table), Some(range)) = (open_table(txn, &name)?, range) else {
        return Ok(None);
    };
    Ok(Some(SourceTable {
        table,
        range,
        ids,
        one_per_document,
    }))
}

pub(super) fn count_entries(
    view: &View,
    ns: &Namespace,
    sources: &[ReapSource],
) -> StorageResult<EntryCount> {
    let Some(entry) = view.entry(ns) else {
        return Ok(EntryCount::default());
    };
    let Some(data) = open_table(&view.txn, &entry.data_table)? else {
        return Ok(EntryCount::default());
    };
    let mut tables = Vec::new();
    for source in sources {
        tables.extend(source_table(&view.txn, entry, source)?);
    }
    // No document in two sources: one source, or only expiry tables (a document is in one).
    let disjoint = tables.len() <= 1
        || tables
            .iter()
            .all(|table| matches!(table.ids, EntryId::Expiry));
    let in_sources = if disjoint && tables.iter().all(|table| table.one_per_document) {
        let mut entries = 0;
        for table in &tables {
            entries += range_len(&table.table, &table.range)?;
        }
        entries
    } else {
        distinct_ids(&tables)?
    };
    Ok(EntryCount {
        documents: data.len().map_err(io)?,
        in_sources,
    })
}

/// The entries of `table` in `range`, found by counting the range and the rest of the table
/// together until either ends: twice the smaller of the two at most.
fn range_len(table: &BytesReadTable, range: &KeyRange) -> StorageResult<u64> {
    let total = table.len().map_err(io)?;
    let (lower, upper) = as_slices(range);
    let mut inside = table.range::<&[u8]>((lower, upper)).map_err(io)?;
    let below = flip(lower)
        .map(|end| table.range::<&[u8]>((Bound::Unbounded, end)))
        .transpose()
        .map_err(io)?;
    let above = flip(upper)
        .map(|start| table.range::<&[u8]>((start, Bound::Unbounded)))
        .transpose()
        .map_err(io)?;
    let mut outside = below
        .into_iter()
        .flatten()
        .chain(above.into_iter().flatten());
    let (mut counted_inside, mut counted_outside) = (0, 0);
    loop {
        match inside.next() {
            None => return Ok(counted_inside),
            Some(item) => item.map(|_| counted_inside += 1).map_err(io)?,
        }
        match outside.next() {
            None => return Ok(total.saturating_sub(counted_outside)),
            Some(item) => item.map(|_| counted_outside += 1).map_err(io)?,
        }
    }
}

/// The complement of a range bound (`..lower` below a range, `upper..` above it); `None` for
/// `Unbounded` (nothing lies beyond it).
fn flip(bound: Bound<&[u8]>) -> Option<Bound<&[u8]>> {
    match bound {
        Bound::Included(key) => Some(Bound::Excluded(key)),
        Bound::Excluded(key) => Some(Bound::Included(key)),
        Bound::Unbounded => None,
    }
}

/// The distinct documents the entries of `tables` in their ranges point to.
fn distinct_ids(tables: &[SourceTable]) -> StorageResult<u64> {
    let each_id = |visit: &mut dyn FnMut(&[u8])| -> StorageResult<()> {
        for source in tables {
            for item in source
                .table
                .range::<&[u8]>(as_slices(&source.range))
                .map_err(io)?
            {
                let (key, value) = item.map_err(io)?;
                visit(source.ids.of(key.value(), value.value())?);
            }
        }
        Ok(())
    };
    // By a 64-bit hash of their `_id` key, without copying keys. A repeated hash is a document
    // with several entries in range or, very rarely, a collision: only then are the ids
    // themselves compared.
    let mut hashes = Vec::new();
    each_id(&mut |id| hashes.push(fx_hash(id)))?;
    hashes.sort_unstable();
    if hashes.windows(2).all(|pair| pair[0] != pair[1]) {
        return Ok(hashes.len() as u64);
    }
    let mut ids = std::collections::HashSet::new();
    each_id(&mut |id| {
        ids.insert(id.to_vec());
    })?;
    Ok(ids.len() as u64)
}

/// A fast 64-bit hash of a key (FxHash's mixing, 8 bytes at a time). Not collision-resistant:
/// callers treat equal hashes as "maybe equal" and compare the keys.
fn fx_hash(bytes: &[u8]) -> u64 {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut hash = bytes.len() as u64;
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(SEED);
    }
    hash
}

/// Sizes of one collection from the `sizes` counters and the data table's entry count, all O(1).
///
/// Estimates: `storage_size` = key + value bytes of the data table + [`ENTRY_OVERHEAD_BYTES`]
/// per document; `_id_` = the data table's key bytes + overhead per document; other indexes =
/// key + value bytes of their table + overhead per entry. Page slack is not counted.
fn collection_stats(
    txn: &ReadTransaction,
    entry: &CollectionEntry,
) -> StorageResult<CollectionStats> {
    let sizes = txn.open_table(SIZES).map_err(io)?;
    let table_sizes = |name: &str| -> StorageResult<(u64, u64, u64)> {
        let entries = match open_table(txn, name)? {
            Some(table) => table.len().map_err(io)?,
            None => 0,
        };
        let (key_bytes, value_bytes) = sizes
            .get(name)
            .map_err(io)?
            .map(|sizes| sizes.value())
            .unwrap_or((0, 0));
        Ok((entries, key_bytes, value_bytes))
    };
    let (count, key_bytes, value_bytes) = table_sizes(&entry.data_table)?;
    let overhead = count * ENTRY_OVERHEAD_BYTES;
    let mut index_sizes = vec![(IndexSpec::ID_INDEX_NAME.to_string(), key_bytes + overhead)];
    for index in &entry.indexes {
        let (entries, key_bytes, value_bytes) = table_sizes(&index.table)?;
        index_sizes.push((
            index.spec().name.clone(),
            key_bytes + value_bytes + entries * ENTRY_OVERHEAD_BYTES,
        ));
    }
    Ok(CollectionStats {
        count,
        data_size: value_bytes.saturating_sub(count * RECORD_HEADER_LEN as u64),
        storage_size: key_bytes + value_bytes + overhead,
        index_sizes,
    })
}

pub(super) fn stats(view: &View, ns: &Namespace) -> StorageResult<CollectionStats> {
    let Some(entry) = view.entry(ns) else {
        return Err(StorageError::NamespaceNotFound(ns.clone()));
    };
    collection_stats(&view.txn, entry)
}

pub(super) fn list_databases(shared: &Shared) -> StorageResult<Vec<(String, u64)>> {
    let catalog = shared.catalog();
    let txn = begin(shared)?;
    let mut databases: Vec<(String, u64)> = Vec::new();
    // The catalog is ordered by namespace, so each database's collections are adjacent.
    for entry in catalog.collections.values() {
        let size = collection_stats(&txn, entry)?.storage_size;
        match databases.last_mut() {
            Some((db, total)) if *db == entry.meta.ns.db => *total += size,
            _ => databases.push((entry.meta.ns.db.clone(), size)),
        }
    }
    Ok(databases)
}
