//! `$densify`: documents added where a numeric or date field skips values of a step sequence,
//! per partition (`partitionByFields`), over the documents' own span (`"full"`,
//! `"partition"`) or explicit `[lower, upper)` bounds.
//!
//! Invariants (mongod's `DocumentSourceInternalDensify`, run after the `$sort` it desugars
//! into, on `{partitionByFields…, field}`, or `{field}` for `"full"`):
//! - The sequence starts at the lower bound (explicit), the first value of the partition
//!   (`"partition"`) or of the whole input (`"full"`), and steps by `step` (in `unit`s for
//!   dates, by mongod's UTC date arithmetic, each step from the previous value).
//! - A generated document holds only the partition fields and the field; one is made for each
//!   sequence value missing between a partition's documents, never at or past the upper bound
//!   (`"partition"`: the partition's last value; `"full"`: the input's last value, included
//!   when on the sequence; explicit: `upper`, excluded). A document off the sequence does not
//!   move it; documents outside explicit bounds pass through.
//! - Documents whose field is null or missing pass through untouched; other non-numbers and
//!   non-dates are 5733201, a type that disagrees with `unit` 6053600. At most
//!   `internalQueryMaxAllowedDensifyDocs` (500,000) documents are generated (5897900).
//! - Output follows the sort; for `"full"` with partitions and for explicit bounds the
//!   documents a partition still needs after its last document come at the end, partition by
//!   partition in first-seen order (mongod leaves that order unspecified).
//!
//! Memory, as mongod's: the sort is a `$sort` (the runner's sort buffer: its limit, spilling,
//! its 292); [`Densified`] then reads the sorted input once, generating documents one at a time,
//! and holds only the table of partitions (fields and last value), bounded by
//! `internalDocumentSourceDensifyMaxMemoryBytes` (6007200; it does not spill).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use bson::{Bson, Document};

use super::fields::validate_output_path;
use super::lookup::comparison_key;
use super::DocumentStream;
use crate::collation::{Collation, CollationChoice};
use crate::compare::compare_values_with;
use crate::expr::{add_numbers, number_bson, PipelineContext, TimeUnit};
use crate::numeric::Number;
use crate::path;
use crate::sort::KeyOrder;
use tideway_base::bsonutil::encoded_size;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// mongod's `internalQueryMaxAllowedDensifyDocs`.
const MAX_GENERATED: usize = 500_000;

#[derive(Clone, Debug)]
enum Bounds {
    Full,
    Partition,
    Explicit(Box<(Bson, Bson)>),
}

/// A parsed `$densify`.
#[derive(Clone, Debug)]
pub(crate) struct Densify {
    field: Vec<String>,
    partition_fields: Vec<Vec<String>>,
    step: Bson,
    unit: Option<TimeUnit>,
    bounds: Bounds,
}

fn failed(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::idl_wrong_type("$densify", field, type_name(value), expected)
}

fn missing(field: &str) -> CommandError {
    CommandError::idl_missing_field("$densify", field)
}

fn unknown(field: &str) -> CommandError {
    CommandError::idl_unknown_field("$densify", field)
}

fn compare(a: &Bson, b: &Bson) -> Ordering {
    compare_values_with(a, b, None)
}

fn parse_bounds(bounds: &Bson, step: &Bson, unit: Option<TimeUnit>) -> CommandResult<Bounds> {
    match bounds {
        Bson::String(text) if text == "full" => Ok(Bounds::Full),
        Bson::String(text) if text == "partition" => Ok(Bounds::Partition),
        Bson::String(_) => Err(failed(
            ErrorCode::Location5946802,
            "Bounds string must either be 'full' or 'partition'",
        )),
        Bson::Array(pair) => {
            let [lower, upper] = pair.as_slice() else {
                return Err(failed(
                    ErrorCode::Location5733403,
                    "A bounding array in a range statement must have exactly two elements",
                ));
            };
            if compare(lower, upper) == Ordering::Greater {
                return Err(failed(
                    ErrorCode::Location5733402,
                    "A bounding array must be an ascending array of either two dates or two \
                     numbers",
                ));
            }
            match lower {
                _ if Number::from_bson(lower).is_some() => {
                    if unit.is_some() {
                        return Err(failed(
                            ErrorCode::Location5733409,
                            "Numeric bounds may not have unit parameter",
                        ));
                    }
                    if Number::from_bson(upper).is_none() {
                        return Err(failed(
                            ErrorCode::Location5733406,
                            "A bounding array must contain either both dates or both numeric types",
                        ));
                    }
                    if lower.element_type() != upper.element_type()
                        || lower.element_type() != step.element_type()
                    {
                        return Err(failed(
                            ErrorCode::Location5876900,
                            "Upper bound, lower bound, and step must all have the same type",
                        ));
                    }
                }
                Bson::DateTime(_) => {
                    if !matches!(upper, Bson::DateTime(_)) {
                        return Err(failed(
                            ErrorCode::Location5733405,
                            "A bounding array must contain either both dates or both numeric types",
                        ));
                    }
                    if unit.is_none() {
                        return Err(failed(
                            ErrorCode::Location5733410,
                            "A bounding array of dates must specify a unit",
                        ));
                    }
                }
                _ => {
                    return Err(failed(
                        ErrorCode::Location5946800,
                        "Explicit bounds must be numeric or dates",
                    ))
                }
            }
            Ok(Bounds::Explicit(Box::new((lower.clone(), upper.clone()))))
        }
        _ => Err(failed(
            ErrorCode::Location5733404,
            "The bounds in a range statement must be the string 'full', 'partition', or an \
             ascending array of two numbers or two dates",
        )),
    }
}

impl Densify {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Densify> {
        let Bson::Document(arguments) = spec else {
            return Err(failed(
                ErrorCode::FailedToParse,
                format!(
                    "The $densify stage specification must be an object, found {}",
                    type_name(spec)
                ),
            ));
        };
        let mut field = None;
        let mut partition_fields = Vec::new();
        let mut range = None;
        for (name, value) in arguments {
            match (name.as_str(), value) {
                ("field", Bson::String(text)) => field = Some(validate_output_path(text)?),
                ("field", other) => return Err(wrong_type("field", other, "string")),
                ("partitionByFields", Bson::Array(fields)) => {
                    for (position, partition) in fields.iter().enumerate() {
                        let Bson::String(partition) = partition else {
                            return Err(wrong_type(
                                &format!("partitionByFields.{position}"),
                                partition,
                                "string",
                            ));
                        };
                        partition_fields.push(validate_output_path(partition)?);
                    }
                }
                ("partitionByFields", other) => {
                    return Err(wrong_type("partitionByFields", other, "array"))
                }
                ("range", Bson::Document(range_spec)) => range = Some(range_spec),
                ("range", other) => return Err(wrong_type("range", other, "object")),
                (other, _) => return Err(unknown(other)),
            }
        }
        let field = field.ok_or_else(|| missing("field"))?;
        let range = range.ok_or_else(|| missing("range"))?;
        let (mut step, mut unit, mut bounds) = (None, None, None);
        for (name, value) in range {
            match (name.as_str(), value) {
                ("step", _) => step = Some(value),
                ("unit", Bson::String(text)) => unit = Some(text),
                ("unit", other) => return Err(wrong_type("range.unit", other, "string")),
                ("bounds", _) => bounds = Some(value),
                (other, _) => return Err(unknown(&format!("range.{other}"))),
            }
        }
        let step = step.ok_or_else(|| missing("range.step"))?;
        let bounds = bounds.ok_or_else(|| missing("range.bounds"))?;
        let positive = Number::from_bson(step).is_some_and(|number| {
            compare(step, &Bson::Int32(0)) == Ordering::Greater && !number.to_f64().is_nan()
        });
        if !positive {
            return Err(failed(
                ErrorCode::Location5733401,
                "The step parameter in a range statement must be a strictly positive numeric value",
            ));
        }
        let unit = match unit {
            None => None,
            Some(unit) => {
                let integral = Number::from_bson(step).is_some_and(|number| {
                    let value = number.to_f64();
                    value.fract() == 0.0 && value.abs() < 9.2e18
                });
                if !integral {
                    return Err(failed(
                        ErrorCode::Location6586400,
                        "The step parameter in a range statement must be a whole number when \
                         densifying a date range",
                    ));
                }
                Some(TimeUnit::from_name(unit).ok_or_else(|| {
                    failed(
                        ErrorCode::FailedToParse,
                        format!("unknown time unit value: {unit}"),
                    )
                })?)
            }
        };
        let bounds = parse_bounds(bounds, step, unit)?;
        if matches!(bounds, Bounds::Partition) && partition_fields.is_empty() {
            return Err(failed(
                ErrorCode::Location5733408,
                "One cannot specify the bounds as 'partition' without specifying a non-empty \
                 array of partitionByFields. You may have meant to specify 'full' bounds.",
            ));
        }
        Ok(Densify {
            field,
            partition_fields,
            step: step.clone(),
            unit,
            bounds,
        })
    }

    /// The value after `value` in the sequence.
    fn next(&self, value: &Bson) -> Bson {
        match (value, self.unit) {
            (Bson::DateTime(date), Some(unit)) => {
                let amount = Number::from_bson(&self.step).map_or(0, |step| step.to_f64() as i64);
                Bson::DateTime(bson::DateTime::from_millis(
                    unit.add_utc(date.timestamp_millis(), amount),
                ))
            }
            _ => match (Number::from_bson(value), Number::from_bson(&self.step)) {
                (Some(value), Some(step)) => number_bson(add_numbers(value, step)),
                _ => value.clone(),
            },
        }
    }

    /// The field's value in `document`, checked; `None` when null or missing.
    fn value(&self, document: &Document) -> CommandResult<Option<Bson>> {
        let value = match path::get_path(document, &self.field) {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(None),
            Some(value) => value,
        };
        match (value, self.unit) {
            (Bson::DateTime(_), Some(_)) => Ok(Some(value.clone())),
            (_, None) if Number::from_bson(value).is_some() => Ok(Some(value.clone())),
            (Bson::DateTime(_), None) => Err(failed(
                ErrorCode::Location6053600,
                "Encountered date densify value in collection when step does not have a date \
                 unit.",
            )),
            (_, Some(_)) if Number::from_bson(value).is_some() => Err(failed(
                ErrorCode::Location6053600,
                "Encountered numeric densify value in collection when step has a date unit.",
            )),
            _ => Err(failed(
                ErrorCode::Location5733201,
                "Densify field type must be numeric or a date",
            )),
        }
    }

    /// The partition fields of `document`, as a generated document starts.
    fn partition_of(&self, document: &Document) -> CommandResult<Document> {
        let mut partition = Document::new();
        for field in &self.partition_fields {
            if let Some(value) = path::get_path(document, field) {
                path::set_path(&mut partition, field, value.clone())?;
            }
        }
        Ok(partition)
    }

    /// The key of the `$sort` mongod puts before the stage: the partition fields (not for
    /// `"full"`), then the field.
    pub(crate) fn sort_key(&self, document: &Document) -> Vec<Bson> {
        let partitions = match self.bounds {
            Bounds::Full => &[][..],
            _ => &self.partition_fields[..],
        };
        partitions
            .iter()
            .chain(std::iter::once(&self.field))
            .map(|field| {
                path::get_path(document, field)
                    .cloned()
                    .unwrap_or(Bson::Null)
            })
            .collect()
    }

    /// The order of [`Densify::sort_key`]s under `collation` (ascending on every part).
    pub(crate) fn key_order(&self, collation: &CollationChoice) -> KeyOrder {
        let collation = collation.clone();
        Arc::new(move |a: &[Bson], b: &[Bson]| compare_keys(a, b, collation.as_deref()))
    }

    /// The stage's output over `sorted` (its input in [`Densify::sort_key`] order), made as it
    /// is read; the table of partitions may hold `max_table_bytes`.
    pub(crate) fn densified(
        &self,
        sorted: DocumentStream,
        context: PipelineContext,
        max_table_bytes: usize,
    ) -> Densified {
        Densified {
            densify: self.clone(),
            input: sorted,
            collation: context.collation,
            max_table_bytes,
            table_bytes: 0,
            partitions: Vec::new(),
            slots: HashMap::new(),
            generated: 0,
            global_min: None,
            global_max: None,
            filling: None,
            held: None,
            ending: None,
            done: false,
        }
    }

    /// The stage over documents in memory.
    pub(crate) fn run(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let collation = context.collation.as_deref();
        let mut keyed: Vec<(Vec<Bson>, Document)> = input
            .into_iter()
            .map(|document| (self.sort_key(&document), document))
            .collect();
        keyed.sort_by(|(a, _), (b, _)| compare_keys(a, b, collation));
        let sorted: DocumentStream = Box::new(keyed.into_iter().map(|(_, document)| Ok(document)));
        self.densified(sorted, context.clone(), usize::MAX)
            .collect()
    }
}

fn compare_keys(a: &[Bson], b: &[Bson], collation: Option<&Collation>) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(a, b)| compare_values_with(a, b, collation))
        .find(|order| order.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// mongod's `$densify` error when its table of partitions outgrows
/// `internalDocumentSourceDensifyMaxMemoryBytes`.
fn table_too_large(max_bytes: usize) -> CommandError {
    failed(
        ErrorCode::Location6007200,
        format!("$densify exceeded memory limit of {max_bytes}"),
    )
}

/// Bytes a partition's last value is taken to hold in the table (a number or a date).
const TABLE_VALUE_BYTES: usize = 32;

/// Documents being generated for one partition: sequence values from `next` up to `limit`
/// (included when `inclusive`). With `settle`, a sequence that lands exactly on `limit` makes it
/// the partition's last value (a document there moves the sequence on).
struct Fill {
    slot: usize,
    next: Bson,
    limit: Bson,
    inclusive: bool,
    settle: bool,
}

/// After the input: what partitions still need up to `end`, partition by partition.
struct Ending {
    start: Option<Bson>,
    end: Bson,
    included: bool,
    slot: usize,
}

/// `$densify`'s output while it is read: the sorted input with the generated documents in place,
/// one at a time. It holds one input document, one partition's generation state, and the table
/// of partitions (their fields and last sequence values, bounded by `max_table_bytes`).
pub(crate) struct Densified {
    densify: Densify,
    input: DocumentStream,
    collation: CollationChoice,
    max_table_bytes: usize,
    table_bytes: usize,
    /// Each partition's fields and last sequence value, in first-seen order.
    partitions: Vec<(Document, Option<Bson>)>,
    /// Partition positions by comparison key.
    slots: HashMap<Vec<u8>, usize>,
    generated: usize,
    /// The first and last values of the whole input (`"full"`).
    global_min: Option<Bson>,
    global_max: Option<Bson>,
    filling: Option<Fill>,
    /// The input document that follows the documents being generated.
    held: Option<Document>,
    ending: Option<Ending>,
    /// Finished, or failed.
    done: bool,
}

impl Densified {
    fn partition_slot(&mut self, partition: &Document) -> CommandResult<usize> {
        let key = comparison_key(
            &Bson::Document(partition.clone()),
            self.collation.as_deref(),
        );
        if let Some(slot) = self.slots.get(&key) {
            return Ok(*slot);
        }
        self.table_bytes = self
            .table_bytes
            .saturating_add(key.len() + encoded_size(partition) + TABLE_VALUE_BYTES);
        if self.table_bytes > self.max_table_bytes {
            return Err(table_too_large(self.max_table_bytes));
        }
        let slot = self.partitions.len();
        self.slots.insert(key, slot);
        self.partitions.push((partition.clone(), None));
        Ok(slot)
    }

    /// The generation for `slot` from the first sequence value after `last` (or `start` when
    /// the partition has none yet) up to `limit`.
    fn fill(
        &self,
        slot: usize,
        start: Option<&Bson>,
        limit: Bson,
        inclusive: bool,
        settle: bool,
    ) -> Option<Fill> {
        let next = match (self.partitions[slot].1.as_ref(), start) {
            (Some(last), Some(start)) => {
                let next = self.densify.next(last);
                if compare(&next, start) == Ordering::Less {
                    start.clone()
                } else {
                    next
                }
            }
            (Some(last), None) => self.densify.next(last),
            (None, start) => start?.clone(),
        };
        Some(Fill {
            slot,
            next,
            limit,
            inclusive,
            settle,
        })
    }

    /// Takes one input document: what it needs generated before it, then itself.
    fn take(&mut self, document: Document) -> CommandResult<()> {
        let Some(value) = self.densify.value(&document)? else {
            // Null or missing: passes through untouched.
            self.held = Some(document);
            return Ok(());
        };
        let partition = self.densify.partition_of(&document)?;
        let slot = self.partition_slot(&partition)?;
        self.filling = match &self.densify.bounds {
            Bounds::Full => {
                let start = self.global_min.get_or_insert_with(|| value.clone()).clone();
                self.global_max = Some(value.clone());
                // A partition's sequence starts at the input's first value.
                self.fill(slot, Some(&start), value, false, true)
            }
            Bounds::Partition if self.partitions[slot].1.is_none() => {
                self.partitions[slot].1 = Some(value);
                None
            }
            Bounds::Partition => self.fill(slot, None, value, false, true),
            Bounds::Explicit(bounds) => {
                let (lower, upper) = &**bounds;
                if compare(&value, lower) == Ordering::Less {
                    None
                } else {
                    let limit = if compare(&value, upper) == Ordering::Less {
                        value
                    } else {
                        upper.clone()
                    };
                    self.fill(slot, Some(lower), limit, false, true)
                }
            }
        };
        self.held = Some(document);
        Ok(())
    }

    /// What each partition still lacks after its last document, or `None`.
    fn ending(&mut self) -> Option<Ending> {
        let (start, end, included) =
            match (&self.densify.bounds, &self.global_min, &self.global_max) {
                (Bounds::Full, Some(min), Some(max))
                    if !self.densify.partition_fields.is_empty() =>
                {
                    (Some(min.clone()), max.clone(), true)
                }
                (Bounds::Explicit(bounds), _, _) => {
                    (Some(bounds.0.clone()), bounds.1.clone(), false)
                }
                _ => return None,
            };
        if self.partitions.is_empty() && self.densify.partition_fields.is_empty() {
            // Explicit bounds over no documents: the whole range.
            self.partitions.push((Document::new(), None));
        }
        Some(Ending {
            start,
            end,
            included,
            slot: 0,
        })
    }

    fn emit(&mut self, slot: usize, value: Bson) -> CommandResult<Document> {
        self.generated += 1;
        if self.generated > MAX_GENERATED {
            return Err(failed(
                ErrorCode::Location5897900,
                format!(
                    "Generated {} documents in $densify, which is over the limit of \
                     {MAX_GENERATED}. Increase the 'internalQueryMaxAllowedDensifyDocs' \
                     parameter to allow more generated documents",
                    self.generated
                ),
            ));
        }
        let mut document = self.partitions[slot].0.clone();
        path::set_path(&mut document, &self.densify.field, value)?;
        Ok(document)
    }

    fn next_document(&mut self) -> CommandResult<Option<Document>> {
        loop {
            if let Some(mut fill) = self.filling.take() {
                let order = compare(&fill.next, &fill.limit);
                if order == Ordering::Less || (order == Ordering::Equal && fill.inclusive) {
                    let value = fill.next;
                    fill.next = self.densify.next(&value);
                    self.partitions[fill.slot].1 = Some(value.clone());
                    let slot = fill.slot;
                    self.filling = Some(fill);
                    return self.emit(slot, value).map(Some);
                }
                if fill.settle && order == Ordering::Equal {
                    self.partitions[fill.slot].1 = Some(fill.limit);
                }
                continue;
            }
            if let Some(document) = self.held.take() {
                return Ok(Some(document));
            }
            if let Some(mut ending) = self.ending.take() {
                if ending.slot >= self.partitions.len() {
                    return Ok(None);
                }
                let slot = ending.slot;
                ending.slot += 1;
                self.filling = self.fill(
                    slot,
                    ending.start.as_ref(),
                    ending.end.clone(),
                    ending.included,
                    false,
                );
                self.ending = Some(ending);
                continue;
            }
            match self.input.next() {
                Some(document) => self.take(document?)?,
                None => match self.ending() {
                    Some(ending) => self.ending = Some(ending),
                    None => return Ok(None),
                },
            }
        }
    }
}

impl Iterator for Densified {
    type Item = CommandResult<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_document().transpose();
        self.done = !matches!(next, Some(Ok(_)));
        next
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use super::super::fixtures::{command_buffers, parse_error, run, run_in, run_ok};
    use super::super::StageLimits;
    use tideway_base::error::ErrorCode;

    fn values(documents: &[Document], field: &str) -> Vec<Bson> {
        documents
            .iter()
            .map(|document| document.get(field).cloned().unwrap_or(Bson::Null))
            .collect()
    }

    #[test]
    fn the_manuals_weather_example_fills_hours() {
        // $densify reference page: readings every four hours densified to every hour.
        let date = |hour: i64| {
            Bson::DateTime(bson::DateTime::from_millis(
                1_621_296_000_000 + hour * 3_600_000,
            ))
        };
        let input = vec![
            doc! {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": date(0), "temp": 12},
            doc! {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": date(4), "temp": 11},
            doc! {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": date(8), "temp": 11},
            doc! {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": date(12), "temp": 12},
        ];
        let out = run_ok(
            vec![
                doc! {"$densify": {"field": "timestamp", "range": {"step": 1, "unit": "hour", "bounds": [date(0), date(8)]}}},
            ],
            input,
        );
        let stamps = values(&out, "timestamp");
        let expected: Vec<Bson> = (0..=8).map(date).chain([date(12)]).collect();
        assert_eq!(stamps, expected);
        // Generated documents hold only the field.
        assert_eq!(out[1], doc! {"timestamp": date(1)});
    }

    #[test]
    fn the_manuals_coffee_partitions() {
        // $densify reference page: altitudes per variety, step 200.
        let coffee = vec![
            doc! {"altitude": 600, "variety": "Arabica Typica", "score": 68.3},
            doc! {"altitude": 750, "variety": "Arabica Typica", "score": 69.5},
            doc! {"altitude": 950, "variety": "Arabica Typica", "score": 70.5},
            doc! {"altitude": 1250, "variety": "Gesha", "score": 88.15},
            doc! {"altitude": 1700, "variety": "Gesha", "score": 85.5},
            doc! {"altitude": 1600, "variety": "Arabica Typica", "score": 74.8},
        ];
        // "full": every variety spans 600..1700 on the 600 + 200k sequence.
        let out = run_ok(
            vec![
                doc! {"$densify": {"field": "altitude", "partitionByFields": ["variety"], "range": {"bounds": "full", "step": 200}}},
                doc! {"$sort": {"variety": 1, "altitude": 1}},
            ],
            coffee.clone(),
        );
        let typica: Vec<Bson> = out
            .iter()
            .filter(|d| d.get_str("variety") == Ok("Arabica Typica"))
            .map(|d| d.get("altitude").cloned().unwrap())
            .collect();
        let ints = |list: &[i32]| list.iter().map(|v| Bson::Int32(*v)).collect::<Vec<_>>();
        assert_eq!(typica, ints(&[600, 750, 800, 950, 1000, 1200, 1400, 1600]));
        let gesha: Vec<Bson> = out
            .iter()
            .filter(|d| d.get_str("variety") == Ok("Gesha"))
            .map(|d| d.get("altitude").cloned().unwrap())
            .collect();
        assert_eq!(gesha, ints(&[600, 800, 1000, 1200, 1250, 1400, 1600, 1700]));
        // "partition": each variety spans its own values.
        let out = run_ok(
            vec![
                doc! {"$densify": {"field": "altitude", "partitionByFields": ["variety"], "range": {"bounds": "partition", "step": 200}}},
            ],
            coffee,
        );
        assert_eq!(
            values(&out, "altitude"),
            ints(&[600, 750, 800, 950, 1000, 1200, 1400, 1600, 1250, 1450, 1650, 1700])
        );
    }

    #[test]
    fn the_partition_table_is_bounded_with_mongods_error() {
        // jstests/aggregation/sources/densify/memory_limit.js: with
        // internalDocumentSourceDensifyMaxMemoryBytes at 1000, ten partitions named by
        // 100-comma strings fail with 6007200 (DocumentSourceInternalDensify's message) ...
        let dir = tempfile::tempdir().unwrap();
        let limits = StageLimits {
            densify_max_bytes: 1000,
            ..StageLimits::UNBOUNDED
        };
        let buffers = command_buffers(dir.path(), usize::MAX, false, limits);
        let long = ",".repeat(100);
        let stage = doc! {"$densify": {"field": "val", "partitionByFields": ["part"], "range": {"step": 1, "bounds": "partition"}}};
        let input: Vec<Document> = (0..10)
            .map(|i| doc! {"_id": i, "val": i, "part": format!("{long}{i}")})
            .collect();
        let error = run_in(vec![stage.clone()], input, &buffers).expect_err("over 1000 bytes");
        assert_eq!(error.code, ErrorCode::Location6007200);
        assert_eq!(error.errmsg, "$densify exceeded memory limit of 1000");
        // ... and succeed when no document needs densifying (none has the field).
        let input: Vec<Document> = (0..10)
            .map(|i| doc! {"_id": i, "otherVal": i, "part": format!("{long}{i}")})
            .collect();
        assert_eq!(run_in(vec![stage], input, &buffers).unwrap().len(), 10);
    }

    #[test]
    fn the_sort_before_densify_is_a_sort_with_its_limit() {
        // mongod desugars $densify into a $sort and $_internalDensify
        // (document_source_densify.cpp): the sort's limit, error and spilling apply.
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..20)
            .map(|i| doc! {"x": i * 3, "pad": "p".repeat(100)})
            .collect();
        let stage = doc! {"$densify": {"field": "x", "range": {"step": 1, "bounds": "full"}}};
        let refused = command_buffers(dir.path(), 1000, false, StageLimits::UNBOUNDED);
        let error = run_in(vec![stage.clone()], input.clone(), &refused).expect_err("sorts");
        assert_eq!(
            error.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
        );
        assert!(error
            .errmsg
            .starts_with("Sort exceeded memory limit of 1000 bytes"));
        let spilling = command_buffers(dir.path(), 1000, true, StageLimits::UNBOUNDED);
        let out = run_in(vec![stage.clone()], input.clone(), &spilling).unwrap();
        assert_eq!(out, run_ok(vec![stage], input));
        assert_eq!(
            values(&out, "x"),
            (0..58).map(Bson::Int32).collect::<Vec<_>>()
        );
    }

    #[test]
    fn nulls_pass_and_explicit_bounds_fill_empty_input() {
        let out = run_ok(
            vec![doc! {"$densify": {"field": "x", "range": {"step": 1, "bounds": [0, 3]}}}],
            vec![doc! {"y": 1}, doc! {"x": Bson::Null}],
        );
        assert_eq!(
            out,
            vec![
                doc! {"y": 1},
                doc! {"x": Bson::Null},
                doc! {"x": 0},
                doc! {"x": 1},
                doc! {"x": 2}
            ]
        );
        let out = run_ok(
            vec![doc! {"$densify": {"field": "x", "range": {"step": 2, "bounds": [0, 7]}}}],
            vec![doc! {"x": 3}, doc! {"x": 9}, doc! {"x": -1}],
        );
        assert_eq!(
            values(&out, "x"),
            [-1, 0, 2, 3, 4, 6, 9].map(Bson::Int32).to_vec()
        );
    }

    #[test]
    fn bad_specifications_and_values_get_mongods_errors() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::Int32(1), 9),
            (bson::bson!({"range": {"step": 1, "bounds": "full"}}), 40414),
            (bson::bson!({"field": "x"}), 40414),
            (bson::bson!({"field": "x", "range": {"step": 1}}), 40414),
            (
                bson::bson!({"field": "x", "range": {"step": 0, "bounds": "full"}}),
                5733401,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1.5, "unit": "day", "bounds": "full"}}),
                6586400,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": [1]}}),
                5733403,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": [2, 1]}}),
                5733402,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "unit": "day", "bounds": [1, 2]}}),
                5733409,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": [1, 2.5]}}),
                5876900,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": ["a", "b"]}}),
                5946800,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": "some"}}),
                5946802,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": 1}}),
                5733404,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": "partition"}}),
                5733408,
            ),
            (
                bson::bson!({"field": "x", "range": {"step": 1, "bounds": "full"}, "bogus": 1}),
                40415,
            ),
            (
                bson::bson!({"field": "$x", "range": {"step": 1, "bounds": "full"}}),
                16410,
            ),
        ];
        for (spec, code) in cases {
            let error = parse_error(vec![doc! {"$densify": spec.clone()}]);
            assert_eq!(error.code.code(), code, "{spec}: {}", error.errmsg);
        }
        let stage = doc! {"$densify": {"field": "x", "range": {"step": 1, "bounds": "full"}}};
        let error = run(vec![stage.clone()], vec![doc! {"x": "a"}]).expect_err("5733201");
        assert_eq!(error.code.code(), 5733201);
        let error = run(vec![stage], vec![doc! {"x": bson::DateTime::now()}]).expect_err("6053600");
        assert_eq!(error.code.code(), 6053600);
    }
}
