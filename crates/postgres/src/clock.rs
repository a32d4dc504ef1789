//! One clock for expiry (issue 26, item 3): a node judges visibility by the database server's
//! time, not its own. This module measures where that time is relative to the node's clock,
//! keeps the never-backwards floor in the database (`tideway.meta` row `time_floor_ms`), and the
//! shared test advance (`clock_advance_ms`, moved by `advanceClock`) that every node on the
//! database adds.
//!
//! Invariants: the stored floor only grows (`GREATEST` in one statement, so concurrent raises
//! from several nodes keep the largest); the advance only grows; both survive restarts because
//! they are rows, not node state.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::Database;
use tideway_storage::StorageResult;

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
    /// Measures the database server's clock against this node's with one round trip.
    pub async fn measure_clock(&self) -> StorageResult<ClockSample> {
        let client = self.client().await?;
        let sent = node_now_ms();
        let server_ms: i64 = client
            .query_one(SERVER_TIME_MS, &[])
            .await
            .map_err(|error| {
                self.target()
                    .error("cannot read the database server's time", error)
            })?
            .get(0);
        let received = node_now_ms();
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

/// This node's wall clock in ms since the epoch.
fn node_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
