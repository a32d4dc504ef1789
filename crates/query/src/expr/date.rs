//! Date operators: the parts (`$year` ... `$dayOfYear`, `$week`, `$isoWeek`, `$isoWeekYear`,
//! `$isoDayOfWeek`), `$dateToString`, `$dateToParts` and `$dateFromParts`, each in UTC, a fixed
//! offset or a named time zone ([`timezone`](super::timezone)); the proleptic Gregorian and ISO
//! week calendars and ISO-8601 printing and parsing (`$toDate`) they rest on. Date arithmetic
//! lives in `date_arith`, `$dateFromString` in `date_parse`.
//!
//! Invariants: calendar arithmetic works on "wall milliseconds" (a local civil time counted as
//! if it were UTC); only [`TimeZone`] converts between instants and wall time. Arguments are
//! evaluated in mongod's order, so the same error wins when several arguments are bad.

use bson::{Bson, Document};

use super::timezone::{evaluate_timezone, TimeZone};
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, parse_arguments,
    parse_optional, value_type_name, Expr, Scope, Value, Vars,
};
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

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
    Week,
    IsoWeek,
    IsoWeekYear,
    IsoDayOfWeek,
}

/// The date operators with several named arguments (boxed into [`Expr::DateOp`]).
#[derive(Clone, Debug)]
pub(crate) enum DateOp {
    ToParts {
        date: Expr,
        timezone: Option<Expr>,
        iso8601: Option<Expr>,
    },
    /// `$dateFromParts`; `fields` are year/month/day (or isoWeekYear/isoWeek/isoDayOfWeek when
    /// `iso`), then hour, minute, second, millisecond.
    FromParts {
        iso: bool,
        fields: Vec<Option<Expr>>,
        timezone: Option<Expr>,
    },
    /// `$dateAdd` and `$dateSubtract`.
    Add {
        subtract: bool,
        start_date: Expr,
        unit: Expr,
        amount: Expr,
        timezone: Option<Expr>,
    },
    Diff {
        start_date: Expr,
        end_date: Expr,
        unit: Expr,
        timezone: Option<Expr>,
        start_of_week: Option<Expr>,
    },
    Trunc {
        date: Expr,
        unit: Expr,
        bin_size: Option<Expr>,
        timezone: Option<Expr>,
        start_of_week: Option<Expr>,
    },
    FromString {
        date_string: Expr,
        format: Option<Expr>,
        timezone: Option<Expr>,
        on_null: Option<Expr>,
        on_error: Option<Expr>,
    },
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
    if arguments.len() != 1 {
        return Err(fail(
            ErrorCode::Location40536,
            format!(
                "{name} accepts exactly one argument if given an array, but was given {}",
                arguments.len()
            ),
        ));
    }
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

/// An optional named argument, parsed.
pub(super) fn optional_argument(
    arguments: &[(&str, &Bson)],
    name: &str,
    scope: &mut Scope,
) -> CommandResult<Option<Expr>> {
    find_argument(arguments, name)
        .map(|value| parse(value, scope))
        .transpose()
}

pub(super) fn parse_date_to_parts(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["date", "timezone", "iso8601"],
        || {
            fail(
                ErrorCode::Location40524,
                "$dateToParts only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location40520,
                format!("Unrecognized argument to $dateToParts: {other}"),
            )
        },
    )?;
    let date = find_argument(&arguments, "date").ok_or_else(|| {
        fail(
            ErrorCode::Location40522,
            "Missing 'date' parameter to $dateToParts",
        )
    })?;
    Ok(Expr::DateOp(Box::new(DateOp::ToParts {
        date: parse(date, scope)?,
        timezone: optional_argument(&arguments, "timezone", scope)?,
        iso8601: optional_argument(&arguments, "iso8601", scope)?,
    })))
}

const CALENDAR_FIELDS: [&str; 3] = ["year", "month", "day"];
const ISO_FIELDS: [&str; 3] = ["isoWeekYear", "isoWeek", "isoDayOfWeek"];
const TIME_FIELDS: [&str; 4] = ["hour", "minute", "second", "millisecond"];

pub(super) fn parse_date_from_parts(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let mut allowed: Vec<&str> = CALENDAR_FIELDS.to_vec();
    allowed.extend(TIME_FIELDS);
    allowed.extend(ISO_FIELDS);
    allowed.push("timezone");
    let arguments = named_arguments(
        operand,
        &allowed,
        || {
            fail(
                ErrorCode::Location40519,
                "$dateFromParts only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location40518,
                format!("Unrecognized argument to $dateFromParts: {other}"),
            )
        },
    )?;
    let has = |name: &str| find_argument(&arguments, name).is_some();
    if !has("year") && !has("isoWeekYear") {
        return Err(fail(
            ErrorCode::Location40516,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    if has("year") && ISO_FIELDS.iter().any(|name| has(name)) {
        return Err(fail(
            ErrorCode::Location40489,
            "$dateFromParts does not allow mixing natural dates with ISO dates",
        ));
    }
    let iso = has("isoWeekYear");
    if iso && CALENDAR_FIELDS.iter().any(|name| has(name)) {
        return Err(fail(
            ErrorCode::Location40525,
            "$dateFromParts does not allow mixing ISO dates with natural dates",
        ));
    }
    let date_fields = if iso { ISO_FIELDS } else { CALENDAR_FIELDS };
    let fields = date_fields
        .iter()
        .chain(TIME_FIELDS.iter())
        .map(|name| optional_argument(&arguments, name, scope))
        .collect::<CommandResult<Vec<_>>>()?;
    Ok(Expr::DateOp(Box::new(DateOp::FromParts {
        iso,
        fields,
        timezone: optional_argument(&arguments, "timezone", scope)?,
    })))
}

/// A date part of `date` at `timezone`; null when either is null or missing.
pub(super) fn evaluate_date_part(
    part: DatePart,
    date: &Expr,
    timezone: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let date = evaluate(date, vars)?;
    if is_nullish(&date) {
        return Ok(Some(Bson::Null));
    }
    let millis = date_millis(&date)?;
    let Some(zone) = evaluate_timezone(timezone, vars)? else {
        return Ok(Some(Bson::Null));
    };
    let local = Local::at(millis, &zone);
    Ok(Some(match part {
        // mongod answers $isoWeekYear as a long.
        DatePart::IsoWeekYear => Bson::Int64(local.iso_week_year()),
        other => Bson::Int32(saturate(local.part(other))),
    }))
}

fn saturate(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

pub(super) const MILLIS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

pub(super) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// ISO day of the week of a day number: Monday is 1, Sunday 7 (1970-01-01 was a Thursday).
pub(super) fn iso_day_of_week(days: i64) -> i64 {
    (days + 3).rem_euclid(7) + 1
}

/// (ISO week-numbering year, ISO week) of a day number: the week holding its Thursday.
fn iso_week_of(days: i64) -> (i64, i64) {
    let thursday = days - iso_day_of_week(days) + 4;
    let (year, _, _) = civil_from_days(thursday);
    (year, (thursday - days_from_civil(year, 1, 1)) / 7 + 1)
}

/// The day number of the Monday of ISO week 1 of `iso_year`.
pub(super) fn iso_week_one_monday(iso_year: i64) -> i64 {
    let january_fourth = days_from_civil(iso_year, 1, 4);
    january_fourth - iso_day_of_week(january_fourth) + 1
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

/// An instant seen in a time zone: its civil parts and the offset in force.
pub(super) struct Local {
    /// Days since 1970-01-01 of the local date.
    pub(super) days: i64,
    pub(super) year: i64,
    pub(super) month: u32,
    pub(super) day: u32,
    pub(super) hour: i64,
    pub(super) minute: i64,
    pub(super) second: i64,
    pub(super) millisecond: i64,
    day_of_week: i64,
    day_of_year: i64,
    /// Seconds east of UTC.
    pub(super) offset_seconds: i64,
}

impl Local {
    pub(super) fn at(millis: i64, zone: &TimeZone) -> Local {
        let offset_seconds = zone.offset_seconds(millis);
        let wall = millis.saturating_add(offset_seconds * 1000);
        let parts = civil(wall);
        Local {
            days: wall.div_euclid(MILLIS_PER_DAY),
            year: parts.year,
            month: parts.month,
            day: parts.day,
            hour: parts.hour,
            minute: parts.minute,
            second: parts.second,
            millisecond: parts.millisecond,
            day_of_week: parts.day_of_week,
            day_of_year: parts.day_of_year,
            offset_seconds,
        }
    }

    fn iso_week_year(&self) -> i64 {
        iso_week_of(self.days).0
    }

    /// mongod's `TimeZone::week`: weeks start on Sunday; days before the first Sunday are week 0.
    fn week(&self) -> i64 {
        (self.day_of_year - self.day_of_week + 7) / 7
    }

    fn part(&self, part: DatePart) -> i64 {
        match part {
            DatePart::Year => self.year,
            DatePart::Month => i64::from(self.month),
            DatePart::DayOfMonth => i64::from(self.day),
            DatePart::Hour => self.hour,
            DatePart::Minute => self.minute,
            DatePart::Second => self.second,
            DatePart::Millisecond => self.millisecond,
            DatePart::DayOfWeek => self.day_of_week,
            DatePart::DayOfYear => self.day_of_year,
            DatePart::Week => self.week(),
            DatePart::IsoWeek => iso_week_of(self.days).1,
            DatePart::IsoWeekYear => self.iso_week_year(),
            DatePart::IsoDayOfWeek => iso_day_of_week(self.days),
        }
    }
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

/// Milliseconds since the epoch of a value mongod can coerce to a date (date, ObjectId,
/// timestamp); `None` for anything else.
pub(super) fn coerce_date(value: &Value) -> Option<i64> {
    match value {
        Some(Bson::DateTime(moment)) => Some(moment.timestamp_millis()),
        Some(Bson::ObjectId(id)) => {
            let seconds =
                u32::from_be_bytes(<[u8; 4]>::try_from(&id.bytes()[..4]).unwrap_or_default());
            Some(i64::from(seconds) * 1000)
        }
        Some(Bson::Timestamp(stamp)) => Some(i64::from(stamp.time) * 1000),
        _ => None,
    }
}

/// [`coerce_date`], failing with mongod's 16006 for anything else.
pub(super) fn date_millis(value: &Value) -> CommandResult<i64> {
    coerce_date(value).ok_or_else(|| {
        fail(
            ErrorCode::Location16006,
            format!(
                "can't convert from BSON type {} to Date",
                value_type_name(value)
            ),
        )
    })
}

/// The specifiers `$dateToString` accepts (mongod's `kDateToStringFormatMap`; `%b` and `%B`
/// since 7.0).
const TO_STRING_SPECIFIERS: &str = "bBdGHjLmMSwuUVYzZ";

/// English month names, as timelib prints and parses them.
pub(super) const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// mongod's `validateFormat`: every `%` is followed by `%` or an allowed specifier.
pub(super) fn validate_format(format: &str, allowed: &str) -> CommandResult<()> {
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            None => {
                return Err(fail(
                    ErrorCode::Location18535,
                    "Unmatched '%' at end of format string",
                ))
            }
            Some(specifier) if specifier == '%' || allowed.contains(specifier) => {}
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok(())
}

pub(super) fn evaluate_date_to_string(
    date: &Expr,
    format: Option<&Expr>,
    timezone: Option<&Expr>,
    on_null: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let date = evaluate(date, vars)?;
    let format = match format {
        None => None,
        Some(format) => Some(match evaluate(format, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => None,
            Some(Bson::String(text)) => {
                validate_format(&text, TO_STRING_SPECIFIERS)?;
                Some(text)
            }
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
        }),
    };
    let zone = evaluate_timezone(timezone, vars)?;
    if is_nullish(&date) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(zone) = zone else {
        return Ok(Some(Bson::Null));
    };
    let format = match format {
        Some(None) => return Ok(Some(Bson::Null)),
        Some(Some(format)) => format,
        None if zone.is_utc() => "%Y-%m-%dT%H:%M:%S.%LZ".to_string(),
        None => "%Y-%m-%dT%H:%M:%S.%L".to_string(),
    };
    let millis = date_millis(&date)?;
    Ok(Some(Bson::String(format_date(&format, millis, &zone)?)))
}

/// mongod's `insertPadded`: zero-padded to `width`, 18537 outside 0..=9999.
fn push_padded(output: &mut String, number: i64, width: usize) -> CommandResult<()> {
    if !(0..=9999).contains(&number) {
        return Err(fail(
            ErrorCode::Location18537,
            format!(
                "Could not convert date to string: date component was outside the supported range of 0-9999: {number}"
            ),
        ));
    }
    output.push_str(&format!("{number:0width$}"));
    Ok(())
}

/// Formats an already validated format string (see [`validate_format`]).
fn format_date(format: &str, millis: i64, zone: &TimeZone) -> CommandResult<String> {
    let local = Local::at(millis, zone);
    let mut output = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            output.push(c);
            continue;
        }
        let Some(specifier) = chars.next() else {
            break;
        };
        match specifier {
            '%' => output.push('%'),
            'b' | 'B' => {
                let name = MONTH_NAMES[(local.month as usize).saturating_sub(1) % 12];
                output.push_str(if specifier == 'b' { &name[..3] } else { name });
            }
            'Y' => push_padded(&mut output, local.year, 4)?,
            'm' => push_padded(&mut output, i64::from(local.month), 2)?,
            'd' => push_padded(&mut output, i64::from(local.day), 2)?,
            'H' => push_padded(&mut output, local.hour, 2)?,
            'M' => push_padded(&mut output, local.minute, 2)?,
            'S' => push_padded(&mut output, local.second, 2)?,
            'L' => push_padded(&mut output, local.millisecond, 3)?,
            'j' => push_padded(&mut output, local.day_of_year, 3)?,
            'w' => push_padded(&mut output, local.day_of_week, 1)?,
            'U' => push_padded(&mut output, local.week(), 2)?,
            'G' => push_padded(&mut output, local.iso_week_year(), 4)?,
            'V' => push_padded(&mut output, local.part(DatePart::IsoWeek), 2)?,
            'u' => push_padded(&mut output, local.part(DatePart::IsoDayOfWeek), 1)?,
            'z' => {
                let offset = local.offset_seconds;
                output.push(if offset < 0 { '-' } else { '+' });
                push_padded(&mut output, (offset / 3600).abs(), 2)?;
                push_padded(&mut output, (offset / 60).abs() % 60, 2)?;
            }
            'Z' => output.push_str(&(local.offset_seconds / 60).to_string()),
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

fn evaluate_to_parts(
    date: &Expr,
    timezone: Option<&Expr>,
    iso8601: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let date = evaluate(date, vars)?;
    let Some(zone) = evaluate_timezone(timezone, vars)? else {
        return Ok(Some(Bson::Null));
    };
    let iso = match iso8601 {
        None => false,
        Some(flag) => match evaluate(flag, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::Boolean(flag)) => flag,
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location40521,
                    format!(
                        "iso8601 must evaluate to a bool, found {}",
                        type_name(&other)
                    ),
                ))
            }
        },
    };
    if is_nullish(&date) {
        return Ok(Some(Bson::Null));
    }
    let local = Local::at(date_millis(&date)?, &zone);
    let mut parts = Document::new();
    let leading: [(&str, i64); 3] = if iso {
        [
            ("isoWeekYear", local.iso_week_year()),
            ("isoWeek", local.part(DatePart::IsoWeek)),
            ("isoDayOfWeek", local.part(DatePart::IsoDayOfWeek)),
        ]
    } else {
        [
            ("year", local.year),
            ("month", i64::from(local.month)),
            ("day", i64::from(local.day)),
        ]
    };
    let time = [
        ("hour", local.hour),
        ("minute", local.minute),
        ("second", local.second),
        ("millisecond", local.millisecond),
    ];
    for (name, value) in leading.into_iter().chain(time) {
        parts.insert(name, Bson::Int32(saturate(value)));
    }
    Ok(Some(Bson::Document(parts)))
}

/// mongod's `evaluateNumberWithDefault(AndBounds)`: `Ok(None)` when the part is null or
/// missing, 40515 when it is not integral, 31034 outside the 16-bit range when `bounded`.
fn date_part_argument(
    field: Option<&Expr>,
    name: &str,
    default: i64,
    bounded: bool,
    vars: &mut Vars,
) -> CommandResult<Option<i64>> {
    let Some(field) = field else {
        return Ok(Some(default));
    };
    let value = evaluate(field, vars)?;
    if is_nullish(&value) {
        return Ok(None);
    }
    let number = value
        .as_ref()
        .and_then(Number::from_bson)
        .and_then(Number::to_exact_i64);
    let Some(number) = number else {
        let shown = value.unwrap_or(Bson::Null);
        return Err(fail(
            ErrorCode::Location40515,
            format!(
                "'{name}' must evaluate to an integer, found {} with value {}",
                type_name(&shown),
                value_string(&shown)
            ),
        ));
    };
    if bounded && !(i64::from(i16::MIN)..=i64::from(i16::MAX)).contains(&number) {
        return Err(fail(
            ErrorCode::Location31034,
            format!(
                "'{name}' must evaluate to a value in the range [-32768, 32767]; value {number} is not in range"
            ),
        ));
    }
    Ok(Some(number))
}

fn evaluate_from_parts(
    iso: bool,
    fields: &[Option<Expr>],
    timezone: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let field = |index: usize| fields.get(index).and_then(Option::as_ref);
    let mut time = [0_i64; 4];
    for (index, (name, bounded)) in [
        ("hour", true),
        ("minute", true),
        ("second", false),
        ("millisecond", false),
    ]
    .into_iter()
    .enumerate()
    {
        match date_part_argument(field(3 + index), name, 0, bounded, vars)? {
            Some(value) => time[index] = value,
            None => return Ok(Some(Bson::Null)),
        }
    }
    let Some(zone) = evaluate_timezone(timezone, vars)? else {
        return Ok(Some(Bson::Null));
    };
    let names = if iso { ISO_FIELDS } else { CALENDAR_FIELDS };
    let mut date = [0_i64; 3];
    for (index, name) in names.into_iter().enumerate() {
        let default = if index == 0 { 1970 } else { 1 };
        match date_part_argument(field(index), name, default, index > 0, vars)? {
            Some(value) => date[index] = value,
            None => return Ok(Some(Bson::Null)),
        }
    }
    let [year, second_field, third_field] = date;
    if !(1..=9999).contains(&year) {
        let (code, name) = if iso {
            (ErrorCode::Location31095, "isoWeekYear")
        } else {
            (ErrorCode::Location40523, "year")
        };
        return Err(fail(
            code,
            format!("'{name}' must evaluate to an integer in the range 1 to 9999, found {year}"),
        ));
    }
    // Out-of-range parts carry into the larger ones, as timelib normalizes them.
    let days = if iso {
        iso_week_one_monday(year) + (second_field - 1) * 7 + (third_field - 1)
    } else {
        let months = year * 12 + (second_field - 1);
        let month = u32::try_from(months.rem_euclid(12) + 1).unwrap_or(1);
        days_from_civil(months.div_euclid(12), month, 1) + (third_field - 1)
    };
    let [hour, minute, second, millisecond] = time.map(i128::from);
    let wall = i128::from(days) * i128::from(MILLIS_PER_DAY)
        + hour * 3_600_000
        + minute * 60_000
        + second * 1000
        + millisecond;
    let wall = i64::try_from(wall).unwrap_or(if wall < 0 { i64::MIN } else { i64::MAX });
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(
        zone.instant_from_wall(wall),
    ))))
}

/// Evaluates the operators of [`DateOp`].
pub(super) fn evaluate_date_op(op: &DateOp, vars: &mut Vars) -> CommandResult<Value> {
    match op {
        DateOp::ToParts {
            date,
            timezone,
            iso8601,
        } => evaluate_to_parts(date, timezone.as_ref(), iso8601.as_ref(), vars),
        DateOp::FromParts {
            iso,
            fields,
            timezone,
        } => evaluate_from_parts(*iso, fields, timezone.as_ref(), vars),
        DateOp::Add { .. } | DateOp::Diff { .. } | DateOp::Trunc { .. } => {
            super::date_arith::evaluate_arithmetic(op, vars)
        }
        DateOp::FromString { .. } => super::date_parse::evaluate_from_string(op, vars),
    }
}

#[cfg(test)]
mod tests {
    //! Expected values are mongod's, from jstests/aggregation/expressions (date_to_string.js,
    //! date_to_parts.js, date_from_parts.js, date_expressions_with_timezones.js,
    //! iso_date_exprs.js) and the manual's examples.
    use bson::{bson, doc, Bson, DateTime};

    use super::super::test_support::{check_errors, check_over, check_values};

    fn date(text: &str) -> Bson {
        Bson::DateTime(DateTime::parse_rfc3339_str(text).expect("test date"))
    }

    #[test]
    fn date_parts_read_utc_and_named_zones() {
        let d = date("2021-03-04T05:06:07.089Z");
        let part = |name: &str| bson!({ name: d.clone() });
        check_values(vec![
            (part("$year"), Bson::Int32(2021)),
            (part("$month"), Bson::Int32(3)),
            (part("$dayOfMonth"), Bson::Int32(4)),
            (bson!({"$hour": [d.clone()]}), Bson::Int32(5)),
            (part("$minute"), Bson::Int32(6)),
            (part("$second"), Bson::Int32(7)),
            (part("$millisecond"), Bson::Int32(89)),
            (part("$dayOfWeek"), Bson::Int32(5)),
            (part("$dayOfYear"), Bson::Int32(63)),
            (
                bson!({"$hour": {"date": d.clone(), "timezone": "+02:30"}}),
                Bson::Int32(7),
            ),
            (bson!({"$year": "$missing"}), Bson::Null),
            (
                bson!({"$year": {"date": d.clone(), "timezone": null}}),
                Bson::Null,
            ),
            // date_expressions_with_timezones.js: midnight UTC is the previous day in New
            // York, and 15:00 UTC the next day in Sydney.
            (
                bson!({"$dayOfMonth": {"date": date("2017-06-16T00:00:00Z"), "timezone": "America/New_York"}}),
                Bson::Int32(15),
            ),
            (
                bson!({"$dayOfMonth": {"date": date("2017-06-17T15:00:33.101Z"), "timezone": "Australia/Sydney"}}),
                Bson::Int32(18),
            ),
        ]);
        check_errors(vec![
            (bson!({"$year": "x"}), 16006),
            (bson!({"$year": [d.clone(), d.clone()]}), 40536),
            (bson!({"$year": []}), 40536),
            (bson!({"$year": {"date": d.clone(), "zone": "UTC"}}), 40535),
            (bson!({"$year": {"timezone": "UTC"}}), 40539),
            (bson!({"$year": {"date": d.clone(), "timezone": 5}}), 40517),
            (
                bson!({"$year": {"date": d.clone(), "timezone": "DoesNot/Exist"}}),
                40485,
            ),
        ]);
    }

    #[test]
    fn week_parts_follow_date_to_string_js() {
        // date_to_string.js's "Natural: %Y-W%w-%U, ISO: %G-W%u-%V" rows; $week is %U.
        let rows = [
            (
                "2017-01-01T15:08:51.911Z",
                "Natural: 2017-W1-01, ISO: 2016-W7-52",
                1,
            ),
            (
                "2017-07-04T15:09:12.911Z",
                "Natural: 2017-W3-27, ISO: 2017-W2-27",
                27,
            ),
            (
                "2017-12-04T15:09:14.911Z",
                "Natural: 2017-W2-49, ISO: 2017-W1-49",
                49,
            ),
        ];
        let mut cases = Vec::new();
        for (text, formatted, week) in rows {
            cases.push((
                bson!({"$dateToString": {"format": "Natural: %Y-W%w-%U, ISO: %G-W%u-%V", "date": date(text)}}),
                Bson::String(formatted.into()),
            ));
            cases.push((bson!({"$week": date(text)}), Bson::Int32(week)));
        }
        cases.push((
            bson!({"$dateToString": {"date": date("1900-12-31T23:59:59Z"), "format": "%V-%G"}}),
            "01-1901".into(),
        ));
        cases.push((
            bson!({"$dateToString": {"date": date("1900-12-31T23:59:59Z"), "format": "%G-%V"}}),
            "1901-01".into(),
        ));
        cases.push((
            bson!({"$isoDayOfWeek": date("2021-04-14T04:48:00Z")}),
            Bson::Int32(3),
        ));
        check_values(cases);
    }

    /// iso_date_exprs.js's rules for New Year's Day and New Year's Eve, over its table of years
    /// (indexed by the weekday they start on).
    #[test]
    fn iso_week_parts_follow_iso_date_exprs_js() {
        let years: [(&str, [i64; 7]); 3] = [
            ("common", [1900, 2002, 2014, 2015, 2010, 2011, 2006]),
            ("leap", [1996, 2008, 1992, 2004, 2016, 2000, 2012]),
            (
                "commonAfterLeap",
                [2001, 2013, 1997, 2009, 1993, 2005, 2017],
            ),
        ];
        let shift = |day: i64, by: i64| (day - 1 + by) % 7 + 1;
        let mut cases = Vec::new();
        for (kind, list) in years {
            for (index, year) in list.into_iter().enumerate() {
                let day = i64::try_from(index).expect("index") + 1;
                let new_year = date(&format!("{year:04}-01-01T00:00:00Z"));
                let eve = date(&format!("{year:04}-12-31T00:00:00Z"));
                let leap = kind == "leap";
                cases.push((bson!({"$isoDayOfWeek": new_year.clone()}), Bson::Int64(day)));
                let eve_day = if leap { shift(day, 1) } else { day };
                cases.push((bson!({"$isoDayOfWeek": eve.clone()}), Bson::Int64(eve_day)));
                let (first_week, first_year) = if day <= 4 {
                    (1, year)
                } else if day == 5 || (day == 6 && kind == "commonAfterLeap") {
                    (53, year - 1)
                } else {
                    (52, year - 1)
                };
                cases.push((
                    bson!({"$isoWeek": new_year.clone()}),
                    Bson::Int64(first_week),
                ));
                cases.push((
                    bson!({"$isoWeekYear": new_year.clone()}),
                    Bson::Int64(first_year),
                ));
                cases.push((
                    bson!({"$dateToString": {"format": "%G-W%V-%u", "date": new_year.clone()}}),
                    Bson::String(format!("{first_year}-W{first_week:02}-{day}")),
                ));
                let (last_week, last_year) = match (leap, day) {
                    (true, 1..=2) | (true, 7) | (false, 1..=3) => (1, year + 1),
                    (true, 3..=4) | (false, 4) => (53, year),
                    _ => (52, year),
                };
                cases.push((bson!({"$isoWeek": eve.clone()}), Bson::Int64(last_week)));
                cases.push((bson!({"$isoWeekYear": eve.clone()}), Bson::Int64(last_year)));
                cases.push((
                    bson!({"$dateToString": {"format": "%G-W%V-%u", "date": eve.clone()}}),
                    Bson::String(format!("{last_year}-W{last_week:02}-{eve_day}")),
                ));
            }
        }
        // $isoDayOfWeek and $isoWeek answer ints, $isoWeekYear a long.
        let cases = cases
            .into_iter()
            .map(|(expression, expected)| {
                let is_long = expression
                    .as_document()
                    .is_some_and(|document| document.contains_key("$isoWeekYear"));
                match expected {
                    Bson::Int64(value) if !is_long => (
                        expression,
                        Bson::Int32(i32::try_from(value).expect("small")),
                    ),
                    other => (expression, other),
                }
            })
            .collect();
        check_values(cases);
    }

    #[test]
    fn date_to_string_formats_in_zones_as_date_to_string_js() {
        let with_zone = bson!({"$dateToString": {"format": "%Y-%m-%d %H:%M:%S %z (%Z minutes)", "date": "$date", "timezone": "$tz"}});
        let row = |text: &str, tz: &str| doc! {"date": DateTime::parse_rfc3339_str(text).expect("date"), "tz": tz};
        check_over(
            with_zone,
            vec![
                (
                    row("2017-07-04T14:56:42.911Z", "UTC"),
                    "2017-07-04 14:56:42 +0000 (0 minutes)".into(),
                ),
                (
                    row("2017-07-04T14:56:42.911Z", "Europe/London"),
                    "2017-07-04 15:56:42 +0100 (60 minutes)".into(),
                ),
                (
                    row("2017-07-04T14:56:42.911Z", "America/New_York"),
                    "2017-07-04 10:56:42 -0400 (-240 minutes)".into(),
                ),
                (
                    row("2017-07-04T14:56:42.911Z", "Australia/Eucla"),
                    "2017-07-04 23:41:42 +0845 (525 minutes)".into(),
                ),
                (
                    row("2017-07-04T14:56:42.911Z", "Asia/Kathmandu"),
                    "2017-07-04 20:41:42 +0545 (345 minutes)".into(),
                ),
                (
                    row("1900-07-10T11:41:22.418Z", "America/Caracas"),
                    "1900-07-10 07:13:42 -0427 (-267 minutes)".into(),
                ),
                (
                    row("2017-01-04T15:08:51.911Z", "America/New_York"),
                    "2017-01-04 10:08:51 -0500 (-300 minutes)".into(),
                ),
            ],
        );
        let d = date("2014-01-01T08:15:39.736Z");
        let format = |format: &str, tz: &str| bson!({"$dateToString": {"format": format, "date": d.clone(), "timezone": tz}});
        check_values(vec![
            // The manual's example.
            (
                bson!({"$dateToString": {"format": "%Y-%m-%d", "date": d.clone()}}),
                "2014-01-01".into(),
            ),
            (
                format("%H:%M:%S:%L%z", "America/New_York"),
                "03:15:39:736-0500".into(),
            ),
            (
                format("%H:%M:%S:%L%z", "+04:30"),
                "12:45:39:736+0430".into(),
            ),
            (format("%Z", "America/New_York"), "-300".into()),
            (format("%Z", "+04:30"), "270".into()),
            (format("%b", "+04:30"), "Jan".into()),
            (format("%B", "+04:30"), "January".into()),
            (
                bson!({"$dateToString": {"format": "%b (%B) %d, %Y", "date": date("2017-07-04T15:09:12.911Z")}}),
                "Jul (July) 04, 2017".into(),
            ),
            // Without a format: ...Z in UTC, no Z in another zone (the manual).
            (
                bson!({"$dateToString": {"date": d.clone()}}),
                "2014-01-01T08:15:39.736Z".into(),
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "timezone": "America/New_York"}}),
                "2014-01-01T03:15:39.736".into(),
            ),
            (
                bson!({"$dateToString": {"date": date("1969-12-31T23:59:59.999Z")}}),
                "1969-12-31T23:59:59.999Z".into(),
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": null}}),
                Bson::Null,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": "$missing"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "timezone": "$missing"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateToString": {"date": "$missing", "onNull": "none"}}),
                "none".into(),
            ),
            (
                bson!({"$dateToString": {"date": null, "timezone": "Europe/Oslo"}}),
                Bson::Null,
            ),
        ]);
        check_errors(vec![
            (
                bson!({"$dateToString": {"date": d.clone(), "format": 5}}),
                18533,
            ),
            (
                bson!({"$dateToString": {"format": "%Y", "timezone": "$tz"}}),
                18628,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": "%Y", "timezone": 5}}),
                40517,
            ),
            (
                bson!({"$dateToString": {"format": "%Y", "date": 42}}),
                16006,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": "%Y", "timezone": "DoesNotExist"}}),
                40485,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": "%"}}),
                18535,
            ),
            (
                bson!({"$dateToString": {"date": d.clone(), "format": "%n"}}),
                18536,
            ),
            // The format is checked before a missing date makes the result null.
            (
                bson!({"$dateToString": {"date": "$missing", "format": "%n"}}),
                18536,
            ),
            (bson!({"$dateToString": 1}), 18629),
            (bson!({"$dateToString": {"date": d.clone(), "x": 1}}), 18534),
        ]);
    }

    #[test]
    fn date_to_parts_as_date_to_parts_js() {
        let d = date("2017-06-19T15:13:25.713Z");
        let parts = |tz: &str, iso: bool| bson!({"$dateToParts": {"date": d.clone(), "timezone": tz, "iso8601": iso}});
        let calendar = |hour: i32| {
            Bson::Document(
                doc! {"year": 2017, "month": 6, "day": 19, "hour": hour, "minute": 13, "second": 25, "millisecond": 713},
            )
        };
        let iso = |hour: i32| {
            Bson::Document(
                doc! {"isoWeekYear": 2017, "isoWeek": 25, "isoDayOfWeek": 1, "hour": hour, "minute": 13, "second": 25, "millisecond": 713},
            )
        };
        check_values(vec![
            (bson!({"$dateToParts": {"date": d.clone()}}), calendar(15)),
            (parts("UTC", false), calendar(15)),
            (parts("Europe/London", false), calendar(16)),
            (parts("America/New_York", false), calendar(11)),
            (parts("UTC", true), iso(15)),
            (parts("Europe/London", true), iso(16)),
            (parts("America/New_York", true), iso(11)),
            (
                bson!({"$dateToParts": {"date": bson::oid::ObjectId::parse_str("58c7cba47bbadf523cf2c313").expect("oid"), "timezone": "Europe/London"}}),
                Bson::Document(
                    doc! {"year": 2017, "month": 3, "day": 14, "hour": 10, "minute": 53, "second": 24, "millisecond": 0},
                ),
            ),
            (
                bson!({"$dateToParts": {"date": d.clone(), "timezone": "$tz"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateToParts": {"date": d.clone(), "iso8601": "$iso8601"}}),
                Bson::Null,
            ),
            (bson!({"$dateToParts": {"date": "$date"}}), Bson::Null),
        ]);
        check_errors(vec![
            (bson!({"$dateToParts": {"timezone": "$tz"}}), 40522),
            (
                bson!({"$dateToParts": {"date": "$date", "timezone": "Europe/London", "iso8601": 5}}),
                40521,
            ),
            (bson!({"$dateToParts": {"date": 42}}), 16006),
            (
                bson!({"$dateToParts": {"date": "$date", "timezone": 5}}),
                40517,
            ),
            (
                bson!({"$dateToParts": {"date": "$date", "timezone": "DoesNot/Exist"}}),
                40485,
            ),
            (bson!({"$dateToParts": 1}), 40524),
            (bson!({"$dateToParts": {"date": 1, "x": 1}}), 40520),
        ]);
    }

    #[test]
    fn date_from_parts_as_date_from_parts_js() {
        let berlin = date("2017-06-23T12:27:37.742Z");
        check_values(vec![
            (
                bson!({"$dateFromParts": {"year": 2017, "timezone": "Europe/Amsterdam"}}),
                date("2016-12-31T23:00:00Z"),
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "timezone": "Asia/Tokyo"}}),
                date("2016-12-31T15:00:00Z"),
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "month": 6, "day": 19, "timezone": "America/Chicago"}}),
                date("2017-06-19T05:00:00Z"),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "Europe/Berlin", "year": 2017, "month": 6, "day": 23, "hour": 14, "minute": 27, "second": 37, "millisecond": 742}}),
                berlin.clone(),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "Europe/Berlin", "year": 2017_i64, "month": 6_i64, "day": 23_i64, "hour": 14_i64, "minute": 27_i64, "second": 37_i64, "millisecond": 742_i64}}),
                berlin.clone(),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "Europe/Berlin", "year": 2017.0, "month": 6.0, "day": 23, "hour": 14, "minute": 27, "second": 37, "millisecond": 742}}),
                berlin.clone(),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "+02:00", "year": 2017, "month": 6, "day": 23, "hour": 14, "minute": 27, "second": 37, "millisecond": 742}}),
                berlin.clone(),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "-02", "year": 2017, "month": 6, "day": 23, "hour": 10, "minute": 27, "second": 37, "millisecond": 742}}),
                berlin.clone(),
            ),
            (
                bson!({"$dateFromParts": {"timezone": "+04:15", "year": 2017, "month": 6, "day": 23, "hour": 16, "minute": 42, "second": 37, "millisecond": 742}}),
                berlin.clone(),
            ),
            (bson!({"$dateFromParts": {"year": "$year"}}), Bson::Null),
            (
                bson!({"$dateFromParts": {"year": 2017, "month": "$month"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "millisecond": "$millisecond"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromParts": {"isoWeekYear": 2017, "isoWeek": "$isoWeek"}}),
                Bson::Null,
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "timezone": "$timezone"}}),
                Bson::Null,
            ),
        ]);
        // Out-of-range parts carry into the larger ones.
        let carried =
            |parts: Bson, expected: &str| (bson!({ "$dateFromParts": parts }), date(expected));
        check_values(vec![
            carried(bson!({"year": 1}), "0001-01-01T00:00:00.000Z"),
            carried(bson!({"year": 9999}), "9999-01-01T00:00:00.000Z"),
            carried(
                bson!({"year": 2017, "month": -1}),
                "2016-11-01T00:00:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "month": 0}),
                "2016-12-01T00:00:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "month": 13}),
                "2018-01-01T00:00:00.000Z",
            ),
            carried(bson!({"year": 2017, "day": -1}), "2016-12-30T00:00:00.000Z"),
            carried(bson!({"year": 2017, "day": 0}), "2016-12-31T00:00:00.000Z"),
            carried(bson!({"year": 2017, "day": 61}), "2017-03-02T00:00:00.000Z"),
            carried(
                bson!({"year": 2017, "hour": -1}),
                "2016-12-31T23:00:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "hour": 25}),
                "2017-01-02T01:00:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "minute": -1}),
                "2016-12-31T23:59:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "minute": 61}),
                "2017-01-01T01:01:00.000Z",
            ),
            carried(
                bson!({"year": 2017, "second": -1}),
                "2016-12-31T23:59:59.000Z",
            ),
            carried(
                bson!({"year": 2017, "second": 71_841_012}),
                "2019-04-12T11:50:12.000Z",
            ),
            carried(
                bson!({"year": 1970, "second": 1_502_095_918}),
                "2017-08-07T08:51:58.000Z",
            ),
            carried(
                bson!({"year": 2017, "millisecond": -1}),
                "2016-12-31T23:59:59.999Z",
            ),
            carried(
                bson!({"year": 2017, "millisecond": 1001}),
                "2017-01-01T00:00:01.001Z",
            ),
            carried(
                bson!({"year": 1970, "millisecond": 1_502_095_918_551_i64}),
                "2017-08-07T08:51:58.551Z",
            ),
        ]);
        check_errors(vec![
            (bson!({"$dateFromParts": "$date"}), 40519),
            (bson!({"$dateFromParts": {"timezone": "$timezone"}}), 40516),
            (bson!({"$dateFromParts": {"year": false}}), 40515),
            (
                bson!({"$dateFromParts": {"year": 2017, "hour": false}}),
                40515,
            ),
            (
                bson!({"$dateFromParts": {"year": 2012, "timezone": "DoesNot/Exist"}}),
                40485,
            ),
            (
                bson!({"$dateFromParts": {"year": 2012, "timezone": 5}}),
                40517,
            ),
            (bson!({"$dateFromParts": {"year": 10002}}), 40523),
            (bson!({"$dateFromParts": {"year": -1}}), 40523),
            (bson!({"$dateFromParts": {"year": 0}}), 40523),
            (bson!({"$dateFromParts": {"year": 10000}}), 40523),
            (bson!({"$dateFromParts": {"isoWeekYear": 10000}}), 31095),
            (
                bson!({"$dateFromParts": {"year": 2017, "month": 32768}}),
                31034,
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "minute": -32769}}),
                31034,
            ),
            (bson!({"$dateFromParts": {"year": 2017, "x": 1}}), 40518),
            (
                bson!({"$dateFromParts": {"year": 2017, "isoWeek": 1}}),
                40489,
            ),
            (
                bson!({"$dateFromParts": {"isoWeekYear": 2017, "month": 1}}),
                40525,
            ),
        ]);
    }
}
