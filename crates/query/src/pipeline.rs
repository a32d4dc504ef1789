//! Aggregation pipelines: parsing `[{$stage: spec}, ...]` into stages and running them over
//! documents in memory. Owns the stage semantics, and sits above the rest of the language:
//! expressions, their evaluation context and the accumulators `$group` and `$setWindowFields`
//! fold through are [`crate::expr`]; filters, projections and sort orders reuse [`Filter`],
//! [`Projection`] and [`SortSpec`]. It never uses `update`: a pipeline-style update runs a
//! pipeline (parsed by [`Pipeline::parse_update`]), and `$merge` writes its update statements
//! as documents, checking its `whenMatched` pipeline with that same parse.
//!
//! Invariants:
//! - Parsing validates every stage up front with mongod's codes and messages: a stage document
//!   with other than one field is 40323, an unknown stage name 40324, a stage mongod has but
//!   this server lacks NotImplemented (238). Nothing is evaluated at parse time.
//! - The leading `$match` stages (merged with `$and` when there are several) are not run by
//!   [`Pipeline::run`]: the caller applies [`Pipeline::leading_match`] while reading the
//!   collection (through an index if it likes) and passes only matching documents.
//! - A source stage (`$collStats`, `$documents`) can only come first; it is reported through
//!   [`Pipeline::source`]. For `$collStats` the caller passes the statistics document it built
//!   as the input; for `$documents` the caller passes nothing and `run` evaluates the documents.
//! - Running is deterministic (stable sort, groups in first-seen order) and never panics on
//!   data; expression errors abort the run with mongod's codes.
//!
//! This module performs no I/O and knows nothing about collections, cursors or batches.

mod bucket;
mod bucket_auto;
mod buffers;
mod densify;
mod facet;
mod fields;
mod fill;
mod granularity;
pub mod graph_lookup;
mod group;
pub mod lookup;
mod merge;
mod optimize;
mod redact;
mod run;
mod unwind;
mod window;

pub use buffers::PipelineBuffers;
pub use facet::Facet;
pub use merge::{MergeSpec, MergeWrite};
pub use optimize::reorder as reorder_stages;
pub use run::{
    BatchOrigin, Buffers, DocumentStream, Foreign, ForeignBatch, PipelineRun, PulledRun,
    StageLimits, Step,
};
pub(crate) use run::{BufferPurpose, DocumentBuffer};

use bson::{Bson, Document};

use super::filter::Filter;
use super::numeric::Number;
use super::projection::Projection;
use super::sort::SortSpec;
use crate::expr::{Expr, PipelineContext};
use fields::FieldTree;
use group::Group;
use tideway_base::display::{document_string, type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{exceeds_depth, MAX_BSON_DEPTH};
use unwind::{Unwind, Unwound};

/// A first stage that does not read the collection's documents.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceStage {
    /// `$collStats`: the caller builds one document with the requested sections (as mongod:
    /// `ns`, `host`, `localTime`, then `latencyStats`/`storageStats`/`count`/`queryExecStats`)
    /// and passes it to [`Pipeline::run`] as the only input document.
    CollStats(CollStatsRequest),
    /// `$currentOp`: the caller passes one document per operation (and idle connection) as
    /// mongod's `currentOp` reports them.
    CurrentOp(CurrentOpRequest),
    /// `$documents`: collection-less (`aggregate: 1`); [`Pipeline::run`] evaluates the
    /// documents itself and ignores its input.
    Documents,
}

/// The sections a `$collStats` stage asks for (each `Some`/`true` when present).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollStatsRequest {
    /// `latencyStats: {histograms: bool}`.
    pub latency_stats: Option<Document>,
    /// `storageStats: {scale: n, ...}`.
    pub storage_stats: Option<Document>,
    /// `count: {}`.
    pub count: bool,
    /// `queryExecStats: {}`.
    pub query_exec_stats: bool,
}

/// The options of a `$currentOp` stage (each `false` unless given).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurrentOpRequest {
    pub all_users: bool,
    pub idle_connections: bool,
    /// Defaults to `true`, as in mongod.
    pub idle_sessions: bool,
    pub local_ops: bool,
    pub truncate_ops: bool,
    pub idle_cursors: bool,
    pub backtrace: bool,
}

/// A parsed aggregation pipeline.
#[derive(Clone, Debug)]
pub struct Pipeline {
    source: Option<SourceStage>,
    /// The `$documents` expression when `source` is `Documents`.
    documents: Option<Expr>,
    leading_match: Option<Document>,
    leading_filter: Option<Filter>,
    stages: Vec<Stage>,
    /// A final `$out` or `$merge`.
    out: Option<FinalWrite>,
}

/// Where a final stage writes the output instead of returning it.
#[derive(Clone, Debug)]
pub enum FinalWrite {
    /// `$out`: the output replaces the collection.
    Out(OutTarget),
    /// `$merge`: the output is merged into the collection.
    Merge(Box<MergeSpec>),
}

impl FinalWrite {
    /// The stage's name.
    pub fn stage(&self) -> &'static str {
        match self {
            FinalWrite::Out(_) => "$out",
            FinalWrite::Merge(_) => "$merge",
        }
    }
}

/// Where a final `$out` writes: `coll` in `db` (the pipeline's database when `None`).
#[derive(Clone, Debug, PartialEq)]
pub struct OutTarget {
    pub db: Option<String>,
    pub coll: String,
}

impl OutTarget {
    fn parse(spec: &Bson) -> CommandResult<OutTarget> {
        match spec {
            Bson::String(coll) => Ok(OutTarget {
                db: None,
                coll: coll.clone(),
            }),
            Bson::Document(arguments) => {
                let (mut db, mut coll) = (None, None);
                for (name, value) in arguments {
                    match (name.as_str(), value) {
                        ("db", Bson::String(text)) => db = Some(text.clone()),
                        ("coll", Bson::String(text)) => coll = Some(text.clone()),
                        ("timeseries", _) => {
                            return Err(fail(
                                ErrorCode::NotImplemented,
                                "tideway does not support $out's timeseries option (creating a time series through $out)",
                            ))
                        }
                        ("db" | "coll", other) => {
                            return Err(CommandError::type_mismatch(format!(
                                "BSON field '$out.{name}' is the wrong type '{}', expected type \
                                 'string'",
                                type_name(other)
                            )))
                        }
                        (other, _) => {
                            return Err(fail(
                                ErrorCode::Location40415,
                                format!("BSON field '$out.{other}' is an unknown field."),
                            ))
                        }
                    }
                }
                let coll = coll.ok_or_else(|| {
                    fail(
                        ErrorCode::Location40414,
                        "BSON field '$out.coll' is missing but a required field",
                    )
                })?;
                Ok(OutTarget { db, coll })
            }
            other => Err(fail(
                ErrorCode::Location16990,
                format!(
                    "$out only supports a string or object argument, but found {}",
                    type_name(other)
                ),
            )),
        }
    }
}

#[derive(Clone, Debug)]
enum Stage {
    Match(Filter),
    Project {
        projection: Projection,
        expressions: Vec<Expr>,
    },
    AddFields(FieldTree),
    Unset(Projection),
    Sort(SortSpec),
    Skip(u64),
    Limit(u64),
    Count(String),
    Group(Group),
    Unwind(Unwind),
    ReplaceRoot {
        new_root: Expr,
        /// How mongod names the value in its error message.
        what: &'static str,
    },
    Facet(facet::Facet),
    Sample(u64),
    Lookup(Box<lookup::Lookup>),
    UnionWith(Box<lookup::UnionWith>),
    GraphLookup(Box<graph_lookup::GraphLookup>),
    Redact(redact::Redact),
    BucketAuto(Box<bucket_auto::BucketAuto>),
    Densify(Box<densify::Densify>),
    Window(Box<window::SetWindowFields>),
}

/// Stages mongod has that this server does not implement.
const UNIMPLEMENTED_STAGES: &[&str] = &[
    "$changeStreamSplitLargeEvent",
    "$geoNear",
    "$indexStats",
    "$listCatalog",
    "$listClusterCatalog",
    "$listLocalSessions",
    "$listSampledQueries",
    "$listSearchIndexes",
    "$listSessions",
    "$planCacheStats",
    "$querySettings",
    "$queryStats",
    "$search",
    "$searchMeta",
    "$shardedDataDistribution",
    "$vectorSearch",
];

/// mongod's `internalPipelineLengthLimit`.
const MAX_PIPELINE_STAGES: usize = 1000;

fn fail(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// Prefixes an error the way mongod reports failures inside a stage's specification.
fn caused_by(stage: &str) -> impl Fn(CommandError) -> CommandError + '_ {
    move |error: CommandError| error.caused(&format!("Invalid {stage}"))
}

impl Pipeline {
    /// Parses `[{$stage: spec}, ...]`, each `$match` moved ahead as far as mongod's optimizer
    /// moves it ([`reorder_stages`]); errors carry mongod's codes and messages.
    pub fn parse(stages: &[Document]) -> CommandResult<Pipeline> {
        let reordered = optimize::reorder(stages);
        let stages: &[Document] = &reordered;
        let mut pipeline = Pipeline {
            source: None,
            documents: None,
            leading_match: None,
            leading_filter: None,
            stages: Vec::new(),
            out: None,
        };
        if stages.len() > MAX_PIPELINE_STAGES {
            return Err(fail(
                ErrorCode::Location7749501,
                format!("Pipeline length must be no longer than {MAX_PIPELINE_STAGES} stages."),
            ));
        }
        let mut leading_matches: Vec<Document> = Vec::new();
        let mut at_start = true;
        for (position, stage) in stages.iter().enumerate() {
            if stage.len() != 1 {
                return Err(fail(
                    ErrorCode::Location40323,
                    "A pipeline stage specification object must contain exactly one field.",
                ));
            }
            let Some((name, spec)) = stage.iter().next() else {
                return Err(CommandError::internal("stage vanished"));
            };
            match name.as_str() {
                "$collStats" | "$currentOp" | "$documents" => {
                    if position != 0 {
                        return Err(fail(
                            ErrorCode::Location40602,
                            format!("{name} is only valid as the first stage in a pipeline"),
                        ));
                    }
                    if name == "$collStats" {
                        pipeline.source = Some(SourceStage::CollStats(parse_coll_stats(spec)?));
                    } else if name == "$currentOp" {
                        pipeline.source = Some(SourceStage::CurrentOp(parse_current_op(spec)?));
                    } else {
                        pipeline.documents = Some(Expr::parse(spec)?);
                        pipeline.source = Some(SourceStage::Documents);
                    }
                    at_start = false;
                    continue;
                }
                "$out" | "$merge" => {
                    if position + 1 != stages.len() {
                        return Err(fail(
                            ErrorCode::Location40601,
                            format!("{name} can only be the final stage in the pipeline"),
                        ));
                    }
                    pipeline.out = Some(if name == "$out" {
                        FinalWrite::Out(OutTarget::parse(spec)?)
                    } else {
                        FinalWrite::Merge(Box::new(MergeSpec::parse(spec)?))
                    });
                    continue;
                }
                "$match" if at_start => {
                    let Bson::Document(filter) = spec else {
                        return Err(match_not_object());
                    };
                    refuse_where(filter)?;
                    Filter::parse(filter)?.refuse_near()?;
                    leading_matches.push(filter.clone());
                    continue;
                }
                _ => {}
            }
            at_start = false;
            parse_stage(name, spec, &mut pipeline.stages)?;
        }
        let merged = match leading_matches.len() {
            0 => None,
            1 => leading_matches.pop(),
            _ => Some(bson::doc! {"$and": leading_matches
            .into_iter()
            .map(Bson::Document)
            .collect::<Vec<_>>()}),
        };
        if let Some(filter) = &merged {
            pipeline.leading_filter = Some(Filter::parse(filter)?);
        }
        pipeline.leading_match = merged;
        Ok(pipeline)
    }

    /// Parses the pipeline of a pipeline-style update (an update's `u: [stage, …]`, or the
    /// `whenMatched` pipeline of `$merge`): every stage must be a document (FailedToParse), and
    /// only `$addFields`/`$set`, `$project`, `$unset` and `$replaceRoot`/`$replaceWith` may appear
    /// (any other stage mongod knows is 72 InvalidOptions, after the pipeline parsed).
    pub fn parse_update(stages: &[Bson]) -> CommandResult<Pipeline> {
        const UPDATE_STAGES: &[&str] = &[
            "$addFields",
            "$set",
            "$project",
            "$unset",
            "$replaceRoot",
            "$replaceWith",
        ];
        let stages = stages
            .iter()
            .map(|stage| match stage {
                Bson::Document(stage) => Ok(stage.clone()),
                _ => Err(fail(
                    ErrorCode::FailedToParse,
                    "Update argument must be either an object or an array",
                )),
            })
            .collect::<CommandResult<Vec<Document>>>()?;
        let pipeline = Pipeline::parse(&stages)?;
        for name in stages.iter().filter_map(|stage| stage.keys().next()) {
            if !UPDATE_STAGES.contains(&name.as_str()) {
                return Err(fail(
                    ErrorCode::InvalidOptions,
                    format!("{name} is not allowed to be used within an update"),
                ));
            }
        }
        Ok(pipeline)
    }

    /// Runs a pipeline of one-document stages ([`Pipeline::parse_update`]) on `document`.
    pub(crate) fn transform(
        &self,
        document: Document,
        context: &PipelineContext,
    ) -> CommandResult<Document> {
        self.run(vec![document], context)?
            .pop()
            .ok_or_else(|| CommandError::internal("an update pipeline produced no document"))
    }

    /// The leading `$match` filter (several leading `$match` stages merged under `$and`), for
    /// the caller to apply while reading; `None` if the pipeline does not start with `$match`.
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// [`Pipeline::leading_match`], parsed.
    pub fn leading_filter(&self) -> Option<&Filter> {
        self.leading_filter.as_ref()
    }

    /// Where the stages after the leading `$match` stop depending on anything but how many
    /// documents came in: the position of a `$count`, or of a `$group` on a constant `_id` with
    /// constant accumulator arguments (the shape drivers send for `countDocuments`), preceded only
    /// by `$skip`/`$limit`. `None` if the pipeline reads its input's fields.
    fn counting_stage(&self) -> Option<usize> {
        if self.source.is_some() {
            return None;
        }
        for (position, stage) in self.stages.iter().enumerate() {
            match stage {
                Stage::Skip(_) | Stage::Limit(_) => continue,
                Stage::Count(_) => return Some(position),
                Stage::Group(group) if group.is_constant() => return Some(position),
                _ => return None,
            }
        }
        None
    }

    /// Whether [`Pipeline::run_counted`] applies: the result depends only on how many documents
    /// the leading `$match` lets through, so the caller need not read them.
    pub fn counts_only(&self) -> bool {
        self.counting_stage().is_some()
    }

    /// [`Pipeline::run`] over `count` input documents whose contents do not matter (see
    /// [`Pipeline::counts_only`]; any other pipeline yields nothing).
    pub fn run_counted(
        &self,
        mut count: u64,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let Some(counting) = self.counting_stage() else {
            return Ok(Vec::new());
        };
        let mut documents = Vec::new();
        for (position, stage) in self.stages.iter().enumerate() {
            if position > counting {
                documents = stage.run_checked(documents, context)?;
                continue;
            }
            match stage {
                Stage::Skip(skip) => count = count.saturating_sub(*skip),
                Stage::Limit(limit) => count = count.min(*limit),
                Stage::Count(field) => documents = count_output(field, count),
                Stage::Group(group) => documents = group.run_on_copies(count, context)?,
                _ => {}
            }
        }
        Ok(documents)
    }

    /// The special first stage the caller must provide the input for, if any.
    /// The `$sort` that opens the stages after the leading `$match`, and the `$limit` right
    /// after it if any: the order the caller may ask its read to produce, and how many documents
    /// in that order are enough. `None` for pipelines with a source stage.
    pub fn leading_sort(&self) -> Option<(&SortSpec, Option<u64>)> {
        if self.source.is_some() {
            return None;
        }
        let Stage::Sort(spec) = self.stages.first()? else {
            return None;
        };
        let limit = match self.stages.get(1) {
            Some(Stage::Limit(limit)) => Some(*limit),
            _ => None,
        };
        Some((spec, limit))
    }

    pub fn source(&self) -> Option<&SourceStage> {
        self.source.as_ref()
    }

    /// Where a final `$out` or `$merge` writes the output.
    pub fn out(&self) -> Option<&FinalWrite> {
        self.out.as_ref()
    }

    /// Whether a stage reads another collection (`$lookup`, `$graphLookup`, `$unionWith`, or a
    /// `$facet` branch that does).
    pub(crate) fn reads_other_collections(&self) -> bool {
        self.stages.iter().any(|stage| match stage {
            Stage::Lookup(_) | Stage::GraphLookup(_) | Stage::UnionWith(_) => true,
            Stage::Facet(facet) => facet.reads_other_collections(),
            _ => false,
        })
    }

    /// Whether `document` passes the leading `$match` (which [`Pipeline::run`] leaves to its
    /// caller), under the run's collation.
    pub fn admits(&self, document: &Document, context: &PipelineContext) -> CommandResult<bool> {
        match &self.leading_filter {
            None => Ok(true),
            Some(filter) => filter.try_matches_collated(document, context.collation.as_deref()),
        }
    }
}

/// What `$count: field` produces for `count` documents.
fn count_output(field: &str, count: u64) -> Vec<Document> {
    if count == 0 {
        return Vec::new();
    }
    let value = i32::try_from(count)
        .map(Bson::Int32)
        .unwrap_or_else(|_| Bson::Int64(i64::try_from(count).unwrap_or(i64::MAX)));
    let mut output = Document::new();
    output.insert(field, value);
    vec![output]
}

fn match_not_object() -> CommandError {
    fail(
        ErrorCode::Location15959,
        "the match filter must be an expression in an object",
    )
}

fn parse_coll_stats(spec: &Bson) -> CommandResult<CollStatsRequest> {
    let Bson::Document(spec) = spec else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field '$collStats' is the wrong type '{}', expected type 'object'",
            type_name(spec)
        )));
    };
    let mut request = CollStatsRequest::default();
    for (name, value) in spec {
        let Bson::Document(section) = value else {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '$collStats.{name}' is the wrong type '{}', expected type 'object'",
                type_name(value)
            )));
        };
        match name.as_str() {
            "latencyStats" => request.latency_stats = Some(section.clone()),
            "storageStats" => request.storage_stats = Some(section.clone()),
            "count" => request.count = true,
            "queryExecStats" => request.query_exec_stats = true,
            other => {
                return Err(fail(
                    ErrorCode::Location40415,
                    format!("BSON field '$collStats.{other}' is an unknown field."),
                ))
            }
        }
    }
    Ok(request)
}

/// `$currentOp`'s options, with mongod's errors (`allUsers` and `localOps` are checked first,
/// as TypeMismatch; other fields as FailedToParse).
fn parse_current_op(spec: &Bson) -> CommandResult<CurrentOpRequest> {
    let Bson::Document(spec) = spec else {
        return Err(CommandError::type_mismatch(format!(
            "$currentOp options must be specified in an object, but found: {}",
            type_name(spec)
        )));
    };
    for (name, value) in spec {
        if matches!(name.as_str(), "allUsers" | "localOps") && !matches!(value, Bson::Boolean(_)) {
            return Err(CommandError::type_mismatch(format!(
                "The '{name}' parameter of the $currentOp stage must be a boolean value, but found: {}",
                type_name(value)
            )));
        }
    }
    let mut request = CurrentOpRequest {
        idle_sessions: true,
        ..CurrentOpRequest::default()
    };
    for (name, value) in spec {
        let flag = match name.as_str() {
            "allUsers" => &mut request.all_users,
            "idleConnections" => &mut request.idle_connections,
            "idleSessions" => &mut request.idle_sessions,
            "localOps" => &mut request.local_ops,
            "truncateOps" => &mut request.truncate_ops,
            "idleCursors" => &mut request.idle_cursors,
            "backtrace" => &mut request.backtrace,
            other => {
                return Err(fail(
                    ErrorCode::FailedToParse,
                    format!("Unrecognized option '{other}' in $currentOp stage."),
                ))
            }
        };
        let Bson::Boolean(value) = value else {
            return Err(fail(
                ErrorCode::FailedToParse,
                format!(
                    "The '{name}' parameter of the $currentOp stage must be a boolean value, but found: {}",
                    type_name(value)
                ),
            ));
        };
        *flag = *value;
    }
    Ok(request)
}

fn evaluate_documents(
    expression: &Expr,
    context: &PipelineContext,
) -> CommandResult<Vec<Document>> {
    let empty = Document::new();
    match expression.evaluate_in(&empty, context)? {
        Some(Bson::Array(elements)) => elements
            .into_iter()
            .map(|element| match element {
                Bson::Document(document) => Ok(document),
                other => Err(CommandError::type_mismatch(format!(
                    "$documents elements must be objects, found {}",
                    type_name(&other)
                ))),
            })
            .collect(),
        _ => Err(fail(ErrorCode::Location5858203, "an array is expected")),
    }
}

/// mongod parses a `$match` without JavaScript allowed: `$where` is 2 whether or not scripting is on.
fn refuse_where(filter: &Document) -> CommandResult<()> {
    if crate::filter::mentions_where(filter) {
        return Err(CommandError::bad_value(
            "$where is not allowed in this context",
        ));
    }
    Ok(())
}

fn parse_stage(name: &str, spec: &Bson, stages: &mut Vec<Stage>) -> CommandResult<()> {
    let stage = match name {
        "$match" => {
            let Bson::Document(filter) = spec else {
                return Err(match_not_object());
            };
            refuse_where(filter)?;
            let filter = Filter::parse(filter)?.refuse_near()?;
            if filter.text().is_some() {
                return Err(fail(
                    ErrorCode::Location17313,
                    "$match with $text is only allowed as the first pipeline stage",
                ));
            }
            Stage::Match(filter)
        }
        "$project" => parse_project(spec)?,
        "$addFields" | "$set" => {
            let Bson::Document(fields) = spec else {
                return Err(fail(
                    ErrorCode::Location40272,
                    format!(
                        "{name} specification stage must be an object, got {}",
                        type_name(spec)
                    ),
                ));
            };
            Stage::AddFields(FieldTree::parse(fields).map_err(caused_by(name))?)
        }
        "$unset" => parse_unset(spec)?,
        "$sort" => {
            let Bson::Document(keys) = spec else {
                return Err(fail(
                    ErrorCode::Location15973,
                    "the $sort key specification must be an object",
                ));
            };
            if keys.is_empty() {
                return Err(fail(
                    ErrorCode::Location15976,
                    "$sort stage must have at least one sort key",
                ));
            }
            Stage::Sort(SortSpec::parse(keys)?)
        }
        "$skip" => Stage::Skip(parse_count_argument(
            "$skip",
            spec,
            ErrorCode::Location5107200,
        )?),
        "$limit" => {
            let limit = parse_count_argument("$limit", spec, ErrorCode::Location5107201)?;
            if limit == 0 {
                return Err(fail(ErrorCode::Location15958, "the limit must be positive"));
            }
            Stage::Limit(limit)
        }
        "$count" => Stage::Count(parse_count_field(spec)?),
        "$group" => Stage::Group(Group::parse(spec)?),
        "$facet" => Stage::Facet(facet::Facet::parse(spec)?),
        "$lookup" => Stage::Lookup(Box::new(lookup::Lookup::parse(spec)?)),
        "$unionWith" => Stage::UnionWith(Box::new(lookup::UnionWith::parse(spec)?)),
        "$graphLookup" => Stage::GraphLookup(Box::new(graph_lookup::GraphLookup::parse(spec)?)),
        "$redact" => Stage::Redact(redact::Redact::parse(spec)?),
        "$bucketAuto" => Stage::BucketAuto(Box::new(bucket_auto::BucketAuto::parse(spec)?)),
        "$densify" => Stage::Densify(Box::new(densify::Densify::parse(spec)?)),
        "$sample" => Stage::Sample(facet::parse_sample(spec)?),
        "$setWindowFields" => Stage::Window(Box::new(window::SetWindowFields::parse(spec)?)),
        "$bucket" => {
            let (group, sort) = bucket::rewrite(spec)?;
            stages.push(Stage::Group(Group::parse(&group)?));
            Stage::Sort(SortSpec::parse(&sort)?)
        }
        "$fill" => {
            for (name, spec) in fill::rewrite(spec)? {
                parse_stage(name, &spec, stages)?;
            }
            return Ok(());
        }
        "$unwind" => Stage::Unwind(Unwind::parse(spec)?),
        "$sortByCount" => {
            let valid = match spec {
                Bson::String(_) => Expr::is_field_path(spec),
                Bson::Document(document) => {
                    document.len() == 1
                        && document
                            .keys()
                            .next()
                            .is_some_and(|key| key.starts_with('$'))
                }
                _ => {
                    return Err(fail(
                        ErrorCode::Location40149,
                        "the sortByCount field must be specified as a string or as an object",
                    ))
                }
            };
            if !valid {
                return Err(fail(
                    ErrorCode::Location40148,
                    "the sortByCount field must be defined as a $-prefixed path or an expression inside an object",
                ));
            }
            stages.push(Stage::Group(Group::counting(Expr::parse(spec)?, "count")));
            Stage::Sort(SortSpec::parse(&bson::doc! {"count": -1})?)
        }
        "$replaceRoot" => {
            let Bson::Document(arguments) = spec else {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field '$replaceRoot' is the wrong type '{}', expected type 'object'",
                    type_name(spec)
                )));
            };
            if let Some(unknown) = arguments.keys().find(|key| *key != "newRoot") {
                return Err(fail(
                    ErrorCode::Location40415,
                    format!("BSON field '$replaceRoot.{unknown}' is an unknown field."),
                ));
            }
            let new_root = arguments.get("newRoot").ok_or_else(|| {
                fail(
                    ErrorCode::Location40414,
                    "BSON field '$replaceRoot.newRoot' is missing but a required field",
                )
            })?;
            Stage::ReplaceRoot {
                new_root: Expr::parse(new_root)?,
                what: "'newRoot' expression ",
            }
        }
        "$replaceWith" => Stage::ReplaceRoot {
            new_root: Expr::parse(spec)?,
            what: "'replacement document' ",
        },
        // A standalone mongod's answer; change streams come with the replica-set mode.
        "$changeStream" => {
            return Err(fail(
                ErrorCode::Location40573,
                "The $changeStream stage is only supported on replica sets",
            ))
        }
        other if UNIMPLEMENTED_STAGES.contains(&other) => {
            return Err(fail(
                ErrorCode::NotImplemented,
                format!("{other} is not supported by this server"),
            ))
        }
        other => {
            return Err(fail(
                ErrorCode::Location40324,
                format!("Unrecognized pipeline stage name: '{other}'"),
            ))
        }
    };
    stages.push(stage);
    Ok(())
}

fn parse_project(spec: &Bson) -> CommandResult<Stage> {
    let Bson::Document(fields) = spec else {
        return Err(fail(
            ErrorCode::Location15969,
            "$project specification must be an object",
        ));
    };
    if fields.is_empty() {
        return Err(fail(
            ErrorCode::Location51272,
            "Invalid $project :: caused by :: projection specification must have at least one field",
        ));
    }
    let mut expressions = Vec::new();
    let projection = Projection::parse_aggregation(fields, &mut |value| {
        expressions.push(Expr::parse(value)?);
        Ok(expressions.len() - 1)
    })
    .map_err(caused_by("$project"))?;
    Ok(Stage::Project {
        projection,
        expressions,
    })
}

fn parse_unset(spec: &Bson) -> CommandResult<Stage> {
    let names: Vec<&str> = match spec {
        Bson::String(name) => vec![name.as_str()],
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(fail(
                    ErrorCode::Location31119,
                    "$unset specification must be a string or an array with at least one field",
                ));
            }
            items
                .iter()
                .map(|item| match item {
                    Bson::String(name) => Ok(name.as_str()),
                    _ => Err(fail(
                        ErrorCode::Location31120,
                        "$unset specification must be a string or an array containing only string values",
                    )),
                })
                .collect::<CommandResult<_>>()?
        }
        _ => {
            return Err(fail(
                ErrorCode::Location31002,
                "$unset specification must be a string or an array",
            ))
        }
    };
    let exclusion: Document = names
        .into_iter()
        .map(|name| (name.to_string(), Bson::Int32(0)))
        .collect();
    Ok(Stage::Unset(
        Projection::parse(&exclusion, &[]).map_err(caused_by("$unset"))?,
    ))
}

/// `$skip`/`$limit` arguments: a non-negative integral number of any numeric type.
fn parse_count_argument(stage: &str, spec: &Bson, code: ErrorCode) -> CommandResult<u64> {
    let reason = match Number::from_bson(spec) {
        None => format!("Expected a number in: {stage}: {}", value_string(spec)),
        Some(number) => match number.to_exact_i64() {
            Some(value) if value >= 0 => return Ok(value.unsigned_abs()),
            Some(_) => format!(
                "Expected a non-negative number in: {stage}: {}",
                value_string(spec)
            ),
            None if number.to_i64_truncated().is_none() && !number.is_nan() => {
                format!(
                    "Cannot represent as a 64-bit integer: {stage}: {}",
                    value_string(spec)
                )
            }
            None => format!("Expected an integer: {stage}: {}", value_string(spec)),
        },
    };
    Err(fail(
        code,
        format!("invalid argument to {stage} stage: {reason}"),
    ))
}

fn parse_count_field(spec: &Bson) -> CommandResult<String> {
    let Bson::String(field) = spec else {
        return Err(fail(
            ErrorCode::Location40156,
            "the count field must be a non-empty string",
        ));
    };
    if field.is_empty() {
        return Err(fail(
            ErrorCode::Location40157,
            "the count field must be a non-empty string",
        ));
    }
    if field.starts_with('$') {
        return Err(fail(
            ErrorCode::Location40158,
            "the count field cannot be a $-prefixed path",
        ));
    }
    if field.contains('\0') {
        return Err(fail(
            ErrorCode::Location40159,
            "the count field cannot contain a null byte",
        ));
    }
    if field.contains('.') {
        return Err(fail(
            ErrorCode::Location40160,
            "the count field cannot contain '.'",
        ));
    }
    Ok(field.clone())
}

/// Refuses a document a stage built deeper than a BSON document may be.
fn check_built_depth(document: &Document) -> CommandResult<()> {
    if exceeds_depth(document, MAX_BSON_DEPTH) {
        return Err(fail(
            ErrorCode::Overflow,
            format!("cannot convert document to BSON because it exceeds the limit of {MAX_BSON_DEPTH} levels of nesting"),
        ));
    }
    Ok(())
}

/// The largest document a stage may build (`BSONObjMaxInternalSize`).
const MAX_BUILT_DOCUMENT_BYTES: usize = 16 * 1024 * 1024 + 16 * 1024;

/// Refuses a document a stage built larger than a document may be, with mongod's message for
/// such a document.
fn check_built_size(document: &Document) -> CommandResult<()> {
    let size = tideway_base::bsonutil::encoded_size(document);
    if size > MAX_BUILT_DOCUMENT_BYTES {
        return Err(fail(
            ErrorCode::BSONObjectTooLarge,
            format!("BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and {MAX_BUILT_DOCUMENT_BYTES}(16MB)"),
        ));
    }
    Ok(())
}

impl Stage {
    /// [`Stage::run`], refusing output nested deeper than a BSON document may be: stages that
    /// build documents can nest their input (`$$ROOT` in `$addFields`, `$push` in `$group`), and
    /// the next stage must again see bounded input.
    fn run_checked(
        &self,
        documents: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let output = self.run(documents, context)?;
        let builds_documents = matches!(
            self,
            Stage::Project { .. }
                | Stage::AddFields(_)
                | Stage::Group(_)
                | Stage::ReplaceRoot { .. }
                | Stage::Facet(_)
                | Stage::BucketAuto(_)
                | Stage::Window(_)
        );
        if builds_documents {
            output.iter().try_for_each(check_built_depth)?;
        }
        // Each evaluation copies at most `MAX_COPIED_BYTES`, but stages could add that much
        // again and again: the next stage sees at most a document's size.
        let copies_values = matches!(
            self,
            Stage::Project { .. }
                | Stage::AddFields(_)
                | Stage::ReplaceRoot { .. }
                | Stage::Window(_)
        );
        if copies_values {
            output.iter().try_for_each(check_built_size)?;
        }
        Ok(output)
    }

    fn run(
        &self,
        documents: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        match self {
            Stage::Match(filter) => {
                let mut kept = Vec::with_capacity(documents.len());
                for document in documents {
                    if filter.try_matches_collated(&document, context.collation.as_deref())? {
                        kept.push(document);
                    }
                }
                Ok(kept)
            }
            Stage::Project {
                projection,
                expressions,
            } => documents
                .iter()
                .map(|document| {
                    projection.apply_computed(document, &|index| match expressions.get(index) {
                        Some(expression) => expression.evaluate_in(document, context),
                        None => Err(CommandError::internal("projection expression index")),
                    })
                })
                .collect(),
            Stage::AddFields(tree) => documents
                .into_iter()
                .map(|mut document| {
                    let root = document.clone();
                    tree.apply(&root, &mut document, context)?;
                    Ok(document)
                })
                .collect(),
            Stage::Unset(projection) => Ok(documents
                .iter()
                .map(|document| projection.apply(document, &|_| Bson::Null))
                .collect()),
            Stage::Sort(spec) => {
                let spec = spec.clone().with_collation(context.collation.clone());
                let mut keyed: Vec<(Vec<Bson>, Document)> = documents
                    .into_iter()
                    .map(|document| (spec.sort_key(&document), document))
                    .collect();
                // Stable: equal keys keep their input order.
                keyed.sort_by(|(a, _), (b, _)| spec.compare_keys(a, b));
                Ok(keyed.into_iter().map(|(_, document)| document).collect())
            }
            Stage::Skip(count) => Ok(documents
                .into_iter()
                .skip(usize::try_from(*count).unwrap_or(usize::MAX))
                .collect()),
            Stage::Limit(count) => Ok(documents
                .into_iter()
                .take(usize::try_from(*count).unwrap_or(usize::MAX))
                .collect()),
            Stage::Count(field) => Ok(count_output(field, documents.len() as u64)),
            Stage::Facet(facet) => Ok(vec![facet.run(documents, context)?]),
            Stage::Sample(size) => Ok(facet::sample(documents, *size)),
            Stage::Window(window) => window.run(documents, context),
            // The runner hands `$lookup` to its caller, which can read the foreign collection.
            Stage::Lookup(_) | Stage::UnionWith(_) | Stage::GraphLookup(_) => {
                Err(run::foreign_read_not_here())
            }
            Stage::Redact(redact) => {
                let mut output = Vec::with_capacity(documents.len());
                for document in documents {
                    output.extend(redact.apply(document, context)?);
                }
                Ok(output)
            }
            Stage::BucketAuto(bucket_auto) => bucket_auto.run(documents, context),
            Stage::Densify(densify) => densify.run(documents, context),
            Stage::Group(group) => group.run(documents, context),
            Stage::Unwind(unwind) => {
                let mut output = Vec::with_capacity(documents.len());
                for document in documents {
                    unwind.apply(document, &mut output)?;
                }
                Ok(output)
            }
            Stage::ReplaceRoot { new_root, what } => documents
                .iter()
                .map(|document| match new_root.evaluate_in(document, context)? {
                    Some(Bson::Document(replacement)) => Ok(replacement),
                    other => {
                        let shown = other.clone().unwrap_or(Bson::Null);
                        Err(fail(
                            ErrorCode::Location40228,
                            format!(
                                "{what}must evaluate to an object, but resulting value was: {}. Type of resulting value: '{}'. Input document: {}",
                                other.as_ref().map_or("MISSING".to_string(), |_| value_string(&shown)),
                                crate::expr::value_type_name(&other),
                                document_string(document)
                            ),
                        ))
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Shared helpers for the pipeline and stage tests (the expression-level ones, `now`,
    //! `context`, `eval` and `assert_value`, are [`crate::expr::fixtures`]).
    use super::*;
    use crate::compare::identical_documents;
    use crate::expr::fixtures::context;

    /// Parses and runs `stages` (the leading `$match` included, as a caller would apply it).
    pub fn run(stages: Vec<Document>, input: Vec<Document>) -> CommandResult<Vec<Document>> {
        let pipeline = Pipeline::parse(&stages)?;
        let input = match pipeline.leading_filter() {
            Some(filter) => input.into_iter().filter(|d| filter.matches(d)).collect(),
            None => input,
        };
        pipeline.run(input, &context())
    }

    /// The buffers an aggregate command gets: blocking sorts within `sort_max_bytes`, the stages'
    /// own `limits`, spilling under `dir` if `allow_disk_use`.
    pub(crate) fn command_buffers(
        dir: &std::path::Path,
        sort_max_bytes: usize,
        allow_disk_use: bool,
        limits: StageLimits,
    ) -> PipelineBuffers {
        PipelineBuffers {
            sort: crate::sorter::SortLimits {
                max_memory_bytes: sort_max_bytes,
                allow_disk_use,
                spill_dir: dir.to_path_buf(),
                exceeded_message: crate::sorter::sort_exceeded_message(sort_max_bytes),
                deadline: tideway_base::limits::Deadline::none(),
            },
            group_max_bytes: usize::MAX,
            stages: limits,
        }
    }

    /// Parses and runs `stages` as an aggregate command does, its blocking stages holding
    /// their documents in `buffers`.
    pub(crate) fn run_in(
        stages: Vec<Document>,
        input: Vec<Document>,
        buffers: &dyn Buffers,
    ) -> CommandResult<Vec<Document>> {
        let pipeline = Pipeline::parse(&stages)?;
        let context = context();
        let mut run = pipeline.start(&context, buffers);
        for document in input {
            if pipeline.admits(&document, &context)? {
                run.push(document)?;
            }
        }
        run.finish_without_reads()?.collect()
    }

    #[track_caller]
    pub(crate) fn run_ok(stages: Vec<Document>, input: Vec<Document>) -> Vec<Document> {
        run(stages, input).expect("pipeline runs")
    }

    #[track_caller]
    pub(crate) fn parse_error(stages: Vec<Document>) -> CommandError {
        Pipeline::parse(&stages).expect_err("pipeline should be rejected")
    }

    /// Byte-identical documents (field order and numeric types matter).
    #[track_caller]
    pub(crate) fn assert_documents(actual: &[Document], expected: &[Document]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?} != {expected:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!(identical_documents(a, e), "{actual:?} != {expected:?}");
        }
    }

    pub fn sales() -> Vec<Document> {
        vec![
            bson::doc! {"_id": 1, "item": "a", "price": 10, "qty": 2, "tags": ["x", "y"]},
            bson::doc! {"_id": 2, "item": "b", "price": 20, "qty": 1, "tags": []},
            bson::doc! {"_id": 3, "item": "a", "price": 5.5, "qty": 4},
            bson::doc! {"_id": 4, "item": "c", "price": 20, "qty": 10, "tags": "z"},
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::expr::fixtures::{context, eval, now};
    use bson::{doc, DateTime};

    #[test]
    fn copies_are_bounded_within_and_across_stages() {
        // Found by tests/fuzz.rs: stages doubling `a` ran the server out of memory.
        let mut stages = vec![doc! {"$addFields": {"a": [1]}}];
        let doubling = doc! {"$addFields": {"a": {"$concatArrays": ["$a", "$a"]}}};
        stages.extend((0..64).map(|_| doubling.clone()));
        let error = run(stages, vec![doc! {"_id": 1}]).expect_err("too large");
        assert_eq!(error.code, ErrorCode::BSONObjectTooLarge);
        // Within one expression, each `$let` level doubles the value.
        let doubling = (0..60).fold(Bson::Array(vec![Bson::Int32(1)]), |inner, _| {
            Bson::Document(doc! {"$let": {"vars": {"x": inner}, "in": ["$$x", "$$x"]}})
        });
        let error = eval(doubling, &doc! {}).expect_err("too large");
        assert_eq!(error.code.code(), 10334);
        // Stages that each add a copy within the budget stop at the largest document.
        let big = "x".repeat(4 << 20);
        let stages: Vec<Document> = (0..8)
            .map(|i| doc! {"$addFields": {format!("f{i}"): "$big"}})
            .collect();
        let error = run(stages, vec![doc! {"_id": 1, "big": big}]).expect_err("too large");
        assert!(
            error.errmsg.starts_with("BSONObj size: "),
            "{}",
            error.errmsg
        );
        // Ordinary copies are untouched.
        let stages = vec![doc! {"$addFields": {"b": ["$a", "$a"], "c": "$$ROOT"}}];
        assert_eq!(run_ok(stages, vec![doc! {"a": 1}]).len(), 1);
    }

    #[test]
    fn count_documents_pipeline_counts_matches_after_skip_and_limit() {
        let stages = vec![
            doc! {"$match": {"item": "a"}},
            doc! {"$skip": 0_i64},
            doc! {"$limit": 10},
            doc! {"$group": {"_id": 1, "n": {"$sum": 1}}},
        ];
        assert_documents(&run_ok(stages, sales()), &[doc! {"_id": 1, "n": 2}]);
        let skipping = vec![
            doc! {"$match": {}},
            doc! {"$skip": 1},
            doc! {"$limit": 2.0},
            doc! {"$group": {"_id": 1, "n": {"$sum": 1}}},
        ];
        assert_documents(&run_ok(skipping, sales()), &[doc! {"_id": 1, "n": 2}]);
    }

    /// A counting pipeline run on a count gives what running it on that many documents gives.
    #[test]
    fn counting_pipelines_run_on_a_count_as_on_documents() {
        let context = PipelineContext::at(DateTime::from_millis(0));
        let counting = [
            vec![doc! {"$group": {"_id": 1, "n": {"$sum": 1}}}],
            vec![
                doc! {"$match": {}},
                doc! {"$skip": 1},
                doc! {"$limit": 2},
                doc! {"$group": {"_id": null, "n": {"$sum": 2.5}, "c": {"$count": {}}, "f": {"$first": "x"}}},
            ],
            vec![doc! {"$count": "total"}],
            vec![
                doc! {"$limit": 3},
                doc! {"$count": "total"},
                doc! {"$project": {"t": "$total"}},
            ],
            vec![doc! {"$skip": 10}, doc! {"$count": "total"}],
        ];
        for stages in counting {
            let pipeline = Pipeline::parse(&stages).expect("parses");
            assert!(pipeline.counts_only(), "{stages:?}");
            let input: Vec<Document> = (0..4).map(|i| doc! {"_id": i, "v": i}).collect();
            for count in [0, 4] {
                let expected = run_ok(stages.clone(), input[..count].to_vec());
                let counted = pipeline.run_counted(count as u64, &context).expect("runs");
                assert_documents(&counted, &expected);
            }
        }
        let reading = [
            vec![doc! {"$group": {"_id": "$item", "n": {"$sum": 1}}}],
            vec![doc! {"$group": {"_id": 1, "n": {"$sum": "$qty"}}}],
            vec![doc! {"$sort": {"a": 1}}, doc! {"$count": "n"}],
            vec![doc! {"$skip": 1}],
            vec![],
        ];
        for stages in reading {
            let pipeline = Pipeline::parse(&stages).expect("parses");
            assert!(!pipeline.counts_only(), "{stages:?}");
        }
    }

    #[test]
    fn count_documents_pipeline_on_empty_input_returns_nothing() {
        let stages = vec![
            doc! {"$match": {"item": "zzz"}},
            doc! {"$group": {"_id": 1, "n": {"$sum": 1}}},
        ];
        assert!(run_ok(stages, sales()).is_empty());
    }

    #[test]
    fn leading_matches_merge_under_and_and_are_not_rerun() {
        let pipeline = Pipeline::parse(&[
            doc! {"$match": {"a": 1}},
            doc! {"$match": {"b": 2}},
            // A computed `a`: the last `$match` cannot move ahead of it.
            doc! {"$project": {"a": {"$add": ["$a", 0]}}},
            doc! {"$match": {"a": 5}},
        ])
        .expect("valid");
        assert_eq!(
            pipeline.leading_match(),
            Some(&doc! {"$and": [{"a": 1}, {"b": 2}]})
        );
        // run() skips the leading matches but applies the later one.
        let output = pipeline
            .run(
                vec![doc! {"_id": 1, "a": 5}, doc! {"_id": 2, "a": 1}],
                &context(),
            )
            .expect("runs");
        assert_documents(&output, &[doc! {"_id": 1, "a": 5}]);
        let single = Pipeline::parse(&[doc! {"$match": {"a": 1}}]).expect("valid");
        assert_eq!(single.leading_match(), Some(&doc! {"a": 1}));
        let none =
            Pipeline::parse(&[doc! {"$limit": 1}, doc! {"$match": {"a": 1}}]).expect("valid");
        assert_eq!(none.leading_match(), None);
    }

    #[test]
    fn stage_documents_must_have_exactly_one_field() {
        for stage in [doc! {}, doc! {"$match": {}, "$limit": 1}] {
            let error = parse_error(vec![stage]);
            assert_eq!(error.code.code(), 40323);
            assert_eq!(
                error.errmsg,
                "A pipeline stage specification object must contain exactly one field."
            );
        }
    }

    #[test]
    fn unknown_stages_are_40324_and_known_missing_ones_not_implemented() {
        let error = parse_error(vec![doc! {"$foo": 1}]);
        assert_eq!(error.code.code(), 40324);
        assert_eq!(error.errmsg, "Unrecognized pipeline stage name: '$foo'");
        let error = parse_error(vec![doc! {"$changeStream": {}}]);
        assert_eq!(error.code.code(), 40573, "change_stream_standalone.js");
        for stage in ["$search", "$geoNear"] {
            let error = parse_error(vec![doc! {stage: {}}]);
            assert_eq!(error.code, ErrorCode::NotImplemented, "{stage}");
            assert!(error.errmsg.contains(stage));
        }
    }

    #[test]
    fn coll_stats_is_a_first_stage_source_the_caller_answers() {
        let pipeline = Pipeline::parse(&[doc! {"$collStats": {"count": {}}}]).expect("valid");
        assert_eq!(
            pipeline.source(),
            Some(&SourceStage::CollStats(CollStatsRequest {
                count: true,
                ..CollStatsRequest::default()
            }))
        );
        assert_eq!(pipeline.leading_match(), None);
        let stats = Pipeline::parse(&[
            doc! {"$collStats": {"storageStats": {"scale": 1024}}},
            doc! {"$project": {"storageStats.count": 1}},
        ])
        .expect("valid");
        let Some(SourceStage::CollStats(request)) = stats.source() else {
            panic!("collStats source expected");
        };
        assert_eq!(request.storage_stats, Some(doc! {"scale": 1024}));
        let output = stats
            .run(
                vec![doc! {"ns": "db.c", "storageStats": {"count": 3, "size": 10}}],
                &context(),
            )
            .expect("runs");
        assert_documents(&output, &[doc! {"storageStats": {"count": 3}}]);
        assert_eq!(
            parse_error(vec![doc! {"$match": {}}, doc! {"$collStats": {}}])
                .code
                .code(),
            40602
        );
        assert_eq!(
            parse_error(vec![doc! {"$collStats": {"bogus": {}}}])
                .code
                .code(),
            40415
        );
    }

    #[test]
    fn documents_stage_evaluates_its_documents() {
        let pipeline = Pipeline::parse(&[
            doc! {"$documents": [{"x": 1}, {"x": {"$add": [1, 1]}}]},
            doc! {"$match": {"x": 2}},
        ])
        .expect("valid");
        assert_eq!(pipeline.source(), Some(&SourceStage::Documents));
        let output = pipeline.run(Vec::new(), &context()).expect("runs");
        assert_documents(&output, &[doc! {"x": 2}]);
    }

    #[test]
    fn project_includes_in_document_order_then_computed_in_spec_order() {
        let stages = vec![doc! {"$project": {
            "total": {"$multiply": ["$price", "$qty"]},
            "qty": 1,
            "item": true,
            "label": {"$concat": ["$item", "-", {"$toString": "$_id"}]},
        }}];
        let output = run_ok(stages, sales()[..1].to_vec());
        assert_documents(
            &output,
            &[doc! {"_id": 1, "item": "a", "qty": 2, "total": 20, "label": "a-1"}],
        );
    }

    #[test]
    fn project_exclusion_nested_specs_and_remove() {
        let input = vec![doc! {"_id": 1, "a": {"b": 1, "c": 2}, "d": 3}];
        assert_documents(
            &run_ok(vec![doc! {"$project": {"a.b": 0, "_id": 0}}], input.clone()),
            &[doc! {"a": {"c": 2}, "d": 3}],
        );
        assert_documents(
            &run_ok(
                vec![doc! {"$project": {"a": {"c": 1, "x": {"$literal": 1}}, "gone": "$$REMOVE"}}],
                input.clone(),
            ),
            &[doc! {"_id": 1, "a": {"c": 2, "x": 1}}],
        );
        assert_documents(
            &run_ok(
                vec![
                    doc! {"$project": {"_id": 0, "z": {"$cond": [{"$gt": ["$d", 2]}, "$$REMOVE", "$d"]}}},
                ],
                input,
            ),
            &[doc! {}],
        );
    }

    #[test]
    fn project_rejects_mixed_empty_and_bad_specs() {
        let error = parse_error(vec![doc! {"$project": {}}]);
        assert_eq!(error.code.code(), 51272);
        let mixed = parse_error(vec![doc! {"$project": {"a": 0, "b": {"$add": [1]}}}]);
        assert!(mixed
            .errmsg
            .starts_with("Invalid $project :: caused by :: "));
        let unknown = parse_error(vec![doc! {"$project": {"a": {"$foo": 1}}}]);
        assert_eq!(unknown.code, ErrorCode::InvalidPipelineOperator);
        assert_eq!(
            unknown.errmsg,
            "Invalid $project :: caused by :: Unrecognized expression '$foo'"
        );
        assert_eq!(parse_error(vec![doc! {"$project": 1}]).code.code(), 15969);
        assert!(parse_error(vec![doc! {"$project": {"a.$": 1}}])
            .errmsg
            .contains("positional"));
    }

    #[test]
    fn unset_removes_fields_and_validates_its_spec() {
        let input = vec![doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}}];
        assert_documents(
            &run_ok(vec![doc! {"$unset": ["a", "b.c"]}], input.clone()),
            &[doc! {"_id": 1, "b": {"d": 2}}],
        );
        assert_documents(
            &run_ok(vec![doc! {"$unset": "_id"}], input),
            &[doc! {"a": 1, "b": {"c": 1, "d": 2}}],
        );
        assert_eq!(parse_error(vec![doc! {"$unset": 1}]).code.code(), 31002);
        assert_eq!(parse_error(vec![doc! {"$unset": []}]).code.code(), 31119);
        assert_eq!(parse_error(vec![doc! {"$unset": [1]}]).code.code(), 31120);
    }

    #[test]
    fn sort_is_stable_and_skip_limit_slice() {
        let output = run_ok(
            vec![
                doc! {"$sort": {"price": -1}},
                doc! {"$skip": 1},
                doc! {"$limit": 2},
                doc! {"$project": {"_id": 1}},
            ],
            sales(),
        );
        // Prices 20 (ids 2 and 4, input order kept), 10, 5.5.
        assert_documents(&output, &[doc! {"_id": 4}, doc! {"_id": 1}]);
        assert_eq!(parse_error(vec![doc! {"$sort": {}}]).code.code(), 15976);
        assert_eq!(parse_error(vec![doc! {"$sort": 1}]).code.code(), 15973);
    }

    #[test]
    fn skip_and_limit_arguments_follow_mongod() {
        let error = parse_error(vec![doc! {"$skip": "x"}]);
        assert_eq!(error.code.code(), 5107200);
        assert_eq!(
            error.errmsg,
            "invalid argument to $skip stage: Expected a number in: $skip: \"x\""
        );
        assert_eq!(
            parse_error(vec![doc! {"$skip": -1}]).errmsg,
            "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1"
        );
        assert_eq!(
            parse_error(vec![doc! {"$limit": 1.5}]).errmsg,
            "invalid argument to $limit stage: Expected an integer: $limit: 1.5"
        );
        let zero = parse_error(vec![doc! {"$limit": 0}]);
        assert_eq!(zero.code.code(), 15958);
        assert_eq!(zero.errmsg, "the limit must be positive");
    }

    #[test]
    fn count_stage_counts_and_emits_nothing_for_no_input() {
        assert_documents(
            &run_ok(vec![doc! {"$count": "n"}], sales()),
            &[doc! {"n": 4}],
        );
        assert!(run_ok(vec![doc! {"$count": "n"}], Vec::new()).is_empty());
        assert_eq!(parse_error(vec![doc! {"$count": 1}]).code.code(), 40156);
        assert_eq!(parse_error(vec![doc! {"$count": ""}]).code.code(), 40157);
        assert_eq!(parse_error(vec![doc! {"$count": "$n"}]).code.code(), 40158);
        assert_eq!(parse_error(vec![doc! {"$count": "a.b"}]).code.code(), 40160);
    }

    #[test]
    fn group_by_field_with_every_accumulator() {
        let output = run_ok(
            vec![
                doc! {"$group": {
                    "_id": "$item",
                    "total": {"$sum": {"$multiply": ["$price", "$qty"]}},
                    "avg": {"$avg": "$qty"},
                    "min": {"$min": "$price"},
                    "max": {"$max": "$price"},
                    "first": {"$first": "$_id"},
                    "last": {"$last": "$_id"},
                    "ids": {"$push": "$_id"},
                    "prices": {"$addToSet": "$price"},
                    "n": {"$count": {}},
                }},
                doc! {"$sort": {"_id": 1}},
            ],
            sales(),
        );
        assert_documents(
            &output,
            &[
                doc! {"_id": "a", "total": 42.0, "avg": 3.0, "min": 5.5, "max": 10, "first": 1,
                "last": 3, "ids": [1, 3], "prices": [10, 5.5], "n": 2},
                doc! {"_id": "b", "total": 20, "avg": 1.0, "min": 20, "max": 20, "first": 2,
                "last": 2, "ids": [2], "prices": [20], "n": 1},
                doc! {"_id": "c", "total": 200, "avg": 10.0, "min": 20, "max": 20, "first": 4,
                "last": 4, "ids": [4], "prices": [20], "n": 1},
            ],
        );
    }

    #[test]
    fn group_ids_may_be_null_documents_and_numbers_of_any_type() {
        let input = vec![
            doc! {"_id": 1, "k": 1, "j": "x"},
            doc! {"_id": 2, "k": 1.0, "j": "x"},
            doc! {"_id": 3, "k": 1_i64, "j": "y"},
            doc! {"_id": 4},
        ];
        let by_number = run_ok(
            vec![doc! {"$group": {"_id": "$k", "n": {"$sum": 1}}}],
            input.clone(),
        );
        assert_documents(
            &by_number,
            &[doc! {"_id": 1, "n": 3}, doc! {"_id": null, "n": 1}],
        );
        let by_document = run_ok(
            vec![doc! {"$group": {"_id": {"k": "$k", "j": "$j"}, "n": {"$sum": 1}}}],
            input.clone(),
        );
        assert_documents(
            &by_document,
            &[
                doc! {"_id": {"k": 1, "j": "x"}, "n": 2},
                doc! {"_id": {"k": 1_i64, "j": "y"}, "n": 1},
                doc! {"_id": {}, "n": 1},
            ],
        );
        let all = run_ok(
            vec![
                doc! {"$group": {"_id": null, "ids": {"$push": "$_id"}, "first": {"$first": "$j"}}},
            ],
            input,
        );
        assert_documents(
            &all,
            &[doc! {"_id": null, "ids": [1, 2, 3, 4], "first": "x"}],
        );
    }

    #[test]
    fn group_spec_errors_follow_mongod() {
        assert_eq!(parse_error(vec![doc! {"$group": 1}]).code.code(), 15947);
        assert_eq!(
            parse_error(vec![doc! {"$group": {"n": {"$sum": 1}}}])
                .code
                .code(),
            15955
        );
        assert_eq!(
            parse_error(vec![doc! {"$group": {"_id": 1, "n": 1}}])
                .code
                .code(),
            40234
        );
        assert_eq!(
            parse_error(vec![
                doc! {"$group": {"_id": 1, "n": {"$sum": 1, "$avg": 1}}}
            ])
            .code
            .code(),
            40238
        );
        let unknown = parse_error(vec![doc! {"$group": {"_id": 1, "n": {"$foo": 1}}}]);
        assert_eq!(unknown.code.code(), 15952);
        assert_eq!(unknown.errmsg, "unknown group operator '$foo'");
        assert_eq!(
            parse_error(vec![doc! {"$group": {"_id": 1, "n": {"$accumulator": {}}}}]).code,
            ErrorCode::Location4544707
        );
        assert_eq!(
            parse_error(vec![doc! {"$group": {"_id": 1, "a.b": {"$sum": 1}}}])
                .code
                .code(),
            40235
        );
    }

    #[test]
    fn sort_by_count_groups_and_orders_by_count_descending() {
        let output = run_ok(vec![doc! {"$sortByCount": "$item"}], sales());
        assert_documents(
            &output,
            &[
                doc! {"_id": "a", "count": 2},
                doc! {"_id": "b", "count": 1},
                doc! {"_id": "c", "count": 1},
            ],
        );
        assert_eq!(
            parse_error(vec![doc! {"$sortByCount": "item"}]).code.code(),
            40148
        );
        assert_eq!(
            parse_error(vec![doc! {"$sortByCount": 1}]).code.code(),
            40149
        );
    }

    #[test]
    fn replace_root_and_replace_with_promote_documents() {
        let input = vec![doc! {"_id": 1, "inner": {"x": 1}}];
        assert_documents(
            &run_ok(
                vec![doc! {"$replaceRoot": {"newRoot": "$inner"}}],
                input.clone(),
            ),
            &[doc! {"x": 1}],
        );
        assert_documents(
            &run_ok(
                vec![doc! {"$replaceWith": {"$mergeObjects": ["$inner", {"id": "$_id"}]}}],
                input.clone(),
            ),
            &[doc! {"x": 1, "id": 1}],
        );
        let error = run(vec![doc! {"$replaceRoot": {"newRoot": "$_id"}}], input)
            .expect_err("not a document");
        assert_eq!(error.code.code(), 40228);
        assert_eq!(
            error.errmsg,
            "'newRoot' expression must evaluate to an object, but resulting value was: 1. Type of resulting value: 'int'. Input document: {_id: 1, inner: { x: 1 }}"
        );
        assert_eq!(
            parse_error(vec![doc! {"$replaceRoot": {}}]).code.code(),
            40414
        );
    }

    #[test]
    fn match_after_other_stages_filters_computed_fields() {
        let output = run_ok(
            vec![
                doc! {"$addFields": {"total": {"$multiply": ["$price", "$qty"]}}},
                doc! {"$match": {"total": {"$gte": 22}}},
                doc! {"$project": {"_id": 1}},
            ],
            sales(),
        );
        assert_documents(&output, &[doc! {"_id": 3}, doc! {"_id": 4}]);
        assert_eq!(parse_error(vec![doc! {"$match": 1}]).code.code(), 15959);
    }

    #[test]
    fn now_is_the_context_clock() {
        let output = run_ok(
            vec![doc! {"$project": {"_id": 0, "t": "$$NOW", "y": {"$year": "$$NOW"}}}],
            vec![doc! {"_id": 1}],
        );
        assert_documents(&output, &[doc! {"t": now(), "y": 2021}]);
    }
}
