//! The nodes sharing one database (issue 27): each node's heartbeat row (`tideway.nodes`) and
//! the reaper lease of each collection (`tideway.reaper_leases`), so that one node reaps a
//! collection and a dead node's collections pass to a live one.
//!
//! Invariants: every time here is the database server's (`statement_timestamp()` inside the
//! statements), so no node's own clock decides liveness. A node is live while its heartbeat is
//! younger than [`LIVE_FOR_MS`]. A lease passes to another node only from a holder that was not
//! live when the taker read the heartbeats, or that gave it up, through an upsert that
//! re-checks the row it conflicts with (`INSERT … ON CONFLICT DO UPDATE … WHERE`), so a lease
//! has one holder at a time and two live nodes never take one from each other. The SQL keeps
//! to what Citus accepts on reference tables (no volatile functions, no reads of another table
//! inside a modification). The lease divides work, it does not guard correctness: two nodes reaping one
//! collection (for at most [`LIVE_FOR_MS`] after a holder stalls) delete each document once,
//! because every delete re-checks the revision it judged.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bson::{doc, Bson, Document};

use crate::clock::DatabaseClock;
use crate::Database;
use tideway_storage::{StorageError, StorageResult};

/// How often a node writes its heartbeat and reads the other nodes'.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A node whose last heartbeat is older than this is dead: its reaper leases pass to live
/// nodes at their next pass (three missed heartbeats; with the default 1 s between passes a
/// dead holder's collections are taken over within about 7 s).
pub const LIVE_FOR_MS: i64 = 6_000;
/// The rows of nodes silent for this long are deleted by any live node's heartbeat.
const FORGET_AFTER_MS: i64 = 3_600_000;

/// The database server's time in ms since the epoch at the start of the statement
/// (`statement_timestamp()`: stable, so Citus accepts it in a modification, where it refuses
/// the volatile `clock_timestamp()`).
const DATABASE_NOW_MS: &str = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint";

/// This node among the nodes on the database: its id (random, new at every start), whether it
/// has joined (its heartbeat runs until it leaves), and the last view of every node.
#[derive(Debug)]
pub(crate) struct Presence {
    id: String,
    state: Arc<PresenceState>,
}

#[derive(Debug, Default)]
struct PresenceState {
    /// Whether the node has left; held while a heartbeat writes, so none writes the node's row
    /// again once it has left.
    left: tokio::sync::Mutex<bool>,
    /// What the last heartbeat read: every node's row with its leases.
    view: Mutex<Option<Document>>,
}

impl Presence {
    pub(crate) fn new() -> Presence {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Presence {
            id: id[..12].to_owned(),
            state: Arc::default(),
        }
    }

    /// Writes this node's row (it listens on `address`), reads every node's, and keeps the
    /// heartbeat going every [`HEARTBEAT`] on a task that ends when the node leaves or the
    /// database is dropped, also when this first heartbeat failed. Returns the first view of
    /// the nodes.
    pub(crate) async fn join(
        &self,
        database: &Arc<Database>,
        clock: &Arc<DatabaseClock>,
        address: &str,
    ) -> StorageResult<Document> {
        let beat = Heartbeat {
            id: self.id.clone(),
            address: address.to_owned(),
            clock: Arc::clone(clock),
        };
        let first = self.state.beat(&beat, database).await;
        let (state, database) = (Arc::downgrade(&self.state), Arc::downgrade(database));
        tokio::spawn(async move { keep_beating(beat, state, database).await });
        first?.ok_or_else(|| StorageError::Io("this node has left the database".to_string()))
    }

    /// Stops the heartbeat and deletes this node's row and leases: the other nodes take its
    /// collections at their next pass.
    pub(crate) async fn leave(&self, database: &Database) -> StorageResult<()> {
        *self.state.left.lock().await = true;
        self.release_leases(database).await?;
        let client = database.client().await?;
        client
            .execute("DELETE FROM tideway.nodes WHERE id = $1", &[&self.id])
            .await
            .map_err(|error| {
                database
                    .target()
                    .error("cannot remove this node's row", error)
            })?;
        Ok(())
    }

    /// Of the collections `ids`, those whose reaper lease this node holds after taking every
    /// lease nobody holds or whose holder is not live (two statements: the live nodes, then the
    /// leases; a holder that comes back to life between them finds its leases taken). None
    /// without collections to reap (a node's monitor asks every pass).
    pub(crate) async fn claim_leases(
        &self,
        database: &Database,
        ids: &[i64],
    ) -> StorageResult<Vec<i64>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let client = database.client().await?;
        let failed = |error| database.target().error("cannot take reaper leases", error);
        // The live nodes first, in a statement of their own: an upsert whose conflict clause
        // reads another table is refused by Citus when the tables are reference tables.
        let live: Vec<String> = client
            .query(
                &format!(
                    "SELECT id FROM tideway.nodes WHERE heartbeat_ms > {DATABASE_NOW_MS} - $1"
                ),
                &[&LIVE_FOR_MS],
            )
            .await
            .map_err(failed)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let sql = format!(
            "WITH taken AS (
                INSERT INTO tideway.reaper_leases AS lease (coll_id, holder, since_ms)
                SELECT id, $2, {DATABASE_NOW_MS} FROM unnest($1::bigint[]) AS id
                ON CONFLICT (coll_id) DO UPDATE
                    SET holder = EXCLUDED.holder, since_ms = EXCLUDED.since_ms
                    WHERE lease.holder <> EXCLUDED.holder AND lease.holder <> ALL($3::text[])
                RETURNING coll_id)
             SELECT coll_id FROM taken
             UNION
             SELECT coll_id FROM tideway.reaper_leases WHERE holder = $2 AND coll_id = ANY($1)"
        );
        let rows = client
            .query(&sql, &[&ids, &self.id, &live])
            .await
            .map_err(failed)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Gives up every reaper lease this node holds.
    pub(crate) async fn release_leases(&self, database: &Database) -> StorageResult<()> {
        let client = database.client().await?;
        client
            .execute(
                "DELETE FROM tideway.reaper_leases WHERE holder = $1",
                &[&self.id],
            )
            .await
            .map_err(|error| {
                database
                    .target()
                    .error("cannot release reaper leases", error)
            })?;
        Ok(())
    }

    /// `serverStatus.postgres.nodes`: this node's id and clock offset, and every node's row as
    /// the last heartbeat read it (`None` before the node joined).
    pub(crate) fn status(&self, clock: &DatabaseClock) -> Option<Document> {
        let view = self.state.view()?;
        Some(doc! {
            "thisNode": &self.id,
            "clockOffsetMillis": clock.offset_ms(),
            "heartbeatMillis": HEARTBEAT.as_millis() as i64,
            "liveForMillis": LIVE_FOR_MS,
            "members": view.get("members").cloned().unwrap_or(Bson::Array(Vec::new())),
            "readAt": view.get("readAt").cloned().unwrap_or(Bson::Null),
        })
    }
}

impl PresenceState {
    /// One heartbeat, its view kept for the status; `None` once the node has left.
    async fn beat(&self, beat: &Heartbeat, database: &Database) -> StorageResult<Option<Document>> {
        let left = self.left.lock().await;
        if *left {
            return Ok(None);
        }
        let view = beat.beat(database).await?;
        drop(left);
        self.store(view.clone());
        Ok(Some(view))
    }

    fn store(&self, view: Document) {
        *self
            .view
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(view);
    }

    fn view(&self) -> Option<Document> {
        self.view
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// What a heartbeat writes.
#[derive(Debug)]
struct Heartbeat {
    id: String,
    address: String,
    clock: Arc<DatabaseClock>,
}

impl Heartbeat {
    /// Writes this node's row (the first time with its start), forgets long-silent nodes, and
    /// reads every node's row with the collections whose leases it holds.
    async fn beat(&self, database: &Database) -> StorageResult<Document> {
        let failed = |error| {
            database
                .target()
                .error("cannot write this node's heartbeat", error)
        };
        let client = database.client().await?;
        let pid = i64::from(std::process::id());
        let offset_ms = self.clock.offset_ms();
        client
            .execute(
                &format!(
                    "INSERT INTO tideway.nodes
                        (id, address, pid, started_ms, heartbeat_ms, clock_offset_ms)
                     VALUES ($1, $2, $3, {DATABASE_NOW_MS}, {DATABASE_NOW_MS}, $4)
                     ON CONFLICT (id) DO UPDATE SET heartbeat_ms = EXCLUDED.heartbeat_ms,
                        clock_offset_ms = EXCLUDED.clock_offset_ms"
                ),
                &[&self.id, &self.address, &pid, &offset_ms],
            )
            .await
            .map_err(failed)?;
        client
            .execute(
                &format!("DELETE FROM tideway.nodes WHERE heartbeat_ms < {DATABASE_NOW_MS} - $1"),
                &[&FORGET_AFTER_MS],
            )
            .await
            .map_err(failed)?;
        let rows = client
            .query(
                &format!(
                    "SELECT node.id, node.address, node.pid, node.started_ms, node.heartbeat_ms,
                        node.clock_offset_ms, {DATABASE_NOW_MS},
                        ARRAY(SELECT c.db || '.' || c.coll
                              FROM tideway.reaper_leases lease
                              JOIN tideway.collections c ON c.id = lease.coll_id
                              WHERE lease.holder = node.id ORDER BY 1)
                     FROM tideway.nodes node ORDER BY node.started_ms, node.id"
                ),
                &[],
            )
            .await
            .map_err(|error| database.target().error("cannot read the nodes", error))?;
        let mut members = Vec::with_capacity(rows.len());
        let mut read_at_ms = 0;
        for row in &rows {
            let (heartbeat_ms, now_ms): (i64, i64) = (row.get(4), row.get(6));
            read_at_ms = now_ms;
            let leases: Vec<String> = row.get(7);
            members.push(Bson::Document(doc! {
                "id": row.get::<_, String>(0),
                "address": row.get::<_, String>(1),
                "pid": row.get::<_, i64>(2),
                "startedAt": bson::DateTime::from_millis(row.get(3)),
                "lastHeartbeat": bson::DateTime::from_millis(heartbeat_ms),
                "live": now_ms - heartbeat_ms < LIVE_FOR_MS,
                "clockOffsetMillis": row.get::<_, i64>(5),
                "reaperLeases": leases,
            }));
        }
        Ok(doc! {
            "members": members,
            "readAt": bson::DateTime::from_millis(read_at_ms),
        })
    }
}

async fn keep_beating(beat: Heartbeat, state: Weak<PresenceState>, database: Weak<Database>) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let (Some(state), Some(database)) = (state.upgrade(), database.upgrade()) else {
            return;
        };
        match state.beat(&beat, &database).await {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(error) => tracing::warn!(%error, "cannot write this node's heartbeat"),
        }
    }
}
