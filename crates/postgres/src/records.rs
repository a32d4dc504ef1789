//! Stored documents as rows of `tideway.documents`: the header columns (`rev`, `last_write_ms`,
//! `ttl_class`, `expire_at_ms`) beside the BSON `body`, and their conversions to the contract's
//! [`Record`] and [`RawRecord`].
//!
//! Every statement that reads a record selects [`RECORD_COLUMNS`] at the position the caller
//! names, so one decoder serves them all. Must not panic on stored values: malformed ones are
//! `StorageError::Corrupt`.

use bson::RawDocument;
use tokio_postgres::Row;

use tideway_storage::{RawRecord, Record, StorageError, StorageResult, StoredDoc, TtlClass};

/// The record columns, in the order [`StoredRecord::read`] expects them, as a literal for
/// `concat!` (statements on hot paths are literals: no text is built per call).
macro_rules! record_columns {
    () => {
        "rev, last_write_ms, ttl_class, expire_at_ms, body"
    };
}
pub(crate) use record_columns;

/// [`record_columns!`] for statements built at run time.
pub(crate) const RECORD_COLUMNS: &str = record_columns!();

/// `TtlClass::Default` in a collection that keeps the `LastWrite` order: the partial index
/// `documents_last_write` holds exactly these rows.
pub(crate) const CLASS_DEFAULT: i16 = 0;
const CLASS_NEVER: i16 = 1;
const CLASS_OWN: i16 = 2;
/// `TtlClass::Default` in a collection that does not keep the `LastWrite` order (the engine's
/// `LastWriteRule`): out of that index, so writes skip its upkeep.
pub(crate) const CLASS_DEFAULT_UNORDERED: i16 = 3;

/// `(ttl_class, expire_at_ms)` of a TTL class, in a collection that keeps the `LastWrite` order
/// or not (`last_write_order`).
pub(crate) fn ttl_columns(ttl: TtlClass, last_write_order: bool) -> (i16, i64) {
    match ttl {
        TtlClass::Default if last_write_order => (CLASS_DEFAULT, 0),
        TtlClass::Default => (CLASS_DEFAULT_UNORDERED, 0),
        TtlClass::Never => (CLASS_NEVER, 0),
        TtlClass::Own { expire_at_ms } => (CLASS_OWN, expire_at_ms),
    }
}

fn ttl_of(class: i16, expire_at_ms: i64) -> StorageResult<TtlClass> {
    match class {
        CLASS_DEFAULT | CLASS_DEFAULT_UNORDERED => Ok(TtlClass::Default),
        CLASS_NEVER => Ok(TtlClass::Never),
        CLASS_OWN => Ok(TtlClass::Own { expire_at_ms }),
        other => Err(StorageError::Corrupt(format!(
            "unknown stored TTL class {other}"
        ))),
    }
}

/// A record read from a row, its document not yet checked or decoded.
#[derive(Debug)]
pub(crate) struct StoredRecord {
    pub rev: u64,
    pub last_write_ms: i64,
    pub ttl: TtlClass,
    pub body: Vec<u8>,
}

impl StoredRecord {
    /// The record in [`RECORD_COLUMNS`] starting at column `at` of `row`; `None` when they are
    /// null (an outer join that found no document).
    pub fn read(row: &Row, at: usize) -> StorageResult<Option<StoredRecord>> {
        let column = |error: tokio_postgres::Error| {
            StorageError::Corrupt(format!("stored record column: {error}"))
        };
        let Some(rev) = row.try_get::<_, Option<i64>>(at).map_err(column)? else {
            return Ok(None);
        };
        Ok(Some(StoredRecord {
            rev: rev as u64,
            last_write_ms: row.try_get(at + 1).map_err(column)?,
            ttl: ttl_of(
                row.try_get(at + 2).map_err(column)?,
                row.try_get(at + 3).map_err(column)?,
            )?,
            body: row.try_get(at + 4).map_err(column)?,
        }))
    }

    /// The record as predicates see it (the document not decoded).
    pub fn raw(&self) -> StorageResult<RawRecord<'_>> {
        Ok(RawRecord {
            doc: RawDocument::from_bytes(&self.body)
                .map_err(|error| StorageError::Corrupt(format!("stored document: {error}")))?,
            rev: self.rev,
            last_write_ms: self.last_write_ms,
            ttl: self.ttl,
        })
    }

    pub fn document(&self) -> StorageResult<bson::Document> {
        tideway_base::bsonutil::decode_document(&self.body)
            .map_err(|error| StorageError::Corrupt(format!("stored document: {error}")))
    }

    pub fn into_record(self) -> StorageResult<Record> {
        Ok(Record {
            doc: StoredDoc::from_stored_bytes(self.body)?,
            rev: self.rev,
            last_write_ms: self.last_write_ms,
            ttl: self.ttl,
        })
    }
}
