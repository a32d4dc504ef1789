//! Capped collections: the rules of their options (`create`'s `capped`/`size`/`max`, `collMod`'s
//! `cappedSize`/`cappedMax`), mongod's refusals that involve them (tailable cursors elsewhere,
//! TTL indexes on them), what `collStats` reports, and the wake-up of `awaitData` cursors when a
//! capped collection receives a document.
//!
//! Invariants: options are stored as mongod reports them (`capped: true`, `size` rounded up to a
//! multiple of 256, `max` only when given, 2147483647 meaning "no limit"), so `listCollections`
//! returns them unchanged and `tideway_storage::CappedLimits::of_options` reads them back. The
//! engine enforces the limits: insertion order and rollover live in storage, never here.
//! Must not: do I/O.

use bson::{doc, Bson, Document};
use tokio::sync::Notify;

use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_storage::{CappedLimits, CollectionMeta};

/// The largest `size`/`cappedSize`: 1 PB (mongod's `create.idl`).
pub const MAX_SIZE_BYTES: i64 = 1 << 50;

/// Woken whenever a capped collection receives documents: `awaitData` getMores wait on it
/// (and re-read; a wake-up for another collection only costs them a read).
pub static INSERTED: Notify = Notify::const_new();

/// A number as mongod's `safeInt64` reads it (a fraction dropped, out of range saturated).
fn safe_i64(value: &Bson) -> i64 {
    match value {
        Bson::Int32(value) => i64::from(*value),
        Bson::Int64(value) => *value,
        other => tideway_base::bsonutil::as_f64(other).map_or(0, |value| value as i64),
    }
}

/// An integer stored as mongod's `appendNumber` does: Int32 when it fits.
fn stored_number(value: i64) -> Bson {
    i32::try_from(value).map_or(Bson::Int64(value), Bson::Int32)
}

/// IDL's range error (`idl_parser.h` `throwComparisonError`: 51024).
fn out_of_range(field: &str, op: &str, bound: i64, actual: i64) -> CommandError {
    CommandError::new(
        ErrorCode::Location51024,
        format!("BSON field '{field}' value must be {op} {bound}, actual value '{actual}'"),
    )
}

/// `size` (`cappedSize`) checked as `create.idl` does (1 to 1 PB) and rounded up to a multiple
/// of 256 (`collection_options.cpp` `adjustCappedSize`).
fn checked_size(field: &str, value: &Bson) -> CommandResult<i64> {
    let size = safe_i64(value);
    if size < 1 {
        return Err(out_of_range(field, ">=", 1, size));
    }
    if size > MAX_SIZE_BYTES {
        return Err(out_of_range(field, "<=", MAX_SIZE_BYTES, size));
    }
    Ok((size + 0xff) & !0xff)
}

/// `max` (`cappedMax`) checked as `create.idl` does (below 2^31); 0 or less is "no limit"
/// (`adjustCappedMaxDocs`).
fn checked_max(field: &str, value: &Bson) -> CommandResult<i64> {
    let max = safe_i64(value);
    if max > CappedLimits::NO_MAX_DOCS {
        return Err(out_of_range(field, "<", CappedLimits::NO_MAX_DOCS + 1, max));
    }
    Ok(if max <= 0 {
        CappedLimits::NO_MAX_DOCS
    } else {
        max
    })
}

/// `safeBool`: a boolean, or a number other than 0.
fn truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(value) => *value,
        other => tideway_base::bsonutil::as_f64(other).is_some_and(|value| value != 0.0),
    }
}

fn present<'a>(body: &'a Document, field: &str) -> Option<&'a Bson> {
    body.get(field)
        .filter(|value| !matches!(value, Bson::Null | Bson::Undefined))
}

/// The capped options of a `create` command to store (`None` for an uncapped collection), with
/// mongod's errors: the ranges first (51024), then `size` required with `capped` and `capped`
/// required with `size` or `max` (72, `create.cpp`).
pub fn create_options(body: &Document) -> CommandResult<Option<Document>> {
    let size = present(body, "size")
        .map(|value| checked_size("size", value))
        .transpose()?;
    let max = present(body, "max")
        .map(|value| checked_max("max", value))
        .transpose()?;
    let capped = present(body, "capped").is_some_and(truthy);
    if capped && size.is_none() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "the 'size' field is required when 'capped' is true",
        ));
    }
    if !capped && (size.is_some() || max.is_some()) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are present",
        ));
    }
    let Some(size) = size else {
        return Ok(None);
    };
    let mut options = doc! {"capped": true, "size": stored_number(size)};
    if let Some(max) = max {
        options.insert("max", stored_number(max));
    }
    Ok(Some(options))
}

/// `collMod`'s `cappedSize`/`cappedMax`, checked and applied to the `options` the caller stores
/// for `meta`'s collection. Refused (72) on a collection that is not capped.
pub fn apply_coll_mod(
    meta: &CollectionMeta,
    body: &Document,
    options: &mut Document,
) -> CommandResult<()> {
    let size = body.get("cappedSize");
    let max = body.get("cappedMax");
    if size.is_none() && max.is_none() {
        return Ok(());
    }
    if meta.capped().is_none() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "Collection '{}' is not capped, cannot modify capped size or max",
                meta.ns
            ),
        ));
    }
    if let Some(size) = size {
        options.insert("size", stored_number(checked_size("cappedSize", size)?));
    }
    if let Some(max) = max {
        options.insert("max", stored_number(checked_max("cappedMax", max)?));
    }
    Ok(())
}

/// mongod's `collStats` fields for the collection's kind: `capped`, and for a capped
/// collection `max` and `maxSize`.
pub fn stats_fields(meta: &CollectionMeta, scale: i64) -> Document {
    match meta.capped() {
        None => doc! {"capped": false},
        Some(limits) => doc! {
            "capped": true,
            "max": limits.max_docs.map_or(CappedLimits::NO_MAX_DOCS, |max| max as i64),
            "maxSize": (limits.max_bytes as i64) / scale.max(1),
        },
    }
}

/// `createIndexes` with `expireAfterSeconds` on a capped collection
/// (`index_catalog_impl.cpp`: 67).
pub fn ttl_index_refused() -> CommandError {
    CommandError::new(
        ErrorCode::CannotCreateIndex,
        "Cannot create TTL index on a capped collection",
    )
}

/// `collMod` making an index TTL on a capped collection (`coll_mod.cpp`: 72).
pub fn ttl_coll_mod_refused() -> CommandError {
    CommandError::new(
        ErrorCode::InvalidOptions,
        "TTL indexes are not supported for capped collections.",
    )
}

/// `find` with `tailable` on a collection that is not capped (2).
pub fn tailable_refused() -> CommandError {
    CommandError::bad_value(
        "error processing query: tailable cursor requested on non capped collection",
    )
}

/// A collection scan of a capped collection whose position (`position`, a record id as storage
/// keys it: 8 bytes big-endian) was rolled over or deleted between two reads (136,
/// `collection_scan.cpp`): a tailable cursor that had reached the end and finds its last record
/// gone, or any scan restored after its position went.
pub fn position_lost(position: &[u8], tailable_at_end: bool) -> CommandError {
    let record_id = <[u8; 8]>::try_from(position).map_or(0, u64::from_be_bytes);
    let what = if tailable_at_end {
        "failure to restore tailable cursor position"
    } else {
        "position in capped collection being deleted"
    };
    CommandError::new(
        ErrorCode::CappedPositionLost,
        format!("CollectionScan died due to {what}. Last seen record id: RecordId({record_id})"),
    )
}

/// How long an `awaitData` getMore waits without `maxTimeMS`: mongod's 1 second.
pub const DEFAULT_AWAIT_MS: u64 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_rounds_size_up_to_256_and_keeps_max() {
        // collection_options.cpp adjustCappedSize / adjustCappedMaxDocs.
        let options = create_options(&doc! {"capped": true, "size": 1000, "max": 5}).unwrap();
        assert_eq!(options, Some(doc! {"capped": true, "size": 1024, "max": 5}));
        let options = create_options(&doc! {"capped": true, "size": 256.5, "max": 0}).unwrap();
        assert_eq!(
            options,
            Some(doc! {"capped": true, "size": 256, "max": CappedLimits::NO_MAX_DOCS as i32})
        );
        assert_eq!(create_options(&doc! {"capped": false}).unwrap(), None);
    }

    #[test]
    fn create_refuses_as_mongod() {
        let code = |body: Document| create_options(&body).unwrap_err().code;
        assert_eq!(code(doc! {"capped": true}), ErrorCode::InvalidOptions);
        assert_eq!(
            code(doc! {"capped": true, "max": 5}),
            ErrorCode::InvalidOptions
        );
        assert_eq!(code(doc! {"size": 4096}), ErrorCode::InvalidOptions);
        assert_eq!(
            code(doc! {"capped": true, "size": 0}),
            ErrorCode::Location51024
        );
        assert_eq!(code(doc! {"size": 0}), ErrorCode::Location51024);
        assert_eq!(
            code(doc! {"capped": true, "size": 1, "max": 1_i64 << 31}),
            ErrorCode::Location51024
        );
        assert_eq!(
            create_options(&doc! {"capped": true, "size": 0})
                .unwrap_err()
                .errmsg,
            "BSON field 'size' value must be >= 1, actual value '0'"
        );
    }
}
