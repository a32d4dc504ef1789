//! The on-disk format of the redb engine: table names and definitions, the record header, index
//! entry keys, size counters, and the single conversion of redb errors into `StorageError::Io`.
//!
//! Layout (format version [`FORMAT_VERSION`], stored in `meta`):
//! - `meta` (`&str` → u64): `format_version`, `next_rev`, `next_collection_id`, `next_index_id`.
//! - `catalog` (collection id u64 → BSON, see `catalog.rs`).
//! - `sizes` (table name → (key bytes, value bytes)): running byte totals per data/index table.
//! - `d.<collection id>` (encoded `_id` → record): record = [`RECORD_VERSION`] u8, rev u64 BE,
//!   last_write_ms i64 BE, then the document's BSON bytes.
//! - `i.<index id>`: unique index: index key → encoded `_id`; non-unique: index key ++ encoded
//!   `_id` ++ u32 BE length of the encoded `_id` → empty. Both sort by index key first (encoded
//!   `_id`s are prefix-free, so the suffix never reorders distinct index keys).
//!
//! Must not: change any of this without bumping [`FORMAT_VERSION`]; panic on bytes read from disk
//! (malformed bytes are `StorageError::Corrupt`).

use std::fmt::Display;

use bson::Document;
use redb::TableDefinition;

use crate::storage::{Record, StorageError, StorageResult};

pub(super) const FORMAT_VERSION: u64 = 1;
pub(super) const RECORD_VERSION: u8 = 1;
/// Bytes before the BSON document in a record.
pub(super) const RECORD_HEADER_LEN: usize = 17;
/// Per-entry bytes redb keeps beside key and value in a leaf (key and value end offsets), used
/// for size estimates.
pub(super) const ENTRY_OVERHEAD_BYTES: u64 = 8;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const CATALOG: TableDefinition<u64, &[u8]> = TableDefinition::new("catalog");
pub(super) const SIZES: TableDefinition<&str, (u64, u64)> = TableDefinition::new("sizes");

pub(super) const META_FORMAT_VERSION: &str = "format_version";
pub(super) const META_NEXT_REV: &str = "next_rev";
pub(super) const META_NEXT_COLLECTION_ID: &str = "next_collection_id";
pub(super) const META_NEXT_INDEX_ID: &str = "next_index_id";

/// Definition of a data or index table (`d.<id>`, `i.<id>`).
pub(super) fn bytes_table(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

pub(super) fn data_table_name(collection_id: u64) -> String {
    format!("d.{collection_id}")
}

pub(super) fn index_table_name(index_id: u64) -> String {
    format!("i.{index_id}")
}

/// The one place redb errors become storage errors.
pub(super) fn io<E: Into<redb::Error>>(error: E) -> StorageError {
    StorageError::Io(error.into().to_string())
}

pub(super) fn corrupt(what: impl Display) -> StorageError {
    StorageError::Corrupt(what.to_string())
}

/// A record with room for the header, followed by `document`'s BSON; the header is filled in by
/// [`set_record_header`] once the revision is known.
pub(super) fn record_with_document(document: &Document) -> StorageResult<Vec<u8>> {
    let mut record = vec![0u8; RECORD_HEADER_LEN];
    document
        .to_writer(&mut record)
        .map_err(|error| StorageError::Io(format!("cannot serialize document: {error}")))?;
    Ok(record)
}

pub(super) fn set_record_header(record: &mut [u8], rev: u64, last_write_ms: i64) {
    if let Some(header) = record.get_mut(..RECORD_HEADER_LEN) {
        header[0] = RECORD_VERSION;
        header[1..9].copy_from_slice(&rev.to_be_bytes());
        header[9..17].copy_from_slice(&last_write_ms.to_be_bytes());
    }
}

/// The revision of a stored record, without decoding the document.
pub(super) fn record_rev(record: &[u8]) -> StorageResult<u64> {
    let header = record_header(record)?;
    Ok(u64::from_be_bytes(
        header[1..9].try_into().map_err(corrupt)?,
    ))
}

fn record_header(record: &[u8]) -> StorageResult<&[u8]> {
    let header = record
        .get(..RECORD_HEADER_LEN)
        .ok_or_else(|| corrupt("record shorter than its header"))?;
    if header[0] != RECORD_VERSION {
        return Err(corrupt(format!("unknown record version {}", header[0])));
    }
    Ok(header)
}

/// The document of a stored record.
pub(super) fn record_document(record: &[u8]) -> StorageResult<Document> {
    record_header(record)?;
    Document::from_reader(&record[RECORD_HEADER_LEN..])
        .map_err(|error| corrupt(format!("stored document: {error}")))
}

pub(super) fn decode_record(record: &[u8]) -> StorageResult<Record> {
    let header = record_header(record)?;
    let rev = u64::from_be_bytes(header[1..9].try_into().map_err(corrupt)?);
    let last_write_ms = i64::from_be_bytes(header[9..17].try_into().map_err(corrupt)?);
    Ok(Record {
        doc: record_document(record)?,
        rev,
        last_write_ms,
    })
}

/// The stored key of an index entry.
pub(super) fn entry_key(index_key: &[u8], id_key: &[u8], unique: bool) -> Vec<u8> {
    if unique {
        return index_key.to_vec();
    }
    let mut key = Vec::with_capacity(index_key.len() + id_key.len() + 4);
    key.extend_from_slice(index_key);
    key.extend_from_slice(id_key);
    // Encoded ids longer than u32::MAX cannot exist (documents are at most 16 MiB).
    key.extend_from_slice(&(id_key.len() as u32).to_be_bytes());
    key
}

/// The stored value of an index entry.
pub(super) fn entry_value(id_key: &[u8], unique: bool) -> &[u8] {
    if unique {
        id_key
    } else {
        &[]
    }
}

/// The encoded `_id` an index entry points to.
pub(super) fn entry_id<'a>(
    key: &'a [u8],
    value: &'a [u8],
    unique: bool,
) -> StorageResult<&'a [u8]> {
    if unique {
        return Ok(value);
    }
    let length_at = key
        .len()
        .checked_sub(4)
        .ok_or_else(|| corrupt("index entry shorter than its id length"))?;
    let id_len = u32::from_be_bytes(key[length_at..].try_into().map_err(corrupt)?) as usize;
    let id_at = length_at
        .checked_sub(id_len)
        .ok_or_else(|| corrupt("index entry id length out of range"))?;
    Ok(&key[id_at..length_at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn record_round_trip_and_corruption() {
        let document = doc! {"_id": 1, "a": "x"};
        let mut record = record_with_document(&document).unwrap();
        set_record_header(&mut record, 42, -5);
        assert_eq!(
            decode_record(&record).unwrap(),
            Record {
                doc: document,
                rev: 42,
                last_write_ms: -5
            }
        );
        assert_eq!(record_rev(&record).unwrap(), 42);
        assert!(matches!(
            decode_record(&record[..10]),
            Err(StorageError::Corrupt(_))
        ));
        record[0] = 9;
        assert!(matches!(record_rev(&record), Err(StorageError::Corrupt(_))));
        let mut truncated = record_with_document(&doc! {"a": 1}).unwrap();
        set_record_header(&mut truncated, 1, 1);
        truncated.truncate(truncated.len() - 2);
        assert!(matches!(
            decode_record(&truncated),
            Err(StorageError::Corrupt(_))
        ));
    }

    #[test]
    fn entry_ids_round_trip() {
        let id = [0x27u8, 1, 2, 3];
        for unique in [false, true] {
            let key = entry_key(b"\x30abc\x00", &id, unique);
            assert_eq!(
                entry_id(&key, entry_value(&id, unique), unique).unwrap(),
                &id
            );
        }
        assert!(entry_id(&[0, 0, 0, 9], &[], false).is_err());
        assert!(entry_id(&[1], &[], false).is_err());
    }
}
