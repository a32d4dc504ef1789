//! [`PgStorage`]: the `tideway_storage::Storage` contract on PostgreSQL. It owns the pool
//! ([`Database`]), the cache of decoded collections and the DDL lock; the work is in `catalog`,
//! `write`, `read`, `reap` and `snapshot`.
//!
//! Invariants: a write holds the DDL lock shared from reading the cached collection to its
//! commit, and every catalog change holds it alone and forgets the cache, so a write always uses
//! the catalog of this node's last catalog change. The engine has no oplog (this mode presents
//! itself as a router, without replica-set features): `oplog_appended` is never notified. The
//! cluster time is the node's own, never going back (seeded from the database's time floor).

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::{Bson, Document, Timestamp};
use tokio::sync::{Notify, RwLock};

use crate::clock::DatabaseClock;
use crate::collection::{Collection, Collections};
use crate::conn::{Conn, Failure};
use crate::snapshot::PgSnapshot;
use crate::write::{BatchOptions, Group, Prepared};
use crate::{read, Database};
use tideway_storage::{
    CollectionMeta, CollectionStats, EntryCount, ExpiryOrder, IndexSpec, LastWriteRule, Namespace,
    ReapPage, ReapRequest, ReapSource, Record, RecordSession, ScanPage, ScanRequest, SessionClaim,
    Snapshot, Storage, StorageError, StorageResult, TransactionCommit, WriteOp, WriteOptions,
    WriteOutcome,
};

pub struct PgStorage {
    database: Arc<Database>,
    clock: Arc<DatabaseClock>,
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
        PgStorage::open_with_rule(uri, pool_size, tideway_storage::every_collection).await
    }

    /// [`PgStorage::open`] keeping the `LastWrite` order only for the collections `rule`
    /// selects (the server's: those with a default TTL); every collection is brought in line
    /// with it first.
    pub async fn open_with_rule(
        uri: &str,
        pool_size: usize,
        rule: LastWriteRule,
    ) -> StorageResult<PgStorage> {
        let mut database = Database::connect(uri, pool_size).await?;
        database.use_last_write_rule(rule).await?;
        let database = Arc::new(database);
        let clock = DatabaseClock::start(&database).await?;
        let time_high_water_ms = database.time_floor().await?.unwrap_or(0);
        let seconds = u64::try_from(time_high_water_ms / 1000).unwrap_or(0);
        Ok(PgStorage {
            database,
            clock,
            collections: Collections::default(),
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

    /// The collection, from the cache or the catalog.
    async fn cached(&self, ns: &Namespace) -> StorageResult<Option<Arc<Collection>>> {
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
        self.collections.forget();
        result
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
                        .write_without_collection(&ops, options, claim, record)
                        .await;
                }
            }
        };
        let group = Group {
            ops: ops
                .into_iter()
                .map(|op| Prepared::of(op, &collection))
                .collect(),
            collection: &collection,
            stale: None,
        };
        let outcomes = self
            .write_groups(
                std::slice::from_ref(&group),
                options.ordered,
                false,
                claim,
                record,
            )
            .await?;
        Ok(outcomes.into_iter().next().unwrap_or_default())
    }

    /// Applies `groups` as one batch ([`Database::write_batch`]): a cluster time for every
    /// operation that succeeds, the cached catalog forgotten when an index became multikey.
    async fn write_groups(
        &self,
        groups: &[Group<'_>],
        ordered: bool,
        all_or_nothing: bool,
        claim: Option<SessionClaim>,
        record: Option<RecordSession>,
    ) -> StorageResult<Vec<crate::write::Outcomes>> {
        let take_time = || self.take_time();
        let (outcomes, multikey) = self
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
        if multikey {
            self.collections.forget();
        }
        for _ in outcomes.iter().flatten().filter(|outcome| outcome.is_ok()) {
            self.take_time();
        }
        Ok(outcomes)
    }

    /// Without a collection there is nothing to replace or delete: every operation fails
    /// (`WriteConflict`, or its own error), and the claim and session record, if any, are
    /// committed alone.
    async fn write_without_collection(
        &self,
        ops: &[WriteOp],
        options: WriteOptions,
        claim: Option<SessionClaim>,
        record: Option<RecordSession>,
    ) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
        let mut outcomes = Vec::new();
        for _ in ops {
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
        Ok(outcomes)
    }

    async fn read_conn(&self) -> StorageResult<Conn> {
        Conn::shared(&self.database).await
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
        Some(("postgres", self.database.status()))
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
        read::get(&self.read_conn().await?, &collection, id).await
    }

    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        let Some(collection) = self.cached(ns).await? else {
            return Ok(ScanPage::default());
        };
        read::scan(&self.read_conn().await?, &collection, request, false).await
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
        read::expiry_scan(
            &self.read_conn().await?,
            &collection,
            order,
            range,
            resume_after,
            limit,
        )
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
        read::count_entries(&self.read_conn().await?, &collection, &sources).await
    }

    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        let Some(collection) = self.cached(ns).await? else {
            return Err(StorageError::NamespaceNotFound(ns.clone()));
        };
        read::stats(&self.read_conn().await?, &collection).await
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
        let _shared = self.ddl.read().await;
        let mut collections = Vec::with_capacity(commit.writes.len());
        for (ns, _, _) in &commit.writes {
            match self.cached(ns).await? {
                Some(collection) => collections.push(collection),
                None => return Err(StorageError::WriteConflict),
            }
        }
        let groups: Vec<Group<'_>> = commit
            .writes
            .into_iter()
            .zip(&collections)
            .map(|((_, ops, stale), collection)| Group {
                ops: ops
                    .into_iter()
                    .map(|op| Prepared::of(op, collection))
                    .collect(),
                collection,
                stale,
            })
            .collect();
        let record: Option<RecordSession> = commit
            .record
            .map(|record| Box::new(move |_: &[bool], _| Some(record.clone())) as RecordSession);
        self.write_groups(&groups, true, true, None, record).await?;
        Ok(())
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
        let Some(collection) = self.cached(ns).await? else {
            return Ok(ReapPage {
                deleted: 0,
                resume: None,
            });
        };
        self.database.reap(&collection, &request).await
    }
}
