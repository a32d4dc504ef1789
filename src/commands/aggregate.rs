//! `aggregate`: reads the collection through the planner (the pipeline's leading `$match` decides
//! the plan, and only visible documents enter), streams the documents through the remaining
//! stages (`query::pipeline`) with blocking stages held by `sorter` buffers within the memory
//! limits, and returns the output as a cursor. `$collStats` answers from storage
//! statistics, with expired documents left out of the count; `$currentOp` from the op registry
//! (`commands::operations::current_ops`).

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{
    check_hint, collation_for, let_variables, optional_bool, optional_document, required,
    validate_namespace, validate_writable_namespace, write_options,
};
use crate::commands::crud::{apply_update_statement, insert_documents, WriteContext};
use crate::commands::ddl::{storage_stats, visible_stats};
use crate::commands::find::{
    buffered_cursor, count_from_keys, pulled_pipeline_cursor, stream_cursor,
};
use crate::cursor::PulledPipeline;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::planner::{self, Query};
use tideway_query::collation::CollationChoice;
use tideway_query::expr::command_variables::{with_command_variables, CommandVariables};
use tideway_query::pipeline::lookup::{Candidates, Lookup, UnionWith};
use tideway_query::pipeline::PipelineBuffers;
use tideway_query::pipeline::{
    BatchOrigin, Buffers, CollStatsRequest, DocumentStream, Facet, FinalWrite, Foreign,
    ForeignBatch, MergeSpec, MergeWrite, OutTarget, PipelineRun, PulledRun, SourceStage, Step,
};
use tideway_query::sorter;
use tideway_query::{Filter, Pipeline, PipelineContext};
use tideway_storage::Namespace;
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "aggregate",
    aliases: &[],
    help: "Run an aggregation pipeline over a collection ($match, $group, $project, $sort, $unwind, ...).",
    admin_only: false,
    test_only: false,
    handler: async_handler!(aggregate),
}];

async fn aggregate(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    aggregate_as(ctx, body, None).await
}

/// `aggregate` over the collection `body` names, its cursor under `cursor_ns` when given (a read
/// through a view: `commands::views` resolves it to its source collection and full pipeline, and
/// the cursor keeps the view's name, as mongod's does).
pub(crate) async fn aggregate_as(
    ctx: &CommandContext<'_>,
    body: &Document,
    cursor_ns: Option<&Namespace>,
) -> CommandResult<Reply> {
    let collection = match body.get("aggregate") {
        Some(Bson::String(coll)) => {
            let ns = Namespace::new(ctx.db, coll.as_str());
            validate_namespace(&ns)?;
            Some(ns)
        }
        Some(value) if tideway_base::bsonutil::as_f64(value) == Some(1.0) => None,
        Some(other) => {
            return Err(CommandError::new(
                ErrorCode::InvalidNamespace,
                format!(
                    "collection name has invalid type {}",
                    tideway_base::display::type_name(other)
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
    if stages
        .first()
        .is_some_and(|stage| stage.contains_key("$changeStream"))
        && cursor_ns.is_none()
    {
        return super::change_stream::open(ctx, body, collection, &stages).await;
    }
    if body
        .get("explain")
        .is_some_and(tideway_base::bsonutil::is_truthy)
    {
        return crate::commands::explain::explain_aggregate_command(
            ctx,
            body,
            crate::commands::explain::Verbosity::QueryPlanner,
        )
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
    let pipeline = Arc::new(with_command_variables(&variables, || {
        Pipeline::parse(&stages)
    })?);
    let collection_meta = match &collection {
        Some(ns) => ctx.storage().collection(ns).await?,
        None => None,
    };
    let now_ms = ctx.clock().now_ms();
    let context = PipelineContext {
        now: bson::DateTime::from_millis(now_ms),
        collation: collation_for("aggregate", body, collection_meta.as_ref())?,
    };
    crate::commands::views::check_involved_views(ctx, &stages, &context.collation).await?;
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
    let mut run = Served::new(pipeline.start(&context, &buffers));
    match (pipeline.source(), &collection) {
        (Some(SourceStage::Documents), _) => {}
        (Some(SourceStage::CollStats(request)), Some(ns)) => {
            feed(ctx, &mut run, coll_stats_source(ctx, ns, request).await?).await?;
        }
        (Some(SourceStage::CurrentOp(request)), None) if ctx.db == "admin" => {
            for op in crate::commands::operations::current_ops(ctx.state, ctx.client, request)? {
                feed(ctx, &mut run, op).await?;
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
            let reply_ns = cursor_ns.unwrap_or(ns);
            let storage = ctx.storage();
            let view = ctx.view(ns).await?;
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
                return buffered_cursor(ctx, body, reply_ns.to_string(), output).await;
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
                    return buffered_cursor(ctx, body, reply_ns.to_string(), output).await;
                }
            }
            ctx.op.set_plan_summary(planned.plan.summary());
            // A leading `$sort` the read's order provides is done; when nothing after it
            // blocks, the pipeline runs as the cursor's batches ask for output.
            let sorted = usize::from(planned.plan.provides_sort && query.sort.is_some());
            if pipeline.streams_from(sorted) {
                let pulled = PulledPipeline {
                    input: planned.stream,
                    run: PulledRun::new(Arc::clone(&pipeline), sorted, context)?,
                };
                return pulled_pipeline_cursor(
                    ctx,
                    body,
                    reply_ns.to_string(),
                    ns,
                    pulled,
                    &view.visibility,
                )
                .await;
            }
            // A read in the order of a leading `$sort` followed by `$limit n` can stop after n
            // documents: they are the first n the sort would keep.
            let enough = query.wanted.filter(|_| planned.plan.provides_sort);
            let mut stream = planned.stream;
            let mut read = 0;
            while enough.is_none_or(|enough| read < enough) && !run.run.saturated() {
                let Some(record) = stream.next(storage).await? else {
                    break;
                };
                read += 1;
                feed(ctx, &mut run, record.doc.into_document()).await?;
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
    let output = finish(ctx, &mut run).await?;
    let cursor_ns = match (cursor_ns, &collection) {
        (Some(view), _) => view.to_string(),
        (None, Some(ns)) => ns.to_string(),
        (None, None) => format!("{}.$cmd.aggregate", ctx.db),
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

/// A run, and what serving its reads keeps from batch to batch.
struct Served<'p> {
    run: PipelineRun<'p>,
    whole_reads: WholeReads,
}

impl<'p> Served<'p> {
    fn new(run: PipelineRun<'p>) -> Served<'p> {
        Served {
            run,
            whole_reads: WholeReads::default(),
        }
    }
}

/// Passes one input document into `run` and serves the batches it then has to join.
async fn feed(
    ctx: &CommandContext<'_>,
    run: &mut Served<'_>,
    document: Document,
) -> CommandResult<()> {
    run.run.push(document).map_err(during_aggregation)?;
    match advance(ctx, run).await? {
        None => Ok(()),
        Some(_) => Err(CommandError::internal(
            "a pipeline run gave its output before its input ended",
        )),
    }
}

/// Ends `run`'s input and serves what it needs until its output.
async fn finish(ctx: &CommandContext<'_>, run: &mut Served<'_>) -> CommandResult<DocumentStream> {
    run.run.end_input().map_err(during_aggregation)?;
    advance(ctx, run)
        .await?
        .ok_or_else(|| CommandError::internal("a pipeline run wants input after its end"))
}

/// Serves what `run` needs until it needs more input (`None`) or has its output.
async fn advance(
    ctx: &CommandContext<'_>,
    served: &mut Served<'_>,
) -> CommandResult<Option<DocumentStream>> {
    let Served { run, whole_reads } = served;
    // The other collection's documents of the `$unionWith` whose input has ended (one at a
    // time: phases close in order).
    let mut feed: Option<UnionFeed> = None;
    loop {
        match run.step().map_err(during_aggregation)? {
            Step::Input => return Ok(None),
            Step::Done(output) => return Ok(Some(output)),
            Step::Foreign(batch) => {
                let origin = batch.origin;
                let context = run.context().clone();
                if let Foreign::UnionWith(union) = batch.read {
                    run.joined(origin, batch.documents);
                    feed = Some(UnionFeed::open(ctx, union, &context, run.buffers()).await?);
                    continue;
                }
                let joined = join(ctx, batch, &context, run.buffers(), whole_reads).await?;
                run.joined(origin, joined);
            }
            Step::Feed(origin) => {
                let Some(source) = feed.as_mut() else {
                    return Err(CommandError::internal("a $unionWith fed from nothing"));
                };
                let chunk = source.next_chunk(ctx).await?;
                if chunk.is_empty() {
                    feed = None;
                    run.fed_all(origin)?;
                } else {
                    run.joined(origin, chunk);
                }
            }
        }
    }
}

/// How many stored foreign documents per local key a `$lookup` batch reads whole rather than
/// probe the index for each key: one index probe costs about as much as reading this many
/// documents in a collection scan (bench/README.md, `$lookup` join).
const WHOLE_READ_DOCUMENTS_PER_KEY: u64 = 64;
/// The largest foreign collection (stored bytes) a run keeps once read whole, for its later
/// batches: the blocking sort's default memory limit.
const WHOLE_READ_CACHE_BYTES: u64 = 100 * 1024 * 1024;

/// Foreign collections a run has read whole, by the `$lookup` (its batches' origin) that read
/// them, indexed for its later batches (the documents visible when first read, as a snapshot
/// for the command).
#[derive(Default)]
struct WholeReads(std::collections::HashMap<BatchOrigin, Arc<Candidates>>);

/// The foreign documents a `$lookup` batch may join, indexed by their `foreignField` values: an
/// `$in` read of its keys through the planner when they are few next to the foreign
/// collection, else the whole collection (kept for the batches after when it is small enough).
async fn lookup_candidates(
    ctx: &CommandContext<'_>,
    lookup: &Lookup,
    batch: (BatchOrigin, &[Document]),
    context: &PipelineContext,
    buffers: &dyn Buffers,
    whole_reads: &mut WholeReads,
) -> CommandResult<Arc<Candidates>> {
    let (origin, documents) = batch;
    let collation = &context.collation;
    if let Some(foreign) = whole_reads.0.get(&origin) {
        return Ok(Arc::clone(foreign));
    }
    let ns = Namespace::new(ctx.db, lookup.from.as_str());
    validate_namespace(&ns)?;
    if let Some(view) = crate::commands::views::source_of(ctx, &ns).await? {
        // A view: its whole output, joined as a collection's documents are (kept for the
        // batches after when small enough, as a whole read of a collection is).
        let foreign = Box::pin(view_output(ctx, &view, context, buffers))
            .await?
            .collect::<CommandResult<Vec<_>>>()?;
        let bytes: usize = foreign
            .iter()
            .map(tideway_base::bsonutil::encoded_size)
            .sum();
        let candidates = Arc::new(lookup.candidates(foreign, context));
        if bytes as u64 <= WHOLE_READ_CACHE_BYTES {
            whole_reads.0.insert(origin, Arc::clone(&candidates));
        }
        return Ok(candidates);
    }
    let stats = match ctx.storage().stats(&ns).await {
        Ok(stats) => Some(stats),
        Err(tideway_storage::StorageError::NamespaceNotFound(_)) => None,
        Err(error) => return Err(error.into()),
    };
    let stored = stats.as_ref().map_or(0, |stats| stats.count);
    if let Some(keys) = lookup.foreign_keys(documents) {
        if (keys.len() as u64).saturating_mul(WHOLE_READ_DOCUMENTS_PER_KEY) < stored {
            let filter = lookup.foreign_filter(keys);
            let foreign = read_namespace(ctx, &ns, filter, collation).await?;
            return Ok(Arc::new(lookup.candidates(foreign, context)));
        }
    }
    let foreign = read_namespace(ctx, &ns, Document::new(), collation).await?;
    let candidates = Arc::new(lookup.candidates(foreign, context));
    if stats.is_some_and(|stats| stats.data_size <= WHOLE_READ_CACHE_BYTES) {
        whole_reads.0.insert(origin, Arc::clone(&candidates));
    }
    Ok(candidates)
}

/// Documents a `$unionWith` hands its run at a time.
const UNION_CHUNK: usize = 1000;

/// The other collection's documents a `$unionWith` feeds into its run, a chunk at a time.
enum UnionFeed {
    /// Read from the collection as they are asked for (no pipeline).
    Read(Box<tideway_exec::executor::DocStream>),
    /// Its pipeline's output (held by the run's buffers, which spill).
    Computed(DocumentStream),
}

impl UnionFeed {
    /// The documents of `union`: its pipeline's leading `$match` is the read's filter.
    async fn open(
        ctx: &CommandContext<'_>,
        union: &UnionWith,
        context: &PipelineContext,
        buffers: &dyn Buffers,
    ) -> CommandResult<UnionFeed> {
        let ns = Namespace::new(ctx.db, union.coll.as_str());
        validate_namespace(&ns)?;
        if let Some(view) = crate::commands::views::source_of(ctx, &ns).await? {
            // A view: its pipeline's output, then the stage's own pipeline over it.
            let output = UnionFeed::Computed(view_output(ctx, &view, context, buffers).await?);
            return match &union.pipeline {
                None => Ok(output),
                Some(pipeline) => {
                    UnionFeed::through(output, ctx, pipeline, false, context, buffers).await
                }
            };
        }
        let filter = union
            .pipeline
            .as_ref()
            .and_then(Pipeline::leading_match)
            .cloned()
            .unwrap_or_default();
        let stream = plan_read(ctx, &ns, filter, &context.collation).await?;
        let read = UnionFeed::Read(Box::new(stream));
        match &union.pipeline {
            None => Ok(read),
            Some(pipeline) => UnionFeed::through(read, ctx, pipeline, true, context, buffers).await,
        }
    }

    /// `pipeline` run over these documents (held by the run's buffers, which spill); `filtered`
    /// when its leading `$match` was the read's filter already.
    async fn through(
        mut self,
        ctx: &CommandContext<'_>,
        pipeline: &Pipeline,
        filtered: bool,
        context: &PipelineContext,
        buffers: &dyn Buffers,
    ) -> CommandResult<UnionFeed> {
        let mut run = Served::new(pipeline.start(context, buffers));
        loop {
            let chunk = self.next_chunk(ctx).await?;
            if chunk.is_empty() {
                break;
            }
            for document in chunk {
                if filtered
                    || pipeline
                        .admits(&document, context)
                        .map_err(during_aggregation)?
                {
                    Box::pin(feed(ctx, &mut run, document)).await?;
                }
            }
        }
        Ok(UnionFeed::Computed(Box::pin(finish(ctx, &mut run)).await?))
    }

    /// Up to [`UNION_CHUNK`] more documents; none when all have been handed out.
    async fn next_chunk(&mut self, ctx: &CommandContext<'_>) -> CommandResult<Vec<Document>> {
        let mut chunk = Vec::new();
        match self {
            UnionFeed::Read(stream) => {
                let storage = ctx.storage();
                while chunk.len() < UNION_CHUNK {
                    let Some(record) = stream.next(storage).await? else {
                        let stats = stream.stats();
                        ctx.op
                            .add_examined(stats.keys_examined, stats.docs_examined);
                        break;
                    };
                    chunk.push(record.doc.into_document());
                }
            }
            UnionFeed::Computed(output) => {
                for document in output.take(UNION_CHUNK) {
                    chunk.push(document?);
                }
            }
        }
        Ok(chunk)
    }
}

/// Combines a batch that reached a stage reading another collection with that collection's
/// documents: one planned read per `$lookup` batch, per `$graphLookup` depth, per `$unionWith`;
/// a `$facet` whose branches read other collections runs each branch as a nested run.
async fn join(
    ctx: &CommandContext<'_>,
    batch: ForeignBatch<'_>,
    context: &PipelineContext,
    buffers: &dyn Buffers,
    whole_reads: &mut WholeReads,
) -> CommandResult<Vec<Document>> {
    let collation = context.collation.clone();
    let documents = batch.documents;
    Ok(match batch.read {
        Foreign::Lookup(lookup) => {
            let candidates = lookup_candidates(
                ctx,
                lookup,
                (batch.origin, &documents),
                context,
                buffers,
                whole_reads,
            )
            .await?;
            if lookup.nested_reads() {
                // The sub-pipeline reads too: run it per document, serving its reads here.
                let mut joined = Vec::with_capacity(documents.len());
                for mut document in documents {
                    let pipeline = lookup
                        .sub_pipeline(&document, context)
                        .map_err(during_aggregation)?;
                    let matched = candidates.of(&document);
                    let results = run_nested(ctx, &pipeline, matched, context, buffers).await?;
                    lookup
                        .set_results(&mut document, results)
                        .map_err(during_aggregation)?;
                    joined.push(document);
                }
                joined
            } else {
                lookup
                    .join(documents, &candidates, context)
                    .map_err(during_aggregation)?
            }
        }
        Foreign::GraphLookup(graph) => {
            // A view is read once for the batch; each depth then matches its output.
            let ns = Namespace::new(ctx.db, graph.from.as_str());
            validate_namespace(&ns)?;
            let view_documents = match crate::commands::views::source_of(ctx, &ns).await? {
                Some(view) => Some(
                    Box::pin(view_output(ctx, &view, context, buffers))
                        .await?
                        .collect::<CommandResult<Vec<_>>>()?,
                ),
                None => None,
            };
            let mut joined = Vec::with_capacity(documents.len());
            for document in documents {
                let mut search = graph
                    .search(document, context)
                    .map_err(during_aggregation)?;
                while let Some(filter) = search.next_filter() {
                    let found = match &view_documents {
                        Some(output) => matching(output, &filter, &collation)?,
                        None => read_namespace(ctx, &ns, filter, &collation).await?,
                    };
                    search.visit(found).map_err(during_aggregation)?;
                }
                joined.push(search.finish().map_err(during_aggregation)?);
            }
            joined
        }
        // The run passes a `$unionWith`'s input on itself, and [`advance`] feeds it the other
        // collection's documents.
        Foreign::UnionWith(_) => {
            return Err(CommandError::internal("a $unionWith batch to join"));
        }
        Foreign::Facet(facet) => {
            let mut results = Vec::with_capacity(facet.branches().len());
            for (name, branch) in facet.branches() {
                let output = run_nested(ctx, branch, documents.clone(), context, buffers).await?;
                results.push((name.as_str(), output));
            }
            let max_bytes = buffers.stage_limits().facet_max_output_bytes;
            vec![Facet::assemble(results, max_bytes).map_err(during_aggregation)?]
        }
    })
}

/// A nested pipeline (a `$facet` branch, a `$unionWith` pipeline, a `$lookup` sub-pipeline)
/// over `documents`, its leading `$match` included, in the outer run's `context` and `buffers`, its
/// own reads of other collections served as the outer run's are.
async fn run_nested(
    ctx: &CommandContext<'_>,
    pipeline: &Pipeline,
    documents: Vec<Document>,
    context: &PipelineContext,
    buffers: &dyn Buffers,
) -> CommandResult<Vec<Document>> {
    let mut run = Served::new(pipeline.start(context, buffers));
    for document in documents {
        if pipeline
            .admits(&document, context)
            .map_err(during_aggregation)?
        {
            Box::pin(feed(ctx, &mut run, document)).await?;
        }
    }
    Box::pin(finish(ctx, &mut run))
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
    crate::commands::views::refuse_write_target(ctx, &target_ns).await?;
    let storage = ctx.storage();
    let existing = storage.collection(&target_ns).await?;
    let temp = Namespace::new(db, format!("tmp.agg_out.{}", uuid::Uuid::new_v4().simple()));
    let options = existing
        .as_ref()
        .map(|meta| meta.options.clone())
        .unwrap_or_default();
    storage
        .create_collection(&temp, options, Vec::new())
        .await?;
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
        let writer = WriteContext::open(ctx, &temp, write_options(ctx, body)?, variables.clone())
            .await?
            .bypassing_validation(tideway_exec::validation::bypass_requested(body));
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
    crate::commands::views::refuse_write_target(ctx, &target_ns).await?;
    let storage = ctx.storage();
    let existing = storage.collection(&target_ns).await?;
    // A time series has no unique index (not even on `_id`) for `on` to use: 51183 as mongod.
    if existing
        .as_ref()
        .is_some_and(tideway_exec::timeseries::is_timeseries)
    {
        return Err(CommandError::new(
            ErrorCode::Location51183,
            "Cannot find index to verify that join fields will be unique",
        ));
    }
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
        match storage
            .create_collection(&target_ns, Document::new(), Vec::new())
            .await
        {
            Ok(_) | Err(tideway_storage::StorageError::NamespaceExists(_)) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let options = tideway_storage::WriteOptions {
        ordered: false,
        ..write_options(ctx, body)?
    };
    let writer = WriteContext::open(ctx, &target_ns, options, variables.clone())
        .await?
        .bypassing_validation(tideway_exec::validation::bypass_requested(body));
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

/// The output of view `view` read as another collection by a stage of a run (mongod's resolved
/// view: its pipeline over its source collection, the pipeline's leading `$match` being the
/// read's filter, so expired documents stay hidden), under the run's collation (the view's:
/// `views::check_involved_views` checked it before the run) and in the run's buffers.
async fn view_output(
    ctx: &CommandContext<'_>,
    view: &crate::commands::views::ResolvedView,
    context: &PipelineContext,
    buffers: &dyn Buffers,
) -> CommandResult<DocumentStream> {
    let pipeline = Pipeline::parse(&view.pipeline)?;
    let filter = pipeline.leading_match().cloned().unwrap_or_default();
    let stream = plan_read(ctx, &view.source, filter, &context.collation).await?;
    let read = UnionFeed::Read(Box::new(stream));
    match read.through(ctx, &pipeline, true, context, buffers).await? {
        UnionFeed::Computed(output) => Ok(output),
        UnionFeed::Read(_) => Err(CommandError::internal("a view's output was not computed")),
    }
}

/// The documents of `documents` matching `filter` under `collation` (a `$graphLookup` depth over
/// a view's output).
fn matching(
    documents: &[Document],
    filter: &Document,
    collation: &CollationChoice,
) -> CommandResult<Vec<Document>> {
    let filter = Filter::parse(filter)?;
    let mut found = Vec::new();
    for document in documents {
        if filter.try_matches_collated(document, collation.as_deref())? {
            found.push(document.clone());
        }
    }
    Ok(found)
}

/// The documents of `ns` matching `filter`: one planned read under `collation`, expired
/// documents hidden.
pub(crate) async fn read_namespace(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: Document,
    collation: &CollationChoice,
) -> CommandResult<Vec<Document>> {
    let storage = ctx.storage();
    let mut stream = plan_read(ctx, ns, filter, collation).await?;
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

/// The planned read of the documents of `ns` matching `filter` under `collation`, expired
/// documents hidden.
async fn plan_read(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: Document,
    collation: &CollationChoice,
) -> CommandResult<tideway_exec::executor::DocStream> {
    let filter = Filter::parse(&filter)?.with_collation(collation.clone());
    let query = Query::filter(Arc::new(filter));
    let view = ctx.view(ns).await?;
    let planned = view
        .plan(ctx.storage(), &ctx.state.plan_cache, &query)
        .await?;
    Ok(planned.stream)
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
    let view = ctx.view(ns).await?;
    if let Some(options) = &request.storage_stats {
        if view.meta.is_none() {
            return Err(CommandError::new(ErrorCode::NamespaceNotFound, format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{ns}] not found.")));
        }
        let scale = options
            .get("scale")
            .and_then(tideway_base::bsonutil::as_f64)
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
pub(crate) fn pipeline_stages(body: &Document) -> CommandResult<Vec<Document>> {
    required("aggregate", body, "pipeline", "array", Bson::as_array)?
        .iter()
        .map(|stage| match stage {
            Bson::Document(stage) => Ok(stage.clone()),
            other => Err(CommandError::wrong_type(
                "aggregate",
                "pipeline",
                other,
                "object",
            )),
        })
        .collect()
}

/// What an aggregation reads from its collection: the leading `$match`, in the order of a
/// `$sort` right after it (with the `$limit` after that), under the command's `hint` and the
/// pipeline's collation.
pub(crate) fn aggregation_query(
    view: &tideway_exec::executor::CollectionView,
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
