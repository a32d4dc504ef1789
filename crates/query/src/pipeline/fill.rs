//! `$fill`: validated as mongod validates it and rewritten, as mongod rewrites it, into a
//! `$setWindowFields` with `$locf`/`$linearFill` for the `method` outputs (partitioned by
//! `partitionBy` or `partitionByFields`, ordered by `sortBy`) followed by an `$addFields` of
//! `{$ifNull: ["$field", value]}` for the `value` outputs.
//!
//! Invariants: `output` holds at least one field (6050203), each an object with exactly one of
//! `method` (`"locf"` or `"linear"`, 6050202) and `value` (6050201); at most one of
//! `partitionBy` and `partitionByFields` (6050204). Unknown and missing arguments and wrong types
//! get mongod's IDL errors (40415, 40414, 14).

use bson::{doc, Bson, Document};

use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

fn failed(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::idl_wrong_type("$fill", field, type_name(value), expected)
}

fn unknown_field(field: &str) -> CommandError {
    CommandError::idl_unknown_field("$fill", field)
}

/// The stages a `$fill` specification stands for, in order.
pub(crate) fn rewrite(spec: &Bson) -> CommandResult<Vec<(&'static str, Bson)>> {
    let Bson::Document(arguments) = spec else {
        return Err(failed(
            ErrorCode::FailedToParse,
            format!(
                "The $fill stage specification must be an object, found {}",
                type_name(spec)
            ),
        ));
    };
    let mut window = Document::new();
    let mut partition_by = None;
    let mut partition_by_fields = None;
    let mut output = None;
    for (name, value) in arguments {
        match (name.as_str(), value) {
            ("sortBy", Bson::Document(sort)) => {
                window.insert("sortBy", sort.clone());
            }
            ("sortBy", other) => return Err(wrong_type("sortBy", other, "object")),
            ("partitionBy", Bson::String(_) | Bson::Document(_)) => {
                partition_by = Some(value.clone());
            }
            ("partitionBy", other) => {
                return Err(wrong_type("partitionBy", other, "types '[string, object]'"))
            }
            ("partitionByFields", Bson::Array(fields)) => {
                let mut partition = Document::new();
                for (position, field) in fields.iter().enumerate() {
                    let Bson::String(field) = field else {
                        return Err(wrong_type(
                            &format!("partitionByFields.{position}"),
                            field,
                            "string",
                        ));
                    };
                    partition.insert(field.clone(), format!("${field}"));
                }
                partition_by_fields = Some(partition);
            }
            ("partitionByFields", other) => {
                return Err(wrong_type("partitionByFields", other, "array"))
            }
            ("output", Bson::Document(fields)) => output = Some(fields),
            ("output", other) => return Err(wrong_type("output", other, "object")),
            (other, _) => return Err(unknown_field(other)),
        }
    }
    let output = output.ok_or_else(|| CommandError::idl_missing_field("$fill", "output"))?;
    if output.is_empty() {
        return Err(failed(
            ErrorCode::Location6050203,
            "The output field in '$fill' must contain an object with at least one element",
        ));
    }
    let mut window_output = Document::new();
    let mut add_fields = Document::new();
    for (field, spec) in output {
        let Bson::Document(spec) = spec else {
            return Err(failed(
                ErrorCode::Location6050200,
                "Each fill output specification must be an object with exactly one field",
            ));
        };
        let mut method = None;
        let mut value = None;
        for (name, argument) in spec {
            match (name.as_str(), argument) {
                ("method", Bson::String(text)) => method = Some(text.as_str()),
                ("method", other) => return Err(wrong_type("method", other, "string")),
                ("value", _) => value = Some(argument),
                (other, _) => return Err(unknown_field(other)),
            }
        }
        match (method, value) {
            (Some(_), Some(_)) => {
                return Err(failed(
                    ErrorCode::Location6050201,
                    "Each fill output specification must have exactly one of 'method' or \
                     'value' fields, not both",
                ))
            }
            (Some(method), None) => {
                let function = match method {
                    "locf" => "$locf",
                    "linear" => "$linearFill",
                    _ => {
                        return Err(failed(
                            ErrorCode::Location6050202,
                            "Method must be either locf or linear",
                        ))
                    }
                };
                window_output.insert(field.clone(), doc! {function: format!("${field}")});
            }
            (None, Some(value)) => {
                add_fields.insert(
                    field.clone(),
                    doc! {"$ifNull": [format!("${field}"), value.clone()]},
                );
            }
            // mongod's IDL takes an output with neither as a spec that adds nothing.
            (None, None) => {}
        }
    }
    if partition_by.is_some() && partition_by_fields.is_some() {
        return Err(failed(
            ErrorCode::Location6050204,
            "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'",
        ));
    }
    if let Some(partition) = partition_by.or(partition_by_fields.map(Bson::Document)) {
        window.insert("partitionBy", partition);
    }
    let mut stages = Vec::new();
    if !window_output.is_empty() {
        window.insert("output", window_output);
        stages.push(("$setWindowFields", Bson::Document(window)));
    }
    if !add_fields.is_empty() {
        stages.push(("$addFields", Bson::Document(add_fields)));
    }
    Ok(stages)
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use super::super::fixtures::{parse_error, run_ok};

    #[test]
    fn the_manuals_value_locf_and_linear_examples() {
        // `$fill` reference page: dairySales with a constant value.
        let out = run_ok(
            vec![
                doc! {"$fill": {"output": {"bootsSold": {"value": 0}, "sandalsSold": {"value": 0}}}},
            ],
            vec![
                doc! {"_id": 1, "bootsSold": 10, "sandalsSold": 20},
                doc! {"_id": 2, "sandalsSold": Bson::Null},
            ],
        );
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "bootsSold": 10, "sandalsSold": 20},
                doc! {"_id": 2, "sandalsSold": 0, "bootsSold": 0},
            ]
        );
        // stock prices: linear interpolation between known prices, in `time` order.
        let stock: Vec<Document> = [
            (0, Some(500.0)),
            (1, None),
            (2, Some(515.0)),
            (3, None),
            (4, None),
            (5, Some(560.0)),
        ]
        .into_iter()
        .map(|(time, price)| match price {
            Some(price) => doc! {"time": time, "price": price},
            None => doc! {"time": time},
        })
        .collect();
        let out = run_ok(
            vec![
                doc! {"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}},
                doc! {"$project": {"_id": 0, "price": 1}},
            ],
            stock,
        );
        let prices: Vec<f64> = out
            .iter()
            .map(|document| document.get_f64("price").expect("filled"))
            .collect();
        assert_eq!(prices, vec![500.0, 507.5, 515.0, 530.0, 545.0, 560.0]);
        // restaurant scores: the last observed value carried forward per partition field.
        let scores = vec![
            doc! {"day": 1, "restaurant": "Joe's Pizza", "score": 90},
            doc! {"day": 1, "restaurant": "Sally's Deli", "score": 75},
            doc! {"day": 2, "restaurant": "Joe's Pizza"},
            doc! {"day": 2, "restaurant": "Sally's Deli", "score": 80},
            doc! {"day": 3, "restaurant": "Joe's Pizza", "score": 93},
            doc! {"day": 3, "restaurant": "Sally's Deli"},
        ];
        let out = run_ok(
            vec![
                doc! {"$fill": {"sortBy": {"day": 1}, "partitionByFields": ["restaurant"],
                "output": {"score": {"method": "locf"}}}},
                doc! {"$sort": {"restaurant": 1, "day": 1}},
                doc! {"$project": {"_id": 0, "score": 1}},
            ],
            scores,
        );
        let filled: Vec<i32> = out
            .iter()
            .map(|d| d.get_i32("score").expect("score"))
            .collect();
        assert_eq!(filled, vec![90, 90, 93, 75, 80, 80]);
    }

    #[test]
    fn bad_specifications_get_mongods_errors() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::Int32(1), 9),
            (bson::bson!({"sortBy": {"a": 1}}), 40414),
            (bson::bson!({"output": {}}), 6050203),
            (bson::bson!({"output": {"a": 1}}), 6050200),
            (
                bson::bson!({"output": {"a": {"method": "locf", "value": 1}}}),
                6050201,
            ),
            (
                bson::bson!({"output": {"a": {"method": "nearest"}}}),
                6050202,
            ),
            (
                bson::bson!({"partitionBy": "$p", "partitionByFields": ["p"], "output": {"a": {"value": 1}}}),
                6050204,
            ),
            (
                bson::bson!({"output": {"a": {"value": 1}}, "bogus": 1}),
                40415,
            ),
            (
                bson::bson!({"output": {"a": {"value": 1, "bogus": 1}}}),
                40415,
            ),
            (
                bson::bson!({"sortBy": 1, "output": {"a": {"value": 1}}}),
                14,
            ),
            (
                bson::bson!({"partitionByFields": [1], "output": {"a": {"value": 1}}}),
                14,
            ),
            (bson::bson!({"output": {"a": {"method": "linear"}}}), 605001),
        ];
        for (spec, code) in cases {
            let error = parse_error(vec![doc! {"$fill": spec.clone()}]);
            assert_eq!(error.code.code(), code, "{spec}: {}", error.errmsg);
        }
    }
}
