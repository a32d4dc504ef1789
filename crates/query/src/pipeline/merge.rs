//! `$merge`: the specification (`into`, `on`, `whenMatched`, `whenNotMatched`, `let`) parsed as
//! mongod parses it, and the write each output document becomes: an insert, or an update
//! statement the caller runs through the normal write path. Update statements are documents
//! here (nothing of `crate::update` is used): a `whenMatched` pipeline is checked with
//! [`Pipeline::parse_update`], the parse a pipeline-style update uses.
//!
//! Invariants:
//! - The writes are mongod's merge strategies: `replace` is a replacement, `merge` a `$set` of
//!   the whole document, `keepExisting` a `$setOnInsert`, a pipeline a pipeline update seeing
//!   the `let` values (`$$new` by default) as constants; upserts when `whenNotMatched` is
//!   `insert` (a pipeline inserts the output document itself); `whenMatched: fail` is an insert.
//! - An output document is matched on its `on` values, which must be present and not null,
//!   undefined or arrays (51132, 51185); `_id` is generated only when `on` includes it.
//! - The supported mode combinations are mongod's (51181 otherwise).

use bson::{doc, oid::ObjectId, Bson, Document};

use super::Pipeline;
use crate::expr::command_variables::{with_command_variables, CommandVariables};
use crate::expr::{validate_variable_name, Expr, PipelineContext};
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// What happens to an output document that matches a target document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    /// An update pipeline (its stages).
    Pipeline(Vec<Bson>),
}

/// What happens to an output document that matches none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

impl WhenMatched {
    fn name(&self) -> &'static str {
        match self {
            WhenMatched::Replace => "replace",
            WhenMatched::KeepExisting => "keepExisting",
            WhenMatched::Merge => "merge",
            WhenMatched::Fail => "fail",
            WhenMatched::Pipeline(_) => "pipeline",
        }
    }
}

impl WhenNotMatched {
    fn name(self) -> &'static str {
        match self {
            WhenNotMatched::Insert => "insert",
            WhenNotMatched::Discard => "discard",
            WhenNotMatched::Fail => "fail",
        }
    }
}

/// A parsed `$merge`.
#[derive(Clone, Debug)]
pub struct MergeSpec {
    /// The target's database (the pipeline's when `None`) and collection.
    pub db: Option<String>,
    pub coll: String,
    /// The fields output documents are matched on (`_id` by default).
    on: Vec<String>,
    /// Whether `on` was given, so that a unique index must support it.
    on_given: bool,
    when_matched: WhenMatched,
    when_not_matched: WhenNotMatched,
    /// A pipeline's `let` variables, evaluated against each output document.
    lets: Vec<(String, Expr)>,
}

/// What one output document becomes.
#[derive(Debug, PartialEq)]
pub enum MergeWrite {
    Insert(Document),
    /// An update statement (`q`, `u`, `upsert`, `c`); `strict`: it must match a document.
    Update {
        statement: Document,
        strict: bool,
    },
    /// An update statement, and the document to insert when it matches nothing.
    UpdateOrInsert {
        statement: Document,
        document: Document,
    },
}

fn merge_error(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

fn unknown_field(field: &str) -> CommandError {
    CommandError::idl_unknown_field("$merge", field)
}

fn enumeration(field: &str, value: &str) -> CommandError {
    CommandError::bad_value(format!(
        "Enumeration value '{value}' for field '$merge.{field}' is not a valid value."
    ))
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::idl_wrong_type("$merge", field, type_name(value), expected)
}

/// `into`: a collection name, or `{db, coll}`.
fn parse_into(value: &Bson) -> CommandResult<(Option<String>, String)> {
    match value {
        Bson::String(coll) => Ok((None, coll.clone())),
        Bson::Document(target) => {
            let (mut db, mut coll) = (None, None);
            for (field, part) in target {
                match (field.as_str(), part) {
                    ("db", Bson::String(text)) => db = Some(text.clone()),
                    ("coll", Bson::String(text)) => coll = Some(text.clone()),
                    ("db" | "coll", other) => {
                        return Err(wrong_type(&format!("into.{field}"), other, "string"))
                    }
                    (other, _) => return Err(unknown_field(&format!("into.{other}"))),
                }
            }
            let coll = coll.ok_or_else(|| {
                merge_error(
                    ErrorCode::Location40414,
                    "BSON field '$merge.into.coll' is missing but a required field",
                )
            })?;
            Ok((db, coll))
        }
        other => Err(merge_error(
            ErrorCode::Location51178,
            format!(
                "$merge 'into' field  must be either a string or an object, but found {}",
                type_name(other)
            ),
        )),
    }
}

/// `on`: a field or a non-empty array of distinct fields.
fn parse_on(value: &Bson) -> CommandResult<Vec<String>> {
    let fields = match value {
        Bson::String(field) => vec![field.clone()],
        Bson::Array(items) if items.is_empty() => {
            return Err(merge_error(
                ErrorCode::Location51187,
                "If explicitly specifying $merge 'on', must include at least one field",
            ))
        }
        Bson::Array(items) => items
            .iter()
            .map(|item| match item {
                Bson::String(field) => Ok(field.clone()),
                other => Err(merge_error(
                    ErrorCode::Location51134,
                    format!(
                        "$merge 'on' array elements must be strings, but found {}",
                        type_name(other)
                    ),
                )),
            })
            .collect::<CommandResult<_>>()?,
        other => {
            return Err(merge_error(
                ErrorCode::Location51186,
                format!(
                    "$merge 'on' field must be either a string or an array of strings, but \
                     found {}",
                    type_name(other)
                ),
            ))
        }
    };
    for (index, field) in fields.iter().enumerate() {
        if fields[..index].contains(field) {
            return Err(merge_error(
                ErrorCode::Location31465,
                format!("Found a duplicate field '{field}'"),
            ));
        }
    }
    Ok(fields)
}

fn parse_when_matched(value: &Bson) -> CommandResult<WhenMatched> {
    match value {
        Bson::String(mode) => match mode.as_str() {
            "replace" => Ok(WhenMatched::Replace),
            "keepExisting" => Ok(WhenMatched::KeepExisting),
            "merge" => Ok(WhenMatched::Merge),
            "fail" => Ok(WhenMatched::Fail),
            other => Err(enumeration("whenMatched", other)),
        },
        Bson::Array(stages) => Ok(WhenMatched::Pipeline(stages.clone())),
        other => Err(merge_error(
            ErrorCode::Location51191,
            format!(
                "$merge 'whenMatched' field must be either a string or an array, but found {}",
                type_name(other)
            ),
        )),
    }
}

fn parse_when_not_matched(value: &Bson) -> CommandResult<WhenNotMatched> {
    match value {
        Bson::String(mode) => match mode.as_str() {
            "insert" => Ok(WhenNotMatched::Insert),
            "discard" => Ok(WhenNotMatched::Discard),
            "fail" => Ok(WhenNotMatched::Fail),
            other => Err(enumeration("whenNotMatched", other)),
        },
        other => Err(wrong_type("whenNotMatched", other, "string")),
    }
}

/// mongod's merge strategies: every other combination is refused.
fn supported_modes(when_matched: &WhenMatched, when_not_matched: WhenNotMatched) -> bool {
    match when_matched {
        WhenMatched::Replace | WhenMatched::Merge | WhenMatched::Pipeline(_) => true,
        WhenMatched::KeepExisting | WhenMatched::Fail => when_not_matched == WhenNotMatched::Insert,
    }
}

impl MergeSpec {
    pub fn parse(spec: &Bson) -> CommandResult<MergeSpec> {
        let arguments = match spec {
            Bson::String(coll) => doc! {"into": coll.as_str()},
            Bson::Document(arguments) => arguments.clone(),
            other => {
                return Err(CommandError::type_mismatch(format!(
                    "$merge requires a string or object argument, but found {}",
                    type_name(other)
                )))
            }
        };
        let mut into = None;
        let mut on = None;
        let mut when_matched = WhenMatched::Merge;
        let mut when_not_matched = WhenNotMatched::Insert;
        let mut let_spec: Option<&Document> = None;
        for (name, value) in &arguments {
            match name.as_str() {
                "into" => into = Some(parse_into(value)?),
                "on" => on = Some(parse_on(value)?),
                "whenMatched" => when_matched = parse_when_matched(value)?,
                "whenNotMatched" => when_not_matched = parse_when_not_matched(value)?,
                "let" => match value {
                    Bson::Document(variables) => let_spec = Some(variables),
                    // `let: null` is the same as no `let`.
                    Bson::Null => {}
                    other => return Err(wrong_type("let", other, "object")),
                },
                // Sharding internals mongod accepts from a router: not a client's.
                other => return Err(unknown_field(other)),
            }
        }
        let (db, coll) = into.ok_or_else(|| {
            merge_error(
                ErrorCode::Location40414,
                "BSON field '$merge.into' is missing but a required field",
            )
        })?;
        if !supported_modes(&when_matched, when_not_matched) {
            return Err(merge_error(
                ErrorCode::Location51181,
                format!(
                    "Combination of $merge modes 'whenMatched: {}' and 'whenNotMatched: {}' is \
                     not supported",
                    when_matched.name(),
                    when_not_matched.name()
                ),
            ));
        }
        let lets = match &when_matched {
            WhenMatched::Pipeline(stages) => parse_pipeline_lets(let_spec, stages)?,
            _ if let_spec.is_some() => {
                return Err(merge_error(
                    ErrorCode::Location51199,
                    format!(
                        "Cannot use 'let' variables with 'whenMatched: {}' mode",
                        when_matched.name()
                    ),
                ))
            }
            _ => Vec::new(),
        };
        let on_given = on.is_some();
        Ok(MergeSpec {
            db,
            coll,
            on: on.unwrap_or_else(|| vec!["_id".to_string()]),
            on_given,
            when_matched,
            when_not_matched,
            lets,
        })
    }

    /// The `on` fields a unique index of the target must support, when they were given.
    pub fn explicit_on(&self) -> Option<&[String]> {
        self.on_given.then_some(self.on.as_slice())
    }

    /// What `document` (an output document) becomes.
    pub fn write_for(
        &self,
        mut document: Document,
        context: &PipelineContext,
    ) -> CommandResult<MergeWrite> {
        if self.on.iter().any(|field| field == "_id") && !document.contains_key("_id") {
            document.insert("_id", ObjectId::new());
        }
        let query = self.on_values(&document)?;
        let upsert = self.when_not_matched == WhenNotMatched::Insert;
        let strict = self.when_not_matched == WhenNotMatched::Fail;
        let update = match &self.when_matched {
            WhenMatched::Fail => return Ok(MergeWrite::Insert(document)),
            WhenMatched::Replace => Bson::Document(document),
            WhenMatched::Merge => Bson::Document(doc! {"$set": document}),
            WhenMatched::KeepExisting => Bson::Document(doc! {"$setOnInsert": document}),
            WhenMatched::Pipeline(stages) => {
                let mut constants = Document::new();
                for (name, expression) in &self.lets {
                    let value = expression
                        .evaluate_in(&document, context)?
                        .unwrap_or(Bson::Null);
                    constants.insert(name.as_str(), doc! {"$literal": value});
                }
                let statement = doc! {
                    "q": query,
                    "u": stages.clone(),
                    "upsert": false,
                    "c": constants,
                };
                return Ok(if upsert {
                    MergeWrite::UpdateOrInsert {
                        statement,
                        document,
                    }
                } else {
                    MergeWrite::Update { statement, strict }
                });
            }
        };
        Ok(MergeWrite::Update {
            statement: doc! {"q": query, "u": update, "upsert": upsert},
            strict,
        })
    }

    /// `{field: {$eq: value}}` for each `on` field of `document`.
    fn on_values(&self, document: &Document) -> CommandResult<Document> {
        let mut query = Document::new();
        for field in &self.on {
            let mut current: Option<&Bson> = None;
            for (depth, part) in field.split('.').enumerate() {
                current = match (depth, current) {
                    (0, _) => document.get(part),
                    (_, Some(Bson::Document(inner))) => inner.get(part),
                    _ => None,
                };
            }
            match current {
                None | Some(Bson::Null | Bson::Undefined) => {
                    return Err(merge_error(
                        ErrorCode::Location51132,
                        format!(
                            "$merge write error: 'on' field '{field}' cannot be missing, null, \
                             undefined or an array"
                        ),
                    ))
                }
                Some(Bson::Array(_)) => {
                    return Err(merge_error(
                        ErrorCode::Location51185,
                        format!(
                            "$merge write error: 'on' field '{field}' from source document \
                             cannot be an array"
                        ),
                    ))
                }
                Some(value) => {
                    query.insert(field.as_str(), doc! {"$eq": value.clone()});
                }
            }
        }
        Ok(query)
    }
}

/// A pipeline's `let` variables (`{new: "$$ROOT"}` by default, and `new` always bound to the
/// output document when it inserts), checked by parsing the pipeline with them in scope.
fn parse_pipeline_lets(
    let_spec: Option<&Document>,
    stages: &[Bson],
) -> CommandResult<Vec<(String, Expr)>> {
    let root = Bson::String("$$ROOT".to_string());
    let mut lets = Vec::new();
    match let_spec {
        None => lets.push(("new".to_string(), Expr::parse(&root)?)),
        Some(variables) => {
            for (name, expression) in variables {
                if name == "new" && *expression != root {
                    return Err(merge_error(
                        ErrorCode::Location51273,
                        "'let' may not define a value for the reserved 'new' variable other \
                         than '$$ROOT'",
                    ));
                }
                validate_variable_name(name)?;
                lets.push((name.clone(), Expr::parse(expression)?));
            }
            if !variables.contains_key("new") {
                lets.push(("new".to_string(), Expr::parse(&root)?));
            }
        }
    }
    let scope = CommandVariables::in_scope()
        .unwrap_or_else(|| CommandVariables::at(bson::DateTime::now()))
        .with_values(lets.iter().map(|(name, _)| (name.clone(), None)).collect());
    with_command_variables(&scope, || Pipeline::parse_update(stages))?;
    Ok(lets)
}

#[cfg(test)]
mod tests {
    //! Cases from mongod's jstests/aggregation/sources/merge/*.js (on_fields_validation.js,
    //! all_modes.js) and document_source_merge.cpp's error codes.
    use super::*;
    use crate::expr::fixtures::context;

    fn parse_error(spec: Bson) -> i32 {
        MergeSpec::parse(&spec)
            .expect_err("the spec should be refused")
            .code
            .code()
    }

    #[test]
    fn specifications_are_refused_with_mongod_codes() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::Int32(1), 14),
            (Bson::Document(doc! {"on": "_id"}), 40414),
            (Bson::Document(doc! {"into": 1}), 51178),
            (Bson::Document(doc! {"into": "t", "bogus": 1}), 40415),
            (Bson::Document(doc! {"into": "t", "on": 2.5}), 51186),
            (Bson::Document(doc! {"into": "t", "on": {"_id": 1}}), 51186),
            (Bson::Document(doc! {"into": "t", "on": []}), 51187),
            (
                Bson::Document(doc! {"into": "t", "on": ["hashed", 1]}),
                51134,
            ),
            (Bson::Document(doc! {"into": "t", "on": [["_id"]]}), 51134),
            (
                Bson::Document(doc! {"into": "t", "on": [Bson::Null]}),
                51134,
            ),
            (Bson::Document(doc! {"into": "t", "on": ["a", "a"]}), 31465),
            (
                Bson::Document(doc! {"into": "t", "whenMatched": "fail", "whenNotMatched": "fail"}),
                51181,
            ),
            (
                Bson::Document(
                    doc! {"into": "t", "whenMatched": "keepExisting", "whenNotMatched": "fail"},
                ),
                51181,
            ),
            (
                Bson::Document(
                    doc! {"into": "t", "whenMatched": "fail", "whenNotMatched": "discard"},
                ),
                51181,
            ),
            (
                Bson::Document(doc! {"into": "t", "whenMatched": "bogus"}),
                2,
            ),
            (Bson::Document(doc! {"into": "t", "whenMatched": 1}), 51191),
            (
                Bson::Document(doc! {"into": "t", "whenNotMatched": "bogus"}),
                2,
            ),
            (
                Bson::Document(doc! {"into": "t", "whenMatched": "merge", "let": {"a": 1}}),
                51199,
            ),
            (
                Bson::Document(
                    doc! {"into": "t", "whenMatched": [{"$set": {"x": 1}}], "let": {"new": 1}},
                ),
                51273,
            ),
            (
                Bson::Document(doc! {"into": "t", "whenMatched": [{"$set": {"x": "$$nope"}}]}),
                17276,
            ),
        ];
        for (spec, code) in cases {
            assert_eq!(parse_error(spec.clone()), code, "{spec:?}");
        }
    }

    fn write(spec: Document, document: Document) -> CommandResult<MergeWrite> {
        MergeSpec::parse(&Bson::Document(spec))
            .unwrap()
            .write_for(document, &context())
    }

    #[test]
    fn on_values_must_be_present_scalars() {
        // on_fields_validation.js: missing, null, undefined → 51132; an array → 51185; an
        // array prefix → 51132.
        let on = |field: &str| doc! {"into": "t", "whenMatched": "replace", "on": field};
        let cases: Vec<(&str, Document, i32)> = vec![
            ("name", doc! {"_id": 0, "team": "query"}, 51132),
            ("song.artist", doc! {"_id": 0, "song": Bson::Null}, 51132),
            (
                "song.artist",
                doc! {"_id": 0, "song": Bson::Undefined},
                51132,
            ),
            (
                "song.artist",
                doc! {"_id": 0, "song": {"artist": Bson::Null}},
                51132,
            ),
            (
                "address.street",
                doc! {"_id": 0, "address": {"street": ["West 43rd St", "1633 Broadway"]}},
                51185,
            ),
            (
                "address.street",
                doc! {"_id": 0, "address": [{"street": "1633 Broadway"}]},
                51132,
            ),
        ];
        for (field, document, code) in cases {
            let error = write(on(field), document.clone()).expect_err("should fail");
            assert_eq!(error.code.code(), code, "{field} {document:?}");
        }
        let accepted = write(
            on("address.street"),
            doc! {"_id": 0, "address": {"street": "1633 Broadway"}},
        )
        .unwrap();
        assert_eq!(
            accepted,
            MergeWrite::Update {
                statement: doc! {
                    "q": {"address.street": {"$eq": "1633 Broadway"}},
                    "u": {"_id": 0, "address": {"street": "1633 Broadway"}},
                    "upsert": true,
                },
                strict: false,
            }
        );
    }

    #[test]
    fn modes_become_mongod_merge_strategies() {
        let document = doc! {"_id": 1, "a": 1};
        let q = doc! {"_id": {"$eq": 1}};
        let mode = |matched: &str, not_matched: &str| {
            write(
                doc! {"into": "t", "whenMatched": matched, "whenNotMatched": not_matched},
                document.clone(),
            )
            .unwrap()
        };
        assert_eq!(
            mode("merge", "insert"),
            MergeWrite::Update {
                statement: doc! {"q": q.clone(), "u": {"$set": document.clone()}, "upsert": true},
                strict: false
            }
        );
        assert_eq!(
            mode("replace", "fail"),
            MergeWrite::Update {
                statement: doc! {"q": q.clone(), "u": document.clone(), "upsert": false},
                strict: true
            }
        );
        assert_eq!(
            mode("keepExisting", "insert"),
            MergeWrite::Update {
                statement: doc! {
                    "q": q.clone(), "u": {"$setOnInsert": document.clone()}, "upsert": true,
                },
                strict: false
            }
        );
        assert_eq!(mode("fail", "insert"), MergeWrite::Insert(document.clone()));
        let pipeline = write(
            doc! {"into": "t", "whenMatched": [{"$addFields": {"x": 2}}], "let": {"y": "$a"}},
            document.clone(),
        )
        .unwrap();
        assert_eq!(
            pipeline,
            MergeWrite::UpdateOrInsert {
                statement: doc! {
                    "q": q,
                    "u": [{"$addFields": {"x": 2}}],
                    "upsert": false,
                    "c": {"y": {"$literal": 1}, "new": {"$literal": document.clone()}},
                },
                document,
            }
        );
    }

    #[test]
    fn an_id_is_generated_only_when_on_includes_it() {
        let Ok(MergeWrite::Update { statement, .. }) = write(doc! {"into": "t"}, doc! {"a": 1})
        else {
            panic!("an update")
        };
        let set = statement
            .get_document("u")
            .unwrap()
            .get_document("$set")
            .unwrap();
        assert!(matches!(set.get("_id"), Some(Bson::ObjectId(_))));
        let Ok(MergeWrite::Update { statement, .. }) =
            write(doc! {"into": "t", "on": "a"}, doc! {"a": 1})
        else {
            panic!("an update")
        };
        assert_eq!(
            statement.get_document("u").unwrap(),
            &doc! {"$set": {"a": 1}}
        );
    }
}
