//! Time zones for the date operators, as mongod's `TimeZoneDatabase` resolves a `timezone`
//! argument: an Olson name from the tz database bundled into the binary (jiff's copy, never the
//! host's `/usr/share/zoneinfo`, so results do not depend on the machine), or a UTC offset in
//! one of mongod's three spellings (`+HH`, `+HHMM`, `+HH:MM`).
//!
//! A [`TimeZone`] answers two questions: the offset in force at an instant, and the instant a
//! local wall-clock time names. Wall-clock times are "wall milliseconds": the epoch milliseconds
//! the civil time would have in UTC, so the calendar helpers in `date` work on them unchanged.
//! Local times in a DST gap move forward by the gap, and repeated times take the earlier
//! instant (jiff's "compatible" resolution, which is what PHP's timelib is understood to do;
//! mongod's own tests do not pin it).

use std::sync::OnceLock;

use jiff::tz::{TimeZone as JiffZone, TimeZoneDatabase};
use jiff::Timestamp;

use super::{evaluate, fail, Expr, Vars};
use tideway_base::display::type_name;
use tideway_base::error::{CommandResult, ErrorCode};

/// A resolved `timezone` argument.
#[derive(Clone, Debug)]
pub(super) enum TimeZone {
    /// The default zone (no argument, `"UTC"`, or a zero offset): mongod's `isUtcZone()`.
    Utc,
    /// A fixed offset east of UTC, in seconds (never zero).
    Fixed(i64),
    /// A tz database zone other than `UTC` (including `GMT`, which mongod keeps as a named zone).
    Named(JiffZone),
}

fn database() -> &'static TimeZoneDatabase {
    static DATABASE: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DATABASE.get_or_init(TimeZoneDatabase::bundled)
}

/// mongod's `parseUtcOffset`: `±HH`, `±HHMM` or `±HH:MM`, as seconds east of UTC.
pub(super) fn parse_utc_offset(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let sign = match bytes.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digit = |index: usize| -> Option<i64> {
        bytes
            .get(index)
            .filter(|byte| byte.is_ascii_digit())
            .map(|byte| i64::from(byte - b'0'))
    };
    let (hours, minutes) = match bytes.len() {
        3 => (digit(1)? * 10 + digit(2)?, 0),
        5 => (digit(1)? * 10 + digit(2)?, digit(3)? * 10 + digit(4)?),
        6 if bytes[3] == b':' => (digit(1)? * 10 + digit(2)?, digit(4)? * 10 + digit(5)?),
        _ => return None,
    };
    Some(sign * (hours * 3600 + minutes * 60))
}

impl TimeZone {
    /// mongod's `TimeZoneDatabase::getTimeZone`: 40485 for a name it does not know.
    pub(super) fn parse(name: &str) -> CommandResult<TimeZone> {
        if name == "UTC" {
            return Ok(TimeZone::Utc);
        }
        // The database lookup ignores case; mongod's map of names does not.
        if let Ok(zone) = database().get(name) {
            if zone.iana_name() == Some(name) {
                return Ok(TimeZone::Named(zone));
            }
        }
        match parse_utc_offset(name) {
            Some(0) => Ok(TimeZone::Utc),
            Some(seconds) => Ok(TimeZone::Fixed(seconds)),
            None => Err(fail(
                ErrorCode::Location40485,
                format!("unrecognized time zone identifier: \"{name}\""),
            )),
        }
    }

    /// mongod's `isUtcZone()`: the default zone, which `$dateToString` prints with a `Z`.
    pub(super) fn is_utc(&self) -> bool {
        matches!(self, TimeZone::Utc)
    }

    /// The offset east of UTC in force at `millis`, in seconds (of the instant's whole second,
    /// as timelib reads it).
    pub(super) fn offset_seconds(&self, millis: i64) -> i64 {
        match self {
            TimeZone::Utc => 0,
            TimeZone::Fixed(seconds) => *seconds,
            TimeZone::Named(zone) => {
                let instant = Timestamp::from_second(millis.div_euclid(1000)).unwrap_or({
                    if millis < 0 {
                        Timestamp::MIN
                    } else {
                        Timestamp::MAX
                    }
                });
                i64::from(zone.to_offset(instant).seconds())
            }
        }
    }

    /// The instant a wall-clock time (wall milliseconds) names in this zone.
    pub(super) fn instant_from_wall(&self, wall: i64) -> i64 {
        match self {
            TimeZone::Utc => wall,
            TimeZone::Fixed(seconds) => wall.saturating_sub(seconds * 1000),
            TimeZone::Named(zone) => {
                let second = wall.div_euclid(1000);
                let fraction = wall.rem_euclid(1000);
                let resolved = Timestamp::from_second(second).ok().and_then(|as_utc| {
                    let civil = JiffZone::UTC.to_datetime(as_utc);
                    zone.to_ambiguous_timestamp(civil).compatible().ok()
                });
                match resolved {
                    Some(instant) => (instant.as_second() * 1000).saturating_add(fraction),
                    // Beyond the database's range: the offset at the nearest end applies.
                    None => wall.saturating_sub(self.offset_seconds(wall) * 1000),
                }
            }
        }
    }
}

/// Evaluates a `timezone` argument: UTC when absent, `None` when it is null or missing (the
/// operator's result is then null), 40517 when it is not a string, 40485 for an unknown name.
pub(super) fn evaluate_timezone(
    timezone: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Option<TimeZone>> {
    let Some(timezone) = timezone else {
        return Ok(Some(TimeZone::Utc));
    };
    match evaluate(timezone, vars)? {
        None | Some(bson::Bson::Null) | Some(bson::Bson::Undefined) => Ok(None),
        Some(bson::Bson::String(name)) => TimeZone::parse(&name).map(Some),
        Some(other) => Err(fail(
            ErrorCode::Location40517,
            format!(
                "timezone must evaluate to a string, found {}",
                type_name(&other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_utc_offset, TimeZone};

    #[test]
    fn offsets_take_mongod_three_spellings() {
        assert_eq!(parse_utc_offset("+04:45"), Some(17_100));
        assert_eq!(parse_utc_offset("+0445"), Some(17_100));
        assert_eq!(parse_utc_offset("+04"), Some(14_400));
        assert_eq!(parse_utc_offset("-08:00"), Some(-28_800));
        assert_eq!(parse_utc_offset("+4"), None);
        assert_eq!(parse_utc_offset("04:00"), None);
        assert_eq!(parse_utc_offset("+04-00"), None);
    }

    #[test]
    fn names_come_from_the_bundled_database_case_sensitively() {
        assert!(matches!(
            TimeZone::parse("America/New_York"),
            Ok(TimeZone::Named(_))
        ));
        assert!(TimeZone::parse("UTC").expect("utc").is_utc());
        assert!(matches!(TimeZone::parse("GMT"), Ok(TimeZone::Named(_))));
        assert!(TimeZone::parse("+00:00").expect("zero offset").is_utc());
        let unknown = TimeZone::parse("america/new_york").expect_err("case matters");
        assert_eq!(unknown.code.code(), 40485);
        assert_eq!(
            unknown.errmsg,
            "unrecognized time zone identifier: \"america/new_york\""
        );
    }

    #[test]
    fn new_york_wall_times_resolve_across_dst() {
        let zone = TimeZone::parse("America/New_York").expect("known zone");
        // 2020-03-08T06:30:00Z is 01:30 EST; 2020-03-08T07:30:00Z is 03:30 EDT.
        assert_eq!(zone.offset_seconds(1_583_649_000_000), -5 * 3600);
        assert_eq!(zone.offset_seconds(1_583_652_600_000), -4 * 3600);
        // 02:30 on 2020-03-08 does not exist: it moves forward to 03:30 EDT (07:30Z).
        let gap_wall = 1_583_634_600_000; // 2020-03-08T02:30:00 as wall milliseconds
        assert_eq!(zone.instant_from_wall(gap_wall), 1_583_652_600_000);
    }
}
