//! Object operators: `$mergeObjects` (also `$group`'s accumulator step), `$getField`,
//! `$setField` and `$unsetField`.

use bson::{Bson, Document};

use super::{
    evaluate, fail, find_argument, named_arguments, parse, parse_optional, value_type_name, Expr,
    Scope, Value, Vars,
};
use crate::error::{CommandResult, ErrorCode};
use crate::query::display::{type_name, value_string};

pub(super) fn parse_get_field(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    if let Bson::String(field) = operand {
        return Ok(Expr::GetField {
            field: Box::new(Expr::Literal(Bson::String(field.clone()))),
            input: None,
        });
    }
    // The shorthand with an expression for the field (`{$getField: {$literal: "$bin"}}`, as the
    // documentation reads a `$`-prefixed field): an object led by an operator.
    if let Bson::Document(document) = operand {
        if document
            .keys()
            .next()
            .is_some_and(|key| key.starts_with('$'))
        {
            return Ok(Expr::GetField {
                field: Box::new(parse(operand, scope)?),
                input: None,
            });
        }
    }
    let arguments = named_arguments(
        operand,
        &["field", "input"],
        || {
            fail(
                ErrorCode::Location3041703,
                "$getField requires an object or a string as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location3041701,
                format!("$getField found an unknown argument: {other}"),
            )
        },
    )?;
    let field = find_argument(&arguments, "field").ok_or_else(|| {
        fail(
            ErrorCode::Location3041702,
            "$getField requires 'field' to be specified",
        )
    })?;
    Ok(Expr::GetField {
        field: Box::new(parse(field, scope)?),
        input: parse_optional(find_argument(&arguments, "input"), scope)?,
    })
}

/// `$setField: {field, input, value}` / `$unsetField: {field, input}` with mongod's errors:
/// `field` must be a constant string (a literal, or `{$literal: "..."}` for names that start
/// with `$`).
pub(super) fn parse_set_field(
    name: &str,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    let setting = name == "$setField";
    let allowed: &[&str] = if setting {
        &["field", "input", "value"]
    } else {
        &["field", "input"]
    };
    let arguments = named_arguments(
        operand,
        allowed,
        || {
            fail(
                ErrorCode::Location4161100,
                format!("{name} only supports an object as its argument"),
            )
        },
        |other| {
            fail(
                ErrorCode::Location4161101,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let required = |argument: &str, code: ErrorCode| {
        find_argument(&arguments, argument).ok_or_else(|| {
            fail(
                code,
                format!("{name} requires '{argument}' to be specified"),
            )
        })
    };
    let field = required("field", ErrorCode::Location4161102)?;
    let input = required("input", ErrorCode::Location4161109)?;
    let value = if setting {
        Some(required("value", ErrorCode::Location4161103)?)
    } else {
        None
    };
    let field = match field {
        Bson::String(text) if text.starts_with('$') => {
            return Err(fail(
                ErrorCode::Location4161108,
                format!("{name} requires 'field' to be a constant, but got a field path reference or variable: {text}; wrap it in $literal to use it as a field name"),
            ))
        }
        Bson::String(text) => text.clone(),
        Bson::Document(literal) if literal.len() == 1 && literal.contains_key("$literal") => {
            match literal.get("$literal") {
                Some(Bson::String(text)) => text.clone(),
                other => {
                    return Err(fail(
                        ErrorCode::Location4161107,
                        format!(
                            "{name} requires 'field' to evaluate to type String, but got {}",
                            other.map_or("missing", type_name)
                        ),
                    ))
                }
            }
        }
        Bson::Document(_) => {
            return Err(fail(
                ErrorCode::Location4161106,
                format!("{name} requires 'field' to evaluate to a constant, but got a non-constant argument"),
            ))
        }
        other => {
            return Err(fail(
                ErrorCode::Location4161107,
                format!("{name} requires 'field' to evaluate to type String, but got {}", type_name(other)),
            ))
        }
    };
    Ok(Expr::SetField {
        field,
        input: Box::new(parse(input, scope)?),
        value: value
            .map(|value| parse(value, scope).map(Box::new))
            .transpose()?,
    })
}

/// `$getField`: `field` of `input` (default `$$CURRENT`).
pub(super) fn evaluate_get_field(
    field: &Expr,
    input: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let field = evaluate(field, vars)?;
    let Some(Bson::String(field)) = field else {
        return Err(fail(
            ErrorCode::Location5654602,
            format!(
                "$getField requires 'field' to evaluate to type String, but got {}",
                value_type_name(&field)
            ),
        ));
    };
    let input = match input {
        Some(input) => evaluate(input, vars)?,
        None => Some(Bson::Document(vars.current.clone())),
    };
    match input {
        None => Ok(None),
        Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Document(document)) => Ok(document.get(&field).cloned()),
        Some(other) => Err(fail(
            ErrorCode::Location3041704,
            format!(
                "$getField requires 'input' to evaluate to type Object, but got {}",
                type_name(&other)
            ),
        )),
    }
}

/// `$setField` (`value` given) and `$unsetField` (`value: None`).
pub(super) fn evaluate_set_field(
    field: &str,
    input: &Expr,
    value: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    let mut document = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Document(document)) => document,
        Some(_) => {
            return Err(fail(
                ErrorCode::Location4161105,
                format!(
                    "{} requires 'input' to evaluate to type Object",
                    if value.is_some() {
                        "$setField"
                    } else {
                        "$unsetField"
                    }
                ),
            ))
        }
    };
    let value = match value {
        Some(value) => evaluate(value, vars)?,
        None => None,
    };
    match value {
        // `insert` keeps the position of a field already there.
        Some(value) => {
            document.insert(field.to_string(), value);
        }
        None => {
            document.remove(field);
        }
    }
    vars.copied(Some(Bson::Document(document)))
}

pub(super) fn evaluate_merge_objects(values: Vec<Value>) -> CommandResult<Value> {
    let mut output = Document::new();
    for value in values {
        merge_object_into(&mut output, value)?;
    }
    Ok(Some(Bson::Document(output)))
}

/// `$mergeObjects` step: null/missing inputs are skipped, other non-documents rejected.
pub(crate) fn merge_object_into(output: &mut Document, value: Value) -> CommandResult<()> {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(()),
        Some(Bson::Document(document)) => {
            for (name, field) in document {
                output.insert(name, field);
            }
            Ok(())
        }
        Some(other) => Err(fail(
            ErrorCode::Location40400,
            format!(
                "$mergeObjects requires object inputs, but input {} is of type {}",
                value_string(&other),
                type_name(&other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::error;
    use crate::query::pipeline::fixtures::{assert_value, eval_ok};
    use bson::{doc, Bson};

    #[test]
    fn object_operators_and_literals() {
        let document = doc! {"a": {"x": 1, "y": 2}, "b": {"y": 3}, "$odd": 1};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(
            on(bson::bson!({"$mergeObjects": ["$a", "$b", null, "$missing"]})),
            Bson::Document(doc! {"x": 1, "y": 3}),
        );
        assert_eq!(
            error(bson::bson!({"$mergeObjects": [1]})).code.code(),
            40400
        );
        assert_value(on(bson::bson!({"$getField": "$odd"})), Bson::Int32(1));
        assert_value(
            on(bson::bson!({"$getField": {"field": "y", "input": "$b"}})),
            Bson::Int32(3),
        );
        assert_value(on(bson::bson!({"$literal": "$a"})), "$a".into());
        assert_value(
            on(bson::bson!({"k": "$a.x", "gone": "$missing", "arr": ["$missing", 1]})),
            Bson::Document(doc! {"k": 1, "arr": [null, 1]}),
        );
    }

    #[test]
    fn set_field_and_unset_field() {
        let document = doc! {"_id": 1, "item": "sweatshirt", "price.usd": 45.99, "qty": 300};
        let on = |expression: Bson| eval_ok(expression, &document);
        // The documentation's examples: fields whose names hold a dot or start with `$`.
        assert_value(
            on(
                bson::bson!({"$setField": {"field": "price.usd", "input": "$$ROOT", "value": 49.99}}),
            ),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "price.usd": 49.99, "qty": 300}),
        );
        assert_value(
            on(
                bson::bson!({"$setField": {"field": {"$literal": "$price"}, "input": {"a": 1}, "value": "$qty"}}),
            ),
            Bson::Document(doc! {"a": 1, "$price": 300}),
        );
        assert_value(
            on(bson::bson!({"$unsetField": {"field": "price.usd", "input": "$$ROOT"}})),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "qty": 300}),
        );
        assert_value(
            on(
                bson::bson!({"$setField": {"field": "qty", "input": "$$ROOT", "value": "$$REMOVE"}}),
            ),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "price.usd": 45.99}),
        );
        assert_value(
            on(bson::bson!({"$setField": {"field": "a", "input": "$missing", "value": 1}})),
            Bson::Null,
        );
        let code = |expression: Bson| error(expression).code.code();
        assert_eq!(code(bson::bson!({"$setField": 1})), 4161100);
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": {}, "value": 1, "x": 1}})),
            4161101
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"input": {}, "value": 1}})),
            4161102
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": {}}})),
            4161103
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": 1, "input": {}, "value": 1}})),
            4161107
        );
        assert_eq!(
            code(
                bson::bson!({"$setField": {"field": {"$concat": ["a"]}, "input": {}, "value": 1}})
            ),
            4161106
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "$a", "input": {}, "value": 1}})),
            4161108
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": 5, "value": 1}})),
            4161105
        );
    }
}
