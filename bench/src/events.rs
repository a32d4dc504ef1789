//! The `events` collection that the query planner workloads read (`find_id_events`,
//! `range_10`, `newest_5`, `or_2`), and the secondary indexes `insert_indexed` writes through.
//!
//! Document `i` (0..N) is `{_id: i, at: Date(AT_BASE + 10 ms × i), user: i % 1000, k: i,
//! payload}`, all integers int64, so every query's answer is known in advance: a 100 ms range of
//! `at` holds exactly 10 documents, the newest 5 are the last 5 ids, `k` is unique. The indexes
//! `{at: 1}`, `{user: 1, at: 1}` and `{k: 1}` are created after loading, in one `createIndexes`.
//! Pure functions here build documents and queries; loading goes through `dataset.rs`.

use std::time::{Duration, Instant};

use bson::{doc, DateTime, Document};
use mongodb::{Collection, IndexModel};

use crate::dataset;
use crate::rng::SplitMix64;
use crate::workload::{with_payload, OpError};

/// Collection read by the planner workloads.
pub const EVENTS_COLLECTION: &str = "events";
/// `at` of document 0: 2026-01-01T00:00:00Z.
pub const AT_BASE_MS: i64 = 1_767_225_600_000;
/// Milliseconds between the `at` of consecutive documents.
pub const AT_STEP_MS: i64 = 10;
/// Documents in one `range_10` answer (its range is this many steps wide).
pub const RANGE_DOCS: u64 = 10;
/// `newest_5`'s limit.
pub const NEWEST_LIMIT: i64 = 5;
/// Distinct `user` values.
pub const USERS: u64 = 1000;

/// The names servers give the secondary indexes by default, in [`index_keys`] order.
pub const INDEX_NAMES: [&str; 3] = ["at_1", "user_1_at_1", "k_1"];

/// Key patterns of the secondary indexes.
pub fn index_keys() -> [Document; 3] {
    [doc! {"at": 1}, doc! {"user": 1, "at": 1}, doc! {"k": 1}]
}

/// `at` of document `id`.
pub fn at(id: u64) -> DateTime {
    DateTime::from_millis(AT_BASE_MS + AT_STEP_MS * id as i64)
}

/// Document `id` of `events`, about `doc_bytes` of BSON.
pub fn event_document(id: u64, doc_bytes: usize, rng: &mut SplitMix64) -> Document {
    let document = doc! {
        "_id": id as i64,
        "at": at(id),
        "user": (id % USERS) as i64,
        "k": id as i64,
    };
    with_payload(document, doc_bytes, rng)
}

/// The index specifications (one `createIndexes` for all three).
pub fn index_models() -> Vec<IndexModel> {
    index_keys()
        .into_iter()
        .map(|keys| IndexModel::builder().keys(keys).build())
        .collect()
}

/// Fresh values for the indexed fields of an `insert_indexed` document: `at` advancing with
/// the task's insert count (`seq`), a random `user` and a random `k`.
pub fn indexed_fields(seq: u64, rng: &mut SplitMix64) -> Document {
    doc! {
        "at": DateTime::from_millis(AT_BASE_MS + AT_STEP_MS * seq as i64 + rng.below(AT_STEP_MS as u64) as i64),
        "user": rng.below(USERS) as i64,
        "k": rng.next_u64() as i64,
    }
}

/// `{at: {$gte: at(first), $lt: at(first + 10)}}` and how many documents it matches in a
/// collection of `docs`, for `first` chosen so that a full range fits when it can.
pub fn range_filter(first: u64, docs: u64) -> (Document, u64) {
    let filter = doc! {"at": {"$gte": at(first), "$lt": at(first + RANGE_DOCS)}};
    let expected = docs.saturating_sub(first).min(RANGE_DOCS);
    (filter, expected)
}

/// A random `range_10` query over `docs` documents and its expected count.
pub fn range_query(rng: &mut SplitMix64, docs: u64) -> (Document, u64) {
    let starts = docs.saturating_sub(RANGE_DOCS - 1).max(1);
    range_filter(rng.below(starts), docs)
}

/// Two different `k` values in `0..docs` (the same one when there is only one document).
pub fn or_pair(rng: &mut SplitMix64, docs: u64) -> (u64, u64) {
    let docs = docs.max(1);
    let first = rng.below(docs);
    let second = if docs > 1 {
        (first + 1 + rng.below(docs - 1)) % docs
    } else {
        first
    };
    (first, second)
}

/// A random `or_2` query `{$or: [{k: a}, {k: b}]}` and its expected count.
pub fn or_query(rng: &mut SplitMix64, docs: u64) -> (Document, u64) {
    let (first, second) = or_pair(rng, docs);
    let filter = doc! {"$or": [{"k": first as i64}, {"k": second as i64}]};
    (filter, if first == second { 1 } else { 2 })
}

/// Creates the three indexes unless all of them exist; returns how long `createIndexes` took
/// (`None` when they were there already).
pub async fn ensure_indexes(
    collection: &Collection<Document>,
) -> Result<Option<Duration>, OpError> {
    let existing = collection.list_index_names().await.unwrap_or_default();
    if INDEX_NAMES
        .iter()
        .all(|name| existing.iter().any(|have| have == name))
    {
        return Ok(None);
    }
    let started = Instant::now();
    collection.create_indexes(index_models()).await?;
    Ok(Some(started.elapsed()))
}

/// Makes `events` hold documents 0..`docs` with its indexes: reuses it when its count is
/// already `docs` (unless `reload`), otherwise drops it, loads it and then indexes it. Returns
/// whether it loaded.
pub async fn ensure_events(
    collection: &Collection<Document>,
    docs: u64,
    doc_bytes: usize,
    reload: bool,
    seed: u64,
) -> Result<bool, OpError> {
    let loaded = dataset::ensure_loaded(collection, docs, reload, seed, move |id, rng| {
        event_document(id, doc_bytes, rng)
    })
    .await?;
    if let Some(took) = ensure_indexes(collection).await? {
        eprintln!(
            "  created indexes {} on {docs} docs in {:.2} s",
            INDEX_NAMES.join(", "),
            took.as_secs_f64()
        );
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_documents_have_the_documented_shape_and_size() {
        let mut rng = SplitMix64::new(1, 0);
        let document = event_document(1234, 200, &mut rng);
        assert_eq!(document.get_i64("_id").unwrap(), 1234);
        assert_eq!(document.get_i64("k").unwrap(), 1234);
        assert_eq!(document.get_i64("user").unwrap(), 234);
        assert_eq!(
            document.get_datetime("at").unwrap().timestamp_millis(),
            AT_BASE_MS + 12_340
        );
        assert_eq!(bson::to_vec(&document).unwrap().len(), 200);
        let keys: Vec<Document> = index_models().into_iter().map(|m| m.keys).collect();
        assert_eq!(
            keys,
            vec![doc! {"at": 1}, doc! {"user": 1, "at": 1}, doc! {"k": 1}]
        );
    }

    #[test]
    fn a_range_covers_exactly_ten_documents() {
        let (filter, expected) = range_filter(5, 1000);
        assert_eq!(expected, 10);
        let bounds = filter.get_document("at").unwrap();
        let low = bounds.get_datetime("$gte").unwrap().timestamp_millis();
        let high = bounds.get_datetime("$lt").unwrap().timestamp_millis();
        let inside: Vec<u64> = (0..1000)
            .filter(|&id| {
                let t = at(id).timestamp_millis();
                low <= t && t < high
            })
            .collect();
        assert_eq!(inside, (5..15).collect::<Vec<_>>());
        // Near the end, or in a tiny collection, fewer are expected.
        assert_eq!(range_filter(995, 1000).1, 5);
        let mut rng = SplitMix64::new(3, 0);
        for _ in 0..1000 {
            assert_eq!(range_query(&mut rng, 1000).1, 10);
            assert_eq!(range_query(&mut rng, 4).1, 4);
        }
    }

    #[test]
    fn or_pairs_are_distinct_and_in_range() {
        let mut rng = SplitMix64::new(9, 0);
        for _ in 0..10_000 {
            let (first, second) = or_pair(&mut rng, 7);
            assert!(first < 7 && second < 7 && first != second);
        }
        assert_eq!(or_pair(&mut rng, 1), (0, 0));
        assert_eq!(or_query(&mut rng, 1).1, 1);
        assert_eq!(or_query(&mut rng, 2).1, 2);
    }
}
