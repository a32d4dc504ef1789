//! Set operators (`$setUnion`, `$setIntersection`, `$setDifference`, `$setEquals`,
//! `$setIsSubset`) and `$anyElementTrue`/`$allElementsTrue`, as mongod evaluates them.
//!
//! Invariants: arrays are sets under mongod's value equality (`1`, `1.0` and `NumberLong(1)` are
//! one element; strings compare under the run's collation); nested arrays are elements, never
//! flattened. `$setUnion` and `$setIntersection` answer in BSON order (mongod builds an ordered
//! set), keeping the first representative seen; `$setDifference` keeps the first operand's order.
//! Null rules differ per operator exactly as in mongod: the union, intersection and difference
//! turn a null or missing operand into null; `$setEquals` and `$setIsSubset` refuse it.

use std::cmp::Ordering;

use bson::Bson;

use super::{fail, is_nullish, parse_arguments, truthy, value_type_name, Expr, Op, Scope, Value};
use crate::collation::Collation;
use crate::compare::{compare_values_with, values_equal_with};
use tideway_base::error::{CommandResult, ErrorCode};

/// The set operators that evaluate every argument first (`Op::Set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SetOp {
    Union,
    Intersection,
    Difference,
    Equals,
    IsSubset,
    AnyElementTrue,
    AllElementsTrue,
}

/// `$setEquals` takes two or more arguments; mongod counts them with its own code (17045).
pub(super) fn parse_set_equals(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = parse_arguments(operand, scope)?;
    if arguments.len() < 2 {
        return Err(fail(
            ErrorCode::Location17045,
            format!(
                "$setEquals needs at least two arguments had: {}",
                arguments.len()
            ),
        ));
    }
    Ok(Expr::Op(Op::Set(SetOp::Equals), arguments))
}

pub(super) fn evaluate_set(
    op: SetOp,
    values: Vec<Value>,
    collation: Option<&Collation>,
) -> CommandResult<Value> {
    match op {
        SetOp::Union => union(values, collation),
        SetOp::Intersection => intersection(values, collation),
        SetOp::Difference => difference(values, collation),
        SetOp::Equals => equals(values, collation),
        SetOp::IsSubset => is_subset(values, collation),
        SetOp::AnyElementTrue | SetOp::AllElementsTrue => element_truth(op, values),
    }
}

/// The distinct elements of `elements` in BSON order, the first of equal ones kept.
fn ordered_set(mut elements: Vec<Bson>, collation: Option<&Collation>) -> Vec<Bson> {
    // A stable sort keeps equal elements in input order, so dedup keeps the first seen.
    elements.sort_by(|a, b| compare_values_with(a, b, collation));
    elements.dedup_by(|later, earlier| {
        compare_values_with(earlier, later, collation) == Ordering::Equal
    });
    elements
}

fn contains(set: &[Bson], value: &Bson, collation: Option<&Collation>) -> bool {
    set.binary_search_by(|element| compare_values_with(element, value, collation))
        .is_ok()
}

/// One operand of `$setUnion`/`$setIntersection`: `None` when it makes the result null.
fn variadic_operand(name: &str, code: ErrorCode, value: Value) -> CommandResult<Option<Vec<Bson>>> {
    if is_nullish(&value) {
        return Ok(None);
    }
    match value {
        Some(Bson::Array(elements)) => Ok(Some(elements)),
        other => Err(fail(
            code,
            format!(
                "All operands of {name} must be arrays. One argument is of type: {}",
                value_type_name(&other)
            ),
        )),
    }
}

fn union(values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    let mut all = Vec::new();
    for value in values {
        match variadic_operand("$setUnion", ErrorCode::Location17043, value)? {
            Some(elements) => all.extend(elements),
            None => return Ok(Some(Bson::Null)),
        }
    }
    Ok(Some(Bson::Array(ordered_set(all, collation))))
}

fn intersection(values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    let mut current: Option<Vec<Bson>> = None;
    for value in values {
        let Some(elements) = variadic_operand("$setIntersection", ErrorCode::Location17047, value)?
        else {
            return Ok(Some(Bson::Null));
        };
        current = Some(match current {
            None => ordered_set(elements, collation),
            Some(kept) if kept.is_empty() => kept,
            Some(kept) => {
                // Like mongod, walk the smaller set: its representatives are the ones kept.
                let next = ordered_set(elements, collation);
                let (smaller, larger) = if kept.len() > next.len() {
                    (next, kept)
                } else {
                    (kept, next)
                };
                smaller
                    .into_iter()
                    .filter(|element| contains(&larger, element, collation))
                    .collect()
            }
        });
    }
    Ok(Some(Bson::Array(current.unwrap_or_default())))
}

/// The two operands of a binary set operator, each checked with its own code.
fn two_arrays(
    name: &str,
    values: Vec<Value>,
    codes: (ErrorCode, ErrorCode),
) -> CommandResult<(Vec<Bson>, Vec<Bson>)> {
    let (first, second) = super::two(values)?;
    let array = |value: Value, position: &str, code: ErrorCode| match value {
        Some(Bson::Array(elements)) => Ok(elements),
        other => Err(fail(
            code,
            format!(
                "both operands of {name} must be arrays. {position} argument is of type: {}",
                value_type_name(&other)
            ),
        )),
    };
    let first = array(first, "First", codes.0)?;
    let second = array(second, "Second", codes.1)?;
    Ok((first, second))
}

fn difference(values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let (first, second) = two_arrays(
        "$setDifference",
        values,
        (ErrorCode::Location17048, ErrorCode::Location17049),
    )?;
    // `seen` starts as the second operand: it removes those and the first's duplicates.
    let mut seen = ordered_set(second, collation);
    let mut output = Vec::new();
    for element in first {
        if let Err(at) =
            seen.binary_search_by(|probe| compare_values_with(probe, &element, collation))
        {
            seen.insert(at, element.clone());
            output.push(element);
        }
    }
    Ok(Some(Bson::Array(output)))
}

fn equals(values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    let mut first: Option<Vec<Bson>> = None;
    for (index, value) in values.into_iter().enumerate() {
        let Some(Bson::Array(elements)) = value else {
            return Err(fail(
                ErrorCode::Location17044,
                format!(
                    "All operands of $setEquals must be arrays. {}-th argument is of type: {}",
                    index + 1,
                    value_type_name(&value)
                ),
            ));
        };
        let set = ordered_set(elements, collation);
        match &first {
            None => first = Some(set),
            Some(expected) => {
                let same = expected.len() == set.len()
                    && expected
                        .iter()
                        .zip(&set)
                        .all(|(a, b)| values_equal_with(a, b, collation));
                if !same {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
        }
    }
    Ok(Some(Bson::Boolean(true)))
}

fn is_subset(values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    let (first, second) = two_arrays(
        "$setIsSubset",
        values,
        (ErrorCode::Location17046, ErrorCode::Location17042),
    )?;
    let second = ordered_set(second, collation);
    Ok(Some(Bson::Boolean(
        first
            .iter()
            .all(|element| contains(&second, element, collation)),
    )))
}

fn element_truth(op: SetOp, values: Vec<Value>) -> CommandResult<Value> {
    let (name, code) = if op == SetOp::AnyElementTrue {
        ("$anyElementTrue", ErrorCode::Location17041)
    } else {
        ("$allElementsTrue", ErrorCode::Location17040)
    };
    let value = super::one(values)?;
    let Some(Bson::Array(elements)) = value else {
        return Err(fail(
            code,
            format!(
                "{name}'s argument must be an array, but is {}",
                value_type_name(&value)
            ),
        ));
    };
    let mut truths = elements.into_iter().map(|element| truthy(&Some(element)));
    let result = if op == SetOp::AnyElementTrue {
        truths.any(|truth| truth)
    } else {
        truths.all(|truth| truth)
    };
    Ok(Some(Bson::Boolean(result)))
}

#[cfg(test)]
mod tests {
    //! Expected values from the MongoDB manual's pages for each operator (the `experiments`
    //! collection and the operator tables), errors from mongod's `expression.cpp`.
    use bson::{bson, doc, Bson, Document};

    use super::super::test_support::error;
    use crate::compare::identical_values;
    use crate::expr::fixtures::{assert_value, eval_ok};

    /// The manual's `experiments` collection (`$setUnion`, `$setIntersection`,
    /// `$setDifference`, `$setIsSubset` pages).
    fn experiments() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "A": ["red", "blue"], "B": ["red", "blue"]},
            doc! {"_id": 2, "A": ["red", "blue"], "B": ["blue", "red", "blue"]},
            doc! {"_id": 3, "A": ["red", "blue"], "B": ["red", "blue", "green"]},
            doc! {"_id": 4, "A": ["red", "blue"], "B": ["green", "red"]},
            doc! {"_id": 5, "A": ["red", "blue"], "B": []},
            doc! {"_id": 6, "A": ["red", "blue"], "B": [["red"], ["blue"]]},
            doc! {"_id": 7, "A": ["red", "blue"], "B": [["red", "blue"]]},
            doc! {"_id": 8, "A": [], "B": []},
            doc! {"_id": 9, "A": [], "B": ["red"]},
        ]
    }

    /// The same elements, in any order (the manual leaves the order unspecified).
    #[track_caller]
    fn assert_same_set(actual: Option<Bson>, expected: Bson) {
        let (Some(Bson::Array(actual)), Bson::Array(expected)) = (actual.clone(), expected.clone())
        else {
            panic!("{actual:?} and {expected:?} are not both arrays");
        };
        assert_eq!(actual.len(), expected.len(), "{actual:?} != {expected:?}");
        for element in &expected {
            assert!(
                actual.iter().any(|found| identical_values(found, element)),
                "{element:?} missing from {actual:?}"
            );
        }
    }

    #[test]
    fn experiments_match_the_manual() {
        // (expression, expected per document _id 1..=9)
        let set_cases: [(Bson, [Bson; 9]); 3] = [
            (
                bson!({"$setUnion": ["$A", "$B"]}),
                [
                    bson!(["blue", "red"]),
                    bson!(["blue", "red"]),
                    bson!(["blue", "green", "red"]),
                    bson!(["blue", "green", "red"]),
                    bson!(["blue", "red"]),
                    bson!(["blue", "red", ["red"], ["blue"]]),
                    bson!(["blue", "red", ["red", "blue"]]),
                    bson!([]),
                    bson!(["red"]),
                ],
            ),
            (
                bson!({"$setIntersection": ["$A", "$B"]}),
                [
                    bson!(["blue", "red"]),
                    bson!(["blue", "red"]),
                    bson!(["blue", "red"]),
                    bson!(["red"]),
                    bson!([]),
                    bson!([]),
                    bson!([]),
                    bson!([]),
                    bson!([]),
                ],
            ),
            (
                bson!({"$setDifference": ["$B", "$A"]}),
                [
                    bson!([]),
                    bson!([]),
                    bson!(["green"]),
                    bson!(["green"]),
                    bson!([]),
                    bson!([["red"], ["blue"]]),
                    bson!([["red", "blue"]]),
                    bson!([]),
                    bson!(["red"]),
                ],
            ),
        ];
        for (expression, expected) in set_cases {
            for (document, expected) in experiments().iter().zip(expected) {
                assert_same_set(eval_ok(expression.clone(), document), expected);
            }
        }
        let subset = [true, true, true, false, false, false, false, true, true];
        for (document, expected) in experiments().iter().zip(subset) {
            assert_value(
                eval_ok(bson!({"$setIsSubset": ["$A", "$B"]}), document),
                Bson::Boolean(expected),
            );
        }
    }

    #[test]
    fn operator_tables_match_the_manual() {
        let empty = Document::new();
        // (expression, expected); arrays compared as sets.
        let cases = [
            (
                bson!({"$setUnion": [["a", "b", "a"], ["b", "a"]]}),
                bson!(["b", "a"]),
            ),
            (
                bson!({"$setUnion": [["a", "b"], [["a", "b"]]]}),
                bson!([["a", "b"], "b", "a"]),
            ),
            (
                bson!({"$setIntersection": [["a", "b", "a"], ["b", "a"]]}),
                bson!(["b", "a"]),
            ),
            (
                bson!({"$setIntersection": [["a", "b"], [["a", "b"]]]}),
                bson!([]),
            ),
            (
                bson!({"$setDifference": [["a", "b", "a"], ["b", "a"]]}),
                bson!([]),
            ),
            (
                bson!({"$setDifference": [["a", "b"], [["a", "b"]]]}),
                bson!(["a", "b"]),
            ),
        ];
        for (expression, expected) in cases {
            assert_same_set(eval_ok(expression, &empty), expected);
        }
        let booleans = [
            (bson!({"$setEquals": [["a", "b", "a"], ["b", "a"]]}), true),
            (bson!({"$setEquals": [["a", "b"], [["a", "b"]]]}), false),
            (bson!({"$setIsSubset": [["a", "b", "a"], ["b", "a"]]}), true),
            (bson!({"$setIsSubset": [["a", "b"], [["a", "b"]]]}), false),
            (bson!({"$allElementsTrue": [[true, 1, "someString"]]}), true),
            (bson!({"$allElementsTrue": [[[false]]]}), true),
            (bson!({"$allElementsTrue": [[]]}), true),
            (bson!({"$allElementsTrue": [[null, false, 0]]}), false),
            (bson!({"$anyElementTrue": [[true, false]]}), true),
            (bson!({"$anyElementTrue": [[[false]]]}), true),
            (bson!({"$anyElementTrue": [[null, false, 0]]}), false),
            (bson!({"$anyElementTrue": [[]]}), false),
        ];
        for (expression, expected) in booleans {
            assert_value(eval_ok(expression, &empty), Bson::Boolean(expected));
        }
    }

    #[test]
    fn set_equals_matches_the_bakery_orders_example() {
        // The `$setEquals` page: cakes vs cupcakes.
        let cases = [
            (
                bson!(["chocolate", "vanilla"]),
                bson!(["chocolate", "vanilla"]),
                true,
            ),
            (
                bson!(["chocolate", "vanilla"]),
                bson!(["vanilla", "chocolate"]),
                true,
            ),
            (
                bson!(["chocolate", "chocolate"]),
                bson!(["chocolate"]),
                true,
            ),
            (bson!(["vanilla"]), bson!(["chocolate"]), false),
            (bson!(["vanilla"]), bson!([]), false),
        ];
        for (cakes, cupcakes, expected) in cases {
            let document = doc! {"cakes": cakes, "cupcakes": cupcakes};
            assert_value(
                eval_ok(bson!({"$setEquals": ["$cakes", "$cupcakes"]}), &document),
                Bson::Boolean(expected),
            );
        }
    }

    #[test]
    fn survey_responses_match_the_manual() {
        // The `$allElementsTrue`/`$anyElementTrue` pages' survey collection: (responses, all, any).
        let cases = [
            (bson!([true]), true, true),
            (bson!([true, false]), false, true),
            (bson!([]), true, false),
            (bson!([1, true, "seven"]), true, true),
            (bson!([0]), false, false),
            (bson!([[]]), true, true),
            (bson!([[0]]), true, true),
            (bson!([[false]]), true, true),
            (bson!([null]), false, false),
            (Bson::Array(vec![Bson::Undefined]), false, false),
        ];
        for (responses, all, any) in cases {
            let document = doc! {"responses": responses};
            assert_value(
                eval_ok(bson!({"$allElementsTrue": ["$responses"]}), &document),
                Bson::Boolean(all),
            );
            assert_value(
                eval_ok(bson!({"$anyElementTrue": ["$responses"]}), &document),
                Bson::Boolean(any),
            );
        }
    }

    #[test]
    fn results_use_value_equality_and_bson_order() {
        let empty = Document::new();
        // One element for 1, 1.0 and NumberLong(1); the first seen is kept.
        assert_value(
            eval_ok(bson!({"$setUnion": [[3, 1.0, "x"], [1_i64, 2, 3]]}), &empty),
            bson!([1.0, 2, 3, "x"]),
        );
        assert_value(
            eval_ok(
                bson!({"$setIntersection": [[3, 2, 1], [1.0, 3_i64]]}),
                &empty,
            ),
            bson!([1.0, 3_i64]),
        );
        // The difference keeps the first operand's order, without its duplicates.
        assert_value(
            eval_ok(bson!({"$setDifference": [[5, 1, 5, 4, 1], [4]]}), &empty),
            bson!([5, 1]),
        );
        assert_value(eval_ok(bson!({"$setUnion": []}), &empty), bson!([]));
        assert_value(eval_ok(bson!({"$setIntersection": []}), &empty), bson!([]));
        assert_value(
            eval_ok(
                bson!({"$setEquals": [[1, 2], [2.0, 1], [1_i64, 2, 2]]}),
                &empty,
            ),
            Bson::Boolean(true),
        );
    }

    #[test]
    fn null_and_missing_follow_each_operators_rule() {
        let empty = Document::new();
        for expression in [
            bson!({"$setUnion": [[1], null]}),
            bson!({"$setUnion": ["$missing", [1]]}),
            bson!({"$setUnion": [null, 1]}),
            bson!({"$setIntersection": [[1], "$missing"]}),
            bson!({"$setDifference": [null, [1]]}),
            bson!({"$setDifference": [[1], "$missing"]}),
            bson!({"$setDifference": [1, null]}),
        ] {
            assert_value(eval_ok(expression, &empty), Bson::Null);
        }
    }

    #[test]
    fn errors_carry_mongods_codes_and_messages() {
        let cases = [
            (
                bson!({"$setUnion": [1, null]}),
                17043,
                "All operands of $setUnion must be arrays. One argument is of type: int",
            ),
            (
                bson!({"$setIntersection": [[1], "x"]}),
                17047,
                "All operands of $setIntersection must be arrays. One argument is of type: string",
            ),
            (
                bson!({"$setDifference": [1, [2]]}),
                17048,
                "both operands of $setDifference must be arrays. First argument is of type: int",
            ),
            (
                bson!({"$setDifference": [[1], 2]}),
                17049,
                "both operands of $setDifference must be arrays. Second argument is of type: int",
            ),
            (
                bson!({"$setEquals": [[1], null]}),
                17044,
                "All operands of $setEquals must be arrays. 2-th argument is of type: null",
            ),
            (
                bson!({"$setEquals": ["$missing", [1]]}),
                17044,
                "All operands of $setEquals must be arrays. 1-th argument is of type: missing",
            ),
            (
                bson!({"$setEquals": [[1]]}),
                17045,
                "$setEquals needs at least two arguments had: 1",
            ),
            (
                bson!({"$setIsSubset": [null, [1]]}),
                17046,
                "both operands of $setIsSubset must be arrays. First argument is of type: null",
            ),
            (
                bson!({"$setIsSubset": [[1], "$missing"]}),
                17042,
                "both operands of $setIsSubset must be arrays. Second argument is of type: missing",
            ),
            (
                bson!({"$allElementsTrue": [1]}),
                17040,
                "$allElementsTrue's argument must be an array, but is int",
            ),
            (
                bson!({"$anyElementTrue": ["$missing"]}),
                17041,
                "$anyElementTrue's argument must be an array, but is missing",
            ),
            (
                bson!({"$setDifference": [[1]]}),
                16020,
                "Expression $setDifference takes exactly 2 arguments. 1 were passed in.",
            ),
            (
                bson!({"$allElementsTrue": [[true], [true]]}),
                16020,
                "Expression $allElementsTrue takes exactly 1 arguments. 2 were passed in.",
            ),
        ];
        for (expression, code, message) in cases {
            let failure = error(expression.clone());
            assert_eq!(failure.code.code(), code, "{expression}");
            assert_eq!(failure.errmsg, message, "{expression}");
        }
    }
}
