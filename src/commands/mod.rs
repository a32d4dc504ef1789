//! Command handlers, one module per family. Handlers are thin: parse the body, call the layer that
//! does the work, build the reply. Each module exports its registry entries as `COMMANDS`; the
//! dispatcher collects them through [`all`].

mod admin;
pub(crate) mod aggregate;
pub mod args;
mod bulk_write;
mod capped_convert;
mod certificates;
mod change_stream;
pub mod clustered;
pub mod collection_defaults;
pub mod config_transactions;
pub(crate) mod crud;
pub mod ddl;
mod diagnostics;
pub mod explain;
pub mod find;
mod handshake;
mod index_kinds;
pub mod indexes;
mod map_reduce;
pub mod operations;
pub mod registry;
mod repl;
pub mod retryable;
pub mod schema;
pub(crate) mod sessions;
mod transactions;
pub mod views;

use crate::command::CommandSpec;

/// Every command this server knows, test-only ones included.
pub fn all() -> impl Iterator<Item = &'static CommandSpec> {
    [
        handshake::COMMANDS,
        diagnostics::COMMANDS,
        operations::COMMANDS,
        sessions::COMMANDS,
        find::COMMANDS,
        crud::COMMANDS,
        bulk_write::COMMANDS,
        ddl::COMMANDS,
        capped_convert::COMMANDS,
        indexes::COMMANDS,
        admin::COMMANDS,
        certificates::COMMANDS,
        aggregate::COMMANDS,
        map_reduce::COMMANDS,
        explain::COMMANDS,
        repl::COMMANDS,
        transactions::COMMANDS,
        crate::access::COMMANDS,
        crate::access::role_commands::COMMANDS,
    ]
    .into_iter()
    .flatten()
}
