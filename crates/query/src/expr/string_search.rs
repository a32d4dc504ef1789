//! String search and slicing operators: `$indexOfBytes`/`$indexOfCP`, `$substrBytes` (and its
//! deprecated alias `$substr`), `$strLenBytes`, `$strcasecmp` and `$replaceOne`/`$replaceAll`, as
//! mongod evaluates them. The regex operators are in `regex`.
//!
//! Invariants:
//! - `Bytes` operators count UTF-8 bytes, `CP` operators count code points. `$substrBytes`
//!   refuses a range that cuts a UTF-8 sequence (28656/28657), so every string built here is
//!   valid UTF-8.
//! - Nothing here builds a value larger than [`MAX_COPIED_BYTES`] from `$replaceAll`.

use bson::Bson;

use super::string::coerce_to_string;
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, value_type_name, Expr,
    Scope, Value, Vars, MAX_COPIED_BYTES,
};
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// mongod's `Value::toString` of a possibly missing value, as error messages quote it.
pub(super) fn quoted(value: &Value) -> String {
    value
        .as_ref()
        .map_or_else(|| "MISSING".to_string(), value_string)
}

// ----- $indexOfBytes / $indexOfCP ------------------------------------------------------------

/// mongod's `uassertIfNotIntegralAndNonNegative`: an int32-representable integral number that
/// is not negative (40096, 40097; the first message lacks a space after the name, as mongod's).
/// `$indexOfArray` checks its bounds with it too.
pub(super) fn index_argument(name: &str, what: &str, value: &Value) -> CommandResult<usize> {
    let integral = value
        .as_ref()
        .and_then(Number::from_bson)
        .and_then(Number::to_exact_i64)
        .and_then(|v| i32::try_from(v).ok());
    let Some(index) = integral else {
        return Err(fail(
            ErrorCode::Location40096,
            format!(
                "{name}requires an integral {what}, found a value of type: {}, with value: {}",
                value_type_name(value),
                quoted(value)
            ),
        ));
    };
    usize::try_from(index).map_err(|_| {
        fail(
            ErrorCode::Location40097,
            format!(
                "{name} requires a nonnegative {what}, found: {}",
                quoted(value)
            ),
        )
    })
}

/// The string and token of `$indexOfBytes`/`$indexOfCP`; `None` when the string is nullish.
fn index_of_operands(
    name: &str,
    values: &[Value],
    codes: (ErrorCode, ErrorCode),
) -> CommandResult<Option<(String, String)>> {
    let (Some(text), Some(token)) = (values.first(), values.get(1)) else {
        return Err(CommandError::internal(format!(
            "{name} takes at least two arguments"
        )));
    };
    if is_nullish(text) {
        return Ok(None);
    }
    let Some(Bson::String(text)) = text else {
        return Err(fail(
            codes.0,
            format!(
                "{name} requires a string as the first argument, found: {}",
                value_type_name(text)
            ),
        ));
    };
    let Some(Bson::String(token)) = token else {
        return Err(fail(
            codes.1,
            format!(
                "{name} requires a string as the second argument, found: {}",
                value_type_name(token)
            ),
        ));
    };
    Ok(Some((text.clone(), token.clone())))
}

fn optional_index(name: &str, what: &str, value: Option<&Value>) -> CommandResult<Option<usize>> {
    value
        .map(|value| index_argument(name, what, value))
        .transpose()
}

pub(super) fn int32(value: usize) -> Bson {
    Bson::Int32(i32::try_from(value).unwrap_or(i32::MAX))
}

/// `$indexOfBytes`: the byte offset of the first `token` in `[start, end)`, or -1.
pub(super) fn evaluate_index_of_bytes(values: Vec<Value>) -> CommandResult<Value> {
    const NAME: &str = "$indexOfBytes";
    let Some((text, token)) = index_of_operands(
        NAME,
        &values,
        (ErrorCode::Location40091, ErrorCode::Location40092),
    )?
    else {
        return Ok(Some(Bson::Null));
    };
    let start = optional_index(NAME, "starting index", values.get(2))?.unwrap_or(0);
    let end = optional_index(NAME, "ending index", values.get(3))?
        .map_or(text.len(), |end| end.min(text.len()));
    if start > text.len() || end < start {
        return Ok(Some(Bson::Int32(-1)));
    }
    let haystack = &text.as_bytes()[start..end];
    let found = if token.is_empty() {
        Some(0)
    } else {
        haystack
            .windows(token.len())
            .position(|window| window == token.as_bytes())
    };
    Ok(Some(
        found.map_or(Bson::Int32(-1), |offset| int32(start + offset)),
    ))
}

/// `$indexOfCP`: the code point index of the first `token` starting in `[start, end)`, or -1.
pub(super) fn evaluate_index_of_cp(values: Vec<Value>) -> CommandResult<Value> {
    const NAME: &str = "$indexOfCP";
    let Some((text, token)) = index_of_operands(
        NAME,
        &values,
        (ErrorCode::Location40093, ErrorCode::Location40094),
    )?
    else {
        return Ok(Some(Bson::Null));
    };
    let start = optional_index(NAME, "starting index", values.get(2))?.unwrap_or(0);
    // mongod searches from byte 0 when `start` is not below the length (it then finds nothing,
    // but for "" in "").
    let starts: Vec<usize> = text.char_indices().map(|(offset, _)| offset).collect();
    let length = starts.len();
    let start_byte = starts.get(start).copied().unwrap_or(0);
    let end =
        optional_index(NAME, "ending index", values.get(3))?.map_or(length, |end| end.min(length));
    if end < start {
        return Ok(Some(Bson::Int32(-1)));
    }
    if start_byte == 0 && text.is_empty() && token.is_empty() {
        return Ok(Some(Bson::Int32(0)));
    }
    let mut byte = start_byte;
    for index in start..end {
        if text.as_bytes()[byte..].starts_with(token.as_bytes()) {
            return Ok(Some(int32(index)));
        }
        byte = starts.get(index + 1).copied().unwrap_or(text.len());
    }
    Ok(Some(Bson::Int32(-1)))
}

// ----- $substrBytes, $strLenBytes, $strcasecmp -----------------------------------------------

/// mongod's `coerceToLong` of a number: truncation toward zero, saturating.
fn coerce_to_long(number: Number) -> i64 {
    number.to_i64_truncated().unwrap_or_else(|| {
        if number.is_nan() {
            0
        } else if number.to_f64() > 0.0 {
            i64::MAX
        } else {
            i64::MIN
        }
    })
}

fn is_continuation_byte(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// `$substrBytes` (also `$substr`): `length` bytes from byte `start`; a negative length takes
/// the rest. Errors name `$substrBytes` for both spellings, as mongod's.
pub(super) fn evaluate_substr_bytes(values: Vec<Value>) -> CommandResult<Value> {
    const NAME: &str = "$substrBytes";
    let [text, start, length] = <[Value; 3]>::try_from(values)
        .map_err(|_| CommandError::internal("$substrBytes takes three arguments"))?;
    let text = coerce_to_string(&text)?;
    let Some(start) = start.as_ref().and_then(Number::from_bson) else {
        return Err(fail(
            ErrorCode::Location16034,
            format!(
                "{NAME}:  starting index must be a numeric type (is BSON type {})",
                value_type_name(&start)
            ),
        ));
    };
    let Some(length) = length.as_ref().and_then(Number::from_bson) else {
        return Err(fail(
            ErrorCode::Location16035,
            format!(
                "{NAME}:  length must be a numeric type (is BSON type {})",
                value_type_name(&length)
            ),
        ));
    };
    let start = coerce_to_long(start);
    let Ok(start) = usize::try_from(start) else {
        return Err(fail(
            ErrorCode::Location50752,
            format!("{NAME}:  starting index must be non-negative (got: {start})"),
        ));
    };
    let length = usize::try_from(coerce_to_long(length)).unwrap_or(text.len());
    let bytes = text.as_bytes();
    if start < bytes.len() && is_continuation_byte(bytes[start]) {
        return Err(fail(
            ErrorCode::Location28656,
            format!("{NAME}:  Invalid range, starting index is a UTF-8 continuation byte."),
        ));
    }
    let end = start.saturating_add(length);
    if end < bytes.len() && is_continuation_byte(bytes[end]) {
        return Err(fail(
            ErrorCode::Location28657,
            format!("{NAME}:  Invalid range, ending index is in the middle of a UTF-8 character."),
        ));
    }
    if start >= bytes.len() {
        return Ok(Some(Bson::String(String::new())));
    }
    let piece = text
        .get(start..end.min(bytes.len()))
        .ok_or_else(|| CommandError::internal("$substrBytes range off a character boundary"))?;
    Ok(Some(Bson::String(piece.to_string())))
}

/// `$strLenBytes`: the length in UTF-8 bytes.
pub(super) fn evaluate_str_len_bytes(value: Value) -> CommandResult<Value> {
    match value {
        Some(Bson::String(text)) => Ok(Some(int32(text.len()))),
        other => Err(fail(
            ErrorCode::Location34473,
            format!(
                "$strLenBytes requires a string argument, found: {}",
                value_type_name(&other)
            ),
        )),
    }
}

/// `$strcasecmp`: both sides coerced to strings, compared by bytes after ASCII upper-casing.
pub(super) fn evaluate_strcasecmp(a: Value, b: Value) -> CommandResult<Value> {
    let a = coerce_to_string(&a)?.to_ascii_uppercase();
    let b = coerce_to_string(&b)?.to_ascii_uppercase();
    Ok(Some(Bson::Int32(match a.cmp(&b) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    })))
}

// ----- $replaceOne / $replaceAll -------------------------------------------------------------

fn replace_name(all: bool) -> &'static str {
    if all {
        "$replaceAll"
    } else {
        "$replaceOne"
    }
}

pub(super) fn parse_replace(all: bool, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let name = replace_name(all);
    let arguments = named_arguments(
        operand,
        &["input", "find", "replacement"],
        || {
            fail(
                ErrorCode::Location51751,
                format!(
                    "{name} requires an object as an argument, found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::Location51750,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let required = |field: &str, code: ErrorCode| {
        find_argument(&arguments, field)
            .ok_or_else(|| fail(code, format!("{name} requires '{field}' to be specified")))
    };
    let input = required("input", ErrorCode::Location51749)?;
    let find = required("find", ErrorCode::Location51748)?;
    let replacement = required("replacement", ErrorCode::Location51747)?;
    Ok(Expr::Replace {
        all,
        input: Box::new(parse(input, scope)?),
        find: Box::new(parse(find, scope)?),
        replacement: Box::new(parse(replacement, scope)?),
    })
}

fn replace_operand(
    name: &str,
    what: &str,
    value: Value,
    code: ErrorCode,
) -> CommandResult<Option<String>> {
    match value {
        Some(Bson::String(text)) => Ok(Some(text)),
        other if is_nullish(&other) => Ok(None),
        other => Err(fail(
            code,
            format!(
                "{name} requires that '{what}' be a string, found: {}",
                quoted(&other)
            ),
        )),
    }
}

fn too_large(name: &str) -> CommandError {
    fail(
        ErrorCode::BSONObjectTooLarge,
        format!("{name} would build a string of more than {MAX_COPIED_BYTES} bytes"),
    )
}

/// `$replaceOne` / `$replaceAll`: null when any argument is nullish. An empty `find` matches
/// before every character (mongod: every byte) and at the end.
pub(super) fn evaluate_replace(
    all: bool,
    input: &Expr,
    find: &Expr,
    replacement: &Expr,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let name = replace_name(all);
    let input = evaluate(input, vars)?;
    let find = evaluate(find, vars)?;
    let replacement = evaluate(replacement, vars)?;
    let input = replace_operand(name, "input", input, ErrorCode::Location51746)?;
    let find = replace_operand(name, "find", find, ErrorCode::Location51745)?;
    let replacement = replace_operand(name, "replacement", replacement, ErrorCode::Location51744)?;
    let (Some(input), Some(find), Some(replacement)) = (input, find, replacement) else {
        return Ok(Some(Bson::Null));
    };
    if !all {
        return Ok(Some(Bson::String(input.replacen(&find, &replacement, 1))));
    }
    let matches = if find.is_empty() {
        input.chars().count() + 1
    } else {
        input.matches(find.as_str()).count()
    };
    let output_bytes = matches
        .checked_mul(replacement.len())
        .and_then(|added| added.checked_add(input.len()))
        .ok_or_else(|| too_large(name))?;
    if output_bytes > MAX_COPIED_BYTES {
        return Err(too_large(name));
    }
    if find.is_empty() {
        let mut output = String::with_capacity(output_bytes);
        for c in input.chars() {
            output.push_str(&replacement);
            output.push(c);
        }
        output.push_str(&replacement);
        return Ok(Some(Bson::String(output)));
    }
    Ok(Some(Bson::String(input.replace(&find, &replacement))))
}

#[cfg(test)]
mod tests {
    //! Expected values come from MongoDB's reference page of each operator (its behavior table
    //! and examples) and, for errors, from mongod's `expression.cpp` codes.
    use super::super::test_support::{check_errors, check_over, check_values, error};
    use bson::{bson, doc, Bson};

    #[test]
    fn index_of_bytes_follows_the_reference_table() {
        check_values(vec![
            (bson!({"$indexOfBytes": ["cafeteria", "e"]}), bson!(3)),
            (bson!({"$indexOfBytes": ["cafétéria", "é"]}), bson!(3)),
            (bson!({"$indexOfBytes": ["cafétéria", "e"]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["cafétéria", "t"]}), bson!(5)),
            (bson!({"$indexOfBytes": ["foo.bar.fi", ".", 5]}), bson!(7)),
            (bson!({"$indexOfBytes": ["vanilla", "ll", 0, 2]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["vanilla", "ll", 12]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["vanilla", "ll", 5, 2]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["vanilla", "nilla", 3]}), bson!(-1)),
            (bson!({"$indexOfBytes": [null, "foo"]}), Bson::Null),
            (bson!({"$indexOfBytes": ["abc", "", 3]}), bson!(3)),
            (bson!({"$indexOfBytes": ["abc", "c", 1.0, 10]}), bson!(2)),
        ]);
        check_over(
            bson!({"$indexOfBytes": ["$item", "foo"]}),
            vec![
                (doc! {"item": "foo"}, bson!(0)),
                (doc! {"item": "fóofoo"}, bson!(4)),
                (doc! {"item": "the foo bar"}, bson!(4)),
                (doc! {"item": "hello world fóofoo"}, bson!(16)),
                (doc! {"item": null}, Bson::Null),
                (doc! {"amount": 3}, Bson::Null),
            ],
        );
    }

    #[test]
    fn index_of_cp_follows_the_reference_table() {
        check_values(vec![
            (bson!({"$indexOfCP": ["cafeteria", "e"]}), bson!(3)),
            (bson!({"$indexOfCP": ["cafétéria", "é"]}), bson!(3)),
            (bson!({"$indexOfCP": ["cafétéria", "e"]}), bson!(-1)),
            (bson!({"$indexOfCP": ["cafétéria", "t"]}), bson!(4)),
            (bson!({"$indexOfCP": ["foo.bar.fi", ".", 5]}), bson!(7)),
            (bson!({"$indexOfCP": ["vanilla", "ll", 0, 2]}), bson!(-1)),
            (bson!({"$indexOfCP": ["vanilla", "ll", 12]}), bson!(-1)),
            (bson!({"$indexOfCP": ["vanilla", "ll", 5, 2]}), bson!(-1)),
            (bson!({"$indexOfCP": ["vanilla", "nilla", 3]}), bson!(-1)),
            (bson!({"$indexOfCP": [null, "foo"]}), Bson::Null),
            // mongod's loop: "" is found in "" but not at the end of a non-empty string.
            (bson!({"$indexOfCP": ["", ""]}), bson!(0)),
            (bson!({"$indexOfCP": ["abc", "", 3]}), bson!(-1)),
        ]);
        check_over(
            bson!({"$indexOfCP": ["$item", "foo"]}),
            vec![
                (doc! {"item": "foo"}, bson!(0)),
                (doc! {"item": "fóofoo"}, bson!(3)),
                (doc! {"item": "the foo bar"}, bson!(4)),
                (doc! {"item": "hello world fóofoo"}, bson!(15)),
                (doc! {"item": null}, Bson::Null),
                (doc! {"amount": 3}, Bson::Null),
            ],
        );
    }

    /// mongod's `jstests/aggregation/expressions/indexof_bytes.js` and `indexof_codepoints.js`
    /// (SERVER-56819's empty-string cases included).
    #[test]
    fn index_of_follows_mongod_jstests() {
        check_values(vec![
            (bson!({"$indexOfBytes": ["abc", "b"]}), bson!(1)),
            (bson!({"$indexOfBytes": ["abcba", "b"]}), bson!(1)),
            (bson!({"$indexOfBytes": ["abc", "d"]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["abcba", "b", 2]}), bson!(3)),
            (bson!({"$indexOfBytes": ["abcde", "d", 0, 2]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["abc", "b", 1]}), bson!(1)),
            (bson!({"$indexOfBytes": ["abc", "b", 0, 10]}), bson!(1)),
            (bson!({"$indexOfBytes": ["abcbabc", "b", 2, 4]}), bson!(3)),
            (bson!({"$indexOfBytes": ["abc", "b", 3]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["abc", "b", 3, 1]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["abc", "b", 3, 5]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["", " "]}), bson!(-1)),
            (bson!({"$indexOfBytes": [" ", ""]}), bson!(0)),
            (bson!({"$indexOfBytes": ["", ""]}), bson!(0)),
            (bson!({"$indexOfBytes": ["abc", "", 3]}), bson!(3)),
            (bson!({"$indexOfBytes": ["abc", "", 1]}), bson!(1)),
            (bson!({"$indexOfBytes": ["abcde", "de"]}), bson!(3)),
            (bson!({"$indexOfBytes": ["abcde", "def"]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["a∫∫b", "b"]}), bson!(7)),
            (bson!({"$indexOfBytes": ["a∫∫b", "b", 6]}), bson!(7)),
            (bson!({"$indexOfBytes": ["abc∫ba", "∫"]}), bson!(3)),
            (bson!({"$indexOfBytes": ["∫∫∫", "a"]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["ab∫c", "c", 0, 3]}), bson!(-1)),
            (bson!({"$indexOfBytes": ["abc∫b∫", "b∫"]}), bson!(6)),
            (bson!({"$indexOfBytes": ["abc\u{0}d", "d"]}), bson!(4)),
            (bson!({"$indexOfBytes": ["abc\u{0}", "\u{0}"]}), bson!(3)),
            (
                bson!({"$indexOfBytes": ["abc\u{0}d\u{0}", "d", 5, 6]}),
                bson!(-1),
            ),
            (bson!({"$indexOfBytes": [null, "b"]}), Bson::Null),
        ]);
        check_values(vec![
            (bson!({"$indexOfCP": ["", "", 3]}), bson!(-1)),
            (bson!({"$indexOfCP": ["", "", 3, 1]}), bson!(-1)),
            (bson!({"$indexOfCP": ["∫aƒ", "ƒ"]}), bson!(2)),
            (bson!({"$indexOfCP": ["a∫c", "d"]}), bson!(-1)),
            (bson!({"$indexOfCP": ["∫b∫ba", "b", 2]}), bson!(3)),
            (bson!({"$indexOfCP": ["ab∫de", "d", 0, 3]}), bson!(-1)),
            (bson!({"$indexOfCP": ["ab∫de", "d", 0, 4]}), bson!(3)),
            (bson!({"$indexOfCP": ["øøc", "ø", 1]}), bson!(1)),
            (bson!({"$indexOfCP": ["øƒc", "ƒ", 0, 10]}), bson!(1)),
            (bson!({"$indexOfCP": ["abcbabc", "b", 2, 4]}), bson!(3)),
            (bson!({"$indexOfCP": ["abc", "b", 3]}), bson!(-1)),
            (bson!({"$indexOfCP": ["a√cb", "b", 3, 1]}), bson!(-1)),
            (bson!({"$indexOfCP": ["a∫b", "b", 3, 5]}), bson!(-1)),
            (bson!({"$indexOfCP": ["", "∫"]}), bson!(-1)),
            (bson!({"$indexOfCP": [" ", ""]}), bson!(0)),
            (bson!({"$indexOfCP": ["", ""]}), bson!(0)),
            (bson!({"$indexOfCP": ["abc", "", 1]}), bson!(1)),
            (bson!({"$indexOfCP": ["abcƒe", "ƒe"]}), bson!(3)),
            (bson!({"$indexOfCP": ["∫aeøø", "øøø"]}), bson!(-1)),
            (bson!({"$indexOfCP": ["ab∫\u{0}d", "d"]}), bson!(4)),
            (bson!({"$indexOfCP": ["øbc\u{0}", "\u{0}"]}), bson!(3)),
            (
                bson!({"$indexOfCP": ["πbƒ\u{0}d\u{0}", "d", 5, 6]}),
                bson!(-1),
            ),
            (bson!({"$indexOfCP": [null, "√"]}), Bson::Null),
        ]);
        check_errors(vec![
            (bson!({"$indexOfBytes": [3, "s"]}), 40091),
            (bson!({"$indexOfBytes": ["s", 3]}), 40092),
            (bson!({"$indexOfBytes": ["abc", "b", "bad"]}), 40096),
            (bson!({"$indexOfBytes": ["abc", "b", 0, "bad"]}), 40096),
            (bson!({"$indexOfBytes": ["abc", "b", 1, -1]}), 40097),
            (bson!({"$indexOfCP": [3, "s"]}), 40093),
            (bson!({"$indexOfCP": ["s", 3]}), 40094),
            (bson!({"$indexOfCP": ["abc", "b", 0, "bad"]}), 40096),
            (bson!({"$indexOfCP": ["abc", "b", 1, -1]}), 40097),
        ]);
    }

    #[test]
    fn index_of_errors_carry_mongod_codes() {
        check_errors(vec![
            (bson!({"$indexOfBytes": ["vanilla", "ll", -1]}), 40097),
            (bson!({"$indexOfCP": ["vanilla", "ll", -1]}), 40097),
            (bson!({"$indexOfBytes": ["vanilla", "ll", 0, -1]}), 40097),
            (bson!({"$indexOfBytes": ["vanilla", "ll", 1.5]}), 40096),
            (bson!({"$indexOfCP": ["vanilla", "ll", "1"]}), 40096),
            (bson!({"$indexOfCP": ["vanilla", "ll", 0, null]}), 40096),
            (bson!({"$indexOfBytes": [1, "ll"]}), 40091),
            (bson!({"$indexOfBytes": ["vanilla", null]}), 40092),
            (bson!({"$indexOfCP": [1, "ll"]}), 40093),
            (bson!({"$indexOfCP": ["vanilla", 1]}), 40094),
            (bson!({"$indexOfCP": ["vanilla"]}), 28667),
            (bson!({"$indexOfBytes": ["a", "b", 0, 1, 2]}), 28667),
        ]);
        assert_eq!(
            error(bson!({"$indexOfBytes": ["vanilla", "ll", 1.5]})).errmsg,
            "$indexOfBytesrequires an integral starting index, found a value of type: double, with value: 1.5"
        );
    }

    #[test]
    fn substr_bytes_follows_the_reference_examples() {
        check_over(
            bson!({"$substrBytes": ["$name", 0, 3]}),
            vec![
                (doc! {"name": "apple"}, bson!("app")),
                (doc! {"name": "banana"}, bson!("ban")),
                (doc! {"name": "éclair"}, bson!("éc")),
                (doc! {"name": "hamburger"}, bson!("ham")),
                (doc! {"name": "jalapeño"}, bson!("jal")),
                (doc! {"name": "pizza"}, bson!("piz")),
                (doc! {"name": "tacos"}, bson!("tac")),
                (doc! {"name": "寿司sushi"}, bson!("寿")),
            ],
        );
        for (quarter, year, rest) in [
            ("13Q1", "13", "Q1"),
            ("13Q4", "13", "Q4"),
            ("14Q2", "14", "Q2"),
        ] {
            for name in ["$substrBytes", "$substr"] {
                check_values(vec![
                    (bson!({name: [quarter, 0, 2]}), bson!(year)),
                    (bson!({name: [quarter, 2, -1]}), bson!(rest)),
                ]);
            }
        }
        check_values(vec![
            (bson!({"$substrBytes": ["abc", 5, 1]}), bson!("")),
            (bson!({"$substrBytes": [null, 0, 1]}), bson!("")),
            (bson!({"$substrBytes": [12345, 1, 2]}), bson!("23")),
            (bson!({"$substrBytes": ["abc", 1.9, 10]}), bson!("bc")),
        ]);
    }

    #[test]
    fn substr_bytes_refuses_cutting_a_utf8_sequence() {
        check_errors(vec![
            (bson!({"$substrBytes": ["éclair", 1, 2]}), 28656),
            (bson!({"$substrBytes": ["éclair", 0, 1]}), 28657),
            (bson!({"$substr": ["寿司sushi", 0, 4]}), 28657),
            (bson!({"$substrBytes": ["abc", "0", 1]}), 16034),
            (bson!({"$substrBytes": ["abc", 0, null]}), 16035),
            (bson!({"$substrBytes": ["abc", -1, 1]}), 50752),
            (bson!({"$substrBytes": [{"a": 1}, 0, 1]}), 16007),
            (bson!({"$substrBytes": ["abc", 0]}), 16020),
        ]);
        assert_eq!(
            error(bson!({"$substr": ["éclair", 0, 1]})).errmsg,
            "$substrBytes:  Invalid range, ending index is in the middle of a UTF-8 character."
        );
    }

    #[test]
    fn str_len_bytes_and_strcasecmp_follow_the_reference_examples() {
        check_over(
            bson!({"$strLenBytes": "$name"}),
            vec![
                (doc! {"name": "apple"}, bson!(5)),
                (doc! {"name": "banana"}, bson!(6)),
                (doc! {"name": "éclair"}, bson!(7)),
                (doc! {"name": "hamburger"}, bson!(9)),
                (doc! {"name": "jalapeño"}, bson!(9)),
                (doc! {"name": "pizza"}, bson!(5)),
                (doc! {"name": "tacos"}, bson!(5)),
                (doc! {"name": "寿司"}, bson!(6)),
            ],
        );
        check_errors(vec![
            (bson!({"$strLenBytes": 1}), 34473),
            (bson!({"$strLenBytes": null}), 34473),
            (bson!({"$strLenBytes": "$missing"}), 34473),
        ]);
        check_over(
            bson!({"$strcasecmp": ["$quarter", "13q4"]}),
            vec![
                (doc! {"quarter": "13Q1"}, bson!(-1)),
                (doc! {"quarter": "13Q4"}, bson!(0)),
                (doc! {"quarter": "14Q2"}, bson!(1)),
            ],
        );
        check_values(vec![
            (bson!({"$strcasecmp": [null, ""]}), bson!(0)),
            (bson!({"$strcasecmp": ["a", null]}), bson!(1)),
            (bson!({"$strcasecmp": [10, "10"]}), bson!(0)),
        ]);
    }

    #[test]
    fn replace_one_and_all_follow_the_reference_examples() {
        let items = [
            ("blue paint", "red paint", "red paint"),
            (
                "blue and green paint",
                "blue and green paint",
                "blue and green paint",
            ),
            (
                "blue paint with blue paintbrush",
                "red paint with blue paintbrush",
                "red paint with red paintbrush",
            ),
            (
                "blue paint with green paintbrush",
                "red paint with green paintbrush",
                "red paint with green paintbrush",
            ),
        ];
        for (item, one, all) in items {
            for (name, expected) in [("$replaceOne", one), ("$replaceAll", all)] {
                check_over(
                    bson!({name: {"input": "$item", "find": "blue paint", "replacement": "red paint"}}),
                    vec![(doc! {"item": item}, bson!(expected))],
                );
            }
        }
        check_values(vec![
            (
                bson!({"$replaceOne": {"input": null, "find": "a", "replacement": "b"}}),
                Bson::Null,
            ),
            (
                bson!({"$replaceAll": {"input": "a", "find": null, "replacement": "b"}}),
                Bson::Null,
            ),
            (
                bson!({"$replaceAll": {"input": "a", "find": "a", "replacement": "$missing"}}),
                Bson::Null,
            ),
            (
                bson!({"$replaceOne": {"input": "abc", "find": "", "replacement": "-"}}),
                bson!("-abc"),
            ),
            (
                bson!({"$replaceAll": {"input": "abc", "find": "", "replacement": "-"}}),
                bson!("-a-b-c-"),
            ),
            (
                bson!({"$replaceAll": {"input": "aaa", "find": "aa", "replacement": "b"}}),
                bson!("ba"),
            ),
            // Exact code points: no collation, no normalization.
            (
                bson!({"$replaceAll": {"input": "café cafe", "find": "cafe", "replacement": "x"}}),
                bson!("café x"),
            ),
        ]);
    }

    #[test]
    fn replace_errors_carry_mongod_codes() {
        check_errors(vec![
            (bson!({"$replaceOne": ["a", "b", "c"]}), 51751),
            (
                bson!({"$replaceAll": {"input": "a", "find": "a", "replacement": "b", "x": 1}}),
                51750,
            ),
            (
                bson!({"$replaceAll": {"find": "a", "replacement": "b"}}),
                51749,
            ),
            (
                bson!({"$replaceOne": {"input": "a", "replacement": "b"}}),
                51748,
            ),
            (bson!({"$replaceOne": {"input": "a", "find": "a"}}), 51747),
            (
                bson!({"$replaceOne": {"input": 1, "find": "a", "replacement": "b"}}),
                51746,
            ),
            (
                bson!({"$replaceAll": {"input": "a", "find": 1, "replacement": "b"}}),
                51745,
            ),
            (
                bson!({"$replaceAll": {"input": null, "find": "a", "replacement": 1}}),
                51744,
            ),
        ]);
        assert_eq!(
            error(bson!({"$replaceOne": {"input": 1, "find": "a", "replacement": "b"}})).errmsg,
            "$replaceOne requires that 'input' be a string, found: 1"
        );
    }
}
