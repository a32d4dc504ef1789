//! Small BSON helpers shared by every layer: reading numeric and boolean command arguments the way
//! mongod's command parsers accept them (any numeric type). Type names live in `query::display`.

use bson::{Bson, Document, RawDocument};

/// A numeric value as f64 (Int32, Int64, Double; Decimal128 through its string form).
pub fn as_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(v) => Some(f64::from(*v)),
        Bson::Int64(v) => Some(*v as f64),
        Bson::Double(v) => Some(*v),
        Bson::Decimal128(v) => v.to_string().parse().ok(),
        _ => None,
    }
}

/// Truthiness as mongod reads boolean-ish command options: booleans, and numbers (non-zero is true).
pub fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        other => as_f64(other).is_none_or(|number| number != 0.0),
    }
}

/// Decodes one BSON document from exactly `bytes`, through bson's raw reader (no serde: ObjectIds
/// and other values are copied, not round-tripped through strings). Every element is validated.
pub fn decode_document(bytes: &[u8]) -> Result<Document, String> {
    let raw = bson::RawDocument::from_bytes(bytes).map_err(|error| error.to_string())?;
    Document::try_from(raw).map_err(|error| error.to_string())
}

/// Encodes `document` through bson's own writer (no serde: serde's path writes each ObjectId as
/// a hex string and parses it back).
pub fn encode_document(document: &Document) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    document
        .to_writer(&mut bytes)
        .map_err(|error| error.to_string())?;
    Ok(bytes)
}

/// The size of `document`'s BSON encoding, counted by encoding it without keeping the bytes:
/// unlike [`encoded_size`] (arithmetic only), it fails for what bson cannot encode (a field
/// name with a NUL byte), as writing the document would.
pub fn checked_encoded_size(document: &Document) -> Result<usize, String> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    document
        .to_writer(&mut counter)
        .map_err(|error| error.to_string())?;
    Ok(counter.0)
}

/// The BSON encoding of a value alone: what follows the type byte and the field name of an
/// element holding it (for values whose parts bson keeps private, such as DbPointer).
pub fn value_bytes(value: &Bson) -> Vec<u8> {
    let mut wrapper = Document::new();
    wrapper.insert("", value.clone());
    let mut bytes = Vec::new();
    if wrapper.to_writer(&mut bytes).is_err() {
        return Vec::new();
    }
    // Length (4), type (1), empty name (1), the value, the document terminator (1).
    bytes
        .get(6..bytes.len().saturating_sub(1))
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// Decodes only the top-level fields of `raw` that `wanted` accepts, skipping the others unread:
/// enough to evaluate any path under those fields at a fraction of a full decode.
pub fn decode_fields(raw: &RawDocument, wanted: impl Fn(&str) -> bool) -> Result<Document, String> {
    let mut document = Document::new();
    for element in raw {
        let (key, value) = element.map_err(|error| error.to_string())?;
        if wanted(key) {
            let value = Bson::try_from(value).map_err(|error| error.to_string())?;
            document.insert(key, value);
        }
    }
    Ok(document)
}

/// The encoded BSON size of `document` in bytes, computed without encoding it.
pub fn encoded_size(document: &Document) -> usize {
    // int32 length + elements + trailing NUL; each element is a type byte, a NUL-terminated name
    // and its value.
    4 + document
        .iter()
        .map(|(key, value)| 1 + key.len() + 1 + value_size(value))
        .sum::<usize>()
        + 1
}

/// The encoded BSON size of a value alone (what follows an element's type byte and name).
pub fn value_size(value: &Bson) -> usize {
    let string = |text: &str| 4 + text.len() + 1;
    match value {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::ObjectId(_) => 12,
        Bson::String(text) | Bson::JavaScriptCode(text) | Bson::Symbol(text) => string(text),
        Bson::Document(inner) => encoded_size(inner),
        Bson::Array(items) => {
            4 + items
                .iter()
                .enumerate()
                .map(|(index, item)| 1 + index.to_string().len() + 1 + value_size(item))
                .sum::<usize>()
                + 1
        }
        Bson::Binary(binary) => 4 + 1 + binary.bytes.len(),
        Bson::RegularExpression(regex) => regex.pattern.len() + 1 + regex.options.len() + 1,
        Bson::JavaScriptCodeWithScope(code) => 4 + string(&code.code) + encoded_size(&code.scope),
        Bson::DbPointer(_) => {
            bson::to_vec(&bson::doc! {"p": value.clone()}).map_or(0, |bytes| bytes.len() - 8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_of_every_type_read_as_f64() {
        assert_eq!(as_f64(&Bson::Int32(3)), Some(3.0));
        assert_eq!(as_f64(&Bson::Int64(-4)), Some(-4.0));
        assert_eq!(as_f64(&Bson::Double(2.5)), Some(2.5));
        let decimal: bson::Decimal128 = "12.5".parse().unwrap();
        assert_eq!(as_f64(&Bson::Decimal128(decimal)), Some(12.5));
        assert_eq!(as_f64(&Bson::String("1".into())), None);
    }

    #[test]
    fn decode_document_round_trips_and_rejects_garbage() {
        let document =
            bson::doc! {"_id": bson::oid::ObjectId::new(), "a": [1, {"b": "c"}], "d": 2.5};
        let bytes = bson::to_vec(&document).unwrap();
        assert_eq!(decode_document(&bytes), Ok(document));
        assert!(decode_document(&bytes[..bytes.len() - 1]).is_err());
        let mut corrupt = bytes.clone();
        corrupt[4] = 0x7E; // an unknown element type
        assert!(decode_document(&corrupt).is_err());
    }

    #[test]
    fn encoded_size_matches_the_encoder() {
        let decimal: bson::Decimal128 = "1.5".parse().unwrap();
        let samples = [
            bson::doc! {},
            bson::doc! {"a": 1, "b": 2.5, "c": "text", "d": null, "e": true},
            bson::doc! {"nested": {"x": [1, "two", {"three": 3_i64}], "y": []}, "id": bson::oid::ObjectId::new()},
            bson::doc! {"when": bson::DateTime::now(), "ts": bson::Timestamp { time: 1, increment: 2 }, "dec": decimal},
            bson::doc! {"re": bson::Regex { pattern: "a.*b".into(), options: "i".into() }, "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] }},
            bson::doc! {"many": (0..150).collect::<Vec<i32>>(), "min": Bson::MinKey, "max": Bson::MaxKey, "u": Bson::Undefined},
            bson::doc! {"code": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "f()".into(), scope: bson::doc! {"v": 1} })},
        ];
        for sample in samples {
            assert_eq!(
                encoded_size(&sample),
                bson::to_vec(&sample).unwrap().len(),
                "{sample}"
            );
        }
    }

    #[test]
    fn truthiness_matches_mongod_options() {
        assert!(is_truthy(&Bson::Int32(1)));
        assert!(!is_truthy(&Bson::Int32(0)));
        assert!(!is_truthy(&Bson::Boolean(false)));
        assert!(!is_truthy(&Bson::Null));
        assert!(is_truthy(&Bson::String("x".into())));
    }
}
