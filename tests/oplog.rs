//! The oplog through the driver: with `--oplogSize` the server keeps `local.oplog.rs`, readable
//! with `find` as mongod's (entry fields as src/mongo/db/repl/oplog_entry.idl names them), one
//! entry per written document in commit order, catalog commands as `c` entries, and clients may
//! not write to it (jstests/replsets/no_oplog_writes… : 73 InvalidNamespace).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, test_config, TestServer};
use tideway::Config;

#[tokio::test]
async fn every_write_is_an_oplog_entry_readable_with_find() {
    let server = TestServer::start_with(Config {
        oplog_size_mb: Some(16),
        ..test_config()
    })
    .await;
    let client = server.client();
    let db = client.database("app");
    db.run_command(
        doc! {"insert": "users", "documents": [{"_id": 1, "name": "a"}, {"_id": 2, "name": "b"}]},
    )
    .await
    .unwrap();
    db.run_command(doc! {"update": "users", "updates": [{"q": {"_id": 1}, "u": {"$set": {"name": "z"}, "$unset": {"none": 1}}}]})
        .await
        .unwrap();
    db.run_command(doc! {"update": "users", "updates": [{"q": {"_id": 2}, "u": {"name": "y"}}]})
        .await
        .unwrap();
    db.run_command(doc! {"delete": "users", "deletes": [{"q": {"_id": 2}, "limit": 1}]})
        .await
        .unwrap();
    db.run_command(doc! {"drop": "users"}).await.unwrap();
    let local = client.database("local");
    let reply = local
        .run_command(
            doc! {"find": "oplog.rs", "filter": {"ns": {"$in": ["app.users", "app.$cmd"]}}},
        )
        .await
        .unwrap();
    let entries = first_batch(&reply);
    let summary: Vec<(String, Document)> = entries
        .iter()
        .map(|entry| {
            (
                entry.get_str("op").unwrap().to_string(),
                entry.get_document("o").unwrap().clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "c".into(),
                doc! {"create": "users", "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
            ),
            ("i".into(), doc! {"_id": 1, "name": "a"}),
            ("i".into(), doc! {"_id": 2, "name": "b"}),
            ("u".into(), doc! {"$v": 2, "diff": {"u": {"name": "z"}}}),
            ("u".into(), doc! {"_id": 2, "name": "y"}),
            ("d".into(), doc! {"_id": 2}),
            ("c".into(), doc! {"drop": "users"}),
        ]
    );
    for entry in &entries {
        assert!(
            matches!(entry.get("ts"), Some(Bson::Timestamp(_))),
            "{entry}"
        );
        assert!(
            matches!(entry.get("wall"), Some(Bson::DateTime(_))),
            "{entry}"
        );
        assert_eq!(entry.get_i64("t"), Ok(1));
    }
    assert_eq!(entries[3].get_document("o2").unwrap(), &doc! {"_id": 1});
    let (code, _, message) = command_error(
        local
            .run_command(doc! {"insert": "oplog.rs", "documents": [{"op": "n"}]})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (73, "cannot write to local.oplog.rs")
    );
}

#[tokio::test]
async fn without_an_oplog_size_there_is_no_oplog() {
    let server = TestServer::start().await;
    let client = server.client();
    client
        .database("app")
        .run_command(doc! {"insert": "users", "documents": [{"_id": 1}]})
        .await
        .unwrap();
    let names = client
        .database("local")
        .list_collection_names()
        .await
        .unwrap();
    assert!(!names.contains(&"oplog.rs".to_string()), "{names:?}");
}

/// Replica-set mode keeps an oplog (of `DEFAULT_OPLOG_SIZE_MB` without `--oplogSize`), as a
/// replica-set member's: every write is in it.
#[tokio::test]
async fn replica_set_mode_keeps_an_oplog() {
    let server = TestServer::start_with(Config {
        repl_set: Some("rs0".to_owned()),
        ..test_config()
    })
    .await;
    let client = server.client();
    client
        .database("app")
        .run_command(doc! {"insert": "users", "documents": [{"_id": 1}]})
        .await
        .unwrap();
    let reply = client
        .database("local")
        .run_command(doc! {"find": "oplog.rs", "filter": {"op": "i", "ns": "app.users"}})
        .await
        .unwrap();
    assert_eq!(first_batch(&reply).len(), 1);
    let stats = client
        .database("local")
        .run_command(doc! {"collStats": "oplog.rs"})
        .await
        .unwrap();
    assert_eq!(
        stats.get("maxSize").and_then(Bson::as_i64),
        Some(tideway::config::DEFAULT_OPLOG_SIZE_MB as i64 * 1024 * 1024)
    );
}

/// mongod's oplog takes an entry of any size: a write larger than the whole oplog is recorded
/// (alone, the older entries rolled over) instead of failing.
#[tokio::test]
async fn a_write_larger_than_the_oplog_is_still_logged() {
    let server = TestServer::start_with(Config {
        oplog_size_mb: Some(1),
        ..test_config()
    })
    .await;
    let client = server.client();
    let big = "x".repeat(2 * 1024 * 1024);
    client
        .database("app")
        .run_command(doc! {"insert": "big", "documents": [{"_id": 1, "pad": big}]})
        .await
        .expect("the write succeeds");
    let reply = client
        .database("local")
        .run_command(doc! {"find": "oplog.rs", "filter": {"op": "i", "ns": "app.big"}, "projection": {"o._id": 1}})
        .await
        .unwrap();
    assert_eq!(first_batch(&reply).len(), 1);
}

#[tokio::test]
async fn the_oplog_cannot_be_dropped() {
    let server = TestServer::start_with(Config {
        oplog_size_mb: Some(16),
        ..test_config()
    })
    .await;
    let local = server.client().database("local");
    let (code, _, message) = command_error(local.run_command(doc! {"drop": "oplog.rs"}).await);
    assert_eq!(
        (code, message.as_str()),
        (
            5255001,
            "can't drop oplog on storage engines that support replSetResizeOplog command"
        )
    );
    server.stop().await;
    let server = TestServer::start_with(Config {
        repl_set: Some("rs0".to_owned()),
        ..test_config()
    })
    .await;
    let local = server.client().database("local");
    let (code, _, message) = command_error(local.run_command(doc! {"drop": "oplog.rs"}).await);
    assert_eq!(
        (code, message.as_str()),
        (5255000, "can't drop live oplog while replicating")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_tailable_await_data_cursor_on_the_oplog_wakes_for_a_new_entry() {
    let server = TestServer::start_with(Config {
        oplog_size_mb: Some(16),
        ..test_config()
    })
    .await;
    let client = server.client();
    let local = client.database("local");
    let opened = local
        .run_command(doc! {"find": "oplog.rs", "filter": {"ns": "app.tail"}, "tailable": true, "awaitData": true})
        .await
        .unwrap();
    let id = opened
        .get_document("cursor")
        .unwrap()
        .get_i64("id")
        .unwrap();
    assert_ne!(id, 0);
    let writer = {
        let db = client.database("app");
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            // An ordinary (not capped) collection: only the engine's oplog append can wake the
            // cursor.
            db.run_command(doc! {"insert": "tail", "documents": [{"_id": 1}]})
                .await
                .unwrap();
        })
    };
    // The wait (up to 30 s) ends with the new entry, not with an empty batch at the timeout.
    let more = local
        .run_command(doc! {"getMore": id, "collection": "oplog.rs", "maxTimeMS": 30_000})
        .await
        .unwrap();
    writer.await.unwrap();
    let batch = more
        .get_document("cursor")
        .unwrap()
        .get_array("nextBatch")
        .unwrap();
    let ops: Vec<&str> = batch
        .iter()
        .map(|entry| entry.as_document().unwrap().get_str("op").unwrap())
        .collect();
    assert!(ops.contains(&"i"), "{more}");
    server.stop().await;
}
