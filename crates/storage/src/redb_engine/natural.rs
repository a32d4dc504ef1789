//! Natural order in the redb engine: every collection but a clustered one keeps its documents'
//! insertion order in `n.<id>` (record id → encoded `_id`), and each record's header carries its
//! record id (layout in `format.rs`). Writes keep the two in step (`apply.rs`, `reap.rs`);
//! collection scans read `n.` and fetch each document (`read.rs`). This module converts the
//! files of format versions 2 to 4, which kept natural order for capped collections only (with
//! a reverse `np.<id>` table) and had no record id in the header, when they are opened.
//!
//! Invariants after [`convert`]: every record has a version 3 header; a capped collection's
//! documents keep their insertion numbers as record ids; an ordinary collection's documents get
//! fresh record ids (revisions taken from the counters, so ids stay unique and below every later
//! one) in `_id` order, the only order a format 4 file knows for them, each filed in `n.`; a
//! clustered collection's get 0 and no `n.` entry; no `np.` table is left; each data table's
//! value bytes in `sizes` grew by [`RECORD_ID_LEN`] per record.
//!
//! Must not: run outside the opening commit that marks the file version 5, or hold a table
//! iterator while it writes (records are rewritten a chunk at a time).

use std::ops::Bound;

use redb::{ReadableTable, WriteTransaction};

use super::catalog::CollectionEntry;
use super::format::{
    bytes_table, corrupt, format_4_natural_position_table_name, io, record_id_key, record_id_of,
    upgraded_record, CATALOG, RECORD_ID_LEN, SIZES,
};
use super::writer::Counters;
use crate::StorageResult;

/// Records read before they are rewritten.
const CHUNK: usize = 1024;

/// Gives every record of a format 2–4 file its record id (see the module invariants), in `txn`;
/// record ids of ordinary collections are taken from `counters`. Returns how many records it
/// rewrote.
pub(super) fn convert(txn: &WriteTransaction, counters: &mut Counters) -> StorageResult<u64> {
    let mut entries = Vec::new();
    {
        let catalog = txn.open_table(CATALOG).map_err(io)?;
        for item in catalog.iter().map_err(io)? {
            let (id, bytes) = item.map_err(io)?;
            entries.push(CollectionEntry::decode(id.value(), bytes.value())?);
        }
    }
    let mut total = 0;
    for entry in &entries {
        total += convert_collection(txn, entry, counters)?;
    }
    Ok(total)
}

/// Converts one collection's records; how many.
fn convert_collection(
    txn: &WriteTransaction,
    entry: &CollectionEntry,
    counters: &mut Counters,
) -> StorageResult<u64> {
    let positions_name = format_4_natural_position_table_name(entry.id);
    let capped = entry.meta.capped().is_some();
    let natural_name = entry.natural_table.as_deref();
    let mut rewritten = 0u64;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let chunk: Vec<(Vec<u8>, Vec<u8>)> = {
            let data = txn.open_table(bytes_table(&entry.data_table)).map_err(io)?;
            let lower = match &after {
                Some(key) => Bound::Excluded(key.as_slice()),
                None => Bound::Unbounded,
            };
            data.range::<&[u8]>((lower, Bound::Unbounded))
                .map_err(io)?
                .take(CHUNK)
                .map(|item| {
                    let (key, value) = item.map_err(io)?;
                    Ok((key.value().to_vec(), value.value().to_vec()))
                })
                .collect::<StorageResult<_>>()?
        };
        let Some((last, _)) = chunk.last() else {
            break;
        };
        after = Some(last.clone());
        let mut data = txn.open_table(bytes_table(&entry.data_table)).map_err(io)?;
        let mut natural = match &natural_name {
            Some(name) => Some(txn.open_table(bytes_table(name)).map_err(io)?),
            None => None,
        };
        let positions = if capped {
            Some(txn.open_table(bytes_table(&positions_name)).map_err(io)?)
        } else {
            None
        };
        for (id_key, old) in &chunk {
            let record_id = match (&mut natural, &positions) {
                (None, _) => 0,
                // Already filed in `n.` under its insertion number.
                (Some(_), Some(positions)) => match positions.get(id_key.as_slice()).map_err(io)? {
                    Some(number) => record_id_of(number.value())?,
                    None => {
                        return Err(corrupt(format!(
                            "a document of capped collection {} has no insertion number",
                            entry.meta.ns
                        )))
                    }
                },
                (Some(natural), None) => {
                    let record_id = counters.take_rev();
                    natural
                        .insert(&record_id_key(record_id)[..], id_key.as_slice())
                        .map_err(io)?;
                    record_id
                }
            };
            let record = upgraded_record(old, record_id)?;
            data.insert(id_key.as_slice(), record.as_slice())
                .map_err(io)?;
        }
        rewritten += chunk.len() as u64;
    }
    txn.delete_table(bytes_table(&positions_name)).map_err(io)?;
    if rewritten > 0 {
        let mut sizes = txn.open_table(SIZES).map_err(io)?;
        let (key_bytes, value_bytes) = sizes
            .get(entry.data_table.as_str())
            .map_err(io)?
            .map_or((0, 0), |sizes| sizes.value());
        let grown = value_bytes.saturating_add(rewritten * RECORD_ID_LEN as u64);
        sizes
            .insert(entry.data_table.as_str(), (key_bytes, grown))
            .map_err(io)?;
    }
    Ok(rewritten)
}
