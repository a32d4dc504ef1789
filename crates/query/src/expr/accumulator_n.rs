//! The `n` of the N accumulators and expressions (`$firstN`, `$lastN`, `$minN`, `$maxN`, and of
//! `$topN`/`$bottomN`): their `{input, n}` arguments (5787801/5787900 not an object, 5787901
//! unknown, 5787906/5787907 missing), the check of an evaluated `n` (5787902/5787903/5787908),
//! and the document an accumulator's initializer reads.
//!
//! Where `n` is evaluated is mongod's: in `$group` when a group starts, against the group key's
//! fields ([`key_fields`], mongod's `expandId`), so `n` may depend on `_id` and a field outside
//! the key reads as missing (5787902); in `$bucketAuto` against an empty document; in
//! `$setWindowFields` it must be a constant (checked at parse time); in the expressions, per
//! document. Nothing here evaluates anything but `n`.

use std::borrow::Cow;

use bson::{Bson, Document};

use super::accumulator::AccumulatorOp;
use super::{Expr, Value};
use crate::numeric::Number;
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// What an accumulator's initializer (`n`, `$accumulator`'s `initArgs`) reads in `$group`: the
/// group key when it is a document (a `{gameId: "$gameId"}` key gives `{gameId: ...}`, so
/// `"$gameId"` reads it), else an empty document (mongod's `expandId`).
pub(crate) fn key_fields(key: &Bson) -> Cow<'_, Document> {
    match key {
        Bson::Document(fields) => Cow::Borrowed(fields),
        _ => Cow::Owned(Document::new()),
    }
}

/// `n` of an N (or `$topN`/`$bottomN`) window function: a constant positive integer (mongod's
/// 5787902/5787903/5787908).
pub(crate) fn constant_n(operator: &str, n: &Expr) -> CommandResult<usize> {
    match n.evaluate_constant(bson::DateTime::now()) {
        Ok(value) => n_value(&value),
        Err(error) if error.code == ErrorCode::Location4890500 => Err(CommandError::new(
            ErrorCode::NotImplemented,
            format!("tideway supports only a constant 'n' in the window function {operator}"),
        )),
        Err(error) => Err(error),
    }
}

/// Checks an evaluated `n` of an N accumulator or expression: a positive integral number
/// (mongod's `AccumulatorN::validateN`: 5787902 not a number, missing included, 5787903 not
/// integral or beyond a long, 5787908 not positive).
pub(crate) fn n_value(n: &Value) -> CommandResult<usize> {
    let shown = n
        .as_ref()
        .map_or_else(|| "MISSING".to_string(), value_string);
    let not_integral = || format!("Value for 'n' must be of integral type, but found {shown}");
    let number = n
        .as_ref()
        .and_then(Number::from_bson)
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
                tideway_base::display::element_string(operator, operand)
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

/// The arguments of `$firstN`/`$lastN`/`$minN`/`$maxN` as accumulators: `op` (its `n` still 0),
/// the `n` expression and the input expression.
pub(crate) fn parse_n_accumulator(
    operator: &str,
    op: AccumulatorOp,
    operand: &Bson,
) -> CommandResult<(AccumulatorOp, Expr, Expr)> {
    let (n, input) = n_arguments(operator, op, operand)?;
    Ok((op, Expr::parse(n)?, Expr::parse(input)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_a_positive_integral_number_of_at_most_a_long() {
        let decimal = |text: &str| Some(Bson::Decimal128(text.parse().expect("a decimal")));
        // first_n_last_n.js: the largest long is a valid `n`, one more is not integral.
        assert_eq!(
            n_value(&decimal("9223372036854775807")).ok(),
            Some(usize::try_from(i64::MAX).unwrap_or(usize::MAX))
        );
        let cases: Vec<(Value, ErrorCode, &str)> = vec![
            (
                decimal("9223372036854775808"),
                ErrorCode::Location5787903,
                "",
            ),
            (
                Some(Bson::String("string".into())),
                ErrorCode::Location5787902,
                "Value for 'n' must be of integral type, but found \"string\"",
            ),
            (
                None,
                ErrorCode::Location5787902,
                "Value for 'n' must be of integral type, but found MISSING",
            ),
            (Some(Bson::Double(3.2)), ErrorCode::Location5787903, ""),
            (
                Some(Bson::Int32(-1)),
                ErrorCode::Location5787908,
                "'n' must be greater than 0, found -1",
            ),
        ];
        for (n, code, message) in cases {
            let error = n_value(&n).expect_err("refused");
            assert_eq!(error.code, code, "{n:?}");
            if !message.is_empty() {
                assert_eq!(error.errmsg, message);
            }
        }
        assert_eq!(n_value(&Some(Bson::Double(3.0))).ok(), Some(3));
    }

    #[test]
    fn initializers_read_a_document_key_and_nothing_else() {
        let key = Bson::Document(bson::doc! {"gameId": "G2"});
        assert_eq!(key_fields(&key).get_str("gameId").ok(), Some("G2"));
        assert!(key_fields(&Bson::String("G2".into())).is_empty());
        assert!(key_fields(&Bson::Null).is_empty());
    }
}
