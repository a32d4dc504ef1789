//! The oplog's entries as the engine writes them into `local.oplog.rs`: mongod's shape for
//! inserts (`i`), updates (`u` with a `$v: 2` diff, or the whole document for a replacement),
//! deletes (`d`, marked `expired` with the instant when the TTL reaper deleted the document) and
//! catalog commands (`c`).
//!
//! Invariants: the oplog exists only when `local.oplog.rs` does (the replica-set mode creates
//! it, capped at the oplog size); every write outside the `local` database appends exactly one
//! entry per document written, in the same storage transaction, so entries are in commit order
//! and none is lost or invented across a crash. Storage keys every document by `_id`, so each
//! entry carries `_id` (its `ts`, unique and increasing) as its last field, where mongod's
//! entries have none. This module is pure: it builds documents, never writes them.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document, Timestamp};

use crate::Namespace;

/// The database whose writes are never logged (it holds the oplog).
pub(crate) const LOCAL_DB: &str = "local";
pub(crate) const OPLOG_COLLECTION: &str = "oplog.rs";

pub fn oplog_namespace() -> Namespace {
    Namespace::new(LOCAL_DB, OPLOG_COLLECTION)
}

/// Whether writes to `ns` append oplog entries.
pub(crate) fn is_logged(ns: &Namespace) -> bool {
    ns.db != LOCAL_DB
}

/// When an entry happened: its cluster time and the wall clock (ms since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryTime {
    pub ts: Timestamp,
    pub wall_ms: i64,
}

impl EntryTime {
    /// `ts` from the packed form the engine counts in (`seconds << 32 | increment`), the wall
    /// clock read now.
    pub fn now(packed: u64) -> EntryTime {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        EntryTime {
            ts: Timestamp {
                time: (packed >> 32) as u32,
                increment: packed as u32,
            },
            wall_ms,
        }
    }
}

/// What one write did to one document (or the catalog).
#[derive(Clone, Debug, PartialEq)]
pub enum Change<'a> {
    Insert(&'a Document),
    /// An update by operators or pipeline: the document before and after.
    Update {
        before: &'a Document,
        after: &'a Document,
    },
    /// A replacement: the new document.
    Replace(&'a Document),
    /// A delete; `expired_at_ms` when the TTL reaper deleted an expired document.
    Delete {
        id: Bson,
        expired_at_ms: Option<i64>,
    },
    /// A catalog command (`create`, `drop`, `renameCollection`, `dropDatabase`,
    /// `createIndexes`, `dropIndexes`, `collMod`) as mongod logs it, on `<db>.$cmd`.
    Command(Document),
}

/// The entry for `change` on `ns` (collection uuid `uuid`, when it has one) at `time`; a
/// transaction's entries also carry its `session` fields (`lsid`, `txnNumber`).
pub fn entry(
    ns: &Namespace,
    uuid: Option<[u8; 16]>,
    change: Change<'_>,
    session: Option<&Document>,
    time: EntryTime,
) -> Document {
    let (op, ns_name) = match &change {
        Change::Insert(_) => ("i", ns.to_string()),
        Change::Update { .. } | Change::Replace(_) => ("u", ns.to_string()),
        Change::Delete { .. } => ("d", ns.to_string()),
        Change::Command(_) => ("c", format!("{}.$cmd", ns.db)),
    };
    let mut entry = doc! {"op": op, "ns": ns_name};
    if let Some(uuid) = uuid {
        entry.insert(
            "ui",
            Binary {
                subtype: BinarySubtype::Uuid,
                bytes: uuid.to_vec(),
            },
        );
    }
    let id_of =
        |document: &Document| doc! {"_id": document.get("_id").cloned().unwrap_or(Bson::Null)};
    let mut expired = None;
    match change {
        Change::Insert(document) => {
            entry.insert("o", document.clone());
        }
        Change::Update { before, after } => {
            entry.insert("o", doc! {"$v": 2, "diff": diff(before, after)});
            entry.insert("o2", id_of(after));
        }
        Change::Replace(document) => {
            entry.insert("o", document.clone());
            entry.insert("o2", id_of(document));
        }
        Change::Delete { id, expired_at_ms } => {
            entry.insert("o", doc! {"_id": id});
            expired = expired_at_ms;
        }
        Change::Command(command) => {
            entry.insert("o", command);
        }
    }
    if let Some(session) = session {
        entry.extend(session.clone());
    }
    entry.insert("ts", time.ts);
    entry.insert("t", 1_i64);
    entry.insert("v", 2_i64);
    entry.insert("wall", bson::DateTime::from_millis(time.wall_ms));
    if let Some(expired_at_ms) = expired {
        entry.insert("expired", true);
        entry.insert("expireAt", bson::DateTime::from_millis(expired_at_ms));
    }
    entry.insert("_id", time.ts);
    entry
}

/// The documents before and after a write, kept in its `u`/`d` entry when the collection has
/// `changeStreamPreAndPostImages: {enabled: true}` (mongod keeps them in
/// `config.system.preimages`; tideway keeps them in the entry, as `preImage` and `postImage`,
/// so they live exactly as long as the entry does).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Images {
    pub before: Option<Document>,
    pub after: Option<Document>,
}

/// Whether a collection's options ask for pre- and post-images.
pub(crate) fn wants_images(options: &Document) -> bool {
    options
        .get_document("changeStreamPreAndPostImages")
        .is_ok_and(|images| images.get_bool("enabled") == Ok(true))
}

/// Adds `images` to `entry` (before its `_id`, which stays last).
pub(crate) fn add_images(entry: &mut Document, images: Images) {
    let id = entry.remove("_id");
    if let Some(before) = images.before {
        entry.insert("preImage", before);
    }
    if let Some(after) = images.after {
        entry.insert("postImage", after);
    }
    if let Some(id) = id {
        entry.insert("_id", id);
    }
}

/// mongod's `$v: 2` update diff from `before` to `after`: `d` (removed fields, `false`), `u`
/// (changed fields' new values), `i` (added fields) and `s<field>` (a diff of a sub-document
/// both sides hold). Arrays and other values are replaced whole. Depth is bounded by the
/// storage depth limit documents already meet.
pub fn diff(before: &Document, after: &Document) -> Document {
    let mut removed = Document::new();
    let mut updated = Document::new();
    let mut inserted = Document::new();
    let mut nested = Document::new();
    for (field, old) in before {
        if !after.contains_key(field) {
            removed.insert(field.clone(), false);
            continue;
        }
        let new = &after[field];
        match (old, new) {
            (Bson::Document(old), Bson::Document(new)) if old != new => {
                nested.insert(format!("s{field}"), diff(old, new));
            }
            _ if old == new && same_type(old, new) => {}
            _ => {
                updated.insert(field.clone(), new.clone());
            }
        }
    }
    for (field, new) in after {
        if !before.contains_key(field) {
            inserted.insert(field.clone(), new.clone());
        }
    }
    let mut diff = Document::new();
    for (section, fields) in [("d", removed), ("u", updated), ("i", inserted)] {
        if !fields.is_empty() {
            diff.insert(section, fields);
        }
    }
    diff.extend(nested);
    diff
}

/// `Bson` equality ignores nothing, but `1` and `1.0` are different values to store.
fn same_type(a: &Bson, b: &Bson) -> bool {
    a.element_type() == b.element_type()
}

/// The `updateDescription` of a change-stream `update` event from an entry's `$v: 2` diff:
/// `{updatedFields, removedFields, truncatedArrays: []}` with dotted paths.
pub fn update_description(diff: &Document) -> Document {
    let mut updated = Document::new();
    let mut removed = Vec::new();
    describe(diff, "", &mut updated, &mut removed);
    doc! {"updatedFields": updated, "removedFields": removed, "truncatedArrays": []}
}

fn describe(diff: &Document, prefix: &str, updated: &mut Document, removed: &mut Vec<Bson>) {
    for (section, value) in diff {
        let Bson::Document(fields) = value else {
            continue;
        };
        match section.as_str() {
            "d" => removed.extend(
                fields
                    .keys()
                    .map(|field| Bson::String(format!("{prefix}{field}"))),
            ),
            "u" | "i" => {
                for (field, value) in fields {
                    updated.insert(format!("{prefix}{field}"), value.clone());
                }
            }
            nested => {
                if let Some(field) = nested.strip_prefix('s') {
                    describe(fields, &format!("{prefix}{field}."), updated, removed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u32, increment: u32) -> EntryTime {
        EntryTime {
            ts: Timestamp {
                time: seconds,
                increment,
            },
            wall_ms: i64::from(seconds) * 1000,
        }
    }

    #[test]
    fn entries_have_mongods_shape() {
        let ns = Namespace::new("app", "users");
        let time = at(100, 3);
        let inserted = entry(
            &ns,
            None,
            Change::Insert(&doc! {"_id": 1, "a": 1}),
            None,
            time,
        );
        assert_eq!(
            inserted,
            doc! {"op": "i", "ns": "app.users", "o": {"_id": 1, "a": 1}, "ts": time.ts, "t": 1_i64, "v": 2_i64, "wall": bson::DateTime::from_millis(100_000), "_id": time.ts}
        );
        let expired = entry(
            &ns,
            None,
            Change::Delete {
                id: Bson::Int32(1),
                expired_at_ms: Some(99_000),
            },
            None,
            time,
        );
        assert_eq!(expired.get_str("op").unwrap(), "d");
        assert_eq!(expired.get_document("o").unwrap(), &doc! {"_id": 1});
        assert!(expired.get_bool("expired").unwrap());
        let command = entry(
            &ns,
            None,
            Change::Command(doc! {"drop": "users"}),
            None,
            time,
        );
        assert_eq!(command.get_str("ns").unwrap(), "app.$cmd");
    }

    #[test]
    fn diffs_describe_updates_as_change_streams_report_them() {
        let before = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "gone": true, "arr": [1, 2]};
        let after =
            doc! {"_id": 1, "a": 2, "b": {"c": 1, "d": 3, "e": 4}, "arr": [1, 2, 3], "new": "x"};
        let diff = diff(&before, &after);
        assert_eq!(
            diff,
            doc! {"d": {"gone": false}, "u": {"a": 2, "arr": [1, 2, 3]}, "i": {"new": "x"}, "sb": {"u": {"d": 3}, "i": {"e": 4}}}
        );
        assert_eq!(
            update_description(&diff),
            doc! {"updatedFields": {"a": 2, "arr": [1, 2, 3], "new": "x", "b.d": 3, "b.e": 4}, "removedFields": ["gone"], "truncatedArrays": []}
        );
        // The same value under another numeric type is a change.
        assert_eq!(
            super::diff(&doc! {"a": 1}, &doc! {"a": 1.0}),
            doc! {"u": {"a": 1.0}}
        );
    }
}
