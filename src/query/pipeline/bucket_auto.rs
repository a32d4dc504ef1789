//! `$bucketAuto`: documents sorted by their `groupBy` value and cut into at most `buckets`
//! buckets of about equal size, each folded through `output`'s accumulators.
//!
//! Invariants (mongod's `DocumentSourceBucketAuto`): a missing `groupBy` value sorts as null;
//! documents with equal values sort in input order and never straddle two buckets; each bucket
//! takes `round(n / buckets)` documents (at least one), the last takes all that remain; a
//! bucket's `_id.max` is the next bucket's `_id.min` (exclusive), except the last bucket's,
//! which is its largest value (inclusive). Without `output` each bucket counts its documents.
//! With `granularity`, values must be non-negative numbers and boundaries are rounded to the
//! series (see [`super::granularity`]).

use std::cmp::Ordering;

use bson::{doc, Bson, Document};

use super::expr::Expr;
use super::granularity::Granularity;
use super::group::Group;
use super::PipelineContext;
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::query::compare::compare_values_with;
use crate::query::display::{type_name, value_string};
use crate::query::numeric::Number;

/// A parsed `$bucketAuto`.
#[derive(Clone, Debug)]
pub struct BucketAuto {
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

/// One bucket while it fills: its bounds and the documents it holds.
struct Bucket<'d> {
    min: Bson,
    max: Bson,
    documents: Vec<&'d Document>,
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

    pub(crate) fn run(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let collation = context.collation.as_deref();
        let mut keyed = Vec::with_capacity(input.len());
        for document in input {
            keyed.push((self.key(&document, context)?, document));
        }
        // Stable: equal values keep their input order.
        keyed.sort_by(|(a, _), (b, _)| compare_values_with(a, b, collation));
        let equal = |a: &Bson, b: &Bson| compare_values_with(a, b, collation) == Ordering::Equal;
        let approximate_size = ((keyed.len() as f64 / self.buckets as f64).round() as usize).max(1);
        let mut output = Vec::new();
        let mut entries = keyed.iter().peekable();
        let mut previous_max: Option<Bson> = None;
        for number in 1..=self.buckets {
            let Some((first, document)) = entries.next() else {
                break;
            };
            let mut bucket = Bucket {
                min: first.clone(),
                max: first.clone(),
                documents: vec![document],
            };
            if let Some(granularity) = &self.granularity {
                bucket.min = match previous_max.take() {
                    Some(max) => max,
                    None => granularity.round_down(first)?,
                };
            }
            let last_bucket = number == self.buckets;
            while bucket.documents.len() < approximate_size || last_bucket {
                let Some((key, document)) = entries.next() else {
                    break;
                };
                bucket.max = key.clone();
                bucket.documents.push(document);
            }
            // Equal values stay in this bucket (and, with a granularity, values below its
            // rounded-up bound).
            let bound = match &self.granularity {
                Some(granularity) => Some(granularity.round_up(&bucket.max)?),
                None => None,
            };
            while let Some((key, document)) = entries.next_if(|(key, _)| {
                equal(&bucket.max, key)
                    || bound.as_ref().is_some_and(|bound| {
                        compare_values_with(bound, key, collation) == Ordering::Greater
                    })
            }) {
                bucket.max = key.clone();
                bucket.documents.push(document);
            }
            let next_min = entries.peek().map(|(key, _)| key);
            bucket.max = match (&self.granularity, bound) {
                (Some(granularity), Some(bound)) => match next_min {
                    // A bucket whose rounded bound is zero ends where the next one starts.
                    Some(next) if Number::from_bson(&bound).is_some_and(|n| n.to_f64() == 0.0) => {
                        granularity.round_down(next)?
                    }
                    _ => bound,
                },
                _ => next_min.cloned().unwrap_or(bucket.max),
            };
            previous_max = Some(bucket.max.clone());
            output.push(self.fold(bucket, context)?);
        }
        Ok(output)
    }

    fn fold(&self, bucket: Bucket<'_>, context: &PipelineContext) -> CommandResult<Document> {
        // mongod evaluates each initializer against an empty document: a bucket has no key.
        let mut states = self.output.new_states(&Document::new(), context)?;
        let key = Bson::Document(doc! {"min": bucket.min, "max": bucket.max});
        for document in bucket.documents {
            self.output.accumulate(&mut states, document, context)?;
        }
        self.output.output(key, states)
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use super::super::fixtures::{parse_error, run, run_ok};

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

    #[test]
    fn the_manuals_price_buckets() {
        let out = run_ok(
            vec![doc! {"$bucketAuto": {"groupBy": "$price", "buckets": 4}}],
            artwork(),
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": dec("76.04"), "max": dec("159.00")}, "count": 2},
                doc! {"_id": {"min": dec("159.00"), "max": dec("199.99")}, "count": 2},
                doc! {"_id": {"min": dec("199.99"), "max": dec("385.00")}, "count": 2},
                doc! {"_id": {"min": dec("385.00"), "max": dec("483.00")}, "count": 2},
            ]
        );
    }

    #[test]
    fn the_manuals_output_and_year_example() {
        // Missing years group as null and come first.
        let out = run_ok(
            vec![doc! {"$bucketAuto": {
                "groupBy": "$year", "buckets": 3,
                "output": {"count": {"$sum": 1}, "years": {"$push": "$year"}}
            }}],
            artwork(),
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": Bson::Null, "max": 1913}, "count": 3, "years": [1902]},
                doc! {"_id": {"min": 1913, "max": 1926}, "count": 3, "years": [1913, 1918, 1925]},
                doc! {"_id": {"min": 1926, "max": 1931}, "count": 2, "years": [1926, 1931]},
            ]
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
