//! Durability of the disk engine, end to end through the release-mode binary: restart after SIGTERM,
//! acknowledged writes surviving SIGKILL, and the `--dbpath` lock.

mod common;

use std::process::Command;

use bson::{doc, Document};
use common::process::{free_port, Process};
use futures::TryStreamExt;
use mongodb::IndexModel;

fn start(dbpath: &std::path::Path, extra: &[&str]) -> Process {
    Process::start_disk(dbpath, extra)
}

#[tokio::test]
async fn everything_is_back_after_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = server.client();
    let db = client.database("keep");
    db.run_command(doc! {"create": "opts", "idIndex": {"key": {"_id": 1}, "name": "_id_"}})
        .await
        .unwrap();
    let coll = db.collection::<Document>("docs");
    coll.insert_many(
        (0..500)
            .map(|i| doc! {"_id": i, "v": format!("value {i}")})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    coll.create_index(IndexModel::builder().keys(doc! {"v": 1}).build())
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 7}, doc! {"$set": {"changed": true}})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 8}).await.unwrap();
    let uuid_before = collection_info(&db, "opts").await;
    client.shutdown().await;
    server.terminate();

    let server = start(dir.path(), &[]);
    let client = server.client();
    let db = client.database("keep");
    let coll = db.collection::<Document>("docs");
    assert_eq!(coll.estimated_document_count().await.unwrap(), 499);
    assert_eq!(
        coll.find_one(doc! {"_id": 7})
            .await
            .unwrap()
            .unwrap()
            .get_bool("changed"),
        Ok(true)
    );
    assert!(coll.find_one(doc! {"_id": 8}).await.unwrap().is_none());
    assert_eq!(coll.list_index_names().await.unwrap(), vec!["_id_", "v_1"]);
    let found: Vec<Document> = coll
        .find(doc! {"v": "value 42"})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(collection_info(&db, "opts").await, uuid_before);
    client.shutdown().await;
    server.terminate();
}

/// The listCollections entry (options and uuid) of one collection.
async fn collection_info(db: &mongodb::Database, name: &str) -> Document {
    let reply = db
        .run_command(doc! {"listCollections": 1, "filter": {"name": name}})
        .await
        .unwrap();
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    batch[0].as_document().unwrap().clone()
}

#[tokio::test]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = 0;
    for round in 0..3 {
        let server = start(dir.path(), &[]);
        let client = server.client();
        let coll = client.database("crash").collection::<Document>("c");
        assert_eq!(
            coll.estimated_document_count().await.unwrap(),
            expected,
            "round {round}"
        );
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let coll = coll.clone();
                tokio::spawn(async move {
                    for i in 0..50 {
                        coll.insert_one(doc! {"round": round, "writer": writer, "i": i})
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        expected += 200;
        // Every insert above was acknowledged; kill before anything else can happen.
        server.kill();
    }
    let server = start(dir.path(), &[]);
    let coll = server
        .client()
        .database("crash")
        .collection::<Document>("c");
    assert_eq!(coll.estimated_document_count().await.unwrap(), expected);
    server.terminate();
}

#[tokio::test]
async fn a_second_server_on_the_same_dbpath_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path(), &[]);
    let output = Command::new(env!("CARGO_BIN_EXE_tideway"))
        .args(["--port", &free_port().to_string(), "--dbpath"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        format!("{stdout}{stderr}").contains("another tideway server is using --dbpath"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    first.terminate();
}
