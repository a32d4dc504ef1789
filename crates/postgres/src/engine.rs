//! [`PgStorage`]: the `tideway_storage::Storage` contract on PostgreSQL. It owns the pool
//! ([`Database`]), the cache of decoded collections and the DDL lock; the work is in `catalog`,
//! `write`, `read`, `reap` and `snapshot`.
//!
//! Invariants: a write holds the DDL lock shared from reading the cached collection to its
//! commit, and every catalog change holds it alone and forgets the cache, so a write always uses
//! the catalog of this node's last catalog change; other nodes' changes are caught by the
//! catalog guard in every write's transaction and by the check of the catalog version that
//! goes with a command's first read (`command_scope`; docs/architecture.md, "Catalog"). The
//! engine has no oplog (this mode presents itself as a router, without replica-set features):
//! `oplog_appended` is never notified. The cluster time is the node's own, never going back
//! (seeded from the database's time floor).

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::{Bson, Document, Timestamp};
use tokio::sync::{Notify, RwLock};

use crate::clock::DatabaseClock;
use crate::collection::{Collection, Collections};
use crate::conn::{Conn, Failure};
use crate::nodes::Presence;
use crate::schema::Distribution;
use crate::snapshot::PgSnapshot;
use crate::write::{BatchOptions, Group, Prepared};
use crate::{read, Database};
use tideway_storage::command_scope::{self, EngineTag};
use tideway_storage::{
    CollectionMeta, CollectionStats, EntryCount, ExpiryOrder, IndexSpec, LastWriteRule, Namespace,
    ReapPage, ReapRequest, ReapSource, Record, RecordPredicate, RecordSession, ScanPage,
    ScanRequest, SessionClaim, Snapshot, Storage, StorageError, StorageResult, TransactionCommit,
    WriteOp, WriteOptions, WriteOutcome,
};

pub struct PgStorage {
    database: Arc<Database>,
    /// Names this engine to the command scope (`command_scope`).
    tag: EngineTag,
    clock: Arc<DatabaseClock>,
    /// This node among the nodes on the database: heartbeat and reaper leases.
    presence: Presence,
    collections: Collections,
    /// Shared by writes, held alone by catalog changes (see the module invariants).
    ddl: RwLock<()>,
    time_high_water_ms: i64,
    /// The last cluster time taken, packed as `seconds << 32 | increment`.
    cluster_time: Mutex<u64>,
    oplog_appended: Notify,
}

impl std::fmt::Debug for PgStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStorage")
            .field("database", &self.database.target().redacted())
            .finish()
    }
}

impl PgStorage {
    /// Connects to `uri` with a pool of `pool_size` connections, creating or checking the
    /// schema (see [`Database::connect`]).
    pub async fn open(uri: &str, pool_size: usize) -> StorageResult<PgStorage> {
        PgStorage::open_with_rule(uri, pool_size, None, tideway_storage::every_collection, 0).await
    }

    /// [`PgStorage::open`] keeping the `LastWrite` order only for the collections `rule`
    /// selects (the server's: those with a default TTL); every collection is brought in line
    /// with it first. `distribute` asks for distributed tables ([`Database::connect_with`]).
    /// `node_skew_ms` makes this node's own clock read that far off (a test option: expiry
    /// follows the database's clock whatever the node's reads).
    pub async fn open_with_rule(
        uri: &str,
        pool_size: usize,
        distribute: Option<Distribution>,
        rule: LastWriteRule,
        node_skew_ms: i64,
    ) -> StorageResult<PgStorage> {
        let mut database = Database::connect_with(uri, pool_size, distribute).await?;
        database.use_last_write_rule(rule).await?;
        let database = Arc::new(database);
        let clock = DatabaseClock::start(&database, node_skew_ms).await?;
        let time_high_water_ms = database.time_floor().await?.unwrap_or(0);
        let collections = Collections::default();
        collections.check(database.catalog_version().await?);
        let seconds = u64::try_from(time_high_water_ms / 1000).unwrap_or(0);
        Ok(PgStorage {
            database,
            tag: EngineTag::unique(),
            clock,
            presence: Presence::new(),
            collections,
            ddl: RwLock::new(()),
            time_high_water_ms,
            cluster_time: Mutex::new(seconds << 32),
            oplog_appended: Notify::new(),
        })
    }

    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The clock nodes on this database judge expiry by (see [`DatabaseClock`]).
    pub fn clock(&self) -> Arc<DatabaseClock> {
        Arc::clone(&self.clock)
    }

    /// The collection, from the cache or the catalog. Inside a command, the first statement
    /// that depends on the cache checks it (`command_scope`), so a command sees every catalog
    /// change that committed before it began, whichever node made it.
    async fn cached(&self, ns: &Namespace) -> StorageResult<Option<Arc<Collection>>> {
        command_scope::consulted(self.tag);
        if let Some(known) = self.collections.get(ns) {
            return Ok(known);
        }
        let generation = self.collections.generation();
        let loaded = self.database.load_collection(ns).await?.map(Arc::new);
        self.collections.put(ns, loaded.clone(), generation);
        Ok(loaded)
    }

    /// Runs a catalog change alone, then forgets the cached catalog.
    async fn catalog_change<T>(
        &self,
        change: impl std::future::Future<Output = StorageResult<T>>,
    ) -> StorageResult<T> {
        let _alone = self.ddl.write().await;
        let result = change.await;
        // The command changed something: it never runs again.
        command_scope::checked(self.tag);
        self.forget_own_change().await;
        result
    }

    /// Forgets the cached catalog after this node changed it (a catalog command, a multikey
    /// flag); the cache, emptied, is current as of the version read now (one round trip), so
    /// the next command is not run again for this node's own change.
    async fn forget_own_change(&self) {
        self.collections.forget();
        if let Ok(version) = self.database.catalog_version().await {
            self.collections.check(version);
        }
    }

    /// Runs `read` on a connection shared by reads. The first read of a command whose cached
    /// catalog is unchecked carries the check behind its statement: if it finds the cache
    /// stale, the cache is forgotten and the command runs again (it has changed nothing: this
    /// was its first statement).
    async fn checked_read<T>(
        &self,
        read: impl AsyncFnOnce(&Conn) -> StorageResult<T>,
    ) -> StorageResult<T> {
        let conn = Conn::shared(&self.database).await?;
        if command_scope::needs_check(self.tag) {
            conn.check_catalog_after_next();
        }
        let result = read(&conn).await;
        match conn.take_catalog_version() {
            // A failed read is its own error, whatever the check found.
            _ if result.is_err() => result,
            None => result,
            Some(Err(error)) => Err(error),
            Some(Ok(version)) if self.collections.check(version) => {
                command_scope::checked(self.tag);
                result
            }
            Some(Ok(_)) => Err(stale_catalog()),
        }
    }

    /// A new cluster time, greater than every earlier one (see `Storage::cluster_time`).
    fn take_time(&self) -> u64 {
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs())
            .min(u64::from(u32::MAX));
        let mut last = self
            .cluster_time
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *last = if now_secs > *last >> 32 {
            now_secs << 32 | 1
        } else {
            *last + 1
        };
        *last
    }

    async fn write_ops(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: Option<RecordSession>,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        let creates = ops.iter().any(|op| matches!(op, WriteOp::Insert { .. }));
        let count = ops.len();
        // Unchecked, the command has changed nothing yet: a stale catalog runs it again.
        let unchecked = command_scope::needs_check(self.tag);
        let mut ops = Unprepared::Ops(ops);
        for _ in 0..STALE_ATTEMPTS {
            let (_shared, collection) = loop {
                let shared = self.ddl.read().await;
                match self.cached(ns).await? {
                    Some(collection) => break (shared, collection),
                    None if creates => {
                        drop(shared);
                        match self
                            .create_collection(ns, Document::new(), Vec::new())
                            .await
                        {
                            Ok(_) | Err(StorageError::NamespaceExists(_)) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    None => {
                        drop(shared);
                        return self
                            .write_without_collection(count, options, claim, record)
                            .await;
                    }
                }
            };
            let group = Group {
                ops: ops.prepare(&collection),
                collection,
                stale: None,
            };
            let written = self
                .write_groups(
                    std::slice::from_ref(&group),
                    options.ordered,
                    false,
                    claim.as_ref(),
                    record.as_ref(),
                )
                .await?;
            match written {
                Some(outcomes) => {
                    command_scope::checked(self.tag);
                    return Ok(outcomes.into_iter().next().unwrap_or_default());
                }
                None if unchecked => return Err(stale_catalog()),
                None => ops = Unprepared::Prepared(group.ops),
            }
        }
        Err(StorageError::WriteConflict)
    }

    /// Applies `groups` as one batch ([`Database::write_batch`]): a cluster time for every
    /// operation that succeeds, the cached catalog forgotten when an index became multikey.
    /// `None` (with the cached catalog forgotten) when a collection changed on another node
    /// since the groups were prepared: nothing was written.
    async fn write_groups(
        &self,
        groups: &[Group],
        ordered: bool,
        all_or_nothing: bool,
        claim: Option<&SessionClaim>,
        record: Option<&RecordSession>,
    ) -> StorageResult<Option<Vec<crate::write::Outcomes>>> {
        let take_time = || self.take_time();
        let written = self
            .database
            .write_batch(
                groups,
                BatchOptions {
                    ordered,
                    all_or_nothing,
                    record,
                    claim,
                    take_time: &take_time,
                },
            )
            .await?;
        let Some((outcomes, multikey)) = written else {
            self.collections.forget();
            return Ok(None);
        };
        if multikey {
            self.forget_own_change().await;
        }
        for _ in outcomes.iter().flatten().filter(|outcome| outcome.is_ok()) {
            self.take_time();
        }
        Ok(Some(outcomes))
    }

    /// Without a collection there is nothing to replace or delete: every operation fails
    /// (`WriteConflict`, or its own error), and the claim and session record, if any, are
    /// committed alone.
    async fn write_without_collection(
        &self,
        count: usize,
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: Option<RecordSession>,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        let mut outcomes = Vec::new();
        for _ in 0..count {
            outcomes.push(Err(StorageError::WriteConflict));
            if options.ordered {
                break;
            }
        }
        let record = record.and_then(|record| {
            let time = tideway_storage::oplog::EntryTime::now(self.take_time());
            record(&tideway_storage::successes(&outcomes), time)
        });
        self.database
            .store_record_alone(claim.as_ref(), record.as_ref())
            .await?;
        command_scope::checked(self.tag);
        Ok(outcomes)
    }

    async fn read_conn(&self) -> StorageResult<Conn> {
        Conn::shared(&self.database).await
    }
}

/// The error of a command that found the cached catalog stale before it changed anything: the
/// dispatcher runs it again (`command_scope::request_restart`), so a client sees it only when
/// the catalog kept changing under every attempt.
fn stale_catalog() -> StorageError {
    command_scope::request_restart();
    StorageError::Unavailable(
        "the catalog changed on another node while the command ran; it was retried too often"
            .to_string(),
    )
}

/// How often a write is prepared again after another node changed its collection's catalog
/// before it fails with `WriteConflict`.
const STALE_ATTEMPTS: usize = 8;

/// A write's operations: as the caller gave them, or prepared for a version of the collection
/// that turned out stale.
enum Unprepared {
    Ops(Vec<WriteOp>),
    Prepared(Vec<Prepared>),
}

impl Unprepared {
    fn prepare(self, collection: &Collection) -> Vec<Prepared> {
        match self {
            Unprepared::Ops(ops) => ops
                .into_iter()
                .map(|op| Prepared::of(op, collection))
                .collect(),
            Unprepared::Prepared(prepared) => prepared
                .into_iter()
                .map(|op| op.rekeyed(collection))
                .collect(),
        }
    }
}

fn storage<T>(attempt: Result<T, Failure>) -> StorageResult<T> {
    attempt.map_err(Failure::into_storage)
}

fn decode_document(bytes: &[u8]) -> StorageResult<Document> {
    tideway_base::bsonutil::decode_document(bytes)
        .map_err(|error| StorageError::Corrupt(format!("stored session record: {error}")))
}

#[async_trait]
impl Storage for PgStorage {
    fn engine_name(&self) -> &'static str {
        "postgres"
    }

    fn status(&self) -> Option<(&'static str, Document)> {
        let mut status = self.database.status();
        if let Some(nodes) = self.presence.status(&self.clock) {
            status.insert("nodes", nodes);
        }
        Some(("postgres", status))
    }

    async fn list_databases(&self) -> StorageResult<Vec<(String, u64)>> {
        self.database.database_sizes().await
    }

    async fn list_database_names(&self) -> StorageResult<Vec<String>> {
        self.database.database_names().await
    }

    fn time_high_water_ms(&self) -> i64 {
        self.time_high_water_ms
    }

    fn cluster_time(&self) -> Timestamp {
        let packed = *self
            .cluster_time
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if packed & 0xffff_ffff == 0 {
            // No write yet.
            return Timestamp {
                time: 0,
                increment: 0,
            };
        }
        Timestamp {
            time: (packed >> 32) as u32,
            increment: packed as u32,
        }
    }

    fn oplog_appended(&self) -> &Notify {
        &self.oplog_appended
    }

    async fn catalog_current(&self) -> StorageResult<bool> {
        Ok(self
            .collections
            .check(self.database.catalog_version().await?))
    }

    async fn join(&self, address: &str) -> StorageResult<Option<Document>> {
        self.presence
            .join(&self.database, &self.clock, address)
            .await?;
        Ok(self.presence.status(&self.clock).map(|mut status| {
            status.insert("layout", self.database.layout().name());
            status
        }))
    }

    async fn leave(&self) -> StorageResult<()> {
        self.presence.leave(&self.database).await
    }

    async fn reaper_leases(&self, collections: Vec<Namespace>) -> StorageResult<Vec<Namespace>> {
        let mut by_id = std::collections::HashMap::with_capacity(collections.len());
        for ns in collections {
            if let Some(collection) = self.cached(&ns).await? {
                by_id.insert(collection.id, ns);
            }
        }
        let ids: Vec<i64> = by_id.keys().copied().collect();
        let held = self.presence.claim_leases(&self.database, &ids).await?;
        Ok(held
            .into_iter()
            .filter_map(|id| by_id.remove(&id))
            .collect())
    }

    async fn release_reaper_leases(&self) -> StorageResult<()> {
        self.presence.release_leases(&self.database).await
    }

    async fn record_time(&self, now_ms: i64) -> StorageResult<()> {
        self.database.raise_time_floor(now_ms).await.map(|_| ())
    }

    async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>> {
        self.database.list_collections(db).await
    }

    async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>> {
        Ok(self.cached(ns).await?.map(|found| found.meta.clone()))
    }

    async fn create_collection(
        &self,
        ns: &Namespace,
        options: Document,
        indexes: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        self.catalog_change(self.database.create_collection(ns, options, indexes))
            .await
    }

    async fn drop_collection(&self, ns: &Namespace) -> StorageResult<bool> {
        self.catalog_change(self.database.drop_collection(ns)).await
    }

    async fn drop_database(&self, db: &str) -> StorageResult<()> {
        self.catalog_change(self.database.drop_database(db)).await
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StorageResult<()> {
        self.catalog_change(self.database.rename_collection(from, to, drop_target))
            .await
    }

    async fn set_collection_options(&self, ns: &Namespace, options: Document) -> StorageResult<()> {
        self.catalog_change(self.database.set_collection_options(ns, options))
            .await
    }

    async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        self.catalog_change(self.database.create_indexes(ns, specs))
            .await
    }

    async fn drop_indexes(&self, ns: &Namespace, names: &[String]) -> StorageResult<()> {
        self.catalog_change(self.database.drop_indexes(ns, names))
            .await
    }

    async fn update_index_spec(
        &self,
        ns: &Namespace,
        name: &str,
        spec: Document,
    ) -> StorageResult<()> {
        self.catalog_change(self.database.update_index_spec(ns, name, spec))
            .await
    }

    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>> {
        let Some(collection) = self.cached(ns).await? else {
            return Ok(None);
        };
        self.checked_read(async |conn| read::get(conn, &collection, id).await)
            .await
    }

    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        let Some(collection) = self.cached(ns).await? else {
            return Ok(ScanPage::default());
        };
        self.checked_read(async |conn| read::scan(conn, &collection, request, false).await)
            .await
    }

    async fn expiry_scan(
        &self,
        ns: &Namespace,
        order: ExpiryOrder,
        range: (Bound<i64>, Bound<i64>),
        resume_after: Option<Vec<u8>>,
        limit: usize,
    ) -> StorageResult<ScanPage> {
        let Some(collection) = self.cached(ns).await? else {
            return Ok(ScanPage::default());
        };
        self.checked_read(async |conn| {
            read::expiry_scan(conn, &collection, order, range, resume_after, limit).await
        })
        .await
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount> {
        let Some(collection) = self.cached(ns).await? else {
            return Ok(EntryCount::default());
        };
        self.checked_read(async |conn| read::count_entries(conn, &collection, &sources).await)
            .await
    }

    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        let Some(collection) = self.cached(ns).await? else {
            return Err(StorageError::NamespaceNotFound(ns.clone()));
        };
        self.checked_read(async |conn| read::stats(conn, &collection).await)
            .await
    }

    async fn write(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        self.write_ops(ns, ops, options, None, None).await
    }

    async fn write_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<WriteOp>,
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: RecordSession,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        self.write_ops(ns, ops, options, claim, Some(record)).await
    }

    async fn session_record(&self, key: &[u8]) -> StorageResult<Option<Document>> {
        let conn = self.read_conn().await?;
        let row = storage(
            conn.query_opt(
                "SELECT header, txn_number FROM tideway.sessions WHERE key = $1",
                &[&key],
            )
            .await,
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut header = match row.get::<_, Option<&[u8]>>(0) {
            Some(bytes) => decode_document(bytes)?,
            None => Document::new(),
        };
        // A claim newer than the recorded header (its commit recorded nothing) is the newest.
        let recorded = header.get_i64("txnNumber").ok();
        if let Some(claimed) = row.get::<_, Option<i64>>(1) {
            if recorded.is_none_or(|recorded| recorded < claimed) {
                header.insert("txnNumber", claimed);
            }
        }
        Ok(header.contains_key("txnNumber").then_some(header))
    }

    async fn session_statements(
        &self,
        key: &[u8],
        txn_number: i64,
    ) -> StorageResult<Vec<(i32, Document)>> {
        let conn = self.read_conn().await?;
        let rows = storage(
            conn.query(
                "SELECT stmt_ids, bodies FROM tideway.sessions
                 WHERE key = $1 AND txn_number = $2 AND stmt_ids IS NOT NULL
                 UNION ALL
                 SELECT stmt_ids, bodies FROM tideway.session_commits
                 WHERE key = $1 AND txn_number = $2",
                &[&key, &txn_number],
            )
            .await,
        )?;
        let mut statements = std::collections::BTreeMap::new();
        for row in &rows {
            let stmt_ids: Vec<i32> = row.get(0);
            let bodies: Vec<&[u8]> = row.get(1);
            // One reply per statement, or one reply for all (`write::record_statements`).
            match bodies.as_slice() {
                [shared] if stmt_ids.len() > 1 => {
                    let reply = decode_document(shared)?;
                    for stmt_id in stmt_ids {
                        statements.insert(stmt_id, reply.clone());
                    }
                }
                _ if bodies.len() == stmt_ids.len() => {
                    for (stmt_id, body) in stmt_ids.into_iter().zip(bodies) {
                        statements.insert(stmt_id, decode_document(body)?);
                    }
                }
                _ => {
                    return Err(StorageError::Corrupt(
                        "a session commit's statements and replies differ in number".to_string(),
                    ))
                }
            }
        }
        Ok(statements.into_iter().collect())
    }

    async fn snapshot(&self) -> StorageResult<Arc<dyn Snapshot>> {
        Ok(Arc::new(PgSnapshot::begin(&self.database).await?))
    }

    async fn commit_transaction(&self, commit: TransactionCommit) -> StorageResult<()> {
        // Collections the transaction created come first, each in its own catalog change.
        for (ns, options, indexes) in commit.creates {
            match self.create_collection(&ns, options, indexes).await {
                Ok(_) => {}
                Err(StorageError::NamespaceExists(_)) => return Err(StorageError::WriteConflict),
                Err(error) => return Err(error),
            }
        }
        let record: Option<RecordSession> = commit
            .record
            .map(|record| Box::new(move |_: &[bool], _| Some(record.clone())) as RecordSession);
        let mut writes: Vec<(Namespace, Unprepared, Option<RecordPredicate>)> = commit
            .writes
            .into_iter()
            .map(|(ns, ops, stale)| (ns, Unprepared::Ops(ops), stale))
            .collect();
        for _ in 0..STALE_ATTEMPTS {
            let _shared = self.ddl.read().await;
            let mut namespaces = Vec::with_capacity(writes.len());
            let mut groups = Vec::with_capacity(writes.len());
            for (ns, ops, stale) in writes {
                let Some(collection) = self.cached(&ns).await? else {
                    return Err(StorageError::WriteConflict);
                };
                groups.push(Group {
                    ops: ops.prepare(&collection),
                    collection,
                    stale,
                });
                namespaces.push(ns);
            }
            if self
                .write_groups(&groups, true, true, None, record.as_ref())
                .await?
                .is_some()
            {
                command_scope::checked(self.tag);
                return Ok(());
            }
            writes = namespaces
                .into_iter()
                .zip(groups)
                .map(|(ns, group)| (ns, Unprepared::Prepared(group.ops), group.stale))
                .collect();
        }
        Err(StorageError::WriteConflict)
    }

    async fn session_records(&self) -> StorageResult<Vec<(Vec<u8>, Document)>> {
        let conn = self.read_conn().await?;
        let rows = storage(
            conn.query(
                "SELECT key, header FROM tideway.sessions WHERE header IS NOT NULL ORDER BY key",
                &[],
            )
            .await,
        )?;
        rows.iter()
            .map(|row| Ok((row.get(0), decode_document(row.get(1))?)))
            .collect()
    }

    async fn reap(&self, ns: &Namespace, request: ReapRequest) -> StorageResult<ReapPage> {
        for _ in 0..STALE_ATTEMPTS {
            let Some(collection) = self.cached(ns).await? else {
                return Ok(ReapPage {
                    deleted: 0,
                    resume: None,
                });
            };
            match self.database.reap(&collection, &request).await? {
                Some(page) => return Ok(page),
                None => self.collections.forget(),
            }
        }
        // The catalog kept changing: the pass stops here and the next one goes on.
        Err(StorageError::WriteConflict)
    }
}
