//! Query execution over storage: choose how to read (point lookup, index range, collection scan) and
//! stream the documents that match a filter, page by page, without holding a storage transaction.
//!
//! Invariants: storage may return a superset of what a plan asks for, so every record is re-checked
//! with the filter here; an index scan may meet a document once per matching key (multikey), so
//! streams over an index skip documents they already produced; and an expired document is never
//! produced: every record passes [`Visibility`] at the moment it is handed out, so a cursor opened
//! before an expiry does not return the document after it. Nothing here knows about commands or
//! reply shapes.

use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use crate::clock::Clock;
use crate::query::{Filter, Interval, SortSpec};
use crate::sorter::Spillable;
use crate::storage::keycodec::{self, Direction};
use crate::storage::{
    CollectionMeta, IndexSpec, KeyRange, Namespace, Record, RecordPredicate, ScanRequest,
    ScanSource, Storage, StorageResult, TtlClass,
};
use crate::ttl::TtlPolicies;

/// Records fetched from storage per page while streaming.
const PAGE_SIZE: usize = 256;

/// Which records a read may see: everything except what the collection's TTL policies say has
/// expired at `now_ms`.
#[derive(Clone, Debug)]
pub struct Visibility {
    pub policies: Arc<TtlPolicies>,
    pub now_ms: i64,
}

impl Visibility {
    /// Everything is visible (collections without TTL policies, catalog listings).
    pub fn everything(now_ms: i64) -> Visibility {
        Visibility {
            policies: Arc::new(TtlPolicies::default()),
            now_ms,
        }
    }

    pub fn for_meta(meta: Option<&CollectionMeta>, now_ms: i64) -> Visibility {
        match meta {
            Some(meta) => Visibility {
                policies: Arc::new(TtlPolicies::from_meta(meta)),
                now_ms,
            },
            None => Visibility::everything(now_ms),
        }
    }

    pub fn is_visible(&self, record: &Record) -> bool {
        !self.policies.is_expired(record, self.now_ms)
    }

    /// What is not visible, as a predicate storage evaluates before decoding (`None`: everything
    /// is visible).
    pub fn expired(&self) -> Option<RecordPredicate> {
        self.policies.expired_predicate(self.now_ms)
    }

    /// The value of `{$meta: name}` in a projection of `record`.
    pub fn meta_value(&self, name: &str, record: &Record) -> Bson {
        self.policies.meta_value(name, record)
    }
}

/// Orders commands that judge visibility against changes of TTL policies, so expiry is final: a
/// command holds its collection's gate shared from before it reads the time until it replies, and
/// a policy change holds it exclusively while it deletes what the old policies have expired and
/// swaps them. No command can therefore judge with old policies at a time later than the change.
///
/// Gates are striped by namespace (bounded memory, however many names clients use); a command
/// holds at most one gate at a time, so striping cannot deadlock.
#[derive(Debug)]
pub struct PolicyGates {
    stripes: Vec<Arc<tokio::sync::RwLock<()>>>,
}

const POLICY_GATE_STRIPES: usize = 64;

/// A shared hold on a collection's policy gate (see [`PolicyGates`]).
pub type SharedGate = Arc<tokio::sync::OwnedRwLockReadGuard<()>>;

impl Default for PolicyGates {
    fn default() -> Self {
        PolicyGates {
            stripes: (0..POLICY_GATE_STRIPES)
                .map(|_| Arc::new(tokio::sync::RwLock::new(())))
                .collect(),
        }
    }
}

impl PolicyGates {
    fn stripe(&self, ns: &Namespace) -> Arc<tokio::sync::RwLock<()>> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        ns.hash(&mut hasher);
        self.stripes[hasher.finish() as usize % self.stripes.len()].clone()
    }

    pub async fn shared(&self, ns: &Namespace) -> SharedGate {
        Arc::new(self.stripe(ns).read_owned().await)
    }

    pub async fn exclusive(&self, ns: &Namespace) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.stripe(ns).write_owned().await
    }
}

/// A collection as one command sees it: its catalog entry and what is visible at the command's
/// time, under a shared hold on its policy gate for as long as the view lives.
#[derive(Clone, Debug)]
pub struct CollectionView {
    pub ns: Namespace,
    pub meta: Option<CollectionMeta>,
    pub visibility: Visibility,
    _gate: SharedGate,
}

impl CollectionView {
    /// Takes the collection's gate, then the time, then its policies: in that order, so a policy
    /// change either precedes the whole view or follows it.
    pub async fn open(
        gates: &PolicyGates,
        storage: &dyn Storage,
        clock: &dyn Clock,
        ns: &Namespace,
    ) -> StorageResult<CollectionView> {
        let gate = gates.shared(ns).await;
        let now_ms = clock.now_ms();
        let meta = storage.collection(ns).await?;
        let visibility = Visibility::for_meta(meta.as_ref(), now_ms);
        Ok(CollectionView {
            ns: ns.clone(),
            meta,
            visibility,
            _gate: gate,
        })
    }

    /// A stream of the visible records matching `filter`, read the way [`plan`] chooses.
    pub fn stream(&self, filter: Arc<Filter>, sort: Option<&SortSpec>) -> DocStream {
        let plan = plan(self.meta.as_ref(), &filter, sort);
        DocStream::new(self.ns.clone(), filter, plan, self.visibility.clone())
    }
}

/// How a read is carried out.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// The filter pins `_id` to one value.
    Point(Bson),
    /// Scan a source; `reverse` for descending order.
    Scan { source: ScanSource, reverse: bool },
}

impl Plan {
    /// Whether results come out in the order `sort` asks for, so no in-memory sort is needed.
    pub fn satisfies(&self, sort: &SortSpec) -> bool {
        if sort.is_empty() || matches!(self, Plan::Point(_)) {
            return true;
        }
        let mut keys = sort.keys();
        match (self, keys.next(), keys.next()) {
            (
                Plan::Scan {
                    source: ScanSource::Collection,
                    reverse,
                },
                Some(("_id", direction)),
                None,
            ) => *reverse == (direction == crate::query::Direction::Descending),
            _ => false,
        }
    }
}

/// Chooses a plan: `_id` equality, then a `_id` sort, then an index whose first field the filter
/// bounds (equality preferred over ranges), else a collection scan.
pub fn plan(meta: Option<&CollectionMeta>, filter: &Filter, sort: Option<&SortSpec>) -> Plan {
    if let Some(id) = filter.id_equality() {
        return Plan::Point(id.clone());
    }
    let collection_scan = |reverse| Plan::Scan {
        source: ScanSource::Collection,
        reverse,
    };
    if let Some(sort) = sort.filter(|sort| !sort.is_empty()) {
        let mut keys = sort.keys();
        if let (Some(("_id", direction)), None) = (keys.next(), keys.next()) {
            return collection_scan(direction == crate::query::Direction::Descending);
        }
    }
    let Some(meta) = meta else {
        return collection_scan(false);
    };
    let mut best: Option<(bool, &IndexSpec, Vec<Interval>)> = None;
    for index in meta.indexes.iter().filter(|index| usable_for_ranges(index)) {
        let Some((first_field, _)) = index.key.first() else {
            continue;
        };
        let Some(intervals) = filter.field_intervals(first_field) else {
            continue;
        };
        let all_points = intervals.iter().all(is_point);
        let better = match &best {
            None => true,
            Some((best_points, ..)) => all_points && !best_points,
        };
        if better {
            best = Some((all_points, index, intervals));
        }
    }
    match best {
        Some((_, index, intervals)) => Plan::Scan {
            source: ScanSource::Index {
                name: index.name.clone(),
                ranges: byte_ranges(&intervals, index.key[0].1),
            },
            reverse: false,
        },
        None => collection_scan(false),
    }
}

/// Sparse, partial and hidden indexes may lack documents a filter matches; the `_id` index is
/// the collection scan itself.
fn usable_for_ranges(index: &IndexSpec) -> bool {
    index.is_ordered()
        && !index.is_id_index()
        && !index.catalog_only
        && !index.sparse
        && index.partial_filter.is_none()
        && !index.spec.get_bool("hidden").unwrap_or(false)
}

fn is_point(interval: &Interval) -> bool {
    matches!((&interval.lower, &interval.upper), (Bound::Included(a), Bound::Included(b)) if a == b)
}

/// Encoded byte ranges over index keys whose first component is in one of `intervals`, sorted
/// ascending. A descending first field inverts its bytes, so its value bounds swap ends.
pub fn byte_ranges(intervals: &[Interval], direction: Direction) -> Vec<KeyRange> {
    let encode = |value: &Bson| {
        let mut out = Vec::new();
        keycodec::encode_value(&mut out, value, direction);
        out
    };
    // Keys whose first component is >= value (Included) or > value (Excluded).
    let from = |bound: &Bound<Bson>| match bound {
        Bound::Included(value) => Bound::Included(encode(value)),
        Bound::Excluded(value) => {
            keycodec::prefix_successor(&encode(value)).map_or(Bound::Unbounded, Bound::Included)
        }
        Bound::Unbounded => Bound::Unbounded,
    };
    // Keys whose first component is <= value (Included) or < value (Excluded).
    let to = |bound: &Bound<Bson>| match bound {
        Bound::Included(value) => {
            keycodec::prefix_successor(&encode(value)).map_or(Bound::Unbounded, Bound::Excluded)
        }
        Bound::Excluded(value) => Bound::Excluded(encode(value)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let mut ranges: Vec<_> = intervals
        .iter()
        .map(|interval| match direction {
            Direction::Ascending => (from(&interval.lower), to(&interval.upper)),
            Direction::Descending => (from(&interval.upper), to(&interval.lower)),
        })
        .collect();
    ranges.sort_by(|a, b| lower_key(&a.0).cmp(lower_key(&b.0)));
    ranges.dedup();
    ranges
}

fn lower_key(bound: &Bound<Vec<u8>>) -> &[u8] {
    match bound {
        Bound::Included(key) | Bound::Excluded(key) => key,
        Bound::Unbounded => &[],
    }
}

/// The matching documents of one plan, produced a page at a time. Holds only a resume key between
/// pages, never a storage transaction.
#[derive(Debug)]
pub struct DocStream {
    ns: Namespace,
    filter: Arc<Filter>,
    plan: Plan,
    resume_after: Option<Vec<u8>>,
    exhausted: bool,
    buffer: VecDeque<Record>,
    /// Encoded `_id`s already produced, for index scans (multikey entries repeat documents).
    produced: Option<HashSet<Vec<u8>>>,
    visibility: Visibility,
}

impl DocStream {
    pub fn new(
        ns: Namespace,
        filter: Arc<Filter>,
        plan: Plan,
        visibility: Visibility,
    ) -> DocStream {
        let produced = matches!(
            plan,
            Plan::Scan {
                source: ScanSource::Index { .. },
                ..
            }
        )
        .then(HashSet::new);
        DocStream {
            ns,
            filter,
            plan,
            resume_after: None,
            exhausted: false,
            buffer: VecDeque::new(),
            produced,
            visibility,
        }
    }

    /// Whether the stream already yields `sort` order.
    pub fn satisfies(&self, sort: &SortSpec) -> bool {
        self.plan.satisfies(sort)
    }

    /// Continues under new visibility (a `getMore` at a later time, or after a policy change).
    pub fn set_visibility(&mut self, visibility: Visibility) {
        self.visibility = visibility;
    }

    /// The next matching visible record, or `None` when there are no more.
    pub async fn next(&mut self, storage: &dyn Storage) -> StorageResult<Option<Record>> {
        loop {
            if let Some(record) = self.buffer.pop_front() {
                if self.visibility.is_visible(&record) {
                    return Ok(Some(record));
                }
                continue;
            }
            if self.exhausted {
                return Ok(None);
            }
            self.fetch_page(storage).await?;
        }
    }

    /// Whether another record will come, fetching ahead as needed (the record stays queued; it is
    /// checked for visibility again when handed out).
    pub async fn has_more(&mut self, storage: &dyn Storage) -> StorageResult<bool> {
        while self.buffer.is_empty() && !self.exhausted {
            self.fetch_page(storage).await?;
        }
        Ok(!self.buffer.is_empty())
    }

    /// Every remaining matching record.
    pub async fn collect(mut self, storage: &dyn Storage) -> StorageResult<Vec<Record>> {
        let mut records = Vec::new();
        while let Some(record) = self.next(storage).await? {
            records.push(record);
        }
        Ok(records)
    }

    async fn fetch_page(&mut self, storage: &dyn Storage) -> StorageResult<()> {
        let records = match &self.plan {
            Plan::Point(id) => {
                self.exhausted = true;
                storage.get(&self.ns, id).await?.into_iter().collect()
            }
            Plan::Scan { source, reverse } => {
                // Reads served from cache never return Pending; yielding once per page keeps long
                // scans fair to other requests and lets `maxTimeMS` interrupt them.
                tokio::task::yield_now().await;
                let page = storage
                    .scan(
                        &self.ns,
                        ScanRequest {
                            source: source.clone(),
                            resume_after: self.resume_after.take(),
                            reverse: *reverse,
                            limit: PAGE_SIZE,
                            hide: self.visibility.expired(),
                        },
                    )
                    .await?;
                self.exhausted = page.resume.is_none();
                self.resume_after = page.resume;
                page.records
            }
        };
        for record in records {
            if !self.visibility.is_visible(&record) || !self.filter.matches(&record.doc) {
                continue;
            }
            if let Some(produced) = &mut self.produced {
                let id = keycodec::encode_id(record.doc.get("_id").unwrap_or(&Bson::Null));
                if !produced.insert(id) {
                    continue;
                }
            }
            self.buffer.push_back(record);
        }
        Ok(())
    }
}

/// Every visible record matching `filter`, in the order the plan reads them.
pub async fn find_all(
    storage: &dyn Storage,
    view: &CollectionView,
    filter: Arc<Filter>,
) -> StorageResult<Vec<Record>> {
    view.stream(filter, None).collect(storage).await
}

/// The first visible record matching `filter` in `sort` order (natural order without one),
/// reading only as far as needed when the plan already yields that order, and otherwise keeping
/// only the best record seen (ties: the first read).
pub async fn first_match(
    storage: &dyn Storage,
    view: &CollectionView,
    filter: Arc<Filter>,
    sort: Option<&SortSpec>,
) -> StorageResult<Option<Record>> {
    let mut stream = view.stream(filter, sort);
    let Some(sort) = sort.filter(|sort| !stream.satisfies(sort)) else {
        return stream.next(storage).await;
    };
    let mut best: Option<(Vec<Bson>, Record)> = None;
    while let Some(record) = stream.next(storage).await? {
        let key = sort.sort_key(&record.doc);
        if best.as_ref().is_none_or(|(best_key, _)| {
            sort.compare_keys(&key, best_key) == std::cmp::Ordering::Less
        }) {
            best = Some((key, record));
        }
    }
    Ok(best.map(|(_, record)| record))
}

/// A record in a spill file: the document and the metadata visibility needs.
impl Spillable for Record {
    fn memory_bytes(&self) -> usize {
        crate::bsonutil::encoded_size(&self.doc) + 32
    }

    fn into_document(self) -> Document {
        let (class, expire_at_ms) = match self.ttl {
            TtlClass::Default => ("default", 0),
            TtlClass::Never => ("never", 0),
            TtlClass::Own { expire_at_ms } => ("own", expire_at_ms),
        };
        bson::doc! {
            "d": self.doc,
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
                Bson::Document(doc) => doc,
                _ => return None,
            },
        })
    }
}

/// The `_id` of a stored document (every stored document has one).
pub fn document_id(document: &Document) -> Bson {
    document.get("_id").cloned().unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn index(name: &str, key: Document, field: &str, direction: Direction) -> IndexSpec {
        IndexSpec {
            name: name.into(),
            key: vec![(field.into(), direction)],
            unique: false,
            sparse: false,
            partial_filter: None,
            spec: doc! {"v": 2, "key": key, "name": name},
            catalog_only: false,
        }
    }

    fn meta(indexes: Vec<IndexSpec>) -> CollectionMeta {
        CollectionMeta {
            ns: Namespace::new("db", "c"),
            uuid: [0; 16],
            options: Document::new(),
            indexes,
        }
    }

    #[test]
    fn id_equality_is_a_point_lookup() {
        let filter = Filter::parse(&doc! {"_id": 5, "a": 1}).unwrap();
        assert_eq!(plan(None, &filter, None), Plan::Point(Bson::Int32(5)));
    }

    #[test]
    fn equality_index_is_preferred_over_a_range_index() {
        let meta = meta(vec![
            index("a_1", doc! {"a": 1}, "a", Direction::Ascending),
            index("b_1", doc! {"b": 1}, "b", Direction::Ascending),
        ]);
        let filter = Filter::parse(&doc! {"a": {"$gt": 1}, "b": 7}).unwrap();
        match plan(Some(&meta), &filter, None) {
            Plan::Scan {
                source: ScanSource::Index { name, ranges },
                ..
            } => {
                assert_eq!(name, "b_1");
                assert_eq!(ranges.len(), 1);
            }
            other => panic!("expected an index scan, got {other:?}"),
        }
    }

    #[test]
    fn unbounded_filters_scan_the_collection() {
        let meta = meta(vec![index("a_1", doc! {"a": 1}, "a", Direction::Ascending)]);
        let filter = Filter::parse(&doc! {"b": 1}).unwrap();
        assert_eq!(
            plan(Some(&meta), &filter, None),
            Plan::Scan {
                source: ScanSource::Collection,
                reverse: false
            }
        );
        let sort = SortSpec::parse(&doc! {"_id": -1}).unwrap();
        let planned = plan(Some(&meta), &filter, Some(&sort));
        assert!(planned.satisfies(&sort));
        assert_eq!(
            planned,
            Plan::Scan {
                source: ScanSource::Collection,
                reverse: true
            }
        );
    }

    #[test]
    fn byte_ranges_contain_exactly_the_interval() {
        let encoded = |value: Bson, direction| {
            let mut out = Vec::new();
            keycodec::encode_value(&mut out, &value, direction);
            out.extend(keycodec::encode_id(&Bson::Int32(1)));
            out
        };
        let contains = |ranges: &[KeyRange], key: &Vec<u8>| {
            ranges
                .iter()
                .any(|range| std::ops::RangeBounds::contains(range, key))
        };
        let interval = Interval {
            lower: Bound::Excluded(Bson::Int32(2)),
            upper: Bound::Included(Bson::Int32(5)),
        };
        for direction in [Direction::Ascending, Direction::Descending] {
            let ranges = byte_ranges(std::slice::from_ref(&interval), direction);
            for (value, inside) in [(1, false), (2, false), (3, true), (5, true), (6, false)] {
                assert_eq!(
                    contains(&ranges, &encoded(Bson::Int32(value), direction)),
                    inside,
                    "{value} {direction:?}"
                );
            }
        }
    }
}
