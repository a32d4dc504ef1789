//! Running a parsed pipeline one document at a time. Streaming stages (`$match`, `$project`,
//! `$addFields`, `$unset`, `$unwind`, `$replaceRoot`, `$skip`, `$limit`) pass each document on;
//! blocking stages (`$sort`, `$group`, `$count`, `$sample`, `$bucketAuto`, `$densify`...) hold
//! what they need in buffers the caller provides ([`Buffers`]), so the caller bounds their memory
//! and may spill them to disk; the output is itself such a buffer. `$sample` keeps only its
//! `size` documents of smallest random key; `$facet` tees its input into one nested run per
//! branch; the stages' own limits ([`StageLimits`]) are mongod's knobs. Stages that read another collection (`$lookup`,
//! `$graphLookup`, `$unionWith`) hand their input to the caller in batches while the input is
//! still coming ([`PipelineRun::step`]), so a join never holds more than a batch. A pipeline
//! with no blocking stage can instead be pulled by its reader ([`PulledRun`]). A `$sort` directly
//! followed by `$limit` (after any `$skip`) keeps only the documents it can return.
//!
//! Invariants: documents reach each stage in the order the previous one produced them; `$group`
//! accumulates in input order, and once its groups outgrow their memory it either fails with
//! mongod's error or (when the caller allows spilling) files the arguments of documents of new
//! groups in a buffer ordered by group key, folding each such group at the end — the groups it
//! already holds keep accumulating, so no accumulator needs merging; the deadline is checked for
//! every document. This module performs no I/O itself.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::group::GroupTable;
use super::{
    check_built_depth, check_built_size, count_output, evaluate_documents, fail, Pipeline, Stage,
    Unwound,
};
use crate::collation::CollationChoice;
use crate::compare::compare_values_with;
use crate::expr::PipelineContext;
use crate::sort::KeyOrder;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;

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
    /// `$bucketAuto`'s input by `groupBy` value (mongod's sorter, with its own memory limit).
    BucketAuto,
}

/// The memory limits of stages that bound what they hold themselves (mongod's knobs of the same
/// names); `usize::MAX` is unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageLimits {
    /// `internalDocumentSourceBucketAutoMaxMemoryBytes`: the buffer of
    /// [`BufferPurpose::BucketAuto`] (the caller applies it).
    pub bucket_auto_max_bytes: usize,
    /// `internalDocumentSourceDensifyMaxMemoryBytes`: `$densify`'s table of partitions.
    pub densify_max_bytes: usize,
    /// `internalQueryFacetBufferSizeBytes`: the input `$facet` buffers before its branches read
    /// it (a batch size, never an error).
    pub facet_buffer_bytes: usize,
    /// `internalQueryFacetMaxOutputDocSizeBytes`: the document `$facet` builds.
    pub facet_max_output_bytes: usize,
}

impl StageLimits {
    pub(crate) const UNBOUNDED: StageLimits = StageLimits {
        bucket_auto_max_bytes: usize::MAX,
        densify_max_bytes: usize::MAX,
        facet_buffer_bytes: usize::MAX,
        facet_max_output_bytes: usize::MAX,
    };
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
    /// The limits of `$bucketAuto`, `$densify` and `$facet`.
    fn stage_limits(&self) -> StageLimits {
        StageLimits::UNBOUNDED
    }
    fn deadline(&self) -> Deadline;
}

/// Buffers that hold everything in memory without limit: for runs over documents that are in
/// memory already.
pub(crate) struct InMemoryBuffers;

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
pub(crate) fn input_order() -> KeyOrder {
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
    /// `$sample`: the `size` documents of smallest random key.
    Sample(Box<dyn DocumentBuffer>),
    /// `$bucketAuto`: every input document with its `groupBy` value, in value order, and how
    /// many there are.
    BucketAuto {
        stage: &'p super::bucket_auto::BucketAuto,
        buffer: Box<dyn DocumentBuffer>,
        count: u64,
    },
    /// `$densify`: every input document in the order of the `$sort` mongod puts before it.
    Densify {
        stage: &'p super::densify::Densify,
        buffer: Box<dyn DocumentBuffer>,
    },
    /// `$facet` (whose branches read no other collection): one run per branch.
    Facet(Box<super::facet::FacetRun<'p>>),
    /// `$lookup`, `$graphLookup`, `$unionWith`: input documents in batches the caller combines
    /// with the other collection's (a `$unionWith` passes its input on as it comes and adds the
    /// other collection's documents at the end).
    Join {
        read: Foreign<'p>,
        batch: Vec<Document>,
        /// Encoded size of `batch`.
        bytes: usize,
    },
    /// A `$facet` with a branch that reads another collection: every input document, handed to
    /// the caller at the end, which runs each branch.
    FacetJoin {
        facet: &'p super::facet::Facet,
        buffer: Box<dyn DocumentBuffer>,
    },
    /// `$setWindowFields`: every input document in partition-then-sort order.
    Window {
        stage: &'p super::window::SetWindowFields,
        buffer: Box<dyn DocumentBuffer>,
    },
    Output(Box<dyn DocumentBuffer>),
    /// A `$unionWith` whose input has ended, while the caller feeds the other collection's
    /// documents into the next phase ([`Step::Feed`]).
    Feeding,
    /// A sink that has released everything it held.
    Closed,
}

/// Documents a `$lookup` or `$graphLookup` batch holds before the caller joins it: one planned
/// read of the other collection serves a `$lookup` batch.
const JOIN_BATCH_DOCUMENTS: usize = 1000;
/// Bytes a join batch holds at most (one document at least).
const JOIN_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// One phase: the streaming stages from some position up to a blocking stage (or to the end),
/// where documents stand in them, the blocking stage's sink, and what the phase before has
/// released into it and it has yet to take.
struct Phase<'p> {
    stages: &'p [Stage],
    flow: Flow,
    sink: Sink<'p>,
    /// Joined documents waiting to enter.
    queued: VecDeque<Document>,
    /// The output of the blocking stage before, still to enter.
    upstream: Option<DocumentStream>,
}

impl Phase<'_> {
    fn waiting(&self) -> bool {
        !self.queued.is_empty() || self.upstream.is_some()
    }
}

/// A pipeline run in progress. The caller pushes input documents ([`PipelineRun::push`]), then
/// ends the input ([`PipelineRun::end_input`]); after each of these it asks the run what it needs
/// ([`PipelineRun::step`]) until the answer is more input or the output, serving the batches it
/// is handed to join with another collection's and returning them through
/// [`PipelineRun::joined`]. A stage that reads another collection thus works through its input
/// batch by batch while the input is still being read.
///
/// Invariants: documents keep their order through every phase (the deepest phase's work is done
/// first, and what a phase releases enters the next in order); a phase is closed, releasing what
/// its blocking stage held, only once every phase before it is closed and its own waiting
/// documents have entered.
pub struct PipelineRun<'p> {
    pipeline: &'p Pipeline,
    context: PipelineContext,
    buffers: &'p dyn Buffers,
    /// Each blocking stage's phase in order, then the output's.
    phases: Vec<Phase<'p>>,
    /// Phases before this index are closed.
    closed: usize,
    input_ended: bool,
}

/// What a run needs next ([`PipelineRun::step`]).
pub enum Step<'p> {
    /// The next input document, or the end of the input.
    Input,
    /// A batch to combine with another collection's documents.
    Foreign(ForeignBatch<'p>),
    /// The phase after a `$unionWith` whose input has ended has taken every document handed
    /// to it: the caller hands it more of the other collection's ([`PipelineRun::joined`]), or
    /// says there are no more ([`PipelineRun::fed_all`]).
    Feed(BatchOrigin),
    /// The pipeline's output.
    Done(DocumentStream),
}

/// Documents that reached a stage reading another collection, for the caller to combine with
/// that collection's and hand back ([`PipelineRun::joined`]).
pub struct ForeignBatch<'p> {
    pub read: Foreign<'p>,
    pub documents: Vec<Document>,
    /// Whether the stage's input has ended with this batch (a `$unionWith` then feeds the other
    /// collection's documents, [`Step::Feed`]; a `$facet` only ever gets a last batch, its
    /// whole input).
    pub last: bool,
    pub origin: BatchOrigin,
}

/// Which phase a [`ForeignBatch`] came from (in one run, it names the stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchOrigin(usize);

/// A stage that reads another collection.
#[derive(Clone, Copy)]
pub enum Foreign<'p> {
    Lookup(&'p super::lookup::Lookup),
    UnionWith(&'p super::lookup::UnionWith),
    GraphLookup(&'p super::graph_lookup::GraphLookup),
    /// A `$facet` with a branch that reads another collection: the caller runs each branch.
    Facet(&'p super::facet::Facet),
}

impl Pipeline {
    /// Starts a run whose blocking stages keep their documents in `buffers`.
    pub fn start<'p>(
        &'p self,
        context: &PipelineContext,
        buffers: &'p dyn Buffers,
    ) -> PipelineRun<'p> {
        let mut phases = Vec::new();
        let mut first = 0;
        loop {
            let (phase, next) = phase(&self.stages, first, buffers, context);
            let output = matches!(phase.sink, Sink::Output(_));
            phases.push(phase);
            if output {
                break;
            }
            first = next;
        }
        PipelineRun {
            pipeline: self,
            context: context.clone(),
            buffers,
            phases,
            closed: 0,
            input_ended: false,
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
            run.next_without_reads()?;
        }
        run.finish_without_reads()?.collect()
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

/// The phase that starts at stage `first`, and the index of the stage after its sink (where the
/// next phase starts).
fn phase<'p>(
    stages: &'p [Stage],
    first: usize,
    buffers: &'p dyn Buffers,
    context: &PipelineContext,
) -> (Phase<'p>, usize) {
    let collation = &context.collation;
    let rest = &stages[first..];
    let blocking = rest.iter().position(is_blocking);
    let streaming = &rest[..blocking.unwrap_or(rest.len())];
    let join = |read| Sink::Join {
        read,
        batch: Vec::new(),
        bytes: 0,
    };
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
        Some((Stage::Lookup(lookup), at)) => (join(Foreign::Lookup(lookup)), at + 1),
        Some((Stage::UnionWith(union), at)) => (join(Foreign::UnionWith(union)), at + 1),
        Some((Stage::GraphLookup(graph), at)) => (join(Foreign::GraphLookup(graph)), at + 1),
        Some((Stage::Facet(facet), at)) if facet.reads_other_collections() => (
            Sink::FacetJoin {
                facet,
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
        Some((Stage::Facet(facet), at)) => {
            (Sink::Facet(Box::new(facet.start(context, buffers))), at + 1)
        }
        Some((Stage::Sample(size), at)) => (
            Sink::Sample(buffers.buffer(
                BufferPurpose::Sort,
                super::facet::sample_order(),
                Some(usize::try_from(*size).unwrap_or(usize::MAX)),
            )),
            at + 1,
        ),
        Some((Stage::BucketAuto(stage), at)) => (
            Sink::BucketAuto {
                stage,
                buffer: buffers.buffer(BufferPurpose::BucketAuto, stage.key_order(collation), None),
                count: 0,
            },
            at + 1,
        ),
        Some((Stage::Densify(stage), at)) => (
            Sink::Densify {
                stage,
                buffer: buffers.buffer(BufferPurpose::Sort, stage.key_order(collation), None),
            },
            at + 1,
        ),
        _ => (
            Sink::Output(buffers.buffer(BufferPurpose::Output, input_order(), None)),
            stages.len(),
        ),
    };
    let phase = Phase {
        stages: streaming,
        flow: Flow::new(streaming),
        sink,
        queued: VecDeque::new(),
        upstream: None,
    };
    (phase, next)
}

/// Whether a run pauses at `stage` until its input ends: it holds documents (`$sort`,
/// `$group`...) or reads another collection for them (`$lookup`...).
fn is_blocking(stage: &Stage) -> bool {
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
    /// Passes one input document into the pipeline; [`PipelineRun::step`] takes it further.
    pub fn push(&mut self, document: Document) -> CommandResult<()> {
        self.buffers.deadline().check()?;
        push_into(&mut self.phases[0], document, &self.context, self.buffers)
    }

    /// Ends the input (after the documents of a `$documents` source, which enter now).
    pub fn end_input(&mut self) -> CommandResult<()> {
        if let Some(expression) = &self.pipeline.documents {
            self.phases[0]
                .queued
                .extend(evaluate_documents(expression, &self.context)?);
        }
        self.input_ended = true;
        Ok(())
    }

    /// Whether more input cannot change the output: a `$limit` has let through all it allows
    /// (a phase only ever receives what the phases before it release), so the caller may stop
    /// reading.
    pub fn saturated(&self) -> bool {
        self.phases
            .iter()
            .any(|phase| phase.flow.saturated(phase.stages))
    }

    /// The run's context (its collation is what a join compares under).
    pub fn context(&self) -> &PipelineContext {
        &self.context
    }

    /// Where the run keeps what its blocking stages hold (a nested run the caller makes for a
    /// `$facet` branch or a sub-pipeline keeps its own there too).
    pub fn buffers(&self) -> &'p dyn Buffers {
        self.buffers
    }

    /// Takes the run as far as it goes without the caller: to the next batch to join, to the
    /// need for more input, or to the output.
    pub fn step(&mut self) -> CommandResult<Step<'p>> {
        loop {
            // The deepest work first: what it releases is furthest along.
            for index in (0..self.phases.len()).rev() {
                if let Some(batch) = self.full_batch(index) {
                    return Ok(Step::Foreign(batch));
                }
            }
            if let Some(index) = (0..self.phases.len())
                .rev()
                .find(|&index| self.phases[index].waiting())
            {
                self.buffers.deadline().check()?;
                let phase = &mut self.phases[index];
                let document = match phase.queued.pop_front() {
                    Some(document) => document,
                    None => match phase.upstream.as_mut().and_then(Iterator::next) {
                        Some(document) => document?,
                        None => {
                            phase.upstream = None;
                            continue;
                        }
                    },
                };
                push_into(phase, document, &self.context, self.buffers)?;
                continue;
            }
            if !self.input_ended {
                return Ok(Step::Input);
            }
            if let Some(step) = self.close_next()? {
                return Ok(step);
            }
        }
    }

    /// Hands back a batch joined with another collection's documents: they enter the phase
    /// after the one that made the batch.
    pub fn joined(&mut self, origin: BatchOrigin, documents: Vec<Document>) {
        self.phases[origin.0 + 1].queued.extend(documents);
    }

    /// Ends the other collection's documents of the `$unionWith` that asked for them
    /// ([`Step::Feed`]): its phase closes.
    pub fn fed_all(&mut self, origin: BatchOrigin) -> CommandResult<()> {
        let phase = &mut self.phases[origin.0];
        if !matches!(phase.sink, Sink::Feeding) || self.closed != origin.0 {
            return Err(CommandError::internal(
                "a $unionWith fed that was not feeding",
            ));
        }
        phase.sink = Sink::Closed;
        self.closed += 1;
        Ok(())
    }

    /// Ends the input of a run that reads no other collection, and its output.
    pub(crate) fn finish_without_reads(mut self) -> CommandResult<DocumentStream> {
        self.end_input()?;
        self.next_without_reads()?
            .ok_or_else(|| CommandError::internal("a pipeline run wants input after its end"))
    }

    /// [`PipelineRun::step`] for a run that cannot read other collections: the output once the
    /// input has ended, `None` while it needs more.
    fn next_without_reads(&mut self) -> CommandResult<Option<DocumentStream>> {
        match self.step()? {
            Step::Input => Ok(None),
            Step::Done(output) => Ok(Some(output)),
            Step::Foreign(_) | Step::Feed(_) => Err(foreign_read_not_here()),
        }
    }

    /// The batch phase `index` must have joined now: a full `$lookup`/`$graphLookup` batch.
    /// A `$unionWith` passes its batch on to the next phase instead.
    fn full_batch(&mut self, index: usize) -> Option<ForeignBatch<'p>> {
        let (before, after) = self.phases.split_at_mut(index + 1);
        let Sink::Join { read, batch, bytes } = &mut before[index].sink else {
            return None;
        };
        if batch.is_empty() {
            return None;
        }
        if let Foreign::UnionWith(_) = read {
            after[0].queued.extend(batch.drain(..));
            *bytes = 0;
            return None;
        }
        if batch.len() < JOIN_BATCH_DOCUMENTS && *bytes < JOIN_BATCH_BYTES {
            return None;
        }
        *bytes = 0;
        Some(ForeignBatch {
            read: *read,
            documents: std::mem::take(batch),
            last: false,
            origin: BatchOrigin(index),
        })
    }

    /// Closes the first open phase, every phase before it being closed and nothing waiting
    /// anywhere: what its blocking stage held enters the next phase, or goes to the caller.
    fn close_next(&mut self) -> CommandResult<Option<Step<'p>>> {
        let index = self.closed;
        let Some(phase) = self.phases.get_mut(index) else {
            return Err(CommandError::internal(
                "a pipeline run closed past its output",
            ));
        };
        let origin = BatchOrigin(index);
        match phase.sink {
            // The phase closes when the caller has fed all ([`PipelineRun::fed_all`]).
            Sink::Feeding => return Ok(Some(Step::Feed(origin))),
            Sink::Join {
                read: Foreign::UnionWith(union),
                ref mut batch,
                ..
            } => {
                let documents = std::mem::take(batch);
                phase.sink = Sink::Feeding;
                return Ok(Some(Step::Foreign(ForeignBatch {
                    read: Foreign::UnionWith(union),
                    documents,
                    last: true,
                    origin,
                })));
            }
            _ => {}
        }
        self.closed += 1;
        let last = |read, documents| {
            Ok(Some(Step::Foreign(ForeignBatch {
                read,
                documents,
                last: true,
                origin,
            })))
        };
        let released: DocumentStream = match std::mem::replace(&mut phase.sink, Sink::Closed) {
            Sink::Output(buffer) => return buffer.finish().map(|output| Some(Step::Done(output))),
            Sink::Join { read, batch, .. } => {
                if batch.is_empty() {
                    return Ok(None);
                }
                return last(read, batch);
            }
            Sink::FacetJoin { facet, buffer } => {
                let documents = buffer.finish()?.collect::<CommandResult<Vec<_>>>()?;
                return last(Foreign::Facet(facet), documents);
            }
            Sink::Closed | Sink::Feeding => {
                return Err(CommandError::internal("a pipeline phase closed twice"))
            }
            Sink::Sort { buffer, .. } => buffer.finish()?,
            Sink::Count { field, count } => {
                Box::new(count_output(field, count).into_iter().map(Ok))
            }
            Sink::Window { stage, buffer } => {
                let (max_bytes, allow_disk_use) = self.buffers.window_memory();
                let output = stage.partitions(
                    buffer.finish()?,
                    self.context.clone(),
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
            Sink::Sample(buffer) => buffer.finish()?,
            Sink::BucketAuto {
                stage,
                buffer,
                count,
            } => Box::new(stage.buckets(
                buffer.finish()?,
                count,
                self.context.clone(),
                self.buffers.deadline(),
            )),
            Sink::Densify { stage, buffer } => Box::new(stage.densified(
                buffer.finish()?,
                self.context.clone(),
                self.buffers.stage_limits().densify_max_bytes,
            )),
            Sink::Facet(run) => Box::new(std::iter::once(run.finish())),
            Sink::Group { table, spill } => {
                let groups: DocumentStream = match spill {
                    Some(buffer) => Box::new(SpilledGroups::new(
                        *table,
                        buffer.finish()?,
                        self.context.clone(),
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
        self.phases[index + 1].upstream = Some(released);
        Ok(None)
    }
}

impl Pipeline {
    /// Whether every stage from `first` on passes documents on as they come (no source stage,
    /// no blocking stage, no final write): such a tail can run as its reader pulls
    /// ([`PulledRun`]).
    pub fn streams_from(&self, first: usize) -> bool {
        self.source.is_none()
            && self.documents.is_none()
            && self.out.is_none()
            && self
                .stages
                .get(first..)
                .is_some_and(|rest| !rest.iter().any(is_blocking))
    }
}

/// The streaming stages of a pipeline from some position on ([`Pipeline::streams_from`]), run
/// as the reader asks for output rather than as input arrives: a cursor holds one between
/// batches, so a pipeline with no blocking stage reads its collection no further than the
/// batches returned so far need.
pub struct PulledRun {
    pipeline: Arc<Pipeline>,
    first: usize,
    flow: Flow,
    context: PipelineContext,
}

impl PulledRun {
    /// A run of `pipeline`'s stages from `first` on, which must all stream.
    pub fn new(
        pipeline: Arc<Pipeline>,
        first: usize,
        context: PipelineContext,
    ) -> CommandResult<PulledRun> {
        if !pipeline.streams_from(first) {
            return Err(CommandError::internal(
                "a pulled pipeline run over a blocking stage",
            ));
        }
        let flow = Flow::new(&pipeline.stages[first..]);
        Ok(PulledRun {
            pipeline,
            first,
            flow,
            context,
        })
    }

    /// The next output document that needs no more input (a copy an `$unwind` is still making).
    pub fn pending(&mut self) -> CommandResult<Option<Document>> {
        self.flow
            .next(&self.pipeline.stages[self.first..], None, &self.context)
    }

    /// Passes one input document in; the first output document it makes, if any (the rest come
    /// from [`PulledRun::pending`]).
    pub fn push(&mut self, document: Document) -> CommandResult<Option<Document>> {
        self.flow.next(
            &self.pipeline.stages[self.first..],
            Some(document),
            &self.context,
        )
    }

    /// Whether copies an `$unwind` is making may still come out.
    pub fn has_pending(&self) -> bool {
        !self.flow.unwinding.is_empty()
    }

    /// Whether more input cannot make more output (see [`PipelineRun::saturated`]).
    pub fn saturated(&self) -> bool {
        self.flow.saturated(&self.pipeline.stages[self.first..])
    }
}

/// Runs `document` through the phase's streaming stages into its sink, each document that
/// comes out before the next is made (see [`Flow`]).
fn push_into(
    phase: &mut Phase<'_>,
    document: Document,
    context: &PipelineContext,
    buffers: &dyn Buffers,
) -> CommandResult<()> {
    let mut output = phase.flow.next(phase.stages, Some(document), context)?;
    while let Some(document) = output {
        sink_push(&mut phase.sink, document, context, buffers)?;
        output = phase.flow.next(phase.stages, None, context)?;
    }
    Ok(())
}

/// Where documents stand in a run of streaming stages: what each `$skip` still drops and each
/// `$limit` still lets through, and the `$unwind`s still making copies of a document. `$unwind`
/// hands on each copy before making the next, so a large document with a long array never
/// exists as all its copies at once, and a reader pulling output one document at a time holds
/// at most one copy per `$unwind`.
struct Flow {
    /// Per stage: documents `$skip` still drops or `$limit` still lets through.
    counters: Vec<u64>,
    /// The `$unwind`s still making copies (innermost last), by stage index.
    unwinding: Vec<(usize, Unwound)>,
}

impl Flow {
    fn new(stages: &[Stage]) -> Flow {
        Flow {
            counters: stages
                .iter()
                .map(|stage| match stage {
                    Stage::Skip(count) | Stage::Limit(count) => *count,
                    _ => 0,
                })
                .collect(),
            unwinding: Vec::new(),
        }
    }

    /// The next document out of `stages` (the ones this flow was made for): from the copies an
    /// `$unwind` is still making, else from `input`; `None` when both are spent.
    fn next(
        &mut self,
        stages: &[Stage],
        input: Option<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Option<Document>> {
        let mut next = input.map(|document| (0, document));
        loop {
            let (first, document) = match next.take() {
                Some(start) => start,
                None => {
                    let Some((at, unwound)) = self.unwinding.last_mut() else {
                        return Ok(None);
                    };
                    let Stage::Unwind(unwind) = &stages[*at] else {
                        return Err(CommandError::internal(
                            "a flow unwinds at a stage that is not $unwind",
                        ));
                    };
                    match unwound.next(unwind) {
                        Some(document) => (*at + 1, document?),
                        None => {
                            self.unwinding.pop();
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
                let counter = &mut self.counters[index];
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
                        self.unwinding.push((index, unwind.unwound(document)));
                        None
                    }
                    // The other streaming stages make at most one document of one.
                    other => other.run_checked(vec![document], context)?.pop(),
                };
            }
            if current.is_some() {
                return Ok(current);
            }
        }
    }

    /// Whether more input cannot make more output: a `$limit` has let through all it allows
    /// (copies an `$unwind` after it is still making may still come out).
    fn saturated(&self, stages: &[Stage]) -> bool {
        stages
            .iter()
            .zip(&self.counters)
            .any(|(stage, counter)| matches!(stage, Stage::Limit(_)) && *counter == 0)
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
        Sink::FacetJoin { buffer, .. } => buffer.push(Vec::new(), document),
        Sink::Sample(buffer) => buffer.push(super::facet::sample_key(), document),
        Sink::BucketAuto {
            stage,
            buffer,
            count,
        } => {
            let (key, entry) = stage.entry(document, context)?;
            *count += 1;
            buffer.push(key, entry)
        }
        Sink::Densify { stage, buffer } => buffer.push(stage.sort_key(&document), document),
        Sink::Facet(run) => run.push(document),
        Sink::Join { batch, bytes, .. } => {
            *bytes += tideway_base::bsonutil::encoded_size(&document);
            batch.push(document);
            Ok(())
        }
        Sink::Closed | Sink::Feeding => Err(CommandError::internal(
            "a document reached a closed pipeline phase",
        )),
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
fn spilled_arguments(key: Bson, values: Vec<crate::expr::Value>) -> Document {
    let values: Vec<Bson> = values
        .into_iter()
        .map(|value| match value {
            Some(value) => Bson::Document(doc! {"x": value}),
            None => Bson::Document(Document::new()),
        })
        .collect();
    doc! {"k": key, "v": values}
}

fn read_spilled(document: Document) -> CommandResult<(Bson, Vec<crate::expr::Value>)> {
    let corrupt =
        || tideway_base::error::CommandError::internal("corrupt spilled $group arguments");
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
    pending: Option<(Bson, Vec<crate::expr::Value>)>,
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
            None => Err(tideway_base::error::CommandError::internal(
                "$group table gone",
            )),
        }
    }
}

impl Iterator for SpilledGroups {
    type Item = CommandResult<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_group().transpose()
    }
}
