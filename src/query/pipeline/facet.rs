//! `$facet` (several sub-pipelines over the same input, answered as one document
//! `{name: [output...], ...}`) and `$sample` (that many input documents, chosen at random).
//!
//! Invariants: both are blocking stages that see every input document before answering (the
//! runner collects them in a buffer bounded like a `$sort`'s); each `$facet` branch runs whole,
//! its leading `$match` included, over its own copy of the input, under the run's collation and
//! `$$NOW`; a branch may not hold a stage that reads or writes collections by itself
//! (`$facet`, `$out`, `$merge`, `$collStats`, ...: mongod's 40600). `$sample` keeps the chosen
//! documents in input order of choice, without replacement.

use bson::{Bson, Document};

use super::{Pipeline, PipelineContext};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::display::{element_string, type_name};

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
                            crate::query::display::value_string(stage)
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
    pub(crate) fn branches(&self) -> &[(String, Pipeline)] {
        &self.branches
    }

    /// Whether a branch reads another collection (`$lookup`, `$graphLookup`, `$unionWith`):
    /// the run then hands the stage to its caller, which can read.
    pub(crate) fn reads_other_collections(&self) -> bool {
        self.branches
            .iter()
            .any(|(_, pipeline)| pipeline.reads_other_collections())
    }

    /// Runs every branch over `documents`; the one output document.
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
        Facet::assemble(results)
    }

    /// The stage's output document from each branch's results, nested no deeper than a
    /// document may be.
    pub(crate) fn assemble(results: Vec<(&str, Vec<Document>)>) -> CommandResult<Document> {
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
        let number = crate::query::numeric::Number::from_bson(value).ok_or_else(|| {
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
        let pick = place + (crate::query::filter::random_unit() * remaining as f64) as usize;
        documents.swap(place, pick.min(last));
    }
    documents.truncate(size);
    documents
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::run;
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

    #[test]
    fn facets_run_each_branch_over_the_same_input() {
        let output = run(
            vec![doc! {"$facet": {
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
            }}],
            artwork(),
        )
        .expect("runs");
        // As the reference page's example answers, on its collection without the documents'
        // other fields (so: counted here, bucket by bucket).
        assert_eq!(
            output,
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
            }]
        );
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
