//! Document writes on PostgreSQL (`Storage::write`, `write_recorded`, `commit_transaction`).
//!
//! A batch is one database transaction. A batch of plain inserts (no capped collection, no index
//! becoming multikey) is first tried as one statement (`insert_quickly`: the documents, every
//! index entry and a retryable write's claim and session record in one data-modifying `WITH`, a
//! single round trip, atomic by itself); if a key or `_id` is taken there, the batch is redone
//! operation by operation. There
//! each operation validates completely before it changes anything (the stored document and every
//! unique key owner are read and locked first, `supersede` judged on them), so an operation that
//! fails leaves the transaction usable for the next one, as the contract's per-operation
//! atomicity requires. A unique violation or serialization failure met while mutating (a
//! concurrent writer won a race the checks could not see) rolls the whole batch back and redoes
//! it, up to [`ATTEMPTS`] times.
//!
//! Revisions come from the sequence `tideway.revisions` inside the statement that writes the
//! document, which uses a value drawn or, inserting many, the block of [`REVISION_BLOCK`]
//! values it starts; an insert's record id is its revision.
//!
//! A session claim (`SessionClaim`) is checked in the batch's own transaction, with its record
//! ([`store_session`]): refused, it aborts that transaction, so nothing of the batch stays,
//! whatever its operations found (a retry's insert meeting its own document) — the caller then
//! reads the record.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use tokio_postgres::Row;

use crate::catalog::{catalog_guard, mark_multikey};
use crate::collection::Collection;
use crate::conn::{Attempt, Conn, Failure, OwnedParams};
use crate::entries::EntryRows;
use crate::group::{GroupClaim, Grouped, GroupedInsert};
use crate::records::{record_columns, StoredRecord};
use crate::schema::Layout;
use crate::Database;
use tideway_storage::indexkeys::DocumentKeys;
use tideway_storage::oplog::EntryTime;
use tideway_storage::{
    IndexSpec, RecordPredicate, RecordSession, SessionClaim, SessionRecord, StorageError,
    StorageResult, WriteMeta, WriteOp, WriteOutcome,
};

/// What the sequence `tideway.revisions` increments by: each value drawn is the first of a
/// block of revisions its statement owns, so a statement inserting documents draws one value per
/// block of them instead of one per document (the schema's version 3 sets the increment).
pub(crate) const REVISION_BLOCK: i64 = 1024;

/// How often a batch that lost a race is redone before it fails with `WriteConflict`.
const ATTEMPTS: usize = 8;

/// One operation, encoded and keyed before any statement runs.
pub(crate) enum Prepared {
    Insert {
        id: Bson,
        id_key: Vec<u8>,
        doc: Document,
        body: Vec<u8>,
        meta: WriteMeta,
        keys: Vec<DocumentKeys>,
        supersede: Option<RecordPredicate>,
    },
    Replace {
        id_key: Vec<u8>,
        expected_rev: u64,
        doc: Document,
        body: Vec<u8>,
        meta: WriteMeta,
        keys: Vec<DocumentKeys>,
        supersede: Option<RecordPredicate>,
    },
    Delete {
        id_key: Vec<u8>,
        expected_rev: Option<u64>,
    },
    /// Fails without touching the database (a document that cannot be indexed or encoded).
    Invalid(StorageError),
}

impl Prepared {
    pub fn of(op: WriteOp, collection: &Collection) -> Prepared {
        let (id, id_key) = match op.checked_id() {
            Ok((id, id_key)) => (id.clone(), id_key),
            Err(error) => return Prepared::Invalid(error),
        };
        let encoded = |doc: &Document| -> StorageResult<(Vec<u8>, Vec<DocumentKeys>)> {
            let body = tideway_base::bsonutil::encode_document(doc)
                .map_err(|error| StorageError::Io(format!("cannot encode a document: {error}")))?;
            Ok((body, collection.keys_of(doc)?))
        };
        match op {
            WriteOp::Insert {
                doc,
                meta,
                supersede,
            } => match encoded(&doc) {
                Ok((body, keys)) => Prepared::Insert {
                    id_key,
                    id,
                    doc,
                    body,
                    meta,
                    keys,
                    supersede,
                },
                Err(error) => Prepared::Invalid(error),
            },
            WriteOp::Replace {
                expected_rev,
                doc,
                meta,
                supersede,
                ..
            } => match encoded(&doc) {
                Ok((body, keys)) => Prepared::Replace {
                    id_key,
                    expected_rev,
                    doc,
                    body,
                    meta,
                    keys,
                    supersede,
                },
                Err(error) => Prepared::Invalid(error),
            },
            WriteOp::Delete { expected_rev, .. } => Prepared::Delete {
                id_key,
                expected_rev,
            },
        }
    }

    /// The operation prepared again for `collection` (another version of its catalog row: its
    /// index keys are taken anew).
    pub fn rekeyed(mut self, collection: &Collection) -> Prepared {
        if let Prepared::Insert { doc, keys, .. } | Prepared::Replace { doc, keys, .. } = &mut self
        {
            match collection.keys_of(doc) {
                Ok(fresh) => *keys = fresh,
                Err(error) => return Prepared::Invalid(error),
            }
        }
        self
    }

    fn keys(&self) -> Option<&[DocumentKeys]> {
        match self {
            Prepared::Insert { keys, .. } | Prepared::Replace { keys, .. } => Some(keys),
            _ => None,
        }
    }
}

/// What a batch asks besides its operations.
pub(crate) struct BatchOptions<'a> {
    pub ordered: bool,
    /// A multi-document transaction's commit: the first failure fails everything (nothing is
    /// committed) and the isolation is REPEATABLE READ.
    pub all_or_nothing: bool,
    /// Builds the session record stored with the batch, from its results and the time of
    /// its last write.
    pub record: Option<&'a RecordSession>,
    /// The batch's claim on a session's txnNumber, checked before anything else it does.
    pub claim: Option<&'a SessionClaim>,
    /// The cluster time of a write (`seconds << 32 | increment`), taken once per batch.
    pub take_time: &'a (dyn Fn() -> u64 + Sync),
}

/// Results of a batch: one per attempted operation.
pub(crate) type Outcomes = Vec<StorageResult<WriteOutcome>>;

/// Whether an operation's failure is its own (the batch goes on) rather than the database's.
fn is_operation_error(error: &StorageError) -> bool {
    !matches!(
        error,
        StorageError::Io(_) | StorageError::Corrupt(_) | StorageError::Unavailable(_)
    )
}

/// The operations of one collection in a batch.
pub(crate) struct Group {
    pub collection: Arc<Collection>,
    pub ops: Vec<Prepared>,
    /// A transaction's rule for stale documents: a `Replace` or `Delete` whose current
    /// document it holds for is a `WriteConflict`.
    pub stale: Option<RecordPredicate>,
}

impl Group {
    /// Ids of the indexes the operations make multikey.
    fn newly_multikey(&self) -> Vec<i64> {
        self.collection
            .newly_multikey(self.ops.iter().filter_map(Prepared::keys))
    }
}

impl Database {
    /// Applies `groups` as one batch (see the module docs): one result list per group, and
    /// whether an index became multikey (the caller forgets its cached catalog). `None` when
    /// a group's collection changed on another node since its operations were prepared (the
    /// catalog guard failed): nothing was written, and the caller prepares them again with the
    /// collection read anew.
    pub(crate) async fn write_batch(
        self: &Arc<Self>,
        groups: &[Group],
        options: BatchOptions<'_>,
    ) -> StorageResult<Option<(Vec<Outcomes>, bool)>> {
        let multikey: Vec<Vec<i64>> = groups.iter().map(Group::newly_multikey).collect();
        let any_multikey = multikey.iter().any(|ids| !ids.is_empty());
        if let [group] = groups {
            let plain_inserts = !group.ops.is_empty()
                && group
                    .ops
                    .iter()
                    .all(|op| matches!(op, Prepared::Insert { .. }))
                && group.collection.capped.is_none()
                && !any_multikey
                && !options.all_or_nothing;
            if plain_inserts {
                match self
                    .insert_quickly(&group.collection, &group.ops, &options)
                    .await
                {
                    Ok(Some(outcomes)) => return Ok(Some((vec![outcomes], false))),
                    Ok(None) => {}
                    Err(Failure::StaleCatalog) => return Ok(None),
                    Err(failure) => return Err(failure.into_storage()),
                }
            }
        }
        let isolation = if options.all_or_nothing {
            "ISOLATION LEVEL REPEATABLE READ"
        } else {
            ""
        };
        for attempt in 1..=ATTEMPTS {
            let mut conn = Conn::get(self).await?;
            match try_batch(&mut conn, groups, &multikey, isolation, &options).await {
                Ok(outcomes) => return Ok(Some((outcomes, any_multikey))),
                Err(Failure::Unique | Failure::Serialization) => {
                    // The transaction is aborted. It is redone from the start unless it is a
                    // transaction's commit (its driver redoes it whole) or it lost too often.
                    conn.rollback().await.map_err(Failure::into_storage)?;
                    if options.all_or_nothing || attempt == ATTEMPTS {
                        break;
                    }
                }
                Err(Failure::StaleCatalog) => {
                    conn.rollback().await.map_err(Failure::into_storage)?;
                    return Ok(None);
                }
                Err(failure @ (Failure::Storage(_) | Failure::Refused)) => {
                    conn.rollback().await.map_err(Failure::into_storage)?;
                    return Err(failure.into_storage());
                }
            }
        }
        Err(StorageError::WriteConflict)
    }

    /// Checks `claim` and stores `record` with no write beside them (a batch whose operations
    /// all failed without touching the database).
    pub(crate) async fn store_record_alone(
        &self,
        claim: Option<&SessionClaim>,
        record: Option<&SessionRecord>,
    ) -> StorageResult<()> {
        if claim.is_none() && record.is_none() {
            return Ok(());
        }
        let mut conn = Conn::get(self).await?;
        let attempt = async {
            conn.begin("");
            store_session(&conn, claim, record)?;
            conn.commit().await
        }
        .await;
        if attempt.is_err() {
            conn.rollback().await.map_err(Failure::into_storage)?;
        }
        attempt.map_err(Failure::into_storage)
    }

    /// Plain inserts with one statement ([`insert_statement`]), the session record built for
    /// every insert succeeding (the statement inserts all or nothing). A retryable write's
    /// claim and record are part of that statement; a record without a claim goes in a
    /// transaction with it (`BEGIN`, record, insert, `COMMIT` sent at once). One round trip
    /// either way. `None` when a key or `_id` is taken (nothing was written): the batch goes
    /// the careful way.
    async fn insert_quickly(
        self: &Arc<Self>,
        collection: &Arc<Collection>,
        ops: &[Prepared],
        options: &BatchOptions<'_>,
    ) -> Attempt<Option<Outcomes>> {
        let record = options.record.and_then(|record| {
            let time = EntryTime::now((options.take_time)());
            record(&vec![true; ops.len()], time)
        });
        // On Citus a group's statement joins its sessions' claims as an intermediate result,
        // which reaches every shard of the session tables (measured: 38 inserts/s grouped,
        // 192 alone, 8 clients): each insert goes alone there, its claim and record routed to
        // its session's shard.
        let grouped = match self.layout {
            Layout::Local => groupable(ops, options.claim, record.as_ref())?,
            Layout::Citus => None,
        };
        if let Some(grouped) = grouped {
            match self.insert_grouped(collection, grouped).await {
                Grouped::Inserted(rev) => {
                    return Ok(Some(vec![Ok(WriteOutcome::Inserted {
                        rev,
                        superseded: 0,
                    })]))
                }
                Grouped::Failed(error) => return Err(Failure::Storage(error)),
                // Taken key or lost race: the careful way, as below.
                Grouped::Refused(Failure::Unique | Failure::Serialization) => return Ok(None),
                Grouped::Refused(refusal) => return Err(refusal),
                Grouped::Alone => {}
            }
        }
        let mut conn = Conn::get(self).await?;
        let claimed = match (options.claim, &record) {
            (Some(claim), Some(record)) => Some(ClaimValues::new(claim, Some(record))?),
            _ => None,
        };
        let in_transaction = claimed.is_none() && (record.is_some() || options.claim.is_some());
        if in_transaction {
            conn.begin("");
            store_session(&conn, options.claim, record.as_ref())?;
        }
        let inserted =
            insert_statement(&mut conn, collection, ops, claimed.as_ref(), in_transaction);
        match inserted.await {
            Ok(outcomes) => Ok(Some(outcomes)),
            Err(Failure::Unique | Failure::Serialization) => {
                conn.rollback().await?;
                Ok(None)
            }
            Err(failure) => {
                conn.rollback().await?;
                Err(failure)
            }
        }
    }
}

/// Inserts plain documents with one statement: every document (revisions from the sequence, in
/// batch order) and every index entry, and `claimed`'s claim and record if given (refused:
/// `Failure::Refused`, nothing written); with `commit`, the open transaction's `COMMIT` goes
/// with it. `Failure::Unique` if an `_id` or unique key is taken: then nothing was inserted.
async fn insert_statement(
    conn: &mut Conn,
    collection: &Collection,
    ops: &[Prepared],
    claimed: Option<&ClaimValues>,
    commit: bool,
) -> Attempt<Outcomes> {
    let mut columns = InsertColumns::with_capacity(ops.len());
    for op in ops {
        if let Prepared::Insert {
            id_key,
            body,
            meta,
            keys,
            ..
        } = op
        {
            columns.push(collection, id_key, body, meta, keys);
        }
    }
    let (mut params, with_entries, with_unique) = columns.params(collection);
    if let Some(claimed) = claimed {
        params.extend(claimed.params());
    }
    params.push(&collection.version);
    let blocks = blocks_for(columns.len());
    let shape = if claimed.is_some() {
        ClaimShape::One
    } else {
        ClaimShape::None
    };
    let sql = insert_sql(with_entries, with_unique, shape, blocks);
    let rows = if commit {
        conn.query_and_commit(sql, &params).await?
    } else {
        conn.query(sql, &params).await?
    };
    Ok(revisions(&rows, blocks, columns.len())?
        .into_iter()
        .map(|rev| Ok(WriteOutcome::Inserted { rev, superseded: 0 }))
        .collect())
}

/// A parameter of a statement.
pub(crate) type Param<'p> = &'p (dyn tokio_postgres::types::ToSql + Sync);

/// Plain inserts as [`insert_sql`] takes them: the documents' columns and their index entries.
pub(crate) struct InsertColumns<'a> {
    id_keys: Vec<&'a [u8]>,
    times: Vec<i64>,
    classes: Vec<i16>,
    expiries: Vec<i64>,
    bodies: Vec<&'a [u8]>,
    entries: EntryRows,
}

impl<'a> InsertColumns<'a> {
    pub fn with_capacity(documents: usize) -> Self {
        InsertColumns {
            id_keys: Vec::with_capacity(documents),
            times: Vec::with_capacity(documents),
            classes: Vec::with_capacity(documents),
            expiries: Vec::with_capacity(documents),
            bodies: Vec::with_capacity(documents),
            entries: EntryRows::default(),
        }
    }

    /// Adds the next document of `collection` (`keys`: its keys in each of the collection's
    /// indexes).
    pub fn push(
        &mut self,
        collection: &Collection,
        id_key: &'a [u8],
        body: &'a [u8],
        meta: &WriteMeta,
        keys: &[DocumentKeys],
    ) {
        let source = self.id_keys.len();
        let (class, expire_at_ms) = collection.ttl_columns(meta.ttl);
        self.id_keys.push(id_key);
        self.times.push(meta.last_write_ms);
        self.classes.push(class);
        self.expiries.push(expire_at_ms);
        self.bodies.push(body);
        for (index, keys) in collection.indexes.iter().zip(keys) {
            self.entries.add(index, id_key, keys, source);
        }
    }

    pub fn len(&self) -> usize {
        self.id_keys.len()
    }

    /// The statement's parameters before any claim's, and whether it has non-unique and unique
    /// entries to insert.
    pub fn params<'p>(&'p self, collection: &'p Collection) -> (Vec<Param<'p>>, bool, bool) {
        let ((ids, keys, entry_ids, bits), (unique_ids, unique_keys, owners, unique_bits)) =
            self.entries.columns();
        let mut params: Vec<Param> = vec![
            &collection.id,
            &self.id_keys,
            &self.times,
            &self.classes,
            &self.expiries,
            &self.bodies,
        ];
        let with_entries = !ids.is_empty();
        if with_entries {
            params.extend::<[Param; 4]>([ids, keys, entry_ids, bits]);
        }
        let with_unique = !unique_ids.is_empty();
        if with_unique {
            params.extend::<[Param; 4]>([unique_ids, unique_keys, owners, unique_bits]);
        }
        (params, with_entries, with_unique)
    }
}

/// The revision blocks an insert of `documents` draws.
pub(crate) fn blocks_for(documents: usize) -> usize {
    documents.div_ceil(REVISION_BLOCK as usize)
}

/// The revisions of `documents` inserted by an [`insert_sql`] statement that returned `rows`
/// (one row: the `blocks` it drew, ascending), in batch order.
pub(crate) fn revisions(rows: &[Row], blocks: usize, documents: usize) -> Attempt<Vec<u64>> {
    let bases: Vec<i64> = match rows {
        [row] => row.get(0),
        _ => Vec::new(),
    };
    if bases.len() != blocks {
        return Err(Failure::Storage(StorageError::Io(
            "the inserted documents' revisions were not returned".to_string(),
        )));
    }
    Ok(bases
        .iter()
        .flat_map(|base| (0..REVISION_BLOCK).map(move |offset| (base + offset) as u64))
        .take(documents)
        .collect())
}

/// The single insert of `ops` as a group member ([`crate::group`]), when it is one: a plain
/// insert with neither claim nor record, or a claim with a record of its one statement.
fn groupable(
    ops: &[Prepared],
    claim: Option<&SessionClaim>,
    record: Option<&SessionRecord>,
) -> Attempt<Option<GroupedInsert>> {
    let [Prepared::Insert {
        id_key,
        body,
        meta,
        keys,
        ..
    }] = ops
    else {
        return Ok(None);
    };
    let claim = match (claim, record) {
        (None, None) => None,
        (Some(claim), Some(record)) => match record.statements.as_slice() {
            [(stmt_id, reply)] => Some(GroupClaim {
                key: claim.key.clone(),
                txn_number: claim.txn_number,
                header: record_header(record)?,
                stmt_id: *stmt_id,
                reply: encode_session_part(reply)?,
            }),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    Ok(Some(GroupedInsert {
        id_key: id_key.clone(),
        body: body.clone(),
        meta: *meta,
        keys: keys.clone(),
        claim,
    }))
}

/// The claims an [`insert_sql`] statement stores.
#[derive(Clone, Copy)]
pub(crate) enum ClaimShape {
    None,
    /// One claim with its record, parameters as [`claim_ctes`] takes them.
    One,
    /// Claims of one statement each (a group's): their keys, numbers, headers, stmtIds and
    /// replies as five arrays, then their count.
    Several,
}

/// The statement of [`insert_statement`]: the documents (`$1` collection, `$2..$6` columns),
/// then the non-unique entries and the unique entries (four columns each) when there are any,
/// then a claim's five ([`claim_ctes`]) or a group's six ([`ClaimShape::Several`]) as `claims`
/// says, then the collection's catalog version ([`catalog_guard`]); the statement fails with a
/// division by zero when a claim is refused, and as the guard fails when the catalog is stale. It draws one value from the sequence
/// per [`REVISION_BLOCK`] documents and returns them ascending in one row: the documents'
/// revisions are those blocks in batch order (the natural order is theirs).
pub(crate) fn insert_sql(
    with_entries: bool,
    with_unique: bool,
    claims: ClaimShape,
    blocks: usize,
) -> &'static str {
    static VARIANTS: [std::sync::OnceLock<String>; 24] = [const { std::sync::OnceLock::new() }; 24];
    let several_blocks = blocks > 1;
    let variant = usize::from(several_blocks) * 12
        + claims as usize * 4
        + usize::from(with_entries) * 2
        + usize::from(with_unique);
    VARIANTS[variant].get_or_init(|| {
        // One block (most batches) takes one value; more take one each, in order.
        let (drawn, revision) = if several_blocks {
            (
                "SELECT array_agg(base ORDER BY base) AS bases
                 FROM (SELECT nextval('tideway.revisions') AS base
                       FROM generate_series(1, (cardinality($2::bytea[]) + {block} - 1) / {block}))
                     drawn",
                "bases[((o - 1) / {block} + 1)::integer] + (o - 1) % {block}",
            )
        } else {
            (
                "SELECT ARRAY[nextval('tideway.revisions')] AS bases",
                "bases[1] + o - 1",
            )
        };
        let mut sql = format!(
            "WITH blocks AS ({drawn}),
             new_documents AS (
                INSERT INTO tideway.documents
                    (coll_id, id_key, record_id, rev, last_write_ms, ttl_class, expire_at_ms, body)
                SELECT $1, k, r, r, w, c, e, b FROM (
                    SELECT k, w, c, e, b, {revision} AS r
                    FROM blocks, unnest($2::bytea[], $3::bigint[], $4::smallint[],
                                        $5::bigint[], $6::bytea[])
                        WITH ORDINALITY AS t(k, w, c, e, b, o)) numbered)"
        )
        .replace("{block}", &REVISION_BLOCK.to_string());
        let mut next = 7;
        let mut columns = || {
            let list = format!(
                "${}::bigint[], ${}::bytea[], ${}::bytea[], ${}::bytea[]",
                next,
                next + 1,
                next + 2,
                next + 3
            );
            next += 4;
            list
        };
        if with_entries {
            sql.push_str(&format!(
                ", new_entries AS (
                    INSERT INTO tideway.index_entries (index_id, entry, id_key, type_bits)
                    SELECT * FROM unnest({}))",
                columns()
            ));
        }
        if with_unique {
            sql.push_str(&format!(
                ", new_unique AS (
                    INSERT INTO tideway.unique_entries (index_id, key, id_key, type_bits)
                    SELECT * FROM unnest({}))",
                columns()
            ));
        }
        // The statement's result: the blocks, and a claim's check (a division by zero when it
        // is refused), beside the catalog guard, whose parameter comes last.
        let checked = match claims {
            ClaimShape::None => String::new(),
            ClaimShape::One => {
                sql.push_str(&format!(", {}", claim_ctes(next)));
                next += 5;
                ", 1 / (SELECT count(*) FROM claimed)".to_string()
            }
            ClaimShape::Several => {
                let [keys, numbers, headers, stmt_ids, replies, count] =
                    [next, next + 1, next + 2, next + 3, next + 4, next + 5];
                next += 6;
                sql.push_str(&format!(
                    ", claimed AS (
                        INSERT INTO tideway.sessions AS s (key, txn_number, header, stmt_ids, bodies)
                        SELECT k, t, h, ARRAY[i], ARRAY[r]
                        FROM unnest(${keys}::bytea[], ${numbers}::bigint[], ${headers}::bytea[],
                                    ${stmt_ids}::integer[], ${replies}::bytea[]) AS c(k, t, h, i, r)
                        ON CONFLICT (key) DO UPDATE SET txn_number = EXCLUDED.txn_number,
                            header = EXCLUDED.header,
                            stmt_ids = EXCLUDED.stmt_ids, bodies = EXCLUDED.bodies
                        WHERE s.txn_number < EXCLUDED.txn_number
                        RETURNING s.key),
                     older AS (
                        DELETE FROM tideway.session_commits c USING claimed
                        WHERE c.key = claimed.key)"
                ));
                format!(
                    ", 1 / (CASE WHEN (SELECT count(*) FROM claimed) = ${count}::bigint
                          THEN 1 ELSE 0 END)"
                )
            }
        };
        sql.push_str(&format!(
            ", guard AS ({}) SELECT bases{checked} FROM blocks, guard",
            catalog_guard(1, next)
        ));
        sql
    })
}

async fn try_batch(
    conn: &mut Conn,
    groups: &[Group],
    multikey: &[Vec<i64>],
    isolation: &str,
    options: &BatchOptions<'_>,
) -> Attempt<Vec<Outcomes>> {
    conn.begin(isolation);
    // Each collection's catalog guard goes out with the first statement, before any write.
    static GUARD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let guard = GUARD.get_or_init(|| catalog_guard(1, 2));
    for group in groups {
        conn.defer(
            guard,
            vec![
                Box::new(group.collection.id),
                Box::new(group.collection.version),
            ],
        );
    }
    let mut all = Vec::with_capacity(groups.len());
    for (group, multikey) in groups.iter().zip(multikey) {
        if !multikey.is_empty() {
            mark_multikey(conn, group.collection.id, multikey).await?;
        }
        let mut outcomes = Vec::with_capacity(group.ops.len());
        for op in &group.ops {
            match apply(conn, &group.collection, op, group.stale.as_ref()).await {
                Ok(outcome) => outcomes.push(Ok(outcome)),
                Err(Failure::Storage(error)) if is_operation_error(&error) => {
                    if options.all_or_nothing {
                        return Err(Failure::Storage(error));
                    }
                    outcomes.push(Err(error));
                    if options.ordered {
                        break;
                    }
                }
                Err(failure) => return Err(failure),
            }
        }
        all.push(outcomes);
    }
    // The claim goes with the record, last: refused, it aborts the transaction, so none of the
    // operations stays (what they found is not reported: the caller reads the record).
    let record = options.record.and_then(|record| {
        let time = EntryTime::now((options.take_time)());
        let succeeded: Vec<bool> = all.iter().flatten().map(Result::is_ok).collect();
        record(&succeeded, time)
    });
    store_session(conn, options.claim, record.as_ref())?;
    conn.commit().await?;
    Ok(all)
}

/// A stored document to delete with everything that points to it.
struct Removal {
    id_key: Vec<u8>,
    entries: EntryRows,
}

/// Reads the stored record of `id_key` of `collection`, locked until the transaction ends (one
/// row by its key: Citus locks rows only in a statement routed to one shard).
async fn locked_record(
    conn: &Conn,
    collection: &Collection,
    id_key: &[u8],
) -> Attempt<Option<StoredRecord>> {
    let row = conn
        .query_opt(
            concat!(
                "SELECT ",
                record_columns!(),
                " FROM tideway.documents WHERE coll_id = $1 AND id_key = $2 FOR UPDATE"
            ),
            &[&collection.id, &id_key],
        )
        .await?;
    match row {
        Some(row) => Ok(StoredRecord::read(&row, 0)?),
        None => Ok(None),
    }
}

/// What removing the stored `record` of `id_key` deletes.
fn plan_removal(
    collection: &Collection,
    id_key: &[u8],
    record: &StoredRecord,
) -> StorageResult<Removal> {
    let document = record.document()?;
    let mut entries = EntryRows::default();
    for (index, keys) in collection
        .indexes
        .iter()
        .zip(collection.keys_of(&document)?)
    {
        entries.add(index, id_key, &keys, 0);
    }
    Ok(Removal {
        id_key: id_key.to_vec(),
        entries,
    })
}

/// Deletes the documents of `removals` with their entries, with the connection's next statement.
fn remove(conn: &Conn, collection: &Collection, removals: Vec<Removal>) {
    if removals.is_empty() {
        return;
    }
    let mut id_keys = Vec::with_capacity(removals.len());
    for removal in removals {
        removal.entries.delete(conn);
        id_keys.push(removal.id_key);
    }
    conn.defer(
        "DELETE FROM tideway.documents WHERE coll_id = $1 AND id_key = ANY($2)",
        vec![Box::new(collection.id), Box::new(id_keys)],
    );
}

/// Resolves a conflict with the stored document `owner`: superseded (added to `superseded`) if
/// `supersede` holds for it, else `conflict()`.
async fn resolve_conflict(
    conn: &Conn,
    collection: &Collection,
    owner: &[u8],
    supersede: Option<&RecordPredicate>,
    superseded: &mut Vec<Removal>,
    conflict: impl FnOnce() -> StorageError,
) -> Attempt<()> {
    if superseded.iter().any(|removal| removal.id_key == owner) {
        return Ok(());
    }
    let Some(supersede) = supersede else {
        return Err(Failure::Storage(conflict()));
    };
    let Some(record) = locked_record(conn, collection, owner).await? else {
        return Err(Failure::Storage(conflict()));
    };
    if !supersede.holds(&record.raw()?) {
        return Err(Failure::Storage(conflict()));
    }
    superseded.push(plan_removal(collection, owner, &record)?);
    Ok(())
}

/// Resolves every new unique key of `document` (one it does not already hold) that another
/// document holds.
#[allow(clippy::too_many_arguments)]
async fn check_unique(
    conn: &Conn,
    collection: &Collection,
    document: &Document,
    id_key: &[u8],
    new_keys: &[DocumentKeys],
    old_keys: Option<&[DocumentKeys]>,
    supersede: Option<&RecordPredicate>,
    superseded: &mut Vec<Removal>,
) -> Attempt<()> {
    let mut index_ids = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    for (position, (index, new)) in collection.indexes.iter().zip(new_keys).enumerate() {
        if !index.unique {
            continue;
        }
        let held = old_keys.and_then(|old| old.get(position));
        for key in &new.keys {
            if held.is_none_or(|held| held.keys.binary_search(key).is_err()) {
                index_ids.push(index.id);
                keys.push(key);
            }
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    let owners = conn
        .query(
            "SELECT u.index_id, u.key, u.id_key FROM tideway.unique_entries u
             JOIN unnest($1::bigint[], $2::bytea[]) AS k(index_id, key)
               ON u.index_id = k.index_id AND u.key = k.key",
            &[&index_ids, &keys],
        )
        .await?;
    for row in &owners {
        let owner: Vec<u8> = row.get(2);
        if owner == id_key {
            continue;
        }
        let index_id: i64 = row.get(0);
        let key: Vec<u8> = row.get(1);
        let Some(index) = collection.indexes.iter().find(|index| index.id == index_id) else {
            continue;
        };
        resolve_conflict(conn, collection, &owner, supersede, superseded, || {
            index
                .keyer
                .duplicate_key(&collection.meta.ns, document, &key)
        })
        .await?;
    }
    Ok(())
}

/// Moves `id_key`'s entries from its `old` keys to its `new` ones, touching only the keys that
/// differ and the kept keys whose type bits changed.
fn move_entries(
    conn: &Conn,
    collection: &Collection,
    id_key: &[u8],
    old: Option<&[DocumentKeys]>,
    new: &[DocumentKeys],
) {
    let none = DocumentKeys::default();
    let mut removed = EntryRows::default();
    let mut added = EntryRows::default();
    for (position, (index, new)) in collection.indexes.iter().zip(new).enumerate() {
        let old = old.and_then(|old| old.get(position)).unwrap_or(&none);
        let bits_changed = old.type_bits != new.type_bits;
        for key in &old.keys {
            let kept = new.keys.binary_search(key).is_ok();
            // A unique entry's bits change by delete and insert; a non-unique one's in place.
            if !kept || (bits_changed && index.unique) {
                removed.add_key(index, id_key, key, None, 0);
            }
        }
        for key in &new.keys {
            if bits_changed || old.keys.binary_search(key).is_err() {
                added.add_key(index, id_key, key, new.type_bits.as_deref(), 0);
            }
        }
    }
    removed.delete(conn);
    added.insert(conn);
}

/// Deletes the oldest documents of a capped collection while it holds more than its limits
/// allow, never `inserted`.
async fn roll_over(conn: &Conn, collection: &Collection, inserted: &[u8]) -> Attempt<()> {
    let Some(limits) = collection.capped else {
        return Ok(());
    };
    loop {
        let row = conn
            .query_opt(
                "SELECT count(*), COALESCE(sum(octet_length(body)), 0)::bigint
                 FROM tideway.documents WHERE coll_id = $1",
                &[&collection.id],
            )
            .await?;
        let (docs, bytes) = row.map_or((0, 0), |row| (row.get::<_, i64>(0), row.get::<_, i64>(1)));
        let (docs, bytes) = (docs.max(0) as u64, bytes.max(0) as u64);
        if bytes <= limits.max_bytes && limits.max_docs.is_none_or(|max| docs <= max) {
            return Ok(());
        }
        let oldest = conn
            .query_opt(
                concat!(
                    "SELECT id_key, ",
                    record_columns!(),
                    " FROM tideway.documents WHERE coll_id = $1 ORDER BY record_id LIMIT 1 FOR UPDATE"
                ),
                &[&collection.id],
            )
            .await?;
        let Some(oldest) = oldest else {
            return Ok(());
        };
        let id_key: Vec<u8> = oldest.get(0);
        if id_key == inserted {
            return Ok(());
        }
        let Some(record) = StoredRecord::read(&oldest, 1)? else {
            return Ok(());
        };
        let removal = plan_removal(collection, &id_key, &record)?;
        remove(conn, collection, vec![removal]);
    }
}

/// Deletes the superseded documents (with the next statement); their count.
fn remove_superseded(conn: &Conn, collection: &Collection, superseded: Vec<Removal>) -> u32 {
    // At most one per unique index and key of one document: far below u32::MAX.
    let count = u32::try_from(superseded.len()).unwrap_or(u32::MAX);
    remove(conn, collection, superseded);
    count
}

/// Applies one operation inside the batch's transaction (see the module docs).
async fn apply(
    conn: &Conn,
    collection: &Collection,
    op: &Prepared,
    stale: Option<&RecordPredicate>,
) -> Attempt<WriteOutcome> {
    let current = |record: Option<StoredRecord>, expected_rev: Option<u64>| {
        let record = record
            .filter(|record| expected_rev.is_none_or(|expected| record.rev == expected))
            .ok_or(Failure::Storage(StorageError::WriteConflict))?;
        if let Some(stale) = stale {
            if stale.holds(&record.raw()?) {
                return Err(Failure::Storage(StorageError::WriteConflict));
            }
        }
        Ok(record)
    };
    if stale.is_none() {
        if let Some(outcome) = apply_quickly(conn, collection, op).await? {
            return Ok(outcome);
        }
    }
    match op {
        Prepared::Insert {
            id,
            id_key,
            doc,
            body,
            meta,
            keys,
            supersede,
        } => {
            if let Some(limits) = collection.capped {
                if body.len() as u64 > limits.max_bytes {
                    return Err(Failure::Storage(StorageError::ExceedsCappedSize));
                }
            }
            let mut superseded = Vec::new();
            if locked_record(conn, collection, id_key).await?.is_some() {
                resolve_conflict(
                    conn,
                    collection,
                    id_key,
                    supersede.as_ref(),
                    &mut superseded,
                    || StorageError::DuplicateKey {
                        ns: collection.meta.ns.clone(),
                        index: IndexSpec::ID_INDEX_NAME.to_string(),
                        key_pattern: Box::new(collection.id_index_spec().key_pattern()),
                        key_value: Box::new(doc! {"_id": id.clone()}),
                    },
                )
                .await?;
            }
            check_unique(
                conn,
                collection,
                doc,
                id_key,
                keys,
                None,
                supersede.as_ref(),
                &mut superseded,
            )
            .await?;
            let superseded = remove_superseded(conn, collection, superseded);
            let rev = store_document(conn, collection, id_key, *meta, body, Stored::New).await?;
            move_entries(conn, collection, id_key, None, keys);
            roll_over(conn, collection, id_key).await?;
            Ok(WriteOutcome::Inserted { rev, superseded })
        }
        Prepared::Replace {
            id_key,
            expected_rev,
            doc,
            body,
            meta,
            keys,
            supersede,
        } => {
            let old = current(
                locked_record(conn, collection, id_key).await?,
                Some(*expected_rev),
            )?;
            let old_keys = collection.keys_of(&old.document()?)?;
            let mut superseded = Vec::new();
            check_unique(
                conn,
                collection,
                doc,
                id_key,
                keys,
                Some(&old_keys),
                supersede.as_ref(),
                &mut superseded,
            )
            .await?;
            let superseded = remove_superseded(conn, collection, superseded);
            let rev =
                store_document(conn, collection, id_key, *meta, body, Stored::Replaced).await?;
            move_entries(conn, collection, id_key, Some(&old_keys), keys);
            Ok(WriteOutcome::Replaced { rev, superseded })
        }
        Prepared::Delete {
            id_key,
            expected_rev,
        } => {
            let old = current(
                locked_record(conn, collection, id_key).await?,
                *expected_rev,
            )?;
            let removal = plan_removal(collection, id_key, &old)?;
            remove(conn, collection, vec![removal]);
            Ok(WriteOutcome::Deleted)
        }
        Prepared::Invalid(error) => Err(Failure::Storage(error.clone())),
    }
}

/// A replace or delete in one statement that checks the revision and returns the stored
/// document it replaced or deleted (its old keys are deleted with the next statement): for
/// deletes, and for replaces in collections without unique secondary indexes (nothing a
/// replacement writes can conflict there). `None`: the operation needs `apply`'s checks.
async fn apply_quickly(
    conn: &Conn,
    collection: &Collection,
    op: &Prepared,
) -> Attempt<Option<WriteOutcome>> {
    let with_entries = !collection.indexes.is_empty();
    match op {
        Prepared::Replace {
            id_key,
            expected_rev,
            body,
            meta,
            keys,
            ..
        } if collection.indexes.iter().all(|index| !index.unique) => {
            let (class, expire_at_ms) = collection.ttl_columns(meta.ttl);
            let expected = *expected_rev as i64;
            // A replaced document keeps its record id: its place in natural order.
            let row = conn
                .query_opt(
                    "WITH old AS (
                        SELECT body FROM tideway.documents
                        WHERE coll_id = $1 AND id_key = $2 AND rev = $7 FOR UPDATE)
                     UPDATE tideway.documents d SET rev = numbered.r,
                        last_write_ms = $3, ttl_class = $4, expire_at_ms = $5, body = $6
                     FROM old, (SELECT nextval('tideway.revisions') AS r) numbered
                     WHERE d.coll_id = $1 AND d.id_key = $2
                     RETURNING d.rev, CASE WHEN $8 THEN old.body END",
                    &[
                        &collection.id,
                        id_key,
                        &meta.last_write_ms,
                        &class,
                        &expire_at_ms,
                        body,
                        &expected,
                        &with_entries,
                    ],
                )
                .await?;
            let Some(row) = row else {
                return Err(Failure::Storage(StorageError::WriteConflict));
            };
            if with_entries {
                let old_body: Vec<u8> = row.get(1);
                let old_keys = collection.keys_of(&decode_stored(&old_body)?)?;
                move_entries(conn, collection, id_key, Some(&old_keys), keys);
            }
            Ok(Some(WriteOutcome::Replaced {
                rev: row.get::<_, i64>(0) as u64,
                superseded: 0,
            }))
        }
        Prepared::Delete {
            id_key,
            expected_rev,
        } => {
            let expected = expected_rev.map(|rev| rev as i64);
            let row = conn
                .query_opt(
                    "DELETE FROM tideway.documents
                     WHERE coll_id = $1 AND id_key = $2 AND ($3::bigint IS NULL OR rev = $3)
                     RETURNING CASE WHEN $4 THEN body END",
                    &[&collection.id, id_key, &expected, &with_entries],
                )
                .await?;
            let Some(row) = row else {
                return Err(Failure::Storage(StorageError::WriteConflict));
            };
            if with_entries {
                let old_body: Vec<u8> = row.get(0);
                let mut entries = EntryRows::default();
                for (index, keys) in collection
                    .indexes
                    .iter()
                    .zip(collection.keys_of(&decode_stored(&old_body)?)?)
                {
                    entries.add(index, id_key, &keys, 0);
                }
                entries.delete(conn);
            }
            Ok(Some(WriteOutcome::Deleted))
        }
        _ => Ok(None),
    }
}

fn decode_stored(body: &[u8]) -> StorageResult<Document> {
    tideway_base::bsonutil::decode_document(body)
        .map_err(|error| StorageError::Corrupt(format!("stored document: {error}")))
}

/// Whether [`store_document`] adds a document or rewrites the stored one.
#[derive(Clone, Copy)]
enum Stored {
    /// A new row: its revision is also its record id (last in natural order).
    New,
    /// The stored row: it keeps its record id, its place in natural order.
    Replaced,
}

/// Writes the document's row with a new revision from the sequence; returns the revision.
async fn store_document(
    conn: &Conn,
    collection: &Collection,
    id_key: &[u8],
    meta: WriteMeta,
    body: &[u8],
    stored: Stored,
) -> Attempt<u64> {
    let sql = match stored {
        Stored::New => {
            "INSERT INTO tideway.documents
                (coll_id, id_key, record_id, rev, last_write_ms, ttl_class, expire_at_ms, body)
             SELECT $1, $2, r, r, $3, $4, $5, $6
             FROM (SELECT nextval('tideway.revisions') AS r) numbered
             RETURNING rev"
        }
        Stored::Replaced => {
            // The revision is drawn in a subquery: Citus refuses volatile functions in an
            // `UPDATE`'s `SET` on its tables, not in its `FROM`.
            "UPDATE tideway.documents SET rev = numbered.r,
                last_write_ms = $3, ttl_class = $4, expire_at_ms = $5, body = $6
             FROM (SELECT nextval('tideway.revisions') AS r) numbered
             WHERE coll_id = $1 AND id_key = $2
             RETURNING rev"
        }
    };
    let (class, expire_at_ms) = collection.ttl_columns(meta.ttl);
    let row = conn
        .query_opt(
            sql,
            &[
                &collection.id,
                &id_key,
                &meta.last_write_ms,
                &class,
                &expire_at_ms,
                &body,
            ],
        )
        .await?;
    row.map(|row| row.get::<_, i64>(0) as u64).ok_or_else(|| {
        Failure::Storage(StorageError::Io(
            "a written document's revision was not returned".to_string(),
        ))
    })
}

/// A claim and the record that goes with it, encoded as [`claim_ctes`] takes them.
pub(crate) struct ClaimValues {
    key: Vec<u8>,
    txn_number: i64,
    header: Option<Vec<u8>>,
    stmt_ids: Vec<i32>,
    bodies: Vec<Vec<u8>>,
}

impl ClaimValues {
    fn new(claim: &SessionClaim, record: Option<&SessionRecord>) -> Attempt<ClaimValues> {
        let (stmt_ids, bodies) = match record {
            Some(record) => record_statements(record)?,
            None => (Vec::new(), Vec::new()),
        };
        Ok(ClaimValues {
            key: claim.key.clone(),
            txn_number: claim.txn_number,
            header: record.map(record_header).transpose()?,
            stmt_ids,
            bodies,
        })
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 5] {
        [
            &self.key,
            &self.txn_number,
            &self.header,
            &self.stmt_ids,
            &self.bodies,
        ]
    }

    fn into_params(self) -> OwnedParams {
        vec![
            Box::new(self.key),
            Box::new(self.txn_number),
            Box::new(self.header),
            Box::new(self.stmt_ids),
            Box::new(self.bodies),
        ]
    }
}

/// The data-modifying `WITH` parts of a claim, parameters `$n..$n+4` as [`ClaimValues`] orders
/// them: the session row takes the number unless it has it or a newer one (then `claimed` is
/// empty, and the statement must fail: it ends by dividing by `claimed`'s count), with the
/// claiming commit's statements in the row itself; older numbers' `session_commits` rows go.
fn claim_ctes(n: usize) -> String {
    let [key, txn_number, header, stmt_ids, bodies] = [n, n + 1, n + 2, n + 3, n + 4];
    format!(
        "claimed AS (
            INSERT INTO tideway.sessions AS s (key, txn_number, header, stmt_ids, bodies)
            VALUES (${key}, ${txn_number}, ${header}, ${stmt_ids}, ${bodies})
            ON CONFLICT (key) DO UPDATE SET txn_number = EXCLUDED.txn_number,
                header = COALESCE(EXCLUDED.header, s.header),
                stmt_ids = EXCLUDED.stmt_ids, bodies = EXCLUDED.bodies
            WHERE s.txn_number < EXCLUDED.txn_number
            RETURNING 1),
         older AS (
            DELETE FROM tideway.session_commits
            WHERE key = ${key} AND EXISTS (SELECT 1 FROM claimed))"
    )
}

fn encode_session_part(document: &Document) -> Attempt<Vec<u8>> {
    tideway_base::bsonutil::encode_document(document).map_err(|error| {
        Failure::Storage(StorageError::Io(format!(
            "cannot encode a session record: {error}"
        )))
    })
}

/// The stored header of `record`: `{txnNumber, ..its header's other fields}`.
fn record_header(record: &SessionRecord) -> Attempt<Vec<u8>> {
    encode_session_part(&record.stored_header())
}

/// `record`'s stmtIds and their encoded replies, in the same order; one reply for all of them
/// when they are the same (an insert's statements all answer `{n: 1}`), as `session_statements`
/// reads them.
fn record_statements(record: &SessionRecord) -> Attempt<(Vec<i32>, Vec<Vec<u8>>)> {
    let stmt_ids = record.statements.iter().map(|(id, _)| *id).collect();
    let replies = match record.statements.split_first() {
        Some(((_, first), rest))
            if rest
                .iter()
                .all(|(_, reply)| Arc::ptr_eq(reply, first) || reply == first) =>
        {
            vec![encode_session_part(first)?]
        }
        _ => record
            .statements
            .iter()
            .map(|(_, reply)| encode_session_part(reply))
            .collect::<Attempt<_>>()?,
    };
    Ok((stmt_ids, replies))
}

/// Defers the statement that stores a session's claim and record with the transaction's next
/// statement (`None`, `None`: nothing).
///
/// With a claim: the session row takes `claim.txn_number` unless it already has that number or
/// a newer one; then the statement divides by zero (SQLSTATE 22012, [`Failure::Refused`]), so
/// the transaction cannot commit whatever goes with it. The row stays locked until the
/// transaction ends, so of two transactions claiming one number only the first to commit
/// changes it. The record's statements, if any, are kept in the row itself (the first commit
/// of a number has them all; older numbers' `session_commits` rows are deleted).
///
/// Without a claim, the record's header replaces the session's and its statements are a
/// `session_commits` row of their own, beside those of its number.
pub(crate) fn store_session(
    conn: &Conn,
    claim: Option<&SessionClaim>,
    record: Option<&SessionRecord>,
) -> Attempt<()> {
    if let Some(claim) = claim {
        static CLAIM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let sql = CLAIM.get_or_init(|| {
            format!(
                "WITH {} SELECT 1 / (SELECT count(*) FROM claimed)",
                claim_ctes(1)
            )
        });
        conn.defer(sql, ClaimValues::new(claim, record)?.into_params());
        return Ok(());
    }
    let Some(record) = record else {
        return Ok(());
    };
    // A record of no statements (a transaction's) stores the header alone: `$4` is NULL.
    let first: Option<i32> = record.statements.iter().map(|(id, _)| *id).min();
    let (stmt_ids, bodies) = record_statements(record)?;
    conn.defer(
        "WITH header AS (
            INSERT INTO tideway.sessions AS s (key, header, txn_number) VALUES ($1, $2, $3)
            ON CONFLICT (key) DO UPDATE
            SET header = EXCLUDED.header, txn_number = EXCLUDED.txn_number,
                stmt_ids = CASE WHEN s.txn_number = EXCLUDED.txn_number THEN s.stmt_ids END,
                bodies = CASE WHEN s.txn_number = EXCLUDED.txn_number THEN s.bodies END),
         older AS (
            DELETE FROM tideway.session_commits WHERE key = $1 AND txn_number <> $3)
         INSERT INTO tideway.session_commits (key, txn_number, first_stmt_id, stmt_ids, bodies)
         SELECT $1, $3, $4::integer, $5::integer[], $6::bytea[] WHERE $4::integer IS NOT NULL
         ON CONFLICT (key, txn_number, first_stmt_id)
         DO UPDATE SET stmt_ids = EXCLUDED.stmt_ids, bodies = EXCLUDED.bodies",
        vec![
            Box::new(record.key.clone()),
            Box::new(record_header(record)?),
            Box::new(record.txn_number),
            Box::new(first),
            Box::new(stmt_ids),
            Box::new(bodies),
        ],
    );
    Ok(())
}
