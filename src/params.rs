//! Server parameters (`getParameter`, `--setParameter`): a table of named values, each saying how to
//! read it and whether it may be set at startup. Values live in atomics so readers never lock.
//! Invariant: `getParameter` reports the value the server is actually using.

use std::sync::atomic::{AtomicBool, Ordering};

use bson::{doc, Bson, Document};

use crate::config::Config;
use crate::error::{CommandError, CommandResult, ErrorCode};

/// The feature compatibility version that matches `buildInfo.version` and `maxWireVersion`.
pub const FEATURE_COMPATIBILITY_VERSION: &str = "7.0";

#[derive(Debug, Default)]
pub struct Parameters {
    enable_test_commands: AtomicBool,
}

struct ParameterSpec {
    name: &'static str,
    get: fn(&Parameters) -> Bson,
    /// Parses and applies a `--setParameter name=value` at startup; `None` if not settable then.
    set_at_startup: Option<fn(&Parameters, &str) -> CommandResult<()>>,
}

const PARAMETERS: &[ParameterSpec] = &[
    ParameterSpec {
        name: "enableTestCommands",
        get: |p| Bson::Boolean(p.test_commands_enabled()),
        set_at_startup: Some(|p, value| {
            p.enable_test_commands
                .store(parse_bool(value)?, Ordering::Relaxed);
            Ok(())
        }),
    },
    ParameterSpec {
        name: "featureCompatibilityVersion",
        get: |_| Bson::Document(doc! {"version": FEATURE_COMPATIBILITY_VERSION}),
        set_at_startup: None,
    },
];

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

impl Parameters {
    /// The parameters from `--enableTestCommands` and every `--setParameter name=value`.
    pub fn from_config(config: &Config) -> CommandResult<Parameters> {
        let parameters = Parameters::default();
        parameters
            .enable_test_commands
            .store(config.enable_test_commands, Ordering::Relaxed);
        for assignment in &config.set_parameter {
            let (name, value) = assignment.split_once('=').ok_or_else(|| {
                CommandError::bad_value(format!(
                    "--setParameter expects name=value, got '{assignment}'"
                ))
            })?;
            let setter = spec(name)
                .ok_or_else(|| {
                    CommandError::new(
                        ErrorCode::InvalidOptions,
                        format!("Unknown --setParameter '{name}'"),
                    )
                })?
                .set_at_startup
                .ok_or_else(|| {
                    CommandError::new(
                        ErrorCode::InvalidOptions,
                        format!("Cannot use --setParameter to set '{name}' at startup"),
                    )
                })?;
            setter(&parameters, value)?;
        }
        Ok(parameters)
    }

    pub fn test_commands_enabled(&self) -> bool {
        self.enable_test_commands.load(Ordering::Relaxed)
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
                    "settableAtRuntime": false,
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
    use clap::Parser;

    #[test]
    fn startup_flags_set_test_commands() {
        let off = Parameters::from_config(&Config::default()).unwrap();
        assert_eq!(off.get("enableTestCommands"), Some(Bson::Boolean(false)));
        let flag = Config::parse_from(["tideway", "--enableTestCommands"]);
        assert!(Parameters::from_config(&flag)
            .unwrap()
            .test_commands_enabled());
        let set = Config::parse_from(["tideway", "--setParameter", "enableTestCommands=1"]);
        assert!(Parameters::from_config(&set)
            .unwrap()
            .test_commands_enabled());
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
            assert!(Parameters::from_config(&config).is_err(), "{arg}");
        }
    }

    #[test]
    fn describe_filters_and_details() {
        let parameters = Parameters::default();
        let all = parameters.describe(None, false);
        assert_eq!(
            all.get_document("featureCompatibilityVersion").unwrap(),
            &doc! {"version": "7.0"}
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
