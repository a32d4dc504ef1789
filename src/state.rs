//! The state every connection and command shares, behind one cheap `Arc<ServerState>`: the
//! configuration, parameters, clock, the running operations (`ops`), the profiler settings, and
//! the counters `serverStatus` reports. Counters are atomics so the request path never takes a
//! lock to update them (registering an op takes one short lock of one shard).

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::config::StorageKind;
use crate::config::{Config, PgDistribute};
use crate::cursor::CursorRegistry;
use crate::params::Parameters;
use tideway_base::clock::{Clock, ServerClock};
use tideway_base::error::CommandResult;
use tideway_exec::executor::{CollectionView, PolicyGates};
use tideway_exec::reaper::Reaper;
use tideway_exec::ttl::keeps_last_write_order;
use tideway_storage::redb_engine::{Durability, RedbStorage};
use tideway_storage::{Namespace, Storage, StorageResult};

#[derive(Debug)]
pub struct ServerState {
    pub config: Config,
    pub params: Parameters,
    pub clock: Arc<dyn Clock>,
    /// Orders visibility judgements against TTL policy changes (see [`PolicyGates`]).
    pub policy_gates: PolicyGates,
    /// Where blocking sorts and groups spill: `<dbpath>/_tmp`, or a private temporary directory
    /// for memory storage.
    pub spill_dir: std::path::PathBuf,
    pub storage: Arc<dyn Storage>,
    pub cursors: CursorRegistry,
    /// The logical session cache (`lsid`s in use, flushed to `config.system.sessions`).
    pub sessions: crate::sessions::SessionCache,
    /// The winning plan per query shape (see `tideway_exec::planner`).
    pub plan_cache: tideway_exec::planner::PlanCache,
    /// Running commands and open connections (`currentOp`, `killOp`).
    pub ops: crate::ops::OpRegistry,
    /// Profiling levels, `slowms`, `sampleRate` (`profile`).
    pub profiler: crate::profiler::Profiler,
    pub reaper: Reaper,
    pub started: Instant,
    pub stats: Stats,
    /// Host name as `serverStatus.host` reports it (without the port).
    pub hostname: String,
    /// Lines `getLog: "startupWarnings"` returns, rendered once at startup.
    pub startup_warnings: Vec<String>,
    /// Replica-set mode (`--replSet`), `None` on a standalone server.
    pub repl: Option<crate::repl::ReplSet>,
    /// The TLS transport (`--tlsMode`), `None` when TLS is disabled.
    pub tls: Option<Arc<crate::tls::TlsTransport>>,
    /// `--auth` and what enforcement shares across connections (`crate::auth::authz`).
    pub auth: crate::auth::authz::ServerAuth,
    /// Failed logins per client host: their log budget and reply delays (`auth::ratelimit`).
    pub failed_logins: crate::auth::ratelimit::LoginThrottle,
    next_connection_id: AtomicI32,
}

/// Monotonic counters; `serverStatus` reads them with relaxed loads.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_current: AtomicU64,
    pub connections_total: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub requests: AtomicU64,
    pub opcounters: OpCounters,
    /// Per compressor, in `Compressor::ALL` order.
    pub compression: [CompressionCounters; 3],
    /// Round trips to a remote engine's database, per command.
    pub round_trips: RoundTrips,
}

/// Per command name: how many commands cost round trips to the engine's database, and how many
/// they cost (`serverStatus.<engine section>.commands`). Commands that cost none (every command
/// on a local engine) are not recorded, so a local engine never takes the lock.
#[derive(Debug, Default)]
pub struct RoundTrips {
    by_command: std::sync::Mutex<std::collections::BTreeMap<&'static str, (u64, u64)>>,
}

impl RoundTrips {
    pub fn record(&self, command: &'static str, trips: u64) {
        if trips == 0 {
            return;
        }
        let mut by_command = self
            .by_command
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (commands, total) = by_command.entry(command).or_default();
        *commands += 1;
        *total += trips;
    }

    /// `{<command>: {count, roundTrips, perCommand}}`.
    pub fn document(&self) -> bson::Document {
        let by_command = self
            .by_command
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        by_command
            .iter()
            .map(|(command, (count, trips))| {
                let per_command = *trips as f64 / (*count).max(1) as f64;
                (
                    (*command).to_owned(),
                    bson::Bson::Document(bson::doc! {
                        "count": i64::try_from(*count).unwrap_or(i64::MAX),
                        "roundTrips": i64::try_from(*trips).unwrap_or(i64::MAX),
                        "perCommand": per_command,
                    }),
                )
            })
            .collect()
    }
}

/// mongod's `network.compression.<name>`: bytes into and out of the compressor (replies) and the
/// decompressor (requests).
#[derive(Debug, Default)]
pub struct CompressionCounters {
    pub compressor_bytes_in: AtomicU64,
    pub compressor_bytes_out: AtomicU64,
    pub decompressor_bytes_in: AtomicU64,
    pub decompressor_bytes_out: AtomicU64,
}

impl Stats {
    pub fn compression(&self, compressor: tideway_wire::Compressor) -> &CompressionCounters {
        let index = tideway_wire::Compressor::ALL
            .iter()
            .position(|c| *c == compressor)
            .unwrap_or(0);
        &self.compression[index]
    }
}

/// mongod's `opcounters`: `insert`/`update`/`delete` count documents or statements, `query` counts
/// finds, `getmore` getMores, and `command` every other command.
#[derive(Debug, Default)]
pub struct OpCounters {
    pub insert: AtomicU64,
    pub query: AtomicU64,
    pub update: AtomicU64,
    pub delete: AtomicU64,
    pub getmore: AtomicU64,
    pub command: AtomicU64,
}

pub fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

pub fn read(counter: &AtomicU64) -> i64 {
    counter.load(Ordering::Relaxed) as i64
}

impl ServerState {
    pub fn new(
        config: Config,
        clock: Arc<dyn Clock>,
        storage: Arc<dyn Storage>,
    ) -> CommandResult<Arc<ServerState>> {
        let params = Parameters::at_startup(config.enable_test_commands, &config.set_parameter)?;
        let startup_warnings = startup_warnings(&config);
        let auth = crate::auth::authz::ServerAuth::new(config.auth);
        let repl = match config.storage {
            // Over PostgreSQL the server answers as a router (`mongos`): sessions, retryable
            // writes and transactions without a replica set.
            StorageKind::Postgres => Some(crate::repl::ReplSet::router()),
            _ => config.repl_set.clone().map(crate::repl::ReplSet::new),
        };
        let tls = crate::tls::TlsTransport::from_config(&config)?;
        // Never earlier than any moment the server reported before a restart.
        let clock = Arc::new(ServerClock::new(clock, storage.time_high_water_ms()));
        let spill_dir = match config.storage {
            StorageKind::Disk => {
                let dir = config.dbpath.join("_tmp");
                // Runs a killed process left behind are never read again (the dbpath lock
                // makes the directory this server's alone).
                tideway_query::sorter::clear_spill_dir(&dir);
                dir
            }
            StorageKind::Memory | StorageKind::Postgres => {
                static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);
                std::env::temp_dir().join(format!(
                    "tideway-{}-{}",
                    std::process::id(),
                    NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
                ))
            }
        };
        let profiler = crate::profiler::Profiler::new(
            config.profile,
            i64::try_from(config.slowms).unwrap_or(i64::MAX),
        );
        Ok(Arc::new(ServerState {
            config,
            params,
            clock,
            storage,
            policy_gates: PolicyGates::default(),
            spill_dir,
            cursors: CursorRegistry::default(),
            sessions: crate::sessions::SessionCache::default(),
            plan_cache: tideway_exec::planner::PlanCache::default(),
            ops: crate::ops::OpRegistry::default(),
            profiler,
            reaper: Reaper::default(),
            started: Instant::now(),
            stats: Stats::default(),
            hostname: hostname(),
            startup_warnings,
            repl,
            tls,
            auth,
            failed_logins: crate::auth::ratelimit::LoginThrottle::default(),
            next_connection_id: AtomicI32::new(1),
        }))
    }

    /// `ns` as a command sees it now (see [`CollectionView::open`]).
    pub async fn view(&self, ns: &Namespace) -> StorageResult<CollectionView> {
        CollectionView::open(
            &self.policy_gates,
            self.storage.as_ref(),
            self.clock.as_ref(),
            ns,
        )
        .await
    }

    pub(crate) fn next_connection_id(&self) -> i32 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }
}

impl Drop for ServerState {
    fn drop(&mut self) {
        // Only if empty: every spill file is deleted when its sort ends.
        let _ = std::fs::remove_dir(&self.spill_dir);
    }
}

/// The storage engine the configuration asks for: durable files under `--dbpath` (relaxed with
/// `--syncdelay-ms`), memory only, or a PostgreSQL database (`--pgUri`).
pub async fn open_storage(config: &Config) -> StorageResult<Arc<dyn Storage>> {
    Ok(open_storage_and_clock(config).await?.0)
}

/// [`open_storage`], with the clock the server judges expiry by: the system clock, or over
/// PostgreSQL the database's ([`tideway_postgres::DatabaseClock`]), which every node on the
/// database shares.
pub async fn open_storage_and_clock(
    config: &Config,
) -> StorageResult<(Arc<dyn Storage>, Arc<dyn Clock>)> {
    let system_clock = || {
        Arc::new(tideway_base::clock::SystemClock::skewed(
            config.test_clock_skew_ms,
        ))
    };
    match config.storage {
        StorageKind::Memory => Ok((
            Arc::new(RedbStorage::in_memory_with_rule(keeps_last_write_order)?),
            system_clock(),
        )),
        StorageKind::Disk => {
            let durability = match config.syncdelay_ms {
                Some(sync_delay_ms) => Durability::Relaxed { sync_delay_ms },
                None => Durability::Durable,
            };
            let storage =
                RedbStorage::open_with_rule(&config.dbpath, durability, keeps_last_write_order)?;
            Ok((Arc::new(storage), system_clock()))
        }
        StorageKind::Postgres => {
            let uri = config.pg_uri.as_deref().unwrap_or_default();
            let storage = tideway_postgres::PgStorage::open_with_rule(
                uri,
                config.pg_pool_size,
                config.pg_distribute.map(PgDistribute::distribution),
                keeps_last_write_order,
                config.test_clock_skew_ms,
            )
            .await?;
            let clock = storage.clock();
            Ok((Arc::new(storage), clock))
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The warnings mongod would print at startup for the same configuration.
fn startup_warnings(config: &Config) -> Vec<String> {
    if config.auth {
        return Vec::new();
    }
    let mut warnings = vec![crate::logbuf::render_line(
        "W",
        "CONTROL",
        "Access control is not enabled for the database. Read and write access to data and configuration is unrestricted",
        Default::default(),
    )];
    let loopback_only = config
        .listen_addrs()
        .map(|addrs| addrs.iter().all(|a| a.ip().is_loopback()))
        .unwrap_or(true);
    if !loopback_only {
        warnings.push(crate::logbuf::render_line(
            "W",
            "CONTROL",
            "This server is bound to a non-loopback address without authentication: anyone who can reach it can read and change all data",
            Default::default(),
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    // mongod warns at startup that access control is off; tideway adds a warning for a
    // non-loopback bind without --auth (issue 14). With --auth neither applies.
    #[test]
    fn startup_warnings_follow_auth_and_the_bind_address() {
        let mut config = Config {
            bind_ip: vec!["0.0.0.0".to_owned()],
            ..Config::default()
        };
        let warnings = startup_warnings(&config);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("Access control is not enabled"));
        assert!(warnings[1].contains("non-loopback"));
        config.bind_ip = vec!["127.0.0.1".to_owned()];
        assert_eq!(startup_warnings(&config).len(), 1);
        config.auth = true;
        config.bind_ip = vec!["0.0.0.0".to_owned()];
        assert!(startup_warnings(&config).is_empty());
    }
}
