//! Running a parsed pipeline one document at a time. Streaming stages (`$match`, `$project`,
//! `$addFields`, `$unset`, `$unwind`, `$replaceRoot`, `$skip`, `$limit`) pass each document on;
//! blocking stages (`$sort`, `$group`, `$count`) hold what they need in buffers the caller
//! provides ([`Buffers`]), so the caller bounds their memory and may spill them to disk; the
//! output is itself such a buffer. A `$sort` directly followed by `$limit` (after any `$skip`)
//! keeps only the documents it can return.
//!
//! Invariants: documents reach each stage in the order the previous one produced them; `$group`
//! accumulates in input order, and once its groups outgrow their memory it either fails with
//! mongod's error or (when the caller allows spilling) files the arguments of documents of new
//! groups in a buffer ordered by group key, folding each such group at the end — the groups it
//! already holds keep accumulating, so no accumulator needs merging; the deadline is checked for
//! every document. This module performs no I/O itself.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::group::GroupTable;
use super::{
    check_built_depth, check_built_size, count_output, evaluate_documents, fail, Pipeline,
    PipelineContext, Stage, Unwound,
};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::limits::Deadline;
use crate::query::collation::CollationChoice;
use crate::query::compare::compare_values_with;
use crate::query::sort::KeyOrder;

/// Documents a buffer hands back, in its order.
pub type DocumentStream = Box<dyn Iterator<Item = CommandResult<Document>> + Send>;

/// A blocking stage's buffer: documents with keys, returned in key order (input order for equal
/// keys), at most `limit` of them.
pub trait DocumentBuffer: Send {
    fn push(&mut self, key: Vec<Bson>, document: Document) -> CommandResult<()>;
    fn finish(self: Box<Self>) -> CommandResult<DocumentStream>;
}

/// What a buffer is for, so the caller can apply the right limits and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferPurpose {
    /// A `$sort` stage.
    Sort,
    /// Documents of `$group` groups first seen after its memory filled up.
    GroupSpill,
    /// The pipeline's output, waiting for the cursor.
    Output,
}

/// Where a run keeps what blocking stages hold.
pub trait Buffers: Sync {
    fn buffer(
        &self,
        purpose: BufferPurpose,
        order: KeyOrder,
        limit: Option<usize>,
    ) -> Box<dyn DocumentBuffer>;
    /// Bytes a `$group` may hold, and whether it may spill past them.
    fn group_memory(&self) -> (usize, bool);
    /// Bytes one `$setWindowFields` partition may hold, and whether it may go past them (mongod
    /// spills the partition; this server keeps it in memory).
    fn window_memory(&self) -> (usize, bool) {
        (
            super::window::DEFAULT_MAX_MEMORY_BYTES,
            self.group_memory().1,
        )
    }
    fn deadline(&self) -> Deadline;
}

/// Buffers that hold everything in memory without limit: for runs over documents that are in
/// memory already.
pub struct InMemoryBuffers;

struct VecBuffer {
    order: KeyOrder,
    limit: Option<usize>,
    entries: Vec<(Vec<Bson>, Document)>,
}

impl DocumentBuffer for VecBuffer {
    fn push(&mut self, key: Vec<Bson>, document: Document) -> CommandResult<()> {
        self.entries.push((key, document));
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> CommandResult<DocumentStream> {
        let order = self.order.clone();
        // Stable: equal keys keep their input order.
        self.entries.sort_by(|a, b| order(&a.0, &b.0));
        self.entries.truncate(self.limit.unwrap_or(usize::MAX));
        Ok(Box::new(
            self.entries.into_iter().map(|(_, document)| Ok(document)),
        ))
    }
}

impl Buffers for InMemoryBuffers {
    fn buffer(
        &self,
        _purpose: BufferPurpose,
        order: KeyOrder,
        limit: Option<usize>,
    ) -> Box<dyn DocumentBuffer> {
        Box::new(VecBuffer {
            order,
            limit,
            entries: Vec::new(),
        })
    }

    fn group_memory(&self) -> (usize, bool) {
        (usize::MAX, true)
    }

    fn deadline(&self) -> Deadline {
        Deadline::none()
    }
}

/// Input order: every key compares equal.
pub fn input_order() -> KeyOrder {
    Arc::new(|_: &[Bson], _: &[Bson]| Ordering::Equal)
}

fn group_key_order(collation: CollationChoice) -> KeyOrder {
    Arc::new(move |a: &[Bson], b: &[Bson]| match (a.first(), b.first()) {
        (Some(a), Some(b)) => compare_values_with(a, b, collation.as_deref()),
        _ => Ordering::Equal,
    })
}

/// mongod's error for a `$group` over its memory limit without disk use.
const GROUP_EXCEEDED: &str =
    "Exceeded memory limit for $group, but didn't allow external sort. Pass allowDiskUse:true to opt in.";

/// What a blocking stage holds while documents come in.
enum Sink<'p> {
    Sort {
        /// The stage's spec under the run's collation.
        spec: super::SortSpec,
        buffer: Box<dyn DocumentBuffer>,
    },
    Group {
        table: Box<GroupTable>,
        spill: Option<Box<dyn DocumentBuffer>>,
    },
    Count {
        field: &'p str,
        count: u64,
    },
    /// `$facet`, `$sample`, `$bucketAuto`, `$densify`: every input document, handed to the
    /// stage at the end.
    Collect {
        stage: &'p Stage,
        buffer: Box<dyn DocumentBuffer>,
    },
    /// `$lookup`, `$graphLookup`, `$unionWith`: every input document, handed to the caller,
    /// which reads the other collection.
    Join {
        read: Foreign<'p>,
        buffer: Box<dyn DocumentBuffer>,
    },
    /// `$setWindowFields`: every input document in partition-then-sort order.
    Window {
        stage: &'p super::window::SetWindowFields,
        buffer: Box<dyn DocumentBuffer>,
    },
    Output(Box<dyn DocumentBuffer>),
}

/// One phase: the streaming stages from `first` up to the blocking stage at `blocking` (or to the
/// end), their per-stage counters, and the blocking stage's sink.
struct Phase<'p> {
    stages: &'p [Stage],
    /// Per streaming stage: documents `$skip` still drops or `$limit` still lets through.
    counters: Vec<u64>,
    sink: Sink<'p>,
    /// Index of the stage after the sink (where the next phase starts).
    next: usize,
}

/// A pipeline run in progress: [`PipelineRun::push`] each input document, then
/// [`PipelineRun::finish`].
pub struct PipelineRun<'p> {
    pipeline: &'p Pipeline,
    context: PipelineContext,
    buffers: &'p dyn Buffers,
    phase: Phase<'p>,
}

impl Pipeline {
    /// Starts a run whose blocking stages keep their documents in `buffers`.
    pub fn start<'p>(
        &'p self,
        context: &PipelineContext,
        buffers: &'p dyn Buffers,
    ) -> PipelineRun<'p> {
        PipelineRun {
            pipeline: self,
            context: context.clone(),
            buffers,
            phase: phase(&self.stages, 0, buffers, &context.collation),
        }
    }

    /// Runs the whole pipeline, its leading `$match` included, over `input` in memory (a
    /// `$facet` branch).
    pub(crate) fn run_whole(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let input = match &self.leading_filter {
            None => input,
            Some(filter) => {
                let mut kept = Vec::with_capacity(input.len());
                for document in input {
                    if filter.try_matches_collated(&document, context.collation.as_deref())? {
                        kept.push(document);
                    }
                }
                kept
            }
        };
        self.run(input, context)
    }

    /// Runs every stage after the leading `$match` (and after a source stage) over `input`, in
    /// memory.
    pub fn run(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let mut run = self.start(context, &InMemoryBuffers);
        for document in input {
            run.push(document)?;
        }
        match run.finish()? {
            Step::Done(output) => output.collect(),
            Step::Foreign { .. } => Err(foreign_read_not_here()),
        }
    }
}

/// The refusal of a stage that reads another collection where no collection can be read.
pub(super) fn foreign_read_not_here() -> CommandError {
    CommandError::new(
        ErrorCode::NotImplemented,
        "$lookup, $graphLookup and $unionWith read other collections, which only an aggregate \
         command's pipelines can",
    )
}

/// The phase that starts at stage `first`.
fn phase<'p>(
    stages: &'p [Stage],
    first: usize,
    buffers: &dyn Buffers,
    collation: &CollationChoice,
) -> Phase<'p> {
    let rest = &stages[first..];
    let blocking = rest.iter().position(|stage| {
        matches!(
            stage,
            Stage::Sort(_)
                | Stage::Group(_)
                | Stage::Count(_)
                | Stage::Facet(_)
                | Stage::Sample(_)
                | Stage::BucketAuto(_)
                | Stage::Densify(_)
                | Stage::Lookup(_)
                | Stage::UnionWith(_)
                | Stage::GraphLookup(_)
                | Stage::Window(_)
        )
    });
    let streaming = &rest[..blocking.unwrap_or(rest.len())];
    let counters = streaming
        .iter()
        .map(|stage| match stage {
            Stage::Skip(count) | Stage::Limit(count) => *count,
            _ => 0,
        })
        .collect();
    let (sink, next) = match blocking.map(|at| (&rest[at], first + at)) {
        Some((Stage::Sort(spec), at)) => {
            let limit = sort_limit(&stages[at + 1..]);
            let spec = spec.clone().with_collation(collation.clone());
            let buffer = buffers.buffer(BufferPurpose::Sort, spec.key_order(), limit);
            (Sink::Sort { spec, buffer }, at + 1)
        }
        Some((Stage::Group(group), at)) => (
            Sink::Group {
                table: Box::new(GroupTable::new(group.clone(), collation.clone())),
                spill: None,
            },
            at + 1,
        ),
        Some((Stage::Count(field), at)) => (Sink::Count { field, count: 0 }, at + 1),
        Some((Stage::Lookup(lookup), at)) => (
            Sink::Join {
                read: Foreign::Lookup(lookup),
                buffer: buffers.buffer(BufferPurpose::Sort, input_order(), None),
            },
            at + 1,
        ),
        Some((Stage::UnionWith(union), at)) => (
            Sink::Join {
                read: Foreign::UnionWith(union),
                buffer: buffers.buffer(BufferPurpose::Sort, input_order(), None),
            },
            at + 1,
        ),
        Some((Stage::Facet(facet), at)) if facet.reads_other_collections() => (
            Sink::Join {
                read: Foreign::Facet(facet),
                buffer: buffers.buffer(BufferPurpose::Sort, input_order(), None),
            },
            at + 1,
        ),
        Some((Stage::GraphLookup(graph), at)) => (
            Sink::Join {
                read: Foreign::GraphLookup(graph),
                buffer: buffers.buffer(BufferPurpose::Sort, input_order(), None),
            },
            at + 1,
        ),
        Some((Stage::Window(stage), at)) => (
            Sink::Window {
                stage,
                buffer: buffers.buffer(BufferPurpose::Sort, stage.key_order(collation), None),
            },
            at + 1,
        ),
        Some((
            stage @ (Stage::Facet(_) | Stage::Sample(_) | Stage::BucketAuto(_) | Stage::Densify(_)),
            at,
        )) => (
            Sink::Collect {
                stage,
                buffer: buffers.buffer(BufferPurpose::Sort, input_order(), None),
            },
            at + 1,
        ),
        _ => (
            Sink::Output(buffers.buffer(BufferPurpose::Output, input_order(), None)),
            stages.len(),
        ),
    };
    Phase {
        stages: streaming,
        counters,
        sink,
        next,
    }
}

/// How many sorted documents the stages after a `$sort` can use: `$skip`s then a `$limit`.
fn sort_limit(after: &[Stage]) -> Option<usize> {
    let mut skipped: u64 = 0;
    for stage in after {
        match stage {
            Stage::Skip(count) => skipped = skipped.saturating_add(*count),
            Stage::Limit(count) => {
                return usize::try_from(skipped.saturating_add(*count)).ok();
            }
            _ => return None,
        }
    }
    None
}

impl<'p> PipelineRun<'p> {
    /// Passes one input document through the pipeline.
    pub fn push(&mut self, document: Document) -> CommandResult<()> {
        self.buffers.deadline().check()?;
        push_into(&mut self.phase, document, &self.context, self.buffers)
    }

    /// Ends the input: runs the blocking stages in turn, up to the output or to a `$lookup`
    /// the caller must join.
    pub fn finish(self) -> CommandResult<Step<'p>> {
        let PipelineRun {
            pipeline,
            context,
            buffers,
            phase: mut current,
        } = self;
        if let Some(expression) = &pipeline.documents {
            for document in evaluate_documents(expression, &context)? {
                push_into(&mut current, document, &context, buffers)?;
            }
        }
        drive(pipeline, context, buffers, current)
    }
}

/// Where a run stands when its input has ended.
pub enum Step<'p> {
    /// The pipeline's output.
    Done(DocumentStream),
    /// Paused at a stage that reads another collection: its input documents, to combine with
    /// that collection's and hand back through [`Resume::resume`].
    Foreign {
        read: Foreign<'p>,
        documents: Vec<Document>,
        resume: Resume<'p>,
    },
}

/// A stage that reads another collection.
#[derive(Clone, Copy)]
pub enum Foreign<'p> {
    Lookup(&'p super::lookup::Lookup),
    UnionWith(&'p super::lookup::UnionWith),
    GraphLookup(&'p super::graph_lookup::GraphLookup),
    /// A `$facet` with a branch that reads another collection: the caller runs each branch.
    Facet(&'p super::facet::Facet),
}

/// The rest of a run paused at a `$lookup`.
pub struct Resume<'p> {
    pipeline: &'p Pipeline,
    context: PipelineContext,
    buffers: &'p dyn Buffers,
    /// The stage after the `$lookup`.
    next: usize,
}

impl<'p> Resume<'p> {
    /// The run's context (its collation is what a join compares under).
    pub fn context(&self) -> &PipelineContext {
        &self.context
    }

    /// Where the run keeps what its blocking stages hold (a `$facet` branch run by the caller
    /// keeps its own there too).
    pub fn buffers(&self) -> &'p dyn Buffers {
        self.buffers
    }

    /// Goes on with the `$lookup`'s output.
    pub fn resume(self, joined: Vec<Document>) -> CommandResult<Step<'p>> {
        let Resume {
            pipeline,
            context,
            buffers,
            next,
        } = self;
        let mut current = phase(&pipeline.stages, next, buffers, &context.collation);
        for document in joined {
            buffers.deadline().check()?;
            push_into(&mut current, document, &context, buffers)?;
        }
        drive(pipeline, context, buffers, current)
    }
}

/// Runs the blocking stages from `current` on, phase after phase.
fn drive<'p>(
    pipeline: &'p Pipeline,
    context: PipelineContext,
    buffers: &'p dyn Buffers,
    mut current: Phase<'p>,
) -> CommandResult<Step<'p>> {
    {
        loop {
            let next = current.next;
            let blocked = match current.sink {
                // Only the last phase ends in the output.
                Sink::Output(buffer) => return buffer.finish().map(Step::Done),
                Sink::Join { read, buffer } => {
                    let documents = buffer.finish()?.collect::<CommandResult<Vec<_>>>()?;
                    return Ok(Step::Foreign {
                        read,
                        documents,
                        resume: Resume {
                            pipeline,
                            context,
                            buffers,
                            next,
                        },
                    });
                }
                Sink::Sort { buffer, .. } => buffer.finish()?,
                Sink::Count { field, count } => {
                    Box::new(count_output(field, count).into_iter().map(Ok))
                }
                Sink::Window { stage, buffer } => {
                    let (max_bytes, allow_disk_use) = buffers.window_memory();
                    let output = stage.partitions(
                        buffer.finish()?,
                        context.clone(),
                        max_bytes,
                        allow_disk_use,
                    );
                    // `$push` of `$$ROOT` nests its input and copies it: the next stage must
                    // again see bounded documents.
                    Box::new(output.map(|document| {
                        document.and_then(|document| {
                            check_built_depth(&document)?;
                            check_built_size(&document)?;
                            Ok(document)
                        })
                    }))
                }
                Sink::Collect { stage, buffer } => {
                    let documents = buffer.finish()?.collect::<CommandResult<Vec<_>>>()?;
                    Box::new(stage.run_checked(documents, &context)?.into_iter().map(Ok))
                }
                Sink::Group { table, spill } => {
                    let groups: DocumentStream = match spill {
                        Some(buffer) => Box::new(SpilledGroups::new(
                            *table,
                            buffer.finish()?,
                            context.clone(),
                        )?),
                        None => Box::new(table.finish().into_iter()),
                    };
                    // `$push` of `$$ROOT` nests its input: the next stage must again see
                    // bounded documents.
                    Box::new(groups.map(|document| {
                        document.and_then(|document| {
                            check_built_depth(&document)?;
                            Ok(document)
                        })
                    }))
                }
            };
            current = phase(&pipeline.stages, next, buffers, &context.collation);
            for document in blocked {
                buffers.deadline().check()?;
                push_into(&mut current, document?, &context, buffers)?;
            }
        }
    }
}

/// Runs `document` through the phase's streaming stages into its sink, one document at a time:
/// `$unwind` hands on each document it makes before making the next, so a large document with a
/// long array never exists as all its copies at once.
fn push_into(
    phase: &mut Phase<'_>,
    document: Document,
    context: &PipelineContext,
    buffers: &dyn Buffers,
) -> CommandResult<()> {
    let stages = phase.stages;
    // The `$unwind`s still making documents (innermost last), each with the stage after it.
    let mut unwinding: Vec<(usize, Unwound<'_>)> = Vec::new();
    let mut next = Some((0, document));
    loop {
        let (first, document) = match next.take() {
            Some(start) => start,
            None => {
                let Some((after, unwound)) = unwinding.last_mut() else {
                    return Ok(());
                };
                match unwound.next() {
                    Some(document) => (*after, document?),
                    None => {
                        unwinding.pop();
                        continue;
                    }
                }
            }
        };
        let mut current = Some(document);
        for (index, stage) in stages.iter().enumerate().skip(first) {
            let Some(document) = current.take() else {
                break;
            };
            let counter = &mut phase.counters[index];
            current = match stage {
                Stage::Skip(_) if *counter > 0 => {
                    *counter -= 1;
                    None
                }
                Stage::Limit(_) if *counter == 0 => None,
                Stage::Limit(_) => {
                    *counter -= 1;
                    Some(document)
                }
                Stage::Skip(_) => Some(document),
                Stage::Unwind(unwind) => {
                    unwinding.push((index + 1, unwind.unwound(document)));
                    None
                }
                // The other streaming stages make at most one document of one.
                other => other.run_checked(vec![document], context)?.pop(),
            };
        }
        if let Some(document) = current {
            sink_push(&mut phase.sink, document, context, buffers)?;
        }
    }
}

fn sink_push(
    sink: &mut Sink<'_>,
    document: Document,
    context: &PipelineContext,
    buffers: &dyn Buffers,
) -> CommandResult<()> {
    match sink {
        Sink::Sort { spec, buffer } => buffer.push(spec.sort_key(&document), document),
        Sink::Collect { buffer, .. } | Sink::Join { buffer, .. } => {
            buffer.push(Vec::new(), document)
        }
        Sink::Count { count, .. } => {
            *count += 1;
            Ok(())
        }
        Sink::Output(buffer) => buffer.push(Vec::new(), document),
        Sink::Window { stage, buffer } => {
            buffer.push(stage.sort_key(&document, context)?, document)
        }
        Sink::Group { table, spill } => {
            let (key, values) = table.group().evaluate(&document, context)?;
            if let Some(spill) = spill {
                // Once spilling, every document goes to disk; the table no longer grows.
                return spill.push(vec![key.clone()], spilled_arguments(key, values));
            }
            table.add(key, values, context)?;
            let (max_bytes, may_spill) = buffers.group_memory();
            if table.memory_bytes() > max_bytes {
                if !may_spill {
                    return Err(fail(
                        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                        GROUP_EXCEEDED,
                    ));
                }
                let order = group_key_order(table.collation().clone());
                *spill = Some(buffers.buffer(BufferPurpose::GroupSpill, order, None));
            }
            Ok(())
        }
    }
}

/// A document's group key and accumulator arguments, as a spill buffer holds them (a missing
/// argument is an empty document in `v`, a present one `{x: value}`).
fn spilled_arguments(key: Bson, values: Vec<super::expr::Value>) -> Document {
    let values: Vec<Bson> = values
        .into_iter()
        .map(|value| match value {
            Some(value) => Bson::Document(doc! {"x": value}),
            None => Bson::Document(Document::new()),
        })
        .collect();
    doc! {"k": key, "v": values}
}

fn read_spilled(document: Document) -> CommandResult<(Bson, Vec<super::expr::Value>)> {
    let corrupt = || crate::error::CommandError::internal("corrupt spilled $group arguments");
    let key = document.get("k").cloned().ok_or_else(corrupt)?;
    let values = match document.get("v") {
        Some(Bson::Array(values)) => values
            .iter()
            .map(|value| match value {
                Bson::Document(value) => Ok(value.get("x").cloned()),
                _ => Err(corrupt()),
            })
            .collect::<CommandResult<Vec<_>>>()?,
        _ => return Err(corrupt()),
    };
    Ok((key, values))
}

/// A spilled `$group`'s output: the spill buffer in key order, each key's arguments folded onto
/// what the table held of that group before spilling began, then the groups only the table
/// holds.
struct SpilledGroups {
    table: Option<GroupTable>,
    stream: DocumentStream,
    /// What a group's initializers (`n`, `initArgs`) are evaluated in.
    context: PipelineContext,
    /// The first arguments of the next spilled group, read ahead.
    pending: Option<(Bson, Vec<super::expr::Value>)>,
    held: Option<std::vec::IntoIter<CommandResult<Document>>>,
}

impl SpilledGroups {
    fn new(
        table: GroupTable,
        mut stream: DocumentStream,
        context: PipelineContext,
    ) -> CommandResult<SpilledGroups> {
        let pending = match stream.next() {
            Some(document) => Some(read_spilled(document?)?),
            None => None,
        };
        Ok(SpilledGroups {
            table: Some(table),
            stream,
            context,
            pending,
            held: None,
        })
    }

    fn next_group(&mut self) -> CommandResult<Option<Document>> {
        if let Some(held) = &mut self.held {
            return held.next().transpose();
        }
        let Some((key, first)) = self.pending.take() else {
            let table = self
                .table
                .take()
                .map(GroupTable::finish)
                .unwrap_or_default();
            let mut held = table.into_iter();
            let next = held.next();
            self.held = Some(held);
            return next.transpose();
        };
        let mut arguments = vec![first];
        for document in self.stream.by_ref() {
            let (next_key, values) = read_spilled(document?)?;
            let collation = self
                .table
                .as_ref()
                .and_then(|table| table.collation().as_deref());
            if compare_values_with(&next_key, &key, collation) != Ordering::Equal {
                self.pending = Some((next_key, values));
                break;
            }
            arguments.push(values);
        }
        match &mut self.table {
            Some(table) => table.fold_rest(key, arguments, &self.context).map(Some),
            None => Err(crate::error::CommandError::internal("$group table gone")),
        }
    }
}

impl Iterator for SpilledGroups {
    type Item = CommandResult<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_group().transpose()
    }
}
