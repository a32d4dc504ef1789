//! Open cursors: what `find`, `aggregate`, `listCollections` and `listIndexes` leave for `getMore`.
//! A cursor holds a resume position (or the rest of a sorted result), never a storage transaction.
//!
//! Invariants: ids are non-zero and unguessable; a cursor idle for [`IDLE_TIMEOUT_MS`] (by the
//! server's clock) is gone unless opened with `noCursorTimeout`; a cursor is taken out of the registry
//! while a `getMore` runs on it and put back only if it has more to give.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bson::{Bson, Document, RawDocumentBuf};

use tideway_base::error::{CommandError, CommandResult};
use tideway_base::limits::MAX_BATCH_BYTES;
use tideway_exec::executor::{DocStream, Visibility};
use tideway_query::pipeline::{DocumentStream, PulledRun};
use tideway_query::sorter::Sorted;
use tideway_query::Projection;
use tideway_storage::{Namespace, Record, Storage, StorageError, StorageResult, TtlClass};

/// mongod's `cursorTimeoutMillis` default: 10 minutes.
pub(crate) const IDLE_TIMEOUT_MS: i64 = 10 * 60 * 1000;
/// Default size of a first batch, in documents (mongod's).
pub(crate) const DEFAULT_FIRST_BATCH: u64 = 101;

/// Where a cursor's documents come from.
pub enum CursorSource {
    /// Matching documents still to be read from storage.
    Stream(Box<DocStream>),
    /// The rest of a result computed in full (catalog listings, small results).
    Buffered(VecDeque<Record>),
    /// The rest of a blocking sort, in memory or merged from spilled runs.
    Sorted(Box<Sorted<Record>>),
    /// The rest of a pipeline's output (already judged: visibility does not apply).
    Documents(Box<std::iter::Peekable<DocumentStream>>),
    /// A pipeline with no blocking stage, run as batches are asked for over the collection's
    /// documents still to be read (visibility applies to what is read, at each batch).
    Pipeline(Box<PulledPipeline>),
}

/// A streaming pipeline's input still to be read, and the run over it.
pub struct PulledPipeline {
    pub input: DocStream,
    pub run: PulledRun,
}

impl PulledPipeline {
    /// The next output document, reading input only as far as it takes.
    async fn next(&mut self, storage: &dyn Storage) -> CommandResult<Option<Record>> {
        loop {
            if let Some(document) = self.run.pending()? {
                return Ok(Some(output_record(document)));
            }
            if self.run.saturated() {
                return Ok(None);
            }
            let Some(record) = self.input.next(storage).await? else {
                return Ok(None);
            };
            if let Some(document) = self.run.push(record.doc.into_document())? {
                return Ok(Some(output_record(document)));
            }
        }
    }

    /// Whether output may still come (an empty final batch is possible when the rest of the
    /// input is filtered out).
    async fn has_more(&mut self, storage: &dyn Storage) -> CommandResult<bool> {
        Ok(self.run.has_pending()
            || (!self.run.saturated() && self.input.has_more(storage).await?))
    }
}

pub struct Cursor {
    /// `db.coll` for collections, `db.$cmd.listCollections` and the like for catalog cursors.
    pub ns: String,
    /// The collection read, whose TTL policies decide what stays visible; `None` for catalog cursors.
    pub collection: Option<Namespace>,
    source: CursorSource,
    projection: Option<Projection>,
    /// Documents still allowed by `limit`, if any.
    remaining: Option<u64>,
    pub no_timeout: bool,
    pub last_used_ms: i64,
    /// The command that opened the cursor (as the op registry keeps it), for the profile entries
    /// of its getMores (`originatingCommand`).
    pub originating_command: Option<bson::Document>,
    /// The query's filter, which the projection consults: the score of its `$text` search for
    /// `{$meta: "textScore"}`, and the array position it matched for a positional `a.$`.
    pub filter: Option<std::sync::Arc<tideway_query::Filter>>,
    /// A tailable cursor (capped collections): not closed when it reaches the end; each batch
    /// reads on from where the last one ended.
    pub tailable: bool,
    /// With `tailable`: a getMore that finds nothing waits for inserts (`awaitData`).
    pub await_data: bool,
    /// A change stream's cursor (`commands::change_stream`): its getMores are served there, and
    /// dropping or renaming the watched collection does not kill it (the stream reports it).
    pub change_stream: Option<Box<crate::changes::ChangeStream>>,
    /// The transaction that opened the cursor (`TxnStorage::identity`): only its statements
    /// may read on.
    pub transaction: Option<(u64, i64)>,
    /// The key of the logical session that opened the cursor (`session_id::lsid_key`):
    /// `killSessions`, `endSessions` and the session's expiry kill it.
    pub session: Option<Vec<u8>>,
    /// The users the opening connection had authenticated as: under `--auth` only a connection
    /// authenticated as one of them may read on (`access::enforce::coauthorized`).
    pub owner: Vec<crate::auth::UserName>,
}

impl Cursor {
    pub fn new(
        ns: String,
        collection: Option<Namespace>,
        source: CursorSource,
        projection: Option<Projection>,
        limit: Option<u64>,
    ) -> Cursor {
        Cursor {
            ns,
            collection,
            source,
            projection,
            remaining: limit.filter(|limit| *limit > 0),
            no_timeout: false,
            last_used_ms: 0,
            originating_command: None,
            filter: None,
            tailable: false,
            await_data: false,
            change_stream: None,
            transaction: None,
            session: None,
            owner: Vec::new(),
        }
    }

    /// Up to `max_docs` documents visible under `visibility` (and at most [`MAX_BATCH_BYTES`]), and
    /// whether the cursor is exhausted afterwards.
    /// What the cursor's storage stream has examined, when it reads one.
    pub(crate) fn scan_stats(&self) -> Option<tideway_exec::executor::ScanStats> {
        match &self.source {
            CursorSource::Stream(stream) => Some(stream.stats()),
            CursorSource::Pipeline(pulled) => Some(pulled.input.stats()),
            _ => None,
        }
    }

    /// Errors met while matching or projecting documents are reported as mongod's executor
    /// reports them: `<during> :: caused by :: <error>` (`Executor error during find command`).
    pub async fn next_batch(
        &mut self,
        storage: &dyn Storage,
        max_docs: Option<u64>,
        visibility: &Visibility,
        during: &str,
    ) -> CommandResult<(Vec<RawDocumentBuf>, bool)> {
        match &mut self.source {
            CursorSource::Stream(stream) => {
                stream.set_visibility(visibility.clone());
                // Each batch continues from the last document handed out, or fails with 136
                // when a capped collection rolled over it.
                stream.restore();
                stream.resume_tail();
            }
            CursorSource::Pipeline(pulled) => pulled.input.set_visibility(visibility.clone()),
            _ => {}
        }
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        let max_docs = match (max_docs, self.remaining) {
            (Some(max), Some(remaining)) => Some(max.min(remaining)),
            (max, remaining) => max.or(remaining),
        };
        while max_docs.is_none_or(|max| (batch.len() as u64) < max) && batch_bytes < MAX_BATCH_BYTES
        {
            let record = match &mut self.source {
                CursorSource::Stream(stream) => stream
                    .next(storage)
                    .await
                    .map_err(|error| error.caused(during))?,
                CursorSource::Buffered(records) => next_visible(records, visibility),
                CursorSource::Sorted(sorted) => next_visible_sorted(sorted, visibility)?,
                CursorSource::Documents(documents) => match documents.next().transpose() {
                    Ok(document) => document.map(output_record),
                    Err(error) => return Err(error),
                },
                CursorSource::Pipeline(pulled) => pulled.next(storage).await?,
            };
            let Some(record) = record else { break };
            let document = match &self.projection {
                Some(projection) => {
                    let meta = |name: &str| match &self.filter {
                        Some(filter) if name == tideway_query::TEXT_SCORE_META => filter
                            .text()
                            .and_then(|text| text.score(&record.doc))
                            .map_or(Bson::Null, Bson::Double),
                        _ => visibility.meta_value(name, &record),
                    };
                    let position = if projection.has_positional() {
                        self.filter
                            .as_ref()
                            .and_then(|filter| filter.match_position(&record.doc))
                            .flatten()
                    } else {
                        None
                    };
                    let collation = self
                        .filter
                        .as_ref()
                        .and_then(|filter| filter.collation().as_deref());
                    let projected = projection
                        .apply_find(&record.doc, &meta, position, collation)
                        .map_err(|error| error.caused(during))?;
                    RawDocumentBuf::from_document(&projected).map_err(|error| error.to_string())
                }
                // Stored documents pass through as read, never decoded.
                None => record.doc.into_raw(),
            }
            .map_err(|error| {
                CommandError::internal(format!("encoding a reply document: {error}"))
            })?;
            batch_bytes += document.as_bytes().len();
            batch.push(document);
        }
        if let Some(remaining) = &mut self.remaining {
            *remaining = remaining.saturating_sub(batch.len() as u64);
        }
        let exhausted = self.remaining == Some(0)
            || !self.tailable
                && match &mut self.source {
                    CursorSource::Stream(stream) => !stream.has_more(storage).await?,
                    // Records left may expire before the next getMore, which then returns an empty
                    // final batch: valid for any MongoDB cursor.
                    CursorSource::Buffered(records) => records.is_empty(),
                    CursorSource::Sorted(sorted) => sorted.is_empty(),
                    CursorSource::Documents(documents) => documents.peek().is_none(),
                    CursorSource::Pipeline(pulled) => !pulled.has_more(storage).await?,
                };
        Ok((batch, exhausted))
    }
}

/// Pops buffered records until one is still visible.
fn next_visible(records: &mut VecDeque<Record>, visibility: &Visibility) -> Option<Record> {
    while let Some(record) = records.pop_front() {
        if visibility.is_visible(&record) {
            return Some(record);
        }
    }
    None
}

/// A computed document in the shape cursors hand out (no storage metadata).
pub(crate) fn output_record(doc: Document) -> Record {
    Record {
        doc: doc.into(),
        rev: 0,
        last_write_ms: 0,
        ttl: TtlClass::Never,
    }
}

/// Reads sorted records until one is still visible.
fn next_visible_sorted(
    sorted: &mut Sorted<Record>,
    visibility: &Visibility,
) -> StorageResult<Option<Record>> {
    loop {
        match sorted.next_item() {
            Ok(Some(record)) if !visibility.is_visible(&record) => continue,
            Ok(record) => return Ok(record),
            Err(error) => return Err(StorageError::Io(error.errmsg)),
        }
    }
}

/// Open cursors by id.
#[derive(Default)]
pub struct CursorRegistry {
    cursors: Mutex<HashMap<i64, Cursor>>,
    timed_out: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for CursorRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorRegistry")
            .field("open", &self.open_count())
            .finish()
    }
}

impl CursorRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Cursor>> {
        self.cursors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stores `cursor` and returns its new id.
    pub fn register(&self, mut cursor: Cursor, now_ms: i64) -> i64 {
        cursor.last_used_ms = now_ms;
        let mut cursors = self.lock();
        loop {
            let id = (uuid::Uuid::new_v4().as_u128() as i64) & i64::MAX;
            if id != 0 && !cursors.contains_key(&id) {
                cursors.insert(id, cursor);
                return id;
            }
        }
    }

    /// Takes the cursor out for a `getMore`; `None` if unknown or timed out.
    pub(crate) fn checkout(&self, id: i64, now_ms: i64) -> Option<Cursor> {
        let mut cursors = self.lock();
        let cursor = cursors.remove(&id)?;
        if Self::idle_too_long(&cursor, now_ms) {
            self.timed_out
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        Some(cursor)
    }

    /// Puts a cursor back after a `getMore` that left it with more to give.
    pub(crate) fn checkin(&self, id: i64, mut cursor: Cursor, now_ms: i64) {
        cursor.last_used_ms = now_ms;
        self.lock().insert(id, cursor);
    }

    /// Whether cursor `id` may be killed by a caller `owned` approves of (true when there is
    /// no such cursor: killing it reports it not found).
    pub(crate) fn may_kill(
        &self,
        id: i64,
        owned: impl Fn(&[crate::auth::UserName]) -> bool,
    ) -> bool {
        self.lock()
            .get(&id)
            .is_none_or(|cursor| owned(&cursor.owner))
    }

    /// Removes the cursor; whether it existed.
    pub fn kill(&self, id: i64) -> bool {
        self.lock().remove(&id).is_some()
    }

    /// Removes every cursor whose namespace satisfies `pred` (collections dropped or renamed).
    pub(crate) fn kill_where(&self, pred: impl Fn(&str) -> bool) {
        self.lock()
            .retain(|_, cursor| cursor.change_stream.is_some() || !pred(&cursor.ns));
    }

    /// Removes every cursor opened by a session `killed` holds for; returns how many.
    pub(crate) fn kill_sessions(&self, killed: impl Fn(&[u8]) -> bool) -> usize {
        let mut cursors = self.lock();
        let before = cursors.len();
        cursors.retain(|_, cursor| !cursor.session.as_deref().is_some_and(&killed));
        before - cursors.len()
    }

    /// Drops cursors idle for longer than the timeout; returns how many.
    pub fn reap_idle(&self, now_ms: i64) -> usize {
        let mut cursors = self.lock();
        let before = cursors.len();
        cursors.retain(|_, cursor| !Self::idle_too_long(cursor, now_ms));
        let reaped = before - cursors.len();
        self.timed_out
            .fetch_add(reaped as u64, std::sync::atomic::Ordering::Relaxed);
        reaped
    }

    fn idle_too_long(cursor: &Cursor, now_ms: i64) -> bool {
        !cursor.no_timeout && now_ms - cursor.last_used_ms >= IDLE_TIMEOUT_MS
    }

    pub(crate) fn open_count(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn no_timeout_count(&self) -> usize {
        self.lock()
            .values()
            .filter(|cursor| cursor.no_timeout)
            .count()
    }

    pub(crate) fn timed_out_count(&self) -> u64 {
        self.timed_out.load(std::sync::atomic::Ordering::Relaxed)
    }
}
