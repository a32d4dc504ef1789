//! Reads: `find`, `getMore`, `killCursors`, `count`, `distinct`, and the cursor reply shape that
//! `listCollections`, `listIndexes` and `aggregate` share (`open_cursor`).

use std::collections::VecDeque;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::args::{
    check_hint, collation_for, collection_namespace, let_variables, optional_bool,
    optional_document, optional_i64, optional_non_negative, required,
};
use crate::cursor::{output_record, Cursor, CursorSource, PulledPipeline, DEFAULT_FIRST_BATCH};
use crate::state::bump;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::executor::{self, CollectionView, ScanStats, Visibility};
use tideway_exec::planner::{self, PlanSummary, Query, QueryPlan};
use tideway_query::compare::compare_values_with;
use tideway_query::expr::command_variables::{with_command_variables, CommandVariables};
use tideway_query::pipeline::DocumentStream;
use tideway_query::sorter::{self, Sorter};
use tideway_query::{Filter, Projection, SortSpec};
use tideway_storage::{Namespace, ReapSource, Record};
use tideway_wire::Reply;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "find",
        aliases: &[],
        help: "Query a collection: filter, sort, projection, skip, limit, batchSize, singleBatch.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(find),
    },
    CommandSpec {
        name: "getMore",
        aliases: &[],
        help: "The next batch of an open cursor.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(get_more),
    },
    CommandSpec {
        name: "killCursors",
        aliases: &[],
        help: "Close open cursors.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(kill_cursors),
    },
    CommandSpec {
        name: "count",
        aliases: &[],
        help: "Count the documents matching a query (with skip and limit).",
        admin_only: false,
        test_only: false,
        handler: async_handler!(count),
    },
    CommandSpec {
        name: "distinct",
        aliases: &[],
        help: "The distinct values of a field among the documents matching a query.",
        admin_only: false,
        test_only: false,
        handler: async_handler!(distinct),
    },
];

/// Options that shape a cursor's first batch.
pub(crate) struct BatchOptions {
    pub batch_size: Option<u64>,
    pub single_batch: bool,
    pub no_timeout: bool,
}

/// Produces the first batch from `cursor` and registers it if it has more to give.
pub(crate) async fn open_cursor(
    ctx: &CommandContext<'_>,
    mut cursor: Cursor,
    visibility: &Visibility,
    options: BatchOptions,
) -> CommandResult<Reply> {
    let first_batch_size = options.batch_size.unwrap_or(DEFAULT_FIRST_BATCH);
    let storage = ctx.storage();
    let before = cursor.scan_stats();
    let (batch, exhausted) = if first_batch_size == 0 && !options.single_batch {
        (Vec::new(), false)
    } else {
        let during = match ctx.name {
            "aggregate" => "PlanExecutor error during aggregation",
            _ => "Executor error during find command",
        };
        cursor
            .next_batch(storage, Some(first_batch_size), visibility, during)
            .await?
    };
    report_examined(ctx, before, cursor.scan_stats());
    let ns = cursor.ns.clone();
    let id = if exhausted || options.single_batch {
        0
    } else {
        cursor.no_timeout = options.no_timeout;
        cursor.originating_command = Some(ctx.op.command());
        cursor.transaction = ctx.txn.map(|txn| txn.identity());
        cursor.session = ctx.session.map(<[u8]>::to_vec);
        cursor.owner = ctx.client.auth.users();
        ctx.state.cursors.register(cursor, ctx.state.clock.now_ms())
    };
    ctx.op.set_first_batch(id, batch.len());
    Ok(Reply::cursor(id, &ns, batch, true))
}

/// Tells the running op (`currentOp`, the profiler) what a stream examined between two readings
/// of its counters.
fn report_examined(ctx: &CommandContext<'_>, before: Option<ScanStats>, after: Option<ScanStats>) {
    if let (Some(before), Some(after)) = (before, after) {
        ctx.op.add_examined(
            after.keys_examined.saturating_sub(before.keys_examined),
            after.docs_examined.saturating_sub(before.docs_examined),
        );
    }
}

/// Filter, projection, sort and cursor options shared by `find` and `findAndModify`-like readers.
/// The command's filter (`field`), its `$expr` seeing the command's `variables`.
fn parse_filter(
    ctx: &CommandContext,
    body: &Document,
    field: &str,
    variables: &CommandVariables,
) -> CommandResult<Filter> {
    let filter = optional_document(ctx, body, field)?
        .cloned()
        .unwrap_or_default();
    with_command_variables(variables, || Filter::parse(&filter))
}

/// What a `find`'s `sort` asks for.
enum FindSort {
    /// No sort (absent or empty).
    None,
    Keys(SortSpec),
    /// `{$natural: ±1}`: no sort but a collection scan in that direction (mongod rewrites it
    /// into a `$natural` hint).
    Natural(planner::Hint),
}

/// The `sort` of `body`, with mongod's checks of a `$natural` sort against the rest of the query
/// (parsed_find_command.cpp `isValid`): alone in its sort, not with `$text`, and with no hint
/// but a `$natural` one of the same number.
fn parse_sort(ctx: &CommandContext, body: &Document, filter: &Filter) -> CommandResult<FindSort> {
    let Some(spec) = optional_document(ctx, body, "sort")? else {
        return Ok(FindSort::None);
    };
    let Some(direction) = spec.get("$natural") else {
        let sort = SortSpec::parse_find(spec)?;
        return Ok(if sort.is_empty() {
            FindSort::None
        } else {
            FindSort::Keys(sort)
        });
    };
    if spec.len() != 1 {
        return Err(CommandError::bad_value(format!(
            "Cannot include '$natural' in compound sort: {}",
            tideway_base::display::value_string(&Bson::Document(spec.clone()))
        )));
    }
    if filter.text().is_some() {
        return Err(CommandError::bad_value(
            "text expression not allowed with $natural sort order",
        ));
    }
    // mongod compares the two as `numberInt()`: truncated, 0 when not a number.
    let number_int = |value: &Bson| tideway_base::bsonutil::as_f64(value).map_or(0.0, f64::trunc);
    match body.get("hint") {
        Some(Bson::Document(hint)) if hint.is_empty() => {}
        Some(Bson::Document(hint)) if hint.contains_key("$natural") => {
            if hint.get("$natural").map(number_int) != Some(number_int(direction)) {
                return Err(CommandError::bad_value(
                    "$natural hint must be in the same direction as $natural sort order",
                ));
            }
        }
        None | Some(Bson::Null) => {}
        Some(_) => {
            return Err(CommandError::bad_value(
                "index hint not allowed with $natural sort order",
            ))
        }
    }
    Ok(FindSort::Natural(planner::Hint::natural(direction)))
}

/// The `$meta` names a read's projection may use: tideway's TTL metadata and the text score.
const PROJECTION_META: &[&str] = &[
    tideway_exec::ttl::META_LAST_MODIFIED,
    tideway_exec::ttl::META_EXPIRE_AT,
    tideway_query::TEXT_SCORE_META,
];

/// Whether a projection or sort spec asks for `{$meta: "textScore"}` (at its top level).
fn asks_text_score(spec: Option<&Document>) -> bool {
    spec.is_some_and(|spec| {
        spec.values().any(|value| {
            matches!(value, Bson::Document(meta) if meta.get_str("$meta") == Ok(tideway_query::TEXT_SCORE_META))
        })
    })
}

/// mongod's error for a text score asked of a query without `$text`.
fn text_score_unavailable() -> CommandError {
    CommandError::new(
        ErrorCode::Location40218,
        "query requires text score metadata, but it is not available",
    )
}

/// The command's projection (`field`), its expressions seeing the command's `variables`.
pub(crate) fn parse_projection(
    ctx: &CommandContext,
    body: &Document,
    field: &str,
    variables: &CommandVariables,
) -> CommandResult<Option<Projection>> {
    match optional_document(ctx, body, field)? {
        Some(spec) if !spec.is_empty() => Ok(Some(with_command_variables(variables, || {
            Projection::parse(spec, PROJECTION_META)
        })?)),
        _ => Ok(None),
    }
}

fn reject_unsupported(ctx: &CommandContext, body: &Document) -> CommandResult<()> {
    let tailable = optional_bool(ctx, body, "tailable")? == Some(true);
    if optional_bool(ctx, body, "awaitData")? == Some(true) && !tailable {
        // tailable_mode.cpp
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            "Cannot set 'awaitData' without also setting 'tailable'",
        ));
    }
    if tailable {
        // query_request_helper.cpp
        // `{$natural: 1}` in any numeric type (mongod compares it numerically).
        let natural_sort = match optional_document(ctx, body, "sort")? {
            None => true,
            Some(sort) => {
                sort.is_empty()
                    || (sort.len() == 1
                        && sort
                            .get("$natural")
                            .and_then(tideway_base::bsonutil::as_f64)
                            == Some(1.0))
            }
        };
        if !natural_sort {
            return Err(CommandError::bad_value(
                "cannot use tailable option with a sort other than {$natural: 1}",
            ));
        }
        if optional_bool(ctx, body, "singleBatch")? == Some(true) {
            return Err(CommandError::bad_value(
                "cannot use tailable option with the 'singleBatch' option",
            ));
        }
    }
    for option in ["min", "max", "returnKey", "showRecordId"] {
        if body
            .get(option)
            .is_some_and(|value| !matches!(value, Bson::Boolean(false) | Bson::Null))
        {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support the find option '{option}'"),
            ));
        }
    }
    Ok(())
}

/// A `find` planned and ready to read: its cursor and what explain reports about it.
pub(crate) struct FindRun {
    pub cursor: Cursor,
    pub view: CollectionView,
    pub planned: PlanSummary,
    /// What the scan examined, when a blocking sort already read it all (otherwise the
    /// cursor's stream keeps counting).
    pub drained: Option<ScanStats>,
    pub sort: Option<Document>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub projection: Option<Document>,
    pub options: BatchOptions,
}

/// Parses, plans and starts a `find`: skips what `skip` asks, and runs a blocking sort when
/// the plan does not provide the order.
pub(crate) async fn start_find(
    ctx: &CommandContext<'_>,
    body: &Document,
) -> CommandResult<FindRun> {
    let ns = collection_namespace(ctx, body)?;
    reject_unsupported(ctx, body)?;
    let variables = let_variables(ctx, body)?;
    let filter = parse_filter(ctx, body, "filter", &variables)?;
    let (sort, natural_sort) = match parse_sort(ctx, body, &filter)? {
        FindSort::None => (None, None),
        FindSort::Keys(sort) => (Some(sort), None),
        FindSort::Natural(hint) => (None, Some(hint)),
    };
    let sorts_naturally = natural_sort.is_some();
    let projection = parse_projection(ctx, body, "projection", &variables)?;
    let text_score = asks_text_score(optional_document(ctx, body, "projection")?)
        || sort.as_ref().is_some_and(SortSpec::has_text_score);
    if text_score && filter.text().is_none() {
        return Err(text_score_unavailable());
    }
    let skip = optional_non_negative(ctx, body, "skip")?.unwrap_or(0);
    let limit = optional_non_negative(ctx, body, "limit")?.filter(|limit| *limit > 0);
    let allow_disk_use = optional_bool(ctx, body, "allowDiskUse")?;
    let options = BatchOptions {
        batch_size: optional_non_negative(ctx, body, "batchSize")?,
        single_batch: optional_bool(ctx, body, "singleBatch")?.unwrap_or(false),
        no_timeout: optional_bool(ctx, body, "noCursorTimeout")?.unwrap_or(false),
    };
    let storage = ctx.storage();
    let view = ctx.view(&ns).await?;
    check_hint(&ns, view.meta.as_ref(), body)?;
    let tailable = optional_bool(ctx, body, "tailable")? == Some(true);
    if tailable && view.meta.as_ref().and_then(|meta| meta.capped()).is_none() {
        return Err(tideway_exec::capped::tailable_refused());
    }
    let (filter, sort) = collated(ctx.name, body, &view, filter, sort)?;
    let query = Query {
        filter,
        sort: sort.clone(),
        wanted: limit.map(|limit| skip.saturating_add(limit)),
        // A tailable cursor follows insertion order: a forward collection scan.
        hint: match (tailable, natural_sort) {
            (true, _) => planner::Hint::Natural { reverse: false },
            (false, Some(natural)) => natural,
            (false, None) => planner::resolve_hint(view.meta.as_ref(), body.get("hint")),
        },
        needed_fields: projection
            .as_ref()
            .and_then(Projection::included_top_level_fields),
    };
    let planned = view.plan(storage, &ctx.state.plan_cache, &query).await?;
    let (summary, mut stream) = PlanSummary::split(planned, &query);
    if tailable {
        stream.make_tailable();
    }
    ctx.op.set_plan_summary(summary.plan.summary());
    let mut drained = None;
    let source = match sort.as_ref().filter(|_| !summary.plan.provides_sort) {
        Some(sort) => {
            // A blocking sort: top-(skip + limit) with a limit, spilled past the memory limit.
            let max_memory_bytes = ctx.state.params.max_blocking_sort_bytes();
            let limits = ctx.blocking_limits(
                allow_disk_use,
                max_memory_bytes,
                format!(
                    "Executor error during find command :: caused by :: {}",
                    sorter::sort_exceeded_message(max_memory_bytes as usize)
                ),
            );
            let keep = limit
                .map(|limit| usize::try_from(skip.saturating_add(limit)).unwrap_or(usize::MAX));
            let mut sorter = Sorter::new(sort.key_order(), keep, limits);
            let text = query.filter.text();
            while let Some(record) = stream.next(storage).await? {
                ctx.deadline.check()?;
                let score = text.and_then(|text| text.score(&record.doc));
                sorter.push(sort.sort_key_scored(&record.doc, score), record)?;
            }
            drained = Some(stream.stats());
            report_examined(ctx, Some(ScanStats::default()), drained);
            ctx.op.set_sort_stage(sorter.spilled());
            let mut sorted = sorter.finish()?;
            for _ in 0..skip {
                if sorted.next_item()?.is_none() {
                    break;
                }
            }
            CursorSource::Sorted(Box::new(sorted))
        }
        None => {
            for _ in 0..skip {
                if stream.next(storage).await?.is_none() {
                    break;
                }
            }
            CursorSource::Stream(Box::new(stream))
        }
    };
    let mut cursor = Cursor::new(ns.to_string(), Some(ns), source, projection, limit);
    cursor.filter = Some(query.filter.clone());
    cursor.tailable = tailable;
    cursor.await_data = tailable && optional_bool(ctx, body, "awaitData")? == Some(true);
    Ok(FindRun {
        cursor,
        view,
        planned: summary,
        drained,
        // A `$natural` sort is no sort: the plan reads in that order.
        sort: optional_document(ctx, body, "sort")?
            .filter(|_| !sorts_naturally)
            .cloned(),
        skip,
        limit,
        projection: optional_document(ctx, body, "projection")?.cloned(),
        options,
    })
}

async fn find(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    bump(&ctx.state.stats.opcounters.query, 1);
    let run = start_find(ctx, body).await?;
    open_cursor(ctx, run.cursor, &run.view.visibility, run.options).await
}

async fn get_more(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<Reply> {
    let id = match body.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => {
            return Err(CommandError::wrong_type(
                "getMore", "getMore", other, "long",
            ))
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                "getMore requires a cursor id",
            ))
        }
    };
    let coll = required("getMore", body, "collection", "string", Bson::as_str)?;
    let batch_size = optional_non_negative(ctx, body, "batchSize")?.filter(|size| *size > 0);
    let now_ms = ctx.state.clock.now_ms();
    let requested_ns = format!("{}.{coll}", ctx.db);
    let mut cursor = ctx.state.cursors.checkout(id, now_ms).ok_or_else(|| {
        CommandError::new(
            ErrorCode::CursorNotFound,
            format!("cursor id {id} not found"),
        )
    })?;
    if !crate::access::enforce::coauthorized(ctx.state, ctx.client, &cursor.owner) {
        ctx.state.cursors.checkin(id, cursor, now_ms);
        return Err(crate::access::enforce::foreign_cursor(id));
    }
    if cursor.ns != requested_ns {
        let ns = cursor.ns.clone();
        ctx.state.cursors.checkin(id, cursor, now_ms);
        return Err(CommandError::new(
            ErrorCode::Unauthorized,
            format!("Requested getMore on namespace '{requested_ns}', but cursor belongs to a different namespace {ns}"),
        ));
    }
    if let Err(error) = crate::txn::check_cursor(id, cursor.transaction, ctx.txn) {
        ctx.state.cursors.checkin(id, cursor, now_ms);
        return Err(error);
    }
    bump(&ctx.state.stats.opcounters.getmore, 1);
    if cursor.change_stream.is_some() {
        return super::change_stream::get_more(ctx, id, cursor, batch_size, body).await;
    }
    let await_ms = match crate::commands::args::optional_i64(ctx, body, "maxTimeMS")? {
        // mongod: getmore_cmd.cpp
        Some(_) if !cursor.await_data => {
            ctx.state.cursors.checkin(id, cursor, now_ms);
            return Err(CommandError::bad_value(
                "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
            ));
        }
        Some(ms) if ms > 0 => ms as u64,
        _ => tideway_exec::capped::DEFAULT_AWAIT_MS,
    };
    let before = cursor.scan_stats();
    // Clients insert into capped collections through `crud`, which notifies `INSERTED`; the
    // oplog is appended to by the engine, which notifies `oplog_appended`.
    let appended = if cursor.collection == Some(tideway_storage::oplog::oplog_namespace()) {
        ctx.state.storage.oplog_appended()
    } else {
        &tideway_exec::capped::INSERTED
    };
    // Registered before reading, so an insert between the read and the wait still wakes it.
    let mut inserted = std::pin::pin!(appended.notified());
    inserted.as_mut().enable();
    let mut read = read_more(ctx, &mut cursor, batch_size).await?;
    if cursor.await_data {
        let until = tokio::time::Instant::now() + std::time::Duration::from_millis(await_ms);
        while read.0.is_empty() && !read.1 {
            if tokio::time::timeout_at(until, inserted.as_mut())
                .await
                .is_err()
            {
                break;
            }
            inserted.set(appended.notified());
            inserted.as_mut().enable();
            read = read_more(ctx, &mut cursor, batch_size).await?;
        }
    }
    let (batch, exhausted) = read;
    report_examined(ctx, before, cursor.scan_stats());
    ctx.op
        .set_get_more_batch(id, batch.len(), exhausted, &cursor.originating_command);
    let ns = cursor.ns.clone();
    let reply_id = if exhausted {
        0
    } else {
        ctx.state
            .cursors
            .checkin(id, cursor, ctx.state.clock.now_ms());
        id
    };
    Ok(Reply::cursor(reply_id, &ns, batch, false))
}

/// One `getMore` batch of `cursor`. Visibility is decided now, with the collection's current
/// policies, not when the cursor opened; the view holds the collection's policy gate only while
/// the batch is read, never across an `awaitData` wait.
async fn read_more(
    ctx: &CommandContext<'_>,
    cursor: &mut Cursor,
    batch_size: Option<u64>,
) -> CommandResult<(Vec<bson::RawDocumentBuf>, bool)> {
    let view = match &cursor.collection {
        Some(ns) => Some(ctx.view(ns).await?),
        None => None,
    };
    let visibility = view.as_ref().map_or_else(
        || Visibility::everything(ctx.clock().now_ms()),
        |view| view.visibility.clone(),
    );
    cursor
        .next_batch(
            ctx.storage(),
            batch_size,
            &visibility,
            "Executor error during getMore",
        )
        .await
}

async fn kill_cursors(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    // Cursors of no collection (`$cmd.listCollections`, `$cmd.aggregate`, `$cmd.bulkWrite`) are
    // killed under their cursor namespace, which no collection could have.
    if !matches!(body.get("killCursors"), Some(Bson::String(name)) if name.starts_with("$cmd.")) {
        collection_namespace(ctx, body)?;
    }
    let ids = required("killCursors", body, "cursors", "array", Bson::as_array)?;
    // Under --auth a connection kills its own cursors, or any with `killAnyCursor`.
    let kill_any = crate::access::enforce::privileges(ctx.state, ctx.client)
        .await?
        .is_none_or(|privileges| {
            privileges.allows(
                crate::auth::privileges::Target::Cluster,
                crate::auth::privileges::Action::killAnyCursor,
            )
        });
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        let Bson::Int64(id) = id else {
            return Err(CommandError::wrong_type(
                "killCursors",
                &format!("cursors.{index}"),
                id,
                "long",
            ));
        };
        if !ctx.state.cursors.may_kill(*id, |owner| {
            crate::access::enforce::coauthorized(ctx.state, ctx.client, owner)
        }) && !kill_any
        {
            return Err(crate::access::enforce::foreign_cursor(*id));
        }
        if ctx.state.cursors.kill(*id) {
            killed.push(Bson::Int64(*id));
        } else {
            not_found.push(Bson::Int64(*id));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    })
}

/// What [`matches_in`] read.
pub(crate) struct PlannedMatches {
    /// The matching records (none when only counted).
    pub records: Vec<Record>,
    /// How many matched.
    pub count: u64,
    pub summary: PlanSummary,
    pub stats: ScanStats,
    /// Counted from index keys alone (`COUNT_SCAN`), no document read.
    pub from_keys: bool,
}

/// The collection and query a read plans: `filter` over `ns`, with the `collation` and `hint`
/// of `options` checked, and `sort` and `wanted` as the command would plan with.
pub(crate) async fn read_target(
    ctx: &CommandContext<'_>,
    ns: &Namespace,
    filter: Filter,
    options: &Document,
    sort: Option<SortSpec>,
    wanted: Option<u64>,
) -> CommandResult<(CollectionView, Query)> {
    let view = ctx.view(ns).await?;
    check_hint(ns, view.meta.as_ref(), options)?;
    let (filter, sort) = collated(ctx.name, options, &view, filter, sort)?;
    let query = Query {
        filter,
        sort,
        wanted,
        hint: planner::resolve_hint(view.meta.as_ref(), options.get("hint")),
        needed_fields: None,
    };
    Ok((view, query))
}

/// A read's filter and sort under the collation it runs with: the `collation` of `options`, or
/// the collection's default.
pub fn collated(
    command: &str,
    options: &Document,
    view: &CollectionView,
    filter: Filter,
    sort: Option<SortSpec>,
) -> CommandResult<(Arc<Filter>, Option<SortSpec>)> {
    let collation = collation_for(command, options, view.meta.as_ref())?;
    let sort = sort.map(|sort| sort.with_collation(collation.clone()));
    Ok((Arc::new(filter.with_collation(collation)), sort))
}

/// [`read_target`] of a command that names its collection first and its filter `query`
/// (`count`, `distinct`).
pub(crate) async fn query_target(
    ctx: &CommandContext<'_>,
    body: &Document,
) -> CommandResult<(CollectionView, Query)> {
    let ns = collection_namespace(ctx, body)?;
    let filter = parse_filter(ctx, body, "query", &let_variables(ctx, body)?)?;
    read_target(ctx, &ns, filter, body, None, None).await
}

/// The records of `view` matching `query`, how they were planned, and what the read examined;
/// when the plan yields the query's order, reading stops after `wanted`. With `count_only`,
/// the records are counted, from index keys when the plan allows it and nothing can be hidden
/// by expiry.
pub(crate) async fn matches_in(
    ctx: &CommandContext<'_>,
    view: &CollectionView,
    query: &Query,
    count_only: bool,
) -> CommandResult<PlannedMatches> {
    let storage = ctx.storage();
    let planned = view.plan(storage, &ctx.state.plan_cache, query).await?;
    let (summary, mut stream) = PlanSummary::split(planned, query);
    ctx.op.set_plan_summary(summary.plan.summary());
    if count_only {
        if let Some(count) = count_from_keys(ctx, view, &summary.plan, &query.filter).await? {
            return Ok(PlannedMatches {
                records: Vec::new(),
                count,
                summary,
                stats: ScanStats {
                    keys_examined: count,
                    ..ScanStats::default()
                },
                from_keys: true,
            });
        }
    }
    // In the order asked for, the first `wanted` documents are all the command uses.
    let enough = query.wanted.filter(|_| summary.plan.provides_sort);
    let mut records = Vec::new();
    let mut count = 0;
    while enough.is_none_or(|enough| count < enough) {
        let Some(record) = stream.next(storage).await? else {
            break;
        };
        count += 1;
        if !count_only {
            records.push(record);
        }
    }
    let stats = stream.stats();
    report_examined(ctx, Some(ScanStats::default()), Some(stats));
    Ok(PlannedMatches {
        records,
        count,
        summary,
        stats,
        from_keys: false,
    })
}

/// The number of documents `filter` matches, counted from the index keys of `plan` alone
/// (mongod's `COUNT_SCAN`) when the plan allows it and nothing in the collection can be hidden
/// by expiry (judging expiry needs the documents); `None` otherwise.
pub(crate) async fn count_from_keys(
    ctx: &CommandContext<'_>,
    view: &CollectionView,
    plan: &QueryPlan,
    filter: &Filter,
) -> CommandResult<Option<u64>> {
    if view.visibility.expired().is_some() {
        return Ok(None);
    }
    let Some(scan) = plan.count_scan(filter) else {
        return Ok(None);
    };
    let sources = scan
        .ranges
        .iter()
        .map(|range| ReapSource::Index {
            name: scan.index.name.clone(),
            range: range.clone(),
        })
        .collect();
    let counted = ctx.storage().count_entries(&view.ns, sources).await?;
    ctx.op.set_plan_summary(format!(
        "COUNT_SCAN {}",
        planner::key_pattern_summary(&scan.index)
    ));
    ctx.op.add_examined(counted.in_sources, 0);
    Ok(Some(counted.in_sources))
}

/// `count`'s `skip` and `limit` (a negative limit counts like its absolute value, as mongod
/// does; 0 is no limit).
pub(crate) fn count_window(
    ctx: &CommandContext<'_>,
    body: &Document,
) -> CommandResult<(u64, Option<u64>)> {
    let skip = optional_non_negative(ctx, body, "skip")?.unwrap_or(0);
    let limit = optional_i64(ctx, body, "limit")?
        .map(i64::unsigned_abs)
        .filter(|limit| *limit > 0);
    Ok((skip, limit))
}

async fn count(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let (skip, limit) = count_window(ctx, body)?;
    let (view, query) = query_target(ctx, body).await?;
    let matched = if query.filter.matches_everything() {
        // Every visible document: the stored count less the expired ones, counted from the expiry
        // structures (never a raw count that would include them).
        crate::commands::ddl::visible_stats(ctx, &view)
            .await?
            .map_or(0, |stats| stats.count)
    } else {
        matches_in(ctx, &view, &query, true).await?.count
    };
    let counted = matched.saturating_sub(skip).min(limit.unwrap_or(u64::MAX));
    let n = i32::try_from(counted).map_or(Bson::Int64(counted as i64), Bson::Int32);
    Ok(doc! {"n": n})
}

/// What `distinct` read: the values, and how (a `DISTINCT_SCAN` of an index, or a plan whose
/// documents were all read).
pub(crate) struct DistinctRead {
    pub values: Vec<Bson>,
    /// Whether the values came from a `DISTINCT_SCAN` (the summary's plan is its index scan).
    pub distinct_scan: bool,
    pub summary: PlanSummary,
    pub stats: ScanStats,
}

/// Runs `distinct`: by jumping through an index on the key when one answers it, otherwise by
/// reading every matching document.
pub(crate) async fn distinct_read(
    ctx: &CommandContext<'_>,
    body: &Document,
) -> CommandResult<DistinctRead> {
    let key = required("distinct", body, "key", "string", Bson::as_str)?;
    let (view, query) = query_target(ctx, body).await?;
    let scan = view
        .meta
        .as_ref()
        .and_then(|meta| planner::distinct_scan(meta, &query.filter, key, &query.hint));
    if let Some(scan) = scan {
        let (mut values, stats) =
            executor::distinct_values(ctx.storage(), &view, &scan, key).await?;
        ctx.op.set_plan_summary(format!(
            "DISTINCT_SCAN {}",
            planner::key_pattern_summary(&scan.index)
        ));
        report_examined(ctx, Some(ScanStats::default()), Some(stats));
        values.sort_by(|a, b| compare_values_with(a, b, query.filter.collation().as_deref()));
        return Ok(DistinctRead {
            values,
            distinct_scan: true,
            summary: PlanSummary::of_distinct_scan(scan, query.filter),
            stats,
        });
    }
    let matches = matches_in(ctx, &view, &query, false).await?;
    let collation = query.filter.collation().as_deref();
    let mut values: Vec<Bson> = Vec::new();
    for record in &matches.records {
        executor::push_distinct(&mut values, &record.doc, key, collation);
    }
    values.sort_by(|a, b| compare_values_with(a, b, collation));
    Ok(DistinctRead {
        values,
        distinct_scan: false,
        summary: matches.summary,
        stats: matches.stats,
    })
}

async fn distinct(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let read = distinct_read(ctx, body).await?;
    Ok(doc! {"values": read.values})
}

/// The cursor reply of a result computed in full (catalog listings, aggregation results):
/// `documents` paged by the command's `cursor.batchSize`, under the cursor namespace `cursor_ns`.
pub(crate) async fn buffered_cursor(
    ctx: &CommandContext<'_>,
    body: &Document,
    cursor_ns: String,
    documents: Vec<Document>,
) -> CommandResult<Reply> {
    computed_cursor(ctx, body, cursor_ns, buffered_source(documents)).await
}

/// A cursor over a pipeline's output.
pub(crate) async fn stream_cursor(
    ctx: &CommandContext<'_>,
    body: &Document,
    cursor_ns: String,
    documents: DocumentStream,
) -> CommandResult<Reply> {
    let source = CursorSource::Documents(Box::new(documents.peekable()));
    computed_cursor(ctx, body, cursor_ns, source).await
}

/// A cursor over computed documents (no collection, so nothing expires), batched as the
/// command's `cursor.batchSize` asks.
async fn computed_cursor(
    ctx: &CommandContext<'_>,
    body: &Document,
    cursor_ns: String,
    source: CursorSource,
) -> CommandResult<Reply> {
    let cursor = Cursor::new(cursor_ns, None, source, None, None);
    let visibility = Visibility::everything(ctx.clock().now_ms());
    open_cursor(ctx, cursor, &visibility, command_batch_options(ctx, body)?).await
}

/// A cursor over a pipeline with no blocking stage, run as batches are asked for over the
/// documents of `ns` still to be read, which `visibility` judges now and each `getMore`
/// judges again; named `cursor_ns` (`ns`, or the view read through).
pub(crate) async fn pulled_pipeline_cursor(
    ctx: &CommandContext<'_>,
    body: &Document,
    cursor_ns: String,
    ns: &Namespace,
    pulled: PulledPipeline,
    visibility: &Visibility,
) -> CommandResult<Reply> {
    let source = CursorSource::Pipeline(Box::new(pulled));
    let cursor = Cursor::new(cursor_ns, Some(ns.clone()), source, None, None);
    open_cursor(ctx, cursor, visibility, command_batch_options(ctx, body)?).await
}

/// The batching a cursor command (`aggregate`, catalog listings) asks for in `cursor.batchSize`.
fn command_batch_options(ctx: &CommandContext<'_>, body: &Document) -> CommandResult<BatchOptions> {
    let batch_size = match optional_document(ctx, body, "cursor")? {
        Some(cursor) => optional_non_negative(ctx, cursor, "batchSize")?,
        None => None,
    };
    Ok(BatchOptions {
        batch_size,
        single_batch: false,
        no_timeout: false,
    })
}

/// A buffered cursor over documents computed in full (catalog listings).
fn buffered_source(documents: Vec<Document>) -> CursorSource {
    let records: VecDeque<Record> = documents.into_iter().map(output_record).collect();
    CursorSource::Buffered(records)
}
