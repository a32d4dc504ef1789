//! Date operators: the parts (`$year`, `$month`, `$dayOfMonth`, `$hour`, `$minute`, `$second`,
//! `$millisecond`, `$dayOfWeek`, `$dayOfYear`) and `$dateToString`, in UTC or a fixed offset;
//! the proleptic Gregorian calendar, ISO-8601 printing and parsing (`$toDate`) they rest on.

use bson::Bson;

use super::{
    check_arity, evaluate, fail, find_argument, is_nullish, named_arguments, parse,
    parse_arguments, parse_optional, value_type_name, Expr, Scope, Value, Vars,
};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::display::{type_name, value_string};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DatePart {
    Year,
    Month,
    DayOfMonth,
    Hour,
    Minute,
    Second,
    Millisecond,
    DayOfWeek,
    DayOfYear,
}

pub(super) fn parse_date_part(
    name: &str,
    part: DatePart,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    if let Bson::Document(document) = operand {
        let is_object_form = document
            .keys()
            .next()
            .is_some_and(|key| !key.starts_with('$'));
        if is_object_form {
            let arguments = named_arguments(
                operand,
                &["date", "timezone"],
                || CommandError::internal("date operand must be an object"),
                |other| {
                    fail(
                        ErrorCode::Location40535,
                        format!("unrecognized option to {name}: \"{other}\""),
                    )
                },
            )?;
            let date = find_argument(&arguments, "date").ok_or_else(|| {
                fail(
                    ErrorCode::Location40539,
                    format!(
                        "missing 'date' argument to {name}, provided: {}",
                        value_string(operand)
                    ),
                )
            })?;
            return Ok(Expr::DatePart {
                part,
                date: Box::new(parse(date, scope)?),
                timezone: parse_optional(find_argument(&arguments, "timezone"), scope)?,
            });
        }
    }
    let arguments = parse_arguments(operand, scope)?;
    check_arity(name, arguments.len(), 1, Some(1))?;
    let date = arguments
        .into_iter()
        .next()
        .ok_or_else(|| CommandError::internal("date argument vanished"))?;
    Ok(Expr::DatePart {
        part,
        date: Box::new(date),
        timezone: None,
    })
}

pub(super) fn parse_date_to_string(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["date", "format", "timezone", "onNull"],
        || {
            fail(
                ErrorCode::Location18629,
                "$dateToString only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location18534,
                format!("Unrecognized argument to $dateToString: {other}"),
            )
        },
    )?;
    let date = find_argument(&arguments, "date").ok_or_else(|| {
        fail(
            ErrorCode::Location18628,
            "Missing 'date' parameter to $dateToString",
        )
    })?;
    Ok(Expr::DateToString {
        date: Box::new(parse(date, scope)?),
        format: parse_optional(find_argument(&arguments, "format"), scope)?,
        timezone: parse_optional(find_argument(&arguments, "timezone"), scope)?,
        on_null: parse_optional(find_argument(&arguments, "onNull"), scope)?,
    })
}

/// A date part of `date` at `timezone`; null when either is null or missing.
pub(super) fn evaluate_date_part(
    part: DatePart,
    date: &Expr,
    timezone: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let date = evaluate(date, vars)?;
    let offset = timezone_offset(timezone, vars)?;
    if is_nullish(&date) {
        return Ok(Some(Bson::Null));
    }
    let Some(offset) = offset else {
        return Ok(Some(Bson::Null));
    };
    let millis = date_millis(&date)?.saturating_add(offset);
    Ok(Some(Bson::Int32(civil_part(millis, part))))
}

const MILLIS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    millisecond: i64,
    day_of_week: i64,
    day_of_year: i64,
}

fn civil(millis: i64) -> Civil {
    let days = millis.div_euclid(MILLIS_PER_DAY);
    let in_day = millis.rem_euclid(MILLIS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: in_day / 3_600_000,
        minute: in_day / 60_000 % 60,
        second: in_day / 1000 % 60,
        millisecond: in_day % 1000,
        // 1970-01-01 was a Thursday; mongod numbers Sunday as 1.
        day_of_week: (days + 4).rem_euclid(7) + 1,
        day_of_year: days - days_from_civil(year, 1, 1) + 1,
    }
}

fn civil_part(millis: i64, part: DatePart) -> i32 {
    let parts = civil(millis);
    let value = match part {
        DatePart::Year => parts.year,
        DatePart::Month => i64::from(parts.month),
        DatePart::DayOfMonth => i64::from(parts.day),
        DatePart::Hour => parts.hour,
        DatePart::Minute => parts.minute,
        DatePart::Second => parts.second,
        DatePart::Millisecond => parts.millisecond,
        DatePart::DayOfWeek => parts.day_of_week,
        DatePart::DayOfYear => parts.day_of_year,
    };
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// `2020-01-02T03:04:05.678Z`, the form mongod prints dates as strings.
pub(crate) fn iso_date_string(millis: i64) -> String {
    let parts = civil(millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        parts.year,
        parts.month,
        parts.day,
        parts.hour,
        parts.minute,
        parts.second,
        parts.millisecond
    )
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS[.fff]]][Z|±HH[:]MM]` into epoch milliseconds.
pub(super) fn parse_iso_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let piece = text.get(range)?;
        if piece.is_empty() || !piece.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        piece.parse().ok()
    };
    let year = number(0..4)?;
    if bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let month = u32::try_from(number(5..7)?).ok()?;
    let day = u32::try_from(number(8..10)?).ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut millis = days_from_civil(year, month, day) * MILLIS_PER_DAY;
    let mut rest = &text[10..];
    if rest.is_empty() {
        return Some(millis);
    }
    rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' '))?;
    let hour = rest.get(0..2)?.parse::<i64>().ok()?;
    if rest.get(2..3) != Some(":") {
        return None;
    }
    let minute = rest.get(3..5)?.parse::<i64>().ok()?;
    rest = &rest[5..];
    let mut second = 0;
    let mut fraction = 0;
    if let Some(after) = rest.strip_prefix(':') {
        second = after.get(0..2)?.parse::<i64>().ok()?;
        rest = &after[2..];
        if let Some(after) = rest.strip_prefix('.') {
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                return None;
            }
            let padded = format!("{:0<3}", &digits[..digits.len().min(3)]);
            fraction = padded.parse::<i64>().ok()?;
            rest = &after[digits.len()..];
        }
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    millis += hour * 3_600_000 + minute * 60_000 + second * 1000 + fraction;
    match rest {
        "" | "Z" => Some(millis),
        offset => parse_offset(offset).map(|offset| millis - offset),
    }
}

/// `+HH:MM`, `+HHMM` or `+HH` as milliseconds east of UTC.
fn parse_offset(text: &str) -> Option<i64> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = digits.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (hours, minutes) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    Some(sign * (hours * 3_600_000 + minutes * 60_000))
}

/// A timezone argument as an offset in milliseconds; `Ok(None)` when it is null/missing.
fn timezone_offset(timezone: Option<&Expr>, vars: &mut Vars) -> CommandResult<Option<i64>> {
    let Some(timezone) = timezone else {
        return Ok(Some(0));
    };
    let value = evaluate(timezone, vars)?;
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(Bson::String(name)) => match name.as_str() {
            "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" => Ok(Some(0)),
            other => match parse_offset(other) {
                Some(offset) => Ok(Some(offset)),
                None => Err(fail(
                    ErrorCode::NotImplemented,
                    format!("time zone '{other}' is not supported by this server (only UTC and fixed offsets)"),
                )),
            },
        },
        Some(other) => Err(fail(
            ErrorCode::Location40517,
            format!("timezone must evaluate to a string, found {}", type_name(&other)),
        )),
    }
}

/// Milliseconds since the epoch of a date-like value (date, ObjectId, timestamp).
fn date_millis(value: &Value) -> CommandResult<i64> {
    match value {
        Some(Bson::DateTime(moment)) => Ok(moment.timestamp_millis()),
        Some(Bson::ObjectId(id)) => {
            let seconds =
                u32::from_be_bytes(<[u8; 4]>::try_from(&id.bytes()[..4]).unwrap_or_default());
            Ok(i64::from(seconds) * 1000)
        }
        Some(Bson::Timestamp(stamp)) => Ok(i64::from(stamp.time) * 1000),
        other => Err(fail(
            ErrorCode::Location16006,
            format!(
                "can't convert from BSON type {} to Date",
                value_type_name(other)
            ),
        )),
    }
}

pub(super) fn evaluate_date_to_string(
    date: &Expr,
    format: Option<&Expr>,
    timezone: Option<&Expr>,
    on_null: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let format = match format {
        None => None,
        Some(format) => match evaluate(format, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::String(text)) => Some(text),
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location18533,
                    format!(
                        "$dateToString requires that 'format' be a string, found: {} with value {}",
                        type_name(&other),
                        value_string(&other)
                    ),
                ))
            }
        },
    };
    let offset = timezone_offset(timezone, vars)?;
    let date = evaluate(date, vars)?;
    if is_nullish(&date) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(offset) = offset else {
        return Ok(Some(Bson::Null));
    };
    let millis = date_millis(&date)?.saturating_add(offset);
    let format = format.as_deref().unwrap_or("%Y-%m-%dT%H:%M:%S.%LZ");
    Ok(Some(Bson::String(format_date(format, millis, offset)?)))
}

fn format_date(format: &str, millis: i64, offset: i64) -> CommandResult<String> {
    let parts = civil(millis);
    let mut output = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            output.push(c);
            continue;
        }
        let Some(specifier) = chars.next() else {
            return Err(fail(
                ErrorCode::Location18535,
                "Unmatched '%' at end of format string",
            ));
        };
        match specifier {
            'Y' => {
                if !(0..=9999).contains(&parts.year) {
                    return Err(fail(
                        ErrorCode::Location18537,
                        format!(
                            "Could not convert date to string: date component was outside the supported range of 0-9999: {}",
                            parts.year
                        ),
                    ));
                }
                output.push_str(&format!("{:04}", parts.year));
            }
            'm' => output.push_str(&format!("{:02}", parts.month)),
            'd' => output.push_str(&format!("{:02}", parts.day)),
            'H' => output.push_str(&format!("{:02}", parts.hour)),
            'M' => output.push_str(&format!("{:02}", parts.minute)),
            'S' => output.push_str(&format!("{:02}", parts.second)),
            'L' => output.push_str(&format!("{:03}", parts.millisecond)),
            'j' => output.push_str(&format!("{:03}", parts.day_of_year)),
            'w' => output.push_str(&parts.day_of_week.to_string()),
            'u' => output.push_str(&((parts.day_of_week + 5) % 7 + 1).to_string()),
            'z' => {
                let minutes = offset / 60_000;
                let sign = if minutes < 0 { '-' } else { '+' };
                output.push_str(&format!(
                    "{sign}{:02}{:02}",
                    minutes.abs() / 60,
                    minutes.abs() % 60
                ));
            }
            'Z' => output.push_str(&(offset / 60_000).to_string()),
            '%' => output.push('%'),
            'U' | 'V' | 'G' | 'b' | 'B' => {
                return Err(fail(
                    ErrorCode::NotImplemented,
                    format!("$dateToString format '%{specifier}' is not supported by this server"),
                ))
            }
            other => {
                return Err(fail(
                    ErrorCode::Location18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::error;
    use crate::query::pipeline::fixtures::{assert_value, eval_ok};
    use bson::{doc, Bson, DateTime};

    #[test]
    fn date_operators_read_utc_parts() {
        let document = doc! {"d": DateTime::from_millis(1_614_834_367_089)};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(on(bson::bson!({"$year": "$d"})), Bson::Int32(2021));
        assert_value(on(bson::bson!({"$month": "$d"})), Bson::Int32(3));
        assert_value(on(bson::bson!({"$dayOfMonth": "$d"})), Bson::Int32(4));
        assert_value(on(bson::bson!({"$hour": ["$d"]})), Bson::Int32(5));
        assert_value(on(bson::bson!({"$minute": "$d"})), Bson::Int32(6));
        assert_value(on(bson::bson!({"$second": "$d"})), Bson::Int32(7));
        assert_value(on(bson::bson!({"$millisecond": "$d"})), Bson::Int32(89));
        assert_value(on(bson::bson!({"$dayOfWeek": "$d"})), Bson::Int32(5));
        assert_value(on(bson::bson!({"$dayOfYear": "$d"})), Bson::Int32(63));
        assert_value(
            on(bson::bson!({"$hour": {"date": "$d", "timezone": "+02:30"}})),
            Bson::Int32(7),
        );
        assert_value(on(bson::bson!({"$year": "$missing"})), Bson::Null);
        assert_eq!(error(bson::bson!({"$year": "x"})).code.code(), 16006);
        assert_value(
            on(bson::bson!({"$dateToString": {"date": "$d"}})),
            "2021-03-04T05:06:07.089Z".into(),
        );
        assert_value(
            on(
                bson::bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M:%S.%L %j %%"}}),
            ),
            "2021/03/04 05:06:07.089 063 %".into(),
        );
        assert_value(
            on(bson::bson!({"$dateToString": {"date": "$missing", "onNull": "none"}})),
            "none".into(),
        );
        assert_eq!(
            error(bson::bson!({"$dateToString": {"date": "$$NOW", "format": "%Q"}}))
                .code
                .code(),
            18536
        );
        let before_epoch = doc! {"d": DateTime::from_millis(-1)};
        assert_value(
            eval_ok(
                bson::bson!({"$dateToString": {"date": "$d"}}),
                &before_epoch,
            ),
            "1969-12-31T23:59:59.999Z".into(),
        );
    }
}
