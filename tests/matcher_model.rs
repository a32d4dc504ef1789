//! The query matcher against a deliberately simple reference evaluator of MongoDB's documented
//! rules, on random documents and filters: top-level fields holding nothing, null, numbers of
//! two types, strings, booleans or flat arrays of those, under comparison, `$in`/`$nin`,
//! `$exists`, `$type`, `$size`, `$not` and the logical operators. The reference is written from
//! the documentation (array fields match when an element does; `null` matches missing; ranges
//! compare within one type bracket), not from the matcher.
//!
//! Longer runs: `TIDEWAY_MATCHER_SEED=<n> TIDEWAY_MATCHER_CASES=<n> cargo test --test matcher_model`.

mod common;

use bson::{doc, Bson, Document};
use common::Rng;
use tideway_query::Filter;

const FIELDS: [&str; 2] = ["a", "b"];

fn scalars() -> Vec<Bson> {
    vec![
        Bson::Null,
        Bson::Int32(-1),
        Bson::Int32(0),
        Bson::Int32(1),
        Bson::Int32(2),
        Bson::Double(0.5),
        Bson::Double(1.0),
        Bson::Double(2.0),
        Bson::String("x".into()),
        Bson::String("y".into()),
        Bson::Boolean(false),
        Bson::Boolean(true),
    ]
}

fn random_value(rng: &mut Rng) -> Option<Bson> {
    match rng.below(6) {
        0 => None,
        1 => Some(Bson::Array(
            (0..rng.below(4)).map(|_| rng.pick(&scalars())).collect(),
        )),
        _ => Some(rng.pick(&scalars())),
    }
}

fn random_document(rng: &mut Rng) -> Document {
    let mut document = Document::new();
    for field in FIELDS {
        if let Some(value) = random_value(rng) {
            document.insert(field, value);
        }
    }
    document
}

/// One condition on a field, as the filter document spells it.
fn random_condition(rng: &mut Rng) -> Bson {
    let operand = rng.pick(&scalars());
    let list = |rng: &mut Rng| -> Vec<Bson> {
        (0..1 + rng.below(3))
            .map(|_| rng.pick(&scalars()))
            .collect()
    };
    match rng.below(13) {
        0 => operand,
        1 => Bson::Document(doc! {"$eq": operand}),
        2 => Bson::Document(doc! {"$ne": operand}),
        3 => Bson::Document(doc! {"$gt": operand}),
        4 => Bson::Document(doc! {"$gte": operand}),
        5 => Bson::Document(doc! {"$lt": operand}),
        6 => Bson::Document(doc! {"$lte": operand}),
        7 => Bson::Document(doc! {"$in": list(rng)}),
        8 => Bson::Document(doc! {"$nin": list(rng)}),
        9 => Bson::Document(doc! {"$exists": rng.below(2) == 0}),
        10 => Bson::Document(doc! {"$size": rng.below(4) as i32}),
        11 => {
            Bson::Document(doc! {"$type": rng.pick(&["number", "string", "null", "array", "bool"])})
        }
        _ => {
            let Bson::Document(inner) = random_condition(rng) else {
                return Bson::Document(doc! {"$not": {"$eq": operand}});
            };
            Bson::Document(doc! {"$not": inner})
        }
    }
}

fn random_filter(rng: &mut Rng, depth: usize) -> Document {
    match rng.below(if depth == 0 { 6 } else { 4 }) {
        4 => {
            let operator = rng.pick(&["$and", "$or", "$nor"]);
            let clauses: Vec<Bson> = (0..1 + rng.below(3))
                .map(|_| Bson::Document(random_filter(rng, depth + 1)))
                .collect();
            doc! {operator: clauses}
        }
        5 => {
            let mut both = random_filter(rng, depth + 1);
            both.extend(random_filter(rng, depth + 1));
            both
        }
        _ => doc! {rng.pick(&FIELDS): random_condition(rng)},
    }
}

// ---- the reference ------------------------------------------------------------------------

/// The type bracket a comparison stays within (numbers compare across int and double).
fn bracket(value: &Bson) -> u8 {
    match value {
        Bson::Null => 0,
        Bson::Int32(_) | Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Boolean(_) => 3,
        _ => 4,
    }
}

fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(v) => Some(f64::from(*v)),
        Bson::Double(v) => Some(*v),
        _ => None,
    }
}

/// `Some(ordering)` for two scalars of one bracket; `None` across brackets.
fn compare(a: &Bson, b: &Bson) -> Option<std::cmp::Ordering> {
    if bracket(a) != bracket(b) {
        return None;
    }
    match (a, b) {
        (Bson::Null, Bson::Null) => Some(std::cmp::Ordering::Equal),
        (Bson::String(x), Bson::String(y)) => Some(x.cmp(y)),
        (Bson::Boolean(x), Bson::Boolean(y)) => Some(x.cmp(y)),
        _ => number(a)?.partial_cmp(&number(b)?),
    }
}

/// A comparison operator on one scalar (an array element or the field's value).
fn scalar_satisfies(operator: &str, value: &Bson, operand: &Bson) -> bool {
    let order = compare(value, operand);
    match operator {
        "$eq" => order == Some(std::cmp::Ordering::Equal),
        "$gt" => order == Some(std::cmp::Ordering::Greater),
        "$gte" => matches!(
            order,
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        ),
        "$lt" => order == Some(std::cmp::Ordering::Less),
        "$lte" => matches!(
            order,
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        ),
        _ => unreachable!("{operator}"),
    }
}

/// `{field: {operator: operand}}` for the comparison operators: a missing field is null for
/// `$eq`, `$gte` and `$lte` against null; an array field matches when an element does.
fn field_compares(operator: &str, field: Option<&Bson>, operand: &Bson) -> bool {
    match field {
        None => matches!(operand, Bson::Null) && matches!(operator, "$eq" | "$gte" | "$lte"),
        Some(Bson::Array(elements)) => elements
            .iter()
            .any(|element| scalar_satisfies(operator, element, operand)),
        Some(value) => scalar_satisfies(operator, value, operand),
    }
}

fn type_matches(alias: &str, value: &Bson) -> bool {
    match alias {
        "number" => number(value).is_some(),
        "string" => matches!(value, Bson::String(_)),
        "null" => matches!(value, Bson::Null),
        "bool" => matches!(value, Bson::Boolean(_)),
        "array" => matches!(value, Bson::Array(_)),
        _ => unreachable!("{alias}"),
    }
}

fn condition_holds(field: Option<&Bson>, condition: &Bson) -> bool {
    let Bson::Document(operators) = condition else {
        return field_compares("$eq", field, condition);
    };
    operators.iter().all(|(operator, operand)| match operator.as_str() {
        "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => field_compares(operator, field, operand),
        "$ne" => !field_compares("$eq", field, operand),
        "$in" => operand
            .as_array()
            .unwrap()
            .iter()
            .any(|item| field_compares("$eq", field, item)),
        "$nin" => !operand
            .as_array()
            .unwrap()
            .iter()
            .any(|item| field_compares("$eq", field, item)),
        "$exists" => field.is_some() == operand.as_bool().unwrap(),
        "$size" => matches!(field, Some(Bson::Array(elements)) if elements.len() as i32 == operand.as_i32().unwrap()),
        "$type" => {
            let alias = operand.as_str().unwrap();
            match field {
                None => false,
                Some(Bson::Array(elements)) => {
                    alias == "array" || elements.iter().any(|element| type_matches(alias, element))
                }
                Some(value) => type_matches(alias, value),
            }
        }
        "$not" => !condition_holds(field, operand),
        _ => unreachable!("{operator}"),
    })
}

fn reference_matches(filter: &Document, document: &Document) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        "$and" | "$or" | "$nor" => {
            let clauses = value.as_array().unwrap();
            let mut results = clauses
                .iter()
                .map(|clause| reference_matches(clause.as_document().unwrap(), document));
            match key.as_str() {
                "$and" => results.all(|matched| matched),
                "$or" => results.any(|matched| matched),
                _ => !results.any(|matched| matched),
            }
        }
        field => condition_holds(document.get(field), value),
    })
}

#[test]
fn the_matcher_agrees_with_the_reference_model() {
    let env_number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<u64>().ok())
    };
    let mut rng = Rng(env_number("TIDEWAY_MATCHER_SEED").unwrap_or(0x00C0_FFEE) | 1);
    let cases = env_number("TIDEWAY_MATCHER_CASES").unwrap_or(20_000);
    let mut matched = 0;
    for _ in 0..cases {
        let filter_document = random_filter(&mut rng, 0);
        let document = random_document(&mut rng);
        let filter = Filter::parse(&filter_document)
            .unwrap_or_else(|error| panic!("{filter_document} should parse: {error:?}"));
        let expected = reference_matches(&filter_document, &document);
        assert_eq!(
            filter.matches(&document),
            expected,
            "filter {filter_document} on {document}"
        );
        matched += usize::from(expected);
    }
    // The generator makes both outcomes common (a test that can fail both ways).
    assert!(
        matched > cases as usize / 10 && matched < cases as usize * 9 / 10,
        "{matched} of {cases} matched"
    );
}
