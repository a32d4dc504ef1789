//! Secondary index entries in bulk: rows for `tideway.index_entries` (non-unique, under the
//! shared stored key `tideway_storage::entry_keys::index_entry_key`) and `tideway.unique_entries`
//! (unique, under the index key), gathered in Rust and written or deleted with one statement per
//! table, whatever their number (arrays through `unnest`).
//!
//! Invariant: a unique entry is only ever deleted by the document that owns it (the delete
//! matches its `id_key`), so removing a document never removes another document's key.

use std::collections::HashSet;

use crate::collection::Maintained;
use crate::conn::{Conn, Failure};
use tideway_storage::entry_keys::index_entry_key;
use tideway_storage::indexkeys::DocumentKeys;
use tideway_storage::{StorageError, StorageResult};

/// Documents an index build reads per statement.
pub(crate) const BUILD_PAGE: i64 = 1000;

/// Index entry rows, column by column (what `unnest` takes).
#[derive(Debug, Default)]
pub(crate) struct EntryRows {
    index_ids: Vec<i64>,
    entries: Vec<Vec<u8>>,
    entry_ids: Vec<Vec<u8>>,
    bits: Vec<Option<Vec<u8>>>,
    unique_index_ids: Vec<i64>,
    unique_keys: Vec<Vec<u8>>,
    unique_ids: Vec<Vec<u8>>,
    unique_bits: Vec<Option<Vec<u8>>>,
    /// Per unique row, the caller's number for the document it came from.
    unique_sources: Vec<usize>,
}

impl EntryRows {
    /// Every key of `keys` in `index` for the document `id_key` (numbered `source`).
    pub fn add(&mut self, index: &Maintained, id_key: &[u8], keys: &DocumentKeys, source: usize) {
        for key in &keys.keys {
            self.add_key(index, id_key, key, keys.type_bits.as_deref(), source);
        }
    }

    pub fn add_key(
        &mut self,
        index: &Maintained,
        id_key: &[u8],
        key: &[u8],
        bits: Option<&[u8]>,
        source: usize,
    ) {
        if index.unique {
            self.unique_index_ids.push(index.id);
            self.unique_keys.push(key.to_vec());
            self.unique_ids.push(id_key.to_vec());
            self.unique_bits.push(bits.map(<[u8]>::to_vec));
            self.unique_sources.push(source);
        } else {
            self.index_ids.push(index.id);
            self.entries.push(index_entry_key(key, id_key));
            self.entry_ids.push(id_key.to_vec());
            self.bits.push(bits.map(<[u8]>::to_vec));
        }
    }

    /// The statement and parameters that insert the non-unique rows (a row already there takes
    /// the new type bits). The conflict names the primary key, whose columns depend on the
    /// layout (`schema::CITUS_LAYOUT` widens it).
    const INSERT_ENTRIES: &'static str =
        "INSERT INTO tideway.index_entries (index_id, entry, id_key, type_bits)
         SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])
         ON CONFLICT ON CONSTRAINT index_entries_pkey DO UPDATE SET type_bits = EXCLUDED.type_bits";

    /// Inserts every row with the connection's next statement (see `Conn::defer`); a unique
    /// key another document holds fails it with `Failure::Unique`.
    pub fn insert(self, conn: &Conn) {
        if !self.index_ids.is_empty() {
            conn.defer(
                Self::INSERT_ENTRIES,
                vec![
                    Box::new(self.index_ids),
                    Box::new(self.entries),
                    Box::new(self.entry_ids),
                    Box::new(self.bits),
                ],
            );
        }
        if !self.unique_index_ids.is_empty() {
            conn.defer(
                "INSERT INTO tideway.unique_entries (index_id, key, id_key, type_bits)
                 SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])",
                vec![
                    Box::new(self.unique_index_ids),
                    Box::new(self.unique_keys),
                    Box::new(self.unique_ids),
                    Box::new(self.unique_bits),
                ],
            );
        }
    }

    /// Inserts every row (an index build); the first unique row whose key is taken (by a stored
    /// document or an earlier row) is returned as `(index id, key, source)` instead, with
    /// nothing of the unique rows kept by the caller (it rolls back).
    pub async fn insert_new(&self, conn: &Conn) -> StorageResult<Option<(i64, Vec<u8>, usize)>> {
        let mut seen = HashSet::new();
        for row in 0..self.unique_index_ids.len() {
            if !seen.insert((self.unique_index_ids[row], &self.unique_keys[row])) {
                return Ok(Some(self.unique_row(row)));
            }
        }
        if !self.index_ids.is_empty() {
            conn.execute(
                Self::INSERT_ENTRIES,
                &[&self.index_ids, &self.entries, &self.entry_ids, &self.bits],
            )
            .await
            .map_err(Failure::into_storage)?;
        }
        if self.unique_index_ids.is_empty() {
            return Ok(None);
        }
        let inserted = conn
            .query(
                "INSERT INTO tideway.unique_entries (index_id, key, id_key, type_bits)
                 SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])
                 ON CONFLICT (index_id, key) DO NOTHING
                 RETURNING index_id, key",
                &[
                    &self.unique_index_ids,
                    &self.unique_keys,
                    &self.unique_ids,
                    &self.unique_bits,
                ],
            )
            .await
            .map_err(Failure::into_storage)?;
        if inserted.len() == self.unique_index_ids.len() {
            return Ok(None);
        }
        let inserted: HashSet<(i64, Vec<u8>)> = inserted
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let refused = (0..self.unique_index_ids.len())
            .find(|&row| {
                !inserted.contains(&(self.unique_index_ids[row], self.unique_keys[row].clone()))
            })
            .ok_or_else(|| StorageError::Io("an index build lost a refused entry".to_string()))?;
        Ok(Some(self.unique_row(refused)))
    }

    fn unique_row(&self, row: usize) -> (i64, Vec<u8>, usize) {
        (
            self.unique_index_ids[row],
            self.unique_keys[row].clone(),
            self.unique_sources[row],
        )
    }

    /// Deletes every row (unique ones only where their document still owns them) with the
    /// connection's next statement.
    ///
    /// Rows are matched pairwise, each a probe of the table's primary key, and nothing else:
    /// an `= ANY(array)` bound beside the join is applied by PostgreSQL in every probe (1,000
    /// rows, 1,000 × 1,000 comparisons).
    pub fn delete(self, conn: &Conn) {
        if !self.index_ids.is_empty() {
            conn.defer(
                "DELETE FROM tideway.index_entries e
                 USING unnest($1::bigint[], $2::bytea[]) AS r(index_id, entry)
                 WHERE e.index_id = r.index_id AND e.entry = r.entry",
                vec![Box::new(self.index_ids), Box::new(self.entries)],
            );
        }
        if !self.unique_index_ids.is_empty() {
            conn.defer(
                "DELETE FROM tideway.unique_entries e
                 USING unnest($1::bigint[], $2::bytea[], $3::bytea[]) AS r(index_id, key, id_key)
                 WHERE e.index_id = r.index_id AND e.key = r.key AND e.id_key = r.id_key",
                vec![
                    Box::new(self.unique_index_ids),
                    Box::new(self.unique_keys),
                    Box::new(self.unique_ids),
                ],
            );
        }
    }

    /// The columns of the rows, for a statement that inserts them with other rows
    /// (`write::insert_fast`): non-unique then unique.
    #[allow(clippy::type_complexity)]
    pub fn columns(
        &self,
    ) -> (
        (
            &Vec<i64>,
            &Vec<Vec<u8>>,
            &Vec<Vec<u8>>,
            &Vec<Option<Vec<u8>>>,
        ),
        (
            &Vec<i64>,
            &Vec<Vec<u8>>,
            &Vec<Vec<u8>>,
            &Vec<Option<Vec<u8>>>,
        ),
    ) {
        (
            (&self.index_ids, &self.entries, &self.entry_ids, &self.bits),
            (
                &self.unique_index_ids,
                &self.unique_keys,
                &self.unique_ids,
                &self.unique_bits,
            ),
        )
    }
}
