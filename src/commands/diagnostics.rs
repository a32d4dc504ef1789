//! Diagnostics and introspection: `ping`, `serverStatus`, `hostInfo`, `whatsmyuri`,
//! `getLog`, `getCmdLineOpts`, `getParameter`, `listCommands`. All read-only,
//! all answered from `ServerState` without touching storage.

use bson::{doc, Bson, Document};

use crate::command::{CommandContext, CommandSpec};
use crate::commands::handshake::MONGODB_VERSION;
use crate::commands::registry::{command_counters, visible_commands};
use crate::config::StorageKind;
use crate::state::{read, ServerState};
use crate::{async_handler, sync_handler};
use tideway_base::bsonutil::is_truthy;
use tideway_base::command::command_fields;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_wire::Compressor;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ping",
        aliases: &[],
        help: "Checks that the server answers.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(ping),
    },
    CommandSpec {
        name: "serverStatus",
        aliases: &[],
        help: "Process, connection, operation and storage counters. Sections set to 0 are left out.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(server_status),
    },
    CommandSpec {
        name: "hostInfo",
        aliases: &[],
        help: "The machine the server runs on: host name, cores, memory, operating system.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(host_info),
    },
    CommandSpec {
        name: "whatsmyuri",
        aliases: &[],
        help: "The client's own address as the server sees it.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(whats_my_uri),
    },
    CommandSpec {
        name: "getLog",
        aliases: &[],
        help: "Recent log lines: getLog '*' lists the logs, 'global' and 'startupWarnings' return them.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(get_log),
    },
    CommandSpec {
        name: "getCmdLineOpts",
        aliases: &[],
        help: "The command line the server was started with, raw and parsed.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(get_cmd_line_opts),
    },
    CommandSpec {
        name: "getParameter",
        aliases: &[],
        help: "Server parameters: getParameter '*' for all, or {getParameter: 1, <name>: 1}.",
        admin_only: true,
        test_only: false,
        handler: sync_handler!(get_parameter),
    },
    CommandSpec {
        name: "listCommands",
        aliases: &[],
        help: "Every command this server answers, with help text.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(list_commands),
    },
];

fn ping(_ctx: &CommandContext, _body: &Document) -> CommandResult {
    Ok(Document::new())
}

async fn server_status(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let state = ctx.state;
    let now_ms = state.clock.now_ms();
    let ttl_metrics = &state.reaper.metrics;
    // The TTL section reads storage; skip it when the caller leaves it out.
    let ttl_status = if body.get("ttl").is_some_and(|flag| !is_truthy(flag)) {
        Document::new()
    } else {
        tideway_exec::reaper::status(&state.reaper, state.storage.as_ref(), now_ms).await?
    };
    let stats = &state.stats;
    let uptime = state.started.elapsed();
    let current = read(&stats.connections_current);
    let counters = &stats.opcounters;
    let mut commands = Document::new();
    let mut names: Vec<_> = command_counters().collect();
    names.sort_by_key(|(name, _)| *name);
    for (name, counter) in names {
        commands.insert(
            name,
            doc! {"total": read(&counter.total), "failed": read(&counter.failed)},
        );
    }
    let persistent = state.config.storage != StorageKind::Memory;
    let cursors = &state.cursors;
    let sections = [
        (
            "host",
            Bson::from(format!("{}:{}", state.hostname, state.config.port)),
        ),
        ("version", Bson::from(MONGODB_VERSION)),
        ("process", Bson::from("tideway")),
        ("pid", Bson::Int64(i64::from(std::process::id()))),
        ("uptime", Bson::Double(uptime.as_secs_f64().floor())),
        ("uptimeMillis", Bson::Int64(uptime.as_millis() as i64)),
        ("uptimeEstimate", Bson::Int64(uptime.as_secs() as i64)),
        ("localTime", Bson::DateTime(state.clock.now())),
        (
            "connections",
            Bson::Document(doc! {
                "current": current as i32,
                "available": (state.config.max_conns as i64 - current).max(0) as i32,
                "totalCreated": read(&stats.connections_total),
            }),
        ),
        (
            "network",
            Bson::Document(doc! {
                "bytesIn": read(&stats.bytes_in),
                "bytesOut": read(&stats.bytes_out),
                "numRequests": read(&stats.requests),
                "compression": compression_counters(state),
            }),
        ),
        (
            "opcounters",
            Bson::Document(doc! {
                "insert": read(&counters.insert),
                "query": read(&counters.query),
                "update": read(&counters.update),
                "delete": read(&counters.delete),
                "getmore": read(&counters.getmore),
                "command": read(&counters.command),
            }),
        ),
        (
            "storageEngine",
            Bson::Document(doc! {
                "name": state.storage.engine_name(),
                "persistent": persistent,
                "supportsCommittedReads": true,
            }),
        ),
        (
            "metrics",
            Bson::Document(doc! {
                "commands": commands,
                "cursor": {
                    "open": {"total": cursors.open_count() as i64, "noTimeout": cursors.no_timeout_count() as i64},
                    "timedOut": cursors.timed_out_count() as i64,
                },
                "ttl": {
                    "passes": read(&ttl_metrics.passes),
                    "subPasses": read(&ttl_metrics.sub_passes),
                    "deletedDocuments": read(&ttl_metrics.deleted_documents),
                    "invalidTTLIndexSkips": 0_i64,
                },
            }),
        ),
        ("ttl", Bson::Document(ttl_status)),
    ];
    let transactions = state
        .repl
        .as_ref()
        .map(|repl| ("transactions", Bson::Document(repl.transactions.metrics())));
    let sections = sections.into_iter().chain(transactions);
    let transport_security = state.tls.as_ref().map(|transport| {
        (
            "transportSecurity",
            Bson::Document(transport.transport_security()),
        )
    });
    let sections = sections.chain(transport_security);
    // A remote engine's pool and round trips, with the round trips of each command.
    let engine = state.storage.status().map(|(name, mut status)| {
        status.insert("commands", state.stats.round_trips.document());
        (name, Bson::Document(status))
    });
    let sections = sections.chain(engine);
    let mut reply = Document::new();
    for (section, value) in sections {
        let excluded = body.get(section).is_some_and(|flag| !is_truthy(flag));
        if !excluded {
            reply.insert(section, value);
        }
    }
    Ok(reply)
}

fn compression_counters(state: &ServerState) -> Document {
    let mut out = Document::new();
    for compressor in Compressor::ALL {
        let counters = state.stats.compression(compressor);
        out.insert(
            compressor.name(),
            doc! {
                "compressor": {
                    "bytesIn": read(&counters.compressor_bytes_in),
                    "bytesOut": read(&counters.compressor_bytes_out),
                },
                "decompressor": {
                    "bytesIn": read(&counters.decompressor_bytes_in),
                    "bytesOut": read(&counters.decompressor_bytes_out),
                },
            },
        );
    }
    out
}

fn host_info(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as i32;
    let mem_size_mb = meminfo_total_kb().map_or(0, |kb| kb / 1024);
    let os_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    Ok(doc! {
        "system": {
            "currentTime": ctx.state.clock.now(),
            "hostname": ctx.state.hostname.as_str(),
            "cpuAddrSize": (usize::BITS) as i32,
            "memSizeMB": mem_size_mb,
            "memLimitMB": mem_size_mb,
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
            "numaEnabled": false,
        },
        "os": {
            "type": std::env::consts::OS,
            "name": std::env::consts::OS,
            "version": os_release.trim(),
        },
        "extra": {},
    })
}

fn meminfo_total_kb() -> Option<i64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn whats_my_uri(ctx: &CommandContext, _body: &Document) -> CommandResult {
    Ok(doc! {"you": ctx.client.remote.as_str()})
}

fn get_log(ctx: &CommandContext, body: &Document) -> CommandResult {
    let name = match body.get("getLog") {
        Some(Bson::String(name)) => name.as_str(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "Argument to getLog must be of type String; found {other} of type {}",
                tideway_base::display::type_name(other)
            )))
        }
        None => "",
    };
    let (total, lines) = match name {
        "*" => return Ok(doc! {"names": ["global", "startupWarnings"]}),
        "global" => crate::logbuf::recent_lines(),
        "startupWarnings" => {
            let warnings = ctx.state.startup_warnings.clone();
            (warnings.len() as u64, warnings)
        }
        other => {
            return Err(CommandError::new(
                ErrorCode::OperationFailed,
                format!("No log named '{other}'"),
            ))
        }
    };
    Ok(doc! {"totalLinesWritten": total as i64, "log": lines})
}

/// The command line with the password of `--pgUri` removed (as mongod hides the passwords its
/// options take).
fn redacted_argv(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut argv = Vec::new();
    let mut uri_follows = false;
    for arg in args {
        let redacted = if uri_follows {
            tideway_postgres::redact_uri(&arg)
        } else if let Some(uri) = arg.strip_prefix("--pgUri=") {
            format!("--pgUri={}", tideway_postgres::redact_uri(uri))
        } else {
            arg.clone()
        };
        uri_follows = arg == "--pgUri";
        argv.push(redacted);
    }
    argv
}

fn get_cmd_line_opts(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let config = &ctx.state.config;
    let argv = redacted_argv(std::env::args());
    let mut set_parameter = Document::new();
    for assignment in &config.set_parameter {
        if let Some((name, value)) = assignment.split_once('=') {
            set_parameter.insert(name, value);
        }
    }
    let engine = match config.storage {
        StorageKind::Disk => "disk",
        StorageKind::Memory => "memory",
        StorageKind::Postgres => "postgres",
    };
    let mut parsed = Document::new();
    if let Some(path) = &config.config {
        parsed.insert("config", path.to_string_lossy().into_owned());
    }
    let mut net = doc! {"port": i32::from(config.port), "bindIp": config.bind_ip.join(","), "maxIncomingConnections": config.max_conns as i64};
    if let Some(tls) = crate::tls::TlsTransport::parsed_options(config) {
        net.insert("tls", tls);
    }
    parsed.extend(doc! {
        "net": net,
        "storage": {"dbPath": config.dbpath.to_string_lossy().into_owned(), "engine": engine},
        "systemLog": {"verbosity": i32::from(config.verbose)},
        "operationProfiling": operation_profiling(config),
        "setParameter": set_parameter,
    });
    if config.noscripting {
        // mongod's name for `--noscripting`.
        parsed.insert("security", doc! {"javascriptEnabled": false});
    }
    Ok(doc! {"argv": argv, "parsed": parsed})
}

/// mongod's `operationProfiling` options: the threshold, and the mode when `--profile` set one.
fn operation_profiling(config: &crate::config::Config) -> Document {
    let mut out = doc! {"slowOpThresholdMs": config.slowms as i64};
    match config.profile {
        1 => out.insert("mode", "slowOp"),
        2 => out.insert("mode", "all"),
        _ => None,
    };
    out
}

fn get_parameter(ctx: &CommandContext, body: &Document) -> CommandResult {
    let (all, show_details) = match body.get("getParameter") {
        Some(Bson::String(star)) => (star == "*", false),
        Some(Bson::Document(options)) => (
            options.get_str("allParameters") == Ok("*")
                || options.get("allParameters").is_some_and(is_truthy),
            options.get("showDetails").is_some_and(is_truthy),
        ),
        _ => (false, false),
    };
    let params = &ctx.state.params;
    if all {
        return Ok(params.describe(None, show_details));
    }
    let names: Vec<&str> = command_fields(body)
        .map(|(name, _)| name.as_str())
        .collect();
    let found = params.describe(Some(&names), show_details);
    if found.is_empty() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "no option found to get",
        ));
    }
    Ok(found)
}

fn list_commands(ctx: &CommandContext, _body: &Document) -> CommandResult {
    let mut commands = Document::new();
    for spec in visible_commands(ctx.state) {
        let entry = doc! {
            "help": spec.help,
            "requiresAuth": crate::auth::authz::requires_auth(spec.name),
            "secondaryOk": true,
            "adminOnly": spec.admin_only,
            "apiVersions": [],
            "deprecatedApiVersions": [],
        };
        for name in std::iter::once(&spec.name).chain(spec.aliases) {
            commands.insert(*name, entry.clone());
        }
    }
    Ok(doc! {"commands": commands})
}
