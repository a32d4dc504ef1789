//! The regex operators `$regexMatch`, `$regexFind` and `$regexFindAll`, as mongod evaluates them.
//!
//! Invariants:
//! - A match's `idx` counts code points; an unmatched capture group is null.
//! - A regex whose `regex` and `options` are constants is compiled once, at parse time (its
//!   errors are parse errors then, as in mongod); otherwise it is compiled per evaluation.
//! - Regexes are the `regex` crate's, with mongod's flags (`i m s x`, `u` accepted and implied),
//!   the pattern translated to keep PCRE's meaning (`translate_pattern`: ASCII `\w \d \s \b`
//!   unless `(*UCP)`, literal `[` in classes). PCRE features that crate lacks (look-around,
//!   backreferences, possessive quantifiers, `\Z`, recursion, other `(*VERB)`s...) fail to
//!   compile and are refused with mongod's 51111, naming the feature. Known difference kept:
//!   `$` without `m` matches only at the very end (PCRE also before a final newline).
//! - `$regexFindAll` returns at most mongod's 64MB of matches (51151).

use bson::{doc, Bson};
use regex::{Regex, RegexBuilder};

use super::string_search::int32;
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, parse_optional, value_bytes,
    Expr, Scope, Value, Vars,
};
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// mongod's `BufferMaxSize`: the most `$regexFindAll` may return.
const MAX_REGEX_FIND_ALL_BYTES: usize = 64 * 1024 * 1024;

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
    //! Expected values come from MongoDB's reference pages of the regex operators (their
    //! examples), mongod's `regex.js` jstest and, for errors, mongod's `expression.cpp` codes.
    use super::super::test_support::{check_errors, check_over, check_values, value};
    use crate::expr::fixtures::{assert_value, eval};
    use bson::{bson, doc, Bson, Document, Regex as BsonRegex};

    fn regex(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(BsonRegex {
            pattern: pattern.to_string(),
            options: options.to_string(),
        })
    }

    fn found(matched: &str, idx: i32, captures: Bson) -> Bson {
        bson!({"match": matched, "idx": idx, "captures": captures})
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
