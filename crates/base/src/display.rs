//! One-line rendering of BSON values in the shape mongod uses inside error messages
//! (`{a: 1}`, `{ b: "x" }`, `[ 1, 2 ]`, `ObjectId('…')`), and mongod's BSON type names.
//!
//! Invariants: output is for humans only; nothing parses it back. Rendering never fails.
//! This module must not be used to build documents or keys.

use bson::{Bson, Document};

/// mongod's `typeName` for a value (`"string"`, `"int"`, `"objectId"`, ...).
pub fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// A value as mongod prints it in messages.
pub fn value_string(value: &Bson) -> String {
    match value {
        Bson::Double(v) => {
            if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
                format!("{v:.1}")
            } else {
                format!("{v}")
            }
        }
        Bson::String(v) | Bson::Symbol(v) => format!("{v:?}"),
        Bson::Document(v) => nested_document_string(v),
        Bson::Array(items) => {
            if items.is_empty() {
                "[]".to_string()
            } else {
                let inner: Vec<String> = items.iter().map(value_string).collect();
                format!("[ {} ]", inner.join(", "))
            }
        }
        Bson::Binary(v) => format!(
            "BinData({}, {})",
            u8::from(v.subtype),
            v.bytes
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
        ),
        Bson::Undefined => "undefined".to_string(),
        Bson::ObjectId(v) => format!("ObjectId('{v}')"),
        Bson::Boolean(v) => v.to_string(),
        Bson::DateTime(v) => format!("new Date({})", v.timestamp_millis()),
        Bson::Null => "null".to_string(),
        Bson::RegularExpression(v) => format!("/{}/{}", v.pattern, v.options),
        Bson::JavaScriptCode(v) => v.clone(),
        Bson::JavaScriptCodeWithScope(v) => v.code.clone(),
        Bson::Int32(v) => v.to_string(),
        Bson::Int64(v) => v.to_string(),
        Bson::Timestamp(v) => format!("Timestamp({}, {})", v.time, v.increment),
        Bson::Decimal128(v) => format!("NumberDecimal(\"{v}\")"),
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::DbPointer(_) => "DBPointer".to_string(),
    }
}

fn fields_string(document: &Document) -> String {
    document
        .iter()
        .map(|(name, value)| format!("{name}: {}", value_string(value)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn nested_document_string(document: &Document) -> String {
    if document.is_empty() {
        "{}".to_string()
    } else {
        format!("{{ {} }}", fields_string(document))
    }
}

/// A top-level document as mongod prints it in messages: `{a: 1, b: { c: 2 }}`.
pub fn document_string(document: &Document) -> String {
    format!("{{{}}}", fields_string(document))
}

/// A single element as mongod prints it: `{name: value}`.
pub fn element_string(name: &str, value: &Bson) -> String {
    format!("{{{name}: {}}}", value_string(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn element_renders_like_mongod_messages() {
        assert_eq!(element_string("a", &Bson::Int32(1)), "{a: 1}");
        assert_eq!(
            element_string("a", &Bson::Array(vec![Bson::Int32(1), "x".into()])),
            "{a: [ 1, \"x\" ]}"
        );
        assert_eq!(
            document_string(&doc! {"_id": 1, "b": {"c": 2.0}}),
            "{_id: 1, b: { c: 2.0 }}"
        );
    }
}
