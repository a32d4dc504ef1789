//! Reaping ([`crate::Storage::reap`]) in two phases. On the caller's task, in a read
//! transaction: read a batch of candidates from an ordered expiry structure, keep those the
//! caller's predicate finds expired, and compute everything their deletion touches (index,
//! expiry and natural order entries). On the writer thread, as one background job: delete each
//! of them that is still at the revision it was judged at, with those entries. The writer thus
//! spends no time decoding documents, and foreground writes wait less behind reaping.
//!
//! Keys leave each table as one sorted run: a run that is dense in its table (the source
//! structure's always is; `_id`s and the other structures' often are, since documents that expire
//! together were usually written together) goes in one cursor pass, a sparse one key by key. Cost
//! follows the entries read, never the collection's size.
//!
//! Invariants: a document rewritten after it was judged has a new revision and is left alone
//! (the next pass judges it again); keys computed under one set of indexes are used only under the
//! same set (otherwise they are recomputed from the record being removed). The write phase checks
//! nothing that can fail before it mutates except I/O: a record whose header does not parse is
//! kept, keys that cannot be computed leave dangling entries, which readers skip.

use redb::ReadableTable;

use super::apply::{append_entry, BytesTable, CollectionTables};
use super::catalog::StoredKeyer;
use super::format::{
    entry_key, expiry_key, expiry_position, io, raw_record, record_header, record_id_key,
};
use super::read::{
    after_resume, as_slices, begin, is_empty, open_table, source_table, BytesReadTable,
};
use super::writer::{Batch, Shared};
use crate::oplog::{self, Change};
use crate::{ExpiryOrder, Namespace, ReapRequest, RecordInstant, StorageResult};

/// Runs of fewer keys are always removed key by key.
const MIN_RUN: usize = 8;

/// What the read phase decided.
pub(super) struct ReapPlan {
    collection_id: u64,
    /// The maintained indexes the keys were computed for.
    index_ids: Vec<u64>,
    /// The documents to delete, sorted by `_id` key, distinct.
    doomed: Vec<Doomed>,
    /// Whether their `_id`s were dense in the data table.
    data_dense: bool,
    /// Their entries in each maintained index (`StoredKeyer` order): stored entry keys, or index
    /// keys for unique indexes (removed only while they still name the document).
    index_runs: Vec<KeyRun>,
    /// Their entries in the last-write and own-expiry tables.
    expiry_runs: [KeyRun; 2],
    /// Their entries in natural order (`n.`; none in a clustered collection).
    natural_run: KeyRun,
    /// Where the next batch starts, if the source may have more entries in range.
    pub resume: Option<Vec<u8>>,
    /// When each document expired, for its oplog entry.
    expire_at: Option<RecordInstant>,
}

impl ReapPlan {
    pub fn is_empty(&self) -> bool {
        self.doomed.is_empty()
    }

    pub fn len(&self) -> usize {
        self.doomed.len()
    }
}

/// A document judged expired at revision `rev`.
struct Doomed {
    id_key: Vec<u8>,
    rev: u64,
    record_len: usize,
}

/// Keys to remove from one table, sorted, each with the position in `ReapPlan::doomed` of the
/// document it belongs to.
#[derive(Default)]
struct KeyRun {
    keys: Vec<(Vec<u8>, usize)>,
    /// The keys were dense in their table when planned: one cursor pass removes them.
    dense: bool,
}

impl KeyRun {
    fn new(mut keys: Vec<(Vec<u8>, usize)>, table: Option<&BytesReadTable>) -> StorageResult<Self> {
        keys.sort_unstable();
        keys.dedup_by(|a, b| a.0 == b.0);
        let dense = match table {
            Some(table) => is_dense(table, keys.iter().map(|(key, _)| key.as_slice()))?,
            None => false,
        };
        Ok(KeyRun { keys, dense })
    }

    /// The keys of documents that were taken, in order.
    fn taken<'a>(&'a self, taken: &'a [bool]) -> impl Iterator<Item = (&'a [u8], usize)> + 'a {
        self.keys
            .iter()
            .filter(|(_, position)| taken[*position])
            .map(|(key, position)| (key.as_slice(), *position))
    }
}

/// The read phase: `None` if the collection or the source index does not exist.
pub(super) fn plan(
    shared: &Shared,
    ns: &Namespace,
    request: &ReapRequest,
) -> StorageResult<Option<ReapPlan>> {
    let Some(entry) = shared.catalog().collections.get(ns).cloned() else {
        return Ok(None);
    };
    let keyer = StoredKeyer::new(&entry);
    let txn = begin(shared)?;
    let (Some(data), Some(source)) = (
        open_table(&txn, &entry.data_table)?,
        source_table(&txn, &entry, &request.source)?,
    ) else {
        return Ok(None);
    };
    let range = after_resume(&source.range, request.resume_after.as_deref(), false);
    if is_empty(&range) {
        return Ok(None);
    }
    let limit = request.limit.max(1);
    let mut ids = Vec::with_capacity(limit);
    let mut resume = None;
    for item in source.table.range::<&[u8]>(as_slices(&range)).map_err(io)? {
        if ids.len() == limit {
            // There is at least one more entry.
            break;
        }
        let (key, value) = item.map_err(io)?;
        ids.push(source.ids.of(key.value(), value.value())?.to_vec());
        resume = Some(key.value().to_vec());
    }
    if ids.len() < limit {
        resume = None;
    }
    ids.sort_unstable();
    ids.dedup();

    let mut doomed = Vec::with_capacity(ids.len());
    let mut index_keys: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); keyer.indexes.len()];
    let mut expiry_keys: [Vec<(Vec<u8>, usize)>; 2] = Default::default();
    let mut natural_keys: Vec<(Vec<u8>, usize)> = Vec::new();
    let data_dense = visit_records(&data, &ids, |id_key, record| {
        let (Ok(raw), Ok(header)) = (raw_record(record), record_header(record)) else {
            return;
        };
        if !request.expired.holds(&raw) {
            return;
        }
        let position = doomed.len();
        let keys = keyer.keys(record).unwrap_or_default();
        for ((index, keys), run) in keyer.indexes.iter().zip(keys).zip(&mut index_keys) {
            for key in keys {
                let key = match index.unique() {
                    true => key,
                    false => entry_key(&key, id_key, false),
                };
                run.push((key, position));
            }
        }
        if let Some((order, at_ms)) = expiry_position(raw.ttl, raw.last_write_ms) {
            expiry_keys[expiry_slot(order)].push((expiry_key(at_ms, id_key), position));
        }
        natural_keys.push((record_id_key(header.record_id).to_vec(), position));
        doomed.push(Doomed {
            rev: raw.rev,
            record_len: record.len(),
            id_key: id_key.to_vec(),
        });
    })?;
    let mut index_runs = Vec::with_capacity(index_keys.len());
    for (index, keys) in keyer.indexes.iter().zip(index_keys) {
        // Unique entries go key by key (each must still name its document).
        let table = match index.unique() {
            true => None,
            false => open_table(&txn, &index.table)?,
        };
        index_runs.push(KeyRun::new(keys, table.as_ref())?);
    }
    let [last_write, own_expiry] = expiry_keys;
    let expiry_runs = [
        KeyRun::new(
            last_write,
            open_table(&txn, &entry.expiry_table(ExpiryOrder::LastWrite))?.as_ref(),
        )?,
        KeyRun::new(
            own_expiry,
            open_table(&txn, &entry.expiry_table(ExpiryOrder::OwnExpiry))?.as_ref(),
        )?,
    ];
    // Documents that expire together were usually inserted together: often dense here too.
    let natural_run = match entry.natural_table.as_deref() {
        Some(name) => KeyRun::new(natural_keys, open_table(&txn, name)?.as_ref())?,
        None => KeyRun::default(),
    };
    Ok(Some(ReapPlan {
        collection_id: entry.id,
        index_ids: keyer.index_ids(),
        doomed,
        data_dense,
        index_runs,
        expiry_runs,
        natural_run,
        resume,
        expire_at: request.expire_at.clone(),
    }))
}

fn expiry_slot(order: ExpiryOrder) -> usize {
    match order {
        ExpiryOrder::LastWrite => 0,
        ExpiryOrder::OwnExpiry => 1,
    }
}

/// The write phase: deletes the planned documents still at their judged revision; how many.
pub(super) fn apply(batch: &mut Batch, ns: &Namespace, plan: ReapPlan) -> StorageResult<u64> {
    let Some(entry) = batch.catalog().collections.get(ns).cloned() else {
        return Ok(0);
    };
    if entry.id != plan.collection_id {
        // Dropped (and perhaps recreated) since.
        return Ok(0);
    }
    let oplog = oplog::is_logged(ns)
        .then(|| {
            batch
                .catalog()
                .collections
                .get(&oplog::oplog_namespace())
                .cloned()
        })
        .flatten();
    let mut tables = CollectionTables::open(&batch.txn, &entry)?;
    let keys_valid = tables.keyer.index_ids() == plan.index_ids;
    let records = tables.take_unchanged(
        &plan.doomed,
        plan.data_dense,
        !keys_valid || oplog.is_some(),
    )?;
    let mut taken = vec![false; plan.doomed.len()];
    for (position, _) in &records {
        taken[*position] = true;
        let doomed = &plan.doomed[*position];
        tables.data_size.sub(doomed.id_key.len(), doomed.record_len);
    }
    if let Some(natural) = tables.natural.as_mut() {
        let keys: Vec<&[u8]> = plan.natural_run.taken(&taken).map(|(key, _)| key).collect();
        remove_sorted(natural, &keys, plan.natural_run.dense, |_, _| {})?;
    }
    if keys_valid {
        for (index, run) in tables.indexes.iter_mut().zip(&plan.index_runs) {
            if index.index.unique() {
                for (key, position) in run.taken(&taken) {
                    index.remove(key, &plan.doomed[position].id_key)?;
                }
            } else {
                let keys: Vec<&[u8]> = run.taken(&taken).map(|(key, _)| key).collect();
                let size = &mut index.size;
                remove_sorted(&mut index.table, &keys, run.dense, |key_len, value_len| {
                    size.sub(key_len, value_len)
                })?;
            }
        }
    } else {
        // The indexes changed since planning: their keys come from the records removed.
        for (position, record) in &records {
            let keys = tables
                .stored_keys(record.as_deref().unwrap_or_default())
                .unwrap_or_default();
            for (index, keys) in tables.indexes.iter_mut().zip(keys) {
                for key in keys {
                    index.remove(&key, &plan.doomed[*position].id_key)?;
                }
            }
        }
    }
    for (table, run) in [&mut tables.last_write, &mut tables.own_expiry]
        .into_iter()
        .zip(&plan.expiry_runs)
    {
        let keys: Vec<&[u8]> = run.taken(&taken).map(|(key, _)| key).collect();
        remove_sorted(table, &keys, run.dense, |_, _| {})?;
    }
    tables.save_sizes(&batch.txn)?;
    let mut oplog_tables = match &oplog {
        Some(oplog) => Some(CollectionTables::open(&batch.txn, oplog)?),
        None => None,
    };
    for (_, record) in &records {
        let ts = batch.counters.take_timestamp();
        let (Some(oplog_tables), Some(record)) = (oplog_tables.as_mut(), record) else {
            continue;
        };
        let raw = raw_record(record)?;
        let id = raw
            .doc
            .get("_id")
            .ok()
            .flatten()
            .and_then(|id| id.to_raw_bson().try_into().ok())
            .unwrap_or(bson::Bson::Null);
        let change = Change::Delete {
            id,
            expired_at_ms: plan.expire_at.as_ref().and_then(|rule| rule.of(&raw)),
        };
        let images =
            crate::oplog::wants_images(&entry.meta.options).then(|| crate::oplog::Images {
                before: bson::Document::try_from(raw.doc).ok(),
                after: None,
            });
        append_entry(
            oplog_tables,
            (ns, Some(entry.meta.uuid)),
            change,
            images,
            None,
            ts,
            &mut batch.counters,
        )?;
    }
    oplog_tables
        .map(|oplog_tables| oplog_tables.save_sizes(&batch.txn))
        .transpose()?;
    Ok(records.len() as u64)
}

impl CollectionTables<'_, '_> {
    /// Removes from the data table every document of `doomed` still at its revision: their
    /// positions in `doomed`, with the record when `keep_records`.
    fn take_unchanged(
        &mut self,
        doomed: &[Doomed],
        dense: bool,
        keep_records: bool,
    ) -> StorageResult<Vec<(usize, Option<Vec<u8>>)>> {
        let unchanged = |at: usize, record: &[u8]| {
            record_header(record).is_ok_and(|header| header.rev == doomed[at].rev)
        };
        let kept = |record: &[u8]| keep_records.then(|| record.to_vec());
        let (Some(first), Some(last)) = (doomed.first(), doomed.last()) else {
            return Ok(Vec::new());
        };
        if !dense {
            let mut taken = Vec::new();
            for (at, doomed) in doomed.iter().enumerate() {
                let id = doomed.id_key.as_slice();
                let record = match self.data.get(id).map_err(io)? {
                    Some(record) if unchanged(at, record.value()) => kept(record.value()),
                    _ => continue,
                };
                self.data.remove(id).map_err(io)?;
                taken.push((at, record));
            }
            return Ok(taken);
        }
        let mut member = sorted_member(doomed.iter().map(|doomed| doomed.id_key.as_slice()));
        let mut positions = Vec::with_capacity(doomed.len());
        let mut records = Vec::new();
        {
            let run = first.id_key.as_slice()..=last.id_key.as_slice();
            let extracted = self
                .data
                .extract_from_if(run, |id: &[u8], record: &[u8]| {
                    let hit = member(id).filter(|at| unchanged(*at, record));
                    positions.extend(hit);
                    hit.is_some()
                })
                .map_err(io)?;
            for item in extracted {
                let (_, record) = item.map_err(io)?;
                records.push(kept(record.value()));
            }
        }
        Ok(positions.into_iter().zip(records).collect())
    }
}

/// Membership in a sorted key sequence for keys asked in ascending order: the position of `key`
/// in `sorted`, found by walking forward (amortized O(1) per call).
fn sorted_member<'k>(sorted: impl Iterator<Item = &'k [u8]>) -> impl FnMut(&[u8]) -> Option<usize> {
    let mut sorted = sorted.enumerate().peekable();
    move |key: &[u8]| {
        while sorted.next_if(|(_, candidate)| *candidate < key).is_some() {}
        sorted
            .next_if(|(_, candidate)| *candidate == key)
            .map(|(position, _)| position)
    }
}

/// Calls `visit` with each of `ids` (sorted, distinct) that has a record, and the record, in
/// order: in one pass over the data table while the ids are dense there, then key by key. Whether
/// they were dense (the pass reached the last id).
fn visit_records(
    data: &BytesReadTable,
    ids: &[Vec<u8>],
    mut visit: impl FnMut(&[u8], &[u8]),
) -> StorageResult<bool> {
    // `ids[..next]` are done.
    let mut next = 0;
    if let (Some(first), Some(last), true) = (ids.first(), ids.last(), ids.len() >= MIN_RUN) {
        let budget = ids.len() * 2;
        let mut dense = true;
        let run = first.as_slice()..=last.as_slice();
        for (visited, item) in data.range::<&[u8]>(run).map_err(io)?.enumerate() {
            if visited == budget {
                dense = false;
                break;
            }
            let (key, record) = item.map_err(io)?;
            let key = key.value();
            while ids.get(next).is_some_and(|id| id.as_slice() < key) {
                next += 1;
            }
            if ids.get(next).is_some_and(|id| id.as_slice() == key) {
                visit(key, record.value());
                next += 1;
            }
        }
        if dense {
            return Ok(true);
        }
    }
    for id in &ids[next..] {
        if let Some(record) = data.get(id.as_slice()).map_err(io)? {
            visit(id, record.value());
        }
    }
    Ok(false)
}

/// Whether `keys` (sorted) are dense in `table`: from the first to the last it holds at most
/// twice as many entries, so one cursor pass over them costs about what the keys alone cost.
fn is_dense<'k>(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    mut keys: impl ExactSizeIterator<Item = &'k [u8]> + DoubleEndedIterator,
) -> StorageResult<bool> {
    let count = keys.len();
    let (Some(first), Some(last)) = (keys.next(), keys.next_back()) else {
        return Ok(false);
    };
    if count < MIN_RUN {
        return Ok(false);
    }
    let budget = count * 2;
    let mut entries = 0;
    for item in table.range::<&[u8]>(first..=last).map_err(io)? {
        item.map_err(io)?;
        entries += 1;
        if entries > budget {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes `keys` (sorted, distinct) from `table` — in one cursor pass if `dense`, else key by
/// key — reporting the key and value lengths of each entry removed.
fn remove_sorted(
    table: &mut BytesTable,
    keys: &[&[u8]],
    dense: bool,
    mut removed: impl FnMut(usize, usize),
) -> StorageResult<()> {
    match (keys.first(), keys.last()) {
        (Some(first), Some(last)) if dense => {
            let mut member = sorted_member(keys.iter().copied());
            table
                .retain_in(*first..=*last, |key: &[u8], value: &[u8]| {
                    let hit = member(key).is_some();
                    if hit {
                        removed(key.len(), value.len());
                    }
                    !hit
                })
                .map_err(io)
        }
        _ => {
            for key in keys {
                if let Some(value) = table.remove(*key).map_err(io)? {
                    removed(key.len(), value.value().len());
                }
            }
            Ok(())
        }
    }
}
