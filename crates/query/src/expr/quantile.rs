//! `$percentile` and `$median`: their specification (`{input, p, method}` / `{input, method}`),
//! shared by the expressions and the `$group` accumulators, and mongod's discrete percentile.
//!
//! Invariants: the specification is parsed as mongod's IDL parses it (40415 unknown field,
//! 40414 missing field, 14 wrong type, 2 for a method other than `approximate`); `p` is a
//! constant non-empty array of numbers in [0, 1] (7750300–7750303). Only numbers count as
//! samples (as doubles; NaN ignored, infinities kept). A percentile is the sample of 0-based
//! rank `ceil(p·n) − 1` (the largest for `p = 1`), as mongod's `DiscretePercentile`; the
//! expressions use it as mongod does, and so do the accumulators, where mongod's t-digest may
//! answer a nearby value on large inputs. Without samples `$percentile` gives an array of nulls
//! and `$median` null.

use bson::Bson;

use super::{fail, parse, Expr, Scope, Value, Vars};
use crate::numeric::Number;
use tideway_base::display::{element_string, type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

/// A parsed `$percentile` (`median: false`) or `$median` specification.
pub(crate) struct QuantileSpec<'a> {
    pub(crate) input: &'a Bson,
    pub(crate) ps: Vec<f64>,
}

/// Parses `{input, p, method}` (`$percentile`) or `{input, method}` (`$median`);
/// `object_code` is the operator's "specification must be an object" code.
pub(crate) fn parse_quantile_spec<'a>(
    name: &str,
    operand: &'a Bson,
    object_code: ErrorCode,
) -> CommandResult<QuantileSpec<'a>> {
    let median = name == "$median";
    let Bson::Document(spec) = operand else {
        return Err(fail(
            object_code,
            format!(
                "specification must be an object; found {}",
                element_string(name, operand)
            ),
        ));
    };
    let (mut input, mut p, mut method) = (None, None, None);
    for (field, value) in spec {
        match field.as_str() {
            "input" => input = Some(value),
            "p" if !median => p = Some(value),
            "method" => {
                let Bson::String(text) = value else {
                    return Err(fail(
                        ErrorCode::TypeMismatch,
                        format!(
                            "BSON field '{name}.method' is the wrong type '{}', expected type 'string'",
                            type_name(value)
                        ),
                    ));
                };
                if text != "approximate" {
                    return Err(fail(
                        ErrorCode::BadValue,
                        "Currently only 'approximate' can be used as percentile 'method'.",
                    ));
                }
                method = Some(value);
            }
            other => {
                return Err(fail(
                    ErrorCode::Location40415,
                    format!("BSON field '{name}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let missing = |field: &str| {
        fail(
            ErrorCode::Location40414,
            format!("BSON field '{name}.{field}' is missing but a required field"),
        )
    };
    let input = input.ok_or_else(|| missing("input"))?;
    let ps = if median {
        vec![0.5]
    } else {
        parse_p(p.ok_or_else(|| missing("p"))?)?
    };
    method.ok_or_else(|| missing("method"))?;
    Ok(QuantileSpec { input, ps })
}

/// `p`: a constant array of numbers from [0, 1].
fn parse_p(p: &Bson) -> CommandResult<Vec<f64>> {
    let value = Expr::parse(p)
        .and_then(|expr| expr.evaluate_constant(bson::DateTime::now()))
        .map_err(|_| {
            fail(
                ErrorCode::Location7750300,
                format!(
                    "The $percentile 'p' field must be an array of constant values, but found value: {}.",
                    value_string(p)
                ),
            )
        })?;
    let message =
        "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: ";
    let Some(Bson::Array(items)) =
        value.filter(|value| !matches!(value, Bson::Array(items) if items.is_empty()))
    else {
        return Err(fail(
            ErrorCode::Location7750301,
            format!("{message}{}", value_string(p)),
        ));
    };
    items
        .iter()
        .map(|item| {
            let p = Number::from_bson(item)
                .ok_or_else(|| {
                    fail(
                        ErrorCode::Location7750302,
                        format!("{message}{}", value_string(item)),
                    )
                })?
                .to_f64();
            if !(0.0..=1.0).contains(&p) {
                return Err(fail(
                    ErrorCode::Location7750303,
                    format!("{message}{}", super::trigonometry::stream_double(p)),
                ));
            }
            Ok(p)
        })
        .collect()
}

/// The numeric samples of one percentile computation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Samples {
    finite: Vec<f64>,
    negative_infinities: usize,
    positive_infinities: usize,
}

impl Samples {
    /// Takes a value in if it is a number (NaN is dropped).
    pub(crate) fn add(&mut self, value: &Bson) {
        let Some(number) = Number::from_bson(value) else {
            return;
        };
        let x = number.to_f64();
        if x.is_nan() {
        } else if x == f64::NEG_INFINITY {
            self.negative_infinities += 1;
        } else if x == f64::INFINITY {
            self.positive_infinities += 1;
        } else {
            self.finite.push(x);
        }
    }

    /// mongod's discrete percentiles; `None` without samples.
    pub(crate) fn percentiles(mut self, ps: &[f64]) -> Option<Vec<f64>> {
        let total = self.finite.len() + self.negative_infinities + self.positive_infinities;
        if total == 0 {
            return None;
        }
        self.finite.sort_by(f64::total_cmp);
        Some(
            ps.iter()
                .map(|&p| {
                    let rank = if p >= 1.0 {
                        total - 1
                    } else {
                        ((total as f64 * p).ceil() as usize).saturating_sub(1)
                    };
                    if rank < self.negative_infinities {
                        f64::NEG_INFINITY
                    } else if rank >= self.negative_infinities + self.finite.len() {
                        f64::INFINITY
                    } else {
                        self.finite[rank - self.negative_infinities]
                    }
                })
                .collect(),
        )
    }
}

/// The result: `$median` a double or null, `$percentile` an array of doubles or of nulls.
pub(crate) fn quantile_result(median: bool, count: usize, values: Option<Vec<f64>>) -> Bson {
    match (median, values) {
        (true, Some(values)) => values.first().copied().map_or(Bson::Null, Bson::Double),
        (true, None) => Bson::Null,
        (false, Some(values)) => Bson::Array(values.into_iter().map(Bson::Double).collect()),
        (false, None) => Bson::Array(vec![Bson::Null; count]),
    }
}

/// The argument a `$group` quantile accumulator folds: `{input, p}` per document (the `p`
/// travels with the values, as `$top`'s sort fields do).
pub(crate) fn accumulator_argument(spec: &QuantileSpec) -> CommandResult<Expr> {
    let ps = Bson::Array(spec.ps.iter().copied().map(Bson::Double).collect());
    Ok(Expr::Object(vec![
        ("input".to_string(), Expr::parse(spec.input)?),
        ("p".to_string(), Expr::Literal(ps)),
    ]))
}

pub(super) fn parse_quantile(name: &str, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let code = if name == "$median" {
        ErrorCode::Location7436201
    } else {
        ErrorCode::Location7436200
    };
    let spec = parse_quantile_spec(name, operand, code)?;
    Ok(Expr::Quantile {
        median: name == "$median",
        ps: spec.ps,
        input: Box::new(parse(spec.input, scope)?),
    })
}

/// The expressions: a number is every percentile; an array gives the percentiles of its
/// numbers.
pub(super) fn evaluate_quantile(
    median: bool,
    ps: &[f64],
    input: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let values = match super::evaluate(input, vars)? {
        Some(value) if Number::from_bson(&value).is_some() => {
            let x = Number::from_bson(&value).map_or(f64::NAN, Number::to_f64);
            Some(vec![x; ps.len()])
        }
        Some(Bson::Array(items)) if !items.is_empty() => {
            let mut samples = Samples::default();
            for item in &items {
                samples.add(item);
            }
            samples.percentiles(ps)
        }
        _ => None,
    };
    Ok(Some(quantile_result(median, ps.len(), values)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_errors, check_over, check_values};
    use bson::{bson, doc, Bson};

    #[test]
    fn expressions_take_the_discrete_percentile_of_numbers() {
        // The reference pages' testScores: student 2345 scored 62, 81 and 80.
        check_over(
            bson!({"$median": {"input": ["$test01", "$test02", "$test03"], "method": "approximate"}}),
            vec![
                (doc! {"test01": 62, "test02": 81, "test03": 80}, bson!(80.0)),
                (doc! {"test01": 60, "test02": 83, "test03": 79}, bson!(79.0)),
                (doc! {"test01": 60, "test02": 53, "test03": 72}, bson!(60.0)),
            ],
        );
        check_values(vec![
            (
                bson!({"$percentile": {"input": [60, 60, 62, 64, 67], "p": [0.5, 0.75, 0.9, 0.95, 0, 1], "method": "approximate"}}),
                bson!([62.0, 64.0, 67.0, 67.0, 60.0, 67.0]),
            ),
            (
                bson!({"$percentile": {"input": 5, "p": [0.1, 0.9], "method": "approximate"}}),
                bson!([5.0, 5.0]),
            ),
            (
                bson!({"$percentile": {"input": ["a", null], "p": [0.5, 0.9], "method": "approximate"}}),
                bson!([null, null]),
            ),
            (
                bson!({"$percentile": {"input": [], "p": [0.5], "method": "approximate"}}),
                bson!([null]),
            ),
            (
                bson!({"$median": {"input": "$missing", "method": "approximate"}}),
                Bson::Null,
            ),
            (
                bson!({"$median": {"input": [1, f64::NEG_INFINITY, f64::NAN, 3, "x"], "method": "approximate"}}),
                bson!(1.0),
            ),
            (
                bson!({"$percentile": {"input": [1, 2, 3, 4], "p": {"$literal": [0.25, 0.5]}, "method": "approximate"}}),
                bson!([1.0, 2.0]),
            ),
        ]);
    }

    #[test]
    fn specifications_are_checked_as_mongod_checks_them() {
        check_errors(vec![
            (bson!({"$median": 1}), 7436201),
            (bson!({"$percentile": [1]}), 7436200),
            (bson!({"$median": {"input": 1}}), 40414),
            (bson!({"$median": {"method": "approximate"}}), 40414),
            (
                bson!({"$percentile": {"input": 1, "method": "approximate"}}),
                40414,
            ),
            (
                bson!({"$median": {"input": 1, "method": "approximate", "p": [0.5]}}),
                40415,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": [0.5], "method": 1}}),
                14,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": [0.5], "method": "continuous"}}),
                2,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": "$x", "method": "approximate"}}),
                7750300,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": [], "method": "approximate"}}),
                7750301,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": 0.5, "method": "approximate"}}),
                7750301,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": ["a"], "method": "approximate"}}),
                7750302,
            ),
            (
                bson!({"$percentile": {"input": 1, "p": [1.5], "method": "approximate"}}),
                7750303,
            ),
        ]);
    }
}
