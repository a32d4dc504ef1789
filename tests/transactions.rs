//! Multi-document transactions in replica-set mode, through the official driver and raw
//! commands. Expected values come from MongoDB: the manual's transactions pages (snapshot
//! isolation, `TransientTransactionError`, DDL in transactions), mongod's transaction
//! participant and validation (transaction_participant.cpp, transaction_validation.cpp,
//! commands.cpp `canUseTransactions`, write_ops_exec.cpp `handleError`) and jstests/core/txns
//! (multi_statement_transaction_command_args.js, finished_transaction_error_handling.js,
//! multi_statement_transaction_write_error.js, create_indexes.js, kill_sessions_kills_transaction.js,
//! abort_expired_transaction.js).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use common::raw::{connect, kind0, op_msg, roundtrip};
use common::{test_config, TestServer};
use futures::FutureExt;
use mongodb::{Client, ClientSession, Collection};
use tideway::Config;
use tideway_base::clock::{Clock, ManualClock};

const T0: i64 = 1_700_000_000_000;

fn rs_config() -> Config {
    Config {
        repl_set: Some("rs0".to_owned()),
        set_parameter: vec![
            "enableTestCommands=1".into(),
            "ttlMonitorEnabled=false".into(),
        ],
        ..test_config()
    }
}

async fn rs_server() -> (TestServer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let server = TestServer::start_with_clock(rs_config(), clock.clone()).await;
    (server, clock)
}

fn labels(error: &mongodb::error::Error) -> Vec<String> {
    error.labels().iter().cloned().collect()
}

fn code(error: &mongodb::error::Error) -> i32 {
    match *error.kind {
        mongodb::error::ErrorKind::Command(ref command) => command.code,
        ref other => panic!("not a command error: {other:?}"),
    }
}

async fn ids(coll: &Collection<Document>, session: Option<&mut ClientSession>) -> Vec<Bson> {
    use futures::TryStreamExt;
    let find = coll.find(doc! {}).sort(doc! {"_id": 1});
    let documents: Vec<Document> = match session {
        Some(session) => {
            let mut cursor = find.session(&mut *session).await.unwrap();
            cursor.stream(session).try_collect().await.unwrap()
        }
        None => find.await.unwrap().try_collect().await.unwrap(),
    };
    documents
        .into_iter()
        .map(|document| document.get("_id").cloned().unwrap())
        .collect()
}

#[tokio::test]
async fn committed_writes_appear_together_and_aborted_ones_never() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let db = client.database("bank");
    let accounts: Collection<Document> = db.collection("accounts");
    let log: Collection<Document> = db.collection("log");
    accounts
        .insert_many([
            doc! {"_id": "a", "balance": 100},
            doc! {"_id": "b", "balance": 0},
        ])
        .await
        .unwrap();

    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    accounts
        .update_one(doc! {"_id": "a"}, doc! {"$inc": {"balance": -30}})
        .session(&mut session)
        .await
        .unwrap();
    accounts
        .update_one(doc! {"_id": "b"}, doc! {"$inc": {"balance": 30}})
        .session(&mut session)
        .await
        .unwrap();
    log.insert_one(doc! {"_id": 1, "moved": 30})
        .session(&mut session)
        .await
        .unwrap();
    // The transaction sees its own writes (the log collection it created included)...
    let inside = accounts
        .find_one(doc! {"_id": "a"})
        .session(&mut session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inside.get_i32("balance"), Ok(70));
    assert_eq!(ids(&log, Some(&mut session)).await, vec![Bson::Int32(1)]);
    // ...nobody else does before the commit.
    let outside = accounts.find_one(doc! {"_id": "a"}).await.unwrap().unwrap();
    assert_eq!(outside.get_i32("balance"), Ok(100));
    assert!(ids(&log, None).await.is_empty());
    session.commit_transaction().await.unwrap();
    let a = accounts.find_one(doc! {"_id": "a"}).await.unwrap().unwrap();
    let b = accounts.find_one(doc! {"_id": "b"}).await.unwrap().unwrap();
    assert_eq!(
        (a.get_i32("balance"), b.get_i32("balance")),
        (Ok(70), Ok(30))
    );
    assert_eq!(ids(&log, None).await, vec![Bson::Int32(1)]);

    session.start_transaction().await.unwrap();
    accounts
        .delete_one(doc! {"_id": "a"})
        .session(&mut session)
        .await
        .unwrap();
    log.insert_one(doc! {"_id": 2})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(
        ids(&accounts, Some(&mut session)).await,
        vec![Bson::from("b")]
    );
    session.abort_transaction().await.unwrap();
    assert_eq!(
        ids(&accounts, None).await,
        vec![Bson::from("a"), Bson::from("b")]
    );
    assert_eq!(ids(&log, None).await, vec![Bson::Int32(1)]);
    // mongod's serverStatus.transactions counts them.
    let status = client
        .database("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .unwrap();
    let metrics = status.get_document("transactions").unwrap();
    assert_eq!(
        metrics,
        &doc! {"currentActive": 0_i64, "currentInactive": 0_i64, "currentOpen": 0_i64,
        "totalAborted": 1_i64, "totalCommitted": 1_i64, "totalStarted": 2_i64}
    );
    server.stop().await;
}

#[tokio::test]
async fn the_drivers_with_transaction_helper_commits_and_aborts() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("orders");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session
        .start_transaction()
        .and_run(coll.clone(), |session, coll| {
            async move {
                coll.insert_one(doc! {"_id": 1})
                    .session(&mut *session)
                    .await?;
                coll.insert_one(doc! {"_id": 2})
                    .session(&mut *session)
                    .await?;
                Ok(())
            }
            .boxed()
        })
        .await
        .unwrap();
    assert_eq!(
        ids(&coll, None).await,
        vec![Bson::Int32(0), Bson::Int32(1), Bson::Int32(2)]
    );
    // A callback that fails aborts: nothing of it stays.
    let failed = session
        .start_transaction()
        .and_run(coll.clone(), |session, coll| {
            async move {
                coll.insert_one(doc! {"_id": 3})
                    .session(&mut *session)
                    .await?;
                // A duplicate _id: the statement fails and the transaction is aborted.
                coll.insert_one(doc! {"_id": 0})
                    .session(&mut *session)
                    .await?;
                Ok(())
            }
            .boxed()
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(
        ids(&coll, None).await,
        vec![Bson::Int32(0), Bson::Int32(1), Bson::Int32(2)]
    );
    server.stop().await;
}

#[tokio::test]
async fn reads_see_the_snapshot_not_later_commits() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("items");
    coll.insert_many((0..5).map(|i| doc! {"_id": i, "v": i}))
        .await
        .unwrap();
    coll.create_index(mongodb::IndexModel::builder().keys(doc! {"v": 1}).build())
        .await
        .unwrap();
    let mut session = client.start_session().await.unwrap();
    session
        .start_transaction()
        .read_concern(mongodb::options::ReadConcern::snapshot())
        .await
        .unwrap();
    assert_eq!(ids(&coll, Some(&mut session)).await.len(), 5);
    // Committed outside after the snapshot: invisible inside.
    coll.insert_one(doc! {"_id": 10, "v": 2}).await.unwrap();
    coll.update_one(doc! {"_id": 0}, doc! {"$set": {"v": 100}})
        .await
        .unwrap();
    assert_eq!(ids(&coll, Some(&mut session)).await.len(), 5);
    let zero = coll
        .find_one(doc! {"_id": 0})
        .session(&mut session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(zero.get_i32("v"), Ok(0));
    // An index range read inside merges the transaction's own writes in index order.
    coll.insert_one(doc! {"_id": 20, "v": 2})
        .session(&mut session)
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 3})
        .session(&mut session)
        .await
        .unwrap();
    let in_range: Vec<Document> = {
        use futures::TryStreamExt;
        let mut cursor = coll
            .find(doc! {"v": {"$gte": 1, "$lte": 4}})
            .sort(doc! {"v": 1, "_id": 1})
            .hint(mongodb::options::Hint::Keys(doc! {"v": 1}))
            .batch_size(1)
            .session(&mut session)
            .await
            .unwrap();
        cursor.stream(&mut session).try_collect().await.unwrap()
    };
    let seen: Vec<(i32, i32)> = in_range
        .iter()
        .map(|d| (d.get_i32("v").unwrap(), d.get_i32("_id").unwrap()))
        .collect();
    assert_eq!(seen, vec![(1, 1), (2, 2), (2, 20), (4, 4)]);
    let count = coll
        .count_documents(doc! {})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(count, 5);
    session.commit_transaction().await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 6);
    server.stop().await;
}

#[tokio::test]
async fn a_write_conflict_is_transient_and_retrying_succeeds() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("stock");
    coll.insert_one(doc! {"_id": "widget", "qty": 10})
        .await
        .unwrap();
    let mut first = client.start_session().await.unwrap();
    let mut second = client.start_session().await.unwrap();
    first.start_transaction().await.unwrap();
    second.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -1}})
        .session(&mut first)
        .await
        .unwrap();
    // The second writer of the same document loses at once.
    let conflict = coll
        .update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -2}})
        .session(&mut second)
        .await
        .unwrap_err();
    assert_eq!(code(&conflict), 112);
    assert!(labels(&conflict).contains(&"TransientTransactionError".to_string()));
    let mongodb::error::ErrorKind::Command(ref command) = *conflict.kind else {
        panic!("{conflict:?}")
    };
    assert_eq!(
        command.message,
        "WriteConflict error: this operation conflicted with another operation. Please retry your operation or multi-document transaction."
    );
    // Its transaction is gone.
    let gone = second.commit_transaction().await.unwrap_err();
    assert_eq!(code(&gone), 251);
    first.commit_transaction().await.unwrap();
    // Retried from the start, it sees the first commit and succeeds.
    second.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -2}})
        .session(&mut second)
        .await
        .unwrap();
    second.commit_transaction().await.unwrap();
    let widget = coll
        .find_one(doc! {"_id": "widget"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(widget.get_i32("qty"), Ok(7));

    // A write outside any transaction is never blocked; the transaction that read the older
    // version fails at its commit, with the label that makes drivers retry it.
    first.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$set": {"qty": 0}})
        .session(&mut first)
        .await
        .unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$set": {"qty": 50}})
        .await
        .unwrap();
    let lost = first.commit_transaction().await.unwrap_err();
    assert_eq!(code(&lost), 112);
    assert!(labels(&lost).contains(&"TransientTransactionError".to_string()));
    let widget = coll
        .find_one(doc! {"_id": "widget"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(widget.get_i32("qty"), Ok(50));
    server.stop().await;
}

/// The drivers' convenient API (`with_transaction`) retries a transaction whose statement failed
/// with `TransientTransactionError`: the retry, and any later transaction, must be able to write
/// the document the failed statement tried to write (mongod releases everything an aborted
/// transaction held).
#[tokio::test]
async fn a_write_that_lost_to_a_later_commit_blocks_no_later_transaction() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("stock");
    coll.insert_one(doc! {"_id": "widget", "qty": 10})
        .await
        .unwrap();
    let mut reader = client.start_session().await.unwrap();
    let mut other = client.start_session().await.unwrap();
    reader.start_transaction().await.unwrap();
    // The reader's snapshot is pinned by its first statement.
    coll.find_one(doc! {"_id": "widget"})
        .session(&mut reader)
        .await
        .unwrap();
    other.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -1}})
        .session(&mut other)
        .await
        .unwrap();
    other.commit_transaction().await.unwrap();
    // Changed since the reader's snapshot: its write conflicts and its transaction ends.
    let conflict = coll
        .update_one(doc! {"_id": "widget"}, doc! {"$set": {"qty": 8}})
        .session(&mut reader)
        .await
        .unwrap_err();
    assert_eq!(code(&conflict), 112);
    assert!(labels(&conflict).contains(&"TransientTransactionError".to_string()));
    // As `with_transaction` does before retrying (the driver ignores the server's 251 here).
    reader.abort_transaction().await.unwrap();
    // The retry and another session's transaction both write the document.
    reader.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -2}})
        .session(&mut reader)
        .await
        .unwrap();
    reader.commit_transaction().await.unwrap();
    other.start_transaction().await.unwrap();
    coll.update_one(doc! {"_id": "widget"}, doc! {"$inc": {"qty": -3}})
        .session(&mut other)
        .await
        .unwrap();
    other.commit_transaction().await.unwrap();
    let widget = coll
        .find_one(doc! {"_id": "widget"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(widget.get_i32("qty"), Ok(4));
    server.stop().await;
}

#[tokio::test]
async fn an_expiry_during_the_transaction_keeps_the_snapshot_and_conflicts_the_write() {
    let (server, clock) = rs_server().await;
    let client = server.client();
    let db = client.database("cache");
    let coll: Collection<Document> = db.collection("c");
    // Cosmos-style default TTL of 10 s.
    db.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 10}]})
        .await
        .unwrap();
    coll.insert_many([doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}])
        .await
        .unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    assert_eq!(ids(&coll, Some(&mut session)).await.len(), 2);
    // Both expire while the transaction runs: gone outside, as the snapshot saw them inside.
    clock.advance_ms(10_000);
    assert!(ids(&coll, None).await.is_empty());
    assert_eq!(
        ids(&coll, Some(&mut session)).await,
        vec![Bson::Int32(1), Bson::Int32(2)]
    );
    // Writing one of them is allowed inside, but the commit finds it expired: a conflict.
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"n": 10}})
        .session(&mut session)
        .await
        .unwrap();
    let conflict = session.commit_transaction().await.unwrap_err();
    assert_eq!(code(&conflict), 112);
    assert!(labels(&conflict).contains(&"TransientTransactionError".to_string()));
    // The retry starts after the expiry and sees nothing to update.
    session.start_transaction().await.unwrap();
    let result = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"n": 10}})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(result.matched_count, 0);
    session.commit_transaction().await.unwrap();
    assert!(ids(&coll, None).await.is_empty());
    server.stop().await;
}

fn lsid(byte: u8) -> Document {
    doc! {"id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![byte; 16] }}
}

/// Runs `command` on `db` with the session fields of transaction `txn` of session `byte`.
async fn statement(
    stream: &mut tokio::net::TcpStream,
    db: &str,
    mut command: Document,
    byte: u8,
    txn: i64,
    start: bool,
) -> Document {
    command.insert("$db", db);
    command.insert("lsid", lsid(byte));
    command.insert("txnNumber", txn);
    if start {
        command.insert("startTransaction", true);
    }
    command.insert("autocommit", false);
    roundtrip(stream, &op_msg(1, 0, &[kind0(&command)]))
        .await
        .document
}

fn error_of(reply: &Document) -> (i32, String) {
    assert_eq!(reply.get_f64("ok"), Ok(0.0), "{reply}");
    (
        reply.get_i32("code").unwrap(),
        reply.get_str("errmsg").unwrap().to_string(),
    )
}

fn reply_labels(reply: &Document) -> Vec<String> {
    reply
        .get_array("errorLabels")
        .map(|labels| {
            labels
                .iter()
                .filter_map(|label| label.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn session_fields_and_states_get_mongods_errors() {
    let (server, _clock) = rs_server().await;
    let mut stream = connect(&server).await;
    let s = &mut stream;
    let insert = |id: i32| doc! {"insert": "t", "documents": [{"_id": id}]};

    // autocommit: true, startTransaction: false, autocommit without txnNumber.
    let mut bad = insert(1);
    bad.extend(doc! {"$db": "app", "lsid": lsid(1), "txnNumber": 1_i64, "autocommit": true});
    let reply = roundtrip(s, &op_msg(1, 0, &[kind0(&bad)])).await.document;
    assert_eq!(
        error_of(&reply),
        (72, "Specifying autocommit=true is not allowed.".into())
    );
    let reply = statement(
        s,
        "app",
        doc! {"find": "t", "startTransaction": false},
        1,
        1,
        false,
    )
    .await;
    assert_eq!(error_of(&reply).0, 72);

    // A transaction: count and drop are refused without ending it; a second readConcern and a
    // writeConcern likewise.
    let reply = statement(s, "app", insert(1), 1, 1, true).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let reply = statement(s, "app", doc! {"count": "t"}, 1, 1, false).await;
    assert_eq!(error_of(&reply).0, 263);
    assert!(error_of(&reply)
        .1
        .starts_with("Cannot run 'count' in a multi-document transaction."));
    let reply = statement(s, "app", doc! {"drop": "t"}, 1, 1, false).await;
    assert_eq!(
        error_of(&reply),
        (
            263,
            "Cannot run 'drop' in a multi-document transaction.".into()
        )
    );
    let reply = statement(
        s,
        "app",
        doc! {"find": "t", "readConcern": {"level": "local"}},
        1,
        1,
        false,
    )
    .await;
    assert_eq!(
        error_of(&reply),
        (
            72,
            "Only the first command in a transaction may specify a readConcern".into()
        )
    );
    let reply = statement(
        s,
        "app",
        doc! {"find": "t", "writeConcern": {"w": 1}},
        1,
        1,
        false,
    )
    .await;
    assert_eq!(
        error_of(&reply),
        (
            72,
            "writeConcern is not allowed within a multi-statement transaction".into()
        )
    );
    let reply = statement(
        s,
        "app",
        doc! {"aggregate": "t", "pipeline": [{"$out": "u"}], "cursor": {}},
        1,
        2,
        true,
    )
    .await;
    assert_eq!(error_of(&reply).0, 263);
    // A lower txnNumber is too old; the transaction of number 1 was replaced by 2 (aborted).
    let reply = statement(s, "app", doc! {"find": "t"}, 1, 1, false).await;
    assert_eq!(error_of(&reply).0, 225);
    let reply = statement(s, "admin", doc! {"commitTransaction": 1}, 1, 2, false).await;
    assert_eq!(
        error_of(&reply),
        (
            251,
            "Transaction with { txnNumber: 2 } has been aborted.".into()
        )
    );
    assert_eq!(reply_labels(&reply), vec!["TransientTransactionError"]);
    // Starting again at the active number: 117.
    let reply = statement(s, "app", insert(2), 1, 2, true).await;
    assert_eq!(error_of(&reply).0, 117);

    // Commit, then a retried commit answers ok, and an abort or statement finds it committed.
    let reply = statement(s, "app", insert(3), 1, 3, true).await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    for _ in 0..2 {
        let reply = statement(s, "admin", doc! {"commitTransaction": 1}, 1, 3, false).await;
        assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    }
    let reply = statement(s, "admin", doc! {"abortTransaction": 1}, 1, 3, false).await;
    assert_eq!(
        error_of(&reply),
        (
            256,
            "Transaction with { txnNumber: 3 } has been committed.".into()
        )
    );
    let reply = statement(s, "app", doc! {"find": "t"}, 1, 4, false).await;
    assert_eq!(error_of(&reply).0, 251);

    // A duplicate key is a write error (ok: 1, no label) and ends the transaction.
    let reply = statement(s, "app", insert(10), 1, 5, true).await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    let reply = statement(s, "app", insert(3), 1, 5, false).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(errors[0].as_document().unwrap().get_i32("code"), Ok(11000));
    assert!(reply_labels(&reply).is_empty());
    let reply = statement(s, "app", doc! {"find": "t"}, 1, 5, false).await;
    assert_eq!(error_of(&reply).0, 251);
    let found = roundtrip(
        s,
        &op_msg(
            1,
            0,
            &[kind0(
                &doc! {"find": "t", "filter": {"_id": 10}, "$db": "app"},
            )],
        ),
    )
    .await
    .document;
    assert!(common::first_batch(&found).is_empty());

    // commitTransaction outside a transaction, or on another database.
    let reply = roundtrip(
        s,
        &op_msg(
            1,
            0,
            &[kind0(
                &doc! {"commitTransaction": 1, "$db": "admin", "lsid": lsid(1), "txnNumber": 6_i64},
            )],
        ),
    )
    .await
    .document;
    assert_eq!(error_of(&reply).0, 50768);
    let reply = statement(s, "app", doc! {"commitTransaction": 1}, 1, 5, false).await;
    assert_eq!(error_of(&reply).0, 13);
    server.stop().await;
}

#[tokio::test]
async fn collections_created_inside_appear_only_at_commit() {
    let (server, _clock) = rs_server().await;
    let mut stream = connect(&server).await;
    let s = &mut stream;
    let reply = statement(s, "ddl", doc! {"create": "fresh"}, 2, 1, true).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let reply = statement(s, "ddl", doc! {"createIndexes": "fresh", "indexes": [{"key": {"email": 1}, "name": "email_1", "unique": true}]}, 2, 1, false).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let reply = statement(
        s,
        "ddl",
        doc! {"insert": "fresh", "documents": [{"_id": 1, "email": "a@x"}]},
        2,
        1,
        false,
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(1), "{reply}");
    let listed = roundtrip(
        s,
        &op_msg(1, 0, &[kind0(&doc! {"listCollections": 1, "$db": "ddl"})]),
    )
    .await
    .document;
    assert!(common::first_batch(&listed).is_empty(), "{listed}");
    let reply = statement(s, "admin", doc! {"commitTransaction": 1}, 2, 1, false).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let indexes = roundtrip(
        s,
        &op_msg(1, 0, &[kind0(&doc! {"listIndexes": "fresh", "$db": "ddl"})]),
    )
    .await
    .document;
    let names: Vec<String> = common::first_batch(&indexes)
        .iter()
        .map(|index| index.get_str("name").unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["_id_", "email_1"]);
    // The unique index holds after the commit.
    let dup = roundtrip(
        s,
        &op_msg(
            1,
            0,
            &[kind0(
                &doc! {"insert": "fresh", "documents": [{"_id": 2, "email": "a@x"}], "$db": "ddl"},
            )],
        ),
    )
    .await
    .document;
    assert_eq!(dup.get_array("writeErrors").unwrap().len(), 1);
    // New indexes on an existing collection are refused (and end the transaction).
    let reply = statement(
        s,
        "ddl",
        doc! {"createIndexes": "fresh", "indexes": [{"key": {"x": 1}, "name": "x_1"}]},
        2,
        2,
        true,
    )
    .await;
    assert_eq!(
        error_of(&reply),
        (263, "Cannot create new indexes on existing collection ddl.fresh in a multi-document transaction.".into())
    );
    server.stop().await;
}

#[tokio::test]
async fn kill_sessions_and_the_lifetime_limit_abort_transactions() {
    let (server, clock) = rs_server().await;
    let mut stream = connect(&server).await;
    let s = &mut stream;
    let reply = statement(
        s,
        "app",
        doc! {"insert": "k", "documents": [{"_id": 1}]},
        3,
        1,
        true,
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    let killed = roundtrip(
        s,
        &op_msg(
            1,
            0,
            &[kind0(&doc! {"killSessions": [lsid(3)], "$db": "admin"})],
        ),
    )
    .await
    .document;
    assert_eq!(killed.get_f64("ok"), Ok(1.0));
    let reply = statement(s, "admin", doc! {"commitTransaction": 1}, 3, 1, false).await;
    assert_eq!(
        error_of(&reply),
        (
            251,
            "Transaction with { txnNumber: 1 } has been aborted.".into()
        )
    );
    // A committed transaction stays committed: killing its session does not undo the answer.
    let insert = doc! {"insert": "committed", "documents": [{"_id": 5}]};
    let reply = statement(s, "app", insert, 4, 1, true).await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    let commit = doc! {"commitTransaction": 1};
    let reply = statement(s, "admin", commit.clone(), 4, 1, false).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");
    let kill = doc! {"killSessions": [lsid(4)], "$db": "admin"};
    roundtrip(s, &op_msg(1, 0, &[kind0(&kill)])).await;
    let reply = statement(s, "admin", commit, 4, 1, false).await;
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "{reply}");

    let reply = statement(
        s,
        "app",
        doc! {"insert": "k", "documents": [{"_id": 2}]},
        3,
        2,
        true,
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    // 60 s (the default limit) pass on the server's clock; the checker runs every second.
    clock.advance_ms(60_000);
    let mut aborted = false;
    for _ in 0..40 {
        let reply = statement(s, "app", doc! {"find": "k"}, 3, 2, false).await;
        if reply.get_f64("ok") == Ok(0.0) {
            assert_eq!(error_of(&reply).0, 251);
            aborted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        aborted,
        "the transaction outlived transactionLifetimeLimitSeconds"
    );
    let found = roundtrip(
        s,
        &op_msg(1, 0, &[kind0(&doc! {"find": "k", "$db": "app"})]),
    )
    .await
    .document;
    assert!(common::first_batch(&found).is_empty());
    server.stop().await;
}

#[tokio::test]
async fn committed_transactions_reach_the_oplog_and_change_streams_with_their_session() {
    use futures::StreamExt;
    if common::on_postgres() {
        // A router over PostgreSQL keeps no oplog (issue 27).
        return;
    }
    let (server, _clock) = rs_server().await;
    let client: Client = server.client();
    let coll: Collection<Document> = client.database("app").collection("feed");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let other: Collection<Document> = client.database("app").collection("audit");
    let mut changes = client.database("app").watch().await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 1})
        .session(&mut session)
        .await
        .unwrap();
    other
        .insert_one(doc! {"_id": "a"})
        .session(&mut session)
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 0})
        .session(&mut session)
        .await
        .unwrap();
    session.commit_transaction().await.unwrap();
    // One event per statement, in statement order across collections, each naming the session.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(5), changes.next())
            .await
            .expect("an event arrives")
            .unwrap()
            .unwrap();
        assert!(event.lsid.is_some(), "{event:?}");
        assert!(event.txn_number.is_some(), "{event:?}");
        let coll = event
            .ns
            .map(|ns| ns.coll.unwrap_or_default())
            .unwrap_or_default();
        seen.push(format!("{:?} {coll}", event.operation_type));
    }
    assert_eq!(seen, vec!["Insert feed", "Insert audit", "Delete feed"]);
    let oplog: Collection<Document> = client.database("local").collection("oplog.rs");
    let entries = oplog
        .count_documents(
            doc! {"ns": "app.feed", "txnNumber": {"$exists": true}, "lsid": {"$exists": true}},
        )
        .await
        .unwrap();
    assert_eq!(entries, 2);
    server.stop().await;
}

/// A document's `v` as the model sees it: its values (one, or an array's elements).
fn values_of(document: &Document) -> Vec<i32> {
    match document.get("v") {
        Some(Bson::Int32(v)) => vec![*v],
        Some(Bson::Array(items)) => items.iter().filter_map(Bson::as_i32).collect(),
        _ => Vec::new(),
    }
}

/// `{v: {$gte: low, $lte: high}}` as MongoDB matches it: for an array, some element satisfies
/// each bound (not necessarily the same one).
fn in_model_range(document: &Document, low: i32, high: i32) -> bool {
    let values = values_of(document);
    values.iter().any(|v| *v >= low) && values.iter().any(|v| *v <= high)
}

#[tokio::test]
async fn reads_inside_a_transaction_match_a_model_of_its_writes() {
    use futures::TryStreamExt;
    use std::collections::BTreeMap;
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let mut rng = common::Rng(0x7ea5_0001);
    for round in 0..6 {
        let coll: Collection<Document> = client.database("model").collection(&format!("c{round}"));
        coll.create_index(mongodb::IndexModel::builder().keys(doc! {"v": 1}).build())
            .await
            .unwrap();
        let value = |rng: &mut common::Rng| -> Bson {
            if rng.below(4) == 0 {
                Bson::Array(
                    (0..1 + rng.below(3))
                        .map(|_| Bson::Int32(rng.below(8) as i32))
                        .collect(),
                )
            } else {
                Bson::Int32(rng.below(8) as i32)
            }
        };
        let mut model: BTreeMap<i32, Document> = BTreeMap::new();
        for id in 0..25 {
            let document = doc! {"_id": id, "v": value(&mut rng)};
            model.insert(id, document.clone());
            coll.insert_one(document).await.unwrap();
        }
        let mut session = client.start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        for step in 0..40 {
            let id = rng.below(35) as i32;
            match rng.below(3) {
                0 => {
                    let document = doc! {"_id": id, "v": value(&mut rng)};
                    let inserted = coll
                        .insert_one(document.clone())
                        .session(&mut session)
                        .await;
                    if model.contains_key(&id) {
                        // A duplicate _id ends the transaction: the model rolls back to what
                        // is committed, and a fresh transaction goes on.
                        assert!(inserted.is_err(), "round {round} step {step}");
                        let _ = session.abort_transaction().await;
                        session.start_transaction().await.unwrap();
                        model.clear();
                        for committed in ids(&coll, Some(&mut session)).await {
                            let found = coll
                                .find_one(doc! {"_id": committed.clone()})
                                .session(&mut session)
                                .await
                                .unwrap()
                                .unwrap();
                            model.insert(committed.as_i32().unwrap(), found);
                        }
                        continue;
                    }
                    inserted.unwrap();
                    model.insert(id, document);
                }
                1 => {
                    let v = value(&mut rng);
                    let result = coll
                        .update_one(doc! {"_id": id}, doc! {"$set": {"v": v.clone()}})
                        .session(&mut session)
                        .await
                        .unwrap();
                    assert_eq!(result.matched_count, u64::from(model.contains_key(&id)));
                    if let Some(document) = model.get_mut(&id) {
                        document.insert("v", v);
                    }
                }
                _ => {
                    let result = coll
                        .delete_one(doc! {"_id": id})
                        .session(&mut session)
                        .await
                        .unwrap();
                    assert_eq!(result.deleted_count, u64::from(model.remove(&id).is_some()));
                }
            }
            let low = rng.below(8) as i32;
            let high = low + rng.below(4) as i32;
            let expected: Vec<Document> = model
                .values()
                .filter(|document| in_model_range(document, low, high))
                .cloned()
                .collect();
            for hint in [doc! {"v": 1}, doc! {"$natural": 1}] {
                let mut cursor = coll
                    .find(doc! {"v": {"$gte": low, "$lte": high}})
                    .sort(doc! {"_id": 1})
                    .hint(mongodb::options::Hint::Keys(hint.clone()))
                    .batch_size(3)
                    .session(&mut session)
                    .await
                    .unwrap();
                let got: Vec<Document> = cursor.stream(&mut session).try_collect().await.unwrap();
                assert_eq!(
                    got, expected,
                    "round {round} step {step} hint {hint} [{low}, {high}]"
                );
            }
            let counted = coll
                .count_documents(doc! {"v": {"$gte": low, "$lte": high}})
                .session(&mut session)
                .await
                .unwrap();
            assert_eq!(counted, expected.len() as u64, "round {round} step {step}");
            // The index order inside the transaction is the model's (v, _id) order of index keys.
            let mut cursor = coll
                .find(doc! {"v": {"$gte": low, "$lte": high}, "_id": {"$type": "int"}})
                .sort(doc! {"v": 1})
                .hint(mongodb::options::Hint::Keys(doc! {"v": 1}))
                .batch_size(2)
                .session(&mut session)
                .await
                .unwrap();
            let sorted: Vec<Document> = cursor.stream(&mut session).try_collect().await.unwrap();
            let mut got_ids: Vec<i32> = sorted.iter().map(|d| d.get_i32("_id").unwrap()).collect();
            got_ids.sort_unstable();
            let expected_ids: Vec<i32> =
                expected.iter().map(|d| d.get_i32("_id").unwrap()).collect();
            assert_eq!(
                got_ids, expected_ids,
                "round {round} step {step}: sorted by v"
            );
        }
        session.commit_transaction().await.unwrap();
        let committed: Vec<Document> = coll
            .find(doc! {})
            .sort(doc! {"_id": 1})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            committed,
            model.values().cloned().collect::<Vec<_>>(),
            "round {round}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_statement_waits_for_a_collection_held_exclusively_no_longer_than_the_lock_timeout() {
    let (server, _clock) = rs_server().await;
    let mut stream = connect(&server).await;
    let s = &mut stream;
    let reply = statement(
        s,
        "app",
        doc! {"insert": "held", "documents": [{"_id": 1}]},
        7,
        1,
        true,
    )
    .await;
    assert_eq!(reply.get_i32("n"), Ok(1));
    // What a TTL policy change or a capped conversion holds while it works.
    let ns = tideway_storage::Namespace::new("app", "held");
    let gate = server.state.policy_gates.exclusive(&ns).await;
    let reply = statement(s, "app", doc! {"find": "held"}, 7, 1, false).await;
    assert_eq!(
        error_of(&reply),
        (
            24,
            "Unable to acquire IX lock on 'app.held' within 5ms.".into()
        )
    );
    assert_eq!(reply_labels(&reply), vec!["TransientTransactionError"]);
    drop(gate);
    // The statement failed after the transaction resumed: it is aborted, as in mongod.
    let reply = statement(s, "admin", doc! {"commitTransaction": 1}, 7, 1, false).await;
    assert_eq!(error_of(&reply).0, 251);
    server.stop().await;
}

#[tokio::test]
async fn a_document_an_index_cannot_take_fails_its_statement() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("pairs");
    coll.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"a": 1, "b": 1})
            .build(),
    )
    .await
    .unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    // mongod: 171 CannotIndexParallelArrays, at the insert.
    let refused = coll
        .insert_one(doc! {"_id": 1, "a": [1, 2], "b": [3, 4]})
        .session(&mut session)
        .await
        .unwrap_err();
    let mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref error)) =
        *refused.kind
    else {
        panic!("{refused:?}")
    };
    assert_eq!(error.code, 171);
    server.stop().await;
}

#[tokio::test]
async fn unique_keys_are_checked_against_the_snapshot_and_the_transactions_own_writes() {
    let (server, _clock) = rs_server().await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("people");
    coll.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"email": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .unique(true)
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    coll.insert_one(doc! {"_id": 1, "email": "a@x"})
        .await
        .unwrap();
    let duplicate = |error: mongodb::error::Error| match *error.kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref e)) => e.code,
        ref other => panic!("{other:?}"),
    };
    let mut session = client.start_session().await.unwrap();
    // Taken in the snapshot.
    session.start_transaction().await.unwrap();
    let taken = coll
        .insert_one(doc! {"_id": 2, "email": "a@x"})
        .session(&mut session)
        .await
        .unwrap_err();
    assert_eq!(duplicate(taken), 11000);
    let _ = session.abort_transaction().await;
    // Taken by the transaction's own earlier insert; freed by its own update.
    session.start_transaction().await.unwrap();
    coll.insert_one(doc! {"_id": 3, "email": "b@x"})
        .session(&mut session)
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"email": "c@x"}})
        .session(&mut session)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 4, "email": "a@x"})
        .session(&mut session)
        .await
        .unwrap();
    let own = coll
        .insert_one(doc! {"_id": 5, "email": "b@x"})
        .session(&mut session)
        .await
        .unwrap_err();
    assert_eq!(duplicate(own), 11000);
    server.stop().await;
}
