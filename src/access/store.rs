//! The one durable path for authorization data, `admin.system.users` and `admin.system.roles`:
//! reads (one document, every document) and writes, shared by the user commands (`users`) and
//! the role commands (`role_commands`).
//!
//! Invariants: auth documents are read and written on the server's storage directly, never
//! through a transaction (mongod keeps auth data out of them), and every write is durable before
//! it is acknowledged; every write, whatever its outcome, bumps the auth generation
//! (`state.auth.changed()`), so connections re-resolve their users' privileges before the next
//! command.

use bson::{Bson, Document};

use crate::state::ServerState;
use tideway_base::error::CommandResult;
use tideway_storage::{
    Namespace, ScanRequest, ScanSource, TtlClass, WriteMeta, WriteOp, WriteOptions,
};

/// Metadata of an auth document write: auth documents never expire.
pub fn meta(state: &ServerState) -> WriteMeta {
    WriteMeta {
        last_write_ms: state.clock.now_ms(),
        ttl: TtlClass::Never,
    }
}

/// The document with `_id == id` and its revision, if any.
pub async fn get(
    state: &ServerState,
    ns: &Namespace,
    id: &str,
) -> CommandResult<Option<(Document, u64)>> {
    let record = state.storage.get(ns, &Bson::String(id.to_owned())).await?;
    Ok(record.map(|record| (record.doc.into_document(), record.rev)))
}

/// A forward page of `ns`'s documents.
fn collection_page(resume_after: Option<Vec<u8>>, limit: usize) -> ScanRequest {
    ScanRequest::forward(ScanSource::Collection, resume_after, limit)
}

/// Whether `ns` holds no document.
pub async fn is_empty(state: &ServerState, ns: &Namespace) -> CommandResult<bool> {
    let page = state.storage.scan(ns, collection_page(None, 1)).await?;
    Ok(page.records.is_empty())
}

/// Every document of `ns` (auth collections are small: a scan), in `_id` order.
pub async fn all(state: &ServerState, ns: &Namespace) -> CommandResult<Vec<Document>> {
    Ok(all_records(state, ns)
        .await?
        .into_iter()
        .map(|(document, _)| document)
        .collect())
}

/// [`all`] with each document's revision (for replacing it).
pub(crate) async fn all_records(
    state: &ServerState,
    ns: &Namespace,
) -> CommandResult<Vec<(Document, u64)>> {
    let mut documents = Vec::new();
    let mut resume_after = None;
    loop {
        let page = state
            .storage
            .scan(ns, collection_page(resume_after.take(), 256))
            .await?;
        documents.extend(
            page.records
                .into_iter()
                .map(|r| (r.doc.into_document(), r.rev)),
        );
        match page.resume {
            Some(resume) => resume_after = Some(resume),
            None => return Ok(documents),
        }
    }
}

/// Applies one write durably; its error is the operation's (`DuplicateKey`, `WriteConflict`).
pub(crate) async fn write_one(
    state: &ServerState,
    ns: &Namespace,
    op: WriteOp,
) -> CommandResult<()> {
    for result in write(state, ns, vec![op], true).await? {
        result?;
    }
    Ok(())
}

/// Applies `ops` durably, each on its own (unordered); how many succeeded.
pub(crate) async fn write_each(
    state: &ServerState,
    ns: &Namespace,
    ops: Vec<WriteOp>,
) -> CommandResult<i32> {
    if ops.is_empty() {
        return Ok(0);
    }
    let results = write(state, ns, ops, false).await?;
    Ok(results
        .iter()
        .filter(|result| result.is_ok())
        .count()
        .try_into()
        .unwrap_or(i32::MAX))
}

async fn write(
    state: &ServerState,
    ns: &Namespace,
    ops: Vec<WriteOp>,
    ordered: bool,
) -> CommandResult<Vec<tideway_storage::StorageResult<tideway_storage::WriteOutcome>>> {
    let options = WriteOptions {
        ordered,
        force_durable: true,
        background: false,
    };
    let results = state.storage.write(ns, ops, options).await;
    // Whatever happened, connections re-read their users' privileges.
    state.auth.changed();
    Ok(results?)
}

/// A replacement of `document` (same `_id`) if it is still at revision `rev`.
pub(crate) fn replace_op(state: &ServerState, document: Document, rev: u64) -> WriteOp {
    WriteOp::Replace {
        id: document.get("_id").cloned().unwrap_or(Bson::Null),
        expected_rev: rev,
        doc: document,
        meta: meta(state),
        supersede: None,
        replacement: false,
    }
}
