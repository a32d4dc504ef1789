//! Reads on PostgreSQL: point gets (one statement), paged scans (natural order, `_id` order, an
//! index, an expiry order; forward or reverse; keyset resume), entry counts and sizes. Each
//! statement is its own snapshot unless the connection is inside a transaction (a
//! [`crate::snapshot::PgSnapshot`]); no transaction outlives a call otherwise.
//!
//! Positions (resume keys) are the shared stored keys (`tideway_storage::entry_keys`): record
//! ids for natural order, `_id` keys for a clustered collection or `_id_`, index entries' stored
//! keys, and expiry keys (time ++ `_id`). Scan ranges are stored-key prefixes, turned into
//! `lower <= position < upper` ranges (`entry_keys::stored_range`), which is exactly what a
//! B-tree on the `bytea` column reads, since PostgreSQL compares `bytea` bytewise.
//!
//! Must not: return fewer records than the ranges describe (an entry whose document is missing
//! is skipped and counted), or read more than [`VISITS_PER_RECORD`] entries per record asked.

use std::ops::Bound;

use bson::Bson;
use tokio_postgres::types::ToSql;

use crate::collection::{Collection, Maintained};
use crate::conn::{Conn, Failure};
use crate::records::{record_columns, StoredRecord, RECORD_COLUMNS};
use crate::schema::Layout;
use tideway_query::keycodec::encode_id;
use tideway_storage::entry_keys::{
    after_resume, expiry_range, i64_of_ordered, is_empty, record_id_key, stored_range, TIME_LEN,
};
use tideway_storage::{
    CollectionStats, EntryCount, ExpiryOrder, IndexKind, IndexSpec, KeyRange, ReapSource, Record,
    ScanPage, ScanRequest, ScanSource, StorageError, StorageResult, TtlClass,
};

/// A page reads at most this many entries per record it may return, and at least
/// [`MIN_VISITS`].
const VISITS_PER_RECORD: usize = 16;
const MIN_VISITS: usize = 1024;

type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

fn storage<T>(attempt: Result<T, Failure>) -> StorageResult<T> {
    attempt.map_err(Failure::into_storage)
}

pub(crate) async fn get(
    conn: &Conn,
    collection: &Collection,
    id: &Bson,
) -> StorageResult<Option<Record>> {
    let id_key = encode_id(id);
    let row = storage(
        conn.query_opt(
            concat!(
                "SELECT ",
                record_columns!(),
                " FROM tideway.documents WHERE coll_id = $1 AND id_key = $2"
            ),
            &[&collection.id, &id_key],
        )
        .await,
    )?;
    match row {
        Some(row) => StoredRecord::read(&row, 0)?
            .map(StoredRecord::into_record)
            .transpose(),
        None => Ok(None),
    }
}

/// What a paged scan reads: each kind's rows are (position, type bits, record columns).
enum Scanned<'c> {
    /// Natural order of a collection that is not clustered: by record id.
    Natural,
    /// `_id` order (a clustered collection's natural order, or `_id_`).
    ById,
    /// A secondary index's entries, joined with their documents.
    Index(&'c Maintained),
    /// An expiry order, by (time, `_id` key).
    Expiry(ExpiryOrder),
}

/// One row a scan visits.
pub(crate) struct Visited {
    pub position: Vec<u8>,
    pub id_key: Vec<u8>,
    type_bits: Option<Vec<u8>>,
    pub record: Option<StoredRecord>,
}

/// A natural-order bound: the record id a stored key bound stands for. Positions are 8-byte
/// record ids; a longer key (an appended position, `Snapshot::appended_position`) lies after
/// its first 8 bytes' id.
fn record_id_bound(key: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    let take = key.len().min(8);
    bytes[..take].copy_from_slice(&key[..take]);
    let id = u64::from_be_bytes(bytes);
    let id = if key.len() > 8 {
        id.saturating_add(1)
    } else {
        id
    };
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// `(time, _id key)` of an expiry key bound.
fn expiry_bound(key: &[u8]) -> StorageResult<(i64, Vec<u8>)> {
    if key.len() < TIME_LEN {
        // Shorter than a time: a prefix of the smallest key of that time prefix.
        let mut padded = key.to_vec();
        padded.resize(TIME_LEN, 0);
        return Ok((i64_of_ordered(&padded)?, Vec::new()));
    }
    Ok((i64_of_ordered(key)?, key[TIME_LEN..].to_vec()))
}

/// The lower bound as an inclusive key: the next key after an excluded one is it plus a 0 byte.
fn inclusive_lower(bound: &Bound<Vec<u8>>) -> Vec<u8> {
    match bound {
        Bound::Included(key) => key.clone(),
        Bound::Excluded(key) => [key.as_slice(), &[0]].concat(),
        Bound::Unbounded => Vec::new(),
    }
}

impl Scanned<'_> {
    /// Up to `limit` rows of `range` (lower inclusive or unbounded, upper exclusive or
    /// unbounded), in order.
    async fn fetch(
        &self,
        conn: &Conn,
        collection: &Collection,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> StorageResult<Vec<Visited>> {
        let direction = if reverse { "DESC" } else { "ASC" };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let lower = inclusive_lower(&range.0);
        let upper = match &range.1 {
            Bound::Excluded(key) | Bound::Included(key) => Some(key.clone()),
            Bound::Unbounded => None,
        };
        let mut params: Params = vec![&collection.id];
        let sql =
            match self {
                Scanned::Natural => {
                    let low = record_id_bound(&lower);
                    let high = upper.as_deref().map(record_id_bound);
                    let sql = format!(
                        "SELECT record_id, id_key, {RECORD_COLUMNS} FROM tideway.documents
                     WHERE coll_id = $1 AND record_id >= $2 {}
                     ORDER BY record_id {direction} LIMIT ${}",
                        if high.is_some() {
                            "AND record_id < $3"
                        } else {
                            ""
                        },
                        if high.is_some() { 4 } else { 3 }
                    );
                    let mut bound_params: Vec<i64> = vec![low];
                    bound_params.extend(high);
                    let mut all: Params = vec![&collection.id];
                    for value in &bound_params {
                        all.push(value);
                    }
                    all.push(&limit);
                    let rows = storage(conn.query(&sql, &all).await)?;
                    return rows
                        .iter()
                        .map(|row| {
                            Ok(Visited {
                                position: record_id_key(row.get::<_, i64>(0) as u64).to_vec(),
                                id_key: row.get(1),
                                type_bits: None,
                                record: StoredRecord::read(row, 2)?,
                            })
                        })
                        .collect();
                }
                Scanned::ById => {
                    params.push(&lower);
                    if let Some(upper) = &upper {
                        params.push(upper);
                    }
                    format!(
                    "SELECT id_key, id_key, NULL::bytea, {RECORD_COLUMNS} FROM tideway.documents
                     WHERE coll_id = $1 AND id_key >= $2 {}
                     ORDER BY id_key {direction} LIMIT ${}",
                    if upper.is_some() { "AND id_key < $3" } else { "" },
                    params.len() + 1
                )
                }
                Scanned::Index(index) => {
                    params.push(&index.id);
                    params.push(&lower);
                    if let Some(upper) = &upper {
                        params.push(upper);
                    }
                    let (table, position) = if index.unique {
                        ("tideway.unique_entries", "key")
                    } else {
                        ("tideway.index_entries", "entry")
                    };
                    let entries = format!(
                        "SELECT {position}, id_key, type_bits FROM {table}
                         WHERE index_id = $2 AND {position} >= $3 {}
                         ORDER BY {position} {direction} LIMIT ${}",
                        if upper.is_some() {
                            format!("AND {position} < $4")
                        } else {
                            String::new()
                        },
                        params.len() + 1
                    );
                    // The entries first (a range of the index, limited), then each one's
                    // document by its key: a plan that never reads the collection whole.
                    match conn.layout() {
                        // `OFFSET 0` keeps the lookup a per-entry subquery: flattened into a
                        // join, stale statistics (a new collection looks empty) can make it a
                        // scan of the collection per entry.
                        Layout::Local => format!(
                            "SELECT e.{position}, e.id_key, e.type_bits, d.*
                             FROM ({entries}) e
                             LEFT JOIN LATERAL (
                                 SELECT {RECORD_COLUMNS} FROM tideway.documents
                                 WHERE coll_id = $1 AND id_key = e.id_key OFFSET 0) d ON true
                             ORDER BY e.{position} {direction}"
                        ),
                        // Citus joins a lateral subquery only to a table it is co-located
                        // with: the entries become an intermediate result it joins on every
                        // shard of `documents` (custom plans: the lookups by key).
                        Layout::Citus => format!(
                            "WITH e AS MATERIALIZED ({entries})
                             SELECT e.{position}, e.id_key, e.type_bits, {RECORD_COLUMNS}
                             FROM e LEFT JOIN tideway.documents d
                               ON d.coll_id = $1 AND d.id_key = e.id_key
                             ORDER BY e.{position} {direction}"
                        ),
                    }
                }
                Scanned::Expiry(order) => {
                    let (low_time, low_id) = expiry_bound(&lower)?;
                    let high = upper.as_deref().map(expiry_bound).transpose()?;
                    let (class, time) = expiry_columns(*order);
                    let sql = format!(
                        "SELECT {time}, id_key, {RECORD_COLUMNS} FROM tideway.documents
                     WHERE coll_id = $1 AND ttl_class = {class}
                       AND ({time}, id_key) >= ($2, $3) {}
                     ORDER BY {time} {direction}, id_key {direction} LIMIT ${}",
                        if high.is_some() {
                            format!("AND ({time}, id_key) < ($4, $5)")
                        } else {
                            String::new()
                        },
                        if high.is_some() { 6 } else { 4 }
                    );
                    let mut all: Params = vec![&collection.id, &low_time, &low_id];
                    if let Some((high_time, high_id)) = &high {
                        all.push(high_time);
                        all.push(high_id);
                    }
                    all.push(&limit);
                    let rows = storage(conn.query(&sql, &all).await)?;
                    return rows
                        .iter()
                        .map(|row| {
                            let time: i64 = row.get(0);
                            let id_key: Vec<u8> = row.get(1);
                            Ok(Visited {
                                position: tideway_storage::entry_keys::expiry_key(time, &id_key),
                                id_key,
                                type_bits: None,
                                record: StoredRecord::read(row, 2)?,
                            })
                        })
                        .collect();
                }
            };
        params.push(&limit);
        let rows = storage(conn.query(&sql, &params).await)?;
        rows.iter()
            .map(|row| {
                Ok(Visited {
                    position: row.get(0),
                    id_key: row.get(1),
                    type_bits: row.get(2),
                    record: StoredRecord::read(row, 3)?,
                })
            })
            .collect()
    }
}

/// The TTL class and time column of an expiry order.
pub(crate) fn expiry_columns(order: ExpiryOrder) -> (i16, &'static str) {
    match order {
        ExpiryOrder::LastWrite => (0, "last_write_ms"),
        ExpiryOrder::OwnExpiry => (2, "expire_at_ms"),
    }
}

/// How a page treats each visited row.
struct PageRules<'r> {
    request: &'r ScanRequest,
    /// The index scanned, when its entries may answer covered reads.
    covering: Option<&'r Maintained>,
    reads_index: bool,
    with_positions: bool,
}

/// One page over `ranges` (stored ranges, in scan order) of `scanned`, strictly after
/// `request.resume_after`.
async fn page(
    conn: &Conn,
    collection: &Collection,
    scanned: &Scanned<'_>,
    mut ranges: Vec<KeyRange>,
    rules: PageRules<'_>,
) -> StorageResult<ScanPage> {
    let request = rules.request;
    let limit = request.limit.max(1);
    let max_visited = limit.saturating_mul(VISITS_PER_RECORD).max(MIN_VISITS);
    if request.reverse {
        ranges.reverse();
    }
    let mut page = ScanPage::default();
    let mut visited = 0usize;
    for range in &ranges {
        let mut range = after_resume(range, request.resume_after.as_deref(), request.reverse);
        loop {
            if is_empty(&range) {
                break;
            }
            let budget = (limit - page.records.len()).min(max_visited - visited);
            let rows = scanned
                .fetch(conn, collection, &range, request.reverse, budget + 1)
                .await?;
            let exhausted = rows.len() <= budget;
            for row in rows {
                if page.records.len() == limit || visited == max_visited {
                    // There is at least one more entry.
                    page.keys_examined = if rules.reads_index { visited as u64 } else { 0 };
                    page.resume = page.last.clone();
                    return Ok(page);
                }
                visited += 1;
                visit(&mut page, &rules, row)?;
            }
            if exhausted {
                break;
            }
            range = after_resume(&range, page.last.as_deref(), request.reverse);
        }
    }
    page.keys_examined = if rules.reads_index { visited as u64 } else { 0 };
    Ok(page)
}

/// Handles one visited row: filtered by key, answered from its key (covered), hidden, dangling
/// or read.
fn visit(page: &mut ScanPage, rules: &PageRules<'_>, row: Visited) -> StorageResult<()> {
    let request = rules.request;
    let position = row.position;
    page.last = Some(position.clone());
    if request
        .key_filter
        .as_ref()
        .is_some_and(|filter| !filter.holds(&position))
    {
        return Ok(());
    }
    if let (Some(index), Some(bits), None) = (rules.covering, &row.type_bits, &request.hide) {
        let key = if index.unique {
            position.clone()
        } else {
            index_key_of(&position)?
        };
        page.records.push(Record {
            doc: index.keyer.covered_document(&key, bits)?.into(),
            rev: 0,
            last_write_ms: 0,
            ttl: TtlClass::Never,
        });
        if rules.with_positions {
            page.positions.push(position);
        }
        return Ok(());
    }
    page.docs_examined += 1;
    let Some(record) = row.record else {
        return Ok(());
    };
    if let Some(hide) = &request.hide {
        if hide.holds(&record.raw()?) {
            return Ok(());
        }
    }
    let mut record = record.into_record()?;
    if let Some(index) = rules.covering {
        record.doc = index.keyer.key_fields_of(&record.doc).into();
    }
    if rules.with_positions {
        page.positions.push(position);
    }
    page.records.push(record);
    Ok(())
}

/// The index key a non-unique entry's stored key starts with.
fn index_key_of(entry: &[u8]) -> StorageResult<Vec<u8>> {
    let id = tideway_storage::entry_keys::index_entry_id(entry)?;
    Ok(entry[..entry.len() - id.len() - 4].to_vec())
}

/// A scan page; with `positioned`, every page lists each record's position.
pub(crate) async fn scan(
    conn: &Conn,
    collection: &Collection,
    request: ScanRequest,
    positioned: bool,
) -> StorageResult<ScanPage> {
    let (scanned, ranges, reads_index) = match &request.source {
        ScanSource::Collection => {
            let scanned = if collection.clustered() {
                Scanned::ById
            } else {
                Scanned::Natural
            };
            (scanned, vec![(Bound::Unbounded, Bound::Unbounded)], false)
        }
        ScanSource::Index { name, ranges } => {
            let ranges: Vec<KeyRange> = ranges.iter().cloned().filter_map(stored_range).collect();
            if name == IndexSpec::ID_INDEX_NAME {
                (Scanned::ById, ranges, true)
            } else {
                match collection.index_named(name) {
                    None => return Err(StorageError::IndexNotFound(name.clone())),
                    // Catalog-only indexes have no entries.
                    Some(None) => return Ok(ScanPage::default()),
                    Some(Some(index)) => (Scanned::Index(index), ranges, true),
                }
            }
        }
    };
    let capped = matches!(scanned, Scanned::Natural) && collection.capped.is_some();
    if let (true, Some(resume)) = (capped, request.resume_after.as_deref()) {
        // A capped scan resumes exactly where it stopped or not at all (CappedPositionLost).
        let stored = storage(
            conn.query_opt(
                "SELECT 1 FROM tideway.documents WHERE coll_id = $1 AND record_id = $2",
                &[&collection.id, &record_id_bound(resume)],
            )
            .await,
        )?;
        if stored.is_none() {
            return Ok(ScanPage {
                position_lost: true,
                ..ScanPage::default()
            });
        }
    }
    let covering = match &scanned {
        Scanned::Index(index)
            if request.covered && index.keyer.spec().kind() == IndexKind::Ordered =>
        {
            Some(*index)
        }
        _ => None,
    };
    let rules = PageRules {
        request: &request,
        covering,
        reads_index,
        with_positions: positioned || capped,
    };
    page(conn, collection, &scanned, ranges, rules).await
}

pub(crate) async fn expiry_scan(
    conn: &Conn,
    collection: &Collection,
    order: ExpiryOrder,
    range: (Bound<i64>, Bound<i64>),
    resume_after: Option<Vec<u8>>,
    limit: usize,
) -> StorageResult<ScanPage> {
    let Some(range) = expiry_range(range) else {
        return Ok(ScanPage::default());
    };
    // The expiry order is the source; the request carries the paging.
    let request = ScanRequest::forward(ScanSource::Collection, resume_after, limit);
    let rules = PageRules {
        request: &request,
        covering: None,
        reads_index: false,
        with_positions: false,
    };
    page(
        conn,
        collection,
        &Scanned::Expiry(order),
        vec![range],
        rules,
    )
    .await
}

/// The next `limit` entries of a reap source after `resume_after`, with their documents (the
/// source's order; `None` for a source the collection does not have).
pub(crate) async fn reap_candidates(
    conn: &Conn,
    collection: &Collection,
    source: &ReapSource,
    resume_after: Option<&[u8]>,
    limit: usize,
) -> StorageResult<Option<Vec<Visited>>> {
    let (scanned, range) = match source {
        ReapSource::Expiry { order, range } => (Scanned::Expiry(*order), expiry_range(*range)),
        ReapSource::Index { name, range } => {
            let range = stored_range(range.clone());
            if name == IndexSpec::ID_INDEX_NAME {
                (Scanned::ById, range)
            } else {
                match collection.index_named(name) {
                    Some(Some(index)) => (Scanned::Index(index), range),
                    _ => return Ok(None),
                }
            }
        }
    };
    let Some(range) = range else {
        return Ok(Some(Vec::new()));
    };
    let range = after_resume(&range, resume_after, false);
    if is_empty(&range) {
        return Ok(Some(Vec::new()));
    }
    scanned
        .fetch(conn, collection, &range, false, limit.max(1))
        .await
        .map(Some)
}

/// The position a natural-order scan gives the stored document `id_key`.
pub(crate) async fn record_position(
    conn: &Conn,
    collection: &Collection,
    id_key: &[u8],
) -> StorageResult<Option<Vec<u8>>> {
    if collection.clustered() {
        let stored = storage(
            conn.query_opt(
                "SELECT 1 FROM tideway.documents WHERE coll_id = $1 AND id_key = $2",
                &[&collection.id, &id_key],
            )
            .await,
        )?;
        return Ok(stored.map(|_| id_key.to_vec()));
    }
    let row = storage(
        conn.query_opt(
            "SELECT record_id FROM tideway.documents WHERE coll_id = $1 AND id_key = $2",
            &[&collection.id, &id_key],
        )
        .await,
    )?;
    Ok(row.map(|row| record_id_key(row.get::<_, i64>(0) as u64).to_vec()))
}

/// The bounds of a stored range as an inclusive lower key and an exclusive upper one.
fn key_bounds(range: &KeyRange) -> (Vec<u8>, Option<Vec<u8>>) {
    let upper = match &range.1 {
        Bound::Excluded(key) | Bound::Included(key) => Some(key.clone()),
        Bound::Unbounded => None,
    };
    (inclusive_lower(&range.0), upper)
}

/// One `SELECT id_key …` per source, over one statement's owned parameters (`$1` is the
/// collection id).
#[derive(Default)]
struct SourceQueries {
    parts: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl SourceQueries {
    /// `$n` for a new parameter.
    fn param(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len() + 1)
    }

    /// `column >= lower [AND column < upper]` over parameters.
    fn between<T: ToSql + Sync + Send + 'static>(
        &mut self,
        column: &str,
        (lower, upper): (T, Option<T>),
    ) -> String {
        let mut sql = format!("{column} >= {}", self.param(lower));
        if let Some(upper) = upper {
            sql.push_str(&format!(" AND {column} < {}", self.param(upper)));
        }
        sql
    }

    fn add(&mut self, collection: &Collection, source: &ReapSource) -> StorageResult<()> {
        match source {
            ReapSource::Expiry { order, range } => {
                let Some(range) = expiry_range(*range) else {
                    return Ok(());
                };
                let (lower, upper) = key_bounds(&range);
                let times = (
                    expiry_bound(&lower)?.0,
                    upper
                        .as_deref()
                        .map(expiry_bound)
                        .transpose()?
                        .map(|(at, _)| at),
                );
                let (class, time) = expiry_columns(*order);
                let condition = self.between(time, times);
                self.parts.push(format!(
                    "SELECT id_key FROM tideway.documents
                     WHERE coll_id = $1 AND ttl_class = {class} AND {condition}"
                ));
            }
            ReapSource::Index { name, range } => {
                let Some(range) = stored_range(range.clone()) else {
                    return Ok(());
                };
                let bounds = key_bounds(&range);
                if name == IndexSpec::ID_INDEX_NAME {
                    let condition = self.between("id_key", bounds);
                    self.parts.push(format!(
                        "SELECT id_key FROM tideway.documents WHERE coll_id = $1 AND {condition}"
                    ));
                    return Ok(());
                }
                let Some(Some(index)) = collection.index_named(name) else {
                    return Ok(());
                };
                let (table, column) = if index.unique {
                    ("tideway.unique_entries", "key")
                } else {
                    ("tideway.index_entries", "entry")
                };
                let index_id = self.param(index.id);
                let condition = self.between(column, bounds);
                self.parts.push(format!(
                    "SELECT id_key FROM {table} WHERE index_id = {index_id} AND {condition}"
                ));
            }
        }
        Ok(())
    }
}

/// The documents of the collection, and how many distinct ones the sources' entries point to,
/// from one statement (one snapshot).
pub(crate) async fn count_entries(
    conn: &Conn,
    collection: &Collection,
    sources: &[ReapSource],
) -> StorageResult<EntryCount> {
    let mut queries = SourceQueries::default();
    for source in sources {
        queries.add(collection, source)?;
    }
    let in_sources = if queries.parts.is_empty() {
        "0::bigint".to_string()
    } else {
        format!(
            "(SELECT count(DISTINCT id_key) FROM ({}) s)",
            queries.parts.join(" UNION ALL ")
        )
    };
    let sql =
        format!("SELECT (SELECT count(*) FROM tideway.documents WHERE coll_id = $1), {in_sources}");
    let mut params: Params = vec![&collection.id];
    params.extend(
        queries
            .params
            .iter()
            .map(|param| param.as_ref() as &(dyn ToSql + Sync)),
    );
    let row = storage(conn.query_opt(&sql, &params).await)?;
    let (documents, in_sources) =
        row.map_or((0, 0), |row| (row.get::<_, i64>(0), row.get::<_, i64>(1)));
    Ok(EntryCount {
        documents: documents.max(0) as u64,
        in_sources: in_sources.max(0) as u64,
    })
}

pub(crate) async fn stats(conn: &Conn, collection: &Collection) -> StorageResult<CollectionStats> {
    let row = storage(
        conn.query_opt(
            "SELECT count(*), COALESCE(sum(octet_length(body)), 0)::bigint,
                    COALESCE(sum(octet_length(id_key)), 0)::bigint
             FROM tideway.documents WHERE coll_id = $1",
            &[&collection.id],
        )
        .await,
    )?;
    let (count, data_size, id_size) = row.map_or((0, 0, 0), |row| {
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
        )
    });
    let index_ids: Vec<i64> = collection.indexes.iter().map(|index| index.id).collect();
    let rows = storage(
        conn.query(
            "SELECT index_id, sum(octet_length(entry) + octet_length(id_key))::bigint
             FROM tideway.index_entries WHERE index_id = ANY($1) GROUP BY index_id
             UNION ALL
             SELECT index_id, sum(octet_length(key) + octet_length(id_key))::bigint
             FROM tideway.unique_entries WHERE index_id = ANY($1) GROUP BY index_id",
            &[&index_ids],
        )
        .await,
    )?;
    let sizes: std::collections::HashMap<i64, i64> =
        rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let index_sizes = collection
        .meta
        .indexes
        .iter()
        .map(|spec| {
            let size = if spec.is_id_index() {
                id_size
            } else {
                collection
                    .indexes
                    .iter()
                    .find(|index| index.keyer.spec().name == spec.name)
                    .and_then(|index| sizes.get(&index.id).copied())
                    .unwrap_or(0)
            };
            (spec.name.clone(), size.max(0) as u64)
        })
        .collect();
    Ok(CollectionStats {
        count: count.max(0) as u64,
        data_size: data_size.max(0) as u64,
        storage_size: data_size.max(0) as u64,
        index_sizes,
    })
}
