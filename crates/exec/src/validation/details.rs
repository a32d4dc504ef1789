//! The `details` of a 121 DocumentValidationFailure for a validator written in the query
//! language, shaped as mongod's `doc_validation_error` generator shapes them: logical operators
//! list the clauses that decided (`clausesNotSatisfied`, or `clausesSatisfied` under a
//! negation), leaves report `operatorName`, `specifiedAs`, `reason` and the values considered.
//!
//! The validator is walked as written (it was parsed once already, so it is well formed); which
//! clauses failed is decided by matching each one alone. Only called once a document has failed
//! validation. `inverted` follows mongod: under `$nor`/`$not` an error describes what matched.
//! Recursion follows the validator's nesting, bounded where the validator entered the server.

use bson::{doc, Bson, Document};

use tideway_query::json_schema::JsonSchema;
use tideway_query::path::{get_path, lookup, lookup_values, split_path, LeafArrays};
use tideway_query::Filter;

/// The explanation of why `document` fails `validator` (a well-formed filter document).
pub fn explain(validator: &Document, document: &Document) -> Document {
    explain_filter(validator, document, false)
}

/// One clause of a filter document: a top-level operator (`$and: [...]`) or one operator of
/// a path (`{a: {$gt: 1}}` gives `a`, `$gt`, `1`; `{a: 1}` gives `a`, `$eq`, `1` written bare).
enum Clause<'a> {
    Logical(&'a str, &'a Bson),
    Leaf {
        path: &'a str,
        operator: &'a str,
        operand: &'a Bson,
        /// `{a: 1}` rather than `{a: {$eq: 1}}` (and `{a: /re/}`): `specifiedAs` as written.
        bare: bool,
        /// The `$options` beside a `$regex`.
        options: Option<&'a Bson>,
    },
}

fn clauses(filter: &Document) -> Vec<Clause<'_>> {
    let mut clauses = Vec::new();
    for (key, value) in filter {
        if key == "$comment" {
            continue;
        }
        if key.starts_with('$') {
            clauses.push(Clause::Logical(key, value));
            continue;
        }
        match value {
            Bson::Document(operators)
                if operators.keys().next().is_some_and(|k| k.starts_with('$')) =>
            {
                let has_regex = operators.contains_key("$regex");
                for (operator, operand) in operators {
                    // `$options` belongs to `$regex`.
                    if operator == "$options" && has_regex {
                        continue;
                    }
                    clauses.push(Clause::Leaf {
                        path: key,
                        operator,
                        operand,
                        bare: false,
                        options: (operator == "$regex")
                            .then(|| operators.get("$options"))
                            .flatten(),
                    });
                }
            }
            Bson::RegularExpression(_) => clauses.push(Clause::Leaf {
                path: key,
                operator: "$regex",
                operand: value,
                bare: true,
                options: None,
            }),
            _ => clauses.push(Clause::Leaf {
                path: key,
                operator: "$eq",
                operand: value,
                bare: true,
                options: None,
            }),
        }
    }
    clauses
}

impl Clause<'_> {
    /// The clause alone, as a filter document.
    fn as_filter(&self) -> Document {
        match self {
            Clause::Logical(operator, operand) => doc! {*operator: (*operand).clone()},
            Clause::Leaf {
                path,
                operator,
                operand,
                bare,
                options,
            } => {
                if *bare {
                    doc! {*path: (*operand).clone()}
                } else if let Some(options) = options {
                    doc! {*path: {"$regex": (*operand).clone(), "$options": (*options).clone()}}
                } else {
                    doc! {*path: {*operator: (*operand).clone()}}
                }
            }
        }
    }

    fn matches(&self, document: &Document) -> bool {
        matches(&self.as_filter(), document)
    }
}

/// Whether `document` matches `filter`; a filter that fails to evaluate does not match.
fn matches(filter: &Document, document: &Document) -> bool {
    Filter::parse(filter)
        .and_then(|filter| filter.try_matches(document))
        .unwrap_or(false)
}

fn explain_filter(filter: &Document, document: &Document, inverted: bool) -> Document {
    let clauses = clauses(filter);
    if clauses.len() == 1 {
        return explain_clause(&clauses[0], document, inverted);
    }
    // An implicit `$and` of the clauses (mongod's parser builds an `$and` root).
    explain_list("$and", &clauses, document, inverted)
}

/// `$and`/`$or`/`$nor` over `clauses`: the clauses that decided, by index.
fn explain_list(
    operator: &str,
    clauses: &[Clause],
    document: &Document,
    inverted: bool,
) -> Document {
    // Under a negation `$and` and `$or` swap roles, and `$nor` is an `$or` whose clauses are
    // described in the opposite sense.
    let (child_inverted, wanted_match) = match (operator, inverted) {
        ("$and", false) => (false, Some(false)),
        ("$and", true) => (true, None),
        ("$or", false) => (false, None),
        ("$or", true) => (true, Some(true)),
        (_, false) => (true, Some(true)),
        (_, true) => (false, None),
    };
    let entries: Vec<Document> = clauses
        .iter()
        .enumerate()
        .filter(|(_, clause)| wanted_match.is_none_or(|want| clause.matches(document) == want))
        .map(|(index, clause)| {
            doc! {
                "index": index as i32,
                "details": explain_clause(clause, document, child_inverted),
            }
        })
        .collect();
    let key = if child_inverted {
        "clausesSatisfied"
    } else {
        "clausesNotSatisfied"
    };
    doc! {"operatorName": operator, key: entries}
}

fn explain_clause(clause: &Clause, document: &Document, inverted: bool) -> Document {
    match clause {
        Clause::Logical(operator, operand) => {
            explain_logical(operator, operand, document, inverted)
        }
        Clause::Leaf {
            path,
            operator,
            operand,
            ..
        } => explain_leaf(clause, path, operator, operand, document, inverted),
    }
}

fn explain_logical(
    operator: &str,
    operand: &Bson,
    document: &Document,
    inverted: bool,
) -> Document {
    match (operator, operand) {
        ("$and" | "$or" | "$nor", Bson::Array(children)) => {
            let filters: Vec<&Document> = children
                .iter()
                .filter_map(|child| match child {
                    Bson::Document(child) => Some(child),
                    _ => None,
                })
                .collect();
            // A one-clause `$and`/`$or` is its clause (mongod's optimizer removes it).
            if filters.len() == 1 && operator != "$nor" {
                return explain_filter(filters[0], document, inverted);
            }
            // Each element is one clause, indexed by its position in the array.
            let as_clauses: Vec<Clause> = children
                .iter()
                .map(|child| Clause::Logical("$and", child))
                .collect();
            explain_list(operator, &as_clauses, document, inverted)
        }
        // An element of a logical array (see above): the filter it is.
        ("$and", Bson::Document(child)) => explain_filter(child, document, inverted),
        ("$expr", expression) => {
            let mut details = doc! {
                "operatorName": "$expr",
                "specifiedAs": {"$expr": expression.clone()},
            };
            let evaluated =
                tideway_query::expr::evaluate_once(expression, document, bson::DateTime::now());
            match evaluated {
                Ok(value) => {
                    details.insert(
                        "reason",
                        if inverted {
                            "expression did match"
                        } else {
                            "expression did not match"
                        },
                    );
                    if let Some(value) = value {
                        details.insert("expressionResult", value);
                    }
                }
                Err(error) => {
                    details.insert("reason", "failed to evaluate aggregation expression");
                    details.insert(
                        "details",
                        doc! {
                            "code": error.code.code(),
                            "codeName": error.code.name(),
                            "errmsg": error.errmsg,
                        },
                    );
                }
            }
            details
        }
        ("$jsonSchema", schema) => match JsonSchema::parse(schema) {
            Ok(schema) if !inverted => schema.failure_details(document),
            _ => doc! {"operatorName": "$jsonSchema", "reason": "schema matched"},
        },
        ("$alwaysFalse" | "$alwaysTrue", value) => doc! {
            "operatorName": operator,
            "specifiedAs": {operator: value.clone()},
            "reason": if inverted {
                "expression always evaluates to true"
            } else {
                "expression always evaluates to false"
            },
        },
        // Not produced by a validator tideway accepts; described by name only.
        (other, value) => doc! {"operatorName": other, "specifiedAs": {other: value.clone()}},
    }
}

/// Reasons (normal, inverted) and the value types a leaf operator is about (`None`: any), and
/// whether it considers the value at the path itself rather than each element of a leaf array.
struct LeafRule {
    normal: &'static str,
    inverted: &'static str,
    expected: Option<&'static [&'static str]>,
    whole_value: bool,
}

const NUMBERS: &[&str] = &["decimal", "double", "int", "long"];

fn leaf_rule(operator: &str) -> LeafRule {
    let rule = |normal, inverted, expected, whole_value| LeafRule {
        normal,
        inverted,
        expected,
        whole_value,
    };
    match operator {
        "$in" => rule(
            "no matching value found in array",
            "matching value found in array",
            None,
            false,
        ),
        "$nin" => rule(
            "matching value found in array",
            "no matching value found in array",
            None,
            false,
        ),
        "$ne" => rule("comparison succeeded", "comparison failed", None, false),
        "$regex" => rule(
            "regular expression did not match",
            "regular expression did match",
            Some(&["regex", "string", "symbol"]),
            false,
        ),
        "$mod" => rule(
            "$mod did not evaluate to expected remainder",
            "$mod did evaluate to expected remainder",
            Some(NUMBERS),
            false,
        ),
        "$size" => rule(
            "array length was not equal to given size",
            "array length was equal to given size",
            Some(&["array"]),
            true,
        ),
        "$elemMatch" => rule(
            "array did not satisfy the child predicate",
            "array did satisfy the child predicate",
            Some(&["array"]),
            true,
        ),
        "$all" => rule(
            "array did not contain all specified values",
            "array did contain all specified values",
            None,
            true,
        ),
        "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => rule(
            "bitwise operator failed to match",
            "bitwise operator matched successfully",
            Some(&["binData", "decimal", "double", "int", "long"]),
            false,
        ),
        "$type" => rule("type did not match", "type did match", None, false),
        // `$eq $gt $gte $lt $lte` and anything else compared.
        _ => rule("comparison failed", "comparison succeeded", None, false),
    }
}

fn explain_leaf(
    clause: &Clause,
    path: &str,
    operator: &str,
    operand: &Bson,
    document: &Document,
    inverted: bool,
) -> Document {
    let specified = clause.as_filter();
    if operator == "$not" {
        let child = match operand {
            Bson::Document(child) => doc! {path: child.clone()},
            other => doc! {path: other.clone()},
        };
        return doc! {
            "operatorName": "$not",
            "specifiedAs": specified,
            "details": explain_filter(&child, document, !inverted),
        };
    }
    if operator == "$exists" {
        // `{$exists: false}` fails when the path exists: described as a negated `$exists`.
        let wants = true_value(operand);
        let reason = if wants != inverted {
            "path does not exist"
        } else {
            "path does exist"
        };
        return doc! {"operatorName": "$exists", "specifiedAs": specified, "reason": reason};
    }
    let rule = leaf_rule(operator);
    let mut details = doc! {"operatorName": operator, "specifiedAs": specified};
    let parts = split_path(path);
    let exists = lookup(document, &parts, LeafArrays::ExpandAndSelf)
        .iter()
        .any(|candidate| candidate.value.is_some());
    if !exists {
        details.insert("reason", "field was missing");
        return details;
    }
    let values: Vec<Bson> = if rule.whole_value {
        get_path(document, &parts).into_iter().cloned().collect()
    } else {
        lookup_values(document, path).into_iter().cloned().collect()
    };
    let types = |values: &[Bson]| -> Vec<&'static str> {
        let mut names: Vec<&'static str> = values
            .iter()
            .map(tideway_base::display::type_name)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    };
    let mut type_mismatch = false;
    if let Some(expected) = rule.expected {
        if !values
            .iter()
            .any(|value| expected.contains(&tideway_base::display::type_name(value)))
        {
            type_mismatch = true;
            details.insert("reason", "type did not match");
            insert_types(&mut details, &types(&values));
            if expected.len() == 1 {
                details.insert("expectedType", expected[0]);
            } else {
                details.insert("expectedTypes", expected.to_vec());
            }
        }
    }
    if !type_mismatch {
        details.insert("reason", if inverted { rule.inverted } else { rule.normal });
    }
    match values.as_slice() {
        [single] => {
            details.insert("consideredValue", single.clone());
        }
        many => {
            details.insert("consideredValues", many.to_vec());
        }
    }
    if operator == "$type" {
        insert_types(&mut details, &types(&values));
    }
    details
}

/// mongod's `BSONElement::trueValue`: false for `false`, zero, null and undefined.
fn true_value(value: &Bson) -> bool {
    match value {
        Bson::Boolean(flag) => *flag,
        Bson::Null | Bson::Undefined => false,
        number => tideway_base::bsonutil::as_f64(number).is_none_or(|n| n != 0.0),
    }
}

/// `consideredType` for one type name, `consideredTypes` for several (sorted, as mongod's set).
fn insert_types(details: &mut Document, names: &[&'static str]) {
    match names {
        [] => {}
        [one] => {
            details.insert("consideredType", *one);
        }
        many => {
            details.insert("consideredTypes", many.to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jstests/core/doc_validation/doc_validation_options.js: `{a: 1}` against `{_id: 1, a: 2}`.
    #[test]
    fn a_single_equality_is_reported_alone() {
        assert_eq!(
            explain(&doc! {"a": 1}, &doc! {"_id": 1, "a": 2}),
            doc! {"operatorName": "$eq", "specifiedAs": {"a": 1}, "reason": "comparison failed", "consideredValue": 2}
        );
    }

    /// doc_validation_error.js, "Contacts" (from the manual's schema validation page).
    #[test]
    fn or_lists_every_clause() {
        let validator = doc! {"$or": [
            {"phone": {"$type": "string"}},
            {"email": {"$regex": bson::Regex { pattern: "@mongodb\\.com$".into(), options: String::new() }}},
            {"status": {"$in": ["Unknown", "Incomplete"]}},
        ]};
        let expected = doc! {
            "operatorName": "$or",
            "clausesNotSatisfied": [
                {"index": 0, "details": {"operatorName": "$type", "specifiedAs": {"phone": {"$type": "string"}}, "reason": "field was missing"}},
                {"index": 1, "details": {
                    "operatorName": "$regex",
                    "specifiedAs": {"email": {"$regex": bson::Regex { pattern: "@mongodb\\.com$".into(), options: String::new() }}},
                    "reason": "regular expression did not match",
                    "consideredValue": "info@mongodb.co",
                }},
                {"index": 2, "details": {"operatorName": "$in", "specifiedAs": {"status": {"$in": ["Unknown", "Incomplete"]}}, "reason": "field was missing"}},
            ],
        };
        assert_eq!(
            explain(&validator, &doc! {"email": "info@mongodb.co"}),
            expected
        );
    }

    /// doc_validation_error.js, "Duplicate check in an array" (SERVER-1068).
    #[test]
    fn expr_reports_its_result() {
        let expr = doc! {"$eq": [{"$size": "$a.b"}, {"$size": {"$setUnion": "$a.b"}}]};
        assert_eq!(
            explain(
                &doc! {"$expr": expr.clone()},
                &doc! {"a": [{"b": 1}, {"b": 1}]}
            ),
            doc! {"operatorName": "$expr", "specifiedAs": {"$expr": expr}, "reason": "expression did not match", "expressionResult": false}
        );
    }
}
