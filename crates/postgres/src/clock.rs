//! One clock for expiry (issue 26, item 3): a node judges visibility by the database server's
//! time, not its own. This module measures where that time is relative to the node's clock,
//! keeps the never-backwards floor in the database (`tideway.meta` row `time_floor_ms`), and the
//! shared test advance (`clock_advance_ms`, moved by `advanceClock`) that every node on the
//! database adds.
//!
//! Invariants: the stored floor only grows (`GREATEST` in one statement, so concurrent raises
//! from several nodes keep the largest); the advance only grows; both survive restarts because
//! they are rows, not node state.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Database;
use tideway_base::clock::Clock;
use tideway_storage::StorageResult;

/// How often [`DatabaseClock`] measures the database's clock and reads the shared advance again.
pub const CLOCK_REFRESH: Duration = Duration::from_secs(10);

/// The server clock of a node over PostgreSQL: this node's wall clock plus the measured offset
/// of the database server's clock, plus the shared test advance (`advanceClock`, kept in the
/// database so every node adds the same). Readings between refreshes follow the node's clock at
/// the last measured offset; the server's `ServerClock` on top keeps it from going backwards
/// when a new measurement is lower.
#[derive(Debug, Default)]
pub struct DatabaseClock {
    /// How far this node's clock is made to read off (`--testClockSkewMs`, test only).
    node_skew_ms: i64,
    offset_ms: AtomicI64,
    advance_ms: AtomicI64,
    /// Set when `advance_ms` could not be stored (retried at the next refresh).
    unsaved_advance_ms: AtomicI64,
}

impl DatabaseClock {
    /// Measures the database's clock and reads the shared advance once, then keeps both fresh
    /// every [`CLOCK_REFRESH`] on a task that ends with the database.
    /// `node_skew_ms` moves this node's own clock (a test shows that it does not matter).
    pub async fn start(
        database: &Arc<Database>,
        node_skew_ms: i64,
    ) -> StorageResult<Arc<DatabaseClock>> {
        let clock = Arc::new(DatabaseClock {
            node_skew_ms,
            ..DatabaseClock::default()
        });
        clock.refresh(database).await?;
        let (weak_clock, weak_database) = (Arc::downgrade(&clock), Arc::downgrade(database));
        tokio::spawn(async move { keep_fresh(weak_clock, weak_database).await });
        Ok(clock)
    }

    async fn refresh(&self, database: &Database) -> StorageResult<()> {
        let sample = database.measure_clock(self.node_skew_ms).await?;
        self.offset_ms.store(sample.offset_ms, Ordering::SeqCst);
        let unsaved = self.unsaved_advance_ms.swap(0, Ordering::SeqCst);
        let shared = match database.advance_clock(unsaved).await {
            Ok(shared) => shared,
            Err(error) => {
                self.unsaved_advance_ms.fetch_add(unsaved, Ordering::SeqCst);
                return Err(error);
            }
        };
        self.advance_ms.fetch_max(shared, Ordering::SeqCst);
        Ok(())
    }

    /// The database server's clock minus this node's, as last measured.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

async fn keep_fresh(clock: Weak<DatabaseClock>, database: Weak<Database>) {
    loop {
        tokio::time::sleep(CLOCK_REFRESH).await;
        let (Some(clock), Some(database)) = (clock.upgrade(), database.upgrade()) else {
            return;
        };
        if let Err(error) = clock.refresh(&database).await {
            tracing::warn!(%error, "cannot measure the database's clock; keeping the last offset");
        }
    }
}

impl Clock for DatabaseClock {
    fn now_ms(&self) -> i64 {
        node_now_ms(self.node_skew_ms)
            + self.offset_ms.load(Ordering::SeqCst)
            + self.advance_ms.load(Ordering::SeqCst)
    }

    /// Moves this node at once; the database's shared advance follows at the next refresh.
    fn advance_ms(&self, delta_ms: i64) {
        let delta_ms = delta_ms.max(0);
        self.advance_ms.fetch_add(delta_ms, Ordering::SeqCst);
        self.unsaved_advance_ms
            .fetch_add(delta_ms, Ordering::SeqCst);
    }
}

/// The database server's time read in one statement: wall clock (`clock_timestamp`, not the
/// transaction start), in ms since the epoch.
const SERVER_TIME_MS: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// One measurement of the database server's clock against this node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSample {
    /// Database time minus node time, in ms, taking the server's reading to lie at the middle
    /// of the round trip (so the error is at most half of it).
    pub offset_ms: i64,
    /// The round trip's duration in ms.
    pub round_trip_ms: i64,
}

impl Database {
    /// Measures the database server's clock against this node's (read `node_skew_ms` off)
    /// with one round trip.
    pub async fn measure_clock(&self, node_skew_ms: i64) -> StorageResult<ClockSample> {
        let client = self.client().await?;
        let sent = node_now_ms(node_skew_ms);
        let server_ms: i64 = client
            .query_one(SERVER_TIME_MS, &[])
            .await
            .map_err(|error| {
                self.target()
                    .error("cannot read the database server's time", error)
            })?
            .get(0);
        let received = node_now_ms(node_skew_ms);
        Ok(ClockSample {
            offset_ms: server_ms - (sent + received) / 2,
            round_trip_ms: received - sent,
        })
    }

    /// Raises the stored time floor to `now_ms` if it is below (never lowers it) and returns
    /// the floor after: the latest time any node has reported.
    pub async fn raise_time_floor(&self, now_ms: i64) -> StorageResult<i64> {
        self.raise_meta("time_floor_ms", now_ms, "cannot record the server time")
            .await
    }

    /// The stored time floor (`None` before any node recorded one).
    pub async fn time_floor(&self) -> StorageResult<Option<i64>> {
        self.read_meta("time_floor_ms", "cannot read the server time floor")
            .await
    }

    /// Adds `ms` (at least 0) to the shared test advance and returns the total: what every
    /// node on this database adds to the database time (`advanceClock`).
    pub async fn advance_clock(&self, ms: i64) -> StorageResult<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO tideway.meta (name, value) VALUES ('clock_advance_ms', $1)
                 ON CONFLICT (name) DO UPDATE SET value = tideway.meta.value + EXCLUDED.value
                 RETURNING value",
                &[&ms.max(0)],
            )
            .await
            .map_err(|error| {
                self.target()
                    .error("cannot advance the shared clock", error)
            })?;
        Ok(row.get(0))
    }

    /// The shared test advance (0 when never advanced).
    pub async fn clock_advance(&self) -> StorageResult<i64> {
        Ok(self
            .read_meta("clock_advance_ms", "cannot read the shared clock advance")
            .await?
            .unwrap_or(0))
    }

    async fn raise_meta(&self, name: &str, value: i64, what: &str) -> StorageResult<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO tideway.meta (name, value) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET value = GREATEST(tideway.meta.value, EXCLUDED.value)
                 RETURNING value",
                &[&name, &value],
            )
            .await
            .map_err(|error| self.target().error(what, error))?;
        Ok(row.get(0))
    }

    async fn read_meta(&self, name: &str, what: &str) -> StorageResult<Option<i64>> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT value FROM tideway.meta WHERE name = $1", &[&name])
            .await
            .map_err(|error| self.target().error(what, error))?;
        Ok(row.map(|row| row.get(0)))
    }
}

/// This node's wall clock in ms since the epoch, read `skew_ms` off.
fn node_now_ms(skew_ms: i64) -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
        + skew_ms
}
