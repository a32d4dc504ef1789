//! The limits on client input that keep every walk over client data bounded, as mongod defines
//! them (`bson_depth.h`, `bson_validate.cpp`, `ops/insert.cpp`, `update/storage_validation.cpp`,
//! `field_path.cpp`), and the iterative checks that enforce them where input enters.
//!
//! Invariants:
//! - Every BSON document received on the wire nests at most [`MAX_BSON_DEPTH`] objects or arrays
//!   below its root ([`check_wire_depth`] runs on the raw bytes, before anything decodes them).
//! - Every stored document has no element deeper than [`MAX_USER_STORAGE_DEPTH`] levels
//!   ([`check_storage_depth`], before a write is encoded).
//! - Every dotted path has a bounded number of components ([`check_field_path_length`]).
//!
//! With these, recursive code below (decoding, comparison, key encoding, matching, expression
//! evaluation, dropping a `Document`) never sees more than a few hundred levels, well inside the
//! stack every server thread gets ([`THREAD_STACK_BYTES`]). The checks here are themselves
//! iterative, so any input, however deep, is refused without recursion.

use std::sync::atomic::{AtomicU64, Ordering};

use bson::{Bson, Document, RawBsonRef, RawDocument};

use crate::display::value_string;
use crate::error::{CommandError, ErrorCode};

/// `maxBSONDepth`: objects and arrays that may nest below the root of any BSON received.
pub const MAX_BSON_DEPTH: usize = 200;
/// mongod keeps 20 levels for itself: a stored document's elements lie at most this deep, counting
/// top-level fields as level 1 (`BSONDepth::getMaxDepthForUserStorage`).
pub const MAX_USER_STORAGE_DEPTH: usize = MAX_BSON_DEPTH - 20;
/// Components of a dotted path in a projection, sort or aggregation (`FieldPath`).
pub const MAX_FIELD_PATH_COMPONENTS: usize = MAX_BSON_DEPTH;
/// Components of a dotted path in a query filter.
pub const MAX_FILTER_PATH_COMPONENTS: usize = MAX_USER_STORAGE_DEPTH;
/// Replies carry at most this many bytes of documents per batch (a 16 MiB message with room for
/// the reply's other fields).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 64 * 1024;
/// Stack of every thread that runs requests: recursion bounded by the limits above needs a small
/// fraction of it even in debug builds.
pub const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Refuses a received document that nests more than [`MAX_BSON_DEPTH`] objects or arrays below
/// its root, as mongod's `validateBSON` does (`Overflow`). Malformed bytes met on the way are
/// `InvalidBSON`.
pub fn check_wire_depth(root: &RawDocument) -> Result<(), CommandError> {
    walk_raw(root, MAX_BSON_DEPTH).map_err(|error| match error {
        RawWalkError::Malformed(error) => CommandError::new(ErrorCode::InvalidBSON, error),
        RawWalkError::TooDeep { path } => CommandError::new(
            ErrorCode::Overflow,
            format!(
                "BSONObj exceeds maximum nested object depth in element with field name '{path}' in object with {}",
                root_id(root)
            ),
        ),
    })
}

/// Checks that `root` is well-formed BSON throughout (every element of every nested document,
/// array and code scope parses) and nests at most `max_depth` containers below the root, without
/// decoding it and without recursion. A document that passes converts to a `Document` without
/// error.
pub fn walk_raw(root: &RawDocument, max_depth: usize) -> Result<(), RawWalkError> {
    let malformed = |error: bson::raw::Error| RawWalkError::Malformed(error.to_string());
    // One iterator per open container, the root's first, each with the field name that opened it.
    let mut open = vec![("", root.into_iter())];
    while let Some((_, iterator)) = open.last_mut() {
        let Some(element) = iterator.next() else {
            open.pop();
            continue;
        };
        let (name, value) = element.map_err(malformed)?;
        let nested = match value {
            RawBsonRef::Document(inner) => inner,
            RawBsonRef::Array(inner) => {
                RawDocument::from_bytes(inner.as_bytes()).map_err(malformed)?
            }
            RawBsonRef::JavaScriptCodeWithScope(code) => code.scope,
            _ => continue,
        };
        if open.len() > max_depth {
            let mut path: Vec<&str> = open.iter().skip(1).map(|(name, _)| *name).collect();
            path.push(name);
            return Err(RawWalkError::TooDeep {
                path: path.join("."),
            });
        }
        open.push((name, nested.into_iter()));
    }
    Ok(())
}

/// Why [`walk_raw`] refused a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawWalkError {
    Malformed(String),
    /// Nested deeper than allowed; `path` names the containers down to the first too deep.
    TooDeep {
        path: String,
    },
}

impl std::fmt::Display for RawWalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawWalkError::Malformed(error) => f.write_str(error),
            RawWalkError::TooDeep { path } => write!(f, "nested too deep at '{path}'"),
        }
    }
}

fn root_id(root: &RawDocument) -> String {
    match root.get("_id").ok().flatten().map(Bson::try_from) {
        Some(Ok(id)) => format!("_id: {}", value_string(&id)),
        _ => "unknown _id".to_owned(),
    }
}

/// What a write is, for the wording of the depth error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageWrite {
    Insert,
    Update,
}

/// Refuses a document to be stored whose elements lie deeper than [`MAX_USER_STORAGE_DEPTH`]
/// (top-level fields are level 1; an empty object or array holds nothing deeper, so it may sit at
/// the last level), with mongod's `Overflow` message for inserts or for updates. Walks with an
/// explicit stack and stops at the first element too deep.
pub fn check_storage_depth(document: &Document, write: StorageWrite) -> Result<(), CommandError> {
    if !exceeds_depth(document, MAX_USER_STORAGE_DEPTH) {
        return Ok(());
    }
    let message = match write {
        StorageWrite::Insert => format!(
            "cannot insert document because it exceeds {MAX_USER_STORAGE_DEPTH} levels of nesting"
        ),
        StorageWrite::Update => {
            format!("Document exceeds maximum nesting depth of {MAX_USER_STORAGE_DEPTH}")
        }
    };
    Err(CommandError::new(ErrorCode::Overflow, message))
}

/// True when some element of `document` lies deeper than `max_level` (top-level fields are
/// level 1).
pub fn exceeds_depth(document: &Document, max_level: usize) -> bool {
    enum Level<'a> {
        Fields(bson::document::Iter<'a>),
        Elements(std::slice::Iter<'a, Bson>),
    }
    let mut open = vec![Level::Fields(document.iter())];
    while let Some(level) = open.last_mut() {
        let next = match level {
            Level::Fields(fields) => fields.next().map(|(_, value)| value),
            Level::Elements(elements) => elements.next(),
        };
        let Some(value) = next else {
            open.pop();
            continue;
        };
        // `value` lies at level `open.len()`.
        if open.len() > max_level {
            return true;
        }
        match value {
            Bson::Document(inner) => open.push(Level::Fields(inner.iter())),
            Bson::Array(inner) => open.push(Level::Elements(inner.iter())),
            Bson::JavaScriptCodeWithScope(code) => open.push(Level::Fields(code.scope.iter())),
            _ => {}
        }
    }
    false
}

/// Refuses a dotted path with more than `max_components` components (mongod's `FieldPath is too
/// long`), before any code splits or walks it.
pub fn check_field_path_length(
    path: &str,
    max_components: usize,
    code: ErrorCode,
) -> Result<(), CommandError> {
    // Counting dots stops early: a path of millions of components costs no more than its prefix.
    let too_long = path
        .bytes()
        .filter(|&byte| byte == b'.')
        .nth(max_components.saturating_sub(1))
        .is_some();
    if too_long {
        return Err(CommandError::new(code, "FieldPath is too long"));
    }
    Ok(())
}

/// A command's kill flag as [`Deadline`] carries it: an atomic cell (pooled by its owner, the
/// server's registry of running operations, reused, never freed) plus a token unique to the
/// operation, so a stale switch (copied into a cursor that outlives its command) never sees a
/// later operation's kill. `Copy`, so `Deadline` stays `Copy`.
#[derive(Clone, Copy, Debug)]
pub struct KillSwitch {
    cell: &'static AtomicU64,
    token: u64,
}

const KILLED: u64 = 1;

/// Tokens are even; the low bit of a cell marks its op killed.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(2);

impl KillSwitch {
    /// A switch on a free cell of `pool` (or a new one: cells live as long as the process, and
    /// there are never more than ops ever ran at once).
    pub fn acquire(pool: &mut Vec<&'static AtomicU64>) -> KillSwitch {
        let token = NEXT_TOKEN.fetch_add(2, Ordering::Relaxed);
        let cell = pool
            .pop()
            .unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
        cell.store(token, Ordering::Relaxed);
        KillSwitch { cell, token }
    }

    pub fn release(self, pool: &mut Vec<&'static AtomicU64>) {
        self.cell.store(0, Ordering::Relaxed);
        pool.push(self.cell);
    }

    pub fn trip(&self) {
        let _ = self.cell.compare_exchange(
            self.token,
            self.token | KILLED,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Whether both switches use the same cell (a cell is reused once its operation ends).
    pub fn shares_cell_with(&self, other: &KillSwitch) -> bool {
        std::ptr::eq(self.cell, other.cell)
    }

    /// Whether the op this switch belongs to was killed (one atomic load).
    pub fn is_killed(&self) -> bool {
        self.cell.load(Ordering::Relaxed) == self.token | KILLED
    }
}

/// When an operation must stop: its `maxTimeMS` deadline, or a `killOp` of it. Checked inside long
/// CPU-bound work (sorts, pipeline stages) where dispatch's timeout and kill wait cannot interrupt
/// it at an await point. `Copy`, and a check costs a clock read and one atomic load.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deadline {
    at: Option<std::time::Instant>,
    kill: Option<KillSwitch>,
}

impl Deadline {
    pub fn none() -> Deadline {
        Deadline::default()
    }

    pub fn at(instant: std::time::Instant) -> Deadline {
        Deadline {
            at: Some(instant),
            kill: None,
        }
    }

    /// The same deadline, also stopping once `kill` trips.
    pub fn with_kill_switch(self, kill: KillSwitch) -> Deadline {
        Deadline {
            kill: Some(kill),
            ..self
        }
    }

    /// `Interrupted` once the operation was killed, `MaxTimeMSExpired` once the deadline passed.
    pub fn check(&self) -> Result<(), CommandError> {
        if self.kill.is_some_and(|kill| kill.is_killed()) {
            return Err(Deadline::interrupted());
        }
        match self.at {
            Some(deadline) if std::time::Instant::now() >= deadline => Err(Deadline::exceeded()),
            _ => Ok(()),
        }
    }

    pub fn exceeded() -> CommandError {
        CommandError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
    }

    /// mongod's error for an operation `killOp` interrupted.
    pub fn interrupted() -> CommandError {
        CommandError::new(ErrorCode::Interrupted, "operation was interrupted")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    /// `{a: {a: … {a: leaf}}}` with `objects` objects counting the root.
    pub(crate) fn nested_objects(objects: usize, leaf: Bson) -> Document {
        let mut document = doc! {"a": leaf};
        for _ in 1..objects {
            document = doc! {"a": document};
        }
        document
    }

    fn raw(document: &Document) -> bson::RawDocumentBuf {
        bson::RawDocumentBuf::from_document(document).unwrap()
    }

    #[test]
    fn wire_depth_allows_200_nested_containers_below_the_root() {
        // 201 objects counting the root: 200 nested.
        let deepest = nested_objects(201, Bson::Int32(1));
        assert!(check_wire_depth(&raw(&deepest)).is_ok());
        let too_deep = nested_objects(202, Bson::Int32(1));
        let error = check_wire_depth(&raw(&too_deep)).unwrap_err();
        assert_eq!(error.code, ErrorCode::Overflow);
        assert!(error.errmsg.starts_with(
            "BSONObj exceeds maximum nested object depth in element with field name 'a.a.a"
        ));
        assert!(error.errmsg.ends_with("in object with unknown _id"));
    }

    #[test]
    fn wire_depth_counts_arrays_and_empty_containers() {
        let mut value = Bson::Array(vec![]);
        for _ in 0..200 {
            value = Bson::Array(vec![value]);
        }
        // 201 nested arrays below the root.
        let error = check_wire_depth(&raw(&doc! {"_id": 7, "x": value})).unwrap_err();
        assert_eq!(error.code, ErrorCode::Overflow);
        assert!(
            error.errmsg.ends_with("in object with _id: 7"),
            "{}",
            error.errmsg
        );
    }

    #[test]
    fn storage_depth_counts_top_level_fields_as_level_one() {
        let deepest = nested_objects(180, Bson::Int32(1));
        assert!(check_storage_depth(&deepest, StorageWrite::Insert).is_ok());
        // An empty object at the last level adds no element below it.
        let empty_leaf = nested_objects(180, Bson::Document(doc! {}));
        assert!(check_storage_depth(&empty_leaf, StorageWrite::Insert).is_ok());
        let empty_too_deep = nested_objects(181, Bson::Document(doc! {}));
        assert!(check_storage_depth(&empty_too_deep, StorageWrite::Insert).is_err());
        let too_deep = nested_objects(181, Bson::Int32(1));
        let error = check_storage_depth(&too_deep, StorageWrite::Insert).unwrap_err();
        assert_eq!(error.code, ErrorCode::Overflow);
        assert_eq!(
            error.errmsg,
            "cannot insert document because it exceeds 180 levels of nesting"
        );
        let error = check_storage_depth(&too_deep, StorageWrite::Update).unwrap_err();
        assert_eq!(
            error.errmsg,
            "Document exceeds maximum nesting depth of 180"
        );
    }

    #[test]
    fn storage_depth_counts_arrays_as_levels() {
        let mut value = Bson::Int32(1);
        for _ in 0..179 {
            value = Bson::Array(vec![value]);
        }
        // `x` at level 1, then 179 arrays: the scalar lies at level 180.
        assert!(!exceeds_depth(&doc! {"x": value.clone()}, 180));
        assert!(exceeds_depth(&doc! {"x": [value]}, 180));
    }

    #[test]
    fn field_path_length_counts_components() {
        let path = vec!["a"; 200].join(".");
        assert!(check_field_path_length(&path, 200, ErrorCode::Overflow).is_ok());
        let error =
            check_field_path_length(&format!("{path}.a"), 200, ErrorCode::Overflow).unwrap_err();
        assert_eq!(error.errmsg, "FieldPath is too long");
        assert!(check_field_path_length("", 200, ErrorCode::Overflow).is_ok());
    }
}
