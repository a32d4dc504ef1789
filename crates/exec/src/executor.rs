//! Query execution over storage: read an [`Access`] path (point lookup, index scans, collection
//! scan; what `crate::planner` chooses, above this module) and stream the documents that match a
//! filter, page by page, without holding a storage transaction, counting what it examined.
//!
//! Invariants: storage may return a superset of what a plan asks for, so every record is re-checked
//! with the filter here; an index scan may meet a document once per matching key (multikey), so
//! streams over an index skip documents they already produced; and an expired document is never
//! produced: every record passes [`Visibility`] at the moment it is handed out, so a cursor opened
//! before an expiry does not return the document after it. Nothing here knows about commands or
//! reply shapes.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bson::{Bson, Document};

use crate::bounds::IndexBounds;
use crate::ttl::TtlPolicies;
use tideway_base::clock::Clock;
use tideway_base::error::CommandResult;
use tideway_query::collation::Collation;
use tideway_query::keycodec;
use tideway_query::{Filter, SortSpec};
use tideway_storage::{
    CollectionMeta, IndexSpec, KeyPredicate, KeyRange, Namespace, Record, RecordPredicate,
    ScanRequest, ScanSource, Storage, StorageResult,
};

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
pub(crate) type SharedGate = Arc<tokio::sync::OwnedRwLockReadGuard<()>>;

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
}

/// What a stream has read so far, as explain reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub keys_examined: u64,
    pub docs_examined: u64,
    /// Records handed out by [`DocStream::next`].
    pub returned: u64,
}

impl ScanStats {
    /// Units of work as the planner's trial counts them: entries read, keys or documents.
    pub fn works(&self) -> u64 {
        self.keys_examined.max(self.docs_examined)
    }
}

/// One storage scan of a plan.
#[derive(Clone, Debug)]
struct ScanStep {
    source: ScanSource,
    reverse: bool,
    key_filter: Option<KeyPredicate>,
}

/// The matching documents of one plan, produced a page at a time. Holds only a resume key between
/// pages, never a storage transaction.
#[derive(Debug)]
pub struct DocStream {
    ns: Namespace,
    filter: Arc<Filter>,
    /// `Some` for an `_id` point lookup not yet made.
    point: Option<Bson>,
    /// Scans still to read, in order; the first is in progress.
    scans: VecDeque<ScanStep>,
    resume_after: Option<Vec<u8>>,
    exhausted: bool,
    buffer: VecDeque<Record>,
    /// Encoded `_id`s already produced, when a document can be met twice (multikey entries, the
    /// branches of an `$or`).
    produced: Option<HashSet<Vec<u8>>>,
    visibility: Visibility,
    /// Records asked of storage per page: small at first when few results are wanted, growing
    /// to [`PAGE_SIZE`].
    page_size: usize,
    stats: ScanStats,
    /// A sort merge: the branches read instead of `scans`.
    merge: Option<Box<Merge>>,
    /// Whether read documents are checked against the filter (not when the plan's bounds are
    /// exact for it, see `QueryPlan::is_exact`).
    check_filter: bool,
    /// Index scans read covered (`ScanRequest::covered`).
    covered: bool,
    /// A tailable read (capped collection scans): reaching the end keeps the scan and
    /// remembers where it ended, so [`DocStream::resume_tail`] reads what arrived since.
    tailable: bool,
    /// The storage position of the last entry a tailable read reached.
    tail_after: Option<Vec<u8>>,
    /// Collection scans of a capped collection: the position of each buffered record, in step
    /// with `buffer` (empty for every other read).
    positions: VecDeque<Vec<u8>>,
    /// Collection scans of a capped collection: the position of the last record handed out,
    /// where [`DocStream::restore`] resumes.
    last_returned: Option<Vec<u8>>,
    /// The next page resumes a tailable read that had reached its end (`resume_tail`), which
    /// mongod reports differently when the position is gone.
    resuming_tail: bool,
    /// A finished collection scan, kept while records it read ahead are buffered, so
    /// [`DocStream::restore`] can read them again.
    finished_scan: Option<ScanStep>,
}

/// The state of a sort merge: one stream per branch, each in `sort` order, and the next record
/// of each with its sort key.
#[derive(Debug)]
struct Merge {
    sort: SortSpec,
    branches: Vec<DocStream>,
    heads: Vec<Option<(Vec<Bson>, Record)>>,
}

impl Merge {
    /// The smallest head in sort order (ties: the earlier branch), refilling every empty head
    /// first.
    async fn next(&mut self, storage: &dyn Storage) -> CommandResult<Option<Record>> {
        for (branch, head) in self.branches.iter_mut().zip(self.heads.iter_mut()) {
            if head.is_none() {
                if let Some(record) = Box::pin(branch.next(storage)).await? {
                    *head = Some((self.sort.sort_key(&record.doc), record));
                }
            }
        }
        let mut best: Option<usize> = None;
        for (position, head) in self.heads.iter().enumerate() {
            let Some((key, _)) = head else {
                continue;
            };
            let better = best.is_none_or(|best| {
                let best_key = self.heads[best]
                    .as_ref()
                    .map(|(key, _)| key.as_slice())
                    .unwrap_or_default();
                self.sort.compare_keys(key, best_key) == std::cmp::Ordering::Less
            });
            if better {
                best = Some(position);
            }
        }
        Ok(best
            .and_then(|position| self.heads[position].take())
            .map(|(_, record)| record))
    }
}

impl DocStream {
    pub fn new(
        ns: Namespace,
        filter: Arc<Filter>,
        access: &Access,
        visibility: Visibility,
    ) -> DocStream {
        let index_step = |scan: &IndexScan| ScanStep {
            source: ScanSource::Index {
                name: scan.index.name.clone(),
                ranges: scan.ranges.clone(),
            },
            reverse: scan.reverse,
            key_filter: scan.key_filter.clone(),
        };
        let merge = match access {
            Access::SortMerge { scans, sort } => {
                let branches: Vec<DocStream> = scans
                    .iter()
                    .map(|scan| {
                        DocStream::new(
                            ns.clone(),
                            filter.clone(),
                            &Access::IndexScan(scan.clone()),
                            visibility.clone(),
                        )
                    })
                    .collect();
                Some(Box::new(Merge {
                    sort: sort.clone(),
                    heads: branches.iter().map(|_| None).collect(),
                    branches,
                }))
            }
            _ => None,
        };
        let (point, scans, dedup) = match access {
            Access::Eof => (None, VecDeque::new(), false),
            Access::IdHack(id) => (Some(id.clone()), VecDeque::new(), false),
            Access::CollScan { reverse } => (
                None,
                VecDeque::from([ScanStep {
                    source: ScanSource::Collection,
                    reverse: *reverse,
                    key_filter: None,
                }]),
                false,
            ),
            Access::IndexScan(scan) => (None, VecDeque::from([index_step(scan)]), scan.multikey),
            Access::Or(scans) => (None, scans.iter().map(index_step).collect(), true),
            Access::SortMerge { .. } => (None, VecDeque::new(), false),
        };
        DocStream {
            ns,
            filter,
            exhausted: merge.is_none() && point.is_none() && scans.is_empty(),
            point,
            scans,
            resume_after: None,
            buffer: VecDeque::new(),
            produced: dedup.then(HashSet::new),
            visibility,
            page_size: PAGE_SIZE,
            stats: ScanStats::default(),
            merge,
            check_filter: true,
            covered: false,
            tailable: false,
            tail_after: None,
            positions: VecDeque::new(),
            last_returned: None,
            resuming_tail: false,
            finished_scan: None,
        }
    }

    /// Makes a collection scan tailable (see `tailable`).
    pub fn make_tailable(&mut self) {
        self.tailable = true;
    }

    /// A tailable stream that reached its end reads on from there (documents inserted since).
    pub fn resume_tail(&mut self) {
        if self.tailable && self.exhausted && self.buffer.is_empty() && !self.scans.is_empty() {
            self.exhausted = false;
            self.resume_after = self.tail_after.clone();
            self.resuming_tail = self.resume_after.is_some();
        }
    }

    /// Continues a collection scan of a capped collection from the last record handed out, as
    /// mongod restores its cursor for each `getMore`: records read ahead are dropped and read
    /// again, so a position that was rolled over (or deleted) since is noticed by the next page
    /// (136 CappedPositionLost) instead of the scan going on from a later document. Does nothing
    /// for other reads, or when nothing is read ahead.
    pub fn restore(&mut self) {
        if self.positions.is_empty() {
            return;
        }
        if self.scans.is_empty() {
            match self.finished_scan.take() {
                Some(step) => self.scans.push_back(step),
                None => return,
            }
        }
        self.buffer.clear();
        self.positions.clear();
        self.resume_after = self.last_returned.clone();
        self.exhausted = false;
        self.resuming_tail = false;
    }

    /// Reads index entries covered (`ScanRequest::covered`): records hold only the index's
    /// top-level key fields. Only for plans that need nothing else (`QueryPlan::covered`).
    pub(crate) fn read_covered(&mut self) {
        self.covered = true;
    }

    /// Hands out every visible record read without checking it against the filter (the plan's
    /// bounds are exact for it).
    pub(crate) fn skip_filter_check(&mut self) {
        self.check_filter = false;
    }

    /// At most `wanted` records will be taken: read small pages first.
    pub(crate) fn set_wanted(&mut self, wanted: Option<u64>) {
        if let Some(wanted) = wanted {
            self.page_size = usize::try_from(wanted)
                .unwrap_or(PAGE_SIZE)
                .clamp(1, PAGE_SIZE);
        }
        if let Some(merge) = &mut self.merge {
            for branch in &mut merge.branches {
                branch.set_wanted(wanted);
            }
        }
    }

    /// Continues under new visibility (a `getMore` at a later time, or after a policy change).
    /// Records read earlier are judged again when handed out.
    pub fn set_visibility(&mut self, visibility: Visibility) {
        if let Some(merge) = &mut self.merge {
            for branch in &mut merge.branches {
                branch.set_visibility(visibility.clone());
            }
        }
        self.visibility = visibility;
    }

    pub fn stats(&self) -> ScanStats {
        match &self.merge {
            Some(merge) => merge
                .branches
                .iter()
                .fold(self.stats, |total, branch| ScanStats {
                    keys_examined: total.keys_examined + branch.stats.keys_examined,
                    docs_examined: total.docs_examined + branch.stats.docs_examined,
                    returned: total.returned,
                }),
            None => self.stats,
        }
    }

    /// Whether storage has nothing more to give (records may still be buffered).
    pub(crate) fn is_exhausted(&self) -> bool {
        match &self.merge {
            Some(merge) => merge.branches.iter().all(DocStream::is_exhausted),
            None => self.exhausted,
        }
    }

    /// Records read ahead and not yet handed out.
    pub fn buffered(&self) -> usize {
        match &self.merge {
            Some(merge) => {
                merge
                    .branches
                    .iter()
                    .map(DocStream::buffered)
                    .sum::<usize>()
                    + merge.heads.iter().flatten().count()
            }
            None => self.buffer.len(),
        }
    }

    /// The next matching visible record, or `None` when there are no more.
    pub async fn next(&mut self, storage: &dyn Storage) -> CommandResult<Option<Record>> {
        if let Some(merge) = &mut self.merge {
            while let Some(record) = merge.next(storage).await? {
                if self.visibility.is_visible(&record) {
                    self.stats.returned += 1;
                    return Ok(Some(record));
                }
            }
            return Ok(None);
        }
        loop {
            if let Some(record) = self.buffer.pop_front() {
                if let Some(position) = self.positions.pop_front() {
                    self.last_returned = Some(position);
                }
                if self.visibility.is_visible(&record) {
                    self.stats.returned += 1;
                    return Ok(Some(record));
                }
                continue;
            }
            if self.exhausted {
                return Ok(None);
            }
            let page_size = self.page_size;
            self.read_page(storage, page_size).await?;
            self.page_size = (self.page_size * 2).min(PAGE_SIZE);
        }
    }

    /// Whether another record will come, fetching ahead as needed (the record stays queued; it is
    /// checked for visibility again when handed out).
    pub async fn has_more(&mut self, storage: &dyn Storage) -> CommandResult<bool> {
        if let Some(merge) = &mut self.merge {
            for (branch, head) in merge.branches.iter_mut().zip(&merge.heads) {
                if head.is_some() || Box::pin(branch.has_more(storage)).await? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        while self.buffer.is_empty() && !self.exhausted {
            let page_size = self.page_size;
            self.read_page(storage, page_size).await?;
        }
        Ok(!self.buffer.is_empty())
    }

    /// Every remaining matching record.
    pub async fn collect(mut self, storage: &dyn Storage) -> CommandResult<Vec<Record>> {
        let mut records = Vec::new();
        while let Some(record) = self.next(storage).await? {
            records.push(record);
        }
        Ok(records)
    }

    /// Reads one page of at most `limit` records from storage into the buffer (fewer, none
    /// even, when entries were skipped).
    pub(crate) async fn read_page(
        &mut self,
        storage: &dyn Storage,
        limit: usize,
    ) -> CommandResult<()> {
        if let Some(merge) = &mut self.merge {
            let share = (limit / merge.branches.len().max(1)).max(1);
            for branch in &mut merge.branches {
                Box::pin(branch.read_page(storage, share)).await?;
            }
            return Ok(());
        }
        if self.exhausted {
            return Ok(());
        }
        let mut positions = Vec::new();
        let records = if let Some(id) = self.point.take() {
            self.exhausted = true;
            let record = storage.get(&self.ns, &id).await?;
            self.stats.keys_examined += 1;
            self.stats.docs_examined += u64::from(record.is_some());
            record.into_iter().collect()
        } else if let Some(step) = self.scans.front() {
            // Reads served from cache never return Pending; yielding once per page keeps long
            // scans fair to other requests and lets `maxTimeMS` interrupt them.
            tokio::task::yield_now().await;
            let resumed_from = self.resume_after.clone();
            let resuming_tail = std::mem::take(&mut self.resuming_tail);
            let page = storage
                .scan(
                    &self.ns,
                    ScanRequest {
                        source: step.source.clone(),
                        resume_after: self.resume_after.take(),
                        reverse: step.reverse,
                        limit: limit.max(1),
                        hide: self.visibility.expired(),
                        key_filter: step.key_filter.clone(),
                        covered: self.covered,
                    },
                )
                .await?;
            if page.position_lost {
                return Err(crate::capped::position_lost(
                    resumed_from.as_deref().unwrap_or_default(),
                    resuming_tail,
                ));
            }
            self.stats.keys_examined += page.keys_examined;
            self.stats.docs_examined += page.docs_examined;
            self.resume_after = page.resume;
            if self.tailable && page.last.is_some() {
                self.tail_after = page.last;
            }
            if self.resume_after.is_none() {
                if self.tailable {
                    // The scan stays: `resume_tail` continues it after `tail_after`.
                    self.exhausted = true;
                } else {
                    let finished = self.scans.pop_front();
                    self.finished_scan =
                        finished.filter(|step| matches!(step.source, ScanSource::Collection));
                    self.exhausted = self.scans.is_empty();
                }
            }
            positions = page.positions;
            page.records
        } else {
            self.exhausted = true;
            Vec::new()
        };
        let mut positions = positions.into_iter();
        for record in records {
            let position = positions.next();
            if !self.visibility.is_visible(&record)
                || (self.check_filter && !self.filter.try_matches(&record.doc)?)
            {
                // Passed over: with nothing read ahead before it, the scan's position is past it.
                if position.is_some() && self.buffer.is_empty() {
                    self.last_returned = position;
                }
                continue;
            }
            if let Some(produced) = &mut self.produced {
                let id = keycodec::encode_id(&record.doc.id());
                if !produced.insert(id) {
                    continue;
                }
            }
            self.buffer.push_back(record);
            self.positions.extend(position);
        }
        Ok(())
    }
}

/// One way to read.
#[derive(Clone, Debug)]
pub enum Access {
    /// Nothing can match (contradictory bounds).
    Eof,
    /// The filter pins `_id` to one value.
    IdHack(Bson),
    /// Every document in natural order: insertion order, `_id` order in a clustered
    /// collection (`tideway_storage::ScanSource::Collection`).
    CollScan {
        reverse: bool,
    },
    IndexScan(IndexScan),
    /// The union of index scans, one per `$or` branch, documents deduplicated.
    Or(Vec<IndexScan>),
    /// Index scans each in `sort` order (one per combination of the values a `$in` pins the
    /// fields before the sort fields to), merged into that order.
    SortMerge {
        scans: Vec<IndexScan>,
        sort: SortSpec,
    },
}

/// A scan of one index over bounds.
#[derive(Clone, Debug)]
pub struct IndexScan {
    pub index: Arc<IndexSpec>,
    pub bounds: IndexBounds,
    pub reverse: bool,
    pub multikey: bool,
    pub ranges: Vec<KeyRange>,
    pub key_filter: Option<KeyPredicate>,
}

impl IndexScan {
    pub(crate) fn new(
        index: &Arc<IndexSpec>,
        bounds: IndexBounds,
        reverse: bool,
        multikey: bool,
    ) -> IndexScan {
        let (ranges, key_filter) = bounds.scan();
        IndexScan {
            index: index.clone(),
            bounds,
            reverse,
            multikey,
            ranges,
            key_filter,
        }
    }

    /// `IXSCAN { a: 1, b: -1 }`.
    pub(crate) fn summary(&self) -> String {
        let fields: Vec<String> = self
            .index
            .key_pattern()
            .iter()
            .map(|(field, value)| {
                format!("{field}: {}", tideway_base::display::value_string(value))
            })
            .collect();
        format!("IXSCAN {{ {} }}", fields.join(", "))
    }
}

/// The distinct values at `path` of the visible documents inside `scan` (a `planner::distinct_scan`
/// of an index whose first field is `path`), in index order: one document is read per key
/// value, then the scan jumps past every key with that value. A document without a value at
/// `path` (keyed as null, or undefined for `[]`) gives nothing and the scan goes on within the
/// value, so an explicit null later in the group is still found.
pub async fn distinct_values(
    storage: &dyn Storage,
    view: &CollectionView,
    scan: &IndexScan,
    path: &str,
) -> StorageResult<(Vec<Bson>, ScanStats)> {
    let direction = scan
        .index
        .key
        .first()
        .map_or(keycodec::Direction::Ascending, |(_, direction)| *direction);
    let mut values: Vec<Bson> = Vec::new();
    let mut stats = ScanStats::default();
    for range in &scan.ranges {
        let mut lower = range.0.clone();
        let mut resume_after = None;
        loop {
            tokio::task::yield_now().await;
            let page = storage
                .scan(
                    &view.ns,
                    ScanRequest {
                        source: ScanSource::Index {
                            name: scan.index.name.clone(),
                            ranges: vec![(lower.clone(), range.1.clone())],
                        },
                        resume_after: resume_after.take(),
                        reverse: false,
                        limit: 1,
                        hide: view.visibility.expired(),
                        key_filter: None,
                        covered: false,
                    },
                )
                .await?;
            stats.keys_examined += page.keys_examined;
            stats.docs_examined += page.docs_examined;
            let Some(resume) = page.resume else {
                // The range is done; a last record may still have come with it.
                if let Some(record) = page
                    .records
                    .into_iter()
                    .find(|r| view.visibility.is_visible(r))
                {
                    push_distinct(&mut values, &record.doc, path, None);
                }
                break;
            };
            let Some(record) = page
                .records
                .into_iter()
                .find(|r| view.visibility.is_visible(r))
            else {
                resume_after = Some(resume);
                continue;
            };
            stats.returned += 1;
            if !push_distinct(&mut values, &record.doc, path, None) {
                resume_after = Some(resume);
                continue;
            }
            // Past every key whose first component is this one.
            let Ok((_, used)) = keycodec::decode_value(&resume, direction) else {
                resume_after = Some(resume);
                continue;
            };
            match keycodec::prefix_successor(&resume[..used]) {
                Some(next) => lower = std::ops::Bound::Included(next),
                None => break,
            }
        }
    }
    Ok((values, stats))
}

/// Adds the values at `path` of `document` not already in `values` (leaf arrays arrive
/// expanded: `{a: [1, [2]]}` yields 1 and [2], as mongod's `distinct` reports them); whether it
/// had any. Values equal under `collation` count once (the first seen is kept).
pub fn push_distinct(
    values: &mut Vec<Bson>,
    document: &Document,
    path: &str,
    collation: Option<&Collation>,
) -> bool {
    let found = tideway_query::lookup_values(document, path);
    for value in &found {
        if !values
            .iter()
            .any(|seen| tideway_query::compare::values_equal_with(seen, value, collation))
        {
            values.push((*value).clone());
        }
    }
    !found.is_empty()
}

/// The `_id` of a stored document (every stored document has one).
pub fn document_id(document: &Document) -> Bson {
    document.get("_id").cloned().unwrap_or(Bson::Null)
}
