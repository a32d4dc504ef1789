//! Property test: update operators applied by the server and read back through the driver equal
//! the same update applied to the document by a deliberately simple in-memory model of mongod's
//! rules (top-level fields, values from a small set, one update at a time). Seeded and
//! reproducible: `TIDEWAY_UPDATE_SEED` and `TIDEWAY_UPDATE_CASES` pick the run.
//!
//! The model follows the update operator reference pages: `$set` replaces or appends, `$unset`
//! removes, `$inc`/`$mul` need a number (a missing field starts at 0 / becomes 0), `$min`/`$max`
//! replace when the operand is lower/higher, `$push` appends (creating the array), `$addToSet`
//! appends when no equal element exists, `$pull` removes equal elements (missing is a no-op),
//! `$rename` sets the destination as `$set` does and removes the source (mongod's rename node);
//! fields an update creates are appended in field-name order; a type error leaves the document unchanged and fails the update.

mod common;

use bson::{doc, Bson, Document};
use common::{Rng, TestServer};

const FIELDS: &[&str] = &["a", "b", "c", "d"];

fn random_value(rng: &mut Rng) -> Bson {
    match rng.below(7) {
        0 => Bson::Int32(rng.below(5) as i32),
        1 => Bson::Int32(-(rng.below(3) as i32)),
        2 => Bson::String(rng.pick(&["x", "y"]).to_string()),
        3 => Bson::Array(
            (0..rng.below(3))
                .map(|_| Bson::Int32(rng.below(3) as i32))
                .collect(),
        ),
        4 => Bson::Null,
        5 => Bson::Boolean(rng.below(2) == 0),
        _ => Bson::Document(doc! {"x": rng.below(3) as i32}),
    }
}

fn random_document(rng: &mut Rng, id: i32) -> Document {
    let mut document = doc! {"_id": id};
    for field in FIELDS {
        if rng.below(3) > 0 {
            document.insert(*field, random_value(rng));
        }
    }
    document
}

/// One operator over one or two distinct fields.
fn random_update(rng: &mut Rng) -> Document {
    let operator = rng.pick(&[
        "$set",
        "$unset",
        "$inc",
        "$mul",
        "$min",
        "$max",
        "$push",
        "$addToSet",
        "$pull",
        "$rename",
    ]);
    let first = rng.pick(FIELDS);
    let mut fields = vec![first];
    if operator != "$rename" && rng.below(2) == 0 {
        let second = rng.pick(FIELDS);
        if second != first {
            fields.push(second);
        }
    }
    let mut arguments = Document::new();
    for field in fields {
        let operand = match operator {
            "$unset" => Bson::String(String::new()),
            "$inc" | "$mul" | "$min" | "$max" => Bson::Int32(rng.below(5) as i32 - 2),
            "$rename" => {
                let target = rng.pick(FIELDS);
                if target == field {
                    return doc! {"$set": {field: 1}};
                }
                Bson::String(target.to_string())
            }
            _ => random_value(rng),
        };
        arguments.insert(field, operand);
    }
    doc! {operator: arguments}
}

fn as_i64(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        _ => None,
    }
}

/// Int32 while it fits, as mongod's integer arithmetic.
fn integer(value: i64) -> Bson {
    i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32)
}

/// Sets `field`: in place when present, else appended.
fn put(document: &mut Document, field: &str, value: Bson) {
    document.insert(field, value);
}

/// The model's answer: the updated document, or `None` for an update mongod refuses.
fn model(document: &Document, update: &Document) -> Option<Document> {
    let (operator, arguments) = update.iter().next()?;
    let arguments = arguments.as_document()?;
    let mut result = document.clone();
    // Fields are applied in name order, so new ones are appended in that order.
    let mut names: Vec<&String> = arguments.keys().collect();
    names.sort();
    for name in names {
        let operand = arguments.get(name)?;
        let current = result.get(name).cloned();
        match operator.as_str() {
            "$set" => put(&mut result, name, operand.clone()),
            "$unset" => {
                result.remove(name);
            }
            "$inc" | "$mul" => {
                let base = match &current {
                    None => 0,
                    Some(value) => as_i64(value)?,
                };
                let by = as_i64(operand)?;
                let value = if operator == "$inc" {
                    base + by
                } else if current.is_none() {
                    0
                } else {
                    base * by
                };
                put(&mut result, name, integer(value));
            }
            "$min" | "$max" => match &current {
                None => put(&mut result, name, operand.clone()),
                Some(value) => {
                    // Only numbers are compared by the model; other brackets order above
                    // numbers except null/missing-like values, which sort below.
                    let replace = match (as_i64(value), as_i64(operand)) {
                        (Some(have), Some(want)) => {
                            if operator == "$min" {
                                want < have
                            } else {
                                want > have
                            }
                        }
                        // Null sorts below numbers; strings, documents, arrays and booleans
                        // above (the BSON comparison order).
                        (None, Some(_)) => match value {
                            Bson::Null => operator == "$max",
                            _ => operator == "$min",
                        },
                        _ => return None,
                    };
                    if replace {
                        put(&mut result, name, operand.clone());
                    }
                }
            },
            "$push" | "$addToSet" => {
                let mut elements = match &current {
                    None => Vec::new(),
                    Some(Bson::Array(elements)) => elements.clone(),
                    Some(_) => return None,
                };
                if operator == "$push" || !elements.contains(operand) {
                    elements.push(operand.clone());
                }
                put(&mut result, name, Bson::Array(elements));
            }
            "$pull" => match &current {
                None => {}
                Some(Bson::Array(elements)) => {
                    let kept: Vec<Bson> =
                        elements.iter().filter(|e| *e != operand).cloned().collect();
                    put(&mut result, name, Bson::Array(kept));
                }
                Some(_) => return None,
            },
            "$rename" => {
                let target = operand.as_str()?;
                // mongod sets the destination as `$set` does (in place when it exists,
                // appended otherwise), then removes the source.
                if let Some(value) = result.remove(name) {
                    result.insert(target, value);
                }
            }
            _ => return None,
        }
    }
    Some(result)
}

#[tokio::test]
async fn updates_read_back_as_the_model_applies_them() {
    let seed = std::env::var("TIDEWAY_UPDATE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(20_261_123);
    let cases: usize = std::env::var("TIDEWAY_UPDATE_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(400);
    let server = TestServer::start().await;
    let coll = server
        .client()
        .database("update_model")
        .collection::<Document>("c");
    let mut rng = Rng(seed.max(1));
    for case in 0..cases {
        let id = case as i32;
        let document = random_document(&mut rng, id);
        let update = random_update(&mut rng);
        coll.insert_one(document.clone()).await.unwrap();
        let expected = model(&document, &update);
        let outcome = coll.update_one(doc! {"_id": id}, update.clone()).await;
        let stored = coll.find_one(doc! {"_id": id}).await.unwrap().unwrap();
        match expected {
            Some(expected) => {
                assert!(
                    outcome.is_ok(),
                    "seed {seed} case {case}: {document} {update}: {outcome:?}"
                );
                assert_eq!(
                    stored, expected,
                    "seed {seed} case {case}: {document} {update}"
                );
                // Field order too (Document equality ignores it).
                let order = |d: &Document| d.keys().cloned().collect::<Vec<_>>();
                assert_eq!(
                    order(&stored),
                    order(&expected),
                    "seed {seed} case {case}: {document} {update}"
                );
            }
            None => {
                assert!(
                    outcome.is_err(),
                    "seed {seed} case {case}: {document} {update} succeeded"
                );
                assert_eq!(stored, document, "a failed update changed the document");
            }
        }
    }
}
