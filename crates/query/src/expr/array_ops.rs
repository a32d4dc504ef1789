//! More array operators: `$reduce` (binding `$$this`/`$$value`), `$zip`, `$range`,
//! `$indexOfArray`, `$sortArray`, and `$firstN`/`$lastN`/`$minN`/`$maxN` as expressions.
//!
//! Invariants: a null or missing array input gives null (except `$range`, which refuses it, as
//! mongod does); element comparisons (`$indexOfArray`, `$sortArray`, `$minN`/`$maxN`) use the
//! run's collation. The N expressions fold the array through the accumulator states
//! ([`AccumulatorState`]) so both forms keep one set of rules; their `n` is evaluated per
//! document and checked as the accumulators check a constant one. `$sortArray` is stable.

use bson::Bson;

use super::accumulator::{AccumulatorOp, AccumulatorState};
use super::accumulator_n::{n_arguments, n_operator, n_value};
use super::string_search::index_argument;
use super::variables::with_variable;
use super::{evaluate, fail, is_nullish, parse, value_type_name, Expr, Scope, Value, Vars};
use crate::collation::Collation;
use crate::compare::{compare_values_with, values_equal_with};
use crate::numeric::Number;
use crate::{Direction, SortSpec};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

/// Bytes `$range` may allocate (mongod's `internalQueryMaxRangeBytes` default).
const MAX_RANGE_BYTES: i64 = 64 * 1024 * 1024;

/// How `$sortArray` orders elements.
#[derive(Clone, Debug)]
pub(crate) enum SortBy {
    /// `sortBy: 1` / `-1`: whole values.
    Values { descending: bool },
    /// `sortBy: {field: ±1, ...}`: documents by their fields (as `$sort` takes them), other values
    /// as if every field were null.
    Fields(SortSpec),
}

/// The fields of an object-form operator's operand, refusing a non-object and unknown names.
fn object_fields<'a>(
    operand: &'a Bson,
    allowed: &[&str],
    not_object: (ErrorCode, &str),
    unknown: (ErrorCode, &str),
) -> CommandResult<Vec<(&'a str, &'a Bson)>> {
    let Bson::Document(document) = operand else {
        return Err(fail(
            not_object.0,
            format!("{}{}", not_object.1, type_name(operand)),
        ));
    };
    document
        .iter()
        .map(|(name, value)| {
            if allowed.contains(&name.as_str()) {
                Ok((name.as_str(), value))
            } else {
                Err(fail(unknown.0, format!("{}{name}", unknown.1)))
            }
        })
        .collect()
}

fn field<'a>(fields: &[(&str, &'a Bson)], name: &str) -> Option<&'a Bson> {
    fields
        .iter()
        .find(|(found, _)| *found == name)
        .map(|(_, value)| *value)
}

fn required<'a>(
    fields: &[(&str, &'a Bson)],
    name: &str,
    code: ErrorCode,
    message: &str,
) -> CommandResult<&'a Bson> {
    field(fields, name).ok_or_else(|| fail(code, message))
}

// ----- $reduce -------------------------------------------------------------------------------

pub(super) fn parse_reduce(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let fields = object_fields(
        operand,
        &["input", "initialValue", "in"],
        (
            ErrorCode::Location40075,
            "$reduce requires an object as an argument, found: ",
        ),
        (
            ErrorCode::Location40076,
            "$reduce found an unknown argument: ",
        ),
    )?;
    let input = required(
        &fields,
        "input",
        ErrorCode::Location40077,
        "$reduce requires 'input' to be specified",
    )?;
    let initial = required(
        &fields,
        "initialValue",
        ErrorCode::Location40078,
        "$reduce requires 'initialValue' to be specified",
    )?;
    let body = required(
        &fields,
        "in",
        ErrorCode::Location40079,
        "$reduce requires 'in' to be specified",
    )?;
    let input = Box::new(parse(input, scope)?);
    let initial = Box::new(parse(initial, scope)?);
    let body = with_variable(scope, "this", |scope| {
        with_variable(scope, "value", |scope| parse(body, scope))
    })?;
    Ok(Expr::Reduce {
        input,
        initial,
        body: Box::new(body),
    })
}

/// `$reduce`: `body` folded over the elements with `$$value` the running value (starting at
/// `initial`) and `$$this` the element; a missing running value stays missing.
pub(super) fn evaluate_reduce(
    input: &Expr,
    initial: &Expr,
    body: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = input else {
        return Err(fail(
            ErrorCode::Location40080,
            format!(
                "$reduce requires that 'input' be an array, found: {}",
                input.as_ref().map_or("missing".to_string(), value_string)
            ),
        ));
    };
    let mut accumulated = evaluate(initial, vars)?;
    for element in elements {
        let depth = vars.bindings.len();
        vars.bindings.push(("this".to_string(), Some(element)));
        vars.bindings
            .push(("value".to_string(), accumulated.take()));
        let next = evaluate(body, vars);
        vars.bindings.truncate(depth);
        accumulated = next?;
    }
    Ok(accumulated)
}

// ----- $zip ----------------------------------------------------------------------------------

pub(super) fn parse_zip(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let fields = object_fields(
        operand,
        &["inputs", "defaults", "useLongestLength"],
        (
            ErrorCode::Location34460,
            "$zip only supports an object as an argument, found ",
        ),
        (ErrorCode::Location34464, "$zip found an unknown argument: "),
    )?;
    let expressions = |value: Option<&Bson>, code, name: &str, scope: &mut Scope| match value {
        None => Ok(Vec::new()),
        Some(Bson::Array(items)) => items.iter().map(|item| parse(item, scope)).collect(),
        Some(other) => Err(fail(
            code,
            format!(
                "{name} must be an array of expressions, found {}",
                type_name(other)
            ),
        )),
    };
    let inputs = expressions(
        field(&fields, "inputs"),
        ErrorCode::Location34461,
        "inputs",
        scope,
    )?;
    let defaults = expressions(
        field(&fields, "defaults"),
        ErrorCode::Location34462,
        "defaults",
        scope,
    )?;
    let longest = match field(&fields, "useLongestLength") {
        None => false,
        Some(Bson::Boolean(flag)) => *flag,
        // mongod names the operand's type here, not the field's.
        Some(_) => {
            return Err(fail(
                ErrorCode::Location34463,
                "useLongestLength must be a bool, found object",
            ))
        }
    };
    if inputs.is_empty() {
        return Err(fail(
            ErrorCode::Location34465,
            "$zip requires at least one input array",
        ));
    }
    if !longest && !defaults.is_empty() {
        return Err(fail(
            ErrorCode::Location34466,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    if !defaults.is_empty() && defaults.len() != inputs.len() {
        return Err(fail(
            ErrorCode::Location34467,
            "defaults and inputs must have the same length",
        ));
    }
    Ok(Expr::Zip {
        inputs,
        defaults,
        longest,
    })
}

pub(super) fn evaluate_zip(
    inputs: &[Expr],
    defaults: &[Expr],
    longest: bool,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let mut arrays = Vec::with_capacity(inputs.len());
    for input in inputs {
        let value = evaluate(input, vars)?;
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        match value {
            Some(Bson::Array(elements)) => arrays.push(elements),
            other => {
                return Err(fail(
                    ErrorCode::Location34468,
                    format!(
                        "$zip found a non-array expression in input: {}",
                        other.as_ref().map_or("missing".to_string(), value_string)
                    ),
                ))
            }
        }
    }
    let shortest = arrays.iter().map(Vec::len).min().unwrap_or(0);
    let widest = arrays.iter().map(Vec::len).max().unwrap_or(0);
    let mut fill = vec![Bson::Null; arrays.len()];
    if shortest != widest {
        for (slot, default) in fill.iter_mut().zip(defaults) {
            *slot = evaluate(default, vars)?.unwrap_or(Bson::Null);
        }
    }
    let length = if longest { widest } else { shortest };
    let rows = (0..length)
        .map(|row| {
            Bson::Array(
                arrays
                    .iter()
                    .zip(&fill)
                    .map(|(array, default)| array.get(row).unwrap_or(default).clone())
                    .collect(),
            )
        })
        .collect();
    Ok(Some(Bson::Array(rows)))
}

// ----- $range and $indexOfArray --------------------------------------------------------------

/// A `$range` bound or step: numeric (`type_code`) and a 32-bit integer (`range_code`).
fn range_argument(
    value: &Value,
    what: &str,
    article: &str,
    type_code: ErrorCode,
    range_code: ErrorCode,
) -> CommandResult<i64> {
    let number = value.as_ref().and_then(Number::from_bson).ok_or_else(|| {
        fail(
            type_code,
            format!(
                "$range requires a numeric {what} value, found value of type:{}{}",
                if what == "step" { "" } else { " " },
                value_type_name(value)
            ),
        )
    })?;
    number
        .to_exact_i64()
        .filter(|v| i32::try_from(*v).is_ok())
        .ok_or_else(|| {
            fail(
                range_code,
                format!(
                    "$range requires {article} {what} value that can be represented as a 32-bit integer, found value: {}",
                    value.as_ref().map_or("missing".to_string(), value_string)
                ),
            )
        })
}

pub(super) fn evaluate_range(values: Vec<Value>) -> CommandResult<Value> {
    let mut values = values.into_iter();
    let start = values.next().flatten();
    let end = values.next().flatten();
    let start = range_argument(
        &start,
        "starting",
        "a",
        ErrorCode::Location34443,
        ErrorCode::Location34444,
    )?;
    let end = range_argument(
        &end,
        "ending",
        "an",
        ErrorCode::Location34445,
        ErrorCode::Location34446,
    )?;
    let step = match values.next() {
        None => 1,
        Some(step) => {
            let step = range_argument(
                &step,
                "step",
                "a",
                ErrorCode::Location34447,
                ErrorCode::Location34448,
            )?;
            if step == 0 {
                return Err(fail(
                    ErrorCode::Location34449,
                    "$range requires a non-zero step value",
                ));
            }
            step
        }
    };
    let steps = (end - start) / step;
    let length = if steps >= 0 { steps + 1 } else { 0 };
    let bytes = 24 + length * 16;
    if bytes >= MAX_RANGE_BYTES {
        return Err(fail(
            ErrorCode::ExceededMemoryLimit,
            format!("$range would use too much memory ({bytes} bytes) and cannot spill to disk. Memory limit: {MAX_RANGE_BYTES} bytes"),
        ));
    }
    let mut output = Vec::new();
    let mut current = start;
    while if step > 0 {
        current < end
    } else {
        current > end
    } {
        output.push(Bson::Int32(i32::try_from(current).unwrap_or_default()));
        current += step;
    }
    Ok(Some(Bson::Array(output)))
}

pub(super) fn evaluate_index_of_array(
    values: Vec<Value>,
    collation: Option<&Collation>,
) -> CommandResult<Value> {
    let mut values = values.into_iter();
    let array = values.next().flatten();
    if is_nullish(&array) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = array else {
        return Err(fail(
            ErrorCode::Location40090,
            format!(
                "$indexOfArray requires an array as a first argument, found: {}",
                value_type_name(&array)
            ),
        ));
    };
    let needle = values.next().flatten().unwrap_or(Bson::Undefined);
    let start = match values.next() {
        Some(value) => index_argument("$indexOfArray", "starting index", &value)?,
        None => 0,
    };
    let end = match values.next() {
        Some(value) => index_argument("$indexOfArray", "ending index", &value)?.min(elements.len()),
        None => elements.len(),
    };
    let found = (start..end)
        .find(|&index| values_equal_with(&elements[index], &needle, collation))
        .map_or(-1, |index| i32::try_from(index).unwrap_or(i32::MAX));
    Ok(Some(Bson::Int32(found)))
}

// ----- $sortArray ----------------------------------------------------------------------------

pub(super) fn parse_sort_array(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let fields = object_fields(
        operand,
        &["input", "sortBy"],
        (
            ErrorCode::Location2942500,
            "$sortArray requires an object as an argument, found: ",
        ),
        (
            ErrorCode::Location2942501,
            "$sortArray found an unknown argument: ",
        ),
    )?;
    let input = required(
        &fields,
        "input",
        ErrorCode::Location2942502,
        "$sortArray requires 'input' to be specified",
    )?;
    let sort_by = required(
        &fields,
        "sortBy",
        ErrorCode::Location2942503,
        "$sortArray requires 'sortBy' to be specified",
    )?;
    let sort_by = match sort_by {
        Bson::Document(spec) => SortBy::Fields(SortSpec::parse(spec)?),
        other => match Number::from_bson(other).and_then(Number::to_exact_i64) {
            Some(1) => SortBy::Values { descending: false },
            Some(-1) => SortBy::Values { descending: true },
            _ => {
                return Err(fail(
                    ErrorCode::Location2942506,
                    "The $sort element value must be either 1 or -1",
                ))
            }
        },
    };
    Ok(Expr::SortArray {
        input: Box::new(parse(input, scope)?),
        sort_by,
    })
}

pub(super) fn evaluate_sort_array(
    input: &Expr,
    sort_by: &SortBy,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(mut elements)) = input else {
        return Err(fail(
            ErrorCode::Location2942504,
            format!(
                "The input argument to $sortArray must be an array, but was of type: {}",
                value_type_name(&input)
            ),
        ));
    };
    let collation = vars.collation;
    match sort_by {
        SortBy::Values { descending } => elements.sort_by(|a, b| {
            let order = compare_values_with(a, b, collation);
            if *descending {
                order.reverse()
            } else {
                order
            }
        }),
        SortBy::Fields(spec) => {
            let directions: Vec<Direction> = spec.keys().map(|(_, direction)| direction).collect();
            // A value that is not a document sorts as if every sort field were null.
            let mut keyed: Vec<(Vec<Bson>, Bson)> = elements
                .into_iter()
                .map(|element| match &element {
                    Bson::Document(document) => (spec.sort_key(document), element),
                    _ => (vec![Bson::Null; directions.len()], element),
                })
                .collect();
            keyed.sort_by(|(a, _), (b, _)| compare_keys(a, b, &directions, collation));
            elements = keyed.into_iter().map(|(_, element)| element).collect();
        }
    }
    Ok(Some(Bson::Array(elements)))
}

/// Orders two `$sortArray` field keys, each in its direction, strings under `collation`.
fn compare_keys(
    a: &[Bson],
    b: &[Bson],
    directions: &[Direction],
    collation: Option<&Collation>,
) -> std::cmp::Ordering {
    for ((x, y), direction) in a.iter().zip(b).zip(directions) {
        let order = compare_values_with(x, y, collation);
        let order = match direction {
            Direction::Ascending => order,
            Direction::Descending => order.reverse(),
        };
        if order.is_ne() {
            return order;
        }
    }
    std::cmp::Ordering::Equal
}

// ----- $firstN / $lastN / $minN / $maxN ------------------------------------------------------

pub(super) fn parse_array_n(name: &str, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let op = n_operator(name)
        .ok_or_else(|| tideway_base::error::CommandError::internal("not an N operator"))?;
    let (n, input) = n_arguments(name, op, operand)?;
    Ok(Expr::ArrayN {
        op,
        n: Box::new(parse(n, scope)?),
        input: Box::new(parse(input, scope)?),
    })
}

pub(super) fn evaluate_array_n(
    op: AccumulatorOp,
    n: &Expr,
    input: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let n = n_value(&evaluate(n, vars)?)?;
    let Some(Bson::Array(elements)) = evaluate(input, vars)? else {
        return Err(fail(ErrorCode::Location5788200, "Input must be an array"));
    };
    let mut state = AccumulatorState::new(op.with_n(n));
    for element in elements {
        state.add(Some(element), vars.collation)?;
    }
    Ok(state.finish())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_errors, check_over, check_values, value};
    use bson::{bson, doc, Bson};

    #[test]
    fn reduce_folds_with_this_and_value() {
        check_values(vec![
            (
                bson!({"$reduce": {"input": ["a", "b", "c"], "initialValue": "", "in": {"$concat": ["$$value", "$$this"]}}}),
                bson!("abc"),
            ),
            (
                bson!({"$reduce": {"input": [1, 2, 3, 4], "initialValue": {"sum": 5, "product": 2}, "in": {
                    "sum": {"$add": ["$$value.sum", "$$this"]},
                    "product": {"$multiply": ["$$value.product", "$$this"]}}}}),
                bson!({"sum": 15, "product": 48}),
            ),
            (
                bson!({"$reduce": {"input": [[3, 4], [5, 6]], "initialValue": [1, 2], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                bson!([1, 2, 3, 4, 5, 6]),
            ),
            (
                bson!({"$reduce": {"input": [], "initialValue": 7, "in": 0}}),
                bson!(7),
            ),
            (
                bson!({"$reduce": {"input": null, "initialValue": 7, "in": 0}}),
                Bson::Null,
            ),
        ]);
        check_errors(vec![
            (bson!({"$reduce": 1}), 40075),
            (
                bson!({"$reduce": {"input": [], "initialValue": 0, "in": 0, "x": 1}}),
                40076,
            ),
            (bson!({"$reduce": {"initialValue": 0, "in": 0}}), 40077),
            (bson!({"$reduce": {"input": [], "in": 0}}), 40078),
            (bson!({"$reduce": {"input": [], "initialValue": 0}}), 40079),
            (
                bson!({"$reduce": {"input": 1, "initialValue": 0, "in": 0}}),
                40080,
            ),
            // `$$this` is not in scope outside `in`.
            (
                bson!({"$reduce": {"input": "$$this", "initialValue": 0, "in": 0}}),
                17276,
            ),
        ]);
    }

    #[test]
    fn missing_values_stay_missing_through_variables() {
        assert_eq!(
            value(bson!({"$reduce": {"input": [1], "initialValue": "$missing", "in": "$$value"}})),
            None
        );
        assert_eq!(
            value(bson!({"$let": {"vars": {"x": "$missing"}, "in": "$$x"}})),
            None
        );
        check_values(vec![
            (
                bson!({"$let": {"vars": {"x": "$missing"}, "in": {"$ifNull": ["$$x", "d"]}}}),
                bson!("d"),
            ),
            (
                bson!({"$reduce": {"input": [1, 2], "initialValue": "$missing", "in": {"$ifNull": ["$$value", "$$this"]}}}),
                bson!(1),
            ),
        ]);
    }

    #[test]
    fn zip_transposes_with_defaults() {
        check_values(vec![
            (
                bson!({"$zip": {"inputs": [["a"], ["b"], ["c"]]}}),
                bson!([["a", "b", "c"]]),
            ),
            (
                bson!({"$zip": {"inputs": [["a"], ["b", "c"]]}}),
                bson!([["a", "b"]]),
            ),
            (
                bson!({"$zip": {"inputs": [[1], [2, 3]], "useLongestLength": true}}),
                bson!([[1, 2], [null, 3]]),
            ),
            (
                bson!({"$zip": {"inputs": [[1], [2, 3], [4]], "useLongestLength": true, "defaults": ["a", "b", "c"]}}),
                bson!([[1, 2, 4], ["a", 3, "c"]]),
            ),
            (bson!({"$zip": {"inputs": [[1], "$missing"]}}), Bson::Null),
        ]);
        check_errors(vec![
            (bson!({"$zip": [1]}), 34460),
            (bson!({"$zip": {"inputs": 1}}), 34461),
            (bson!({"$zip": {"inputs": [[1]], "defaults": 1}}), 34462),
            (
                bson!({"$zip": {"inputs": [[1]], "useLongestLength": 1}}),
                34463,
            ),
            (bson!({"$zip": {"inputs": [[1]], "x": 1}}), 34464),
            (bson!({"$zip": {"inputs": []}}), 34465),
            (bson!({"$zip": {"inputs": [[1]], "defaults": [1]}}), 34466),
            (
                bson!({"$zip": {"inputs": [[1], [2]], "defaults": [1], "useLongestLength": true}}),
                34467,
            ),
            (bson!({"$zip": {"inputs": [[1], 2]}}), 34468),
        ]);
    }

    #[test]
    fn range_counts_by_step() {
        check_values(vec![
            (bson!({"$range": [0, 10, 2]}), bson!([0, 2, 4, 6, 8])),
            (bson!({"$range": [10, 0, -2]}), bson!([10, 8, 6, 4, 2])),
            (bson!({"$range": [0, 10, -2]}), bson!([])),
            (bson!({"$range": [0, 5]}), bson!([0, 1, 2, 3, 4])),
            (bson!({"$range": [1.0, 3_i64]}), bson!([1, 2])),
        ]);
        check_errors(vec![
            (bson!({"$range": ["a", 1]}), 34443),
            (bson!({"$range": [null, 1]}), 34443),
            (bson!({"$range": [0.5, 1]}), 34444),
            (bson!({"$range": [0, "a"]}), 34445),
            (bson!({"$range": [0, 3_000_000_000_i64]}), 34446),
            (bson!({"$range": [0, 1, "a"]}), 34447),
            (bson!({"$range": [0, 1, 1.5]}), 34448),
            (bson!({"$range": [0, 1, 0]}), 34449),
            (bson!({"$range": [0]}), 28667),
            (bson!({"$range": [i32::MIN, i32::MAX]}), 146),
        ]);
    }

    #[test]
    fn index_of_array_answers_the_manuals_table() {
        check_values(vec![
            (bson!({"$indexOfArray": [["a", "abc"], "a"]}), bson!(0)),
            (
                bson!({"$indexOfArray": [["a", "abc", "de", ["de"]], ["de"]]}),
                bson!(3),
            ),
            (bson!({"$indexOfArray": [[1, 2], 5]}), bson!(-1)),
            (bson!({"$indexOfArray": [[1, 2, 3], [1, 2]]}), bson!(-1)),
            (bson!({"$indexOfArray": [[10, 9, 9, 8, 9], 9, 3]}), bson!(4)),
            (
                bson!({"$indexOfArray": [["a", "abc", "b"], "b", 0, 1]}),
                bson!(-1),
            ),
            (
                bson!({"$indexOfArray": [["a", "abc", "b"], "b", 1, 0]}),
                bson!(-1),
            ),
            (
                bson!({"$indexOfArray": [["a", "abc", "b"], "b", 20]}),
                bson!(-1),
            ),
            (
                bson!({"$indexOfArray": [[null, null, null], null]}),
                bson!(0),
            ),
            (bson!({"$indexOfArray": [null, "foo"]}), Bson::Null),
            (bson!({"$indexOfArray": [[1, 2.0], 2_i64]}), bson!(1)),
            // indexof_array.js.
            (bson!({"$indexOfArray": [[1, 2, 3, 2, 1], 2, 2]}), bson!(3)),
            (
                bson!({"$indexOfArray": [[1, 2, 3, 4, 5], 4, 0, 3]}),
                bson!(-1),
            ),
            (bson!({"$indexOfArray": [[1, 2, 3], 2, 0, 10]}), bson!(1)),
            (
                bson!({"$indexOfArray": [[1, 2, 3, 2, 1, 2, 3], 2, 2, 4]}),
                bson!(3),
            ),
            (bson!({"$indexOfArray": [[1, 2, 3], 2, 3, 1]}), bson!(-1)),
            (bson!({"$indexOfArray": [[1, 2, 3], 2, 3, 5]}), bson!(-1)),
            (bson!({"$indexOfArray": [[], 1]}), bson!(-1)),
        ]);
        check_errors(vec![
            (bson!({"$indexOfArray": ["foo", "foo"]}), 40090),
            (bson!({"$indexOfArray": [[1], 1, 0.5]}), 40096),
            (bson!({"$indexOfArray": [[1, 2, 3], 2, "bad"]}), 40096),
            (bson!({"$indexOfArray": [[1, 2, 3], 2, 0, "bad"]}), 40096),
            (bson!({"$indexOfArray": [[1], 1, null]}), 40096),
            (bson!({"$indexOfArray": [[1], 1, -1]}), 40097),
            (bson!({"$indexOfArray": [[1], 1, 0, -1]}), 40097),
            (bson!({"$indexOfArray": [[1]]}), 28667),
        ]);
    }

    #[test]
    fn sort_array_orders_values_and_documents() {
        let team = bson!([
            {"name": "pat", "age": 30, "address": {"street": "12 Baker St", "city": "London"}},
            {"name": "dallas", "age": 36, "address": {"street": "12 Cowper St", "city": "Palo Alto"}},
            {"name": "charlie", "age": 42, "address": {"street": "12 French St", "city": "New Brunswick"}},
        ]);
        let names = |sort_by: Bson| bson!({"$map": {"input": {"$sortArray": {"input": {"$literal": team.clone()}, "sortBy": sort_by}}, "in": "$$this.name"}});
        check_values(vec![
            (
                names(bson!({"name": 1})),
                bson!(["charlie", "dallas", "pat"]),
            ),
            (
                names(bson!({"address.city": -1})),
                bson!(["dallas", "charlie", "pat"]),
            ),
            (
                names(bson!({"age": -1, "name": 1})),
                bson!(["charlie", "dallas", "pat"]),
            ),
            (
                bson!({"$sortArray": {"input": [1, 4, 1, 6, 12, 5], "sortBy": 1}}),
                bson!([1, 1, 4, 5, 6, 12]),
            ),
            (
                bson!({"$sortArray": {"input": [1, 4, 1, 6, 12, 5], "sortBy": -1}}),
                bson!([12, 6, 5, 4, 1, 1]),
            ),
            (
                bson!({"$sortArray": {"input": [20, 4, {"a": "Free"}, 6, 21, 5, "Gratis", {"a": null},
                    {"a": {"sale": true, "price": 19}}, Bson::Decimal128("10.23".parse().expect("decimal")),
                    {"a": "On sale"}], "sortBy": 1}}),
                bson!([4, 5, 6, Bson::Decimal128("10.23".parse().expect("decimal")), 20, 21, "Gratis",
                    {"a": null}, {"a": "Free"}, {"a": "On sale"}, {"a": {"sale": true, "price": 19}}]),
            ),
            (
                bson!({"$sortArray": {"input": null, "sortBy": 1}}),
                Bson::Null,
            ),
            // Values that are not documents sort as if their sort fields were null.
            (
                bson!({"$sortArray": {"input": [{"a": 2}, 5, {"a": 1}], "sortBy": {"a": 1}}}),
                bson!([5, {"a": 1}, {"a": 2}]),
            ),
            (
                bson!({"$sortArray": {"input": [{"a": 2}, 5, {"a": 1}], "sortBy": {"a": -1}}}),
                bson!([{"a": 2}, {"a": 1}, 5]),
            ),
        ]);
        check_errors(vec![
            (bson!({"$sortArray": [1]}), 2942500),
            (
                bson!({"$sortArray": {"input": [], "sortBy": 1, "x": 1}}),
                2942501,
            ),
            (bson!({"$sortArray": {"sortBy": 1}}), 2942502),
            (bson!({"$sortArray": {"input": []}}), 2942503),
            (bson!({"$sortArray": {"input": 1, "sortBy": 1}}), 2942504),
            (bson!({"$sortArray": {"input": [], "sortBy": 2}}), 2942506),
        ]);
    }

    #[test]
    fn sort_array_answers_sort_array_js() {
        let sorted = |input: Bson, sort_by: Bson| bson!({"$sortArray": {"input": {"$literal": input}, "sortBy": sort_by}});
        let mismatched = bson!([{"a": 1}, {"b": 2}, {"c": 3}]);
        let multi =
            bson!([{"a": 1, "b": 3, "c": 1}, {"a": 2, "b": 2, "c": 2}, {"a": 3, "b": 1, "c": 3}]);
        let ties =
            bson!([{"a": 1, "b": 2, "c": 1}, {"a": 1, "b": 3, "c": 4}, {"a": 1, "b": 3, "c": 5}]);
        let nested = bson!([{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 1}}]);
        check_values(vec![
            (
                sorted(bson!([[1, 2], [3, 4]]), bson!(-1)),
                bson!([[3, 4], [1, 2]]),
            ),
            (sorted(bson!([{}, [], []]), bson!(-1)), bson!([[], [], {}])),
            (
                sorted(mismatched.clone(), bson!(1)),
                bson!([{"a": 1}, {"b": 2}, {"c": 3}]),
            ),
            (
                sorted(mismatched.clone(), bson!(-1)),
                bson!([{"c": 3}, {"b": 2}, {"a": 1}]),
            ),
            (
                sorted(mismatched.clone(), bson!({"a": 1})),
                bson!([{"b": 2}, {"c": 3}, {"a": 1}]),
            ),
            (
                sorted(mismatched.clone(), bson!({"b": 1})),
                bson!([{"a": 1}, {"c": 3}, {"b": 2}]),
            ),
            (
                sorted(mismatched, bson!({"c": 1})),
                bson!([{"a": 1}, {"b": 2}, {"c": 3}]),
            ),
            (
                sorted(multi.clone(), bson!({"b": 1, "a": 1})),
                bson!([{"a": 3, "b": 1, "c": 3}, {"a": 2, "b": 2, "c": 2}, {"a": 1, "b": 3, "c": 1}]),
            ),
            (
                sorted(multi, bson!({"b": -1, "a": 1})),
                bson!([{"a": 1, "b": 3, "c": 1}, {"a": 2, "b": 2, "c": 2}, {"a": 3, "b": 1, "c": 3}]),
            ),
            (
                sorted(ties, bson!({"a": 1, "b": 1, "c": -1})),
                bson!([{"a": 1, "b": 2, "c": 1}, {"a": 1, "b": 3, "c": 5}, {"a": 1, "b": 3, "c": 4}]),
            ),
            (
                sorted(nested.clone(), bson!({"b.c": 1})),
                bson!([{"a": 1, "b": {"c": 1}}, {"a": 1, "b": {"c": 2}}]),
            ),
            (
                sorted(nested, bson!({"b.c": -1})),
                bson!([{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 1}}]),
            ),
            (
                sorted(bson!([1, [1], {"a": 1}, "1"]), bson!(1)),
                bson!([1, "1", {"a": 1}, [1]]),
            ),
            (
                sorted(
                    bson!([2, 1, "hello", {"a": 6}, {"a": "hello"}, {"a": -1}, null]),
                    bson!(1),
                ),
                bson!([null, 1, 2, "hello", {"a": -1}, {"a": 6}, {"a": "hello"}]),
            ),
            (sorted(bson!(["2", "10"]), bson!(1)), bson!(["10", "2"])),
        ]);
        check_errors(vec![
            (bson!({"$sortArray": 1}), 2942500),
            (bson!({"$sortArray": "$num"}), 2942500),
        ]);
    }

    #[test]
    fn n_expressions_match_the_jstests() {
        let document = doc! {"a": [1, 2, 3, 5, 7, 9], "n": 4, "diff": 2};
        let cases = [
            (
                bson!({"n": 3, "input": [5, 4, 3, 2, 1]}),
                [
                    bson!([1, 2, 3]),
                    bson!([5, 4, 3]),
                    bson!([5, 4, 3]),
                    bson!([3, 2, 1]),
                ],
            ),
            (
                bson!({"n": 3, "input": [null, 2, null, 1]}),
                [
                    bson!([1, 2]),
                    bson!([2, 1]),
                    bson!([null, 2, null]),
                    bson!([2, null, 1]),
                ],
            ),
            (
                bson!({"n": 3, "input": "$a"}),
                [
                    bson!([1, 2, 3]),
                    bson!([9, 7, 5]),
                    bson!([1, 2, 3]),
                    bson!([5, 7, 9]),
                ],
            ),
            (
                bson!({"n": "$n", "input": "$a"}),
                [
                    bson!([1, 2, 3, 5]),
                    bson!([9, 7, 5, 3]),
                    bson!([1, 2, 3, 5]),
                    bson!([3, 5, 7, 9]),
                ],
            ),
            (
                bson!({"n": {"$subtract": ["$n", "$diff"]}, "input": [3, 4, 5]}),
                [bson!([3, 4]), bson!([5, 4]), bson!([3, 4]), bson!([4, 5])],
            ),
        ];
        for (arguments, expected) in cases {
            for (name, expected) in ["$minN", "$maxN", "$firstN", "$lastN"]
                .into_iter()
                .zip(expected)
            {
                check_over(
                    bson!({name: arguments.clone()}),
                    vec![(document.clone(), expected)],
                );
            }
        }
        check_errors(vec![
            (bson!({"$firstN": [1]}), 5787801),
            (bson!({"$minN": 1}), 5787900),
            (bson!({"$lastN": {"n": 1, "input": [], "x": 1}}), 5787901),
            (bson!({"$maxN": {"input": []}}), 5787906),
            (bson!({"$maxN": {"n": 1}}), 5787907),
            (bson!({"$firstN": {"n": "a", "input": []}}), 5787902),
            (bson!({"$firstN": {"n": null, "input": []}}), 5787902),
            (bson!({"$firstN": {"n": 1.5, "input": []}}), 5787903),
            (bson!({"$firstN": {"n": 0, "input": []}}), 5787908),
            (bson!({"$firstN": {"n": 1, "input": 1}}), 5788200),
            (bson!({"$firstN": {"n": 1, "input": null}}), 5788200),
        ]);
    }
}
