//! The `tideway` binary: read the configuration (command line, environment, `--config` file), set
//! up logging, serve until SIGINT or SIGTERM.

use std::process::ExitCode;

/// Many small allocations per request (documents, keys, replies): mimalloc serves them faster than
/// the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use tideway::config::{LoadError, LogFormat};
use tideway::state::open_storage_and_clock;
use tideway::{Config, Server, ServerState};

fn main() -> ExitCode {
    let config = match Config::load() {
        Ok(config) => config,
        Err(LoadError::CommandLine(error)) => error.exit(),
        Err(LoadError::File(error) | LoadError::Inconsistent(error)) => {
            // As mongod refuses bad options: the reason, a hint, exit code 2 (EXIT_BADOPTIONS).
            eprintln!("{}", error.errmsg);
            eprintln!("try 'tideway --help' for more information");
            return ExitCode::from(2);
        }
    };
    if config.output_config {
        print!("{}", config.to_yaml());
        return ExitCode::SUCCESS;
    }
    init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(tideway_base::limits::THREAD_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tideway: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let (storage, clock) = match open_storage_and_clock(&config).await {
            Ok(opened) => opened,
            Err(error) => {
                tracing::error!(%error, "cannot open storage");
                return ExitCode::FAILURE;
            }
        };
        let state = match ServerState::new(config, clock, storage) {
            Ok(state) => state,
            Err(error) => {
                tracing::error!(%error, "invalid configuration");
                return ExitCode::FAILURE;
            }
        };
        let server = match Server::bind(state.clone()).await {
            Ok(server) => server,
            Err(error) => {
                tracing::error!(%error, addrs = ?state.config.bind_ip, port = state.config.port, "cannot listen");
                return ExitCode::FAILURE;
            }
        };
        if let Err(error) = server.start_replication().await {
            tracing::error!(error = %error.errmsg, "cannot start the replica set");
            return ExitCode::FAILURE;
        }
        server.run(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}

fn init_logging(config: &Config) {
    let filter = EnvFilter::try_new(config.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    let output = match config.log_format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_target(false).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer().json().boxed(),
    };
    tracing_subscriber::registry()
        .with(output.with_filter(filter))
        .with(tideway::logbuf::CaptureLayer.with_filter(EnvFilter::new("info")))
        .init();
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
