//! What a command handler is: the context it runs in ([`CommandContext`]), its signature
//! ([`Handler`]) and its registry entry ([`CommandSpec`]), with the macros that wrap a handler
//! function. Dispatch builds the context and calls the handler; the handlers (`commands`, and the
//! command families that live with their concern: `auth`, `repl`, `txn`) only see this module.

use std::sync::Arc;

use bson::Document;
use futures::future::BoxFuture;

use crate::client::ClientInfo;
use crate::state::ServerState;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;
use tideway_query::sorter::SortLimits;
use tideway_wire::Reply;

/// Dispatch's entry point as a value: a handler that runs commands as the server itself (the
/// session cache's refresh, as mongod's `DBDirectClient`) reaches it through its context, so
/// no handler imports `dispatch`.
pub type InternalDispatch = for<'a> fn(
    &'a Arc<ServerState>,
    &'a Arc<ClientInfo>,
    &'a Arc<Document>,
) -> BoxFuture<'a, Reply>;

/// What a handler gets besides the command body.
pub struct CommandContext<'a> {
    pub state: &'a Arc<ServerState>,
    pub client: &'a Arc<ClientInfo>,
    /// The command's database (`$db`).
    pub db: &'a str,
    /// The command's registered name (the first key of the body, canonical casing).
    pub name: &'static str,
    /// When `maxTimeMS` runs out or `killOp` kills the command: long CPU-bound work checks it
    /// (dispatch only interrupts the handler at await points).
    pub deadline: Deadline,
    /// The running op: `currentOp` shows it, the profiler records it. Handlers and the query
    /// layer report what they do through its setters (`set_plan_summary`, `add_examined`,
    /// `set_nreturned`, `add_inserted`, ...).
    pub op: &'a crate::ops::Op,
    /// The multi-document transaction the command is a statement of: it reads and writes
    /// through the transaction's storage and at its time.
    pub txn: Option<&'a Arc<crate::txn::TxnStorage>>,
    /// The key of the command's logical session (`lsid`), which the session cache marked used
    /// (`crate::sessions`).
    pub session: Option<&'a [u8]>,
    /// Runs another command as the server itself (see [`InternalDispatch`]).
    pub dispatch: InternalDispatch,
}

impl<'a> CommandContext<'a> {
    /// The same command context under another command's name (a command run inside another,
    /// such as the one `explain` describes).
    pub fn renamed(&self, name: &'static str) -> CommandContext<'a> {
        CommandContext {
            state: self.state,
            client: self.client,
            db: self.db,
            name,
            deadline: self.deadline,
            op: self.op,
            txn: self.txn,
            session: self.session,
            dispatch: self.dispatch,
        }
    }

    /// The storage the command reads and writes: the server's, or inside a transaction the
    /// transaction's.
    pub fn storage(&self) -> &'a dyn tideway_storage::Storage {
        match self.txn {
            Some(txn) => txn.as_ref(),
            None => self.state.storage.as_ref(),
        }
    }

    /// The clock the command reads: the server's, or inside a transaction the instant its
    /// snapshot was taken.
    pub fn clock(&self) -> &'a dyn tideway_base::clock::Clock {
        match self.txn {
            Some(txn) => txn.clock.as_ref(),
            None => self.state.clock.as_ref(),
        }
    }

    /// `ns` as the command sees it now (see [`tideway_exec::executor::CollectionView::open`]). Inside a
    /// transaction, waiting for a collection another operation holds exclusively is bounded by
    /// `maxTransactionLockRequestTimeoutMillis` (then `LockTimeout`).
    pub async fn view(
        &self,
        ns: &tideway_storage::Namespace,
    ) -> CommandResult<tideway_exec::executor::CollectionView> {
        let open = tideway_exec::executor::CollectionView::open(
            &self.state.policy_gates,
            self.storage(),
            self.clock(),
            ns,
        );
        let limit_ms = self.state.params.max_transaction_lock_request_timeout_ms();
        match (self.txn, u64::try_from(limit_ms)) {
            (Some(_), Ok(limit_ms)) => {
                match tokio::time::timeout(std::time::Duration::from_millis(limit_ms), open).await {
                    Ok(view) => Ok(view?),
                    Err(_) => Err(CommandError::new(
                        ErrorCode::LockTimeout,
                        format!("Unable to acquire IX lock on '{ns}' within {limit_ms}ms."),
                    )),
                }
            }
            _ => Ok(open.await?),
        }
    }

    /// The limits of one blocking operation of this command: `max_memory_bytes`, spilling under
    /// the server's spill directory if `allow_disk_use` (or, when the command does not say,
    /// `allowDiskUseByDefault`) permits, else failing with `exceeded_message`.
    pub(crate) fn blocking_limits(
        &self,
        allow_disk_use: Option<bool>,
        max_memory_bytes: u64,
        exceeded_message: String,
    ) -> SortLimits {
        SortLimits {
            max_memory_bytes: usize::try_from(max_memory_bytes).unwrap_or(usize::MAX),
            allow_disk_use: allow_disk_use
                .unwrap_or_else(|| self.state.params.allow_disk_use_by_default()),
            spill_dir: self.state.spill_dir.clone(),
            exceeded_message,
            deadline: self.deadline,
        }
    }
}

pub type Handler =
    for<'a> fn(&'a CommandContext<'a>, &'a Document) -> BoxFuture<'a, CommandResult<Reply>>;

/// One entry of the registry.
pub struct CommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub help: &'static str,
    /// Only runs against the `admin` database (else 13 Unauthorized, as mongod).
    pub admin_only: bool,
    /// Exists only with `enableTestCommands`; otherwise unknown, like any other name.
    pub test_only: bool,
    pub handler: Handler,
}

/// Wraps an `async fn(&CommandContext, &Document) -> CommandResult<T>` as a [`Handler`], for a
/// reply `T` that is a `Document` or a [`Reply`].
#[macro_export]
macro_rules! async_handler {
    ($function:path) => {{
        fn boxed<'a>(
            ctx: &'a $crate::command::CommandContext<'a>,
            body: &'a ::bson::Document,
        ) -> ::futures::future::BoxFuture<
            'a,
            ::tideway_base::error::CommandResult<::tideway_wire::Reply>,
        > {
            Box::pin(async move { $function(ctx, body).await.map(Into::into) })
        }
        boxed as $crate::command::Handler
    }};
}

/// Wraps a plain `fn(&CommandContext, &Document) -> CommandResult` as a [`Handler`].
#[macro_export]
macro_rules! sync_handler {
    ($function:path) => {{
        fn boxed<'a>(
            ctx: &'a $crate::command::CommandContext<'a>,
            body: &'a ::bson::Document,
        ) -> ::futures::future::BoxFuture<
            'a,
            ::tideway_base::error::CommandResult<::tideway_wire::Reply>,
        > {
            Box::pin(::std::future::ready($function(ctx, body).map(Into::into)))
        }
        boxed as $crate::command::Handler
    }};
}
