//! The transfer workloads (issue 13: "throughput of 2-statement transactions with 8 clients"):
//! the `accounts` collections they update, the `transfers` log they append to, and the one
//! operation they repeat — `$inc` one random account and insert one log document — either as a
//! multi-document transaction (`txn2`, `txn2_hot`) or as two plain writes (`two_writes`,
//! `two_writes_hot`, the baselines that say what the transaction costs).
//!
//! A transaction runs on the client task's own session of the shared client
//! (`start_transaction`, the two statements, `commit_transaction`). An attempt that fails with
//! the `TransientTransactionError` label (a write conflict with another client's transaction)
//! is retried whole, immediately, as the driver's `with_transaction` helper does, up to
//! [`MAX_ATTEMPTS`] times; each retry is counted, so a small hot key space shows its conflict
//! rate. A commit that fails with `UnknownTransactionCommitResult` is committed again (the
//! transactions spec's rule), not retried whole. Any other failure is the operation's error.
//!
//! Account `k` is `{_id: k, n, payload}` (the `preloaded` document shape), so the accounts load
//! through `dataset.rs`; `transfers` is dropped and created again before every run, so that no
//! transaction has to create it (concurrent transactions creating one collection conflict).

use bson::{doc, Document};
use mongodb::error::{
    Error as DriverError, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT,
};
use mongodb::{ClientSession, Collection};

use crate::dataset;
use crate::rng::SplitMix64;
use crate::workload::{make_document_with, OpError};

/// Accounts of `txn2` and `two_writes`: uniform over this many, conflicts are rare.
pub const ACCOUNTS_COLLECTION: &str = "accounts";
pub const ACCOUNTS: u64 = 10_000;
/// Accounts of `txn2_hot` and `two_writes_hot`: 8 clients on 10 accounts conflict often.
pub const HOT_ACCOUNTS_COLLECTION: &str = "accounts_hot";
pub const HOT_ACCOUNTS: u64 = 10;
/// The transfer log every operation appends one document to.
pub const TRANSFERS_COLLECTION: &str = "transfers";
/// Attempts of one transaction before the operation counts as an error.
pub const MAX_ATTEMPTS: u64 = 1000;
/// Commits of one attempt while the result stays unknown (`UnknownTransactionCommitResult`).
const MAX_COMMITS: u32 = 3;

/// Makes a run's collections ready: `accounts` holds exactly `_id` 0..`accounts` (reused when
/// its count already matches, unless `reload`), and `transfers` exists and is empty.
pub async fn prepare(
    accounts: &Collection<Document>,
    account_count: u64,
    doc_bytes: usize,
    reload: bool,
    seed: u64,
) -> Result<(), OpError> {
    dataset::ensure_preloaded(accounts, account_count, doc_bytes, reload, seed).await?;
    let transfers = transfers_of(accounts);
    dataset::drop(&transfers).await?;
    let database = accounts.client().database(&accounts.namespace().db);
    database.create_collection(TRANSFERS_COLLECTION).await?;
    Ok(())
}

/// The `transfers` collection next to `accounts`.
pub fn transfers_of(accounts: &Collection<Document>) -> Collection<Document> {
    accounts
        .client()
        .database(&accounts.namespace().db)
        .collection(TRANSFERS_COLLECTION)
}

/// One client task's state for the transfer workloads.
pub struct Transfers {
    accounts: Collection<Document>,
    transfers: Collection<Document>,
    /// Sent again for every transfer with a new `account` (the driver adds a fresh `_id` to the
    /// wire copy each time).
    log_document: Document,
    /// Started on the first transactional operation, then reused by the task.
    session: Option<ClientSession>,
    /// Whole-transaction retries since the last [`Transfers::take_retries`].
    retries: u64,
}

/// How one transaction attempt failed.
enum AttemptError {
    /// Labelled `TransientTransactionError`: the whole transaction may be retried.
    Transient(DriverError),
    Failed(OpError),
}

impl From<DriverError> for AttemptError {
    fn from(error: DriverError) -> Self {
        if error.contains_label(TRANSIENT_TRANSACTION_ERROR) {
            AttemptError::Transient(error)
        } else {
            AttemptError::Failed(error.into())
        }
    }
}

impl Transfers {
    pub fn new(accounts: Collection<Document>, doc_bytes: usize, rng: &mut SplitMix64) -> Self {
        let transfers = transfers_of(&accounts);
        let log_document = make_document_with(None, &doc! {"account": 0_i64}, doc_bytes, rng);
        Transfers {
            accounts,
            transfers,
            log_document,
            session: None,
            retries: 0,
        }
    }

    /// Retries counted since the last call (the runner counts them with the operation).
    pub fn take_retries(&mut self) -> u64 {
        std::mem::take(&mut self.retries)
    }

    /// The two writes for `account`, without a transaction. Returns the documents written (2).
    pub async fn plain(&mut self, account: i64) -> Result<u64, OpError> {
        self.log_document.insert("account", account);
        let result = self
            .accounts
            .update_one(doc! {"_id": account}, doc! {"$inc": {"n": 1_i64}})
            .await?;
        check_matched(account, result.matched_count)?;
        self.transfers.insert_one(&self.log_document).await?;
        Ok(2)
    }

    /// The two writes for `account` in one transaction, retried whole while it fails with a
    /// transient error. Returns the documents written (2).
    pub async fn transaction(&mut self, account: i64) -> Result<u64, OpError> {
        self.log_document.insert("account", account);
        let session = match self.session {
            Some(ref mut session) => session,
            None => {
                let started = self.accounts.client().start_session().await?;
                self.session.insert(started)
            }
        };
        let mut attempts = 0_u64;
        loop {
            attempts += 1;
            match attempt(
                &self.accounts,
                &self.transfers,
                session,
                account,
                &self.log_document,
            )
            .await
            {
                Ok(()) => return Ok(2),
                Err(AttemptError::Transient(_)) if attempts < MAX_ATTEMPTS => self.retries += 1,
                Err(AttemptError::Transient(error)) => {
                    let error = OpError::from(error);
                    return Err(OpError::new(
                        format!("still transient after {MAX_ATTEMPTS} attempts"),
                        error.message,
                    ));
                }
                Err(AttemptError::Failed(error)) => return Err(error),
            }
        }
    }
}

/// One attempt: start, `$inc` the account, log the transfer, commit. A failed statement aborts
/// the transaction (the server has already aborted it; the driver's abort ends it client-side
/// and ignores the server's answer), so the session can start the next one.
async fn attempt(
    accounts: &Collection<Document>,
    transfers: &Collection<Document>,
    session: &mut ClientSession,
    account: i64,
    log_document: &Document,
) -> Result<(), AttemptError> {
    session.start_transaction().await?;
    let statements = async {
        let result = accounts
            .update_one(doc! {"_id": account}, doc! {"$inc": {"n": 1_i64}})
            .session(&mut *session)
            .await?;
        check_matched(account, result.matched_count).map_err(AttemptError::Failed)?;
        transfers
            .insert_one(log_document)
            .session(&mut *session)
            .await?;
        Ok::<(), AttemptError>(())
    }
    .await;
    if let Err(error) = statements {
        let _ = session.abort_transaction().await;
        return Err(error);
    }
    let mut commits = 0;
    loop {
        commits += 1;
        match session.commit_transaction().await {
            Ok(()) => return Ok(()),
            Err(error)
                if error.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT)
                    && commits < MAX_COMMITS => {}
            Err(error) => return Err(error.into()),
        }
    }
}

fn check_matched(account: i64, matched: u64) -> Result<(), OpError> {
    if matched == 1 {
        Ok(())
    } else {
        Err(OpError::new(
            "account not found",
            format!("update_one({{_id: {account}}}) matched {matched} documents"),
        ))
    }
}

/// Whole-transaction retries as a share of all attempts: retries ÷ (committed + retries).
pub fn conflict_rate(committed: u64, retries: u64) -> f64 {
    let attempts = committed + retries;
    if attempts == 0 {
        0.0
    } else {
        retries as f64 / attempts as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_rate_is_retries_over_attempts() {
        assert_eq!(conflict_rate(0, 0), 0.0);
        assert_eq!(conflict_rate(100, 0), 0.0);
        assert!((conflict_rate(75, 25) - 0.25).abs() < 1e-12);
    }
}
