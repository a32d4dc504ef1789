//! One pooled connection as the engine uses it: statements prepared once per connection
//! (`prepare_cached`), explicit transactions that never go back to the pool unfinished, requests
//! pipelined (a `BEGIN` goes out with the transaction's first statement, deferred statements with
//! the next one or the `COMMIT`: one round trip each time), and the engine's view of database
//! errors ([`Failure`]).
//!
//! Invariant: a connection returns to the pool outside any transaction. A [`Conn`] dropped with
//! its transaction open (a cancelled command) rolls it back on a spawned task before the
//! connection is reused, or closes the connection when no runtime can run that task.

use std::future::Future;
use std::sync::Arc;

use deadpool_postgres::{ClientWrapper, Object};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::schema::Layout;
use crate::{is_serialization_failure, Counters, Database, Target};
use tideway_storage::{StorageError, StorageResult};

/// Why a statement failed, as the engine acts on it.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A unique constraint refused a row (23505): a concurrent writer took a key or `_id`
    /// after this operation checked it. The transaction is aborted; redoing it sees the winner.
    Unique,
    /// A serialization failure or deadlock (40001, 40P01): redo the transaction.
    Serialization,
    /// A session claim was refused (`write::store_session`: its statement divides by zero,
    /// SQLSTATE 22012, the only division in the engine's SQL). The transaction is aborted.
    Refused,
    /// The catalog guard found the collection changed or dropped by another node since the
    /// write was prepared (`catalog::catalog_guard`, SQLSTATE 22P02). The transaction is
    /// aborted; redoing it needs the collection's catalog read again.
    StaleCatalog,
    /// Anything else, as the contract's error.
    Storage(StorageError),
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Self {
        Failure::Storage(error)
    }
}

impl Failure {
    /// The contract's error for a failure that is not redone (or was redone too often).
    pub fn into_storage(self) -> StorageError {
        match self {
            Failure::Unique | Failure::Serialization | Failure::StaleCatalog => {
                StorageError::WriteConflict
            }
            Failure::Refused => StorageError::TxnNumberUsed,
            Failure::Storage(error) => error,
        }
    }
}

pub(crate) type Attempt<T> = Result<T, Failure>;

/// Whether `error` is a unique violation as Citus reports it from a multi-row insert, which it
/// runs as `COPY` to the shards: SQLSTATE XX000 with the worker's message (`ReportCopyError` in
/// Citus's `multi_copy.c`).
fn is_citus_copy_unique(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::INTERNAL_ERROR)
        && error.as_db_error().is_some_and(|db| {
            db.message()
                .starts_with("duplicate key value violates unique constraint")
        })
}

/// A pooled connection, possibly inside a transaction this wrapper began.
pub(crate) struct Conn {
    target: Arc<Target>,
    layout: Layout,
    counters: Arc<Counters>,
    pending: std::sync::Mutex<Pending>,
    /// The catalog version read right after the next statement, once asked for
    /// ([`Conn::check_catalog_after_next`]).
    catalog_check: std::sync::Mutex<CatalogCheck>,
    object: Option<Held>,
    in_transaction: bool,
}

impl Conn {
    pub async fn get(database: &Database) -> StorageResult<Conn> {
        let object = Held::Own(Box::new(database.client().await?));
        Ok(Conn::holding(database, object))
    }

    /// A connection shared by concurrent reads outside transactions: their statements are
    /// pipelined on it (see `Database::reader`). Never begins a transaction.
    pub async fn shared(database: &Database) -> StorageResult<Conn> {
        let object = match database.reader().await? {
            Some(shared) => Held::Shared(shared),
            None => Held::Own(Box::new(database.client().await?)),
        };
        Ok(Conn::holding(database, object))
    }

    fn holding(database: &Database, object: Held) -> Conn {
        Conn {
            object: Some(object),
            target: database.shared_target(),
            layout: database.layout(),
            counters: database.counters(),
            pending: std::sync::Mutex::default(),
            catalog_check: std::sync::Mutex::default(),
            in_transaction: false,
        }
    }

    /// How the tables this connection reads and writes lie (some statements differ on Citus).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn client(&self) -> &ClientWrapper {
        // Present from construction until drop.
        match self.object.as_ref() {
            Some(Held::Own(object)) => object,
            Some(Held::Shared(object)) => object,
            None => unreachable!("connection present until dropped"),
        }
    }

    /// The error for a failed statement: `Unique` and `Serialization` for what a redo fixes,
    /// otherwise `Io` naming the database (without its password) and `what`.
    pub fn failure(&self, what: &str, error: tokio_postgres::Error) -> Failure {
        if error.code() == Some(&SqlState::UNIQUE_VIOLATION) || is_citus_copy_unique(&error) {
            return Failure::Unique;
        }
        if error.code() == Some(&SqlState::DIVISION_BY_ZERO) {
            return Failure::Refused;
        }
        if error.code() == Some(&SqlState::INVALID_TEXT_REPRESENTATION) {
            return Failure::StaleCatalog;
        }
        if is_serialization_failure(&error) {
            return Failure::Serialization;
        }
        Failure::Storage(self.target.error(what, error))
    }

    /// Counts one statement sent (one round trip), for the engine and the running command.
    fn round_trip(&self) {
        self.counters
            .round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tideway_storage::command_scope::add_round_trips(1);
    }

    pub async fn statement(&self, sql: &str) -> Attempt<Statement> {
        self.client()
            .prepare_cached(sql)
            .await
            .map_err(|error| self.failure("cannot prepare a statement", error))
    }

    /// Has the next statement sent followed, in the same round trip, by a read of the
    /// database's catalog version ([`Conn::take_catalog_version`]): a statement that ran
    /// before that read used no catalog newer than it.
    pub fn check_catalog_after_next(&self) {
        *self.catalog_check() = CatalogCheck::Asked;
    }

    /// The catalog version read after a statement ([`Conn::check_catalog_after_next`]),
    /// `None` if no statement was sent since it was asked for.
    pub fn take_catalog_version(&self) -> Option<StorageResult<i64>> {
        match std::mem::take(&mut *self.catalog_check()) {
            CatalogCheck::Read(version) => Some(version),
            CatalogCheck::None | CatalogCheck::Asked => None,
        }
    }

    fn catalog_check(&self) -> std::sync::MutexGuard<'_, CatalogCheck> {
        self.catalog_check
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends what is pending (a `BEGIN`, deferred statements) and then `main`, all in one
    /// round trip: the requests go out in that order before any reply is awaited (and a
    /// catalog check asked for goes after `main`, its statement prepared before `main` is
    /// sent). The first failure in that order is the result (a statement after a failed one
    /// only reports the aborted transaction).
    async fn send<T>(
        &self,
        what: &str,
        main: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Attempt<T> {
        let pending = std::mem::take(&mut *self.pending());
        let mut statements = Vec::with_capacity(pending.deferred.len());
        for deferred in &pending.deferred {
            statements.push(self.statement(deferred.sql).await?);
        }
        let asked = matches!(*self.catalog_check(), CatalogCheck::Asked);
        let check = if asked {
            Some(self.statement(CATALOG_VERSION).await?)
        } else {
            None
        };
        self.round_trip();
        let begin = async {
            match &pending.begin {
                Some(sql) => self.client().batch_execute(sql).await,
                None => Ok(()),
            }
        };
        let deferred = futures::future::try_join_all(pending.deferred.iter().zip(&statements).map(
            |(deferred, statement)| {
                let params: Vec<&(dyn ToSql + Sync)> = deferred
                    .params
                    .iter()
                    .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                async move { self.client().execute(statement, &params).await }
            },
        ));
        let checked = async {
            match &check {
                Some(statement) => Some(self.client().query_one(statement, &[]).await),
                None => None,
            }
        };
        let (began, deferred, result, checked) = tokio::join!(begin, deferred, main, checked);
        if let Some(checked) = checked {
            *self.catalog_check() = CatalogCheck::Read(
                checked
                    .map(|row| row.get(0))
                    .map_err(|error| self.target.error("cannot read the catalog version", error)),
            );
        }
        began.map_err(|error| self.failure("cannot begin a transaction", error))?;
        deferred.map_err(|error| self.failure("a statement failed", error))?;
        result.map_err(|error| self.failure(what, error))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Attempt<Vec<Row>> {
        let statement = self.statement(sql).await?;
        self.send("a query failed", self.client().query(&statement, params))
            .await
    }

    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Attempt<Option<Row>> {
        let statement = self.statement(sql).await?;
        self.send(
            "a query failed",
            self.client().query_opt(&statement, params),
        )
        .await
    }

    /// [`Conn::query`], and the open transaction's `COMMIT` right behind it, in the same round
    /// trip. The transaction is over either way (a failed statement makes the `COMMIT` a
    /// rollback); the first failure is the result.
    pub async fn query_and_commit(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Attempt<Vec<Row>> {
        let statement = self.statement(sql).await?;
        let both = async {
            let client = self.client();
            let (rows, committed) = tokio::join!(
                client.query(&statement, params),
                client.batch_execute("COMMIT")
            );
            let rows = rows?;
            committed.map(|()| rows)
        };
        let result = self.send("a query failed", both).await;
        self.in_transaction = false;
        result
    }

    pub async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Attempt<u64> {
        let statement = self.statement(sql).await?;
        self.send(
            "a statement failed",
            self.client().execute(&statement, params),
        )
        .await
    }

    /// Runs `sql` with `params` in the open transaction together with the next statement or
    /// the commit (one round trip for both); its failure is theirs.
    pub fn defer(&self, sql: &'static str, params: OwnedParams) {
        self.pending().deferred.push(Deferred { sql, params });
    }

    /// Begins a transaction (`BEGIN` with its options, e.g. `ISOLATION LEVEL REPEATABLE READ`),
    /// sent with the transaction's first statement.
    pub fn begin(&mut self, options: &str) {
        self.in_transaction = true;
        self.pending().begin = Some(format!("BEGIN {options}"));
    }

    /// Commits the open transaction, with the statements still deferred. A failed commit (a
    /// serialization failure found at commit, a lost connection) leaves the outcome as the error
    /// says: redo or unknown.
    pub async fn commit(&mut self) -> Attempt<()> {
        let nothing_sent = {
            let pending = self.pending();
            pending.begin.is_some() && pending.deferred.is_empty()
        };
        let result = if nothing_sent {
            *self.pending() = Pending::default();
            Ok(())
        } else {
            self.send(
                "cannot commit a transaction",
                self.client().batch_execute("COMMIT"),
            )
            .await
        };
        self.in_transaction = false;
        result
    }

    /// Rolls the open transaction back (nothing of it stays; deferred statements are dropped).
    pub async fn rollback(&mut self) -> Attempt<()> {
        let began = std::mem::take(&mut *self.pending()).begin.is_none();
        let result = if began && self.in_transaction {
            self.send(
                "cannot roll a transaction back",
                self.client().batch_execute("ROLLBACK"),
            )
            .await
        } else {
            Ok(())
        };
        self.in_transaction = false;
        result
    }
}

/// The database's catalog version (`tideway.meta`, see `catalog.rs`).
pub(crate) const CATALOG_VERSION: &str =
    "SELECT value FROM tideway.meta WHERE name = 'catalog_version'";

/// A catalog check of a [`Conn`]: none, asked for with the next statement, or its result.
#[derive(Default)]
enum CatalogCheck {
    #[default]
    None,
    Asked,
    Read(StorageResult<i64>),
}

/// A pooled connection of one caller, or one shared by concurrent reads.
enum Held {
    Own(Box<Object>),
    Shared(Arc<Object>),
}

/// Owned parameters of a deferred statement.
pub(crate) type OwnedParams = Vec<Box<dyn ToSql + Sync + Send>>;

struct Deferred {
    sql: &'static str,
    params: OwnedParams,
}

/// What goes out with the next statement.
#[derive(Default)]
struct Pending {
    begin: Option<String>,
    deferred: Vec<Deferred>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.in_transaction {
            return;
        }
        let Some(Held::Own(object)) = self.object.take() else {
            return;
        };
        let object = *object;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if object.batch_execute("ROLLBACK").await.is_err() {
                        // Unknown state: never reuse it.
                        drop(Object::take(object));
                    }
                });
            }
            Err(_) => drop(Object::take(object)),
        }
    }
}
