//! TTL reaping on PostgreSQL (`Storage::reap`): one statement reads the next entries of the
//! source with their documents, the caller's rule judges them, and one statement deletes the
//! expired documents that are still at the revision judged, with every index entry they had.
//! While a page's delete runs, the next page is read on another connection ([`ReadAhead`]), so
//! a pass costs about one statement's time per page, not two.
//!
//! Invariant: the delete matches `(id_key, rev)`, so a document rewritten after it was judged
//! (or after a read ahead read it) survives (PostgreSQL re-checks the condition on the newest
//! row version); its entries are deleted only for the documents that delete returned, in the
//! same statement, so a page is atomic. The delete checks the collection's catalog version
//! under a key-share lock first (`catalog::catalog_guard`), so it never leaves the entries of an
//! index another node added behind. A page read ahead is used only by the call that asks
//! for exactly that page (same collection and request, whose predicates compare by identity:
//! the same pass); any failure drops it. Costs: two statements per page whatever the
//! collection's size.

use std::sync::{Arc, Mutex};

use crate::catalog::catalog_guard;
use crate::collection::Collection;
use crate::conn::{Conn, Failure};
use crate::entries::EntryRows;
use crate::read::{reap_candidates, Visited};
use crate::Database;
use tideway_storage::{ReapPage, ReapRequest, StorageResult};

type Candidates = StorageResult<Option<Vec<Visited>>>;

/// The next page of a reap, read while the page before it is deleted: what `reap` with
/// `request` on collection `coll_id` reads.
pub(crate) struct ReadAhead {
    coll_id: i64,
    request: ReapRequest,
    read: tokio::task::JoinHandle<Candidates>,
}

/// The engine's one read-ahead slot: a pass reaps one source at a time.
#[derive(Default)]
pub(crate) struct ReadAheadSlot(Mutex<Option<ReadAhead>>);

impl ReadAheadSlot {
    /// Puts `next` in the slot, stopping the read it replaces.
    fn put(&self, next: Option<ReadAhead>) {
        let replaced = std::mem::replace(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            next,
        );
        if let Some(replaced) = replaced {
            replaced.read.abort();
        }
    }

    /// The read ahead of exactly `request` (its predicates compare by identity, so another
    /// pass never takes it), if one was started.
    fn take(&self, coll_id: i64, request: &ReapRequest) -> Option<ReadAhead> {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot
            .as_ref()
            .is_some_and(|ahead| ahead.coll_id == coll_id && ahead.request == *request)
        {
            slot.take()
        } else {
            None
        }
    }
}

impl Database {
    /// Reaps the page `request` asks for; `None` when the collection's catalog changed on
    /// another node since `collection` was read (nothing was deleted: read it anew and retry).
    pub(crate) async fn reap(
        self: &Arc<Self>,
        collection: &Arc<Collection>,
        request: &ReapRequest,
    ) -> StorageResult<Option<ReapPage>> {
        let page = self.reap_page(collection, request).await;
        if !matches!(page, Ok(Some(_))) {
            self.read_ahead.put(None);
        }
        page
    }

    async fn reap_page(
        self: &Arc<Self>,
        collection: &Arc<Collection>,
        request: &ReapRequest,
    ) -> StorageResult<Option<ReapPage>> {
        let limit = request.limit.max(1);
        // A read ahead that failed (the database went away meanwhile) is read again.
        let read_ahead = match self.read_ahead.take(collection.id, request) {
            Some(ahead) => ahead.read.await.ok().and_then(Result::ok),
            None => None,
        };
        let candidates = match read_ahead {
            Some(candidates) => candidates,
            None => read_page(self, collection, request).await?,
        };
        let Some(candidates) = candidates else {
            return Ok(Some(ReapPage {
                deleted: 0,
                resume: None,
            }));
        };
        let resume = (candidates.len() >= limit)
            .then(|| candidates.last().map(|last| last.position.clone()))
            .flatten();
        self.read_ahead.put(
            resume
                .as_ref()
                .map(|resume| self.read_next(collection, request, resume)),
        );
        let mut judged: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        let mut id_keys: Vec<&[u8]> = Vec::new();
        let mut revs: Vec<i64> = Vec::new();
        let mut entries = EntryRows::default();
        for candidate in &candidates {
            let Some(record) = &candidate.record else {
                continue;
            };
            // A multikey index lists a document once per key: it is judged once.
            if !judged.insert(candidate.id_key.as_slice()) || !request.expired.holds(&record.raw()?)
            {
                continue;
            }
            if !collection.indexes.is_empty() {
                let document = record.document()?;
                for (index, keys) in collection
                    .indexes
                    .iter()
                    .zip(collection.keys_of(&document)?)
                {
                    entries.add(index, &candidate.id_key, &keys, 0);
                }
            }
            id_keys.push(&candidate.id_key);
            revs.push(record.rev as i64);
        }
        if id_keys.is_empty() {
            return Ok(Some(ReapPage { deleted: 0, resume }));
        }
        let ((index_ids, keys, entry_ids, _), (unique_ids, unique_keys, owners, _)) =
            entries.columns();
        // Rows are matched pairwise through each table's primary key (see `EntryRows::delete`);
        // the catalog guard runs first (an init plan of `gone`), so the entries deleted are
        // those of the collection's current indexes.
        static DELETE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let sql = DELETE.get_or_init(|| {
            format!(
                "WITH guard AS ({}),
                 gone AS (
                    DELETE FROM tideway.documents d
                    USING unnest($2::bytea[], $3::bigint[]) AS judged(id_key, rev)
                    WHERE d.coll_id = $1 AND d.id_key = judged.id_key AND d.rev = judged.rev
                      AND (SELECT stale FROM guard) = 0
                    RETURNING d.id_key),
                 gone_entries AS (
                    DELETE FROM tideway.index_entries e
                    USING unnest($4::bigint[], $5::bytea[], $6::bytea[]) AS r(index_id, entry, id_key)
                    WHERE e.index_id = r.index_id AND e.entry = r.entry
                      AND r.id_key IN (SELECT id_key FROM gone)),
                 gone_unique AS (
                    DELETE FROM tideway.unique_entries e
                    USING unnest($7::bigint[], $8::bytea[], $9::bytea[]) AS r(index_id, key, id_key)
                    WHERE e.index_id = r.index_id AND e.key = r.key AND e.id_key = r.id_key
                      AND r.id_key IN (SELECT id_key FROM gone))
                 SELECT count(*) FROM gone",
                catalog_guard(1, 10)
            )
        });
        let conn = Conn::get(self).await?;
        let row = match conn
            .query_opt(
                sql,
                &[
                    &collection.id,
                    &id_keys,
                    &revs,
                    index_ids,
                    keys,
                    entry_ids,
                    unique_ids,
                    unique_keys,
                    owners,
                    &collection.version,
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(Failure::StaleCatalog) => return Ok(None),
            Err(failure) => return Err(failure.into_storage()),
        };
        let deleted = row.map_or(0, |row| row.get::<_, i64>(0)).max(0) as u64;
        Ok(Some(ReapPage { deleted, resume }))
    }

    /// Starts reading the page `request` asks for after `resume`, on its own connection.
    fn read_next(
        self: &Arc<Self>,
        collection: &Arc<Collection>,
        request: &ReapRequest,
        resume: &[u8],
    ) -> ReadAhead {
        let next = ReapRequest {
            resume_after: Some(resume.to_vec()),
            ..request.clone()
        };
        let (database, collection) = (Arc::clone(self), Arc::clone(collection));
        let coll_id = collection.id;
        let read = {
            let next = next.clone();
            tokio::spawn(async move { read_page(&database, &collection, &next).await })
        };
        ReadAhead {
            coll_id,
            request: next,
            read,
        }
    }
}

/// The candidates of the page `request` asks for, on a connection of its own.
async fn read_page(
    database: &Database,
    collection: &Collection,
    request: &ReapRequest,
) -> Candidates {
    let conn = Conn::get(database).await?;
    reap_candidates(
        &conn,
        collection,
        &request.source,
        request.resume_after.as_deref(),
        request.limit.max(1),
    )
    .await
}
