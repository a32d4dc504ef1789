//! The stages that read another collection: `$lookup` (by equality on `localField`/
//! `foreignField`, through a `let` + `pipeline` sub-pipeline, or both: parsing, the query the
//! caller runs on the foreign collection for a batch of input documents, and the join) and
//! `$unionWith` (parsing).
//!
//! Invariants:
//! - The runner hands a `$lookup`'s input to the caller in batches; the caller (which can read
//!   storage) fetches the foreign documents matching [`Lookup::foreign_keys`] of a batch (or
//!   all of them), through the planner and with expired documents hidden, and hands back
//!   [`Lookup::join`]. One read serves a whole batch.
//! - Matching is the query language's: a local value (each element of a local array; null for a
//!   missing field) equals a foreign value (or an element of a foreign array) under the run's
//!   collation, and null matches null and missing. Joined documents keep the order the read
//!   returned them in.
//! - A sub-pipeline sees the command's variables and its `let` values, evaluated against each
//!   input document (so it is parsed again per document; without `let`, once); it runs in memory
//!   over the foreign documents (all of them, or the equal ones in the concise form), or, when it
//!   reads other collections itself, as a nested run the caller serves
//!   ([`Lookup::nested_reads`]).

use std::borrow::Cow;
use std::collections::HashMap;

use bson::{doc, Bson, Document};

use super::Pipeline;
use crate::collation::Collation;
use crate::expr::command_variables::{with_command_variables, CommandVariables};
use crate::expr::{validate_variable_name, Expr, PipelineContext};
use crate::path;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// Most distinct local values the foreign read asks for by `$in`.
const MAX_IN_VALUES: usize = 1024;

/// The order-preserving key of a value (equal values, such as `1` and `1.0`, share it).
fn encoded(value: &Bson) -> Vec<u8> {
    let mut key = Vec::new();
    crate::keycodec::encode_value(&mut key, value, crate::keycodec::Direction::Ascending);
    key
}

/// A parsed `$lookup`: by equality (`localField`/`foreignField`), through a sub-pipeline
/// (`let` + `pipeline`), or both (the pipeline runs over the equal documents).
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The foreign collection, in the pipeline's database.
    pub from: String,
    /// `localField` and `foreignField`, when given.
    equality: Option<(String, String)>,
    sub: Option<SubPipeline>,
    as_field: Vec<String>,
}

/// A `$lookup`'s `let` variables (evaluated against each input document) and `pipeline`.
#[derive(Clone, Debug)]
struct SubPipeline {
    lets: Vec<(String, Expr)>,
    stages: Vec<Document>,
    /// The pipeline parsed once, when no `let` variable can change it.
    fixed: Option<Pipeline>,
    /// The command variables the stage was parsed under (a sub-pipeline sees them too).
    outer: Option<CommandVariables>,
    /// Whether the pipeline reads other collections itself.
    reads: bool,
}

fn failed(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::FailedToParse, message)
}

/// Stages a `$lookup` sub-pipeline may not hold.
const NOT_IN_LOOKUP: &[&str] = &["$out", "$merge"];

impl Lookup {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Lookup> {
        let Bson::Document(arguments) = spec else {
            return Err(failed(format!(
                "the $lookup stage specification must be an object, but found {}",
                type_name(spec)
            )));
        };
        let mut fields: HashMap<&str, &str> = HashMap::new();
        let mut lets: Vec<(String, Expr)> = Vec::new();
        let mut stages: Option<Vec<Document>> = None;
        for (name, value) in arguments {
            match (name.as_str(), value) {
                ("let", Bson::Document(variables)) => {
                    for (variable, expression) in variables {
                        validate_variable_name(variable)?;
                        lets.push((variable.clone(), Expr::parse(expression)?));
                    }
                }
                ("pipeline", Bson::Array(items)) => {
                    let mut documents = Vec::with_capacity(items.len());
                    for item in items {
                        let Bson::Document(stage) = item else {
                            return Err(failed(format!(
                                "'pipeline' option must be specified as an array of objects, \
                                 found {}",
                                type_name(item)
                            )));
                        };
                        if let Some(forbidden) = stage
                            .keys()
                            .next()
                            .filter(|stage_name| NOT_IN_LOOKUP.contains(&stage_name.as_str()))
                        {
                            return Err(CommandError::new(
                                ErrorCode::Location51047,
                                format!(
                                    "{forbidden} is not allowed within a $lookup's sub-pipeline"
                                ),
                            ));
                        }
                        documents.push(stage.clone());
                    }
                    stages = Some(documents);
                }
                ("let" | "pipeline", other) => {
                    return Err(failed(format!(
                        "$lookup argument '{name}' must be {}, found {}",
                        if name == "let" {
                            "an object"
                        } else {
                            "an array"
                        },
                        type_name(other)
                    )))
                }
                ("from" | "as" | "localField" | "foreignField", Bson::String(text)) => {
                    fields.insert(name.as_str(), text.as_str());
                }
                ("from" | "as" | "localField" | "foreignField", other) => {
                    return Err(failed(format!(
                        "$lookup argument '{name}: {}' must be a string, is type {}",
                        tideway_base::display::value_string(other),
                        type_name(other)
                    )))
                }
                (other, _) => return Err(failed(format!("unknown argument to $lookup: {other}"))),
            }
        }
        let as_field = fields
            .get("as")
            .ok_or_else(|| failed("must specify 'as' field for a $lookup"))?;
        let equality = match (fields.get("localField"), fields.get("foreignField")) {
            (Some(local), Some(foreign)) => Some(((*local).to_string(), (*foreign).to_string())),
            (None, None) if stages.is_some() => None,
            (None, None) => {
                return Err(failed(
                    "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' \
                     to be specified",
                ))
            }
            _ => {
                return Err(failed(
                    "$lookup requires both or neither of 'localField' and 'foreignField'",
                ))
            }
        };
        if stages.is_none() && !lets.is_empty() {
            return Err(failed("$lookup with 'let' must also specify 'pipeline'"));
        }
        let from = fields
            .get("from")
            .ok_or_else(|| failed("must specify 'from' field for a $lookup"))?;
        let mut paths = vec![*as_field];
        if let Some((local, foreign)) = &equality {
            paths.extend([local.as_str(), foreign.as_str()]);
        }
        for path in paths {
            if path.is_empty()
                || path
                    .split('.')
                    .any(|part| part.is_empty() || part.starts_with('$'))
            {
                return Err(CommandError::new(
                    ErrorCode::Location16410,
                    format!("FieldPath field names may not start with '$' or be empty: {path}"),
                ));
            }
        }
        let sub = match stages {
            None => None,
            Some(stages) => {
                let outer = CommandVariables::in_scope();
                // Parsed once now: with its `let` names bound (to nothing yet), which checks it;
                // kept when no `let` can change it.
                let names: Vec<(String, Option<Bson>)> =
                    lets.iter().map(|(name, _)| (name.clone(), None)).collect();
                let scope = outer
                    .clone()
                    .unwrap_or_else(|| CommandVariables::at(bson::DateTime::now()))
                    .with_values(names);
                let parsed = with_command_variables(&scope, || Pipeline::parse(&stages))?;
                if parsed.out().is_some() || parsed.source().is_some() {
                    return Err(CommandError::new(
                        ErrorCode::NotImplemented,
                        "tideway's $lookup sub-pipelines take no source or output stage",
                    ));
                }
                Some(SubPipeline {
                    reads: parsed.reads_other_collections(),
                    fixed: lets.is_empty().then_some(parsed),
                    lets,
                    stages,
                    outer,
                })
            }
        };
        Ok(Lookup {
            from: (*from).to_string(),
            equality,
            sub,
            as_field: path::split_path(as_field),
        })
    }

    /// The values `document` is joined on: each value at `localField` (array elements and the
    /// array itself), null when there is none.
    fn local_values(local_field: &str, document: &Document) -> Vec<Bson> {
        let values: Vec<Bson> = path::lookup_values(document, local_field)
            .into_iter()
            .cloned()
            .collect();
        if values.is_empty() {
            vec![Bson::Null]
        } else {
            values
        }
    }

    /// The distinct local values of `documents` a foreign document must equal to join one of
    /// them: the keys of an `{foreignField: {$in: keys}}` read ([`Lookup::foreign_filter`]), or
    /// `None` when every foreign document may join (no equality, or more than
    /// [`MAX_IN_VALUES`] distinct values, where one read of the collection beats that many
    /// index probes).
    pub fn foreign_keys(&self, documents: &[Document]) -> Option<Vec<Bson>> {
        let (local_field, _) = self.equality.as_ref()?;
        let mut seen = std::collections::HashSet::new();
        let mut values: Vec<Bson> = Vec::new();
        for document in documents {
            for value in Lookup::local_values(local_field, document) {
                if seen.insert(encoded(&value)) {
                    if values.len() == MAX_IN_VALUES {
                        return None;
                    }
                    values.push(value);
                }
            }
        }
        Some(values)
    }

    /// The filter on the foreign collection that finds every document joining with the local
    /// `keys` ([`Lookup::foreign_keys`]; a superset: [`Lookup::join`] matches exactly, and a
    /// regex value in `$in` also matches strings by pattern).
    pub fn foreign_filter(&self, keys: Vec<Bson>) -> Document {
        match &self.equality {
            Some((_, foreign_field)) => doc! {foreign_field.as_str(): {"$in": keys}},
            None => Document::new(),
        }
    }

    /// Each of `documents` with `as` set to the foreign documents it matches among
    /// `candidates` (equal on the fields, and then through the sub-pipeline with the document's
    /// `let` values).
    pub fn join(
        &self,
        documents: Vec<Document>,
        candidates: &Candidates,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let mut joined = Vec::with_capacity(documents.len());
        for mut document in documents {
            let matched = candidates.of(&document);
            let results = match &self.sub {
                None => matched,
                Some(_) => self
                    .sub_pipeline(&document, context)?
                    .run_whole(matched, context)?,
            };
            self.set_results(&mut document, results)?;
            joined.push(document);
        }
        Ok(joined)
    }

    /// Whether the sub-pipeline reads other collections itself: the caller, which can read,
    /// then runs it for each document ([`Lookup::candidates`], [`Lookup::sub_pipeline`],
    /// [`Lookup::set_results`]).
    pub fn nested_reads(&self) -> bool {
        self.sub.as_ref().is_some_and(|sub| sub.reads)
    }

    /// What each input document is matched against: the foreign documents equal on the
    /// fields, or all of them.
    pub fn candidates(&self, foreign: Vec<Document>, context: &PipelineContext) -> Candidates {
        let collation = context.collation.clone();
        Candidates {
            equal: self.equality.as_ref().map(|(local_field, foreign_field)| {
                (
                    local_field.clone(),
                    ForeignIndex::new(&foreign, foreign_field, collation.as_deref()),
                )
            }),
            foreign,
            collation,
        }
    }

    /// The sub-pipeline as `document` sees it (its `let` values bound).
    pub fn sub_pipeline(
        &self,
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Cow<'_, Pipeline>> {
        let Some(sub) = &self.sub else {
            return Err(CommandError::internal("$lookup without a sub-pipeline"));
        };
        sub.pipeline_for(document, context)
    }

    /// Sets `as` in `document` to `results`.
    pub fn set_results(
        &self,
        document: &mut Document,
        results: Vec<Document>,
    ) -> CommandResult<()> {
        let array = Bson::Array(results.into_iter().map(Bson::Document).collect());
        path::set_path(document, &self.as_field, array)
    }
}

/// The foreign documents of one `$lookup` read, indexed by `foreignField` when it has one.
pub struct Candidates {
    /// The local field and the foreign documents by their `foreignField` values.
    equal: Option<(String, ForeignIndex)>,
    foreign: Vec<Document>,
    collation: crate::collation::CollationChoice,
}

impl Candidates {
    /// The foreign documents `document` joins with, in read order.
    pub fn of(&self, document: &Document) -> Vec<Document> {
        match &self.equal {
            Some((local_field, index)) => index.matching(
                &self.foreign,
                &Lookup::local_values(local_field, document),
                self.collation.as_deref(),
            ),
            None => self.foreign.clone(),
        }
    }
}

impl SubPipeline {
    /// The pipeline for the input `document`: parsed once without `let`, else again with the
    /// document's `let` values as constants.
    fn pipeline_for(
        &self,
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Cow<'_, Pipeline>> {
        if let Some(pipeline) = &self.fixed {
            return Ok(Cow::Borrowed(pipeline));
        }
        let mut values = Vec::with_capacity(self.lets.len());
        for (name, expression) in &self.lets {
            values.push((name.clone(), expression.evaluate_in(document, context)?));
        }
        let scope = self
            .outer
            .clone()
            .unwrap_or_else(|| CommandVariables::at(context.now))
            .with_values(values);
        with_command_variables(&scope, || Pipeline::parse(&self.stages)).map(Cow::Owned)
    }
}

/// Foreign documents by the comparison key of each value at `foreignField` (a missing field as
/// null).
struct ForeignIndex {
    by_value: HashMap<Vec<u8>, Vec<usize>>,
}

/// The key under which `value` equals exactly the values equal to it under `collation`.
pub(super) fn comparison_key(value: &Bson, collation: Option<&Collation>) -> Vec<u8> {
    match collation {
        Some(collation) => encoded(&collation.index_value(value)),
        None => encoded(value),
    }
}

impl ForeignIndex {
    fn new(foreign: &[Document], foreign_field: &str, collation: Option<&Collation>) -> Self {
        let null_key = comparison_key(&Bson::Null, collation);
        let mut by_value: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
        for (index, document) in foreign.iter().enumerate() {
            let mut keys: Vec<Vec<u8>> = path::lookup_values(document, foreign_field)
                .into_iter()
                .map(|value| comparison_key(value, collation))
                .collect();
            if keys.is_empty() {
                keys.push(null_key.clone());
            }
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                by_value.entry(key).or_default().push(index);
            }
        }
        ForeignIndex { by_value }
    }

    /// The foreign documents equal to any of `values`, in read order.
    fn matching(
        &self,
        foreign: &[Document],
        values: &[Bson],
        collation: Option<&Collation>,
    ) -> Vec<Document> {
        let mut matches: Vec<usize> = values
            .iter()
            .flat_map(|value| {
                self.by_value
                    .get(&comparison_key(value, collation))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        matches.sort_unstable();
        matches.dedup();
        matches
            .into_iter()
            .map(|index| foreign[index].clone())
            .collect()
    }
}

/// A parsed `$unionWith`: the documents of `coll` (through `pipeline`, if any) after the
/// pipeline's own.
#[derive(Clone, Debug)]
pub struct UnionWith {
    /// The other collection, in the pipeline's database.
    pub coll: String,
    /// Runs over the other collection's documents before they are added.
    pub pipeline: Option<super::Pipeline>,
}

impl UnionWith {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<UnionWith> {
        let (coll, stages) = match spec {
            Bson::String(coll) => (coll.clone(), None),
            Bson::Document(arguments) => {
                let mut coll = None;
                let mut stages = None;
                for (name, value) in arguments {
                    match (name.as_str(), value) {
                        ("coll", Bson::String(text)) => coll = Some(text.clone()),
                        ("pipeline", Bson::Array(items)) => stages = Some(items),
                        ("coll", other) | ("pipeline", other) => {
                            return Err(CommandError::type_mismatch(format!(
                                "BSON field '$unionWith.{name}' is the wrong type '{}', expected \
                                 type '{}'",
                                type_name(other),
                                if name == "coll" { "string" } else { "array" }
                            )))
                        }
                        (other, _) => {
                            return Err(CommandError::new(
                                ErrorCode::Location40415,
                                format!("BSON field '$unionWith.{other}' is an unknown field."),
                            ))
                        }
                    }
                }
                let coll = coll.ok_or_else(|| {
                    CommandError::new(
                        ErrorCode::NotImplemented,
                        "tideway needs 'coll' in $unionWith ($documents as its source is not \
                         supported)",
                    )
                })?;
                (coll, stages)
            }
            other => {
                return Err(failed(format!(
                    "the $unionWith stage specification must be an object or string, but found \
                     {}",
                    type_name(other)
                )))
            }
        };
        let pipeline = match stages {
            None => None,
            Some(items) => {
                let mut documents = Vec::with_capacity(items.len());
                for item in items {
                    let Bson::Document(stage) = item else {
                        return Err(CommandError::type_mismatch(format!(
                            "Each element of the 'pipeline' array must be an object, found {}",
                            type_name(item)
                        )));
                    };
                    documents.push(stage.clone());
                }
                let pipeline = super::Pipeline::parse(&documents)?;
                if let Some(write) = pipeline.out() {
                    return Err(failed(format!(
                        "{} is not allowed within a $unionWith's sub-pipeline",
                        write.stage()
                    )));
                }
                Some(pipeline)
            }
        };
        Ok(UnionWith { coll, pipeline })
    }
}
