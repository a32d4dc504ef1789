//! The client of a connection as commands see it (`ClientInfo`): its id, address, handshake
//! metadata, authentication state and TLS identity, without the socket.

use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use bson::Document;

/// Who sent a command: what handlers may know about the connection, without the socket.
#[derive(Debug)]
pub struct ClientInfo {
    pub connection_id: i32,
    /// The peer's `ip:port`.
    pub remote: String,
    /// Set once the first `hello` carrying `client` metadata has been seen.
    pub metadata_received: AtomicBool,
    /// That metadata (`currentOp`'s `clientMetadata`, and its `application.name` as `appName`).
    metadata: OnceLock<Document>,
    /// The users this connection authenticated as, and its SASL conversation (`crate::auth`).
    pub auth: crate::auth::ClientAuth,
    /// Whether the connection is TLS (`crate::tls`).
    pub tls: bool,
    /// The RFC 2253 subject of the client certificate the TLS handshake verified against
    /// `--tlsCAFile`: the user name MONGODB-X509 authenticates (`access::x509`).
    pub peer_certificate_subject: Option<String>,
    /// The server itself running a command through dispatch (the session cache's refresh):
    /// never subject to authorization, as mongod's internal clients.
    pub internal: bool,
}

impl ClientInfo {
    pub fn new(connection_id: i32, remote: String) -> Self {
        ClientInfo {
            connection_id,
            remote,
            metadata_received: AtomicBool::new(false),
            metadata: OnceLock::new(),
            auth: crate::auth::ClientAuth::default(),
            tls: false,
            peer_certificate_subject: None,
            internal: false,
        }
    }

    /// The server's own client, for commands it runs on itself.
    pub fn internal() -> Self {
        ClientInfo {
            internal: true,
            ..ClientInfo::new(0, "(internal)".to_owned())
        }
    }

    /// A TLS connection, with the subject of the verified client certificate if one was
    /// presented.
    pub(crate) fn with_tls(mut self, peer_certificate_subject: Option<String>) -> Self {
        self.tls = true;
        self.peer_certificate_subject = peer_certificate_subject;
        self
    }

    /// Keeps the `client` document of the connection's first `hello`.
    pub(crate) fn set_metadata(&self, metadata: Document) {
        let _ = self.metadata.set(metadata);
    }

    pub fn metadata(&self) -> Option<&Document> {
        self.metadata.get()
    }

    /// `client.application.name` from the handshake, if the driver sent one.
    pub fn app_name(&self) -> Option<&str> {
        self.metadata
            .get()?
            .get_document("application")
            .ok()?
            .get_str("name")
            .ok()
            .filter(|name| !name.is_empty())
    }

    /// The peer's address without the port (the profiler's `client`).
    pub fn host(&self) -> &str {
        match self.remote.rsplit_once(':') {
            Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => &self.remote,
        }
    }
}
