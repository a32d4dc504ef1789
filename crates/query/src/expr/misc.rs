//! Miscellaneous operators: `$isNumber`, `$rand`, `$bsonSize`, `$binarySize`, `$tsSecond`,
//! `$tsIncrement` and `$toHashedIndexKey`.
//!
//! Invariants: `$bsonSize`/`$binarySize`/`$tsSecond`/`$tsIncrement` turn null or missing into
//! null and refuse other types with mongod's codes (31393, 51276, 5687301, 5687302);
//! `$toHashedIndexKey` hashes a missing value as null with the same hash hashed indexes use
//! ([`hashed_value`]); `$rand` is a double in [0, 1) with 53 random bits from a per-thread
//! generator seeded from the operating system (`tideway_base::rng`), and takes only `{}`.

use bson::Bson;

use super::{fail, is_nullish, value_type_name, Expr, Op, Value};
use crate::hash::hashed_value;
use tideway_base::error::{CommandResult, ErrorCode};

/// The operators of this family (`Op::Misc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MiscOp {
    IsNumber,
    Rand,
    BsonSize,
    BinarySize,
    TsSecond,
    TsIncrement,
    ToHashedIndexKey,
}

/// `$rand` takes an empty object (mongod's 10065 for a non-object, 3040501 for arguments).
pub(super) fn parse_rand(operand: &Bson) -> CommandResult<Expr> {
    match operand {
        Bson::Document(arguments) if arguments.is_empty() => {
            Ok(Expr::Op(Op::Misc(MiscOp::Rand), Vec::new()))
        }
        Bson::Document(_) => Err(fail(
            ErrorCode::Location3040501,
            "$rand does not currently accept arguments",
        )),
        other => Err(fail(
            ErrorCode::Location10065,
            format!(
                "invalid parameter: expected an object (), found {}",
                tideway_base::display::type_name(other)
            ),
        )),
    }
}

fn int_size(size: usize) -> Bson {
    i32::try_from(size).map_or(Bson::Int64(size as i64), Bson::Int32)
}

pub(super) fn evaluate_misc(op: MiscOp, values: Vec<Value>) -> CommandResult<Value> {
    if op == MiscOp::Rand {
        return Ok(Some(Bson::Double(tideway_base::rng::random_unit())));
    }
    let value = values.into_iter().next().flatten();
    match op {
        MiscOp::IsNumber => Ok(Some(Bson::Boolean(matches!(
            value,
            Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
        )))),
        MiscOp::ToHashedIndexKey => Ok(Some(Bson::Int64(hashed_value(
            value.as_ref().unwrap_or(&Bson::Null),
        )))),
        _ if is_nullish(&value) => Ok(Some(Bson::Null)),
        MiscOp::BsonSize => match value {
            Some(Bson::Document(document)) => Ok(Some(int_size(
                tideway_base::bsonutil::encoded_size(&document),
            ))),
            other => Err(fail(
                ErrorCode::Location31393,
                format!(
                    "$bsonSize requires a document input, found: {}",
                    value_type_name(&other)
                ),
            )),
        },
        MiscOp::BinarySize => match value {
            Some(Bson::String(text)) => Ok(Some(int_size(text.len()))),
            Some(Bson::Binary(binary)) => Ok(Some(int_size(binary.bytes.len()))),
            other => Err(fail(
                ErrorCode::Location51276,
                format!(
                    "$binarySize requires a string or BinData argument, found: {}",
                    value_type_name(&other)
                ),
            )),
        },
        _ => {
            let (name, code) = if op == MiscOp::TsSecond {
                ("$tsSecond", ErrorCode::Location5687301)
            } else {
                ("$tsIncrement", ErrorCode::Location5687302)
            };
            match value {
                Some(Bson::Timestamp(timestamp)) => {
                    Ok(Some(Bson::Int64(i64::from(if op == MiscOp::TsSecond {
                        timestamp.time
                    } else {
                        timestamp.increment
                    }))))
                }
                other => Err(fail(
                    code,
                    format!(
                        " Argument to {name} must be a timestamp, but is {}",
                        value_type_name(&other)
                    ),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_errors, check_values, value};
    use bson::{bson, spec::BinarySubtype, Binary, Bson, Timestamp};

    #[test]
    fn type_and_size_operators_answer_the_manuals_examples() {
        let binary = Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![1, 2, 3, 4],
        });
        check_values(vec![
            (bson!({"$isNumber": 1}), bson!(true)),
            (bson!({"$isNumber": 1.5}), bson!(true)),
            (bson!({"$isNumber": 1_i64}), bson!(true)),
            (bson!({"$isNumber": "1"}), bson!(false)),
            (bson!({"$isNumber": "$missing"}), bson!(false)),
            (bson!({"$bsonSize": {"$literal": {}}}), bson!(5)),
            (bson!({"$bsonSize": {"$literal": {"a": 1}}}), bson!(12)),
            (bson!({"$bsonSize": null}), Bson::Null),
            (bson!({"$bsonSize": "$missing"}), Bson::Null),
            (bson!({"$binarySize": "abc"}), bson!(3)),
            (bson!({"$binarySize": "Hello World!"}), bson!(12)),
            (bson!({"$binarySize": "café"}), bson!(5)),
            (bson!({"$binarySize": binary}), bson!(4)),
            (bson!({"$binarySize": null}), Bson::Null),
        ]);
    }

    #[test]
    fn timestamps_hashes_and_rand() {
        let timestamp = Bson::Timestamp(Timestamp {
            time: 1_622_731_060,
            increment: 1,
        });
        check_values(vec![
            (
                bson!({"$tsSecond": timestamp.clone()}),
                Bson::Int64(1_622_731_060),
            ),
            (bson!({"$tsIncrement": timestamp}), Bson::Int64(1)),
            (bson!({"$tsSecond": null}), Bson::Null),
            (
                bson!({"$toHashedIndexKey": "string to hash"}),
                Bson::Int64(763_543_691_661_428_748),
            ),
            (
                bson!({"$toHashedIndexKey": "$missing"}),
                Bson::Int64(crate::hash::hashed_value(&Bson::Null)),
            ),
        ]);
        for _ in 0..100 {
            let Some(Bson::Double(random)) = value(bson!({"$rand": {}})) else {
                panic!("$rand is a double");
            };
            assert!((0.0..1.0).contains(&random));
        }
    }

    #[test]
    fn errors_carry_mongods_codes() {
        check_errors(vec![
            (bson!({"$bsonSize": 1}), 31393),
            (bson!({"$bsonSize": [[1]]}), 31393),
            (bson!({"$binarySize": 1}), 51276),
            (bson!({"$tsSecond": 1}), 5687301),
            (bson!({"$tsIncrement": "a"}), 5687302),
            (bson!({"$rand": {"a": 1}}), 3040501),
            (bson!({"$rand": 1}), 10065),
            (bson!({"$isNumber": [1, 2]}), 16020),
        ]);
        let error = super::super::test_support::error(bson!({"$tsSecond": 1}));
        assert_eq!(
            error.errmsg,
            " Argument to $tsSecond must be a timestamp, but is int"
        );
    }

    #[test]
    fn standard_deviations_as_expressions() {
        check_values(vec![
            (bson!({"$stdDevPop": [1, 3]}), bson!(1.0)),
            (bson!({"$stdDevPop": [[1, 3, "a", null]]}), bson!(1.0)),
            (
                bson!({"$stdDevSamp": [1, 3]}),
                bson!(std::f64::consts::SQRT_2),
            ),
            (bson!({"$stdDevSamp": [1]}), Bson::Null),
            (bson!({"$stdDevPop": ["a"]}), Bson::Null),
            (bson!({"$stdDevPop": []}), Bson::Null),
        ]);
    }
}
