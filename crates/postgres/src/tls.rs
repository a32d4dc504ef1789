//! TLS to the database on rustls, with libpq's URI parameters: `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file of trusted CAs).
//!
//! Rules, as libpq's: `disable` never encrypts; `prefer` (the default) encrypts when the server
//! offers it and `require` always does, both verifying the server's certificate chain only when
//! `sslrootcert` is given; `verify-ca` verifies the chain, `verify-full` the chain and that the
//! certificate names the host. Unlike libpq, which falls back to `~/.postgresql/root.crt`, the
//! two verifying modes need `sslrootcert`: a missing one is a configuration error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::target::{query_parameters, with_query};
use tideway_storage::{StorageError, StorageResult};

/// How the server's certificate is checked, with the CAs the checking modes trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verification {
    /// Encrypt without authenticating the server (libpq's `prefer`/`require` without a root).
    None,
    /// The chain must lead to a root in this file; the name is not checked (`verify-ca`, and
    /// `prefer`/`require` with `sslrootcert`).
    Chain(PathBuf),
    /// The chain, and the certificate must name the host (`verify-full`).
    Full(PathBuf),
}

/// The TLS parameters of a URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// What tokio-postgres negotiates (`verify-*` negotiate as `require`).
    pub ssl_mode: SslMode,
    pub verification: Verification,
}

/// Takes `sslmode` and `sslrootcert` out of `uri`'s query (tokio-postgres knows neither
/// `verify-*` nor `sslrootcert`), returning the rest of the URI and the settings they make.
pub(crate) fn split_tls_parameters(uri: &str) -> StorageResult<(String, TlsSettings)> {
    let (base, parameters) = query_parameters(uri);
    let mut mode = "prefer";
    let mut root_cert = None;
    let mut kept = Vec::new();
    for parameter in parameters {
        match parameter.split_once('=') {
            Some(("sslmode", value)) => mode = value,
            Some(("sslrootcert", value)) => root_cert = Some(PathBuf::from(value)),
            _ => kept.push(parameter),
        }
    }
    let invalid = |message: String| StorageError::Io(format!("invalid PostgreSQL URI: {message}"));
    let (ssl_mode, verification) = match (mode, root_cert) {
        ("disable", _) => (SslMode::Disable, Verification::None),
        ("prefer", root) => (
            SslMode::Prefer,
            root.map_or(Verification::None, Verification::Chain),
        ),
        ("require", root) => (
            SslMode::Require,
            root.map_or(Verification::None, Verification::Chain),
        ),
        ("verify-ca", Some(root)) => (SslMode::Require, Verification::Chain(root)),
        ("verify-full", Some(root)) => (SslMode::Require, Verification::Full(root)),
        ("verify-ca" | "verify-full", None) => {
            return Err(invalid(format!(
                "sslmode={mode} needs sslrootcert=<a PEM file of the CAs to trust>"
            )))
        }
        (other, _) => {
            return Err(invalid(format!(
                "sslmode must be disable, prefer, require, verify-ca or verify-full, not {other:?}"
            )))
        }
    };
    Ok((
        with_query(base, &kept),
        TlsSettings {
            ssl_mode,
            verification,
        },
    ))
}

/// The connector for `settings` (used for every connection; with `disable` it never runs).
pub(crate) fn connector(settings: &TlsSettings) -> StorageResult<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| StorageError::Io(format!("TLS to PostgreSQL: {error}")))?;
    let (root, check_name) = match &settings.verification {
        Verification::None => (None, false),
        Verification::Chain(root) => (Some(root), false),
        Verification::Full(root) => (Some(root), true),
    };
    let chain = root
        .map(|root| {
            WebPkiServerVerifier::builder_with_provider(
                Arc::new(load_roots(root)?),
                provider.clone(),
            )
            .build()
            .map_err(|error| {
                StorageError::Io(format!(
                    "TLS to PostgreSQL: sslrootcert {}: {error}",
                    root.display()
                ))
            })
        })
        .transpose()?;
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ServerCheck {
            provider,
            chain,
            check_name,
        }))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn load_roots(path: &Path) -> StorageResult<RootCertStore> {
    let unreadable = |error: String| {
        StorageError::Io(format!(
            "cannot read sslrootcert {}: {error}",
            path.display()
        ))
    };
    let mut roots = RootCertStore::empty();
    for certificate in
        CertificateDer::pem_file_iter(path).map_err(|error| unreadable(error.to_string()))?
    {
        let certificate = certificate.map_err(|error| unreadable(error.to_string()))?;
        roots
            .add(certificate)
            .map_err(|error| unreadable(error.to_string()))?;
    }
    if roots.is_empty() {
        return Err(unreadable("no certificate in it".to_string()));
    }
    Ok(roots)
}

/// The server certificate check of every mode. The handshake's signatures are always verified
/// with the certificate presented; without `chain` that is all (encryption without
/// authentication); with it the chain must lead to a trusted root, and with `check_name` the
/// certificate must also name the host.
#[derive(Debug)]
struct ServerCheck {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_modes_map_to_negotiation_and_verification() {
        let cases = [
            (
                "postgresql://h/db",
                "postgresql://h/db",
                SslMode::Prefer,
                Verification::None,
            ),
            (
                "postgresql://h/db?sslmode=disable&application_name=a",
                "postgresql://h/db?application_name=a",
                SslMode::Disable,
                Verification::None,
            ),
            (
                "postgresql://h/db?sslmode=require",
                "postgresql://h/db",
                SslMode::Require,
                Verification::None,
            ),
            (
                "postgresql://h/db?sslmode=require&sslrootcert=/ca.pem",
                "postgresql://h/db",
                SslMode::Require,
                Verification::Chain("/ca.pem".into()),
            ),
            (
                "postgresql://h/db?sslrootcert=/ca.pem&sslmode=verify-ca",
                "postgresql://h/db",
                SslMode::Require,
                Verification::Chain("/ca.pem".into()),
            ),
            (
                "postgresql://h/db?sslmode=verify-full&sslrootcert=/ca.pem&connect_timeout=3",
                "postgresql://h/db?connect_timeout=3",
                SslMode::Require,
                Verification::Full("/ca.pem".into()),
            ),
        ];
        for (uri, rest, ssl_mode, verification) in cases {
            let (kept, settings) = split_tls_parameters(uri).unwrap();
            assert_eq!(
                (kept.as_str(), settings.ssl_mode, settings.verification),
                (rest, ssl_mode, verification),
                "{uri}"
            );
        }
    }

    #[test]
    fn verifying_modes_need_a_root_and_unknown_modes_are_refused() {
        let message = split_tls_parameters("postgresql://h/db?sslmode=verify-full")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("sslmode=verify-full needs sslrootcert"),
            "{message}"
        );
        let message = split_tls_parameters("postgresql://h/db?sslmode=allow-ish")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("sslmode must be disable, prefer, require, verify-ca or verify-full"),
            "{message}"
        );
    }
}
