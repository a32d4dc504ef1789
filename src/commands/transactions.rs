//! `commitTransaction` and `abortTransaction`: the commands that end a multi-document
//! transaction (`crate::txn` keeps the state machine they drive).

use bson::Document;

use crate::command::{CommandContext, CommandSpec};
use crate::txn::{require_fields, Transactions};
use tideway_base::error::CommandResult;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "commitTransaction",
        aliases: &[],
        help: "Commits the session's running multi-document transaction.",
        admin_only: true,
        test_only: false,
        handler: crate::async_handler!(commit_transaction),
    },
    CommandSpec {
        name: "abortTransaction",
        aliases: &[],
        help: "Aborts the session's running multi-document transaction.",
        admin_only: true,
        test_only: false,
        handler: crate::async_handler!(abort_transaction),
    },
];

/// The server's transactions; on a standalone server mongod's answer to `txnNumber`.
fn transactions<'a>(ctx: &CommandContext<'a>) -> CommandResult<&'a Transactions> {
    match &ctx.state.repl {
        Some(repl) => Ok(&repl.transactions),
        None => Err(crate::repl::standalone_session_options()),
    }
}

/// `commitTransaction`: stores everything the transaction wrote in one atomic commit, or
/// nothing (see [`Transactions::commit`]).
async fn commit_transaction(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let fields = require_fields(ctx.name, body)?;
    let transactions = transactions(ctx)?;
    let options = super::args::write_options(ctx, body)?;
    let concern_error = crate::repl::write_concern_error(body)?;
    transactions
        .commit(
            fields,
            body,
            std::sync::Arc::clone(&ctx.state.storage),
            std::sync::Arc::clone(&ctx.state.clock),
            options.force_durable,
            concern_error,
        )
        .await
}

/// `abortTransaction`: discards everything the transaction wrote.
async fn abort_transaction(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let fields = require_fields(ctx.name, body)?;
    let transactions = transactions(ctx)?;
    let concern_error = crate::repl::write_concern_error(body)?;
    transactions.abort(fields, body, concern_error).await
}
