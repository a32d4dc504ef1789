//! A throwaway test PKI for the TLS benchmarks (`--make-test-pki DIR`): a CA and a server
//! certificate for `localhost` and `127.0.0.1` signed by it, written as mongod's files — `ca.pem`
//! (`--tlsCAFile` of a client, `tlsCAFile=` in a URI) and `server.pem` (certificate then key,
//! `--tlsCertificateKeyFile`).
//!
//! Keys are ECDSA P-256 (rcgen on ring cannot generate RSA keys): its handshakes are cheaper than
//! the RSA-2048 certificates many deployments use, so the TLS setup figures are a lower bound.
//! Test use only: the keys are written unencrypted and the files are overwritten.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};

/// The files written.
pub struct PkiFiles {
    pub ca: PathBuf,
    pub server: PathBuf,
}

/// Writes `ca.pem` and `server.pem` into `dir` (created if missing).
pub fn generate(dir: &Path) -> Result<PkiFiles, String> {
    let failed = |what: &str, error: rcgen::Error| format!("cannot make the {what}: {error}");
    std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;

    let ca_key = KeyPair::generate().map_err(|error| failed("CA key", error))?;
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(|error| failed("CA", error))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tideway-bench test CA");
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|error| failed("CA certificate", error))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().map_err(|error| failed("server key", error))?;
    let mut server_params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(|error| failed("server certificate", error))?;
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server_params.distinguished_name = DistinguishedName::new();
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .map_err(|error| failed("server certificate", error))?;

    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map(|()| path.clone())
            .map_err(|error| format!("{}: {error}", path.display()))
    };
    Ok(PkiFiles {
        ca: write("ca.pem", &ca_cert.pem())?,
        server: write(
            "server.pem",
            &format!("{}{}", server_cert.pem(), server_key.serialize_pem()),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_a_server_certificate_with_its_key() {
        let dir = std::env::temp_dir().join(format!("tideway-bench-pki-{}", std::process::id()));
        let files = generate(&dir).unwrap();
        let ca = std::fs::read_to_string(&files.ca).unwrap();
        let server = std::fs::read_to_string(&files.server).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(server.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(server.contains("-----BEGIN PRIVATE KEY-----"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
