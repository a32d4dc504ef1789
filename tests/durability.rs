//! Durability of the disk engine, end to end through the release-mode binary: restart after SIGTERM,
//! acknowledged writes surviving SIGKILL, and the `--dbpath` lock.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::options::{ClientOptions, ServerAddress};
use mongodb::{Client, IndexModel};

struct Process {
    child: Child,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(dbpath: &Path, extra: &[&str]) -> Process {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tideway"))
        .args(["--port", &port.to_string(), "--dbpath"])
        .arg(dbpath)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tideway");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "tideway did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    Process { child, port }
}

impl Process {
    fn client(&self) -> Client {
        let mut options = ClientOptions::default();
        options.hosts = vec![ServerAddress::Tcp {
            host: "127.0.0.1".into(),
            port: Some(self.port),
        }];
        options.direct_connection = Some(true);
        options.server_selection_timeout = Some(Duration::from_secs(5));
        Client::with_options(options).unwrap()
    }

    /// SIGTERM, then wait for a clean exit.
    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "graceful shutdown exits 0, got {exit:?}");
    }

    /// SIGKILL: no chance to flush anything.
    fn kill(mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
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
