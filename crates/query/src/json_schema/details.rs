//! Why a document fails a `$jsonSchema`: the `details` of a 121 DocumentValidationFailure, shaped
//! as mongod's `doc_validation_error` generator shapes them (`schemaRulesNotSatisfied`,
//! `propertiesNotSatisfied`, per-keyword `operatorName`/`specifiedAs`/`reason`/`consideredValue`).
//!
//! Only failing keywords are reported, each where mongod reports it: a keyword about one kind of
//! value (`minimum` about numbers, `minLength` about strings, …) reports only for a value of that
//! kind, the type keyword reports the mismatch. Keywords are listed in the order of mongod's
//! schema parser: object keywords, array keywords, numeric, string, logical, `enum`, then the type.
//! Called only on the failure path; recursion is bounded like matching (schema and document
//! depths are checked where they enter the server).

use bson::{doc, Bson, Document};

use super::{Additional, Dependency, Items, Schema};
use crate::compare::{compare_values, values_equal};
use crate::numeric::Number;
use tideway_base::display::type_name;

/// The root: `{operatorName: "$jsonSchema", title?, description?, schemaRulesNotSatisfied}`.
pub(super) fn schema_failure(root: &Schema, document: &Document) -> Document {
    let mut details = doc! {"operatorName": "$jsonSchema"};
    annotations(root, &mut details);
    details.insert(
        "schemaRulesNotSatisfied",
        value_failures(root, &Bson::Document(document.clone())),
    );
    details
}

/// `title` and `description` of a subschema, as mongod appends them.
fn annotations(schema: &Schema, into: &mut Document) {
    for keyword in ["title", "description"] {
        if let Some(value) = schema.source.get(keyword) {
            into.insert(keyword, value.clone());
        }
    }
}

/// `{keyword: <as given>}`.
fn specified_as(schema: &Schema, keyword: &str) -> Document {
    let mut specified = Document::new();
    if let Some(value) = schema.source.get(keyword) {
        specified.insert(keyword, value.clone());
    }
    specified
}

/// A keyword failure with a reason about `value`.
fn keyword_failure(schema: &Schema, keyword: &str, reason: &str, value: &Bson) -> Document {
    doc! {
        "operatorName": keyword,
        "specifiedAs": specified_as(schema, keyword),
        "reason": reason,
        "consideredValue": value.clone(),
    }
}

/// Every rule of `schema` that `value` breaks, as the array of error objects.
fn value_failures(schema: &Schema, value: &Bson) -> Vec<Bson> {
    let mut failures = Vec::new();
    match value {
        Bson::Document(object) => object_failures(schema, object, &mut failures),
        Bson::Array(elements) => array_failures(schema, elements, &mut failures),
        Bson::String(text) => string_failures(schema, text, &mut failures),
        number if Number::from_bson(number).is_some() => {
            number_failures(schema, number, &mut failures)
        }
        _ => {}
    }
    logical_failures(schema, value, &mut failures);
    if !schema.in_enum(value) {
        failures.push(keyword_failure(
            schema,
            "enum",
            "value was not found in enum",
            value,
        ));
    }
    let is_number = Number::from_bson(value).is_some();
    if !schema.accepts_type(|alias| alias == type_name(value), is_number) {
        let keyword = if schema.source.contains_key("bsonType") {
            "bsonType"
        } else {
            "type"
        };
        let mut failure = keyword_failure(schema, keyword, "type did not match", value);
        failure.insert("consideredType", type_name(value));
        failures.push(failure);
    }
    failures.into_iter().map(Bson::Document).collect()
}

fn object_failures(schema: &Schema, object: &Document, failures: &mut Vec<Document>) {
    let mut properties = Vec::new();
    for (name, property) in &schema.properties {
        if let Some(value) = object.get(name) {
            if !property.matches(value) {
                let mut failure = doc! {"propertyName": name.as_str()};
                annotations(property, &mut failure);
                failure.insert("details", value_failures(property, value));
                properties.push(failure);
            }
        }
    }
    if !properties.is_empty() {
        failures.push(doc! {"operatorName": "properties", "propertiesNotSatisfied": properties});
    }
    let missing: Vec<&String> = schema
        .required
        .iter()
        .filter(|name| !object.contains_key(name.as_str()))
        .collect();
    if !missing.is_empty() {
        failures.push(doc! {
            "operatorName": "required",
            "specifiedAs": specified_as(schema, "required"),
            "missingProperties": missing,
        });
    }
    for (keyword, bound, below) in [
        ("minProperties", schema.min_properties, true),
        ("maxProperties", schema.max_properties, false),
    ] {
        if let Some(bound) = bound {
            if (below && object.len() < bound) || (!below && object.len() > bound) {
                failures.push(doc! {
                    "operatorName": keyword,
                    "specifiedAs": specified_as(schema, keyword),
                    "reason": "specified number of properties was not satisfied",
                    "numberOfProperties": object.len() as i32,
                });
            }
        }
    }
    additional_failures(schema, object, failures);
    for (name, dependency) in &schema.dependencies {
        if !object.contains_key(name) {
            continue;
        }
        match dependency {
            Dependency::Fields(fields) => {
                let missing: Vec<&String> = fields
                    .iter()
                    .filter(|field| !object.contains_key(field.as_str()))
                    .collect();
                if !missing.is_empty() {
                    failures.push(doc! {
                        "operatorName": "dependencies",
                        "failingDependencies": [{
                            "conditionalProperty": name.as_str(),
                            "missingProperties": missing,
                        }],
                    });
                }
            }
            Dependency::Schema(dependent) => {
                if !dependent.matches_document(object) {
                    failures.push(doc! {
                        "operatorName": "dependencies",
                        "failingDependencies": [{
                            "conditionalProperty": name.as_str(),
                            "details": value_failures(dependent, &Bson::Document(object.clone())),
                        }],
                    });
                }
            }
        }
    }
}

/// `additionalProperties` and `patternProperties`.
fn additional_failures(schema: &Schema, object: &Document, failures: &mut Vec<Document>) {
    let additional: Vec<(&String, &Bson)> = object
        .iter()
        .filter(|(name, _)| {
            !schema.properties.iter().any(|(known, _)| known == *name)
                && !schema
                    .pattern_properties
                    .iter()
                    .any(|(pattern, _)| pattern.is_match(name))
        })
        .collect();
    match &schema.additional_properties {
        Some(Additional::Allowed(false)) if !additional.is_empty() => {
            let names: Vec<&String> = additional.iter().map(|(name, _)| *name).collect();
            failures.push(doc! {
                "operatorName": "additionalProperties",
                "specifiedAs": {"additionalProperties": false},
                "additionalProperties": names,
            });
        }
        Some(Additional::Schema(subschema)) => {
            if let Some((name, value)) = additional
                .iter()
                .find(|(_, value)| !subschema.matches(value))
            {
                let mut failure = doc! {"operatorName": "additionalProperties"};
                annotations(subschema, &mut failure);
                failure.insert(
                    "reason",
                    "at least one additional property did not match the subschema",
                );
                failure.insert("failingProperty", name.as_str());
                failure.insert("details", value_failures(subschema, value));
                failures.push(failure);
            }
        }
        _ => {}
    }
    let mut patterns = Vec::new();
    for (pattern, subschema) in &schema.pattern_properties {
        if let Some((name, value)) = object
            .iter()
            .find(|(name, value)| pattern.is_match(name) && !subschema.matches(value))
        {
            let mut failure = doc! {"propertyName": name.as_str()};
            annotations(subschema, &mut failure);
            failure.insert("regexMatched", pattern.as_str());
            failure.insert("details", value_failures(subschema, value));
            patterns.push(failure);
        }
    }
    if !patterns.is_empty() {
        failures.push(doc! {"operatorName": "patternProperties", "details": patterns});
    }
}

fn array_failures(schema: &Schema, elements: &[Bson], failures: &mut Vec<Document>) {
    let array = Bson::Array(elements.to_vec());
    for (keyword, bound, below) in [
        ("minItems", schema.min_items, true),
        ("maxItems", schema.max_items, false),
    ] {
        if let Some(bound) = bound {
            if (below && elements.len() < bound) || (!below && elements.len() > bound) {
                failures.push(keyword_failure(
                    schema,
                    keyword,
                    "array did not match specified length",
                    &array,
                ));
            }
        }
    }
    if schema.unique_items {
        // The first element equal to an earlier one, in array order.
        let duplicate = elements.iter().enumerate().find_map(|(index, element)| {
            elements[..index]
                .iter()
                .any(|earlier| values_equal(earlier, element))
                .then_some(element)
        });
        if let Some(duplicate) = duplicate {
            let mut failure =
                keyword_failure(schema, "uniqueItems", "found a duplicate item", &array);
            failure.insert("duplicatedValue", duplicate.clone());
            failures.push(failure);
        }
    }
    let item_failure = |keyword: &str, reason: &str, index: usize, item: &Schema| {
        doc! {
            "operatorName": keyword,
            "reason": reason,
            "itemIndex": index as i32,
            "details": value_failures(item, &elements[index]),
        }
    };
    match &schema.items {
        Some(Items::Each(item)) => {
            if let Some(index) = elements.iter().position(|element| !item.matches(element)) {
                failures.push(item_failure(
                    "items",
                    "At least one item did not match the sub-schema",
                    index,
                    item,
                ));
            }
        }
        Some(Items::Tuple(items)) => {
            let positional: Vec<Document> = items
                .iter()
                .zip(elements)
                .enumerate()
                .filter(|(_, (item, element))| !item.matches(element))
                .map(|(index, (item, element))| {
                    doc! {"itemIndex": index as i32, "details": value_failures(item, element)}
                })
                .collect();
            if !positional.is_empty() {
                failures.push(doc! {"operatorName": "items", "details": positional});
            }
            let extra = elements.get(items.len()..).unwrap_or_default();
            match &schema.additional_items {
                Some(Additional::Allowed(false)) if !extra.is_empty() => {
                    failures.push(doc! {
                        "operatorName": "additionalItems",
                        "specifiedAs": {"additionalItems": false},
                        "reason": "found additional items",
                        "additionalItems": extra.to_vec(),
                    });
                }
                Some(Additional::Schema(item)) => {
                    if let Some(offset) = extra.iter().position(|element| !item.matches(element)) {
                        failures.push(item_failure(
                            "additionalItems",
                            "At least one additional item did not match the sub-schema",
                            items.len() + offset,
                            item,
                        ));
                    }
                }
                _ => {}
            }
        }
        None => {}
    }
}

fn number_failures(schema: &Schema, value: &Bson, failures: &mut Vec<Document>) {
    for (keyword, bound, below) in [
        ("maximum", &schema.maximum, false),
        ("minimum", &schema.minimum, true),
    ] {
        let Some((limit, exclusive)) = bound else {
            continue;
        };
        let order = compare_values(value, limit);
        let holds = match (below, exclusive) {
            (true, false) => order.is_ge(),
            (true, true) => order.is_gt(),
            (false, false) => order.is_le(),
            (false, true) => order.is_lt(),
        };
        if !holds {
            let mut specified = specified_as(schema, keyword);
            let exclusive_keyword = if below {
                "exclusiveMinimum"
            } else {
                "exclusiveMaximum"
            };
            if let Some(flag) = schema.source.get(exclusive_keyword) {
                specified.insert(exclusive_keyword, flag.clone());
            }
            failures.push(doc! {
                "operatorName": keyword,
                "specifiedAs": specified,
                "reason": "comparison failed",
                "consideredValue": value.clone(),
            });
        }
    }
    if let Some(divisor) = schema.multiple_of {
        if !super::is_multiple(value, divisor) {
            failures.push(keyword_failure(
                schema,
                "multipleOf",
                "considered value is not a multiple of the specified value",
                value,
            ));
        }
    }
}

fn string_failures(schema: &Schema, text: &str, failures: &mut Vec<Document>) {
    let value = Bson::String(text.to_owned());
    let length = text.chars().count();
    for (keyword, bound, below) in [
        ("maxLength", schema.max_length, false),
        ("minLength", schema.min_length, true),
    ] {
        if let Some(bound) = bound {
            if (below && length < bound) || (!below && length > bound) {
                failures.push(keyword_failure(
                    schema,
                    keyword,
                    "specified string length was not satisfied",
                    &value,
                ));
            }
        }
    }
    if let Some(pattern) = &schema.pattern {
        if !pattern.is_match(text) {
            failures.push(keyword_failure(
                schema,
                "pattern",
                "regular expression did not match",
                &value,
            ));
        }
    }
}

fn logical_failures(schema: &Schema, value: &Bson, failures: &mut Vec<Document>) {
    let not_satisfied = |schemas: &[Schema], keep: &dyn Fn(&Schema) -> bool| -> Vec<Document> {
        schemas
            .iter()
            .enumerate()
            .filter(|(_, subschema)| keep(subschema))
            .map(|(index, subschema)| {
                let mut entry = doc! {"index": index as i32};
                annotations(subschema, &mut entry);
                entry.insert("details", value_failures(subschema, value));
                entry
            })
            .collect()
    };
    let failing = not_satisfied(&schema.all_of, &|subschema| !subschema.matches(value));
    if !failing.is_empty() {
        failures.push(doc! {"operatorName": "allOf", "schemasNotSatisfied": failing});
    }
    if !schema.any_of.is_empty() && !schema.any_of.iter().any(|s| s.matches(value)) {
        failures.push(doc! {
            "operatorName": "anyOf",
            "schemasNotSatisfied": not_satisfied(&schema.any_of, &|_| true),
        });
    }
    if !schema.one_of.is_empty() {
        let matching: Vec<i32> = schema
            .one_of
            .iter()
            .enumerate()
            .filter(|(_, subschema)| subschema.matches(value))
            .map(|(index, _)| index as i32)
            .collect();
        if matching.is_empty() {
            failures.push(doc! {
                "operatorName": "oneOf",
                "schemasNotSatisfied": not_satisfied(&schema.one_of, &|_| true),
            });
        } else if matching.len() > 1 {
            failures.push(doc! {
                "operatorName": "oneOf",
                "reason": "more than one subschema matched",
                "matchingSchemaIndexes": matching,
            });
        }
    }
    if let Some(negated) = &schema.not {
        if negated.matches(value) {
            failures.push(doc! {
                "operatorName": "not",
                "specifiedAs": specified_as(schema, "not"),
                "reason": "child expression matched",
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::JsonSchema;
    use bson::{doc, Bson};

    /// jstests/core/doc_validation/doc_validation_error.js, "Students collection" (from the
    /// manual's schema validation page).
    #[test]
    fn students_collection_error_is_mongods() {
        let schema = JsonSchema::parse(&Bson::Document(doc! {
            "bsonType": "object",
            "required": ["name", "year", "major", "address"],
            "properties": {
                "name": {"bsonType": "string", "description": "must be a string and is required"},
                "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017,
                         "description": "must be an integer in [ 2017, 3017 ] and is required"},
                "major": {"enum": ["Math", "English", "Computer Science", "History", Bson::Null],
                          "description": "can only be one of the enum values and is required"},
                "gpa": {"bsonType": ["double"], "description": "must be a double if the field exists"},
                "address": {
                    "bsonType": "object",
                    "required": ["city"],
                    "properties": {
                        "street": {"bsonType": "string", "description": "must be a string if the field exists"},
                        "city": {"bsonType": "string", "description": "must be a string and is required"},
                    },
                },
            },
        }))
        .unwrap();
        let document = doc! {
            "year": 2020, "major": "Software Engineering", "gpa": 5.0,
            "address": {"city": "NYC", "street": 5},
        };
        let expected = doc! {
            "operatorName": "$jsonSchema",
            "schemaRulesNotSatisfied": [
                {
                    "operatorName": "properties",
                    "propertiesNotSatisfied": [
                        {
                            "propertyName": "major",
                            "description": "can only be one of the enum values and is required",
                            "details": [{
                                "operatorName": "enum",
                                "specifiedAs": {"enum": ["Math", "English", "Computer Science", "History", Bson::Null]},
                                "reason": "value was not found in enum",
                                "consideredValue": "Software Engineering",
                            }],
                        },
                        {
                            "propertyName": "address",
                            "details": [{
                                "operatorName": "properties",
                                "propertiesNotSatisfied": [{
                                    "propertyName": "street",
                                    "description": "must be a string if the field exists",
                                    "details": [{
                                        "operatorName": "bsonType",
                                        "specifiedAs": {"bsonType": "string"},
                                        "reason": "type did not match",
                                        "consideredValue": 5,
                                        "consideredType": "int",
                                    }],
                                }],
                            }],
                        },
                    ],
                },
                {
                    "operatorName": "required",
                    "specifiedAs": {"required": ["name", "year", "major", "address"]},
                    "missingProperties": ["name"],
                },
            ],
        };
        assert_eq!(schema.failure_details(&document), expected);
    }

    /// doc_validation_error.js, "array of enums" (SERVER-32705).
    #[test]
    fn duplicate_items_report_the_first_duplicate() {
        let schema = JsonSchema::parse(&Bson::Document(doc! {"properties": {"values": {
            "bsonType": "array",
            "items": {"bsonType": "string", "enum": ["one", "two", "three"]},
            "minItems": 1, "uniqueItems": true,
        }}}))
        .unwrap();
        let details = schema.failure_details(&doc! {"values": ["two", "two"]});
        assert_eq!(
            details,
            doc! {
                "operatorName": "$jsonSchema",
                "schemaRulesNotSatisfied": [{
                    "operatorName": "properties",
                    "propertiesNotSatisfied": [{
                        "propertyName": "values",
                        "details": [{
                            "operatorName": "uniqueItems",
                            "specifiedAs": {"uniqueItems": true},
                            "reason": "found a duplicate item",
                            "consideredValue": ["two", "two"],
                            "duplicatedValue": "two",
                        }],
                    }],
                }],
            }
        );
    }
}
