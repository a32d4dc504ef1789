//! Server parameters (`getParameter`, `--setParameter`): a table of named values, each saying how to
//! read it and whether it may be set at startup. Values live in atomics so readers never lock.
//! Invariant: `getParameter` reports the value the server is actually using.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use bson::{doc, Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The feature compatibility version that matches `buildInfo.version` and `maxWireVersion`.
pub(crate) const FEATURE_COMPATIBILITY_VERSION: &str = "8.0";

#[derive(Debug)]
pub struct Parameters {
    enable_test_commands: AtomicBool,
    enable_localhost_auth_bypass: AtomicBool,
    ttl_monitor_enabled: AtomicBool,
    ttl_monitor_sleep_secs: AtomicU64,
    allow_disk_use_by_default: AtomicBool,
    max_blocking_sort_bytes: AtomicU64,
    max_group_bytes: AtomicU64,
    max_bucket_auto_bytes: AtomicU64,
    max_densify_bytes: AtomicU64,
    facet_buffer_bytes: AtomicU64,
    max_facet_output_bytes: AtomicU64,
    map_reduce_single_reduce_optimization: AtomicBool,
    transaction_lifetime_limit_secs: AtomicI64,
    max_transaction_lock_request_timeout_ms: AtomicI64,
    logical_session_timeout_minutes: AtomicI64,
    logical_session_refresh_ms: AtomicI64,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            enable_test_commands: AtomicBool::new(false),
            enable_localhost_auth_bypass: AtomicBool::new(true),
            ttl_monitor_enabled: AtomicBool::new(true),
            ttl_monitor_sleep_secs: AtomicU64::new(DEFAULT_TTL_MONITOR_SLEEP_SECS),
            allow_disk_use_by_default: AtomicBool::new(true),
            max_blocking_sort_bytes: AtomicU64::new(
                tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES,
            ),
            max_group_bytes: AtomicU64::new(tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES),
            max_bucket_auto_bytes: AtomicU64::new(tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES),
            max_densify_bytes: AtomicU64::new(tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES),
            facet_buffer_bytes: AtomicU64::new(tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES),
            max_facet_output_bytes: AtomicU64::new(tideway_query::sorter::DEFAULT_MAX_MEMORY_BYTES),
            map_reduce_single_reduce_optimization: AtomicBool::new(false),
            transaction_lifetime_limit_secs: AtomicI64::new(60),
            max_transaction_lock_request_timeout_ms: AtomicI64::new(5),
            logical_session_timeout_minutes: AtomicI64::new(30),
            logical_session_refresh_ms: AtomicI64::new(300_000),
        }
    }
}

/// How often the TTL reaper wakes by default (mongod's default is 60; tideway deletes promptly).
pub(crate) const DEFAULT_TTL_MONITOR_SLEEP_SECS: u64 = 1;

struct ParameterSpec {
    name: &'static str,
    get: fn(&Parameters) -> Bson,
    /// Parses and applies a `--setParameter name=value` at startup; `None` if not settable then.
    set_at_startup: Option<fn(&Parameters, &str) -> CommandResult<()>>,
    /// Applies a `setParameter` value at runtime; `None` if not settable then.
    set_at_runtime: Option<fn(&Parameters, &Bson) -> CommandResult<()>>,
}

/// A memory limit in bytes, settable at startup and at runtime (mongod's `internal*Bytes` knobs).
macro_rules! bytes_parameter {
    ($name:literal, $field:ident) => {
        ParameterSpec {
            name: $name,
            get: |p| {
                Bson::Int64(i64::try_from(p.$field.load(Ordering::Relaxed)).unwrap_or(i64::MAX))
            },
            set_at_startup: Some(|p, value| {
                store_bytes(&p.$field, $name, &Bson::String(value.into()))
            }),
            set_at_runtime: Some(|p, value| store_bytes(&p.$field, $name, value)),
        }
    };
}

/// A 32-bit integer parameter no lower than `$min`, settable at startup and at runtime.
macro_rules! int_parameter {
    ($name:literal, $field:ident, $min:literal) => {
        ParameterSpec {
            name: $name,
            get: |p| Bson::Int32(p.$field.load(Ordering::Relaxed) as i32),
            set_at_startup: Some(|p, value| {
                store_int(&p.$field, $name, $min, &Bson::String(value.into()))
            }),
            set_at_runtime: Some(|p, value| store_int(&p.$field, $name, $min, value)),
        }
    };
}

/// A 32-bit integer parameter no lower than `$min`, settable at startup only.
macro_rules! startup_int_parameter {
    ($name:literal, $field:ident, $min:literal) => {
        ParameterSpec {
            name: $name,
            get: |p| Bson::Int32(p.$field.load(Ordering::Relaxed) as i32),
            set_at_startup: Some(|p, value| {
                store_int(&p.$field, $name, $min, &Bson::String(value.into()))
            }),
            set_at_runtime: None,
        }
    };
}

/// A boolean parameter settable at startup only.
macro_rules! startup_bool_parameter {
    ($name:literal, $field:ident) => {
        ParameterSpec {
            name: $name,
            get: |p| Bson::Boolean(p.$field.load(Ordering::Relaxed)),
            set_at_startup: Some(|p, value| {
                p.$field.store(parse_bool(value)?, Ordering::Relaxed);
                Ok(())
            }),
            set_at_runtime: None,
        }
    };
}

const PARAMETERS: &[ParameterSpec] = &[
    // mongod's logical_session_id.idl and logical_session_cache.idl (startup only, defaults
    // 30 and 300000); tideway refuses values that would make no sense (a timeout or an interval
    // of 0) instead of misbehaving.
    startup_int_parameter!(
        "localLogicalSessionTimeoutMinutes",
        logical_session_timeout_minutes,
        1
    ),
    startup_int_parameter!("logicalSessionRefreshMillis", logical_session_refresh_ms, 1),
    int_parameter!(
        "transactionLifetimeLimitSeconds",
        transaction_lifetime_limit_secs,
        1
    ),
    int_parameter!(
        "maxTransactionLockRequestTimeoutMillis",
        max_transaction_lock_request_timeout_ms,
        -1
    ),
    startup_bool_parameter!("enableTestCommands", enable_test_commands),
    // mongod's: startup only, default true (the localhost exception, `crate::auth::authz`).
    startup_bool_parameter!("enableLocalhostAuthBypass", enable_localhost_auth_bypass),
    ParameterSpec {
        name: "featureCompatibilityVersion",
        get: |_| Bson::Document(doc! {"version": FEATURE_COMPATIBILITY_VERSION}),
        set_at_startup: None,
        set_at_runtime: None,
    },
    ParameterSpec {
        name: "ttlMonitorEnabled",
        get: |p| Bson::Boolean(p.ttl_monitor_enabled()),
        set_at_startup: Some(|p, value| {
            p.ttl_monitor_enabled
                .store(parse_bool(value)?, Ordering::Relaxed);
            Ok(())
        }),
        set_at_runtime: Some(|p, value| {
            let enabled = runtime_bool("ttlMonitorEnabled", value)?;
            p.ttl_monitor_enabled.store(enabled, Ordering::Relaxed);
            Ok(())
        }),
    },
    ParameterSpec {
        name: "allowDiskUseByDefault",
        get: |p| Bson::Boolean(p.allow_disk_use_by_default()),
        set_at_startup: Some(|p, value| {
            p.allow_disk_use_by_default
                .store(parse_bool(value)?, Ordering::Relaxed);
            Ok(())
        }),
        set_at_runtime: Some(|p, value| {
            let allowed = runtime_bool("allowDiskUseByDefault", value)?;
            p.allow_disk_use_by_default
                .store(allowed, Ordering::Relaxed);
            Ok(())
        }),
    },
    ParameterSpec {
        name: "mrEnableSingleReduceOptimization",
        get: |p| Bson::Boolean(p.map_reduce_single_reduce_optimization()),
        set_at_startup: Some(|p, value| {
            p.map_reduce_single_reduce_optimization
                .store(parse_bool(value)?, Ordering::Relaxed);
            Ok(())
        }),
        set_at_runtime: Some(|p, value| {
            let enabled = runtime_bool("mrEnableSingleReduceOptimization", value)?;
            p.map_reduce_single_reduce_optimization
                .store(enabled, Ordering::Relaxed);
            Ok(())
        }),
    },
    bytes_parameter!(
        "internalQueryMaxBlockingSortMemoryUsageBytes",
        max_blocking_sort_bytes
    ),
    bytes_parameter!("internalDocumentSourceGroupMaxMemoryBytes", max_group_bytes),
    bytes_parameter!(
        "internalDocumentSourceBucketAutoMaxMemoryBytes",
        max_bucket_auto_bytes
    ),
    bytes_parameter!(
        "internalDocumentSourceDensifyMaxMemoryBytes",
        max_densify_bytes
    ),
    bytes_parameter!("internalQueryFacetBufferSizeBytes", facet_buffer_bytes),
    bytes_parameter!(
        "internalQueryFacetMaxOutputDocSizeBytes",
        max_facet_output_bytes
    ),
    ParameterSpec {
        name: "ttlMonitorSleepSecs",
        get: |p| Bson::Int32(p.ttl_monitor_sleep_secs().min(i32::MAX as u64) as i32),
        set_at_startup: Some(|p, value| {
            let seconds = value.parse::<f64>().map_err(|_| {
                CommandError::bad_value(format!(
                    "ttlMonitorSleepSecs must be a number, got '{value}'"
                ))
            })?;
            p.set_sleep_secs(seconds)
        }),
        set_at_runtime: Some(|p, value| {
            let seconds = tideway_base::bsonutil::as_f64(value).ok_or_else(|| {
                CommandError::bad_value(format!(
                    "ttlMonitorSleepSecs must be a number, got {value}"
                ))
            })?;
            p.set_sleep_secs(seconds)
        }),
    },
];

/// A boolean parameter's runtime value: a boolean, or a number (non-zero is true).
fn runtime_bool(name: &str, value: &Bson) -> CommandResult<bool> {
    match value {
        Bson::Boolean(enabled) => Ok(*enabled),
        other => tideway_base::bsonutil::as_f64(other)
            .map(|number| number != 0.0)
            .ok_or_else(|| {
                CommandError::bad_value(format!("{name} must be a boolean, got {other}"))
            }),
    }
}

/// A whole number in `[min, i32::MAX]`, from a number or (at startup) its decimal text (mongod's
/// message for a value below the bound).
fn store_int(slot: &AtomicI64, name: &str, min: i64, value: &Bson) -> CommandResult<()> {
    let number = match value {
        Bson::String(text) => text.parse::<f64>().ok(),
        other => tideway_base::bsonutil::as_f64(other),
    };
    let Some(number) = number.filter(|number| number.fract() == 0.0) else {
        return Err(CommandError::bad_value(format!(
            "{name} must be a whole number, got {value}"
        )));
    };
    if number < min as f64 || number > f64::from(i32::MAX) {
        return Err(CommandError::bad_value(format!(
            "Invalid value for parameter {name}: {number} is not greater than or equal to {min}"
        )));
    }
    slot.store(number as i64, Ordering::Relaxed);
    Ok(())
}

/// A positive byte count, from a number or (at startup) its decimal text.
fn store_bytes(slot: &AtomicU64, name: &str, value: &Bson) -> CommandResult<()> {
    let number = match value {
        Bson::String(text) => text.parse::<f64>().ok(),
        other => tideway_base::bsonutil::as_f64(other),
    };
    let bytes = number
        .filter(|bytes| bytes.fract() == 0.0 && *bytes >= 1.0 && *bytes <= i64::MAX as f64)
        .ok_or_else(|| {
            CommandError::bad_value(format!(
                "{name} must be a positive whole number of bytes, got {value}"
            ))
        })?;
    slot.store(bytes as u64, Ordering::Relaxed);
    Ok(())
}

fn parse_bool(value: &str) -> CommandResult<bool> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(CommandError::bad_value(format!(
            "Invalid value for bool server parameter: '{other}'"
        ))),
    }
}

fn spec(name: &str) -> Option<&'static ParameterSpec> {
    PARAMETERS.iter().find(|p| p.name == name)
}

/// How `name` is applied at startup, with mongod's refusals (`--setParameter` and a configuration
/// file's `setParameter` section alike): an unknown name, or one not settable at startup.
fn startup_setter(name: &str) -> CommandResult<fn(&Parameters, &str) -> CommandResult<()>> {
    spec(name)
        .ok_or_else(|| {
            CommandError::bad_value(format!("Illegal --setParameter parameter: \"{name}\""))
        })?
        .set_at_startup
        .ok_or_else(|| {
            CommandError::bad_value(format!(
                "Cannot use --setParameter to set \"{name}\" at startup"
            ))
        })
}

/// Whether `name=value` would be accepted at startup, checked on a scratch set of parameters, so a
/// configuration file is refused while it is read (mongod's `Bad value for parameter` wording).
pub(crate) fn check_startup_parameter(name: &str, value: &str) -> CommandResult<()> {
    let setter = startup_setter(name)?;
    setter(&Parameters::default(), value).map_err(|error| {
        CommandError::bad_value(format!(
            "Bad value for parameter \"{name}\": {}",
            error.errmsg
        ))
    })
}

impl Parameters {
    /// The parameters from `--enableTestCommands` and every `--setParameter name=value`, in order
    /// (a later assignment of the same name wins).
    pub(crate) fn at_startup(
        enable_test_commands: bool,
        set_parameter: &[String],
    ) -> CommandResult<Parameters> {
        let parameters = Parameters::default();
        parameters
            .enable_test_commands
            .store(enable_test_commands, Ordering::Relaxed);
        for assignment in set_parameter {
            let (name, value) = assignment.split_once('=').ok_or_else(|| {
                CommandError::bad_value(format!("Illegal option assignment: \"{assignment}\""))
            })?;
            startup_setter(name)?(&parameters, value)?;
        }
        Ok(parameters)
    }

    pub(crate) fn test_commands_enabled(&self) -> bool {
        self.enable_test_commands.load(Ordering::Relaxed)
    }

    /// Whether a loopback connection may do anything while no user exists (`--auth`).
    pub(crate) fn enable_localhost_auth_bypass(&self) -> bool {
        self.enable_localhost_auth_bypass.load(Ordering::Relaxed)
    }

    pub(crate) fn ttl_monitor_enabled(&self) -> bool {
        self.ttl_monitor_enabled.load(Ordering::Relaxed)
    }

    /// Whether blocking stages may spill when a command does not say (mongod 6.0+: true).
    /// mongod's `mrEnableSingleReduceOptimization`: whether `mapReduce` skips `reduce` for a key
    /// with a single value (mongod 4.4+ calls it by default).
    pub(crate) fn map_reduce_single_reduce_optimization(&self) -> bool {
        self.map_reduce_single_reduce_optimization
            .load(Ordering::Relaxed)
    }

    pub(crate) fn allow_disk_use_by_default(&self) -> bool {
        self.allow_disk_use_by_default.load(Ordering::Relaxed)
    }

    pub(crate) fn max_blocking_sort_bytes(&self) -> u64 {
        self.max_blocking_sort_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn max_group_bytes(&self) -> u64 {
        self.max_group_bytes.load(Ordering::Relaxed)
    }

    /// The limits `$bucketAuto`, `$densify` and `$facet` apply to themselves.
    pub fn stage_limits(&self) -> tideway_query::pipeline::StageLimits {
        let bytes =
            |slot: &AtomicU64| usize::try_from(slot.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        tideway_query::pipeline::StageLimits {
            bucket_auto_max_bytes: bytes(&self.max_bucket_auto_bytes),
            densify_max_bytes: bytes(&self.max_densify_bytes),
            facet_buffer_bytes: bytes(&self.facet_buffer_bytes),
            facet_max_output_bytes: bytes(&self.max_facet_output_bytes),
        }
    }

    /// How long a transaction may run before the server aborts it (mongod's
    /// `transactionLifetimeLimitSeconds`).
    pub(crate) fn transaction_lifetime_limit_secs(&self) -> i64 {
        self.transaction_lifetime_limit_secs.load(Ordering::Relaxed)
    }

    /// How long a transaction's statement waits for a collection another operation holds
    /// exclusively before failing with `LockTimeout` (negative: as long as the statement may).
    pub(crate) fn max_transaction_lock_request_timeout_ms(&self) -> i64 {
        self.max_transaction_lock_request_timeout_ms
            .load(Ordering::Relaxed)
    }

    /// How long a session lives after its last use (mongod's
    /// `localLogicalSessionTimeoutMinutes`; `hello`'s `logicalSessionTimeoutMinutes`).
    pub(crate) fn logical_session_timeout_minutes(&self) -> i64 {
        self.logical_session_timeout_minutes.load(Ordering::Relaxed)
    }

    /// How often the logical session cache is flushed to `config.system.sessions` (mongod's
    /// `logicalSessionRefreshMillis`).
    pub(crate) fn logical_session_refresh_ms(&self) -> i64 {
        self.logical_session_refresh_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn ttl_monitor_sleep_secs(&self) -> u64 {
        self.ttl_monitor_sleep_secs.load(Ordering::Relaxed)
    }

    fn set_sleep_secs(&self, seconds: f64) -> CommandResult<()> {
        if !(seconds.fract() == 0.0 && seconds >= 1.0 && seconds <= f64::from(i32::MAX)) {
            return Err(CommandError::bad_value(format!(
                "ttlMonitorSleepSecs must be a whole number of seconds greater than 0, got {seconds}"
            )));
        }
        self.ttl_monitor_sleep_secs
            .store(seconds as u64, Ordering::Relaxed);
        Ok(())
    }

    /// `setParameter`: applies `value` to `name` and returns the previous value (mongod's `was`).
    pub fn set(&self, name: &str, value: &Bson) -> CommandResult<Bson> {
        let parameter = spec(name).ok_or_else(|| {
            CommandError::new(
                ErrorCode::InvalidOptions,
                format!("attempted to set unrecognized parameter [{name}], use help:true to see options "),
            )
        })?;
        let setter = parameter.set_at_runtime.ok_or_else(|| {
            CommandError::bad_value(format!("not allowed to change [{name}] at runtime"))
        })?;
        let was = (parameter.get)(self);
        setter(self, value)?;
        Ok(was)
    }

    pub fn get(&self, name: &str) -> Option<Bson> {
        spec(name).map(|p| (p.get)(self))
    }

    /// Every parameter; with `show_details`, each as `{value, settableAtRuntime, settableAtStartup}`.
    pub fn describe(&self, names: Option<&[&str]>, show_details: bool) -> Document {
        let mut out = Document::new();
        for parameter in PARAMETERS {
            if names.is_some_and(|names| !names.contains(&parameter.name)) {
                continue;
            }
            let value = (parameter.get)(self);
            let value = if show_details {
                Bson::Document(doc! {
                    "value": value,
                    "settableAtRuntime": parameter.set_at_runtime.is_some(),
                    "settableAtStartup": parameter.set_at_startup.is_some(),
                })
            } else {
                value
            };
            out.insert(parameter.name, value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use clap::Parser;

    fn from_config(config: &Config) -> CommandResult<Parameters> {
        Parameters::at_startup(config.enable_test_commands, &config.set_parameter)
    }

    #[test]
    fn startup_flags_set_test_commands() {
        let off = from_config(&Config::default()).unwrap();
        assert_eq!(off.get("enableTestCommands"), Some(Bson::Boolean(false)));
        let flag = Config::parse_from(["tideway", "--enableTestCommands"]);
        assert!(from_config(&flag).unwrap().test_commands_enabled());
        let set = Config::parse_from(["tideway", "--setParameter", "enableTestCommands=1"]);
        assert!(from_config(&set).unwrap().test_commands_enabled());
    }

    #[test]
    fn bad_startup_parameters_are_refused() {
        for arg in [
            "nope=1",
            "enableTestCommands=maybe",
            "featureCompatibilityVersion=6.0",
            "x",
        ] {
            let config = Config::parse_from(["tideway", "--setParameter", arg]);
            assert!(from_config(&config).is_err(), "{arg}");
        }
    }

    #[test]
    fn ttl_monitor_parameters_set_at_startup_and_runtime() {
        let config = Config::parse_from([
            "tideway",
            "--setParameter",
            "ttlMonitorSleepSecs=5",
            "--setParameter",
            "ttlMonitorEnabled=false",
        ]);
        let parameters = from_config(&config).unwrap();
        assert_eq!(parameters.ttl_monitor_sleep_secs(), 5);
        assert!(!parameters.ttl_monitor_enabled());
        assert_eq!(
            parameters.set("ttlMonitorSleepSecs", &Bson::Int32(2)),
            Ok(Bson::Int32(5))
        );
        assert_eq!(
            parameters.set("ttlMonitorEnabled", &Bson::Boolean(true)),
            Ok(Bson::Boolean(false))
        );
        assert!(parameters.ttl_monitor_enabled());
        for bad in [Bson::Int32(0), Bson::Double(1.5), Bson::String("x".into())] {
            assert!(
                parameters.set("ttlMonitorSleepSecs", &bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            parameters.set("nope", &Bson::Int32(1)).unwrap_err().code,
            ErrorCode::InvalidOptions
        );
        assert!(parameters
            .set("enableTestCommands", &Bson::Boolean(true))
            .is_err());
        let defaults = Parameters::default();
        assert_eq!(defaults.ttl_monitor_sleep_secs(), 1);
        assert!(defaults.ttl_monitor_enabled());
    }

    #[test]
    fn stage_memory_limits_are_mongods_knobs() {
        // Defaults: query_knobs.idl (the $facet knobs), DocumentSourceBucketAuto's
        // kDefaultMaxMemoryUsageBytes, SERVER-60072 ($densify's 100MB): 100 MiB each.
        let defaults = Parameters::default();
        for name in [
            "internalDocumentSourceBucketAutoMaxMemoryBytes",
            "internalDocumentSourceDensifyMaxMemoryBytes",
            "internalQueryFacetBufferSizeBytes",
            "internalQueryFacetMaxOutputDocSizeBytes",
        ] {
            assert_eq!(defaults.get(name), Some(Bson::Int64(104_857_600)), "{name}");
        }
        let config = Config::parse_from([
            "tideway",
            "--setParameter",
            "internalQueryFacetBufferSizeBytes=4096",
        ]);
        let parameters = from_config(&config).unwrap();
        assert_eq!(parameters.stage_limits().facet_buffer_bytes, 4096);
        assert_eq!(
            parameters.set(
                "internalDocumentSourceDensifyMaxMemoryBytes",
                &Bson::Int32(1000)
            ),
            Ok(Bson::Int64(104_857_600))
        );
        let limits = parameters.stage_limits();
        assert_eq!(
            (limits.densify_max_bytes, limits.bucket_auto_max_bytes),
            (1000, 104_857_600)
        );
        assert!(parameters
            .set("internalQueryFacetMaxOutputDocSizeBytes", &Bson::Int32(0))
            .is_err());
    }

    #[test]
    fn describe_filters_and_details() {
        let parameters = Parameters::default();
        let all = parameters.describe(None, false);
        assert_eq!(
            all.get_document("featureCompatibilityVersion").unwrap(),
            &doc! {"version": "8.0"}
        );
        let one = parameters.describe(Some(&["enableTestCommands"]), true);
        assert_eq!(one.len(), 1);
        assert_eq!(
            one.get_document("enableTestCommands")
                .unwrap()
                .get_bool("settableAtStartup"),
            Ok(true)
        );
    }
}
