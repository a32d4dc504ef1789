//! Type bits: what an index key's [`keycodec`] encoding forgets about the BSON types of its
//! values, kept beside the key so a covered read (a projection served from index keys without
//! fetching the document) returns values of exactly the stored BSON types (mongod's
//! `TypeBits`).
//!
//! [`keycodec::decode_value`] returns a value that compares equal to the encoded one but not
//! always of the same type: Int32, Int64, Double and Decimal128 of equal numeric value encode
//! identically and decode as Int32 if integral in i32 range, else Int64 if in i64 range, else
//! Double if an exact double, else Decimal128 (cohort/trailing zeros lost); every zero (−0.0
//! and decimal zeros included) decodes as Int32(0), every NaN and ±∞ as Double; Symbol decodes
//! as String. Everything else decodes exactly. Type bits record, per value, what the decoder
//! cannot know, and [`restore`] puts it back.
//!
//! # Walk
//!
//! [`append`] walks one key component depth-first in exactly the order keycodec encodes it:
//! object fields in order, array elements in order, a code-with-scope's scope fields in order.
//! Every *ambiguous leaf* (Int32, Int64, Double, Decimal128, String, Symbol) appends one entry
//! (table below); every other value, containers themselves included, appends nothing.
//! [`restore`] walks the decoded value (which has the same shape: same containers, same field
//! order, a number wherever a number was, a String wherever a String or Symbol was) in the same
//! order and consumes one entry per number and per string. Entries are self-delimiting, so the
//! type bits of a compound key are the plain concatenation of its components' type bits.
//! A component or key without ambiguous leaves has empty
//! type bits: callers that may also store *no* type bits for an entry (because [`append`]
//! returned false) must record that separately, since empty type bits are valid.
//!
//! # Format (one entry per ambiguous leaf)
//!
//! Codes `01..=13` are the BSON element type bytes of the original value.
//!
//! | original value | bytes | decoded value [`restore`] accepts |
//! |---|---|---|
//! | Double, except −0.0 and non-canonical NaNs | `01` | a number exactly representable as a double; a NaN restores as the canonical NaN `0x7FF8_0000_0000_0000` |
//! | String | `02` | a String |
//! | Symbol | `0E` | a String |
//! | Int32 | `10` | an integral number in i32 range |
//! | Int64 | `12` | an integral number in i64 range |
//! | Decimal128 | `13` + its 16 BSON bytes (little-endian BID, as in a BSON document) | a number equal to that decimal (identical keycodec encoding) |
//! | Double −0.0 | `81` | zero |
//! | Double NaN whose bits are not `0x7FF8_0000_0000_0000` | `82` + its bits as u64 little-endian | a NaN; the stored bits must be a NaN |
//!
//! Any other code is invalid. Decimal128 values are stored whole so the exact decimal comes
//! back: cohort (`1.0` vs `1.00`), sign and exponent of zero, NaN/∞ forms and non-canonical
//! encodings alike.
//!
//! # Must not
//!
//! * Change any code or payload layout: type bits are stored on disk beside index keys (bump
//!   an on-disk format version first).
//! * Walk in any order other than keycodec's encoding order.
//! * Panic or allocate unboundedly on corrupt input: [`restore`] returns [`TypeBitsError`],
//!   payloads are fixed-size, and nesting is capped at [`MAX_DECODE_DEPTH`] counted as
//!   keycodec's decoder counts it (values deeper than that make [`append`] return false;
//!   keycodec cannot decode them anyway).

use std::fmt;

use bson::{Bson, Decimal128, Document};

use tideway_query::keycodec::{self, Direction, MAX_DECODE_DEPTH};

/// Entry codes (first byte of every entry). Must not change (on-disk format).
mod code {
    pub(crate) const DOUBLE: u8 = 0x01;
    pub const STRING: u8 = 0x02;
    pub(crate) const SYMBOL: u8 = 0x0E;
    pub(crate) const INT32: u8 = 0x10;
    pub(crate) const INT64: u8 = 0x12;
    pub(crate) const DECIMAL128: u8 = 0x13;
    pub(crate) const DOUBLE_NEG_ZERO: u8 = 0x81;
    pub(crate) const DOUBLE_NAN_BITS: u8 = 0x82;
}

/// The NaN a plain `01` entry restores (spelled out: `f64::NAN`'s bits are not guaranteed).
const CANONICAL_NAN_BITS: u64 = 0x7FF8_0000_0000_0000;

/// 2^63 as a double: the exclusive upper bound of i64 (and −2^63 its inclusive lower bound).
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------

/// Appends the type bits of one key component `value` (the BSON value that was encoded with
/// keycodec) to `out`. Returns false if the value cannot be described exactly (it nests
/// deeper than [`MAX_DECODE_DEPTH`]); then `out` is left as it was and the caller stores no
/// type bits for the whole entry (readers fetch the document instead).
pub fn append(out: &mut Vec<u8>, value: &Bson) -> bool {
    let start = out.len();
    let described = append_value(out, value, 0);
    if !described {
        out.truncate(start);
    }
    described
}

/// Rebuilds the exact original value from `decoded` (what [`keycodec::decode_value`]
/// returned for that component) and the type bits at the front of `bits`, advancing `bits`
/// past what it consumed. Errors (never panics) on bits that do not fit the value (corrupt,
/// short, or belonging to another value); on error `bits` is left unchanged. Error offsets
/// are relative to `bits` as passed.
pub fn restore(decoded: Bson, bits: &mut &[u8]) -> Result<Bson, TypeBitsError> {
    let mut reader = Reader { bits, pos: 0 };
    let mut value = decoded;
    reader.value(&mut value, 0)?;
    *bits = reader.rest();
    Ok(value)
}

/// Type bits did not fit the decoded value (corrupt, truncated, or another value's bits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeBitsError {
    offset: usize,
    reason: &'static str,
}

impl TypeBitsError {
    fn new(offset: usize, reason: &'static str) -> Self {
        TypeBitsError { offset, reason }
    }

    /// Byte offset (within the type bits passed in) where restoring failed.
    #[cfg(test)]
    fn offset(&self) -> usize {
        self.offset
    }
}

impl fmt::Display for TypeBitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid index key type bits at byte {}: {}",
            self.offset, self.reason
        )
    }
}

impl std::error::Error for TypeBitsError {}

// ---------------------------------------------------------------------------------------
// Appending
// ---------------------------------------------------------------------------------------

/// `depth` counts like keycodec's decoder: the component is 0, each field, element or scope
/// field one more than its container.
fn append_value(out: &mut Vec<u8>, value: &Bson, depth: usize) -> bool {
    if depth > MAX_DECODE_DEPTH {
        return false;
    }
    match value {
        Bson::Double(d) => append_double(out, *d),
        Bson::Int32(_) => out.push(code::INT32),
        Bson::Int64(_) => out.push(code::INT64),
        Bson::Decimal128(d) => {
            out.push(code::DECIMAL128);
            out.extend_from_slice(&d.bytes());
        }
        Bson::String(_) => out.push(code::STRING),
        Bson::Symbol(_) => out.push(code::SYMBOL),
        Bson::Document(doc) => return append_fields(out, doc, depth),
        Bson::Array(items) => return items.iter().all(|item| append_value(out, item, depth + 1)),
        Bson::JavaScriptCodeWithScope(cws) => return append_fields(out, &cws.scope, depth),
        // Decoded exactly by keycodec: nothing to record. Listed one by one so a new BSON
        // type cannot slip through without a decision.
        Bson::MinKey
        | Bson::MaxKey
        | Bson::Undefined
        | Bson::Null
        | Bson::Binary(_)
        | Bson::ObjectId(_)
        | Bson::Boolean(_)
        | Bson::DateTime(_)
        | Bson::Timestamp(_)
        | Bson::RegularExpression(_)
        | Bson::DbPointer(_)
        | Bson::JavaScriptCode(_) => {}
    }
    true
}

fn append_fields(out: &mut Vec<u8>, doc: &Document, depth: usize) -> bool {
    doc.values()
        .all(|value| append_value(out, value, depth + 1))
}

fn append_double(out: &mut Vec<u8>, d: f64) {
    if d == 0.0 && d.is_sign_negative() {
        out.push(code::DOUBLE_NEG_ZERO);
    } else if d.is_nan() && d.to_bits() != CANONICAL_NAN_BITS {
        out.push(code::DOUBLE_NAN_BITS);
        out.extend_from_slice(&d.to_bits().to_le_bytes());
    } else {
        out.push(code::DOUBLE);
    }
}

// ---------------------------------------------------------------------------------------
// Restoring
// ---------------------------------------------------------------------------------------

/// Cursor over type bits. Invariant: `pos <= bits.len()`.
struct Reader<'a> {
    bits: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, reason: &'static str) -> TypeBitsError {
        TypeBitsError::new(self.pos, reason)
    }

    fn rest(&self) -> &'a [u8] {
        self.bits.get(self.pos..).unwrap_or_default()
    }

    fn byte(&mut self) -> Result<u8, TypeBitsError> {
        let b = *self
            .bits
            .get(self.pos)
            .ok_or_else(|| self.err("type bits end early"))?;
        self.pos += 1;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], TypeBitsError> {
        let bytes: [u8; N] = self
            .rest()
            .get(..N)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| self.err("type bits end early"))?;
        self.pos += N;
        Ok(bytes)
    }

    /// Restores `value` (decoded, same depth counting as [`append_value`]) in place.
    fn value(&mut self, value: &mut Bson, depth: usize) -> Result<(), TypeBitsError> {
        if depth > MAX_DECODE_DEPTH {
            return Err(self.err("decoded value nested too deeply"));
        }
        match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                *value = self.number(value)?;
            }
            // keycodec never decodes a Symbol, but a Symbol is a string leaf all the same.
            Bson::String(s) | Bson::Symbol(s) => {
                let at = self.pos;
                let text = std::mem::take(s);
                *value = match self.byte()? {
                    code::STRING => Bson::String(text),
                    code::SYMBOL => Bson::Symbol(text),
                    _ => return Err(TypeBitsError::new(at, "string without string type bits")),
                };
            }
            Bson::Document(doc) => self.fields(doc, depth)?,
            Bson::Array(items) => {
                for item in items {
                    self.value(item, depth + 1)?;
                }
            }
            Bson::JavaScriptCodeWithScope(cws) => self.fields(&mut cws.scope, depth)?,
            // The values `append_value` lists as decoded exactly: no bits.
            _ => {}
        }
        Ok(())
    }

    fn fields(&mut self, doc: &mut Document, depth: usize) -> Result<(), TypeBitsError> {
        for (_, value) in doc.iter_mut() {
            self.value(value, depth + 1)?;
        }
        Ok(())
    }

    /// The original number for decoded number `decoded`, from the entry at the cursor.
    fn number(&mut self, decoded: &Bson) -> Result<Bson, TypeBitsError> {
        let at = self.pos;
        let mismatch = |reason| TypeBitsError::new(at, reason);
        Ok(match self.byte()? {
            code::INT32 => exact_i64(decoded)
                .and_then(|i| i32::try_from(i).ok())
                .map(Bson::Int32)
                .ok_or_else(|| mismatch("Int32 type bits on a number that is not an int32"))?,
            code::INT64 => exact_i64(decoded)
                .map(Bson::Int64)
                .ok_or_else(|| mismatch("Int64 type bits on a number that is not an int64"))?,
            code::DOUBLE => {
                let d = exact_f64(decoded)
                    .ok_or_else(|| mismatch("Double type bits on a number that is not a double"))?;
                Bson::Double(if d.is_nan() {
                    f64::from_bits(CANONICAL_NAN_BITS)
                } else {
                    d
                })
            }
            code::DOUBLE_NEG_ZERO => {
                if !exact_f64(decoded).is_some_and(|d| d == 0.0) {
                    return Err(mismatch("-0.0 type bits on a number that is not zero"));
                }
                Bson::Double(-0.0)
            }
            code::DOUBLE_NAN_BITS => {
                let d = f64::from_bits(u64::from_le_bytes(self.array()?));
                if !d.is_nan() {
                    return Err(mismatch("NaN type bits hold a double that is not NaN"));
                }
                if !exact_f64(decoded).is_some_and(f64::is_nan) {
                    return Err(mismatch("NaN type bits on a number that is not NaN"));
                }
                Bson::Double(d)
            }
            code::DECIMAL128 => {
                let original = Bson::Decimal128(Decimal128::from_bytes(self.array()?));
                if !same_number(&original, decoded) {
                    return Err(mismatch("Decimal128 type bits hold a different number"));
                }
                original
            }
            _ => return Err(mismatch("unknown type bits code for a number")),
        })
    }
}

/// `value` as an i64 if it is an Int32, Int64 or Double of exactly that integral value.
fn exact_i64(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        // In range and integral, so the cast is exact.
        Bson::Double(d) if d.fract() == 0.0 && *d >= -TWO_POW_63 && *d < TWO_POW_63 => {
            Some(*d as i64)
        }
        _ => None,
    }
}

/// `value` as an f64 if it is an Int32, Int64 or Double of exactly that value (NaN and ±∞
/// included). Decoded Decimal128 values are never exact doubles.
fn exact_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(i) => Some(f64::from(*i)),
        // i128 comparison: `d as i64` would saturate 2^63 back to i64::MAX.
        Bson::Int64(i) => {
            let d = *i as f64;
            (d as i128 == i128::from(*i)).then_some(d)
        }
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

/// Numeric equality of two numbers, exactly as keycodec decides it (equal encodings).
fn same_number(a: &Bson, b: &Bson) -> bool {
    let mut ea = Vec::new();
    let mut eb = Vec::new();
    keycodec::encode_value(&mut ea, a, Direction::Ascending);
    keycodec::encode_value(&mut eb, b, Direction::Ascending);
    ea == eb
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use bson::oid::ObjectId;
    use bson::spec::BinarySubtype;
    use bson::{doc, Binary, DateTime, JavaScriptCodeWithScope, Regex, Timestamp};

    use super::*;

    /// Type bits of a whole compound key: every component's, in component order. `None` if any
    /// component cannot be described (see `append`).
    fn append_key<'a>(values: impl IntoIterator<Item = &'a Bson>) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for value in values {
            if !append(&mut out, value) {
                return None;
            }
        }
        Some(out)
    }

    /// Restores every component of a compound key in order from its whole type bits (as built by
    /// `append_key`); bits left over after the last component are an error.
    fn restore_key(decoded: Vec<Bson>, bits: &[u8]) -> Result<Vec<Bson>, TypeBitsError> {
        let mut reader = Reader { bits, pos: 0 };
        let mut values = decoded;
        for value in &mut values {
            reader.value(value, 0)?;
        }
        if reader.pos != bits.len() {
            return Err(reader.err("trailing type bits after the last key component"));
        }
        Ok(values)
    }

    // ---- helpers ---------------------------------------------------------------------

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).expect("valid decimal literal"))
    }

    fn dec_bytes(bytes: [u8; 16]) -> Bson {
        Bson::Decimal128(Decimal128::from_bytes(bytes))
    }

    /// A DbPointer (the bson crate has no public constructor): parse one from raw BSON.
    fn db_pointer(ns: &str, id: [u8; 12]) -> Bson {
        let str_len = i32::try_from(ns.len() + 1).expect("short namespace");
        let mut raw = vec![0, 0, 0, 0, 0x0C, 0x00];
        raw.extend_from_slice(&str_len.to_le_bytes());
        raw.extend_from_slice(ns.as_bytes());
        raw.push(0);
        raw.extend_from_slice(&id);
        raw.push(0);
        let total = i32::try_from(raw.len()).expect("short document");
        raw[..4].copy_from_slice(&total.to_le_bytes());
        let doc = Document::from_reader(&raw[..]).expect("valid DbPointer document");
        doc.get("").cloned().expect("DbPointer field")
    }

    /// Exact BSON identity, type and bits included (`Bson`'s `PartialEq` treats NaN != NaN
    /// and -0.0 == 0.0).
    fn bson_bytes(value: &Bson) -> Vec<u8> {
        bson::to_vec(&doc! {"v": value.clone()}).expect("serializable value")
    }

    fn assert_identical(back: &Bson, original: &Bson) {
        assert_eq!(
            bson_bytes(back),
            bson_bytes(original),
            "restored {back:?}, expected {original:?}"
        );
    }

    fn bits_of(value: &Bson) -> Vec<u8> {
        let mut bits = Vec::new();
        assert!(append(&mut bits, value), "cannot describe {value:?}");
        bits
    }

    fn decode(value: &Bson, direction: Direction) -> Bson {
        let mut key = Vec::new();
        keycodec::encode_value(&mut key, value, direction);
        let (decoded, used) =
            keycodec::decode_value(&key, direction).unwrap_or_else(|e| panic!("{value:?}: {e}"));
        assert_eq!(used, key.len(), "{value:?}");
        decoded
    }

    /// Encode with keycodec in both directions, decode, restore with the type bits, and
    /// require the exact original back with every bit consumed.
    fn check_round_trip(value: &Bson) {
        let bits = bits_of(value);
        for direction in [Direction::Ascending, Direction::Descending] {
            let decoded = decode(value, direction);
            let mut rest = &bits[..];
            let back = restore(decoded, &mut rest)
                .unwrap_or_else(|e| panic!("{value:?} ({bits:02x?}): {e}"));
            assert!(rest.is_empty(), "{value:?}: {} bits left", rest.len());
            assert_identical(&back, value);
        }
    }

    fn nested(depth: usize, leaf: Bson) -> Bson {
        let mut value = leaf;
        for i in 0..depth {
            value = if i % 2 == 0 {
                Bson::Array(vec![value])
            } else {
                Bson::Document(doc! {"a": value})
            };
        }
        value
    }

    fn numbers() -> Vec<Bson> {
        let two31 = 1i64 << 31;
        let two53 = 1i64 << 53;
        let mut v = vec![
            Bson::Int32(0),
            Bson::Int64(0),
            Bson::Double(0.0),
            Bson::Double(-0.0),
            Bson::Int32(1),
            Bson::Int64(1),
            Bson::Double(1.0),
            Bson::Int32(-1),
            Bson::Int64(-1),
            Bson::Double(-1.0),
            Bson::Int32(i32::MAX),
            Bson::Int32(i32::MIN),
            Bson::Int64(i64::from(i32::MAX)),
            Bson::Int64(i64::from(i32::MIN)),
            Bson::Int64(two31),
            Bson::Double(two31 as f64),
            Bson::Int64(-two31 - 1),
            Bson::Int64(two53),
            Bson::Double(two53 as f64),
            Bson::Int64(two53 + 1),
            Bson::Int64(-two53 - 1),
            Bson::Int64(i64::MAX),
            Bson::Int64(i64::MIN),
            Bson::Double(i64::MIN as f64),
            Bson::Double(TWO_POW_63),
            Bson::Double(0.5),
            Bson::Double(-0.5),
            Bson::Double(0.1),
            Bson::Double(1e300),
            Bson::Double(-1e300),
            Bson::Double(1e-300),
            Bson::Double(f64::MAX),
            Bson::Double(f64::MIN_POSITIVE),
            Bson::Double(f64::from_bits(1)),
            Bson::Double(-f64::from_bits(1)),
            Bson::Double(f64::from_bits(CANONICAL_NAN_BITS)),
            Bson::Double(f64::from_bits(CANONICAL_NAN_BITS | 1 << 63)),
            Bson::Double(f64::from_bits(0x7FF0_0000_0000_0001)),
            Bson::Double(f64::from_bits(0xFFFF_FFFF_FFFF_FFFF)),
            Bson::Double(f64::INFINITY),
            Bson::Double(f64::NEG_INFINITY),
        ];
        for s in [
            "0",
            "-0",
            "0.0",
            "0E+10",
            "-0E-10",
            "1",
            "1.0",
            "1.00",
            "-1.0",
            "0.5",
            "0.1",
            "2147483648",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775809",
            "1E+300",
            "1E-300",
            "1E+6144",
            "1E-6176",
            "1234567890123456789012345678901234",
            "9.999999999999999999999999999999999E+6144",
            "NaN",
            "-NaN",
            "sNaN",
            "Infinity",
            "-Infinity",
        ] {
            v.push(dec(s));
        }
        // Non-canonical coefficient (> 10^34 - 1): a zero whose bytes must come back.
        let mut noncanonical = [0xFF; 16];
        noncanonical[15] = 0x30;
        v.push(dec_bytes(noncanonical));
        v
    }

    fn exact_types() -> Vec<Bson> {
        vec![
            Bson::MinKey,
            Bson::MaxKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::ObjectId(ObjectId::from_bytes([7; 12])),
            Bson::DateTime(DateTime::from_millis(-5)),
            Bson::DateTime(DateTime::from_millis(i64::MAX)),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![0, 1, 2],
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x80),
                bytes: vec![9; 300],
            }),
            Bson::RegularExpression(Regex {
                pattern: "a.*b".into(),
                options: "i".into(),
            }),
            Bson::Timestamp(Timestamp {
                time: 7,
                increment: u32::MAX,
            }),
            db_pointer("db.coll", [3; 12]),
            Bson::JavaScriptCode("return 1".into()),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "x".into(),
                scope: doc! {},
            }),
            Bson::Array(vec![]),
            Bson::Document(doc! {}),
        ]
    }

    // ---- tests -----------------------------------------------------------------------

    #[test]
    fn every_number_round_trips_with_its_type() {
        for value in numbers() {
            check_round_trip(&value);
        }
    }

    #[test]
    fn same_number_of_different_types_decodes_alike_and_restores_apart() {
        // The premise: keycodec forgets these types; type bits tell them apart.
        let group = [
            Bson::Int32(5),
            Bson::Int64(5),
            Bson::Double(5.0),
            dec("5"),
            dec("5.0"),
            dec("5.00"),
        ];
        let decoded = decode(&group[0], Direction::Ascending);
        for value in &group {
            assert_identical(&decode(value, Direction::Ascending), &decoded);
            let bits = bits_of(value);
            let back = restore(decoded.clone(), &mut &bits[..]).expect("restores");
            assert_identical(&back, value);
        }
    }

    #[test]
    fn strings_and_symbols_round_trip() {
        for s in ["", "a", "\0", "\u{1}x", "é", "\u{10FFFF}"] {
            check_round_trip(&Bson::String(s.into()));
            check_round_trip(&Bson::Symbol(s.into()));
        }
    }

    #[test]
    fn exactly_decoded_types_take_no_bits() {
        for value in exact_types() {
            assert!(bits_of(&value).is_empty(), "{value:?}");
            check_round_trip(&value);
        }
    }

    #[test]
    fn nested_values_round_trip() {
        let values = [
            Bson::Document(doc! {
                "a": 1i32,
                "b": 1i64,
                "c": 1.0,
                "d": dec("1.00"),
                "e": Bson::Symbol("s".into()),
                "f": "s",
                "g": -0.0,
                "h": Bson::Null,
            }),
            Bson::Array(vec![
                Bson::Int64(2),
                Bson::Array(vec![Bson::Double(2.0), Bson::Symbol("x".into())]),
                Bson::Document(
                    doc! {"x": dec("-0"), "y": [Bson::Int32(0), Bson::Double(f64::NAN)]},
                ),
                Bson::String("y".into()),
                Bson::MinKey,
                Bson::Int32(2),
            ]),
            Bson::Document(doc! {
                "outer": {"inner": [1i64, {"deep": Bson::Symbol("z".into())}, 1.5, dec("1.50")]},
                "after": 3i64,
            }),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "return n".into(),
                scope: doc! {
                    "n": 1i64,
                    "m": -0.0,
                    "d": dec("1E+300"),
                    "s": Bson::Symbol("sym".into()),
                    "nested": {"k": [7i32, 7i64, 7.0]},
                },
            }),
            Bson::Array(vec![Bson::JavaScriptCodeWithScope(
                JavaScriptCodeWithScope {
                    code: "c".into(),
                    scope: doc! {"x": 1i64},
                },
            )]),
        ];
        for value in &values {
            check_round_trip(value);
        }
    }

    #[test]
    fn format_is_pinned() {
        // On-disk format: these bytes must never change without a format version bump.
        assert_eq!(bits_of(&Bson::Double(1.5)), [0x01]);
        assert_eq!(bits_of(&Bson::Double(f64::NAN)), [0x01]);
        assert_eq!(bits_of(&Bson::String("a".into())), [0x02]);
        assert_eq!(bits_of(&Bson::Symbol("a".into())), [0x0E]);
        assert_eq!(bits_of(&Bson::Int32(1)), [0x10]);
        assert_eq!(bits_of(&Bson::Int64(1)), [0x12]);
        assert_eq!(bits_of(&Bson::Double(-0.0)), [0x81]);
        assert_eq!(
            bits_of(&Bson::Double(f64::from_bits(0xFFF8_0000_0000_0001))),
            [0x82, 0x01, 0, 0, 0, 0, 0, 0xF8, 0xFF]
        );
        // Decimal128 "1.0": coefficient 10, exponent -1 (biased 6175 = 0x181F).
        let mut one_point_zero = vec![0x13, 0x0A];
        one_point_zero.extend_from_slice(&[0; 13]);
        one_point_zero.extend_from_slice(&[0x3E, 0x30]);
        assert_eq!(bits_of(&dec("1.0")), one_point_zero);
        assert_eq!(
            bits_of(&Bson::Document(
                doc! {"a": 1i32, "b": [1i64, "s"], "c": Bson::Null}
            )),
            [0x10, 0x12, 0x02]
        );
        // Restoring the canonical NaN gives exactly its bits.
        let back = restore(Bson::Double(f64::NAN), &mut &[0x01][..]).expect("restores");
        match back {
            Bson::Double(d) => assert_eq!(d.to_bits(), 0x7FF8_0000_0000_0000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn compound_key_restores_in_sequence() {
        let components = [
            Bson::Int64(1),
            dec("1.000"),
            Bson::String("a".into()),
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::Document(doc! {"x": Bson::Symbol("s".into()), "y": -0.0}),
            Bson::Double(1.0),
        ];
        let directions = [
            Direction::Ascending,
            Direction::Descending,
            Direction::Ascending,
            Direction::Descending,
            Direction::Descending,
            Direction::Ascending,
        ];
        let pairs: Vec<(&Bson, Direction)> = components.iter().zip(directions).collect();
        let key = keycodec::encode_key(&pairs);
        let (decoded, used) = keycodec::decode_key(&key, &directions).expect("decodes");
        assert_eq!(used, key.len());

        // One `append` after another, one `restore` after another.
        let mut bits = Vec::new();
        for component in &components {
            assert!(append(&mut bits, component));
        }
        let mut rest = &bits[..];
        for (decoded, original) in decoded.iter().zip(&components) {
            let back = restore(decoded.clone(), &mut rest).expect("restores");
            assert_identical(&back, original);
        }
        assert!(rest.is_empty());

        // The whole-key helpers agree.
        assert_eq!(append_key(&components), Some(bits.clone()));
        let back = restore_key(decoded.clone(), &bits).expect("restores");
        assert_eq!(back.len(), components.len());
        for (back, original) in back.iter().zip(&components) {
            assert_identical(back, original);
        }
        let mut longer = bits.clone();
        longer.push(code::INT32);
        let err = restore_key(decoded, &longer).expect_err("trailing bits");
        assert_eq!(err.offset(), bits.len());
    }

    #[test]
    fn truncated_bits_are_errors_and_leave_bits_alone() {
        let mut values = numbers();
        values.push(Bson::Document(
            doc! {"a": [1i64, dec("2.0"), "s"], "b": -0.0},
        ));
        for value in &values {
            let bits = bits_of(value);
            let decoded = decode(value, Direction::Ascending);
            for len in 0..bits.len() {
                let short = &bits[..len];
                let mut rest = short;
                let err = restore(decoded.clone(), &mut rest)
                    .expect_err("truncated type bits must not restore");
                assert_eq!(rest, short, "bits moved on error");
                assert!(err.offset() <= len, "{err}");
                assert!(!err.to_string().is_empty());
            }
        }
    }

    #[test]
    fn mismatched_bits_are_errors() {
        let mut dec_one = vec![code::DECIMAL128];
        dec_one.extend_from_slice(&Decimal128::from_str("1").expect("decimal").bytes());
        let mut nan_bits = vec![code::DOUBLE_NAN_BITS];
        nan_bits.extend_from_slice(&0x7FF0_0000_0000_0001u64.to_le_bytes());
        let mut not_nan_bits = vec![code::DOUBLE_NAN_BITS];
        not_nan_bits.extend_from_slice(&1.0f64.to_bits().to_le_bytes());
        let cases: Vec<(Bson, Vec<u8>)> = vec![
            // Int32 bits on numbers that are no int32.
            (Bson::Int64(1 << 31), vec![code::INT32]),
            (Bson::Double(0.5), vec![code::INT32]),
            (Bson::Double(f64::NAN), vec![code::INT32]),
            (Bson::Double(f64::INFINITY), vec![code::INT64]),
            (Bson::Double(TWO_POW_63), vec![code::INT64]),
            (dec("0.1"), vec![code::INT64]),
            // Double bits on numbers that are no double.
            (Bson::Int64(i64::MAX), vec![code::DOUBLE]),
            (Bson::Int64((1 << 53) + 1), vec![code::DOUBLE]),
            (dec("0.1"), vec![code::DOUBLE]),
            (Bson::Int32(1), vec![code::DOUBLE_NEG_ZERO]),
            (Bson::Double(f64::NAN), vec![code::DOUBLE_NEG_ZERO]),
            (Bson::Int32(0), nan_bits.clone()),
            (Bson::Double(f64::NAN), not_nan_bits),
            // A decimal that is another number.
            (Bson::Int32(2), dec_one.clone()),
            (Bson::Double(f64::NAN), dec_one.clone()),
            // String bits on numbers and number bits on strings.
            (Bson::Int32(1), vec![code::STRING]),
            (Bson::Int32(1), vec![code::SYMBOL]),
            (Bson::String("a".into()), vec![code::INT32]),
            (Bson::String("a".into()), vec![code::DECIMAL128]),
            // Unknown codes.
            (Bson::Int32(1), vec![0x00]),
            (Bson::Int32(1), vec![0xFF]),
            (Bson::String("a".into()), vec![0x80]),
            // Missing bits.
            (Bson::Int32(1), vec![]),
            (Bson::String("a".into()), vec![]),
            (Bson::Array(vec![Bson::Null, Bson::Int32(1)]), vec![]),
        ];
        for (decoded, bits) in cases {
            let mut rest = &bits[..];
            assert!(
                restore(decoded.clone(), &mut rest).is_err(),
                "{decoded:?} with {bits:02x?} restored"
            );
            assert_eq!(rest, &bits[..]);
        }
    }

    #[test]
    fn nesting_is_capped_like_keycodec() {
        let deepest = nested(MAX_DECODE_DEPTH, Bson::Int64(1));
        check_round_trip(&deepest);

        let too_deep = nested(MAX_DECODE_DEPTH + 1, Bson::Int64(1));
        let mut out = vec![0xAA, code::INT64];
        assert!(!append(&mut out, &too_deep));
        assert_eq!(out, [0xAA, code::INT64], "out changed on failure");
        assert_eq!(append_key([&Bson::Int32(1), &too_deep]), None);
        // keycodec cannot decode it either.
        let mut key = Vec::new();
        keycodec::encode_value(&mut key, &too_deep, Direction::Ascending);
        assert!(keycodec::decode_value(&key, Direction::Ascending).is_err());
        // Restoring a too-deep value is an error, even with plenty of bits.
        let bits = [code::INT64; 4];
        assert!(restore(too_deep, &mut &bits[..]).is_err());
        // Depth without ambiguous leaves is capped too.
        assert!(!append(
            &mut Vec::new(),
            &nested(MAX_DECODE_DEPTH + 1, Bson::Null)
        ));
    }

    // ---- randomized ------------------------------------------------------------------

    use tideway_base::rng::SplitMix64 as Rng;

    fn random_number(rng: &mut Rng) -> Bson {
        match rng.below(9) {
            0 => Bson::Int32(rng.next_u64() as i32 >> rng.below(32)),
            1 => Bson::Int64(rng.next_u64() as i64 >> rng.below(64)),
            2 => Bson::Double((rng.next_u64() as i64 >> rng.below(64)) as f64),
            3 => Bson::Double((rng.below(2000) as f64 - 1000.0) / 8.0),
            4 => Bson::Double(f64::from_bits(rng.next_u64())),
            5 => {
                // Decimal equal to an integer, with trailing zeros.
                let i = rng.next_u64() as i64 >> rng.below(64);
                let z = rng.below(4) as usize;
                dec(&format!("{}{}E-{}", i, "0".repeat(z), z))
            }
            6 => {
                let c = rng.next_u64() % 100_000;
                let e = rng.below(12) as i64 - 6;
                let s = if rng.below(2) == 0 { "" } else { "-" };
                dec(&format!("{s}{c}E{e}"))
            }
            7 => dec_bytes(rng.bytes()),
            _ => rng.pick(&numbers()).clone(),
        }
    }

    fn random_string(rng: &mut Rng) -> String {
        let alphabet = ["", "a", "b", "\0", "\u{1}", "é", "\u{10FFFF}"];
        (0..rng.below(4)).map(|_| *rng.pick(&alphabet)).collect()
    }

    fn random_value(rng: &mut Rng, depth: u32) -> Bson {
        let kinds = if depth >= 4 { 8 } else { 11 };
        match rng.below(kinds) {
            0..=2 => random_number(rng),
            3 => Bson::String(random_string(rng)),
            4 => Bson::Symbol(random_string(rng)),
            5..=7 => rng.pick(&exact_types()).clone(),
            8 => Bson::Document(random_doc(rng, depth + 1)),
            9 => Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: random_string(rng),
                scope: random_doc(rng, depth + 1),
            }),
            _ => Bson::Array(
                (0..rng.below(5))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
        }
    }

    fn random_doc(rng: &mut Rng, depth: u32) -> Document {
        let mut d = Document::new();
        for _ in 0..rng.below(5) {
            let name = rng.pick(&["", "a", "b", "ab", "é"]).to_string();
            d.insert(name, random_value(rng, depth));
        }
        d
    }

    #[test]
    fn random_values_round_trip() {
        let mut rng = Rng(0x7E1D_BEEF);
        for _ in 0..4000 {
            check_round_trip(&random_value(&mut rng, 0));
        }
    }

    #[test]
    fn random_compound_keys_round_trip() {
        let mut rng = Rng(42);
        for _ in 0..1000 {
            let components: Vec<Bson> = (0..1 + rng.below(4))
                .map(|_| random_value(&mut rng, 1))
                .collect();
            let directions: Vec<Direction> = components
                .iter()
                .map(|_| *rng.pick(&[Direction::Ascending, Direction::Descending]))
                .collect();
            let pairs: Vec<(&Bson, Direction)> =
                components.iter().zip(directions.iter().copied()).collect();
            let key = keycodec::encode_key(&pairs);
            let (decoded, _) = keycodec::decode_key(&key, &directions).expect("decodes");
            let bits = append_key(&components).expect("describable");
            let back = restore_key(decoded.clone(), &bits).expect("restores");
            for (back, original) in back.iter().zip(&components) {
                assert_identical(back, original);
            }
            // Every strict prefix of the bits is short for someone.
            if !bits.is_empty() {
                let cut = rng.below(bits.len() as u64) as usize;
                assert!(restore_key(decoded, &bits[..cut]).is_err());
            }
        }
    }

    #[test]
    fn garbage_bits_never_panic() {
        let mut rng = Rng(7);
        for _ in 0..4000 {
            let value = random_value(&mut rng, 0);
            let decoded = decode(&value, Direction::Ascending);
            let mut garbage = bits_of(&value);
            // Flip, drop or add a few bytes, or replace everything with noise.
            match rng.below(4) {
                0 => {
                    for _ in 0..1 + rng.below(3) {
                        if !garbage.is_empty() {
                            let i = rng.below(garbage.len() as u64) as usize;
                            garbage[i] ^= 1 << rng.below(8);
                        }
                    }
                }
                1 => {
                    let i = rng.below(garbage.len() as u64 + 1) as usize;
                    garbage.insert(
                        i,
                        *rng.pick(&[0x01, 0x02, 0x0E, 0x10, 0x12, 0x13, 0x81, 0x82]),
                    );
                }
                2 => {
                    if !garbage.is_empty() {
                        let i = rng.below(garbage.len() as u64) as usize;
                        garbage.remove(i);
                    }
                }
                _ => garbage = (0..rng.below(40)).map(|_| rng.next_u64() as u8).collect(),
            }
            let mut rest = &garbage[..];
            match restore(decoded, &mut rest) {
                Ok(_) => assert!(rest.len() <= garbage.len()),
                Err(e) => {
                    assert_eq!(rest, &garbage[..]);
                    assert!(e.offset() <= garbage.len(), "{e}");
                }
            }
        }
    }
}
