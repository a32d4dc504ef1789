//! Clustered collections: `create` with `clusteredIndex: {key: {_id: 1}, unique: true, name?, v?}`
//! (and `expireAfterSeconds`), validated with mongod's codes and messages
//! (create_command.cpp, create_collection.cpp `validateClusteredIndexSpec`,
//! clustered_collection_util.cpp); how `listIndexes` and `listCollections` show one; the clustered
//! index's guards in `dropIndexes`/`collMod`; and `collMod`'s top-level `expireAfterSeconds`.
//!
//! Invariants: storage keeps every collection's documents by `_id` (its `_id_` index *is* the data
//! table), so a clustered collection's clustered index is that `_id_` index. What differs is
//! natural order: an ordinary collection's is insertion order, a clustered one's is `_id` order,
//! as in mongod (storage decides the layout at creation from `options.clusteredIndex`, see
//! `CollectionMeta::clustered`, which is how every layer asks whether a collection is
//! clustered). Its settings live in `CollectionMeta.options` as mongod lists them:
//! `clusteredIndex` canonical (`{v, key, name, unique}`, name defaulted to `_id_`) and
//! `expireAfterSeconds` as Int64; `collMod` never adds or removes `clusteredIndex`. What the TTL
//! means is decided in `ttl` (a TTL on `_id`), never here.

use bson::{doc, Bson, Document};

use tideway_base::display::{document_string, type_name};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::ttl::{self, ClusteredTtlChange};
use tideway_query::numeric::safe_number_long;
use tideway_storage::{CollectionMeta, IndexSpec};

pub(crate) const CLUSTERED_INDEX: &str = tideway_storage::CLUSTERED_INDEX_OPTION;
pub(crate) const EXPIRE_AFTER_SECONDS: &str = "expireAfterSeconds";

/// Context mongod's IDL names `clusteredIndex` fields with.
const SPEC_CONTEXT: &str = "create.clusteredIndex";

/// What `create` stores for a clustered collection.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusteredCreate {
    /// Canonical `{v, key, name, unique}`.
    pub spec: Document,
    pub expire_after_seconds: Option<i64>,
}

fn is_absent(value: Option<&Bson>) -> bool {
    matches!(value, None | Some(Bson::Null | Bson::Undefined))
}

fn present<'a>(body: &'a Document, field: &str) -> Option<&'a Bson> {
    body.get(field)
        .filter(|value| !matches!(value, Bson::Null | Bson::Undefined))
}

/// Validates `create`'s `clusteredIndex` and `expireAfterSeconds` against the other options of
/// `body`, in mongod's order; `None` for a collection that is not clustered
/// (`clusteredIndex` absent or `false`). Runs before anything else of `create`.
pub fn validate_create(body: &Document, now_ms: i64) -> CommandResult<Option<ClusteredCreate>> {
    let clustered = present(body, CLUSTERED_INDEX);
    let expire_after = present(body, EXPIRE_AFTER_SECONDS);
    let spec = match clustered {
        None => None,
        Some(Bson::Boolean(_)) => None,
        Some(Bson::Document(spec)) => Some(parse_spec(spec)?),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'create.clusteredIndex' is the wrong type '{}', expected types '[bool, object]'",
                type_name(other)
            )))
        }
    };
    if spec.is_some() {
        // create_command.cpp → clustered_util::checkCreationOptions.
        if !is_absent(body.get("size")) {
            return Err(CommandError::new(
                ErrorCode::Location6049200,
                "'size' field for capped collections is not allowed on clustered collections. Did you mean 'capped: true' with 'expireAfterSeconds'?",
            ));
        }
        if !is_absent(body.get("max")) {
            return Err(CommandError::new(
                ErrorCode::Location6049204,
                "'max' field for capped collections is not allowed on clustered collections. Did you mean 'capped: true' with 'expireAfterSeconds'?",
            ));
        }
        if present(body, "capped").is_some_and(tideway_base::bsonutil::is_truthy) {
            if expire_after.is_none() {
                return Err(CommandError::new(
                    ErrorCode::Location6049201,
                    "A capped clustered collection requires the 'expireAfterSeconds' field",
                ));
            }
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                "tideway does not support capped clustered collections",
            ));
        }
    }
    if expire_after.is_some() && clustered.is_none() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is specified",
        ));
    }
    match clustered {
        // `{clusteredIndex: true}` is the legacy format of time-series buckets collections.
        Some(Bson::Boolean(true)) => {
            return Err(CommandError::new(
                ErrorCode::Location5979703,
                "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for specific internal collections and vice versa",
            ))
        }
        Some(Bson::Boolean(false)) if expire_after.is_some() => {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "'expireAfterSeconds' can be used only for clustered collections or timeseries collections",
            ))
        }
        _ => {}
    }
    let Some(spec) = spec else {
        return Ok(None);
    };
    // create_collection.cpp: views, then validateCollectionOptions, then the spec itself.
    if present(body, "viewOn").is_some() {
        return Err(CommandError::new(
            ErrorCode::Location6026500,
            "The 'clusteredIndex' option is not supported with views",
        ));
    }
    if matches!(present(body, "idIndex"), Some(Bson::Document(id_index)) if !id_index.is_empty()) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "The 'clusteredIndex' option is not supported with the 'idIndex' option",
        ));
    }
    if present(body, "autoIndexId").is_some_and(|value| !tideway_base::bsonutil::is_truthy(value)) {
        return Err(CommandError::new(
            ErrorCode::Location6026501,
            "The 'clusteredIndex' option does not support {autoIndexId: false}",
        ));
    }
    if !spec.get_bool("unique").unwrap_or(false) {
        return Err(CommandError::new(
            ErrorCode::Location5979700,
            "The clusteredIndex option requires unique: true to be specified",
        ));
    }
    if !is_id_ascending(&spec) {
        return Err(CommandError::new(
            ErrorCode::InvalidIndexSpecificationOption,
            "The clusteredIndex option is only supported for key: {_id: 1}",
        ));
    }
    let expire_after_seconds = expire_after
        .map(|value| ttl::parse_clustered_expire_after(value, now_ms))
        .transpose()?;
    let version = spec.get_i32("v").unwrap_or(2);
    if version != 2 {
        return Err(CommandError::new(
            ErrorCode::Location5979704,
            format!(
                "Invalid clusteredIndex specification {}; cannot create a clusteredIndex with v={version}",
                document_string(&spec)
            ),
        ));
    }
    Ok(Some(ClusteredCreate {
        spec,
        expire_after_seconds,
    }))
}

/// `{_id: 1}` with 1 of any numeric type (mongod compares the key with `BSON("_id" << 1)`
/// numerically).
fn is_id_ascending(spec: &Document) -> bool {
    let Ok(key) = spec.get_document("key") else {
        return false;
    };
    let mut fields = key.iter();
    matches!(
        (fields.next(), fields.next()),
        (Some((field, value)), None) if field == "_id" && tideway_base::bsonutil::as_f64(value) == Some(1.0)
    )
}

/// Parses `clusteredIndex` as mongod's strict IDL struct `ClusteredIndexSpec` (v: safeInt
/// default 2, key: object, name: string optional, unique: safeBool; null counts as absent) and
/// canonicalises it: `{v, key, name, unique}` with `name` defaulting to `_id_`
/// (`ensureClusteredIndexName`).
fn parse_spec(raw: &Document) -> CommandResult<Document> {
    let (mut version, mut key, mut name, mut unique) = (2, None, None, None);
    for (field, value) in raw {
        if matches!(value, Bson::Null | Bson::Undefined) {
            continue;
        }
        let wrong = |expected: &str| {
            CommandError::type_mismatch(format!(
                "BSON field '{SPEC_CONTEXT}.{field}' is the wrong type '{}', {expected}",
                type_name(value)
            ))
        };
        match field.as_str() {
            "v" => {
                let number = safe_number_long(value)
                    .ok_or_else(|| wrong("expected types '[long, int, decimal, double]'"))?;
                version = number.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
            }
            "key" => match value {
                Bson::Document(document) => key = Some(document.clone()),
                _ => return Err(wrong("expected type 'object'")),
            },
            "name" => match value {
                Bson::String(text) => name = Some(text.clone()),
                _ => return Err(wrong("expected type 'string'")),
            },
            "unique" => match value {
                Bson::Boolean(flag) => unique = Some(*flag),
                other if safe_number_long(other).is_some() => {
                    unique = Some(tideway_base::bsonutil::is_truthy(other));
                }
                _ => return Err(wrong("expected types '[bool, long, int, decimal, double]'")),
            },
            _ => return Err(CommandError::idl_unknown_field(SPEC_CONTEXT, field)),
        }
    }
    let key = key.ok_or_else(|| CommandError::idl_missing_field(SPEC_CONTEXT, "key"))?;
    let unique = unique.ok_or_else(|| CommandError::idl_missing_field(SPEC_CONTEXT, "unique"))?;
    let name = name.unwrap_or_else(|| match key.keys().next() {
        Some(field) if field != "_id" => format!("{field}_1"),
        _ => IndexSpec::ID_INDEX_NAME.to_string(),
    });
    Ok(doc! {"v": version, "key": key, "name": name, "unique": unique})
}

/// The options `create` stores for a clustered collection (in place of what the client sent).
pub(crate) fn stored_options(clustered: &ClusteredCreate, options: &mut Document) {
    options.insert(CLUSTERED_INDEX, clustered.spec.clone());
    if let Some(seconds) = clustered.expire_after_seconds {
        options.insert(EXPIRE_AFTER_SECONDS, seconds);
    }
}

/// The canonical clustered index spec of a clustered collection.
pub(crate) fn clustered_spec(meta: &CollectionMeta) -> Option<&Document> {
    meta.options.get_document(CLUSTERED_INDEX).ok()
}

/// What `listIndexes` shows for index `index` of `meta`: for a clustered collection, the `_id_`
/// index is shown as mongod's `formatClusterKeyForListIndexes` builds it (the canonical spec,
/// the collection's collation, `expireAfterSeconds`, `clustered: true`).
pub(crate) fn listed_spec(meta: &CollectionMeta, index: &IndexSpec) -> Document {
    let Some(spec) = clustered_spec(meta).filter(|_| index.is_id_index()) else {
        return index.spec.clone();
    };
    let mut listed = spec.clone();
    if let Ok(collation) = meta.options.get_document("collation") {
        listed.insert("collation", collation.clone());
    }
    if let Some(seconds) = ttl::clustered_expire_after(&meta.options) {
        listed.insert(EXPIRE_AFTER_SECONDS, seconds);
    }
    listed.insert("clustered", true);
    listed
}

/// Whether `dropIndexes`'s `index` argument names the clustered index (by name, key pattern or
/// in a list of names): mongod refuses that with 5979800 before anything else.
pub(crate) fn check_drop_indexes(meta: &CollectionMeta, index: Option<&Bson>) -> CommandResult<()> {
    let Some(spec) = clustered_spec(meta) else {
        return Ok(());
    };
    let name = spec.get_str("name").unwrap_or(IndexSpec::ID_INDEX_NAME);
    let names_it = |value: &Bson| matches!(value, Bson::String(text) if text == name);
    let targets = match index {
        Some(Bson::Array(names)) => names.iter().any(names_it),
        Some(Bson::Document(key)) => spec.get_document("key").ok() == Some(key),
        Some(value) => names_it(value),
        None => false,
    };
    if targets {
        return Err(CommandError::new(
            ErrorCode::Location5979800,
            "It is illegal to drop the clusteredIndex",
        ));
    }
    Ok(())
}

/// `collMod`'s `index: {name | keyPattern, hidden}` on the clustered index: 6011800 as mongod.
pub(crate) fn check_hide_index(meta: &CollectionMeta, change: &Document) -> CommandResult<()> {
    let Some(spec) = clustered_spec(meta) else {
        return Ok(());
    };
    if is_absent(change.get("hidden")) {
        return Ok(());
    }
    let by_name = matches!(change.get("name"), Some(Bson::String(name)) if Some(name.as_str()) == spec.get_str("name").ok());
    let by_key = matches!(change.get("keyPattern"), Some(Bson::Document(key)) if spec.get_document("key").ok() == Some(key));
    if by_name || by_key {
        return Err(CommandError::new(
            ErrorCode::Location6011800,
            "The 'hidden' option is not supported for a clusteredIndex",
        ));
    }
    Ok(())
}

/// Validates `collMod`'s top-level `expireAfterSeconds` for `meta` (72 unless the collection is
/// clustered by `_id` or a time series, whose buckets mongod clusters); `None` when the field is absent (or null, as mongod's IDL reads it).
pub(crate) fn parse_coll_mod(
    meta: &CollectionMeta,
    body: &Document,
    now_ms: i64,
) -> CommandResult<Option<ClusteredTtlChange>> {
    let Some(value) = present(body, EXPIRE_AFTER_SECONDS) else {
        return Ok(None);
    };
    if !meta.clustered() && !tideway_exec::timeseries::is_timeseries(meta) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "'expireAfterSeconds' option is only supported on collections clustered by _id",
        ));
    }
    ttl::parse_collmod_clustered_expire_after(value, now_ms).map(Some)
}

/// Applies a validated top-level `expireAfterSeconds` change to the collection options the
/// caller stores (`"off"` removes the setting).
pub fn apply_coll_mod(options: &mut Document, change: ClusteredTtlChange) {
    match change {
        ClusteredTtlChange::Off => {
            options.remove(EXPIRE_AFTER_SECONDS);
        }
        ClusteredTtlChange::Seconds(seconds) => {
            options.insert(EXPIRE_AFTER_SECONDS, seconds);
        }
    }
}
