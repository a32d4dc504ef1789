//! TLS to the database on rustls, with libpq's URI parameters: `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file of trusted CAs).
//!
//! Rules, as libpq's: `disable` never encrypts; `prefer` (the default) encrypts when the server
//! offers it and `require` always does, both verifying the server's certificate chain only when
//! `sslrootcert` is given; `verify-ca` verifies the chain, `verify-full` the chain and that the
//! certificate names the host. Unlike libpq, which falls back to `~/.postgresql/root.crt`, the
//! two verifying modes need `sslrootcert`: a missing one is a configuration error.

use std::path::PathBuf;
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

use tideway_storage::{StorageError, StorageResult};

/// How the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// Encrypt without authenticating the server (libpq's `prefer`/`require` without a root).
    None,
    /// The chain must lead to a trusted root; the name is not checked (`verify-ca`).
    Chain,
    /// The chain, and the certificate must name the host (`verify-full`).
    Full,
}

/// The TLS parameters of a URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// What tokio-postgres negotiates (`verify-*` negotiate as `require`).
    pub ssl_mode: SslMode,
    pub verification: Verification,
    pub root_cert: Option<PathBuf>,
}

/// Takes `sslmode` and `sslrootcert` out of `uri`'s query (tokio-postgres knows neither
/// `verify-*` nor `sslrootcert`), returning the rest of the URI and the settings they make.
pub fn split_tls_parameters(uri: &str) -> StorageResult<(String, TlsSettings)> {
    let (base, query) = match uri.split_once('?') {
        Some((base, query)) => (base, query),
        None => (uri, ""),
    };
    let mut mode = "prefer".to_string();
    let mut root_cert = None;
    let mut kept = Vec::new();
    for parameter in query.split('&').filter(|parameter| !parameter.is_empty()) {
        match parameter.split_once('=') {
            Some(("sslmode", value)) => mode = value.to_string(),
            Some(("sslrootcert", value)) => root_cert = Some(PathBuf::from(value)),
            _ => kept.push(parameter),
        }
    }
    let invalid = |message: String| StorageError::Io(format!("invalid PostgreSQL URI: {message}"));
    let (ssl_mode, verification) = match (mode.as_str(), root_cert.is_some()) {
        ("disable", _) => (SslMode::Disable, Verification::None),
        ("prefer", false) => (SslMode::Prefer, Verification::None),
        ("prefer", true) => (SslMode::Prefer, Verification::Chain),
        ("require", false) => (SslMode::Require, Verification::None),
        ("require", true) => (SslMode::Require, Verification::Chain),
        ("verify-ca", true) => (SslMode::Require, Verification::Chain),
        ("verify-full", true) => (SslMode::Require, Verification::Full),
        ("verify-ca" | "verify-full", false) => {
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
    let rest = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((
        rest,
        TlsSettings {
            ssl_mode,
            verification,
            root_cert,
        },
    ))
}

/// The connector for `settings` (used for every connection; with `disable` it never runs).
pub fn connector(settings: &TlsSettings) -> StorageResult<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| StorageError::Io(format!("TLS to PostgreSQL: {error}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (&settings.root_cert, settings.verification) {
        (_, Verification::None) | (None, _) => Arc::new(NoVerification(provider)),
        (Some(path), verification) => {
            let roots = load_roots(path)?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| {
                    StorageError::Io(format!(
                        "TLS to PostgreSQL: sslrootcert {}: {error}",
                        path.display()
                    ))
                })?;
            match verification {
                Verification::Full => webpki,
                _ => Arc::new(ChainOnly(webpki)),
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn load_roots(path: &PathBuf) -> StorageResult<RootCertStore> {
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

/// Accepts any certificate but still checks the handshake's signatures with it: encryption
/// without authentication, libpq's `require` without a root.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain check of `verify-ca`: everything WebPKI checks except that the certificate names
/// the host.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
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
                Verification::Chain,
            ),
            (
                "postgresql://h/db?sslrootcert=/ca.pem&sslmode=verify-ca",
                "postgresql://h/db",
                SslMode::Require,
                Verification::Chain,
            ),
            (
                "postgresql://h/db?sslmode=verify-full&sslrootcert=/ca.pem&connect_timeout=3",
                "postgresql://h/db?connect_timeout=3",
                SslMode::Require,
                Verification::Full,
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
