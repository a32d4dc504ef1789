//! A shared fixture set of BSON edge values (NaN, ±0, ±Infinity, int32/int64 bounds, 2^53 and
//! 2^63 across types, decimal128, strings differing in case, empty and nested arrays and
//! documents, DBRefs, null, undefined, a missing field, MinKey/MaxKey, BinData subtypes, dates
//! before 1970, regexes) crossed with every query operator and with sort, as tables.
//!
//! Every expected answer comes from MongoDB's documentation or its jstests, named in the row's
//! `source`, never from tideway's own output; a fixture no source speaks of for a row is listed
//! in the row's `unsourced` and left unchecked. Answers are MongoDB 7.0's (the release tideway
//! implements): equality to null still matches undefined, which 8.0 changed.
//!
//! Each fixture is a document `{_id: n, a: <value>}` (`missing` has no `a`). A row is a
//! condition on a path (`a` unless it says otherwise) and the fixtures it matches; [`check`] runs
//! the condition through [`Filter::parse`] and [`Filter::try_matches`] together with the forms
//! the documentation defines from it: its `$not` (every other fixture, documents without the
//! field included), and for `$eq` the implicit form, `$in`/`$all` of the one value and
//! `$ne`/`$nin`, for `$in` its `$nin`. Sort tables list the fixtures in groups whose order
//! inside a group is not checked (ties, or an order no source gives).

use bson::{
    doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Decimal128, Document, Regex,
    Timestamp,
};

use super::filter::Filter;
use super::sort::SortSpec;

/// The edge values in `_id` order, by name; `None` leaves `a` out.
pub(crate) fn fixtures() -> Vec<(&'static str, Option<Bson>)> {
    [
        ("minkey", Bson::MinKey),
        ("maxkey", Bson::MaxKey),
        ("null", Bson::Null),
        ("undefined", Bson::Undefined),
        ("nan", Bson::Double(f64::NAN)),
        ("nan_decimal", decimal("NaN")),
        ("neg_inf", Bson::Double(f64::NEG_INFINITY)),
        ("pos_inf", Bson::Double(f64::INFINITY)),
        ("neg_inf_decimal", decimal("-Infinity")),
        ("pos_inf_decimal", decimal("Infinity")),
        ("neg_zero", Bson::Double(-0.0)),
        ("zero", Bson::Double(0.0)),
        ("int32_min", Bson::Int32(i32::MIN)),
        ("int32_max", Bson::Int32(i32::MAX)),
        ("int64_min", Bson::Int64(i64::MIN)),
        ("int64_max", Bson::Int64(i64::MAX)),
        ("double_2p63", Bson::Double(TWO_P63)),
        ("long_2p53", Bson::Int64(TWO_P53)),
        ("long_2p53_plus_1", Bson::Int64(TWO_P53 + 1)),
        // 2^53 + 1 has no double: the nearest is 2^53 itself.
        ("double_2p53", Bson::Double(TWO_P53 as f64)),
        ("int_1", Bson::Int32(1)),
        ("decimal_1_0", decimal("1.0")),
        ("decimal_1_00", decimal("1.00")),
        ("double_1_5", Bson::Double(1.5)),
        ("empty_string", Bson::String(String::new())),
        ("string_upper_a", Bson::String("A".into())),
        ("string_a", Bson::String("a".into())),
        ("string_ab", Bson::String("ab".into())),
        ("empty_document", Bson::Document(Document::new())),
        ("document_a_null", Bson::Document(doc! {"a": null})),
        ("dbref", Bson::Document(dbref())),
        ("dbref_db", Bson::Document(dbref_db())),
        ("empty_array", Bson::Array(Vec::new())),
        ("array_null", Bson::Array(vec![Bson::Null])),
        ("nested_array", bson::bson!([[1]])),
        ("array_1_a", bson::bson!([1, "a"])),
        ("bindata_empty", binary(0, &[])),
        ("bindata_00", binary(0, &[0, 0])),
        ("bindata_64", binary(0, &[0x64, 0])),
        ("bindata_func_00", binary(1, &[0, 0])),
        ("objectid", Bson::ObjectId(object_id())),
        ("false", Bson::Boolean(false)),
        ("true", Bson::Boolean(true)),
        ("date_before_1970", date(-1000)),
        ("date_epoch", date(0)),
        ("timestamp", timestamp(1, 1)),
        ("regex", regex("^a", "")),
        ("regex_i", regex("^a", "i")),
    ]
    .into_iter()
    .map(|(name, value)| (name, Some(value)))
    .chain([("missing", None)])
    .collect()
}

/// The fixture documents `{_id: n, a: value}`, by name.
pub(crate) fn documents() -> Vec<(&'static str, Document)> {
    fixtures()
        .into_iter()
        .zip(0..)
        .map(|((name, value), id)| {
            let mut document = doc! {"_id": id};
            if let Some(value) = value {
                document.insert("a", value);
            }
            (name, document)
        })
        .collect()
}

const TWO_P53: i64 = 1 << 53;
const TWO_P63: f64 = 9_223_372_036_854_775_808.0;

fn decimal(text: &str) -> Bson {
    Bson::Decimal128(text.parse::<Decimal128>().expect("fixture decimal"))
}

fn binary(subtype: u8, bytes: &[u8]) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::from(subtype),
        bytes: bytes.to_vec(),
    })
}

fn date(millis: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(millis))
}

fn timestamp(time: u32, increment: u32) -> Bson {
    Bson::Timestamp(Timestamp { time, increment })
}

fn object_id() -> ObjectId {
    ObjectId::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
}

fn dbref() -> Document {
    doc! {"$ref": "coll", "$id": 1}
}

fn dbref_db() -> Document {
    doc! {"$ref": "coll", "$id": 1, "$db": "db"}
}

/// The fixtures a row matches: those named (space-separated), or all but those named.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Only(&'static str),
    AllBut(&'static str),
}
use Expect::{AllBut, Only};

impl Expect {
    fn names(self) -> &'static str {
        match self {
            Only(names) | AllBut(names) => names,
        }
    }

    fn contains(self, name: &str) -> bool {
        match self {
            Only(names) => named(names, name),
            AllBut(names) => !named(names, name),
        }
    }
}

/// Whether the space-separated `names` include `name`.
fn named(names: &str, name: &str) -> bool {
    names.split_whitespace().any(|listed| listed == name)
}

struct Row {
    path: &'static str,
    condition: Bson,
    expect: Expect,
    /// Fixtures no source speaks of for this row (space-separated): not checked.
    unsourced: &'static str,
    source: &'static str,
}

fn row(condition: impl Into<Bson>, expect: Expect, source: &'static str) -> Row {
    Row {
        path: "a",
        condition: condition.into(),
        expect,
        unsourced: "",
        source,
    }
}

impl Row {
    fn at(self, path: &'static str) -> Row {
        Row { path, ..self }
    }

    fn unsourced(self, unsourced: &'static str) -> Row {
        Row { unsourced, ..self }
    }

    /// The filters stating this row, each with whether it states its negation.
    fn forms(&self) -> Vec<(Document, bool)> {
        let on_path = |condition: Bson| {
            let mut filter = Document::new();
            filter.insert(self.path, condition);
            filter
        };
        let condition = self.condition.clone();
        let mut forms = vec![
            (on_path(condition.clone()), false),
            (on_path(doc! {"$not": condition}.into()), true),
        ];
        let Bson::Document(operators) = &self.condition else {
            return forms;
        };
        match operators.iter().next() {
            Some((operator, value))
                if operators.len() == 1
                    && operator == "$eq"
                    && !matches!(value, Bson::RegularExpression(_)) =>
            {
                forms.extend([
                    (on_path(value.clone()), false),
                    (on_path(doc! {"$in": [value.clone()]}.into()), false),
                    (on_path(doc! {"$all": [value.clone()]}.into()), false),
                    (on_path(doc! {"$ne": value.clone()}.into()), true),
                    (on_path(doc! {"$nin": [value.clone()]}.into()), true),
                ]);
            }
            Some((operator, values)) if operators.len() == 1 && operator == "$in" => {
                forms.push((on_path(doc! {"$nin": values.clone()}.into()), true));
            }
            _ => {}
        }
        forms
    }
}

fn assert_known(names: &str, source: &str) {
    let fixtures = fixtures();
    for name in names.split_whitespace() {
        assert!(
            fixtures.iter().any(|(fixture, _)| *fixture == name),
            "unknown fixture {name} ({source})"
        );
    }
}

/// Runs every form of every row against every fixture; reports all disagreements at once.
fn check(rows: &[Row]) {
    let documents = documents();
    let mut failures = Vec::new();
    for row in rows {
        assert_known(row.expect.names(), row.source);
        assert_known(row.unsourced, row.source);
        for (filter, negated) in row.forms() {
            let parsed = Filter::parse(&filter).unwrap_or_else(|error| {
                panic!("{filter} refused: {} ({})", error.errmsg, row.source)
            });
            let checked = || {
                documents
                    .iter()
                    .filter(|(name, _)| !named(row.unsourced, name))
            };
            let actual: Vec<&str> = checked()
                .filter(|(_, document)| parsed.try_matches(document).expect("evaluates"))
                .map(|(name, _)| *name)
                .collect();
            let expected: Vec<&str> = checked()
                .filter(|(name, _)| row.expect.contains(name) != negated)
                .map(|(name, _)| *name)
                .collect();
            if actual != expected {
                failures.push(format!(
                    "{filter} ({}):\n  expected {expected:?}\n  actual   {actual:?}",
                    row.source
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sorts every fixture but `unsourced` on `a` and compares the order with `groups` (each a
/// space-separated set of names), group by group.
fn check_sort(direction: i32, groups: &[&str], unsourced: &str, source: &str) {
    let spec = SortSpec::parse(&doc! {"a": direction}).expect("valid sort");
    let mut documents: Vec<_> = documents()
        .into_iter()
        .filter(|(name, _)| !named(unsourced, name))
        .collect();
    documents.sort_by(|(_, x), (_, y)| spec.compare(x, y));
    let sorted: Vec<&str> = documents.iter().map(|(name, _)| *name).collect();
    let listed = groups.join(" ");
    assert_known(&listed, source);
    assert_eq!(
        sorted.len(),
        listed.split_whitespace().count(),
        "{sorted:?} ({source})"
    );
    let mut start = 0;
    for group in groups {
        let mut want: Vec<&str> = group.split_whitespace().collect();
        let mut got = sorted[start..start + want.len()].to_vec();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "sorted {sorted:?} ({source})");
        start += want.len();
    }
}

const NULL_EQ: &str = "null_query_semantics.js; 'Migrate Undefined Data and Queries' (before 8.0, \
                       null equality matched undefined)";
const BY_VALUE: &str = "Comparison/Sort Order (numeric types compare by value); \
                        decimal_find_mixed.js";
const LONG_DOUBLE: &str = "compare_long_double.js";
const EXACT_DOCUMENT: &str = "Query on Embedded/Nested Documents (exact match, field order); \
                              ref2.js";
const BRACKETS: &str = "Comparison/Sort Order; min_max_key.js (type bracketing); nan.js (NaN is \
                        in no range but its own); Query an Array (any element)";
const NULL_RANGE: &str = "null_query_semantics.js ($gte: null); min_max_key.js (type bracketing: \
                          null is alone in its bracket)";
const OBJECTS: &str = "Comparison/Sort Order (objects: field types, names, values; fewer pairs \
                       first)";
const BINDATA: &str = "Comparison/Sort Order (BinData: length, subtype, bytes)";
const TIMESTAMPS: &str = "Comparison/Sort Order (dates apart from timestamps); BSON Types \
                          (timestamp: time, then increment)";
const TYPES: &str = "$type (aliases, codes, any array element); type_array.js; type3.js; \
                     type2.js; null_undefined.js";
const MOD: &str = "$mod (dividend truncated); mod_special_values.js (NaN, Infinity never match); \
                   mod_overflow.js; decimal_find_query.js";
const BITS: &str = "bittest.js; $bitsAllSet, $bitsAnySet, $bitsAllClear, $bitsAnyClear (only \
                    integers in the int64 range; numbers sign-extended, BinData zero-extended, as \
                    little-endian unsigned numbers; 64-bit masks, DOCS-16722)";
const REGEXES: &str = "regex regex_i";
/// The values whose bits are tested: integral numbers in the int64 range, and BinData.
const BIT_TESTED: &str = "neg_zero zero int32_min int32_max int64_min int64_max long_2p53 \
                          long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 array_1_a \
                          bindata_empty bindata_00 bindata_64 bindata_func_00";

fn regex(pattern: &str, options: &str) -> Bson {
    Bson::RegularExpression(Regex {
        pattern: pattern.into(),
        options: options.into(),
    })
}

#[test]
fn fixture_names_are_unique() {
    let fixtures = fixtures();
    for (index, (name, _)) in fixtures.iter().enumerate() {
        assert!(
            fixtures[..index].iter().all(|(other, _)| other != name),
            "{name} twice"
        );
    }
}

#[test]
#[rustfmt::skip]
fn equality_and_its_negations_match_mongod() {
    let ones = Only("int_1 decimal_1_0 decimal_1_00 array_1_a");
    let nans = Only("nan nan_decimal");
    check(&[
        row(doc! {"$eq": null}, Only("null undefined array_null missing"), NULL_EQ),
        row(doc! {"$eq": f64::NAN}, nans, "nan.js; decimal_find_mixed.js"),
        row(doc! {"$eq": decimal("NaN")}, nans, "decimal_find_mixed.js"),
        row(doc! {"$eq": 0}, Only("neg_zero zero"), BY_VALUE),
        row(doc! {"$eq": -0.0}, Only("neg_zero zero"), BY_VALUE),
        row(doc! {"$eq": 1}, ones, "decimal_find_query.js; Query an Array; multi.js"),
        row(doc! {"$eq": decimal("1")}, ones, "decimal_find_query.js"),
        row(doc! {"$eq": f64::INFINITY}, Only("pos_inf pos_inf_decimal"), "decimal_find_mixed.js"),
        row(doc! {"$eq": decimal("Infinity")}, Only("pos_inf pos_inf_decimal"), "decimal_find_mixed.js"),
        row(doc! {"$eq": f64::NEG_INFINITY}, Only("neg_inf neg_inf_decimal"), BY_VALUE),
        row(doc! {"$eq": i64::MAX}, Only("int64_max"), LONG_DOUBLE),
        row(doc! {"$eq": i64::MIN}, Only("int64_min"), LONG_DOUBLE),
        row(doc! {"$eq": TWO_P63}, Only("double_2p63"), LONG_DOUBLE),
        row(doc! {"$eq": TWO_P53}, Only("long_2p53 double_2p53"), LONG_DOUBLE),
        row(doc! {"$eq": TWO_P53 as f64}, Only("long_2p53 double_2p53"), LONG_DOUBLE),
        row(doc! {"$eq": TWO_P53 + 1}, Only("long_2p53_plus_1"), LONG_DOUBLE),
        row(doc! {"$eq": i64::from(i32::MAX)}, Only("int32_max"), BY_VALUE),
        row(doc! {"$eq": ""}, Only("empty_string"), "Comparison/Sort Order (binary comparison)"),
        row(doc! {"$eq": "a"}, Only("string_a array_1_a"), "regex2.js; Query an Array"),
        row(doc! {"$eq": "A"}, Only("string_upper_a"), "regex2.js"),
        row(doc! {"$eq": {}}, Only("empty_document"), EXACT_DOCUMENT),
        row(doc! {"$eq": {"a": null}}, Only("document_a_null"), EXACT_DOCUMENT),
        row(doc! {"$eq": dbref()}, Only("dbref"), EXACT_DOCUMENT),
        row(doc! {"$eq": dbref_db()}, Only("dbref_db"), EXACT_DOCUMENT),
        row(doc! {"$eq": []}, Only("empty_array"), "all3.js; in8.js"),
        row(doc! {"$eq": [null]}, Only("array_null"), "in8.js"),
        row(doc! {"$eq": [1]}, Only("nested_array"), "in8.js; multi.js"),
        row(doc! {"$eq": [[1]]}, Only("nested_array"), "multi.js"),
        row(doc! {"$eq": [1, "a"]}, Only("array_1_a"), "array_match1.js"),
        row(doc! {"$eq": binary(0, &[])}, Only("bindata_empty"), "in_with_mixed_values.js"),
        row(doc! {"$eq": binary(0, &[0, 0])}, Only("bindata_00"), "in_with_mixed_values.js"),
        row(doc! {"$eq": binary(1, &[0, 0])}, Only("bindata_func_00"), "in_with_mixed_values.js"),
        row(doc! {"$eq": object_id()}, Only("objectid"), BRACKETS),
        row(doc! {"$eq": false}, Only("false"), BRACKETS),
        row(doc! {"$eq": true}, Only("true"), BRACKETS),
        row(doc! {"$eq": date(-1000)}, Only("date_before_1970"), "date3.js"),
        row(doc! {"$eq": date(0)}, Only("date_epoch"), "date3.js"),
        row(doc! {"$eq": timestamp(1, 1)}, Only("timestamp"), TIMESTAMPS),
        row(doc! {"$eq": Bson::MinKey}, Only("minkey"), "min_max_key.js"),
        row(doc! {"$eq": Bson::MaxKey}, Only("maxkey"), "min_max_key.js"),
        row(doc! {"$eq": regex("^a", "")}, Only("regex"), "$eq (regex match behavior)")
            .unsourced("regex_i"),
    ]);
}

#[test]
#[rustfmt::skip]
fn range_comparisons_match_mongod() {
    let nans = Only("nan nan_decimal");
    let null_or_missing = Only("null array_null missing");
    check(&[
        row(doc! {"$gt": f64::NAN}, Only(""), "nan.js"),
        row(doc! {"$gte": f64::NAN}, nans, "nan.js"),
        row(doc! {"$lt": f64::NAN}, Only(""), "nan.js"),
        row(doc! {"$lte": f64::NAN}, nans, "nan.js"),
        row(doc! {"$gte": decimal("NaN")}, nans, "nan.js; decimal_find_mixed.js"),
        row(doc! {"$gt": 0}, Only("pos_inf pos_inf_decimal int32_max int64_max double_2p63 \
            long_2p53 long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 double_1_5 \
            array_1_a"), BRACKETS),
        row(doc! {"$gte": -0.0}, Only("pos_inf pos_inf_decimal neg_zero zero int32_max \
            int64_max double_2p63 long_2p53 long_2p53_plus_1 double_2p53 int_1 decimal_1_0 \
            decimal_1_00 double_1_5 array_1_a"), BRACKETS),
        row(doc! {"$lt": -0.0}, Only("neg_inf neg_inf_decimal int32_min int64_min"), BRACKETS),
        row(doc! {"$lte": 0}, Only("neg_inf neg_inf_decimal neg_zero zero int32_min int64_min"),
            BRACKETS),
        row(doc! {"$gt": i64::MAX}, Only("pos_inf pos_inf_decimal double_2p63"), LONG_DOUBLE),
        row(doc! {"$lte": i64::MAX}, Only("neg_inf neg_inf_decimal neg_zero zero int32_min \
            int32_max int64_min int64_max long_2p53 long_2p53_plus_1 double_2p53 int_1 \
            decimal_1_0 decimal_1_00 double_1_5 array_1_a"), LONG_DOUBLE),
        row(doc! {"$lt": i64::MIN}, Only("neg_inf neg_inf_decimal"), LONG_DOUBLE),
        row(doc! {"$gte": i64::MIN}, Only("pos_inf pos_inf_decimal neg_zero zero int32_min \
            int32_max int64_min int64_max double_2p63 long_2p53 long_2p53_plus_1 double_2p53 \
            int_1 decimal_1_0 decimal_1_00 double_1_5 array_1_a"), LONG_DOUBLE),
        row(doc! {"$gt": TWO_P53}, Only("pos_inf pos_inf_decimal int64_max double_2p63 \
            long_2p53_plus_1"), LONG_DOUBLE),
        row(doc! {"$gte": TWO_P53 as f64}, Only("pos_inf pos_inf_decimal int64_max double_2p63 \
            long_2p53 long_2p53_plus_1 double_2p53"), LONG_DOUBLE),
        row(doc! {"$lt": TWO_P53 + 1}, Only("neg_inf neg_inf_decimal neg_zero zero int32_min \
            int32_max int64_min long_2p53 double_2p53 int_1 decimal_1_0 decimal_1_00 double_1_5 \
            array_1_a"), LONG_DOUBLE),
        row(doc! {"$lte": TWO_P53 as f64}, Only("neg_inf neg_inf_decimal neg_zero zero \
            int32_min int32_max int64_min long_2p53 double_2p53 int_1 decimal_1_0 decimal_1_00 \
            double_1_5 array_1_a"), LONG_DOUBLE),
        row(doc! {"$gt": decimal("1.0")}, Only("pos_inf pos_inf_decimal int32_max int64_max \
            double_2p63 long_2p53 long_2p53_plus_1 double_2p53 double_1_5"),
            "decimal_find_query.js"),
        row(doc! {"$lt": decimal("1.00")}, Only("neg_inf neg_inf_decimal neg_zero zero \
            int32_min int64_min"), "decimal_find_query.js"),
        row(doc! {"$gt": f64::INFINITY}, Only(""), "decimal_find_query.js; sort2.js"),
        row(doc! {"$gte": f64::INFINITY}, Only("pos_inf pos_inf_decimal"),
            "decimal_find_query.js; sort2.js"),
        row(doc! {"$lt": decimal("-Infinity")}, Only(""), "decimal_find_query.js; nan.js"),
        row(doc! {"$lte": decimal("-Infinity")}, Only("neg_inf neg_inf_decimal"),
            "decimal_find_query.js; nan.js"),
        row(doc! {"$gt": ""}, Only("string_upper_a string_a string_ab array_1_a"), BRACKETS),
        row(doc! {"$gte": ""}, Only("empty_string string_upper_a string_a string_ab array_1_a"),
            BRACKETS),
        row(doc! {"$lt": "a"}, Only("empty_string string_upper_a"), BRACKETS),
        row(doc! {"$lte": "a"}, Only("empty_string string_upper_a string_a array_1_a"), BRACKETS),
        row(doc! {"$gt": "a"}, Only("string_ab"), "index_check3.js; Comparison/Sort Order"),
        row(doc! {"$gt": {}}, Only("document_a_null dbref dbref_db"), OBJECTS),
        row(doc! {"$lte": {"a": null}}, Only("empty_document document_a_null"), OBJECTS),
        row(doc! {"$gt": {"a": null}}, Only("dbref dbref_db"), OBJECTS),
        row(doc! {"$lt": dbref_db()}, Only("empty_document document_a_null dbref"), OBJECTS),
        row(doc! {"$gt": []}, Only("array_null nested_array array_1_a"),
            "Comparison/Sort Order (arrays compare lexicographically); array_match4.js"),
        row(doc! {"$gte": []}, Only("empty_array array_null nested_array array_1_a"),
            "Comparison/Sort Order (arrays compare lexicographically); array_match4.js"),
        row(doc! {"$gt": binary(0, &[])}, Only("bindata_00 bindata_64 bindata_func_00"), BINDATA),
        row(doc! {"$gt": binary(0, &[0, 0])}, Only("bindata_64 bindata_func_00"), BINDATA),
        row(doc! {"$lt": binary(1, &[0, 0])}, Only("bindata_empty bindata_00 bindata_64"), BINDATA),
        row(doc! {"$gte": ObjectId::from_bytes([0; 12])}, Only("objectid"), BRACKETS),
        row(doc! {"$gt": false}, Only("true"), "server6779.js; type bracketing"),
        row(doc! {"$lt": true}, Only("false"), "server6779.js; type bracketing"),
        row(doc! {"$lt": date(0)}, Only("date_before_1970"), "date3.js"),
        row(doc! {"$gt": date(-1000)}, Only("date_epoch"), "date3.js"),
        row(doc! {"$gte": date(-1000)}, Only("date_before_1970 date_epoch"), "date3.js"),
        row(doc! {"$gt": timestamp(0, 1)}, Only("timestamp"), TIMESTAMPS),
        row(doc! {"$lt": timestamp(1, 1)}, Only(""), TIMESTAMPS),
        // Whether a range bounded by null takes in undefined no source says for 7.0.
        row(doc! {"$gte": null}, null_or_missing, NULL_RANGE).unsourced("undefined"),
        row(doc! {"$lte": null}, null_or_missing, NULL_RANGE).unsourced("undefined"),
        row(doc! {"$gt": null}, Only(""), NULL_RANGE).unsourced("undefined"),
        row(doc! {"$lt": null}, Only(""), NULL_RANGE).unsourced("undefined"),
        row(doc! {"$gt": Bson::MinKey}, AllBut("minkey"), "min_max_key.js; index_bounds_minkey.js"),
        row(doc! {"$gte": Bson::MinKey}, AllBut(""), "min_max_key.js; index_bounds_minkey.js"),
        row(doc! {"$lt": Bson::MinKey}, Only(""), "min_max_key.js; index_bounds_minkey.js"),
        row(doc! {"$lte": Bson::MinKey}, Only("minkey"), "min_max_key.js; index_bounds_minkey.js"),
        row(doc! {"$gt": Bson::MaxKey}, Only(""), "min_max_key.js; index_bounds_maxkey.js"),
        row(doc! {"$gte": Bson::MaxKey}, Only("maxkey"), "min_max_key.js; index_bounds_maxkey.js"),
        row(doc! {"$lt": Bson::MaxKey}, AllBut("maxkey"), "min_max_key.js; index_bounds_maxkey.js"),
        row(doc! {"$lte": Bson::MaxKey}, AllBut(""), "min_max_key.js; index_bounds_maxkey.js"),
    ]);
}

#[test]
#[rustfmt::skip]
fn in_and_nin_match_mongod() {
    let null_in = "all3.js; null_query_semantics.js; 'Migrate Undefined Data and Queries' ($in)";
    check(&[
        row(doc! {"$in": [null]}, Only("null undefined array_null missing"), null_in),
        row(doc! {"$in": [f64::NAN, 1000]}, Only("nan nan_decimal"), "nan.js"),
        row(doc! {"$in": [decimal("NaN"), 1000]}, Only("nan nan_decimal"), "nan.js"),
        row(doc! {"$in": [decimal("Infinity"), decimal("-Infinity")]},
            Only("pos_inf pos_inf_decimal neg_inf neg_inf_decimal"),
            "decimal_find_query.js; decimal_find_mixed.js"),
        row(doc! {"$in": [-0.0, "A"]}, Only("neg_zero zero string_upper_a"), BY_VALUE),
        row(doc! {"$in": [[]]}, Only("empty_array"), "all3.js; in8.js"),
        row(doc! {"$in": [[1]]}, Only("nested_array"), "in8.js"),
        row(doc! {"$in": [regex("^a", "")]}, Only("string_a string_ab array_1_a regex"),
            "in_with_mixed_values.js (a regex matches strings and the same stored regex)")
            .unsourced("regex_i"),
        row(doc! {"$in": [1, regex("^a", "")]}, Only("int_1 decimal_1_0 decimal_1_00 array_1_a \
            string_a string_ab regex"), "in_with_mixed_values.js").unsourced("regex_i"),
        row(doc! {"$in": [null, regex("^a", "")]}, Only("null undefined array_null missing \
            string_a string_ab array_1_a regex"), "null_query_semantics.js ($nin: [null, regex]); \
            in_with_mixed_values.js").unsourced("regex_i"),
        row(doc! {"$in": [binary(0, &[0x64, 0]), binary(1, &[0, 0])]},
            Only("bindata_64 bindata_func_00"), "in_with_mixed_values.js"),
        row(doc! {"$in": [dbref(), {}]}, Only("dbref empty_document"),
            "in_with_mixed_values.js; ref2.js"),
        row(doc! {"$in": [Bson::MinKey, Bson::MaxKey]}, Only("minkey maxkey"), "min_max_key.js"),
        row(doc! {"$in": []}, Only(""), "$in (equals a value of the array)"),
    ]);
}

#[test]
#[rustfmt::skip]
fn exists_and_type_match_mongod() {
    let types: &[(&str, i32, &str)] = &[
        ("double", 1, "nan neg_inf pos_inf neg_zero zero double_2p63 double_2p53 double_1_5"),
        ("string", 2, "empty_string string_upper_a string_a string_ab array_1_a"),
        ("object", 3, "empty_document document_a_null dbref dbref_db"),
        ("array", 4, "empty_array array_null nested_array array_1_a"),
        ("binData", 5, "bindata_empty bindata_00 bindata_64 bindata_func_00"),
        ("undefined", 6, "undefined"),
        ("objectId", 7, "objectid"),
        ("bool", 8, "false true"),
        ("date", 9, "date_before_1970 date_epoch"),
        ("null", 10, "null array_null"),
        ("regex", 11, "regex regex_i"),
        ("dbPointer", 12, ""),
        ("javascript", 13, ""),
        ("symbol", 14, ""),
        ("javascriptWithScope", 15, ""),
        ("int", 16, "int32_min int32_max int_1 array_1_a"),
        ("timestamp", 17, "timestamp"),
        ("long", 18, "int64_min int64_max long_2p53 long_2p53_plus_1"),
        ("decimal", 19, "nan_decimal neg_inf_decimal pos_inf_decimal decimal_1_0 decimal_1_00"),
        ("minKey", -1, "minkey"),
        ("maxKey", 127, "maxkey"),
    ];
    let mut rows: Vec<Row> = types
        .iter()
        .flat_map(|&(alias, code, names)| {
            [row(doc! {"$type": alias}, Only(names), TYPES), row(doc! {"$type": code}, Only(names), TYPES)]
        })
        .collect();
    rows.extend([
        row(doc! {"$type": "number"}, Only("nan nan_decimal neg_inf pos_inf neg_inf_decimal \
            pos_inf_decimal neg_zero zero int32_min int32_max int64_min int64_max double_2p63 \
            long_2p53 long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 double_1_5 \
            array_1_a"), TYPES),
        row(doc! {"$type": ["null", "undefined"]}, Only("null undefined array_null"),
            "null_undefined.js"),
        row(doc! {"$type": ["long", 2]}, Only("int64_min int64_max long_2p53 long_2p53_plus_1 \
            empty_string string_upper_a string_a string_ab array_1_a"), "type_array.js"),
        row(doc! {"$exists": true}, AllBut("missing"), "$exists; null_query_semantics.js"),
        row(doc! {"$exists": false}, Only("missing"), "$exists; null_query_semantics.js"),
    ]);
    check(&rows);
}

#[test]
#[rustfmt::skip]
fn array_operators_match_mongod() {
    check(&[
        row(doc! {"$size": 0}, Only("empty_array"), "$size; find_size.js"),
        row(doc! {"$size": 0_i64}, Only("empty_array"), "find_size.js (ints and longs)"),
        row(doc! {"$size": 1}, Only("array_null nested_array"), "$size; find_size.js"),
        row(doc! {"$size": 2}, Only("array_1_a"), "$size; find_size.js"),
        row(doc! {"$size": 3}, Only(""), "$size; find_size.js"),
        row(doc! {"$all": []}, Only(""), "all4.js"),
        row(doc! {"$all": [1, "a"]}, Only("array_1_a"), "$all (an $and of equalities); all2.js"),
        row(doc! {"$all": [regex("^a", ""), 1]}, Only("array_1_a"),
            "$all (an $and); regex9.js").unsourced(REGEXES),
        row(doc! {"$all": [{"$elemMatch": {"$type": "array"}}]}, Only("nested_array"),
            "all4.js; elemmatch_value.js"),
        row(doc! {"$elemMatch": {}}, Only("nested_array"), "elemmatch_object.js"),
        row(doc! {"$elemMatch": {"$type": "number"}}, Only("array_1_a"), "elemmatch_value.js"),
        row(doc! {"$elemMatch": {"$type": "array"}}, Only("nested_array"), "elemmatch_value.js"),
        row(doc! {"$elemMatch": {"$gt": 0, "$lt": 2}}, Only("array_1_a"),
            "elemmatch_value.js (no nested array traversal)"),
        row(doc! {"$elemMatch": {"$elemMatch": {"$gt": 0, "$lt": 2}}}, Only("nested_array"),
            "elemmatch_value.js"),
        row(doc! {"$elemMatch": {"$eq": null}}, Only("array_null"), "null_query_semantics.js"),
        row(doc! {"$elemMatch": {"$ne": null}}, Only("nested_array array_1_a"),
            "null_query_semantics.js"),
        row(doc! {"$elemMatch": {"$regex": "^A", "$options": "i"}}, Only("array_1_a"), "regex.js"),
    ]);
}

#[test]
#[rustfmt::skip]
fn mod_matches_mongod() {
    let integral = Only("neg_zero zero int32_min int32_max int64_min int64_max long_2p53 \
        long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 double_1_5 array_1_a");
    // Whether 2^63 (a double past the int64 range) is a dividend no source says.
    let beyond = "double_2p63";
    check(&[
        row(doc! {"$mod": [2, 0]}, Only("neg_zero zero int32_min int64_min long_2p53 \
            double_2p53"), MOD).unsourced(beyond),
        row(doc! {"$mod": [2, 1]}, Only("int32_max int64_max long_2p53_plus_1 int_1 decimal_1_0 \
            decimal_1_00 double_1_5 array_1_a"), MOD).unsourced(beyond),
        row(doc! {"$mod": [-1, 0]}, integral, MOD).unsourced(beyond),
        row(doc! {"$mod": [-1_i64, 0]}, integral, MOD).unsourced(beyond),
        row(doc! {"$mod": [-1.0, 0]}, integral, MOD).unsourced(beyond),
        row(doc! {"$mod": [decimal("-1"), 0]}, integral, MOD).unsourced(beyond),
    ]);
}

#[test]
#[rustfmt::skip]
fn regex_matches_mongod() {
    let starts_with_a = Only("string_a string_ab array_1_a");
    let any_case = Only("string_upper_a string_a string_ab array_1_a");
    let source = "$regex (matches strings); regex.js; regex2.js; regex9.js";
    check(&[
        row(regex("^a", ""), starts_with_a, source).unsourced(REGEXES),
        row(doc! {"$regex": "^a"}, starts_with_a, source).unsourced(REGEXES),
        row(regex("^a", "i"), any_case, source).unsourced(REGEXES),
        row(doc! {"$regex": "^A", "$options": "i"}, any_case, source).unsourced(REGEXES),
        row(doc! {"$regex": regex("^A", "i")}, any_case, source).unsourced(REGEXES),
        row(regex("^$", ""), Only("empty_string"), source).unsourced(REGEXES),
        row(regex("1", ""), Only(""), source).unsourced(REGEXES),
    ]);
}

#[test]
#[rustfmt::skip]
fn bitwise_operators_match_mongod() {
    let low_bits = Only("int32_max int64_max bindata_64");
    check(&[
        row(doc! {"$bitsAllSet": 0}, Only(BIT_TESTED), BITS),
        row(doc! {"$bitsAllClear": 0}, Only(BIT_TESTED), BITS),
        row(doc! {"$bitsAnySet": 0}, Only(""), BITS),
        row(doc! {"$bitsAnyClear": 0}, Only(""), BITS),
        row(doc! {"$bitsAllSet": []}, Only(BIT_TESTED), BITS),
        row(doc! {"$bitsAnySet": []}, Only(""), BITS),
        row(doc! {"$bitsAllSet": [0]}, Only("int32_max int64_max long_2p53_plus_1 int_1 \
            decimal_1_0 decimal_1_00 array_1_a"), BITS),
        row(doc! {"$bitsAllClear": [0]}, Only("neg_zero zero int32_min int64_min long_2p53 \
            double_2p53 bindata_empty bindata_00 bindata_64 bindata_func_00"), BITS),
        row(doc! {"$bitsAnySet": [53]}, Only("int32_min int64_max long_2p53 long_2p53_plus_1 \
            double_2p53"), BITS),
        row(doc! {"$bitsAllSet": TWO_P53}, Only("int32_min int64_max long_2p53 long_2p53_plus_1 \
            double_2p53"), BITS),
        row(doc! {"$bitsAllSet": [63, 200]}, Only("int32_min int64_min"), BITS),
        row(doc! {"$bitsAnyClear": [200]}, Only("neg_zero zero int32_max int64_max long_2p53 \
            long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 array_1_a bindata_empty \
            bindata_00 bindata_64 bindata_func_00"), BITS),
        row(doc! {"$bitsAllClear": [31]}, Only("neg_zero zero int32_max int64_min long_2p53 \
            long_2p53_plus_1 double_2p53 int_1 decimal_1_0 decimal_1_00 array_1_a bindata_empty \
            bindata_00 bindata_64 bindata_func_00"), BITS),
        row(doc! {"$bitsAllSet": [2, 5, 6]}, low_bits, BITS),
        row(doc! {"$bitsAnySet": 100}, low_bits, BITS),
        row(doc! {"$bitsAllSet": binary(0, &[0x64])}, low_bits, BITS),
    ]);
}

#[test]
#[rustfmt::skip]
fn dotted_paths_match_mongod() {
    let dbref_fields = "dbref3.js (queries on DBRef fields); Database References";
    let arrays = "empty_array array_null nested_array array_1_a";
    check(&[
        row(doc! {"$eq": 1}, Only("dbref dbref_db"), dbref_fields).at("a.$id"),
        row(doc! {"$eq": "coll"}, Only("dbref dbref_db"), dbref_fields).at("a.$ref"),
        row(doc! {"$exists": true}, Only("dbref_db"), dbref_fields).at("a.$db"),
        // A scalar or a document without `b` has `a.b` null; an array only through a document.
        row(doc! {"$eq": null}, AllBut(arrays), "null_query_semantics.js (a.b)").at("a.b"),
        row(doc! {"$exists": false}, AllBut(""), "null_query_semantics.js (a.b)").at("a.b")
            .unsourced(arrays),
    ]);
}

const SORT: &str = "Comparison/Sort Order (type order; arrays by their smallest element \
                    ascending, largest descending; [] below null; a missing field as null; \
                    objects; BinData); sorta.js; sort2.js; sort_array.js; compare_long_double.js; \
                    decimal_find_query.js; date3.js; server6779.js";

#[test]
#[rustfmt::skip]
fn ascending_sort_matches_mongod() {
    // Where undefined sorts no source says; nor how regexes differing in flags order.
    check_sort(1, &[
        "minkey", "empty_array", "null missing array_null", "nan nan_decimal",
        "neg_inf neg_inf_decimal", "int64_min", "int32_min", "neg_zero zero",
        "int_1 decimal_1_0 decimal_1_00 array_1_a", "double_1_5", "int32_max",
        "long_2p53 double_2p53", "long_2p53_plus_1", "int64_max", "double_2p63",
        "pos_inf pos_inf_decimal", "empty_string", "string_upper_a", "string_a", "string_ab",
        "empty_document", "document_a_null", "dbref", "dbref_db", "nested_array",
        "bindata_empty", "bindata_00", "bindata_64", "bindata_func_00", "objectid", "false",
        "true", "date_before_1970", "date_epoch", "timestamp", "regex regex_i", "maxkey",
    ], "undefined", SORT);
}

#[test]
#[rustfmt::skip]
fn descending_sort_matches_mongod() {
    check_sort(-1, &[
        "maxkey", "regex regex_i", "timestamp", "date_epoch", "date_before_1970", "true",
        "false", "objectid", "bindata_func_00", "bindata_64", "bindata_00", "bindata_empty",
        "nested_array", "dbref_db", "dbref", "document_a_null", "empty_document", "string_ab",
        "string_a array_1_a", "string_upper_a", "empty_string", "pos_inf pos_inf_decimal",
        "double_2p63", "int64_max", "long_2p53_plus_1", "long_2p53 double_2p53", "int32_max",
        "double_1_5", "int_1 decimal_1_0 decimal_1_00", "neg_zero zero", "int32_min",
        "int64_min", "neg_inf neg_inf_decimal", "nan nan_decimal", "null missing array_null",
        "empty_array", "minkey",
    ], "undefined", SORT);
}

#[test]
fn edge_operands_mongod_refuses_are_refused() {
    let mut refused: Vec<(Document, &str)> = Vec::new();
    for special in [
        Bson::Double(f64::NAN),
        Bson::Double(f64::INFINITY),
        Bson::Double(1e19),
        decimal("NaN"),
        decimal("Infinity"),
        decimal("1e19"),
    ] {
        let source = "mod_special_values.js";
        refused.push((doc! {"$mod": [special.clone(), 1]}, source));
        refused.push((doc! {"$mod": [1, special]}, source));
    }
    for size in [
        Bson::Int32(-1),
        Bson::Int64(-10000),
        Bson::String("str".into()),
        Bson::Double(3.2),
        Bson::Double(0.1),
        Bson::Int64(i64::MIN),
    ] {
        refused.push((doc! {"$size": size}, "find_size.js"));
    }
    for bits in [
        Bson::Int32(-1),
        Bson::Double(1.5),
        bson::bson!([-1]),
        bson::bson!([1.5]),
    ] {
        let source = "$bitsAllSet (a bitmask or bit positions are non-negative integers)";
        refused.push((doc! {"$bitsAllSet": bits}, source));
    }
    let accepted: Vec<String> = refused
        .iter()
        .filter(|(condition, _)| Filter::parse(&doc! {"a": condition.clone()}).is_ok())
        .map(|(condition, source)| format!("{condition} ({source})"))
        .collect();
    assert!(accepted.is_empty(), "accepted: {}", accepted.join("; "));
}
