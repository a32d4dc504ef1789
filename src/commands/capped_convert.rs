//! `convertToCapped` and `cloneCollectionAsCapped`: a capped copy of a collection, as mongod's
//! `capped_utils.cpp` makes it. The copy is a new collection with the source's options plus
//! `capped: true` and the given `size` (kept in `CollectionMeta.options` like `create`'s), only
//! the `_id` index, and the source's visible documents inserted in natural order, so the engine's
//! rollover removes the oldest while they exceed the cap (what is left is the newest documents
//! that fit). `convertToCapped` builds the copy under a temporary name and renames it over the
//! source (`dropTarget`).
//!
//! Invariants: the source's policy gate is held exclusively from before the first read until
//! after the rename, as mongod holds the collection exclusively: no write reaches the source
//! meanwhile (writers wait), so none is lost when the copy replaces it. The copy is read and
//! written straight through storage, taking no other gate (gates are striped: another could be
//! this one). Expired documents are never copied (the source's visibility at the start); TTL
//! indexes never carry over (no secondary index does, and capped collections refuse TTL); the
//! documents are not validated (mongod disables validation for the copy); a failed copy drops
//! what it built, so the target is made whole or not at all.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{validate_writable_namespace, write_options};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::executor::Access;
use tideway_exec::executor::{DocStream, Visibility};
use tideway_exec::ttl;
use tideway_query::Filter;
use tideway_storage::{CollectionMeta, Namespace, WriteMeta, WriteOp, WriteOptions};

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "convertToCapped",
        aliases: &[],
        help: "{ convertToCapped:<fromCollectionName>, size:<sizeInBytes> }",
        admin_only: false,
        test_only: false,
        handler: async_handler!(convert_to_capped),
    },
    CommandSpec {
        name: "cloneCollectionAsCapped",
        aliases: &[],
        help: "{ cloneCollectionAsCapped:<fromName>, toCollection:<toName>, size:<sizeInBytes> }",
        admin_only: false,
        test_only: false,
        handler: async_handler!(clone_collection_as_capped),
    },
];

/// Documents read from the source, then inserted into the copy, per step.
const COPY_CHUNK: usize = 1000;

/// `size` as both commands read it (`safeNumberLong`; absent or not a number is 0): at least 1,
/// else 72 (`collection_to_capped.cpp`).
fn requested_size(body: &Document) -> CommandResult<i64> {
    let size = body
        .get("size")
        .and_then(tideway_query::numeric::safe_number_long)
        .unwrap_or(0);
    if size <= 0 {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "Capped collection size must be greater than zero",
        ));
    }
    Ok(size)
}

/// A collection name argument: a string (else 14, `'<field>' must be of type String`) that is a
/// valid collection name (else 73, `Invalid <which> collection name: <name>`).
fn collection_name<'a>(body: &'a Document, field: &str, which: &str) -> CommandResult<&'a str> {
    let Some(Bson::String(name)) = body.get(field) else {
        return Err(CommandError::type_mismatch(format!(
            "'{field}' must be of type String"
        )));
    };
    if name.is_empty() || name.contains('\0') || name.starts_with('.') || name.contains('$') {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid {which} collection name: {name}"),
        ));
    }
    Ok(name)
}

/// `temp: true` asks for a collection dropped at the next restart, which tideway does not have.
fn refuse_temp(body: &Document) -> CommandResult<()> {
    if body
        .get("temp")
        .is_some_and(tideway_base::bsonutil::is_truthy)
    {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not support the collection option 'temp'",
        ));
    }
    Ok(())
}

async fn clone_collection_as_capped(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let from = collection_name(body, "cloneCollectionAsCapped", "source")?;
    let to = collection_name(body, "toCollection", "target")?;
    let size = requested_size(body)?;
    refuse_temp(body)?;
    let from = Namespace::new(ctx.db, from);
    let to = Namespace::new(ctx.db, to);
    validate_writable_namespace(&to)?;
    // A view as the source is refused before the handler runs (`commands::views`).
    if crate::commands::views::lookup(ctx, &to).await?.is_some() {
        return Err(crate::commands::views::not_a_collection(&to));
    }
    let source = source_collection(ctx, &from).await?;
    if ctx.storage().collection(&to).await?.is_some() {
        return Err(CommandError::new(
            ErrorCode::NamespaceExists,
            format!(
                "cloneCollectionAsCapped failed - destination collection {to} already exists. source collection: {from}"
            ),
        ));
    }
    let _exclusive = ctx.state.policy_gates.exclusive(&from).await;
    clone_as_capped(ctx, body, &source, &to, size).await?;
    Ok(Document::new())
}

async fn convert_to_capped(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = crate::commands::args::collection_namespace(ctx, body)?;
    validate_writable_namespace(&ns)?;
    let size = requested_size(body)?;
    // A view is refused before the handler runs (`commands::views`).
    let source = source_collection(ctx, &ns).await?;
    // mongod's `tmp%%%%%.convertToCapped.<coll>`: five random characters.
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let temp = Namespace::new(
        ctx.db,
        format!("tmp{}.convertToCapped.{}", &suffix[..5], ns.coll),
    );
    let _exclusive = ctx.state.policy_gates.exclusive(&ns).await;
    clone_as_capped(ctx, body, &source, &temp, size).await?;
    if let Err(error) = ctx.storage().rename_collection(&temp, &ns, true).await {
        let _ = ctx.storage().drop_collection(&temp).await;
        return Err(error.into());
    }
    let renamed = ns.to_string();
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns == renamed);
    Ok(Document::new())
}

/// The source collection, or 26 when there is none; a time series is refused as a view (166),
/// which its namespace is in mongod.
async fn source_collection(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
) -> CommandResult<CollectionMeta> {
    let meta = ctx.storage().collection(ns).await?.ok_or_else(|| {
        CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("source collection {ns} does not exist"),
        )
    })?;
    if tideway_exec::timeseries::is_timeseries(&meta) {
        return Err(crate::commands::views::not_a_collection(ns));
    }
    Ok(meta)
}

/// The options of the capped copy of `source`: its own (validator, collation, ... and `max`
/// when it is capped already) with `capped: true` and `size`, checked and rounded as `create`
/// does them (2 past 1 PB, `collection_options.cpp`).
fn copy_options(source: &CollectionMeta, size: i64) -> CommandResult<Document> {
    if source.clustered() {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "tideway does not support capped clustered collections",
        ));
    }
    if size > tideway_exec::capped::MAX_SIZE_BYTES {
        return Err(CommandError::bad_value("size cannot exceed 1 PB"));
    }
    let mut options = source.options.clone();
    let mut capped = doc! {"capped": true, "size": size};
    if let Some(max) = options.get("max").filter(|_| source.capped().is_some()) {
        capped.insert("max", max.clone());
    }
    let checked = tideway_exec::capped::create_options(&capped)?.unwrap_or_default();
    options.remove("max");
    for (name, value) in checked {
        options.insert(name, value);
    }
    Ok(options)
}

/// Creates `target` as the capped copy of `source` and copies the documents; on failure the
/// target is dropped again.
async fn clone_as_capped(
    ctx: &CommandContext<'_>,
    body: &Document,
    source: &CollectionMeta,
    target: &Namespace,
    size: i64,
) -> CommandResult<()> {
    let options = copy_options(source, size)?;
    let storage = ctx.storage();
    storage
        .create_collection(target, options, Vec::new())
        .await?;
    let copied = copy_documents(ctx, body, &source.ns, target).await;
    if copied.is_err() {
        // Best effort: the error the client sees is the copy's, not the cleanup's.
        let _ = storage.drop_collection(target).await;
    }
    copied
}

/// Copies the visible documents of `source` into `target` in natural order, a chunk at a time,
/// straight through storage. The caller holds the source's gate exclusively, so visibility is
/// taken once, from the policies and the time at the start.
async fn copy_documents(
    ctx: &CommandContext<'_>,
    body: &Document,
    source: &Namespace,
    target: &Namespace,
) -> CommandResult<()> {
    let storage = ctx.storage();
    let options = WriteOptions {
        ordered: true,
        ..write_options(ctx, body)?
    };
    let now_ms = ctx.state.clock.now_ms();
    let visibility = Visibility::for_meta(storage.collection(source).await?.as_ref(), now_ms);
    let every = Arc::new(Filter::parse(&Document::new())?);
    let mut stream = DocStream::new(
        source.clone(),
        every,
        &Access::CollScan { reverse: false },
        visibility,
    );
    loop {
        ctx.deadline.check()?;
        let mut chunk = Vec::with_capacity(COPY_CHUNK);
        while chunk.len() < COPY_CHUNK {
            match stream.next(storage).await? {
                Some(record) => {
                    let doc = record.doc.into_document();
                    chunk.push(WriteOp::Insert {
                        meta: WriteMeta {
                            last_write_ms: now_ms,
                            ttl: ttl::ttl_class(&doc, now_ms),
                        },
                        doc,
                        supersede: None,
                    });
                }
                None => break,
            }
        }
        if chunk.is_empty() {
            return Ok(());
        }
        for result in storage.write(target, chunk, options).await? {
            result?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_read_as_safe_number_long() {
        let code = |body: Document| requested_size(&body).unwrap_err().code;
        assert_eq!(code(doc! {}), ErrorCode::InvalidOptions);
        assert_eq!(code(doc! {"size": 0}), ErrorCode::InvalidOptions);
        assert_eq!(code(doc! {"size": -5}), ErrorCode::InvalidOptions);
        assert_eq!(code(doc! {"size": "1000"}), ErrorCode::InvalidOptions);
        assert_eq!(code(doc! {"size": 0.5}), ErrorCode::InvalidOptions);
        assert_eq!(requested_size(&doc! {"size": 1000.9}).unwrap(), 1000);
        assert_eq!(requested_size(&doc! {"size": 5.3e21}).unwrap(), i64::MAX);
        // Decimal128 is rounded half to even, as `safeNumberLong` (`Decimal128::toLong`).
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        assert_eq!(requested_size(&doc! {"size": decimal("0.6")}).unwrap(), 1);
        assert_eq!(requested_size(&doc! {"size": decimal("2.5")}).unwrap(), 2);
    }
}
