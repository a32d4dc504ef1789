//! Starts an in-process tideway on `127.0.0.1:0` for integration tests and connects the official
//! driver to it. One server per test; it stops when the test calls `stop` or the runtime ends.

#![allow(dead_code)]

pub mod pki;
pub mod process;
pub mod raw;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mongodb::options::{ClientOptions, Compressor, ServerAddress};
use mongodb::Client;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use tideway::config::StorageKind;
use tideway::{Config, Server, ServerState};
use tideway_base::clock::{Clock, ManualClock};

pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// A configuration for tests: memory storage, everything else default.
pub fn test_config() -> Config {
    Config {
        storage: StorageKind::Memory,
        ..Config::default()
    }
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with(test_config()).await
    }

    pub async fn start_with(config: Config) -> TestServer {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_700_000_000_000));
        TestServer::start_with_clock(config, clock).await
    }

    /// A server whose clock the test moves (`clock.advance_ms`), starting at `t0`, with test
    /// commands on and the TTL monitor off: expiry shows on reads, deletion only when the test
    /// asks for a pass.
    pub async fn start_at(t0: i64) -> (TestServer, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(t0));
        let config = Config {
            set_parameter: vec![
                "enableTestCommands=1".into(),
                "ttlMonitorEnabled=false".into(),
            ],
            ..test_config()
        };
        let server = TestServer::start_with_clock(config, clock.clone()).await;
        (server, clock)
    }

    pub async fn start_with_clock(config: Config, clock: Arc<dyn Clock>) -> TestServer {
        let config = on_test_storage(config).await;
        let storage = tideway::state::open_storage(&config)
            .await
            .expect("storage opens");
        TestServer::start_with_storage(config, clock, storage).await
    }

    /// A server on a storage engine the test built (fault injection, a reopened file).
    pub async fn start_with_storage(
        config: Config,
        clock: Arc<dyn Clock>,
        storage: Arc<dyn tideway_storage::Storage>,
    ) -> TestServer {
        let state = ServerState::new(config, clock, storage).expect("valid test configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = Server::with_listeners(state.clone(), vec![listener]);
        server
            .start_replication()
            .await
            .expect("the replica set starts");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            state,
            stop: Some(stop),
            task,
        }
    }

    pub fn options(&self) -> ClientOptions {
        client_options(&self.addr)
    }

    pub fn client(&self) -> Client {
        client_for(&self.addr)
    }

    pub fn client_with_compressor(&self, compressor: Compressor) -> Client {
        let mut options = self.options();
        options.compressors = Some(vec![compressor]);
        Client::with_options(options).expect("client options")
    }

    /// The server's `serverStatus` reply.
    pub async fn server_status(&self) -> bson::Document {
        self.client()
            .database("admin")
            .run_command(bson::doc! {"serverStatus": 1})
            .await
            .expect("serverStatus")
    }

    /// Signals shutdown and waits until every connection has finished.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("server stops within 10 s")
            .expect("server task did not panic");
    }
}

/// Whether memory-storage tests run on PostgreSQL ([`on_test_storage`]): tests of what that
/// mode does not have (the oplog, change streams, replica-set commands) skip themselves.
pub fn on_postgres() -> bool {
    std::env::var("TIDEWAY_TEST_STORAGE").as_deref() == Ok("postgres")
}

/// The engine tests run on: with `TIDEWAY_TEST_STORAGE=postgres` (and `TIDEWAY_TEST_PG_URI`,
/// as `.ci/run` sets them), a memory-storage test runs on PostgreSQL instead, in a fresh database
/// of its own on the test server; the server is then a router, which keeps sessions and
/// transactions too, so a `--replSet` the test asked for is dropped.
pub async fn on_test_storage(config: Config) -> Config {
    if !on_postgres() || config.storage != StorageKind::Memory {
        return config;
    }
    let uri = scratch_postgres_database(
        &std::env::var("TIDEWAY_TEST_PG_URI")
            .expect("TIDEWAY_TEST_STORAGE=postgres needs TIDEWAY_TEST_PG_URI"),
    )
    .await;
    Config {
        storage: StorageKind::Postgres,
        pg_uri: Some(uri),
        pg_pool_size: 8,
        pg_distribute: citus_distribution(),
        repl_set: None,
        oplog_size_mb: None,
        ..config
    }
}

/// A configuration on a fresh database of the test PostgreSQL server, when the environment
/// names one (`TIDEWAY_TEST_PG_URI`; required under `CI=true`), for tests of the PostgreSQL
/// mode itself.
pub async fn postgres_config() -> Option<Config> {
    let server = match std::env::var("TIDEWAY_TEST_PG_URI") {
        Ok(server) => server,
        Err(_) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TIDEWAY_TEST_PG_URI is unset: .ci/run starts a cluster and sets it")
        }
        Err(_) => {
            eprintln!("TIDEWAY_TEST_PG_URI is unset: PostgreSQL test skipped");
            return None;
        }
    };
    Some(Config {
        storage: StorageKind::Postgres,
        pg_uri: Some(scratch_postgres_database(&server).await),
        pg_pool_size: 8,
        pg_distribute: citus_distribution(),
        ..test_config()
    })
}

/// Creates a database of its own on the PostgreSQL server `server` and returns its URI. With
/// `TIDEWAY_TEST_PG_CITUS_WORKERS` (the URIs of a Citus coordinator's workers, comma-separated;
/// `server` is the coordinator) the database gets Citus on the coordinator and every worker,
/// with the workers added ([`citus_distribution`] then asks for distributed tables).
async fn scratch_postgres_database(server: &str) -> String {
    let (admin, connection) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .expect("the test PostgreSQL server answers");
    tokio::spawn(connection);
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let workers = citus_workers();
    if !workers.is_empty() {
        admin
            .batch_execute("SET citus.enable_create_database_propagation = on")
            .await
            .expect("a Citus coordinator");
    }
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("a scratch database");
    let uri = tideway_postgres::uri_with_database(server, &name);
    if workers.is_empty() {
        return uri;
    }
    let address = "SELECT host(inet_server_addr()), current_setting('port')::int";
    let mut added = Vec::new();
    for worker in &workers {
        let worker = connect_plainly(&tideway_postgres::uri_with_database(worker, &name)).await;
        worker
            .batch_execute("CREATE EXTENSION citus")
            .await
            .expect("Citus on the worker");
        let row = worker.query_one(address, &[]).await.unwrap();
        added.push((row.get::<_, String>(0), row.get::<_, i32>(1)));
    }
    let coordinator = connect_plainly(&uri).await;
    coordinator
        .batch_execute("CREATE EXTENSION citus")
        .await
        .expect("Citus on the coordinator");
    coordinator
        .execute(
            &format!(
                "SELECT citus_set_coordinator_host(host, port) FROM ({address}) a(host, port)"
            ),
            &[],
        )
        .await
        .unwrap();
    for (host, port) in added {
        coordinator
            .execute("SELECT citus_add_node($1, $2)", &[&host, &port])
            .await
            .expect("the worker joins");
    }
    uri
}

/// The workers of the Citus coordinator tests run on (`TIDEWAY_TEST_PG_CITUS_WORKERS`), if any.
fn citus_workers() -> Vec<String> {
    std::env::var("TIDEWAY_TEST_PG_CITUS_WORKERS")
        .map(|workers| workers.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The distribution PostgreSQL tests ask for: Citus when the test server is a coordinator
/// (`TIDEWAY_TEST_PG_CITUS_WORKERS`).
pub fn citus_distribution() -> Option<tideway::config::PgDistribute> {
    (!citus_workers().is_empty()).then_some(tideway::config::PgDistribute::Citus)
}

/// A client of the PostgreSQL database `uri` (without TLS, as the test clusters take it).
pub async fn connect_plainly(uri: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(uri, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("{uri}: {error}"));
    tokio::spawn(connection);
    client
}

/// The (code, codeName, errmsg) of a command error; panics on success or on other errors.
pub fn command_error<T: std::fmt::Debug>(
    result: mongodb::error::Result<T>,
) -> (i32, String, String) {
    let error = result.expect_err("command fails");
    match *error.kind {
        mongodb::error::ErrorKind::Command(ref command_error) => (
            command_error.code,
            command_error.code_name.clone(),
            command_error.message.clone(),
        ),
        ref other => panic!("expected a command error, got {other:?}"),
    }
}

/// The documents of a cursor reply's `firstBatch`.
pub fn first_batch(reply: &bson::Document) -> Vec<bson::Document> {
    reply
        .get_document("cursor")
        .expect("a cursor reply")
        .get_array("firstBatch")
        .expect("a first batch")
        .iter()
        .map(|item| item.as_document().expect("documents").clone())
        .collect()
}

/// Driver options for one server: a direct connection, and a short server-selection timeout so a
/// broken handshake fails fast instead of hanging for 30 s.
pub fn client_options(addr: &SocketAddr) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.hosts = vec![ServerAddress::Tcp {
        host: addr.ip().to_string(),
        port: Some(addr.port()),
    }];
    options.direct_connection = Some(true);
    options.server_selection_timeout = Some(Duration::from_secs(5));
    options
}

pub fn client_for(addr: &SocketAddr) -> Client {
    Client::with_options(client_options(addr)).expect("client options")
}

/// Every document `filter` finds in `collection` under `projection` (`{}`: whole documents), in
/// the order the server returns them.
#[allow(dead_code)] // not every test binary reads through it
pub async fn find_all(
    collection: &mongodb::Collection<bson::Document>,
    filter: bson::Document,
    projection: bson::Document,
) -> Vec<bson::Document> {
    use futures::TryStreamExt;
    collection
        .find(filter)
        .projection(projection)
        .await
        .expect("find succeeds")
        .try_collect()
        .await
        .expect("cursor reads")
}

/// A deterministic generator (xorshift) for randomized tests, so a failing case can be
/// replayed from its seed.
#[allow(dead_code)] // not every test binary generates inputs
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// One database of a server on a manual clock (see [`TestServer::start_at`]), for tests that move
/// time: commands that must succeed, errors as (code, message), listings, and TTL passes.
pub struct ClockedDb {
    _server: TestServer,
    pub clock: Arc<ManualClock>,
    pub db: mongodb::Database,
    t0: i64,
}

impl ClockedDb {
    /// A server whose clock starts at `t0`, and its database `name`.
    pub async fn open(t0: i64, name: &str) -> ClockedDb {
        let (server, clock) = TestServer::start_at(t0).await;
        let db = server.client().database(name);
        ClockedDb {
            _server: server,
            clock,
            db,
            t0,
        }
    }

    /// Moves the clock to `t0 + ms_after_t0` (never backwards).
    pub fn at(&self, ms_after_t0: i64) {
        let target = self.t0 + ms_after_t0;
        let now = self.clock.now_ms();
        assert!(target >= now, "the clock only moves forward");
        self.clock.advance_ms(target - now);
    }

    /// Runs `command`, which must succeed.
    pub async fn run(&self, command: bson::Document) -> bson::Document {
        self.db
            .run_command(command.clone())
            .await
            .unwrap_or_else(|error| panic!("{command} fails: {error}"))
    }

    /// Runs `command`, which must fail with a command error: its code and message.
    pub async fn error(&self, command: bson::Document) -> (i32, String) {
        let (code, _, message) = command_error(self.db.run_command(command).await);
        (code, message)
    }

    /// The `listCollections` entry of collection `name`.
    pub async fn collection_entry(&self, name: &str) -> bson::Document {
        let reply = self
            .run(bson::doc! {"listCollections": 1, "filter": {"name": name}})
            .await;
        first_batch(&reply).remove(0)
    }

    pub async fn indexes(&self, name: &str) -> Vec<bson::Document> {
        first_batch(&self.run(bson::doc! {"listIndexes": name}).await)
    }

    /// One TTL pass (`runTtlPass`): the documents it deleted.
    pub async fn ttl_pass(&self) -> i64 {
        self.db
            .client()
            .database("admin")
            .run_command(bson::doc! {"runTtlPass": 1})
            .await
            .expect("runTtlPass succeeds")
            .get_i64("deleted")
            .expect("a deleted count")
    }
}
