//! `$jsonSchema`: the JSON Schema draft 4 subset mongod implements, with its `bsonType`
//! extension. Parsing refuses what mongod refuses (unknown or unsupported keywords, keyword
//! values of the wrong type); matching follows JSON Schema: a keyword constrains only values of
//! the kind it is about (`minimum` numbers, `properties` objects, `items` arrays, `minLength`
//! strings) and lets every other value through, so `{minimum: 5}` accepts a string.
//!
//! Recursion is bounded by the schema's nesting (client input, at most `maxBSONDepth` deep) and
//! the document's, both checked where they enter the server.

use bson::{Bson, Document};
use regex::Regex;

use super::compare::{compare_values, values_equal};
use super::filter::TYPE_ALIASES;
use super::numeric::Number;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// A parsed `$jsonSchema` argument.
#[derive(Clone, Debug)]
pub struct JsonSchema {
    source: Bson,
    root: Schema,
}

impl JsonSchema {
    pub fn parse(schema: &Bson) -> CommandResult<JsonSchema> {
        let Bson::Document(schema) = schema else {
            return Err(CommandError::type_mismatch("$jsonSchema must be an object"));
        };
        Ok(JsonSchema {
            source: Bson::Document(schema.clone()),
            root: Schema::parse(schema)?,
        })
    }

    /// The schema as given, for explain.
    pub fn source(&self) -> &Bson {
        &self.source
    }

    /// Whether `document` satisfies the schema.
    pub fn matches(&self, document: &Document) -> bool {
        self.root.matches_document(document)
    }

    /// Why `document` fails the schema, as mongod's document validation error describes it
    /// (`{operatorName: "$jsonSchema", title?, description?, schemaRulesNotSatisfied}`).
    pub fn failure_details(&self, document: &Document) -> Document {
        details::schema_failure(&self.root, document)
    }
}

mod details;

#[derive(Clone, Debug)]
enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

#[derive(Clone, Debug)]
enum Items {
    Each(Box<Schema>),
    Tuple(Vec<Schema>),
}

#[derive(Clone, Debug)]
enum Dependency {
    Fields(Vec<String>),
    Schema(Box<Schema>),
}

/// One accepted type: a `bsonType` alias (mongod's type names, `number` for any number), or a
/// JSON `type` name mapped to BSON types.
#[derive(Clone, Debug, PartialEq)]
enum TypeName {
    Bson(String),
    Number,
}

#[derive(Clone, Debug, Default)]
struct Schema {
    types: Option<Vec<TypeName>>,
    properties: Vec<(String, Schema)>,
    required: Vec<String>,
    additional_properties: Option<Additional>,
    pattern_properties: Vec<(Regex, Schema)>,
    min_properties: Option<usize>,
    max_properties: Option<usize>,
    dependencies: Vec<(String, Dependency)>,
    items: Option<Items>,
    additional_items: Option<Additional>,
    min_items: Option<usize>,
    max_items: Option<usize>,
    unique_items: bool,
    minimum: Option<(Bson, bool)>,
    maximum: Option<(Bson, bool)>,
    multiple_of: Option<Number>,
    min_length: Option<usize>,
    max_length: Option<usize>,
    pattern: Option<Regex>,
    enumeration: Option<Vec<Bson>>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
    /// The subschema as given: `specifiedAs`, `title` and `description` in validation errors.
    source: Document,
}

fn failed_to_parse(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::FailedToParse, message)
}

fn must_be(keyword: &str, what: &str) -> CommandError {
    CommandError::type_mismatch(format!("$jsonSchema keyword '{keyword}' must be {what}"))
}

impl Schema {
    fn parse(schema: &Document) -> CommandResult<Schema> {
        if schema.contains_key("type") && schema.contains_key("bsonType") {
            return Err(failed_to_parse(
                "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
            ));
        }
        let mut parsed = Schema {
            source: schema.clone(),
            ..Schema::default()
        };
        for (keyword, value) in schema {
            match keyword.as_str() {
                "type" => parsed.types = Some(parse_types(keyword, value, json_type)?),
                "bsonType" => parsed.types = Some(parse_types(keyword, value, bson_type)?),
                "properties" => {
                    let properties = document(keyword, value)?;
                    for (name, property) in properties {
                        let Bson::Document(property) = property else {
                            return Err(must_be(&format!("properties.{name}"), "an object"));
                        };
                        parsed
                            .properties
                            .push((name.clone(), Schema::parse(property)?));
                    }
                }
                "required" => {
                    let Bson::Array(names) = value else {
                        return Err(must_be(keyword, "an array"));
                    };
                    if names.is_empty() {
                        return Err(failed_to_parse(
                            "$jsonSchema keyword 'required' cannot be an empty array",
                        ));
                    }
                    for name in names {
                        let Bson::String(name) = name else {
                            return Err(must_be(keyword, "an array of strings"));
                        };
                        if parsed.required.contains(name) {
                            return Err(failed_to_parse(
                                "$jsonSchema keyword 'required' array cannot contain duplicate values",
                            ));
                        }
                        parsed.required.push(name.clone());
                    }
                }
                "additionalProperties" => {
                    parsed.additional_properties = Some(parse_additional(keyword, value)?)
                }
                "patternProperties" => {
                    for (pattern, property) in document(keyword, value)? {
                        let Bson::Document(property) = property else {
                            return Err(must_be(
                                &format!("patternProperties.{pattern}"),
                                "an object",
                            ));
                        };
                        parsed
                            .pattern_properties
                            .push((compile(keyword, pattern)?, Schema::parse(property)?));
                    }
                }
                "minProperties" => parsed.min_properties = Some(count(keyword, value)?),
                "maxProperties" => parsed.max_properties = Some(count(keyword, value)?),
                "dependencies" => {
                    for (name, dependency) in document(keyword, value)? {
                        let dependency = match dependency {
                            Bson::Document(schema) => {
                                Dependency::Schema(Box::new(Schema::parse(schema)?))
                            }
                            Bson::Array(fields) => Dependency::Fields(
                                fields
                                    .iter()
                                    .map(|field| match field {
                                        Bson::String(field) => Ok(field.clone()),
                                        _ => Err(must_be(
                                            &format!("dependencies.{name}"),
                                            "an array of strings",
                                        )),
                                    })
                                    .collect::<CommandResult<_>>()?,
                            ),
                            _ => {
                                return Err(must_be(
                                    &format!("dependencies.{name}"),
                                    "an object or an array",
                                ))
                            }
                        };
                        parsed.dependencies.push((name.clone(), dependency));
                    }
                }
                "items" => {
                    parsed.items = Some(match value {
                        Bson::Document(schema) => Items::Each(Box::new(Schema::parse(schema)?)),
                        Bson::Array(schemas) => Items::Tuple(schema_list(keyword, schemas)?),
                        _ => return Err(must_be(keyword, "an array or an object")),
                    })
                }
                "additionalItems" => {
                    parsed.additional_items = Some(parse_additional(keyword, value)?)
                }
                "minItems" => parsed.min_items = Some(count(keyword, value)?),
                "maxItems" => parsed.max_items = Some(count(keyword, value)?),
                "uniqueItems" => {
                    let Bson::Boolean(unique) = value else {
                        return Err(must_be(keyword, "a boolean"));
                    };
                    parsed.unique_items = *unique;
                }
                "minimum" => parsed.minimum = Some((number(keyword, value)?, false)),
                "maximum" => parsed.maximum = Some((number(keyword, value)?, false)),
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let Bson::Boolean(_) = value else {
                        return Err(must_be(keyword, "a boolean"));
                    };
                }
                "multipleOf" => {
                    let divisor =
                        Number::from_bson(value).ok_or_else(|| must_be(keyword, "a number"))?;
                    if divisor.is_zero() || divisor.to_f64() < 0.0 || divisor.is_nan() {
                        return Err(failed_to_parse(
                            "$jsonSchema keyword 'multipleOf' must have a positive value",
                        ));
                    }
                    parsed.multiple_of = Some(divisor);
                }
                "minLength" => parsed.min_length = Some(count(keyword, value)?),
                "maxLength" => parsed.max_length = Some(count(keyword, value)?),
                "pattern" => {
                    let Bson::String(pattern) = value else {
                        return Err(must_be(keyword, "a string"));
                    };
                    parsed.pattern = Some(compile(keyword, pattern)?);
                }
                "enum" => {
                    let Bson::Array(values) = value else {
                        return Err(must_be(keyword, "an array"));
                    };
                    if values.is_empty() {
                        return Err(failed_to_parse(
                            "$jsonSchema keyword 'enum' cannot be an empty array",
                        ));
                    }
                    parsed.enumeration = Some(values.clone());
                }
                "allOf" | "anyOf" | "oneOf" => {
                    let Bson::Array(schemas) = value else {
                        return Err(must_be(keyword, "an array"));
                    };
                    if schemas.is_empty() {
                        return Err(failed_to_parse(format!(
                            "$jsonSchema keyword '{keyword}' must be a non-empty array"
                        )));
                    }
                    let schemas = schema_list(keyword, schemas)?;
                    match keyword.as_str() {
                        "allOf" => parsed.all_of = schemas,
                        "anyOf" => parsed.any_of = schemas,
                        _ => parsed.one_of = schemas,
                    }
                }
                "not" => {
                    let Bson::Document(schema) = value else {
                        return Err(must_be(keyword, "an object"));
                    };
                    parsed.not = Some(Box::new(Schema::parse(schema)?));
                }
                "title" | "description" => {
                    let Bson::String(_) = value else {
                        return Err(must_be(keyword, "a string"));
                    };
                }
                "$ref" | "$schema" | "default" | "definitions" | "format" | "id" => {
                    return Err(failed_to_parse(format!(
                        "$jsonSchema keyword '{keyword}' is not currently supported"
                    )))
                }
                unknown => {
                    return Err(failed_to_parse(format!(
                        "Unknown $jsonSchema keyword: {unknown}"
                    )))
                }
            }
        }
        for (keyword, bound) in [
            ("exclusiveMinimum", &mut parsed.minimum),
            ("exclusiveMaximum", &mut parsed.maximum),
        ] {
            if let Some(Bson::Boolean(exclusive)) = schema.get(keyword) {
                match bound {
                    Some((_, flag)) => *flag = *exclusive,
                    None if *exclusive => {
                        return Err(failed_to_parse(format!(
                            "$jsonSchema keyword '{}' must be a present if {keyword} is present",
                            if keyword == "exclusiveMinimum" {
                                "minimum"
                            } else {
                                "maximum"
                            }
                        )))
                    }
                    None => {}
                }
            }
        }
        Ok(parsed)
    }

    /// Whether `document` satisfies the schema (the root, and `dependencies` schemas, see the
    /// object itself; it is not copied unless an `enum` must compare it whole).
    fn matches_document(&self, document: &Document) -> bool {
        if self.enumeration.is_some() && !self.in_enum(&Bson::Document(document.clone())) {
            return false;
        }
        self.accepts_type(|name| name == "object", false)
            && self.matches_object(document)
            && self.combinators(|schema| schema.matches_document(document))
    }

    fn matches(&self, value: &Bson) -> bool {
        if let Bson::Document(document) = value {
            return self.matches_document(document);
        }
        if !self.in_enum(value) {
            return false;
        }
        let name = type_name(value);
        let is_number = Number::from_bson(value).is_some();
        let kind_ok = match value {
            Bson::Array(elements) => self.matches_array(elements),
            Bson::String(text) => self.matches_string(text),
            number if is_number => self.matches_number(number),
            _ => true,
        };
        self.accepts_type(|alias| alias == name, is_number)
            && kind_ok
            && self.combinators(|schema| schema.matches(value))
    }

    fn in_enum(&self, value: &Bson) -> bool {
        self.enumeration
            .as_ref()
            .is_none_or(|values| values.iter().any(|allowed| values_equal(allowed, value)))
    }

    /// Whether `type`/`bsonType` (if given) accepts a value whose type alias `is` names, or
    /// any number when `is_number`.
    fn accepts_type(&self, is: impl Fn(&str) -> bool, is_number: bool) -> bool {
        self.types.as_ref().is_none_or(|types| {
            types.iter().any(|accepted| match accepted {
                TypeName::Number => is_number,
                TypeName::Bson(alias) => is(alias),
            })
        })
    }

    /// `allOf`, `anyOf`, `oneOf` and `not`, with `test` applying a subschema to the value.
    fn combinators(&self, test: impl Fn(&Schema) -> bool) -> bool {
        self.all_of.iter().all(&test)
            && (self.any_of.is_empty() || self.any_of.iter().any(&test))
            && (self.one_of.is_empty()
                || self.one_of.iter().filter(|schema| test(schema)).count() == 1)
            && self.not.as_ref().is_none_or(|schema| !test(schema))
    }

    fn matches_object(&self, object: &Document) -> bool {
        if self.required.iter().any(|name| !object.contains_key(name)) {
            return false;
        }
        if self.min_properties.is_some_and(|min| object.len() < min)
            || self.max_properties.is_some_and(|max| object.len() > max)
        {
            return false;
        }
        for (name, value) in object {
            let mut described = false;
            if let Some((_, schema)) = self.properties.iter().find(|(known, _)| known == name) {
                described = true;
                if !schema.matches(value) {
                    return false;
                }
            }
            for (pattern, schema) in &self.pattern_properties {
                if pattern.is_match(name) {
                    described = true;
                    if !schema.matches(value) {
                        return false;
                    }
                }
            }
            if !described {
                match &self.additional_properties {
                    Some(Additional::Allowed(false)) => return false,
                    Some(Additional::Schema(schema)) if !schema.matches(value) => return false,
                    _ => {}
                }
            }
        }
        self.dependencies
            .iter()
            .filter(|(name, _)| object.contains_key(name))
            .all(|(_, dependency)| match dependency {
                Dependency::Fields(fields) => fields.iter().all(|field| object.contains_key(field)),
                Dependency::Schema(schema) => schema.matches_document(object),
            })
    }

    fn matches_array(&self, elements: &[Bson]) -> bool {
        if self.min_items.is_some_and(|min| elements.len() < min)
            || self.max_items.is_some_and(|max| elements.len() > max)
        {
            return false;
        }
        if self.unique_items {
            // Sorted in BSON order, equal elements are neighbours: O(n log n) for any array.
            let mut sorted: Vec<&Bson> = elements.iter().collect();
            sorted.sort_by(|a, b| compare_values(a, b));
            if sorted.windows(2).any(|pair| values_equal(pair[0], pair[1])) {
                return false;
            }
        }
        match &self.items {
            Some(Items::Each(schema)) => elements.iter().all(|element| schema.matches(element)),
            Some(Items::Tuple(schemas)) => {
                let positional = elements
                    .iter()
                    .zip(schemas)
                    .all(|(element, schema)| schema.matches(element));
                let extra = elements.get(schemas.len()..).unwrap_or_default();
                positional
                    && match &self.additional_items {
                        Some(Additional::Allowed(false)) => extra.is_empty(),
                        Some(Additional::Schema(schema)) => {
                            extra.iter().all(|element| schema.matches(element))
                        }
                        _ => true,
                    }
            }
            None => true,
        }
    }

    fn matches_string(&self, text: &str) -> bool {
        let length = text.chars().count();
        !(self.min_length.is_some_and(|min| length < min)
            || self.max_length.is_some_and(|max| length > max)
            || self
                .pattern
                .as_ref()
                .is_some_and(|pattern| !pattern.is_match(text)))
    }

    fn matches_number(&self, value: &Bson) -> bool {
        let within = |bound: &Option<(Bson, bool)>, below: bool| {
            bound.as_ref().is_none_or(|(limit, exclusive)| {
                let order = compare_values(value, limit);
                match (below, exclusive) {
                    (true, false) => order.is_ge(),
                    (true, true) => order.is_gt(),
                    (false, false) => order.is_le(),
                    (false, true) => order.is_lt(),
                }
            })
        };
        within(&self.minimum, true)
            && within(&self.maximum, false)
            && self
                .multiple_of
                .is_none_or(|divisor| is_multiple(value, divisor))
    }
}

/// Whether `value` is an integral multiple of `divisor` (exactly for integers, by the double
/// remainder otherwise).
fn is_multiple(value: &Bson, divisor: Number) -> bool {
    let Some(value) = Number::from_bson(value) else {
        return false;
    };
    match (value.to_exact_i64(), divisor.to_exact_i64()) {
        (Some(value), Some(divisor)) if divisor != 0 => value % divisor == 0,
        _ => {
            let remainder = value.to_f64() % divisor.to_f64();
            remainder == 0.0
        }
    }
}

fn json_type(name: &str) -> CommandResult<Vec<TypeName>> {
    let bson = |names: &[&str]| {
        names
            .iter()
            .map(|name| TypeName::Bson(name.to_string()))
            .collect()
    };
    Ok(match name {
        "object" => bson(&["object"]),
        "array" => bson(&["array"]),
        "number" => vec![TypeName::Number],
        "boolean" => bson(&["bool"]),
        "string" => bson(&["string"]),
        "null" => bson(&["null"]),
        "integer" => {
            return Err(failed_to_parse(
                "$jsonSchema type 'integer' is not currently supported.",
            ))
        }
        other => {
            return Err(CommandError::bad_value(format!(
                "Unknown type name alias: {other}"
            )))
        }
    })
}

fn bson_type(name: &str) -> CommandResult<Vec<TypeName>> {
    if name == "number" {
        return Ok(vec![TypeName::Number]);
    }
    if TYPE_ALIASES.iter().any(|(alias, _)| *alias == name) {
        return Ok(vec![TypeName::Bson(name.to_string())]);
    }
    Err(CommandError::bad_value(format!(
        "Unknown type name alias: {name}"
    )))
}

/// `type`/`bsonType`: one name or a non-empty array of distinct names.
fn parse_types(
    keyword: &str,
    value: &Bson,
    resolve: fn(&str) -> CommandResult<Vec<TypeName>>,
) -> CommandResult<Vec<TypeName>> {
    let names: Vec<&str> = match value {
        Bson::String(name) => vec![name.as_str()],
        Bson::Array(names) if !names.is_empty() => names
            .iter()
            .map(|name| match name {
                Bson::String(name) => Ok(name.as_str()),
                _ => Err(must_be(keyword, "an array of strings")),
            })
            .collect::<CommandResult<_>>()?,
        Bson::Array(_) => {
            return Err(failed_to_parse(format!(
                "$jsonSchema keyword '{keyword}' must name at least one type"
            )))
        }
        _ => return Err(must_be(keyword, "a string or an array of strings")),
    };
    let mut types = Vec::new();
    for name in names {
        types.extend(resolve(name)?);
    }
    Ok(types)
}

fn document<'a>(keyword: &str, value: &'a Bson) -> CommandResult<&'a Document> {
    match value {
        Bson::Document(document) => Ok(document),
        _ => Err(must_be(keyword, "an object")),
    }
}

fn schema_list(keyword: &str, schemas: &[Bson]) -> CommandResult<Vec<Schema>> {
    schemas
        .iter()
        .map(|schema| match schema {
            Bson::Document(schema) => Schema::parse(schema),
            _ => Err(must_be(keyword, "an array of objects")),
        })
        .collect()
}

fn parse_additional(keyword: &str, value: &Bson) -> CommandResult<Additional> {
    match value {
        Bson::Boolean(allowed) => Ok(Additional::Allowed(*allowed)),
        Bson::Document(schema) => Ok(Additional::Schema(Box::new(Schema::parse(schema)?))),
        _ => Err(must_be(keyword, "a boolean or an object")),
    }
}

/// A non-negative integral count (`minItems`, `maxLength`, …).
fn count(keyword: &str, value: &Bson) -> CommandResult<usize> {
    let number = Number::from_bson(value).ok_or_else(|| must_be(keyword, "a number"))?;
    match number.to_exact_i64() {
        Some(count) if count >= 0 => Ok(usize::try_from(count).unwrap_or(usize::MAX)),
        Some(_) => Err(failed_to_parse(format!(
            "$jsonSchema keyword '{keyword}' must be a non-negative integer"
        ))),
        None => Err(failed_to_parse(format!(
            "$jsonSchema keyword '{keyword}' must be an integer"
        ))),
    }
}

fn number(keyword: &str, value: &Bson) -> CommandResult<Bson> {
    match Number::from_bson(value) {
        Some(_) => Ok(value.clone()),
        None => Err(must_be(keyword, "a number")),
    }
}

fn compile(keyword: &str, pattern: &str) -> CommandResult<Regex> {
    Regex::new(pattern).map_err(|error| {
        CommandError::bad_value(format!(
            "$jsonSchema keyword '{keyword}' has an invalid regular expression: {error}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn schema(schema: Document) -> JsonSchema {
        JsonSchema::parse(&Bson::Document(schema)).expect("valid schema")
    }

    #[test]
    fn the_documentation_example_accepts_and_rejects() {
        // From the $jsonSchema documentation's example validator.
        let student = schema(doc! {
            "required": ["name", "year", "major", "address"],
            "properties": {
                "name": {"bsonType": "string", "description": "must be a string and is required"},
                "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017},
                "major": {"enum": ["Math", "English", "Computer Science", "History", Bson::Null]},
                "gpa": {"bsonType": ["double"]},
                "address": {
                    "bsonType": "object",
                    "required": ["city"],
                    "properties": {"street": {"bsonType": "string"}, "city": {"bsonType": "string"}},
                },
            },
        });
        let good = doc! {"name": "Alice", "year": 2019, "major": "History", "gpa": 3.0, "address": {"city": "NYC", "street": "33rd Street"}};
        assert!(student.matches(&good));
        let mut wrong = good.clone();
        wrong.insert("gpa", 3);
        assert!(!student.matches(&wrong), "gpa must be a double");
        let mut early = good.clone();
        early.insert("year", 2016);
        assert!(!student.matches(&early));
        let mut missing = good.clone();
        missing.remove("address");
        assert!(!student.matches(&missing));
        let mut no_city = good;
        no_city.insert("address", doc! {"street": "x"});
        assert!(!student.matches(&no_city));
    }

    #[test]
    fn keywords_constrain_only_their_own_kind() {
        let numbers = schema(
            doc! {"properties": {"a": {"minimum": 5, "exclusiveMinimum": true, "multipleOf": 2}}},
        );
        assert!(numbers.matches(&doc! {"a": 6}));
        assert!(!numbers.matches(&doc! {"a": 5}));
        assert!(!numbers.matches(&doc! {"a": 7}));
        assert!(numbers.matches(&doc! {"a": "text"}));
        assert!(numbers.matches(&doc! {}));
        let strings =
            schema(doc! {"properties": {"s": {"minLength": 2, "maxLength": 3, "pattern": "^a"}}});
        assert!(strings.matches(&doc! {"s": "ab"}));
        assert!(!strings.matches(&doc! {"s": "abcd"}));
        assert!(!strings.matches(&doc! {"s": "ba"}));
        assert!(strings.matches(&doc! {"s": 1}));
        let arrays = schema(doc! {"properties": {"l": {
            "items": [{"bsonType": "int"}, {"bsonType": "string"}],
            "additionalItems": false, "uniqueItems": true, "minItems": 1,
        }}});
        assert!(arrays.matches(&doc! {"l": [1, "x"]}));
        assert!(!arrays.matches(&doc! {"l": [1, "x", 2]}));
        assert!(!arrays.matches(&doc! {"l": ["x"]}));
        assert!(!arrays.matches(&doc! {"l": []}));
        let objects = schema(doc! {
            "properties": {"a": {}}, "patternProperties": {"^x": {"bsonType": "int"}},
            "additionalProperties": false, "dependencies": {"a": ["xb"]},
        });
        assert!(objects.matches(&doc! {"a": 1, "xb": 2}));
        assert!(!objects.matches(&doc! {"a": 1}));
        assert!(!objects.matches(&doc! {"xb": "s"}));
        assert!(!objects.matches(&doc! {"other": 1}));
        let logic = schema(doc! {"properties": {"v": {
            "oneOf": [{"bsonType": "int"}, {"minimum": 0}], "not": {"enum": [7]},
        }}});
        assert!(logic.matches(&doc! {"v": -1}));
        assert!(!logic.matches(&doc! {"v": 3}), "both oneOf branches");
        assert!(logic.matches(&doc! {"v": 2.5}));
        let json_types = schema(doc! {"properties": {"n": {"type": ["number", "null"]}}});
        assert!(json_types.matches(&doc! {"n": 1_i64}));
        assert!(json_types.matches(&doc! {"n": Bson::Null}));
        assert!(!json_types.matches(&doc! {"n": "1"}));
    }

    #[test]
    fn schemas_are_refused_as_mongod_refuses_them() {
        let error = |schema: Document| {
            let error = JsonSchema::parse(&Bson::Document(schema)).unwrap_err();
            (error.code.code(), error.errmsg)
        };
        assert_eq!(
            error(doc! {"foo": 1}),
            (9, "Unknown $jsonSchema keyword: foo".into())
        );
        assert_eq!(error(doc! {"format": "date"}).0, 9);
        assert_eq!(error(doc! {"type": "object", "bsonType": "object"}).0, 9);
        assert_eq!(error(doc! {"required": 1}).0, 14);
        assert_eq!(error(doc! {"required": []}).0, 9);
        assert_eq!(error(doc! {"bsonType": "bogus"}).0, 2);
        assert_eq!(error(doc! {"minItems": -1}).0, 9);
        assert_eq!(error(doc! {"exclusiveMinimum": true}).0, 9);
        assert_eq!(error(doc! {"properties": {"a": {"maxLength": "x"}}}).0, 14);
    }
}
