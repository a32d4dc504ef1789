//! Variables: `$let`, and the name and scope of the variable `$filter`/`$map` bind per element.
//! Parsing tracks the names in scope (an undefined `$$name` is 17276 at parse time); evaluation
//! pushes and pops bindings on [`Vars`].

use bson::Bson;

use super::{
    evaluate, fail, find_argument, named_arguments, parse, validate_variable_name, Expr, Scope,
    Value, Vars,
};
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// Parses `as` (default `this`) and the body expressions of `$filter`/`$map` with the
/// variable in scope.
pub(super) fn variable_name(value: Option<&Bson>, default: &str) -> CommandResult<String> {
    match value {
        None => Ok(default.to_string()),
        Some(Bson::String(name)) => {
            validate_variable_name(name)?;
            Ok(name.clone())
        }
        Some(other) => Err(fail(
            ErrorCode::Location16866,
            format!(
                "empty variable names are not allowed, and 'as' must be a string, found {}",
                type_name(other)
            ),
        )),
    }
}

pub(super) fn with_variable<T>(
    scope: &mut Scope,
    name: &str,
    body: impl FnOnce(&mut Scope) -> CommandResult<T>,
) -> CommandResult<T> {
    scope.names.push(name.to_string());
    let result = body(scope);
    scope.names.pop();
    result
}

pub(super) fn parse_let(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["vars", "in"],
        || {
            fail(
                ErrorCode::Location16874,
                "$let only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location16875,
                format!("Unrecognized parameter to $let: {other}"),
            )
        },
    )?;
    let vars = find_argument(&arguments, "vars")
        .ok_or_else(|| fail(ErrorCode::Location16876, "Missing 'vars' parameter to $let"))?;
    let body = find_argument(&arguments, "in")
        .ok_or_else(|| fail(ErrorCode::Location16877, "Missing 'in' parameter to $let"))?;
    let Bson::Document(vars) = vars else {
        return Err(fail(
            ErrorCode::Location10065,
            format!(
                "invalid parameter: expected an object (vars), found {}",
                type_name(vars)
            ),
        ));
    };
    let mut bindings = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        validate_variable_name(name)?;
        bindings.push((name.clone(), parse(value, scope)?));
    }
    let depth = scope.names.len();
    scope
        .names
        .extend(bindings.iter().map(|(name, _)| name.clone()));
    let body = parse(body, scope);
    scope.names.truncate(depth);
    Ok(Expr::Let {
        bindings,
        body: Box::new(body?),
    })
}

/// `$let`: the bindings evaluated in the outer scope, then the body with them bound.
pub(super) fn evaluate_let(
    bindings: &[(String, Expr)],
    body: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let mut values = Vec::with_capacity(bindings.len());
    for (name, binding) in bindings {
        values.push((name.clone(), evaluate(binding, vars)?));
    }
    let depth = vars.bindings.len();
    vars.bindings.extend(values);
    let result = evaluate(body, vars);
    vars.bindings.truncate(depth);
    result
}
