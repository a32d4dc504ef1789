//! Index key extraction: which encoded keys a document contributes to a secondary index, and the
//! `keyValue` document reported by duplicate-key errors. Pure functions over `bson::Document`.
//! Ordered indexes are handled here; the other kinds ([`IndexKind`]) by their own modules
//! (`hashed`, `wildcard`, `textkeys`), chosen once in [`IndexKeyer::new`]. The partial filter
//! applies to every kind.
//!
//! Rules (mongod's `BtreeKeyGenerator`, checked against its unit tests):
//! - each key field's values come from [`path::lookup`] (implicit array traversal); a missing
//!   field indexes as Null; a path that ends on an array contributes one key per element (the
//!   index is multikey) and an empty array contributes Undefined; arrays nested in arrays are
//!   indexed whole.
//! - a compound key may traverse arrays in only one field group: fields whose first array is the
//!   same array (`a.b` and `a.c` through `a`) combine, two different arrays fail with
//!   `CannotIndexParallelArrays(later, earlier)` named like mongod (`[b] [a]`).
//! - `sparse` skips documents where every key field is missing; `partial_filter` skips documents
//!   it does not match.
//!
//! Known deviations from mongod, all of which only add keys (scans stay supersets): fields that
//! share an array are combined as a cartesian product rather than per array element, and a
//! sparse compound index keeps Null for the missing fields of a document it indexes. Scalars met
//! inside an array while a path continues contribute nothing (mongod adds one Null key); the
//! query filter does not match Null there either.
//!
//! Keys are returned sorted and deduplicated. This module never touches storage.
//!
//! # Type bits
//!
//! An index key's `keycodec` bytes do not say which BSON type each value had (Int32 5, Int64 5
//! and Double 5.0 encode alike), whether a Null came from a missing field, or whether a value
//! came out of an array. A covered read must answer with the document's own values, so an
//! ordered index keeps, beside a document's key, its *type bits* ([`IndexKeyer::entries`]) when
//! the document has exactly one key and reached it through no array: per key field, in key
//! order, `00` if the field is missing, or `01` followed by the value's `typebits` encoding.
//! Documents with several keys, keys through arrays, and the other index kinds have none, and a
//! covered read fetches those documents instead. The format is stored on disk: changing it
//! needs a new storage format version.

use bson::{Bson, Document};

use super::wildcard::WildcardProjection;
use super::{IndexKind, IndexSpec, KeyKind, Namespace, StorageError, StorageResult};
use tideway_query::keycodec::{self, Direction};
use tideway_query::path::{self, LeafArrays};
use tideway_query::text::TextIndex;
use tideway_query::Filter;

/// An index definition prepared for key extraction: split paths and the parsed partial filter.
#[derive(Clone, Debug)]
pub struct IndexKeyer {
    spec: IndexSpec,
    paths: Vec<Vec<String>>,
    partial: Option<Filter>,
    generator: Generator,
}

/// How keys are made, by index kind.
#[derive(Clone, Debug)]
enum Generator {
    Ordered,
    Hashed(Vec<(String, KeyKind)>),
    Wildcard(WildcardProjection),
    Text(Box<TextIndex>),
}

/// The values one key field contributes for one document.
struct FieldValues<'a> {
    values: Vec<&'a Bson>,
    /// Some value was present (not a missing field).
    present: bool,
    /// The field traversed an array: the exact path prefix (component count) of the first array.
    array_prefix: Option<usize>,
}

static NULL: Bson = Bson::Null;
static UNDEFINED: Bson = Bson::Undefined;

impl IndexKeyer {
    /// Prepares `spec`; an unparsable `partial_filter` is `InvalidIndex`.
    pub fn new(spec: IndexSpec) -> StorageResult<IndexKeyer> {
        if spec.key.is_empty() {
            return Err(StorageError::InvalidIndex(format!(
                "index key pattern of {} is empty",
                spec.name
            )));
        }
        let partial = match &spec.partial_filter {
            Some(filter) => Some(
                Filter::parse(filter)
                    .map_err(|error| {
                        StorageError::InvalidIndex(format!(
                            "invalid partialFilterExpression of index {}: {}",
                            spec.name, error.errmsg
                        ))
                    })?
                    .with_collation(spec.collation.clone()),
            ),
            None => None,
        };
        let paths = spec
            .key
            .iter()
            .map(|(field, _)| path::split_path(field))
            .collect();
        let invalid =
            |why: String| StorageError::InvalidIndex(format!("index {}: {why}", spec.name));
        let generator = match spec.kind() {
            IndexKind::Ordered => Generator::Ordered,
            IndexKind::Hashed => Generator::Hashed(spec.key_kinds()),
            IndexKind::Wildcard => Generator::Wildcard(
                WildcardProjection::of_spec(&spec)
                    .ok_or_else(|| invalid("compound wildcard indexes are not supported".into()))?,
            ),
            IndexKind::Text => Generator::Text(Box::new(
                TextIndex::from_spec(&spec.spec).map_err(|error| invalid(error.errmsg))?,
            )),
        };
        Ok(IndexKeyer {
            spec,
            paths,
            partial,
            generator,
        })
    }

    pub fn spec(&self) -> &IndexSpec {
        &self.spec
    }

    /// The encoded keys `document` contributes (sorted, deduplicated; empty when the document is
    /// not indexed).
    pub fn keys(&self, document: &Document) -> StorageResult<Vec<Vec<u8>>> {
        Ok(self.entries_of(document, false)?.keys)
    }

    /// The keys of `document` (as [`IndexKeyer::keys`]) and the type bits of its key, when it
    /// has exactly one and the module's rules give it type bits.
    pub fn entries(&self, document: &Document) -> StorageResult<DocumentKeys> {
        self.entries_of(document, true)
    }

    fn entries_of(&self, document: &Document, with_type_bits: bool) -> StorageResult<DocumentKeys> {
        let keys_only = |keys: Vec<Vec<u8>>| DocumentKeys {
            keys,
            type_bits: None,
        };
        if !matches!(self.generator, Generator::Ordered) {
            if let Some(filter) = &self.partial {
                if !filter.matches(document) {
                    return Ok(DocumentKeys::default());
                }
            }
        }
        match &self.generator {
            Generator::Ordered => {}
            Generator::Hashed(kinds) => {
                return Ok(keys_only(
                    super::hashed::hashed_key(
                        document,
                        kinds,
                        self.spec.sparse,
                        self.spec.collation.as_deref(),
                    )?
                    .into_iter()
                    .collect(),
                ))
            }
            Generator::Wildcard(projection) => {
                return Ok(keys_only(super::wildcard::wildcard_keys(
                    document, projection,
                )))
            }
            Generator::Text(index) => {
                return super::textkeys::text_keys(index, document).map(keys_only)
            }
        }
        let Some(fields) = self.field_values(document)? else {
            return Ok(keys_only(Vec::new()));
        };
        // Comparison keys of a collated index cannot give back the strings: no type bits.
        let type_bits = (with_type_bits && self.spec.collation.is_none())
            .then(|| type_bits(&fields))
            .flatten();
        let mut keys = Vec::new();
        let mut choice = vec![0usize; fields.len()];
        loop {
            let mut key = Vec::with_capacity(16 * fields.len());
            for ((field, &index), (_, direction)) in fields.iter().zip(&choice).zip(&self.spec.key)
            {
                self.encode_field(&mut key, field.values[index], *direction);
            }
            keys.push(key);
            if !advance(&mut choice, &fields) {
                break;
            }
        }
        keys.sort_unstable();
        keys.dedup();
        Ok(DocumentKeys { keys, type_bits })
    }

    /// Appends one key field's value: as it is, or its comparison key under the index's
    /// collation (strings at any depth replaced, as mongod's collation-aware index keys).
    fn encode_field(&self, key: &mut Vec<u8>, value: &Bson, direction: Direction) {
        match &self.spec.collation {
            None => keycodec::encode_value(key, value, direction),
            Some(collation) => {
                keycodec::encode_value(key, &collation.index_value(value), direction);
            }
        }
    }

    /// The top-level key fields of `document`, in key order, with its own values (absent fields
    /// left out): the document a covered read answers with when it has to fetch one. Equal to
    /// [`IndexKeyer::covered_document`] of the document's entry when that has type bits.
    pub fn key_fields_of(&self, document: &Document) -> Document {
        self.spec
            .key
            .iter()
            .zip(&self.paths)
            .filter(|(_, parts)| parts.len() == 1)
            .filter_map(|((field, _), _)| Some((field.clone(), document.get(field)?.clone())))
            .collect()
    }

    /// The top-level key fields of the document an index entry was made from, rebuilt from its
    /// key and type bits: each field's own value, with its BSON type; fields the document did
    /// not have are absent. Dotted key fields are left out (their enclosing documents cannot be
    /// rebuilt). `Corrupt` if the key or the bits do not decode.
    pub fn covered_document(&self, key: &[u8], mut bits: &[u8]) -> StorageResult<Document> {
        let corrupt =
            |why: String| StorageError::Corrupt(format!("index {} entry: {why}", self.spec.name));
        let mut document = Document::new();
        let mut at = 0;
        for ((field, direction), parts) in self.spec.key.iter().zip(&self.paths) {
            let (decoded, used) =
                keycodec::decode_value(key.get(at..).unwrap_or_default(), *direction)
                    .map_err(|error| corrupt(error.to_string()))?;
            at += used;
            let (&presence, rest) = bits
                .split_first()
                .ok_or_else(|| corrupt("type bits end early".into()))?;
            bits = rest;
            let value = match presence {
                BITS_MISSING => continue,
                BITS_PRESENT => super::typebits::restore(decoded, &mut bits)
                    .map_err(|error| corrupt(error.to_string()))?,
                other => return Err(corrupt(format!("unknown type bits presence {other}"))),
            };
            if parts.len() == 1 {
                document.insert(field.clone(), value);
            }
        }
        if !bits.is_empty() {
            return Err(corrupt("type bits left over".into()));
        }
        Ok(document)
    }

    /// `{field: value, ...}` in key order for the key `key` of `document`, as duplicate-key
    /// errors report it (the document's own values, so `1.0` stays a double).
    pub fn key_value(&self, document: &Document, key: &[u8]) -> Document {
        if let Ok(Some(fields)) = self.field_values(document) {
            let mut choice = vec![0usize; fields.len()];
            loop {
                let values: Vec<(&Bson, Direction)> = fields
                    .iter()
                    .zip(&choice)
                    .zip(&self.spec.key)
                    .map(|((field, &index), (_, direction))| (field.values[index], *direction))
                    .collect();
                let mut encoded = Vec::new();
                for (value, direction) in &values {
                    self.encode_field(&mut encoded, value, *direction);
                }
                if encoded == key {
                    return self.named(values.into_iter().map(|(value, _)| value.clone()));
                }
                if !advance(&mut choice, &fields) {
                    break;
                }
            }
        }
        let directions: Vec<Direction> = self.spec.key.iter().map(|(_, d)| *d).collect();
        match keycodec::decode_key(key, &directions) {
            Ok((values, _)) => self.named(values.into_iter()),
            Err(_) => Document::new(),
        }
    }

    /// The duplicate-key error for `key` of `document` in collection `ns`.
    pub fn duplicate_key(&self, ns: &Namespace, document: &Document, key: &[u8]) -> StorageError {
        StorageError::DuplicateKey {
            ns: ns.clone(),
            index: self.spec.name.clone(),
            key_pattern: Box::new(self.spec.key_pattern()),
            key_value: Box::new(self.key_value(document, key)),
        }
    }

    fn named(&self, values: impl Iterator<Item = Bson>) -> Document {
        self.spec
            .key
            .iter()
            .map(|(field, _)| field.clone())
            .zip(values)
            .collect()
    }

    /// Per key field, the values to combine; `None` if the document is not indexed at all.
    fn field_values<'a>(
        &self,
        document: &'a Document,
    ) -> StorageResult<Option<Vec<FieldValues<'a>>>> {
        if let Some(filter) = &self.partial {
            if !filter.matches(document) {
                return Ok(None);
            }
        }
        let fields: Vec<FieldValues<'a>> = self
            .paths
            .iter()
            .map(|parts| field_values(document, parts))
            .collect();
        if self.spec.sparse && fields.iter().all(|field| !field.present) {
            return Ok(None);
        }
        self.check_parallel_arrays(&fields)?;
        Ok(Some(fields))
    }

    /// Fails if two key fields traverse different arrays.
    fn check_parallel_arrays(&self, fields: &[FieldValues]) -> StorageResult<()> {
        let mut first: Option<(usize, usize)> = None;
        for (position, field) in fields.iter().enumerate() {
            let Some(prefix) = field.array_prefix else {
                continue;
            };
            let Some((first_position, first_prefix)) = first else {
                first = Some((position, prefix));
                continue;
            };
            let parts = &self.paths[position];
            let first_parts = &self.paths[first_position];
            if parts[..prefix] != first_parts[..first_prefix] {
                return Err(StorageError::CannotIndexParallelArrays(
                    parts[prefix - 1].clone(),
                    first_parts[first_prefix - 1].clone(),
                ));
            }
        }
        Ok(())
    }
}

/// Rejects key patterns no engine can index (empty, or an index type it does not know:
/// it knows ordered, hashed, text and wildcard keys).
pub fn validate_key_pattern(spec: &IndexSpec) -> StorageResult<()> {
    if spec.key.is_empty() {
        return Err(StorageError::InvalidIndex(format!(
            "index {} has an empty key pattern",
            spec.name
        )));
    }
    for (field, value) in &spec.key_pattern() {
        match value {
            Bson::String(kind) if kind == "hashed" || kind == "text" => {}
            Bson::String(kind) => {
                return Err(StorageError::InvalidIndex(format!(
                    "index type \"{kind}\" (field {field} of index {}) is not supported; only ascending (1), descending (-1), hashed, text and wildcard keys are",
                    spec.name
                )))
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {}
            other => {
                return Err(StorageError::InvalidIndex(format!(
                    "bad value {other} for field {field} in the key pattern of index {}",
                    spec.name
                )))
            }
        }
    }
    Ok(())
}

/// What one document contributes to an index (see [`IndexKeyer::entries`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DocumentKeys {
    /// Sorted, deduplicated.
    pub keys: Vec<Vec<u8>>,
    /// The type bits of the only key, if it has them (see the module docs).
    pub type_bits: Option<Vec<u8>>,
}

const BITS_MISSING: u8 = 0x00;
const BITS_PRESENT: u8 = 0x01;

/// The type bits of the one key `fields` make, if they have exactly one and reach it through
/// no array.
fn type_bits(fields: &[FieldValues]) -> Option<Vec<u8>> {
    let mut bits = Vec::with_capacity(2 * fields.len());
    for field in fields {
        let [value] = field.values.as_slice() else {
            return None;
        };
        if field.array_prefix.is_some() {
            return None;
        }
        if !field.present {
            bits.push(BITS_MISSING);
            continue;
        }
        bits.push(BITS_PRESENT);
        if !super::typebits::append(&mut bits, value) {
            return None;
        }
    }
    Some(bits)
}

/// Steps `choice` to the next combination (odometer order); false after the last one.
fn advance(choice: &mut [usize], fields: &[FieldValues]) -> bool {
    for (slot, field) in choice.iter_mut().zip(fields).rev() {
        *slot += 1;
        if *slot < field.values.len() {
            return true;
        }
        *slot = 0;
    }
    false
}

fn field_values<'a>(document: &'a Document, parts: &[String]) -> FieldValues<'a> {
    let mut values: Vec<&'a Bson> = Vec::new();
    let mut present = false;
    let mut through_array = false;
    for candidate in path::lookup(document, parts, LeafArrays::ExpandAndSelf) {
        if candidate.is_leaf_array {
            // The elements were reported before; only an empty array adds a key.
            if matches!(candidate.value, Some(Bson::Array(elements)) if elements.is_empty()) {
                values.push(&UNDEFINED);
                present = true;
                through_array = true;
            }
            continue;
        }
        through_array |= candidate.array_index.is_some();
        match candidate.value {
            Some(value) => {
                present = true;
                values.push(value);
            }
            None => values.push(&NULL),
        }
    }
    if values.is_empty() {
        values.push(&NULL);
    }
    let array_prefix = if through_array {
        first_array_prefix(document, parts)
    } else {
        None
    };
    FieldValues {
        values,
        present,
        array_prefix,
    }
}

/// Number of leading path components naming the first array along `parts`.
fn first_array_prefix(document: &Document, parts: &[String]) -> Option<usize> {
    (1..=parts.len()).find(|&length| {
        matches!(
            path::get_path(document, &parts[..length]),
            Some(Bson::Array(_))
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn spec(key: &[(&str, i32)]) -> IndexSpec {
        let key_doc: Document = key
            .iter()
            .map(|(field, direction)| (field.to_string(), Bson::Int32(*direction)))
            .collect();
        let name = key
            .iter()
            .map(|(field, direction)| format!("{field}_{direction}"))
            .collect::<Vec<_>>()
            .join("_");
        IndexSpec {
            name: name.clone(),
            key: key
                .iter()
                .map(|(field, direction)| {
                    let direction = if *direction < 0 {
                        Direction::Descending
                    } else {
                        Direction::Ascending
                    };
                    (field.to_string(), direction)
                })
                .collect(),
            unique: false,
            sparse: false,
            partial_filter: None,
            catalog_only: false,
            collation: None,
            spec: doc! {"v": 2, "key": key_doc, "name": name},
        }
    }

    fn keyer(key: &[(&str, i32)]) -> IndexKeyer {
        IndexKeyer::new(spec(key)).expect("valid spec")
    }

    fn expected(keyer: &IndexKeyer, tuples: &[Vec<Bson>]) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = tuples
            .iter()
            .map(|tuple| {
                let values: Vec<(&Bson, Direction)> = tuple
                    .iter()
                    .zip(&keyer.spec().key)
                    .map(|(value, (_, direction))| (value, *direction))
                    .collect();
                keycodec::encode_key(&values)
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn assert_keys(keyer: &IndexKeyer, document: Document, tuples: &[Vec<Bson>]) {
        let keys = keyer.keys(&document).expect("keys");
        assert_eq!(keys, expected(keyer, tuples), "document {document}");
    }

    #[test]
    fn scalar_missing_and_null() {
        let k = keyer(&[("a", 1)]);
        assert_keys(&k, doc! {"a": 5}, &[vec![Bson::Int32(5)]]);
        assert_keys(&k, doc! {"b": 5}, &[vec![Bson::Null]]);
        assert_keys(&k, doc! {"a": Bson::Null}, &[vec![Bson::Null]]);
        // 1, 1.0 and NumberLong(1) produce the same key.
        assert_eq!(
            k.keys(&doc! {"a": 1}).unwrap(),
            k.keys(&doc! {"a": 1.0}).unwrap()
        );
        assert_eq!(
            k.keys(&doc! {"a": 1}).unwrap(),
            k.keys(&doc! {"a": 1i64}).unwrap()
        );
    }

    #[test]
    fn type_bits_rebuild_the_key_fields_exactly() {
        let keyer = keyer(&[("a", 1), ("b", -1), ("c.d", 1)]);
        let decimal: bson::Decimal128 = "2.50".parse().unwrap();
        for document in [
            doc! {"a": 1_i64, "b": -0.0, "c": {"d": 3}},
            doc! {"b": Bson::Decimal128(decimal), "a": Bson::Symbol("s".into())},
            doc! {"a": Bson::Null, "z": 1},
            doc! {"a": {"x": 1.0, "y": [2_i64, "t"]}, "b": 5},
        ] {
            let entries = keyer.entries(&document).unwrap();
            let [key] = entries.keys.as_slice() else {
                panic!("one key for {document}");
            };
            let bits = entries.type_bits.expect("type bits");
            let rebuilt = keyer.covered_document(key, &bits).unwrap();
            // Top-level key fields in key order, each with its own type; dotted ones left out.
            assert_eq!(
                bson::to_vec(&rebuilt).unwrap(),
                bson::to_vec(&keyer.key_fields_of(&document)).unwrap(),
                "{document}"
            );
            assert!(keyer
                .covered_document(key, &bits[..bits.len() - 1])
                .is_err());
            let mut extra = bits.clone();
            extra.push(0);
            assert!(keyer.covered_document(key, &extra).is_err());
        }
        // Several keys, or one reached through an array: no type bits.
        for document in [
            doc! {"a": [1, 2]},
            doc! {"a": [1]},
            doc! {"a": []},
            doc! {"c": [{"d": 1}]},
        ] {
            assert_eq!(
                keyer.entries(&document).unwrap().type_bits,
                None,
                "{document}"
            );
        }
        assert_eq!(
            keyer.keys(&doc! {"a": 1}).unwrap(),
            keyer.entries(&doc! {"a": 1}).unwrap().keys
        );
    }

    #[test]
    fn arrays_are_multikey_and_empty_array_is_undefined() {
        let k = keyer(&[("a", 1)]);
        assert_keys(
            &k,
            doc! {"a": [1, 2, 2]},
            &[vec![Bson::Int32(1)], vec![Bson::Int32(2)]],
        );
        assert_keys(&k, doc! {"a": []}, &[vec![Bson::Undefined]]);
        // Arrays nested in arrays are indexed whole.
        assert_keys(
            &k,
            doc! {"a": [[2]]},
            &[vec![Bson::Array(vec![Bson::Int32(2)])]],
        );
        let nested = keyer(&[("a.b", 1)]);
        assert_keys(&nested, doc! {"a": []}, &[vec![Bson::Null]]);
        assert_keys(
            &nested,
            doc! {"a": [{"b": 1}, {"c": 1}, {"b": [2, 3]}]},
            &[
                vec![Bson::Int32(1)],
                vec![Bson::Null],
                vec![Bson::Int32(2)],
                vec![Bson::Int32(3)],
            ],
        );
        // Positional component: not a traversal.
        let positional = keyer(&[("a.0", 1)]);
        assert_keys(&positional, doc! {"a": [7, 8]}, &[vec![Bson::Int32(7)]]);
    }

    #[test]
    fn compound_and_descending() {
        let k = keyer(&[("a", 1), ("b", -1)]);
        assert_keys(
            &k,
            doc! {"a": [1, 2], "b": "x"},
            &[
                vec![Bson::Int32(1), Bson::String("x".into())],
                vec![Bson::Int32(2), Bson::String("x".into())],
            ],
        );
        assert_keys(&k, doc! {"a": 1}, &[vec![Bson::Int32(1), Bson::Null]]);
        // Shared array prefix is allowed.
        let shared = keyer(&[("a.b", 1), ("a.c", 1)]);
        assert!(shared.keys(&doc! {"a": [{"b": 1, "c": 2}]}).is_ok());
    }

    #[test]
    fn parallel_arrays_fail_like_mongod() {
        let k = keyer(&[("a", 1), ("b", 1)]);
        assert_eq!(
            k.keys(&doc! {"a": [1, 2], "b": [3, 4]}),
            Err(StorageError::CannotIndexParallelArrays(
                "b".into(),
                "a".into()
            ))
        );
        assert_eq!(
            k.keys(&doc! {"a": [], "b": []}),
            Err(StorageError::CannotIndexParallelArrays(
                "b".into(),
                "a".into()
            ))
        );
        let nested = keyer(&[("categories", 1), ("stock.quantity", 1)]);
        assert_eq!(
            nested.keys(&doc! {"categories": ["x"], "stock": [{"quantity": 1}]}),
            Err(StorageError::CannotIndexParallelArrays(
                "stock".into(),
                "categories".into()
            ))
        );
        assert!(k.keys(&doc! {"a": [1, 2], "b": 3}).is_ok());
    }

    #[test]
    fn sparse_and_partial() {
        let mut sparse_spec = spec(&[("a", 1)]);
        sparse_spec.sparse = true;
        let sparse = IndexKeyer::new(sparse_spec).unwrap();
        assert_eq!(sparse.keys(&doc! {"b": 1}).unwrap(), Vec::<Vec<u8>>::new());
        assert_keys(&sparse, doc! {"a": Bson::Null}, &[vec![Bson::Null]]);
        assert_keys(&sparse, doc! {"a": []}, &[vec![Bson::Undefined]]);

        let mut partial_spec = spec(&[("a", 1)]);
        partial_spec.partial_filter = Some(doc! {"b": {"$gt": 5}});
        let partial = IndexKeyer::new(partial_spec).unwrap();
        assert!(partial.keys(&doc! {"a": 1, "b": 1}).unwrap().is_empty());
        assert_keys(&partial, doc! {"a": 1, "b": 6}, &[vec![Bson::Int32(1)]]);

        let mut bad = spec(&[("a", 1)]);
        bad.partial_filter = Some(doc! {"b": {"$bogus": 1}});
        assert!(matches!(
            IndexKeyer::new(bad),
            Err(StorageError::InvalidIndex(_))
        ));
    }

    #[test]
    fn key_value_and_duplicate_key_message() {
        let k = keyer(&[("a", 1), ("b.c", -1)]);
        let document = doc! {"a": [1.0, 2], "b": {"c": "x"}};
        let keys = k.keys(&document).unwrap();
        let values: Vec<Document> = keys.iter().map(|key| k.key_value(&document, key)).collect();
        assert!(values.contains(&doc! {"a": 1.0, "b.c": "x"}));
        assert!(values.contains(&doc! {"a": 2, "b.c": "x"}));
        // A key the document does not produce falls back to decoding.
        let other = keycodec::encode_key(&[
            (&Bson::Int32(9), Direction::Ascending),
            (&Bson::Null, Direction::Descending),
        ]);
        assert_eq!(
            k.key_value(&document, &other),
            doc! {"a": 9, "b.c": Bson::Null}
        );

        let error = k.duplicate_key(&Namespace::new("test", "c"), &document, &keys[0]);
        assert_eq!(
            error.to_string(),
            "E11000 duplicate key error collection: test.c index: a_1_b.c_-1 dup key: { a: 1.0, b.c: \"x\" }"
        );
    }
}
