//! The servers under test: parsing `--uri [NAME=]URI`, refusing non-local hosts unless told
//! otherwise, and one shared driver `Client` per server (plus its address and TLS CA file, for
//! the `connect` workload's raw connections).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::{doc, Document};
use mongodb::options::{ClientOptions, ServerAddress, Tls};
use mongodb::{Client, Collection, Database};

/// One server under test.
pub struct Target {
    /// Short name for tables: the `NAME=` given, or A, B, C… in command-line order.
    pub label: String,
    /// The URI with any password removed.
    pub display_uri: String,
    client: Client,
    /// The options `client` was built with (modes that build clients of their own start here).
    options: ClientOptions,
    database: String,
    /// The first host of the URI, when it is `host:port` (not a Unix socket).
    tcp_address: Option<(String, u16)>,
    /// The URI's `tlsCAFile`.
    tls_ca_file: Option<PathBuf>,
    /// With several hosts (routers on one database): a direct client per host, for figures
    /// each keeps for itself (`ttl_churn` adds up their reapers' deletions).
    members: Vec<Client>,
}

impl Target {
    /// A handle on `name` in the benchmark database.
    pub fn collection(&self, name: &str) -> Collection<Document> {
        self.client.database(&self.database).collection(name)
    }

    /// The `admin` database, for server-wide commands such as `serverStatus`.
    pub fn admin(&self) -> Database {
        self.client.database("admin")
    }

    /// The `admin` database of each host of a URI with several, each reached directly (empty
    /// with one host: [`Target::admin`] is that host).
    pub fn member_admins(&self) -> impl Iterator<Item = Database> + '_ {
        self.members.iter().map(|client| client.database("admin"))
    }

    /// The options of the shared client (credentials, TLS, timeouts as the URI said).
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// Name of the benchmark database.
    pub fn database_name(&self) -> &str {
        &self.database
    }

    /// Host and port of the server (the URI's first host).
    pub fn tcp_address(&self) -> Option<(&str, u16)> {
        self.tcp_address
            .as_ref()
            .map(|(host, port)| (host.as_str(), *port))
    }

    /// The CA file the URI trusts for TLS (`tlsCAFile=`), if any.
    pub fn tls_ca_file(&self) -> Option<&Path> {
        self.tls_ca_file.as_deref()
    }
}

/// Splits `NAME=URI` (a name is anything before `=` that does not look like a URI scheme).
fn split_label(spec: &str) -> (Option<&str>, &str) {
    match spec.split_once('=') {
        Some((name, uri)) if !name.contains("://") && !name.is_empty() => (Some(name), uri),
        _ => (None, spec),
    }
}

/// `mongodb://user:secret@host/` → `mongodb://user:***@host/`.
fn redact(uri: &str) -> String {
    let Some(scheme_end) = uri.find("://").map(|index| index + 3) else {
        return uri.to_string();
    };
    let rest = &uri[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user_info = &rest[..at];
            let user = user_info.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..scheme_end], &rest[at..])
        }
        None => uri.to_string(),
    }
}

/// Letters A..Z, then S27, S28…
fn default_label(index: usize) -> String {
    match u8::try_from(index) {
        Ok(small) if small < 26 => char::from(b'A' + small).to_string(),
        _ => format!("S{}", index + 1),
    }
}

fn is_local_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<IpAddr>()
            .map(|address| address.is_loopback())
            .unwrap_or(false)
}

/// Parses `spec`, checks its hosts, builds the shared client (pool of at least `pool_size`
/// connections, direct connection to a single host) and pings the server.
pub async fn connect(
    spec: &str,
    index: usize,
    pool_size: u32,
    database: &str,
    allow_remote: bool,
) -> Result<Target, String> {
    let (name, uri) = split_label(spec);
    let display_uri = redact(uri);
    if uri.starts_with("mongodb+srv://") && !allow_remote {
        return Err(format!(
            "{display_uri}: mongodb+srv URIs resolve remote hosts; pass --allow-remote to use one"
        ));
    }
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|error| format!("{display_uri}: {error}"))?;
    if !allow_remote {
        for host in &options.hosts {
            if let ServerAddress::Tcp { host, .. } = host {
                if !is_local_host(host) {
                    return Err(format!(
                        "{display_uri}: host {host} is not on this machine; pass --allow-remote \
                         to benchmark a remote server"
                    ));
                }
            }
        }
    }
    let tcp_address = options.hosts.first().and_then(|host| match host {
        ServerAddress::Tcp { host, port } => Some((host.clone(), port.unwrap_or(27017))),
        _ => None,
    });
    let tls_ca_file = match &options.tls {
        Some(Tls::Enabled(tls)) => tls.ca_file_path.clone(),
        _ => None,
    };
    // One client per server, shared by all client tasks, as an application would use it.
    options.max_pool_size = Some(options.max_pool_size.unwrap_or(0).max(pool_size));
    if options.hosts.len() == 1 && options.direct_connection.is_none() {
        // Talk to exactly this server, never to hosts it may announce.
        options.direct_connection = Some(true);
    }
    options
        .app_name
        .get_or_insert_with(|| "tideway-bench".to_string());
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    options
        .connect_timeout
        .get_or_insert(Duration::from_secs(5));
    let client =
        Client::with_options(options.clone()).map_err(|error| format!("{display_uri}: {error}"))?;
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .map_err(|error| format!("{display_uri}: ping failed: {error}"))?;
    let mut members = Vec::new();
    if options.hosts.len() > 1 {
        for host in &options.hosts {
            let mut direct = options.clone();
            direct.hosts = vec![host.clone()];
            direct.direct_connection = Some(true);
            direct.max_pool_size = Some(2);
            // A host that is down is skipped quickly.
            direct.server_selection_timeout = Some(Duration::from_millis(200));
            members.push(
                Client::with_options(direct).map_err(|error| format!("{display_uri}: {error}"))?,
            );
        }
    }
    Ok(Target {
        label: name.map_or_else(|| default_label(index), str::to_string),
        display_uri,
        client,
        options,
        database: database.to_string(),
        tcp_address,
        tls_ca_file,
        members,
    })
}

/// Width of a table's "server" column: the longest label, at least the header's.
pub fn label_width(targets: &[Target]) -> usize {
    targets
        .iter()
        .map(|target| target.label.len())
        .max()
        .unwrap_or(0)
        .max("server".len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_uris_split() {
        assert_eq!(
            split_label("mongod=mongodb://127.0.0.1:27018"),
            (Some("mongod"), "mongodb://127.0.0.1:27018")
        );
        assert_eq!(
            split_label("mongodb://127.0.0.1/?w=1"),
            (None, "mongodb://127.0.0.1/?w=1")
        );
        assert_eq!(default_label(1), "B");
        assert_eq!(default_label(26), "S27");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("mongodb://bob:secret@127.0.0.1:27017/db"),
            "mongodb://bob:***@127.0.0.1:27017/db"
        );
        assert_eq!(redact("mongodb://127.0.0.1"), "mongodb://127.0.0.1");
    }

    #[test]
    fn only_loopback_is_local() {
        assert!(is_local_host("127.0.0.1"));
        assert!(is_local_host("127.3.0.9"));
        assert!(is_local_host("localhost"));
        assert!(is_local_host("::1"));
        assert!(is_local_host("[::1]"));
        assert!(!is_local_host("10.0.0.1"));
        assert!(!is_local_host("example.com"));
    }
}
