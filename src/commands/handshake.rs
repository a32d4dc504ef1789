//! The connection handshake and server identity: `hello`, `isMaster`/`ismaster`, `buildInfo`/
//! `buildinfo`. Replies describe a healthy standalone (never `setName`, never `topologyVersion`, so
//! drivers poll instead of streaming, and never enable retryable writes or transactions), or in
//! replica-set mode the primary of a one-member set (the fields `repl::hello_fields` adds; an
//! awaitable hello waits `maxAwaitTimeMS` since the topology never changes).

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use crate::command::{CommandContext, CommandSpec};
use crate::{async_handler, sync_handler};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_wire::{
    Compressor, MAX_BSON_OBJECT_SIZE, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE,
};

/// The MongoDB release whose wire behaviour tideway implements (maxWireVersion 25: drivers send
/// `bulkWrite` and a statement's `sort` from 8.0 on).
pub(crate) const MONGODB_VERSION: &str = "8.0.0";
pub(crate) const MONGODB_VERSION_ARRAY: [i32; 4] = [8, 0, 0, 0];
pub(crate) const MAX_WIRE_VERSION: i32 = 25;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "hello",
        aliases: &[],
        help: "Describes this server to a client: a writable standalone, its limits and wire versions.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(hello),
    },
    CommandSpec {
        name: "isMaster",
        aliases: &["ismaster"],
        help: "Legacy form of hello (answers `ismaster` instead of `isWritablePrimary`).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(hello),
    },
    CommandSpec {
        name: "buildInfo",
        aliases: &["buildinfo"],
        help: "The MongoDB version this server is compatible with, and build details.",
        admin_only: false,
        test_only: false,
        handler: sync_handler!(build_info),
    },
];

async fn hello(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    // An awaitable hello from a driver's streaming monitor (replica-set mode only).
    if let Some(repl) = &ctx.state.repl {
        if let Some(wait) = crate::repl::hello_wait(repl, body)? {
            repl.await_topology_change(wait).await;
        }
    }
    if body.contains_key("client") && ctx.client.metadata_received.swap(true, Ordering::Relaxed) {
        return Err(CommandError::new(
            ErrorCode::ClientMetadataCannotBeMutated,
            "The client metadata document may only be sent in the first hello",
        ));
    }
    if let Ok(client) = body.get_document("client") {
        ctx.client.set_metadata(client.clone());
        let driver = client.get_document("driver").ok();
        tracing::info!(
            conn = ctx.client.connection_id,
            driver = driver
                .and_then(|d| d.get_str("name").ok())
                .unwrap_or("unknown"),
            version = driver
                .and_then(|d| d.get_str("version").ok())
                .unwrap_or("unknown"),
            "client metadata"
        );
    }
    let mut reply = Document::new();
    if body.get("helloOk") == Some(&Bson::Boolean(true)) {
        reply.insert("helloOk", true);
    }
    let writable_field = if ctx.name == "hello" {
        "isWritablePrimary"
    } else {
        "ismaster"
    };
    reply.insert(writable_field, true);
    let repl_fields = ctx
        .state
        .repl
        .as_ref()
        .and_then(|repl| crate::repl::hello_fields(repl, ctx.state.storage.as_ref()));
    if let Some(fields) = repl_fields {
        reply.extend(fields);
    }
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE);
    reply.insert("localTime", ctx.state.clock.now());
    reply.insert(
        "logicalSessionTimeoutMinutes",
        crate::sessions::timeout_minutes(&ctx.state.params),
    );
    reply.insert("connectionId", ctx.client.connection_id);
    reply.insert("minWireVersion", 0);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    if let Some(mechanisms) = crate::access::sasl_supported_mechs(ctx.state, body).await {
        reply.insert("saslSupportedMechs", mechanisms);
    }
    if let Some(answer) = crate::access::speculative_authenticate(ctx.state, ctx.client, body).await
    {
        reply.insert("speculativeAuthenticate", answer);
    }
    if let Ok(requested) = body.get_array("compression") {
        let agreed: Vec<Bson> = requested
            .iter()
            .filter_map(|name| name.as_str().and_then(Compressor::from_name))
            .map(|compressor| Bson::from(compressor.name()))
            .collect();
        if !agreed.is_empty() {
            reply.insert("compression", agreed);
        }
    }
    Ok(reply)
}

fn build_info(_ctx: &CommandContext, _body: &Document) -> CommandResult {
    Ok(doc! {
        "version": MONGODB_VERSION,
        "gitVersion": concat!("tideway-", env!("CARGO_PKG_VERSION")),
        "versionArray": MONGODB_VERSION_ARRAY.to_vec(),
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "quickjs",
        "sysInfo": "deprecated",
        "openssl": {"running": "disabled", "compiled": "disabled"},
        "buildEnvironment": {
            "target_arch": std::env::consts::ARCH,
            "target_os": std::env::consts::OS,
            "distarch": std::env::consts::ARCH,
        },
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
        "tidewayVersion": env!("CARGO_PKG_VERSION"),
    })
}
