//! The document of a [`crate::Record`]: its BSON bytes as storage read them, decoded
//! into a `Document` only when something looks inside. Reads that pass documents through
//! unchanged (a `find` reply without projection) never decode them.
//!
//! Invariants: at least one form is present from construction on, and the other, once made,
//! describes the same document. Bytes handed to [`StoredDoc::from_checked_bytes`] have passed
//! [`tideway_base::limits::walk_raw`], so decoding them cannot fail.

use std::ops::Deref;
use std::sync::OnceLock;

use bson::{Bson, Document, RawDocument, RawDocumentBuf};

#[derive(Clone)]
pub struct StoredDoc {
    raw: OnceLock<RawDocumentBuf>,
    decoded: OnceLock<Document>,
}

impl StoredDoc {
    /// A document already decoded (computed documents, writes).
    pub fn decoded(document: Document) -> StoredDoc {
        StoredDoc {
            raw: OnceLock::new(),
            decoded: OnceLock::from(document),
        }
    }

    /// Stored bytes that [`tideway_base::limits::walk_raw`] accepted.
    pub(crate) fn from_checked_bytes(raw: RawDocumentBuf) -> StoredDoc {
        StoredDoc {
            raw: OnceLock::from(raw),
            decoded: OnceLock::new(),
        }
    }

    /// An engine's stored BSON bytes, checked (malformed or too deeply nested bytes are
    /// `Corrupt`) but not decoded.
    pub fn from_stored_bytes(bytes: Vec<u8>) -> crate::StorageResult<StoredDoc> {
        let corrupt =
            |error: String| crate::StorageError::Corrupt(format!("stored document: {error}"));
        let raw = RawDocumentBuf::from_bytes(bytes).map_err(|error| corrupt(error.to_string()))?;
        tideway_base::limits::walk_raw(&raw, tideway_base::limits::MAX_BSON_DEPTH)
            .map_err(|error| corrupt(error.to_string()))?;
        Ok(StoredDoc::from_checked_bytes(raw))
    }

    /// The decoded document, decoding it on first use.
    pub fn document(&self) -> &Document {
        self.decoded.get_or_init(|| match self.raw.get() {
            Some(raw) => decode_checked(raw),
            None => Document::new(),
        })
    }

    pub fn into_document(self) -> Document {
        let StoredDoc { raw, decoded } = self;
        match (decoded.into_inner(), raw.into_inner()) {
            (Some(document), _) => document,
            (None, Some(raw)) => decode_checked(&raw),
            (None, None) => Document::new(),
        }
    }

    pub fn into_raw(self) -> Result<RawDocumentBuf, String> {
        let StoredDoc { raw, decoded } = self;
        match (raw.into_inner(), decoded.into_inner()) {
            (Some(raw), _) => Ok(raw),
            (None, Some(document)) => {
                RawDocumentBuf::from_bytes(tideway_base::bsonutil::encode_document(&document)?)
                    .map_err(|error| error.to_string())
            }
            (None, None) => Ok(RawDocumentBuf::new()),
        }
    }

    /// The BSON bytes when they exist without encoding (the document was read, not computed).
    pub fn bytes_if_read(&self) -> Option<&RawDocument> {
        self.raw.get().map(|raw| raw.as_ref())
    }

    /// The `_id` (Null if there is none), read without decoding the rest of the document.
    pub fn id(&self) -> Bson {
        if let Some(document) = self.decoded.get() {
            return document.get("_id").cloned().unwrap_or(Bson::Null);
        }
        self.raw
            .get()
            .and_then(|raw| raw.get("_id").ok().flatten())
            .and_then(|id| Bson::try_from(id).ok())
            .unwrap_or(Bson::Null)
    }

    /// The encoded size in bytes, without encoding a decoded-only document.
    pub fn encoded_size(&self) -> usize {
        match self.raw.get() {
            Some(raw) => raw.as_bytes().len(),
            None => tideway_base::bsonutil::encoded_size(self.document()),
        }
    }
}

/// Decodes bytes that passed `walk_raw`: every element parses, so the conversion succeeds. Were
/// that ever wrong, the failure is logged and the document reads as empty rather than panicking.
fn decode_checked(raw: &RawDocument) -> Document {
    tideway_base::bsonutil::document_from_raw(raw).unwrap_or_else(|error| {
        tracing::error!(%error, "a checked stored document failed to decode");
        Document::new()
    })
}

impl Deref for StoredDoc {
    type Target = Document;

    fn deref(&self) -> &Document {
        self.document()
    }
}

impl From<Document> for StoredDoc {
    fn from(document: Document) -> StoredDoc {
        StoredDoc::decoded(document)
    }
}

impl PartialEq for StoredDoc {
    fn eq(&self, other: &StoredDoc) -> bool {
        self.document() == other.document()
    }
}

impl PartialEq<Document> for StoredDoc {
    fn eq(&self, other: &Document) -> bool {
        self.document() == other
    }
}

impl std::fmt::Debug for StoredDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.document().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn each_form_is_made_from_the_other() {
        let document = doc! {"_id": 1, "a": [1, {"b": "c"}], "d": 2.5};
        let bytes = RawDocumentBuf::from_document(&document).unwrap();
        let from_bytes = StoredDoc::from_checked_bytes(bytes.clone());
        assert_eq!(from_bytes.document(), &document);
        assert_eq!(from_bytes.encoded_size(), bytes.as_bytes().len());
        assert_eq!(from_bytes.clone().into_document(), document);
        let decoded = StoredDoc::decoded(document.clone());
        assert_eq!(decoded.encoded_size(), bytes.as_bytes().len());
        assert_eq!(decoded.clone().into_raw().unwrap(), bytes);
        assert_eq!(from_bytes, decoded);
        assert_eq!(from_bytes.get_i32("_id"), Ok(1));
        let unread = StoredDoc::from_checked_bytes(bytes.clone());
        assert_eq!(unread.id(), Bson::Int32(1));
        assert_eq!(decoded.id(), Bson::Int32(1));
        assert_eq!(unread.bytes_if_read(), Some(bytes.as_ref()));
        assert_eq!(StoredDoc::decoded(doc! {}).bytes_if_read(), None);
    }
}
