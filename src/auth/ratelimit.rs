//! Failed logins, per client host: how long a failure's reply is held back ([`FailedLogins`]),
//! and how many failure lines reach the log ([`LogBudget`]). Pure bookkeeping over
//! milliseconds the caller reads from the server's `Clock`; nothing here sleeps, does I/O or
//! knows about connections.
//!
//! Invariants: a host's first [`Policy::free_failures`] failures are answered at once; each
//! further failure while the host keeps failing (no pause longer than [`Policy::window_ms`])
//! doubles the delay from [`Policy::base_delay_ms`] up to [`Policy::max_delay_ms`], never more;
//! a pause of a window forgets the host. Only failures are delayed: a success, from any host,
//! and every other command are never held (a right password is no guess to slow down). The
//! table is bounded ([`Policy::max_hosts`]): when full, forgotten hosts go first, then the one
//! idle longest. The locks here guard a map update only; no caller holds one across the delay
//! (the delay is an async sleep of the failing connection's own task).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// The server's failed-login bookkeeping (`ServerState::failed_logins`).
#[derive(Debug, Default)]
pub struct LoginThrottle {
    pub hosts: FailedLogins,
    pub log: LogBudget,
}

/// The throttling rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A host that has not failed for this long starts afresh.
    pub window_ms: i64,
    /// Failures answered without delay before throttling starts.
    pub free_failures: u32,
    /// The delay of the first throttled failure; each further one doubles it.
    pub base_delay_ms: u64,
    /// The delay never exceeds this.
    pub max_delay_ms: u64,
    /// Hosts remembered at most.
    pub max_hosts: usize,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            window_ms: 10_000,
            free_failures: 5,
            base_delay_ms: 50,
            max_delay_ms: 1_000,
            max_hosts: 10_000,
        }
    }
}

impl Policy {
    /// The delay of a host's `failures`-th failure in a row (1-based).
    pub fn delay_for(&self, failures: u32) -> Duration {
        let Some(throttled) = failures.checked_sub(self.free_failures + 1) else {
            return Duration::ZERO;
        };
        let factor = 1u64.checked_shl(throttled.min(63)).unwrap_or(u64::MAX);
        Duration::from_millis(
            self.base_delay_ms
                .saturating_mul(factor)
                .min(self.max_delay_ms),
        )
    }
}

#[derive(Clone, Copy, Debug)]
struct HostRecord {
    failures: u32,
    last_failure_ms: i64,
}

/// Recent failures per client host.
#[derive(Debug, Default)]
pub struct FailedLogins {
    policy: Policy,
    hosts: Mutex<HashMap<IpAddr, HostRecord>>,
}

impl FailedLogins {
    pub fn new(policy: Policy) -> FailedLogins {
        FailedLogins {
            policy,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Counts a failure of `host` at `now_ms` and answers how long its reply waits.
    pub(crate) fn record_failure(&self, host: IpAddr, now_ms: i64) -> Duration {
        let mut hosts = self
            .hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window_ms = self.policy.window_ms;
        if !hosts.contains_key(&host) && hosts.len() >= self.policy.max_hosts {
            hosts.retain(|_, record| now_ms - record.last_failure_ms < window_ms);
            if hosts.len() >= self.policy.max_hosts {
                let idlest = hosts
                    .iter()
                    .min_by_key(|(_, record)| record.last_failure_ms)
                    .map(|(ip, _)| *ip);
                if let Some(idlest) = idlest {
                    hosts.remove(&idlest);
                }
            }
        }
        let record = hosts.entry(host).or_insert(HostRecord {
            failures: 0,
            last_failure_ms: now_ms,
        });
        if now_ms - record.last_failure_ms >= window_ms {
            record.failures = 0;
        }
        record.failures = record.failures.saturating_add(1);
        record.last_failure_ms = record.last_failure_ms.max(now_ms);
        self.policy.delay_for(record.failures)
    }

    /// How many hosts are remembered (tests, diagnostics).
    pub fn hosts(&self) -> usize {
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// Whether a failure is logged, and how many were left out before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogDecision {
    /// Log this failure; `suppressed_before` failures since the last logged one were not.
    Log {
        suppressed_before: u64,
    },
    Suppress,
}

/// At most `per_window` failure lines per `window_ms`, whatever the flood: the rest are counted
/// and the count rides on the next line that is logged.
#[derive(Debug)]
pub struct LogBudget {
    per_window: u32,
    window_ms: i64,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    window_start_ms: i64,
    logged: u32,
    suppressed: u64,
}

impl Default for LogBudget {
    fn default() -> LogBudget {
        LogBudget::new(20, 1_000)
    }
}

impl LogBudget {
    pub fn new(per_window: u32, window_ms: i64) -> LogBudget {
        LogBudget {
            per_window,
            window_ms,
            state: Mutex::new(BudgetState {
                window_start_ms: i64::MIN,
                ..BudgetState::default()
            }),
        }
    }

    pub fn admit(&self, now_ms: i64) -> LogDecision {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now_ms.saturating_sub(state.window_start_ms) >= self.window_ms {
            state.window_start_ms = now_ms;
            state.logged = 0;
        }
        if state.logged < self.per_window {
            state.logged += 1;
            LogDecision::Log {
                suppressed_before: std::mem::take(&mut state.suppressed),
            }
        } else {
            state.suppressed += 1;
            LogDecision::Suppress
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const OTHER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn first_failures_are_free_then_the_delay_doubles_to_its_bound() {
        let logins = FailedLogins::new(Policy::default());
        let delays: Vec<Duration> = (0..12)
            .map(|_| logins.record_failure(HOST, 1_000))
            .collect();
        assert_eq!(delays[..5], [Duration::ZERO; 5]);
        assert_eq!(
            delays[5..],
            [
                ms(50),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1_000),
                ms(1_000)
            ]
        );
    }

    #[test]
    fn hosts_are_throttled_apart() {
        let logins = FailedLogins::new(Policy::default());
        for _ in 0..10 {
            logins.record_failure(HOST, 0);
        }
        assert_eq!(logins.record_failure(OTHER, 0), Duration::ZERO);
        assert_eq!(logins.record_failure(HOST, 0), ms(1_000));
    }

    #[test]
    fn a_pause_of_a_window_forgets_the_host_but_a_steady_flood_does_not() {
        let logins = FailedLogins::new(Policy::default());
        // One failure every 9 s: never a full window of quiet, so the count keeps growing.
        for step in 0..6 {
            logins.record_failure(HOST, step * 9_000);
        }
        assert_eq!(logins.record_failure(HOST, 6 * 9_000), ms(100));
        assert_eq!(
            logins.record_failure(HOST, 6 * 9_000 + 10_000),
            Duration::ZERO
        );
    }

    #[test]
    fn the_table_is_bounded_forgotten_hosts_first() {
        let logins = FailedLogins::new(Policy {
            max_hosts: 2,
            ..Policy::default()
        });
        logins.record_failure(HOST, 0);
        logins.record_failure(OTHER, 20_000);
        let third = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3));
        logins.record_failure(third, 20_000);
        assert_eq!(logins.hosts(), 2);
        // HOST was the forgotten one: OTHER still counts its failure.
        for _ in 0..4 {
            logins.record_failure(OTHER, 20_000);
        }
        assert_eq!(logins.record_failure(OTHER, 20_000), ms(50));
    }

    #[test]
    fn the_log_budget_counts_what_it_leaves_out() {
        let budget = LogBudget::new(2, 1_000);
        assert_eq!(
            budget.admit(0),
            LogDecision::Log {
                suppressed_before: 0
            }
        );
        assert_eq!(
            budget.admit(10),
            LogDecision::Log {
                suppressed_before: 0
            }
        );
        for _ in 0..500 {
            assert_eq!(budget.admit(500), LogDecision::Suppress);
        }
        assert_eq!(
            budget.admit(1_000),
            LogDecision::Log {
                suppressed_before: 500
            }
        );
    }
}
