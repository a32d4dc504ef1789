//! The PostgreSQL engine's catalog: one `tideway.collections` row per collection, holding the
//! catalog document every engine stores (`tideway_storage::catalog_doc`); collection and index
//! ids from the sequence `tideway.catalog_ids`.
//!
//! Invariants: every change is one transaction that also bumps `meta.catalog_version`, so a node
//! can tell whether a catalog it read is still current (issue 27); a collection's row, its
//! documents and its index entries go together (a drop removes all three in one transaction);
//! the row's `db`/`coll` columns always equal the namespace inside its `entry`. The engine keeps
//! both expiry orders for every collection (they are partial indexes PostgreSQL maintains), so
//! `lastWriteOrder` is always stored as true.

use bson::Document;
use deadpool_postgres::Transaction;

use crate::Database;
use tideway_storage::catalog_doc::{self, StoredCollection};
use tideway_storage::indexkeys::IndexKeyer;
use tideway_storage::{CollectionMeta, IndexSpec, Namespace, StorageError, StorageResult};

impl Database {
    /// The catalog's version: changes with every catalog change.
    pub async fn catalog_version(&self) -> StorageResult<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT value FROM tideway.meta WHERE name = 'catalog_version'",
                &[],
            )
            .await
            .map_err(|error| {
                self.target()
                    .error("cannot read the catalog version", error)
            })?;
        Ok(row.get(0))
    }

    /// Collections of `db`, sorted by name.
    pub async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, entry FROM tideway.collections WHERE db = $1 ORDER BY coll",
                &[&db],
            )
            .await
            .map_err(|error| self.target().error("cannot list collections", error))?;
        rows.iter()
            .map(|row| Ok(decode(row.get(0), row.get(1))?.meta()))
            .collect()
    }

    pub async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT id, entry FROM tideway.collections WHERE db = $1 AND coll = $2",
                &[&ns.db, &ns.coll],
            )
            .await
            .map_err(|error| self.target().error("cannot read the catalog", error))?;
        row.map(|row| Ok(decode(row.get(0), row.get(1))?.meta()))
            .transpose()
    }

    /// Creates the collection with `_id_` and `indexes` (empty, so complete); `NamespaceExists`
    /// if it exists.
    pub async fn create_collection(
        &self,
        ns: &Namespace,
        options: Document,
        indexes: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        for spec in &indexes {
            IndexKeyer::new(spec.clone())?;
        }
        let mut client = self.client().await?;
        let fail = |error| self.target().error("cannot create a collection", error);
        let txn = client.transaction().await.map_err(fail)?;
        // The collection's id, then one per index: one round trip.
        let ids: Vec<i64> = txn
            .query(
                "SELECT nextval('tideway.catalog_ids') FROM generate_series(0, $1::int)",
                &[&(indexes.len() as i32)],
            )
            .await
            .map_err(fail)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let Some((&collection_id, index_ids)) = ids.split_first() else {
            return Err(StorageError::Io(
                "cannot create a collection: no catalog id was returned".to_string(),
            ));
        };
        let stored = StoredCollection {
            ns: ns.clone(),
            uuid: uuid::Uuid::new_v4().into_bytes(),
            options,
            id_index: IndexSpec::id_index(),
            indexes: indexes
                .into_iter()
                .zip(index_ids)
                .map(|(spec, id)| catalog_doc::StoredIndex {
                    id: *id as u64,
                    spec,
                    multikey: false,
                    building: false,
                })
                .collect(),
            last_write_order: true,
        };
        // Unique on (db, coll): an existing collection, or one a concurrent creator inserted
        // first, leaves nothing inserted.
        let inserted = txn
            .execute(
                "INSERT INTO tideway.collections (id, db, coll, entry) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (db, coll) DO NOTHING",
                &[&collection_id, &ns.db, &ns.coll, &stored.encode()?],
            )
            .await
            .map_err(fail)?;
        if inserted == 0 {
            return Err(StorageError::NamespaceExists(ns.clone()));
        }
        bump_version(&txn, self).await?;
        txn.commit().await.map_err(fail)?;
        Ok(stored.meta())
    }

    /// Drops the collection with its documents and index entries; `false` if it did not exist.
    pub async fn drop_collection(&self, ns: &Namespace) -> StorageResult<bool> {
        Ok(self.drop_collections(&ns.db, Some(&ns.coll)).await? > 0)
    }

    /// Drops every collection of `db`.
    pub async fn drop_database(&self, db: &str) -> StorageResult<()> {
        self.drop_collections(db, None).await.map(|_| ())
    }

    /// Drops collection `coll` of `db` (every collection of `db` without one) in one
    /// transaction; how many there were.
    async fn drop_collections(&self, db: &str, coll: Option<&str>) -> StorageResult<u64> {
        let mut client = self.client().await?;
        let fail = |error| self.target().error("cannot drop collections", error);
        let txn = client.transaction().await.map_err(fail)?;
        let dropped = remove_collections(&txn, self, db, coll).await?;
        if dropped > 0 {
            bump_version(&txn, self).await?;
        }
        txn.commit().await.map_err(fail)?;
        Ok(dropped)
    }

    /// Renames (possibly across databases), keeping documents, indexes, options and uuid. With
    /// `drop_target`, an existing target is dropped first; otherwise it is `NamespaceExists`.
    pub async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StorageResult<()> {
        let mut client = self.client().await?;
        let fail = |error| self.target().error("cannot rename a collection", error);
        let txn = client.transaction().await.map_err(fail)?;
        let Some((id, mut stored)) = locked(&txn, self, from).await? else {
            return Err(StorageError::NamespaceNotFound(from.clone()));
        };
        if from == to {
            return Err(StorageError::NamespaceExists(to.clone()));
        }
        if locked(&txn, self, to).await?.is_some() {
            if !drop_target {
                return Err(StorageError::NamespaceExists(to.clone()));
            }
            remove_collections(&txn, self, &to.db, Some(&to.coll)).await?;
        }
        stored.ns = to.clone();
        txn.execute(
            "UPDATE tideway.collections SET db = $2, coll = $3, entry = $4 WHERE id = $1",
            &[&id, &to.db, &to.coll, &stored.encode()?],
        )
        .await
        .map_err(fail)?;
        bump_version(&txn, self).await?;
        txn.commit().await.map_err(fail)
    }

    /// Replaces the collection's options (`collMod`); whether it is clustered cannot change
    /// (`InvalidIndex`, and nothing changes).
    pub async fn set_collection_options(
        &self,
        ns: &Namespace,
        options: Document,
    ) -> StorageResult<()> {
        let mut client = self.client().await?;
        let fail = |error| {
            self.target()
                .error("cannot change collection options", error)
        };
        let txn = client.transaction().await.map_err(fail)?;
        let Some((id, mut stored)) = locked(&txn, self, ns).await? else {
            return Err(StorageError::NamespaceNotFound(ns.clone()));
        };
        if CollectionMeta::is_clustered(&options) != CollectionMeta::is_clustered(&stored.options) {
            return Err(StorageError::InvalidIndex(
                "a collection's clustered index cannot be added or removed".to_string(),
            ));
        }
        stored.options = options;
        txn.execute(
            "UPDATE tideway.collections SET entry = $2 WHERE id = $1",
            &[&id, &stored.encode()?],
        )
        .await
        .map_err(fail)?;
        bump_version(&txn, self).await?;
        txn.commit().await.map_err(fail)
    }
}

/// The collection's row, locked for the rest of `txn`.
async fn locked(
    txn: &Transaction<'_>,
    database: &Database,
    ns: &Namespace,
) -> StorageResult<Option<(i64, StoredCollection)>> {
    let row = txn
        .query_opt(
            "SELECT id, entry FROM tideway.collections WHERE db = $1 AND coll = $2 FOR UPDATE",
            &[&ns.db, &ns.coll],
        )
        .await
        .map_err(|error| database.target().error("cannot read the catalog", error))?;
    row.map(|row| {
        let id: i64 = row.get(0);
        Ok((id, decode(id, row.get(1))?))
    })
    .transpose()
}

/// Deletes collection `coll` of `db` (every collection of `db` without one) with its documents
/// and index entries, in four statements whatever their number; how many there were.
async fn remove_collections(
    txn: &Transaction<'_>,
    database: &Database,
    db: &str,
    coll: Option<&str>,
) -> StorageResult<u64> {
    let fail = |error| database.target().error("cannot drop collections", error);
    let removed = txn
        .query(
            "DELETE FROM tideway.collections WHERE db = $1 AND ($2::text IS NULL OR coll = $2)
             RETURNING id, entry",
            &[&db, &coll],
        )
        .await
        .map_err(fail)?;
    let mut collection_ids = Vec::with_capacity(removed.len());
    let mut index_ids = Vec::new();
    for row in &removed {
        let id: i64 = row.get(0);
        collection_ids.push(id);
        index_ids.extend(
            decode(id, row.get(1))?
                .indexes
                .iter()
                .map(|index| index.id as i64),
        );
    }
    if collection_ids.is_empty() {
        return Ok(0);
    }
    txn.execute(
        "DELETE FROM tideway.documents WHERE coll_id = ANY($1)",
        &[&collection_ids],
    )
    .await
    .map_err(fail)?;
    for table in ["tideway.index_entries", "tideway.unique_entries"] {
        txn.execute(
            &format!("DELETE FROM {table} WHERE index_id = ANY($1)"),
            &[&index_ids],
        )
        .await
        .map_err(fail)?;
    }
    Ok(removed.len() as u64)
}

async fn bump_version(txn: &Transaction<'_>, database: &Database) -> StorageResult<()> {
    txn.execute(
        "UPDATE tideway.meta SET value = value + 1 WHERE name = 'catalog_version'",
        &[],
    )
    .await
    .map_err(|error| {
        database
            .target()
            .error("cannot record a catalog change", error)
    })?;
    Ok(())
}

fn decode(id: i64, entry: &[u8]) -> StorageResult<StoredCollection> {
    catalog_doc::decode(id as u64, entry)
}
