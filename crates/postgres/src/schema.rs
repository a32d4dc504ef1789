//! tideway's tables in PostgreSQL (schema `tideway`), created and checked at startup.
//!
//! Layout of [`SCHEMA_VERSION`] 5 (each version's statements are in [`UPGRADES`]; a database of
//! an older version is upgraded in place at startup, in one transaction). Keys are the redb engine's
//! memcomparable encodings (`tideway_query::keycodec`) in `bytea` columns, whose B-tree order is
//! bytewise, so bounds, collation keys and both expiry orders mean the same on both engines:
//! - `meta (name → value)`: `schema_version`, `catalog_version` (see `catalog.rs`), the server
//!   time floor
//!   (`time_floor_ms`) and the shared test advance (`clock_advance_ms`), see `clock.rs`.
//! - `collections (id → db, coll, entry, version)`: one row per collection; `entry` is the
//!   catalog document every engine stores (`tideway_storage::catalog_doc`); `version` grows with
//!   every change of the row (since version 4), so a write can check in its own transaction that
//!   the catalog it used is still current (`catalog::catalog_guard`).
//! - `documents ((coll_id, id_key) → record_id, rev, last_write_ms, ttl_class, expire_at_ms,
//!   body)`: each document's BSON with its header fields as columns. Natural order is the
//!   `(coll_id, record_id)` index; the two expiry orders are partial indexes
//!   (`ttl_class` 0 by `last_write_ms`, 2 by `expire_at_ms`), maintained by the insert itself.
//! - `index_entries ((index_id, entry) → id_key, type_bits)` and `unique_entries ((index_id, key)
//!   → id_key, type_bits)`: secondary index entries under the stored keys every engine uses
//!   (`tideway_storage::entry_keys`: a non-unique entry is index key ++ `_id` key ++ its length,
//!   a unique one the index key alone, whose uniqueness is the primary key). `id_key` repeats
//!   the `_id` a non-unique entry ends with, so a scan joins documents without parsing keys.
//! - the sequence `revisions`: every write's revision; an insert's is also its record id, so
//!   record ids only grow and are never reused. Since version 3 it increments by 1,024: each
//!   value drawn starts a block the drawing statement owns (an insert of many documents draws
//!   once per block).
//! - `sessions (key → header, txn_number, stmt_ids, bodies)` and `session_commits ((key,
//!   txn_number, first_stmt_id) → stmt_ids, bodies)`: session records of retryable writes and
//!   transactions. `txn_number` is the newest number the session claimed or recorded (`header`
//!   is NULL while only a claim exists); the statements of the commit that claimed it are in the
//!   session's row, those of later commits of the same number one `session_commits` row per
//!   commit, replies in `bodies` in the order of `stmt_ids`. Version 1 had no `txn_number` (NULL after the upgrade: the first
//!   claim then fails and the header decides, unless the upgrade found it from the statements)
//!   and one `session_statements` row per statement.
//! - `nodes (id → address, pid, started_ms, heartbeat_ms, clock_offset_ms)` and
//!   `reaper_leases (coll_id → holder, since_ms)` (since version 5): the nodes on the database
//!   with their heartbeats, and which node reaps which collection (`nodes.rs`).
//!
//! With `--pgDistribute citus` the same tables are Citus tables ([`CITUS_LAYOUT`], recorded as
//! the `meta` row `layout` = 1): the catalog, `meta`, `nodes` and `reaper_leases` stay local
//! tables of the coordinator (every node connects to it; Citus serializes row locks on
//! reference tables, which every write's catalog guard takes), `documents` and `index_entries`
//! are distributed by `id_key` and co-located (a document's entries on its shard; the entries'
//! primary key widened to include `id_key`, as Citus requires of a distributed table's unique
//! constraints), `unique_entries` by `key` (so its primary key still makes a unique index
//! unique across shards), `sessions` and `session_commits` by `key`.
//!
//! Invariant: a database holds either no `tideway.meta` row `schema_version` (never
//! bootstrapped) or every table of that version, in one layout. Must not: use what Citus,
//! YugabyteDB or CockroachDB lack (see the crate invariants).

use tokio_postgres::{Client, IsolationLevel};

use crate::{is_serialization_failure, Target};
use tideway_storage::{StorageError, StorageResult};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 5;

/// The statements that bring version `n` to `n + 1`, at index `n` (version 0: no schema).
const UPGRADES: [&[&str]; SCHEMA_VERSION as usize] =
    [VERSION_1, VERSION_2, VERSION_3, VERSION_4, VERSION_5];

/// Concurrent bootstraps (several nodes starting together) conflict; each retries this often.
const BOOTSTRAP_ATTEMPTS: usize = 5;

/// The tables and sequences of version 1, in creation order.
const VERSION_1: &[&str] = &[
    "CREATE SEQUENCE tideway.catalog_ids",
    "CREATE SEQUENCE tideway.revisions",
    "INSERT INTO tideway.meta (name, value) VALUES ('catalog_version', 0)",
    "CREATE TABLE tideway.collections (
        id bigint PRIMARY KEY,
        db text NOT NULL,
        coll text NOT NULL,
        entry bytea NOT NULL,
        UNIQUE (db, coll))",
    "CREATE TABLE tideway.documents (
        coll_id bigint NOT NULL,
        id_key bytea NOT NULL,
        record_id bigint NOT NULL,
        rev bigint NOT NULL,
        last_write_ms bigint NOT NULL,
        ttl_class smallint NOT NULL,
        expire_at_ms bigint NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (coll_id, id_key))",
    "CREATE INDEX documents_natural ON tideway.documents (coll_id, record_id)",
    "CREATE INDEX documents_last_write ON tideway.documents (coll_id, last_write_ms, id_key)
        WHERE ttl_class = 0",
    "CREATE INDEX documents_own_expiry ON tideway.documents (coll_id, expire_at_ms, id_key)
        WHERE ttl_class = 2",
    "CREATE TABLE tideway.index_entries (
        index_id bigint NOT NULL,
        entry bytea NOT NULL,
        id_key bytea NOT NULL,
        type_bits bytea,
        PRIMARY KEY (index_id, entry))",
    "CREATE TABLE tideway.unique_entries (
        index_id bigint NOT NULL,
        key bytea NOT NULL,
        id_key bytea NOT NULL,
        type_bits bytea,
        PRIMARY KEY (index_id, key))",
    "CREATE TABLE tideway.sessions (
        key bytea PRIMARY KEY,
        header bytea NOT NULL)",
    "CREATE TABLE tideway.session_statements (
        key bytea NOT NULL,
        txn_number bigint NOT NULL,
        stmt_id integer NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (key, txn_number, stmt_id))",
];

/// Version 2: session claims (`sessions.txn_number`), one row per recorded commit.
const VERSION_2: &[&str] = &[
    "ALTER TABLE tideway.sessions ADD COLUMN txn_number bigint",
    "ALTER TABLE tideway.sessions ADD COLUMN stmt_ids integer[]",
    "ALTER TABLE tideway.sessions ADD COLUMN bodies bytea[]",
    "ALTER TABLE tideway.sessions ALTER COLUMN header DROP NOT NULL",
    "CREATE TABLE tideway.session_commits (
        key bytea NOT NULL,
        txn_number bigint NOT NULL,
        first_stmt_id integer NOT NULL,
        stmt_ids integer[] NOT NULL,
        bodies bytea[] NOT NULL,
        PRIMARY KEY (key, txn_number, first_stmt_id))",
    "INSERT INTO tideway.session_commits (key, txn_number, first_stmt_id, stmt_ids, bodies)
        SELECT key, txn_number, stmt_id, ARRAY[stmt_id], ARRAY[body]
        FROM tideway.session_statements",
    // Statement rows belong to their header's txnNumber; a header without any (a transaction's)
    // keeps NULL, which refuses claims until its next record.
    "UPDATE tideway.sessions SET txn_number = (
        SELECT max(txn_number) FROM tideway.session_statements s WHERE s.key = sessions.key)",
    "DROP TABLE tideway.session_statements",
];

/// Version 3: each value the revision sequence hands out starts a block of revisions
/// (`write::REVISION_BLOCK`), so an insert of many documents draws once per block.
const VERSION_3: &[&str] = &["ALTER SEQUENCE tideway.revisions INCREMENT BY 1024"];

/// Version 4: each collection row's version, for the catalog guard of writes on several nodes.
const VERSION_4: &[&str] =
    &["ALTER TABLE tideway.collections ADD COLUMN version bigint NOT NULL DEFAULT 0"];

/// Version 5: the nodes on the database and the reaper leases (`nodes.rs`).
const VERSION_5: &[&str] = &[
    "CREATE TABLE tideway.nodes (
        id text PRIMARY KEY,
        address text NOT NULL,
        pid bigint NOT NULL,
        started_ms bigint NOT NULL,
        heartbeat_ms bigint NOT NULL,
        clock_offset_ms bigint NOT NULL)",
    "CREATE TABLE tideway.reaper_leases (
        coll_id bigint PRIMARY KEY,
        holder text NOT NULL,
        since_ms bigint NOT NULL)",
];

/// What `--pgDistribute` asks for: tideway's tables spread over a distributed PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Citus tables ([`CITUS_LAYOUT`]); needs the `citus` extension in the database.
    Citus,
}

/// How tideway's tables lie in a database (the `meta` row `layout`: absent for local tables,
/// 1 for Citus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Ordinary tables.
    Local,
    /// Citus distributed tables beside the coordinator's local catalog ([`CITUS_LAYOUT`]).
    Citus,
}

impl Layout {
    /// The name `serverStatus` and the startup report give it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Local => "local",
            Layout::Citus => "citus",
        }
    }
}

/// The statements that turn the current version's local tables into Citus tables (in the
/// bootstrap's transaction; rows already there move into the shards).
const CITUS_LAYOUT: &[&str] = &[
    "ALTER TABLE tideway.index_entries DROP CONSTRAINT index_entries_pkey,
        ADD CONSTRAINT index_entries_pkey PRIMARY KEY (index_id, entry, id_key)",
    "SELECT create_distributed_table('tideway.documents', 'id_key')",
    "SELECT create_distributed_table('tideway.index_entries', 'id_key',
        colocate_with => 'tideway.documents')",
    "SELECT create_distributed_table('tideway.unique_entries', 'key')",
    "SELECT create_distributed_table('tideway.sessions', 'key')",
    "SELECT create_distributed_table('tideway.session_commits', 'key',
        colocate_with => 'tideway.sessions')",
    // Citus copies rows already there into the shards and keeps the originals in the
    // coordinator's table, unread, until told to drop them.
    "SELECT truncate_local_data_after_distributing_table(table_name)
        FROM unnest(ARRAY['tideway.documents', 'tideway.index_entries', 'tideway.unique_entries',
            'tideway.sessions', 'tideway.session_commits']::regclass[]) AS table_name",
    "INSERT INTO tideway.meta (name, value) VALUES ('layout', 1)",
];

/// Creates tideway's schema in an empty database (as Citus tables when `distribute` asks), or
/// checks that the one there is this build's, and returns its layout. A newer version stops
/// startup with a message saying which build can read it; `distribute` turns local tables of a
/// current schema into Citus tables. Safe to run from several nodes at once: one creates, the
/// others find it created.
pub(crate) async fn bootstrap(
    client: &mut Client,
    target: &Target,
    distribute: Option<Distribution>,
) -> StorageResult<Layout> {
    let mut attempt = 1;
    loop {
        match try_bootstrap(client, target, distribute).await {
            Ok(result) => return result,
            Err(Retry(error)) if attempt == BOOTSTRAP_ATTEMPTS => {
                return Err(target.error(
                    "cannot create tideway's schema: concurrent startups kept conflicting",
                    error,
                ))
            }
            Err(Retry(_)) => attempt += 1,
        }
    }
}

/// A conflict with a concurrent bootstrap: try again.
struct Retry(tokio_postgres::Error);

async fn try_bootstrap(
    client: &mut Client,
    target: &Target,
    distribute: Option<Distribution>,
) -> Result<StorageResult<Layout>, Retry> {
    let fail = |what: &str, error: tokio_postgres::Error| {
        if is_retryable_ddl(&error) {
            Err(Retry(error))
        } else {
            Ok(Err(target.error(what, error)))
        }
    };
    if let Err(error) = client
        .batch_execute(
            "CREATE SCHEMA IF NOT EXISTS tideway;
             CREATE TABLE IF NOT EXISTS tideway.meta (name text PRIMARY KEY, value bigint NOT NULL)",
        )
        .await
    {
        return fail("cannot create tideway's schema", error);
    }
    let txn = match client
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .start()
        .await
    {
        Ok(txn) => txn,
        Err(error) => return fail("cannot start the schema check", error),
    };
    let stored = match txn
        .query_opt(
            "SELECT value FROM tideway.meta WHERE name = 'schema_version' FOR UPDATE",
            &[],
        )
        .await
    {
        Ok(row) => row.map(|row| row.get::<_, i64>(0)),
        Err(error) => return fail("cannot read tideway's schema version", error),
    };
    let layout = match txn
        .query_opt("SELECT value FROM tideway.meta WHERE name = 'layout'", &[])
        .await
    {
        Ok(Some(row)) if row.get::<_, i64>(0) == 1 => Layout::Citus,
        Ok(_) => Layout::Local,
        Err(error) => return fail("cannot read tideway's table layout", error),
    };
    let distributing = distribute == Some(Distribution::Citus) && layout == Layout::Local;
    let from = match stored {
        Some(SCHEMA_VERSION) if !distributing => return Ok(Ok(layout)),
        Some(SCHEMA_VERSION) => SCHEMA_VERSION,
        Some(newer) if newer > SCHEMA_VERSION => {
            return Ok(Err(StorageError::Corrupt(format!(
                "the database {} holds tideway schema version {newer}, newer than this build's \
                 {SCHEMA_VERSION}: start a tideway build that knows version {newer}",
                target.redacted()
            ))))
        }
        Some(older) if older >= 1 => older,
        Some(invalid) => {
            return Ok(Err(StorageError::Corrupt(format!(
                "the database {} holds an invalid tideway schema version {invalid}",
                target.redacted()
            ))))
        }
        None => 0,
    };
    for statements in &UPGRADES[from as usize..] {
        for statement in *statements {
            if let Err(error) = txn.batch_execute(statement).await {
                return fail("cannot create or upgrade tideway's tables", error);
            }
        }
    }
    if distributing {
        match txn
            .query_opt("SELECT 1 FROM pg_extension WHERE extname = 'citus'", &[])
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Ok(Err(StorageError::Io(format!(
                    "--pgDistribute citus needs the citus extension in the database {} \
                     (CREATE EXTENSION citus on the coordinator, with its workers added)",
                    target.redacted()
                ))))
            }
            Err(error) => return fail("cannot look for the citus extension", error),
        }
        for statement in CITUS_LAYOUT {
            if let Err(error) = txn.batch_execute(statement).await {
                return fail("cannot distribute tideway's tables with Citus", error);
            }
        }
    }
    let layout = if distributing { Layout::Citus } else { layout };
    if let Err(error) = txn
        .execute(
            "INSERT INTO tideway.meta (name, value) VALUES ('schema_version', $1)
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            &[&SCHEMA_VERSION],
        )
        .await
    {
        return fail("cannot record tideway's schema version", error);
    }
    match txn.commit().await {
        Ok(()) => Ok(Ok(layout)),
        Err(error) => fail("cannot commit tideway's schema", error),
    }
}

/// Errors a concurrent bootstrap causes: serialization failures, and the duplicate catalog rows
/// PostgreSQL reports when two sessions create the same object at once (23505 on `pg_type` or
/// `pg_namespace`, 42P07 duplicate table, 42P06 duplicate schema).
fn is_retryable_ddl(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    is_serialization_failure(error)
        || error.code().is_some_and(|code| {
            *code == SqlState::UNIQUE_VIOLATION
                || *code == SqlState::DUPLICATE_TABLE
                || *code == SqlState::DUPLICATE_SCHEMA
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_3_sets_the_revision_block() {
        assert_eq!(
            super::VERSION_3,
            [format!(
                "ALTER SEQUENCE tideway.revisions INCREMENT BY {}",
                crate::write::REVISION_BLOCK
            )]
        );
    }
}
