//! Numeric semantics shared by comparison, matching and update arithmetic: exact ordering across
//! Int32, Int64, Double and Decimal128, and mongod's `SafeNum` arithmetic for `$inc`/`$mul`.
//!
//! Invariants: comparisons are exact for every pair of numeric types except Decimal128 against
//! Double, where the double is first rounded to 34 significant decimal digits (mongod's
//! `kRoundTo34Digits` conversion, so `0.1` as a double is greater than `Decimal128("0.1")`).
//! NaN (of either floating type) equals NaN and is less than every other number; `-0.0 == 0.0`.
//! Arithmetic never panics: integer overflow promotes Int32 to Int64 and reports Int64 overflow as
//! `None`, as mongod's `SafeNum` does. Decimal128 arithmetic is carried out exactly and rounded to
//! 34 digits (round-half-even); results whose exponent leaves the Decimal128 range are `None`.
//! This module does not know about documents or paths.

use std::cmp::Ordering;

use bson::{Bson, Decimal128};

/// Number of significant digits a Decimal128 coefficient can hold.
const DECIMAL_DIGITS: u32 = 34;
/// Exponent bias of the Decimal128 encoding.
const DECIMAL_EXPONENT_BIAS: i32 = 6176;
const DECIMAL_MIN_EXPONENT: i32 = -6176;
const DECIMAL_MAX_EXPONENT: i32 = 6111;

/// A decoded decimal floating-point value: `(-1)^negative * coefficient * 10^exponent`.
/// `coefficient` never exceeds `10^34 - 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decimal {
    NaN,
    Infinity {
        negative: bool,
    },
    Finite {
        negative: bool,
        coefficient: u128,
        exponent: i32,
    },
}

pub(crate) fn pow10(exponent: u32) -> u128 {
    10u128.pow(exponent)
}

pub(crate) fn digit_count(mut value: u128) -> u32 {
    let mut digits = 1;
    while value >= 10 {
        value /= 10;
        digits += 1;
    }
    digits
}

impl Decimal {
    /// Decodes the IEEE 754-2008 BID encoding bson stores.
    pub(crate) fn from_decimal128(value: &Decimal128) -> Decimal {
        let bits = u128::from_le_bytes(value.bytes());
        let negative = bits >> 127 == 1;
        let combination = (bits >> 122) & 0x1f;
        if combination == 0x1f {
            return Decimal::NaN;
        }
        if combination == 0x1e {
            return Decimal::Infinity { negative };
        }
        let (biased_exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
            // Coefficient would have the implicit prefix 0b100, exceeding 10^34 - 1: non-canonical, zero.
            (((bits >> 111) & 0x3fff) as i32, 0)
        } else {
            (((bits >> 113) & 0x3fff) as i32, bits & ((1u128 << 113) - 1))
        };
        let coefficient = if coefficient >= pow10(DECIMAL_DIGITS) {
            0
        } else {
            coefficient
        };
        Decimal::Finite {
            negative,
            coefficient,
            exponent: biased_exponent - DECIMAL_EXPONENT_BIAS,
        }
    }

    pub(crate) fn from_i64(value: i64) -> Decimal {
        Decimal::Finite {
            negative: value < 0,
            coefficient: u128::from(value.unsigned_abs()),
            exponent: 0,
        }
    }

    /// The double rounded to 34 significant digits, as mongod converts doubles to Decimal128.
    pub(crate) fn from_f64(value: f64) -> Decimal {
        if value.is_nan() {
            return Decimal::NaN;
        }
        if value.is_infinite() {
            return Decimal::Infinity {
                negative: value < 0.0,
            };
        }
        // Rust formats with exact, correctly rounded digits: "d.ddd…e±x" with 34 significant digits.
        let formatted = format!("{:.33e}", value.abs());
        let (mantissa, exponent) = formatted
            .split_once('e')
            .unwrap_or((formatted.as_str(), "0"));
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let coefficient = digits.parse::<u128>().unwrap_or(0);
        let exponent = exponent.parse::<i32>().unwrap_or(0) - (DECIMAL_DIGITS as i32 - 1);
        Decimal::Finite {
            negative: value.is_sign_negative(),
            coefficient,
            exponent,
        }
        .normalized_zero()
    }

    fn normalized_zero(self) -> Decimal {
        match self {
            Decimal::Finite {
                coefficient: 0,
                negative,
                ..
            } => Decimal::Finite {
                negative,
                coefficient: 0,
                exponent: 0,
            },
            other => other,
        }
    }

    pub(crate) fn is_nan(&self) -> bool {
        matches!(self, Decimal::NaN)
    }

    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Decimal::NaN => f64::NAN,
            Decimal::Infinity { negative: true } => f64::NEG_INFINITY,
            Decimal::Infinity { negative: false } => f64::INFINITY,
            Decimal::Finite {
                negative,
                coefficient,
                exponent,
            } => {
                let magnitude = format!("{coefficient}e{exponent}")
                    .parse::<f64>()
                    .unwrap_or(f64::NAN);
                if negative {
                    -magnitude
                } else {
                    magnitude
                }
            }
        }
    }

    /// Truncates toward zero into an i64; `None` for NaN, infinities and out-of-range values.
    pub(crate) fn to_i64_truncated(self) -> Option<i64> {
        let Decimal::Finite {
            negative,
            coefficient,
            exponent,
        } = self
        else {
            return None;
        };
        let magnitude = if exponent >= 0 {
            let scale = u32::try_from(exponent).ok().filter(|e| *e <= 38)?;
            coefficient.checked_mul(pow10(scale))?
        } else {
            let scale = exponent.unsigned_abs();
            if scale > 38 {
                0
            } else {
                coefficient / pow10(scale)
            }
        };
        signed_i64(negative, magnitude)
    }

    /// Rounds to the nearest integer, ties to even (Decimal128's default `toLong` rounding);
    /// `None` for NaN, infinities and values outside i64.
    pub(crate) fn to_i64_half_even(self) -> Option<i64> {
        let Decimal::Finite {
            negative,
            coefficient,
            exponent,
        } = self
        else {
            return None;
        };
        if exponent >= 0 {
            return self.to_i64_truncated();
        }
        let scale = exponent.unsigned_abs();
        // A coefficient below 10^34 is less than half of 10^38: such values round to 0.
        let magnitude = if scale > 38 {
            0
        } else {
            let unit = pow10(scale);
            let (quotient, remainder) = (coefficient / unit, coefficient % unit);
            let half = unit / 2;
            if remainder > half || (remainder == half && quotient % 2 == 1) {
                quotient + 1
            } else {
                quotient
            }
        };
        signed_i64(negative, magnitude)
    }

    /// Encodes into bson's Decimal128 through its string form; `None` if out of range.
    pub(crate) fn to_decimal128(self) -> Option<Decimal128> {
        let text = match self {
            Decimal::NaN => "NaN".to_string(),
            Decimal::Infinity { negative } => {
                if negative {
                    "-Infinity".to_string()
                } else {
                    "Infinity".to_string()
                }
            }
            Decimal::Finite {
                negative,
                coefficient,
                exponent,
            } => {
                if !(DECIMAL_MIN_EXPONENT..=DECIMAL_MAX_EXPONENT).contains(&exponent) {
                    return None;
                }
                format!(
                    "{}{}E{}",
                    if negative { "-" } else { "" },
                    coefficient,
                    exponent
                )
            }
        };
        text.parse::<Decimal128>().ok()
    }

    /// Magnitude comparison of two finite values.
    fn compare_magnitude(a: (u128, i32), b: (u128, i32)) -> Ordering {
        let (a_coefficient, a_exponent) = a;
        let (b_coefficient, b_exponent) = b;
        match (a_coefficient == 0, b_coefficient == 0) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        let a_digits = digit_count(a_coefficient);
        let b_digits = digit_count(b_coefficient);
        let a_adjusted = i64::from(a_exponent) + i64::from(a_digits);
        let b_adjusted = i64::from(b_exponent) + i64::from(b_digits);
        a_adjusted.cmp(&b_adjusted).then_with(|| {
            // Same order of magnitude: align both coefficients to 34 digits (fits in u128).
            let a_scaled = a_coefficient * pow10(DECIMAL_DIGITS.saturating_sub(a_digits));
            let b_scaled = b_coefficient * pow10(DECIMAL_DIGITS.saturating_sub(b_digits));
            a_scaled.cmp(&b_scaled)
        })
    }

    /// Total order: NaN == NaN < -Infinity < finite values < +Infinity; zeros of any sign are equal.
    pub(crate) fn total_cmp(self, other: Decimal) -> Ordering {
        fn class(value: &Decimal) -> i8 {
            match value {
                Decimal::NaN => 0,
                Decimal::Infinity { negative: true } => 1,
                Decimal::Finite { .. } => 2,
                Decimal::Infinity { negative: false } => 3,
            }
        }
        match (self, other) {
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
                let a_sign = if a_coefficient == 0 {
                    0
                } else if a_negative {
                    -1
                } else {
                    1
                };
                let b_sign = if b_coefficient == 0 {
                    0
                } else if b_negative {
                    -1
                } else {
                    1
                };
                if a_sign != b_sign {
                    return a_sign.cmp(&b_sign);
                }
                let magnitude = Decimal::compare_magnitude(
                    (a_coefficient, a_exponent),
                    (b_coefficient, b_exponent),
                );
                if a_sign < 0 {
                    magnitude.reverse()
                } else {
                    magnitude
                }
            }
            (a, b) => class(&a).cmp(&class(&b)),
        }
    }

    /// Exact sum rounded to 34 digits; `None` when the exponent leaves the Decimal128 range.
    fn add(self, other: Decimal) -> Option<Decimal> {
        match (self, other) {
            (Decimal::NaN, _) | (_, Decimal::NaN) => Some(Decimal::NaN),
            (Decimal::Infinity { negative: a }, Decimal::Infinity { negative: b }) => {
                Some(if a == b {
                    Decimal::Infinity { negative: a }
                } else {
                    Decimal::NaN
                })
            }
            (infinity @ Decimal::Infinity { .. }, _) | (_, infinity @ Decimal::Infinity { .. }) => {
                Some(infinity)
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
                let a = BigDecimal::new(a_negative, a_coefficient, a_exponent);
                let b = BigDecimal::new(b_negative, b_coefficient, b_exponent);
                a.add(&b).round_to_decimal()
            }
        }
    }

    fn multiply(self, other: Decimal) -> Option<Decimal> {
        match (self, other) {
            (Decimal::NaN, _) | (_, Decimal::NaN) => Some(Decimal::NaN),
            (Decimal::Infinity { negative: a }, b) | (b, Decimal::Infinity { negative: a }) => {
                let (b_negative, b_is_zero) = match b {
                    Decimal::Infinity { negative } => (negative, false),
                    Decimal::Finite {
                        negative,
                        coefficient,
                        ..
                    } => (negative, coefficient == 0),
                    Decimal::NaN => return Some(Decimal::NaN),
                };
                Some(if b_is_zero {
                    Decimal::NaN
                } else {
                    Decimal::Infinity {
                        negative: a != b_negative,
                    }
                })
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
                let mut product = BigDecimal::new(a_negative, a_coefficient, a_exponent);
                product.multiply_coefficient(&BigDecimal::new(false, b_coefficient, 0).digits);
                product.exponent = product.exponent.checked_add(b_exponent)?;
                product.negative = a_negative != b_negative;
                product.round_to_decimal()
            }
        }
    }
}

/// An exact decimal with an arbitrary-length coefficient (base 10^9 limbs, least significant
/// first), used only as an intermediate for Decimal128 arithmetic.
struct BigDecimal {
    negative: bool,
    digits: Vec<u32>,
    exponent: i32,
}

const LIMB_BASE: u64 = 1_000_000_000;

impl BigDecimal {
    fn new(negative: bool, coefficient: u128, exponent: i32) -> BigDecimal {
        let mut digits = Vec::new();
        let mut rest = coefficient;
        while rest > 0 {
            digits.push((rest % u128::from(LIMB_BASE)) as u32);
            rest /= u128::from(LIMB_BASE);
        }
        BigDecimal {
            negative,
            digits,
            exponent,
        }
    }

    fn trim(&mut self) {
        while self.digits.last() == Some(&0) {
            self.digits.pop();
        }
    }

    fn multiply_small(&mut self, factor: u32) {
        let mut carry = 0u64;
        for limb in &mut self.digits {
            let value = u64::from(*limb) * u64::from(factor) + carry;
            *limb = (value % LIMB_BASE) as u32;
            carry = value / LIMB_BASE;
        }
        while carry > 0 {
            self.digits.push((carry % LIMB_BASE) as u32);
            carry /= LIMB_BASE;
        }
    }

    fn multiply_coefficient(&mut self, other: &[u32]) {
        let mut result = vec![0u64; self.digits.len() + other.len() + 1];
        for (i, a) in self.digits.iter().enumerate() {
            let mut carry = 0u64;
            for (j, b) in other.iter().enumerate() {
                let value = result[i + j] + u64::from(*a) * u64::from(*b) + carry;
                result[i + j] = value % LIMB_BASE;
                carry = value / LIMB_BASE;
            }
            let mut k = i + other.len();
            while carry > 0 {
                let value = result[k] + carry;
                result[k] = value % LIMB_BASE;
                carry = value / LIMB_BASE;
                k += 1;
            }
        }
        self.digits = result.into_iter().map(|limb| limb as u32).collect();
        self.trim();
    }

    /// Scales the coefficient by 10^count, lowering the exponent to keep the value.
    fn shift_left(&mut self, count: u32) {
        for _ in 0..count / 9 {
            self.multiply_small(1_000_000_000);
        }
        self.multiply_small(10u32.pow(count % 9));
        self.exponent -= count as i32;
    }

    fn compare_coefficients(a: &[u32], b: &[u32]) -> Ordering {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }

    fn subtract_coefficients(larger: &[u32], smaller: &[u32]) -> Vec<u32> {
        let mut borrow = 0i64;
        let mut result = Vec::with_capacity(larger.len());
        for (i, limb) in larger.iter().enumerate() {
            let mut value =
                i64::from(*limb) - i64::from(smaller.get(i).copied().unwrap_or(0)) - borrow;
            borrow = 0;
            if value < 0 {
                value += LIMB_BASE as i64;
                borrow = 1;
            }
            result.push(value as u32);
        }
        result
    }

    fn add(mut self, other: &BigDecimal) -> BigDecimal {
        self.trim();
        if self.digits.is_empty() {
            return BigDecimal {
                negative: other.negative,
                digits: other.digits.clone(),
                exponent: other.exponent,
            };
        }
        if other.digits.iter().all(|limb| *limb == 0) {
            return self;
        }
        let mut other = BigDecimal {
            negative: other.negative,
            digits: other.digits.clone(),
            exponent: other.exponent,
        };
        // Exponent gaps beyond what can matter after rounding are clamped: the smaller operand
        // then only influences rounding, which a 40-digit gap still preserves.
        let gap = (i64::from(self.exponent) - i64::from(other.exponent)).clamp(-80, 80) as i32;
        if gap > 0 {
            self.shift_left(gap.unsigned_abs());
        } else if gap < 0 {
            other.shift_left(gap.unsigned_abs());
        }
        if self.exponent != other.exponent {
            // One operand is negligible (more than 80 orders of magnitude smaller).
            let self_larger = self.exponent > other.exponent;
            return if self_larger { self } else { other };
        }
        if self.negative == other.negative {
            let mut carry = 0u64;
            let length = self.digits.len().max(other.digits.len());
            let mut digits = Vec::with_capacity(length + 1);
            for i in 0..length {
                let value = u64::from(self.digits.get(i).copied().unwrap_or(0))
                    + u64::from(other.digits.get(i).copied().unwrap_or(0))
                    + carry;
                digits.push((value % LIMB_BASE) as u32);
                carry = value / LIMB_BASE;
            }
            if carry > 0 {
                digits.push(carry as u32);
            }
            self.digits = digits;
            return self;
        }
        self.trim();
        other.trim();
        match BigDecimal::compare_coefficients(&self.digits, &other.digits) {
            Ordering::Equal => BigDecimal {
                negative: false,
                digits: Vec::new(),
                exponent: self.exponent,
            },
            Ordering::Greater => BigDecimal {
                negative: self.negative,
                digits: BigDecimal::subtract_coefficients(&self.digits, &other.digits),
                exponent: self.exponent,
            },
            Ordering::Less => BigDecimal {
                negative: other.negative,
                digits: BigDecimal::subtract_coefficients(&other.digits, &self.digits),
                exponent: self.exponent,
            },
        }
    }

    /// Rounds to 34 significant digits (half-even) and checks the exponent range.
    fn round_to_decimal(mut self) -> Option<Decimal> {
        self.trim();
        let mut text: String = match self.digits.split_last() {
            None => "0".to_string(),
            Some((most_significant, rest)) => {
                let mut text = most_significant.to_string();
                for limb in rest.iter().rev() {
                    text.push_str(&format!("{limb:09}"));
                }
                text
            }
        };
        let mut exponent = i64::from(self.exponent);
        if text.len() > DECIMAL_DIGITS as usize {
            let dropped = text.split_off(DECIMAL_DIGITS as usize);
            exponent += dropped.len() as i64;
            let first_dropped = dropped.as_bytes()[0];
            let rest_nonzero = dropped.bytes().skip(1).any(|b| b != b'0');
            let last_kept_odd = text.as_bytes().last().is_some_and(|b| (b - b'0') % 2 == 1);
            let round_up =
                first_dropped > b'5' || (first_dropped == b'5' && (rest_nonzero || last_kept_odd));
            let mut coefficient = text.parse::<u128>().ok()?;
            if round_up {
                coefficient += 1;
                if coefficient == pow10(DECIMAL_DIGITS) {
                    coefficient /= 10;
                    exponent += 1;
                }
            }
            text = coefficient.to_string();
        }
        let mut coefficient = text.parse::<u128>().ok()?;
        // Clamp large exponents by padding the coefficient with zeros while digits remain.
        while exponent > i64::from(DECIMAL_MAX_EXPONENT)
            && coefficient != 0
            && coefficient < pow10(DECIMAL_DIGITS - 1)
        {
            coefficient *= 10;
            exponent -= 1;
        }
        if coefficient == 0 {
            exponent = exponent.clamp(
                i64::from(DECIMAL_MIN_EXPONENT),
                i64::from(DECIMAL_MAX_EXPONENT),
            );
        }
        let exponent = i32::try_from(exponent).ok()?;
        if !(DECIMAL_MIN_EXPONENT..=DECIMAL_MAX_EXPONENT).contains(&exponent) {
            return None;
        }
        Some(Decimal::Finite {
            negative: self.negative,
            coefficient,
            exponent,
        })
    }
}

/// A numeric BSON value, borrowed out of a `Bson`.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    Int32(i32),
    Int64(i64),
    Double(f64),
    Decimal(Decimal),
}

impl Number {
    pub fn from_bson(value: &Bson) -> Option<Number> {
        match value {
            Bson::Int32(v) => Some(Number::Int32(*v)),
            Bson::Int64(v) => Some(Number::Int64(*v)),
            Bson::Double(v) => Some(Number::Double(*v)),
            Bson::Decimal128(v) => Some(Number::Decimal(Decimal::from_decimal128(v))),
            _ => None,
        }
    }

    pub(crate) fn into_bson(self) -> Option<Bson> {
        Some(match self {
            Number::Int32(v) => Bson::Int32(v),
            Number::Int64(v) => Bson::Int64(v),
            Number::Double(v) => Bson::Double(v),
            Number::Decimal(v) => Bson::Decimal128(v.to_decimal128()?),
        })
    }

    pub(crate) fn to_decimal(self) -> Decimal {
        match self {
            Number::Int32(v) => Decimal::from_i64(i64::from(v)),
            Number::Int64(v) => Decimal::from_i64(v),
            Number::Double(v) => Decimal::from_f64(v),
            Number::Decimal(v) => v,
        }
    }

    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Number::Int32(v) => f64::from(v),
            Number::Int64(v) => v as f64,
            Number::Double(v) => v,
            Number::Decimal(v) => v.to_f64(),
        }
    }

    pub fn is_nan(self) -> bool {
        match self {
            Number::Double(v) => v.is_nan(),
            Number::Decimal(v) => v.is_nan(),
            Number::Int32(_) | Number::Int64(_) => false,
        }
    }

    /// The value as an i64 if it is integral and in range (doubles and decimals included).
    pub(crate) fn to_exact_i64(self) -> Option<i64> {
        match self {
            Number::Int32(v) => Some(i64::from(v)),
            Number::Int64(v) => Some(v),
            Number::Double(v) => {
                let truncated = truncate_f64_to_i64(v)?;
                (truncated as f64 == v).then_some(truncated)
            }
            Number::Decimal(v) => {
                let truncated = v.to_i64_truncated()?;
                (Decimal::from_i64(truncated).total_cmp(v) == Ordering::Equal).then_some(truncated)
            }
        }
    }

    /// Truncates toward zero; `None` for NaN, infinities and values outside i64.
    pub(crate) fn to_i64_truncated(self) -> Option<i64> {
        match self {
            Number::Int32(v) => Some(i64::from(v)),
            Number::Int64(v) => Some(v),
            Number::Double(v) => truncate_f64_to_i64(v),
            Number::Decimal(v) => v.to_i64_truncated(),
        }
    }

    pub(crate) fn is_zero(self) -> bool {
        match self {
            Number::Int32(v) => v == 0,
            Number::Int64(v) => v == 0,
            Number::Double(v) => v == 0.0,
            Number::Decimal(v) => matches!(v, Decimal::Finite { coefficient: 0, .. }),
        }
    }
}

/// 2^63 as a double: the smallest double that does not fit in an i64.
const I64_LIMIT_AS_F64: f64 = 9_223_372_036_854_775_808.0;

/// mongod's `BSONElement::safeNumberLong`: any numeric type as an i64, NaN as 0, values past
/// either end of i64 clamped to it, doubles truncated toward zero and Decimal128 rounded half to
/// even (`Decimal128::toLong`'s default); `None` for non-numbers.
pub fn safe_number_long(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        Bson::Double(v) if v.is_nan() => Some(0),
        // 2^63 as a double: every double at or above it is past i64::MAX.
        Bson::Double(v) if *v >= 9_223_372_036_854_775_808.0 => Some(i64::MAX),
        Bson::Double(v) if *v < i64::MIN as f64 => Some(i64::MIN),
        Bson::Double(v) => Some(*v as i64),
        Bson::Decimal128(v) => {
            let decimal = Decimal::from_decimal128(v);
            Some(match decimal {
                Decimal::NaN => 0,
                _ if decimal.total_cmp(Decimal::from_i64(i64::MAX)) == Ordering::Greater => {
                    i64::MAX
                }
                _ if decimal.total_cmp(Decimal::from_i64(i64::MIN)) == Ordering::Less => i64::MIN,
                _ => decimal.to_i64_half_even().unwrap_or(0),
            })
        }
        _ => None,
    }
}

fn truncate_f64_to_i64(value: f64) -> Option<i64> {
    if !(-I64_LIMIT_AS_F64..I64_LIMIT_AS_F64).contains(&value) {
        return None;
    }
    Some(value.trunc() as i64)
}

fn compare_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Neither is NaN, so partial_cmp is total here; -0.0 == 0.0.
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Exact comparison of an i64 with a double (mongod's compareLongToDouble).
fn compare_i64_f64(long: i64, double: f64) -> Ordering {
    if double.is_nan() {
        return Ordering::Greater;
    }
    if double >= I64_LIMIT_AS_F64 {
        return Ordering::Less;
    }
    if double < -I64_LIMIT_AS_F64 {
        return Ordering::Greater;
    }
    let truncated = double.trunc();
    long.cmp(&(truncated as i64)).then_with(|| {
        let fraction = double - truncated;
        if fraction > 0.0 {
            Ordering::Less
        } else if fraction < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    })
}

/// Numeric total order across Int32, Int64, Double and Decimal128.
pub(crate) fn compare_numbers(a: Number, b: Number) -> Ordering {
    use Number::*;
    match (a, b) {
        (Int32(x), Int32(y)) => x.cmp(&y),
        (Int32(x), Int64(y)) => i64::from(x).cmp(&y),
        (Int64(x), Int32(y)) => x.cmp(&i64::from(y)),
        (Int64(x), Int64(y)) => x.cmp(&y),
        (Double(x), Double(y)) => compare_f64(x, y),
        (Int32(x), Double(y)) => compare_i64_f64(i64::from(x), y),
        (Int64(x), Double(y)) => compare_i64_f64(x, y),
        (Double(x), Int32(y)) => compare_i64_f64(i64::from(y), x).reverse(),
        (Double(x), Int64(y)) => compare_i64_f64(y, x).reverse(),
        (a, b) => a.to_decimal().total_cmp(b.to_decimal()),
    }
}

/// The arithmetic operation an update modifier performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arithmetic {
    Add,
    Multiply,
}

/// mongod's SafeNum arithmetic: the result type is the "widest" operand type (Int32 < Int64 <
/// Double < Decimal128); Int32 overflow promotes to Int64; Int64 overflow yields `None`.
pub(crate) fn apply_arithmetic(operation: Arithmetic, a: Number, b: Number) -> Option<Number> {
    use Number::*;
    fn int64(operation: Arithmetic, x: i64, y: i64) -> Option<Number> {
        match operation {
            Arithmetic::Add => x.checked_add(y),
            Arithmetic::Multiply => x.checked_mul(y),
        }
        .map(Int64)
    }
    match (a, b) {
        (Decimal(_), _) | (_, Decimal(_)) => {
            let (x, y) = (a.to_decimal(), b.to_decimal());
            match operation {
                Arithmetic::Add => x.add(y),
                Arithmetic::Multiply => x.multiply(y),
            }
            .map(Decimal)
        }
        (Double(_), _) | (_, Double(_)) => {
            let (x, y) = (a.to_f64(), b.to_f64());
            Some(Double(match operation {
                Arithmetic::Add => x + y,
                Arithmetic::Multiply => x * y,
            }))
        }
        (Int32(x), Int32(y)) => {
            let result = match operation {
                Arithmetic::Add => x.checked_add(y),
                Arithmetic::Multiply => x.checked_mul(y),
            };
            match result {
                Some(value) => Some(Int32(value)),
                None => int64(operation, i64::from(x), i64::from(y)),
            }
        }
        (Int32(x), Int64(y)) => int64(operation, i64::from(x), y),
        (Int64(x), Int32(y)) => int64(operation, x, i64::from(y)),
        (Int64(x), Int64(y)) => int64(operation, x, y),
    }
}

/// Zero of the same numeric type as `template` (what `$mul` stores into a missing field).
pub(crate) fn zero_like(template: Number) -> Number {
    match template {
        Number::Int32(_) => Number::Int32(0),
        Number::Int64(_) => Number::Int64(0),
        Number::Double(_) => Number::Double(0.0),
        Number::Decimal(_) => Number::Decimal(Decimal::from_i64(0)),
    }
}

/// The i64 of `magnitude` with a sign, `None` outside i64's range.
fn signed_i64(negative: bool, magnitude: u128) -> Option<i64> {
    if negative {
        if magnitude == u128::from(i64::MIN.unsigned_abs()) {
            Some(i64::MIN)
        } else {
            i64::try_from(magnitude).ok().map(|m| -m)
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Decimal {
        Decimal::from_decimal128(&text.parse::<Decimal128>().expect("test literal"))
    }

    fn num(value: Bson) -> Number {
        Number::from_bson(&value).expect("numeric test value")
    }

    #[test]
    fn decimal_decoding_matches_bson_display() {
        for text in [
            "0",
            "1",
            "-1",
            "3.14159",
            "1.05E+3",
            "-0.000001",
            "9999999999999999999999999999999999",
        ] {
            let decoded = dec(text);
            let reencoded = decoded.to_decimal128().expect("in range");
            assert_eq!(
                reencoded.to_string(),
                text.parse::<Decimal128>().expect("literal").to_string()
            );
        }
        assert!(dec("NaN").is_nan());
        assert_eq!(dec("-Infinity"), Decimal::Infinity { negative: true });
    }

    #[test]
    fn decimal_equals_integer_of_same_value_across_exponents() {
        assert_eq!(
            dec("1.000").total_cmp(Decimal::from_i64(1)),
            Ordering::Equal
        );
        assert_eq!(dec("10E-1").total_cmp(dec("1")), Ordering::Equal);
        assert_eq!(dec("-0").total_cmp(dec("0E+10")), Ordering::Equal);
    }

    #[test]
    fn double_point_one_is_greater_than_decimal_point_one() {
        let double = num(Bson::Double(0.1));
        let decimal = Number::Decimal(dec("0.1"));
        assert_eq!(compare_numbers(double, decimal), Ordering::Greater);
        assert_eq!(
            compare_numbers(num(Bson::Double(0.5)), Number::Decimal(dec("0.5"))),
            Ordering::Equal
        );
    }

    #[test]
    fn i64_extremes_compare_exactly_with_doubles() {
        let max = num(Bson::Int64(i64::MAX));
        assert_eq!(
            compare_numbers(max, num(Bson::Double(I64_LIMIT_AS_F64))),
            Ordering::Less
        );
        let min = num(Bson::Int64(i64::MIN));
        assert_eq!(
            compare_numbers(min, num(Bson::Double(-I64_LIMIT_AS_F64))),
            Ordering::Equal
        );
        assert_eq!(
            compare_numbers(
                num(Bson::Int64(9_007_199_254_740_993)),
                num(Bson::Double(9_007_199_254_740_992.0))
            ),
            Ordering::Greater
        );
    }

    #[test]
    fn nan_is_equal_to_nan_and_below_negative_infinity() {
        let nan = num(Bson::Double(f64::NAN));
        assert_eq!(
            compare_numbers(nan, Number::Decimal(Decimal::NaN)),
            Ordering::Equal
        );
        assert_eq!(
            compare_numbers(nan, num(Bson::Double(f64::NEG_INFINITY))),
            Ordering::Less
        );
        assert_eq!(
            compare_numbers(num(Bson::Int32(i32::MIN)), nan),
            Ordering::Greater
        );
    }

    #[test]
    fn int32_overflow_promotes_and_int64_overflow_fails() {
        let sum = apply_arithmetic(Arithmetic::Add, Number::Int32(i32::MAX), Number::Int32(1));
        assert!(matches!(sum, Some(Number::Int64(2_147_483_648))));
        let product = apply_arithmetic(
            Arithmetic::Multiply,
            Number::Int32(65_536),
            Number::Int32(65_536),
        );
        assert!(matches!(product, Some(Number::Int64(4_294_967_296))));
        assert!(
            apply_arithmetic(Arithmetic::Add, Number::Int64(i64::MAX), Number::Int32(1)).is_none()
        );
    }

    #[test]
    fn decimal_arithmetic_is_exact_and_rounds_half_even() {
        let sum = apply_arithmetic(
            Arithmetic::Add,
            Number::Decimal(dec("0.1")),
            Number::Decimal(dec("0.2")),
        );
        let Some(Number::Decimal(sum)) = sum else {
            panic!("decimal sum expected");
        };
        assert_eq!(
            sum.to_decimal128().map(|d| d.to_string()),
            Some("0.3".to_string())
        );
        let product = apply_arithmetic(
            Arithmetic::Multiply,
            Number::Decimal(dec("1.5")),
            Number::Int32(3),
        );
        let Some(Number::Decimal(product)) = product else {
            panic!("decimal product expected");
        };
        assert_eq!(product.total_cmp(dec("4.5")), Ordering::Equal);
        let big = apply_arithmetic(
            Arithmetic::Add,
            Number::Decimal(dec("9999999999999999999999999999999999")),
            Number::Decimal(dec("0.5")),
        );
        let Some(Number::Decimal(big)) = big else {
            panic!("decimal sum expected");
        };
        assert_eq!(
            big.total_cmp(dec("1.000000000000000000000000000000000E+34")),
            Ordering::Equal
        );
        let difference = apply_arithmetic(
            Arithmetic::Add,
            Number::Decimal(dec("5")),
            Number::Int64(-7),
        );
        let Some(Number::Decimal(difference)) = difference else {
            panic!("decimal difference expected");
        };
        assert_eq!(difference.total_cmp(dec("-2")), Ordering::Equal);
    }

    #[test]
    fn exact_i64_rejects_fractional_values() {
        assert_eq!(num(Bson::Double(3.0)).to_exact_i64(), Some(3));
        assert_eq!(num(Bson::Double(3.5)).to_exact_i64(), None);
        assert_eq!(Number::Decimal(dec("2.50")).to_exact_i64(), None);
        assert_eq!(Number::Decimal(dec("2.00")).to_exact_i64(), Some(2));
    }

    #[test]
    fn decimal_sum_with_distant_zero_keeps_the_other_operand() {
        let sum = apply_arithmetic(
            Arithmetic::Add,
            Number::Decimal(dec("0E+300")),
            Number::Int32(5),
        );
        let Some(Number::Decimal(sum)) = sum else {
            panic!("decimal sum expected");
        };
        assert_eq!(sum.total_cmp(Decimal::from_i64(5)), Ordering::Equal);
    }

    /// bsonelement.h `safeNumberLong`: NaN → 0, clamped, doubles truncated, decimals half-even.
    #[test]
    fn safe_number_long_matches_mongod() {
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        for (value, expected) in [
            (Bson::Double(f64::NAN), Some(0)),
            (Bson::Double(-0.5), Some(0)),
            (Bson::Double(2.9), Some(2)),
            (Bson::Double(1e300), Some(i64::MAX)),
            (Bson::Double(-1e300), Some(i64::MIN)),
            (decimal("NaN"), Some(0)),
            (decimal("0.5"), Some(0)),
            (decimal("1.5"), Some(2)),
            (decimal("2.5"), Some(2)),
            (decimal("-2.5"), Some(-2)),
            (decimal("-2.51"), Some(-3)),
            (decimal("1E+30"), Some(i64::MAX)),
            (decimal("-Infinity"), Some(i64::MIN)),
            (decimal("1E-50"), Some(0)),
            (Bson::from("1"), None),
        ] {
            assert_eq!(safe_number_long(&value), expected, "{value}");
        }
    }
}
