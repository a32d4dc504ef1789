//! The plan cache: the winning plan's choice of index per query shape (the filter's structure
//! with values reduced to their type brackets, the sort, whether a limit was given), per
//! collection and index set.
//!
//! Invariants: a key includes the collection's uuid and every index's name, key fields and
//! multikey flag, so creating, dropping or changing an index — or an index becoming multikey —
//! makes old entries unreachable (they age out); a cached choice is only a name: the plan is
//! rebuilt from the query's own values, and used only if that candidate exists for them. The
//! cache holds at most [`MAX_ENTRIES`]; past that it starts over.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use bson::Bson;

use super::{Access, Query, QueryPlan};
use tideway_query::filter::{Expr, Predicate};
use tideway_storage::CollectionMeta;

const MAX_ENTRIES: usize = 5000;

/// Which candidate won, by the indexes it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    Index { name: String, reverse: bool },
    Or(Vec<String>),
    SortMerge(String),
    Other,
}

pub(crate) fn choice_of(plan: &QueryPlan) -> Choice {
    match &plan.access {
        Access::IndexScan(scan) => Choice::Index {
            name: scan.index.name.clone(),
            reverse: scan.reverse,
        },
        Access::Or(scans) => Choice::Or(scans.iter().map(|scan| scan.index.name.clone()).collect()),
        Access::SortMerge { scans, .. } => Choice::SortMerge(
            scans
                .first()
                .map(|scan| scan.index.name.clone())
                .unwrap_or_default(),
        ),
        _ => Choice::Other,
    }
}

/// A cached winner and the work it needed in its trial (mongod's `works`): a cached plan that
/// needs far more is evicted and the query planned again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub choice: Choice,
    pub works: u64,
}

#[derive(Debug, Default)]
pub struct PlanCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl PlanCache {
    pub fn get(&self, key: &str) -> Option<Entry> {
        self.entries.lock().ok()?.get(key).cloned()
    }

    pub fn insert(&self, key: String, entry: Entry) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(key, entry);
        }
    }

    pub fn remove(&self, key: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }

    /// Entries currently cached (for `planCacheListFilters`-like diagnostics and tests).
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |entries| entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cache key of `query` over `meta`.
pub fn key(meta: &CollectionMeta, query: &Query) -> String {
    let mut key = format!("{}|", meta.ns);
    for byte in meta.uuid {
        let _ = write!(key, "{byte:02x}");
    }
    for index in &meta.indexes {
        let _ = write!(key, "|{}", index.name);
        for (field, direction) in &index.key {
            let _ = write!(key, ",{field}:{direction:?}");
        }
        if meta.is_multikey(&index.name) {
            key.push('*');
        }
    }
    key.push_str("||");
    key.push_str(&shape_key(query));
    if let Some(collation) = query.filter.collation() {
        let _ = write!(
            key,
            "|collation:{}",
            tideway_base::display::document_string(collation.spec())
        );
    }
    key
}

/// The query's shape alone: the filter's structure, the sort, whether a limit was given.
pub fn shape_key(query: &Query) -> String {
    let mut key = String::new();
    shape(query.filter.root(), &mut key);
    if let Some(sort) = &query.sort {
        key.push_str("|sort:");
        for (field, direction) in sort.keys() {
            let _ = write!(key, "{field}:{direction:?},");
        }
    }
    if query.wanted.is_some() {
        key.push_str("|limit");
    }
    key
}

/// The structure of a filter: operators and paths, with each value reduced to its type bracket.
fn shape(expr: &Expr, out: &mut String) {
    match expr {
        Expr::And(children) | Expr::Or(children) | Expr::Nor(children) => {
            out.push_str(match expr {
                Expr::And(_) => "and(",
                Expr::Or(_) => "or(",
                _ => "nor(",
            });
            for child in children {
                shape(child, out);
                out.push(',');
            }
            out.push(')');
        }
        Expr::Not(child) => {
            out.push_str("not(");
            shape(child, out);
            out.push(')');
        }
        Expr::Constant(value) => {
            let _ = write!(out, "{value}");
        }
        Expr::Aggregate(_) => out.push_str("expr"),
        Expr::Sample(_) => out.push_str("sample"),
        Expr::Where(_) => out.push_str("where"),
        Expr::Schema(_) => out.push_str("jsonSchema"),
        Expr::Text(text) => {
            let _ = write!(
                out,
                "text({:?},{},{})",
                text.query.language, text.query.case_sensitive, text.query.diacritic_sensitive
            );
        }
        Expr::Leaf { path, predicate } => {
            if let Some(path) = path {
                out.push_str(&path.join("."));
            }
            out.push(':');
            predicate_shape(predicate, out);
        }
    }
}

fn predicate_shape(predicate: &Predicate, out: &mut String) {
    let rank = |value: &Bson| tideway_query::canonical_type_rank(value);
    match predicate {
        Predicate::Compare(op, value) => {
            let _ = write!(out, "{op:?}{}", rank(value));
        }
        Predicate::In {
            values, regexes, ..
        } => {
            out.push_str("in[");
            for value in values {
                let _ = write!(out, "{},", rank(value));
            }
            let _ = write!(out, "r{}]", regexes.len());
        }
        Predicate::Exists => out.push_str("exists"),
        Predicate::Type(_) => out.push_str("type"),
        Predicate::Regex(regex) => {
            let _ = write!(out, "regex{}", regex.options());
        }
        Predicate::Size(_) => out.push_str("size"),
        Predicate::Mod { .. } => out.push_str("mod"),
        Predicate::Bits(bits) => out.push_str(bits.operator()),
        Predicate::Geo(geo) => {
            let _ = write!(out, "geo{:?}", geo.relation);
        }
        Predicate::Near(near) => {
            let _ = write!(out, "near{}{}", near.is_near_sphere, near.is_spherical());
        }
        Predicate::ElemMatchObject(filter) => {
            out.push_str("elemMatch(");
            shape(filter.root(), out);
            out.push(')');
        }
        Predicate::ElemMatchValue(exprs) => {
            out.push_str("elemMatchValue(");
            for expr in exprs {
                shape(expr, out);
                out.push(',');
            }
            out.push(')');
        }
    }
}
