//! Boolean (`$and`, `$or`; `$not` is one line of the dispatch), comparison (`$eq`, `$ne`,
//! `$gt`, `$gte`, `$lt`, `$lte`, `$cmp`, in BSON order under the collation) and conditional
//! operators (`$cond`, `$ifNull`, `$switch`), the lazy ones evaluating only what they need.

use std::cmp::Ordering;

use bson::Bson;

use super::{
    check_arity, compare_optional, evaluate, fail, is_nullish, parse, parse_arguments, truthy, two,
    Expr, Lazy, Op, Scope, Value, Vars,
};
use crate::collation::Collation;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

pub(super) fn parse_cond(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    if let Bson::Document(document) = operand {
        let mut parts: [Option<Expr>; 3] = [None, None, None];
        for (name, value) in document {
            let slot = match name.as_str() {
                "if" => 0,
                "then" => 1,
                "else" => 2,
                other => {
                    return Err(fail(
                        ErrorCode::Location17083,
                        format!("Unrecognized parameter to $cond: {other}"),
                    ))
                }
            };
            parts[slot] = Some(parse(value, scope)?);
        }
        let [condition, then, otherwise] = parts;
        let condition = condition
            .ok_or_else(|| fail(ErrorCode::Location17080, "Missing 'if' parameter to $cond"))?;
        let then = then.ok_or_else(|| {
            fail(
                ErrorCode::Location17081,
                "Missing 'then' parameter to $cond",
            )
        })?;
        let otherwise = otherwise.ok_or_else(|| {
            fail(
                ErrorCode::Location17082,
                "Missing 'else' parameter to $cond",
            )
        })?;
        return Ok(Expr::Lazy(Lazy::Cond, vec![condition, then, otherwise]));
    }
    let arguments = parse_arguments(operand, scope)?;
    check_arity("$cond", arguments.len(), 3, Some(3))?;
    Ok(Expr::Lazy(Lazy::Cond, arguments))
}

pub(super) fn parse_switch(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let Bson::Document(document) = operand else {
        return Err(fail(
            ErrorCode::Location40060,
            format!(
                "$switch requires an object as an argument, found: {}",
                type_name(operand)
            ),
        ));
    };
    let mut branches = Vec::new();
    let mut default = None;
    for (name, value) in document {
        match name.as_str() {
            "branches" => {
                let Bson::Array(items) = value else {
                    return Err(fail(
                        ErrorCode::Location40061,
                        format!(
                            "$switch expected an array for 'branches', found: {}",
                            type_name(value)
                        ),
                    ));
                };
                for item in items {
                    let Bson::Document(branch) = item else {
                        return Err(fail(
                            ErrorCode::Location40062,
                            format!(
                                "$switch expected each branch to be an object, found: {}",
                                type_name(item)
                            ),
                        ));
                    };
                    let (mut case, mut then) = (None, None);
                    for (key, part) in branch {
                        match key.as_str() {
                            "case" => case = Some(parse(part, scope)?),
                            "then" => then = Some(parse(part, scope)?),
                            other => {
                                return Err(fail(
                                    ErrorCode::Location40063,
                                    format!(
                                        "$switch found an unknown argument to a branch: {other}"
                                    ),
                                ))
                            }
                        }
                    }
                    let case = case.ok_or_else(|| {
                        fail(
                            ErrorCode::Location40064,
                            "$switch requires each branch have a 'case' expression",
                        )
                    })?;
                    let then = then.ok_or_else(|| {
                        fail(
                            ErrorCode::Location40065,
                            "$switch requires each branch have a 'then' expression.",
                        )
                    })?;
                    branches.push((case, then));
                }
            }
            "default" => default = Some(Box::new(parse(value, scope)?)),
            other => {
                return Err(fail(
                    ErrorCode::Location40067,
                    format!("$switch found an unknown argument: {other}"),
                ))
            }
        }
    }
    if branches.is_empty() {
        return Err(fail(
            ErrorCode::Location40068,
            "$switch requires at least one branch.",
        ));
    }
    Ok(Expr::Switch { branches, default })
}

pub(super) fn evaluate_lazy(
    lazy: Lazy,
    arguments: &[Expr],
    vars: &mut Vars,
) -> CommandResult<Value> {
    match lazy {
        Lazy::And => {
            for argument in arguments {
                if !truthy(&evaluate(argument, vars)?) {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
            Ok(Some(Bson::Boolean(true)))
        }
        Lazy::Or => {
            for argument in arguments {
                if truthy(&evaluate(argument, vars)?) {
                    return Ok(Some(Bson::Boolean(true)));
                }
            }
            Ok(Some(Bson::Boolean(false)))
        }
        Lazy::Cond => {
            let [condition, then, otherwise] = arguments else {
                return Err(CommandError::internal("$cond takes three arguments"));
            };
            if truthy(&evaluate(condition, vars)?) {
                evaluate(then, vars)
            } else {
                evaluate(otherwise, vars)
            }
        }
        Lazy::IfNull => {
            let Some((last, candidates)) = arguments.split_last() else {
                return Ok(None);
            };
            for candidate in candidates {
                let value = evaluate(candidate, vars)?;
                if !is_nullish(&value) {
                    return Ok(value);
                }
            }
            evaluate(last, vars)
        }
    }
}

/// `$switch`: the `then` of the first true `case`, else the default.
pub(super) fn evaluate_switch(
    branches: &[(Expr, Expr)],
    default: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    for (case, then) in branches {
        if truthy(&evaluate(case, vars)?) {
            return evaluate(then, vars);
        }
    }
    match default {
        Some(default) => evaluate(default, vars),
        None => Err(fail(
            ErrorCode::Location40066,
            "$switch could not find a matching branch for an input, and no default was specified.",
        )),
    }
}

/// `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte` and `$cmp`.
pub(super) fn evaluate_comparison(
    op: Op,
    values: Vec<Value>,
    collation: Option<&Collation>,
) -> CommandResult<Value> {
    let (a, b) = two(values)?;
    let order = compare_optional(&a, &b, collation);
    Ok(Some(match op {
        Op::Cmp => Bson::Int32(match order {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }),
        Op::Eq => Bson::Boolean(order == Ordering::Equal),
        Op::Ne => Bson::Boolean(order != Ordering::Equal),
        Op::Gt => Bson::Boolean(order == Ordering::Greater),
        Op::Gte => Bson::Boolean(order != Ordering::Less),
        Op::Lt => Bson::Boolean(order == Ordering::Less),
        _ => Bson::Boolean(order != Ordering::Greater),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, value};
    use crate::compare::fixtures::decimal;
    use crate::expr::fixtures::assert_value;
    use bson::Bson;

    #[test]
    fn comparisons_use_bson_order_with_missing_below_null() {
        assert_value(value(bson::bson!({"$eq": [1, 1.0]})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$eq": ["$missing", null]})),
            Bson::Boolean(false),
        );
        assert_value(
            value(bson::bson!({"$lt": ["$missing", null]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$gt": ["a", 5]})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$lte": [2, 2_i64]})),
            Bson::Boolean(true),
        );
        assert_value(
            value(bson::bson!({"$ne": [[1], [1]]})),
            Bson::Boolean(false),
        );
        assert_value(value(bson::bson!({"$cmp": ["b", "a"]})), Bson::Int32(1));
        assert_value(value(bson::bson!({"$cmp": [1, 2]})), Bson::Int32(-1));
    }

    #[test]
    fn boolean_and_conditional_operators() {
        assert_value(
            value(bson::bson!({"$and": [1, "x", []]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$and": [1, 0]})), Bson::Boolean(false));
        assert_value(value(bson::bson!({"$and": []})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$or": [null, "$missing", false]})),
            Bson::Boolean(false),
        );
        assert_value(
            value(bson::bson!({"$not": [decimal("0")]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$cond": [true, "y", "n"]})), "y".into());
        assert_value(
            value(bson::bson!({"$cond": {"if": {"$gt": [1, 2]}, "then": "y", "else": "n"}})),
            "n".into(),
        );
        assert_eq!(
            error(bson::bson!({"$cond": {"then": 1, "else": 2}}))
                .code
                .code(),
            17080
        );
        assert_value(
            value(bson::bson!({"$ifNull": ["$missing", null, "d"]})),
            "d".into(),
        );
        assert_value(value(bson::bson!({"$ifNull": [0, "d"]})), Bson::Int32(0));
        assert_eq!(error(bson::bson!({"$ifNull": [1]})).code.code(), 1257300);
        let switch = bson::bson!({"$switch": {
            "branches": [{"case": {"$eq": [1, 2]}, "then": "a"}, {"case": true, "then": "b"}],
            "default": "c"
        }});
        assert_value(value(switch), "b".into());
        let no_match = error(bson::bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}));
        assert_eq!(no_match.code.code(), 40066);
        assert_eq!(
            error(bson::bson!({"$switch": {"branches": []}}))
                .code
                .code(),
            40068
        );
    }
}
