//! Date arithmetic: `$dateAdd`, `$dateSubtract`, `$dateDiff` and `$dateTrunc`, following
//! mongod's `date_time_support.cpp` step for step.
//!
//! Invariants: units of a day or longer move the local wall clock of the time zone (month
//! arithmetic clamps the day to the month's last day); shorter units move the instant itself
//! in named zones, and the wall clock (the same thing) in UTC and fixed offsets. `$dateDiff`
//! counts unit boundaries crossed in local time, correcting hours and shorter units by the
//! change of offset. `$dateTrunc` bins from 2000-01-01 in the zone (moved to the first day of
//! the week for weeks). Overflows answer mongod's codes, never wrap.

use bson::{Bson, DateTime};

use super::date::{
    coerce_date, days_from_civil, iso_day_of_week, optional_argument, DateOp, Local, MILLIS_PER_DAY,
};
use super::timezone::{evaluate_timezone, TimeZone};
use super::{
    evaluate, fail, find_argument, is_nullish, named_arguments, parse, Expr, Scope, Value, Vars,
};
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// mongod's `TimeUnit`, shared by the date operators, range windows and `$densify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimeUnit {
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

impl TimeUnit {
    /// The unit mongod's `parseTimeUnit` names `name`.
    pub(crate) fn from_name(name: &str) -> Option<TimeUnit> {
        Some(match name {
            "millisecond" => TimeUnit::Millisecond,
            "second" => TimeUnit::Second,
            "minute" => TimeUnit::Minute,
            "hour" => TimeUnit::Hour,
            "day" => TimeUnit::Day,
            "week" => TimeUnit::Week,
            "month" => TimeUnit::Month,
            "quarter" => TimeUnit::Quarter,
            "year" => TimeUnit::Year,
            _ => return None,
        })
    }

    /// Milliseconds in one unit, for the units of fixed length in UTC (`week` and below).
    pub(crate) fn utc_millis(self) -> Option<i64> {
        match self {
            TimeUnit::Day => Some(MILLIS_PER_DAY),
            TimeUnit::Week => Some(7 * MILLIS_PER_DAY),
            other => other.fixed_millis(),
        }
    }

    /// mongod's `dateAdd` in UTC, saturating at the ends of the representable instants (a
    /// window bound or a `$densify` step past them reaches no further date).
    pub(crate) fn add_utc(self, millis: i64, amount: i64) -> i64 {
        date_add(millis, self, amount, &TimeZone::Utc).unwrap_or(if amount < 0 {
            i64::MIN
        } else {
            i64::MAX
        })
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Millisecond => "millisecond",
            TimeUnit::Second => "second",
            TimeUnit::Minute => "minute",
            TimeUnit::Hour => "hour",
            TimeUnit::Day => "day",
            TimeUnit::Week => "week",
            TimeUnit::Month => "month",
            TimeUnit::Quarter => "quarter",
            TimeUnit::Year => "year",
        }
    }

    /// Milliseconds in one unit, for the units of fixed length below a day.
    fn fixed_millis(self) -> Option<i64> {
        match self {
            TimeUnit::Millisecond => Some(1),
            TimeUnit::Second => Some(1000),
            TimeUnit::Minute => Some(60_000),
            TimeUnit::Hour => Some(3_600_000),
            _ => None,
        }
    }
}

/// mongod's `parseTimeUnit(Value, name)`: 5439013 for a non-string, FailedToParse for an
/// unknown name.
fn parse_time_unit(value: &Bson, operator: &str) -> CommandResult<TimeUnit> {
    let Bson::String(name) = value else {
        return Err(fail(
            ErrorCode::Location5439013,
            format!(
                "{operator} requires 'unit' to be a string, but got {}",
                type_name(value)
            ),
        ));
    };
    TimeUnit::from_name(name).ok_or_else(|| {
        fail(
            ErrorCode::FailedToParse,
            format!(
                "{operator} parameter 'unit' value parsing failed :: caused by :: unknown time unit value: {name}"
            ),
        )
    })
}

/// mongod's `parseDayOfWeek`: ISO numbering (Monday 1 .. Sunday 7), names case-insensitive.
fn parse_day_of_week(value: &Bson, operator: &str) -> CommandResult<i64> {
    let Bson::String(name) = value else {
        return Err(fail(
            ErrorCode::Location5439015,
            format!(
                "{operator} requires 'startOfWeek' to be a string, but got {}",
                type_name(value)
            ),
        ));
    };
    Ok(match name.to_lowercase().as_str() {
        "monday" | "mon" => 1,
        "tuesday" | "tue" => 2,
        "wednesday" | "wed" => 3,
        "thursday" | "thu" => 4,
        "friday" | "fri" => 5,
        "saturday" | "sat" => 6,
        "sunday" | "sun" => 7,
        _ => {
            return Err(fail(
                ErrorCode::Location5439016,
                format!(
                    "{operator} parameter 'startOfWeek' value cannot be recognized as a day of a week: {name}"
                ),
            ))
        }
    })
}

/// mongod's default first day of the week.
const SUNDAY: i64 = 7;

// ----- parsing -------------------------------------------------------------------------------

fn required(arguments: &[(&str, &Bson)], name: &str, scope: &mut Scope) -> CommandResult<Expr> {
    let value = find_argument(arguments, name)
        .ok_or_else(|| CommandError::internal(format!("missing {name}")))?;
    parse(value, scope)
}

pub(super) fn parse_date_add(name: &str, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["startDate", "unit", "amount", "timezone"],
        || {
            fail(
                ErrorCode::Location5166400,
                format!("{name} expects an object as its argument"),
            )
        },
        |other| {
            fail(
                ErrorCode::Location5166401,
                format!(
                    "Unrecognized argument to {name}: {other}. Expected arguments are startDate, unit, amount, and optionally timezone."
                ),
            )
        },
    )?;
    if ["startDate", "unit", "amount"]
        .iter()
        .any(|needed| find_argument(&arguments, needed).is_none())
    {
        return Err(fail(
            ErrorCode::Location5166402,
            format!("{name} requires startDate, unit, and amount to be present"),
        ));
    }
    Ok(Expr::DateOp(Box::new(DateOp::Add {
        subtract: name == "$dateSubtract",
        start_date: required(&arguments, "startDate", scope)?,
        unit: required(&arguments, "unit", scope)?,
        amount: required(&arguments, "amount", scope)?,
        timezone: optional_argument(&arguments, "timezone", scope)?,
    })))
}

pub(super) fn parse_date_diff(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
        || {
            fail(
                ErrorCode::Location5166301,
                "$dateDiff only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location5166302,
                format!("Unrecognized argument to $dateDiff: {other}"),
            )
        },
    )?;
    for (needed, code) in [
        ("startDate", ErrorCode::Location5166303),
        ("endDate", ErrorCode::Location5166304),
        ("unit", ErrorCode::Location5166305),
    ] {
        if find_argument(&arguments, needed).is_none() {
            return Err(fail(
                code,
                format!("Missing '{needed}' parameter to $dateDiff"),
            ));
        }
    }
    Ok(Expr::DateOp(Box::new(DateOp::Diff {
        start_date: required(&arguments, "startDate", scope)?,
        end_date: required(&arguments, "endDate", scope)?,
        unit: required(&arguments, "unit", scope)?,
        timezone: optional_argument(&arguments, "timezone", scope)?,
        start_of_week: optional_argument(&arguments, "startOfWeek", scope)?,
    })))
}

pub(super) fn parse_date_trunc(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["date", "unit", "binSize", "timezone", "startOfWeek"],
        || {
            fail(
                ErrorCode::Location5439007,
                "$dateTrunc only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location5439008,
                format!(
                    "Unrecognized argument to $dateTrunc: {other}. Expected arguments are date, unit, and optionally, binSize, timezone, startOfWeek"
                ),
            )
        },
    )?;
    for (needed, code) in [
        ("date", ErrorCode::Location5439009),
        ("unit", ErrorCode::Location5439010),
    ] {
        if find_argument(&arguments, needed).is_none() {
            return Err(fail(
                code,
                format!("Missing '{needed}' parameter to $dateTrunc"),
            ));
        }
    }
    Ok(Expr::DateOp(Box::new(DateOp::Trunc {
        date: required(&arguments, "date", scope)?,
        unit: required(&arguments, "unit", scope)?,
        bin_size: optional_argument(&arguments, "binSize", scope)?,
        timezone: optional_argument(&arguments, "timezone", scope)?,
        start_of_week: optional_argument(&arguments, "startOfWeek", scope)?,
    })))
}

// ----- evaluation ----------------------------------------------------------------------------

pub(super) fn evaluate_arithmetic(op: &DateOp, vars: &mut Vars) -> CommandResult<Value> {
    let result = match op {
        DateOp::Add {
            subtract,
            start_date,
            unit,
            amount,
            timezone,
        } => evaluate_add(*subtract, start_date, unit, amount, timezone.as_ref(), vars)?,
        DateOp::Diff {
            start_date,
            end_date,
            unit,
            timezone,
            start_of_week,
        } => evaluate_diff(
            start_date,
            end_date,
            unit,
            timezone.as_ref(),
            start_of_week.as_ref(),
            vars,
        )?,
        DateOp::Trunc {
            date,
            unit,
            bin_size,
            timezone,
            start_of_week,
        } => evaluate_trunc(
            date,
            unit,
            bin_size.as_ref(),
            timezone.as_ref(),
            start_of_week.as_ref(),
            vars,
        )?,
        _ => return Err(CommandError::internal("not a date arithmetic operator")),
    };
    Ok(Some(result.unwrap_or(Bson::Null)))
}

fn evaluate_add(
    subtract: bool,
    start_date: &Expr,
    unit: &Expr,
    amount: &Expr,
    timezone: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Option<Bson>> {
    let name = if subtract {
        "$dateSubtract"
    } else {
        "$dateAdd"
    };
    let start = evaluate(start_date, vars)?;
    if is_nullish(&start) {
        return Ok(None);
    }
    let unit = match evaluate(unit, vars)? {
        Some(value) if !matches!(value, Bson::Null | Bson::Undefined) => {
            parse_time_unit(&value, name)?
        }
        _ => return Ok(None),
    };
    let amount = evaluate(amount, vars)?;
    let Some(amount) = amount.filter(|value| !matches!(value, Bson::Null | Bson::Undefined)) else {
        return Ok(None);
    };
    let Some(zone) = evaluate_timezone(timezone, vars)? else {
        return Ok(None);
    };
    let Some(start) = coerce_date(&start) else {
        return Err(fail(
            ErrorCode::Location5166403,
            format!("{name} requires startDate to be convertible to a date"),
        ));
    };
    let Some(mut amount) = Number::from_bson(&amount).and_then(Number::to_exact_i64) else {
        return Err(fail(
            ErrorCode::Location5166405,
            format!("{name} expects integer amount of time units"),
        ));
    };
    if subtract {
        if amount == i64::MIN {
            return Err(fail(
                ErrorCode::Location6045000,
                format!("invalid $dateSubtract 'amount' parameter value: {amount}"),
            ));
        }
        amount = -amount;
    }
    date_add(start, unit, amount, &zone)
        .map(|millis| Some(Bson::DateTime(DateTime::from_millis(millis))))
}

/// mongod's `isDateAddAmountValid`: the amount roughly fits the range of a date.
fn amount_is_valid(amount: i64, unit: TimeUnit) -> bool {
    const MAX_DAYS: i64 = (u64::MAX / 86_400_000) as i64 + 1;
    const MAX_YEARS: i64 = MAX_DAYS / 365 + 1;
    let max = match unit {
        TimeUnit::Year => MAX_YEARS,
        TimeUnit::Quarter => MAX_YEARS * 4,
        TimeUnit::Month => MAX_YEARS * 12,
        TimeUnit::Week => MAX_DAYS / 7,
        TimeUnit::Day => MAX_DAYS,
        TimeUnit::Hour => MAX_DAYS * 24,
        TimeUnit::Minute => MAX_DAYS * 24 * 60,
        TimeUnit::Second => MAX_DAYS * 24 * 60 * 60,
        TimeUnit::Millisecond => return true,
    };
    -max < amount && amount < max
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    u32::try_from(days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1))
        .unwrap_or(31)
}

fn overflowed() -> CommandError {
    fail(ErrorCode::Location5166406, "dateAdd overflowed")
}

/// mongod's `dateAdd`.
fn date_add(start: i64, unit: TimeUnit, amount: i64, zone: &TimeZone) -> CommandResult<i64> {
    if unit == TimeUnit::Millisecond {
        return start.checked_add(amount).ok_or_else(overflowed);
    }
    if !amount_is_valid(amount, unit) {
        return Err(fail(
            ErrorCode::Location5976500,
            format!(
                "invalid dateAdd 'amount' parameter value: {amount} {}",
                unit.name()
            ),
        ));
    }
    if let Some(unit_millis) = unit.fixed_millis() {
        // Below a day the instant moves: in a named zone mongod adds in UTC; in UTC or a fixed
        // offset the wall clock and the instant move together anyway.
        let delta = i128::from(amount) * i128::from(unit_millis);
        return i64::try_from(i128::from(start) + delta).map_err(|_| overflowed());
    }
    let local = Local::at(start, zone);
    let time_of_day = i128::from(
        local.hour * 3_600_000 + local.minute * 60_000 + local.second * 1000 + local.millisecond,
    );
    let days: i128 = match unit {
        TimeUnit::Day => i128::from(local.days) + i128::from(amount),
        TimeUnit::Week => i128::from(local.days) + i128::from(amount) * 7,
        _ => {
            let months = match unit {
                TimeUnit::Year => i128::from(amount) * 12,
                TimeUnit::Quarter => i128::from(amount) * 3,
                _ => i128::from(amount),
            };
            let total = i128::from(local.year) * 12 + i128::from(local.month - 1) + months;
            let year = i64::try_from(total.div_euclid(12)).map_err(|_| overflowed())?;
            let month = u32::try_from(total.rem_euclid(12) + 1).map_err(|_| overflowed())?;
            // The day of the month is clamped to the last day of the resulting month.
            let day = local.day.min(days_in_month(year, month));
            i128::from(days_from_civil(year, month, day))
        }
    };
    let wall = days * i128::from(MILLIS_PER_DAY) + time_of_day;
    let wall = i64::try_from(wall).map_err(|_| overflowed())?;
    Ok(zone.instant_from_wall(wall))
}

fn date_argument(value: &Value, operator: &str, parameter: &str) -> CommandResult<i64> {
    coerce_date(value).ok_or_else(|| {
        fail(
            ErrorCode::Location5166307,
            format!(
                "{operator} requires '{parameter}' to be a date, but got {}",
                super::value_type_name(value)
            ),
        )
    })
}

/// Adds context to a timezone error the way mongod's `addContextToAssertionException` does.
fn timezone_with_context(
    timezone: Option<&Expr>,
    operator: &str,
    vars: &mut Vars,
) -> CommandResult<Option<TimeZone>> {
    evaluate_timezone(timezone, vars).map_err(|error| {
        CommandError::new(
            error.code,
            format!(
                "{operator} parameter 'timezone' value parsing failed :: caused by :: {}",
                error.errmsg
            ),
        )
    })
}

/// The start of week argument, evaluated only for week units; `Ok(None)` when it is null.
fn start_of_week(
    unit: TimeUnit,
    start_of_week: Option<&Expr>,
    operator: &str,
    vars: &mut Vars,
) -> CommandResult<Option<i64>> {
    if unit != TimeUnit::Week {
        return Ok(Some(SUNDAY));
    }
    let Some(expr) = start_of_week else {
        return Ok(Some(SUNDAY));
    };
    match evaluate(expr, vars)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(value) => parse_day_of_week(&value, operator).map(Some),
    }
}

fn evaluate_unit(unit: &Expr, operator: &str, vars: &mut Vars) -> CommandResult<Option<TimeUnit>> {
    match evaluate(unit, vars)? {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(value) => parse_time_unit(&value, operator).map(Some),
    }
}

fn evaluate_diff(
    start_date: &Expr,
    end_date: &Expr,
    unit: &Expr,
    timezone: Option<&Expr>,
    start_of_week_expr: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Option<Bson>> {
    let start = evaluate(start_date, vars)?;
    if is_nullish(&start) {
        return Ok(None);
    }
    let end = evaluate(end_date, vars)?;
    if is_nullish(&end) {
        return Ok(None);
    }
    let Some(unit) = evaluate_unit(unit, "$dateDiff", vars)? else {
        return Ok(None);
    };
    let Some(week_start) = start_of_week(unit, start_of_week_expr, "$dateDiff", vars)? else {
        return Ok(None);
    };
    let Some(zone) = timezone_with_context(timezone, "$dateDiff", vars)? else {
        return Ok(None);
    };
    let start = date_argument(&start, "$dateDiff", "startDate")?;
    let end = date_argument(&end, "$dateDiff", "endDate")?;
    date_diff(start, end, unit, &zone, week_start).map(|count| Some(Bson::Int64(count)))
}

/// Day of the week of a local date counted from `week_start` (0 is the first day).
fn day_in_week(days: i64, week_start: i64) -> i64 {
    (iso_day_of_week(days) - week_start + 7) % 7
}

fn diff_weeks(start_days: i64, end_days: i64, week_start: i64) -> i64 {
    // Truncating division, as mongod's.
    (end_days - start_days + day_in_week(start_days, week_start)
        - day_in_week(end_days, week_start))
        / 7
}

fn diff_months(start: (i64, u32), end: (i64, u32)) -> i64 {
    (end.0 - start.0) * 12 + i64::from(end.1) - i64::from(start.1)
}

fn diff_quarters(start: (i64, u32), end: (i64, u32)) -> i64 {
    let quarter = |month: u32| i64::from((month - 1) / 3);
    (end.0 - start.0) * 4 + quarter(end.1) - quarter(start.1)
}

/// mongod's `dateDiff`: unit boundaries crossed from `start` to `end` in `zone`.
fn date_diff(
    start: i64,
    end: i64,
    unit: TimeUnit,
    zone: &TimeZone,
    week_start: i64,
) -> CommandResult<i64> {
    if unit == TimeUnit::Millisecond {
        return end
            .checked_sub(start)
            .ok_or_else(|| fail(ErrorCode::Location5166308, "dateDiff overflowed"));
    }
    let from = Local::at(start, zone);
    let to = Local::at(end, zone);
    let days = to.days - from.days;
    let hours = to.hour - from.hour + days * 24;
    let minutes = to.minute - from.minute + hours * 60;
    let offset_change = from.offset_seconds - to.offset_seconds;
    Ok(match unit {
        TimeUnit::Year => to.year - from.year,
        TimeUnit::Quarter => diff_quarters((from.year, from.month), (to.year, to.month)),
        TimeUnit::Month => diff_months((from.year, from.month), (to.year, to.month)),
        TimeUnit::Week => diff_weeks(from.days, to.days, week_start),
        TimeUnit::Day => days,
        TimeUnit::Hour => hours + offset_change / 3600,
        TimeUnit::Minute => minutes + offset_change / 60,
        TimeUnit::Second => to.second - from.second + minutes * 60 + offset_change,
        TimeUnit::Millisecond => end - start,
    })
}

fn evaluate_trunc(
    date: &Expr,
    unit: &Expr,
    bin_size: Option<&Expr>,
    timezone: Option<&Expr>,
    start_of_week_expr: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Option<Bson>> {
    let date = evaluate(date, vars)?;
    if is_nullish(&date) {
        return Ok(None);
    }
    let bin_size = match bin_size {
        None => 1,
        Some(expr) => match evaluate(expr, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(None),
            Some(value) => {
                let Some(size) = Number::from_bson(&value).and_then(Number::to_exact_i64) else {
                    return Err(fail(
                        ErrorCode::Location5439017,
                        format!(
                            "$dateTrunc requires 'binSize' to be a 64-bit integer, but got value '{}' of type {}",
                            value_string(&value),
                            type_name(&value)
                        ),
                    ));
                };
                if size <= 0 {
                    return Err(fail(
                        ErrorCode::Location5439018,
                        format!("$dateTrunc requires 'binSize' to be greater than 0, but got value {size}"),
                    ));
                }
                size
            }
        },
    };
    let Some(unit) = evaluate_unit(unit, "$dateTrunc", vars)? else {
        return Ok(None);
    };
    let Some(week_start) = start_of_week(unit, start_of_week_expr, "$dateTrunc", vars)? else {
        return Ok(None);
    };
    let Some(zone) = timezone_with_context(timezone, "$dateTrunc", vars)? else {
        return Ok(None);
    };
    let date = date_argument(&date, "$dateTrunc", "date")?;
    date_trunc(date, unit, bin_size, &zone, week_start)
        .map(|millis| Some(Bson::DateTime(DateTime::from_millis(millis))))
}

fn trunc_overflowed(code: ErrorCode) -> CommandError {
    fail(code, "dateTrunc overflowed")
}

/// mongod's `truncateDate`, from its default reference point 2000-01-01 in `zone`.
fn date_trunc(
    date: i64,
    unit: TimeUnit,
    bin_size: i64,
    zone: &TimeZone,
    week_start: i64,
) -> CommandResult<i64> {
    const REFERENCE_UTC_MILLIS: i64 = 946_684_800_000; // 2000-01-01T00:00:00Z
    let reference_days = days_from_civil(2000, 1, 1);
    let mut reference_millis =
        REFERENCE_UTC_MILLIS - zone.offset_seconds(REFERENCE_UTC_MILLIS) * 1000;
    let mut reference_day_of_month = 1_i64;
    if unit == TimeUnit::Week {
        // 2000-01-01 was a Saturday: move forward to the first day of the week.
        let saturday = (6 - week_start + 7) % 7;
        let adjust = (7 - saturday) % 7;
        reference_millis += adjust * MILLIS_PER_DAY;
        reference_day_of_month += adjust;
    }
    if let Some(unit_millis) = unit.fixed_millis() {
        let bin_millis = bin_size
            .checked_mul(unit_millis)
            .ok_or_else(|| trunc_overflowed(ErrorCode::Location5439002))?;
        let shifted = date
            .checked_sub(reference_millis)
            .ok_or_else(|| trunc_overflowed(ErrorCode::Location5439000))?;
        return date
            .checked_sub(shifted.rem_euclid(bin_millis))
            .ok_or_else(|| trunc_overflowed(ErrorCode::Location5439001));
    }
    if bin_size > 100_000_000_000 {
        return Err(fail(
            ErrorCode::Location5439006,
            "dateTrunc unsupported binSize value",
        ));
    }
    let local = Local::at(date, zone);
    let reference = (2000_i64, 1_u32);
    let distance = match unit {
        TimeUnit::Day => local.days - reference_days,
        TimeUnit::Week => diff_weeks(
            reference_days + reference_day_of_month - 1,
            local.days,
            week_start,
        ),
        TimeUnit::Month => diff_months(reference, (local.year, local.month)),
        TimeUnit::Quarter => diff_quarters(reference, (local.year, local.month)),
        _ => local.year - 2000,
    };
    let lower_bound = distance
        .checked_sub(distance.rem_euclid(bin_size))
        .ok_or_else(|| trunc_overflowed(ErrorCode::Location5439004))?;
    date_add(reference_millis, unit, lower_bound, zone)
}

#[cfg(test)]
mod tests {
    //! Expected values are mongod's own, from jstests/aggregation/expressions
    //! (date_add_subtract.js, date_diff.js, date_trunc.js) and the manual's examples.
    use bson::{bson, doc, Bson, DateTime};

    use super::super::test_support::{check_errors, check_over, check_values};

    fn date(text: &str) -> Bson {
        Bson::DateTime(DateTime::parse_rfc3339_str(text).expect("test date"))
    }

    #[test]
    fn date_add_and_subtract_follow_date_add_subtract_js() {
        let start = date("2020-12-31T12:10:05Z");
        let add = |unit: &str, amount: i64| bson!({"$dateAdd": {"startDate": start.clone(), "unit": unit, "amount": amount}});
        let subtract = |unit: &str, amount: i64| bson!({"$dateSubtract": {"startDate": start.clone(), "unit": unit, "amount": amount}});
        check_values(vec![
            (
                bson!({"$dateAdd": {"startDate": date("2020-11-30T12:10:05Z"), "unit": "day", "amount": 1}}),
                date("2020-12-01T12:10:05Z"),
            ),
            (add("day", 1), date("2021-01-01T12:10:05Z")),
            (add("week", 1), date("2021-01-07T12:10:05Z")),
            (add("hour", 2), date("2020-12-31T14:10:05Z")),
            (add("minute", 50), date("2020-12-31T13:00:05Z")),
            (add("millisecond", 1050), date("2020-12-31T12:10:06.050Z")),
            (add("month", 1), date("2021-01-31T12:10:05Z")),
            (subtract("year", 1), date("2019-12-31T12:10:05Z")),
            (subtract("quarter", 2), date("2020-06-30T12:10:05Z")),
            (subtract("month", 1), date("2020-11-30T12:10:05Z")),
            (subtract("day", 15), date("2020-12-16T12:10:05Z")),
            (subtract("hour", 48), date("2020-12-29T12:10:05Z")),
            (subtract("minute", 15), date("2020-12-31T11:55:05Z")),
            (subtract("second", 125), date("2020-12-31T12:08:00Z")),
            (
                bson!({"$dateSubtract": {"startDate": start.clone(), "unit": "month", "amount": 3, "timezone": "Europe/Paris"}}),
                date("2020-09-30T11:10:05Z"),
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "hour", "amount": 2, "timezone": "Europe/Paris"}}),
                date("2020-12-31T14:10:05Z"),
            ),
            // Across the end of summer time in Paris: 24 hours stay 24 hours, one day keeps the
            // wall clock.
            (
                bson!({"$dateAdd": {"startDate": date("2020-10-24T18:10:00Z"), "unit": "hour", "amount": 24, "timezone": "Europe/Paris"}}),
                date("2020-10-25T18:10:00Z"),
            ),
            (
                bson!({"$dateAdd": {"startDate": date("2020-10-24T18:10:00Z"), "unit": "day", "amount": 1, "timezone": "Europe/Paris"}}),
                date("2020-10-25T19:10:00Z"),
            ),
            // mongod's own example (date_time_support.cpp): an hour added at the end of
            // summer time in New York is an elapsed hour, not a wall-clock one.
            (
                bson!({"$dateAdd": {"startDate": date("2020-11-01T05:50:02Z"), "unit": "hour", "amount": 1, "timezone": "America/New_York"}}),
                date("2020-11-01T06:50:02Z"),
            ),
            // The last day of the month is clamped, in UTC and in a zone.
            (
                bson!({"$dateAdd": {"startDate": date("2021-01-30T23:30:00Z"), "unit": "month", "amount": 1, "timezone": "Europe/Paris"}}),
                date("2021-02-27T23:30:00Z"),
            ),
            (
                bson!({"$dateSubtract": {"startDate": date("2021-01-31T03:00:00Z"), "unit": "month", "amount": 2}}),
                date("2020-11-30T03:00:00Z"),
            ),
            (
                bson!({"$dateSubtract": {"startDate": date("2021-01-31T03:00:00Z"), "unit": "month", "amount": 2, "timezone": "America/New_York"}}),
                date("2020-12-01T03:00:00Z"),
            ),
            (
                bson!({"$dateSubtract": {"startDate": {"$dateAdd": {"startDate": start.clone(), "unit": "hour", "amount": 2}}, "unit": "hour", "amount": 2}}),
                start.clone(),
            ),
            (
                bson!({"$dateAdd": {"startDate": "$missing", "unit": "day", "amount": 1}}),
                Bson::Null,
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "day", "amount": 1, "timezone": null}}),
                Bson::Null,
            ),
            // An integral double or decimal is an amount.
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "day", "amount": 1.0}}),
                date("2021-01-01T12:10:05Z"),
            ),
        ]);
        check_errors(vec![
            (
                bson!({"$dateAdd": {"unit": "second", "amount": 120}}),
                5166402,
            ),
            (
                bson!({"$dateSubtract": {"startDate": "$date", "amount": 1}}),
                5166402,
            ),
            (
                bson!({"$dateAdd": {"startDate": "$date", "units": "day", "amount": 1}}),
                5166401,
            ),
            (bson!({"$dateAdd": 1}), 5166400),
            (
                bson!({"$dateSubtract": {"startDate": "myBirthDate", "unit": "year", "amount": 10}}),
                5166403,
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": 1, "amount": 10}}),
                5439013,
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "epoch", "amount": 10}}),
                9,
            ),
            (
                bson!({"$dateSubtract": {"startDate": start.clone(), "unit": "year", "amount": 1.001}}),
                5166405,
            ),
            (
                bson!({"$dateSubtract": {"startDate": start.clone(), "unit": "year", "amount": 1, "timezone": "Unknown"}}),
                40485,
            ),
            (
                bson!({"$dateSubtract": {"startDate": start.clone(), "unit": "day", "amount": i64::MIN}}),
                6045000,
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "year", "amount": i64::MAX}}),
                5976500,
            ),
            (
                bson!({"$dateAdd": {"startDate": start.clone(), "unit": "millisecond", "amount": i64::MAX}}),
                5166406,
            ),
        ]);
    }

    fn document(fields: Bson) -> bson::Document {
        match fields {
            Bson::Document(document) => document,
            _ => panic!("test document"),
        }
    }

    #[test]
    fn date_diff_counts_boundaries_as_date_diff_js() {
        let some_date = date("2020-11-01T18:23:36Z");
        let by_fields = bson!({"$dateDiff": {"startDate": "$startDate", "endDate": "$endDate", "unit": "$unit", "timezone": "$timeZone", "startOfWeek": "$startOfWeek"}});
        check_values(vec![(
            bson!({"$dateDiff": {"startDate": date("2020-11-01T18:23:36Z"), "endDate": date("2020-11-02T00:00:00Z"), "unit": "hour"}}),
            Bson::Int64(6),
        )]);
        check_over(
            by_fields.clone(),
            vec![
                (
                    document(
                        bson!({"startDate": date("2020-11-01T18:23:36Z"), "endDate": date("2020-11-02T00:00:00Z"), "unit": "hour", "timeZone": "America/New_York", "startOfWeek": "IGNORED"}),
                    ),
                    Bson::Int64(6),
                ),
                (
                    document(bson!({"endDate": 1, "unit": "century", "timeZone": "INVALID"})),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"startDate": null, "endDate": some_date.clone(), "unit": "hour", "timeZone": "UTC"}),
                    ),
                    Bson::Null,
                ),
                (
                    document(bson!({"startDate": "", "unit": "epoch", "timeZone": "INVALID"})),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": null, "timeZone": "UTC"}),
                    ),
                    Bson::Null,
                ),
                (
                    document(bson!({"startDate": 1, "endDate": 2, "timeZone": "INVALID"})),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "hour", "timeZone": null}),
                    ),
                    Bson::Null,
                ),
                // Sunday to Monday is a week boundary when weeks start on Monday.
                (
                    document(
                        bson!({"startDate": date("2021-01-24T18:23:36Z"), "endDate": date("2021-01-25T02:23:36Z"), "unit": "week", "timeZone": "GMT", "startOfWeek": "MONDAY"}),
                    ),
                    Bson::Int64(1),
                ),
                // Sunday 00:00 in New York back to Saturday 23:59 there.
                (
                    document(
                        bson!({"startDate": date("2021-01-17T05:00:00Z"), "endDate": date("2021-01-17T04:59:00Z"), "unit": "week", "timeZone": "America/New_York", "startOfWeek": "sunday"}),
                    ),
                    Bson::Int64(-1),
                ),
                (
                    document(
                        bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "week", "startOfWeek": null}),
                    ),
                    Bson::Null,
                ),
                (
                    document(bson!({"startDate": 1, "endDate": 2, "unit": "week", "timeZone": 1})),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "hour", "timeZone": "GMT", "startOfWeek": 1}),
                    ),
                    Bson::Int64(0),
                ),
            ],
        );
        check_over(
            bson!({"$dateDiff": {"startDate": "$startDate", "endDate": "$endDate", "unit": "week"}}),
            vec![(
                document(
                    bson!({"startDate": date("2021-01-24T18:23:36Z"), "endDate": date("2021-01-25T02:23:36Z")}),
                ),
                Bson::Int64(0),
            )],
        );
        check_over(
            bson!({"$dateDiff": {"startDate": "$ts", "endDate": "$ts", "unit": "millisecond"}}),
            vec![(
                doc! {"ts": bson::Timestamp { time: 1_350_336_377, increment: 0 }},
                Bson::Int64(0),
            )],
        );
        let with = |fields: Bson| {
            let mut expression = by_fields.clone();
            if let (Bson::Document(outer), Bson::Document(values)) = (&mut expression, fields) {
                if let Ok(spec) = outer.get_document_mut("$dateDiff") {
                    for (name, value) in values {
                        spec.insert(name, value);
                    }
                }
            }
            expression
        };
        check_errors(vec![
            (
                with(
                    bson!({"startDate": "string", "endDate": some_date.clone(), "unit": "hour", "timezone": "UTC"}),
                ),
                5166307,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": 1, "unit": "hour", "timezone": "UTC"}),
                ),
                5166307,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": 5, "timezone": "UTC"}),
                ),
                5439013,
            ),
            // mongod 7+ reports an unknown unit as FailedToParse (older servers said 5439014).
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "decade", "timezone": "UTC"}),
                ),
                9,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "hour", "timezone": 1}),
                ),
                40517,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "hour", "timezone": "America/Invalid"}),
                ),
                40485,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "week", "timezone": "GMT", "startOfWeek": 1}),
                ),
                5439015,
            ),
            (
                with(
                    bson!({"startDate": some_date.clone(), "endDate": some_date.clone(), "unit": "week", "timezone": "GMT", "startOfWeek": "FRIDIE"}),
                ),
                5439016,
            ),
            (bson!({"$dateDiff": 1}), 5166301),
            (
                bson!({"$dateDiff": {"startDate": 1, "endDate": 2, "unit": "day", "x": 1}}),
                5166302,
            ),
            (bson!({"$dateDiff": {"endDate": 2, "unit": "day"}}), 5166303),
            (
                bson!({"$dateDiff": {"startDate": 1, "unit": "day"}}),
                5166304,
            ),
            (
                bson!({"$dateDiff": {"startDate": 1, "endDate": 2}}),
                5166305,
            ),
        ]);
    }

    #[test]
    fn date_trunc_bins_as_date_trunc_js() {
        let some_date = date("2020-11-01T18:23:36Z");
        let by_fields = bson!({"$dateTrunc": {"date": "$date", "unit": "$unit", "binSize": "$binSize", "timezone": "$timeZone", "startOfWeek": "$startOfWeek"}});
        check_values(vec![(
            bson!({"$dateTrunc": {"date": date("2020-11-01T18:23:36Z"), "unit": "hour", "binSize": 2}}),
            date("2020-11-01T18:00:00Z"),
        )]);
        check_over(
            by_fields.clone(),
            vec![
                (
                    document(
                        bson!({"date": date("2021-12-01T18:23:36Z"), "unit": "hour", "binSize": 4, "timeZone": "America/New_York", "startOfWeek": "IGNORED"}),
                    ),
                    date("2021-12-01T17:00:00Z"),
                ),
                (
                    document(
                        bson!({"date": date("2000-01-30T18:00:00Z"), "unit": "week", "binSize": 2, "timeZone": "America/New_York", "startOfWeek": "mon"}),
                    ),
                    date("2000-01-17T05:00:00Z"),
                ),
                (
                    document(bson!({"unit": "H", "binSize": "string", "timeZone": 1})),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": null, "unit": "hour", "binSize": 1, "timeZone": "UTC"}),
                    ),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": some_date.clone(), "unit": null, "binSize": 1, "timeZone": "UTC"}),
                    ),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": some_date.clone(), "unit": "hour", "binSize": null, "timeZone": "UTC"}),
                    ),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": date("2020-01-30T18:59:00Z"), "unit": "minute", "binSize": Bson::Decimal128("15".parse().expect("decimal")), "timeZone": "UTC"}),
                    ),
                    date("2020-01-30T18:45:00Z"),
                ),
                (
                    document(
                        bson!({"date": date("2020-01-30T18:59:00Z"), "unit": "day", "binSize": 1_i64, "timeZone": "UTC"}),
                    ),
                    date("2020-01-30T00:00:00Z"),
                ),
                (
                    document(
                        bson!({"date": date("2020-01-30T18:59:00.003Z"), "unit": "millisecond", "binSize": 1000, "timeZone": "UTC"}),
                    ),
                    date("2020-01-30T18:59:00.000Z"),
                ),
                (
                    document(
                        bson!({"date": some_date.clone(), "unit": "hour", "binSize": 1, "timeZone": null}),
                    ),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": some_date.clone(), "unit": "week", "startOfWeek": null}),
                    ),
                    Bson::Null,
                ),
                (
                    document(
                        bson!({"date": date("2020-01-30T18:59:00.000Z"), "binSize": 1, "unit": "year", "timeZone": "GMT", "startOfWeek": 1}),
                    ),
                    date("2020-01-01T00:00:00.000Z"),
                ),
            ],
        );
        check_over(
            bson!({"$dateTrunc": {"date": "$date", "unit": "week"}}),
            vec![(
                document(bson!({"date": date("2021-02-15T18:23:36Z")})),
                date("2021-02-14T00:00:00Z"),
            )],
        );
        check_over(
            bson!({"$dateTrunc": {"date": "$_id", "unit": "minute", "binSize": 10}}),
            vec![(
                doc! {"_id": bson::oid::ObjectId::parse_str("507c7f79bcf86cd7994f6c0e").expect("oid")},
                date("2012-10-15T21:20:00Z"),
            )],
        );
        check_over(
            bson!({"$dateTrunc": {"date": "$ts", "unit": "second", "binSize": 10}}),
            vec![(
                doc! {"ts": bson::Timestamp { time: 1_350_336_377, increment: 0 }},
                date("2012-10-15T21:26:10Z"),
            )],
        );
        let with = |fields: Bson| {
            let mut expression = by_fields.clone();
            if let (Bson::Document(outer), Bson::Document(values)) = (&mut expression, fields) {
                if let Ok(spec) = outer.get_document_mut("$dateTrunc") {
                    for (name, value) in values {
                        spec.insert(name, value);
                    }
                }
            }
            expression
        };
        check_errors(vec![
            (bson!({"$dateTrunc": "A"}), 5439007),
            (bson!({"$dateTrunc": {"endDate": 1}}), 5439008),
            (bson!({"$dateTrunc": {"unit": "week"}}), 5439009),
            (bson!({"$dateTrunc": {"date": some_date.clone()}}), 5439010),
            // mongod 7+ checks the date with 5166307 (older servers said 5439012).
            (
                with(bson!({"date": "string", "unit": "hour", "binSize": 1, "timezone": "UTC"})),
                5166307,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": 1, "binSize": 1, "timezone": "UTC"}),
                ),
                5439013,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "century", "binSize": 1, "timezone": "UTC"}),
                ),
                9,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "hour", "binSize": "Number", "timezone": "UTC"}),
                ),
                5439017,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "hour", "binSize": 0, "timezone": "UTC"}),
                ),
                5439018,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "hour", "binSize": 2.5, "timezone": "UTC"}),
                ),
                5439017,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "hour", "binSize": 1, "timezone": 1}),
                ),
                40517,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "hour", "binSize": 1, "timezone": "America/Invalid"}),
                ),
                40485,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "week", "binSize": 1, "timezone": "GMT", "startOfWeek": 1}),
                ),
                5439015,
            ),
            (
                with(
                    bson!({"date": some_date.clone(), "unit": "week", "binSize": 1, "timezone": "GMT", "startOfWeek": "FRIDIE"}),
                ),
                5439016,
            ),
        ]);
    }
}
