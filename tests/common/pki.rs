//! A test PKI: a CA, a server certificate for 127.0.0.1/localhost and a client certificate
//! (subject `CN=client,OU=tests,O=tideway`), generated with rcgen in a temporary directory, and
//! driver clients that use them (tests/tls.rs, tests/x509.rs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mongodb::options::{ClientOptions, Tls, TlsOptions};
use mongodb::Client;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};

use super::{client_options, test_config, TestServer};
use tideway::config::TlsMode;
use tideway::Config;

/// The RFC 2253 subject of [`Pki::client`].
pub const CLIENT_SUBJECT: &str = "CN=client,OU=tests,O=tideway";

/// A CA and the PEM files signed by it, in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server: PathBuf,
    pub client: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        Pki::in_dir(dir, "")
    }

    /// Another CA and server certificate in the same directory, under names prefixed `prefix`.
    pub fn in_dir(dir: tempfile::TempDir, prefix: &str) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tideway test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, dn: &[(DnType, &str)]| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            // Without rcgen's default common name: the subject is `dn`, in this order.
            params.distinguished_name = DistinguishedName::new();
            for (kind, value) in dn {
                params.distinguished_name.push(kind.clone(), *value);
            }
            let cert = params.signed_by(&key, &issuer).unwrap();
            // mongod's certificate key file: the certificate, then its key, in one PEM file.
            format!("{}{}", cert.pem(), key.serialize_pem())
        };
        let write = |name: &str, text: &str| {
            let path = dir.path().join(format!("{prefix}{name}"));
            std::fs::write(&path, text).unwrap();
            path
        };
        let server = write(
            "server.pem",
            &leaf(
                vec!["localhost".into(), "127.0.0.1".into()],
                ExtendedKeyUsagePurpose::ServerAuth,
                &[(DnType::CommonName, "localhost")],
            ),
        );
        let client = write(
            "client.pem",
            &leaf(
                vec![],
                ExtendedKeyUsagePurpose::ClientAuth,
                &[
                    (DnType::OrganizationName, "tideway"),
                    (DnType::OrganizationalUnitName, "tests"),
                    (DnType::CommonName, "client"),
                ],
            ),
        );
        let ca = write("ca.pem", &ca_cert.pem());
        Pki {
            dir,
            ca,
            server,
            client,
        }
    }

    pub fn config(&self, mode: TlsMode) -> Config {
        Config {
            tls_mode: mode,
            tls_certificate_key_file: Some(self.server.clone()),
            ..test_config()
        }
    }
}

/// Driver options for `server` over TLS trusting `ca`, presenting `certificate` if given.
pub fn tls_options(server: &TestServer, ca: &Path, certificate: Option<&Path>) -> ClientOptions {
    let mut options = client_options(&server.addr);
    options.server_selection_timeout = Some(Duration::from_secs(2));
    options.tls = Some(Tls::Enabled(
        TlsOptions::builder()
            .ca_file_path(ca.to_path_buf())
            .cert_key_file_path(certificate.map(Path::to_path_buf))
            .build(),
    ));
    options
}

/// A driver client for `server` over TLS trusting `ca`, presenting `certificate` if given.
pub fn tls_client(server: &TestServer, ca: &Path, certificate: Option<&Path>) -> Client {
    Client::with_options(tls_options(server, ca, certificate)).unwrap()
}
