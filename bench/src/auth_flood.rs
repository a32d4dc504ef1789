//! `--auth-flood`: what a flood of failed logins costs a correct client. Per server, a SCRAM user
//! `tideway_bench_flood` (password known to the tool) is created in `admin`, then two phases of
//! `--duration-secs` each run: `quiet` (no flood) and `flood` (`--attackers` tasks each logging
//! in with a wrong password on a fresh connection, back to back). In both phases a correct
//! client measures two latencies: `login` (a fresh client: connect, handshake with speculative
//! SCRAM, `saslContinue`, `ping`) and `command` (`find_one({_id: 0})` on an authenticated, pooled
//! client). All connections come from this machine, so on tideway the attackers' host is the
//! correct client's host too: its failures are throttled, its successes must not be.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use hdrhistogram::Histogram;
use mongodb::options::{ClientOptions, Credential};
use mongodb::Client;

use crate::report::{thousands, Column, Output, Table};
use crate::target::{label_width, Target};

/// The user the correct client logs in as.
pub const USER: &str = "tideway_bench_flood";
const PASSWORD: &str = "correct-horse-battery";
/// The collection `command` reads.
const COLLECTION: &str = "auth_flood";

/// What the mode needs from the command line.
#[derive(Clone, Copy, Debug)]
pub struct AuthFloodSettings {
    pub duration: Duration,
    pub attackers: usize,
    pub output: Output,
}

/// `options` logging in as `user` with `password` on `admin`.
fn with_login(options: &ClientOptions, user: &str, password: &str) -> ClientOptions {
    let mut options = options.clone();
    options.credential = Some(
        Credential::builder()
            .username(user.to_owned())
            .password(password.to_owned())
            .source("admin".to_owned())
            .build(),
    );
    options.app_name = Some("tideway-bench-auth-flood".to_owned());
    options
}

/// One fresh client's login and `ping`: the latency, or the error text.
async fn login_once(options: &ClientOptions) -> Result<Duration, String> {
    let started = Instant::now();
    let client = Client::with_options(options.clone()).map_err(|error| error.to_string())?;
    let outcome = client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .map(|_| started.elapsed())
        .map_err(|error| error.to_string());
    client.shutdown().immediate(true).await;
    outcome
}

/// Latencies of one kind of operation in a phase.
struct Measured {
    latencies: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Measured {
    fn new() -> Measured {
        Measured {
            latencies: Histogram::new(3).expect("3 significant digits is valid"),
            errors: 0,
            first_error: None,
        }
    }

    fn record(&mut self, outcome: Result<Duration, String>) {
        match outcome {
            Ok(latency) => {
                let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                let _ = self.latencies.record(micros.max(1));
            }
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert(error);
            }
        }
    }
}

/// Runs the mode against every server; failures are added to `problems`.
pub async fn run(targets: &[Target], settings: AuthFloodSettings, problems: &mut Vec<String>) {
    let output = settings.output;
    output.text(&format!(
        "auth flood: a correct client's fresh login (+ping) and find_one latencies, {} s without \
         and {} s with {} tasks failing SCRAM logins back to back (fresh connection each)",
        settings.duration.as_secs_f64(),
        settings.duration.as_secs_f64(),
        settings.attackers
    ));
    let table = Table::new(vec![
        Column::text("server", label_width(targets)),
        Column::text("phase", 5),
        Column::text("op", 7),
        Column::number("ops", 7),
        Column::number("p50_us", 9),
        Column::number("p99_us", 9),
        Column::number("max_us", 9),
        Column::number("errors", 6),
        Column::number("failed_logins/s", 15),
    ]);
    output.text(&table.header());
    for target in targets {
        if let Err(error) = prepare(target).await {
            problems.push(format!("{}: {error}", target.label));
            continue;
        }
        for flood in [false, true] {
            let phase = if flood { "flood" } else { "quiet" };
            let (login, command, failed_per_sec) = run_phase(target, settings, flood).await;
            for (op, measured) in [("login", &login), ("command", &command)] {
                let quantile = |q: f64| measured.latencies.value_at_quantile(q).to_string();
                output.text(&table.row(&[
                    target.label.clone(),
                    phase.to_string(),
                    op.to_string(),
                    measured.latencies.len().to_string(),
                    quantile(0.5),
                    quantile(0.99),
                    measured.latencies.max().to_string(),
                    measured.errors.to_string(),
                    if flood {
                        thousands(failed_per_sec)
                    } else {
                        "-".to_string()
                    },
                ]));
                output.json(doc! {
                    "type": "auth_flood",
                    "server": &target.label,
                    "uri": &target.display_uri,
                    "phase": phase,
                    "op": op,
                    "ops": measured.latencies.len() as i64,
                    "p50_us": measured.latencies.value_at_quantile(0.5) as i64,
                    "p99_us": measured.latencies.value_at_quantile(0.99) as i64,
                    "max_us": measured.latencies.max() as i64,
                    "errors": measured.errors as i64,
                    "failed_logins_per_sec": failed_per_sec.round(),
                });
                if let Some(error) = &measured.first_error {
                    eprintln!("{} {phase} {op}: first error: {error}", target.label);
                }
            }
        }
    }
}

/// (Re)creates the user and the one document `command` reads.
async fn prepare(target: &Target) -> Result<(), String> {
    let admin = target.admin();
    let _ = admin.run_command(doc! {"dropUser": USER}).await;
    admin
        .run_command(doc! {
            "createUser": USER,
            "pwd": PASSWORD,
            "roles": [{"role": "readWrite", "db": target.database_name()}],
        })
        .await
        .map_err(|error| format!("createUser {USER} failed: {error}"))?;
    let collection = target.collection(COLLECTION);
    collection
        .delete_many(doc! {})
        .await
        .map_err(|error| error.to_string())?;
    collection
        .insert_one(doc! {"_id": 0, "n": 0})
        .await
        .map_err(|error| error.to_string())?;
    Ok(())
}

/// One phase: the correct client's `login` and `command` latencies, and the attackers' failed
/// logins per second (0 without a flood).
async fn run_phase(
    target: &Target,
    settings: AuthFloodSettings,
    flood: bool,
) -> (Measured, Measured, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    if flood {
        for attacker in 0..settings.attackers {
            let options = with_login(target.options(), USER, &format!("wrong-{attacker}"));
            let (stop, failed) = (stop.clone(), failed.clone());
            attackers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if login_once(&options).await.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    let started = Instant::now();
    let deadline = started + settings.duration;
    let good = with_login(target.options(), USER, PASSWORD);
    let login = tokio::spawn({
        let good = good.clone();
        async move {
            let mut measured = Measured::new();
            while Instant::now() < deadline {
                measured.record(login_once(&good).await);
            }
            measured
        }
    });
    let command = tokio::spawn({
        let database = target.database_name().to_owned();
        async move {
            let mut measured = Measured::new();
            let client = match Client::with_options(good) {
                Ok(client) => client,
                Err(error) => {
                    measured.record(Err(error.to_string()));
                    return measured;
                }
            };
            let collection = client
                .database(&database)
                .collection::<Document>(COLLECTION);
            while Instant::now() < deadline {
                let begun = Instant::now();
                let outcome = match collection.find_one(doc! {"_id": 0}).await {
                    Ok(Some(_)) => Ok(begun.elapsed()),
                    Ok(None) => Err("find_one({_id: 0}) found nothing".to_string()),
                    Err(error) => Err(error.to_string()),
                };
                measured.record(outcome);
            }
            measured
        }
    });
    let login = login.await.unwrap_or_else(|_| Measured::new());
    let command = command.await.unwrap_or_else(|_| Measured::new());
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    stop.store(true, Ordering::Relaxed);
    let failed_per_sec = failed.load(Ordering::Relaxed) as f64 / elapsed;
    for attacker in attackers {
        let _ = attacker.await;
    }
    (login, command, failed_per_sec)
}
