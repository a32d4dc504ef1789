//! Argument parsing every command family shares, written once: the target namespace and mongod's
//! naming rules, typed field access with mongod's "wrong type" errors, write concern, cursor options.

use bson::{Bson, Document};

use crate::command::CommandContext;
use tideway_base::bsonutil::as_f64;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::collation::{self, Collation, CollationChoice};
use tideway_query::expr::command_variables::CommandVariables;
use tideway_storage::{CollectionMeta, Namespace, WriteOptions};

/// mongod's limit on `db.collection` length in bytes.
const MAX_NAMESPACE_BYTES: usize = 255;
const MAX_DATABASE_NAME_BYTES: usize = 63;

/// Checks a database name with mongod's rules (73 InvalidNamespace).
pub(crate) fn validate_database_name(db: &str) -> CommandResult<()> {
    let forbidden = [
        '/', '\\', '.', ' ', '"', '$', '*', '<', '>', ':', '|', '?', '\0',
    ];
    if db.is_empty() || db.len() > MAX_DATABASE_NAME_BYTES || db.contains(forbidden) {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid database name: '{db}'"),
        ));
    }
    Ok(())
}

/// Checks `db.coll` with mongod's rules for collections users may read and write.
pub(crate) fn validate_namespace(ns: &Namespace) -> CommandResult<()> {
    validate_database_name(&ns.db)?;
    let invalid = || {
        CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid namespace specified '{ns}'"),
        )
    };
    if ns.coll.is_empty() || ns.coll.contains('\0') || ns.coll.starts_with('.') {
        return Err(invalid());
    }
    if ns.coll.contains('$') {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid collection name: {}", ns.coll),
        ));
    }
    if ns.db.len() + 1 + ns.coll.len() > MAX_NAMESPACE_BYTES {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!(
                "Fully qualified namespace is too long. Namespace: {ns} Max: {MAX_NAMESPACE_BYTES}"
            ),
        ));
    }
    Ok(())
}

/// Like [`validate_namespace`], and refuses `system.*` collections for writes, as mongod does,
/// and the oplog (only the engine writes it; mongod's `userAllowedWriteNS` with replication on).
pub(crate) fn validate_writable_namespace(ns: &Namespace) -> CommandResult<()> {
    validate_namespace(ns)?;
    crate::commands::config_transactions::refuse_write(ns)?;
    // mongod's `isLegalClientSystemNS` lets clients write the one system collection tideway
    // keeps outside `<db>.system.profile` and views: the logical sessions' records.
    if ns.coll.starts_with("system.") && !crate::sessions::is_sessions_namespace(ns) {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid system namespace: {ns}"),
        ));
    }
    if *ns == tideway_storage::oplog::oplog_namespace() {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("cannot write to {ns}"),
        ));
    }
    Ok(())
}

/// The collection a command targets: the string value of its first field, in the command's `$db`.
pub(crate) fn collection_namespace(
    ctx: &CommandContext,
    body: &Document,
) -> CommandResult<Namespace> {
    match body
        .get(ctx.name)
        .or_else(|| body.iter().next().map(|(_, value)| value))
    {
        Some(Bson::String(coll)) => {
            let ns = Namespace::new(ctx.db, coll.as_str());
            validate_namespace(&ns)?;
            Ok(ns)
        }
        Some(other) => Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("collection name has invalid type {}", type_name(other)),
        )),
        None => Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            "missing collection name",
        )),
    }
}

/// A required field of type `expected` (mongod's IDL name), extracted by `extract`: 40414 when
/// absent, 14 when of another type.
pub fn required<'a, T>(
    command: &str,
    body: &'a Document,
    field: &str,
    expected: &str,
    extract: impl Fn(&'a Bson) -> Option<T>,
) -> CommandResult<T> {
    let value = body
        .get(field)
        .ok_or_else(|| CommandError::idl_missing_field(command, field))?;
    extract(value).ok_or_else(|| CommandError::wrong_type(command, field, value, expected))
}

/// The command's `let` variables, evaluated at the command's time (none when it has no `let`).
pub fn let_variables(ctx: &CommandContext, body: &Document) -> CommandResult<CommandVariables> {
    let at_now = CommandVariables::at(bson::DateTime::from_millis(ctx.clock().now_ms()));
    match optional_document(ctx, body, "let")? {
        None => Ok(at_now),
        Some(spec) => at_now.with(spec),
    }
}

/// The collation a command (or one statement of it) runs with: its `collation` if it gives a
/// non-empty one (`{locale: "simple"}` included), else the collection's default (`meta`), as
/// mongod resolves it. An empty `collation` document asks for nothing, as in mongod's commands.
pub(crate) fn collation_for(
    command: &str,
    fields: &Document,
    meta: Option<&CollectionMeta>,
) -> CommandResult<CollationChoice> {
    let explicit = match fields.get("collation") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(spec)) if spec.is_empty() => None,
        other => Collation::from_argument(command, other)?,
    };
    let default = meta.map_or(Ok(None), CollectionMeta::default_collation)?;
    Ok(collation::effective(explicit, &default))
}

/// `hint`: an index name, an index key pattern or `{$natural: ±1}` (alone), naming an index the
/// collection has and that is not hidden; mongod's errors otherwise. (Against a missing collection any hint
/// is accepted: the plan is empty, as in mongod.) A valid hint does not change which documents
/// a command sees, only how they are read.
pub fn check_hint(
    ns: &Namespace,
    meta: Option<&CollectionMeta>,
    fields: &Document,
) -> CommandResult<()> {
    let Some(hint) = fields.get("hint") else {
        return Ok(());
    };
    let usable = |index: Option<&tideway_storage::IndexSpec>| {
        index.is_some_and(|index| !index.spec.get_bool("hidden").unwrap_or(false))
    };
    let found = match hint {
        Bson::Document(key) if key.is_empty() => return Ok(()),
        // parsed_find_command.cpp `isValid`, whatever the collection.
        Bson::Document(key) if key.contains_key("$natural") && key.len() != 1 => {
            return Err(CommandError::bad_value(format!(
                "Cannot include '$natural' in compound hint: {}",
                tideway_base::display::value_string(&Bson::Document(key.clone()))
            )))
        }
        Bson::Document(key) if key.contains_key("$natural") => return Ok(()),
        Bson::String(name) => meta.map(|meta| usable(meta.index_named(name).map(|index| &**index))),
        Bson::Document(key) => {
            meta.map(|meta| usable(meta.index_with_key(key).map(|index| &**index)))
        }
        _ => {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                "hint must be either a string or nested object",
            ))
        }
    };
    if found == Some(false) {
        return Err(CommandError::bad_value(format!(
            "error processing query: ns={ns} planner returned error :: caused by :: hint provided does not correspond to an existing index"
        )));
    }
    Ok(())
}

/// An optional sub-document field.
pub(crate) fn optional_document<'a>(
    ctx: &CommandContext,
    body: &'a Document,
    field: &str,
) -> CommandResult<Option<&'a Document>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(document)) => Ok(Some(document)),
        Some(other) => Err(CommandError::wrong_type(ctx.name, field, other, "object")),
    }
}

/// An optional boolean field; numbers are accepted as mongod's IDL does (non-zero is true).
pub(crate) fn optional_bool(
    ctx: &CommandContext,
    body: &Document,
    field: &str,
) -> CommandResult<Option<bool>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(value)) => Ok(Some(*value)),
        Some(value @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            Ok(Some(as_f64(value).is_some_and(|number| number != 0.0)))
        }
        Some(other) => Err(CommandError::wrong_type(ctx.name, field, other, "bool")),
    }
}

/// An optional whole number (any numeric type with no fraction, as mongod's `safeInt64`).
pub(crate) fn optional_i64(
    ctx: &CommandContext,
    body: &Document,
    field: &str,
) -> CommandResult<Option<i64>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(value)) => Ok(Some(i64::from(*value))),
        Some(Bson::Int64(value)) => Ok(Some(*value)),
        Some(value @ (Bson::Double(_) | Bson::Decimal128(_))) => {
            let number = as_f64(value).unwrap_or(f64::NAN);
            if number.fract() == 0.0 && number.abs() < 9.2e18 {
                Ok(Some(number as i64))
            } else {
                Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    format!("Expected field {field} to have a value exactly representable as a 64-bit integer, but found {number}"),
                ))
            }
        }
        Some(other) => Err(CommandError::wrong_type(ctx.name, field, other, "long")),
    }
}

/// A non-negative whole number option such as `skip`, `batchSize` (mongod: 51024 BadValue).
pub(crate) fn optional_non_negative(
    ctx: &CommandContext,
    body: &Document,
    field: &str,
) -> CommandResult<Option<u64>> {
    match optional_i64(ctx, body, field)? {
        Some(value) if value < 0 => Err(CommandError::bad_value(format!(
            "BSON field '{field}' value must be >= 0, actual value '{value}'"
        ))),
        other => Ok(other.map(|value| value as u64)),
    }
}

/// Write options from `ordered` and `writeConcern` (`j: true` forces a durable acknowledgement).
pub(crate) fn write_options(ctx: &CommandContext, body: &Document) -> CommandResult<WriteOptions> {
    let ordered = optional_bool(ctx, body, "ordered")?.unwrap_or(true);
    let force_durable = match body.get("writeConcern") {
        None | Some(Bson::Null) => false,
        Some(Bson::Document(concern)) => concern
            .get("j")
            .is_some_and(tideway_base::bsonutil::is_truthy),
        Some(other) => {
            return Err(CommandError::wrong_type(
                ctx.name,
                "writeConcern",
                other,
                "object",
            ))
        }
    };
    Ok(WriteOptions {
        ordered,
        force_durable,
        background: false,
    })
}

/// The array of documents in `field` (`documents`, `updates`, `deletes`), within mongod's batch limits.
pub fn batch<'a>(
    ctx: &CommandContext,
    body: &'a Document,
    field: &str,
) -> CommandResult<Vec<&'a Document>> {
    let items = match body.get(field) {
        Some(Bson::Array(items)) => items,
        Some(other) => return Err(CommandError::wrong_type(ctx.name, field, other, "array")),
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                format!(
                    "BSON field '{}.{field}' is missing but a required field",
                    ctx.name
                ),
            ))
        }
    };
    let limit = tideway_wire::MAX_WRITE_BATCH_SIZE as usize;
    if items.is_empty() || items.len() > limit {
        return Err(CommandError::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {limit}. Got {} operations.",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match item {
            Bson::Document(document) => Ok(document),
            other => Err(CommandError::wrong_type(
                ctx.name,
                &format!("{field}.{index}"),
                other,
                "object",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_follow_mongod_rules() {
        for good in ["test", "my-db_1", "a"] {
            assert!(validate_database_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a.b", "a b", "a$", "a/b", "x\0", &"d".repeat(64)] {
            assert_eq!(
                validate_database_name(bad).unwrap_err().code,
                ErrorCode::InvalidNamespace,
                "{bad}"
            );
        }
    }

    #[test]
    fn collection_names_follow_mongod_rules() {
        assert!(validate_namespace(&Namespace::new("db", "c.d")).is_ok());
        for bad in ["", "a$b", "x\0y", ".lead"] {
            assert!(
                validate_namespace(&Namespace::new("db", bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(validate_namespace(&Namespace::new("db", "c".repeat(260))).is_err());
        assert!(validate_namespace(&Namespace::new("db", "system.js")).is_ok());
        assert!(validate_writable_namespace(&Namespace::new("db", "system.js")).is_err());
    }
}
