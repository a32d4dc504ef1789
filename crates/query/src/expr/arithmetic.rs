//! Arithmetic operators (`$add`, `$subtract`, `$multiply`, `$divide`, `$mod`, `$abs`, `$ceil`,
//! `$floor`, `$round`, `$trunc`) with mongod's numeric type promotion, and the number helpers
//! `$group`'s accumulators share (`add_numbers`, `divide_decimal`, `number_bson`).

use bson::{Bson, DateTime, Decimal128};

use super::{fail, is_nullish, Op, Value};
use crate::numeric::{apply_arithmetic, digit_count, pow10, Arithmetic, Decimal, Number};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

pub(super) fn decimal_bson(value: Decimal) -> Bson {
    match value.to_decimal128() {
        Some(decimal) => Bson::Decimal128(decimal),
        // Out of the Decimal128 exponent range: overflow to infinity, underflow to zero.
        None => {
            let (negative, large) = match value {
                Decimal::Finite {
                    negative, exponent, ..
                } => (negative, exponent > 0),
                _ => (false, false),
            };
            let text = match (large, negative) {
                (true, true) => "-Infinity",
                (true, false) => "Infinity",
                (false, true) => "-0",
                (false, false) => "0",
            };
            text.parse::<Decimal128>()
                .map(Bson::Decimal128)
                .unwrap_or(Bson::Null)
        }
    }
}

pub(crate) fn number_bson(number: Number) -> Bson {
    match number {
        Number::Int32(value) => Bson::Int32(value),
        Number::Int64(value) => Bson::Int64(value),
        Number::Double(value) => Bson::Double(value),
        Number::Decimal(value) => decimal_bson(value),
    }
}

fn negate_decimal(value: Decimal) -> Decimal {
    match value {
        Decimal::NaN => Decimal::NaN,
        Decimal::Infinity { negative } => Decimal::Infinity {
            negative: !negative,
        },
        Decimal::Finite {
            negative,
            coefficient,
            exponent,
        } => Decimal::Finite {
            negative: !negative,
            coefficient,
            exponent,
        },
    }
}

/// `a + b` with mongod's promotion; long overflow falls back to double.
pub(crate) fn add_numbers(a: Number, b: Number) -> Number {
    apply_arithmetic(Arithmetic::Add, a, b)
        .unwrap_or_else(|| Number::Double(a.to_f64() + b.to_f64()))
}

fn multiply_numbers(a: Number, b: Number) -> Number {
    apply_arithmetic(Arithmetic::Multiply, a, b)
        .unwrap_or_else(|| Number::Double(a.to_f64() * b.to_f64()))
}

fn subtract_numbers(a: Number, b: Number) -> Number {
    match (a, b) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => add_numbers(
            Number::Decimal(a.to_decimal()),
            Number::Decimal(negate_decimal(b.to_decimal())),
        ),
        (Number::Double(_), _) | (_, Number::Double(_)) => Number::Double(a.to_f64() - b.to_f64()),
        (Number::Int32(x), Number::Int32(y)) => match x.checked_sub(y) {
            Some(value) => Number::Int32(value),
            None => Number::Int64(i64::from(x) - i64::from(y)),
        },
        _ => {
            let (x, y) = (a.to_i64_truncated(), b.to_i64_truncated());
            match (x, y) {
                (Some(x), Some(y)) => x
                    .checked_sub(y)
                    .map_or(Number::Double(x as f64 - y as f64), Number::Int64),
                _ => Number::Double(a.to_f64() - b.to_f64()),
            }
        }
    }
}

/// Exact decimal division rounded half-even to 34 digits; the divisor is not zero.
pub(crate) fn divide_decimal(a: Decimal, b: Decimal) -> Decimal {
    match (a, b) {
        (Decimal::NaN, _) | (_, Decimal::NaN) => Decimal::NaN,
        (Decimal::Infinity { .. }, Decimal::Infinity { .. }) => Decimal::NaN,
        (Decimal::Infinity { negative: x }, Decimal::Finite { negative: y, .. }) => {
            Decimal::Infinity { negative: x != y }
        }
        (Decimal::Finite { negative: x, .. }, Decimal::Infinity { negative: y }) => {
            Decimal::Finite {
                negative: x != y,
                coefficient: 0,
                exponent: 0,
            }
        }
        (
            Decimal::Finite {
                negative: a_negative,
                coefficient: a_coefficient,
                exponent: a_exponent,
            },
            Decimal::Finite {
                negative: b_negative,
                coefficient: b_coefficient,
                exponent: b_exponent,
            },
        ) => {
            let negative = a_negative != b_negative;
            if b_coefficient == 0 {
                return Decimal::Infinity { negative };
            }
            // Long division: the remainder stays below the divisor (< 10^34), so every step
            // fits in u128; stop at 35 digits (one guard digit) or when exact.
            let mut quotient = a_coefficient / b_coefficient;
            let mut remainder = a_coefficient % b_coefficient;
            let mut exponent = i64::from(a_exponent) - i64::from(b_exponent);
            while remainder != 0 && (quotient == 0 || digit_count(quotient) < 35) {
                remainder *= 10;
                quotient = quotient * 10 + remainder / b_coefficient;
                remainder %= b_coefficient;
                exponent -= 1;
            }
            while digit_count(quotient) > 34 {
                let dropped = quotient % 10;
                quotient /= 10;
                exponent += 1;
                let round_up =
                    dropped > 5 || (dropped == 5 && (remainder != 0 || quotient % 2 == 1));
                if dropped != 0 {
                    remainder = 1;
                }
                if round_up {
                    quotient += 1;
                }
            }
            if quotient == pow10(34) {
                quotient /= 10;
                exponent += 1;
            }
            Decimal::Finite {
                negative,
                coefficient: quotient,
                exponent: exponent.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    HalfEven,
    TowardZero,
    Floor,
    Ceil,
}

/// Rounds a decimal to `places` digits after the point.
fn round_decimal(value: Decimal, places: i32, mode: Rounding) -> Decimal {
    let Decimal::Finite {
        negative,
        coefficient,
        exponent,
    } = value
    else {
        return value;
    };
    let target = -places;
    if exponent >= target {
        return value;
    }
    let shift = (i64::from(target) - i64::from(exponent)).unsigned_abs();
    let (mut quotient, remainder, half) = if shift > 38 {
        (0u128, coefficient, None)
    } else {
        let divisor = pow10(shift as u32);
        (coefficient / divisor, coefficient % divisor, Some(divisor))
    };
    let round_up = match mode {
        Rounding::TowardZero => false,
        Rounding::Floor => negative && remainder != 0,
        Rounding::Ceil => !negative && remainder != 0,
        Rounding::HalfEven => match half {
            None => false,
            Some(divisor) => {
                let twice = remainder * 2;
                twice > divisor || (twice == divisor && quotient % 2 == 1)
            }
        },
    };
    if round_up {
        quotient += 1;
    }
    let mut exponent = target;
    if quotient >= pow10(34) {
        quotient /= 10;
        exponent += 1;
    }
    Decimal::Finite {
        negative,
        coefficient: quotient,
        exponent,
    }
}

fn round_double(value: f64, places: i32, mode: Rounding) -> f64 {
    if !value.is_finite() {
        return value;
    }
    if places == 0 {
        return match mode {
            Rounding::HalfEven => value.round_ties_even(),
            Rounding::TowardZero => value.trunc(),
            Rounding::Floor => value.floor(),
            Rounding::Ceil => value.ceil(),
        };
    }
    round_decimal(Decimal::from_f64(value), places, mode).to_f64()
}

/// Rounds an integer to a negative number of places (`places >= 0` leaves it unchanged).
fn round_integer(value: i64, places: i32, mode: Rounding) -> i128 {
    if places >= 0 {
        return i128::from(value);
    }
    let shift = places.unsigned_abs().min(30);
    let divisor = 10i128.pow(shift);
    let magnitude = i128::from(value).abs();
    let (mut quotient, remainder) = (magnitude / divisor, magnitude % divisor);
    let negative = value < 0;
    let round_up = match mode {
        Rounding::TowardZero => false,
        Rounding::Floor => negative && remainder != 0,
        Rounding::Ceil => !negative && remainder != 0,
        Rounding::HalfEven => {
            remainder * 2 > divisor || (remainder * 2 == divisor && quotient % 2 == 1)
        }
    };
    if round_up {
        quotient += 1;
    }
    let rounded = quotient * divisor;
    if negative {
        -rounded
    } else {
        rounded
    }
}

fn round_number(number: Number, places: i32, mode: Rounding) -> Number {
    match number {
        Number::Int32(value) => {
            let rounded = round_integer(i64::from(value), places, mode);
            i32::try_from(rounded).map_or_else(
                |_| i64::try_from(rounded).map_or(Number::Double(rounded as f64), Number::Int64),
                Number::Int32,
            )
        }
        Number::Int64(value) => {
            let rounded = round_integer(value, places, mode);
            i64::try_from(rounded).map_or(Number::Double(rounded as f64), Number::Int64)
        }
        Number::Double(value) => Number::Double(round_double(value, places, mode)),
        Number::Decimal(value) => Number::Decimal(round_decimal(value, places, mode)),
    }
}

fn numeric_argument(name: &str, value: &Bson, code: ErrorCode) -> CommandResult<Number> {
    Number::from_bson(value).ok_or_else(|| {
        fail(
            code,
            format!(
                "{name} only supports numeric types, not {}",
                type_name(value)
            ),
        )
    })
}

pub(crate) fn evaluate_add(values: Vec<Value>) -> CommandResult<Value> {
    let mut total = Number::Int32(0);
    let mut date: Option<i64> = None;
    for value in values {
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let Some(value) = value else { continue };
        match &value {
            Bson::DateTime(moment) => {
                if date.is_some() {
                    return Err(fail(
                        ErrorCode::Location16612,
                        "only one date allowed in an $add expression",
                    ));
                }
                date = Some(moment.timestamp_millis());
            }
            other => {
                let number = Number::from_bson(other).ok_or_else(|| {
                    fail(
                        ErrorCode::Location16554,
                        format!(
                            "$add only supports numeric or date types, not {}",
                            type_name(other)
                        ),
                    )
                })?;
                total = add_numbers(total, number);
            }
        }
    }
    Ok(Some(match date {
        Some(millis) => Bson::DateTime(DateTime::from_millis(
            millis.saturating_add(round_to_millis(total)),
        )),
        None => number_bson(total),
    }))
}

/// A numeric offset added to a date, rounded to whole milliseconds as mongod does.
fn round_to_millis(number: Number) -> i64 {
    match number {
        Number::Int32(value) => i64::from(value),
        Number::Int64(value) => value,
        other => {
            let value = other.to_f64().round();
            if value.is_nan() {
                0
            } else {
                value as i64
            }
        }
    }
}

/// Both operands of a binary arithmetic operator, or `None` when either is null or missing (the
/// operator's result is then null).
fn both_operands(a: Value, b: Value) -> Option<(Bson, Bson)> {
    if is_nullish(&a) || is_nullish(&b) {
        return None;
    }
    Some((a?, b?))
}

/// The numbers of a division-like operator (`$divide`, `$mod`), refusing a zero divisor.
fn dividend_and_divisor(
    name: &str,
    a: &Bson,
    b: &Bson,
    type_code: ErrorCode,
    zero_code: ErrorCode,
) -> CommandResult<(Number, Number)> {
    let (x, y) = binary_numbers(name, a, b, type_code)?;
    if y.is_zero() {
        return Err(fail(zero_code, format!("can't {name} by zero")));
    }
    Ok((x, y))
}

pub(crate) fn evaluate_subtract(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let mismatch = |a: &Bson, b: &Bson| {
        fail(
            ErrorCode::Location16556,
            format!("can't $subtract {} from {}", type_name(b), type_name(a)),
        )
    };
    match (&a, &b) {
        (Bson::DateTime(x), Bson::DateTime(y)) => Ok(Some(Bson::Int64(
            x.timestamp_millis().saturating_sub(y.timestamp_millis()),
        ))),
        (Bson::DateTime(x), other) => {
            let number = Number::from_bson(other).ok_or_else(|| mismatch(&a, &b))?;
            Ok(Some(Bson::DateTime(DateTime::from_millis(
                x.timestamp_millis().saturating_sub(round_to_millis(number)),
            ))))
        }
        (x, y) => match (Number::from_bson(x), Number::from_bson(y)) {
            (Some(x), Some(y)) => Ok(Some(number_bson(subtract_numbers(x, y)))),
            _ => Err(mismatch(&a, &b)),
        },
    }
}

pub(crate) fn evaluate_multiply(values: Vec<Value>) -> CommandResult<Value> {
    let mut product = Number::Int32(1);
    for value in values {
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let Some(value) = value else { continue };
        let number = numeric_argument("$multiply", &value, ErrorCode::Location16555)?;
        product = multiply_numbers(product, number);
    }
    Ok(Some(number_bson(product)))
}

fn binary_numbers(
    name: &str,
    a: &Bson,
    b: &Bson,
    code: ErrorCode,
) -> CommandResult<(Number, Number)> {
    match (Number::from_bson(a), Number::from_bson(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(fail(
            code,
            format!(
                "{name} only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        )),
    }
}

pub(crate) fn evaluate_divide(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let (x, y) = dividend_and_divisor(
        "$divide",
        &a,
        &b,
        ErrorCode::Location16609,
        ErrorCode::Location16608,
    )?;
    Ok(Some(match (x, y) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => {
            decimal_bson(divide_decimal(x.to_decimal(), y.to_decimal()))
        }
        _ => Bson::Double(x.to_f64() / y.to_f64()),
    }))
}

pub(super) fn evaluate_mod(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let (x, y) = dividend_and_divisor(
        "$mod",
        &a,
        &b,
        ErrorCode::Location16611,
        ErrorCode::Location16610,
    )?;
    Ok(Some(match (x, y) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => {
            decimal_bson(decimal_remainder(x.to_decimal(), y.to_decimal())?)
        }
        (Number::Double(_), _) | (_, Number::Double(_)) => Bson::Double(x.to_f64() % y.to_f64()),
        (Number::Int32(p), Number::Int32(q)) => Bson::Int32(p.wrapping_rem(q)),
        _ => match (x.to_i64_truncated(), y.to_i64_truncated()) {
            (Some(p), Some(q)) => Bson::Int64(p.wrapping_rem(q)),
            _ => Bson::Double(x.to_f64() % y.to_f64()),
        },
    }))
}

/// Decimal remainder (sign of the dividend) when both operands align within u128 after
/// scaling to the smaller exponent; wider spreads are not supported.
fn decimal_remainder(a: Decimal, b: Decimal) -> CommandResult<Decimal> {
    match (a, b) {
        (
            Decimal::Finite {
                negative,
                coefficient: a_coefficient,
                exponent: a_exponent,
            },
            Decimal::Finite {
                coefficient: b_coefficient,
                exponent: b_exponent,
                ..
            },
        ) => {
            let exponent = a_exponent.min(b_exponent);
            let scale = |coefficient: u128, from: i32| -> Option<u128> {
                let shift = u32::try_from(i64::from(from) - i64::from(exponent)).ok()?;
                if shift > 38 {
                    return None;
                }
                coefficient.checked_mul(pow10(shift))
            };
            match (
                scale(a_coefficient, a_exponent),
                scale(b_coefficient, b_exponent),
            ) {
                (Some(x), Some(y)) if y != 0 => Ok(Decimal::Finite {
                    negative,
                    coefficient: x % y,
                    exponent,
                }),
                _ => Err(fail(
                    ErrorCode::NotImplemented,
                    "$mod on decimals of very different magnitudes is not supported by this server",
                )),
            }
        }
        (Decimal::Infinity { .. }, _) | (Decimal::NaN, _) | (_, Decimal::NaN) => Ok(Decimal::NaN),
        (finite, Decimal::Infinity { .. }) => Ok(finite),
    }
}

pub(super) fn evaluate_unary_numeric(op: Op, name: &str, value: Value) -> CommandResult<Value> {
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(value) = value else {
        return Ok(Some(Bson::Null));
    };
    let number = numeric_argument(name, &value, ErrorCode::Location28765)?;
    let result = match op {
        Op::Abs => match number {
            Number::Int32(v) => v
                .checked_abs()
                .map_or(Number::Int64(i64::from(v).abs()), Number::Int32),
            Number::Int64(v) => Number::Int64(v.checked_abs().ok_or_else(|| {
                fail(ErrorCode::Location28680, "can't take $abs of long long min")
            })?),
            Number::Double(v) => Number::Double(v.abs()),
            Number::Decimal(v) => Number::Decimal(match v {
                Decimal::Finite {
                    coefficient,
                    exponent,
                    ..
                } => Decimal::Finite {
                    negative: false,
                    coefficient,
                    exponent,
                },
                Decimal::Infinity { .. } => Decimal::Infinity { negative: false },
                Decimal::NaN => Decimal::NaN,
            }),
        },
        Op::Ceil => round_number(number, 0, Rounding::Ceil),
        _ => round_number(number, 0, Rounding::Floor),
    };
    Ok(Some(number_bson(result)))
}

pub(super) fn evaluate_round(op: Op, values: Vec<Value>) -> CommandResult<Value> {
    let name = if op == Op::Round { "$round" } else { "$trunc" };
    let mut values = values.into_iter();
    let value = values.next().flatten();
    let places = values.next().unwrap_or(Some(Bson::Int32(0)));
    if is_nullish(&value) || is_nullish(&places) {
        return Ok(Some(Bson::Null));
    }
    let (Some(value), Some(places)) = (value, places) else {
        return Ok(Some(Bson::Null));
    };
    let number = numeric_argument(name, &value, ErrorCode::Location51081)?;
    let places = Number::from_bson(&places)
        .and_then(Number::to_exact_i64)
        .ok_or_else(|| {
            fail(
                ErrorCode::Location51082,
                format!(
                    "precision argument to  {name} must be a integral value, but got {}",
                    value_string(&places)
                ),
            )
        })?;
    if !(-20..=100).contains(&places) {
        return Err(fail(
            ErrorCode::Location51083,
            format!(
                "cannot apply {name} with precision value {places} value must be in [-20, 100]"
            ),
        ));
    }
    let mode = if op == Op::Round {
        Rounding::HalfEven
    } else {
        Rounding::TowardZero
    };
    Ok(Some(number_bson(round_number(number, places as i32, mode))))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, value};
    use crate::compare::fixtures::decimal;
    use crate::expr::fixtures::assert_value;
    use bson::{Bson, DateTime};

    #[test]
    fn arithmetic_follows_mongod_type_promotion() {
        assert_value(value(bson::bson!({"$add": [1, 2]})), Bson::Int32(3));
        assert_value(
            value(bson::bson!({"$add": [i32::MAX, 1]})),
            Bson::Int64(2_147_483_648),
        );
        assert_value(
            value(bson::bson!({"$add": [i64::MAX, 1]})),
            Bson::Double(i64::MAX as f64 + 1.0),
        );
        assert_value(value(bson::bson!({"$add": [1, 2_i64]})), Bson::Int64(3));
        assert_value(value(bson::bson!({"$add": [1, 0.5]})), Bson::Double(1.5));
        assert_value(
            value(bson::bson!({"$add": [1, decimal("0.5")]})),
            decimal("1.5"),
        );
        assert_value(value(bson::bson!({"$add": []})), Bson::Int32(0));
        assert_value(value(bson::bson!({"$add": [1, null]})), Bson::Null);
        assert_value(value(bson::bson!({"$add": [1, "$missing"]})), Bson::Null);
        assert_value(value(bson::bson!({"$subtract": [5, 7]})), Bson::Int32(-2));
        assert_value(
            value(bson::bson!({"$subtract": [i32::MIN, 1]})),
            Bson::Int64(-2_147_483_649),
        );
        assert_value(
            value(bson::bson!({"$multiply": [3, 4_i64]})),
            Bson::Int64(12),
        );
        assert_value(
            value(bson::bson!({"$multiply": [65_536, 65_536]})),
            Bson::Int64(4_294_967_296),
        );
        assert_value(value(bson::bson!({"$divide": [7, 2]})), Bson::Double(3.5));
        assert_value(
            value(bson::bson!({"$divide": [decimal("1"), 4]})),
            decimal("0.25"),
        );
        assert_value(
            value(bson::bson!({"$divide": [decimal("1"), 3]})),
            decimal("0.3333333333333333333333333333333333"),
        );
        assert_value(value(bson::bson!({"$mod": [7, 3]})), Bson::Int32(1));
        assert_value(value(bson::bson!({"$mod": [-7, 3_i64]})), Bson::Int64(-1));
        assert_value(value(bson::bson!({"$mod": [7.5, 2]})), Bson::Double(1.5));
        assert_value(value(bson::bson!({"$mod": [i32::MIN, -1]})), Bson::Int32(0));
        assert_value(
            value(bson::bson!({"$mod": [decimal("7.5"), 2]})),
            decimal("1.5"),
        );
    }

    #[test]
    fn arithmetic_errors_carry_mongod_codes() {
        let add = error(bson::bson!({"$add": [1, "x"]}));
        assert_eq!(add.code.code(), 16554);
        assert_eq!(
            add.errmsg,
            "$add only supports numeric or date types, not string"
        );
        assert_eq!(error(bson::bson!({"$divide": [1, 0]})).code.code(), 16608);
        assert_eq!(error(bson::bson!({"$divide": [1, "x"]})).code.code(), 16609);
        assert_eq!(error(bson::bson!({"$mod": [1, 0]})).code.code(), 16610);
        assert_eq!(
            error(bson::bson!({"$multiply": [1, "x"]})).code.code(),
            16555
        );
        let subtract = error(bson::bson!({"$subtract": ["x", 1]}));
        assert_eq!(subtract.code.code(), 16556);
        assert_eq!(subtract.errmsg, "can't $subtract int from string");
        assert_eq!(error(bson::bson!({"$abs": "x"})).code.code(), 28765);
        assert_eq!(error(bson::bson!({"$abs": i64::MIN})).code.code(), 28680);
    }

    #[test]
    fn date_arithmetic_adds_milliseconds_and_subtracts_dates() {
        let epoch = Bson::DateTime(DateTime::from_millis(0));
        assert_value(
            value(bson::bson!({"$add": [epoch.clone(), 1000, 0.6]})),
            Bson::DateTime(DateTime::from_millis(1001)),
        );
        assert_value(
            value(
                bson::bson!({"$subtract": [Bson::DateTime(DateTime::from_millis(5000)), epoch.clone()]}),
            ),
            Bson::Int64(5000),
        );
        assert_value(
            value(bson::bson!({"$subtract": [epoch.clone(), 10]})),
            Bson::DateTime(DateTime::from_millis(-10)),
        );
        assert_eq!(
            error(bson::bson!({"$add": [epoch.clone(), epoch]}))
                .code
                .code(),
            16612
        );
    }

    #[test]
    fn rounding_operators_keep_types_and_round_half_even() {
        assert_value(value(bson::bson!({"$abs": -5})), Bson::Int32(5));
        assert_value(
            value(bson::bson!({"$abs": i32::MIN})),
            Bson::Int64(2_147_483_648),
        );
        assert_value(value(bson::bson!({"$ceil": 1.2})), Bson::Double(2.0));
        assert_value(value(bson::bson!({"$floor": -1.2})), Bson::Double(-2.0));
        assert_value(value(bson::bson!({"$floor": 7})), Bson::Int32(7));
        assert_value(value(bson::bson!({"$ceil": decimal("1.01")})), decimal("2"));
        assert_value(value(bson::bson!({"$round": 2.5})), Bson::Double(2.0));
        assert_value(value(bson::bson!({"$round": [3.5, 0]})), Bson::Double(4.0));
        assert_value(
            value(bson::bson!({"$round": [1.2345, 2]})),
            Bson::Double(1.23),
        );
        assert_value(
            value(bson::bson!({"$round": [1250, -2]})),
            Bson::Int32(1200),
        );
        assert_value(
            value(bson::bson!({"$round": [decimal("1.2355"), 3]})),
            decimal("1.236"),
        );
        assert_value(
            value(bson::bson!({"$trunc": [-1.99, 1]})),
            Bson::Double(-1.9),
        );
        assert_value(value(bson::bson!({"$trunc": 7.9})), Bson::Double(7.0));
        assert_value(value(bson::bson!({"$round": [null, 1]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$round": [1, 101]})).code.code(), 51083);
    }
}
