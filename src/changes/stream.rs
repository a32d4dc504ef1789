//! `$changeStream`: opens a change stream over the oplog (a collection's, a database's or, on
//! `admin` with `allChangesForCluster`, the cluster's), turns oplog entries into mongod's change
//! events, runs the stages that follow `$changeStream` over each event, and makes the batches
//! (with `postBatchResumeToken`) that the stream's tailable+awaitData cursor serves
//! (`commands::change_stream`).
//!
//! Invariants: events come out in oplog order, each once: the stream's position (`from`) only
//! moves past an entry once every event it makes was handed out or filtered; an entry whose
//! event a resume token already delivered still owes its invalidate. An invalidate ends the
//! stream (the cursor closes with that batch). Expired documents stay invisible here as
//! everywhere: `updateLookup` reads through the collection's visibility. Reaper deletions are
//! `delete` events with tideway's `expired: true` and `expireAt` (docs/ttl.md).

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document, Timestamp};

use super::token::{Mark, ResumeToken};
use tideway_base::clock::Clock;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::MAX_BATCH_BYTES;
use tideway_exec::executor::{CollectionView, PolicyGates};
use tideway_query::keycodec::encode_id;
use tideway_query::pipeline::PulledRun;
use tideway_query::{Pipeline, PipelineContext};
use tideway_storage::oplog::{oplog_namespace, update_description};
use tideway_storage::{Namespace, ScanRequest, ScanSource, Storage};
use tideway_wire::Reply;

/// Stages mongod lets follow `$changeStream` (`isAllowedInChangeStream`).
const FOLLOWING_STAGES: &[&str] = &[
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
    "$redact",
];

/// mongod's default `maxAwaitTimeMS` for a change stream's getMore.
pub(crate) const DEFAULT_AWAIT_MS: u64 = 1000;
/// Oplog entries read per storage page.
const PAGE_ENTRIES: usize = 256;

/// What a stream watches.
#[derive(Clone, Debug, PartialEq)]
enum Scope {
    Collection(Namespace),
    Database(String),
    Cluster,
}

impl Scope {
    /// Whether writes to `db.coll` show in this stream.
    fn sees(&self, db: &str, coll: &str) -> bool {
        match self {
            Scope::Collection(ns) => ns.db == db && ns.coll == coll,
            Scope::Database(watched) => watched == db && !coll.starts_with("system."),
            Scope::Cluster => {
                !matches!(db, "admin" | "config" | "local") && !coll.starts_with("system.")
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum FullDocument {
    Default,
    UpdateLookup,
    WhenAvailable,
    Required,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// An open change stream (kept in its cursor between getMores).
pub struct ChangeStream {
    scope: Scope,
    full_document: FullDocument,
    before_change: BeforeChange,
    show_expanded: bool,
    /// Oplog entries from this bound on are still to be read.
    from: Bound<Timestamp>,
    /// The entry at this `ts` already delivered its event (the stream resumed after it); it
    /// still owes its invalidate, if it makes one.
    delivered_at: Option<Timestamp>,
    /// The stages after `$changeStream`, over each event: the leading `$match` (which
    /// `Pipeline::parse` hoists out of the stages) and the run of the rest.
    leading_filter: Option<Arc<tideway_query::Filter>>,
    run: PulledRun,
    /// An invalidate was handed out: the stream is over.
    invalidated: bool,
}

/// What a change stream reads: the oplog, and for `fullDocument: "updateLookup"` the
/// collections as a command sees them now (visibility judged by `gates` and `clock`).
pub struct Reader<'a> {
    pub storage: &'a dyn Storage,
    pub gates: &'a PolicyGates,
    pub clock: &'a dyn Clock,
    /// Why a stream cannot open when storage keeps no oplog (40573's message): a standalone
    /// server's, or a router's over PostgreSQL.
    pub without_oplog: &'static str,
}

/// mongod's message on a standalone server, which keeps no oplog.
pub const STANDALONE_WITHOUT_OPLOG: &str =
    "The $changeStream stage is only supported on replica sets";

impl ChangeStream {
    /// The stream `aggregate` opens when its first stage is `$changeStream`, on `db` and
    /// `collection` (`None` for `aggregate: 1`).
    pub async fn open(
        reader: &Reader<'_>,
        db: &str,
        collection: Option<Namespace>,
        stages: &[Document],
    ) -> CommandResult<ChangeStream> {
        if !super::has_oplog(reader.storage).await? {
            // mongod's answer where there is no oplog, with this deployment's reason.
            return Err(CommandError::new(
                ErrorCode::Location40573,
                reader.without_oplog,
            ));
        }
        let Some(Bson::Document(spec)) = stages[0].get("$changeStream") else {
            return Err(CommandError::new(
                ErrorCode::Location50808,
                "$changeStream stage expects a document as argument",
            ));
        };
        let spec = Spec::parse(spec)?;
        let scope = scope_of(db, collection, spec.all_changes_for_cluster)?;
        let (leading_filter, run) = following_stages(reader.clock, &stages[1..])?;
        let (from, delivered_at) = start(reader.storage, &spec).await?;
        Ok(ChangeStream {
            scope,
            full_document: spec.full_document,
            before_change: spec.before_change,
            show_expanded: spec.show_expanded,
            from,
            delivered_at,
            leading_filter,
            run,
            invalidated: false,
        })
    }

    /// The namespace its cursor reports: the collection's, else `<db>.$cmd.aggregate`.
    pub fn cursor_namespace(&self, db: &str) -> String {
        match &self.scope {
            Scope::Collection(ns) => ns.to_string(),
            _ => format!("{db}.$cmd.aggregate"),
        }
    }

    /// Whether an invalidate was handed out (the stream is over; its cursor closes).
    pub fn invalidated(&self) -> bool {
        self.invalidated
    }

    /// A getMore's batch: up to `max` events, waiting until `until` for the first one.
    pub async fn await_batch(
        &mut self,
        reader: &Reader<'_>,
        max: u64,
        until: tokio::time::Instant,
    ) -> CommandResult<(Vec<Document>, ResumeToken)> {
        loop {
            // Registered before reading, so a commit between the read and the wait still wakes it.
            let appended = reader.storage.oplog_appended().notified();
            let mut appended = std::pin::pin!(appended);
            appended.as_mut().enable();
            let (batch, token) = self.next_batch(reader, max).await?;
            if !batch.is_empty() || self.invalidated {
                return Ok((batch, token));
            }
            if tokio::time::timeout_at(until, appended).await.is_err() {
                return Ok((batch, token));
            }
        }
    }
}

/// A cursor reply with `postBatchResumeToken`, which drivers require of change streams.
pub fn reply(
    id: i64,
    ns: &str,
    batch: Vec<Document>,
    token: ResumeToken,
    batch_name: &str,
) -> Reply {
    let mut cursor = Document::new();
    cursor.insert(batch_name, batch);
    cursor.insert("postBatchResumeToken", token.to_document());
    cursor.insert("id", id);
    cursor.insert("ns", ns);
    Reply::from(doc! {"cursor": cursor})
}

/// The `$changeStream` stage's arguments (document_source_change_stream.idl).
struct Spec {
    all_changes_for_cluster: bool,
    full_document: FullDocument,
    before_change: BeforeChange,
    resume_after: Option<ResumeToken>,
    start_after: Option<ResumeToken>,
    start_at_operation_time: Option<Timestamp>,
    show_expanded: bool,
}

impl Spec {
    fn parse(spec: &Document) -> CommandResult<Spec> {
        const STAGE: &str = "$changeStream";
        let mut parsed = Spec {
            all_changes_for_cluster: false,
            full_document: FullDocument::Default,
            before_change: BeforeChange::Off,
            resume_after: None,
            start_after: None,
            start_at_operation_time: None,
            show_expanded: false,
        };
        let wrong = |field: &str, value: &Bson, expected: &str| {
            CommandError::idl_wrong_type(
                STAGE,
                field,
                tideway_base::display::type_name(value),
                expected,
            )
        };
        let enumeration = |field: &str, value: &str| {
            CommandError::bad_value(format!(
                "Enumeration value '{value}' for field '{STAGE}.{field}' is not a valid value."
            ))
        };
        for (field, value) in spec {
            match (field.as_str(), value) {
                ("allChangesForCluster", Bson::Boolean(all)) => {
                    parsed.all_changes_for_cluster = *all;
                }
                ("showExpandedEvents", Bson::Boolean(show)) => parsed.show_expanded = *show,
                ("allChangesForCluster" | "showExpandedEvents", other) => {
                    return Err(wrong(field, other, "bool"))
                }
                ("fullDocument", Bson::String(mode)) => {
                    parsed.full_document = match mode.as_str() {
                        "default" => FullDocument::Default,
                        "updateLookup" => FullDocument::UpdateLookup,
                        "whenAvailable" => FullDocument::WhenAvailable,
                        "required" => FullDocument::Required,
                        other => return Err(enumeration(field, other)),
                    }
                }
                ("fullDocumentBeforeChange", Bson::String(mode)) => {
                    parsed.before_change = match mode.as_str() {
                        "off" => BeforeChange::Off,
                        "whenAvailable" => BeforeChange::WhenAvailable,
                        "required" => BeforeChange::Required,
                        other => return Err(enumeration(field, other)),
                    }
                }
                ("fullDocument" | "fullDocumentBeforeChange", other) => {
                    return Err(wrong(field, other, "string"))
                }
                ("resumeAfter", Bson::Document(token)) => {
                    parsed.resume_after = Some(ResumeToken::parse(token)?);
                }
                ("startAfter", Bson::Document(token)) => {
                    parsed.start_after = Some(ResumeToken::parse(token)?);
                }
                ("resumeAfter" | "startAfter", other) => return Err(wrong(field, other, "object")),
                ("startAtOperationTime", Bson::Timestamp(ts)) => {
                    parsed.start_at_operation_time = Some(*ts);
                }
                ("startAtOperationTime", other) => return Err(wrong(field, other, "timestamp")),
                _ => return Err(CommandError::idl_unknown_field(STAGE, field)),
            }
        }
        // document_source_change_stream.cpp, in mongod's order.
        if parsed.resume_after.is_some() && parsed.start_after.is_some() {
            return Err(CommandError::new(
                ErrorCode::Location50865,
                "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage",
            ));
        }
        if parsed.start_at_operation_time.is_some()
            && (parsed.resume_after.is_some() || parsed.start_after.is_some())
        {
            return Err(CommandError::new(
                ErrorCode::Location40674,
                "Only one type of resume option is allowed, but multiple were found",
            ));
        }
        if parsed
            .resume_after
            .is_some_and(|token| token.mark == Mark::Invalidate)
        {
            return Err(CommandError::new(
                ErrorCode::InvalidResumeToken,
                "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification",
            ));
        }
        Ok(parsed)
    }
}

/// What the stream watches, from where it was opened (change_stream_helpers / mongod's
/// namespace checks for `$changeStream`).
fn scope_of(db: &str, collection: Option<Namespace>, all: bool) -> CommandResult<Scope> {
    if all {
        if db != "admin" || collection.is_some() {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name",
            ));
        }
        return Ok(Scope::Cluster);
    }
    if matches!(db, "admin" | "config" | "local") {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("$changeStream may not be opened on the internal {db} database"),
        ));
    }
    Ok(match collection {
        Some(ns) if ns.coll.starts_with("system.") => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                format!("$changeStream may not be opened on the internal {ns} collection"),
            ))
        }
        Some(ns) => Scope::Collection(ns),
        None => Scope::Database(db.to_owned()),
    })
}

/// The stages after `$changeStream`: only those mongod allows there.
fn following_stages(
    clock: &dyn Clock,
    stages: &[Document],
) -> CommandResult<(Option<Arc<tideway_query::Filter>>, PulledRun)> {
    for stage in stages {
        let name = stage.keys().next().map_or("", String::as_str);
        if name == "$changeStream" {
            return Err(CommandError::new(
                ErrorCode::Location40602,
                "$changeStream is only valid as the first stage in a pipeline",
            ));
        }
        if !FOLLOWING_STAGES.contains(&name) {
            return Err(CommandError::new(
                ErrorCode::IllegalOperation,
                format!("{name} is not permitted in a $changeStream pipeline"),
            ));
        }
    }
    let pipeline = Arc::new(Pipeline::parse(stages)?);
    let context = PipelineContext::at(bson::DateTime::from_millis(clock.now_ms()));
    let leading_filter = pipeline.leading_filter().cloned().map(Arc::new);
    Ok((leading_filter, PulledRun::new(pipeline, 0, context)?))
}

/// Where the stream starts reading, and the entry whose event a resume token delivered.
async fn start(
    storage: &dyn Storage,
    spec: &Spec,
) -> CommandResult<(Bound<Timestamp>, Option<Timestamp>)> {
    let resumed = spec.resume_after.or(spec.start_after);
    let resume_ts = resumed
        .map(|token| token.ts)
        .or(spec.start_at_operation_time);
    let Some(resume_ts) = resume_ts else {
        return Ok((Bound::Excluded(storage.cluster_time()), None));
    };
    if let Some(oldest) = oldest_entry(storage).await? {
        if resume_ts < oldest {
            return Err(CommandError::new(
                ErrorCode::ChangeStreamHistoryLost,
                "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
            ));
        }
    }
    Ok(match resumed {
        Some(ResumeToken {
            ts,
            mark: Mark::Event,
        }) => (Bound::Included(ts), Some(ts)),
        Some(ResumeToken { ts, .. }) => (Bound::Excluded(ts), None),
        None => (Bound::Included(resume_ts), None),
    })
}

/// The `ts` of the oldest entry the oplog still holds.
async fn oldest_entry(storage: &dyn Storage) -> CommandResult<Option<Timestamp>> {
    let page = storage
        .scan(&oplog_namespace(), scan_from(Bound::Unbounded, 1))
        .await?;
    Ok(page
        .records
        .first()
        .and_then(|record| record.doc.document().get_timestamp("ts").ok()))
}

fn scan_from(from: Bound<Timestamp>, limit: usize) -> ScanRequest {
    let key = |ts: Timestamp| encode_id(&Bson::Timestamp(ts));
    let lower = match from {
        Bound::Included(ts) => Bound::Included(key(ts)),
        Bound::Excluded(ts) => Bound::Excluded(key(ts)),
        Bound::Unbounded => Bound::Unbounded,
    };
    ScanRequest {
        source: ScanSource::Index {
            name: "_id_".to_owned(),
            ranges: vec![(lower, Bound::Unbounded)],
        },
        resume_after: None,
        reverse: false,
        limit,
        hide: None,
        key_filter: None,
        covered: false,
    }
}

impl ChangeStream {
    /// Up to `max` events committed after the stream's position, and the batch's
    /// `postBatchResumeToken`: the last event's token, or (having read every entry) a
    /// high-water mark at the newest entry time known to be read.
    pub async fn next_batch(
        &mut self,
        reader: &Reader<'_>,
        max: u64,
    ) -> CommandResult<(Vec<Document>, ResumeToken)> {
        let storage = reader.storage;
        // Every entry at or before this time committed before it was published: the scans
        // below see them all.
        let mut high_water = storage.cluster_time();
        let mut batch = Vec::new();
        let mut last_token = None;
        let mut read_all = false;
        // As `Cursor::next_batch`: whole entries until the batch holds `MAX_BATCH_BYTES`, so a
        // backlog of large events is served over several replies, each within the wire limit.
        let mut bytes = 0;
        let full = |batch: &Vec<Document>, bytes: usize| {
            (batch.len() as u64) >= max || bytes >= MAX_BATCH_BYTES
        };
        while !full(&batch, bytes) && !self.invalidated {
            let page = storage
                .scan(&oplog_namespace(), scan_from(self.from, PAGE_ENTRIES))
                .await?;
            if page.records.is_empty() {
                read_all = true;
                break;
            }
            for record in page.records {
                if full(&batch, bytes) || self.invalidated {
                    break;
                }
                let entry = record.doc.into_document();
                let Ok(ts) = entry.get_timestamp("ts") else {
                    continue;
                };
                for (event, mark) in self.events_of(reader, &entry, ts).await? {
                    if mark == Mark::Invalidate {
                        self.invalidated = true;
                    }
                    let token = ResumeToken { ts, mark };
                    if self
                        .leading_filter
                        .as_ref()
                        .is_some_and(|filter| !filter.matches(&event))
                    {
                        continue;
                    }
                    if let Some(output) = self.run.push(event)? {
                        check_token_kept(&output, token)?;
                        bytes += tideway_base::bsonutil::encoded_size(&output);
                        batch.push(output);
                        last_token = Some(token);
                    }
                }
                self.from = Bound::Excluded(ts);
                self.delivered_at = None;
                high_water = high_water.max(ts);
            }
        }
        let token = match (last_token, self.from) {
            (Some(token), _) if !read_all || token.mark == Mark::Invalidate => token,
            (_, Bound::Excluded(ts)) => ResumeToken {
                ts: ts.max(high_water),
                mark: Mark::HighWater,
            },
            // Nothing read yet from a start at `ts` (included): resuming must read it again.
            (_, Bound::Included(ts)) if self.delivered_at == Some(ts) => ResumeToken {
                ts,
                mark: Mark::Event,
            },
            (_, Bound::Included(ts)) => ResumeToken {
                ts: just_before(ts),
                mark: Mark::HighWater,
            },
            (_, Bound::Unbounded) => ResumeToken {
                ts: high_water,
                mark: Mark::HighWater,
            },
        };
        Ok((batch, token))
    }

    /// The events (at most the entry's own and an invalidate) that `entry` makes in this
    /// stream, before the following stages.
    async fn events_of(
        &self,
        reader: &Reader<'_>,
        entry: &Document,
        ts: Timestamp,
    ) -> CommandResult<Vec<(Document, Mark)>> {
        let op = entry.get_str("op").unwrap_or_default();
        let (db, coll) = entry
            .get_str("ns")
            .unwrap_or_default()
            .split_once('.')
            .unwrap_or_default();
        let o = entry.get_document("o").cloned().unwrap_or_default();
        let mut events = Vec::new();
        let header = |operation: &str, mark: Mark| {
            // A transaction's events name it first, as mongod's do.
            let mut event = Document::new();
            if let (Some(txn_number), Some(lsid)) = (entry.get("txnNumber"), entry.get("lsid")) {
                event.insert("txnNumber", txn_number.clone());
                event.insert("lsid", lsid.clone());
            }
            event.insert("_id", ResumeToken { ts, mark }.to_document());
            event.insert("operationType", operation);
            event.insert("clusterTime", ts);
            if let Ok(wall) = entry.get_datetime("wall") {
                event.insert("wallTime", *wall);
            }
            if self.show_expanded && mark == Mark::Event {
                if let Some(uuid) = entry.get("ui") {
                    event.insert("collectionUUID", uuid.clone());
                }
            }
            event
        };
        let namespace = |db: &str, coll: &str| doc! {"db": db, "coll": coll};
        let mut invalidates = false;
        match op {
            "i" | "u" | "d" if self.scope.sees(db, coll) => {
                let operation = match op {
                    "i" => "insert",
                    "d" => "delete",
                    _ if o.contains_key("$v") && o.contains_key("diff") => "update",
                    _ => "replace",
                };
                let mut event = header(operation, Mark::Event);
                let key = match op {
                    "u" => entry.get_document("o2").cloned().unwrap_or_default(),
                    _ => doc! {"_id": o.get("_id").cloned().unwrap_or(Bson::Null)},
                };
                let id = key.get("_id").cloned().unwrap_or(Bson::Null);
                match operation {
                    "insert" | "replace" => {
                        event.insert("fullDocument", o.clone());
                    }
                    "update" => {
                        if let Some(full) = self.post_image(reader, entry, db, coll, &id).await? {
                            event.insert("fullDocument", full);
                        }
                    }
                    _ => {}
                }
                event.insert("ns", namespace(db, coll));
                event.insert("documentKey", key);
                if operation == "update" {
                    let diff = o.get_document("diff").cloned().unwrap_or_default();
                    event.insert("updateDescription", update_description(&diff));
                }
                if operation != "insert" {
                    if let Some(before) = self.pre_image(entry, &event)? {
                        event.insert("fullDocumentBeforeChange", before);
                    }
                }
                if entry.get_bool("expired") == Ok(true) {
                    event.insert("expired", true);
                    if let Some(at) = entry.get("expireAt") {
                        event.insert("expireAt", at.clone());
                    }
                }
                events.push((event, Mark::Event));
            }
            "c" => {
                let command = o.keys().next().map_or("", String::as_str);
                let target = o.get_str(command).unwrap_or_default();
                match command {
                    "drop" if self.scope.sees(db, target) => {
                        let mut event = header("drop", Mark::Event);
                        event.insert("ns", namespace(db, target));
                        events.push((event, Mark::Event));
                        invalidates = matches!(self.scope, Scope::Collection(_));
                    }
                    "renameCollection" => {
                        let (from_db, from_coll) = target.split_once('.').unwrap_or_default();
                        let to = o.get_str("to").unwrap_or_default();
                        let (to_db, to_coll) = to.split_once('.').unwrap_or_default();
                        if self.scope.sees(from_db, from_coll) || self.scope.sees(to_db, to_coll) {
                            let mut event = header("rename", Mark::Event);
                            event.insert("ns", namespace(from_db, from_coll));
                            event.insert("to", namespace(to_db, to_coll));
                            events.push((event, Mark::Event));
                            invalidates = matches!(self.scope, Scope::Collection(_));
                        }
                    }
                    "dropDatabase"
                        if !matches!(self.scope, Scope::Collection(_))
                            && self.scope.sees(db, "") =>
                    {
                        let mut event = header("dropDatabase", Mark::Event);
                        event.insert("ns", doc! {"db": db});
                        events.push((event, Mark::Event));
                        invalidates = matches!(self.scope, Scope::Database(_));
                    }
                    "create" | "createIndexes" | "dropIndexes" | "collMod"
                        if self.show_expanded && self.scope.sees(db, target) =>
                    {
                        let mut description = o.clone();
                        description.remove(command);
                        let (operation, description) = match command {
                            "create" => ("create", description),
                            "createIndexes" => ("createIndexes", doc! {"indexes": [description]}),
                            "dropIndexes" => (
                                "dropIndexes",
                                doc! {"indexes": [{"name": description.get("index").cloned().unwrap_or(Bson::Null)}]},
                            ),
                            _ => ("modify", description),
                        };
                        let mut event = header(operation, Mark::Event);
                        event.insert("ns", namespace(db, target));
                        event.insert("operationDescription", description);
                        events.push((event, Mark::Event));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        if self.delivered_at == Some(ts) {
            events.clear();
        }
        if invalidates {
            events.push((header("invalidate", Mark::Invalidate), Mark::Invalidate));
        }
        Ok(events)
    }

    /// `fullDocument` of an update event: the current document (`updateLookup`, `null` when it
    /// is gone or expired) or the entry's post-image (`whenAvailable`, `required`).
    async fn post_image(
        &self,
        reader: &Reader<'_>,
        entry: &Document,
        db: &str,
        coll: &str,
        id: &Bson,
    ) -> CommandResult<Option<Bson>> {
        Ok(match self.full_document {
            FullDocument::Default => None,
            FullDocument::UpdateLookup => {
                let ns = Namespace::new(db, coll);
                let found = match reader.storage.get(&ns, id).await? {
                    Some(record)
                        if CollectionView::open(
                            reader.gates,
                            reader.storage,
                            reader.clock,
                            &ns,
                        )
                        .await?
                        .visibility
                        .is_visible(&record) =>
                    {
                        Some(record.doc.into_document())
                    }
                    _ => None,
                };
                Some(found.map_or(Bson::Null, Bson::Document))
            }
            FullDocument::WhenAvailable | FullDocument::Required => {
                match entry.get_document("postImage") {
                    Ok(after) => Some(Bson::Document(after.clone())),
                    Err(_) if self.full_document == FullDocument::WhenAvailable => Some(Bson::Null),
                    Err(_) => return Err(image_missing("post", entry)),
                }
            }
        })
    }

    /// `fullDocumentBeforeChange` from the entry's pre-image, per the stream's mode.
    fn pre_image(&self, entry: &Document, _event: &Document) -> CommandResult<Option<Bson>> {
        Ok(match (self.before_change, entry.get_document("preImage")) {
            (BeforeChange::Off, _) => None,
            (_, Ok(before)) => Some(Bson::Document(before.clone())),
            (BeforeChange::WhenAvailable, Err(_)) => Some(Bson::Null),
            (BeforeChange::Required, Err(_)) => return Err(image_missing("pre", entry)),
        })
    }
}

/// The timestamp right before `ts` (a high-water mark that resumes at `ts`).
fn just_before(ts: Timestamp) -> Timestamp {
    match (ts.time, ts.increment) {
        (time, 0) if time > 0 => Timestamp {
            time: time - 1,
            increment: u32::MAX,
        },
        (time, increment) => Timestamp {
            time,
            increment: increment.saturating_sub(1),
        },
    }
}

/// mongod's error when a `required` image is missing (NoMatchingDocument).
fn image_missing(which: &str, entry: &Document) -> CommandError {
    CommandError::new(
        ErrorCode::NoMatchingDocument,
        format!(
            "Change stream was configured to require a {which}-image for all update, delete and replace events, but the {which}-image was not found for event: {{ts: {}, ns: \"{}\"}}",
            entry.get("ts").map(ToString::to_string).unwrap_or_default(),
            entry.get_str("ns").unwrap_or_default()
        ),
    )
}

/// The stages after `$changeStream` must leave the event's `_id` (its resume token) as it
/// was (change_stream_event_transform / ChangeStreamFatalError).
fn check_token_kept(output: &Document, token: ResumeToken) -> CommandResult<()> {
    let expected = token.to_document();
    match output.get("_id") {
        Some(Bson::Document(id)) if *id == expected => Ok(()),
        found => Err(CommandError::new(
            ErrorCode::ChangeStreamFatalError,
            format!(
                "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed. Expected: {expected} but found: {}",
                found.map_or_else(|| "missing".to_owned(), ToString::to_string)
            ),
        )),
    }
}
