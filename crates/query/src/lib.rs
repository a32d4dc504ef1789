//! tideway-query, the query language: pure functions over `bson::Document`/`bson::Bson`
//! implementing mongod's comparison order, dotted paths, query filters, update documents,
//! projections, sort specs, the aggregation pipeline, collation, `$jsonSchema`, text analysis,
//! server-side JavaScript, the sorter that keeps blocking stages within memory, and the
//! order-preserving key encoding of values that indexes and `$lookup` share. It may use
//! `tideway-base` only: no storage, no commands.
//!
//! Invariants: nothing here performs I/O, blocks or spawns; every malformed user input (filter,
//! update, projection, sort) is reported as a `CommandError` carrying mongod's code and, where
//! known, mongod's message, never as a panic. Matching, sorting and updating are deterministic.
//!
//! Module map and the API other layers use. The modules are layered, each using only those
//! listed before it: first the value-level modules (`numeric`, `bits`, `collation`, `compare`,
//! `path`, `sort`, `sorter`, `text`, `json_schema`, `js`, `hash`, `keycodec`), then the language
//! proper, `expr` < `filter` < `projection` < `pipeline` < `update`:
//! - [`compare`]: `compare_values(&Bson, &Bson) -> Ordering` (mongod's total order),
//!   `values_equal`, `canonical_type_rank(&Bson) -> u8` (mongod's canonical type + 1),
//!   `identical_values`/`identical_documents` (byte-level identity, field order included).
//! - `numeric` (crate-private): exact cross-type numeric order and `$inc`/`$mul` arithmetic.
//! - [`path`]: `lookup(&Document, &[String], LeafArrays) -> Vec<PathValue>` (matcher traversal),
//!   `lookup_values(&Document, &str) -> Vec<&Bson>` (what `distinct` sees), and exact
//!   `get_path`/`get_path_mut`/`set_path`/`remove_path` for updates.
//! - [`sort`]: `SortSpec::parse(&Document)`, `compare(&Document, &Document) -> Ordering`,
//!   `sort_key`/`compare_keys` for precomputed keys.
//! - [`text`]: `TextQuery::parse(&Bson)` (`$text`), `TextIndex::from_spec`, `terms_to_scan`,
//!   `TextIndex::score` (the `textScore`), `term_scores` (what a text index stores).
//! - [`keycodec`]: the order-preserving, prefix-free byte encoding of values (index keys, and
//!   the grouping keys of `$lookup`); [`hash`]: mongod's hash of a value (hashed indexes).
//! - [`js`]: server-side JavaScript; [`sorter`]: blocking operations within a memory limit.
//! - [`expr`]: the aggregation expression engine, `evaluate_once(&Bson, &Document, DateTime)`
//!   (a validator's `$expr` details); the evaluation context [`PipelineContext`] (`$$NOW`,
//!   collation); the accumulators the expressions share with `$group` and the window functions;
//!   command variables (`expr::command_variables`: `CommandVariables::at(now).with(&let)`,
//!   `with_command_variables(&variables, parse)`).
//! - [`filter`]: `Filter::parse(&Document)`, `matches(&Document) -> bool`,
//!   `match_position(&Document) -> Option<Option<usize>>` (for positional `$`),
//!   `id_equality() -> Option<&Bson>`, `equality_fields() -> CommandResult<Document>`; its parsed
//!   tree is crate-visible for `tideway_exec::bounds`; `ElementMatcher` for `$pull`. Its `$expr`
//!   is an `expr::Expr`.
//! - [`projection`]: `Projection::parse(&Document, allowed_meta: &[&str])`,
//!   `apply(&Document, &dyn Fn(&str) -> Bson) -> Document`, `apply_find(..)` (positional fields
//!   and aggregation expressions of `find` projections).
//! - [`pipeline`]: `Pipeline::parse(&[Document])`, `leading_match() -> Option<&Document>`,
//!   `source() -> Option<&SourceStage>` (`$collStats`/`$documents`), and
//!   `run(Vec<Document>, &PipelineContext) -> CommandResult<Vec<Document>>`; `$group` in
//!   `pipeline::group`, over `expr`'s accumulators; `Pipeline::parse_update` for the pipeline
//!   of a pipeline-style update (also what `$merge` checks its `whenMatched` pipeline with).
//! - [`update`]: `Update::parse(&Document)`, `apply(&mut Document, &UpdateContext) ->
//!   CommandResult<bool>`, `touched_paths()`, and `upsert_document(&Filter, &Update,
//!   &UpdateContext) -> CommandResult<Document>`; a pipeline-style update runs a [`Pipeline`].

mod bits;
pub mod collation;
pub mod compare;
#[cfg(test)]
pub(crate) mod edge_values;
pub mod expr;
pub mod filter;
pub mod geo;
pub mod hash;
pub mod js;
pub mod json_schema;
pub mod keycodec;
pub mod numeric;
pub mod path;
pub mod pipeline;
mod projection;
mod sort;
pub mod sorter;
pub mod text;
pub mod update;

pub use compare::{canonical_type_rank, compare_values, values_equal};
pub use expr::PipelineContext;
pub use filter::{ElementMatcher, Filter};

/// The `$meta` name of a `$text` query's score (projections and `find` sorts).
pub const TEXT_SCORE_META: &str = "textScore";
pub use path::{lookup, lookup_values, LeafArrays};
pub use pipeline::{CollStatsRequest, CurrentOpRequest, Pipeline, SourceStage};
pub use projection::Projection;
pub use sort::{Direction, SortSpec};
pub use update::{upsert_document, Update, UpdateContext};
