//! The TLS settings (mongod's `--tlsMode` family): the mode, mongod's startup checks of the
//! settings, and the TLS flags tideway refuses. The transport that uses them is `crate::tls`.

use clap::ValueEnum;

use super::Config;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// mongod's `net.tls.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TlsMode {
    /// No TLS: every connection is plain.
    #[default]
    #[value(name = "disabled")]
    Disabled,
    /// Plain and TLS connections on the same port (mongod: outgoing connections plain).
    #[value(name = "allowTLS")]
    AllowTls,
    /// Plain and TLS connections on the same port (mongod: outgoing connections TLS).
    #[value(name = "preferTLS")]
    PreferTls,
    /// TLS connections only; plain ones are closed.
    #[value(name = "requireTLS")]
    RequireTls,
}

impl TlsMode {
    /// The name mongod uses (`getCmdLineOpts`, the configuration file).
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::AllowTls => "allowTLS",
            TlsMode::PreferTls => "preferTLS",
            TlsMode::RequireTls => "requireTLS",
        }
    }

    /// The mode called `name`, with mongod's refusal for any other.
    pub fn parse(name: &str) -> CommandResult<TlsMode> {
        TlsMode::value_variants()
            .iter()
            .copied()
            .find(|mode| mode.name() == name)
            .ok_or_else(|| CommandError::bad_value(format!("unsupported value for tlsMode {name}")))
    }
}

/// mongod's consistency checks of the TLS options (`ssl_options_server.cpp`), worded as mongod
/// words them. Reads no file.
pub(crate) fn check_settings(config: &Config) -> CommandResult<()> {
    if config.tls_mode == TlsMode::Disabled {
        if config.tls_certificate_key_file.is_some()
            || config.tls_ca_file.is_some()
            || config.tls_allow_connections_without_certificates
        {
            return Err(CommandError::bad_value(
                "need to enable TLS via the sslMode/tlsMode flag when using TLS configuration parameters",
            ));
        }
        return Ok(());
    }
    if config.tls_certificate_key_file.is_none() {
        return Err(CommandError::bad_value(
            "need tlsCertificateKeyFile or certificateSelector when TLS is enabled",
        ));
    }
    Ok(())
}

/// mongod's TLS flags tideway does not implement, with the configuration-file key each sets (the
/// file refuses those keys itself, `config::file`): a command line naming one is refused before
/// anything else is parsed, so none is ever ignored.
pub(crate) const UNSUPPORTED_FLAGS: &[(&str, &str)] = &[
    ("--tlsCRLFile", "net.tls.CRLFile"),
    (
        "--tlsCertificateKeyFilePassword",
        "net.tls.certificateKeyFilePassword",
    ),
    ("--tlsCertificateSelector", "net.tls.certificateSelector"),
    (
        "--tlsClusterCertificateSelector",
        "net.tls.clusterCertificateSelector",
    ),
    ("--tlsClusterFile", "net.tls.clusterFile"),
    ("--tlsClusterPassword", "net.tls.clusterPassword"),
    ("--tlsClusterCAFile", "net.tls.clusterCAFile"),
    ("--tlsDisabledProtocols", "net.tls.disabledProtocols"),
    (
        "--tlsAllowInvalidCertificates",
        "net.tls.allowInvalidCertificates",
    ),
    (
        "--tlsAllowInvalidHostnames",
        "net.tls.allowInvalidHostnames",
    ),
    ("--tlsFIPSMode", "net.tls.FIPSMode"),
    ("--tlsLogVersions", "net.tls.logVersions"),
    (
        "--tlsClusterAuthX509Attributes",
        "net.tls.clusterAuthX509.attributes",
    ),
    (
        "--tlsClusterAuthX509ExtensionValue",
        "net.tls.clusterAuthX509.extensionValue",
    ),
];

/// The first of `args` that is an unsupported TLS flag (`--flag` or `--flag=value`), refused
/// with 238 NotImplemented naming the flag and its file key.
pub(crate) fn refuse_unsupported_flags<'a>(
    args: impl IntoIterator<Item = &'a std::ffi::OsStr>,
) -> CommandResult<()> {
    for arg in args {
        let Some(arg) = arg.to_str() else { continue };
        let flag = arg.split_once('=').map_or(arg, |(flag, _)| flag);
        if let Some((flag, key)) = UNSUPPORTED_FLAGS.iter().find(|(name, _)| *name == flag) {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support {flag} ({key}): remove it to start"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_have_mongods_names() {
        for mode in TlsMode::value_variants() {
            assert_eq!(TlsMode::parse(mode.name()).unwrap(), *mode);
        }
        assert_eq!(
            TlsMode::parse("requireSSL").unwrap_err().errmsg,
            "unsupported value for tlsMode requireSSL"
        );
    }

    #[test]
    fn unsupported_flags_are_refused_by_name() {
        let refused = |args: &[&str]| {
            refuse_unsupported_flags(args.iter().map(std::ffi::OsStr::new))
                .err()
                .map(|error| error.errmsg)
        };
        assert_eq!(refused(&["tideway", "--tlsMode", "requireTLS"]), None);
        assert_eq!(
            refused(&["tideway", "--tlsCRLFile", "/etc/crl.pem"]).as_deref(),
            Some("tideway does not support --tlsCRLFile (net.tls.CRLFile): remove it to start")
        );
        assert!(refused(&["tideway", "--tlsDisabledProtocols=TLS1_0"])
            .is_some_and(|message| message.contains("net.tls.disabledProtocols")));
    }
}
