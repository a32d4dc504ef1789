//! A multi-document transaction seen as a [`Storage`]: reads come from the snapshot the
//! transaction pinned when it started, with its own staged writes laid over them; writes are
//! checked against that view and staged, never stored, until `commitTransaction` hands them to
//! [`Storage::commit_transaction`] as one atomic step. Commands run unchanged inside a
//! transaction because they only ever see this `Storage`.
//!
//! Invariants:
//! - Snapshot isolation: nothing committed after the snapshot shows through; the transaction's
//!   own writes always do.
//! - First writer wins, at once: a transaction that writes a document another running
//!   transaction has written, or one changed (written, deleted, reaped) since its snapshot,
//!   fails that statement with `WriteConflict` (claims in [`Intents`], checked against the live
//!   revision). Writes outside transactions are never blocked; the transaction that loses to
//!   one fails at commit, when the engine finds the revision it read has changed.
//! - Staged documents carry revisions of their own, from [`LOCAL_REVS`] up, so the
//!   revision checks of later statements work on them exactly as on stored documents.
//! - A scan is the snapshot's scan with the staged documents merged in by position (the
//!   snapshot's stored keys; for staged entries, `Snapshot::entry_position` in an index, and in
//!   a collection scan `Snapshot::record_position` for a rewritten document, which keeps its
//!   place, or `Snapshot::appended_position` for an inserted one, after every stored document
//!   in the order the transaction first wrote them, which is the order the commit inserts
//!   them): pages, resume keys and costs stay the snapshot's, plus the staged documents of the
//!   scanned collection.
//! - A document inserted where the snapshot holds one with its `_id` (deleted or superseded by
//!   the transaction) commits as a delete and an insert, so it goes to the end of natural order
//!   as outside a transaction; any other rewrite of a stored document commits as a replacement.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::{doc, Bson, Document, RawDocumentBuf};

use tideway_base::clock::Clock;
use tideway_base::error::ErrorCode;
use tideway_query::keycodec::{encode_id, prefix_successor};
use tideway_storage::indexkeys::IndexKeyer;
use tideway_storage::{
    CollectionMeta, CollectionStats, EntryCount, ExpiryOrder, IndexSpec, KeyRange, Namespace,
    RawRecord, ReapPage, ReapRequest, ReapSource, Record, RecordPredicate, RecordSession, ScanPage,
    ScanRequest, ScanSource, SessionClaim, Snapshot, Storage, StorageError, StorageResult,
    TransactionCommit, TtlClass, WriteMeta, WriteOp, WriteOptions, WriteOutcome,
};

/// Revisions of staged documents start here, far above any the engine hands out.
pub(crate) const LOCAL_REVS: u64 = 1 << 62;

/// Which running transaction claimed each document it wrote: a second writer conflicts.
#[derive(Debug, Default)]
pub struct Intents {
    claims: Mutex<HashMap<(Namespace, Vec<u8>), u64>>,
}

impl Intents {
    /// Claims `(ns, id_key)` for transaction `txn`; `false` if another one holds it.
    fn claim(&self, txn: u64, ns: &Namespace, id_key: &[u8]) -> bool {
        let mut claims = lock(&self.claims);
        let holder = claims.entry((ns.clone(), id_key.to_vec())).or_insert(txn);
        *holder == txn
    }

    /// Releases every claim of transaction `txn`.
    pub fn release(&self, txn: u64, keys: impl Iterator<Item = (Namespace, Vec<u8>)>) {
        let mut claims = lock(&self.claims);
        for key in keys {
            if claims.get(&key) == Some(&txn) {
                claims.remove(&key);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Time inside a transaction: the instant its snapshot was taken. Reads judge expiry at it
/// (a document the snapshot saw alive stays so for the whole transaction) and writes are
/// stamped with it.
#[derive(Debug)]
pub struct FrozenClock(AtomicI64);

impl Clock for FrozenClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    fn advance_ms(&self, _delta_ms: i64) {}
}

/// One document the transaction wrote.
#[derive(Clone, Debug)]
struct StagedDoc {
    id: Bson,
    /// Its revision in the snapshot (`None`: absent there).
    base_rev: Option<u64>,
    /// Its state now (`None`: deleted).
    now: Option<Record>,
    supersede: Option<RecordPredicate>,
    /// The last write replaced it whole (its oplog entry is a replacement).
    replacement: bool,
    /// When the transaction first wrote it: the commit applies documents in this order, the
    /// order of the statements.
    seq: u64,
    /// A statement inserted it while the snapshot holds a document with its `_id` (deleted or
    /// superseded earlier): it commits as a delete and a new insert, so it leaves its place in
    /// natural order for the end.
    reinserted: bool,
}

impl StagedDoc {
    /// What committing the document does: a `Replace`/`Delete` of the snapshot's revision, an
    /// `Insert` where the snapshot had none (a `Delete` and an `Insert` when it was reinserted);
    /// nothing for a document inserted and deleted again.
    fn final_ops(&self) -> Vec<WriteOp> {
        let meta = |record: &Record| WriteMeta {
            last_write_ms: record.last_write_ms,
            ttl: record.ttl,
        };
        let insert = |record: &Record| WriteOp::Insert {
            doc: record.doc.document().clone(),
            meta: meta(record),
            supersede: self.supersede.clone(),
        };
        let delete = |rev: u64| WriteOp::Delete {
            id: self.id.clone(),
            expected_rev: Some(rev),
        };
        match (self.base_rev, &self.now) {
            (None, None) => Vec::new(),
            (Some(rev), None) => vec![delete(rev)],
            (Some(rev), Some(record)) if self.reinserted => vec![delete(rev), insert(record)],
            (Some(rev), Some(record)) => vec![WriteOp::Replace {
                id: self.id.clone(),
                expected_rev: rev,
                doc: record.doc.document().clone(),
                meta: meta(record),
                supersede: self.supersede.clone(),
                replacement: self.replacement,
            }],
            (None, Some(record)) => vec![insert(record)],
        }
    }
}

#[derive(Debug, Default)]
struct StagedCollection {
    /// Set when the transaction created the collection (explicitly or by a first insert).
    created: Option<CollectionMeta>,
    /// By `_id` key.
    docs: BTreeMap<Vec<u8>, StagedDoc>,
}

#[derive(Debug, Default)]
struct Staged {
    collections: BTreeMap<Namespace, StagedCollection>,
    next_rev: u64,
}

/// What one statement makes of a document: its new state (`None`: deleted), the rule that
/// let it supersede an expired document, and whether it replaced the document whole.
struct StagedWrite {
    now: Option<(Document, WriteMeta)>,
    supersede: Option<RecordPredicate>,
    replacement: bool,
    /// The statement inserts the document.
    inserted: bool,
}

impl StagedWrite {
    fn deleted() -> StagedWrite {
        StagedWrite {
            now: None,
            supersede: None,
            replacement: false,
            inserted: false,
        }
    }
}

/// A running transaction's storage. See the module documentation.
pub struct TxnStorage {
    base: Arc<dyn Storage>,
    snapshot: Arc<dyn Snapshot>,
    /// Distinguishes this transaction's claims.
    id: u64,
    /// The session's `txnNumber` for it.
    txn_number: i64,
    intents: Arc<Intents>,
    pub clock: Arc<FrozenClock>,
    staged: Mutex<Staged>,
}

impl fmt::Debug for TxnStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxnStorage({})", self.id)
    }
}

fn unsupported(message: impl Into<String>) -> StorageError {
    StorageError::CannotIndex {
        code: ErrorCode::OperationNotSupportedInTransaction,
        message: message.into(),
    }
}

fn id_duplicate(ns: &Namespace, id: &Bson) -> StorageError {
    StorageError::DuplicateKey {
        ns: ns.clone(),
        index: IndexSpec::ID_INDEX_NAME.to_string(),
        key_pattern: Box::new(doc! {"_id": 1}),
        key_value: Box::new(doc! {"_id": id.clone()}),
    }
}

fn raw_holds(predicate: &RecordPredicate, record: &Record) -> bool {
    let Ok(raw) = RawDocumentBuf::from_document(record.doc.document()) else {
        return false;
    };
    predicate.holds(&RawRecord {
        doc: &raw,
        rev: record.rev,
        last_write_ms: record.last_write_ms,
        ttl: record.ttl,
    })
}

/// Whether `key` lies in the prefix range `range` (as the engine reads scan ranges).
fn in_range(key: &[u8], (lower, upper): &KeyRange) -> bool {
    let above = match lower {
        Bound::Included(bound) => key >= bound.as_slice(),
        Bound::Excluded(bound) => match prefix_successor(bound) {
            Some(next) => key >= next.as_slice(),
            None => false,
        },
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(bound) => match prefix_successor(bound) {
            Some(next) => key < next.as_slice(),
            None => true,
        },
        Bound::Excluded(bound) => key < bound.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// How a scan source keys a document: its index's keys, or its `_id` key.
enum SourceKeys {
    Id,
    Index(Box<IndexKeyer>),
}

impl SourceKeys {
    fn keys(&self, document: &Document, id_key: &[u8]) -> StorageResult<Vec<Vec<u8>>> {
        match self {
            SourceKeys::Id => Ok(vec![id_key.to_vec()]),
            SourceKeys::Index(keyer) => keyer.keys(document),
        }
    }
}

impl TxnStorage {
    pub async fn begin(
        base: Arc<dyn Storage>,
        intents: Arc<Intents>,
        (id, txn_number): (u64, i64),
        now_ms: i64,
    ) -> StorageResult<TxnStorage> {
        let snapshot = base.snapshot().await?;
        Ok(TxnStorage {
            base,
            snapshot,
            id,
            txn_number,
            intents,
            clock: Arc::new(FrozenClock(AtomicI64::new(now_ms))),
            staged: Mutex::new(Staged {
                next_rev: LOCAL_REVS,
                ..Staged::default()
            }),
        })
    }

    /// Which transaction this is: a unique id and the session's `txnNumber` for it.
    pub fn identity(&self) -> (u64, i64) {
        (self.id, self.txn_number)
    }

    /// Releases the documents this transaction claimed (at commit or abort).
    pub fn release(&self) {
        let keys: Vec<(Namespace, Vec<u8>)> = lock(&self.staged)
            .collections
            .iter()
            .flat_map(|(ns, staged)| staged.docs.keys().map(|key| (ns.clone(), key.clone())))
            .collect();
        self.intents.release(self.id, keys.into_iter());
    }

    /// Whether the transaction wrote anything (a read-only one commits nothing).
    pub(crate) fn has_writes(&self) -> bool {
        lock(&self.staged)
            .collections
            .values()
            .any(|staged| staged.created.is_some() || !staged.docs.is_empty())
    }

    /// The commit of everything staged: collections to create, then each document's final
    /// state in the order the transaction first wrote them, across collections (so the oplog
    /// and change streams follow the statements, and a key a statement freed is free again
    /// before a later statement takes it), as runs of consecutive operations on one collection.
    /// `stale` gives each collection's expired-now rule.
    pub fn commit(
        &self,
        stale: impl Fn(&CollectionMeta) -> Option<RecordPredicate>,
    ) -> TransactionCommit {
        let staged = lock(&self.staged);
        let mut commit = TransactionCommit::default();
        let mut writes: Vec<(u64, &Namespace, WriteOp)> = Vec::new();
        for (ns, collection) in &staged.collections {
            if let Some(created) = &collection.created {
                let indexes = created
                    .indexes
                    .iter()
                    .filter(|index| !index.is_id_index())
                    .map(|index| (**index).clone())
                    .collect();
                commit
                    .creates
                    .push((ns.clone(), created.options.clone(), indexes));
            }
            for doc in collection.docs.values() {
                writes.extend(doc.final_ops().into_iter().map(|op| (doc.seq, ns, op)));
            }
        }
        // Stable: a reinserted document's delete stays before its insert.
        writes.sort_by_key(|(seq, _, _)| *seq);
        let mut rules: BTreeMap<&Namespace, Option<RecordPredicate>> = BTreeMap::new();
        for (_, ns, op) in writes {
            match commit.writes.last_mut() {
                Some((last, ops, _)) if last == ns => ops.push(op),
                _ => {
                    // (Not `view_meta`: the staged state is locked here.)
                    let rule = rules
                        .entry(ns)
                        .or_insert_with(|| {
                            let created =
                                staged.collections.get(ns).and_then(|c| c.created.clone());
                            created
                                .or_else(|| self.snapshot.collection(ns))
                                .as_ref()
                                .and_then(&stale)
                        })
                        .clone();
                    commit.writes.push((ns.clone(), vec![op], rule));
                }
            }
        }
        commit
    }

    fn staged_meta(&self, ns: &Namespace) -> Option<CollectionMeta> {
        lock(&self.staged)
            .collections
            .get(ns)
            .and_then(|staged| staged.created.clone())
    }

    fn view_meta(&self, ns: &Namespace) -> Option<CollectionMeta> {
        self.staged_meta(ns)
            .or_else(|| self.snapshot.collection(ns))
    }

    /// The document as the transaction sees it, with its snapshot revision if the transaction
    /// has not written it yet (`Err` of the staged state otherwise).
    async fn current(
        &self,
        ns: &Namespace,
        id: &Bson,
        id_key: &[u8],
    ) -> StorageResult<(Option<Record>, Option<Option<u64>>)> {
        let staged = lock(&self.staged)
            .collections
            .get(ns)
            .and_then(|collection| collection.docs.get(id_key).cloned());
        match staged {
            Some(doc) => Ok((doc.now, None)),
            None => {
                let record = self.snapshot.get(ns, id).await?;
                let rev = record.as_ref().map(|record| record.rev);
                Ok((record, Some(rev)))
            }
        }
    }

    /// Claims a document not written yet by this transaction: `WriteConflict` if another
    /// transaction holds it or it changed since the snapshot (`base_rev`).
    async fn claim(
        &self,
        ns: &Namespace,
        id: &Bson,
        id_key: &[u8],
        base_rev: Option<u64>,
    ) -> StorageResult<()> {
        if !self.intents.claim(self.id, ns, id_key) {
            return Err(StorageError::WriteConflict);
        }
        match self.base.get(ns, id).await {
            Ok(live) if live.as_ref().map(|record| record.rev) == base_rev => Ok(()),
            outcome => {
                // Nothing gets staged for the document, and `release` returns only the claims
                // of staged documents: give this one back now, or it would block every later
                // writer of the document for the life of the server.
                self.intents
                    .release(self.id, std::iter::once((ns.clone(), id_key.to_vec())));
                Err(outcome.err().unwrap_or(StorageError::WriteConflict))
            }
        }
    }

    fn stage(
        &self,
        ns: &Namespace,
        id_key: Vec<u8>,
        id: Bson,
        base_rev: Option<Option<u64>>,
        write: StagedWrite,
    ) -> u64 {
        let StagedWrite {
            now,
            supersede,
            replacement,
            inserted,
        } = write;
        let mut staged = lock(&self.staged);
        let rev = staged.next_rev;
        staged.next_rev += 1;
        let collection = staged.collections.entry(ns.clone()).or_default();
        let previous = collection
            .docs
            .get(&id_key)
            .map(|doc| (doc.base_rev, doc.seq, doc.reinserted));
        let base_rev = previous.map(|(rev, _, _)| rev).or(base_rev).flatten();
        let seq = previous.map_or(rev, |(_, seq, _)| seq);
        let reinserted = previous.is_some_and(|(_, _, reinserted)| reinserted)
            || (inserted && base_rev.is_some());
        collection.docs.insert(
            id_key,
            StagedDoc {
                id,
                base_rev,
                now: now.map(|(doc, meta)| Record {
                    doc: doc.into(),
                    rev,
                    last_write_ms: meta.last_write_ms,
                    ttl: meta.ttl,
                }),
                supersede,
                replacement,
                seq,
                reinserted,
            },
        );
        rev
    }

    /// Checks `document`'s keys in the unique indexes (`unique`: each index's keyer and the
    /// document's keys in it) against every other document the transaction sees; conflicting
    /// documents `supersede` holds for are deleted (staged). Returns how many were.
    async fn check_unique(
        &self,
        ns: &Namespace,
        meta: &CollectionMeta,
        (document, id_key): (&Document, &[u8]),
        unique: &[(IndexKeyer, Vec<Vec<u8>>)],
        supersede: Option<&RecordPredicate>,
    ) -> StorageResult<u32> {
        if unique.is_empty() {
            return Ok(0);
        }
        // The other documents the transaction wrote: their snapshot versions do not count.
        let staged: BTreeMap<Vec<u8>, Option<Record>> = lock(&self.staged)
            .collections
            .get(ns)
            .map(|collection| {
                collection
                    .docs
                    .iter()
                    .filter(|(other, _)| other.as_slice() != id_key)
                    .map(|(other, doc)| (other.clone(), doc.now.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut superseded = 0;
        for (keyer, keys) in unique {
            for other in staged.values().flatten() {
                let theirs = keyer.keys(other.doc.document())?;
                if let Some(key) = keys.iter().find(|key| theirs.contains(key)) {
                    return Err(keyer.duplicate_key(ns, document, key));
                }
            }
            for key in keys {
                let request = ScanRequest {
                    source: ScanSource::Index {
                        name: keyer.spec().name.clone(),
                        ranges: vec![(Bound::Included(key.clone()), Bound::Included(key.clone()))],
                    },
                    resume_after: None,
                    reverse: false,
                    limit: 16,
                    hide: None,
                    key_filter: None,
                    covered: false,
                };
                let page = self.snapshot.scan(ns, request).await?;
                for record in page.records {
                    let other_id = record.doc.id();
                    let other_key = encode_id(&other_id);
                    if other_key == id_key || staged.contains_key(&other_key) {
                        continue;
                    }
                    match supersede {
                        Some(rule) if raw_holds(rule, &record) => {
                            let target = (other_id, other_key, Some(Some(record.rev)));
                            Box::pin(self.put(ns, meta, target, StagedWrite::deleted())).await?;
                            superseded += 1;
                        }
                        _ => return Err(keyer.duplicate_key(ns, document, key)),
                    }
                }
            }
        }
        Ok(superseded)
    }

    /// Stages a document's new state after checking its unique keys and claiming it (`target`:
    /// its `_id`, `_id` key and, if not written yet, snapshot revision); returns its staged
    /// revision and how many expired documents it superseded.
    async fn put(
        &self,
        ns: &Namespace,
        meta: &CollectionMeta,
        (id, id_key, base_rev): (Bson, Vec<u8>, Option<Option<u64>>),
        write: StagedWrite,
    ) -> StorageResult<(u64, u32)> {
        let superseded = match &write.now {
            Some((doc, _)) => {
                // Every index must take the document (parallel arrays, a hashed array, a bad
                // text language): refused now, at the statement, as the engine would refuse it.
                let mut unique = Vec::new();
                for spec in meta.indexes.iter().filter(|index| !index.catalog_only) {
                    let keyer = IndexKeyer::new((**spec).clone())?;
                    let keys = keyer.keys(doc)?;
                    if spec.unique && !spec.is_id_index() {
                        unique.push((keyer, keys));
                    }
                }
                let supersede = write.supersede.as_ref();
                self.check_unique(ns, meta, (doc, &id_key), &unique, supersede)
                    .await?
            }
            None => 0,
        };
        if let Some(base_rev) = base_rev {
            self.claim(ns, &id, &id_key, base_rev).await?;
        }
        Ok((self.stage(ns, id_key, id, base_rev, write), superseded))
    }

    async fn write_one(
        &self,
        ns: &Namespace,
        meta: &CollectionMeta,
        op: WriteOp,
    ) -> StorageResult<WriteOutcome> {
        match op {
            WriteOp::Insert {
                doc,
                meta: write_meta,
                supersede,
            } => {
                let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
                let id_key = encode_id(&id);
                let (current, base_rev) = self.current(ns, &id, &id_key).await?;
                let mut superseded = 0;
                if let Some(record) = &current {
                    match &supersede {
                        Some(rule) if raw_holds(rule, record) => superseded += 1,
                        _ => return Err(id_duplicate(ns, &id)),
                    }
                }
                let (rev, more) = self
                    .put(
                        ns,
                        meta,
                        (id, id_key, base_rev),
                        StagedWrite {
                            now: Some((doc, write_meta)),
                            supersede,
                            replacement: false,
                            inserted: true,
                        },
                    )
                    .await?;
                superseded += more;
                Ok(WriteOutcome::Inserted { rev, superseded })
            }
            WriteOp::Replace {
                id,
                expected_rev,
                doc,
                meta: write_meta,
                supersede,
                replacement,
            } => {
                let id_key = encode_id(&id);
                let (current, base_rev) = self.current(ns, &id, &id_key).await?;
                if current.as_ref().map(|record| record.rev) != Some(expected_rev) {
                    return Err(StorageError::WriteConflict);
                }
                let (rev, superseded) = self
                    .put(
                        ns,
                        meta,
                        (id, id_key, base_rev),
                        StagedWrite {
                            now: Some((doc, write_meta)),
                            supersede,
                            replacement,
                            inserted: false,
                        },
                    )
                    .await?;
                Ok(WriteOutcome::Replaced { rev, superseded })
            }
            WriteOp::Delete { id, expected_rev } => {
                let id_key = encode_id(&id);
                let (current, base_rev) = self.current(ns, &id, &id_key).await?;
                let Some(current) = current else {
                    return Err(StorageError::WriteConflict);
                };
                if expected_rev.is_some_and(|rev| rev != current.rev) {
                    return Err(StorageError::WriteConflict);
                }
                self.put(ns, meta, (id, id_key, base_rev), StagedWrite::deleted())
                    .await?;
                Ok(WriteOutcome::Deleted)
            }
        }
    }

    /// A new collection's catalog entry, as the engine would create it.
    fn created_meta(ns: &Namespace, options: Document, indexes: Vec<IndexSpec>) -> CollectionMeta {
        let mut all = vec![Arc::new(IndexSpec::id_index())];
        all.extend(indexes.into_iter().map(Arc::new));
        CollectionMeta {
            ns: ns.clone(),
            uuid: uuid::Uuid::new_v4().into_bytes(),
            options,
            indexes: all,
            multikey_indexes: Vec::new(),
        }
    }

    /// The staged documents' entries in `request`'s source and ranges, each with where it sits
    /// among the scan's positions (as the snapshot's scan positions its entries), unordered.
    fn staged_entries(
        &self,
        ns: &Namespace,
        meta: Option<&CollectionMeta>,
        request: &ScanRequest,
        staged: &StagedCollection,
    ) -> StorageResult<Vec<(StagedPosition, Record)>> {
        let (index, keys, ranges) = match &request.source {
            ScanSource::Collection => return self.staged_records(ns, staged),
            ScanSource::Index { name, ranges } if name == IndexSpec::ID_INDEX_NAME => {
                (name.as_str(), SourceKeys::Id, ranges.clone())
            }
            ScanSource::Index { name, ranges } => {
                let spec = meta
                    .and_then(|meta| meta.index_named(name))
                    .ok_or_else(|| StorageError::IndexNotFound(name.clone()))?;
                (
                    name.as_str(),
                    SourceKeys::Index(Box::new(IndexKeyer::new((**spec).clone())?)),
                    ranges.clone(),
                )
            }
        };
        let mut entries = Vec::new();
        for (id_key, doc) in &staged.docs {
            let Some(record) = &doc.now else {
                continue;
            };
            for key in keys.keys(record.doc.document(), id_key)? {
                if !ranges.iter().any(|range| in_range(&key, range))
                    || request
                        .key_filter
                        .as_ref()
                        .is_some_and(|filter| !filter.holds(&key))
                {
                    continue;
                }
                let position = match &staged.created {
                    // Not in the snapshot's catalog: its positions follow the engine's rule for
                    // an index, (key, `_id` key), or the `_id` key for `_id_`.
                    Some(_) if index != IndexSpec::ID_INDEX_NAME => [key, id_key.clone()].concat(),
                    Some(_) => id_key.clone(),
                    None => self
                        .snapshot
                        .entry_position(ns, index, &key, id_key)
                        .ok_or_else(|| StorageError::IndexNotFound(index.to_string()))?,
                };
                entries.push((StagedPosition::Known(position), record.clone()));
            }
        }
        Ok(entries)
    }

    /// The staged documents as a collection scan meets them: a document the snapshot holds
    /// where it is stored (unless reinserted), the others after every stored document in the
    /// order the transaction first wrote them, as the commit inserts them (in a clustered
    /// collection, everything at its `_id`).
    fn staged_records(
        &self,
        ns: &Namespace,
        staged: &StagedCollection,
    ) -> StorageResult<Vec<(StagedPosition, Record)>> {
        let mut entries = Vec::new();
        for (id_key, doc) in &staged.docs {
            let Some(record) = &doc.now else {
                continue;
            };
            let position = match &staged.created {
                // Only staged documents to order among themselves.
                Some(created) if created.clustered() => StagedPosition::Known(id_key.clone()),
                Some(_) => StagedPosition::Known(doc.seq.to_be_bytes().to_vec()),
                None if doc.base_rev.is_some() && !doc.reinserted => {
                    StagedPosition::OfStored(id_key.clone())
                }
                None => StagedPosition::Known(
                    self.snapshot
                        .appended_position(ns, id_key, doc.seq)
                        .ok_or_else(|| StorageError::NamespaceNotFound(ns.clone()))?,
                ),
            };
            entries.push((position, record.clone()));
        }
        Ok(entries)
    }

    /// `entries` with their positions resolved, those after `request`'s resume key, in scan
    /// order.
    async fn staged_in_order(
        &self,
        ns: &Namespace,
        request: &ScanRequest,
        entries: Vec<(StagedPosition, Record)>,
    ) -> StorageResult<Vec<(Vec<u8>, Record)>> {
        let mut ordered = Vec::with_capacity(entries.len());
        for (position, record) in entries {
            let position = match position {
                StagedPosition::Known(position) => position,
                StagedPosition::OfStored(id_key) => {
                    match self.snapshot.record_position(ns, &id_key).await? {
                        Some(position) => position,
                        None => {
                            return Err(StorageError::Corrupt(format!(
                                "a document of {ns} is missing from the transaction's snapshot"
                            )))
                        }
                    }
                }
            };
            let after_resume = match &request.resume_after {
                None => true,
                Some(resume) if request.reverse => position < *resume,
                Some(resume) => position > *resume,
            };
            if after_resume {
                ordered.push((position, record));
            }
        }
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        if request.reverse {
            ordered.reverse();
        }
        Ok(ordered)
    }
}

/// Where a staged entry sits among a scan's positions.
enum StagedPosition {
    Known(Vec<u8>),
    /// Where the snapshot stores the document with this `_id` key
    /// (`Snapshot::record_position`).
    OfStored(Vec<u8>),
}

#[async_trait]
impl Storage for TxnStorage {
    fn engine_name(&self) -> &'static str {
        self.base.engine_name()
    }

    async fn list_databases(&self) -> StorageResult<Vec<(String, u64)>> {
        self.base.list_databases().await
    }

    async fn list_database_names(&self) -> StorageResult<Vec<String>> {
        self.base.list_database_names().await
    }

    fn time_high_water_ms(&self) -> i64 {
        self.base.time_high_water_ms()
    }

    fn cluster_time(&self) -> bson::Timestamp {
        self.base.cluster_time()
    }

    fn oplog_appended(&self) -> &tokio::sync::Notify {
        self.base.oplog_appended()
    }

    async fn record_time(&self, now_ms: i64) -> StorageResult<()> {
        self.base.record_time(now_ms).await
    }

    async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>> {
        let mut collections = self.snapshot.list_collections(db);
        let staged = lock(&self.staged);
        for (ns, collection) in &staged.collections {
            if let (Some(meta), true) = (&collection.created, ns.db == db) {
                collections.push(meta.clone());
            }
        }
        collections.sort_by(|a, b| a.ns.cmp(&b.ns));
        Ok(collections)
    }

    async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>> {
        Ok(self.view_meta(ns))
    }

    async fn create_collection(
        &self,
        ns: &Namespace,
        options: Document,
        indexes: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        if self.view_meta(ns).is_some() {
            return Err(StorageError::NamespaceExists(ns.clone()));
        }
        let meta = Self::created_meta(ns, options, indexes);
        lock(&self.staged)
            .collections
            .entry(ns.clone())
            .or_default()
            .created = Some(meta.clone());
        Ok(meta)
    }

    async fn drop_collection(&self, ns: &Namespace) -> StorageResult<bool> {
        Err(unsupported(format!(
            "Cannot drop {ns} in a multi-document transaction."
        )))
    }

    async fn drop_database(&self, db: &str) -> StorageResult<()> {
        Err(unsupported(format!(
            "Cannot drop database {db} in a multi-document transaction."
        )))
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        _to: &Namespace,
        _drop_target: bool,
    ) -> StorageResult<()> {
        Err(unsupported(format!(
            "Cannot rename {from} in a multi-document transaction."
        )))
    }

    async fn set_collection_options(
        &self,
        ns: &Namespace,
        _options: Document,
    ) -> StorageResult<()> {
        Err(unsupported(format!(
            "Cannot modify {ns} in a multi-document transaction."
        )))
    }

    async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        let existing = self.snapshot.collection(ns);
        let mut staged = lock(&self.staged);
        let collection = staged.collections.entry(ns.clone()).or_default();
        if existing.is_some() && collection.created.is_none() {
            return Err(unsupported(format!(
                "Cannot create new indexes on existing collection {ns} in a multi-document transaction."
            )));
        }
        let new = specs.iter().any(|spec| {
            collection
                .created
                .as_ref()
                .and_then(|meta| meta.index_named(&spec.name))
                .is_none()
        });
        if new && collection.docs.values().any(|doc| doc.now.is_some()) {
            return Err(unsupported(format!(
                "Cannot create new indexes on non-empty collection {ns} in a multi-document transaction."
            )));
        }
        let mut meta = collection
            .created
            .take()
            .unwrap_or_else(|| Self::created_meta(ns, Document::new(), Vec::new()));
        for spec in specs {
            if meta.index_named(&spec.name).is_none() {
                IndexKeyer::new(spec.clone())?;
                meta.indexes.push(Arc::new(spec));
            }
        }
        collection.created = Some(meta.clone());
        Ok(meta)
    }

    async fn drop_indexes(&self, ns: &Namespace, _names: &[String]) -> StorageResult<()> {
        Err(unsupported(format!(
            "Cannot drop indexes of {ns} in a multi-document transaction."
        )))
    }

    async fn update_index_spec(
        &self,
        ns: &Namespace,
        _name: &str,
        _spec: Document,
    ) -> StorageResult<()> {
        Err(unsupported(format!(
            "Cannot modify {ns} in a multi-document transaction."
        )))
    }

    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>> {
        Ok(self.current(ns, id, &encode_id(id)).await?.0)
    }

    /// The snapshot's page with the staged documents merged in by position: the snapshot's
    /// records of staged documents are dropped, and staged entries up to the last position the
    /// snapshot page visited (all of them once it is exhausted) join in order. Resume keys are
    /// positions, which both sides order alike.
    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        let meta = self.view_meta(ns);
        // The staged entries of the scan, and which documents the transaction wrote, taken
        // under the lock without copying the staged documents that are not scanned.
        let staged = {
            let staged = lock(&self.staged);
            match staged
                .collections
                .get(ns)
                .filter(|collection| !collection.docs.is_empty())
            {
                None => None,
                Some(collection) => {
                    let entries = self.staged_entries(ns, meta.as_ref(), &request, collection)?;
                    let written: std::collections::HashSet<Vec<u8>> =
                        collection.docs.keys().cloned().collect();
                    Some((collection.created.is_some(), written, entries))
                }
            }
        };
        let Some((created, written, staged_entries)) = staged else {
            return self.snapshot.scan(ns, request).await;
        };
        let staged_entries = self.staged_in_order(ns, &request, staged_entries).await?;
        let snapshot_page = if created {
            ScanPage::default()
        } else {
            self.snapshot.scan(ns, request.clone()).await?
        };
        let covering = match (&request.source, request.covered, request.hide.is_none()) {
            (ScanSource::Index { name, .. }, true, _) => meta
                .as_ref()
                .and_then(|meta| meta.index_named(name))
                .filter(|spec| spec.is_ordered() && !spec.is_id_index())
                .map(|spec| IndexKeyer::new((**spec).clone()))
                .transpose()?,
            _ => None,
        };
        let ScanPage {
            records,
            positions,
            resume,
            last,
            keys_examined,
            docs_examined,
            ..
        } = snapshot_page;
        // Staged entries past what the snapshot page visited wait for its next page.
        let visited_to = resume.as_ref().and(last.clone());
        let within = |position: &Vec<u8>| match &visited_to {
            None => true,
            Some(bound) if request.reverse => position >= bound,
            Some(bound) => position <= bound,
        };
        let from_snapshot = positions
            .into_iter()
            .zip(records)
            .filter(|(_, record)| !written.contains(&encode_id(&record.doc.id())));
        let from_staged = staged_entries
            .into_iter()
            .filter(|(position, _)| within(position))
            .filter(|(_, record)| {
                !request
                    .hide
                    .as_ref()
                    .is_some_and(|hide| raw_holds(hide, record))
            })
            .map(|(position, mut record)| {
                if let Some(keyer) = &covering {
                    record.doc = keyer.key_fields_of(record.doc.document()).into();
                }
                (position, record)
            });
        let mut merged: Vec<(Vec<u8>, Record)> = from_snapshot.chain(from_staged).collect();
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        if request.reverse {
            merged.reverse();
        }
        let limit = request.limit.max(1);
        let more_here = merged.len() > limit;
        merged.truncate(limit);
        let last_emitted = merged.last().map(|(position, _)| position.clone());
        let mut page = ScanPage {
            keys_examined,
            docs_examined,
            ..ScanPage::default()
        };
        page.resume = if more_here {
            last_emitted.clone()
        } else {
            visited_to.clone()
        };
        page.last = last_emitted.or(visited_to);
        page.records = merged.into_iter().map(|(_, record)| record).collect();
        Ok(page)
    }

    async fn expiry_scan(
        &self,
        ns: &Namespace,
        _order: ExpiryOrder,
        _range: (Bound<i64>, Bound<i64>),
        _resume_after: Option<Vec<u8>>,
        _limit: usize,
    ) -> StorageResult<ScanPage> {
        Err(unsupported(format!(
            "Cannot scan the expiry order of {ns} in a multi-document transaction."
        )))
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount> {
        let staged: Vec<StagedDoc> = lock(&self.staged)
            .collections
            .get(ns)
            .map(|collection| collection.docs.values().cloned().collect())
            .unwrap_or_default();
        let created = self.staged_meta(ns).is_some();
        let mut count = if created {
            EntryCount::default()
        } else {
            self.snapshot.count_entries(ns, sources.clone()).await?
        };
        if staged.is_empty() {
            return Ok(count);
        }
        let meta = self.view_meta(ns);
        let in_sources = |record: &Record| -> StorageResult<bool> {
            for source in &sources {
                let hit = match source {
                    ReapSource::Expiry { order, range } => {
                        let at = match (order, record.ttl) {
                            (ExpiryOrder::LastWrite, TtlClass::Default) => {
                                Some(record.last_write_ms)
                            }
                            (ExpiryOrder::OwnExpiry, TtlClass::Own { expire_at_ms }) => {
                                Some(expire_at_ms)
                            }
                            _ => None,
                        };
                        at.is_some_and(|at| range.contains(&at))
                    }
                    ReapSource::Index { name, range } => {
                        let id_key = encode_id(&record.doc.id());
                        let keys = if name == IndexSpec::ID_INDEX_NAME {
                            vec![id_key]
                        } else {
                            match meta.as_ref().and_then(|meta| meta.index_named(name)) {
                                Some(spec) => IndexKeyer::new((**spec).clone())?
                                    .keys(record.doc.document())?,
                                None => Vec::new(),
                            }
                        };
                        keys.iter().any(|key| in_range(key, range))
                    }
                };
                if hit {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        for doc in &staged {
            if doc.base_rev.is_some() && !created {
                if let Some(before) = self.snapshot.get(ns, &doc.id).await? {
                    count.documents = count.documents.saturating_sub(1);
                    if in_sources(&before)? {
                        count.in_sources = count.in_sources.saturating_sub(1);
                    }
                }
            }
            if let Some(now) = &doc.now {
                count.documents += 1;
                if in_sources(now)? {
                    count.in_sources += 1;
                }
            }
        }
        Ok(count)
    }

    /// The snapshot's sizes with the staged documents counted in (their sizes too).
    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        let staged: Vec<StagedDoc> = lock(&self.staged)
            .collections
            .get(ns)
            .map(|collection| collection.docs.values().cloned().collect())
            .unwrap_or_default();
        let mut stats = match (self.snapshot.stats(ns).await, self.staged_meta(ns)) {
            (_, Some(_)) => CollectionStats::default(),
            (Ok(stats), None) => stats,
            (Err(error), None) => return Err(error),
        };
        for doc in &staged {
            if doc.base_rev.is_some() {
                if let Some(before) = self.snapshot.get(ns, &doc.id).await? {
                    stats.count = stats.count.saturating_sub(1);
                    let size = before.doc.encoded_size() as u64;
                    stats.data_size = stats.data_size.saturating_sub(size);
                }
            }
            if let Some(now) = &doc.now {
                stats.count += 1;
                stats.data_size += now.doc.encoded_size() as u64;
            }
        }
        Ok(stats)
    }

    async fn write(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        let meta = match self.view_meta(ns) {
            Some(meta) => meta,
            None if ops.iter().any(|op| matches!(op, WriteOp::Insert { .. })) => {
                let meta = Self::created_meta(ns, Document::new(), Vec::new());
                lock(&self.staged)
                    .collections
                    .entry(ns.clone())
                    .or_default()
                    .created = Some(meta.clone());
                meta
            }
            // Nothing to replace or delete.
            None => {
                return Ok(ops
                    .iter()
                    .take(if options.ordered { 1 } else { ops.len() })
                    .map(|_| Err(StorageError::WriteConflict))
                    .collect())
            }
        };
        if ns.coll.starts_with("system.") {
            return Err(StorageError::CannotIndex {
                code: ErrorCode::Location50791,
                message: format!("Cannot write to system collection {ns} within a transaction."),
            });
        }
        if meta.options.contains_key("timeseries") {
            return Err(unsupported(format!(
                "Cannot insert into a time-series collection in a multi-document transaction: {ns}"
            )));
        }
        if meta.capped().is_some() {
            // A write error of the first operation (mongod reports it per document).
            return Ok(vec![Err(unsupported(format!(
                "Collection '{ns}' is a capped collection. Writes in transactions are not allowed on capped collections."
            )))]);
        }
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let result = self.write_one(ns, &meta, op).await;
            let failed = result.is_err();
            results.push(result);
            if failed && options.ordered {
                break;
            }
        }
        Ok(results)
    }

    async fn write_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        _claim: Option<SessionClaim>,
        _record: RecordSession,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        // A transaction's statements are recorded by its commit (`crate::txn` owns their
        // txnNumber): they carry neither a claim nor a record of their own.
        self.write(ns, ops, options).await
    }

    async fn session_record(&self, key: &[u8]) -> StorageResult<Option<Document>> {
        self.base.session_record(key).await
    }

    async fn session_statements(
        &self,
        key: &[u8],
        txn_number: i64,
    ) -> StorageResult<Vec<(i32, Document)>> {
        self.base.session_statements(key, txn_number).await
    }

    async fn session_records(&self) -> StorageResult<Vec<(Vec<u8>, Document)>> {
        self.base.session_records().await
    }

    async fn snapshot(&self) -> StorageResult<Arc<dyn Snapshot>> {
        Ok(Arc::clone(&self.snapshot))
    }

    async fn commit_transaction(&self, _commit: TransactionCommit) -> StorageResult<()> {
        Err(unsupported("Transactions cannot be nested."))
    }

    async fn reap(&self, ns: &Namespace, _request: ReapRequest) -> StorageResult<ReapPage> {
        Err(unsupported(format!(
            "Cannot reap {ns} in a multi-document transaction."
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_match_as_the_engine_reads_them() {
        let range = (Bound::Included(vec![1]), Bound::Included(vec![2]));
        assert!(in_range(&[1], &range));
        assert!(in_range(&[2, 7], &range));
        assert!(!in_range(&[3], &range));
        let excluded = (Bound::Excluded(vec![1]), Bound::Unbounded);
        assert!(!in_range(&[1, 5], &excluded));
        assert!(in_range(&[2], &excluded));
    }
}
