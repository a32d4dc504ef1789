//! `$bucket`: validated as mongod validates it and rewritten, as mongod rewrites it, into a
//! `$group` whose `_id` is a `$switch` over the boundaries, followed by `$sort: {_id: 1}`.
//!
//! Invariants: boundaries are constants of one canonical type in strictly ascending order (at
//! least two); a `default` is a constant outside `[first, last)` when it has their type; without
//! `output` each bucket counts its documents (`count: {$sum: 1}`). A document outside every
//! bucket without a `default` fails at run time with the `$switch`'s error, as in mongod.

use bson::{doc, Bson, Document};

use crate::compare::{canonical_type_rank, compare_values};
use crate::expr::Expr;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The `$group` and `$sort` specifications a `$bucket` specification stands for.
pub(crate) fn rewrite(spec: &Bson) -> CommandResult<(Bson, Document)> {
    let Bson::Document(arguments) = spec else {
        return Err(CommandError::new(
            ErrorCode::Location40201,
            format!(
                "Argument to $bucket stage must be an object, but found type: {}.",
                type_name(spec)
            ),
        ));
    };
    let mut group_by = None;
    let mut boundaries: Vec<Bson> = Vec::new();
    let mut default = None;
    let mut output = None;
    for (name, argument) in arguments {
        match name.as_str() {
            "groupBy" => {
                let valid = match argument {
                    Bson::String(path) => path.starts_with('$'),
                    Bson::Document(expression) => expression
                        .keys()
                        .next()
                        .is_some_and(|key| key.starts_with('$')),
                    _ => false,
                };
                if !valid {
                    return Err(CommandError::new(
                        ErrorCode::Location40202,
                        format!(
                            "The $bucket 'groupBy' field must be defined as a $-prefixed path or an \
                             expression, but found: {}.",
                            value_string(argument)
                        ),
                    ));
                }
                group_by = Some(argument.clone());
            }
            "boundaries" => boundaries = parse_boundaries(argument)?,
            "default" => {
                default = Some(constant(argument).ok_or_else(|| {
                    CommandError::new(
                        ErrorCode::Location40195,
                        format!(
                            "The $bucket 'default' field must be a constant expression, but \
                             found: {}.",
                            value_string(argument)
                        ),
                    )
                })?);
            }
            "output" => {
                let Bson::Document(fields) = argument else {
                    return Err(CommandError::new(
                        ErrorCode::Location40196,
                        format!(
                            "The $bucket 'output' field must be an object, but found type: {}.",
                            type_name(argument)
                        ),
                    ));
                };
                output = Some(fields.clone());
            }
            other => {
                return Err(CommandError::new(
                    ErrorCode::Location40197,
                    format!("Unrecognized option to $bucket: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(lowest), Some(highest)) =
        (group_by, boundaries.first(), boundaries.last())
    else {
        return Err(CommandError::new(
            ErrorCode::Location40198,
            "$bucket requires 'groupBy' and 'boundaries' to be specified.",
        ));
    };
    if let Some(default) = &default {
        let outside =
            compare_values(default, lowest).is_lt() || compare_values(default, highest).is_ge();
        if canonical_type_rank(default) == canonical_type_rank(lowest) && !outside {
            return Err(CommandError::new(
                ErrorCode::Location40199,
                "The $bucket 'default' field must be less than the lowest boundary or greater \
                 than or equal to the highest boundary.",
            ));
        }
    }
    let branches: Vec<Bson> = boundaries
        .windows(2)
        .map(|bounds| {
            Bson::Document(doc! {
                "case": {"$and": [
                    {"$gte": [group_by.clone(), bounds[0].clone()]},
                    {"$lt": [group_by.clone(), bounds[1].clone()]},
                ]},
                "then": bounds[0].clone(),
            })
        })
        .collect();
    let mut switch = doc! {"branches": branches};
    if let Some(default) = default {
        switch.insert("default", default);
    }
    let mut group = doc! {"_id": {"$switch": switch}};
    group.extend(output.unwrap_or_else(|| doc! {"count": {"$sum": 1}}));
    Ok((Bson::Document(group), doc! {"_id": 1}))
}

/// The value of a constant expression (a literal, `$literal`, operators over constants).
fn constant(value: &Bson) -> Option<Bson> {
    let expression = Expr::parse(value).ok()?;
    expression
        .evaluate_constant(bson::DateTime::now())
        .ok()
        .flatten()
}

fn parse_boundaries(argument: &Bson) -> CommandResult<Vec<Bson>> {
    let Bson::Array(elements) = argument else {
        return Err(CommandError::new(
            ErrorCode::Location40200,
            format!(
                "The $bucket 'boundaries' field must be an array, but found type: {}.",
                type_name(argument)
            ),
        ));
    };
    let mut boundaries = Vec::with_capacity(elements.len());
    for element in elements {
        boundaries.push(constant(element).ok_or_else(|| {
            CommandError::new(
                ErrorCode::Location40191,
                format!(
                    "The $bucket 'boundaries' field must be an array of constant values, but \
                     found value: {}.",
                    value_string(element)
                ),
            )
        })?);
    }
    if boundaries.len() < 2 {
        return Err(CommandError::new(
            ErrorCode::Location40192,
            format!(
                "The $bucket 'boundaries' field must have at least 2 values, but found {} \
                 value(s).",
                boundaries.len()
            ),
        ));
    }
    for (index, pair) in boundaries.windows(2).enumerate() {
        let (lower, upper) = (&pair[0], &pair[1]);
        if canonical_type_rank(lower) != canonical_type_rank(upper) {
            return Err(CommandError::new(
                ErrorCode::Location40193,
                format!(
                    "All values in the the 'boundaries' option to $bucket must have the same \
                     type. Found conflicting types {} and {}.",
                    type_name(lower),
                    type_name(upper)
                ),
            ));
        }
        if !compare_values(lower, upper).is_lt() {
            return Err(CommandError::new(
                ErrorCode::Location40194,
                format!(
                    "The 'boundaries' option to $bucket must be sorted, but elements {} and {} \
                     are not in ascending order ({} is not less than {}).",
                    index,
                    index + 1,
                    value_string(lower),
                    value_string(upper)
                ),
            ));
        }
    }
    Ok(boundaries)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::run;
    use super::*;

    /// The `$bucket` reference page's `artists` collection.
    fn artists() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "last_name": "Bernard", "first_name": "Emil", "year_born": 1868, "year_died": 1941, "nationality": "France"},
            doc! {"_id": 2, "last_name": "Rippl-Ronai", "first_name": "Joszef", "year_born": 1861, "year_died": 1927, "nationality": "Hungary"},
            doc! {"_id": 3, "last_name": "Ostroumova", "first_name": "Anna", "year_born": 1871, "year_died": 1955, "nationality": "Russia"},
            doc! {"_id": 4, "last_name": "Van Gogh", "first_name": "Vincent", "year_born": 1853, "year_died": 1890, "nationality": "Holland"},
            doc! {"_id": 5, "last_name": "Maurer", "first_name": "Alfred", "year_born": 1868, "year_died": 1932, "nationality": "USA"},
            doc! {"_id": 6, "last_name": "Munch", "first_name": "Edvard", "year_born": 1863, "year_died": 1944, "nationality": "Norway"},
            doc! {"_id": 7, "last_name": "Redon", "first_name": "Odilon", "year_born": 1840, "year_died": 1916, "nationality": "France"},
            doc! {"_id": 8, "last_name": "Diriks", "first_name": "Edvard", "year_born": 1855, "year_died": 1930, "nationality": "Norway"},
        ]
    }

    #[test]
    fn buckets_answer_the_reference_pages_example() {
        let output = run(
            vec![
                doc! {"$bucket": {
                    "groupBy": "$year_born",
                    "boundaries": [1840, 1850, 1860, 1870, 1880],
                    "default": "Other",
                    "output": {
                        "count": {"$sum": 1},
                        "artists": {"$push": {"name": {"$concat": ["$first_name", " ", "$last_name"]}, "year_born": "$year_born"}},
                    },
                }},
                doc! {"$match": {"count": {"$gt": 3}}},
            ],
            artists(),
        )
        .expect("runs");
        assert_eq!(
            output,
            vec![doc! {"_id": 1860, "count": 4, "artists": [
                {"name": "Emil Bernard", "year_born": 1868},
                {"name": "Joszef Rippl-Ronai", "year_born": 1861},
                {"name": "Alfred Maurer", "year_born": 1868},
                {"name": "Edvard Munch", "year_born": 1863},
            ]}]
        );
        // Without `output`, each bucket counts its documents; buckets come in `_id` order.
        let counted = run(
            vec![doc! {"$bucket": {"groupBy": "$year_born", "boundaries": [1840, 1860, 1880]}}],
            artists(),
        )
        .expect("runs");
        assert_eq!(
            counted,
            vec![
                doc! {"_id": 1840, "count": 3},
                doc! {"_id": 1860, "count": 5}
            ]
        );
    }

    #[test]
    fn bad_specifications_get_mongods_codes() {
        let code = |spec: Bson| {
            run(vec![doc! {"$bucket": spec}], vec![])
                .expect_err("refused")
                .code
        };
        assert_eq!(code(Bson::Int32(1)), ErrorCode::Location40201);
        assert_eq!(
            code(Bson::Document(doc! {"groupBy": "a", "boundaries": [1, 2]})),
            ErrorCode::Location40202
        );
        assert_eq!(
            code(Bson::Document(doc! {"groupBy": "$a", "boundaries": 1})),
            ErrorCode::Location40200
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": ["$b", 2]}
            )),
            ErrorCode::Location40191
        );
        assert_eq!(
            code(Bson::Document(doc! {"groupBy": "$a", "boundaries": [1]})),
            ErrorCode::Location40192
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": [1, "b"]}
            )),
            ErrorCode::Location40193
        );
        assert_eq!(
            code(Bson::Document(doc! {"groupBy": "$a", "boundaries": [2, 1]})),
            ErrorCode::Location40194
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": [1, 2], "default": "$c"}
            )),
            ErrorCode::Location40195
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": [1, 2], "output": 1}
            )),
            ErrorCode::Location40196
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": [1, 2], "x": 1}
            )),
            ErrorCode::Location40197
        );
        assert_eq!(
            code(Bson::Document(doc! {"groupBy": "$a"})),
            ErrorCode::Location40198
        );
        assert_eq!(
            code(Bson::Document(
                doc! {"groupBy": "$a", "boundaries": [1, 3], "default": 2}
            )),
            ErrorCode::Location40199
        );
    }
}
