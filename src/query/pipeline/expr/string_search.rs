//! String search and slicing operators: `$indexOfBytes`/`$indexOfCP`, `$substrBytes` (and its
//! deprecated alias `$substr`), `$strLenBytes`, `$strcasecmp`, `$replaceOne`/`$replaceAll` and
//! the regex operators `$regexMatch`/`$regexFind`/`$regexFindAll`, as mongod evaluates them.
//!
//! Invariants:
//! - `Bytes` operators count UTF-8 bytes, `CP` operators and a regex match's `idx` count code
//!   points. `$substrBytes` refuses a range that cuts a UTF-8 sequence (28656/28657), so every
//!   string built here is valid UTF-8.
//! - A regex whose `regex` and `options` are constants is compiled once, at parse time (its
//!   errors are parse errors then, as in mongod); otherwise it is compiled per evaluation.
//! - Regexes are the `regex` crate's, with mongod's flags (`i m s x`, `u` accepted and implied),
//!   the pattern translated to keep PCRE's meaning (`translate_pattern`: ASCII `\w \d \s \b`
//!   unless `(*UCP)`, literal `[` in classes). PCRE features that crate lacks (look-around,
//!   backreferences, possessive quantifiers, `\Z`, recursion, other `(*VERB)`s...) fail to
//!   compile and are refused with mongod's 51111, naming the feature. Known difference kept:
//!   `$` without `m` matches only at the very end (PCRE also before a final newline).
//! - Nothing here builds a value larger than [`MAX_COPIED_BYTES`] from `$replaceAll`, or more
//!   than mongod's 64MB of `$regexFindAll` matches (51151).

use bson::{doc, Bson};
use regex::{Regex, RegexBuilder};

use super::string::coerce_to_string;
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, parse_optional, value_bytes,
    value_type_name, Expr, Scope, Value, Vars, MAX_COPIED_BYTES,
};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::display::{type_name, value_string};
use crate::query::numeric::Number;

/// mongod's `BufferMaxSize`: the most `$regexFindAll` may return.
const MAX_REGEX_FIND_ALL_BYTES: usize = 64 * 1024 * 1024;

/// mongod's `Value::toString` of a possibly missing value, as error messages quote it.
fn quoted(value: &Value) -> String {
    value
        .as_ref()
        .map_or_else(|| "MISSING".to_string(), value_string)
}

// ----- $indexOfBytes / $indexOfCP ------------------------------------------------------------

/// mongod's `uassertIfNotIntegralAndNonNegative`: an int32-representable integral number that
/// is not negative (40096, 40097; the first message lacks a space after the name, as mongod's).
fn index_argument(name: &str, what: &str, value: &Value) -> CommandResult<usize> {
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

fn int32(value: usize) -> Bson {
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

// ----- $regexMatch / $regexFind / $regexFindAll ----------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegexMode {
    Match,
    Find,
    FindAll,
}

impl RegexMode {
    fn name(self) -> &'static str {
        match self {
            RegexMode::Match => "$regexMatch",
            RegexMode::Find => "$regexFind",
            RegexMode::FindAll => "$regexFindAll",
        }
    }
}

/// The `regex` and `options` of a regex operator.
#[derive(Clone, Debug)]
pub(crate) enum RegexSource {
    /// Both were constants: compiled at parse time (`None`: a nullish pattern).
    Constant(Option<Regex>),
    Dynamic {
        regex: Box<Expr>,
        options: Option<Box<Expr>>,
    },
}

pub(super) fn parse_regex(
    mode: RegexMode,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    let name = mode.name();
    let arguments = named_arguments(
        operand,
        &["input", "regex", "options"],
        || {
            fail(
                ErrorCode::Location51103,
                format!(
                    "{name} expects an object of named arguments but found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::Location31024,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location31022,
            format!("{name} requires 'input' parameter"),
        )
    })?;
    let regex = find_argument(&arguments, "regex").ok_or_else(|| {
        fail(
            ErrorCode::Location31023,
            format!("{name} requires 'regex' parameter"),
        )
    })?;
    let input = Box::new(parse(input, scope)?);
    let regex = Box::new(parse(regex, scope)?);
    let options = parse_optional(find_argument(&arguments, "options"), scope)?;
    let source = match (regex.as_ref(), options.as_deref()) {
        (Expr::Literal(pattern), None) => {
            RegexSource::Constant(compile_regex(name, &Some(pattern.clone()), &None)?)
        }
        (Expr::Literal(pattern), Some(Expr::Literal(flags))) => RegexSource::Constant(
            compile_regex(name, &Some(pattern.clone()), &Some(flags.clone()))?,
        ),
        _ => RegexSource::Dynamic { regex, options },
    };
    Ok(Expr::Regex {
        mode,
        input,
        source,
    })
}

/// Translates a PCRE pattern (UTF mode, as mongod compiles it) for the `regex` crate: drops the
/// leading `(*UTF8)`/`(*UTF)`/`(*UCP)` verbs; without `(*UCP)` makes `\w \d \s \b` (and their
/// negations) ASCII, as PCRE's are, and with it makes the POSIX classes Unicode, as PCRE's are;
/// a `[` inside a class is a literal, as in PCRE (the crate would nest a class). Everything else
/// is passed through; what the crate lacks then fails to compile.
fn translate_pattern(mut pattern: &str, extended: bool) -> String {
    let mut unicode_classes = false;
    while let Some((rest, verb)) = ["(*UTF8)", "(*UTF)", "(*UCP)"]
        .iter()
        .find_map(|verb| pattern.strip_prefix(verb).map(|rest| (rest, *verb)))
    {
        unicode_classes |= verb == "(*UCP)";
        pattern = rest;
    }
    let mut output = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    // Inside a class: whether its first character (where `]` is literal) is still to come.
    let mut class: Option<bool> = None;
    while let Some(c) = chars.next() {
        match (c, class) {
            ('\\', _) => {
                let Some(escaped) = chars.next() else {
                    output.push('\\');
                    break;
                };
                let inside = class.is_some();
                class = class.map(|_| false);
                let replacement = if unicode_classes {
                    None
                } else {
                    match (escaped, inside) {
                        ('w', false) => Some("[[:word:]]"),
                        ('w', true) => Some("[:word:]"),
                        ('W', _) => Some("[^[:word:]]"),
                        ('d', false) => Some("[0-9]"),
                        ('d', true) => Some("0-9"),
                        ('D', _) => Some("[^0-9]"),
                        ('s', false) => Some("[\\t\\n\\x0B\\x0C\\r ]"),
                        ('s', true) => Some("\\t\\n\\x0B\\x0C\\r "),
                        ('S', _) => Some("[^\\t\\n\\x0B\\x0C\\r ]"),
                        ('b', false) => Some("(?-u:\\b)"),
                        ('B', false) => Some("(?-u:\\B)"),
                        _ => None,
                    }
                };
                match replacement {
                    Some(replacement) => output.push_str(replacement),
                    None => {
                        output.push('\\');
                        output.push(escaped);
                    }
                }
            }
            ('[', None) => {
                output.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    output.push('^');
                }
                class = Some(true);
            }
            ('[', Some(_)) if chars.peek() == Some(&':') => {
                // A POSIX class `[:name:]`, copied whole (made Unicode under `(*UCP)`).
                let mut name = String::new();
                let mut closed = false;
                chars.next();
                while let Some(next) = chars.next() {
                    if next == ':' && chars.peek() == Some(&']') {
                        chars.next();
                        closed = true;
                        break;
                    }
                    name.push(next);
                }
                let unicode = match name.as_str() {
                    "alpha" => Some("\\p{L}"),
                    "digit" => Some("\\p{Nd}"),
                    "alnum" => Some("\\p{L}\\p{Nd}"),
                    "word" => Some("\\w"),
                    "space" => Some("\\s"),
                    "upper" => Some("\\p{Lu}"),
                    "lower" => Some("\\p{Ll}"),
                    _ => None,
                };
                match unicode.filter(|_| unicode_classes && closed) {
                    Some(unicode) => output.push_str(unicode),
                    None => {
                        output.push_str("[:");
                        output.push_str(&name);
                        if closed {
                            output.push_str(":]");
                        }
                    }
                }
                class = Some(false);
            }
            ('[' | '&' | '~', Some(_)) => {
                // Literal in PCRE; nesting or set operations in the crate.
                output.push('\\');
                output.push(c);
                class = Some(false);
            }
            (']', Some(false)) => {
                output.push(']');
                class = None;
            }
            ('#', None) if extended => {
                // An extended-mode comment runs to the end of the line.
                output.push('#');
                for next in chars.by_ref() {
                    output.push(next);
                    if next == '\n' {
                        break;
                    }
                }
            }
            (other, _) => {
                output.push(other);
                class = class.map(|_| false);
            }
        }
    }
    output
}

/// mongod's `extractRegexAndOptions` then `compile`: `None` when the pattern is nullish.
fn compile_regex(name: &str, pattern: &Value, options: &Value) -> CommandResult<Option<Regex>> {
    if !is_nullish(pattern)
        && !matches!(
            pattern,
            Some(Bson::String(_)) | Some(Bson::RegularExpression(_))
        )
    {
        return Err(fail(
            ErrorCode::Location51105,
            format!("{name} needs 'regex' to be of type string or regex"),
        ));
    }
    if !is_nullish(options) && !matches!(options, Some(Bson::String(_))) {
        return Err(fail(
            ErrorCode::Location51106,
            format!("{name} needs 'options' to be of type string"),
        ));
    }
    let (pattern, mut flags) = match pattern {
        Some(Bson::RegularExpression(regex)) => {
            if !is_nullish(options) && !regex.options.is_empty() {
                return Err(fail(
                    ErrorCode::Location51107,
                    format!(
                        "{name}: found regex option(s) specified in both 'regex' and 'option' fields"
                    ),
                ));
            }
            (Some(regex.pattern.as_str()), regex.options.as_str())
        }
        Some(Bson::String(pattern)) => (Some(pattern.as_str()), ""),
        _ => (None, ""),
    };
    if let Some(Bson::String(options)) = options {
        flags = options;
    }
    if pattern.is_some_and(|pattern| pattern.contains('\0')) {
        return Err(fail(
            ErrorCode::Location51109,
            format!("{name}: regular expression cannot contain an embedded null byte"),
        ));
    }
    if flags.contains('\0') {
        return Err(fail(
            ErrorCode::Location51110,
            format!("{name}: regular expression options cannot contain an embedded null byte"),
        ));
    }
    let Some(pattern) = pattern else {
        return Ok(None);
    };
    let mut builder = RegexBuilder::new(&translate_pattern(pattern, flags.contains('x')));
    for flag in flags.chars() {
        match flag {
            'i' => {
                builder.case_insensitive(true);
            }
            'm' => {
                builder.multi_line(true);
            }
            's' => {
                builder.dot_matches_new_line(true);
            }
            'x' => {
                builder.ignore_whitespace(true);
            }
            // PCRE's UTF-8 mode: always on here.
            'u' => {}
            other => {
                return Err(fail(
                    ErrorCode::Location51108,
                    format!("{name} invalid flag in regex options: {other}"),
                ))
            }
        }
    }
    builder.build().map(Some).map_err(|error| {
        // The crate's syntax errors draw the pattern over several lines; the last one says why.
        let text = error.to_string();
        let reason = text.lines().last().unwrap_or_default();
        let reason = reason.strip_prefix("error: ").unwrap_or(reason);
        fail(
            ErrorCode::Location51111,
            format!("Invalid Regex in {name}: {reason} (this server's regular expressions lack PCRE's look-around, backreferences, possessive quantifiers and recursion)"),
        )
    })
}

/// Where the next search starts: a byte offset on a character boundary and its code point index.
#[derive(Default)]
struct Cursor {
    byte: usize,
    code_point: usize,
}

/// mongod's `nextMatch`: the first match at or after the cursor as `{match, idx, captures}`
/// (unmatched groups null), moving the cursor to the match's start; with the match's length.
fn next_match(regex: &Regex, text: &str, cursor: &mut Cursor) -> Option<(bson::Document, usize)> {
    let captures = regex.captures_at(text, cursor.byte)?;
    let whole = captures.get(0)?;
    cursor.code_point += text.get(cursor.byte..whole.start())?.chars().count();
    cursor.byte = whole.start();
    let groups: Vec<Bson> = captures
        .iter()
        .skip(1)
        .map(|group| group.map_or(Bson::Null, |group| Bson::String(group.as_str().to_string())))
        .collect();
    let found = doc! {
        "match": whole.as_str(),
        "idx": int32(cursor.code_point),
        "captures": groups,
    };
    Some((found, whole.len()))
}

/// mongod's `$regexFindAll` loop: non-overlapping matches; after an empty match the search
/// moves on one character.
fn find_all(name: &str, regex: &Regex, text: &str) -> CommandResult<Vec<Bson>> {
    let mut found = Vec::new();
    let mut cursor = Cursor::default();
    let mut total_bytes = 0usize;
    loop {
        let Some((one, length)) = next_match(regex, text, &mut cursor) else {
            break;
        };
        let one = Bson::Document(one);
        total_bytes = total_bytes.saturating_add(value_bytes(&one));
        if total_bytes > MAX_REGEX_FIND_ALL_BYTES {
            return Err(fail(
                ErrorCode::Location51151,
                format!("{name}: the size of buffer to store output exceeded the 64MB limit"),
            ));
        }
        found.push(one);
        if length == 0 {
            let Some(next) = text.get(cursor.byte..).and_then(|rest| rest.chars().next()) else {
                break;
            };
            cursor.byte += next.len_utf8();
            cursor.code_point += 1;
        } else {
            let matched = text
                .get(cursor.byte..cursor.byte + length)
                .unwrap_or_default();
            cursor.code_point += matched.chars().count();
            cursor.byte += length;
        }
        if cursor.byte >= text.len() {
            break;
        }
    }
    Ok(found)
}

pub(super) fn evaluate_regex(
    mode: RegexMode,
    input: &Expr,
    source: &RegexSource,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let name = mode.name();
    let input = evaluate(input, vars)?;
    let compiled;
    let regex = match source {
        RegexSource::Constant(regex) => regex.as_ref(),
        RegexSource::Dynamic { regex, options } => {
            let pattern = evaluate(regex, vars)?;
            let options = match options {
                Some(options) => evaluate(options, vars)?,
                None => None,
            };
            compiled = compile_regex(name, &pattern, &options)?;
            compiled.as_ref()
        }
    };
    if !is_nullish(&input) && !matches!(input, Some(Bson::String(_))) {
        return Err(fail(
            ErrorCode::Location51104,
            format!("{name} needs 'input' to be of type string"),
        ));
    }
    let (Some(Bson::String(text)), Some(regex)) = (&input, regex) else {
        return Ok(Some(match mode {
            RegexMode::Match => Bson::Boolean(false),
            RegexMode::Find => Bson::Null,
            RegexMode::FindAll => Bson::Array(Vec::new()),
        }));
    };
    Ok(Some(match mode {
        RegexMode::Match => Bson::Boolean(regex.is_match(text)),
        RegexMode::Find => next_match(regex, text, &mut Cursor::default())
            .map_or(Bson::Null, |(found, _)| Bson::Document(found)),
        RegexMode::FindAll => Bson::Array(find_all(name, regex, text)?),
    }))
}

#[cfg(test)]
mod tests {
    //! Expected values come from MongoDB's reference page of each operator (its behavior table
    //! and examples) and, for errors, from mongod's `expression.cpp` codes.
    use super::super::test_support::{error, value};
    use crate::query::pipeline::fixtures::{assert_value, eval, eval_ok};
    use bson::{bson, doc, Bson, Document, Regex as BsonRegex};

    #[track_caller]
    fn check_values(cases: Vec<(Bson, Bson)>) {
        for (expression, expected) in cases {
            let actual = value(expression.clone());
            assert!(
                actual.as_ref() == Some(&expected),
                "{expression:?}: {actual:?} != {expected:?}"
            );
            assert_value(actual, expected);
        }
    }

    #[track_caller]
    fn check_errors(cases: Vec<(Bson, i32)>) {
        for (expression, code) in cases {
            assert_eq!(
                error(expression.clone()).code.code(),
                code,
                "{expression:?}"
            );
        }
    }

    /// Evaluates `expression` over each document, against the expected value (`None`: missing).
    #[track_caller]
    fn check_over(expression: Bson, cases: Vec<(Document, Bson)>) {
        for (document, expected) in cases {
            let actual = eval_ok(expression.clone(), &document);
            assert!(
                actual.as_ref() == Some(&expected),
                "{document:?}: {actual:?} != {expected:?}"
            );
        }
    }

    fn regex(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(BsonRegex {
            pattern: pattern.to_string(),
            options: options.to_string(),
        })
    }

    fn found(matched: &str, idx: i32, captures: Bson) -> Bson {
        bson!({"match": matched, "idx": idx, "captures": captures})
    }

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

    /// The reference pages' `products` collection.
    fn products() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "description": "Single LINE description."},
            doc! {"_id": 2, "description": "First lines\nsecond line"},
            doc! {"_id": 3, "description": "Many spaces before     line"},
            doc! {"_id": 4, "description": "Multiple\nline descriptions"},
            doc! {"_id": 5, "description": "anchors, links and hyperlinks"},
            doc! {"_id": 6, "description": "métier work vocation"},
        ]
    }

    #[track_caller]
    fn check_products(expression: Bson, expected: Vec<Bson>) {
        check_over(expression, products().into_iter().zip(expected).collect());
    }

    #[test]
    fn regex_find_follows_the_reference_examples() {
        let none = Bson::Null;
        check_products(
            bson!({"$regexFind": {"input": "$description", "regex": regex("line", "")}}),
            vec![
                none.clone(),
                found("line", 6, bson!([])),
                found("line", 23, bson!([])),
                found("line", 9, bson!([])),
                none.clone(),
                none.clone(),
            ],
        );
        check_products(
            bson!({"$regexFind": {"input": "$description", "regex": regex("lin(e|k)", "")}}),
            vec![
                none.clone(),
                found("line", 6, bson!(["e"])),
                found("line", 23, bson!(["e"])),
                found("line", 9, bson!(["e"])),
                found("link", 9, bson!(["k"])),
                none.clone(),
            ],
        );
        for expression in [
            bson!({"$regexFind": {"input": "$description", "regex": regex("line", "i")}}),
            bson!({"$regexFind": {"input": "$description", "regex": "line", "options": "i"}}),
        ] {
            check_over(
                expression,
                vec![(products()[0].clone(), found("LINE", 7, bson!([])))],
            );
        }
        check_products(
            bson!({"$regexFind": {"input": "$description", "regex": "lin(e|k) # matches line or link", "options": "x"}}),
            vec![
                none.clone(),
                found("line", 6, bson!(["e"])),
                found("line", 23, bson!(["e"])),
                found("line", 9, bson!(["e"])),
                found("link", 9, bson!(["k"])),
                none.clone(),
            ],
        );
        check_products(
            bson!({"$regexFind": {"input": "$description", "regex": regex("m.*line", ""), "options": "si"}}),
            vec![
                none.clone(),
                none.clone(),
                found("Many spaces before     line", 0, bson!([])),
                found("Multiple\nline", 0, bson!([])),
                none.clone(),
                none.clone(),
            ],
        );
        // idx counts code points; a group that took no part in the match is null.
        check_values(vec![
            (
                bson!({"$regexFind": {"input": "métier work vocation", "regex": "tier"}}),
                found("tier", 2, bson!([])),
            ),
            (
                bson!({"$regexFind": {"input": "Crab", "regex": regex("(C(ar)*)ra", "")}}),
                found("Cra", 0, bson!(["C", null])),
            ),
            (
                bson!({"$regexFind": {"input": null, "regex": "a"}}),
                Bson::Null,
            ),
            (
                bson!({"$regexFind": {"input": "a", "regex": "$missing"}}),
                Bson::Null,
            ),
        ]);
    }

    #[test]
    fn regex_find_all_follows_the_reference_examples() {
        check_products(
            bson!({"$regexFindAll": {"input": "$description", "regex": regex("lin(e|k)", "")}}),
            vec![
                bson!([]),
                bson!([
                    found("line", 6, bson!(["e"])),
                    found("line", 19, bson!(["e"]))
                ]),
                bson!([found("line", 23, bson!(["e"]))]),
                bson!([found("line", 9, bson!(["e"]))]),
                bson!([
                    found("link", 9, bson!(["k"])),
                    found("link", 24, bson!(["k"]))
                ]),
                bson!([]),
            ],
        );
        let email = regex("[a-z0-9_.+-]+@[a-z0-9_.+-]+\\.[a-z0-9_.+-]+", "i");
        check_over(
            bson!({"$regexFindAll": {"input": "$comment", "regex": email}}),
            vec![
                (
                    doc! {"comment": "Hi, I'm just reading about MongoDB -- aunt.arc.tica@example.com"},
                    bson!([found("aunt.arc.tica@example.com", 38, bson!([]))]),
                ),
                (
                    doc! {"comment": "I wanted to concatenate a string"},
                    bson!([]),
                ),
            ],
        );
        check_values(vec![
            // mongod's cursor: an empty match moves on one character; none at the very end.
            (
                bson!({"$regexFindAll": {"input": "ab", "regex": ""}}),
                bson!([found("", 0, bson!([])), found("", 1, bson!([]))]),
            ),
            (
                bson!({"$regexFindAll": {"input": "ab", "regex": "b*"}}),
                bson!([found("", 0, bson!([])), found("b", 1, bson!([]))]),
            ),
            (
                bson!({"$regexFindAll": {"input": "", "regex": ""}}),
                bson!([found("", 0, bson!([]))]),
            ),
            (
                bson!({"$regexFindAll": {"input": "éaéa", "regex": "a"}}),
                bson!([found("a", 1, bson!([])), found("a", 3, bson!([]))]),
            ),
            (
                bson!({"$regexFindAll": {"input": null, "regex": "a"}}),
                bson!([]),
            ),
        ]);
    }

    #[test]
    fn regex_match_follows_the_reference_examples() {
        check_products(
            bson!({"$regexMatch": {"input": "$description", "regex": regex("line", "")}}),
            vec![
                bson!(false),
                bson!(true),
                bson!(true),
                bson!(true),
                bson!(false),
                bson!(false),
            ],
        );
        check_products(
            bson!({"$regexMatch": {"input": "$description", "regex": regex("^s", "im")}}),
            vec![
                bson!(true),
                bson!(true),
                bson!(false),
                bson!(false),
                bson!(false),
                bson!(false),
            ],
        );
        check_products(
            bson!({"$regexMatch": {"input": "$description", "regex": regex("^s", "i")}}),
            vec![
                bson!(true),
                bson!(false),
                bson!(false),
                bson!(false),
                bson!(false),
                bson!(false),
            ],
        );
        check_values(vec![
            (
                bson!({"$regexMatch": {"input": "$missing", "regex": "a"}}),
                bson!(false),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": null}}),
                bson!(false),
            ),
            (
                bson!({"$regexMatch": {"input": "A", "regex": "a", "options": null}}),
                bson!(false),
            ),
            (
                bson!({"$regexMatch": {"input": "a\nb", "regex": "a.b", "options": "su"}}),
                bson!(true),
            ),
        ]);
        // A regex computed per document is compiled per evaluation.
        let expression = bson!({"$regexMatch": {"input": "$s", "regex": "$r", "options": "$o"}});
        check_over(
            expression,
            vec![
                (doc! {"s": "Abc", "r": "^a", "o": "i"}, bson!(true)),
                (doc! {"s": "Abc", "r": "^a"}, bson!(false)),
                (doc! {"s": "Abc", "r": regex("^a", "i")}, bson!(true)),
                (doc! {"s": "Abc"}, bson!(false)),
            ],
        );
    }

    /// `$regexFindAll` of `input` over `regex` (and `options`) is `expected`; `$regexFind` is its
    /// first match and `$regexMatch` whether it has one, as mongod's `regex.js` checks.
    #[track_caller]
    fn check_regex(input: &str, regex: Bson, options: Option<&str>, expected: Vec<Bson>) {
        let mut arguments = doc! {"input": input, "regex": regex};
        if let Some(options) = options {
            arguments.insert("options", options);
        }
        let run = |name: &str| value(bson!({name: arguments.clone()}));
        let context = format!("{arguments:?}");
        assert_eq!(
            run("$regexFindAll"),
            Some(Bson::Array(expected.clone())),
            "{context}"
        );
        assert_eq!(
            run("$regexFind"),
            Some(expected.first().cloned().unwrap_or(Bson::Null)),
            "{context}"
        );
        assert_eq!(
            run("$regexMatch"),
            Some(Bson::Boolean(!expected.is_empty())),
            "{context}"
        );
    }

    /// mongod's `jstests/aggregation/expressions/regex.js`, less the cases that need PCRE's
    /// match limits, newline conventions or ASCII-only classes.
    #[test]
    fn regex_operators_follow_mongod_jstests() {
        let simple = "Simple Example ";
        for pattern in [bson!("(m(p))"), regex("(m(p))", "")] {
            check_regex(
                simple,
                pattern,
                None,
                vec![
                    found("mp", 2, bson!(["mp", "p"])),
                    found("mp", 10, bson!(["mp", "p"])),
                ],
            );
        }
        let a = "aaaaa aaaa";
        check_regex(
            a,
            regex("(aa)", ""),
            None,
            vec![
                found("aa", 0, bson!(["aa"])),
                found("aa", 2, bson!(["aa"])),
                found("aa", 6, bson!(["aa"])),
                found("aa", 8, bson!(["aa"])),
            ],
        );
        check_regex(
            a,
            regex("(aa)+", ""),
            None,
            vec![
                found("aaaa", 0, bson!(["aa"])),
                found("aaaa", 6, bson!(["aa"])),
            ],
        );
        check_regex(
            a,
            regex("(a+)", ""),
            None,
            vec![
                found("aaaaa", 0, bson!(["aaaaa"])),
                found("aaaa", 6, bson!(["aaaa"])),
            ],
        );
        check_regex(
            a,
            regex("(a)+", ""),
            None,
            vec![
                found("aaaaa", 0, bson!(["a"])),
                found("aaaa", 6, bson!(["a"])),
            ],
        );
        check_regex(
            "aaa aa",
            regex("(a+?)", ""),
            None,
            [0, 1, 2, 4, 5]
                .iter()
                .map(|&idx| found("a", idx, bson!(["a"])))
                .collect(),
        );
        check_regex(
            "aaa aa",
            regex("(a*?)", ""),
            None,
            (0..6).map(|idx| found("", idx, bson!([""]))).collect(),
        );
        check_regex(
            simple,
            bson!("((S)(i)(m)(p)(l)(e))"),
            None,
            vec![found(
                "Simple",
                0,
                bson!(["Simple", "S", "i", "m", "p", "l", "e"]),
            )],
        );
        check_regex(
            simple,
            bson!("(S)(i)(m)((p)(l)(e))"),
            None,
            vec![found(
                "Simple",
                0,
                bson!(["S", "i", "m", "ple", "p", "l", "e"]),
            )],
        );
        check_regex(
            "Some field text with email merizo@merizodb.com",
            bson!("([a-zA-Z0-9._-]+)@[a-zA-Z0-9._-]+.[a-zA-Z0-9._-]+"),
            None,
            vec![found("merizo@merizodb.com", 27, bson!(["merizo"]))],
        );
        check_regex(
            "Text with 02 digits",
            regex("[0-9]+", ""),
            None,
            vec![found("02", 10, bson!([]))],
        );
        check_regex(
            "Text with 02 digits",
            regex("(\\d+)", ""),
            None,
            vec![found("02", 10, bson!(["02"]))],
        );
        check_regex(
            "1,2,3,4,5,6,7,8,9,10",
            regex("^(?:1|a)\\,([0-9]+)", ""),
            None,
            vec![found("1,2", 0, bson!(["2"]))],
        );
        check_regex(
            "abc12defgh345jklm",
            regex("[0-9]{3}", ""),
            None,
            vec![found("345", 10, bson!([]))],
        );
        let camel = "This Is Camel Case";
        check_regex(camel, regex("camel", ""), None, vec![]);
        for (pattern, options) in [
            (regex("camel", "i"), None),
            (regex("camel", ""), Some("i")),
            (bson!("camel"), Some("i")),
        ] {
            check_regex(camel, pattern, options, vec![found("Camel", 8, bson!([]))]);
        }
        let lines = "Foo line1\nFoo line2\nFoo line3";
        check_regex(lines, regex("^Foo line\\d$", ""), None, vec![]);
        check_regex(
            lines,
            regex("(^Foo line\\d$)", "m"),
            None,
            vec![
                found("Foo line1", 0, bson!(["Foo line1"])),
                found("Foo line2", 10, bson!(["Foo line2"])),
                found("Foo line3", 20, bson!(["Foo line3"])),
            ],
        );
        check_regex(
            lines,
            bson!("Foo.*line"),
            None,
            [0, 10, 20]
                .iter()
                .map(|&idx| found("Foo line", idx, bson!([])))
                .collect(),
        );
        check_regex(
            lines,
            bson!("Foo.*line"),
            Some("s"),
            vec![found("Foo line1\nFoo line2\nFoo line", 0, bson!([]))],
        );
        check_regex(lines, bson!("F o o # a comment"), None, vec![]);
        for pattern in ["F o o # a comment", "F o o # a comment \n\n# ignored"] {
            check_regex(
                lines,
                bson!(pattern),
                Some("x"),
                [0, 10, 20]
                    .iter()
                    .map(|&idx| found("Foo", idx, bson!([])))
                    .collect(),
            );
        }
        check_regex(
            lines,
            bson!("(F o o) # a comment"),
            Some("x"),
            [0, 10, 20]
                .iter()
                .map(|&idx| found("Foo", idx, bson!(["Foo"])))
                .collect(),
        );
        check_regex("", bson!(""), None, vec![found("", 0, bson!([]))]);
        check_regex(
            "bbbb",
            bson!("()"),
            None,
            (0..4).map(|idx| found("", idx, bson!([""]))).collect(),
        );
        check_regex(simple, regex("foo", ""), None, vec![]);
        check_regex(simple, Bson::Null, None, vec![]);
        // Unicode: idx counts code points; scripts; the UTF/UCP start verbs.
        check_regex(
            "cafétéria",
            bson!("té"),
            None,
            vec![found("té", 4, bson!([]))],
        );
        check_regex(
            "मा०गो डीबि",
            regex("म", ""),
            None,
            vec![found("म", 0, bson!([]))],
        );
        check_regex(
            "मा०गो डीबि",
            regex("(गो )", ""),
            None,
            vec![found("गो ", 3, bson!(["गो "]))],
        );
        check_regex("cafétéria", bson!("\\p{Hangul}"), None, vec![]);
        check_regex(
            "cafétéria",
            bson!("\\p{Latin}+$"),
            None,
            vec![found("cafétéria", 0, bson!([]))],
        );
        for pattern in ["(*UTF8)༤", "(*UTF)༤"] {
            check_regex(
                "༢༣༤༤༤༥12༥A",
                bson!(pattern),
                None,
                (2..5).map(|idx| found("༤", idx, bson!([]))).collect(),
            );
        }
        for pattern in ["(*UTF8)(44)", "(*UTF)(44)"] {
            check_regex(
                "123444",
                bson!(pattern),
                None,
                vec![found("44", 3, bson!(["44"]))],
            );
        }
        check_regex(
            "༢༣༤༤༤༥12༥A",
            bson!("(*UCP)^(\\w+)"),
            None,
            vec![found("༢༣༤༤༤༥12༥A", 0, bson!(["༢༣༤༤༤༥12༥A"]))],
        );
        // PCRE's classes are ASCII unless the pattern starts with (*UCP), POSIX ones included.
        let tibetan = "༢༣༤༤༤༥12༥A";
        check_regex(tibetan, bson!("^(\\w+)"), None, vec![]);
        check_regex(tibetan, bson!("^[[:digit:]]"), None, vec![]);
        check_regex("cafétéria", bson!("^[[:alpha:]]+$"), None, vec![]);
        check_regex(
            tibetan,
            bson!("(*UCP)^[[:digit:]]+"),
            None,
            vec![found("༢༣༤༤༤༥12༥", 0, bson!([]))],
        );
        check_regex(tibetan, bson!("(*UCP)[[:digit:]]+$"), None, vec![]);
        check_regex(
            "박정수AB",
            bson!("(*UCP)^[[:alpha:]]+"),
            None,
            vec![found("박정수AB", 0, bson!([]))],
        );
        // Several matches per document.
        check_regex(
            "string1string2",
            bson!("(str.*?[0-9])"),
            None,
            vec![
                found("string1", 0, bson!(["string1"])),
                found("string2", 7, bson!(["string2"])),
            ],
        );
        check_regex(
            "string3 string4",
            bson!("(str.*?[0-9])"),
            None,
            vec![
                found("string3", 0, bson!(["string3"])),
                found("string4", 8, bson!(["string4"])),
            ],
        );
        check_regex(
            "string1string2",
            bson!("(^.*[0-2]$)"),
            None,
            vec![found("string1string2", 0, bson!(["string1string2"]))],
        );
        check_regex("string3 string4", bson!("(^.*[0-2]$)"), None, vec![]);
        for name in ["$regexFind", "$regexFindAll", "$regexMatch"] {
            check_errors(vec![
                (bson!({name: null}), 51103),
                (bson!({name: "incorrect type"}), 51103),
                (bson!({name: {"input": "string", "regex": "[0-9"}}), 51111),
                (
                    bson!({name: {"input": "string", "regex": "^(*UCP)[[:alpha:]]+$"}}),
                    51111,
                ),
                (
                    bson!({name: {"input": "string", "regex": "((*UCP)[[:alpha:]]+$)"}}),
                    51111,
                ),
                (
                    bson!({name: {"input": {"b": "object"}, "regex": "valid"}}),
                    51104,
                ),
                (
                    bson!({name: {"input": "string", "regex": ["incorrect"]}}),
                    51105,
                ),
                (
                    bson!({name: {"input": "string", "regex": "valid", "options": 123}}),
                    51106,
                ),
                (
                    bson!({name: {"input": "string", "regex": "valid", "options": "a"}}),
                    51108,
                ),
                (
                    bson!({name: {"input": "string", "regex": "valid", "options": "I"}}),
                    51108,
                ),
                (
                    bson!({name: {"input": "string", "regex": regex("(m(p))", "i"), "options": "i"}}),
                    51107,
                ),
                (
                    bson!({name: {"input": "string", "regex": regex("(m(p))", "i"), "options": "x"}}),
                    51107,
                ),
                (
                    bson!({name: {"input": "string", "regex": regex("(m(p))", "m"), "options": ""}}),
                    51107,
                ),
                (
                    bson!({name: {"input": "string", "regex": "sasd\u{0}", "options": "i"}}),
                    51109,
                ),
                (
                    bson!({name: {"input": "string", "regex": regex("(m(p))", ""), "options": "i\u{0}"}}),
                    51110,
                ),
            ]);
        }
    }

    #[test]
    fn regex_patterns_keep_pcre_meaning() {
        // ASCII word boundaries and classes, as PCRE without (*UCP).
        check_regex(
            "éfoo",
            bson!("\\bfoo"),
            None,
            vec![found("foo", 1, bson!([]))],
        );
        check_regex("é1", bson!("[\\w]+"), None, vec![found("1", 1, bson!([]))]);
        check_regex(
            "a\u{0B}b",
            bson!("a\\sb"),
            None,
            vec![found("a\u{0B}b", 0, bson!([]))],
        );
        check_regex("aé", bson!("\\W"), None, vec![found("é", 1, bson!([]))]);
        // `[`, `&&` and `~~` inside a class are literals in PCRE.
        check_regex("x[y", bson!("[[]"), None, vec![found("[", 1, bson!([]))]);
        check_regex("a&b", bson!("[x&&y]"), None, vec![found("&", 1, bson!([]))]);
        check_regex("]", bson!("[]]"), None, vec![found("]", 0, bson!([]))]);
        // An extended-mode comment may hold anything.
        check_regex(
            "foo",
            bson!("f o # a [ comment\n o"),
            Some("x"),
            vec![found("foo", 0, bson!([]))],
        );
    }

    #[test]
    fn regex_errors_carry_mongod_codes() {
        check_errors(vec![
            (bson!({"$regexMatch": "a"}), 51103),
            (
                bson!({"$regexFind": {"input": "a", "regex": "a", "flags": "i"}}),
                31024,
            ),
            (bson!({"$regexFindAll": {"regex": "a"}}), 31022),
            (bson!({"$regexMatch": {"input": "a"}}), 31023),
            (bson!({"$regexMatch": {"input": 1, "regex": "a"}}), 51104),
            (bson!({"$regexFind": {"input": "a", "regex": 1}}), 51105),
            (
                bson!({"$regexFind": {"input": "a", "regex": "a", "options": 1}}),
                51106,
            ),
            (
                bson!({"$regexFind": {"input": "a", "regex": regex("a", "i"), "options": "m"}}),
                51107,
            ),
            (
                bson!({"$regexFindAll": {"input": "a", "regex": "a", "options": "g"}}),
                51108,
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a\u{0}b"}}),
                51109,
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a", "options": "i\u{0}"}}),
                51110,
            ),
            (bson!({"$regexMatch": {"input": "a", "regex": "("}}), 51111),
            // PCRE features the regex crate lacks are refused as invalid regexes.
            (
                bson!({"$regexMatch": {"input": "ab", "regex": "a(?=b)"}}),
                51111,
            ),
            (
                bson!({"$regexMatch": {"input": "aa", "regex": "(a)\\1"}}),
                51111,
            ),
        ]);
        // A regex read from the document fails when evaluated, after its type checks.
        let document = doc! {"r": "(", "o": "z"};
        let failure = eval(
            bson!({"$regexMatch": {"input": "a", "regex": "$r"}}),
            &document,
        )
        .expect_err("invalid regex");
        assert_eq!(failure.code.code(), 51111);
        assert!(failure.errmsg.starts_with("Invalid Regex in $regexMatch: "));
        let failure = eval(
            bson!({"$regexMatch": {"input": "a", "regex": "a", "options": "$o"}}),
            &document,
        )
        .expect_err("invalid flag");
        assert_eq!(
            failure.errmsg,
            "$regexMatch invalid flag in regex options: z"
        );
        // Flags are only read when there is a pattern.
        assert_value(
            value(bson!({"$regexMatch": {"input": "a", "regex": null, "options": "z"}})),
            bson!(false),
        );
    }
}
