//! The timed workloads and what one client task does for one operation of each.
//!
//! A [`Workload`] names the operation mix; a [`ClientOp`] is one client task's state for it
//! (collection handle, random generator, reusable documents) and runs one operation at a time.
//! Timing, deadlines and statistics live in the shared runner (`runner.rs`), not here; the
//! shape of the `events` documents that the planner workloads query lives in `events.rs`, the
//! transfer workloads' accounts, log and transaction retries in `accounts.rs`.

use bson::{doc, Bson, Document};
use mongodb::error::{Error as DriverError, ErrorKind, WriteFailure};
use mongodb::{Collection, Cursor};

use crate::accounts::{self, Transfers};
use crate::events;
use crate::rng::SplitMix64;

/// Collection that `find_id` and `read_update` read: documents with integer `_id` 0..N.
pub const PRELOADED_COLLECTION: &str = "preloaded";

/// How a workload's collection is made ready before its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setup {
    /// `preloaded`, loaded once (reused when its count is `--docs`).
    Preloaded,
    /// `events` with its three secondary indexes, loaded once like `preloaded`.
    Events,
    /// Dropped before each run.
    Dropped,
    /// Dropped and recreated with the `events` secondary indexes before each run.
    DroppedIndexed,
    /// Dropped and given a Cosmos default TTL (a `_ts` TTL index of
    /// [`crate::dataset::DEFAULT_TTL_SECONDS`]) before each run.
    DroppedDefaultTtl,
    /// An accounts collection loaded once (with [`Workload::accounts`] documents), and the
    /// `transfers` log dropped and created again before each run.
    Accounts,
}

/// An operation mix that client tasks repeat until the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// `insert_one` of a new document (driver-generated ObjectId `_id`).
    InsertOne,
    /// `find_one({_id: k})` for a uniformly random existing `k`.
    FindId,
    /// Half `find_one({_id: k})`, half `update_one({_id: k}, {$inc: {n: 1}})`, random `k`.
    ReadUpdate,
    /// `insert_many` of a batch of new documents (default 1000) in one call.
    InsertMany,
    /// `find_one({_id: k})` on `events`: the point lookup the planner workloads compare with.
    FindIdEvents,
    /// `find({at: {$gte: t, $lt: t + 100 ms}})` on `events`: 10 documents by the `{at: 1}`
    /// index, all read.
    Range10,
    /// `find({}).sort({at: -1}).limit(5)` on `events`: the newest 5, in `{at: 1}` order.
    Newest5,
    /// `find({$or: [{k: a}, {k: b}]})` on `events`: 2 documents, a union of two index scans.
    Or2,
    /// `insert_one` of a new document into a collection with the three `events` indexes.
    InsertIndexed,
    /// `insert_one` of a new document into a collection with a default TTL (nothing expires
    /// during the run): what the last-write expiry order costs a write.
    InsertDefaultTtl,
    /// `update_one` `$inc` of a random one of 10,000 accounts and `insert_one` into `transfers`,
    /// without a transaction: the baseline of `txn2`.
    TwoWrites,
    /// `two_writes` over 10 accounts: the baseline of `txn2_hot`.
    TwoWritesHot,
    /// `two_writes` as one multi-document transaction, retried whole on a transient error.
    Txn2,
    /// `txn2` over 10 accounts: 8 clients conflict often.
    Txn2Hot,
}

impl Workload {
    /// Every timed workload, in the order `--workload all` runs them.
    pub const ALL: [Workload; 4] = [
        Workload::InsertOne,
        Workload::FindId,
        Workload::ReadUpdate,
        Workload::InsertMany,
    ];

    /// The query planner workloads on `events` (`--workload planner`), baseline first.
    pub const PLANNER: [Workload; 4] = [
        Workload::FindIdEvents,
        Workload::Range10,
        Workload::Newest5,
        Workload::Or2,
    ];

    /// The transfer workloads (`--workload txn`), each baseline before its transaction.
    pub const TXN: [Workload; 4] = [
        Workload::TwoWrites,
        Workload::Txn2,
        Workload::TwoWritesHot,
        Workload::Txn2Hot,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::InsertOne => "insert_one",
            Workload::FindId => "find_id",
            Workload::ReadUpdate => "read_update",
            Workload::InsertMany => "insert_many",
            Workload::FindIdEvents => "find_id_events",
            Workload::Range10 => "range_10",
            Workload::Newest5 => "newest_5",
            Workload::Or2 => "or_2",
            Workload::InsertIndexed => "insert_indexed",
            Workload::InsertDefaultTtl => "insert_default_ttl",
            Workload::TwoWrites => "two_writes",
            Workload::TwoWritesHot => "two_writes_hot",
            Workload::Txn2 => "txn2",
            Workload::Txn2Hot => "txn2_hot",
        }
    }

    /// The collection the workload works on.
    pub fn collection(self) -> &'static str {
        match self {
            Workload::InsertOne => "insert_one",
            Workload::InsertMany => "insert_many",
            Workload::InsertIndexed => "insert_indexed",
            Workload::InsertDefaultTtl => "insert_default_ttl",
            Workload::FindId | Workload::ReadUpdate => PRELOADED_COLLECTION,
            Workload::FindIdEvents | Workload::Range10 | Workload::Newest5 | Workload::Or2 => {
                events::EVENTS_COLLECTION
            }
            Workload::TwoWrites | Workload::Txn2 => accounts::ACCOUNTS_COLLECTION,
            Workload::TwoWritesHot | Workload::Txn2Hot => accounts::HOT_ACCOUNTS_COLLECTION,
        }
    }

    /// How the collection is made ready.
    pub fn setup(self) -> Setup {
        match self {
            Workload::InsertOne | Workload::InsertMany => Setup::Dropped,
            Workload::InsertIndexed => Setup::DroppedIndexed,
            Workload::InsertDefaultTtl => Setup::DroppedDefaultTtl,
            Workload::FindId | Workload::ReadUpdate => Setup::Preloaded,
            Workload::FindIdEvents | Workload::Range10 | Workload::Newest5 | Workload::Or2 => {
                Setup::Events
            }
            Workload::TwoWrites | Workload::TwoWritesHot | Workload::Txn2 | Workload::Txn2Hot => {
                Setup::Accounts
            }
        }
    }

    /// The transfer workloads' key space: how many accounts they pick from uniformly.
    pub fn accounts(self) -> Option<u64> {
        match self {
            Workload::TwoWrites | Workload::Txn2 => Some(accounts::ACCOUNTS),
            Workload::TwoWritesHot | Workload::Txn2Hot => Some(accounts::HOT_ACCOUNTS),
            _ => None,
        }
    }

    /// Whether an operation is a transaction whose transient failures are retried (and counted).
    pub fn retries_transactions(self) -> bool {
        matches!(self, Workload::Txn2 | Workload::Txn2Hot)
    }

    /// Whether the workload reads a collection loaded once with `--docs` documents (otherwise
    /// it inserts into a collection that is dropped before each run).
    pub fn reads_preloaded(self) -> bool {
        matches!(self.setup(), Setup::Preloaded | Setup::Events)
    }

    /// Whether the workload writes new documents, so that docs/s is worth reporting.
    pub fn inserts(self) -> bool {
        matches!(
            self,
            Workload::InsertOne
                | Workload::InsertMany
                | Workload::InsertIndexed
                | Workload::InsertDefaultTtl
        )
    }
}

/// Sizes that shape the documents and the id range, shared by all client tasks of a run.
#[derive(Clone, Copy, Debug)]
pub struct OpParams {
    /// Approximate BSON size of every document written.
    pub doc_bytes: usize,
    /// Documents per `insert_many` call.
    pub batch_size: usize,
    /// Reads and updates pick `_id` uniformly in `0..id_bound`.
    pub id_bound: u64,
}

/// A failed operation: a short `kind` to count by, and the full message.
#[derive(Clone, Debug)]
pub struct OpError {
    pub kind: String,
    pub message: String,
}

impl OpError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        OpError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

impl From<DriverError> for OpError {
    fn from(error: DriverError) -> Self {
        let (kind, message) = match &*error.kind {
            ErrorKind::Command(command) => (
                format!("command error {} {}", command.code, command.code_name),
                command.message.clone(),
            ),
            ErrorKind::Write(WriteFailure::WriteError(write)) => {
                (format!("write error {}", write.code), write.message.clone())
            }
            ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => (
                format!("write concern error {}", concern.code),
                concern.message.clone(),
            ),
            ErrorKind::InsertMany(insert_many) => {
                match insert_many
                    .write_errors
                    .as_ref()
                    .and_then(|errors| errors.first())
                {
                    Some(first) => (
                        format!("insert_many write error {}", first.code),
                        first.message.clone(),
                    ),
                    None => (
                        "insert_many write concern error".to_string(),
                        error.to_string(),
                    ),
                }
            }
            ErrorKind::Io(_) => ("i/o error".to_string(), error.to_string()),
            ErrorKind::ServerSelection { .. } => {
                ("server selection error".to_string(), error.to_string())
            }
            ErrorKind::ConnectionPoolCleared { .. } => {
                ("connection pool cleared".to_string(), error.to_string())
            }
            ErrorKind::InvalidResponse { .. } => {
                ("invalid response".to_string(), error.to_string())
            }
            ErrorKind::BsonDeserialization(_) | ErrorKind::BsonSerialization(_) => {
                ("bson error".to_string(), error.to_string())
            }
            _ => ("driver error".to_string(), error.to_string()),
        };
        OpError::new(kind, message)
    }
}

/// A string of `len` random lowercase letters (incompressible enough to be honest about size).
pub fn random_payload(rng: &mut SplitMix64, len: usize) -> String {
    (0..len)
        .map(|_| char::from(b'a' + rng.below(26) as u8))
        .collect()
}

/// A benchmark document: `{_id, n: 0, payload}` (no `_id` when `id` is `None`: the driver then
/// generates an ObjectId), with the payload sized so the BSON document is about `doc_bytes`.
pub fn make_document(id: Option<i64>, doc_bytes: usize, rng: &mut SplitMix64) -> Document {
    make_document_with(id, &Document::new(), doc_bytes, rng)
}

/// Like [`make_document`], with the fields of `extra` added after `n` (they count towards
/// `doc_bytes`).
pub fn make_document_with(
    id: Option<i64>,
    extra: &Document,
    doc_bytes: usize,
    rng: &mut SplitMix64,
) -> Document {
    let mut document = Document::new();
    if let Some(id) = id {
        document.insert("_id", id);
    }
    document.insert("n", 0_i64);
    for (key, value) in extra {
        document.insert(key.clone(), value.clone());
    }
    with_payload(document, doc_bytes, rng)
}

/// Appends a random `payload` string sized so that the BSON document is about `doc_bytes`
/// (counting the 17-byte ObjectId `_id` the driver adds when `document` has no `_id`).
pub fn with_payload(mut document: Document, doc_bytes: usize, rng: &mut SplitMix64) -> Document {
    document.insert("payload", "");
    let mut overhead = bson::to_vec(&document).map_or(0, |bytes| bytes.len());
    if !document.contains_key("_id") {
        overhead += 17;
    }
    document.insert(
        "payload",
        random_payload(rng, doc_bytes.saturating_sub(overhead)),
    );
    document
}

/// One client task's state for repeating operations of one workload.
pub struct ClientOp {
    workload: Workload,
    collection: Collection<Document>,
    rng: SplitMix64,
    id_bound: u64,
    /// Documents inserted as-is on every call (no `_id`: the driver adds a fresh one to the
    /// wire copy each time, so the same documents can be sent again). One for `insert_one`.
    documents: Vec<Document>,
    /// Documents this task has inserted (`insert_indexed` derives its `at` from it).
    inserted: u64,
    /// The transfer workloads' collections, session and retry count.
    transfers: Option<Transfers>,
}

impl ClientOp {
    pub fn new(
        workload: Workload,
        collection: Collection<Document>,
        params: OpParams,
        mut rng: SplitMix64,
    ) -> Self {
        let documents = match workload {
            Workload::InsertOne | Workload::InsertDefaultTtl => {
                vec![make_document(None, params.doc_bytes, &mut rng)]
            }
            Workload::InsertMany => (0..params.batch_size)
                .map(|_| make_document(None, params.doc_bytes, &mut rng))
                .collect(),
            Workload::InsertIndexed => {
                let indexed = events::indexed_fields(0, &mut rng);
                vec![make_document_with(
                    None,
                    &indexed,
                    params.doc_bytes,
                    &mut rng,
                )]
            }
            _ => Vec::new(),
        };
        let transfers = workload
            .accounts()
            .map(|_| Transfers::new(collection.clone(), params.doc_bytes, &mut rng));
        ClientOp {
            workload,
            collection,
            rng,
            id_bound: params.id_bound.max(1),
            documents,
            inserted: 0,
            transfers,
        }
    }

    /// Whole-transaction retries made since the last call (0 for workloads without them).
    pub fn take_retries(&mut self) -> u64 {
        self.transfers.as_mut().map_or(0, Transfers::take_retries)
    }

    /// Runs one operation; on success returns how many documents it wrote or read.
    pub async fn execute(&mut self) -> Result<u64, OpError> {
        match self.workload {
            Workload::InsertOne | Workload::InsertDefaultTtl => {
                self.collection.insert_one(&self.documents[0]).await?;
                Ok(1)
            }
            Workload::InsertMany => {
                let result = self.collection.insert_many(&self.documents).await?;
                Ok(result.inserted_ids.len() as u64)
            }
            Workload::InsertIndexed => {
                // New index keys every time (the same keys would pile up on one index entry).
                let fresh = events::indexed_fields(self.inserted, &mut self.rng);
                for (key, value) in fresh {
                    self.documents[0].insert(key, value);
                }
                self.inserted += 1;
                self.collection.insert_one(&self.documents[0]).await?;
                Ok(1)
            }
            Workload::FindId | Workload::FindIdEvents => self.find_random().await,
            Workload::ReadUpdate => {
                if self.rng.coin() {
                    self.find_random().await
                } else {
                    self.update_random().await
                }
            }
            Workload::Range10 => {
                let (filter, expected) = events::range_query(&mut self.rng, self.id_bound);
                let cursor = self.collection.find(filter.clone()).await?;
                expect_count(cursor, expected, "range_10", &filter).await
            }
            Workload::Newest5 => {
                let expected = self.id_bound.min(events::NEWEST_LIMIT as u64);
                let cursor = self
                    .collection
                    .find(doc! {})
                    .sort(doc! {"at": -1})
                    .limit(events::NEWEST_LIMIT)
                    .await?;
                expect_count(cursor, expected, "newest_5", &doc! {}).await
            }
            Workload::Or2 => {
                let (filter, expected) = events::or_query(&mut self.rng, self.id_bound);
                let cursor = self.collection.find(filter.clone()).await?;
                expect_count(cursor, expected, "or_2", &filter).await
            }
            Workload::TwoWrites | Workload::TwoWritesHot | Workload::Txn2 | Workload::Txn2Hot => {
                let account = self.random_id();
                let Some(transfers) = self.transfers.as_mut() else {
                    return Err(OpError::new(
                        "transfer state missing",
                        "a transfer workload's client has no transfer state",
                    ));
                };
                if self.workload.retries_transactions() {
                    transfers.transaction(account).await
                } else {
                    transfers.plain(account).await
                }
            }
        }
    }

    fn random_id(&mut self) -> i64 {
        self.rng.below(self.id_bound) as i64
    }

    async fn find_random(&mut self) -> Result<u64, OpError> {
        let id = self.random_id();
        match self.collection.find_one(doc! {"_id": id}).await? {
            Some(_) => Ok(1),
            None => Err(OpError::new(
                "document not found",
                format!("find_one({{_id: {id}}}) returned no document"),
            )),
        }
    }

    async fn update_random(&mut self) -> Result<u64, OpError> {
        let id = self.random_id();
        let result = self
            .collection
            .update_one(doc! {"_id": id}, doc! {"$inc": {"n": 1_i64}})
            .await?;
        if result.matched_count == 1 {
            Ok(1)
        } else {
            Err(OpError::new(
                "update matched no document",
                format!(
                    "update_one({{_id: {id}}}) matched {} documents",
                    result.matched_count
                ),
            ))
        }
    }
}

/// Reads (and decodes) every document of `cursor`; a count other than `expected` is an error.
async fn expect_count(
    mut cursor: Cursor<Document>,
    expected: u64,
    workload: &str,
    filter: &Document,
) -> Result<u64, OpError> {
    let mut read = 0_u64;
    while cursor.advance().await? {
        cursor.deserialize_current()?;
        read += 1;
    }
    if read == expected {
        Ok(read)
    } else {
        Err(OpError::new(
            format!("{workload}: wrong number of documents"),
            format!(
                "{workload} with filter {} returned {read} documents, expected {expected}",
                Bson::Document(filter.clone()).into_relaxed_extjson()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_have_about_the_requested_size() {
        let mut rng = SplitMix64::new(1, 0);
        let with_id = make_document(Some(5), 200, &mut rng);
        assert_eq!(bson::to_vec(&with_id).unwrap().len(), 200);
        let without_id = make_document(None, 200, &mut rng);
        assert_eq!(bson::to_vec(&without_id).unwrap().len() + 17, 200);
        let extra = doc! {"expireAt": bson::DateTime::from_millis(0)};
        let with_extra = make_document_with(Some(5), &extra, 200, &mut rng);
        assert_eq!(bson::to_vec(&with_extra).unwrap().len(), 200);
        assert!(with_extra.get_datetime("expireAt").is_ok());
        // Smaller than the fixed fields: just no payload.
        let tiny = make_document(Some(5), 1, &mut rng);
        assert_eq!(tiny.get_str("payload").unwrap(), "");
    }
}
