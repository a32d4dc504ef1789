//! `config.transactions`: the retryable-write session records (`commands::retryable`) shown as
//! the read-only collection mongod keeps them in, one document per session that wrote,
//! `{_id: {id, uid}, txnNum, lastWriteOpTime: {ts, t}, lastWriteDate}`.
//!
//! Nothing is stored under that name: `find`, `aggregate`, `count` and `distinct` naming it are
//! served here before `commands::views` looks for a view, as a read through a view whose source
//! is the records (`$documents`), so filters, projections, sorts, `countDocuments` and cursors
//! behave as on any view. Writes naming it are refused ([`refuse_write`], from the one check
//! every write takes, `args::validate_writable_namespace`).
//!
//! Invariants: the documents are built from the records as storage holds them at the read
//! (each record was committed with its write, so a listed session's write is always visible);
//! this module reads records and never writes them.

use bson::doc;

use crate::command::CommandContext;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::Namespace;
use tideway_wire::Reply;

/// Where mongod keeps its session records.
pub fn namespace() -> Namespace {
    Namespace::new("config", "transactions")
}

/// The reply of the read `name` (`find`, `aggregate`, `count`, `distinct`) of `ns` when `ns` is
/// `config.transactions`; `None` for any other namespace or command.
pub(crate) async fn read(
    ctx: &CommandContext<'_>,
    name: &str,
    body: &bson::Document,
    ns: &Namespace,
) -> CommandResult<Option<Reply>> {
    if *ns != namespace() || !matches!(name, "find" | "aggregate" | "count" | "distinct") {
        return Ok(None);
    }
    let records = ctx.state.storage.session_records().await?;
    let documents = crate::commands::retryable::transactions_documents(records);
    let view = crate::commands::views::ViewDefinition {
        ns: ns.clone(),
        view_on: ns.coll.clone(),
        pipeline: vec![doc! {"$documents": {"$literal": documents}}],
        collation: None,
    };
    crate::commands::views::read(ctx, name, body, view)
        .await
        .map(Some)
}

/// Refuses a write to `config.transactions`. mongod accepts direct writes there (a removed
/// record forgets its session's retryable writes: jstests/replsets/
/// retryable_writes_direct_write_to_config_transactions.js); tideway's records are not
/// documents of a collection, so it says so instead of writing something it would not read.
pub(crate) fn refuse_write(ns: &Namespace) -> CommandResult<()> {
    if *ns != namespace() {
        return Ok(());
    }
    Err(CommandError::new(
        ErrorCode::NotImplemented,
        format!("tideway's {ns} is read-only: it lists the retryable-write session records, which only retryable writes change"),
    ))
}
