//! Text index keys: what a document puts in a text index, in mongod's layout
//! (`FTSIndexFormat::getKeys`, text index version 3). Term extraction and scoring are
//! `query::text`; this module only lays them out as `keycodec` keys.
//!
//! Key layout, one key per distinct term of the document (none when it has no terms):
//! `prefix values… + String(term) + Double(score) + suffix values…`, prefix and suffix values
//! encoded with their key directions, term and score ascending. A missing prefix or suffix
//! field is Null; an array as a prefix value is refused (16675, as mongod). Terms longer than
//! 224 bytes are stored as their first bytes (cut at a character boundary) followed by the
//! lower-case hex MD5 of the whole term ([`term_key`]). As in mongod, a document with more than
//! 400,000 distinct terms (16732) or whose keys would exceed 4 MB (16733) cannot be indexed.
//!
//! The planner scans, per term of `TextQuery::terms_to_scan`, every key starting with
//! [`text_term_prefix`]`(prefix values, term)` (the prefix values come from equalities on the
//! prefix fields), unions the documents, and scores each with `TextIndex::score`.

use bson::{Bson, Document};
use md5::{Digest, Md5};

use super::{StorageError, StorageResult};
use tideway_base::error::ErrorCode;
use tideway_query::keycodec::{self, Direction};
use tideway_query::path;
use tideway_query::text::{TextIndex, TERM_KEY_PREFIX_BYTES};

/// mongod's limit on the distinct terms of one document (16732).
const MAX_TERMS: usize = 400_000;
/// mongod's limit on the total size of one document's text keys (16733).
const MAX_KEY_BYTES: u64 = 4 * 1024 * 1024;

/// The string a term is stored as.
pub(crate) fn term_key(term: &str) -> String {
    if term.len() <= TERM_KEY_PREFIX_BYTES {
        return term.to_string();
    }
    let mut cut = TERM_KEY_PREFIX_BYTES;
    while !term.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = Md5::digest(term.as_bytes());
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}{hex}", &term[..cut])
}

fn direction(sign: i32) -> Direction {
    if sign < 0 {
        Direction::Descending
    } else {
        Direction::Ascending
    }
}

/// The encoded prefix of every key of `term` under the given prefix-field values (pass the
/// index's prefix fields' values in order with their directions; none for a plain text index).
pub fn text_term_prefix(prefix_values: &[(&Bson, Direction)], term: &str) -> Vec<u8> {
    let mut key = keycodec::encode_key(prefix_values);
    keycodec::encode_value(
        &mut key,
        &Bson::String(term_key(term)),
        Direction::Ascending,
    );
    key
}

/// The keys `document` contributes to `index` (sorted, deduplicated).
pub(crate) fn text_keys(index: &TextIndex, document: &Document) -> StorageResult<Vec<Vec<u8>>> {
    let field_value = |field: &str| {
        let parts = path::split_path(field);
        path::get_path(document, &parts).unwrap_or(&Bson::Null)
    };
    let mut prefix = Vec::new();
    for (field, sign) in &index.prefix_fields {
        let value = field_value(field);
        if matches!(value, Bson::Array(_)) {
            return Err(StorageError::CannotIndex {
                code: ErrorCode::Location16675,
                message: "cannot have a multi-key as a prefix to a text index".to_string(),
            });
        }
        keycodec::encode_value(&mut prefix, value, direction(*sign));
    }
    let mut suffix = Vec::new();
    for (field, sign) in &index.suffix_fields {
        keycodec::encode_value(&mut suffix, field_value(field), direction(*sign));
    }
    let scores = index
        .term_scores(document)
        .map_err(|error| StorageError::CannotIndex {
            code: error.code,
            message: error.errmsg,
        })?;
    let id = || tideway_base::display::value_string(document.get("_id").unwrap_or(&Bson::Null));
    if scores.len() > MAX_TERMS {
        return Err(StorageError::CannotIndex {
            code: ErrorCode::Location16732,
            message: format!(
                "too many unique keys for a single document to have a text index, max is {}_id: {}",
                scores.len(),
                id()
            ),
        });
    }
    // mongod's estimate of the keys' BSON size: per key a 5-byte object, the term
    // (2 + 4 + length + 1), the score (2 + 8) and the extra fields.
    let extras = (prefix.len() + suffix.len()) as u64;
    let key_bytes: u64 = scores
        .keys()
        .map(|term| 22 + term_key(term).len() as u64 + extras)
        .sum();
    if key_bytes > MAX_KEY_BYTES {
        return Err(StorageError::CannotIndex {
            code: ErrorCode::Location16733,
            message: format!(
                "trying to index text where term list is too big, max is 4mb _id: {}",
                id()
            ),
        });
    }
    let mut keys: Vec<Vec<u8>> = scores
        .into_iter()
        .map(|(term, score)| {
            let mut key = prefix.clone();
            keycodec::encode_value(
                &mut key,
                &Bson::String(term_key(&term)),
                Direction::Ascending,
            );
            keycodec::encode_value(&mut key, &Bson::Double(score), Direction::Ascending);
            key.extend_from_slice(&suffix);
            key
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn compound() -> TextIndex {
        TextIndex::from_spec(&doc! {
            "key": {"a": 1, "_fts": "text", "_ftsx": 1, "z": -1}, "weights": {"t": 1},
            "default_language": "english", "language_override": "language",
            "textIndexVersion": 3,
        })
        .unwrap()
    }

    #[test]
    fn one_key_per_term_with_prefix_score_and_suffix() {
        let keys = text_keys(&compound(), &doc! {"a": 5, "t": "cake", "z": "s"}).unwrap();
        let mut expected = keycodec::encode_key(&[
            (&Bson::Int32(5), Direction::Ascending),
            (&Bson::String("cake".into()), Direction::Ascending),
            (&Bson::Double(1.1), Direction::Ascending),
        ]);
        keycodec::encode_value(
            &mut expected,
            &Bson::String("s".into()),
            Direction::Descending,
        );
        assert_eq!(keys, vec![expected.clone()]);
        let prefix = text_term_prefix(&[(&Bson::Int32(5), Direction::Ascending)], "cake");
        assert!(expected.starts_with(&prefix));
        // No terms, no keys; arrays are refused as prefix values.
        assert!(text_keys(&compound(), &doc! {"a": 5}).unwrap().is_empty());
        let error = text_keys(&compound(), &doc! {"a": [1], "t": "cake"}).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot have a multi-key as a prefix to a text index"
        );
    }

    #[test]
    fn long_terms_are_shortened_with_their_md5() {
        let long = "x".repeat(300);
        let key = term_key(&long);
        assert_eq!(key.len(), 224 + 32);
        assert!(key.starts_with(&"x".repeat(224)));
        assert_eq!(term_key("short"), "short");
        let multibyte = "é".repeat(200);
        assert!(term_key(&multibyte).len() <= 256);
    }

    #[test]
    fn documents_with_too_many_terms_are_refused() {
        let index = TextIndex::from_spec(&doc! {
            "key": {"_fts": "text", "_ftsx": 1}, "weights": {"t": 1},
            "default_language": "none", "language_override": "language", "textIndexVersion": 3,
        })
        .unwrap();
        let words: Vec<String> = (0..200_000).map(|i| format!("w{i:08}")).collect();
        let error = text_keys(&index, &doc! {"_id": 1, "t": words.join(" ")}).unwrap_err();
        assert_eq!(
            error.to_string(),
            "trying to index text where term list is too big, max is 4mb _id: 1"
        );
    }
}
