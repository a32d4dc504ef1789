//! A successful command's reply as it leaves the server: a document a handler built, or BSON
//! bytes assembled directly so that stored documents in a cursor batch go out as they were read,
//! never decoded or re-encoded.

use bson::{Document, RawArrayBuf, RawBson, RawDocumentBuf};

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Document(Document),
    Raw(RawDocumentBuf),
}

impl Reply {
    /// `{cursor: {firstBatch|nextBatch: batch, id, ns}}`.
    pub fn cursor(id: i64, ns: &str, batch: Vec<RawDocumentBuf>, first: bool) -> Reply {
        let mut documents = RawArrayBuf::new();
        for document in batch {
            documents.push(RawBson::Document(document));
        }
        let mut cursor = RawDocumentBuf::new();
        cursor.append(
            if first { "firstBatch" } else { "nextBatch" },
            RawBson::Array(documents),
        );
        cursor.append("id", RawBson::Int64(id));
        cursor.append("ns", RawBson::String(ns.to_owned()));
        let mut reply = RawDocumentBuf::new();
        reply.append("cursor", RawBson::Document(cursor));
        Reply::Raw(reply)
    }

    /// Appends `ok: 1` (a reply's last field, as mongod puts it).
    pub fn append_ok(&mut self) {
        match self {
            Reply::Document(document) => {
                document.insert("ok", 1.0);
            }
            Reply::Raw(raw) => raw.append("ok", RawBson::Double(1.0)),
        }
    }

    /// Appends an int32 field after those already there (summary counts after a cursor).
    pub fn append_int32(&mut self, key: &str, value: i32) {
        match self {
            Reply::Document(document) => {
                document.insert(key, value);
            }
            Reply::Raw(raw) => raw.append(key, RawBson::Int32(value)),
        }
    }

    /// Appends `key: value` after the fields already there (`$clusterTime` after `ok`).
    pub fn append(&mut self, key: &str, value: bson::Bson) {
        match self {
            Reply::Document(document) => {
                document.insert(key, value);
            }
            Reply::Raw(raw) => {
                if let Ok(value) = RawBson::try_from(value) {
                    raw.append(key, value);
                }
            }
        }
    }

    /// The encoded reply; `Err` only for a built document bson cannot encode.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Reply::Document(document) => tideway_base::bsonutil::encode_document(document),
            Reply::Raw(raw) => Ok(raw.as_bytes().to_vec()),
        }
    }

    /// The encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Reply::Document(document) => tideway_base::bsonutil::encoded_size(document),
            Reply::Raw(raw) => raw.as_bytes().len(),
        }
    }
}

impl From<Document> for Reply {
    fn from(document: Document) -> Reply {
        Reply::Document(document)
    }
}
