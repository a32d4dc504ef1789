//! tideway-bench: throughput and latency of a MongoDB wire-protocol server (tideway, mongod…)
//! through the official Rust driver.
//!
//! Timed workloads (`insert_one`, `find_id`, `read_update`, `insert_many`) run N concurrent
//! client tasks for a fixed time and report ops/s and p50/p99/p99.9 latency; with several
//! `--uri`s every (workload, clients) combination runs against each server in turn, round after
//! round, so that machine noise hits all of them alike. `--latency-vs-size` measures
//! find-by-`_id` latency as one collection grows (10k → 100k → 1M documents by default).
//! `ttl_churn` loads documents that expire together and measures the reaper (visible count
//! after expiry, time to delete them all, deletions/s) and its effect on foreground clients.
//! `--crash-loop` starts a server binary itself, SIGKILLs it mid-write cycle after cycle and
//! checks after every restart that no acknowledged write was lost (`crashloop.rs`);
//! `--node-kill` does the same with three nodes on one PostgreSQL database, killing one of them
//! mid-run, and checks the reaper lease and the one clock for expiry too (`nodekill.rs`).
//! The query planner workloads (`find_id_events`, `range_10`, `newest_5`, `or_2`; `events.rs`)
//! and `insert_indexed` are timed like the others and also reported relative to their baseline
//! (`relative.rs`); `--index-build` times building one index on a loaded collection
//! (`index_build.rs`); `--auth-flood` measures a correct client's login and command latencies
//! during a flood of failed logins (`auth_flood.rs`). The transfer workloads (`txn2`, `txn2_hot` and their baselines
//! `two_writes`, `two_writes_hot`; `accounts.rs`) time a 2-statement transaction against the
//! same two writes without one, and report the transactions' retries as a conflict rate.
//! `connect` (`connect.rs`) times connection setup over raw sockets — plain, SCRAM-SHA-256,
//! SCRAM-SHA-1, TLS, TLS + SCRAM-SHA-256, resumed TLS — and `--make-test-pki` writes a test CA and server
//! certificate (`pki.rs`) for a TLS server to benchmark.
//! See the "Benchmarking" section of the repository README.

mod accounts;
mod auth_flood;
mod churn;
mod connect;
mod crashloop;
mod dataset;
mod events;
mod index_build;
mod nodekill;
mod pki;
mod relative;
mod report;
mod rng;
mod runner;
mod scaling;
mod scram;
mod target;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bson::doc;
use clap::{Parser, ValueEnum};

use crate::report::{print_errors, thousands, Column, Figures, Output, Table};
use crate::runner::{RunConfig, RunStats};
use crate::target::Target;
use crate::workload::{OpParams, Setup, Workload};

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "tideway-bench",
    version,
    about = "Throughput and latency benchmark for MongoDB wire-protocol servers (official Rust driver)",
    after_help = "Example: tideway-bench --uri tideway=mongodb://127.0.0.1:27017 \
                  --uri mongod=mongodb://127.0.0.1:27018 --workload all --clients 1,8 --rounds 3"
)]
struct Cli {
    /// Server to measure, optionally named: `[NAME=]mongodb://host:port/?options`. Repeat to
    /// compare servers in one interleaved run. URI options such as `w=1&journal=true` apply.
    #[arg(
        long = "uri",
        value_name = "[NAME=]URI",
        default_value = "mongodb://127.0.0.1:27017"
    )]
    uris: Vec<String>,

    /// Workloads to run, comma-separated: insert_one, find_id, read_update, insert_many, all
    /// (the four), find_id_scaling (same as --latency-vs-size), ttl_churn (documents expiring
    /// together under foreground load; not part of all); query planner workloads on the indexed
    /// events collection (not part of all): find_id_events, range_10, newest_5, or_2, planner
    /// (those four), and insert_indexed (insert_one with three secondary indexes);
    /// insert_default_ttl (insert_one under a Cosmos default TTL; not part of all); transfer
    /// workloads (replica-set servers; not part of all): two_writes, txn2 (the same two writes in
    /// one transaction), two_writes_hot, txn2_hot (10 accounts instead of 10,000), txn (the four);
    /// connect (connection setup rate, one new connection per operation, in each
    /// --connect-modes; not part of all).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    workload: Vec<WorkloadChoice>,

    /// Concurrent client tasks, comma-separated to run each: `1,8`. Default 8 for the timed
    /// workloads, `1,8` for --latency-vs-size.
    #[arg(long, value_delimiter = ',')]
    clients: Vec<usize>,

    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    duration_secs: f64,

    /// Seconds of unmeasured load before each measured period.
    #[arg(long, default_value_t = 2.0)]
    warmup_secs: f64,

    /// Documents preloaded (integer `_id` 0..N) for find_id and read_update, in events for the
    /// planner workloads, and in the collection --index-build indexes.
    #[arg(long, default_value_t = 100_000)]
    docs: u64,

    /// Approximate BSON size of each document written.
    #[arg(long, default_value_t = 200)]
    doc_bytes: usize,

    /// Documents per insert_many call.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,

    /// Database that holds the benchmark collections (it is written to and dropped from).
    #[arg(long, default_value = "tideway_bench")]
    db: String,

    /// Times to repeat every (workload, clients, server) run; results are also merged.
    #[arg(long, default_value_t = 1)]
    rounds: usize,

    /// Drop and reload the preloaded (or events, or index_build) collection even if it already
    /// has --docs documents.
    #[arg(long)]
    reload: bool,

    /// Measure find-by-_id latency while one collection grows through --sizes.
    #[arg(long)]
    latency_vs_size: bool,

    /// Collection sizes for --latency-vs-size, ascending, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    sizes: Vec<u64>,

    /// Print results as JSON lines on stdout (the tables then go to stderr).
    #[arg(long)]
    json: bool,

    /// Seed of the random `_id` choice and payloads (round r uses seed + r).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// An operation with no reply after this many seconds counts as an error.
    #[arg(long, default_value_t = 30.0)]
    op_timeout_secs: f64,

    /// Worker threads of the benchmark's own async runtime (default: one per CPU). On a small
    /// machine shared with the server, fewer threads leave more CPU to the server.
    #[arg(long)]
    threads: Option<usize>,

    /// Allow servers that are not on this machine (by default only loopback hosts).
    #[arg(long)]
    allow_remote: bool,

    /// ttl_churn: documents loaded with one common expiry date.
    #[arg(long, default_value_t = 300_000)]
    churn_docs: u64,

    /// ttl_churn: seconds from the start of loading to the expiry (must leave time to load
    /// and to measure the foreground before expiry).
    #[arg(long, default_value_t = 30.0)]
    expire_in_secs: f64,

    /// ttl_churn: seconds of foreground measured after all documents are deleted.
    #[arg(long, default_value_t = 3.0)]
    after_secs: f64,

    /// ttl_churn: milliseconds between serverStatus polls of metrics.ttl.deletedDocuments.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,

    /// ttl_churn: poll the whole serverStatus, including its per-collection ttl section
    /// (tideway's expiredPending and oldestExpiredAgeMillis); by default polls send `ttl: 0`.
    #[arg(long)]
    poll_ttl_section: bool,

    /// Failed-login flood mode instead of the workloads: a correct client's login and
    /// find_one latencies without, then with, --attackers tasks failing SCRAM logins back to
    /// back (--duration-secs each; creates the user tideway_bench_flood in admin).
    #[arg(long)]
    auth_flood: bool,

    /// --auth-flood: tasks failing logins concurrently during the flood phase.
    #[arg(long, default_value_t = 16)]
    attackers: usize,

    /// Index build mode instead of the workloads: load --docs small documents without secondary
    /// indexes, then time createIndexes of {a: 1} (--rounds times).
    #[arg(long)]
    index_build: bool,

    /// Crash-loop mode instead of the workloads (--uri and --workload are not used): start
    /// --server-bin, write from --writers tasks, SIGKILL it mid-write, restart it and check
    /// that no acknowledged write was lost; --cycles times, then a final check. Exits 1 if
    /// anything was lost.
    #[arg(long)]
    crash_loop: bool,

    /// Node-kill mode instead of the workloads (issue 27): three nodes of --server-bin on the
    /// PostgreSQL database --pg-uri, --writers tasks and a TTL writer through all three, SIGKILL
    /// of one mid-run; checks that no acknowledged write is lost, that the reaper lease moves
    /// and that expiry follows the database's clock (nodekill.rs). Exits 1 on a failed check.
    #[arg(long)]
    node_kill: bool,

    /// --node-kill: the database the nodes share (it is the nodes' --pgUri).
    #[arg(long, value_name = "URI")]
    pg_uri: Option<String>,

    /// --node-kill: writing time in all, in seconds; the kill comes halfway.
    #[arg(long, default_value_t = 8.0)]
    node_kill_secs: f64,

    /// --crash-loop: the server binary, started as `BIN --port P --dbpath DIR`.
    #[arg(long, value_name = "BIN")]
    server_bin: Option<PathBuf>,

    /// --crash-loop: extra server arguments, whitespace-separated (e.g. "--syncdelay-ms 100").
    #[arg(
        long,
        value_name = "ARGS",
        allow_hyphen_values = true,
        default_value = ""
    )]
    server_args: String,

    /// --crash-loop: kill-and-restart cycles.
    #[arg(long, default_value_t = 50)]
    cycles: u32,

    /// --crash-loop: the server's data directory, kept across cycles (its crashloop
    /// collection is dropped first). Default: a new directory in the temp directory, removed
    /// after a passing run.
    #[arg(long, value_name = "DIR")]
    dbpath: Option<PathBuf>,

    /// --crash-loop: concurrent writer tasks.
    #[arg(long, default_value_t = 8)]
    writers: u32,

    /// --crash-loop: shortest writing time before the kill, in milliseconds.
    #[arg(long, default_value_t = 200)]
    run_ms_min: u64,

    /// --crash-loop: longest writing time before the kill (each cycle draws uniformly).
    #[arg(long, default_value_t = 1500)]
    run_ms_max: u64,

    /// connect: how each new connection is set up, comma-separated: plain, scram_sha_256,
    /// scram_sha_1, tls (full handshake), tls_scram_sha_256, tls_resumed (TLS session
    /// resumption). The TLS modes need a server that accepts TLS (allowTLS or preferTLS serve
    /// every mode on one port) and a CA file.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "plain,scram_sha_256,scram_sha_1,tls,tls_scram_sha_256,tls_resumed"
    )]
    connect_modes: Vec<connect::ConnectMode>,

    /// connect: CA file of the server's certificate for the TLS modes (default: the URI's
    /// tlsCAFile).
    #[arg(long, value_name = "PEM")]
    tls_ca_file: Option<PathBuf>,

    /// Write a test CA (DIR/ca.pem) and a server certificate for localhost and 127.0.0.1
    /// (DIR/server.pem, certificate and key) for a TLS server, print how to use them, and exit.
    #[arg(long, value_name = "DIR")]
    make_test_pki: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum WorkloadChoice {
    InsertOne,
    FindId,
    ReadUpdate,
    InsertMany,
    All,
    FindIdScaling,
    TtlChurn,
    FindIdEvents,
    #[value(name = "range_10")]
    Range10,
    #[value(name = "newest_5")]
    Newest5,
    #[value(name = "or_2")]
    Or2,
    Planner,
    InsertIndexed,
    InsertDefaultTtl,
    TwoWrites,
    TwoWritesHot,
    #[value(name = "txn2")]
    Txn2,
    #[value(name = "txn2_hot")]
    Txn2Hot,
    Txn,
    Connect,
}

/// Settings shared by every run, checked and converted from the command line.
pub struct Settings {
    pub clients: Vec<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    pub op_timeout: Duration,
    pub doc_bytes: usize,
    pub batch_size: usize,
    pub rounds: usize,
    pub reload: bool,
    pub seed: u64,
    pub output: Output,
}

impl Settings {
    /// Timing for round `round` (0-based) with `clients` tasks.
    pub fn run_config(&self, clients: usize, round: usize) -> RunConfig {
        RunConfig {
            clients,
            warmup: self.warmup,
            duration: self.duration,
            op_timeout: self.op_timeout,
            seed: self.seed.wrapping_add(round as u64),
        }
    }

    pub fn describe_timing(&self) -> String {
        format!(
            "ops/s = successful operations started in the {} s after a {} s warmup, divided by \
             the measured seconds; latency per operation in microseconds",
            self.duration.as_secs_f64(),
            self.warmup.as_secs_f64()
        )
    }
}

fn seconds(name: &str, value: f64, allow_zero: bool) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(value) {
        Ok(duration) if allow_zero || !duration.is_zero() => Ok(duration),
        _ => Err(format!(
            "--{name} must be a {}number of seconds",
            if allow_zero { "" } else { "positive " }
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = cli.threads {
        builder.worker_threads(threads.max(1));
    }
    let outcome = match builder.build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => Err(format!("cannot start the async runtime: {error}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tideway-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    if let Some(dir) = &cli.make_test_pki {
        return make_test_pki(dir);
    }
    if cli.node_kill {
        return run_node_kill(cli).await;
    }
    if cli.crash_loop {
        return run_crash_loop(cli).await;
    }
    if cli.index_build {
        return run_index_build(cli).await;
    }
    if cli.auth_flood {
        return run_auth_flood(cli).await;
    }
    let mut timed = BTreeSet::new();
    let mut scaling = cli.latency_vs_size;
    let mut churn = false;
    let mut connect = false;
    for choice in &cli.workload {
        let chosen: &[Workload] = match choice {
            WorkloadChoice::InsertOne => &[Workload::InsertOne],
            WorkloadChoice::FindId => &[Workload::FindId],
            WorkloadChoice::ReadUpdate => &[Workload::ReadUpdate],
            WorkloadChoice::InsertMany => &[Workload::InsertMany],
            WorkloadChoice::All => &Workload::ALL,
            WorkloadChoice::FindIdScaling => {
                scaling = true;
                &[]
            }
            WorkloadChoice::TtlChurn => {
                churn = true;
                &[]
            }
            WorkloadChoice::FindIdEvents => &[Workload::FindIdEvents],
            WorkloadChoice::Range10 => &[Workload::Range10],
            WorkloadChoice::Newest5 => &[Workload::Newest5],
            WorkloadChoice::Or2 => &[Workload::Or2],
            WorkloadChoice::Planner => &Workload::PLANNER,
            WorkloadChoice::InsertIndexed => &[Workload::InsertIndexed],
            WorkloadChoice::InsertDefaultTtl => &[Workload::InsertDefaultTtl],
            WorkloadChoice::TwoWrites => &[Workload::TwoWrites],
            WorkloadChoice::TwoWritesHot => &[Workload::TwoWritesHot],
            WorkloadChoice::Txn2 => &[Workload::Txn2],
            WorkloadChoice::Txn2Hot => &[Workload::Txn2Hot],
            WorkloadChoice::Txn => &Workload::TXN,
            WorkloadChoice::Connect => {
                connect = true;
                &[]
            }
        };
        timed.extend(chosen);
    }
    // `--latency-vs-size` alone means only that, not also the default `all`.
    if cli.latency_vs_size && cli.workload == [WorkloadChoice::All] {
        timed.clear();
    }
    let timed: Vec<Workload> = timed.into_iter().collect();

    let clients = if !cli.clients.is_empty() {
        cli.clients.clone()
    } else if timed.is_empty() && !churn {
        vec![1, 8]
    } else {
        vec![8]
    };
    if clients.contains(&0) {
        return Err("--clients must be at least 1".into());
    }
    if cli.rounds == 0 || cli.batch_size == 0 {
        return Err("--rounds and --batch-size must be at least 1".into());
    }
    if (churn || timed.iter().any(|workload| workload.reads_preloaded())) && cli.docs == 0 {
        return Err(
            "--docs must be at least 1 for find_id, read_update, ttl_churn and the planner \
             workloads"
                .into(),
        );
    }
    let churn_settings = churn::ChurnSettings {
        docs: cli.churn_docs,
        expire_in: seconds("expire-in-secs", cli.expire_in_secs, false)?,
        after: seconds("after-secs", cli.after_secs, true)?,
        poll: Duration::from_millis(cli.poll_ms),
        poll_ttl_section: cli.poll_ttl_section,
        preloaded_docs: cli.docs,
    };
    if churn && (cli.churn_docs == 0 || cli.poll_ms == 0) {
        return Err("--churn-docs and --poll-ms must be at least 1".into());
    }
    if scaling
        && (cli.sizes.is_empty() || cli.sizes.contains(&0) || !cli.sizes.is_sorted_by(|a, b| a < b))
    {
        return Err("--sizes must be positive and strictly ascending".into());
    }
    let settings = Settings {
        clients,
        warmup: seconds("warmup-secs", cli.warmup_secs, true)?,
        duration: seconds("duration-secs", cli.duration_secs, false)?,
        op_timeout: seconds("op-timeout-secs", cli.op_timeout_secs, false)?,
        doc_bytes: cli.doc_bytes,
        batch_size: cli.batch_size,
        rounds: cli.rounds,
        reload: cli.reload,
        seed: cli.seed,
        output: Output { json: cli.json },
    };

    let max_clients = settings.clients.iter().copied().max().unwrap_or(1);
    // Room for the loaders, and for ttl_churn's serverStatus poller and count checks.
    let pool_size = u32::try_from(max_clients + dataset::LOADERS + 4).unwrap_or(u32::MAX);
    let mut targets = Vec::with_capacity(cli.uris.len());
    for (index, spec) in cli.uris.iter().enumerate() {
        targets.push(target::connect(spec, index, pool_size, &cli.db, cli.allow_remote).await?);
    }

    let output = settings.output;
    print_banner(output);
    for target in &targets {
        output.text(&format!("server {} = {}", target.label, target.display_uri));
    }
    if !timed.is_empty() || scaling {
        output.text(&format!(
            "each run: {}; documents ~{} B; client tasks share one driver Client per server; \
             {} round(s), servers interleaved",
            settings.describe_timing(),
            settings.doc_bytes,
            settings.rounds
        ));
    }

    let mut problems = Vec::new();
    if !timed.is_empty() {
        let measurements = run_timed(&targets, &timed, &cli, &settings, &mut problems).await;
        if targets.len() > 1 || settings.rounds > 1 {
            print_comparison(&targets, &measurements, &settings);
        }
        relative::print(&targets, &measurements, &settings, cli.docs);
    }
    if scaling {
        scaling::run(&targets, &cli.sizes, &settings, &mut problems).await;
    }
    if churn {
        churn::run(&targets, churn_settings, &settings, &mut problems).await;
    }
    if connect {
        let connect_settings = connect::ConnectSettings {
            modes: cli.connect_modes.clone(),
            ca_file: cli.tls_ca_file.clone(),
        };
        connect::run(&targets, &connect_settings, &settings, &mut problems).await;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// `--make-test-pki DIR`: writes the files and says how to use them.
fn make_test_pki(dir: &std::path::Path) -> Result<(), String> {
    let files = pki::generate(dir)?;
    println!(
        "wrote {} and {}",
        files.ca.display(),
        files.server.display()
    );
    println!(
        "server: tideway --tlsMode preferTLS --tlsCertificateKeyFile {}",
        files.server.display()
    );
    println!(
        "bench:  tideway-bench --uri 'mongodb://127.0.0.1:27017/?tls=true&tlsCAFile={}'",
        files.ca.display()
    );
    println!(
        "        tideway-bench --workload connect --tls-ca-file {}",
        files.ca.display()
    );
    Ok(())
}

/// The first line of every report: versions and runtime threads.
fn print_banner(output: Output) {
    output.text(&format!(
        "tideway-bench {} (mongodb driver 3.9, {} tokio worker threads)",
        env!("CARGO_PKG_VERSION"),
        tokio::runtime::Handle::current().metrics().num_workers()
    ));
}

async fn run_auth_flood(cli: Cli) -> Result<(), String> {
    if cli.attackers == 0 || !cli.duration_secs.is_finite() || cli.duration_secs <= 0.0 {
        return Err("--auth-flood needs --attackers and --duration-secs above 0".into());
    }
    let output = Output { json: cli.json };
    let mut targets = Vec::with_capacity(cli.uris.len());
    for (index, spec) in cli.uris.iter().enumerate() {
        targets.push(target::connect(spec, index, 4, &cli.db, cli.allow_remote).await?);
    }
    print_banner(output);
    for target in &targets {
        output.text(&format!("server {} = {}", target.label, target.display_uri));
    }
    let settings = auth_flood::AuthFloodSettings {
        duration: Duration::from_secs_f64(cli.duration_secs),
        attackers: cli.attackers,
        output,
    };
    let mut problems = Vec::new();
    auth_flood::run(&targets, settings, &mut problems).await;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

async fn run_index_build(cli: Cli) -> Result<(), String> {
    if cli.docs == 0 || cli.rounds == 0 {
        return Err("--index-build needs --docs and --rounds of at least 1".into());
    }
    let output = Output { json: cli.json };
    let pool_size = u32::try_from(dataset::LOADERS + 2).unwrap_or(u32::MAX);
    let mut targets = Vec::with_capacity(cli.uris.len());
    for (index, spec) in cli.uris.iter().enumerate() {
        targets.push(target::connect(spec, index, pool_size, &cli.db, cli.allow_remote).await?);
    }
    print_banner(output);
    for target in &targets {
        output.text(&format!("server {} = {}", target.label, target.display_uri));
    }
    let settings = index_build::IndexBuildSettings {
        docs: cli.docs,
        rounds: cli.rounds,
        reload: cli.reload,
        seed: cli.seed,
        output,
    };
    let mut problems = Vec::new();
    index_build::run(&targets, settings, &mut problems).await;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

async fn run_crash_loop(cli: Cli) -> Result<(), String> {
    let Some(server_bin) = cli.server_bin.clone() else {
        return Err("--crash-loop needs --server-bin (e.g. target/release/tideway)".into());
    };
    if cli.cycles == 0 {
        return Err("--cycles must be at least 1".into());
    }
    if cli.run_ms_min == 0 || cli.run_ms_min > cli.run_ms_max {
        return Err("--run-ms-min must be at least 1 and at most --run-ms-max".into());
    }
    let settings = crashloop::CrashLoopSettings {
        server_bin,
        server_args: server_args(&cli.server_args),
        dbpath: cli.dbpath.clone(),
        cycles: cli.cycles,
        run_ms_min: cli.run_ms_min,
        run_ms_max: cli.run_ms_max,
        writers: writers(&cli)?,
    };
    let output = Output { json: cli.json };
    print_banner(output);
    crashloop::run(settings, output).await
}

/// `--server-args`, split at whitespace.
fn server_args(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// The writers of `--crash-loop` and `--node-kill`.
fn writers(cli: &Cli) -> Result<crashloop::Writers, String> {
    if cli.writers == 0 {
        return Err("--writers must be at least 1".into());
    }
    Ok(crashloop::Writers {
        count: cli.writers,
        doc_bytes: cli.doc_bytes,
        database: cli.db.clone(),
        seed: cli.seed,
        op_timeout: seconds("op-timeout-secs", cli.op_timeout_secs, false)?,
    })
}

async fn run_node_kill(cli: Cli) -> Result<(), String> {
    let (Some(server_bin), Some(pg_uri)) = (cli.server_bin.clone(), cli.pg_uri.clone()) else {
        return Err("--node-kill needs --server-bin and --pg-uri".into());
    };
    let settings = nodekill::NodeKillSettings {
        server_bin,
        pg_uri,
        server_args: server_args(&cli.server_args),
        run: seconds("node-kill-secs", cli.node_kill_secs, false)?,
        writers: writers(&cli)?,
    };
    let output = Output { json: cli.json };
    print_banner(output);
    nodekill::run(settings, output).await
}

/// One timed run's result.
pub struct Measurement {
    target: usize,
    workload: Workload,
    clients: usize,
    stats: RunStats,
}

fn timed_table(label_width: usize) -> Table {
    Table::new(vec![
        Column::text("server", label_width),
        Column::text("workload", 14),
        Column::number("clients", 7),
        Column::number("round", 5),
        Column::number("coll_docs", 9),
        Column::number("secs", 5),
        Column::number("ops/s", 10),
        Column::number("docs/s", 10),
        Column::number("p50_us", 8),
        Column::number("p99_us", 8),
        Column::number("p99.9_us", 8),
        Column::number("max_us", 8),
        Column::number("errors", 6),
        Column::number("retries", 7),
        Column::number("conflict%", 9),
    ])
}

/// Every (workload, clients) combination against each server in turn, then all of it again for
/// each further round.
async fn run_timed(
    targets: &[Target],
    workloads: &[Workload],
    cli: &Cli,
    settings: &Settings,
    problems: &mut Vec<String>,
) -> Vec<Measurement> {
    let output = settings.output;
    let label_width = target::label_width(targets);
    let table = timed_table(label_width);
    // Per (server, loaded collection): was it made ready (absent: not yet tried)?
    let mut prepared: BTreeMap<(usize, Setup), bool> = BTreeMap::new();
    let mut measurements = Vec::new();
    let mut header_printed = false;

    // Rounds outermost: every workload (and server) runs once per round, so machine noise
    // spreads over all of them and ratios between workloads compare like with like.
    for round in 0..settings.rounds {
        for &workload in workloads {
            let setup = workload.setup();
            if workload.reads_preloaded() {
                for (index, target) in targets.iter().enumerate() {
                    if prepared.contains_key(&(index, setup)) {
                        continue;
                    }
                    eprintln!(
                        "preparing {}.{} on {} ({} docs)",
                        cli.db,
                        workload.collection(),
                        target.label,
                        cli.docs
                    );
                    let collection = target.collection(workload.collection());
                    let ready = if setup == Setup::Events {
                        events::ensure_events(
                            &collection,
                            cli.docs,
                            settings.doc_bytes,
                            settings.reload,
                            settings.seed,
                        )
                        .await
                    } else {
                        dataset::ensure_preloaded(
                            &collection,
                            cli.docs,
                            settings.doc_bytes,
                            settings.reload,
                            settings.seed,
                        )
                        .await
                    };
                    match ready {
                        Ok(false) => eprintln!("  reusing the existing {} documents", cli.docs),
                        Ok(true) => {}
                        Err(ref error) => problems.push(format!(
                            "preparing {} on {} failed, its read workloads were skipped: {}",
                            workload.collection(),
                            target.label,
                            error.message
                        )),
                    }
                    prepared.insert((index, setup), ready.is_ok());
                }
            }
            let params = OpParams {
                doc_bytes: settings.doc_bytes,
                batch_size: settings.batch_size,
                id_bound: workload.accounts().unwrap_or(cli.docs),
            };
            for &clients in &settings.clients {
                for (index, target) in targets.iter().enumerate() {
                    if workload.reads_preloaded() && prepared.get(&(index, setup)) != Some(&true) {
                        continue;
                    }
                    let collection = target.collection(workload.collection());
                    if matches!(
                        setup,
                        Setup::Dropped | Setup::DroppedIndexed | Setup::DroppedDefaultTtl
                    ) {
                        if let Err(error) = dataset::drop(&collection).await {
                            eprintln!(
                                "  could not drop {}: {}",
                                workload.collection(),
                                error.message
                            );
                        }
                    }
                    if let Some(account_count) = workload.accounts() {
                        let prepared = accounts::prepare(
                            &collection,
                            account_count,
                            settings.doc_bytes,
                            settings.reload && round == 0,
                            settings.seed,
                        )
                        .await;
                        if let Err(error) = prepared {
                            problems.push(format!(
                                "preparing {} and {} on {} failed, run skipped: {}",
                                workload.collection(),
                                accounts::TRANSFERS_COLLECTION,
                                target.label,
                                error.message
                            ));
                            continue;
                        }
                    }
                    if setup == Setup::DroppedDefaultTtl {
                        if let Err(error) = dataset::set_default_ttl(&collection).await {
                            problems.push(format!(
                                "setting the default TTL of {} on {} failed, run skipped: {}",
                                workload.collection(),
                                target.label,
                                error.message
                            ));
                            continue;
                        }
                    }
                    if setup == Setup::DroppedIndexed {
                        if let Err(error) = events::ensure_indexes(&collection).await {
                            problems.push(format!(
                                "creating the indexes of {} on {} failed, run skipped: {}",
                                workload.collection(),
                                target.label,
                                error.message
                            ));
                            continue;
                        }
                    }
                    eprintln!(
                        "running {} clients={clients} round={} on {}",
                        workload.name(),
                        round + 1,
                        target.label
                    );
                    let config = settings.run_config(clients, round);
                    let stats = runner::run(workload, &collection, params, config).await;
                    if !header_printed {
                        output.text(&table.header());
                        header_printed = true;
                    }
                    let figures = Figures::of(&stats);
                    let coll_docs = match workload.accounts() {
                        Some(account_count) => account_count.to_string(),
                        None if workload.reads_preloaded() => cli.docs.to_string(),
                        None => "-".to_string(),
                    };
                    let [retries, conflicts] = figures.retry_cells(workload.retries_transactions());
                    output.text(&table.row(&[
                        target.label.clone(),
                        workload.name().to_string(),
                        clients.to_string(),
                        (round + 1).to_string(),
                        coll_docs,
                        format!("{:.1}", figures.seconds),
                        thousands(figures.ops_per_sec),
                        docs_rate(workload, &figures),
                        figures.p50_us.to_string(),
                        figures.p99_us.to_string(),
                        figures.p999_us.to_string(),
                        figures.max_us.to_string(),
                        figures.errors.to_string(),
                        retries,
                        conflicts,
                    ]));
                    let mut record = doc! {
                        "type": "run",
                        "server": &target.label,
                        "uri": &target.display_uri,
                        "workload": workload.name(),
                        "clients": clients as i64,
                        "round": (round + 1) as i64,
                        "duration_secs": settings.duration.as_secs_f64(),
                        "warmup_secs": settings.warmup.as_secs_f64(),
                        "doc_bytes": settings.doc_bytes as i64,
                    };
                    if workload.reads_preloaded() {
                        record.insert("collection_docs", cli.docs as i64);
                    }
                    if let Some(account_count) = workload.accounts() {
                        record.insert("accounts", account_count as i64);
                    }
                    if workload == Workload::InsertMany {
                        record.insert("batch_size", settings.batch_size as i64);
                    }
                    figures.append_to(&mut record);
                    if workload.retries_transactions() {
                        figures.append_retries_to(&mut record);
                    }
                    output.json(record);
                    print_errors(
                        &format!("{} {} clients={clients}", target.label, workload.name()),
                        &stats,
                    );
                    measurements.push(Measurement {
                        target: index,
                        workload,
                        clients,
                        stats,
                    });
                }
            }
        }
    }
    measurements
}

/// docs/s for the workloads that insert, "-" for the others.
fn docs_rate(workload: Workload, figures: &Figures) -> String {
    if workload.inserts() {
        thousands(figures.docs_per_sec)
    } else {
        "-".to_string()
    }
}

/// Per (workload, clients): every server's rounds merged, with ops/s and p50 relative to the
/// first server.
fn print_comparison(targets: &[Target], measurements: &[Measurement], settings: &Settings) {
    let output = settings.output;
    let first = &targets[0].label;
    let label_width = target::label_width(targets);
    let ops_ratio_title: &'static str = if targets.len() > 1 {
        "ops/s÷first"
    } else {
        ""
    };
    let p50_ratio_title: &'static str = if targets.len() > 1 { "p50÷first" } else { "" };
    let table = Table::new(vec![
        Column::text("workload", 14),
        Column::number("clients", 7),
        Column::text("server", label_width),
        Column::number("runs", 4),
        Column::number("ops/s", 10),
        Column::number("docs/s", 10),
        Column::number("p50_us", 8),
        Column::number("p99_us", 8),
        Column::number("p99.9_us", 8),
        Column::number("errors", 6),
        Column::number("retries", 7),
        Column::number("conflict%", 9),
        Column::number(ops_ratio_title, 11),
        Column::number(p50_ratio_title, 9),
    ]);
    output.text("");
    output.text(&format!(
        "summary: rounds merged (ops/s = all counted ops / all measured seconds; percentiles over \
         all operations){}",
        if targets.len() > 1 {
            format!("; ratios relative to server {first}")
        } else {
            String::new()
        }
    ));
    output.text(&table.header());
    let mut combinations: Vec<(Workload, usize)> = measurements
        .iter()
        .map(|m| (m.workload, m.clients))
        .collect();
    combinations.dedup();
    let mut seen = BTreeSet::new();
    for (workload, clients) in combinations {
        if !seen.insert((workload, clients)) {
            continue;
        }
        let mut baseline: Option<Figures> = None;
        for (index, target) in targets.iter().enumerate() {
            let runs: Vec<&RunStats> = measurements
                .iter()
                .filter(|m| m.workload == workload && m.clients == clients && m.target == index)
                .map(|m| &m.stats)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let figures = Figures::of(&RunStats::merged(runs.iter().copied()));
            let [retries, conflicts] = figures.retry_cells(workload.retries_transactions());
            let (ops_ratio, p50_ratio) = match (&baseline, targets.len() > 1) {
                (Some(base), true) => (
                    ratio(figures.ops_per_sec, base.ops_per_sec),
                    ratio(figures.p50_us as f64, base.p50_us as f64),
                ),
                (None, true) => ("1.00".to_string(), "1.00".to_string()),
                _ => (String::new(), String::new()),
            };
            output.text(&table.row(&[
                workload.name().to_string(),
                clients.to_string(),
                target.label.clone(),
                runs.len().to_string(),
                thousands(figures.ops_per_sec),
                docs_rate(workload, &figures),
                figures.p50_us.to_string(),
                figures.p99_us.to_string(),
                figures.p999_us.to_string(),
                figures.errors.to_string(),
                retries,
                conflicts,
                ops_ratio,
                p50_ratio,
            ]));
            let mut record = doc! {
                "type": "summary",
                "server": &target.label,
                "uri": &target.display_uri,
                "workload": workload.name(),
                "clients": clients as i64,
                "runs": runs.len() as i64,
            };
            figures.append_to(&mut record);
            if workload.retries_transactions() {
                figures.append_retries_to(&mut record);
            }
            output.json(record);
            if baseline.is_none() {
                baseline = Some(figures);
            }
        }
    }
}

/// `value / base` with two decimals, "-" when the base is zero.
pub fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}", value / base)
    } else {
        "-".to_string()
    }
}
