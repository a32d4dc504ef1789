//! tideway-exec, the execution layer between the commands and storage: query planning
//! ([`planner`]) and execution ([`executor`]), every time-to-live rule ([`ttl`]) and the
//! background reaper that applies them ([`reaper`]), and the rules of the collection kinds that
//! change what a write or read does: capped ([`capped`]), time-series ([`timeseries`]) and
//! schema validation ([`validation`]). It uses `tideway-base`, `tideway-query` and
//! `tideway-storage` (through the `Storage` contract only, never an engine), and knows nothing of
//! commands, replies or connections.

pub mod bounds;
pub mod capped;
pub mod executor;
pub mod planner;
pub mod reaper;
pub mod timeseries;
pub mod ttl;
pub mod validation;
