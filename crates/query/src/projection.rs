//! `find` projections: parsing a projection document into a field tree and shaping result
//! documents with mongod 4.4+ semantics.
//!
//! Invariants:
//! - A projection is either inclusion or exclusion; mixing is rejected (mongod 31253/31254).
//!   `_id` is included by default in inclusion projections and may be excluded in either kind.
//! - Inclusion keeps included fields in the document's own order, then appends computed fields
//!   (literals, `$meta`) in projection order. Through arrays, inclusion keeps only
//!   document (and nested array) elements; exclusion keeps scalars.
//! - Parsing rejects malformed specs with mongod's messages; applying never fails except for a
//!   positional projection without a usable match position.
//!
//! - Aggregation `$project` ([`Projection::parse_aggregation`]) uses the same tree: every
//!   operator object and non-numeric, non-boolean value is handed to the caller's expression
//!   compiler and stored as an opaque index; [`Projection::apply_computed`] asks the caller for
//!   each index's value (`None` omits the field, as `$$REMOVE` does).
//!
//! - A `find` projection's operator expressions other than `$slice`, `$elemMatch`, `$meta` and
//!   `$literal` (`{total: {$add: ["$a", "$b"]}}`, `$slice` with an expression argument) are
//!   aggregation expressions, compiled at parse time (seeing the command's `let` variables) and
//!   evaluated against each document by [`Projection::apply_find`] at the command's `$$NOW`.
//!
//! Of the language it uses `crate::expr` and `crate::filter` (`$elemMatch`);
//! pipelines (`$project`) and updates sit above it.

use bson::{Bson, Document};

use super::expr::Expr;
use super::filter::Filter;
use super::numeric::Number;
use super::path;
use tideway_base::display::{element_string, type_name};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{check_field_path_length, MAX_FIELD_PATH_COMPONENTS};

/// A parsed projection.
#[derive(Clone, Debug)]
pub struct Projection {
    root: Tree,
    kind: Kind,
    has_positional: bool,
    /// A `find` projection's aggregation expressions (`Node::Expression` indexes into it).
    expressions: std::sync::Arc<[Expr]>,
    /// `$$NOW` of those expressions: the command's time when it parsed the projection.
    now: bson::DateTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Inclusion,
    Exclusion,
}

#[derive(Clone, Debug, Default)]
struct Tree {
    children: Vec<(String, Node)>,
}

#[derive(Clone, Debug)]
enum Node {
    Include,
    Exclude,
    Sub(Tree),
    Slice {
        skip: Option<i64>,
        limit: i64,
    },
    ElemMatch(Box<Filter>),
    Positional,
    Literal(Bson),
    FieldReference(Vec<String>),
    Meta(String),
    /// An aggregation expression, by the index the caller's compiler returned.
    Expression(usize),
}

impl Node {
    fn is_computed(&self) -> bool {
        matches!(
            self,
            Node::Literal(_) | Node::FieldReference(_) | Node::Meta(_) | Node::Expression(_)
        )
    }
}

impl Tree {
    fn child(&self, name: &str) -> Option<&Node> {
        self.children
            .iter()
            .find(|(child, _)| child == name)
            .map(|(_, node)| node)
    }

    fn has_computed(&self) -> bool {
        self.children.iter().any(|(_, node)| match node {
            Node::Sub(tree) => tree.has_computed(),
            other => other.is_computed(),
        })
    }

    /// Adds `node` at `parts`, creating intermediate subtrees; collisions are mongod's
    /// 31250 (same path twice) and 31249 (a path below an existing leaf).
    fn add(
        &mut self,
        parts: &[String],
        node: Node,
        full_path: &[String],
    ) -> CommandResult<&mut Node> {
        let collision_below_leaf = || {
            CommandError::bad_value(format!(
                "Path collision at {} remaining portion {}",
                full_path.join("."),
                full_path[1..].join(".")
            ))
        };
        let Some((first, rest)) = parts.split_first() else {
            return Err(CommandError::bad_value(
                "FieldPath cannot be constructed with empty string",
            ));
        };
        let position = self.children.iter().position(|(name, _)| name == first);
        if rest.is_empty() {
            if position.is_some() {
                return Err(CommandError::bad_value(format!(
                    "Path collision at {}",
                    full_path.join(".")
                )));
            }
            self.children.push((first.clone(), node));
            let last = self.children.len() - 1;
            return Ok(&mut self.children[last].1);
        }
        let index = match position {
            Some(index) => index,
            None => {
                self.children
                    .push((first.clone(), Node::Sub(Tree::default())));
                self.children.len() - 1
            }
        };
        match &mut self.children[index].1 {
            Node::Sub(tree) => tree.add(rest, node, full_path),
            _ => Err(collision_below_leaf()),
        }
    }

    fn remove_top_level(&mut self, name: &str) {
        self.children.retain(|(child, _)| child != name);
    }
}

/// An aggregation expression compiler: stores the expression and returns its index.
pub(crate) type ExpressionCompiler<'a> = dyn FnMut(&Bson) -> CommandResult<usize> + 'a;

/// What a projection may contain besides inclusions and exclusions.
struct ParseOptions<'a, 'b> {
    allowed_meta: &'a [&'a str],
    /// `Some` for aggregation `$project`: expressions are compiled by the caller.
    compile: Option<&'a mut ExpressionCompiler<'b>>,
    /// `Some` for `find`: operator expressions that are not projection operators.
    compile_operators: Option<&'a mut ExpressionCompiler<'b>>,
}

/// Parse-time facts that decide inclusion versus exclusion (mongod's ParseContext).
#[derive(Default)]
struct ParseState {
    kind: Option<Kind>,
    id_specified: bool,
    id_included: bool,
    id_excluded: bool,
    has_slice: bool,
    has_elem_match: bool,
    has_meta: bool,
    has_positional: bool,
}

impl ParseState {
    fn require(&mut self, wanted: Kind, error: impl FnOnce() -> CommandError) -> CommandResult<()> {
        match self.kind {
            Some(kind) if kind != wanted => Err(error()),
            _ => {
                self.kind = Some(wanted);
                Ok(())
            }
        }
    }

    fn resolved_kind(&self) -> Kind {
        if let Some(kind) = self.kind {
            return kind;
        }
        if self.has_slice {
            return if self.id_included {
                Kind::Inclusion
            } else {
                Kind::Exclusion
            };
        }
        if self.has_elem_match {
            return Kind::Inclusion;
        }
        if self.has_meta {
            return if self.id_included && !self.id_excluded {
                Kind::Inclusion
            } else {
                Kind::Exclusion
            };
        }
        if self.id_included {
            Kind::Inclusion
        } else {
            Kind::Exclusion
        }
    }
}

fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(flag) => *flag,
        other => Number::from_bson(other).is_some_and(|number| !number.is_zero()),
    }
}

impl Projection {
    /// Parses a projection; `{f: {$meta: name}}` is accepted only for names in `allowed_meta`.
    pub fn parse(spec: &Document, allowed_meta: &[&str]) -> CommandResult<Projection> {
        let mut expressions = Vec::new();
        let mut compile = |value: &Bson| -> CommandResult<usize> {
            expressions.push(Expr::parse(value)?);
            Ok(expressions.len() - 1)
        };
        let mut projection = Projection::parse_with(
            spec,
            ParseOptions {
                allowed_meta,
                compile: None,
                compile_operators: Some(&mut compile),
            },
        )?;
        projection.expressions = expressions.into();
        projection.now =
            crate::expr::command_variables::command_time().unwrap_or_else(bson::DateTime::now);
        Ok(projection)
    }

    /// Parses an aggregation `$project` specification: operator objects and values other than
    /// numbers and booleans are expressions, handed to `compile`, which returns the index
    /// [`Projection::apply_computed`] later asks the value of. Positional projection and the
    /// `find`-only `$slice`/`$elemMatch` forms are not available here.
    pub(crate) fn parse_aggregation(
        spec: &Document,
        compile: &mut ExpressionCompiler<'_>,
    ) -> CommandResult<Projection> {
        Projection::parse_with(
            spec,
            ParseOptions {
                allowed_meta: &[],
                compile: Some(compile),
                compile_operators: None,
            },
        )
    }

    fn parse_with(spec: &Document, mut options: ParseOptions) -> CommandResult<Projection> {
        let mut state = ParseState::default();
        let mut root = Tree::default();
        for (name, value) in spec {
            state.id_specified |= name == "_id" || name.starts_with("_id.");
            parse_element(&mut state, &mut root, &[], name, value, &mut options)?;
        }
        let kind = state.resolved_kind();
        if kind == Kind::Inclusion && !state.id_specified {
            root.add(&["_id".to_string()], Node::Include, &["_id".to_string()])?;
        }
        if kind == Kind::Exclusion && state.id_included {
            root.remove_top_level("_id");
        }
        Ok(Projection {
            root,
            kind,
            has_positional: state.has_positional,
            expressions: std::sync::Arc::from(Vec::new()),
            now: bson::DateTime::from_millis(0),
        })
    }

    /// True when the projection has a positional (`a.$`) field, which needs
    /// [`Projection::apply_find`] with the match position.
    pub fn has_positional(&self) -> bool {
        self.has_positional
    }

    /// Shapes a document; `meta` resolves `$meta` names. Positional fields are dropped here.
    pub fn apply(&self, document: &Document, meta: &dyn Fn(&str) -> Bson) -> Document {
        self.shape(document, meta, PositionalIndex::Ignore, None)
            .unwrap_or_default()
    }

    /// The fields an inclusion projection keeps when they are all plain top-level fields (no
    /// dotted path, operator or computed value): what a covered read must supply. `_id` is
    /// among them unless excluded. `None` for any other projection.
    pub fn included_top_level_fields(&self) -> Option<Vec<String>> {
        if self.kind != Kind::Inclusion || self.has_positional {
            return None;
        }
        let mut fields = Vec::with_capacity(self.root.children.len());
        for (name, node) in &self.root.children {
            match node {
                Node::Include => fields.push(name.clone()),
                Node::Exclude if name == "_id" => {}
                _ => return None,
            }
        }
        Some(fields)
    }

    /// Shapes a document parsed by [`Projection::parse_aggregation`]; `evaluate` gives each
    /// expression's value for this document (`None`: leave the field out). Its errors abort.
    pub(crate) fn apply_computed(
        &self,
        document: &Document,
        evaluate: &dyn Fn(usize) -> CommandResult<Option<Bson>>,
    ) -> CommandResult<Document> {
        self.shape(
            document,
            &|_| Bson::Null,
            PositionalIndex::Ignore,
            Some(evaluate),
        )
    }

    /// Shapes a `find` result: positional `a.$` fields from the array index reported by
    /// [`Filter::match_position`] (51246 when there is none), aggregation expressions evaluated
    /// against the document under `collation`.
    pub fn apply_find(
        &self,
        document: &Document,
        meta: &dyn Fn(&str) -> Bson,
        matched_array_index: Option<usize>,
        collation: Option<&crate::collation::Collation>,
    ) -> CommandResult<Document> {
        let evaluate = |index: usize| match self.expressions.get(index) {
            Some(expression) => expression.evaluate_collated(document, self.now, collation),
            None => Err(CommandError::internal("projection expression index")),
        };
        self.shape(
            document,
            meta,
            PositionalIndex::Required(matched_array_index),
            Some(&evaluate),
        )
    }

    fn shape(
        &self,
        document: &Document,
        meta: &dyn Fn(&str) -> Bson,
        positional: PositionalIndex,
        evaluate: Option<&dyn Fn(usize) -> CommandResult<Option<Bson>>>,
    ) -> CommandResult<Document> {
        let shaper = Shaper {
            meta,
            positional,
            root_document: document,
            evaluate,
        };
        match self.kind {
            Kind::Inclusion => shaper.include(document, &self.root),
            Kind::Exclusion => shaper.exclude(document, &self.root),
        }
    }
}

fn parse_element(
    state: &mut ParseState,
    parent: &mut Tree,
    parent_path: &[String],
    name: &str,
    value: &Bson,
    options: &mut ParseOptions,
) -> CommandResult<()> {
    if name.is_empty() || name.split('.').any(str::is_empty) {
        return Err(CommandError::bad_value(
            "FieldPath field names may not be empty strings.",
        ));
    }
    check_field_path_length(name, MAX_FIELD_PATH_COMPONENTS, ErrorCode::Overflow)?;
    let is_top_level_id = name == "_id" && parent_path.is_empty();
    let positional = name == "$" || name.ends_with(".$");
    if positional && options.compile.is_some() {
        // mongod 31324.
        return Err(CommandError::bad_value(
            "Cannot use positional projection in aggregation projection",
        ));
    }
    let relative: Vec<String> = if positional {
        path::split_path(name.trim_end_matches(".$"))
    } else {
        path::split_path(name)
    };
    if relative.iter().any(|part| part.starts_with('$')) {
        return Err(CommandError::bad_value(format!(
            "FieldPath field names may not start with '$'. Consider using $getField or $setField. in path {name}"
        )));
    }
    let full: Vec<String> = parent_path
        .iter()
        .cloned()
        .chain(relative.iter().cloned())
        .collect();
    match value {
        Bson::Document(sub) => {
            if positional {
                return Err(CommandError::bad_value(
                    "positional projection cannot be used with an expression or sub object",
                ));
            }
            let first_key = sub.keys().next().map(String::as_str);
            let is_operator = first_key.is_some_and(|key| key.starts_with('$'));
            if let Some(compile) = options.compile.as_mut() {
                if is_operator {
                    let index = compile(value)?;
                    parent.add(&relative, Node::Expression(index), &full)?;
                    // mongod 31252.
                    return state.require(Kind::Inclusion, || {
                        CommandError::bad_value(
                            "Cannot use expression other than $meta in exclusion projection",
                        )
                    });
                }
                if sub.is_empty() {
                    // mongod 51270.
                    return Err(CommandError::bad_value(format!(
                        "An empty sub-projection is not a valid value. Found empty object at path {}",
                        full.join(".")
                    )));
                }
            } else if sub.len() == 1 && is_operator {
                let node = parse_expression(state, sub, &full, options)?;
                parent.add(&relative, node, &full)?;
                return Ok(());
            }
            // A nested projection: {a: {b: 1}} is {"a.b": 1}.
            let Node::Sub(tree) = parent.add(&relative, Node::Sub(Tree::default()), &full)? else {
                return Err(CommandError::internal("projection subtree expected"));
            };
            for (child_name, child_value) in sub {
                parse_element(state, tree, &full, child_name, child_value, options)?;
            }
            Ok(())
        }
        Bson::Boolean(_)
        | Bson::Int32(_)
        | Bson::Int64(_)
        | Bson::Double(_)
        | Bson::Decimal128(_) => {
            if is_truthy(value) {
                if positional {
                    if state.has_positional {
                        return Err(CommandError::bad_value(
                            "Cannot specify more than one positional projection per query.",
                        ));
                    }
                    if state.has_elem_match {
                        return Err(CommandError::bad_value(
                            "Cannot specify positional operator and $elemMatch.",
                        ));
                    }
                    state.has_positional = true;
                    parent.add(&relative, Node::Positional, &full)?;
                } else {
                    parent.add(&relative, Node::Include, &full)?;
                }
                if is_top_level_id {
                    state.id_included = true;
                } else {
                    // mongod 31253.
                    state.require(Kind::Inclusion, || {
                        CommandError::bad_value(format!(
                            "Cannot do inclusion on field {name} in exclusion projection"
                        ))
                    })?;
                }
            } else {
                parent.add(&relative, Node::Exclude, &full)?;
                if is_top_level_id {
                    state.id_excluded = true;
                } else {
                    // mongod 31254.
                    state.require(Kind::Exclusion, || {
                        CommandError::bad_value(format!(
                            "Cannot do exclusion on field {name} in inclusion projection"
                        ))
                    })?;
                }
            }
            Ok(())
        }
        literal => {
            if positional {
                return Err(CommandError::bad_value(
                    "positional projection cannot be used with a literal",
                ));
            }
            let node = match (literal, options.compile.as_mut()) {
                (_, Some(compile)) => Node::Expression(compile(literal)?),
                // `"$$name"`: a variable, which only the expression engine knows.
                (Bson::String(variable), None) if variable.starts_with("$$") => {
                    match options.compile_operators.as_mut() {
                        Some(compile) => Node::Expression(compile(literal)?),
                        None => Node::Literal(literal.clone()),
                    }
                }
                (Bson::String(reference), None) if reference.starts_with('$') => {
                    Node::FieldReference(path::split_path(&reference[1..]))
                }
                (other, None) => Node::Literal(other.clone()),
            };
            parent.add(&relative, node, &full)?;
            // mongod 31310.
            state.require(Kind::Inclusion, || {
                CommandError::bad_value(format!(
                    "Cannot use an expression {} in an exclusion projection",
                    element_string(name, literal)
                ))
            })
        }
    }
}

fn parse_expression(
    state: &mut ParseState,
    expression: &Document,
    full: &[String],
    options: &mut ParseOptions,
) -> CommandResult<Node> {
    let Some((operator, argument)) = expression.iter().next() else {
        return Err(CommandError::internal("projection expression expected"));
    };
    // An aggregation expression in a `find` projection: `$slice` of an expression (the first of
    // its arguments is not a number), or any operator that is no projection operator.
    let slice_expression = operator == "$slice"
        && matches!(argument, Bson::Array(arguments)
            if arguments.first().is_some_and(|first| Number::from_bson(first).is_none()));
    let projection_operator = matches!(
        operator.as_str(),
        "$slice" | "$elemMatch" | "$meta" | "$literal"
    ) && !slice_expression;
    if !projection_operator {
        if let Some(compile) = options.compile_operators.as_mut() {
            let index = compile(&Bson::Document(expression.clone()))?;
            // mongod 31252.
            state.require(Kind::Inclusion, || {
                CommandError::bad_value(
                    "Cannot use expression other than $meta in exclusion projection",
                )
            })?;
            return Ok(Node::Expression(index));
        }
    }
    let allowed_meta = options.allowed_meta;
    match operator.as_str() {
        "$slice" => {
            state.has_slice = true;
            parse_slice(argument)
        }
        "$elemMatch" => {
            let Bson::Document(condition) = argument else {
                // mongod 31274.
                return Err(CommandError::bad_value(format!(
                    "elemMatch: Invalid argument, object required, but got {}",
                    type_name(argument)
                )));
            };
            if state.has_positional {
                return Err(CommandError::bad_value(
                    "Cannot specify positional operator and $elemMatch.",
                ));
            }
            if full.len() != 1 {
                // mongod 31275.
                return Err(CommandError::bad_value(
                    "Cannot use $elemMatch projection on a nested field.",
                ));
            }
            let mut wrapped = Document::new();
            wrapped.insert(
                full[0].clone(),
                Bson::Document(bson::doc! {"$elemMatch": condition.clone()}),
            );
            state.has_elem_match = true;
            Ok(Node::ElemMatch(Box::new(Filter::parse(&wrapped)?)))
        }
        "$meta" => {
            let Bson::String(name) = argument else {
                return Err(CommandError::bad_value(
                    "$meta only supports string arguments",
                ));
            };
            if !allowed_meta.contains(&name.as_str()) {
                return Err(CommandError::bad_value(format!(
                    "Unsupported argument to $meta: {name}"
                )));
            }
            state.has_meta = true;
            Ok(Node::Meta(name.clone()))
        }
        "$literal" => {
            // mongod 31252.
            state.require(Kind::Inclusion, || {
                CommandError::bad_value(
                    "Cannot use expression other than $meta in exclusion projection",
                )
            })?;
            Ok(Node::Literal(argument.clone()))
        }
        other => Err(CommandError::new(
            ErrorCode::NotImplemented,
            format!("projection expression {other} is not supported by this server"),
        )),
    }
}

fn parse_slice(argument: &Bson) -> CommandResult<Node> {
    let as_int = |value: &Bson| Number::from_bson(value).and_then(Number::to_i64_truncated);
    match argument {
        Bson::Array(bounds) => {
            if bounds.len() != 2 {
                // mongod 31272.
                return Err(CommandError::bad_value(
                    "$slice array argument should be of form [skip, limit]",
                ));
            }
            let skip = as_int(&bounds[0]).ok_or_else(|| {
                // mongod 31257.
                CommandError::bad_value(format!(
                    "$slice expects the skip argument to be a number, got {}",
                    type_name(&bounds[0])
                ))
            })?;
            let limit = as_int(&bounds[1]).ok_or_else(|| {
                // mongod 31258.
                CommandError::bad_value(format!(
                    "$slice expects the limit argument to be a number, got {}",
                    type_name(&bounds[1])
                ))
            })?;
            if limit <= 0 {
                // mongod 31259.
                return Err(CommandError::bad_value(format!(
                    "$slice limit must be positive, got {limit}"
                )));
            }
            Ok(Node::Slice {
                skip: Some(skip),
                limit,
            })
        }
        other => match as_int(other) {
            Some(limit) => Ok(Node::Slice { skip: None, limit }),
            // mongod 31273.
            None => Err(CommandError::bad_value(
                "$slice only supports numbers and [skip, limit] arrays",
            )),
        },
    }
}

#[derive(Clone, Copy)]
enum PositionalIndex {
    Ignore,
    Required(Option<usize>),
}

struct Shaper<'a> {
    meta: &'a dyn Fn(&str) -> Bson,
    positional: PositionalIndex,
    root_document: &'a Document,
    evaluate: Option<&'a dyn Fn(usize) -> CommandResult<Option<Bson>>>,
}

fn slice(elements: &[Bson], skip: Option<i64>, limit: i64) -> Vec<Bson> {
    let length = elements.len() as i64;
    let (start, count) = match skip {
        None if limit >= 0 => (0, limit),
        None => ((length + limit).max(0), length),
        Some(skip) if skip >= 0 => (skip.min(length), limit),
        Some(skip) => ((length + skip).max(0), limit),
    };
    let end = start.saturating_add(count).min(length);
    elements[start as usize..end.max(start) as usize].to_vec()
}

/// An aggregation-style field path: arrays along the way map over their document elements.
fn resolve_reference(value: &Bson, parts: &[String]) -> Option<Bson> {
    let Some((first, rest)) = parts.split_first() else {
        return Some(value.clone());
    };
    match value {
        Bson::Document(document) => resolve_reference(document.get(first)?, rest),
        Bson::Array(elements) => Some(Bson::Array(
            elements
                .iter()
                .filter_map(|element| match element {
                    Bson::Document(_) | Bson::Array(_) => resolve_reference(element, parts),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

impl Shaper<'_> {
    /// The value of a computed node (`None`: omit the field); non-computed nodes give `None`.
    fn computed(&self, node: &Node) -> CommandResult<Option<Bson>> {
        Ok(match node {
            Node::Literal(value) => Some(value.clone()),
            Node::Meta(name) => Some((self.meta)(name)),
            Node::FieldReference(parts) => parts
                .split_first()
                .and_then(|(first, rest)| resolve_reference(self.root_document.get(first)?, rest)),
            Node::Expression(index) => match self.evaluate {
                Some(evaluate) => evaluate(*index)?,
                None => None,
            },
            _ => None,
        })
    }

    /// Values for leaf nodes that transform a present value in either projection kind.
    fn transformed(&self, name: &str, value: &Bson, node: &Node) -> CommandResult<Option<Bson>> {
        Ok(match (node, value) {
            (Node::Slice { skip, limit }, Bson::Array(elements)) => {
                Some(Bson::Array(slice(elements, *skip, *limit)))
            }
            (Node::Slice { .. }, other) => Some(other.clone()),
            (Node::ElemMatch(filter), Bson::Array(elements)) => {
                let mut probe = Document::new();
                probe.insert(name, value.clone());
                match filter.match_position(&probe) {
                    Some(Some(index)) => elements
                        .get(index)
                        .map(|element| Bson::Array(vec![element.clone()])),
                    _ => None,
                }
            }
            (Node::ElemMatch(_), _) => None,
            (Node::Positional, Bson::Array(elements)) => match self.positional {
                PositionalIndex::Ignore => None,
                PositionalIndex::Required(index) => {
                    let element = index.and_then(|index| elements.get(index)).ok_or_else(|| {
                        CommandError::new(
                            ErrorCode::Location51246,
                            "positional operator '.$' couldn't find a matching element in the array",
                        )
                    })?;
                    Some(Bson::Array(vec![element.clone()]))
                }
            },
            (Node::Positional, other) => Some(other.clone()),
            _ => None,
        })
    }

    fn include(&self, document: &Document, tree: &Tree) -> CommandResult<Document> {
        let mut output = Document::new();
        for (name, value) in document {
            let Some(node) = tree.child(name) else {
                continue;
            };
            let projected = match (node, value) {
                (Node::Include, _) => Some(value.clone()),
                (Node::Sub(subtree), Bson::Document(inner)) => {
                    Some(Bson::Document(self.include(inner, subtree)?))
                }
                (Node::Sub(subtree), Bson::Array(elements)) => {
                    Some(Bson::Array(self.include_array(elements, subtree)?))
                }
                (Node::Sub(subtree), _) if subtree.has_computed() => {
                    Some(Bson::Document(self.include(&Document::new(), subtree)?))
                }
                (Node::Sub(_), _) | (Node::Exclude, _) => None,
                (node, _) if node.is_computed() => None,
                (node, value) => self.transformed(name, value, node)?,
            };
            if let Some(projected) = projected {
                output.insert(name.clone(), projected);
            }
        }
        for (name, node) in &tree.children {
            if let Some(value) = self.computed(node)? {
                output.insert(name.clone(), value);
            } else if let Node::Sub(subtree) = node {
                if !document.contains_key(name) && subtree.has_computed() {
                    output.insert(name.clone(), self.include(&Document::new(), subtree)?);
                }
            }
        }
        Ok(output)
    }

    fn include_array(&self, elements: &[Bson], tree: &Tree) -> CommandResult<Vec<Bson>> {
        let mut output = Vec::with_capacity(elements.len());
        for element in elements {
            match element {
                Bson::Document(inner) => output.push(Bson::Document(self.include(inner, tree)?)),
                Bson::Array(nested) => output.push(Bson::Array(self.include_array(nested, tree)?)),
                _ => {}
            }
        }
        Ok(output)
    }

    fn exclude(&self, document: &Document, tree: &Tree) -> CommandResult<Document> {
        let mut output = Document::new();
        for (name, value) in document {
            let projected = match (tree.child(name), value) {
                (None, _) | (Some(Node::Include), _) => Some(value.clone()),
                (Some(Node::Exclude), _) => None,
                (Some(Node::Sub(subtree)), Bson::Document(inner)) => {
                    Some(Bson::Document(self.exclude(inner, subtree)?))
                }
                (Some(Node::Sub(subtree)), Bson::Array(elements)) => {
                    Some(Bson::Array(self.exclude_array(elements, subtree)?))
                }
                (Some(Node::Sub(_)), other) => Some(other.clone()),
                (Some(node), _) if node.is_computed() => None,
                (Some(node), value) => self.transformed(name, value, node)?,
            };
            if let Some(projected) = projected {
                output.insert(name.clone(), projected);
            }
        }
        for (name, node) in &tree.children {
            if let Some(value) = self.computed(node)? {
                output.insert(name.clone(), value);
            }
        }
        Ok(output)
    }

    fn exclude_array(&self, elements: &[Bson], tree: &Tree) -> CommandResult<Vec<Bson>> {
        elements
            .iter()
            .map(|element| match element {
                Bson::Document(inner) => self.exclude(inner, tree).map(Bson::Document),
                Bson::Array(nested) => self.exclude_array(nested, tree).map(Bson::Array),
                other => Ok(other.clone()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::identical_documents;
    use bson::doc;

    fn no_meta(_: &str) -> Bson {
        Bson::Null
    }

    fn project(spec: Document, document: Document) -> Document {
        Projection::parse(&spec, &["lastModified"])
            .expect("valid projection")
            .apply(&document, &no_meta)
    }

    #[test]
    fn included_top_level_fields_are_what_a_covered_read_must_supply() {
        let fields = |spec: Document| {
            Projection::parse(&spec, &["textScore"])
                .unwrap()
                .included_top_level_fields()
        };
        assert_eq!(fields(doc! {"a": 1, "_id": 0}), Some(vec!["a".to_string()]));
        let mut with_id = fields(doc! {"b": 1, "a": true}).unwrap();
        with_id.sort();
        assert_eq!(with_id, ["_id", "a", "b"]);
        for spec in [
            doc! {"a": 0},
            doc! {"a.b": 1, "_id": 0},
            doc! {"a": {"$slice": 1}, "_id": 0},
            doc! {"a.$": 1, "_id": 0},
            doc! {"a": "$b", "_id": 0},
            doc! {"s": {"$meta": "textScore"}, "_id": 0},
        ] {
            assert_eq!(fields(spec.clone()), None, "{spec}");
        }
    }

    #[track_caller]
    fn assert_same(actual: Document, expected: Document) {
        assert!(
            identical_documents(&actual, &expected),
            "{actual:?} != {expected:?}"
        );
    }

    fn parse_error(spec: Document) -> CommandError {
        Projection::parse(&spec, &["lastModified"]).expect_err("projection should be rejected")
    }

    fn sample() -> Document {
        doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3]}
    }

    #[test]
    fn empty_projection_returns_everything() {
        assert_same(project(doc! {}, sample()), sample());
    }

    #[test]
    fn inclusion_keeps_id_and_document_order() {
        assert_same(
            project(doc! {"e": 1, "a": 1}, sample()),
            doc! {"_id": 1, "a": 1, "e": [1, 2, 3]},
        );
        assert_same(project(doc! {"a": 1, "_id": 0}, sample()), doc! {"a": 1});
        assert_same(project(doc! {"_id": 1}, sample()), doc! {"_id": 1});
    }

    #[test]
    fn exclusion_removes_fields() {
        assert_same(
            project(doc! {"a": 0, "b.c": 0}, sample()),
            doc! {"_id": 1, "b": {"d": 3}, "e": [1, 2, 3]},
        );
        assert_same(
            project(doc! {"_id": 0}, sample()),
            doc! {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3]},
        );
        assert_same(
            project(doc! {"a": false, "_id": 1}, sample()),
            doc! {"_id": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3]},
        );
    }

    #[test]
    fn mixing_inclusion_and_exclusion_is_rejected() {
        assert_eq!(
            parse_error(doc! {"a": 1, "b": 0}).errmsg,
            "Cannot do exclusion on field b in inclusion projection"
        );
        assert_eq!(
            parse_error(doc! {"a": 0, "b": 1}).errmsg,
            "Cannot do inclusion on field b in exclusion projection"
        );
        assert_eq!(
            parse_error(doc! {"a": 0, "b": "x"}).errmsg,
            "Cannot use an expression {b: \"x\"} in an exclusion projection"
        );
    }

    #[test]
    fn dotted_inclusion_through_arrays_drops_scalars() {
        let document = doc! {"_id": 1, "a": [{"b": 1, "c": 2}, 3, {"c": 1}, [{"b": 4}]]};
        assert_same(
            project(doc! {"a.b": 1, "_id": 0}, document.clone()),
            doc! {"a": [{"b": 1}, {}, [{"b": 4}]]},
        );
        assert_same(
            project(doc! {"a.b": 0}, document),
            doc! {"_id": 1, "a": [{"c": 2}, 3, {"c": 1}, [{}]]},
        );
    }

    #[test]
    fn nested_specs_equal_dotted_paths() {
        assert_same(
            project(doc! {"b": {"c": 1}}, sample()),
            doc! {"_id": 1, "b": {"c": 2}},
        );
    }

    #[test]
    fn path_collisions_are_rejected() {
        assert_eq!(
            parse_error(doc! {"a": 1, "a.b": 1}).errmsg,
            "Path collision at a.b remaining portion b"
        );
        assert_eq!(
            parse_error(doc! {"a.b": 1, "a": 1}).errmsg,
            "Path collision at a"
        );
    }

    #[test]
    fn literals_and_field_references_are_computed_fields() {
        assert_same(
            project(doc! {"x": "lit", "a": 1}, sample()),
            doc! {"_id": 1, "a": 1, "x": "lit"},
        );
        assert_same(
            project(doc! {"y": "$b.c", "_id": 0}, sample()),
            doc! {"y": 2},
        );
        assert_same(
            project(doc! {"z": {"$literal": 1}, "_id": 0}, sample()),
            doc! {"z": 1},
        );
        assert_same(
            project(doc! {"n": null, "_id": 0}, sample()),
            doc! {"n": null},
        );
    }

    #[test]
    fn slice_limits_arrays_and_defaults_to_exclusion() {
        assert_same(
            project(doc! {"e": {"$slice": 2}}, sample()),
            doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]},
        );
        assert_same(
            project(doc! {"e": {"$slice": -1}, "a": 1}, sample()),
            doc! {"_id": 1, "a": 1, "e": [3]},
        );
        assert_same(
            project(
                doc! {"e": {"$slice": [1, 5]}, "_id": 0, "a": 0, "b": 0},
                sample(),
            ),
            doc! {"e": [2, 3]},
        );
        assert_same(
            project(
                doc! {"e": {"$slice": [-2, 1]}, "_id": 0, "a": 0, "b": 0},
                sample(),
            ),
            doc! {"e": [2]},
        );
        assert_same(
            project(
                doc! {"a": {"$slice": 1}, "_id": 0, "b": 0, "e": 0},
                sample(),
            ),
            doc! {"a": 1},
        );
        assert_eq!(
            parse_error(doc! {"e": {"$slice": [1, 0]}}).errmsg,
            "$slice limit must be positive, got 0"
        );
        assert_eq!(
            parse_error(doc! {"e": {"$slice": "x"}}).errmsg,
            "$slice only supports numbers and [skip, limit] arrays"
        );
    }

    #[test]
    fn elem_match_projects_first_matching_element() {
        let document = doc! {"_id": 1, "k": 0, "s": [{"n": 1}, {"n": 5}, {"n": 6}]};
        assert_same(
            project(
                doc! {"s": {"$elemMatch": {"n": {"$gt": 4}}}},
                document.clone(),
            ),
            doc! {"_id": 1, "s": [{"n": 5}]},
        );
        assert_same(
            project(doc! {"s": {"$elemMatch": {"n": 9}}}, document),
            doc! {"_id": 1},
        );
        assert_eq!(
            parse_error(doc! {"a.b": {"$elemMatch": {"n": 1}}}).errmsg,
            "Cannot use $elemMatch projection on a nested field."
        );
    }

    #[test]
    fn meta_resolves_allowed_names_only() {
        let projection =
            Projection::parse(&doc! {"m": {"$meta": "lastModified"}}, &["lastModified"])
                .expect("valid");
        let output = projection.apply(&doc! {"_id": 1, "a": 1}, &|name| {
            Bson::String(name.to_uppercase())
        });
        assert_same(output, doc! {"_id": 1, "a": 1, "m": "LASTMODIFIED"});
        assert_eq!(
            parse_error(doc! {"m": {"$meta": "textScore"}}).errmsg,
            "Unsupported argument to $meta: textScore"
        );
    }

    #[test]
    fn positional_projection_uses_match_position() {
        let projection = Projection::parse(&doc! {"e.$": 1}, &[]).expect("valid");
        assert!(projection.has_positional());
        let output = projection
            .apply_find(&sample(), &no_meta, Some(1), None)
            .expect("applies");
        assert_same(output, doc! {"_id": 1, "e": [2]});
        assert!(projection
            .apply_find(&sample(), &no_meta, None, None)
            .is_err());
    }

    #[test]
    fn find_projection_expressions_are_evaluated_per_document() {
        let projection = Projection::parse(
            &doc! {"sum": {"$add": ["$a", "$b.c"]}, "first": {"$slice": ["$e", 1]}},
            &[],
        )
        .unwrap();
        let shaped = projection
            .apply_find(&sample(), &|_| Bson::Null, None, None)
            .unwrap();
        assert_same(shaped, doc! {"_id": 1, "sum": 3, "first": [1]});
        // Unknown operators are the expression engine's 168; exclusions take no expression.
        assert_eq!(
            parse_error(doc! {"a": {"$nope": 1}}).code,
            ErrorCode::InvalidPipelineOperator
        );
        assert_eq!(
            parse_error(doc! {"a": 0, "b": {"$add": [1, 2]}}).code,
            ErrorCode::BadValue
        );
    }
}
