//! Operations the writer thread applies inside a group's write transaction: document writes and
//! catalog changes (DDL).
//!
//! Invariants: every operation validates completely (existence, revisions, `_id` and unique index
//! keys — ignoring the document's own entries on replace —, parallel arrays, index build
//! duplicates, which conflicting documents its `supersede` predicate removes, and decoding of
//! every record it will remove) before it mutates anything, so a failing operation leaves no
//! trace and the group still commits the others. Only redb I/O errors can interrupt a mutation
//! half-way; they are returned as `StorageError::Io` and poison the whole group. Every document
//! mutation keeps the data table, the maintained index tables, the expiry tables (`ox.`, and
//! `lw.` while the collection's `last_write_order` holds) and natural order (`n.`: an insert
//! files its record id last, a replacement keeps it, a deletion unfiles it) in step;
//! catalog-only indexes have no table and are never touched. Every catalog change goes through
//! `put_entry`, which applies the engine's `LastWriteRule` to the new metadata.
//! Catalog changes are written to the `catalog` table and staged in the batch (published only
//! after the commit).
//!
//! Must not: read outside the batch's transaction, or touch the published catalog.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use redb::{ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use super::catalog::{CollectionEntry, IndexEntry, StoredKeyer};
use super::format::{
    bytes_table, entry_id, entry_key, entry_value, expiry_key, expiry_position, index_table_name,
    io, raw_record, record_document, record_header, record_id_key, record_with_document,
    set_record_header, CATALOG, RECORD_HEADER_LEN, SIZES,
};
use super::writer::{Batch, Counters};
use crate::indexkeys::{DocumentKeys, IndexKeyer};
use crate::oplog::{self, Change, EntryTime, Images};
use crate::{
    CappedLimits, CollectionMeta, ExpiryOrder, IndexSpec, LastWriteRule, Namespace,
    RecordPredicate, StorageError, StorageResult, TtlClass, WriteMeta, WriteOp, WriteOutcome,
};

pub(super) type BytesTable<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// A write operation with its keys and record bytes computed on the caller's task.
pub(super) enum PreparedOp {
    Insert {
        id: Bson,
        id_key: Vec<u8>,
        doc: Document,
        /// Header placeholder + BSON.
        record: Vec<u8>,
        meta: WriteMeta,
        supersede: Option<RecordPredicate>,
    },
    Replace {
        id_key: Vec<u8>,
        expected_rev: u64,
        doc: Document,
        record: Vec<u8>,
        meta: WriteMeta,
        supersede: Option<RecordPredicate>,
        replacement: bool,
    },
    Delete {
        id: Bson,
        id_key: Vec<u8>,
        expected_rev: Option<u64>,
    },
    /// Rejected before reaching the writer (a caller error); reported as this operation's result.
    Invalid(StorageError),
}

impl PreparedOp {
    pub fn prepare(op: WriteOp) -> PreparedOp {
        let (id, id_key) = match op.checked_id() {
            Ok((id, id_key)) => (id.clone(), id_key),
            Err(error) => return PreparedOp::Invalid(error),
        };
        match op {
            WriteOp::Insert {
                doc,
                meta,
                supersede,
            } => match record_with_document(&doc) {
                Ok(record) => PreparedOp::Insert {
                    id_key,
                    id,
                    doc,
                    record,
                    meta,
                    supersede,
                },
                Err(error) => PreparedOp::Invalid(error),
            },
            WriteOp::Replace {
                expected_rev,
                doc,
                meta,
                supersede,
                replacement,
                ..
            } => match record_with_document(&doc) {
                Ok(record) => PreparedOp::Replace {
                    id_key,
                    expected_rev,
                    doc,
                    record,
                    meta,
                    supersede,
                    replacement,
                },
                Err(error) => PreparedOp::Invalid(error),
            },
            WriteOp::Delete { expected_rev, .. } => PreparedOp::Delete {
                id_key,
                id,
                expected_rev,
            },
        }
    }

    /// Payload size, for bounding commit groups.
    pub fn bytes(&self) -> usize {
        match self {
            PreparedOp::Insert { record, .. } | PreparedOp::Replace { record, .. } => record.len(),
            PreparedOp::Delete { id_key, .. } => id_key.len(),
            PreparedOp::Invalid(_) => 0,
        }
    }
}

// ---- catalog ----

fn save_entry(txn: &WriteTransaction, entry: &CollectionEntry) -> StorageResult<()> {
    let encoded = entry.encode()?;
    let mut catalog = txn.open_table(CATALOG).map_err(io)?;
    catalog.insert(entry.id, encoded.as_slice()).map_err(io)?;
    Ok(())
}

/// Persists `entry` and stages it under its namespace, first bringing its `lw.` in line with
/// the engine's rule for its (possibly new) metadata.
fn put_entry(batch: &mut Batch, mut entry: CollectionEntry) -> StorageResult<Arc<CollectionEntry>> {
    apply_last_write_rule(&batch.txn, &mut entry, batch.last_write_rule)?;
    save_entry(&batch.txn, &entry)?;
    let entry = Arc::new(entry);
    batch
        .catalog_mut()
        .collections
        .insert(entry.meta.ns.clone(), entry.clone());
    Ok(entry)
}

fn existing(batch: &Batch, ns: &Namespace) -> Option<Arc<CollectionEntry>> {
    batch.catalog().collections.get(ns).cloned()
}

fn require(batch: &Batch, ns: &Namespace) -> StorageResult<Arc<CollectionEntry>> {
    existing(batch, ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.clone()))
}

fn new_collection(
    batch: &mut Batch,
    ns: &Namespace,
    options: Document,
) -> StorageResult<Arc<CollectionEntry>> {
    let id = batch.counters.take_collection_id();
    let uuid = uuid::Uuid::new_v4().into_bytes();
    let mut command = doc! {"create": ns.coll.as_str()};
    command.extend(options.clone());
    command.insert("idIndex", IndexSpec::id_index().spec);
    let entry = CollectionEntry::new(
        id,
        ns.clone(),
        uuid,
        options,
        IndexSpec::id_index(),
        Vec::new(),
    );
    let entry = put_entry(batch, entry)?;
    log_command(batch, ns, Some(uuid), command)?;
    Ok(entry)
}

/// Takes a cluster time for a catalog command on `ns` and, when the oplog exists and `ns` is
/// logged, appends its `c` entry (mongod's command document).
fn log_command(
    batch: &mut Batch,
    ns: &Namespace,
    uuid: Option<[u8; 16]>,
    command: Document,
) -> StorageResult<()> {
    let ts = batch.counters.take_timestamp();
    if !oplog::is_logged(ns) {
        return Ok(());
    }
    let Some(oplog) = existing(batch, &oplog::oplog_namespace()) else {
        return Ok(());
    };
    let mut tables = CollectionTables::open(&batch.txn, &oplog)?;
    append_entry(
        &mut tables,
        (ns, uuid),
        Change::Command(command),
        None,
        None,
        ts,
        &mut batch.counters,
    )?;
    tables.save_sizes(&batch.txn)?;
    Ok(())
}

/// Deletes a table and its size counters.
fn delete_table(txn: &WriteTransaction, name: &str) -> StorageResult<()> {
    txn.delete_table(bytes_table(name)).map_err(io)?;
    txn.open_table(SIZES)
        .map_err(io)?
        .remove(name)
        .map_err(io)?;
    Ok(())
}

/// Removes the collection's tables and catalog row, and unstages it.
fn remove_collection(batch: &mut Batch, entry: &CollectionEntry) -> StorageResult<()> {
    for name in entry.table_names() {
        delete_table(&batch.txn, &name)?;
    }
    batch
        .txn
        .open_table(CATALOG)
        .map_err(io)?
        .remove(entry.id)
        .map_err(io)?;
    batch.catalog_mut().collections.remove(&entry.meta.ns);
    Ok(())
}

pub(super) fn create_collection(
    batch: &mut Batch,
    ns: &Namespace,
    options: Document,
    indexes: Vec<IndexSpec>,
) -> StorageResult<CollectionMeta> {
    if existing(batch, ns).is_some() {
        return Err(StorageError::NamespaceExists(ns.clone()));
    }
    let entry = new_collection(batch, ns, options)?;
    if indexes.is_empty() {
        return Ok(entry.meta.clone());
    }
    let mut updated = (*entry).clone();
    for spec in indexes {
        super::super::indexkeys::validate_key_pattern(&spec)?;
        // The collection is empty: every index is complete as soon as it exists.
        register_index(batch, &mut updated, IndexKeyer::new(spec)?, false)?;
    }
    updated.sync_index_specs();
    Ok(put_entry(batch, updated)?.meta.clone())
}

pub(super) fn drop_collection(batch: &mut Batch, ns: &Namespace) -> StorageResult<bool> {
    let Some(entry) = existing(batch, ns) else {
        return Ok(false);
    };
    drop_logged(batch, &entry)?;
    Ok(true)
}

/// Removes a collection and logs its `drop`.
fn drop_logged(batch: &mut Batch, entry: &CollectionEntry) -> StorageResult<()> {
    remove_collection(batch, entry)?;
    let ns = &entry.meta.ns;
    let command = doc! {"drop": ns.coll.as_str()};
    log_command(batch, ns, Some(entry.meta.uuid), command)
}

pub(super) fn drop_database(batch: &mut Batch, db: &str) -> StorageResult<()> {
    let entries: Vec<Arc<CollectionEntry>> = batch
        .catalog()
        .collections
        .values()
        .filter(|entry| entry.meta.ns.db == db)
        .cloned()
        .collect();
    for entry in &entries {
        drop_logged(batch, entry)?;
    }
    if let Some(entry) = entries.first() {
        log_command(batch, &entry.meta.ns, None, doc! {"dropDatabase": 1})?;
    }
    Ok(())
}

pub(super) fn rename_collection(
    batch: &mut Batch,
    from: &Namespace,
    to: &Namespace,
    drop_target: bool,
) -> StorageResult<()> {
    let entry = require(batch, from)?;
    if from == to {
        return Err(StorageError::NamespaceExists(to.clone()));
    }
    let target = existing(batch, to);
    if target.is_some() && !drop_target {
        return Err(StorageError::NamespaceExists(to.clone()));
    }
    if let Some(target) = &target {
        remove_collection(batch, target)?;
    }
    let mut renamed = (*entry).clone();
    renamed.meta.ns = to.clone();
    batch.catalog_mut().collections.remove(from);
    put_entry(batch, renamed)?;
    let mut command = doc! {
        "renameCollection": from.to_string(),
        "to": to.to_string(),
        "stayTemp": false,
    };
    if let Some(target) = &target {
        command.insert(
            "dropTarget",
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: target.meta.uuid.to_vec(),
            }),
        );
    }
    log_command(batch, from, Some(entry.meta.uuid), command)?;
    Ok(())
}

pub(super) fn set_collection_options(
    batch: &mut Batch,
    ns: &Namespace,
    options: Document,
) -> StorageResult<()> {
    let mut entry = (*require(batch, ns)?).clone();
    let mut command = doc! {"collMod": ns.coll.as_str()};
    command.extend(options.clone());
    // The layout (natural order table or none) was decided at creation.
    if CollectionMeta::is_clustered(&options) != entry.meta.clustered() {
        return Err(StorageError::InvalidIndex(format!(
            "the clustered index of {ns} cannot be added or removed"
        )));
    }
    entry.meta.options = options;
    let uuid = entry.meta.uuid;
    put_entry(batch, entry)?;
    log_command(batch, ns, Some(uuid), command)?;
    Ok(())
}

/// Adds an index to `entry` (its table created, unless catalog-only), `building` or complete;
/// returns its id. The caller syncs the specs and stores the entry.
fn register_index(
    batch: &mut Batch,
    entry: &mut CollectionEntry,
    keyer: IndexKeyer,
    building: bool,
) -> StorageResult<u64> {
    let id = batch.counters.take_index_id();
    let table = index_table_name(id);
    if !keyer.spec().catalog_only {
        batch.txn.open_table(bytes_table(&table)).map_err(io)?;
    }
    entry.indexes.push(IndexEntry {
        id,
        table,
        keyer,
        multikey: false,
        building,
    });
    Ok(id)
}

/// The first step of `create_indexes`: validates the specs and registers the new indexes, the
/// catalog-only ones finished, the others empty and building (see [`IndexEntry::building`]), so
/// that every write from now on maintains them. Returns the ids of the indexes to build.
pub(super) fn begin_index_build(
    batch: &mut Batch,
    ns: &Namespace,
    specs: Vec<IndexSpec>,
) -> StorageResult<Vec<u64>> {
    let current = existing(batch, ns);
    let mut keyers: Vec<IndexKeyer> = Vec::new();
    for spec in specs {
        let taken = spec.is_id_index()
            || current
                .as_ref()
                .is_some_and(|entry| entry.index_named(&spec.name).is_some())
            || keyers.iter().any(|keyer| keyer.spec().name == spec.name);
        if taken {
            continue;
        }
        super::super::indexkeys::validate_key_pattern(&spec)?;
        keyers.push(IndexKeyer::new(spec)?);
    }
    let entry = match current {
        Some(entry) => entry,
        None => new_collection(batch, ns, Document::new())?,
    };
    if keyers.is_empty() {
        return Ok(Vec::new());
    }
    let mut updated = (*entry).clone();
    let mut building = Vec::new();
    for keyer in keyers {
        let catalog_only = keyer.spec().catalog_only;
        let id = register_index(batch, &mut updated, keyer, !catalog_only)?;
        if !catalog_only {
            building.push(id);
        }
    }
    updated.sync_index_specs();
    put_entry(batch, updated)?;
    Ok(building)
}

/// One step of an index build: adds the keys of up to `limit` documents stored after `after`
/// (in `_id` order) to the building indexes `ids`, all or nothing (a unique violation or an
/// unindexable document fails the step before anything is written). Documents written since the
/// build began are already indexed; adding their keys again changes nothing. Returns where the
/// next step starts, or `None` when every document is done.
pub(super) fn index_build_step(
    batch: &mut Batch,
    ns: &Namespace,
    ids: &[u64],
    after: Option<Vec<u8>>,
    limit: usize,
) -> StorageResult<Option<Vec<u8>>> {
    let entry = require(batch, ns)?;
    let building: Vec<&IndexEntry> = entry
        .indexes
        .iter()
        .filter(|index| index.building && ids.contains(&index.id))
        .collect();
    if building.is_empty() {
        return Ok(None);
    }
    let data = batch
        .txn
        .open_table(bytes_table(&entry.data_table))
        .map_err(io)?;
    let mut tables = building
        .iter()
        .map(|index| batch.txn.open_table(bytes_table(&index.table)).map_err(io))
        .collect::<StorageResult<Vec<_>>>()?;
    let lower = match &after {
        Some(after) => Bound::Excluded(after.as_slice()),
        None => Bound::Unbounded,
    };
    // Per index: the stored entries to add, and (unique indexes) the owner of each key so far.
    let keyer = StoredKeyer::over(building.clone());
    let mut additions: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); building.len()];
    let mut claimed: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); building.len()];
    let mut multikey = vec![false; building.len()];
    let mut last: Option<Vec<u8>> = None;
    let mut processed = 0;
    for item in data.range::<&[u8]>((lower, Bound::Unbounded)).map_err(io)? {
        if processed == limit {
            break;
        }
        processed += 1;
        let (id_key, record) = item.map_err(io)?;
        let id_key = id_key.value();
        let document = keyer.document(record.value())?;
        for (position, index) in building.iter().enumerate() {
            let DocumentKeys { keys, type_bits } = index.keyer.entries(&document)?;
            multikey[position] |= keys.len() > 1;
            for key in keys {
                if index.unique() {
                    let stored = match tables[position].get(key.as_slice()).map_err(io)? {
                        Some(stored) => Some(entry_id(&key, stored.value(), true)?.to_vec()),
                        None => None,
                    };
                    let owner = claimed[position].get(&key).cloned().or(stored);
                    if owner.is_some_and(|owner| owner.as_slice() != id_key) {
                        return Err(index.keyer.duplicate_key(ns, &document, &key));
                    }
                    claimed[position].insert(key.clone(), id_key.to_vec());
                }
                additions[position].push((
                    entry_key(&key, id_key, index.unique()),
                    entry_value(id_key, type_bits.as_deref(), index.unique()),
                ));
            }
        }
        last = Some(id_key.to_vec());
    }
    drop(data);
    for ((table, index), entries) in tables.iter_mut().zip(&building).zip(&additions) {
        let mut size = SizeDelta::default();
        for (key, value) in entries {
            if table
                .insert(key.as_slice(), value.as_slice())
                .map_err(io)?
                .is_none()
            {
                size.add(key.len(), value.len());
            }
        }
        size.save(&batch.txn, &index.table)?;
    }
    drop(tables);
    if multikey.iter().any(|flag| *flag) {
        let mut updated = (*entry).clone();
        for index in &mut updated.indexes {
            if let Some(position) = building.iter().position(|built| built.id == index.id) {
                index.multikey |= multikey[position];
            }
        }
        put_entry(batch, updated)?;
    }
    Ok(if processed == limit { last } else { None })
}

/// The last step of a build: the indexes `ids` are finished and readable.
pub(super) fn finish_index_build(
    batch: &mut Batch,
    ns: &Namespace,
    ids: &[u64],
) -> StorageResult<CollectionMeta> {
    let mut updated = (*require(batch, ns)?).clone();
    let mut commands = Vec::new();
    for index in &mut updated.indexes {
        if ids.contains(&index.id) {
            index.building = false;
            let mut command = doc! {"createIndexes": ns.coll.as_str()};
            command.extend(index.spec().spec.clone());
            commands.push(command);
        }
    }
    updated.sync_index_specs();
    let meta = put_entry(batch, updated)?.meta.clone();
    for command in commands {
        log_command(batch, ns, Some(meta.uuid), command)?;
    }
    Ok(meta)
}

/// Undoes a failed build: the building indexes `ids` are dropped with their entries.
pub(super) fn abort_index_build(
    batch: &mut Batch,
    ns: &Namespace,
    ids: &[u64],
) -> StorageResult<()> {
    let Some(entry) = existing(batch, ns) else {
        return Ok(());
    };
    let mut updated = (*entry).clone();
    for index in entry
        .indexes
        .iter()
        .filter(|index| ids.contains(&index.id) && index.building)
    {
        delete_table(&batch.txn, &index.table)?;
    }
    updated
        .indexes
        .retain(|index| !(ids.contains(&index.id) && index.building));
    updated.sync_index_specs();
    put_entry(batch, updated)?;
    Ok(())
}

/// Brings `entry`'s `lw.` in line with `rule` (see [`CollectionEntry::last_write_order`]):
/// fills it from the records' headers when the rule starts selecting the collection, empties it
/// when it stops. Whether it changed anything (the caller saves `entry`).
fn apply_last_write_rule(
    txn: &WriteTransaction,
    entry: &mut CollectionEntry,
    rule: LastWriteRule,
) -> StorageResult<bool> {
    let wanted = rule(&entry.meta);
    if wanted == entry.last_write_order {
        return Ok(false);
    }
    let name = entry.expiry_table(ExpiryOrder::LastWrite);
    delete_table(txn, &name)?;
    if wanted {
        let data = txn.open_table(bytes_table(&entry.data_table)).map_err(io)?;
        let mut last_write = txn.open_table(bytes_table(&name)).map_err(io)?;
        for item in data.iter().map_err(io)? {
            let (id_key, record) = item.map_err(io)?;
            let meta = record_header(record.value())?.meta;
            if let Some((ExpiryOrder::LastWrite, at_ms)) =
                expiry_position(meta.ttl, meta.last_write_ms)
            {
                let key = expiry_key(at_ms, id_key.value());
                last_write.insert(key.as_slice(), &[][..]).map_err(io)?;
            }
        }
    }
    entry.last_write_order = wanted;
    Ok(true)
}

/// [`apply_last_write_rule`] for every collection of a database being opened (its files may
/// come from a build with another rule, or from format 6 or older, which kept `lw.` for every
/// collection), saving the entries it changes. Whether it changed any.
pub(super) fn apply_last_write_rule_at_open(
    txn: &WriteTransaction,
    catalog: &mut super::catalog::Catalog,
    rule: LastWriteRule,
) -> StorageResult<bool> {
    let mut changed = false;
    for entry in catalog.collections.values_mut() {
        // Not shared yet: no copy.
        let entry = Arc::make_mut(entry);
        if apply_last_write_rule(txn, entry, rule)? {
            save_entry(txn, entry)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Drops every index a crash left building, from `catalog` and `txn` (at open, before any
/// other write); whether there was one.
pub(super) fn drop_interrupted_builds(
    txn: &WriteTransaction,
    catalog: &mut super::catalog::Catalog,
) -> StorageResult<bool> {
    let mut dropped = false;
    for entry in catalog.collections.values_mut() {
        if !entry.indexes.iter().any(|index| index.building) {
            continue;
        }
        let mut updated = (**entry).clone();
        for index in entry.indexes.iter().filter(|index| index.building) {
            delete_table(txn, &index.table)?;
        }
        updated.indexes.retain(|index| !index.building);
        updated.sync_index_specs();
        save_entry(txn, &updated)?;
        *entry = Arc::new(updated);
        dropped = true;
    }
    Ok(dropped)
}

pub(super) fn drop_indexes(
    batch: &mut Batch,
    ns: &Namespace,
    names: &[String],
) -> StorageResult<()> {
    let entry = require(batch, ns)?;
    for name in names {
        if name == IndexSpec::ID_INDEX_NAME {
            return Err(StorageError::InvalidIndex(
                "cannot drop _id index".to_string(),
            ));
        }
        if entry.index_named(name).is_none() {
            return Err(StorageError::IndexNotFound(name.clone()));
        }
    }
    let mut updated = (*entry).clone();
    for index in &entry.indexes {
        if names.contains(&index.spec().name) {
            delete_table(&batch.txn, &index.table)?;
        }
    }
    updated
        .indexes
        .retain(|index| !names.contains(&index.spec().name));
    updated.sync_index_specs();
    put_entry(batch, updated)?;
    for name in names {
        let command = doc! {"dropIndexes": ns.coll.as_str(), "index": name.as_str()};
        log_command(batch, ns, Some(entry.meta.uuid), command)?;
    }
    Ok(())
}

/// Replaces the spec document only (parsed options, key and entries stay): one catalog row.
pub(super) fn update_index_spec(
    batch: &mut Batch,
    ns: &Namespace,
    name: &str,
    spec: Document,
) -> StorageResult<()> {
    let mut updated = (*require(batch, ns)?).clone();
    if name == IndexSpec::ID_INDEX_NAME {
        Arc::make_mut(&mut updated.meta.indexes[0]).spec = spec;
    } else {
        let index = updated
            .indexes
            .iter_mut()
            .find(|index| index.spec().name == name)
            .ok_or_else(|| StorageError::IndexNotFound(name.to_string()))?;
        let mut new_spec = index.spec().clone();
        new_spec.spec = spec;
        index.keyer = IndexKeyer::new(new_spec)?;
        updated.sync_index_specs();
    }
    put_entry(batch, updated)?;
    Ok(())
}

// ---- document writes ----

/// Applies `ops` to `ns`; each oplog entry also carries the fields of `session` (a
/// transaction's `lsid` and `txnNumber`).
pub(super) fn write(
    batch: &mut Batch,
    ns: &Namespace,
    ops: Vec<PreparedOp>,
    ordered: bool,
    session: Option<&Document>,
) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
    let entry = match existing(batch, ns) {
        Some(entry) => Some(entry),
        None if ops.iter().any(|op| matches!(op, PreparedOp::Insert { .. })) => {
            Some(new_collection(batch, ns, Document::new())?)
        }
        None => None,
    };
    let oplog = oplog::is_logged(ns)
        .then(|| existing(batch, &oplog::oplog_namespace()))
        .flatten();
    let mut tables = match &entry {
        Some(entry) => Some(CollectionTables::open(&batch.txn, entry)?),
        None => None,
    };
    let mut oplog_tables = match &oplog {
        Some(oplog) => Some(CollectionTables::open(&batch.txn, oplog)?),
        None => None,
    };
    let images = entry
        .as_ref()
        .is_some_and(|entry| oplog::wants_images(&entry.meta.options));
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        let logged = match (&oplog_tables, tables.as_ref()) {
            (Some(_), Some(tables)) => Logged::of(&op, tables, images)?,
            _ => None,
        };
        let result = match (op, tables.as_mut()) {
            (PreparedOp::Invalid(error), _) => Err(error),
            // Without a collection there is nothing to replace or delete.
            (_, None) => Err(StorageError::WriteConflict),
            (op, Some(tables)) => match tables.apply(op, &mut batch.counters) {
                Err(StorageError::Io(message)) => return Err(StorageError::Io(message)),
                result => result,
            },
        };
        let failed = result.is_err();
        if !failed {
            let ts = batch.counters.take_timestamp();
            if let (Some(oplog_tables), Some(logged)) = (oplog_tables.as_mut(), logged) {
                let uuid = entry.as_ref().map(|entry| entry.meta.uuid);
                let change = logged.change();
                let images = logged.images();
                append_entry(
                    oplog_tables,
                    (ns, uuid),
                    change,
                    images,
                    session,
                    ts,
                    &mut batch.counters,
                )?;
            }
        }
        results.push(result);
        if failed && ordered {
            break;
        }
    }
    oplog_tables
        .map(|oplog_tables| oplog_tables.save_sizes(&batch.txn))
        .transpose()?;
    let became_multikey = tables
        .map(|tables| tables.save_sizes(&batch.txn))
        .transpose()?
        .unwrap_or_default();
    if let (Some(entry), false) = (&entry, became_multikey.is_empty()) {
        let mut updated = (**entry).clone();
        for index in &mut updated.indexes {
            index.multikey |= became_multikey.contains(&index.id);
        }
        updated.sync_index_specs();
        put_entry(batch, updated)?;
    }
    Ok(results)
}

/// Fails with `WriteConflict` if a document `ops` replace or delete is one `stale` holds for now
/// (checked before anything of a transaction's commit is applied).
pub(super) fn check_not_stale(
    batch: &Batch,
    ns: &Namespace,
    ops: &[PreparedOp],
    stale: &RecordPredicate,
) -> StorageResult<()> {
    let Some(entry) = existing(batch, ns) else {
        return Ok(());
    };
    let data = batch
        .txn
        .open_table(bytes_table(&entry.data_table))
        .map_err(io)?;
    for op in ops {
        let id_key = match op {
            PreparedOp::Replace { id_key, .. } | PreparedOp::Delete { id_key, .. } => id_key,
            _ => continue,
        };
        if let Some(record) = data.get(id_key.as_slice()).map_err(io)? {
            if stale.holds(&raw_record(record.value())?) {
                return Err(StorageError::WriteConflict);
            }
        }
    }
    Ok(())
}

/// What the oplog records of one operation, taken before the operation runs (an update needs
/// the document it changes; with images asked for, every update, replacement and delete reads
/// the document it replaces or deletes).
enum Logged {
    Insert(Document),
    Update {
        before: Document,
        after: Document,
        images: bool,
    },
    Replace {
        before: Option<Document>,
        after: Document,
    },
    Delete {
        id: Bson,
        before: Option<Document>,
    },
}

impl Logged {
    fn of(
        op: &PreparedOp,
        tables: &CollectionTables<'_, '_>,
        images: bool,
    ) -> StorageResult<Option<Logged>> {
        let current = |id_key: &[u8]| -> StorageResult<Option<Document>> {
            match tables.data.get(id_key).map_err(io)? {
                Some(record) => Ok(Some(record_document(record.value())?.into_document())),
                None => Ok(None),
            }
        };
        Ok(match op {
            PreparedOp::Insert { doc, .. } => Some(Logged::Insert(doc.clone())),
            PreparedOp::Replace {
                id_key,
                doc,
                replacement: true,
                ..
            } => Some(Logged::Replace {
                before: if images { current(id_key)? } else { None },
                after: doc.clone(),
            }),
            PreparedOp::Replace { id_key, doc, .. } => {
                current(id_key)?.map(|before| Logged::Update {
                    before,
                    after: doc.clone(),
                    images,
                })
            }
            PreparedOp::Delete { id, id_key, .. } => Some(Logged::Delete {
                id: id.clone(),
                before: if images { current(id_key)? } else { None },
            }),
            PreparedOp::Invalid(_) => None,
        })
    }

    fn change(&self) -> Change<'_> {
        match self {
            Logged::Insert(document) => Change::Insert(document),
            Logged::Update { before, after, .. } => Change::Update { before, after },
            Logged::Replace { after, .. } => Change::Replace(after),
            Logged::Delete { id, .. } => Change::Delete {
                id: id.clone(),
                expired_at_ms: None,
            },
        }
    }

    /// The images the entry keeps (none unless the collection asks for them).
    fn images(&self) -> Option<Images> {
        match self {
            Logged::Insert(_) | Logged::Update { images: false, .. } => None,
            Logged::Update { before, after, .. } => Some(Images {
                before: Some(before.clone()),
                after: Some(after.clone()),
            }),
            Logged::Replace {
                before: Some(before),
                after,
            } => Some(Images {
                before: Some(before.clone()),
                after: Some(after.clone()),
            }),
            Logged::Replace { before: None, .. } => None,
            Logged::Delete { before, .. } => before.clone().map(|before| Images {
                before: Some(before),
                after: None,
            }),
        }
    }
}

fn is_oplog(ns: &Namespace) -> bool {
    ns.db == oplog::LOCAL_DB && ns.coll == oplog::OPLOG_COLLECTION
}

/// Appends the oplog entry of `change` on `ns` at cluster time `ts` (the capped oplog rolls
/// over). An entry that cannot be written fails the whole commit group: a write must never
/// commit without its entry.
pub(super) fn append_entry(
    oplog_tables: &mut CollectionTables<'_, '_>,
    (ns, uuid): (&Namespace, Option<[u8; 16]>),
    change: Change<'_>,
    images: Option<Images>,
    session: Option<&Document>,
    ts: u64,
    counters: &mut Counters,
) -> StorageResult<()> {
    let time = EntryTime::now(ts);
    let mut entry = oplog::entry(ns, uuid, change, session, time);
    if let Some(images) = images {
        oplog::add_images(&mut entry, images);
    }
    let op = PreparedOp::prepare(WriteOp::Insert {
        doc: entry,
        meta: WriteMeta {
            last_write_ms: time.wall_ms,
            ttl: TtlClass::Never,
        },
        supersede: None,
    });
    oplog_tables
        .apply(op, counters)
        .map(|_| ())
        .map_err(|error| match error {
            error @ (StorageError::Io(_) | StorageError::OutOfDiskSpace(_)) => error,
            other => StorageError::Io(format!("appending to the oplog: {other}")),
        })
}

/// Signed change of a table's byte counters.
#[derive(Default)]
pub(super) struct SizeDelta {
    key_bytes: i64,
    value_bytes: i64,
}

impl SizeDelta {
    fn add(&mut self, key_len: usize, value_len: usize) {
        self.key_bytes += key_len as i64;
        self.value_bytes += value_len as i64;
    }

    pub fn sub(&mut self, key_len: usize, value_len: usize) {
        self.key_bytes -= key_len as i64;
        self.value_bytes -= value_len as i64;
    }

    fn save(&self, txn: &WriteTransaction, table_name: &str) -> StorageResult<()> {
        if self.key_bytes == 0 && self.value_bytes == 0 {
            return Ok(());
        }
        let mut sizes = txn.open_table(SIZES).map_err(io)?;
        let (key_bytes, value_bytes) = sizes
            .get(table_name)
            .map_err(io)?
            .map(|sizes| sizes.value())
            .unwrap_or((0, 0));
        let updated = (
            key_bytes.saturating_add_signed(self.key_bytes),
            value_bytes.saturating_add_signed(self.value_bytes),
        );
        sizes.insert(table_name, updated).map_err(io)?;
        Ok(())
    }
}

pub(super) struct IndexTable<'t, 'e> {
    pub index: &'e IndexEntry,
    pub table: BytesTable<'t>,
    pub size: SizeDelta,
}

impl IndexTable<'_, '_> {
    /// Writes the entry of `id_key` under `index_key`, replacing one already there (whose type
    /// bits may differ).
    fn insert(
        &mut self,
        index_key: &[u8],
        id_key: &[u8],
        type_bits: Option<&[u8]>,
    ) -> StorageResult<()> {
        let unique = self.index.unique();
        let key = entry_key(index_key, id_key, unique);
        let value = entry_value(id_key, type_bits, unique);
        let replaced = self
            .table
            .insert(key.as_slice(), value.as_slice())
            .map_err(io)?
            .map(|old| old.value().len());
        if let Some(old_len) = replaced {
            self.size.sub(key.len(), old_len);
        }
        self.size.add(key.len(), value.len());
        Ok(())
    }

    /// Removes the entry of `id_key` under `index_key` (never another document's entry).
    pub fn remove(&mut self, index_key: &[u8], id_key: &[u8]) -> StorageResult<()> {
        let unique = self.index.unique();
        let key = entry_key(index_key, id_key, unique);
        if unique {
            let owned = self.table.get(key.as_slice()).map_err(io)?;
            let owner = owned
                .as_ref()
                .map(|owned| entry_id(&key, owned.value(), true))
                .transpose()?;
            if owner != Some(id_key) {
                return Ok(());
            }
            drop(owned);
        }
        if let Some(value) = self.table.remove(key.as_slice()).map_err(io)? {
            let value_len = value.value().len();
            drop(value);
            self.size.sub(key.len(), value_len);
        }
        Ok(())
    }

    /// The document (other than `id_key`'s) holding unique key `index_key`, if any.
    fn other_owner(&self, index_key: &[u8], id_key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let Some(stored) = self.table.get(index_key).map_err(io)? else {
            return Ok(None);
        };
        let owner = entry_id(index_key, stored.value(), true)?;
        Ok((owner != id_key).then(|| owner.to_vec()))
    }
}

/// Everything needed to delete one stored document, decoded before any mutation so that the
/// deletion itself can only fail with I/O errors.
struct Removal {
    id_key: Vec<u8>,
    record_len: usize,
    /// The stored header's metadata: locates the expiry entry.
    meta: WriteMeta,
    /// The stored header's record id: locates the natural order entry.
    record_id: u64,
    /// Its keys in every maintained index, in `CollectionTables::indexes` order.
    index_keys: Vec<Vec<Vec<u8>>>,
}

/// The open tables of one collection for the duration of one write job.
pub(super) struct CollectionTables<'t, 'e> {
    pub entry: &'e CollectionEntry,
    pub data: BytesTable<'t>,
    pub data_size: SizeDelta,
    /// `lw.<id>`: `TtlClass::Default` records by last write.
    pub last_write: BytesTable<'t>,
    /// `ox.<id>`: `TtlClass::Own` records by their own expiry.
    pub own_expiry: BytesTable<'t>,
    /// Maintained (not catalog-only) secondary indexes.
    pub indexes: Vec<IndexTable<'t, 'e>>,
    /// Keys of stored documents in `indexes`.
    pub keyer: StoredKeyer<'e>,
    /// Indexes in which a document written by this job has several keys (not yet flagged).
    became_multikey: Vec<u64>,
    /// `n.<id>`: natural order, record id → `_id` key (see `format.rs`); `None` in a clustered
    /// collection.
    pub natural: Option<BytesTable<'t>>,
    /// A capped collection's limits and what rollover needs.
    capped: Option<Capped>,
}

/// What a capped collection's rollover needs.
#[derive(Clone, Copy)]
struct Capped {
    limits: CappedLimits,
    /// The data table's stored value bytes when the job began (the job's change is in
    /// `CollectionTables::data_size`).
    stored_value_bytes: u64,
}

impl<'t, 'e> CollectionTables<'t, 'e> {
    pub fn open(txn: &'t WriteTransaction, entry: &'e CollectionEntry) -> StorageResult<Self> {
        let open = |name: &str| txn.open_table(bytes_table(name)).map_err(io);
        let indexes = entry
            .indexes
            .iter()
            .filter(|index| index.maintained())
            .map(|index| {
                Ok(IndexTable {
                    index,
                    table: open(&index.table)?,
                    size: SizeDelta::default(),
                })
            })
            .collect::<StorageResult<Vec<_>>>()?;
        let capped = match entry.meta.capped() {
            Some(limits) => Some(Capped {
                limits,
                stored_value_bytes: txn
                    .open_table(SIZES)
                    .map_err(io)?
                    .get(entry.data_table.as_str())
                    .map_err(io)?
                    .map_or(0, |sizes| sizes.value().1),
            }),
            None => None,
        };
        Ok(CollectionTables {
            natural: entry.natural_table.as_deref().map(&open).transpose()?,
            capped,
            keyer: StoredKeyer::new(entry),
            became_multikey: Vec::new(),
            entry,
            data: open(&entry.data_table)?,
            data_size: SizeDelta::default(),
            last_write: open(&entry.expiry_table(ExpiryOrder::LastWrite))?,
            own_expiry: open(&entry.expiry_table(ExpiryOrder::OwnExpiry))?,
            indexes,
        })
    }

    /// Saves the size counters; the ids of the indexes that became multikey during the job.
    pub(crate) fn save_sizes(self, txn: &WriteTransaction) -> StorageResult<Vec<u64>> {
        let CollectionTables {
            entry,
            data,
            data_size,
            last_write,
            own_expiry,
            indexes,
            keyer: _,
            became_multikey,
            natural,
            capped: _,
        } = self;
        drop((data, last_write, own_expiry, natural));
        data_size.save(txn, &entry.data_table)?;
        for index in indexes {
            let IndexTable { index, table, size } = index;
            drop(table);
            size.save(txn, &index.table)?;
        }
        Ok(became_multikey)
    }

    /// Moves `id_key`'s entries in every index from its `old` keys (none for an insert) to its
    /// `new` ones (both sorted per index), touching only the keys that differ, and a kept key
    /// whose type bits changed (Int32 5 becoming Double 5.0 keeps the key).
    fn move_index_entries(
        &mut self,
        id_key: &[u8],
        old: Option<&[DocumentKeys]>,
        new: &[DocumentKeys],
    ) -> StorageResult<()> {
        self.note_multikey(new);
        let none = DocumentKeys::default();
        for (position, (index, new)) in self.indexes.iter_mut().zip(new).enumerate() {
            let old = old.and_then(|old| old.get(position)).unwrap_or(&none);
            for key in old
                .keys
                .iter()
                .filter(|key| new.keys.binary_search(key).is_err())
            {
                index.remove(key, id_key)?;
            }
            let bits_changed = old.type_bits != new.type_bits;
            for key in &new.keys {
                if bits_changed || old.keys.binary_search(key).is_err() {
                    index.insert(key, id_key, new.type_bits.as_deref())?;
                }
            }
        }
        Ok(())
    }

    /// Notes the indexes in which a document being written has several keys.
    fn note_multikey(&mut self, keys: &[DocumentKeys]) {
        for (index, keys) in self.indexes.iter().zip(keys) {
            if keys.keys.len() > 1
                && !index.index.multikey
                && !self.became_multikey.contains(&index.index.id)
            {
                self.became_multikey.push(index.index.id);
            }
        }
    }

    /// Adds (`present`) or removes the expiry entry of `id_key` for a record written with `meta`
    /// (`Never` records have none).
    fn set_expiry(&mut self, meta: WriteMeta, id_key: &[u8], present: bool) -> StorageResult<()> {
        let Some((order, at_ms)) = expiry_position(meta.ttl, meta.last_write_ms) else {
            return Ok(());
        };
        let table = match order {
            ExpiryOrder::LastWrite if !self.entry.last_write_order => return Ok(()),
            ExpiryOrder::LastWrite => &mut self.last_write,
            ExpiryOrder::OwnExpiry => &mut self.own_expiry,
        };
        let key = expiry_key(at_ms, id_key);
        if present {
            table.insert(key.as_slice(), &[][..]).map_err(io)?;
        } else {
            table.remove(key.as_slice()).map_err(io)?;
        }
        Ok(())
    }

    /// Keys and type bits of `document` for every maintained secondary index, in `indexes` order.
    fn index_keys(&self, document: &Document) -> StorageResult<Vec<DocumentKeys>> {
        self.indexes
            .iter()
            .map(|index| index.index.keyer.entries(document))
            .collect()
    }

    /// The stored record of `id_key`, if its revision is `expected_rev` (when given).
    fn current(&self, id_key: &[u8], expected_rev: Option<u64>) -> StorageResult<Vec<u8>> {
        let record = self
            .data
            .get(id_key)
            .map_err(io)?
            .map(|record| record.value().to_vec())
            .ok_or(StorageError::WriteConflict)?;
        if let Some(expected_rev) = expected_rev {
            if record_header(&record)?.rev != expected_rev {
                return Err(StorageError::WriteConflict);
            }
        }
        Ok(record)
    }

    /// Keys of a stored document, one list per maintained index (see [`StoredKeyer::keys`]).
    pub(crate) fn stored_keys(&self, record: &[u8]) -> StorageResult<Vec<Vec<Vec<u8>>>> {
        self.keyer.keys(record)
    }

    /// Decodes what deleting the stored `record` of `id_key` touches.
    fn plan_removal(&self, id_key: &[u8], record: &[u8]) -> StorageResult<Removal> {
        let header = record_header(record)?;
        Ok(Removal {
            id_key: id_key.to_vec(),
            record_len: record.len(),
            meta: header.meta,
            record_id: header.record_id,
            index_keys: self.stored_keys(record)?,
        })
    }

    /// Deletes a document with its index and expiry entries.
    fn remove(&mut self, removal: &Removal) -> StorageResult<()> {
        let id_key = removal.id_key.as_slice();
        for (index, keys) in self.indexes.iter_mut().zip(&removal.index_keys) {
            for key in keys {
                index.remove(key, id_key)?;
            }
        }
        self.set_expiry(removal.meta, id_key, false)?;
        self.remove_natural(removal.record_id)?;
        if self.data.remove(id_key).map_err(io)?.is_some() {
            self.data_size.sub(id_key.len(), removal.record_len);
        }
        Ok(())
    }

    /// Files a newly inserted document last in natural order, under its record id (nothing in
    /// a clustered collection).
    fn add_natural(&mut self, record_id: u64, id_key: &[u8]) -> StorageResult<()> {
        if let Some(natural) = &mut self.natural {
            natural
                .insert(&record_id_key(record_id)[..], id_key)
                .map_err(io)?;
        }
        Ok(())
    }

    /// Removes a document from natural order, by the record id in its header.
    pub(crate) fn remove_natural(&mut self, record_id: u64) -> StorageResult<()> {
        if let Some(natural) = &mut self.natural {
            natural.remove(&record_id_key(record_id)[..]).map_err(io)?;
        }
        Ok(())
    }

    /// Deletes the oldest documents of a capped collection while it holds more than its limits
    /// allow, never `inserted` (the document just written): mongod's capped deletes, in the
    /// inserting operation.
    fn roll_over(&mut self, inserted: &[u8]) -> StorageResult<()> {
        let Some(Capped {
            limits,
            stored_value_bytes,
        }) = self.capped
        else {
            return Ok(());
        };
        loop {
            let docs = self.data.len().map_err(io)?;
            let value_bytes = stored_value_bytes.saturating_add_signed(self.data_size.value_bytes);
            let bytes = value_bytes.saturating_sub(docs * RECORD_HEADER_LEN as u64);
            if bytes <= limits.max_bytes && limits.max_docs.is_none_or(|max| docs <= max) {
                return Ok(());
            }
            let Some(natural) = &self.natural else {
                return Ok(());
            };
            let oldest = match natural.first().map_err(io)? {
                Some((_, id_key)) => id_key.value().to_vec(),
                None => return Ok(()),
            };
            if oldest == inserted {
                return Ok(());
            }
            let record = self.current(&oldest, None)?;
            let removal = self.plan_removal(&oldest, &record)?;
            self.remove(&removal)?;
        }
    }

    /// Resolves a conflict with the stored document `owner`: it joins `superseded` if `supersede`
    /// accepts it (or already did); otherwise the operation fails with `conflict()`. A dangling
    /// owner (no document) stays a conflict.
    fn resolve_conflict(
        &self,
        owner: &[u8],
        supersede: Option<&RecordPredicate>,
        superseded: &mut Vec<Removal>,
        conflict: impl FnOnce() -> StorageError,
    ) -> StorageResult<()> {
        if superseded.iter().any(|removal| removal.id_key == owner) {
            return Ok(());
        }
        let Some(supersede) = supersede else {
            return Err(conflict());
        };
        let Some(record) = self
            .data
            .get(owner)
            .map_err(io)?
            .map(|record| record.value().to_vec())
        else {
            return Err(conflict());
        };
        if !supersede.holds(&raw_record(&record)?) {
            return Err(conflict());
        }
        superseded.push(self.plan_removal(owner, &record)?);
        Ok(())
    }

    /// Deletes the superseded documents; their count.
    fn remove_superseded(&mut self, superseded: Vec<Removal>) -> StorageResult<u32> {
        for removal in &superseded {
            self.remove(removal)?;
        }
        // At most one per unique index and key of one document: far below u32::MAX.
        Ok(u32::try_from(superseded.len()).unwrap_or(u32::MAX))
    }

    fn apply(&mut self, op: PreparedOp, counters: &mut Counters) -> StorageResult<WriteOutcome> {
        match op {
            PreparedOp::Insert {
                id,
                id_key,
                doc,
                mut record,
                meta,
                supersede,
            } => {
                if let Some(capped) = &self.capped {
                    let bson_bytes = (record.len() - RECORD_HEADER_LEN) as u64;
                    // The oplog takes every entry, however large (as mongod's): refusing one
                    // would fail the write it records. Rollover still keeps the newest.
                    if bson_bytes > capped.limits.max_bytes && !is_oplog(&self.entry.meta.ns) {
                        return Err(StorageError::ExceedsCappedSize);
                    }
                }
                let mut superseded = Vec::new();
                if self.data.get(id_key.as_slice()).map_err(io)?.is_some() {
                    self.resolve_conflict(&id_key, supersede.as_ref(), &mut superseded, || {
                        StorageError::DuplicateKey {
                            ns: self.entry.meta.ns.clone(),
                            index: IndexSpec::ID_INDEX_NAME.to_string(),
                            key_pattern: Box::new(self.entry.id_index().key_pattern()),
                            key_value: Box::new(doc! {"_id": id}),
                        }
                    })?;
                }
                let new_keys = self.index_keys(&doc)?;
                // Unique keys held by a superseded `_id` twin are owned by `id_key`: no conflict.
                self.check_unique(
                    &doc,
                    &id_key,
                    &new_keys,
                    None,
                    supersede.as_ref(),
                    &mut superseded,
                )?;
                let superseded = self.remove_superseded(superseded)?;
                let rev = counters.take_rev();
                // Revisions only grow: the insert's revision is its record id, so ids are never
                // reused and a new document is last in natural order.
                let record_id = if self.natural.is_some() { rev } else { 0 };
                set_record_header(&mut record, rev, meta, record_id);
                self.put_record(&id_key, &record, None)?;
                self.move_index_entries(&id_key, None, &new_keys)?;
                self.set_expiry(meta, &id_key, true)?;
                self.add_natural(record_id, &id_key)?;
                self.roll_over(&id_key)?;
                Ok(WriteOutcome::Inserted { rev, superseded })
            }
            PreparedOp::Replace {
                id_key,
                expected_rev,
                doc,
                mut record,
                meta,
                supersede,
                ..
            } => {
                let old_record = self.current(&id_key, Some(expected_rev))?;
                let old_header = record_header(&old_record)?;
                let old_meta = old_header.meta;
                let old_keys = self.keyer.entries(&old_record)?;
                let new_keys = self.index_keys(&doc)?;
                let mut superseded = Vec::new();
                self.check_unique(
                    &doc,
                    &id_key,
                    &new_keys,
                    Some(&old_keys),
                    supersede.as_ref(),
                    &mut superseded,
                )?;
                let superseded = self.remove_superseded(superseded)?;
                let rev = counters.take_rev();
                // A replaced document keeps its place in natural order.
                set_record_header(&mut record, rev, meta, old_header.record_id);
                self.put_record(&id_key, &record, Some(old_record.len()))?;
                self.move_index_entries(&id_key, Some(&old_keys), &new_keys)?;
                if old_meta != meta {
                    self.set_expiry(old_meta, &id_key, false)?;
                    self.set_expiry(meta, &id_key, true)?;
                }
                Ok(WriteOutcome::Replaced { rev, superseded })
            }
            PreparedOp::Delete {
                id_key,
                expected_rev,
                ..
            } => {
                let old_record = self.current(&id_key, expected_rev)?;
                let removal = self.plan_removal(&id_key, &old_record)?;
                self.remove(&removal)?;
                Ok(WriteOutcome::Deleted)
            }
            PreparedOp::Invalid(error) => Err(error),
        }
    }

    /// Resolves every new unique key (one the document does not already hold) that another
    /// document holds: superseded (added to `superseded`) or a `DuplicateKey` failure.
    fn check_unique(
        &self,
        document: &Document,
        id_key: &[u8],
        new_keys: &[DocumentKeys],
        old_keys: Option<&[DocumentKeys]>,
        supersede: Option<&RecordPredicate>,
        superseded: &mut Vec<Removal>,
    ) -> StorageResult<()> {
        for (position, (index, keys)) in self.indexes.iter().zip(new_keys).enumerate() {
            if !index.index.unique() {
                continue;
            }
            let held = old_keys.and_then(|old| old.get(position));
            for key in &keys.keys {
                if held.is_some_and(|held| held.keys.binary_search(key).is_ok()) {
                    continue;
                }
                if let Some(owner) = index.other_owner(key, id_key)? {
                    self.resolve_conflict(&owner, supersede, superseded, || {
                        index
                            .index
                            .keyer
                            .duplicate_key(&self.entry.meta.ns, document, key)
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Writes a record; `old_len` is the replaced record's length.
    fn put_record(
        &mut self,
        id_key: &[u8],
        record: &[u8],
        old_len: Option<usize>,
    ) -> StorageResult<()> {
        self.data.insert(id_key, record).map_err(io)?;
        match old_len {
            Some(old_len) => self.data_size.value_bytes += record.len() as i64 - old_len as i64,
            None => self.data_size.add(id_key.len(), record.len()),
        }
        Ok(())
    }
}
