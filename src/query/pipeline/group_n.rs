//! The `n` of the N accumulators and expressions (`$firstN`, `$lastN`, `$minN`, `$maxN`): their
//! `{input, n}` arguments (5787801/5787900 not an object, 5787901 unknown, 5787906/5787907
//! missing) and the check of `n` (5787902/5787903/5787908), shared by `$group` (a constant `n`)
//! and the expressions (`n` evaluated per document).

use bson::Bson;

use super::expr::Expr;
use super::group::AccumulatorOp;
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::display::value_string;
use crate::query::numeric::Number;

/// `n` of an N (or `$topN`/`$bottomN`) accumulator: a constant positive integer (mongod's
/// 5787902/5787903/5787908).
pub(super) fn constant_n(operator: &str, n: &Bson) -> CommandResult<usize> {
    let n = match Expr::parse(n)?.evaluate_constant(bson::DateTime::now()) {
        Ok(value) => value.unwrap_or(Bson::Null),
        Err(error) if error.code == ErrorCode::Location4890500 => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway supports only a constant 'n' in {operator}"),
            ))
        }
        Err(error) => return Err(error),
    };
    n_value(&n)
}

/// Checks an evaluated `n` of an N accumulator or expression: a positive integral number
/// (mongod's 5787902 not a number, 5787903 not integral, 5787908 not positive).
pub(crate) fn n_value(n: &Bson) -> CommandResult<usize> {
    let not_integral = || {
        format!(
            "Value for 'n' must be of integral type, but found {}",
            value_string(n)
        )
    };
    let number = Number::from_bson(n)
        .ok_or_else(|| CommandError::new(ErrorCode::Location5787902, not_integral()))?;
    let count = number
        .to_exact_i64()
        .ok_or_else(|| CommandError::new(ErrorCode::Location5787903, not_integral()))?;
    if count <= 0 {
        return Err(CommandError::new(
            ErrorCode::Location5787908,
            format!("'n' must be greater than 0, found {count}"),
        ));
    }
    Ok(usize::try_from(count).unwrap_or(usize::MAX))
}

/// The accumulator op an N operator name stands for, with `n` still 0.
pub(crate) fn n_operator(name: &str) -> Option<AccumulatorOp> {
    match AccumulatorOp::from_name(name)? {
        op @ (AccumulatorOp::FirstN(_)
        | AccumulatorOp::LastN(_)
        | AccumulatorOp::MinN(_)
        | AccumulatorOp::MaxN(_)) => Some(op),
        _ => None,
    }
}

/// `op` (an N accumulator) with its `n`.
pub(crate) fn with_n(op: AccumulatorOp, n: usize) -> AccumulatorOp {
    match op {
        AccumulatorOp::FirstN(_) => AccumulatorOp::FirstN(n),
        AccumulatorOp::LastN(_) => AccumulatorOp::LastN(n),
        AccumulatorOp::MinN(_) => AccumulatorOp::MinN(n),
        _ => AccumulatorOp::MaxN(n),
    }
}

/// The `n` and `input` arguments of `$firstN`/`$lastN`/`$minN`/`$maxN` (`{input, n}`), as the
/// accumulators and the expressions of those names both take them.
pub(crate) fn n_arguments<'a>(
    operator: &str,
    op: AccumulatorOp,
    operand: &'a Bson,
) -> CommandResult<(&'a Bson, &'a Bson)> {
    let Bson::Document(arguments) = operand else {
        let code = match op {
            AccumulatorOp::MinN(_) | AccumulatorOp::MaxN(_) => ErrorCode::Location5787900,
            _ => ErrorCode::Location5787801,
        };
        return Err(CommandError::new(
            code,
            format!(
                "specification must be an object; found {}",
                crate::query::display::element_string(operator, operand)
            ),
        ));
    };
    let (mut input, mut n) = (None, None);
    for (name, value) in arguments {
        match name.as_str() {
            "input" => input = Some(value),
            "n" => n = Some(value),
            other => {
                return Err(CommandError::new(
                    ErrorCode::Location5787901,
                    format!("Unknown argument for 'n' operator: {other}"),
                ))
            }
        }
    }
    let n =
        n.ok_or_else(|| CommandError::new(ErrorCode::Location5787906, "Missing value for 'n'"))?;
    let input = input.ok_or_else(|| {
        CommandError::new(ErrorCode::Location5787907, "Missing value for 'input'")
    })?;
    Ok((n, input))
}

/// The arguments of `$firstN`/`$lastN`/`$minN`/`$maxN` as accumulators: the input expression,
/// and `op` with its `n`, a constant positive integer.
pub(crate) fn parse_n_accumulator(
    operator: &str,
    op: AccumulatorOp,
    operand: &Bson,
) -> CommandResult<(AccumulatorOp, Expr)> {
    let (n, input) = n_arguments(operator, op, operand)?;
    let n = constant_n(operator, n)?;
    Ok((with_n(op, n), Expr::parse(input)?))
}
