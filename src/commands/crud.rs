//! Writes: `insert`, `update`, `delete`, `findAndModify`, with mongod's reply shapes (`n`,
//! `nModified`, `upserted`, positional `writeErrors`, `lastErrorObject`).
//!
//! Updates are read → apply operators (`query::update`) → `Replace` with the revision read; a
//! `WriteConflict` means another writer got there first, so the document is re-read, re-matched and
//! the update re-applied. Every document update is therefore atomic, and concurrent `$inc`s add up.
//!
//! TTL: writes only ever match visible documents; every written document gets its last-write time
//! and TTL class from `ttl`; a client may not set `_ts`; and an expired document that still holds
//! an `_id` or unique key is replaced atomically instead of blocking an insert or upsert.
//!
//! Validation: `WriteContext` is the one path every written document takes (also for
//! `bulkWrite`, `$out` and `$merge`); it checks each against the collection's validator
//! (`validation::CollectionValidator`) unless the command bypasses validation.

use std::sync::Arc;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{
    batch, check_hint, collation_for, collection_namespace, let_variables, optional_bool,
    optional_document, validate_writable_namespace, write_options,
};
use crate::commands::find::parse_projection;
use crate::commands::retryable::{self, RetryableWrite, StatementKind};
use crate::state::bump;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{self, StorageWrite};
use tideway_exec::executor::{document_id, CollectionView};
use tideway_exec::planner::{self, Query};
use tideway_exec::timeseries::{self, Timeseries};
use tideway_exec::ttl;
use tideway_exec::validation::{self, CollectionValidator};
use tideway_query::collation::CollationChoice;
use tideway_query::expr::command_variables::{with_command_variables, CommandVariables};
use tideway_query::update::parse_array_filters;
use tideway_query::{upsert_document, Filter, SortSpec, Update, UpdateContext};
use tideway_storage::{
    Namespace, Record, RecordSession, Storage, StorageError, WriteMeta, WriteOp, WriteOptions,
    WriteOutcome,
};
use tideway_wire::MAX_BSON_OBJECT_SIZE;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "insert",
        aliases: &[],
        help: "Insert documents (ordered or unordered).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(insert),
    },
    CommandSpec {
        name: "update",
        aliases: &[],
        help: "Update documents: replacement or update operators, multi, upsert.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(update),
    },
    CommandSpec {
        name: "delete",
        aliases: &[],
        help: "Delete documents matching queries (limit 0 = all, 1 = one).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(delete),
    },
    CommandSpec {
        name: "findAndModify",
        aliases: &["findandmodify"],
        help: "Atomically update or remove one document and return it (before or after).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(find_and_modify),
    },
];

/// How often an update re-reads and retries after losing a race to another writer.
const MAX_WRITE_CONFLICT_RETRIES: usize = 1000;

/// A `writeErrors` entry.
fn write_error(index: usize, error: &CommandError) -> Document {
    let mut entry =
        doc! {"index": index as i32, "code": error.code.code(), "errmsg": error.errmsg.as_str()};
    if let Some(extra) = &error.extra {
        entry.extend(extra.clone());
    }
    entry
}

/// The reply of a batch write: `n`, then the command's extra fields, then `writeErrors` if any.
fn batch_reply(n: usize, errors: Vec<Document>, extra: Document) -> Document {
    let mut reply = doc! {"n": n as i32};
    reply.extend(extra);
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    reply
}

fn conflict_gave_up(what: &str) -> CommandError {
    CommandError::new(
        ErrorCode::WriteConflict,
        format!("{what} kept conflicting with concurrent writers; gave up after {MAX_WRITE_CONFLICT_RETRIES} tries"),
    )
}

/// A document as an insert will store it: `_id` first (generated if absent), no client `_ts`, within
/// the size limit.
fn prepare_for_insert(document: &Document) -> CommandResult<Document> {
    let stored = match document.iter().next() {
        // Drivers generate `_id` and put it first: keep the document as it is.
        Some((first, id)) if first == "_id" => {
            check_id(id)?;
            document.clone()
        }
        _ => {
            let id = document
                .get("_id")
                .cloned()
                .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
            check_id(&id)?;
            let mut stored = doc! {"_id": id};
            stored.extend(
                document
                    .iter()
                    .filter(|(key, _)| *key != "_id")
                    .map(|(key, value)| (key.clone(), value.clone())),
            );
            stored
        }
    };
    check_storable(&stored, StorageWrite::Insert)?;
    Ok(stored)
}

/// mongod's rules for a stored `_id`: not an array, regex or undefined, and no `$`-prefixed field
/// name at any depth inside it (52, where the rest of a document may have them).
fn check_id(id: &Bson) -> CommandResult<()> {
    /// The first `$`-prefixed field name inside `value`. Depth is bounded by the wire limit.
    fn dollar_field(value: &Bson) -> Option<&str> {
        match value {
            Bson::Document(document) => document.iter().find_map(|(name, value)| {
                if name.starts_with('$') {
                    Some(name.as_str())
                } else {
                    dollar_field(value)
                }
            }),
            Bson::Array(elements) => elements.iter().find_map(dollar_field),
            _ => None,
        }
    }
    match id {
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined => Err(CommandError::new(
            ErrorCode::InvalidIdField,
            format!(
                "The '_id' value cannot be of type {}",
                tideway_base::display::type_name(id)
            ),
        )),
        _ => match dollar_field(id) {
            Some(name) => Err(CommandError::new(
                ErrorCode::DollarPrefixedFieldName,
                format!("_id fields may not contain '$'-prefixed fields: {name} is not valid for storage."),
            )),
            None => Ok(()),
        },
    }
}

/// What every written document must satisfy: no client `_ts`, nesting within mongod's storage
/// depth, at most 16 MiB.
fn check_storable(document: &Document, write: StorageWrite) -> CommandResult<()> {
    limits::check_storage_depth(document, write)?;
    ttl::check_client_document(document)?;
    let size =
        tideway_base::bsonutil::checked_encoded_size(document).map_err(CommandError::bad_value)?;
    if size > MAX_BSON_OBJECT_SIZE as usize {
        return Err(CommandError::new(
            ErrorCode::BSONObjectTooLarge,
            format!("object to insert too large. size in bytes: {size}, max size: {MAX_BSON_OBJECT_SIZE}"),
        ));
    }
    Ok(())
}

/// Everything one write command works with: the collection as visible at the command's time, and
/// how to write.
pub(crate) struct WriteContext<'a> {
    ctx: &'a CommandContext<'a>,
    view: CollectionView,
    options: WriteOptions,
    /// The command's `let` variables.
    variables: CommandVariables,
    /// The collection's validator as the command sees it; `None` without one, when it checks
    /// nothing, or when the command bypasses validation.
    validator: Option<Arc<CollectionValidator>>,
    /// A time-series collection's settings: every written measurement is checked and laid out
    /// by them, whatever the command bypasses.
    timeseries: Option<Timeseries>,
    /// The retryable write this writer's statements belong to: each write commits its
    /// statement's record with it (`commands::retryable`).
    retry: Option<Arc<RetryableWrite>>,
}

/// What became of one document an update matched.
enum Updated {
    /// Written; the new document.
    Modified(Document),
    /// The update changed nothing; the document as it is.
    Unchanged(Document),
    /// Deleted, expired or no longer matching by the time the update retried.
    Gone,
}

impl<'a> WriteContext<'a> {
    async fn load(ctx: &'a CommandContext<'a>, body: &Document) -> CommandResult<WriteContext<'a>> {
        let ns = collection_namespace(ctx, body)?;
        validate_writable_namespace(&ns)?;
        let options = write_options(ctx, body)?;
        let variables = let_variables(ctx, body)?;
        let writer = WriteContext::open(ctx, &ns, options, variables).await?;
        Ok(writer.bypassing_validation(validation::bypass_requested(body)))
    }

    /// The writer of `ns` (a namespace already checked to be writable), seen now, for a command
    /// with `variables`; it holds the collection's policy gate until dropped.
    pub(crate) async fn open(
        ctx: &'a CommandContext<'a>,
        ns: &Namespace,
        options: WriteOptions,
        variables: CommandVariables,
    ) -> CommandResult<WriteContext<'a>> {
        let view = ctx.view(ns).await?;
        let validator = CollectionValidator::of(view.meta.as_ref())?;
        let timeseries = view
            .meta
            .as_ref()
            .and_then(|meta| timeseries::of(&meta.options));
        Ok(WriteContext {
            ctx,
            view,
            options,
            variables,
            validator,
            timeseries,
            retry: None,
        })
    }

    /// The same writer, recording its statements' writes in `retry`'s session.
    pub(crate) fn retrying(mut self, retry: Option<Arc<RetryableWrite>>) -> Self {
        self.retry = retry;
        self
    }

    /// The same writer, skipping document validation when `bypass` (the command's
    /// `bypassDocumentValidation`).
    pub(crate) fn bypassing_validation(mut self, bypass: bool) -> Self {
        if bypass {
            self.validator = None;
        }
        self
    }

    /// A document about to be written, as it will be stored: a time-series measurement checked
    /// and laid out (`timeseries::measurement`), then checked against the collection's
    /// validator; `replaced` is the document an update replaces.
    fn checked(&self, document: Document, replaced: Option<&Document>) -> CommandResult<Document> {
        let document = match &self.timeseries {
            Some(timeseries) => timeseries::measurement(timeseries, document)?,
            None => document,
        };
        if let Some(validator) = &self.validator {
            validator.check(&document, replaced)?;
        }
        Ok(document)
    }

    /// Whether the collection existed when this writer was opened (a writer opened before a
    /// write created its collection does not see it).
    pub(crate) fn collection_existed(&self) -> bool {
        self.view.meta.is_some()
    }

    fn storage(&self) -> &'a dyn Storage {
        self.ctx.storage()
    }

    fn now_ms(&self) -> i64 {
        self.view.visibility.now_ms
    }

    /// The last-write time and TTL class of `document` written now.
    fn meta(&self, document: &Document) -> WriteMeta {
        WriteMeta {
            last_write_ms: self.now_ms(),
            ttl: ttl::ttl_class(document, self.now_ms()),
        }
    }

    /// The insert of `doc`, once it passes the checks (`checked`).
    fn insert_op(&self, doc: Document) -> CommandResult<WriteOp> {
        Ok(self.insert_of(self.checked(doc, None)?))
    }

    /// The insert of a checked document.
    fn insert_of(&self, doc: Document) -> WriteOp {
        WriteOp::Insert {
            meta: self.meta(&doc),
            doc,
            supersede: self
                .view
                .visibility
                .policies
                .expired_predicate(self.now_ms()),
        }
    }

    /// A stored document, if it is still there, visible and matching `filter`.
    async fn reread(&self, id: &Bson, filter: &Filter) -> CommandResult<Option<Record>> {
        match self.storage().get(&self.view.ns, id).await? {
            Some(record)
                if self.view.visibility.is_visible(&record)
                    && filter.try_matches(&record.doc)? =>
            {
                Ok(Some(record))
            }
            _ => Ok(None),
        }
    }

    /// Writes `ops` in order, committing `record` (a retryable write's session record) with
    /// them; per operation, success or the error to report.
    async fn write(
        &self,
        ops: Vec<WriteOp>,
        record: Option<RecordSession>,
    ) -> CommandResult<Vec<Result<WriteOutcome, StorageError>>> {
        let results = self.commit(ops, self.options, record).await?;
        // `awaitData` cursors on a capped collection wait for its inserts.
        if self
            .view
            .meta
            .as_ref()
            .is_some_and(|meta| meta.capped().is_some())
        {
            tideway_exec::capped::INSERTED.notify_waiters();
        }
        Ok(results)
    }

    /// One operation as its own batch (`before`: the document it replaces or deletes), with
    /// the record of the retryable write's current statement.
    async fn write_one(
        &self,
        op: WriteOp,
        before: Option<&Document>,
    ) -> Result<WriteOutcome, StorageError> {
        let options = WriteOptions {
            ordered: true,
            ..self.options
        };
        let record = self
            .retry
            .as_ref()
            .and_then(|retry| retry.record_for(&op, before));
        self.commit(vec![op], options, record)
            .await?
            .pop()
            .unwrap_or(Err(StorageError::Io("storage returned no result".into())))
    }

    /// Commits `ops` to the collection; in a retryable write, with the write's claim and
    /// `record` (see `commands::retryable`).
    async fn commit(
        &self,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        record: Option<RecordSession>,
    ) -> Result<Vec<Result<WriteOutcome, StorageError>>, StorageError> {
        let ns = &self.view.ns;
        let Some(retry) = &self.retry else {
            return self.storage().write(ns, ops, options).await;
        };
        let (claim, record) = retry.session_write(record);
        let result = self
            .storage()
            .write_recorded(ns, ops, options, claim, record)
            .await;
        retry.settle(&result);
        result
    }

    /// Applies `update` to the matched `record`, retrying on write conflicts.
    async fn update_record(
        &self,
        filter: &Filter,
        update: &Update,
        mut record: Record,
    ) -> CommandResult<Updated> {
        for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
            let mut document = record.doc.document().clone();
            let context = UpdateContext {
                matched_array_index: filter.match_position(&record.doc).flatten(),
                collation: filter.collation().clone(),
                ..UpdateContext::new(bson::DateTime::from_millis(self.now_ms()))
            };
            if !update.apply(&mut document, &context)? {
                return Ok(Updated::Unchanged(document));
            }
            check_storable(&document, StorageWrite::Update)?;
            let document = self.checked(document, Some(record.doc.document()))?;
            let id = document_id(&record.doc);
            let op = WriteOp::Replace {
                replacement: update.is_replacement(),
                id: id.clone(),
                expected_rev: record.rev,
                meta: self.meta(&document),
                doc: document.clone(),
                supersede: self
                    .view
                    .visibility
                    .policies
                    .expired_predicate(self.now_ms()),
            };
            match self.write_one(op, Some(record.doc.document())).await {
                Ok(_) => return Ok(Updated::Modified(document)),
                // In a transaction a conflict is final: its snapshot will not change.
                Err(error @ StorageError::WriteConflict) if self.ctx.txn.is_some() => {
                    return Err(error.into())
                }
                Err(StorageError::WriteConflict) => match self.reread(&id, filter).await? {
                    Some(fresh) => record = fresh,
                    None => return Ok(Updated::Gone),
                },
                Err(error) => return Err(error.into()),
            }
        }
        Err(conflict_gave_up("update"))
    }

    /// Deletes a matched record, re-reading it on write conflicts; the deleted document, or `None`
    /// if it vanished, expired or stopped matching.
    async fn delete_record(
        &self,
        filter: &Filter,
        mut record: Record,
    ) -> CommandResult<Option<Document>> {
        for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
            let id = document_id(&record.doc);
            let op = WriteOp::Delete {
                id: id.clone(),
                expected_rev: Some(record.rev),
            };
            match self.write_one(op, Some(record.doc.document())).await {
                Ok(_) => return Ok(Some(record.doc.into_document())),
                Err(error @ StorageError::WriteConflict) if self.ctx.txn.is_some() => {
                    return Err(error.into())
                }
                Err(StorageError::WriteConflict) => match self.reread(&id, filter).await? {
                    Some(fresh) => record = fresh,
                    None => return Ok(None),
                },
                Err(error) => return Err(error.into()),
            }
        }
        Err(conflict_gave_up("delete"))
    }

    /// Inserts the document an upsert creates; `Ok(None)` if a concurrent writer inserted the same
    /// `_id` first (the caller then updates that document instead).
    async fn upsert_insert(
        &self,
        filter: &Filter,
        update: &Update,
    ) -> CommandResult<Option<Document>> {
        let document = upsert_document(
            filter,
            update,
            &UpdateContext {
                collation: filter.collation().clone(),
                ..UpdateContext::new(bson::DateTime::from_millis(self.now_ms()))
            },
        )?;
        check_id(&document_id(&document))?;
        check_storable(&document, StorageWrite::Update)?;
        let document = self.checked(document, None)?;
        match self.write_one(self.insert_of(document.clone()), None).await {
            Ok(_) => Ok(Some(document)),
            Err(StorageError::DuplicateKey { index, .. })
                if index == "_id_" && filter.id_equality().is_some() =>
            {
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// A statement's filter (its field `field`, seeing `variables`) under the statement's
    /// collation (its own, or the collection's default), after its `hint` is checked; and that
    /// collation.
    fn statement_filter(
        &self,
        command: &str,
        statement: &Document,
        field: &str,
        variables: &CommandVariables,
    ) -> CommandResult<(Arc<Filter>, CollationChoice)> {
        let collation = collation_for(command, statement, self.view.meta.as_ref())?;
        check_hint(&self.view.ns, self.view.meta.as_ref(), statement)?;
        let filter = optional_document(self.ctx, statement, field)?
            .cloned()
            .unwrap_or_default();
        let filter = with_command_variables(variables, || Filter::parse(&filter))?;
        Ok((
            Arc::new(filter.with_collation(collation.clone())),
            collation,
        ))
    }

    /// The query a statement's filter, sort and `hint` make.
    fn query(&self, filter: &Arc<Filter>, sort: Option<&SortSpec>, statement: &Document) -> Query {
        Query {
            filter: filter.clone(),
            sort: sort.cloned(),
            wanted: None,
            hint: planner::resolve_hint(self.view.meta.as_ref(), statement.get("hint")),
            needed_fields: None,
        }
    }

    async fn find_all(&self, query: &Query) -> CommandResult<Vec<Record>> {
        let (records, report) = planner::find_all(
            self.storage(),
            &self.ctx.state.plan_cache,
            &self.view,
            query,
        )
        .await?;
        self.report(report);
        Ok(records)
    }

    async fn first_match(&self, query: &Query) -> CommandResult<Option<Record>> {
        let query = Query {
            wanted: Some(1),
            ..query.clone()
        };
        let (first, report) = planner::first_match(
            self.storage(),
            &self.ctx.state.plan_cache,
            &self.view,
            &query,
        )
        .await?;
        self.report(report);
        Ok(first)
    }

    /// Tells the running op how the write's read went (`currentOp`, the profiler).
    fn report(&self, report: planner::ReadReport) {
        self.ctx.op.set_plan_summary(report.plan_summary);
        self.ctx
            .op
            .add_examined(report.stats.keys_examined, report.stats.docs_examined);
    }
}

async fn insert(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    retryable::run(ctx, body, None, |retry| insert_attempt(ctx, body, retry)).await
}

async fn insert_attempt(
    ctx: &CommandContext<'_>,
    body: &Document,
    retry: Option<Arc<RetryableWrite>>,
) -> CommandResult {
    let writer = WriteContext::load(ctx, body).await?.retrying(retry.clone());
    let documents = batch(ctx, body, "documents")?;
    // A retry inserts only the documents whose statements did not run; positions map back.
    let (positions, pending): (Vec<usize>, Vec<&Document>) = documents
        .iter()
        .enumerate()
        .filter(|(position, _)| {
            retry
                .as_ref()
                .is_none_or(|retry| retry.executed(retry.stmt_id(*position)).is_none())
        })
        .map(|(position, document)| (position, *document))
        .unzip();
    if let Some(retry) = &retry {
        retry.set_insert_positions(&positions);
    }
    let outcome = insert_documents(&writer, &pending).await?;
    let errors = outcome
        .errors
        .iter()
        .map(|(index, error)| write_error(positions[*index], error))
        .collect();
    let inserted = outcome.inserted + (documents.len() - pending.len());
    let mut reply = batch_reply(inserted, errors, Document::new());
    if let Some(retry) = &retry {
        retry.finish(&mut reply);
    }
    Ok(reply)
}

/// What inserting a batch did: how many documents were written, and the failures by position in
/// the batch, in order.
pub(crate) struct InsertOutcome {
    pub(crate) inserted: usize,
    pub(crate) errors: Vec<(usize, CommandError)>,
}

/// Inserts `documents` through `writer` (ordered: up to the first failure, whichever it is) and
/// counts them for `serverStatus.opcounters` and the running op.
pub(crate) async fn insert_documents(
    writer: &WriteContext<'_>,
    documents: &[&Document],
) -> CommandResult<InsertOutcome> {
    let mut errors = Vec::new();
    let mut inserted = 0;
    // Valid documents go to storage in runs; an invalid one ends the run (and, ordered, the batch).
    let mut run: Vec<(usize, WriteOp)> = Vec::new();
    let mut stopped = false;
    for (index, document) in documents.iter().enumerate() {
        match prepare_for_insert(document).and_then(|doc| writer.insert_op(doc)) {
            Ok(op) => run.push((index, op)),
            Err(error) => {
                if writer.options.ordered {
                    // Documents before the invalid one are still written; the batch stops at the
                    // first error, whichever it is.
                    let (n, run_errors) = write_run(writer, std::mem::take(&mut run)).await?;
                    inserted += n;
                    if run_errors.is_empty() {
                        errors.push((index, error));
                    } else {
                        errors.extend(run_errors);
                    }
                    stopped = true;
                    break;
                }
                errors.push((index, error));
            }
        }
    }
    if !stopped {
        let (n, run_errors) = write_run(writer, run).await?;
        inserted += n;
        errors.extend(run_errors);
    }
    errors.sort_by_key(|(index, _)| *index);
    bump(&writer.ctx.state.stats.opcounters.insert, inserted as u64);
    writer.ctx.op.add_inserted(inserted);
    Ok(InsertOutcome { inserted, errors })
}

/// Writes a run of operations tagged with their batch index; returns (successes, failures).
async fn write_run(
    writer: &WriteContext<'_>,
    run: Vec<(usize, WriteOp)>,
) -> CommandResult<(usize, Vec<(usize, CommandError)>)> {
    if run.is_empty() {
        return Ok((0, Vec::new()));
    }
    let (indexes, ops): (Vec<usize>, Vec<WriteOp>) = run.into_iter().unzip();
    let record = writer.retry.as_ref().map(|retry| {
        retry.record_inserts(
            indexes
                .iter()
                .map(|index| retry.insert_stmt_id(*index))
                .collect(),
        )
    });
    let results = writer.write(ops, record).await?;
    let mut succeeded = 0;
    let mut errors = Vec::new();
    for (index, result) in indexes.into_iter().zip(results) {
        match result {
            Ok(_) => succeeded += 1,
            Err(error) => errors.push((index, CommandError::from(error))),
        }
    }
    Ok((succeeded, errors))
}

/// The outcome of one update statement.
pub(crate) struct StatementOutcome {
    pub(crate) matched: usize,
    pub(crate) modified: usize,
    pub(crate) upserted_id: Option<Bson>,
}

impl StatementOutcome {
    /// The outcome a retryable write recorded for the statement (`commands::retryable`).
    pub(crate) fn recorded(entry: &Document) -> StatementOutcome {
        let count = |field: &str| {
            entry
                .get(field)
                .and_then(tideway_base::bsonutil::as_f64)
                .map_or(0, |n| n as usize)
        };
        StatementOutcome {
            matched: count("n"),
            modified: count("nModified"),
            upserted_id: entry.get("upserted").cloned(),
        }
    }
}

/// The update of a statement (`u`, `update`: a document or a pipeline; `None` when absent) with
/// its `arrayFilters` (`array_filters`, checked to be an array by the command's schema).
/// The variables a statement sees: the command's `let` (`variables`), then the statement's own
/// constants `c` (allowed with a pipeline update only: mongod's 51198 otherwise).
pub(crate) fn statement_variables(
    ctx: &CommandContext,
    statement: &Document,
    variables: &CommandVariables,
) -> CommandResult<CommandVariables> {
    match optional_document(ctx, statement, "c")? {
        None => Ok(variables.clone()),
        Some(constants) => variables.with(constants),
    }
}

/// The update of a statement (its field `field`, shown in errors as `shown`: a document or a
/// pipeline; `None` when absent) with its `arrayFilters`, its `$expr`s and pipeline stages
/// seeing the statement's `variables` ([`statement_variables`]).
pub(crate) fn parse_update(
    ctx: &CommandContext,
    statement: &Document,
    field: &str,
    shown: &str,
    variables: &CommandVariables,
) -> CommandResult<Option<Update>> {
    let array_filters = match statement.get("arrayFilters") {
        Some(Bson::Array(filters)) => {
            with_command_variables(variables, || parse_array_filters(filters))?
        }
        _ => Vec::new(),
    };
    match statement.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Array(stages)) => Ok(Some(with_command_variables(variables, || {
            Update::parse_pipeline(stages, &array_filters)
        })?)),
        Some(_) if statement.contains_key("c") => Err(CommandError::new(
            ErrorCode::Location51198,
            "Constant values may only be specified for pipeline updates",
        )),
        Some(Bson::Document(update)) => Ok(Some(Update::parse_with_array_filters(
            update,
            array_filters,
        )?)),
        Some(other) => Err(CommandError::wrong_type(ctx.name, shown, other, "object")),
    }
}

/// mongod 8.0: a statement's `sort` chooses the one document a single update changes; with
/// `multi` it is refused.
pub(crate) fn check_sort_with_multi(statement: &Document) -> CommandResult<()> {
    let sorted = statement
        .get("sort")
        .is_some_and(|sort| *sort != Bson::Null);
    if sorted && statement.get("multi") == Some(&Bson::Boolean(true)) {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "Cannot specify sort with multi=true",
        ));
    }
    Ok(())
}

/// Runs one update statement and counts it (`serverStatus.opcounters`, the running op).
pub(crate) async fn apply_update_statement(
    writer: &WriteContext<'_>,
    statement: &Document,
) -> CommandResult<StatementOutcome> {
    bump(&writer.ctx.state.stats.opcounters.update, 1);
    let outcome = run_update_statement(writer, statement).await?;
    let upserted = usize::from(outcome.upserted_id.is_some());
    writer
        .ctx
        .op
        .add_updated(outcome.matched - upserted, outcome.modified, upserted);
    Ok(outcome)
}

async fn run_update_statement(
    writer: &WriteContext<'_>,
    statement: &Document,
) -> CommandResult<StatementOutcome> {
    let ctx = writer.ctx;
    check_sort_with_multi(statement)?;
    let variables = statement_variables(ctx, statement, &writer.variables)?;
    let (filter, collation) = writer.statement_filter("update", statement, "q", &variables)?;
    let sort = optional_document(ctx, statement, "sort")?
        .map(SortSpec::parse)
        .transpose()?
        .map(|sort| sort.with_collation(collation));
    let query = writer.query(&filter, sort.as_ref(), statement);
    let update = parse_update(ctx, statement, "u", "updates.u", &variables)?.ok_or_else(|| {
        CommandError::new(
            ErrorCode::Location40414,
            "BSON field 'update.updates.u' is missing but a required field",
        )
    })?;
    let multi = optional_bool(ctx, statement, "multi")?.unwrap_or(false);
    let upsert = optional_bool(ctx, statement, "upsert")?.unwrap_or(false);
    if multi && update.is_replacement() {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "multi update is not supported for replacement-style update",
        ));
    }
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let matches = if multi {
            writer.find_all(&query).await?
        } else {
            writer.first_match(&query).await?.into_iter().collect()
        };
        let mut outcome = StatementOutcome {
            matched: 0,
            modified: 0,
            upserted_id: None,
        };
        for record in matches {
            match writer.update_record(&filter, &update, record).await? {
                Updated::Modified(_) => {
                    outcome.matched += 1;
                    outcome.modified += 1;
                }
                Updated::Unchanged(_) => outcome.matched += 1,
                Updated::Gone => {}
            }
        }
        if outcome.matched > 0 || !upsert {
            return Ok(outcome);
        }
        if let Some(document) = writer.upsert_insert(&filter, &update).await? {
            outcome.matched = 1;
            outcome.upserted_id = Some(document_id(&document));
            return Ok(outcome);
        }
        // Lost an upsert race on `_id`: the document now exists, so run the statement again.
    }
    Err(conflict_gave_up("upsert"))
}

async fn update(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    retryable::run(ctx, body, None, |retry| update_attempt(ctx, body, retry)).await
}

async fn update_attempt(
    ctx: &CommandContext<'_>,
    body: &Document,
    retry: Option<Arc<RetryableWrite>>,
) -> CommandResult {
    let writer = WriteContext::load(ctx, body).await?.retrying(retry.clone());
    let statements = batch(ctx, body, "updates")?;
    let (mut matched, mut modified) = (0, 0);
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    for (index, statement) in statements.into_iter().enumerate() {
        // mongod refuses this combination for the whole command, not as a write error.
        check_sort_with_multi(statement)?;
        let result = match &retry {
            Some(retry) => {
                let stmt_id = retry.stmt_id(index);
                if statement.get("multi") == Some(&Bson::Boolean(true)) {
                    Err(retryable::refuse_multi("multi=true"))
                } else if let Some(entry) = retry.executed(stmt_id) {
                    Ok(StatementOutcome::recorded(&entry))
                } else {
                    retry.start_statement(stmt_id, StatementKind::Update);
                    apply_update_statement(&writer, statement).await
                }
            }
            None => apply_update_statement(&writer, statement).await,
        };
        match result {
            Ok(outcome) => {
                matched += outcome.matched;
                modified += outcome.modified;
                if let Some(id) = outcome.upserted_id {
                    upserted.push(doc! {"index": index as i32, "_id": id});
                }
            }
            Err(error) => {
                errors.push(write_error(index, &error));
                if writer.options.ordered {
                    break;
                }
            }
        }
    }
    let mut extra = doc! {"nModified": modified as i32};
    if !upserted.is_empty() {
        extra.insert("upserted", upserted);
    }
    let mut reply = batch_reply(matched, errors, extra);
    if let Some(retry) = &retry {
        retry.finish(&mut reply);
    }
    Ok(reply)
}

/// Runs one delete statement and counts it (`serverStatus.opcounters`, the running op).
pub(crate) async fn apply_delete_statement(
    writer: &WriteContext<'_>,
    statement: &Document,
) -> CommandResult<usize> {
    bump(&writer.ctx.state.stats.opcounters.delete, 1);
    let deleted = run_delete_statement(writer, statement).await?;
    writer.ctx.op.add_deleted(deleted);
    Ok(deleted)
}

async fn run_delete_statement(
    writer: &WriteContext<'_>,
    statement: &Document,
) -> CommandResult<usize> {
    let (filter, _) = writer.statement_filter("delete", statement, "q", &writer.variables)?;
    let query = writer.query(&filter, None, statement);
    let limit = match statement.get("limit") {
        Some(value @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            tideway_base::bsonutil::as_f64(value).unwrap_or(0.0)
        }
        Some(other) => {
            return Err(CommandError::wrong_type(
                "delete",
                "deletes.limit",
                other,
                "int",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'delete.deletes.limit' is missing but a required field",
            ))
        }
    };
    if limit != 0.0 && limit != 1.0 {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            format!("The limit field in delete objects must be 0 or 1. Got {limit}"),
        ));
    }
    if limit == 1.0 {
        // Retry while the first match is taken by a concurrent writer, so one matching document
        // that stays is deleted.
        for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
            let Some(record) = writer.first_match(&query).await? else {
                return Ok(0);
            };
            if writer.delete_record(&filter, record).await?.is_some() {
                return Ok(1);
            }
        }
        return Err(conflict_gave_up("delete"));
    }
    let mut deleted = 0;
    for record in writer.find_all(&query).await? {
        if writer.delete_record(&filter, record).await?.is_some() {
            deleted += 1;
        }
    }
    Ok(deleted)
}

async fn delete(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    retryable::run(ctx, body, None, |retry| delete_attempt(ctx, body, retry)).await
}

async fn delete_attempt(
    ctx: &CommandContext<'_>,
    body: &Document,
    retry: Option<Arc<RetryableWrite>>,
) -> CommandResult {
    let writer = WriteContext::load(ctx, body).await?.retrying(retry.clone());
    let statements = batch(ctx, body, "deletes")?;
    let mut deleted = 0;
    let mut errors = Vec::new();
    for (index, statement) in statements.into_iter().enumerate() {
        let result = match &retry {
            Some(retry) => {
                let stmt_id = retry.stmt_id(index);
                let limit = statement
                    .get("limit")
                    .and_then(tideway_base::bsonutil::as_f64);
                if limit == Some(0.0) {
                    Err(retryable::refuse_multi("limit=0"))
                } else if let Some(entry) = retry.executed(stmt_id) {
                    Ok(StatementOutcome::recorded(&entry).matched)
                } else {
                    retry.start_statement(stmt_id, StatementKind::Delete);
                    apply_delete_statement(&writer, statement).await
                }
            }
            None => apply_delete_statement(&writer, statement).await,
        };
        match result {
            Ok(n) => deleted += n,
            Err(error) => {
                errors.push(write_error(index, &error));
                if writer.options.ordered {
                    break;
                }
            }
        }
    }
    let mut reply = batch_reply(deleted, errors, Document::new());
    if let Some(retry) = &retry {
        retry.finish(&mut reply);
    }
    Ok(reply)
}

async fn find_and_modify(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    retryable::run(ctx, body, None, |retry| {
        find_and_modify_attempt(ctx, body, retry)
    })
    .await
}

async fn find_and_modify_attempt(
    ctx: &CommandContext<'_>,
    body: &Document,
    retry: Option<Arc<RetryableWrite>>,
) -> CommandResult {
    let writer = WriteContext::load(ctx, body).await?.retrying(retry.clone());
    let (filter, collation) =
        writer.statement_filter("findAndModify", body, "query", &writer.variables)?;
    let sort = optional_document(ctx, body, "sort")?
        .map(SortSpec::parse)
        .transpose()?
        .map(|sort| sort.with_collation(collation));
    let query = writer.query(&filter, sort.as_ref(), body);
    let projection = parse_projection(ctx, body, "fields", &writer.variables)?;
    let remove = optional_bool(ctx, body, "remove")?.unwrap_or(false);
    let return_new = optional_bool(ctx, body, "new")?.unwrap_or(false);
    let upsert = optional_bool(ctx, body, "upsert")?.unwrap_or(false);
    let update = parse_update(ctx, body, "update", "update", &writer.variables)?;
    let conflict = match (&update, remove) {
        (Some(_), true) => Some("Cannot specify both an update and remove=true"),
        (None, false) => Some("Either an update or remove=true must be specified"),
        (None, true) if upsert => Some("Cannot specify both upsert=true and remove=true"),
        (None, true) if return_new => {
            Some("Cannot specify both new=true and remove=true; 'remove' always returns the deleted document")
        }
        _ => None,
    };
    if let Some(message) = conflict {
        return Err(CommandError::new(ErrorCode::FailedToParse, message));
    }
    // A positional `a.$` takes the array position the query matches in the returned document.
    let project = |document: Document| -> CommandResult<Document> {
        let Some(projection) = &projection else {
            return Ok(document);
        };
        let position = if projection.has_positional() {
            filter.match_position(&document).flatten()
        } else {
            None
        };
        projection
            .apply_find(
                &document,
                &|_| Bson::Null,
                position,
                filter.collation().as_deref(),
            )
            .map_err(|error| error.caused("Plan executor error during findAndModify"))
    };
    if let Some(retry) = &retry {
        let stmt_id = retry.stmt_id(0);
        if let Some(mut entry) = retry.executed(stmt_id) {
            // The image the first attempt returned, under this command's projection (as mongod).
            if let Ok(image) = entry.get_document("value") {
                let projected = project(image.clone())?;
                entry.insert("value", projected);
            }
            retry.finish(&mut entry);
            return Ok(entry);
        }
        retry.start_statement(stmt_id, StatementKind::FindAndModify { return_new });
    }
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let first = writer.first_match(&query).await?;
        match (first, &update) {
            (Some(record), None) => {
                bump(&ctx.state.stats.opcounters.delete, 1);
                if let Some(removed) = writer.delete_record(&filter, record).await? {
                    ctx.op.add_deleted(1);
                    return Ok(doc! {"lastErrorObject": {"n": 1}, "value": project(removed)?});
                }
            }
            (Some(record), Some(update)) => {
                bump(&ctx.state.stats.opcounters.update, 1);
                let before = record.doc.document().clone();
                let after = match writer.update_record(&filter, update, record).await? {
                    Updated::Modified(after) | Updated::Unchanged(after) => after,
                    Updated::Gone => continue,
                };
                ctx.op.add_updated(1, usize::from(before != after), 0);
                let value = project(if return_new { after } else { before })?;
                return Ok(
                    doc! {"lastErrorObject": {"n": 1, "updatedExisting": true}, "value": value},
                );
            }
            (None, Some(update)) if upsert => {
                bump(&ctx.state.stats.opcounters.update, 1);
                if let Some(document) = writer.upsert_insert(&filter, update).await? {
                    ctx.op.add_updated(0, 0, 1);
                    let id = document_id(&document);
                    let value = if return_new {
                        Bson::Document(project(document)?)
                    } else {
                        Bson::Null
                    };
                    return Ok(doc! {
                        "lastErrorObject": {"n": 1, "updatedExisting": false, "upserted": id},
                        "value": value,
                    });
                }
            }
            (None, update) => {
                let mut last_error = doc! {"n": 0};
                if update.is_some() {
                    last_error.insert("updatedExisting", false);
                }
                return Ok(doc! {"lastErrorObject": last_error, "value": Bson::Null});
            }
        }
    }
    Err(conflict_gave_up("findAndModify"))
}
