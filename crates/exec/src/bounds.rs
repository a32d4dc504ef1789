//! Index bounds: for each field of an index, the set of key values a matching document can have
//! there ([`IntervalList`]), and the byte ranges and key filter that scan exactly those keys.
//!
//! Invariants:
//! - **Bounds are supersets.** Every document a filter matches has at least one index key inside
//!   the bounds built for it; documents outside are never needed. Execution re-checks every
//!   fetched document with the whole filter, so bounds may be loose but never tight.
//! - Interval lists are sorted by the index order of values (keycodec's ascending encoding),
//!   disjoint and made of non-empty intervals; every comparison is on encoded bytes, so bounds
//!   order values exactly as stored keys do.
//! - Predicates on one field are intersected only when the index is not multikey (or they sit
//!   in one `$elemMatch`, which constrains a single element); on a multikey index one
//!   predicate's bounds are used, as mongod does. Bounds on different fields of a compound index
//!   always combine: a compound key is the product of its fields' values.
//! - Predicates that can match a missing field (`null`, `$exists: false`, `$ne`, `$nin`) bound
//!   dotted paths not at all: a scalar met inside an array while a dotted path continues has
//!   no key (see `storage::indexkeys`), so such a document could be missed.
//!
//! Nothing here touches storage or decides between indexes.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use tideway_query::collation::Collation;
use tideway_query::filter::{CompareOp, Expr, Predicate, RegexMatcher, TypeSelector};
use tideway_query::keycodec::{self, Direction};
use tideway_query::numeric::Number;
use tideway_storage::{KeyPredicate, KeyRange};

/// Most byte ranges one scan is split into; past it, later fields filter keys instead.
const MAX_SCAN_RANGES: usize = 4096;

/// One end of an interval: a value and whether it belongs to the interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    pub value: Bson,
    pub inclusive: bool,
    /// Ascending key encoding of `value`.
    encoded: Vec<u8>,
}

impl Endpoint {
    pub fn new(value: Bson, inclusive: bool) -> Endpoint {
        let mut encoded = Vec::new();
        keycodec::encode_value(&mut encoded, &value, Direction::Ascending);
        Endpoint {
            value,
            inclusive,
            encoded,
        }
    }

    fn min_key() -> Endpoint {
        Endpoint::new(Bson::MinKey, true)
    }

    fn max_key() -> Endpoint {
        Endpoint::new(Bson::MaxKey, true)
    }

    /// The same value on the other side (`[5` ends where `(5` would not, and vice versa).
    fn flipped(&self) -> Endpoint {
        Endpoint {
            value: self.value.clone(),
            inclusive: !self.inclusive,
            encoded: self.encoded.clone(),
        }
    }
}

/// Order of lower ends: by value, an inclusive end first.
fn cmp_low(a: &Endpoint, b: &Endpoint) -> Ordering {
    a.encoded
        .cmp(&b.encoded)
        .then(b.inclusive.cmp(&a.inclusive))
}

/// Order of upper ends: by value, an exclusive end first.
fn cmp_high(a: &Endpoint, b: &Endpoint) -> Ordering {
    a.encoded
        .cmp(&b.encoded)
        .then(a.inclusive.cmp(&b.inclusive))
}

/// Values from `low` to `high` in index order.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    pub low: Endpoint,
    pub high: Endpoint,
}

impl Interval {
    pub fn new(low: Endpoint, high: Endpoint) -> Interval {
        Interval { low, high }
    }

    pub fn point(value: Bson) -> Interval {
        let end = Endpoint::new(value, true);
        Interval {
            low: end.clone(),
            high: end,
        }
    }

    fn full() -> Interval {
        Interval::new(Endpoint::min_key(), Endpoint::max_key())
    }

    fn is_empty(&self) -> bool {
        match self.low.encoded.cmp(&self.high.encoded) {
            Ordering::Greater => true,
            Ordering::Equal => !(self.low.inclusive && self.high.inclusive),
            Ordering::Less => false,
        }
    }

    fn is_point(&self) -> bool {
        self.low.encoded == self.high.encoded && self.low.inclusive && self.high.inclusive
    }

    /// Whether the value whose ascending encoding is `component` lies inside.
    fn contains(&self, component: &[u8]) -> bool {
        let above_low = match component.cmp(&self.low.encoded) {
            Ordering::Greater => true,
            Ordering::Equal => self.low.inclusive,
            Ordering::Less => false,
        };
        let below_high = match component.cmp(&self.high.encoded) {
            Ordering::Less => true,
            Ordering::Equal => self.high.inclusive,
            Ordering::Greater => false,
        };
        above_low && below_high
    }

    /// mongod's rendering in `indexBounds`: `[1, 5)`, `["a", {})`, `[MinKey, MaxKey]`; a
    /// descending field shows its ends swapped.
    fn render(&self, direction: Direction) -> String {
        let (first, second) = match direction {
            Direction::Ascending => (&self.low, &self.high),
            Direction::Descending => (&self.high, &self.low),
        };
        format!(
            "{}{}, {}{}",
            if first.inclusive { '[' } else { '(' },
            bound_string(&first.value),
            bound_string(&second.value),
            if second.inclusive { ']' } else { ')' },
        )
    }
}

fn bound_string(value: &Bson) -> String {
    match value {
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::Double(v) if v.is_infinite() => (if *v > 0.0 { "inf" } else { "-inf" }).to_string(),
        Bson::Double(v) if v.is_nan() => "nan".to_string(),
        Bson::Double(v) if v.fract() == 0.0 && v.abs() < 1e16 => format!("{v:.0}"),
        Bson::DateTime(date) => format!("new Date({})", date.timestamp_millis()),
        other => tideway_base::display::value_string(other),
    }
}

/// A set of values as sorted, disjoint, non-empty intervals (index order).
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalList {
    intervals: Vec<Interval>,
}

impl IntervalList {
    /// Every value: `[MinKey, MaxKey]`.
    pub fn full() -> IntervalList {
        IntervalList {
            intervals: vec![Interval::full()],
        }
    }

    pub fn empty() -> IntervalList {
        IntervalList {
            intervals: Vec::new(),
        }
    }

    /// The union of `intervals`, normalized.
    pub fn of(mut intervals: Vec<Interval>) -> IntervalList {
        intervals.retain(|interval| !interval.is_empty());
        intervals.sort_by(|a, b| cmp_low(&a.low, &b.low));
        let mut merged: Vec<Interval> = Vec::with_capacity(intervals.len());
        for interval in intervals {
            if let Some(last) = merged.last_mut() {
                let touches = match interval.low.encoded.cmp(&last.high.encoded) {
                    Ordering::Less => true,
                    Ordering::Equal => interval.low.inclusive || last.high.inclusive,
                    Ordering::Greater => false,
                };
                if touches {
                    if cmp_high(&interval.high, &last.high) == Ordering::Greater {
                        last.high = interval.high;
                    }
                    continue;
                }
            }
            merged.push(interval);
        }
        IntervalList { intervals: merged }
    }

    pub fn points(values: impl IntoIterator<Item = Bson>) -> IntervalList {
        IntervalList::of(values.into_iter().map(Interval::point).collect())
    }

    pub fn is_full(&self) -> bool {
        self.intervals.len() == 1 && self.intervals[0] == Interval::full()
    }

    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    /// The values, when every interval is a single value.
    pub(crate) fn point_values(&self) -> Option<Vec<&Bson>> {
        self.intervals
            .iter()
            .map(|interval| interval.is_point().then_some(&interval.low.value))
            .collect()
    }

    pub(crate) fn is_single_point(&self) -> bool {
        self.intervals.len() == 1 && self.intervals[0].is_point()
    }

    pub(crate) fn contains_value(&self, value: &Bson) -> bool {
        let mut encoded = Vec::new();
        keycodec::encode_value(&mut encoded, value, Direction::Ascending);
        self.contains(&encoded)
    }

    /// Whether the value with ascending encoding `component` is in the set.
    pub fn contains(&self, component: &[u8]) -> bool {
        let position = self
            .intervals
            .partition_point(|interval| interval.high.encoded.as_slice() < component);
        self.intervals[position..]
            .iter()
            .take(2)
            .any(|interval| interval.contains(component))
    }

    pub fn union(mut self, other: IntervalList) -> IntervalList {
        self.intervals.extend(other.intervals);
        IntervalList::of(self.intervals)
    }

    pub fn intersect(&self, other: &IntervalList) -> IntervalList {
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::new();
        while i < self.intervals.len() && j < other.intervals.len() {
            let (a, b) = (&self.intervals[i], &other.intervals[j]);
            let low = if cmp_low(&a.low, &b.low) == Ordering::Greater {
                &a.low
            } else {
                &b.low
            };
            let a_ends_first = cmp_high(&a.high, &b.high) != Ordering::Greater;
            let high = if a_ends_first { &a.high } else { &b.high };
            let interval = Interval::new(low.clone(), high.clone());
            if !interval.is_empty() {
                out.push(interval);
            }
            if a_ends_first {
                i += 1;
            } else {
                j += 1;
            }
        }
        IntervalList { intervals: out }
    }

    /// Every value not in the set.
    pub fn complement(&self) -> IntervalList {
        let mut out = Vec::new();
        let mut low = Endpoint::min_key();
        for interval in &self.intervals {
            out.push(Interval::new(low, interval.low.flipped()));
            low = interval.high.flipped();
        }
        out.push(Interval::new(low, Endpoint::max_key()));
        IntervalList::of(out)
    }

    /// mongod's `indexBounds` strings for a field of `direction`, in scan order.
    pub fn render(&self, direction: Direction) -> Vec<Bson> {
        let mut rendered: Vec<Bson> = self
            .intervals
            .iter()
            .map(|interval| Bson::String(interval.render(direction)))
            .collect();
        if direction == Direction::Descending {
            rendered.reverse();
        }
        rendered
    }
}

// ---------------------------------------------------------------------------------------------
// From predicates to bounds

/// The smallest and largest values of `value`'s type bracket, where they can be built.
fn bracket_bounds(value: &Bson) -> Option<(Endpoint, Endpoint)> {
    use bson::{oid::ObjectId, spec::BinarySubtype, Binary, Timestamp};
    let (low, high) = match value {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => (
            Endpoint::new(Bson::Double(f64::NEG_INFINITY), true),
            Endpoint::new(Bson::Double(f64::INFINITY), true),
        ),
        Bson::String(_) | Bson::Symbol(_) => (
            Endpoint::new(Bson::String(String::new()), true),
            Endpoint::new(Bson::Document(Document::new()), false),
        ),
        Bson::Document(_) => (
            Endpoint::new(Bson::Document(Document::new()), true),
            Endpoint::new(Bson::Array(Vec::new()), false),
        ),
        Bson::Binary(_) => (
            Endpoint::new(
                Bson::Binary(Binary {
                    subtype: BinarySubtype::Generic,
                    bytes: Vec::new(),
                }),
                true,
            ),
            Endpoint::new(Bson::ObjectId(ObjectId::from_bytes([0; 12])), false),
        ),
        Bson::ObjectId(_) => (
            Endpoint::new(Bson::ObjectId(ObjectId::from_bytes([0; 12])), true),
            Endpoint::new(Bson::ObjectId(ObjectId::from_bytes([0xff; 12])), true),
        ),
        Bson::Boolean(_) => (
            Endpoint::new(Bson::Boolean(false), true),
            Endpoint::new(Bson::Boolean(true), true),
        ),
        Bson::DateTime(_) => (
            Endpoint::new(Bson::DateTime(bson::DateTime::from_millis(i64::MIN)), true),
            Endpoint::new(Bson::DateTime(bson::DateTime::from_millis(i64::MAX)), true),
        ),
        Bson::Timestamp(_) => (
            Endpoint::new(
                Bson::Timestamp(Timestamp {
                    time: 0,
                    increment: 0,
                }),
                true,
            ),
            Endpoint::new(
                Bson::Timestamp(Timestamp {
                    time: u32::MAX,
                    increment: u32::MAX,
                }),
                true,
            ),
        ),
        _ => return None,
    };
    Some((low, high))
}

fn is_nan(value: &Bson) -> bool {
    Number::from_bson(value).is_some_and(Number::is_nan)
}

/// Keys a document equal to `value` (or holding it in an array) can have.
fn equality_bounds(value: &Bson) -> IntervalList {
    match value {
        // Null equality also matches missing fields and undefined.
        Bson::Null => IntervalList::points([Bson::Undefined, Bson::Null]),
        // An array equals the whole stored array (keyed by its first element, or Undefined when
        // empty) or an element that is that array (nested arrays are keyed whole).
        Bson::Array(items) => IntervalList::points([
            items.first().cloned().unwrap_or(Bson::Undefined),
            value.clone(),
        ]),
        other => IntervalList::points([other.clone()]),
    }
}

fn comparison_bounds(op: CompareOp, value: &Bson) -> Option<IntervalList> {
    let (bounds_below, inclusive) = match op {
        CompareOp::Eq => return Some(equality_bounds(value)),
        CompareOp::Gt => (true, false),
        CompareOp::Gte => (true, true),
        CompareOp::Lt => (false, false),
        CompareOp::Lte => (false, true),
    };
    if matches!(value, Bson::Null) || is_nan(value) {
        return Some(if inclusive {
            equality_bounds(value)
        } else {
            IntervalList::empty()
        });
    }
    let (bracket_low, bracket_high) = bracket_bounds(value)?;
    let end = Endpoint::new(value.clone(), inclusive);
    Some(IntervalList::of(vec![if bounds_below {
        Interval::new(end, bracket_high)
    } else {
        Interval::new(bracket_low, end)
    }]))
}

/// A regex matches strings (a literal prefix narrows them) and regex values equal to itself.
fn regex_bounds(regex: &RegexMatcher) -> IntervalList {
    let strings = match literal_prefix(regex.pattern(), regex.options()) {
        Some(prefix) if !prefix.is_empty() => prefix_interval(prefix),
        _ => Interval::new(
            Endpoint::new(Bson::String(String::new()), true),
            Endpoint::new(Bson::Document(Document::new()), false),
        ),
    };
    let itself = Interval::point(Bson::RegularExpression(bson::Regex {
        pattern: regex.pattern().to_string(),
        options: regex.options().to_string(),
    }));
    IntervalList::of(vec![strings, itself])
}

/// Strings starting with `prefix`: `[prefix, prefix with its last character incremented)`.
fn prefix_interval(prefix: String) -> Interval {
    let mut upper: Vec<char> = prefix.chars().collect();
    let bumped = upper
        .last()
        .and_then(|last| char::from_u32(u32::from(*last) + 1));
    let high = match bumped {
        Some(next) => {
            if let Some(last) = upper.last_mut() {
                *last = next;
            }
            Endpoint::new(Bson::String(upper.into_iter().collect()), false)
        }
        None => Endpoint::new(Bson::Document(Document::new()), false),
    };
    Interval::new(Endpoint::new(Bson::String(prefix), true), high)
}

/// The literal text every match must start with, for `^literal…` patterns without options that
/// change what `^` or literals mean (`i`, `m`, `x`); `None` otherwise.
fn literal_prefix(pattern: &str, options: &str) -> Option<String> {
    if options.contains(['i', 'm', 'x']) || pattern.contains('|') {
        return None;
    }
    let rest = pattern
        .strip_prefix('^')
        .or_else(|| pattern.strip_prefix("\\A"))?;
    let mut prefix = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some(&next) if next.is_ascii_punctuation() => {
                    prefix.push(next);
                    chars.next();
                }
                _ => break,
            },
            '.' | '[' | ']' | '(' | ')' | '{' | '}' | '*' | '+' | '?' | '|' | '^' | '$' => {
                // A quantifier applies to the last literal, which is then not certain.
                if matches!(c, '*' | '?' | '{') {
                    prefix.pop();
                }
                break;
            }
            literal => prefix.push(literal),
        }
    }
    Some(prefix)
}

fn type_bounds(selectors: &[TypeSelector]) -> Option<IntervalList> {
    let mut intervals = Vec::new();
    for selector in selectors {
        let sample = match selector {
            TypeSelector::Number => Bson::Int32(0),
            TypeSelector::Code(code) => match code {
                1 | 16 | 18 | 19 => Bson::Int32(0),
                2 | 14 => Bson::String(String::new()),
                3 => Bson::Document(Document::new()),
                5 => Bson::Binary(bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: Vec::new(),
                }),
                7 => Bson::ObjectId(bson::oid::ObjectId::from_bytes([0; 12])),
                8 => Bson::Boolean(false),
                9 => Bson::DateTime(bson::DateTime::from_millis(0)),
                17 => Bson::Timestamp(bson::Timestamp {
                    time: 0,
                    increment: 0,
                }),
                6 => {
                    intervals.push(Interval::point(Bson::Undefined));
                    continue;
                }
                10 => {
                    intervals.push(Interval::point(Bson::Null));
                    continue;
                }
                -1 => {
                    intervals.push(Interval::point(Bson::MinKey));
                    continue;
                }
                127 => {
                    intervals.push(Interval::point(Bson::MaxKey));
                    continue;
                }
                // Arrays match through the array itself, which is not a key; the rest have no
                // buildable bracket ends.
                _ => return None,
            },
        };
        let (low, high) = bracket_bounds(&sample)?;
        // NaN sorts below -inf inside the number bracket.
        let low = if matches!(sample, Bson::Int32(_)) {
            Endpoint::new(Bson::Double(f64::NAN), true)
        } else {
            low
        };
        intervals.push(Interval::new(low, high));
    }
    Some(IntervalList::of(intervals))
}

/// Bounds of one leaf predicate, or `None` when it cannot narrow an index scan. On an index
/// with a collation (`collation`), operands are taken as the comparison keys the index holds,
/// and a regex bounds nothing (its literal prefix says nothing about comparison keys).
pub(crate) fn predicate_bounds(
    predicate: &Predicate,
    collation: Option<&Collation>,
) -> Option<IntervalList> {
    fn keyed<'v>(value: &'v Bson, collation: Option<&Collation>) -> std::borrow::Cow<'v, Bson> {
        match collation {
            Some(collation) => std::borrow::Cow::Owned(collation.index_value(value)),
            None => std::borrow::Cow::Borrowed(value),
        }
    }
    match predicate {
        Predicate::Compare(op, value) => comparison_bounds(*op, &keyed(value, collation)),
        Predicate::In { regexes, .. } if collation.is_some() && !regexes.is_empty() => None,
        Predicate::Regex(_) if collation.is_some() => None,
        Predicate::In {
            values,
            regexes,
            has_null,
        } => {
            let mut set = IntervalList::empty();
            for value in values {
                set = set.union(equality_bounds(&keyed(value, collation)));
            }
            for regex in regexes {
                set = set.union(regex_bounds(regex));
            }
            if *has_null {
                set = set.union(equality_bounds(&Bson::Null));
            }
            Some(set)
        }
        Predicate::Regex(regex) => Some(regex_bounds(regex)),
        Predicate::Type(selectors) => type_bounds(selectors),
        Predicate::ElemMatchValue(exprs) => {
            // Every condition applies to the same element, so their bounds intersect.
            let mut bounds: Option<IntervalList> = None;
            for expr in exprs {
                if let Some(found) = value_expr_bounds(expr, false, collation) {
                    bounds = Some(match bounds {
                        Some(current) => current.intersect(&found),
                        None => found,
                    });
                }
            }
            bounds
        }
        Predicate::Exists
        | Predicate::Size(_)
        | Predicate::Mod { .. }
        | Predicate::Bits(_)
        | Predicate::Geo(_)
        | Predicate::Near(_)
        | Predicate::ElemMatchObject(_) => None,
    }
}

/// Bounds of a leaf or a negated leaf; `dotted`: the leaf's path has several components, so
/// predicates that can match a missing field give none (see the module invariants).
fn value_expr_bounds(
    expr: &Expr,
    dotted: bool,
    collation: Option<&Collation>,
) -> Option<IntervalList> {
    match expr {
        Expr::Leaf { predicate, .. } => {
            let bounds = predicate_bounds(predicate, collation)?;
            let matches_missing = matches!(
                predicate,
                Predicate::Compare(CompareOp::Eq | CompareOp::Gte | CompareOp::Lte, Bson::Null)
            ) || matches!(predicate, Predicate::In { has_null: true, .. });
            (!(dotted && matches_missing)).then_some(bounds)
        }
        Expr::Not(child) if !dotted => negated_bounds(child, collation),
        _ => None,
    }
}

/// `$ne`, `$nin` and `$exists: false`: the keys of documents that fail `child`.
fn negated_bounds(child: &Expr, collation: Option<&Collation>) -> Option<IntervalList> {
    let Expr::Leaf { predicate, .. } = child else {
        return None;
    };
    let scalar = |value: &Bson| !matches!(value, Bson::Array(_) | Bson::RegularExpression(_));
    let keyed = |value: &Bson| match collation {
        Some(collation) => collation.index_value(value),
        None => value.clone(),
    };
    match predicate {
        // Only the value's own key is excluded: an empty array is keyed as undefined, and
        // `$ne: null` does not reject it.
        Predicate::Compare(CompareOp::Eq, value) if scalar(value) => {
            Some(IntervalList::points([keyed(value)]).complement())
        }
        Predicate::In {
            values, regexes, ..
        } if regexes.is_empty() && values.iter().all(scalar) => {
            Some(IntervalList::points(values.iter().map(keyed)).complement())
        }
        // A missing field is keyed as null.
        Predicate::Exists => Some(IntervalList::points([Bson::Null])),
        _ => None,
    }
}

/// Whether a conjunct is a (possibly negated) leaf on `path`.
pub(crate) fn names_path(conjuncts: &[&Expr], path: &[String]) -> bool {
    conjuncts.iter().any(|expr| is_on_path(expr, path))
}

/// Whether `expr` is a leaf on `path`, or the negation of one.
fn is_on_path(expr: &Expr, path: &[String]) -> bool {
    let leaf = match expr {
        Expr::Not(child) => child.as_ref(),
        other => other,
    };
    matches!(leaf, Expr::Leaf { path: Some(leaf_path), .. } if leaf_path.as_slice() == path)
}

/// The conjuncts of a filter that bound one field path, each with the bounds it allows on an
/// index with `collation`.
pub(crate) fn conjunct_bounds(
    conjuncts: &[&Expr],
    path: &[String],
    collation: Option<&Collation>,
) -> Vec<IntervalList> {
    let dotted = path.len() > 1;
    conjuncts
        .iter()
        .filter(|expr| is_on_path(expr, path))
        .filter_map(|expr| value_expr_bounds(expr, dotted, collation))
        .collect()
}

/// Combines the bounds several conjuncts put on one field: their intersection, or on a
/// multikey index the first set of points (else the first set), since different elements may
/// satisfy different conjuncts.
pub(crate) fn combine(mut found: Vec<IntervalList>, multikey: bool) -> IntervalList {
    if found.is_empty() {
        return IntervalList::full();
    }
    if multikey {
        let chosen = found
            .iter()
            .position(|bounds| bounds.point_values().is_some())
            .unwrap_or(0);
        return found.swap_remove(chosen);
    }
    let first = found.remove(0);
    found
        .iter()
        .fold(first, |current, bounds| current.intersect(bounds))
}

/// Whether a key inside `expr`'s bounds always belongs to a document `expr` matches, on an index
/// that is not multikey: comparisons and `$in` of plain values (not null, NaN, arrays, regexes,
/// decimals, MinKey/MaxKey), on a path that is one of `fields`.
fn is_exact(expr: &Expr, fields: &[Vec<String>]) -> bool {
    let plain = |value: &Bson| {
        !matches!(
            value,
            Bson::Null
                | Bson::Undefined
                | Bson::Array(_)
                | Bson::RegularExpression(_)
                | Bson::Decimal128(_)
                | Bson::MinKey
                | Bson::MaxKey
        ) && !is_nan(value)
    };
    let Expr::Leaf {
        path: Some(path),
        predicate,
    } = expr
    else {
        return false;
    };
    fields.contains(path)
        && match predicate {
            Predicate::Compare(op, value) => {
                plain(value) && (*op == CompareOp::Eq || bracket_bounds(value).is_some())
            }
            Predicate::In {
                values, regexes, ..
            } => regexes.is_empty() && values.iter().all(plain),
            _ => false,
        }
}

/// Whether the keys inside the bounds of a non-multikey index on `fields` are exactly the
/// documents `filter` matches: every top-level conjunct is exact on one of the fields.
pub(crate) fn covers(filter: &tideway_query::Filter, fields: &[String]) -> bool {
    let paths: Vec<Vec<String>> = fields
        .iter()
        .map(|field| tideway_query::path::split_path(field))
        .collect();
    let conjuncts = filter.top_level_conjuncts();
    !conjuncts.is_empty() && conjuncts.iter().all(|expr| is_exact(expr, &paths))
}

/// The bounds `filter`'s top-level conjuncts put on `path` of an index (multikey or not).
pub fn field_bounds(filter: &tideway_query::Filter, path: &str, multikey: bool) -> IntervalList {
    let conjuncts = filter.top_level_conjuncts();
    combine(
        conjunct_bounds(&conjuncts, &tideway_query::path::split_path(path), None),
        multikey,
    )
}

// ---------------------------------------------------------------------------------------------
// From bounds to scans

/// The bounds of every field of one index.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexBounds {
    pub fields: Vec<(String, Direction, IntervalList)>,
}

impl IndexBounds {
    /// Whether no key can match.
    pub fn is_empty(&self) -> bool {
        self.fields.iter().any(|(_, _, bounds)| bounds.is_empty())
    }

    /// The fields pinned to one value.
    pub fn equality_fields(&self) -> impl Iterator<Item = &str> {
        self.fields
            .iter()
            .filter(|(_, _, bounds)| bounds.is_single_point())
            .map(|(name, _, _)| name.as_str())
    }

    /// `indexBounds` as explain shows them, in `direction` of the scan.
    pub fn render(&self, reverse: bool) -> Document {
        self.fields
            .iter()
            .map(|(name, direction, bounds)| {
                // Read backwards, a field shows as the opposite direction would.
                let shown = match (direction, reverse) {
                    (Direction::Ascending, true) => Direction::Descending,
                    (Direction::Descending, true) => Direction::Ascending,
                    (direction, false) => *direction,
                };
                (name.clone(), Bson::Array(bounds.render(shown)))
            })
            .collect()
    }

    /// Byte ranges (sorted, disjoint) and a key filter that together admit exactly the keys
    /// inside the bounds.
    pub fn scan(&self) -> (Vec<KeyRange>, Option<KeyPredicate>) {
        let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
        let mut field = 0;
        while let Some((_, direction, bounds)) = self.fields.get(field) {
            let Some(points) = bounds.point_values() else {
                break;
            };
            if prefixes.len().saturating_mul(points.len()) > MAX_SCAN_RANGES {
                break;
            }
            let mut ordered = points;
            if *direction == Direction::Descending {
                ordered.reverse();
            }
            prefixes = prefixes
                .iter()
                .flat_map(|prefix| {
                    ordered.iter().map(move |value| {
                        let mut key = prefix.clone();
                        keycodec::encode_value(&mut key, value, *direction);
                        key
                    })
                })
                .collect();
            field += 1;
        }
        let mut filtered_from = field;
        let ranges: Vec<KeyRange> = match self.fields.get(field) {
            Some((_, direction, bounds))
                if !bounds.is_full()
                    && prefixes.len().saturating_mul(bounds.intervals.len()) <= MAX_SCAN_RANGES =>
            {
                filtered_from = field + 1;
                let mut intervals: Vec<&Interval> = bounds.intervals.iter().collect();
                if *direction == Direction::Descending {
                    intervals.reverse();
                }
                prefixes
                    .iter()
                    .flat_map(|prefix| {
                        intervals
                            .iter()
                            .map(move |interval| interval_range(prefix, interval, *direction))
                    })
                    .collect()
            }
            _ => prefixes.iter().map(|prefix| prefix_range(prefix)).collect(),
        };
        let checks: Vec<(usize, Direction, IntervalList)> = self
            .fields
            .iter()
            .enumerate()
            .skip(filtered_from)
            .filter(|(_, (_, _, bounds))| !bounds.is_full())
            .map(|(position, (_, direction, bounds))| (position, *direction, bounds.clone()))
            .collect();
        let key_filter = (!checks.is_empty()).then(|| {
            let directions: Vec<Direction> = self
                .fields
                .iter()
                .map(|(_, direction, _)| *direction)
                .collect();
            key_filter(directions, checks)
        });
        (ranges, key_filter)
    }
}

/// Byte ranges over a single-field index (of `direction`) holding exactly the keys in
/// `interval`, in key order.
pub(crate) fn single_field_ranges(interval: Interval, direction: Direction) -> Vec<KeyRange> {
    IndexBounds {
        fields: vec![(String::new(), direction, IntervalList::of(vec![interval]))],
    }
    .scan()
    .0
}

/// Every key starting with `prefix`.
fn prefix_range(prefix: &[u8]) -> KeyRange {
    if prefix.is_empty() {
        return (Bound::Unbounded, Bound::Unbounded);
    }
    (
        Bound::Included(prefix.to_vec()),
        keycodec::prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// Keys starting with `prefix` whose next component lies in `interval`.
fn interval_range(prefix: &[u8], interval: &Interval, direction: Direction) -> KeyRange {
    let encode = |value: &Bson| {
        let mut out = prefix.to_vec();
        keycodec::encode_value(&mut out, value, direction);
        out
    };
    // Keys at or after (inclusive) / strictly after every key with this component.
    let from = |end: &Endpoint| {
        if end.inclusive {
            Bound::Included(encode(&end.value))
        } else {
            keycodec::prefix_successor(&encode(&end.value))
                .map_or(Bound::Unbounded, Bound::Included)
        }
    };
    // Keys up to and including / strictly before every key with this component.
    let to = |end: &Endpoint| {
        if end.inclusive {
            keycodec::prefix_successor(&encode(&end.value))
                .map_or(Bound::Unbounded, Bound::Excluded)
        } else {
            Bound::Excluded(encode(&end.value))
        }
    };
    match direction {
        Direction::Ascending => (from(&interval.low), to(&interval.high)),
        Direction::Descending => (from(&interval.high), to(&interval.low)),
    }
}

/// A filter over stored index keys: component `position` (of a key with `directions`) must lie
/// in its bounds, for each check.
fn key_filter(
    directions: Vec<Direction>,
    checks: Vec<(usize, Direction, IntervalList)>,
) -> KeyPredicate {
    let last = checks
        .iter()
        .map(|(position, ..)| *position)
        .max()
        .unwrap_or(0);
    let checks = Arc::new(checks);
    KeyPredicate::new(move |key: &[u8]| {
        let mut offset = 0;
        let mut next_check = 0;
        for (position, direction) in directions.iter().enumerate().take(last + 1) {
            let Some(rest) = key.get(offset..) else {
                return true;
            };
            let Ok((_, used)) = keycodec::decode_value(rest, *direction) else {
                // Undecodable keys are kept: execution re-checks every document.
                return true;
            };
            if let Some((check_position, check_direction, bounds)) = checks.get(next_check) {
                if *check_position == position {
                    next_check += 1;
                    let component = &rest[..used];
                    let inside = match check_direction {
                        Direction::Ascending => bounds.contains(component),
                        Direction::Descending => {
                            let ascending: Vec<u8> = component.iter().map(|byte| !byte).collect();
                            bounds.contains(&ascending)
                        }
                    };
                    if !inside {
                        return false;
                    }
                }
            }
            offset += used;
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use tideway_query::Filter;

    fn bounds_of(filter: Document, path: &str, multikey: bool) -> IntervalList {
        field_bounds(&Filter::parse(&filter).unwrap(), path, multikey)
    }

    fn rendered(list: &IntervalList) -> Vec<String> {
        list.render(Direction::Ascending)
            .into_iter()
            .map(|bound| bound.as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn ranges_on_one_field_intersect_unless_multikey() {
        let filter = doc! {"a": {"$gte": 5, "$lt": 10}};
        assert_eq!(
            rendered(&bounds_of(filter.clone(), "a", false)),
            ["[5, 10)"]
        );
        assert_eq!(rendered(&bounds_of(filter, "a", true)), ["[5, inf]"]);
    }

    #[test]
    fn equality_in_and_null_bounds() {
        assert_eq!(rendered(&bounds_of(doc! {"a": 3}, "a", false)), ["[3, 3]"]);
        assert_eq!(
            rendered(&bounds_of(
                doc! {"a": {"$in": [3, 1, "x", 1.0]}},
                "a",
                false
            )),
            ["[1, 1]", "[3, 3]", "[\"x\", \"x\"]"]
        );
        assert_eq!(
            rendered(&bounds_of(doc! {"a": null}, "a", false)),
            ["[undefined, undefined]", "[null, null]"]
        );
        assert_eq!(
            rendered(&bounds_of(doc! {"a": {"$ne": 3}}, "a", false)),
            ["[MinKey, 3)", "(3, MaxKey]"]
        );
        assert_eq!(
            rendered(&bounds_of(doc! {"a": {"$exists": false}}, "a", false)),
            ["[null, null]"]
        );
        assert!(bounds_of(doc! {"a.b": {"$exists": false}}, "a.b", false).is_full());
        assert!(bounds_of(doc! {"a": {"$gt": 1, "$lt": 0}}, "a", false).is_empty());
    }

    #[test]
    fn ranges_stay_inside_their_type_bracket() {
        assert_eq!(
            rendered(&bounds_of(doc! {"a": {"$gt": "m"}}, "a", false)),
            ["(\"m\", {})"]
        );
        assert_eq!(
            rendered(&bounds_of(doc! {"a": {"$lte": 7}}, "a", false)),
            ["[-inf, 7]"]
        );
    }

    #[test]
    fn prefix_regexes_bound_strings() {
        assert_eq!(
            rendered(&bounds_of(doc! {"a": {"$regex": "^ab\\.c+"}}, "a", false)),
            ["[\"ab.c\", \"ab.d\")", "[/^ab\\.c+/, /^ab\\.c+/]"]
        );
        assert_eq!(
            rendered(&bounds_of(
                doc! {"a": {"$regex": "^abc", "$options": "i"}},
                "a",
                false
            ))[0],
            "[\"\", {})"
        );
    }

    #[test]
    fn exact_bounds_cover_plain_comparisons_only() {
        let covered = |filter: Document| {
            covers(
                &Filter::parse(&filter).unwrap(),
                &["a".to_string(), "b".to_string()],
            )
        };
        assert!(covered(doc! {"a": {"$gte": 1, "$lt": 5}, "b": "x"}));
        assert!(covered(doc! {"a": {"$in": [1, 2]}}));
        assert!(!covered(doc! {"a": null}));
        assert!(!covered(doc! {"a": {"$ne": 1}}));
        assert!(!covered(doc! {"a": 1, "c": 1}));
        assert!(!covered(doc! {"a": [1]}));
        assert!(!covered(doc! {}));
    }

    #[test]
    fn set_operations_on_interval_lists() {
        let range = |low: i32, high: i32| {
            Interval::new(
                Endpoint::new(Bson::Int32(low), true),
                Endpoint::new(Bson::Int32(high), false),
            )
        };
        let a = IntervalList::of(vec![range(1, 5), range(3, 8), range(10, 12)]);
        assert_eq!(rendered(&a), ["[1, 8)", "[10, 12)"]);
        let b = IntervalList::of(vec![range(6, 11)]);
        assert_eq!(rendered(&a.intersect(&b)), ["[6, 8)", "[10, 11)"]);
        assert_eq!(rendered(&b.complement()), ["[MinKey, 6)", "[11, MaxKey]"]);
        assert!(a.contains_value(&Bson::Double(7.5)));
        assert!(!a.contains_value(&Bson::Int32(8)));
        assert!(a.contains_value(&Bson::Int64(10)));
    }

    #[test]
    fn compound_bounds_explode_points_then_range_then_filter() {
        let bounds = IndexBounds {
            fields: vec![
                (
                    "a".into(),
                    Direction::Ascending,
                    IntervalList::points([Bson::Int32(1), Bson::Int32(2)]),
                ),
                (
                    "b".into(),
                    Direction::Descending,
                    IntervalList::of(vec![Interval::new(
                        Endpoint::new(Bson::Int32(5), true),
                        Endpoint::new(Bson::Int32(9), false),
                    )]),
                ),
                (
                    "c".into(),
                    Direction::Ascending,
                    IntervalList::points([Bson::String("x".into())]),
                ),
            ],
        };
        let (ranges, filter) = bounds.scan();
        assert_eq!(ranges.len(), 2);
        let filter = filter.expect("c filters keys");
        let key = |a: i32, b: i32, c: &str| {
            keycodec::encode_key(&[
                (&Bson::Int32(a), Direction::Ascending),
                (&Bson::Int32(b), Direction::Descending),
                (&Bson::String(c.into()), Direction::Ascending),
            ])
        };
        let admitted = |key: &Vec<u8>| {
            ranges
                .iter()
                .any(|range| std::ops::RangeBounds::contains(range, key))
                && filter.holds(key)
        };
        assert!(admitted(&key(1, 5, "x")));
        assert!(admitted(&key(2, 8, "x")));
        assert!(!admitted(&key(2, 9, "x")));
        assert!(!admitted(&key(1, 6, "y")));
        assert!(!admitted(&key(3, 6, "x")));
        assert_eq!(
            bounds.render(false),
            doc! {"a": ["[1, 1]", "[2, 2]"], "b": ["(9, 5]"], "c": ["[\"x\", \"x\"]"]}
        );
        assert_eq!(
            bounds.render(true),
            doc! {"a": ["[2, 2]", "[1, 1]"], "b": ["[5, 9)"], "c": ["[\"x\", \"x\"]"]}
        );
    }
}
