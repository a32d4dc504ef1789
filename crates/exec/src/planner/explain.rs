//! The explain tree of a plan, in mongod's shape: stage documents (`IDHACK`, `COLLSCAN`,
//! `FETCH` over `IXSCAN` (a covered plan's `IXSCAN` alone), `OR`, `EOF`, and the `SORT`/`SKIP`/`LIMIT`/`PROJECTION_*` stages
//! commands put above them), `parsedQuery`, and `queryHash`.
//!
//! Invariants: a tree describes exactly the plan that runs (it is built from the same
//! [`QueryPlan`]); execution counters come from measurements ([`ScanStats`] and the counts the
//! caller observed), never from estimates — a counter tideway does not measure is left out.

use bson::{doc, Bson, Document};

use super::{Access, IndexScan, QueryPlan};
use crate::executor::ScanStats;
use tideway_query::filter::{CompareOp, Expr, Predicate, TypeSelector};
use tideway_query::Filter;

/// The access stages of `plan` (`FETCH` → `IXSCAN`, `COLLSCAN`, ...), with counters when
/// `stats` is given. `filter` is the parsed query every fetched document is checked against.
pub fn access_stages(plan: &QueryPlan, filter: &Filter, stats: Option<&ScanStats>) -> Document {
    let parsed = parsed_query(filter);
    let filter_field = |stage: &mut Document| {
        if !parsed.is_empty() {
            stage.insert("filter", parsed.clone());
        }
    };
    match &plan.access {
        Access::Eof => {
            let mut stage = doc! {"stage": "EOF"};
            if let Some(stats) = stats {
                stage.insert("nReturned", count(stats.returned));
            }
            stage
        }
        Access::IdHack(_) => {
            let mut stage = doc! {"stage": "IDHACK"};
            if let Some(stats) = stats {
                stage.insert("nReturned", count(stats.returned));
                stage.insert("keysExamined", count(stats.keys_examined));
                stage.insert("docsExamined", count(stats.docs_examined));
            }
            stage
        }
        Access::CollScan { reverse } => {
            let mut stage = doc! {"stage": "COLLSCAN"};
            filter_field(&mut stage);
            stage.insert("direction", direction(*reverse));
            if let Some(stats) = stats {
                stage.insert("nReturned", count(stats.returned));
                stage.insert("docsExamined", count(stats.docs_examined));
            }
            stage
        }
        Access::IndexScan(scan) => {
            let mut ixscan = index_scan_stage(scan);
            if let Some(stats) = stats {
                // A covered scan hands its entries up itself; otherwise FETCH reads a document
                // for each.
                let handed_up = if plan.covered {
                    stats.returned
                } else {
                    stats.docs_examined
                };
                ixscan.insert("nReturned", count(handed_up));
                ixscan.insert("keysExamined", count(stats.keys_examined));
            }
            if plan.covered {
                return ixscan;
            }
            fetch(ixscan, filter_field, stats)
        }
        Access::SortMerge { scans, sort } => {
            let sort_pattern: Document = sort
                .keys()
                .map(|(field, direction)| {
                    let value = if direction == tideway_query::Direction::Ascending {
                        1
                    } else {
                        -1
                    };
                    (field.to_string(), Bson::Int32(value))
                })
                .collect();
            let mut merge = doc! {
                "stage": "SORT_MERGE",
                "sortPattern": sort_pattern,
                "inputStages": scans.iter().map(|scan| Bson::Document(index_scan_stage(scan))).collect::<Vec<_>>(),
            };
            if let Some(stats) = stats {
                merge.insert("nReturned", count(stats.docs_examined));
                merge.insert("keysExamined", count(stats.keys_examined));
            }
            fetch(merge, filter_field, stats)
        }
        Access::Or(scans) => {
            let mut or = doc! {
                "stage": "OR",
                "inputStages": scans.iter().map(|scan| Bson::Document(index_scan_stage(scan))).collect::<Vec<_>>(),
            };
            if let Some(stats) = stats {
                or.insert("nReturned", count(stats.docs_examined));
                or.insert("keysExamined", count(stats.keys_examined));
            }
            fetch(or, filter_field, stats)
        }
    }
}

fn fetch(
    input: Document,
    filter_field: impl Fn(&mut Document),
    stats: Option<&ScanStats>,
) -> Document {
    let mut stage = doc! {"stage": "FETCH"};
    filter_field(&mut stage);
    if let Some(stats) = stats {
        stage.insert("nReturned", count(stats.returned));
        stage.insert("docsExamined", count(stats.docs_examined));
    }
    stage.insert("inputStage", input);
    stage
}

/// `COUNT_SCAN`: a count answered from the keys of `scan`, no document fetched.
pub fn count_scan_stage(scan: &IndexScan, stats: Option<&ScanStats>) -> Document {
    let mut stage = index_scan_stage(scan);
    stage.insert("stage", "COUNT_SCAN");
    if let Some(stats) = stats {
        stage.insert("nReturned", 0);
        stage.insert("keysExamined", count(stats.keys_examined));
    }
    stage
}

/// `FETCH` over `DISTINCT_SCAN`: one document read per distinct key value of `scan`.
pub fn distinct_scan_stages(scan: &IndexScan, stats: Option<&ScanStats>) -> Document {
    let mut distinct = index_scan_stage(scan);
    distinct.insert("stage", "DISTINCT_SCAN");
    if let Some(stats) = stats {
        distinct.insert("nReturned", count(stats.docs_examined));
        distinct.insert("keysExamined", count(stats.keys_examined));
    }
    let mut fetch = doc! {"stage": "FETCH"};
    if let Some(stats) = stats {
        fetch.insert("nReturned", count(stats.returned));
        fetch.insert("docsExamined", count(stats.docs_examined));
    }
    fetch.insert("inputStage", distinct);
    fetch
}

fn index_scan_stage(scan: &IndexScan) -> Document {
    let mut stage = doc! {
        "stage": "IXSCAN",
        "keyPattern": scan.index.key_pattern(),
        "indexName": &scan.index.name,
    };
    if let Some(collation) = &scan.index.collation {
        stage.insert("collation", collation.spec().clone());
    }
    stage.extend(doc! {
        "isMultiKey": scan.multikey,
        "isUnique": scan.index.unique,
        "isSparse": scan.index.sparse,
        "isPartial": scan.index.partial_filter.is_some(),
        "indexVersion": scan.index.spec.get("v").cloned().unwrap_or(Bson::Int32(2)),
        "direction": direction(scan.reverse),
        "indexBounds": scan.bounds.render(scan.reverse),
    });
    stage
}

fn direction(reverse: bool) -> &'static str {
    if reverse {
        "backward"
    } else {
        "forward"
    }
}

/// A counter as mongod reports it (an int when it fits).
pub fn count(value: u64) -> Bson {
    i32::try_from(value).map_or(Bson::Int64(value as i64), Bson::Int32)
}

/// A stage above `input`: `{stage, ...fields, nReturned?, inputStage}`.
pub fn wrap(input: Document, stage: &str, fields: Document, returned: Option<u64>) -> Document {
    let mut wrapped = doc! {"stage": stage};
    wrapped.extend(fields);
    if let Some(returned) = returned {
        wrapped.insert("nReturned", count(returned));
    }
    wrapped.insert("inputStage", input);
    wrapped
}

/// mongod's normalized rendering of a filter: leaves as `{path: {$op: value}}`, several
/// conjuncts under `$and`, `$ne`/`$nin`/`$exists: false` as `$not`.
pub fn parsed_query(filter: &Filter) -> Document {
    match &filter.root() {
        Expr::And(children) if children.is_empty() => Document::new(),
        root => expr_document(root),
    }
}

fn expr_document(expr: &Expr) -> Document {
    match expr {
        Expr::And(children) => {
            doc! {"$and": children.iter().map(|child| Bson::Document(expr_document(child))).collect::<Vec<_>>()}
        }
        Expr::Or(children) => {
            doc! {"$or": children.iter().map(|child| Bson::Document(expr_document(child))).collect::<Vec<_>>()}
        }
        Expr::Nor(children) => {
            doc! {"$nor": children.iter().map(|child| Bson::Document(expr_document(child))).collect::<Vec<_>>()}
        }
        Expr::Text(text) => {
            let mut arguments = doc! {"$search": &text.query.search};
            if let Some(language) = text.query.language {
                arguments.insert("$language", language.name());
            }
            arguments.insert("$caseSensitive", text.query.case_sensitive);
            arguments.insert("$diacriticSensitive", text.query.diacritic_sensitive);
            doc! {"$text": arguments}
        }
        Expr::Aggregate(condition) => doc! {"$expr": condition.source().clone()},
        Expr::Sample(rate) => doc! {"$sampleRate": *rate},
        Expr::Where(condition) => doc! {"$where": condition.source().clone()},
        Expr::Schema(schema) => doc! {"$jsonSchema": schema.source().clone()},
        Expr::Constant(true) => doc! {"$alwaysTrue": 1},
        Expr::Constant(false) => doc! {"$alwaysFalse": 1},
        Expr::Not(child) => match child.as_ref() {
            Expr::Leaf { path, predicate } => {
                let operand = doc! {"$not": predicate_document(predicate)};
                leaf_document(path.as_deref(), operand)
            }
            other => doc! {"$nor": [expr_document(other)]},
        },
        Expr::Leaf { path, predicate } => {
            leaf_document(path.as_deref(), predicate_document(predicate))
        }
    }
}

fn leaf_document(path: Option<&[String]>, operand: Document) -> Document {
    match path {
        Some(path) => doc! {path.join("."): operand},
        None => operand,
    }
}

fn predicate_document(predicate: &Predicate) -> Document {
    match predicate {
        Predicate::Compare(op, value) => {
            let name = match op {
                CompareOp::Eq => "$eq",
                CompareOp::Gt => "$gt",
                CompareOp::Gte => "$gte",
                CompareOp::Lt => "$lt",
                CompareOp::Lte => "$lte",
            };
            doc! {name: value.clone()}
        }
        Predicate::In {
            values, regexes, ..
        } => {
            let mut items = values.clone();
            items.extend(regexes.iter().map(|regex| {
                Bson::RegularExpression(bson::Regex {
                    pattern: regex.pattern().to_string(),
                    options: regex.options().to_string(),
                })
            }));
            doc! {"$in": items}
        }
        Predicate::Exists => doc! {"$exists": true},
        Predicate::Type(selectors) => {
            let types: Vec<Bson> = selectors
                .iter()
                .map(|selector| match selector {
                    TypeSelector::Number => Bson::String("number".into()),
                    TypeSelector::Code(code) => Bson::Int32(*code),
                })
                .collect();
            doc! {"$type": types}
        }
        Predicate::Regex(regex) => {
            let mut document = doc! {"$regex": &regex.pattern()};
            if !regex.options().is_empty() {
                document.insert("$options", regex.options());
            }
            document
        }
        Predicate::Size(size) => {
            doc! {"$size": size.map_or(Bson::Double(0.5), |size| count(size as u64))}
        }
        Predicate::Mod { divisor, remainder } => doc! {"$mod": [*divisor, *remainder]},
        Predicate::Bits(bits) => doc! {bits.operator(): bits.operand()},
        Predicate::Geo(geo) => geo.raw.clone(),
        Predicate::Near(near) => near.raw.clone(),
        Predicate::ElemMatchObject(filter) => doc! {"$elemMatch": parsed_query(filter)},
        Predicate::ElemMatchValue(exprs) => {
            let mut operators = Document::new();
            for expr in exprs {
                operators.extend(expr_document(expr));
            }
            doc! {"$elemMatch": operators}
        }
    }
}

/// mongod's `queryHash`: 8 upper-case hex digits identifying the query shape.
pub fn query_hash(shape_key: &str) -> String {
    // FNV-1a: stable across runs and platforms, unlike the std hasher.
    let hash = shape_key.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:08X}")
}
