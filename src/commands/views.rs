//! Views: read-only collections defined by a pipeline over another collection or view of the same
//! database (mongod's `view_catalog` and `resolved_view`).
//!
//! Definitions live where mongod keeps them, as documents of `<db>.system.views`:
//! `{_id: "<db>.<view>", viewOn: "<name>", pipeline: [...], collation?: {...}}` (the collation
//! resolved, as collections store theirs; absent means simple). So `system.views` is listed by
//! `listCollections` as an ordinary collection of a database that holds views, as mongod lists
//! it, `dropDatabase` drops the views with it, and no storage format changes.
//!
//! Dispatch hands every command to [`run`] before its handler. A command naming a view is served
//! here: `create` with `viewOn`/`pipeline`, `collMod` and `drop` of a view change the definitions;
//! `find`, `count`, `distinct` and `aggregate` are rewritten into an `aggregate` over the source
//! collection whose pipeline is the resolved view pipeline followed by the command's own stages
//! (mongod's `asAggregationCommand` conversions), run by `commands::aggregate` with the cursor
//! named after the view; `explain` of those explains that aggregate; every other command that
//! names a collection (writes, index commands, `collStats`, ...) is refused with 166
//! CommandNotSupportedOnView. A command naming anything else goes to its handler unchanged.
//!
//! Invariants: a view's read goes to the source collection through the planner, so TTL visibility
//! (expired documents hidden) applies to it unchanged; the read is under the view's collation
//! (simple when it has none, never the source collection's default); definitions are acyclic and
//! at most [`MAX_VIEW_DEPTH`] views deep (checked on every change, under one lock, and again on
//! every read); a definition's pipeline parses and writes nothing (`$out`/`$merge` refused).

use bson::{doc, Bson, Document};
use futures::future::BoxFuture;

use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::validate_writable_namespace;
use tideway_base::command::command_fields;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_query::collation::Collation;
use tideway_storage::{Namespace, TtlClass, WriteMeta, WriteOp, WriteOptions};
use tideway_wire::Reply;

/// The collection of each database that holds its view definitions.
pub(crate) const SYSTEM_VIEWS: &str = "system.views";

/// mongod's `ViewGraph::kMaxViewDepth`: views on views, at most this many deep.
pub(crate) const MAX_VIEW_DEPTH: usize = 20;

/// Serializes changes to view definitions, so the cycle and depth checks see a settled catalog.
static CATALOG_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Commands refused on a view (mongod: `Namespace <ns> is a view, not a collection`).
const REFUSED_ON_VIEWS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "createIndexes",
    "dropIndexes",
    "listIndexes",
    "collStats",
    "mapReduce",
    "convertToCapped",
    "cloneCollectionAsCapped",
];

/// One view definition, as stored in `system.views`.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewDefinition {
    pub ns: Namespace,
    pub view_on: String,
    pub pipeline: Vec<Document>,
    /// The resolved default collation; `None` is the simple collation.
    pub collation: Option<Document>,
}

impl ViewDefinition {
    fn from_stored(ns: Namespace, stored: &Document) -> CommandResult<ViewDefinition> {
        let invalid = || {
            CommandError::new(
                ErrorCode::InvalidOptions,
                format!("invalid view definition for {ns} in {SYSTEM_VIEWS}"),
            )
        };
        let view_on = stored.get_str("viewOn").map_err(|_| invalid())?.to_owned();
        let pipeline = match stored.get("pipeline") {
            Some(Bson::Array(stages)) => stages
                .iter()
                .map(|stage| stage.as_document().cloned().ok_or_else(invalid))
                .collect::<CommandResult<Vec<_>>>()?,
            _ => return Err(invalid()),
        };
        let collation = stored.get_document("collation").ok().cloned();
        Ok(ViewDefinition {
            ns,
            view_on,
            pipeline,
            collation,
        })
    }

    fn to_stored(&self) -> Document {
        let mut stored = doc! {
            "_id": self.ns.to_string(),
            "viewOn": self.view_on.as_str(),
            "pipeline": self.pipeline.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
        };
        if let Some(collation) = &self.collation {
            stored.insert("collation", collation.clone());
        }
        stored
    }

    /// Its `listCollections` entry, as mongod lists a view.
    pub fn list_entry(&self) -> Document {
        let mut options = doc! {
            "viewOn": self.view_on.as_str(),
            "pipeline": self.pipeline.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
        };
        if let Some(collation) = &self.collation {
            options.insert("collation", collation.clone());
        }
        doc! {
            "name": self.ns.coll.as_str(),
            "type": "view",
            "options": options,
            "info": {"readOnly": true},
        }
    }

    fn source(&self) -> Namespace {
        Namespace::new(self.ns.db.as_str(), self.view_on.as_str())
    }
}

/// A view resolved down to a collection: what a read through it runs.
#[derive(Clone, Debug)]
pub struct ResolvedView {
    /// The collection at the bottom of the chain of views.
    pub source: Namespace,
    /// Every view's pipeline, the deepest first.
    pub pipeline: Vec<Document>,
    /// The view's default collation (`None`: simple).
    pub collation: Option<Document>,
}

fn views_namespace(db: &str) -> Namespace {
    Namespace::new(db, SYSTEM_VIEWS)
}

/// The definition of view `ns`, if `ns` is a view.
pub async fn lookup(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
) -> CommandResult<Option<ViewDefinition>> {
    if ns.coll.starts_with("system.") || ns.coll.contains('$') {
        return Ok(None);
    }
    let storage = ctx.storage();
    let Some(record) = storage
        .get(&views_namespace(&ns.db), &Bson::String(ns.to_string()))
        .await?
    else {
        return Ok(None);
    };
    ViewDefinition::from_stored(ns.clone(), &record.doc.into_document()).map(Some)
}

/// Every view of database `db`.
pub async fn list(ctx: &CommandContext<'_>, db: &str) -> CommandResult<Vec<ViewDefinition>> {
    let stored = crate::commands::aggregate::read_namespace(
        ctx,
        &views_namespace(db),
        Document::new(),
        &None,
    )
    .await?;
    let mut views = Vec::with_capacity(stored.len());
    for definition in stored {
        let Some(name) = definition
            .get_str("_id")
            .ok()
            .and_then(|id| id.strip_prefix(&format!("{db}.")))
        else {
            continue;
        };
        views.push(ViewDefinition::from_stored(
            Namespace::new(db, name),
            &definition,
        )?);
    }
    Ok(views)
}

fn depth_exceeded() -> CommandError {
    CommandError::new(
        ErrorCode::ViewDepthLimitExceeded,
        format!("View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"),
    )
}

/// `view` resolved through the views it reads down to a collection (mongod's
/// `ViewCatalog::resolveView`): their pipelines in order, deepest first.
pub async fn resolve(
    ctx: &CommandContext<'_>,
    view: ViewDefinition,
) -> CommandResult<ResolvedView> {
    let collation = view.collation.clone();
    let mut pipeline = view.pipeline.clone();
    let mut source = view.source();
    let mut depth = 1;
    while let Some(next) = lookup(ctx, &source).await? {
        depth += 1;
        if depth > MAX_VIEW_DEPTH {
            return Err(depth_exceeded());
        }
        let mut combined = next.pipeline.clone();
        combined.append(&mut pipeline);
        pipeline = combined;
        source = next.source();
    }
    Ok(ResolvedView {
        source,
        pipeline,
        collation,
    })
}

/// The collection a command names by its first field (a string), in the command's database.
fn named_namespace(ctx: &CommandContext<'_>, body: &Document) -> Option<Namespace> {
    match body.iter().next() {
        Some((_, Bson::String(name))) if !name.is_empty() => {
            Some(Namespace::new(ctx.db, name.as_str()))
        }
        _ => None,
    }
}

/// Runs `spec`'s command: here when it concerns a view, otherwise by its handler.
pub fn run<'a>(
    ctx: &'a CommandContext<'a>,
    spec: &'static CommandSpec,
    body: &'a Document,
) -> BoxFuture<'a, CommandResult<Reply>> {
    Box::pin(async move {
        match route(ctx, spec.name, body).await? {
            Some(reply) => Ok(reply),
            None => (spec.handler)(ctx, body).await,
        }
    })
}

/// The reply of a command that concerns a view; `None` for any other command.
async fn route(
    ctx: &CommandContext<'_>,
    name: &str,
    body: &Document,
) -> CommandResult<Option<Reply>> {
    if name == "explain" {
        return explain(ctx, body).await;
    }
    let interested = matches!(
        name,
        "create" | "collMod" | "drop" | "find" | "aggregate" | "count" | "distinct"
    ) || REFUSED_ON_VIEWS.contains(&name);
    if !interested {
        return Ok(None);
    }
    let Some(ns) = named_namespace(ctx, body) else {
        return Ok(None);
    };
    // `config.transactions` is read like a view of the session records.
    if let Some(reply) = crate::commands::config_transactions::read(ctx, name, body, &ns).await? {
        return Ok(Some(reply));
    }
    if name == "create" && (body.contains_key("viewOn") || body.contains_key("pipeline")) {
        return create(ctx, body, &ns)
            .await
            .map(|()| Some(Document::new().into()));
    }
    if name == "collMod" && (body.contains_key("viewOn") || body.contains_key("pipeline")) {
        return coll_mod(ctx, body, &ns)
            .await
            .map(|()| Some(Document::new().into()));
    }
    let Some(view) = lookup(ctx, &ns).await? else {
        return Ok(None);
    };
    match name {
        "create" => Err(CommandError::new(
            ErrorCode::NamespaceExists,
            format!("Namespace {ns} already exists"),
        )),
        "collMod" => Err(refused_option(body)),
        "drop" => drop(ctx, &view).await.map(Some),
        "find" | "aggregate" | "count" | "distinct" => read(ctx, name, body, view).await.map(Some),
        _ => Err(not_a_collection(&ns)),
    }
}

/// mongod's answer to a collection command on a view.
pub fn not_a_collection(ns: &Namespace) -> CommandError {
    CommandError::new(
        ErrorCode::CommandNotSupportedOnView,
        format!("Namespace {ns} is a view, not a collection"),
    )
}

/// `collMod` of a view with an option only collections have.
fn refused_option(body: &Document) -> CommandError {
    let option = command_fields(body)
        .map(|(name, _)| name.as_str())
        .find(|name| !matches!(*name, "viewOn" | "pipeline"))
        .unwrap_or("collMod");
    CommandError::new(
        ErrorCode::InvalidOptions,
        format!("option not supported on a view: {option}"),
    )
}

/// `viewOn` and `pipeline` of a `create` or `collMod`.
fn definition_fields(
    command: &str,
    body: &Document,
) -> CommandResult<(Option<String>, Option<Vec<Document>>)> {
    let view_on = match body.get("viewOn") {
        None => None,
        Some(Bson::String(name)) => Some(name.clone()),
        Some(other) => return Err(CommandError::wrong_type(command, "viewOn", other, "string")),
    };
    let pipeline = match body.get("pipeline") {
        None => None,
        Some(Bson::Array(stages)) => Some(
            stages
                .iter()
                .map(|stage| match stage {
                    Bson::Document(stage) => Ok(stage.clone()),
                    other => Err(CommandError::wrong_type(
                        command, "pipeline", other, "object",
                    )),
                })
                .collect::<CommandResult<Vec<_>>>()?,
        ),
        Some(other) => {
            return Err(CommandError::wrong_type(
                command, "pipeline", other, "array",
            ))
        }
    };
    Ok((view_on, pipeline))
}

/// Checks `view`'s pipeline as mongod's `ViewCatalog::validatePipeline` does: it parses, and no
/// stage writes (`$out`, `$merge`), streams changes or ignores the collection.
fn validate_pipeline(view: &ViewDefinition) -> CommandResult<()> {
    let context = format!("Invalid pipeline for view {}", view.ns);
    tideway_query::Pipeline::parse(&view.pipeline).map_err(|error| error.caused(&context))?;
    for (position, stage) in view.pipeline.iter().enumerate() {
        let Some(name) = stage.keys().next() else {
            continue;
        };
        let refusal = match name.as_str() {
            "$out" | "$merge" => Some(CommandError::new(
                ErrorCode::OptionNotSupportedOnView,
                format!(
                    "The aggregation stage {name} in location {position} of the pipeline cannot be used in the view definition of {} because it writes to disk",
                    view.ns
                ),
            )),
            "$changeStream" => Some(CommandError::new(
                ErrorCode::OptionNotSupportedOnView,
                "$changeStream cannot be used in a view definition",
            )),
            "$documents" | "$currentOp" => Some(CommandError::new(
                ErrorCode::InvalidNamespace,
                format!("'{name}' cannot be used in a view definition"),
            )),
            _ => None,
        };
        if let Some(error) = refusal {
            return Err(error.caused(&context));
        }
    }
    Ok(())
}

/// Checks that `view` would close no cycle and stay within [`MAX_VIEW_DEPTH`], and that the views
/// it reads have its collation (mongod's `ViewGraph::insertAndValidate`, `_validateCollation`).
async fn validate_graph(ctx: &CommandContext<'_>, view: &ViewDefinition) -> CommandResult<()> {
    let mut chain = vec![view.ns.to_string()];
    let mut source = view.source();
    while let Some(next) = if source == view.ns {
        Some(view.clone())
    } else {
        lookup(ctx, &source).await?
    } {
        chain.push(next.ns.to_string());
        if next.ns == view.ns {
            return Err(CommandError::new(
                ErrorCode::GraphContainsCycle,
                format!("View cycle detected: {}", chain.join(" => ")),
            ));
        }
        if chain.len() == 2 && next.collation != view.collation {
            return Err(CommandError::new(
                ErrorCode::OptionNotSupportedOnView,
                format!(
                    "View {} has conflicting collation with view {}",
                    view.ns, next.ns
                ),
            ));
        }
        if chain.len() > MAX_VIEW_DEPTH {
            return Err(depth_exceeded());
        }
        source = next.source();
    }
    Ok(())
}

fn check_view_on(view_on: &str) -> CommandResult<()> {
    if view_on.is_empty() {
        return Err(CommandError::bad_value("'viewOn' cannot be empty"));
    }
    if view_on.contains('$') || view_on.contains('\0') || view_on.starts_with('.') {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("invalid name for 'viewOn': {view_on}"),
        ));
    }
    Ok(())
}

/// Writes `view`'s definition (new, or replacing the current one).
async fn store(
    ctx: &CommandContext<'_>,
    view: &ViewDefinition,
    replace: bool,
) -> CommandResult<()> {
    let storage = ctx.storage();
    let ns = views_namespace(&view.ns.db);
    let meta = WriteMeta {
        last_write_ms: ctx.state.clock.now_ms(),
        ttl: TtlClass::Never,
    };
    let id = Bson::String(view.ns.to_string());
    let op = match replace {
        false => WriteOp::Insert {
            doc: view.to_stored(),
            meta,
            supersede: None,
        },
        true => {
            let Some(current) = storage.get(&ns, &id).await? else {
                return Err(CommandError::new(
                    ErrorCode::NamespaceNotFound,
                    format!("cannot modify missing view {}", view.ns),
                ));
            };
            WriteOp::Replace {
                replacement: true,
                id,
                expected_rev: current.rev,
                doc: view.to_stored(),
                meta,
                supersede: None,
            }
        }
    };
    let options = WriteOptions {
        ordered: true,
        force_durable: false,
        background: false,
    };
    for result in storage.write(&ns, vec![op], options).await? {
        result?;
    }
    Ok(())
}

/// `create` with `viewOn` (and `pipeline`, `collation`).
async fn create(ctx: &CommandContext<'_>, body: &Document, ns: &Namespace) -> CommandResult<()> {
    validate_writable_namespace(ns)?;
    // A clustered index with `viewOn` is mongod's 6026500, checked before the view's options.
    crate::commands::clustered::validate_create(body, ctx.state.clock.now_ms())?;
    let (view_on, pipeline) = definition_fields("create", body)?;
    let Some(view_on) = view_on else {
        return Err(CommandError::bad_value(
            "'pipeline' requires 'viewOn' to also be specified",
        ));
    };
    check_view_on(&view_on)?;
    let mut collation = None;
    for (name, value) in command_fields(body) {
        match name.as_str() {
            "viewOn" | "pipeline" => {}
            "collation" => {
                let spec = match value {
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
                collation = Some(spec.map(|collation| collation.spec().clone()));
            }
            other => {
                return Err(CommandError::new(
                    ErrorCode::InvalidOptions,
                    format!("option not supported on a view: {other}"),
                ))
            }
        }
    }
    let _catalog = CATALOG_LOCK.lock().await;
    let exists = ctx.storage().collection(ns).await?.is_some() || lookup(ctx, ns).await?.is_some();
    if exists {
        return Err(CommandError::new(
            ErrorCode::NamespaceExists,
            format!("Namespace {ns} already exists"),
        ));
    }
    let source = Namespace::new(ns.db.as_str(), view_on.as_str());
    // A view on a view without a collation of its own takes that view's (the two must agree).
    let collation = match collation {
        Some(collation) => collation,
        None => lookup(ctx, &source).await?.and_then(|view| view.collation),
    };
    let view = ViewDefinition {
        ns: ns.clone(),
        view_on,
        pipeline: pipeline.unwrap_or_default(),
        collation,
    };
    validate_pipeline(&view)?;
    validate_graph(ctx, &view).await?;
    validate_involved(ctx, &view).await?;
    store(ctx, &view, false).await
}

/// `collMod` of a view: a new `viewOn` and/or `pipeline`; the collation stays.
async fn coll_mod(ctx: &CommandContext<'_>, body: &Document, ns: &Namespace) -> CommandResult<()> {
    let (view_on, pipeline) = definition_fields("collMod", body)?;
    let _catalog = CATALOG_LOCK.lock().await;
    let Some(current) = lookup(ctx, ns).await? else {
        if ctx.storage().collection(ns).await?.is_some() {
            let option = if view_on.is_some() {
                "viewOn"
            } else {
                "pipeline"
            };
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("option only supported on a view: {option}"),
            ));
        }
        return Err(CommandError::new(
            ErrorCode::NamespaceNotFound,
            format!("cannot modify missing view {ns}"),
        ));
    };
    if command_fields(body).any(|(name, _)| !matches!(name.as_str(), "viewOn" | "pipeline")) {
        return Err(refused_option(body));
    }
    if let Some(view_on) = &view_on {
        check_view_on(view_on)?;
    }
    let view = ViewDefinition {
        view_on: view_on.unwrap_or_else(|| current.view_on.clone()),
        pipeline: pipeline.unwrap_or_else(|| current.pipeline.clone()),
        ..current
    };
    validate_pipeline(&view)?;
    validate_graph(ctx, &view).await?;
    validate_involved(ctx, &view).await?;
    store(ctx, &view, true).await
}

/// `drop` of a view: its definition goes; nothing reads it any more.
async fn drop(ctx: &CommandContext<'_>, view: &ViewDefinition) -> CommandResult<Reply> {
    let _catalog = CATALOG_LOCK.lock().await;
    let op = WriteOp::Delete {
        id: Bson::String(view.ns.to_string()),
        expected_rev: None,
    };
    let options = WriteOptions {
        ordered: true,
        force_durable: false,
        background: false,
    };
    let ns = views_namespace(&view.ns.db);
    for result in ctx.storage().write(&ns, vec![op], options).await? {
        result?;
    }
    let dropped = view.ns.to_string();
    ctx.state
        .cursors
        .kill_where(|cursor_ns| cursor_ns == dropped);
    Ok(doc! {"ns": dropped}.into())
}

/// A read option a view cannot honour (mongod's `asAggregationCommand` refusals).
fn unsupported_find_option(body: &Document) -> Option<CommandError> {
    let truthy = |name: &str| {
        body.get(name)
            .is_some_and(tideway_base::bsonutil::is_truthy)
    };
    let non_empty = |name: &str| matches!(body.get(name), Some(Bson::Document(document)) if !document.is_empty());
    let option = |name: &str| {
        CommandError::new(
            ErrorCode::InvalidPipelineOperator,
            format!("Option {name} not supported in aggregation."),
        )
    };
    for name in ["min", "max"] {
        if non_empty(name) {
            return Some(option(name));
        }
    }
    for name in ["returnKey", "showRecordId"] {
        if truthy(name) {
            return Some(option(name));
        }
    }
    if truthy("tailable") {
        return Some(CommandError::new(
            ErrorCode::InvalidPipelineOperator,
            "Tailable cursors are not supported in aggregation.",
        ));
    }
    for name in ["noCursorTimeout", "allowPartialResults"] {
        if truthy(name) {
            return Some(option(name));
        }
    }
    if let Ok(sort) = body.get_document("sort") {
        if sort.contains_key("$natural") {
            return Some(CommandError::new(
                ErrorCode::InvalidPipelineOperator,
                "Sort option $natural not supported in aggregation.",
            ));
        }
    }
    let limit_one = body
        .get("limit")
        .and_then(tideway_base::bsonutil::as_f64)
        .is_some_and(|limit| limit == 1.0);
    if truthy("singleBatch") && !limit_one {
        return Some(option("singleBatch"));
    }
    for name in [
        "readOnce",
        "allowSpeculativeMajorityRead",
        "requestResumeToken",
    ] {
        if truthy(name) {
            return Some(option(name));
        }
    }
    if non_empty("resumeAfter") {
        return Some(option("resumeAfter"));
    }
    None
}

/// The stages a `find` becomes (mongod's `query_request_helper::asAggregationCommand`).
fn find_stages(body: &Document) -> Vec<Document> {
    let mut stages = Vec::new();
    let non_empty = |name: &str| {
        body.get_document(name)
            .ok()
            .filter(|value| !value.is_empty())
    };
    if let Some(filter) = non_empty("filter") {
        stages.push(doc! {"$match": filter.clone()});
    }
    if let Some(sort) = non_empty("sort") {
        stages.push(doc! {"$sort": sort.clone()});
    }
    if let Some(skip) = body
        .get("skip")
        .filter(|skip| tideway_base::bsonutil::as_f64(skip) != Some(0.0))
    {
        stages.push(doc! {"$skip": skip.clone()});
    }
    if let Some(limit) = body
        .get("limit")
        .filter(|limit| tideway_base::bsonutil::as_f64(limit) != Some(0.0))
    {
        stages.push(doc! {"$limit": limit.clone()});
    }
    if let Some(projection) = non_empty("projection") {
        stages.push(doc! {"$project": projection.clone()});
    }
    stages
}

/// The stages a `count` becomes (mongod's `countCommandAsAggregationCommand`; a negative limit
/// counts as its absolute value, as `count` does).
fn count_stages(body: &Document) -> Vec<Document> {
    let mut stages = Vec::new();
    if let Ok(query) = body.get_document("query") {
        if !query.is_empty() {
            stages.push(doc! {"$match": query.clone()});
        }
    }
    if let Some(skip) = body
        .get("skip")
        .and_then(tideway_base::bsonutil::as_f64)
        .filter(|skip| *skip > 0.0)
    {
        stages.push(doc! {"$skip": skip as i64});
    }
    if let Some(limit) = body
        .get("limit")
        .and_then(tideway_base::bsonutil::as_f64)
        .filter(|limit| *limit != 0.0)
    {
        stages.push(doc! {"$limit": limit.abs() as i64});
    }
    stages.push(doc! {"$count": "count"});
    stages
}

/// The stages a `distinct` becomes: the query, then each array along the key's path unwound (so
/// the values are those `distinct` finds: an array's elements, at every level), gathered by
/// `$addToSet` (mongod's `CanonicalDistinct::asAggregationCommand` reaches the same values with
/// its internal `$_internalFindAllValuesAtPath`).
fn distinct_stages(body: &Document) -> CommandResult<Vec<Document>> {
    let key = body.get_str("key").map_err(|_| {
        CommandError::new(
            ErrorCode::Location40414,
            "BSON field 'distinct.key' is missing but a required field",
        )
    })?;
    let mut stages = Vec::new();
    if let Ok(query) = body.get_document("query") {
        if !query.is_empty() {
            stages.push(doc! {"$match": query.clone()});
        }
    }
    let mut prefix = String::new();
    for component in key.split('.') {
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(component);
        stages.push(
            doc! {"$unwind": {"path": format!("${prefix}"), "preserveNullAndEmptyArrays": true}},
        );
    }
    stages.push(doc! {"$group": {"_id": Bson::Null, "distinct": {"$addToSet": format!("${key}")}}});
    Ok(stages)
}

/// The options of a read command that its aggregate keeps.
const CARRIED_OPTIONS: &[&str] = &[
    "hint",
    "maxTimeMS",
    "let",
    "allowDiskUse",
    "comment",
    "readConcern",
    "$readPreference",
];

/// The `aggregate` over `resolved`'s source that reads view `view` as `name`'s `body` asks.
fn aggregate_body(
    name: &str,
    body: &Document,
    view: &ViewDefinition,
    resolved: &ResolvedView,
) -> CommandResult<Document> {
    // A read may name the view's collation (or none); any other is refused.
    if let Some(Bson::Document(requested)) = body.get("collation") {
        if !requested.is_empty() {
            let requested = Collation::parse(requested)?.map(|collation| collation.spec().clone());
            if requested != view.collation {
                return Err(CommandError::new(
                    ErrorCode::OptionNotSupportedOnView,
                    "Cannot override a view's default collation",
                ));
            }
        }
    } else if let Some(other) = body.get("collation") {
        return Err(CommandError::wrong_type(name, "collation", other, "object"));
    }
    let own = match name {
        "find" => {
            if let Some(error) = unsupported_find_option(body) {
                return Err(error);
            }
            find_stages(body)
        }
        "count" => count_stages(body),
        "distinct" => distinct_stages(body)?,
        _ => crate::commands::aggregate::pipeline_stages(body)?,
    };
    let mut pipeline = resolved.pipeline.clone();
    pipeline.extend(own);
    let mut rewritten = doc! {
        "aggregate": resolved.source.coll.as_str(),
        "pipeline": pipeline.into_iter().map(Bson::Document).collect::<Vec<_>>(),
    };
    match name {
        // Every other field of an aggregate (cursor, explain, bypassDocumentValidation, ...) stays.
        "aggregate" => {
            for (field, value) in command_fields(body) {
                if !matches!(field.as_str(), "pipeline" | "collation") {
                    rewritten.insert(field.clone(), value.clone());
                }
            }
        }
        _ => {
            let mut cursor = Document::new();
            if let Some(batch_size) = body.get("batchSize").filter(|_| name == "find") {
                cursor.insert("batchSize", batch_size.clone());
            }
            rewritten.insert("cursor", cursor);
            for field in CARRIED_OPTIONS {
                if let Some(value) = body.get(*field) {
                    rewritten.insert(*field, value.clone());
                }
            }
        }
    }
    // The view's collation, never the source collection's default.
    rewritten.insert(
        "collation",
        view.collation
            .clone()
            .unwrap_or_else(|| doc! {"locale": "simple"}),
    );
    if let Some(db) = body.get("$db") {
        rewritten.insert("$db", db.clone());
    }
    Ok(rewritten)
}

/// The first batch of a cursor reply.
fn first_batch(reply: Reply) -> CommandResult<Vec<Document>> {
    let document = match reply {
        Reply::Document(document) => document,
        Reply::Raw(raw) => tideway_base::bsonutil::document_from_raw(raw.as_ref())
            .map_err(|error| CommandError::internal(format!("a cursor reply: {error}")))?,
    };
    let batch = document
        .get_document("cursor")
        .and_then(|cursor| cursor.get_array("firstBatch"))
        .map_err(|error| CommandError::internal(format!("a cursor reply: {error}")))?;
    Ok(batch
        .iter()
        .filter_map(|document| document.as_document().cloned())
        .collect())
}

/// `find`, `count`, `distinct` or `aggregate` of view `view`.
pub(crate) async fn read(
    ctx: &CommandContext<'_>,
    name: &str,
    body: &Document,
    view: ViewDefinition,
) -> CommandResult<Reply> {
    let ns = view.ns.clone();
    let resolved = resolve(ctx, view.clone()).await?;
    let rewritten = aggregate_body(name, body, &view, &resolved)?;
    let reply = crate::commands::aggregate::aggregate_as(ctx, &rewritten, Some(&ns)).await?;
    match name {
        "count" => {
            let counted = first_batch(reply)?
                .first()
                .and_then(|result| result.get("count").and_then(tideway_base::bsonutil::as_f64))
                .unwrap_or(0.0) as i64;
            let n = i32::try_from(counted).map_or(Bson::Int64(counted), Bson::Int32);
            Ok(doc! {"n": n}.into())
        }
        "distinct" => {
            let values = first_batch(reply)?
                .first()
                .and_then(|result| result.get_array("distinct").ok().cloned())
                .unwrap_or_default();
            Ok(doc! {"values": values}.into())
        }
        _ => Ok(reply),
    }
}

/// `explain` of a read through a view: the explain of the aggregate the read becomes.
async fn explain(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Option<Reply>> {
    let Ok(inner) = body.get_document("explain") else {
        return Ok(None);
    };
    let Some(name) = inner.keys().next().map(String::as_str) else {
        return Ok(None);
    };
    let name = match name {
        "find" | "count" | "distinct" | "aggregate" => name,
        "update" | "delete" | "findAndModify" | "findandmodify" => {
            return match named_namespace(ctx, inner) {
                Some(ns) if lookup(ctx, &ns).await?.is_some() => Err(not_a_collection(&ns)),
                _ => Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let Some(ns) = named_namespace(ctx, inner) else {
        return Ok(None);
    };
    let Some(view) = lookup(ctx, &ns).await? else {
        return Ok(None);
    };
    let verbosity = crate::commands::explain::verbosity(body)?;
    let resolved = resolve(ctx, view.clone()).await?;
    let mut rewritten = aggregate_body(name, inner, &view, &resolved)?;
    rewritten.remove("cursor");
    rewritten.remove("$db");
    let ctx = ctx.renamed("aggregate");
    crate::commands::explain::explain_aggregate_command(&ctx, &rewritten, verbosity)
        .await
        .map(|reply| Some(reply.into()))
}

/// The names of the collections (or views) `stages` read besides their own: `$lookup`'s and
/// `$graphLookup`'s `from`, `$unionWith`'s `coll`, through `$lookup` and `$unionWith`
/// sub-pipelines and `$facet` branches (mongod's `LiteParsedPipeline::getInvolvedNamespaces`).
/// Iterative: a client's nesting never deepens the stack.
pub(crate) fn involved_names(stages: &[Document]) -> Vec<String> {
    let mut names = Vec::new();
    let mut pending: Vec<&Document> = stages.iter().rev().collect();
    while let Some(stage) = pending.pop() {
        let Some((name, spec)) = stage.iter().next() else {
            continue;
        };
        match (name.as_str(), spec) {
            ("$lookup", Bson::Document(spec)) => {
                if let Ok(from) = spec.get_str("from") {
                    names.push(from.to_owned());
                }
                pending.extend(stage_documents(spec.get("pipeline")).into_iter().rev());
            }
            ("$graphLookup", Bson::Document(spec)) => {
                if let Ok(from) = spec.get_str("from") {
                    names.push(from.to_owned());
                }
            }
            ("$unionWith", Bson::String(coll)) => names.push(coll.clone()),
            ("$unionWith", Bson::Document(spec)) => {
                if let Ok(coll) = spec.get_str("coll") {
                    names.push(coll.to_owned());
                }
                pending.extend(stage_documents(spec.get("pipeline")).into_iter().rev());
            }
            ("$facet", Bson::Document(branches)) => {
                for branch in branches.values().collect::<Vec<_>>().into_iter().rev() {
                    pending.extend(stage_documents(Some(branch)).into_iter().rev());
                }
            }
            _ => {}
        }
    }
    names
}

/// The stage documents of a sub-pipeline value (anything else holds none).
fn stage_documents(value: Option<&Bson>) -> Vec<&Document> {
    match value {
        Some(Bson::Array(stages)) => stages.iter().filter_map(Bson::as_document).collect(),
        _ => Vec::new(),
    }
}

/// Every view a read of `roots` (names in database `db`) reaches, each once: the views named,
/// the views they are defined on and the views their pipelines read, transitively (mongod's
/// view graph, whose edges are `viewOn` and the involved namespaces). `pending` stands for its
/// namespace's stored definition (a view being created or modified). A path that comes back to
/// a view on it is 5 GraphContainsCycle; one longer than [`MAX_VIEW_DEPTH`] views is 279.
async fn reached_views(
    ctx: &CommandContext<'_>,
    db: &str,
    roots: Vec<String>,
    pending: Option<&ViewDefinition>,
) -> CommandResult<Vec<ViewDefinition>> {
    let mut reached = Vec::new();
    let mut explored = std::collections::HashSet::new();
    // The path from the roots: each view with the names it still has to follow.
    let mut path: Vec<(Option<ViewDefinition>, Vec<String>)> = vec![(None, roots)];
    while let Some((_, next)) = path.last_mut() {
        let Some(name) = next.pop() else {
            if let Some((Some(view), _)) = path.pop() {
                explored.insert(view.ns.coll.clone());
            }
            continue;
        };
        if explored.contains(&name) {
            continue;
        }
        let on_path = |(view, _): &(Option<ViewDefinition>, Vec<String>)| {
            view.as_ref().is_some_and(|view| view.ns.coll == name)
        };
        if path.iter().any(on_path) {
            let mut chain: Vec<String> = path
                .iter()
                .filter_map(|(view, _)| view.as_ref().map(|view| view.ns.to_string()))
                .collect();
            chain.push(format!("{db}.{name}"));
            return Err(CommandError::new(
                ErrorCode::GraphContainsCycle,
                format!("View cycle detected: {}", chain.join(" => ")),
            ));
        }
        let ns = Namespace::new(db, name.as_str());
        let view = match pending.filter(|pending| pending.ns == ns) {
            Some(pending) => Some(pending.clone()),
            None => lookup(ctx, &ns).await?,
        };
        let Some(view) = view else {
            explored.insert(name);
            continue;
        };
        if path.len() > MAX_VIEW_DEPTH {
            return Err(depth_exceeded());
        }
        let mut follow = involved_names(&view.pipeline);
        follow.push(view.view_on.clone());
        reached.push(view.clone());
        path.push((Some(view), follow));
    }
    Ok(reached)
}

/// Checks, before an aggregate over `stages` runs under `collation`, that every view it reads
/// (as a `$lookup`/`$graphLookup`/`$unionWith` source, at any depth) has that collation as its
/// default (mongod's `collatorCompatibleWithPipeline`: 167 otherwise), and that following them
/// ends (279).
pub(crate) async fn check_involved_views(
    ctx: &CommandContext<'_>,
    stages: &[Document],
    collation: &tideway_query::collation::CollationChoice,
) -> CommandResult<()> {
    let names = involved_names(stages);
    if names.is_empty() {
        return Ok(());
    }
    let run_collation = collation.as_ref().map(|collation| collation.spec().clone());
    let views = reached_views(ctx, ctx.db, names, None)
        .await
        .map_err(|error| match error.code {
            ErrorCode::GraphContainsCycle => depth_exceeded(),
            _ => error,
        })?;
    match views.iter().find(|view| view.collation != run_collation) {
        Some(view) => Err(CommandError::new(
            ErrorCode::OptionNotSupportedOnView,
            format!("Cannot override default collation of view {}", view.ns),
        )),
        None => Ok(()),
    }
}

/// Checks that the views `view`'s pipeline reads close no cycle through `view` and share its
/// collation (mongod's `ViewGraph::insertAndValidate` over the pipeline's involved namespaces).
async fn validate_involved(ctx: &CommandContext<'_>, view: &ViewDefinition) -> CommandResult<()> {
    let names = involved_names(&view.pipeline);
    if names.is_empty() {
        return Ok(());
    }
    let reached = reached_views(ctx, &view.ns.db, names, Some(view)).await?;
    match reached
        .iter()
        .find(|other| other.collation != view.collation)
    {
        Some(other) => Err(CommandError::new(
            ErrorCode::OptionNotSupportedOnView,
            format!(
                "View {} has conflicting collation with view {}",
                view.ns, other.ns
            ),
        )),
        None => Ok(()),
    }
}

/// The view `name` of the command's database resolved to its collection, when it is a view: what
/// a stage reading it as another collection (`$lookup`, `$graphLookup`, `$unionWith`) runs.
pub(crate) async fn source_of(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
) -> CommandResult<Option<ResolvedView>> {
    match lookup(ctx, ns).await? {
        Some(view) => resolve(ctx, view).await.map(Some),
        None => Ok(None),
    }
}

/// Refuses a write into `ns` when it is a view (`$out`, `$merge`, `bulkWrite`: mongod's 166).
pub(crate) async fn refuse_write_target(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
) -> CommandResult<()> {
    match lookup(ctx, ns).await? {
        Some(_) => Err(not_a_collection(ns)),
        None => Ok(()),
    }
}

/// `renameCollection`'s view checks, as mongod's `checkSourceAndTargetNamespaces`: a view is not
/// renamed (166), and a collection is not renamed over a view (48, `dropTarget` or not).
pub(crate) async fn check_rename(
    ctx: &CommandContext<'_>,
    from: &Namespace,
    to: &Namespace,
) -> CommandResult<()> {
    if lookup(ctx, from).await?.is_some() {
        return Err(CommandError::new(
            ErrorCode::CommandNotSupportedOnView,
            format!("cannot rename view: {from}"),
        ));
    }
    let source_exists = ctx.storage().collection(from).await?.is_some();
    if source_exists && lookup(ctx, to).await?.is_some() {
        return Err(CommandError::new(
            ErrorCode::NamespaceExists,
            format!("a view already exists with that name: {to}"),
        ));
    }
    Ok(())
}
