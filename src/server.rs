//! The listener side: accept connections on every bound address, enforce `--maxConns`, run one task
//! per connection, and shut down gracefully (stop accepting, let in-flight requests finish, return).
//! Background tasks (the TTL reaper, idle cursors, the transaction limit, the logical session
//! cache's refresh, the TLS certificate reload on SIGHUP) start and stop here too. With TLS on,
//! each connection goes through `tls::TlsTransport::accept` first; `conn` serves the plain or
//! TLS stream alike.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tracing::Instrument;

use crate::client::ClientInfo;
use crate::conn::serve_connection;
use crate::state::{bump, ServerState};
use crate::tls::Accepted;

pub struct Server {
    state: Arc<ServerState>,
    listeners: Vec<TcpListener>,
}

impl Server {
    /// Binds every address in the configuration.
    pub async fn bind(state: Arc<ServerState>) -> std::io::Result<Server> {
        let mut listeners = Vec::new();
        for addr in state.config.listen_addrs()? {
            listeners.push(TcpListener::bind(addr).await?);
        }
        Ok(Server { state, listeners })
    }

    /// A server on listeners the caller already bound (tests bind `127.0.0.1:0`).
    pub fn with_listeners(state: Arc<ServerState>, listeners: Vec<TcpListener>) -> Server {
        Server { state, listeners }
    }

    pub(crate) fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|listener| listener.local_addr().ok())
            .collect()
    }

    /// Replica-set mode (`--replSet`): loads or initiates the set with this server's listener
    /// as its member (`repl::start`); to be called before [`Server::run`]. Nothing on a
    /// standalone server.
    pub async fn start_replication(&self) -> tideway_base::error::CommandResult<()> {
        let Some(repl) = &self.state.repl else {
            return Ok(());
        };
        crate::repl::start(
            repl,
            self.state.storage.as_ref(),
            self.state.clock.as_ref(),
            self.state.config.port,
            &self.local_addrs(),
        )
        .await
    }

    /// Over data several servers share: writes this server's heartbeat and reports the servers
    /// found there, their reaper leases and the clock offset (the startup report). A failure is
    /// logged, not fatal: the others then treat this server as gone and reap its collections.
    async fn join_other_servers(&self) {
        let address = match self.local_addrs().first() {
            Some(addr) => format!("{}:{}", self.state.hostname, addr.port()),
            None => format!("{}:{}", self.state.hostname, self.state.config.port),
        };
        match self.state.storage.join(&address).await {
            Ok(None) => {}
            Ok(Some(nodes)) => tracing::info!(
                node = %nodes.get_str("thisNode").unwrap_or_default(),
                layout = %nodes.get_str("layout").unwrap_or_default(),
                clock_offset_ms = nodes.get_i64("clockOffsetMillis").unwrap_or_default(),
                nodes = %bson::Bson::from(nodes.get_array("members").cloned().unwrap_or_default())
                    .into_relaxed_extjson(),
                "joined the servers on the database"
            ),
            Err(error) => tracing::warn!(%error, "cannot join the servers on the database"),
        }
    }

    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// Serves until `shutdown` completes, then waits for every connection to finish its current
    /// request.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        // The oplog exists before the first write can happen, or the server does not serve.
        if let Err(error) = crate::changes::ensure_oplog(
            self.state.storage.as_ref(),
            self.state.config.oplog_size_mb(),
        )
        .await
        {
            tracing::error!(%error, "cannot create the oplog (local.oplog.rs); not serving");
            return;
        }
        // Before the TTL monitor's first pass takes leases under this server's id.
        self.join_other_servers().await;
        let (stop_tx, stop_rx) = watch::channel(false);
        // Every connection task holds a sender; `recv` returns `None` once all have finished.
        let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
        let permits = Arc::new(Semaphore::new(self.state.config.max_conns));
        let cursor_reaper = tokio::spawn(reap_idle_cursors(self.state.clone(), stop_rx.clone()));
        let ttl_reaper = tokio::spawn(run_ttl_monitor(self.state.clone(), stop_rx.clone()));
        let time_keeper = tokio::spawn(record_time(self.state.clone(), stop_rx.clone()));
        let transaction_limit = tokio::spawn(abort_expired_transactions(
            self.state.clone(),
            stop_rx.clone(),
        ));
        let session_refresh = tokio::spawn(refresh_sessions_periodically(
            self.state.clone(),
            stop_rx.clone(),
        ));
        let tls_reload = self.state.tls.clone().map(|transport| {
            tokio::spawn(crate::tls::reload_on_sighup(transport, stop_rx.clone()))
        });
        for addr in self.local_addrs() {
            tracing::info!(%addr, "Waiting for connections");
        }
        let accept_loops: Vec<_> = self
            .listeners
            .into_iter()
            .map(|listener| {
                let acceptor = Acceptor {
                    state: self.state.clone(),
                    permits: permits.clone(),
                    stop: stop_rx.clone(),
                    done: done_tx.clone(),
                };
                tokio::spawn(acceptor.run(listener))
            })
            .collect();
        drop(done_tx);
        shutdown.await;
        tracing::info!("shutting down: no new connections, finishing requests in flight");
        let _ = stop_tx.send(true);
        if let Some(repl) = &self.state.repl {
            repl.stop_waiting();
        }
        for accept_loop in accept_loops {
            let _ = accept_loop.await;
        }
        let _ = done_rx.recv().await;
        let _ = cursor_reaper.await;
        let _ = ttl_reaper.await;
        let _ = time_keeper.await;
        let _ = transaction_limit.await;
        let _ = session_refresh.await;
        if let Some(tls_reload) = tls_reload {
            let _ = tls_reload.await;
        }
        if let Err(error) = self.state.storage.leave().await {
            tracing::warn!(%error, "cannot leave the servers on the database");
        }
        tracing::info!("shutdown complete");
    }
}

/// How often idle cursors are looked for; a cursor lives at most this much past its timeout.
const CURSOR_REAP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

async fn reap_idle_cursors(state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(CURSOR_REAP_INTERVAL);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            _ = ticks.tick() => {
                let reaped = state.cursors.reap_idle(state.clock.now_ms());
                if reaped > 0 {
                    tracing::info!(reaped, "closed idle cursors");
                }
            }
        }
    }
}

/// How often the server's time is recorded in storage. After a crash, the clock restarts no
/// earlier than the last record: at most this much of reported time can be lived again, and only
/// if the system clock also stepped back.
const TIME_RECORD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The TTL monitor: a reaper pass every `ttlMonitorSleepSecs` while `ttlMonitorEnabled` (or at
/// once when woken), until `stop` turns true, over the collections whose reaper lease this
/// server holds (all of them unless servers share the data); while disabled it holds none.
async fn run_ttl_monitor(state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    // Whether a pass may have taken leases since the monitor was last disabled.
    let mut may_hold_leases = false;
    loop {
        let sleep = Duration::from_secs(state.params.ttl_monitor_sleep_secs());
        tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            _ = state.reaper.wake.notified() => continue,
            _ = tokio::time::sleep(sleep) => {}
        }
        if !state.params.ttl_monitor_enabled() {
            // Another server on the same data takes this one's collections.
            if may_hold_leases {
                match state.storage.release_reaper_leases().await {
                    Ok(()) => may_hold_leases = false,
                    Err(error) => tracing::warn!(%error, "cannot release the reaper leases"),
                }
            }
            continue;
        }
        may_hold_leases = true;
        let now_ms = state.clock.now_ms();
        match state
            .reaper
            .run_leased(state.storage.as_ref(), now_ms)
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, "TTL pass"),
            Err(error) => tracing::warn!(%error, "TTL pass failed"),
        }
    }
}

/// Records the server's time every [`TIME_RECORD_INTERVAL`] and once more at shutdown, so
/// [`tideway_base::clock::ServerClock`] resumes from it after a restart.
async fn record_time(state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(TIME_RECORD_INTERVAL);
    loop {
        let stopping = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => true,
            _ = ticks.tick() => false,
        };
        if let Err(error) = state.storage.record_time(state.clock.now_ms()).await {
            tracing::warn!(%error, "cannot record the server time");
        }
        if stopping {
            return;
        }
    }
}

const LIFETIME_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Aborts transactions past `transactionLifetimeLimitSeconds`, checking every second (mongod
/// checks every half of the limit: a transaction here outlives it by at most a second), until
/// `stop`.
async fn abort_expired_transactions(state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    let Some(repl) = &state.repl else {
        return;
    };
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            () = tokio::time::sleep(LIFETIME_CHECK_INTERVAL) => {
                let limit_ms = state.params.transaction_lifetime_limit_secs() * 1000;
                let idle_ms = state.params.logical_session_timeout_minutes() * 60_000;
                repl.transactions.abort_expired(state.clock.now_ms(), limit_ms, idle_ms);
            }
        }
    }
}

/// Refreshes the cache every `logicalSessionRefreshMillis` until `stop`.
async fn refresh_sessions_periodically(state: Arc<ServerState>, mut stop: watch::Receiver<bool>) {
    loop {
        let interval_ms = u64::try_from(state.params.logical_session_refresh_ms()).unwrap_or(1);
        let stopping = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => true,
            () = tokio::time::sleep(std::time::Duration::from_millis(interval_ms.max(1))) => false,
        };
        if stopping {
            return;
        }
        if let Err(error) =
            crate::commands::sessions::refresh(&state, crate::dispatch::dispatch_boxed).await
        {
            tracing::info!(%error, "Failed to refresh session cache, will try again at the next refresh interval");
        }
    }
}

struct Acceptor {
    state: Arc<ServerState>,
    permits: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
}

impl Acceptor {
    async fn run(mut self, listener: TcpListener) {
        loop {
            let accepted = tokio::select! {
                biased;
                _ = self.stop.wait_for(|stopping| *stopping) => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => self.start_connection(stream, peer),
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn start_connection(&self, stream: TcpStream, peer: SocketAddr) {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max = self.state.config.max_conns, "connection refused because too many open connections");
            return;
        };
        let _ = stream.set_nodelay(true);
        let state = self.state.clone();
        let mut stop = self.stop.clone();
        let done = self.done.clone();
        let client = ClientInfo::new(state.next_connection_id(), peer.to_string());
        let span = tracing::info_span!("conn", id = client.connection_id, remote = %peer);
        bump(&state.stats.connections_total, 1);
        bump(&state.stats.connections_current, 1);
        tokio::spawn(
            async move {
                tracing::debug!("connection accepted");
                match &state.tls {
                    None => serve_connection(state.clone(), stream, Arc::new(client), stop).await,
                    Some(transport) => match transport.accept(stream, &mut stop).await {
                        Ok(Some(Accepted::Plain(stream))) => {
                            serve_connection(state.clone(), stream, Arc::new(client), stop).await;
                        }
                        Ok(Some(Accepted::Tls(stream, subject))) => {
                            let client = Arc::new(client.with_tls(subject));
                            serve_connection(state.clone(), stream, client, stop).await;
                        }
                        Ok(None) => {}
                        Err(error) => {
                            tracing::info!(%error, "TLS handshake failed; connection closed")
                        }
                    },
                }
                state
                    .stats
                    .connections_current
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!("connection ended");
                drop(permit);
                drop(done);
            }
            .instrument(span),
        );
    }
}
