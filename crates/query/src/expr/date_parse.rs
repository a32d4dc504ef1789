//! `$dateFromString`: a date string, read with an explicit `format` the way timelib's
//! `parse_from_format` reads it, or without one as an ISO 8601 date and time, then placed in
//! the string's own zone or the `timezone` argument.
//!
//! Invariants: a string mongod rejects answers ConversionFailure (241, which `onError`
//! catches) with mongod's message shape; a string this server cannot judge (the free-form
//! forms timelib's `strtotime` accepts without a format, or a zone abbreviation outside the
//! table below) answers NotImplemented rather than a guess. A string carrying a zone together
//! with a non-UTC `timezone` argument is refused, as mongod does.

use bson::{Bson, DateTime};

use super::date::{
    days_from_civil, iso_week_one_monday, optional_argument, validate_format, DateOp,
    MILLIS_PER_DAY, MONTH_NAMES,
};
use super::timezone::{evaluate_timezone, parse_utc_offset, TimeZone};
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, Expr, Scope, Value, Vars,
};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The specifiers `$dateFromString` accepts (mongod's `kDateFromStringFormatMap`; `%U` and
/// `%w` since 7.0).
const FROM_STRING_SPECIFIERS: &str = "bBdGHLmMSuUVwYzZ";

pub(super) fn parse_date_from_string(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["dateString", "format", "timezone", "onNull", "onError"],
        || {
            fail(
                ErrorCode::Location40540,
                format!(
                    "$dateFromString only supports an object as an argument, found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::Location40541,
                format!("Unrecognized argument to $dateFromString: {other}"),
            )
        },
    )?;
    let date_string = find_argument(&arguments, "dateString").ok_or_else(|| {
        fail(
            ErrorCode::Location40542,
            "Missing 'dateString' parameter to $dateFromString",
        )
    })?;
    Ok(Expr::DateOp(Box::new(DateOp::FromString {
        date_string: parse(date_string, scope)?,
        format: optional_argument(&arguments, "format", scope)?,
        timezone: optional_argument(&arguments, "timezone", scope)?,
        on_null: optional_argument(&arguments, "onNull", scope)?,
        on_error: optional_argument(&arguments, "onError", scope)?,
    })))
}

pub(super) fn evaluate_from_string(op: &DateOp, vars: &mut Vars) -> CommandResult<Value> {
    let DateOp::FromString {
        date_string,
        format,
        timezone,
        on_null,
        on_error,
    } = op
    else {
        return Err(CommandError::internal("not $dateFromString"));
    };
    let text = evaluate(date_string, vars)?;
    let format = match format {
        None => None,
        Some(format) => Some(match evaluate(format, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => None,
            Some(Bson::String(format)) => {
                validate_format(&format, FROM_STRING_SPECIFIERS)?;
                Some(format)
            }
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location40684,
                    format!(
                    "$dateFromString requires that 'format' be a string, found: {} with value {}",
                    type_name(&other),
                    value_string(&other)
                ),
                ))
            }
        }),
    };
    let zone = evaluate_timezone(timezone.as_ref(), vars)?;
    if is_nullish(&text) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let result = from_string(text, format, zone);
    match (result, on_error) {
        (Err(error), Some(on_error)) if error.code == ErrorCode::ConversionFailure => {
            evaluate(on_error, vars)
        }
        (result, _) => result,
    }
}

fn from_string(
    text: Value,
    format: Option<Option<String>>,
    zone: Option<TimeZone>,
) -> CommandResult<Value> {
    let Some(Bson::String(text)) = text else {
        let shown = text.unwrap_or(Bson::Null);
        return Err(fail(
            ErrorCode::ConversionFailure,
            format!(
                "$dateFromString requires that 'dateString' be a string, found: {} with value {}",
                type_name(&shown),
                value_string(&shown)
            ),
        ));
    };
    let Some(zone) = zone else {
        return Ok(Some(Bson::Null));
    };
    let parsed = match format {
        Some(None) => return Ok(Some(Bson::Null)),
        // timelib reads C strings: both end at an embedded NUL.
        Some(Some(format)) => parse_with_format(until_nul(&text), until_nul(&format)),
        None => parse_iso(&text),
    };
    let parsed = parsed.map_err(|problem| problem.into_error(&text))?;
    parsed
        .into_instant(&text, &zone)
        .map(|millis| Some(Bson::DateTime(DateTime::from_millis(millis))))
}

fn until_nul(text: &str) -> &str {
    text.split('\0').next().unwrap_or_default()
}

/// Why a string was not read.
enum Problem {
    /// mongod refuses the string: timelib's message, at a byte position.
    Invalid {
        position: usize,
        message: &'static str,
        text_char: Option<char>,
    },
    /// The string may be valid for mongod, but this server cannot read it.
    Unsupported(String),
}

impl Problem {
    fn at(text: &str, position: usize, message: &'static str) -> Problem {
        Problem::Invalid {
            position,
            message,
            text_char: text.get(position..).and_then(|rest| rest.chars().next()),
        }
    }

    fn into_error(self, text: &str) -> CommandError {
        match self {
            Problem::Invalid {
                position,
                message,
                text_char,
            } => fail(
                ErrorCode::ConversionFailure,
                format!(
                    "Error parsing date string '{text}'; {position}: {message} '{}'",
                    text_char.map(String::from).unwrap_or_default()
                ),
            ),
            Problem::Unsupported(what) => fail(ErrorCode::NotImplemented, what),
        }
    }
}

/// A zone written in the string.
enum WrittenZone {
    /// `Z`, `+03:30`, `GMT+02`: mongod's zone type 1 (and `Z`, an abbreviation).
    Offset(i64),
    /// An abbreviation (`CEST`, `EST`, a military letter), with its offset in seconds.
    Abbreviation(String, i64),
}

#[derive(Default)]
struct Parsed {
    year: Option<i64>,
    month: Option<i64>,
    day: Option<i64>,
    hour: Option<i64>,
    minute: Option<i64>,
    second: Option<i64>,
    millisecond: Option<i64>,
    iso_year: Option<i64>,
    iso_week: Option<i64>,
    iso_day_of_week: Option<i64>,
    zone: Option<WrittenZone>,
}

impl Parsed {
    fn into_instant(self, text: &str, zone: &TimeZone) -> CommandResult<i64> {
        let mut parsed = self;
        if let Some(year) = parsed.iso_year {
            let days = iso_week_one_monday(year)
                + (parsed.iso_week.unwrap_or(1) - 1) * 7
                + parsed.iso_day_of_week.unwrap_or(1)
                - 1;
            let (year, month, day) = super::date::civil_from_days(days);
            parsed.year = Some(year);
            parsed.month = Some(i64::from(month));
            parsed.day = Some(i64::from(day));
        }
        if parsed.hour.is_none() && parsed.minute.is_none() && parsed.second.is_none() {
            parsed.hour = Some(0);
            parsed.minute = Some(0);
            parsed.second = Some(0);
        }
        let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
            parsed.year,
            parsed.month,
            parsed.day,
            parsed.hour,
            parsed.minute,
            parsed.second,
        ) else {
            return Err(fail(
                ErrorCode::ConversionFailure,
                format!(
                    "an incomplete date/time string has been found, with elements missing: \"{text}\""
                ),
            ));
        };
        if !zone.is_utc() {
            match &parsed.zone {
                None => {}
                Some(WrittenZone::Offset(_)) => {
                    return Err(fail(
                        ErrorCode::ConversionFailure,
                        "you cannot pass in a date/time string with GMT offset together with a timezone argument",
                    ))
                }
                Some(WrittenZone::Abbreviation(name, _)) => {
                    return Err(fail(
                        ErrorCode::ConversionFailure,
                        format!(
                            "you cannot pass in a date/time string with time zone information ('{name}') together with a timezone argument"
                        ),
                    ))
                }
            }
        }
        // Parts beyond their range carry over, as timelib normalizes them.
        let months = year * 12 + (month - 1);
        let month_index = u32::try_from(months.rem_euclid(12) + 1).unwrap_or(1);
        let days = days_from_civil(months.div_euclid(12), month_index, 1) + (day - 1);
        let wall = i128::from(days) * i128::from(MILLIS_PER_DAY)
            + i128::from(hour) * 3_600_000
            + i128::from(minute) * 60_000
            + i128::from(second) * 1000
            + i128::from(parsed.millisecond.unwrap_or(0));
        let wall = i64::try_from(wall).map_err(|_| {
            fail(
                ErrorCode::ConversionFailure,
                format!("Error parsing date string '{text}'; the date is out of range"),
            )
        })?;
        Ok(match parsed.zone {
            Some(WrittenZone::Offset(seconds) | WrittenZone::Abbreviation(_, seconds)) => {
                wall - seconds * 1000
            }
            None => zone.instant_from_wall(wall),
        })
    }
}

/// timelib's `timelib_get_nr`: skips anything up to the first digit, then reads at most
/// `max_digits` digits. `None` at the end of the string.
fn get_number(bytes: &[u8], position: &mut usize, max_digits: usize) -> Option<(i64, usize)> {
    while *position < bytes.len() && !bytes[*position].is_ascii_digit() {
        *position += 1;
    }
    let start = *position;
    let mut value = 0_i64;
    while *position < bytes.len()
        && *position - start < max_digits
        && bytes[*position].is_ascii_digit()
    {
        value = value * 10 + i64::from(bytes[*position] - b'0');
        *position += 1;
    }
    (*position > start).then_some((value, *position - start))
}

/// Zone abbreviations this server knows (offset east of UTC in seconds, DST included), and
/// the military letters. timelib knows many more; others answer NotImplemented.
fn abbreviation_offset(name: &str) -> Option<i64> {
    let upper = name.to_ascii_uppercase();
    if upper.len() == 1 {
        let letter = upper.as_bytes()[0];
        return match letter {
            b'Z' => Some(0),
            b'A'..=b'I' => Some(i64::from(letter - b'A' + 1) * 3600),
            b'K'..=b'M' => Some(i64::from(letter - b'K' + 10) * 3600),
            b'N'..=b'Y' => Some(-i64::from(letter - b'N' + 1) * 3600),
            _ => None,
        };
    }
    let hours: f64 = match upper.as_str() {
        "UTC" | "GMT" | "UT" | "WET" => 0.0,
        "BST" | "WEST" | "CET" | "MET" => 1.0,
        "CEST" | "MEST" | "EET" => 2.0,
        "EEST" | "MSK" => 3.0,
        "IST" => 5.5,
        "JST" | "KST" => 9.0,
        "AEST" => 10.0,
        "AEDT" => 11.0,
        "NZST" => 12.0,
        "NZDT" => 13.0,
        "AST" => -4.0,
        "ADT" => -3.0,
        "EST" => -5.0,
        "EDT" => -4.0,
        "CST" => -6.0,
        "CDT" => -5.0,
        "MST" => -7.0,
        "MDT" => -6.0,
        "PST" => -8.0,
        "PDT" => -7.0,
        "AKST" => -9.0,
        "AKDT" => -8.0,
        "HST" => -10.0,
        _ => return None,
    };
    Some((hours * 3600.0) as i64)
}

/// Reads a zone at `position` as timelib's `timelib_parse_zone` does: spaces, an optional
/// `GMT` before an offset, then an offset (`±HH`, `±HHMM`, `±HH:MM`) or an abbreviation.
fn parse_zone(text: &str, position: &mut usize) -> Result<WrittenZone, Problem> {
    let bytes = text.as_bytes();
    while bytes.get(*position) == Some(&b' ') {
        *position += 1;
    }
    let rest = &text[*position..];
    let after_gmt = rest
        .strip_prefix("GMT")
        .filter(|after| after.starts_with(['+', '-']));
    if let Some(after) = after_gmt {
        *position += rest.len() - after.len();
    }
    let rest = &text[*position..];
    if rest.starts_with(['+', '-']) {
        let length = 1 + rest[1..]
            .bytes()
            .take_while(|byte| byte.is_ascii_digit() || *byte == b':')
            .count();
        let written = &rest[..length];
        return match parse_utc_offset(written) {
            Some(seconds) => {
                *position += length;
                Ok(WrittenZone::Offset(seconds))
            }
            None => Err(Problem::Unsupported(format!(
                "$dateFromString: the UTC offset '{written}' is not supported by this server"
            ))),
        };
    }
    let length = rest
        .bytes()
        .take_while(|byte| byte.is_ascii_alphabetic() || *byte == b'/' || *byte == b'_')
        .count();
    if length == 0 {
        return Err(Problem::at(
            text,
            *position,
            "The timezone could not be found in the database",
        ));
    }
    let name = &rest[..length];
    if name.contains('/') {
        return Err(Problem::Invalid {
            position: *position,
            message: "passing a time zone identifier as part of the string is not allowed",
            text_char: name.chars().next(),
        });
    }
    let Some(seconds) = abbreviation_offset(name) else {
        return Err(Problem::Unsupported(format!(
            "$dateFromString: the time zone abbreviation '{name}' is not known to this server"
        )));
    };
    *position += length;
    let upper = name.to_ascii_uppercase();
    Ok(
        if upper == "Z" || upper == "UTC" || upper == "GMT" && seconds == 0 {
            WrittenZone::Abbreviation(upper, 0)
        } else {
            WrittenZone::Abbreviation(upper, seconds)
        },
    )
}

/// A month name (full or three-letter, any case) at `position`.
fn parse_month_name(text: &str, position: &mut usize) -> Option<i64> {
    let rest = text.get(*position..)?;
    let word: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    let lower = word.to_ascii_lowercase();
    let index = MONTH_NAMES.iter().position(|name| {
        let name = name.to_ascii_lowercase();
        lower == name || lower == name[..3]
    })?;
    *position += word.len();
    Some(i64::try_from(index).ok()? + 1)
}

/// timelib's `timelib_parse_from_format_with_map` over mongod's specifiers.
fn parse_with_format(text: &str, format: &str) -> Result<Parsed, Problem> {
    let bytes = text.as_bytes();
    let mut parsed = Parsed::default();
    let mut position = 0;
    let mut specifiers = format.chars().peekable();
    while let Some(c) = specifiers.next() {
        if position >= bytes.len() {
            return Err(Problem::at(text, position, "Data missing"));
        }
        if c != '%' {
            if text[position..].starts_with(c) {
                position += c.len_utf8();
                continue;
            }
            return Err(Problem::at(text, position, "Format literal not found"));
        }
        let specifier = specifiers.next().unwrap_or('%');
        let number = |position: &mut usize, digits: usize, message: &'static str| {
            get_number(bytes, position, digits)
                .map(|(value, _)| value)
                .ok_or_else(|| Problem::at(text, *position, message))
        };
        match specifier {
            '%' => {
                if bytes[position] == b'%' {
                    position += 1;
                } else {
                    return Err(Problem::at(
                        text,
                        position,
                        "The escaped character could not be found",
                    ));
                }
            }
            'Y' => {
                parsed.year = Some(number(
                    &mut position,
                    4,
                    "A four digit year could not be found",
                )?)
            }
            'm' => {
                parsed.month = Some(number(
                    &mut position,
                    2,
                    "A two digit month could not be found",
                )?)
            }
            'd' => {
                parsed.day = Some(number(
                    &mut position,
                    2,
                    "A two digit day could not be found",
                )?)
            }
            'H' => {
                let hour = number(&mut position, 2, "A two digit hour could not be found")?;
                if hour > 23 {
                    return Err(Problem::at(text, position, "Hour cannot be higher than 23"));
                }
                parsed.hour = Some(hour);
            }
            'M' => {
                parsed.minute = Some(number(
                    &mut position,
                    2,
                    "A two digit minute could not be found",
                )?)
            }
            'S' => {
                parsed.second = Some(number(
                    &mut position,
                    2,
                    "A two digit second could not be found",
                )?)
            }
            'L' => {
                let (value, digits) = get_number(bytes, &mut position, 3).ok_or_else(|| {
                    Problem::at(
                        text,
                        position,
                        "A three digit millisecond could not be found",
                    )
                })?;
                // "8" is 800 milliseconds, "81" is 810.
                parsed.millisecond = Some(value * 10_i64.pow(3 - digits as u32));
            }
            'b' | 'B' => {
                parsed.month = Some(parse_month_name(text, &mut position).ok_or_else(|| {
                    Problem::at(text, position, "A textual month could not be found")
                })?)
            }
            'G' => {
                parsed.iso_year = Some(number(
                    &mut position,
                    4,
                    "A four digit ISO year could not be found",
                )?)
            }
            'V' => {
                parsed.iso_week = Some(number(
                    &mut position,
                    2,
                    "A two digit ISO week could not be found",
                )?)
            }
            'u' => {
                parsed.iso_day_of_week = Some(number(
                    &mut position,
                    1,
                    "A single digit day of week could not be found",
                )?)
            }
            'z' => parsed.zone = Some(parse_zone(text, &mut position)?),
            'Z' => {
                let sign = match bytes[position] {
                    b'-' => -1,
                    _ => 1,
                };
                if matches!(bytes[position], b'+' | b'-') {
                    position += 1;
                }
                let minutes = get_number(bytes, &mut position, 4)
                    .map(|(value, _)| value)
                    .ok_or_else(|| {
                        Problem::at(
                            text,
                            position,
                            "Unknown or bad format, minutes offset could not be found",
                        )
                    })?;
                parsed.zone = Some(WrittenZone::Offset(sign * minutes * 60));
            }
            other => {
                // `%U` and `%w` (mongod 7.0) set the week of the year and the day of the
                // week, which this server does not combine into a date.
                return Err(Problem::Unsupported(format!(
                    "$dateFromString format '%{other}' is not supported by this server"
                )));
            }
        }
    }
    if position < bytes.len() {
        return Err(Problem::at(text, position, "Trailing data"));
    }
    if parsed.hour.is_some() || parsed.minute.is_some() || parsed.second.is_some() {
        parsed.hour.get_or_insert(0);
        parsed.minute.get_or_insert(0);
        parsed.second.get_or_insert(0);
    }
    let iso =
        parsed.iso_year.is_some() || parsed.iso_week.is_some() || parsed.iso_day_of_week.is_some();
    if iso {
        if parsed.year.is_some() || parsed.month.is_some() || parsed.day.is_some() {
            return Err(Problem::at(
                text,
                position,
                "Mixing of ISO dates with natural dates is not allowed",
            ));
        }
        if parsed.iso_year.is_none() {
            return Err(Problem::at(text, position, "The parsed date was invalid"));
        }
    }
    check_valid(text, &parsed)?;
    Ok(parsed)
}

/// timelib's closing checks: an invalid time or date is a warning, which mongod refuses.
fn check_valid(text: &str, parsed: &Parsed) -> Result<(), Problem> {
    if let (Some(hour), Some(minute), Some(second)) = (parsed.hour, parsed.minute, parsed.second) {
        if !(0..=23).contains(&hour) || !(0..=59).contains(&minute) || !(0..=59).contains(&second) {
            return Err(Problem::at(text, text.len(), "The parsed time was invalid"));
        }
    }
    if let (Some(year), Some(month), Some(day)) = (parsed.year, parsed.month, parsed.day) {
        let valid_month = u32::try_from(month)
            .ok()
            .filter(|month| (1..=12).contains(month));
        let valid = valid_month.is_some_and(|month| {
            let next = if month == 12 {
                days_from_civil(year + 1, 1, 1)
            } else {
                days_from_civil(year, month + 1, 1)
            };
            let length = next - days_from_civil(year, month, 1);
            (1..=length).contains(&day)
        });
        if !valid {
            return Err(Problem::at(text, text.len(), "The parsed date was invalid"));
        }
    }
    if let Some(day) = parsed.iso_day_of_week {
        if !(1..=7).contains(&day) {
            return Err(Problem::at(text, text.len(), "The parsed date was invalid"));
        }
    }
    Ok(())
}

/// The numeric dates read without a format, as timelib's `strtotime` reads them: ISO
/// `YYYY-MM-DD`, American `M/D/Y` and day-first `D-M-YYYY` (a year of one to three digits is
/// 2000+ below 70 and 1900+ otherwise); then (year, month, day, end).
fn date_forms(
    bytes: &[u8],
    digits_at: &dyn Fn(usize, usize, usize) -> Option<(i64, usize)>,
) -> Option<(i64, i64, i64, usize)> {
    let short_year = |year: i64, digits: usize| match (digits, year) {
        (4, _) => year,
        (_, 0..=69) => year + 2000,
        (_, 70..=99) => year + 1900,
        _ => year,
    };
    if let Some((year, end)) = digits_at(0, 4, 4) {
        if bytes.get(end) != Some(&b'-') {
            return None;
        }
        let (month, end) = digits_at(end + 1, 1, 2)?;
        if bytes.get(end) != Some(&b'-') {
            return None;
        }
        let (day, end) = digits_at(end + 1, 1, 2)?;
        return Some((year, month, day, end));
    }
    let (first, end) = digits_at(0, 1, 2)?;
    match bytes.get(end) {
        Some(b'/') => {
            let (day, end) = digits_at(end + 1, 1, 2)?;
            if bytes.get(end) != Some(&b'/') {
                return None;
            }
            let (year, year_end) = digits_at(end + 1, 1, 4)?;
            Some((short_year(year, year_end - end - 1), first, day, year_end))
        }
        Some(b'-') => {
            let (month, end) = digits_at(end + 1, 1, 2)?;
            if bytes.get(end) != Some(&b'-') {
                return None;
            }
            let (year, year_end) = digits_at(end + 1, 4, 4)?;
            Some((year, month, first, year_end))
        }
        _ => None,
    }
}

/// The strings read without a format: a numeric date ([`date_forms`]), optionally followed by
/// `T` or spaces and `HH:MM[(:|.)SS[.fraction]]`, and optionally a zone. Anything else may be one of the many
/// free-form strings timelib's `strtotime` accepts, which this server does not judge.
fn parse_iso(text: &str) -> Result<Parsed, Problem> {
    let unsupported = || {
        Problem::Unsupported(format!(
            "$dateFromString without a format reads only numeric dates (YYYY-MM-DD, M/D/Y, D-M-YYYY) with an optional HH:MM[:SS[.fff]] and zone on this server; '{text}' needs a format"
        ))
    };
    let bytes = text.as_bytes();
    let digits_at = |position: usize, min: usize, max: usize| -> Option<(i64, usize)> {
        let count = bytes[position.min(bytes.len())..]
            .iter()
            .take(max)
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        if count < min {
            return None;
        }
        let value = text[position..position + count].parse().ok()?;
        Some((value, position + count))
    };
    let mut parsed = Parsed::default();
    let (year, month, day, mut position) = date_forms(bytes, &digits_at).ok_or_else(unsupported)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(unsupported());
    }
    parsed.year = Some(year);
    parsed.month = Some(month);
    parsed.day = Some(day);
    let separator = match bytes.get(position) {
        Some(b'T' | b't') => 1,
        Some(b' ') => bytes[position..].iter().take_while(|b| **b == b' ').count(),
        _ => 0,
    };
    if separator > 0 {
        if let Some((hour, after_hour)) = digits_at(position + separator, 1, 2) {
            if bytes.get(after_hour) != Some(&b':') {
                return Err(unsupported());
            }
            let (minute, after_minute) = digits_at(after_hour + 1, 2, 2).ok_or_else(unsupported)?;
            position = after_minute;
            let mut second = 0;
            if matches!(bytes.get(position), Some(b':' | b'.'))
                && bytes.get(position + 1).is_some_and(u8::is_ascii_digit)
            {
                let (value, after_second) =
                    digits_at(position + 1, 2, 2).ok_or_else(unsupported)?;
                second = value;
                position = after_second;
                if matches!(bytes.get(position), Some(b'.' | b','))
                    && bytes.get(position + 1).is_some_and(u8::is_ascii_digit)
                {
                    let count = bytes[position + 1..]
                        .iter()
                        .take_while(|byte| byte.is_ascii_digit())
                        .count();
                    let fraction = &text[position + 1..position + 1 + count];
                    let padded = format!("{:0<3}", &fraction[..count.min(3)]);
                    parsed.millisecond = padded.parse().ok();
                    position += 1 + count;
                }
            }
            if hour > 23 || minute > 59 || second > 59 {
                return Err(unsupported());
            }
            parsed.hour = Some(hour);
            parsed.minute = Some(minute);
            parsed.second = Some(second);
        } else if separator == 1 && bytes[position] != b' ' {
            return Err(unsupported());
        }
    }
    if position < bytes.len() {
        parsed.zone = Some(
            parse_zone(text, &mut position).map_err(|problem| match problem {
                Problem::Invalid { .. } => unsupported(),
                other => other,
            })?,
        );
        if position < bytes.len() {
            return Err(unsupported());
        }
    }
    check_valid(text, &parsed).map_err(|_| unsupported())?;
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    //! Expected values are mongod's, from jstests/aggregation/expressions
    //! (date_from_string.js, date_from_string_on_error.js, date_from_string_on_null.js) and the
    //! manual's examples.
    use bson::{bson, doc, Bson, DateTime};

    use super::super::test_support::{check_errors, check_over, check_values, error};

    fn date(text: &str) -> Bson {
        Bson::DateTime(DateTime::parse_rfc3339_str(text).expect("test date"))
    }

    #[test]
    fn formats_read_as_date_from_string_js() {
        let cases = [
            (
                "2017-07-04T11:56:02Z",
                "2017-07-04T11:56:02Z",
                "%Y-%m-%dT%H:%M:%SZ",
            ),
            (
                "2017-07-04T11:56:02.813Z",
                "2017-07-04T11:56:02.813Z",
                "%Y-%m-%dT%H:%M:%S.%LZ",
            ),
            (
                "2017-07-04T11:56:02.810Z",
                "2017-07-04T11:56:02.81Z",
                "%Y-%m-%dT%H:%M:%S.%LZ",
            ),
            (
                "2017-07-04T11:56:02.800Z",
                "2017-07-04T11:56:02.8Z",
                "%Y-%m-%dT%H:%M:%S.%LZ",
            ),
            (
                "2017-07-04T11:56:02Z",
                "2017-07-04T11:56.02",
                "%Y-%m-%dT%H:%M.%S",
            ),
            (
                "2017-07-04T11:56:02.813Z",
                "2017-07-04T11:56.02.813",
                "%Y-%m-%dT%H:%M.%S.%L",
            ),
            (
                "2017-07-04T11:56:02.810Z",
                "2017-07-04T11:56.02.81",
                "%Y-%m-%dT%H:%M.%S.%L",
            ),
            (
                "2017-07-04T11:56:02.800Z",
                "2017-07-04T11:56.02.8",
                "%Y-%m-%dT%H:%M.%S.%L",
            ),
        ];
        let mut values = Vec::new();
        for (expected, input, format) in cases {
            values.push((
                bson!({"$dateFromString": {"dateString": input}}),
                date(expected),
            ));
            values.push((
                bson!({"$dateFromString": {"dateString": input, "format": format}}),
                date(expected),
            ));
        }
        check_values(values);
        // In Europe/London (summer time) and at +01:00, the same wall times are an hour earlier.
        let london = [
            (
                "2017-07-04T10:56:02Z",
                "2017-07-04T11:56.02",
                "%Y-%m-%dT%H:%M.%S",
            ),
            (
                "2017-07-04T10:56:02.813Z",
                "2017-07-04T11:56.02.813",
                "%Y-%m-%dT%H:%M.%S.%L",
            ),
        ];
        let mut values = Vec::new();
        for (expected, input, format) in london {
            for zone in ["Europe/London", "+01:00"] {
                values.push((
                    bson!({"$dateFromString": {"dateString": input, "timezone": zone}}),
                    date(expected),
                ));
                values.push((
                    bson!({"$dateFromString": {"dateString": input, "timezone": zone, "format": format}}),
                    date(expected),
                ));
            }
        }
        check_values(values);
    }

    #[test]
    fn zones_in_the_string_and_in_the_argument() {
        check_over(
            bson!({"$dateFromString": {"dateString": "$dateString", "timezone": "$timezone"}}),
            vec![
                (
                    doc! {"dateString": "2017-07-06T12:35:37.513", "timezone": "GMT"},
                    date("2017-07-06T12:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "2017-07-06T12:35:37.513", "timezone": "UTC"},
                    date("2017-07-06T12:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "1960-07-10T12:35:37.513", "timezone": "America/New_York"},
                    date("1960-07-10T16:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "1960-07-10T12:35:37.513", "timezone": "Europe/London"},
                    date("1960-07-10T11:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "2017-07-06T12:35:37.513", "timezone": "America/Los_Angeles"},
                    date("2017-07-06T19:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "2017-07-06T12:35:37.513", "timezone": "Europe/Paris"},
                    date("2017-07-06T10:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "2017-07-06T12:35:37.513", "timezone": "+04:00"},
                    date("2017-07-06T08:35:37.513Z"),
                ),
                (
                    doc! {"dateString": "2017-07-06T12:35:37", "timezone": "Asia/Tokyo"},
                    date("2017-07-06T03:35:37Z"),
                ),
                (
                    doc! {"dateString": "2017-07-19T18:52:35.199", "timezone": "-05:00"},
                    date("2017-07-19T23:52:35.199Z"),
                ),
            ],
        );
        let strings = [
            ("2017-07-14T12:02:44.771Z", "2017-07-14T12:02:44.771 GMT"),
            ("2017-07-14T12:02:44.771Z", "2017-07-14T12:02:44.771 GMT+00"),
            (
                "2017-07-14T12:02:44.771Z",
                "2017-07-14T12:02:44.771 GMT+00:00",
            ),
            ("2017-07-14T10:02:44.771Z", "2017-07-14T12:02:44.771 GMT+02"),
            (
                "2017-07-14T10:02:44.771Z",
                "2017-07-14T12:02:44.771 GMT+02:00",
            ),
            ("2017-07-14T09:02:44.771Z", "2017-07-14T12:02:44.771+03"),
            ("2017-07-14T08:32:44.771Z", "2017-07-14T12:02:44.771+0330"),
            ("2017-07-14T08:32:44.771Z", "2017-07-14T12:02:44.771+03:30"),
            ("2017-07-14T12:02:44.771Z", "2017-07-14T12:02:44.771 UTC"),
            ("2017-07-14T10:02:44.771Z", "2017-07-14T12:02:44.771 CEST"),
            ("2017-07-14T17:02:44.771Z", "2017-07-14T12:02:44.771 EST"),
            ("2017-07-14T19:02:44.771Z", "2017-07-14T12:02:44.771 PDT"),
            ("2017-07-14T11:02:44.771Z", "2017-07-14T12:02:44.771 A"),
            ("2017-07-14T01:02:44.771Z", "2017-07-14T12:02:44.771 L"),
            ("2017-07-14T15:02:44.771Z", "2017-07-14T12:02:44.771 P"),
            ("2017-07-14T12:02:44.771Z", "2017-07-14T12:02:44.771 Z"),
        ];
        let mut values = Vec::new();
        for (expected, input) in strings {
            values.push((
                bson!({"$dateFromString": {"dateString": input}}),
                date(expected),
            ));
            values.push((
                bson!({"$dateFromString": {"dateString": input, "format": "%Y-%m-%dT%H:%M:%S.%L%z"}}),
                date(expected),
            ));
        }
        // date_from_string.js's "wacky" strings that are numeric.
        for (expected, input) in [
            ("2017-07-04T00:00:00Z", "7/4/17"),
            ("2017-07-04T00:00:00Z", "04-07-2017"),
            ("2017-07-04T07:03:07Z", "2017-07-04 12:48:07 GMT+0545"),
            ("2017-07-04T14:48:07Z", "2017-07-04 12:48:07 GMT-0200"),
        ] {
            values.push((
                bson!({"$dateFromString": {"dateString": input}}),
                date(expected),
            ));
        }
        // Date-only and space-separated strings ("BI format").
        for (expected, input) in [
            ("2017-01-01T00:00:00Z", "2017-01-01 00:00:00"),
            ("2017-07-06T00:00:00Z", "2017-07-06"),
            ("2017-07-06T11:36:54Z", "2017-07-06 11:36:54"),
        ] {
            values.push((
                bson!({"$dateFromString": {"dateString": input}}),
                date(expected),
            ));
        }
        check_values(values);
    }

    #[test]
    fn null_error_and_refusals() {
        check_values(vec![
            (
                bson!({"$dateFromString": {"dateString": "$missing"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromString": {"dateString": null, "onNull": "nothing"}}),
                "nothing".into(),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06", "timezone": null}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06", "format": null}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06T12:00:00", "format": "%Y-%m-%d", "onError": "bad"}}),
                "bad".into(),
            ),
            (
                bson!({"$dateFromString": {"dateString": 5, "onError": "bad"}}),
                "bad".into(),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06T12:00:00Z", "timezone": "Europe/Paris", "onError": "zone twice"}}),
                "zone twice".into(),
            ),
        ]);
        check_errors(vec![
            (bson!({"$dateFromString": "x"}), 40540),
            (
                bson!({"$dateFromString": {"dateString": "x", "y": 1}}),
                40541,
            ),
            (bson!({"$dateFromString": {"format": "%Y"}}), 40542),
            (
                bson!({"$dateFromString": {"dateString": "2017", "format": 5}}),
                40684,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017", "format": "%Q"}}),
                18536,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017", "format": "%"}}),
                18535,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017", "timezone": "Nowhere/Land"}}),
                40485,
            ),
            (bson!({"$dateFromString": {"dateString": 5}}), 241),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06T12:00:00", "format": "%Y-%m-%d"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07", "format": "%Y-%m"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-02-30", "format": "%Y-%m-%d"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06 +0100", "format": "%Y-%m-%d %z", "timezone": "Europe/Paris"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-06 Europe/Paris", "format": "%Y-%m-%d %z"}}),
                241,
            ),
            // Free-form strings timelib accepts without a format are not judged here.
            (
                bson!({"$dateFromString": {"dateString": "July 4th, 2017"}}),
                238,
            ),
        ]);
    }

    #[test]
    fn formats_mongod_cannot_read_without_one() {
        let cases = [
            ("05 12 1988", "%d %m %Y", "1988-12-05T00:00:00Z"),
            ("1992 04 26", "%Y %m %d", "1992-04-26T00:00:00Z"),
            ("05*12*1988", "%d*%m*%Y", "1988-12-05T00:00:00Z"),
            ("1992/04/26", "%Y/%m/%d", "1992-04-26T00:00:00Z"),
            ("1992 % 04 % 26", "%Y %% %m %% %d", "1992-04-26T00:00:00Z"),
            (
                "Day: 05 Month: 12 Year: 1988",
                "Day: %d Month: %m Year: %Y",
                "1988-12-05T00:00:00Z",
            ),
            ("Date: 1992/04/26", "Date: %Y/%m/%d", "1992-04-26T00:00:00Z"),
            ("4/26/1992:+0445", "%m/%d/%Y:%z", "1992-04-25T19:15:00Z"),
            ("4/26/1992:+285", "%m/%d/%Y:%Z", "1992-04-25T19:15:00Z"),
            ("2017", "%G", "2017-01-02T00:00:00Z"),
            ("2017, Week 53", "%G, Week %V", "2018-01-01T00:00:00Z"),
            ("2017, Day 5", "%G, Day %u", "2017-01-06T00:00:00Z"),
            ("53.7.2017", "%V.%u.%G", "2018-01-07T00:00:00Z"),
            ("1.1.1", "%V.%u.%G", "0001-01-01T00:00:00Z"),
        ];
        check_values(
            cases
                .into_iter()
                .map(|(input, format, expected)| {
                    (
                        bson!({"$dateFromString": {"dateString": input, "format": format}}),
                        date(expected),
                    )
                })
                .collect(),
        );
        for (input, format, expected) in [
            ("2018-01", "%Y-%m-%d", "Data missing"),
            ("2018-01", "%Y", "Trailing data"),
            ("1992-26-04", "Y-d-m", "Format literal not found"),
            ("ISO Day 6", "ISO Day %u", "The parsed date was invalid"),
            ("ISO Week 52", "ISO Week %V", "The parsed date was invalid"),
            (
                "ISO Week 1, 2018",
                "ISO Week %V, %Y",
                "Mixing of ISO dates with natural dates is not allowed",
            ),
            (
                "12/31/2018",
                "%m/%d/%G",
                "Mixing of ISO dates with natural dates is not allowed",
            ),
            ("12/31\0/2018", "%m/%d/%Y", "Data missing"),
            ("12/31/2018", "%m/%d\0/%Y", "Trailing data"),
        ] {
            let failure =
                error(bson!({"$dateFromString": {"dateString": input, "format": format}}));
            assert_eq!(failure.code.code(), 241, "{input} {format}");
            assert!(
                failure.errmsg.contains(expected),
                "{input} {format}: {}",
                failure.errmsg
            );
            assert!(
                failure.errmsg.starts_with("Error parsing date string"),
                "{}",
                failure.errmsg
            );
        }
        check_errors(vec![
            (
                bson!({"$dateFromString": {"dateString": "4/26/1992:+0445", "format": "%m/%d/%Y:%z", "timezone": "+0500"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "4/26/1992", "format": {}}}),
                40684,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-12T22:23:55 GMT+02:00", "timezone": "Europe/Amsterdam"}}),
                241,
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-07-12T22:23:55Z", "timezone": "Europe/Amsterdam"}}),
                241,
            ),
        ]);
    }

    #[test]
    fn month_names_and_iso_weeks() {
        check_values(vec![
            (
                bson!({"$dateFromString": {"dateString": "Jul (July) 04, 2017", "format": "%b (%B) %d, %Y"}}),
                date("2017-07-04T00:00:00Z"),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2017-W27-2", "format": "%G-W%V-%u"}}),
                date("2017-07-04T00:00:00Z"),
            ),
        ]);
    }
}
