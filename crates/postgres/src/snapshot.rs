//! A multi-document transaction's reads on PostgreSQL: one connection held in a REPEATABLE READ
//! read-only transaction, with the catalog read inside it, so catalog and documents describe the
//! same commit and later writes never show through. Dropping the snapshot ends the transaction
//! (`Conn`'s drop rolls it back before the connection is reused).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bson::Bson;

use crate::collection::Collection;
use crate::conn::{Conn, Failure};
use crate::{read, Database};
use tideway_storage::entry_keys::{index_entry_key, record_id_key};
use tideway_storage::{
    CollectionMeta, CollectionStats, EntryCount, IndexSpec, Namespace, ReapSource, Record,
    ScanPage, ScanRequest, Snapshot, StorageResult,
};

pub(crate) struct PgSnapshot {
    conn: Conn,
    collections: HashMap<Namespace, Arc<Collection>>,
}

impl std::fmt::Debug for PgSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSnapshot")
            .field("collections", &self.collections.len())
            .finish()
    }
}

impl PgSnapshot {
    pub async fn begin(database: &Database) -> StorageResult<PgSnapshot> {
        let mut conn = Conn::get(database).await?;
        conn.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY");
        let rows = conn
            .query("SELECT id, version, entry FROM tideway.collections", &[])
            .await
            .map_err(Failure::into_storage)?;
        let mut collections = HashMap::with_capacity(rows.len());
        for row in &rows {
            let collection = Collection::decode(row.get(0), row.get(1), row.get(2))?;
            collections.insert(collection.meta.ns.clone(), Arc::new(collection));
        }
        Ok(PgSnapshot { conn, collections })
    }
}

#[async_trait]
impl Snapshot for PgSnapshot {
    fn list_collections(&self, db: &str) -> Vec<CollectionMeta> {
        let mut metas: Vec<CollectionMeta> = self
            .collections
            .values()
            .filter(|collection| collection.meta.ns.db == db)
            .map(|collection| collection.meta.clone())
            .collect();
        metas.sort_by(|a, b| a.ns.coll.cmp(&b.ns.coll));
        metas
    }

    fn collection(&self, ns: &Namespace) -> Option<CollectionMeta> {
        self.collections
            .get(ns)
            .map(|collection| collection.meta.clone())
    }

    async fn get(&self, ns: &Namespace, id: &Bson) -> StorageResult<Option<Record>> {
        match self.collections.get(ns) {
            Some(collection) => read::get(&self.conn, collection, id).await,
            None => Ok(None),
        }
    }

    async fn scan(&self, ns: &Namespace, request: ScanRequest) -> StorageResult<ScanPage> {
        match self.collections.get(ns) {
            Some(collection) => read::scan(&self.conn, collection, request, true).await,
            None => Ok(ScanPage::default()),
        }
    }

    fn entry_position(
        &self,
        ns: &Namespace,
        index: &str,
        index_key: &[u8],
        id_key: &[u8],
    ) -> Option<Vec<u8>> {
        if index == IndexSpec::ID_INDEX_NAME {
            return Some(id_key.to_vec());
        }
        let collection = self.collections.get(ns)?;
        let spec = collection.meta.index_named(index)?;
        Some(if spec.unique {
            index_key.to_vec()
        } else {
            index_entry_key(index_key, id_key)
        })
    }

    async fn record_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
    ) -> StorageResult<Option<Vec<u8>>> {
        match self.collections.get(ns) {
            Some(collection) => read::record_position(&self.conn, collection, id_key).await,
            None => Ok(None),
        }
    }

    fn appended_position(
        &self,
        ns: &Namespace,
        id_key: &[u8],
        insert_order: u64,
    ) -> Option<Vec<u8>> {
        let collection = self.collections.get(ns)?;
        Some(if collection.clustered() {
            id_key.to_vec()
        } else {
            // After every record id (ids come from a bigint sequence, far below u64::MAX).
            [record_id_key(u64::MAX), record_id_key(insert_order)].concat()
        })
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        sources: Vec<ReapSource>,
    ) -> StorageResult<EntryCount> {
        match self.collections.get(ns) {
            Some(collection) => read::count_entries(&self.conn, collection, &sources).await,
            None => Ok(EntryCount::default()),
        }
    }

    async fn stats(&self, ns: &Namespace) -> StorageResult<CollectionStats> {
        match self.collections.get(ns) {
            Some(collection) => read::stats(&self.conn, collection).await,
            None => Err(tideway_storage::StorageError::NamespaceNotFound(ns.clone())),
        }
    }
}
