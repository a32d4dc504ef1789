//! Order-preserving, self-delimiting binary encoding of BSON values for index keys and
//! primary keys.
//!
//! For any two values `a` and `b`, `encode(a).cmp(&encode(b))` (plain byte-wise `memcmp`
//! order) equals the MongoDB comparison of `a` and `b`, and equal values (in particular equal
//! numbers of different BSON types) encode to identical bytes. Every encoded component is
//! prefix-free (no encoding is a proper prefix of another), so a compound key is the plain
//! concatenation of its components and a descending component is the bitwise inversion (`!b`
//! for every byte) of its ascending encoding.
//!
//! # Type order
//!
//! MinKey < Undefined < Null < numbers < String (= Symbol) < Object < Array < Binary <
//! ObjectId < Boolean < DateTime < Timestamp < RegularExpression < DbPointer <
//! JavaScriptCode < JavaScriptCodeWithScope < MaxKey, as mongod's `canonicalizeBSONType`
//! (Undefined is its own bracket strictly below Null, like key_string's `kUndefined` <
//! `kNullish`). [`canonical_type_rank`] numbers these brackets 0..=16 (`RANK_*` constants).
//! The order matches `crate::compare::compare_values` except where that comparator
//! departs from mongod, where this encoding follows mongod: Decimal128 vs Double is exact
//! here (mongod's `compareDecimalToDouble`), while `compare_values` first rounds the double
//! to 34 digits; DbPointers order by namespace length as a number here (mongod compares
//! `valuesize()` first), while `compare_values` compares the little-endian length bytes.
//!
//! # Format (ascending; descending = every byte inverted)
//!
//! Every component starts with one tag byte in `0x10..=0xF0`; tags of different brackets
//! are ordered like the brackets, and 0x00 (END) is below every tag.
//!
//! | value | bytes |
//! |---|---|
//! | MinKey / MaxKey | `10` / `F0` |
//! | Undefined | `14` |
//! | Null | `18` |
//! | number | see below, tags `20..=29` |
//! | String, Symbol | `30` + escaped(UTF-8 bytes) |
//! | Object | `38` + per field: (`rank(value) + 1` in `01..=11`, escaped(name), component(value)) + `00` |
//! | Array | `40` + component(element)* + `00` |
//! | Binary | `48` + length + subtype byte + raw bytes; length is 1 byte if < 255, else `FF` + u32 BE |
//! | ObjectId | `50` + 12 raw bytes |
//! | Boolean | `58` (false) / `59` (true) |
//! | DateTime | `60` + (ms as u64 ^ 2^63) BE |
//! | Timestamp | `68` + time u32 BE + increment u32 BE |
//! | RegularExpression | `70` + escaped(pattern) + escaped(options) |
//! | DbPointer | `78` + u32 BE namespace length + namespace bytes + 12 id bytes (mongod order) |
//! | JavaScriptCode | `80` + escaped(code) |
//! | JavaScriptCodeWithScope | `88` + escaped(code) + fields(scope) as for Object |
//!
//! `escaped(s)`: bytes `>= 0x02` verbatim, `0x00` → `01 01`, `0x01` → `01 02`, then `00`.
//! It preserves byte order with "prefix is smaller" and is prefix-free.
//!
//! ## Numbers
//!
//! Int32, Int64, Double and Decimal128 share one encoding that depends only on the numeric
//! value. Tags: `20` NaN (all NaNs, below every other number), `21` −∞, `22` negative huge,
//! `23` negative, `24` negative tiny, `25` zero (±0 of every type), `26` positive tiny,
//! `27` positive, `28` positive huge, `29` +∞. Negative brackets hold the bitwise inversion
//! of the magnitude body described below.
//!
//! * positive (`27`), for `2^-1074 <= |x| < 2^1024`: let `D` be the largest double `<= |x|`
//!   and `ulp` the spacing of doubles in `D`'s binade (`2^-1074` for subnormals). Body =
//!   `D.to_bits()` as u64 BE (monotone for positive doubles), then the exact fraction
//!   `f = (|x| - D) / ulp` in `[0, 1)` as decimal digits: trailing zeros dropped, digit pairs
//!   packed one per byte as `1 + 10*hi + lo` (1..=100, a lone last digit is padded with 0),
//!   then `00`. `f` always has a finite decimal expansion because `ulp` is a power of two
//!   and `|x|` is dyadic or decimal. Doubles always have `f = 0` (body = 8 bytes + `00`);
//!   int64 beyond 2^53 has at most 11 fraction digits; Decimal128 values that are not
//!   doubles get up to ~1000 digits in pathological cases (e.g. `1E+300`).
//! * huge (`28`, `|x| >= 2^1024`) and tiny (`26`, `0 < |x| < 2^-1074`) only hold Decimal128
//!   values: u16 BE of `X + 0x8000`, where `|x| = 0.d1d2…dn × 10^X` with `d1 != 0`, then the
//!   significant digits packed in pairs as above, then `00`.
//!
//! Order and equality are exact for every Int32, Int64, Double and Decimal128 value;
//! nothing is approximated. Non-canonical Decimal128 coefficients (> 10^34 − 1) are zero, as
//! the spec requires; decimal NaNs (quiet or signalling, any sign) equal double NaN.
//!
//! # Decoding
//!
//! [`decode_value`] returns a value that compares equal to the encoded one: integral
//! numbers in i32 range decode as Int32, else in i64 range as Int64, other exact doubles as
//! Double, anything else as Decimal128 (cohort/trailing zeros not preserved); zero decodes as
//! Int32(0), NaN/±∞ as Double. Symbol decodes as String (the encoding does not keep them
//! apart). Everything else, Undefined included, decodes exactly.
//!
//! # Must not
//!
//! * Change any byte assignment: stored keys depend on it (bump an on-disk format version).
//!   (Giving Undefined its own tag `14` and rank changed the bytes of keys containing
//!   Undefined, top-level or nested in objects, compared to the earlier Null-merged format.)
//! * Emit a component that is a prefix of another, or a tag outside `0x10..=0xF0`.
//! * Panic or allocate unboundedly on corrupt bytes: decoding returns [`KeyDecodeError`] and
//!   nesting is capped at [`MAX_DECODE_DEPTH`].

use std::cmp::Ordering;
use std::fmt;

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{
    Binary, Bson, DateTime, Decimal128, Document, JavaScriptCodeWithScope, Regex, Timestamp,
};

/// Sort direction of one key component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Ascending,
    Descending,
}

impl Direction {
    /// XOR mask applied to every byte of a component in this direction.
    fn mask(self) -> u8 {
        match self {
            Direction::Ascending => 0x00,
            Direction::Descending => 0xFF,
        }
    }
}

pub(crate) const RANK_MIN_KEY: u8 = 0;
pub(crate) const RANK_UNDEFINED: u8 = 1;
pub(crate) const RANK_NULL: u8 = 2;
pub(crate) const RANK_NUMBER: u8 = 3;
pub(crate) const RANK_STRING: u8 = 4;
pub(crate) const RANK_OBJECT: u8 = 5;
pub(crate) const RANK_ARRAY: u8 = 6;
pub(crate) const RANK_BINARY: u8 = 7;
pub(crate) const RANK_OBJECT_ID: u8 = 8;
pub(crate) const RANK_BOOLEAN: u8 = 9;
pub(crate) const RANK_DATE_TIME: u8 = 10;
pub(crate) const RANK_TIMESTAMP: u8 = 11;
pub(crate) const RANK_REGEX: u8 = 12;
pub(crate) const RANK_DB_POINTER: u8 = 13;
pub(crate) const RANK_CODE: u8 = 14;
pub(crate) const RANK_CODE_WITH_SCOPE: u8 = 15;
pub(crate) const RANK_MAX_KEY: u8 = 16;

/// Nesting limit (documents/arrays) accepted by the decoder.
pub const MAX_DECODE_DEPTH: usize = 200;

/// Canonical type bracket of `value` (MongoDB's `canonicalizeBSONType` order, densely
/// renumbered; the same order as `crate::compare::canonical_type_rank`). Values of
/// different ranks compare by rank alone.
pub fn canonical_type_rank(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => RANK_MIN_KEY,
        Bson::Undefined => RANK_UNDEFINED,
        Bson::Null => RANK_NULL,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => RANK_NUMBER,
        Bson::String(_) | Bson::Symbol(_) => RANK_STRING,
        Bson::Document(_) => RANK_OBJECT,
        Bson::Array(_) => RANK_ARRAY,
        Bson::Binary(_) => RANK_BINARY,
        Bson::ObjectId(_) => RANK_OBJECT_ID,
        Bson::Boolean(_) => RANK_BOOLEAN,
        Bson::DateTime(_) => RANK_DATE_TIME,
        Bson::Timestamp(_) => RANK_TIMESTAMP,
        Bson::RegularExpression(_) => RANK_REGEX,
        Bson::DbPointer(_) => RANK_DB_POINTER,
        Bson::JavaScriptCode(_) => RANK_CODE,
        Bson::JavaScriptCodeWithScope(_) => RANK_CODE_WITH_SCOPE,
        Bson::MaxKey => RANK_MAX_KEY,
    }
}

/// Tag bytes (first byte of every ascending component).
pub mod tag {
    pub(crate) const MIN_KEY: u8 = 0x10;
    /// Strictly between MinKey and Null, as mongod orders them (key_string `kUndefined` <
    /// `kNullish`).
    pub const UNDEFINED: u8 = 0x14;
    pub const NULL: u8 = 0x18;
    pub(crate) const NUM_NAN: u8 = 0x20;
    pub(crate) const NUM_NEG_INF: u8 = 0x21;
    pub(crate) const NUM_NEG_HUGE: u8 = 0x22;
    pub(crate) const NUM_NEG: u8 = 0x23;
    pub(crate) const NUM_NEG_TINY: u8 = 0x24;
    pub(crate) const NUM_ZERO: u8 = 0x25;
    pub(crate) const NUM_POS_TINY: u8 = 0x26;
    pub(crate) const NUM_POS: u8 = 0x27;
    pub(crate) const NUM_POS_HUGE: u8 = 0x28;
    pub(crate) const NUM_POS_INF: u8 = 0x29;
    pub const STRING: u8 = 0x30;
    pub(crate) const OBJECT: u8 = 0x38;
    pub const ARRAY: u8 = 0x40;
    pub(crate) const BINARY: u8 = 0x48;
    pub(crate) const OBJECT_ID: u8 = 0x50;
    pub(crate) const FALSE: u8 = 0x58;
    pub(crate) const TRUE: u8 = 0x59;
    pub(crate) const DATE_TIME: u8 = 0x60;
    pub(crate) const TIMESTAMP: u8 = 0x68;
    pub(crate) const REGEX: u8 = 0x70;
    pub(crate) const DB_POINTER: u8 = 0x78;
    pub(crate) const CODE: u8 = 0x80;
    pub(crate) const CODE_WITH_SCOPE: u8 = 0x88;
    pub(crate) const MAX_KEY: u8 = 0xF0;
}

#[cfg(test)] // The codec's tests check the encoding's brackets and decoding with these.
/// First and last tag of each bracket, indexed by rank.
const BRACKET_TAGS: [(u8, u8); RANK_MAX_KEY as usize + 1] = [
    (tag::MIN_KEY, tag::MIN_KEY),
    (tag::UNDEFINED, tag::UNDEFINED),
    (tag::NULL, tag::NULL),
    (tag::NUM_NAN, tag::NUM_POS_INF),
    (tag::STRING, tag::STRING),
    (tag::OBJECT, tag::OBJECT),
    (tag::ARRAY, tag::ARRAY),
    (tag::BINARY, tag::BINARY),
    (tag::OBJECT_ID, tag::OBJECT_ID),
    (tag::FALSE, tag::TRUE),
    (tag::DATE_TIME, tag::DATE_TIME),
    (tag::TIMESTAMP, tag::TIMESTAMP),
    (tag::REGEX, tag::REGEX),
    (tag::DB_POINTER, tag::DB_POINTER),
    (tag::CODE, tag::CODE),
    (tag::CODE_WITH_SCOPE, tag::CODE_WITH_SCOPE),
    (tag::MAX_KEY, tag::MAX_KEY),
];

/// Terminates arrays, objects, escaped strings and digit tails; below every tag.
const END: u8 = 0x00;
/// Escape byte inside escaped strings.
const ESCAPE: u8 = 0x01;

const MANTISSA_MASK: u64 = (1 << 52) - 1;
/// Largest canonical Decimal128 coefficient + 1.
const DECIMAL_COEFF_LIMIT: u128 = 10_000_000_000_000_000_000_000_000_000_000_000;
const DECIMAL_EXP_MIN: i64 = -6176;
const DECIMAL_EXP_MAX: i64 = 6111;
const DECIMAL_EXP_BIAS: i64 = 6176;
/// Upper bound on fraction digits of a valid positive-bracket number (at most ~1000).
const MAX_FRACTION_DIGITS: usize = 1100;
/// Bias of the decimal exponent in huge/tiny bodies.
const SCI_EXP_BIAS: i32 = 0x8000;

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------

/// Appends the self-delimiting encoding of `value` in `direction` to `out`.
pub fn encode_value(out: &mut Vec<u8>, value: &Bson, direction: Direction) {
    let start = out.len();
    encode_asc(out, value);
    if direction == Direction::Descending {
        invert(&mut out[start..]);
    }
}

/// Encodes a compound key: the concatenation of each component's encoding.
pub fn encode_key(values: &[(&Bson, Direction)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 12);
    for (value, direction) in values {
        encode_value(&mut out, value, *direction);
    }
    out
}

/// Primary-key encoding of a document `_id`: one ascending component.
pub fn encode_id(id: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_asc(&mut out, id);
    out
}

/// Decodes one component from the front of `bytes`; returns the value and the number of
/// bytes consumed. The value compares equal to the encoded one (see the module docs for
/// which BSON type is returned).
pub fn decode_value(bytes: &[u8], direction: Direction) -> Result<(Bson, usize), KeyDecodeError> {
    let mut reader = Reader {
        bytes,
        pos: 0,
        mask: direction.mask(),
    };
    let value = reader.value(0)?;
    Ok((value, reader.pos))
}

/// Decodes `directions.len()` consecutive components; returns them and the bytes consumed
/// (anything after them, e.g. a record id suffix, is left alone).
pub fn decode_key(
    bytes: &[u8],
    directions: &[Direction],
) -> Result<(Vec<Bson>, usize), KeyDecodeError> {
    let mut values = Vec::with_capacity(directions.len());
    let mut pos = 0;
    for direction in directions {
        let rest = bytes.get(pos..).unwrap_or_default();
        let (value, used) = decode_value(rest, *direction).map_err(|e| e.shifted(pos))?;
        values.push(value);
        pos += used;
    }
    Ok((values, pos))
}

#[cfg(test)] // The codec's tests check the encoding's brackets and decoding with these.
/// Decodes a key produced by [`encode_id`]; the whole slice must be one component.
pub(crate) fn decode_id(bytes: &[u8]) -> Result<Bson, KeyDecodeError> {
    let (value, used) = decode_value(bytes, Direction::Ascending)?;
    if used != bytes.len() {
        return Err(KeyDecodeError::new(used, "trailing bytes after _id key"));
    }
    Ok(value)
}

#[cfg(test)] // The codec's tests check the encoding's brackets and decoding with these.
/// Half-open byte range `[lo, hi)` containing exactly the encodings of all values of type
/// bracket `rank` in `direction` (as a single component; prepend any equal prefix of a
/// compound key). Ranks above [`RANK_MAX_KEY`] are treated as [`RANK_MAX_KEY`].
pub(crate) fn type_bracket_bounds(rank: u8, direction: Direction) -> (Vec<u8>, Vec<u8>) {
    let (first, last) = BRACKET_TAGS[usize::from(rank.min(RANK_MAX_KEY))];
    match direction {
        Direction::Ascending => (vec![first], vec![last + 1]),
        Direction::Descending => (vec![!last], vec![!first + 1]),
    }
}

/// Smallest byte string greater than every string starting with `prefix` (the exclusive
/// upper bound of a prefix scan, or the exclusive lower bound "after every key whose
/// leading components equal `prefix`"). `None` if no such string exists (`prefix` is
/// empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut out = prefix[..=keep].to_vec();
    out[keep] += 1;
    Some(out)
}

#[cfg(test)] // The codec's tests check the encoding's brackets and decoding with these.
/// Smallest byte string strictly greater than `key` (`key` followed by `0x00`).
pub(crate) fn successor(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.extend_from_slice(key);
    out.push(0);
    out
}

/// A key could not be decoded (corrupt or truncated bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDecodeError {
    offset: usize,
    reason: &'static str,
}

impl KeyDecodeError {
    fn new(offset: usize, reason: &'static str) -> Self {
        KeyDecodeError { offset, reason }
    }

    fn shifted(self, by: usize) -> Self {
        KeyDecodeError {
            offset: self.offset + by,
            reason: self.reason,
        }
    }

    /// Byte offset (within the slice passed to the decoder) where decoding failed.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Static description of the failure.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for KeyDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid index key at byte {}: {}",
            self.offset, self.reason
        )
    }
}

impl std::error::Error for KeyDecodeError {}

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

fn invert(bytes: &mut [u8]) {
    for b in bytes {
        *b = !*b;
    }
}

fn encode_asc(out: &mut Vec<u8>, value: &Bson) {
    match value {
        Bson::MinKey => out.push(tag::MIN_KEY),
        Bson::MaxKey => out.push(tag::MAX_KEY),
        Bson::Null => out.push(tag::NULL),
        Bson::Undefined => out.push(tag::UNDEFINED),
        Bson::Int32(v) => encode_i64(out, i64::from(*v)),
        Bson::Int64(v) => encode_i64(out, *v),
        Bson::Double(v) => encode_f64(out, *v),
        Bson::Decimal128(v) => encode_decimal(out, v),
        Bson::String(s) | Bson::Symbol(s) => {
            out.push(tag::STRING);
            push_escaped(out, s.as_bytes());
        }
        Bson::Document(doc) => {
            out.push(tag::OBJECT);
            encode_fields(out, doc);
        }
        Bson::Array(items) => {
            out.push(tag::ARRAY);
            for item in items {
                encode_asc(out, item);
            }
            out.push(END);
        }
        Bson::Binary(bin) => {
            out.push(tag::BINARY);
            push_length(out, bin.bytes.len());
            out.push(u8::from(bin.subtype));
            out.extend_from_slice(&bin.bytes);
        }
        Bson::ObjectId(oid) => {
            out.push(tag::OBJECT_ID);
            out.extend_from_slice(&oid.bytes());
        }
        Bson::Boolean(b) => out.push(if *b { tag::TRUE } else { tag::FALSE }),
        Bson::DateTime(dt) => {
            out.push(tag::DATE_TIME);
            let biased = (dt.timestamp_millis() as u64) ^ (1 << 63);
            out.extend_from_slice(&biased.to_be_bytes());
        }
        Bson::Timestamp(ts) => {
            out.push(tag::TIMESTAMP);
            out.extend_from_slice(&ts.time.to_be_bytes());
            out.extend_from_slice(&ts.increment.to_be_bytes());
        }
        Bson::RegularExpression(re) => {
            out.push(tag::REGEX);
            push_escaped(out, re.pattern.as_bytes());
            push_escaped(out, re.options.as_bytes());
        }
        Bson::DbPointer(_) => {
            out.push(tag::DB_POINTER);
            let (ns, id) = db_pointer_parts(value).unwrap_or_default();
            let len = u32::try_from(ns.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(ns.as_bytes());
            out.extend_from_slice(&id);
        }
        Bson::JavaScriptCode(code) => {
            out.push(tag::CODE);
            push_escaped(out, code.as_bytes());
        }
        Bson::JavaScriptCodeWithScope(cws) => {
            out.push(tag::CODE_WITH_SCOPE);
            push_escaped(out, cws.code.as_bytes());
            encode_fields(out, &cws.scope);
        }
    }
}

/// Object body: (rank + 1, escaped name, value) per field, then END. `rank + 1 >= 1`
/// keeps every field entry above END, so a prefix document sorts first.
fn encode_fields(out: &mut Vec<u8>, doc: &Document) {
    for (name, value) in doc {
        out.push(canonical_type_rank(value) + 1);
        push_escaped(out, name.as_bytes());
        encode_asc(out, value);
    }
    out.push(END);
}

fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut rest = bytes;
    while let Some(i) = rest.iter().position(|&b| b <= ESCAPE) {
        out.extend_from_slice(&rest[..i]);
        out.push(ESCAPE);
        out.push(rest[i] + 1);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.push(END);
}

/// Order-preserving length: one byte if < 255, else `FF` + u32 BE.
fn push_length(out: &mut Vec<u8>, len: usize) {
    match u8::try_from(len) {
        Ok(short) if short < 0xFF => out.push(short),
        _ => {
            out.push(0xFF);
            out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
}

/// Namespace and id of a DbPointer. bson 2.x keeps these fields private, so the value is
/// serialized into a one-field document and read back from the raw BSON bytes (allocates;
/// DbPointer is deprecated and rare).
fn db_pointer_parts(value: &Bson) -> Option<(String, [u8; 12])> {
    // i32 string length (incl. NUL), namespace bytes, NUL, 12-byte id.
    let body = tideway_base::bsonutil::value_bytes(value);
    let str_len = usize::try_from(i32::from_le_bytes(body.get(..4)?.try_into().ok()?)).ok()?;
    let ns_bytes = body.get(4..4 + str_len.checked_sub(1)?)?;
    let id = body.get(4 + str_len..4 + str_len + 12)?.try_into().ok()?;
    Some((String::from_utf8(ns_bytes.to_vec()).ok()?, id))
}

fn encode_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.push(tag::NUM_NAN);
    } else if v == 0.0 {
        out.push(tag::NUM_ZERO);
    } else if v.is_infinite() {
        out.push(if v > 0.0 {
            tag::NUM_POS_INF
        } else {
            tag::NUM_NEG_INF
        });
    } else {
        let negative = v < 0.0;
        out.push(if negative { tag::NUM_NEG } else { tag::NUM_POS });
        let body = out.len();
        out.extend_from_slice(&v.abs().to_bits().to_be_bytes());
        out.push(END);
        if negative {
            invert(&mut out[body..]);
        }
    }
}

fn encode_i64(out: &mut Vec<u8>, v: i64) {
    encode_u64_magnitude(out, v < 0, v.unsigned_abs());
}

/// Encodes `±mag` exactly; `mag < 2^64 < 2^1024` always lands in the zero or
/// positive/negative bracket.
fn encode_u64_magnitude(out: &mut Vec<u8>, negative: bool, mag: u64) {
    if mag == 0 {
        out.push(tag::NUM_ZERO);
        return;
    }
    out.push(if negative { tag::NUM_NEG } else { tag::NUM_POS });
    let body = out.len();
    let bits = 64 - mag.leading_zeros();
    if bits <= 53 {
        // Exactly representable: f = 0.
        out.extend_from_slice(&(mag as f64).to_bits().to_be_bytes());
        out.push(END);
    } else {
        let shift = bits - 53; // 1..=11
        let mantissa = mag >> shift;
        let rest = mag & ((1u64 << shift) - 1);
        let exponent = u64::from(bits - 1) + 1023;
        out.extend_from_slice(&((exponent << 52) | (mantissa & MANTISSA_MASK)).to_be_bytes());
        // f = rest / 2^shift = rest * 5^shift / 10^shift, digits zero-padded to `shift`.
        let mut scaled = rest * 5u64.pow(shift);
        let mut digits = [0u8; 11];
        let width = shift as usize;
        for d in digits[..width].iter_mut().rev() {
            *d = (scaled % 10) as u8;
            scaled /= 10;
        }
        push_digit_pairs(out, &digits[..width]);
    }
    if negative {
        invert(&mut out[body..]);
    }
}

/// Appends decimal digits (values 0..=9, most significant first) with trailing zeros
/// dropped, packed two per byte as `1 + 10*hi + lo`, then END.
fn push_digit_pairs(out: &mut Vec<u8>, digits: &[u8]) {
    let len = digits.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
    for pair in digits[..len].chunks(2) {
        let hi = pair[0];
        let lo = pair.get(1).copied().unwrap_or(0);
        out.push(1 + 10 * hi + lo);
    }
    out.push(END);
}

/// A Decimal128 decoded from its BID bits.
enum DecimalParts {
    NaN,
    Infinity {
        negative: bool,
    },
    /// `(-1)^negative × coefficient × 10^exponent`, coefficient < 10^34.
    Finite {
        negative: bool,
        coefficient: u128,
        exponent: i64,
    },
}

fn decimal_parts(d: &Decimal128) -> DecimalParts {
    let bits = u128::from_le_bytes(d.bytes());
    let negative = bits >> 127 == 1;
    match (bits >> 122) & 0x1F {
        0x1F => return DecimalParts::NaN,
        0x1E => return DecimalParts::Infinity { negative },
        _ => {}
    }
    let (biased, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        // Implied `100` coefficient prefix: >= 2^113 > 10^34 - 1, non-canonical, zero.
        (((bits >> 111) & 0x3FFF) as i64, 0)
    } else {
        (((bits >> 113) & 0x3FFF) as i64, bits & ((1u128 << 113) - 1))
    };
    let coefficient = if coefficient >= DECIMAL_COEFF_LIMIT {
        0
    } else {
        coefficient
    };
    DecimalParts::Finite {
        negative,
        coefficient,
        exponent: biased - DECIMAL_EXP_BIAS,
    }
}

fn encode_decimal(out: &mut Vec<u8>, d: &Decimal128) {
    let (negative, mut coefficient, mut exponent) = match decimal_parts(d) {
        DecimalParts::NaN => return out.push(tag::NUM_NAN),
        DecimalParts::Infinity { negative: true } => return out.push(tag::NUM_NEG_INF),
        DecimalParts::Infinity { negative: false } => return out.push(tag::NUM_POS_INF),
        DecimalParts::Finite {
            negative,
            coefficient,
            exponent,
        } => (negative, coefficient, exponent),
    };
    if coefficient == 0 {
        return out.push(tag::NUM_ZERO);
    }
    while coefficient % 10 == 0 {
        coefficient /= 10;
        exponent += 1;
    }
    // Fast path: integers below 2^64 share the int64 code path.
    if exponent >= 0 {
        let integer = u32::try_from(exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .and_then(|p| p.checked_mul(coefficient))
            .and_then(|v| u64::try_from(v).ok());
        if let Some(mag) = integer {
            return encode_u64_magnitude(out, negative, mag);
        }
    }
    let tag_at = out.len();
    out.push(0);
    let body = out.len();
    let class = match encode_decimal_magnitude(out, coefficient, exponent) {
        Some(class) => class,
        None => {
            // Unreachable: the big-integer capacity covers every canonical Decimal128.
            debug_assert!(false, "decimal key encoding overflowed");
            out.truncate(body);
            let class = if exponent < 0 {
                Magnitude::Tiny
            } else {
                Magnitude::Huge
            };
            push_sci(out, coefficient, exponent);
            class
        }
    };
    out[tag_at] = match (class, negative) {
        (Magnitude::Tiny, false) => tag::NUM_POS_TINY,
        (Magnitude::Normal, false) => tag::NUM_POS,
        (Magnitude::Huge, false) => tag::NUM_POS_HUGE,
        (Magnitude::Tiny, true) => tag::NUM_NEG_TINY,
        (Magnitude::Normal, true) => tag::NUM_NEG,
        (Magnitude::Huge, true) => tag::NUM_NEG_HUGE,
    };
    if negative {
        invert(&mut out[body..]);
    }
}

#[derive(Clone, Copy)]
enum Magnitude {
    Tiny,
    Normal,
    Huge,
}

fn decimal_digit_count(mut c: u128) -> i64 {
    let mut n = 0;
    while c != 0 {
        c /= 10;
        n += 1;
    }
    n
}

/// Appends the body of `c × 10^q` (c > 0, no trailing zeros) and returns its bracket.
/// `None` only if the fixed-size big integer overflowed (cannot happen for valid input).
fn encode_decimal_magnitude(out: &mut Vec<u8>, c: u128, q: i64) -> Option<Magnitude> {
    // 10^(adjusted-1) <= x < 10^adjusted.
    let adjusted = q + decimal_digit_count(c);
    if adjusted >= 310 {
        push_sci(out, c, q);
        return Some(Magnitude::Huge);
    }
    if adjusted <= -324 {
        push_sci(out, c, q);
        return Some(Magnitude::Tiny);
    }
    // x = num / 10^p exactly.
    let p = u32::try_from((-q).max(0)).ok()?;
    let mut num = Big::from_u128(c);
    num.mul_pow10(u32::try_from(q.max(0)).ok()?)?;
    let mut den = Big::from_u64(1);
    den.mul_pow10(p)?;
    // binade: 2^e2 <= x < 2^(e2+1)
    let k = i64::from(num.bit_len()) - i64::from(den.bit_len());
    let at_least_2k = if k >= 0 {
        let mut d = den;
        d.shl(u32::try_from(k).ok()?)?;
        num.cmp(&d) != Ordering::Less
    } else {
        let mut n = num.clone();
        n.shl(u32::try_from(-k).ok()?)?;
        n.cmp(&den) != Ordering::Less
    };
    let e2 = if at_least_2k { k } else { k - 1 };
    if e2 >= 1024 {
        push_sci(out, c, q);
        return Some(Magnitude::Huge);
    }
    if e2 < -1074 {
        push_sci(out, c, q);
        return Some(Magnitude::Tiny);
    }
    // ulp = 2^e; M = floor(x / 2^e) < 2^53; R / (2^a × 10^p) = fraction f.
    let e = (e2 - 52).max(-1074);
    let a = u32::try_from(e.max(0)).ok()?;
    if e < 0 {
        num.shl(u32::try_from(-e).ok()?)?;
    }
    let mut m = num.clone();
    m.shr(a);
    m.div_pow10(p);
    let mantissa = m.to_u64()?;
    let mut product = Big::from_u64(mantissa);
    product.mul_pow10(p)?;
    product.shl(a)?;
    num.sub_assign(&product)?;
    num.mul_pow5(a)?;
    let bits = if mantissa >= 1 << 52 {
        (u64::try_from(e2 + 1023).ok()? << 52) | (mantissa & MANTISSA_MASK)
    } else {
        mantissa
    };
    out.extend_from_slice(&bits.to_be_bytes());
    let width = usize::try_from(a + p).ok()?;
    push_big_fraction(out, &num, width)?;
    Some(Magnitude::Normal)
}

/// Huge/tiny body: biased adjusted exponent (u16 BE), significant digits, END.
fn push_sci(out: &mut Vec<u8>, c: u128, q: i64) {
    let n = decimal_digit_count(c);
    let adjusted = (q + n) as i32 + SCI_EXP_BIAS;
    out.extend_from_slice(&(adjusted.clamp(0, 0xFFFF) as u16).to_be_bytes());
    let mut digits = [0u8; 40];
    let mut rest = c;
    let len = n as usize;
    for d in digits[..len].iter_mut().rev() {
        *d = (rest % 10) as u8;
        rest /= 10;
    }
    push_digit_pairs(out, &digits[..len]);
}

/// Digits of `value`, zero-padded on the left to exactly `width`, as a digit-pair tail.
fn push_big_fraction(out: &mut Vec<u8>, value: &Big, width: usize) -> Option<()> {
    let mut digits = [0u8; MAX_FRACTION_DIGITS];
    let buf = digits.get_mut(..width)?;
    let mut v = value.clone();
    let mut pos = width;
    while !v.is_zero() {
        let mut chunk = v.divrem_small(1_000_000_000);
        for _ in 0..9 {
            let d = (chunk % 10) as u8;
            chunk /= 10;
            if pos == 0 {
                if d != 0 {
                    return None;
                }
                continue;
            }
            pos -= 1;
            buf[pos] = d;
        }
    }
    push_digit_pairs(out, buf);
    Some(())
}

// ---------------------------------------------------------------------------------------
// Fixed-capacity unsigned big integer (little-endian u32 limbs), no heap allocation.
// Capacity covers the largest intermediate of any valid key: ~4300 bits when decoding a
// fraction of a value near 2^1024.
// ---------------------------------------------------------------------------------------

const BIG_LIMBS: usize = 160;

#[derive(Clone)]
struct Big {
    limbs: [u32; BIG_LIMBS],
    /// Number of significant limbs; `limbs[len..]` are zero.
    len: usize,
}

impl Big {
    fn from_u128(mut v: u128) -> Self {
        let mut big = Big {
            limbs: [0; BIG_LIMBS],
            len: 0,
        };
        while v != 0 {
            big.limbs[big.len] = v as u32;
            big.len += 1;
            v >>= 32;
        }
        big
    }

    fn from_u64(v: u64) -> Self {
        Big::from_u128(u128::from(v))
    }

    fn is_zero(&self) -> bool {
        self.len == 0
    }

    fn trim(&mut self) {
        while self.len > 0 && self.limbs[self.len - 1] == 0 {
            self.len -= 1;
        }
    }

    fn bit_len(&self) -> u32 {
        match self.len.checked_sub(1) {
            None => 0,
            Some(top) => top as u32 * 32 + (32 - self.limbs[top].leading_zeros()),
        }
    }

    fn to_u64(&self) -> Option<u64> {
        match self.len {
            0 => Some(0),
            1 => Some(u64::from(self.limbs[0])),
            2 => Some(u64::from(self.limbs[0]) | (u64::from(self.limbs[1]) << 32)),
            _ => None,
        }
    }

    fn to_u128(&self) -> Option<u128> {
        if self.len > 4 {
            return None;
        }
        Some(
            self.limbs[..self.len]
                .iter()
                .rev()
                .fold(0u128, |acc, &l| (acc << 32) | u128::from(l)),
        )
    }

    fn mul_add_small(&mut self, factor: u32, addend: u32) -> Option<()> {
        let mut carry = u64::from(addend);
        for limb in &mut self.limbs[..self.len] {
            let t = u64::from(*limb) * u64::from(factor) + carry;
            *limb = t as u32;
            carry = t >> 32;
        }
        if carry != 0 {
            *self.limbs.get_mut(self.len)? = carry as u32;
            self.len += 1;
        }
        self.trim();
        Some(())
    }

    fn mul_pow10(&mut self, mut n: u32) -> Option<()> {
        while n >= 9 {
            self.mul_add_small(1_000_000_000, 0)?;
            n -= 9;
        }
        self.mul_add_small(10u32.pow(n), 0)
    }

    fn mul_pow5(&mut self, mut n: u32) -> Option<()> {
        while n >= 13 {
            self.mul_add_small(1_220_703_125, 0)?;
            n -= 13;
        }
        self.mul_add_small(5u32.pow(n), 0)
    }

    fn shl(&mut self, bits: u32) -> Option<()> {
        if self.is_zero() {
            return Some(());
        }
        let limbs = (bits / 32) as usize;
        let shift = bits % 32;
        let new_len = self.len + limbs + 1;
        if new_len > BIG_LIMBS {
            // Still fits if the top limb does not spill.
            if new_len - 1 > BIG_LIMBS
                || (shift != 0 && self.limbs[self.len - 1] >> (32 - shift) != 0)
            {
                return None;
            }
        }
        for i in (0..self.len).rev() {
            let v = u64::from(self.limbs[i]) << shift;
            if let Some(slot) = self.limbs.get_mut(i + limbs + 1) {
                *slot |= (v >> 32) as u32;
            }
            self.limbs[i + limbs] = v as u32;
            if limbs > 0 {
                self.limbs[i] = 0;
            }
        }
        self.len = new_len.min(BIG_LIMBS);
        self.trim();
        Some(())
    }

    fn shr(&mut self, bits: u32) {
        let limbs = (bits / 32) as usize;
        let shift = bits % 32;
        if limbs >= self.len {
            *self = Big::from_u64(0);
            return;
        }
        for i in 0..self.len {
            let lo = self.limbs.get(i + limbs).copied().unwrap_or(0);
            let hi = self.limbs.get(i + limbs + 1).copied().unwrap_or(0);
            let combined = (u64::from(hi) << 32) | u64::from(lo);
            self.limbs[i] = (combined >> shift) as u32;
        }
        self.trim();
    }

    /// Divides in place by `d > 0`, returns the remainder.
    fn divrem_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.limbs[..self.len].iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / u64::from(d)) as u32;
            rem = cur % u64::from(d);
        }
        self.trim();
        rem as u32
    }

    fn rem_small(&self, d: u32) -> u32 {
        self.limbs[..self.len]
            .iter()
            .rev()
            .fold(0u64, |rem, &l| ((rem << 32) | u64::from(l)) % u64::from(d)) as u32
    }

    fn div_pow10(&mut self, mut n: u32) {
        while n >= 9 && !self.is_zero() {
            self.divrem_small(1_000_000_000);
            n -= 9;
        }
        if n < 9 {
            self.divrem_small(10u32.pow(n));
        }
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.len.cmp(&other.len).then_with(|| {
            self.limbs[..self.len]
                .iter()
                .rev()
                .cmp(other.limbs[..other.len].iter().rev())
        })
    }

    /// `self -= other`; `None` if `other > self`.
    fn sub_assign(&mut self, other: &Big) -> Option<()> {
        if other.len > self.len {
            return None;
        }
        let mut borrow = 0i64;
        for i in 0..self.len {
            let rhs = if i < other.len { other.limbs[i] } else { 0 };
            let mut t = i64::from(self.limbs[i]) - i64::from(rhs) - borrow;
            borrow = 0;
            if t < 0 {
                t += 1 << 32;
                borrow = 1;
            }
            self.limbs[i] = t as u32;
        }
        if borrow != 0 {
            return None;
        }
        self.trim();
        Some(())
    }
}

// ---------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// XOR applied to every byte read (0xFF for descending / negative-number bodies).
    mask: u8,
}

impl Reader<'_> {
    fn err(&self, reason: &'static str) -> KeyDecodeError {
        KeyDecodeError::new(self.pos, reason)
    }

    fn byte(&mut self) -> Result<u8, KeyDecodeError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end of key"))?;
        self.pos += 1;
        Ok(b ^ self.mask)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], KeyDecodeError> {
        let mut out = [0u8; N];
        for b in &mut out {
            *b = self.byte()?;
        }
        Ok(out)
    }

    fn raw_bytes(&mut self, n: usize) -> Result<Vec<u8>, KeyDecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.err("unexpected end of key"))?;
        let out = self.bytes[self.pos..end]
            .iter()
            .map(|b| b ^ self.mask)
            .collect();
        self.pos = end;
        Ok(out)
    }

    fn escaped(&mut self) -> Result<Vec<u8>, KeyDecodeError> {
        let mut out = Vec::new();
        loop {
            match self.byte()? {
                END => return Ok(out),
                ESCAPE => match self.byte()? {
                    1 => out.push(0),
                    2 => out.push(1),
                    _ => return Err(self.err("invalid string escape")),
                },
                b => out.push(b),
            }
        }
    }

    fn string(&mut self) -> Result<String, KeyDecodeError> {
        let start = self.pos;
        String::from_utf8(self.escaped()?)
            .map_err(|_| KeyDecodeError::new(start, "string is not UTF-8"))
    }

    fn value(&mut self, depth: usize) -> Result<Bson, KeyDecodeError> {
        if depth > MAX_DECODE_DEPTH {
            return Err(self.err("key nested too deeply"));
        }
        let t = self.byte()?;
        Ok(match t {
            tag::MIN_KEY => Bson::MinKey,
            tag::MAX_KEY => Bson::MaxKey,
            tag::UNDEFINED => Bson::Undefined,
            tag::NULL => Bson::Null,
            tag::NUM_NAN..=tag::NUM_POS_INF => self.number(t)?,
            tag::STRING => Bson::String(self.string()?),
            tag::OBJECT => Bson::Document(self.fields(depth)?),
            tag::ARRAY => {
                let mut items = Vec::new();
                loop {
                    if self.peek()? == END {
                        self.pos += 1;
                        break;
                    }
                    items.push(self.value(depth + 1)?);
                }
                Bson::Array(items)
            }
            tag::BINARY => {
                let len = match self.byte()? {
                    0xFF => u32::from_be_bytes(self.array()?) as usize,
                    short => usize::from(short),
                };
                let subtype = BinarySubtype::from(self.byte()?);
                Bson::Binary(Binary {
                    subtype,
                    bytes: self.raw_bytes(len)?,
                })
            }
            tag::OBJECT_ID => Bson::ObjectId(ObjectId::from_bytes(self.array()?)),
            tag::FALSE => Bson::Boolean(false),
            tag::TRUE => Bson::Boolean(true),
            tag::DATE_TIME => {
                let biased = u64::from_be_bytes(self.array()?);
                Bson::DateTime(DateTime::from_millis((biased ^ (1 << 63)) as i64))
            }
            tag::TIMESTAMP => {
                let time = u32::from_be_bytes(self.array()?);
                let increment = u32::from_be_bytes(self.array()?);
                Bson::Timestamp(Timestamp { time, increment })
            }
            tag::REGEX => {
                let pattern = self.string()?;
                let options = self.string()?;
                Bson::RegularExpression(Regex { pattern, options })
            }
            tag::DB_POINTER => {
                let len = u32::from_be_bytes(self.array()?) as usize;
                let ns = self.raw_bytes(len)?;
                let id: [u8; 12] = self.array()?;
                self.db_pointer(&ns, &id)?
            }
            tag::CODE => Bson::JavaScriptCode(self.string()?),
            tag::CODE_WITH_SCOPE => {
                let code = self.string()?;
                let scope = self.fields(depth)?;
                Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
            }
            _ => return Err(KeyDecodeError::new(self.pos - 1, "unknown type tag")),
        })
    }

    fn peek(&self) -> Result<u8, KeyDecodeError> {
        self.bytes
            .get(self.pos)
            .map(|b| b ^ self.mask)
            .ok_or_else(|| self.err("unexpected end of key"))
    }

    fn fields(&mut self, depth: usize) -> Result<Document, KeyDecodeError> {
        let mut doc = Document::new();
        loop {
            let rank_byte = self.byte()?;
            if rank_byte == END {
                return Ok(doc);
            }
            let name = self.string()?;
            let at = self.pos;
            let value = self.value(depth + 1)?;
            if canonical_type_rank(&value) + 1 != rank_byte {
                return Err(KeyDecodeError::new(at, "field type bracket mismatch"));
            }
            if doc.insert(name, value).is_some() {
                return Err(KeyDecodeError::new(at, "duplicate field name"));
            }
        }
    }

    fn db_pointer(&self, ns: &[u8], id: &[u8; 12]) -> Result<Bson, KeyDecodeError> {
        let err = || self.err("invalid DbPointer");
        let str_len = i32::try_from(ns.len() + 1).map_err(|_| err())?;
        let mut raw = Vec::with_capacity(ns.len() + 28);
        raw.extend_from_slice(&0i32.to_le_bytes());
        raw.extend_from_slice(&[0x0C, 0x00]);
        raw.extend_from_slice(&str_len.to_le_bytes());
        raw.extend_from_slice(ns);
        raw.push(0);
        raw.extend_from_slice(id);
        raw.push(0);
        let total = i32::try_from(raw.len()).map_err(|_| err())?;
        raw[..4].copy_from_slice(&total.to_le_bytes());
        let doc = Document::from_reader(&raw[..]).map_err(|_| err())?;
        doc.get("").cloned().ok_or_else(err)
    }

    fn number(&mut self, t: u8) -> Result<Bson, KeyDecodeError> {
        let negative = t < tag::NUM_ZERO;
        let value = match t {
            tag::NUM_NAN => return Ok(Bson::Double(f64::NAN)),
            tag::NUM_NEG_INF => return Ok(Bson::Double(f64::NEG_INFINITY)),
            tag::NUM_POS_INF => return Ok(Bson::Double(f64::INFINITY)),
            tag::NUM_ZERO => return Ok(Bson::Int32(0)),
            _ => {
                let saved = self.mask;
                if negative {
                    self.mask ^= 0xFF;
                }
                let result = if t == tag::NUM_NEG || t == tag::NUM_POS {
                    self.normal_magnitude(negative)
                } else {
                    self.sci_magnitude(negative)
                };
                self.mask = saved;
                result?
            }
        };
        Ok(value)
    }

    /// Reads a digit-pair tail into `buf`; returns the digit count (trailing zeros removed).
    fn digits(&mut self, buf: &mut [u8; MAX_FRACTION_DIGITS]) -> Result<usize, KeyDecodeError> {
        let mut n = 0;
        loop {
            let b = self.byte()?;
            if b == END {
                break;
            }
            if b > 100 || n + 2 > MAX_FRACTION_DIGITS {
                return Err(self.err("invalid number digits"));
            }
            buf[n] = (b - 1) / 10;
            buf[n + 1] = (b - 1) % 10;
            n += 2;
        }
        while n > 0 && buf[n - 1] == 0 {
            n -= 1;
        }
        Ok(n)
    }

    fn normal_magnitude(&mut self, negative: bool) -> Result<Bson, KeyDecodeError> {
        let start = self.pos;
        let bits = u64::from_be_bytes(self.array()?);
        let bad = |reason| KeyDecodeError::new(start, reason);
        let double = f64::from_bits(bits);
        if !double.is_finite() || double == 0.0 || double.is_sign_negative() {
            return Err(bad("invalid number"));
        }
        if self.peek()? == END {
            // f = 0: the value is the double itself.
            self.pos += 1;
            return Ok(number_from_f64(if negative { -double } else { double }));
        }
        let mut digits = [0u8; MAX_FRACTION_DIGITS];
        let n = self.digits(&mut digits)?;
        if n == 0 {
            return Err(bad("non-canonical number tail"));
        }
        // |x| = (M + F / 10^n) × 2^e = (M × 10^n + F) × 2^e / 10^n
        let (mantissa, e) = if bits >> 52 == 0 {
            (bits, -1074i64)
        } else {
            (
                (bits & MANTISSA_MASK) | (1 << 52),
                (bits >> 52) as i64 - 1075,
            )
        };
        let overflow = || bad("number out of range");
        let mut big = Big::from_u64(mantissa);
        for &d in &digits[..n] {
            big.mul_add_small(10, u32::from(d)).ok_or_else(overflow)?;
        }
        let mut q = -(n as i64);
        if e >= 0 {
            big.shl(e as u32).ok_or_else(overflow)?;
        } else {
            big.mul_pow5((-e) as u32).ok_or_else(overflow)?;
            q += e;
        }
        while big.rem_small(1_000_000_000) == 0 && !big.is_zero() {
            big.divrem_small(1_000_000_000);
            q += 9;
        }
        while big.rem_small(10) == 0 && !big.is_zero() {
            big.divrem_small(10);
            q += 1;
        }
        let coefficient = big.to_u128().ok_or_else(overflow)?;
        exact_number(negative, coefficient, q).ok_or_else(overflow)
    }

    fn sci_magnitude(&mut self, negative: bool) -> Result<Bson, KeyDecodeError> {
        let start = self.pos;
        let adjusted = i64::from(u16::from_be_bytes(self.array()?)) - i64::from(SCI_EXP_BIAS);
        let mut digits = [0u8; MAX_FRACTION_DIGITS];
        let n = self.digits(&mut digits)?;
        let bad = || KeyDecodeError::new(start, "invalid decimal");
        if n == 0 || n > 34 || digits[0] == 0 {
            return Err(bad());
        }
        let coefficient = digits[..n]
            .iter()
            .fold(0u128, |acc, &d| acc * 10 + u128::from(d));
        let d = pack_decimal(negative, coefficient, adjusted - n as i64).ok_or_else(bad)?;
        Ok(Bson::Decimal128(d))
    }
}

/// `±c × 10^q` as Int32/Int64 when integral and in range, else Decimal128.
fn exact_number(negative: bool, c: u128, q: i64) -> Option<Bson> {
    if q >= 0 {
        let integer = u32::try_from(q)
            .ok()
            .and_then(|q| 10u128.checked_pow(q))
            .and_then(|p| p.checked_mul(c));
        if let Some(mag) = integer {
            let signed = if negative {
                0i128.checked_sub(i128::try_from(mag).ok()?)
            } else {
                i128::try_from(mag).ok()
            };
            if let Some(v) = signed.and_then(|v| i64::try_from(v).ok()) {
                return Some(match i32::try_from(v) {
                    Ok(small) => Bson::Int32(small),
                    Err(_) => Bson::Int64(v),
                });
            }
        }
    }
    pack_decimal(negative, c, q).map(Bson::Decimal128)
}

fn number_from_f64(v: f64) -> Bson {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if v.fract() == 0.0 {
        if v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX) {
            return Bson::Int32(v as i32);
        }
        if (-TWO_63..TWO_63).contains(&v) {
            return Bson::Int64(v as i64);
        }
    }
    Bson::Double(v)
}

/// BID-encodes `±c × 10^q`, re-padding the coefficient if `q` is above the maximum exponent.
fn pack_decimal(negative: bool, mut c: u128, mut q: i64) -> Option<Decimal128> {
    if c >= DECIMAL_COEFF_LIMIT {
        return None;
    }
    while q > DECIMAL_EXP_MAX && c != 0 && c * 10 < DECIMAL_COEFF_LIMIT {
        c *= 10;
        q -= 1;
    }
    if c == 0 {
        q = 0;
    }
    if !(DECIMAL_EXP_MIN..=DECIMAL_EXP_MAX).contains(&q) {
        return None;
    }
    let bits = (u128::from(negative) << 127) | (((q + DECIMAL_EXP_BIAS) as u128) << 113) | c;
    Some(Decimal128::from_bytes(bits.to_le_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use std::str::FromStr;

    // ---- helpers -------------------------------------------------------------------

    fn enc(v: &Bson) -> Vec<u8> {
        encode_id(v)
    }

    fn enc_dir(v: &Bson, d: Direction) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value(&mut out, v, d);
        out
    }

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).expect("valid decimal literal"))
    }

    fn oid(n: u8) -> Bson {
        Bson::ObjectId(ObjectId::from_bytes([n; 12]))
    }

    fn db_pointer(ns: &str, id: [u8; 12]) -> Bson {
        let r = Reader {
            bytes: &[],
            pos: 0,
            mask: 0,
        };
        r.db_pointer(ns.as_bytes(), &id).expect("valid db pointer")
    }

    use tideway_base::rng::SplitMix64 as Rng;

    // ---- reference comparator (independent of the encoder) ----------------------------

    /// Exact numeric value: NaN < -inf < finite < +inf. Finite = sign and a normalized
    /// decimal `0.d1d2..dn × 10^exp` (no trailing zeros; empty digits = zero).
    #[derive(Debug, Clone)]
    enum RefNum {
        NaN,
        NegInf,
        Finite {
            neg: bool,
            digits: Vec<u8>,
            exp: i64,
        },
        PosInf,
    }

    fn ref_finite(neg: bool, mut digits: Vec<u8>, exp_of_last: i64) -> RefNum {
        // value = digits (integer) × 10^exp_of_last
        while digits.first() == Some(&0) {
            digits.remove(0);
        }
        let exp = exp_of_last + digits.len() as i64;
        while digits.last() == Some(&0) {
            digits.pop();
        }
        let neg = neg && !digits.is_empty();
        RefNum::Finite { neg, digits, exp }
    }

    fn digits_of(mut v: u128) -> Vec<u8> {
        let mut d = Vec::new();
        while v > 0 {
            d.push((v % 10) as u8);
            v /= 10;
        }
        d.reverse();
        d
    }

    fn mul_digits(digits: &mut Vec<u8>, m: u8) {
        let mut carry = 0u32;
        for d in digits.iter_mut().rev() {
            let t = u32::from(*d) * u32::from(m) + carry;
            *d = (t % 10) as u8;
            carry = t / 10;
        }
        while carry > 0 {
            digits.insert(0, (carry % 10) as u8);
            carry /= 10;
        }
    }

    fn ref_num(v: &Bson) -> RefNum {
        use std::cell::RefCell;
        use std::collections::HashMap;
        thread_local! {
            static CACHE: RefCell<HashMap<(u8, u128), RefNum>> = RefCell::new(HashMap::new());
        }
        let key = match v {
            Bson::Int32(i) => (0, *i as u128),
            Bson::Int64(i) => (1, *i as u128),
            Bson::Double(d) => (2, u128::from(d.to_bits())),
            Bson::Decimal128(d) => (3, u128::from_le_bytes(d.bytes())),
            _ => unreachable!("not a number"),
        };
        if let Some(hit) = CACHE.with(|c| c.borrow().get(&key).cloned()) {
            return hit;
        }
        let r = ref_num_uncached(v);
        CACHE.with(|c| c.borrow_mut().insert(key, r.clone()));
        r
    }

    fn ref_num_uncached(v: &Bson) -> RefNum {
        match v {
            Bson::Int32(i) => ref_finite(*i < 0, digits_of(i.unsigned_abs() as u128), 0),
            Bson::Int64(i) => ref_finite(*i < 0, digits_of(i.unsigned_abs() as u128), 0),
            Bson::Double(d) => {
                if d.is_nan() {
                    return RefNum::NaN;
                }
                if d.is_infinite() {
                    return if *d > 0.0 {
                        RefNum::PosInf
                    } else {
                        RefNum::NegInf
                    };
                }
                let bits = d.to_bits();
                let raw_exp = ((bits >> 52) & 0x7FF) as i64;
                let frac = bits & ((1 << 52) - 1);
                let (m, e) = if raw_exp == 0 {
                    (frac, -1074)
                } else {
                    (frac | (1 << 52), raw_exp - 1075)
                };
                let mut digits = digits_of(m as u128);
                let mut exp10 = 0;
                if e > 0 {
                    for _ in 0..e {
                        mul_digits(&mut digits, 2);
                    }
                } else {
                    for _ in 0..-e {
                        mul_digits(&mut digits, 5);
                    }
                    exp10 = e;
                }
                ref_finite(*d < 0.0, digits, exp10)
            }
            Bson::Decimal128(d) => {
                // Parse bson's own string form: independent of the encoder's BID parsing.
                let s = d.to_string();
                let (neg, s) = match s.strip_prefix('-') {
                    Some(rest) => (true, rest),
                    None => (false, s.as_str()),
                };
                match s {
                    "NaN" => return RefNum::NaN,
                    "Infinity" => return if neg { RefNum::NegInf } else { RefNum::PosInf },
                    _ => {}
                }
                let (mant, exp) = match s.split_once('E') {
                    Some((m, e)) => (m, e.parse::<i64>().expect("exponent")),
                    None => (s, 0),
                };
                let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
                let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
                ref_finite(neg, digits, exp - frac.len() as i64)
            }
            _ => unreachable!("not a number"),
        }
    }

    fn ref_num_cmp(a: &RefNum, b: &RefNum) -> Ordering {
        fn class(n: &RefNum) -> i32 {
            match n {
                RefNum::NaN => 0,
                RefNum::NegInf => 1,
                RefNum::Finite { neg: true, .. } => 2,
                RefNum::Finite { digits, .. } if digits.is_empty() => 3,
                RefNum::Finite { .. } => 4,
                RefNum::PosInf => 5,
            }
        }
        let (ca, cb) = (class(a), class(b));
        if ca != cb {
            return ca.cmp(&cb);
        }
        match (a, b) {
            (
                RefNum::Finite {
                    neg,
                    digits: da,
                    exp: ea,
                },
                RefNum::Finite {
                    digits: db,
                    exp: eb,
                    ..
                },
            ) if !da.is_empty() => {
                let mag = ea.cmp(eb).then_with(|| da.cmp(db));
                if *neg {
                    mag.reverse()
                } else {
                    mag
                }
            }
            _ => Ordering::Equal,
        }
    }

    /// mongod's `canonicalizeBSONType` (MinKey -1, Undefined 0, Null 5, numbers 10, ...,
    /// MaxKey 127), shifted by one; independent of the encoder's dense `RANK_*` numbering.
    fn ref_rank(v: &Bson) -> u8 {
        match v {
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

    fn ref_doc_cmp(a: &Document, b: &Document) -> Ordering {
        for ((ka, va), (kb, vb)) in a.iter().zip(b.iter()) {
            let c = ref_rank(va)
                .cmp(&ref_rank(vb))
                .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                .then_with(|| ref_cmp(va, vb));
            if c != Ordering::Equal {
                return c;
            }
        }
        a.len().cmp(&b.len())
    }

    fn ref_cmp(a: &Bson, b: &Bson) -> Ordering {
        let (ra, rb) = (ref_rank(a), ref_rank(b));
        if ra != rb {
            return ra.cmp(&rb);
        }
        let str_of = |v: &Bson| match v {
            Bson::String(s) | Bson::Symbol(s) => s.as_bytes().to_vec(),
            _ => unreachable!(),
        };
        match (a, b) {
            _ if ra == 11 => ref_num_cmp(&ref_num(a), &ref_num(b)),
            _ if ra == 16 => str_of(a).cmp(&str_of(b)),
            (Bson::Document(x), Bson::Document(y)) => ref_doc_cmp(x, y),
            (Bson::Array(x), Bson::Array(y)) => {
                for (p, q) in x.iter().zip(y.iter()) {
                    let c = ref_cmp(p, q);
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                x.len().cmp(&y.len())
            }
            (Bson::Binary(x), Bson::Binary(y)) => x
                .bytes
                .len()
                .cmp(&y.bytes.len())
                .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
                .then_with(|| x.bytes.cmp(&y.bytes)),
            (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
            (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
            (Bson::DateTime(x), Bson::DateTime(y)) => {
                x.timestamp_millis().cmp(&y.timestamp_millis())
            }
            (Bson::Timestamp(x), Bson::Timestamp(y)) => {
                (x.time, x.increment).cmp(&(y.time, y.increment))
            }
            (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
                .pattern
                .as_bytes()
                .cmp(y.pattern.as_bytes())
                .then_with(|| x.options.as_bytes().cmp(y.options.as_bytes())),
            (Bson::DbPointer(_), Bson::DbPointer(_)) => {
                let (nx, ix) = db_pointer_parts(a).expect("parts");
                let (ny, iy) = db_pointer_parts(b).expect("parts");
                nx.len()
                    .cmp(&ny.len())
                    .then_with(|| nx.cmp(&ny))
                    .then_with(|| ix.cmp(&iy))
            }
            (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
            (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
                .code
                .as_bytes()
                .cmp(y.code.as_bytes())
                .then_with(|| ref_doc_cmp(&x.scope, &y.scope)),
            _ => Ordering::Equal, // MinKey, MaxKey, Null, Undefined: one value each
        }
    }

    // ---- value generators --------------------------------------------------------------

    fn special_numbers() -> Vec<Bson> {
        let two53 = 1i64 << 53;
        let mut v = vec![
            Bson::Int32(0),
            Bson::Int32(1),
            Bson::Int32(-1),
            Bson::Int32(i32::MAX),
            Bson::Int32(i32::MIN),
            Bson::Int64(0),
            Bson::Int64(1),
            Bson::Int64(i64::MAX),
            Bson::Int64(i64::MIN),
            Bson::Int64(i64::MAX - 1),
            Bson::Int64(i64::MIN + 1),
            Bson::Int64(two53),
            Bson::Int64(two53 + 1),
            Bson::Int64(two53 - 1),
            Bson::Int64(-two53 - 1),
            Bson::Int64(-two53),
            Bson::Int64((1 << 62) + 1),
            Bson::Double(0.0),
            Bson::Double(-0.0),
            Bson::Double(1.0),
            Bson::Double(-1.0),
            Bson::Double(1.5),
            Bson::Double(0.1),
            Bson::Double(-0.1),
            Bson::Double(f64::NAN),
            Bson::Double(-f64::NAN),
            Bson::Double(f64::INFINITY),
            Bson::Double(f64::NEG_INFINITY),
            Bson::Double(f64::MAX),
            Bson::Double(-f64::MAX),
            Bson::Double(f64::MIN_POSITIVE),
            Bson::Double(f64::from_bits(1)),
            Bson::Double(-f64::from_bits(1)),
            Bson::Double(f64::from_bits(2)),
            Bson::Double(9.223372036854776e18),
            Bson::Double(-9.223372036854776e18),
            Bson::Double(18446744073709551616.0),
            Bson::Double(two53 as f64),
            Bson::Double(two53 as f64 + 2.0),
            Bson::Double(f64::from(i32::MAX) + 0.5),
            Bson::Double(1e300),
            Bson::Double(1e-300),
        ];
        for s in [
            "1",
            "1.0",
            "-1",
            "1.5",
            "1.50",
            "0.1",
            "-0.1",
            "-1E+100",
            "1E+100",
            "0E-6176",
            "-0E+6111",
            "0",
            "NaN",
            "-NaN",
            "Infinity",
            "-Infinity",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "9007199254740993",
            "9.007199254740993E+15",
            "1E+30",
            "1E+308",
            "1.797693134862315708145274237317043E+308",
            "1.797693134862315708145274237317044E+308",
            "1.797693134862315807937289714053034E+308",
            "1E+309",
            // 2^1024 = 1.797693134862315907729305190789024733...E+308 (huge bracket edge)
            "1.797693134862315907729305190789024E+308",
            "1.797693134862315907729305190789025E+308",
            "-1.797693134862315907729305190789025E+308",
            "1E+6144",
            "9.999999999999999999999999999999999E+6144",
            "-9.999999999999999999999999999999999E+6144",
            "1E-6176",
            "-1E-6176",
            "4.940656458412465441765687928682213E-324",
            "4.940656458412465441765687928682214E-324",
            "4.940656458412465441765687928682212E-324",
            "1E-323",
            "1E-324",
            "2.225073858507201E-308",
            "0.5",
            "1.25",
            "0.1000000000000000055511151231257827",
            "1152921504606846977",
            "3.14159",
            "-3.14159",
            "1234567890123456789012345678901234",
            "1.234567890123456789012345678901234E-5",
        ] {
            v.push(dec(s));
        }
        v
    }

    fn random_number(rng: &mut Rng, cheap: bool) -> Bson {
        match rng.below(if cheap { 6 } else { 9 }) {
            0 => Bson::Int32(rng.next_u64() as i32 >> rng.below(32)),
            1 => Bson::Int64(rng.next_u64() as i64 >> rng.below(64)),
            2 => Bson::Double((rng.next_u64() as i64 >> rng.below(64)) as f64),
            3 => Bson::Double((rng.below(2000) as f64 - 1000.0) / 8.0),
            4 => {
                // Decimal equal to an int64.
                let i = rng.next_u64() as i64 >> rng.below(64);
                let z = rng.below(4) as usize;
                dec(&format!("{}{}E-{}", i, "0".repeat(z), z))
            }
            5 => {
                let c = rng.next_u64() % 100_000;
                let e = rng.below(12) as i64 - 6;
                let s = if rng.below(2) == 0 { "" } else { "-" };
                dec(&format!("{s}{c}E{e}"))
            }
            6 => loop {
                let d = f64::from_bits(rng.next_u64());
                if !d.is_nan() || rng.below(20) == 0 {
                    return Bson::Double(d);
                }
            },
            7 => {
                // Random decimal over the whole range.
                let digits = 1 + rng.below(34) as u32;
                let c = (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()))
                    % 10u128.pow(digits);
                let e = match rng.below(4) {
                    0 => rng.below(12288) as i64 - 6176,
                    1 => rng.below(60) as i64 - 30,
                    2 => rng.below(40) as i64 + 290,
                    _ => -(rng.below(60) as i64) - 300,
                };
                let s = if rng.below(2) == 0 { "" } else { "-" };
                dec(&format!("{s}{c}E{e}"))
            }
            _ => {
                // Decimal equal to a double whose exact expansion fits in 34 digits.
                let d = (rng.next_u64() >> rng.below(64)) as f64 / (1u64 << rng.below(40)) as f64;
                let r = ref_num(&Bson::Double(d));
                match r {
                    RefNum::Finite { digits, exp, .. } if digits.len() <= 34 => {
                        let s: String = digits.iter().map(|d| (b'0' + d) as char).collect();
                        let s = if s.is_empty() { "0".to_string() } else { s };
                        let q = exp - digits.len() as i64;
                        dec(&format!("{s}E{q}"))
                    }
                    _ => Bson::Double(d),
                }
            }
        }
    }

    fn random_string(rng: &mut Rng) -> String {
        let alphabet = [
            "",
            "a",
            "b",
            "\0",
            "\u{1}",
            "\u{2}",
            "é",
            "\u{7f}",
            "aa",
            "\u{10FFFF}",
        ];
        (0..rng.below(4)).map(|_| *rng.pick(&alphabet)).collect()
    }

    fn random_value(rng: &mut Rng, depth: u32) -> Bson {
        let kinds = if depth >= 3 { 16 } else { 18 };
        match rng.below(kinds) {
            0 => Bson::MinKey,
            1 => Bson::MaxKey,
            2 => Bson::Null,
            3 => Bson::Undefined,
            4 | 5 => random_number(rng, depth > 0),
            6 => Bson::String(random_string(rng)),
            7 => Bson::Symbol(random_string(rng)),
            8 => Bson::Binary(Binary {
                subtype: BinarySubtype::from(*rng.pick(&[0u8, 4, 0x80])),
                bytes: (0..*rng.pick(&[0u64, 1, 2, 16, 254, 255, 300]))
                    .map(|_| rng.below(3) as u8)
                    .collect(),
            }),
            9 => Bson::ObjectId(ObjectId::from_bytes([rng.below(3) as u8; 12])),
            10 => Bson::Boolean(rng.below(2) == 0),
            11 => Bson::DateTime(DateTime::from_millis(
                rng.next_u64() as i64 >> rng.below(64),
            )),
            12 => Bson::Timestamp(Timestamp {
                time: rng.below(3) as u32 * 0x7FFF_FFFF,
                increment: *rng.pick(&[0, 1, 0x8000_0001, u32::MAX]),
            }),
            13 => Bson::RegularExpression(Regex {
                pattern: random_string(rng),
                options: rng.pick(&["", "i", "im", "\0"]).to_string(),
            }),
            14 => db_pointer(
                rng.pick::<&str>(&["", "a", "b", "ab"]),
                [rng.below(2) as u8; 12],
            ),
            15 => {
                if rng.below(2) == 0 {
                    Bson::JavaScriptCode(random_string(rng))
                } else {
                    Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                        code: random_string(rng),
                        scope: random_doc(rng, depth + 1),
                    })
                }
            }
            16 => Bson::Document(random_doc(rng, depth + 1)),
            _ => Bson::Array(
                (0..rng.below(4))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
        }
    }

    fn random_doc(rng: &mut Rng, depth: u32) -> Document {
        let mut d = Document::new();
        for _ in 0..rng.below(4) {
            let name = rng.pick(&["", "a", "b", "a\u{1}", "ab"]).to_string();
            d.insert(name, random_value(rng, depth.max(2)));
        }
        d
    }

    fn check_order(a: &Bson, b: &Bson, ea: &[u8], eb: &[u8]) {
        let expect = ref_cmp(a, b);
        assert_eq!(
            ea.cmp(eb),
            expect,
            "order of {a:?} vs {b:?}: {ea:02x?} vs {eb:02x?}"
        );
    }

    fn check_round_trip(v: &Bson) {
        for dir in [Direction::Ascending, Direction::Descending] {
            let e = enc_dir(v, dir);
            let (back, used) = decode_value(&e, dir).unwrap_or_else(|err| panic!("{v:?}: {err}"));
            assert_eq!(used, e.len(), "{v:?}");
            assert_eq!(
                ref_cmp(v, &back),
                Ordering::Equal,
                "{v:?} decoded as {back:?}"
            );
            assert_eq!(
                enc_dir(&back, dir),
                e,
                "{v:?} re-encodes differently as {back:?}"
            );
        }
    }

    // ---- tests -----------------------------------------------------------------------

    #[test]
    fn type_brackets_in_order() {
        let ordered = vec![
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Double(f64::NEG_INFINITY),
            dec("-1E+400"),
            Bson::Int32(-5),
            dec("-1E-400"),
            Bson::Int32(0),
            dec("1E-400"),
            Bson::Int64(7),
            dec("1E+400"),
            Bson::Double(f64::INFINITY),
            Bson::String(String::new()),
            Bson::String("z".into()),
            Bson::Document(Document::new()),
            Bson::Document(doc! {"a": 1}),
            Bson::Array(vec![]),
            Bson::Array(vec![Bson::MaxKey]),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![],
            }),
            oid(0),
            oid(255),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(i64::MIN)),
            Bson::DateTime(DateTime::from_millis(i64::MAX)),
            Bson::Timestamp(Timestamp {
                time: 0,
                increment: 0,
            }),
            Bson::RegularExpression(Regex {
                pattern: String::new(),
                options: String::new(),
            }),
            db_pointer("a", [0; 12]),
            Bson::JavaScriptCode(String::new()),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: String::new(),
                scope: Document::new(),
            }),
            Bson::MaxKey,
        ];
        for w in ordered.windows(2) {
            assert!(enc(&w[0]) < enc(&w[1]), "{:?} < {:?}", w[0], w[1]);
            assert!(enc_dir(&w[0], Direction::Descending) > enc_dir(&w[1], Direction::Descending));
        }
        // Dense ranks: contiguous 0..=RANK_MAX_KEY, ordered like mongod's canonical types.
        for w in ordered.windows(2) {
            let (ra, rb) = (canonical_type_rank(&w[0]), canonical_type_rank(&w[1]));
            assert!(
                rb == ra || rb == ra + 1,
                "{:?} {ra} → {:?} {rb}",
                w[0],
                w[1]
            );
            assert_eq!(ra.cmp(&rb), ref_rank(&w[0]).cmp(&ref_rank(&w[1])));
        }
        assert_eq!(canonical_type_rank(&ordered[0]), 0);
        assert_eq!(canonical_type_rank(&Bson::MaxKey), RANK_MAX_KEY);
        for v in &ordered {
            let rank = canonical_type_rank(v);
            for dir in [Direction::Ascending, Direction::Descending] {
                let (lo, hi) = type_bracket_bounds(rank, dir);
                let e = enc_dir(v, dir);
                assert!(lo <= e && e < hi, "{v:?} outside its bracket bounds");
                for other in ordered.iter().filter(|o| canonical_type_rank(o) != rank) {
                    let e = enc_dir(other, dir);
                    assert!(e < lo || e >= hi, "{other:?} inside bracket of {v:?}");
                }
            }
        }
    }

    #[test]
    fn undefined_is_its_own_bracket_between_min_key_and_null() {
        let ordered = [
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Double(f64::NEG_INFINITY),
            Bson::Int64(i64::MIN),
            Bson::Int32(0),
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(ref_cmp(a, b), i.cmp(&j), "reference {a:?} vs {b:?}");
                assert_eq!(enc(a).cmp(&enc(b)), i.cmp(&j), "{a:?} vs {b:?}");
                assert_eq!(
                    enc_dir(a, Direction::Descending).cmp(&enc_dir(b, Direction::Descending)),
                    j.cmp(&i),
                    "descending {a:?} vs {b:?}"
                );
            }
        }
        assert_eq!(enc(&Bson::Undefined), vec![tag::UNDEFINED]);
        const { assert!(tag::MIN_KEY < tag::UNDEFINED && tag::UNDEFINED < tag::NULL) };
        assert_eq!(canonical_type_rank(&Bson::Undefined), RANK_UNDEFINED);
        const { assert!(RANK_MIN_KEY + 1 == RANK_UNDEFINED && RANK_UNDEFINED + 1 == RANK_NULL) };
        assert_eq!(
            type_bracket_bounds(RANK_UNDEFINED, Direction::Ascending),
            (vec![tag::UNDEFINED], vec![tag::UNDEFINED + 1])
        );
        assert_eq!(
            type_bracket_bounds(RANK_UNDEFINED, Direction::Descending),
            (vec![!tag::UNDEFINED], vec![!tag::UNDEFINED + 1])
        );
        // Decoding keeps Undefined apart from Null, in both directions and nested.
        assert_eq!(decode_id(&enc(&Bson::Undefined)), Ok(Bson::Undefined));
        assert_eq!(decode_id(&enc(&Bson::Null)), Ok(Bson::Null));
        for v in [
            Bson::Undefined,
            Bson::Array(vec![Bson::Null, Bson::Undefined]),
            Bson::Document(doc! {"u": Bson::Undefined, "n": Bson::Null}),
        ] {
            for dir in [Direction::Ascending, Direction::Descending] {
                assert_eq!(
                    decode_value(&enc_dir(&v, dir), dir),
                    Ok((v.clone(), enc_dir(&v, dir).len()))
                );
            }
            check_round_trip(&v);
        }
        // A Null field-type byte with an Undefined value (or vice versa) is corrupt.
        let mut forged = enc(&Bson::Document(doc! {"a": Bson::Null}));
        let at = forged
            .iter()
            .rposition(|&b| b == tag::NULL)
            .expect("null tag");
        forged[at] = tag::UNDEFINED;
        assert!(decode_id(&forged).is_err());
    }

    #[test]
    fn documents_order_undefined_fields_below_null_fields() {
        // Field-type bytes (value bracket) compare before names, so
        // {a: MinKey} < {z: undefined} < {a: null}, as in `compare_documents_with`.
        let ordered = [
            doc! {},
            doc! {"a": Bson::MinKey},
            doc! {"z": Bson::Undefined},
            doc! {"a": Bson::Null},
            doc! {"a": Bson::Null, "b": Bson::Undefined},
            doc! {"a": Bson::Null, "b": Bson::Null},
            doc! {"a": 0},
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                let (a, b) = (Bson::Document(a.clone()), Bson::Document(b.clone()));
                assert_eq!(ref_cmp(&a, &b), i.cmp(&j), "reference {a:?} vs {b:?}");
                assert_eq!(enc(&a).cmp(&enc(&b)), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
        let arrays = [
            vec![Bson::MinKey],
            vec![Bson::Undefined],
            vec![Bson::Undefined, Bson::Undefined],
            vec![Bson::Undefined, Bson::Null],
            vec![Bson::Null],
        ];
        for w in arrays.windows(2) {
            let (a, b) = (Bson::Array(w[0].clone()), Bson::Array(w[1].clone()));
            assert_eq!(ref_cmp(&a, &b), Ordering::Less, "reference {a:?} < {b:?}");
            assert!(enc(&a) < enc(&b), "{a:?} < {b:?}");
        }
    }

    #[test]
    fn randomized_reference_keeps_undefined_and_null_apart() {
        // The randomized pool must exercise both values, and the reference must order them.
        let mut rng = Rng(0x5EED_0006);
        let pool: Vec<Bson> = (0..400).map(|_| random_value(&mut rng, 0)).collect();
        let nulls = pool.iter().filter(|v| matches!(v, Bson::Null)).count();
        let undefineds = pool.iter().filter(|v| matches!(v, Bson::Undefined)).count();
        assert!(nulls > 0 && undefineds > 0);
        for a in &pool {
            for b in [Bson::Undefined, Bson::Null] {
                check_order(a, &b, &enc(a), &enc(&b));
                check_order(&b, a, &enc(&b), &enc(a));
            }
        }
        assert_eq!(ref_cmp(&Bson::Undefined, &Bson::Null), Ordering::Less);
        assert_eq!(ref_cmp(&Bson::MinKey, &Bson::Undefined), Ordering::Less);
    }

    #[test]
    fn equal_numbers_encode_identically() {
        let groups: Vec<Vec<Bson>> = vec![
            vec![
                Bson::Int32(1),
                Bson::Int64(1),
                Bson::Double(1.0),
                dec("1"),
                dec("1.0"),
                dec("1.000000"),
                dec("0.1E+1"),
            ],
            vec![
                Bson::Int32(0),
                Bson::Int64(0),
                Bson::Double(0.0),
                Bson::Double(-0.0),
                dec("0"),
                dec("-0"),
                dec("0E-6176"),
                dec("0E+6111"),
            ],
            vec![
                Bson::Double(f64::NAN),
                Bson::Double(-f64::NAN),
                dec("NaN"),
                dec("-NaN"),
            ],
            vec![Bson::Double(1.5), dec("1.5"), dec("15E-1"), dec("1.500")],
            vec![
                Bson::Int64(i64::MAX),
                dec("9223372036854775807"),
                dec("9.223372036854775807000E+18"),
            ],
            vec![
                Bson::Int64(i64::MIN),
                Bson::Double(-9.223372036854776e18),
                dec("-9223372036854775808"),
            ],
            vec![Bson::Int64((1 << 53) + 1), dec("9007199254740993")],
            vec![
                Bson::Double(f64::INFINITY),
                dec("Infinity"),
                dec("+Infinity"),
            ],
            vec![Bson::Double(0.5), dec("0.5"), dec("5E-1")],
            vec![
                Bson::Double(2f64.powi(100)),
                dec("1267650600228229401496703205376"),
            ],
        ];
        for group in &groups {
            let first = enc(&group[0]);
            for v in group {
                assert_eq!(enc(v), first, "{v:?} vs {:?}", group[0]);
            }
        }
        // 1E+100 is not a double; 1E+100 and the double nearest to it differ.
        assert_ne!(enc(&Bson::Double(1e100)), enc(&dec("1E+100")));
        assert_ne!(enc(&Bson::Double(0.1)), enc(&dec("0.1")));
    }

    #[test]
    fn numbers_across_types() {
        let two53 = 1i64 << 53;
        let lt = |a: Bson, b: Bson| {
            assert!(enc(&a) < enc(&b), "{a:?} < {b:?}");
            assert_eq!(ref_cmp(&a, &b), Ordering::Less, "reference: {a:?} < {b:?}");
        };
        lt(
            Bson::Double(9.223372036854776e18 - 2048.0),
            Bson::Int64(i64::MAX),
        );
        lt(Bson::Int64(i64::MAX), Bson::Double(9.223372036854776e18));
        lt(
            Bson::Double(-9.223372036854776e18),
            Bson::Int64(i64::MIN + 1),
        );
        lt(Bson::Double(two53 as f64), Bson::Int64(two53 + 1));
        lt(Bson::Int64(two53 + 1), Bson::Double(two53 as f64 + 2.0));
        lt(Bson::Int64(-two53 - 1), Bson::Double(-(two53 as f64)));
        lt(Bson::Double(f64::NAN), Bson::Double(f64::NEG_INFINITY));
        lt(
            Bson::Double(f64::NEG_INFINITY),
            dec("-9.999999999999999999999999999999999E+6144"),
        );
        lt(
            dec("9.999999999999999999999999999999999E+6144"),
            Bson::Double(f64::INFINITY),
        );
        lt(
            Bson::Double(f64::MAX),
            dec("1.797693134862315708145274237317044E+308"),
        );
        lt(
            dec("1.797693134862315807937289714053034E+308"),
            dec("1E+309"),
        );
        lt(dec("1E-6176"), Bson::Double(f64::from_bits(1)));
        lt(Bson::Double(0.0), dec("1E-6176"));
        lt(Bson::Int32(1), dec("1.5"));
        lt(dec("1.5"), Bson::Double(1.5000000000000002));
        lt(dec("-1E+100"), Bson::Double(-1e99));
        lt(dec("0.1"), Bson::Double(0.1));
        lt(Bson::Double(0.09999999999999999), dec("0.1"));
        lt(Bson::Double(-0.1), dec("-0.1"));
        lt(dec("1E+100"), Bson::Double(1e100));
        lt(Bson::Int64(i64::MAX), dec("9223372036854775808"));
        lt(
            dec("9223372036854775808.5"),
            Bson::Double(9.223372036854778e18),
        );
        lt(Bson::Int32(-1), Bson::Double(-0.0));
        lt(Bson::Double(-0.0), Bson::Double(f64::from_bits(1)));
    }

    #[test]
    fn all_special_numbers_pairwise() {
        let values = special_numbers();
        let refs: Vec<RefNum> = values.iter().map(ref_num).collect();
        let encs: Vec<Vec<u8>> = values.iter().map(enc).collect();
        for i in 0..values.len() {
            for j in 0..values.len() {
                assert_eq!(
                    encs[i].cmp(&encs[j]),
                    ref_num_cmp(&refs[i], &refs[j]),
                    "{:?} vs {:?}",
                    values[i],
                    values[j]
                );
            }
            check_round_trip(&values[i]);
        }
    }

    #[test]
    fn randomized_numbers_against_reference() {
        let mut rng = Rng(0x5EED_0001);
        let mut values = special_numbers();
        while values.len() < 1200 {
            values.push(random_number(&mut rng, false));
        }
        let refs: Vec<RefNum> = values.iter().map(ref_num).collect();
        let encs: Vec<Vec<u8>> = values.iter().map(enc).collect();
        let mut equal_pairs = 0;
        for i in 0..values.len() {
            for j in 0..values.len() {
                let expect = ref_num_cmp(&refs[i], &refs[j]);
                equal_pairs += usize::from(expect == Ordering::Equal && i != j);
                assert_eq!(
                    encs[i].cmp(&encs[j]),
                    expect,
                    "{:?} vs {:?}",
                    values[i],
                    values[j]
                );
            }
        }
        assert!(
            equal_pairs > 100,
            "generator should produce cross-type equal numbers"
        );
        for v in &values {
            check_round_trip(v);
        }
    }

    #[test]
    fn strings_and_escapes() {
        let ordered = [
            "", "\0", "\0\0", "\0\u{1}", "\u{1}", "\u{1}\0", "\u{2}", "a", "a\0", "a\0b", "a\u{1}",
            "aa", "b", "é",
        ];
        for w in ordered.windows(2) {
            let a = Bson::String(w[0].into());
            let b = Bson::String(w[1].into());
            assert!(enc(&a) < enc(&b), "{:?} < {:?}", w[0], w[1]);
        }
        assert_eq!(
            enc(&Bson::String("x".into())),
            enc(&Bson::Symbol("x".into()))
        );
        assert_eq!(
            enc(&Bson::String("a\0".into())),
            vec![tag::STRING, b'a', 1, 1, 0]
        );
        for s in ordered {
            check_round_trip(&Bson::String(s.into()));
        }
    }

    #[test]
    fn nested_documents_and_arrays() {
        let ordered = vec![
            doc! {},
            doc! {"a": Bson::MinKey},
            doc! {"b": Bson::Null},
            doc! {"a": 1},
            doc! {"a": 1, "b": Bson::MinKey},
            doc! {"a": 1.5},
            doc! {"a": 2, "a2": 0},
            doc! {"b": 2},
            doc! {"a": "x"},
            doc! {"a": {"b": 1}},
            doc! {"a": {"b": 1, "c": 1}},
            doc! {"a": [1]},
            doc! {"a": [1, 2]},
            doc! {"a": [2]},
            doc! {"a": true},
        ];
        for w in ordered.windows(2) {
            let (a, b) = (Bson::Document(w[0].clone()), Bson::Document(w[1].clone()));
            assert_eq!(ref_cmp(&a, &b), Ordering::Less, "reference {a:?} < {b:?}");
            assert!(enc(&a) < enc(&b), "{a:?} < {b:?}");
        }
        let arrays = [
            vec![],
            vec![Bson::Null],
            vec![Bson::Int32(1)],
            vec![Bson::Int32(1), Bson::MinKey],
            vec![Bson::Double(1.0), Bson::Int32(1)],
            vec![Bson::Int32(2)],
            vec![Bson::Array(vec![])],
            vec![Bson::Array(vec![Bson::Int32(0)])],
        ];
        for w in arrays.windows(2) {
            let (a, b) = (Bson::Array(w[0].clone()), Bson::Array(w[1].clone()));
            assert!(enc(&a) < enc(&b), "{a:?} < {b:?}");
        }
        assert_eq!(
            enc(&Bson::Document(doc! {"a": 1, "b": [1.0, {"c": 2}]})),
            enc(&Bson::Document(doc! {"a": 1.0, "b": [1i64, {"c": 2.0}]}))
        );
        for d in &ordered {
            check_round_trip(&Bson::Document(d.clone()));
        }
    }

    #[test]
    fn binary_and_misc_types() {
        let bin = |subtype: u8, bytes: &[u8]| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::from(subtype),
                bytes: bytes.to_vec(),
            })
        };
        let ordered = [
            bin(0, &[]),
            bin(4, &[]),
            bin(0, &[9]),
            bin(4, &[0]),
            bin(0, &[0, 0]),
            bin(0, &[7; 254]),
            bin(0, &[0; 255]),
            bin(0, &[0; 300]),
        ];
        for w in ordered.windows(2) {
            assert!(enc(&w[0]) < enc(&w[1]), "{:?} < {:?}", w[0], w[1]);
        }
        let ts = |time, increment| Bson::Timestamp(Timestamp { time, increment });
        assert!(enc(&ts(1, u32::MAX)) < enc(&ts(2, 0)));
        assert!(enc(&ts(u32::MAX, 0)) > enc(&ts(1, 0)));
        let dt = |ms| Bson::DateTime(DateTime::from_millis(ms));
        assert!(enc(&dt(-1)) < enc(&dt(0)));
        assert!(enc(&dt(i64::MIN)) < enc(&dt(-1)));
        let re = |p: &str, o: &str| {
            Bson::RegularExpression(Regex {
                pattern: p.into(),
                options: o.into(),
            })
        };
        assert!(enc(&re("a", "x")) < enc(&re("a\0", "")));
        assert!(enc(&re("a", "")) < enc(&re("a", "i")));
        assert!(enc(&db_pointer("zz", [0; 12])) < enc(&db_pointer("aaa", [0; 12])));
        assert!(enc(&db_pointer("a", [1; 12])) < enc(&db_pointer("b", [0; 12])));
        for v in ordered.iter().chain(&[
            ts(5, 6),
            dt(-123),
            re("a\0b", "im"),
            db_pointer("db.coll", [3; 12]),
            Bson::JavaScriptCode("x\u{1}".into()),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "f".into(),
                scope: doc! {"x": 1, "y": [Bson::MaxKey]},
            }),
        ]) {
            check_round_trip(v);
        }
    }

    #[test]
    fn compound_keys_with_mixed_directions() {
        use Direction::{Ascending as A, Descending as D};
        let mut rng = Rng(0x5EED_0002);
        let pool: Vec<Bson> = (0..60).map(|_| random_value(&mut rng, 1)).collect();
        let dirs = [[A, A], [A, D], [D, A], [D, D]];
        for d in dirs {
            let mut keys = Vec::new();
            for _ in 0..300 {
                let a = rng.pick(&pool).clone();
                let b = rng.pick(&pool).clone();
                keys.push((encode_key(&[(&a, d[0]), (&b, d[1])]), a, b));
            }
            for (ka, a1, a2) in &keys {
                for (kb, b1, b2) in &keys {
                    let c1 = ref_cmp(a1, b1);
                    let c1 = if d[0] == D { c1.reverse() } else { c1 };
                    let c2 = ref_cmp(a2, b2);
                    let c2 = if d[1] == D { c2.reverse() } else { c2 };
                    assert_eq!(
                        ka.cmp(kb),
                        c1.then(c2),
                        "{a1:?},{a2:?} vs {b1:?},{b2:?} {d:?}"
                    );
                }
                let (back, used) = decode_key(ka, &d).expect("decodes");
                assert_eq!(used, ka.len());
                assert_eq!(ref_cmp(&back[0], a1), Ordering::Equal);
                assert_eq!(ref_cmp(&back[1], a2), Ordering::Equal);
            }
        }
        // Prefix scan: all keys whose first component equals a value.
        let one = Bson::Int32(1);
        let prefix = encode_key(&[(&one, D)]);
        let upper = prefix_successor(&prefix).expect("has successor");
        for second in [
            Bson::MinKey,
            Bson::MaxKey,
            Bson::String("\u{10FFFF}".into()),
        ] {
            for dir in [A, D] {
                let k = encode_key(&[(&Bson::Double(1.0), D), (&second, dir)]);
                assert!(prefix <= k && k < upper);
            }
        }
        let k2 = encode_key(&[(&Bson::Int32(0), D), (&Bson::MinKey, A)]);
        assert!(k2 >= upper);
    }

    #[test]
    fn randomized_values_against_reference() {
        let mut rng = Rng(0x5EED_0003);
        let mut pool: Vec<Bson> = (0..700).map(|_| random_value(&mut rng, 0)).collect();
        pool.extend(special_numbers().into_iter().take(40));
        let asc: Vec<Vec<u8>> = pool.iter().map(enc).collect();
        let desc: Vec<Vec<u8>> = pool
            .iter()
            .map(|v| enc_dir(v, Direction::Descending))
            .collect();
        for i in 0..pool.len() {
            for j in 0..pool.len() {
                check_order(&pool[i], &pool[j], &asc[i], &asc[j]);
                assert_eq!(desc[i].cmp(&desc[j]), asc[j].cmp(&asc[i]));
                // Prefix-freedom: no encoding is a proper prefix of another.
                if asc[i].len() < asc[j].len() {
                    assert!(
                        !asc[j].starts_with(&asc[i]),
                        "{:?} prefixes {:?}",
                        pool[i],
                        pool[j]
                    );
                }
            }
            check_round_trip(&pool[i]);
        }
    }

    #[test]
    fn decode_round_trips_exactly_for_non_numbers() {
        let mut rng = Rng(0x5EED_0004);
        for _ in 0..500 {
            let v = random_value(&mut rng, 0);
            let exact = !matches!(
                v,
                Bson::Symbol(_)
                    | Bson::Int32(_)
                    | Bson::Int64(_)
                    | Bson::Double(_)
                    | Bson::Decimal128(_)
                    | Bson::Document(_)
                    | Bson::Array(_)
                    | Bson::JavaScriptCodeWithScope(_)
            );
            if exact {
                assert_eq!(decode_id(&encode_id(&v)), Ok(v.clone()));
            }
        }
        let id = Bson::ObjectId(ObjectId::from_bytes(*b"0123456789ab"));
        assert_eq!(decode_id(&encode_id(&id)), Ok(id));
        let d = Bson::Document(doc! {"x": "s", "y": [oid(1), {"z": false}]});
        assert_eq!(decode_id(&encode_id(&d)), Ok(d));
    }

    #[test]
    fn decoded_number_types() {
        let back = |v: Bson| decode_id(&encode_id(&v)).expect("decodes");
        assert_eq!(back(Bson::Double(5.0)), Bson::Int32(5));
        assert_eq!(back(dec("-7.000")), Bson::Int32(-7));
        assert_eq!(back(Bson::Int64(1 << 40)), Bson::Int64(1 << 40));
        assert_eq!(back(Bson::Int64(i64::MIN)), Bson::Int64(i64::MIN));
        assert_eq!(back(Bson::Int64(i64::MAX)), Bson::Int64(i64::MAX));
        assert_eq!(back(Bson::Int64((1 << 53) + 1)), Bson::Int64((1 << 53) + 1));
        assert_eq!(back(Bson::Double(2.5)), Bson::Double(2.5));
        assert_eq!(back(Bson::Double(-0.0)), Bson::Int32(0));
        assert_eq!(back(dec("0.1")), dec("0.1"));
        assert_eq!(back(dec("-1E+100")), dec("-1E+100"));
        assert_eq!(back(dec("1E+6144")), dec("1E+6144"));
        assert_eq!(back(dec("1E-6176")), dec("1E-6176"));
        assert_eq!(
            back(dec("18446744073709551615")),
            dec("18446744073709551615")
        );
        assert!(matches!(back(Bson::Double(f64::NAN)), Bson::Double(d) if d.is_nan()));
    }

    #[test]
    fn encoded_sizes() {
        assert_eq!(enc(&Bson::Int32(42)).len(), 10);
        assert_eq!(enc(&Bson::Double(42.5)).len(), 10);
        assert_eq!(enc(&oid(1)).len(), 13);
        // 1023/1024 → 10 fraction digits → 5 bytes.
        assert_eq!(enc(&Bson::Int64(i64::MAX)).len(), 15);
        assert!(enc(&dec("1E+300")).len() < 600);
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let mut rng = Rng(0x5EED_0005);
        assert!(decode_value(&[], Direction::Ascending).is_err());
        assert!(decode_value(&[0x00], Direction::Ascending).is_err());
        assert!(decode_value(&[0xFF], Direction::Ascending).is_err());
        assert!(decode_value(&[tag::ARRAY; 100_000], Direction::Ascending).is_err());
        assert!(decode_id(&[tag::NULL, tag::NULL]).is_err());
        // Positive bracket with a huge digit tail.
        let mut long = vec![tag::NUM_POS];
        long.extend_from_slice(&f64::MAX.to_bits().to_be_bytes());
        long.extend(std::iter::repeat_n(100u8, 2000));
        long.push(0);
        assert!(decode_value(&long, Direction::Ascending).is_err());
        let mut pool: Vec<Vec<u8>> = special_numbers().iter().map(enc).collect();
        pool.extend((0..200).map(|_| enc(&random_value(&mut rng, 0))));
        for key in &pool {
            for cut in 0..key.len() {
                assert!(decode_value(&key[..cut], Direction::Ascending).is_err());
            }
            for _ in 0..20 {
                let mut k = key.clone();
                let i = rng.below(k.len() as u64) as usize;
                k[i] = rng.next_u64() as u8;
                for dir in [Direction::Ascending, Direction::Descending] {
                    let _ = decode_value(&k, dir);
                }
            }
        }
        for _ in 0..20_000 {
            let len = rng.below(24) as usize;
            let mut k: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if let Some(first) = k.first_mut() {
                *first = 0x10 + rng.below(0xE1) as u8;
            }
            let _ = decode_value(&k, Direction::Ascending);
        }
    }

    #[test]
    fn decode_key_leaves_suffix() {
        let a = Bson::String("k".into());
        let b = Bson::Int64(-3);
        let mut key = encode_key(&[(&a, Direction::Descending), (&b, Direction::Ascending)]);
        let len = key.len();
        key.extend_from_slice(&[0xAB, 0xCD]);
        let (values, used) =
            decode_key(&key, &[Direction::Descending, Direction::Ascending]).expect("decodes");
        assert_eq!(used, len);
        assert_eq!(values, vec![a, Bson::Int32(-3)]);
        let err = decode_key(
            &key[..len - 1],
            &[Direction::Descending, Direction::Ascending],
        );
        assert!(err.is_err_and(|e| e.offset() >= 3 && !e.to_string().is_empty()));
    }

    #[test]
    fn successor_helpers() {
        assert_eq!(prefix_successor(&[1, 2, 0xFF, 0xFF]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
        assert_eq!(successor(&[5]), vec![5, 0]);
        let k = enc(&Bson::String("a".into()));
        assert!(successor(&k) > k);
        assert!(successor(&k) < enc(&Bson::String("a\0".into())));
    }

    #[test]
    fn big_integer_basics() {
        let mut b = Big::from_u128(u128::MAX);
        b.shl(100).expect("fits");
        assert_eq!(b.bit_len(), 228);
        b.shr(100);
        assert_eq!(b.to_u128(), Some(u128::MAX));
        let mut p = Big::from_u64(1);
        p.mul_pow10(40).expect("fits");
        assert_eq!(p.rem_small(7), (0..40).fold(1u32, |acc, _| acc * 10 % 7));
        p.div_pow10(38);
        assert_eq!(p.to_u64(), Some(100));
        let mut huge = Big::from_u64(1);
        assert!(huge.shl(BIG_LIMBS as u32 * 32).is_none());
        assert!(huge.shl(BIG_LIMBS as u32 * 32 - 1).is_some());
        assert_eq!(huge.bit_len(), BIG_LIMBS as u32 * 32);
        let mut small = Big::from_u64(5);
        assert!(small.sub_assign(&Big::from_u64(6)).is_none());
    }
}
