//! The client side of SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) as MongoDB drivers
//! speak it, for the `connect` workload's raw connections: client-first, client-final with the
//! proof, and the check of the server's signature.
//!
//! Invariants: the server's nonce must extend ours and its signature must match, or the
//! conversation fails (a benchmark that skipped the check would time less than a driver does);
//! SCRAM-SHA-1 hashes mongod's digest `hex(md5("user:mongo:pwd"))`, SCRAM-SHA-256 the password
//! itself (the bench's password is ASCII, so SASLprep leaves it unchanged — [`Scram::new`]
//! refuses any other). Like the drivers (Auth spec, "Caching credentials"), the expensive
//! `Hi()` (PBKDF2) result is cached per (password, salt, iterations), so only the first
//! connection pays it. No sockets here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use md5::{Digest, Md5};
use sha1::Sha1;
use sha2::Sha256;

/// A SCRAM mechanism MongoDB offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => "SCRAM-SHA-1",
            Mechanism::Sha256 => "SCRAM-SHA-256",
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(key)
                    .expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha256 => {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                    .expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this mechanism's HMAC.
    fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash(b"").len()];
        match self {
            Mechanism::Sha1 => {
                pbkdf2::pbkdf2::<Hmac<Sha1>>(password.as_bytes(), salt, iterations, &mut out)
            }
            Mechanism::Sha256 => {
                pbkdf2::pbkdf2::<Hmac<Sha256>>(password.as_bytes(), salt, iterations, &mut out)
            }
        }
        .expect("HMAC takes keys of any length");
        out
    }
}

/// Salted passwords already computed, by (mechanism, hashed password, salt, iterations).
type SaltedCache = HashMap<(Mechanism, String, Vec<u8>, u32), Vec<u8>>;

/// One user's credentials and the shared cache of salted passwords (clone it per task).
#[derive(Clone)]
pub struct Scram {
    mechanism: Mechanism,
    user: String,
    /// The password as the mechanism hashes it (digested for SCRAM-SHA-1).
    password: String,
    cache: Arc<Mutex<SaltedCache>>,
}

/// A conversation after client-first: what client-final needs.
pub struct ClientFirst {
    /// `n=user,r=nonce`: client-first without its GS2 header, part of the AuthMessage.
    bare: String,
    nonce: String,
    /// The whole client-first message, to send.
    pub message: String,
}

/// A conversation after client-final: the server signature to expect.
pub struct ClientFinal {
    pub message: String,
    server_signature: Vec<u8>,
}

impl Scram {
    /// Credentials of `user`; the password must be printable ASCII (see the module invariants).
    pub fn new(mechanism: Mechanism, user: &str, password: &str) -> Result<Scram, String> {
        if !password.bytes().all(|byte| (0x21..0x7f).contains(&byte)) {
            return Err("the connect workload's password must be printable ASCII".into());
        }
        let password = match mechanism {
            Mechanism::Sha1 => mongo_digest(user, password),
            Mechanism::Sha256 => password.to_string(),
        };
        Ok(Scram {
            mechanism,
            user: user.to_string(),
            password,
            cache: Arc::default(),
        })
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// client-first with client nonce `nonce` (no channel binding: GS2 header `n,,`).
    pub fn client_first(&self, nonce: &str) -> ClientFirst {
        let bare = format!("n={},r={nonce}", sasl_name(&self.user));
        ClientFirst {
            message: format!("n,,{bare}"),
            bare,
            nonce: nonce.to_string(),
        }
    }

    /// client-final for `server_first`, or why server-first is unacceptable.
    pub fn client_final(
        &self,
        first: &ClientFirst,
        server_first: &str,
    ) -> Result<ClientFinal, String> {
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", value)) => nonce = Some(value),
                Some(("s", value)) => salt = Some(value),
                Some(("i", value)) => iterations = Some(value),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("server-first lacks r, s or i: {server_first}"));
        };
        if !nonce.starts_with(&first.nonce) || nonce.len() == first.nonce.len() {
            return Err("server nonce does not extend the client nonce".into());
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| "server-first salt is not base64".to_string())?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| format!("server-first iteration count {iterations:?}"))?;
        // RFC 7677 §4 / the Auth spec: at least 4096 iterations.
        if iterations < 4096 {
            return Err(format!("server-first iteration count {iterations} < 4096"));
        }
        let salted = self.salted_password(&salt, iterations);
        let mechanism = self.mechanism;
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", first.bare);
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(key, signature)| key ^ signature)
            .collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        Ok(ClientFinal {
            message: format!("{without_proof},p={}", BASE64.encode(proof)),
            server_signature: mechanism.hmac(&server_key, auth_message.as_bytes()),
        })
    }

    fn salted_password(&self, salt: &[u8], iterations: u32) -> Vec<u8> {
        let key = (
            self.mechanism,
            self.password.clone(),
            salt.to_vec(),
            iterations,
        );
        if let Some(salted) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return salted;
        }
        let salted = self
            .mechanism
            .salted_password(&self.password, salt, iterations);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, salted.clone());
        }
        salted
    }
}

impl ClientFinal {
    /// Checks server-final's `v=` signature.
    pub fn verify(&self, server_final: &str) -> Result<(), String> {
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("server-final error: {error}"));
        }
        let signature = server_final
            .split(',')
            .find_map(|attribute| attribute.strip_prefix("v="))
            .ok_or_else(|| format!("server-final lacks v=: {server_final}"))?;
        match BASE64.decode(signature) {
            Ok(signature) if signature == self.server_signature => Ok(()),
            _ => Err("server signature does not match".into()),
        }
    }
}

/// A fresh client nonce: 24 random bytes, base64.
pub fn new_nonce() -> String {
    BASE64.encode(rand::random::<[u8; 24]>())
}

/// mongod's SCRAM-SHA-1 password digest: `hex(md5("<user>:mongo:<password>"))`.
fn mongo_digest(user: &str, password: &str) -> String {
    Md5::digest(format!("{user}:mongo:{password}").as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// RFC 5802 `saslname`: `=` and `,` escaped.
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose password is used as given (the RFC examples hash "pencil" itself).
    fn rfc_client(mechanism: Mechanism) -> Scram {
        Scram {
            mechanism,
            user: "user".into(),
            password: "pencil".into(),
            cache: Arc::default(),
        }
    }

    #[test]
    fn rfc5802_sha1_example_conversation() {
        // RFC 5802 §5.
        let client = rfc_client(Mechanism::Sha1);
        let first = client.client_first("fyko+d2lbbFgONRv9qkxdawL");
        assert_eq!(first.message, "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
        let last = client
            .client_final(
                &first,
                "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            )
            .unwrap();
        assert_eq!(
            last.message,
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
        );
        last.verify("v=rmF9pqV8S7suAoZWja4dJRkFsKQ=").unwrap();
        assert!(last.verify("v=AAAAAAAAAAAAAAAAAAAAAAAAAAA=").is_err());
    }

    #[test]
    fn rfc7677_sha256_example_conversation() {
        // RFC 7677 §3.
        let client = rfc_client(Mechanism::Sha256);
        let first = client.client_first("rOprNGfwEbeRWgbNEkqO");
        let last = client
            .client_final(
                &first,
                "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,\
                 i=4096",
            )
            .unwrap();
        assert_eq!(
            last.message,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        last.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    #[test]
    fn a_nonce_that_does_not_extend_ours_or_few_iterations_are_refused() {
        let client = rfc_client(Mechanism::Sha256);
        let first = client.client_first("abc");
        assert!(client
            .client_final(&first, "r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .is_err());
        assert!(client
            .client_final(&first, "r=abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .is_err());
        assert!(client
            .client_final(&first, "r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100")
            .is_err());
    }

    #[test]
    fn sha1_hashes_mongods_digest_of_the_password() {
        // The Auth spec's example: user "user", password "pencil".
        assert_eq!(
            mongo_digest("user", "pencil"),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
        let client = Scram::new(Mechanism::Sha1, "user", "pencil").unwrap();
        assert_eq!(client.password, "1c33006ec1ffd90f9cadcbcc0e118200");
        assert!(Scram::new(Mechanism::Sha256, "user", "pässword").is_err());
    }

    #[test]
    fn user_names_are_escaped() {
        assert_eq!(sasl_name("a=b,c"), "a=3Db=2Cc");
    }
}
