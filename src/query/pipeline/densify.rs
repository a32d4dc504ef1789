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

use std::cmp::Ordering;
use std::collections::HashMap;

use bson::{Bson, Document};

use super::expr::{add_numbers, number_bson, TimeUnit};
use super::fields::validate_output_path;
use super::lookup::comparison_key;
use super::PipelineContext;
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::collation::Collation;
use crate::query::compare::compare_values_with;
use crate::query::display::type_name;
use crate::query::numeric::Number;
use crate::query::path;

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
pub struct Densify {
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

    fn sort_key(&self, document: &Document) -> Vec<Bson> {
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
        let mut run = Generation {
            densify: self,
            output: Vec::with_capacity(keyed.len()),
            generated: 0,
            partitions: Vec::new(),
            slots: HashMap::new(),
        };
        let mut global_min: Option<Bson> = None;
        let mut global_max: Option<Bson> = None;
        for (_, document) in keyed {
            let Some(value) = self.value(&document)? else {
                run.output.push(document);
                continue;
            };
            let partition = self.partition_of(&document)?;
            let slot = run.partition_slot(&partition, collation);
            let last = run.partitions[slot].1.clone();
            match &self.bounds {
                Bounds::Full => {
                    let start = global_min.get_or_insert_with(|| value.clone()).clone();
                    global_max = Some(value.clone());
                    // A partition's sequence starts at the input's first value.
                    run.fill(slot, last, Some(&start), &value, &partition)?;
                }
                Bounds::Partition => {
                    if last.is_none() {
                        run.partitions[slot].1 = Some(value.clone());
                    } else {
                        run.fill(slot, last, None, &value, &partition)?;
                    }
                }
                Bounds::Explicit(bounds) => {
                    let (lower, upper) = &**bounds;
                    if compare(&value, lower) != Ordering::Less {
                        let limit = if compare(&value, upper) == Ordering::Less {
                            &value
                        } else {
                            upper
                        };
                        run.fill(slot, last, Some(lower), limit, &partition)?;
                    }
                }
            }
            run.output.push(document);
        }
        // What each partition still lacks after its last document.
        let (start, end, end_included) = match (&self.bounds, global_min, global_max) {
            (Bounds::Full, Some(min), Some(max)) if !self.partition_fields.is_empty() => {
                (Some(min), max, true)
            }
            (Bounds::Explicit(bounds), _, _) => (Some(bounds.0.clone()), bounds.1.clone(), false),
            _ => return Ok(run.output),
        };
        if run.partitions.is_empty() && self.partition_fields.is_empty() {
            // Explicit bounds over no documents: the whole range.
            run.partitions.push((Document::new(), None));
        }
        for slot in 0..run.partitions.len() {
            let (partition, last) = run.partitions[slot].clone();
            run.fill_to_end(slot, last, start.as_ref(), &end, end_included, &partition)?;
        }
        Ok(run.output)
    }
}

fn compare_keys(a: &[Bson], b: &[Bson], collation: Option<&Collation>) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(a, b)| compare_values_with(a, b, collation))
        .find(|order| order.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// One run's output and, per partition, the last sequence value it reached.
struct Generation<'d> {
    densify: &'d Densify,
    output: Vec<Document>,
    generated: usize,
    /// Each partition's fields and last sequence value, in first-seen order.
    partitions: Vec<(Document, Option<Bson>)>,
    /// Partition positions by comparison key.
    slots: HashMap<Vec<u8>, usize>,
}

impl Generation<'_> {
    fn partition_slot(&mut self, partition: &Document, collation: Option<&Collation>) -> usize {
        let key = comparison_key(&Bson::Document(partition.clone()), collation);
        let next = self.partitions.len();
        let slot = *self.slots.entry(key).or_insert(next);
        if slot == next {
            self.partitions.push((partition.clone(), None));
        }
        slot
    }

    fn emit(&mut self, partition: &Document, value: Bson) -> CommandResult<()> {
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
        let mut document = partition.clone();
        path::set_path(&mut document, &self.densify.field, value)?;
        self.output.push(document);
        Ok(())
    }

    /// The first sequence value after `last` (or `start` when the partition has none yet).
    fn first_after(&self, last: Option<Bson>, start: Option<&Bson>) -> Option<Bson> {
        match (last, start) {
            (Some(last), Some(start)) => {
                let next = self.densify.next(&last);
                Some(if compare(&next, start) == Ordering::Less {
                    start.clone()
                } else {
                    next
                })
            }
            (Some(last), None) => Some(self.densify.next(&last)),
            (None, start) => start.cloned(),
        }
    }

    /// Generates the sequence values from after the partition's last one up to (not
    /// including) `value`; a document at the next sequence value moves the sequence on.
    fn fill(
        &mut self,
        slot: usize,
        last: Option<Bson>,
        start: Option<&Bson>,
        value: &Bson,
        partition: &Document,
    ) -> CommandResult<()> {
        let Some(mut next) = self.first_after(last, start) else {
            return Ok(());
        };
        while compare(&next, value) == Ordering::Less {
            self.emit(partition, next.clone())?;
            self.partitions[slot].1 = Some(next.clone());
            next = self.densify.next(&next);
        }
        if compare(&next, value) == Ordering::Equal {
            self.partitions[slot].1 = Some(value.clone());
        }
        Ok(())
    }

    fn fill_to_end(
        &mut self,
        slot: usize,
        last: Option<Bson>,
        start: Option<&Bson>,
        end: &Bson,
        end_included: bool,
        partition: &Document,
    ) -> CommandResult<()> {
        let Some(mut next) = self.first_after(last, start) else {
            return Ok(());
        };
        loop {
            let order = compare(&next, end);
            if order == Ordering::Greater || (order == Ordering::Equal && !end_included) {
                return Ok(());
            }
            self.emit(partition, next.clone())?;
            self.partitions[slot].1 = Some(next.clone());
            next = self.densify.next(&next);
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use super::super::fixtures::{parse_error, run, run_ok};

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
