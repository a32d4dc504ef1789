//! Wildcard index keys (`{"$**": 1}`, `{"a.$**": 1}`, with `wildcardProjection` on `$**`), as
//! mongod's `WildcardKeyGenerator` makes them. Pure functions; no storage.
//!
//! Key layout (all components `keycodec`-encoded, ascending):
//! - a **value key** `String(path) + value` for every indexed leaf: `path` is the dotted path
//!   without array positions, `value` a scalar, an empty object (`{}`), an array found directly
//!   inside an array (indexed whole, not traversed) or Undefined for an empty array. Array
//!   elements are indexed under the array's own path, one key each.
//! - a **multikey-path key** `Int32(1) + String(path)` for every path at which the document has
//!   an array (mongod's multikey metadata keys, here per document). Numbers sort before strings,
//!   so these never mix with value keys; the planner checks whether a path is multikey by
//!   scanning the prefix [`multikey_path_key`]`(path)`.
//!
//! The planner scans a path's values with [`wildcard_ranges`]: value ranges built as for an
//! ordered ascending index (`planner::bounds::IndexBounds::scan` over one ascending field), each prefixed
//! with [`wildcard_key_prefix`]`(path)`. Fields whose names contain `.` are skipped (they
//! cannot be queried), as in mongod.
//!
//! Projection: `{"a.$**": 1}` indexes the subtree at `a`; `{"$**": 1}` everything but `_id`,
//! or what its `wildcardProjection` includes (`{a: 1, "b.c": 1}`) or does not exclude
//! (`{a: 0}`); `_id` is indexed only when the projection says `_id: 1`.
//!
//! Traversal recursion is bounded by the nesting limit of stored documents (180).

use std::ops::Bound;

use bson::{Bson, Document};

use super::KeyRange;
use tideway_query::keycodec::{self, Direction};

/// Which paths a wildcard index covers.
#[derive(Clone, Debug, PartialEq)]
pub enum WildcardProjection {
    /// Only these paths and what lies below them.
    Include(Vec<Vec<String>>),
    /// Everything except these paths and what lies below them.
    Exclude(Vec<Vec<String>>),
}

impl WildcardProjection {
    /// The projection of a wildcard key pattern field (`"$**"` or `"a.b.$**"`) with its
    /// `wildcardProjection` (validated by `createIndexes`: numbers and booleans only, no mix
    /// of inclusions and exclusions other than `_id`).
    pub fn new(key_field: &str, projection: Option<&Document>) -> WildcardProjection {
        if let Some(root) = key_field.strip_suffix(".$**") {
            return WildcardProjection::Include(vec![split(root)]);
        }
        let Some(projection) = projection else {
            return WildcardProjection::Exclude(vec![vec!["_id".to_string()]]);
        };
        let mut included = Vec::new();
        let mut excluded = Vec::new();
        let mut id_included = false;
        for (path, value) in projection {
            let include = tideway_base::bsonutil::is_truthy(value);
            if path == "_id" {
                id_included = include;
                continue;
            }
            if include {
                included.push(split(path));
            } else {
                excluded.push(split(path));
            }
        }
        let inclusion = !included.is_empty() || (excluded.is_empty() && id_included);
        if inclusion {
            if id_included {
                included.push(vec!["_id".to_string()]);
            }
            WildcardProjection::Include(included)
        } else {
            if !id_included {
                excluded.push(vec!["_id".to_string()]);
            }
            WildcardProjection::Exclude(excluded)
        }
    }

    /// The projection of a wildcard index spec; `None` for other kinds of index.
    pub fn of_spec(spec: &super::IndexSpec) -> Option<WildcardProjection> {
        let kinds = spec.key_kinds();
        match kinds.as_slice() {
            [(field, super::KeyKind::Wildcard)] => Some(WildcardProjection::new(
                field,
                spec.spec.get_document("wildcardProjection").ok(),
            )),
            _ => None,
        }
    }

    /// Whether values at the dotted `path` are in the index (the planner may answer a
    /// predicate on `path` from it only then).
    pub fn indexes_path(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('.').collect();
        self.keeps(&parts)
    }

    /// Whether a leaf at `path` is indexed.
    fn keeps(&self, path: &[&str]) -> bool {
        match self {
            WildcardProjection::Include(paths) => paths.iter().any(|p| is_prefix(p, path)),
            WildcardProjection::Exclude(paths) => !paths.iter().any(|p| is_prefix(p, path)),
        }
    }

    /// Whether anything below `path` may be indexed.
    fn enters(&self, path: &[&str]) -> bool {
        match self {
            WildcardProjection::Include(paths) => paths
                .iter()
                .any(|p| is_prefix(p, path) || is_prefix_of(path, p)),
            WildcardProjection::Exclude(paths) => !paths.iter().any(|p| is_prefix(p, path)),
        }
    }
}

fn split(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// `prefix` is a (non-strict) prefix of `path`.
fn is_prefix(prefix: &[String], path: &[&str]) -> bool {
    prefix.len() <= path.len() && prefix.iter().zip(path).all(|(a, b)| a == b)
}

/// `path` is a (non-strict) prefix of `longer`.
fn is_prefix_of(path: &[&str], longer: &[String]) -> bool {
    path.len() <= longer.len() && path.iter().zip(longer).all(|(a, b)| a == b)
}

/// The encoded prefix of every value key of `path`.
pub(crate) fn wildcard_key_prefix(path: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(path.len() + 2);
    keycodec::encode_value(
        &mut key,
        &Bson::String(path.to_string()),
        Direction::Ascending,
    );
    key
}

/// The value key of `value` at `path`.
pub(crate) fn wildcard_key(path: &str, value: &Bson) -> Vec<u8> {
    let mut key = wildcard_key_prefix(path);
    keycodec::encode_value(&mut key, value, Direction::Ascending);
    key
}

/// The multikey-path key of `path` (present once per document with an array at `path`).
pub fn multikey_path_key(path: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(path.len() + 8);
    keycodec::encode_value(&mut key, &Bson::Int32(1), Direction::Ascending);
    keycodec::encode_value(
        &mut key,
        &Bson::String(path.to_string()),
        Direction::Ascending,
    );
    key
}

/// Ranges over a wildcard index for `path` whose values fall in `value_ranges` (ranges over
/// single ascending `keycodec` value encodings, as for an ordered index on one field).
pub fn wildcard_ranges(path: &str, value_ranges: &[KeyRange]) -> Vec<KeyRange> {
    let prefix = wildcard_key_prefix(path);
    let joined = |bytes: &[u8]| {
        let mut key = prefix.clone();
        key.extend_from_slice(bytes);
        key
    };
    value_ranges
        .iter()
        .map(|(lower, upper)| {
            let lower = match lower {
                Bound::Included(bytes) => Bound::Included(joined(bytes)),
                Bound::Excluded(bytes) => Bound::Excluded(joined(bytes)),
                Bound::Unbounded => Bound::Included(prefix.clone()),
            };
            let upper = match upper {
                Bound::Included(bytes) => Bound::Included(joined(bytes)),
                Bound::Excluded(bytes) => Bound::Excluded(joined(bytes)),
                Bound::Unbounded => {
                    keycodec::prefix_successor(&prefix).map_or(Bound::Unbounded, Bound::Excluded)
                }
            };
            (lower, upper)
        })
        .collect()
}

/// The keys a document contributes to a wildcard index (sorted, deduplicated).
pub(crate) fn wildcard_keys(document: &Document, projection: &WildcardProjection) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut path: Vec<&str> = Vec::new();
    traverse(document.iter(), false, &mut path, projection, &mut keys);
    keys.sort_unstable();
    keys.dedup();
    keys
}

fn traverse<'a>(
    fields: impl Iterator<Item = (&'a String, &'a Bson)>,
    inside_array: bool,
    path: &mut Vec<&'a str>,
    projection: &WildcardProjection,
    keys: &mut Vec<Vec<u8>>,
) {
    for (name, value) in fields {
        if name.contains('.') {
            continue;
        }
        if !inside_array {
            path.push(name.as_str());
        }
        visit(value, inside_array, path, projection, keys);
        if !inside_array {
            path.pop();
        }
    }
}

fn visit<'a>(
    value: &'a Bson,
    inside_array: bool,
    path: &mut Vec<&'a str>,
    projection: &WildcardProjection,
    keys: &mut Vec<Vec<u8>>,
) {
    let dotted = || path.join(".");
    match value {
        Bson::Array(_) if inside_array => {
            if projection.keeps(path) {
                keys.push(wildcard_key(&dotted(), value));
            }
        }
        Bson::Array(elements) => {
            if !projection.enters(path) {
                return;
            }
            if projection.keeps(path) {
                keys.push(multikey_path_key(&dotted()));
                if elements.is_empty() {
                    keys.push(wildcard_key(&dotted(), &Bson::Undefined));
                }
            }
            for element in elements {
                visit(element, true, path, projection, keys);
            }
        }
        Bson::Document(document) if document.is_empty() => {
            if projection.keeps(path) {
                keys.push(wildcard_key(&dotted(), value));
            }
        }
        Bson::Document(document) => {
            if projection.enters(path) {
                traverse(document.iter(), false, path, projection, keys);
            }
        }
        scalar => {
            if projection.keeps(path) {
                keys.push(wildcard_key(&dotted(), scalar));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn expected(values: &[(&str, Bson)], multikey: &[&str]) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = values
            .iter()
            .map(|(path, value)| wildcard_key(path, value))
            .chain(multikey.iter().map(|path| multikey_path_key(path)))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn all() -> WildcardProjection {
        WildcardProjection::new("$**", None)
    }

    #[test]
    fn one_key_per_leaf_and_id_excluded() {
        let keys = wildcard_keys(&doc! {"_id": 1, "a": 1, "b": {"c": "x", "d": {}}}, &all());
        assert_eq!(
            keys,
            expected(
                &[
                    ("a", Bson::Int32(1)),
                    ("b.c", Bson::String("x".into())),
                    ("b.d", Bson::Document(doc! {}))
                ],
                &[]
            )
        );
    }

    #[test]
    fn arrays_index_elements_under_the_array_path_and_mark_it_multikey() {
        let document = doc! {"a": [1, {"b": 2}, [3, 4], []], "e": []};
        let keys = wildcard_keys(&document, &all());
        assert_eq!(
            keys,
            expected(
                &[
                    ("a", Bson::Int32(1)),
                    ("a.b", Bson::Int32(2)),
                    ("a", bson::bson!([3, 4])),
                    ("a", bson::bson!([])),
                    ("e", Bson::Undefined),
                ],
                &["a", "e"]
            )
        );
    }

    #[test]
    fn dotted_field_names_are_skipped() {
        let keys = wildcard_keys(&doc! {"a.b": 1, "c": 2}, &all());
        assert_eq!(keys, expected(&[("c", Bson::Int32(2))], &[]));
    }

    #[test]
    fn subtree_and_projections() {
        let document = doc! {"_id": 7, "a": {"b": 1, "c": 2}, "d": 3};
        let subtree = WildcardProjection::new("a.$**", None);
        assert_eq!(
            wildcard_keys(&document, &subtree),
            expected(&[("a.b", Bson::Int32(1)), ("a.c", Bson::Int32(2))], &[])
        );
        let include = WildcardProjection::new("$**", Some(&doc! {"a.b": 1, "_id": 1}));
        assert_eq!(
            wildcard_keys(&document, &include),
            expected(&[("a.b", Bson::Int32(1)), ("_id", Bson::Int32(7))], &[])
        );
        let exclude = WildcardProjection::new("$**", Some(&doc! {"a": 0}));
        assert_eq!(
            wildcard_keys(&document, &exclude),
            expected(&[("d", Bson::Int32(3))], &[])
        );
        // A scalar at a path above an included path is not indexed.
        let deeper = WildcardProjection::new("$**", Some(&doc! {"a.b": 1}));
        assert!(wildcard_keys(&doc! {"a": 5}, &deeper).is_empty());
        assert!(deeper.indexes_path("a.b.c") && !deeper.indexes_path("a"));
        assert!(all().indexes_path("x.y") && !all().indexes_path("_id"));
    }

    #[test]
    fn ranges_are_prefixed_by_the_path() {
        let mut one = Vec::new();
        keycodec::encode_value(&mut one, &Bson::Int32(1), Direction::Ascending);
        let ranges = wildcard_ranges(
            "a",
            &[(Bound::Included(one.clone()), Bound::Included(one.clone()))],
        );
        let key = wildcard_key("a", &Bson::Int32(1));
        assert_eq!(
            ranges,
            vec![(Bound::Included(key.clone()), Bound::Included(key))]
        );
        let everything = wildcard_ranges("a", &[(Bound::Unbounded, Bound::Unbounded)]);
        let (lower, upper) = &everything[0];
        let key = wildcard_key("a", &Bson::String("zzz".into()));
        assert!(matches!(lower, Bound::Included(l) if *l <= key));
        assert!(matches!(upper, Bound::Excluded(u) if key < *u));
        let other = wildcard_key("ab", &Bson::Int32(1));
        assert!(
            matches!(upper, Bound::Excluded(u) if other >= *u || other < wildcard_key_prefix("a"))
        );
    }

    /// Expectations of mongod's wildcard key generator unit tests.
    #[test]
    fn keys_match_mongods_key_generator_tests() {
        let document = doc! {
            "a": [1, 2, {"b": "one", "c": 2}, {"c": 2, "d": 3}, {"c": "two", "d": 3, "e": [4, 5]},
                  [6, 7, {"f": 8}]],
            "g": {"h": {"i": 9, "j": [10, {"k": 11}, {"k": [11.5]}], "k": 12.0}},
            "l": "string",
        };
        assert_eq!(
            wildcard_keys(&document, &all()),
            expected(
                &[
                    ("a", Bson::Int32(1)),
                    ("a", Bson::Int32(2)),
                    ("a", bson::bson!([6, 7, {"f": 8}])),
                    ("a.b", Bson::String("one".into())),
                    ("a.c", Bson::Int32(2)),
                    ("a.c", Bson::String("two".into())),
                    ("a.d", Bson::Int32(3)),
                    ("a.e", Bson::Int32(4)),
                    ("a.e", Bson::Int32(5)),
                    ("g.h.i", Bson::Int32(9)),
                    ("g.h.j", Bson::Int32(10)),
                    ("g.h.j.k", Bson::Int32(11)),
                    ("g.h.j.k", Bson::Double(11.5)),
                    ("g.h.k", Bson::Double(12.0)),
                    ("l", Bson::String("string".into())),
                ],
                &["a", "a.e", "g.h.j", "g.h.j.k"]
            )
        );
        let empty = doc! {"a": [], "b": {"c": []}, "d": [[], {"e": []}]};
        assert_eq!(
            wildcard_keys(&empty, &all()),
            expected(
                &[
                    ("a", Bson::Undefined),
                    ("b.c", Bson::Undefined),
                    ("d", bson::bson!([])),
                    ("d.e", Bson::Undefined),
                ],
                &["a", "b.c", "d", "d.e"]
            )
        );
        let subtree = WildcardProjection::new("g.$**", None);
        assert_eq!(
            wildcard_keys(&document, &subtree),
            expected(
                &[
                    ("g.h.i", Bson::Int32(9)),
                    ("g.h.j", Bson::Int32(10)),
                    ("g.h.j.k", Bson::Int32(11)),
                    ("g.h.j.k", Bson::Double(11.5)),
                    ("g.h.k", Bson::Double(12.0)),
                ],
                &["g.h.j", "g.h.j.k"]
            )
        );
    }
}
