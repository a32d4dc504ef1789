//! Schema validation: a collection's `validator` (a query filter, `$jsonSchema` and `$expr`
//! included), `validationLevel` (`strict`, `moderate`, `off`) and `validationAction` (`error`,
//! `warn`), as `create` and `collMod` set them and every write checks them.
//!
//! The three settings live in the collection's options (`CollectionMeta.options`) exactly as the
//! client gave them, so `listCollections` shows what mongod shows (an unset level or action is not
//! listed; an empty validator is no validator). [`check_option`] refuses what mongod refuses before
//! anything is stored. [`CollectionValidator`] is built once per write command from the options
//! the command sees, and `commands::crud::WriteContext` (the one path every write takes: insert,
//! update, replace, upsert, findAndModify, bulkWrite, `$out`, `$merge`) calls
//! [`CollectionValidator::check`] on each document before it goes to storage.
//!
//! Invariants: a document that fails with action `error` is never written and gets 121
//! DocumentValidationFailure with mongod's `errInfo` (`failingDocumentId`, `details`); with
//! `warn` it is written and the failure is logged (id 20294, visible in `getLog`); `moderate`
//! lets an update through when the document it replaces already failed; `off` checks nothing;
//! `bypassDocumentValidation: true` skips the check for the whole command. Deletes are never
//! checked. This module does no I/O.

pub mod details;

use std::sync::Arc;

use bson::{doc, Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::Filter;
use tideway_storage::{CollectionMeta, Namespace};

/// The collection options this module owns.
pub const OPTIONS: &[&str] = &["validator", "validationLevel", "validationAction"];

/// `validationLevel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Strict,
    Moderate,
    Off,
}

/// `validationAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Error,
    Warn,
}

fn enumeration_error(command: &str, field: &str, value: &str) -> CommandError {
    CommandError::bad_value(format!(
        "Enumeration value '{value}' for field '{command}.{field}' is not a valid value."
    ))
}

fn parse_level(command: &str, value: &str) -> CommandResult<Level> {
    match value {
        "strict" => Ok(Level::Strict),
        "moderate" => Ok(Level::Moderate),
        "off" => Ok(Level::Off),
        other => Err(enumeration_error(command, "validationLevel", other)),
    }
}

fn parse_action(command: &str, value: &str) -> CommandResult<Action> {
    match value {
        "error" => Ok(Action::Error),
        "warn" => Ok(Action::Warn),
        other => Err(enumeration_error(command, "validationAction", other)),
    }
}

/// Checks one validation option of `create` or `collMod` (`command`) on `ns`, with mongod's
/// errors; returns what to store under `name`, `None` to remove it (an empty validator).
/// The argument types were checked by the command's schema.
pub fn check_option(
    command: &str,
    ns: &Namespace,
    name: &str,
    value: &Bson,
) -> CommandResult<Option<Bson>> {
    match (name, value) {
        ("validator", Bson::Document(validator)) => {
            if validator.is_empty() {
                return Ok(None);
            }
            parse_validator(command, ns, validator)?;
            Ok(Some(value.clone()))
        }
        ("validationLevel", Bson::String(level)) => {
            parse_level(command, level)?;
            Ok(Some(value.clone()))
        }
        ("validationAction", Bson::String(action)) => {
            parse_action(command, action)?;
            Ok(Some(value.clone()))
        }
        (other, value) => Err(CommandError::wrong_type(
            command,
            other,
            value,
            if other == "validator" {
                "object"
            } else {
                "string"
            },
        )),
    }
}

/// A validator as mongod's `Collection::parseValidator` accepts it: not on system collections
/// or internal databases, no `$where`, `$text` or geo proximity, and a well-formed filter.
/// `collMod` reports a validator that does not parse as mongod's `Collection::parseValidator`
/// does (`Parsing of collection validator failed :: caused by :: …`); `create` parses it
/// directly (`DatabaseImpl::userCreateNS`) and reports the parser's error as it is.
fn parse_validator(command: &str, ns: &Namespace, validator: &Document) -> CommandResult<Filter> {
    if ns.coll.starts_with("system.") {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!("Document validators not allowed on system collection {ns}"),
        ));
    }
    if matches!(ns.db.as_str(), "admin" | "local" | "config") {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "Document validators are not allowed on collection {ns} in the {} internal database",
                ns.db
            ),
        ));
    }
    let parsed = refuse_special_operators(validator)
        .and_then(|()| refuse_javascript_expressions(validator))
        .and_then(|()| Filter::parse(validator))
        .and_then(Filter::refuse_near);
    match command {
        "collMod" => parsed.map_err(|error| error.caused("Parsing of collection validator failed")),
        _ => parsed,
    }
}

/// `$function` inside a validator's `$expr`, refused as mongod's expression parser refuses it
/// when it parses a collection validator (`ExpressionFunction::parse`: 4660800 `$function
/// cannot be used inside a validator.`). (`$accumulator` is an accumulator, never an
/// expression, and `$where` is refused above.) `$literal` operands are data, not parsed.
/// Iterative over the validator's nesting.
fn refuse_javascript_expressions(validator: &Document) -> CommandResult<()> {
    // (value, inside an `$expr`)
    let mut pending: Vec<(&Bson, bool)> = validator
        .iter()
        .map(|(key, value)| (value, key == "$expr"))
        .collect();
    while let Some((value, in_expr)) = pending.pop() {
        match value {
            Bson::Document(document) => {
                for (key, value) in document {
                    if in_expr && key == "$function" {
                        return Err(CommandError::new(
                            ErrorCode::Location4660800,
                            "$function cannot be used inside a validator.",
                        ));
                    }
                    if in_expr && key == "$literal" {
                        continue;
                    }
                    pending.push((value, in_expr || key == "$expr"));
                }
            }
            Bson::Array(values) => pending.extend(values.iter().map(|value| (value, in_expr))),
            _ => {}
        }
    }
    Ok(())
}

/// `$where` and `$text` anywhere a top-level operator may stand (the filter's root and the
/// clauses of `$and`/`$or`/`$nor`), as mongod's parser refuses them without those features.
/// Iterative over the validator's logical nesting.
fn refuse_special_operators(validator: &Document) -> CommandResult<()> {
    let mut pending = vec![validator];
    while let Some(filter) = pending.pop() {
        for (key, value) in filter {
            match (key.as_str(), value) {
                ("$where", _) => {
                    return Err(CommandError::bad_value(
                        "$where is not allowed in this context",
                    ))
                }
                ("$text", _) => {
                    return Err(CommandError::bad_value(
                        "$text is not allowed in this context",
                    ))
                }
                ("$and" | "$or" | "$nor", Bson::Array(clauses)) => {
                    pending.extend(clauses.iter().filter_map(|clause| match clause {
                        Bson::Document(clause) => Some(clause),
                        _ => None,
                    }));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Whether a write command asked to skip validation (`bypassDocumentValidation`, read as
/// mongod's `safeBool`: true, or a non-zero number).
pub fn bypass_requested(body: &Document) -> bool {
    match body.get("bypassDocumentValidation") {
        Some(Bson::Boolean(flag)) => *flag,
        Some(number) => tideway_base::bsonutil::as_f64(number).is_some_and(|n| n != 0.0),
        None => false,
    }
}

/// A collection's validation settings, ready to check documents.
#[derive(Debug)]
pub struct CollectionValidator {
    ns: Namespace,
    source: Document,
    filter: Filter,
    level: Level,
    action: Action,
}

impl CollectionValidator {
    /// The validator of the collection `meta` describes, if it has one that checks anything.
    pub fn of(meta: Option<&CollectionMeta>) -> CommandResult<Option<Arc<CollectionValidator>>> {
        let Some(meta) = meta else {
            return Ok(None);
        };
        let Some(Bson::Document(source)) = meta.options.get("validator") else {
            return Ok(None);
        };
        let level = match meta.options.get("validationLevel") {
            Some(Bson::String(level)) => parse_level("create", level)?,
            _ => Level::Strict,
        };
        let action = match meta.options.get("validationAction") {
            Some(Bson::String(action)) => parse_action("create", action)?,
            _ => Action::Error,
        };
        if source.is_empty() || level == Level::Off {
            return Ok(None);
        }
        let filter = Filter::parse(source)?.with_collation(meta.default_collation()?);
        Ok(Some(Arc::new(CollectionValidator {
            ns: meta.ns.clone(),
            source: source.clone(),
            filter,
            level,
            action,
        })))
    }

    /// Whether `document` passes (a validator that fails to evaluate does not pass).
    fn passes(&self, document: &Document) -> bool {
        self.filter.try_matches(document).unwrap_or(false)
    }

    /// Checks `document` about to be written; `replaced` is the stored document an update
    /// replaces (`None` for inserts, upserts included).
    pub fn check(&self, document: &Document, replaced: Option<&Document>) -> CommandResult<()> {
        if self.passes(document) {
            return Ok(());
        }
        if self.level == Level::Moderate && replaced.is_some_and(|old| !self.passes(old)) {
            return Ok(());
        }
        let mut error_info = doc! {};
        if let Some(id) = document.get("_id") {
            error_info.insert("failingDocumentId", id.clone());
        }
        error_info.insert("details", details::explain(&self.source, document));
        match self.action {
            Action::Warn => {
                tracing::warn!(
                    target: "STORAGE",
                    id = 20294_u64,
                    namespace = %self.ns,
                    errInfo = %Bson::Document(error_info).into_relaxed_extjson(),
                    "Document would fail validation"
                );
                Ok(())
            }
            Action::Error => Err(CommandError::new(
                ErrorCode::DocumentValidationFailure,
                "Document failed validation",
            )
            .with_extra(doc! {"errInfo": error_info})),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespace {
        Namespace::new("test", "c")
    }

    #[test]
    fn invalid_validators_are_refused_as_mongod_refuses_them() {
        let error = |ns: &Namespace, validator: Document| {
            check_option("create", ns, "validator", &Bson::Document(validator)).unwrap_err()
        };
        let where_error = error(&ns(), doc! {"$where": "this.a == this.b"});
        assert_eq!(
            (where_error.code, where_error.errmsg.as_str()),
            (ErrorCode::BadValue, "$where is not allowed in this context")
        );
        let text_error = error(&ns(), doc! {"$or": [{"$text": {"$search": "bob"}}]});
        assert_eq!(text_error.errmsg, "$text is not allowed in this context");
        assert_eq!(
            error(&Namespace::new("admin", "c"), doc! {"a": {"$exists": true}}).code,
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            error(&ns(), doc! {"$jsonSchema": {"invalid": 1}}).code,
            ErrorCode::FailedToParse
        );
        let level =
            check_option("collMod", &ns(), "validationLevel", &Bson::from("bogus")).unwrap_err();
        assert_eq!(
            level.errmsg,
            "Enumeration value 'bogus' for field 'collMod.validationLevel' is not a valid value."
        );
        assert_eq!(
            check_option("create", &ns(), "validator", &Bson::Document(doc! {})).unwrap(),
            None
        );
    }

    #[test]
    fn safe_bool_reads_numbers() {
        assert!(bypass_requested(&doc! {"bypassDocumentValidation": 1}));
        assert!(!bypass_requested(&doc! {"bypassDocumentValidation": 0}));
        assert!(!bypass_requested(&doc! {}));
    }
}
