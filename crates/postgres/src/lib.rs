//! tideway-postgres: the PostgreSQL storage engine ([`PgStorage`], the `tideway_storage::Storage`
//! contract on PostgreSQL; issue 26). Modules: the connection target (`target`) with TLS on
//! rustls (`tls`), the pool ([`Database`]) and its connections (`conn`), the schema tideway
//! creates and checks at startup (`schema`), the catalog (`catalog`, decoded by `collection`),
//! the database's clock as the one clock for expiry (`clock`), document writes (`write`, with
//! index entries in bulk from `entries` and rows from `records`), reads (`read`), TTL reaping
//! (`reap`) and transactions' snapshots (`snapshot`), joined in `engine`; the nodes sharing the
//! database, with their heartbeats and reaper leases (`nodes`).
//!
//! Invariants (kept as the engine grows):
//! - All state lives in the database (schema `tideway`): nothing a second node on the same
//!   database could not see (issue 27).
//! - Portable SQL only: what PostgreSQL, Citus, YugabyteDB and CockroachDB all accept (no
//!   extensions, stored procedures, advisory locks or LISTEN/NOTIFY); serialization failures
//!   (40001, 40P01) are retried or answered as WriteConflict.
//! - Every error that names the database names it by [`Target::redacted`], never with its
//!   password.

mod catalog;
mod clock;
mod collection;
mod conn;
mod engine;
mod entries;
mod group;
mod nodes;
mod read;
mod reap;
mod records;
pub mod schema;
mod snapshot;
mod target;
mod tls;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use tideway_storage::{LastWriteRule, StorageResult};

pub use clock::{ClockSample, DatabaseClock};
pub use engine::PgStorage;
pub use nodes::{HEARTBEAT, LIVE_FOR_MS};
pub use schema::{Distribution, Layout};
pub use target::{redact as redact_uri, uri_with_database, Target};

/// How long a caller waits for a free pooled connection before an error (never forever: a
/// command fails with a retryable error instead of hanging).
const POOL_WAIT: Duration = Duration::from_secs(30);
/// How long opening one connection (TCP, TLS, authentication) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of connections to one database whose schema is current.
pub struct Database {
    pool: Pool,
    target: Arc<Target>,
    layout: Layout,
    counters: Arc<Counters>,
    /// Connections kept out of the pool for reads outside transactions, which pipeline their
    /// statements on them (fewer busy backends, fewer wake-ups than a connection per read);
    /// replaced when closed. None with a pool under [`MIN_POOL_FOR_READERS`].
    readers: Vec<std::sync::Mutex<Option<Arc<deadpool_postgres::Object>>>>,
    next_reader: std::sync::atomic::AtomicUsize,
    /// Which collections keep the `LastWrite` order ([`Database::apply_last_write_rule`]).
    last_write_rule: LastWriteRule,
    /// The reaper's next page, read while the page before it is deleted.
    read_ahead: reap::ReadAheadSlot,
    /// Single-document inserts waiting for or in their group's statement (`group.rs`).
    groups: group::InsertGroups,
}

/// Connections kept for pipelined reads, and the smallest pool that keeps them.
const READERS: usize = 2;
const MIN_POOL_FOR_READERS: usize = 4;

/// What the engine counts of its use of the database (`serverStatus.postgres`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Statements sent, each one round trip.
    pub round_trips: AtomicU64,
    /// Connections asked for while none was idle.
    pub waits: AtomicU64,
    /// Time spent getting connections, in µs.
    pub wait_micros: AtomicU64,
    /// Statements that wrote a group of single-document inserts (`group.rs`), and the inserts
    /// they wrote.
    pub insert_groups: AtomicU64,
    pub grouped_inserts: AtomicU64,
}

impl Database {
    /// Connects to `uri` (`postgresql://user:password@host:port/db?...`), checks that the
    /// database answers, and creates or checks tideway's schema (`schema::bootstrap`) in the
    /// layout the database has (local tables unless a node distributed them).
    /// An unreachable database, refused credentials or a newer schema are errors that name the
    /// URI without its password.
    pub async fn connect(uri: &str, pool_size: usize) -> StorageResult<Database> {
        Database::connect_with(uri, pool_size, None).await
    }

    /// [`Database::connect`], creating the tables as `distribute` asks (or turning the local
    /// tables of a current schema into such tables).
    pub async fn connect_with(
        uri: &str,
        pool_size: usize,
        distribute: Option<Distribution>,
    ) -> StorageResult<Database> {
        let mut target = Target::parse(uri)?;
        let layout = {
            let pool = connection_pool(&target, 1)?;
            let mut client = pool
                .get()
                .await
                .map_err(|error| target.error("cannot connect to PostgreSQL", error))?;
            schema::bootstrap(&mut client, &target, distribute).await?
        };
        target.plan_for(layout);
        let readers = if pool_size >= MIN_POOL_FOR_READERS {
            READERS
        } else {
            0
        };
        Ok(Database {
            pool: connection_pool(&target, pool_size)?,
            target: Arc::new(target),
            layout,
            counters: Arc::default(),
            readers: (0..readers).map(|_| std::sync::Mutex::new(None)).collect(),
            next_reader: std::sync::atomic::AtomicUsize::new(0),
            last_write_rule: tideway_storage::every_collection,
            read_ahead: reap::ReadAheadSlot::default(),
            groups: group::InsertGroups::default(),
        })
    }

    /// How tideway's tables lie in this database.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// A pooled connection; an error names the database without its password.
    pub async fn client(&self) -> StorageResult<deadpool_postgres::Object> {
        let started = std::time::Instant::now();
        if self.pool.status().available == 0 {
            self.counters.waits.fetch_add(1, Ordering::Relaxed);
        }
        let object = self
            .pool
            .get()
            .await
            .map_err(|error| self.target.error("cannot connect to PostgreSQL", error));
        let waited = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters
            .wait_micros
            .fetch_add(waited, Ordering::Relaxed);
        object
    }

    /// A connection shared by reads outside transactions (round robin over the kept ones, a
    /// closed one replaced from the pool); `None` when none are kept.
    pub(crate) async fn reader(&self) -> StorageResult<Option<Arc<deadpool_postgres::Object>>> {
        if self.readers.is_empty() {
            return Ok(None);
        }
        let at = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        let slot = &self.readers[at];
        let lock = || slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(kept) = lock().as_ref().filter(|kept| !kept.is_closed()) {
            return Ok(Some(Arc::clone(kept)));
        }
        let fresh = Arc::new(self.client().await?);
        let mut kept = lock();
        match kept.as_ref().filter(|kept| !kept.is_closed()) {
            // Another read replaced it meanwhile: the fresh one goes back to the pool.
            Some(replaced) => Ok(Some(Arc::clone(replaced))),
            None => {
                *kept = Some(Arc::clone(&fresh));
                Ok(Some(fresh))
            }
        }
    }

    /// The pool and round trips as `serverStatus.postgres` reports them.
    pub fn status(&self) -> bson::Document {
        let pool = self.pool.status();
        let count = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        let read = |counter: &AtomicU64| {
            i64::try_from(counter.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
        };
        bson::doc! {
            "uri": self.target.redacted(),
            "layout": self.layout.name(),
            "pool": {
                "maxSize": count(pool.max_size),
                "size": count(pool.size),
                "available": count(pool.available),
                "inUse": count(pool.size.saturating_sub(pool.available)),
                "waiting": count(pool.waiting),
                "waits": read(&self.counters.waits),
                "waitMicros": read(&self.counters.wait_micros),
            },
            "roundTrips": read(&self.counters.round_trips),
            "insertGroups": {
                "groups": read(&self.counters.insert_groups),
                "inserts": read(&self.counters.grouped_inserts),
            },
        }
    }

    pub(crate) fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) fn shared_target(&self) -> Arc<Target> {
        Arc::clone(&self.target)
    }
}

/// A pool of at most `size` connections to `target`.
fn connection_pool(target: &Target, size: usize) -> StorageResult<Pool> {
    let manager = Manager::from_config(
        target.config().clone(),
        tls::connector(target.tls())?,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|error| target.error("cannot create the connection pool", error))
}

/// Whether a database error is a serialization failure or deadlock (40001, 40P01): the
/// transaction did nothing and may be retried.
pub(crate) fn is_serialization_failure(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    error.code().is_some_and(|code| {
        *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
    })
}
