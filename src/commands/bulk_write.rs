//! `bulkWrite` (MongoDB 8.0): inserts, updates and deletes across namespaces in one command, run
//! against `admin`, answered with one result per op in a cursor (`admin.$cmd.bulkWrite`) and the
//! summary counts. This module owns reading the ops and `nsInfo` (after `schema` has checked the
//! field types), grouping consecutive inserts into one namespace, the ordered/unordered stop
//! rule, mongod's result items and the cursor. Every write goes through `crud`'s statement path
//! (`WriteContext`, `insert_documents`, `apply_update_statement`, `apply_delete_statement`), so
//! validation, TTL visibility, `serverStatus.opcounters` and the running op's counters are those
//! of `insert`, `update` and `delete`.
//!
//! With `txnNumber` (replica-set mode) the command is a retryable write (`commands::retryable`):
//! each op is a statement (stmtId: `stmtIds[idx]`, else `stmtId + idx`), an op already recorded
//! under the session's `txnNumber` is answered from the record (the result and counts the first
//! attempt reported, its stmtId in `retriedStmtIds`) without running, and a `multi: true` update
//! or delete fails as an op with mongod's 72.
//!
//! Invariants: the whole command is checked before anything is written (as mongod's parser and
//! `validateRequest` do: op kinds and fields, `stmtIds`, `nsInfo` indexes and namespaces); at most one
//! collection view, and so one policy gate, is held at a time; an interruption (`maxTimeMS`,
//! `killOp`) fails the command instead of becoming an op's error.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{
    let_variables, optional_bool, optional_document, optional_non_negative, validate_database_name,
    validate_writable_namespace, write_options,
};
use crate::commands::crud::{
    apply_delete_statement, apply_update_statement, insert_documents, StatementOutcome,
    WriteContext,
};
use crate::commands::find::{open_cursor, BatchOptions};
use crate::commands::retryable::{self, RetryableWrite, StatementKind};
use crate::cursor::{output_record, Cursor, CursorSource};
use tideway_base::bsonutil::{as_f64, encoded_size};
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::executor::Visibility;
use tideway_query::expr::command_variables::CommandVariables;
use tideway_storage::{Namespace, WriteOptions};
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "bulkWrite",
    aliases: &[],
    help: "Inserts, updates and deletes across collections in one command, with a result per op.",
    admin_only: true,
    test_only: false,
    handler: async_handler!(bulk_write),
}];

/// The namespace of the results cursor.
const CURSOR_NS: &str = "admin.$cmd.bulkWrite";

/// mongod's `bulkWriteMaxRepliesSize` default: results kept past this many bytes end the command
/// with an `ExceededMemoryLimit` result.
const MAX_REPLIES_BYTES: usize = 16 * 1024 * 1024;

/// One op, read and checked.
struct Op<'a> {
    /// Its position in `nsInfo`.
    ns: usize,
    kind: OpKind<'a>,
}

enum OpKind<'a> {
    Insert(&'a Document),
    /// The op as an `update` statement (`q`, `u`, ...), or the error mongod reports for it when
    /// it runs.
    Update(CommandResult<Document>),
    /// The op as a `delete` statement (`q`, `limit`, ...).
    Delete(Document),
}

async fn bulk_write(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    let ops = read_ops(body)?;
    let namespaces = read_namespaces(body)?;
    check_request(body, &ops, &namespaces)?;
    let stmt_ids = read_stmt_ids(body, ops.len())?;
    let options = write_options(ctx, body)?;
    let variables = let_variables(ctx, body)?;
    let errors_only = optional_bool(ctx, body, "errorsOnly")?.unwrap_or(false);
    let batch_size = match optional_document(ctx, body, "cursor")? {
        Some(cursor) => optional_non_negative(ctx, cursor, "batchSize")?,
        None => None,
    };

    let attempt = Attempt {
        ctx,
        body,
        ops: &ops,
        namespaces: &namespaces,
        options,
        variables: &variables,
        errors_only,
    };
    let (results, retried) =
        retryable::run(ctx, body, stmt_ids, |retry| attempt.run(retry)).await?;
    let mut reply = if results.items.is_empty() || unacknowledged(body) {
        Reply::cursor(0, CURSOR_NS, Vec::new(), true)
    } else {
        let count = results.items.len() as u64;
        let records = results.items.into_iter().map(output_record).collect();
        let cursor = Cursor::new(
            CURSOR_NS.to_owned(),
            None,
            CursorSource::Buffered(records),
            None,
            None,
        );
        let options = BatchOptions {
            batch_size: Some(batch_size.unwrap_or(count)),
            single_batch: false,
            no_timeout: false,
        };
        let visibility = Visibility::everything(ctx.clock().now_ms());
        open_cursor(ctx, cursor, &visibility, options).await?
    };
    for (name, count) in [
        ("nErrors", results.errors),
        ("nInserted", results.inserted),
        ("nMatched", results.matched),
        ("nModified", results.modified),
        ("nUpserted", results.upserted),
        ("nDeleted", results.deleted),
    ] {
        reply.append_int32(name, i32::try_from(count).unwrap_or(i32::MAX));
    }
    // mongod's reply field, after the counts, only when some op was answered from the record.
    if !retried.is_empty() {
        reply.append(
            "retriedStmtIds",
            Bson::Array(retried.into_iter().map(Bson::Int32).collect()),
        );
    }
    Ok(reply)
}

/// `stmtIds` as mongod's `validateRequest` checks it: not with `stmtId`, one int per op.
fn read_stmt_ids(body: &Document, ops: usize) -> CommandResult<Option<Vec<i32>>> {
    let Some(Bson::Array(values)) = body.get("stmtIds") else {
        return Ok(None);
    };
    let mut stmt_ids = Vec::with_capacity(values.len());
    for (position, value) in values.iter().enumerate() {
        match value {
            Bson::Int32(id) => stmt_ids.push(*id),
            other => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'bulkWrite.stmtIds.{position}' is the wrong type '{}', expected type 'int'",
                    tideway_base::display::type_name(other)
                )))
            }
        }
    }
    if let Some(stmt_id) = body.get("stmtId") {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "May not specify both stmtId and stmtIds in bulkWrite command. Got {}. BulkWrite command: {}",
                value_string(&Bson::Document(doc! {"stmtId": stmt_id.clone(), "stmtIds": values.clone()})),
                value_string(&Bson::Document(body.clone()))
            ),
        ));
    }
    if stmt_ids.len() != ops {
        return Err(CommandError::new(
            ErrorCode::InvalidLength,
            format!(
                "Number of statement ids must match the number of batch entries. Got {} statement ids but {ops} operations. Statement ids: {}. BulkWrite command: {}",
                stmt_ids.len(),
                value_string(&Bson::Document(doc! {"stmtIds": values.clone()})),
                value_string(&Bson::Document(body.clone()))
            ),
        ));
    }
    Ok(Some(stmt_ids))
}

/// The ops as mongod's parser reads them (`schema` has checked each op's kind and field types).
fn read_ops(body: &Document) -> CommandResult<Vec<Op<'_>>> {
    let Some(Bson::Array(ops)) = body.get("ops") else {
        return Err(CommandError::internal("bulkWrite.ops was not checked"));
    };
    ops.iter()
        .map(|op| match op {
            Bson::Document(op) => read_op(op),
            _ => Err(CommandError::internal("bulkWrite.ops was not checked")),
        })
        .collect()
}

fn read_op(op: &Document) -> CommandResult<Op<'_>> {
    let Some((kind, index)) = op.iter().next() else {
        return Err(CommandError::internal("bulkWrite.ops was not checked"));
    };
    let ns = namespace_index(kind, index)?;
    let kind = match kind.as_str() {
        "insert" => match op.get("document") {
            Some(Bson::Document(document)) => OpKind::Insert(document),
            _ => return Err(CommandError::internal("bulkWrite.ops was not checked")),
        },
        "update" => {
            if !matches!(
                op.get("updateMods"),
                Some(Bson::Document(_) | Bson::Array(_))
            ) {
                return Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    "Update argument must be either an object or an array",
                ));
            }
            check_hint_type(op)?;
            OpKind::Update(update_statement(op))
        }
        "delete" => {
            check_hint_type(op)?;
            OpKind::Delete(delete_statement(op))
        }
        _ => return Err(CommandError::internal("bulkWrite.ops was not checked")),
    };
    Ok(Op { ns, kind })
}

/// An op's `nsInfo` index (`safeInt`: any number, truncated and clamped to 32 bits, at least 0).
fn namespace_index(kind: &str, value: &Bson) -> CommandResult<usize> {
    let number = as_f64(value)
        .filter(|number| !number.is_nan())
        .unwrap_or(0.0);
    // `as` saturates: mongod's safeNumberInt clamps the same way.
    let index = number as i32;
    usize::try_from(index).map_err(|_| {
        CommandError::bad_value(format!(
            "BSON field '{kind}' value must be >= 0, actual value '{index}'"
        ))
    })
}

/// `hint` is parsed with the op (mongod's `indexHint`): a name or a key pattern.
fn check_hint_type(op: &Document) -> CommandResult<()> {
    match op.get("hint") {
        None | Some(Bson::Null | Bson::String(_) | Bson::Document(_)) => Ok(()),
        Some(_) => Err(CommandError::new(
            ErrorCode::FailedToParse,
            "Hint must be a string or an object",
        )),
    }
}

/// Copies the fields `pairs` names from `op` (as `(op field, statement field)`), skipping nulls.
fn copy_fields(op: &Document, statement: &mut Document, pairs: &[(&str, &str)]) {
    for (from, to) in pairs {
        match op.get(*from) {
            None | Some(Bson::Null) => {}
            Some(value) => {
                statement.insert(*to, value.clone());
            }
        }
    }
}

/// An update op as the `update` command's statement (its `constants` the statement's `c`), or
/// the error mongod reports for it when it runs.
fn update_statement(op: &Document) -> CommandResult<Document> {
    if op.get("upsertSupplied") == Some(&Bson::Boolean(true)) {
        // The supplied document would be `constants.new`, which cannot be given.
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "the parameter 'upsertSupplied' is set to 'true', but no document was supplied",
        ));
    }
    let mut statement = Document::new();
    copy_fields(
        op,
        &mut statement,
        &[
            ("filter", "q"),
            ("updateMods", "u"),
            ("multi", "multi"),
            ("upsert", "upsert"),
            ("sort", "sort"),
            ("arrayFilters", "arrayFilters"),
            ("hint", "hint"),
            ("collation", "collation"),
            ("constants", "c"),
        ],
    );
    Ok(statement)
}

/// A delete op as the `delete` command's statement (`multi` becomes `limit` 0, else 1).
fn delete_statement(op: &Document) -> Document {
    let multi = op.get("multi") == Some(&Bson::Boolean(true));
    let mut statement = Document::new();
    copy_fields(op, &mut statement, &[("filter", "q")]);
    statement.insert("limit", i32::from(!multi));
    copy_fields(
        op,
        &mut statement,
        &[("hint", "hint"), ("collation", "collation")],
    );
    statement
}

/// The `nsInfo` namespaces (`schema` has checked the entries' shape).
fn read_namespaces(body: &Document) -> CommandResult<Vec<(Namespace, &Document)>> {
    let Some(Bson::Array(entries)) = body.get("nsInfo") else {
        return Err(CommandError::internal("bulkWrite.nsInfo was not checked"));
    };
    entries
        .iter()
        .map(|entry| match entry {
            Bson::Document(entry) => match entry.get("ns") {
                Some(Bson::String(ns)) => Ok((namespace(ns)?, entry)),
                _ => Err(CommandError::internal("bulkWrite.nsInfo was not checked")),
            },
            _ => Err(CommandError::internal("bulkWrite.nsInfo was not checked")),
        })
        .collect()
}

/// `db.coll` as mongod's `NamespaceString::isValid` reads it: a valid database name and a
/// non-empty collection (whether the collection may be written is checked per op).
fn namespace(ns: &str) -> CommandResult<Namespace> {
    let (db, coll) = ns.split_once('.').unwrap_or((ns, ""));
    if coll.is_empty() || validate_database_name(db).is_err() {
        // mongod names the namespace as it parsed it: without the dot when there is no collection.
        let shown = if coll.is_empty() { db } else { ns };
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid namespace specified for bulkWrite: '{shown}'"),
        ));
    }
    Ok(Namespace::new(db, coll))
}

/// mongod's `validateRequest`: the number of ops, the namespaces, and every op's `nsInfo` index.
fn check_request(
    body: &Document,
    ops: &[Op<'_>],
    namespaces: &[(Namespace, &Document)],
) -> CommandResult<()> {
    let limit = tideway_wire::MAX_WRITE_BATCH_SIZE as usize;
    if ops.is_empty() || ops.len() > limit {
        return Err(CommandError::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {limit}. Got {} operations.",
                ops.len()
            ),
        ));
    }
    for (_, entry) in namespaces {
        // No namespace here is a time-series buckets collection.
        if entry.get("isTimeseriesNamespace") == Some(&Bson::Boolean(true)) {
            return Err(CommandError::new(
                ErrorCode::Location7934201,
                "'isTimeseriesNamespace' parameter can only be set when the request is sent on 'system.buckets' namespace to each shard",
            ));
        }
    }
    let Some(Bson::Array(raw_ops)) = body.get("ops") else {
        return Err(CommandError::internal("bulkWrite.ops was not checked"));
    };
    for (op, raw) in ops.iter().zip(raw_ops) {
        if op.ns >= namespaces.len() {
            return Err(CommandError::bad_value(format!(
                "BulkWrite ops entry {} has an invalid nsInfo index.",
                op_display(op.ns, raw)
            )));
        }
    }
    Ok(())
}

/// An op as mongod prints it (its parsed form: the index as an int, defaults filled in, fields in
/// the IDL's order).
fn op_display(index: usize, raw: &Bson) -> String {
    let Bson::Document(raw) = raw else {
        return value_string(raw);
    };
    let kind = raw.keys().next().map_or("", String::as_str);
    let mut shown = doc! {kind: i32::try_from(index).unwrap_or(i32::MAX)};
    let defaults = doc! {"multi": false, "upsert": false, "hint": {}};
    let fields: &[&str] = match kind {
        "insert" => &["document"],
        "update" => &[
            "filter",
            "sort",
            "multi",
            "updateMods",
            "upsert",
            "upsertSupplied",
            "arrayFilters",
            "hint",
            "constants",
            "collation",
            "sampleId",
        ],
        _ => &["filter", "multi", "hint", "collation", "sampleId"],
    };
    for field in fields {
        match raw.get(*field).filter(|value| **value != Bson::Null) {
            Some(value) => {
                shown.insert(*field, value.clone());
            }
            None => {
                if let Some(default) = defaults.get(*field) {
                    shown.insert(*field, default.clone());
                }
            }
        }
    }
    value_string(&Bson::Document(shown))
}

/// A write concern of `w: 0` (without `j`): mongod returns the counts and no results.
fn unacknowledged(body: &Document) -> bool {
    let Some(Bson::Document(concern)) = body.get("writeConcern") else {
        return false;
    };
    let w_zero = concern.get("w").and_then(as_f64) == Some(0.0);
    w_zero
        && !concern
            .get("j")
            .is_some_and(tideway_base::bsonutil::is_truthy)
}

/// The results: the items for the cursor and the summary counts.
struct Results {
    items: Vec<Document>,
    /// Keep only errors (`errorsOnly`).
    errors_only: bool,
    /// The encoded size of `items`.
    bytes: usize,
    errors: usize,
    inserted: usize,
    matched: usize,
    modified: usize,
    upserted: usize,
    deleted: usize,
}

impl Results {
    fn new(errors_only: bool) -> Results {
        Results {
            items: Vec::new(),
            errors_only,
            bytes: 0,
            errors: 0,
            inserted: 0,
            matched: 0,
            modified: 0,
            upserted: 0,
            deleted: 0,
        }
    }

    fn push(&mut self, item: Document, ok: bool) {
        if ok && self.errors_only {
            return;
        }
        self.bytes += encoded_size(&item);
        self.items.push(item);
    }

    /// A successful op: `{ok: 1, idx, n}` (updates add `nModified` and `upserted`).
    fn success(idx: usize, n: usize) -> Document {
        doc! {"ok": 1.0, "idx": idx_value(idx), "n": count_value(n)}
    }

    /// A failed op: `{ok: 0, idx, code, errmsg, ...extra, n: 0}`, and `nModified: 0` for updates.
    fn error(&mut self, idx: usize, error: &CommandError, update: bool) {
        let mut item = doc! {
            "ok": 0.0,
            "idx": idx_value(idx),
            "code": error.code.code(),
            "errmsg": error.errmsg.as_str(),
        };
        if let Some(extra) = &error.extra {
            item.extend(extra.clone());
        }
        item.insert("n", 0);
        if update {
            item.insert("nModified", 0);
        }
        self.errors += 1;
        self.push(item, false);
    }

    /// Past the size limit, the op at `idx` fails with `ExceededMemoryLimit` and the command
    /// stops (mongod checks before each op).
    fn over_limit(&mut self, idx: usize) -> bool {
        if self.bytes < MAX_REPLIES_BYTES {
            return false;
        }
        let error = CommandError::new(
            ErrorCode::ExceededMemoryLimit,
            format!("BulkWrite response size exceeded limit ({MAX_REPLIES_BYTES} bytes)"),
        );
        self.error(idx, &error, false);
        true
    }
}

/// An op's error when its namespace is a view (mongod's 166 for the op, not the command); the
/// outer error is a failed look-up.
async fn refuse_view(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
) -> CommandResult<Result<(), CommandError>> {
    match crate::commands::views::refuse_write_target(ctx, ns).await {
        Err(error) if error.code == ErrorCode::CommandNotSupportedOnView => Ok(Err(error)),
        other => other.map(Ok),
    }
}

fn idx_value(idx: usize) -> i32 {
    i32::try_from(idx).unwrap_or(i32::MAX)
}

fn count_value(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// An error that ends the command rather than an op: the command was interrupted.
fn is_interruption(error: &CommandError) -> bool {
    matches!(
        error.code,
        ErrorCode::MaxTimeMSExpired | ErrorCode::Interrupted
    )
}

/// The command as it runs: the writer of the namespace in use, and the results so far.
/// What one run of the command's ops needs (a retryable write may run them twice, see
/// `retryable::run`).
struct Attempt<'c, 'n> {
    ctx: &'c CommandContext<'c>,
    body: &'n Document,
    ops: &'n [Op<'n>],
    namespaces: &'n [(Namespace, &'n Document)],
    options: WriteOptions,
    variables: &'n CommandVariables,
    errors_only: bool,
}

impl Attempt<'_, '_> {
    /// Runs every op; the results and the statements answered from the session record.
    async fn run(&self, retry: Option<Arc<RetryableWrite>>) -> CommandResult<(Results, Vec<i32>)> {
        let mut run = Run {
            ctx: self.ctx,
            namespaces: self.namespaces,
            options: self.options,
            variables: self.variables.clone(),
            bypass_validation: tideway_exec::validation::bypass_requested(self.body),
            writer: None,
            retry,
            results: Results::new(self.errors_only),
        };
        run.all(self.ops).await?;
        drop(run.writer.take());
        let retried = run
            .retry
            .as_ref()
            .map(|retry| retry.retried_stmt_ids())
            .unwrap_or_default();
        Ok((run.results, retried))
    }
}

struct Run<'c, 'n> {
    ctx: &'c CommandContext<'c>,
    namespaces: &'n [(Namespace, &'n Document)],
    options: WriteOptions,
    /// The command's `let` variables.
    variables: CommandVariables,
    /// `bypassDocumentValidation`: every writer skips document validation.
    bypass_validation: bool,
    /// The open writer and its `nsInfo` index; one at a time, so one policy gate at a time.
    writer: Option<(usize, WriteContext<'c>)>,
    /// The retryable write the ops are statements of (`txnNumber`), if any.
    retry: Option<Arc<RetryableWrite>>,
    results: Results,
}

impl<'c> Run<'c, '_> {
    /// Runs the ops in order; consecutive inserts into one namespace are written as one batch.
    async fn all(&mut self, ops: &[Op<'_>]) -> CommandResult<()> {
        let mut inserts: Vec<(usize, &Document)> = Vec::new();
        let mut inserts_ns = 0;
        for (idx, op) in ops.iter().enumerate() {
            if let OpKind::Insert(document) = &op.kind {
                if self.results.over_limit(idx) {
                    break;
                }
                // mongod checks an insert's namespace outside the op: the command fails, and the
                // inserts waiting to be written with it are not written.
                validate_writable_namespace(&self.namespaces[op.ns].0)?;
                if !inserts.is_empty() && inserts_ns != op.ns {
                    let proceed = self.insert(inserts_ns, &inserts).await?;
                    inserts.clear();
                    if !proceed {
                        break;
                    }
                }
                inserts_ns = op.ns;
                inserts.push((idx, document));
                continue;
            }
            // An update or a delete: the inserts before it are written first.
            let proceed = self.insert(inserts_ns, &inserts).await?;
            inserts.clear();
            if !proceed || self.results.over_limit(idx) {
                break;
            }
            let proceed = match &op.kind {
                OpKind::Update(statement) => self.update(idx, op.ns, statement).await?,
                OpKind::Delete(statement) => self.delete(idx, op.ns, statement).await?,
                OpKind::Insert(_) => true,
            };
            if !proceed {
                break;
            }
        }
        // Whatever this last batch did, nothing follows it.
        self.insert(inserts_ns, &inserts).await?;
        Ok(())
    }

    /// The writer of `nsInfo[ns]`, reused while the ops stay in one existing collection (a writer
    /// opened before its collection existed is reopened, to see what the writes created).
    async fn writer(&mut self, ns: usize) -> CommandResult<&WriteContext<'c>> {
        let reusable = matches!(&self.writer, Some((open, writer)) if *open == ns && writer.collection_existed());
        if !reusable {
            // Release the gate held before taking another.
            self.writer = None;
            let writer = WriteContext::open(
                self.ctx,
                &self.namespaces[ns].0,
                self.options,
                self.variables.clone(),
            )
            .await?
            .bypassing_validation(self.bypass_validation)
            .retrying(self.retry.clone());
            self.writer = Some((ns, writer));
        }
        match &self.writer {
            Some((_, writer)) => Ok(writer),
            None => Err(CommandError::internal("no bulkWrite writer")),
        }
    }

    /// Writes a group of inserts into `nsInfo[ns]`; whether the command goes on.
    async fn insert(&mut self, ns: usize, inserts: &[(usize, &Document)]) -> CommandResult<bool> {
        if inserts.is_empty() {
            return Ok(true);
        }
        let ordered = self.options.ordered;
        if let Err(error) = refuse_view(self.ctx, &self.namespaces[ns].0).await? {
            // Each insert fails alone, as mongod's (ordered: the first, and the rest wait).
            let attempted = if ordered { 1 } else { inserts.len() };
            for (idx, _) in &inserts[..attempted] {
                self.results.error(*idx, &error, false);
            }
            return Ok(!ordered);
        }
        // A retry writes only the inserts whose statements did not run (mongod's
        // `checkStatementExecutedNoOplogEntryFetch`); the others are answered as written.
        let executed: Vec<bool> = inserts
            .iter()
            .map(|(idx, _)| {
                self.retry
                    .as_ref()
                    .is_some_and(|retry| retry.was_executed(retry.stmt_id(*idx)))
            })
            .collect();
        let (positions, documents): (Vec<usize>, Vec<&Document>) = inserts
            .iter()
            .zip(&executed)
            .filter(|(_, executed)| !**executed)
            .map(|((idx, document), _)| (*idx, *document))
            .unzip();
        if let Some(retry) = &self.retry {
            retry.set_insert_positions(&positions);
        }
        let outcome = insert_documents(self.writer(ns).await?, &documents).await?;
        // Ordered, the group stops at its first error: the inserts after it were not attempted.
        let stop = match outcome.errors.first() {
            Some((pending, _)) if ordered => Some(*pending),
            _ => None,
        };
        let mut errors = outcome.errors.iter().peekable();
        let mut pending = 0;
        for ((idx, _), executed) in inserts.iter().zip(executed) {
            if executed {
                if let Some(retry) = &self.retry {
                    retry.executed(retry.stmt_id(*idx));
                }
                self.results.inserted += 1;
                self.results.push(Results::success(*idx, 1), true);
                continue;
            }
            match errors.next_if(|(failed, _)| *failed == pending) {
                Some((_, error)) => self.results.error(*idx, error, false),
                None => {
                    self.results.inserted += 1;
                    let item = Results::success(*idx, 1);
                    self.results.push(item, true);
                }
            }
            if stop == Some(pending) {
                break;
            }
            pending += 1;
        }
        Ok(outcome.errors.is_empty() || !ordered)
    }

    /// Runs an update op; whether the command goes on.
    async fn update(
        &mut self,
        idx: usize,
        ns: usize,
        statement: &CommandResult<Document>,
    ) -> CommandResult<bool> {
        let outcome = match statement {
            Ok(statement) => match self.retryable_check(statement.get("multi")) {
                Err(error) => Err(error),
                Ok(()) => match validate_writable_namespace(&self.namespaces[ns].0) {
                    Ok(()) => match refuse_view(self.ctx, &self.namespaces[ns].0).await? {
                        Ok(()) => match self.recorded(idx, StatementKind::Update) {
                            Some(entry) => Ok(StatementOutcome::recorded(&entry)),
                            None => apply_update_statement(self.writer(ns).await?, statement).await,
                        },
                        Err(error) => Err(error),
                    },
                    Err(error) => Err(error),
                },
            },
            Err(error) => Err(error.clone()),
        };
        match outcome {
            Ok(outcome) => {
                let mut item = Results::success(idx, outcome.matched);
                item.insert("nModified", count_value(outcome.modified));
                self.results.modified += outcome.modified;
                match outcome.upserted_id {
                    Some(id) => {
                        item.insert("upserted", doc! {"_id": id});
                        self.results.upserted += 1;
                    }
                    None => self.results.matched += outcome.matched,
                }
                self.results.push(item, true);
                Ok(true)
            }
            Err(error) => self.failed(idx, error, true),
        }
    }

    /// Runs a delete op; whether the command goes on.
    async fn delete(&mut self, idx: usize, ns: usize, statement: &Document) -> CommandResult<bool> {
        // `delete_statement` made `multi: true` its `limit: 0`.
        let multi =
            (statement.get("limit") == Some(&Bson::Int32(0))).then_some(&Bson::Boolean(true));
        let outcome = match self.retryable_check(multi) {
            Err(error) => Err(error),
            Ok(()) => match validate_writable_namespace(&self.namespaces[ns].0) {
                Ok(()) => match refuse_view(self.ctx, &self.namespaces[ns].0).await? {
                    Ok(()) => match self.recorded(idx, StatementKind::Delete) {
                        Some(entry) => Ok(StatementOutcome::recorded(&entry).matched),
                        None => apply_delete_statement(self.writer(ns).await?, statement).await,
                    },
                    Err(error) => Err(error),
                },
                Err(error) => Err(error),
            },
        };
        match outcome {
            Ok(deleted) => {
                self.results.deleted += deleted;
                let item = Results::success(idx, deleted);
                self.results.push(item, true);
                Ok(true)
            }
            Err(error) => self.failed(idx, error, false),
        }
    }

    /// mongod's first check of an update or delete op (`multi`: its `multi` field): a retryable
    /// write may not write many documents in one op.
    fn retryable_check(&self, multi: Option<&Bson>) -> CommandResult<()> {
        if self.retry.is_some() && multi == Some(&Bson::Boolean(true)) {
            return Err(retryable::refuse_bulk_multi());
        }
        Ok(())
    }

    /// In a retryable write, the recorded reply part of the op at `idx` if it already ran
    /// (answered from it, noted in `retriedStmtIds`); otherwise the writes from now on are that
    /// op's statement, of `kind`.
    fn recorded(&self, idx: usize, kind: StatementKind) -> Option<Document> {
        let retry = self.retry.as_ref()?;
        let stmt_id = retry.stmt_id(idx);
        let entry = retry.executed(stmt_id);
        if entry.is_none() {
            retry.start_statement(stmt_id, kind);
        }
        entry
    }

    /// Records a failed update or delete; whether the command goes on (unordered only).
    fn failed(&mut self, idx: usize, error: CommandError, update: bool) -> CommandResult<bool> {
        if is_interruption(&error) {
            return Err(error);
        }
        self.results.error(idx, &error, update);
        Ok(!self.options.ordered)
    }
}
