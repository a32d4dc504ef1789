//! Every time-to-live rule, as pure functions: the Cosmos DB model (collection default from a `_ts`
//! TTL index, per-document `ttl`, last-write time) and MongoDB TTL indexes on date fields, their
//! validation, and the expiry instant of a stored document. Nothing else in the server decides
//! whether a document is expired; storage only keeps the ordered structures these rules read.
//!
//! Invariants:
//! - A document is expired exactly when its expiry instant `e` satisfies `e <= now_ms`; it lives at
//!   least its ttl, never less.
//! - The Cosmos expiry of a document is `last_write_ms + ttl × 1000`, where ttl is the document's own
//!   valid `ttl` or else the collection default; `-1` (either) means never; without a `_ts` TTL
//!   index nothing expires by these rules and `ttl` is ignored.
//! - A MongoDB TTL index expires a document at `earliest Date at the path + expireAfterSeconds`;
//!   non-Date values, missing fields and documents outside `partialFilterExpression` never expire.
//! - A clustered collection's `expireAfterSeconds` is a TTL index on `_id` (the clustered index,
//!   `_id_`): a document whose `_id` is a Date expires at `_id + expireAfterSeconds`; any other
//!   `_id` never expires.
//! - A time-series collection's `expireAfterSeconds` is a TTL on its time field, through its
//!   internal time index (`timeseries::TIME_INDEX_NAME`): each measurement expires at its own
//!   time + `expireAfterSeconds` (mongod waits for a whole bucket to expire).
//! - When several policies apply, the earliest expiry wins.
//!
//! No I/O, no clocks: callers pass `now_ms`.

use std::sync::Arc;

use bson::{Bson, Document, RawBsonRef, RawDocument};

use tideway_base::bsonutil::decode_fields;
use tideway_base::display::{document_string, type_name};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::numeric::safe_number_long;
use tideway_query::{lookup_values, Filter};
use tideway_storage::{
    CollectionMeta, IndexKind, IndexSpec, RawRecord, Record, RecordInstant, RecordPredicate,
    TtlClass,
};

/// The server-maintained last-modified field (Unix seconds), exposed only through `$meta`.
pub const TS_FIELD: &str = "_ts";
/// The per-document override field (root level, lower case).
pub(crate) const TTL_FIELD: &str = "ttl";
/// `$meta` names for projections: last write in seconds, and the expiry instant as a Date.
pub const META_LAST_MODIFIED: &str = "lastModified";
pub const META_EXPIRE_AT: &str = "expireAt";
pub const PROJECTION_META: &[&str] = &[META_LAST_MODIFIED, META_EXPIRE_AT];

/// A document's own `ttl` as the Cosmos rules read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DocumentTtl {
    /// No `ttl`, or one that is not a meaningful value: the collection default applies.
    Unset,
    /// `ttl: -1`: never expires.
    Never,
    /// `ttl: n` with `n >= 1`.
    Seconds(i32),
}

/// Reads the root-level `ttl`: an int32, an int64 that fits in int32, or a double with no
/// fractional part that fits in int32, whose value is -1 or at least 1. Anything else is `Unset`.
pub(crate) fn document_ttl(document: &Document) -> DocumentTtl {
    let whole = match document.get(TTL_FIELD) {
        Some(Bson::Int32(value)) => Some(*value),
        Some(Bson::Int64(value)) => i32::try_from(*value).ok(),
        Some(Bson::Double(value)) if value.fract() == 0.0 => (f64::from(i32::MIN)
            ..=f64::from(i32::MAX))
            .contains(value)
            .then_some(*value as i32),
        _ => None,
    };
    match whole {
        Some(-1) => DocumentTtl::Never,
        Some(seconds) if seconds >= 1 => DocumentTtl::Seconds(seconds),
        _ => DocumentTtl::Unset,
    }
}

/// Where storage files a document in its expiry structures, from the document and its write time.
pub fn ttl_class(document: &Document, last_write_ms: i64) -> TtlClass {
    match document_ttl(document) {
        DocumentTtl::Unset => TtlClass::Default,
        DocumentTtl::Never => TtlClass::Never,
        DocumentTtl::Seconds(seconds) => TtlClass::Own {
            expire_at_ms: after_seconds(last_write_ms, i64::from(seconds)),
        },
    }
}

fn after_seconds(start_ms: i64, seconds: i64) -> i64 {
    start_ms.saturating_add(seconds.saturating_mul(1000))
}

/// The storage engine's [`tideway_storage::LastWriteRule`]: a collection keeps its documents
/// ordered by last write only while it has a default TTL in seconds (a `_ts` TTL index with
/// `expireAfterSeconds` of 1 or more), the one policy that reads that order
/// ([`TtlPolicies::default_cutoff_ms`]). Without it no document can expire by its last write, so
/// writes skip the entry; setting a default fills the order in the same atomic step.
pub fn keeps_last_write_order(meta: &CollectionMeta) -> bool {
    matches!(
        TtlPolicies::from_meta(meta).cosmos,
        Some(CosmosDefault::Seconds(_))
    )
}

/// The collection default set by `createIndex({_ts: 1}, {expireAfterSeconds: n})`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CosmosDefault {
    /// Documents without their own ttl expire `n` seconds after their last write.
    Seconds(i32),
    /// `-1`: TTL is on, but only documents with their own `ttl` expire.
    NoDefault,
}

/// A MongoDB TTL index on a field other than `_ts`.
#[derive(Clone, Debug)]
pub struct FieldTtl {
    pub index_name: String,
    pub path: String,
    /// Int32 range for a TTL index; a clustered collection's may use int64.
    pub expire_after_seconds: i64,
    pub partial: Option<Filter>,
}

impl FieldTtl {
    /// Documents whose earliest date is at or before this instant are expired at `now_ms`.
    pub(crate) fn date_cutoff_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.expire_after_seconds.saturating_mul(1000))
    }

    fn expire_at_ms(&self, document: &Document) -> Option<i64> {
        if self
            .partial
            .as_ref()
            .is_some_and(|filter| !filter.matches(document))
        {
            return None;
        }
        let earliest = lookup_values(document, &self.path)
            .into_iter()
            .filter_map(|value| match value {
                Bson::DateTime(date) => Some(date.timestamp_millis()),
                _ => None,
            })
            .min()?;
        Some(self.after_date(earliest))
    }

    fn after_date(&self, date_ms: i64) -> i64 {
        after_seconds(date_ms, self.expire_after_seconds)
    }

    /// [`FieldTtl::expire_at_ms`] of a stored document, decoding no more of it than needed: a
    /// top-level Date or missing field is read in place; otherwise only the path's top-level field
    /// is decoded (the whole document when a partial filter must be evaluated).
    fn stored_expire_at_ms(&self, raw: &RawDocument) -> Option<i64> {
        let root = self.path.split('.').next().unwrap_or_default();
        if self.partial.is_none() && root.len() == self.path.len() {
            match raw.get(root) {
                Ok(Some(RawBsonRef::DateTime(date))) => {
                    return Some(self.after_date(date.timestamp_millis()))
                }
                Ok(None) => return None,
                _ => {}
            }
        }
        let document = if self.partial.is_some() {
            tideway_base::bsonutil::document_from_raw(raw).ok()?
        } else {
            decode_fields(raw, |name| name == root).ok()?
        };
        self.expire_at_ms(&document)
    }
}

/// Every TTL policy of one collection.
#[derive(Clone, Debug, Default)]
pub struct TtlPolicies {
    pub cosmos: Option<CosmosDefault>,
    pub fields: Vec<FieldTtl>,
}

impl TtlPolicies {
    /// The policies a collection's indexes define. Specs that do not parse define none (they were
    /// validated on creation; this keeps reads working if a rule ever tightens).
    pub fn from_meta(meta: &CollectionMeta) -> TtlPolicies {
        let mut policies = TtlPolicies::default();
        for index in &meta.indexes {
            let Some(value) = index.spec.get("expireAfterSeconds") else {
                continue;
            };
            // mongod's TTL monitor skips special indexes ("special index can't be used as a
            // TTL index, skipping TTL job"): a hashed, text or wildcard index may carry
            // `expireAfterSeconds` and is listed with it, but expires nothing.
            if index.kind() != IndexKind::Ordered {
                continue;
            }
            if is_ts_index_key(index) {
                policies.cosmos = parse_cosmos_default(value).ok();
            } else if let ([(path, _)], Some(seconds)) =
                (index.key.as_slice(), stored_expire_after(value))
            {
                policies.fields.push(FieldTtl {
                    index_name: index.name.clone(),
                    path: path.clone(),
                    expire_after_seconds: i64::from(seconds),
                    partial: index
                        .partial_filter
                        .as_ref()
                        .and_then(|filter| Filter::parse(filter).ok()),
                });
            }
        }
        if let Some(seconds) = clustered_expire_after(&meta.options) {
            // The clustered index is the `_id_` index: documents are stored in `_id` order.
            policies.fields.push(FieldTtl {
                index_name: IndexSpec::ID_INDEX_NAME.to_string(),
                path: "_id".to_string(),
                expire_after_seconds: seconds,
                partial: None,
            });
        }
        if let (Some(timeseries), Some(seconds)) = (
            crate::timeseries::of(&meta.options),
            collection_expire_after(&meta.options),
        ) {
            policies.fields.push(FieldTtl {
                index_name: crate::timeseries::TIME_INDEX_NAME.to_string(),
                path: timeseries.time_field,
                expire_after_seconds: seconds,
                partial: None,
            });
        }
        policies
    }

    pub fn is_empty(&self) -> bool {
        self.cosmos.is_none() && self.fields.is_empty()
    }

    /// The Cosmos expiry of a document stored with `ttl` (its own `ttl`, as [`ttl_class`] filed
    /// it) and last written at `last_write_ms`.
    fn cosmos_expire_at_ms(&self, ttl: TtlClass, last_write_ms: i64) -> Option<i64> {
        match (ttl, self.cosmos?) {
            (TtlClass::Own { expire_at_ms }, _) => Some(expire_at_ms),
            (TtlClass::Default, CosmosDefault::Seconds(default)) => {
                Some(after_seconds(last_write_ms, i64::from(default)))
            }
            (TtlClass::Never, _) | (TtlClass::Default, CosmosDefault::NoDefault) => None,
        }
    }

    /// When `record` expires under these policies (the earliest of all that apply), if ever.
    pub fn expire_at_ms(&self, record: &Record) -> Option<i64> {
        let stored = record.doc.bytes_if_read();
        self.fields
            .iter()
            .filter_map(|field| match stored {
                Some(raw) => field.stored_expire_at_ms(raw),
                None => field.expire_at_ms(&record.doc),
            })
            .chain(self.cosmos_expire_at_ms(record.ttl, record.last_write_ms))
            .min()
    }

    /// [`TtlPolicies::expire_at_ms`] of a stored record, without decoding it in full.
    pub(crate) fn stored_expire_at_ms(&self, record: &RawRecord<'_>) -> Option<i64> {
        self.fields
            .iter()
            .filter_map(|field| field.stored_expire_at_ms(record.doc))
            .chain(self.cosmos_expire_at_ms(record.ttl, record.last_write_ms))
            .min()
    }

    pub(crate) fn is_expired(&self, record: &Record, now_ms: i64) -> bool {
        !self.is_empty()
            && self
                .expire_at_ms(record)
                .is_some_and(|expire_at| expire_at <= now_ms)
    }

    /// Documents following the collection default whose last write is at or before this instant
    /// are expired at `now_ms`.
    pub(crate) fn default_cutoff_ms(&self, now_ms: i64) -> Option<i64> {
        match self.cosmos? {
            CosmosDefault::Seconds(seconds) => {
                Some(now_ms.saturating_sub(i64::from(seconds).saturating_mul(1000)))
            }
            CosmosDefault::NoDefault => None,
        }
    }

    /// "Expired at `now_ms`" as a predicate storage evaluates on stored records (`None` without
    /// policies): scans skip such records undecoded, a write replaces one that blocks it (same
    /// `_id` or unique key) instead of failing, and the reaper deletes them.
    pub fn expired_predicate(self: &Arc<Self>, now_ms: i64) -> Option<RecordPredicate> {
        if self.is_empty() {
            return None;
        }
        let policies = Arc::clone(self);
        Some(RecordPredicate::new(move |record: &RawRecord<'_>| {
            policies
                .stored_expire_at_ms(record)
                .is_some_and(|expire_at| expire_at <= now_ms)
        }))
    }

    /// [`TtlPolicies::stored_expire_at_ms`] as a rule storage evaluates on the records it reaps
    /// (the instant the oplog's expiry entries report).
    pub(crate) fn expiry_instant(self: &Arc<Self>) -> RecordInstant {
        let policies = Arc::clone(self);
        RecordInstant::new(move |record: &RawRecord<'_>| policies.stored_expire_at_ms(record))
    }

    /// The value of a projection `{f: {$meta: name}}` for `record`.
    pub fn meta_value(&self, name: &str, record: &Record) -> Bson {
        match name {
            META_LAST_MODIFIED => {
                let seconds = record.last_write_ms.div_euclid(1000);
                i32::try_from(seconds).map_or(Bson::Int64(seconds), Bson::Int32)
            }
            META_EXPIRE_AT => self.expire_at_ms(record).map_or(Bson::Null, |ms| {
                Bson::DateTime(bson::DateTime::from_millis(ms))
            }),
            _ => Bson::Null,
        }
    }
}

/// Whether an index is keyed on `_ts` alone (the Cosmos default TTL index, when it has
/// `expireAfterSeconds`).
pub fn is_ts_index_key(index: &IndexSpec) -> bool {
    matches!(index.key.as_slice(), [(path, _)] if path == TS_FIELD)
}

/// A write may not set the server-maintained `_ts`.
pub fn check_client_document(document: &Document) -> CommandResult<()> {
    if document.contains_key(TS_FIELD) {
        return Err(CommandError::bad_value(
            "_ts is maintained by the server (the document's last-modified time) and cannot be set by a write",
        ));
    }
    Ok(())
}

/// A whole number from any numeric BSON type; `None` for fractions, NaN and non-numbers.
fn whole_number(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        other => tideway_base::bsonutil::as_f64(other)
            .filter(|v| v.fract() == 0.0 && v.abs() < 9.0e18)
            .map(|v| v as i64),
    }
}

/// The collection default of a `_ts` TTL index: -1, or a whole number of seconds from 1 to
/// 2147483647 (67 CannotCreateIndex otherwise; `collMod` reports it as 72 InvalidOptions).
pub fn parse_cosmos_default(value: &Bson) -> CommandResult<CosmosDefault> {
    match whole_number(value) {
        Some(-1) => Ok(CosmosDefault::NoDefault),
        Some(seconds) if (1..=i64::from(i32::MAX)).contains(&seconds) => Ok(CosmosDefault::Seconds(seconds as i32)),
        _ => Err(CommandError::new(
            ErrorCode::CannotCreateIndex,
            format!(
                "The 'expireAfterSeconds' option of the _ts TTL index must be -1 (TTL on, no default: only documents \
                 with their own ttl expire) or a whole number of seconds from 1 to 2147483647, but received {value}"
            ),
        )),
    }
}

/// A stored `expireAfterSeconds` of a field TTL index (always an Int32 once validated).
fn stored_expire_after(value: &Bson) -> Option<i32> {
    match value {
        Bson::Int32(seconds) if *seconds >= 0 => Some(*seconds),
        _ => None,
    }
}

/// Validates `expireAfterSeconds` of a field TTL index in `createIndexes` with mongod's rules and
/// messages; returns the value mongod stores (Int32, fraction truncated).
pub fn parse_field_expire_after(value: &Bson, spec: &Document) -> CommandResult<i32> {
    let spec_text = document_string(spec);
    let fail = |why: String| {
        CommandError::new(
            ErrorCode::CannotCreateIndex,
            format!("{why}. Index spec: {spec_text}"),
        )
    };
    let Some(number) = tideway_base::bsonutil::as_f64(value) else {
        return Err(fail(format!(
            "TTL index 'expireAfterSeconds' option must be numeric, but received a type of '{}'",
            type_name(value)
        )));
    };
    if number.is_nan() {
        return Err(fail(
            "TTL index 'expireAfterSeconds' option must not be NaN".into(),
        ));
    }
    if number < 0.0 {
        return Err(fail(
            "TTL index 'expireAfterSeconds' option cannot be less than 0".into(),
        ));
    }
    if number > f64::from(i32::MAX) {
        return Err(fail(
            "TTL index 'expireAfterSeconds' must be within the range of a 32-bit integer".into(),
        ));
    }
    Ok(number.trunc() as i32)
}

/// Validates `collMod`'s `index.expireAfterSeconds` for a field index as mongod does: coll_mod.idl
/// reads it as `safeInt` (`BSONElement::safeNumberInt`: any numeric type, NaN as 0, doubles
/// truncated, Decimal128 rounded half to even, clamped to int32; anything else 14), then
/// `validateExpireAfterSeconds` refuses a negative result (72). So `-0.5` is 0 and NaN is 0.
/// (`null` never reaches here: mongod's IDL parser takes it as an absent field.)
pub fn parse_collmod_expire_after(value: &Bson) -> CommandResult<i32> {
    let Some(number) = safe_number_long(value) else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field 'collMod.index.expireAfterSeconds' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            type_name(value)
        )));
    };
    let seconds = number.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    if seconds < 0 {
        return Err(negative_expire_after());
    }
    Ok(seconds)
}

fn negative_expire_after() -> CommandError {
    CommandError::new(
        ErrorCode::InvalidOptions,
        "TTL index 'expireAfterSeconds' option cannot be less than 0",
    )
}

/// The TTL of a clustered collection, from its stored options: `expireAfterSeconds` next to a
/// `clusteredIndex` (stored as Int64 once validated).
pub fn clustered_expire_after(options: &Document) -> Option<i64> {
    if !matches!(options.get("clusteredIndex"), Some(Bson::Document(_))) {
        return None;
    }
    collection_expire_after(options)
}

/// A collection-level `expireAfterSeconds` (clustered or time-series) as stored.
fn collection_expire_after(options: &Document) -> Option<i64> {
    match options.get("expireAfterSeconds") {
        Some(Bson::Int64(seconds)) if *seconds >= 0 => Some(*seconds),
        Some(Bson::Int32(seconds)) if *seconds >= 0 => Some(i64::from(*seconds)),
        _ => None,
    }
}

/// Validates a clustered collection's `expireAfterSeconds` (`create`, top-level `collMod`) as
/// mongod does: create.idl and coll_mod.idl read it as `safeInt64` (`safeNumberLong`), then
/// `validateExpireAfterSeconds(…, kClusteredTTLIndex)` refuses a negative value and one whose
/// milliseconds overflow or exceed the time since the epoch at `now_ms` (72 both).
pub fn parse_clustered_expire_after(value: &Bson, now_ms: i64) -> CommandResult<i64> {
    let Some(seconds) = safe_number_long(value) else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field 'create.expireAfterSeconds' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            type_name(value)
        )));
    };
    if seconds < 0 {
        return Err(negative_expire_after());
    }
    if seconds > i64::MAX / 1000 || seconds * 1000 > now_ms {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
        ));
    }
    Ok(seconds)
}

/// A top-level `collMod` `expireAfterSeconds` of a clustered collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusteredTtlChange {
    /// `"off"`: documents no longer expire by their `_id`.
    Off,
    Seconds(i64),
}

/// Parses `collMod`'s top-level `expireAfterSeconds` as coll_mod.idl's `variant: [string,
/// safeInt64]`: the string `"off"` (another string is 72), or a number validated as in
/// [`parse_clustered_expire_after`]; any other type is 14.
pub fn parse_collmod_clustered_expire_after(
    value: &Bson,
    now_ms: i64,
) -> CommandResult<ClusteredTtlChange> {
    match value {
        Bson::String(off) if off == "off" => Ok(ClusteredTtlChange::Off),
        Bson::String(other) => Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: '{other}'. Accepted value is 'off'"
            ),
        )),
        other if safe_number_long(other).is_some() => {
            parse_clustered_expire_after(other, now_ms).map(ClusteredTtlChange::Seconds)
        }
        other => Err(CommandError::type_mismatch(format!(
            "BSON field 'collMod.expireAfterSeconds' is the wrong type '{}', expected types '[string, long, int, decimal, double]'",
            type_name(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    const T0: i64 = 1_700_000_000_000;

    fn record(doc: Document, last_write_ms: i64) -> Record {
        Record {
            rev: 1,
            last_write_ms,
            ttl: ttl_class(&doc, last_write_ms),
            doc: doc.into(),
        }
    }

    fn cosmos(default: Option<CosmosDefault>) -> TtlPolicies {
        TtlPolicies {
            cosmos: default,
            fields: Vec::new(),
        }
    }

    /// A collection with a TTL index of `expire_after` on `path` (catalog-only, as `_ts`'s is).
    fn meta_with_ttl_index(path: &str, expire_after: Bson) -> CollectionMeta {
        let ttl_index = IndexSpec {
            name: format!("{path}_1"),
            key: vec![(
                path.to_string(),
                tideway_query::keycodec::Direction::Ascending,
            )],
            unique: false,
            sparse: false,
            partial_filter: None,
            spec: doc! {"v": 2, "key": {path: 1}, "name": format!("{path}_1"), "expireAfterSeconds": expire_after},
            catalog_only: path == TS_FIELD,
            collation: None,
        };
        CollectionMeta {
            ns: tideway_storage::Namespace::new("db", "c"),
            uuid: [0; 16],
            options: Document::new(),
            indexes: vec![Arc::new(IndexSpec::id_index()), Arc::new(ttl_index)],
            multikey_indexes: Vec::new(),
        }
    }

    /// Only a default TTL in seconds reads the last-write order, so only it keeps one.
    #[test]
    fn only_a_default_ttl_in_seconds_keeps_the_last_write_order() {
        assert!(keeps_last_write_order(&meta_with_ttl_index(
            TS_FIELD,
            Bson::Int32(60)
        )));
        assert!(!keeps_last_write_order(&meta_with_ttl_index(
            TS_FIELD,
            Bson::Int32(-1)
        )));
        assert!(!keeps_last_write_order(&meta_with_ttl_index(
            "at",
            Bson::Int32(60)
        )));
        let mut plain = meta_with_ttl_index(TS_FIELD, Bson::Int32(60));
        plain.indexes.truncate(1);
        assert!(!keeps_last_write_order(&plain));
    }

    #[test]
    fn valid_ttl_encodings_override() {
        for value in [Bson::Int32(20), Bson::Int64(20), Bson::Double(20.0)] {
            assert_eq!(
                document_ttl(&doc! {"ttl": value.clone()}),
                DocumentTtl::Seconds(20),
                "{value}"
            );
        }
        assert_eq!(document_ttl(&doc! {"ttl": -1}), DocumentTtl::Never);
        assert_eq!(document_ttl(&doc! {"ttl": -1.0}), DocumentTtl::Never);
        assert_eq!(
            document_ttl(&doc! {"ttl": i64::from(i32::MAX)}),
            DocumentTtl::Seconds(i32::MAX)
        );
    }

    #[test]
    fn invalid_ttl_encodings_are_ignored() {
        let decimal: bson::Decimal128 = "20".parse().unwrap();
        for value in [
            Bson::Double(20.5),
            Bson::Int64(2_147_483_649),
            Bson::Int32(0),
            Bson::Int32(-5),
            Bson::String("20".into()),
            Bson::Null,
            Bson::Decimal128(decimal),
            Bson::Double(f64::NAN),
            Bson::Double(3.0e9),
            Bson::Boolean(true),
        ] {
            assert_eq!(
                document_ttl(&doc! {"ttl": value.clone()}),
                DocumentTtl::Unset,
                "{value}"
            );
        }
        assert_eq!(document_ttl(&doc! {"TTL": 5}), DocumentTtl::Unset);
        assert_eq!(document_ttl(&doc! {"a": {"ttl": 5}}), DocumentTtl::Unset);
    }

    #[test]
    fn ttl_class_follows_the_document() {
        assert_eq!(ttl_class(&doc! {}, T0), TtlClass::Default);
        assert_eq!(ttl_class(&doc! {"ttl": 20.5}, T0), TtlClass::Default);
        assert_eq!(ttl_class(&doc! {"ttl": -1}, T0), TtlClass::Never);
        assert_eq!(
            ttl_class(&doc! {"ttl": 30}, T0),
            TtlClass::Own {
                expire_at_ms: T0 + 30_000
            }
        );
    }

    /// The Cosmos matrix: collection default absent / -1 / 60 × document ttl absent / -1 / 30.
    #[test]
    fn cosmos_matrix() {
        let documents = [
            ("absent", doc! {}),
            ("never", doc! {"ttl": -1}),
            ("own 30", doc! {"ttl": 30}),
        ];
        let defaults = [
            ("no index", None),
            ("-1", Some(CosmosDefault::NoDefault)),
            ("60", Some(CosmosDefault::Seconds(60))),
        ];
        let expected = [
            // no index: nothing expires, ttl ignored
            [None, None, None],
            // -1: only documents with their own ttl
            [None, None, Some(T0 + 30_000)],
            // 60: default unless the document says otherwise
            [Some(T0 + 60_000), None, Some(T0 + 30_000)],
        ];
        for ((default_name, default), row) in defaults.iter().zip(expected) {
            for ((doc_name, doc), want) in documents.iter().zip(row) {
                let got = cosmos(*default).expire_at_ms(&record(doc.clone(), T0));
                assert_eq!(got, want, "default {default_name}, document {doc_name}");
            }
        }
    }

    #[test]
    fn expiry_boundary_is_inclusive_at_exactly_ttl_seconds() {
        let policies = cosmos(Some(CosmosDefault::Seconds(10)));
        let stored = record(doc! {}, T0);
        assert!(!policies.is_expired(&stored, T0 + 9_999));
        assert!(policies.is_expired(&stored, T0 + 10_000));
        assert!(policies.is_expired(&stored, T0 + 10_001));
        let own = record(doc! {"ttl": 3}, T0);
        assert!(!policies.is_expired(&own, T0 + 2_999));
        assert!(policies.is_expired(&own, T0 + 3_000));
    }

    #[test]
    fn no_policy_means_nothing_expires() {
        let policies = TtlPolicies::default();
        assert!(!policies.is_expired(&record(doc! {"ttl": 1}, T0), T0 + 1_000_000));
        assert!(policies.expired_predicate_is_none());
    }

    impl TtlPolicies {
        fn expired_predicate_is_none(&self) -> bool {
            Arc::new(self.clone()).expired_predicate(T0).is_none()
        }
    }

    fn field_policy(path: &str, seconds: i32, partial: Option<Document>) -> TtlPolicies {
        TtlPolicies {
            cosmos: None,
            fields: vec![FieldTtl {
                index_name: format!("{path}_1"),
                path: path.into(),
                expire_after_seconds: i64::from(seconds),
                partial: partial.map(|p| Filter::parse(&p).unwrap()),
            }],
        }
    }

    #[test]
    fn field_ttl_uses_dates_only_and_the_earliest_in_arrays() {
        let date = |ms: i64| Bson::DateTime(bson::DateTime::from_millis(ms));
        let policies = field_policy("at", 60, None);
        let expiry = |doc: Document| policies.expire_at_ms(&record(doc, T0));
        assert_eq!(expiry(doc! {"at": date(T0)}), Some(T0 + 60_000));
        assert_eq!(
            expiry(doc! {"at": [date(T0 + 5_000), date(T0 - 5_000), "x"]}),
            Some(T0 + 55_000)
        );
        assert_eq!(expiry(doc! {"at": T0}), None, "numbers never expire");
        assert_eq!(expiry(doc! {"at": "2020-01-01"}), None);
        assert_eq!(
            expiry(doc! {"at": bson::Timestamp { time: 1, increment: 1 }}),
            None
        );
        assert_eq!(expiry(doc! {}), None);
        assert_eq!(expiry(doc! {"at": []}), None);
        let nested = field_policy("a.at", 0, None);
        assert_eq!(
            nested.expire_at_ms(&record(
                doc! {"a": [{"at": date(T0 + 1)}, {"at": date(T0)}]},
                T0
            )),
            Some(T0)
        );
    }

    #[test]
    fn field_ttl_honours_partial_filters() {
        let date = Bson::DateTime(bson::DateTime::from_millis(T0));
        let policies = field_policy("at", 0, Some(doc! {"kind": "session"}));
        assert_eq!(
            policies.expire_at_ms(&record(doc! {"at": date.clone(), "kind": "session"}, T0)),
            Some(T0)
        );
        assert_eq!(
            policies.expire_at_ms(&record(doc! {"at": date, "kind": "user"}, T0)),
            None
        );
    }

    #[test]
    fn the_earliest_policy_wins() {
        let mut policies = field_policy("at", 0, None);
        policies.cosmos = Some(CosmosDefault::Seconds(100));
        let date = Bson::DateTime(bson::DateTime::from_millis(T0 + 5_000));
        assert_eq!(
            policies.expire_at_ms(&record(doc! {"at": date}, T0)),
            Some(T0 + 5_000)
        );
        let late = Bson::DateTime(bson::DateTime::from_millis(T0 + 500_000));
        assert_eq!(
            policies.expire_at_ms(&record(doc! {"at": late}, T0)),
            Some(T0 + 100_000)
        );
    }

    #[test]
    fn cosmos_default_validation() {
        assert_eq!(
            parse_cosmos_default(&Bson::Int32(-1)),
            Ok(CosmosDefault::NoDefault)
        );
        assert_eq!(
            parse_cosmos_default(&Bson::Double(3600.0)),
            Ok(CosmosDefault::Seconds(3600))
        );
        assert_eq!(
            parse_cosmos_default(&Bson::Int64(i64::from(i32::MAX))),
            Ok(CosmosDefault::Seconds(i32::MAX))
        );
        for bad in [
            Bson::Int32(0),
            Bson::Int32(-2),
            Bson::Int64(2_147_483_648),
            Bson::String("60".into()),
            Bson::Double(f64::NAN),
            Bson::Double(1.5),
        ] {
            let error = parse_cosmos_default(&bad).unwrap_err();
            assert_eq!(error.code, ErrorCode::CannotCreateIndex, "{bad}");
            assert!(error.errmsg.contains("-1"), "{}", error.errmsg);
        }
    }

    #[test]
    fn field_expire_after_validation_matches_mongod() {
        let spec = doc! {"key": {"w": 1}, "name": "w_1"};
        assert_eq!(parse_field_expire_after(&Bson::Double(60.9), &spec), Ok(60));
        assert_eq!(parse_field_expire_after(&Bson::Int64(60), &spec), Ok(60));
        assert_eq!(parse_field_expire_after(&Bson::Int32(0), &spec), Ok(0));
        let error = parse_field_expire_after(&Bson::String("x".into()), &spec).unwrap_err();
        assert_eq!(error.code, ErrorCode::CannotCreateIndex);
        assert!(error.errmsg.starts_with(
            "TTL index 'expireAfterSeconds' option must be numeric, but received a type of 'string'. Index spec: "
        ));
        for bad in [
            Bson::Double(f64::NAN),
            Bson::Int32(-1),
            Bson::Int64(2_147_483_648),
        ] {
            assert_eq!(
                parse_field_expire_after(&bad, &spec).unwrap_err().code,
                ErrorCode::CannotCreateIndex
            );
        }
        assert_eq!(
            parse_collmod_expire_after(&Bson::Int64(2_147_483_648)),
            Ok(i32::MAX)
        );
        assert_eq!(parse_collmod_expire_after(&Bson::Double(30.5)), Ok(30));
        assert_eq!(
            parse_collmod_expire_after(&Bson::Int32(-1))
                .unwrap_err()
                .code,
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            parse_collmod_expire_after(&Bson::String("1".into()))
                .unwrap_err()
                .code,
            ErrorCode::TypeMismatch
        );
    }

    /// coll_mod.idl `safeInt` (bsonelement.h `safeNumberInt`) then `validateExpireAfterSeconds`.
    #[test]
    fn collmod_expire_after_reads_safe_int() {
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        for (value, expected) in [
            (decimal("2.5"), 2),
            (decimal("3.5"), 4),
            (decimal("-0.5"), 0),
            (decimal("NaN"), 0),
            (decimal("1E+40"), i32::MAX),
            (Bson::Double(-0.5), 0),
            (Bson::Double(f64::NAN), 0),
            (Bson::Double(f64::INFINITY), i32::MAX),
        ] {
            assert_eq!(parse_collmod_expire_after(&value), Ok(expected), "{value}");
        }
        for bad in [decimal("-0.51"), decimal("-Infinity"), Bson::Double(-1.0)] {
            assert_eq!(
                parse_collmod_expire_after(&bad).unwrap_err().code,
                ErrorCode::InvalidOptions,
                "{bad}"
            );
        }
    }

    /// index_key_validate.cpp `validateExpireAfterSeconds(…, kClusteredTTLIndex)`; coll_mod.cpp's
    /// `"off"` and its string error.
    #[test]
    fn clustered_expire_after_validation() {
        let now = T0;
        assert_eq!(parse_clustered_expire_after(&Bson::Int64(5), now), Ok(5));
        assert_eq!(parse_clustered_expire_after(&Bson::Double(5.9), now), Ok(5));
        assert_eq!(
            parse_clustered_expire_after(&Bson::Int64(now / 1000), now),
            Ok(now / 1000)
        );
        for bad in [
            Bson::Int64(-1),
            Bson::Int64(now / 1000 + 1),
            Bson::Int64(i64::MAX),
        ] {
            assert_eq!(
                parse_clustered_expire_after(&bad, now).unwrap_err().code,
                ErrorCode::InvalidOptions,
                "{bad}"
            );
        }
        assert_eq!(
            parse_collmod_clustered_expire_after(&Bson::from("off"), now),
            Ok(ClusteredTtlChange::Off)
        );
        assert_eq!(
            parse_collmod_clustered_expire_after(&Bson::from("on"), now)
                .unwrap_err()
                .errmsg,
            "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: 'on'. Accepted value is 'off'"
        );
        assert_eq!(
            parse_collmod_clustered_expire_after(&Bson::Boolean(true), now)
                .unwrap_err()
                .code,
            ErrorCode::TypeMismatch
        );
    }

    #[test]
    fn a_clustered_ttl_expires_date_ids_only() {
        let options = doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}, "expireAfterSeconds": 10_i64};
        assert_eq!(clustered_expire_after(&options), Some(10));
        assert_eq!(
            clustered_expire_after(&doc! {"expireAfterSeconds": 10_i64}),
            None
        );
        let policies = TtlPolicies {
            cosmos: None,
            fields: vec![FieldTtl {
                index_name: IndexSpec::ID_INDEX_NAME.into(),
                path: "_id".into(),
                expire_after_seconds: 10,
                partial: None,
            }],
        };
        let dated = record(doc! {"_id": bson::DateTime::from_millis(T0)}, T0);
        assert!(!policies.is_expired(&dated, T0 + 9_999));
        assert!(policies.is_expired(&dated, T0 + 10_000));
        let named = record(doc! {"_id": "x"}, T0);
        assert!(!policies.is_expired(&named, i64::MAX));
    }

    #[test]
    fn clients_cannot_write_ts() {
        assert!(check_client_document(&doc! {"a": 1, "nested": {"_ts": 1}}).is_ok());
        assert_eq!(
            check_client_document(&doc! {"_ts": 1}).unwrap_err().code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn meta_values() {
        let policies = cosmos(Some(CosmosDefault::Seconds(10)));
        let stored = record(doc! {}, T0 + 999);
        assert_eq!(
            policies.meta_value(META_LAST_MODIFIED, &stored),
            Bson::Int32(1_700_000_000)
        );
        assert_eq!(
            policies.meta_value(META_EXPIRE_AT, &stored),
            Bson::DateTime(bson::DateTime::from_millis(T0 + 10_999))
        );
        assert_eq!(
            TtlPolicies::default().meta_value(META_EXPIRE_AT, &stored),
            Bson::Null
        );
    }
}
