//! `explain` of `find`, `count`, `distinct`, `aggregate`, `update`, `delete` and
//! `findAndModify`, at the verbosities `queryPlanner`, `executionStats` and
//! `allPlansExecution`, in mongod's reply shape (`queryPlanner`, `executionStats`, `command`,
//! `serverInfo`).
//!
//! Invariants: the plan explained is the plan the command would run (the same planning
//! functions choose it); execution counters are measured by running the read to the end; an
//! explained write reads what it would change but writes nothing (mongod's `nWouldModify`).

use std::time::Instant;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::aggregate::pipeline_stages;
use crate::commands::args::{
    collection_namespace, let_variables, optional_bool, optional_document, required,
};
use crate::commands::crud::{parse_update, statement_variables};
use crate::commands::ddl::visible_stats;
use crate::commands::find::{
    count_window, distinct_read, matches_in, query_target, read_target, start_find,
};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::executor::Access;
use tideway_exec::executor::ScanStats;
use tideway_exec::planner::explain::{
    access_stages, count, count_scan_stage, distinct_scan_stages, parsed_query, query_hash, wrap,
};
use tideway_exec::planner::PlanSummary;
use tideway_query::expr::command_variables::with_command_variables;
use tideway_query::UpdateContext;
use tideway_storage::Record;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "explain",
    aliases: &[],
    help: "How a find, count, distinct, aggregate, update, delete or findAndModify would run (queryPlanner, executionStats, allPlansExecution).",
    admin_only: false,
    test_only: false,
    handler: async_handler!(explain),
}];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

pub fn verbosity(body: &Document) -> CommandResult<Verbosity> {
    match body.get("verbosity") {
        None => Ok(Verbosity::AllPlansExecution),
        Some(Bson::String(name)) => match name.as_str() {
            "queryPlanner" => Ok(Verbosity::QueryPlanner),
            "executionStats" => Ok(Verbosity::ExecutionStats),
            "allPlansExecution" => Ok(Verbosity::AllPlansExecution),
            other => Err(CommandError::bad_value(format!(
                "Enumeration value '{other}' for field 'explain.verbosity' is not a valid value."
            ))),
        },
        Some(other) => Err(CommandError::wrong_type(
            "explain",
            "verbosity",
            other,
            "string",
        )),
    }
}

async fn explain(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let inner = required("explain", body, "explain", "object", Bson::as_document)?;
    let verbosity = verbosity(body)?;
    let Some(command) = inner.keys().next() else {
        return Err(CommandError::bad_value(
            "explain command requires a nested object",
        ));
    };
    // The inner command runs against the outer command's database, under its own name.
    let mut inner = inner.clone();
    inner.insert("$db", ctx.db);
    let name: &'static str = match command.as_str() {
        "find" => "find",
        "count" => "count",
        "distinct" => "distinct",
        "aggregate" => "aggregate",
        "update" => "update",
        "delete" => "delete",
        "findAndModify" | "findandmodify" => "findAndModify",
        "bulkWrite" | "mapReduce" | "mapreduce" => {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support explain of {command}"),
            ))
        }
        other => {
            return Err(CommandError::new(
                ErrorCode::CommandNotFound,
                format!("Explain failed due to unknown command: {other}"),
            ))
        }
    };
    if let Some(args) = crate::commands::schema::args_for(name) {
        crate::commands::schema::validate(name, args, &inner)?;
    }
    let ctx = &ctx.renamed(name);
    let mut reply = match name {
        "find" => explain_find(ctx, &inner, verbosity).await?,
        "count" => explain_count(ctx, &inner, verbosity).await?,
        "distinct" => explain_distinct(ctx, &inner, verbosity).await?,
        "aggregate" => explain_aggregate(ctx, &inner, verbosity).await?,
        "update" => explain_write(ctx, &inner, verbosity, WriteKind::Update).await?,
        "delete" => explain_write(ctx, &inner, verbosity, WriteKind::Delete).await?,
        _ => explain_write(ctx, &inner, verbosity, WriteKind::FindAndModify).await?,
    };
    inner.remove("$db");
    reply.insert("command", inner);
    reply.insert("serverInfo", server_info(ctx));
    Ok(reply)
}

/// The explain of aggregate `body` at `verbosity` (`explain: true` on `aggregate` itself is the
/// `queryPlanner` explain; a read through a view explains its aggregate at the verbosity asked).
pub(crate) async fn explain_aggregate_command(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
) -> CommandResult {
    let mut reply = explain_aggregate(ctx, body, verbosity).await?;
    let mut command = body.clone();
    command.remove("$db");
    reply.insert("command", command);
    reply.insert("serverInfo", server_info(ctx));
    Ok(reply)
}

fn server_info(ctx: &CommandContext<'_>) -> Document {
    doc! {
        "host": &ctx.state.hostname,
        "port": i32::from(ctx.state.config.port),
        "version": crate::commands::handshake::MONGODB_VERSION,
        "gitVersion": concat!("tideway-", env!("CARGO_PKG_VERSION")),
    }
}

/// `queryPlanner` for a planned read: `winning` is the winner's stage tree, and each rejected
/// candidate's access stages are put under the same stages by `wrap`.
fn query_planner(
    ns: &str,
    summary: &PlanSummary,
    winning: Document,
    wrap: &dyn Fn(Document) -> Document,
) -> Document {
    let rejected = summary
        .rejected
        .iter()
        .map(|(plan, _)| Bson::Document(wrap(access_stages(plan, &summary.filter, None))))
        .collect();
    planner_document(ns, &summary.filter, &summary.shape(), winning, rejected)
}

fn planner_document(
    ns: &str,
    filter: &tideway_query::Filter,
    shape: &str,
    winning: Document,
    rejected: Vec<Bson>,
) -> Document {
    let hash = query_hash(shape);
    let mut planner = doc! {
        "namespace": ns,
        "indexFilterSet": false,
        "parsedQuery": parsed_query(filter),
    };
    if let Some(collation) = filter.collation() {
        planner.insert("collation", collation.spec().clone());
    }
    planner.extend(doc! {
        "queryHash": &hash,
        "planCacheKey": &hash,
        "maxIndexedOrSolutionsReached": false,
        "maxIndexedAndSolutionsReached": false,
        "maxScansToExplodeReached": false,
        "winningPlan": winning,
        "rejectedPlans": rejected,
    });
    planner
}

/// `executionStats` from what the read measured.
fn execution_stats(
    summary: &PlanSummary,
    verbosity: Verbosity,
    returned: u64,
    stats: &ScanStats,
    started: Instant,
    stages: Document,
) -> Document {
    let mut execution = doc! {
        "executionSuccess": true,
        "nReturned": count(returned),
        "executionTimeMillis": count(started.elapsed().as_millis() as u64),
        "totalKeysExamined": count(stats.keys_examined),
        "totalDocsExamined": count(stats.docs_examined),
        "executionStages": stages,
    };
    if verbosity == Verbosity::AllPlansExecution {
        let mut all: Vec<Bson> = Vec::new();
        if let Some(trial) = &summary.trial {
            all.push(Bson::Document(trial_stats(&summary.plan, summary, trial)));
            for (plan, trial) in &summary.rejected {
                all.push(Bson::Document(trial_stats(plan, summary, trial)));
            }
        }
        execution.insert("allPlansExecution", all);
    }
    execution
}

/// What one candidate did during the planner's trial.
fn trial_stats(
    plan: &tideway_exec::planner::QueryPlan,
    summary: &PlanSummary,
    trial: &ScanStats,
) -> Document {
    doc! {
        "nReturned": count(trial.returned),
        "executionTimeMillisEstimate": 0,
        "totalKeysExamined": count(trial.keys_examined),
        "totalDocsExamined": count(trial.docs_examined),
        "executionStages": access_stages(plan, &summary.filter, Some(trial)),
    }
}

fn explain_reply(query_planner: Document, execution: Option<Document>) -> Document {
    let mut reply = doc! {"explainVersion": "1", "queryPlanner": query_planner};
    if let Some(execution) = execution {
        reply.insert("executionStats", execution);
    }
    reply
}

/// The reply of an explained read whose stage tree is `wrap` over the plan's access stages
/// (`access`): built without counters for `queryPlanner` (the winner, and each rejected plan's
/// access stages under the same `wrap`), and, unless that is all the verbosity asks, with the
/// measured counters for `executionStats`.
fn planned_reply(
    ns: &str,
    summary: &PlanSummary,
    verbosity: Verbosity,
    measured: (u64, &ScanStats),
    started: Instant,
    access: impl Fn(Option<&ScanStats>) -> Document,
    wrap: impl Fn(Document, Option<&ScanStats>) -> Document,
) -> Document {
    let planner = query_planner(ns, summary, wrap(access(None), None), &|rejected| {
        wrap(rejected, None)
    });
    if verbosity == Verbosity::QueryPlanner {
        return explain_reply(planner, None);
    }
    let (returned, stats) = measured;
    let stages = wrap(access(Some(stats)), Some(stats));
    let execution = execution_stats(summary, verbosity, returned, stats, started, stages);
    explain_reply(planner, Some(execution))
}

async fn explain_find(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    let started = Instant::now();
    let mut run = start_find(ctx, body).await?;
    let ns = run.view.ns.to_string();
    let sort = run.sort.clone();
    let (skip, limit, projection) = (run.skip, run.limit, run.projection.clone());
    let wrap_stages = |access: Document, counted: Option<(u64, u64, u64)>| {
        // Counts: documents out of the access stages, after the sort, after skip.
        // An `IXSCAN` at the top of the access stages is a covered plan's (others fetch).
        let covered = access.get_str("stage") == Ok("IXSCAN");
        let mut stages = access;
        if let Some(sort) = sort.as_ref().filter(|_| !run.planned.plan.provides_sort) {
            let mut fields =
                doc! {"sortPattern": sort.clone(), "memLimit": 104_857_600, "type": "simple"};
            if let Some(limit) = limit {
                fields.insert("limitAmount", count(skip.saturating_add(limit)));
            }
            stages = wrap(stages, "SORT", fields, counted.map(|(sorted, _, _)| sorted));
        }
        if skip > 0 {
            stages = wrap(
                stages,
                "SKIP",
                doc! {"skipAmount": count(skip)},
                counted.map(|(_, skipped, _)| skipped),
            );
        }
        if let Some(limit) = limit {
            stages = wrap(
                stages,
                "LIMIT",
                doc! {"limitAmount": count(limit)},
                counted.map(|(_, _, out)| out),
            );
        }
        if let Some(projection) = &projection {
            stages = wrap(
                stages,
                if covered {
                    "PROJECTION_COVERED"
                } else {
                    "PROJECTION_DEFAULT"
                },
                doc! {"transformBy": projection.clone()},
                counted.map(|(_, _, out)| out),
            );
        }
        stages
    };
    let winning = wrap_stages(
        access_stages(&run.planned.plan, &run.planned.filter, None),
        None,
    );
    let planner = query_planner(&ns, &run.planned, winning, &|access| {
        wrap_stages(access, None)
    });
    if verbosity == Verbosity::QueryPlanner {
        return Ok(explain_reply(planner, None));
    }
    let storage = ctx.storage();
    let mut returned = 0u64;
    loop {
        let (batch, exhausted) = run
            .cursor
            .next_batch(
                storage,
                None,
                &run.view.visibility,
                "Executor error during find command",
            )
            .await?;
        returned += batch.len() as u64;
        if exhausted {
            break;
        }
    }
    let stats = run
        .drained
        .or_else(|| run.cursor.scan_stats())
        .unwrap_or_default();
    // Documents the access stages produced; the sort keeps at most skip + limit of them.
    let sorted = limit.map_or(stats.returned, |limit| {
        stats.returned.min(skip.saturating_add(limit))
    });
    let skipped = if run.drained.is_some() {
        sorted.saturating_sub(skip)
    } else {
        stats.returned.saturating_sub(skip)
    };
    let access = access_stages(&run.planned.plan, &run.planned.filter, Some(&stats));
    let stages = wrap_stages(access, Some((sorted, skipped, returned)));
    let execution = execution_stats(&run.planned, verbosity, returned, &stats, started, stages);
    Ok(explain_reply(planner, Some(execution)))
}

async fn explain_count(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    let started = Instant::now();
    let (skip, limit) = count_window(ctx, body)?;
    let (view, query) = query_target(ctx, body).await?;
    let ns = view.ns.to_string();
    let window = |matched: u64| matched.saturating_sub(skip).min(limit.unwrap_or(u64::MAX));
    let count_fields = |matched: Option<u64>| {
        let mut fields = Document::new();
        if let Some(matched) = matched {
            fields.insert("nCounted", count(window(matched)));
            if skip > 0 {
                fields.insert("nSkipped", count(skip.min(matched)));
            }
        }
        fields
    };
    if query.filter.matches_everything() {
        // What `count` does: the visible count from storage statistics, no document read.
        let fast_count = |matched: Option<u64>| {
            let mut stage = doc! {"stage": "RECORD_STORE_FAST_COUNT"};
            stage.extend(count_fields(matched));
            stage
        };
        let shape = tideway_exec::planner::shape_key(&query);
        let planner = planner_document(&ns, &query.filter, &shape, fast_count(None), Vec::new());
        if verbosity == Verbosity::QueryPlanner {
            return Ok(explain_reply(planner, None));
        }
        let visible = visible_stats(ctx, &view)
            .await?
            .map_or(0, |stats| stats.count);
        let execution = doc! {
            "executionSuccess": true,
            "nReturned": 0,
            "executionTimeMillis": count(started.elapsed().as_millis() as u64),
            "totalKeysExamined": 0,
            "totalDocsExamined": 0,
            "executionStages": fast_count(Some(visible)),
        };
        return Ok(explain_reply(planner, Some(execution)));
    }
    let matches = matches_in(ctx, &view, &query, true).await?;
    let summary = &matches.summary;
    let access = |stats: Option<&ScanStats>| match summary.plan.count_scan(&summary.filter) {
        Some(scan) if matches.from_keys => count_scan_stage(scan, stats),
        _ => access_stages(&summary.plan, &summary.filter, stats),
    };
    Ok(planned_reply(
        &ns,
        summary,
        verbosity,
        (0, &matches.stats),
        started,
        access,
        |access, stats| {
            let matched = stats.map(|_| matches.count);
            wrap(access, "COUNT", count_fields(matched), matched.map(|_| 0))
        },
    ))
}

async fn explain_distinct(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    let started = Instant::now();
    let key = required("distinct", body, "key", "string", Bson::as_str)?;
    let read = distinct_read(ctx, body).await?;
    let summary = &read.summary;
    let ns = collection_namespace(ctx, body)?.to_string();
    let projection = doc! {"_id": 0, key: 1};
    let access = |stats: Option<&ScanStats>| match &summary.plan.access {
        Access::IndexScan(scan) if read.distinct_scan => distinct_scan_stages(scan, stats),
        _ => access_stages(&summary.plan, &summary.filter, stats),
    };
    Ok(planned_reply(
        &ns,
        summary,
        verbosity,
        (read.stats.returned, &read.stats),
        started,
        access,
        |access, stats| {
            let fields = doc! {"transformBy": projection.clone()};
            wrap(
                access,
                "PROJECTION_SIMPLE",
                fields,
                stats.map(|stats| stats.returned),
            )
        },
    ))
}

async fn explain_aggregate(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
) -> CommandResult<Document> {
    let started = Instant::now();
    let ns = collection_namespace(ctx, body)?;
    // Validates the whole pipeline as aggregate would.
    let documents = pipeline_stages(body)?;
    let variables = let_variables(ctx, body)?;
    let pipeline =
        with_command_variables(&variables, || tideway_query::Pipeline::parse(&documents))?;
    // As the pipeline runs: each `$match` as far ahead as it may go.
    let documents = tideway_query::pipeline::reorder_stages(&documents);
    if pipeline.source().is_some() {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            "explain of a pipeline that starts with a source stage is not supported by tideway",
        ));
    }
    let filter = match pipeline.leading_filter() {
        Some(filter) => filter.clone(),
        None => tideway_query::Filter::parse(&Document::new())?,
    };
    let (sort, wanted) = pipeline
        .leading_sort()
        .map_or((None, None), |(sort, limit)| (Some(sort.clone()), limit));
    let (view, query) = read_target(ctx, &ns, filter, body, sort, wanted).await?;
    let matches = matches_in(ctx, &view, &query, false).await?;
    let summary = &matches.summary;
    let planner = query_planner(
        &ns.to_string(),
        summary,
        access_stages(&summary.plan, &summary.filter, None),
        &|access| access,
    );
    let mut cursor = doc! {"queryPlanner": planner};
    if verbosity >= Verbosity::ExecutionStats {
        let stats = &matches.stats;
        let stages = access_stages(&summary.plan, &summary.filter, Some(stats));
        let returned = matches.records.len() as u64;
        cursor.insert(
            "executionStats",
            execution_stats(summary, verbosity, returned, stats, started, stages),
        );
    }
    let leading_matches = documents
        .iter()
        .take_while(|stage| stage.contains_key("$match"))
        .count();
    let mut explained = vec![Bson::Document(doc! {"$cursor": cursor})];
    explained.extend(
        documents[leading_matches..]
            .iter()
            .cloned()
            .map(Bson::Document),
    );
    Ok(doc! {"explainVersion": "1", "stages": explained})
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Update,
    Delete,
    FindAndModify,
}

/// `update`/`delete` (one statement, as mongod requires) and `findAndModify`: the plan of the
/// read, and with execution stats what the write would do, without writing. (Argument types
/// were checked against the inner command's schema before this runs.)
async fn explain_write(
    ctx: &CommandContext<'_>,
    body: &Document,
    verbosity: Verbosity,
    kind: WriteKind,
) -> CommandResult<Document> {
    let started = Instant::now();
    let ns = collection_namespace(ctx, body)?;
    let (statement, filter_field, update_field) = match kind {
        WriteKind::Update | WriteKind::Delete => {
            let field = if kind == WriteKind::Update {
                "updates"
            } else {
                "deletes"
            };
            let statements = required(ctx.name, body, field, "array", Bson::as_array)?;
            match statements.as_slice() {
                [Bson::Document(statement)] => (statement, "q", "u"),
                _ => {
                    return Err(CommandError::new(
                        ErrorCode::InvalidLength,
                        format!(
                            "explained write batches must be of size 1, but got {}",
                            statements.len()
                        ),
                    ))
                }
            }
        }
        WriteKind::FindAndModify => (body, "query", "update"),
    };
    let variables = statement_variables(ctx, statement, &let_variables(ctx, body)?)?;
    let filter = optional_document(ctx, statement, filter_field)?
        .cloned()
        .unwrap_or_default();
    let filter = with_command_variables(&variables, || tideway_query::Filter::parse(&filter))?;
    let update = match kind {
        WriteKind::Delete => None,
        _ => parse_update(ctx, statement, update_field, update_field, &variables)?,
    };
    let removes = optional_bool(ctx, body, "remove")?.unwrap_or(false);
    if kind == WriteKind::FindAndModify && update.is_some() == removes {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            if removes {
                "Cannot specify both an update and remove=true"
            } else {
                "Either an update or remove=true must be specified"
            },
        ));
    }
    let single = match kind {
        WriteKind::Update => !optional_bool(ctx, statement, "multi")?.unwrap_or(false),
        WriteKind::Delete => statement
            .get("limit")
            .and_then(tideway_base::bsonutil::as_f64)
            .is_some_and(|limit| limit == 1.0),
        WriteKind::FindAndModify => true,
    };
    let sort = match (kind, optional_document(ctx, body, "sort")?) {
        (WriteKind::FindAndModify, Some(sort)) => {
            Some(tideway_query::SortSpec::parse(sort)?).filter(|sort| !sort.is_empty())
        }
        _ => None,
    };
    let (view, query) = read_target(ctx, &ns, filter, statement, sort, single.then_some(1)).await?;
    let matches = matches_in(ctx, &view, &query, false).await?;
    let summary = &matches.summary;
    // A single write takes the first match in sort order (the plan's order when it provides
    // it); a multi write takes them all.
    let targets: Vec<&Record> = match (&query.sort, single) {
        (Some(sort), true) if !summary.plan.provides_sort => matches
            .records
            .iter()
            .min_by(|a, b| sort.compare(&a.doc, &b.doc))
            .into_iter()
            .collect(),
        (_, true) => matches.records.iter().take(1).collect(),
        (_, false) => matches.records.iter().collect(),
    };
    let stage = if update.is_some() { "UPDATE" } else { "DELETE" };
    let matched = targets.len() as u64;
    // What the write would do is measured only when execution stats are asked for.
    let fields = match &update {
        _ if verbosity == Verbosity::QueryPlanner => Document::new(),
        None => doc! {"nWouldDelete": count(matched)},
        Some(update) => {
            let now = bson::DateTime::from_millis(ctx.state.clock.now_ms());
            let mut would_modify = 0u64;
            for record in &targets {
                let mut document = record.doc.document().clone();
                let context = UpdateContext {
                    matched_array_index: summary.filter.match_position(&record.doc).flatten(),
                    collation: summary.filter.collation().clone(),
                    ..UpdateContext::new(now)
                };
                if update.apply(&mut document, &context)? {
                    would_modify += 1;
                }
            }
            let upsert = optional_bool(ctx, statement, "upsert")?.unwrap_or(false);
            doc! {
                "nMatched": count(matched),
                "nWouldModify": count(would_modify),
                "nWouldUpsert": count(u64::from(upsert && matched == 0)),
            }
        }
    };
    Ok(planned_reply(
        &ns.to_string(),
        summary,
        verbosity,
        (0, &matches.stats),
        started,
        |stats| access_stages(&summary.plan, &summary.filter, stats),
        |access, stats| {
            let fields = if stats.is_some() {
                fields.clone()
            } else {
                Document::new()
            };
            wrap(access, stage, fields, None)
        },
    ))
}
