//! The four timed workloads and what one client task does for one operation of each.
//!
//! A [`Workload`] names the operation mix; a [`ClientOp`] is one client task's state for it
//! (collection handle, random generator, reusable documents) and runs one operation at a time.
//! Timing, deadlines and statistics live in the shared runner (`runner.rs`), not here.

use bson::{doc, Document};
use mongodb::error::{Error as DriverError, ErrorKind, WriteFailure};
use mongodb::Collection;

use crate::rng::SplitMix64;

/// Collection that `find_id` and `read_update` read: documents with integer `_id` 0..N.
pub const PRELOADED_COLLECTION: &str = "preloaded";

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
}

impl Workload {
    /// Every timed workload, in the order `--workload all` runs them.
    pub const ALL: [Workload; 4] = [
        Workload::InsertOne,
        Workload::FindId,
        Workload::ReadUpdate,
        Workload::InsertMany,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::InsertOne => "insert_one",
            Workload::FindId => "find_id",
            Workload::ReadUpdate => "read_update",
            Workload::InsertMany => "insert_many",
        }
    }

    /// The collection the workload works on.
    pub fn collection(self) -> &'static str {
        match self {
            Workload::InsertOne => "insert_one",
            Workload::InsertMany => "insert_many",
            Workload::FindId | Workload::ReadUpdate => PRELOADED_COLLECTION,
        }
    }

    /// Whether the workload reads the preloaded collection (otherwise it inserts into a
    /// collection that is dropped before each run).
    pub fn reads_preloaded(self) -> bool {
        matches!(self, Workload::FindId | Workload::ReadUpdate)
    }

    /// Whether the workload writes new documents, so that docs/s is worth reporting.
    pub fn inserts(self) -> bool {
        matches!(self, Workload::InsertOne | Workload::InsertMany)
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
    document.insert("payload", "");
    // Fixed overhead so far (plus a 17-byte ObjectId `_id` the driver adds when there is none).
    let mut overhead = bson::to_vec(&document).map_or(0, |bytes| bytes.len());
    if id.is_none() {
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
}

impl ClientOp {
    pub fn new(
        workload: Workload,
        collection: Collection<Document>,
        params: OpParams,
        mut rng: SplitMix64,
    ) -> Self {
        let count = match workload {
            Workload::InsertOne => 1,
            Workload::InsertMany => params.batch_size,
            Workload::FindId | Workload::ReadUpdate => 0,
        };
        let documents = (0..count)
            .map(|_| make_document(None, params.doc_bytes, &mut rng))
            .collect();
        ClientOp {
            workload,
            collection,
            rng,
            id_bound: params.id_bound.max(1),
            documents,
        }
    }

    /// Runs one operation; on success returns how many documents it wrote or read.
    pub async fn execute(&mut self) -> Result<u64, OpError> {
        match self.workload {
            Workload::InsertOne => {
                self.collection.insert_one(&self.documents[0]).await?;
                Ok(1)
            }
            Workload::InsertMany => {
                let result = self.collection.insert_many(&self.documents).await?;
                Ok(result.inserted_ids.len() as u64)
            }
            Workload::FindId => self.find_random().await,
            Workload::ReadUpdate => {
                if self.rng.coin() {
                    self.find_random().await
                } else {
                    self.update_random().await
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
