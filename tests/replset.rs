//! One-node replica-set mode (`--replSet`) and retryable writes, through the official driver and
//! raw commands. Expected values come from mongod: hello's fields (replication_info.cpp), the
//! replication commands' errors (repl_set_commands.cpp, replication_coordinator_impl.cpp), and
//! retryable writes (jstests/replsets/retryable_writes_direct_write_to_config_transactions.js,
//! jstests/noPassthrough/retryable_writes_standalone_api.js, write_ops_exec.cpp).

mod common;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document, Timestamp};
use common::raw::{connect, kind0, op_msg, roundtrip};
use common::{test_config, TestServer};
use mongodb::options::ClientOptions;
use mongodb::Client;
use tideway::config::StorageKind;
use tideway::Config;

fn rs_config() -> Config {
    Config {
        repl_set: Some("rs0".to_owned()),
        ..test_config()
    }
}

/// Runs `command` (with `$db: test` unless it names one) on a raw connection: nothing added by
/// a driver (no implicit session, no gossip).
async fn raw_command(stream: &mut tokio::net::TcpStream, mut command: Document) -> Document {
    if !command.contains_key("$db") {
        command.insert("$db", "test");
    }
    roundtrip(stream, &op_msg(1, 0, &[kind0(&command)]))
        .await
        .document
}

fn lsid(byte: u8) -> Document {
    doc! {"id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![byte; 16] }}
}

fn timestamp(document: &Document, key: &str) -> Timestamp {
    match document.get(key) {
        Some(Bson::Timestamp(time)) => *time,
        other => panic!("{key}: {other:?} in {document:?}"),
    }
}

#[tokio::test]
async fn hello_describes_the_primary_of_a_one_member_set() {
    let server = TestServer::start_with(rs_config()).await;
    let host = format!("127.0.0.1:{}", server.addr.port());
    let mut stream = connect(&server).await;
    let hello = raw_command(&mut stream, doc! {"hello": 1, "$db": "admin"}).await;
    assert_eq!(hello.get_bool("isWritablePrimary"), Ok(true));
    assert_eq!(hello.get_bool("secondary"), Ok(false));
    assert_eq!(hello.get_str("setName"), Ok("rs0"));
    assert_eq!(hello.get_i32("setVersion"), Ok(1));
    assert_eq!(
        hello.get_array("hosts").unwrap(),
        &vec![Bson::from(host.as_str())]
    );
    assert_eq!(hello.get_str("primary"), Ok(host.as_str()));
    assert_eq!(hello.get_str("me"), Ok(host.as_str()));
    assert_eq!(
        hello.get_object_id("electionId").unwrap().to_hex(),
        "7fffffff0000000000000001"
    );
    let topology = hello.get_document("topologyVersion").unwrap();
    assert!(topology.get_object_id("processId").is_ok());
    assert_eq!(topology.get_i64("counter"), Ok(0));
    let last_write = hello.get_document("lastWrite").unwrap();
    assert!(last_write.get_document("opTime").is_ok());
    assert!(last_write.get_datetime("lastWriteDate").is_ok());
    assert!(last_write.get_document("majorityOpTime").is_ok());
    assert_eq!(hello.get_i32("logicalSessionTimeoutMinutes"), Ok(30));
    assert!(hello.get_document("$clusterTime").is_ok());
    assert!(hello.get("operationTime").is_some());
    let is_master = raw_command(&mut stream, doc! {"isMaster": 1, "$db": "admin"}).await;
    assert_eq!(is_master.get_bool("ismaster"), Ok(true));
    assert_eq!(is_master.get_str("setName"), Ok("rs0"));
    server.stop().await;
}

#[tokio::test]
async fn an_awaitable_hello_waits_max_await_time_ms() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let first = raw_command(&mut stream, doc! {"hello": 1, "$db": "admin"}).await;
    let topology = first.get_document("topologyVersion").unwrap().clone();
    let started = std::time::Instant::now();
    let awaited = raw_command(
        &mut stream,
        doc! {"hello": 1, "$db": "admin", "topologyVersion": topology, "maxAwaitTimeMS": 300},
    )
    .await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(awaited.get_f64("ok"), Ok(1.0));
    server.stop().await;
}

#[tokio::test]
async fn standalone_keeps_its_identity_and_refuses_replication_commands() {
    let server = TestServer::start().await;
    let mut stream = connect(&server).await;
    let hello = raw_command(&mut stream, doc! {"hello": 1, "$db": "admin"}).await;
    assert!(!hello.contains_key("setName"));
    assert!(!hello.contains_key("topologyVersion"));
    assert!(!hello.contains_key("$clusterTime"));
    assert!(!hello.contains_key("operationTime"));
    for (command, message) in [
        ("replSetGetStatus", "not running with --replSet"),
        ("replSetGetConfig", "not running with --replSet"),
        (
            "replSetInitiate",
            "This node was not started with replication enabled.",
        ),
    ] {
        let reply = raw_command(&mut stream, doc! {command: 1, "$db": "admin"}).await;
        assert_eq!(reply.get_i32("code"), Ok(76), "{command}");
        assert_eq!(reply.get_str("codeName"), Ok("NoReplicationEnabled"));
        assert_eq!(reply.get_str("errmsg"), Ok(message));
    }
    let insert = raw_command(
        &mut stream,
        doc! {"insert": "c", "documents": [{"_id": 1}], "lsid": lsid(1), "txnNumber": 1_i64},
    )
    .await;
    assert_eq!(insert.get_i32("code"), Ok(20));
    server.stop().await;
}

#[tokio::test]
async fn replication_commands_describe_the_set() {
    let server = TestServer::start_with(rs_config()).await;
    let host = format!("127.0.0.1:{}", server.addr.port());
    let mut stream = connect(&server).await;
    let status = raw_command(&mut stream, doc! {"replSetGetStatus": 1, "$db": "admin"}).await;
    assert_eq!(status.get_str("set"), Ok("rs0"));
    assert_eq!(status.get_i32("myState"), Ok(1));
    let members = status.get_array("members").unwrap();
    assert_eq!(members.len(), 1);
    let me = members[0].as_document().unwrap();
    assert_eq!(me.get_str("name"), Ok(host.as_str()));
    assert_eq!(me.get_str("stateStr"), Ok("PRIMARY"));
    assert_eq!(me.get_i32("state"), Ok(1));
    assert_eq!(me.get_bool("self"), Ok(true));
    assert_eq!(me.get_f64("health"), Ok(1.0));
    assert!(me.get_document("optime").is_ok());
    assert!(me.get_datetime("electionDate").is_ok());

    let config = raw_command(&mut stream, doc! {"replSetGetConfig": 1, "$db": "admin"}).await;
    let config = config.get_document("config").unwrap();
    assert_eq!(config.get_str("_id"), Ok("rs0"));
    assert_eq!(config.get_i32("version"), Ok(1));
    let member = config.get_array("members").unwrap()[0]
        .as_document()
        .unwrap();
    assert_eq!(member.get_str("host"), Ok(host.as_str()));
    assert_eq!(member.get_i32("votes"), Ok(1));

    let initiate = raw_command(&mut stream, doc! {"replSetInitiate": {}, "$db": "admin"}).await;
    assert_eq!(initiate.get_i32("code"), Ok(23));
    assert_eq!(initiate.get_str("codeName"), Ok("AlreadyInitialized"));
    assert_eq!(initiate.get_str("errmsg"), Ok("already initialized"));
    // Errors carry the cluster time too.
    assert!(initiate.get_document("$clusterTime").is_ok());
    assert!(initiate.contains_key("operationTime"));

    let step_down = raw_command(&mut stream, doc! {"replSetStepDown": 60, "$db": "admin"}).await;
    assert_eq!(step_down.get_i32("code"), Ok(262));
    assert!(step_down
        .get_str("errmsg")
        .unwrap()
        .starts_with("No electable secondaries caught up as of "));
    server.stop().await;
}

#[tokio::test]
async fn operation_time_increases_with_every_write() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let mut last = Timestamp {
        time: 0,
        increment: 0,
    };
    for id in 0..3 {
        let reply = raw_command(
            &mut stream,
            doc! {"insert": "c", "documents": [{"_id": id}]},
        )
        .await;
        assert_eq!(reply.get_i32("n"), Ok(1));
        let time = timestamp(&reply, "operationTime");
        assert!((time.time, time.increment) > (last.time, last.increment));
        let gossip = reply.get_document("$clusterTime").unwrap();
        assert_eq!(timestamp(gossip, "clusterTime"), time);
        let signature = gossip.get_document("signature").unwrap();
        assert_eq!(signature.get_i64("keyId"), Ok(0));
        assert_eq!(
            signature.get_binary_generic("hash").unwrap(),
            &vec![0u8; 20]
        );
        last = time;
    }
    // A read after the last write, causally: afterClusterTime at it is served.
    let find = raw_command(
        &mut stream,
        doc! {"find": "c", "readConcern": {"level": "majority", "afterClusterTime": last}, "$clusterTime": {"clusterTime": last, "signature": {"hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0_i64}}},
    )
    .await;
    assert_eq!(find.get_f64("ok"), Ok(1.0), "{find:?}");
    // A time no write has taken: mongod's InvalidOptions once the wait runs out.
    let future = Timestamp {
        time: last.time + 1000,
        increment: 0,
    };
    let refused = raw_command(
        &mut stream,
        doc! {"find": "c", "readConcern": {"afterClusterTime": future}},
    )
    .await;
    assert_eq!(refused.get_i32("code"), Ok(72), "{refused:?}");
    assert!(refused.get_str("errmsg").unwrap().starts_with(
        "readConcern afterClusterTime value must not be greater than the current clusterTime."
    ));
    let snapshot = raw_command(
        &mut stream,
        doc! {"find": "c", "readConcern": {"level": "snapshot"}},
    )
    .await;
    assert_eq!(snapshot.get_i32("code"), Ok(238));
    server.stop().await;
}

#[tokio::test]
async fn a_driver_connects_with_replica_set_and_writes() {
    let server = TestServer::start_with(rs_config()).await;
    let uri = format!(
        "mongodb://127.0.0.1:{}/?replicaSet=rs0&serverSelectionTimeoutMS=5000",
        server.addr.port()
    );
    let client = Client::with_options(ClientOptions::parse(&uri).await.unwrap()).unwrap();
    let coll = client.database("test").collection::<Document>("c");
    // The driver sends txnNumber on these (retryable writes are on by default).
    coll.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"a": 1}})
        .await
        .unwrap();
    let found = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"a": 1}})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.get_i32("a"), Ok(2));
    coll.delete_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
    // And through a direct connection.
    let direct = server.client();
    let direct_coll = direct.database("test").collection::<Document>("c");
    direct_coll.insert_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_retried_statement_returns_the_first_result_without_running_again() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let insert = doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}], "lsid": lsid(7), "txnNumber": 1_i64};
    let first = raw_command(&mut stream, insert.clone()).await;
    assert_eq!(first.get_i32("n"), Ok(2));
    assert!(!first.contains_key("retriedStmtIds"));
    let retried = raw_command(&mut stream, insert).await;
    assert_eq!(retried.get_i32("n"), Ok(2), "{retried:?}");
    assert!(!retried.contains_key("writeErrors"), "{retried:?}");
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0), Bson::Int32(1)]
    );

    // An update retried does not apply its $inc twice.
    let update = doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}], "lsid": lsid(7), "txnNumber": 2_i64};
    for _ in 0..2 {
        let reply = raw_command(&mut stream, update.clone()).await;
        assert_eq!(reply.get_i32("n"), Ok(1));
        assert_eq!(reply.get_i32("nModified"), Ok(1));
    }
    // An upsert retried reports the same upserted id.
    let upsert = doc! {"update": "c", "updates": [{"q": {"_id": 3}, "u": {"$inc": {"x": 1}}, "upsert": true}], "lsid": lsid(7), "txnNumber": 3_i64};
    for _ in 0..2 {
        let reply = raw_command(&mut stream, upsert.clone()).await;
        assert_eq!(reply.get_i32("n"), Ok(1));
        let upserted = reply.get_array("upserted").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(upserted, doc! {"index": 0, "_id": 3});
    }
    // findAndModify retried returns the same pre-image, applied once.
    let fam = doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"x": 10}}, "lsid": lsid(7), "txnNumber": 4_i64};
    let first = raw_command(&mut stream, fam.clone()).await;
    let second = raw_command(&mut stream, fam).await;
    assert_eq!(first.get_document("value"), second.get_document("value"));
    assert_eq!(first.get_document("value").unwrap().get_i32("x"), Ok(1));
    assert_eq!(
        second.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    // A delete retried reports n: 1 again.
    let delete = doc! {"delete": "c", "deletes": [{"q": {"_id": 2}, "limit": 1}], "lsid": lsid(7), "txnNumber": 5_i64};
    for _ in 0..2 {
        assert_eq!(
            raw_command(&mut stream, delete.clone()).await.get_i32("n"),
            Ok(1)
        );
    }
    let docs = raw_command(&mut stream, doc! {"find": "c", "sort": {"_id": 1}}).await;
    let batch = common::first_batch(&docs);
    assert_eq!(
        batch,
        vec![doc! {"_id": 1, "x": 11}, doc! {"_id": 3, "x": 1}]
    );

    // An older txnNumber is too old.
    let old = raw_command(
        &mut stream,
        doc! {"insert": "c", "documents": [{"_id": 9}], "lsid": lsid(7), "txnNumber": 1_i64},
    )
    .await;
    assert_eq!(old.get_i32("code"), Ok(225));
    assert_eq!(old.get_str("codeName"), Ok("TransactionTooOld"));
    assert!(old
        .get_str("errmsg")
        .unwrap()
        .starts_with("Retryable write with txnNumber 1 is prohibited on session "));
    server.stop().await;
}

#[tokio::test]
async fn multi_statement_writes_are_not_retryable() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    // jstests: only the statements with multi=true / limit=0 fail, as write errors.
    let update = raw_command(
        &mut stream,
        doc! {"update": "c", "updates": [{"q": {"x": 1}, "u": {"$set": {"y": 1}}, "upsert": true}, {"q": {"x": 2}, "u": {"$set": {"z": 1}}, "multi": true}], "lsid": lsid(8), "txnNumber": 1_i64},
    )
    .await;
    assert_eq!(update.get_i32("n"), Ok(1));
    let error = update.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("index"), Ok(1));
    assert_eq!(error.get_i32("code"), Ok(72));
    assert_eq!(
        error.get_str("errmsg"),
        Ok("Cannot use (or request) retryable writes with multi=true")
    );
    let delete = raw_command(
        &mut stream,
        doc! {"delete": "c", "deletes": [{"q": {}, "limit": 0}], "lsid": lsid(8), "txnNumber": 2_i64},
    )
    .await;
    let error = delete.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(72));
    assert_eq!(
        error.get_str("errmsg"),
        Ok("Cannot use (or request) retryable writes with limit=0")
    );
    let find = raw_command(
        &mut stream,
        doc! {"find": "c", "lsid": lsid(8), "txnNumber": 3_i64},
    )
    .await;
    assert_eq!(find.get_i32("code"), Ok(50768));
    server.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_restart_is_answered_from_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        storage: StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        ..rs_config()
    };
    let insert =
        doc! {"insert": "c", "documents": [{"_id": 1}], "lsid": lsid(9), "txnNumber": 5_i64};
    let server = TestServer::start_with(config.clone()).await;
    let mut stream = connect(&server).await;
    assert_eq!(
        raw_command(&mut stream, insert.clone()).await.get_i32("n"),
        Ok(1)
    );
    drop(stream);
    server.stop().await;

    let server = TestServer::start_with(config.clone()).await;
    let mut stream = connect(&server).await;
    let retried = raw_command(&mut stream, insert).await;
    assert_eq!(retried.get_i32("n"), Ok(1), "{retried:?}");
    assert!(!retried.contains_key("writeErrors"), "{retried:?}");
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    let old = raw_command(
        &mut stream,
        doc! {"insert": "c", "documents": [{"_id": 2}], "lsid": lsid(9), "txnNumber": 4_i64},
    )
    .await;
    assert_eq!(old.get_i32("code"), Ok(225));
    let count = raw_command(&mut stream, doc! {"count": "c"}).await;
    assert_eq!(count.get_i32("n"), Ok(1));
    // The set survives the restart: same name, the member's host follows the new port.
    let config_reply = raw_command(&mut stream, doc! {"replSetGetConfig": 1, "$db": "admin"}).await;
    let stored = config_reply.get_document("config").unwrap();
    assert_eq!(stored.get_str("_id"), Ok("rs0"));
    drop(stream);
    server.stop().await;

    // Another set name on the same dbpath is refused.
    let other = Config {
        repl_set: Some("other".to_owned()),
        ..config
    };
    let storage = tideway::state::open_storage(&other).await.unwrap();
    let state = tideway::ServerState::new(
        other,
        std::sync::Arc::new(tideway_base::clock::SystemClock::default()),
        storage,
    )
    .unwrap();
    let error = tideway::repl::start(
        state.repl.as_ref().unwrap(),
        state.storage.as_ref(),
        state.clock.as_ref(),
        1,
        &["127.0.0.1:1".parse().unwrap()],
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.errmsg,
        "Local replica set configuration document reports set name of rs0, but command line reports other"
    );
}

#[tokio::test]
async fn a_retry_that_would_write_nothing_now_is_answered_from_the_record_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        storage: StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        ..rs_config()
    };
    // Each statement matches nothing once it ran: run again, it would answer n: 0.
    let update = doc! {
        "update": "c", "updates": [{"q": {"_id": 1, "a": 1}, "u": {"$set": {"a": 2}}}],
        "lsid": lsid(10), "txnNumber": 3_i64,
    };
    let delete = doc! {
        "delete": "c", "deletes": [{"q": {"_id": 2}, "limit": 1}],
        "lsid": lsid(11), "txnNumber": 8_i64,
    };
    let server = TestServer::start_with(config.clone()).await;
    let mut stream = connect(&server).await;
    raw_command(
        &mut stream,
        doc! {"insert": "c", "documents": [{"_id": 1, "a": 1}, {"_id": 2}]},
    )
    .await;
    let updated = raw_command(&mut stream, update.clone()).await;
    assert_eq!(updated.get_i32("nModified"), Ok(1), "{updated:?}");
    assert_eq!(
        raw_command(&mut stream, delete.clone()).await.get_i32("n"),
        Ok(1)
    );
    drop(stream);
    server.stop().await;

    // After a restart the node knows neither session: the record answers.
    let server = TestServer::start_with(config).await;
    let mut stream = connect(&server).await;
    let retried = raw_command(&mut stream, update).await;
    assert_eq!(
        (retried.get_i32("n"), retried.get_i32("nModified")),
        (Ok(1), Ok(1)),
        "{retried:?}"
    );
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    let retried = raw_command(&mut stream, delete).await;
    assert_eq!(retried.get_i32("n"), Ok(1), "{retried:?}");
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    drop(stream);
    server.stop().await;
}

/// `nErrors, nInserted, nMatched, nModified, nUpserted, nDeleted` of a `bulkWrite` reply.
fn bulk_summary(reply: &Document) -> [i32; 6] {
    [
        "nErrors",
        "nInserted",
        "nMatched",
        "nModified",
        "nUpserted",
        "nDeleted",
    ]
    .map(|field| {
        reply
            .get_i32(field)
            .unwrap_or_else(|_| panic!("{field} in {reply:?}"))
    })
}

fn bulk_results(reply: &Document) -> Vec<Document> {
    reply
        .get_document("cursor")
        .and_then(|cursor| cursor.get_array("firstBatch"))
        .unwrap_or_else(|_| panic!("a cursor in {reply:?}"))
        .iter()
        .map(|item| item.as_document().unwrap().clone())
        .collect()
}

/// mongod's bulk_write.cpp: a retried op is answered from the session's record (inserts `n: 1`;
/// updates from the oplog entry: `n: 1, nModified: 1`, or the upserted id; deletes `n: 1`), its
/// stmtId listed in `retriedStmtIds`, and nothing runs twice, across namespaces.
#[tokio::test]
async fn a_retried_bulk_write_returns_the_first_results_without_running_again() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let command = doc! {
        "bulkWrite": 1,
        "ops": [
            {"insert": 0, "document": {"_id": 1}},
            {"update": 1, "filter": {"_id": 5}, "updateMods": {"$inc": {"x": 1}}, "upsert": true},
            {"insert": 1, "document": {"_id": 2}},
            {"update": 0, "filter": {"_id": 1}, "updateMods": {"$inc": {"y": 1}}},
            {"delete": 1, "filter": {"_id": 2}},
        ],
        "nsInfo": [{"ns": "test.a"}, {"ns": "test.b"}],
        "lsid": lsid(20),
        "txnNumber": 1_i64,
        "$db": "admin",
    };
    let first = raw_command(&mut stream, command.clone()).await;
    assert_eq!(first.get_f64("ok"), Ok(1.0), "{first:?}");
    assert_eq!(bulk_summary(&first), [0, 2, 1, 1, 1, 1]);
    assert!(!first.contains_key("retriedStmtIds"));
    let retried = raw_command(&mut stream, command).await;
    assert_eq!(bulk_summary(&retried), bulk_summary(&first), "{retried:?}");
    assert_eq!(bulk_results(&retried), bulk_results(&first));
    assert_eq!(
        bulk_results(&first)[1],
        doc! {"ok": 1.0, "idx": 1, "n": 1, "nModified": 0, "upserted": {"_id": 5}}
    );
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &(0..5).map(Bson::Int32).collect::<Vec<_>>()
    );
    // Each write happened once: no second $inc, no re-inserted `_id: 2`.
    let a = raw_command(&mut stream, doc! {"find": "a"}).await;
    assert_eq!(common::first_batch(&a), vec![doc! {"_id": 1, "y": 1}]);
    let b = raw_command(&mut stream, doc! {"find": "b"}).await;
    assert_eq!(common::first_batch(&b), vec![doc! {"_id": 5, "x": 1}]);

    // A retry holding more ops than the first attempt runs only the new ones.
    let one = doc! {"insert": 0, "document": {"_id": 10}};
    let two = doc! {"insert": 0, "document": {"_id": 11}};
    let attempt = |ops: Vec<Document>| {
        doc! {
            "bulkWrite": 1, "ops": ops, "nsInfo": [{"ns": "test.a"}],
            "lsid": lsid(20), "txnNumber": 2_i64, "$db": "admin",
        }
    };
    let first = raw_command(&mut stream, attempt(vec![one.clone()])).await;
    assert_eq!(bulk_summary(&first), [0, 1, 0, 0, 0, 0]);
    let second = raw_command(&mut stream, attempt(vec![one, two])).await;
    assert_eq!(bulk_summary(&second), [0, 2, 0, 0, 0, 0], "{second:?}");
    assert_eq!(
        second.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)]
    );
    let count = raw_command(&mut stream, doc! {"count": "a"}).await;
    assert_eq!(count.get_i32("n"), Ok(3));

    // An older txnNumber is too old, as for the other retryable writes.
    let old = raw_command(
        &mut stream,
        doc! {
            "bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "test.a"}],
            "lsid": lsid(20), "txnNumber": 1_i64, "$db": "admin",
        },
    )
    .await;
    assert_eq!(old.get_i32("code"), Ok(225), "{old:?}");
    server.stop().await;
}

/// mongod's bulk_write.cpp: a `multi: true` update or delete in a retryable bulkWrite fails as
/// an op (72, "Cannot use retryable writes with multi=true"), the other ops run.
#[tokio::test]
async fn multi_ops_fail_alone_in_a_retryable_bulk_write() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let reply = raw_command(
        &mut stream,
        doc! {
            "bulkWrite": 1,
            "ops": [
                {"update": 0, "filter": {}, "updateMods": {"$set": {"x": 1}}, "multi": true},
                {"delete": 0, "filter": {}, "multi": true},
                {"insert": 0, "document": {"_id": 1}},
            ],
            "nsInfo": [{"ns": "test.c"}],
            "ordered": false,
            "lsid": lsid(21),
            "txnNumber": 1_i64,
            "$db": "admin",
        },
    )
    .await;
    assert_eq!(bulk_summary(&reply), [2, 1, 0, 0, 0, 0], "{reply:?}");
    let results = bulk_results(&reply);
    let message = "Cannot use retryable writes with multi=true";
    assert_eq!(
        results[0],
        doc! {"ok": 0.0, "idx": 0, "code": 72, "errmsg": message, "n": 0, "nModified": 0}
    );
    assert_eq!(
        results[1],
        doc! {"ok": 0.0, "idx": 1, "code": 72, "errmsg": message, "n": 0}
    );
    assert_eq!(results[2], doc! {"ok": 1.0, "idx": 2, "n": 1});
    // Without txnNumber the same ops are no retryable write: multi runs.
    let plain = raw_command(
        &mut stream,
        doc! {
            "bulkWrite": 1,
            "ops": [{"update": 0, "filter": {}, "updateMods": {"$set": {"x": 1}}, "multi": true}],
            "nsInfo": [{"ns": "test.c"}],
            "$db": "admin",
        },
    )
    .await;
    assert_eq!(bulk_summary(&plain), [0, 0, 1, 1, 0, 0]);
    server.stop().await;
}

/// `stmtIds` numbers the ops (bulk_write_common.cpp `getStatementId`), checked as
/// `validateRequest` checks it.
#[tokio::test]
async fn bulk_write_stmt_ids_number_the_statements() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let command = doc! {
        "bulkWrite": 1,
        "ops": [{"insert": 0, "document": {"_id": 1}}, {"insert": 0, "document": {"_id": 2}}],
        "nsInfo": [{"ns": "test.c"}],
        "stmtIds": [10, 20],
        "lsid": lsid(22),
        "txnNumber": 1_i64,
        "$db": "admin",
    };
    raw_command(&mut stream, command.clone()).await;
    let retried = raw_command(&mut stream, command.clone()).await;
    assert_eq!(bulk_summary(&retried), [0, 2, 0, 0, 0, 0]);
    assert_eq!(
        retried.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(10), Bson::Int32(20)]
    );
    let mut both = command.clone();
    both.insert("stmtId", 0);
    let error = raw_command(&mut stream, both).await;
    assert_eq!(error.get_i32("code"), Ok(72));
    assert!(error
        .get_str("errmsg")
        .unwrap()
        .starts_with("May not specify both stmtId and stmtIds in bulkWrite command. Got "));
    let mut short = command;
    short.insert("stmtIds", vec![Bson::Int32(10)]);
    let error = raw_command(&mut stream, short).await;
    assert_eq!(error.get_i32("code"), Ok(16));
    assert!(error.get_str("errmsg").unwrap().starts_with(
        "Number of statement ids must match the number of batch entries. Got 1 statement ids but 2 operations."
    ));
    server.stop().await;
}

/// The 3.x driver's `Client::bulk_write` is a retryable write against a replica set (it sends
/// `txnNumber`); its session then shows in `config.transactions`.
#[tokio::test]
async fn the_driver_bulk_write_is_retryable() {
    use mongodb::options::{InsertOneModel, UpdateOneModel, WriteModel};
    let server = TestServer::start_with(rs_config()).await;
    let uri = format!(
        "mongodb://127.0.0.1:{}/?replicaSet=rs0&serverSelectionTimeoutMS=5000",
        server.addr.port()
    );
    let client = Client::with_options(ClientOptions::parse(&uri).await.unwrap()).unwrap();
    let ns = mongodb::Namespace::new("test", "c");
    let models: Vec<WriteModel> = vec![
        InsertOneModel::builder()
            .namespace(ns.clone())
            .document(doc! {"_id": 1})
            .build()
            .into(),
        UpdateOneModel::builder()
            .namespace(ns.clone())
            .filter(doc! {"_id": 1})
            .update(doc! {"$inc": {"x": 1}})
            .build()
            .into(),
    ];
    let result = client.bulk_write(models).await.unwrap();
    assert_eq!(result.inserted_count, 1);
    assert_eq!(result.modified_count, 1);
    let sessions = client
        .database("config")
        .collection::<Document>("transactions")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(sessions, 1);
    server.stop().await;
}

/// jstests/replsets/retryable_writes_direct_write_to_config_transactions.js: one
/// `config.transactions` document per session that ran a retryable write, found by `_id.id`;
/// its shape is mongod's `sessionTxnRecord` (session_txn_record.idl).
#[tokio::test]
async fn config_transactions_lists_the_sessions_that_wrote() {
    let server = TestServer::start_with(rs_config()).await;
    let mut stream = connect(&server).await;
    let mut write_times = Vec::new();
    for (session, txn_number) in [(30, 1_i64), (31, 4_i64), (30, 2_i64)] {
        let reply = raw_command(
            &mut stream,
            doc! {"update": "user", "updates": [{"q": {"_id": i32::from(session)}, "u": {"$inc": {"x": 1}}, "upsert": true}], "lsid": lsid(session), "txnNumber": txn_number},
        )
        .await;
        assert_eq!(reply.get_i32("n"), Ok(1), "{reply:?}");
        write_times.push(timestamp(&reply, "operationTime"));
    }
    let id = |byte: u8| Binary {
        subtype: BinarySubtype::Uuid,
        bytes: vec![byte; 16],
    };
    for (session, txn_number, time) in [(30, 2_i64, write_times[2]), (31, 4_i64, write_times[1])] {
        let found = raw_command(
            &mut stream,
            doc! {"find": "transactions", "filter": {"_id.id": id(session)}, "$db": "config"},
        )
        .await;
        let batch = common::first_batch(&found);
        assert_eq!(batch.len(), 1, "{found:?}");
        let record = &batch[0];
        assert_eq!(
            record.keys().collect::<Vec<_>>(),
            ["_id", "txnNum", "lastWriteOpTime", "lastWriteDate"]
        );
        // Without authentication the uid is sha256 of no bytes.
        let uid = Binary {
            subtype: BinarySubtype::Generic,
            bytes: (0..32)
                .map(|at| {
                    u8::from_str_radix(
                        &"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
                            [at * 2..at * 2 + 2],
                        16,
                    )
                    .unwrap()
                })
                .collect(),
        };
        assert_eq!(
            record.get_document("_id").unwrap(),
            &doc! {"id": id(session), "uid": uid}
        );
        assert_eq!(record.get_i64("txnNum"), Ok(txn_number));
        let op_time = record.get_document("lastWriteOpTime").unwrap();
        assert_eq!(timestamp(op_time, "ts"), time);
        assert_eq!(op_time.get_i64("t"), Ok(1));
        assert!(record.get_datetime("lastWriteDate").is_ok());
    }
    // countDocuments (an aggregate) and count see the same two.
    let client = server.client();
    let transactions = client
        .database("config")
        .collection::<Document>("transactions");
    assert_eq!(transactions.count_documents(doc! {}).await.unwrap(), 2);
    let count = raw_command(
        &mut stream,
        doc! {"count": "transactions", "query": {"txnNum": {"$gt": 2_i64}}, "$db": "config"},
    )
    .await;
    assert_eq!(count.get_i32("n"), Ok(1));
    // Writes are refused: the records change only with retryable writes.
    for write in [
        doc! {"insert": "transactions", "documents": [{"_id": "String"}], "$db": "config"},
        doc! {"delete": "transactions", "deletes": [{"q": {}, "limit": 0}], "$db": "config"},
    ] {
        let reply = raw_command(&mut stream, write).await;
        assert_eq!(reply.get_i32("code"), Ok(238), "{reply:?}");
    }
    server.stop().await;
}
