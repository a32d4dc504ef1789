//! Collection options that `create` and `collMod` store for later and `listCollections` lists:
//! `storageEngine` and `indexOptionDefaults` (`{storageEngine: …}`), and
//! `changeStreamPreAndPostImages` (`{enabled: bool}`). Their argument shapes are mongod's IDL
//! structs, checked by `commands::schema` before the handler runs; this module adds mongod's
//! semantic checks and decides what is kept in `CollectionMeta.options`.
//!
//! Invariants: options are stored only in the form mongod's `CollectionOptions::toBSON` lists
//! them (an empty `storageEngine`, an `indexOptionDefaults` without `storageEngine` and a disabled
//! `changeStreamPreAndPostImages` are not listed, so not stored). A `storageEngine` document
//! (the collection's, or the index default) may only name this server's engine
//! (`Storage::engine_name`) with no settings: tideway's engine has none, so any setting would
//! be silently ignored and is refused instead; names of other engines are refused as mongod
//! refuses an unregistered engine. mongod hands `indexOptionDefaults.storageEngine` to its engine
//! when it creates an index's table and never adds it to index specs, so `listIndexes` does not
//! show it here either. `changeStreamPreAndPostImages` is stored and listed as on a standalone
//! mongod; the storage engine reads it to keep pre- and post-images in oplog entries
//! (`changes::stream` serves them).
//! No I/O.

use bson::{doc, Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::Namespace;

/// The options of `create` this module owns.
pub(crate) const CREATE_OPTIONS: &[&str] = &[
    "storageEngine",
    "indexOptionDefaults",
    CHANGE_STREAM_PRE_AND_POST_IMAGES,
];

/// The options of `collMod` this module owns.
pub const COLL_MOD_OPTIONS: &[&str] = &[CHANGE_STREAM_PRE_AND_POST_IMAGES];

const CHANGE_STREAM_PRE_AND_POST_IMAGES: &str = "changeStreamPreAndPostImages";

/// Checks option `name` of `create` or `collMod` on `ns` (its shape already checked by the
/// command's schema) and returns what to store, `None` to store (or keep) nothing. `engine` is
/// the name of this server's storage engine.
pub fn check_option(
    ns: &Namespace,
    name: &str,
    value: &Bson,
    engine: &str,
) -> CommandResult<Option<Bson>> {
    let Bson::Document(value) = value else {
        // null: mongod's IDL parser takes it as an absent field.
        return Ok(None);
    };
    match name {
        "storageEngine" => {
            check_storage_engine(value, engine)?;
            Ok((!value.is_empty()).then(|| Bson::Document(value.clone())))
        }
        "indexOptionDefaults" => match value.get("storageEngine") {
            Some(Bson::Document(storage_engine)) => {
                check_storage_engine(storage_engine, engine)?;
                Ok(Some(Bson::Document(
                    doc! {"storageEngine": storage_engine.clone()},
                )))
            }
            _ => Ok(None),
        },
        CHANGE_STREAM_PRE_AND_POST_IMAGES => {
            if !matches!(value.get("enabled"), Some(Bson::Boolean(true))) {
                return Ok(None);
            }
            // mongod's `validateChangeStreamPreAndPostImagesOptionIsPermitted` (a standalone
            // is never a config server).
            if matches!(ns.db.as_str(), "admin" | "local" | "config") {
                return Err(CommandError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "changeStreamPreAndPostImages collection option is not supported on the {} database",
                        ns.db
                    ),
                ));
            }
            Ok(Some(Bson::Document(doc! {"enabled": true})))
        }
        other => Err(CommandError::new(
            ErrorCode::InternalError,
            format!("collection_defaults does not own the option '{other}'"),
        )),
    }
}

/// mongod's `validateStorageOptions`: each field names a registered engine and holds a
/// document of that engine's settings (tideway's engine takes none).
fn check_storage_engine(options: &Document, engine: &str) -> CommandResult<()> {
    for (name, settings) in options {
        let Bson::Document(settings) = settings else {
            return Err(CommandError::bad_value(format!(
                "'storageEngine.{name}' has to be an embedded document."
            )));
        };
        if name != engine {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("{name} is not a registered storage engine for this server"),
            ));
        }
        if let Some(setting) = settings.keys().next() {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("'{setting}' is not a supported option."),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(db: &str) -> Namespace {
        Namespace::new(db, "c")
    }

    #[test]
    fn only_listed_forms_are_stored() {
        let check = |name: &str, value: Bson| check_option(&ns("d"), name, &value, "redb");
        assert_eq!(
            check("storageEngine", Bson::Document(doc! {})).unwrap(),
            None
        );
        assert_eq!(
            check("indexOptionDefaults", Bson::Document(doc! {})).unwrap(),
            None
        );
        assert_eq!(
            check(
                "indexOptionDefaults",
                Bson::Document(doc! {"storageEngine": {"redb": {}}})
            )
            .unwrap(),
            Some(Bson::Document(doc! {"storageEngine": {"redb": {}}}))
        );
        assert_eq!(
            check(
                CHANGE_STREAM_PRE_AND_POST_IMAGES,
                Bson::Document(doc! {"enabled": false})
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn storage_engine_settings_are_refused() {
        let error = check_storage_engine(&doc! {"redb": {"cache": 1}}, "redb").unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidOptions);
        let error = check_storage_engine(&doc! {"wiredTiger": 1}, "redb").unwrap_err();
        assert_eq!(error.code, ErrorCode::BadValue);
    }
}
