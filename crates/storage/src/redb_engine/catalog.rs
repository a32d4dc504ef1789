//! The in-memory catalog (namespace → collection entry with its numeric table ids and prepared
//! indexes) and its persisted form, one BSON document per collection in the `catalog` table.
//!
//! Invariants: readers only ever see a catalog whose changes are committed (the writer stages a
//! copy and publishes it after the commit); `CollectionEntry::meta.indexes` is always `_id_`
//! followed by the secondary indexes in `indexes` order. Decoding never panics: malformed
//! catalog documents are `StorageError::Corrupt`.
//!
//! Persisted form: `crate::catalog_doc`, the document every engine stores. A catalog-only index
//! has an id (and a reserved table name) but its table is never created.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::Document;

use super::format::{
    corrupt, data_table_name, decoded_document, expiry_table_name, index_table_name,
    natural_table_name, raw_record,
};
use crate::catalog_doc::{self, IndexRecord};
use crate::indexkeys::{DocumentKeys, IndexKeyer};
use crate::{CollectionMeta, ExpiryOrder, IndexKind, IndexSpec, Namespace, StorageResult};
use tideway_base::bsonutil::decode_fields;

/// Every collection, by namespace. Cloned (shallowly) when the writer stages a change.
#[derive(Clone, Debug, Default)]
pub(super) struct Catalog {
    pub collections: BTreeMap<Namespace, Arc<CollectionEntry>>,
}

impl Catalog {
    /// The collections of `db`, sorted by name.
    pub(crate) fn metas_of(&self, db: &str) -> Vec<CollectionMeta> {
        self.collections
            .values()
            .filter(|entry| entry.meta.ns.db == db)
            .map(|entry| entry.meta.clone())
            .collect()
    }

    pub fn meta(&self, ns: &Namespace) -> Option<CollectionMeta> {
        self.collections.get(ns).map(|entry| entry.meta.clone())
    }
}

#[derive(Clone, Debug)]
pub(super) struct CollectionEntry {
    pub id: u64,
    pub meta: CollectionMeta,
    /// `d.<id>`.
    pub data_table: String,
    /// `n.<id>`, the natural order (insertion order) of a collection that is not clustered;
    /// `None` for a clustered one, whose natural order is its data table's `_id` order (fixed at
    /// creation, as clusteredness is).
    pub natural_table: Option<String>,
    /// Secondary indexes (everything but `_id_`).
    pub indexes: Vec<IndexEntry>,
    /// `lw.<id>` holds the collection's `TtlClass::Default` records (the engine's
    /// `LastWriteRule` selects it); otherwise `lw.<id>` is empty and writes leave it so.
    pub last_write_order: bool,
}

#[derive(Clone, Debug)]
pub(super) struct IndexEntry {
    pub id: u64,
    /// `i.<id>`.
    pub table: String,
    pub keyer: IndexKeyer,
    /// Some document has (or had) more than one key in it, as mongod's multikey flag: once set,
    /// it stays. While unset, each document has at most one entry, so entries count documents.
    pub multikey: bool,
    /// Being built: writes maintain it, the build fills in the documents stored before it
    /// began, and it is not in `meta.indexes` (nothing reads it) until the build finishes. One
    /// found at open belongs to a build a crash interrupted and is dropped.
    pub building: bool,
}

impl IndexEntry {
    pub fn new(id: u64, spec: IndexSpec) -> StorageResult<IndexEntry> {
        Ok(IndexEntry {
            id,
            table: index_table_name(id),
            keyer: IndexKeyer::new(spec)?,
            multikey: false,
            building: false,
        })
    }

    pub fn spec(&self) -> &IndexSpec {
        self.keyer.spec()
    }

    pub fn unique(&self) -> bool {
        self.keyer.spec().unique
    }

    /// Whether the engine keeps entries for this index (not catalog-only).
    pub fn maintained(&self) -> bool {
        !self.keyer.spec().catalog_only
    }
}

/// Computes a stored document's keys in every maintained index of a collection, decoding only the
/// top-level fields those keys depend on (the whole document when a partial filter must be
/// evaluated).
pub(super) struct StoredKeyer<'e> {
    /// The maintained indexes, in `CollectionEntry::indexes` order.
    pub indexes: Vec<&'e IndexEntry>,
    /// `None`: decode everything.
    fields: Option<Vec<&'e str>>,
}

impl<'e> StoredKeyer<'e> {
    pub fn new(entry: &'e CollectionEntry) -> StoredKeyer<'e> {
        StoredKeyer::over(
            entry
                .indexes
                .iter()
                .filter(|index| index.maintained())
                .collect(),
        )
    }

    /// A keyer for `indexes` alone (those being built).
    pub fn over(indexes: Vec<&'e IndexEntry>) -> StoredKeyer<'e> {
        let fields = indexes
            .iter()
            .map(|index| {
                let spec = index.spec();
                let plain_fields = matches!(spec.kind(), IndexKind::Ordered | IndexKind::Hashed);
                (spec.partial_filter.is_none() && plain_fields).then(|| {
                    spec.key
                        .iter()
                        .map(|(path, _)| path.split('.').next().unwrap_or_default())
                })
            })
            .collect::<Option<Vec<_>>>()
            .map(|roots| roots.into_iter().flatten().collect());
        StoredKeyer { indexes, fields }
    }

    /// The keys of a stored record, one list per maintained index. A document whose keys cannot
    /// be computed (impossible while the invariants hold) has none in that index.
    pub fn keys(&self, record: &[u8]) -> StorageResult<Vec<Vec<Vec<u8>>>> {
        Ok(self
            .entries_of(record, false)?
            .into_iter()
            .map(|entries| entries.keys)
            .collect())
    }

    /// [`StoredKeyer::keys`] with each document's type bits (see `indexkeys`).
    pub fn entries(&self, record: &[u8]) -> StorageResult<Vec<DocumentKeys>> {
        self.entries_of(record, true)
    }

    fn entries_of(&self, record: &[u8], with_type_bits: bool) -> StorageResult<Vec<DocumentKeys>> {
        if self.indexes.is_empty() {
            return Ok(Vec::new());
        }
        let document = self.document(record)?;
        Ok(self
            .indexes
            .iter()
            .map(|index| {
                let entries = match with_type_bits {
                    true => index.keyer.entries(&document),
                    false => index.keyer.keys(&document).map(|keys| DocumentKeys {
                        keys,
                        type_bits: None,
                    }),
                };
                entries.unwrap_or_default()
            })
            .collect())
    }

    /// The part of a stored record's document the indexes' keys depend on.
    pub fn document(&self, record: &[u8]) -> StorageResult<Document> {
        match &self.fields {
            Some(fields) => decode_fields(raw_record(record)?.doc, |name| fields.contains(&name))
                .map_err(|error| corrupt(format!("stored document: {error}"))),
            None => decoded_document(record),
        }
    }

    /// The ids of the maintained indexes: keys computed under one keyer are valid under another
    /// only if these are equal.
    pub(crate) fn index_ids(&self) -> Vec<u64> {
        self.indexes.iter().map(|index| index.id).collect()
    }
}

impl CollectionEntry {
    pub fn new(
        id: u64,
        ns: Namespace,
        uuid: [u8; 16],
        options: Document,
        id_index: IndexSpec,
        indexes: Vec<IndexEntry>,
    ) -> CollectionEntry {
        let natural_table =
            (!CollectionMeta::is_clustered(&options)).then(|| natural_table_name(id));
        let mut entry = CollectionEntry {
            id,
            meta: CollectionMeta {
                ns,
                uuid,
                options,
                indexes: vec![Arc::new(id_index)],
                multikey_indexes: Vec::new(),
            },
            data_table: data_table_name(id),
            natural_table,
            indexes,
            // Empty until the rule is applied (`apply::put_entry`).
            last_write_order: false,
        };
        entry.sync_index_specs();
        entry
    }

    /// Rebuilds `meta.indexes` (keeping the `_id_` spec) and `meta.multikey_indexes` from
    /// the finished `indexes`.
    pub(crate) fn sync_index_specs(&mut self) {
        self.meta.indexes.truncate(1);
        self.meta.indexes.extend(
            self.indexes
                .iter()
                .filter(|index| !index.building)
                .map(|index| Arc::new(index.spec().clone())),
        );
        self.meta.multikey_indexes = self
            .indexes
            .iter()
            .filter(|index| index.multikey && !index.building)
            .map(|index| index.spec().name.clone())
            .collect();
    }

    pub fn id_index(&self) -> &IndexSpec {
        &self.meta.indexes[0]
    }

    pub fn index_named(&self, name: &str) -> Option<&IndexEntry> {
        self.indexes.iter().find(|index| index.spec().name == name)
    }

    /// `lw.<id>` or `ox.<id>`.
    pub(crate) fn expiry_table(&self, order: ExpiryOrder) -> String {
        expiry_table_name(order, self.id)
    }

    /// Every table the collection may have: data, both expiry tables, natural order, then each
    /// index (tables that were never created included; deleting those is a no-op).
    pub(crate) fn table_names(&self) -> Vec<String> {
        [
            self.data_table.clone(),
            self.expiry_table(ExpiryOrder::LastWrite),
            self.expiry_table(ExpiryOrder::OwnExpiry),
            natural_table_name(self.id),
        ]
        .into_iter()
        .chain(self.indexes.iter().map(|index| index.table.clone()))
        .collect()
    }

    /// The persisted catalog document (`crate::catalog_doc`).
    pub fn encode(&self) -> StorageResult<Vec<u8>> {
        let indexes = self.indexes.iter().map(|index| IndexRecord {
            id: index.id,
            spec: index.spec(),
            multikey: index.multikey,
            building: index.building,
        });
        catalog_doc::encode(&self.meta, indexes, self.last_write_order)
    }

    pub fn decode(id: u64, bytes: &[u8]) -> StorageResult<CollectionEntry> {
        let stored = catalog_doc::decode(id, bytes)?;
        let indexes = stored
            .indexes
            .into_iter()
            .map(|stored| {
                // A stored partial filter that no longer parses is corruption, not a user error.
                let mut index = IndexEntry::new(stored.id, stored.spec)
                    .map_err(|error| corrupt(format!("catalog index: {error}")))?;
                index.multikey = stored.multikey;
                index.building = stored.building;
                Ok(index)
            })
            .collect::<StorageResult<Vec<_>>>()?;
        let mut entry = CollectionEntry::new(
            id,
            stored.ns,
            stored.uuid,
            stored.options,
            stored.id_index,
            indexes,
        );
        entry.last_write_order = stored.last_write_order;
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson};
    use tideway_query::keycodec::Direction;

    #[test]
    fn entry_round_trips() {
        let index = IndexEntry::new(
            7,
            IndexSpec {
                name: "a_1_b_-1".into(),
                key: vec![
                    ("a".into(), Direction::Ascending),
                    ("b".into(), Direction::Descending),
                ],
                unique: true,
                sparse: false,
                partial_filter: Some(doc! {"a": {"$gt": 1}}),
                spec: doc! {"v": 2, "key": {"a": 1, "b": -1}, "name": "a_1_b_-1", "unique": true},
                catalog_only: true,
                collation: None,
            },
        )
        .unwrap();
        let entry = CollectionEntry::new(
            3,
            Namespace::new("db", "c"),
            [9; 16],
            doc! {"capped": false},
            IndexSpec::id_index(),
            vec![index],
        );
        let decoded = CollectionEntry::decode(3, &entry.encode().unwrap()).unwrap();
        assert_eq!(decoded.meta, entry.meta);
        assert_eq!(decoded.indexes[0].id, 7);
        assert_eq!(decoded.indexes[0].table, "i.7");
        assert_eq!(decoded.data_table, "d.3");
        assert_eq!(
            decoded.table_names(),
            vec!["d.3", "lw.3", "ox.3", "n.3", "i.7"],
            "every table, so drops remove them all"
        );
        assert!(!decoded.indexes[0].maintained());
        assert!(!decoded.indexes[0].multikey);
        let mut multikey = entry.clone();
        multikey.indexes[0].multikey = true;
        let decoded = CollectionEntry::decode(3, &multikey.encode().unwrap()).unwrap();
        assert!(decoded.indexes[0].multikey);
        assert!(CollectionEntry::decode(3, b"garbage").is_err());
    }

    /// Catalogs written before the multikey flag existed: every index may be multikey.
    #[test]
    fn a_missing_multikey_flag_means_multikey() {
        let index = IndexEntry::new(1, IndexSpec::id_index()).unwrap();
        let entry = CollectionEntry::new(
            2,
            Namespace::new("db", "c"),
            [1; 16],
            doc! {},
            IndexSpec::id_index(),
            vec![index],
        );
        let mut encoded = Document::from_reader(entry.encode().unwrap().as_slice()).unwrap();
        let indexes = encoded.get_array_mut("indexes").unwrap();
        if let Some(Bson::Document(index)) = indexes.first_mut() {
            index.remove("multikey");
        }
        let decoded = CollectionEntry::decode(2, &bson::to_vec(&encoded).unwrap()).unwrap();
        assert!(decoded.indexes[0].multikey);
    }

    /// `lastWriteOrder` round-trips; entries written by format 6 and older (without it) kept
    /// `lw.` for every collection; anything but a boolean is corrupt.
    #[test]
    fn last_write_order_flag_decodes_with_its_format_6_default() {
        let mut entry = CollectionEntry::new(
            2,
            Namespace::new("db", "c"),
            [1; 16],
            doc! {},
            IndexSpec::id_index(),
            Vec::new(),
        );
        assert!(!entry.last_write_order);
        for kept in [false, true] {
            entry.last_write_order = kept;
            let decoded = CollectionEntry::decode(2, &entry.encode().unwrap()).unwrap();
            assert_eq!(decoded.last_write_order, kept);
        }
        let mut encoded = Document::from_reader(entry.encode().unwrap().as_slice()).unwrap();
        encoded.remove("lastWriteOrder");
        let decoded = CollectionEntry::decode(2, &bson::to_vec(&encoded).unwrap()).unwrap();
        assert!(decoded.last_write_order);
        encoded.insert("lastWriteOrder", 1);
        assert!(matches!(
            CollectionEntry::decode(2, &bson::to_vec(&encoded).unwrap()),
            Err(crate::StorageError::Corrupt(_))
        ));
    }

    /// Non-ordered components are stored by kind name and decode back to the same spec.
    #[test]
    fn special_kinds_round_trip_with_kind_names() {
        let spec = IndexSpec {
            name: "b_1_h_hashed".into(),
            key: vec![
                ("b".into(), Direction::Descending),
                ("h".into(), Direction::Ascending),
            ],
            unique: false,
            sparse: false,
            partial_filter: None,
            spec: doc! {"v": 2, "key": {"b": -1, "h": "hashed"}, "name": "b_1_h_hashed"},
            catalog_only: false,
            collation: None,
        };
        let entry = CollectionEntry::new(
            4,
            Namespace::new("db", "c"),
            [2; 16],
            doc! {},
            IndexSpec::id_index(),
            vec![IndexEntry::new(9, spec).unwrap()],
        );
        let bytes = entry.encode().unwrap();
        let stored = Document::from_reader(bytes.as_slice()).unwrap();
        let key = stored.get_array("indexes").unwrap()[0]
            .as_document()
            .unwrap()
            .get_array("key")
            .unwrap()
            .clone();
        assert_eq!(
            key,
            bson::bson!([["b", -1], ["h", "hashed"]])
                .as_array()
                .unwrap()
                .clone()
        );
        let decoded = CollectionEntry::decode(4, &bytes).unwrap();
        assert_eq!(decoded.meta, entry.meta);
        assert_eq!(decoded.indexes[0].spec().kind(), crate::IndexKind::Hashed);
    }
}
