//! One-node replica-set mode (`--replSet <name>`): this server is the primary of a set whose only
//! member it is. Owns the set's identity and configuration (`local.system.replset`, written on
//! first start and kept across restarts), the replica-set fields of `hello`, the cluster time every
//! reply gossips (`$clusterTime`, `operationTime`), the session options a command may carry
//! (`txnNumber` for retryable writes; multi-document transactions refused), and `readConcern`.
//!
//! Invariants:
//! - Standalone (no `--replSet`) is unchanged: no replica-set field in `hello`, no cluster time in
//!   replies, `txnNumber` refused with 20 as on a standalone mongod.
//! - The cluster time is storage's ([`tideway_storage::Storage::cluster_time`]): it only moves when
//!   a write commits, so `operationTime` never goes back, and a read after a write sees a time at
//!   least the write's. [`cluster_time`] is the one place deciding what is reported before the
//!   first write ever (the wall clock's second, increment 0, as a fresh mongod).
//! - There is no election, no other member and no key: `$clusterTime` is unsigned (hash of 20 zero
//!   bytes, keyId 0, as mongod without auth) and a client's gossiped `$clusterTime` is accepted
//!   without a signature check (it does not move this server's clock).
//!
//! Must not: write anything but its configuration document; know storage engines.

pub mod retryable;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document, Timestamp};

use tideway_base::clock::Clock;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::{
    Namespace, ScanRequest, ScanSource, Storage, TtlClass, WriteMeta, WriteOp, WriteOptions,
};
use tideway_wire::Reply;

/// Where mongod keeps the set's configuration.
pub(crate) fn config_namespace() -> Namespace {
    Namespace::new("local", "system.replset")
}

/// The term of this node's (only) election: the set never holds another.
pub const TERM: i64 = 1;

/// The replica-set side of a server started with `--replSet`.
#[derive(Debug)]
pub struct ReplSet {
    pub name: String,
    /// Router mode (`--storage postgres`): the server answers as a `mongos` (`hello` says
    /// `msg: "isdbgrid"`, no set, no replication commands) and keeps sessions and transactions
    /// as a set member does, their records in the database.
    pub router: bool,
    /// `topologyVersion.processId`: one per process, as mongod.
    pub process_id: ObjectId,
    /// Set once the listener is known ([`start`]).
    member: OnceLock<Member>,
    /// Retryable-write sessions (see `commands::retryable`).
    pub sessions: retryable::Sessions,
    /// Multi-document transactions (see `crate::txn`).
    pub transactions: crate::txn::Transactions,
    /// Set at shutdown: awaitable `hello`s answer at once instead of holding their connection.
    stopping: tokio::sync::watch::Sender<bool>,
}

/// This node as the set knows it once started.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// `host:port` clients reach it at.
    host: String,
    /// The stored configuration document.
    pub(crate) config: Document,
    /// When this node became primary (its start).
    election_date: bson::DateTime,
    election_time: Timestamp,
}

impl ReplSet {
    pub fn new(name: String) -> ReplSet {
        ReplSet {
            router: false,
            name,
            process_id: ObjectId::new(),
            member: OnceLock::new(),
            sessions: retryable::Sessions::default(),
            transactions: crate::txn::Transactions::default(),
            stopping: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Router mode (see [`ReplSet::router`]).
    pub fn router() -> ReplSet {
        ReplSet {
            router: true,
            ..ReplSet::new(String::new())
        }
    }

    /// The server is shutting down: awaitable `hello`s stop waiting.
    pub(crate) fn stop_waiting(&self) {
        self.stopping.send_replace(true);
    }

    /// Waits `wait`, or less if the server shuts down meanwhile.
    pub(crate) async fn await_topology_change(&self, wait: Duration) {
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopping.wait_for(|stopping| *stopping) => {}
        }
    }

    pub(crate) fn member(&self) -> CommandResult<&Member> {
        self.member.get().ok_or_else(|| {
            CommandError::new(
                ErrorCode::NotWritablePrimary,
                "the replica set has not started yet",
            )
        })
    }

    pub fn host(&self) -> Option<&str> {
        self.member.get().map(|member| member.host.as_str())
    }
}

/// The host name clients use for the listener at `addr`: an unspecified address (0.0.0.0, ::) is
/// reached as 127.0.0.1.
pub(crate) fn host_of(addr: &SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("127.0.0.1:{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// Starts replica-set mode on the first listener `addrs` holds: loads the configuration stored in
/// `local.system.replset`, or initiates the set (stores a one-member configuration) on first
/// start. A dbpath initiated under another set name is refused (the caller stops the server).
/// The member's host follows the listener: a restart on another port rewrites it (version + 1).
/// Does nothing on a standalone server or when already started.
pub async fn start(
    repl: &ReplSet,
    storage: &dyn Storage,
    clock: &dyn Clock,
    default_port: u16,
    addrs: &[SocketAddr],
) -> CommandResult<()> {
    if repl.member.get().is_some() {
        return Ok(());
    }
    let host = addrs
        .first()
        .map_or_else(|| format!("127.0.0.1:{default_port}"), host_of);
    if repl.router {
        // A router stores no set configuration.
        let _ = repl.member.set(Member {
            host,
            config: Document::new(),
            election_date: clock.now(),
            election_time: cluster_time(storage),
        });
        return Ok(());
    }
    let ns = config_namespace();
    let page = storage
        .scan(
            &ns,
            ScanRequest {
                source: ScanSource::Collection,
                resume_after: None,
                reverse: false,
                limit: 2,
                hide: None,
                key_filter: None,
                covered: false,
            },
        )
        .await?;
    let meta = WriteMeta {
        last_write_ms: clock.now_ms(),
        ttl: TtlClass::Never,
    };
    let config = match page.records.into_iter().next() {
        Some(record) => {
            let mut stored = record.doc.document().clone();
            let stored_name = stored.get_str("_id").unwrap_or_default().to_owned();
            if stored_name != repl.name {
                return Err(CommandError::bad_value(format!(
                    "Local replica set configuration document reports set name of {stored_name}, but command line reports {}",
                    repl.name
                )));
            }
            if stored_member_host(&stored) != Some(host.as_str()) {
                tracing::warn!(%host, "the replica set member's host changed: rewriting the configuration");
                let version = stored.get_i32("version").unwrap_or(1) + 1;
                stored.insert("version", version);
                stored.insert("members", vec![Bson::Document(member_document(&host))]);
                let op = WriteOp::Replace {
                    replacement: true,
                    id: Bson::String(repl.name.clone()),
                    expected_rev: record.rev,
                    doc: stored.clone(),
                    meta,
                    supersede: None,
                };
                write_config(storage, op).await?;
            }
            stored
        }
        None => {
            let config = initial_config(&repl.name, &host);
            tracing::info!(set = %repl.name, %host, "initiating the one-member replica set");
            let op = WriteOp::Insert {
                doc: config.clone(),
                meta,
                supersede: None,
            };
            write_config(storage, op).await?;
            config
        }
    };
    let _ = repl.member.set(Member {
        host,
        config,
        election_date: clock.now(),
        election_time: cluster_time(storage),
    });
    Ok(())
}

async fn write_config(storage: &dyn Storage, op: WriteOp) -> CommandResult<()> {
    let options = WriteOptions {
        ordered: true,
        force_durable: true,
        background: false,
    };
    for result in storage
        .write(&config_namespace(), vec![op], options)
        .await?
    {
        result?;
    }
    Ok(())
}

fn stored_member_host(config: &Document) -> Option<&str> {
    config
        .get_array("members")
        .ok()?
        .first()?
        .as_document()?
        .get_str("host")
        .ok()
}

fn member_document(host: &str) -> Document {
    doc! {
        "_id": 0,
        "host": host,
        "arbiterOnly": false,
        "buildIndexes": true,
        "hidden": false,
        "priority": 1.0,
        "tags": {},
        "secondaryDelaySecs": 0_i64,
        "votes": 1,
    }
}

/// The configuration `rs.initiate()` without arguments stores on mongod (one member, defaults).
fn initial_config(name: &str, host: &str) -> Document {
    doc! {
        "_id": name,
        "version": 1,
        "term": TERM,
        "members": [member_document(host)],
        "protocolVersion": 1_i64,
        "writeConcernMajorityJournalDefault": true,
        "settings": {
            "chainingAllowed": true,
            "heartbeatIntervalMillis": 2000,
            "heartbeatTimeoutSecs": 10,
            "electionTimeoutMillis": 10000,
            "catchUpTimeoutMillis": -1,
            "catchUpTakeoverDelayMillis": 30000,
            "getLastErrorModes": {},
            "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
            "replicaSetId": ObjectId::new(),
        },
    }
}

/// The cluster time to report now: the newest write's, or before any write the wall clock's
/// second with increment 0 (what a fresh mongod reports; below any time a write will take).
pub fn cluster_time(storage: &dyn Storage) -> Timestamp {
    let time = storage.cluster_time();
    if time.time != 0 || time.increment != 0 {
        return time;
    }
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    Timestamp {
        time: u32::try_from(seconds).unwrap_or(u32::MAX),
        increment: 0,
    }
}

fn timestamp_date(time: Timestamp) -> bson::DateTime {
    bson::DateTime::from_millis(i64::from(time.time) * 1000)
}

/// `electionId` of term `term`: mongod's `OID::fromTerm`, `7fffffff` then the term.
pub(crate) fn election_id(term: i64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// `{ts, t}`.
fn optime(time: Timestamp) -> Document {
    doc! {"ts": time, "t": TERM}
}

/// Appends `$clusterTime` and `operationTime` to a reply (success or error) in replica-set mode.
pub(crate) fn decorate_reply(storage: &dyn Storage, reply: &mut Reply) {
    let time = cluster_time(storage);
    let gossip = doc! {
        "clusterTime": time,
        "signature": {
            "hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] },
            "keyId": 0_i64,
        },
    };
    reply.append("$clusterTime", Bson::Document(gossip));
    reply.append("operationTime", Bson::Timestamp(time));
}

/// The replica-set fields of `hello` (after the standalone ones it shares), or nothing on a
/// standalone server.
pub(crate) fn hello_fields(repl: &ReplSet, storage: &dyn Storage) -> Option<Document> {
    let member = repl.member.get()?;
    if repl.router {
        // mongos's hello: the router marker, no set.
        return Some(doc! {
            "topologyVersion": topology_version(repl),
            "msg": "isdbgrid",
        });
    }
    let time = cluster_time(storage);
    let date = timestamp_date(time);
    let version = member.config.get_i32("version").unwrap_or(1);
    Some(doc! {
        "topologyVersion": topology_version(repl),
        "hosts": [member.host.as_str()],
        "setName": repl.name.as_str(),
        "setVersion": version,
        "secondary": false,
        "primary": member.host.as_str(),
        "me": member.host.as_str(),
        "electionId": election_id(TERM),
        "lastWrite": {
            "opTime": optime(time),
            "lastWriteDate": date,
            "majorityOpTime": optime(time),
            "majorityWriteDate": date,
        },
    })
}

/// `topologyVersion`: the counter never moves (the topology of a one-node set never changes).
pub(crate) fn topology_version(repl: &ReplSet) -> Document {
    doc! {"processId": repl.process_id, "counter": 0_i64}
}

/// How long an awaitable `hello` waits: it may return at once only when the client's
/// `topologyVersion` is not this process's current one; otherwise it waits `maxAwaitTimeMS`
/// (the topology never changes, so the wait always runs out). `None`: answer at once.
pub(crate) fn hello_wait(repl: &ReplSet, body: &Document) -> CommandResult<Option<Duration>> {
    let (Some(Bson::Document(client_version)), Some(max_await)) =
        (body.get("topologyVersion"), body.get("maxAwaitTimeMS"))
    else {
        return Ok(None);
    };
    let max_await_ms = tideway_base::bsonutil::as_f64(max_await)
        .filter(|ms| *ms >= 0.0)
        .ok_or_else(|| CommandError::bad_value("maxAwaitTimeMS must be a non-negative integer"))?;
    let current = client_version.get("processId") == Some(&Bson::ObjectId(repl.process_id))
        && tideway_base::bsonutil::as_f64(client_version.get("counter").unwrap_or(&Bson::Null))
            == Some(0.0);
    if !current {
        return Ok(None);
    }
    Ok(Some(Duration::from_millis(max_await_ms as u64)))
}

/// mongod's answer on a standalone server to a command carrying `txnNumber`,
/// `startTransaction` or `autocommit`, and to `commitTransaction`/`abortTransaction`.
pub(crate) fn standalone_session_options() -> CommandError {
    CommandError::new(
        ErrorCode::IllegalOperation,
        "Transaction numbers are only allowed on a replica set member or mongos",
    )
}

/// The commands that may carry `txnNumber` outside a transaction (mongod's retryable writes).
const RETRYABLE_COMMANDS: &[&str] = &["insert", "update", "delete", "findAndModify", "bulkWrite"];

/// Error codes after which a driver may retry a write (the retryable writes specification's
/// list, as far as tideway answers them).
const RETRYABLE_WRITE_CODES: &[ErrorCode] = &[
    ErrorCode::HostUnreachable,
    ErrorCode::NotWritablePrimary,
    ErrorCode::InterruptedAtShutdown,
    ErrorCode::ExceededTimeLimit,
];

/// The label mongod (4.4+) and mongos put on a retryable write's retryable error: drivers
/// speaking wire version 9 or later retry a write only when it is there.
pub(crate) const RETRYABLE_WRITE_LABEL: &str = "RetryableWriteError";

/// `error` labelled `RetryableWriteError` when `body` is a retryable write (`txnNumber` on a
/// retryable command, outside a transaction) and its code is one a driver retries.
pub(crate) fn label_retryable_write(
    error: CommandError,
    command: &str,
    body: &Document,
) -> CommandError {
    let retryable_write = body.contains_key("txnNumber")
        && !body.contains_key("autocommit")
        && RETRYABLE_COMMANDS.contains(&command);
    if retryable_write && RETRYABLE_WRITE_CODES.contains(&error.code) {
        crate::txn::labelled(error, RETRYABLE_WRITE_LABEL)
    } else {
        error
    }
}

/// Checks a command's session options (`txnNumber`, `startTransaction`, `autocommit`): refused
/// on a standalone server (20, as mongod); in replica-set mode `txnNumber` is accepted on the
/// retryable writes, multi-document transactions are refused (238).
pub(crate) fn check_session_options(
    repl: Option<&ReplSet>,
    command: &str,
    body: &Document,
) -> CommandResult<()> {
    let transaction_fields = ["txnNumber", "startTransaction", "autocommit"];
    if !transaction_fields
        .iter()
        .any(|field| body.contains_key(field))
    {
        return Ok(());
    }
    if repl.is_none() {
        return Err(standalone_session_options());
    }
    if body.contains_key("startTransaction") || body.contains_key("autocommit") {
        // Multi-document transactions: `crate::txn` checks the rest.
        return Ok(());
    }
    if !RETRYABLE_COMMANDS.contains(&command) {
        return Err(CommandError::new(
            ErrorCode::NotARetryableWriteCommand,
            format!("txnNumber may only be provided for multi-document transactions and retryable write commands. autocommit:false was not provided, and {command} is not a retryable write command."),
        ));
    }
    Ok(())
}

/// The `writeConcernError` a one-member set answers for `body`'s `writeConcern` after doing the
/// write (`w: "majority"`, `w: 0` and `w: 1` are satisfied by this node; more nodes cannot be;
/// a named mode does not exist in its configuration); a malformed concern is the command's
/// error.
pub(crate) fn write_concern_error(body: &Document) -> CommandResult<Option<Document>> {
    let concern = match body.get("writeConcern") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(concern)) => concern,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'writeConcern' is the wrong type '{}', expected type 'object'",
                tideway_base::display::type_name(other)
            )))
        }
    };
    Ok(match concern.get("w") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(mode)) if mode == "majority" => None,
        Some(Bson::String(mode)) => Some(doc! {
            "code": ErrorCode::UnknownReplWriteConcern.code(),
            "codeName": ErrorCode::UnknownReplWriteConcern.name(),
            "errmsg": format!("No write concern mode named '{mode}' found in replica set configuration"),
        }),
        Some(number) => match tideway_base::bsonutil::as_f64(number) {
            Some(nodes) if (0.0..=1.0).contains(&nodes) => None,
            Some(_) => Some(doc! {
                "code": ErrorCode::UnsatisfiableWriteConcern.code(),
                "codeName": ErrorCode::UnsatisfiableWriteConcern.name(),
                "errmsg": "Not enough data-bearing nodes",
            }),
            None => {
                return Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    "w has to be a number or a string",
                ))
            }
        },
    })
}

/// `readConcern` in replica-set mode: `local`, `majority`, `available` and `linearizable` read
/// what is committed (one node: every committed write is majority-committed); `snapshot` is
/// refused; an `afterClusterTime` past the cluster time fails at once, as mongod answers it: every
/// time this server reports (`operationTime`, `$clusterTime`) is one a committed write already
/// took, so a later one cannot come from it and waiting would not help.
pub(crate) fn check_read_concern(storage: &dyn Storage, body: &Document) -> CommandResult<()> {
    let Some(read_concern) = body.get("readConcern") else {
        return Ok(());
    };
    let Bson::Document(read_concern) = read_concern else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field 'readConcern' is the wrong type '{}', expected type 'object'",
            tideway_base::display::type_name(read_concern)
        )));
    };
    match read_concern.get("level") {
        None | Some(Bson::Null) => {}
        Some(Bson::String(level))
            if ["local", "majority", "available", "linearizable"].contains(&level.as_str()) => {}
        Some(Bson::String(level))
            if level == "snapshot"
                && body.get("startTransaction") == Some(&Bson::Boolean(true)) => {}
        Some(Bson::String(level)) if level == "snapshot" => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                "tideway does not support readConcern level snapshot",
            ))
        }
        Some(Bson::String(level)) => {
            return Err(CommandError::bad_value(format!(
                "Enumeration value '{level}' for field 'readConcern.level' is not a valid value."
            )))
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'readConcern.level' is the wrong type '{}', expected type 'string'",
                tideway_base::display::type_name(other)
            )))
        }
    }
    for field in read_concern.keys() {
        if ![
            "level",
            "afterClusterTime",
            "atClusterTime",
            "afterOpTime",
            "provenance",
        ]
        .contains(&field.as_str())
        {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                format!("Unrecognized option in readConcern: {field}"),
            ));
        }
    }
    if read_concern.contains_key("atClusterTime") {
        if read_concern.get_str("level") != Ok("snapshot") {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "atClusterTime field can be set only if level is equal to snapshot",
            ));
        }
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not support readConcern atClusterTime: a one-member set keeps no history to read at a past time",
        ));
    }
    if read_concern.contains_key("afterOpTime") {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "The readConcern cannot specify 'afterOpTime'",
        ));
    }
    let after = match read_concern.get("afterClusterTime") {
        None => return Ok(()),
        Some(Bson::Timestamp(after)) => *after,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'readConcern.afterClusterTime' is the wrong type '{}', expected type 'timestamp'",
                tideway_base::display::type_name(other)
            )))
        }
    };
    let current = cluster_time(storage);
    if (after.time, after.increment) <= (current.time, current.increment) {
        return Ok(());
    }
    Err(CommandError::new(
        ErrorCode::InvalidOptions,
        format!(
            "readConcern afterClusterTime value must not be greater than the current clusterTime. Requested clusterTime: {}; current clusterTime: {}",
            show_timestamp(after),
            show_timestamp(current)
        ),
    ))
}

/// A timestamp as mongod's `Timestamp::toString`.
fn show_timestamp(time: Timestamp) -> String {
    format!("Timestamp({}, {})", time.time, time.increment)
}

/// The pieces of the status and configuration replies `commands` builds.
impl ReplSet {
    pub(crate) fn status_member(
        &self,
        storage: &dyn Storage,
        started: std::time::Instant,
    ) -> CommandResult<Document> {
        let member = self.member()?;
        let time = cluster_time(storage);
        let uptime = started.elapsed().as_secs() as i64;
        Ok(doc! {
            "_id": 0,
            "name": member.host.as_str(),
            "health": 1.0,
            "state": 1,
            "stateStr": "PRIMARY",
            "uptime": uptime,
            "optime": optime(time),
            "optimeDate": timestamp_date(time),
            "lastAppliedWallTime": timestamp_date(time),
            "lastDurableWallTime": timestamp_date(time),
            "syncSourceHost": "",
            "syncSourceId": -1,
            "infoMessage": "",
            "electionTime": member.election_time,
            "electionDate": member.election_date,
            "configVersion": member.config.get_i32("version").unwrap_or(1),
            "configTerm": TERM,
            "self": true,
            "lastHeartbeatMessage": "",
        })
    }
}
