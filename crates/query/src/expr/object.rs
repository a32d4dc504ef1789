//! Object operators: `$mergeObjects` (also `$group`'s accumulator step), `$getField`,
//! `$setField`, `$unsetField`, `$arrayToObject` and `$objectToArray`.
//!
//! `$arrayToObject` takes `[[k, v], ...]` or `[{k, v}, ...]` (the first element decides; mixing
//! is 40396/40391); a repeated key keeps its first position and its last value; keys with an
//! embedded null byte are refused (4940400/4940401); `$`-prefixed and dotted keys are kept, as
//! mongod keeps them.

use bson::{Bson, Document};

use super::{
    evaluate, fail, find_argument, named_arguments, parse, parse_optional, value_type_name, Expr,
    Scope, Value, Vars,
};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandResult, ErrorCode};

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

/// `$objectToArray`: `[{k, v}, ...]` in field order.
pub(super) fn evaluate_object_to_array(value: Value) -> CommandResult<Value> {
    if super::is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Document(document)) = value else {
        return Err(fail(
            ErrorCode::Location40390,
            format!(
                "$objectToArray requires a document input, found: {}",
                value_type_name(&value)
            ),
        ));
    };
    Ok(Some(Bson::Array(
        document
            .into_iter()
            .map(|(key, value)| {
                let mut pair = Document::new();
                pair.insert("k", key);
                pair.insert("v", value);
                Bson::Document(pair)
            })
            .collect(),
    )))
}

/// One `$arrayToObject` element as its key and value.
fn key_value_pair(element: Bson, pairs: bool) -> CommandResult<(String, Bson)> {
    let (key, value, null_code) = if pairs {
        let Bson::Array(pair) = element else {
            return Err(fail(
                ErrorCode::Location40396,
                format!(
                    "$arrayToObject requires a consistent input format. Elements mustall be arrays or all be objects. Array was detected, now found: {}",
                    type_name(&element)
                ),
            ));
        };
        if pair.len() != 2 {
            return Err(fail(
                ErrorCode::Location40397,
                format!(
                    "$arrayToObject requires an array of size 2 arrays,found array of size: {}",
                    pair.len()
                ),
            ));
        }
        let mut pair = pair.into_iter();
        let (Some(key), Some(value)) = (pair.next(), pair.next()) else {
            return Err(tideway_base::error::CommandError::internal("pair vanished"));
        };
        let Bson::String(key) = key else {
            return Err(fail(
                ErrorCode::Location40395,
                format!(
                    "$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}",
                    type_name(&key)
                ),
            ));
        };
        (key, value, ErrorCode::Location4940400)
    } else {
        let Bson::Document(mut document) = element else {
            return Err(fail(
                ErrorCode::Location40391,
                format!(
                    "$arrayToObject requires a consistent input format. Elements mustall be arrays or all be objects. Object was detected, now found: {}",
                    type_name(&element)
                ),
            ));
        };
        if document.len() != 2 {
            return Err(fail(
                ErrorCode::Location40392,
                format!(
                    "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}",
                    document.len()
                ),
            ));
        }
        let shown = value_string(&Bson::Document(document.clone()));
        let (Some(key), Some(value)) = (document.remove("k"), document.remove("v")) else {
            return Err(fail(
                ErrorCode::Location40393,
                format!(
                    "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys from: {shown}"
                ),
            ));
        };
        let Bson::String(key) = key else {
            return Err(fail(
                ErrorCode::Location40394,
                format!(
                    "$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}",
                    type_name(&key)
                ),
            ));
        };
        (key, value, ErrorCode::Location4940401)
    };
    if key.contains('\0') {
        return Err(fail(
            null_code,
            "Key field cannot contain an embedded null byte",
        ));
    }
    Ok((key, value))
}

/// `$arrayToObject`.
pub(super) fn evaluate_array_to_object(value: Value) -> CommandResult<Value> {
    if super::is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = value else {
        return Err(fail(
            ErrorCode::Location40386,
            format!(
                "$arrayToObject requires an array input, found: {}",
                value_type_name(&value)
            ),
        ));
    };
    let pairs = match elements.first() {
        None => return Ok(Some(Bson::Document(Document::new()))),
        Some(Bson::Array(_)) => true,
        Some(Bson::Document(_)) => false,
        Some(other) => {
            return Err(fail(
                ErrorCode::Location40398,
                format!(
                    "Unrecognised input type format for $arrayToObject: {}",
                    type_name(other)
                ),
            ))
        }
    };
    let mut output = Document::new();
    for element in elements {
        let (key, value) = key_value_pair(element, pairs)?;
        output.insert(key, value);
    }
    Ok(Some(Bson::Document(output)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::error;
    use crate::expr::fixtures::{assert_value, eval_ok};
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

    #[test]
    fn array_to_object_answers_array_to_object_js() {
        use super::super::test_support::{check_errors, check_values};
        use bson::bson;
        let collapsed = |expanded: Bson| bson!({"$arrayToObject": {"$const": expanded}});
        check_values(vec![
            (
                collapsed(bson!([["price", 24], ["item", "apple"]])),
                bson!({"price": 24, "item": "apple"}),
            ),
            (
                collapsed(bson!([{"k": "price", "v": 24}, {"k": "price", "v": 100}])),
                bson!({"price": 100}),
            ),
            (
                collapsed(bson!([["price", 24], ["price", 100]])),
                bson!({"price": 100}),
            ),
            (collapsed(Bson::Null), Bson::Null),
            (collapsed(Bson::Undefined), Bson::Null),
            (
                collapsed(bson!([{"k": "price", "v": null}])),
                bson!({"price": null}),
            ),
            (
                collapsed(bson!([{"k": "price", "v": Bson::Undefined}])),
                bson!({"price": Bson::Undefined}),
            ),
        ]);
        check_errors(vec![
            (
                collapsed(bson!([{"k": "price", "v": 24}, ["item", "apple"]])),
                40391,
            ),
            (
                collapsed(bson!([["item", "apple"], {"k": "price", "v": 24}])),
                40396,
            ),
            (collapsed(bson!("string")), 40386),
            (collapsed(bson!(0_i64)), 40386),
            (collapsed(bson!([0])), 40398),
            (collapsed(bson!([["missing_value"]])), 40397),
            (collapsed(bson!([[321, 12]])), 40395),
            (collapsed(bson!([["key", "value", "offset"]])), 40397),
            (collapsed(bson!({"y": []})), 40386),
            (collapsed(bson!([{"y": "x", "x": "y"}])), 40393),
            (collapsed(bson!([{"k": "missing"}])), 40392),
            (collapsed(bson!([{"k": 24, "v": "string"}])), 40394),
            (collapsed(bson!([{"k": null, "v": "nullKey"}])), 40394),
            (
                collapsed(bson!([{"y": "ignored", "k": "item", "v": "pear"}])),
                40392,
            ),
            (collapsed(bson!(f64::NAN)), 40386),
        ]);
    }

    #[test]
    fn array_to_object_and_back_answer_the_manuals_examples() {
        use super::super::test_support::{check_errors, check_values};
        use bson::bson;
        check_values(vec![
            (
                bson!({"$arrayToObject": [[{"k": "item", "v": "abc123"}, {"k": "qty", "v": 25}]]}),
                bson!({"item": "abc123", "qty": 25}),
            ),
            (
                bson!({"$arrayToObject": [[["item", "abc123"], ["qty", 25]]]}),
                bson!({"item": "abc123", "qty": 25}),
            ),
            (
                bson!({"$arrayToObject": {"$literal": [["price", 24], ["item", "apple"], ["price", 30]]}}),
                bson!({"price": 30, "item": "apple"}),
            ),
            (bson!({"$arrayToObject": [[]]}), bson!({})),
            (
                bson!({"$arrayToObject": {"$literal": [["$a.b", 1]]}}),
                bson!({"$a.b": 1}),
            ),
            (bson!({"$arrayToObject": null}), Bson::Null),
            (
                bson!({"$objectToArray": {"item": "foo", "qty": 25}}),
                bson!([{"k": "item", "v": "foo"}, {"k": "qty", "v": 25}]),
            ),
            (
                bson!({"$objectToArray": {"$literal": {"a": {"b": 1}}}}),
                bson!([{"k": "a", "v": {"b": 1}}]),
            ),
            (bson!({"$objectToArray": "$missing"}), Bson::Null),
        ]);
        check_errors(vec![
            (bson!({"$arrayToObject": 1}), 40386),
            (bson!({"$arrayToObject": [[1]]}), 40398),
            (
                bson!({"$arrayToObject": [[{"k": "a", "v": 1}, ["b", 2]]]}),
                40391,
            ),
            (bson!({"$arrayToObject": [[{"k": "a"}]]}), 40392),
            (bson!({"$arrayToObject": [[{"k": "a", "x": 1}]]}), 40393),
            (bson!({"$arrayToObject": [[{"k": 1, "v": 1}]]}), 40394),
            (bson!({"$arrayToObject": [[[1, 2]]]}), 40395),
            (
                bson!({"$arrayToObject": [[["a", 1], {"k": "b", "v": 2}]]}),
                40396,
            ),
            (bson!({"$arrayToObject": [[["a", 1, 2]]]}), 40397),
            (bson!({"$arrayToObject": [[["a\u{0}b", 1]]]}), 4940400),
            (
                bson!({"$arrayToObject": [[{"k": "a\u{0}b", "v": 1}]]}),
                4940401,
            ),
            (bson!({"$objectToArray": 1}), 40390),
        ]);
    }
}
