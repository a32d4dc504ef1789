//! Sort specifications (`{a: 1, "b.c": -1}`) and mongod's document ordering under them.
//!
//! Invariants: each key's value for a document is taken over every candidate at its path
//! (leaf arrays expanded one level): ascending keys use the smallest candidate, descending keys
//! the largest, under [`compare_values`]; a missing path sorts as null and an empty leaf array
//! as undefined (below null), as mongod does. Ties compare `Equal` so callers keep a stable
//! order. `$meta` sort keys are rejected at parse time. `find`'s `{$natural: ±1}` is no sort
//! order but a way to read (a collection scan, insertion order): its command handles it before
//! parsing. Comparing never fails.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::collation::{Collation, CollationChoice};
use super::compare::compare_values_with;
use super::numeric::Number;
use super::path::{self, LeafArrays};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{check_field_path_length, MAX_FIELD_PATH_COMPONENTS};

/// Sort direction of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Ascending,
    Descending,
}

/// How two precomputed keys compare (equal keys keep their input order where it matters).
pub(crate) type KeyOrder = std::sync::Arc<dyn Fn(&[Bson], &[Bson]) -> Ordering + Send + Sync>;

/// A parsed sort specification.
#[derive(Clone, Debug, PartialEq)]
pub struct SortSpec {
    keys: Vec<SortKey>,
    /// The collation strings sort under (`None`: byte order).
    collation: CollationChoice,
}

#[derive(Clone, Debug, PartialEq)]
struct SortKey {
    name: String,
    parts: Vec<String>,
    direction: Direction,
    /// `{$meta: "textScore"}` (find only): the document's text score, highest first.
    text_score: bool,
}

impl SortSpec {
    /// Parses a sort document; values must be 1 or -1 of any numeric type.
    pub fn parse(spec: &Document) -> CommandResult<SortSpec> {
        let mut keys = Vec::with_capacity(spec.len());
        for (field, value) in spec {
            check_field_path_length(field, MAX_FIELD_PATH_COMPONENTS, ErrorCode::Overflow)?;
            if field.is_empty() || field.split('.').any(str::is_empty) {
                return Err(CommandError::bad_value(format!(
                    "Empty field name in sort pattern: {field}"
                )));
            }
            if let Bson::Document(meta) = value {
                if meta.contains_key("$meta") {
                    return Err(CommandError::bad_value(
                        "$meta sort is not supported by this server",
                    ));
                }
            }
            let direction = match Number::from_bson(value).and_then(Number::to_exact_i64) {
                Some(1) => Direction::Ascending,
                Some(-1) => Direction::Descending,
                _ => {
                    return Err(CommandError::bad_value(
                        "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                    ))
                }
            };
            keys.push(SortKey {
                name: field.clone(),
                parts: path::split_path(field),
                direction,
                text_score: false,
            });
        }
        Ok(SortSpec {
            keys,
            collation: None,
        })
    }

    /// A `find` sort: as [`SortSpec::parse`], except that `{field: {$meta: "textScore"}}` sorts
    /// by the text score of a `$text` query, highest first.
    pub fn parse_find(spec: &Document) -> CommandResult<SortSpec> {
        let is_text_score = |value: &Bson| matches!(value, Bson::Document(meta) if meta.len() == 1 && meta.get_str("$meta") == Ok("textScore"));
        let mut plain = Document::new();
        for (field, value) in spec {
            plain.insert(
                field.clone(),
                if is_text_score(value) {
                    Bson::Int32(-1)
                } else {
                    value.clone()
                },
            );
        }
        let mut parsed = SortSpec::parse(&plain)?;
        for (key, (_, value)) in parsed.keys.iter_mut().zip(spec) {
            key.text_score = is_text_score(value);
        }
        Ok(parsed)
    }

    /// Whether a key sorts by the text score.
    pub fn has_text_score(&self) -> bool {
        self.keys.iter().any(|key| key.text_score)
    }

    /// True for `{}`.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The sort keys in order: dotted path and direction.
    pub fn keys(&self) -> impl Iterator<Item = (&str, Direction)> {
        self.keys
            .iter()
            .map(|key| (key.name.as_str(), key.direction))
    }

    /// The per-key values a document sorts by (precompute these to sort many documents); a
    /// text score key is null (see [`SortSpec::sort_key_scored`]).
    pub fn sort_key(&self, document: &Document) -> Vec<Bson> {
        self.sort_key_scored(document, None)
    }

    /// [`SortSpec::sort_key`] with the document's text score for text score keys.
    pub fn sort_key_scored(&self, document: &Document, text_score: Option<f64>) -> Vec<Bson> {
        self.keys
            .iter()
            .map(|key| {
                if key.text_score {
                    text_score.map_or(Bson::Null, Bson::Double)
                } else {
                    key_value(
                        document,
                        &key.parts,
                        key.direction,
                        self.collation.as_deref(),
                    )
                }
            })
            .collect()
    }

    /// The spec with strings sorted under `collation` (`None`: byte order).
    pub fn with_collation(mut self, collation: CollationChoice) -> SortSpec {
        self.collation = collation;
        self
    }

    /// [`SortSpec::compare_keys`] as a shareable function, for buffers that sort keys later.
    pub fn key_order(&self) -> KeyOrder {
        let spec = self.clone();
        std::sync::Arc::new(move |a: &[Bson], b: &[Bson]| spec.compare_keys(a, b))
    }

    /// Orders two precomputed sort keys.
    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for (key, (x, y)) in self.keys.iter().zip(a.iter().zip(b.iter())) {
            let order = compare_values_with(x, y, self.collation.as_deref());
            let order = match key.direction {
                Direction::Ascending => order,
                Direction::Descending => order.reverse(),
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        Ordering::Equal
    }

    /// Orders two documents under this spec.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        self.compare_keys(&self.sort_key(a), &self.sort_key(b))
    }
}

fn key_value(
    document: &Document,
    parts: &[String],
    direction: Direction,
    collation: Option<&Collation>,
) -> Bson {
    let mut best: Option<Bson> = None;
    for candidate in path::lookup(document, parts, LeafArrays::ExpandAndSelf) {
        let value = match candidate.value {
            None => Bson::Null,
            Some(Bson::Array(elements)) if candidate.is_leaf_array => {
                if !elements.is_empty() {
                    continue;
                }
                Bson::Undefined
            }
            Some(value) => value.clone(),
        };
        let better = match &best {
            None => true,
            Some(current) => {
                let order = compare_values_with(&value, current, collation);
                match direction {
                    Direction::Ascending => order == Ordering::Less,
                    Direction::Descending => order == Ordering::Greater,
                }
            }
        };
        if better {
            best = Some(value);
        }
    }
    best.unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use tideway_base::error::ErrorCode;

    fn spec(document: Document) -> SortSpec {
        SortSpec::parse(&document).expect("valid sort")
    }

    #[test]
    fn accepts_any_numeric_one_or_minus_one() {
        assert!(SortSpec::parse(&doc! {"a": 1.0, "b": -1_i64}).is_ok());
    }

    #[test]
    fn rejects_other_orderings() {
        for value in [
            Bson::Int32(0),
            Bson::Int32(2),
            Bson::String("asc".into()),
            Bson::Double(1.5),
        ] {
            let error = SortSpec::parse(&doc! {"a": value}).expect_err("invalid ordering");
            assert_eq!(error.code, ErrorCode::BadValue);
            assert_eq!(
                error.errmsg,
                "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            );
        }
        assert!(SortSpec::parse(&doc! {"a": {"$meta": "textScore"}}).is_err());
    }

    #[test]
    fn ascending_uses_smallest_array_element() {
        let sort = spec(doc! {"a": 1});
        assert_eq!(
            sort.compare(&doc! {"a": [5, 1]}, &doc! {"a": 2}),
            Ordering::Less
        );
    }

    #[test]
    fn descending_uses_largest_array_element() {
        let sort = spec(doc! {"a": -1});
        assert_eq!(
            sort.compare(&doc! {"a": [5, 1]}, &doc! {"a": 4}),
            Ordering::Less
        );
    }

    #[test]
    fn missing_sorts_as_null_and_empty_array_below_it() {
        let sort = spec(doc! {"a": 1});
        assert_eq!(sort.compare(&doc! {}, &doc! {"a": null}), Ordering::Equal);
        assert_eq!(sort.compare(&doc! {"a": []}, &doc! {}), Ordering::Less);
        assert_eq!(sort.compare(&doc! {}, &doc! {"a": 0}), Ordering::Less);
    }

    #[test]
    fn later_keys_break_ties_and_dotted_paths_traverse() {
        let sort = spec(doc! {"a": 1, "b.c": -1});
        let first = doc! {"a": 1, "b": [{"c": 1}, {"c": 9}]};
        let second = doc! {"a": 1, "b": {"c": 5}};
        assert_eq!(sort.compare(&first, &second), Ordering::Less);
    }

    #[test]
    fn numbers_sort_across_types_before_strings() {
        let sort = spec(doc! {"a": 1});
        let mut documents = [
            doc! {"a": "x"},
            doc! {"a": 2.5},
            doc! {"a": 1_i64},
            doc! {"a": f64::NAN},
        ];
        documents.sort_by(|x, y| sort.compare(x, y));
        assert!(documents[0].get_f64("a").is_ok_and(f64::is_nan));
        assert_eq!(documents[1], doc! {"a": 1_i64});
        assert_eq!(documents[3], doc! {"a": "x"});
    }
}
