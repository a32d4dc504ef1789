//! Trigonometric operators (`$sin` … `$atanh`, `$atan2`) and `$degreesToRadians`/
//! `$radiansToDegrees`, as mongod's `expression_trigonometric` evaluates them.
//!
//! Invariants: null or missing gives null; a non-number is 28765 (`$atan2`: 51044/51045 by
//! position); integers compute in double. `$sin`/`$cos`/`$tan` refuse ±infinity and
//! `$asin`/`$acos`/`$atanh`/`$acosh` refuse values outside their domain with mongod's 50989
//! message; NaN passes through unchanged. A decimal argument gives a decimal result:
//! `$degreesToRadians`/`$radiansToDegrees` multiply exactly by mongod's 34-digit constants, the
//! other functions are computed in double precision and returned as decimal128 (mongod computes
//! them in decimal; digits past the 16th may differ).

use std::cmp::Ordering;

use bson::{Bson, Decimal128};

use super::arithmetic::decimal_bson;
use super::{fail, is_nullish, number_bson, one, two, Value};
use crate::numeric::{apply_arithmetic, Arithmetic, Decimal, Number};
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// One trigonometric operator (`Op::Trig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrigOp {
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Atan2,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    DegreesToRadians,
    RadiansToDegrees,
}

/// A domain: lower and upper bound, and whether the bounds themselves belong to it.
struct Domain {
    lower: f64,
    upper: f64,
    inclusive: bool,
}

impl Domain {
    fn contains(&self, value: f64) -> bool {
        if self.inclusive {
            value >= self.lower && value <= self.upper
        } else {
            value > self.lower && value < self.upper
        }
    }

    fn contains_decimal(&self, value: Decimal) -> bool {
        let lower = value.total_cmp(Decimal::from_f64(self.lower));
        let upper = value.total_cmp(Decimal::from_f64(self.upper));
        if self.inclusive {
            lower != Ordering::Less && upper != Ordering::Greater
        } else {
            lower == Ordering::Greater && upper == Ordering::Less
        }
    }

    /// mongod's rendering: `[-1,1]`, `(-inf,inf)`.
    fn describe(&self) -> String {
        let (open, close) = if self.inclusive {
            ('[', ']')
        } else {
            ('(', ')')
        };
        format!(
            "{open}{},{}{close}",
            stream_double(self.lower),
            stream_double(self.upper)
        )
    }
}

impl TrigOp {
    pub(super) fn name(self) -> &'static str {
        match self {
            TrigOp::Sin => "$sin",
            TrigOp::Cos => "$cos",
            TrigOp::Tan => "$tan",
            TrigOp::Asin => "$asin",
            TrigOp::Acos => "$acos",
            TrigOp::Atan => "$atan",
            TrigOp::Atan2 => "$atan2",
            TrigOp::Sinh => "$sinh",
            TrigOp::Cosh => "$cosh",
            TrigOp::Tanh => "$tanh",
            TrigOp::Asinh => "$asinh",
            TrigOp::Acosh => "$acosh",
            TrigOp::Atanh => "$atanh",
            TrigOp::DegreesToRadians => "$degreesToRadians",
            TrigOp::RadiansToDegrees => "$radiansToDegrees",
        }
    }

    /// The bounded functions' domains, as mongod declares them.
    fn domain(self) -> Option<Domain> {
        let (lower, upper, inclusive) = match self {
            TrigOp::Sin | TrigOp::Cos | TrigOp::Tan => (f64::NEG_INFINITY, f64::INFINITY, false),
            TrigOp::Asin | TrigOp::Acos | TrigOp::Atanh => (-1.0, 1.0, true),
            TrigOp::Acosh => (1.0, f64::INFINITY, true),
            _ => return None,
        };
        Some(Domain {
            lower,
            upper,
            inclusive,
        })
    }

    fn apply(self, x: f64) -> f64 {
        match self {
            TrigOp::Sin => x.sin(),
            TrigOp::Cos => x.cos(),
            TrigOp::Tan => x.tan(),
            TrigOp::Asin => x.asin(),
            TrigOp::Acos => x.acos(),
            TrigOp::Atan => x.atan(),
            TrigOp::Sinh => x.sinh(),
            TrigOp::Cosh => x.cosh(),
            TrigOp::Tanh => x.tanh(),
            TrigOp::Asinh => x.asinh(),
            TrigOp::Acosh => x.acosh(),
            TrigOp::Atanh => x.atanh(),
            TrigOp::DegreesToRadians => x * (DOUBLE_PI / 180.0),
            TrigOp::RadiansToDegrees => x * (180.0 / DOUBLE_PI),
            // Binary: evaluated by `atan2`.
            TrigOp::Atan2 => f64::NAN,
        }
    }
}

/// mongod's `kDoublePi` (3.141592653589793, the same double).
const DOUBLE_PI: f64 = std::f64::consts::PI;
/// mongod's `Decimal128::kPiOver180` and `Decimal128::k180OverPi`.
const DECIMAL_PI_OVER_180: &str = "0.01745329251994329576923690768488613";
const DECIMAL_180_OVER_PI: &str = "57.29577951308232087679815481410517";

/// How a C++ `ostream` prints a double by default (`%g`, 6 significant digits).
pub(super) fn stream_double(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let scientific = format!("{value:.5e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |text: &str| -> String {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text.to_string()
        }
    };
    if (-4..6).contains(&exponent) {
        let decimals = usize::try_from(5 - exponent).unwrap_or(0);
        trim(&format!("{value:.decimals$}"))
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.unsigned_abs())
    }
}

/// A double result turned into decimal128 by its shortest exact digits.
pub(super) fn decimal_from_double(value: f64) -> Bson {
    if value.is_finite() {
        if let Ok(decimal) = format!("{value:e}").parse::<Decimal128>() {
            return Bson::Decimal128(decimal);
        }
    }
    decimal_bson(Decimal::from_f64(value))
}

pub(super) fn numeric(name: &str, value: &Bson, code: ErrorCode) -> CommandResult<Number> {
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

pub(super) fn evaluate_trig(op: TrigOp, values: Vec<Value>) -> CommandResult<Value> {
    if op == TrigOp::Atan2 {
        let (y, x) = two(values)?;
        return atan2(y, x);
    }
    let value = one(values)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(value) = value else {
        return Ok(Some(Bson::Null));
    };
    let number = numeric(op.name(), &value, ErrorCode::Location28765)?;
    if matches!(op, TrigOp::DegreesToRadians | TrigOp::RadiansToDegrees) {
        if let Number::Decimal(decimal) = number {
            let factor = if op == TrigOp::DegreesToRadians {
                DECIMAL_PI_OVER_180
            } else {
                DECIMAL_180_OVER_PI
            };
            let factor = factor
                .parse::<Decimal128>()
                .map(|factor| Decimal::from_decimal128(&factor))
                .map_err(|_| tideway_base::error::CommandError::internal("bad decimal constant"))?;
            let product = apply_arithmetic(
                Arithmetic::Multiply,
                Number::Decimal(decimal),
                Number::Decimal(factor),
            )
            .unwrap_or(Number::Decimal(Decimal::NaN));
            return Ok(Some(number_bson(product)));
        }
        return Ok(Some(Bson::Double(op.apply(number.to_f64()))));
    }
    let domain = op.domain();
    match number {
        Number::Decimal(decimal) => {
            if let Some(domain) = &domain {
                if decimal.is_nan() {
                    return Ok(Some(value));
                }
                if !domain.contains_decimal(decimal) {
                    let shown = match &value {
                        Bson::Decimal128(original) => original.to_string(),
                        other => format!("{other}"),
                    };
                    return Err(out_of_domain(op, &shown, domain));
                }
            }
            Ok(Some(decimal_from_double(op.apply(decimal.to_f64()))))
        }
        other => {
            let x = other.to_f64();
            if let Some(domain) = &domain {
                if x.is_nan() {
                    return Ok(Some(value));
                }
                if !domain.contains(x) {
                    return Err(out_of_domain(op, &stream_double(x), domain));
                }
            }
            Ok(Some(Bson::Double(op.apply(x))))
        }
    }
}

fn out_of_domain(op: TrigOp, shown: &str, domain: &Domain) -> tideway_base::error::CommandError {
    fail(
        ErrorCode::Location50989,
        format!(
            "cannot apply {} to {shown}, value must in {}",
            op.name(),
            domain.describe()
        ),
    )
}

/// `$atan2: [y, x]`: a decimal on either side makes the result decimal.
fn atan2(y: Value, x: Value) -> CommandResult<Value> {
    if is_nullish(&y) {
        return Ok(Some(Bson::Null));
    }
    let Some(y) = y else {
        return Ok(Some(Bson::Null));
    };
    let y = numeric("$atan2", &y, ErrorCode::Location51044)?;
    if is_nullish(&x) {
        return Ok(Some(Bson::Null));
    }
    let Some(x) = x else {
        return Ok(Some(Bson::Null));
    };
    let x = numeric("$atan2", &x, ErrorCode::Location51045)?;
    let result = y.to_f64().atan2(x.to_f64());
    if matches!(y, Number::Decimal(_)) || matches!(x, Number::Decimal(_)) {
        return Ok(Some(decimal_from_double(result)));
    }
    Ok(Some(Bson::Double(result)))
}

#[cfg(test)]
mod tests {
    //! Expected values from the MongoDB manual's page for each operator (its behaviour table and
    //! its `trigonometry` example), errors from mongod's `expression_trigonometric.h`.
    use bson::{bson, doc, Bson, Decimal128};

    use super::super::test_support::{error, value};
    use super::stream_double;
    use crate::expr::fixtures::{assert_value, eval_ok};

    fn decimal(text: &str) -> Bson {
        Bson::Decimal128(text.parse::<Decimal128>().expect("a decimal literal"))
    }

    fn is_nan(result: Option<Bson>) -> bool {
        match result {
            Some(Bson::Double(value)) => value.is_nan(),
            Some(Bson::Decimal128(value)) => value.to_string().contains("NaN"),
            _ => false,
        }
    }

    const UNARY: [&str; 14] = [
        "$sin",
        "$cos",
        "$tan",
        "$asin",
        "$acos",
        "$atan",
        "$sinh",
        "$cosh",
        "$tanh",
        "$asinh",
        "$acosh",
        "$atanh",
        "$degreesToRadians",
        "$radiansToDegrees",
    ];

    #[test]
    fn null_missing_and_nan_follow_the_manuals_tables() {
        for name in UNARY {
            assert_value(value(bson!({name: null})), Bson::Null);
            assert_value(value(bson!({name: "$missing"})), Bson::Null);
            assert!(is_nan(value(bson!({name: f64::NAN}))), "{name} of NaN");
            assert!(
                is_nan(value(bson!({name: decimal("NaN")}))),
                "{name} of NaN"
            );
        }
        assert_value(value(bson!({"$atan2": [null, 1]})), Bson::Null);
        assert_value(value(bson!({"$atan2": [1, "$missing"]})), Bson::Null);
        assert!(is_nan(value(bson!({"$atan2": [f64::NAN, 1]}))));
        assert!(is_nan(value(bson!({"$atan2": [1, f64::NAN]}))));
    }

    #[test]
    fn infinities_follow_the_manuals_tables() {
        let inf = f64::INFINITY;
        let cases = [
            ("$atan", inf, std::f64::consts::FRAC_PI_2),
            ("$atan", -inf, -std::f64::consts::FRAC_PI_2),
            ("$sinh", inf, inf),
            ("$sinh", -inf, -inf),
            ("$cosh", inf, inf),
            ("$cosh", -inf, inf),
            ("$tanh", inf, 1.0),
            ("$tanh", -inf, -1.0),
            ("$asinh", inf, inf),
            ("$asinh", -inf, -inf),
            ("$acosh", inf, inf),
            ("$atanh", 1.0, inf),
            ("$atanh", -1.0, -inf),
            ("$degreesToRadians", inf, inf),
            ("$degreesToRadians", -inf, -inf),
            ("$radiansToDegrees", inf, inf),
            ("$radiansToDegrees", -inf, -inf),
        ];
        for (name, input, expected) in cases {
            assert_value(value(bson!({name: input})), Bson::Double(expected));
        }
        assert_value(
            value(bson!({"$atan2": [inf, -inf]})),
            Bson::Double(3.0 * std::f64::consts::FRAC_PI_4),
        );
        assert_value(
            value(bson!({"$atan2": [-inf, inf]})),
            Bson::Double(-std::f64::consts::FRAC_PI_4),
        );
    }

    #[test]
    fn values_outside_a_domain_are_50989() {
        let cases = [
            (
                bson!({"$sin": f64::INFINITY}),
                "cannot apply $sin to inf, value must in (-inf,inf)",
            ),
            (
                bson!({"$cos": f64::NEG_INFINITY}),
                "cannot apply $cos to -inf, value must in (-inf,inf)",
            ),
            (
                bson!({"$tan": f64::INFINITY}),
                "cannot apply $tan to inf, value must in (-inf,inf)",
            ),
            (
                bson!({"$asin": f64::NEG_INFINITY}),
                "cannot apply $asin to -inf, value must in [-1,1]",
            ),
            (
                bson!({"$asin": -2}),
                "cannot apply $asin to -2, value must in [-1,1]",
            ),
            (
                bson!({"$acos": 1.5}),
                "cannot apply $acos to 1.5, value must in [-1,1]",
            ),
            (
                bson!({"$atanh": 2_i64}),
                "cannot apply $atanh to 2, value must in [-1,1]",
            ),
            (
                bson!({"$acosh": f64::NEG_INFINITY}),
                "cannot apply $acosh to -inf, value must in [1,inf]",
            ),
            (
                bson!({"$acosh": 0.5}),
                "cannot apply $acosh to 0.5, value must in [1,inf]",
            ),
            (
                bson!({"$asin": decimal("1.0000000000000000000000000000001")}),
                "cannot apply $asin to 1.0000000000000000000000000000001, value must in [-1,1]",
            ),
        ];
        for (expression, message) in cases {
            let failure = error(expression.clone());
            assert_eq!(failure.code.code(), 50989, "{expression}");
            assert_eq!(failure.errmsg, message, "{expression}");
        }
    }

    #[test]
    fn non_numbers_are_refused_with_mongods_codes() {
        for name in UNARY {
            let failure = error(bson!({name: "x"}));
            assert_eq!(failure.code.code(), 28765, "{name}");
            assert_eq!(
                failure.errmsg,
                format!("{name} only supports numeric types, not string")
            );
        }
        let first = error(bson!({"$atan2": ["x", 1]}));
        assert_eq!(first.code.code(), 51044);
        assert_eq!(
            first.errmsg,
            "$atan2 only supports numeric types, not string"
        );
        let second = error(bson!({"$atan2": [1, true]}));
        assert_eq!(second.code.code(), 51045);
        assert_eq!(
            second.errmsg,
            "$atan2 only supports numeric types, not bool"
        );
        assert_eq!(error(bson!({"$atan2": [1]})).code.code(), 16020);
        assert_eq!(error(bson!({"$sin": [1, 2]})).code.code(), 16020);
    }

    #[test]
    fn numbers_compute_in_double_and_decimals_stay_decimal() {
        let cases = [
            (bson!({"$sin": 0}), Bson::Double(0.0)),
            (bson!({"$cos": 0_i64}), Bson::Double(1.0)),
            (bson!({"$tan": 0.0}), Bson::Double(0.0)),
            (
                bson!({"$asin": 1}),
                Bson::Double(std::f64::consts::FRAC_PI_2),
            ),
            (bson!({"$acos": -1}), Bson::Double(std::f64::consts::PI)),
            (
                bson!({"$atan": 1}),
                Bson::Double(std::f64::consts::FRAC_PI_4),
            ),
            (
                bson!({"$atan2": [1, 1]}),
                Bson::Double(std::f64::consts::FRAC_PI_4),
            ),
            (bson!({"$acosh": 1}), Bson::Double(0.0)),
            (
                bson!({"$degreesToRadians": 180}),
                Bson::Double(std::f64::consts::PI),
            ),
            (
                bson!({"$radiansToDegrees": std::f64::consts::PI}),
                Bson::Double(180.0),
            ),
            (bson!({"$sin": decimal("0")}), decimal("0")),
            (bson!({"$cos": decimal("0")}), decimal("1")),
            (bson!({"$atan2": [decimal("0"), 1]}), decimal("0")),
        ];
        for (expression, expected) in cases {
            assert_value(value(expression), expected);
        }
        assert!(matches!(
            value(bson!({"$asin": decimal("0.5")})),
            Some(Bson::Decimal128(_))
        ));
    }

    #[test]
    fn degree_conversions_match_the_manuals_decimal_example() {
        // The `$degreesToRadians` page's angles; its results are the `$radiansToDegrees`
        // page's input, converted back here with mongod's 34-digit 180/pi.
        let degrees = doc! {
            "a": decimal("53.13010235415597870314438744090659"),
            "b": decimal("36.86989764584402129685561255909341"),
            "c": decimal("90"),
        };
        let radians = [
            ("$a", "0.9272952180016122324285124629224290"),
            ("$b", "0.6435011087932843868028092287173227"),
            ("$c", "1.570796326794896619231321691639752"),
        ];
        for (field, expected) in radians {
            assert_value(
                eval_ok(bson!({"$degreesToRadians": field}), &degrees),
                decimal(expected),
            );
        }
        let radians = doc! {
            "a": decimal("0.9272952180016122324285124629224290"),
            "b": decimal("0.6435011087932843868028092287173227"),
            "c": decimal("1.570796326794896619231321691639752"),
        };
        let back = [
            ("$a", "53.13010235415597870314438744090660"),
            ("$b", "36.86989764584402129685561255909341"),
            ("$c", "90.00000000000000000000000000000003"),
        ];
        for (field, expected) in back {
            assert_value(
                eval_ok(bson!({"$radiansToDegrees": field}), &radians),
                decimal(expected),
            );
        }
    }

    #[test]
    fn error_values_print_as_a_cpp_stream_does() {
        let cases = [
            (-2.0, "-2"),
            (1.5, "1.5"),
            (1.000_000_1, "1"),
            (123_456_789.0, "1.23457e+08"),
            (0.000_012_5, "1.25e-05"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (input, expected) in cases {
            assert_eq!(stream_double(input), expected);
        }
    }
}
