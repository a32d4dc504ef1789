//! The `connect` workload: connection setup rate and latency. Each client task repeatedly opens
//! a new connection, completes the handshake a driver would (TLS, `hello`, SCRAM), runs one
//! `ping` and closes it — over raw sockets, not the driver, whose pool and monitoring would
//! blur what one setup costs.
//!
//! One operation, all of it timed: TCP connect; for the TLS modes a full TLS handshake (the
//! client never resumes a session: every connection pays for the certificate exchange), except
//! in `tls_resumed`, which resumes the previous session as a driver's shared TLS config may; an
//! OP_MSG `hello` with client metadata, for the SCRAM modes carrying
//! `speculativeAuthenticate: {saslStart, …, options: {skipEmptyExchange: true}}` exactly as the
//! drivers' Authentication spec has them open a conversation; for SCRAM one `saslContinue`
//! with the proof and the check of the server's signature (and the empty exchange only if the
//! server insists); `ping`; close (TLS close_notify, then the socket). Like drivers, the client
//! keeps the salted password once computed (`scram.rs`), so only the server's side of SCRAM is
//! paid per connection. The user is created by the bench through the driver ([`BENCH_USER`]).
//! Rates, percentiles and errors follow the shared runner's rules (`runner.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::report::{print_errors, thousands, Column, Figures, Table};
use crate::runner::{self, Operation, RunStats};
use crate::scram::{self, Mechanism, Scram};
use crate::target::{self, Target};
use crate::workload::OpError;
use crate::{ratio, Settings};

/// The user the SCRAM modes authenticate as (in `admin`), created (again) by the bench.
pub const BENCH_USER: &str = "tideway_bench_connect";
/// Its password: a benchmark fixture, not a secret.
const BENCH_PASSWORD: &str = "tideway-bench-connect-password";

/// The largest reply accepted (mongod's maxMessageSizeBytes).
const MAX_MESSAGE_BYTES: usize = 48_000_000;
const OP_MSG: i32 = 2013;

/// What a connection does before its `ping`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum ConnectMode {
    /// TCP, `hello`, `ping`: the baseline.
    Plain,
    /// Plain plus SCRAM-SHA-256.
    #[value(name = "scram_sha_256")]
    ScramSha256,
    /// Plain plus SCRAM-SHA-1.
    #[value(name = "scram_sha_1")]
    ScramSha1,
    /// TLS (full handshake), `hello`, `ping`.
    Tls,
    /// TLS plus SCRAM-SHA-256.
    #[value(name = "tls_scram_sha_256")]
    TlsScramSha256,
    /// TLS resuming an earlier session (an abbreviated handshake), `hello`, `ping`.
    TlsResumed,
}

impl ConnectMode {
    pub const ALL: [ConnectMode; 6] = [
        ConnectMode::Plain,
        ConnectMode::ScramSha256,
        ConnectMode::ScramSha1,
        ConnectMode::Tls,
        ConnectMode::TlsScramSha256,
        ConnectMode::TlsResumed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ConnectMode::Plain => "plain",
            ConnectMode::ScramSha256 => "scram_sha_256",
            ConnectMode::ScramSha1 => "scram_sha_1",
            ConnectMode::Tls => "tls",
            ConnectMode::TlsScramSha256 => "tls_scram_sha_256",
            ConnectMode::TlsResumed => "tls_resumed",
        }
    }

    fn tls(self) -> bool {
        matches!(
            self,
            ConnectMode::Tls | ConnectMode::TlsScramSha256 | ConnectMode::TlsResumed
        )
    }

    fn mechanism(self) -> Option<Mechanism> {
        match self {
            ConnectMode::ScramSha256 | ConnectMode::TlsScramSha256 => Some(Mechanism::Sha256),
            ConnectMode::ScramSha1 => Some(Mechanism::Sha1),
            ConnectMode::Plain | ConnectMode::Tls | ConnectMode::TlsResumed => None,
        }
    }
}

/// The `connect` workload's own settings.
pub struct ConnectSettings {
    pub modes: Vec<ConnectMode>,
    /// CA of the server certificate for the TLS modes (else the URI's `tlsCAFile`).
    pub ca_file: Option<PathBuf>,
}

/// Where and how one server's raw connections are opened.
struct Endpoint {
    address: String,
    server_name: ServerName<'static>,
    /// Full handshakes only, and resuming sessions (`tls_resumed`).
    tls: Option<(TlsConnector, TlsConnector)>,
}

/// One client task: opens, uses and closes one connection per operation.
struct SetupOp {
    endpoint: Arc<Endpoint>,
    mode: ConnectMode,
    scram: Option<Scram>,
}

impl Operation for SetupOp {
    async fn execute(&mut self) -> Result<u64, OpError> {
        let tcp = TcpStream::connect(&self.endpoint.address)
            .await
            .map_err(|error| OpError::new("tcp connect", error.to_string()))?;
        tcp.set_nodelay(true)
            .map_err(|error| OpError::new("tcp connect", error.to_string()))?;
        match (&self.endpoint.tls, self.mode.tls()) {
            (Some((full, resuming)), true) => {
                let connector = if self.mode == ConnectMode::TlsResumed {
                    resuming
                } else {
                    full
                };
                let stream = connector
                    .connect(self.endpoint.server_name.clone(), tcp)
                    .await
                    .map_err(|error| OpError::new("tls handshake", error.to_string()))?;
                let kind = stream.get_ref().1.handshake_kind();
                // The whole conversation first: the session tickets for the next connection
                // arrive with the first reply.
                converse(stream, self.scram.as_ref()).await?;
                // A `tls_resumed` connection that fell back to a full handshake (the first one,
                // or a server without tickets) measured the other mode: an error, not a count.
                if self.mode == ConnectMode::TlsResumed && kind != Some(HandshakeKind::Resumed) {
                    return Err(OpError::new(
                        "tls not resumed",
                        format!("handshake {kind:?} instead of a resumption"),
                    ));
                }
                Ok(())
            }
            (None, true) => Err(OpError::new("tls", "no CA file for the TLS modes")),
            (_, false) => converse(tcp, self.scram.as_ref()).await,
        }?;
        Ok(0)
    }
}

/// OP_MSG commands on one stream, one at a time.
struct Wire<S> {
    stream: S,
    next_request_id: i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Wire<S> {
    /// Sends `body` (with its `$db`) and returns the reply; `ok: 0` is an error.
    async fn command(&mut self, body: Document, name: &str) -> Result<Document, OpError> {
        let io_error =
            |error: std::io::Error| OpError::new(format!("{name} i/o"), error.to_string());
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let message = encode_op_msg(request_id, &body)
            .map_err(|error| OpError::new("encode", error.to_string()))?;
        self.stream.write_all(&message).await.map_err(io_error)?;
        let mut header = [0u8; 16];
        self.stream
            .read_exact(&mut header)
            .await
            .map_err(io_error)?;
        let length = usize::try_from(i32_at(&header, 0)).unwrap_or(0);
        if !(21..=MAX_MESSAGE_BYTES).contains(&length) {
            return Err(OpError::new(
                format!("{name} reply"),
                format!("message length {length}"),
            ));
        }
        let mut rest = vec![0u8; length - 16];
        self.stream.read_exact(&mut rest).await.map_err(io_error)?;
        let reply = decode_op_msg(&header, &rest, request_id)
            .map_err(|message| OpError::new(format!("{name} reply"), message))?;
        let ok = match reply.get("ok") {
            Some(Bson::Double(ok)) => *ok == 1.0,
            Some(Bson::Int32(ok)) => *ok == 1,
            Some(Bson::Int64(ok)) => *ok == 1,
            _ => false,
        };
        if ok {
            Ok(reply)
        } else {
            Err(OpError::new(
                format!(
                    "{name}: command error {} {}",
                    reply.get_i32("code").unwrap_or(0),
                    reply.get_str("codeName").unwrap_or("")
                ),
                reply.get_str("errmsg").unwrap_or("").to_string(),
            ))
        }
    }
}

/// An OP_MSG with one kind-0 section holding `body`, no flags.
fn encode_op_msg(request_id: i32, body: &Document) -> Result<Vec<u8>, bson::ser::Error> {
    let mut message = vec![0u8; 16];
    message.extend_from_slice(&0u32.to_le_bytes());
    message.push(0);
    body.to_writer(&mut message)?;
    let length = i32::try_from(message.len()).unwrap_or(i32::MAX);
    message[0..4].copy_from_slice(&length.to_le_bytes());
    message[4..8].copy_from_slice(&request_id.to_le_bytes());
    message[12..16].copy_from_slice(&OP_MSG.to_le_bytes());
    Ok(message)
}

/// The body of an OP_MSG reply to `request_id` (`rest`: everything after the 16-byte header).
fn decode_op_msg(header: &[u8; 16], rest: &[u8], request_id: i32) -> Result<Document, String> {
    if i32_at(header, 12) != OP_MSG {
        return Err(format!("opCode {} instead of OP_MSG", i32_at(header, 12)));
    }
    if i32_at(header, 8) != request_id {
        return Err(format!(
            "responseTo {} instead of {request_id}",
            i32_at(header, 8)
        ));
    }
    // flagBits (4 bytes), then the first section, which must be the body (kind 0).
    match rest.get(4) {
        Some(0) => Document::from_reader(&rest[5..]).map_err(|error| error.to_string()),
        other => Err(format!("first section of kind {other:?}, not a body")),
    }
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    i32::from_le_bytes(word)
}

fn binary(text: &str) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: text.as_bytes().to_vec(),
    })
}

/// A SASL reply's payload as text (binary, or the base64 string some servers answer with
/// when the request's payload was a string; ours is binary).
fn payload_text(reply: &Document, step: &str) -> Result<String, OpError> {
    let bytes = match reply.get("payload") {
        Some(Bson::Binary(binary)) => binary.bytes.clone(),
        _ => {
            return Err(OpError::new(
                "authentication",
                format!("{step} reply without a binary payload"),
            ))
        }
    };
    String::from_utf8(bytes)
        .map_err(|_| OpError::new("authentication", format!("{step} payload is not UTF-8")))
}

/// The handshake metadata drivers send in their first `hello` (Handshake spec).
fn client_metadata() -> Document {
    doc! {
        "application": {"name": "tideway-bench"},
        "driver": {"name": "tideway-bench-raw", "version": env!("CARGO_PKG_VERSION")},
        "os": {"type": std::env::consts::OS, "architecture": std::env::consts::ARCH},
    }
}

/// Everything after the transport is up: hello (+ SCRAM), ping, close.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    scram: Option<&Scram>,
) -> Result<(), OpError> {
    let mut wire = Wire {
        stream,
        next_request_id: 1,
    };
    let first = scram.map(|scram| (scram, scram.client_first(&scram::new_nonce())));
    let sasl_start = |scram: &Scram, message: &str| {
        doc! {
            "saslStart": 1,
            "mechanism": scram.mechanism().name(),
            "payload": binary(message),
            "options": {"skipEmptyExchange": true},
        }
    };
    let mut hello = doc! {
        "hello": 1,
        "helloOk": true,
        "client": client_metadata(),
        "compression": [],
    };
    if let Some((scram, first)) = &first {
        let mut speculative = sasl_start(scram, &first.message);
        speculative.insert("db", "admin");
        hello.insert("speculativeAuthenticate", speculative);
    }
    hello.insert("$db", "admin");
    let reply = wire.command(hello, "hello").await?;

    if let Some((scram, first)) = first {
        // A server that did not take the speculative start gets an ordinary one (Auth spec).
        let started = match reply.get_document("speculativeAuthenticate") {
            Ok(started) => started.clone(),
            Err(_) => {
                let mut start = sasl_start(scram, &first.message);
                start.insert("$db", "admin");
                wire.command(start, "saslStart").await?
            }
        };
        let conversation_id = started
            .get("conversationId")
            .cloned()
            .unwrap_or(Bson::Int32(1));
        let last = scram
            .client_final(&first, &payload_text(&started, "saslStart")?)
            .map_err(|message| OpError::new("authentication", message))?;
        let continued = wire
            .command(
                doc! {
                    "saslContinue": 1,
                    "conversationId": conversation_id.clone(),
                    "payload": binary(&last.message),
                    "$db": "admin",
                },
                "saslContinue",
            )
            .await?;
        last.verify(&payload_text(&continued, "saslContinue")?)
            .map_err(|message| OpError::new("authentication", message))?;
        if !continued.get_bool("done").unwrap_or(false) {
            let finished = wire
                .command(
                    doc! {
                        "saslContinue": 1,
                        "conversationId": conversation_id,
                        "payload": binary(""),
                        "$db": "admin",
                    },
                    "saslContinue",
                )
                .await?;
            if !finished.get_bool("done").unwrap_or(false) {
                return Err(OpError::new(
                    "authentication",
                    "conversation not done after the empty exchange",
                ));
            }
        }
    }

    wire.command(doc! {"ping": 1, "$db": "admin"}, "ping")
        .await?;
    wire.stream
        .shutdown()
        .await
        .map_err(|error| OpError::new("close", error.to_string()))
}

/// TLS clients trusting only the certificates in `ca_file`: one never resuming sessions, one
/// resuming them (rustls' default in-memory session cache, shared by its connections).
fn tls_connectors(ca_file: &Path) -> Result<(TlsConnector, TlsConnector), String> {
    let shown = ca_file.display();
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(ca_file)
        .map_err(|error| format!("{shown}: {error}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{shown}: {error}"))?;
    let (added, _) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(format!("{shown}: no CA certificate in it"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resuming = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut full = resuming.clone();
    full.resumption = rustls::client::Resumption::disabled();
    Ok((
        TlsConnector::from(Arc::new(full)),
        TlsConnector::from(Arc::new(resuming)),
    ))
}

fn endpoint(target: &Target, ca_file: Option<&Path>) -> Result<Endpoint, String> {
    let Some((host, port)) = target.tcp_address() else {
        return Err(format!(
            "{}: the connect workload needs a host:port URI",
            target.label
        ));
    };
    let server_name = ServerName::try_from(host.to_string())
        .map_err(|error| format!("{}: host {host}: {error}", target.label))?;
    let ca_file = ca_file.or(target.tls_ca_file());
    let tls = ca_file.map(tls_connectors).transpose()?;
    Ok(Endpoint {
        address: format!("{host}:{port}"),
        server_name,
        tls,
    })
}

/// (Re)creates [`BENCH_USER`] in `admin` with both SCRAM mechanisms.
async fn ensure_user(target: &Target) -> Result<(), String> {
    let admin = target.admin();
    // Absent the first time (UserNotFound): nothing to do then.
    let _ = admin.run_command(doc! {"dropUser": BENCH_USER}).await;
    admin
        .run_command(doc! {
            "createUser": BENCH_USER,
            "pwd": BENCH_PASSWORD,
            "roles": [],
            "mechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        })
        .await
        .map(|_| ())
        .map_err(|error| format!("createUser {BENCH_USER} on {}: {error}", target.label))
}

/// One timed run's result.
struct ConnectRun {
    target: usize,
    mode: ConnectMode,
    clients: usize,
    stats: RunStats,
}

/// Every (mode, clients) against each server, interleaved round after round; a table per run,
/// then a summary with the median of the rounds and their spread, relative to `plain`.
pub async fn run(
    targets: &[Target],
    connect: &ConnectSettings,
    settings: &Settings,
    problems: &mut Vec<String>,
) {
    let output = settings.output;
    output.text(&format!(
        "connect: one operation = a new TCP connection, a full TLS handshake (TLS modes), hello \
         (with speculative saslStart for SCRAM), saslContinue (SCRAM), ping, close; timed by \
         the runner: {}",
        settings.describe_timing()
    ));
    let mut endpoints = Vec::with_capacity(targets.len());
    for target in targets {
        let wanted_tls = connect.modes.iter().any(|mode| mode.tls());
        let ready = match endpoint(target, connect.ca_file.as_deref()) {
            Ok(endpoint) if wanted_tls && endpoint.tls.is_none() => {
                problems.push(format!(
                    "{}: the TLS connect modes need --tls-ca-file or tlsCAFile= in the URI; \
                     they were skipped",
                    target.label
                ));
                Some(endpoint)
            }
            Ok(endpoint) => Some(endpoint),
            Err(message) => {
                problems.push(message);
                None
            }
        };
        let scram_ready = if connect.modes.iter().any(|mode| mode.mechanism().is_some()) {
            match ensure_user(target).await {
                Ok(()) => true,
                Err(message) => {
                    problems.push(format!("{message}; SCRAM modes skipped"));
                    false
                }
            }
        } else {
            false
        };
        endpoints.push(ready.map(|endpoint| (Arc::new(endpoint), scram_ready)));
    }

    let label_width = target::label_width(targets);
    let table = Table::new(vec![
        Column::text("server", label_width),
        Column::text("mode", 17),
        Column::number("clients", 7),
        Column::number("round", 5),
        Column::number("secs", 5),
        Column::number("conn/s", 8),
        Column::number("p50_us", 8),
        Column::number("p99_us", 8),
        Column::number("p99.9_us", 8),
        Column::number("max_us", 8),
        Column::number("errors", 6),
    ]);
    let mut runs = Vec::new();
    let mut header_printed = false;
    for round in 0..settings.rounds {
        for &mode in &connect.modes {
            for &clients in &settings.clients {
                for (index, target) in targets.iter().enumerate() {
                    let Some((endpoint, scram_ready)) = &endpoints[index] else {
                        continue;
                    };
                    if (mode.tls() && endpoint.tls.is_none())
                        || (mode.mechanism().is_some() && !scram_ready)
                    {
                        continue;
                    }
                    let scram = match mode.mechanism() {
                        Some(mechanism) => {
                            match Scram::new(mechanism, BENCH_USER, BENCH_PASSWORD) {
                                Ok(scram) => Some(scram),
                                Err(message) => {
                                    problems.push(message);
                                    continue;
                                }
                            }
                        }
                        None => None,
                    };
                    eprintln!(
                        "running connect {} clients={clients} round={} on {}",
                        mode.name(),
                        round + 1,
                        target.label
                    );
                    let config = settings.run_config(clients, round);
                    let stats = runner::run_ops(config, |_rng| SetupOp {
                        endpoint: endpoint.clone(),
                        mode,
                        scram: scram.clone(),
                    })
                    .await;
                    if !header_printed {
                        output.text(&table.header());
                        header_printed = true;
                    }
                    let figures = Figures::of(&stats);
                    output.text(&table.row(&[
                        target.label.clone(),
                        mode.name().to_string(),
                        clients.to_string(),
                        (round + 1).to_string(),
                        format!("{:.1}", figures.seconds),
                        thousands(figures.ops_per_sec),
                        figures.p50_us.to_string(),
                        figures.p99_us.to_string(),
                        figures.p999_us.to_string(),
                        figures.max_us.to_string(),
                        figures.errors.to_string(),
                    ]));
                    let mut record = doc! {
                        "type": "connect",
                        "server": &target.label,
                        "uri": &target.display_uri,
                        "mode": mode.name(),
                        "clients": clients as i64,
                        "round": (round + 1) as i64,
                        "duration_secs": settings.duration.as_secs_f64(),
                        "warmup_secs": settings.warmup.as_secs_f64(),
                    };
                    figures.append_to(&mut record);
                    output.json(record);
                    print_errors(
                        &format!("{} connect {} clients={clients}", target.label, mode.name()),
                        &stats,
                    );
                    // Failures are counted, as in every workload; a mode in which no connection
                    // at all succeeded measured nothing, and fails the run (the CI smoke).
                    if stats.ops == 0 {
                        problems.push(format!(
                            "{}: no connection in mode {} (clients={clients}) succeeded",
                            target.label,
                            mode.name()
                        ));
                    }
                    runs.push(ConnectRun {
                        target: index,
                        mode,
                        clients,
                        stats,
                    });
                }
            }
        }
    }
    print_summary(targets, &runs, settings);
}

/// The median of `values` (the mean of the middle two for an even count), 0 for none.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn print_summary(targets: &[Target], runs: &[ConnectRun], settings: &Settings) {
    let output = settings.output;
    let table = Table::new(vec![
        Column::text("server", target::label_width(targets)),
        Column::text("mode", 17),
        Column::number("clients", 7),
        Column::number("runs", 4),
        Column::number("conn/s_med", 10),
        Column::number("conn/s_min", 10),
        Column::number("conn/s_max", 10),
        Column::number("p50_us", 8),
        Column::number("p99_us", 8),
        Column::number("errors", 6),
        Column::number("conn/s÷plain", 12),
        Column::number("p50÷plain", 9),
    ]);
    output.text("");
    output.text(
        "connect summary: conn/s = median of the rounds (min and max beside it); percentiles \
         over all rounds' connections; ratios to the plain mode at the same clients and server",
    );
    output.text(&table.header());
    for (index, target) in targets.iter().enumerate() {
        for &clients in &settings.clients {
            let mut plain: Option<(f64, u64)> = None;
            for mode in ConnectMode::ALL {
                let of_mode: Vec<&RunStats> = runs
                    .iter()
                    .filter(|run| run.target == index && run.mode == mode && run.clients == clients)
                    .map(|run| &run.stats)
                    .collect();
                if of_mode.is_empty() {
                    continue;
                }
                let mut rates: Vec<f64> = of_mode.iter().map(|stats| stats.ops_per_sec()).collect();
                let rate = median(&mut rates);
                let merged = Figures::of(&RunStats::merged(of_mode.iter().copied()));
                if mode == ConnectMode::Plain {
                    plain = Some((rate, merged.p50_us));
                }
                let (rate_ratio, p50_ratio) = match plain {
                    Some((plain_rate, plain_p50)) => (
                        ratio(rate, plain_rate),
                        ratio(merged.p50_us as f64, plain_p50 as f64),
                    ),
                    None => ("-".to_string(), "-".to_string()),
                };
                output.text(&table.row(&[
                    target.label.clone(),
                    mode.name().to_string(),
                    clients.to_string(),
                    of_mode.len().to_string(),
                    thousands(rate),
                    thousands(rates[0]),
                    thousands(rates[rates.len() - 1]),
                    merged.p50_us.to_string(),
                    merged.p99_us.to_string(),
                    merged.errors.to_string(),
                    rate_ratio,
                    p50_ratio,
                ]));
                output.json(doc! {
                    "type": "connect_summary",
                    "server": &target.label,
                    "mode": mode.name(),
                    "clients": clients as i64,
                    "runs": of_mode.len() as i64,
                    "conn_per_sec_median": (rate * 1000.0).round() / 1000.0,
                    "conn_per_sec_min": (rates[0] * 1000.0).round() / 1000.0,
                    "conn_per_sec_max": (rates[rates.len() - 1] * 1000.0).round() / 1000.0,
                    "p50_us": merged.p50_us as i64,
                    "p99_us": merged.p99_us as i64,
                    "errors": merged.errors as i64,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_msg_round_trips_through_the_framing() {
        let body = doc! {"ping": 1, "$db": "admin"};
        let message = encode_op_msg(7, &body).unwrap();
        assert_eq!(i32_at(&message, 0) as usize, message.len());
        assert_eq!(i32_at(&message, 4), 7);
        assert_eq!(i32_at(&message, 12), OP_MSG);
        // A reply is the same framing with responseTo set to the request's id.
        let mut header = [0u8; 16];
        header.copy_from_slice(&message[..16]);
        header[8..12].copy_from_slice(&7i32.to_le_bytes());
        assert_eq!(decode_op_msg(&header, &message[16..], 7).unwrap(), body);
        assert!(decode_op_msg(&header, &message[16..], 8).is_err());
        let mut sequence = message[16..].to_vec();
        sequence[4] = 1;
        assert!(decode_op_msg(&header, &sequence, 7).is_err());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
