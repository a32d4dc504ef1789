//! The aggregation expression language: parsing `$`-operator documents, field paths
//! (`"$a.b"`), variables (`"$$ROOT"`, `"$$NOW"`, `"$$REMOVE"`, `$let`/`$map`/`$filter` names)
//! and literals into an [`Expr`] tree, and evaluating it against one document.
//!
//! Invariants:
//! - A value is `Option<Bson>`: `None` is mongod's "missing" (a path that names nothing, or
//!   `$$REMOVE`); callers omit missing values from the documents they build.
//! - Field paths follow mongod's `ExpressionFieldPath`: documents are walked by name; an array
//!   met with path left maps the rest of the path over its *document* elements, dropping
//!   missing results (so `"$a.b"` over `[{b: 1}, {}, 2]` is `[1]`).
//! - Comparisons use [`compare_values`] with missing ordered as undefined (below null), so
//!   `{$eq: ["$missing", null]}` is false, as in mongod. Truthiness is mongod's `coerceToBool`.
//! - Numeric results follow mongod's type promotion: int op int stays int unless it overflows
//!   (then long; long overflow becomes double), any double makes a double, any decimal a decimal.
//! - Parsing rejects what mongod rejects (168 for unknown operators, NotImplemented for known
//!   ones this server lacks); evaluation errors carry mongod's codes. Nothing here panics on
//!   user data, performs I/O, or keeps state between evaluations.

use std::cmp::Ordering;

use bson::{oid::ObjectId, Bson, DateTime, Decimal128, Document};

use super::group::{AccumulatorOp, AccumulatorState};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::limits::{check_field_path_length, MAX_FIELD_PATH_COMPONENTS};
use crate::query::collation::Collation;
use crate::query::compare::{compare_values_with, values_equal_with};
use crate::query::display::{type_name, value_string};
use crate::query::numeric::{apply_arithmetic, digit_count, pow10, Arithmetic, Decimal, Number};

/// An evaluated value; `None` is missing.
pub(crate) type Value = Option<Bson>;

fn fail(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// mongod's type name for a possibly missing value.
pub(crate) fn value_type_name(value: &Value) -> &'static str {
    value.as_ref().map_or("missing", type_name)
}

/// Null, undefined or missing: what most operators turn into a null result.
pub(crate) fn is_nullish(value: &Value) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// mongod's `coerceToBool`.
pub(crate) fn truthy(value: &Value) -> bool {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => false,
        Some(Bson::Boolean(flag)) => *flag,
        Some(other) => Number::from_bson(other).is_none_or(|number| !number.is_zero()),
    }
}

/// Orders two possibly missing values; missing sorts as undefined.
pub(crate) fn compare_optional(a: &Value, b: &Value, collation: Option<&Collation>) -> Ordering {
    let undefined = Bson::Undefined;
    compare_values_with(
        a.as_ref().unwrap_or(&undefined),
        b.as_ref().unwrap_or(&undefined),
        collation,
    )
}

/// Bytes one evaluation may copy out of the document, its variables and its literals: the size
/// of the largest document mongod handles (`BSONObjMaxInternalSize`). Every value an expression
/// builds is made of such copies, so this bounds them all, however the operators nest: without
/// it `$let`/`$map` over `[ "$$x", "$$x" ]` doubles a value per level and exhausts memory.
pub(crate) const MAX_COPIED_BYTES: usize = 16 * 1024 * 1024 + 16 * 1024;

/// Evaluation environment: `$$ROOT`/`$$CURRENT` (the same document here), `$$NOW`, and the
/// user variables bound by enclosing `$let`/`$map`/`$filter` (innermost last).
pub(crate) struct Vars<'a> {
    root: &'a Document,
    now: DateTime,
    /// The collation string comparisons use (`None`: byte order).
    collation: Option<&'a Collation>,
    /// Reading the document is an error (a command variable's value is being computed).
    reads_forbidden: bool,
    bindings: Vec<(String, Bson)>,
    /// What this evaluation has copied so far, against [`MAX_COPIED_BYTES`].
    copied_bytes: usize,
}

impl<'a> Vars<'a> {
    pub(crate) fn new(root: &'a Document, now: DateTime) -> Vars<'a> {
        Vars {
            root,
            now,
            collation: None,
            reads_forbidden: false,
            bindings: Vec::new(),
            copied_bytes: 0,
        }
    }

    /// Counts a copied value against [`MAX_COPIED_BYTES`].
    fn copied(&mut self, value: Value) -> CommandResult<Value> {
        if let Some(value) = &value {
            self.copied_bytes = self.copied_bytes.saturating_add(value_bytes(value));
            if self.copied_bytes > MAX_COPIED_BYTES {
                return Err(fail(
                    ErrorCode::BSONObjectTooLarge,
                    format!("expression evaluation copies more than the maximum of {MAX_COPIED_BYTES} bytes"),
                ));
            }
        }
        Ok(value)
    }

    fn lookup(&self, name: &str) -> Option<&Bson> {
        self.bindings
            .iter()
            .rev()
            .find(|(bound, _)| bound == name)
            .map(|(_, value)| value)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Variable {
    Root,
    Now,
    Remove,
    User(String),
    /// A command variable (`let`, `c`): its value, fixed when the expression was parsed.
    Command(Option<Bson>),
}

/// Simple operators: evaluate every argument, then combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
    Ceil,
    Floor,
    Round,
    Trunc,
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    Cmp,
    Not,
    Concat,
    ToLower,
    ToUpper,
    SubstrCP,
    StrLenCP,
    Split,
    Size,
    ArrayElemAt,
    In,
    IsArray,
    Slice,
    ConcatArrays,
    First,
    Last,
    ReverseArray,
    Type,
    MergeObjects,
    Accumulate(AccumulatorOp),
}

/// Lazily evaluated operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lazy {
    And,
    Or,
    Cond,
    IfNull,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DatePart {
    Year,
    Month,
    DayOfMonth,
    Hour,
    Minute,
    Second,
    Millisecond,
    DayOfWeek,
    DayOfYear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrimSide {
    Both,
    Start,
    End,
}

/// Target types of `$convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
    Decimal,
    /// A real BSON type `$convert` cannot produce (its name, for the message).
    Unsupported(&'static str),
}

/// A parsed aggregation expression.
#[derive(Clone, Debug)]
pub(crate) enum Expr {
    Literal(Bson),
    /// `"$a.b"`, relative to `$$CURRENT`.
    Field(Vec<String>),
    /// `"$$name.a.b"`.
    Variable(Variable, Vec<String>),
    /// `{a: expr, ...}`: builds a document, omitting missing values.
    Object(Vec<(String, Expr)>),
    Array(Vec<Expr>),
    Op(Op, Vec<Expr>),
    Lazy(Lazy, Vec<Expr>),
    Switch {
        branches: Vec<(Expr, Expr)>,
        default: Option<Box<Expr>>,
    },
    Filter {
        input: Box<Expr>,
        name: String,
        cond: Box<Expr>,
        limit: Option<Box<Expr>>,
    },
    Map {
        input: Box<Expr>,
        name: String,
        body: Box<Expr>,
    },
    Let {
        bindings: Vec<(String, Expr)>,
        body: Box<Expr>,
    },
    Convert {
        input: Box<Expr>,
        to: Box<Expr>,
        on_error: Option<Box<Expr>>,
        on_null: Option<Box<Expr>>,
    },
    Trim {
        side: TrimSide,
        input: Box<Expr>,
        chars: Option<Box<Expr>>,
    },
    DatePart {
        part: DatePart,
        date: Box<Expr>,
        timezone: Option<Box<Expr>>,
    },
    DateToString {
        date: Box<Expr>,
        format: Option<Box<Expr>>,
        timezone: Option<Box<Expr>>,
        on_null: Option<Box<Expr>>,
    },
    GetField {
        field: Box<Expr>,
        input: Option<Box<Expr>>,
    },
    /// `$setField` (`value` given) and `$unsetField` (`value: None`): `input` with `field` set
    /// in place or appended, or removed (also when `value` is missing, `$$REMOVE`).
    SetField {
        field: String,
        input: Box<Expr>,
        value: Option<Box<Expr>>,
    },
}

/// User variable names in scope while parsing (to reject undefined variables as mongod does).
#[derive(Default)]
struct Scope {
    names: Vec<String>,
}

impl Expr {
    /// Parses an expression (a literal, `"$path"`, `"$$var"`, an operator or an object of
    /// expressions).
    pub(crate) fn parse(value: &Bson) -> CommandResult<Expr> {
        parse(value, &mut Scope::default())
    }

    /// Whether `value` is a `"$path"` string (what `$sortByCount` accepts besides operators).
    pub(crate) fn is_field_path(value: &Bson) -> bool {
        matches!(value, Bson::String(text) if text.starts_with('$') && !text.starts_with("$$"))
    }

    /// [`Expr::evaluate_collated`] at a pipeline run's `$$NOW`, under its collation.
    pub(crate) fn evaluate_in(
        &self,
        root: &Document,
        context: &crate::query::pipeline::PipelineContext,
    ) -> CommandResult<Value> {
        self.evaluate_collated(root, context.now, context.collation.as_deref())
    }

    /// Evaluates an expression that may read no document (a command variable's value): a field
    /// path or `$$ROOT` fails with mongod's 4890500.
    pub(crate) fn evaluate_constant(&self, now: DateTime) -> CommandResult<Value> {
        let empty = Document::new();
        let mut vars = Vars::new(&empty, now);
        vars.reads_forbidden = true;
        evaluate(self, &mut vars)
    }

    /// Evaluates with `root` as `$$ROOT`/`$$CURRENT`, string comparisons under `collation`.
    pub(crate) fn evaluate_collated(
        &self,
        root: &Document,
        now: DateTime,
        collation: Option<&Collation>,
    ) -> CommandResult<Value> {
        let mut vars = Vars::new(root, now);
        vars.collation = collation;
        evaluate(self, &mut vars)
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing.

fn validate_field_name(name: &str) -> CommandResult<()> {
    if name.is_empty() {
        return Err(fail(
            ErrorCode::Location15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if name.starts_with('$') {
        return Err(fail(
            ErrorCode::Location16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(())
}

fn parse_path(path: &str) -> CommandResult<Vec<String>> {
    check_field_path_length(path, MAX_FIELD_PATH_COMPONENTS, ErrorCode::Overflow)?;
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    for part in &parts {
        validate_field_name(part)?;
    }
    Ok(parts)
}

/// mongod's user variable name rule: a lowercase ASCII letter or non-ASCII character first,
/// then letters, digits and `_`.
pub(crate) fn validate_variable_name(name: &str) -> CommandResult<()> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err(fail(ErrorCode::Location16869, "empty variable name"));
    };
    if first.is_ascii() && !first.is_ascii_lowercase() {
        return Err(fail(
            ErrorCode::Location16870,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()) {
        return Err(fail(
            ErrorCode::Location16871,
            format!("'{name}' contains an invalid character for a variable name"),
        ));
    }
    Ok(())
}

fn parse_string(text: &str, scope: &Scope) -> CommandResult<Expr> {
    if let Some(rest) = text.strip_prefix("$$") {
        let (name, path) = match rest.split_once('.') {
            Some((name, path)) => (name, parse_path(path)?),
            None => (rest, Vec::new()),
        };
        let variable = match name {
            "" => return Err(fail(ErrorCode::Location16869, "empty variable name")),
            "ROOT" | "CURRENT" => Variable::Root,
            "NOW" => Variable::Now,
            "REMOVE" => Variable::Remove,
            "CLUSTER_TIME" | "USER_ROLES" | "SEARCH_META" => {
                return Err(fail(
                    ErrorCode::NotImplemented,
                    format!("$${name} is not supported by this server"),
                ))
            }
            user if scope.names.iter().any(|bound| bound == user) => {
                Variable::User(user.to_string())
            }
            other => match crate::query::variables::lookup(other) {
                Some(value) => Variable::Command(value),
                None => {
                    return Err(fail(
                        ErrorCode::Location17276,
                        format!("Use of undefined variable: {other}"),
                    ))
                }
            },
        };
        return Ok(Expr::Variable(variable, path));
    }
    if let Some(path) = text.strip_prefix('$') {
        if path.is_empty() {
            return Err(fail(
                ErrorCode::Location16872,
                "'$' by itself is not a valid FieldPath",
            ));
        }
        return Ok(Expr::Field(parse_path(path)?));
    }
    Ok(Expr::Literal(Bson::String(text.to_string())))
}

fn parse(value: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    match value {
        Bson::String(text) => parse_string(text, scope),
        Bson::Array(items) => Ok(Expr::Array(
            items
                .iter()
                .map(|item| parse(item, scope))
                .collect::<CommandResult<_>>()?,
        )),
        Bson::Document(document) => parse_document(document, scope),
        other => Ok(Expr::Literal(other.clone())),
    }
}

fn parse_document(document: &Document, scope: &mut Scope) -> CommandResult<Expr> {
    let Some((first, operand)) = document.iter().next() else {
        return Ok(Expr::Object(Vec::new()));
    };
    if first.starts_with('$') {
        if document.len() != 1 {
            return Err(fail(
                ErrorCode::Location15983,
                format!(
                    "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}",
                    document.len(),
                    value_string(&Bson::Document(document.clone()))
                ),
            ));
        }
        return parse_operator(first, operand, scope);
    }
    let mut fields = Vec::with_capacity(document.len());
    for (name, value) in document {
        validate_field_name(name)?;
        if name.contains('.') {
            return Err(fail(
                ErrorCode::Location16412,
                "FieldPath field names may not contain '.'.",
            ));
        }
        fields.push((name.clone(), parse(value, scope)?));
    }
    Ok(Expr::Object(fields))
}

/// An operator's argument list: an array is the list, anything else one argument.
fn parse_arguments(operand: &Bson, scope: &mut Scope) -> CommandResult<Vec<Expr>> {
    match operand {
        Bson::Array(items) => items.iter().map(|item| parse(item, scope)).collect(),
        other => Ok(vec![parse(other, scope)?]),
    }
}

fn check_arity(name: &str, count: usize, min: usize, max: Option<usize>) -> CommandResult<()> {
    match max {
        Some(max) if min == max && count != min => Err(fail(
            ErrorCode::Location16020,
            format!("Expression {name} takes exactly {min} arguments. {count} were passed in."),
        )),
        Some(max) if count < min || count > max => Err(fail(
            ErrorCode::Location28667,
            format!("Expression {name} takes at least {min} arguments, and at most {max}, but {count} were passed in."),
        )),
        None if count < min => Err(fail(
            ErrorCode::Location16020,
            format!("Expression {name} takes at least {min} arguments. {count} were passed in."),
        )),
        _ => Ok(()),
    }
}

/// The arity of each simple operator: (min, max); `None` is unbounded.
fn simple_operator(name: &str) -> Option<(Op, usize, Option<usize>)> {
    use Op::*;
    Some(match name {
        "$add" => (Add, 0, None),
        "$subtract" => (Subtract, 2, Some(2)),
        "$multiply" => (Multiply, 0, None),
        "$divide" => (Divide, 2, Some(2)),
        "$mod" => (Mod, 2, Some(2)),
        "$abs" => (Abs, 1, Some(1)),
        "$ceil" => (Ceil, 1, Some(1)),
        "$floor" => (Floor, 1, Some(1)),
        "$round" => (Round, 1, Some(2)),
        "$trunc" => (Trunc, 1, Some(2)),
        "$eq" => (Eq, 2, Some(2)),
        "$ne" => (Ne, 2, Some(2)),
        "$gt" => (Gt, 2, Some(2)),
        "$gte" => (Gte, 2, Some(2)),
        "$lt" => (Lt, 2, Some(2)),
        "$lte" => (Lte, 2, Some(2)),
        "$cmp" => (Cmp, 2, Some(2)),
        "$not" => (Not, 1, Some(1)),
        "$concat" => (Concat, 0, None),
        "$toLower" => (ToLower, 1, Some(1)),
        "$toUpper" => (ToUpper, 1, Some(1)),
        "$substrCP" => (SubstrCP, 3, Some(3)),
        "$strLenCP" => (StrLenCP, 1, Some(1)),
        "$split" => (Split, 2, Some(2)),
        "$size" => (Size, 1, Some(1)),
        "$arrayElemAt" => (ArrayElemAt, 2, Some(2)),
        "$in" => (In, 2, Some(2)),
        "$isArray" => (IsArray, 1, Some(1)),
        "$slice" => (Slice, 2, Some(3)),
        "$concatArrays" => (ConcatArrays, 0, None),
        "$first" => (First, 1, Some(1)),
        "$last" => (Last, 1, Some(1)),
        "$reverseArray" => (ReverseArray, 1, Some(1)),
        "$type" => (Type, 1, Some(1)),
        "$mergeObjects" => (MergeObjects, 0, None),
        "$sum" => (Accumulate(AccumulatorOp::Sum), 0, None),
        "$avg" => (Accumulate(AccumulatorOp::Avg), 0, None),
        "$min" => (Accumulate(AccumulatorOp::Min), 0, None),
        "$max" => (Accumulate(AccumulatorOp::Max), 0, None),
        _ => return None,
    })
}

/// Shorthands for `$convert` without `onError`/`onNull`.
fn conversion_shorthand(name: &str) -> Option<&'static str> {
    Some(match name {
        "$toString" => "string",
        "$toInt" => "int",
        "$toLong" => "long",
        "$toDouble" => "double",
        "$toBool" => "bool",
        "$toDecimal" => "decimal",
        "$toObjectId" => "objectId",
        "$toDate" => "date",
        _ => return None,
    })
}

fn date_part(name: &str) -> Option<DatePart> {
    Some(match name {
        "$year" => DatePart::Year,
        "$month" => DatePart::Month,
        "$dayOfMonth" => DatePart::DayOfMonth,
        "$hour" => DatePart::Hour,
        "$minute" => DatePart::Minute,
        "$second" => DatePart::Second,
        "$millisecond" => DatePart::Millisecond,
        "$dayOfWeek" => DatePart::DayOfWeek,
        "$dayOfYear" => DatePart::DayOfYear,
        _ => return None,
    })
}

/// Expression operators mongod has and this server does not implement.
const UNIMPLEMENTED_OPERATORS: &[&str] = &[
    "$acos",
    "$acosh",
    "$allElementsTrue",
    "$anyElementTrue",
    "$arrayToObject",
    "$asin",
    "$asinh",
    "$atan",
    "$atan2",
    "$atanh",
    "$binarySize",
    "$bitAnd",
    "$bitNot",
    "$bitOr",
    "$bitXor",
    "$bsonSize",
    "$cos",
    "$cosh",
    "$dateAdd",
    "$dateDiff",
    "$dateFromParts",
    "$dateFromString",
    "$dateSubtract",
    "$dateToParts",
    "$dateTrunc",
    "$degreesToRadians",
    "$exp",
    "$firstN",
    "$function",
    "$indexOfArray",
    "$indexOfBytes",
    "$indexOfCP",
    "$isNumber",
    "$isoDayOfWeek",
    "$isoWeek",
    "$isoWeekYear",
    "$lastN",
    "$ln",
    "$log",
    "$log10",
    "$maxN",
    "$median",
    "$meta",
    "$minN",
    "$objectToArray",
    "$percentile",
    "$pow",
    "$radiansToDegrees",
    "$rand",
    "$range",
    "$reduce",
    "$regexFind",
    "$regexFindAll",
    "$regexMatch",
    "$replaceAll",
    "$replaceOne",
    "$sampleRate",
    "$setDifference",
    "$setEquals",
    "$setIntersection",
    "$setIsSubset",
    "$setUnion",
    "$sin",
    "$sinh",
    "$sortArray",
    "$sqrt",
    "$stdDevPop",
    "$stdDevSamp",
    "$strcasecmp",
    "$strLenBytes",
    "$substr",
    "$substrBytes",
    "$tan",
    "$tanh",
    "$toHashedIndexKey",
    "$tsIncrement",
    "$tsSecond",
    "$week",
    "$zip",
];

fn not_implemented_operator(name: &str) -> CommandError {
    fail(
        ErrorCode::NotImplemented,
        format!("expression {name} is not supported by this server"),
    )
}

/// The named arguments of an object-form operator, rejecting unknown names.
fn named_arguments<'a>(
    operand: &'a Bson,
    allowed: &[&str],
    not_object: impl FnOnce() -> CommandError,
    unknown: impl Fn(&str) -> CommandError,
) -> CommandResult<Vec<(&'a str, &'a Bson)>> {
    let Bson::Document(document) = operand else {
        return Err(not_object());
    };
    let mut found = Vec::with_capacity(document.len());
    for (name, value) in document {
        if !allowed.contains(&name.as_str()) {
            return Err(unknown(name));
        }
        found.push((name.as_str(), value));
    }
    Ok(found)
}

fn find_argument<'a>(arguments: &[(&str, &'a Bson)], name: &str) -> Option<&'a Bson> {
    arguments
        .iter()
        .find(|(found, _)| *found == name)
        .map(|(_, value)| *value)
}

fn parse_optional(value: Option<&Bson>, scope: &mut Scope) -> CommandResult<Option<Box<Expr>>> {
    value
        .map(|value| parse(value, scope).map(Box::new))
        .transpose()
}

fn parse_operator(name: &str, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    if let Some((op, min, max)) = simple_operator(name) {
        let arguments = parse_arguments(operand, scope)?;
        check_arity(name, arguments.len(), min, max)?;
        return Ok(Expr::Op(op, arguments));
    }
    if let Some(target) = conversion_shorthand(name) {
        let arguments = parse_arguments(operand, scope)?;
        check_arity(name, arguments.len(), 1, Some(1))?;
        let input = arguments.into_iter().next().map(Box::new);
        return input
            .map(|input| Expr::Convert {
                input,
                to: Box::new(Expr::Literal(Bson::String(target.to_string()))),
                on_error: None,
                on_null: None,
            })
            .ok_or_else(|| CommandError::internal("conversion argument vanished"));
    }
    if let Some(part) = date_part(name) {
        return parse_date_part(name, part, operand, scope);
    }
    match name {
        "$literal" => Ok(Expr::Literal(operand.clone())),
        "$and" | "$or" => {
            let lazy = if name == "$and" { Lazy::And } else { Lazy::Or };
            Ok(Expr::Lazy(lazy, parse_arguments(operand, scope)?))
        }
        "$ifNull" => {
            let arguments = parse_arguments(operand, scope)?;
            if arguments.len() < 2 {
                return Err(fail(
                    ErrorCode::Location1257300,
                    format!(
                        "$ifNull needs at least two arguments, had: {}",
                        arguments.len()
                    ),
                ));
            }
            Ok(Expr::Lazy(Lazy::IfNull, arguments))
        }
        "$cond" => parse_cond(operand, scope),
        "$switch" => parse_switch(operand, scope),
        "$filter" => parse_filter(operand, scope),
        "$map" => parse_map(operand, scope),
        "$let" => parse_let(operand, scope),
        "$convert" => parse_convert(operand, scope),
        "$trim" | "$ltrim" | "$rtrim" => {
            let side = match name {
                "$ltrim" => TrimSide::Start,
                "$rtrim" => TrimSide::End,
                _ => TrimSide::Both,
            };
            parse_trim(name, side, operand, scope)
        }
        "$dateToString" => parse_date_to_string(operand, scope),
        "$getField" => parse_get_field(operand, scope),
        "$setField" | "$unsetField" => parse_set_field(name, operand, scope),
        other if UNIMPLEMENTED_OPERATORS.contains(&other) => Err(not_implemented_operator(other)),
        other => Err(fail(
            ErrorCode::InvalidPipelineOperator,
            format!("Unrecognized expression '{other}'"),
        )),
    }
}

fn parse_cond(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    if let Bson::Document(document) = operand {
        let mut parts: [Option<Expr>; 3] = [None, None, None];
        for (name, value) in document {
            let slot = match name.as_str() {
                "if" => 0,
                "then" => 1,
                "else" => 2,
                other => {
                    return Err(fail(
                        ErrorCode::Location17083,
                        format!("Unrecognized parameter to $cond: {other}"),
                    ))
                }
            };
            parts[slot] = Some(parse(value, scope)?);
        }
        let [condition, then, otherwise] = parts;
        let condition = condition
            .ok_or_else(|| fail(ErrorCode::Location17080, "Missing 'if' parameter to $cond"))?;
        let then = then.ok_or_else(|| {
            fail(
                ErrorCode::Location17081,
                "Missing 'then' parameter to $cond",
            )
        })?;
        let otherwise = otherwise.ok_or_else(|| {
            fail(
                ErrorCode::Location17082,
                "Missing 'else' parameter to $cond",
            )
        })?;
        return Ok(Expr::Lazy(Lazy::Cond, vec![condition, then, otherwise]));
    }
    let arguments = parse_arguments(operand, scope)?;
    check_arity("$cond", arguments.len(), 3, Some(3))?;
    Ok(Expr::Lazy(Lazy::Cond, arguments))
}

fn parse_switch(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let Bson::Document(document) = operand else {
        return Err(fail(
            ErrorCode::Location40060,
            format!(
                "$switch requires an object as an argument, found: {}",
                type_name(operand)
            ),
        ));
    };
    let mut branches = Vec::new();
    let mut default = None;
    for (name, value) in document {
        match name.as_str() {
            "branches" => {
                let Bson::Array(items) = value else {
                    return Err(fail(
                        ErrorCode::Location40061,
                        format!(
                            "$switch expected an array for 'branches', found: {}",
                            type_name(value)
                        ),
                    ));
                };
                for item in items {
                    let Bson::Document(branch) = item else {
                        return Err(fail(
                            ErrorCode::Location40062,
                            format!(
                                "$switch expected each branch to be an object, found: {}",
                                type_name(item)
                            ),
                        ));
                    };
                    let (mut case, mut then) = (None, None);
                    for (key, part) in branch {
                        match key.as_str() {
                            "case" => case = Some(parse(part, scope)?),
                            "then" => then = Some(parse(part, scope)?),
                            other => {
                                return Err(fail(
                                    ErrorCode::Location40063,
                                    format!(
                                        "$switch found an unknown argument to a branch: {other}"
                                    ),
                                ))
                            }
                        }
                    }
                    let case = case.ok_or_else(|| {
                        fail(
                            ErrorCode::Location40064,
                            "$switch requires each branch have a 'case' expression",
                        )
                    })?;
                    let then = then.ok_or_else(|| {
                        fail(
                            ErrorCode::Location40065,
                            "$switch requires each branch have a 'then' expression.",
                        )
                    })?;
                    branches.push((case, then));
                }
            }
            "default" => default = Some(Box::new(parse(value, scope)?)),
            other => {
                return Err(fail(
                    ErrorCode::Location40067,
                    format!("$switch found an unknown argument: {other}"),
                ))
            }
        }
    }
    if branches.is_empty() {
        return Err(fail(
            ErrorCode::Location40068,
            "$switch requires at least one branch.",
        ));
    }
    Ok(Expr::Switch { branches, default })
}

/// Parses `as` (default `this`) and the body expressions of `$filter`/`$map` with the
/// variable in scope.
fn variable_name(value: Option<&Bson>, default: &str) -> CommandResult<String> {
    match value {
        None => Ok(default.to_string()),
        Some(Bson::String(name)) => {
            validate_variable_name(name)?;
            Ok(name.clone())
        }
        Some(other) => Err(fail(
            ErrorCode::Location16866,
            format!(
                "empty variable names are not allowed, and 'as' must be a string, found {}",
                type_name(other)
            ),
        )),
    }
}

fn with_variable<T>(
    scope: &mut Scope,
    name: &str,
    body: impl FnOnce(&mut Scope) -> CommandResult<T>,
) -> CommandResult<T> {
    scope.names.push(name.to_string());
    let result = body(scope);
    scope.names.pop();
    result
}

fn parse_filter(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "as", "cond", "limit"],
        || {
            fail(
                ErrorCode::Location28646,
                "$filter only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location28647,
                format!("Unrecognized parameter to $filter: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location28648,
            "Missing 'input' parameter to $filter",
        )
    })?;
    let cond = find_argument(&arguments, "cond").ok_or_else(|| {
        fail(
            ErrorCode::Location28650,
            "Missing 'cond' parameter to $filter",
        )
    })?;
    let name = variable_name(find_argument(&arguments, "as"), "this")?;
    let input = Box::new(parse(input, scope)?);
    let limit = parse_optional(find_argument(&arguments, "limit"), scope)?;
    let cond = Box::new(with_variable(scope, &name, |scope| parse(cond, scope))?);
    Ok(Expr::Filter {
        input,
        name,
        cond,
        limit,
    })
}

fn parse_map(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "as", "in"],
        || {
            fail(
                ErrorCode::Location16878,
                "$map only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location16879,
                format!("Unrecognized parameter to $map: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location16880,
            "Missing 'input' parameter to $map",
        )
    })?;
    let body = find_argument(&arguments, "in")
        .ok_or_else(|| fail(ErrorCode::Location16882, "Missing 'in' parameter to $map"))?;
    let name = variable_name(find_argument(&arguments, "as"), "this")?;
    let input = Box::new(parse(input, scope)?);
    let body = Box::new(with_variable(scope, &name, |scope| parse(body, scope))?);
    Ok(Expr::Map { input, name, body })
}

fn parse_let(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["vars", "in"],
        || {
            fail(
                ErrorCode::Location16874,
                "$let only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location16875,
                format!("Unrecognized parameter to $let: {other}"),
            )
        },
    )?;
    let vars = find_argument(&arguments, "vars")
        .ok_or_else(|| fail(ErrorCode::Location16876, "Missing 'vars' parameter to $let"))?;
    let body = find_argument(&arguments, "in")
        .ok_or_else(|| fail(ErrorCode::Location16877, "Missing 'in' parameter to $let"))?;
    let Bson::Document(vars) = vars else {
        return Err(fail(
            ErrorCode::Location10065,
            format!(
                "invalid parameter: expected an object (vars), found {}",
                type_name(vars)
            ),
        ));
    };
    let mut bindings = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        validate_variable_name(name)?;
        bindings.push((name.clone(), parse(value, scope)?));
    }
    let depth = scope.names.len();
    scope
        .names
        .extend(bindings.iter().map(|(name, _)| name.clone()));
    let body = parse(body, scope);
    scope.names.truncate(depth);
    Ok(Expr::Let {
        bindings,
        body: Box::new(body?),
    })
}

fn parse_convert(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &[
            "input",
            "to",
            "onError",
            "onNull",
            "format",
            "byteOrder",
            "base",
        ],
        || {
            fail(
                ErrorCode::FailedToParse,
                format!(
                    "$convert expects an object of named arguments but found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::FailedToParse,
                format!("$convert found an unknown argument: {other}"),
            )
        },
    )?;
    for unsupported in ["format", "byteOrder", "base"] {
        if find_argument(&arguments, unsupported).is_some() {
            return Err(fail(
                ErrorCode::NotImplemented,
                format!("$convert option '{unsupported}' is not supported by this server"),
            ));
        }
    }
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::FailedToParse,
            "Missing 'input' parameter to $convert",
        )
    })?;
    let to = find_argument(&arguments, "to").ok_or_else(|| {
        fail(
            ErrorCode::FailedToParse,
            "Missing 'to' parameter to $convert",
        )
    })?;
    Ok(Expr::Convert {
        input: Box::new(parse(input, scope)?),
        to: Box::new(parse(to, scope)?),
        on_error: parse_optional(find_argument(&arguments, "onError"), scope)?,
        on_null: parse_optional(find_argument(&arguments, "onNull"), scope)?,
    })
}

fn parse_trim(
    name: &str,
    side: TrimSide,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["input", "chars"],
        || {
            fail(
                ErrorCode::Location50696,
                format!(
                    "{name} only supports an object as an argument, found: {}",
                    type_name(operand)
                ),
            )
        },
        |other| {
            fail(
                ErrorCode::Location50694,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let input = find_argument(&arguments, "input").ok_or_else(|| {
        fail(
            ErrorCode::Location50695,
            format!("{name} requires an 'input' parameter"),
        )
    })?;
    Ok(Expr::Trim {
        side,
        input: Box::new(parse(input, scope)?),
        chars: parse_optional(find_argument(&arguments, "chars"), scope)?,
    })
}

fn parse_date_part(
    name: &str,
    part: DatePart,
    operand: &Bson,
    scope: &mut Scope,
) -> CommandResult<Expr> {
    if let Bson::Document(document) = operand {
        let is_object_form = document
            .keys()
            .next()
            .is_some_and(|key| !key.starts_with('$'));
        if is_object_form {
            let arguments = named_arguments(
                operand,
                &["date", "timezone"],
                || CommandError::internal("date operand must be an object"),
                |other| {
                    fail(
                        ErrorCode::Location40535,
                        format!("unrecognized option to {name}: \"{other}\""),
                    )
                },
            )?;
            let date = find_argument(&arguments, "date").ok_or_else(|| {
                fail(
                    ErrorCode::Location40539,
                    format!(
                        "missing 'date' argument to {name}, provided: {}",
                        value_string(operand)
                    ),
                )
            })?;
            return Ok(Expr::DatePart {
                part,
                date: Box::new(parse(date, scope)?),
                timezone: parse_optional(find_argument(&arguments, "timezone"), scope)?,
            });
        }
    }
    let arguments = parse_arguments(operand, scope)?;
    check_arity(name, arguments.len(), 1, Some(1))?;
    let date = arguments
        .into_iter()
        .next()
        .ok_or_else(|| CommandError::internal("date argument vanished"))?;
    Ok(Expr::DatePart {
        part,
        date: Box::new(date),
        timezone: None,
    })
}

fn parse_date_to_string(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let arguments = named_arguments(
        operand,
        &["date", "format", "timezone", "onNull"],
        || {
            fail(
                ErrorCode::Location18629,
                "$dateToString only supports an object as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location18534,
                format!("Unrecognized argument to $dateToString: {other}"),
            )
        },
    )?;
    let date = find_argument(&arguments, "date").ok_or_else(|| {
        fail(
            ErrorCode::Location18628,
            "Missing 'date' parameter to $dateToString",
        )
    })?;
    Ok(Expr::DateToString {
        date: Box::new(parse(date, scope)?),
        format: parse_optional(find_argument(&arguments, "format"), scope)?,
        timezone: parse_optional(find_argument(&arguments, "timezone"), scope)?,
        on_null: parse_optional(find_argument(&arguments, "onNull"), scope)?,
    })
}

fn parse_get_field(operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    if let Bson::String(field) = operand {
        return Ok(Expr::GetField {
            field: Box::new(Expr::Literal(Bson::String(field.clone()))),
            input: None,
        });
    }
    // The shorthand with an expression for the field (`{$getField: {$literal: "$bin"}}`, as the
    // documentation reads a `$`-prefixed field): an object led by an operator.
    if let Bson::Document(document) = operand {
        if document
            .keys()
            .next()
            .is_some_and(|key| key.starts_with('$'))
        {
            return Ok(Expr::GetField {
                field: Box::new(parse(operand, scope)?),
                input: None,
            });
        }
    }
    let arguments = named_arguments(
        operand,
        &["field", "input"],
        || {
            fail(
                ErrorCode::Location3041703,
                "$getField requires an object or a string as its argument",
            )
        },
        |other| {
            fail(
                ErrorCode::Location3041701,
                format!("$getField found an unknown argument: {other}"),
            )
        },
    )?;
    let field = find_argument(&arguments, "field").ok_or_else(|| {
        fail(
            ErrorCode::Location3041702,
            "$getField requires 'field' to be specified",
        )
    })?;
    Ok(Expr::GetField {
        field: Box::new(parse(field, scope)?),
        input: parse_optional(find_argument(&arguments, "input"), scope)?,
    })
}

/// `$setField: {field, input, value}` / `$unsetField: {field, input}` with mongod's errors:
/// `field` must be a constant string (a literal, or `{$literal: "..."}` for names that start
/// with `$`).
fn parse_set_field(name: &str, operand: &Bson, scope: &mut Scope) -> CommandResult<Expr> {
    let setting = name == "$setField";
    let allowed: &[&str] = if setting {
        &["field", "input", "value"]
    } else {
        &["field", "input"]
    };
    let arguments = named_arguments(
        operand,
        allowed,
        || {
            fail(
                ErrorCode::Location4161100,
                format!("{name} only supports an object as its argument"),
            )
        },
        |other| {
            fail(
                ErrorCode::Location4161101,
                format!("{name} found an unknown argument: {other}"),
            )
        },
    )?;
    let required = |argument: &str, code: ErrorCode| {
        find_argument(&arguments, argument).ok_or_else(|| {
            fail(
                code,
                format!("{name} requires '{argument}' to be specified"),
            )
        })
    };
    let field = required("field", ErrorCode::Location4161102)?;
    let input = required("input", ErrorCode::Location4161109)?;
    let value = if setting {
        Some(required("value", ErrorCode::Location4161103)?)
    } else {
        None
    };
    let field = match field {
        Bson::String(text) if text.starts_with('$') => {
            return Err(fail(
                ErrorCode::Location4161108,
                format!("{name} requires 'field' to be a constant, but got a field path reference or variable: {text}; wrap it in $literal to use it as a field name"),
            ))
        }
        Bson::String(text) => text.clone(),
        Bson::Document(literal) if literal.len() == 1 && literal.contains_key("$literal") => {
            match literal.get("$literal") {
                Some(Bson::String(text)) => text.clone(),
                other => {
                    return Err(fail(
                        ErrorCode::Location4161107,
                        format!(
                            "{name} requires 'field' to evaluate to type String, but got {}",
                            other.map_or("missing", type_name)
                        ),
                    ))
                }
            }
        }
        Bson::Document(_) => {
            return Err(fail(
                ErrorCode::Location4161106,
                format!("{name} requires 'field' to evaluate to a constant, but got a non-constant argument"),
            ))
        }
        other => {
            return Err(fail(
                ErrorCode::Location4161107,
                format!("{name} requires 'field' to evaluate to type String, but got {}", type_name(other)),
            ))
        }
    };
    Ok(Expr::SetField {
        field,
        input: Box::new(parse(input, scope)?),
        value: value
            .map(|value| parse(value, scope).map(Box::new))
            .transpose()?,
    })
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

/// mongod's `ExpressionFieldPath::evaluatePath` over the remaining `parts` of a path.
fn walk_path(value: &Bson, parts: &[String]) -> Value {
    let Some((first, rest)) = parts.split_first() else {
        return Some(value.clone());
    };
    match value {
        Bson::Document(document) => walk_path(document.get(first)?, rest),
        Bson::Array(elements) => Some(Bson::Array(
            elements
                .iter()
                .filter(|element| matches!(element, Bson::Document(_)))
                .filter_map(|element| walk_path(element, parts))
                .collect(),
        )),
        _ => None,
    }
}

fn field_value(document: &Document, parts: &[String]) -> Value {
    let (first, rest) = parts.split_first()?;
    walk_path(document.get(first)?, rest)
}

fn evaluate_all(arguments: &[Expr], vars: &mut Vars) -> CommandResult<Vec<Value>> {
    arguments
        .iter()
        .map(|argument| evaluate(argument, vars))
        .collect()
}

/// The encoded size of a value, as an element would hold it (name excluded).
fn value_bytes(value: &Bson) -> usize {
    match value {
        Bson::Document(document) => crate::bsonutil::encoded_size(document),
        Bson::Array(items) => {
            // An index name is at most a few digits: count 8 bytes of framing per element.
            5 + items
                .iter()
                .map(|item| 8 + value_bytes(item))
                .sum::<usize>()
        }
        Bson::String(text) | Bson::Symbol(text) | Bson::JavaScriptCode(text) => 5 + text.len(),
        Bson::Binary(binary) => 5 + binary.bytes.len(),
        Bson::RegularExpression(regex) => 2 + regex.pattern.len() + regex.options.len(),
        Bson::JavaScriptCodeWithScope(code) => {
            9 + code.code.len() + crate::bsonutil::encoded_size(&code.scope)
        }
        _ => 16,
    }
}

fn evaluate(expr: &Expr, vars: &mut Vars) -> CommandResult<Value> {
    match expr {
        Expr::Literal(value) => vars.copied(Some(value.clone())),
        Expr::Field(_) | Expr::Variable(Variable::Root, _) if vars.reads_forbidden => {
            Err(crate::query::variables::reads_document())
        }
        Expr::Field(parts) => vars.copied(field_value(vars.root, parts)),
        Expr::Variable(variable, parts) => {
            let value = match variable {
                Variable::Root if parts.is_empty() => Some(Bson::Document(vars.root.clone())),
                Variable::Root => field_value(vars.root, parts),
                Variable::Now => walk_path(&Bson::DateTime(vars.now), parts),
                Variable::Remove => None,
                Variable::User(name) => walk_path(
                    vars.lookup(name).ok_or_else(|| {
                        CommandError::internal(format!("unbound variable {name}"))
                    })?,
                    parts,
                ),
                Variable::Command(value) => {
                    value.as_ref().and_then(|value| walk_path(value, parts))
                }
            };
            vars.copied(value)
        }
        Expr::Object(fields) => {
            let mut document = Document::new();
            for (name, field) in fields {
                if let Some(value) = evaluate(field, vars)? {
                    document.insert(name.clone(), value);
                }
            }
            Ok(Some(Bson::Document(document)))
        }
        Expr::Array(items) => {
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                // Missing elements become null inside array literals, as in mongod.
                values.push(evaluate(item, vars)?.unwrap_or(Bson::Null));
            }
            Ok(Some(Bson::Array(values)))
        }
        Expr::Op(op, arguments) => {
            let values = evaluate_all(arguments, vars)?;
            apply_op(*op, values, vars.collation)
        }
        Expr::Lazy(lazy, arguments) => evaluate_lazy(*lazy, arguments, vars),
        Expr::Switch { branches, default } => {
            for (case, then) in branches {
                if truthy(&evaluate(case, vars)?) {
                    return evaluate(then, vars);
                }
            }
            match default {
                Some(default) => evaluate(default, vars),
                None => Err(fail(
                    ErrorCode::Location40066,
                    "$switch could not find a matching branch for an input, and no default was specified.",
                )),
            }
        }
        Expr::Filter {
            input,
            name,
            cond,
            limit,
        } => evaluate_filter(input, name, cond, limit.as_deref(), vars),
        Expr::Map { input, name, body } => {
            let input = evaluate(input, vars)?;
            if is_nullish(&input) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::Array(elements)) = input else {
                return Err(fail(
                    ErrorCode::Location16883,
                    format!(
                        "input to $map must be an array not {}",
                        value_type_name(&input)
                    ),
                ));
            };
            let mut output = Vec::with_capacity(elements.len());
            for element in elements {
                vars.bindings.push((name.clone(), element));
                let value = evaluate(body, vars);
                vars.bindings.pop();
                output.push(value?.unwrap_or(Bson::Null));
            }
            Ok(Some(Bson::Array(output)))
        }
        Expr::Let { bindings, body } => {
            let mut values = Vec::with_capacity(bindings.len());
            for (name, binding) in bindings {
                values.push((name.clone(), evaluate(binding, vars)?.unwrap_or(Bson::Null)));
            }
            let depth = vars.bindings.len();
            vars.bindings.extend(values);
            let result = evaluate(body, vars);
            vars.bindings.truncate(depth);
            result
        }
        Expr::Convert {
            input,
            to,
            on_error,
            on_null,
        } => evaluate_convert(input, to, on_error.as_deref(), on_null.as_deref(), vars),
        Expr::Trim { side, input, chars } => evaluate_trim(*side, input, chars.as_deref(), vars),
        Expr::DatePart {
            part,
            date,
            timezone,
        } => {
            let date = evaluate(date, vars)?;
            let offset = timezone_offset(timezone.as_deref(), vars)?;
            if is_nullish(&date) {
                return Ok(Some(Bson::Null));
            }
            let Some(offset) = offset else {
                return Ok(Some(Bson::Null));
            };
            let millis = date_millis(&date)?.saturating_add(offset);
            Ok(Some(Bson::Int32(civil_part(millis, *part))))
        }
        Expr::DateToString {
            date,
            format,
            timezone,
            on_null,
        } => evaluate_date_to_string(
            date,
            format.as_deref(),
            timezone.as_deref(),
            on_null.as_deref(),
            vars,
        ),
        Expr::GetField { field, input } => {
            let field = evaluate(field, vars)?;
            let Some(Bson::String(field)) = field else {
                return Err(fail(
                    ErrorCode::Location5654602,
                    format!(
                        "$getField requires 'field' to evaluate to type String, but got {}",
                        value_type_name(&field)
                    ),
                ));
            };
            let input = match input {
                Some(input) => evaluate(input, vars)?,
                None => Some(Bson::Document(vars.root.clone())),
            };
            match input {
                None => Ok(None),
                Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
                Some(Bson::Document(document)) => Ok(document.get(&field).cloned()),
                Some(other) => Err(fail(
                    ErrorCode::Location3041704,
                    format!(
                        "$getField requires 'input' to evaluate to type Object, but got {}",
                        type_name(&other)
                    ),
                )),
            }
        }
        Expr::SetField {
            field,
            input,
            value,
        } => {
            let input = evaluate(input, vars)?;
            let mut document = match input {
                None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                Some(Bson::Document(document)) => document,
                Some(_) => {
                    return Err(fail(
                        ErrorCode::Location4161105,
                        format!(
                            "{} requires 'input' to evaluate to type Object",
                            if value.is_some() {
                                "$setField"
                            } else {
                                "$unsetField"
                            }
                        ),
                    ))
                }
            };
            let value = match value {
                Some(value) => evaluate(value, vars)?,
                None => None,
            };
            match value {
                // `insert` keeps the position of a field already there.
                Some(value) => {
                    document.insert(field.clone(), value);
                }
                None => {
                    document.remove(field);
                }
            }
            vars.copied(Some(Bson::Document(document)))
        }
    }
}

fn evaluate_lazy(lazy: Lazy, arguments: &[Expr], vars: &mut Vars) -> CommandResult<Value> {
    match lazy {
        Lazy::And => {
            for argument in arguments {
                if !truthy(&evaluate(argument, vars)?) {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
            Ok(Some(Bson::Boolean(true)))
        }
        Lazy::Or => {
            for argument in arguments {
                if truthy(&evaluate(argument, vars)?) {
                    return Ok(Some(Bson::Boolean(true)));
                }
            }
            Ok(Some(Bson::Boolean(false)))
        }
        Lazy::Cond => {
            let [condition, then, otherwise] = arguments else {
                return Err(CommandError::internal("$cond takes three arguments"));
            };
            if truthy(&evaluate(condition, vars)?) {
                evaluate(then, vars)
            } else {
                evaluate(otherwise, vars)
            }
        }
        Lazy::IfNull => {
            let Some((last, candidates)) = arguments.split_last() else {
                return Ok(None);
            };
            for candidate in candidates {
                let value = evaluate(candidate, vars)?;
                if !is_nullish(&value) {
                    return Ok(value);
                }
            }
            evaluate(last, vars)
        }
    }
}

fn evaluate_filter(
    input: &Expr,
    name: &str,
    cond: &Expr,
    limit: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    let limit = match limit {
        None => None,
        Some(limit) => {
            let value = evaluate(limit, vars)?;
            if is_nullish(&value) {
                None
            } else {
                let count = value
                    .as_ref()
                    .and_then(Number::from_bson)
                    .and_then(Number::to_exact_i64)
                    .filter(|count| (1..=i64::from(i32::MAX)).contains(count))
                    .ok_or_else(|| {
                        fail(
                            ErrorCode::Location327391,
                            format!(
                                "$filter: limit must be represented as a 32-bit integral value: {}",
                                value.as_ref().map_or("missing".to_string(), value_string)
                            ),
                        )
                    })?;
                Some(count as usize)
            }
        }
    };
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(elements)) = input else {
        return Err(fail(
            ErrorCode::Location28651,
            format!(
                "input to $filter must be an array not {}",
                value_type_name(&input)
            ),
        ));
    };
    let mut output = Vec::new();
    for element in elements {
        if limit.is_some_and(|limit| output.len() >= limit) {
            break;
        }
        vars.bindings.push((name.to_string(), element));
        let keep = evaluate(cond, vars);
        let element = vars.bindings.pop().map(|(_, element)| element);
        if truthy(&keep?) {
            output.extend(element);
        }
    }
    Ok(Some(Bson::Array(output)))
}

// ----- arithmetic ----------------------------------------------------------------------------

fn decimal_bson(value: Decimal) -> Bson {
    match value.to_decimal128() {
        Some(decimal) => Bson::Decimal128(decimal),
        // Out of the Decimal128 exponent range: overflow to infinity, underflow to zero.
        None => {
            let (negative, large) = match value {
                Decimal::Finite {
                    negative, exponent, ..
                } => (negative, exponent > 0),
                _ => (false, false),
            };
            let text = match (large, negative) {
                (true, true) => "-Infinity",
                (true, false) => "Infinity",
                (false, true) => "-0",
                (false, false) => "0",
            };
            text.parse::<Decimal128>()
                .map(Bson::Decimal128)
                .unwrap_or(Bson::Null)
        }
    }
}

pub(crate) fn number_bson(number: Number) -> Bson {
    match number {
        Number::Int32(value) => Bson::Int32(value),
        Number::Int64(value) => Bson::Int64(value),
        Number::Double(value) => Bson::Double(value),
        Number::Decimal(value) => decimal_bson(value),
    }
}

fn negate_decimal(value: Decimal) -> Decimal {
    match value {
        Decimal::NaN => Decimal::NaN,
        Decimal::Infinity { negative } => Decimal::Infinity {
            negative: !negative,
        },
        Decimal::Finite {
            negative,
            coefficient,
            exponent,
        } => Decimal::Finite {
            negative: !negative,
            coefficient,
            exponent,
        },
    }
}

/// `a + b` with mongod's promotion; long overflow falls back to double.
pub(crate) fn add_numbers(a: Number, b: Number) -> Number {
    apply_arithmetic(Arithmetic::Add, a, b)
        .unwrap_or_else(|| Number::Double(a.to_f64() + b.to_f64()))
}

fn multiply_numbers(a: Number, b: Number) -> Number {
    apply_arithmetic(Arithmetic::Multiply, a, b)
        .unwrap_or_else(|| Number::Double(a.to_f64() * b.to_f64()))
}

fn subtract_numbers(a: Number, b: Number) -> Number {
    match (a, b) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => add_numbers(
            Number::Decimal(a.to_decimal()),
            Number::Decimal(negate_decimal(b.to_decimal())),
        ),
        (Number::Double(_), _) | (_, Number::Double(_)) => Number::Double(a.to_f64() - b.to_f64()),
        (Number::Int32(x), Number::Int32(y)) => match x.checked_sub(y) {
            Some(value) => Number::Int32(value),
            None => Number::Int64(i64::from(x) - i64::from(y)),
        },
        _ => {
            let (x, y) = (a.to_i64_truncated(), b.to_i64_truncated());
            match (x, y) {
                (Some(x), Some(y)) => x
                    .checked_sub(y)
                    .map_or(Number::Double(x as f64 - y as f64), Number::Int64),
                _ => Number::Double(a.to_f64() - b.to_f64()),
            }
        }
    }
}

/// Exact decimal division rounded half-even to 34 digits; the divisor is not zero.
pub(crate) fn divide_decimal(a: Decimal, b: Decimal) -> Decimal {
    match (a, b) {
        (Decimal::NaN, _) | (_, Decimal::NaN) => Decimal::NaN,
        (Decimal::Infinity { .. }, Decimal::Infinity { .. }) => Decimal::NaN,
        (Decimal::Infinity { negative: x }, Decimal::Finite { negative: y, .. }) => {
            Decimal::Infinity { negative: x != y }
        }
        (Decimal::Finite { negative: x, .. }, Decimal::Infinity { negative: y }) => {
            Decimal::Finite {
                negative: x != y,
                coefficient: 0,
                exponent: 0,
            }
        }
        (
            Decimal::Finite {
                negative: a_negative,
                coefficient: a_coefficient,
                exponent: a_exponent,
            },
            Decimal::Finite {
                negative: b_negative,
                coefficient: b_coefficient,
                exponent: b_exponent,
            },
        ) => {
            let negative = a_negative != b_negative;
            if b_coefficient == 0 {
                return Decimal::Infinity { negative };
            }
            // Long division: the remainder stays below the divisor (< 10^34), so every step
            // fits in u128; stop at 35 digits (one guard digit) or when exact.
            let mut quotient = a_coefficient / b_coefficient;
            let mut remainder = a_coefficient % b_coefficient;
            let mut exponent = i64::from(a_exponent) - i64::from(b_exponent);
            while remainder != 0 && (quotient == 0 || digit_count(quotient) < 35) {
                remainder *= 10;
                quotient = quotient * 10 + remainder / b_coefficient;
                remainder %= b_coefficient;
                exponent -= 1;
            }
            while digit_count(quotient) > 34 {
                let dropped = quotient % 10;
                quotient /= 10;
                exponent += 1;
                let round_up =
                    dropped > 5 || (dropped == 5 && (remainder != 0 || quotient % 2 == 1));
                if dropped != 0 {
                    remainder = 1;
                }
                if round_up {
                    quotient += 1;
                }
            }
            if quotient == pow10(34) {
                quotient /= 10;
                exponent += 1;
            }
            Decimal::Finite {
                negative,
                coefficient: quotient,
                exponent: exponent.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    HalfEven,
    TowardZero,
    Floor,
    Ceil,
}

/// Rounds a decimal to `places` digits after the point.
fn round_decimal(value: Decimal, places: i32, mode: Rounding) -> Decimal {
    let Decimal::Finite {
        negative,
        coefficient,
        exponent,
    } = value
    else {
        return value;
    };
    let target = -places;
    if exponent >= target {
        return value;
    }
    let shift = (i64::from(target) - i64::from(exponent)).unsigned_abs();
    let (mut quotient, remainder, half) = if shift > 38 {
        (0u128, coefficient, None)
    } else {
        let divisor = pow10(shift as u32);
        (coefficient / divisor, coefficient % divisor, Some(divisor))
    };
    let round_up = match mode {
        Rounding::TowardZero => false,
        Rounding::Floor => negative && remainder != 0,
        Rounding::Ceil => !negative && remainder != 0,
        Rounding::HalfEven => match half {
            None => false,
            Some(divisor) => {
                let twice = remainder * 2;
                twice > divisor || (twice == divisor && quotient % 2 == 1)
            }
        },
    };
    if round_up {
        quotient += 1;
    }
    let mut exponent = target;
    if quotient >= pow10(34) {
        quotient /= 10;
        exponent += 1;
    }
    Decimal::Finite {
        negative,
        coefficient: quotient,
        exponent,
    }
}

fn round_double(value: f64, places: i32, mode: Rounding) -> f64 {
    if !value.is_finite() {
        return value;
    }
    if places == 0 {
        return match mode {
            Rounding::HalfEven => value.round_ties_even(),
            Rounding::TowardZero => value.trunc(),
            Rounding::Floor => value.floor(),
            Rounding::Ceil => value.ceil(),
        };
    }
    round_decimal(Decimal::from_f64(value), places, mode).to_f64()
}

/// Rounds an integer to a negative number of places (`places >= 0` leaves it unchanged).
fn round_integer(value: i64, places: i32, mode: Rounding) -> i128 {
    if places >= 0 {
        return i128::from(value);
    }
    let shift = places.unsigned_abs().min(30);
    let divisor = 10i128.pow(shift);
    let magnitude = i128::from(value).abs();
    let (mut quotient, remainder) = (magnitude / divisor, magnitude % divisor);
    let negative = value < 0;
    let round_up = match mode {
        Rounding::TowardZero => false,
        Rounding::Floor => negative && remainder != 0,
        Rounding::Ceil => !negative && remainder != 0,
        Rounding::HalfEven => {
            remainder * 2 > divisor || (remainder * 2 == divisor && quotient % 2 == 1)
        }
    };
    if round_up {
        quotient += 1;
    }
    let rounded = quotient * divisor;
    if negative {
        -rounded
    } else {
        rounded
    }
}

fn round_number(number: Number, places: i32, mode: Rounding) -> Number {
    match number {
        Number::Int32(value) => {
            let rounded = round_integer(i64::from(value), places, mode);
            i32::try_from(rounded).map_or_else(
                |_| i64::try_from(rounded).map_or(Number::Double(rounded as f64), Number::Int64),
                Number::Int32,
            )
        }
        Number::Int64(value) => {
            let rounded = round_integer(value, places, mode);
            i64::try_from(rounded).map_or(Number::Double(rounded as f64), Number::Int64)
        }
        Number::Double(value) => Number::Double(round_double(value, places, mode)),
        Number::Decimal(value) => Number::Decimal(round_decimal(value, places, mode)),
    }
}

fn numeric_argument(name: &str, value: &Bson, code: ErrorCode) -> CommandResult<Number> {
    Number::from_bson(value).ok_or_else(|| {
        fail(
            code,
            format!(
                "{name} only supports numeric types, not {}",
                type_name(value)
            ),
        )
    })
}

fn evaluate_add(values: Vec<Value>) -> CommandResult<Value> {
    let mut total = Number::Int32(0);
    let mut date: Option<i64> = None;
    for value in values {
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let Some(value) = value else { continue };
        match &value {
            Bson::DateTime(moment) => {
                if date.is_some() {
                    return Err(fail(
                        ErrorCode::Location16612,
                        "only one date allowed in an $add expression",
                    ));
                }
                date = Some(moment.timestamp_millis());
            }
            other => {
                let number = Number::from_bson(other).ok_or_else(|| {
                    fail(
                        ErrorCode::Location16554,
                        format!(
                            "$add only supports numeric or date types, not {}",
                            type_name(other)
                        ),
                    )
                })?;
                total = add_numbers(total, number);
            }
        }
    }
    Ok(Some(match date {
        Some(millis) => Bson::DateTime(DateTime::from_millis(
            millis.saturating_add(round_to_millis(total)),
        )),
        None => number_bson(total),
    }))
}

/// A numeric offset added to a date, rounded to whole milliseconds as mongod does.
fn round_to_millis(number: Number) -> i64 {
    match number {
        Number::Int32(value) => i64::from(value),
        Number::Int64(value) => value,
        other => {
            let value = other.to_f64().round();
            if value.is_nan() {
                0
            } else {
                value as i64
            }
        }
    }
}

/// Both operands of a binary arithmetic operator, or `None` when either is null or missing (the
/// operator's result is then null).
fn both_operands(a: Value, b: Value) -> Option<(Bson, Bson)> {
    if is_nullish(&a) || is_nullish(&b) {
        return None;
    }
    Some((a?, b?))
}

/// The numbers of a division-like operator (`$divide`, `$mod`), refusing a zero divisor.
fn dividend_and_divisor(
    name: &str,
    a: &Bson,
    b: &Bson,
    type_code: ErrorCode,
    zero_code: ErrorCode,
) -> CommandResult<(Number, Number)> {
    let (x, y) = binary_numbers(name, a, b, type_code)?;
    if y.is_zero() {
        return Err(fail(zero_code, format!("can't {name} by zero")));
    }
    Ok((x, y))
}

fn evaluate_subtract(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let mismatch = |a: &Bson, b: &Bson| {
        fail(
            ErrorCode::Location16556,
            format!("can't $subtract {} from {}", type_name(b), type_name(a)),
        )
    };
    match (&a, &b) {
        (Bson::DateTime(x), Bson::DateTime(y)) => Ok(Some(Bson::Int64(
            x.timestamp_millis().saturating_sub(y.timestamp_millis()),
        ))),
        (Bson::DateTime(x), other) => {
            let number = Number::from_bson(other).ok_or_else(|| mismatch(&a, &b))?;
            Ok(Some(Bson::DateTime(DateTime::from_millis(
                x.timestamp_millis().saturating_sub(round_to_millis(number)),
            ))))
        }
        (x, y) => match (Number::from_bson(x), Number::from_bson(y)) {
            (Some(x), Some(y)) => Ok(Some(number_bson(subtract_numbers(x, y)))),
            _ => Err(mismatch(&a, &b)),
        },
    }
}

fn evaluate_multiply(values: Vec<Value>) -> CommandResult<Value> {
    let mut product = Number::Int32(1);
    for value in values {
        if is_nullish(&value) {
            return Ok(Some(Bson::Null));
        }
        let Some(value) = value else { continue };
        let number = numeric_argument("$multiply", &value, ErrorCode::Location16555)?;
        product = multiply_numbers(product, number);
    }
    Ok(Some(number_bson(product)))
}

fn binary_numbers(
    name: &str,
    a: &Bson,
    b: &Bson,
    code: ErrorCode,
) -> CommandResult<(Number, Number)> {
    match (Number::from_bson(a), Number::from_bson(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(fail(
            code,
            format!(
                "{name} only supports numeric types, not {} and {}",
                type_name(a),
                type_name(b)
            ),
        )),
    }
}

fn evaluate_divide(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let (x, y) = dividend_and_divisor(
        "$divide",
        &a,
        &b,
        ErrorCode::Location16609,
        ErrorCode::Location16608,
    )?;
    Ok(Some(match (x, y) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => {
            decimal_bson(divide_decimal(x.to_decimal(), y.to_decimal()))
        }
        _ => Bson::Double(x.to_f64() / y.to_f64()),
    }))
}

fn evaluate_mod(a: Value, b: Value) -> CommandResult<Value> {
    let Some((a, b)) = both_operands(a, b) else {
        return Ok(Some(Bson::Null));
    };
    let (x, y) = dividend_and_divisor(
        "$mod",
        &a,
        &b,
        ErrorCode::Location16611,
        ErrorCode::Location16610,
    )?;
    Ok(Some(match (x, y) {
        (Number::Decimal(_), _) | (_, Number::Decimal(_)) => {
            decimal_bson(decimal_remainder(x.to_decimal(), y.to_decimal())?)
        }
        (Number::Double(_), _) | (_, Number::Double(_)) => Bson::Double(x.to_f64() % y.to_f64()),
        (Number::Int32(p), Number::Int32(q)) => Bson::Int32(p.wrapping_rem(q)),
        _ => match (x.to_i64_truncated(), y.to_i64_truncated()) {
            (Some(p), Some(q)) => Bson::Int64(p.wrapping_rem(q)),
            _ => Bson::Double(x.to_f64() % y.to_f64()),
        },
    }))
}

/// Decimal remainder (sign of the dividend) when both operands align within u128 after
/// scaling to the smaller exponent; wider spreads are not supported.
fn decimal_remainder(a: Decimal, b: Decimal) -> CommandResult<Decimal> {
    match (a, b) {
        (
            Decimal::Finite {
                negative,
                coefficient: a_coefficient,
                exponent: a_exponent,
            },
            Decimal::Finite {
                coefficient: b_coefficient,
                exponent: b_exponent,
                ..
            },
        ) => {
            let exponent = a_exponent.min(b_exponent);
            let scale = |coefficient: u128, from: i32| -> Option<u128> {
                let shift = u32::try_from(i64::from(from) - i64::from(exponent)).ok()?;
                if shift > 38 {
                    return None;
                }
                coefficient.checked_mul(pow10(shift))
            };
            match (
                scale(a_coefficient, a_exponent),
                scale(b_coefficient, b_exponent),
            ) {
                (Some(x), Some(y)) if y != 0 => Ok(Decimal::Finite {
                    negative,
                    coefficient: x % y,
                    exponent,
                }),
                _ => Err(fail(
                    ErrorCode::NotImplemented,
                    "$mod on decimals of very different magnitudes is not supported by this server",
                )),
            }
        }
        (Decimal::Infinity { .. }, _) | (Decimal::NaN, _) | (_, Decimal::NaN) => Ok(Decimal::NaN),
        (finite, Decimal::Infinity { .. }) => Ok(finite),
    }
}

fn evaluate_unary_numeric(op: Op, name: &str, value: Value) -> CommandResult<Value> {
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(value) = value else {
        return Ok(Some(Bson::Null));
    };
    let number = numeric_argument(name, &value, ErrorCode::Location28765)?;
    let result = match op {
        Op::Abs => match number {
            Number::Int32(v) => v
                .checked_abs()
                .map_or(Number::Int64(i64::from(v).abs()), Number::Int32),
            Number::Int64(v) => Number::Int64(v.checked_abs().ok_or_else(|| {
                fail(ErrorCode::Location28680, "can't take $abs of long long min")
            })?),
            Number::Double(v) => Number::Double(v.abs()),
            Number::Decimal(v) => Number::Decimal(match v {
                Decimal::Finite {
                    coefficient,
                    exponent,
                    ..
                } => Decimal::Finite {
                    negative: false,
                    coefficient,
                    exponent,
                },
                Decimal::Infinity { .. } => Decimal::Infinity { negative: false },
                Decimal::NaN => Decimal::NaN,
            }),
        },
        Op::Ceil => round_number(number, 0, Rounding::Ceil),
        _ => round_number(number, 0, Rounding::Floor),
    };
    Ok(Some(number_bson(result)))
}

fn evaluate_round(op: Op, values: Vec<Value>) -> CommandResult<Value> {
    let name = if op == Op::Round { "$round" } else { "$trunc" };
    let mut values = values.into_iter();
    let value = values.next().flatten();
    let places = values.next().unwrap_or(Some(Bson::Int32(0)));
    if is_nullish(&value) || is_nullish(&places) {
        return Ok(Some(Bson::Null));
    }
    let (Some(value), Some(places)) = (value, places) else {
        return Ok(Some(Bson::Null));
    };
    let number = numeric_argument(name, &value, ErrorCode::Location51081)?;
    let places = Number::from_bson(&places)
        .and_then(Number::to_exact_i64)
        .ok_or_else(|| {
            fail(
                ErrorCode::Location51082,
                format!(
                    "precision argument to  {name} must be a integral value, but got {}",
                    value_string(&places)
                ),
            )
        })?;
    if !(-20..=100).contains(&places) {
        return Err(fail(
            ErrorCode::Location51083,
            format!(
                "cannot apply {name} with precision value {places} value must be in [-20, 100]"
            ),
        ));
    }
    let mode = if op == Op::Round {
        Rounding::HalfEven
    } else {
        Rounding::TowardZero
    };
    Ok(Some(number_bson(round_number(number, places as i32, mode))))
}

// ----- strings -------------------------------------------------------------------------------

/// mongod's `coerceToString` (used by `$toLower`, `$toUpper`, `$substrCP`).
fn coerce_to_string(value: &Value) -> CommandResult<String> {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(String::new()),
        Some(Bson::String(text)) | Some(Bson::Symbol(text)) => Ok(text.clone()),
        Some(Bson::Int32(v)) => Ok(v.to_string()),
        Some(Bson::Int64(v)) => Ok(v.to_string()),
        Some(Bson::Double(v)) => Ok(double_string(*v)),
        Some(Bson::Decimal128(v)) => Ok(v.to_string()),
        Some(Bson::DateTime(v)) => Ok(iso_date_string(v.timestamp_millis())),
        Some(Bson::Timestamp(v)) => Ok(format!("Timestamp({}, {})", v.time, v.increment)),
        Some(other) => Err(fail(
            ErrorCode::Location16007,
            format!(
                "can't convert from BSON type {} to String",
                type_name(other)
            ),
        )),
    }
}

fn double_string(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        format!("{value}")
    }
}

fn code_point_argument(
    name: &str,
    what: &str,
    value: &Value,
    codes: (ErrorCode, ErrorCode),
) -> CommandResult<i64> {
    let Some(number) = value.as_ref().and_then(Number::from_bson) else {
        return Err(fail(
            codes.0,
            format!(
                "{name}: {what} must be a numeric type (is BSON type {})",
                value_type_name(value)
            ),
        ));
    };
    number
        .to_exact_i64()
        .filter(|v| i32::try_from(*v).is_ok())
        .ok_or_else(|| {
            fail(
                codes.1,
                format!("{name}: {what} cannot be represented as a 32-bit integral value"),
            )
        })
}

fn evaluate_substr_cp(values: Vec<Value>) -> CommandResult<Value> {
    let [text, start, length] = <[Value; 3]>::try_from(values)
        .map_err(|_| CommandError::internal("$substrCP takes three arguments"))?;
    let text = coerce_to_string(&text)?;
    let start = code_point_argument(
        "$substrCP",
        "starting index",
        &start,
        (ErrorCode::Location34450, ErrorCode::Location34451),
    )?;
    let length = code_point_argument(
        "$substrCP",
        "length",
        &length,
        (ErrorCode::Location34452, ErrorCode::Location34453),
    )?;
    if length < 0 {
        return Err(fail(
            ErrorCode::Location34454,
            "$substrCP: length must be a nonnegative integer.",
        ));
    }
    if start < 0 {
        return Err(fail(
            ErrorCode::Location34455,
            "$substrCP: the starting index must be nonnegative integer.",
        ));
    }
    let piece: String = text
        .chars()
        .skip(start as usize)
        .take(length as usize)
        .collect();
    Ok(Some(Bson::String(piece)))
}

fn evaluate_split(text: Value, separator: Value) -> CommandResult<Value> {
    if is_nullish(&text) || is_nullish(&separator) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(text)) = text else {
        return Err(fail(
            ErrorCode::Location40085,
            format!(
                "$split requires an expression that evaluates to a string as a first argument, found: {}",
                value_type_name(&text)
            ),
        ));
    };
    let Some(Bson::String(separator)) = separator else {
        return Err(fail(
            ErrorCode::Location40086,
            format!(
                "$split requires an expression that evaluates to a string as a second argument, found: {}",
                value_type_name(&separator)
            ),
        ));
    };
    if separator.is_empty() {
        return Err(fail(
            ErrorCode::Location40087,
            "$split requires a non-empty separator",
        ));
    }
    Ok(Some(Bson::Array(
        text.split(separator.as_str())
            .map(|piece| Bson::String(piece.to_string()))
            .collect(),
    )))
}

fn evaluate_trim(
    side: TrimSide,
    input: &Expr,
    chars: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let name = match side {
        TrimSide::Both => "$trim",
        TrimSide::Start => "$ltrim",
        TrimSide::End => "$rtrim",
    };
    let input = evaluate(input, vars)?;
    let chars = chars.map(|chars| evaluate(chars, vars)).transpose()?;
    if is_nullish(&input) || chars.as_ref().is_some_and(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(text)) = input else {
        return Err(fail(
            ErrorCode::Location50699,
            format!(
                "{name} requires its input to be a string, got {} (of type {}) instead.",
                input.as_ref().map_or("missing".to_string(), value_string),
                value_type_name(&input)
            ),
        ));
    };
    let trim_set: Option<Vec<char>> = match chars {
        None => None,
        Some(Some(Bson::String(set))) => Some(set.chars().collect()),
        Some(other) => {
            return Err(fail(
                ErrorCode::Location50700,
                format!(
                    "{name} requires 'chars' to be a string, got {} (of type {}) instead.",
                    other.as_ref().map_or("missing".to_string(), value_string),
                    value_type_name(&other)
                ),
            ))
        }
    };
    let strip = |c: char| match &trim_set {
        Some(set) => set.contains(&c),
        None => c == '\0' || c.is_whitespace(),
    };
    let trimmed = match side {
        TrimSide::Both => text.trim_matches(strip),
        TrimSide::Start => text.trim_start_matches(strip),
        TrimSide::End => text.trim_end_matches(strip),
    };
    Ok(Some(Bson::String(trimmed.to_string())))
}

// ----- arrays --------------------------------------------------------------------------------

fn array_index_argument(
    name: &str,
    value: &Bson,
    position: &str,
    code: ErrorCode,
    range_code: ErrorCode,
) -> CommandResult<i64> {
    let number = Number::from_bson(value).ok_or_else(|| {
        fail(
            code,
            format!(
                "{name}'s {position} argument must be a numeric value, but is {}",
                type_name(value)
            ),
        )
    })?;
    number
        .to_exact_i64()
        .filter(|v| i32::try_from(*v).is_ok())
        .ok_or_else(|| {
            fail(
                range_code,
                format!(
                    "{name}'s {position} argument must be representable as a 32-bit integer: {}",
                    value_string(value)
                ),
            )
        })
}

fn element_at(elements: &[Bson], index: i64) -> Value {
    let length = elements.len() as i64;
    let position = if index < 0 { length + index } else { index };
    if position < 0 {
        return None;
    }
    elements.get(usize::try_from(position).ok()?).cloned()
}

fn evaluate_array_elem_at(name: &str, array: Value, index: Value) -> CommandResult<Value> {
    if is_nullish(&array) || is_nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let (Some(array), Some(index)) = (array, index) else {
        return Ok(Some(Bson::Null));
    };
    let Bson::Array(elements) = &array else {
        return Err(fail(
            ErrorCode::Location28689,
            format!(
                "{name}'s first argument must be an array, but is {}",
                type_name(&array)
            ),
        ));
    };
    let index = array_index_argument(
        name,
        &index,
        "second",
        ErrorCode::Location28690,
        ErrorCode::Location28691,
    )?;
    Ok(element_at(elements, index))
}

fn evaluate_first_last(op: Op, value: Value) -> CommandResult<Value> {
    let name = if op == Op::First { "$first" } else { "$last" };
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    match value {
        Some(Bson::Array(elements)) => Ok(if op == Op::First {
            elements.first().cloned()
        } else {
            elements.last().cloned()
        }),
        other => Err(fail(
            ErrorCode::Location28689,
            format!(
                "{name}'s argument must be an array, but is {}",
                value_type_name(&other)
            ),
        )),
    }
}

fn evaluate_slice(values: Vec<Value>) -> CommandResult<Value> {
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut values = values.into_iter().flatten();
    let (Some(array), Some(second)) = (values.next(), values.next()) else {
        return Ok(Some(Bson::Null));
    };
    let third = values.next();
    let Bson::Array(elements) = &array else {
        return Err(fail(
            ErrorCode::Location28724,
            format!(
                "First argument to $slice must be an array, but is of type: {}",
                type_name(&array)
            ),
        ));
    };
    let as_i32 = |value: &Bson, ordinal: &str, type_code, range_code| -> CommandResult<i64> {
        let number = Number::from_bson(value).ok_or_else(|| {
            fail(
                type_code,
                format!(
                    "{ordinal} argument to $slice must be a numeric value, but is of type: {}",
                    type_name(value)
                ),
            )
        })?;
        number
            .to_exact_i64()
            .filter(|v| i32::try_from(*v).is_ok())
            .ok_or_else(|| {
                fail(
                    range_code,
                    format!(
                        "{ordinal} argument to $slice can't be represented as a 32-bit integer: {}",
                        value_string(value)
                    ),
                )
            })
    };
    let length = elements.len() as i64;
    let second = as_i32(
        &second,
        "Second",
        ErrorCode::Location28725,
        ErrorCode::Location28726,
    )?;
    let (start, count) = match third {
        None => {
            if second >= 0 {
                (0, second)
            } else {
                ((length + second).max(0), length)
            }
        }
        Some(third) => {
            let count = as_i32(
                &third,
                "Third",
                ErrorCode::Location28727,
                ErrorCode::Location28728,
            )?;
            if count <= 0 {
                return Err(fail(
                    ErrorCode::Location28729,
                    format!(
                        "Third argument to $slice must be positive: {}",
                        value_string(&third)
                    ),
                ));
            }
            let start = if second >= 0 {
                second.min(length)
            } else {
                (length + second).max(0)
            };
            (start, count)
        }
    };
    let end = start.saturating_add(count).min(length);
    let slice = elements
        .get(start as usize..end.max(start) as usize)
        .map(<[Bson]>::to_vec)
        .unwrap_or_default();
    Ok(Some(Bson::Array(slice)))
}

// ----- simple operators ----------------------------------------------------------------------

fn two(values: Vec<Value>) -> CommandResult<(Value, Value)> {
    let mut values = values.into_iter();
    match (values.next(), values.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CommandError::internal("operator takes two arguments")),
    }
}

fn one(values: Vec<Value>) -> CommandResult<Value> {
    values
        .into_iter()
        .next()
        .ok_or_else(|| CommandError::internal("operator takes one argument"))
}

fn apply_op(op: Op, values: Vec<Value>, collation: Option<&Collation>) -> CommandResult<Value> {
    match op {
        Op::Add => evaluate_add(values),
        Op::Subtract => {
            let (a, b) = two(values)?;
            evaluate_subtract(a, b)
        }
        Op::Multiply => evaluate_multiply(values),
        Op::Divide => {
            let (a, b) = two(values)?;
            evaluate_divide(a, b)
        }
        Op::Mod => {
            let (a, b) = two(values)?;
            evaluate_mod(a, b)
        }
        Op::Abs => evaluate_unary_numeric(op, "$abs", one(values)?),
        Op::Ceil => evaluate_unary_numeric(op, "$ceil", one(values)?),
        Op::Floor => evaluate_unary_numeric(op, "$floor", one(values)?),
        Op::Round | Op::Trunc => evaluate_round(op, values),
        Op::Eq | Op::Ne | Op::Gt | Op::Gte | Op::Lt | Op::Lte | Op::Cmp => {
            let (a, b) = two(values)?;
            let order = compare_optional(&a, &b, collation);
            Ok(Some(match op {
                Op::Cmp => Bson::Int32(match order {
                    Ordering::Less => -1,
                    Ordering::Equal => 0,
                    Ordering::Greater => 1,
                }),
                Op::Eq => Bson::Boolean(order == Ordering::Equal),
                Op::Ne => Bson::Boolean(order != Ordering::Equal),
                Op::Gt => Bson::Boolean(order == Ordering::Greater),
                Op::Gte => Bson::Boolean(order != Ordering::Less),
                Op::Lt => Bson::Boolean(order == Ordering::Less),
                _ => Bson::Boolean(order != Ordering::Greater),
            }))
        }
        Op::Not => Ok(Some(Bson::Boolean(!truthy(&one(values)?)))),
        Op::Concat => {
            let mut output = String::new();
            for value in values {
                match value {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::String(text)) => output.push_str(&text),
                    Some(other) => {
                        return Err(fail(
                            ErrorCode::Location16702,
                            format!("$concat only supports strings, not {}", type_name(&other)),
                        ))
                    }
                }
            }
            Ok(Some(Bson::String(output)))
        }
        Op::ToLower | Op::ToUpper => {
            let text = coerce_to_string(&one(values)?)?;
            Ok(Some(Bson::String(if op == Op::ToLower {
                text.to_ascii_lowercase()
            } else {
                text.to_ascii_uppercase()
            })))
        }
        Op::SubstrCP => evaluate_substr_cp(values),
        Op::StrLenCP => match one(values)? {
            Some(Bson::String(text)) => Ok(Some(Bson::Int32(
                i32::try_from(text.chars().count()).unwrap_or(i32::MAX),
            ))),
            other => Err(fail(
                ErrorCode::Location34471,
                format!(
                    "$strLenCP requires a string argument, found: {}",
                    value_type_name(&other)
                ),
            )),
        },
        Op::Split => {
            let (a, b) = two(values)?;
            evaluate_split(a, b)
        }
        Op::Size => match one(values)? {
            Some(Bson::Array(elements)) => Ok(Some(Bson::Int32(
                i32::try_from(elements.len()).unwrap_or(i32::MAX),
            ))),
            other => Err(fail(
                ErrorCode::Location17124,
                format!(
                    "The argument to $size must be an array. Type of argument: {}",
                    value_type_name(&other)
                ),
            )),
        },
        Op::ArrayElemAt => {
            let (a, b) = two(values)?;
            evaluate_array_elem_at("$arrayElemAt", a, b)
        }
        Op::In => {
            let (needle, haystack) = two(values)?;
            let Some(Bson::Array(elements)) = haystack else {
                return Err(fail(
                    ErrorCode::Location40081,
                    format!(
                        "$in requires an array as a second argument, found: {}",
                        value_type_name(&haystack)
                    ),
                ));
            };
            let needle = needle.unwrap_or(Bson::Undefined);
            Ok(Some(Bson::Boolean(elements.iter().any(|element| {
                values_equal_with(element, &needle, collation)
            }))))
        }
        Op::IsArray => Ok(Some(Bson::Boolean(matches!(
            one(values)?,
            Some(Bson::Array(_))
        )))),
        Op::Slice => evaluate_slice(values),
        Op::ConcatArrays => {
            let mut output = Vec::new();
            for value in values {
                match value {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(elements)) => output.extend(elements),
                    Some(other) => {
                        return Err(fail(
                            ErrorCode::Location28664,
                            format!(
                                "$concatArrays only supports arrays, not {}",
                                type_name(&other)
                            ),
                        ))
                    }
                }
            }
            Ok(Some(Bson::Array(output)))
        }
        Op::First | Op::Last => evaluate_first_last(op, one(values)?),
        Op::ReverseArray => match one(values)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
            Some(Bson::Array(mut elements)) => {
                elements.reverse();
                Ok(Some(Bson::Array(elements)))
            }
            Some(other) => Err(fail(
                ErrorCode::Location34435,
                format!(
                    "The argument to $reverseArray must be an array, but was of type: {}",
                    type_name(&other)
                ),
            )),
        },
        Op::Type => Ok(Some(Bson::String(
            value_type_name(&one(values)?).to_string(),
        ))),
        Op::MergeObjects => {
            let mut output = Document::new();
            for value in values {
                merge_object_into(&mut output, value)?;
            }
            Ok(Some(Bson::Document(output)))
        }
        Op::Accumulate(accumulator) => {
            let mut state = AccumulatorState::new(accumulator);
            // One argument: an array is aggregated over its elements.
            if let [Some(Bson::Array(elements))] = values.as_slice() {
                for element in elements {
                    state.add(Some(element.clone()), collation)?;
                }
                return Ok(state.finish());
            }
            for value in values {
                state.add(value, collation)?;
            }
            Ok(state.finish())
        }
    }
}

/// `$mergeObjects` step: null/missing inputs are skipped, other non-documents rejected.
pub(crate) fn merge_object_into(output: &mut Document, value: Value) -> CommandResult<()> {
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(()),
        Some(Bson::Document(document)) => {
            for (name, field) in document {
                output.insert(name, field);
            }
            Ok(())
        }
        Some(other) => Err(fail(
            ErrorCode::Location40400,
            format!(
                "$mergeObjects requires object inputs, but input {} is of type {}",
                value_string(&other),
                type_name(&other)
            ),
        )),
    }
}

// ----- conversion ----------------------------------------------------------------------------

fn target_from_name(name: &str) -> Option<Target> {
    Some(match name {
        "double" => Target::Double,
        "string" => Target::String,
        "objectId" => Target::ObjectId,
        "bool" => Target::Bool,
        "date" => Target::Date,
        "int" => Target::Int,
        "long" => Target::Long,
        "decimal" => Target::Decimal,
        "object" => Target::Unsupported("object"),
        "array" => Target::Unsupported("array"),
        "binData" => Target::Unsupported("binData"),
        "undefined" => Target::Unsupported("undefined"),
        "null" => Target::Unsupported("null"),
        "regex" => Target::Unsupported("regex"),
        "dbPointer" => Target::Unsupported("dbPointer"),
        "javascript" => Target::Unsupported("javascript"),
        "symbol" => Target::Unsupported("symbol"),
        "javascriptWithScope" => Target::Unsupported("javascriptWithScope"),
        "timestamp" => Target::Unsupported("timestamp"),
        "minKey" => Target::Unsupported("minKey"),
        "maxKey" => Target::Unsupported("maxKey"),
        _ => return None,
    })
}

fn target_from_code(code: i64) -> Option<Target> {
    Some(match code {
        1 => Target::Double,
        2 => Target::String,
        7 => Target::ObjectId,
        8 => Target::Bool,
        9 => Target::Date,
        16 => Target::Int,
        18 => Target::Long,
        19 => Target::Decimal,
        3 => Target::Unsupported("object"),
        4 => Target::Unsupported("array"),
        5 => Target::Unsupported("binData"),
        6 => Target::Unsupported("undefined"),
        10 => Target::Unsupported("null"),
        11 => Target::Unsupported("regex"),
        12 => Target::Unsupported("dbPointer"),
        13 => Target::Unsupported("javascript"),
        14 => Target::Unsupported("symbol"),
        15 => Target::Unsupported("javascriptWithScope"),
        17 => Target::Unsupported("timestamp"),
        -1 => Target::Unsupported("minKey"),
        127 => Target::Unsupported("maxKey"),
        _ => return None,
    })
}

fn target_name(target: Target) -> &'static str {
    match target {
        Target::Double => "double",
        Target::String => "string",
        Target::ObjectId => "objectId",
        Target::Bool => "bool",
        Target::Date => "date",
        Target::Int => "int",
        Target::Long => "long",
        Target::Decimal => "decimal",
        Target::Unsupported(name) => name,
    }
}

fn evaluate_convert(
    input: &Expr,
    to: &Expr,
    on_error: Option<&Expr>,
    on_null: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let input = evaluate(input, vars)?;
    let to = evaluate(to, vars)?;
    if is_nullish(&to) {
        return Ok(Some(Bson::Null));
    }
    let target = match &to {
        Some(Bson::String(name)) => target_from_name(name)
            .ok_or_else(|| fail(ErrorCode::BadValue, format!("Unknown type name: {name}")))?,
        Some(other) => {
            let code = Number::from_bson(other)
                .ok_or_else(|| {
                    fail(
                        ErrorCode::Location50784,
                        format!(
                            "$convert's 'to' argument must be a string or number, but is {}",
                            type_name(other)
                        ),
                    )
                })?
                .to_exact_i64()
                .ok_or_else(|| {
                    fail(
                        ErrorCode::FailedToParse,
                        format!(
                            "In $convert, numeric 'to' argument is not an integer: {}",
                            value_string(other)
                        ),
                    )
                })?;
            target_from_code(code).ok_or_else(|| {
                fail(
                    ErrorCode::FailedToParse,
                    format!("In $convert, numeric value for 'to' does not correspond to a BSON type: {code}"),
                )
            })?
        }
        None => return Ok(Some(Bson::Null)),
    };
    if is_nullish(&input) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(input) = input else {
        return Ok(Some(Bson::Null));
    };
    match convert(&input, target) {
        Ok(value) => Ok(Some(value)),
        Err(reason) => match on_error {
            Some(on_error) => evaluate(on_error, vars),
            None => Err(fail(ErrorCode::ConversionFailure, reason.message())),
        },
    }
}

/// Why a conversion failed; rendered with mongod's "... in $convert with no onError value".
enum ConversionError {
    Unsupported(&'static str, &'static str),
    Message(String),
}

impl ConversionError {
    fn message(&self) -> String {
        match self {
            ConversionError::Unsupported(from, to) => {
                format!(
                    "Unsupported conversion from {from} to {to} in $convert with no onError value"
                )
            }
            ConversionError::Message(text) => text.clone(),
        }
    }
}

fn parse_failure(text: &str, reason: &str) -> ConversionError {
    ConversionError::Message(format!(
        "Failed to parse number '{text}' in $convert with no onError value: {reason}"
    ))
}

fn overflow(value: &Bson) -> ConversionError {
    ConversionError::Message(format!(
        "Conversion would overflow target type in $convert with no onError value: {}",
        value_string(value)
    ))
}

fn integral_from_number(number: Number, value: &Bson, int32: bool) -> Result<i64, ConversionError> {
    match number {
        Number::Double(v) if v.is_nan() => Err(ConversionError::Message(
            "Attempt to convert NaN value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Double(v) if v.is_infinite() => Err(ConversionError::Message(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Decimal(Decimal::NaN) => Err(ConversionError::Message(
            "Attempt to convert NaN value to integer type in $convert with no onError value"
                .to_string(),
        )),
        Number::Decimal(Decimal::Infinity { .. }) => Err(ConversionError::Message(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .to_string(),
        )),
        other => {
            let truncated = other.to_i64_truncated().ok_or_else(|| overflow(value))?;
            if int32 && i32::try_from(truncated).is_err() {
                return Err(overflow(value));
            }
            Ok(truncated)
        }
    }
}

fn parse_integer_string(text: &str) -> Result<i64, ConversionError> {
    if text.is_empty() {
        return Err(parse_failure(text, "No digits"));
    }
    text.parse::<i64>()
        .map_err(|_| parse_failure(text, "Did not consume whole string."))
}

fn parse_double_string(text: &str) -> Result<f64, ConversionError> {
    let lowered = text.to_ascii_lowercase();
    let valid = !text.is_empty()
        && !lowered.starts_with("0x")
        && !text.contains(char::is_whitespace)
        && (text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            || matches!(
                lowered.trim_start_matches(['+', '-']),
                "inf" | "infinity" | "nan"
            ));
    if !valid {
        return Err(parse_failure(text, "Did not consume whole string."));
    }
    text.parse::<f64>()
        .map_err(|_| parse_failure(text, "Did not consume whole string."))
}

fn convert(value: &Bson, target: Target) -> Result<Bson, ConversionError> {
    let from = type_name(value);
    let unsupported = || ConversionError::Unsupported(from, target_name(target));
    let number = Number::from_bson(value);
    match target {
        Target::Unsupported(_) => Err(unsupported()),
        Target::Double => match value {
            Bson::Boolean(flag) => Ok(Bson::Double(if *flag { 1.0 } else { 0.0 })),
            Bson::String(text) => parse_double_string(text).map(Bson::Double),
            Bson::DateTime(moment) => Ok(Bson::Double(moment.timestamp_millis() as f64)),
            Bson::Decimal128(_) => {
                let converted = number.map_or(f64::NAN, Number::to_f64);
                if converted.is_infinite() && !matches!(number, Some(Number::Decimal(Decimal::Infinity { .. }))) {
                    return Err(overflow(value));
                }
                Ok(Bson::Double(converted))
            }
            _ => number
                .map(|number| Bson::Double(number.to_f64()))
                .ok_or_else(unsupported),
        },
        Target::Int | Target::Long => {
            let int32 = target == Target::Int;
            let integral = match value {
                Bson::Boolean(flag) => i64::from(*flag),
                Bson::String(text) => {
                    let parsed = parse_integer_string(text)?;
                    if int32 && i32::try_from(parsed).is_err() {
                        return Err(overflow(value));
                    }
                    parsed
                }
                Bson::DateTime(moment) if !int32 => moment.timestamp_millis(),
                _ => {
                    let number = number.ok_or_else(unsupported)?;
                    integral_from_number(number, value, int32)?
                }
            };
            Ok(if int32 {
                Bson::Int32(i32::try_from(integral).map_err(|_| overflow(value))?)
            } else {
                Bson::Int64(integral)
            })
        }
        Target::Decimal => {
            let decimal = match value {
                Bson::Boolean(flag) => Decimal::from_i64(i64::from(*flag)),
                Bson::String(text) => {
                    let parsed = text
                        .parse::<Decimal128>()
                        .map_err(|_| parse_failure(text, "Failed to parse string to decimal"))?;
                    return Ok(Bson::Decimal128(parsed));
                }
                Bson::DateTime(moment) => Decimal::from_i64(moment.timestamp_millis()),
                Bson::Double(v) => {
                    // mongod converts doubles to decimal rounded to 15 significant digits.
                    if !v.is_finite() {
                        Decimal::from_f64(*v)
                    } else {
                        let text = format!("{v:.14e}");
                        return text
                            .parse::<f64>()
                            .ok()
                            .and_then(|_| decimal_from_scientific(&text))
                            .map(Bson::Decimal128)
                            .ok_or_else(unsupported);
                    }
                }
                _ => number.ok_or_else(unsupported)?.to_decimal(),
            };
            Ok(decimal_bson(decimal))
        }
        Target::Bool => match value {
            Bson::Boolean(flag) => Ok(Bson::Boolean(*flag)),
            Bson::String(_) | Bson::ObjectId(_) | Bson::DateTime(_) | Bson::Timestamp(_) => {
                Ok(Bson::Boolean(true))
            }
            _ => number
                .map(|number| Bson::Boolean(!number.is_zero()))
                .ok_or_else(unsupported),
        },
        Target::String => match value {
            Bson::String(text) => Ok(Bson::String(text.clone())),
            Bson::Boolean(flag) => Ok(Bson::String(flag.to_string())),
            Bson::ObjectId(id) => Ok(Bson::String(id.to_hex())),
            Bson::DateTime(moment) => Ok(Bson::String(iso_date_string(moment.timestamp_millis()))),
            Bson::Int32(v) => Ok(Bson::String(v.to_string())),
            Bson::Int64(v) => Ok(Bson::String(v.to_string())),
            Bson::Double(v) => Ok(Bson::String(double_string(*v))),
            Bson::Decimal128(v) => Ok(Bson::String(v.to_string())),
            _ => Err(unsupported()),
        },
        Target::ObjectId => match value {
            Bson::ObjectId(id) => Ok(Bson::ObjectId(*id)),
            Bson::String(text) => ObjectId::parse_str(text).map(Bson::ObjectId).map_err(|_| {
                ConversionError::Message(format!(
                    "Failed to parse objectId '{text}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}",
                    text.len()
                ))
            }),
            _ => Err(unsupported()),
        },
        Target::Date => match value {
            Bson::DateTime(moment) => Ok(Bson::DateTime(*moment)),
            Bson::Int64(millis) => Ok(Bson::DateTime(DateTime::from_millis(*millis))),
            Bson::Double(v) => {
                if !v.is_finite() || v.abs() >= 9.2e18 {
                    return Err(overflow(value));
                }
                Ok(Bson::DateTime(DateTime::from_millis(v.trunc() as i64)))
            }
            Bson::Decimal128(_) => {
                let millis = number
                    .and_then(Number::to_i64_truncated)
                    .ok_or_else(|| overflow(value))?;
                Ok(Bson::DateTime(DateTime::from_millis(millis)))
            }
            Bson::ObjectId(id) => Ok(Bson::DateTime(DateTime::from_millis(
                i64::from(u32::from_be_bytes(
                    <[u8; 4]>::try_from(&id.bytes()[..4]).unwrap_or_default(),
                )) * 1000,
            ))),
            Bson::Timestamp(stamp) => Ok(Bson::DateTime(DateTime::from_millis(
                i64::from(stamp.time) * 1000,
            ))),
            Bson::String(text) => parse_iso_date(text).map(|millis| Bson::DateTime(DateTime::from_millis(millis))).ok_or_else(|| {
                ConversionError::Message(format!(
                    "Error parsing date string '{text}'; in $convert with no onError value"
                ))
            }),
            _ => Err(unsupported()),
        },
    }
}

fn decimal_from_scientific(text: &str) -> Option<Decimal128> {
    let (mantissa, exponent) = text.split_once('e')?;
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent = exponent.parse::<i32>().ok()? - (digits.len() as i32 - 1);
    format!("{}{digits}E{exponent}", if negative { "-" } else { "" })
        .parse::<Decimal128>()
        .ok()
}

// ----- dates ---------------------------------------------------------------------------------

const MILLIS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    millisecond: i64,
    day_of_week: i64,
    day_of_year: i64,
}

fn civil(millis: i64) -> Civil {
    let days = millis.div_euclid(MILLIS_PER_DAY);
    let in_day = millis.rem_euclid(MILLIS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: in_day / 3_600_000,
        minute: in_day / 60_000 % 60,
        second: in_day / 1000 % 60,
        millisecond: in_day % 1000,
        // 1970-01-01 was a Thursday; mongod numbers Sunday as 1.
        day_of_week: (days + 4).rem_euclid(7) + 1,
        day_of_year: days - days_from_civil(year, 1, 1) + 1,
    }
}

fn civil_part(millis: i64, part: DatePart) -> i32 {
    let parts = civil(millis);
    let value = match part {
        DatePart::Year => parts.year,
        DatePart::Month => i64::from(parts.month),
        DatePart::DayOfMonth => i64::from(parts.day),
        DatePart::Hour => parts.hour,
        DatePart::Minute => parts.minute,
        DatePart::Second => parts.second,
        DatePart::Millisecond => parts.millisecond,
        DatePart::DayOfWeek => parts.day_of_week,
        DatePart::DayOfYear => parts.day_of_year,
    };
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// `2020-01-02T03:04:05.678Z`, the form mongod prints dates as strings.
pub(crate) fn iso_date_string(millis: i64) -> String {
    let parts = civil(millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        parts.year,
        parts.month,
        parts.day,
        parts.hour,
        parts.minute,
        parts.second,
        parts.millisecond
    )
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS[.fff]]][Z|±HH[:]MM]` into epoch milliseconds.
fn parse_iso_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let piece = text.get(range)?;
        if piece.is_empty() || !piece.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        piece.parse().ok()
    };
    let year = number(0..4)?;
    if bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let month = u32::try_from(number(5..7)?).ok()?;
    let day = u32::try_from(number(8..10)?).ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut millis = days_from_civil(year, month, day) * MILLIS_PER_DAY;
    let mut rest = &text[10..];
    if rest.is_empty() {
        return Some(millis);
    }
    rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' '))?;
    let hour = rest.get(0..2)?.parse::<i64>().ok()?;
    if rest.get(2..3) != Some(":") {
        return None;
    }
    let minute = rest.get(3..5)?.parse::<i64>().ok()?;
    rest = &rest[5..];
    let mut second = 0;
    let mut fraction = 0;
    if let Some(after) = rest.strip_prefix(':') {
        second = after.get(0..2)?.parse::<i64>().ok()?;
        rest = &after[2..];
        if let Some(after) = rest.strip_prefix('.') {
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                return None;
            }
            let padded = format!("{:0<3}", &digits[..digits.len().min(3)]);
            fraction = padded.parse::<i64>().ok()?;
            rest = &after[digits.len()..];
        }
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    millis += hour * 3_600_000 + minute * 60_000 + second * 1000 + fraction;
    match rest {
        "" | "Z" => Some(millis),
        offset => parse_offset(offset).map(|offset| millis - offset),
    }
}

/// `+HH:MM`, `+HHMM` or `+HH` as milliseconds east of UTC.
fn parse_offset(text: &str) -> Option<i64> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = digits.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (hours, minutes) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    Some(sign * (hours * 3_600_000 + minutes * 60_000))
}

/// A timezone argument as an offset in milliseconds; `Ok(None)` when it is null/missing.
fn timezone_offset(timezone: Option<&Expr>, vars: &mut Vars) -> CommandResult<Option<i64>> {
    let Some(timezone) = timezone else {
        return Ok(Some(0));
    };
    let value = evaluate(timezone, vars)?;
    match value {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(Bson::String(name)) => match name.as_str() {
            "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" => Ok(Some(0)),
            other => match parse_offset(other) {
                Some(offset) => Ok(Some(offset)),
                None => Err(fail(
                    ErrorCode::NotImplemented,
                    format!("time zone '{other}' is not supported by this server (only UTC and fixed offsets)"),
                )),
            },
        },
        Some(other) => Err(fail(
            ErrorCode::Location40517,
            format!("timezone must evaluate to a string, found {}", type_name(&other)),
        )),
    }
}

/// Milliseconds since the epoch of a date-like value (date, ObjectId, timestamp).
fn date_millis(value: &Value) -> CommandResult<i64> {
    match value {
        Some(Bson::DateTime(moment)) => Ok(moment.timestamp_millis()),
        Some(Bson::ObjectId(id)) => {
            let seconds =
                u32::from_be_bytes(<[u8; 4]>::try_from(&id.bytes()[..4]).unwrap_or_default());
            Ok(i64::from(seconds) * 1000)
        }
        Some(Bson::Timestamp(stamp)) => Ok(i64::from(stamp.time) * 1000),
        other => Err(fail(
            ErrorCode::Location16006,
            format!(
                "can't convert from BSON type {} to Date",
                value_type_name(other)
            ),
        )),
    }
}

fn evaluate_date_to_string(
    date: &Expr,
    format: Option<&Expr>,
    timezone: Option<&Expr>,
    on_null: Option<&Expr>,
    vars: &mut Vars,
) -> CommandResult<Value> {
    let format = match format {
        None => None,
        Some(format) => match evaluate(format, vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::String(text)) => Some(text),
            Some(other) => {
                return Err(fail(
                    ErrorCode::Location18533,
                    format!(
                        "$dateToString requires that 'format' be a string, found: {} with value {}",
                        type_name(&other),
                        value_string(&other)
                    ),
                ))
            }
        },
    };
    let offset = timezone_offset(timezone, vars)?;
    let date = evaluate(date, vars)?;
    if is_nullish(&date) {
        return match on_null {
            Some(on_null) => evaluate(on_null, vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(offset) = offset else {
        return Ok(Some(Bson::Null));
    };
    let millis = date_millis(&date)?.saturating_add(offset);
    let format = format.as_deref().unwrap_or("%Y-%m-%dT%H:%M:%S.%LZ");
    Ok(Some(Bson::String(format_date(format, millis, offset)?)))
}

fn format_date(format: &str, millis: i64, offset: i64) -> CommandResult<String> {
    let parts = civil(millis);
    let mut output = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            output.push(c);
            continue;
        }
        let Some(specifier) = chars.next() else {
            return Err(fail(
                ErrorCode::Location18535,
                "Unmatched '%' at end of format string",
            ));
        };
        match specifier {
            'Y' => {
                if !(0..=9999).contains(&parts.year) {
                    return Err(fail(
                        ErrorCode::Location18537,
                        format!(
                            "Could not convert date to string: date component was outside the supported range of 0-9999: {}",
                            parts.year
                        ),
                    ));
                }
                output.push_str(&format!("{:04}", parts.year));
            }
            'm' => output.push_str(&format!("{:02}", parts.month)),
            'd' => output.push_str(&format!("{:02}", parts.day)),
            'H' => output.push_str(&format!("{:02}", parts.hour)),
            'M' => output.push_str(&format!("{:02}", parts.minute)),
            'S' => output.push_str(&format!("{:02}", parts.second)),
            'L' => output.push_str(&format!("{:03}", parts.millisecond)),
            'j' => output.push_str(&format!("{:03}", parts.day_of_year)),
            'w' => output.push_str(&parts.day_of_week.to_string()),
            'u' => output.push_str(&((parts.day_of_week + 5) % 7 + 1).to_string()),
            'z' => {
                let minutes = offset / 60_000;
                let sign = if minutes < 0 { '-' } else { '+' };
                output.push_str(&format!(
                    "{sign}{:02}{:02}",
                    minutes.abs() / 60,
                    minutes.abs() % 60
                ));
            }
            'Z' => output.push_str(&(offset / 60_000).to_string()),
            '%' => output.push('%'),
            'U' | 'V' | 'G' | 'b' | 'B' => {
                return Err(fail(
                    ErrorCode::NotImplemented,
                    format!("$dateToString format '%{specifier}' is not supported by this server"),
                ))
            }
            other => {
                return Err(fail(
                    ErrorCode::Location18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assert_value, eval, eval_ok, now};
    use super::*;
    use crate::query::compare::fixtures::decimal;
    use bson::doc;

    fn empty() -> Document {
        Document::new()
    }

    #[track_caller]
    fn value(expression: Bson) -> Option<Bson> {
        eval_ok(expression, &empty())
    }

    #[track_caller]
    fn error(expression: Bson) -> CommandError {
        eval(expression, &empty()).expect_err("expression should fail")
    }

    #[test]
    fn field_paths_map_over_arrays_of_documents() {
        let document =
            doc! {"a": [{"b": 1}, {"c": 2}, 3, [{"b": 9}], {"b": [4, 5]}], "d": {"e": 1}};
        assert_value(
            eval_ok(Bson::String("$a.b".into()), &document),
            bson::bson!([1, [4, 5]]),
        );
        assert_value(
            eval_ok(Bson::String("$d.e".into()), &document),
            Bson::Int32(1),
        );
        assert_eq!(eval_ok(Bson::String("$d.e.f".into()), &document), None);
        assert_eq!(eval_ok(Bson::String("$zz".into()), &document), None);
        assert_value(
            eval_ok(Bson::String("$$ROOT.d".into()), &document),
            Bson::Document(doc! {"e": 1}),
        );
        assert_value(
            eval_ok(Bson::String("$$NOW".into()), &document),
            Bson::DateTime(now()),
        );
        assert_eq!(eval_ok(Bson::String("$$REMOVE".into()), &document), None);
    }

    #[test]
    fn invalid_paths_and_variables_are_rejected_at_parse_time() {
        assert_eq!(error(Bson::String("$".into())).code.code(), 16872);
        assert_eq!(error(Bson::String("$a..b".into())).code.code(), 15998);
        let undefined = error(Bson::String("$$foo".into()));
        assert_eq!(undefined.code.code(), 17276);
        assert_eq!(undefined.errmsg, "Use of undefined variable: foo");
    }

    #[test]
    fn unknown_operators_are_168_and_missing_ones_not_implemented() {
        let unknown = error(Bson::Document(doc! {"$foo": 1}));
        assert_eq!(unknown.code, ErrorCode::InvalidPipelineOperator);
        assert_eq!(unknown.errmsg, "Unrecognized expression '$foo'");
        assert_eq!(
            error(Bson::Document(doc! {"$regexMatch": {}})).code,
            ErrorCode::NotImplemented
        );
        assert_eq!(
            error(Bson::Document(doc! {"$add": [1], "x": 1}))
                .code
                .code(),
            15983
        );
        let arity = error(Bson::Document(doc! {"$abs": [1, 2]}));
        assert_eq!(arity.code.code(), 16020);
        assert_eq!(
            arity.errmsg,
            "Expression $abs takes exactly 1 arguments. 2 were passed in."
        );
    }

    #[test]
    fn arithmetic_follows_mongod_type_promotion() {
        assert_value(value(bson::bson!({"$add": [1, 2]})), Bson::Int32(3));
        assert_value(
            value(bson::bson!({"$add": [i32::MAX, 1]})),
            Bson::Int64(2_147_483_648),
        );
        assert_value(
            value(bson::bson!({"$add": [i64::MAX, 1]})),
            Bson::Double(i64::MAX as f64 + 1.0),
        );
        assert_value(value(bson::bson!({"$add": [1, 2_i64]})), Bson::Int64(3));
        assert_value(value(bson::bson!({"$add": [1, 0.5]})), Bson::Double(1.5));
        assert_value(
            value(bson::bson!({"$add": [1, decimal("0.5")]})),
            decimal("1.5"),
        );
        assert_value(value(bson::bson!({"$add": []})), Bson::Int32(0));
        assert_value(value(bson::bson!({"$add": [1, null]})), Bson::Null);
        assert_value(value(bson::bson!({"$add": [1, "$missing"]})), Bson::Null);
        assert_value(value(bson::bson!({"$subtract": [5, 7]})), Bson::Int32(-2));
        assert_value(
            value(bson::bson!({"$subtract": [i32::MIN, 1]})),
            Bson::Int64(-2_147_483_649),
        );
        assert_value(
            value(bson::bson!({"$multiply": [3, 4_i64]})),
            Bson::Int64(12),
        );
        assert_value(
            value(bson::bson!({"$multiply": [65_536, 65_536]})),
            Bson::Int64(4_294_967_296),
        );
        assert_value(value(bson::bson!({"$divide": [7, 2]})), Bson::Double(3.5));
        assert_value(
            value(bson::bson!({"$divide": [decimal("1"), 4]})),
            decimal("0.25"),
        );
        assert_value(
            value(bson::bson!({"$divide": [decimal("1"), 3]})),
            decimal("0.3333333333333333333333333333333333"),
        );
        assert_value(value(bson::bson!({"$mod": [7, 3]})), Bson::Int32(1));
        assert_value(value(bson::bson!({"$mod": [-7, 3_i64]})), Bson::Int64(-1));
        assert_value(value(bson::bson!({"$mod": [7.5, 2]})), Bson::Double(1.5));
        assert_value(value(bson::bson!({"$mod": [i32::MIN, -1]})), Bson::Int32(0));
        assert_value(
            value(bson::bson!({"$mod": [decimal("7.5"), 2]})),
            decimal("1.5"),
        );
    }

    #[test]
    fn arithmetic_errors_carry_mongod_codes() {
        let add = error(bson::bson!({"$add": [1, "x"]}));
        assert_eq!(add.code.code(), 16554);
        assert_eq!(
            add.errmsg,
            "$add only supports numeric or date types, not string"
        );
        assert_eq!(error(bson::bson!({"$divide": [1, 0]})).code.code(), 16608);
        assert_eq!(error(bson::bson!({"$divide": [1, "x"]})).code.code(), 16609);
        assert_eq!(error(bson::bson!({"$mod": [1, 0]})).code.code(), 16610);
        assert_eq!(
            error(bson::bson!({"$multiply": [1, "x"]})).code.code(),
            16555
        );
        let subtract = error(bson::bson!({"$subtract": ["x", 1]}));
        assert_eq!(subtract.code.code(), 16556);
        assert_eq!(subtract.errmsg, "can't $subtract int from string");
        assert_eq!(error(bson::bson!({"$abs": "x"})).code.code(), 28765);
        assert_eq!(error(bson::bson!({"$abs": i64::MIN})).code.code(), 28680);
    }

    #[test]
    fn date_arithmetic_adds_milliseconds_and_subtracts_dates() {
        let epoch = Bson::DateTime(DateTime::from_millis(0));
        assert_value(
            value(bson::bson!({"$add": [epoch.clone(), 1000, 0.6]})),
            Bson::DateTime(DateTime::from_millis(1001)),
        );
        assert_value(
            value(
                bson::bson!({"$subtract": [Bson::DateTime(DateTime::from_millis(5000)), epoch.clone()]}),
            ),
            Bson::Int64(5000),
        );
        assert_value(
            value(bson::bson!({"$subtract": [epoch.clone(), 10]})),
            Bson::DateTime(DateTime::from_millis(-10)),
        );
        assert_eq!(
            error(bson::bson!({"$add": [epoch.clone(), epoch]}))
                .code
                .code(),
            16612
        );
    }

    #[test]
    fn rounding_operators_keep_types_and_round_half_even() {
        assert_value(value(bson::bson!({"$abs": -5})), Bson::Int32(5));
        assert_value(
            value(bson::bson!({"$abs": i32::MIN})),
            Bson::Int64(2_147_483_648),
        );
        assert_value(value(bson::bson!({"$ceil": 1.2})), Bson::Double(2.0));
        assert_value(value(bson::bson!({"$floor": -1.2})), Bson::Double(-2.0));
        assert_value(value(bson::bson!({"$floor": 7})), Bson::Int32(7));
        assert_value(value(bson::bson!({"$ceil": decimal("1.01")})), decimal("2"));
        assert_value(value(bson::bson!({"$round": 2.5})), Bson::Double(2.0));
        assert_value(value(bson::bson!({"$round": [3.5, 0]})), Bson::Double(4.0));
        assert_value(
            value(bson::bson!({"$round": [1.2345, 2]})),
            Bson::Double(1.23),
        );
        assert_value(
            value(bson::bson!({"$round": [1250, -2]})),
            Bson::Int32(1200),
        );
        assert_value(
            value(bson::bson!({"$round": [decimal("1.2355"), 3]})),
            decimal("1.236"),
        );
        assert_value(
            value(bson::bson!({"$trunc": [-1.99, 1]})),
            Bson::Double(-1.9),
        );
        assert_value(value(bson::bson!({"$trunc": 7.9})), Bson::Double(7.0));
        assert_value(value(bson::bson!({"$round": [null, 1]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$round": [1, 101]})).code.code(), 51083);
    }

    #[test]
    fn comparisons_use_bson_order_with_missing_below_null() {
        assert_value(value(bson::bson!({"$eq": [1, 1.0]})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$eq": ["$missing", null]})),
            Bson::Boolean(false),
        );
        assert_value(
            value(bson::bson!({"$lt": ["$missing", null]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$gt": ["a", 5]})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$lte": [2, 2_i64]})),
            Bson::Boolean(true),
        );
        assert_value(
            value(bson::bson!({"$ne": [[1], [1]]})),
            Bson::Boolean(false),
        );
        assert_value(value(bson::bson!({"$cmp": ["b", "a"]})), Bson::Int32(1));
        assert_value(value(bson::bson!({"$cmp": [1, 2]})), Bson::Int32(-1));
    }

    #[test]
    fn boolean_and_conditional_operators() {
        assert_value(
            value(bson::bson!({"$and": [1, "x", []]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$and": [1, 0]})), Bson::Boolean(false));
        assert_value(value(bson::bson!({"$and": []})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$or": [null, "$missing", false]})),
            Bson::Boolean(false),
        );
        assert_value(
            value(bson::bson!({"$not": [decimal("0")]})),
            Bson::Boolean(true),
        );
        assert_value(value(bson::bson!({"$cond": [true, "y", "n"]})), "y".into());
        assert_value(
            value(bson::bson!({"$cond": {"if": {"$gt": [1, 2]}, "then": "y", "else": "n"}})),
            "n".into(),
        );
        assert_eq!(
            error(bson::bson!({"$cond": {"then": 1, "else": 2}}))
                .code
                .code(),
            17080
        );
        assert_value(
            value(bson::bson!({"$ifNull": ["$missing", null, "d"]})),
            "d".into(),
        );
        assert_value(value(bson::bson!({"$ifNull": [0, "d"]})), Bson::Int32(0));
        assert_eq!(error(bson::bson!({"$ifNull": [1]})).code.code(), 1257300);
        let switch = bson::bson!({"$switch": {
            "branches": [{"case": {"$eq": [1, 2]}, "then": "a"}, {"case": true, "then": "b"}],
            "default": "c"
        }});
        assert_value(value(switch), "b".into());
        let no_match = error(bson::bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}));
        assert_eq!(no_match.code.code(), 40066);
        assert_eq!(
            error(bson::bson!({"$switch": {"branches": []}}))
                .code
                .code(),
            40068
        );
    }

    #[test]
    fn string_operators() {
        assert_value(
            value(bson::bson!({"$concat": ["a", "b", "c"]})),
            "abc".into(),
        );
        assert_value(value(bson::bson!({"$concat": ["a", null]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$concat": ["a", 1]})).code.code(), 16702);
        assert_value(value(bson::bson!({"$toLower": "AbC"})), "abc".into());
        assert_value(value(bson::bson!({"$toUpper": 12})), "12".into());
        assert_value(value(bson::bson!({"$toUpper": null})), "".into());
        assert_value(
            value(bson::bson!({"$substrCP": ["héllo", 1, 3]})),
            "éll".into(),
        );
        assert_value(value(bson::bson!({"$substrCP": ["abc", 5, 1]})), "".into());
        assert_eq!(
            error(bson::bson!({"$substrCP": ["abc", "x", 1]}))
                .code
                .code(),
            34450
        );
        assert_value(value(bson::bson!({"$strLenCP": "héllo"})), Bson::Int32(5));
        assert_eq!(error(bson::bson!({"$strLenCP": 1})).code.code(), 34471);
        assert_value(
            value(bson::bson!({"$split": ["a,b,,c", ","]})),
            bson::bson!(["a", "b", "", "c"]),
        );
        assert_value(value(bson::bson!({"$split": [null, ","]})), Bson::Null);
        assert_eq!(error(bson::bson!({"$split": ["a", ""]})).code.code(), 40087);
        assert_value(
            value(bson::bson!({"$trim": {"input": "  x y \n"}})),
            "x y".into(),
        );
        assert_value(
            value(bson::bson!({"$trim": {"input": "xxaxx", "chars": "x"}})),
            "a".into(),
        );
        assert_value(
            value(bson::bson!({"$ltrim": {"input": "  a "}})),
            "a ".into(),
        );
        assert_eq!(
            error(bson::bson!({"$trim": {"input": 1}})).code.code(),
            50699
        );
    }

    #[test]
    fn array_operators() {
        let document = doc! {"a": [1, 2, 3, 4]};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(on(bson::bson!({"$size": "$a"})), Bson::Int32(4));
        assert_eq!(
            error(bson::bson!({"$size": "$missing"})).errmsg,
            "The argument to $size must be an array. Type of argument: missing"
        );
        assert_value(
            on(bson::bson!({"$arrayElemAt": ["$a", -1]})),
            Bson::Int32(4),
        );
        assert_eq!(on(bson::bson!({"$arrayElemAt": ["$a", 9]})), None);
        assert_eq!(
            error(bson::bson!({"$arrayElemAt": ["x", 0]})).code.code(),
            28689
        );
        assert_value(on(bson::bson!({"$in": [2.0, "$a"]})), Bson::Boolean(true));
        assert_eq!(
            error(bson::bson!({"$in": [1, "$missing"]})).code.code(),
            40081
        );
        assert_value(on(bson::bson!({"$isArray": ["$a"]})), Bson::Boolean(true));
        assert_value(on(bson::bson!({"$isArray": "x"})), Bson::Boolean(false));
        assert_value(on(bson::bson!({"$slice": ["$a", 2]})), bson::bson!([1, 2]));
        assert_value(on(bson::bson!({"$slice": ["$a", -2]})), bson::bson!([3, 4]));
        assert_value(
            on(bson::bson!({"$slice": ["$a", 1, 2]})),
            bson::bson!([2, 3]),
        );
        assert_value(on(bson::bson!({"$slice": ["$a", -3, 1]})), bson::bson!([2]));
        assert_eq!(
            error(bson::bson!({"$slice": [[1], 0, 0]})).code.code(),
            28729
        );
        assert_value(
            on(bson::bson!({"$concatArrays": ["$a", [5]]})),
            bson::bson!([1, 2, 3, 4, 5]),
        );
        assert_value(
            on(bson::bson!({"$concatArrays": ["$a", "$missing"]})),
            Bson::Null,
        );
        assert_value(on(bson::bson!({"$first": "$a"})), Bson::Int32(1));
        assert_value(on(bson::bson!({"$last": "$a"})), Bson::Int32(4));
        assert_eq!(on(bson::bson!({"$first": [[]]})), None);
        assert_value(
            on(bson::bson!({"$reverseArray": "$a"})),
            bson::bson!([4, 3, 2, 1]),
        );
        assert_value(
            on(bson::bson!({"$filter": {"input": "$a", "as": "n", "cond": {"$gt": ["$$n", 2]}}})),
            bson::bson!([3, 4]),
        );
        assert_value(
            on(
                bson::bson!({"$filter": {"input": "$a", "cond": {"$gt": ["$$this", 1]}, "limit": 1}}),
            ),
            bson::bson!([2]),
        );
        assert_value(
            on(bson::bson!({"$map": {"input": "$a", "in": {"$multiply": ["$$this", 10]}}})),
            bson::bson!([10, 20, 30, 40]),
        );
        assert_eq!(
            error(bson::bson!({"$map": {"input": 1, "in": 1}}))
                .code
                .code(),
            16883
        );
        assert_eq!(
            error(bson::bson!({"$filter": {"input": 1, "cond": true}}))
                .code
                .code(),
            28651
        );
        assert_value(
            on(bson::bson!({"$let": {"vars": {"x": 2}, "in": {"$add": ["$$x", {"$size": "$a"}]}}})),
            Bson::Int32(6),
        );
        assert_value(on(bson::bson!({"$sum": "$a"})), Bson::Int32(10));
        assert_value(on(bson::bson!({"$avg": [1, 2]})), Bson::Double(1.5));
        assert_value(on(bson::bson!({"$max": "$a"})), Bson::Int32(4));
        assert_value(on(bson::bson!({"$min": [3, null, 1]})), Bson::Int32(1));
    }

    #[test]
    fn type_and_conversion_operators() {
        assert_value(value(bson::bson!({"$type": "$missing"})), "missing".into());
        assert_value(value(bson::bson!({"$type": [[1]]})), "array".into());
        assert_value(value(bson::bson!({"$type": 1_i64})), "long".into());
        assert_value(value(bson::bson!({"$toString": 1.5})), "1.5".into());
        assert_value(value(bson::bson!({"$toString": 2.0})), "2".into());
        assert_value(
            value(
                bson::bson!({"$toString": Bson::DateTime(DateTime::from_millis(1_614_834_367_089))}),
            ),
            "2021-03-04T05:06:07.089Z".into(),
        );
        assert_value(value(bson::bson!({"$toInt": "42"})), Bson::Int32(42));
        assert_value(value(bson::bson!({"$toInt": 4.9})), Bson::Int32(4));
        assert_value(value(bson::bson!({"$toLong": true})), Bson::Int64(1));
        assert_value(value(bson::bson!({"$toDouble": "2.5"})), Bson::Double(2.5));
        assert_value(value(bson::bson!({"$toBool": 0})), Bson::Boolean(false));
        assert_value(value(bson::bson!({"$toBool": ""})), Bson::Boolean(true));
        assert_value(
            value(bson::bson!({"$toDecimal": 0.1})),
            decimal("0.100000000000000"),
        );
        assert_value(
            value(bson::bson!({"$toDate": "2021-03-04T05:06:07.089Z"})),
            Bson::DateTime(DateTime::from_millis(1_614_834_367_089)),
        );
        assert_value(
            value(bson::bson!({"$toObjectId": "0123456789abcdef01234567"})),
            Bson::ObjectId(ObjectId::parse_str("0123456789abcdef01234567").expect("hex")),
        );
        assert_value(value(bson::bson!({"$toInt": null})), Bson::Null);
        let failure = error(bson::bson!({"$toInt": "abc"}));
        assert_eq!(failure.code, ErrorCode::ConversionFailure);
        assert_eq!(
            failure.errmsg,
            "Failed to parse number 'abc' in $convert with no onError value: Did not consume whole string."
        );
        assert_eq!(
            error(bson::bson!({"$toInt": 3_000_000_000_i64})).code,
            ErrorCode::ConversionFailure
        );
        assert_value(
            value(bson::bson!({"$convert": {"input": "abc", "to": "int", "onError": -1}})),
            Bson::Int32(-1),
        );
        assert_value(
            value(bson::bson!({"$convert": {"input": null, "to": 16, "onNull": 0}})),
            Bson::Int32(0),
        );
        assert_eq!(
            error(bson::bson!({"$convert": {"input": [1], "to": "int"}})).errmsg,
            "Unsupported conversion from array to int in $convert with no onError value"
        );
        assert_eq!(
            error(bson::bson!({"$convert": {"input": 1, "to": "bogus"}})).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn date_operators_read_utc_parts() {
        let document = doc! {"d": DateTime::from_millis(1_614_834_367_089)};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(on(bson::bson!({"$year": "$d"})), Bson::Int32(2021));
        assert_value(on(bson::bson!({"$month": "$d"})), Bson::Int32(3));
        assert_value(on(bson::bson!({"$dayOfMonth": "$d"})), Bson::Int32(4));
        assert_value(on(bson::bson!({"$hour": ["$d"]})), Bson::Int32(5));
        assert_value(on(bson::bson!({"$minute": "$d"})), Bson::Int32(6));
        assert_value(on(bson::bson!({"$second": "$d"})), Bson::Int32(7));
        assert_value(on(bson::bson!({"$millisecond": "$d"})), Bson::Int32(89));
        assert_value(on(bson::bson!({"$dayOfWeek": "$d"})), Bson::Int32(5));
        assert_value(on(bson::bson!({"$dayOfYear": "$d"})), Bson::Int32(63));
        assert_value(
            on(bson::bson!({"$hour": {"date": "$d", "timezone": "+02:30"}})),
            Bson::Int32(7),
        );
        assert_value(on(bson::bson!({"$year": "$missing"})), Bson::Null);
        assert_eq!(error(bson::bson!({"$year": "x"})).code.code(), 16006);
        assert_value(
            on(bson::bson!({"$dateToString": {"date": "$d"}})),
            "2021-03-04T05:06:07.089Z".into(),
        );
        assert_value(
            on(
                bson::bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M:%S.%L %j %%"}}),
            ),
            "2021/03/04 05:06:07.089 063 %".into(),
        );
        assert_value(
            on(bson::bson!({"$dateToString": {"date": "$missing", "onNull": "none"}})),
            "none".into(),
        );
        assert_eq!(
            error(bson::bson!({"$dateToString": {"date": "$$NOW", "format": "%Q"}}))
                .code
                .code(),
            18536
        );
        let before_epoch = doc! {"d": DateTime::from_millis(-1)};
        assert_value(
            eval_ok(
                bson::bson!({"$dateToString": {"date": "$d"}}),
                &before_epoch,
            ),
            "1969-12-31T23:59:59.999Z".into(),
        );
    }

    #[test]
    fn object_operators_and_literals() {
        let document = doc! {"a": {"x": 1, "y": 2}, "b": {"y": 3}, "$odd": 1};
        let on = |expression: Bson| eval_ok(expression, &document);
        assert_value(
            on(bson::bson!({"$mergeObjects": ["$a", "$b", null, "$missing"]})),
            Bson::Document(doc! {"x": 1, "y": 3}),
        );
        assert_eq!(
            error(bson::bson!({"$mergeObjects": [1]})).code.code(),
            40400
        );
        assert_value(on(bson::bson!({"$getField": "$odd"})), Bson::Int32(1));
        assert_value(
            on(bson::bson!({"$getField": {"field": "y", "input": "$b"}})),
            Bson::Int32(3),
        );
        assert_value(on(bson::bson!({"$literal": "$a"})), "$a".into());
        assert_value(
            on(bson::bson!({"k": "$a.x", "gone": "$missing", "arr": ["$missing", 1]})),
            Bson::Document(doc! {"k": 1, "arr": [null, 1]}),
        );
    }

    #[test]
    fn set_field_and_unset_field() {
        let document = doc! {"_id": 1, "item": "sweatshirt", "price.usd": 45.99, "qty": 300};
        let on = |expression: Bson| eval_ok(expression, &document);
        // The documentation's examples: fields whose names hold a dot or start with `$`.
        assert_value(
            on(
                bson::bson!({"$setField": {"field": "price.usd", "input": "$$ROOT", "value": 49.99}}),
            ),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "price.usd": 49.99, "qty": 300}),
        );
        assert_value(
            on(
                bson::bson!({"$setField": {"field": {"$literal": "$price"}, "input": {"a": 1}, "value": "$qty"}}),
            ),
            Bson::Document(doc! {"a": 1, "$price": 300}),
        );
        assert_value(
            on(bson::bson!({"$unsetField": {"field": "price.usd", "input": "$$ROOT"}})),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "qty": 300}),
        );
        assert_value(
            on(
                bson::bson!({"$setField": {"field": "qty", "input": "$$ROOT", "value": "$$REMOVE"}}),
            ),
            Bson::Document(doc! {"_id": 1, "item": "sweatshirt", "price.usd": 45.99}),
        );
        assert_value(
            on(bson::bson!({"$setField": {"field": "a", "input": "$missing", "value": 1}})),
            Bson::Null,
        );
        let code = |expression: Bson| error(expression).code.code();
        assert_eq!(code(bson::bson!({"$setField": 1})), 4161100);
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": {}, "value": 1, "x": 1}})),
            4161101
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"input": {}, "value": 1}})),
            4161102
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": {}}})),
            4161103
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": 1, "input": {}, "value": 1}})),
            4161107
        );
        assert_eq!(
            code(
                bson::bson!({"$setField": {"field": {"$concat": ["a"]}, "input": {}, "value": 1}})
            ),
            4161106
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "$a", "input": {}, "value": 1}})),
            4161108
        );
        assert_eq!(
            code(bson::bson!({"$setField": {"field": "a", "input": 5, "value": 1}})),
            4161105
        );
    }
}
