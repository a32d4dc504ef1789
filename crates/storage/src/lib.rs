//! tideway-storage: the engine-independent contract (`Storage`) the layers above use, its types,
//! and its implementations. It uses `tideway-base` and `tideway-query` (key encoding, paths,
//! collation, text analysis) only: no commands, no TTL policy (callers pass predicates). The
//! contract is collection-level, async and object-safe (`Arc<dyn Storage>`), so a PostgreSQL
//! engine can implement it later without changing callers.
//!
//! Invariants every engine keeps:
//! - **Reads may return a superset** of what a scan's ranges describe; callers always re-check with
//!   the query's filter. Reads never return less.
//! - **Cursors hold no transaction**: a scan returns a page and a resume key; the next page starts
//!   strictly after it.
//! - **Natural order is insertion order** (as mongod's record ids): a collection scan
//!   ([`ScanSource::Collection`]) returns documents in the order they were inserted, forward or
//!   reverse. A replaced document keeps its place; a deleted one that is inserted again, or an
//!   insert that supersedes a document with the same `_id`, is a new document at the end. Places
//!   are never reused, so a scan resumed after a deleted document goes on after it (only a
//!   capped collection answers `ScanPage::position_lost` instead). A clustered collection
//!   ([`CollectionMeta::clustered`], decided at creation) is the exception: its natural order
//!   is `_id` order, as in mongod. `_id` lookups and `_id_` scans cost the same either way.
//! - **Writes are per-operation atomic**: an operation either applies entirely (document, every index
//!   and expiry entry, every document it supersedes) or not at all. A batch is applied in order; `ordered` stops at the first failed operation.
//! - **Revisions**: every stored document has a revision that changes on every write. `Replace` and
//!   `Delete` carry the revision the caller read; if the document changed since, the operation fails
//!   with `WriteConflict` and changes nothing (the caller re-reads and retries).
//! - **Durability**: with `force_durable` set (or an engine configured durable), a write is
//!   acknowledged only after it is on stable storage. `background` writes (TTL reaping) are the
//!   exception: acknowledged once committed, made durable shortly after; a crash may lose them.
//! - **Expiry structures are rule-free and exact**: every document carries a [`TtlClass`]; the engine
//!   keeps, per collection, the `Own`-class documents ordered by `expire_at_ms` (always) and the
//!   `Default`-class documents ordered by `last_write_ms` (while the caller's [`LastWriteRule`]
//!   selects the collection), updated atomically with the document. When a catalog change makes
//!   the rule select a collection, the same atomic step fills its order from the stored
//!   documents; when it stops selecting it, the order is emptied. What counts as expired is
//!   decided by the caller (`tideway_exec::ttl`); storage only orders and evaluates
//!   caller-supplied predicates ([`RecordPredicate`]) and rules.
//! - Errors are a small closed set ([`StorageError`]) mapped to MongoDB codes in one place
//!   (`impl From<StorageError> for CommandError`).
//! - **I/O errors are survivable**: a write that fails with `Io` or `OutOfDiskSpace` (a full disk)
//!   loses nothing acknowledged before it; reads go on; the engine recovers by itself, without a
//!   restart, so the same write succeeds once the cause is gone (space freed). Whether the failed
//!   write itself was applied is unknown, as with a lost reply.

pub mod catalog_doc;
pub mod command_scope;
pub mod conformance;
pub mod entry_keys;
mod hashed;
pub mod indexkeys;
pub mod oplog;
pub mod redb_engine;
mod stored_doc;
pub mod textkeys;
mod typebits;
pub mod wildcard;

pub use stored_doc::StoredDoc;

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bson::{Bson, Document, RawDocument};

use tideway_base::error::{CommandError, ErrorCode};
use tideway_query::collation::{Collation, CollationChoice};
use tideway_query::keycodec;

/// `db.collection`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: impl Into<String>, coll: impl Into<String>) -> Self {
        Namespace {
            db: db.into(),
            coll: coll.into(),
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// A collection as the catalog knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionMeta {
    pub ns: Namespace,
    /// Stable identity, reported as `info.uuid` (16 bytes).
    pub uuid: [u8; 16],
    /// The options given to `create` (empty for implicit creation), returned by `listCollections`.
    pub options: Document,
    /// Every index, `_id_` first (shared: plans hold them without copying).
    pub indexes: Vec<Arc<IndexSpec>>,
    /// Names of the indexes in which some document has (or had) more than one key: their
    /// bounds on one field must not be intersected. Only ever grows while an index exists.
    pub multikey_indexes: Vec<String>,
}

impl CollectionMeta {
    /// The collection's default collation (`create`'s `collation` option, stored resolved);
    /// `None` is the simple collation.
    pub fn default_collation(&self) -> tideway_base::error::CommandResult<CollationChoice> {
        match self.options.get("collation") {
            Some(Bson::Document(spec)) => Collation::parse(spec),
            _ => Ok(None),
        }
    }

    /// Whether the collection is clustered by `_id` (`options.clusteredIndex`, a document, as
    /// `create` stores it): its natural order is `_id` order. Fixed at creation: options set
    /// later keep it.
    pub fn clustered(&self) -> bool {
        Self::is_clustered(&self.options)
    }

    /// [`CollectionMeta::clustered`] for a collection with these options.
    pub fn is_clustered(options: &Document) -> bool {
        options.get_document(CLUSTERED_INDEX_OPTION).is_ok()
    }

    /// The capped collection's limits (`options.capped`, `size`, `max` as `create` stored
    /// them, see `tideway_exec::capped`); `None` for other collections.
    pub fn capped(&self) -> Option<CappedLimits> {
        CappedLimits::of_options(&self.options)
    }

    pub fn index_named(&self, name: &str) -> Option<&Arc<IndexSpec>> {
        self.indexes.iter().find(|index| index.name == name)
    }

    pub fn is_multikey(&self, index: &str) -> bool {
        self.multikey_indexes.iter().any(|name| name == index)
    }

    /// The index whose key pattern is exactly `key` (field order and directions included).
    pub fn index_with_key(&self, key: &Document) -> Option<&Arc<IndexSpec>> {
        self.indexes
            .iter()
            .find(|index| &index.key_pattern() == key)
    }
}

/// The collection option that makes a collection clustered (see [`CollectionMeta::clustered`]).
pub const CLUSTERED_INDEX_OPTION: &str = "clusteredIndex";

/// What a capped collection holds at most: after each insert the engine deletes the oldest
/// documents (insertion order) while the sum of the documents' BSON sizes exceeds `max_bytes`
/// or their number exceeds `max_docs`, in the same atomic operation; never the inserted one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedLimits {
    pub max_bytes: u64,
    pub max_docs: Option<u64>,
}

impl CappedLimits {
    /// The stored `max` meaning "no limit" (2^31 - 1, as mongod lists it); `max`/`cappedMax`
    /// must be below 2^31, and 0 or less means no limit too.
    pub const NO_MAX_DOCS: i64 = 0x7fff_ffff;

    /// The limits of a capped collection's stored options (`capped`, `size`, `max` as `create`
    /// stores them, see `tideway_exec::capped`); `None` when not capped.
    pub fn of_options(options: &Document) -> Option<CappedLimits> {
        if options.get_bool("capped") != Ok(true) {
            return None;
        }
        let size = options.get("size").and_then(stored_integer)?;
        let max_docs = options
            .get("max")
            .and_then(stored_integer)
            .filter(|max| (1..Self::NO_MAX_DOCS).contains(max));
        Some(CappedLimits {
            max_bytes: u64::try_from(size).unwrap_or(0),
            max_docs: max_docs.and_then(|max| u64::try_from(max).ok()),
        })
    }
}

fn stored_integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(value) => Some(i64::from(*value)),
        Bson::Int64(value) => Some(*value),
        other => tideway_base::bsonutil::as_f64(other).map(|value| value as i64),
    }
}

/// An index definition. `spec` is the full document `listIndexes` returns
/// (`{v: 2, key, name, unique?, sparse?, partialFilterExpression?, expireAfterSeconds?, ...}`);
/// the other fields are parsed from it for the engine's use.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    /// Field paths and directions, in key order.
    pub key: Vec<(String, keycodec::Direction)>,
    pub unique: bool,
    pub sparse: bool,
    /// Only documents matching this filter are indexed.
    pub partial_filter: Option<Document>,
    pub spec: Document,
    /// Stored and listed, but the engine keeps no entries for it: never built or maintained,
    /// scans of it are empty, and it constrains nothing (not even with `unique`). It still counts
    /// in `CollectionMeta::indexes`, can be dropped and its spec updated. (The Cosmos `_ts` TTL
    /// policy lives in the catalog only.)
    pub catalog_only: bool,
    /// The collation its string keys are compared under (`spec.collation`, resolved); `None`
    /// is the simple collation. Keys of a collated index hold comparison keys, not strings.
    pub collation: CollationChoice,
}

impl IndexSpec {
    pub const ID_INDEX_NAME: &'static str = "_id_";

    /// The `_id_` index every collection has (`create_collection` makes it).
    pub fn id_index() -> IndexSpec {
        IndexSpec {
            name: Self::ID_INDEX_NAME.to_string(),
            key: vec![("_id".to_string(), keycodec::Direction::Ascending)],
            unique: true,
            sparse: false,
            partial_filter: None,
            spec: bson::doc! {"v": 2, "key": {"_id": 1}, "name": Self::ID_INDEX_NAME},
            catalog_only: false,
            collation: None,
        }
    }

    pub fn is_id_index(&self) -> bool {
        self.name == Self::ID_INDEX_NAME
    }

    /// The key pattern as a document (`{a: 1, b: -1}`), for error messages and `keyPattern`.
    pub fn key_pattern(&self) -> Document {
        self.spec.get_document("key").cloned().unwrap_or_default()
    }

    /// Each key pattern component with its kind, in key order, read from `spec.key` (the
    /// source of truth for kinds; `key` holds `Ascending` for every non-ordered component).
    pub fn key_kinds(&self) -> Vec<(String, KeyKind)> {
        self.spec
            .get_document("key")
            .map(|key| {
                key.iter()
                    .map(|(field, value)| (field.clone(), KeyKind::of(field, value)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The kind of index the key pattern makes (see [`IndexKind`]).
    pub fn kind(&self) -> IndexKind {
        match self.spec.get_document("key") {
            Ok(key) => {
                IndexKind::of_kinds(key.iter().map(|(field, value)| KeyKind::of(field, value)))
            }
            Err(_) => IndexKind::Ordered,
        }
    }

    /// True only for plain ascending/descending key patterns: indexes whose entries are the
    /// `keycodec` encoding of the key fields' values, so value ranges map to key ranges. The
    /// planner must not build value ranges over any other index (hashed, wildcard, text keys
    /// have their own layouts: `storage::hashed`, `storage::wildcard`, `storage::textkeys`).
    pub fn is_ordered(&self) -> bool {
        self.kind() == IndexKind::Ordered
    }
}

/// What one component of a key pattern is: `1`/`-1` (ascending/descending), `"hashed"`,
/// `"text"` (also `_fts: "text"` of a stored text key pattern), or a wildcard path (`"$**"` or
/// `"a.$**"` with a number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Ascending,
    Descending,
    Hashed,
    Text,
    Wildcard,
}

impl KeyKind {
    /// The kind of the key pattern component `field: value`. Unknown strings (refused by
    /// `createIndexes`) count as text so that nothing treats them as ordered.
    pub fn of(field: &str, value: &Bson) -> KeyKind {
        match value {
            Bson::String(kind) if kind == "hashed" => KeyKind::Hashed,
            Bson::String(_) => KeyKind::Text,
            _ if field == "$**" || field.ends_with(".$**") => KeyKind::Wildcard,
            number => match tideway_base::bsonutil::as_f64(number) {
                Some(direction) if direction < 0.0 => KeyKind::Descending,
                _ => KeyKind::Ascending,
            },
        }
    }

    /// The name stored in the catalog for a non-ordered component.
    pub(crate) fn catalog_name(self) -> Option<&'static str> {
        match self {
            KeyKind::Ascending | KeyKind::Descending => None,
            KeyKind::Hashed => Some("hashed"),
            KeyKind::Text => Some("text"),
            KeyKind::Wildcard => Some("wildcard"),
        }
    }
}

/// The kind of an index, from its key pattern. Each kind has its own key layout:
/// - `Ordered`: `keycodec` encodings of the key fields' values (`indexkeys`).
/// - `Hashed`: like `Ordered`, with the hashed field's value replaced by its mongod hash as an
///   Int64 (`hashed::hashed_value`); compound hashed indexes have exactly one hashed field.
/// - `Wildcard`: (path string, value) per indexed leaf, plus multikey-path entries (`wildcard`).
/// - `Text`: (prefix values…, term, score, suffix values…) per distinct term (`textkeys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    Ordered,
    Hashed,
    Wildcard,
    Text,
}

impl IndexKind {
    fn of_kinds(kinds: impl Iterator<Item = KeyKind>) -> IndexKind {
        let mut kind = IndexKind::Ordered;
        for component in kinds {
            match component {
                KeyKind::Text => return IndexKind::Text,
                KeyKind::Wildcard => kind = IndexKind::Wildcard,
                KeyKind::Hashed if kind == IndexKind::Ordered => kind = IndexKind::Hashed,
                _ => {}
            }
        }
        kind
    }
}

/// A stored document with its storage metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Decoded on first use (see [`StoredDoc`]).
    pub doc: StoredDoc,
    /// Changes on every write of this document; see the module invariants.
    pub rev: u64,
    /// Server time of the last write (insert, replace, update), in ms since the epoch.
    pub last_write_ms: i64,
    /// The TTL class stored with the document (as its last write's [`WriteMeta`] said).
    pub ttl: TtlClass,
}

/// A record in a sorter's spill file: the document and the metadata visibility needs.
impl tideway_query::sorter::Spillable for Record {
    fn memory_bytes(&self) -> usize {
        self.doc.encoded_size() + 32
    }

    fn into_document(self) -> Document {
        let (class, expire_at_ms) = match self.ttl {
            TtlClass::Default => ("default", 0),
            TtlClass::Never => ("never", 0),
            TtlClass::Own { expire_at_ms } => ("own", expire_at_ms),
        };
        bson::doc! {
            "d": self.doc.into_document(),
            "r": self.rev as i64,
            "w": self.last_write_ms,
            "c": class,
            "e": expire_at_ms,
        }
    }

    fn from_document(mut document: Document) -> Option<Record> {
        let ttl = match document.get_str("c").ok()? {
            "default" => TtlClass::Default,
            "never" => TtlClass::Never,
            "own" => TtlClass::Own {
                expire_at_ms: document.get_i64("e").ok()?,
            },
            _ => return None,
        };
        Some(Record {
            rev: document.get_i64("r").ok()? as u64,
            last_write_ms: document.get_i64("w").ok()?,
            ttl,
            doc: match document.remove("d")? {
                Bson::Document(doc) => doc.into(),
                _ => return None,
            },
        })
    }
}

/// Which expiry structure a document is filed in. Decided by the caller (`tideway_exec::ttl`); storage
/// attaches no meaning to it beyond the ordering it maintains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlClass {
    /// Follows the collection's default TTL: ordered by `last_write_ms`.
    Default,
    /// Never expires (document `ttl: -1`): in no expiry structure.
    Never,
    /// The document's own ttl, already converted to an absolute expiry: ordered by
    /// `expire_at_ms`.
    Own { expire_at_ms: i64 },
}

/// Metadata the caller decides for each written document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMeta {
    pub last_write_ms: i64,
    pub ttl: TtlClass,
}

/// A stored document as the engine holds it, not decoded: what [`RecordPredicate`]s see.
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    pub doc: &'a RawDocument,
    pub rev: u64,
    pub last_write_ms: i64,
    pub ttl: TtlClass,
}

/// A caller-supplied rule the engine evaluates on stored records without decoding them (the TTL
/// rules: "is this document expired now?"). It runs inside the engine, on the writer thread for
/// writes: it must be fast, must not block, must not panic and must not call back into storage.
/// Compares by identity.
#[derive(Clone)]
pub struct RecordPredicate(Arc<dyn Fn(&RawRecord<'_>) -> bool + Send + Sync>);

impl RecordPredicate {
    pub fn new(rule: impl Fn(&RawRecord<'_>) -> bool + Send + Sync + 'static) -> Self {
        RecordPredicate(Arc::new(rule))
    }

    pub fn holds(&self, record: &RawRecord<'_>) -> bool {
        (self.0)(record)
    }
}

impl fmt::Debug for RecordPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<predicate>")
    }
}

impl PartialEq for RecordPredicate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A caller-supplied rule over stored index keys (the whole stored key: the encoded index key,
/// possibly followed by a record suffix), evaluated before the document is fetched. Same rules
/// as [`RecordPredicate`]: fast, non-blocking, never panics. Compares by identity.
#[derive(Clone)]
pub struct KeyPredicate(Arc<KeyRule>);

type KeyRule = dyn Fn(&[u8]) -> bool + Send + Sync;

impl KeyPredicate {
    pub fn new(rule: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> Self {
        KeyPredicate(Arc::new(rule))
    }

    pub fn holds(&self, key: &[u8]) -> bool {
        (self.0)(key)
    }
}

impl fmt::Debug for KeyPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<key predicate>")
    }
}

impl PartialEq for KeyPredicate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One operation of a write batch. Documents always carry `_id`.
///
/// `supersede`: when validation finds an existing document that conflicts with the operation —
/// same `_id` (Insert), or the same key in a unique index (Insert and Replace; never the replaced
/// document itself) — and the predicate holds for it, that document is deleted (with all its
/// index and expiry entries) as part of the same atomic operation and the operation proceeds;
/// otherwise the operation fails with `DuplicateKey` and changes nothing. All conflicts are
/// resolved before anything is mutated. (Used so that an expired, not yet reaped document never
/// blocks a write.)
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    /// Fails with `DuplicateKey` if `_id` or a unique index key is taken (and not superseded).
    Insert {
        doc: Document,
        meta: WriteMeta,
        supersede: Option<RecordPredicate>,
    },
    /// Replaces the document with `_id == id` if its revision is still `expected_rev`; `doc` has the
    /// same `_id`. `WriteConflict` if the revision changed or the document no longer exists.
    /// `replacement`: the client replaced the document whole (the oplog logs it as a
    /// replacement, not as an update's diff).
    Replace {
        id: Bson,
        expected_rev: u64,
        doc: Document,
        meta: WriteMeta,
        supersede: Option<RecordPredicate>,
        replacement: bool,
    },
    /// Deletes the document with `_id == id`, if its revision is still `expected_rev` (when given).
    /// `WriteConflict` if the revision changed or no such document exists.
    Delete { id: Bson, expected_rev: Option<u64> },
}

impl WriteOp {
    /// The `_id` the operation writes or deletes and its encoded key, after the checks every
    /// engine makes before anything else: an insert's document has an `_id`, a replacement
    /// keeps the replaced one (otherwise `Corrupt`: the caller broke the contract).
    pub fn checked_id(&self) -> StorageResult<(&Bson, Vec<u8>)> {
        match self {
            WriteOp::Insert { doc, .. } => {
                let id = doc.get("_id").ok_or_else(|| {
                    StorageError::Corrupt("document to insert has no _id".to_string())
                })?;
                Ok((id, keycodec::encode_id(id)))
            }
            WriteOp::Replace { id, doc, .. } => {
                let id_key = keycodec::encode_id(id);
                if doc.get("_id").map(keycodec::encode_id).as_ref() != Some(&id_key) {
                    return Err(StorageError::Corrupt(
                        "replacement document's _id differs from the replaced document's"
                            .to_string(),
                    ));
                }
                Ok((id, id_key))
            }
            WriteOp::Delete { id, .. } => Ok((id, keycodec::encode_id(id))),
        }
    }
}

/// What a successful operation did. `superseded`: how many conflicting documents the operation's
/// `supersede` predicate let it delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Inserted { rev: u64, superseded: u32 },
    Replaced { rev: u64, superseded: u32 },
    Deleted,
}

/// Options for a write batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Stop at the first failed operation (later ones are not attempted and get no result).
    pub ordered: bool,
    /// Acknowledge only once durable, whatever the engine's default (`writeConcern {j: true}`).
    pub force_durable: bool,
    /// A write by background maintenance (the TTL reaper): acknowledged once committed, without
    /// waiting for its own fsync even on a durable engine; the engine makes it durable within
    /// about a second, and a crash before that may lose it (harmless: the reaper redoes it). It
    /// must not delay foreground writes much (the engine bounds background work per commit).
    /// `force_durable` wins over it.
    pub background: bool,
}

/// A range of times in ms since the epoch, for [`Storage::expiry_scan`].
pub(crate) type TimeRange = (Bound<i64>, Bound<i64>);

/// Which collections keep the [`ExpiryOrder::LastWrite`] order: the caller's rule (a collection
/// whose documents can expire by their last write needs it; keeping it for the others costs one
/// more entry per write and nothing else). An engine evaluates it on a collection's metadata
/// whenever that changes, and on every collection when it opens.
pub type LastWriteRule = fn(&CollectionMeta) -> bool;

/// The rule that selects every collection: an engine opened without a rule keeps the order
/// everywhere, as every engine did before rules existed.
pub fn every_collection(_: &CollectionMeta) -> bool {
    true
}

/// Which expiry structure [`Storage::expiry_scan`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryOrder {
    /// `TtlClass::Default` documents by `last_write_ms`.
    LastWrite,
    /// `TtlClass::Own` documents by `expire_at_ms`.
    OwnExpiry,
}

/// A range of encoded index keys (see `keycodec`); bounds are key prefixes: an Included bound
/// covers every key that starts with it, an Excluded bound excludes them all.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Where a scan reads from.
#[derive(Clone, Debug, PartialEq)]
pub enum ScanSource {
    /// Every document in natural order: insertion order (see the module invariants), except in a
    /// clustered collection ([`CollectionMeta::clustered`]), where it is `_id` key order. Resume
    /// keys are positions in that order: a scan resumed after a document deleted since goes on
    /// with the next one, except in a capped collection (`ScanPage::position_lost`).
    Collection,
    /// Entries of one index whose key falls in any of `ranges` (byte ranges over encoded index
    /// keys, see `keycodec`), in index order. A document appears once per matching entry
    /// (multikey indexes may yield it more than once).
    Index { name: String, ranges: Vec<KeyRange> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScanRequest {
    pub source: ScanSource,
    /// Continue strictly after this position (a `ScanPage::resume` from the previous page).
    pub resume_after: Option<Vec<u8>>,
    /// Descending order.
    pub reverse: bool,
    /// Maximum records in the page (at least 1).
    pub limit: usize,
    /// Records it holds for are skipped before they are decoded (expired documents). A page that
    /// skipped many may hold fewer than `limit` records, none even, and still have a `resume`.
    pub hide: Option<RecordPredicate>,
    /// Index scans only: entries whose stored key it rejects are skipped without fetching their
    /// document (like `hide`, they may leave a page short).
    pub key_filter: Option<KeyPredicate>,
    /// Scans of ordered secondary indexes only (ignored otherwise): every record's document
    /// holds only the index's top-level key fields, in key order, with the document's own values
    /// (`IndexKeyer::key_fields_of`). Without `hide`, an entry that has type bits is answered
    /// from its key alone (`IndexKeyer::covered_document`: revision 0, no TTL metadata, counted
    /// as a key examined and no document); other entries fetch their document and reduce it.
    pub covered: bool,
}

impl ScanRequest {
    /// A forward page of `source` after `resume_after`: nothing hidden, filtered or covered.
    pub fn forward(source: ScanSource, resume_after: Option<Vec<u8>>, limit: usize) -> Self {
        ScanRequest {
            source,
            resume_after,
            reverse: false,
            limit,
            hide: None,
            key_filter: None,
            covered: false,
        }
    }
}

/// A session record to store with a write ([`Storage::write_recorded`]): built from which
/// operations succeed (one flag per attempted operation) and the time of the batch's last write
/// (its cluster time, as its oplog entry has it, and the wall clock), `None` to store nothing.
///
/// It depends on nothing else and has no effect of its own: an engine may call it more than
/// once, and before the operations are applied, with the successes they will have if the
/// batch commits as it is sent (an engine that applies a batch all or nothing knows them in
/// advance, so the record can travel with the write).
pub type RecordSession =
    Box<dyn Fn(&[bool], oplog::EntryTime) -> Option<SessionRecord> + Send + Sync>;

/// The success flags a [`RecordSession`] is given for `results`.
pub fn successes(results: &[StorageResult<WriteOutcome>]) -> Vec<bool> {
    results.iter().map(Result::is_ok).collect()
}

/// A commit's claim on a session's `txnNumber` ([`Storage::write_recorded`]): the commit goes
/// through only if no earlier commit of session `key` claimed or recorded `txn_number` or a newer
/// one; otherwise it fails whole with [`StorageError::TxnNumberUsed`] and nothing of it is
/// applied. The check and the commit are one atomic step, so of two commits claiming the same
/// number at most one goes through. A retryable write's first commit carries it: a first
/// attempt then needs no read of the session record before it writes, and a retry is never
/// taken for a first attempt.
///
/// A claim that went through may be kept even when its commit recorded nothing (a later claim
/// of the same number then fails); callers must read the record when a claim fails.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionClaim {
    pub key: Vec<u8>,
    pub txn_number: i64,
}

/// What [`Storage::write_recorded`] stores for the session under a caller-chosen key: the
/// statements this commit ran under `txn_number`, and the session's header.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    pub key: Vec<u8>,
    pub txn_number: i64,
    /// `(stmtId, recorded reply part)` of each statement the commit ran: they join the
    /// statements already recorded under `txn_number` (a newer `txn_number` drops the older
    /// statements). Statements with the same reply may share it (an insert's `{n: 1}`).
    pub statements: Vec<(i32, Arc<Document>)>,
    /// The header's fields (the last write's time...), replacing the previous header's; stored
    /// as `{txnNumber: txn_number, ..header}` ([`SessionRecord::stored_header`]).
    pub header: Document,
}

impl SessionRecord {
    /// The header as every engine stores it: `{txnNumber: txn_number, ..header}` (a
    /// `txnNumber` in `header` is ignored).
    pub fn stored_header(&self) -> Document {
        let mut header = bson::doc! {"txnNumber": self.txn_number};
        for (field, value) in &self.header {
            if field != "txnNumber" {
                header.insert(field.clone(), value.clone());
            }
        }
        header
    }
}

/// Where [`Storage::reap`] finds its candidates: an ordered expiry structure and the range of it
/// that has expired.
#[derive(Clone, Debug, PartialEq)]
pub enum ReapSource {
    /// An expiry table over a time range (as in [`Storage::expiry_scan`]).
    Expiry {
        order: ExpiryOrder,
        range: TimeRange,
    },
    /// One index over a range of encoded keys (as one range of [`ScanSource::Index`]); `_id_`
    /// reads the documents by `_id` (the TTL of a clustered collection).
    Index { name: String, range: KeyRange },
}

/// A caller-supplied rule giving a stored record's expiry instant (ms since the epoch), if it has
/// one: the oplog's entry for a reaped document says when it expired. Same rules as
/// [`RecordPredicate`]. Compares by identity.
#[derive(Clone)]
pub struct RecordInstant(Arc<RecordInstantRule>);

type RecordInstantRule = dyn Fn(&RawRecord<'_>) -> Option<i64> + Send + Sync;

impl RecordInstant {
    pub fn new(rule: impl Fn(&RawRecord<'_>) -> Option<i64> + Send + Sync + 'static) -> Self {
        RecordInstant(Arc::new(rule))
    }

    pub fn of(&self, record: &RawRecord<'_>) -> Option<i64> {
        (self.0)(record)
    }
}

impl fmt::Debug for RecordInstant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<record instant>")
    }
}

impl PartialEq for RecordInstant {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReapRequest {
    pub source: ReapSource,
    /// Continue strictly after this entry of the source (a `ReapPage::resume`).
    pub resume_after: Option<Vec<u8>>,
    /// Most source entries read (at least 1).
    pub limit: usize,
    /// Which of the candidates to delete, judged on their current state.
    pub expired: RecordPredicate,
    /// When each deleted document expired, for its oplog entry (`None`: not recorded).
    pub expire_at: Option<RecordInstant>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReapPage {
    pub deleted: u64,
    /// `Some` if the source may have more entries in range; pass it as `resume_after`.
    pub resume: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanPage {
    pub records: Vec<Record>,
    /// `Some` if the scan may have more; pass it as `resume_after`.
    pub resume: Option<Vec<u8>>,
    /// Index entries read (0 for collection scans), hidden and filtered ones included.
    pub keys_examined: u64,
    /// Stored documents read (fetched by an index scan, or visited by a collection scan),
    /// hidden ones included.
    pub docs_examined: u64,
    /// The position of the last entry the page visited, whether or not more follow: a
    /// tailable cursor resumes after it once new documents arrive (`None` if none was visited).
    pub last: Option<Vec<u8>>,
    /// Collection scans of a capped collection, and every [`Snapshot`] scan: the position of
    /// each record (its stored key, what `resume_after` takes), in step with `records` (empty
    /// for every other scan).
    pub positions: Vec<Vec<u8>>,
    /// Collection scans of a capped collection only: `resume_after` names a position whose
    /// document is gone (rolled over or deleted); the page is empty and the scan cannot go on
    /// (mongod's CappedPositionLost). Other collections' scans go on after a deleted position.
    pub position_lost: bool,
}

/// What [`Storage::count_entries`] found, from one snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryCount {
    /// Documents in the collection.
    pub documents: u64,
    /// Distinct documents with at least one entry in the sources' ranges.
    pub in_sources: u64,
}

/// Sizes for `collStats`/`dbStats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectionStats {
    pub count: u64,
    /// Total BSON size of the documents.
    pub data_size: u64,
    /// Bytes the engine uses for the documents (≥ data_size for most engines).
    pub storage_size: u64,
    /// Bytes per index, by name.
    pub index_sizes: Vec<(String, u64)>,
}

/// The closed set of storage failures.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StorageError {
    #[error("ns not found: {0}")]
    NamespaceNotFound(Namespace),
    #[error("collection already exists. NS: {0}")]
    NamespaceExists(Namespace),
    #[error("index not found with name [{0}]")]
    IndexNotFound(String),
    /// Rendered exactly like mongod: `... dup key: { a: 1, b: "x" }`.
    #[error(
        "E11000 duplicate key error collection: {ns} index: {index} dup key: {}",
        tideway_base::display::value_string(&Bson::Document((**.key_value).clone()))
    )]
    DuplicateKey {
        ns: Namespace,
        index: String,
        /// Boxed to keep `StorageError` (and every `StorageResult`) small.
        key_pattern: Box<Document>,
        key_value: Box<Document>,
    },
    /// Rendered as mongod's WriteConflict message.
    #[error("WriteConflict error: this operation conflicted with another operation. Please retry your operation or multi-document transaction.")]
    WriteConflict,
    #[error("{0}")]
    InvalidIndex(String),
    /// A compound index key would need more than one array field (mongod code 171).
    #[error("cannot index parallel arrays [{0}] [{1}]")]
    CannotIndexParallelArrays(String, String),
    #[error("storage I/O error: {0}")]
    Io(String),
    /// The engine's database cannot be reached (a remote engine: connection refused, lost or
    /// timed out). Transient and retryable: nothing of the failed call is known to be applied
    /// unless it says so, and calls succeed again once the database answers (mongod code 6).
    #[error("{0}")]
    Unavailable(String),
    /// The disk (or the quota) is full; the string says what failed. Transient: the same write
    /// succeeds once space is freed (mongod code 14031).
    #[error("No space left on device: {0}")]
    OutOfDiskSpace(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A document cannot be indexed by an index of a special kind (a hashed index meeting an
    /// array: 16766; a text index meeting a bad language override: 17261/17262, …), with
    /// mongod's code and message.
    #[error("{message}")]
    CannotIndex { code: ErrorCode, message: String },
    /// A document larger than its capped collection's size (mongod: 2 BadValue).
    #[error("object to insert exceeds cappedMaxSize")]
    ExceedsCappedSize,
    /// A [`SessionClaim`] failed: the session already used this txnNumber or a newer one, and
    /// nothing of the commit was applied. The retryable-write layer answers it by reading the
    /// session record; it reaches no client.
    #[error("this txnNumber was already used by the session")]
    TxnNumberUsed,
}

impl From<StorageError> for CommandError {
    fn from(error: StorageError) -> Self {
        let code = match &error {
            StorageError::NamespaceNotFound(_) => ErrorCode::NamespaceNotFound,
            StorageError::NamespaceExists(_) => ErrorCode::NamespaceExists,
            StorageError::IndexNotFound(_) => ErrorCode::IndexNotFound,
            StorageError::DuplicateKey { .. } => ErrorCode::DuplicateKey,
            StorageError::WriteConflict => ErrorCode::WriteConflict,
            StorageError::InvalidIndex(_) => ErrorCode::CannotCreateIndex,
            StorageError::CannotIndexParallelArrays(..) => ErrorCode::CannotIndexParallelArrays,
            StorageError::OutOfDiskSpace(_) => ErrorCode::OutOfDiskSpace,
            StorageError::Io(_) | StorageError::Corrupt(_) => ErrorCode::InternalError,
            StorageError::Unavailable(_) => ErrorCode::HostUnreachable,
            StorageError::CannotIndex { code, .. } => *code,
            StorageError::ExceedsCappedSize => ErrorCode::BadValue,
            StorageError::TxnNumberUsed => ErrorCode::TransactionTooOld,
        };
        let command_error = CommandError::new(code, error.to_string());
        match error {
            StorageError::DuplicateKey {
                key_pattern,
                key_value,
                ..
            } => command_error
                .with_extra(bson::doc! {"keyPattern": *key_pattern, "keyValue": *key_value}),
            _ => command_error,
        }
    }
}

pub type StorageResult<T> = Result<T, StorageError>;

/// A consistent read-only view of every collection as of one commit, held until dropped (what a
/// multi-document transaction reads). Its catalog and its documents describe the same commit;
/// later writes never show through it.
#[async_trait]
pub trait Snapshot: Send + Sync + fmt::Debug {
    /// Collections of `db` as of the snapshot, sorted by name.
    fn list_collections(&self, db: &str) -> Vec<CollectionMeta>;
    fn collection(&self, ns: &Namespace) -> Option<CollectionMeta>;
    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>>;
    /// [`Storage::scan`], with `ScanPage::positions` filled for every scan: each record's
    /// position, in the same order as `resume_after` keys.
    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage>;
    /// The position a scan of index `index` (`_id_` included) gives an entry with `index_key`
    /// for the document with `_id` key `id_key`, whether or not it is stored: positions of
    /// stored entries and of such entries order as the scan does. `None` for an unknown index.
    /// (Collection scans: [`Snapshot::record_position`], [`Snapshot::appended_position`].)
    fn entry_position(
        &self,
        ns: &Namespace,
        index: &str,
        index_key: &[u8],
        id_key: &[u8],
    ) -> Option<Vec<u8>>;
    /// The position a `Collection` scan gives the stored document with `_id` key `id_key`
    /// (`None` if the snapshot does not hold it).
    async fn record_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
    ) -> StorageResult<Option<Vec<u8>>>;
    /// The position a `Collection` scan would give a document with `_id` key `id_key` inserted
    /// after the snapshot: where natural order is insertion order, after every stored
    /// document, ordered among such documents by `insert_order` (increasing in the order they
    /// are inserted, as a commit inserts them); in a clustered collection, its `_id` place.
    /// Positions of stored documents and of such documents order as the scan does; `None` for
    /// a collection the snapshot does not have.
    fn appended_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
        insert_order: u64,
    ) -> Option<Vec<u8>>;
    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount>;
    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats>;
}

/// A multi-document transaction's writes, committed by [`Storage::commit_transaction`] as one
/// atomic step.
#[derive(Debug, Default)]
pub struct TransactionCommit {
    /// Collections to create first (options, indexes); one that exists by now is a
    /// `WriteConflict`.
    pub creates: Vec<(Namespace, Document, Vec<IndexSpec>)>,
    /// Per collection, its operations in order, and a rule for stale documents: a `Replace` or
    /// `Delete` whose current document it holds for is a `WriteConflict` (documents that expired
    /// since the transaction read them).
    pub writes: Vec<(Namespace, Vec<WriteOp>, Option<RecordPredicate>)>,
    /// Fields every oplog entry of the commit carries (`lsid`, `txnNumber`).
    pub session: Document,
    /// Stored with the commit ([`Storage::write_recorded`]).
    pub record: Option<SessionRecord>,
    pub force_durable: bool,
}

/// The storage contract. See the module documentation for the invariants.
#[async_trait]
pub trait Storage: Send + Sync + fmt::Debug {
    /// A short name for `serverStatus.storageEngine.name`.
    fn engine_name(&self) -> &'static str;

    /// Engine-specific figures for `serverStatus`, as a section name and its document (a
    /// remote engine's connection pool and round trips); `None` for engines without any.
    fn status(&self) -> Option<(&'static str, Document)> {
        None
    }

    // ---- catalog ----
    /// Database names with their total storage size in bytes, sorted by name.
    async fn list_databases(&self) -> StorageResult<Vec<(String, u64)>>;
    /// Database names, sorted: [`Storage::list_databases`] without the sizes, which an engine
    /// may have to add up.
    async fn list_database_names(&self) -> StorageResult<Vec<String>> {
        Ok(self
            .list_databases()
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }
    /// The latest time [`Storage::record_time`] had recorded when the engine opened (0 if none):
    /// the floor of the server clock after a restart.
    fn time_high_water_ms(&self) -> i64;
    /// The newest cluster time a committed write took (`Timestamp {time: 0, increment: 0}`
    /// before the first write). Every write operation takes its own, greater than every earlier
    /// one (seconds from the wall clock, never going back; the increment counts within a second),
    /// in commit order, and it survives restarts.
    fn cluster_time(&self) -> bson::Timestamp;
    /// Notified (`notify_waiters`) after every commit while the oplog exists, once its entries
    /// are readable: register (`Notified::enable`) before reading, then wait.
    fn oplog_appended(&self) -> &tokio::sync::Notify;
    /// Records `now_ms` as a moment the server has reported (kept if later than what is recorded),
    /// as a background write: durable within a second.
    async fn record_time(&self, now_ms: i64) -> StorageResult<()>;
    /// Whether the catalog the engine answered the running command from is still the
    /// database's (`command_scope::Ran::unchecked`: an engine shared by several servers, whose
    /// catalog others change, answers false when it is not, and the command runs again). An
    /// engine no one else changes is always current.
    async fn catalog_current(&self) -> StorageResult<bool> {
        Ok(true)
    }

    // ---- servers sharing the engine's data ----
    /// Announces this server, listening on `address`, to the other servers on the same data
    /// (a heartbeat until [`Storage::leave`]) and returns what it found there, for the startup
    /// report; `None` on an engine one server owns.
    async fn join(&self, _address: &str) -> StorageResult<Option<Document>> {
        Ok(None)
    }
    /// Stops this server's heartbeat and gives up its reaper leases (at shutdown).
    async fn leave(&self) -> StorageResult<()> {
        Ok(())
    }
    /// Of `collections`, those whose expired documents this server's TTL monitor deletes: all
    /// of them on an engine one server owns; on shared data, those whose reaper lease this
    /// server holds or has just taken from a holder that is gone.
    async fn reaper_leases(&self, collections: Vec<Namespace>) -> StorageResult<Vec<Namespace>> {
        Ok(collections)
    }
    /// Gives up this server's reaper leases (its TTL monitor is off).
    async fn release_reaper_leases(&self) -> StorageResult<()> {
        Ok(())
    }
    /// Collections of `db`, sorted by name.
    async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>>;
    async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>>;
    /// Creates the collection with the `_id_` index and `indexes` (empty and complete), in one
    /// atomic step; `NamespaceExists` if it exists.
    async fn create_collection(
        &self,
        ns: &Namespace,
        options: Document,
        indexes: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta>;
    /// Drops the collection and its indexes; `false` if it did not exist.
    async fn drop_collection(&self, ns: &Namespace) -> StorageResult<bool>;
    /// Drops every collection of `db`.
    async fn drop_database(&self, db: &str) -> StorageResult<()>;
    /// Renames (possibly across databases), keeping documents, indexes, options and uuid. With
    /// `drop_target`, an existing target is dropped first; otherwise it is `NamespaceExists`.
    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StorageResult<()>;
    /// Replaces the collection's stored options (`collMod`). Whether it is clustered
    /// ([`CollectionMeta::clustered`]) cannot change: that is `InvalidIndex`, and nothing changes.
    async fn set_collection_options(&self, ns: &Namespace, options: Document) -> StorageResult<()>;
    /// Creates the indexes that do not exist yet (creating the collection if needed), building each
    /// from the existing documents. All or nothing: a unique index that existing documents violate
    /// fails with `DuplicateKey` and no index of the call is created (nothing of it is left). The
    /// build need not block other writes: an engine may build in steps while writes go on (and
    /// maintain the index); the indexes appear in [`CollectionMeta`] only once complete, and a
    /// crash during a build leaves no trace after reopening. `catalog_only` indexes are only
    /// recorded (never built). Returns the new metadata.
    async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta>;
    /// Drops the named indexes (never `_id_`).
    async fn drop_indexes(&self, ns: &Namespace, names: &[String]) -> StorageResult<()>;
    /// Replaces an index's `spec` document (options such as `expireAfterSeconds`, as `collMod`
    /// changes them), keeping its key, its parsed options and its entries; works for every index
    /// (`_id_` and catalog-only ones included) and costs O(1): no document or entry is rewritten.
    async fn update_index_spec(
        &self,
        ns: &Namespace,
        name: &str,
        spec: Document,
    ) -> StorageResult<()>;

    // ---- reads ----
    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>>;
    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage>;
    /// Documents whose `last_write_ms` (`LastWrite`: `TtlClass::Default` documents only) or
    /// `expire_at_ms` (`OwnExpiry`: `TtlClass::Own` documents) lies in `range`, ascending by that
    /// time then by `_id` key, at most `limit` (at least 1) per page; paged with `resume_after` /
    /// `ScanPage::resume` exactly like [`Storage::scan`]. Costs in proportion to the records
    /// returned, never to the collection's size. A missing collection scans as empty, and so
    /// does the `LastWrite` order of a collection the [`LastWriteRule`] does not select.
    async fn expiry_scan(
        &self,
        ns: &Namespace,
        order: ExpiryOrder,
        range: (Bound<i64>, Bound<i64>),
        resume_after: Option<Vec<u8>>,
        limit: usize,
    ) -> StorageResult<ScanPage>;
    /// From one snapshot: the collection's documents, and the distinct documents the entries of
    /// `sources` (ranges as in [`Storage::reap`]) point to — so `documents - in_sources` is exact
    /// even while documents are written and reaped. Reads keys only: costs in proportion to the
    /// entries in range. A missing collection counts 0; a missing index contributes nothing.
    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount>;
    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats>;

    // ---- writes ----
    /// Applies `ops` in order, creating the collection if it does not exist. Returns one result per
    /// attempted operation (with `ordered`, none after the first failure). The outer error is for
    /// failures of the whole batch (I/O); then nothing of the batch was applied.
    async fn write(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>>;
    /// [`Storage::write`], and in the same atomic commit stores the session record `record`
    /// builds from the operations' results (see [`SessionRecord`]; nothing is stored when it
    /// returns `None`), once `claim`, if any, went through (see [`SessionClaim`]). The cost is in proportion to the statements of this commit, never to
    /// those recorded before. `record` runs on the writer thread: it must be fast and
    /// must not block or call back into storage. Retryable writes keep their outcome this way,
    /// so a write and the proof that it happened are never separated by a crash.
    async fn write_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: RecordSession,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>>;
    /// The header of the session record stored under `key` ([`Storage::write_recorded`]):
    /// `{txnNumber, ..}`, if any; its `txnNumber` is the newest the session claimed or recorded
    /// (a claim whose commit recorded nothing may leave a header of `txnNumber` alone).
    async fn session_record(&self, key: &[u8]) -> StorageResult<Option<Document>>;
    /// The statements recorded under `txn_number` for session `key`, in stmtId order (one range
    /// read; none once a newer txnNumber was recorded).
    async fn session_statements(
        &self,
        key: &[u8],
        txn_number: i64,
    ) -> StorageResult<Vec<(i32, Document)>>;
    /// A snapshot of everything committed now.
    async fn snapshot(&self) -> StorageResult<Arc<dyn Snapshot>>;
    /// Applies `commit` all or nothing: the first operation that fails (`WriteConflict`,
    /// `DuplicateKey`, ...) fails the whole commit with its error and nothing of it is stored.
    /// Committed alone (never grouped with other writes), so its failure costs no one else.
    async fn commit_transaction(&self, commit: TransactionCommit) -> StorageResult<()>;
    /// Every stored session record header, as `(key, header)` in key order
    /// (`config.transactions`).
    async fn session_records(&self) -> StorageResult<Vec<(Vec<u8>, Document)>>;
    /// Reads the next `limit` entries of `source` after `resume_after` and deletes every document
    /// they point to for which `expired` holds, with all its index and expiry entries, as one
    /// atomic background write (see [`WriteOptions::background`]). A document is judged as read
    /// and deleted only if it is still at the revision judged: one rewritten in between survives
    /// (a later call judges it again). An engine may read a call's entries ahead, during the
    /// call before with the same request but for `resume_after`: what is written in between
    /// is judged as read then. Costs in proportion to the entries read, never to the
    /// collection's size. A missing collection or index reaps nothing.
    async fn reap(&self, ns: &Namespace, request: ReapRequest) -> StorageResult<ReapPage>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn spec_with_key(key: Document) -> IndexSpec {
        IndexSpec {
            name: "i".into(),
            key: key
                .keys()
                .map(|field| (field.clone(), keycodec::Direction::Ascending))
                .collect(),
            unique: false,
            sparse: false,
            partial_filter: None,
            spec: doc! {"v": 2, "key": key, "name": "i"},
            catalog_only: false,
            collation: None,
        }
    }

    #[test]
    fn index_kinds_come_from_the_key_pattern() {
        let cases = [
            (doc! {"a": 1, "b": -1}, IndexKind::Ordered),
            (doc! {"a": "hashed"}, IndexKind::Hashed),
            (doc! {"a": 1, "b": "hashed"}, IndexKind::Hashed),
            (doc! {"$**": 1}, IndexKind::Wildcard),
            (doc! {"a.b.$**": 1}, IndexKind::Wildcard),
            (doc! {"_fts": "text", "_ftsx": 1}, IndexKind::Text),
            (doc! {"a": 1, "_fts": "text", "_ftsx": 1}, IndexKind::Text),
        ];
        for (key, kind) in cases {
            let spec = spec_with_key(key.clone());
            assert_eq!(spec.kind(), kind, "{key}");
            assert_eq!(spec.is_ordered(), kind == IndexKind::Ordered, "{key}");
        }
        let kinds = spec_with_key(doc! {"a": -1, "b": "hashed", "$**": 1}).key_kinds();
        assert_eq!(
            kinds.iter().map(|(_, kind)| *kind).collect::<Vec<_>>(),
            vec![KeyKind::Descending, KeyKind::Hashed, KeyKind::Wildcard]
        );
    }

    #[test]
    fn every_engine_checks_the_id_of_a_write_alike() {
        let meta = WriteMeta {
            last_write_ms: 0,
            ttl: TtlClass::Never,
        };
        let insert = |doc: Document| WriteOp::Insert {
            doc,
            meta,
            supersede: None,
        };
        let op = insert(doc! {"_id": 5, "a": 1});
        let (id, key) = op.checked_id().unwrap();
        assert_eq!(
            (id, key),
            (&Bson::Int32(5), keycodec::encode_id(&Bson::Int32(5)))
        );
        assert!(matches!(
            insert(doc! {"a": 1}).checked_id(),
            Err(StorageError::Corrupt(_))
        ));
        let replace = |doc: Document| WriteOp::Replace {
            id: Bson::Int32(5),
            expected_rev: 1,
            doc,
            meta,
            supersede: None,
            replacement: true,
        };
        // 5 and 5.0 are the same `_id`; 6 is another document.
        assert!(replace(doc! {"_id": 5.0}).checked_id().is_ok());
        assert!(matches!(
            replace(doc! {"_id": 6}).checked_id(),
            Err(StorageError::Corrupt(_))
        ));
    }

    #[test]
    fn limits_read_the_stored_options() {
        assert_eq!(
            CappedLimits::of_options(&doc! {"capped": true, "size": 1024, "max": 5}),
            Some(CappedLimits {
                max_bytes: 1024,
                max_docs: Some(5)
            })
        );
        assert_eq!(
            CappedLimits::of_options(
                &doc! {"capped": true, "size": 1024, "max": CappedLimits::NO_MAX_DOCS}
            ),
            Some(CappedLimits {
                max_bytes: 1024,
                max_docs: None
            })
        );
        assert_eq!(CappedLimits::of_options(&doc! {"capped": false}), None);
    }
}
