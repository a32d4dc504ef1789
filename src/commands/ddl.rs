//! Catalog commands: `create`, `drop`, `dropDatabase`, `listDatabases`, `listCollections`,
//! `renameCollection`, `dbStats`, `collStats`. Databases and collections also come into being
//! implicitly on first write (storage does that); these commands manage them explicitly.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};

use crate::async_handler;
use crate::auth::privileges::{Action, Target};
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{
    collection_namespace, optional_bool, optional_document, validate_database_name,
    validate_writable_namespace,
};
use crate::commands::find::buffered_cursor;
use crate::commands::{clustered, collection_defaults};
use tideway_base::command::command_fields;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::executor::CollectionView;
use tideway_exec::{timeseries, ttl};
use tideway_query::collation::Collation;
use tideway_query::Filter;
use tideway_storage::{CollectionMeta, CollectionStats, Namespace, StorageError};
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "create",
        aliases: &[],
        help: "Create a collection explicitly.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(create),
    },
    CommandSpec {
        name: "drop",
        aliases: &[],
        help: "Drop a collection and its indexes.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(drop),
    },
    CommandSpec {
        name: "dropDatabase",
        aliases: &[],
        help: "Drop every collection of the database.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(drop_database),
    },
    CommandSpec {
        name: "listDatabases",
        aliases: &[],
        help: "Databases with their sizes (nameOnly, filter).",
        admin_only: true,
        test_only: false,
        handler: async_handler!(list_databases),
    },
    CommandSpec {
        name: "listCollections",
        aliases: &[],
        help: "Collections of the database (filter, nameOnly).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(list_collections),
    },
    CommandSpec {
        name: "renameCollection",
        aliases: &[],
        help: "Rename a collection, within or across databases (dropTarget).",
        admin_only: true,
        test_only: false,
        handler: async_handler!(rename_collection),
    },
    CommandSpec {
        name: "dbStats",
        aliases: &["dbstats"],
        help: "Object, data, storage and index sizes of the database.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(db_stats),
    },
    CommandSpec {
        name: "collStats",
        aliases: &["collstats"],
        help: "Document count and sizes of a collection.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(coll_stats),
    },
];

/// `create` options tideway stores and honours (or that have no effect on a standalone).
const SUPPORTED_CREATE_OPTIONS: &[&str] = &["idIndex", "autoIndexId", "flags"];

async fn create(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    // Options are validated before anything else (whatever their order in the command): a
    // time series, the clustered index, then the capped options in mongod's order (`capped`,
    // `size`, `max`).
    let now_ms = ctx.state.clock.now_ms();
    let timeseries = timeseries::validate_create(&ns, body)?;
    let timeseries_expiry = match (&timeseries, body.get(clustered::EXPIRE_AFTER_SECONDS)) {
        (None, _) | (_, None | Some(Bson::Null | Bson::Undefined)) => None,
        (Some(_), Some(value)) => Some(ttl::parse_clustered_expire_after(value, now_ms)?),
    };
    let clustered = match timeseries {
        Some(_) => None,
        None => clustered::validate_create(body, now_ms)?,
    };
    let mut options = tideway_exec::capped::create_options(body)?.unwrap_or_default();
    for (name, value) in command_fields(body) {
        if matches!(name.as_str(), "capped" | "size" | "max") {
            continue;
        }
        if let Some(spec) = &timeseries {
            if name == timeseries::OPTION {
                options.insert(name.clone(), spec.clone());
                continue;
            }
            if name == clustered::EXPIRE_AFTER_SECONDS {
                if let Some(seconds) = timeseries_expiry {
                    options.insert(name.clone(), seconds);
                }
                continue;
            }
        }
        if name == clustered::CLUSTERED_INDEX || name == clustered::EXPIRE_AFTER_SECONDS {
            if let Some(clustered) = &clustered {
                clustered::stored_options(clustered, &mut options);
            }
            continue;
        }
        if name == "collation" {
            let collation = match value {
                Bson::Document(spec) => Collation::parse(spec)?,
                other => {
                    return Err(CommandError::wrong_type(
                        "create",
                        "collation",
                        other,
                        "object",
                    ))
                }
            };
            // The simple collation is the absence of one: not stored, not listed.
            if let Some(collation) = collation {
                options.insert("collation", collation.spec().clone());
            }
            continue;
        }
        if tideway_exec::validation::OPTIONS.contains(&name.as_str()) {
            if let Some(stored) =
                tideway_exec::validation::check_option("create", &ns, name, value)?
            {
                options.insert(name.clone(), stored);
            }
            continue;
        }
        if collection_defaults::CREATE_OPTIONS.contains(&name.as_str()) {
            let engine = ctx.storage().engine_name();
            if let Some(stored) = collection_defaults::check_option(&ns, name, value, engine)? {
                options.insert(name.clone(), stored);
            }
            continue;
        }
        if !SUPPORTED_CREATE_OPTIONS.contains(&name.as_str()) {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support the collection option '{name}'"),
            ));
        }
        options.insert(name.clone(), value.clone());
    }
    let storage = ctx.storage();
    let indexes = timeseries::of(&options)
        .map(|timeseries| timeseries::initial_indexes(&timeseries))
        .unwrap_or_default();
    match storage
        .create_collection(&ns, options.clone(), indexes)
        .await
    {
        Ok(_) => Ok(Document::new()),
        Err(StorageError::NamespaceExists(_)) => match storage.collection(&ns).await? {
            Some(existing) if existing.options == options => Ok(Document::new()),
            existing => Err(match (existing, timeseries) {
                (Some(existing), Some(_)) => timeseries::exists_differently(&existing, &options),
                _ => CommandError::new(
                    ErrorCode::NamespaceExists,
                    format!("Collection {ns} already exists."),
                ),
            }),
        },
        Err(error) => Err(error.into()),
    }
}

async fn drop(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    crate::commands::operations::check_profile_drop(ctx, &ns)?;
    if ns == tideway_storage::oplog::oplog_namespace() {
        // mongod's drop_collection.cpp: the live oplog stays; a standalone's engine resizes it
        // (replSetResizeOplog) rather than drop it.
        return Err(match ctx.state.repl {
            Some(_) => CommandError::new(
                ErrorCode::Location5255000,
                "can't drop live oplog while replicating",
            ),
            None => CommandError::new(
                ErrorCode::Location5255001,
                "can't drop oplog on storage engines that support replSetResizeOplog command",
            ),
        });
    }
    let storage = ctx.storage();
    let Some(meta) = storage.collection(&ns).await? else {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            "ns not found",
        ));
    };
    storage.drop_collection(&ns).await?;
    let dropped = ns.to_string();
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns == dropped);
    Ok(doc! {"nIndexesWas": meta.indexes.len() as i32, "ns": ns.to_string()})
}

async fn drop_database(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    // mongod's IDL reads the argument as a number and requires exactly 1.
    let argument = body.get("dropDatabase").unwrap_or(&Bson::Null);
    match tideway_base::bsonutil::as_f64(argument) {
        None if !matches!(argument, Bson::Null | Bson::Undefined) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'dropDatabase.dropDatabase' is the wrong type '{}', expected types '[long, int, decimal, double']",
                tideway_base::display::type_name(argument)
            )))
        }
        Some(1.0) => {}
        _ => {
            return Err(CommandError::new(
                ErrorCode::Location5255100,
                "Have to pass 1 as 'drop' parameter",
            ))
        }
    }
    validate_database_name(ctx.db)?;
    ctx.storage().drop_database(ctx.db).await?;
    // As mongod: the database's profiling settings go with it.
    ctx.state.profiler.clear(ctx.db);
    let prefix = format!("{}.", ctx.db);
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns.starts_with(&prefix));
    Ok(doc! {"dropped": ctx.db})
}

async fn list_databases(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let name_only = optional_bool(ctx, body, "nameOnly")?.unwrap_or(false);
    let filter =
        Filter::parse(optional_document(ctx, body, "filter")?.unwrap_or(&Document::new()))?;
    // Under --auth, a user without the `listDatabases` action (or asking for
    // `authorizedDatabases`) sees only the databases it has privileges on, as mongod.
    let authorized_only = optional_bool(ctx, body, "authorizedDatabases")?;
    let shown = match crate::access::enforce::privileges(ctx.state, ctx.client).await? {
        Some(privileges) => {
            let may_list = privileges.allows(Target::Cluster, Action::listDatabases);
            match authorized_only {
                Some(false) if !may_list => {
                    return Err(crate::access::enforce::unauthorized(ctx.db, body))
                }
                Some(false) => None,
                Some(true) => Some(privileges),
                None => (!may_list).then_some(privileges),
            }
        }
        None => None,
    };
    let mut databases = Vec::new();
    let mut total_size: i64 = 0;
    for (name, size) in ctx.storage().list_databases().await? {
        if shown
            .as_ref()
            .is_some_and(|privileges| !privileges.touches_database(&name))
        {
            continue;
        }
        let entry = doc! {"name": name.as_str(), "sizeOnDisk": size as i64, "empty": size == 0};
        if !filter.matches(&entry) {
            continue;
        }
        total_size += size as i64;
        databases.push(if name_only {
            doc! {"name": name}
        } else {
            entry
        });
    }
    if name_only {
        return Ok(doc! {"databases": databases});
    }
    Ok(
        doc! {"databases": databases, "totalSize": total_size, "totalSizeMb": total_size / (1024 * 1024)},
    )
}

fn uuid_binary(uuid: [u8; 16]) -> Binary {
    Binary {
        subtype: BinarySubtype::Uuid,
        bytes: uuid.to_vec(),
    }
}

fn collection_entry(meta: &CollectionMeta) -> Document {
    if timeseries::is_timeseries(meta) {
        return timeseries::list_entry(meta);
    }
    let mut entry = doc! {
        "name": meta.ns.coll.as_str(),
        "type": "collection",
        "options": meta.options.clone(),
        "info": {"readOnly": false, "uuid": uuid_binary(meta.uuid)},
    };
    // A clustered collection has no separate `_id` index: mongod lists no `idIndex`.
    if !meta.clustered() {
        entry.insert("idIndex", doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});
    }
    entry
}

async fn list_collections(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    validate_database_name(ctx.db)?;
    let name_only = optional_bool(ctx, body, "nameOnly")?.unwrap_or(false);
    let filter =
        Filter::parse(optional_document(ctx, body, "filter")?.unwrap_or(&Document::new()))?;
    // `authorizedCollections` (with `nameOnly`) under --auth: a user without the
    // `listCollections` action sees the collections it has any privilege on, as mongod.
    let shown = match crate::access::enforce::privileges(ctx.state, ctx.client).await? {
        Some(privileges)
            if optional_bool(ctx, body, "authorizedCollections")? == Some(true)
                && !privileges.allows(Target::Database(ctx.db), Action::listCollections) =>
        {
            Some(privileges)
        }
        _ => None,
    };
    let mut entries = Vec::new();
    let collections = ctx.storage().list_collections(ctx.db).await?;
    let views = crate::commands::views::list(ctx, ctx.db).await?;
    let all = collections.iter().map(collection_entry).chain(
        views
            .iter()
            .map(crate::commands::views::ViewDefinition::list_entry),
    );
    for entry in all {
        let hidden = shown.as_ref().is_some_and(|privileges| {
            let name = entry.get_str("name").unwrap_or_default();
            !privileges.allows_any_action(Target::Namespace(ctx.db, name))
        });
        if !hidden && filter.matches(&entry) {
            entries.push(if name_only {
                doc! {"name": entry.get("name").cloned().unwrap_or(Bson::Null), "type": entry.get("type").cloned().unwrap_or(Bson::Null)}
            } else {
                entry
            });
        }
    }
    buffered_cursor(
        ctx,
        body,
        format!("{}.$cmd.listCollections", ctx.db),
        entries,
    )
    .await
}

fn string_field<'a>(body: &'a Document, command: &str, field: &str) -> CommandResult<&'a str> {
    match body.get(field) {
        Some(Bson::String(value)) => Ok(value),
        Some(other) => Err(CommandError::wrong_type(command, field, other, "string")),
        None => Err(CommandError::new(
            ErrorCode::Location40414,
            format!("BSON field '{command}.{field}' is missing but a required field"),
        )),
    }
}

fn parse_full_namespace(full: &str) -> CommandResult<Namespace> {
    let (db, coll) = full.split_once('.').ok_or_else(|| {
        CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid namespace specified '{full}'"),
        )
    })?;
    let ns = Namespace::new(db, coll);
    validate_writable_namespace(&ns)?;
    Ok(ns)
}

async fn rename_collection(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let from = parse_full_namespace(string_field(body, "renameCollection", "renameCollection")?)?;
    let to = parse_full_namespace(string_field(body, "renameCollection", "to")?)?;
    let drop_target = optional_bool(ctx, body, "dropTarget")?.unwrap_or(false);
    if from == to {
        return Err(CommandError::new(
            ErrorCode::IllegalOperation,
            "Can't rename a collection to itself",
        ));
    }
    crate::commands::views::check_rename(ctx, &from, &to).await?;
    let storage = ctx.storage();
    if storage
        .collection(&from)
        .await?
        .is_some_and(|meta| timeseries::is_timeseries(&meta))
    {
        return Err(CommandError::new(
            ErrorCode::IllegalOperation,
            "Renaming a timeseries collection is not allowed",
        ));
    }
    match storage.rename_collection(&from, &to, drop_target).await {
        Ok(()) => {}
        Err(StorageError::NamespaceNotFound(_)) => {
            return Err(CommandError::new(
                ErrorCode::NamespaceNotFound,
                format!("Source collection {from} does not exist"),
            ))
        }
        Err(StorageError::NamespaceExists(_)) => {
            return Err(CommandError::new(
                ErrorCode::NamespaceExists,
                "target namespace exists",
            ))
        }
        Err(error) => return Err(error.into()),
    }
    let (old, new) = (from.to_string(), to.to_string());
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns == old || cursor_ns == new);
    Ok(Document::new())
}

/// `scale` as mongod reads it: a positive number, default 1.
fn scale(ctx: &CommandContext, body: &Document) -> CommandResult<i64> {
    match crate::commands::args::optional_i64(ctx, body, "scale")? {
        None => Ok(1),
        Some(scale) if scale > 0 => Ok(scale),
        Some(_) => Err(CommandError::bad_value(
            "Scale factor must be a positive number",
        )),
    }
}

/// Storage statistics of the viewed collection (`None` if it does not exist) with documents that
/// have expired at the view's time but are not deleted yet left out of the count (their bytes are
/// still on disk, so sizes keep them).
pub(crate) async fn visible_stats(
    ctx: &CommandContext<'_>,
    view: &CollectionView,
) -> CommandResult<Option<CollectionStats>> {
    let Some(meta) = &view.meta else {
        return Ok(None);
    };
    let storage = ctx.storage();
    let mut stats = storage.stats(&meta.ns).await?;
    let policies = &view.visibility.policies;
    if !policies.is_empty() {
        // Stored and expired counts from one snapshot: exact while the reaper deletes.
        let backlog =
            tideway_exec::reaper::backlog(storage, meta, policies, view.visibility.now_ms).await?;
        stats.count = backlog.documents.saturating_sub(backlog.pending);
    }
    Ok(Some(stats))
}

fn total_index_size(stats: &CollectionStats) -> u64 {
    stats.index_sizes.iter().map(|(_, size)| size).sum()
}

async fn db_stats(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    validate_database_name(ctx.db)?;
    let scale = scale(ctx, body)?;
    let storage = ctx.storage();
    let collections = storage.list_collections(ctx.db).await?;
    let (mut objects, mut data_size, mut storage_size, mut indexes, mut index_size) =
        (0u64, 0u64, 0u64, 0usize, 0u64);
    for meta in &collections {
        let view = ctx.view(&meta.ns).await?;
        let Some(stats) = visible_stats(ctx, &view).await? else {
            continue;
        };
        objects += stats.count;
        data_size += stats.data_size;
        storage_size += stats.storage_size;
        index_size += total_index_size(&stats);
        indexes += meta.indexes.len();
    }
    let avg_obj_size = if objects == 0 {
        0.0
    } else {
        data_size as f64 / objects as f64
    };
    let scaled = |bytes: u64| bytes as f64 / scale as f64;
    Ok(doc! {
        "db": ctx.db,
        "collections": collections.len() as i64,
        "views": crate::commands::views::list(ctx, ctx.db).await?.len() as i64,
        "objects": objects as i64,
        "avgObjSize": avg_obj_size,
        "dataSize": scaled(data_size),
        "storageSize": scaled(storage_size),
        "indexes": indexes as i64,
        "indexSize": scaled(index_size),
        "totalSize": scaled(storage_size + index_size),
        "scaleFactor": scale,
    })
}

async fn coll_stats(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    let scale = scale(ctx, body)?;
    let view = ctx.view(&ns).await?;
    if view.meta.is_none() {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("Collection [{ns}] not found."),
        ));
    }
    storage_stats(ctx, &view, scale).await
}

/// The statistics `collStats` returns, also `$collStats: {storageStats: {}}`'s `storageStats`.
pub async fn storage_stats(
    ctx: &CommandContext<'_>,
    view: &CollectionView,
    scale: i64,
) -> CommandResult {
    let (Some(meta), Some(stats)) = (&view.meta, visible_stats(ctx, view).await?) else {
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("Collection [{}] not found.", view.ns),
        ));
    };
    let scaled = |bytes: u64| (bytes as i64) / scale;
    let mut index_sizes = Document::new();
    for (name, size) in &stats.index_sizes {
        index_sizes.insert(name.clone(), scaled(*size));
    }
    let avg_obj_size = stats.data_size.checked_div(stats.count).unwrap_or(0) as i64;
    let mut reply = doc! {
        "ns": meta.ns.to_string(),
        "size": scaled(stats.data_size),
        "count": stats.count as i64,
        "avgObjSize": avg_obj_size,
        "storageSize": scaled(stats.storage_size),
        "freeStorageSize": 0_i64,
    };
    reply.extend(tideway_exec::capped::stats_fields(meta, scale));
    reply.extend(doc! {
        "nindexes": meta.indexes.len() as i32,
        "indexBuilds": [],
        "totalIndexSize": scaled(total_index_size(&stats)),
        "totalSize": scaled(stats.storage_size + total_index_size(&stats)),
        "indexSizes": index_sizes,
        "scaleFactor": scale,
    });
    Ok(reply)
}
