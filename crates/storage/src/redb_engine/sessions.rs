//! Session records of the redb engine (`Storage::write_recorded`): one header row per session in
//! `sessions` (`{txnNumber, ..the fields of its last commit}`) and one row per recorded statement
//! in `session_statements` (layout in `format.rs`). A commit writes its header and only the
//! statements it ran; a read of one txnNumber's statements is one range read.
//!
//! Invariants: a session's statement rows all belong to its header's txnNumber: the commit that
//! first writes a newer txnNumber deletes the older rows, in the same write transaction as the
//! write it records. Whole-record documents of format versions 2 and 3 are split into rows by
//! [`convert_whole_records`] when such a file is opened; afterwards no header holds statements.
//!
//! Must not: panic on stored bytes (malformed rows are `StorageError::Corrupt`), or read outside
//! the transaction it is given.

use std::sync::Arc;

use bson::{Bson, Document, RawDocument};
use redb::{ReadTransaction, ReadableTable, TableError, WriteTransaction};

use super::format::{
    corrupt, io, session_rows_before, session_statement_id, session_statement_key,
    session_txn_rows, SESSIONS, SESSION_STATEMENTS,
};
use crate::{SessionClaim, SessionRecord, StorageResult};

/// The field of the version 2/3 whole record that held the statements.
const WHOLE_RECORD_STATEMENTS: &str = "statements";

/// Stores `record` in `txn`: its header replaces the session's, its statements join those of
/// its txnNumber (rows of older txnNumbers are deleted when the header's txnNumber changes).
pub(super) fn put(txn: &WriteTransaction, record: &SessionRecord) -> StorageResult<()> {
    let value = to_bytes(&record.stored_header())?;
    let previous_txn = {
        let mut sessions = txn.open_table(SESSIONS).map_err(io)?;
        let previous = sessions
            .insert(record.key.as_slice(), value.as_slice())
            .map_err(io)?;
        previous.and_then(|previous| stored_txn_number(previous.value()))
    };
    let mut statements = txn.open_table(SESSION_STATEMENTS).map_err(io)?;
    if previous_txn != Some(record.txn_number) {
        let (start, end) = session_rows_before(&record.key, record.txn_number);
        statements
            .retain_in(start.as_slice()..end.as_slice(), |_: &[u8], _: &[u8]| false)
            .map_err(io)?;
    }
    for (stmt_id, reply) in &record.statements {
        let key = session_statement_key(&record.key, record.txn_number, *stmt_id);
        statements
            .insert(key.as_slice(), to_bytes(reply)?.as_slice())
            .map_err(io)?;
    }
    Ok(())
}

/// Fails with `TxnNumberUsed` when session `claim.key` recorded `claim.txn_number` or a newer
/// one (the redb engine keeps no claim beyond the commit that carries it: its records tell).
pub(super) fn check_claim(txn: &WriteTransaction, claim: &SessionClaim) -> StorageResult<()> {
    let sessions = txn.open_table(SESSIONS).map_err(io)?;
    let stored = sessions
        .get(claim.key.as_slice())
        .map_err(io)?
        .and_then(|stored| stored_txn_number(stored.value()));
    if stored.is_some_and(|stored| stored >= claim.txn_number) {
        return Err(crate::StorageError::TxnNumberUsed);
    }
    Ok(())
}

/// The header row of session `key`, if it has one.
pub(super) fn header(txn: &ReadTransaction, key: &[u8]) -> StorageResult<Option<Document>> {
    let table = match txn.open_table(SESSIONS) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(error) => return Err(io(error)),
    };
    let Some(value) = table.get(key).map_err(io)? else {
        return Ok(None);
    };
    from_bytes(value.value()).map(Some)
}

/// Every header row, as `(session key, header)` in key order.
pub(super) fn headers(txn: &ReadTransaction) -> StorageResult<Vec<(Vec<u8>, Document)>> {
    let table = match txn.open_table(SESSIONS) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(error) => return Err(io(error)),
    };
    let mut records = Vec::new();
    for entry in table.iter().map_err(io)? {
        let (key, value) = entry.map_err(io)?;
        records.push((key.value().to_vec(), from_bytes(value.value())?));
    }
    Ok(records)
}

/// The statements recorded for `txn_number` of session `key`, by stmtId.
pub(super) fn statements(
    txn: &ReadTransaction,
    key: &[u8],
    txn_number: i64,
) -> StorageResult<Vec<(i32, Document)>> {
    let table = match txn.open_table(SESSION_STATEMENTS) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(error) => return Err(io(error)),
    };
    let (first, last) = session_txn_rows(key, txn_number);
    let mut statements = Vec::new();
    for entry in table
        .range(first.as_slice()..=last.as_slice())
        .map_err(io)?
    {
        let (key, value) = entry.map_err(io)?;
        statements.push((
            session_statement_id(key.value())?,
            from_bytes(value.value())?,
        ));
    }
    Ok(statements)
}

/// Splits the whole-record documents of format versions 2 and 3 (`{txnNumber, statements:
/// {<stmtId>: <reply part>}, ..}` under the session key) into a header and statement rows.
/// Returns how many records it converted.
pub(super) fn convert_whole_records(txn: &WriteTransaction) -> StorageResult<usize> {
    let mut whole = Vec::new();
    {
        let sessions = txn.open_table(SESSIONS).map_err(io)?;
        for entry in sessions.iter().map_err(io)? {
            let (key, value) = entry.map_err(io)?;
            let record = from_bytes(value.value())?;
            if record.contains_key(WHOLE_RECORD_STATEMENTS) {
                whole.push((key.value().to_vec(), record));
            }
        }
    }
    let converted = whole.len();
    for (key, mut header) in whole {
        let txn_number = header
            .get_i64("txnNumber")
            .map_err(|_| corrupt("session record without a long txnNumber"))?;
        let statements = match header.remove(WHOLE_RECORD_STATEMENTS) {
            Some(Bson::Document(statements)) => statements
                .into_iter()
                .map(|(stmt_id, reply)| match (stmt_id.parse::<i32>(), reply) {
                    (Ok(stmt_id), Bson::Document(reply)) => Ok((stmt_id, Arc::new(reply))),
                    _ => Err(corrupt(format!(
                        "session record statement {stmt_id:?} is not a stmtId and a document"
                    ))),
                })
                .collect::<StorageResult<_>>()?,
            _ => return Err(corrupt("session record statements are not a document")),
        };
        put(
            txn,
            &SessionRecord {
                key,
                txn_number,
                statements,
                header,
            },
        )?;
    }
    Ok(converted)
}

/// The txnNumber of a stored header, if it has one.
fn stored_txn_number(header: &[u8]) -> Option<i64> {
    RawDocument::from_bytes(header)
        .ok()?
        .get_i64("txnNumber")
        .ok()
}

fn to_bytes(document: &Document) -> StorageResult<Vec<u8>> {
    tideway_base::bsonutil::encode_document(document)
        .map_err(|error| corrupt(format!("session record: {error}")))
}

fn from_bytes(bytes: &[u8]) -> StorageResult<Document> {
    bson::from_slice(bytes).map_err(|error| corrupt(format!("session record: {error}")))
}
