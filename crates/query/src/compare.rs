//! MongoDB's total order over BSON values (`BSONElement::woCompare`), used by the matcher, sort,
//! `$min`/`$max`, `$addToSet` and the index key codec; with a collation, strings (at any depth)
//! compare under it, as mongod's `StringData::ComparatorInterface` makes them.
//!
//! Invariants: values of different canonical type brackets order by bracket
//! ([`canonical_type_rank`]); inside a bracket the order is mongod's (numbers by exact numeric
//! value across Int32/Int64/Double/Decimal128, strings bytewise, documents field by field: value
//! bracket, then name, then value; shorter is less). `compare_values(a, b) == Equal` is exactly
//! mongod's notion of equality for matching, so `1 == 1.0 == NumberLong(1)` and `-0.0 == 0.0`.
//! This module never allocates for the common types and never panics.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::collation::Collation;
use super::numeric::{compare_numbers, Number};

/// mongod's `canonicalizeBSONType` plus one, so that MinKey (-1 in mongod) fits in a `u8`.
/// Values with the same rank are compared by value; different ranks order by rank.
pub fn canonical_type_rank(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => 0,
        Bson::Undefined => 1,
        Bson::Null => 6,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 11,
        Bson::String(_) | Bson::Symbol(_) => 16,
        Bson::Document(_) => 21,
        Bson::Array(_) => 26,
        Bson::Binary(_) => 31,
        Bson::ObjectId(_) => 36,
        Bson::Boolean(_) => 41,
        Bson::DateTime(_) => 46,
        Bson::Timestamp(_) => 48,
        Bson::RegularExpression(_) => 51,
        Bson::DbPointer(_) => 56,
        Bson::JavaScriptCode(_) => 61,
        Bson::JavaScriptCodeWithScope(_) => 66,
        Bson::MaxKey => 128,
    }
}

/// MongoDB's total order over BSON values (the simple collation).
pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    compare_values_with(a, b, None)
}

/// MongoDB's total order over BSON values, strings compared under `collation` (`None`: byte
/// order).
pub fn compare_values_with(a: &Bson, b: &Bson, collation: Option<&Collation>) -> Ordering {
    let rank_order = canonical_type_rank(a).cmp(&canonical_type_rank(b));
    if rank_order != Ordering::Equal {
        return rank_order;
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => match collation {
            Some(collation) => collation.compare(x, y),
            None => x.as_bytes().cmp(y.as_bytes()),
        },
        (Bson::Document(x), Bson::Document(y)) => compare_documents_with(x, y, collation),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y, collation),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_bytes()
            .cmp(y.pattern.as_bytes())
            .then_with(|| x.options.as_bytes().cmp(y.options.as_bytes())),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => compare_db_pointers(a, b),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| compare_documents_with(&x.scope, &y.scope, collation)),
        _ => match (Number::from_bson(a), Number::from_bson(b)) {
            (Some(x), Some(y)) => compare_numbers(x, y),
            // MinKey, MaxKey, Null, Undefined: one value per bracket.
            _ => Ordering::Equal,
        },
    }
}

/// `compare_values(a, b) == Equal`: mongod's equality (numeric across types, `-0.0 == 0.0`).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

/// [`values_equal`] under a collation.
pub fn values_equal_with(a: &Bson, b: &Bson, collation: Option<&Collation>) -> bool {
    compare_values_with(a, b, collation) == Ordering::Equal
}

/// Byte-level identity: same types, same field order, same values (NaN identical to itself,
/// `-0.0` distinct from `0.0`). This is mongod's "did the update change anything" test, unlike
/// `Document`'s `PartialEq`, which ignores field order.
pub(crate) fn identical_values(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        (Bson::Document(x), Bson::Document(y)) => identical_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(x, y)| identical_values(x, y))
        }
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => {
            x.code == y.code && identical_documents(&x.scope, &y.scope)
        }
        _ => a == b,
    }
}

/// [`identical_values`] for documents.
pub(crate) fn identical_documents(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((a_name, a_value), (b_name, b_value))| {
                a_name == b_name && identical_values(a_value, b_value)
            })
}

/// Documents compare field by field: value bracket, then field name, then value (values under a
/// collation when one is given; field names never are).
pub(crate) fn compare_documents_with(
    a: &Document,
    b: &Document,
    collation: Option<&Collation>,
) -> Ordering {
    let mut left = a.iter();
    let mut right = b.iter();
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((a_name, a_value)), Some((b_name, b_value))) => {
                let order = canonical_type_rank(a_value)
                    .cmp(&canonical_type_rank(b_value))
                    .then_with(|| a_name.as_bytes().cmp(b_name.as_bytes()))
                    .then_with(|| compare_values_with(a_value, b_value, collation));
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// Arrays compare element-wise (their implicit field names are equal position by position).
fn compare_arrays(a: &[Bson], b: &[Bson], collation: Option<&Collation>) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let order = compare_values_with(x, y, collation);
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// DBPointer fields are private in bson 2, so compare the encoded value as mongod does: namespace
/// length first, then the namespace and ObjectId bytes.
fn compare_db_pointers(a: &Bson, b: &Bson) -> Ordering {
    let encoded = tideway_base::bsonutil::value_bytes;
    encoded(a).cmp(&encoded(b))
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Shared BSON fixture values for the query module's tests.
    use bson::{oid::ObjectId, spec::BinarySubtype, Binary, Bson, Decimal128, Regex, Timestamp};

    pub fn decimal(text: &str) -> Bson {
        Bson::Decimal128(text.parse::<Decimal128>().expect("fixture decimal"))
    }

    pub fn nan() -> Bson {
        Bson::Double(f64::NAN)
    }

    pub(crate) fn negative_zero() -> Bson {
        Bson::Double(-0.0)
    }

    /// One value of every bracket, in mongod's ascending canonical order.
    pub(crate) fn one_per_bracket() -> Vec<Bson> {
        vec![
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Int32(1),
            Bson::String("a".into()),
            Bson::Document(bson::doc! {"a": 1}),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![1],
            }),
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::Boolean(false),
            Bson::DateTime(bson::DateTime::from_millis(0)),
            Bson::Timestamp(Timestamp {
                time: 1,
                increment: 1,
            }),
            Bson::RegularExpression(Regex {
                pattern: "a".into(),
                options: String::new(),
            }),
            Bson::JavaScriptCode("x".into()),
            Bson::MaxKey,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use bson::{doc, spec::BinarySubtype, Binary, Timestamp};

    #[test]
    fn brackets_follow_mongod_canonical_order() {
        let values = one_per_bracket();
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                assert_eq!(compare_values(a, b), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn numbers_compare_by_value_across_types() {
        assert!(values_equal(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(values_equal(&Bson::Int32(1), &Bson::Int64(1)));
        assert!(values_equal(&Bson::Int64(1), &decimal("1.0")));
        assert_eq!(
            compare_values(&Bson::Int32(2), &Bson::Double(1.5)),
            Ordering::Greater
        );
        assert_eq!(
            compare_values(&decimal("-1E+400"), &Bson::Double(f64::MIN)),
            Ordering::Less
        );
        assert_eq!(
            compare_values(&Bson::Int64(i64::MAX), &Bson::Int64(i64::MIN)),
            Ordering::Greater
        );
    }

    #[test]
    fn negative_zero_equals_zero() {
        assert!(values_equal(&negative_zero(), &Bson::Int32(0)));
        assert!(values_equal(&negative_zero(), &decimal("-0")));
    }

    #[test]
    fn nan_equals_nan_and_sorts_below_all_numbers() {
        assert!(values_equal(&nan(), &nan()));
        assert!(values_equal(&nan(), &decimal("NaN")));
        assert_eq!(
            compare_values(&nan(), &Bson::Double(f64::NEG_INFINITY)),
            Ordering::Less
        );
        assert_eq!(
            compare_values(&nan(), &Bson::Int64(i64::MIN)),
            Ordering::Less
        );
        assert_eq!(compare_values(&nan(), &Bson::Null), Ordering::Greater);
    }

    #[test]
    fn undefined_sorts_below_null() {
        assert_eq!(
            compare_values(&Bson::Undefined, &Bson::Null),
            Ordering::Less
        );
    }

    #[test]
    fn strings_compare_bytewise_and_symbol_equals_string() {
        assert_eq!(
            compare_values(&Bson::String("B".into()), &Bson::String("a".into())),
            Ordering::Less
        );
        assert!(values_equal(
            &Bson::Symbol("x".into()),
            &Bson::String("x".into())
        ));
        assert_eq!(
            compare_values(&Bson::String("a".into()), &Bson::String("ab".into())),
            Ordering::Less
        );
    }

    #[test]
    fn documents_compare_value_bracket_before_field_name() {
        // {a: 1} vs {b: "x"}: bracket of 1 (number) < bracket of "x" (string), names ignored.
        assert_eq!(
            compare_values(
                &Bson::Document(doc! {"b": 1}),
                &Bson::Document(doc! {"a": "x"})
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_values(
                &Bson::Document(doc! {"a": 1}),
                &Bson::Document(doc! {"b": 1})
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_values(
                &Bson::Document(doc! {"a": 1}),
                &Bson::Document(doc! {"a": 1, "b": 0})
            ),
            Ordering::Less
        );
        assert!(values_equal(
            &Bson::Document(doc! {"a": 1}),
            &Bson::Document(doc! {"a": 1.0})
        ));
        assert_eq!(
            compare_values(
                &Bson::Document(doc! {"a": 1, "b": 2}),
                &Bson::Document(doc! {"b": 2, "a": 1})
            ),
            Ordering::Less
        );
    }

    #[test]
    fn arrays_compare_element_wise_shorter_first() {
        let short = Bson::Array(vec![Bson::Int32(1)]);
        let long = Bson::Array(vec![Bson::Int32(1), Bson::Int32(0)]);
        assert_eq!(compare_values(&short, &long), Ordering::Less);
        let nested = Bson::Array(vec![Bson::Array(vec![Bson::Int32(1)])]);
        assert_eq!(compare_values(&long, &nested), Ordering::Less);
    }

    #[test]
    fn binary_compares_length_then_subtype_then_bytes() {
        let binary = |subtype, bytes: Vec<u8>| Bson::Binary(Binary { subtype, bytes });
        assert_eq!(
            compare_values(
                &binary(BinarySubtype::UserDefined(0x80), vec![9]),
                &binary(BinarySubtype::Generic, vec![0, 0])
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_values(
                &binary(BinarySubtype::Generic, vec![9]),
                &binary(BinarySubtype::Uuid, vec![0])
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_values(
                &binary(BinarySubtype::Generic, vec![1, 2]),
                &binary(BinarySubtype::Generic, vec![1, 3])
            ),
            Ordering::Less
        );
    }

    #[test]
    fn timestamps_compare_time_then_increment() {
        let ts = |time, increment| Bson::Timestamp(Timestamp { time, increment });
        assert_eq!(compare_values(&ts(1, 9), &ts(2, 0)), Ordering::Less);
        assert_eq!(
            compare_values(&ts(u32::MAX, 0), &ts(1, 0)),
            Ordering::Greater
        );
    }

    #[test]
    fn dates_before_epoch_sort_first() {
        let before = Bson::DateTime(bson::DateTime::from_millis(-1));
        let after = Bson::DateTime(bson::DateTime::from_millis(1));
        assert_eq!(compare_values(&before, &after), Ordering::Less);
    }

    #[test]
    fn identical_is_order_and_type_sensitive() {
        assert!(identical_documents(
            &doc! {"a": 1, "b": {"c": nan()}},
            &doc! {"a": 1, "b": {"c": nan()}}
        ));
        assert!(!identical_documents(
            &doc! {"a": 1, "b": 2},
            &doc! {"b": 2, "a": 1}
        ));
        assert!(!identical_values(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(!identical_values(&negative_zero(), &Bson::Double(0.0)));
    }
}
