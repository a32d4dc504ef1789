//! The PostgreSQL engine when its database goes away: a cluster of the test's own is stopped
//! abruptly (as a crash) and restarted under a write workload. While it is down, commands fail
//! with a retryable error (6 HostUnreachable, labelled RetryableWriteError on retryable
//! writes); afterwards every acknowledged write is there and the node serves again without a
//! restart. Needs PostgreSQL's binaries (`.ci/pg-cluster`); runs where the PostgreSQL tests run
//! (`TIDEWAY_TEST_PG_URI` set), required under `CI=true`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Document};
use mongodb::Collection;

use common::TestServer;
use tideway::config::StorageKind;
use tideway::Config;

/// A cluster started by `.ci/pg-cluster` in a temporary directory, stopped on drop.
struct OwnCluster {
    dir: PathBuf,
    uri: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/pg-cluster")
}

impl OwnCluster {
    fn start() -> OwnCluster {
        let dir = std::env::temp_dir().join(format!("tideway-fault-{}", uuid::Uuid::new_v4()));
        let output = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&dir)
            .output()
            .expect("pg-cluster runs");
        assert!(
            output.status.success(),
            "pg-cluster start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let uri = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        OwnCluster { dir, uri }
    }

    /// Stops the server as a crash would, keeps it down `down_secs`, starts it again.
    fn crash_and_restart(&self, down_secs: u32) {
        let status = Command::new("bash")
            .arg(script())
            .arg("restart")
            .arg(&self.dir)
            .arg(down_secs.to_string())
            .status()
            .expect("pg-cluster runs");
        assert!(status.success(), "pg-cluster restart");
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// Whether this environment runs the PostgreSQL tests (as `common::on_test_storage` decides).
fn postgres_tests_run() -> bool {
    if std::env::var("TIDEWAY_TEST_PG_URI").is_ok() {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "CI=true but TIDEWAY_TEST_PG_URI is unset: .ci/run starts a cluster and sets it"
    );
    eprintln!("TIDEWAY_TEST_PG_URI is unset: PostgreSQL fault test skipped");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_a_database_crash_and_the_node_serves_again() {
    if !postgres_tests_run() {
        return;
    }
    let cluster = tokio::task::spawn_blocking(OwnCluster::start)
        .await
        .unwrap();
    let config = Config {
        storage: StorageKind::Postgres,
        pg_uri: Some(cluster.uri.clone()),
        pg_pool_size: 8,
        ..common::test_config()
    };
    let server = TestServer::start_with(config).await;
    let client = server.client();
    let coll: Collection<Document> = client.database("app").collection("events");
    coll.insert_one(doc! {"_id": "first"}).await.unwrap();

    let acknowledged = Arc::new(Mutex::new(Vec::<i64>::new()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4_i64)
        .map(|writer| {
            let (coll, acknowledged, failures, stop) = (
                coll.clone(),
                acknowledged.clone(),
                failures.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = writer * 1_000_000 + n;
                    n += 1;
                    match coll.insert_one(doc! {"_id": id, "w": writer}).await {
                        Ok(_) => acknowledged.lock().unwrap().push(id),
                        Err(error) => {
                            failures.lock().unwrap().push(error.to_string());
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = acknowledged.lock().unwrap().len();
    assert!(before > 0, "writes were acknowledged before the crash");
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.crash_and_restart(2);
        cluster
    })
    .await
    .unwrap();
    let restarted_at = acknowledged.lock().unwrap().len();
    // The node serves again by itself: writes are acknowledged after the restart.
    let mut served = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if acknowledged.lock().unwrap().len() > restarted_at + 20 {
            served = true;
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(
        served,
        "no write was acknowledged after the database came back"
    );

    let failures = failures.lock().unwrap().clone();
    assert!(
        !failures.is_empty(),
        "the crash was not seen by any write (the test did not test anything)"
    );
    for failure in &failures {
        assert!(
            failure.contains("HostUnreachable")
                || failure.contains("(6)")
                || failure.contains("code: 6"),
            "a write failed with something else than a retryable error: {failure}"
        );
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let stored: Vec<i64> = coll
        .distinct("_id", doc! {"_id": {"$type": "long"}})
        .await
        .unwrap()
        .iter()
        .filter_map(|id| id.as_i64())
        .collect();
    let stored: std::collections::HashSet<i64> = stored.into_iter().collect();
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !stored.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        coll.find_one(doc! {"_id": "first"})
            .await
            .unwrap()
            .is_some(),
        "reads serve again"
    );
    drop(cluster);
}
