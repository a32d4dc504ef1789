//! tideway: a MongoDB wire-protocol compatible server with Azure Cosmos DB style time-to-live.
//!
//! Request path: `server` (accept, limits, shutdown) → `conn` (framing) → `wire` (bytes ↔ command
//! document) → `dispatch` (registry, shared checks, error replies) → `commands::*` (thin handlers).
//! See docs/architecture.md for the module map and invariants.

pub mod auth;
pub mod bsonutil;
pub mod capped;
pub mod changes;
pub mod clock;
pub mod commands;
pub mod config;
pub mod conn;
pub mod cursor;
pub mod dispatch;
pub mod error;
pub mod exec;
pub mod js;
pub mod limits;
pub mod logbuf;
pub mod ops;
pub mod params;
pub mod planner;
pub mod profiler;
pub mod query;
pub mod reaper;
pub mod repl;
pub mod server;
pub mod sessions;
pub mod sorter;
pub mod state;
pub mod storage;
#[cfg(test)]
mod testrng;
pub mod timeseries;
pub mod tls;
pub mod ttl;
pub mod txn;
pub mod validation;
pub mod wire;

pub use config::Config;
pub use server::Server;
pub use state::ServerState;
