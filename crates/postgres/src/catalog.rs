//! The PostgreSQL engine's catalog: one `tideway.collections` row per collection, holding the
//! catalog document every engine stores (`tideway_storage::catalog_doc`); collection and index
//! ids from the sequence `tideway.catalog_ids`. Index builds read the collection's documents
//! and write their entries in the transaction that adds the index.
//!
//! Invariants: every change is one transaction that also bumps `meta.catalog_version`, so a node
//! can tell whether a catalog it read is still current (issue 27), and the changed row's
//! `version`, which writes check under a lock ([`catalog_guard`]); a change locks the row
//! (`FOR UPDATE`) before it reads anything, so it waits for writes that checked the version
//! before it and writes after it find the new version; a collection's row, its
//! documents and its index entries go together (a drop removes all three in one transaction;
//! an index appears in the row only with all its entries); the row's `db`/`coll` columns always
//! equal the namespace inside its `entry`. A collection's `last_write_order` is the engine's
//! `LastWriteRule` applied to its metadata, and its default-class documents are `ttl_class` 0
//! (in the `LastWrite` order's partial index) exactly when it is set, 3 otherwise: every change
//! of the row brings both in line in its transaction ([`apply_last_write_rule`]).

use bson::Document;

use crate::collection::Collection;
use crate::conn::{Attempt, Conn, Failure};
use crate::entries::{EntryRows, BUILD_PAGE};
use crate::records::{CLASS_DEFAULT, CLASS_DEFAULT_UNORDERED};
use crate::Database;
use tideway_storage::catalog_doc::{self, StoredCollection, StoredIndex};
use tideway_storage::indexkeys::{validate_key_pattern, IndexKeyer};
use tideway_storage::{
    CollectionMeta, IndexSpec, LastWriteRule, Namespace, StorageError, StorageResult,
};

/// Runs `change` in one transaction on a pooled connection, committing if it succeeds.
macro_rules! in_transaction {
    ($database:expr, |$conn:ident| $body:expr) => {{
        let mut $conn = Conn::get($database).await?;
        $conn.begin("");
        let result: StorageResult<_> = async { $body }.await;
        match result {
            Ok(value) => {
                $conn.commit().await.map_err(Failure::into_storage)?;
                Ok(value)
            }
            Err(error) => {
                $conn.rollback().await.map_err(Failure::into_storage)?;
                Err(error)
            }
        }
    }};
}

/// The catalog guard of a write, on parameters `$id` (the collection's id) and `$version` (the
/// version of its row the write was prepared with): takes a key-share lock on the collection's
/// row, which conflicts only with catalog changes (`FOR UPDATE`, delete), and fails the
/// transaction with SQLSTATE 22P02 (`Failure::StaleCatalog`, the only text-to-integer cast in
/// the engine's SQL) when the row is gone or has another version. Its one column, `stale`, is
/// 0. As a `WITH` part it must be referenced, or it is never run.
pub(crate) fn catalog_guard(id: usize, version: usize) -> String {
    format!(
        "SELECT CAST(CASE WHEN count(*) = 1 THEN '0' ELSE 'stale tideway catalog' END AS integer)
            AS stale
         FROM (SELECT 1 FROM tideway.collections WHERE id = ${id} AND version = ${version}
               FOR KEY SHARE) current_row"
    )
}

fn storage<T>(attempt: Attempt<T>) -> StorageResult<T> {
    attempt.map_err(Failure::into_storage)
}

impl Database {
    /// The catalog's version: changes with every catalog change (one round trip, on a
    /// connection shared by reads).
    pub async fn catalog_version(&self) -> StorageResult<i64> {
        let conn = Conn::shared(self).await?;
        let row = storage(conn.query_opt(crate::conn::CATALOG_VERSION, &[]).await)?;
        Ok(row.map_or(0, |row| row.get(0)))
    }

    /// Collections of `db`, sorted by name.
    pub async fn list_collections(&self, db: &str) -> StorageResult<Vec<CollectionMeta>> {
        let conn = Conn::get(self).await?;
        let rows = storage(
            conn.query(
                "SELECT id, entry FROM tideway.collections WHERE db = $1 ORDER BY coll",
                &[&db],
            )
            .await,
        )?;
        rows.iter()
            .map(|row| Ok(decode(row.get(0), row.get(1))?.meta()))
            .collect()
    }

    pub async fn collection(&self, ns: &Namespace) -> StorageResult<Option<CollectionMeta>> {
        Ok(self.load_collection(ns).await?.map(|found| found.meta))
    }

    /// The collection's catalog row, decoded for reads and writes.
    pub(crate) async fn load_collection(
        &self,
        ns: &Namespace,
    ) -> StorageResult<Option<Collection>> {
        let conn = Conn::get(self).await?;
        let row = storage(
            conn.query_opt(
                "SELECT id, version, entry FROM tideway.collections WHERE db = $1 AND coll = $2",
                &[&ns.db, &ns.coll],
            )
            .await,
        )?;
        row.map(|row| Collection::decode(row.get(0), row.get(1), row.get(2)))
            .transpose()
    }

    /// Databases that hold a collection, sorted.
    pub(crate) async fn database_names(&self) -> StorageResult<Vec<String>> {
        let conn = Conn::get(self).await?;
        let rows = storage(
            conn.query(
                "SELECT DISTINCT db FROM tideway.collections ORDER BY db",
                &[],
            )
            .await,
        )?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Databases with the bytes of their documents, sorted by name.
    pub(crate) async fn database_sizes(&self) -> StorageResult<Vec<(String, u64)>> {
        let conn = Conn::get(self).await?;
        let rows = storage(
            conn.query(
                "SELECT c.db, COALESCE(SUM(octet_length(d.body)), 0)::bigint
                 FROM tideway.collections c LEFT JOIN tideway.documents d ON d.coll_id = c.id
                 GROUP BY c.db ORDER BY c.db",
                &[],
            )
            .await,
        )?;
        Ok(rows
            .iter()
            .map(|row| (row.get(0), row.get::<_, i64>(1).max(0) as u64))
            .collect())
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
            validate_key_pattern(spec)?;
            IndexKeyer::new(spec.clone())?;
        }
        in_transaction!(self, |conn| {
            let stored =
                insert_collection(&conn, ns, options, indexes, self.last_write_rule).await?;
            bump_version(&conn).await?;
            Ok(stored.meta())
        })
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
        in_transaction!(self, |conn| {
            let dropped = remove_collections(&conn, db, coll).await?;
            if dropped > 0 {
                bump_version(&conn).await?;
            }
            Ok(dropped)
        })
    }

    /// Renames (possibly across databases), keeping documents, indexes, options and uuid. With
    /// `drop_target`, an existing target is dropped first; otherwise it is `NamespaceExists`.
    pub async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StorageResult<()> {
        in_transaction!(self, |conn| {
            let Some((id, mut stored)) = locked(&conn, from).await? else {
                return Err(StorageError::NamespaceNotFound(from.clone()));
            };
            if from == to {
                return Err(StorageError::NamespaceExists(to.clone()));
            }
            if locked(&conn, to).await?.is_some() {
                if !drop_target {
                    return Err(StorageError::NamespaceExists(to.clone()));
                }
                remove_collections(&conn, &to.db, Some(&to.coll)).await?;
            }
            stored.ns = to.clone();
            apply_last_write_rule(&conn, id, &mut stored, self.last_write_rule).await?;
            storage(
                conn.execute(
                    "UPDATE tideway.collections SET db = $2, coll = $3, entry = $4,
                        version = version + 1
                     WHERE id = $1",
                    &[&id, &to.db, &to.coll, &stored.encode()?],
                )
                .await,
            )?;
            bump_version(&conn).await
        })
    }

    /// Replaces the collection's options (`collMod`); whether it is clustered cannot change
    /// (`InvalidIndex`, and nothing changes).
    pub async fn set_collection_options(
        &self,
        ns: &Namespace,
        options: Document,
    ) -> StorageResult<()> {
        in_transaction!(self, |conn| {
            let Some((id, mut stored)) = locked(&conn, ns).await? else {
                return Err(StorageError::NamespaceNotFound(ns.clone()));
            };
            if CollectionMeta::is_clustered(&options)
                != CollectionMeta::is_clustered(&stored.options)
            {
                return Err(StorageError::InvalidIndex(
                    "a collection's clustered index cannot be added or removed".to_string(),
                ));
            }
            stored.options = options;
            self.save(&conn, id, &mut stored).await
        })
    }

    /// Creates the indexes whose names are new (creating the collection if needed), each built
    /// from the stored documents in the same transaction: all or nothing (a unique index the
    /// documents violate is `DuplicateKey`, and no index of the call is left).
    pub async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: Vec<IndexSpec>,
    ) -> StorageResult<CollectionMeta> {
        in_transaction!(self, |conn| {
            let (id, mut stored) = match locked(&conn, ns).await? {
                Some(found) => found,
                None => {
                    let rule = self.last_write_rule;
                    insert_collection(&conn, ns, Document::new(), Vec::new(), rule).await?;
                    bump_version(&conn).await?;
                    locked(&conn, ns).await?.ok_or_else(|| {
                        StorageError::Io(format!("collection {ns} vanished while created"))
                    })?
                }
            };
            let mut new_specs: Vec<IndexSpec> = Vec::new();
            for spec in specs {
                let taken = spec.is_id_index()
                    || stored
                        .indexes
                        .iter()
                        .any(|index| index.spec.name == spec.name)
                    || new_specs.iter().any(|new| new.name == spec.name);
                if !taken {
                    validate_key_pattern(&spec)?;
                    IndexKeyer::new(spec.clone())?;
                    new_specs.push(spec);
                }
            }
            if new_specs.is_empty() {
                return Ok(stored.meta());
            }
            let ids = take_catalog_ids(&conn, new_specs.len()).await?;
            let first_new = stored.indexes.len();
            stored.indexes.extend(
                new_specs
                    .into_iter()
                    .zip(ids)
                    .map(|(spec, id)| StoredIndex {
                        id: id as u64,
                        spec,
                        multikey: false,
                        building: false,
                    }),
            );
            let built = Collection::new(id, 0, stored.clone())?;
            let multikey = build_indexes(&conn, &built, first_new).await?;
            for index in &mut stored.indexes {
                if multikey.contains(&(index.id as i64)) {
                    index.multikey = true;
                }
            }
            self.save(&conn, id, &mut stored).await?;
            Ok(stored.meta())
        })
    }

    /// Drops the named indexes (never `_id_`) with their entries.
    pub async fn drop_indexes(&self, ns: &Namespace, names: &[String]) -> StorageResult<()> {
        in_transaction!(self, |conn| {
            let Some((id, mut stored)) = locked(&conn, ns).await? else {
                return Err(StorageError::NamespaceNotFound(ns.clone()));
            };
            for name in names {
                if name == IndexSpec::ID_INDEX_NAME {
                    return Err(StorageError::InvalidIndex(
                        "cannot drop _id index".to_string(),
                    ));
                }
                if !stored.indexes.iter().any(|index| &index.spec.name == name) {
                    return Err(StorageError::IndexNotFound(name.clone()));
                }
            }
            let dropped: Vec<i64> = stored
                .indexes
                .iter()
                .filter(|index| names.contains(&index.spec.name))
                .map(|index| index.id as i64)
                .collect();
            delete_index_entries(&conn, &dropped).await?;
            stored
                .indexes
                .retain(|index| !names.contains(&index.spec.name));
            self.save(&conn, id, &mut stored).await
        })
    }

    /// Replaces an index's spec document, keeping its key, parsed options and entries.
    pub async fn update_index_spec(
        &self,
        ns: &Namespace,
        name: &str,
        spec: Document,
    ) -> StorageResult<()> {
        in_transaction!(self, |conn| {
            let Some((id, mut stored)) = locked(&conn, ns).await? else {
                return Err(StorageError::NamespaceNotFound(ns.clone()));
            };
            if name == IndexSpec::ID_INDEX_NAME {
                stored.id_index.spec = spec;
            } else {
                let index = stored
                    .indexes
                    .iter_mut()
                    .find(|index| index.spec.name == name)
                    .ok_or_else(|| StorageError::IndexNotFound(name.to_string()))?;
                let mut updated = index.spec.clone();
                updated.spec = spec;
                IndexKeyer::new(updated.clone())?;
                index.spec = updated;
            }
            self.save(&conn, id, &mut stored).await
        })
    }
}

/// Flags the indexes `index_ids` of collection `collection_id` multikey, inside the caller's
/// transaction (the row is locked until it ends, without conflicting with other writes' catalog
/// guards: they find the new version when they start after this commits).
pub(crate) async fn mark_multikey(
    conn: &Conn,
    collection_id: i64,
    index_ids: &[i64],
) -> Attempt<()> {
    let row = conn
        .query_opt(
            "SELECT entry FROM tideway.collections WHERE id = $1 FOR NO KEY UPDATE",
            &[&collection_id],
        )
        .await?;
    let Some(row) = row else {
        return Ok(());
    };
    let mut stored = decode(collection_id, row.get(0))?;
    for index in &mut stored.indexes {
        if index_ids.contains(&(index.id as i64)) {
            index.multikey = true;
        }
    }
    // Multikey flags never change what the `LastWriteRule` answers.
    store_entry(conn, collection_id, &stored).await?;
    Ok(())
}

/// Inserts the catalog row of a new collection; `NamespaceExists` if the namespace is taken.
async fn insert_collection(
    conn: &Conn,
    ns: &Namespace,
    options: Document,
    indexes: Vec<IndexSpec>,
    rule: LastWriteRule,
) -> StorageResult<StoredCollection> {
    let ids = take_catalog_ids(conn, indexes.len() + 1).await?;
    let Some((&collection_id, index_ids)) = ids.split_first() else {
        return Err(StorageError::Io(
            "cannot create a collection: no catalog id was returned".to_string(),
        ));
    };
    let mut stored = StoredCollection {
        ns: ns.clone(),
        uuid: uuid::Uuid::new_v4().into_bytes(),
        options,
        id_index: IndexSpec::id_index(),
        indexes: indexes
            .into_iter()
            .zip(index_ids)
            .map(|(spec, id)| StoredIndex {
                id: *id as u64,
                spec,
                multikey: false,
                building: false,
            })
            .collect(),
        last_write_order: false,
    };
    stored.last_write_order = rule(&stored.meta());
    // Unique on (db, coll): an existing collection, or one a concurrent creator inserted
    // first, leaves nothing inserted.
    let inserted = storage(
        conn.execute(
            "INSERT INTO tideway.collections (id, db, coll, entry) VALUES ($1, $2, $3, $4)
             ON CONFLICT (db, coll) DO NOTHING",
            &[&collection_id, &ns.db, &ns.coll, &stored.encode()?],
        )
        .await,
    )?;
    if inserted == 0 {
        return Err(StorageError::NamespaceExists(ns.clone()));
    }
    Ok(stored)
}

/// `count` new catalog ids, in one round trip.
async fn take_catalog_ids(conn: &Conn, count: usize) -> StorageResult<Vec<i64>> {
    let rows = storage(
        conn.query(
            "SELECT nextval('tideway.catalog_ids') FROM generate_series(1, $1::int)",
            &[&(count as i32)],
        )
        .await,
    )?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Writes the entries of the indexes `collection.stored.indexes[first_new..]` for every stored
/// document, a page at a time; the ids of those that became multikey. A unique index the
/// documents violate is `DuplicateKey` (naming the second document met).
async fn build_indexes(
    conn: &Conn,
    collection: &Collection,
    first_new: usize,
) -> StorageResult<Vec<i64>> {
    let new_ids: Vec<i64> = collection.stored.indexes[first_new..]
        .iter()
        .map(|index| index.id as i64)
        .collect();
    let building: Vec<_> = collection
        .indexes
        .iter()
        .filter(|index| new_ids.contains(&index.id))
        .collect();
    if building.is_empty() {
        return Ok(Vec::new());
    }
    let mut multikey = Vec::new();
    let mut after: Vec<u8> = Vec::new();
    loop {
        let rows = storage(
            conn.query(
                "SELECT id_key, body FROM tideway.documents
                 WHERE coll_id = $1 AND id_key > $2 ORDER BY id_key LIMIT $3",
                &[&collection.id, &after, &BUILD_PAGE],
            )
            .await,
        )?;
        let Some(last) = rows.last() else {
            return Ok(multikey);
        };
        after = last.get(0);
        let mut entries = EntryRows::default();
        let mut documents = Vec::with_capacity(rows.len());
        for row in &rows {
            let id_key: Vec<u8> = row.get(0);
            let document = tideway_base::bsonutil::decode_document(row.get::<_, &[u8]>(1))
                .map_err(|error| StorageError::Corrupt(format!("stored document: {error}")))?;
            for index in &building {
                let keys = index.keyer.entries(&document)?;
                if keys.keys.len() > 1 && !multikey.contains(&index.id) {
                    multikey.push(index.id);
                }
                entries.add(index, &id_key, &keys, documents.len());
            }
            documents.push(document);
        }
        if let Some((index_id, key, document)) = entries.insert_new(conn).await? {
            let index = building
                .iter()
                .find(|index| index.id == index_id)
                .ok_or_else(|| StorageError::Io("unknown index in a build".to_string()))?;
            return Err(index
                .keyer
                .duplicate_key(&collection.meta.ns, &documents[document], &key));
        }
        if (rows.len() as i64) < BUILD_PAGE {
            return Ok(multikey);
        }
    }
}

/// The collection's row, locked for the rest of the transaction.
async fn locked(conn: &Conn, ns: &Namespace) -> StorageResult<Option<(i64, StoredCollection)>> {
    let row = storage(
        conn.query_opt(
            "SELECT id, entry FROM tideway.collections WHERE db = $1 AND coll = $2 FOR UPDATE",
            &[&ns.db, &ns.coll],
        )
        .await,
    )?;
    row.map(|row| {
        let id: i64 = row.get(0);
        Ok((id, decode(id, row.get(1))?))
    })
    .transpose()
}

impl Database {
    /// Stores a changed catalog row, in line with the `LastWriteRule`, and bumps the catalog
    /// version.
    async fn save(&self, conn: &Conn, id: i64, stored: &mut StoredCollection) -> StorageResult<()> {
        apply_last_write_rule(conn, id, stored, self.last_write_rule).await?;
        store_entry(conn, id, stored).await
    }

    /// Makes `rule` the engine's `LastWriteRule` and brings every collection in line with it
    /// (the database may come from a build with another rule), in one transaction.
    pub(crate) async fn use_last_write_rule(&mut self, rule: LastWriteRule) -> StorageResult<()> {
        self.last_write_rule = rule;
        in_transaction!(self, |conn| {
            let rows = storage(
                conn.query(
                    "SELECT id, entry FROM tideway.collections ORDER BY id FOR UPDATE",
                    &[],
                )
                .await,
            )?;
            for row in &rows {
                let id: i64 = row.get(0);
                let mut stored = decode(id, row.get(1))?;
                if rule(&stored.meta()) != stored.last_write_order {
                    self.save(&conn, id, &mut stored).await?;
                }
            }
            Ok(())
        })
    }
}

/// Stores a changed catalog row as it is and bumps the catalog version.
async fn store_entry(conn: &Conn, id: i64, stored: &StoredCollection) -> StorageResult<()> {
    storage(
        conn.execute(
            "UPDATE tideway.collections SET entry = $2, version = version + 1 WHERE id = $1",
            &[&id, &stored.encode()?],
        )
        .await,
    )?;
    bump_version(conn).await
}

/// Brings `stored.last_write_order` in line with `rule` on its metadata, moving the
/// collection's default-class documents into or out of the `LastWrite` order (`ttl_class` 3 ⇄
/// 0), in the caller's transaction. Costs a pass over the collection's documents only when the
/// answer changes.
async fn apply_last_write_rule(
    conn: &Conn,
    id: i64,
    stored: &mut StoredCollection,
    rule: LastWriteRule,
) -> StorageResult<()> {
    let wanted = rule(&stored.meta());
    if wanted == stored.last_write_order {
        return Ok(());
    }
    let (from, to) = if wanted {
        (CLASS_DEFAULT_UNORDERED, CLASS_DEFAULT)
    } else {
        (CLASS_DEFAULT, CLASS_DEFAULT_UNORDERED)
    };
    storage(
        conn.execute(
            "UPDATE tideway.documents SET ttl_class = $3 WHERE coll_id = $1 AND ttl_class = $2",
            &[&id, &from, &to],
        )
        .await,
    )?;
    stored.last_write_order = wanted;
    Ok(())
}

/// Deletes collection `coll` of `db` (every collection of `db` without one) with its documents
/// and index entries, in four statements whatever their number; how many there were.
async fn remove_collections(conn: &Conn, db: &str, coll: Option<&str>) -> StorageResult<u64> {
    let removed = storage(
        conn.query(
            "DELETE FROM tideway.collections WHERE db = $1 AND ($2::text IS NULL OR coll = $2)
             RETURNING id, entry",
            &[&db, &coll],
        )
        .await,
    )?;
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
    for sql in [
        "DELETE FROM tideway.documents WHERE coll_id = ANY($1)",
        "DELETE FROM tideway.reaper_leases WHERE coll_id = ANY($1)",
    ] {
        storage(conn.execute(sql, &[&collection_ids]).await)?;
    }
    delete_index_entries(conn, &index_ids).await?;
    Ok(removed.len() as u64)
}

async fn delete_index_entries(conn: &Conn, index_ids: &[i64]) -> StorageResult<()> {
    for sql in [
        "DELETE FROM tideway.index_entries WHERE index_id = ANY($1)",
        "DELETE FROM tideway.unique_entries WHERE index_id = ANY($1)",
    ] {
        storage(conn.execute(sql, &[&index_ids]).await)?;
    }
    Ok(())
}

async fn bump_version(conn: &Conn) -> StorageResult<()> {
    storage(
        conn.execute(
            "UPDATE tideway.meta SET value = value + 1 WHERE name = 'catalog_version'",
            &[],
        )
        .await,
    )?;
    Ok(())
}

fn decode(id: i64, entry: &[u8]) -> StorageResult<StoredCollection> {
    catalog_doc::decode(id as u64, entry)
}
