//! Time as the server sees it. Everything that depends on "now" (TTL expiry, `localTime`, cursor
//! timeouts) reads a [`Clock`], so tests move time instead of sleeping. Invariant: the server's
//! clock ([`ServerClock`]) never goes backwards, not even when the system clock steps back or
//! across a restart (its floor is the high-water mark storage persisted); [`ManualClock`] only
//! advances.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The source of wall-clock time, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;

    /// Moves time forward by `delta_ms` (negative values are ignored).
    fn advance_ms(&self, delta_ms: i64);

    fn now(&self) -> bson::DateTime {
        bson::DateTime::from_millis(self.now_ms())
    }
}

/// The system clock plus an offset that can only grow, so test commands can move the running
/// server's time forward (`advanceClock`) without a restart.
#[derive(Debug, Default)]
pub struct SystemClock {
    offset_ms: AtomicI64,
}

impl SystemClock {
    /// The system clock read `skew_ms` off (a test option).
    pub fn skewed(skew_ms: i64) -> SystemClock {
        SystemClock {
            offset_ms: AtomicI64::new(skew_ms),
        }
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        since_epoch.as_millis() as i64 + self.offset_ms.load(Ordering::SeqCst)
    }

    fn advance_ms(&self, delta_ms: i64) {
        self.offset_ms.fetch_add(delta_ms.max(0), Ordering::SeqCst);
    }
}

/// The clock the server reads: a source clock that is never allowed to go backwards. Every reading
/// raises a floor, and a reading below the floor (the system clock stepped back, or a restart
/// with a slower clock than the persisted high-water mark) returns the floor instead: a moment
/// the server has reported is never lived again, so a document it has called expired stays
/// expired.
#[derive(Debug)]
pub struct ServerClock {
    source: std::sync::Arc<dyn Clock>,
    floor_ms: AtomicI64,
}

impl ServerClock {
    pub fn new(source: std::sync::Arc<dyn Clock>, floor_ms: i64) -> Self {
        ServerClock {
            source,
            floor_ms: AtomicI64::new(floor_ms),
        }
    }
}

impl Clock for ServerClock {
    fn now_ms(&self) -> i64 {
        let now_ms = self.source.now_ms();
        let floor_ms = self.floor_ms.fetch_max(now_ms, Ordering::SeqCst);
        now_ms.max(floor_ms)
    }

    fn advance_ms(&self, delta_ms: i64) {
        self.source.advance_ms(delta_ms);
    }
}

/// A clock that stands still until told to move: for deterministic tests.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        ManualClock {
            now_ms: AtomicI64::new(start_ms),
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn advance_ms(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms.max(0), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward() {
        let clock = ManualClock::new(1_000);
        clock.advance_ms(500);
        clock.advance_ms(-10_000);
        assert_eq!(clock.now_ms(), 1_500);
        assert_eq!(clock.now(), bson::DateTime::from_millis(1_500));
    }

    #[test]
    fn server_clock_never_goes_below_what_it_reported_or_its_floor() {
        let source = std::sync::Arc::new(ManualClock::new(1_000));
        let clock = ServerClock::new(source.clone(), 5_000);
        assert_eq!(clock.now_ms(), 5_000);
        source.advance_ms(10_000);
        assert_eq!(clock.now_ms(), 11_000);
        // A source that steps back (a system clock corrected backwards) is held at the mark.
        let stepped_back = ServerClock::new(std::sync::Arc::new(ManualClock::new(2_000)), 0);
        assert_eq!(stepped_back.now_ms(), 2_000);
        let restarted = ServerClock::new(std::sync::Arc::new(ManualClock::new(500)), 2_000);
        assert_eq!(restarted.now_ms(), 2_000);
        clock.advance_ms(1);
        assert_eq!(clock.now_ms(), 11_001);
    }

    #[test]
    fn system_clock_offset_adds_to_real_time() {
        let clock = SystemClock::default();
        let before = clock.now_ms();
        clock.advance_ms(3_600_000);
        assert!(clock.now_ms() >= before + 3_600_000);
    }
}
