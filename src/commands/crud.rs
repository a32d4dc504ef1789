//! Writes: `insert`, `update`, `delete`, `findAndModify`, with mongod's reply shapes (`n`,
//! `nModified`, `upserted`, positional `writeErrors`, `lastErrorObject`).
//!
//! Updates are read → apply operators (`query::update`) → `Replace` with the revision read; a
//! `WriteConflict` means another writer got there first, so the document is re-read, re-matched and
//! the update re-applied. Every document update is therefore atomic, and concurrent `$inc`s add up.

use std::sync::Arc;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::commands::args::{
    batch, collection_namespace, optional_bool, optional_document, validate_writable_namespace,
    write_options, wrong_type,
};
use crate::commands::find::parse_projection;
use crate::dispatch::{CommandContext, CommandSpec};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::exec::{self, document_id};
use crate::query::{upsert_document, Filter, SortSpec, Update, UpdateContext};
use crate::state::bump;
use crate::storage::{
    Namespace, Record, StorageError, WriteMeta, WriteOp, WriteOptions, WriteOutcome,
};
use crate::wire::MAX_BSON_OBJECT_SIZE;

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

/// The reply of a batch write: `n`, then `writeErrors` if any, then the command's extra fields.
fn batch_reply(n: usize, errors: Vec<Document>, extra: Document) -> Document {
    let mut reply = doc! {"n": n as i32};
    reply.extend(extra);
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    reply
}

fn now_meta(ctx: &CommandContext) -> WriteMeta {
    WriteMeta {
        last_write_ms: ctx.state.clock.now_ms(),
    }
}

/// A document as it will be stored: `_id` first (generated if absent), within the size limit.
fn prepare_for_insert(mut document: Document) -> CommandResult<Document> {
    let id = document
        .remove("_id")
        .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    check_id(&id)?;
    let mut stored = doc! {"_id": id};
    stored.extend(document);
    check_size(&stored)?;
    Ok(stored)
}

fn check_id(id: &Bson) -> CommandResult<()> {
    match id {
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined => Err(CommandError::new(
            ErrorCode::InvalidIdField,
            format!(
                "The '_id' value cannot be of type {}",
                crate::query::display::type_name(id)
            ),
        )),
        _ => Ok(()),
    }
}

fn check_size(document: &Document) -> CommandResult<()> {
    let size = bson::to_vec(document)
        .map_err(|e| CommandError::bad_value(e.to_string()))?
        .len();
    if size > MAX_BSON_OBJECT_SIZE as usize {
        return Err(CommandError::new(
            ErrorCode::BSONObjectTooLarge,
            format!("object to insert too large. size in bytes: {size}, max size: {MAX_BSON_OBJECT_SIZE}"),
        ));
    }
    Ok(())
}

async fn insert(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    let options = write_options(ctx, body)?;
    let documents = batch(ctx, body, "documents")?;
    let meta = now_meta(ctx);
    let mut errors = Vec::new();
    let mut inserted = 0;
    // Valid documents go to storage in runs; an invalid one ends the run (and, ordered, the batch).
    let mut run: Vec<(usize, WriteOp)> = Vec::new();
    let mut stopped = false;
    for (index, document) in documents.into_iter().enumerate() {
        match prepare_for_insert(document.clone()) {
            Ok(doc) => run.push((index, WriteOp::Insert { doc, meta })),
            Err(error) => {
                if options.ordered {
                    // Documents before the invalid one are still written; the batch stops at the
                    // first error, whichever it is.
                    let (n, run_errors) =
                        write_run(ctx, &ns, std::mem::take(&mut run), options).await?;
                    inserted += n;
                    if run_errors.is_empty() {
                        errors.push(write_error(index, &error));
                    } else {
                        errors.extend(run_errors);
                    }
                    stopped = true;
                    break;
                }
                errors.push(write_error(index, &error));
            }
        }
    }
    if !stopped {
        let (n, run_errors) = write_run(ctx, &ns, run, options).await?;
        inserted += n;
        errors.extend(run_errors);
    }
    errors.sort_by_key(|error| error.get_i32("index").unwrap_or(0));
    bump(&ctx.state.stats.opcounters.insert, inserted as u64);
    Ok(batch_reply(inserted, errors, Document::new()))
}

/// Writes a run of operations tagged with their batch index; returns (successes, writeErrors).
async fn write_run(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    run: Vec<(usize, WriteOp)>,
    options: WriteOptions,
) -> CommandResult<(usize, Vec<Document>)> {
    if run.is_empty() {
        return Ok((0, Vec::new()));
    }
    let (indexes, ops): (Vec<usize>, Vec<WriteOp>) = run.into_iter().unzip();
    let results = ctx.state.storage.write(ns, ops, options).await?;
    let mut succeeded = 0;
    let mut errors = Vec::new();
    for (index, result) in indexes.into_iter().zip(results) {
        match result {
            Ok(_) => succeeded += 1,
            Err(error) => errors.push(write_error(index, &CommandError::from(error))),
        }
    }
    Ok((succeeded, errors))
}

/// What became of one document an update matched.
enum Updated {
    /// Written; the new document.
    Modified(Document),
    /// The update changed nothing; the document as it is.
    Unchanged(Document),
    /// Deleted, or no longer matching, by the time the update retried.
    Gone,
}

/// Applies `update` to the matched `record`, retrying on write conflicts.
async fn update_record(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: &Filter,
    update: &Update,
    mut record: Record,
    options: WriteOptions,
) -> CommandResult<Updated> {
    let storage = ctx.state.storage.as_ref();
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let mut document = record.doc.clone();
        let context = UpdateContext {
            matched_array_index: filter.match_position(&record.doc).flatten(),
            ..UpdateContext::new(ctx.state.clock.now())
        };
        if !update.apply(&mut document, &context)? {
            return Ok(Updated::Unchanged(document));
        }
        check_size(&document)?;
        let id = document_id(&record.doc);
        let op = WriteOp::Replace {
            id: id.clone(),
            expected_rev: record.rev,
            doc: document.clone(),
            meta: now_meta(ctx),
        };
        match single_write(ctx, ns, op, options).await {
            Ok(_) => return Ok(Updated::Modified(document)),
            Err(StorageError::WriteConflict) => match storage.get(ns, &id).await? {
                Some(fresh) if filter.matches(&fresh.doc) => record = fresh,
                _ => return Ok(Updated::Gone),
            },
            Err(error) => return Err(error.into()),
        }
    }
    Err(CommandError::new(
        ErrorCode::WriteConflict,
        "the document kept changing under the update; gave up after repeated write conflicts",
    ))
}

/// One operation as its own batch; its result.
async fn single_write(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    op: WriteOp,
    options: WriteOptions,
) -> Result<WriteOutcome, StorageError> {
    let options = WriteOptions {
        ordered: true,
        ..options
    };
    ctx.state
        .storage
        .write(ns, vec![op], options)
        .await?
        .pop()
        .unwrap_or(Err(StorageError::Io("storage returned no result".into())))
}

/// Inserts the document an upsert creates; `Ok(None)` if a concurrent writer inserted the same
/// `_id` first (the caller then updates that document instead).
async fn upsert_insert(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: &Filter,
    update: &Update,
    options: WriteOptions,
) -> CommandResult<Option<Document>> {
    let document = upsert_document(filter, update, &UpdateContext::new(ctx.state.clock.now()))?;
    check_id(&document_id(&document))?;
    check_size(&document)?;
    let op = WriteOp::Insert {
        doc: document.clone(),
        meta: now_meta(ctx),
    };
    match single_write(ctx, ns, op, options).await {
        Ok(_) => Ok(Some(document)),
        Err(StorageError::DuplicateKey { index, .. })
            if index == "_id_" && filter.id_equality().is_some() =>
        {
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

/// The outcome of one update statement.
struct StatementOutcome {
    matched: usize,
    modified: usize,
    upserted_id: Option<Bson>,
}

async fn run_update_statement(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    statement: &Document,
    options: WriteOptions,
) -> CommandResult<StatementOutcome> {
    let filter = Arc::new(Filter::parse(
        optional_document(ctx, statement, "q")?.unwrap_or(&Document::new()),
    )?);
    let update = match statement.get("u") {
        Some(Bson::Document(update)) => Update::parse(update)?,
        Some(Bson::Array(_)) => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                "tideway does not support pipeline-style updates",
            ))
        }
        Some(other) => return Err(wrong_type("update", "updates.u", other, "object")),
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'update.updates.u' is missing but a required field",
            ))
        }
    };
    let multi = optional_bool(ctx, statement, "multi")?.unwrap_or(false);
    let upsert = optional_bool(ctx, statement, "upsert")?.unwrap_or(false);
    if multi && update.is_replacement() {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "multi update is not supported for replacement-style update",
        ));
    }
    let storage = ctx.state.storage.as_ref();
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let matches = if multi {
            exec::find_all(storage, ns, filter.clone(), None).await?
        } else {
            exec::first_match(storage, ns, filter.clone(), None)
                .await?
                .into_iter()
                .collect()
        };
        let mut outcome = StatementOutcome {
            matched: 0,
            modified: 0,
            upserted_id: None,
        };
        for record in matches {
            match update_record(ctx, ns, &filter, &update, record, options).await? {
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
        if let Some(document) = upsert_insert(ctx, ns, &filter, &update, options).await? {
            outcome.matched = 1;
            outcome.upserted_id = Some(document_id(&document));
            return Ok(outcome);
        }
        // Lost an upsert race on `_id`: the document now exists, so run the statement again.
    }
    Err(CommandError::new(
        ErrorCode::WriteConflict,
        "upsert kept conflicting with concurrent writers",
    ))
}

async fn update(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    let options = write_options(ctx, body)?;
    let statements = batch(ctx, body, "updates")?;
    let (mut matched, mut modified) = (0, 0);
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    for (index, statement) in statements.into_iter().enumerate() {
        bump(&ctx.state.stats.opcounters.update, 1);
        match run_update_statement(ctx, &ns, statement, options).await {
            Ok(outcome) => {
                matched += outcome.matched;
                modified += outcome.modified;
                if let Some(id) = outcome.upserted_id {
                    upserted.push(doc! {"index": index as i32, "_id": id});
                }
            }
            Err(error) => {
                errors.push(write_error(index, &error));
                if options.ordered {
                    break;
                }
            }
        }
    }
    let mut extra = doc! {"nModified": modified as i32};
    if !upserted.is_empty() {
        extra.insert("upserted", upserted);
    }
    Ok(batch_reply(matched, errors, extra))
}

async fn run_delete_statement(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    statement: &Document,
    options: WriteOptions,
) -> CommandResult<usize> {
    let filter = Arc::new(Filter::parse(
        optional_document(ctx, statement, "q")?.unwrap_or(&Document::new()),
    )?);
    let limit = match statement.get("limit") {
        Some(value @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            crate::bsonutil::as_f64(value).unwrap_or(0.0)
        }
        Some(other) => return Err(wrong_type("delete", "deletes.limit", other, "int")),
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
    let storage = ctx.state.storage.as_ref();
    if limit == 1.0 {
        // Retry while the first match is taken by a concurrent writer, so one matching document
        // that stays is deleted.
        for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
            let Some(record) = exec::first_match(storage, ns, filter.clone(), None).await? else {
                return Ok(0);
            };
            if delete_record(ctx, ns, &filter, record, options)
                .await?
                .is_some()
            {
                return Ok(1);
            }
        }
        return Err(CommandError::new(
            ErrorCode::WriteConflict,
            "delete kept conflicting with concurrent writers",
        ));
    }
    let mut deleted = 0;
    for record in exec::find_all(storage, ns, filter.clone(), None).await? {
        if delete_record(ctx, ns, &filter, record, options)
            .await?
            .is_some()
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Deletes a matched record, re-reading it on write conflicts; the deleted document, or `None` if
/// it vanished or stopped matching.
async fn delete_record(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: &Filter,
    mut record: Record,
    options: WriteOptions,
) -> CommandResult<Option<Document>> {
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let id = document_id(&record.doc);
        let op = WriteOp::Delete {
            id: id.clone(),
            expected_rev: Some(record.rev),
        };
        match single_write(ctx, ns, op, options).await {
            Ok(_) => return Ok(Some(record.doc)),
            Err(StorageError::WriteConflict) => match ctx.state.storage.get(ns, &id).await? {
                Some(fresh) if filter.matches(&fresh.doc) => record = fresh,
                _ => return Ok(None),
            },
            Err(error) => return Err(error.into()),
        }
    }
    Err(CommandError::new(
        ErrorCode::WriteConflict,
        "delete kept conflicting with concurrent writers",
    ))
}

async fn delete(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    let options = write_options(ctx, body)?;
    let statements = batch(ctx, body, "deletes")?;
    let mut deleted = 0;
    let mut errors = Vec::new();
    for (index, statement) in statements.into_iter().enumerate() {
        bump(&ctx.state.stats.opcounters.delete, 1);
        match run_delete_statement(ctx, &ns, statement, options).await {
            Ok(n) => deleted += n,
            Err(error) => {
                errors.push(write_error(index, &error));
                if options.ordered {
                    break;
                }
            }
        }
    }
    Ok(batch_reply(deleted, errors, Document::new()))
}

async fn find_and_modify(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    let options = write_options(ctx, body)?;
    let filter = Arc::new(Filter::parse(
        optional_document(ctx, body, "query")?.unwrap_or(&Document::new()),
    )?);
    let sort = optional_document(ctx, body, "sort")?
        .map(SortSpec::parse)
        .transpose()?;
    let projection = parse_projection(ctx, body, "fields")?;
    let remove = optional_bool(ctx, body, "remove")?.unwrap_or(false);
    let return_new = optional_bool(ctx, body, "new")?.unwrap_or(false);
    let upsert = optional_bool(ctx, body, "upsert")?.unwrap_or(false);
    let update = match body.get("update") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(update)) => Some(Update::parse(update)?),
        Some(Bson::Array(_)) => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                "tideway does not support pipeline-style updates",
            ))
        }
        Some(other) => return Err(wrong_type("findAndModify", "update", other, "object")),
    };
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
    let project = |document: Document| match &projection {
        Some(projection) => projection.apply(&document, &|_| Bson::Null),
        None => document,
    };
    let storage = ctx.state.storage.as_ref();
    for _ in 0..MAX_WRITE_CONFLICT_RETRIES {
        let first = exec::first_match(storage, &ns, filter.clone(), sort.as_ref()).await?;
        match (first, &update) {
            (Some(record), None) => {
                bump(&ctx.state.stats.opcounters.delete, 1);
                if let Some(removed) = delete_record(ctx, &ns, &filter, record, options).await? {
                    return Ok(doc! {"lastErrorObject": {"n": 1}, "value": project(removed)});
                }
            }
            (Some(record), Some(update)) => {
                bump(&ctx.state.stats.opcounters.update, 1);
                let before = record.doc.clone();
                let after = match update_record(ctx, &ns, &filter, update, record, options).await? {
                    Updated::Modified(after) | Updated::Unchanged(after) => after,
                    Updated::Gone => continue,
                };
                let value = project(if return_new { after } else { before });
                return Ok(
                    doc! {"lastErrorObject": {"n": 1, "updatedExisting": true}, "value": value},
                );
            }
            (None, Some(update)) if upsert => {
                bump(&ctx.state.stats.opcounters.update, 1);
                if let Some(document) = upsert_insert(ctx, &ns, &filter, update, options).await? {
                    let id = document_id(&document);
                    let value = if return_new {
                        Bson::Document(project(document))
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
    Err(CommandError::new(
        ErrorCode::WriteConflict,
        "findAndModify kept conflicting with concurrent writers",
    ))
}
