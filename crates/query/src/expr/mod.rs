//! The aggregation expression engine, the layer below filters (`$expr`), projections
//! (expressions in `find` projections) and pipelines: parsing `$`-operator documents, field
//! paths (`"$a.b"`), variables (`"$$ROOT"`, `"$$NOW"`, `"$$REMOVE"`, `$let`/`$map`/`$filter`
//! names, a command's `let`) and literals into an [`Expr`] tree, and evaluating it against one
//! document in a [`PipelineContext`] (`$$NOW` and the collation). It uses only the value-level
//! modules (`compare`, `numeric`, `collation`, `sort`, `hash`, `js`), never `filter`,
//! `projection`, `update` or `pipeline`.
//!
//! This file holds what every operator shares: the [`Expr`] tree, parsing dispatch (the
//! operator-name tables), the evaluation context ([`PipelineContext`]) and environment
//! ([`Vars`]) and the evaluation dispatch (`evaluate`, `apply_op`). Each operator family parses
//! and evaluates itself in its own file: `arithmetic`, `math` (exponents, logarithms, bitwise),
//! `string`, `string_search` (searching, slicing, replacing), `regex`, `date` (with
//! `date_arith`, `date_parse` and the `timezone` they share), `array` (with `$filter`/`$map`),
//! `array_ops` (`$reduce`, `$zip`, `$range`, `$indexOfArray`, `$sortArray`, the N
//! expressions), `set`, `trigonometry`, `object`, `quantile` (`$median`, `$percentile`, shared
//! with `$group`), `convert` (`$convert`, `$to*`), `conditional` (boolean, comparison and
//! conditional operators), `misc` (`$isNumber`, `$rand`, sizes, timestamps,
//! `$toHashedIndexKey`), `function` (`$function`, JavaScript through `crate::js`) and
//! `variables` (`$let` and the variable scope of `$filter`/`$map`/`$reduce`).
//!
//! The accumulators live here too, because the expressions of their names fold arrays through
//! them: [`accumulator`] (each op and its running state, shared by `$group`, `$bucketAuto`,
//! `$setWindowFields` and the expressions), [`accumulator_n`] (the `n` of the N accumulators
//! and expressions) and [`accumulator_js`] (`$accumulator`). [`command_variables`] holds a
//! command's `let` variables and the parse scope in which expressions name them.
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

use bson::{Bson, DateTime, Document};

use crate::collation::{Collation, CollationChoice};
use crate::compare::compare_values_with;
use crate::numeric::Number;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::{check_field_path_length, MAX_FIELD_PATH_COMPONENTS};

pub(crate) mod accumulator;
pub(crate) mod accumulator_js;
pub(crate) mod accumulator_n;
mod arithmetic;
mod array;
mod array_ops;
pub mod command_variables;
mod conditional;
mod convert;
mod date;
mod date_arith;
mod date_parse;
mod function;
mod math;
mod misc;
mod object;
mod quantile;
mod regex;
mod set;
mod string;
mod string_search;
mod timezone;
mod trigonometry;
mod variables;

pub(crate) use arithmetic::{
    add_numbers, divide_decimal, evaluate_add, evaluate_divide, evaluate_multiply,
    evaluate_subtract, number_bson,
};
pub(crate) use date::{iso_date_string, DatePart};
pub(crate) use date_arith::TimeUnit;
pub(crate) use object::merge_object_into;
pub(crate) use quantile::{accumulator_argument, parse_quantile_spec, quantile_result, Samples};
pub(crate) use string::TrimSide;

use accumulator::{AccumulatorOp, AccumulatorState};
use arithmetic::{evaluate_mod, evaluate_round, evaluate_unary_numeric};
use array::{
    evaluate_array_elem_at, evaluate_concat_arrays, evaluate_filter, evaluate_first_last,
    evaluate_in_array, evaluate_map, evaluate_reverse_array, evaluate_size, evaluate_slice,
    parse_filter, parse_map,
};
use array_ops::{
    evaluate_array_n, evaluate_index_of_array, evaluate_range, evaluate_reduce,
    evaluate_sort_array, evaluate_zip, parse_array_n, parse_reduce, parse_sort_array, parse_zip,
    SortBy,
};
use conditional::{evaluate_comparison, evaluate_lazy, evaluate_switch, parse_cond, parse_switch};
use convert::{evaluate_convert, parse_convert};
use date::{
    evaluate_date_op, evaluate_date_part, evaluate_date_to_string, parse_date_from_parts,
    parse_date_part, parse_date_to_parts, parse_date_to_string, DateOp,
};
use date_arith::{parse_date_add, parse_date_diff, parse_date_trunc};
use date_parse::parse_date_from_string;
use math::{evaluate_math, MathOp};
use misc::{evaluate_misc, parse_rand, MiscOp};
use object::{
    evaluate_array_to_object, evaluate_get_field, evaluate_merge_objects, evaluate_object_to_array,
    evaluate_set_field, parse_get_field, parse_set_field,
};
use quantile::{evaluate_quantile, parse_quantile};
use regex::{evaluate_regex, parse_regex, RegexMode, RegexSource};
use set::{evaluate_set, parse_set_equals, SetOp};
use string::{
    evaluate_case, evaluate_concat, evaluate_split, evaluate_str_len_cp, evaluate_substr_cp,
    evaluate_trim, parse_trim,
};
use string_search::{
    evaluate_index_of_bytes, evaluate_index_of_cp, evaluate_replace, evaluate_str_len_bytes,
    evaluate_strcasecmp, evaluate_substr_bytes, parse_replace,
};
use trigonometry::{evaluate_trig, TrigOp};
use variables::{evaluate_let, parse_let};

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

/// What evaluating needs from outside, for a whole pipeline run or one statement: the clock for
/// `$$NOW`, and the collation string comparisons (`$match`, `$sort`, `$group` keys,
/// expressions) use.
#[derive(Clone, Debug)]
pub struct PipelineContext {
    /// The value of `$$NOW` for the whole run.
    pub now: DateTime,
    /// `None`: the simple collation.
    pub collation: CollationChoice,
}

impl PipelineContext {
    /// A run at `now` under the simple collation.
    pub fn at(now: DateTime) -> PipelineContext {
        PipelineContext {
            now,
            collation: None,
        }
    }
}

/// Evaluation environment: `$$ROOT`, `$$CURRENT` (which field paths read: the root document
/// except where `$redact` descends), `$$NOW`, and the user variables bound by enclosing
/// `$let`/`$map`/`$filter` (innermost last).
pub(crate) struct Vars<'a> {
    root: &'a Document,
    current: &'a Document,
    now: DateTime,
    /// The collation string comparisons use (`None`: byte order).
    collation: Option<&'a Collation>,
    /// Reading the document is an error (a command variable's value is being computed).
    reads_forbidden: bool,
    /// A binding may hold missing (`$let` of a missing value, `$reduce`'s `$$value`).
    bindings: Vec<(String, Value)>,
    /// What this evaluation has copied so far, against [`MAX_COPIED_BYTES`].
    copied_bytes: usize,
}

impl<'a> Vars<'a> {
    pub(crate) fn new(root: &'a Document, now: DateTime) -> Vars<'a> {
        Vars {
            root,
            current: root,
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

    fn lookup(&self, name: &str) -> Option<&Value> {
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
    Current,
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
    IndexOfBytes,
    IndexOfCP,
    SubstrBytes,
    StrLenBytes,
    Strcasecmp,
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
    Range,
    IndexOfArray,
    ArrayToObject,
    ObjectToArray,
    Math(MathOp),
    Misc(MiscOp),
    Set(SetOp),
    Trig(TrigOp),
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
    /// `$reduce`: `body` sees `$$this` and `$$value`.
    Reduce {
        input: Box<Expr>,
        initial: Box<Expr>,
        body: Box<Expr>,
    },
    Zip {
        inputs: Vec<Expr>,
        defaults: Vec<Expr>,
        longest: bool,
    },
    SortArray {
        input: Box<Expr>,
        sort_by: SortBy,
    },
    /// `$firstN`/`$lastN`/`$minN`/`$maxN` over an array (`op` with its `n` unset).
    ArrayN {
        op: AccumulatorOp,
        n: Box<Expr>,
        input: Box<Expr>,
    },
    /// `$median` and `$percentile` over a number or an array.
    /// `$function`: JavaScript called with the evaluated `args` array.
    Function {
        program: crate::js::JsProgram,
        args: Box<Expr>,
    },
    Quantile {
        median: bool,
        ps: Vec<f64>,
        input: Box<Expr>,
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
    /// `$dateToParts`, `$dateFromParts`, `$dateAdd`/`$dateSubtract`, `$dateDiff`, `$dateTrunc`,
    /// `$dateFromString`.
    DateOp(Box<DateOp>),
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
    /// `$replaceOne` (`all: false`) and `$replaceAll`.
    Replace {
        all: bool,
        input: Box<Expr>,
        find: Box<Expr>,
        replacement: Box<Expr>,
    },
    /// `$regexMatch`, `$regexFind`, `$regexFindAll`.
    Regex {
        mode: RegexMode,
        input: Box<Expr>,
        source: RegexSource,
    },
}

/// User variable names in scope while parsing (to reject undefined variables as mongod does).
#[derive(Default)]
struct Scope {
    names: Vec<String>,
}

/// Parses `expression` and evaluates it once with `root` as `$$ROOT`/`$$CURRENT` at `now`
/// (`$$NOW`), strings compared simply (`None`: the value is missing): what a validator's `$expr`
/// reports in its failure details.
pub fn evaluate_once(
    expression: &Bson,
    root: &Document,
    now: DateTime,
) -> CommandResult<Option<Bson>> {
    Expr::parse(expression)?.evaluate_collated(root, now, None)
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
        context: &PipelineContext,
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

    /// Evaluates with `root` as `$$ROOT` and `current` as `$$CURRENT` (what field paths read),
    /// at a pipeline run's `$$NOW` and under its collation: `$redact` below the top level.
    pub(crate) fn evaluate_at(
        &self,
        root: &Document,
        current: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Value> {
        let mut vars = Vars::new(root, context.now);
        vars.current = current;
        vars.collation = context.collation.as_deref();
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
            "ROOT" => Variable::Root,
            "CURRENT" => Variable::Current,
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
            other => match command_variables::lookup(other) {
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
        "$indexOfBytes" => (IndexOfBytes, 2, Some(4)),
        "$indexOfCP" => (IndexOfCP, 2, Some(4)),
        "$substrBytes" | "$substr" => (SubstrBytes, 3, Some(3)),
        "$strLenBytes" => (StrLenBytes, 1, Some(1)),
        "$strcasecmp" => (Strcasecmp, 2, Some(2)),
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
        "$range" => (Range, 2, Some(3)),
        "$indexOfArray" => (IndexOfArray, 2, Some(4)),
        "$arrayToObject" => (ArrayToObject, 1, Some(1)),
        "$objectToArray" => (ObjectToArray, 1, Some(1)),
        "$exp" => (Math(MathOp::Exp), 1, Some(1)),
        "$ln" => (Math(MathOp::Ln), 1, Some(1)),
        "$log" => (Math(MathOp::Log), 2, Some(2)),
        "$log10" => (Math(MathOp::Log10), 1, Some(1)),
        "$pow" => (Math(MathOp::Pow), 2, Some(2)),
        "$sqrt" => (Math(MathOp::Sqrt), 1, Some(1)),
        "$bitAnd" => (Math(MathOp::BitAnd), 0, None),
        "$bitOr" => (Math(MathOp::BitOr), 0, None),
        "$bitXor" => (Math(MathOp::BitXor), 0, None),
        "$bitNot" => (Math(MathOp::BitNot), 1, Some(1)),
        "$isNumber" => (Misc(MiscOp::IsNumber), 1, Some(1)),
        "$bsonSize" => (Misc(MiscOp::BsonSize), 1, Some(1)),
        "$binarySize" => (Misc(MiscOp::BinarySize), 1, Some(1)),
        "$tsSecond" => (Misc(MiscOp::TsSecond), 1, Some(1)),
        "$tsIncrement" => (Misc(MiscOp::TsIncrement), 1, Some(1)),
        "$toHashedIndexKey" => (Misc(MiscOp::ToHashedIndexKey), 1, Some(1)),
        "$setUnion" => (Set(SetOp::Union), 0, None),
        "$setIntersection" => (Set(SetOp::Intersection), 0, None),
        "$setDifference" => (Set(SetOp::Difference), 2, Some(2)),
        "$setIsSubset" => (Set(SetOp::IsSubset), 2, Some(2)),
        "$anyElementTrue" => (Set(SetOp::AnyElementTrue), 1, Some(1)),
        "$allElementsTrue" => (Set(SetOp::AllElementsTrue), 1, Some(1)),
        "$sin" => (Trig(TrigOp::Sin), 1, Some(1)),
        "$cos" => (Trig(TrigOp::Cos), 1, Some(1)),
        "$tan" => (Trig(TrigOp::Tan), 1, Some(1)),
        "$asin" => (Trig(TrigOp::Asin), 1, Some(1)),
        "$acos" => (Trig(TrigOp::Acos), 1, Some(1)),
        "$atan" => (Trig(TrigOp::Atan), 1, Some(1)),
        "$atan2" => (Trig(TrigOp::Atan2), 2, Some(2)),
        "$sinh" => (Trig(TrigOp::Sinh), 1, Some(1)),
        "$cosh" => (Trig(TrigOp::Cosh), 1, Some(1)),
        "$tanh" => (Trig(TrigOp::Tanh), 1, Some(1)),
        "$asinh" => (Trig(TrigOp::Asinh), 1, Some(1)),
        "$acosh" => (Trig(TrigOp::Acosh), 1, Some(1)),
        "$atanh" => (Trig(TrigOp::Atanh), 1, Some(1)),
        "$degreesToRadians" => (Trig(TrigOp::DegreesToRadians), 1, Some(1)),
        "$radiansToDegrees" => (Trig(TrigOp::RadiansToDegrees), 1, Some(1)),
        "$sum" => (Accumulate(AccumulatorOp::Sum), 0, None),
        "$avg" => (Accumulate(AccumulatorOp::Avg), 0, None),
        "$min" => (Accumulate(AccumulatorOp::Min), 0, None),
        "$max" => (Accumulate(AccumulatorOp::Max), 0, None),
        "$stdDevPop" => (Accumulate(AccumulatorOp::StdDevPop), 0, None),
        "$stdDevSamp" => (Accumulate(AccumulatorOp::StdDevSamp), 0, None),
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
        "$week" => DatePart::Week,
        "$isoWeek" => DatePart::IsoWeek,
        "$isoWeekYear" => DatePart::IsoWeekYear,
        "$isoDayOfWeek" => DatePart::IsoDayOfWeek,
        _ => return None,
    })
}

/// Expression operators mongod has and this server does not implement.
const UNIMPLEMENTED_OPERATORS: &[&str] = &["$meta", "$sampleRate"];

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
        "$literal" | "$const" => Ok(Expr::Literal(operand.clone())),
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
        "$setEquals" => parse_set_equals(operand, scope),
        "$cond" => parse_cond(operand, scope),
        "$switch" => parse_switch(operand, scope),
        "$filter" => parse_filter(operand, scope),
        "$map" => parse_map(operand, scope),
        "$let" => parse_let(operand, scope),
        "$reduce" => parse_reduce(operand, scope),
        "$zip" => parse_zip(operand, scope),
        "$sortArray" => parse_sort_array(operand, scope),
        "$firstN" | "$lastN" | "$minN" | "$maxN" => parse_array_n(name, operand, scope),
        "$rand" => parse_rand(operand),
        "$function" => function::parse_function(operand, scope),
        "$median" | "$percentile" => parse_quantile(name, operand, scope),
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
        "$dateToParts" => parse_date_to_parts(operand, scope),
        "$dateFromParts" => parse_date_from_parts(operand, scope),
        "$dateAdd" | "$dateSubtract" => parse_date_add(name, operand, scope),
        "$dateDiff" => parse_date_diff(operand, scope),
        "$dateTrunc" => parse_date_trunc(operand, scope),
        "$dateFromString" => parse_date_from_string(operand, scope),
        "$getField" => parse_get_field(operand, scope),
        "$setField" | "$unsetField" => parse_set_field(name, operand, scope),
        "$replaceOne" | "$replaceAll" => parse_replace(name == "$replaceAll", operand, scope),
        "$regexMatch" => parse_regex(RegexMode::Match, operand, scope),
        "$regexFind" => parse_regex(RegexMode::Find, operand, scope),
        "$regexFindAll" => parse_regex(RegexMode::FindAll, operand, scope),
        other if UNIMPLEMENTED_OPERATORS.contains(&other) => Err(not_implemented_operator(other)),
        other => Err(fail(
            ErrorCode::InvalidPipelineOperator,
            format!("Unrecognized expression '{other}'"),
        )),
    }
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
        Bson::Document(document) => tideway_base::bsonutil::encoded_size(document),
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
            9 + code.code.len() + tideway_base::bsonutil::encoded_size(&code.scope)
        }
        _ => 16,
    }
}

fn evaluate(expr: &Expr, vars: &mut Vars) -> CommandResult<Value> {
    match expr {
        Expr::Literal(value) => vars.copied(Some(value.clone())),
        Expr::Field(_) | Expr::Variable(Variable::Root | Variable::Current, _)
            if vars.reads_forbidden =>
        {
            Err(command_variables::reads_document())
        }
        Expr::Field(parts) => vars.copied(field_value(vars.current, parts)),
        Expr::Variable(variable, parts) => {
            let value = match variable {
                Variable::Root if parts.is_empty() => Some(Bson::Document(vars.root.clone())),
                Variable::Root => field_value(vars.root, parts),
                Variable::Current if parts.is_empty() => Some(Bson::Document(vars.current.clone())),
                Variable::Current => field_value(vars.current, parts),
                Variable::Now => walk_path(&Bson::DateTime(vars.now), parts),
                Variable::Remove => None,
                Variable::User(name) => vars
                    .lookup(name)
                    .ok_or_else(|| CommandError::internal(format!("unbound variable {name}")))?
                    .as_ref()
                    .and_then(|value| walk_path(value, parts)),
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
        Expr::Switch { branches, default } => evaluate_switch(branches, default.as_deref(), vars),
        Expr::Filter {
            input,
            name,
            cond,
            limit,
        } => evaluate_filter(input, name, cond, limit.as_deref(), vars),
        Expr::Map { input, name, body } => evaluate_map(input, name, body, vars),
        Expr::Let { bindings, body } => evaluate_let(bindings, body, vars),
        Expr::Reduce {
            input,
            initial,
            body,
        } => evaluate_reduce(input, initial, body, vars),
        Expr::Zip {
            inputs,
            defaults,
            longest,
        } => evaluate_zip(inputs, defaults, *longest, vars),
        Expr::SortArray { input, sort_by } => evaluate_sort_array(input, sort_by, vars),
        Expr::ArrayN { op, n, input } => evaluate_array_n(*op, n, input, vars),
        Expr::Quantile { median, ps, input } => evaluate_quantile(*median, ps, input, vars),
        Expr::Function { program, args } => function::evaluate_function(program, args, vars),
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
        } => evaluate_date_part(*part, date, timezone.as_deref(), vars),
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
        Expr::DateOp(op) => evaluate_date_op(op, vars),
        Expr::GetField { field, input } => evaluate_get_field(field, input.as_deref(), vars),
        Expr::SetField {
            field,
            input,
            value,
        } => evaluate_set_field(field, input, value.as_deref(), vars),
        Expr::Replace {
            all,
            input,
            find,
            replacement,
        } => evaluate_replace(*all, input, find, replacement, vars),
        Expr::Regex {
            mode,
            input,
            source,
        } => evaluate_regex(*mode, input, source, vars),
    }
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
            evaluate_comparison(op, values, collation)
        }
        Op::Not => Ok(Some(Bson::Boolean(!truthy(&one(values)?)))),
        Op::Concat => evaluate_concat(values),
        Op::ToLower | Op::ToUpper => evaluate_case(op, values),
        Op::SubstrCP => evaluate_substr_cp(values),
        Op::StrLenCP => evaluate_str_len_cp(values),
        Op::Split => {
            let (a, b) = two(values)?;
            evaluate_split(a, b)
        }
        Op::IndexOfBytes => evaluate_index_of_bytes(values),
        Op::IndexOfCP => evaluate_index_of_cp(values),
        Op::SubstrBytes => evaluate_substr_bytes(values),
        Op::StrLenBytes => evaluate_str_len_bytes(one(values)?),
        Op::Strcasecmp => {
            let (a, b) = two(values)?;
            evaluate_strcasecmp(a, b)
        }
        Op::Size => evaluate_size(values),
        Op::ArrayElemAt => {
            let (a, b) = two(values)?;
            evaluate_array_elem_at("$arrayElemAt", a, b)
        }
        Op::In => evaluate_in_array(values, collation),
        Op::IsArray => Ok(Some(Bson::Boolean(matches!(
            one(values)?,
            Some(Bson::Array(_))
        )))),
        Op::Slice => evaluate_slice(values),
        Op::ConcatArrays => evaluate_concat_arrays(values),
        Op::First | Op::Last => evaluate_first_last(op, one(values)?),
        Op::ReverseArray => evaluate_reverse_array(values),
        Op::Type => Ok(Some(Bson::String(
            value_type_name(&one(values)?).to_string(),
        ))),
        Op::MergeObjects => evaluate_merge_objects(values),
        Op::Range => evaluate_range(values),
        Op::IndexOfArray => evaluate_index_of_array(values, collation),
        Op::ArrayToObject => evaluate_array_to_object(one(values)?),
        Op::ObjectToArray => evaluate_object_to_array(one(values)?),
        Op::Math(math_op) => evaluate_math(math_op, values),
        Op::Misc(misc_op) => evaluate_misc(misc_op, values),
        Op::Set(set_op) => evaluate_set(set_op, values, collation),
        Op::Trig(trig_op) => evaluate_trig(trig_op, values),
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

#[cfg(test)]
pub(crate) mod fixtures {
    //! Shared helpers for the expression, accumulator and pipeline tests.
    use bson::{Bson, DateTime, Document};

    use super::{Expr, PipelineContext};
    use tideway_base::error::CommandResult;

    /// A fixed `$$NOW`: 2021-03-04T05:06:07.089Z.
    pub(crate) fn now() -> DateTime {
        DateTime::from_millis(1_614_834_367_089)
    }

    pub(crate) fn context() -> PipelineContext {
        PipelineContext::at(now())
    }

    /// Evaluates one expression against `document`.
    pub(crate) fn eval(expression: Bson, document: &Document) -> CommandResult<Option<Bson>> {
        Expr::parse(&expression)?.evaluate_collated(document, now(), None)
    }

    #[track_caller]
    pub(crate) fn eval_ok(expression: Bson, document: &Document) -> Option<Bson> {
        eval(expression, document).expect("expression evaluates")
    }

    /// Identical values (numeric types matter).
    #[track_caller]
    pub(crate) fn assert_value(actual: Option<Bson>, expected: Bson) {
        let actual = actual.expect("a value, not missing");
        assert!(
            crate::compare::identical_values(&actual, &expected),
            "{actual:?} != {expected:?}"
        );
    }
}

#[cfg(test)]
mod test_support {
    //! Helpers the family files' tests share.
    use bson::{Bson, Document};

    use super::fixtures::{assert_value, eval, eval_ok};
    use tideway_base::error::CommandError;

    fn empty() -> Document {
        Document::new()
    }

    #[track_caller]
    pub(super) fn value(expression: Bson) -> Option<Bson> {
        eval_ok(expression, &empty())
    }

    #[track_caller]
    pub(super) fn error(expression: Bson) -> CommandError {
        eval(expression, &empty()).expect_err("expression should fail")
    }

    pub(super) fn check_values(cases: Vec<(Bson, Bson)>) {
        for (expression, expected) in cases {
            let actual = value(expression.clone());
            assert!(
                actual.as_ref() == Some(&expected),
                "{expression:?}: {actual:?} != {expected:?}"
            );
            assert_value(actual, expected);
        }
    }

    #[track_caller]
    pub(super) fn check_errors(cases: Vec<(Bson, i32)>) {
        for (expression, code) in cases {
            assert_eq!(
                error(expression.clone()).code.code(),
                code,
                "{expression:?}"
            );
        }
    }

    /// Evaluates `expression` over each document, against the expected value (`None`: missing).
    #[track_caller]
    pub(super) fn check_over(expression: Bson, cases: Vec<(Document, Bson)>) {
        for (document, expected) in cases {
            let actual = eval_ok(expression.clone(), &document);
            assert!(
                actual.as_ref() == Some(&expected),
                "{document:?}: {actual:?} != {expected:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{assert_value, eval_ok, now};
    use super::test_support::error;
    use bson::{doc, Bson};
    use tideway_base::error::ErrorCode;

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
            error(Bson::Document(doc! {"$meta": "textScore"})).code,
            ErrorCode::NotImplemented
        );
        assert_eq!(
            error(Bson::Document(doc! {"$function": {}})).code,
            ErrorCode::Location31261
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
}
