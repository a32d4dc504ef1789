//! A full disk through the official driver: writes fail with mongod's OutOfDiskSpace (14031),
//! reads go on, nothing acknowledged is lost, and writes succeed again once space returns, on the
//! same server. The disk is simulated with the engine's fault-injection backend
//! (`tideway_storage::redb_engine::faults`) over memory and over a file; an ignored test uses a
//! real 16 MiB tmpfs (needs root: `cargo test --test disk_full -- --ignored`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::{Client, Collection};

use common::{test_config, TestServer};
use tideway::config::StorageKind;
use tideway::Config;
use tideway_base::clock::{Clock, ManualClock};
use tideway_storage::redb_engine::faults::{Disk, DiskFullBackend};
use tideway_storage::redb_engine::{Durability, RedbStorage, DATA_FILE_NAME};
use tideway_storage::Storage;

const OUT_OF_DISK_SPACE: i32 = 14031;

/// An in-process server on a given storage engine.
async fn start(config: Config, storage: Arc<dyn Storage>) -> TestServer {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000_000));
    TestServer::start_with_storage(config, clock, storage).await
}

/// The (code, codeName, errmsg) of a failed write, whether mongod's shape for it is a command
/// error (a whole insert batch) or a write error (an update or delete statement).
fn write_failure<T: std::fmt::Debug>(result: mongodb::error::Result<T>) -> (i32, String, String) {
    let error = result.expect_err("the write fails");
    match *error.kind {
        ErrorKind::Command(ref error) => {
            (error.code, error.code_name.clone(), error.message.clone())
        }
        ErrorKind::Write(WriteFailure::WriteError(ref error)) => (
            error.code,
            error.code_name.clone().unwrap_or_default(),
            error.message.clone(),
        ),
        ErrorKind::InsertMany(ref error) => {
            let first = &error.write_errors.as_ref().expect("write errors")[0];
            (
                first.code,
                first.code_name.clone().unwrap_or_default(),
                first.message.clone(),
            )
        }
        ref other => panic!("expected a command or write error, got {other:?}"),
    }
}

fn assert_out_of_disk_space<T: std::fmt::Debug>(result: mongodb::error::Result<T>) {
    let (code, code_name, message) = write_failure(result);
    assert_eq!(code, OUT_OF_DISK_SPACE, "{message}");
    // Write errors carry no codeName, as on mongod.
    assert!(
        code_name.is_empty() || code_name == "OutOfDiskSpace",
        "{code_name}"
    );
    assert!(
        message.starts_with("No space left on device: "),
        "{message}"
    );
}

/// 2 MiB of payload: never fits in the space a full disk has left.
fn big_document(id: i32) -> Document {
    let blob = bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: vec![7; 2 << 20],
    };
    doc! {"_id": id, "blob": blob}
}

/// Retries `attempt` while it fails with OutOfDiskSpace (the engine backs off for up to two
/// seconds after a failure before it tries the disk again); panics after ten seconds.
async fn eventually<T, F, Fut>(attempt: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = mongodb::error::Result<T>>,
    T: std::fmt::Debug,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let result = attempt().await;
        if result.is_ok() || Instant::now() > deadline {
            return result.expect("the write succeeds once space is back");
        }
        assert_out_of_disk_space(result);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn all(coll: &Collection<Document>) -> BTreeMap<i32, Document> {
    coll.find(doc! {})
        .await
        .expect("find")
        .try_collect::<Vec<Document>>()
        .await
        .expect("find")
        .into_iter()
        .map(|document| (document.get_i32("_id").expect("int _id"), document))
        .collect()
}

/// Writes before, during and after a full disk; returns the documents acknowledged in `app.docs`,
/// which reads return exactly at every step.
async fn write_through_a_full_disk(
    client: &Client,
    disk: &dyn Fn(bool),
) -> BTreeMap<i32, Document> {
    let coll = client.database("app").collection::<Document>("docs");
    let mut acknowledged: BTreeMap<i32, Document> = (0..100)
        .map(|id| (id, doc! {"_id": id, "n": id, "pad": "x".repeat(200)}))
        .collect();
    coll.insert_many(acknowledged.values().cloned().collect::<Vec<_>>())
        .await
        .unwrap();
    coll.create_index(mongodb::IndexModel::builder().keys(doc! {"n": 1}).build())
        .await
        .unwrap();

    disk(true);
    // An insert batch that cannot be stored is a command error, with mongod's codeName.
    let (code, code_name, message) = write_failure(coll.insert_one(big_document(1000)).await);
    assert_eq!(
        (code, code_name.as_str()),
        (OUT_OF_DISK_SPACE, "OutOfDiskSpace"),
        "{message}"
    );
    assert!(
        message.starts_with("No space left on device: "),
        "{message}"
    );
    assert_out_of_disk_space(
        coll.update_one(
            doc! {"_id": 5},
            doc! {"$set": {"blob": big_document(5).get("blob").cloned()}},
        )
        .await,
    );
    assert_out_of_disk_space(coll.delete_one(doc! {"_id": 6}).await);
    assert_out_of_disk_space(coll.insert_many(vec![big_document(1001)]).await);
    // Reads go on and see exactly what was acknowledged.
    assert_eq!(all(&coll).await, acknowledged);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 100);
    let by_index = coll
        .find(doc! {"n": {"$gte": 90}})
        .hint(mongodb::options::Hint::Keys(doc! {"n": 1}))
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap();
    assert_eq!(by_index.len(), 10);

    disk(false);
    eventually(|| async { coll.insert_one(big_document(1000)).await }).await;
    acknowledged.insert(1000, big_document(1000));
    let updated = coll
        .update_one(doc! {"_id": 5}, doc! {"$set": {"changed": true}})
        .await
        .unwrap();
    assert_eq!(updated.modified_count, 1);
    acknowledged
        .get_mut(&5)
        .expect("document 5")
        .insert("changed", true);
    assert_eq!(
        coll.delete_one(doc! {"_id": 6})
            .await
            .unwrap()
            .deleted_count,
        1
    );
    acknowledged.remove(&6);
    assert_eq!(all(&coll).await, acknowledged);
    acknowledged
}

fn switch(disk: Disk) -> impl Fn(bool) {
    move |full| {
        if full {
            disk.fill();
        } else {
            disk.free();
        }
    }
}

#[tokio::test]
async fn full_disk_fails_writes_with_14031_and_they_resume_without_restart() {
    let (backend, disk) =
        DiskFullBackend::new(redb::backends::InMemoryBackend::new()).expect("backend");
    let storage: Arc<dyn Storage> = Arc::new(RedbStorage::with_backend(backend).expect("engine"));
    let server = start(test_config(), storage).await;
    write_through_a_full_disk(&server.client(), &switch(disk)).await;
    server.stop().await;
}

#[tokio::test]
async fn nothing_acknowledged_around_a_full_disk_is_lost_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(DATA_FILE_NAME))
        .unwrap();
    let (backend, disk) =
        DiskFullBackend::new(redb::backends::FileBackend::new(file).expect("file backend"))
            .expect("backend");
    let storage: Arc<dyn Storage> = Arc::new(RedbStorage::with_backend(backend).expect("engine"));
    let server = start(test_config(), storage).await;
    let acknowledged = write_through_a_full_disk(&server.client(), &switch(disk)).await;
    server.stop().await;

    let storage: Arc<dyn Storage> =
        Arc::new(RedbStorage::open(dir.path(), Durability::Durable).expect("reopens"));
    let server = start(test_config(), storage).await;
    let coll = server
        .client()
        .database("app")
        .collection::<Document>("docs");
    assert_eq!(all(&coll).await, acknowledged);
    server.stop().await;
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (with a note) where mounting is not permitted.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status();
        match status {
            Ok(status) if status.success() => Some(Tmpfs { dir }),
            other => {
                eprintln!("skipped: cannot mount a tmpfs here ({other:?}); run as root");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system holding `dir` with a ballast file; returns its path.
fn fill_file_system(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut ballast = std::fs::File::create(&path).expect("ballast");
    let chunk = vec![1u8; 64 << 10];
    loop {
        match ballast.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(error) => panic!("writing the ballast: {error}"),
        }
    }
    // Whatever is left is less than one chunk; take it too.
    for size in [4096, 512, 1] {
        while ballast
            .write(&chunk[..size])
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    }
    let _ = ballast.sync_all();
    path
}

/// The real thing: `--dbpath` on a 16 MiB tmpfs filled up by another file. Needs root to mount.
#[tokio::test]
#[ignore = "mounts a tmpfs: needs root (cargo test --test disk_full -- --ignored)"]
async fn full_tmpfs_fails_writes_and_they_resume_once_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount("16m") else {
        return;
    };
    let config = Config {
        storage: StorageKind::Disk,
        dbpath: tmpfs.path().join("db"),
        ..test_config()
    };
    let storage = tideway::state::open_storage(&config).await.expect("engine");
    let server = start(config.clone(), storage).await;
    let client = server.client();
    let ballast = std::cell::RefCell::new(None);
    let disk = |full: bool| {
        if full {
            *ballast.borrow_mut() = Some(fill_file_system(tmpfs.path()));
        } else if let Some(path) = ballast.borrow_mut().take() {
            std::fs::remove_file(path).expect("remove the ballast");
        }
    };
    let acknowledged = write_through_a_full_disk(&client, &disk).await;
    drop(client);
    server.stop().await;

    let storage = tideway::state::open_storage(&config)
        .await
        .expect("reopens");
    let server = start(config, storage).await;
    let coll = server
        .client()
        .database("app")
        .collection::<Document>("docs");
    assert_eq!(all(&coll).await, acknowledged);
    assert!(matches!(
        coll.find_one(doc! {"_id": 1000})
            .await
            .unwrap()
            .and_then(|d| d.get("blob").cloned()),
        Some(Bson::Binary(_))
    ));
    server.stop().await;
}
