//! Logical sessions through the official driver, on a server whose clock the test moves: the
//! session cache flushed to `config.system.sessions`, its TTL index, expiry by the TTL rules and
//! the reaper, `endSessions`, `killSessions`, and what a session loses when it expires. Expected
//! values come from mongod: the record's shape and the index (logical_session_id.idl
//! `LogicalSessionRecord`, sessions_collection.cpp `generateCreateIndexesCmd`/`updateQuery`:
//! `{_id: {id, uid}, lastUse}` set to `$$NOW` at the refresh, `{lastUse: 1}` named
//! `lsidTTLIndex` with `expireAfterSeconds` = `localLogicalSessionTimeoutMinutes` × 60, default
//! 30), the refresh (logical_session_cache_impl.cpp `_refresh`: ended sessions' records
//! removed, cursors of ended and expired sessions killed), the manual's
//! `refreshLogicalSessionCacheNow` use in jstests (jstests/noPassthrough/*sessions*), the uid of
//! an unauthenticated user (sha256 of no bytes, as `config.transactions` shows it), and
//! jstests/core/txns/kill_sessions_kills_transaction.js (251 after `killSessions`).

mod common;

use std::sync::Arc;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use common::{command_error, first_batch, test_config, TestServer};
use mongodb::{Client, ClientSession};
use tideway::Config;
use tideway_base::clock::{Clock, ManualClock};

const T0: i64 = 1_700_000_000_000;
const MINUTE_MS: i64 = 60_000;

/// sha256 of no bytes: the `uid` of every session without authentication.
const NO_USER_UID: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn config(repl_set: bool, extra: &[&str]) -> Config {
    let mut set_parameter: Vec<String> = vec![
        "enableTestCommands=1".into(),
        "ttlMonitorEnabled=false".into(),
        // The transaction lifetime limit must not be what aborts a transaction here.
        "transactionLifetimeLimitSeconds=86400".into(),
    ];
    set_parameter.extend(extra.iter().map(|parameter| (*parameter).to_owned()));
    Config {
        repl_set: repl_set.then(|| "rs0".to_owned()),
        set_parameter,
        ..test_config()
    }
}

async fn server(repl_set: bool, extra: &[&str]) -> (TestServer, Arc<ManualClock>, Client) {
    let clock = Arc::new(ManualClock::new(T0));
    let server = TestServer::start_with_clock(config(repl_set, extra), clock.clone()).await;
    let client = server.client();
    (server, clock, client)
}

async fn admin(client: &Client, command: Document) -> Document {
    client
        .database("admin")
        .run_command(command)
        .await
        .expect("admin command succeeds")
}

async fn refresh(client: &Client) {
    admin(client, doc! {"refreshLogicalSessionCacheNow": 1}).await;
}

/// The session's `{id: UUID}`, as `endSessions`/`killSessions` take it.
fn session_id(session: &ClientSession) -> Document {
    session.id().clone()
}

fn uuid_of(session: &ClientSession) -> Bson {
    session.id().get("id").expect("lsid.id").clone()
}

/// The records of `config.system.sessions` for `session`.
async fn records(client: &Client, session: &ClientSession) -> Vec<Document> {
    let reply = client
        .database("config")
        .run_command(doc! {"find": "system.sessions", "filter": {"_id.id": uuid_of(session)}})
        .await
        .expect("find");
    first_batch(&reply)
}

fn no_user_uid() -> Bson {
    let bytes = (0..32)
        .map(|at| u8::from_str_radix(&NO_USER_UID[at * 2..at * 2 + 2], 16).unwrap())
        .collect();
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    })
}

/// Uses `session` once (a `ping` carrying its `lsid`).
async fn use_session(client: &Client, session: &mut ClientSession) {
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .session(&mut *session)
        .await
        .expect("ping");
}

#[tokio::test]
async fn a_used_session_is_recorded_at_the_refresh_with_mongods_shape() {
    let (server, clock, client) = server(false, &[]).await;
    let mut session = client.start_session().await.unwrap();
    use_session(&client, &mut session).await;
    // Nothing is written on the request path: no record before the refresh.
    assert!(records(&client, &session).await.is_empty());
    clock.advance_ms(5_000);
    refresh(&client).await;
    let records = records(&client, &session).await;
    assert_eq!(
        records,
        vec![doc! {
            "_id": {"id": uuid_of(&session), "uid": no_user_uid()},
            // `$$NOW` of the refresh.
            "lastUse": bson::DateTime::from_millis(T0 + 5_000),
        }]
    );
    server.stop().await;
}

#[tokio::test]
async fn the_sessions_collection_has_mongods_ttl_index() {
    let (server, _clock, client) = server(false, &[]).await;
    refresh(&client).await;
    let reply = client
        .database("config")
        .run_command(doc! {"listIndexes": "system.sessions"})
        .await
        .unwrap();
    let index = first_batch(&reply)
        .into_iter()
        .find(|index| index.get_str("name") == Ok("lsidTTLIndex"))
        .expect("lsidTTLIndex");
    assert_eq!(index.get_document("key").unwrap(), &doc! {"lastUse": 1});
    assert_eq!(
        index
            .get("expireAfterSeconds")
            .and_then(Bson::as_i64)
            .or_else(|| index.get_i32("expireAfterSeconds").ok().map(i64::from)),
        Some(1800)
    );
    let hello = admin(&client, doc! {"hello": 1}).await;
    assert_eq!(hello.get_i32("logicalSessionTimeoutMinutes"), Ok(30));
    server.stop().await;
}

#[tokio::test]
async fn the_timeout_is_local_logical_session_timeout_minutes() {
    let (server, _clock, client) = server(
        false,
        &[
            "localLogicalSessionTimeoutMinutes=5",
            "logicalSessionRefreshMillis=60000",
        ],
    )
    .await;
    let hello = admin(&client, doc! {"hello": 1}).await;
    assert_eq!(hello.get_i32("logicalSessionTimeoutMinutes"), Ok(5));
    let started = admin(&client, doc! {"startSession": 1}).await;
    assert_eq!(started.get_i32("timeoutMinutes"), Ok(5));
    let parameters = admin(
        &client,
        doc! {"getParameter": 1, "localLogicalSessionTimeoutMinutes": 1, "logicalSessionRefreshMillis": 1},
    )
    .await;
    assert_eq!(
        parameters.get_i32("localLogicalSessionTimeoutMinutes"),
        Ok(5)
    );
    assert_eq!(parameters.get_i32("logicalSessionRefreshMillis"), Ok(60000));
    refresh(&client).await;
    let reply = client
        .database("config")
        .run_command(doc! {"listIndexes": "system.sessions"})
        .await
        .unwrap();
    let index = first_batch(&reply)
        .into_iter()
        .find(|index| index.get_str("name") == Ok("lsidTTLIndex"))
        .expect("lsidTTLIndex");
    assert_eq!(
        index.get("expireAfterSeconds").and_then(crate_as_f64),
        Some(300.0)
    );
    // A changed index is put back at the next refresh (mongod's collMod).
    client
        .database("config")
        .run_command(doc! {"collMod": "system.sessions", "index": {"name": "lsidTTLIndex", "expireAfterSeconds": 7}})
        .await
        .unwrap();
    refresh(&client).await;
    let reply = client
        .database("config")
        .run_command(doc! {"listIndexes": "system.sessions"})
        .await
        .unwrap();
    let index = first_batch(&reply)
        .into_iter()
        .find(|index| index.get_str("name") == Ok("lsidTTLIndex"))
        .unwrap();
    assert_eq!(
        index.get("expireAfterSeconds").and_then(crate_as_f64),
        Some(300.0)
    );
    server.stop().await;
}

fn crate_as_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(n) => Some(*n),
        _ => None,
    }
}

#[tokio::test]
async fn bad_session_parameters_are_refused_at_startup() {
    for parameter in [
        "localLogicalSessionTimeoutMinutes=0",
        "localLogicalSessionTimeoutMinutes=x",
        "logicalSessionRefreshMillis=0",
    ] {
        let config = config(false, &[parameter]);
        let storage = tideway::state::open_storage(&config).await.unwrap();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        assert!(
            tideway::ServerState::new(config, clock, storage).is_err(),
            "{parameter}"
        );
    }
}

#[tokio::test]
async fn an_expired_record_is_invisible_at_once_and_reaped_by_the_ttl_monitor() {
    let (server, clock, client) = server(false, &[]).await;
    let mut session = client.start_session().await.unwrap();
    use_session(&client, &mut session).await;
    refresh(&client).await;
    assert_eq!(records(&client, &session).await.len(), 1);
    let stored = client
        .database("config")
        .run_command(doc! {"count": "system.sessions"})
        .await
        .unwrap()
        .get_i32("n")
        .unwrap();
    // One millisecond before lastUse + 30 minutes it is there; at that instant it is gone.
    clock.advance_ms(30 * MINUTE_MS - 1);
    assert_eq!(records(&client, &session).await.len(), 1);
    clock.advance_ms(1);
    assert!(records(&client, &session).await.is_empty());
    // The reaper deletes every record written at that refresh.
    let pass = admin(&client, doc! {"runTtlPass": 1}).await;
    assert_eq!(pass.get_i64("deleted"), Ok(i64::from(stored)));
    server.stop().await;
}

#[tokio::test]
async fn a_session_used_again_is_refreshed_and_lives_on() {
    let (server, clock, client) = server(false, &[]).await;
    let mut session = client.start_session().await.unwrap();
    use_session(&client, &mut session).await;
    refresh(&client).await;
    clock.advance_ms(20 * MINUTE_MS);
    use_session(&client, &mut session).await;
    refresh(&client).await;
    clock.advance_ms(20 * MINUTE_MS);
    let records = records(&client, &session).await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0]
            .get_datetime("lastUse")
            .unwrap()
            .timestamp_millis(),
        T0 + 20 * MINUTE_MS
    );
    server.stop().await;
}

#[tokio::test]
async fn refresh_sessions_and_start_session_mark_sessions_used() {
    let (server, _clock, client) = server(false, &[]).await;
    let started = admin(&client, doc! {"startSession": 1}).await;
    let started_id = started.get_document("id").unwrap().clone();
    let other = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: vec![7; 16],
    };
    admin(&client, doc! {"refreshSessions": [{"id": other.clone()}]}).await;
    refresh(&client).await;
    for id in [started_id.get("id").unwrap().clone(), Bson::Binary(other)] {
        let reply = client
            .database("config")
            .run_command(doc! {"find": "system.sessions", "filter": {"_id.id": id.clone()}})
            .await
            .unwrap();
        assert_eq!(first_batch(&reply).len(), 1, "{id}");
    }
    // A malformed entry is refused.
    let error = command_error(
        client
            .database("admin")
            .run_command(doc! {"refreshSessions": [{"id": "x"}]})
            .await,
    );
    assert_eq!(error.0, 14);
    let error = command_error(
        client
            .database("admin")
            .run_command(doc! {"endSessions": [{}]})
            .await,
    );
    assert_eq!(error.0, 40414);
    server.stop().await;
}

#[tokio::test]
async fn end_sessions_removes_the_record_and_closes_cursors_at_the_next_refresh() {
    let (server, _clock, client) = server(false, &[]).await;
    let coll = client.database("test").collection::<Document>("c");
    coll.insert_many(vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 3}])
        .await
        .unwrap();
    let mut session = client.start_session().await.unwrap();
    let reply = client
        .database("test")
        .run_command(doc! {"find": "c", "batchSize": 1})
        .session(&mut session)
        .await
        .unwrap();
    let cursor_id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(cursor_id, 0);
    refresh(&client).await;
    assert_eq!(records(&client, &session).await.len(), 1);
    admin(&client, doc! {"endSessions": [session_id(&session)]}).await;
    // Until the refresh, the record and the cursor remain.
    assert_eq!(records(&client, &session).await.len(), 1);
    refresh(&client).await;
    assert!(records(&client, &session).await.is_empty());
    let error = command_error(
        client
            .database("test")
            .run_command(doc! {"getMore": cursor_id, "collection": "c"})
            .await,
    );
    assert_eq!(error.0, 43);
    server.stop().await;
}

#[tokio::test]
async fn kill_sessions_closes_cursors_at_once() {
    let (server, _clock, client) = server(false, &[]).await;
    let coll = client.database("test").collection::<Document>("c");
    coll.insert_many(vec![doc! {"_id": 1}, doc! {"_id": 2}])
        .await
        .unwrap();
    let mut session = client.start_session().await.unwrap();
    let mut other = client.start_session().await.unwrap();
    let mut cursor_ids = Vec::new();
    for session in [&mut session, &mut other] {
        let reply = client
            .database("test")
            .run_command(doc! {"find": "c", "batchSize": 1})
            .session(session)
            .await
            .unwrap();
        cursor_ids.push(reply.get_document("cursor").unwrap().get_i64("id").unwrap());
    }
    admin(&client, doc! {"killSessions": [session_id(&session)]}).await;
    let error = command_error(
        client
            .database("test")
            .run_command(doc! {"getMore": cursor_ids[0], "collection": "c"})
            .await,
    );
    assert_eq!(error.0, 43);
    // Another session's cursor is untouched.
    let reply = client
        .database("test")
        .run_command(doc! {"getMore": cursor_ids[1], "collection": "c"})
        .session(&mut other)
        .await
        .unwrap();
    assert_eq!(
        reply
            .get_document("cursor")
            .unwrap()
            .get_array("nextBatch")
            .unwrap()
            .len(),
        1
    );
    server.stop().await;
}

#[tokio::test]
async fn kill_sessions_aborts_a_running_transaction() {
    let (server, _clock, client) = server(true, &[]).await;
    let coll = client.database("test").collection::<Document>("t");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 1})
        .session(&mut session)
        .await
        .unwrap();
    admin(&client, doc! {"killSessions": [session_id(&session)]}).await;
    let error = session.commit_transaction().await.expect_err("aborted");
    match *error.kind {
        mongodb::error::ErrorKind::Command(ref command) => assert_eq!(command.code, 251),
        ref other => panic!("{other:?}"),
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    server.stop().await;
}

#[tokio::test]
async fn an_expired_session_loses_its_transaction_and_cursors() {
    let (server, clock, client) = server(true, &[]).await;
    let coll = client.database("test").collection::<Document>("t");
    coll.insert_many(vec![doc! {"_id": 0}, doc! {"_id": 1}])
        .await
        .unwrap();
    let mut idle = client.start_session().await.unwrap();
    idle.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 2})
        .session(&mut idle)
        .await
        .unwrap();
    let mut reader = client.start_session().await.unwrap();
    let reply = client
        .database("test")
        .run_command(doc! {"find": "t", "batchSize": 1})
        .session(&mut reader)
        .await
        .unwrap();
    let cursor_id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    let mut busy = client.start_session().await.unwrap();
    busy.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 3})
        .session(&mut busy)
        .await
        .unwrap();
    refresh(&client).await;
    clock.advance_ms(30 * MINUTE_MS);
    // `busy` is used again before the refresh that finds the others expired.
    coll.find_one(doc! {"_id": 0})
        .session(&mut busy)
        .await
        .unwrap();
    refresh(&client).await;
    let error = idle.commit_transaction().await.expect_err("aborted");
    match *error.kind {
        mongodb::error::ErrorKind::Command(ref command) => assert_eq!(command.code, 251),
        ref other => panic!("{other:?}"),
    }
    let error = command_error(
        client
            .database("test")
            .run_command(doc! {"getMore": cursor_id, "collection": "t"})
            .session(&mut reader)
            .await,
    );
    assert_eq!(error.0, 43);
    busy.commit_transaction().await.unwrap();
    let ids: Vec<i32> = {
        use futures::TryStreamExt;
        coll.find(doc! {})
            .sort(doc! {"_id": 1})
            .await
            .unwrap()
            .try_collect::<Vec<Document>>()
            .await
            .unwrap()
            .iter()
            .map(|document| document.get_i32("_id").unwrap())
            .collect()
    };
    assert_eq!(ids, vec![0, 1, 3]);
    server.stop().await;
}

#[tokio::test]
async fn refresh_logical_session_cache_now_is_a_test_command() {
    let server = TestServer::start().await;
    let client = server.client();
    let error = command_error(
        client
            .database("admin")
            .run_command(doc! {"refreshLogicalSessionCacheNow": 1})
            .await,
    );
    assert_eq!(error.0, 59);
    server.stop().await;
}
