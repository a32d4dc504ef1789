//! Index commands: `createIndexes` (with mongod's spec validation and conflict rules), `listIndexes`,
//! `dropIndexes`. The engine builds and maintains indexes; this module decides what a valid spec is.
//! The rules specific to hashed, wildcard and text indexes live in `index_kinds`.

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{collection_namespace, validate_writable_namespace};
use crate::commands::find::buffered_cursor;
use crate::commands::index_kinds::{self, TEXT_OPTIONS};
use crate::commands::{clustered, collection_defaults};
use tideway_base::display::document_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::reaper;
use tideway_exec::timeseries;
use tideway_exec::ttl;
use tideway_exec::validation;
use tideway_query::collation::{Collation, CollationChoice};
use tideway_query::keycodec::Direction;
use tideway_query::Filter;
use tideway_storage::{CollectionMeta, IndexKind, IndexSpec, Namespace};
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "createIndexes",
        aliases: &[],
        help: "Create ascending/descending single-field or compound indexes (unique, sparse, partial), hashed, wildcard ($**, wildcardProjection) and text indexes.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(create_indexes),
    },
    CommandSpec {
        name: "listIndexes",
        aliases: &[],
        help: "The indexes of a collection.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(list_indexes),
    },
    CommandSpec {
        name: "collMod",
        aliases: &[],
        help: "Change an index: {collMod: coll, index: {name | keyPattern, expireAfterSeconds?, hidden?}}.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(coll_mod),
    },
    CommandSpec {
        name: "dropIndexes",
        aliases: &["deleteIndexes"],
        help: "Drop indexes by name, key pattern, list of names, or '*' (all but _id).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(drop_indexes),
    },
];

/// mongod's limit on indexes per collection, `_id_` included.
const MAX_INDEXES: usize = 64;

/// Index options tideway understands; any other field is 197 InvalidIndexSpecificationOption.
const KNOWN_OPTIONS: &[&str] = &[
    "v",
    "key",
    "name",
    "unique",
    "sparse",
    "partialFilterExpression",
    "hidden",
    "background",
    "ns",
    "collation",
    "expireAfterSeconds",
    "wildcardProjection",
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
];
/// Fields an `_id` index spec may carry.
const ID_INDEX_OPTIONS: &[&str] = &["v", "key", "name", "ns", "collation", "background"];
/// Fields that do not distinguish one index from another when comparing specs.
const NON_DISTINGUISHING: &[&str] = &["v", "name", "background", "ns"];

fn spec_error(spec: &Document, why: &str) -> CommandError {
    CommandError::new(
        ErrorCode::InvalidIndexSpecificationOption,
        format!(
            "Error in specification {} :: caused by :: {why} Specification: {}",
            document_string(spec),
            document_string(spec)
        ),
    )
}

fn cannot_create(spec: &Document, why: &str) -> CommandError {
    CommandError::new(
        ErrorCode::CannotCreateIndex,
        format!(
            "Error in specification {} :: caused by :: {why}",
            document_string(spec)
        ),
    )
}

/// Validates a requested spec and normalises it to what `listIndexes` will show; an index
/// without `collation` takes the collection's default (`default_collation`).
fn parse_index_spec(
    raw: &Document,
    default_collation: &CollationChoice,
) -> CommandResult<IndexSpec> {
    let key_pattern = match raw.get("key") {
        Some(Bson::Document(key)) if !key.is_empty() => key,
        Some(Bson::Document(_)) => return Err(cannot_create(raw, "Index keys cannot be empty.")),
        Some(other) => {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes.key",
                other,
                "object",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    let name = match raw.get("name") {
        Some(Bson::String(name)) if name == "*" => {
            return Err(CommandError::bad_value("The index name '*' is not valid."))
        }
        Some(Bson::String(name)) if name.contains('\0') => {
            return Err(cannot_create(
                raw,
                "index name cannot contain null characters",
            ))
        }
        Some(Bson::String(name)) if !name.is_empty() => name.clone(),
        Some(Bson::String(_)) => return Err(cannot_create(raw, "index name cannot be empty")),
        Some(other) => {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes.name",
                other,
                "string",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                "The 'name' field is a required property of an index specification",
            ))
        }
    };
    let kind = index_kinds::check_key_pattern(raw, key_pattern, &|why| cannot_create(raw, why))?;
    if kind != IndexKind::Text {
        if let Some(option) = TEXT_OPTIONS
            .iter()
            .find(|option| raw.contains_key(**option))
        {
            return Err(CommandError::new(
                ErrorCode::CannotCreateIndex,
                format!(
                    "Invalid index specification {}; the field '{option}' can only be specified with text indexes",
                    document_string(raw)
                ),
            ));
        }
    }
    let wildcard_projection = match raw.get("wildcardProjection") {
        Some(projection) => Some(index_kinds::check_wildcard_projection(
            key_pattern,
            projection,
        )?),
        None => None,
    };
    let text_spec = match kind {
        IndexKind::Text => Some(index_kinds::normalize_text_spec(raw, key_pattern)?),
        _ => None,
    };
    let mut key = Vec::new();
    for (field, direction) in text_spec.as_ref().map_or(key_pattern, |text| &text.key) {
        if kind != IndexKind::Ordered {
            let descending = tideway_base::bsonutil::as_f64(direction).is_some_and(|d| d < 0.0);
            key.push((
                field.clone(),
                if descending {
                    Direction::Descending
                } else {
                    Direction::Ascending
                },
            ));
            continue;
        }
        if field.is_empty() || field.starts_with('$') {
            return Err(cannot_create(
                raw,
                &format!("Index key contains an illegal field name: '{field}'."),
            ));
        }
        let direction = match direction {
            Bson::String(kind) => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    format!("tideway does not support '{kind}' indexes, only ascending and descending keys"),
                ))
            }
            number => match tideway_base::bsonutil::as_f64(number) {
                Some(value) if value > 0.0 => Direction::Ascending,
                Some(value) if value < 0.0 => Direction::Descending,
                Some(_) => return Err(cannot_create(raw, "Values in the index key pattern cannot be 0.")),
                None => {
                    return Err(cannot_create(
                        raw,
                        &format!(
                            "Values in v:2 index key pattern cannot be of type {}. Only numbers > 0, numbers < 0, and strings are allowed.",
                            tideway_base::display::type_name(number)
                        ),
                    ))
                }
            },
        };
        key.push((field.clone(), direction));
    }
    let is_id_index = key.len() == 1 && key[0].0 == "_id";
    let allowed = if is_id_index {
        ID_INDEX_OPTIONS
    } else {
        KNOWN_OPTIONS
    };
    if let Some(unknown) = raw.keys().find(|field| !allowed.contains(&field.as_str())) {
        let why = if is_id_index {
            format!("The field '{unknown}' is not valid for an _id index specification.")
        } else {
            format!("The field '{unknown}' is not valid for an index specification.")
        };
        return Err(spec_error(raw, &why));
    }
    let expire_after = ttl_option(raw, &key, key_pattern, kind)?;
    let collation = match raw.get("collation") {
        None => default_collation.clone(),
        Some(Bson::Document(spec)) => Collation::parse(spec)?,
        Some(other) => {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes.collation",
                other,
                "object",
            ))
        }
    };
    if let Some(collation) = &collation {
        match kind {
            IndexKind::Ordered | IndexKind::Hashed => {}
            IndexKind::Text => {
                return Err(cannot_create(
                    raw,
                    &format!(
                        "Index type 'text' does not support collation: {}",
                        document_string(collation.spec())
                    ),
                ))
            }
            IndexKind::Wildcard => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "tideway supports a non-simple collation on ascending, descending and hashed \
                     indexes only",
                ))
            }
        }
    }
    let flag = |field: &str| -> CommandResult<bool> {
        match raw.get(field) {
            None | Some(Bson::Null) => Ok(false),
            Some(Bson::Boolean(value)) => Ok(*value),
            Some(value) => tideway_base::bsonutil::as_f64(value)
                .map(|number| number != 0.0)
                .ok_or_else(|| {
                    CommandError::wrong_type(
                        "createIndexes",
                        &format!("indexes.{field}"),
                        value,
                        "bool",
                    )
                }),
        }
    };
    let unique = flag("unique")?;
    let sparse = flag("sparse")?;
    let hidden = flag("hidden")?;
    if hidden && is_id_index {
        return Err(CommandError::bad_value("can't hide _id index"));
    }
    let partial_filter = match raw.get("partialFilterExpression") {
        None => None,
        Some(Bson::Document(filter)) => {
            if Filter::parse(filter)?.refuse_near()?.text().is_some() {
                return Err(CommandError::new(
                    ErrorCode::CannotCreateIndex,
                    "unsupported expression in partial index: TEXT",
                ));
            }
            Some(filter.clone())
        }
        Some(other) => {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes.partialFilterExpression",
                other,
                "object",
            ))
        }
    };
    let catalog_only = key.iter().any(|(field, _)| field == ttl::TS_FIELD);
    if catalog_only && (unique || sparse || partial_filter.is_some()) {
        return Err(cannot_create(
            raw,
            "The _ts TTL index takes no unique, sparse or partialFilterExpression option.",
        ));
    }
    let stored_key = text_spec
        .as_ref()
        .map_or_else(|| key_pattern.clone(), |text| text.key.clone());
    let mut spec = doc! {"v": 2, "key": stored_key, "name": name.as_str()};
    if let Some(seconds) = expire_after {
        spec.insert("expireAfterSeconds", seconds);
    }
    if unique {
        spec.insert("unique", true);
    }
    if sparse {
        spec.insert("sparse", true);
    }
    if hidden {
        spec.insert("hidden", true);
    }
    if let Some(filter) = &partial_filter {
        spec.insert("partialFilterExpression", filter.clone());
    }
    if let Some(projection) = wildcard_projection {
        spec.insert("wildcardProjection", projection);
    }
    if let Some(text) = &text_spec {
        spec.extend(index_kinds::text_spec_fields(text));
    }
    if let Some(collation) = &collation {
        spec.insert("collation", collation.spec().clone());
    }
    Ok(IndexSpec {
        name,
        key,
        unique,
        sparse,
        partial_filter,
        spec,
        catalog_only,
        collation,
    })
}

/// The `expireAfterSeconds` to store for a requested index, if any, by the rules in `ttl`: on
/// `{_ts: 1}` it is the Cosmos collection default (and `_ts` may be indexed no other way, since it
/// is server metadata); on any other single field it makes a MongoDB TTL index. As mongod's
/// `validateIndexSpecTTL`, "single field" counts the key pattern as the client wrote it
/// (`user_key`), so `{a: "hashed"}` and `{a: "text"}` take the option (the TTL rules then give
/// them no policy, as mongod's TTL monitor skips special indexes) and `{a: 1, b: "hashed"}` does not.
fn ttl_option(
    raw: &Document,
    key: &[(String, Direction)],
    user_key: &Document,
    kind: IndexKind,
) -> CommandResult<Option<i32>> {
    let value = raw.get("expireAfterSeconds");
    let on_ts = key.iter().any(|(field, _)| field == ttl::TS_FIELD);
    let fields = if kind == IndexKind::Ordered || !on_ts {
        user_key.len()
    } else {
        // `_ts` in a special index is refused below, as any other `_ts` index but `{_ts: 1}`.
        usize::MAX
    };
    match (value, on_ts, fields) {
        (Some(value), true, 1) => Ok(Some(match ttl::parse_cosmos_default(value)? {
            ttl::CosmosDefault::Seconds(seconds) => seconds,
            ttl::CosmosDefault::NoDefault => -1,
        })),
        (_, true, _) => Err(cannot_create(
            raw,
            "The field '_ts' is maintained by the server; it can only be indexed as {_ts: 1} with expireAfterSeconds, \
             which sets the collection's default time-to-live.",
        )),
        (Some(_), false, 2..) => Err(CommandError::new(
            ErrorCode::CannotCreateIndex,
            format!(
                "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {}",
                document_string(raw)
            ),
        )),
        (Some(value), false, _) => Ok(Some(ttl::parse_field_expire_after(value, raw)?)),
        (None, false, _) => Ok(None),
    }
}

/// The options that distinguish two specs with the same key.
fn distinguishing(spec: &Document) -> Document {
    spec.iter()
        .filter(|(field, _)| !NON_DISTINGUISHING.contains(&field.as_str()))
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect()
}

/// How a requested index relates to an existing one: `Ok(true)` if it already exists identically.
fn check_conflict(requested: &IndexSpec, existing: &IndexSpec) -> CommandResult<bool> {
    let same_name = requested.name == existing.name;
    let same_key = requested.key_pattern() == existing.key_pattern();
    let same_options = distinguishing(&requested.spec) == distinguishing(&existing.spec);
    let pair = format!(
        "Requested index: {}, existing index: {}",
        document_string(&requested.spec),
        document_string(&existing.spec)
    );
    match (same_name, same_key, same_options) {
        (true, true, true) => Ok(true),
        (true, false, _) => Err(CommandError::new(
            ErrorCode::IndexKeySpecsConflict,
            format!(
                "An existing index has the same name as the requested index. When index names are not specified, \
                 they are auto generated and can cause conflicts. Please refer to our documentation. {pair}"
            ),
        )),
        (true, true, false) => Err(CommandError::new(
            ErrorCode::IndexOptionsConflict,
            format!("An equivalent index already exists with the same name but different options. {pair}"),
        )),
        (false, true, true) => Err(CommandError::new(
            ErrorCode::IndexOptionsConflict,
            format!("Index already exists with a different name: {}", existing.name),
        )),
        (false, true, false) => Err(CommandError::new(
            ErrorCode::IndexOptionsConflict,
            format!("An equivalent index already exists with a different name and options. {pair}"),
        )),
        (false, false, _) => Ok(false),
    }
}

/// [`reaper::change_policies`] with the server's reaper, policy gates, storage and clock.
async fn change_policies<T>(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    ttl_involved: bool,
    change: impl std::future::Future<Output = CommandResult<T>>,
) -> CommandResult<T> {
    let state = ctx.state;
    reaper::change_policies(
        &state.reaper,
        &state.policy_gates,
        state.storage.as_ref(),
        state.clock.as_ref(),
        ns,
        ttl_involved,
        change,
    )
    .await
}

async fn create_indexes(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    let creates_ttl = matches!(body.get("indexes"), Some(Bson::Array(specs))
        if specs.iter().any(|spec| matches!(spec, Bson::Document(spec) if spec.contains_key("expireAfterSeconds"))));
    change_policies(ctx, &ns, creates_ttl, build_indexes(ctx, body, &ns)).await
}

async fn build_indexes(ctx: &CommandContext<'_>, body: &Document, ns: &Namespace) -> CommandResult {
    let ns = ns.clone();
    validate_writable_namespace(&ns)?;
    let raw_specs = match body.get("indexes") {
        Some(Bson::Array(specs)) => specs,
        Some(other) => {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes",
                other,
                "array",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
    if raw_specs.is_empty() {
        return Err(CommandError::bad_value(
            "Must specify at least one index to create",
        ));
    }
    let storage = ctx.storage();
    let existing = storage.collection(&ns).await?;
    let default_collation = existing
        .as_ref()
        .map_or(Ok(None), |meta| meta.default_collation())?;
    let existing = existing.map(timeseries::client_meta);
    let timeseries = existing
        .as_ref()
        .and_then(|meta| timeseries::of(&meta.options));
    let mut requested = Vec::new();
    for raw in raw_specs {
        let Bson::Document(raw) = raw else {
            return Err(CommandError::wrong_type(
                "createIndexes",
                "indexes",
                raw,
                "object",
            ));
        };
        let spec = parse_index_spec(raw, &default_collation)?;
        if let Some(timeseries) = &timeseries {
            timeseries::check_index(timeseries, raw, &spec)?;
        }
        requested.push(spec);
    }
    let created_collection = existing.is_none();
    let existing_indexes: Vec<IndexSpec> = existing.map_or_else(
        || vec![IndexSpec::id_index()],
        |meta| meta.indexes.iter().map(|index| (**index).clone()).collect(),
    );
    let mut to_create: Vec<IndexSpec> = Vec::new();
    'requested: for spec in requested {
        for other in existing_indexes.iter().chain(&to_create) {
            if check_conflict(&spec, other)? {
                continue 'requested;
            }
        }
        if spec.kind() == IndexKind::Text {
            if let Some(text) = existing_indexes
                .iter()
                .chain(&to_create)
                .find(|other| other.kind() == IndexKind::Text)
            {
                return Err(index_kinds::second_text_index(&text.name));
            }
        }
        to_create.push(spec);
    }
    let before = existing_indexes.len();
    if to_create.is_empty() {
        return Ok(doc! {
            "numIndexesBefore": before as i32,
            "numIndexesAfter": before as i32,
            "note": "all indexes already exist",
            "createdCollectionAutomatically": false,
        });
    }
    let is_capped = storage
        .collection(&ns)
        .await?
        .is_some_and(|meta| meta.capped().is_some());
    if is_capped
        && to_create
            .iter()
            .any(|spec| spec.spec.contains_key("expireAfterSeconds"))
    {
        return Err(tideway_exec::capped::ttl_index_refused());
    }
    if before + to_create.len() > MAX_INDEXES {
        return Err(CommandError::new(
            ErrorCode::CannotCreateIndex,
            format!(
                "add index fails, too many indexes for {ns} key:{}",
                document_string(&to_create[0].key_pattern())
            ),
        ));
    }
    let meta = timeseries::client_meta(storage.create_indexes(&ns, to_create).await?);
    Ok(doc! {
        "numIndexesBefore": before as i32,
        "numIndexesAfter": meta.indexes.len() as i32,
        "createdCollectionAutomatically": created_collection,
    })
}

async fn list_indexes(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    let ns = collection_namespace(ctx, body)?;
    let Some(meta) = ctx.storage().collection(&ns).await? else {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        ));
    };
    let meta = timeseries::client_meta(meta);
    let specs = meta
        .indexes
        .iter()
        .map(|index| clustered::listed_spec(&meta, index))
        .collect();
    buffered_cursor(
        ctx,
        body,
        format!("{}.$cmd.listIndexes.{}", ns.db, ns.coll),
        specs,
    )
    .await
}

async fn drop_indexes(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    let has_policies = ctx
        .state
        .storage
        .collection(&ns)
        .await?
        .is_some_and(|meta| !ttl::TtlPolicies::from_meta(&meta).is_empty());
    change_policies(ctx, &ns, has_policies, remove_indexes(ctx, body, &ns)).await
}

async fn remove_indexes(
    ctx: &CommandContext<'_>,
    body: &Document,
    ns: &Namespace,
) -> CommandResult {
    let ns = ns.clone();
    let storage = ctx.storage();
    let Some(meta) = storage.collection(&ns).await? else {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("ns not found {ns}"),
        ));
    };
    let meta = timeseries::client_meta(meta);
    clustered::check_drop_indexes(&meta, body.get("index"))?;
    let count = meta.indexes.len() as i32;
    let find_by_name = |name: &str| -> CommandResult<String> {
        if name == IndexSpec::ID_INDEX_NAME {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "cannot drop _id index",
            ));
        }
        meta.indexes
            .iter()
            .find(|index| index.name == name)
            .map(|index| index.name.clone())
            .ok_or_else(|| {
                CommandError::new(
                    ErrorCode::IndexNotFound,
                    format!("index not found with name [{name}]"),
                )
            })
    };
    let (names, drop_all): (Vec<String>, bool) = match body.get("index") {
        Some(Bson::String(star)) if star == "*" => (
            meta.indexes
                .iter()
                .filter(|index| !index.is_id_index())
                .map(|index| index.name.clone())
                .collect(),
            true,
        ),
        Some(Bson::String(name)) => (vec![find_by_name(name)?], false),
        Some(Bson::Array(names)) => {
            let mut found = Vec::new();
            for name in names {
                let Bson::String(name) = name else {
                    return Err(CommandError::wrong_type(
                        "dropIndexes",
                        "index",
                        name,
                        "string",
                    ));
                };
                found.push(find_by_name(name)?);
            }
            (found, false)
        }
        Some(Bson::Document(key)) => {
            let index = meta.index_with_key(key).ok_or_else(|| {
                CommandError::new(
                    ErrorCode::IndexNotFound,
                    format!("can't find index with key: {}", document_string(key)),
                )
            })?;
            (vec![find_by_name(&index.name)?], false)
        }
        Some(other) => {
            return Err(CommandError::wrong_type(
                "dropIndexes",
                "index",
                other,
                "string",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'dropIndexes.index' is missing but a required field",
            ))
        }
    };
    if !names.is_empty() {
        storage.drop_indexes(&ns, &names).await?;
    }
    let mut reply = doc! {"nIndexesWas": count};
    if drop_all {
        reply.insert("msg", "non-_id indexes dropped for collection");
    }
    Ok(reply)
}

/// The new `expireAfterSeconds` for `index` in `collMod`, with mongod's errors (72, 14) and, for the
/// `_ts` index, the Cosmos rules.
fn collmod_expire_after(index: &IndexSpec, value: &Bson) -> CommandResult<i32> {
    let invalid = |message: &str| CommandError::new(ErrorCode::InvalidOptions, message);
    if index.is_id_index() {
        return Err(invalid("the _id field does not support TTL indexes"));
    }
    if ttl::is_ts_index_key(index) {
        return match ttl::parse_cosmos_default(value) {
            Ok(ttl::CosmosDefault::Seconds(seconds)) => Ok(seconds),
            Ok(ttl::CosmosDefault::NoDefault) => Ok(-1),
            Err(error) => Err(invalid(&error.errmsg)),
        };
    }
    // mongod's collMod counts the stored key pattern's fields and nothing else: a single-field
    // hashed or wildcard index becomes a TTL index the TTL monitor skips (see
    // `ttl::TtlPolicies::from_meta`); a text index's stored key `{_fts, _ftsx}` has two.
    if index.key_pattern().len() > 1 {
        return Err(invalid(
            "TTL indexes are single-field indexes, compound indexes do not support TTL",
        ));
    }
    if index
        .spec
        .get("expireAfterSeconds")
        .is_some_and(|old| tideway_base::bsonutil::as_f64(old).is_none())
    {
        return Err(invalid("existing expireAfterSeconds field is not a number"));
    }
    ttl::parse_collmod_expire_after(value)
}

async fn coll_mod(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    let changes_ttl = body.contains_key(clustered::EXPIRE_AFTER_SECONDS)
        || matches!(body.get("index"), Some(Bson::Document(change)) if change.contains_key("expireAfterSeconds"));
    change_policies(ctx, &ns, changes_ttl, modify_collection(ctx, body, &ns)).await
}

async fn modify_collection(
    ctx: &CommandContext<'_>,
    body: &Document,
    ns: &Namespace,
) -> CommandResult {
    let ns = ns.clone();
    if let Some((option, _)) = tideway_base::command::command_fields(body).find(|(field, _)| {
        ![
            "index",
            "cappedSize",
            "cappedMax",
            clustered::EXPIRE_AFTER_SECONDS,
            timeseries::OPTION,
        ]
        .contains(&field.as_str())
            && !validation::OPTIONS.contains(&field.as_str())
            && !collection_defaults::COLL_MOD_OPTIONS.contains(&field.as_str())
    }) {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            format!("tideway's collMod supports only index changes, not '{option}'"),
        ));
    }
    let storage = ctx.storage();
    let Some(meta) = storage.collection(&ns).await? else {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        ));
    };
    timeseries::check_coll_mod(&meta, body)?;
    let meta = timeseries::client_meta(meta);
    let makes_ttl = matches!(body.get("index"), Some(Bson::Document(change)) if change.contains_key("expireAfterSeconds"));
    if makes_ttl && meta.capped().is_some() {
        return Err(tideway_exec::capped::ttl_coll_mod_refused());
    }
    // Collection options (validation settings, capped limits, a clustered TTL): checked, then
    // stored once the whole command is known to be valid.
    let mut options = meta.options.clone();
    for (name, value) in tideway_base::command::command_fields(body) {
        if validation::OPTIONS.contains(&name.as_str()) {
            match validation::check_option("collMod", &ns, name, value)? {
                Some(stored) => options.insert(name.clone(), stored),
                None => options.remove(name),
            };
        }
        // A null option is an absent one (mongod's IDL parser).
        if collection_defaults::COLL_MOD_OPTIONS.contains(&name.as_str())
            && matches!(value, Bson::Document(_))
        {
            let engine = storage.engine_name();
            match collection_defaults::check_option(&ns, name, value, engine)? {
                Some(stored) => options.insert(name.clone(), stored),
                None => options.remove(name),
            };
        }
    }
    tideway_exec::capped::apply_coll_mod(&meta, body, &mut options)?;
    if let Some(change) = clustered::parse_coll_mod(&meta, body, ctx.state.clock.now_ms())? {
        clustered::apply_coll_mod(&mut options, change);
    }
    timeseries::apply_coll_mod(&mut options, body)?;
    let reply = match body.get("index") {
        Some(change) => modify_index(ctx, &ns, &meta, change).await?,
        None => Document::new(),
    };
    if options != meta.options {
        storage.set_collection_options(&ns, options).await?;
    }
    Ok(reply)
}

/// `collMod`'s `index` change.
async fn modify_index(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    meta: &CollectionMeta,
    change: &Bson,
) -> CommandResult {
    let storage = ctx.storage();
    let Bson::Document(change) = change else {
        return Err(CommandError::wrong_type(
            "collMod", "index", change, "object",
        ));
    };
    clustered::check_hide_index(meta, change)?;
    let index = match (change.get("name"), change.get("keyPattern")) {
        (Some(Bson::String(name)), _) => meta.index_named(name).ok_or_else(|| {
            CommandError::new(
                ErrorCode::IndexNotFound,
                format!("cannot find index {name} for ns {ns}"),
            )
        })?,
        (None, Some(Bson::Document(key))) => meta.index_with_key(key).ok_or_else(|| {
            CommandError::new(
                ErrorCode::IndexNotFound,
                format!("cannot find index {} for ns {ns}", document_string(key)),
            )
        })?,
        _ => {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "Must specify either index name or key pattern.",
            ))
        }
    };
    if change.contains_key("unique") || change.contains_key("prepareUnique") {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway's collMod does not convert indexes to unique",
        ));
    }
    // mongod's IDL parser takes a null (or undefined) field as absent.
    let present = |field: &str| {
        change
            .get(field)
            .filter(|value| !matches!(value, Bson::Null | Bson::Undefined))
    };
    let expire_after = present("expireAfterSeconds");
    let hidden = present("hidden");
    if expire_after.is_none() && hidden.is_none() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "no expireAfterSeconds, hidden, unique, or prepareUnique field",
        ));
    }
    let mut spec = index.spec.clone();
    let mut reply = Document::new();
    if let Some(value) = expire_after {
        let new = collmod_expire_after(index, value)?;
        let old = spec
            .get("expireAfterSeconds")
            .and_then(tideway_base::bsonutil::as_f64)
            .map(|old| old as i64);
        // coll_mod_index.cpp replies with both even when the value does not change.
        if let Some(old) = old {
            reply.insert("expireAfterSeconds_old", old);
        }
        reply.insert("expireAfterSeconds_new", i64::from(new));
        spec.insert("expireAfterSeconds", new);
    }
    if let Some(value) = hidden {
        let Bson::Boolean(new) = value else {
            return Err(CommandError::wrong_type(
                "collMod",
                "index.hidden",
                value,
                "bool",
            ));
        };
        if index.is_id_index() {
            return Err(CommandError::bad_value("can't hide _id index"));
        }
        let old = spec.get_bool("hidden").unwrap_or(false);
        if old != *new {
            reply.insert("hidden_old", old);
            reply.insert("hidden_new", *new);
            if *new {
                spec.insert("hidden", true);
            } else {
                spec.remove("hidden");
            }
        }
    }
    if spec != index.spec {
        storage.update_index_spec(ns, &index.name, spec).await?;
    }
    Ok(reply)
}
