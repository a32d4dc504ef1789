//! The TTL reaper: deletes expired documents in the background. It finds candidates only through
//! ordered expiry structures — the last-write and own-expiry tables storage keeps, and the indexes
//! behind MongoDB TTL indexes — so a pass costs in proportion to what has expired, never to a
//! collection's size. Every candidate is re-checked with the rules in `ttl` (handed to storage as
//! a predicate) and deleted only at the revision it was judged at, so a document rewritten in the
//! meantime survives ([`Storage::reap`]).
//!
//! Deletion is physical cleanup only: expired documents are already invisible to every command
//! (see `exec::Visibility`). Invariants: passes never overlap; deletes are background writes in
//! bounded batches, yielding between batches so foreground requests keep priority (storage does
//! the heavy reading at low CPU priority); `run_once(now)` is the whole pass, for tests and
//! `runTtlPass`; the monitor's `run_leased(now)` covers the collections whose reaper lease this
//! server holds when several servers share one database.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bson::{Bson, Document};

use tideway_base::clock::Clock;
use tideway_base::error::CommandResult;

use crate::bounds::{single_field_ranges, Endpoint, Interval};
use crate::executor::PolicyGates;
use crate::ttl::{FieldTtl, TtlPolicies};
use tideway_query::keycodec;
use tideway_storage::{
    CollectionMeta, ExpiryOrder, Namespace, ReapRequest, ReapSource, Record, ScanRequest,
    ScanSource, Storage, StorageResult,
};

/// Candidates read, and deletes sent to the writer, per batch.
const BATCH_SIZE: usize = 1000;

/// mongod's `metrics.ttl` counters.
#[derive(Debug, Default)]
pub struct ReaperMetrics {
    pub passes: AtomicU64,
    pub sub_passes: AtomicU64,
    pub deleted_documents: AtomicU64,
}

/// The reaper's shared state: metrics, the last pass duration per collection, and the lock that
/// keeps passes from overlapping.
#[derive(Debug, Default)]
pub struct Reaper {
    pub metrics: ReaperMetrics,
    last_pass_ms: Mutex<HashMap<Namespace, u64>>,
    pass_lock: tokio::sync::Mutex<()>,
    /// Woken when `ttlMonitorSleepSecs` or `ttlMonitorEnabled` change.
    pub wake: tokio::sync::Notify,
}

/// Every source of expiry candidates the policies define at `now_ms`: an ordered structure and the
/// range of it that has expired (documents following the collection default last written at or
/// before the cutoff; documents with their own ttl expiring at or before now; for each MongoDB TTL
/// index whose index exists, entries with a Date at or before its cutoff).
fn candidate_sources(
    policies: &TtlPolicies,
    meta: &CollectionMeta,
    now_ms: i64,
) -> Vec<ReapSource> {
    let mut sources = Vec::new();
    if let Some(cutoff_ms) = policies.default_cutoff_ms(now_ms) {
        sources.push(ReapSource::Expiry {
            order: ExpiryOrder::LastWrite,
            range: (Bound::Unbounded, Bound::Included(cutoff_ms)),
        });
    }
    if policies.cosmos.is_some() {
        sources.push(ReapSource::Expiry {
            order: ExpiryOrder::OwnExpiry,
            range: (Bound::Unbounded, Bound::Included(now_ms)),
        });
    }
    for ttl in &policies.fields {
        let Some(ScanRequest {
            source: ScanSource::Index { name, ranges },
            ..
        }) = date_scan(meta, ttl, expired_dates(ttl, now_ms), BATCH_SIZE)
        else {
            continue;
        };
        // One interval of one field: one byte range.
        if let Some(range) = ranges.into_iter().next() {
            sources.push(ReapSource::Index { name, range });
        }
    }
    sources
}

/// The Dates a MongoDB TTL index has expired at `now_ms`.
fn expired_dates(ttl: &FieldTtl, now_ms: i64) -> Interval {
    Interval::new(
        Endpoint::new(Bson::DateTime(bson::DateTime::MIN), true),
        Endpoint::new(
            Bson::DateTime(bson::DateTime::from_millis(ttl.date_cutoff_ms(now_ms))),
            true,
        ),
    )
}

/// A scan of the index behind a MongoDB TTL index over a range of Date values, in ascending date
/// order; `None` if the index is gone.
fn date_scan(
    meta: &CollectionMeta,
    ttl: &FieldTtl,
    dates: Interval,
    limit: usize,
) -> Option<ScanRequest> {
    let index = meta.index_named(&ttl.index_name)?;
    let direction = index
        .key
        .first()
        .map_or(keycodec::Direction::Ascending, |(_, d)| *d);
    Some(ScanRequest {
        source: ScanSource::Index {
            name: index.name.clone(),
            ranges: single_field_ranges(dates, direction),
        },
        resume_after: None,
        reverse: direction == keycodec::Direction::Descending,
        limit,
        hide: None,
        key_filter: None,
        covered: false,
    })
}

/// What a collection holds that has expired but is not deleted yet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Backlog {
    /// Every document stored, expired or not (same snapshot as `pending`).
    pub documents: u64,
    pub pending: u64,
    /// The earliest expiry among them: how far the reaper lags.
    pub oldest_expire_at_ms: Option<i64>,
}

impl Reaper {
    /// One full pass over every collection with a TTL policy; the number of documents deleted.
    pub async fn run_once(&self, storage: &dyn Storage, now_ms: i64) -> StorageResult<u64> {
        let _exclusive = self.pass_lock.lock().await;
        let collections = collections_with_policies(storage).await?;
        self.pass(storage, collections, now_ms).await
    }

    /// The TTL monitor's pass: [`Reaper::run_once`] over the collections whose reaper lease
    /// this server holds (`Storage::reaper_leases`: every collection, unless several servers
    /// share the data).
    pub async fn run_leased(&self, storage: &dyn Storage, now_ms: i64) -> StorageResult<u64> {
        let _exclusive = self.pass_lock.lock().await;
        let mut collections = collections_with_policies(storage).await?;
        let namespaces = collections.iter().map(|meta| meta.ns.clone()).collect();
        let leased: std::collections::HashSet<Namespace> = storage
            .reaper_leases(namespaces)
            .await?
            .into_iter()
            .collect();
        collections.retain(|meta| leased.contains(&meta.ns));
        self.pass(storage, collections, now_ms).await
    }

    async fn pass(
        &self,
        storage: &dyn Storage,
        collections: Vec<CollectionMeta>,
        now_ms: i64,
    ) -> StorageResult<u64> {
        self.metrics.passes.fetch_add(1, Ordering::Relaxed);
        let mut deleted = 0;
        for meta in collections {
            let policies = Arc::new(TtlPolicies::from_meta(&meta));
            let started = Instant::now();
            deleted += self
                .reap_collection(storage, &meta, &policies, now_ms)
                .await?;
            let elapsed_ms = started.elapsed().as_millis() as u64;
            self.last_pass_ms
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(meta.ns.clone(), elapsed_ms);
        }
        Ok(deleted)
    }

    async fn reap_collection(
        &self,
        storage: &dyn Storage,
        meta: &CollectionMeta,
        policies: &Arc<TtlPolicies>,
        now_ms: i64,
    ) -> StorageResult<u64> {
        let Some(expired) = policies.expired_predicate(now_ms) else {
            return Ok(0);
        };
        let expire_at = policies.expiry_instant();
        let mut deleted = 0;
        for source in candidate_sources(policies, meta, now_ms) {
            let mut resume_after = None;
            loop {
                let request = ReapRequest {
                    source: source.clone(),
                    resume_after,
                    limit: BATCH_SIZE,
                    expired: expired.clone(),
                    expire_at: Some(expire_at.clone()),
                };
                let page = storage.reap(&meta.ns, request).await?;
                if page.deleted > 0 {
                    self.metrics.sub_passes.fetch_add(1, Ordering::Relaxed);
                    self.metrics
                        .deleted_documents
                        .fetch_add(page.deleted, Ordering::Relaxed);
                    deleted += page.deleted;
                }
                match page.resume {
                    Some(resume) => resume_after = Some(resume),
                    None => break,
                }
                tokio::task::yield_now().await;
            }
        }
        Ok(deleted)
    }

    /// Deletes every document of `ns` that its current policies have expired at `now_ms`, with
    /// the same metrics as a pass.
    pub(crate) async fn reap_namespace(
        &self,
        storage: &dyn Storage,
        ns: &Namespace,
        now_ms: i64,
    ) -> StorageResult<u64> {
        let Some(meta) = storage.collection(ns).await? else {
            return Ok(0);
        };
        let policies = Arc::new(TtlPolicies::from_meta(&meta));
        self.reap_collection(storage, &meta, &policies, now_ms)
            .await
    }

    /// Milliseconds the last pass spent on `ns`, if it has been reaped.
    pub(crate) fn last_pass_ms(&self, ns: &Namespace) -> Option<u64> {
        self.last_pass_ms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(ns)
            .copied()
    }
}

/// Runs `change`, a command that may change the TTL policies of `ns` (`ttl_involved`), so that
/// expiry stays final: under the collection's exclusive policy gate, at one instant `now`, it
/// deletes what the current policies have expired, applies the change, and deletes what the new
/// policies have expired, all before the command replies. A document the server has called
/// expired can then never reappear (a raised or removed policy applies only to documents still
/// alive), and a change that expires documents leaves visibility and
/// `metrics.ttl.deletedDocuments` in agreement when it replies. Without `ttl_involved`, `change`
/// just runs.
pub async fn change_policies<T>(
    reaper: &Reaper,
    gates: &PolicyGates,
    storage: &dyn Storage,
    clock: &dyn Clock,
    ns: &Namespace,
    ttl_involved: bool,
    change: impl std::future::Future<Output = CommandResult<T>>,
) -> CommandResult<T> {
    if !ttl_involved {
        return change.await;
    }
    let _exclusive = gates.exclusive(ns).await;
    let now_ms = clock.now_ms();
    reaper.reap_namespace(storage, ns, now_ms).await?;
    let changed = change.await?;
    reaper.reap_namespace(storage, ns, now_ms).await?;
    Ok(changed)
}

/// Every collection that has at least one TTL policy.
pub(crate) async fn collections_with_policies(
    storage: &dyn Storage,
) -> StorageResult<Vec<CollectionMeta>> {
    let mut found = Vec::new();
    for db in storage.list_database_names().await? {
        for meta in storage.list_collections(&db).await? {
            if !TtlPolicies::from_meta(&meta).is_empty() {
                found.push(meta);
            }
        }
    }
    Ok(found)
}

/// The expired documents of a collection not yet deleted, counted from the keys of the expiry
/// structures' expired ranges (each document once, however many entries it has there), with the
/// collection's document count from the same snapshot; and the earliest expiry among them, from
/// the first entry of each range.
pub async fn backlog(
    storage: &dyn Storage,
    meta: &CollectionMeta,
    policies: &TtlPolicies,
    now_ms: i64,
) -> StorageResult<Backlog> {
    let sources = candidate_sources(policies, meta, now_ms);
    let count = storage.count_entries(&meta.ns, sources.clone()).await?;
    // The first entry of each expired range is its oldest expiry (for a TTL index, in date order
    // whatever its direction).
    let mut firsts = Vec::new();
    for source in &sources {
        if let ReapSource::Expiry { order, range } = source {
            let page = storage
                .expiry_scan(&meta.ns, *order, *range, None, 1)
                .await?;
            firsts.extend(page.records);
        }
    }
    for ttl in &policies.fields {
        if let Some(request) = date_scan(meta, ttl, expired_dates(ttl, now_ms), 1) {
            firsts.extend(storage.scan(&meta.ns, request).await?.records);
        }
    }
    let oldest_expire_at_ms = firsts
        .iter()
        .filter_map(|record| policies.expire_at_ms(record))
        .min();
    Ok(Backlog {
        documents: count.documents,
        pending: count.in_sources,
        oldest_expire_at_ms,
    })
}

/// The earliest expiry still ahead of `now_ms`, looking at the first live entry of each structure.
pub(crate) async fn next_expiry_ms(
    storage: &dyn Storage,
    meta: &CollectionMeta,
    policies: &TtlPolicies,
    now_ms: i64,
) -> StorageResult<Option<i64>> {
    let mut next: Option<i64> = None;
    let mut consider = |records: &[Record]| {
        for record in records {
            if let Some(at) = policies.expire_at_ms(record).filter(|at| *at > now_ms) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    };
    if let Some(cutoff_ms) = policies.default_cutoff_ms(now_ms) {
        let range = (Bound::Excluded(cutoff_ms), Bound::Unbounded);
        consider(
            &storage
                .expiry_scan(&meta.ns, ExpiryOrder::LastWrite, range, None, 1)
                .await?
                .records,
        );
    }
    if policies.cosmos.is_some() {
        let range = (Bound::Excluded(now_ms), Bound::Unbounded);
        consider(
            &storage
                .expiry_scan(&meta.ns, ExpiryOrder::OwnExpiry, range, None, 1)
                .await?
                .records,
        );
    }
    for ttl in &policies.fields {
        let dates = Interval::new(
            Endpoint::new(
                Bson::DateTime(bson::DateTime::from_millis(ttl.date_cutoff_ms(now_ms))),
                false,
            ),
            Endpoint::new(Bson::DateTime(bson::DateTime::MAX), true),
        );
        if let Some(request) = date_scan(meta, ttl, dates, 1) {
            consider(&storage.scan(&meta.ns, request).await?.records);
        }
    }
    Ok(next)
}

/// `serverStatus().ttl`: per collection with a policy, its backlog, lag, last pass and next expiry.
pub async fn status(
    reaper: &Reaper,
    storage: &dyn Storage,
    now_ms: i64,
) -> StorageResult<Document> {
    let mut out = Document::new();
    for meta in collections_with_policies(storage).await? {
        let policies = TtlPolicies::from_meta(&meta);
        let pending = backlog(storage, &meta, &policies, now_ms).await?;
        let next = next_expiry_ms(storage, &meta, &policies, now_ms).await?;
        out.insert(
            meta.ns.to_string(),
            bson::doc! {
                "expiredPending": pending.pending as i64,
                "oldestExpiredAgeMillis": pending.oldest_expire_at_ms.map_or(0, |at| now_ms - at),
                "lastPassMillis": reaper.last_pass_ms(&meta.ns).map_or(Bson::Null, |ms| Bson::Int64(ms as i64)),
                "nextExpiryAt": next.map_or(Bson::Null, |at| Bson::DateTime(bson::DateTime::from_millis(at))),
            },
        );
    }
    Ok(out)
}
