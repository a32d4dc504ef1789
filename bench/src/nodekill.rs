//! `--node-kill`: three tideway nodes on one PostgreSQL database keep every acknowledged write
//! and their TTL guarantees when one of them dies (issue 27).
//!
//! Starts two nodes (`--server-bin --storage postgres --pgUri`), makes a collection whose
//! documents carry their own `ttl`, waits until one node holds its reaper lease, and starts a
//! third node whose own system clock reads an hour ahead (`--testClockSkewMs`, test only). One
//! driver with all three in its seed list (retryable writes on) then runs the crash loop's
//! writers (inserts, `$inc` upserts, `insert_many`; `crashloop::Writer`) and a TTL writer
//! (documents living 1 s and 1 h). Halfway the lease holder is SIGKILLed mid-write; a second
//! group of writers starts after the kill. The checks, through each survivor:
//! - every acknowledged write is there, no counter is ahead of the `$inc`s sent
//!   (`crashloop::Ledger`), and the writers after the kill had writes acknowledged;
//! - before the kill only the lease holder deleted expired documents; after it the lease passes
//!   to a live node (how long that took is reported; the limit is 10 s plus the 2 s by which the
//!   nodes' view of the leases can lag) and the new holder deletes the dead one's backlog;
//! - every acknowledged 1 h document is visible and no 1 s one, alike on both survivors: the
//!   skewed node, whose own clock would call the 1 h documents expired, judges by the database's
//!   clock; and the survivors' `localTime` agree.
//!
//! Kills only the processes it spawned (`crashloop::Server`); talks only to 127.0.0.1 and the
//! given database.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use mongodb::options::ClientOptions;
use mongodb::{Client, Collection};

use crate::churn::{deleted_documents, ttl_section};
use crate::crashloop::{
    connect, report_check, scan, timed, CycleWrites, Ledger, Server, WriterGroup, Writers,
    CRASH_COLLECTION,
};
use crate::report::{thousands, Output};
use crate::runner::ErrorLog;

/// The collection of the TTL writer.
const TTL_COLLECTION: &str = "nodekill_ttl";
/// How far the third node's own clock reads ahead.
const SKEW_MS: i64 = 3_600_000;
/// The TTL writer's documents: half live 1 s, half an hour (exactly the skew: on the skewed
/// node's own clock every one of them would be expired).
const SHORT_TTL_SECS: i32 = 1;
const LONG_TTL_SECS: i32 = 3_600;
/// The longest wait for a lease to be taken, at the start, and to pass on, after the kill (10 s
/// plus the nodes' view refresh of 2 s).
const LEASE_LIMIT: Duration = Duration::from_secs(12);
/// The longest wait for the new holder to delete the expired backlog.
const BACKLOG_LIMIT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(200);
/// Writers of the first group go on this long after the kill (their operations in flight at the
/// kill are retried on the survivors).
const AFTER_KILL: Duration = Duration::from_secs(1);
/// Survivors' `localTime` may differ by this much (the skewed one reads an hour ahead).
const LOCAL_TIME_AGREEMENT_MS: i64 = 60_000;

/// The `--node-kill` options.
#[derive(Clone, Debug)]
pub struct NodeKillSettings {
    pub server_bin: PathBuf,
    pub pg_uri: String,
    /// Extra arguments of every node.
    pub server_args: Vec<String>,
    /// Writing time in all; the kill comes halfway.
    pub run: Duration,
    pub writers: Writers,
}

/// One started node, with a direct client.
struct Node {
    name: &'static str,
    server: Server,
    client: Client,
    /// Its id among the nodes on the database (`serverStatus.postgres.nodes.thisNode`).
    id: String,
}

impl Node {
    async fn start(
        settings: &NodeKillSettings,
        name: &'static str,
        extra: &[&str],
    ) -> Result<Node, String> {
        let mut args: Vec<OsString> = [
            "--storage",
            "postgres",
            "--pgUri",
            settings.pg_uri.as_str(),
            "--enableTestCommands",
            "--bind_ip",
            "127.0.0.1",
            "--log-level",
            "warn",
        ]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .collect();
        args.extend(settings.server_args.iter().map(OsString::from));
        let (server, _) = Server::start(&settings.server_bin, &args, true).await?;
        let client = connect(server.port, 0).await?;
        let mut node = Node {
            name,
            server,
            client,
            id: String::new(),
        };
        node.id = node
            .status_field("postgres.nodes.thisNode", |status| {
                nodes_view(status)?
                    .get_str("thisNode")
                    .ok()
                    .map(str::to_owned)
            })
            .await?;
        Ok(node)
    }

    /// What `pick` takes from this node's `serverStatus`; an error naming `what` without it.
    async fn status_field<T>(
        &self,
        what: &str,
        pick: impl FnOnce(&Document) -> Option<T>,
    ) -> Result<T, String> {
        let status = self
            .client
            .database("admin")
            .run_command(doc! {"serverStatus": 1})
            .await
            .map_err(|error| format!("node {}: serverStatus failed: {error}", self.name))?;
        pick(&status).ok_or_else(|| format!("node {}: no serverStatus.{what}", self.name))
    }

    /// `serverStatus.postgres.nodes`: the nodes and their leases as this node last read them.
    async fn nodes_view(&self) -> Result<Document, String> {
        self.status_field("postgres.nodes", |status| nodes_view(status).cloned())
            .await
    }

    async fn deleted_documents(&self) -> Result<i64, String> {
        self.status_field("metrics.ttl.deletedDocuments", deleted_documents)
            .await
    }

    async fn expired_pending(&self, ns: &str) -> Result<i64, String> {
        self.status_field(&format!("ttl[{ns}].expiredPending"), |status| {
            ttl_section(status, ns)?.get_i64("expiredPending").ok()
        })
        .await
    }

    async fn local_time_ms(&self) -> Result<i64, String> {
        self.status_field("localTime", |status| {
            Some(status.get_datetime("localTime").ok()?.timestamp_millis())
        })
        .await
    }
}

fn nodes_view(status: &Document) -> Option<&Document> {
    status
        .get_document("postgres")
        .ok()?
        .get_document("nodes")
        .ok()
}

/// The id of the node that holds the reaper lease of `ns` in a nodes view, if a live one does.
fn lease_holder(view: &Document, ns: &str) -> Option<String> {
    let members = view.get_array("members").ok()?;
    members
        .iter()
        .filter_map(Bson::as_document)
        .filter(|member| member.get_bool("live") == Ok(true))
        .find(|member| {
            member
                .get_array("reaperLeases")
                .is_ok_and(|leases| leases.iter().any(|lease| lease.as_str() == Some(ns)))
        })
        .and_then(|member| member.get_str("id").ok().map(str::to_owned))
}

/// Polls `node`'s view until a live node other than `not` holds the lease of `ns`; the holder.
async fn wait_for_holder(node: &Node, ns: &str, not: Option<&str>) -> Result<String, String> {
    let deadline = Instant::now() + LEASE_LIMIT;
    loop {
        let view = node.nodes_view().await?;
        match lease_holder(&view, ns) {
            Some(holder) if Some(holder.as_str()) != not => return Ok(holder),
            _ if Instant::now() >= deadline => {
                return Err(format!(
                    "no live node {}held the reaper lease of {ns} within {} s; node {}'s view: {}",
                    if not.is_some() {
                        "other than the dead one "
                    } else {
                        ""
                    },
                    LEASE_LIMIT.as_secs(),
                    node.name,
                    Bson::Document(view).into_relaxed_extjson()
                ))
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// What the TTL writer did.
#[derive(Debug, Default)]
struct TtlTrace {
    /// Numbers of the acknowledged 1 h documents (`_id` `long-<n>`).
    long_acknowledged: Vec<u64>,
    /// Documents sent (`n` ran from 0 to this).
    sent: u64,
    errors: ErrorLog,
}

/// Inserts `{_id: "short-<n>", ttl: 1}` and `{_id: "long-<n>", ttl: 3600}` by turns until
/// `stop`.
async fn write_ttl_documents(
    collection: Collection<Document>,
    stop: Arc<AtomicBool>,
    op_timeout: Duration,
) -> TtlTrace {
    let mut trace = TtlTrace::default();
    while !stop.load(Ordering::SeqCst) {
        let n = trace.sent;
        let long = n % 2 == 1;
        let document = if long {
            doc! {"_id": format!("long-{n}"), "ttl": LONG_TTL_SECS}
        } else {
            doc! {"_id": format!("short-{n}"), "ttl": SHORT_TTL_SECS}
        };
        trace.sent += 1;
        match timed(op_timeout, collection.insert_one(document)).await {
            Ok(_) if long => trace.long_acknowledged.push(n),
            Ok(_) => {}
            Err(error) => trace.errors.record(error),
        }
    }
    trace
}

/// The `_id`s of `TTL_COLLECTION` as `node` sees them.
async fn visible_ttl_ids(node: &Node, database: &str) -> Result<BTreeSet<String>, String> {
    let failed = |error: mongodb::error::Error| format!("node {}: {error}", node.name);
    let mut cursor = node
        .client
        .database(database)
        .collection::<Document>(TTL_COLLECTION)
        .find(doc! {})
        .await
        .map_err(failed)?;
    let mut ids = BTreeSet::new();
    while cursor.advance().await.map_err(failed)? {
        let document = cursor.deserialize_current().map_err(failed)?;
        ids.insert(document.get_str("_id").unwrap_or_default().to_owned());
    }
    Ok(ids)
}

/// What the run found; any problem fails it.
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
    notes: Vec<String>,
}

impl Findings {
    fn require(&mut self, holds: bool, problem: impl FnOnce() -> String) {
        if !holds {
            self.problems.push(problem());
        }
    }
}

/// Runs the three-node test; `Err` when a check failed or the test could not run.
pub async fn run(settings: NodeKillSettings, output: Output) -> Result<(), String> {
    if !settings.server_bin.is_file() {
        return Err(format!(
            "--server-bin {} is not a file (build it with cargo build --release -p tideway)",
            settings.server_bin.display()
        ));
    }
    let began = Instant::now();
    let ttl_ns = format!("{}.{TTL_COLLECTION}", settings.writers.database);
    output.text(&format!(
        "node kill: 3 nodes of {} on one PostgreSQL database (the third reading its own clock \
         {} h ahead), {} writers through all three for {:.1} s with retryable writes, SIGKILL \
         of {ttl_ns}'s reaper lease holder halfway",
        settings.server_bin.display(),
        SKEW_MS / 3_600_000,
        settings.writers.count,
        settings.run.as_secs_f64(),
    ));
    let first = Node::start(&settings, "n1", &[]).await?;
    let second = Node::start(&settings, "n2", &[]).await?;
    let app = first.client.database(&settings.writers.database);
    for name in [CRASH_COLLECTION, TTL_COLLECTION] {
        app.collection::<Document>(name)
            .drop()
            .await
            .map_err(|error| format!("dropping {name} failed: {error}"))?;
    }
    app.run_command(doc! {
        "createIndexes": TTL_COLLECTION,
        "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": -1}],
    })
    .await
    .map_err(|error| format!("the _ts TTL index of {TTL_COLLECTION}: {error}"))?;
    let holder_id = wait_for_holder(&first, &ttl_ns, None).await?;
    let skew = SKEW_MS.to_string();
    let third = Node::start(&settings, "n3", &["--testClockSkewMs", &skew]).await?;
    let (mut holder, other) = if holder_id == first.id {
        (first, second)
    } else if holder_id == second.id {
        (second, first)
    } else {
        return Err(format!("the lease holder {holder_id} is neither n1 nor n2"));
    };
    output.text(&format!(
        "  {} ({}) holds the lease; {} ({}) and {} ({}, skewed) do not",
        holder.name, holder.id, other.name, other.id, third.name, third.id
    ));

    let seeds: Vec<String> = [&holder, &other, &third]
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.server.port))
        .collect();
    let uri = format!("mongodb://{}/?retryWrites=true", seeds.join(","));
    let mut options = ClientOptions::parse(&uri)
        .await
        .map_err(|error| format!("{uri}: {error}"))?;
    options.server_selection_timeout = Some(Duration::from_secs(5));
    options.connect_timeout = Some(Duration::from_secs(2));
    options.max_pool_size = Some(settings.writers.count * 2 + 4);
    options.app_name = Some("tideway-bench node kill".to_string());
    let client = Client::with_options(options).map_err(|error| format!("{uri}: {error}"))?;
    let collection = client
        .database(&settings.writers.database)
        .collection::<Document>(CRASH_COLLECTION);
    let ttl_stop = Arc::new(AtomicBool::new(false));
    let ttl_writer = tokio::spawn(write_ttl_documents(
        client
            .database(&settings.writers.database)
            .collection(TTL_COLLECTION),
        Arc::clone(&ttl_stop),
        settings.writers.op_timeout,
    ));
    let writers = |cycle| WriterGroup::spawn(&collection, cycle, &settings.writers);
    let before_kill = writers(1);
    tokio::time::sleep(settings.run / 2).await;

    let mut findings = Findings::default();
    let (holder_deleted, other_deleted, third_deleted) = (
        holder.deleted_documents().await?,
        other.deleted_documents().await?,
        third.deleted_documents().await?,
    );
    findings.require(other_deleted == 0 && third_deleted == 0, || {
        format!(
            "before the kill nodes without the lease deleted documents ({other_deleted}, \
             {third_deleted}): more than one reaper per collection"
        )
    });
    findings.notes.push(format!(
        "before the kill the holder had deleted {holder_deleted} expired documents, the others \
         {other_deleted} and {third_deleted}"
    ));

    before_kill.killed.store(true, Ordering::SeqCst);
    let holder_exited = holder.server.exited();
    holder.server.signal_kill()?;
    let killed_at = Instant::now();
    let after_kill = writers(2);
    let new_holder = wait_for_holder(&other, &ttl_ns, Some(&holder.id)).await;
    let takeover = killed_at.elapsed();
    let mut ledger = Ledger::new(settings.writers.count);
    let remaining = (settings.run / 2).saturating_sub(takeover);
    tokio::time::sleep(remaining.max(AFTER_KILL)).await;
    let first_writes = before_kill.finish(1, &mut ledger).await?;
    let second_writes = after_kill.finish(2, &mut ledger).await?;
    ttl_stop.store(true, Ordering::SeqCst);
    let ttl_trace = ttl_writer
        .await
        .map_err(|error| format!("the TTL writer failed: {error}"))?;
    let last_ttl_write = Instant::now();
    holder.server.reap()?;
    findings.require(holder_exited.is_none(), || {
        format!("node {} had exited before the kill", holder.name)
    });
    let new_holder = new_holder?;
    let survivors = [&other, &third];
    findings.require(survivors.iter().any(|node| node.id == new_holder), || {
        format!("the lease passed to {new_holder}, not a survivor")
    });
    findings.notes.push(format!(
        "the lease passed to {new_holder} {:.1} s after the kill (as the nodes' view showed it)",
        takeover.as_secs_f64()
    ));
    findings.require(second_writes.inserts_acknowledged > 0, || {
        "no insert was acknowledged after the kill: the workload did not go on".to_string()
    });

    // Every 1 s document has expired by the database's clock.
    tokio::time::sleep(
        (Duration::from_secs(SHORT_TTL_SECS as u64) + Duration::from_millis(500))
            .saturating_sub(last_ttl_write.elapsed()),
    )
    .await;
    let mut visible = Vec::new();
    for node in survivors {
        let found = scan(
            &node
                .client
                .database(&settings.writers.database)
                .collection(CRASH_COLLECTION),
            settings.writers.pad_len(),
        )
        .await?;
        let check = ledger.check(&found);
        report_check(&format!("node {}", node.name), &check);
        findings.require(
            check.lost.is_empty()
                && check.lost_incs == 0
                && check.counter_violations.is_empty()
                && check.phantom.is_empty(),
            || {
                format!(
                    "node {}: {} acknowledged inserts and {} $inc lost, {} counter violations, \
                     {} phantom documents",
                    node.name,
                    check.lost.len(),
                    check.lost_incs,
                    check.counter_violations.len(),
                    check.phantom.len()
                )
            },
        );
        let ids = visible_ttl_ids(node, &settings.writers.database).await?;
        let missing = ttl_trace
            .long_acknowledged
            .iter()
            .filter(|n| !ids.contains(&format!("long-{n}")))
            .count();
        let short = ids.iter().filter(|id| id.starts_with("short-")).count();
        findings.require(missing == 0 && short == 0, || {
            format!(
                "node {}: {missing} acknowledged 1 h documents not visible, {short} expired \
                 1 s documents visible",
                node.name
            )
        });
        visible.push(ids);
    }
    findings.require(visible[0] == visible[1], || {
        format!(
            "the survivors see different TTL documents: {} on {}, {} on {}",
            visible[0].len(),
            other.name,
            visible[1].len(),
            third.name
        )
    });
    let apart = third.local_time_ms().await? - other.local_time_ms().await?;
    findings.require(apart.abs() < LOCAL_TIME_AGREEMENT_MS, || {
        format!("the survivors' localTime are {apart} ms apart")
    });

    // The new holder deletes what expired while the dead node held the lease.
    let new_holder_node = if third.id == new_holder {
        &third
    } else {
        &other
    };
    let deadline = Instant::now() + BACKLOG_LIMIT;
    let pending = loop {
        let pending = new_holder_node.expired_pending(&ttl_ns).await?;
        if pending == 0 || Instant::now() >= deadline {
            break pending;
        }
        tokio::time::sleep(POLL).await;
    };
    let deleted_after = new_holder_node.deleted_documents().await?;
    findings.require(pending == 0 && deleted_after > 0, || {
        format!(
            "the new holder {} left {pending} expired documents of {ttl_ns} after {} s \
             (it deleted {deleted_after})",
            new_holder_node.name,
            BACKLOG_LIMIT.as_secs()
        )
    });
    findings.notes.push(format!(
        "the new holder {} has deleted {deleted_after} expired documents; none left",
        new_holder_node.name
    ));

    let acknowledged =
        |writes: &CycleWrites| writes.inserts_acknowledged + writes.incs_acknowledged;
    output.text(&format!(
        "  writes acknowledged: {} before the kill (group 1, {} in flight at the kill, {} \
         errors after it), {} by the writers started after it (group 2, {} errors); TTL \
         documents: {} sent, {} errors",
        thousands(acknowledged(&first_writes) as f64),
        first_writes.in_flight_at_kill,
        first_writes.errors_after_kill.total(),
        thousands(acknowledged(&second_writes) as f64),
        second_writes.errors_while_up.total() + second_writes.errors_after_kill.total(),
        thousands(ttl_trace.sent as f64),
        ttl_trace.errors.total(),
    ));
    for note in &findings.notes {
        output.text(&format!("  {note}"));
    }
    output.json(doc! {
        "type": "node_kill",
        "takeover_ms": takeover.as_millis() as i64,
        "acknowledged_before_kill": acknowledged(&first_writes) as i64,
        "acknowledged_after_kill": acknowledged(&second_writes) as i64,
        "ttl_documents_sent": ttl_trace.sent as i64,
        "problems": findings.problems.clone(),
    });
    for (kind, count, message) in first_writes
        .errors_while_up
        .kinds()
        .chain(second_writes.errors_while_up.kinds())
        .chain(ttl_trace.errors.kinds())
    {
        eprintln!("  errors: {count} x {kind}; first: {message}");
    }
    output.text(&format!(
        "  total time {:.1} s; result: {}",
        began.elapsed().as_secs_f64(),
        if findings.problems.is_empty() {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    if findings.problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "node kill FAILED: {}",
            findings.problems.join("; ")
        ))
    }
}
