//! The buffers of one aggregation's blocking stages, over the [`Sorter`]: each stage asks
//! [`Buffers`] for a buffer by purpose and gets a sorter with the limits that purpose has.

use bson::{Bson, Document};

use super::{BufferPurpose, Buffers, DocumentBuffer, DocumentStream, StageLimits};
use crate::sorter::{KeyOrder, SortLimits, Sorter};
use tideway_base::error::CommandResult;
use tideway_base::limits::Deadline;

impl DocumentBuffer for Sorter<Document> {
    fn push(&mut self, key: Vec<Bson>, document: Document) -> CommandResult<()> {
        Sorter::push(self, key, document)
    }

    fn finish(self: Box<Self>) -> CommandResult<DocumentStream> {
        Ok(Box::new(Sorter::finish(*self)?))
    }
}

/// mongod's message when its sorter (used directly by `$bucketAuto`) reaches its memory limit
/// without disk use (`sorter.cpp`; the `$sort` stage words it as `sorter::sort_exceeded_message`).
pub(crate) fn sorter_exceeded_message(max_memory_bytes: usize) -> String {
    format!(
        "Sort exceeded memory limit of {max_memory_bytes} bytes, but did not opt in to external sorting."
    )
}

/// The buffers of one aggregation: `$sort` (and `$sample`, `$densify`'s sort), `$group` and
/// `$bucketAuto` within their memory limits (spilling if the command allows disk use, else 292),
/// and the output, which always spills past the sort limit: mongod streams its output to the
/// cursor and never holds or refuses it, so holding it all in memory would let one command
/// exhaust the server, and refusing it would fail commands mongod runs.
pub struct PipelineBuffers {
    pub sort: SortLimits,
    pub group_max_bytes: usize,
    /// `$bucketAuto`'s sorter; `$densify`'s partitions; `$facet`'s batch and output.
    pub stages: StageLimits,
}

impl Buffers for PipelineBuffers {
    fn buffer(
        &self,
        purpose: BufferPurpose,
        order: KeyOrder,
        limit: Option<usize>,
    ) -> Box<dyn DocumentBuffer> {
        let mut limits = self.sort.clone();
        match purpose {
            BufferPurpose::Sort => {}
            BufferPurpose::GroupSpill => limits.max_memory_bytes = self.group_max_bytes,
            BufferPurpose::Output => limits.allow_disk_use = true,
            BufferPurpose::BucketAuto => {
                limits.max_memory_bytes = self.stages.bucket_auto_max_bytes;
                limits.exceeded_message =
                    sorter_exceeded_message(self.stages.bucket_auto_max_bytes);
            }
        }
        Box::new(Sorter::<Document>::new(order, limit, limits))
    }

    fn group_memory(&self) -> (usize, bool) {
        (self.group_max_bytes, self.sort.allow_disk_use)
    }

    fn stage_limits(&self) -> StageLimits {
        self.stages
    }

    fn deadline(&self) -> Deadline {
        self.sort.deadline
    }
}
