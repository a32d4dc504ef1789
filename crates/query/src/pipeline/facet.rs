//! `$facet` (several sub-pipelines over the same input, answered as one document
//! `{name: [output...], ...}`) and `$sample` (that many input documents, chosen at random).
//!
//! Invariants: both are blocking stages that see every input document before answering; each
//! `$facet` branch runs whole, its leading `$match` included, over its own copy of the input,
//! under the run's collation and `$$NOW`; a branch may not hold a stage that reads or writes
//! collections by itself (`$facet`, `$out`, `$merge`, `$collStats`, ...: mongod's 40600).
//! `$sample` chooses without replacement.
//!
//! Memory, as mongod's: `$facet` ([`FacetRun`]) is its `TeeBuffer`: input gathers in a batch of
//! up to `internalQueryFacetBufferSizeBytes`, then every branch (a nested run whose blocking
//! stages keep their own limits) reads the batch; the batch never spills and is never an error.
//! The document `$facet` builds may hold `internalQueryFacetMaxOutputDocSizeBytes` (4031700).
//! `$sample` is mongod's `$sort` on a random key with a limit of `size`: the runner keeps the
//! `size` documents of smallest key ([`sample_key`], [`sample_order`]) in a sort buffer.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{Bson, Document};

use super::run::StageLimits;
use super::{Buffers, Pipeline, PipelineRun};
use crate::compare::compare_values;
use crate::expr::PipelineContext;
use crate::sort::KeyOrder;
use tideway_base::bsonutil::encoded_size;
use tideway_base::display::{element_string, type_name};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// Stages a `$facet` branch may not contain.
const NOT_IN_FACET: &[&str] = &[
    "$collStats",
    "$facet",
    "$geoNear",
    "$indexStats",
    "$out",
    "$merge",
    "$planCacheStats",
    "$changeStream",
    "$currentOp",
    "$documents",
    "$search",
    "$searchMeta",
];

/// A parsed `$facet`: each branch's name and pipeline.
#[derive(Clone, Debug)]
pub struct Facet {
    branches: Vec<(String, Pipeline)>,
}

impl Facet {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Facet> {
        let non_empty = matches!(spec, Bson::Document(branches) if !branches.is_empty());
        let Bson::Document(branches) = spec else {
            return Err(not_an_object(spec));
        };
        if !non_empty {
            return Err(not_an_object(spec));
        }
        let mut parsed = Vec::with_capacity(branches.len());
        for (name, stages) in branches {
            check_branch_name(name)?;
            let Bson::Array(stages) = stages else {
                return Err(CommandError::new(
                    ErrorCode::Location40170,
                    format!(
                        "arguments to $facet must be arrays, {name} is type {}",
                        type_name(stages)
                    ),
                ));
            };
            let mut documents = Vec::with_capacity(stages.len());
            for stage in stages {
                let Bson::Document(stage) = stage else {
                    return Err(CommandError::new(
                        ErrorCode::Location40171,
                        format!(
                            "elements of arrays in $facet spec must be non-empty objects, {name} \
                             argument contained an element of type {}: {}",
                            type_name(stage),
                            tideway_base::display::value_string(stage)
                        ),
                    ));
                };
                if let Some(forbidden) = stage
                    .keys()
                    .next()
                    .filter(|stage_name| NOT_IN_FACET.contains(&stage_name.as_str()))
                {
                    return Err(CommandError::new(
                        ErrorCode::Location40600,
                        format!("{forbidden} is not allowed to be used within a $facet stage"),
                    ));
                }
                documents.push(stage.clone());
            }
            let pipeline = Pipeline::parse(&documents)?;
            if pipeline.source().is_some() {
                return Err(CommandError::internal("a source stage inside $facet"));
            }
            parsed.push((name.clone(), pipeline));
        }
        Ok(Facet { branches: parsed })
    }

    /// The branches, by name, in specification order.
    pub fn branches(&self) -> &[(String, Pipeline)] {
        &self.branches
    }

    /// Whether a branch reads another collection (`$lookup`, `$graphLookup`, `$unionWith`):
    /// the run then hands the stage to its caller, which can read.
    pub(crate) fn reads_other_collections(&self) -> bool {
        self.branches
            .iter()
            .any(|(_, pipeline)| pipeline.reads_other_collections())
    }

    /// Runs every branch over `documents` in memory; the one output document.
    pub(crate) fn run(
        &self,
        documents: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Document> {
        let mut results = Vec::with_capacity(self.branches.len());
        for (name, pipeline) in &self.branches {
            results.push((
                name.as_str(),
                pipeline.run_whole(documents.clone(), context)?,
            ));
        }
        Facet::assemble(results, usize::MAX)
    }

    /// Starts a run of every branch, their blocking stages keeping their documents in `buffers`.
    pub(crate) fn start<'p>(
        &'p self,
        context: &PipelineContext,
        buffers: &'p dyn Buffers,
    ) -> FacetRun<'p> {
        FacetRun {
            facet: self,
            context: context.clone(),
            runs: self
                .branches
                .iter()
                .map(|(_, pipeline)| pipeline.start(context, buffers))
                .collect(),
            batch: Vec::new(),
            batch_bytes: 0,
            limits: buffers.stage_limits(),
        }
    }

    /// The stage's output document from each branch's results, no larger than
    /// `max_output_bytes` and nested no deeper than a document may be.
    pub fn assemble(
        results: Vec<(&str, Vec<Document>)>,
        max_output_bytes: usize,
    ) -> CommandResult<Document> {
        let mut size = OutputSize::new(max_output_bytes);
        for document in results.iter().flat_map(|(_, documents)| documents) {
            size.add(document)?;
        }
        build(results)
    }
}

fn build(results: Vec<(&str, Vec<Document>)>) -> CommandResult<Document> {
    let mut output = Document::new();
    for (name, documents) in results {
        output.insert(
            name,
            Bson::Array(documents.into_iter().map(Bson::Document).collect()),
        );
    }
    super::check_built_depth(&output)?;
    Ok(output)
}

/// The bytes of the document a `$facet` builds so far, against
/// `internalQueryFacetMaxOutputDocSizeBytes`.
struct OutputSize {
    used: usize,
    max: usize,
}

impl OutputSize {
    fn new(max: usize) -> OutputSize {
        OutputSize { used: 0, max }
    }

    /// Counts one branch output document: mongod's 4031700 past the limit.
    fn add(&mut self, document: &Document) -> CommandResult<()> {
        self.used = self.used.saturating_add(encoded_size(document));
        if self.used > self.max {
            return Err(CommandError::new(
                ErrorCode::Location4031700,
                format!(
                    "document constructed by $facet is {} bytes, which exceeds the limit of {} \
                     bytes",
                    self.used, self.max
                ),
            ));
        }
        Ok(())
    }
}

/// A `$facet` (whose branches read no other collection) while its input comes in: mongod's
/// `TeeBuffer` in front of one nested run per branch.
pub(crate) struct FacetRun<'p> {
    facet: &'p Facet,
    context: PipelineContext,
    /// One per branch, in specification order.
    runs: Vec<PipelineRun<'p>>,
    /// Input not yet read by the branches.
    batch: Vec<Document>,
    batch_bytes: usize,
    limits: StageLimits,
}

impl FacetRun<'_> {
    /// Takes one input document; a full batch goes to the branches.
    pub(crate) fn push(&mut self, document: Document) -> CommandResult<()> {
        self.batch_bytes = self.batch_bytes.saturating_add(encoded_size(&document));
        self.batch.push(document);
        if self.batch_bytes >= self.limits.facet_buffer_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Every branch reads the batch (each its own copy; the last one takes it).
    fn flush(&mut self) -> CommandResult<()> {
        let batch = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        let Some((last, others)) = self.runs.split_last_mut() else {
            return Ok(());
        };
        let branches = &self.facet.branches;
        for ((_, pipeline), run) in branches.iter().zip(others.iter_mut()) {
            for document in &batch {
                if pipeline.admits(document, &self.context)? {
                    run.push(document.clone())?;
                }
            }
        }
        if let Some((_, pipeline)) = branches.last() {
            for document in batch {
                if pipeline.admits(&document, &self.context)? {
                    last.push(document)?;
                }
            }
        }
        Ok(())
    }

    /// Ends the input: the one output document, from each branch's output.
    pub(crate) fn finish(mut self) -> CommandResult<Document> {
        self.flush()?;
        let mut size = OutputSize::new(self.limits.facet_max_output_bytes);
        let mut results = Vec::with_capacity(self.runs.len());
        for ((name, _), run) in self.facet.branches.iter().zip(self.runs) {
            let output = run.finish_without_reads()?;
            let mut documents = Vec::new();
            for document in output {
                let document = document?;
                size.add(&document)?;
                documents.push(document);
            }
            results.push((name.as_str(), documents));
        }
        build(results)
    }
}

/// The key `$sample` sorts a document by: a random double (mongod's `randVal`).
pub(crate) fn sample_key() -> Vec<Bson> {
    vec![Bson::Double(tideway_base::rng::random_unit())]
}

/// `$sample`'s order: ascending random key.
pub(crate) fn sample_order() -> KeyOrder {
    Arc::new(|a: &[Bson], b: &[Bson]| match (a.first(), b.first()) {
        (Some(a), Some(b)) => compare_values(a, b),
        _ => Ordering::Equal,
    })
}

fn not_an_object(spec: &Bson) -> CommandError {
    CommandError::new(
        ErrorCode::Location40169,
        format!(
            "the $facet specification must be a non-empty object, but found: {}",
            element_string("$facet", spec)
        ),
    )
}

/// mongod's `FieldPath::uassertValidFieldName` for a branch name.
fn check_branch_name(name: &str) -> CommandResult<()> {
    let (code, message) = if name.is_empty() {
        (
            ErrorCode::Location15998,
            "FieldPath field names may not be empty strings.".to_string(),
        )
    } else if name.starts_with('$') {
        (
            ErrorCode::Location16410,
            format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. in path {name}"),
        )
    } else if name.contains('.') {
        (
            ErrorCode::Location16412,
            "FieldPath field names may not contain '.'. Consider using $getField or $setField."
                .to_string(),
        )
    } else {
        return Ok(());
    };
    Err(CommandError::new(code, message))
}

/// `$sample: {size: n}`: the number of documents to choose.
pub(crate) fn parse_sample(spec: &Bson) -> CommandResult<u64> {
    let Bson::Document(arguments) = spec else {
        return Err(CommandError::new(
            ErrorCode::Location28745,
            "the $sample stage specification must be an object",
        ));
    };
    let mut size = None;
    for (name, value) in arguments {
        if name != "size" {
            return Err(CommandError::new(
                ErrorCode::Location28748,
                format!("unrecognized option to $sample: {name}"),
            ));
        }
        let number = crate::numeric::Number::from_bson(value).ok_or_else(|| {
            CommandError::new(
                ErrorCode::Location28746,
                "size argument to $sample must be a number",
            )
        })?;
        let Some(count) = number.to_i64_truncated() else {
            return Err(CommandError::new(
                ErrorCode::Location28746,
                "size argument to $sample must be a number",
            ));
        };
        if count < 0 {
            return Err(CommandError::new(
                ErrorCode::Location28747,
                "size argument to $sample must not be negative",
            ));
        }
        size = Some(count as u64);
    }
    size.ok_or_else(|| {
        CommandError::new(
            ErrorCode::Location28749,
            "$sample stage must specify a size",
        )
    })
}

/// `size` of `documents`, chosen uniformly at random without replacement (all of them, shuffled,
/// when there are fewer).
pub(crate) fn sample(mut documents: Vec<Document>, size: u64) -> Vec<Document> {
    let size = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .min(documents.len());
    // A partial Fisher-Yates shuffle: the first `size` places end up a uniform choice.
    let last = documents.len().saturating_sub(1);
    for place in 0..size {
        let remaining = documents.len() - place;
        let pick = place + (tideway_base::rng::random_unit() * remaining as f64) as usize;
        documents.swap(place, pick.min(last));
    }
    documents.truncate(size);
    documents
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{command_buffers, run, run_in};
    use super::*;
    use bson::doc;

    /// The `$facet` reference page's `artwork` collection, reduced to the fields it uses.
    fn artwork() -> Vec<Document> {
        [
            (1, "The Pillars of Society", 199.99, vec!["painting", "satire", "oil"]),
            (2, "Melancholy III", 280.00, vec!["woodcut", "Expressionism"]),
            (3, "Dancer", 76.04, vec!["oil", "painting", "impressionism"]),
            (4, "The Great Wave off Kanagawa", 167.72, vec!["woodblock", "ukiyo-e"]),
            (5, "The Persistence of Memory", 483.00, vec!["Surrealism", "painting", "oil"]),
            (6, "Composition VII", 385.00, vec!["oil", "painting", "abstract"]),
            (7, "The Scream", 159.00, vec!["Expressionism"]),
            (8, "Blue Flower", 118.42, vec!["abstract", "painting"]),
        ]
        .into_iter()
        .map(|(id, title, price, tags)| doc! {"_id": id, "title": title, "price": price, "tags": tags})
        .collect()
    }

    /// The reference page's example stage and its answer, on its collection without the
    /// documents' other fields (so: counted here, bucket by bucket).
    fn reference_facet() -> (Document, Vec<Document>) {
        (
            doc! {"$facet": {
                "categorizedByTags": [
                    {"$unwind": "$tags"},
                    {"$sortByCount": "$tags"},
                    {"$match": {"count": {"$gte": 4}}},
                ],
                "categorizedByPrice": [
                    {"$match": {"price": {"$exists": 1}}},
                    {"$bucket": {"groupBy": "$price", "boundaries": [0, 150, 200, 300, 400],
                                 "default": "Other", "output": {"count": {"$sum": 1}}}},
                ],
                "cheapest": [{"$sort": {"price": 1}}, {"$limit": 1}, {"$project": {"_id": 1}}],
            }},
            vec![doc! {
                "categorizedByTags": [{"_id": "painting", "count": 5}, {"_id": "oil", "count": 4}],
                "categorizedByPrice": [
                    {"_id": 0, "count": 2},
                    {"_id": 150, "count": 3},
                    {"_id": 200, "count": 1},
                    {"_id": 300, "count": 1},
                    {"_id": "Other", "count": 1},
                ],
                "cheapest": [{"_id": 3}],
            }],
        )
    }

    #[test]
    fn facets_run_each_branch_over_the_same_input() {
        let (stage, expected) = reference_facet();
        assert_eq!(run(vec![stage], artwork()).expect("runs"), expected);
    }

    fn facet_limits(buffer_bytes: usize, max_output_bytes: usize) -> StageLimits {
        StageLimits {
            facet_buffer_bytes: buffer_bytes,
            facet_max_output_bytes: max_output_bytes,
            ..StageLimits::UNBOUNDED
        }
    }

    #[test]
    fn facet_input_is_teed_in_batches_and_never_refused() {
        // mongod's TeeBuffer (tee_buffer.cpp) hands the branches batches of up to
        // internalQueryFacetBufferSizeBytes: a batch size, never an error, never spilled.
        let dir = tempfile::tempdir().unwrap();
        let (stage, expected) = reference_facet();
        for buffer_bytes in [1, 300, usize::MAX] {
            let buffers = command_buffers(
                dir.path(),
                usize::MAX,
                false,
                facet_limits(buffer_bytes, usize::MAX),
            );
            let output = run_in(vec![stage.clone()], artwork(), &buffers).expect("runs");
            assert_eq!(output, expected, "batches of {buffer_bytes} bytes");
        }
        // Input past every limit, disk use off: the $facet itself holds one small batch.
        let buffers = command_buffers(dir.path(), 100, false, facet_limits(100, usize::MAX));
        let counted = run_in(
            vec![doc! {"$facet": {"n": [{"$count": "n"}]}}],
            artwork(),
            &buffers,
        );
        assert_eq!(counted.expect("runs"), vec![doc! {"n": [{"n": 8}]}]);
        // A branch's blocking stages keep their own limits.
        let error = run_in(
            vec![doc! {"$facet": {"sorted": [{"$sort": {"price": 1}}]}}],
            artwork(),
            &buffers,
        )
        .expect_err("the branch's $sort holds more than 100 bytes");
        assert_eq!(
            error.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
        );
        assert!(error
            .errmsg
            .starts_with("Sort exceeded memory limit of 100 bytes"));
    }

    #[test]
    fn the_document_facet_builds_is_bounded_with_mongods_error() {
        // document_source_facet.cpp: past internalQueryFacetMaxOutputDocSizeBytes, 4031700
        // (jstests/aggregation/sources/facet/facet_memory_consumption.js's
        // kFacetOutputTooLargeCode).
        let dir = tempfile::tempdir().unwrap();
        let buffers = command_buffers(dir.path(), usize::MAX, false, facet_limits(1, 500));
        let error = run_in(
            vec![doc! {"$facet": {"ids": [{"$project": {"_id": 1}}], "all": []}}],
            artwork(),
            &buffers,
        )
        .expect_err("the documents are over 500 bytes");
        assert_eq!(error.code, ErrorCode::Location4031700);
        assert!(
            error
                .errmsg
                .starts_with("document constructed by $facet is ")
                && error
                    .errmsg
                    .ends_with(" bytes, which exceeds the limit of 500 bytes"),
            "{}",
            error.errmsg
        );
        let ids = run_in(
            vec![doc! {"$facet": {"ids": [{"$project": {"_id": 1}}]}}],
            artwork(),
            &buffers,
        )
        .expect("eight small documents fit");
        assert_eq!(ids[0].get_array("ids").unwrap().len(), 8);
    }

    #[test]
    fn sample_holds_its_size_not_its_input() {
        // document_source_sample.cpp: a $sort on a random key limited to `size`, under the
        // blocking sort's limit: `size` documents are held, whatever the input.
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..50)
            .map(|id| doc! {"_id": id, "pad": "p".repeat(100)})
            .collect();
        let refused = command_buffers(dir.path(), 1000, false, StageLimits::UNBOUNDED);
        let distinct = |chosen: &[Document]| {
            let mut ids: Vec<i32> = chosen.iter().map(|d| d.get_i32("_id").unwrap()).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.len()
        };
        let chosen = run_in(vec![doc! {"$sample": {"size": 3}}], input.clone(), &refused)
            .expect("three documents fit in 1000 bytes");
        assert_eq!((chosen.len(), distinct(&chosen)), (3, 3));
        // More chosen documents than the limit holds: the sort's error, or spilled runs.
        let error = run_in(
            vec![doc! {"$sample": {"size": 40}}],
            input.clone(),
            &refused,
        )
        .expect_err("forty documents do not fit");
        assert_eq!(
            error.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
        );
        assert!(error
            .errmsg
            .starts_with("Sort exceeded memory limit of 1000 bytes"));
        let spilling = command_buffers(dir.path(), 1000, true, StageLimits::UNBOUNDED);
        let chosen = run_in(vec![doc! {"$sample": {"size": 40}}], input, &spilling).unwrap();
        assert_eq!((chosen.len(), distinct(&chosen)), (40, 40));
    }

    #[test]
    fn facet_and_sample_specifications_get_mongods_codes() {
        let code = |stage: Document| run(vec![stage], vec![]).expect_err("refused").code;
        assert_eq!(code(doc! {"$facet": {}}), ErrorCode::Location40169);
        assert_eq!(code(doc! {"$facet": 1}), ErrorCode::Location40169);
        assert_eq!(code(doc! {"$facet": {"a": 1}}), ErrorCode::Location40170);
        assert_eq!(code(doc! {"$facet": {"a": [1]}}), ErrorCode::Location40171);
        assert_eq!(
            code(doc! {"$facet": {"a": [{"$facet": {"b": []}}]}}),
            ErrorCode::Location40600
        );
        assert_eq!(code(doc! {"$facet": {"$a": []}}), ErrorCode::Location16410);
        assert_eq!(code(doc! {"$sample": 1}), ErrorCode::Location28745);
        assert_eq!(
            code(doc! {"$sample": {"size": "x"}}),
            ErrorCode::Location28746
        );
        assert_eq!(
            code(doc! {"$sample": {"size": -1}}),
            ErrorCode::Location28747
        );
        assert_eq!(
            code(doc! {"$sample": {"size": 1, "x": 1}}),
            ErrorCode::Location28748
        );
        assert_eq!(code(doc! {"$sample": {}}), ErrorCode::Location28749);
    }

    #[test]
    fn samples_choose_distinct_documents() {
        let input: Vec<Document> = (0..50).map(|id| doc! {"_id": id}).collect();
        let chosen = run(vec![doc! {"$sample": {"size": 10}}], input.clone()).expect("runs");
        assert_eq!(chosen.len(), 10);
        let mut ids: Vec<i32> = chosen.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 10, "without replacement");
        let all = run(vec![doc! {"$sample": {"size": 100}}], input).expect("runs");
        assert_eq!(all.len(), 50);
    }
}
