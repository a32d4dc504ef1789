//! mongod's hash of a BSON value (`BSONElementHasher::hash64`, hash version 0, seed 0): what a
//! hashed index stores for a value and what `$toHashedIndexKey` returns. Pure; no storage.
//!
//! The hash: MD5 over the seed (i32 LE, 0), then the value's canonical type (i32 LE: MinKey -1,
//! Undefined 0, Null 5, numbers 10, strings/symbols 15, objects 20, arrays 25, binary 30,
//! ObjectId 35, bool 40, date 45, timestamp 47, regex 50, DBPointer 55, code 60, code with scope
//! 65, MaxKey 127), then the value: numbers as the i64 LE of their truncation (NaN → 0, clamped
//! to the i64 range, the double 2^63 → i64::MIN as mongod keeps for compatibility), objects
//! and arrays as each element's (canonical type, field name with NUL, value) then an EOO (four
//! zero bytes), code with scope as its code string then its scope's elements, anything else as
//! its BSON value bytes. The key is the first 8 digest bytes as a little-endian i64. So 1, 1.0,
//! 1.9 and NumberLong(1) hash alike, as in mongod. Decimal128 values are truncated too (through
//! their double value), so equal numbers of every type always hash alike.
//!
//! Recursion over nested values is bounded by the nesting limits of stored documents (180)
//! and of command bodies (200), checked where they enter.

use bson::{Bson, Document};
use md5::{Digest, Md5};

/// mongod's hash of a value (`BSONElementHasher::hash64` with seed 0): what a hashed index
/// stores for it (as `Bson::Int64`) and what `convertShardKeyToHashed` returns.
pub fn hashed_value(value: &Bson) -> i64 {
    let mut md5 = Md5::new();
    md5.update(0i32.to_le_bytes());
    hash_into(&mut md5, value, None);
    let digest = md5.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

/// mongod's `canonicalizeBSONType` numbers, which the hash includes.
fn canonical_type(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        Bson::Null => 5,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

fn hash_into(md5: &mut Md5, value: &Bson, field_name: Option<&str>) {
    md5.update(canonical_type(value).to_le_bytes());
    if let Some(name) = field_name {
        md5.update(name.as_bytes());
        md5.update([0u8]);
    }
    match value {
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => {
            md5.update(number_for_hash(value).to_le_bytes());
        }
        Bson::Document(document) => hash_elements(md5, document),
        Bson::Array(elements) => {
            for (position, element) in elements.iter().enumerate() {
                hash_into(md5, element, Some(&position.to_string()));
            }
            md5.update(0i32.to_le_bytes());
        }
        Bson::JavaScriptCodeWithScope(code) => {
            md5.update(code.code.as_bytes());
            md5.update([0u8]);
            hash_elements(md5, &code.scope);
        }
        other => md5.update(tideway_base::bsonutil::value_bytes(other)),
    }
}

fn hash_elements(md5: &mut Md5, document: &Document) {
    for (name, element) in document {
        hash_into(md5, element, Some(name));
    }
    md5.update(0i32.to_le_bytes());
}

/// mongod's `safeNumberLongForHash`: truncation toward zero, NaN → 0, clamped to the i64 range,
/// except the double 2^63 → i64::MIN.
fn number_for_hash(value: &Bson) -> i64 {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let double = match value {
        Bson::Int32(v) => return i64::from(*v),
        Bson::Int64(v) => return *v,
        Bson::Double(v) => *v,
        other => tideway_base::bsonutil::as_f64(other).unwrap_or(f64::NAN),
    };
    if double.is_nan() {
        0
    } else if matches!(value, Bson::Double(_)) && double == TWO_POW_63 {
        i64::MIN
    } else if double >= TWO_POW_63 {
        i64::MAX
    } else if double < -TWO_POW_63 {
        i64::MIN
    } else {
        double.trunc() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary};

    /// Known values from mongod's hasher unit tests (hasher_test.cpp).
    #[test]
    fn numbers_hash_like_mongod() {
        assert_eq!(hashed_value(&Bson::Int32(42)), -944302157085130861);
        assert_eq!(hashed_value(&Bson::Double(42.123)), -944302157085130861);
        assert_eq!(hashed_value(&Bson::Int64(42)), -944302157085130861);
        assert_eq!(hashed_value(&Bson::Int32(0)), 4854801880128277513);
        assert_eq!(hashed_value(&Bson::Double(0.456)), 4854801880128277513);
        assert_eq!(hashed_value(&Bson::Double(f64::NAN)), 4854801880128277513);
        assert_eq!(hashed_value(&Bson::Int32(1)), 5902408780260971510);
        assert_eq!(hashed_value(&Bson::Double(1.987)), 5902408780260971510);
        assert_eq!(hashed_value(&Bson::Int32(-1)), 1140205862565771219);
        assert_eq!(hashed_value(&Bson::Double(-1.789)), 1140205862565771219);
        assert_eq!(hashed_value(&Bson::Int32(i32::MIN)), 6165898260261354870);
        assert_eq!(hashed_value(&Bson::Int32(i32::MAX)), 1143184177162245883);
        assert_eq!(hashed_value(&Bson::Double(f64::MAX)), 921523596458303250);
        assert_eq!(hashed_value(&Bson::Int64(i64::MAX)), 921523596458303250);
        assert_eq!(hashed_value(&Bson::Double(-f64::MAX)), 4532067210535695462);
        assert_eq!(hashed_value(&Bson::Int64(i64::MIN)), 4532067210535695462);
    }

    #[test]
    fn other_types_hash_like_mongod() {
        assert_eq!(hashed_value(&Bson::MinKey), 7961148599568647290);
        assert_eq!(hashed_value(&Bson::MaxKey), 5504842513779440750);
        assert_eq!(hashed_value(&Bson::Undefined), 40158834000849533);
        assert_eq!(
            hashed_value(&Bson::String("abc".into())),
            8478485326885698097
        );
        assert_eq!(
            hashed_value(&Bson::Symbol("abc".into())),
            8478485326885698097
        );
        assert_eq!(
            hashed_value(&Bson::String(String::new())),
            2049396243249673340
        );
        assert_eq!(
            hashed_value(&Bson::Document(doc! {"a": "abc", "b": 123i64})),
            4771603801758380216
        );
        assert_eq!(hashed_value(&Bson::Document(doc! {})), 7980500913326740417);
        assert_eq!(
            hashed_value(&bson::bson!(["bar", "baz", "qux"])),
            -2938911267422831539
        );
        assert_eq!(hashed_value(&Bson::Array(vec![])), 8849948234993459283);
        let binary = |subtype, bytes: &[u8]| {
            Bson::Binary(Binary {
                subtype,
                bytes: bytes.to_vec(),
            })
        };
        assert_eq!(
            hashed_value(&binary(BinarySubtype::Generic, &[0, 1, 2, 3, 4, 6])),
            7252465090394235301
        );
        assert_eq!(
            hashed_value(&binary(BinarySubtype::Uuid, &(0..16).collect::<Vec<u8>>())),
            6084661258071355978
        );
        let oid = |hex: &str| Bson::ObjectId(ObjectId::parse_str(hex).unwrap());
        assert_eq!(
            hashed_value(&oid("010203040506070809101112")),
            -5588663249627035708
        );
        assert_eq!(
            hashed_value(&oid("000000000000000000000000")),
            -4293118519463489418
        );
        assert_eq!(hashed_value(&Bson::Boolean(true)), 6405873908747105701);
        assert_eq!(hashed_value(&Bson::Boolean(false)), 6289544573401934092);
        assert_eq!(
            hashed_value(&Bson::DateTime(bson::DateTime::from_millis(
                0x5566778811223344
            ))),
            4476222765095560467
        );
        assert_eq!(
            hashed_value(&Bson::DateTime(bson::DateTime::from_millis(0))),
            -1178696894582842035
        );
        assert_eq!(
            hashed_value(&Bson::RegularExpression(bson::Regex {
                pattern: "mongodb".into(),
                options: String::new()
            })),
            -7275792090268217043
        );
        assert_eq!(
            hashed_value(&Bson::JavaScriptCode("func f() { return 1; }".into())),
            6861638109178014270
        );
        assert_eq!(
            hashed_value(&Bson::JavaScriptCodeWithScope(
                bson::JavaScriptCodeWithScope {
                    code: "func f() { return 1; }".into(),
                    scope: doc! {"c": true},
                }
            )),
            501342939894575968
        );
    }
}
