//! String operators: `$concat`, `$toLower`/`$toUpper`, `$substrCP`, `$strLenCP`, `$split` and
//! `$trim`/`$ltrim`/`$rtrim`, with mongod's `coerceToString`.

use bson::Bson;

use super::{
    evaluate, fail, find_argument, is_nullish, iso_date_string, named_arguments, one, parse,
    parse_optional, value_type_name, Expr, Op, Scope, Value, Vars,
};
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrimSide {
    Both,
    Start,
    End,
}

pub(super) fn parse_trim(
    name: &str,
    side: TrimSide,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "chars"],
        || {
            fail(
                ErrorCode::Location50696,
                format!(
                    "{name} only supports an object as an argument, found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::Location50694,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location50695,
            format!("{name} requires an 'input' parameter"),
        )
    })?;
    Ok(Expr::Trim {
        side,
        input: Box::new(parse(input, scope)?),
        chars: parse_optional(find_argument(&arguments, "chars"), scope)?,
    })
}

/// mongod's `coerceToString` (used by `$toLower`, `$toUpper`, `$substrCP`).
pub(super) fn coerce_to_string(value: &Value) -> CommandResult<String> {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(String::new()),
        Some(Bson::String(text)) | Some(Bson::Symbol(text)) => Ok(text.clone()),
        Some(Bson::Int32(v)) => Ok(v.to_string()),
        Some(Bson::Int64(v)) => Ok(v.to_string()),
        Some(Bson::Double(v)) => Ok(double_string(*v)),
        Some(Bson::Decimal128(v)) => Ok(v.to_string()),
        Some(Bson::DateTime(v)) => Ok(iso_date_string(v.timestamp_millis())),
        Some(Bson::Timestamp(v)) => Ok(format!("Timestamp({}, {})", v.time, v.increment)),
        Some(other) => Err(fail(
            ErrorCode::Location16007,
            format!(
                "can't convert from BSON type {} to String",
                type_name(other)
            ),
        )),
    }
}

/// `$concat`: null if any argument is null or missing.
pub(super) fn evaluate_concat(values: Vec<Value>) -> CommandResult<Value> {
    let mut output = String::new();
    for value in values {
        match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::String(text)) => output.push_str(&text),
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location16702,
                    format!("$concat only supports strings, not {}", type_name(&other)),
                ))
            }
        }
    }
    Ok(Some(Bson::String(output)))
}

/// `$toLower` / `$toUpper` (ASCII case mapping, as mongod).
pub(super) fn evaluate_case(op: Op, values: Vec<Value>) -> CommandResult<Value> {
    let text = coerce_to_string(&one(values)?)?;
    Ok(Some(Bson::String(if op == Op::ToLower {
        text.to_ascii_lowercase()
    } else {
        text.to_ascii_uppercase()
    })))
}

/// `$strLenCP`: the length in code points.
pub(super) fn evaluate_str_len_cp(values: Vec<Value>) -> CommandResult<Value> {
    match one(values)? {
        Some(Bson::String(text)) => Ok(Some(Bson::Int32(
            i32::try_from(text.chars().count()).unwrap_or(i32::MAX),
        ))),
        other => Err(fail(
            ErrorCode::Location34471,
            format!(
                "$strLenCP requires a string argument, found: {}",
                value_type_name(&other)
            ),
        )),
    }
}

pub(super) fn double_string(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        format!("{value}")
    }
}

fn code_point_argument(
    name: &str,
    what: &str,
    value: &Value,
    codes: (ErrorCode, ErrorCode),
) -> CommandResult<i64> {
    let Some(number) = value.as_ref().and_then(Number::from_bson) else {
        return Err(fail(
            codes.0,
            format!(
                "{name}: {what} must be a numeric type (is BSON type {})",
                value_type_name(value)
            ),
        ));
    };
    number
        .to_exact_i64()
        .filter(|v| i32::try_from(*v).is_ok())
        .ok_or_else(|| {
            fail(
                codes.1,
                format!("{name}: {what} cannot be represented as a 32-bit integral value"),
            )
        })
}

pub(super) fn evaluate_substr_cp(values: Vec<Value>) -> CommandResult<Value> {
    let [text, start, length] = <[Value; 3]>::try_from(values)
        .map_err(|_| CommandError::internal("$substrCP takes three arguments"))?;
    let text = coerce_to_string(&text)?;
    let start = code_point_argument(
        "$substrCP",
        "starting index",
        &start,
        (ErrorCode::Location34450, ErrorCode::Location34451),
    )?;
    let length = code_point_argument(
        "$substrCP",
        "length",
        &length,
        (ErrorCode::Location34452, ErrorCode::Location34453),
    )?;
    if length < 0 {
        return Err(fail(
            ErrorCode::Location34454,
            "$substrCP: length must be a nonnegative integer.",
        ));
    }
    if start < 0 {
        return Err(fail(
            ErrorCode::Location34455,
            "$substrCP: the starting index must be nonnegative integer.",
        ));
    }
    let piece: String = text
        .chars()
        .skip(start as usize)
        .take(length as usize)
        .collect();
    Ok(Some(Bson::String(piece)))
}

pub(super) fn evaluate_split(text: Value, separator: Value) -> CommandResult<Value> {
    if is_nullish(&text) || is_nullish(&separator) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(text)) = text else {
        return Err(fail(
            ErrorCode::Location40085,
            format!(
                "$split requires an expression that evaluates to a string as a first argument, found: {}",
                value_type_name(&text)
            ),
        ));
    };
    let Some(Bson::String(separator)) = separator else {
        return Err(fail(
            ErrorCode::Location40086,
            format!(
                "$split requires an expression that evaluates to a string as a second argument, found: {}",
                value_type_name(&separator)
            ),
        ));
    };
    if separator.is_empty() {
        return Err(fail(
            ErrorCode::Location40087,
            "$split requires a non-empty separator",
        ));
    }
    Ok(Some(Bson::Array(
        text.split(separator.as_str())
            .map(|piece| Bson::String(piece.to_string()))
            .collect(),
    )))
}

pub(super) fn evaluate_trim(
    side: TrimSide,
    input: &Expr,
    chars: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let name = match side {
        TrimSide::Both => "$trim",
        TrimSide::Start => "$ltrim",
        TrimSide::End => "$rtrim",
    };
    let input = evaluate(input, vars)?;
    let chars = chars.map(|chars| evaluate(chars, vars)).transpose()?;
    if is_nullish(&input) || chars.as_ref().is_some_and(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(text)) = input else {
        return Err(fail(
            ErrorCode::Location50699,
            format!(
                "{name} requires its input to be a string, got {} (of type {}) instead.",
                input.as_ref().map_or("missing".to_string(), value_string),
                value_type_name(&input)
            ),
        ));
    };
    let trim_set: Option<Vec<char>> = match chars {
        None => None,
        Some(Some(Bson::String(set))) => Some(set.chars().collect()),
        Some(other) => {
            return Err(fail(
                ErrorCode::Location50700,
                format!(
                    "{name} requires 'chars' to be a string, got {} (of type {}) instead.",
                    other.as_ref().map_or("missing".to_string(), value_string),
                    value_type_name(&other)
                ),
            ))
        }
    };
    let strip = |c: char| match &trim_set {
        Some(set) => set.contains(&c),
        None => c == '\0' || c.is_whitespace(),
    };
    let trimmed = match side {
        TrimSide::Both => text.trim_matches(strip),
        TrimSide::Start => text.trim_start_matches(strip),
        TrimSide::End => text.trim_end_matches(strip),
    };
    Ok(Some(Bson::String(trimmed.to_string())))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, value};
    use crate::expr::fixtures::assert_value;
    use bson::Bson;

    #[test]
    fn string_operators() {
        assert_value(
            value(bson::bson!({"$concat": ["a", "b", "c"]})),
            "abc".into(),
        );
        assert_value(value(bson::bson!({"$concat": ["a", null]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$concat": ["a", 1]})).code.code(), 16702);
        assert_value(value(bson::bson!({"$toLower": "AbC"})), "abc".into());
        assert_value(value(bson::bson!({"$toUpper": 12})), "12".into());
        assert_value(value(bson::bson!({"$toUpper": null})), "".into());
        assert_value(
            value(bson::bson!({"$substrCP": ["héllo", 1, 3]})),
            "éll".into(),
        );
        assert_value(value(bson::bson!({"$substrCP": ["abc", 5, 1]})), "".into());
        assert_eq!(
            error(bson::bson!({"$substrCP": ["abc", "x", 1]}))
                .code
                .code(),
            34450
        );
        assert_value(value(bson::bson!({"$strLenCP": "héllo"})), Bson::Int32(5));
        assert_eq!(error(bson::bson!({"$strLenCP": 1})).code.code(), 34471);
        assert_value(
            value(bson::bson!({"$split": ["a,b,,c", ","]})),
            bson::bson!(["a", "b", "", "c"]),
        );
        assert_value(value(bson::bson!({"$split": [null, ","]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$split": ["a", ""]})).code.code(), 40087);
        assert_value(
            value(bson::bson!({"$trim": {"input": "  x y \n"}})),
            "x y".into(),
        );
        assert_value(
            value(bson::bson!({"$trim": {"input": "xxaxx", "chars": "x"}})),
            "a".into(),
        );
        assert_value(
            value(bson::bson!({"$ltrim": {"input": "  a "}})),
            "a ".into(),
        );
        assert_eq!(
            error(bson::bson!({"$trim": {"input": 1}})).code.code(),
            50699
        );
    }
}
