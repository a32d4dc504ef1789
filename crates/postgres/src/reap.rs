//! TTL reaping on PostgreSQL (`Storage::reap`): one statement reads the next entries of the
//! source with their documents, the caller's rule judges them, and one statement deletes the
//! expired documents that are still at the revision judged, with every index entry they had.
//!
//! Invariant: the delete matches `(id_key, rev)`, so a document rewritten after it was judged
//! survives (PostgreSQL re-checks the condition on the newest row version); its entries are
//! deleted only for the documents that delete returned, in the same statement, so a page is
//! atomic. Costs: two statements per page whatever the collection's size.

use crate::collection::Collection;
use crate::conn::{Conn, Failure};
use crate::entries::{distinct, EntryRows};
use crate::read::reap_candidates;
use crate::Database;
use tideway_storage::{ReapPage, ReapRequest, StorageResult};

impl Database {
    pub(crate) async fn reap(
        &self,
        collection: &Collection,
        request: &ReapRequest,
    ) -> StorageResult<ReapPage> {
        let conn = Conn::get(self).await?;
        let limit = request.limit.max(1);
        let Some(candidates) = reap_candidates(
            &conn,
            collection,
            &request.source,
            request.resume_after.as_deref(),
            limit,
        )
        .await?
        else {
            return Ok(ReapPage {
                deleted: 0,
                resume: None,
            });
        };
        let resume = (candidates.len() >= limit)
            .then(|| candidates.last().map(|last| last.position.clone()))
            .flatten();
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
            let document = record.document()?;
            for (index, keys) in collection
                .indexes
                .iter()
                .zip(collection.keys_of(&document)?)
            {
                entries.add(index, &candidate.id_key, &keys, 0);
            }
            id_keys.push(&candidate.id_key);
            revs.push(record.rev as i64);
        }
        if id_keys.is_empty() {
            return Ok(ReapPage { deleted: 0, resume });
        }
        let ((index_ids, keys, entry_ids, _), (unique_ids, unique_keys, owners, _)) =
            entries.columns();
        let (distinct_ids, distinct_unique_ids) = (distinct(index_ids), distinct(unique_ids));
        // Each table is also bounded by its primary key through `= ANY(..)` (see
        // `EntryRows::delete`): the plan never reads beyond the rows named, whatever the
        // statistics say about a collection that grew since they were taken.
        let row = conn
            .query_opt(
                "WITH gone AS (
                    DELETE FROM tideway.documents d
                    USING unnest($2::bytea[], $3::bigint[]) AS judged(id_key, rev)
                    WHERE d.coll_id = $1 AND d.id_key = judged.id_key AND d.rev = judged.rev
                      AND d.id_key = ANY($2)
                    RETURNING d.id_key),
                 gone_entries AS (
                    DELETE FROM tideway.index_entries e
                    USING unnest($4::bigint[], $5::bytea[], $6::bytea[]) AS r(index_id, entry, id_key)
                    WHERE e.index_id = r.index_id AND e.entry = r.entry
                      AND e.index_id = ANY($10) AND e.entry = ANY($5)
                      AND r.id_key IN (SELECT id_key FROM gone)),
                 gone_unique AS (
                    DELETE FROM tideway.unique_entries e
                    USING unnest($7::bigint[], $8::bytea[], $9::bytea[]) AS r(index_id, key, id_key)
                    WHERE e.index_id = r.index_id AND e.key = r.key AND e.id_key = r.id_key
                      AND e.index_id = ANY($11) AND e.key = ANY($8)
                      AND r.id_key IN (SELECT id_key FROM gone))
                 SELECT count(*) FROM gone",
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
                    &distinct_ids,
                    &distinct_unique_ids,
                ],
            )
            .await
            .map_err(Failure::into_storage)?;
        let deleted = row.map_or(0, |row| row.get::<_, i64>(0)).max(0) as u64;
        Ok(ReapPage { deleted, resume })
    }
}
