//! Loading the collections that the read workloads query: documents with integer `_id`
//! 0..N, inserted with unordered `insert_many` batches by a few concurrent loader tasks. What a
//! document holds is the caller's choice (`grow_docs`); `grow` makes the `preloaded` kind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bson::{doc, Document};
use mongodb::Collection;
use tokio::task::JoinSet;

use crate::rng::SplitMix64;
use crate::workload::{make_document_with, OpError};

/// Documents per loader `insert_many` call.
pub const LOAD_BATCH: u64 = 1000;
/// Concurrent loader tasks.
pub const LOADERS: usize = 4;

/// Number of documents in the collection (`count` command, i.e. estimatedDocumentCount,
/// falling back to an aggregation count if the server has no `count`).
pub async fn count(collection: &Collection<Document>) -> Result<u64, OpError> {
    match collection.estimated_document_count().await {
        Ok(count) => Ok(count),
        Err(_) => Ok(collection.count_documents(doc! {}).await?),
    }
}

/// Drops the collection (a missing collection is not an error).
pub async fn drop(collection: &Collection<Document>) -> Result<(), OpError> {
    collection.drop().await.map_err(OpError::from)
}

/// The default TTL `insert_default_ttl` writes under: a day, so nothing expires during a run.
pub const DEFAULT_TTL_SECONDS: i32 = 86_400;

/// Gives the collection a Cosmos default TTL of [`DEFAULT_TTL_SECONDS`]
/// (`createIndex({_ts: 1}, {expireAfterSeconds})`).
pub async fn set_default_ttl(collection: &Collection<Document>) -> Result<(), OpError> {
    let spec = doc! {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": DEFAULT_TTL_SECONDS};
    collection
        .client()
        .database(collection.namespace().db.as_str())
        .run_command(doc! {"createIndexes": collection.name(), "indexes": [spec]})
        .await
        .map(|_| ())
        .map_err(OpError::from)
}

/// Makes the collection hold exactly the documents `_id` 0..`docs`: reuses it when its count
/// already equals `docs` (unless `reload`), otherwise drops and loads it. Returns whether it
/// loaded.
pub async fn ensure_preloaded(
    collection: &Collection<Document>,
    docs: u64,
    doc_bytes: usize,
    reload: bool,
    seed: u64,
) -> Result<bool, OpError> {
    ensure_loaded(collection, docs, reload, seed, move |id, rng| {
        make_document_with(Some(id as i64), &Document::new(), doc_bytes, rng)
    })
    .await
}

/// Makes the collection hold exactly `make(id)` for `_id` 0..`docs`: reuses it when its count
/// already equals `docs` (unless `reload`), otherwise drops it and loads it. Returns whether it
/// loaded.
pub async fn ensure_loaded<F>(
    collection: &Collection<Document>,
    docs: u64,
    reload: bool,
    seed: u64,
    make: F,
) -> Result<bool, OpError>
where
    F: Fn(u64, &mut SplitMix64) -> Document + Clone + Send + 'static,
{
    if !reload && count(collection).await.ok() == Some(docs) {
        return Ok(false);
    }
    drop(collection).await?;
    grow_docs(collection, 0, docs, seed, make).await?;
    Ok(true)
}

/// Inserts the documents `_id` `from`..`to` and reports progress on stderr.
pub async fn grow(
    collection: &Collection<Document>,
    from: u64,
    to: u64,
    doc_bytes: usize,
    seed: u64,
) -> Result<(), OpError> {
    grow_with(collection, from, to, doc_bytes, seed, &Document::new()).await
}

/// Like [`grow`], with the fields of `extra` in every document (e.g. a TTL date).
pub async fn grow_with(
    collection: &Collection<Document>,
    from: u64,
    to: u64,
    doc_bytes: usize,
    seed: u64,
    extra: &Document,
) -> Result<(), OpError> {
    let extra = extra.clone();
    grow_docs(collection, from, to, seed, move |id, rng| {
        make_document_with(Some(id as i64), &extra, doc_bytes, rng)
    })
    .await
}

/// Inserts `make(id, rng)` for every `id` in `from`..`to` and reports progress on stderr.
pub async fn grow_docs<F>(
    collection: &Collection<Document>,
    from: u64,
    to: u64,
    seed: u64,
    make: F,
) -> Result<(), OpError>
where
    F: Fn(u64, &mut SplitMix64) -> Document + Clone + Send + 'static,
{
    if to <= from {
        return Ok(());
    }
    let started = Instant::now();
    let next_batch = Arc::new(AtomicU64::new(from));
    let mut loaders = JoinSet::new();
    for index in 0..LOADERS {
        let collection = collection.clone();
        let next_batch = Arc::clone(&next_batch);
        let rng = SplitMix64::new(seed ^ 0x10AD, from.wrapping_add(index as u64));
        loaders.spawn(load_batches(collection, next_batch, to, make.clone(), rng));
    }
    let mut first_error = None;
    while let Some(joined) = loaders.join_next().await {
        let outcome = joined
            .map_err(|join_error| OpError::new("loader task failed", join_error.to_string()))
            .and_then(|result| result);
        if let Err(error) = outcome {
            first_error.get_or_insert(error);
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "  loaded _id {from}..{to} ({} docs) in {seconds:.1} s ({:.0} docs/s)",
        to - from,
        (to - from) as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// One loader: claims the next batch of ids until all are taken; stops at the first error
/// (the other loaders stop once they see the shared counter exhausted).
async fn load_batches<F>(
    collection: Collection<Document>,
    next_batch: Arc<AtomicU64>,
    to: u64,
    make: F,
    mut rng: SplitMix64,
) -> Result<(), OpError>
where
    F: Fn(u64, &mut SplitMix64) -> Document,
{
    loop {
        let first = next_batch.fetch_add(LOAD_BATCH, Ordering::Relaxed);
        if first >= to {
            return Ok(());
        }
        let last = (first + LOAD_BATCH).min(to);
        let batch: Vec<Document> = (first..last).map(|id| make(id, &mut rng)).collect();
        if let Err(error) = collection.insert_many(batch).ordered(false).await {
            // Make the other loaders stop soon rather than load a collection we will not use.
            next_batch.store(to, Ordering::Relaxed);
            return Err(error.into());
        }
    }
}
