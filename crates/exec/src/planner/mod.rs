//! Query planning: which way to read a collection for a filter and sort — an `_id` point lookup,
//! an index scan with bounds, a union of index scans for `$or`, or a collection scan — chosen as
//! mongod does in spirit: every indexed candidate is tried for a short trial and the most
//! productive wins; the winner is cached per query shape; `hint` overrides the choice.
//!
//! Invariants:
//! - A plan never loses a matching document: bounds are supersets ([`bounds`]), and execution
//!   (`crate::executor`) re-checks every document with the whole filter.
//! - A plan that claims to provide the sort (`provides_sort`) yields documents in exactly the
//!   order a blocking sort would (ties in `_id` order): only non-multikey indexes whose key
//!   pattern, after fields pinned to one value, starts with the sort pattern (all directions
//!   equal or all reversed).
//! - Sparse indexes are used only when the bounds exclude null (every matching document is
//!   indexed), partial and hidden ones only when hinted (partial) or never (hidden).
//! - The plan cache is keyed by the collection's identity and index set (names, keys, multikey
//!   flags), so any index change invalidates its entries; a cached choice is rebuilt with the
//!   query's own values.
//!
//! The trial reads through `exec::DocStream`; the winner's stream, with what it read during the
//! trial, is handed back so nothing is read twice.

mod cache;
pub mod explain;

use std::sync::Arc;

use bson::Bson;

use crate::bounds::{self, IndexBounds};
use crate::executor::{Access, CollectionView, DocStream, IndexScan, ScanStats};
pub use cache::{shape_key, PlanCache};
use tideway_base::error::{CommandError, CommandResult};
use tideway_query::collation::{self, CollationChoice};
use tideway_query::filter::{Expr, Predicate, TextMatch};
use tideway_query::keycodec::Direction;
use tideway_query::text::TextIndex;
use tideway_query::{path, Filter, SortSpec};
use tideway_storage::wildcard::WildcardProjection;
use tideway_storage::{CollectionMeta, IndexKind, IndexSpec, KeyKind, KeyRange, Record, Storage};

/// Results a trial aims for before it stops (mongod's default batch size plus one).
const TRIAL_RESULTS: u64 = 101;
/// Most index keys or documents each candidate reads during a trial.
const TRIAL_MAX_WORKS: u64 = 10_000;
/// Records each candidate may produce per trial round.
const TRIAL_PAGE: usize = 32;
/// How much more work than in its trial a cached plan may need before the query is planned
/// again (mongod's `internalQueryCacheEvictionRatio`).
const REPLAN_WORK_FACTOR: u64 = 10;

/// What a command asks the planner for.
#[derive(Clone, Debug)]
pub struct Query {
    pub filter: Arc<Filter>,
    pub sort: Option<SortSpec>,
    /// At most this many documents will be read from the plan (`skip + limit`), when known.
    pub wanted: Option<u64>,
    pub hint: Hint,
    /// The only top-level fields the reader needs (a find's inclusion projection, see
    /// `Projection::included_top_level_fields`): a plan whose index holds them all may answer
    /// from index keys ([`QueryPlan::covered`]). `None`: whole documents are needed.
    pub needed_fields: Option<Vec<String>>,
}

impl Query {
    /// A filter alone: no sort, no limit, no hint, whole documents.
    pub fn filter(filter: Arc<Filter>) -> Query {
        Query {
            filter,
            sort: None,
            wanted: None,
            hint: Hint::None,
            needed_fields: None,
        }
    }
}

/// The `hint` of a command, resolved against the collection's indexes.
#[derive(Clone, Debug, PartialEq)]
pub enum Hint {
    None,
    /// `{$natural: 1 | -1}`: a collection scan in that direction.
    Natural {
        reverse: bool,
    },
    /// An index, by name.
    Index(String),
}

impl Hint {
    /// `{$natural: direction}` (a `$natural` hint, or a `find` sort that names one): backwards
    /// for a negative number.
    pub fn natural(direction: &Bson) -> Hint {
        Hint::Natural {
            reverse: tideway_base::bsonutil::as_f64(direction).is_some_and(|number| number < 0.0),
        }
    }
}

/// An index's key pattern as plan summaries show it: `{ a: 1, b: -1 }`.
pub fn key_pattern_summary(index: &IndexSpec) -> String {
    let fields: Vec<String> = index
        .key_pattern()
        .iter()
        .map(|(field, value)| format!("{field}: {}", tideway_base::display::value_string(value)))
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

/// The chosen way to read, and whether its order satisfies the query's sort.
#[derive(Clone, Debug)]
pub struct QueryPlan {
    pub access: Access,
    pub provides_sort: bool,
    /// The choice came from the plan cache (no trial ran).
    pub from_cache: bool,
    /// Answered from index keys (mongod's covered plan, `PROJECTION_COVERED`): the stream's
    /// documents hold only the index's top-level key fields (see `ScanRequest::covered`).
    pub covered: bool,
}

impl QueryPlan {
    fn new(access: Access, provides_sort: bool) -> QueryPlan {
        QueryPlan {
            access,
            provides_sort,
            from_cache: false,
            covered: false,
        }
    }

    /// Whether this plan, already known to be exact for the filter ([`QueryPlan::is_exact`]:
    /// one scan of an ordered index that is not multikey), can answer `query` from index keys
    /// alone: a secondary index whose top-level key fields include every field the query needs
    /// and every field a blocking sort would read, over a collection where nothing can expire
    /// (expiry is judged on stored documents).
    fn can_cover(&self, query: &Query, everything_visible: bool) -> bool {
        let (Access::IndexScan(scan), Some(needed)) = (&self.access, &query.needed_fields) else {
            return false;
        };
        // Covered records hold the index's top-level key fields only.
        let holds = |field: &str| {
            !field.contains('.') && scan.index.key.iter().any(|(key, _)| key == field)
        };
        let sort_readable = self.provides_sort
            || query
                .sort
                .as_ref()
                .is_none_or(|sort| sort.keys().all(|(field, _)| holds(field)));
        everything_visible
            && scan.index.collation.is_none()
            && !scan.index.is_id_index()
            && needed.iter().all(|field| holds(field))
            && sort_readable
    }

    /// The index scan whose keys alone answer a count of `filter`'s matches (mongod's
    /// `COUNT_SCAN`): a secondary index, without a key filter, that [`QueryPlan::is_exact`].
    /// The caller must also know nothing is hidden.
    pub fn count_scan(&self, filter: &Filter) -> Option<&IndexScan> {
        let Access::IndexScan(scan) = &self.access else {
            return None;
        };
        (!scan.index.is_id_index() && scan.key_filter.is_none() && self.is_exact(filter))
            .then_some(scan)
    }

    /// Whether every document this plan reads matches `filter`, so execution need not check
    /// it again: one scan of an ordered index that is not multikey, whose bounds are exact for
    /// every conjunct of the filter (its key filter, if any, is exact too). Both the keys and
    /// the documents come from one storage snapshot, so they agree.
    pub(crate) fn is_exact(&self, filter: &Filter) -> bool {
        let Access::IndexScan(scan) = &self.access else {
            return false;
        };
        let fields: Vec<String> = scan
            .index
            .key
            .iter()
            .map(|(field, _)| field.clone())
            .collect();
        scan.index.is_ordered()
            && !scan.multikey
            && collation::same(&scan.index.collation, filter.collation())
            && bounds::covers(filter, &fields)
    }

    /// mongod's `planSummary`: `IXSCAN { at: 1 }`, `COLLSCAN`, `IDHACK`, `EOF`, or the scans of
    /// an `$or` joined by `, `.
    pub fn summary(&self) -> String {
        match &self.access {
            Access::Eof => "EOF".to_string(),
            Access::IdHack(_) => "IDHACK".to_string(),
            Access::CollScan { .. } => "COLLSCAN".to_string(),
            Access::IndexScan(scan) => scan.summary(),
            Access::Or(scans) | Access::SortMerge { scans, .. } => scans
                .iter()
                .map(IndexScan::summary)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// A candidate plan with how it did in the trial.
#[derive(Debug)]
pub struct Candidate {
    pub plan: QueryPlan,
    pub stream: DocStream,
    pub score: f64,
}

/// What planning produced: the winner, ready to read, and the candidates it beat.
#[derive(Debug)]
pub struct Planned {
    pub plan: QueryPlan,
    pub stream: DocStream,
    pub rejected: Vec<Candidate>,
}

/// What explain needs to know about how a query was planned, once its stream is being read.
#[derive(Clone, Debug)]
pub struct PlanSummary {
    pub plan: QueryPlan,
    /// The candidates the winner beat, with what each read during the trial.
    pub rejected: Vec<(QueryPlan, ScanStats)>,
    /// What the winner read during the trial (`None`: no trial ran).
    pub trial: Option<ScanStats>,
    pub filter: Arc<Filter>,
    /// The query planned (for its shape, see [`shape_key`]).
    pub query: Query,
}

impl PlanSummary {
    /// Splits a planning result into its summary and the stream to read (nothing is copied but
    /// the rejected candidates' plans).
    pub fn split(planned: Planned, query: &Query) -> (PlanSummary, DocStream) {
        let Planned {
            plan,
            stream,
            rejected,
        } = planned;
        let summary = PlanSummary {
            plan,
            trial: (!rejected.is_empty()).then(|| stream.stats()),
            rejected: rejected
                .into_iter()
                .map(|candidate| {
                    let stats = candidate.stream.stats();
                    (candidate.plan, stats)
                })
                .collect(),
            filter: query.filter.clone(),
            query: query.clone(),
        };
        (summary, stream)
    }

    /// The summary of a [`distinct_scan`] (no trial, nothing rejected).
    pub fn of_distinct_scan(scan: IndexScan, filter: Arc<Filter>) -> PlanSummary {
        PlanSummary {
            plan: QueryPlan::new(Access::IndexScan(scan), true),
            rejected: Vec::new(),
            trial: None,
            query: Query::filter(filter.clone()),
            filter,
        }
    }

    /// The query shape, as the plan cache keys it.
    pub fn shape(&self) -> String {
        shape_key(&self.query)
    }
}

/// Plans `query` over `view` and returns the stream to read.
pub async fn plan(
    storage: &dyn Storage,
    cache: &PlanCache,
    view: &CollectionView,
    query: &Query,
) -> CommandResult<Planned> {
    let meta = view.meta.as_ref();
    let everything_visible = view.visibility.expired().is_none();
    let stream = |plan: &mut QueryPlan| {
        let mut stream = DocStream::new(
            view.ns.clone(),
            query.filter.clone(),
            &plan.access,
            view.visibility.clone(),
        );
        stream.set_wanted(query.wanted);
        let exact = plan.is_exact(&query.filter);
        if exact {
            stream.skip_filter_check();
        }
        plan.covered = exact && plan.can_cover(query, everything_visible);
        if plan.covered {
            stream.read_covered();
        }
        stream
    };
    let single = |mut plan: QueryPlan| Planned {
        stream: stream(&mut plan),
        plan,
        rejected: Vec::new(),
    };
    if let Some((path, near)) = query.filter.near() {
        // No index serves a near query yet (2dsphere and 2d are refused at createIndexes), so
        // every one is refused as mongod refuses one without a geo index.
        return Err(no_near_index(&view.ns, path, near, query.sort.as_ref()));
    }
    if let Some(text) = query.filter.text() {
        let mut plan = text_plan(meta, &query.filter, text)?;
        plan.provides_sort = query.sort.is_none();
        return Ok(single(plan));
    }
    if let Some(plan) = hinted(meta, query) {
        return Ok(single(plan));
    }
    let conjuncts = query.filter.top_level_conjuncts();
    if conjuncts
        .iter()
        .any(|conjunct| matches!(conjunct, Expr::Constant(false)))
    {
        return Ok(single(QueryPlan::new(Access::Eof, true)));
    }
    if let Some(id) = query.filter.id_equality() {
        // `_id` lookups are by the stored value: under a collation, only values without
        // strings are found that way.
        if query.filter.collation().is_none() || !collation::has_strings(id) {
            return Ok(single(QueryPlan::new(Access::IdHack(id.clone()), true)));
        }
    }
    let Some(meta) = meta else {
        return Ok(single(collection_scan(None, query)));
    };
    let mut candidates = candidates(
        meta,
        &conjuncts,
        query.sort.as_ref(),
        query.filter.collation(),
    );
    if let Some(eof) = candidates
        .iter()
        .position(|plan| matches!(plan.access, Access::Eof))
    {
        return Ok(single(candidates.swap_remove(eof)));
    }
    match candidates.len() {
        0 => return Ok(single(collection_scan(Some(meta), query))),
        1 => return Ok(single(candidates.remove(0))),
        _ => {}
    }
    let cache_key = cache::key(meta, query);
    if let Some(entry) = cache.get(&cache_key) {
        if let Some(position) = candidates
            .iter()
            .position(|plan| cache::choice_of(plan) == entry.choice)
        {
            // mongod's cached-plan trial: the plan may use up to ten times the work it needed
            // when it won; a plan that needs more (other values, other data) is planned again.
            let mut plan = candidates[position].clone();
            plan.from_cache = true;
            let mut cached = stream(&mut plan);
            let budget = entry
                .works
                .saturating_mul(REPLAN_WORK_FACTOR)
                .max(TRIAL_PAGE as u64);
            let target = trial_target(query);
            while !cached.is_exhausted()
                && (cached.buffered() as u64) < target
                && cached.stats().works() < budget
            {
                cached.read_page(storage, trial_page(target)).await?;
            }
            if cached.is_exhausted() || cached.buffered() as u64 >= target {
                return Ok(Planned {
                    plan,
                    stream: cached,
                    rejected: Vec::new(),
                });
            }
            cache.remove(&cache_key);
        }
    }
    let mut trials: Vec<Candidate> = candidates
        .into_iter()
        .map(|mut plan| Candidate {
            stream: stream(&mut plan),
            plan,
            score: 0.0,
        })
        .collect();
    run_trial(storage, &mut trials, query).await?;
    // Ties go to the earlier candidate (index order in the catalog).
    let best = trials
        .iter()
        .enumerate()
        .fold(None::<(usize, f64)>, |best, (position, trial)| match best {
            Some((_, score)) if trial.score <= score => best,
            _ => Some((position, trial.score)),
        })
        .map_or(0, |(position, _)| position);
    let winner = trials.swap_remove(best);
    cache.insert(
        cache_key,
        cache::Entry {
            choice: cache::choice_of(&winner.plan),
            works: winner.stream.stats().works(),
        },
    );
    Ok(Planned {
        plan: winner.plan,
        stream: winner.stream,
        rejected: trials,
    })
}

/// The plan of a `$text` query: the union of the text index's keys for each term to scan (under
/// the values the filter pins its prefix fields to), documents de-duplicated; binds the search
/// to the index. 27 without a text index, as mongod.
fn text_plan(
    meta: Option<&CollectionMeta>,
    filter: &Filter,
    text: &TextMatch,
) -> CommandResult<QueryPlan> {
    let index = meta
        .and_then(|meta| {
            meta.indexes
                .iter()
                .find(|index| index.kind() == IndexKind::Text && !index.catalog_only)
        })
        .ok_or_else(tideway_query::text::text_index_required)?;
    let text_index = TextIndex::from_spec(&index.spec)?;
    text.bind(text_index.clone());
    let conjuncts = filter.top_level_conjuncts();
    let mut prefix_values = Vec::with_capacity(text_index.prefix_fields.len());
    let mut display = Vec::new();
    for (field, sign) in &text_index.prefix_fields {
        let values = bounds::combine(
            bounds::conjunct_bounds(&conjuncts, &path::split_path(field), None),
            false,
        );
        let Some(value) = values
            .point_values()
            .filter(|points| points.len() == 1)
            .and_then(|points| points.first().map(|value| (*value).clone()))
        else {
            return Err(CommandError::bad_value(
                "error processing query: planner returned error :: caused by :: failed to use text index to satisfy $text query (if text index is compound, are equality predicates given for all prefix fields?)",
            ));
        };
        let direction = if *sign < 0 {
            Direction::Descending
        } else {
            Direction::Ascending
        };
        display.push((field.clone(), direction, values));
        prefix_values.push((value, direction));
    }
    let terms = text.query.terms_to_scan(&text_index);
    if terms.is_empty() {
        return Ok(QueryPlan::new(Access::Eof, true));
    }
    let prefix: Vec<(&Bson, Direction)> = prefix_values
        .iter()
        .map(|(value, direction)| (value, *direction))
        .collect();
    let mut ranges: Vec<KeyRange> = terms
        .iter()
        .map(|term| {
            let key = tideway_storage::textkeys::text_term_prefix(&prefix, term);
            let upper = tideway_query::keycodec::prefix_successor(&key)
                .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
            (std::ops::Bound::Included(key), upper)
        })
        .collect();
    ranges.sort_by(|a, b| range_start(a).cmp(range_start(b)));
    display.push((
        "_fts".to_string(),
        Direction::Ascending,
        bounds::IntervalList::points(terms.iter().map(|term| Bson::String(term.clone()))),
    ));
    Ok(QueryPlan::new(
        Access::IndexScan(IndexScan {
            index: index.clone(),
            bounds: IndexBounds { fields: display },
            reverse: false,
            // A document has one key per term.
            multikey: true,
            ranges,
            key_filter: None,
        }),
        true,
    ))
}

fn range_start(range: &KeyRange) -> &[u8] {
    match &range.0 {
        std::ops::Bound::Included(key) | std::ops::Bound::Excluded(key) => key,
        std::ops::Bound::Unbounded => &[],
    }
}

/// mongod's refusal of a near query no index can answer (291, `QueryPlanner::plan`'s message
/// wrapped by `getExecutor`).
fn no_near_index(
    ns: &tideway_storage::Namespace,
    path: &[String],
    near: &tideway_query::geo::NearQuery,
    sort: Option<&SortSpec>,
) -> CommandError {
    let sort: bson::Document = sort
        .into_iter()
        .flat_map(SortSpec::keys)
        .map(|(field, direction)| {
            let direction = match direction {
                tideway_query::Direction::Descending => -1,
                tideway_query::Direction::Ascending => 1,
            };
            (field.to_string(), Bson::Int32(direction))
        })
        .collect();
    let sort = tideway_base::display::value_string(&Bson::Document(sort));
    CommandError::new(
        tideway_base::error::ErrorCode::NoQueryExecutionPlans,
        format!(
            "error processing query: ns={ns}Tree: GEONEAR  field={} maxdist={} isNearSphere={}\nSort: {sort}\nProj: {{}}\n planner returned error :: caused by :: unable to find index for $geoNear query",
            path.join("."),
            tideway_geo::format::six_digits(near.max_distance),
            u8::from(near.is_near_sphere)
        ),
    )
}

/// The plan a `hint` forces, if any.
fn hinted(meta: Option<&CollectionMeta>, query: &Query) -> Option<QueryPlan> {
    match &query.hint {
        Hint::None => None,
        Hint::Natural { reverse } => Some(QueryPlan::new(
            Access::CollScan { reverse: *reverse },
            query
                .sort
                .as_ref()
                .is_none_or(|sort| natural_order_provides(meta, query, sort, *reverse)),
        )),
        Hint::Index(name) => {
            let meta = meta?;
            let index = meta.index_named(name)?;
            // A hinted index of another collation is read whole: its keys order strings
            // differently, so the filter bounds nothing and every document is re-checked.
            let same_collation = collation::same(&index.collation, query.filter.collation());
            let conjuncts = if same_collation {
                query.filter.top_level_conjuncts()
            } else {
                Vec::new()
            };
            match index.kind() {
                IndexKind::Ordered | IndexKind::Hashed => {}
                // A wildcard index is read for the path the filter bounds, if one.
                IndexKind::Wildcard => {
                    return wildcard_scan(index, &conjuncts)
                        .map(|scan| QueryPlan::new(Access::IndexScan(scan), query.sort.is_none()))
                }
                // Text indexes serve `$text` only.
                IndexKind::Text => return None,
            }
            let multikey = meta.is_multikey(&index.name);
            let bounds = index_bounds(index, &conjuncts, multikey);
            let order = query
                .sort
                .as_ref()
                .filter(|_| same_collation)
                .and_then(|sort| sort_order(index, &bounds, multikey, sort));
            let scan = IndexScan::new(index, bounds, order.unwrap_or(false), multikey);
            Some(QueryPlan::new(
                Access::IndexScan(scan),
                order.is_some() || query.sort.is_none(),
            ))
        }
    }
}

/// Whether a collection scan in direction `reverse` returns documents in `sort`'s order: only
/// in a clustered collection, whose natural order is `_id` order (its stored keys', the simple
/// collation's), for `{_id: 1}` forward or `{_id: -1}` in reverse. Elsewhere natural order is
/// insertion order, which no sort describes.
fn natural_order_provides(
    meta: Option<&CollectionMeta>,
    query: &Query,
    sort: &SortSpec,
    reverse: bool,
) -> bool {
    if !meta.is_some_and(CollectionMeta::clustered)
        || sort.has_text_score()
        || query.filter.collation().is_some()
    {
        return false;
    }
    let mut keys = sort.keys();
    matches!(
        (keys.next(), keys.next()),
        (Some(("_id", direction)), None)
            if reverse == (direction == tideway_query::Direction::Descending)
    )
}

/// A collection scan: in natural order, backwards when that gives the sort (`{_id: -1}` in a
/// clustered collection).
fn collection_scan(meta: Option<&CollectionMeta>, query: &Query) -> QueryPlan {
    let sort = query.sort.as_ref();
    let reverse = sort.is_some_and(|sort| natural_order_provides(meta, query, sort, true));
    let provides = sort.is_none_or(|sort| natural_order_provides(meta, query, sort, reverse));
    QueryPlan::new(Access::CollScan { reverse }, provides)
}

/// Plain ascending/descending indexes the planner may choose by itself for a query under
/// `collation`.
fn usable(index: &IndexSpec, collation: &CollationChoice) -> bool {
    plannable(index, collation) && matches!(index.kind(), IndexKind::Ordered | IndexKind::Hashed)
}

/// Indexes the planner may choose by itself, of any kind: not catalog-only, partial or hidden,
/// and of the query's collation (keys under another collation order strings differently).
fn plannable(index: &IndexSpec, collation: &CollationChoice) -> bool {
    collation::same(&index.collation, collation)
        && !index.catalog_only
        && index.partial_filter.is_none()
        && !index.spec.get_bool("hidden").unwrap_or(false)
}

/// A sparse index lacks documents missing its fields: usable only when the bounds exclude null
/// on some field (no matching document is missing it).
fn sparse_misses_matches(index: &IndexSpec, bounds: &IndexBounds) -> bool {
    index.sparse
        && !bounds
            .fields
            .iter()
            .any(|(_, _, field)| !field.contains_value(&Bson::Null))
}

/// The bounds the filter's top-level conjuncts put on each field of `index` (ordered or hashed:
/// a hashed field is bounded only by values it is pinned to, as their hashes).
fn index_bounds(index: &IndexSpec, conjuncts: &[&Expr], multikey: bool) -> IndexBounds {
    let kinds = if index.kind() == IndexKind::Hashed {
        index.key_kinds()
    } else {
        Vec::new()
    };
    IndexBounds {
        fields: index
            .key
            .iter()
            .enumerate()
            .map(|(position, (field, direction))| {
                let path = path::split_path(field);
                let found = bounds::conjunct_bounds(conjuncts, &path, index.collation.as_deref());
                let mut values = bounds::combine(found, multikey);
                if kinds
                    .get(position)
                    .is_some_and(|(_, kind)| *kind == KeyKind::Hashed)
                {
                    values = match values.point_values() {
                        Some(points) => bounds::IntervalList::points(
                            points
                                .into_iter()
                                .map(|value| Bson::Int64(tideway_query::hash::hashed_value(value))),
                        ),
                        None => bounds::IntervalList::full(),
                    };
                }
                (field.clone(), *direction, values)
            })
            .collect(),
    }
}

/// A scan of a wildcard index for the first top-level conjunct on a path it covers whose bounds
/// hold only for present scalar values (a wildcard index has no key for a missing path, nor for
/// an object at it): points before ranges.
fn wildcard_scan(index: &Arc<IndexSpec>, conjuncts: &[&Expr]) -> Option<IndexScan> {
    let projection = WildcardProjection::of_spec(index)?;
    let scalar = |value: &Bson| {
        !matches!(
            value,
            Bson::Null
                | Bson::Undefined
                | Bson::Document(_)
                | Bson::Array(_)
                | Bson::MinKey
                | Bson::MaxKey
        )
    };
    let mut best: Option<(String, bounds::IntervalList)> = None;
    for expr in conjuncts {
        let Expr::Leaf {
            path: Some(parts),
            predicate,
        } = expr
        else {
            continue;
        };
        let safe = match predicate {
            Predicate::Compare(_, value) => scalar(value),
            Predicate::In {
                values, has_null, ..
            } => !has_null && values.iter().all(scalar),
            Predicate::Regex(_) => true,
            _ => false,
        };
        let path = parts.join(".");
        if !safe
            || parts.iter().any(|part| path::array_index(part).is_some())
            || !projection.indexes_path(&path)
        {
            continue;
        }
        let Some(values) = bounds::predicate_bounds(predicate, None) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some((_, current)) => {
                values.point_values().is_some() && current.point_values().is_none()
            }
        };
        if better {
            best = Some((path, values));
        }
    }
    let (path, values) = best?;
    let value_bounds = IndexBounds {
        fields: vec![(path.clone(), Direction::Ascending, values)],
    };
    let ranges = tideway_storage::wildcard::wildcard_ranges(&path, &value_bounds.scan().0);
    let display = IndexBounds {
        fields: vec![
            (
                "$_path".to_string(),
                Direction::Ascending,
                bounds::IntervalList::points([Bson::String(path.clone())]),
            ),
            value_bounds.fields[0].clone(),
        ],
    };
    Some(IndexScan {
        index: index.clone(),
        bounds: display,
        reverse: false,
        // Array elements are keyed one by one under the array's path.
        multikey: true,
        ranges,
        key_filter: None,
    })
}

/// Whether scanning `index` within `bounds` yields `sort` order: `Some(reverse)` if so.
fn sort_order(
    index: &IndexSpec,
    bounds: &IndexBounds,
    multikey: bool,
    sort: &SortSpec,
) -> Option<bool> {
    if multikey || !index.is_ordered() || sort.has_text_score() {
        return None;
    }
    let pinned: Vec<&str> = bounds.equality_fields().collect();
    let index_fields = index
        .key
        .iter()
        .filter(|(field, _)| !pinned.contains(&field.as_str()));
    let sort_fields: Vec<(&str, tideway_query::Direction)> = sort
        .keys()
        .filter(|(field, _)| !pinned.contains(field))
        .collect();
    let mut reverse = None;
    let mut index_fields = index_fields.peekable();
    for (field, direction) in sort_fields {
        let (index_field, index_direction) = index_fields.next()?;
        if index_field != field {
            return None;
        }
        let same = (direction == tideway_query::Direction::Ascending)
            == (*index_direction == Direction::Ascending);
        match reverse {
            None => reverse = Some(!same),
            Some(reverse) if reverse == same => return None,
            Some(_) => {}
        }
    }
    Some(reverse.unwrap_or(false))
}

/// The indexed plans worth trying: each usable index whose leading field the filter bounds or
/// whose order provides the sort, and a union of index scans when a top-level `$or` has an
/// indexed plan for every branch. Contradictory bounds make an `Eof` plan.
fn candidates(
    meta: &CollectionMeta,
    conjuncts: &[&Expr],
    sort: Option<&SortSpec>,
    collation: &CollationChoice,
) -> Vec<QueryPlan> {
    let mut plans = Vec::new();
    for index in meta.indexes.iter().filter(|index| usable(index, collation)) {
        // Without a sort, an index whose leading field no conjunct names cannot be a candidate.
        let leading_named = index
            .key
            .first()
            .is_some_and(|(field, _)| bounds::names_path(conjuncts, &path::split_path(field)));
        if sort.is_none() && !leading_named {
            continue;
        }
        let multikey = meta.is_multikey(&index.name);
        let bounds = index_bounds(index, conjuncts, multikey);
        if bounds.is_empty() {
            return vec![QueryPlan::new(Access::Eof, true)];
        }
        if sparse_misses_matches(index, &bounds) {
            continue;
        }
        let leading_bounded = bounds
            .fields
            .first()
            .is_some_and(|(_, _, field)| !field.is_full());
        let order = sort.and_then(|sort| sort_order(index, &bounds, multikey, sort));
        if order.is_none() && !multikey {
            if let Some(sort) = sort {
                if let Some(scans) = explode_for_sort(index, &bounds, sort) {
                    plans.push(QueryPlan::new(
                        Access::SortMerge {
                            scans,
                            sort: sort.clone(),
                        },
                        true,
                    ));
                }
            }
        }
        if !leading_bounded && order.is_none() {
            continue;
        }
        let provides_sort = sort.is_none() || order.is_some();
        let scan = IndexScan::new(index, bounds, order.unwrap_or(false), multikey);
        plans.push(QueryPlan::new(Access::IndexScan(scan), provides_sort));
    }
    for index in meta
        .indexes
        .iter()
        .filter(|index| plannable(index, collation) && index.kind() == IndexKind::Wildcard)
    {
        if let Some(scan) = wildcard_scan(index, conjuncts) {
            plans.push(QueryPlan::new(Access::IndexScan(scan), sort.is_none()));
        }
    }
    if let Some(or) = or_plan(meta, conjuncts, sort, collation) {
        plans.push(or);
    }
    plans
}

/// Most scans a sort merge splits one index scan into (mongod's explode-for-sort limit).
const MAX_EXPLODED_SCANS: usize = 200;

/// The scans of a sort merge over `index`: when pinning the leading fields that `bounds` hold
/// to a few values each (`$in`) one value at a time makes the index provide `sort`, one scan per
/// combination of those values, each in sort order. `None` when no such split exists.
fn explode_for_sort(
    index: &Arc<IndexSpec>,
    bounds: &IndexBounds,
    sort: &SortSpec,
) -> Option<Vec<IndexScan>> {
    let mut combinations: Vec<Vec<&Bson>> = vec![Vec::new()];
    for (position, (_, _, field)) in bounds.fields.iter().enumerate() {
        let points = field.point_values()?;
        combinations = combinations
            .iter()
            .flat_map(|prefix| {
                points.iter().map(move |point| {
                    let mut combination = prefix.clone();
                    combination.push(*point);
                    combination
                })
            })
            .collect();
        if combinations.len() > MAX_EXPLODED_SCANS {
            return None;
        }
        let pinned = |values: &[&Bson]| {
            let mut pinned = bounds.clone();
            for ((_, _, field), value) in pinned.fields.iter_mut().zip(values) {
                *field = bounds::IntervalList::points([(*value).clone()]);
            }
            pinned
        };
        let first = pinned(&combinations[0]);
        if let Some(reverse) = sort_order(index, &first, false, sort) {
            if combinations.len() < 2 || position + 1 == bounds.fields.len() {
                return None;
            }
            return Some(
                combinations
                    .iter()
                    .map(|values| IndexScan::new(index, pinned(values), reverse, false))
                    .collect(),
            );
        }
    }
    None
}

/// A union of index scans for the first top-level `$or`, when every branch has one.
fn or_plan(
    meta: &CollectionMeta,
    conjuncts: &[&Expr],
    sort: Option<&SortSpec>,
    collation: &CollationChoice,
) -> Option<QueryPlan> {
    let branches = conjuncts.iter().find_map(|expr| match expr {
        Expr::Or(branches) => Some(branches),
        _ => None,
    })?;
    let mut scans = Vec::with_capacity(branches.len());
    for branch in branches {
        let branch_conjuncts = tideway_query::filter::conjuncts_of(branch);
        let mut best: Option<(usize, IndexScan)> = None;
        for index in meta.indexes.iter().filter(|index| usable(index, collation)) {
            let multikey = meta.is_multikey(&index.name);
            let bounds = index_bounds(index, &branch_conjuncts, multikey);
            if sparse_misses_matches(index, &bounds) {
                continue;
            }
            let score = selectivity(&bounds);
            if score > 0
                && best
                    .as_ref()
                    .is_none_or(|(best_score, _)| score > *best_score)
            {
                best = Some((score, IndexScan::new(index, bounds, false, multikey)));
            }
        }
        let (_, scan) = best?;
        if !scan.bounds.is_empty() {
            scans.push(scan);
        }
    }
    let provides_sort = sort.is_none();
    Some(QueryPlan::new(
        if scans.is_empty() {
            Access::Eof
        } else {
            Access::Or(scans)
        },
        provides_sort,
    ))
}

/// How narrow bounds are, for choosing a branch's index without a trial: leading fields
/// pinned to values count most, then a bounded field after them; 0 when the leading field is
/// unbounded.
fn selectivity(bounds: &IndexBounds) -> usize {
    let mut score = 0;
    for (_, _, field) in &bounds.fields {
        if field.point_values().is_some() {
            score += 4;
        } else {
            if !field.is_full() {
                score += 2;
            }
            break;
        }
    }
    score
}

/// Results a trial aims for: the query's `skip + limit` when smaller than [`TRIAL_RESULTS`].
fn trial_target(query: &Query) -> u64 {
    query
        .wanted
        .map_or(TRIAL_RESULTS, |wanted| wanted.clamp(1, TRIAL_RESULTS))
}

/// Records a candidate may produce per trial round.
fn trial_page(target: u64) -> usize {
    TRIAL_PAGE.min(usize::try_from(target).unwrap_or(TRIAL_PAGE))
}

/// Runs every candidate in rounds until one reaches the end, one has produced enough results,
/// or all have done their share of work; then scores each as mongod does: results per unit of
/// work, a plan that must sort counting its results only if it finished, plus a bonus for
/// finishing and small tie-breakers for providing the sort.
async fn run_trial(
    storage: &dyn Storage,
    trials: &mut [Candidate],
    query: &Query,
) -> CommandResult<()> {
    let target = trial_target(query);
    let page = trial_page(target);
    loop {
        let mut done = true;
        for trial in trials.iter_mut() {
            if trial.stream.is_exhausted() || trial.stream.stats().works() >= TRIAL_MAX_WORKS {
                continue;
            }
            trial.stream.read_page(storage, page).await?;
            done = false;
        }
        let finished = trials.iter().any(|trial| {
            trial.stream.is_exhausted()
                || (trial.plan.provides_sort && trial.stream.buffered() as u64 >= target)
        });
        if done || finished {
            break;
        }
    }
    for trial in trials.iter_mut() {
        let exhausted = trial.stream.is_exhausted();
        let results = if trial.plan.provides_sort || exhausted {
            trial.stream.buffered() as f64
        } else {
            0.0
        };
        let works = trial.stream.stats().works().max(1) as f64;
        let eof_bonus = if exhausted { 1.0 } else { 0.0 };
        let sort_bonus = if trial.plan.provides_sort { 1e-4 } else { 0.0 };
        trial.score = 1.0 + results / works + eof_bonus + sort_bonus;
    }
    Ok(())
}

/// The index scan that answers `distinct(key, filter)` by jumping from one key value to the next
/// (mongod's `DISTINCT_SCAN`): an unhinted query, an index usable by itself whose first field is
/// `key`, not sparse and not multikey (each document then has one value there, the one its
/// key holds), and a filter that is empty or exactly answered by bounds on `key` alone.
pub fn distinct_scan(
    meta: &CollectionMeta,
    filter: &Filter,
    key: &str,
    hint: &Hint,
) -> Option<IndexScan> {
    if *hint != Hint::None {
        return None;
    }
    let covered = filter.matches_everything() || bounds::covers(filter, &[key.to_string()]);
    if !covered {
        return None;
    }
    let conjuncts = filter.top_level_conjuncts();
    meta.indexes
        .iter()
        .filter(|index| {
            // The values come from the keys: only a simple-collation index holds them as they
            // are.
            usable(index, &None)
                && filter.collation().is_none()
                && index.is_ordered()
                && !index.sparse
                && !meta.is_multikey(&index.name)
        })
        .find(|index| index.key.first().is_some_and(|(field, _)| field == key))
        .map(|index| IndexScan::new(index, index_bounds(index, &conjuncts, false), false, false))
}

/// Resolves a command's `hint` field; `Err` carries mongod's messages (see
/// `commands::args::check_hint` for validation of the value).
pub fn resolve_hint(meta: Option<&CollectionMeta>, hint: Option<&Bson>) -> Hint {
    match hint {
        Some(Bson::String(name)) => Hint::Index(name.clone()),
        Some(Bson::Document(key)) if key.is_empty() => Hint::None,
        Some(Bson::Document(key)) => match key.iter().next() {
            Some((field, value)) if field == "$natural" => Hint::natural(value),
            _ => meta
                .and_then(|meta| meta.index_with_key(key))
                .map_or(Hint::None, |index| Hint::Index(index.name.clone())),
        },
        _ => Hint::None,
    }
}

impl CollectionView {
    /// Plans `query` (see [`plan`]) and returns the stream that reads it.
    pub async fn plan(
        &self,
        storage: &dyn Storage,
        cache: &PlanCache,
        query: &Query,
    ) -> CommandResult<Planned> {
        plan(storage, cache, self, query).await
    }
}

/// How a read went: its plan summary and what it examined (for `currentOp` and the profiler).
#[derive(Clone, Debug, Default)]
pub struct ReadReport {
    pub plan_summary: String,
    pub stats: ScanStats,
}

/// Every visible record matching `query`, in the order its plan reads them.
pub async fn find_all(
    storage: &dyn Storage,
    cache: &PlanCache,
    view: &CollectionView,
    query: &Query,
) -> CommandResult<(Vec<Record>, ReadReport)> {
    let planned = view.plan(storage, cache, query).await?;
    let plan_summary = planned.plan.summary();
    let mut stream = planned.stream;
    let mut records = Vec::new();
    while let Some(record) = stream.next(storage).await? {
        records.push(record);
    }
    let stats = stream.stats();
    Ok((
        records,
        ReadReport {
            plan_summary,
            stats,
        },
    ))
}

/// The first visible record matching `query` in its sort order (natural order without one),
/// reading only as far as needed when the plan already yields that order, and otherwise keeping
/// only the best record seen (ties: the first read).
pub async fn first_match(
    storage: &dyn Storage,
    cache: &PlanCache,
    view: &CollectionView,
    query: &Query,
) -> CommandResult<(Option<Record>, ReadReport)> {
    let planned = view.plan(storage, cache, query).await?;
    let plan_summary = planned.plan.summary();
    let mut stream = planned.stream;
    let report = |stream: &DocStream| ReadReport {
        plan_summary: plan_summary.clone(),
        stats: stream.stats(),
    };
    let Some(sort) = query.sort.as_ref().filter(|_| !planned.plan.provides_sort) else {
        let first = stream.next(storage).await?;
        return Ok((first, report(&stream)));
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
    Ok((best.map(|(_, record)| record), report(&stream)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Document};
    use tideway_query::keycodec::Direction;
    use tideway_storage::Namespace;

    fn index(name: &str, key: &[(&str, Direction)]) -> IndexSpec {
        let pattern: Document = key
            .iter()
            .map(|(field, direction)| {
                (
                    field.to_string(),
                    Bson::Int32(if *direction == Direction::Ascending {
                        1
                    } else {
                        -1
                    }),
                )
            })
            .collect();
        IndexSpec {
            name: name.into(),
            key: key
                .iter()
                .map(|(field, direction)| (field.to_string(), *direction))
                .collect(),
            unique: false,
            sparse: false,
            partial_filter: None,
            spec: doc! {"v": 2, "key": pattern, "name": name},
            catalog_only: false,
            collation: None,
        }
    }

    fn meta(indexes: Vec<IndexSpec>) -> CollectionMeta {
        let mut all = vec![index("_id_", &[("_id", Direction::Ascending)])];
        all.extend(indexes);
        CollectionMeta {
            ns: Namespace::new("db", "c"),
            uuid: [0; 16],
            options: Document::new(),
            indexes: all.into_iter().map(Arc::new).collect(),
            multikey_indexes: Vec::new(),
        }
    }

    fn plans(meta: &CollectionMeta, filter: Document, sort: Option<Document>) -> Vec<String> {
        let filter = Filter::parse(&filter).unwrap();
        let sort = sort.map(|sort| SortSpec::parse(&sort).unwrap());
        candidates(meta, &filter.top_level_conjuncts(), sort.as_ref(), &None)
            .iter()
            .map(|plan| {
                format!(
                    "{}{}",
                    plan.summary(),
                    if plan.provides_sort { " sorted" } else { "" }
                )
            })
            .collect()
    }

    #[test]
    fn ranges_and_sorts_choose_indexes() {
        let meta = meta(vec![
            index("at_1", &[("at", Direction::Ascending)]),
            index(
                "user_1_at_1",
                &[("user", Direction::Ascending), ("at", Direction::Ascending)],
            ),
        ]);
        assert_eq!(
            plans(&meta, doc! {"at": {"$gte": 1, "$lt": 5}}, None),
            ["IXSCAN { at: 1 } sorted"]
        );
        assert_eq!(
            plans(&meta, doc! {}, Some(doc! {"at": -1})),
            ["IXSCAN { at: 1 } sorted"]
        );
        assert_eq!(
            plans(&meta, doc! {"user": 7}, Some(doc! {"at": -1})),
            [
                "IXSCAN { at: 1 } sorted",
                "IXSCAN { user: 1, at: 1 } sorted"
            ]
        );
        assert_eq!(
            plans(&meta, doc! {"user": {"$in": [1, 2]}}, Some(doc! {"at": 1})),
            [
                "IXSCAN { at: 1 } sorted",
                "IXSCAN { user: 1, at: 1 }, IXSCAN { user: 1, at: 1 } sorted",
                "IXSCAN { user: 1, at: 1 }"
            ]
        );
        assert_eq!(
            plans(&meta, doc! {"$or": [{"user": 1}, {"at": 2}]}, None),
            ["IXSCAN { user: 1, at: 1 }, IXSCAN { at: 1 } sorted"]
        );
        assert_eq!(
            plans(&meta, doc! {"$or": [{"user": 1}, {"b": 2}]}, None),
            Vec::<String>::new()
        );
        assert_eq!(
            plans(&meta, doc! {"_id": {"$gt": 3}}, Some(doc! {"_id": -1})),
            ["IXSCAN { _id: 1 } sorted"]
        );
        assert_eq!(
            plans(&meta, doc! {"at": {"$gt": 5, "$lt": 1}}, None),
            ["EOF sorted"]
        );
    }

    #[test]
    fn multikey_indexes_neither_intersect_nor_sort() {
        let mut meta = meta(vec![index("at_1", &[("at", Direction::Ascending)])]);
        meta.multikey_indexes.push("at_1".into());
        assert_eq!(
            plans(&meta, doc! {}, Some(doc! {"at": 1})),
            Vec::<String>::new()
        );
        let filter = Filter::parse(&doc! {"at": {"$gt": 5, "$lt": 1}}).unwrap();
        let bounds = index_bounds(&meta.indexes[1], &filter.top_level_conjuncts(), true);
        assert!(!bounds.is_empty());
    }
}
