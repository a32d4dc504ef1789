//! `$bucketAuto`: documents sorted by their `groupBy` value and cut into at most `buckets`
//! buckets of about equal size, each folded through `output`'s accumulators.
//!
//! Invariants (mongod's `DocumentSourceBucketAuto`): a missing `groupBy` value sorts as null;
//! documents with equal values sort in input order and never straddle two buckets; each bucket
//! takes `round(n / buckets)` documents (at least one), the last takes all that remain; a
//! bucket's `_id.max` is the next bucket's `_id.min` (exclusive), except the last bucket's,
//! which is its largest value (inclusive). Without `output` each bucket counts its documents.
//! With `granularity`, values must be non-negative numbers and boundaries are rounded to the
//! series (see [`super::granularity`]). `output`'s initializers see an empty document.
//!
//! Memory, as mongod's: the runner sorts the input by `groupBy` value in a buffer bounded by
//! `internalDocumentSourceBucketAutoMaxMemoryBytes` (spilling with disk use, else 292 with the
//! sorter's message), counting it; [`Buckets`] then fills the buckets in one pass over the sorted
//! stream, holding only the accumulators of the bucket being filled.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::granularity::Granularity;
use super::group::Group;
use super::DocumentStream;
use crate::collation::CollationChoice;
use crate::compare::compare_values_with;
use crate::expr::accumulator::AccumulatorState;
use crate::expr::{Expr, PipelineContext};
use crate::numeric::Number;
use crate::sort::KeyOrder;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;

/// A parsed `$bucketAuto`.
#[derive(Clone, Debug)]
pub(crate) struct BucketAuto {
    group_by: Expr,
    buckets: usize,
    /// `output` as a `$group` with a null `_id`.
    output: Group,
    granularity: Option<Granularity>,
}

fn failed(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// `buckets`: a positive number with an int32 value.
fn parse_buckets(value: &Bson) -> CommandResult<usize> {
    let Some(number) = Number::from_bson(value) else {
        return Err(failed(
            ErrorCode::Location40241,
            format!(
                "The $bucketAuto 'buckets' field must be a numeric value, but found type: {}",
                type_name(value)
            ),
        ));
    };
    let as_double = number.to_f64();
    let integral = as_double.fract() == 0.0
        && as_double >= f64::from(i32::MIN)
        && as_double <= f64::from(i32::MAX);
    if !integral {
        return Err(failed(
            ErrorCode::Location40242,
            format!(
                "The $bucketAuto 'buckets' field must be representable as a 32-bit integer, but \
                 found {}",
                value_string(&Bson::Double(as_double))
            ),
        ));
    }
    let buckets = as_double as i32;
    if buckets <= 0 {
        return Err(failed(
            ErrorCode::Location40243,
            format!("The $bucketAuto 'buckets' field must be greater than 0, but found: {buckets}"),
        ));
    }
    Ok(buckets as usize)
}

fn is_group_by(value: &Bson) -> bool {
    match value {
        Bson::String(path) => path.len() > 1 && path.starts_with('$'),
        Bson::Document(expression) => expression
            .keys()
            .next()
            .is_some_and(|key| key.starts_with('$')),
        _ => false,
    }
}

impl BucketAuto {
    pub(crate) fn parse(spec: &Bson) -> CommandResult<BucketAuto> {
        let Bson::Document(arguments) = spec else {
            return Err(failed(
                ErrorCode::Location40240,
                format!(
                    "The argument to $bucketAuto must be an object, but found type: {}",
                    type_name(spec)
                ),
            ));
        };
        let mut group_by = None;
        let mut buckets = None;
        let mut output = doc! {"_id": Bson::Null};
        let mut has_output = false;
        let mut granularity = None;
        for (name, value) in arguments {
            match name.as_str() {
                "groupBy" => {
                    if !is_group_by(value) {
                        return Err(failed(
                            ErrorCode::Location40239,
                            format!(
                                "The $bucketAuto 'groupBy' field must be defined as a $-prefixed \
                                 path or an expression object, but found: {}",
                                value_string(value)
                            ),
                        ));
                    }
                    group_by = Some(Expr::parse(value)?);
                }
                "buckets" => buckets = Some(parse_buckets(value)?),
                "output" => {
                    let Bson::Document(fields) = value else {
                        return Err(failed(
                            ErrorCode::Location40244,
                            format!(
                                "The $bucketAuto 'output' field must be an object, but found \
                                 type: {}",
                                type_name(value)
                            ),
                        ));
                    };
                    for (field, accumulator) in fields {
                        output.insert(field.clone(), accumulator.clone());
                    }
                    has_output = true;
                }
                "granularity" => {
                    let Bson::String(series) = value else {
                        return Err(failed(
                            ErrorCode::Location40261,
                            format!(
                                "The $bucketAuto 'granularity' field must be a string, but found \
                                 type: {}",
                                type_name(value)
                            ),
                        ));
                    };
                    granularity = Some(Granularity::parse(series)?);
                }
                other => {
                    return Err(failed(
                        ErrorCode::Location40245,
                        format!("Unrecognized option to $bucketAuto: {other}"),
                    ))
                }
            }
        }
        let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
            return Err(failed(
                ErrorCode::Location40246,
                "$bucketAuto requires 'groupBy' and 'buckets' to be specified",
            ));
        };
        if !has_output {
            output.insert("count", doc! {"$sum": 1});
        }
        Ok(BucketAuto {
            group_by,
            buckets,
            output: Group::parse(&Bson::Document(output))?,
            granularity,
        })
    }

    /// The `groupBy` value of `document` (null when missing), checked against the granularity.
    fn key(&self, document: &Document, context: &PipelineContext) -> CommandResult<Bson> {
        let key = self
            .group_by
            .evaluate_in(document, context)?
            .unwrap_or(Bson::Null);
        if self.granularity.is_some() {
            let Some(number) = Number::from_bson(&key) else {
                return Err(failed(
                    ErrorCode::Location40258,
                    format!(
                        "$bucketAuto can specify a 'granularity' with numeric boundaries only, but \
                         found a value with type: {}",
                        type_name(&key)
                    ),
                ));
            };
            let value = number.to_f64();
            if value.is_nan() {
                return Err(failed(
                    ErrorCode::Location40259,
                    "$bucketAuto can specify a 'granularity' with numeric boundaries only, but \
                     found a NaN",
                ));
            }
            if value < 0.0 {
                return Err(failed(
                    ErrorCode::Location40260,
                    "$bucketAuto can specify a 'granularity' with non-negative numbers only, but \
                     found a negative number",
                ));
            }
        }
        Ok(key)
    }

    /// How the runner orders this stage's buffer: by `groupBy` value under `collation` (equal
    /// values in input order, which the buffer keeps).
    pub(crate) fn key_order(&self, collation: &CollationChoice) -> KeyOrder {
        let collation = collation.clone();
        Arc::new(move |a: &[Bson], b: &[Bson]| match (a.first(), b.first()) {
            (Some(a), Some(b)) => compare_values_with(a, b, collation.as_deref()),
            _ => Ordering::Equal,
        })
    }

    /// What the runner buffers of `document`: its sort key and an entry holding the `groupBy`
    /// value beside the document (the buffer hands back entries, not keys).
    pub(crate) fn entry(
        &self,
        document: Document,
        context: &PipelineContext,
    ) -> CommandResult<(Vec<Bson>, Document)> {
        let key = self.key(&document, context)?;
        Ok((vec![key.clone()], doc! {"k": key, "d": document}))
    }

    /// The buckets over `sorted` (the buffer's entries in `groupBy` order, `count` of them),
    /// one at a time, each folded as its documents are read.
    pub(crate) fn buckets(
        &self,
        sorted: DocumentStream,
        count: u64,
        context: PipelineContext,
        deadline: Deadline,
    ) -> Buckets {
        let approximate_size = ((count as f64 / self.buckets as f64).round() as u64).max(1);
        Buckets {
            stage: self.clone(),
            input: sorted,
            context,
            deadline,
            approximate_size,
            made: 0,
            peeked: None,
            previous_max: None,
            failed: false,
        }
    }

    /// The stage over documents in memory.
    pub(crate) fn run(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let collation = context.collation.as_deref();
        let count = input.len() as u64;
        let mut keyed = Vec::with_capacity(input.len());
        for document in input {
            keyed.push(self.entry(document, context)?);
        }
        // Stable: equal values keep their input order.
        keyed.sort_by(|(a, _), (b, _)| compare_values_with(&a[0], &b[0], collation));
        let sorted: DocumentStream = Box::new(keyed.into_iter().map(|(_, entry)| Ok(entry)));
        self.buckets(sorted, count, context.clone(), Deadline::none())
            .collect()
    }
}

/// `$bucketAuto`'s output while it is read: mongod's one pass over the sorted input, knowing how
/// many documents there are. Only the bucket being filled is held (its accumulators).
pub(crate) struct Buckets {
    stage: BucketAuto,
    input: DocumentStream,
    context: PipelineContext,
    deadline: Deadline,
    /// `round(n / buckets)`, at least 1.
    approximate_size: u64,
    /// Buckets made so far.
    made: usize,
    /// The next entry, read ahead.
    peeked: Option<(Bson, Document)>,
    /// The previous bucket's maximum (the next one's minimum, with a granularity).
    previous_max: Option<Bson>,
    failed: bool,
}

impl Buckets {
    fn read(&mut self) -> CommandResult<Option<(Bson, Document)>> {
        if let Some(entry) = self.peeked.take() {
            return Ok(Some(entry));
        }
        let Some(entry) = self.input.next() else {
            return Ok(None);
        };
        self.deadline.check()?;
        let mut entry = entry?;
        let corrupt = || CommandError::internal("a buffered $bucketAuto entry is malformed");
        let key = entry.remove("k").ok_or_else(corrupt)?;
        let Some(Bson::Document(document)) = entry.remove("d") else {
            return Err(corrupt());
        };
        Ok(Some((key, document)))
    }

    fn peek(&mut self) -> CommandResult<Option<&Bson>> {
        if self.peeked.is_none() {
            self.peeked = self.read()?;
        }
        Ok(self.peeked.as_ref().map(|(key, _)| key))
    }

    fn add(&self, states: &mut [AccumulatorState], document: &Document) -> CommandResult<()> {
        // mongod evaluates `output`'s initializers against an empty document: a bucket has no
        // single group key.
        self.stage
            .output
            .accumulate(states, document, &self.context)
    }

    fn next_bucket(&mut self) -> CommandResult<Option<Document>> {
        if self.made >= self.stage.buckets {
            return Ok(None);
        }
        let Some((first, document)) = self.read()? else {
            return Ok(None);
        };
        self.made += 1;
        let collation = self.context.collation.clone();
        let collation = collation.as_deref();
        let equal = |a: &Bson, b: &Bson| compare_values_with(a, b, collation) == Ordering::Equal;
        let granularity = self.stage.granularity.clone();
        let mut min = first.clone();
        if let Some(granularity) = &granularity {
            min = match self.previous_max.take() {
                Some(max) => max,
                None => granularity.round_down(&first)?,
            };
        }
        let mut max = first;
        // mongod evaluates each initializer against an empty document: a bucket has no key.
        let mut states = self
            .stage
            .output
            .new_states(&Document::new(), &self.context)?;
        self.add(&mut states, &document)?;
        let mut size = 1;
        let last_bucket = self.made == self.stage.buckets;
        while size < self.approximate_size || last_bucket {
            let Some((key, document)) = self.read()? else {
                break;
            };
            self.add(&mut states, &document)?;
            max = key;
            size += 1;
        }
        // Equal values stay in this bucket (and, with a granularity, values below its
        // rounded-up bound).
        let bound = match &granularity {
            Some(granularity) => Some(granularity.round_up(&max)?),
            None => None,
        };
        loop {
            let joins = self.peek()?.is_some_and(|key| {
                equal(&max, key)
                    || bound.as_ref().is_some_and(|bound| {
                        compare_values_with(bound, key, collation) == Ordering::Greater
                    })
            });
            if !joins {
                break;
            }
            let Some((key, document)) = self.read()? else {
                break;
            };
            self.add(&mut states, &document)?;
            max = key;
        }
        let next_min = self.peek()?.cloned();
        let max = match (&granularity, bound) {
            (Some(granularity), Some(bound)) => match &next_min {
                // A bucket whose rounded bound is zero ends where the next one starts.
                Some(next) if Number::from_bson(&bound).is_some_and(|n| n.to_f64() == 0.0) => {
                    granularity.round_down(next)?
                }
                _ => bound,
            },
            _ => next_min.unwrap_or(max),
        };
        self.previous_max = Some(max.clone());
        let output = self
            .stage
            .output
            .output(Bson::Document(doc! {"min": min, "max": max}), states)?;
        // `$push` of `$$ROOT` nests its input: the next stage must again see bounded documents.
        super::check_built_depth(&output)?;
        Ok(Some(output))
    }
}

impl Iterator for Buckets {
    type Item = CommandResult<Document>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.next_bucket().transpose();
        self.failed = matches!(next, Some(Err(_)));
        next
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use super::super::fixtures::{command_buffers, parse_error, run, run_in, run_ok};
    use super::super::StageLimits;
    use tideway_base::error::ErrorCode;

    fn artwork() -> Vec<Document> {
        // The manual's `artwork` collection.
        vec![
            doc! {"_id": 1, "title": "The Pillars of Society", "artist": "Grosz", "year": 1926, "price": Bson::Decimal128("199.99".parse().unwrap()), "dimensions": {"height": 39, "width": 21, "units": "in"}},
            doc! {"_id": 2, "title": "Melancholy III", "artist": "Munch", "year": 1902, "price": Bson::Decimal128("280.00".parse().unwrap()), "dimensions": {"height": 49, "width": 32, "units": "in"}},
            doc! {"_id": 3, "title": "Dancer", "artist": "Miro", "year": 1925, "price": Bson::Decimal128("76.04".parse().unwrap()), "dimensions": {"height": 25, "width": 20, "units": "in"}},
            doc! {"_id": 4, "title": "The Great Wave off Kanagawa", "artist": "Hokusai", "price": Bson::Decimal128("167.30".parse().unwrap()), "dimensions": {"height": 24, "width": 36, "units": "in"}},
            doc! {"_id": 5, "title": "The Persistence of Memory", "artist": "Dali", "year": 1931, "price": Bson::Decimal128("483.00".parse().unwrap()), "dimensions": {"height": 20, "width": 24, "units": "in"}},
            doc! {"_id": 6, "title": "Composition VII", "artist": "Kandinsky", "year": 1913, "price": Bson::Decimal128("385.00".parse().unwrap()), "dimensions": {"height": 30, "width": 46, "units": "in"}},
            doc! {"_id": 7, "title": "The Scream", "artist": "Munch", "price": Bson::Decimal128("159.00".parse().unwrap()), "dimensions": {"height": 24, "width": 18, "units": "in"}},
            doc! {"_id": 8, "title": "Blue Flower", "artist": "O'Keefe", "year": 1918, "price": Bson::Decimal128("118.42".parse().unwrap()), "dimensions": {"height": 24, "width": 20, "units": "in"}},
        ]
    }

    fn dec(text: &str) -> Bson {
        Bson::Decimal128(text.parse().expect("decimal"))
    }

    /// The manual's price example: its stage and its answer.
    fn price_buckets() -> (Document, Vec<Document>) {
        (
            doc! {"$bucketAuto": {"groupBy": "$price", "buckets": 4}},
            vec![
                doc! {"_id": {"min": dec("76.04"), "max": dec("159.00")}, "count": 2},
                doc! {"_id": {"min": dec("159.00"), "max": dec("199.99")}, "count": 2},
                doc! {"_id": {"min": dec("199.99"), "max": dec("385.00")}, "count": 2},
                doc! {"_id": {"min": dec("385.00"), "max": dec("483.00")}, "count": 2},
            ],
        )
    }

    /// The manual's `output` example over years: missing years group as null and come first.
    fn year_buckets() -> (Document, Vec<Document>) {
        (
            doc! {"$bucketAuto": {
                "groupBy": "$year", "buckets": 3,
                "output": {"count": {"$sum": 1}, "years": {"$push": "$year"}}
            }},
            vec![
                doc! {"_id": {"min": Bson::Null, "max": 1913}, "count": 3, "years": [1902]},
                doc! {"_id": {"min": 1913, "max": 1926}, "count": 3, "years": [1913, 1918, 1925]},
                doc! {"_id": {"min": 1926, "max": 1931}, "count": 2, "years": [1926, 1931]},
            ],
        )
    }

    #[test]
    fn the_manuals_price_buckets() {
        let (stage, expected) = price_buckets();
        assert_eq!(run_ok(vec![stage], artwork()), expected);
    }

    #[test]
    fn the_manuals_output_and_year_example() {
        let (stage, expected) = year_buckets();
        assert_eq!(run_ok(vec![stage], artwork()), expected);
    }

    fn bucket_auto_limit(max_bytes: usize) -> StageLimits {
        StageLimits {
            bucket_auto_max_bytes: max_bytes,
            ..StageLimits::UNBOUNDED
        }
    }

    #[test]
    fn past_its_memory_limit_without_disk_use_it_fails_with_the_sorters_error() {
        // document_source_bucket_auto.cpp sorts its input through mongod's Sorter, limited by
        // internalDocumentSourceBucketAutoMaxMemoryBytes; without disk use the sorter's spill()
        // refuses with sorter.cpp's code and message.
        let dir = tempfile::tempdir().unwrap();
        let (stage, expected) = price_buckets();
        let buffers = command_buffers(dir.path(), usize::MAX, false, bucket_auto_limit(1000));
        let error = run_in(vec![stage.clone()], artwork(), &buffers).expect_err("over 1000 bytes");
        assert_eq!(
            error.code,
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
        );
        assert_eq!(
            error.errmsg,
            "Sort exceeded memory limit of 1000 bytes, but did not opt in to external sorting."
        );
        // The limit is the stage's own: a blocking sort's does not apply to it.
        let buffers = command_buffers(dir.path(), 1000, false, bucket_auto_limit(usize::MAX));
        assert_eq!(run_in(vec![stage], artwork(), &buffers).unwrap(), expected);
    }

    #[test]
    fn with_disk_use_it_spills_and_answers_as_the_manual_does() {
        let dir = tempfile::tempdir().unwrap();
        // 200 bytes: every document is a spilled run of its own (without disk use, an error).
        let refused = command_buffers(dir.path(), usize::MAX, false, bucket_auto_limit(200));
        let spilling = command_buffers(dir.path(), usize::MAX, true, bucket_auto_limit(200));
        for (stage, expected) in [price_buckets(), year_buckets()] {
            let error = run_in(vec![stage.clone()], artwork(), &refused).expect_err("spills");
            assert_eq!(error.code.code(), 292);
            assert_eq!(run_in(vec![stage], artwork(), &spilling).unwrap(), expected);
        }
        // document_source_bucket_auto_test.cpp, ShouldBeAbleToCorrectlySpillToDisk: a limit of
        // 1000 bytes, four documents with 1000-byte strings, two buckets.
        let large = "x".repeat(1000);
        let input: Vec<Document> = (0..4).map(|a| doc! {"a": a, "largeStr": &large}).collect();
        let spilling = command_buffers(dir.path(), usize::MAX, true, bucket_auto_limit(1000));
        let out = run_in(
            vec![doc! {"$bucketAuto": {"groupBy": "$a", "buckets": 2}}],
            input,
            &spilling,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 0, "max": 2}, "count": 2},
                doc! {"_id": {"min": 2, "max": 3}, "count": 2},
            ]
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "runs deleted"
        );
    }

    #[test]
    fn equal_values_stay_together_and_extra_buckets_are_not_made() {
        let input: Vec<Document> = [1, 1, 1, 1, 2, 3]
            .into_iter()
            .map(|x| doc! {"x": x})
            .collect();
        let out = run_ok(
            vec![doc! {"$bucketAuto": {"groupBy": "$x", "buckets": 3}}],
            input.clone(),
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 1, "max": 2}, "count": 4},
                doc! {"_id": {"min": 2, "max": 3}, "count": 2},
            ]
        );
        let out = run_ok(
            vec![doc! {"$bucketAuto": {"groupBy": "$x", "buckets": 10}}],
            input,
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 1, "max": 2}, "count": 4},
                doc! {"_id": {"min": 2, "max": 3}, "count": 1},
                doc! {"_id": {"min": 3, "max": 3}, "count": 1},
            ]
        );
        assert!(run_ok(
            vec![doc! {"$bucketAuto": {"groupBy": "$x", "buckets": 2}}],
            vec![]
        )
        .is_empty());
    }

    #[test]
    fn granularity_rounds_boundaries_to_the_series() {
        // POWERSOF2 over 1..=10 in 3 buckets (about 3 documents each): the first minimum rounds
        // down below 1, each maximum rounds up, and values under a rounded maximum join its
        // bucket (7 < 8).
        let input: Vec<Document> = (1..=10).map(|x| doc! {"x": x}).collect();
        let out = run_ok(
            vec![doc! {"$bucketAuto": {"groupBy": "$x", "buckets": 3, "granularity": "POWERSOF2"}}],
            input,
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 0.5, "max": 4}, "count": 3},
                doc! {"_id": {"min": 4, "max": 8}, "count": 4},
                doc! {"_id": {"min": 8, "max": 16}, "count": 3},
            ]
        );
    }

    #[test]
    fn bad_specifications_get_mongods_errors() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::Int32(1), 40240),
            (bson::bson!({"groupBy": "x", "buckets": 2}), 40239),
            (bson::bson!({"groupBy": "$x", "buckets": "2"}), 40241),
            (bson::bson!({"groupBy": "$x", "buckets": 2.5}), 40242),
            (bson::bson!({"groupBy": "$x", "buckets": 0}), 40243),
            (
                bson::bson!({"groupBy": "$x", "buckets": 2, "output": 1}),
                40244,
            ),
            (
                bson::bson!({"groupBy": "$x", "buckets": 2, "bogus": 1}),
                40245,
            ),
            (bson::bson!({"groupBy": "$x"}), 40246),
            (bson::bson!({"buckets": 2}), 40246),
            (
                bson::bson!({"groupBy": "$x", "buckets": 2, "granularity": 1}),
                40261,
            ),
            (
                bson::bson!({"groupBy": "$x", "buckets": 2, "granularity": "R7"}),
                40257,
            ),
        ];
        for (spec, code) in cases {
            let error = parse_error(vec![doc! {"$bucketAuto": spec.clone()}]);
            assert_eq!(error.code.code(), code, "{spec}: {}", error.errmsg);
        }
        for (value, code) in [
            (Bson::String("a".into()), 40258),
            (Bson::Double(f64::NAN), 40259),
            (Bson::Int32(-1), 40260),
        ] {
            let error = run(
                vec![doc! {"$bucketAuto": {"groupBy": "$x", "buckets": 2, "granularity": "R5"}}],
                vec![doc! {"x": value}],
            )
            .expect_err("bad value for a granularity");
            assert_eq!(error.code.code(), code);
        }
    }
}
