//! Hashed index keys: the keys of hashed indexes (`{a: "hashed"}`, compound
//! `{a: 1, b: "hashed", c: -1}` with exactly one hashed field), over mongod's hash of a value
//! (`tideway_query::hash::hashed_value`). Pure functions over `bson` values; no storage.
//!
//! Key layout: the index's key fields in order, each `keycodec`-encoded with its direction,
//! the hashed field as `Int64(hashed_value(v))` ascending. A missing field hashes (or, for the
//! other fields, encodes) as Null; `sparse` skips documents missing every key field. An array
//! anywhere along any key field's path is refused with mongod's 16766. The planner turns an
//! equality `{a: v}` into the point [`hashed_value`]`(v)` (`Bson::Int64`) for the hashed field.
//!
//! Recursion over nested values is bounded by the nesting limits of stored documents (180)
//! and of command bodies (200), checked where they enter.

use bson::{Bson, Document};

use super::{KeyKind, StorageError, StorageResult};
use tideway_base::error::ErrorCode;
use tideway_query::collation::Collation;
use tideway_query::hash::hashed_value;
use tideway_query::keycodec::{self, Direction};

/// The error mongod gives for an array along a hashed index's key path (16766).
fn array_error(path_to_array: &str) -> StorageError {
    StorageError::CannotIndex {
        code: ErrorCode::Location16766,
        message: format!(
            "Error: hashed indexes do not currently support array values. Found array at path: {path_to_array}"
        ),
    }
}

/// The value at `path` the way mongod's hashed key generator reads it: `None` when missing, an
/// error when an array lies anywhere along the path.
fn value_at<'a>(document: &'a Document, path: &str) -> StorageResult<Option<&'a Bson>> {
    let mut current = document;
    let parts: Vec<&str> = path.split('.').collect();
    for (position, part) in parts.iter().enumerate() {
        let Some(value) = current.get(*part) else {
            return Ok(None);
        };
        if let Bson::Array(_) = value {
            return Err(array_error(&parts[..=position].join(".")));
        }
        if position + 1 == parts.len() {
            return Ok(Some(value));
        }
        match value {
            Bson::Document(next) => current = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// The one key a document contributes to a hashed index with key pattern `key_kinds`, or
/// `None` when `sparse` and every key field is missing. Under the index's `collation`, strings
/// are replaced by their comparison keys before they are hashed or encoded.
pub(crate) fn hashed_key(
    document: &Document,
    key_kinds: &[(String, KeyKind)],
    sparse: bool,
    collation: Option<&Collation>,
) -> StorageResult<Option<Vec<u8>>> {
    let mut key = Vec::with_capacity(16 * key_kinds.len());
    let mut any_present = false;
    for (path, kind) in key_kinds {
        let value = value_at(document, path)?;
        any_present |= value.is_some();
        let value = value.unwrap_or(&Bson::Null);
        let value = match collation {
            Some(collation) => std::borrow::Cow::Owned(collation.index_value(value)),
            None => std::borrow::Cow::Borrowed(value),
        };
        match kind {
            KeyKind::Hashed => keycodec::encode_value(
                &mut key,
                &Bson::Int64(hashed_value(&value)),
                Direction::Ascending,
            ),
            KeyKind::Descending => keycodec::encode_value(&mut key, &value, Direction::Descending),
            _ => keycodec::encode_value(&mut key, &value, Direction::Ascending),
        }
    }
    Ok((any_present || !sparse).then_some(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn kinds(pattern: &[(&str, KeyKind)]) -> Vec<(String, KeyKind)> {
        pattern
            .iter()
            .map(|(field, kind)| (field.to_string(), *kind))
            .collect()
    }

    #[test]
    fn keys_hash_the_hashed_field_and_encode_the_others() {
        let pattern = kinds(&[("a", KeyKind::Hashed), ("b", KeyKind::Descending)]);
        let key = hashed_key(&doc! {"a": 1.5, "b": "x"}, &pattern, false, None)
            .unwrap()
            .unwrap();
        let expected = keycodec::encode_key(&[
            (&Bson::Int64(5902408780260971510), Direction::Ascending),
            (&Bson::String("x".into()), Direction::Descending),
        ]);
        assert_eq!(key, expected);
        // Missing fields are null; sparse skips documents missing every field.
        let missing = hashed_key(&doc! {}, &pattern, false, None)
            .unwrap()
            .unwrap();
        let null_hash = hashed_value(&Bson::Null);
        assert_eq!(
            missing,
            keycodec::encode_key(&[
                (&Bson::Int64(null_hash), Direction::Ascending),
                (&Bson::Null, Direction::Descending),
            ])
        );
        assert_eq!(hashed_key(&doc! {}, &pattern, true, None).unwrap(), None);
    }

    #[test]
    fn arrays_along_any_key_path_are_refused_like_mongod() {
        let pattern = kinds(&[("a.b", KeyKind::Hashed)]);
        let error = hashed_key(&doc! {"a": [{"b": 1}]}, &pattern, false, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Error: hashed indexes do not currently support array values. Found array at path: a"
        );
        let error = hashed_key(&doc! {"a": {"b": [1]}}, &pattern, false, None).unwrap_err();
        assert!(error.to_string().ends_with("Found array at path: a.b"));
        let compound = kinds(&[("h", KeyKind::Hashed), ("c", KeyKind::Ascending)]);
        assert!(hashed_key(&doc! {"h": 1, "c": [1, 2]}, &compound, false, None).is_err());
    }
}
