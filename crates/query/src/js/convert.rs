//! BSON ⇄ JavaScript values for the server-side JavaScript engine, in the shape mongod's own
//! engine gives them: documents are plain objects, arrays are arrays, strings and booleans are
//! themselves, int32 and double are numbers, Date is `Date`, regex is `RegExp`, and the types
//! JavaScript lacks are the shell's objects defined by the prelude (`NumberLong`, `NumberInt`,
//! `NumberDecimal`, `ObjectId`, `Timestamp`, `BinData`, `MinKey`, `MaxKey`).
//!
//! Invariants:
//! - Conversion is iterative in depth only up to [`MAX_DEPTH`] containers: a cyclic or deeper JS
//!   value is refused (JSInterpreterFailure), never recursed into without bound.
//! - What is lossy (documented in docs/compatibility.md): a JS number always comes back as a
//!   double (mongod also restores an unchanged int32/int64 field's type); object keys come back
//!   in JavaScript's own order (integer-like keys first); regex flags JS lacks (`x`, `l`) are
//!   dropped; JavaScript code and symbols become strings; DBPointer becomes an empty object.

use base64::Engine as _;
use bson::{Bson, Document};
use rquickjs::{Array, Ctx, Function, Object, Value};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// Containers a value may nest when converted either way (mongod's BSON depth limit).
pub(crate) const MAX_DEPTH: usize = tideway_base::limits::MAX_BSON_DEPTH;

fn js_failure(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::JSInterpreterFailure, message)
}

/// Maps an rquickjs failure that is not a thrown JS exception.
pub(super) fn engine_error(error: rquickjs::Error) -> CommandError {
    js_failure(format!("JavaScript engine error: {error}"))
}

/// A prelude constructor by its global name.
fn constructor<'js>(ctx: &Ctx<'js>, name: &str) -> CommandResult<Function<'js>> {
    ctx.globals().get(name).map_err(engine_error)
}

fn construct<'js>(ctx: &Ctx<'js>, name: &str, args: Vec<Value<'js>>) -> CommandResult<Value<'js>> {
    let ctor = constructor(ctx, name)?;
    let ctor = rquickjs::Constructor::from_value(ctor.into_value()).map_err(engine_error)?;
    ctor.construct((rquickjs::function::Rest(args),))
        .map_err(engine_error)
}

fn string<'js>(ctx: &Ctx<'js>, text: &str) -> CommandResult<Value<'js>> {
    rquickjs::String::from_str(ctx.clone(), text)
        .map(rquickjs::String::into_value)
        .map_err(engine_error)
}

/// A BSON document as a plain JS object.
pub(crate) fn document_to_js<'js>(
    ctx: &Ctx<'js>,
    document: &Document,
) -> CommandResult<Value<'js>> {
    to_js(ctx, &Bson::Document(document.clone()), 0)
}

/// A BSON value as a JS value.
pub(crate) fn bson_to_js<'js>(ctx: &Ctx<'js>, value: &Bson) -> CommandResult<Value<'js>> {
    to_js(ctx, value, 0)
}

fn to_js<'js>(ctx: &Ctx<'js>, value: &Bson, depth: usize) -> CommandResult<Value<'js>> {
    if depth > MAX_DEPTH {
        return Err(js_failure(
            "BSON value nests too deep to convert to JavaScript",
        ));
    }
    let ctx2 = ctx.clone();
    Ok(match value {
        Bson::Double(number) => Value::new_float(ctx2, *number),
        Bson::Int32(number) => Value::new_int(ctx2, *number),
        Bson::Int64(number) => {
            construct(ctx, "NumberLong", vec![string(ctx, &number.to_string())?])?
        }
        Bson::Decimal128(number) => construct(
            ctx,
            "NumberDecimal",
            vec![string(ctx, &number.to_string())?],
        )?,
        Bson::String(text) | Bson::Symbol(text) => string(ctx, text)?,
        Bson::JavaScriptCode(code) => string(ctx, code)?,
        Bson::JavaScriptCodeWithScope(code) => string(ctx, &code.code)?,
        Bson::Boolean(flag) => Value::new_bool(ctx2, *flag),
        Bson::Null => Value::new_null(ctx2),
        Bson::Undefined => Value::new_undefined(ctx2),
        Bson::DateTime(date) => construct(
            ctx,
            "Date",
            vec![Value::new_float(ctx2, date.timestamp_millis() as f64)],
        )?,
        Bson::ObjectId(id) => construct(ctx, "ObjectId", vec![string(ctx, &id.to_hex())?])?,
        Bson::Timestamp(timestamp) => construct(
            ctx,
            "Timestamp",
            vec![
                Value::new_float(ctx2.clone(), f64::from(timestamp.time)),
                Value::new_float(ctx2, f64::from(timestamp.increment)),
            ],
        )?,
        Bson::Binary(binary) => construct(
            ctx,
            "BinData",
            vec![
                Value::new_int(ctx2, i32::from(u8::from(binary.subtype))),
                string(
                    ctx,
                    &base64::engine::general_purpose::STANDARD.encode(&binary.bytes),
                )?,
            ],
        )?,
        Bson::RegularExpression(regex) => {
            let flags: String = regex
                .options
                .chars()
                .filter(|flag| matches!(flag, 'i' | 'm' | 's' | 'u'))
                .collect();
            construct(
                ctx,
                "RegExp",
                vec![string(ctx, &regex.pattern)?, string(ctx, &flags)?],
            )?
        }
        Bson::MinKey => ctx.globals().get("MinKey").map_err(engine_error)?,
        Bson::MaxKey => ctx.globals().get("MaxKey").map_err(engine_error)?,
        Bson::DbPointer(_) => {
            let object = Object::new(ctx2).map_err(engine_error)?;
            object.into_value()
        }
        Bson::Array(items) => {
            let array = Array::new(ctx2).map_err(engine_error)?;
            for (index, item) in items.iter().enumerate() {
                array
                    .set(index, to_js(ctx, item, depth + 1)?)
                    .map_err(engine_error)?;
            }
            array.into_value()
        }
        Bson::Document(document) => {
            let object = Object::new(ctx2).map_err(engine_error)?;
            for (key, item) in document {
                object
                    .set(key.as_str(), to_js(ctx, item, depth + 1)?)
                    .map_err(engine_error)?;
            }
            object.into_value()
        }
    })
}

/// A JS value as BSON (see the module's lossy rules).
pub(crate) fn js_to_bson<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> CommandResult<Bson> {
    from_js(ctx, value, 0)
}

fn tag_of<'js>(object: &Object<'js>) -> Option<String> {
    object.get::<_, Option<String>>("__bsonType").ok().flatten()
}

fn from_js<'js>(ctx: &Ctx<'js>, value: &Value<'js>, depth: usize) -> CommandResult<Bson> {
    if depth > MAX_DEPTH {
        return Err(js_failure(
            "JavaScript value nests too deep (or is cyclic) to convert to BSON",
        ));
    }
    if value.is_undefined() {
        return Ok(Bson::Undefined);
    }
    if value.is_null() {
        return Ok(Bson::Null);
    }
    if let Some(flag) = value.as_bool() {
        return Ok(Bson::Boolean(flag));
    }
    if let Some(number) = value.as_number() {
        return Ok(Bson::Double(number));
    }
    if value.is_big_int() {
        let big = value
            .as_big_int()
            .cloned()
            .ok_or_else(|| js_failure("bad BigInt"))?;
        return Ok(big.to_i64().map_or(Bson::Null, Bson::Int64));
    }
    if let Some(text) = value.as_string() {
        return Ok(Bson::String(text.to_string().map_err(engine_error)?));
    }
    if value.is_symbol() {
        return Ok(Bson::String(String::from("Symbol()")));
    }
    if value.is_function() {
        let source: String = ctx
            .globals()
            .get::<_, Function>("String")
            .and_then(|to_string| to_string.call((value.clone(),)))
            .map_err(engine_error)?;
        return Ok(Bson::JavaScriptCode(source));
    }
    if let Some(array) = value.as_array() {
        let mut items = Vec::with_capacity(array.len());
        for index in 0..array.len() {
            let item: Value = array.get(index).map_err(engine_error)?;
            items.push(from_js(ctx, &item, depth + 1)?);
        }
        return Ok(Bson::Array(items));
    }
    let Some(object) = value.as_object() else {
        return Ok(Bson::Null);
    };
    if object.is_instance_of(constructor(ctx, "Date")?) {
        let get_time: Function = object.get("getTime").map_err(engine_error)?;
        let millis: f64 = get_time
            .call((rquickjs::function::This(object.clone()),))
            .map_err(engine_error)?;
        let millis = if millis.is_nan() {
            i64::MIN
        } else {
            millis as i64
        };
        return Ok(Bson::DateTime(bson::DateTime::from_millis(millis)));
    }
    if object.is_instance_of(constructor(ctx, "RegExp")?) {
        let pattern: String = object.get("source").map_err(engine_error)?;
        let flags: String = object.get("flags").map_err(engine_error)?;
        let mut options: Vec<char> = flags
            .chars()
            .filter(|flag| matches!(flag, 'i' | 'm' | 's' | 'u'))
            .collect();
        options.sort_unstable();
        return Ok(Bson::RegularExpression(bson::Regex {
            pattern,
            options: options.into_iter().collect(),
        }));
    }
    if let Some(tag) = tag_of(object) {
        if let Some(converted) = from_tagged(object, &tag)? {
            return Ok(converted);
        }
    }
    let mut document = Document::new();
    for entry in object.props::<String, Value>() {
        let (key, item) = entry.map_err(engine_error)?;
        document.insert(key, from_js(ctx, &item, depth + 1)?);
    }
    Ok(Bson::Document(document))
}

fn tagged_string(object: &Object<'_>, field: &str) -> CommandResult<String> {
    object.get(field).map_err(engine_error)
}

/// The shell types the prelude tags with `__bsonType`.
fn from_tagged(object: &Object<'_>, tag: &str) -> CommandResult<Option<Bson>> {
    Ok(Some(match tag {
        "long" => {
            let text = tagged_string(object, "__value")?;
            match text.parse::<i64>() {
                Ok(number) => Bson::Int64(number),
                Err(_) => Bson::Int64(text.parse::<f64>().map_or(0, |number| number as i64)),
            }
        }
        "int" => {
            let number: f64 = object.get("__value").map_err(engine_error)?;
            Bson::Int32(number as i32)
        }
        "decimal" => {
            let text = tagged_string(object, "__value")?;
            Bson::Decimal128(text.parse().map_err(|_| {
                js_failure(format!("NumberDecimal: invalid decimal string \"{text}\""))
            })?)
        }
        "objectid" => {
            let text = tagged_string(object, "str")?;
            Bson::ObjectId(
                bson::oid::ObjectId::parse_str(&text)
                    .map_err(|_| js_failure(format!("invalid ObjectId string \"{text}\"")))?,
            )
        }
        "timestamp" => {
            let time: f64 = object.get("t").map_err(engine_error)?;
            let increment: f64 = object.get("i").map_err(engine_error)?;
            Bson::Timestamp(bson::Timestamp {
                time: time as u32,
                increment: increment as u32,
            })
        }
        "bindata" => {
            let subtype: f64 = object.get("__subtype").map_err(engine_error)?;
            let encoded = tagged_string(object, "__base64")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.as_bytes())
                .map_err(|_| js_failure("BinData: invalid base64"))?;
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::from(subtype as u8),
                bytes,
            })
        }
        "minkey" => Bson::MinKey,
        "maxkey" => Bson::MaxKey,
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn round_trip(value: &Bson) -> Bson {
        super::super::engine::with_test_context(|ctx| {
            let js = bson_to_js(ctx, value).unwrap();
            js_to_bson(ctx, &js).unwrap()
        })
    }

    #[test]
    fn bson_values_round_trip_through_javascript() {
        let oid = bson::oid::ObjectId::parse_str("5f1e1e1e1e1e1e1e1e1e1e1e").unwrap();
        let cases: Vec<(Bson, Bson)> = vec![
            (Bson::Double(1.5), Bson::Double(1.5)),
            // JS numbers come back as doubles, as in mongod.
            (Bson::Int32(7), Bson::Double(7.0)),
            (Bson::Int64(i64::MAX), Bson::Int64(i64::MAX)),
            (Bson::Int64(-5), Bson::Int64(-5)),
            (
                Bson::Decimal128("1.10".parse().unwrap()),
                Bson::Decimal128("1.10".parse().unwrap()),
            ),
            (Bson::String("héllo".into()), Bson::String("héllo".into())),
            (Bson::Boolean(true), Bson::Boolean(true)),
            (Bson::Null, Bson::Null),
            (Bson::Undefined, Bson::Undefined),
            (
                Bson::DateTime(bson::DateTime::from_millis(1_583_020_800_000)),
                Bson::DateTime(bson::DateTime::from_millis(1_583_020_800_000)),
            ),
            (Bson::ObjectId(oid), Bson::ObjectId(oid)),
            (
                Bson::Timestamp(bson::Timestamp {
                    time: 5,
                    increment: 9,
                }),
                Bson::Timestamp(bson::Timestamp {
                    time: 5,
                    increment: 9,
                }),
            ),
            (
                Bson::Binary(bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: vec![0, 1, 2, 255],
                }),
                Bson::Binary(bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: vec![0, 1, 2, 255],
                }),
            ),
            (
                Bson::RegularExpression(bson::Regex {
                    pattern: "^a.c".into(),
                    options: "im".into(),
                }),
                Bson::RegularExpression(bson::Regex {
                    pattern: "^a.c".into(),
                    options: "im".into(),
                }),
            ),
            (Bson::MinKey, Bson::MinKey),
            (Bson::MaxKey, Bson::MaxKey),
            (
                Bson::Document(doc! {"a": {"b": [1.5, "x", {"c": null}]}, "d": true}),
                Bson::Document(doc! {"a": {"b": [1.5, "x", {"c": null}]}, "d": true}),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(round_trip(&input), expected, "round trip of {input:?}");
        }
    }

    #[test]
    fn cyclic_objects_are_refused_not_recursed() {
        super::super::engine::with_test_context(|ctx| {
            let value: Value = ctx.eval("var a = {}; a.self = a; a").unwrap();
            let error = js_to_bson(ctx, &value).unwrap_err();
            assert_eq!(error.code, ErrorCode::JSInterpreterFailure);
        });
    }
}
