//! The oplog as the server keeps it: `local.oplog.rs`, a capped collection of the size
//! `--oplogSize` asks for (`config::DEFAULT_OPLOG_SIZE_MB` in replica-set mode without it),
//! created at startup; storage appends one entry per write in the same
//! commit (`storage::oplog`). Change streams read it.
//!
//! Invariants: the oplog exists only when configured (a standalone without it has none, and
//! `$changeStream` answers as a standalone mongod); an existing oplog is kept as it is across
//! restarts (a different `--oplogSize` does not resize it, as mongod's `--oplogSize` only sizes
//! a new oplog).

pub mod stream;
pub mod token;

pub use stream::{ChangeStream, Reader};

use bson::doc;

use tideway_storage::oplog::oplog_namespace;
use tideway_storage::{Storage, StorageError, StorageResult};

/// Creates the oplog of `megabytes` (the configuration's, `None` without one) if it does not
/// exist yet.
pub(crate) async fn ensure_oplog(
    storage: &dyn Storage,
    megabytes: Option<u64>,
) -> StorageResult<()> {
    let Some(megabytes) = megabytes else {
        return Ok(());
    };
    let ns = oplog_namespace();
    let bytes = i64::try_from(megabytes.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    let options = doc! {"capped": true, "size": bytes};
    match storage.create_collection(&ns, options, Vec::new()).await {
        Ok(_) | Err(StorageError::NamespaceExists(_)) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Whether the server keeps an oplog (so change streams can be opened).
pub(crate) async fn has_oplog(storage: &dyn Storage) -> StorageResult<bool> {
    Ok(storage.collection(&oplog_namespace()).await?.is_some())
}
