//! Multi-document transactions (replica-set mode): the per-session transaction state machine
//! (`startTransaction`, statements with `autocommit: false`, `commitTransaction`,
//! `abortTransaction`), the checks mongod makes of a statement's session fields, error labels,
//! the lifetime limit, and the hooks dispatch calls around every statement (the two commands are
//! `commands::transactions`; the lifetime task is started by `server`). A running
//! transaction reads and writes through its [`TxnStorage`] (see `storage.rs` for isolation and
//! conflicts).
//!
//! Invariants: a session runs one command at a time (its lock is held for the whole command and
//! the whole commit), so a transaction's statements never overlap; a transaction ends exactly
//! once, committed or aborted, and then releases its claims; a statement that fails aborts its
//! transaction, as in mongod.

pub mod storage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bson::{doc, Bson, Document};

use crate::session_id::session_key;
use tideway_base::clock::Clock;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::{Storage, StorageError};
use tideway_wire::Reply;

pub(crate) use storage::{Intents, TxnStorage};

/// The label mongod puts on errors after which the whole transaction may be retried.
pub(crate) const TRANSIENT: &str = "TransientTransactionError";

/// The commands a transaction may run (mongod's `txnCmdAllowlist`, less those of sharding).
const ALLOWED: &[&str] = &[
    "abortTransaction",
    "aggregate",
    "bulkWrite",
    "commitTransaction",
    "create",
    "createIndexes",
    "delete",
    "distinct",
    "find",
    "findAndModify",
    "getMore",
    "insert",
    "killCursors",
    "update",
];

/// Every session's transaction state, and the claims of running transactions.
#[derive(Debug, Default)]
pub struct Transactions {
    sessions: Mutex<HashMap<Vec<u8>, Arc<tokio::sync::Mutex<Session>>>>,
    intents: Arc<Intents>,
    next_id: AtomicU64,
    /// `serverStatus.transactions` totals.
    started: AtomicU64,
    /// Shared with the commit task, which outlives its command.
    committed: Arc<AtomicU64>,
    aborted: Arc<AtomicU64>,
}

/// One session's newest transaction.
#[derive(Debug, Default)]
struct Session {
    txn_number: Option<i64>,
    state: State,
    /// Server time of the session's last transaction command: a finished transaction's outcome
    /// is kept (for a retried commit) until the session has been idle for its timeout.
    last_used_ms: i64,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    None,
    Running(Running),
    Committed,
    Aborted,
}

#[derive(Debug)]
struct Running {
    storage: Arc<TxnStorage>,
    /// Server time at the start (the lifetime limit counts from it).
    started_ms: i64,
}

/// A statement of a running transaction, as dispatch holds it for the command's duration.
pub struct Statement {
    session: tokio::sync::OwnedMutexGuard<Session>,
    pub storage: Arc<TxnStorage>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `error` with `label` added to its `errorLabels`.
pub(crate) fn labelled(error: CommandError, label: &str) -> CommandError {
    let mut extra = error.extra.clone().unwrap_or_default();
    let mut labels = match extra.remove("errorLabels") {
        Some(Bson::Array(labels)) => labels,
        _ => Vec::new(),
    };
    if !labels
        .iter()
        .any(|existing| existing.as_str() == Some(label))
    {
        labels.push(Bson::String(label.to_string()));
    }
    extra.insert("errorLabels", labels);
    error.with_extra(extra)
}

fn no_such_transaction(message: String) -> CommandError {
    labelled(
        CommandError::new(ErrorCode::NoSuchTransaction, message),
        TRANSIENT,
    )
}

/// The session fields of a transaction statement: `txnNumber`, and whether it starts one.
pub(crate) struct Fields {
    txn_number: i64,
    start: bool,
}

fn fields(body: &Document) -> CommandResult<Option<Fields>> {
    let Some(autocommit) = body.get("autocommit") else {
        return Ok(None);
    };
    if autocommit != &Bson::Boolean(false) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "Specifying autocommit=true is not allowed.",
        ));
    }
    let txn_number = match body.get("txnNumber") {
        Some(Bson::Int64(number)) => *number,
        Some(Bson::Int32(number)) => i64::from(*number),
        Some(_) | None => {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "'autocommit' field requires a transaction number to also be specified",
            ))
        }
    };
    if txn_number < 0 {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "Transaction number cannot be negative",
        ));
    }
    let start = match body.get("startTransaction") {
        None => false,
        Some(Bson::Boolean(true)) => true,
        Some(_) => {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "Specifying startTransaction=false is not allowed.",
            ))
        }
    };
    Ok(Some(Fields { txn_number, start }))
}

impl Transactions {
    fn session(&self, key: Vec<u8>) -> Arc<tokio::sync::Mutex<Session>> {
        lock(&self.sessions).entry(key).or_default().clone()
    }

    /// Dispatch's hook before a command: `None` outside a transaction; the running
    /// transaction's statement otherwise (started here for `startTransaction`). Commit and
    /// abort are their own commands and pass through.
    pub async fn enter(
        &self,
        storage: &Arc<dyn Storage>,
        clock: &dyn Clock,
        command: &str,
        body: &Document,
    ) -> CommandResult<Option<Statement>> {
        let Some(fields) = fields(body)? else {
            return Ok(None);
        };
        if command == "commitTransaction" || command == "abortTransaction" {
            return Ok(None);
        }
        check_allowed(command, body)?;
        let (key, shown) = session_key(body)?;
        let mut session = self.session(key).lock_owned().await;
        session.last_used_ms = clock.now_ms();
        let newest = session.txn_number;
        if let Some(newest) = newest.filter(|newest| fields.txn_number < *newest) {
            return Err(too_old(fields.txn_number, &shown, newest));
        }
        if fields.start {
            if newest == Some(fields.txn_number) {
                return Err(CommandError::new(
                    ErrorCode::ConflictingOperationInProgress,
                    "Only servers in a sharded cluster can start a new transaction at the active transaction number",
                ));
            }
            self.end(&mut session, None);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let started_ms = clock.now_ms();
            let storage = TxnStorage::begin(
                Arc::clone(storage),
                Arc::clone(&self.intents),
                (id, fields.txn_number),
                started_ms,
            )
            .await?;
            session.txn_number = Some(fields.txn_number);
            session.state = State::Running(Running {
                storage: Arc::new(storage),
                started_ms,
            });
            self.started.fetch_add(1, Ordering::Relaxed);
        } else if newest != Some(fields.txn_number) {
            return Err(mismatched(fields.txn_number, newest));
        }
        let storage = match &session.state {
            State::Running(running) => Arc::clone(&running.storage),
            State::Committed => return Err(committed(fields.txn_number)),
            State::Aborted | State::None => return Err(aborted(fields.txn_number)),
        };
        // Checked once the transaction runs: refusing a stage aborts it, as in mongod.
        if let Err(error) = check_pipeline(command, body) {
            self.end(&mut session, Some(State::Aborted));
            return Err(error);
        }
        Ok(Some(Statement { session, storage }))
    }

    /// Dispatch's hook after a statement: a failure (a command error, or a write error, which
    /// becomes the command's error as in mongod) aborts the transaction; errors that a retry
    /// of the whole transaction may overcome get the `TransientTransactionError` label.
    pub fn leave(
        &self,
        mut statement: Statement,
        result: CommandResult<Reply>,
    ) -> CommandResult<Reply> {
        let write_error = match &result {
            Ok(reply) => first_write_error(reply),
            Err(_) => None,
        };
        match (result, write_error) {
            (Ok(reply), None) => Ok(reply),
            // A write error ends the transaction but stays a write error (ok: 1, no label),
            // unless retrying the transaction may help: then it is the command's error.
            (Ok(reply), Some(error)) => {
                self.end(&mut statement.session, Some(State::Aborted));
                if is_transient(error.code) {
                    Err(label_transient(error))
                } else {
                    Ok(reply)
                }
            }
            (Err(error), _) => {
                self.end(&mut statement.session, Some(State::Aborted));
                Err(label_transient(error))
            }
        }
    }

    /// Ends the session's running transaction, if any (releasing its claims), moving it to
    /// `next` (or leaving its state when `None`).
    fn end(&self, session: &mut Session, next: Option<State>) {
        let was_running = match &session.state {
            State::Running(running) => {
                running.storage.release();
                true
            }
            _ => false,
        };
        if let Some(next) = next {
            session.state = next;
        } else if was_running {
            session.state = State::Aborted;
        }
        if was_running {
            let total = match session.state {
                State::Committed => &self.committed,
                _ => &self.aborted,
            };
            total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Aborts every transaction that has run `limit_ms` or longer at `now_ms` (whose session is
    /// not in the middle of a command: the next round takes it), and forgets sessions idle for
    /// `idle_ms` with no transaction running; returns how many transactions it aborted.
    pub(crate) fn abort_expired(&self, now_ms: i64, limit_ms: i64, idle_ms: i64) -> usize {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        let mut aborted = 0;
        for session in sessions {
            let Ok(mut session) = session.try_lock() else {
                continue;
            };
            let expired = matches!(&session.state, State::Running(running) if now_ms - running.started_ms >= limit_ms);
            if expired {
                tracing::info!(
                    txn_number = session.txn_number,
                    "Aborting transaction because it has been running for longer than 'transactionLifetimeLimitSeconds'"
                );
                self.end(&mut session, Some(State::Aborted));
                aborted += 1;
            }
        }
        // A finished transaction's outcome outlives it as long as its session would.
        lock(&self.sessions).retain(|_, session| {
            Arc::strong_count(session) > 1
                || session.try_lock().map_or(true, |session| {
                    matches!(session.state, State::Running(_))
                        || now_ms - session.last_used_ms < idle_ms
                })
        });
        aborted
    }

    /// Aborts the running transactions of the sessions whose keys are listed
    /// (`endSessions`, `killSessions`), waiting for a command they run to finish.
    pub(crate) async fn abort_sessions(&self, keys: &[Vec<u8>]) {
        for key in keys {
            let session = lock(&self.sessions).get(key).cloned();
            if let Some(session) = session {
                let mut session = session.lock().await;
                // A finished transaction keeps its outcome (a retried commit still answers it).
                if matches!(session.state, State::Running(_)) {
                    self.end(&mut session, Some(State::Aborted));
                }
            }
        }
    }

    /// Aborts every running transaction (`killAllSessions`).
    pub(crate) async fn abort_all(&self) {
        let keys: Vec<Vec<u8>> = lock(&self.sessions).keys().cloned().collect();
        self.abort_sessions(&keys).await;
    }

    /// `serverStatus.transactions` (mongod's server_transactions_metrics): open transactions,
    /// those running a statement now (active) and the rest (inactive), and totals since the
    /// start.
    pub fn metrics(&self) -> Document {
        let (mut active, mut inactive) = (0_i64, 0_i64);
        for session in lock(&self.sessions).values() {
            match session.try_lock() {
                Ok(session) if matches!(session.state, State::Running(_)) => inactive += 1,
                Ok(_) => {}
                // Locked: a statement (or a commit) of the session is running.
                Err(_) => active += 1,
            }
        }
        let total = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        doc! {
            "currentActive": active,
            "currentInactive": inactive,
            "currentOpen": active + inactive,
            "totalAborted": total(&self.aborted),
            "totalCommitted": total(&self.committed),
            "totalStarted": total(&self.started),
        }
    }
}

/// Whether a `getMore` may read on cursor `id` opened by `opened_in` (a transaction's identity)
/// from `running` (the statement's transaction): only the transaction that opened a cursor
/// reads on it, and a cursor opened outside one is read outside (mongod's getmore_cmd.cpp).
pub(crate) fn check_cursor(
    id: i64,
    opened_in: Option<(u64, i64)>,
    running: Option<&Arc<TxnStorage>>,
) -> CommandResult<()> {
    let running = running.map(|txn| txn.identity());
    let message = match (opened_in, running) {
        (None, None) => return Ok(()),
        (Some(opened), Some(running)) if opened == running => return Ok(()),
        (Some((_, opened)), None) => (
            ErrorCode::Location50740,
            format!("Cannot run getMore on cursor {id}, which was created in transaction {opened}, without a txnNumber"),
        ),
        (None, Some((_, running))) => (
            ErrorCode::Location50739,
            format!("Cannot run getMore on cursor {id}, which was not created in a transaction, in transaction {running}"),
        ),
        (Some((_, opened)), Some((_, running))) => (
            ErrorCode::Location50741,
            format!("Cannot run getMore on cursor {id}, which was created in transaction {opened}, in transaction {running}"),
        ),
    };
    Err(CommandError::new(message.0, message.1))
}

/// The command checks mongod makes before it resumes the transaction (failing them leaves it
/// running): commands and databases a transaction may not use, and `writeConcern` and
/// `readConcern` where they are not allowed.
fn check_allowed(command: &str, body: &Document) -> CommandResult<()> {
    let refuse = |message: String| {
        Err(CommandError::new(
            ErrorCode::OperationNotSupportedInTransaction,
            message,
        ))
    };
    if command == "count" {
        return refuse("Cannot run 'count' in a multi-document transaction. Please see http://dochub.mongodb.org/core/transaction-count for a recommended alternative.".to_string());
    }
    if !ALLOWED.contains(&command) {
        return refuse(format!(
            "Cannot run '{command}' in a multi-document transaction."
        ));
    }
    let start = body.contains_key("startTransaction");
    if start && command == "killCursors" {
        return refuse(
            "Cannot run killCursors as the first operation in a multi-document transaction."
                .to_string(),
        );
    }
    match body.get_str("$db") {
        Ok("local") => {
            return refuse(
                "Cannot run command against the 'local' database in a transaction.".to_string(),
            )
        }
        Ok("config") => {
            return refuse(
                "Cannot run command against the config database in a transaction.".to_string(),
            )
        }
        _ => {}
    }
    let is_commit_or_abort = matches!(command, "commitTransaction" | "abortTransaction");
    if body.contains_key("writeConcern") && !is_commit_or_abort {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "writeConcern is not allowed within a multi-statement transaction",
        ));
    }
    if let Some(read_concern) = body.get("readConcern") {
        if !start {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "Only the first command in a transaction may specify a readConcern",
            ));
        }
        let level = match read_concern {
            Bson::Document(read_concern) => read_concern.get_str("level").ok(),
            _ => None,
        };
        if level.is_some_and(|level| !["local", "majority", "snapshot"].contains(&level)) {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "The readConcern level must be either 'local' (default), 'majority' or 'snapshot' in order to run in a transaction",
            ));
        }
    }
    Ok(())
}

/// Aggregation stages a transaction may not run.
const STAGES_REFUSED: &[&str] = &[
    "$changeStream",
    "$collStats",
    "$currentOp",
    "$indexStats",
    "$listLocalSessions",
    "$listSessions",
    "$merge",
    "$out",
    "$planCacheStats",
];

fn check_pipeline(command: &str, body: &Document) -> CommandResult<()> {
    if command != "aggregate" {
        return Ok(());
    }
    if body
        .get("explain")
        .is_some_and(tideway_base::bsonutil::is_truthy)
    {
        return Err(CommandError::new(
            ErrorCode::OperationNotSupportedInTransaction,
            "Operation not permitted in transaction :: caused by :: Explain for the aggregate command cannot run within a multi-document transaction",
        ));
    }
    let stages = body
        .get_array("pipeline")
        .map(Vec::as_slice)
        .unwrap_or_default();
    for stage in stages {
        let Some(name) = stage.as_document().and_then(|stage| stage.keys().next()) else {
            continue;
        };
        if STAGES_REFUSED.contains(&name.as_str()) {
            return Err(CommandError::new(
                ErrorCode::OperationNotSupportedInTransaction,
                format!("Operation not permitted in transaction :: caused by :: Aggregation stage {name} cannot run within a multi-document transaction."),
            ));
        }
    }
    Ok(())
}

fn too_old(txn_number: i64, session: &str, newest: i64) -> CommandError {
    CommandError::new(
        ErrorCode::TransactionTooOld,
        format!(
            "Cannot start transaction with {{ txnNumber: {txn_number} }} on session {session} because a newer transaction with txnNumberAndRetryCounter {{ txnNumber: {newest}, txnRetryCounter: 0 }} has already started on this session."
        ),
    )
}

fn mismatched(txn_number: i64, active: Option<i64>) -> CommandError {
    no_such_transaction(format!(
        "Given transaction number {txn_number} does not match any in-progress transactions. The active transaction number is {}",
        active.unwrap_or(-1)
    ))
}

fn aborted(txn_number: i64) -> CommandError {
    no_such_transaction(format!(
        "Transaction with {{ txnNumber: {txn_number} }} has been aborted."
    ))
}

fn committed(txn_number: i64) -> CommandError {
    CommandError::new(
        ErrorCode::TransactionCommitted,
        format!("Transaction with {{ txnNumber: {txn_number} }} has been committed."),
    )
}

/// The first write error of a write command's reply as the command's error (inside a
/// transaction mongod fails the command instead of reporting write errors).
fn first_write_error(reply: &Reply) -> Option<CommandError> {
    let Reply::Document(reply) = reply else {
        return None;
    };
    let errors = reply.get_array("writeErrors").ok()?;
    let first = errors.first()?.as_document()?;
    let code = first.get_i32("code").ok()?;
    let errmsg = first.get_str("errmsg").unwrap_or_default().to_string();
    let code = ErrorCode::ALL
        .iter()
        .copied()
        .find(|known| known.code() == code)
        .unwrap_or(ErrorCode::InternalError);
    let mut extra = Document::new();
    for field in ["keyPattern", "keyValue", "errInfo"] {
        if let Some(value) = first.get(field) {
            extra.insert(field, value.clone());
        }
    }
    let error = CommandError::new(code, errmsg);
    Some(if extra.is_empty() {
        error
    } else {
        error.with_extra(extra)
    })
}

/// `error` labelled `TransientTransactionError` if a retry of the whole transaction may
/// succeed (mongod's `isTransientTransactionError`: write conflicts, lock timeouts, a
/// transaction that no longer exists, the database out of reach).
fn label_transient(error: CommandError) -> CommandError {
    if is_transient(error.code) {
        labelled(error, TRANSIENT)
    } else {
        error
    }
}

fn is_transient(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::WriteConflict
            | ErrorCode::LockTimeout
            | ErrorCode::NoSuchTransaction
            | ErrorCode::HostUnreachable
    )
}

/// A commit's or abort's session fields; 125 without them (checked before anything else).
pub(crate) fn require_fields(command: &str, body: &Document) -> CommandResult<Fields> {
    fields(body)?.ok_or_else(|| {
        CommandError::new(
            ErrorCode::CommandFailed,
            format!("{command} must be run within a transaction"),
        )
    })
}

impl Transactions {
    /// The session a commit or abort (`what`, as mongod's message names it) names, locked,
    /// with its `fields` (from [`require_fields`]) checked; and its `txnNumber`.
    async fn finishing(
        &self,
        what: &str,
        fields: Fields,
        body: &Document,
    ) -> CommandResult<(tokio::sync::OwnedMutexGuard<Session>, i64)> {
        if fields.start {
            return Err(CommandError::new(
                ErrorCode::OperationNotSupportedInTransaction,
                format!("Cannot start a transaction with {what}"),
            ));
        }
        let (key, shown) = session_key(body)?;
        let session = self.session(key).lock_owned().await;
        if let Some(newest) = session
            .txn_number
            .filter(|newest| fields.txn_number < *newest)
        {
            return Err(too_old(fields.txn_number, &shown, newest));
        }
        if session.txn_number != Some(fields.txn_number) {
            return Err(mismatched(fields.txn_number, session.txn_number));
        }
        Ok((session, fields.txn_number))
    }

    /// `commitTransaction`: stores everything the transaction wrote in one atomic commit, or
    /// nothing (a conflict found now is a `WriteConflict` the whole transaction may retry). A
    /// committed transaction's commit may be retried and answers ok again.
    pub(crate) async fn commit(
        &self,
        fields: Fields,
        body: &Document,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        force_durable: bool,
        concern_error: Option<Document>,
    ) -> CommandResult {
        let (mut session, txn_number) = self.finishing("commit", fields, body).await?;
        let running = match std::mem::take(&mut session.state) {
            State::Running(running) => running,
            State::Committed => {
                session.state = State::Committed;
                return Ok(with_concern_error(concern_error));
            }
            other => {
                session.state = other;
                // With a write-concern error the client must not retry the whole transaction.
                return Err(match concern_error {
                    Some(_) => CommandError::new(
                        ErrorCode::NoSuchTransaction,
                        format!("Transaction with {{ txnNumber: {txn_number} }} has been aborted."),
                    ),
                    None => aborted(txn_number),
                });
            }
        };
        let totals = (Arc::clone(&self.committed), Arc::clone(&self.aborted));
        let lsid = body.get("lsid").cloned().unwrap_or(Bson::Null);
        // Run to the end even if the client goes away or maxTimeMS passes: the session must learn
        // the outcome, so that a retried commit answers it.
        let commit = tokio::spawn(async move {
            let txn = running.storage;
            let result = if txn.has_writes() {
                let now_ms = clock.now_ms();
                let mut commit = txn.commit(|meta| {
                    Arc::new(tideway_exec::ttl::TtlPolicies::from_meta(meta))
                        .expired_predicate(now_ms)
                });
                commit.session = doc! {"lsid": lsid, "txnNumber": txn_number};
                commit.force_durable = force_durable;
                storage.commit_transaction(commit).await
            } else {
                Ok(())
            };
            txn.release();
            session.state = match result {
                Ok(()) => State::Committed,
                Err(_) => State::Aborted,
            };
            let total = match result {
                Ok(()) => totals.0,
                Err(_) => totals.1,
            };
            total.fetch_add(1, Ordering::Relaxed);
            result
        });
        match commit.await {
            Ok(Ok(())) => Ok(with_concern_error(concern_error)),
            Ok(Err(error)) => {
                let error = match error {
                    // A key another writer took since the snapshot: the transaction lost the race.
                    StorageError::DuplicateKey { .. } => StorageError::WriteConflict,
                    error => error,
                };
                Err(label_transient(CommandError::from(error)))
            }
            Err(error) => Err(CommandError::internal(format!(
                "the commit did not finish: {error}"
            ))),
        }
    }

    /// `abortTransaction`: discards everything the transaction wrote.
    pub(crate) async fn abort(
        &self,
        fields: Fields,
        body: &Document,
        concern_error: Option<Document>,
    ) -> CommandResult {
        let (mut session, txn_number) = self.finishing("an abort", fields, body).await?;
        match &session.state {
            State::Running(_) => {
                self.end(&mut session, Some(State::Aborted));
                Ok(with_concern_error(concern_error))
            }
            State::Committed => Err(committed(txn_number)),
            State::Aborted | State::None => Err(aborted(txn_number)),
        }
    }
}

fn with_concern_error(concern_error: Option<Document>) -> Document {
    match concern_error {
        Some(error) => doc! {"writeConcernError": error},
        None => Document::new(),
    }
}
