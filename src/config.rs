//! Every knob of the server in one struct, read from the command line, `TIDEWAY_*` environment
//! variables and a mongod-format YAML configuration file (`--config`, see `file`). Flag names
//! follow mongod's where mongod has one (`--port`, `--bind_ip`, `--dbpath`, `--maxConns`,
//! `--setParameter`, `--slowms`, `--profile`, `--config`/`-f`, `--outputConfig`, `--tlsMode` and
//! the other `--tls…` options).
//! Precedence, per setting: command-line flag, then environment variable, then the file, then the
//! default (mongod: a flag beats the file). `Config` is plain data; `load_from` reads the file it
//! names and has no other side effect.

pub mod file;
pub(crate) mod tls;

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};

use tideway_base::error::{CommandError, CommandResult};

pub use tls::TlsMode;

/// Where data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageKind {
    /// Durable files under `--dbpath`.
    Disk,
    /// Process memory only: gone when the server stops. For tests and throwaway environments.
    Memory,
    /// A PostgreSQL database (`--pgUri`): the server presents itself as a router (`mongos`).
    Postgres,
}

/// The distributed PostgreSQL `--pgDistribute` spreads tideway's tables over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PgDistribute {
    /// Citus: documents, index entries and session records as distributed tables, the catalog
    /// local to the coordinator (docs/scale-out.md).
    Citus,
}

impl PgDistribute {
    /// What the PostgreSQL engine is asked for.
    pub fn distribution(self) -> tideway_postgres::Distribution {
        match self {
            PgDistribute::Citus => tideway_postgres::Distribution::Citus,
        }
    }
}

/// Connections the PostgreSQL engine keeps open by default (`--pgPoolSize`).
pub const DEFAULT_PG_POOL_SIZE: usize = 32;

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

    /// Storage engine: durable files under --dbpath, memory only, or a PostgreSQL database
    /// (--pgUri).
    #[arg(long, env = "TIDEWAY_STORAGE", value_enum, default_value_t = StorageKind::Disk)]
    pub storage: StorageKind,

    /// The PostgreSQL database of `--storage postgres`, as
    /// `postgresql://user:password@host:port/database?sslmode=...` (`storage.postgres.uri`).
    #[arg(long = "pgUri", env = "TIDEWAY_PG_URI", value_name = "URI")]
    pub pg_uri: Option<String>,

    /// Create tideway's tables distributed over a distributed PostgreSQL, or turn the local
    /// tables of a database into such (`storage.postgres.distribute`). Nodes on a database whose
    /// tables are distributed use them so with or without it.
    #[arg(
        long = "pgDistribute",
        env = "TIDEWAY_PG_DISTRIBUTE",
        value_enum,
        value_name = "ENGINE"
    )]
    pub pg_distribute: Option<PgDistribute>,

    /// Connections to PostgreSQL the server keeps at most (`storage.postgres.poolSize`).
    #[arg(long = "pgPoolSize", env = "TIDEWAY_PG_POOL_SIZE", default_value_t = DEFAULT_PG_POOL_SIZE, value_parser = parse_pool_size)]
    pub pg_pool_size: usize,

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

    /// Size of the oplog (`local.oplog.rs`) in megabytes, as mongod's `--oplogSize`. The server
    /// keeps an oplog (which change streams read) in replica-set mode, of this size or
    /// `DEFAULT_OPLOG_SIZE_MB`, and also with this option alone.
    #[arg(long = "oplogSize", env = "TIDEWAY_OPLOG_SIZE_MB", value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub oplog_size_mb: Option<u64>,

    /// Enable test-only commands (e.g. advanceClock); same as --setParameter enableTestCommands=1.
    #[arg(long = "enableTestCommands", env = "TIDEWAY_ENABLE_TEST_COMMANDS")]
    pub enable_test_commands: bool,

    /// Test only (needs test commands): this server reads its own system clock this many
    /// milliseconds off. Over PostgreSQL expiry follows the database's clock regardless, which
    /// is what a test started with it shows.
    #[arg(
        long = "testClockSkewMs",
        value_name = "MS",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub test_clock_skew_ms: i64,

    /// Turn server-side JavaScript off (`$where`, `$function`, `$accumulator`, `mapReduce`), as
    /// mongod's `--noscripting` / `security.javascriptEnabled: false`.
    #[arg(long = "noscripting", env = "TIDEWAY_NOSCRIPTING")]
    pub noscripting: bool,

    /// Wall-time cap of one server-side JavaScript invocation, in milliseconds (the command's
    /// maxTimeMS also applies).
    #[arg(long = "js-time-limit-ms", env = "TIDEWAY_JS_TIME_LIMIT_MS", default_value_t = tideway_query::js::DEFAULT_TIME_LIMIT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub js_time_limit_ms: u64,

    /// Memory limit of the JavaScript runtime of each server thread, in MiB.
    #[arg(long = "js-memory-limit-mb", env = "TIDEWAY_JS_MEMORY_LIMIT_MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub js_memory_limit_mb: u64,

    /// Server parameter at startup, as name=value (repeatable).
    #[arg(long = "setParameter", value_name = "NAME=VALUE")]
    pub set_parameter: Vec<String>,

    /// A YAML configuration file in mongod's format (`net.port`, `storage.dbPath`, …); flags and
    /// TIDEWAY_* variables override what it sets.
    #[arg(long, short = 'f', env = "TIDEWAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Run as the primary of a one-member replica set of this name (mongod's `--replSet`;
    /// `replication.replSetName` in the file). Standalone without it.
    #[arg(long = "replSet", env = "TIDEWAY_REPL_SET", value_name = "NAME", value_parser = parse_set_name)]
    pub repl_set: Option<String>,

    /// Print the effective configuration as a YAML configuration file and exit.
    #[arg(long = "outputConfig")]
    pub output_config: bool,

    /// TLS on the listening port, as mongod's `--tlsMode` (`net.tls.mode`): disabled, allowTLS
    /// or preferTLS (plain and TLS connections both accepted), requireTLS (TLS only).
    #[arg(long = "tlsMode", env = "TIDEWAY_TLS_MODE", value_enum, default_value_t = TlsMode::Disabled)]
    pub tls_mode: TlsMode,

    /// PEM file with the server's certificate chain and private key (`net.tls.certificateKeyFile`);
    /// required when --tlsMode is not disabled.
    #[arg(
        long = "tlsCertificateKeyFile",
        env = "TIDEWAY_TLS_CERTIFICATE_KEY_FILE",
        value_name = "PEM"
    )]
    pub tls_certificate_key_file: Option<PathBuf>,

    /// PEM file of the certificate authorities that client certificates are verified against
    /// (`net.tls.CAFile`); with it, TLS clients must present a certificate it signed.
    #[arg(long = "tlsCAFile", env = "TIDEWAY_TLS_CA_FILE", value_name = "PEM")]
    pub tls_ca_file: Option<PathBuf>,

    /// With --tlsCAFile, also accept TLS clients that present no certificate (a certificate that
    /// is presented is still verified); `net.tls.allowConnectionsWithoutCertificates`.
    #[arg(
        long = "tlsAllowConnectionsWithoutCertificates",
        env = "TIDEWAY_TLS_ALLOW_CONNECTIONS_WITHOUT_CERTIFICATES"
    )]
    pub tls_allow_connections_without_certificates: bool,

    /// Require authentication and check every command's privileges (mongod's `--auth`;
    /// `security.authorization: enabled` in the file). Without it every client may do anything.
    #[arg(long, env = "TIDEWAY_AUTH")]
    pub auth: bool,
}

/// Why the process's configuration could not be built.
#[derive(Debug)]
pub enum LoadError {
    /// The command line or an environment variable (also `--help` and `--version`, which clap
    /// prints before it exits).
    CommandLine(clap::Error),
    /// The configuration file: unreadable, not YAML, or a key or value refused.
    File(CommandError),
    /// Settings that do not go together (mongod's startup checks, e.g. a TLS mode without a
    /// certificate key file).
    Inconsistent(CommandError),
}

impl Default for Config {
    /// The defaults of every flag, ignoring the process's real arguments.
    fn default() -> Self {
        Config::parse_from(["tideway"])
    }
}

/// The oplog size of replica-set mode without `--oplogSize` (mongod: 5% of the disk, at least
/// 990 MB; tideway's capped oplog only holds what was written, so a fixed bound suffices).
pub const DEFAULT_OPLOG_SIZE_MB: u64 = 1024;

impl Config {
    /// How large an oplog the server keeps, if any (see `oplog_size_mb`).
    pub fn oplog_size_mb(&self) -> Option<u64> {
        self.oplog_size_mb
            .or(self.repl_set.as_ref().map(|_| DEFAULT_OPLOG_SIZE_MB))
    }

    /// The configuration of this process: its command line, environment and `--config` file.
    pub fn load() -> Result<Config, LoadError> {
        Config::load_from(std::env::args_os())
    }

    /// The configuration for `args` (the program name first) and the process's environment; a
    /// setting the file sets applies where neither a flag nor a variable set it.
    pub(crate) fn load_from<I, T>(args: I) -> Result<Config, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        tls::refuse_unsupported_flags(args.iter().map(OsString::as_os_str))
            .map_err(LoadError::Inconsistent)?;
        let matches = Config::command()
            .try_get_matches_from(args)
            .map_err(LoadError::CommandLine)?;
        let mut config = Config::from_arg_matches(&matches).map_err(LoadError::CommandLine)?;
        if let Some(path) = &config.config {
            let text = std::fs::read_to_string(path).map_err(|error| {
                LoadError::File(CommandError::bad_value(format!(
                    "Error reading config file {}: {error}",
                    path.display()
                )))
            })?;
            let settings = file::parse(&text).map_err(LoadError::File)?;
            config.apply_file(settings, |id| set_explicitly(&matches, id));
        }
        tls::check_settings(&config).map_err(LoadError::Inconsistent)?;
        check_storage_settings(&config).map_err(LoadError::Inconsistent)?;
        check_test_options(&config).map_err(LoadError::Inconsistent)?;
        Ok(config)
    }

    /// Takes each setting of the file whose flag `explicit` says was not given (on the command
    /// line or through its variable). `systemLog.verbosity` yields to `-v` and `--log-level`
    /// alike; `setParameter` entries yield, name by name, to `--setParameter` (and
    /// `enableTestCommands` to `--enableTestCommands`).
    pub(crate) fn apply_file(
        &mut self,
        settings: file::FileSettings,
        explicit: impl Fn(&str) -> bool,
    ) {
        fn take<T>(field: &mut T, value: Option<T>, flag_given: bool) {
            if let (Some(value), false) = (value, flag_given) {
                *field = value;
            }
        }
        take(&mut self.port, settings.port, explicit("port"));
        take(&mut self.bind_ip, settings.bind_ip, explicit("bind_ip"));
        take(
            &mut self.max_conns,
            settings.max_conns,
            explicit("max_conns"),
        );
        take(&mut self.dbpath, settings.dbpath, explicit("dbpath"));
        take(
            &mut self.repl_set,
            settings.repl_set.map(Some),
            explicit("repl_set"),
        );
        take(
            &mut self.oplog_size_mb,
            settings.oplog_size_mb.map(Some),
            explicit("oplog_size_mb"),
        );
        take(&mut self.storage, settings.storage, explicit("storage"));
        take(
            &mut self.pg_uri,
            settings.pg_uri.map(Some),
            explicit("pg_uri"),
        );
        take(
            &mut self.pg_pool_size,
            settings.pg_pool_size,
            explicit("pg_pool_size"),
        );
        take(
            &mut self.pg_distribute,
            settings.pg_distribute.map(Some),
            explicit("pg_distribute"),
        );
        take(
            &mut self.syncdelay_ms,
            settings.syncdelay_ms.map(Some),
            explicit("syncdelay_ms"),
        );
        take(
            &mut self.verbose,
            settings.verbosity,
            explicit("verbose") || explicit("log_level"),
        );
        take(&mut self.slowms, settings.slowms, explicit("slowms"));
        take(&mut self.profile, settings.profile, explicit("profile"));
        take(&mut self.tls_mode, settings.tls_mode, explicit("tls_mode"));
        take(
            &mut self.tls_certificate_key_file,
            settings.tls_certificate_key_file.map(Some),
            explicit("tls_certificate_key_file"),
        );
        take(
            &mut self.tls_ca_file,
            settings.tls_ca_file.map(Some),
            explicit("tls_ca_file"),
        );
        take(
            &mut self.tls_allow_connections_without_certificates,
            settings.tls_allow_connections_without_certificates,
            explicit("tls_allow_connections_without_certificates"),
        );
        take(&mut self.auth, settings.auth, explicit("auth"));
        take(
            &mut self.noscripting,
            settings.javascript_enabled.map(|enabled| !enabled),
            explicit("noscripting"),
        );
        let from_command_line: Vec<&str> = self
            .set_parameter
            .iter()
            .filter_map(|assignment| assignment.split_once('=').map(|(name, _)| name))
            .collect();
        let test_commands_flag = explicit("enable_test_commands");
        let mut parameters: Vec<String> = settings
            .set_parameter
            .into_iter()
            .filter(|(name, _)| {
                let overridden = from_command_line.contains(&name.as_str())
                    || (test_commands_flag && name == "enableTestCommands");
                !overridden
            })
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        parameters.append(&mut self.set_parameter);
        self.set_parameter = parameters;
    }

    /// The effective configuration as a mongod YAML configuration file (`--outputConfig`).
    pub fn to_yaml(&self) -> String {
        file::render(self)
    }

    /// Every address to listen on: each `--bind_ip` entry resolved, with `--port`.
    pub(crate) fn listen_addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
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
    pub(crate) fn js_limits(&self) -> tideway_query::js::JsLimits {
        tideway_query::js::JsLimits {
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

/// Whether the command line or an environment variable gave the argument `id` (not its default).
fn set_explicitly(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// The storage settings that do not go together: `--storage postgres` needs `--pgUri`, and is
/// a router, so it takes no replica-set or local-durability option; `--pgUri` needs it.
pub(crate) fn check_storage_settings(config: &Config) -> CommandResult<()> {
    if config.storage != StorageKind::Postgres {
        if config.pg_uri.is_some() {
            return Err(CommandError::bad_value(
                "--pgUri (storage.postgres.uri) needs --storage postgres",
            ));
        }
        if config.pg_distribute.is_some() {
            return Err(CommandError::bad_value(
                "--pgDistribute (storage.postgres.distribute) needs --storage postgres",
            ));
        }
        return Ok(());
    }
    if config.pg_uri.is_none() {
        return Err(CommandError::bad_value(
            "--storage postgres needs --pgUri postgresql://user@host:port/database (or TIDEWAY_PG_URI, storage.postgres.uri)",
        ));
    }
    let refused = [
        (config.repl_set.is_some(), "--replSet"),
        (config.oplog_size_mb.is_some(), "--oplogSize"),
        (config.syncdelay_ms.is_some(), "--syncdelay-ms"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(CommandError::bad_value(format!(
            "{flag} cannot be used with --storage postgres: over PostgreSQL tideway answers as a router (mongos), with transactions and retryable writes kept in the database, and durability is the database's commit"
        )));
    }
    Ok(())
}

/// Test-only options need test commands enabled (`--enableTestCommands`, or the parameter).
fn check_test_options(config: &Config) -> CommandResult<()> {
    if config.test_clock_skew_ms == 0 {
        return Ok(());
    }
    let parameters =
        crate::params::Parameters::at_startup(config.enable_test_commands, &config.set_parameter)?;
    if parameters.test_commands_enabled() {
        Ok(())
    } else {
        Err(CommandError::bad_value(
            "--testClockSkewMs is a test option: it needs --enableTestCommands",
        ))
    }
}

/// `--pgPoolSize`: 1 to 10,000 connections.
fn parse_pool_size(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|size| (1..=10_000).contains(size))
        .ok_or_else(|| format!("{text} is not a pool size between 1 and 10000"))
}

/// `--replSet`'s value checked as mongod checks it (a set name; mongod also accepts
/// `name/seed,seed` seed lists, which a one-node set has no use for).
pub(crate) fn check_set_name(name: &str) -> CommandResult<String> {
    if name.is_empty() {
        return Err(CommandError::bad_value("replSet set name may not be empty"));
    }
    if name.contains('/') {
        return Err(CommandError::bad_value(format!(
            "tideway's replica set has one member: --replSet takes a set name without a seed list, got '{name}'"
        )));
    }
    Ok(name.to_owned())
}

/// [`check_set_name`] for clap.
pub(crate) fn parse_set_name(name: &str) -> Result<String, String> {
    check_set_name(name).map_err(|error| error.errmsg)
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
        assert_eq!(config.js_limits(), tideway_query::js::JsLimits::default());
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

    /// A configuration file in a fresh directory, and its path.
    fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tideway.conf");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    // mongod's `--auth` and `security.authorization: enabled|disabled`; the flag wins.
    #[test]
    fn auth_comes_from_the_flag_or_the_file() {
        assert!(!Config::default().auth);
        assert!(load(&["--auth"]).unwrap().auth);
        let (_dir, path) = config_file("security:\n  authorization: enabled\n");
        let path = path.to_str().unwrap();
        let from_file = load(&["-f", path]).unwrap();
        assert!(from_file.auth);
        let mut reloaded = Config::default();
        reloaded.apply_file(file::parse(&from_file.to_yaml()).unwrap(), |_| false);
        assert!(reloaded.auth, "--outputConfig writes it back");
        let (_dir, disabled) = config_file("security:\n  authorization: disabled\n");
        assert!(
            load(&["-f", disabled.to_str().unwrap(), "--auth"])
                .unwrap()
                .auth
        );
    }

    // A test-only option is refused without test commands, and taken with either way of
    // turning them on.
    #[test]
    fn the_clock_skew_needs_test_commands() {
        match load(&["--testClockSkewMs", "3600000"]) {
            Err(LoadError::Inconsistent(error)) => {
                assert!(
                    error.errmsg.contains("needs --enableTestCommands"),
                    "{}",
                    error.errmsg
                )
            }
            other => panic!("loaded without test commands: {other:?}"),
        }
        let flag = load(&["--testClockSkewMs", "-3600000", "--enableTestCommands"]).unwrap();
        assert_eq!(flag.test_clock_skew_ms, -3_600_000);
        let parameter = load(&[
            "--testClockSkewMs",
            "5",
            "--setParameter",
            "enableTestCommands=1",
        ])
        .unwrap();
        assert_eq!(parameter.test_clock_skew_ms, 5);
        assert_eq!(load(&[]).unwrap().test_clock_skew_ms, 0);
    }

    // `--storage postgres` needs `--pgUri`, is a router (no `--replSet`), and the URI comes
    // from the flag, the variable or `storage.postgres.uri`.
    #[test]
    fn postgres_storage_needs_a_uri_and_refuses_replica_set_options() {
        let refusal = |args: &[&str]| match load(args) {
            Err(LoadError::Inconsistent(error)) => error.errmsg,
            other => panic!("{args:?} loaded: {other:?}"),
        };
        assert!(refusal(&["--storage", "postgres"]).contains("needs --pgUri"));
        assert!(refusal(&["--pgUri", "postgresql://u@h/d"]).contains("needs --storage postgres"));
        assert!(refusal(&["--pgDistribute", "citus"]).contains("needs --storage postgres"));
        let uri = ["--storage", "postgres", "--pgUri", "postgresql://u@h/d"];
        assert!(
            refusal(&[&uri[..], &["--replSet", "rs0"]].concat()).starts_with("--replSet cannot")
        );
        assert!(refusal(&[&uri[..], &["--oplogSize", "5"]].concat()).starts_with("--oplogSize"));
        let config = load(&uri).unwrap();
        assert_eq!(config.storage, StorageKind::Postgres);
        assert_eq!(config.pg_uri.as_deref(), Some("postgresql://u@h/d"));
        assert_eq!(config.pg_pool_size, DEFAULT_PG_POOL_SIZE);
        assert_eq!(config.pg_distribute, None);
        let distributed = load(&[&uri[..], &["--pgDistribute", "citus"]].concat()).unwrap();
        assert_eq!(distributed.pg_distribute, Some(PgDistribute::Citus));
        assert!(load(&[&uri[..], &["--pgDistribute", "yugabyte"]].concat()).is_err());
        let (_dir, path) = config_file(
            "storage:\n  engine: postgres\n  postgres:\n    uri: postgresql://f@h/d\n    poolSize: 4\n    distribute: citus\n",
        );
        let from_file = load(&["-f", path.to_str().unwrap()]).unwrap();
        assert_eq!(from_file.pg_uri.as_deref(), Some("postgresql://f@h/d"));
        assert_eq!(from_file.pg_pool_size, 4);
        assert_eq!(from_file.pg_distribute, Some(PgDistribute::Citus));
        let mut reloaded = Config::default();
        reloaded.apply_file(file::parse(&from_file.to_yaml()).unwrap(), |_| false);
        assert_eq!(
            (
                reloaded.storage,
                reloaded.pg_uri,
                reloaded.pg_pool_size,
                reloaded.pg_distribute
            ),
            (
                StorageKind::Postgres,
                Some("postgresql://f@h/d".to_owned()),
                4,
                Some(PgDistribute::Citus)
            ),
            "--outputConfig writes them back"
        );
    }

    fn load(args: &[&str]) -> Result<Config, LoadError> {
        Config::load_from(std::iter::once("tideway").chain(args.iter().copied()))
    }

    #[test]
    fn a_flag_beats_the_file_and_the_file_beats_the_default() {
        let (_dir, path) = config_file(
            "net:\n  port: 27100\n  bindIpAll: true\noperationProfiling:\n  mode: all\n  slowOpThresholdMs: 300\nsecurity:\n  javascriptEnabled: false\nstorage:\n  engine: memory\nsetParameter:\n  ttlMonitorSleepSecs: 7\n  allowDiskUseByDefault: false\n",
        );
        let path = path.to_str().unwrap();
        let config = load(&[
            "-f",
            path,
            "--port",
            "27200",
            "--setParameter",
            "ttlMonitorSleepSecs=9",
        ])
        .unwrap();
        assert_eq!(config.port, 27200, "the flag");
        assert_eq!(config.bind_ip, vec!["0.0.0.0"], "the file");
        assert_eq!(config.slowms, 300);
        assert_eq!(config.profile, 2);
        assert_eq!(config.storage, StorageKind::Memory);
        assert!(!config.js_limits().enabled);
        assert_eq!(config.max_conns, 10_000, "the default");
        assert_eq!(
            config.set_parameter,
            vec!["allowDiskUseByDefault=false", "ttlMonitorSleepSecs=9"]
        );
        let parameters = crate::params::Parameters::at_startup(
            config.enable_test_commands,
            &config.set_parameter,
        )
        .unwrap();
        assert_eq!(parameters.ttl_monitor_sleep_secs(), 9);
        assert!(!parameters.allow_disk_use_by_default());
        let long = load(&["--config", path]).unwrap();
        assert_eq!(long.port, 27100);
        assert_eq!(long.config.as_deref(), Some(std::path::Path::new(path)));
    }

    #[test]
    fn a_variable_beats_the_file() {
        // What `load_from` passes for a setting given through its TIDEWAY_* variable: explicit.
        let settings = file::parse(
            "net:\n  port: 27100\noperationProfiling:\n  slowOpThresholdMs: 300\nsecurity:\n  javascriptEnabled: true\nsetParameter:\n  enableTestCommands: true\n  ttlMonitorEnabled: false\n",
        )
        .unwrap();
        let mut config = Config::parse_from(["tideway", "--slowms", "5", "--noscripting"]);
        config.apply_file(settings, |id| {
            ["slowms", "noscripting", "enable_test_commands"].contains(&id)
        });
        assert_eq!(config.slowms, 5);
        assert!(config.noscripting);
        assert_eq!(config.port, 27100);
        assert_eq!(config.set_parameter, vec!["ttlMonitorEnabled=false"]);
    }

    #[test]
    fn tls_flags_and_file_keys_configure_tls() {
        let flags = Config::parse_from([
            "tideway",
            "--tlsMode",
            "requireTLS",
            "--tlsCertificateKeyFile",
            "/etc/server.pem",
            "--tlsCAFile",
            "/etc/ca.pem",
            "--tlsAllowConnectionsWithoutCertificates",
        ]);
        assert_eq!(flags.tls_mode, TlsMode::RequireTls);
        assert_eq!(
            flags.tls_certificate_key_file.as_deref(),
            Some(std::path::Path::new("/etc/server.pem"))
        );
        assert_eq!(
            flags.tls_ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert!(flags.tls_allow_connections_without_certificates);
        assert_eq!(Config::default().tls_mode, TlsMode::Disabled);
        let (_dir, path) = config_file(
            "net:\n  tls:\n    mode: preferTLS\n    certificateKeyFile: /etc/file.pem\n    CAFile: /etc/ca.pem\n",
        );
        let path = path.to_str().unwrap();
        let from_file = load(&["-f", path]).unwrap();
        assert_eq!(from_file.tls_mode, TlsMode::PreferTls);
        assert_eq!(
            from_file.tls_certificate_key_file.as_deref(),
            Some(std::path::Path::new("/etc/file.pem"))
        );
        let flag_wins = load(&["-f", path, "--tlsMode", "allowTLS"]).unwrap();
        assert_eq!(flag_wins.tls_mode, TlsMode::AllowTls);
        // --outputConfig writes them back.
        let mut reloaded = Config::default();
        reloaded.apply_file(file::parse(&flags.to_yaml()).unwrap(), |_| false);
        assert_eq!(reloaded.tls_mode, TlsMode::RequireTls);
        assert_eq!(reloaded.tls_ca_file, flags.tls_ca_file);
        assert!(reloaded.tls_allow_connections_without_certificates);
        let inconsistent = load(&["--tlsMode", "requireTLS"]).unwrap_err();
        let LoadError::Inconsistent(error) = inconsistent else {
            panic!("{inconsistent:?}")
        };
        assert_eq!(
            error.errmsg,
            "need tlsCertificateKeyFile or certificateSelector when TLS is enabled"
        );
    }

    #[test]
    fn file_verbosity_yields_to_v_and_log_level() {
        let (_dir, path) = config_file("systemLog:\n  verbosity: 2\n");
        let path = path.to_str().unwrap();
        assert_eq!(load(&["-f", path]).unwrap().log_filter(), "trace");
        assert_eq!(load(&["-f", path, "-v"]).unwrap().log_filter(), "debug");
        assert_eq!(
            load(&["-f", path, "--log-level", "warn"])
                .unwrap()
                .log_filter(),
            "warn"
        );
    }

    #[test]
    fn a_file_that_cannot_be_used_stops_loading() {
        let missing = load(&["-f", "/nonexistent/tideway.conf"]).unwrap_err();
        let LoadError::File(error) = missing else {
            panic!("{missing:?}")
        };
        assert!(
            error.errmsg.contains("/nonexistent/tideway.conf"),
            "{error:?}"
        );
        let (_dir, path) = config_file("replication:\n  enableMajorityReadConcern: true\n");
        let refused = load(&["-f", path.to_str().unwrap(), "--port", "1"]).unwrap_err();
        let LoadError::File(error) = refused else {
            panic!("{refused:?}")
        };
        assert!(
            error
                .errmsg
                .contains("replication.enableMajorityReadConcern"),
            "{error:?}"
        );
        assert!(matches!(
            load(&["--config"]),
            Err(LoadError::CommandLine(_))
        ));
    }

    #[test]
    fn output_config_reads_back_as_the_same_configuration() {
        let config = Config::parse_from([
            "tideway",
            "--port",
            "27300",
            "--bind_ip",
            "127.0.0.1,::1",
            "--dbpath",
            "/tmp/tideway data",
            "--storage",
            "memory",
            "--syncdelay-ms",
            "50",
            "--maxConns",
            "42",
            "-v",
            "--slowms",
            "12",
            "--profile",
            "1",
            "--noscripting",
            "--enableTestCommands",
            "--setParameter",
            "ttlMonitorSleepSecs=3",
            "--replSet",
            "rs0",
        ]);
        let yaml = config.to_yaml();
        let mut reloaded = Config::default();
        reloaded.apply_file(file::parse(&yaml).unwrap(), |_| false);
        assert_eq!(reloaded.port, 27300);
        assert_eq!(reloaded.bind_ip, vec!["127.0.0.1", "::1"]);
        assert_eq!(reloaded.dbpath, PathBuf::from("/tmp/tideway data"));
        assert_eq!(reloaded.storage, StorageKind::Memory);
        assert_eq!(reloaded.syncdelay_ms, Some(50));
        assert_eq!(reloaded.max_conns, 42);
        assert_eq!(reloaded.verbose, 1);
        assert_eq!(reloaded.slowms, 12);
        assert_eq!(reloaded.profile, 1);
        assert!(reloaded.noscripting);
        assert_eq!(
            reloaded.set_parameter,
            vec!["enableTestCommands=true", "ttlMonitorSleepSecs=3"]
        );
        assert_eq!(reloaded.repl_set.as_deref(), Some("rs0"));
        assert_eq!(reloaded.to_yaml(), yaml);
    }
}
