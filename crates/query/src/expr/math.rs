//! Exponential, logarithmic and bitwise operators: `$exp`, `$ln`, `$log`, `$log10`, `$pow`,
//! `$sqrt`, `$bitAnd`, `$bitOr`, `$bitXor`, `$bitNot`, as mongod evaluates them.
//!
//! Invariants: null or missing gives null; a non-number is 28765 (`$log`: 28756/28757, `$pow`:
//! 28762/28763). `$pow` of integers stays integral when the result fits (int, else long; long
//! when either operand is long), else double; 0 to a negative power is 28764. Any decimal
//! operand gives a decimal: integral powers multiply exactly in decimal, the transcendental
//! functions are computed in double precision and returned as decimal128 (mongod computes
//! them in decimal; digits past the 16th may differ). Domain errors quote the argument as a
//! C++ stream prints a double. Bitwise operators take int and long only (14, TypeMismatch);
//! the result is long when any operand is long.

use bson::Bson;

use super::arithmetic::{decimal_bson, divide_decimal};
use super::trigonometry::{decimal_from_double, numeric, stream_double};
use super::{fail, is_nullish, number_bson, Value};
use crate::numeric::{apply_arithmetic, digit_count, Arithmetic, Decimal, Number};
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// The operators of this family (`Op::Math`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MathOp {
    Exp,
    Ln,
    Log,
    Log10,
    Pow,
    Sqrt,
    BitAnd,
    BitOr,
    BitXor,
    BitNot,
}

impl MathOp {
    fn name(self) -> &'static str {
        match self {
            MathOp::Exp => "$exp",
            MathOp::Ln => "$ln",
            MathOp::Log => "$log",
            MathOp::Log10 => "$log10",
            MathOp::Pow => "$pow",
            MathOp::Sqrt => "$sqrt",
            MathOp::BitAnd => "$bitAnd",
            MathOp::BitOr => "$bitOr",
            MathOp::BitXor => "$bitXor",
            MathOp::BitNot => "$bitNot",
        }
    }
}

pub(super) fn evaluate_math(op: MathOp, values: Vec<Value>) -> CommandResult<Value> {
    match op {
        MathOp::BitAnd | MathOp::BitOr | MathOp::BitXor => bitwise(op, values),
        MathOp::Log | MathOp::Pow => {
            let mut values = values.into_iter();
            let (a, b) = (values.next().flatten(), values.next().flatten());
            if is_nullish(&a) || is_nullish(&b) {
                return Ok(Some(Bson::Null));
            }
            let (Some(a), Some(b)) = (a, b) else {
                return Ok(Some(Bson::Null));
            };
            if op == MathOp::Log {
                log(&a, &b)
            } else {
                pow(&a, &b)
            }
        }
        _ => {
            let value = values.into_iter().next().flatten();
            if is_nullish(&value) {
                return Ok(Some(Bson::Null));
            }
            let Some(value) = value else {
                return Ok(Some(Bson::Null));
            };
            let number = numeric(op.name(), &value, ErrorCode::Location28765)?;
            unary(op, number)
        }
    }
}

fn is_positive_decimal(number: Number) -> bool {
    matches!(number, Number::Decimal(value)
        if value.total_cmp(Decimal::from_i64(0)) == std::cmp::Ordering::Greater)
}

/// A double result, as a decimal when the operand was one.
fn result(value: f64, decimal: bool) -> Value {
    Some(if decimal {
        decimal_from_double(value)
    } else {
        Bson::Double(value)
    })
}

fn unary(op: MathOp, number: Number) -> CommandResult<Value> {
    let decimal = matches!(number, Number::Decimal(_));
    let x = number.to_f64();
    let positive = |code, name: &str| {
        if is_positive_decimal(number) || x > 0.0 || x.is_nan() {
            Ok(())
        } else {
            Err(fail(
                code,
                format!(
                    "{name}'s argument must be a positive number, but is {}",
                    stream_double(x)
                ),
            ))
        }
    };
    match op {
        MathOp::Exp => Ok(result(x.exp(), decimal)),
        MathOp::Ln => {
            positive(ErrorCode::Location28766, "$ln")?;
            Ok(result(x.ln(), decimal && x > 0.0))
        }
        MathOp::Log10 => {
            positive(ErrorCode::Location28761, "$log10")?;
            Ok(result(x.log10(), decimal && x > 0.0))
        }
        MathOp::Sqrt => {
            if x < 0.0 {
                return Err(fail(
                    ErrorCode::Location28714,
                    "$sqrt's argument must be greater than or equal to 0",
                ));
            }
            Ok(result(x.sqrt(), decimal))
        }
        _ => match number {
            Number::Int32(v) => Ok(Some(Bson::Int32(!v))),
            Number::Int64(v) => Ok(Some(Bson::Int64(!v))),
            other => Err(fail(
                ErrorCode::TypeMismatch,
                format!(
                    "$bitNot only supports int and long, not: {}.",
                    type_name(&number_bson(other))
                ),
            )),
        },
    }
}

fn log(argument: &Bson, base: &Bson) -> CommandResult<Value> {
    let x = numeric_operand(argument, "$log's argument", ErrorCode::Location28756)?;
    let b = numeric_operand(base, "$log's base", ErrorCode::Location28757)?;
    let (xf, bf) = (x.to_f64(), b.to_f64());
    // mongod's decimal path covers the valid domain; NaN falls through to double.
    let decimal = (matches!(x, Number::Decimal(_)) || matches!(b, Number::Decimal(_)))
        && xf > 0.0
        && bf > 0.0
        && bf != 1.0;
    if !(xf > 0.0 || xf.is_nan()) {
        return Err(fail(
            ErrorCode::Location28758,
            format!(
                "$log's argument must be a positive number, but is {}",
                stream_double(xf)
            ),
        ));
    }
    if !((bf > 0.0 && bf != 1.0) || bf.is_nan()) {
        return Err(fail(
            ErrorCode::Location28759,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                stream_double(bf)
            ),
        ));
    }
    Ok(result(xf.ln() / bf.ln(), decimal))
}

/// `$pow`'s and `$log`'s operands: numbers (`"<what> must be numeric, not <type>"`).
fn numeric_operand(value: &Bson, what: &str, code: ErrorCode) -> CommandResult<Number> {
    Number::from_bson(value).ok_or_else(|| {
        fail(
            code,
            format!("{what} must be numeric, not {}", type_name(value)),
        )
    })
}

fn pow(base: &Bson, exponent: &Bson) -> CommandResult<Value> {
    let b = numeric_operand(base, "$pow's base", ErrorCode::Location28762)?;
    let e = numeric_operand(exponent, "$pow's exponent", ErrorCode::Location28763)?;
    if b.is_zero() && e.to_f64() < 0.0 {
        return Err(fail(
            ErrorCode::Location28764,
            "$pow cannot take a base of 0 and a negative exponent",
        ));
    }
    match (b, e) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => Ok(Some(decimal_pow(b, e))),
        (Number::Double(_), _) | (_, Number::Double(_)) => {
            Ok(Some(Bson::Double(b.to_f64().powf(e.to_f64()))))
        }
        _ => Ok(Some(integer_pow(b, e))),
    }
}

/// `$pow` of two integers, as mongod: exact when it fits a long, else double.
fn integer_pow(base: Number, exponent: Number) -> Bson {
    let long = matches!(base, Number::Int64(_)) || matches!(exponent, Number::Int64(_));
    let (Some(b), Some(e)) = (base.to_exact_i64(), exponent.to_exact_i64()) else {
        return Bson::Double(base.to_f64().powf(exponent.to_f64()));
    };
    let exact = match b {
        0 => Some(i64::from(e == 0)),
        1 => Some(1),
        -1 => Some(if e % 2 == 0 { 1 } else { -1 }),
        _ => u32::try_from(e).ok().and_then(|e| b.checked_pow(e)),
    };
    match exact {
        Some(value) if long => Bson::Int64(value),
        Some(value) => i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32),
        None => Bson::Double((b as f64).powf(e as f64)),
    }
}

/// `$pow` with a decimal operand: integral exponents by decimal multiplication (of the
/// reciprocal for a negative exponent), others in double precision. The result carries 34
/// significant digits, as mongod's decimal power does (`4.000000000000000000000000000000000`).
fn decimal_pow(base: Number, exponent: Number) -> Bson {
    let integral = exponent
        .to_exact_i64()
        .filter(|e| e.unsigned_abs() <= 4096 && !base.is_nan());
    let Some(e) = integral else {
        return decimal_from_double(base.to_f64().powf(exponent.to_f64()));
    };
    let mut square = Some(Number::Decimal(if e < 0 {
        divide_decimal(Decimal::from_i64(1), base.to_decimal())
    } else {
        base.to_decimal()
    }));
    let mut power = Some(Number::Decimal(Decimal::from_i64(1)));
    let mut remaining = e.unsigned_abs();
    while remaining > 0 {
        if remaining % 2 == 1 {
            power = power
                .zip(square)
                .and_then(|(p, s)| apply_arithmetic(Arithmetic::Multiply, p, s));
        }
        remaining /= 2;
        if remaining > 0 {
            square = square.and_then(|s| apply_arithmetic(Arithmetic::Multiply, s, s));
        }
    }
    match power {
        Some(power) => decimal_bson(full_precision(power.to_decimal())),
        None => decimal_from_double(base.to_f64().powf(exponent.to_f64())),
    }
}

/// A non-zero finite decimal written with 34 significant digits (trailing zeros added).
fn full_precision(value: Decimal) -> Decimal {
    match value {
        Decimal::Finite {
            negative,
            mut coefficient,
            mut exponent,
        } if coefficient != 0 => {
            while digit_count(coefficient) < 34 && exponent > MIN_DECIMAL_EXPONENT {
                coefficient *= 10;
                exponent -= 1;
            }
            Decimal::Finite {
                negative,
                coefficient,
                exponent,
            }
        }
        other => other,
    }
}

/// The smallest exponent of a decimal128 coefficient.
const MIN_DECIMAL_EXPONENT: i32 = -6176;

/// `$bitAnd`/`$bitOr`/`$bitXor`: folded from the identity (-1, 0, 0 as int).
fn bitwise(op: MathOp, values: Vec<Value>) -> CommandResult<Value> {
    let mut total: i64 = if op == MathOp::BitAnd { -1 } else { 0 };
    let mut long = false;
    for value in values {
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let operand = match value {
            Some(Bson::Int32(v)) => i64::from(v),
            Some(Bson::Int64(v)) => {
                long = true;
                v
            }
            _ => {
                return Err(fail(
                    ErrorCode::TypeMismatch,
                    format!("{} only supports int and long operands.", op.name()),
                ))
            }
        };
        total = match op {
            MathOp::BitAnd => total & operand,
            MathOp::BitOr => total | operand,
            _ => total ^ operand,
        };
    }
    Ok(Some(if long {
        Bson::Int64(total)
    } else {
        Bson::Int32(i32::try_from(total).unwrap_or_default())
    }))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_errors, check_values, value};
    use bson::{bson, Bson, Decimal128};

    fn decimal(text: &str) -> Bson {
        Bson::Decimal128(text.parse::<Decimal128>().expect("a decimal literal"))
    }

    #[test]
    fn exponents_and_logarithms_answer_the_manuals_examples() {
        check_values(vec![
            (bson!({"$exp": 0}), bson!(1.0)),
            (bson!({"$exp": 2}), bson!(7.38905609893065)),
            (bson!({"$exp": -2}), bson!(0.1353352832366127)),
            (bson!({"$ln": 1}), bson!(0.0)),
            (bson!({"$ln": std::f64::consts::E}), bson!(1.0)),
            (bson!({"$ln": 10}), bson!(std::f64::consts::LN_10)),
            (bson!({"$log": [100, 10]}), bson!(2.0)),
            (
                bson!({"$log": [100, std::f64::consts::E]}),
                bson!(4.605170185988092),
            ),
            (bson!({"$log10": 1}), bson!(0.0)),
            (bson!({"$log10": 10}), bson!(1.0)),
            (bson!({"$log10": 100}), bson!(2.0)),
            (bson!({"$log10": 1000}), bson!(3.0)),
            (bson!({"$sqrt": 25}), bson!(5.0)),
            (bson!({"$sqrt": 30}), bson!(5.477225575051661)),
            (bson!({"$sqrt": null}), Bson::Null),
            (bson!({"$ln": "$missing"}), Bson::Null),
            (bson!({"$log": [null, 10]}), Bson::Null),
        ]);
        assert!(matches!(
            value(bson!({"$sqrt": decimal("4")})),
            Some(Bson::Decimal128(_))
        ));
        assert!(matches!(value(bson!({"$ln": f64::NAN})), Some(Bson::Double(v)) if v.is_nan()));
    }

    #[test]
    fn pow_keeps_integers_exact_and_promotes_like_mongod() {
        check_values(vec![
            (bson!({"$pow": [5, 0]}), bson!(1)),
            (bson!({"$pow": [5, 2]}), bson!(25)),
            (bson!({"$pow": [5, -2]}), bson!(0.04)),
            (bson!({"$pow": [2, 31]}), Bson::Int64(2_147_483_648)),
            (bson!({"$pow": [2_i64, 3]}), Bson::Int64(8)),
            (bson!({"$pow": [2, 3_i64]}), Bson::Int64(8)),
            (bson!({"$pow": [2, 63]}), bson!(9_223_372_036_854_775_808.0)),
            (bson!({"$pow": [-1, 5]}), bson!(-1)),
            (bson!({"$pow": [0, 0]}), bson!(1)),
            (bson!({"$pow": [2.0, 3]}), bson!(8.0)),
            // log_pow_exp.js.
            (
                bson!({"$pow": [decimal("10.0"), -2]}),
                decimal("0.01000000000000000000000000000000000"),
            ),
            (
                bson!({"$pow": [0.5, decimal("-1")]}),
                decimal("2.000000000000000000000000000000000"),
            ),
            (
                bson!({"$pow": [-2, decimal("2")]}),
                decimal("4.000000000000000000000000000000000"),
            ),
            (
                bson!({"$pow": [decimal("-2.0"), 2]}),
                decimal("4.000000000000000000000000000000000"),
            ),
            (
                bson!({"$pow": [decimal("10.0"), 2]}),
                decimal("100.0000000000000000000000000000000"),
            ),
            (
                bson!({"$pow": [5, decimal("-112")]}),
                decimal("5192296858534827628530496329220096E-112"),
            ),
            (bson!({"$pow": [2_i64, -1_i64]}), bson!(0.5)),
            (bson!({"$pow": [4, -1]}), bson!(0.25)),
            (bson!({"$pow": [1, -2_i64]}), Bson::Int64(1)),
            (bson!({"$pow": [-1, -2_i64]}), Bson::Int64(1)),
            (bson!({"$pow": [-1_i64, -3_i64]}), Bson::Int64(-1)),
            (
                bson!({"$pow": [3, 35]}),
                Bson::Int64(50_031_545_098_999_707),
            ),
            (bson!({"$pow": [-2, 63_i64]}), Bson::Int64(i64::MIN)),
            (bson!({"$pow": [4, 2]}), bson!(16)),
            (bson!({"$pow": [null, 2]}), Bson::Null),
        ]);
        assert!(matches!(value(bson!({"$pow": [-5, 0.5]})), Some(Bson::Double(v)) if v.is_nan()));
    }

    #[test]
    fn bitwise_operators_take_ints_and_longs() {
        check_values(vec![
            (bson!({"$bitAnd": [0, 127]}), bson!(0)),
            (bson!({"$bitAnd": [2, 3]}), bson!(2)),
            (bson!({"$bitAnd": [3, 5]}), bson!(1)),
            (bson!({"$bitOr": [0, 127]}), bson!(127)),
            (bson!({"$bitOr": [2, 3]}), bson!(3)),
            (bson!({"$bitOr": [3, 5]}), bson!(7)),
            (bson!({"$bitXor": [0, 127]}), bson!(127)),
            (bson!({"$bitXor": [2, 3]}), bson!(1)),
            (bson!({"$bitXor": [3, 5]}), bson!(6)),
            (bson!({"$bitAnd": [0_i64, 127_i64]}), Bson::Int64(0)),
            (bson!({"$bitOr": [1, 2_i64]}), Bson::Int64(3)),
            (bson!({"$bitAnd": []}), bson!(-1)),
            (bson!({"$bitOr": []}), bson!(0)),
            (bson!({"$bitXor": [1, null]}), Bson::Null),
            (bson!({"$bitNot": 0}), bson!(-1)),
            (bson!({"$bitNot": 1_i64}), Bson::Int64(-2)),
            (bson!({"$bitNot": null}), Bson::Null),
        ]);
    }

    #[test]
    fn errors_carry_mongods_codes() {
        check_errors(vec![
            (bson!({"$exp": "a"}), 28765),
            (bson!({"$ln": 0}), 28766),
            (bson!({"$ln": -1}), 28766),
            (bson!({"$ln": decimal("-1")}), 28766),
            (bson!({"$log10": 0}), 28761),
            (bson!({"$log": ["a", 10]}), 28756),
            (bson!({"$log": [10, "a"]}), 28757),
            (bson!({"$log": [0, 10]}), 28758),
            (bson!({"$log": [10, 1]}), 28759),
            (bson!({"$log": [10, -2]}), 28759),
            (bson!({"$pow": ["a", 1]}), 28762),
            (bson!({"$pow": [1, "a"]}), 28763),
            (bson!({"$pow": [0, -1]}), 28764),
            (bson!({"$pow": [decimal("0"), -1]}), 28764),
            (bson!({"$sqrt": -1}), 28714),
            (bson!({"$bitAnd": [1, 1.5]}), 14),
            (bson!({"$bitOr": ["a"]}), 14),
            (bson!({"$bitNot": 1.5}), 14),
            (bson!({"$bitNot": "a"}), 28765),
            (bson!({"$pow": [1]}), 16020),
            (bson!({"$sqrt": [1, 2]}), 16020),
        ]);
        let error = super::super::test_support::error(bson!({"$ln": -0.5}));
        assert_eq!(
            error.errmsg,
            "$ln's argument must be a positive number, but is -0.5"
        );
        let error = super::super::test_support::error(bson!({"$bitAnd": [1, 1.5]}));
        assert_eq!(error.errmsg, "$bitAnd only supports int and long operands.");
        let error = super::super::test_support::error(bson!({"$bitNot": 1.5}));
        assert_eq!(
            error.errmsg,
            "$bitNot only supports int and long, not: double."
        );
    }
}
