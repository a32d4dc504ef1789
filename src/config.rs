//! Every knob of the server in one struct, read from the command line or `TIDEWAY_*` environment
//! variables. Flag names follow mongod's where mongod has one (`--port`, `--bind_ip`, `--dbpath`,
//! `--maxConns`, `--setParameter`, `--slowms`, `--profile`). Nothing here has side effects: `Config` is plain data.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Where data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageKind {
    /// Durable files under `--dbpath`.
    Disk,
    /// Process memory only: gone when the server stops. For tests and throwaway environments.
    Memory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// tideway: a MongoDB wire-protocol compatible server with Azure Cosmos DB style time-to-live.
#[derive(Clone, Debug, Parser)]
#[command(name = "tideway", version, about, long_about = None)]
pub struct Config {
    /// TCP port to listen on.
    #[arg(long, env = "TIDEWAY_PORT", default_value_t = 27017)]
    pub port: u16,

    /// Addresses to listen on, comma-separated (e.g. `127.0.0.1,::1`).
    #[arg(
        long = "bind_ip",
        env = "TIDEWAY_BIND_IP",
        default_value = "127.0.0.1",
        value_delimiter = ','
    )]
    pub bind_ip: Vec<String>,

    /// Directory that holds the data files (with `--storage disk`).
    #[arg(long, env = "TIDEWAY_DBPATH", default_value = "./data")]
    pub dbpath: PathBuf,

    /// Storage engine: durable files under --dbpath, or memory only.
    #[arg(long, env = "TIDEWAY_STORAGE", value_enum, default_value_t = StorageKind::Disk)]
    pub storage: StorageKind,

    /// Relaxed durability: acknowledge writes before they are flushed, and flush at least every this
    /// many milliseconds (writes with writeConcern j:true still wait). Default: every write is durable
    /// before it is acknowledged.
    #[arg(long = "syncdelay-ms", env = "TIDEWAY_SYNCDELAY_MS", value_name = "MS")]
    pub syncdelay_ms: Option<u64>,

    /// Maximum simultaneous client connections; further connections are closed at once.
    #[arg(
        long = "maxConns",
        visible_alias = "max-conns",
        env = "TIDEWAY_MAX_CONNS",
        default_value_t = 10_000
    )]
    pub max_conns: usize,

    /// Log line format.
    #[arg(long = "log-format", env = "TIDEWAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,

    /// Log filter: error, warn, info, debug, trace, or a tracing directive like `tideway=debug`.
    #[arg(long = "log-level", env = "TIDEWAY_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// More verbose logging (-v debug, -vv trace); overrides --log-level.
    #[arg(short, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Commands slower than this many milliseconds are logged as slow.
    #[arg(long, env = "TIDEWAY_SLOWMS", default_value_t = 100)]
    pub slowms: u64,

    /// Profiling level of every database at startup, as mongod's `--profile`: 0 off, 1 operations
    /// slower than --slowms, 2 every operation (the `profile` command changes it per database).
    #[arg(long, env = "TIDEWAY_PROFILE", default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=2))]
    pub profile: i32,

    /// Enable test-only commands (e.g. advanceClock); same as --setParameter enableTestCommands=1.
    #[arg(long = "enableTestCommands", env = "TIDEWAY_ENABLE_TEST_COMMANDS")]
    pub enable_test_commands: bool,

    /// Turn server-side JavaScript off (`$where`, `$function`, `$accumulator`, `mapReduce`), as
    /// mongod's `--noscripting` / `security.javascriptEnabled: false`.
    #[arg(long = "noscripting", env = "TIDEWAY_NOSCRIPTING")]
    pub noscripting: bool,

    /// Wall-time cap of one server-side JavaScript invocation, in milliseconds (the command's
    /// maxTimeMS also applies).
    #[arg(long = "js-time-limit-ms", env = "TIDEWAY_JS_TIME_LIMIT_MS", default_value_t = crate::js::DEFAULT_TIME_LIMIT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub js_time_limit_ms: u64,

    /// Memory limit of the JavaScript runtime of each server thread, in MiB.
    #[arg(long = "js-memory-limit-mb", env = "TIDEWAY_JS_MEMORY_LIMIT_MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub js_memory_limit_mb: u64,

    /// Server parameter at startup, as name=value (repeatable).
    #[arg(long = "setParameter", value_name = "NAME=VALUE")]
    pub set_parameter: Vec<String>,
}

impl Default for Config {
    /// The defaults of every flag, ignoring the process's real arguments.
    fn default() -> Self {
        Config::parse_from(["tideway"])
    }
}

impl Config {
    /// Every address to listen on: each `--bind_ip` entry resolved, with `--port`.
    pub fn listen_addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        let mut addrs = Vec::new();
        for host in &self.bind_ip {
            let host = host.trim();
            if let Ok(ip) = host.parse::<IpAddr>() {
                addrs.push(SocketAddr::new(ip, self.port));
            } else {
                addrs.extend((host, self.port).to_socket_addrs()?);
            }
        }
        if addrs.is_empty() {
            addrs.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port));
        }
        addrs.dedup();
        Ok(addrs)
    }

    /// The server-side JavaScript switch and budgets.
    pub fn js_limits(&self) -> crate::js::JsLimits {
        crate::js::JsLimits {
            enabled: !self.noscripting,
            time_limit_ms: self.js_time_limit_ms,
            memory_limit_bytes: usize::try_from(self.js_memory_limit_mb)
                .unwrap_or(usize::MAX / (1024 * 1024))
                * 1024
                * 1024,
        }
    }

    /// The tracing filter directive after applying `-v`.
    pub fn log_filter(&self) -> &str {
        match self.verbose {
            0 => &self.log_level,
            1 => "debug",
            _ => "trace",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_readme() {
        let config = Config::default();
        assert_eq!(config.port, 27017);
        assert_eq!(config.bind_ip, vec!["127.0.0.1"]);
        assert_eq!(config.dbpath, PathBuf::from("./data"));
        assert_eq!(config.storage, StorageKind::Disk);
        assert_eq!(config.max_conns, 10_000);
        assert_eq!(config.js_limits(), crate::js::JsLimits::default());
        assert_eq!(
            config.listen_addrs().unwrap(),
            vec!["127.0.0.1:27017".parse().unwrap()]
        );
    }

    #[test]
    fn mongod_flag_names_parse() {
        let config = Config::parse_from([
            "tideway",
            "--port",
            "27999",
            "--bind_ip",
            "127.0.0.1,::1",
            "--maxConns",
            "5",
            "--storage",
            "memory",
            "--setParameter",
            "enableTestCommands=1",
            "--profile",
            "1",
            "-vv",
        ]);
        assert_eq!(config.profile, 1);
        assert_eq!(config.port, 27999);
        assert_eq!(config.listen_addrs().unwrap().len(), 2);
        assert_eq!(config.max_conns, 5);
        assert_eq!(config.storage, StorageKind::Memory);
        assert_eq!(config.set_parameter, vec!["enableTestCommands=1"]);
        assert_eq!(config.log_filter(), "trace");
        assert!(Config::try_parse_from(["tideway", "--profile", "3"]).is_err());
        let noscripting = Config::parse_from(["tideway", "--noscripting"]);
        assert!(!noscripting.js_limits().enabled);
        let alias = Config::parse_from(["tideway", "--max-conns", "7"]);
        assert_eq!(alias.max_conns, 7);
    }
}
