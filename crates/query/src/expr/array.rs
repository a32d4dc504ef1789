//! Array operators: `$size`, `$arrayElemAt`, `$in`, `$isArray`, `$slice`, `$concatArrays`,
//! `$first`/`$last`, `$reverseArray`, and `$filter`/`$map`, which bind a variable per element.

use bson::Bson;

use super::variables::{variable_name, with_variable};
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, one, parse, parse_optional, truthy,
    two, value_type_name, Expr, Op, Scope, Value, Vars,
};
use crate::collation::Collation;
use crate::compare::values_equal_with;
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

pub(super) fn parse_filter(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "as", "cond", "limit"],
        || {
            fail(
                ErrorCode::Location28646,
                "$filter only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location28647,
                format!("Unrecognized parameter to $filter: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location28648,
            "Missing 'input' parameter to $filter",
        )
    })?;
    let cond = find_argument(&arguments, "cond").ok_or_else(|| {
        fail(
            ErrorCode::Location28650,
            "Missing 'cond' parameter to $filter",
        )
    })?;
    let name = variable_name(find_argument(&arguments, "as"), "this")?;
    let input = Box::new(parse(input, scope)?);
    let limit = parse_optional(find_argument(&arguments, "limit"), scope)?;
    let cond = Box::new(with_variable(scope, &name, |scope| parse(cond, scope))?);
    Ok(Expr::Filter {
        input,
        name,
        cond,
        limit,
    })
}

pub(super) fn parse_map(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "as", "in"],
        || {
            fail(
                ErrorCode::Location16878,
                "$map only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location16879,
                format!("Unrecognized parameter to $map: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location16880,
            "Missing 'input' parameter to $map",
        )
    })?;
    let body = find_argument(&arguments, "in")
        .ok_or_else(|| fail(ErrorCode::Location16882, "Missing 'in' parameter to $map"))?;
    let name = variable_name(find_argument(&arguments, "as"), "this")?;
    let input = Box::new(parse(input, scope)?);
    let body = Box::new(with_variable(scope, &name, |scope| parse(body, scope))?);
    Ok(Expr::Map { input, name, body })
}

pub(super) fn evaluate_filter(
    input: &Expr,
    name: &str,
    cond: &Expr,
    limit: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    let limit = match limit {
        None => None,
        Some(limit) => {
            let value = evaluate(limit, vars)?;
            if is_nullish(&value) {
                None
            } else {
                let count = value
                    .as_ref()
                    .and_then(Number::from_bson)
                    .and_then(Number::to_exact_i64)
                    .filter(|count| (1..=i64::from(i32::MAX)).contains(count))
                    .ok_or_else(|| {
                        fail(
                            ErrorCode::Location327391,
                            format!(
                                "$filter: limit must be represented as a 32-bit integral value: {}",
                                value.as_ref().map_or("missing".to_string(), value_string)
                            ),
                        )
                    })?;
                Some(count as usize)
            }
        }
    };
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = input else {
        return Err(fail(
            ErrorCode::Location28651,
            format!(
                "input to $filter must be an array not {}",
                value_type_name(&input)
            ),
        ));
    };
    let mut output = Vec::new();
    for element in elements {
        if limit.is_some_and(|limit| output.len() >= limit) {
            break;
        }
        vars.bindings.push((name.to_string(), Some(element)));
        let keep = evaluate(cond, vars);
        let element = vars.bindings.pop().and_then(|(_, element)| element);
        if truthy(&keep?) {
            output.extend(element);
        }
    }
    Ok(Some(Bson::Array(output)))
}

/// `$map`: `body` evaluated with `name` bound to each element; missing results become null.
pub(super) fn evaluate_map(
    input: &Expr,
    name: &str,
    body: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = input else {
        return Err(fail(
            ErrorCode::Location16883,
            format!(
                "input to $map must be an array not {}",
                value_type_name(&input)
            ),
        ));
    };
    let mut output = Vec::with_capacity(elements.len());
    for element in elements {
        vars.bindings.push((name.to_string(), Some(element)));
        let value = evaluate(body, vars);
        vars.bindings.pop();
        output.push(value?.unwrap_or(Bson::Null));
    }
    Ok(Some(Bson::Array(output)))
}

pub(super) fn evaluate_size(values: Vec<Value>) -> CommandResult<Value> {
    match one(values)? {
        Some(Bson::Array(elements)) => Ok(Some(Bson::Int32(
            i32::try_from(elements.len()).unwrap_or(i32::MAX),
        ))),
        other => Err(fail(
            ErrorCode::Location17124,
            format!(
                "The argument to $size must be an array. Type of argument: {}",
                value_type_name(&other)
            ),
        )),
    }
}

/// `$in`: whether the array (second argument) holds the first, under `collation`.
pub(super) fn evaluate_in_array(
    values: Vec<Value>,
    collation: Option<&Collation>,
) -> CommandResult<Value> {
    let (needle, haystack) = two(values)?;
    let Some(Bson::Array(elements)) = haystack else {
        return Err(fail(
            ErrorCode::Location40081,
            format!(
                "$in requires an array as a second argument, found: {}",
                value_type_name(&haystack)
            ),
        ));
    };
    let needle = needle.unwrap_or(Bson::Undefined);
    Ok(Some(Bson::Boolean(elements.iter().any(|element| {
        values_equal_with(element, &needle, collation)
    }))))
}

pub(super) fn evaluate_concat_arrays(values: Vec<Value>) -> CommandResult<Value> {
    let mut output = Vec::new();
    for value in values {
        match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::Array(elements)) => output.extend(elements),
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location28664,
                    format!(
                        "$concatArrays only supports arrays, not {}",
                        type_name(&other)
                    ),
                ))
            }
        }
    }
    Ok(Some(Bson::Array(output)))
}

pub(super) fn evaluate_reverse_array(values: Vec<Value>) -> CommandResult<Value> {
    match one(values)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Array(mut elements)) => {
            elements.reverse();
            Ok(Some(Bson::Array(elements)))
        }
        Some(other) => Err(fail(
            ErrorCode::Location34435,
            format!(
                "The argument to $reverseArray must be an array, but was of type: {}",
                type_name(&other)
            ),
        )),
    }
}

fn array_index_argument(
    name: &str,
    value: &Bson,
    position: &str,
    code: ErrorCode,
    range_code: ErrorCode,
) -> CommandResult<i64> {
    let number = Number::from_bson(value).ok_or_else(|| {
        fail(
            code,
            format!(
                "{name}'s {position} argument must be a numeric value, but is {}",
                type_name(value)
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
                    "{name}'s {position} argument must be representable as a 32-bit integer: {}",
                    value_string(value)
                ),
            )
        })
}

fn element_at(elements: &[Bson], index: i64) -> Value {
    let length = elements.len() as i64;
    let position = if index < 0 { length + index } else { index };
    if position < 0 {
        return None;
    }
    elements.get(usize::try_from(position).ok()?).cloned()
}

pub(super) fn evaluate_array_elem_at(
    name: &str,
    array: Value,
    index: Value,
) -> CommandResult<Value> {
    if is_nullish(&array) || is_nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let (Some(array), Some(index)) = (array, index) else {
        return Ok(Some(Bson::Null));
    };
    let Bson::Array(elements) = &array else {
        return Err(fail(
            ErrorCode::Location28689,
            format!(
                "{name}'s first argument must be an array, but is {}",
                type_name(&array)
            ),
        ));
    };
    let index = array_index_argument(
        name,
        &index,
        "second",
        ErrorCode::Location28690,
        ErrorCode::Location28691,
    )?;
    Ok(element_at(elements, index))
}

pub(super) fn evaluate_first_last(op: Op, value: Value) -> CommandResult<Value> {
    let name = if op == Op::First { "$first" } else { "$last" };
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    match value {
        Some(Bson::Array(elements)) => Ok(if op == Op::First {
            elements.first().cloned()
        } else {
            elements.last().cloned()
        }),
        other => Err(fail(
            ErrorCode::Location28689,
            format!(
                "{name}'s argument must be an array, but is {}",
                value_type_name(&other)
            ),
        )),
    }
}

pub(super) fn evaluate_slice(values: Vec<Value>) -> CommandResult<Value> {
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut values = values.into_iter().flatten();
    let (Some(array), Some(second)) = (values.next(), values.next()) else {
        return Ok(Some(Bson::Null));
    };
    let third = values.next();
    let Bson::Array(elements) = &array else {
        return Err(fail(
            ErrorCode::Location28724,
            format!(
                "First argument to $slice must be an array, but is of type: {}",
                type_name(&array)
            ),
        ));
    };
    let as_i32 = |value: &Bson, ordinal: &str, type_code, range_code| -> CommandResult<i64> {
        let number = Number::from_bson(value).ok_or_else(|| {
            fail(
                type_code,
                format!(
                    "{ordinal} argument to $slice must be a numeric value, but is of type: {}",
                    type_name(value)
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
                        "{ordinal} argument to $slice can't be represented as a 32-bit integer: {}",
                        value_string(value)
                    ),
                )
            })
    };
    let length = elements.len() as i64;
    let second = as_i32(
        &second,
        "Second",
        ErrorCode::Location28725,
        ErrorCode::Location28726,
    )?;
    let (start, count) = match third {
        None => {
            if second >= 0 {
                (0, second)
            } else {
                ((length + second).max(0), length)
            }
        }
        Some(third) => {
            let count = as_i32(
                &third,
                "Third",
                ErrorCode::Location28727,
                ErrorCode::Location28728,
            )?;
            if count <= 0 {
                return Err(fail(
                    ErrorCode::Location28729,
                    format!(
                        "Third argument to $slice must be positive: {}",
                        value_string(&third)
                    ),
                ));
            }
            let start = if second >= 0 {
                second.min(length)
            } else {
                (length + second).max(0)
            };
            (start, count)
        }
    };
    let end = start.saturating_add(count).min(length);
    let slice = elements
        .get(start as usize..end.max(start) as usize)
        .map(<[Bson]>::to_vec)
        .unwrap_or_default();
    Ok(Some(Bson::Array(slice)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::error;
    use crate::expr::fixtures::{assert_value, eval_ok};
    use bson::{doc, Bson};

    #[test]
    fn array_operators() {
        let document = doc! {"a": [1, 2, 3, 4]};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(on(bson::bson!({"$size": "$a"})), Bson::Int32(4));
        assert_eq!(
            error(bson::bson!({"$size": "$missing"})).errmsg,
            "The argument to $size must be an array. Type of argument: missing"
        );
        assert_value(
            on(bson::bson!({"$arrayElemAt": ["$a", -1]})),
            Bson::Int32(4),
        );
        assert_eq!(on(bson::bson!({"$arrayElemAt": ["$a", 9]})), None);
        assert_eq!(
            error(bson::bson!({"$arrayElemAt": ["x", 0]})).code.code(),
            28689
        );
        assert_value(on(bson::bson!({"$in": [2.0, "$a"]})), Bson::Boolean(true));
        assert_eq!(
            error(bson::bson!({"$in": [1, "$missing"]})).code.code(),
            40081
        );
        assert_value(on(bson::bson!({"$isArray": ["$a"]})), Bson::Boolean(true));
        assert_value(on(bson::bson!({"$isArray": "x"})), Bson::Boolean(false));
        assert_value(on(bson::bson!({"$slice": ["$a", 2]})), bson::bson!([1, 2]));
        assert_value(on(bson::bson!({"$slice": ["$a", -2]})), bson::bson!([3, 4]));
        assert_value(
            on(bson::bson!({"$slice": ["$a", 1, 2]})),
            bson::bson!([2, 3]),
        );
        assert_value(on(bson::bson!({"$slice": ["$a", -3, 1]})), bson::bson!([2]));
        assert_eq!(
            error(bson::bson!({"$slice": [[1], 0, 0]})).code.code(),
            28729
        );
        assert_value(
            on(bson::bson!({"$concatArrays": ["$a", [5]]})),
            bson::bson!([1, 2, 3, 4, 5]),
        );
        assert_value(
            on(bson::bson!({"$concatArrays": ["$a", "$missing"]})),
            Bson::Null,
        );
        assert_value(on(bson::bson!({"$first": "$a"})), Bson::Int32(1));
        assert_value(on(bson::bson!({"$last": "$a"})), Bson::Int32(4));
        assert_eq!(on(bson::bson!({"$first": [[]]})), None);
        assert_value(
            on(bson::bson!({"$reverseArray": "$a"})),
            bson::bson!([4, 3, 2, 1]),
        );
        assert_value(
            on(bson::bson!({"$filter": {"input": "$a", "as": "n", "cond": {"$gt": ["$$n", 2]}}})),
            bson::bson!([3, 4]),
        );
        assert_value(
            on(
                bson::bson!({"$filter": {"input": "$a", "cond": {"$gt": ["$$this", 1]}, "limit": 1}}),
            ),
            bson::bson!([2]),
        );
        assert_value(
            on(bson::bson!({"$map": {"input": "$a", "in": {"$multiply": ["$$this", 10]}}})),
            bson::bson!([10, 20, 30, 40]),
        );
        assert_eq!(
            error(bson::bson!({"$map": {"input": 1, "in": 1}}))
                .code
                .code(),
            16883
        );
        assert_eq!(
            error(bson::bson!({"$filter": {"input": 1, "cond": true}}))
                .code
                .code(),
            28651
        );
        assert_value(
            on(bson::bson!({"$let": {"vars": {"x": 2}, "in": {"$add": ["$$x", {"$size": "$a"}]}}})),
            Bson::Int32(6),
        );
        assert_value(on(bson::bson!({"$sum": "$a"})), Bson::Int32(10));
        assert_value(on(bson::bson!({"$avg": [1, 2]})), Bson::Double(1.5));
        assert_value(on(bson::bson!({"$max": "$a"})), Bson::Int32(4));
        assert_value(on(bson::bson!({"$min": [3, null, 1]})), Bson::Int32(1));
    }
}
