//! The on-disk format of the redb engine: table names and definitions, the record header, index
//! and expiry entry keys, size counters, and the single conversion of redb errors into
//! `StorageError` (`Io`, or `OutOfDiskSpace` for a full disk).
//!
//! Layout (format version [`FORMAT_VERSION`], stored in `meta`; versions from
//! [`OLDEST_READABLE_FORMAT_VERSION`] on are converted when opened, others are refused):
//! - `meta` (`&str` → u64): `format_version`, `time_high_water_ms`.
//! - `catalog` (collection id u64 → BSON, see `catalog.rs`).
//! - `sizes` (table name → (key bytes, value bytes)): running byte totals per data/index table
//!   (expiry and natural tables are not counted); and, under names that start with a NUL byte
//!   (no table's name does), the writer's counters as (value, 0) ([`COUNTERS`]).
//!   Every commit writes both the counters and the size totals of what it wrote: one table,
//!   so one small B-tree, takes them.
//! - `d.<collection id>` (encoded `_id` → record): record = [`RECORD_HEADER_LEN`]-byte header
//!   then the document's BSON bytes. Header: [`RECORD_VERSION`] u8, rev u64 BE, last_write_ms
//!   i64 BE, TTL class u8 (0 `Default`, 1 `Never`, 2 `Own`), expire_at_ms i64 BE (0 unless
//!   `Own`), record id u64 BE.
//! - `i.<index id>`: unique index: index key → value; non-unique: index key ++ encoded `_id` ++
//!   u32 BE length of the encoded `_id` → value. Both sort by index key first (encoded `_id`s are
//!   prefix-free, so the suffix never reorders distinct index keys). The value holds the entry's
//!   type bits when it has them (`indexkeys::IndexKeyer::entries`: what a covered read needs to
//!   rebuild the key's values exactly), marked by a first byte [`TYPE_BITS_MARKER`], which no
//!   encoded `_id` starts with (keycodec tags are `0x10..=0xF0`):
//!   - unique: encoded `_id`, or `01` ++ u32 BE bits length ++ bits ++ encoded `_id`;
//!   - non-unique: empty, or `01` ++ bits.
//!
//!   Entries written by format version 2 never have type bits. Catalog-only indexes have no
//!   table.
//! - `lw.<collection id>`: while the collection's catalog entry says `lastWriteOrder` (the
//!   engine's `LastWriteRule` selects it), one entry per `TtlClass::Default` record:
//!   order-preserving i64 `last_write_ms` (8 bytes, see [`ordered_i64`]) ++ encoded `_id` →
//!   empty; otherwise empty.
//! - `ox.<collection id>`: one entry per `TtlClass::Own` record: order-preserving i64
//!   `expire_at_ms` ++ encoded `_id` → empty. `Never` records are in neither expiry table.
//!
//! - `n.<collection id>` (every collection but a clustered one): record id u64 BE → encoded
//!   `_id`: natural order (insertion order). A record id is the revision its document's insert
//!   took, so ids only grow and are never reused; a replacement keeps it. A clustered
//!   collection's records have record id 0 and no `n.` table: its natural order is `_id` order.
//!
//! - `sessions` (session key → BSON): one header row per session that ran a recorded write
//!   (`Storage::write_recorded`): `{txnNumber, ...}` and the fields its last commit gave.
//! - `session_statements` ([`session_statement_key`]: u32 BE length of the session key ++ session
//!   key ++ order-preserving i64 txnNumber ++ order-preserving i32 stmtId → BSON): one row per
//!   recorded statement. The length prefix makes session prefixes prefix-free, so one session's
//!   rows, and within them one txnNumber's, are one contiguous key range.
//!
//! Invariant: a session's statement rows all carry its header's txnNumber: the commit that first
//! writes a newer txnNumber deletes the older rows ([`session_rows_before`]).
//! Invariant: in a collection that is not clustered, `n.` holds exactly one entry per document,
//! under the record id in its header.
//! Invariant: the expiry tables hold exactly the entries the data table's headers imply
//! ([`expiry_position`]), `lw.` only while `lastWriteOrder` holds (else none); writes keep them
//! in step within the same transaction.
//!
//! Must not: change any of this without bumping [`FORMAT_VERSION`]; panic on bytes read from disk
//! (malformed bytes are `StorageError::Corrupt`).

use std::fmt::Display;

use bson::{Document, RawDocument};
use redb::TableDefinition;

pub(super) use crate::entry_keys::{
    expiry_entry_id, expiry_key, ordered_i64, record_id_key, record_id_of,
};
use crate::entry_keys::{index_entry_id, index_entry_key};
use crate::{
    ExpiryOrder, RawRecord, Record, StorageError, StorageResult, StoredDoc, TtlClass, WriteMeta,
};

/// 2: TTL class in the record header, expiry tables, catalog-only indexes.
/// 3: type bits in index entry values. Version 2 files are read as they are (their entries have
/// no type bits) and marked 3 when opened, after which older builds refuse them.
/// 4: session records as a header row plus one row per statement (`session_statements`). The
/// whole-record documents of versions 2 and 3 (`{txnNumber, statements: {<stmtId>: ..}, ..}`
/// under the session key in `sessions`) are split into rows when the file is opened
/// (`convert_session_records`), in the commit that marks it 4.
/// 5: record header version 3 (with the record id) and an `n.` table for every collection but
/// a clustered one. Versions 2 to 4 had 26-byte version 2 headers, `n.` tables for capped
/// collections only and `np.<id>` (encoded `_id` → u64 BE insertion number) beside them. When
/// such a file is opened, every record is rewritten with a version 3 header (`natural::convert`):
/// a capped collection's documents keep their insertion numbers as record ids, an ordinary
/// collection's get new ones in `_id` order (the only order known), a clustered collection's 0;
/// `np.` tables are dropped; all in the commit that marks it 5.
/// 6: the writer's counters in `sizes` (they were `next_rev`, `next_collection_id`,
/// `next_index_id` and `last_timestamp` in `meta`), moved when the file is opened, in the commit
/// that marks it 6.
/// 7: `lw.` only for the collections the engine's `LastWriteRule` selects, marked by
/// `lastWriteOrder` in their catalog entries (absent: kept, as versions 2 to 6 kept it for every
/// collection). Every open brings each collection in line with the rule it is opened with
/// (`apply::apply_last_write_rule_at_open`). Older builds must refuse such a file: they take
/// `lw.` as complete for every collection and drop `lastWriteOrder` when they rewrite an entry.
pub(super) const FORMAT_VERSION: u64 = 7;
/// The oldest format version this build opens.
pub(super) const OLDEST_READABLE_FORMAT_VERSION: u64 = 2;
/// First byte of an index entry value that carries type bits.
pub(super) const TYPE_BITS_MARKER: u8 = 0x01;
pub(super) const RECORD_VERSION: u8 = 3;
/// Bytes before the BSON document in a record.
pub(super) const RECORD_HEADER_LEN: usize = 34;
/// The header version and length of records written by format versions 2 to 4 (no record id).
pub(super) const FORMAT_4_RECORD_VERSION: u8 = 2;
pub(super) const FORMAT_4_RECORD_HEADER_LEN: usize = 26;
pub(super) use crate::entry_keys::RECORD_ID_LEN;

const TTL_DEFAULT: u8 = 0;
const TTL_NEVER: u8 = 1;
const TTL_OWN: u8 = 2;
/// Per-entry bytes redb keeps beside key and value in a leaf (key and value end offsets), used
/// for size estimates.
pub(super) const ENTRY_OVERHEAD_BYTES: u64 = 8;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const CATALOG: TableDefinition<u64, &[u8]> = TableDefinition::new("catalog");
pub(super) const SIZES: TableDefinition<&str, (u64, u64)> = TableDefinition::new("sizes");
/// Session records (`Storage::write_recorded`): caller key → BSON document.
pub(super) const SESSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sessions");
/// One row per recorded statement ([`session_statement_key`] → BSON reply part).
pub(super) const SESSION_STATEMENTS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("session_statements");
/// Bytes of the txnNumber ++ stmtId suffix of a statement row key.
const STATEMENT_SUFFIX_LEN: usize = 8 + 4;

pub(super) const META_FORMAT_VERSION: &str = "format_version";
/// The writer's counters ([`super::writer::Counters::values`] order): each one's name in
/// `sizes`, and where format versions 2 to 5 kept it in `meta`. `last_timestamp` is the newest
/// cluster time a write took ([`crate::Storage::cluster_time`]), as `seconds << 32 | increment`.
pub(super) const COUNTERS: [(&str, &str); 4] = [
    ("\0next_rev", "next_rev"),
    ("\0next_collection_id", "next_collection_id"),
    ("\0next_index_id", "next_index_id"),
    ("\0last_timestamp", "last_timestamp"),
];
/// The latest server time recorded ([`crate::Storage::record_time`]), in ms.
pub(super) const META_TIME_HIGH_WATER: &str = "time_high_water_ms";

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

/// `n.<id>`: a collection's documents in natural order (none for a clustered collection).
pub(super) fn natural_table_name(collection_id: u64) -> String {
    format!("n.{collection_id}")
}

/// `np.<id>` of format versions 2 to 4: each capped document's insertion number (read and
/// dropped by the conversion to version 5).
pub(super) fn format_4_natural_position_table_name(collection_id: u64) -> String {
    format!("np.{collection_id}")
}

/// `lw.<id>` or `ox.<id>`.
pub(super) fn expiry_table_name(order: ExpiryOrder, collection_id: u64) -> String {
    match order {
        ExpiryOrder::LastWrite => format!("lw.{collection_id}"),
        ExpiryOrder::OwnExpiry => format!("ox.{collection_id}"),
    }
}

/// The expiry table and time a record with this class and write time is filed under (`None`
/// for `Never`).
pub(super) fn expiry_position(ttl: TtlClass, last_write_ms: i64) -> Option<(ExpiryOrder, i64)> {
    match ttl {
        TtlClass::Default => Some((ExpiryOrder::LastWrite, last_write_ms)),
        TtlClass::Never => None,
        TtlClass::Own { expire_at_ms } => Some((ExpiryOrder::OwnExpiry, expire_at_ms)),
    }
}

/// The first bytes of every statement row of session `session_key`: its length (u32 BE) and
/// itself. Session keys are far below 4 GiB (they come from a command's `lsid`).
pub(super) fn session_prefix(session_key: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(4 + session_key.len() + STATEMENT_SUFFIX_LEN);
    prefix.extend_from_slice(&(session_key.len() as u32).to_be_bytes());
    prefix.extend_from_slice(session_key);
    prefix
}

/// The key of statement `stmt_id` of `txn_number` in session `session_key`.
pub(super) fn session_statement_key(session_key: &[u8], txn_number: i64, stmt_id: i32) -> Vec<u8> {
    let mut key = session_prefix(session_key);
    key.extend_from_slice(&ordered_i64(txn_number));
    key.extend_from_slice(&((stmt_id as u32) ^ (1 << 31)).to_be_bytes());
    key
}

/// The inclusive key range of every statement row of `txn_number` in session `session_key`.
pub(super) fn session_txn_rows(session_key: &[u8], txn_number: i64) -> (Vec<u8>, Vec<u8>) {
    (
        session_statement_key(session_key, txn_number, i32::MIN),
        session_statement_key(session_key, txn_number, i32::MAX),
    )
}

/// The half-open key range of the statement rows of session `session_key` older than
/// `txn_number`.
pub(super) fn session_rows_before(session_key: &[u8], txn_number: i64) -> (Vec<u8>, Vec<u8>) {
    let start = session_prefix(session_key);
    let mut end = start.clone();
    end.extend_from_slice(&ordered_i64(txn_number));
    (start, end)
}

/// The stmtId of a statement row key.
pub(super) fn session_statement_id(key: &[u8]) -> StorageResult<i32> {
    let at = key
        .len()
        .checked_sub(4)
        .ok_or_else(|| corrupt("session statement key shorter than its stmtId"))?;
    let bits = u32::from_be_bytes(be_bytes(&key[at..])?);
    Ok((bits ^ (1 << 31)) as i32)
}

/// The one place redb errors become storage errors: a full disk is `OutOfDiskSpace`, any other
/// failure `Io`.
pub(super) fn io<E: Into<redb::Error>>(error: E) -> StorageError {
    match error.into() {
        redb::Error::Io(error) if is_out_of_space(&error) => {
            StorageError::OutOfDiskSpace("writing the database".to_string())
        }
        redb::Error::PreviousIo | redb::Error::DatabaseClosed => StorageError::Io(
            "an I/O error interrupted this operation; the database is reopened, retry it"
                .to_string(),
        ),
        error => StorageError::Io(error.to_string()),
    }
}

/// ENOSPC, and a full quota (EDQUOT): both mean no space is left for the database.
pub(super) fn is_out_of_space(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || error.raw_os_error() == Some(libc::ENOSPC)
}

pub(super) fn corrupt(what: impl Display) -> StorageError {
    StorageError::Corrupt(what.to_string())
}

/// A record with room for the header, followed by `document`'s BSON; the header is filled in by
/// [`set_record_header`] once the revision is known.
pub(super) fn record_with_document(document: &Document) -> StorageResult<Vec<u8>> {
    let mut record = vec![0u8; RECORD_HEADER_LEN];
    tideway_base::bsonutil::append_document(&mut record, document)
        .map_err(|error| StorageError::Io(format!("cannot serialize document: {error}")))?;
    Ok(record)
}

/// Fills in the header of `record` (a version 3 header: see the module docs).
pub(super) fn set_record_header(record: &mut [u8], rev: u64, meta: WriteMeta, record_id: u64) {
    let (class, expire_at_ms) = match meta.ttl {
        TtlClass::Default => (TTL_DEFAULT, 0),
        TtlClass::Never => (TTL_NEVER, 0),
        TtlClass::Own { expire_at_ms } => (TTL_OWN, expire_at_ms),
    };
    if let Some(header) = record.get_mut(..RECORD_HEADER_LEN) {
        header[0] = RECORD_VERSION;
        header[1..9].copy_from_slice(&rev.to_be_bytes());
        header[9..17].copy_from_slice(&meta.last_write_ms.to_be_bytes());
        header[17] = class;
        header[18..26].copy_from_slice(&expire_at_ms.to_be_bytes());
        header[FORMAT_4_RECORD_HEADER_LEN..RECORD_HEADER_LEN]
            .copy_from_slice(&record_id_key(record_id));
    }
}

/// A format 4 record (version 2 header) rewritten as this format stores it, with `record_id`.
pub(super) fn upgraded_record(old: &[u8], record_id: u64) -> StorageResult<Vec<u8>> {
    if old.len() < FORMAT_4_RECORD_HEADER_LEN || old[0] != FORMAT_4_RECORD_VERSION {
        return Err(corrupt("a format 4 record without its version 2 header"));
    }
    let mut record = Vec::with_capacity(old.len() + RECORD_ID_LEN);
    record.extend_from_slice(&old[..FORMAT_4_RECORD_HEADER_LEN]);
    record.extend_from_slice(&record_id_key(record_id));
    record.extend_from_slice(&old[FORMAT_4_RECORD_HEADER_LEN..]);
    record[0] = RECORD_VERSION;
    // The fields shared with version 2 must still decode.
    record_header(&record)?;
    Ok(record)
}

/// A record header, decoded without the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RecordHeader {
    pub rev: u64,
    pub meta: WriteMeta,
    /// The document's place in natural order (0 in a clustered collection).
    pub record_id: u64,
}

fn be_bytes<const N: usize>(bytes: &[u8]) -> StorageResult<[u8; N]> {
    bytes.try_into().map_err(corrupt)
}

/// The header of a stored record (version checked), without decoding the document.
pub(super) fn record_header(record: &[u8]) -> StorageResult<RecordHeader> {
    let header = record
        .get(..RECORD_HEADER_LEN)
        .ok_or_else(|| corrupt("record shorter than its header"))?;
    if header[0] != RECORD_VERSION {
        return Err(corrupt(format!("unknown record version {}", header[0])));
    }
    let rev = u64::from_be_bytes(be_bytes(&header[1..9])?);
    let last_write_ms = i64::from_be_bytes(be_bytes(&header[9..17])?);
    let ttl = match header[17] {
        TTL_DEFAULT => TtlClass::Default,
        TTL_NEVER => TtlClass::Never,
        TTL_OWN => TtlClass::Own {
            expire_at_ms: i64::from_be_bytes(be_bytes(&header[18..26])?),
        },
        other => return Err(corrupt(format!("unknown TTL class {other} in a record"))),
    };
    Ok(RecordHeader {
        rev,
        meta: WriteMeta { last_write_ms, ttl },
        record_id: record_id_of(&header[FORMAT_4_RECORD_HEADER_LEN..RECORD_HEADER_LEN])?,
    })
}

/// The document of a stored record, checked but not decoded (see [`StoredDoc`]).
pub(super) fn record_document(record: &[u8]) -> StorageResult<StoredDoc> {
    record_header(record)?;
    let raw = RawDocument::from_bytes(&record[RECORD_HEADER_LEN..])
        .map_err(|error| corrupt(format!("stored document: {error}")))?;
    tideway_base::limits::walk_raw(raw, tideway_base::limits::MAX_BSON_DEPTH)
        .map_err(|error| corrupt(format!("stored document: {error}")))?;
    Ok(StoredDoc::from_checked_bytes(raw.to_owned()))
}

/// The document of a stored record, decoded (for the engine's own use: keys, builds).
pub(super) fn decoded_document(record: &[u8]) -> StorageResult<Document> {
    record_header(record)?;
    tideway_base::bsonutil::decode_document(&record[RECORD_HEADER_LEN..])
        .map_err(|error| corrupt(format!("stored document: {error}")))
}

/// A stored record as predicates see it, without decoding the document.
pub(super) fn raw_record(record: &[u8]) -> StorageResult<RawRecord<'_>> {
    let header = record_header(record)?;
    let doc = RawDocument::from_bytes(&record[RECORD_HEADER_LEN..])
        .map_err(|error| corrupt(format!("stored document: {error}")))?;
    Ok(RawRecord {
        doc,
        rev: header.rev,
        last_write_ms: header.meta.last_write_ms,
        ttl: header.meta.ttl,
    })
}

pub(super) fn decode_record(record: &[u8]) -> StorageResult<Record> {
    let header = record_header(record)?;
    Ok(Record {
        doc: record_document(record)?,
        rev: header.rev,
        last_write_ms: header.meta.last_write_ms,
        ttl: header.meta.ttl,
    })
}

/// The stored key of an index entry.
pub(super) fn entry_key(index_key: &[u8], id_key: &[u8], unique: bool) -> Vec<u8> {
    if unique {
        return index_key.to_vec();
    }
    index_entry_key(index_key, id_key)
}

/// The stored value of an index entry (see the module docs), with the entry's type bits if any.
pub(super) fn entry_value(id_key: &[u8], type_bits: Option<&[u8]>, unique: bool) -> Vec<u8> {
    match (type_bits, unique) {
        (None, true) => id_key.to_vec(),
        (None, false) => Vec::new(),
        (Some(bits), unique) => {
            let mut value = Vec::with_capacity(1 + 4 + bits.len() + id_key.len());
            value.push(TYPE_BITS_MARKER);
            if unique {
                // Type bits of one key are far below 4 GiB (a key is part of a 16 MiB document).
                value.extend_from_slice(&(bits.len() as u32).to_be_bytes());
            }
            value.extend_from_slice(bits);
            if unique {
                value.extend_from_slice(id_key);
            }
            value
        }
    }
}

/// Splits a unique index entry's value into its type bits (if any) and encoded `_id`.
fn split_unique_value(value: &[u8]) -> StorageResult<(Option<&[u8]>, &[u8])> {
    if value.first() != Some(&TYPE_BITS_MARKER) {
        return Ok((None, value));
    }
    let length = value
        .get(1..5)
        .ok_or_else(|| corrupt("index entry value shorter than its type bits length"))?;
    let length = u32::from_be_bytes(length.try_into().map_err(corrupt)?) as usize;
    let bits_end = 5usize
        .checked_add(length)
        .filter(|end| *end < value.len())
        .ok_or_else(|| corrupt("index entry type bits length out of range"))?;
    Ok((Some(&value[5..bits_end]), &value[bits_end..]))
}

/// The type bits of an index entry, if it has them.
pub(super) fn entry_type_bits(value: &[u8], unique: bool) -> StorageResult<Option<&[u8]>> {
    if unique {
        return Ok(split_unique_value(value)?.0);
    }
    Ok(match value.split_first() {
        Some((&TYPE_BITS_MARKER, bits)) => Some(bits),
        Some(_) => return Err(corrupt("unknown index entry value")),
        None => None,
    })
}

/// The encoded `_id` an index entry points to.
pub(super) fn entry_id<'a>(
    key: &'a [u8],
    value: &'a [u8],
    unique: bool,
) -> StorageResult<&'a [u8]> {
    if unique {
        return Ok(split_unique_value(value)?.1);
    }
    index_entry_id(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn meta(last_write_ms: i64, ttl: TtlClass) -> WriteMeta {
        WriteMeta { last_write_ms, ttl }
    }

    #[test]
    fn record_round_trip_and_corruption() {
        let document = doc! {"_id": 1, "a": "x"};
        for ttl in [
            TtlClass::Default,
            TtlClass::Never,
            TtlClass::Own { expire_at_ms: -7 },
            TtlClass::Own {
                expire_at_ms: i64::MAX,
            },
        ] {
            let mut record = record_with_document(&document).unwrap();
            set_record_header(&mut record, 42, meta(-5, ttl), u64::MAX - 1);
            assert_eq!(
                decode_record(&record).unwrap(),
                Record {
                    doc: document.clone().into(),
                    rev: 42,
                    last_write_ms: -5,
                    ttl,
                }
            );
            let header = record_header(&record).unwrap();
            assert_eq!((header.rev, header.record_id), (42, u64::MAX - 1));
        }
        let mut record = record_with_document(&document).unwrap();
        set_record_header(&mut record, 42, meta(-5, TtlClass::Never), 7);
        assert!(matches!(
            decode_record(&record[..20]),
            Err(StorageError::Corrupt(_))
        ));
        record[17] = 3;
        assert!(matches!(
            record_header(&record),
            Err(StorageError::Corrupt(_))
        ));
        // Records of older versions (1: 17-byte header, 2: 26 bytes) are refused, not misread.
        for version in [1, FORMAT_4_RECORD_VERSION] {
            record[0] = version;
            assert!(matches!(
                record_header(&record),
                Err(StorageError::Corrupt(_))
            ));
        }
        let mut truncated = record_with_document(&doc! {"a": 1}).unwrap();
        set_record_header(&mut truncated, 1, meta(1, TtlClass::Default), 1);
        truncated.truncate(truncated.len() - 2);
        assert!(matches!(
            decode_record(&truncated),
            Err(StorageError::Corrupt(_))
        ));
    }

    /// A format 4 record (version 2 header, no record id) gains the record id and keeps the rest.
    #[test]
    fn format_4_records_are_upgraded() {
        let document = doc! {"_id": "Bob", "n": 1};
        let ttl = TtlClass::Own { expire_at_ms: 99 };
        let mut current = record_with_document(&document).unwrap();
        set_record_header(&mut current, 12, meta(-3, ttl), 40);
        // The same record as format 4 wrote it.
        let mut old = current[..FORMAT_4_RECORD_HEADER_LEN].to_vec();
        old[0] = FORMAT_4_RECORD_VERSION;
        old.extend_from_slice(&current[RECORD_HEADER_LEN..]);
        assert_eq!(upgraded_record(&old, 40).unwrap(), current);
        assert_eq!(record_header(&current).unwrap().record_id, 40);
        // Not a version 2 header, or shorter than one: corrupt.
        assert!(upgraded_record(&current, 40).is_err());
        assert!(upgraded_record(&old[..20], 40).is_err());
        assert_eq!(record_id_of(&record_id_key(5)).unwrap(), 5);
        assert!(record_id_key(255) < record_id_key(256));
        assert!(record_id_of(&[1, 2, 3]).is_err());
    }

    #[test]
    fn entry_ids_round_trip() {
        let id = [0x27u8, 1, 2, 3];
        for unique in [false, true] {
            let key = entry_key(b"\x30abc\x00", &id, unique);
            for bits in [None, Some(&[][..]), Some(&[1u8, 0, 1, 7][..])] {
                let value = entry_value(&id, bits, unique);
                assert_eq!(entry_id(&key, &value, unique).unwrap(), &id);
                assert_eq!(entry_type_bits(&value, unique).unwrap(), bits);
            }
        }
        // Version 2 values: the bare `_id` (unique) or empty; no type bits.
        assert_eq!(entry_type_bits(&id, true).unwrap(), None);
        assert_eq!(entry_type_bits(&[], false).unwrap(), None);
        // A marker whose length runs past the value is corrupt, not misread.
        assert!(entry_id(b"", &[TYPE_BITS_MARKER, 0, 0, 0, 9, 0x27], true).is_err());
        assert!(entry_type_bits(&[0x27], false).is_err());
        assert!(entry_id(&[0, 0, 0, 9], &[], false).is_err());
        assert!(entry_id(&[1], &[], false).is_err());
    }

    #[test]
    fn expiry_keys_sort_by_time_then_id() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000_000, i64::MAX];
        let keys: Vec<Vec<u8>> = times
            .iter()
            .map(|time| expiry_key(*time, &[0x10, 5]))
            .collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(expiry_key(3, &[0x10, 1]) < expiry_key(3, &[0x10, 2]));
        assert_eq!(expiry_entry_id(&keys[2]).unwrap(), &[0x10, 5]);
        assert!(expiry_entry_id(&[1, 2, 3]).is_err());
        assert!(expiry_entry_id(&ordered_i64(4)).is_err());
        assert_eq!(
            expiry_position(TtlClass::Own { expire_at_ms: 9 }, 1),
            Some((ExpiryOrder::OwnExpiry, 9))
        );
        assert_eq!(
            expiry_position(TtlClass::Default, 1),
            Some((ExpiryOrder::LastWrite, 1))
        );
        assert_eq!(expiry_position(TtlClass::Never, 1), None);
    }
}
