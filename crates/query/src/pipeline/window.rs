//! `$setWindowFields`: parsing the stage (`partitionBy`, `sortBy`, `output`) and every window
//! function's arguments and bounds with mongod's codes and messages, and running it: the input is
//! ordered by `{partition key, sortBy}` (as mongod's rewrite into `$sort` +
//! `$_internalSetWindowFields` does), cut into partitions, and each output field is computed for
//! each document over its window ([`spec`] parses the functions, [`functions`] computes them) and set at its (dotted) path as `$addFields`
//! would.
//!
//! Invariants:
//! - The stage is blocking: the runner collects its input in a buffer ordered by
//!   [`SetWindowFields::sort_key`] (stable, so equal keys keep their input order), and this module
//!   then holds one partition at a time; a partition over the memory limit without disk use fails
//!   with mongod's 5414201. The output is in partition-then-sort order.
//! - A missing partition value partitions as null (mongod's rule); an array one fails (14).
//!   Partition keys compare under the run's collation.
//! - Every output field is computed against the documents as they came in (no output sees
//!   another output), then all are set; a missing result removes the field.
//! - Nothing is evaluated at parse time except constants (bounds, `$shift`'s `default`, `n`,
//!   `$minMaxScaler`'s `min`/`max`).

mod functions;
mod spec;

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::fail;
use super::fields::validate_output_path;
use super::run::DocumentStream;
use crate::collation::CollationChoice;
use crate::compare::compare_values_with;
use crate::expr::{Expr, PipelineContext};
use crate::sort::{KeyOrder, SortSpec};
use spec::Function;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

const STAGE: &str = "$setWindowFields";

/// A parsed `$setWindowFields` stage.
#[derive(Clone, Debug)]
pub(crate) struct SetWindowFields {
    partition_by: Option<Expr>,
    sort_by: Option<SortSpec>,
    /// `"$<first sortBy field>"`, for range windows and the functions that read the sort value.
    sort_field: Option<Expr>,
    outputs: Vec<(Vec<String>, Function)>,
}

fn parse_error(message: impl Into<String>) -> CommandError {
    fail(ErrorCode::FailedToParse, message)
}

/// `name: value` as mongod prints a BSON element in its messages.
fn element(name: &str, value: &Bson) -> String {
    format!("{name}: {}", value_string(value))
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::idl_wrong_type(STAGE, field, type_name(value), expected)
}

impl SetWindowFields {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<SetWindowFields> {
        let Bson::Document(spec) = spec else {
            return Err(parse_error(format!(
                "the {STAGE} stage specification must be an object, found {}",
                type_name(spec)
            )));
        };
        let (mut partition_by, mut sort_by, mut output) = (None, None, None);
        for (name, value) in spec {
            match name.as_str() {
                "partitionBy" => partition_by = Some(value),
                "sortBy" => match value {
                    Bson::Document(keys) => sort_by = Some(keys),
                    other => return Err(wrong_type("sortBy", other, "object")),
                },
                "output" => match value {
                    Bson::Document(fields) => output = Some(fields),
                    other => return Err(wrong_type("output", other, "object")),
                },
                other => return Err(CommandError::idl_unknown_field(STAGE, other)),
            }
        }
        let output = output.ok_or_else(|| CommandError::idl_missing_field(STAGE, "output"))?;
        let partition_by = partition_by.map(Expr::parse).transpose()?;
        if let Some(expression) = &partition_by {
            // A constant array can never partition (mongod checks it when optimizing).
            if let Ok(Some(Bson::Array(_))) = expression.evaluate_constant(bson::DateTime::now()) {
                return Err(CommandError::type_mismatch(
                    "An expression used to partition cannot evaluate to value of type array",
                ));
            }
        }
        let sort_by = sort_by.map(SortSpec::parse).transpose()?;
        let sort_field = match sort_by.as_ref().and_then(|spec| spec.keys().next()) {
            Some((field, _)) => Some(Expr::parse(&Bson::String(format!("${field}")))?),
            None => None,
        };
        let mut outputs: Vec<(Vec<String>, Function)> = Vec::with_capacity(output.len());
        for (name, value) in output {
            let path = validate_output_path(name)?;
            let conflicts = outputs.iter().any(|(other, _)| {
                let shorter = other.len().min(path.len());
                other[..shorter] == path[..shorter]
            });
            if conflicts {
                return Err(fail(
                    ErrorCode::Location6307900,
                    format!("{STAGE} 'output' specification contains two conflicting paths"),
                ));
            }
            let Bson::Document(function) = value else {
                return Err(parse_error(format!("The field '{name}' must be an object")));
            };
            outputs.push((path, Function::parse(function, sort_by.as_ref())?));
        }
        Ok(SetWindowFields {
            partition_by,
            sort_by,
            sort_field,
            outputs,
        })
    }

    /// The partition a document belongs to: null when there is no `partitionBy` or its value is
    /// missing.
    fn partition_value(
        &self,
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Bson> {
        let Some(expression) = &self.partition_by else {
            return Ok(Bson::Null);
        };
        match expression.evaluate_in(document, context)? {
            Some(Bson::Array(_)) => Err(CommandError::type_mismatch(
                "Cannot 'partitionBy' an expression of type array",
            )),
            Some(value) => Ok(value),
            None => Ok(Bson::Null),
        }
    }

    fn sort_spec(&self, collation: &CollationChoice) -> Option<SortSpec> {
        self.sort_by
            .clone()
            .map(|spec| spec.with_collation(collation.clone()))
    }

    /// The key the stage's input is ordered by: the partition value, then the `sortBy` keys.
    pub(crate) fn sort_key(
        &self,
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Bson>> {
        let mut key = vec![self.partition_value(document, context)?];
        if let Some(spec) = self.sort_spec(&context.collation) {
            key.extend(spec.sort_key(document));
        }
        Ok(key)
    }

    /// How two [`SetWindowFields::sort_key`]s order, under `collation`.
    pub(crate) fn key_order(&self, collation: &CollationChoice) -> KeyOrder {
        let spec = self.sort_spec(collation);
        let collation = collation.clone();
        std::sync::Arc::new(move |a: &[Bson], b: &[Bson]| {
            let partition = match (a.first(), b.first()) {
                (Some(a), Some(b)) => compare_values_with(a, b, collation.as_deref()),
                _ => Ordering::Equal,
            };
            match (&spec, partition) {
                (Some(spec), Ordering::Equal) => spec.compare_keys(
                    a.get(1..).unwrap_or_default(),
                    b.get(1..).unwrap_or_default(),
                ),
                _ => partition,
            }
        })
    }

    /// Runs the stage over `documents` in memory, without a memory limit.
    pub(crate) fn run(
        &self,
        documents: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let mut keyed = Vec::with_capacity(documents.len());
        for document in documents {
            keyed.push((self.sort_key(&document, context)?, document));
        }
        let order = self.key_order(&context.collation);
        // Stable: equal keys keep their input order.
        keyed.sort_by(|a, b| order(&a.0, &b.0));
        let sorted: DocumentStream = Box::new(
            keyed
                .into_iter()
                .map(|(_, document)| Ok(document))
                .collect::<Vec<_>>()
                .into_iter(),
        );
        self.partitions(sorted, context.clone(), usize::MAX, true)
            .collect()
    }

    /// The stage's output over `sorted` (its input in [`SetWindowFields::sort_key`] order),
    /// computed one partition at a time; a partition holding more than `max_bytes` fails unless
    /// `allow_disk_use` (this server then keeps it in memory all the same).
    pub(crate) fn partitions(
        &self,
        sorted: DocumentStream,
        context: PipelineContext,
        max_bytes: usize,
        allow_disk_use: bool,
    ) -> Partitions {
        Partitions {
            stage: self.clone(),
            input: sorted,
            context,
            max_bytes,
            allow_disk_use,
            pending: None,
            output: Vec::new().into_iter(),
            failed: false,
        }
    }

    /// Computes every output field of one partition and sets it in each document.
    fn compute(&self, documents: &mut [Document], context: &PipelineContext) -> CommandResult<()> {
        let sort_spec = self.sort_spec(&context.collation);
        let partition = functions::Partition::new(
            documents,
            context,
            sort_spec.as_ref(),
            self.sort_field.as_ref(),
        )?;
        let mut results = Vec::with_capacity(self.outputs.len());
        for (_, function) in &self.outputs {
            results.push(function.compute(&partition)?);
        }
        for ((path, _), values) in self.outputs.iter().zip(results) {
            for (document, value) in documents.iter_mut().zip(values) {
                set_path(document, path, value);
            }
        }
        Ok(())
    }
}

/// Sets `value` at `path` as `$addFields` does: documents on the way are extended, arrays map over
/// their elements, anything else is replaced by a document; a missing value removes the field.
fn set_path(target: &mut Document, path: &[String], value: Option<Bson>) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        match value {
            Some(value) => {
                target.insert(first.clone(), value);
            }
            None => {
                target.remove(first);
            }
        }
        return;
    }
    match target.get_mut(first) {
        Some(Bson::Document(inner)) => set_path(inner, rest, value),
        Some(Bson::Array(elements)) => {
            for element in elements.iter_mut() {
                set_in_value(element, rest, value.clone());
            }
        }
        _ => {
            let mut inner = Document::new();
            set_path(&mut inner, rest, value);
            target.insert(first.clone(), inner);
        }
    }
}

fn set_in_value(target: &mut Bson, path: &[String], value: Option<Bson>) {
    match target {
        Bson::Document(inner) => set_path(inner, path, value),
        Bson::Array(elements) => {
            for element in elements.iter_mut() {
                set_in_value(element, path, value.clone());
            }
        }
        other => {
            let mut inner = Document::new();
            set_path(&mut inner, path, value);
            *other = Bson::Document(inner);
        }
    }
}

/// mongod's `internalDocumentSourceSetWindowFieldsMaxMemoryBytes` default.
pub(crate) const DEFAULT_MAX_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// The output of a `$setWindowFields`, partition after partition.
pub(crate) struct Partitions {
    stage: SetWindowFields,
    input: DocumentStream,
    context: PipelineContext,
    max_bytes: usize,
    allow_disk_use: bool,
    /// The first document of the next partition, read ahead, with its partition value.
    pending: Option<(Bson, Document)>,
    output: std::vec::IntoIter<Document>,
    failed: bool,
}

impl Partitions {
    /// Reads the next partition whole and computes it; `false` at the end of the input.
    fn next_partition(&mut self) -> CommandResult<bool> {
        let (key, first) = match self.pending.take() {
            Some(pending) => pending,
            None => match self.input.next() {
                None => return Ok(false),
                Some(document) => {
                    let document = document?;
                    (
                        self.stage.partition_value(&document, &self.context)?,
                        document,
                    )
                }
            },
        };
        let collation = self.context.collation.clone();
        let mut bytes = tideway_base::bsonutil::encoded_size(&first);
        let mut documents = vec![first];
        for document in self.input.by_ref() {
            let document = document?;
            let next_key = self.stage.partition_value(&document, &self.context)?;
            if compare_values_with(&next_key, &key, collation.as_deref()) != Ordering::Equal {
                self.pending = Some((next_key, document));
                break;
            }
            bytes = bytes.saturating_add(tideway_base::bsonutil::encoded_size(&document));
            if bytes > self.max_bytes && !self.allow_disk_use {
                return Err(fail(
                    ErrorCode::Location5414201,
                    format!(
                        "Exceeded memory limit in DocumentSourceSetWindowFields, used {bytes} \
                         bytes but max allowed is {}",
                        self.max_bytes
                    ),
                ));
            }
            documents.push(document);
        }
        self.stage.compute(&mut documents, &self.context)?;
        self.output = documents.into_iter();
        Ok(true)
    }
}

impl Iterator for Partitions {
    type Item = CommandResult<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(document) = self.output.next() {
                return Some(Ok(document));
            }
            match self.next_partition() {
                Ok(true) => continue,
                Ok(false) => return None,
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
