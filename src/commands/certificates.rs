//! `rotateCertificates` (mongod 5.0+, admin only): reloads the TLS certificate key file and CA
//! file for new connections, as SIGHUP does (both call `tls::TlsTransport::reload`).
//!
//! Invariants: mongod's answers (`rotate_certificates_command.cpp`): `{ok: 1}` after a reload,
//! and also without TLS (mongod has no TLS manager to rotate then and succeeds); a file that
//! cannot be used is the reload's 140 InvalidSSLConfiguration and the configuration in force
//! stays; established connections keep theirs.

use bson::Document;

use crate::command::{CommandContext, CommandSpec};
use crate::sync_handler;
use tideway_base::error::CommandResult;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "rotateCertificates",
    aliases: &[],
    help: "Rotate certificates for new SSL connections",
    admin_only: true,
    test_only: false,
    handler: sync_handler!(rotate_certificates),
}];

fn rotate_certificates(ctx: &CommandContext, body: &Document) -> CommandResult {
    let message = body.get_str("message").unwrap_or_default();
    if let Some(transport) = &ctx.state.tls {
        transport.reload()?;
        tracing::info!(id = 4913400, "Successfully rotated X509 certificates.");
    }
    tracing::info!(
        id = 4988500,
        message,
        "Certificate rotation completed successfully"
    );
    Ok(Document::new())
}
