//! The persisted catalog document of one collection, the same for every engine (the redb
//! engine's `catalog` table, the PostgreSQL engine's `collections.entry`), so a collection's
//! options, index specs and flags mean the same thing on both.
//!
//! Document: `{db, coll, uuid: BinData(4), options, idIndex: <spec>, indexes: [{id: Long, name,
//! key: [[path, 1 | -1 | "hashed" | "text" | "wildcard"], ...], unique, sparse, catalogOnly,
//! multikey, building, partialFilterExpression?, spec}], lastWriteOrder}`. Components of hashed,
//! text and wildcard indexes are stored by kind name (their kind is read from `spec.key`; the
//! names only make builds without those kinds refuse such a catalog instead of misreading it);
//! ordered components as 1 or -1. Documents written before a flag existed decode with its safe
//! value: `multikey` absent is true, `building` absent is false, `lastWriteOrder` absent is true
//! (the redb engine's formats 2 to 6 kept the last-write order for every collection).
//!
//! Decoding never panics: a malformed document is `StorageError::Corrupt`.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};

use crate::{CollectionMeta, IndexSpec, Namespace, StorageError, StorageResult};
use tideway_query::collation::Collation;
use tideway_query::keycodec::Direction;

/// One secondary index as stored: its engine id, spec and flags.
pub struct IndexRecord<'a> {
    pub id: u64,
    pub spec: &'a IndexSpec,
    /// Some document has (or had) more than one key in it.
    pub multikey: bool,
    /// Being built: not yet in the collection's metadata.
    pub building: bool,
}

/// A decoded catalog document.
#[derive(Clone, Debug)]
pub struct StoredCollection {
    pub ns: Namespace,
    pub uuid: [u8; 16],
    pub options: Document,
    /// The `_id_` index with its stored spec document.
    pub id_index: IndexSpec,
    pub indexes: Vec<StoredIndex>,
    pub last_write_order: bool,
}

impl StoredCollection {
    /// Its catalog document (the inverse of [`decode`]).
    pub fn encode(&self) -> StorageResult<Vec<u8>> {
        let indexes = self.indexes.iter().map(|index| IndexRecord {
            id: index.id,
            spec: &index.spec,
            multikey: index.multikey,
            building: index.building,
        });
        encode(&self.meta(), indexes, self.last_write_order)
    }

    /// The metadata the layers above see: `_id_` then every finished secondary index, and the
    /// names of the finished ones that are multikey.
    pub fn meta(&self) -> CollectionMeta {
        let finished = || self.indexes.iter().filter(|index| !index.building);
        CollectionMeta {
            ns: self.ns.clone(),
            uuid: self.uuid,
            options: self.options.clone(),
            indexes: std::iter::once(self.id_index.clone())
                .chain(finished().map(|index| index.spec.clone()))
                .map(std::sync::Arc::new)
                .collect(),
            multikey_indexes: finished()
                .filter(|index| index.multikey)
                .map(|index| index.spec.name.clone())
                .collect(),
        }
    }
}

/// A decoded secondary index.
#[derive(Clone, Debug)]
pub struct StoredIndex {
    pub id: u64,
    pub spec: IndexSpec,
    pub multikey: bool,
    pub building: bool,
}

/// The catalog document of the collection `meta` describes (its `_id_` spec is
/// `meta.indexes[0]`), with its secondary `indexes` and `last_write_order` flag.
pub fn encode<'a>(
    meta: &CollectionMeta,
    indexes: impl Iterator<Item = IndexRecord<'a>>,
    last_write_order: bool,
) -> StorageResult<Vec<u8>> {
    let id_index = meta
        .indexes
        .first()
        .map(|index| index.spec.clone())
        .unwrap_or_else(|| IndexSpec::id_index().spec);
    let document = doc! {
        "db": meta.ns.db.as_str(),
        "coll": meta.ns.coll.as_str(),
        "uuid": Binary { subtype: BinarySubtype::Uuid, bytes: meta.uuid.to_vec() },
        "options": meta.options.clone(),
        "idIndex": id_index,
        "indexes": indexes.map(encode_index).collect::<Vec<Bson>>(),
        "lastWriteOrder": last_write_order,
    };
    tideway_base::bsonutil::encode_document(&document)
        .map_err(|error| corrupt(format!("catalog entry: {error}")))
}

fn encode_index(index: IndexRecord<'_>) -> Bson {
    let spec = index.spec;
    let kinds = spec.key_kinds();
    let key: Vec<Bson> = spec
        .key
        .iter()
        .enumerate()
        .map(|(position, (path, direction))| {
            let kind_name = kinds
                .get(position)
                .and_then(|(_, kind)| kind.catalog_name());
            let component = match (kind_name, direction) {
                (Some(name), _) => Bson::String(name.to_string()),
                (None, Direction::Ascending) => Bson::Int32(1),
                (None, Direction::Descending) => Bson::Int32(-1),
            };
            Bson::Array(vec![Bson::String(path.clone()), component])
        })
        .collect();
    let mut encoded = doc! {
        "id": index.id as i64,
        "name": spec.name.as_str(),
        "key": key,
        "unique": spec.unique,
        "sparse": spec.sparse,
        "catalogOnly": spec.catalog_only,
        "multikey": index.multikey,
        "building": index.building,
        "spec": spec.spec.clone(),
    };
    if let Some(filter) = &spec.partial_filter {
        encoded.insert("partialFilterExpression", filter.clone());
    }
    Bson::Document(encoded)
}

/// Decodes the catalog document of collection `id` (named in error messages).
pub fn decode(id: u64, bytes: &[u8]) -> StorageResult<StoredCollection> {
    let document = Document::from_reader(bytes)
        .map_err(|error| corrupt(format!("catalog entry {id}: {error}")))?;
    let field = |name: &str| {
        document
            .get(name)
            .ok_or_else(|| corrupt(format!("catalog entry {id} has no {name}")))
    };
    let ns = Namespace::new(string(field("db")?)?, string(field("coll")?)?);
    let uuid: [u8; 16] = match field("uuid")? {
        Bson::Binary(binary) => binary
            .bytes
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("catalog uuid is not 16 bytes"))?,
        _ => return Err(corrupt("catalog uuid is not binary")),
    };
    let options = document_of(field("options")?)?.clone();
    let mut id_index = IndexSpec::id_index();
    id_index.spec = document_of(field("idIndex")?)?.clone();
    let Bson::Array(encoded_indexes) = field("indexes")? else {
        return Err(corrupt("catalog indexes is not an array"));
    };
    let indexes = encoded_indexes
        .iter()
        .map(|encoded| decode_index(document_of(encoded)?))
        .collect::<StorageResult<Vec<_>>>()?;
    let last_write_order = match document.get("lastWriteOrder") {
        None => true,
        Some(Bson::Boolean(kept)) => *kept,
        Some(_) => {
            return Err(corrupt(format!(
                "catalog entry {id}: lastWriteOrder is not a boolean"
            )))
        }
    };
    Ok(StoredCollection {
        ns,
        uuid,
        options,
        id_index,
        indexes,
        last_write_order,
    })
}

fn decode_index(encoded: &Document) -> StorageResult<StoredIndex> {
    let field = |name: &str| {
        encoded
            .get(name)
            .ok_or_else(|| corrupt(format!("catalog index has no {name}")))
    };
    let id = match field("id")? {
        Bson::Int64(id) => {
            u64::try_from(*id).map_err(|_| corrupt("catalog index id is negative"))?
        }
        _ => return Err(corrupt("catalog index id is not a long")),
    };
    let Bson::Array(key_fields) = field("key")? else {
        return Err(corrupt("catalog index key is not an array"));
    };
    let key = key_fields
        .iter()
        .map(|pair| match pair {
            Bson::Array(pair) => match pair.as_slice() {
                [Bson::String(path), Bson::Int32(direction)] => Ok((
                    path.clone(),
                    if *direction < 0 {
                        Direction::Descending
                    } else {
                        Direction::Ascending
                    },
                )),
                [Bson::String(path), Bson::String(kind)]
                    if ["hashed", "text", "wildcard"].contains(&kind.as_str()) =>
                {
                    Ok((path.clone(), Direction::Ascending))
                }
                _ => Err(corrupt("catalog index key field is malformed")),
            },
            _ => Err(corrupt("catalog index key field is not an array")),
        })
        .collect::<StorageResult<Vec<_>>>()?;
    let boolean = |name: &str| match field(name)? {
        Bson::Boolean(value) => Ok(*value),
        _ => Err(corrupt(format!("catalog index {name} is not a boolean"))),
    };
    let spec = document_of(field("spec")?)?;
    let spec = IndexSpec {
        name: string(field("name")?)?,
        key,
        unique: boolean("unique")?,
        sparse: boolean("sparse")?,
        partial_filter: match encoded.get("partialFilterExpression") {
            Some(filter) => Some(document_of(filter)?.clone()),
            None => None,
        },
        spec: spec.clone(),
        catalog_only: boolean("catalogOnly")?,
        collation: match spec.get("collation") {
            Some(Bson::Document(collation)) => Collation::parse(collation)
                .map_err(|error| corrupt(format!("catalog index collation: {}", error.errmsg)))?,
            _ => None,
        },
    };
    Ok(StoredIndex {
        id,
        spec,
        // Entries written before the flags existed carry none: assume the worst.
        multikey: encoded.get_bool("multikey").unwrap_or(true),
        building: encoded.get_bool("building").unwrap_or(false),
    })
}

fn string(value: &Bson) -> StorageResult<String> {
    match value {
        Bson::String(text) => Ok(text.clone()),
        _ => Err(corrupt("catalog field is not a string")),
    }
}

fn document_of(value: &Bson) -> StorageResult<&Document> {
    match value {
        Bson::Document(document) => Ok(document),
        _ => Err(corrupt("catalog field is not a document")),
    }
}

fn corrupt(message: impl Into<String>) -> StorageError {
    StorageError::Corrupt(message.into())
}
