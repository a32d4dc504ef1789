//! Type conversion: `$convert` and its shorthands (`$toString`, `$toInt`, `$toLong`,
//! `$toDouble`, `$toBool`, `$toDecimal`, `$toObjectId`, `$toDate`) with mongod's conversion
//! rules and "... in $convert with no onError value" messages.

use bson::{oid::ObjectId, Bson, DateTime, Decimal128};

use super::arithmetic::decimal_bson;
use super::date::parse_iso_date;
use super::string::double_string;
use super::{
    evaluate, fail, find_argument, is_nullish, iso_date_string, named_arguments, parse,
    parse_optional, Expr, Scope, Value, Vars,
};
use crate::numeric::{Decimal, Number};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

/// Target types of `$convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
    Decimal,
    /// A real BSON type `$convert` cannot produce (its name, for the message).
    Unsupported(&'static str),
}

pub(super) fn parse_convert(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &[
            "input",
            "to",
            "onError",
            "onNull",
            "format",
            "byteOrder",
            "base",
        ],
        || {
            fail(
                ErrorCode::FailedToParse,
                format!(
                    "$convert expects an object of named arguments but found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::FailedToParse,
                format!("$convert found an unknown argument: {other}"),
            )
        },
    )?;
    for unsupported in ["format", "byteOrder", "base"] {
        if find_argument(&arguments, unsupported).is_some() {
            return Err(fail(
                ErrorCode::NotImplemented,
                format!("$convert option '{unsupported}' is not supported by this server"),
            ));
        }
    }
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::FailedToParse,
            "Missing 'input' parameter to $convert",
        )
    })?;
    let to = find_argument(&arguments, "to").ok_or_else(|| {
        fail(
            ErrorCode::FailedToParse,
            "Missing 'to' parameter to $convert",
        )
    })?;
    Ok(Expr::Convert {
        input: Box::new(parse(input, scope)?),
        to: Box::new(parse(to, scope)?),
        on_error: parse_optional(find_argument(&arguments, "onError"), scope)?,
        on_null: parse_optional(find_argument(&arguments, "onNull"), scope)?,
    })
}

fn target_from_name(name: &str) -> Option<Target> {
    Some(match name {
        "double" => Target::Double,
        "string" => Target::String,
        "objectId" => Target::ObjectId,
        "bool" => Target::Bool,
        "date" => Target::Date,
        "int" => Target::Int,
        "long" => Target::Long,
        "decimal" => Target::Decimal,
        "object" => Target::Unsupported("object"),
        "array" => Target::Unsupported("array"),
        "binData" => Target::Unsupported("binData"),
        "undefined" => Target::Unsupported("undefined"),
        "null" => Target::Unsupported("null"),
        "regex" => Target::Unsupported("regex"),
        "dbPointer" => Target::Unsupported("dbPointer"),
        "javascript" => Target::Unsupported("javascript"),
        "symbol" => Target::Unsupported("symbol"),
        "javascriptWithScope" => Target::Unsupported("javascriptWithScope"),
        "timestamp" => Target::Unsupported("timestamp"),
        "minKey" => Target::Unsupported("minKey"),
        "maxKey" => Target::Unsupported("maxKey"),
        _ => return None,
    })
}

fn target_from_code(code: i64) -> Option<Target> {
    Some(match code {
        1 => Target::Double,
        2 => Target::String,
        7 => Target::ObjectId,
        8 => Target::Bool,
        9 => Target::Date,
        16 => Target::Int,
        18 => Target::Long,
        19 => Target::Decimal,
        3 => Target::Unsupported("object"),
        4 => Target::Unsupported("array"),
        5 => Target::Unsupported("binData"),
        6 => Target::Unsupported("undefined"),
        10 => Target::Unsupported("null"),
        11 => Target::Unsupported("regex"),
        12 => Target::Unsupported("dbPointer"),
        13 => Target::Unsupported("javascript"),
        14 => Target::Unsupported("symbol"),
        15 => Target::Unsupported("javascriptWithScope"),
        17 => Target::Unsupported("timestamp"),
        -1 => Target::Unsupported("minKey"),
        127 => Target::Unsupported("maxKey"),
        _ => return None,
    })
}

fn target_name(target: Target) -> &'static str {
    match target {
        Target::Double => "double",
        Target::String => "string",
        Target::ObjectId => "objectId",
        Target::Bool => "bool",
        Target::Date => "date",
        Target::Int => "int",
        Target::Long => "long",
        Target::Decimal => "decimal",
        Target::Unsupported(name) => name,
    }
}

pub(super) fn evaluate_convert(
    input: &Expr,
    to: &Expr,
    on_error: Option<&Expr>,
    on_null: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    let to = evaluate(to, vars)?;
    if is_nullish(&to) {
        return Ok(Some(Bson::Null));
    }
    let target = match &to {
        Some(Bson::String(name)) => target_from_name(name)
            .ok_or_else(|| fail(ErrorCode::BadValue, format!("Unknown type name: {name}")))?,
        Some(other) => {
            let code = Number::from_bson(other)
                .ok_or_else(|| {
                    fail(
                        ErrorCode::Location50784,
                        format!(
                            "$convert's 'to' argument must be a string or number, but is {}",
                            type_name(other)
                        ),
                    )
                })?
                .to_exact_i64()
                .ok_or_else(|| {
                    fail(
                        ErrorCode::FailedToParse,
                        format!(
                            "In $convert, numeric 'to' argument is not an integer: {}",
                            value_string(other)
                        ),
                    )
                })?;
            target_from_code(code).ok_or_else(|| {
                fail(
                    ErrorCode::FailedToParse,
                    format!("In $convert, numeric value for 'to' does not correspond to a BSON type: {code}"),
                )
            })?
        }
        None => return Ok(Some(Bson::Null)),
    };
    if is_nullish(&input) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(input) = input else {
        return Ok(Some(Bson::Null));
    };
    match convert(&input, target) {
        Ok(value) => Ok(Some(value)),
        Err(reason) => match on_error {
            Some(on_error) => evaluate(on_error, vars),
            None => Err(fail(ErrorCode::ConversionFailure, reason.message())),
        },
    }
}

/// Why a conversion failed; rendered with mongod's "... in $convert with no onError value".
enum ConversionError {
    Unsupported(&'static str, &'static str),
    Message(String),
}

impl ConversionError {
    fn message(&self) -> String {
        match self {
            ConversionError::Unsupported(from, to) => {
                format!(
                    "Unsupported conversion from {from} to {to} in $convert with no onError value"
                )
            }
            ConversionError::Message(text) => text.clone(),
        }
    }
}

fn parse_failure(text: &str, reason: &str) -> ConversionError {
    ConversionError::Message(format!(
        "Failed to parse number '{text}' in $convert with no onError value: {reason}"
    ))
}

fn overflow(value: &Bson) -> ConversionError {
    ConversionError::Message(format!(
        "Conversion would overflow target type in $convert with no onError value: {}",
        value_string(value)
    ))
}

fn integral_from_number(number: Number, value: &Bson, int32: bool) -> Result<i64, ConversionError> {
    match number {
        Number::Double(v) if v.is_nan() => Err(ConversionError::Message(
            "Attempt to convert NaN value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Double(v) if v.is_infinite() => Err(ConversionError::Message(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Decimal(Decimal::NaN) => Err(ConversionError::Message(
            "Attempt to convert NaN value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Decimal(Decimal::Infinity { .. }) => Err(ConversionError::Message(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .to_string(),
        )),
        other => {
            let truncated = other.to_i64_truncated().ok_or_else(|| overflow(value))?;
            if int32 && i32::try_from(truncated).is_err() {
                return Err(overflow(value));
            }
            Ok(truncated)
        }
    }
}

fn parse_integer_string(text: &str) -> Result<i64, ConversionError> {
    if text.is_empty() {
        return Err(parse_failure(text, "No digits"));
    }
    text.parse::<i64>()
        .map_err(|_| parse_failure(text, "Did not consume whole string."))
}

fn parse_double_string(text: &str) -> Result<f64, ConversionError> {
    let lowered = text.to_ascii_lowercase();
    let valid = !text.is_empty()
        && !lowered.starts_with("0x")
        && !text.contains(char::is_whitespace)
        && (text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            || matches!(
                lowered.trim_start_matches(['+', '-']),
                "inf" | "infinity" | "nan"
            ));
    if !valid {
        return Err(parse_failure(text, "Did not consume whole string."));
    }
    text.parse::<f64>()
        .map_err(|_| parse_failure(text, "Did not consume whole string."))
}

fn convert(value: &Bson, target: Target) -> Result<Bson, ConversionError> {
    let from = type_name(value);
    let unsupported = || ConversionError::Unsupported(from, target_name(target));
    let number = Number::from_bson(value);
    match target {
        Target::Unsupported(_) => Err(unsupported()),
        Target::Double => match value {
            Bson::Boolean(flag) => Ok(Bson::Double(if *flag { 1.0 } else { 0.0 })),
            Bson::String(text) => parse_double_string(text).map(Bson::Double),
            Bson::DateTime(moment) => Ok(Bson::Double(moment.timestamp_millis() as f64)),
            Bson::Decimal128(_) => {
                let converted = number.map_or(f64::NAN, Number::to_f64);
                if converted.is_infinite() && !matches!(number, Some(Number::Decimal(Decimal::Infinity { .. }))) {
                    return Err(overflow(value));
                }
                Ok(Bson::Double(converted))
            }
            _ => number
                .map(|number| Bson::Double(number.to_f64()))
                .ok_or_else(unsupported),
        },
        Target::Int | Target::Long => {
            let int32 = target == Target::Int;
            let integral = match value {
                Bson::Boolean(flag) => i64::from(*flag),
                Bson::String(text) => {
                    let parsed = parse_integer_string(text)?;
                    if int32 && i32::try_from(parsed).is_err() {
                        return Err(overflow(value));
                    }
                    parsed
                }
                Bson::DateTime(moment) if !int32 => moment.timestamp_millis(),
                _ => {
                    let number = number.ok_or_else(unsupported)?;
                    integral_from_number(number, value, int32)?
                }
            };
            Ok(if int32 {
                Bson::Int32(i32::try_from(integral).map_err(|_| overflow(value))?)
            } else {
                Bson::Int64(integral)
            })
        }
        Target::Decimal => {
            let decimal = match value {
                Bson::Boolean(flag) => Decimal::from_i64(i64::from(*flag)),
                Bson::String(text) => {
                    let parsed = text
                        .parse::<Decimal128>()
                        .map_err(|_| parse_failure(text, "Failed to parse string to decimal"))?;
                    return Ok(Bson::Decimal128(parsed));
                }
                Bson::DateTime(moment) => Decimal::from_i64(moment.timestamp_millis()),
                Bson::Double(v) => {
                    // mongod converts doubles to decimal rounded to 15 significant digits.
                    if !v.is_finite() {
                        Decimal::from_f64(*v)
                    } else {
                        let text = format!("{v:.14e}");
                        return text
                            .parse::<f64>()
                            .ok()
                            .and_then(|_| decimal_from_scientific(&text))
                            .map(Bson::Decimal128)
                            .ok_or_else(unsupported);
                    }
                }
                _ => number.ok_or_else(unsupported)?.to_decimal(),
            };
            Ok(decimal_bson(decimal))
        }
        Target::Bool => match value {
            Bson::Boolean(flag) => Ok(Bson::Boolean(*flag)),
            Bson::String(_) | Bson::ObjectId(_) | Bson::DateTime(_) | Bson::Timestamp(_) => {
                Ok(Bson::Boolean(true))
            }
            _ => number
                .map(|number| Bson::Boolean(!number.is_zero()))
                .ok_or_else(unsupported),
        },
        Target::String => match value {
            Bson::String(text) => Ok(Bson::String(text.clone())),
            Bson::Boolean(flag) => Ok(Bson::String(flag.to_string())),
            Bson::ObjectId(id) => Ok(Bson::String(id.to_hex())),
            Bson::DateTime(moment) => Ok(Bson::String(iso_date_string(moment.timestamp_millis()))),
            Bson::Int32(v) => Ok(Bson::String(v.to_string())),
            Bson::Int64(v) => Ok(Bson::String(v.to_string())),
            Bson::Double(v) => Ok(Bson::String(double_string(*v))),
            Bson::Decimal128(v) => Ok(Bson::String(v.to_string())),
            _ => Err(unsupported()),
        },
        Target::ObjectId => match value {
            Bson::ObjectId(id) => Ok(Bson::ObjectId(*id)),
            Bson::String(text) => ObjectId::parse_str(text).map(Bson::ObjectId).map_err(|_| {
                ConversionError::Message(format!(
                    "Failed to parse objectId '{text}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}",
                    text.len()
                ))
            }),
            _ => Err(unsupported()),
        },
        Target::Date => match value {
            Bson::DateTime(moment) => Ok(Bson::DateTime(*moment)),
            Bson::Int64(millis) => Ok(Bson::DateTime(DateTime::from_millis(*millis))),
            Bson::Double(v) => {
                if !v.is_finite() || v.abs() >= 9.2e18 {
                    return Err(overflow(value));
                }
                Ok(Bson::DateTime(DateTime::from_millis(v.trunc() as i64)))
            }
            Bson::Decimal128(_) => {
                let millis = number
                    .and_then(Number::to_i64_truncated)
                    .ok_or_else(|| overflow(value))?;
                Ok(Bson::DateTime(DateTime::from_millis(millis)))
            }
            Bson::ObjectId(id) => Ok(Bson::DateTime(DateTime::from_millis(
                i64::from(u32::from_be_bytes(
                    <[u8; 4]>::try_from(&id.bytes()[..4]).unwrap_or_default(),
                )) * 1000,
            ))),
            Bson::Timestamp(stamp) => Ok(Bson::DateTime(DateTime::from_millis(
                i64::from(stamp.time) * 1000,
            ))),
            Bson::String(text) => parse_iso_date(text).map(|millis| Bson::DateTime(DateTime::from_millis(millis))).ok_or_else(|| {
                ConversionError::Message(format!(
                    "Error parsing date string '{text}'; in $convert with no onError value"
                ))
            }),
            _ => Err(unsupported()),
        },
    }
}

fn decimal_from_scientific(text: &str) -> Option<Decimal128> {
    let (mantissa, exponent) = text.split_once('e')?;
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent = exponent.parse::<i32>().ok()? - (digits.len() as i32 - 1);
    format!("{}{digits}E{exponent}", if negative { "-" } else { "" })
        .parse::<Decimal128>()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, value};
    use crate::compare::fixtures::decimal;
    use crate::expr::fixtures::assert_value;
    use bson::{oid::ObjectId, Bson, DateTime};
    use tideway_base::error::ErrorCode;

    #[test]
    fn type_and_conversion_operators() {
        assert_value(value(bson::bson!({"$type": "$missing"})), "missing".into());
        assert_value(value(bson::bson!({"$type": [[1]]})), "array".into());
        assert_value(value(bson::bson!({"$type": 1_i64})), "long".into());
        assert_value(value(bson::bson!({"$toString": 1.5})), "1.5".into());
        assert_value(value(bson::bson!({"$toString": 2.0})), "2".into());
        assert_value(
            value(
                bson::bson!({"$toString": Bson::DateTime(DateTime::from_millis(1_614_834_367_089))}),
            ),
            "2021-03-04T05:06:07.089Z".into(),
        );
        assert_value(value(bson::bson!({"$toInt": "42"})), Bson::Int32(42));
        assert_value(value(bson::bson!({"$toInt": 4.9})), Bson::Int32(4));
        assert_value(value(bson::bson!({"$toLong": true})), Bson::Int64(1));
        assert_value(value(bson::bson!({"$toDouble": "2.5"})), Bson::Double(2.5));
        assert_value(value(bson::bson!({"$toBool": 0})), Bson::Boolean(false));
        assert_value(value(bson::bson!({"$toBool": ""})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$toDecimal": 0.1})),
            decimal("0.100000000000000"),
        );
        assert_value(
            value(bson::bson!({"$toDate": "2021-03-04T05:06:07.089Z"})),
            Bson::DateTime(DateTime::from_millis(1_614_834_367_089)),
        );
        assert_value(
            value(bson::bson!({"$toObjectId": "0123456789abcdef01234567"})),
            Bson::ObjectId(ObjectId::parse_str("0123456789abcdef01234567").expect("hex")),
        );
        assert_value(value(bson::bson!({"$toInt": null})), Bson::Null);
        let failure = error(bson::bson!({"$toInt": "abc"}));
        assert_eq!(failure.code, ErrorCode::ConversionFailure);
        assert_eq!(
            failure.errmsg,
            "Failed to parse number 'abc' in $convert with no onError value: Did not consume whole string."
        );
        assert_eq!(
            error(bson::bson!({"$toInt": 3_000_000_000_i64})).code,
            ErrorCode::ConversionFailure
        );
        assert_value(
            value(bson::bson!({"$convert": {"input": "abc", "to": "int", "onError": -1}})),
            Bson::Int32(-1),
        );
        assert_value(
            value(bson::bson!({"$convert": {"input": null, "to": 16, "onNull": 0}})),
            Bson::Int32(0),
        );
        assert_eq!(
            error(bson::bson!({"$convert": {"input": [1], "to": "int"}})).errmsg,
            "Unsupported conversion from array to int in $convert with no onError value"
        );
        assert_eq!(
            error(bson::bson!({"$convert": {"input": 1, "to": "bogus"}})).code,
            ErrorCode::BadValue
        );
    }
}
