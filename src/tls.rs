//! The TLS transport (mongod's `--tlsMode` family), with rustls on the ring provider (its settings
//! and mongod's startup checks of them are `config::tls`): the server's certificate and client-CA
//! configuration (reloadable while the server runs), and the accept step that turns a fresh TCP
//! connection into a plain or a TLS stream before `conn` sees it.
//!
//! Invariants: with `requireTLS` no byte of a plain connection reaches the wire layer; in
//! `allowTLS`/`preferTLS` a connection that opens with a TLS record holding a ClientHello is TLS
//! and any other is plain ([`looks_like_client_hello`]: a MongoDB message opens with its
//! little-endian length and request id, which match that shape only for contrived values); with
//! `--tlsCAFile` a client certificate is verified
//! against it and required unless `--tlsAllowConnectionsWithoutCertificates`. A reload swaps
//! the configuration new handshakes use; established connections keep theirs. Nothing here
//! knows about messages or commands; authentication (MONGODB-X509) is not here: the verified
//! client certificate's subject is only handed to the connection (`ClientInfo`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, TlsMode};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// How long a client may take over its TLS handshake before the connection is closed.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The first byte of a TLS record carrying a handshake message (a ClientHello, on a new
/// connection).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The TLS side of a server: its mode, the files it was configured from, and the rustls
/// configuration new handshakes use.
#[derive(Debug)]
pub struct TlsTransport {
    pub mode: TlsMode,
    certificate_key_file: PathBuf,
    ca_file: Option<PathBuf>,
    allow_without_certificates: bool,
    /// Swapped whole by [`TlsTransport::reload`]; a handshake clones the `Arc` it starts with.
    server_config: RwLock<Arc<ServerConfig>>,
    /// TLS connections accepted, by negotiated protocol (serverStatus `transportSecurity`).
    pub tls12_connections: AtomicU64,
    pub tls13_connections: AtomicU64,
}

/// A connection after the accept step.
pub enum Accepted {
    Plain(TcpStream),
    /// A TLS connection, and the subject of the client certificate it presented (verified
    /// against `--tlsCAFile`), in RFC 2253 form as mongod reports it.
    Tls(Box<TlsStream<TcpStream>>, Option<String>),
}

impl TlsTransport {
    /// The transport `config` asks for, its files read and checked; `None` with TLS disabled.
    pub(crate) fn from_config(config: &Config) -> CommandResult<Option<Arc<TlsTransport>>> {
        crate::config::tls::check_settings(config)?;
        let Some(certificate_key_file) = config.tls_certificate_key_file.clone() else {
            return Ok(None);
        };
        let transport = TlsTransport {
            mode: config.tls_mode,
            server_config: RwLock::new(Arc::new(build_server_config(
                &certificate_key_file,
                config.tls_ca_file.as_deref(),
                config.tls_allow_connections_without_certificates,
            )?)),
            certificate_key_file,
            ca_file: config.tls_ca_file.clone(),
            allow_without_certificates: config.tls_allow_connections_without_certificates,
            tls12_connections: AtomicU64::new(0),
            tls13_connections: AtomicU64::new(0),
        };
        Ok(Some(Arc::new(transport)))
    }

    /// Reads the certificate key file and the CA file again (SIGHUP). On an error the
    /// configuration in force stays, and the error says why; connections are never dropped.
    pub fn reload(&self) -> CommandResult<()> {
        let fresh = build_server_config(
            &self.certificate_key_file,
            self.ca_file.as_deref(),
            self.allow_without_certificates,
        )?;
        let mut current = self
            .server_config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(fresh);
        Ok(())
    }

    fn current_config(&self) -> Arc<ServerConfig> {
        self.server_config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Classifies a new connection and, for a TLS one, completes the handshake. `Ok(None)`: the
    /// connection is to be closed (a plain one under `requireTLS`, end of stream before the
    /// first byte, or shutdown meanwhile).
    pub async fn accept(
        &self,
        stream: TcpStream,
        stop: &mut watch::Receiver<bool>,
    ) -> io::Result<Option<Accepted>> {
        let opening = tokio::select! {
            biased;
            _ = stop.wait_for(|stopping| *stopping) => return Ok(None),
            opening = peek_opening(&stream) => opening?,
        };
        if opening.is_empty() {
            return Ok(None);
        }
        if !looks_like_client_hello(&opening) {
            if self.mode == TlsMode::RequireTls {
                tracing::info!(
                    "closing connection: The server is configured to only allow SSL connections"
                );
                return Ok(None);
            }
            return Ok(Some(Accepted::Plain(stream)));
        }
        let acceptor = TlsAcceptor::from(self.current_config());
        let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
        let stream = tokio::select! {
            biased;
            _ = stop.wait_for(|stopping| *stopping) => return Ok(None),
            done = handshake => done.map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??,
        };
        let (_, session) = stream.get_ref();
        match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => {
                self.tls13_connections.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.tls12_connections.fetch_add(1, Ordering::Relaxed);
            }
        }
        let subject = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| certificate_subject(leaf));
        Ok(Some(Accepted::Tls(Box::new(stream), subject)))
    }

    /// serverStatus `transportSecurity`: TLS connections accepted, by protocol version.
    pub(crate) fn transport_security(&self) -> bson::Document {
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        bson::doc! {
            "1.0": 0_i64,
            "1.1": 0_i64,
            "1.2": count(&self.tls12_connections),
            "1.3": count(&self.tls13_connections),
            "unknown": 0_i64,
        }
    }

    /// `getCmdLineOpts`'s `net.tls`.
    pub fn parsed_options(config: &Config) -> Option<bson::Document> {
        if config.tls_mode == TlsMode::Disabled {
            return None;
        }
        let mut tls = bson::doc! {"mode": config.tls_mode.name()};
        if let Some(path) = &config.tls_certificate_key_file {
            tls.insert("certificateKeyFile", path.to_string_lossy().into_owned());
        }
        if let Some(path) = &config.tls_ca_file {
            tls.insert("CAFile", path.to_string_lossy().into_owned());
        }
        if config.tls_allow_connections_without_certificates {
            tls.insert("allowConnectionsWithoutCertificates", true);
        }
        Some(tls)
    }
}

/// Reloads `transport`'s files on every SIGHUP until `stop`: new handshakes use the new
/// certificate (and CA), established connections go on. A failed reload keeps the old one and
/// logs why. Nothing on platforms without SIGHUP.
pub(crate) async fn reload_on_sighup(
    transport: Arc<TlsTransport>,
    mut stop: watch::Receiver<bool>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: TLS certificates will not be reloaded");
            return;
        };
        loop {
            tokio::select! {
                _ = stop.wait_for(|stopping| *stopping) => return,
                received = hangups.recv() => {
                    if received.is_none() {
                        return;
                    }
                    match transport.reload() {
                        Ok(()) => tracing::info!("SIGHUP: TLS certificate and CA files reloaded"),
                        Err(error) => tracing::error!(error = %error.errmsg, "SIGHUP: TLS reload failed; the previous certificate stays in use"),
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (transport, stop.wait_for(|stopping| *stopping).await);
    }
}

/// How many opening bytes decide between TLS and plain: a TLS record header (5) and the
/// ClientHello's handshake header (4).
const OPENING_BYTES: usize = 9;

/// The first [`OPENING_BYTES`] of a connection without consuming them; fewer only when the
/// first byte already shows a plain connection, or at end of stream (empty: nothing came). A
/// client that sends part of a ClientHello and stalls is cut off by the handshake timeout.
async fn peek_opening(stream: &TcpStream) -> io::Result<Vec<u8>> {
    let mut buffer = [0u8; OPENING_BYTES];
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        let peeked = stream.peek(&mut buffer).await?;
        if peeked == 0 || peeked == OPENING_BYTES || buffer[0] != TLS_HANDSHAKE_RECORD {
            return Ok(buffer[..peeked].to_vec());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        // The rest of a ClientHello is in flight: peek again in a moment (peek would return
        // the same bytes at once).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Whether `opening` starts a TLS handshake record (type 0x16, version 3.x) whose first message
/// is a ClientHello (type 1) filling the record (handshake length = record length - 4).
fn looks_like_client_hello(opening: &[u8]) -> bool {
    let [record_type, major, _minor, record_hi, record_lo, message_type, len_0, len_1, len_2] =
        *opening
    else {
        return false;
    };
    let record_len = usize::from(u16::from_be_bytes([record_hi, record_lo]));
    let message_len = usize::from(len_0) << 16 | usize::from(len_1) << 8 | usize::from(len_2);
    record_type == TLS_HANDSHAKE_RECORD
        && major == 3
        && message_type == 1
        && message_len + 4 == record_len
}

/// A certificate, key or CA file that cannot be used: mongod's 140 InvalidSSLConfiguration.
fn invalid_configuration(message: String) -> CommandError {
    CommandError::new(ErrorCode::InvalidSSLConfiguration, message)
}

/// The rustls configuration for these files: the chain and key of `certificate_key_file` (one
/// PEM file, as mongod's), and with `ca_file` client certificates verified against it.
fn build_server_config(
    certificate_key_file: &Path,
    ca_file: Option<&Path>,
    allow_without_certificates: bool,
) -> CommandResult<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certificates(certificate_key_file)?;
    let key = PrivateKeyDer::from_pem_file(certificate_key_file).map_err(|error| {
        invalid_configuration(format!(
            "cannot read the private key in tlsCertificateKeyFile {}: {error}",
            certificate_key_file.display()
        ))
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid_configuration(format!("TLS: {error}")))?;
    let builder = match ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for certificate in read_certificates(ca_file)? {
                roots.add(certificate).map_err(|error| {
                    invalid_configuration(format!(
                        "invalid certificate in tlsCAFile {}: {error}",
                        ca_file.display()
                    ))
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let verifier = if allow_without_certificates {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|error| {
                invalid_configuration(format!(
                    "cannot use tlsCAFile {}: {error}",
                    ca_file.display()
                ))
            })?)
        }
    };
    builder.with_single_cert(chain, key).map_err(|error| {
        invalid_configuration(format!(
            "cannot use tlsCertificateKeyFile {}: {error}",
            certificate_key_file.display()
        ))
    })
}

/// Every certificate of a PEM file; at least one.
fn read_certificates(path: &Path) -> CommandResult<Vec<CertificateDer<'static>>> {
    let unreadable = |error: &dyn std::fmt::Display| {
        invalid_configuration(format!(
            "cannot read certificates from {}: {error}",
            path.display()
        ))
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| unreadable(&error))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| unreadable(&error))?;
    if certificates.is_empty() {
        return Err(unreadable(&"no certificate in the file"));
    }
    Ok(certificates)
}

/// The subject of a DER certificate in RFC 2253 form (last RDN first, `,` between them), as
/// mongod names an X.509 user: `CN=client,OU=eng,O=example`.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let oids = x509_parser::objects::oid_registry();
    let mut rdns: Vec<String> = certificate
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let oid = attribute.attr_type();
                    let name = x509_parser::objects::oid2abbrev(oid, oids)
                        .map_or_else(|_| oid.to_id_string(), str::to_owned);
                    let value = attribute
                        .as_str()
                        .map_or_else(|_| String::new(), escape_rfc2253);
                    format!("{name}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    Some(rdns.join(","))
}

/// RFC 2253 §2.4 escaping of an attribute value.
fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (index, ch) in value.chars().enumerate() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (index == 0 && (ch == '#' || ch == ' '))
            || (index == last && ch == ' ');
        if special {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_hello_is_told_from_a_mongodb_message() {
        // A TLS 1.2/1.3 ClientHello record of 512 bytes: 16 03 01 02 00 01 00 01 fc.
        let hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];
        assert!(looks_like_client_hello(&hello));
        // A 790-byte OP_MSG (length 0x316) with request id 0x0100: the record-shaped prefix,
        // but the lengths do not agree.
        let message = [0x16, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00];
        assert!(!looks_like_client_hello(&message));
        assert!(!looks_like_client_hello(&[0x16, 0x03]));
        assert!(!looks_like_client_hello(&[0x3a, 0, 0, 0, 1, 0, 0, 0, 0]));
    }

    #[test]
    fn rfc2253_escapes_specials() {
        assert_eq!(escape_rfc2253("a,b"), "a\\,b");
        assert_eq!(escape_rfc2253(" x "), "\\ x\\ ");
        assert_eq!(escape_rfc2253("#1"), "\\#1");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }
}
