//! Update documents: parsing `{$set: …}`-style operator updates and whole-document
//! replacements, applying them to a document, and building upsert documents.
//!
//! Invariants:
//! - Parsing rejects what mongod rejects before touching any document: unknown modifiers and
//!   mixed operator/plain fields (FailedToParse 9), overlapping paths across or within operators
//!   (ConflictingUpdateOperators 40), invalid arguments (mongod's per-operator codes).
//! - Applying is all-or-nothing for the caller: `apply` works on the caller's document, but every
//!   error leaves the caller expected to discard it (the server keeps the stored original).
//! - Modifiers apply in field-path order (numeric components numerically), as mongod 5.0+ does,
//!   so new fields are appended in that order regardless of operator order.
//! - `_id` never changes on an existing document: any change is ImmutableField (66).
//!
//! This module does not choose which documents to update, and does no I/O. It is the top of the
//! language: a pipeline-style update runs a [`Pipeline`] of one-document stages (which never
//! uses this module); filters give upserts their equality fields, `arrayFilters` and `$pull`
//! their conditions.

use std::cmp::Ordering;

use bson::{oid::ObjectId, Bson, Document, Timestamp};

use super::collation::CollationChoice;
use super::compare::{
    compare_values_with, identical_documents, identical_values, values_equal_with,
};
use super::expr::PipelineContext;
use super::filter::{ElementMatcher, Filter};
use super::numeric::{apply_arithmetic, zero_like, Arithmetic, Number};
use super::path::{self, array_index};
use super::pipeline::Pipeline;
use super::sort::SortSpec;
use tideway_base::display::{document_string, element_string, type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// What an update needs from its caller besides the document.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateContext {
    /// The value `$currentDate` stores.
    pub now: bson::DateTime,
    /// True while building the document an upsert inserts (enables `$setOnInsert`).
    pub is_upsert_insert: bool,
    /// The array index the filter matched at ([`Filter::match_position`]), for positional `$`.
    pub matched_array_index: Option<usize>,
    /// The statement's collation: `$min`, `$max`, `$addToSet`, `$pull`, `$pullAll` and
    /// `$push`'s `$sort` compare strings under it (`None`: byte order).
    pub collation: CollationChoice,
}

impl UpdateContext {
    pub fn new(now: bson::DateTime) -> UpdateContext {
        UpdateContext {
            now,
            is_upsert_insert: false,
            matched_array_index: None,
            collation: None,
        }
    }
}

/// A parsed update.
#[derive(Clone, Debug)]
pub enum Update {
    /// Replace the whole document (keeping its `_id`).
    Replacement(Document),
    /// Apply modifiers, in field-path order; `$[identifier]` components select the array
    /// elements their array filter matches.
    Operators(Vec<Modifier>, ArrayFilters),
    /// A pipeline-style update (`u: [{$set: …}, …]`): the pipeline's output for the document
    /// replaces it, keeping its `_id` (see [`Pipeline::parse_update`]).
    Pipeline(Box<Pipeline>),
}

/// An update's `arrayFilters`: per identifier, the filter an array element must match for a
/// `$[identifier]` path component to select it. The filter is evaluated against
/// `{identifier: element}`.
pub(crate) type ArrayFilters = Vec<(String, Filter)>;

/// One `{$op: {path: argument}}` entry.
#[derive(Clone, Debug)]
pub struct Modifier {
    operator: &'static str,
    path: Vec<String>,
    action: Action,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BitOperation {
    And,
    Or,
    Xor,
}

#[derive(Clone, Debug)]
enum SortOrder {
    Whole(bool),
    Fields(SortSpec),
}

#[derive(Clone, Debug)]
struct PushSpec {
    values: Vec<Bson>,
    position: Option<i64>,
    slice: Option<i64>,
    sort: Option<SortOrder>,
}

#[derive(Clone, Debug)]
enum Action {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Arithmetic(Arithmetic, Number),
    Min(Bson),
    Max(Bson),
    Rename(Vec<String>),
    CurrentDate { timestamp: bool },
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pull(ElementMatcher),
    PullAll(Vec<Bson>),
    Pop { first: bool },
    Bit(Vec<(BitOperation, Bson)>),
}

const UPDATE_OPERATORS: &[&str] = &[
    "$set",
    "$setOnInsert",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$currentDate",
    "$push",
    "$addToSet",
    "$pull",
    "$pullAll",
    "$pop",
    "$bit",
];

fn failed_to_parse(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::FailedToParse, message)
}

fn bad_value(message: impl Into<String>) -> CommandError {
    CommandError::bad_value(message)
}

fn unknown_modifier(name: &str) -> CommandError {
    failed_to_parse(format!(
        "Unknown modifier: {name}. Expected a valid update modifier or pipeline-style update specified as an array"
    ))
}

fn dollar_prefixed(component: &str, path: &str) -> CommandError {
    CommandError::new(
        ErrorCode::DollarPrefixedFieldName,
        format!(
            "The dollar ($) prefixed field '{component}' in '{path}' is not valid for storage."
        ),
    )
}

fn id_string(document: &Document) -> String {
    match document.get("_id") {
        Some(id) => element_string("_id", id),
        None => "{}".to_string(),
    }
}

impl Update {
    /// Parses an update document. `{}` and documents without `$`-prefixed first field are
    /// replacements.
    pub fn parse(update: &Document) -> CommandResult<Update> {
        Update::parse_with_array_filters(update, Vec::new())
    }

    /// [`Update::parse`] with the statement's parsed `arrayFilters` ([`parse_array_filters`]):
    /// every `$[identifier]` must have a filter and every filter must be used (mongod's 2 and 9).
    pub fn parse_with_array_filters(
        update: &Document,
        array_filters: ArrayFilters,
    ) -> CommandResult<Update> {
        let is_operator_update = update.keys().next().is_some_and(|key| key.starts_with('$'));
        if !is_operator_update {
            if let Some(key) = update.keys().find(|key| key.starts_with('$')) {
                return Err(dollar_prefixed(key, key));
            }
            if let Some((identifier, _)) = array_filters.first() {
                return Err(unused_array_filter(identifier, update));
            }
            return Ok(Update::Replacement(update.clone()));
        }
        let identifiers: Vec<&str> = array_filters
            .iter()
            .map(|(identifier, _)| identifier.as_str())
            .collect();
        let mut modifiers = Vec::new();
        for (operator_name, arguments) in update {
            let Some(operator) = UPDATE_OPERATORS
                .iter()
                .copied()
                .find(|known| *known == operator_name)
            else {
                return Err(unknown_modifier(operator_name));
            };
            let Bson::Document(arguments) = arguments else {
                return Err(failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{operator}: {}}}",
                    type_name(arguments),
                    value_string(arguments)
                )));
            };
            for (field, argument) in arguments {
                let path = parse_update_path(field, &identifiers)?;
                let action = parse_action(operator, field, &path, argument)?;
                modifiers.push(Modifier {
                    operator,
                    path,
                    action,
                });
            }
        }
        check_conflicts(&modifiers)?;
        if let Some(unused) = identifiers.iter().find(|identifier| {
            let component = format!("$[{identifier}]");
            !modifiers
                .iter()
                .any(|modifier| modifier.path.contains(&component))
        }) {
            return Err(unused_array_filter(unused, update));
        }
        Ok(Update::Operators(modifiers, array_filters))
    }

    /// Parses a pipeline-style update (`u: [stage, …]`); `arrayFilters` have no place in one.
    pub fn parse_pipeline(stages: &[Bson], array_filters: &ArrayFilters) -> CommandResult<Update> {
        if !array_filters.is_empty() {
            return Err(failed_to_parse(
                "arrayFilters may not be specified for pipeline-style updates",
            ));
        }
        Ok(Update::Pipeline(Box::new(Pipeline::parse_update(stages)?)))
    }

    /// The dotted paths an operator update may write (`$rename` contributes both of its
    /// paths; positional components appear literally); `None` for replacements, which may
    /// change every field. Lets callers skip index maintenance for untouched fields.
    pub fn touched_paths(&self) -> Option<Vec<String>> {
        let Update::Operators(modifiers, _) = self else {
            return None;
        };
        let mut paths = Vec::new();
        for modifier in modifiers {
            paths.push(modifier.path.join("."));
            if let Action::Rename(target) = &modifier.action {
                paths.push(target.join("."));
            }
        }
        Some(paths)
    }

    /// True for replacement updates.
    pub fn is_replacement(&self) -> bool {
        matches!(self, Update::Replacement(_))
    }

    /// Applies the update in place; returns whether the document changed (byte-for-byte, so a
    /// `$set` of `1.0` over `1` is a change, as in mongod).
    pub fn apply(&self, document: &mut Document, context: &UpdateContext) -> CommandResult<bool> {
        let original = document.clone();
        match self {
            Update::Replacement(replacement) => {
                *document = replace_keeping_id(&original, replacement)?;
            }
            Update::Pipeline(pipeline) => {
                let transformed = pipeline
                    .transform(std::mem::take(document), &PipelineContext::at(context.now))?;
                *document = replace_keeping_id(&original, &transformed)?;
            }
            Update::Operators(modifiers, array_filters) => {
                let mut resolved = Vec::with_capacity(modifiers.len());
                for modifier in modifiers {
                    for concrete in
                        resolve_positional(document, &modifier.path, context, array_filters)?
                    {
                        resolved.push((concrete, modifier));
                    }
                }
                resolved.sort_by(|(a, _), (b, _)| compare_paths(a, b));
                check_resolved_conflicts(&resolved)?;
                for (concrete, modifier) in &resolved {
                    modifier.apply(document, concrete, context)?;
                }
                if let Some(id) = original.get("_id") {
                    if !document
                        .get("_id")
                        .is_some_and(|now| identical_values(now, id))
                    {
                        return Err(CommandError::new(
                            ErrorCode::ImmutableField,
                            "Performing an update on the path '_id' would modify the immutable field '_id'",
                        ));
                    }
                }
            }
        }
        validate_id(document)?;
        Ok(!identical_documents(document, &original))
    }
}

/// Builds the document an upsert inserts: the filter's equality fields (or, for a replacement,
/// only its `_id`), then the update applied as an insert; `_id` is generated if still missing
/// and always placed first.
pub fn upsert_document(
    filter: &Filter,
    update: &Update,
    context: &UpdateContext,
) -> CommandResult<Document> {
    let insert_context = UpdateContext {
        is_upsert_insert: true,
        ..context.clone()
    };
    let mut document = match update {
        Update::Replacement(_) => {
            let mut seed = Document::new();
            if let Some(id) = filter.equality_fields()?.get("_id") {
                seed.insert("_id", id.clone());
            }
            seed
        }
        Update::Operators(..) | Update::Pipeline(_) => filter.equality_fields()?,
    };
    update.apply(&mut document, &insert_context)?;
    let id = document
        .remove("_id")
        .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut with_id_first = Document::new();
    with_id_first.insert("_id", id);
    with_id_first.extend(document);
    validate_id(&with_id_first)?;
    Ok(with_id_first)
}

fn validate_id(document: &Document) -> CommandResult<()> {
    match document.get("_id") {
        Some(Bson::Array(_)) => Err(CommandError::new(
            ErrorCode::InvalidIdField,
            "The '_id' value cannot be of type array",
        )),
        _ => Ok(()),
    }
}

fn replace_keeping_id(original: &Document, replacement: &Document) -> CommandResult<Document> {
    let mut result = Document::new();
    match (original.get("_id"), replacement.get("_id")) {
        (Some(old), Some(new)) if !identical_values(old, new) => {
            return Err(CommandError::new(
                ErrorCode::ImmutableField,
                format!(
                    "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {}",
                    value_string(new)
                ),
            ))
        }
        (Some(id), _) | (None, Some(id)) => {
            result.insert("_id", id.clone());
        }
        (None, None) => {}
    }
    for (name, value) in replacement {
        if name != "_id" {
            result.insert(name.clone(), value.clone());
        }
    }
    Ok(result)
}

/// Parses a statement's `arrayFilters` with mongod's rules and errors: each filter names one
/// identifier (an alphanumeric string starting with a lowercase letter) in all its top-level
/// fields (through `$and`/`$or`/`$nor`), and no two filters name the same one.
pub fn parse_array_filters(filters: &[Bson]) -> CommandResult<ArrayFilters> {
    let mut parsed: ArrayFilters = Vec::with_capacity(filters.len());
    for (index, filter) in filters.iter().enumerate() {
        let Bson::Document(filter) = filter else {
            return Err(CommandError::new(
                ErrorCode::TypeMismatch,
                format!(
                    "BSON field 'arrayFilters.{index}' is the wrong type '{}', expected type 'object'",
                    type_name(filter)
                ),
            ));
        };
        let in_filter = |error: CommandError| error.caused("Error parsing array filter");
        let mut identifier: Option<String> = None;
        array_filter_identifier(filter, &mut identifier).map_err(in_filter)?;
        let Some(identifier) = identifier else {
            return Err(failed_to_parse(
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        let mut characters = identifier.chars();
        let well_formed = characters
            .next()
            .is_some_and(|first| first.is_ascii_lowercase())
            && characters.all(|c| c.is_ascii_alphanumeric());
        if !well_formed {
            return Err(in_filter(bad_value(format!(
                "The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{identifier}'"
            ))));
        }
        if parsed.iter().any(|(known, _)| *known == identifier) {
            return Err(failed_to_parse(format!(
                "Found multiple array filters with the same top-level field name {identifier}"
            )));
        }
        let compiled = Filter::parse(filter).map_err(in_filter)?;
        parsed.push((identifier, compiled));
    }
    Ok(parsed)
}

/// Finds the one identifier an array filter's top-level fields name (`i` in `{"i.a": 1}`).
fn array_filter_identifier(filter: &Document, found: &mut Option<String>) -> CommandResult<()> {
    for (name, value) in filter {
        match name.as_str() {
            "$and" | "$or" | "$nor" => {
                if let Bson::Array(branches) = value {
                    for branch in branches {
                        if let Bson::Document(branch) = branch {
                            array_filter_identifier(branch, found)?;
                        }
                    }
                }
            }
            operator if operator.starts_with('$') => {}
            field => {
                let identifier = field.split('.').next().unwrap_or_default();
                match found {
                    None => *found = Some(identifier.to_string()),
                    Some(known) if known != identifier => {
                        return Err(failed_to_parse(format!(
                            "Expected a single top-level field name, found '{known}' and '{identifier}'"
                        )))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(())
}

fn unused_array_filter(identifier: &str, update: &Document) -> CommandError {
    failed_to_parse(format!(
        "The array filter for identifier '{identifier}' was not used in the update {}",
        value_string(&Bson::Document(update.clone()))
    ))
}

/// Two modifiers resolved to the same field, or to a field and one inside it (possible only
/// through array filters or `$[]`): mongod's 40.
fn check_resolved_conflicts(resolved: &[(Vec<String>, &Modifier)]) -> CommandResult<()> {
    for pair in resolved.windows(2) {
        let (earlier, later) = (&pair[0].0, &pair[1].0);
        if later.starts_with(earlier) {
            return Err(CommandError::new(
                ErrorCode::ConflictingUpdateOperators,
                format!("Update created a conflict at '{}'", earlier.join(".")),
            ));
        }
    }
    Ok(())
}

fn parse_update_path(field: &str, identifiers: &[&str]) -> CommandResult<Vec<String>> {
    if field.is_empty() {
        return Err(CommandError::new(
            ErrorCode::EmptyFieldName,
            "An empty update path is not valid.",
        ));
    }
    let parts = path::split_path(field);
    for part in &parts {
        if part.is_empty() {
            return Err(CommandError::new(
                ErrorCode::EmptyFieldName,
                format!(
                    "The update path '{field}' contains an empty field name, which is not allowed."
                ),
            ));
        }
        if let Some(identifier) = part
            .strip_prefix("$[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            if !identifier.is_empty() && !identifiers.contains(&identifier) {
                return Err(bad_value(format!(
                    "No array filter found for identifier '{identifier}' in path '{field}'"
                )));
            }
        } else if part.starts_with('$') && part != "$" {
            return Err(dollar_prefixed(part, field));
        }
    }
    if parts.iter().filter(|part| part.as_str() == "$").count() > 1 {
        return Err(bad_value(format!(
            "Too many positional (i.e. '$') elements found in path '{field}'"
        )));
    }
    Ok(parts)
}

fn integral(value: &Bson) -> Option<i64> {
    Number::from_bson(value).and_then(Number::to_exact_i64)
}

fn parse_action(
    operator: &str,
    field: &str,
    path: &[String],
    argument: &Bson,
) -> CommandResult<Action> {
    let numeric = |verb: &str| -> CommandResult<Number> {
        Number::from_bson(argument).ok_or_else(|| {
            CommandError::type_mismatch(format!(
                "Cannot {verb} with non-numeric argument: {}",
                element_string(field, argument)
            ))
        })
    };
    Ok(match operator {
        "$set" => Action::Set(argument.clone()),
        "$setOnInsert" => Action::SetOnInsert(argument.clone()),
        "$unset" => Action::Unset,
        "$inc" => Action::Arithmetic(Arithmetic::Add, numeric("increment")?),
        "$mul" => Action::Arithmetic(Arithmetic::Multiply, numeric("multiply")?),
        "$min" => Action::Min(argument.clone()),
        "$max" => Action::Max(argument.clone()),
        "$rename" => Action::Rename(parse_rename(field, path, argument)?),
        "$currentDate" => parse_current_date(argument)?,
        "$push" => Action::Push(parse_push(argument)?),
        "$addToSet" => Action::AddToSet(parse_add_to_set(argument)?),
        "$pull" => Action::Pull(ElementMatcher::parse(argument)?),
        "$pullAll" => match argument {
            Bson::Array(values) => Action::PullAll(values.clone()),
            other => {
                return Err(bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        "$pop" => match integral(argument) {
            Some(1) => Action::Pop { first: false },
            Some(-1) => Action::Pop { first: true },
            _ => {
                return Err(failed_to_parse(format!(
                    "$pop expects 1 or -1, found: {}",
                    value_string(argument)
                )))
            }
        },
        "$bit" => Action::Bit(parse_bit(argument)?),
        other => return Err(unknown_modifier(other)),
    })
}

fn parse_rename(field: &str, source: &[String], argument: &Bson) -> CommandResult<Vec<String>> {
    let Bson::String(target) = argument else {
        return Err(bad_value(format!(
            "The 'to' field for $rename must be a string: {}",
            element_string(field, argument)
        )));
    };
    let target_path = parse_update_path(target, &[])?;
    let is_dynamic = |parts: &[String]| parts.iter().any(|part| part.starts_with('$'));
    if is_dynamic(source) {
        return Err(bad_value(format!(
            "The source field for $rename may not be dynamic: {field}"
        )));
    }
    if is_dynamic(&target_path) {
        return Err(bad_value(format!(
            "The destination field for $rename may not be dynamic: {target}"
        )));
    }
    if target_path == source {
        return Err(bad_value(format!(
            "The source and target field for $rename must differ: {}",
            element_string(field, argument)
        )));
    }
    if target_path.starts_with(source) || source.starts_with(&target_path) {
        return Err(bad_value(format!(
            "The source and target field for $rename must not be on the same path: {}",
            element_string(field, argument)
        )));
    }
    Ok(target_path)
}

fn parse_current_date(argument: &Bson) -> CommandResult<Action> {
    match argument {
        Bson::Boolean(_) => Ok(Action::CurrentDate { timestamp: false }),
        Bson::Document(spec) => {
            if spec.len() != 1 || !spec.contains_key("$type") {
                return Err(bad_value(
                    "The only valid field of the option is '$type': {$currentDate: {field : {$type: 'date/timestamp'}}}",
                ));
            }
            match spec.get("$type") {
                Some(Bson::String(kind)) if kind == "date" => Ok(Action::CurrentDate { timestamp: false }),
                Some(Bson::String(kind)) if kind == "timestamp" => Ok(Action::CurrentDate { timestamp: true }),
                _ => Err(bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )),
            }
        }
        other => Err(bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ))),
    }
}

fn parse_push(argument: &Bson) -> CommandResult<PushSpec> {
    let plain = PushSpec {
        values: vec![argument.clone()],
        position: None,
        slice: None,
        sort: None,
    };
    let Bson::Document(spec) = argument else {
        return Ok(plain);
    };
    if !spec.contains_key("$each") {
        return Ok(plain);
    }
    let mut push = PushSpec {
        values: Vec::new(),
        ..plain
    };
    for (clause, value) in spec {
        match clause.as_str() {
            "$each" => match value {
                Bson::Array(values) => push.values = values.clone(),
                other => {
                    return Err(bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_name(other)
                    )))
                }
            },
            "$slice" => {
                push.slice = Some(integral(value).ok_or_else(|| {
                    bad_value(format!(
                        "The value for $slice must be an integral value but was given type: {}",
                        type_name(value)
                    ))
                })?)
            }
            "$position" => {
                push.position = Some(integral(value).ok_or_else(|| {
                    bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        type_name(value)
                    ))
                })?)
            }
            "$sort" => push.sort = Some(parse_push_sort(value)?),
            other => return Err(bad_value(format!("Unrecognized clause in $push: {other}"))),
        }
    }
    Ok(push)
}

fn parse_push_sort(value: &Bson) -> CommandResult<SortOrder> {
    let invalid = || {
        bad_value("The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields")
    };
    match value {
        Bson::Document(spec) => {
            if spec.is_empty() {
                return Err(invalid());
            }
            SortSpec::parse(spec)
                .map(SortOrder::Fields)
                .map_err(|_| invalid())
        }
        other => match integral(other) {
            Some(1) => Ok(SortOrder::Whole(true)),
            Some(-1) => Ok(SortOrder::Whole(false)),
            _ => Err(invalid()),
        },
    }
}

fn parse_add_to_set(argument: &Bson) -> CommandResult<Vec<Bson>> {
    match argument {
        Bson::Document(spec) if spec.keys().next().is_some_and(|key| key == "$each") => {
            if spec.len() > 1 {
                return Err(bad_value(format!(
                    "Found unexpected fields after $each in $addToSet: {}",
                    document_string(spec)
                )));
            }
            match spec.get("$each") {
                Some(Bson::Array(values)) => Ok(values.clone()),
                other => Err(CommandError::type_mismatch(format!(
                    "The argument to $each in $addToSet must be an array but it was of type {}",
                    other.map_or("missing", type_name)
                ))),
            }
        }
        single => Ok(vec![single.clone()]),
    }
}

fn parse_bit(argument: &Bson) -> CommandResult<Vec<(BitOperation, Bson)>> {
    let Bson::Document(spec) = argument else {
        return Err(bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(argument)
        )));
    };
    let mut operations = Vec::new();
    for (name, operand) in spec {
        let operation = match name.as_str() {
            "and" => BitOperation::And,
            "or" => BitOperation::Or,
            "xor" => BitOperation::Xor,
            other => {
                return Err(bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{other}' which is an unknown operator: {}",
                    element_string(other, operand)
                )))
            }
        };
        if !matches!(operand, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {}",
                type_name(operand),
                element_string(name, operand)
            )));
        }
        operations.push((operation, operand.clone()));
    }
    if operations.is_empty() {
        return Err(bad_value(
            "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}}",
        ));
    }
    Ok(operations)
}

/// Paths whose components are equal up to the shorter one's length overlap.
fn check_conflicts(modifiers: &[Modifier]) -> CommandResult<()> {
    let mut seen: Vec<&[String]> = Vec::new();
    for modifier in modifiers {
        let mut touched: Vec<&[String]> = vec![&modifier.path];
        if let Action::Rename(target) = &modifier.action {
            touched.push(target);
        }
        for path in touched {
            for earlier in &seen {
                let shared = earlier
                    .iter()
                    .zip(path.iter())
                    .take_while(|(a, b)| a == b)
                    .count();
                if shared == earlier.len() || shared == path.len() {
                    return Err(CommandError::new(
                        ErrorCode::ConflictingUpdateOperators,
                        format!(
                            "Updating the path '{}' would create a conflict at '{}'",
                            path.join("."),
                            path[..shared].join(".")
                        ),
                    ));
                }
            }
            seen.push(path);
        }
    }
    Ok(())
}

/// mongod's field-name order for applying modifiers: numeric components numerically.
fn compare_paths(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let order = match (array_index(x), array_index(y)) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => x.as_bytes().cmp(y.as_bytes()),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// Replaces `$` with the matched array index, expands `$[]` over the array present and
/// `$[identifier]` over the elements its array filter matches.
fn resolve_positional(
    document: &Document,
    pattern: &[String],
    context: &UpdateContext,
    array_filters: &ArrayFilters,
) -> CommandResult<Vec<Vec<String>>> {
    let mut resolved: Vec<Vec<String>> = vec![Vec::new()];
    for part in pattern {
        match part.as_str() {
            "$" => {
                let index = context.matched_array_index.ok_or_else(|| {
                    bad_value(
                        "The positional operator did not find the match needed from the query.",
                    )
                })?;
                resolved
                    .iter_mut()
                    .for_each(|prefix| prefix.push(index.to_string()));
            }
            all_or_filtered if all_or_filtered.starts_with("$[") => {
                let identifier = &all_or_filtered[2..all_or_filtered.len() - 1];
                let filter = array_filters
                    .iter()
                    .find(|(known, _)| known == identifier)
                    .map(|(_, filter)| filter);
                let mut expanded = Vec::new();
                for prefix in resolved {
                    match path::get_path(document, &prefix) {
                        Some(Bson::Array(elements)) => {
                            for (index, element) in elements.iter().enumerate() {
                                let selected = filter.is_none_or(|filter| {
                                    let mut bound = Document::new();
                                    bound.insert(identifier, element.clone());
                                    filter.matches(&bound)
                                });
                                if selected {
                                    let mut concrete = prefix.clone();
                                    concrete.push(index.to_string());
                                    expanded.push(concrete);
                                }
                            }
                        }
                        Some(other) => {
                            let name = prefix.last().map_or("", String::as_str);
                            return Err(bad_value(format!(
                                "Cannot apply array updates to non-array element {}",
                                element_string(name, other)
                            )));
                        }
                        None => {
                            return Err(bad_value(format!(
                                "The path '{}' must exist in the document in order to apply array updates.",
                                prefix.join(".")
                            )))
                        }
                    }
                }
                resolved = expanded;
            }
            literal => resolved
                .iter_mut()
                .for_each(|prefix| prefix.push(literal.to_string())),
        }
    }
    Ok(resolved)
}

/// The value at `path`, rejecting paths that run through arrays (used by `$rename`).
fn get_without_arrays<'a>(
    document: &'a Document,
    path: &[String],
    role: &str,
) -> CommandResult<Option<&'a Bson>> {
    for end in 1..path.len() {
        if let Some(Bson::Array(_)) = path::get_path(document, &path[..end]) {
            return Err(bad_value(format!(
                "The {role} field cannot be an array element, '{}' in doc with {} being an array",
                path.join("."),
                path[..end].join(".")
            )));
        }
    }
    Ok(path::get_path(document, path))
}

impl Modifier {
    fn apply(
        &self,
        document: &mut Document,
        path: &[String],
        context: &UpdateContext,
    ) -> CommandResult<()> {
        let field = path.join(".");
        match &self.action {
            Action::Set(value) => path::set_path(document, path, value.clone()),
            Action::SetOnInsert(value) => {
                if context.is_upsert_insert {
                    path::set_path(document, path, value.clone())?;
                }
                Ok(())
            }
            Action::Unset => {
                path::remove_path(document, path);
                Ok(())
            }
            Action::Arithmetic(operation, operand) => {
                let current = path::get_path(document, path);
                let result = match current {
                    None => match operation {
                        Arithmetic::Add => *operand,
                        Arithmetic::Multiply => zero_like(*operand),
                    },
                    Some(value) => {
                        let Some(number) = Number::from_bson(value) else {
                            return Err(CommandError::type_mismatch(format!(
                                "Cannot apply {} to a value of non-numeric type. {} has the field '{}' of non-numeric type {}",
                                self.operator,
                                id_string(document),
                                path.last().map_or("", String::as_str),
                                type_name(value)
                            )));
                        };
                        apply_arithmetic(*operation, number, *operand).ok_or_else(|| {
                            bad_value(format!(
                                "Failed to apply {} operations to current value ({}) for document {}",
                                self.operator,
                                value_string(value),
                                id_string(document)
                            ))
                        })?
                    }
                };
                let value = result.into_bson().ok_or_else(|| {
                    bad_value(format!(
                        "Result of {} on '{field}' is out of the Decimal128 range",
                        self.operator
                    ))
                })?;
                path::set_path(document, path, value)
            }
            Action::Min(value) | Action::Max(value) => {
                let wanted = if matches!(self.action, Action::Min(_)) {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
                let replace = path::get_path(document, path).is_none_or(|current| {
                    compare_values_with(value, current, context.collation.as_deref()) == wanted
                });
                if replace {
                    path::set_path(document, path, value.clone())?;
                }
                Ok(())
            }
            Action::Rename(target) => {
                let Some(value) = get_without_arrays(document, path, "source")?.cloned() else {
                    return Ok(());
                };
                get_without_arrays(document, target, "destination")?;
                path::remove_path(document, path);
                path::set_path(document, target, value)
            }
            Action::CurrentDate { timestamp } => {
                let value = if *timestamp {
                    let seconds = context.now.timestamp_millis().div_euclid(1000);
                    Bson::Timestamp(Timestamp {
                        time: u32::try_from(seconds).unwrap_or(0),
                        increment: 1,
                    })
                } else {
                    Bson::DateTime(context.now)
                };
                path::set_path(document, path, value)
            }
            Action::Push(spec) => {
                let mut elements = self.existing_array(document, path, |value| {
                    format!(
                        "The field '{field}' must be an array but is of type {} in document {}",
                        type_name(value),
                        id_string(document)
                    )
                })?;
                push_values(&mut elements, spec, &context.collation);
                path::set_path(document, path, Bson::Array(elements))
            }
            Action::AddToSet(values) => {
                let mut elements = self.existing_array(document, path, |value| {
                    format!(
                        "Cannot apply $addToSet to non-array field. Field named '{}' has non-array type {}",
                        path.last().map_or("", String::as_str),
                        type_name(value)
                    )
                })?;
                let collation = context.collation.as_deref();
                for value in values {
                    if !elements
                        .iter()
                        .any(|element| values_equal_with(element, value, collation))
                    {
                        elements.push(value.clone());
                    }
                }
                path::set_path(document, path, Bson::Array(elements))
            }
            Action::Pull(_) | Action::PullAll(_) => {
                let Some(current) = path::get_path(document, path) else {
                    return Ok(());
                };
                let Bson::Array(elements) = current else {
                    return Err(bad_value("Cannot apply $pull to a non-array value"));
                };
                let collation = context.collation.as_deref();
                let kept: Vec<Bson> = elements
                    .iter()
                    .filter(|element| match &self.action {
                        Action::Pull(condition) => !condition.matches_with(element, collation),
                        Action::PullAll(values) => !values
                            .iter()
                            .any(|value| values_equal_with(element, value, collation)),
                        _ => true,
                    })
                    .cloned()
                    .collect();
                if kept.len() != elements.len() {
                    path::set_path(document, path, Bson::Array(kept))?;
                }
                Ok(())
            }
            Action::Pop { first } => {
                let Some(current) = path::get_path_mut(document, path) else {
                    return Ok(());
                };
                let Bson::Array(elements) = current else {
                    return Err(CommandError::type_mismatch(format!(
                        "Path '{field}' contains an element of non-array type '{}'",
                        type_name(current)
                    )));
                };
                if !elements.is_empty() {
                    if *first {
                        elements.remove(0);
                    } else {
                        elements.pop();
                    }
                }
                Ok(())
            }
            Action::Bit(operations) => {
                let mut result = match path::get_path(document, path) {
                    None => Bson::Int32(0),
                    Some(value @ (Bson::Int32(_) | Bson::Int64(_))) => value.clone(),
                    Some(other) => {
                        return Err(bad_value(format!(
                            "Cannot apply $bit to a value of non-integral type.{} has the field {} of non-integer type {}",
                            id_string(document),
                            path.last().map_or("", String::as_str),
                            type_name(other)
                        )))
                    }
                };
                for (operation, operand) in operations {
                    result = apply_bit(*operation, &result, operand);
                }
                path::set_path(document, path, result)
            }
        }
    }

    /// The array at `path` (empty if missing), or BadValue with `describe`'s message.
    fn existing_array(
        &self,
        document: &Document,
        path: &[String],
        describe: impl Fn(&Bson) -> String,
    ) -> CommandResult<Vec<Bson>> {
        match path::get_path(document, path) {
            None => Ok(Vec::new()),
            Some(Bson::Array(elements)) => Ok(elements.clone()),
            Some(other) => Err(bad_value(describe(other))),
        }
    }
}

fn apply_bit(operation: BitOperation, current: &Bson, operand: &Bson) -> Bson {
    let combine = |x: i64, y: i64| match operation {
        BitOperation::And => x & y,
        BitOperation::Or => x | y,
        BitOperation::Xor => x ^ y,
    };
    match (current, operand) {
        (Bson::Int32(x), Bson::Int32(y)) => Bson::Int32(match operation {
            BitOperation::And => x & y,
            BitOperation::Or => x | y,
            BitOperation::Xor => x ^ y,
        }),
        (x, y) => {
            let widen = |value: &Bson| match value {
                Bson::Int32(v) => i64::from(*v),
                Bson::Int64(v) => *v,
                _ => 0,
            };
            Bson::Int64(combine(widen(x), widen(y)))
        }
    }
}

fn push_values(elements: &mut Vec<Bson>, spec: &PushSpec, collation: &CollationChoice) {
    let length = elements.len() as i64;
    let insert_at = match spec.position {
        None => elements.len(),
        Some(position) if position >= 0 => position.min(length) as usize,
        Some(position) => (length + position).max(0) as usize,
    };
    elements.splice(insert_at..insert_at, spec.values.iter().cloned());
    match &spec.sort {
        None => {}
        Some(SortOrder::Whole(ascending)) => elements.sort_by(|a, b| {
            let order = compare_values_with(a, b, collation.as_deref());
            if *ascending {
                order
            } else {
                order.reverse()
            }
        }),
        Some(SortOrder::Fields(sort)) => {
            let sort = sort.clone().with_collation(collation.clone());
            let empty = Document::new();
            elements.sort_by(|a, b| {
                let a = a.as_document().unwrap_or(&empty);
                let b = b.as_document().unwrap_or(&empty);
                sort.compare(a, b)
            });
        }
    }
    if let Some(slice) = spec.slice {
        let length = elements.len();
        let keep = slice.unsigned_abs().min(length as u64) as usize;
        if slice >= 0 {
            elements.truncate(keep);
        } else {
            elements.drain(..length - keep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::fixtures::decimal;
    use bson::doc;

    fn context() -> UpdateContext {
        UpdateContext::new(bson::DateTime::from_millis(1_700_000_000_000))
    }

    fn parse(update: Document) -> Update {
        Update::parse(&update).expect("valid test update")
    }

    fn applied(document: Document, update: Document) -> Document {
        let mut document = document;
        parse(update)
            .apply(&mut document, &context())
            .expect("update applies");
        document
    }

    fn apply_error(document: Document, update: Document) -> CommandError {
        let mut document = document;
        parse(update)
            .apply(&mut document, &context())
            .expect_err("update should fail")
    }

    #[track_caller]
    fn assert_same(actual: Document, expected: Document) {
        assert!(
            identical_documents(&actual, &expected),
            "{actual:?} != {expected:?}"
        );
    }

    fn parse_error(update: Document) -> CommandError {
        Update::parse(&update).expect_err("update should be rejected")
    }

    #[test]
    fn empty_update_is_an_empty_replacement() {
        let mut document = doc! {"_id": 1, "a": 1};
        let changed = parse(doc! {})
            .apply(&mut document, &context())
            .expect("applies");
        assert!(changed);
        assert_same(document, doc! {"_id": 1});
    }

    #[test]
    fn replacement_keeps_original_id_first() {
        assert_same(
            applied(doc! {"_id": 1, "a": 1}, doc! {"b": 2}),
            doc! {"_id": 1, "b": 2},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": 1}, doc! {"b": 2, "_id": 1}),
            doc! {"_id": 1, "b": 2},
        );
    }

    #[test]
    fn replacement_changing_id_is_immutable_field() {
        let error = apply_error(doc! {"_id": 1}, doc! {"_id": 2});
        assert_eq!(error.code, ErrorCode::ImmutableField);
        assert_eq!(error.errmsg, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2");
    }

    #[test]
    fn replacement_with_dollar_field_is_rejected() {
        let error = parse_error(doc! {"a": 1, "$set": {"b": 1}});
        assert_eq!(error.code, ErrorCode::DollarPrefixedFieldName);
    }

    #[test]
    fn mixing_operators_and_fields_is_unknown_modifier() {
        let error = parse_error(doc! {"$set": {"a": 1}, "b": 2});
        assert_eq!(error.code, ErrorCode::FailedToParse);
        assert_eq!(error.errmsg, "Unknown modifier: b. Expected a valid update modifier or pipeline-style update specified as an array");
        assert_eq!(parse_error(doc! {"$foo": {"a": 1}}).errmsg, "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array");
    }

    #[test]
    fn operator_argument_must_be_a_document() {
        let error = parse_error(doc! {"$set": 1});
        assert_eq!(error.code, ErrorCode::FailedToParse);
        assert!(error
            .errmsg
            .starts_with("Modifiers operate on fields but we found type int instead"));
    }

    #[test]
    fn empty_operator_document_is_a_no_op() {
        let mut document = doc! {"_id": 1};
        assert!(!parse(doc! {"$set": {}})
            .apply(&mut document, &context())
            .expect("applies"));
    }

    #[test]
    fn overlapping_paths_conflict() {
        let error = parse_error(doc! {"$set": {"a": 1}, "$inc": {"a": 1}});
        assert_eq!(error.code, ErrorCode::ConflictingUpdateOperators);
        assert_eq!(
            error.errmsg,
            "Updating the path 'a' would create a conflict at 'a'"
        );
        let error = parse_error(doc! {"$set": {"a.b": 1, "a": 1}});
        assert_eq!(
            error.errmsg,
            "Updating the path 'a' would create a conflict at 'a'"
        );
        let error = parse_error(doc! {"$set": {"a": 1}, "$unset": {"a.b.c": 1}});
        assert_eq!(
            error.errmsg,
            "Updating the path 'a.b.c' would create a conflict at 'a'"
        );
        assert!(Update::parse(&doc! {"$set": {"a.b": 1, "a.c": 1, "ab": 1}}).is_ok());
        assert_eq!(
            parse_error(doc! {"$rename": {"a": "b"}, "$set": {"b.c": 1}}).code,
            ErrorCode::ConflictingUpdateOperators
        );
    }

    #[test]
    fn invalid_paths_are_rejected() {
        assert_eq!(
            parse_error(doc! {"$set": {"": 1}}).code,
            ErrorCode::EmptyFieldName
        );
        assert_eq!(
            parse_error(doc! {"$set": {"a..b": 1}}).errmsg,
            "The update path 'a..b' contains an empty field name, which is not allowed."
        );
        assert_eq!(
            parse_error(doc! {"$set": {"a.$x": 1}}).code,
            ErrorCode::DollarPrefixedFieldName
        );
    }

    #[test]
    fn set_creates_and_overwrites_fields_in_path_order() {
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$set": {"b": 1, "a.c": 2}}),
            doc! {"_id": 1, "a": {"c": 2}, "b": 1},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": [1, 2]}, doc! {"$set": {"a.1": 5}}),
            doc! {"_id": 1, "a": [1, 5]},
        );
        assert_eq!(
            applied(
                doc! {"_id": 1, "a": [0]},
                doc! {"$set": {"a.10": 1, "a.2": 1}}
            )
            .get_array("a")
            .map(Vec::len)
            .ok(),
            Some(11)
        );
    }

    #[test]
    fn set_through_scalar_is_path_not_viable() {
        let error = apply_error(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a.b": 1}});
        assert_eq!(error.code, ErrorCode::PathNotViable);
        assert_eq!(error.errmsg, "Cannot create field 'b' in element {a: 1}");
    }

    #[test]
    fn changed_reports_byte_level_changes() {
        let mut document = doc! {"_id": 1, "a": 1};
        assert!(!parse(doc! {"$set": {"a": 1}})
            .apply(&mut document, &context())
            .expect("applies"));
        assert!(parse(doc! {"$set": {"a": 1.0}})
            .apply(&mut document, &context())
            .expect("applies"));
    }

    #[test]
    fn unset_removes_fields_and_nulls_array_elements() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": 1, "b": [1, 2]},
                doc! {"$unset": {"a": "", "b.0": 1, "c": 1}},
            ),
            doc! {"_id": 1, "b": [null, 2]},
        );
    }

    #[test]
    fn inc_adds_and_creates_fields() {
        assert_same(
            applied(doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 2, "b": 1.5}}),
            doc! {"_id": 1, "a": 3, "b": 1.5},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 0.5}}),
            doc! {"_id": 1, "a": 1.5},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": 1_i64}, doc! {"$inc": {"a": 1}}),
            doc! {"_id": 1, "a": 2_i64},
        );
    }

    #[test]
    fn inc_overflowing_int32_promotes_to_int64() {
        assert_same(
            applied(doc! {"_id": 1, "a": i32::MAX}, doc! {"$inc": {"a": 1}}),
            doc! {"_id": 1, "a": i64::from(i32::MAX) + 1},
        );
        let error = apply_error(doc! {"_id": 1, "a": i64::MAX}, doc! {"$inc": {"a": 1}});
        assert_eq!(error.code, ErrorCode::BadValue);
    }

    #[test]
    fn inc_on_non_numeric_is_type_mismatch() {
        let error = apply_error(doc! {"_id": 1, "a": "x"}, doc! {"$inc": {"a": 1}});
        assert_eq!(error.code, ErrorCode::TypeMismatch);
        assert_eq!(error.errmsg, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string");
        let error = parse_error(doc! {"$inc": {"a": "1"}});
        assert_eq!(error.code, ErrorCode::TypeMismatch);
        assert_eq!(
            error.errmsg,
            "Cannot increment with non-numeric argument: {a: \"1\"}"
        );
    }

    #[test]
    fn inc_on_decimal_is_exact() {
        let document = applied(
            doc! {"_id": 1, "a": decimal("0.1")},
            doc! {"$inc": {"a": decimal("0.2")}},
        );
        assert_eq!(document.get("a"), Some(&decimal("0.3")));
    }

    #[test]
    fn mul_multiplies_and_missing_becomes_typed_zero() {
        assert_same(
            applied(doc! {"_id": 1, "a": 3}, doc! {"$mul": {"a": 4, "b": 2_i64}}),
            doc! {"_id": 1, "a": 12, "b": 0_i64},
        );
    }

    #[test]
    fn min_and_max_use_bson_order() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": 5, "b": 5},
                doc! {"$min": {"a": 3}, "$max": {"b": 3}},
            ),
            doc! {"_id": 1, "a": 3, "b": 5},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": 5}, doc! {"$max": {"a": "x", "c": 1}}),
            doc! {"_id": 1, "a": "x", "c": 1},
        );
    }

    #[test]
    fn rename_moves_values_and_validates_targets() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": 1, "b": 2},
                doc! {"$rename": {"a": "c.d"}},
            ),
            doc! {"_id": 1, "b": 2, "c": {"d": 1}},
        );
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$rename": {"a": "b"}}),
            doc! {"_id": 1},
        );
        assert_eq!(
            parse_error(doc! {"$rename": {"a": 1}}).errmsg,
            "The 'to' field for $rename must be a string: {a: 1}"
        );
        assert_eq!(
            parse_error(doc! {"$rename": {"a": "a"}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            parse_error(doc! {"$rename": {"a": "a.b"}}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            apply_error(
                doc! {"_id": 1, "a": [{"b": 1}]},
                doc! {"$rename": {"a.0.b": "c"}}
            )
            .code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn current_date_sets_date_or_timestamp() {
        let document = applied(
            doc! {"_id": 1},
            doc! {"$currentDate": {"a": true, "b": {"$type": "timestamp"}}},
        );
        assert_eq!(
            document.get("a"),
            Some(&Bson::DateTime(bson::DateTime::from_millis(
                1_700_000_000_000
            )))
        );
        assert_eq!(
            document.get("b"),
            Some(&Bson::Timestamp(Timestamp {
                time: 1_700_000_000,
                increment: 1
            }))
        );
        assert_eq!(
            parse_error(doc! {"$currentDate": {"a": {"$type": "x"}}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn set_on_insert_only_applies_to_upsert_inserts() {
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$setOnInsert": {"a": 1}}),
            doc! {"_id": 1},
        );
        let filter = Filter::parse(&doc! {"_id": 7, "k": "v"}).expect("filter");
        let document = upsert_document(
            &filter,
            &parse(doc! {"$setOnInsert": {"a": 1}, "$set": {"b": 2}}),
            &context(),
        )
        .expect("upsert");
        assert_same(document, doc! {"_id": 7, "k": "v", "a": 1, "b": 2});
    }

    #[test]
    fn modifying_id_is_immutable_field() {
        let error = apply_error(doc! {"_id": 1}, doc! {"$set": {"_id": 2}});
        assert_eq!(error.code, ErrorCode::ImmutableField);
        assert_eq!(
            error.errmsg,
            "Performing an update on the path '_id' would modify the immutable field '_id'"
        );
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$set": {"_id": 1}}),
            doc! {"_id": 1},
        );
    }

    #[test]
    fn push_appends_and_creates_arrays() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1]},
                doc! {"$push": {"a": 2, "b": [3]}},
            ),
            doc! {"_id": 1, "a": [1, 2], "b": [[3]]},
        );
        let error = apply_error(doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 2}});
        assert_eq!(error.code, ErrorCode::BadValue);
        assert_eq!(
            error.errmsg,
            "The field 'a' must be an array but is of type int in document {_id: 1}"
        );
    }

    #[test]
    fn push_each_with_position_sort_and_slice() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1, 2]},
                doc! {"$push": {"a": {"$each": [9, 8], "$position": 1}}},
            ),
            doc! {"_id": 1, "a": [1, 9, 8, 2]},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1, 2]},
                doc! {"$push": {"a": {"$each": [0], "$position": -1}}},
            ),
            doc! {"_id": 1, "a": [1, 0, 2]},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [5, 1]},
                doc! {"$push": {"a": {"$each": [3], "$sort": 1, "$slice": 2}}},
            ),
            doc! {"_id": 1, "a": [1, 3]},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [5, 1]},
                doc! {"$push": {"a": {"$each": [3], "$slice": -2}}},
            ),
            doc! {"_id": 1, "a": [1, 3]},
        );
        assert_eq!(
            applied(
                doc! {"_id": 1, "a": [{"s": 2}, {"s": 1}]},
                doc! {"$push": {"a": {"$each": [{"s": 3}], "$sort": {"s": -1}}}}
            ),
            doc! {"_id": 1, "a": [{"s": 3}, {"s": 2}, {"s": 1}]}
        );
        assert_eq!(
            parse_error(doc! {"$push": {"a": {"$each": 1}}}).errmsg,
            "The argument to $each in $push must be an array but it was of type: int"
        );
        assert_eq!(
            parse_error(doc! {"$push": {"a": {"$each": [], "$bogus": 1}}}).errmsg,
            "Unrecognized clause in $push: $bogus"
        );
        assert_eq!(
            parse_error(doc! {"$push": {"a": {"$each": [], "$sort": 0}}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn add_to_set_skips_equal_values() {
        assert_same(
            applied(doc! {"_id": 1, "a": [1]}, doc! {"$addToSet": {"a": 1.0}}),
            doc! {"_id": 1, "a": [1]},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1]},
                doc! {"$addToSet": {"a": {"$each": [2, 2, 3]}}},
            ),
            doc! {"_id": 1, "a": [1, 2, 3]},
        );
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$addToSet": {"a": {"b": 1}}}),
            doc! {"_id": 1, "a": [{"b": 1}]},
        );
        assert_eq!(
            apply_error(doc! {"_id": 1, "a": 1}, doc! {"$addToSet": {"a": 1}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn pull_removes_matching_elements() {
        assert_same(
            applied(doc! {"_id": 1, "a": [1, 2, 3, 1]}, doc! {"$pull": {"a": 1}}),
            doc! {"_id": 1, "a": [2, 3]},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1, 5, 7]},
                doc! {"$pull": {"a": {"$gte": 5}}},
            ),
            doc! {"_id": 1, "a": [1]},
        );
        assert_eq!(
            applied(
                doc! {"_id": 1, "a": [{"b": 1, "c": 1}, {"b": 2}]},
                doc! {"$pull": {"a": {"b": 1}}}
            ),
            doc! {"_id": 1, "a": [{"b": 2}]}
        );
        assert_same(
            applied(doc! {"_id": 1}, doc! {"$pull": {"a": 1}}),
            doc! {"_id": 1},
        );
        assert_same(
            applied(
                doc! {"_id": 1, "a": [1, 2, 3]},
                doc! {"$pullAll": {"a": [1, 3]}},
            ),
            doc! {"_id": 1, "a": [2]},
        );
        assert_eq!(
            apply_error(doc! {"_id": 1, "a": 1}, doc! {"$pull": {"a": 1}}).errmsg,
            "Cannot apply $pull to a non-array value"
        );
    }

    #[test]
    fn pop_removes_first_or_last() {
        assert_same(
            applied(doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$pop": {"a": 1}}),
            doc! {"_id": 1, "a": [1, 2]},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$pop": {"a": -1}}),
            doc! {"_id": 1, "a": [2, 3]},
        );
        assert_eq!(
            parse_error(doc! {"$pop": {"a": 2}}).errmsg,
            "$pop expects 1 or -1, found: 2"
        );
        assert_eq!(
            apply_error(doc! {"_id": 1, "a": 1}, doc! {"$pop": {"a": 1}}).code,
            ErrorCode::TypeMismatch
        );
    }

    #[test]
    fn bit_combines_integers() {
        assert_same(
            applied(doc! {"_id": 1, "a": 13}, doc! {"$bit": {"a": {"and": 10}}}),
            doc! {"_id": 1, "a": 8},
        );
        assert_same(
            applied(doc! {"_id": 1, "a": 1}, doc! {"$bit": {"a": {"or": 4_i64}}}),
            doc! {"_id": 1, "a": 5_i64},
        );
    }

    #[test]
    fn positional_operator_uses_matched_index() {
        let mut document = doc! {"_id": 1, "a": [1, 2, 3]};
        let update = parse(doc! {"$set": {"a.$": 20}});
        let context = UpdateContext {
            matched_array_index: Some(1),
            ..context()
        };
        update.apply(&mut document, &context).expect("applies");
        assert_same(document, doc! {"_id": 1, "a": [1, 20, 3]});
        let error = apply_error(doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.$": 1}});
        assert_eq!(
            error.errmsg,
            "The positional operator did not find the match needed from the query."
        );
    }

    #[test]
    fn all_positional_updates_every_element() {
        assert_same(
            applied(
                doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
                doc! {"$inc": {"a.$[].b": 10}},
            ),
            doc! {"_id": 1, "a": [{"b": 11}, {"b": 12}]},
        );
        assert_eq!(
            apply_error(doc! {"_id": 1}, doc! {"$set": {"a.$[]": 1}}).errmsg,
            "The path 'a' must exist in the document in order to apply array updates."
        );
        assert_eq!(
            parse_error(doc! {"$set": {"a.$[x]": 1}}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn upsert_seeds_from_filter_equalities_with_id_first() {
        let filter =
            Filter::parse(&doc! {"a": 1, "b.c": {"$eq": 2}, "d": {"$gt": 1}}).expect("filter");
        let document =
            upsert_document(&filter, &parse(doc! {"$inc": {"n": 1}}), &context()).expect("upsert");
        assert!(matches!(document.iter().next(), Some((name, Bson::ObjectId(_))) if name == "_id"));
        assert_eq!(document.get("a"), Some(&Bson::Int32(1)));
        assert_eq!(document.get_document("b").ok(), Some(&doc! {"c": 2}));
        assert_eq!(document.get("n"), Some(&Bson::Int32(1)));
        assert!(!document.contains_key("d"));
    }

    #[test]
    fn replacement_upsert_takes_filter_id_only() {
        let filter = Filter::parse(&doc! {"_id": 3, "a": 1}).expect("filter");
        let document = upsert_document(&filter, &parse(doc! {"b": 2}), &context()).expect("upsert");
        assert_same(document, doc! {"_id": 3, "b": 2});
        let error = upsert_document(&filter, &parse(doc! {"_id": 4}), &context())
            .expect_err("conflicting _id");
        assert_eq!(error.code, ErrorCode::ImmutableField);
    }

    #[test]
    fn upsert_changing_filter_id_is_immutable_field() {
        let filter = Filter::parse(&doc! {"_id": 3}).expect("filter");
        let error = upsert_document(&filter, &parse(doc! {"$set": {"_id": 4}}), &context())
            .expect_err("immutable");
        assert_eq!(error.code, ErrorCode::ImmutableField);
    }

    #[test]
    fn array_id_is_invalid() {
        let filter = Filter::parse(&doc! {}).expect("filter");
        let error = upsert_document(&filter, &parse(doc! {"$set": {"_id": [1]}}), &context())
            .expect_err("invalid id");
        assert_eq!(error.code, ErrorCode::InvalidIdField);
    }

    #[test]
    fn touched_paths_lists_written_fields() {
        let update = parse(doc! {"$set": {"a.b": 1}, "$rename": {"c": "d"}});
        assert_eq!(
            update.touched_paths(),
            Some(vec!["a.b".to_string(), "c".to_string(), "d".to_string()])
        );
        assert_eq!(parse(doc! {"x": 1}).touched_paths(), None);
    }
}
