//! createIndexes rules for the special index kinds (hashed, wildcard, text) and the plugins
//! tideway refuses (2d, 2dsphere, geoHaystack, unknown names), with mongod's codes and
//! messages (`index_key_validate.cpp`, `IndexCatalogImpl::_isSpecOk`, `FTSSpec::fixSpec`,
//! `ExpressionParams::parseHashParams`). `indexes.rs` calls [`check_key_pattern`] for every
//! spec and [`normalize_text_spec`] for text indexes; the key generation itself is storage's.

use std::collections::BTreeMap;

use bson::{doc, Bson, Document};

use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::text::{Language, MAX_WORD_WEIGHT};
use tideway_storage::IndexKind;

/// mongod's `IndexNames::findPluginName`: the first string value of the key pattern, else
/// `wildcard` at the first `$**` field, else the empty name of an ordered (btree) index.
pub(crate) fn plugin_name(key: &Document) -> String {
    for (field, value) in key {
        if let Bson::String(name) = value {
            return name.clone();
        }
        if field == "$**" || field.ends_with(".$**") {
            return "wildcard".to_string();
        }
    }
    String::new()
}

fn cannot_create(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::CannotCreateIndex, message)
}

/// Checks the key pattern rules that depend on the index kind and returns the kind. `wrap`
/// turns a reason into the command's "Error in specification …" error.
pub(crate) fn check_key_pattern(
    raw: &Document,
    key: &Document,
    wrap: &dyn Fn(&str) -> CommandError,
) -> CommandResult<IndexKind> {
    let plugin = plugin_name(key);
    match plugin.as_str() {
        "" => return Ok(IndexKind::Ordered),
        "hashed" | "text" | "wildcard" => {}
        "geoHaystack" => {
            return Err(wrap(
                "GeoHaystack indexes cannot be created in version 5.0 and above",
            ))
        }
        "2d" | "2dsphere" | "2dsphere_bucket" | "columnstore" => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support '{plugin}' indexes"),
            ))
        }
        unknown => return Err(wrap(&format!("Unknown index plugin '{unknown}'"))),
    }
    let mut hashed_fields = 0;
    for (field, value) in key {
        match value {
            Bson::String(kind) if kind.is_empty() => {
                return Err(cannot_create(
                    "Values in the index key pattern cannot be empty strings",
                ))
            }
            Bson::String(kind) if *kind != plugin => {
                return Err(wrap("Can't use more than one index plugin for a single index."))
            }
            Bson::String(kind) => hashed_fields += usize::from(kind == "hashed"),
            number => match tideway_base::bsonutil::as_f64(number) {
                Some(value) if value.is_nan() => {
                    return Err(wrap("Values in the index key pattern cannot be NaN."))
                }
                Some(0.0) => {
                    return Err(wrap("Values in the index key pattern cannot be 0."))
                }
                Some(value) if value < 0.0 && plugin == "wildcard" => {
                    return Err(wrap(
                        "A numeric value in a $** index key pattern must be positive.",
                    ))
                }
                Some(_) => {}
                None => {
                    return Err(wrap(&format!(
                        "Values in v:2 index key pattern cannot be of type {}. Only numbers > 0, numbers < 0, and strings are allowed.",
                        type_name(number)
                    )))
                }
            },
        }
        check_field_name(field, value, &plugin, wrap)?;
    }
    if plugin == "wildcard" && key.len() != 1 {
        return Err(wrap("wildcard indexes do not allow compounding"));
    }
    let flag = |name: &str| raw.get(name).is_some_and(tideway_base::bsonutil::is_truthy);
    match plugin.as_str() {
        "hashed" => {
            if hashed_fields > 1 {
                return Err(CommandError::new(
                    ErrorCode::Location31303,
                    format!(
                        "A maximum of one index field is allowed to be hashed but found {hashed_fields} for 'key' {}",
                        value_string(&Bson::Document(key.clone()))
                    ),
                ));
            }
            if flag("unique") {
                return Err(CommandError::new(
                    ErrorCode::Location16764,
                    "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
                ));
            }
            // A single-field hashed index may carry `expireAfterSeconds`, as in mongod (whose
            // TTL monitor then skips it: see `ttl::TtlPolicies::from_meta`).
            Ok(IndexKind::Hashed)
        }
        "wildcard" => {
            for option in ["sparse", "unique"] {
                if flag(option) {
                    return Err(cannot_create(format!(
                        "Index type 'wildcard' does not support the {option} option"
                    )));
                }
            }
            // `IndexCatalogImpl::_isSpecOk`: the one special kind createIndexes refuses TTL on.
            if raw.contains_key("expireAfterSeconds") {
                return Err(cannot_create("Index type 'wildcard' cannot be a TTL index"));
            }
            Ok(IndexKind::Wildcard)
        }
        _ => {
            if flag("unique") {
                return Err(cannot_create(
                    "Index type 'text' does not support the unique option",
                ));
            }
            // As in mongod, `expireAfterSeconds` is refused only on a compound key pattern as
            // the client wrote it (`indexes::ttl_option`); the TTL monitor skips text indexes.
            Ok(IndexKind::Text)
        }
    }
}

/// mongod's field name rules for special key patterns: no empty parts, `$`-prefixed parts
/// only as a wildcard's last `$**` or DBRef fields, `_fts` only as text.
fn check_field_name(
    field: &str,
    value: &Bson,
    plugin: &str,
    wrap: &dyn Fn(&str) -> CommandError,
) -> CommandResult<()> {
    if field.is_empty() {
        return Err(wrap("Index keys cannot be an empty field."));
    }
    let is_text = matches!(value, Bson::String(kind) if kind == "text");
    if field == "$**" && (is_text || !matches!(value, Bson::String(_))) {
        return Ok(());
    }
    if field == "_fts" && !is_text {
        return Err(wrap("Index key contains an illegal field name: '_fts'"));
    }
    let parts: Vec<&str> = field.split('.').collect();
    for (position, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Err(wrap("Index keys cannot contain an empty field."));
        }
        if !part.starts_with('$') {
            continue;
        }
        let dbref = position != 0 && matches!(*part, "$db" | "$id" | "$ref");
        let wildcard = position == parts.len() - 1 && *part == "$**" && plugin == "wildcard";
        if !dbref && !wildcard {
            return Err(wrap(
                "Index key contains an illegal field name: field name starts with '$'.",
            ));
        }
    }
    Ok(())
}

/// Validates `wildcardProjection` (mongod's errors) for a wildcard key pattern `key`.
pub(crate) fn check_wildcard_projection(
    key: &Document,
    projection: &Bson,
) -> CommandResult<Document> {
    if plugin_name(key) != "wildcard" {
        return Err(CommandError::bad_value(
            "The field 'wildcardProjection' is only allowed in 'wildcard' indexes",
        ));
    }
    let Bson::Document(projection) = projection else {
        return Err(CommandError::type_mismatch(format!(
            "The field 'wildcardProjection' must be a non-empty object, but got {}",
            type_name(projection)
        )));
    };
    if !key.contains_key("$**") {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "The field 'wildcardProjection' is only allowed when 'key' is {\"$**\": ±1} or {\"$**\": \"columnstore\"}",
        ));
    }
    if projection.is_empty() {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "The 'wildcardProjection' field can't be an empty object",
        ));
    }
    let caused_by = |code: ErrorCode, why: String| {
        CommandError::new(
            code,
            format!("Failed to parse projection: wildcardProjection :: caused by :: {why}"),
        )
    };
    let mut inclusion: Option<bool> = None;
    for (path, value) in projection {
        if !matches!(
            value,
            Bson::Boolean(_)
                | Bson::Int32(_)
                | Bson::Int64(_)
                | Bson::Double(_)
                | Bson::Decimal128(_)
        ) {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway's wildcardProjection takes only 0/1 and true/false, not {} for '{path}'", type_name(value)),
            ));
        }
        if path.is_empty()
            || path
                .split('.')
                .any(|part| part.is_empty() || part.starts_with('$'))
        {
            return Err(caused_by(
                ErrorCode::BadValue,
                format!("Invalid projection path '{path}'"),
            ));
        }
        if path == "_id" {
            continue;
        }
        let include = tideway_base::bsonutil::is_truthy(value);
        match inclusion {
            Some(true) if !include => {
                return Err(caused_by(
                    ErrorCode::Location31253,
                    format!("Cannot do exclusion on field {path} in inclusion projection"),
                ))
            }
            Some(false) if include => {
                return Err(caused_by(
                    ErrorCode::Location31254,
                    format!("Cannot do inclusion on field {path} in exclusion projection"),
                ))
            }
            _ => inclusion = Some(include),
        }
    }
    Ok(projection.clone())
}

/// The parts of a text index spec mongod's `FTSSpec::fixSpec` normalises.
pub(crate) struct TextSpec {
    /// `{prefix…, _fts: "text", _ftsx: 1, suffix…}`.
    pub key: Document,
    pub weights: Document,
    pub default_language: String,
    pub language_override: String,
}

/// `FTSSpec::fixSpec` for text index version 3.
pub(crate) fn normalize_text_spec(raw: &Document, key: &Document) -> CommandResult<TextSpec> {
    let mut weights: BTreeMap<String, i64> = BTreeMap::new();
    let mut normalized = Document::new();
    let mut added_fts = false;
    // Layout: prefix fields, then the adjacent text fields, then suffix fields.
    let mut stage = 0; // 0: prefix, 1: text, 2: suffix
    for (field, value) in key {
        let is_text = matches!(value, Bson::String(kind) if kind == "text");
        if field == "_fts" || field == "_ftsx" {
            return Err(cannot_create(
                "text index with reserved fields _fts/_ftsx not allowed",
            ));
        }
        if is_text {
            if stage == 2 {
                return Err(cannot_create("'text' fields in index must all be adjacent"));
            }
            stage = 1;
            if !added_fts {
                normalized.insert("_fts", "text");
                normalized.insert("_ftsx", 1);
                added_fts = true;
            }
            weights.insert(field.clone(), 1);
        } else {
            if stage == 1 {
                stage = 2;
            }
            let direction = tideway_base::bsonutil::as_f64(value).unwrap_or(0.0);
            if direction != 1.0 && direction != -1.0 {
                return Err(cannot_create(
                    "expected value 1 or -1 for non-text key in compound index",
                ));
            }
            normalized.insert(field.clone(), value.clone());
        }
    }
    match raw.get("weights") {
        None => {}
        Some(Bson::Document(given)) => {
            for (field, weight) in given {
                let Some(number) = tideway_base::bsonutil::as_f64(weight) else {
                    return Err(cannot_create("weight for text index needs numeric type"));
                };
                // mongod keeps weights as ints (numberInt truncation).
                weights.insert(field.clone(), number.trunc() as i64);
            }
        }
        Some(Bson::String(star)) if star == "$**" => {
            weights.insert("$**".into(), 1);
        }
        Some(Bson::String(_)) => {
            return Err(cannot_create(
                "text index option 'weights' must be an object",
            ))
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "The field 'weights' must be an object, but got {}",
                type_name(other)
            )))
        }
    }
    if weights.is_empty() {
        return Err(cannot_create(
            "text index option 'weights' must specify fields or the wildcard",
        ));
    }
    let mut weight_doc = Document::new();
    for (field, weight) in &weights {
        if *weight <= 0 || *weight as f64 >= MAX_WORD_WEIGHT {
            return Err(cannot_create(format!(
                "text index weight must be in the exclusive interval (0,{MAX_WORD_WEIGHT}) but found: {weight}"
            )));
        }
        if field != "$**" {
            if field.split('.').any(str::is_empty) {
                return Err(cannot_create(if field.is_empty() {
                    "weight cannot be on an empty field"
                } else {
                    "weight cannot have empty path component"
                }));
            }
            if field.split('.').any(|part| part.starts_with('$')) {
                return Err(cannot_create(
                    "weight cannot have path component with $ prefix",
                ));
            }
        }
        let weight = i32::try_from(*weight).unwrap_or(i32::MAX);
        weight_doc.insert(field.clone(), weight);
    }
    let default_language = match raw.get("default_language") {
        None => "english".to_string(),
        Some(Bson::String(name)) => {
            if Language::parse(name).is_none() {
                return Err(cannot_create("default_language is not valid"));
            }
            name.clone()
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "The field 'default_language' must be a string, but got {}",
                type_name(other)
            )))
        }
    };
    let language_override = match raw.get("language_override") {
        None => "language".to_string(),
        Some(Bson::String(field)) => {
            if field.is_empty() || field.starts_with('$') || field.contains('.') {
                return Err(cannot_create("language_override is not valid"));
            }
            field.clone()
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "The field 'language_override' must be a string, but got {}",
                type_name(other)
            )))
        }
    };
    match raw.get("textIndexVersion") {
        None => {}
        Some(version) => match tideway_base::bsonutil::as_f64(version) {
            Some(3.0) => {}
            Some(2.0) => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "tideway supports only textIndexVersion 3",
                ))
            }
            Some(other) => {
                return Err(cannot_create(format!(
                    "bad textIndexVersion: {}",
                    other.trunc() as i64
                )))
            }
            None => {
                return Err(CommandError::type_mismatch(format!(
                    "The field 'textIndexVersion' must be a number, but got {}",
                    type_name(version)
                )))
            }
        },
    }
    Ok(TextSpec {
        key: normalized,
        weights: weight_doc,
        default_language,
        language_override,
    })
}

/// The error mongod gives for a second text index (67).
pub(crate) fn second_text_index(existing: &str) -> CommandError {
    cannot_create(format!(
        "only one text index per collection allowed, found existing text index \"{existing}\""
    ))
}

/// Options only text indexes take.
pub(crate) const TEXT_OPTIONS: &[&str] = &[
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
];

/// The spec fields a text index adds after the common ones, in mongod's order.
pub(crate) fn text_spec_fields(text: &TextSpec) -> Document {
    doc! {
        "weights": text.weights.clone(),
        "default_language": text.default_language.as_str(),
        "language_override": text.language_override.as_str(),
        "textIndexVersion": 3,
    }
}
