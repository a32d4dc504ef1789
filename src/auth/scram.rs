//! SCRAM (RFC 5802, RFC 7677) as mongod speaks it: the credential math (salted password, client
//! and server keys), the stored credential document, and the server side of one conversation —
//! parse client-first, answer server-first, check client-final's proof, answer server-final.
//! Pure: no storage, no sockets, no clock; the caller supplies the user's credential and the
//! random parts (salt, server nonce), so the RFC test vectors run unchanged.
//!
//! Invariants: the password is never kept (only salt, iteration count, StoredKey and ServerKey);
//! the proof is compared in constant time (`subtle`); channel binding and authorization
//! identities other than the user itself are refused, as mongod does; SCRAM-SHA-1's password is
//! mongod's digest `hex(md5("user:mongo:pwd"))`, SCRAM-SHA-256's is the SASLprep'ed password.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bson::{doc, Document};
use hmac::{Hmac, KeyInit, Mac};
use md5::{Digest, Md5};
use sha1::Sha1;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The SCRAM mechanisms mongod offers, in the order it lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha1, Mechanism::Sha256];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => "SCRAM-SHA-1",
            Mechanism::Sha256 => "SCRAM-SHA-256",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// mongod's default iteration counts (`scramIterationCount`, `scramSHA256IterationCount`).
    pub(crate) fn default_iterations(self) -> u32 {
        match self {
            Mechanism::Sha1 => 10_000,
            Mechanism::Sha256 => 15_000,
        }
    }

    /// mongod's salt length: the hash size less 4 bytes.
    pub fn salt_len(self) -> usize {
        self.hash_len() - 4
    }

    fn hash_len(self) -> usize {
        match self {
            Mechanism::Sha1 => 20,
            Mechanism::Sha256 => 32,
        }
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
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

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
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

    /// The password as this mechanism hashes it: SCRAM-SHA-1 digests `user:mongo:pwd` with MD5
    /// (unless the client already did, `digestPassword: false`); SCRAM-SHA-256 SASLpreps it.
    pub(crate) fn prepare_password(
        self,
        user: &str,
        password: &str,
        digest: bool,
    ) -> Result<String, ScramError> {
        match self {
            Mechanism::Sha1 if digest => Ok(mongo_digest(user, password)),
            Mechanism::Sha1 => Ok(password.to_owned()),
            Mechanism::Sha256 => stringprep::saslprep(password)
                .map(|prepared| prepared.into_owned())
                .map_err(|_| ScramError::Saslprep),
        }
    }
}

/// mongod's password digest: `hex(md5("<user>:mongo:<password>"))`.
pub fn mongo_digest(user: &str, password: &str) -> String {
    Md5::digest(format!("{user}:mongo:{password}").as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Why a conversation failed. The client only ever learns "Authentication failed." (mongod
/// masks the reason); the server logs this.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("authorization identity must match the user")]
    AuthzId,
    #[error("the password cannot be SASLprep'ed")]
    Saslprep,
    #[error("nonce mismatch")]
    Nonce,
    #[error("channel binding data mismatch")]
    Gs2Mismatch,
    #[error("invalid proof")]
    Proof,
    #[error("the stored credential is malformed")]
    StoredCredential,
}

/// A user's stored credential for one mechanism, as in `admin.system.users`
/// `credentials.<mechanism>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub iteration_count: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// The credential of `prepared_password` (see [`Mechanism::prepare_password`]).
    pub fn derive(
        mechanism: Mechanism,
        prepared_password: &str,
        salt: &[u8],
        iteration_count: u32,
    ) -> Credential {
        let salted = mechanism.salted_password(prepared_password, salt, iteration_count);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        Credential {
            iteration_count,
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, b"Server Key"),
        }
    }

    /// mongod's stored shape: `{iterationCount, salt, storedKey, serverKey}`, base64 strings.
    pub fn to_document(&self) -> Document {
        doc! {
            "iterationCount": i32::try_from(self.iteration_count).unwrap_or(i32::MAX),
            "salt": BASE64.encode(&self.salt),
            "storedKey": BASE64.encode(&self.stored_key),
            "serverKey": BASE64.encode(&self.server_key),
        }
    }

    pub fn from_document(document: &Document) -> Result<Credential, ScramError> {
        let bytes = |field: &str| {
            document
                .get_str(field)
                .ok()
                .and_then(|text| BASE64.decode(text).ok())
                .ok_or(ScramError::StoredCredential)
        };
        let iteration_count = document
            .get("iterationCount")
            .and_then(tideway_base::bsonutil::as_f64)
            .filter(|count| *count >= 1.0 && *count <= f64::from(u32::MAX))
            .ok_or(ScramError::StoredCredential)? as u32;
        Ok(Credential {
            iteration_count,
            salt: bytes("salt")?,
            stored_key: bytes("storedKey")?,
            server_key: bytes("serverKey")?,
        })
    }
}

/// The parsed client-first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// `n,,` (or `y,,`): what client-final's `c=` must carry, base64-encoded.
    pub gs2_header: String,
    /// `n=<user>,r=<nonce>` as sent: part of the AuthMessage.
    pub bare: String,
    /// The user name, `=2C`/`=3D` decoded.
    pub user: String,
    pub nonce: String,
}

/// Parses `gs2-header client-first-message-bare`.
pub(crate) fn parse_client_first(message: &str) -> Result<ClientFirst, ScramError> {
    let (binding, rest) = message
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    match binding {
        "n" | "y" => {}
        _ if binding.starts_with("p=") => return Err(ScramError::ChannelBinding),
        _ => return Err(ScramError::Malformed("bad channel binding flag")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    let gs2_header = format!("{binding},{authzid},");
    let mut fields = bare.split(',');
    let user = fields
        .next()
        .and_then(|field| field.strip_prefix("n="))
        .ok_or(ScramError::Malformed("no user name"))?;
    let user = decode_sasl_name(user)?;
    if let Some(authzid) = authzid.strip_prefix("a=") {
        if decode_sasl_name(authzid)? != user {
            return Err(ScramError::AuthzId);
        }
    } else if !authzid.is_empty() {
        return Err(ScramError::Malformed("bad authorization identity"));
    }
    let nonce = fields
        .next()
        .and_then(|field| field.strip_prefix("r="))
        .filter(|nonce| !nonce.is_empty())
        .ok_or(ScramError::Malformed("no client nonce"))?;
    if fields.next().is_some_and(|field| field.starts_with("m=")) {
        return Err(ScramError::Malformed(
            "mandatory extensions are not supported",
        ));
    }
    Ok(ClientFirst {
        gs2_header,
        bare: bare.to_owned(),
        user,
        nonce: nonce.to_owned(),
    })
}

/// RFC 5802 `saslname`: `=2C` is `,`, `=3D` is `=`, any other `=` is malformed.
fn decode_sasl_name(name: &str) -> Result<String, ScramError> {
    let mut decoded = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        decoded.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        decoded.push(match escape {
            Some("=2C") => ',',
            Some("=3D") => '=',
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        });
        rest = &rest[at + 3..];
    }
    decoded.push_str(rest);
    Ok(decoded)
}

/// The server side of one conversation after client-first: it answered server-first and waits
/// for client-final.
#[derive(Clone, Debug)]
pub(crate) struct ServerConversation {
    pub mechanism: Mechanism,
    client_first: ClientFirst,
    server_first: String,
    combined_nonce: String,
    credential: Credential,
}

impl ServerConversation {
    /// Answers client-first for a user whose credential is `credential`; `server_nonce` is the
    /// random part the server appends to the client's nonce (printable, no `,`).
    pub fn start(
        mechanism: Mechanism,
        client_first: ClientFirst,
        credential: Credential,
        server_nonce: &str,
    ) -> (ServerConversation, String) {
        let combined_nonce = format!("{}{server_nonce}", client_first.nonce);
        let server_first = format!(
            "r={combined_nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iteration_count
        );
        let conversation = ServerConversation {
            mechanism,
            client_first,
            server_first: server_first.clone(),
            combined_nonce,
            credential,
        };
        (conversation, server_first)
    }

    /// Checks client-final (`c=..,r=..,p=..`) and returns server-final (`v=<signature>`).
    pub fn finish(&self, client_final: &str) -> Result<String, ScramError> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|field| field.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        if binding != BASE64.encode(self.client_first.gs2_header.as_bytes()) {
            return Err(ScramError::Gs2Mismatch);
        }
        let nonce = fields
            .next()
            .and_then(|field| field.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        if nonce != self.combined_nonce {
            return Err(ScramError::Nonce);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first.bare, self.server_first
        );
        let mechanism = self.mechanism;
        let client_signature = mechanism.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::Proof);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored_key = mechanism.hash(&client_key);
        if !bool::from(stored_key.ct_eq(&self.credential.stored_key)) {
            return Err(ScramError::Proof);
        }
        let server_signature = mechanism.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }

    /// The user the conversation authenticates.
    pub fn user(&self) -> &str {
        &self.client_first.user
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5802 section 5 (SCRAM-SHA-1, password "pencil" as is: the RFC has no mongod digest).
    #[test]
    fn rfc5802_sha1_example_conversation() {
        let salt = BASE64.decode("QSXCR+Q6sek8bf92").unwrap();
        let credential = Credential::derive(Mechanism::Sha1, "pencil", &salt, 4096);
        let client_first = parse_client_first("n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL").unwrap();
        assert_eq!(client_first.user, "user");
        let (conversation, server_first) = ServerConversation::start(
            Mechanism::Sha1,
            client_first,
            credential,
            "3rfcNHYJY1ZVvWVs7j",
        );
        assert_eq!(
            server_first,
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
        );
        let server_final = conversation
            .finish("c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
            .unwrap();
        assert_eq!(server_final, "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
    }

    /// RFC 7677 section 3 (SCRAM-SHA-256).
    #[test]
    fn rfc7677_sha256_example_conversation() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let password = Mechanism::Sha256
            .prepare_password("user", "pencil", true)
            .unwrap();
        let credential = Credential::derive(Mechanism::Sha256, &password, &salt, 4096);
        let client_first = parse_client_first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let (conversation, server_first) = ServerConversation::start(
            Mechanism::Sha256,
            client_first,
            credential,
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let server_final = conversation
            .finish("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn wrong_proof_and_wrong_nonce_are_refused() {
        let salt = BASE64.decode("QSXCR+Q6sek8bf92").unwrap();
        let credential = Credential::derive(Mechanism::Sha1, "not pencil", &salt, 4096);
        let client_first = parse_client_first("n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL").unwrap();
        let (conversation, _) = ServerConversation::start(
            Mechanism::Sha1,
            client_first,
            credential,
            "3rfcNHYJY1ZVvWVs7j",
        );
        assert_eq!(
            conversation.finish(
                "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
            ),
            Err(ScramError::Proof)
        );
        assert_eq!(
            conversation
                .finish("c=biws,r=fyko+d2lbbFgONRv9qkxdawLother,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
            Err(ScramError::Nonce)
        );
    }

    /// mongod's SCRAM-SHA-1 password digest (the driver auth spec's example:
    /// user "user", password "pencil" digests to 1c33006ec1ffd90f9cadcbcc0e118200).
    #[test]
    fn mongo_digest_matches_the_auth_spec() {
        assert_eq!(
            mongo_digest("user", "pencil"),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
    }

    #[test]
    fn client_first_parsing() {
        let parsed = parse_client_first("n,a=a=2Cb,n=a=2Cb,r=abc").unwrap();
        assert_eq!(parsed.user, "a,b");
        assert_eq!(parsed.gs2_header, "n,a=a=2Cb,");
        assert_eq!(
            parse_client_first("p=tls-unique,,n=u,r=x"),
            Err(ScramError::ChannelBinding)
        );
        assert_eq!(
            parse_client_first("n,a=other,n=u,r=x"),
            Err(ScramError::AuthzId)
        );
        assert!(parse_client_first("n,,n=u=2,r=x").is_err());
        assert!(parse_client_first("n,,n=u").is_err());
        assert!(parse_client_first("garbage").is_err());
    }

    #[test]
    fn stored_credential_round_trips() {
        let credential = Credential::derive(Mechanism::Sha256, "pwd", b"0123456789abcdef", 15000);
        let document = credential.to_document();
        assert_eq!(Credential::from_document(&document).unwrap(), credential);
    }
}
