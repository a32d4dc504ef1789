//! `mapReduce`: the documents matching `query` (in `sort` order, at most `limit` of them) are
//! read through the planner as `find` reads them (so expired documents never reach `map`);
//! `map` runs on each with `this` bound to it and `emit(key, value)` collecting pairs; the values
//! of each key are folded by `reduce(key, values)` and, with `finalize`, turned into
//! `finalize(key, reduced)`. The output is `{_id: key, value}` per key, in key order, returned
//! inline or written to a collection (`replace`, `merge` or `reduce`).
//!
//! Invariants:
//! - `map`, `reduce` and `finalize` share one JavaScript program with `scope`'s globals, so
//!   they see each other's global state as on mongod. Scripting off fails the command when `map`
//!   would run (mongod's `$_internalJsEmit`, 31246); with no input document it succeeds, empty.
//! - `reduce` is called once per key over all its values (mongod calls it in batches that fit a
//!   BSON document and re-reduces; a correct reduce is indifferent to the difference), also for
//!   a key with a single value, as mongod 4.4+ does, unless `mrEnableSingleReduceOptimization`
//!   is set (then a single value is the reduced value, as before 4.4 and as the manual says).
//! - Keys are grouped and ordered under the command's collation (as `query` and `sort` are).
//! - Everything is held in memory; the emitted pairs are bounded by `$group`'s memory limit
//!   (`internalDocumentSourceGroupMaxMemoryBytes`), past which the command fails with 292.
//! - `out: {reduce}` reduces an existing output document's value with the new (finalized) one,
//!   `reduce(key, [existing, new])`, and finalizes the result again, as mongod's translation
//!   to a `$merge` pipeline does.

use std::cmp::Ordering;

use bson::{doc, Bson, Document};

use crate::async_handler;
use crate::command::{CommandContext, CommandSpec};
use crate::commands::aggregate::{read_namespace, write_merge, write_out};
use crate::commands::args::{collection_namespace, let_variables, validate_writable_namespace};
use crate::commands::find::{matches_in, read_target};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_exec::planner::Hint;
use tideway_query::compare::compare_values_with;
use tideway_query::js::{self, JsProgram};
use tideway_query::pipeline::{MergeSpec, OutTarget};
use tideway_query::{Filter, PipelineContext, SortSpec};
use tideway_storage::Namespace;

pub const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "mapReduce",
    aliases: &["mapreduce"],
    help: "Map the documents matching a query through JavaScript map/reduce/finalize functions; results inline or into a collection.",
    admin_only: false,
    test_only: false,
    handler: async_handler!(map_reduce),
}];

/// The name mongod's IDL errors give the command.
const IDL_NAME: &str = "MapReduce";

const MAP: usize = 0;
const REDUCE: usize = 1;
const FINALIZE: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutMode {
    Replace,
    Merge,
    Reduce,
}

#[derive(Debug, PartialEq, Eq)]
enum Output {
    Inline,
    Collection {
        mode: OutMode,
        db: Option<String>,
        coll: String,
    },
}

fn bad_value(message: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::BadValue, message)
}

/// `out`, as mongod's `MapReduceOutOptions::parseFromBSON` reads it.
fn parse_out(value: &Bson) -> CommandResult<Output> {
    let spec = match value {
        Bson::String(coll) => {
            return Ok(Output::Collection {
                mode: OutMode::Replace,
                db: None,
                coll: coll.clone(),
            })
        }
        Bson::Document(spec) => spec,
        _ => return Err(bad_value("'out' must be either a string or an object")),
    };
    if let Some(inline) = spec.get("inline") {
        if spec.len() != 1 {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "'inline' must be specified alone",
            ));
        }
        if tideway_base::bsonutil::as_f64(inline) != Some(1.0) {
            return Err(bad_value("'inline' takes only numeric '1'"));
        }
        return Ok(Output::Inline);
    }
    let mut allowed_fields = 4;
    match spec.get("sharded") {
        Some(Bson::Boolean(true)) => {}
        Some(Bson::Boolean(false)) => return Err(bad_value("sharded field value must be true")),
        Some(_) => return Err(bad_value("sharded field value must be boolean")),
        None => allowed_fields -= 1,
    }
    let (mode, target) = [
        ("replace", OutMode::Replace),
        ("merge", OutMode::Merge),
        ("reduce", OutMode::Reduce),
    ]
    .into_iter()
    .find_map(|(field, mode)| spec.get(field).map(|target| (field, mode, target)))
    .map(|(field, mode, target)| match target {
        Bson::String(coll) => Ok((mode, coll.clone())),
        _ => Err(bad_value(format!(
            "'{field}' supports only string consisting of output collection name"
        ))),
    })
    .ok_or_else(|| bad_value("'out' requires 'replace', 'merge' or 'reduce'"))??;
    let db = match spec.get("db") {
        Some(Bson::String(db)) => {
            if matches!(db.as_str(), "admin" | "local" | "config") {
                return Err(CommandError::new(
                    ErrorCode::CommandNotSupported,
                    "cannot target internal database as output",
                ));
            }
            Some(db.clone())
        }
        Some(_) => return Err(bad_value("db field value must be string")),
        None => {
            allowed_fields -= 1;
            None
        }
    };
    match spec.get("nonAtomic") {
        Some(Bson::Boolean(true)) => {}
        Some(Bson::Boolean(false)) => return Err(bad_value("nonAtomic field value must be true")),
        Some(_) => return Err(bad_value("nonAtomic field value must be boolean")),
        None => allowed_fields -= 1,
    }
    if spec.len() != allowed_fields {
        return Err(bad_value(
            "'out' supports only output type with collection name, optional 'sharded' and \
             optional 'db'",
        ));
    }
    Ok(Output::Collection {
        mode,
        db,
        coll: target,
    })
}

/// A JavaScript function argument: a string or Code.
fn parse_code(field: &str, value: &Bson) -> CommandResult<String> {
    match value {
        Bson::String(source) | Bson::JavaScriptCode(source) => Ok(source.clone()),
        _ => Err(bad_value(format!(
            "'{field}' must be of string or code type"
        ))),
    }
}

/// The parsed command, past the collection and the read options.
#[derive(Debug)]
struct MapReduceSpec {
    map: String,
    reduce: String,
    finalize: Option<String>,
    scope: Option<Document>,
    output: Output,
    query: Document,
    sort: Option<Document>,
    limit: Option<u64>,
}

fn parse_spec(body: &Document) -> CommandResult<MapReduceSpec> {
    let (mut map, mut reduce, mut output) = (None, None, None);
    let mut spec = MapReduceSpec {
        map: String::new(),
        reduce: String::new(),
        finalize: None,
        scope: None,
        output: Output::Inline,
        query: Document::new(),
        sort: None,
        limit: None,
    };
    for (field, value) in tideway_base::command::command_fields(body) {
        match field.as_str() {
            "map" => map = Some(parse_code(field, value)?),
            "reduce" => reduce = Some(parse_code(field, value)?),
            "out" => output = Some(parse_out(value)?),
            "query" => match value {
                Bson::Document(query) => spec.query = query.clone(),
                other => return Err(CommandError::wrong_type(IDL_NAME, field, other, "object")),
            },
            "sort" => match value {
                Bson::Document(sort) if sort.is_empty() => {
                    return Err(CommandError::new(
                        ErrorCode::Location15976,
                        "The mapReduce sort option must have at least one sort key",
                    ))
                }
                Bson::Document(sort) => spec.sort = Some(sort.clone()),
                other => return Err(CommandError::wrong_type(IDL_NAME, field, other, "object")),
            },
            "limit" => {
                let limit = match value {
                    Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                        tideway_base::bsonutil::as_f64(value).unwrap_or(0.0)
                    }
                    other => return Err(CommandError::wrong_type(IDL_NAME, field, other, "long")),
                };
                // mongod's `$limit` of its translated pipeline refuses 0 and negatives.
                if limit.is_nan() || limit < 1.0 {
                    return Err(CommandError::new(
                        ErrorCode::Location15958,
                        "The limit specified to mapReduce must be positive",
                    ));
                }
                spec.limit = Some(limit as u64);
            }
            "finalize" => {
                spec.finalize = match value {
                    Bson::Null => None,
                    other => Some(parse_code(field, other)?),
                }
            }
            "scope" => {
                spec.scope = match value {
                    Bson::Null => None,
                    Bson::Document(scope) => Some(scope.clone()),
                    _ => return Err(bad_value("'scope' must be an object")),
                }
            }
            // Honoured by the read (`read_target`), which checks it.
            "collation" => {
                if !matches!(value, Bson::Document(_)) {
                    return Err(CommandError::wrong_type(IDL_NAME, field, value, "object"));
                }
            }
            // Accepted without effect: no timing details are reported, `jsMode` is ignored by
            // mongod too, and `bypassDocumentValidation` is treated as the write commands treat
            // it (`commands::schema`).
            "verbose" | "bypassDocumentValidation" | "jsMode" => {
                if !matches!(value, Bson::Boolean(_)) {
                    return Err(CommandError::wrong_type(IDL_NAME, field, value, "bool"));
                }
            }
            _ => {
                return Err(CommandError::new(
                    ErrorCode::Location40415,
                    format!("BSON field '{IDL_NAME}.{field}' is an unknown field."),
                ))
            }
        }
    }
    spec.map = map.ok_or_else(|| CommandError::idl_missing_field(IDL_NAME, "map"))?;
    spec.reduce = reduce.ok_or_else(|| CommandError::idl_missing_field(IDL_NAME, "reduce"))?;
    spec.output = output.ok_or_else(|| CommandError::idl_missing_field(IDL_NAME, "out"))?;
    Ok(spec)
}

async fn map_reduce(ctx: &CommandContext<'_>, body: &Document) -> CommandResult {
    let ns = collection_namespace(ctx, body)?;
    let spec = parse_spec(body)?;
    if let Output::Collection { db, coll, .. } = &spec.output {
        validate_writable_namespace(&Namespace::new(
            db.as_deref().unwrap_or(ctx.db),
            coll.as_str(),
        ))?;
    }

    // The input: read as `find` reads, expired documents hidden.
    let filter = Filter::parse(&spec.query)?;
    // `{$natural: ±1}` is no sort but the read's direction, as in `find`.
    let natural = spec
        .sort
        .as_ref()
        .filter(|sort| sort.len() == 1)
        .and_then(|sort| sort.get("$natural"))
        .map(Hint::natural);
    let sort = match natural {
        Some(_) => None,
        None => spec.sort.as_ref().map(SortSpec::parse_find).transpose()?,
    };
    let (view, mut query) = read_target(ctx, &ns, filter, body, sort, spec.limit).await?;
    if let Some(natural) = natural {
        query.hint = natural;
    }
    let matches = matches_in(ctx, &view, &query, false).await?;
    let mut documents: Vec<Document> = matches
        .records
        .into_iter()
        .map(|record| record.doc.into_document())
        .collect();
    if let Some(sort) = &query.sort {
        if !matches.summary.plan.provides_sort {
            documents.sort_by(|a, b| sort.compare(a, b));
        }
    }
    if let Some(limit) = spec.limit {
        documents.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    let collation = query.filter.collation().clone();
    let collation = collation.as_deref();

    // Map.
    let mut functions = vec![spec.map.clone(), spec.reduce.clone()];
    functions.extend(spec.finalize.clone());
    let program = JsProgram::new(functions, spec.scope.clone());
    let max_bytes = usize::try_from(ctx.state.params.max_group_bytes()).unwrap_or(usize::MAX);
    let mut emitted: Vec<(Bson, Bson)> = Vec::new();
    let mut emitted_bytes = 0usize;
    if !documents.is_empty() {
        // mongod's `$_internalJsEmit` check: only a map that runs needs the engine.
        js::check_enabled(ErrorCode::Location31246, js::DISABLED_MESSAGE)?;
    }
    for document in &documents {
        ctx.deadline.check()?;
        for (key, value) in program.call_emitting(MAP, document)? {
            emitted_bytes += tideway_base::bsonutil::encoded_size(&doc! {"k": &key, "v": &value});
            if emitted_bytes > max_bytes {
                return Err(CommandError::new(
                    ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                    format!(
                        "mapReduce: the emitted keys and values exceed the memory limit of \
                         {max_bytes} bytes (tideway holds them in memory and does not spill)"
                    ),
                ));
            }
            emitted.push((key, value));
        }
    }

    // Group by key (stable: values keep emission order), reduce, finalize.
    emitted.sort_by(|(a, _), (b, _)| compare_values_with(a, b, collation));
    let skip_single = ctx.state.params.map_reduce_single_reduce_optimization();
    let mut results: Vec<Document> = Vec::new();
    let mut pairs = emitted.into_iter().peekable();
    while let Some((key, first)) = pairs.next() {
        let mut values = vec![first];
        while let Some((_, value)) =
            pairs.next_if(|(next, _)| compare_values_with(&key, next, collation) == Ordering::Equal)
        {
            values.push(value);
        }
        ctx.deadline.check()?;
        let mut value = if values.len() == 1 && skip_single {
            values.pop().unwrap_or(Bson::Null)
        } else {
            program.call(REDUCE, None, &[key.clone(), Bson::Array(values)])?
        };
        if spec.finalize.is_some() {
            value = program.call(FINALIZE, None, &[key.clone(), value])?;
        }
        results.push(doc! {"_id": key, "value": value});
    }
    ctx.op.set_nreturned(results.len());

    let Output::Collection { mode, db, coll } = spec.output else {
        return Ok(doc! {"results": results});
    };
    let target_db = db.clone().unwrap_or_else(|| ctx.db.to_string());
    let variables = let_variables(ctx, body)?;
    let context = PipelineContext {
        now: bson::DateTime::from_millis(ctx.state.clock.now_ms()),
        collation: query.filter.collation().clone(),
    };
    match mode {
        OutMode::Replace => {
            let target = OutTarget {
                db: Some(target_db.clone()),
                coll: coll.clone(),
            };
            write_out(ctx, body, &target, stream(results), &variables).await?;
        }
        OutMode::Merge | OutMode::Reduce => {
            if mode == OutMode::Reduce {
                results = reduce_with_existing(
                    ctx,
                    &program,
                    spec.finalize.is_some(),
                    &Namespace::new(&target_db, coll.as_str()),
                    results,
                )
                .await?;
            }
            let merge = MergeSpec::parse(&Bson::Document(doc! {
                "into": {"db": &target_db, "coll": &coll},
                "on": "_id",
                "whenMatched": "replace",
                "whenNotMatched": "insert",
            }))?;
            write_merge(ctx, body, &merge, stream(results), &variables, &context).await?;
        }
    }
    Ok(match db {
        Some(db) => doc! {"result": {"db": db, "collection": coll}},
        None => doc! {"result": coll},
    })
}

fn stream(documents: Vec<Document>) -> tideway_query::pipeline::DocumentStream {
    Box::new(documents.into_iter().map(Ok))
}

/// `out: {reduce}`: each result whose key the target already holds takes
/// `reduce(key, [existing value, new value])`, then `finalize` of that (mongod's `$merge`
/// pipeline for this mode).
async fn reduce_with_existing(
    ctx: &CommandContext<'_>,
    program: &JsProgram,
    finalize: bool,
    target: &Namespace,
    results: Vec<Document>,
) -> CommandResult<Vec<Document>> {
    let keys: Vec<Bson> = results
        .iter()
        .filter_map(|result| result.get("_id").cloned())
        .collect();
    let existing = read_namespace(ctx, target, doc! {"_id": {"$in": keys}}, &None).await?;
    let mut reduced = Vec::with_capacity(results.len());
    for mut result in results {
        let key = result.get("_id").cloned().unwrap_or(Bson::Null);
        let held = existing.iter().find(|document| {
            document
                .get("_id")
                .is_some_and(|id| compare_values_with(id, &key, None) == Ordering::Equal)
        });
        if let Some(held) = held {
            let old = held.get("value").cloned().unwrap_or(Bson::Null);
            let new = result.get("value").cloned().unwrap_or(Bson::Null);
            let mut value =
                program.call(REDUCE, None, &[key.clone(), Bson::Array(vec![old, new])])?;
            if finalize {
                value = program.call(FINALIZE, None, &[key, value])?;
            }
            result.insert("value", value);
        }
        reduced.push(result);
    }
    Ok(reduced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_is_parsed_as_mongod_parses_it() {
        assert_eq!(
            parse_out(&Bson::Document(doc! {"inline": 1})).unwrap(),
            Output::Inline
        );
        assert_eq!(
            parse_out(&Bson::String("totals".into())).unwrap(),
            Output::Collection {
                mode: OutMode::Replace,
                db: None,
                coll: "totals".into()
            }
        );
        assert_eq!(
            parse_out(&Bson::Document(doc! {"merge": "totals", "db": "other"})).unwrap(),
            Output::Collection {
                mode: OutMode::Merge,
                db: Some("other".into()),
                coll: "totals".into()
            }
        );
        for (out, code) in [
            (Bson::Int32(1), ErrorCode::BadValue),
            (
                Bson::Document(doc! {"inline": 1, "db": "x"}),
                ErrorCode::InvalidOptions,
            ),
            (Bson::Document(doc! {"inline": 2}), ErrorCode::BadValue),
            (Bson::Document(doc! {"db": "x"}), ErrorCode::BadValue),
            (Bson::Document(doc! {"replace": 1}), ErrorCode::BadValue),
            (
                Bson::Document(doc! {"replace": "a", "extra": 1}),
                ErrorCode::BadValue,
            ),
            (
                Bson::Document(doc! {"replace": "a", "db": "admin"}),
                ErrorCode::CommandNotSupported,
            ),
        ] {
            assert_eq!(parse_out(&out).unwrap_err().code, code, "{out}");
        }
    }
}
