//! The logical session cache (mongod's `LogicalSessionCacheImpl`): which sessions (`lsid`s) are
//! in use, their records in `config.system.sessions`, and what happens to a session's server
//! state when it ends or expires. Standalone and replica-set mode alike.
//!
//! - **Use.** Every command carrying an `lsid` marks its session used (dispatch calls
//!   [`SessionCache::touch`]: one short lock and one hash-map touch, never a storage write);
//!   `startSession` and `refreshSessions` do too.
//! - **Refresh.** Every `logicalSessionRefreshMillis` (and on `refreshLogicalSessionCacheNow`)
//!   [`SessionCache::refresh`] makes sure `config.system.sessions` has mongod's TTL index
//!   `{lastUse: 1}` `lsidTTLIndex` with `expireAfterSeconds` = `localLogicalSessionTimeoutMinutes`
//!   × 60 (created on first use, put back with `collMod` if changed), upserts one record
//!   `{_id: {id, uid}, lastUse}` per session used since the last refresh (`lastUse` is the
//!   refresh's time, as mongod's `$$NOW`), and deletes the records of sessions `endSessions`
//!   named. The writes are ordinary commands run through dispatch (mongod's `DBDirectClient`).
//! - **Expiry.** A record is a document under a TTL index: invisible once `lastUse` + the timeout
//!   has passed, deleted by the TTL reaper later. The cache remembers the `lastUse` it wrote for
//!   each session, so a refresh knows which sessions' records have expired without reading them;
//!   those sessions lose their server state then: open cursors killed, a running transaction
//!   aborted, the retryable-write slot dropped (the stored retryable-write record stays, as
//!   across a restart). Ended sessions lose their cursors at the refresh that removes their
//!   records; their transactions are left to `transactionLifetimeLimitSeconds` (mongod's
//!   `endSessions` does not abort them: drivers abort first).
//!
//! Invariants: one refresh at a time; a session used after a refresh took its snapshot is
//! never treated as expired by that refresh; a refresh whose writes fail puts the sessions
//! back for the next one. Nothing here decides TTL visibility: the TTL index does.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bson::{doc, Bson, Document};

use futures::future::BoxFuture;

use crate::cursor::CursorRegistry;
use crate::repl::ReplSet;
use crate::session_id::{lsid_key, session_id_document};
use tideway_base::clock::Clock;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::{Namespace, Storage};
use tideway_wire::Reply;

/// Where session records live (mongod's `NamespaceString::kLogicalSessionsNamespace`).
pub(crate) const SESSIONS_DB: &str = "config";
pub(crate) const SESSIONS_COLLECTION: &str = "system.sessions";
/// mongod's `SessionsCollection::kSessionsTTLIndex`.
pub(crate) const TTL_INDEX_NAME: &str = "lsidTTLIndex";
/// Records per write command (mongod's `sessionMaxBatchSize` default).
const BATCH: usize = 1000;

/// Whether `ns` is `config.system.sessions` (clients may write it, as mongod's
/// `isLegalClientSystemNS` allows).
pub(crate) fn is_sessions_namespace(ns: &Namespace) -> bool {
    ns.db == SESSIONS_DB && ns.coll == SESSIONS_COLLECTION
}

/// `localLogicalSessionTimeoutMinutes` as `hello` and `startSession` report it.
pub(crate) fn timeout_minutes(params: &crate::params::Parameters) -> i32 {
    i32::try_from(params.logical_session_timeout_minutes()).unwrap_or(i32::MAX)
}

/// What a refresh reaches beyond the cache: storage and the clock, the session timeout, the
/// server state of sessions (cursors, replica-set transactions and retryable writes), and
/// `run`, which runs a command on `config` as the server itself (dispatch).
pub struct RefreshHost<'a> {
    pub storage: &'a dyn Storage,
    pub clock: &'a dyn Clock,
    pub timeout_minutes: i64,
    pub cursors: &'a CursorRegistry,
    pub repl: Option<&'a ReplSet>,
    pub run: &'a (dyn Fn(Document) -> BoxFuture<'a, Reply> + Send + Sync),
}

#[derive(Debug, Default)]
pub struct SessionCache {
    cache: Mutex<Cache>,
    /// Held for a whole refresh.
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Cache {
    /// Sessions used since the last refresh, by key, with their last use (ms).
    active: HashMap<Vec<u8>, i64>,
    /// Sessions `endSessions` named since the last refresh.
    ending: HashSet<Vec<u8>>,
    /// Sessions with a record this server wrote and has not yet seen expire or end: the
    /// record's `lastUse` (ms).
    recorded: HashMap<Vec<u8>, i64>,
}

/// What one refresh did (`refreshLogicalSessionCacheNow` does not report it; tests and logs do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    pub refreshed: usize,
    pub ended: usize,
    pub expired: usize,
    pub cursors_closed: usize,
}

fn lock(mutex: &Mutex<Cache>) -> std::sync::MutexGuard<'_, Cache> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SessionCache {
    /// Marks the session of a command's `lsid` used at `now_ms` and returns its key; `None`
    /// without a well-formed `lsid`.
    pub fn touch(&self, body: &Document, now_ms: i64) -> Option<Vec<u8>> {
        let key = lsid_key(body.get_document("lsid").ok()?)?;
        self.vivify(&key, now_ms);
        Some(key)
    }

    /// Marks the session `key` used at `now_ms` (mongod's `vivify`).
    pub(crate) fn vivify(&self, key: &[u8], now_ms: i64) {
        let mut cache = lock(&self.cache);
        match cache.active.get_mut(key) {
            Some(last_use) => *last_use = (*last_use).max(now_ms),
            None => {
                cache.active.insert(key.to_vec(), now_ms);
            }
        }
    }

    /// `endSessions`: the sessions' records go at the next refresh.
    pub fn end(&self, keys: impl IntoIterator<Item = Vec<u8>>) {
        lock(&self.cache).ending.extend(keys);
    }

    /// The sessions used since the last refresh, in key order, with their last use
    /// (`$listLocalSessions`).
    pub fn active(&self) -> Vec<(Vec<u8>, i64)> {
        let mut active: Vec<_> = lock(&self.cache)
            .active
            .iter()
            .map(|(key, last_use)| (key.clone(), *last_use))
            .collect();
        active.sort();
        active
    }

    /// Flushes the cache to `config.system.sessions` and ends the server state of sessions
    /// that ended or expired (see the module documentation).
    pub async fn refresh(&self, host: &RefreshHost<'_>) -> CommandResult<Refreshed> {
        let _one_at_a_time = self.refreshing.lock().await;
        let timeout_ms = host.timeout_minutes * 60_000;
        setup_collection(host, timeout_ms / 1000).await?;
        let (active, ending) = {
            let mut cache = lock(&self.cache);
            (
                std::mem::take(&mut cache.active),
                std::mem::take(&mut cache.ending),
            )
        };
        let mut active: Vec<(Vec<u8>, i64)> = active
            .into_iter()
            .filter(|(key, _)| !ending.contains(key))
            .collect();
        active.sort();
        let now_ms = host.clock.now_ms();
        let mut done = Refreshed::default();
        let mut first_error = None;
        let mut failed = Vec::new();
        for batch in active.chunks(BATCH) {
            let updates: Vec<Document> = batch
                .iter()
                .filter_map(|(key, _)| {
                    Some(doc! {
                        "q": {"_id": session_id_document(key)?},
                        "u": {"$set": {"lastUse": bson::DateTime::from_millis(now_ms)}},
                        "upsert": true,
                    })
                })
                .collect();
            let command =
                doc! {"update": SESSIONS_COLLECTION, "updates": updates, "ordered": false};
            let failed_at = match run(host, command).await {
                Ok(reply) => write_error_indexes(&reply),
                Err(error) => {
                    first_error.get_or_insert(error);
                    (0..batch.len()).collect()
                }
            };
            let mut cache = lock(&self.cache);
            for (index, (key, last_use)) in batch.iter().enumerate() {
                if failed_at.contains(&index) {
                    failed.push((key.clone(), *last_use));
                } else {
                    cache.recorded.insert(key.clone(), now_ms);
                    done.refreshed += 1;
                }
            }
        }
        let ending: Vec<Vec<u8>> = ending.into_iter().collect();
        for batch in ending.chunks(BATCH) {
            let deletes: Vec<Document> = batch
                .iter()
                .filter_map(|key| Some(doc! {"q": {"_id": session_id_document(key)?}, "limit": 1}))
                .collect();
            let command =
                doc! {"delete": SESSIONS_COLLECTION, "deletes": deletes, "ordered": false};
            if let Err(error) = run(host, command).await {
                first_error.get_or_insert(error);
            }
        }
        let expired = {
            let mut cache = lock(&self.cache);
            // Failed sessions wait for the next refresh, used since or not.
            for (key, last_use) in failed {
                let entry = cache.active.entry(key).or_insert(last_use);
                *entry = (*entry).max(last_use);
            }
            for key in &ending {
                cache.recorded.remove(key);
            }
            // A session used since this refresh began is alive whatever its record says.
            let Cache {
                active, recorded, ..
            } = &mut *cache;
            let expired: Vec<Vec<u8>> = recorded
                .iter()
                .filter(|(key, last_use)| {
                    **last_use + timeout_ms <= now_ms && !active.contains_key(*key)
                })
                .map(|(key, _)| key.clone())
                .collect();
            for key in &expired {
                recorded.remove(key);
            }
            expired
        };
        done.ended = ending.len();
        done.expired = expired.len();
        let closed: HashSet<&[u8]> = expired.iter().chain(&ending).map(Vec::as_slice).collect();
        if !closed.is_empty() {
            done.cursors_closed = host.cursors.kill_sessions(|key| closed.contains(key));
        }
        if let (Some(repl), false) = (host.repl, expired.is_empty()) {
            repl.transactions.abort_sessions(&expired).await;
            repl.sessions.forget(&expired);
        }
        if done != Refreshed::default() {
            tracing::debug!(?done, "refreshed the logical session cache");
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(done),
        }
    }
}

/// Makes sure `config.system.sessions` has its TTL index with the configured timeout (mongod's
/// `setupSessionsCollection`: `createIndexes` if the index is missing, `collMod` if its
/// `expireAfterSeconds` differs).
async fn setup_collection(host: &RefreshHost<'_>, timeout_secs: i64) -> CommandResult<()> {
    let ns = Namespace::new(SESSIONS_DB, SESSIONS_COLLECTION);
    let meta = host.storage.collection(&ns).await?;
    let index = meta.as_ref().and_then(|meta| {
        meta.indexes
            .iter()
            .find(|index| index.name == TTL_INDEX_NAME)
    });
    let command = match index {
        None => doc! {
            "createIndexes": SESSIONS_COLLECTION,
            "indexes": [{"key": {"lastUse": 1}, "name": TTL_INDEX_NAME, "expireAfterSeconds": timeout_secs}],
        },
        Some(index)
            if index
                .spec
                .get("expireAfterSeconds")
                .and_then(tideway_base::bsonutil::as_f64)
                != Some(timeout_secs as f64) =>
        {
            doc! {
                "collMod": SESSIONS_COLLECTION,
                "index": {"name": TTL_INDEX_NAME, "expireAfterSeconds": timeout_secs},
            }
        }
        Some(_) => return Ok(()),
    };
    run(host, command).await.map(drop).map_err(|error| {
        CommandError::new(
            error.code,
            format!(
                "Failed to create {SESSIONS_DB}.{SESSIONS_COLLECTION} :: caused by :: {}",
                error.errmsg
            ),
        )
    })
}

/// Runs `command` on the `config` database as the server itself, through dispatch; its error
/// reply as an error.
async fn run(host: &RefreshHost<'_>, mut command: Document) -> CommandResult<Document> {
    command.insert("$db", SESSIONS_DB);
    let reply = match (host.run)(command).await {
        Reply::Document(reply) => reply,
        Reply::Raw(raw) => raw
            .to_document()
            .map_err(|error| CommandError::internal(format!("a reply to the server: {error}")))?,
    };
    if reply.get("ok").and_then(tideway_base::bsonutil::as_f64) == Some(1.0) {
        return Ok(reply);
    }
    let code = reply.get_i32("code").unwrap_or(1);
    let code = ErrorCode::ALL
        .iter()
        .copied()
        .find(|known| known.code() == code)
        .unwrap_or(ErrorCode::InternalError);
    Err(CommandError::new(
        code,
        reply.get_str("errmsg").unwrap_or_default().to_owned(),
    ))
}

/// The positions of the statements a write reply reports errors for.
fn write_error_indexes(reply: &Document) -> Vec<usize> {
    reply
        .get_array("writeErrors")
        .map(|errors| {
            errors
                .iter()
                .filter_map(|error| match error {
                    Bson::Document(error) => usize::try_from(error.get_i32("index").ok()?).ok(),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}
