//! The stages that read another collection: `$lookup` by equality (`from`, `localField`,
//! `foreignField`, `as`: parsing, the query the caller runs on the foreign collection for a
//! batch of input documents, and the join) and `$unionWith` (parsing).
//!
//! Invariants:
//! - The runner pauses at a `$lookup` with every input document of the stage collected; the
//!   caller (which can read storage) fetches the foreign documents matching
//!   [`Lookup::foreign_filter`] of them, through the planner and with expired documents hidden,
//!   and resumes with [`Lookup::join`]. One read serves the whole batch.
//! - Matching is the query language's: a local value (each element of a local array; null for a
//!   missing field) equals a foreign value (or an element of a foreign array) under the run's
//!   collation, and null matches null and missing. Joined documents keep the order the read
//!   returned them in.

use std::collections::HashMap;

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::collation::Collation;
use crate::query::display::type_name;
use crate::query::path;

/// Most distinct local values the foreign read asks for by `$in`.
const MAX_IN_VALUES: usize = 1024;

/// The order-preserving key of a value (equal values, such as `1` and `1.0`, share it).
fn encoded(value: &Bson) -> Vec<u8> {
    let mut key = Vec::new();
    crate::storage::keycodec::encode_value(
        &mut key,
        value,
        crate::storage::keycodec::Direction::Ascending,
    );
    key
}

/// A parsed equality `$lookup`.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The foreign collection, in the pipeline's database.
    pub from: String,
    local_field: String,
    foreign_field: String,
    as_field: Vec<String>,
}

fn failed(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::FailedToParse, message)
}

impl Lookup {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Lookup> {
        let Bson::Document(arguments) = spec else {
            return Err(failed(format!(
                "the $lookup stage specification must be an object, but found {}",
                type_name(spec)
            )));
        };
        let mut fields: HashMap<&str, &str> = HashMap::new();
        for (name, value) in arguments {
            match name.as_str() {
                "pipeline" | "let" => {
                    return Err(CommandError::new(
                        ErrorCode::NotImplemented,
                        "tideway supports $lookup with localField and foreignField only (not \
                         'pipeline' or 'let')",
                    ))
                }
                "from" | "as" | "localField" | "foreignField" => {
                    let Bson::String(text) = value else {
                        return Err(failed(format!(
                            "$lookup argument '{name}: {}' must be a string, is type {}",
                            crate::query::display::value_string(value),
                            type_name(value)
                        )));
                    };
                    fields.insert(name.as_str(), text.as_str());
                }
                other => return Err(failed(format!("unknown argument to $lookup: {other}"))),
            }
        }
        let as_field = fields
            .get("as")
            .ok_or_else(|| failed("must specify 'as' field for a $lookup"))?;
        let (Some(local_field), Some(foreign_field)) =
            (fields.get("localField"), fields.get("foreignField"))
        else {
            return Err(failed(
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be \
                 specified",
            ));
        };
        let from = fields
            .get("from")
            .ok_or_else(|| failed("must specify 'from' field for a $lookup"))?;
        for path in [*as_field, *local_field, *foreign_field] {
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
        Ok(Lookup {
            from: (*from).to_string(),
            local_field: (*local_field).to_string(),
            foreign_field: (*foreign_field).to_string(),
            as_field: path::split_path(as_field),
        })
    }

    /// The values `document` is joined on: each value at `localField` (array elements and the
    /// array itself), null when there is none.
    fn local_values(&self, document: &Document) -> Vec<Bson> {
        let values: Vec<Bson> = path::lookup_values(document, &self.local_field)
            .into_iter()
            .cloned()
            .collect();
        if values.is_empty() {
            vec![Bson::Null]
        } else {
            values
        }
    }

    /// The filter on the foreign collection that finds every document `documents` join with
    /// (a superset: [`Lookup::join`] matches exactly): `{foreignField: {$in: [values]}}`, or
    /// every document when there are more than [`MAX_IN_VALUES`] distinct values, where one
    /// read of the collection beats that many index probes and an `$in` that large.
    pub fn foreign_filter(&self, documents: &[Document]) -> Document {
        let mut seen = std::collections::HashSet::new();
        let mut values: Vec<Bson> = Vec::new();
        for document in documents {
            for value in self.local_values(document) {
                if seen.insert(encoded(&value)) {
                    if values.len() == MAX_IN_VALUES {
                        return Document::new();
                    }
                    values.push(value);
                }
            }
        }
        // A regex value in `$in` also matches strings by pattern: a superset too.
        doc! {self.foreign_field.as_str(): {"$in": values}}
    }

    /// Each of `documents` with `as` set to the `foreign` documents it matches.
    pub fn join(
        &self,
        documents: Vec<Document>,
        foreign: &[Document],
        collation: Option<&Collation>,
    ) -> CommandResult<Vec<Document>> {
        // Foreign documents by the comparison key of each value at `foreignField`.
        let key = |value: &Bson| -> Vec<u8> {
            match collation {
                Some(collation) => encoded(&collation.index_value(value)),
                None => encoded(value),
            }
        };
        let null_key = key(&Bson::Null);
        let mut by_value: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
        for (index, document) in foreign.iter().enumerate() {
            let values = path::lookup_values(document, &self.foreign_field);
            let mut keys: Vec<Vec<u8>> = values.into_iter().map(&key).collect();
            if keys.is_empty() {
                keys.push(null_key.clone());
            }
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                by_value.entry(key).or_default().push(index);
            }
        }
        let mut joined = Vec::with_capacity(documents.len());
        for mut document in documents {
            let mut matches: Vec<usize> = self
                .local_values(&document)
                .iter()
                .flat_map(|value| by_value.get(&key(value)).cloned().unwrap_or_default())
                .collect();
            matches.sort_unstable();
            matches.dedup();
            let array = Bson::Array(
                matches
                    .into_iter()
                    .map(|index| Bson::Document(foreign[index].clone()))
                    .collect(),
            );
            path::set_path(&mut document, &self.as_field, array)?;
            joined.push(document);
        }
        Ok(joined)
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
                if pipeline.out().is_some() {
                    return Err(failed(
                        "$out is not allowed within a $unionWith's sub-pipeline",
                    ));
                }
                Some(pipeline)
            }
        };
        Ok(UnionWith { coll, pipeline })
    }
}
