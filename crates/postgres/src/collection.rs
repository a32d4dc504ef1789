//! A collection as the engine's reads and writes use it: its catalog row decoded once, with a
//! key extractor per maintained index, and the cache of them ([`Collections`]).
//!
//! Invariants: a [`Collection`] is immutable and describes one version of its catalog row (its
//! `version` column); the cache holds a namespace's latest known version and forgets everything
//! on every catalog change made through this engine (`Collections::forget`), absent namespaces
//! included, and when the database's catalog version moved past the one the cache was checked
//! at (another node's change, [`Collections::check`]). Writes and this node's catalog
//! changes are ordered by the engine's DDL lock (writes share it, catalog changes hold it
//! alone); other nodes' changes are caught by the catalog guard in every write's transaction.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tideway_storage::catalog_doc::{self, StoredCollection};
use tideway_storage::indexkeys::{DocumentKeys, IndexKeyer};
use tideway_storage::{CappedLimits, CollectionMeta, IndexSpec, Namespace, StorageResult};

/// A secondary index whose entries the engine keeps (not catalog-only, complete).
#[derive(Debug)]
pub(crate) struct Maintained {
    pub id: i64,
    pub unique: bool,
    pub multikey: bool,
    pub keyer: IndexKeyer,
}

#[derive(Debug)]
pub(crate) struct Collection {
    pub id: i64,
    /// The catalog row's `version` this was decoded from (`catalog::catalog_guard` checks it).
    pub version: i64,
    pub stored: StoredCollection,
    pub meta: CollectionMeta,
    /// Maintained secondary indexes, in catalog order.
    pub indexes: Vec<Maintained>,
    pub capped: Option<CappedLimits>,
}

impl Collection {
    pub fn new(id: i64, version: i64, stored: StoredCollection) -> StorageResult<Collection> {
        let indexes = stored
            .indexes
            .iter()
            .filter(|index| !index.building && !index.spec.catalog_only)
            .map(|index| {
                Ok(Maintained {
                    id: index.id as i64,
                    unique: index.spec.unique,
                    multikey: index.multikey,
                    keyer: IndexKeyer::new(index.spec.clone())?,
                })
            })
            .collect::<StorageResult<Vec<_>>>()?;
        let meta = stored.meta();
        Ok(Collection {
            id,
            version,
            capped: meta.capped(),
            meta,
            indexes,
            stored,
        })
    }

    /// The collection of a catalog row's `id`, `version` and `entry`.
    pub fn decode(id: i64, version: i64, entry: &[u8]) -> StorageResult<Collection> {
        Collection::new(id, version, catalog_doc::decode(id as u64, entry)?)
    }

    pub fn clustered(&self) -> bool {
        self.meta.clustered()
    }

    /// The named secondary index, if the catalog has it: `Some(None)` for one without entries
    /// (catalog-only), `None` for an unknown name.
    pub fn index_named(&self, name: &str) -> Option<Option<&Maintained>> {
        self.meta.index_named(name)?;
        Some(
            self.indexes
                .iter()
                .find(|index| index.keyer.spec().name == name),
        )
    }

    /// Keys and type bits of `document` in every maintained index, in `indexes` order.
    pub fn keys_of(&self, document: &bson::Document) -> StorageResult<Vec<DocumentKeys>> {
        self.indexes
            .iter()
            .map(|index| index.keyer.entries(document))
            .collect()
    }

    /// Ids of the indexes not yet flagged multikey in which one of `keys` has several keys.
    pub fn newly_multikey<'k>(&self, keys: impl Iterator<Item = &'k [DocumentKeys]>) -> Vec<i64> {
        let mut ids = Vec::new();
        for keys in keys {
            for (index, keys) in self.indexes.iter().zip(keys) {
                if keys.keys.len() > 1 && !index.multikey && !ids.contains(&index.id) {
                    ids.push(index.id);
                }
            }
        }
        ids
    }

    /// `(ttl_class, expire_at_ms)` of a document of this collection in TTL class `ttl` (a
    /// default-class one is in the `LastWrite` order only if the collection keeps it).
    pub fn ttl_columns(&self, ttl: tideway_storage::TtlClass) -> (i16, i64) {
        crate::records::ttl_columns(ttl, self.stored.last_write_order)
    }

    pub fn id_index_spec(&self) -> &IndexSpec {
        &self.stored.id_index
    }
}

/// The cache of decoded collections by namespace, absent ones included (views and profiles
/// are looked up on every command, and mostly do not exist).
#[derive(Debug, Default)]
pub(crate) struct Collections {
    by_ns: RwLock<Cached>,
    /// Moves on every [`Collections::forget`]: a version read before a catalog change is
    /// never cached after it.
    generation: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Cached {
    by_ns: HashMap<Namespace, Option<Arc<Collection>>>,
    /// The database's catalog version when the cache was last found current (`None`: never).
    checked_at: Option<i64>,
}

impl Collections {
    /// `None`: not cached; `Some(None)`: known absent.
    pub fn get(&self, ns: &Namespace) -> Option<Option<Arc<Collection>>> {
        self.by_ns
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .by_ns
            .get(ns)
            .cloned()
    }

    /// The current generation: read it before loading what [`Collections::put`] caches.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Caches what was loaded at `generation`, unless the catalog changed since.
    pub fn put(&self, ns: &Namespace, collection: Option<Arc<Collection>>, generation: u64) {
        let mut cached = self
            .by_ns
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.generation() == generation {
            cached.by_ns.insert(ns.clone(), collection);
        }
    }

    /// Forgets every cached collection (after a catalog change).
    pub fn forget(&self) {
        let mut cached = self
            .by_ns
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.forget_locked(&mut cached);
    }

    /// Records that the database's catalog version is `version`: everything cached is
    /// forgotten unless the cache was last found current at that same version. Whether it was.
    pub fn check(&self, version: i64) -> bool {
        // Every command's first read asks: a current cache costs a shared lock only.
        let current = |cached: &Cached| cached.checked_at == Some(version);
        if current(
            &self
                .by_ns
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        ) {
            return true;
        }
        let mut cached = self
            .by_ns
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current(&cached) {
            return true;
        }
        self.forget_locked(&mut cached);
        cached.checked_at = Some(version);
        false
    }

    fn forget_locked(&self, cached: &mut Cached) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        cached.by_ns.clear();
    }
}
