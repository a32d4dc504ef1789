//! Retryable writes (replica-set mode): `insert`, `update`, `delete`, `findAndModify` and
//! `bulkWrite` carrying `lsid` + `txnNumber`. As mongod's `config.transactions`, every statement
//! that wrote is recorded under its session, in the same storage commit as its write
//! ([`tideway_storage::Storage::write_recorded`]): a header `{txnNumber, lastWriteOpTime: {ts, t},
//! lastWriteDate}` and, per statement, its reply part; a commit stores only the statements it
//! ran, so a command of many statements costs in proportion to them. A retry of the same
//! `txnNumber` reads that number's statements (one range read) and answers them (listing them in `retriedStmtIds`) and runs the
//! others; an older `txnNumber` is 225 TransactionTooOld. A statement that wrote nothing (no
//! match, a write error) leaves no record and runs again when retried, as in mongod. The stored
//! records are what `config.transactions` lists ([`transactions_documents`]).
//!
//! A first attempt reads nothing before it writes ([`run`]): its first commit carries a
//! [`SessionClaim`] on its txnNumber, which storage refuses, applying nothing, when the session
//! already used that number or a newer one. A refused claim, or a command that committed nothing
//! while the record shows its number used, is run again the careful way: the session record is
//! read first, as above. So a first attempt costs no read, and a retry (on this node or another
//! sharing the database) is never taken for a first attempt.
//!
//! Invariants: commands of one session run one at a time (a per-session lock held for the
//! whole command), so a retry never overlaps its first attempt; statement ids are the
//! command's `stmtIds` when given (`bulkWrite`), else its `stmtId` (default 0) plus the
//! statement's position, as mongod numbers them; a statement's record is keyed by its stmtId
//! alone, never by namespace, so one command writing several collections (`bulkWrite`) is
//! retried whole from one record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bson::{doc, Bson, Document};

use crate::command::CommandContext;
use crate::session_id::{session_id_document, session_key};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::oplog::EntryTime;
use tideway_storage::{
    RecordSession, SessionClaim, SessionRecord, StorageError, StorageResult, WriteOp, WriteOutcome,
};

/// Runs `command`, a retryable write when `body` asks for one (`stmt_ids`: its statement ids
/// by position, `bulkWrite`'s): first as a first attempt that claims its txnNumber, then, if
/// that attempt turns out to be a retry or too old, again after reading the session record.
/// The first run then applied nothing: its claim was refused, or it committed nothing.
pub(crate) async fn run<T, F>(
    ctx: &CommandContext<'_>,
    body: &Document,
    stmt_ids: Option<Vec<i32>>,
    command: impl Fn(Option<Arc<RetryableWrite>>) -> F,
) -> CommandResult<T>
where
    F: std::future::Future<Output = CommandResult<T>>,
{
    let Some(first) = RetryableWrite::begin(ctx, body, Attempt::Claiming).await? else {
        return command(None).await;
    };
    let first = Arc::new(first.with_stmt_ids(stmt_ids.clone()));
    let result = command(Some(first.clone())).await;
    if first.was_first_attempt(ctx).await? {
        return result;
    }
    // The careful run keeps the session the first one held (the command kept no reference).
    let session = Arc::try_unwrap(first)
        .map_err(|_| CommandError::internal("a retryable write outlived its command"))?
        .session;
    let retry = RetryableWrite::begin(ctx, body, Attempt::Reading(session))
        .await?
        .map(|retry| Arc::new(retry.with_stmt_ids(stmt_ids)));
    command(retry).await
}

/// The per-session lock ([`crate::repl`]'s session slots): the newest txnNumber this node
/// began for the session.
type SessionGuard = tokio::sync::OwnedMutexGuard<Option<i64>>;

/// How a retryable write learns whether its statements ran before.
enum Attempt {
    /// Claims its txnNumber with its first commit, reading nothing before (unless this node
    /// already saw that number or a newer one for the session).
    Claiming,
    /// Reads the session record before it runs, holding the session already.
    Reading(SessionGuard),
}

/// What kind of statement a write belongs to: decides the reply part recorded for it (inserts
/// record through [`RetryableWrite::record_inserts`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum StatementKind {
    Update,
    Delete,
    FindAndModify { return_new: bool },
}

/// What an operation of a commit records if it succeeds: its statement's `(stmtId, reply
/// part)`, or nothing.
type StatementEntry = Option<(i32, Arc<Document>)>;

/// A retryable write command in progress.
pub(crate) struct RetryableWrite {
    key: Vec<u8>,
    txn_number: i64,
    first_stmt_id: i32,
    /// The command's `stmtIds`, one per statement position (`bulkWrite`), if given.
    stmt_ids: Option<Vec<i32>>,
    /// The statements recorded under this `txnNumber`, those of this command included as they
    /// commit.
    recorded: Mutex<HashMap<i32, Arc<Document>>>,
    retried: Mutex<Vec<i32>>,
    /// The statement whose writes go through now.
    current: Mutex<Option<(i32, StatementKind)>>,
    /// An insert's statement positions, by position among the documents it writes (a retry
    /// writes only those that did not run).
    insert_positions: Mutex<Vec<usize>>,
    /// The claim the next commit carries: set for a first attempt until a commit carrying it
    /// is applied.
    claim: Mutex<Option<SessionClaim>>,
    /// Storage refused the claim: this run applied nothing and must be run again.
    claim_refused: std::sync::atomic::AtomicBool,
    /// The entries of the record the next commit carries (see [`RetryableWrite::recorder`]).
    pending: Mutex<Arc<Vec<StatementEntry>>>,
    /// Held for the whole command (see the module's invariants).
    session: SessionGuard,
}

impl RetryableWrite {
    /// The retryable write `body` asks for (`txnNumber` in replica-set mode; dispatch refused it
    /// elsewhere), or `None`.
    async fn begin(
        ctx: &CommandContext<'_>,
        body: &Document,
        attempt: Attempt,
    ) -> CommandResult<Option<RetryableWrite>> {
        let (Some(repl), Some(txn_number)) = (&ctx.state.repl, body.get("txnNumber")) else {
            return Ok(None);
        };
        // A statement of a multi-document transaction: `crate::txn` owns its txnNumber.
        if body.contains_key("autocommit") {
            return Ok(None);
        }
        let txn_number = match txn_number {
            Bson::Int64(number) => *number,
            Bson::Int32(number) => i64::from(*number),
            other => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'OperationSessionInfo.txnNumber' is the wrong type '{}', expected type 'long'",
                    tideway_base::display::type_name(other)
                )))
            }
        };
        if txn_number < 0 {
            return Err(CommandError::bad_value(format!(
                "TxnNumber cannot be negative, got {txn_number}"
            )));
        }
        let (key, shown) = session_key(body)?;
        let first_stmt_id = match body.get("stmtId") {
            None => 0,
            Some(Bson::Int32(id)) => *id,
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'stmtId' is the wrong type '{}', expected type 'int'",
                    tideway_base::display::type_name(other)
                )))
            }
        };
        let (mut session, claiming) = match attempt {
            Attempt::Claiming => (repl.sessions.slot(&key).lock_owned().await, true),
            Attempt::Reading(session) => (session, false),
        };
        // A number this node has not seen for the session yet is claimed, not read.
        if claiming && session.is_none_or(|seen| seen < txn_number) {
            *session = Some(txn_number);
            return Ok(Some(RetryableWrite {
                claim: Mutex::new(Some(SessionClaim {
                    key: key.clone(),
                    txn_number,
                })),
                ..RetryableWrite::new(key, txn_number, first_stmt_id, HashMap::new(), session)
            }));
        }
        let stored = ctx.state.storage.session_record(&key).await?;
        let stored_txn = stored
            .as_ref()
            .and_then(|record| record.get_i64("txnNumber").ok());
        let newest = session.max(stored_txn);
        if let Some(newest) = newest.filter(|newest| *newest > txn_number) {
            return Err(CommandError::new(
                ErrorCode::TransactionTooOld,
                format!("Retryable write with txnNumber {txn_number} is prohibited on session {shown} because a newer retryable write with txnNumber {newest} has already started on this session."),
            ));
        }
        *session = Some(txn_number);
        // A first attempt (a newer txnNumber) reads no statements; a retry reads its own.
        let recorded = if stored_txn == Some(txn_number) {
            ctx.state
                .storage
                .session_statements(&key, txn_number)
                .await?
                .into_iter()
                .map(|(stmt_id, reply)| (stmt_id, Arc::new(reply)))
                .collect()
        } else {
            HashMap::new()
        };
        Ok(Some(RetryableWrite::new(
            key,
            txn_number,
            first_stmt_id,
            recorded,
            session,
        )))
    }

    fn new(
        key: Vec<u8>,
        txn_number: i64,
        first_stmt_id: i32,
        recorded: HashMap<i32, Arc<Document>>,
        session: SessionGuard,
    ) -> RetryableWrite {
        RetryableWrite {
            key,
            txn_number,
            first_stmt_id,
            stmt_ids: None,
            recorded: Mutex::new(recorded),
            retried: Mutex::new(Vec::new()),
            current: Mutex::new(None),
            insert_positions: Mutex::new(Vec::new()),
            claim: Mutex::new(None),
            claim_refused: std::sync::atomic::AtomicBool::new(false),
            pending: Mutex::default(),
            session,
        }
    }

    /// What a commit of this write carries: the pending claim, if any, and `record` (built by
    /// this write's `record_*` just before; a record of nothing when `None`). Every commit goes
    /// through here and [`RetryableWrite::settle`].
    pub(crate) fn session_write(
        &self,
        record: Option<RecordSession>,
    ) -> (Option<SessionClaim>, RecordSession) {
        let record = record.unwrap_or_else(|| {
            *lock(&self.pending) = Arc::default();
            Box::new(|_, _| None)
        });
        (lock(&self.claim).clone(), record)
    }

    /// Notes how a commit went: applied, its claim is spent and its recorded statements join
    /// `recorded`; refused, this run must be redone.
    pub(crate) fn settle(&self, result: &StorageResult<Vec<StorageResult<WriteOutcome>>>) {
        match result {
            Ok(results) => {
                *lock(&self.claim) = None;
                // Storage has dropped the record builder by now: the entries are moved, not
                // copied.
                let entries = std::mem::take(&mut *lock(&self.pending));
                let entries = Arc::try_unwrap(entries).unwrap_or_else(|shared| (*shared).clone());
                let mut recorded = lock(&self.recorded);
                for (entry, result) in entries.into_iter().zip(results) {
                    if let (Some((stmt_id, reply)), Ok(_)) = (entry, result) {
                        recorded.insert(stmt_id, reply);
                    }
                }
            }
            Err(StorageError::TxnNumberUsed) => self
                .claim_refused
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Err(_) => {}
        }
    }

    /// After a run: whether it was the first attempt of its txnNumber, so its reply stands.
    /// A claim still pending means nothing was committed: the session record decides.
    async fn was_first_attempt(&self, ctx: &CommandContext<'_>) -> CommandResult<bool> {
        if self
            .claim_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(false);
        }
        if lock(&self.claim).is_none() {
            return Ok(true);
        }
        let stored = ctx.state.storage.session_record(&self.key).await?;
        Ok(stored
            .and_then(|record| record.get_i64("txnNumber").ok())
            .is_none_or(|stored| stored < self.txn_number))
    }

    /// The same write, its statements numbered by `stmt_ids` (one per position; the caller
    /// checked the count, as mongod's `bulk_write_common::validateRequest`).
    fn with_stmt_ids(mut self, stmt_ids: Option<Vec<i32>>) -> Self {
        self.stmt_ids = stmt_ids;
        self
    }

    /// The statement id of the statement at `position` in the command (mongod's
    /// `getStatementId`: `stmtIds[position]`, else `stmtId + position`).
    pub(crate) fn stmt_id(&self, position: usize) -> i32 {
        if let Some(id) = self
            .stmt_ids
            .as_ref()
            .and_then(|ids| ids.get(position).copied())
        {
            return id;
        }
        self.first_stmt_id
            .saturating_add(i32::try_from(position).unwrap_or(i32::MAX))
    }

    /// Whether statement `stmt_id` ran under this `txnNumber` (not noted as retried; see
    /// [`RetryableWrite::executed`]).
    pub(crate) fn was_executed(&self, stmt_id: i32) -> bool {
        lock(&self.recorded).contains_key(&stmt_id)
    }

    /// The documents an insert writes are the statements at `positions`.
    pub(crate) fn set_insert_positions(&self, positions: &[usize]) {
        *lock(&self.insert_positions) = positions.to_vec();
    }

    /// The statement id of the `index`th document an insert writes.
    pub(crate) fn insert_stmt_id(&self, index: usize) -> i32 {
        let position = lock(&self.insert_positions)
            .get(index)
            .copied()
            .unwrap_or(index);
        self.stmt_id(position)
    }

    /// The recorded reply part of statement `stmt_id`, if it ran under this `txnNumber`
    /// (noted for `retriedStmtIds`).
    pub(crate) fn executed(&self, stmt_id: i32) -> Option<Document> {
        let entry = Document::clone(lock(&self.recorded).get(&stmt_id)?);
        lock(&self.retried).push(stmt_id);
        Some(entry)
    }

    /// Writes from now on belong to statement `stmt_id` of `kind`.
    pub(crate) fn start_statement(&self, stmt_id: i32, kind: StatementKind) {
        *lock(&self.current) = Some((stmt_id, kind));
    }

    /// The record to commit with a write of `op` (`before`: the document it replaces or
    /// deletes) by the current statement.
    pub(crate) fn record_for(
        &self,
        op: &WriteOp,
        before: Option<&Document>,
    ) -> Option<RecordSession> {
        let (stmt_id, kind) = (*lock(&self.current))?;
        let entry = statement_entry(kind, op, before)?;
        Some(self.recorder(vec![Some((stmt_id, Arc::new(entry)))]))
    }

    /// The record to commit with a batch of inserts whose statement ids are `stmt_ids`.
    pub(crate) fn record_inserts(&self, stmt_ids: Vec<i32>) -> RecordSession {
        let inserted = Arc::new(doc! {"n": 1});
        self.recorder(
            stmt_ids
                .into_iter()
                .map(|id| Some((id, Arc::clone(&inserted))))
                .collect(),
        )
    }

    /// A record builder: the entries of the operations that succeed are the commit's
    /// statements (only they are written: the cost of a commit never grows with what was
    /// recorded before). They join `recorded` once the commit is applied ([`Self::settle`]).
    fn recorder(&self, entries: Vec<StatementEntry>) -> RecordSession {
        let entries = Arc::new(entries);
        *lock(&self.pending) = Arc::clone(&entries);
        let key = self.key.clone();
        let txn_number = self.txn_number;
        Box::new(move |succeeded: &[bool], time: EntryTime| {
            let statements: Vec<(i32, Arc<Document>)> = entries
                .iter()
                .zip(succeeded)
                .filter_map(|(entry, ok)| entry.as_ref().filter(|_| *ok).cloned())
                .collect();
            if statements.is_empty() {
                return None;
            }
            Some(SessionRecord {
                key: key.clone(),
                txn_number,
                statements,
                header: doc! {
                    "lastWriteOpTime": {"ts": time.ts, "t": crate::repl::TERM},
                    "lastWriteDate": bson::DateTime::from_millis(time.wall_ms),
                },
            })
        })
    }

    /// Adds `retriedStmtIds` to a reply when some statement was answered from the record.
    pub(crate) fn finish(&self, reply: &mut Document) {
        let retried = self.retried_stmt_ids();
        if !retried.is_empty() {
            reply.insert("retriedStmtIds", retried);
        }
    }

    /// The statements answered from the record so far, in the order they were.
    pub(crate) fn retried_stmt_ids(&self) -> Vec<i32> {
        lock(&self.retried).clone()
    }
}

/// `config.transactions` as mongod keeps it (session_txn_record.idl, a retryable write's
/// fields): one document per stored session record header, `{_id: {id, uid}, txnNum, lastWriteOpTime,
/// lastWriteDate}`, in session-key order.
pub(crate) fn transactions_documents(records: Vec<(Vec<u8>, Document)>) -> Vec<Document> {
    records
        .into_iter()
        .filter_map(|(key, record)| {
            let mut document = doc! {
                "_id": session_id_document(&key)?,
                "txnNum": record.get_i64("txnNumber").ok()?,
            };
            for field in ["lastWriteOpTime", "lastWriteDate"] {
                if let Some(value) = record.get(field) {
                    document.insert(field, value.clone());
                }
            }
            Some(document)
        })
        .collect()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reply part a statement's write earns.
fn statement_entry(
    kind: StatementKind,
    op: &WriteOp,
    before: Option<&Document>,
) -> Option<Document> {
    let id_of = |doc: &Document| doc.get("_id").cloned().unwrap_or(Bson::Null);
    match (kind, op) {
        (StatementKind::Delete, WriteOp::Delete { .. }) => Some(doc! {"n": 1}),
        (StatementKind::Update, WriteOp::Replace { .. }) => Some(doc! {"n": 1, "nModified": 1}),
        (StatementKind::Update, WriteOp::Insert { doc, .. }) => {
            Some(doc! {"n": 1, "nModified": 0, "upserted": id_of(doc)})
        }
        (StatementKind::FindAndModify { .. }, WriteOp::Delete { .. }) => {
            Some(doc! {"lastErrorObject": {"n": 1}, "value": before?.clone()})
        }
        (StatementKind::FindAndModify { return_new }, WriteOp::Replace { doc, .. }) => {
            let value = if return_new {
                doc.clone()
            } else {
                before?.clone()
            };
            Some(doc! {"lastErrorObject": {"n": 1, "updatedExisting": true}, "value": value})
        }
        (StatementKind::FindAndModify { return_new }, WriteOp::Insert { doc, .. }) => {
            let value = if return_new {
                Bson::Document(doc.clone())
            } else {
                Bson::Null
            };
            Some(doc! {
                "lastErrorObject": {"n": 1, "updatedExisting": false, "upserted": id_of(doc)},
                "value": value,
            })
        }
        _ => None,
    }
}

/// mongod's refusal of a `multi: true` update or delete op in a retryable `bulkWrite`
/// (bulk_write.cpp: the op fails, not the command).
pub(crate) fn refuse_bulk_multi() -> CommandError {
    CommandError::new(
        ErrorCode::InvalidOptions,
        "Cannot use retryable writes with multi=true",
    )
}

/// mongod's refusal of statements that may write many documents under a retryable write.
pub(crate) fn refuse_multi(what: &str) -> CommandError {
    CommandError::new(
        ErrorCode::InvalidOptions,
        format!("Cannot use (or request) retryable writes with {what}"),
    )
}
