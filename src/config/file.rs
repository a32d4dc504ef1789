//! The mongod YAML configuration file (`--config <file>` / `-f <file>`): which of mongod's keys
//! tideway reads, the `Config` field each one sets, and the refusals. Every key is honoured or
//! refused at startup with a message naming it; none is ignored:
//! - keys no mongod knows: `Unrecognized option: <key>`, as mongod (2 BadValue);
//! - mongod keys tideway does not implement (`replication.*` but `replSetName` and `oplogSizeMB`,
//!   `net.tls.*` but `mode`, `certificateKeyFile`, `CAFile` and `allowConnectionsWithoutCertificates`,
//!   `storage.wiredTiger.*`, …, the `MONGOD_KEYS` table): 238 NotImplemented;
//! - values mongod would refuse, with mongod's wording where it has one.
//!
//! Values are read as mongod reads them: its YAML parser hands every scalar over as text and each
//! option parses that text, so `port: "27017"` is a port while `javascriptEnabled: 1` is not a
//! boolean. Pure: reading the file and the precedence of flags and variables over it belong to
//! `Config::load_from`.

use std::path::PathBuf;

use clap::ValueEnum;
use yaml_rust2::yaml::Hash;
use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

use super::{Config, PgDistribute, StorageKind};
use crate::config::TlsMode;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// What a configuration file sets: `None` (or empty) where it says nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSettings {
    /// `net.port`.
    pub port: Option<u16>,
    /// `net.bindIp` split at commas, or `0.0.0.0` for `net.bindIpAll: true`.
    pub bind_ip: Option<Vec<String>>,
    /// `net.maxIncomingConnections`.
    pub max_conns: Option<usize>,
    /// `storage.dbPath`.
    pub dbpath: Option<PathBuf>,
    /// `storage.engine`: `disk`, `memory` or `postgres`, tideway's engines.
    pub storage: Option<StorageKind>,
    /// `storage.postgres.uri` (`--pgUri`).
    pub pg_uri: Option<String>,
    /// `storage.postgres.poolSize` (`--pgPoolSize`).
    pub pg_pool_size: Option<usize>,
    /// `storage.postgres.distribute` (`--pgDistribute`).
    pub pg_distribute: Option<PgDistribute>,
    /// `storage.journal.commitIntervalMs`: acknowledge before the flush, flush at least this
    /// often (`--syncdelay-ms`).
    pub syncdelay_ms: Option<u64>,
    /// `systemLog.verbosity` (`-v` counted).
    pub verbosity: Option<u8>,
    /// `operationProfiling.slowOpThresholdMs`.
    pub slowms: Option<u64>,
    /// `operationProfiling.mode` as a profiling level: off 0, slowOp 1, all 2.
    pub profile: Option<i32>,
    /// `security.javascriptEnabled` (false is `--noscripting`).
    pub javascript_enabled: Option<bool>,
    /// `security.authorization` (`enabled` is `--auth`).
    pub auth: Option<bool>,
    /// `setParameter`, in file order, each already checked as `--setParameter` checks it.
    pub set_parameter: Vec<(String, String)>,
    /// `replication.replSetName` (`--replSet`): one-node replica-set mode.
    pub repl_set: Option<String>,
    /// `replication.oplogSizeMB` (`--oplogSize`).
    pub oplog_size_mb: Option<u64>,
    /// `net.tls.mode` (`--tlsMode`).
    pub tls_mode: Option<TlsMode>,
    /// `net.tls.certificateKeyFile` (`--tlsCertificateKeyFile`).
    pub tls_certificate_key_file: Option<PathBuf>,
    /// `net.tls.CAFile` (`--tlsCAFile`).
    pub tls_ca_file: Option<PathBuf>,
    /// `net.tls.allowConnectionsWithoutCertificates`.
    pub tls_allow_connections_without_certificates: Option<bool>,
}

/// mongod's documented configuration-file keys that tideway does not implement (MongoDB 8.0's
/// "Configuration File Options"). Under `systemLog.component.` every key is one of them.
const MONGOD_KEYS: &[&str] = &[
    "systemLog.quiet",
    "systemLog.traceAllExceptions",
    "systemLog.syslogFacility",
    "systemLog.path",
    "systemLog.logAppend",
    "systemLog.logRotate",
    "systemLog.destination",
    "systemLog.timeStampFormat",
    "processManagement.fork",
    "processManagement.pidFilePath",
    "processManagement.timeZoneInfo",
    "processManagement.windowsService.serviceName",
    "processManagement.windowsService.displayName",
    "processManagement.windowsService.description",
    "processManagement.windowsService.serviceUser",
    "processManagement.windowsService.servicePassword",
    "net.wireObjectCheck",
    "net.ipv6",
    "net.unixDomainSocket.enabled",
    "net.unixDomainSocket.pathPrefix",
    "net.unixDomainSocket.filePermissions",
    "net.tls.certificateKeyFilePassword",
    "net.tls.certificateSelector",
    "net.tls.clusterCertificateSelector",
    "net.tls.clusterFile",
    "net.tls.clusterPassword",
    "net.tls.clusterAuthX509.attributes",
    "net.tls.clusterAuthX509.extensionValue",
    "net.tls.clusterCAFile",
    "net.tls.CRLFile",
    "net.tls.allowInvalidCertificates",
    "net.tls.allowInvalidHostnames",
    "net.tls.disabledProtocols",
    "net.tls.FIPSMode",
    "net.tls.logVersions",
    "net.compression.compressors",
    "security.keyFile",
    "security.clusterAuthMode",
    "security.transitionToAuth",
    "security.redactClientLogData",
    "security.clusterIpSourceAllowlist",
    "security.clusterIpSourceWhitelist",
    "security.sasl.hostName",
    "security.sasl.serviceName",
    "security.sasl.saslauthdSocketPath",
    "security.enableEncryption",
    "security.encryptionCipherMode",
    "security.encryptionKeyFile",
    "security.kmip.keyIdentifier",
    "security.kmip.rotateMasterKey",
    "security.kmip.serverName",
    "security.kmip.port",
    "security.kmip.clientCertificateFile",
    "security.kmip.clientCertificatePassword",
    "security.kmip.clientCertificateSelector",
    "security.kmip.serverCAFile",
    "security.kmip.connectRetries",
    "security.kmip.connectTimeoutMS",
    "security.kmip.activateKeys",
    "security.kmip.keyStatePollingSeconds",
    "security.kmip.useLegacyProtocol",
    "security.ldap.servers",
    "security.ldap.bind.method",
    "security.ldap.bind.saslMechanisms",
    "security.ldap.bind.queryUser",
    "security.ldap.bind.queryPassword",
    "security.ldap.bind.useOSDefaults",
    "security.ldap.transportSecurity",
    "security.ldap.timeoutMS",
    "security.ldap.retryCount",
    "security.ldap.userToDNMapping",
    "security.ldap.authz.queryTemplate",
    "security.ldap.validateLDAPServerConfig",
    "storage.directoryPerDB",
    "storage.syncPeriodSecs",
    "storage.oplogMinRetentionHours",
    "storage.wiredTiger.engineConfig.cacheSizeGB",
    "storage.wiredTiger.engineConfig.journalCompressor",
    "storage.wiredTiger.engineConfig.directoryForIndexes",
    "storage.wiredTiger.engineConfig.maxCacheOverflowFileSizeGB",
    "storage.wiredTiger.engineConfig.zstdCompressionLevel",
    "storage.wiredTiger.collectionConfig.blockCompressor",
    "storage.wiredTiger.indexConfig.prefixCompression",
    "storage.inMemory.engineConfig.inMemorySizeGB",
    "operationProfiling.slowOpSampleRate",
    "operationProfiling.filter",
    "replication.enableMajorityReadConcern",
    "replication.localPingThresholdMs",
    "sharding.clusterRole",
    "sharding.archiveMovedChunks",
    "sharding.configDB",
    "auditLog.auditEncryptionKeyIdentifier",
    "auditLog.compressionMode",
    "auditLog.destination",
    "auditLog.filter",
    "auditLog.format",
    "auditLog.localAuditKeyFile",
    "auditLog.path",
    "auditLog.runtimeConfiguration",
];

/// mongod's bounds of `storage.journal.commitIntervalMs`.
const COMMIT_INTERVAL_MS: std::ops::RangeInclusive<i64> = 1..=500;

/// Reads the text of a configuration file. An empty file sets nothing, as in mongod.
pub fn parse(text: &str) -> CommandResult<FileSettings> {
    let documents = YamlLoader::load_from_str(text).map_err(|error| {
        CommandError::bad_value(format!("Error parsing YAML config file: {error}"))
    })?;
    let root = match documents.as_slice() {
        [] => return Ok(FileSettings::default()),
        [root] => root,
        _ => {
            return Err(CommandError::bad_value(
                "Error parsing YAML config file: more than one YAML document",
            ))
        }
    };
    let mut leaves = Vec::new();
    match root {
        Yaml::Null | Yaml::BadValue => return Ok(FileSettings::default()),
        Yaml::Hash(map) => flatten(map, "", &mut leaves)?,
        _ => {
            return Err(CommandError::bad_value(
                "No map found at top level of YAML config",
            ))
        }
    }
    let mut settings = FileSettings::default();
    let mut bind_ip_all = false;
    for (key, value) in leaves {
        match key.as_str() {
            "net.port" => {
                let port = int(&key, value)?;
                settings.port = Some(u16::try_from(port).map_err(|_| {
                    CommandError::bad_value(format!(
                        "net.port must be between 0 and 65535, got {port}"
                    ))
                })?);
            }
            "net.bindIp" => {
                settings.bind_ip = Some(
                    value_text(&key, value)?
                        .split(',')
                        .map(|host| host.trim().to_owned())
                        .filter(|host| !host.is_empty())
                        .collect(),
                );
            }
            "net.bindIpAll" => bind_ip_all = boolean(&key, value)?,
            "net.maxIncomingConnections" => {
                let max_conns = int(&key, value)?;
                settings.max_conns = Some(
                    usize::try_from(max_conns)
                        .ok()
                        .filter(|max| *max >= 1)
                        .ok_or_else(|| {
                            CommandError::bad_value(format!(
                                "net.maxIncomingConnections must be at least 1, got {max_conns}"
                            ))
                        })?,
                );
            }
            "net.tls.mode" => settings.tls_mode = Some(TlsMode::parse(&value_text(&key, value)?)?),
            "net.tls.certificateKeyFile" => {
                settings.tls_certificate_key_file = Some(PathBuf::from(value_text(&key, value)?));
            }
            "net.tls.CAFile" => {
                settings.tls_ca_file = Some(PathBuf::from(value_text(&key, value)?))
            }
            "net.tls.allowConnectionsWithoutCertificates" => {
                settings.tls_allow_connections_without_certificates = Some(boolean(&key, value)?);
            }
            "storage.dbPath" => settings.dbpath = Some(PathBuf::from(value_text(&key, value)?)),
            "storage.engine" => {
                settings.storage = Some(match value_text(&key, value)?.as_str() {
                    "disk" => StorageKind::Disk,
                    "memory" => StorageKind::Memory,
                    "postgres" => StorageKind::Postgres,
                    other => {
                        return Err(CommandError::bad_value(format!(
                            "Bad value for storage.engine: {other}.  Supported engines are: (disk|memory|postgres)"
                        )))
                    }
                });
            }
            "storage.postgres.uri" => settings.pg_uri = Some(value_text(&key, value)?),
            "storage.postgres.distribute" => {
                let text = value_text(&key, value)?;
                let engine = PgDistribute::from_str(&text, false).map_err(|_| {
                    CommandError::bad_value(format!(
                        "Bad value for storage.postgres.distribute: {text}.  Supported: (citus)"
                    ))
                })?;
                settings.pg_distribute = Some(engine);
            }
            "storage.postgres.poolSize" => {
                let size = int(&key, value)?;
                settings.pg_pool_size = Some(
                    usize::try_from(size)
                        .ok()
                        .filter(|size| (1..=10_000).contains(size))
                        .ok_or_else(|| {
                            CommandError::bad_value(format!(
                                "storage.postgres.poolSize must be between 1 and 10000, got {size}"
                            ))
                        })?,
                );
            }
            "storage.journal.commitIntervalMs" => {
                let interval_ms = int(&key, value)?;
                if !COMMIT_INTERVAL_MS.contains(&interval_ms) {
                    return Err(CommandError::bad_value(format!(
                        "storage.journal.commitIntervalMs must be between 1 and 500, got {interval_ms}"
                    )));
                }
                settings.syncdelay_ms = u64::try_from(interval_ms).ok();
            }
            "systemLog.verbosity" => {
                let verbosity = int(&key, value)?;
                if verbosity < 0 {
                    return Err(CommandError::bad_value(
                        "systemLog.verbosity YAML Config cannot be negative",
                    ));
                }
                settings.verbosity = Some(u8::try_from(verbosity).unwrap_or(u8::MAX));
            }
            "operationProfiling.mode" => {
                settings.profile = Some(match value_text(&key, value)?.as_str() {
                    "off" => 0,
                    "slowOp" => 1,
                    "all" => 2,
                    other => {
                        return Err(CommandError::bad_value(format!(
                            "Bad value for operationProfiling.mode: {other}.  Supported modes are: (off|slowOp|all)"
                        )))
                    }
                });
            }
            "operationProfiling.slowOpThresholdMs" => {
                let slowms = int(&key, value)?;
                settings.slowms = Some(u64::try_from(slowms).map_err(|_| {
                    CommandError::bad_value(format!(
                        "operationProfiling.slowOpThresholdMs must not be negative, got {slowms}"
                    ))
                })?);
            }
            "security.authorization" => {
                settings.auth = Some(match value_text(&key, value)?.as_str() {
                    "enabled" => true,
                    "disabled" => false,
                    other => {
                        return Err(CommandError::bad_value(format!(
                            "Bad value for security.authorization: {other}.  Supported values are: (enabled|disabled)"
                        )))
                    }
                });
            }
            "security.javascriptEnabled" => {
                settings.javascript_enabled = Some(boolean(&key, value)?);
            }
            "setParameter" => settings.set_parameter = set_parameters(value)?,
            "replication.replSetName" => {
                settings.repl_set = Some(crate::config::check_set_name(&value_text(&key, value)?)?);
            }
            "replication.oplogSizeMB" => {
                let megabytes = int(&key, value)?;
                settings.oplog_size_mb = Some(
                    u64::try_from(megabytes)
                        .ok()
                        .filter(|megabytes| (1..=1_048_576).contains(megabytes))
                        .ok_or_else(|| {
                            CommandError::bad_value(format!(
                                "replication.oplogSizeMB must be between 1 and 1048576, got {megabytes}"
                            ))
                        })?,
                );
            }
            _ => return Err(refusal(&key)),
        }
    }
    if bind_ip_all {
        if settings.bind_ip.is_some() {
            return Err(CommandError::bad_value(
                "net.bindIp and net.bindIpAll are mutually exclusive",
            ));
        }
        settings.bind_ip = Some(vec!["0.0.0.0".to_owned()]);
    }
    Ok(settings)
}

/// Every leaf of `map` under its dotted name, as mongod walks the file: nested mappings are
/// sections, anything else is a value; `setParameter` is one value (a mapping of names).
fn flatten<'a>(map: &'a Hash, path: &str, out: &mut Vec<(String, &'a Yaml)>) -> CommandResult<()> {
    for (name, value) in map {
        let name = scalar_text(name).ok_or_else(|| {
            CommandError::bad_value(format!(
                "Error parsing YAML config file: a key under '{path}' is not a name"
            ))
        })?;
        if name.is_empty() {
            return Err(CommandError::bad_value(
                "Found empty key in YAML config file",
            ));
        }
        let key = if path.is_empty() {
            name
        } else {
            format!("{path}.{name}")
        };
        match value {
            Yaml::Hash(section) if key != "setParameter" => flatten(section, &key, out)?,
            _ => out.push((key, value)),
        }
    }
    Ok(())
}

/// Why a key tideway does not read is refused.
fn refusal(key: &str) -> CommandError {
    let last = key.rsplit('.').next().unwrap_or(key);
    if last == "__exec" || last == "__rest" {
        return CommandError::new(
            ErrorCode::NotImplemented,
            format!(
                "Unsupported option: {key}: tideway does not expand __exec or __rest directives"
            ),
        );
    }
    if MONGOD_KEYS.contains(&key) || key.starts_with("systemLog.component.") {
        return CommandError::new(
            ErrorCode::NotImplemented,
            format!("Unsupported option: {key} is a mongod option tideway does not implement"),
        );
    }
    CommandError::bad_value(format!("Unrecognized option: {key}"))
}

/// The `setParameter` section: `name: value` pairs of scalars, each checked now.
fn set_parameters(value: &Yaml) -> CommandResult<Vec<(String, String)>> {
    let Yaml::Hash(map) = value else {
        return Err(CommandError::bad_value(
            "Option: setParameter is of type StringMap, but value in YAML config is not a map type",
        ));
    };
    let mut parameters = Vec::with_capacity(map.len());
    for (name, value) in map {
        let (Some(name), Some(value)) = (scalar_text(name), scalar_text(value)) else {
            return Err(CommandError::bad_value(
                "Option: setParameter has a map with non scalar values, which is not allowed",
            ));
        };
        crate::params::check_startup_parameter(&name, &value)?;
        parameters.push((name, value));
    }
    Ok(parameters)
}

/// A scalar as mongod's parser hands it over: its text.
fn scalar_text(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(text) | Yaml::Real(text) => Some(text.clone()),
        Yaml::Integer(number) => Some(number.to_string()),
        Yaml::Boolean(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// The text of a single value.
fn value_text(key: &str, value: &Yaml) -> CommandResult<String> {
    match value {
        Yaml::Null => Err(CommandError::bad_value(format!(
            "Error parsing option \"{key}\": no value"
        ))),
        Yaml::Array(_) => Err(CommandError::bad_value(format!(
            "Option: {key} is a list, but tideway expects a single value"
        ))),
        other => scalar_text(other).ok_or_else(|| {
            CommandError::bad_value(format!("Error parsing option \"{key}\": not a value"))
        }),
    }
}

fn int(key: &str, value: &Yaml) -> CommandResult<i64> {
    let text = value_text(key, value)?;
    text.parse::<i64>().map_err(|_| {
        CommandError::bad_value(format!(
            "Error parsing option \"{key}\" as int: \"{text}\" is not an integer"
        ))
    })
}

fn boolean(key: &str, value: &Yaml) -> CommandResult<bool> {
    match value_text(key, value)?.as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(CommandError::bad_value(format!(
            "Expected boolean but found string: {other} for option: {key}"
        ))),
    }
}

/// `config` as a configuration file: every setting the file format covers, with the value in
/// force (`--outputConfig`). Settings without a mongod key (`--log-format`, `--log-level`, the
/// JavaScript budgets) are not in it.
pub fn render(config: &Config) -> String {
    let mut net = Hash::new();
    net.insert(text_node("port"), Yaml::Integer(i64::from(config.port)));
    net.insert(text_node("bindIp"), text_node(&config.bind_ip.join(",")));
    net.insert(
        text_node("maxIncomingConnections"),
        Yaml::Integer(i64::try_from(config.max_conns).unwrap_or(i64::MAX)),
    );
    if config.tls_mode != TlsMode::Disabled {
        let mut tls = Hash::new();
        tls.insert(text_node("mode"), text_node(config.tls_mode.name()));
        if let Some(path) = &config.tls_certificate_key_file {
            tls.insert(
                text_node("certificateKeyFile"),
                text_node(&path.to_string_lossy()),
            );
        }
        if let Some(path) = &config.tls_ca_file {
            tls.insert(text_node("CAFile"), text_node(&path.to_string_lossy()));
        }
        if config.tls_allow_connections_without_certificates {
            tls.insert(
                text_node("allowConnectionsWithoutCertificates"),
                Yaml::Boolean(true),
            );
        }
        net.insert(text_node("tls"), Yaml::Hash(tls));
    }
    let mut storage = Hash::new();
    storage.insert(
        text_node("dbPath"),
        text_node(&config.dbpath.to_string_lossy()),
    );
    let engine = match config.storage {
        StorageKind::Disk => "disk",
        StorageKind::Memory => "memory",
        StorageKind::Postgres => "postgres",
    };
    storage.insert(text_node("engine"), text_node(engine));
    if let Some(uri) = &config.pg_uri {
        let mut postgres = Hash::new();
        postgres.insert(text_node("uri"), text_node(uri));
        postgres.insert(
            text_node("poolSize"),
            Yaml::Integer(i64::try_from(config.pg_pool_size).unwrap_or(i64::MAX)),
        );
        if let Some(engine) = config
            .pg_distribute
            .and_then(|engine| engine.to_possible_value())
        {
            postgres.insert(text_node("distribute"), text_node(engine.get_name()));
        }
        storage.insert(text_node("postgres"), Yaml::Hash(postgres));
    }
    if let Some(interval_ms) = config.syncdelay_ms {
        let mut journal = Hash::new();
        journal.insert(
            text_node("commitIntervalMs"),
            Yaml::Integer(i64::try_from(interval_ms).unwrap_or(i64::MAX)),
        );
        storage.insert(text_node("journal"), Yaml::Hash(journal));
    }
    let mut system_log = Hash::new();
    system_log.insert(
        text_node("verbosity"),
        Yaml::Integer(i64::from(config.verbose)),
    );
    let mut profiling = Hash::new();
    let mode = match config.profile {
        1 => "slowOp",
        2 => "all",
        _ => "off",
    };
    profiling.insert(text_node("mode"), text_node(mode));
    profiling.insert(
        text_node("slowOpThresholdMs"),
        Yaml::Integer(i64::try_from(config.slowms).unwrap_or(i64::MAX)),
    );
    let mut security = Hash::new();
    security.insert(
        text_node("authorization"),
        text_node(if config.auth { "enabled" } else { "disabled" }),
    );
    security.insert(
        text_node("javascriptEnabled"),
        Yaml::Boolean(!config.noscripting),
    );
    let mut parameters = Hash::new();
    if config.enable_test_commands {
        parameters.insert(text_node("enableTestCommands"), Yaml::Boolean(true));
    }
    for (name, value) in config
        .set_parameter
        .iter()
        .filter_map(|assignment| assignment.split_once('='))
    {
        parameters.insert(text_node(name), Yaml::from_str(value));
    }
    let mut root = Hash::new();
    root.insert(text_node("net"), Yaml::Hash(net));
    root.insert(text_node("storage"), Yaml::Hash(storage));
    root.insert(text_node("systemLog"), Yaml::Hash(system_log));
    root.insert(text_node("operationProfiling"), Yaml::Hash(profiling));
    root.insert(text_node("security"), Yaml::Hash(security));
    if !parameters.is_empty() {
        root.insert(text_node("setParameter"), Yaml::Hash(parameters));
    }
    let mut replication = Hash::new();
    if let Some(name) = &config.repl_set {
        replication.insert(text_node("replSetName"), text_node(name));
    }
    if let Some(megabytes) = config.oplog_size_mb {
        replication.insert(text_node("oplogSizeMB"), Yaml::Integer(megabytes as i64));
    }
    if !replication.is_empty() {
        root.insert(text_node("replication"), Yaml::Hash(replication));
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = YamlEmitter::new(&mut out).dump(&Yaml::Hash(root));
    out.push('\n');
    out
}

fn text_node(text: &str) -> Yaml {
    Yaml::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manual's sample file, reduced to what tideway reads, plus every other key it reads.
    const EVERY_KEY: &str = "
net:
   bindIp: 127.0.0.1, ::1
   port: 27018
   maxIncomingConnections: 200
   tls:
      mode: preferTLS
      certificateKeyFile: /etc/tideway/server.pem
      CAFile: /etc/tideway/ca.pem
      allowConnectionsWithoutCertificates: true
storage:
   dbPath: /var/lib/tideway
   engine: memory
   postgres:
      uri: postgresql://tideway@127.0.0.1:5432/tideway
      poolSize: 12
      distribute: citus
   journal:
      commitIntervalMs: 100
systemLog:
   verbosity: 1
operationProfiling:
   mode: slowOp
   slowOpThresholdMs: 250
security:
   javascriptEnabled: false
   authorization: enabled
setParameter:
   ttlMonitorSleepSecs: 5
   enableTestCommands: true
replication:
   replSetName: rs0
   oplogSizeMB: 64
";

    fn refusal_of(text: &str) -> CommandError {
        parse(text).expect_err("refused")
    }

    #[test]
    fn every_key_tideway_reads_parses() {
        let settings = parse(EVERY_KEY).unwrap();
        assert_eq!(
            settings,
            FileSettings {
                port: Some(27018),
                bind_ip: Some(vec!["127.0.0.1".to_owned(), "::1".to_owned()]),
                max_conns: Some(200),
                dbpath: Some(PathBuf::from("/var/lib/tideway")),
                storage: Some(StorageKind::Memory),
                pg_uri: Some("postgresql://tideway@127.0.0.1:5432/tideway".to_owned()),
                pg_pool_size: Some(12),
                pg_distribute: Some(PgDistribute::Citus),
                syncdelay_ms: Some(100),
                verbosity: Some(1),
                slowms: Some(250),
                profile: Some(1),
                javascript_enabled: Some(false),
                auth: Some(true),
                set_parameter: vec![
                    ("ttlMonitorSleepSecs".to_owned(), "5".to_owned()),
                    ("enableTestCommands".to_owned(), "true".to_owned()),
                ],
                repl_set: Some("rs0".to_owned()),
                oplog_size_mb: Some(64),
                tls_mode: Some(TlsMode::PreferTls),
                tls_certificate_key_file: Some(PathBuf::from("/etc/tideway/server.pem")),
                tls_ca_file: Some(PathBuf::from("/etc/tideway/ca.pem")),
                tls_allow_connections_without_certificates: Some(true),
            }
        );
    }

    #[test]
    fn empty_files_and_flow_style_are_read() {
        assert_eq!(parse("").unwrap(), FileSettings::default());
        assert_eq!(
            parse("# only a comment\n").unwrap(),
            FileSettings::default()
        );
        let flow = parse("{net: {port: 27019}, security: {javascriptEnabled: true}}").unwrap();
        assert_eq!(flow.port, Some(27019));
        assert_eq!(flow.javascript_enabled, Some(true));
    }

    #[test]
    fn scalars_are_read_as_text_like_mongod() {
        // mongod parses the scalar's text: a quoted number is a number, a quoted boolean a boolean.
        let quoted =
            parse("net:\n  port: \"27020\"\nsecurity:\n  javascriptEnabled: \"false\"\n").unwrap();
        assert_eq!(quoted.port, Some(27020));
        assert_eq!(quoted.javascript_enabled, Some(false));
        let all = parse("net:\n  bindIpAll: true\n").unwrap();
        assert_eq!(all.bind_ip, Some(vec!["0.0.0.0".to_owned()]));
        assert_eq!(
            parse("net:\n  bindIpAll: false\n").unwrap(),
            FileSettings::default()
        );
        let modes: Vec<_> = ["off", "slowOp", "all"]
            .iter()
            .map(|mode| {
                parse(&format!("operationProfiling: {{mode: {mode}}}"))
                    .unwrap()
                    .profile
            })
            .collect();
        assert_eq!(modes, vec![Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn unknown_keys_are_refused_as_mongod_refuses_them() {
        for (text, key) in [
            ("net:\n  bogus: 1\n", "net.bogus"),
            ("bogus: 1\n", "bogus"),
            ("net: 5\n", "net"),
            ("net:\n  port:\n    value2: 1\n", "net.port.value2"),
            (
                "storage:\n  journal:\n    enabled: true\n",
                "storage.journal.enabled",
            ),
        ] {
            let error = refusal_of(text);
            assert_eq!(error.code, ErrorCode::BadValue, "{text}");
            assert_eq!(
                error.errmsg,
                format!("Unrecognized option: {key}"),
                "{text}"
            );
        }
    }

    #[test]
    fn mongod_keys_tideway_lacks_are_refused_by_name() {
        for (text, key) in [
            (
                "replication:\n  enableMajorityReadConcern: false\n",
                "replication.enableMajorityReadConcern",
            ),
            ("security:\n  keyFile: /etc/keyfile\n", "security.keyFile"),
            (
                "net:\n  tls:\n    CRLFile: /etc/crl.pem\n",
                "net.tls.CRLFile",
            ),
            (
                "storage:\n  wiredTiger:\n    engineConfig:\n      cacheSizeGB: 1\n",
                "storage.wiredTiger.engineConfig.cacheSizeGB",
            ),
            (
                "systemLog:\n  component:\n    query:\n      verbosity: 2\n",
                "systemLog.component.query.verbosity",
            ),
            ("systemLog:\n  destination: file\n", "systemLog.destination"),
            (
                "processManagement:\n  fork: true\n",
                "processManagement.fork",
            ),
            (
                "security:\n  clusterIpSourceAllowlist:\n    - 127.0.0.1\n",
                "security.clusterIpSourceAllowlist",
            ),
        ] {
            let error = refusal_of(text);
            assert_eq!(error.code, ErrorCode::NotImplemented, "{text}");
            assert!(
                error
                    .errmsg
                    .starts_with(&format!("Unsupported option: {key} ")),
                "{text}: {}",
                error.errmsg
            );
        }
        let expansion = refusal_of("net:\n  port:\n    __exec: \"echo 1\"\n");
        assert!(
            expansion.errmsg.contains("net.port.__exec"),
            "{expansion:?}"
        );
    }

    #[test]
    fn wrong_types_are_refused_with_the_key() {
        for (text, message) in [
            (
                "net:\n  port: abc\n",
                "Error parsing option \"net.port\" as int: \"abc\" is not an integer",
            ),
            (
                "net:\n  port: 80.5\n",
                "Error parsing option \"net.port\" as int: \"80.5\" is not an integer",
            ),
            ("net:\n  port: 70000\n", "net.port must be between 0 and 65535, got 70000"),
            (
                "security:\n  javascriptEnabled: 1\n",
                "Expected boolean but found string: 1 for option: security.javascriptEnabled",
            ),
            (
                "security:\n  javascriptEnabled: yes\n",
                "Expected boolean but found string: yes for option: security.javascriptEnabled",
            ),
            (
                "net:\n  bindIp:\n    - 127.0.0.1\n",
                "Option: net.bindIp is a list, but tideway expects a single value",
            ),
            ("storage:\n  dbPath:\n", "Error parsing option \"storage.dbPath\": no value"),
            (
                "systemLog:\n  verbosity: -1\n",
                "systemLog.verbosity YAML Config cannot be negative",
            ),
            (
                "operationProfiling:\n  mode: sometimes\n",
                "Bad value for operationProfiling.mode: sometimes.  Supported modes are: (off|slowOp|all)",
            ),
            (
                "storage:\n  engine: wiredTiger\n",
                "Bad value for storage.engine: wiredTiger.  Supported engines are: (disk|memory|postgres)",
            ),
            (
                "storage:\n  postgres:\n    distribute: yugabyte\n",
                "Bad value for storage.postgres.distribute: yugabyte.  Supported: (citus)",
            ),
            (
                "storage:\n  postgres:\n    poolSize: 0\n",
                "storage.postgres.poolSize must be between 1 and 10000, got 0",
            ),
            (
                "storage:\n  journal:\n    commitIntervalMs: 501\n",
                "storage.journal.commitIntervalMs must be between 1 and 500, got 501",
            ),
            (
                "net:\n  maxIncomingConnections: 0\n",
                "net.maxIncomingConnections must be at least 1, got 0",
            ),
            (
                "net:\n  bindIp: 127.0.0.1\n  bindIpAll: true\n",
                "net.bindIp and net.bindIpAll are mutually exclusive",
            ),
            ("- net\n", "No map found at top level of YAML config"),
            (
                "net:\n  tls:\n    mode: requireSSL\n",
                "unsupported value for tlsMode requireSSL",
            ),
            (
                "net:\n  tls:\n    allowConnectionsWithoutCertificates: 1\n",
                "Expected boolean but found string: 1 for option: net.tls.allowConnectionsWithoutCertificates",
            ),
        ] {
            let error = refusal_of(text);
            assert_eq!(error.code, ErrorCode::BadValue, "{text}");
            assert_eq!(error.errmsg, message, "{text}");
        }
    }

    #[test]
    fn set_parameter_entries_are_checked_as_mongod_checks_them() {
        for (text, message) in [
            (
                "setParameter:\n  authenticationMechanisms: PLAIN\n",
                "Illegal --setParameter parameter: \"authenticationMechanisms\"",
            ),
            (
                "setParameter:\n  featureCompatibilityVersion: \"8.0\"\n",
                "Cannot use --setParameter to set \"featureCompatibilityVersion\" at startup",
            ),
            (
                "setParameter:\n  ttlMonitorEnabled: maybe\n",
                // mongod's prefix; the reason after it is the parameter's own.
                "Bad value for parameter \"ttlMonitorEnabled\": ",
            ),
            (
                "setParameter:\n  ttlMonitorSleepSecs: [1, 2]\n",
                "Option: setParameter has a map with non scalar values, which is not allowed",
            ),
            (
                "setParameter: 5\n",
                "Option: setParameter is of type StringMap, but value in YAML config is not a map type",
            ),
        ] {
            let error = refusal_of(text);
            assert_eq!(error.code, ErrorCode::BadValue, "{text}");
            assert!(error.errmsg.starts_with(message), "{text}: {}", error.errmsg);
        }
    }

    #[test]
    fn malformed_yaml_and_duplicate_keys_are_refused() {
        let duplicate = refusal_of("net:\n  port: 1\n  port: 2\n");
        assert!(
            duplicate
                .errmsg
                .starts_with("Error parsing YAML config file:"),
            "{duplicate:?}"
        );
        let tab = refusal_of("net:\n\tport: 1\n");
        assert!(
            tab.errmsg.starts_with("Error parsing YAML config file:"),
            "{tab:?}"
        );
        let two = refusal_of("net: {port: 1}\n---\nnet: {port: 2}\n");
        assert!(two.errmsg.contains("more than one"), "{two:?}");
    }
}
