//! tideway-base, the ground layer every other crate stands on: MongoDB's error codes and
//! `CommandError` (the one error type a command answers with), small BSON helpers and the
//! mongod-style rendering of values in messages, the shape of a command document (its generic
//! arguments), the server clock, the limits that keep every walk over client data bounded
//! (depth, path length, deadlines and the kill switch they watch), and a small seeded random
//! generator. It depends on no other tideway crate and knows nothing of messages, queries,
//! storage or commands.

pub mod bsonutil;
pub mod clock;
pub mod command;
pub mod display;
pub mod error;
pub mod limits;
pub mod rng;
