//! Query filters (`find`/`update`/`delete` predicates): parsing a filter document into an
//! expression tree and evaluating it against documents with mongod's semantics.
//!
//! Invariants:
//! - Every leaf predicate is evaluated against the candidates of [`path::lookup`], and a leaf is
//!   true when any candidate satisfies it; `$ne`, `$nin`, `$not` and `$exists: false` negate the
//!   whole leaf (so `{a: {$ne: 1}}` rejects `{a: [1, 2]}`).
//! - Comparisons never cross canonical type brackets, except mongod's three exceptions: null
//!   against missing/undefined (`$eq`/`$lte`/`$gte`), and MinKey/MaxKey bounds. NaN only equals
//!   NaN. Null matches missing fields.
//! - Parsing rejects what mongod rejects, with its codes and messages; evaluation never fails.
//!
//! This module does not plan queries or touch storage; `tideway_exec::bounds` reads the parsed
//! tree to derive index bounds, and execution still re-checks every document with
//! [`Filter::matches`]. Of the language it uses only `crate::expr` (for `$expr`); projections,
//! pipelines and updates sit above it.

use std::cmp::Ordering;

use bson::{Bson, Document};
use regex::Regex;

use super::bits::BitsPredicate;
use super::collation::{Collation, CollationChoice};
use super::compare::{canonical_type_rank, compare_values_with, values_equal_with};
use super::json_schema::JsonSchema;
use super::numeric::Number;
use super::path::{self, LeafArrays};
use crate::geo::{self, GeoMatch, NearQuery};
use crate::text::{TextIndex, TextQuery, TextSearch};
use std::sync::{Arc, OnceLock};
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{check_field_path_length, MAX_FILTER_PATH_COMPONENTS};

const UNDEFINED_RANK: u8 = 1;
const NULL_RANK: u8 = 6;

/// A parsed query filter.
#[derive(Clone, Debug)]
pub struct Filter {
    root: Expr,
    /// The `$text` conjunct of `root`, if any (found once, at parse time).
    text: Option<Arc<TextMatch>>,
    /// The near conjunct of `root` (`$near`, `$nearSphere`) with its path, if any (at most one,
    /// always a top-level conjunct).
    near: Option<(Vec<String>, Arc<NearQuery>)>,
    /// The collation strings compare under (`None`: the simple collation).
    collation: CollationChoice,
}

/// A `$expr` condition: an aggregation expression whose value, coerced to a boolean, decides.
/// Evaluation can fail (`$divide` by zero, a string given to `$add`): the condition is then
/// false and the error is reported by [`Filter::try_matches`] (the query fails, as on mongod).
/// `$$NOW` is the time the filter was parsed.
#[derive(Debug)]
pub struct AggregateCondition {
    source: Bson,
    expression: crate::expr::Expr,
    now: bson::DateTime,
}

impl AggregateCondition {
    fn evaluate(&self, document: &Document, state: &mut Evaluation) -> bool {
        match self
            .expression
            .evaluate_collated(document, self.now, state.collation)
        {
            Ok(value) => crate::expr::truthy(&value),
            Err(error) => {
                state.error.get_or_insert(error);
                false
            }
        }
    }

    /// The `$expr` argument as given, for explain.
    pub fn source(&self) -> &Bson {
        &self.source
    }
}

/// A `$where` condition: its argument as given and the program that decides. A document matches
/// when the function returns a truthy value; a function that throws (or exceeds its budget)
/// fails the query, reported by [`Filter::try_matches`].
#[derive(Debug)]
pub struct WhereCondition {
    source: Bson,
    program: crate::js::JsProgram,
}

impl WhereCondition {
    /// `$where: <string | Code | CodeWithScope>`, refused as mongod refuses it without a script
    /// engine (6108304) or with another type (2).
    fn parse(value: &Bson) -> CommandResult<WhereCondition> {
        crate::js::check_enabled(
            ErrorCode::Location6108304,
            "no globalScriptEngine in $where parsing",
        )?;
        let (code, scope) =
            crate::js::code_source(value).ok_or_else(|| bad_value("$where got bad type"))?;
        Ok(WhereCondition {
            source: value.clone(),
            program: crate::js::JsProgram::new(vec![code], scope),
        })
    }

    fn evaluate(&self, document: &Document, state: &mut Evaluation) -> bool {
        match self.program.call_truthy(0, document) {
            Ok(matched) => matched,
            Err(error) => {
                state.error.get_or_insert(error);
                false
            }
        }
    }

    /// The `$where` argument as given, for explain.
    pub fn source(&self) -> &Bson {
        &self.source
    }
}

/// Whether `filter` uses `$where` at the top level or inside `$and`/`$or`/`$nor` (an aggregation
/// `$match` refuses it before parsing, as mongod's parser does when JavaScript is not allowed).
pub(crate) fn mentions_where(filter: &Document) -> bool {
    filter
        .iter()
        .any(|(key, value)| match (key.as_str(), value) {
            ("$where", _) => true,
            ("$and" | "$or" | "$nor", Bson::Array(clauses)) => clauses
                .iter()
                .any(|clause| matches!(clause, Bson::Document(clause) if mentions_where(clause))),
            _ => false,
        })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Clone, Debug)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Nor(Vec<Expr>),
    Not(Box<Expr>),
    /// `path: None` tests the subject value itself (inside `$elemMatch` on values).
    Leaf {
        path: Option<Vec<String>>,
        predicate: Predicate,
    },
    Constant(bool),
    /// `$text`: a top-level conjunct only, evaluated once the planner bound it to the
    /// collection's text index (unbound, it matches nothing).
    Text(Arc<TextMatch>),
    /// `$expr` (documents only; it tests no single value).
    Aggregate(Arc<AggregateCondition>),
    /// `$jsonSchema` (documents only).
    Schema(Arc<JsonSchema>),
    /// `$where` (documents only): JavaScript run with the document as `this` and `obj`.
    Where(Arc<WhereCondition>),
    /// `$sampleRate` strictly between 0 and 1: each document matches with that probability
    /// (mongod's `{$expr: {$lt: [{$rand: {}}, rate]}}`).
    Sample(f64),
}

/// A `$text` search and, once the planner has bound it, the text index it runs against with
/// the search resolved for that index.
#[derive(Debug)]
pub struct TextMatch {
    pub query: TextQuery,
    bound: OnceLock<(TextIndex, TextSearch)>,
}

impl TextMatch {
    /// Binds the search to `index` (the first binding wins: a filter runs against one
    /// collection).
    pub fn bind(&self, index: TextIndex) {
        let search = self.query.resolve(&index);
        let _ = self.bound.set((index, search));
    }

    pub fn index(&self) -> Option<&TextIndex> {
        self.bound.get().map(|(index, _)| index)
    }

    /// The document's `{$meta: "textScore"}`, `None` when it does not match (or unbound).
    pub fn score(&self, document: &Document) -> Option<f64> {
        let (index, search) = self.bound.get()?;
        index.score_search(search, document)
    }
}

#[derive(Clone, Debug)]
pub struct RegexMatcher {
    pattern: String,
    options: String,
    compiled: Regex,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeSelector {
    Code(i32),
    Number,
}

#[derive(Clone, Debug)]
pub enum Predicate {
    Compare(CompareOp, Bson),
    In {
        values: Vec<Bson>,
        regexes: Vec<RegexMatcher>,
        has_null: bool,
    },
    Exists,
    Type(Vec<TypeSelector>),
    Regex(RegexMatcher),
    /// `None`: a size no array reaches (past `usize`).
    Size(Option<usize>),
    ElemMatchObject(Box<Filter>),
    ElemMatchValue(Vec<Expr>),
    Mod {
        divisor: i64,
        remainder: i64,
    },
    Bits(BitsPredicate),
    /// `$geoWithin` / `$geoIntersects`.
    Geo(Arc<GeoMatch>),
    /// `$near` / `$nearSphere`: matches every value; the plan orders and bounds by distance.
    Near(Arc<NearQuery>),
}

/// The value a filter is evaluated against: a whole document, or one array element inside
/// `$elemMatch` on values.
#[derive(Clone, Copy)]
enum Subject<'a> {
    Document(&'a Document),
    Value(&'a Bson),
}

fn bad_value(message: impl Into<String>) -> CommandError {
    CommandError::bad_value(message)
}

fn not_supported(operator: &str) -> CommandError {
    CommandError::new(
        ErrorCode::NotImplemented,
        format!("{operator} is not supported by this server"),
    )
}

fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(flag) => *flag,
        Bson::Null | Bson::Undefined => false,
        other => Number::from_bson(other).is_none_or(|number| !number.is_zero()),
    }
}

/// A document whose first field starts with `$` (other than DBRef fields) is an operator object.
fn is_operator_object(document: &Document) -> bool {
    match document.keys().next() {
        Some(first) => first.starts_with('$') && !matches!(first.as_str(), "$ref" | "$id" | "$db"),
        None => false,
    }
}

/// Whether `document` is a condition on a value (`{$gte: 6}`; mongod's
/// `parsePathAcceptingKeyword`) rather than a query on a document: led by an operator other
/// than the query-level ones (`$and`, `$or`, `$expr`, …), which like DBRef fields (`$ref`,
/// `$id`, `$db`) and plain fields make it a query.
fn is_value_operator_object(document: &Document) -> bool {
    is_operator_object(document)
        && !document.keys().next().is_some_and(|first| {
            matches!(
                first.as_str(),
                "$and"
                    | "$or"
                    | "$nor"
                    | "$expr"
                    | "$where"
                    | "$text"
                    | "$comment"
                    | "$jsonSchema"
                    | "$alwaysTrue"
                    | "$alwaysFalse"
                    | "$sampleRate"
            )
        })
}

fn array_as_document(elements: &[Bson]) -> Document {
    elements
        .iter()
        .enumerate()
        .map(|(index, element)| (index.to_string(), element.clone()))
        .collect()
}

impl Filter {
    /// The parsed tree (what the planner derives bounds and plan-cache shapes from).
    pub fn root(&self) -> &Expr {
        &self.root
    }

    /// Parses a filter document (`{}` matches everything).
    pub fn parse(filter: &Document) -> CommandResult<Filter> {
        let root = parse_document(filter)?;
        let text = check_text_placement(&root)?;
        let near = check_near_placement(&root)?;
        if text.is_some() && near.is_some() {
            return Err(bad_value("text and geoNear not allowed in same query"));
        }
        Ok(Filter {
            root,
            text,
            near,
            collation: None,
        })
    }

    /// The filter with its strings compared under `collation` (`None`: the simple collation).
    pub fn with_collation(mut self, collation: CollationChoice) -> Filter {
        self.collation = collation;
        self
    }

    /// The collation the filter compares strings under.
    pub fn collation(&self) -> &CollationChoice {
        &self.collation
    }

    /// [`Filter::matches`], failing with the error of a `$expr` that could not be evaluated
    /// (where [`Filter::matches`] says the document does not match).
    pub fn try_matches(&self, document: &Document) -> CommandResult<bool> {
        self.try_matches_collated(document, self.collation.as_deref())
    }

    /// [`Filter::try_matches`] under `collation` instead of the filter's own (a `$match`
    /// stage runs under its pipeline's collation).
    pub fn try_matches_collated(
        &self,
        document: &Document,
        collation: Option<&Collation>,
    ) -> CommandResult<bool> {
        let mut state = Evaluation::new(collation);
        let matched = self.root.evaluate(Subject::Document(document), &mut state);
        match state.error {
            Some(error) => Err(error),
            None => Ok(matched),
        }
    }

    /// The filter's `$text` search, if it has one (always a top-level conjunct).
    pub fn text(&self) -> Option<&TextMatch> {
        self.text.as_deref()
    }

    /// The filter's near query and the path it measures, if it has one (always a top-level
    /// conjunct).
    pub fn near(&self) -> Option<(&[String], &NearQuery)> {
        self.near
            .as_ref()
            .map(|(path, near)| (path.as_slice(), near.as_ref()))
    }

    /// Refuses a near query where results cannot be sorted by distance (an aggregation
    /// `$match`, `$lookup`, a validator, a partial index filter, a view).
    pub fn refuse_near(self) -> CommandResult<Filter> {
        match self.near {
            Some(_) => Err(crate::geo::near_not_allowed()),
            None => Ok(self),
        }
    }

    /// Whether the document satisfies the filter.
    pub fn matches(&self, document: &Document) -> bool {
        self.match_position(document).is_some()
    }

    /// `None` if the document does not match; otherwise the array index the match was found at
    /// (mongod's "elemMatchKey", used by the positional `$` update and projection operators).
    pub fn match_position(&self, document: &Document) -> Option<Option<usize>> {
        let mut state = Evaluation::new(self.collation.as_deref());
        self.root
            .evaluate(Subject::Document(document), &mut state)
            .then_some(state.position)
    }

    /// True for the empty filter.
    pub fn matches_everything(&self) -> bool {
        match &self.root {
            Expr::Constant(value) => *value,
            Expr::And(children) => children.is_empty(),
            _ => false,
        }
    }

    /// The value `_id` is pinned to by `{_id: v}` or `{_id: {$eq: v}}` (possibly inside a
    /// top-level `$and`), for point lookups.
    pub fn id_equality(&self) -> Option<&Bson> {
        self.top_level_conjuncts()
            .into_iter()
            .find_map(|expr| match expr {
                Expr::Leaf {
                    path: Some(path),
                    predicate: Predicate::Compare(CompareOp::Eq, value),
                } if path.len() == 1
                    && path[0] == "_id"
                    && !matches!(value, Bson::RegularExpression(_)) =>
                {
                    Some(value)
                }
                _ => None,
            })
    }

    /// The fields an upsert seeds its new document with: top-level (and `$and`-nested)
    /// equalities, including single-value `$in`, dotted paths expanded into subdocuments.
    /// Fails with NotSingleValueField (54) when a path is pinned twice or under another.
    pub fn equality_fields(&self) -> CommandResult<Document> {
        let mut pinned: Vec<(&[String], &Bson)> = Vec::new();
        for expr in self.top_level_conjuncts() {
            let Expr::Leaf {
                path: Some(path),
                predicate,
            } = expr
            else {
                continue;
            };
            let value = match predicate {
                Predicate::Compare(CompareOp::Eq, value) => value,
                Predicate::In {
                    values, regexes, ..
                } if values.len() == 1 && regexes.is_empty() => &values[0],
                _ => continue,
            };
            for (other, _) in &pinned {
                let shared = other
                    .iter()
                    .zip(path.iter())
                    .take_while(|(a, b)| a == b)
                    .count();
                if shared == other.len() || shared == path.len() {
                    let message = if other.len() == path.len() {
                        format!(
                            "cannot infer query fields to set, path '{}' is matched twice",
                            path.join(".")
                        )
                    } else {
                        format!(
                            "cannot infer query fields to set, both paths '{}' and '{}' are matched",
                            path.join("."),
                            other.join(".")
                        )
                    };
                    return Err(CommandError::new(ErrorCode::NotSingleValueField, message));
                }
            }
            pinned.push((path, value));
        }
        let mut document = Document::new();
        for (path, value) in pinned {
            path::set_path(&mut document, path, value.clone())?;
        }
        Ok(document)
    }

    /// The conjuncts of the filter's top-level `$and` (nested `$and`s flattened).
    pub fn top_level_conjuncts(&self) -> Vec<&Expr> {
        conjuncts_of(&self.root)
    }
}

/// The expressions an `$elemMatch` predicate holds (none for other predicates).
fn elem_match_children(predicate: &Predicate) -> impl Iterator<Item = &Expr> {
    let children: &[Expr] = match predicate {
        Predicate::ElemMatchObject(filter) => std::slice::from_ref(&filter.root),
        Predicate::ElemMatchValue(exprs) => exprs,
        _ => &[],
    };
    children.iter()
}

/// A near query may appear once, as a top-level conjunct (mongod's `CanonicalQuery::isValid`:
/// "Too many geoNear expressions", "geo $near must be top-level expr"). Returns it.
fn check_near_placement(root: &Expr) -> CommandResult<Option<(Vec<String>, Arc<NearQuery>)>> {
    let mut near = None;
    let mut count = 0;
    let mut nested = false;
    let mut pending: Vec<(&Expr, bool)> = vec![(root, true)];
    while let Some((expr, top)) = pending.pop() {
        match expr {
            Expr::Leaf {
                path,
                predicate: Predicate::Near(query),
            } => {
                count += 1;
                match path {
                    Some(path) if top => near = Some((path.clone(), query.clone())),
                    _ => nested = true,
                }
            }
            Expr::And(children) => pending.extend(children.iter().map(|child| (child, top))),
            Expr::Or(children) if children.len() == 1 => pending.push((&children[0], top)),
            Expr::Or(children) | Expr::Nor(children) => {
                pending.extend(children.iter().map(|child| (child, false)))
            }
            Expr::Not(child) => pending.push((child, false)),
            Expr::Leaf { predicate, .. } => {
                pending.extend(elem_match_children(predicate).map(|child| (child, false)))
            }
            _ => {}
        }
    }
    if count > 1 {
        return Err(bad_value("Too many geoNear expressions"));
    }
    if nested {
        return Err(bad_value("geo $near must be top-level expr"));
    }
    Ok(near)
}

/// The first operator under `expr` that mongod allows only in a query on whole documents
/// (`$expr`, `$sampleRate`, `$jsonSchema`), not on array elements.
fn top_level_only(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::Aggregate(_) => Some("$expr"),
        Expr::Sample(_) => Some("$sampleRate"),
        Expr::Schema(_) => Some("$jsonSchema"),
        Expr::Where(_) => Some("$where"),
        Expr::And(children) | Expr::Or(children) | Expr::Nor(children) => {
            children.iter().find_map(top_level_only)
        }
        Expr::Not(child) => top_level_only(child),
        Expr::Leaf { .. } | Expr::Constant(_) | Expr::Text(_) => None,
    }
}

/// `$text` may appear once, as a top-level conjunct (mongod: 2 BadValue otherwise; inside `$or`,
/// which mongod allows when every branch is indexed, tideway answers 238). Returns it.
fn check_text_placement(root: &Expr) -> CommandResult<Option<Arc<TextMatch>>> {
    let top_level = conjuncts_of(root);
    let mut texts = top_level.iter().filter_map(|expr| match expr {
        Expr::Text(text) => Some(text.clone()),
        _ => None,
    });
    let text = texts.next();
    if texts.next().is_some() {
        return Err(bad_value("Too many text expressions"));
    }
    let mut pending: Vec<(&Expr, bool)> = top_level
        .into_iter()
        .filter(|expr| !matches!(expr, Expr::Text(_)))
        .map(|expr| (expr, false))
        .collect();
    while let Some((expr, in_or)) = pending.pop() {
        match expr {
            Expr::Text(_) if in_or => return Err(not_supported("$text inside $or")),
            Expr::Text(_) => return Err(bad_value("$text is not allowed in this context")),
            Expr::And(children) => pending.extend(children.iter().map(|child| (child, in_or))),
            Expr::Or(children) => pending.extend(children.iter().map(|child| (child, true))),
            Expr::Nor(children) => pending.extend(children.iter().map(|child| (child, false))),
            Expr::Not(child) => pending.push((child, false)),
            Expr::Leaf { predicate, .. } => {
                pending.extend(elem_match_children(predicate).map(|child| (child, false)))
            }
            Expr::Constant(_)
            | Expr::Aggregate(_)
            | Expr::Sample(_)
            | Expr::Where(_)
            | Expr::Schema(_) => {}
        }
    }
    Ok(text)
}

/// The conjuncts of `expr` (nested `$and`s flattened; anything else is one conjunct).
pub fn conjuncts_of(expr: &Expr) -> Vec<&Expr> {
    fn collect<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
        match expr {
            Expr::And(children) => children.iter().for_each(|child| collect(child, out)),
            other => out.push(other),
        }
    }
    let mut conjuncts = Vec::new();
    collect(expr, &mut conjuncts);
    conjuncts
}

/// A condition on single values, as `$pull` applies it to each array element: an operator
/// object (`{$gte: 6}`) tests the element itself; a plain document, or one led by a top-level
/// operator (`{$or: [...]}`, as mongod's `parsePathAcceptingKeyword` tells them apart), is a
/// query that only document elements can satisfy; a regex matches strings; anything else is
/// equality.
#[derive(Clone, Debug)]
pub struct ElementMatcher {
    exprs: Vec<Expr>,
    document_filter: Option<Filter>,
}

impl ElementMatcher {
    pub fn parse(condition: &Bson) -> CommandResult<ElementMatcher> {
        let (exprs, document_filter) = match condition {
            Bson::Document(operators) if is_value_operator_object(operators) => {
                (parse_operators(&None, operators)?, None)
            }
            Bson::Document(query) => (Vec::new(), Some(Filter::parse(query)?)),
            Bson::RegularExpression(regex) => (
                vec![leaf(
                    &None,
                    Predicate::Regex(compile_regex(&regex.pattern, &regex.options)?),
                )],
                None,
            ),
            other => (vec![leaf(&None, equality(other)?)], None),
        };
        Ok(ElementMatcher {
            exprs,
            document_filter,
        })
    }

    pub fn matches(&self, value: &Bson) -> bool {
        self.matches_with(value, None)
    }

    /// [`ElementMatcher::matches`] with strings compared under `collation`.
    pub(crate) fn matches_with(&self, value: &Bson, collation: Option<&Collation>) -> bool {
        match (&self.document_filter, value) {
            (Some(filter), Bson::Document(document)) => filter
                .root
                .evaluate(Subject::Document(document), &mut Evaluation::new(collation)),
            (Some(_), _) => false,
            (None, value) => self
                .exprs
                .iter()
                .all(|expr| expr.evaluate(Subject::Value(value), &mut Evaluation::new(collation))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

fn parse_document(filter: &Document) -> CommandResult<Expr> {
    let mut conjuncts = Vec::new();
    for (key, value) in filter {
        if let Some(operator) = key.strip_prefix('$') {
            match operator {
                "and" | "or" | "nor" => conjuncts.push(parse_logical(operator, value)?),
                "comment" => {}
                "alwaysTrue" => conjuncts.push(Expr::Constant(true)),
                "alwaysFalse" => conjuncts.push(Expr::Constant(false)),
                "text" => conjuncts.push(Expr::Text(Arc::new(TextMatch {
                    query: TextQuery::parse(value)?,
                    bound: OnceLock::new(),
                }))),
                "expr" => conjuncts.push(Expr::Aggregate(Arc::new(AggregateCondition {
                    source: value.clone(),
                    expression: crate::expr::Expr::parse(value)?,
                    // `$$NOW` is the command's time when a command parses the filter.
                    now: crate::expr::command_variables::command_time()
                        .unwrap_or_else(bson::DateTime::now),
                }))),
                "sampleRate" => conjuncts.push(parse_sample_rate(value)?),
                "jsonSchema" => conjuncts.push(Expr::Schema(Arc::new(JsonSchema::parse(value)?))),
                "where" => conjuncts.push(Expr::Where(Arc::new(WhereCondition::parse(value)?))),
                // DBRef fields (`$elemMatch: {$ref: "c", $id: 5}`) are paths, not operators.
                "id" | "ref" | "db" => conjuncts.extend(parse_field(key, value)?),
                _ => return Err(bad_value(format!("unknown top level operator: {key}"))),
            }
        } else {
            conjuncts.extend(parse_field(key, value)?);
        }
    }
    Ok(if conjuncts.len() == 1 {
        conjuncts.remove(0)
    } else {
        Expr::And(conjuncts)
    })
}

/// `$sampleRate: rate` with mongod's rules: a number in `[0, 1]`; 0 matches nothing and 1
/// everything.
fn parse_sample_rate(value: &Bson) -> CommandResult<Expr> {
    let rate = Number::from_bson(value)
        .ok_or_else(|| bad_value("argument to $sampleRate must be a numeric type"))?
        .to_f64();
    if !(0.0..=1.0).contains(&rate) {
        return Err(bad_value(
            "numeric argument to $sampleRate must be in [0, 1]",
        ));
    }
    Ok(if rate == 0.0 {
        Expr::Constant(false)
    } else if rate == 1.0 {
        Expr::Constant(true)
    } else {
        Expr::Sample(rate)
    })
}

fn parse_logical(operator: &str, value: &Bson) -> CommandResult<Expr> {
    let clauses = match value {
        Bson::Array(clauses) if !clauses.is_empty() => clauses,
        _ => return Err(bad_value("$and/$or/$nor must be a nonempty array")),
    };
    let mut children = Vec::with_capacity(clauses.len());
    for clause in clauses {
        let Bson::Document(clause) = clause else {
            return Err(bad_value("$or/$and/$nor entries need to be full objects"));
        };
        children.push(parse_document(clause)?);
    }
    Ok(match operator {
        "and" => Expr::And(children),
        "or" => Expr::Or(children),
        _ => Expr::Nor(children),
    })
}

fn leaf(path: &Option<Vec<String>>, predicate: Predicate) -> Expr {
    Expr::Leaf {
        path: path.clone(),
        predicate,
    }
}

fn parse_field(name: &str, value: &Bson) -> CommandResult<Vec<Expr>> {
    check_field_path_length(name, MAX_FILTER_PATH_COMPONENTS, ErrorCode::Location5729100)?;
    let path = Some(path::split_path(name));
    match value {
        Bson::RegularExpression(regex) => Ok(vec![leaf(
            &path,
            Predicate::Regex(compile_regex(&regex.pattern, &regex.options)?),
        )]),
        Bson::Document(operators) if is_operator_object(operators) => {
            parse_operators(&path, operators)
        }
        other => Ok(vec![leaf(&path, equality(other)?)]),
    }
}

fn equality(value: &Bson) -> CommandResult<Predicate> {
    if matches!(value, Bson::Undefined) {
        return Err(bad_value("cannot compare to undefined"));
    }
    Ok(Predicate::Compare(CompareOp::Eq, value.clone()))
}

fn parse_operators(path: &Option<Vec<String>>, operators: &Document) -> CommandResult<Vec<Expr>> {
    let regex_source = operators.get("$regex");
    let regex_options = operators.get("$options");
    if regex_options.is_some() && regex_source.is_none() {
        return Err(bad_value("$options needs a $regex"));
    }
    // A near query takes the whole object (its distances are siblings of the operator), and
    // so does `$geoWithin` / `$geoIntersects`, which allows nothing beside it.
    if let Some(first) = operators.keys().next() {
        if geo::is_near_operator(first) {
            return Ok(vec![leaf(
                path,
                Predicate::Near(geo::parse_near(operators)?),
            )]);
        }
    }
    let mut exprs = Vec::new();
    for (operator, argument) in operators {
        let comparison = match operator.as_str() {
            "$eq" => Some(CompareOp::Eq),
            "$gt" => Some(CompareOp::Gt),
            "$gte" => Some(CompareOp::Gte),
            "$lt" => Some(CompareOp::Lt),
            "$lte" => Some(CompareOp::Lte),
            _ => None,
        };
        if let Some(op) = comparison {
            if matches!(argument, Bson::Undefined) {
                return Err(bad_value("cannot compare to undefined"));
            }
            exprs.push(leaf(path, Predicate::Compare(op, argument.clone())));
            continue;
        }
        let expr = match operator.as_str() {
            "$ne" => {
                if matches!(argument, Bson::RegularExpression(_)) {
                    return Err(bad_value("Can't have regex as arg to $ne."));
                }
                Expr::Not(Box::new(leaf(path, equality(argument)?)))
            }
            "$in" => leaf(path, parse_in(operator, argument)?),
            "$nin" => Expr::Not(Box::new(leaf(path, parse_in(operator, argument)?))),
            "$exists" => {
                let exists = leaf(path, Predicate::Exists);
                if is_truthy(argument) {
                    exists
                } else {
                    Expr::Not(Box::new(exists))
                }
            }
            "$type" => leaf(path, Predicate::Type(parse_type_selectors(argument)?)),
            "$not" => parse_not(path, argument)?,
            "$regex" => leaf(
                path,
                Predicate::Regex(parse_regex_operator(
                    argument,
                    regex_options,
                    operators.keys().position(|key| key == "$options")
                        < operators.keys().position(|key| key == "$regex"),
                )?),
            ),
            "$options" => continue,
            "$size" => leaf(path, parse_size(argument)?),
            "$elemMatch" => leaf(path, parse_elem_match(argument)?),
            "$all" => parse_all(path, argument)?,
            "$mod" => leaf(path, parse_mod(argument)?),
            "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
                let name = path.as_ref().map(|path| path.join(".")).unwrap_or_default();
                leaf(
                    path,
                    Predicate::Bits(BitsPredicate::parse(operator, &name, argument)?),
                )
            }
            "$near" | "$nearSphere" | "$geoNear" | "$minDistance" | "$maxDistance" => {
                return Err(bad_value(format!(
                    "near must be first in: {}",
                    value_string(&Bson::Document(operators.clone()))
                )))
            }
            operator if geo::is_geo_operator(operator) => {
                leaf(path, Predicate::Geo(geo::parse_geo_match(operators)?))
            }
            "$text" => return Err(not_supported(operator)),
            _ => return Err(bad_value(format!("unknown operator: {operator}"))),
        };
        exprs.push(expr);
    }
    Ok(exprs)
}

fn parse_in(operator: &str, argument: &Bson) -> CommandResult<Predicate> {
    let Bson::Array(items) = argument else {
        return Err(bad_value(format!("{operator} needs an array")));
    };
    let mut values = Vec::new();
    let mut regexes = Vec::new();
    let mut has_null = false;
    for item in items {
        match item {
            Bson::RegularExpression(regex) => {
                regexes.push(compile_regex(&regex.pattern, &regex.options)?)
            }
            Bson::Document(document) if is_operator_object(document) => {
                return Err(bad_value("cannot nest $ under $in"))
            }
            Bson::Undefined => {
                return Err(bad_value("InMatchExpression equality cannot be undefined"))
            }
            other => {
                has_null |= matches!(other, Bson::Null);
                values.push(other.clone());
            }
        }
    }
    Ok(Predicate::In {
        values,
        regexes,
        has_null,
    })
}

fn parse_not(path: &Option<Vec<String>>, argument: &Bson) -> CommandResult<Expr> {
    match argument {
        Bson::RegularExpression(regex) => Ok(Expr::Not(Box::new(leaf(
            path,
            Predicate::Regex(compile_regex(&regex.pattern, &regex.options)?),
        )))),
        Bson::Document(inner) => {
            if inner.is_empty() {
                return Err(bad_value("$not cannot be empty"));
            }
            let mut children = parse_operators(path, inner)?;
            let child = if children.len() == 1 {
                children.remove(0)
            } else {
                Expr::And(children)
            };
            Ok(Expr::Not(Box::new(child)))
        }
        _ => Err(bad_value("$not needs a regex or a document")),
    }
}

/// mongod's BSON type names (`$type`, `bsonType`) and their numeric codes.
pub(crate) const TYPE_ALIASES: &[(&str, i32)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

fn parse_type_selector(value: &Bson) -> CommandResult<TypeSelector> {
    match value {
        Bson::String(alias) => {
            if alias == "number" {
                return Ok(TypeSelector::Number);
            }
            TYPE_ALIASES
                .iter()
                .find(|(name, _)| name == alias)
                .map(|(_, code)| TypeSelector::Code(*code))
                .ok_or_else(|| bad_value(format!("Unknown type name alias: {alias}")))
        }
        other => {
            let Some(number) = Number::from_bson(other) else {
                return Err(CommandError::type_mismatch(
                    "type must be represented as a number or a string",
                ));
            };
            let code = number.to_exact_i64().filter(|code| {
                TYPE_ALIASES
                    .iter()
                    .any(|(_, known)| i64::from(*known) == *code)
            });
            match code.and_then(|code| i32::try_from(code).ok()) {
                Some(code) => Ok(TypeSelector::Code(code)),
                None => Err(bad_value(format!(
                    "Invalid numerical type code: {}",
                    value_string(other)
                ))),
            }
        }
    }
}

fn parse_type_selectors(argument: &Bson) -> CommandResult<Vec<TypeSelector>> {
    match argument {
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(bad_value("$type must match at least one type"));
            }
            items.iter().map(parse_type_selector).collect()
        }
        single => Ok(vec![parse_type_selector(single)?]),
    }
}

/// mongod's numeric `$type` code of a value.
fn type_code(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        other => i32::from(other.element_type() as u8),
    }
}

fn compile_regex(pattern: &str, options: &str) -> CommandResult<RegexMatcher> {
    if pattern.contains('\0') {
        return Err(bad_value(
            "Regular expression cannot contain an embedded null byte",
        ));
    }
    let mut flags = String::new();
    for flag in options.chars() {
        match flag {
            'i' | 'm' | 's' | 'x' => {
                if !flags.contains(flag) {
                    flags.push(flag);
                }
            }
            // PCRE's UTF-8 flag: always on here.
            'u' => {}
            other => return Err(bad_value(format!("invalid flag in regex options: {other}"))),
        }
    }
    let source = if flags.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{flags}){pattern}")
    };
    let compiled = Regex::new(&source)
        .map_err(|error| bad_value(format!("Regular expression is invalid: {error}")))?;
    Ok(RegexMatcher {
        pattern: pattern.to_string(),
        options: options.to_string(),
        compiled,
    })
}

/// `$regex` with its sibling `$options` (`options_first`: `$options` came before `$regex`).
fn parse_regex_operator(
    source: &Bson,
    options: Option<&Bson>,
    options_first: bool,
) -> CommandResult<RegexMatcher> {
    let options = match options {
        None => None,
        Some(Bson::String(options)) => Some(options.as_str()),
        Some(_) => return Err(bad_value("$options has to be a string")),
    };
    match source {
        Bson::String(pattern) => compile_regex(pattern, options.unwrap_or("")),
        Bson::RegularExpression(regex) => {
            if options.is_some() && !regex.options.is_empty() {
                // mongod's code says which of the two came first.
                let code = if options_first {
                    ErrorCode::Location51074
                } else {
                    ErrorCode::Location51075
                };
                return Err(CommandError::new(
                    code,
                    "options set in both $regex and $options",
                ));
            }
            compile_regex(&regex.pattern, options.unwrap_or(&regex.options))
        }
        _ => Err(bad_value("$regex has to be a string")),
    }
}

fn parse_size(argument: &Bson) -> CommandResult<Predicate> {
    let Some(number) = Number::from_bson(argument) else {
        return Err(bad_value("$size needs a number"));
    };
    match number.to_exact_i64() {
        Some(size) if size < 0 => Err(bad_value("$size may not be negative")),
        Some(size) => Ok(Predicate::Size(usize::try_from(size).ok())),
        None => Err(bad_value("$size must be a whole number")),
    }
}

fn parse_elem_match(argument: &Bson) -> CommandResult<Predicate> {
    let Bson::Document(inner) = argument else {
        return Err(bad_value("$elemMatch needs an Object"));
    };
    if is_value_operator_object(inner) {
        return Ok(Predicate::ElemMatchValue(parse_operators(&None, inner)?));
    }
    let filter = Filter::parse(inner)?;
    if let Some(operator) = top_level_only(&filter.root) {
        return Err(bad_value(format!(
            "{operator} can only be applied to the top-level document"
        )));
    }
    Ok(Predicate::ElemMatchObject(Box::new(filter)))
}

fn parse_all(path: &Option<Vec<String>>, argument: &Bson) -> CommandResult<Expr> {
    let Bson::Array(items) = argument else {
        return Err(bad_value("$all needs an array"));
    };
    if items.is_empty() {
        return Ok(Expr::Constant(false));
    }
    let is_elem_match = |item: &Bson| matches!(item, Bson::Document(document) if document.keys().next().is_some_and(|key| key == "$elemMatch"));
    let elem_match_form = is_elem_match(&items[0]);
    let mut children = Vec::with_capacity(items.len());
    for item in items {
        if is_elem_match(item) != elem_match_form {
            return Err(bad_value("$all/$elemMatch has to be consistent"));
        }
        let predicate = match item {
            Bson::Document(document) if elem_match_form => {
                let Some(argument) = document.get("$elemMatch") else {
                    return Err(bad_value("$all/$elemMatch has to be consistent"));
                };
                parse_elem_match(argument)?
            }
            Bson::Document(document) if is_operator_object(document) => {
                return Err(bad_value("no $ expressions in $all"))
            }
            Bson::RegularExpression(regex) => {
                Predicate::Regex(compile_regex(&regex.pattern, &regex.options)?)
            }
            other => equality(other)?,
        };
        children.push(leaf(path, predicate));
    }
    Ok(Expr::And(children))
}

fn parse_mod(argument: &Bson) -> CommandResult<Predicate> {
    let Bson::Array(items) = argument else {
        return Err(bad_value("malformed mod, needs to be an array"));
    };
    if items.len() < 2 {
        return Err(bad_value("malformed mod, not enough elements"));
    }
    if items.len() > 2 {
        return Err(bad_value("malformed mod, too many elements"));
    }
    let divisor = Number::from_bson(&items[0])
        .ok_or_else(|| bad_value("malformed mod, divisor not a number"))?;
    let remainder = Number::from_bson(&items[1])
        .ok_or_else(|| bad_value("malformed mod, remainder not a number"))?;
    let divisor = divisor
        .to_i64_truncated()
        .ok_or_else(|| bad_value("malformed mod, divisor value is invalid :: caused by :: Out of bounds coercing to integral value"))?;
    let remainder = remainder
        .to_i64_truncated()
        .ok_or_else(|| bad_value("malformed mod, remainder value is invalid :: caused by :: Out of bounds coercing to integral value"))?;
    if divisor == 0 {
        return Err(bad_value("divisor cannot be 0"));
    }
    Ok(Predicate::Mod { divisor, remainder })
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/// What one evaluation works under (its collation) and learns besides its answer.
struct Evaluation<'c> {
    /// The first array index a leaf matched through (mongod's "elemMatchKey").
    position: Option<usize>,
    /// The first `$expr` that failed to evaluate.
    error: Option<CommandError>,
    collation: Option<&'c Collation>,
}

impl<'c> Evaluation<'c> {
    fn new(collation: Option<&'c Collation>) -> Evaluation<'c> {
        Evaluation {
            position: None,
            error: None,
            collation,
        }
    }

    /// Evaluates `expr` for a negation: its positions do not count, its errors do.
    fn negated(&mut self, expr: &Expr, subject: Subject<'_>) -> bool {
        let mut inner = Evaluation::new(self.collation);
        let matched = expr.evaluate(subject, &mut inner);
        if self.error.is_none() {
            self.error = inner.error;
        }
        matched
    }
}

impl Expr {
    /// Evaluates the expression; on success, `state.position` receives the first array index
    /// a leaf matched through (if it was not already set).
    fn evaluate(&self, subject: Subject<'_>, state: &mut Evaluation) -> bool {
        match self {
            Expr::And(children) => children.iter().all(|child| child.evaluate(subject, state)),
            Expr::Or(children) => children.iter().any(|child| child.evaluate(subject, state)),
            Expr::Nor(children) => !children.iter().any(|child| state.negated(child, subject)),
            Expr::Not(child) => !state.negated(child, subject),
            Expr::Constant(value) => *value,
            Expr::Text(text) => match subject {
                Subject::Document(document) => text.score(document).is_some(),
                Subject::Value(_) => false,
            },
            Expr::Aggregate(condition) => match subject {
                Subject::Document(document) => condition.evaluate(document, state),
                Subject::Value(_) => false,
            },
            Expr::Sample(rate) => tideway_base::rng::random_unit() < *rate,
            Expr::Where(condition) => match subject {
                Subject::Document(document) => condition.evaluate(document, state),
                Subject::Value(_) => false,
            },
            Expr::Schema(schema) => match subject {
                Subject::Document(document) => schema.matches(document),
                Subject::Value(_) => false,
            },
            Expr::Leaf { path, predicate } => match (path, subject) {
                (Some(path), Subject::Document(document)) => {
                    for candidate in path::lookup(document, path, predicate.leaf_arrays()) {
                        if let Some(matched_index) =
                            predicate.matches(candidate.value, state.collation)
                        {
                            if state.position.is_none() {
                                state.position = candidate.array_index.or(matched_index);
                            }
                            return true;
                        }
                    }
                    false
                }
                (None, Subject::Value(value)) => {
                    predicate.matches(Some(value), state.collation).is_some()
                }
                // A path applied to a bare value (or no path on a document) names nothing.
                (Some(_), Subject::Value(_)) | (None, Subject::Document(_)) => {
                    predicate.matches(None, state.collation).is_some()
                }
            },
        }
    }
}

fn compare_matches(
    op: CompareOp,
    candidate: Option<&Bson>,
    operand: &Bson,
    collation: Option<&Collation>,
) -> bool {
    let candidate_rank = candidate.map_or(UNDEFINED_RANK, canonical_type_rank);
    let operand_rank = canonical_type_rank(operand);
    if candidate_rank != operand_rank {
        if candidate_rank == UNDEFINED_RANK && operand_rank == NULL_RANK {
            return matches!(op, CompareOp::Eq | CompareOp::Lte | CompareOp::Gte);
        }
        return match operand {
            Bson::MaxKey => matches!(op, CompareOp::Lt | CompareOp::Lte),
            Bson::MinKey => matches!(op, CompareOp::Gt | CompareOp::Gte),
            _ => false,
        };
    }
    let Some(candidate) = candidate else {
        return false;
    };
    if op != CompareOp::Eq {
        let is_nan = |value: &Bson| Number::from_bson(value).is_some_and(Number::is_nan);
        let (candidate_nan, operand_nan) = (is_nan(candidate), is_nan(operand));
        if candidate_nan || operand_nan {
            return matches!(op, CompareOp::Lte | CompareOp::Gte) && candidate_nan && operand_nan;
        }
    }
    let order = compare_values_with(candidate, operand, collation);
    match op {
        CompareOp::Eq => order == Ordering::Equal,
        CompareOp::Gt => order == Ordering::Greater,
        CompareOp::Gte => order != Ordering::Less,
        CompareOp::Lt => order == Ordering::Less,
        CompareOp::Lte => order != Ordering::Greater,
    }
}

impl RegexMatcher {
    /// The pattern as written (without delimiters).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The flags as written (`i`, `m`, `s`, `x`, `u`).
    pub fn options(&self) -> &str {
        &self.options
    }

    fn matches(&self, value: &Bson) -> bool {
        match value {
            Bson::String(text) | Bson::Symbol(text) => self.compiled.is_match(text),
            Bson::RegularExpression(regex) => {
                regex.pattern == self.pattern && regex.options == self.options
            }
            _ => false,
        }
    }
}

impl Predicate {
    fn leaf_arrays(&self) -> LeafArrays {
        match self {
            Predicate::Size(_) | Predicate::ElemMatchObject(_) | Predicate::ElemMatchValue(_) => {
                LeafArrays::NoExpand
            }
            _ => LeafArrays::ExpandAndSelf,
        }
    }

    /// `None` when the candidate (`None` = missing) does not satisfy the predicate; otherwise
    /// the index of the array element that satisfied an `$elemMatch`, if any.
    fn matches(
        &self,
        candidate: Option<&Bson>,
        collation: Option<&Collation>,
    ) -> Option<Option<usize>> {
        let matched = match self {
            Predicate::Compare(op, operand) => compare_matches(*op, candidate, operand, collation),
            Predicate::In {
                values,
                regexes,
                has_null,
            } => match candidate {
                None | Some(Bson::Undefined) if *has_null => true,
                None => false,
                Some(value) => {
                    values
                        .iter()
                        .any(|item| values_equal_with(value, item, collation))
                        || regexes.iter().any(|regex| regex.matches(value))
                }
            },
            Predicate::Exists => candidate.is_some(),
            Predicate::Type(selectors) => candidate.is_some_and(|value| {
                selectors.iter().any(|selector| match selector {
                    TypeSelector::Number => Number::from_bson(value).is_some(),
                    TypeSelector::Code(code) => type_code(value) == *code,
                })
            }),
            Predicate::Regex(regex) => candidate.is_some_and(|value| regex.matches(value)),
            Predicate::Size(size) => match (candidate, size) {
                (Some(Bson::Array(elements)), Some(size)) => elements.len() == *size,
                _ => false,
            },
            Predicate::Mod { divisor, remainder } => candidate
                .and_then(Number::from_bson)
                .and_then(Number::to_i64_truncated)
                .is_some_and(|dividend| dividend.wrapping_rem(*divisor) == *remainder),
            Predicate::Bits(bits) => candidate.is_some_and(|value| bits.matches(value)),
            Predicate::Geo(geo) => candidate.is_some_and(|value| geo.matches(value)),
            Predicate::Near(_) => true,
            Predicate::ElemMatchObject(filter) => {
                let Some(Bson::Array(elements)) = candidate else {
                    return None;
                };
                return elements
                    .iter()
                    .position(|element| {
                        let mut state = Evaluation::new(collation);
                        match element {
                            Bson::Document(document) => filter
                                .root
                                .evaluate(Subject::Document(document), &mut state),
                            Bson::Array(nested) => filter.root.evaluate(
                                Subject::Document(&array_as_document(nested)),
                                &mut state,
                            ),
                            _ => false,
                        }
                    })
                    .map(Some);
            }
            Predicate::ElemMatchValue(exprs) => {
                let Some(Bson::Array(elements)) = candidate else {
                    return None;
                };
                return elements
                    .iter()
                    .position(|element| {
                        exprs.iter().all(|expr| {
                            expr.evaluate(Subject::Value(element), &mut Evaluation::new(collation))
                        })
                    })
                    .map(Some);
            }
        };
        matched.then_some(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::fixtures::{decimal, nan, negative_zero};
    use bson::{doc, Regex as BsonRegex};

    fn parse(filter: Document) -> Filter {
        Filter::parse(&filter).expect("valid test filter")
    }

    fn matches(filter: Document, document: Document) -> bool {
        parse(filter).matches(&document)
    }

    fn parse_error(filter: Document) -> CommandError {
        Filter::parse(&filter).expect_err("filter should be rejected")
    }

    #[test]
    fn empty_filter_matches_everything() {
        assert!(matches(doc! {}, doc! {"a": 1}));
        assert!(parse(doc! {}).matches_everything());
    }

    #[test]
    fn implicit_equality_matches_scalars_and_array_elements() {
        assert!(matches(doc! {"a": 1}, doc! {"a": 1.0}));
        assert!(matches(doc! {"a": 1}, doc! {"a": [3, 1]}));
        assert!(!matches(doc! {"a": 1}, doc! {"a": [[1]]}));
        assert!(matches(doc! {"a": [1, 2]}, doc! {"a": [1, 2]}));
        assert!(matches(doc! {"a": [1, 2]}, doc! {"a": [[1, 2], 3]}));
        assert!(!matches(doc! {"a": [1, 2]}, doc! {"a": [2, 1]}));
    }

    #[test]
    fn equality_to_document_is_exact_and_ordered() {
        assert!(matches(
            doc! {"a": {"b": 1, "c": 2}},
            doc! {"a": {"b": 1, "c": 2}}
        ));
        assert!(!matches(
            doc! {"a": {"b": 1, "c": 2}},
            doc! {"a": {"c": 2, "b": 1}}
        ));
        assert!(!matches(doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}));
    }

    #[test]
    fn dotted_equality_traverses_arrays() {
        assert!(matches(doc! {"a.b": 2}, doc! {"a": [{"b": 1}, {"b": 2}]}));
        assert!(matches(doc! {"a.1.b": 2}, doc! {"a": [{"b": 1}, {"b": 2}]}));
        assert!(!matches(
            doc! {"a.0.b": 2},
            doc! {"a": [{"b": 1}, {"b": 2}]}
        ));
    }

    #[test]
    fn null_matches_missing_and_null_but_not_empty_array() {
        assert!(matches(doc! {"a": null}, doc! {"b": 1}));
        assert!(matches(doc! {"a": null}, doc! {"a": null}));
        assert!(matches(doc! {"a": null}, doc! {"a": Bson::Undefined}));
        assert!(!matches(doc! {"a": null}, doc! {"a": []}));
        assert!(matches(
            doc! {"a.b": null},
            doc! {"a": [{"b": 1}, {"c": 1}]}
        ));
        assert!(!matches(doc! {"a.b": null}, doc! {"a": [1, 2]}));
        assert!(matches(doc! {"a": {"$gte": null}}, doc! {}));
        assert!(!matches(doc! {"a": {"$gt": null}}, doc! {}));
    }

    #[test]
    fn ne_null_requires_a_non_null_value_everywhere() {
        assert!(!matches(doc! {"a": {"$ne": null}}, doc! {"a": [null, 1]}));
        assert!(matches(doc! {"a": {"$ne": null}}, doc! {"a": 0}));
        assert!(!matches(doc! {"a": {"$ne": null}}, doc! {}));
    }

    #[test]
    fn gt_does_not_cross_type_brackets() {
        assert!(!matches(doc! {"a": {"$gt": 5}}, doc! {"a": "zzz"}));
        assert!(matches(doc! {"a": {"$gt": 5}}, doc! {"a": 5.5}));
        assert!(!matches(doc! {"a": {"$lt": "a"}}, doc! {"a": 1}));
        assert!(matches(doc! {"a": {"$gt": 5}}, doc! {"a": ["x", 7]}));
    }

    #[test]
    fn comparisons_cover_numeric_types_and_decimal() {
        assert!(matches(
            doc! {"a": {"$gte": decimal("1.0")}},
            doc! {"a": 1_i64}
        ));
        assert!(matches(
            doc! {"a": {"$lt": i64::MAX}},
            doc! {"a": i64::MAX as f64 - 4096.0}
        ));
        assert!(matches(
            doc! {"a": {"$lte": i64::MIN}},
            doc! {"a": i64::MIN}
        ));
        assert!(matches(doc! {"a": 0}, doc! {"a": negative_zero()}));
    }

    #[test]
    fn nan_only_matches_nan_inclusive_comparisons() {
        assert!(matches(doc! {"a": nan()}, doc! {"a": nan()}));
        assert!(matches(
            doc! {"a": {"$gte": nan()}},
            doc! {"a": decimal("NaN")}
        ));
        assert!(!matches(doc! {"a": {"$lt": 0}}, doc! {"a": nan()}));
        assert!(!matches(doc! {"a": {"$gt": nan()}}, doc! {"a": 5}));
    }

    #[test]
    fn minkey_and_maxkey_bound_everything() {
        assert!(matches(doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"}));
        assert!(matches(
            doc! {"a": {"$lt": Bson::MaxKey}},
            doc! {"a": {"b": 1}}
        ));
        assert!(!matches(doc! {"a": {"$gt": Bson::MaxKey}}, doc! {"a": 1}));
    }

    #[test]
    fn range_on_array_can_match_different_elements() {
        assert!(matches(
            doc! {"a": {"$gt": 1, "$lt": 5}},
            doc! {"a": [0, 10]}
        ));
        assert!(!matches(
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}},
            doc! {"a": [0, 10]}
        ));
        assert!(matches(
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}},
            doc! {"a": [0, 3]}
        ));
    }

    #[test]
    fn in_and_nin_use_equality_null_and_regex() {
        assert!(matches(
            doc! {"a": {"$in": [1, "x"]}},
            doc! {"a": ["y", 1.0]}
        ));
        assert!(matches(doc! {"a": {"$in": [null]}}, doc! {}));
        assert!(matches(
            doc! {"a": {"$in": [BsonRegex { pattern: "^x".into(), options: String::new() }]}},
            doc! {"a": "xyz"}
        ));
        assert!(!matches(doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 2]}));
        assert!(matches(doc! {"a": {"$nin": [1, 2]}}, doc! {}));
        assert!(!matches(doc! {"a": {"$in": []}}, doc! {"a": 1}));
    }

    #[test]
    fn in_rejects_non_arrays_and_operators() {
        assert_eq!(
            parse_error(doc! {"a": {"$in": 1}}).errmsg,
            "$in needs an array"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$nin": 1}}).errmsg,
            "$nin needs an array"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$in": [{"$gt": 1}]}}).errmsg,
            "cannot nest $ under $in"
        );
    }

    #[test]
    fn logical_operators_combine_clauses() {
        let document = doc! {"a": 1, "b": 2};
        assert!(matches(
            doc! {"$and": [{"a": 1}, {"b": 2}]},
            document.clone()
        ));
        assert!(matches(
            doc! {"$or": [{"a": 5}, {"b": 2}]},
            document.clone()
        ));
        assert!(!matches(
            doc! {"$nor": [{"a": 5}, {"b": 2}]},
            document.clone()
        ));
        assert!(matches(doc! {"$nor": [{"a": 5}, {"b": 5}]}, document));
    }

    #[test]
    fn logical_operators_need_nonempty_arrays_of_objects() {
        for operator in ["$and", "$or", "$nor"] {
            let error = parse_error(doc! {operator: []});
            assert_eq!(error.code, ErrorCode::BadValue);
            assert_eq!(error.errmsg, "$and/$or/$nor must be a nonempty array");
        }
        assert_eq!(
            parse_error(doc! {"$or": [1]}).errmsg,
            "$or/$and/$nor entries need to be full objects"
        );
    }

    #[test]
    fn unknown_operators_are_bad_values() {
        let error = parse_error(doc! {"a": {"$foo": 1}});
        assert_eq!(
            (error.code, error.errmsg.as_str()),
            (ErrorCode::BadValue, "unknown operator: $foo")
        );
        let error = parse_error(doc! {"$foo": 1});
        assert_eq!(error.errmsg, "unknown top level operator: $foo");
        assert_eq!(
            parse_error(doc! {"a": {"$gt": 1, "b": 1}}).errmsg,
            "unknown operator: b"
        );
    }

    #[test]
    fn comment_is_ignored() {
        assert!(matches(doc! {"$comment": "hello", "a": 1}, doc! {"a": 1}));
    }

    #[test]
    fn not_negates_operator_expressions_and_regexes() {
        assert!(matches(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3}));
        assert!(matches(doc! {"a": {"$not": {"$gt": 5}}}, doc! {}));
        assert!(!matches(
            doc! {"a": {"$not": {"$gt": 5}}},
            doc! {"a": [1, 6]}
        ));
        let regex = BsonRegex {
            pattern: "^a".into(),
            options: String::new(),
        };
        assert!(matches(doc! {"a": {"$not": regex}}, doc! {"a": "ba"}));
        assert_eq!(
            parse_error(doc! {"a": {"$not": 1}}).errmsg,
            "$not needs a regex or a document"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$not": {}}}).errmsg,
            "$not cannot be empty"
        );
    }

    #[test]
    fn exists_sees_null_and_empty_arrays_as_present() {
        assert!(matches(doc! {"a": {"$exists": true}}, doc! {"a": null}));
        assert!(matches(doc! {"a": {"$exists": 1}}, doc! {"a": []}));
        assert!(matches(doc! {"a": {"$exists": false}}, doc! {"b": 1}));
        assert!(matches(doc! {"a.b": {"$exists": false}}, doc! {"a": [1]}));
        assert!(!matches(
            doc! {"a.b": {"$exists": true}},
            doc! {"a": [{"c": 1}]}
        ));
    }

    #[test]
    fn type_matches_codes_aliases_and_number() {
        assert!(matches(doc! {"a": {"$type": 2}}, doc! {"a": "x"}));
        assert!(matches(
            doc! {"a": {"$type": "number"}},
            doc! {"a": decimal("1")}
        ));
        assert!(matches(doc! {"a": {"$type": "array"}}, doc! {"a": []}));
        assert!(matches(doc! {"a": {"$type": "int"}}, doc! {"a": ["x", 1]}));
        assert!(matches(
            doc! {"a": {"$type": ["string", "long"]}},
            doc! {"a": 1_i64}
        ));
        assert!(matches(doc! {"a": {"$type": -1}}, doc! {"a": Bson::MinKey}));
        assert!(matches(doc! {"a": {"$type": 10.0}}, doc! {"a": null}));
        assert!(!matches(doc! {"a": {"$type": "null"}}, doc! {}));
        assert_eq!(
            parse_error(doc! {"a": {"$type": "nope"}}).errmsg,
            "Unknown type name alias: nope"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$type": 99}}).errmsg,
            "Invalid numerical type code: 99"
        );
    }

    #[test]
    fn regex_matches_strings_with_options() {
        assert!(matches(
            doc! {"a": {"$regex": "^AB", "$options": "i"}},
            doc! {"a": "abc"}
        ));
        assert!(matches(
            doc! {"a": BsonRegex { pattern: "b$".into(), options: "m".into() }},
            doc! {"a": "ab\nc"}
        ));
        assert!(!matches(doc! {"a": {"$regex": "1"}}, doc! {"a": 1}));
        assert!(matches(
            doc! {"a": {"$regex": "^x"}},
            doc! {"a": ["y", "xz"]}
        ));
        assert_eq!(
            parse_error(doc! {"a": {"$options": "i"}}).errmsg,
            "$options needs a $regex"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$regex": "a", "$options": "q"}}).errmsg,
            "invalid flag in regex options: q"
        );
        assert!(parse_error(doc! {"a": {"$regex": "("}})
            .errmsg
            .starts_with("Regular expression is invalid"));
    }

    #[test]
    fn regex_options_given_twice_name_which_came_first() {
        // jstests/core/query/regex/regex.js.
        let regex = Bson::RegularExpression(bson::Regex {
            pattern: "ab".into(),
            options: "i".into(),
        });
        let mut regex_first = doc! {"$regex": regex.clone()};
        regex_first.insert("$options", "s");
        let mut options_first = doc! {"$options": "s"};
        options_first.insert("$regex", regex);
        assert_eq!(
            parse_error(doc! {"x": regex_first}).code,
            ErrorCode::Location51075
        );
        assert_eq!(
            parse_error(doc! {"x": options_first}).code,
            ErrorCode::Location51074
        );
        let plain = Bson::RegularExpression(bson::Regex {
            pattern: "ABC".into(),
            options: String::new(),
        });
        assert!(matches(
            doc! {"x": {"$options": "i", "$regex": plain}},
            doc! {"x": ["abc"]}
        ));
    }

    #[test]
    fn regex_value_matches_identical_stored_regex() {
        let regex = BsonRegex {
            pattern: "a".into(),
            options: "i".into(),
        };
        assert!(matches(
            doc! {"a": regex.clone()},
            doc! {"a": regex.clone()}
        ));
        assert!(matches(
            doc! {"a": {"$eq": regex.clone()}},
            doc! {"a": regex}
        ));
        assert!(!matches(
            doc! {"a": {"$eq": BsonRegex { pattern: "a".into(), options: String::new() }}},
            doc! {"a": "a"}
        ));
    }

    #[test]
    fn elem_match_object_requires_one_element_to_satisfy_all() {
        let document = doc! {"a": [{"b": 1, "c": 2}, {"b": 2, "c": 1}]};
        assert!(matches(
            doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}},
            document.clone()
        ));
        assert!(!matches(
            doc! {"a": {"$elemMatch": {"b": 1, "c": 1}}},
            document.clone()
        ));
        assert!(matches(
            doc! {"a": {"$elemMatch": {"b": {"$gt": 1}}}},
            document
        ));
        assert!(!matches(
            doc! {"a": {"$elemMatch": {"b": 1}}},
            doc! {"a": {"b": 1}}
        ));
        assert_eq!(
            parse_error(doc! {"a": {"$elemMatch": 1}}).errmsg,
            "$elemMatch needs an Object"
        );
    }

    #[test]
    fn size_matches_array_length_only() {
        assert!(matches(doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]}));
        assert!(!matches(doc! {"a": {"$size": 1}}, doc! {"a": [1, [2, 3]]}));
        assert!(matches(doc! {"a": {"$size": 0}}, doc! {"a": []}));
        assert!(!matches(doc! {"a": {"$size": 0}}, doc! {}));
        assert_eq!(
            parse_error(doc! {"a": {"$size": 1.5}}).errmsg,
            "$size must be a whole number"
        );
        assert!(matches(
            doc! {"a.b": {"$size": 2}},
            doc! {"a": [{"b": [1, 2]}]}
        ));
        assert_eq!(
            parse_error(doc! {"a": {"$size": -1}}).errmsg,
            "$size may not be negative"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$size": "1"}}).errmsg,
            "$size needs a number"
        );
    }

    #[test]
    fn all_requires_every_value() {
        assert!(matches(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}));
        assert!(!matches(
            doc! {"a": {"$all": [1, 4]}},
            doc! {"a": [2, 3, 1]}
        ));
        assert!(matches(doc! {"a": {"$all": [1]}}, doc! {"a": 1}));
        assert!(!matches(doc! {"a": {"$all": []}}, doc! {"a": [1]}));
        assert!(matches(
            doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 2}}]}},
            doc! {"a": [{"b": 1}, {"b": 2}]}
        ));
        assert_eq!(
            parse_error(doc! {"a": {"$all": 1}}).errmsg,
            "$all needs an array"
        );
    }

    #[test]
    fn mod_truncates_dividends() {
        assert!(matches(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.9}));
        assert!(matches(doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5}));
        assert!(!matches(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"}));
        assert_eq!(
            parse_error(doc! {"a": {"$mod": [0, 1]}}).errmsg,
            "divisor cannot be 0"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$mod": [1]}}).errmsg,
            "malformed mod, not enough elements"
        );
    }

    #[test]
    fn undefined_operand_is_rejected() {
        assert_eq!(
            parse_error(doc! {"a": Bson::Undefined}).errmsg,
            "cannot compare to undefined"
        );
    }

    #[test]
    fn misplaced_operators_are_refused() {
        assert_eq!(
            parse_error(doc! {"$where": 1}).errmsg,
            "$where got bad type"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$where": "1"}}).errmsg,
            "unknown operator: $where"
        );
        // A near query must lead its operator object, and appear once.
        assert_eq!(
            parse_error(doc! {"a": {"$maxDistance": 1, "$near": [0, 0]}}).errmsg,
            "near must be first in: { $maxDistance: 1, $near: [ 0, 0 ] }"
        );
        assert_eq!(
            parse_error(doc! {"a": {"$near": [0, 0]}, "b": {"$near": [0, 0]}}).errmsg,
            "Too many geoNear expressions"
        );
        assert_eq!(
            parse_error(doc! {"$nor": [{"a": {"$near": [0, 0]}}]}).errmsg,
            "geo $near must be top-level expr"
        );
        assert!(Filter::parse(&doc! {"$or": [{"a": {"$near": [0, 0]}}]})
            .is_ok_and(|filter| filter.near().is_some()));
    }

    #[test]
    fn dbref_shaped_documents_are_equality() {
        assert!(matches(
            doc! {"a": {"$ref": "c", "$id": 1}},
            doc! {"a": {"$ref": "c", "$id": 1}}
        ));
    }

    #[test]
    fn match_position_reports_array_index() {
        let filter = parse(doc! {"a.b": 2});
        assert_eq!(
            filter.match_position(&doc! {"a": [{"b": 1}, {"b": 2}]}),
            Some(Some(1))
        );
        let filter = parse(doc! {"a": {"$elemMatch": {"$gt": 4}}});
        assert_eq!(filter.match_position(&doc! {"a": [1, 5, 9]}), Some(Some(1)));
        let filter = parse(doc! {"x": 1});
        assert_eq!(filter.match_position(&doc! {"x": 1}), Some(None));
        assert_eq!(filter.match_position(&doc! {"x": 2}), None);
    }

    #[test]
    fn id_equality_pins_point_lookups() {
        assert_eq!(parse(doc! {"_id": 5}).id_equality(), Some(&Bson::Int32(5)));
        assert_eq!(
            parse(doc! {"_id": {"$eq": "k"}, "a": 1}).id_equality(),
            Some(&Bson::String("k".into()))
        );
        assert_eq!(
            parse(doc! {"$and": [{"_id": 1}]}).id_equality(),
            Some(&Bson::Int32(1))
        );
        assert_eq!(parse(doc! {"_id": {"$gt": 5}}).id_equality(), None);
        assert_eq!(parse(doc! {"$or": [{"_id": 1}]}).id_equality(), None);
    }

    #[test]
    fn equality_fields_seed_upserts() {
        let filter = parse(
            doc! {"_id": 1, "a.b": 2, "c": {"$gt": 1}, "$and": [{"d": {"$eq": 3}}], "e": {"$in": [4]}},
        );
        assert_eq!(
            filter.equality_fields().expect("seedable"),
            doc! {"_id": 1, "a": {"b": 2}, "d": 3, "e": 4}
        );
        let error = parse(doc! {"a": 1, "a.b": 2})
            .equality_fields()
            .expect_err("conflict");
        assert_eq!(error.code, ErrorCode::NotSingleValueField);
        let error = parse(doc! {"$and": [{"a": 1}, {"a": 2}]})
            .equality_fields()
            .expect_err("conflict");
        assert_eq!(
            error.errmsg,
            "cannot infer query fields to set, path 'a' is matched twice"
        );
    }

    #[test]
    fn element_matcher_covers_pull_condition_forms() {
        let operators = ElementMatcher::parse(&Bson::Document(doc! {"$gte": 6})).expect("valid");
        assert!(operators.matches(&Bson::Int32(7)));
        assert!(!operators.matches(&Bson::Array(vec![Bson::Int32(7)])));
        let query = ElementMatcher::parse(&Bson::Document(doc! {"b": 1})).expect("valid");
        assert!(query.matches(&Bson::Document(doc! {"b": 1, "c": 2})));
        assert!(!query.matches(&Bson::Int32(1)));
        let scalar = ElementMatcher::parse(&Bson::Int32(1)).expect("valid");
        assert!(scalar.matches(&Bson::Double(1.0)));
        let regex = ElementMatcher::parse(&Bson::RegularExpression(BsonRegex {
            pattern: "^a".into(),
            options: String::new(),
        }))
        .expect("valid");
        assert!(regex.matches(&Bson::String("ab".into())));
    }

    #[test]
    fn empty_document_equality_and_nested_leaf_arrays() {
        assert!(matches(doc! {"a": {}}, doc! {"a": {}}));
        assert!(!matches(doc! {"a": {}}, doc! {"a": {"b": 1}}));
        assert!(matches(doc! {"a.b": 1}, doc! {"a": {"b": [0, 1]}}));
        assert!(matches(doc! {"a": {"$eq": [1, 2]}}, doc! {"a": [[1, 2]]}));
        assert!(matches(doc! {"a": {"$size": 1}}, doc! {"a": [[1, 2]]}));
    }

    #[test]
    fn extreme_numbers_compare_exactly_in_filters() {
        assert!(matches(
            doc! {"a": {"$gt": f64::MAX}},
            doc! {"a": decimal("1E+6144")}
        ));
        assert!(matches(
            doc! {"a": {"$lt": decimal("9223372036854775808")}},
            doc! {"a": i64::MAX}
        ));
        assert!(!matches(
            doc! {"a": {"$lt": decimal("9223372036854775807")}},
            doc! {"a": i64::MAX}
        ));
        assert!(matches(
            doc! {"a": i64::MIN},
            doc! {"a": decimal("-9223372036854775808")}
        ));
    }
}
