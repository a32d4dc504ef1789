//! tideway: a MongoDB wire-protocol compatible server with Azure Cosmos DB style time-to-live.
//!
//! Request path: `server` (accept, limits, shutdown) → `conn` (framing) → `wire` (bytes ↔ command
//! document) → `dispatch` (registry, shared checks, error replies) → `commands::*` (thin handlers).
//! See docs/architecture.md for the module map and invariants.

pub mod access;
pub mod auth;
mod changes;
mod client;
pub mod command;
pub mod commands;
pub mod config;
mod conn;
mod cursor;
pub mod dispatch;
pub mod logbuf;
mod ops;
mod params;
mod profiler;
pub mod repl;
mod server;
mod session_id;
mod sessions;
pub mod state;
pub mod tls;
mod txn;

pub use config::Config;
pub use server::Server;
pub use state::ServerState;
