//! `aggregate`: reads the collection through the planner (the pipeline's leading `$match` decides
//! the plan, and only visible documents enter), streams the documents through the remaining
//! stages (`query::pipeline`) with blocking stages held by `sorter` buffers within the memory
//! limits, and returns the output as a cursor. `$collStats` answers from storage
//! statistics, with expired documents left out of the count; `$currentOp` from the op registry
//! (`commands::operations::current_ops`).

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::commands::args::{
    check_hint, collation_for, let_variables, optional_bool, optional_document, required,
    validate_namespace, validate_writable_namespace, write_options, wrong_type,
};
use crate::commands::crud::{apply_update_statement, insert_documents, WriteContext};
use crate::commands::ddl::{storage_stats, visible_stats};
use crate::commands::find::{buffered_cursor, count_from_keys, stream_cursor};
use crate::dispatch::{CommandContext, CommandSpec};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::planner::{self, Query};
use crate::query::collation::CollationChoice;
use crate::query::pipeline::{
    CollStatsRequest, DocumentStream, Facet, FinalWrite, Foreign, MergeSpec, MergeWrite, OutTarget,
    Resume, SourceStage, Step,
};
use crate::query::variables::with_command_variables;
use crate::query::variables::CommandVariables;
use crate::query::{Filter, Pipeline, PipelineContext};
use crate::sorter::{self, PipelineBuffers};
use crate::storage::Namespace;
use crate::wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "aggregate",
    aliases: &[],
    help: "Run an aggregation pipeline over a collection ($match, $group, $project, $sort, $unwind, ...).",
    admin_only: false,
    test_only: false,
    handler: async_handler!(aggregate),
}];

async fn aggregate(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    let collection = match body.get("aggregate") {
        Some(Bson::String(coll)) => {
            let ns = Namespace::new(ctx.db, coll.as_str());
            validate_namespace(&ns)?;
            Some(ns)
        }
        Some(value) if crate::bsonutil::as_f64(value) == Some(1.0) => None,
        Some(other) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                format!(
                    "collection name has invalid type {}",
                    crate::query::display::type_name(other)
                ),
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                "missing collection name",
            ))
        }
    };
    let stages = pipeline_stages(body)?;
    if body.get("explain").is_some_and(crate::bsonutil::is_truthy) {
        return crate::commands::explain::explain_aggregate_command(ctx, body)
            .await
            .map(Reply::from);
    }
    if optional_document(ctx, body, "cursor")?.is_none() {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }
    let variables = let_variables(ctx, body)?;
    let pipeline = with_command_variables(&variables, || Pipeline::parse(&stages))?;
    let collection_meta = match &collection {
        Some(ns) => ctx.state.storage.collection(ns).await?,
        None => None,
    };
    let now_ms = ctx.state.clock.now_ms();
    let context = PipelineContext {
        now: bson::DateTime::from_millis(now_ms),
        collation: collation_for("aggregate", body, collection_meta.as_ref())?,
    };
    let max_sort_bytes = ctx.state.params.max_blocking_sort_bytes();
    let buffers = PipelineBuffers {
        sort: ctx.blocking_limits(
            optional_bool(ctx, body, "allowDiskUse")?,
            max_sort_bytes,
            sorter::sort_exceeded_message(usize::try_from(max_sort_bytes).unwrap_or(usize::MAX)),
        ),
        group_max_bytes: usize::try_from(ctx.state.params.max_group_bytes()).unwrap_or(usize::MAX),
        stages: ctx.state.params.stage_limits(),
    };
    let mut run = pipeline.start(&context, &buffers);
    match (pipeline.source(), &collection) {
        (Some(SourceStage::Documents), _) => {}
        (Some(SourceStage::CollStats(request)), Some(ns)) => {
            run.push(coll_stats_source(ctx, ns, request).await?)
                .map_err(during_aggregation)?;
        }
        (Some(SourceStage::CurrentOp(request)), None) if ctx.db == "admin" => {
            for op in crate::commands::operations::current_ops(ctx.state, request)? {
                run.push(op).map_err(during_aggregation)?;
            }
        }
        (Some(SourceStage::CurrentOp(_)), _) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                "$currentOp must be run against the 'admin' database with {aggregate: 1}",
            ))
        }
        (Some(SourceStage::CollStats(_)), None) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                "$collStats must be run against a collection",
            ))
        }
        (None, Some(ns)) => {
            let storage = ctx.state.storage.as_ref();
            let view = ctx.state.view(ns).await?;
            check_hint(ns, view.meta.as_ref(), body)?;
            let filter = pipeline
                .leading_filter()
                .cloned()
                .map_or_else(|| Filter::parse(&Document::new()), Ok)?;
            if filter.matches_everything() && pipeline.counts_only() {
                // Counting every visible document (`countDocuments({})`): the count `count`
                // gives, from storage statistics and the expiry structures, no document read.
                let visible = visible_stats(ctx, &view)
                    .await?
                    .map_or(0, |stats| stats.count);
                let output = pipeline.run_counted(visible, &context)?;
                return buffered_cursor(ctx, body, ns.to_string(), output).await;
            }
            // Documents flow through the pipeline as they are read: only blocking stages hold
            // any, within their limits.
            let query = aggregation_query(&view, body, &pipeline, filter, &context.collation);
            let planned = view.plan(storage, &ctx.state.plan_cache, &query).await?;
            if pipeline.counts_only() {
                // `countDocuments(filter)`: from the index keys when they answer it.
                if let Some(count) =
                    count_from_keys(ctx, &view, &planned.plan, &query.filter).await?
                {
                    let output = pipeline.run_counted(count, &context)?;
                    return buffered_cursor(ctx, body, ns.to_string(), output).await;
                }
            }
            // A read in the order of a leading `$sort` followed by `$limit n` can stop after n
            // documents: they are the first n the sort would keep.
            let enough = query.wanted.filter(|_| planned.plan.provides_sort);
            ctx.op.set_plan_summary(planned.plan.summary());
            let mut stream = planned.stream;
            let mut read = 0;
            while enough.is_none_or(|enough| read < enough) {
                let Some(record) = stream.next(storage).await? else {
                    break;
                };
                read += 1;
                run.push(record.doc.into_document())
                    .map_err(during_aggregation)?;
            }
            let stats = stream.stats();
            ctx.op
                .add_examined(stats.keys_examined, stats.docs_examined);
        }
        (None, None) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                "{aggregate: 1} is only valid with a source stage such as $documents",
            ))
        }
    };
    let step = run.finish().map_err(during_aggregation)?;
    let output = complete(ctx, step).await?;
    let cursor_ns = match &collection {
        Some(ns) => ns.to_string(),
        None => format!("{}.$cmd.aggregate", ctx.db),
    };
    match pipeline.out() {
        None => return stream_cursor(ctx, body, cursor_ns, output).await,
        Some(FinalWrite::Out(target)) => write_out(ctx, body, target, output, &variables).await?,
        Some(FinalWrite::Merge(merge)) => {
            write_merge(ctx, body, merge, output, &variables, &context).await?
        }
    }
    Ok(Reply::cursor(0, &cursor_ns, Vec::new(), true))
}

/// The output of a run from `step` on: each stage that reads another collection is served
/// here (one planned read per `$lookup` batch, per `$graphLookup` depth, per `$unionWith`),
/// and a `$facet` whose branches read other collections runs each branch the same way.
async fn complete<'p>(
    ctx: &CommandContext<'_>,
    mut step: Step<'p>,
) -> CommandResult<DocumentStream> {
    loop {
        step = match step {
            Step::Done(output) => return Ok(output),
            Step::Foreign {
                read,
                documents,
                resume,
            } => {
                let joined = match read {
                    Foreign::Lookup(lookup) => {
                        let collation = resume.context().collation.clone();
                        let filter = lookup.foreign_filter(&documents);
                        let foreign =
                            read_collection(ctx, &lookup.from, filter, &collation).await?;
                        if lookup.nested_reads() {
                            // The sub-pipeline reads too: run it per document, serving its
                            // reads here.
                            let candidates = lookup.candidates(&foreign, resume.context());
                            let mut joined = Vec::with_capacity(documents.len());
                            for mut document in documents {
                                let pipeline = lookup
                                    .sub_pipeline(&document, resume.context())
                                    .map_err(during_aggregation)?;
                                let matched = candidates.of(&document);
                                let results = run_nested(ctx, &pipeline, matched, &resume).await?;
                                lookup
                                    .set_results(&mut document, results)
                                    .map_err(during_aggregation)?;
                                joined.push(document);
                            }
                            joined
                        } else {
                            lookup
                                .join(documents, &foreign, resume.context())
                                .map_err(during_aggregation)?
                        }
                    }
                    Foreign::GraphLookup(graph) => {
                        let collation = resume.context().collation.clone();
                        let mut joined = Vec::with_capacity(documents.len());
                        for document in documents {
                            let mut search = graph
                                .search(document, resume.context())
                                .map_err(during_aggregation)?;
                            while let Some(filter) = search.next_filter() {
                                let found =
                                    read_collection(ctx, &graph.from, filter, &collation).await?;
                                search.visit(found).map_err(during_aggregation)?;
                            }
                            joined.push(search.finish().map_err(during_aggregation)?);
                        }
                        joined
                    }
                    Foreign::UnionWith(union) => {
                        let collation = resume.context().collation.clone();
                        let mut documents = documents;
                        let mut other =
                            read_collection(ctx, &union.coll, Document::new(), &collation).await?;
                        if let Some(pipeline) = &union.pipeline {
                            other = run_nested(ctx, pipeline, other, &resume).await?;
                        }
                        documents.extend(other);
                        documents
                    }
                    Foreign::Facet(facet) => {
                        let mut results = Vec::with_capacity(facet.branches().len());
                        for (name, branch) in facet.branches() {
                            let output =
                                run_nested(ctx, branch, documents.clone(), &resume).await?;
                            results.push((name.as_str(), output));
                        }
                        let max_bytes = resume.buffers().stage_limits().facet_max_output_bytes;
                        vec![Facet::assemble(results, max_bytes).map_err(during_aggregation)?]
                    }
                };
                resume.resume(joined).map_err(during_aggregation)?
            }
        };
    }
}

/// A nested pipeline (a `$facet` branch, a `$unionWith` pipeline) over `documents`, its
/// leading `$match` included, in the paused run's context and buffers, its own reads of other
/// collections served as the outer run's are.
async fn run_nested(
    ctx: &CommandContext<'_>,
    pipeline: &Pipeline,
    documents: Vec<Document>,
    resume: &Resume<'_>,
) -> CommandResult<Vec<Document>> {
    let mut run = pipeline.start(resume.context(), resume.buffers());
    for document in documents {
        if pipeline
            .admits(&document, resume.context())
            .map_err(during_aggregation)?
        {
            run.push(document).map_err(during_aggregation)?;
        }
    }
    let step = run.finish().map_err(during_aggregation)?;
    Box::pin(complete(ctx, step))
        .await?
        .collect::<CommandResult<Vec<_>>>()
}

/// Documents `$out` inserts per write.
const OUT_BATCH: usize = 1000;

/// `$out`: the output replaces `target` whole, or not at all. It is written to a temporary
/// collection with the target's options and indexes (so a unique index fails the stage before
/// anything is replaced), through the normal insert path, then renamed over the target.
pub(crate) async fn write_out(
    ctx: &CommandContext<'_>,
    body: &Document,
    target: &OutTarget,
    output: DocumentStream,
    variables: &CommandVariables,
) -> CommandResult<()> {
    let db = target.db.as_deref().unwrap_or(ctx.db);
    let target_ns = Namespace::new(db, target.coll.as_str());
    validate_writable_namespace(&target_ns)?;
    let storage = ctx.state.storage.as_ref();
    let existing = storage.collection(&target_ns).await?;
    let temp = Namespace::new(db, format!("tmp.agg_out.{}", uuid::Uuid::new_v4().simple()));
    let options = existing
        .as_ref()
        .map(|meta| meta.options.clone())
        .unwrap_or_default();
    storage.create_collection(&temp, options).await?;
    let written = async {
        if let Some(meta) = &existing {
            let indexes: Vec<_> = meta.indexes[1..]
                .iter()
                .map(|index| (**index).clone())
                .collect();
            if !indexes.is_empty() {
                storage.create_indexes(&temp, indexes).await?;
            }
        }
        let writer =
            WriteContext::open(ctx, &temp, write_options(ctx, body)?, variables.clone()).await?;
        let mut batch: Vec<Document> = Vec::with_capacity(OUT_BATCH);
        let mut output = output.peekable();
        while let Some(document) = output.next() {
            batch.push(document.map_err(during_aggregation)?);
            if batch.len() == OUT_BATCH || output.peek().is_none() {
                let documents: Vec<&Document> = batch.iter().collect();
                let outcome = insert_documents(&writer, &documents).await?;
                if let Some((_, error)) = outcome.errors.into_iter().next() {
                    return Err(error);
                }
                batch.clear();
            }
        }
        drop(writer);
        storage.rename_collection(&temp, &target_ns, true).await?;
        Ok::<(), CommandError>(())
    }
    .await;
    if written.is_err() {
        // Best effort: the error the client sees is the stage's, not the cleanup's.
        let _ = storage.drop_collection(&temp).await;
    }
    written?;
    let target_name = target_ns.to_string();
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns == target_name);
    Ok(())
}

/// `$merge`: each output document is written to the target as `merge` says, through the normal
/// insert and update paths, in output order. Like mongod's, the writes are unordered: a document
/// that fails (a duplicate key, no match under `whenNotMatched: "fail"`) does not stop the
/// others, and the first failure is the stage's error; nothing is rolled back. The target is
/// created when missing; `on` fields other than the default need a unique index of the target
/// on exactly those fields, under the pipeline's collation (mongod's 51183).
pub(crate) async fn write_merge(
    ctx: &CommandContext<'_>,
    body: &Document,
    merge: &MergeSpec,
    output: DocumentStream,
    variables: &CommandVariables,
    context: &PipelineContext,
) -> CommandResult<()> {
    let db = merge.db.as_deref().unwrap_or(ctx.db);
    let target_ns = Namespace::new(db, merge.coll.as_str());
    validate_writable_namespace(&target_ns)?;
    let storage = ctx.state.storage.as_ref();
    let existing = storage.collection(&target_ns).await?;
    if let Some(on) = merge.explicit_on() {
        let supported = match &existing {
            None => on == ["_id"],
            Some(meta) => meta.indexes.iter().any(|index| {
                index.unique
                    && index.partial_filter.is_none()
                    && !index.catalog_only
                    && index.collation == context.collation
                    && index.key.len() == on.len()
                    && index.key.iter().all(|(field, _)| on.contains(field))
            }),
        };
        if !supported {
            return Err(CommandError::new(
                ErrorCode::Location51183,
                "Cannot find index to verify that join fields will be unique",
            ));
        }
    }
    if existing.is_none() {
        match storage.create_collection(&target_ns, Document::new()).await {
            Ok(_) | Err(crate::storage::StorageError::NamespaceExists(_)) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let options = crate::storage::WriteOptions {
        ordered: false,
        ..write_options(ctx, body)?
    };
    let writer = WriteContext::open(ctx, &target_ns, options, variables.clone()).await?;
    let mut first_error: Option<CommandError> = None;
    let mut inserts: Vec<Document> = Vec::new();
    let mut output = output.peekable();
    while let Some(document) = output.next() {
        let document = document.map_err(during_aggregation)?;
        let failure = match merge.write_for(document, context)? {
            MergeWrite::Insert(document) => {
                inserts.push(document);
                if inserts.len() == OUT_BATCH || output.peek().is_none() {
                    insert_merged(&writer, std::mem::take(&mut inserts)).await?
                } else {
                    None
                }
            }
            MergeWrite::Update { statement, strict } => {
                match apply_update_statement(&writer, &statement).await {
                    Ok(outcome) if strict && outcome.matched == 0 => Some(no_matching_document()),
                    Ok(_) => None,
                    Err(error) => Some(error),
                }
            }
            MergeWrite::UpdateOrInsert {
                statement,
                document,
            } => match apply_update_statement(&writer, &statement).await {
                Ok(outcome) if outcome.matched == 0 => {
                    insert_merged(&writer, vec![document]).await?
                }
                Ok(_) => None,
                Err(error) => Some(error),
            },
        };
        if first_error.is_none() {
            first_error = failure;
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Inserts `documents` for `$merge`; the first write error, if any.
async fn insert_merged(
    writer: &WriteContext<'_>,
    documents: Vec<Document>,
) -> CommandResult<Option<CommandError>> {
    let documents: Vec<&Document> = documents.iter().collect();
    let outcome = insert_documents(writer, &documents).await?;
    Ok(outcome.errors.into_iter().next().map(|(_, error)| error))
}

fn no_matching_document() -> CommandError {
    CommandError::new(
        ErrorCode::MergeStageNoMatchingDocument,
        "$merge could not find a matching document in the target collection for at least one \
         document in the source collection",
    )
}

/// The documents of collection `name` (in the command's database) matching `filter`, for a
/// stage that reads another collection: one planned read (an index serves `$lookup`'s
/// `foreignField`), under the run's collation, expired documents hidden.
async fn read_collection(
    ctx: &CommandContext<'_>,
    name: &str,
    filter: Document,
    collation: &CollationChoice,
) -> CommandResult<Vec<Document>> {
    let ns = Namespace::new(ctx.db, name);
    validate_namespace(&ns)?;
    read_namespace(ctx, &ns, filter, collation).await
}

/// The documents of `ns` matching `filter`: one planned read under `collation`, expired
/// documents hidden.
pub(crate) async fn read_namespace(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: Document,
    collation: &CollationChoice,
) -> CommandResult<Vec<Document>> {
    let filter = Filter::parse(&filter)?.with_collation(collation.clone());
    let query = Query::filter(Arc::new(filter));
    let storage = ctx.state.storage.as_ref();
    let view = ctx.state.view(ns).await?;
    let planned = view.plan(storage, &ctx.state.plan_cache, &query).await?;
    let mut stream = planned.stream;
    let mut foreign = Vec::new();
    while let Some(record) = stream.next(storage).await? {
        ctx.deadline.check()?;
        foreign.push(record.doc.into_document());
    }
    let stats = stream.stats();
    ctx.op
        .add_examined(stats.keys_examined, stats.docs_examined);
    Ok(foreign)
}

/// mongod's context for a memory limit hit while the pipeline runs.
fn during_aggregation(error: CommandError) -> CommandError {
    if error.code != ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed {
        return error;
    }
    error.caused("PlanExecutor error during aggregation")
}

/// The document `$collStats` produces for `request`.
async fn coll_stats_source(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    request: &CollStatsRequest,
) -> CommandResult<Document> {
    if request.latency_stats.is_some() || request.query_exec_stats {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not keep per-collection latency or query execution statistics ($collStats supports count and storageStats)",
        ));
    }
    let mut out = doc! {
        "ns": ns.to_string(),
        "host": format!("{}:{}", ctx.state.hostname, ctx.state.config.port),
        "localTime": ctx.state.clock.now(),
    };
    let view = ctx.state.view(ns).await?;
    if let Some(options) = &request.storage_stats {
        if view.meta.is_none() {
            return Err(CommandError::new(ErrorCode::NamespaceNotFound, format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{ns}] not found.")));
        }
        let scale = options
            .get("scale")
            .and_then(crate::bsonutil::as_f64)
            .filter(|s| *s >= 1.0)
            .unwrap_or(1.0) as i64;
        out.insert("storageStats", storage_stats(ctx, &view, scale).await?);
    }
    if request.count {
        let count = visible_stats(ctx, &view)
            .await?
            .map_or(0, |stats| stats.count);
        out.insert("count", count as i64);
    }
    Ok(out)
}

/// The command's `pipeline`: an array of stage documents (40414 absent, 14 otherwise).
pub fn pipeline_stages(body: &Document) -> CommandResult<Vec<Document>> {
    required("aggregate", body, "pipeline", "array", Bson::as_array)?
        .iter()
        .map(|stage| match stage {
            Bson::Document(stage) => Ok(stage.clone()),
            other => Err(wrong_type("aggregate", "pipeline", other, "object")),
        })
        .collect()
}

/// What an aggregation reads from its collection: the leading `$match`, in the order of a
/// `$sort` right after it (with the `$limit` after that), under the command's `hint` and the
/// pipeline's collation.
pub fn aggregation_query(
    view: &crate::exec::CollectionView,
    body: &Document,
    pipeline: &Pipeline,
    filter: Filter,
    collation: &CollationChoice,
) -> Query {
    let (sort, wanted) = pipeline
        .leading_sort()
        .map_or((None, None), |(sort, limit)| {
            (Some(sort.clone().with_collation(collation.clone())), limit)
        });
    Query {
        filter: Arc::new(filter.with_collation(collation.clone())),
        sort,
        wanted,
        hint: planner::resolve_hint(view.meta.as_ref(), body.get("hint")),
        needed_fields: None,
    }
}
