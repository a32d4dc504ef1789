//! Time-series collections: `create`'s `timeseries` option (validated as mongod's
//! timeseries.idl and timeseries_options.cpp), the layout measurements are stored in, the check
//! every written measurement passes, which indexes are internal, `collMod` of the bucketing
//! options, and how `listCollections`/`listIndexes` show one.
//!
//! Layout: every measurement is one stored document (keyed by `_id` like any collection), and
//! the collection has an internal ascending index on the time field ([`TIME_INDEX_NAME`]),
//! created with it in the same atomic step. Time-range reads are range scans of that index
//! (chosen by the planner like any index), and expiry reads its oldest entries (`ttl` makes the
//! collection's `expireAfterSeconds` a TTL on the time field through that index), so both cost
//! in proportion to the measurements in range. With a `metaField`, the `{<meta>: 1, <time>: 1}`
//! index mongod creates is created too, as an ordinary index. mongod's bucketing options
//! (`granularity`, `bucketMaxSpanSeconds`, `bucketRoundingSeconds`) are validated, stored and
//! shown, but do not change this layout: no bucket ever groups measurements.
//!
//! Invariants:
//! - The options hold `timeseries` canonical (`timeField`, `metaField?`, `granularity?`,
//!   `bucketRoundingSeconds`, `bucketMaxSpanSeconds`) and `expireAfterSeconds` (Int64) when set.
//! - `_id_` and the time index are internal: never listed, dropped, modified or conflicting with
//!   a client's index.
//! - Every stored measurement has a Date at its time field and is laid out as mongod returns
//!   measurements ([`measurement`] runs before every write that stores one, even with
//!   `bypassDocumentValidation`).

use bson::{doc, Bson, Document};

use tideway_base::display::{document_string, type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::keycodec::Direction;
use tideway_query::numeric::safe_number_long;
use tideway_storage::{CollectionMeta, IndexSpec, Namespace};

/// The collection option that makes a time-series collection.
pub const OPTION: &str = "timeseries";
/// The internal index on the time field. Clients cannot see or name it (their index names never
/// reach it: see [`is_internal_index`]).
pub(crate) const TIME_INDEX_NAME: &str = "$timeseries.time";

/// `granularity`, with the bucketing it implies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Granularity {
    Seconds,
    Minutes,
    Hours,
}

impl Granularity {
    fn parse(context: &str, value: &str) -> CommandResult<Granularity> {
        match value {
            "seconds" => Ok(Granularity::Seconds),
            "minutes" => Ok(Granularity::Minutes),
            "hours" => Ok(Granularity::Hours),
            other => Err(CommandError::bad_value(format!(
                "Enumeration value '{other}' for field '{context}.granularity' is not a valid value."
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Granularity::Seconds => "seconds",
            Granularity::Minutes => "minutes",
            Granularity::Hours => "hours",
        }
    }

    /// The default `bucketMaxSpanSeconds` (timeseries_options.cpp `getMaxSpanSecondsFromGranularity`).
    fn max_span_seconds(self) -> i32 {
        match self {
            Granularity::Seconds => 60 * 60,
            Granularity::Minutes => 60 * 60 * 24,
            Granularity::Hours => 60 * 60 * 24 * 30,
        }
    }

    /// The default `bucketRoundingSeconds` (`getBucketRoundingSecondsFromGranularity`).
    fn rounding_seconds(self) -> i32 {
        match self {
            Granularity::Seconds => 60,
            Granularity::Minutes => 60 * 60,
            Granularity::Hours => 60 * 60 * 24,
        }
    }
}

/// A time-series collection's settings, from its stored options.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeseries {
    pub time_field: String,
    pub meta_field: Option<String>,
}

/// The time-series settings of a collection with `options`; `None` for other collections.
pub fn of(options: &Document) -> Option<Timeseries> {
    let spec = options.get_document(OPTION).ok()?;
    Some(Timeseries {
        time_field: spec.get_str("timeField").ok()?.to_string(),
        meta_field: spec.get_str("metaField").ok().map(str::to_string),
    })
}

pub fn is_timeseries(meta: &CollectionMeta) -> bool {
    meta.options.contains_key(OPTION)
}

/// The longest bucket span mongod accepts (one year, timeseries.idl `lte`).
const MAX_BUCKET_SECONDS: i64 = 60 * 60 * 24 * 365;

/// `create`'s options that may go with `timeseries` (timeseries_constants.h
/// `kAllowedCollectionCreationOptions`; `capped: false` too).
const ALLOWED_WITH_TIMESERIES: &[&str] = &[
    OPTION,
    "expireAfterSeconds",
    "storageEngine",
    "indexOptionDefaults",
    "collation",
    "temp",
];

/// Validates `create`'s `timeseries` against the other options of `body`, in mongod's order:
/// the option's IDL, the options allowed with it (create_command.cpp), the field names, the
/// bucketing (timeseries_options.cpp `validateAndSetBucketingParameters`). Returns the canonical
/// option to store; `None` without `timeseries`. (mongod checks `expireAfterSeconds` next, as a
/// clustered collection's: `ttl::parse_clustered_expire_after`.)
pub fn validate_create(ns: &Namespace, body: &Document) -> CommandResult<Option<Document>> {
    let raw = match body.get(OPTION) {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(None),
        Some(Bson::Document(raw)) => raw,
        // The command's argument table refuses other types first.
        Some(other) => {
            return Err(CommandError::idl_wrong_type(
                "create",
                OPTION,
                type_name(other),
                "object",
            ))
        }
    };
    let parsed = ParsedOptions::parse(raw)?;
    for (name, value) in tideway_base::command::command_fields(body) {
        let allowed = ALLOWED_WITH_TIMESERIES.contains(&name.as_str())
            || (name == "capped" && !tideway_base::bsonutil::is_truthy(value));
        if !allowed {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("{ns}: 'timeseries' is not allowed with '{name}'"),
            ));
        }
    }
    if parsed.time_field.contains('.') {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!("{ns}: 'timeField' must be a top-level field and not contain a '.'"),
        ));
    }
    if let Some(meta_field) = &parsed.meta_field {
        let refusal = if meta_field == "_id" {
            "'metaField' cannot be \"_id\"".to_string()
        } else if *meta_field == parsed.time_field {
            "'metaField' cannot be the same as 'timeField'".to_string()
        } else if meta_field.contains('.') {
            format!("{ns}: 'metaField' must be a top-level field and not contain a '.'")
        } else {
            String::new()
        };
        if !refusal.is_empty() {
            return Err(CommandError::new(ErrorCode::InvalidOptions, refusal));
        }
    }
    parsed.canonical().map(Some)
}

/// The `timeseries` option as mongod's strict IDL struct `TimeseriesOptions` reads it (null
/// fields count as absent).
struct ParsedOptions {
    time_field: String,
    meta_field: Option<String>,
    bucketing: Bucketing,
}

/// The bucketing fields of a `timeseries` option as given (`create`'s and `collMod`'s).
#[derive(Default)]
struct Bucketing {
    granularity: Option<Granularity>,
    rounding: Option<i32>,
    max_span: Option<i32>,
}

impl Bucketing {
    /// Reads `field` (under IDL context `context`) when it is a bucketing field; false for
    /// any other field.
    fn read(&mut self, context: &str, field: &str, value: &Bson) -> CommandResult<bool> {
        match field {
            "granularity" => {
                let name = string_field(context, field, value)?;
                self.granularity = Some(Granularity::parse(context, &name)?);
            }
            "bucketRoundingSeconds" => self.rounding = Some(bucket_seconds(context, field, value)?),
            "bucketMaxSpanSeconds" => self.max_span = Some(bucket_seconds(context, field, value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl ParsedOptions {
    fn parse(raw: &Document) -> CommandResult<ParsedOptions> {
        const CONTEXT: &str = "create.timeseries";
        let (mut time_field, mut meta_field) = (None, None);
        let mut bucketing = Bucketing::default();
        for (field, value) in raw {
            if matches!(value, Bson::Null | Bson::Undefined) {
                continue;
            }
            match field.as_str() {
                "timeField" => time_field = Some(string_field(CONTEXT, field, value)?),
                "metaField" => meta_field = Some(string_field(CONTEXT, field, value)?),
                _ if bucketing.read(CONTEXT, field, value)? => {}
                _ => return Err(CommandError::idl_unknown_field(CONTEXT, field)),
            }
        }
        Ok(ParsedOptions {
            time_field: time_field
                .ok_or_else(|| CommandError::idl_missing_field(CONTEXT, "timeField"))?,
            meta_field,
            bucketing,
        })
    }

    /// The option as stored and listed: with a granularity (`seconds` when none is given) its
    /// `bucketMaxSpanSeconds` and no rounding; otherwise the equal custom pair and no granularity.
    fn canonical(&self) -> CommandResult<Document> {
        let mut spec = doc! {"timeField": self.time_field.as_str()};
        if let Some(meta_field) = &self.meta_field {
            spec.insert("metaField", meta_field.as_str());
        }
        let custom = self.bucketing.rounding.is_some() || self.bucketing.max_span.is_some();
        match self.bucketing.granularity {
            Some(granularity) => check_granularity_alone(
                granularity,
                self.bucketing.rounding,
                self.bucketing.max_span,
            )?,
            None if custom => {
                let (rounding, max_span) = equal_pair(self.bucketing.rounding, self.bucketing.max_span).ok_or_else(|| {
                    CommandError::new(
                        ErrorCode::InvalidOptions,
                        "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'",
                    )
                })?;
                spec.insert("bucketRoundingSeconds", rounding);
                spec.insert("bucketMaxSpanSeconds", max_span);
                return Ok(spec);
            }
            None => {}
        }
        let granularity = self.bucketing.granularity.unwrap_or(Granularity::Seconds);
        spec.insert("granularity", granularity.name());
        spec.insert("bucketMaxSpanSeconds", granularity.max_span_seconds());
        Ok(spec)
    }
}

/// With a granularity, a `bucketMaxSpanSeconds` may only repeat its default and no
/// `bucketRoundingSeconds` may be given (`checkBucketingParameters`).
fn check_granularity_alone(
    granularity: Granularity,
    rounding: Option<i32>,
    max_span: Option<i32>,
) -> CommandResult<()> {
    if max_span.is_some_and(|span| span != granularity.max_span_seconds()) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "Time-series 'bucketMaxSpanSeconds' cannot be set to a value other than the default of {} for the provided granularity",
                granularity.max_span_seconds()
            ),
        ));
    }
    if rounding.is_some() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "Time-series 'bucketRoundingSeconds' cannot be set alongside the granularity parameter",
        ));
    }
    Ok(())
}

fn equal_pair(rounding: Option<i32>, max_span: Option<i32>) -> Option<(i32, i32)> {
    match (rounding, max_span) {
        (Some(rounding), Some(max_span)) if rounding == max_span => Some((rounding, max_span)),
        _ => None,
    }
}

fn string_field(context: &str, field: &str, value: &Bson) -> CommandResult<String> {
    match value {
        Bson::String(text) => Ok(text.clone()),
        other => Err(CommandError::idl_wrong_type(
            context,
            field,
            type_name(other),
            "string",
        )),
    }
}

/// A `safeInt` bucketing field with the IDL's validators (`gte: 1`, `lte: 31536000`; 2
/// BadValue as mongod ≥ 7.1).
fn bucket_seconds(context: &str, field: &str, value: &Bson) -> CommandResult<i32> {
    let number = safe_number_long(value).ok_or_else(|| {
        CommandError::type_mismatch(format!(
            "BSON field '{context}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            type_name(value)
        ))
    })?;
    let seconds = number.clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    if seconds < 1 {
        return Err(CommandError::bad_value(format!(
            "BSON field '{context}.{field}' value must be >= 1, actual value '{seconds}'"
        )));
    }
    if seconds > MAX_BUCKET_SECONDS {
        return Err(CommandError::bad_value(format!(
            "BSON field '{context}.{field}' value must be <= {MAX_BUCKET_SECONDS}, actual value '{seconds}'"
        )));
    }
    Ok(seconds as i32)
}

/// The indexes a new time-series collection is created with (besides `_id_`): the internal time
/// index, and with a `metaField` the `{<meta>: 1, <time>: 1}` index mongod creates.
pub fn initial_indexes(timeseries: &Timeseries) -> Vec<IndexSpec> {
    let time = &timeseries.time_field;
    let mut indexes = vec![ascending_index(TIME_INDEX_NAME.to_string(), &[time])];
    if let Some(meta) = &timeseries.meta_field {
        indexes.push(ascending_index(format!("{meta}_1_{time}_1"), &[meta, time]));
    }
    indexes
}

fn ascending_index(name: String, fields: &[&String]) -> IndexSpec {
    let mut key = Document::new();
    for field in fields {
        key.insert(field.as_str(), 1);
    }
    IndexSpec {
        key: fields
            .iter()
            .map(|field| (field.to_string(), Direction::Ascending))
            .collect(),
        unique: false,
        sparse: false,
        partial_filter: None,
        spec: doc! {"v": 2, "key": key, "name": name.as_str()},
        name,
        catalog_only: false,
        collation: None,
    }
}

fn is_internal_name(index: &IndexSpec) -> bool {
    index.is_id_index() || index.name == TIME_INDEX_NAME
}

/// `meta` as clients see it: without the internal indexes.
pub fn client_meta(mut meta: CollectionMeta) -> CollectionMeta {
    if is_timeseries(&meta) {
        meta.indexes.retain(|index| !is_internal_name(index));
    }
    meta
}

/// Checks an index a client asks for on a time-series collection (`raw` as given, `spec` as
/// parsed) as mongod's `translateIndexSpecFromLogicalToBuckets` and createIndexes do: no text or
/// unique index (72), time-field keys numeric and measurement keys numeric (67), sparse only
/// over the time and meta fields (72), no explicit collation with a partial filter (85), and a
/// TTL only on the time field with a partial filter on the meta field.
pub fn check_index(timeseries: &Timeseries, raw: &Document, spec: &IndexSpec) -> CommandResult<()> {
    let key = spec.key_pattern();
    let invalid = |message: &str| CommandError::new(ErrorCode::InvalidOptions, message);
    if key
        .values()
        .any(|value| matches!(value, Bson::String(kind) if kind == "text"))
    {
        return Err(invalid(
            "Text indexes are not supported on time-series collections",
        ));
    }
    let mut measurement_key = false;
    for (field, value) in &key {
        let numeric = tideway_base::bsonutil::as_f64(value).is_some();
        let why = if *field == timeseries.time_field {
            (!numeric).then_some(
                "Indexes on the time field must be ascending or descending (numbers only)",
            )
        } else if timeseries.is_meta_path(field) {
            None
        } else {
            measurement_key = true;
            (!numeric || field.ends_with("$**")).then_some(
                "Indexes on measurement fields must be ascending or descending (numbers only), or '2dsphere'",
            )
        };
        if let Some(why) = why {
            return Err(CommandError::new(
                ErrorCode::CannotCreateIndex,
                format!(
                    "BadValue: Invalid index spec for time-series collection: {}. {why}: {field}: {}",
                    value_string(&Bson::Document(key.clone())),
                    value_string(value)
                ),
            ));
        }
    }
    if spec.unique {
        return Err(invalid(
            "Unique indexes are not supported on time-series collections",
        ));
    }
    if spec.sparse && measurement_key {
        return Err(invalid(
            "Sparse indexes are not supported on time-series measurements",
        ));
    }
    if spec.partial_filter.is_some() && raw.contains_key("collation") {
        return Err(CommandError::new(
            ErrorCode::IndexOptionsConflict,
            "On a time-series collection, partialFilterExpression and collation arguments are incompatible",
        ));
    }
    if spec.spec.contains_key("expireAfterSeconds") {
        let on_meta = spec
            .partial_filter
            .as_ref()
            .is_some_and(|filter| timeseries.filters_only_meta(filter));
        if !on_meta {
            return Err(invalid(
                "TTL indexes on time-series collections require a partialFilterExpression on the metaField",
            ));
        }
        if key.len() != 1 {
            return Err(CommandError::new(
                ErrorCode::CannotCreateIndex,
                format!(
                    "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {}",
                    document_string(raw)
                ),
            ));
        }
        if !key.contains_key(&timeseries.time_field) {
            return Err(invalid(
                "TTL indexes on non-time fields are not supported on time-series collections",
            ));
        }
    }
    Ok(())
}

impl Timeseries {
    /// Whether `document` already has a Date at the time field and the stored layout (time
    /// first, meta second when present, `_id` last): an updated measurement usually does, and
    /// is then stored without being rebuilt.
    fn is_laid_out(&self, document: &Document) -> bool {
        let mut fields = document.iter();
        let time_first =
            matches!(fields.next(), Some((name, Bson::DateTime(_))) if *name == self.time_field);
        let meta_second = match &self.meta_field {
            Some(meta) if document.contains_key(meta) => {
                matches!(fields.next(), Some((name, _)) if name == meta)
            }
            _ => true,
        };
        let id_last = !document.contains_key("_id")
            || document.keys().last().is_some_and(|name| name == "_id");
        time_first && meta_second && id_last
    }

    /// Whether `path` is the meta field or inside it.
    fn is_meta_path(&self, path: &str) -> bool {
        self.meta_field.as_deref().is_some_and(|meta| {
            path == meta
                || path
                    .strip_prefix(meta)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    }

    /// Whether a filter reads nothing but the meta field (through `$and` too). Bounded by the
    /// filter's nesting, which the parser bounds.
    fn filters_only_meta(&self, filter: &Document) -> bool {
        !filter.is_empty()
            && filter.iter().all(|(field, value)| {
                match (field.as_str(), value) {
                ("$and", Bson::Array(clauses)) => clauses.iter().all(|clause| {
                    matches!(clause, Bson::Document(clause) if self.filters_only_meta(clause))
                }),
                _ => self.is_meta_path(field),
            }
            })
    }
}

/// A measurement as it is stored: checked (a Date at the time field, as bucket_catalog's
/// `extractTime` requires, else 2 BadValue) and laid out as mongod's bucket unpacking returns
/// measurements: the time field first, then the meta field (bucket_unpacker.cpp), then the
/// other fields in their order and `_id` last, as the manual's examples show them (mongod's own
/// order past the meta field follows a hash map).
pub fn measurement(timeseries: &Timeseries, mut document: Document) -> CommandResult<Document> {
    if timeseries.is_laid_out(&document) {
        return Ok(document);
    }
    let time = match document.remove(&timeseries.time_field) {
        Some(Bson::DateTime(time)) => time,
        _ => {
            return Err(CommandError::bad_value(format!(
                "'{}' must be present and contain a valid BSON UTC datetime value",
                timeseries.time_field
            )))
        }
    };
    let mut stored = doc! {timeseries.time_field.as_str(): time};
    if let Some(meta_field) = &timeseries.meta_field {
        if let Some(meta) = document.remove(meta_field) {
            stored.insert(meta_field.as_str(), meta);
        }
    }
    let id = document.remove("_id");
    stored.extend(document);
    if let Some(id) = id {
        stored.insert("_id", id);
    }
    Ok(stored)
}

/// `collMod` options a time-series collection takes (coll_mod.cpp); any other is 72.
const COLL_MOD_OPTIONS: &[&str] = &[OPTION, "expireAfterSeconds", "index"];

/// Checks which options a `collMod` of `meta` may carry, before anything is applied: on a time
/// series only `timeseries`, `expireAfterSeconds` and `index` (without `expireAfterSeconds`);
/// `timeseries` only on a time series.
pub fn check_coll_mod(meta: &CollectionMeta, body: &Document) -> CommandResult<()> {
    let invalid = |message: String| Err(CommandError::new(ErrorCode::InvalidOptions, message));
    if !is_timeseries(meta) {
        if body.contains_key(OPTION) {
            return invalid(format!(
                "option only supported on a time-series collection: {OPTION}"
            ));
        }
        return Ok(());
    }
    for (name, _) in tideway_base::command::command_fields(body) {
        if !COLL_MOD_OPTIONS.contains(&name.as_str()) {
            return invalid(format!(
                "option not supported on a time-series collection: {name}"
            ));
        }
    }
    if matches!(body.get("index"), Some(Bson::Document(change)) if change.contains_key("expireAfterSeconds"))
    {
        return invalid("TTL indexes are not supported for time-series collections. Please refer to the documentation and use the top-level 'expireAfterSeconds' option instead".into());
    }
    Ok(())
}

/// Applies `collMod`'s `timeseries: {granularity | bucketMaxSpanSeconds + bucketRoundingSeconds}`
/// to the options the caller stores, as timeseries_options.cpp
/// `isTimeseriesGranularityValidAndUnchanged` allows it: a granularity only moves from seconds
/// to minutes or hours and from minutes to hours, and takes its default span; a custom pair is
/// equal, never below the current span or rounding, and drops the granularity; `{}` or the
/// current values change nothing.
pub fn apply_coll_mod(options: &mut Document, body: &Document) -> CommandResult<()> {
    const CONTEXT: &str = "collMod.timeseries";
    let Some(Bson::Document(change)) = body.get(OPTION) else {
        return Ok(());
    };
    let Ok(current) = options.get_document(OPTION) else {
        return Ok(());
    };
    let mut bucketing = Bucketing::default();
    for (field, value) in change {
        if matches!(value, Bson::Null | Bson::Undefined) {
            continue;
        }
        if !bucketing.read(CONTEXT, field, value)? {
            return Err(CommandError::idl_unknown_field(CONTEXT, field));
        }
    }
    let Bucketing {
        granularity: target_granularity,
        rounding,
        max_span,
    } = bucketing;
    let invalid = |message: &str| Err(CommandError::new(ErrorCode::InvalidOptions, message));
    let current_granularity = current
        .get_str("granularity")
        .ok()
        .and_then(|name| Granularity::parse(CONTEXT, name).ok());
    let current_span = current
        .get_i32("bucketMaxSpanSeconds")
        .unwrap_or(Granularity::Seconds.max_span_seconds());
    let current_rounding = current.get_i32("bucketRoundingSeconds").ok();
    let (target_span, target_rounding) = match target_granularity {
        Some(target) => {
            if max_span.is_some_and(|span| span != target.max_span_seconds()) {
                return invalid("Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than the default for the provided granularity");
            }
            if rounding.is_some() {
                return invalid("Timeseries 'bucketRoundingSeconds' is not configurable alongside the granularity parameter");
            }
            if let Some(current) = current_granularity {
                let allowed = match current {
                    _ if current == target => return Ok(()),
                    Granularity::Seconds => true,
                    Granularity::Minutes => target == Granularity::Hours,
                    Granularity::Hours => false,
                };
                if !allowed {
                    return invalid("Invalid transition for timeseries.granularity. Can only transition from 'seconds' to 'minutes' or 'minutes' to 'hours'.");
                }
                return store_bucketing(options, Some(target), target.max_span_seconds(), None);
            }
            (target.max_span_seconds(), target.rounding_seconds())
        }
        None => match (max_span, rounding) {
            (None, None) => return Ok(()),
            (Some(span), Some(rounding)) => (span, rounding),
            _ => return invalid("Timeseries 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' need to be set alongside each other"),
        },
    };
    let current_rounding_or_default =
        current_rounding.or(current_granularity.map(Granularity::rounding_seconds));
    if current_span == target_span && current_rounding_or_default == Some(target_rounding) {
        return Ok(());
    }
    if max_span != rounding {
        return invalid(
            "Timeseries 'bucketRoundingSeconds' needs to be equal to 'bucketMaxSpanSeconds'",
        );
    }
    if current_span > target_span {
        return invalid(
            "Timeseries 'bucketMaxSpanSeconds' needs to be equal or greater to transition",
        );
    }
    if current_rounding.is_some_and(|current| current > target_rounding) {
        return invalid(
            "Timeseries 'bucketRoundingSeconds' needs to be equal or greater to transition",
        );
    }
    match target_granularity {
        Some(target) => store_bucketing(options, Some(target), target_span, None),
        None => store_bucketing(options, None, target_span, Some(target_rounding)),
    }
}

/// Replaces the bucketing of the stored `timeseries` option (fields in mongod's IDL order).
fn store_bucketing(
    options: &mut Document,
    granularity: Option<Granularity>,
    max_span: i32,
    rounding: Option<i32>,
) -> CommandResult<()> {
    let Ok(current) = options.get_document(OPTION) else {
        return Ok(());
    };
    let mut updated = Document::new();
    for field in ["timeField", "metaField"] {
        if let Some(value) = current.get(field) {
            updated.insert(field, value.clone());
        }
    }
    if let Some(granularity) = granularity {
        updated.insert("granularity", granularity.name());
    }
    if let Some(rounding) = rounding {
        updated.insert("bucketRoundingSeconds", rounding);
    }
    updated.insert("bucketMaxSpanSeconds", max_span);
    options.insert(OPTION, updated);
    Ok(())
}

/// `create` of a time series whose name `existing` holds with other options (48, as
/// create_collection.cpp `checkExistingCollectionIsCompatible`).
pub fn exists_differently(existing: &CollectionMeta, requested: &Document) -> CommandError {
    let ns = &existing.ns;
    let message = if is_timeseries(existing) {
        format!(
            "namespace '{ns}' already exists, but with different options: {}, requested: {}",
            document_string(&existing.options),
            document_string(requested)
        )
    } else {
        format!("namespace '{ns}' already exists, but is not a timeseries collection")
    };
    CommandError::new(ErrorCode::NamespaceExists, message)
}

/// The `listCollections` entry of a time-series collection.
pub fn list_entry(meta: &CollectionMeta) -> Document {
    doc! {
        "name": meta.ns.coll.as_str(),
        "type": "timeseries",
        "options": meta.options.clone(),
        "info": {"readOnly": false},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(raw: Document) -> CommandResult<Document> {
        ParsedOptions::parse(&raw)?.canonical()
    }

    #[test]
    fn bucketing_is_stored_as_mongod_lists_it() {
        // jstests/core/timeseries/ddl/bucket_span_and_rounding_seconds.js and the manual:
        // a granularity (default seconds) stores its span and no rounding; a custom pair no
        // granularity.
        let cases = [
            (
                doc! {"timeField": "t"},
                doc! {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600},
            ),
            (
                doc! {"timeField": "t", "granularity": "minutes"},
                doc! {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 86400},
            ),
            (
                doc! {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2_592_000},
                doc! {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2_592_000},
            ),
            (
                doc! {"timeField": "t", "metaField": "m", "bucketRoundingSeconds": 100, "bucketMaxSpanSeconds": 100.0},
                doc! {"timeField": "t", "metaField": "m", "bucketRoundingSeconds": 100, "bucketMaxSpanSeconds": 100},
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(canonical(raw.clone()).unwrap(), expected, "{raw}");
        }
        let refused = [
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 3600},
                ErrorCode::InvalidOptions,
            ),
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 50},
                ErrorCode::InvalidOptions,
            ),
            (
                doc! {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 100},
                ErrorCode::InvalidOptions,
            ),
            (
                doc! {"timeField": "t", "granularity": "seconds", "bucketRoundingSeconds": 60},
                ErrorCode::InvalidOptions,
            ),
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 0, "bucketRoundingSeconds": 0},
                ErrorCode::BadValue,
            ),
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 31_536_001, "bucketRoundingSeconds": 31_536_001},
                ErrorCode::BadValue,
            ),
            (
                doc! {"timeField": "t", "granularity": "days"},
                ErrorCode::BadValue,
            ),
            (doc! {"timeField": 1}, ErrorCode::TypeMismatch),
            (doc! {"metaField": "m"}, ErrorCode::Location40414),
            (
                doc! {"timeField": "t", "invalidOption": {}},
                ErrorCode::Location40415,
            ),
        ];
        for (raw, code) in refused {
            assert_eq!(canonical(raw.clone()).unwrap_err().code, code, "{raw}");
        }
    }

    #[test]
    fn measurements_need_a_date_at_the_time_field() {
        let timeseries = Timeseries {
            time_field: "t".into(),
            meta_field: Some("m".into()),
        };
        let now = bson::DateTime::from_millis(0);
        // Time first, meta second, the rest in order (bucket_unpacker.cpp).
        assert_eq!(
            measurement(&timeseries, doc! {"_id": 1, "v": 2, "m": "a", "t": now}).unwrap(),
            doc! {"t": now, "m": "a", "v": 2, "_id": 1}
        );
        // Already laid out: kept as it is; `_id` out of place: moved last.
        let laid_out = doc! {"t": now, "m": "a", "v": 2, "_id": 1};
        assert_eq!(
            measurement(&timeseries, laid_out.clone()).unwrap(),
            laid_out
        );
        assert_eq!(
            measurement(&timeseries, doc! {"t": now, "m": "a", "_id": 1, "v": 2}).unwrap(),
            laid_out
        );
        for bad in [
            doc! {},
            doc! {"t": 1},
            doc! {"t": "2021-01-01"},
            doc! {"t": bson::Timestamp {time: 1, increment: 1}},
        ] {
            let error = measurement(&timeseries, bad.clone()).unwrap_err();
            assert_eq!(error.code, ErrorCode::BadValue, "{bad}");
            assert_eq!(
                error.errmsg,
                "'t' must be present and contain a valid BSON UTC datetime value"
            );
        }
    }
}
