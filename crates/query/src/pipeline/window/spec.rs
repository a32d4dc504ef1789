//! The window functions' specifications: each function's arguments and `window` bounds, parsed
//! with mongod's rules, codes and messages (`window_function_expression`, `window_bounds`,
//! `window_function_shift`, `MinMaxScalerSpec`); nothing here is evaluated except constants
//! (bounds, `$shift`'s `default`, `n`, `$minMaxScaler`'s `min`/`max`). Execution lives in
//! [`super::functions`].

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};

use super::{element, parse_error};
use crate::compare::compare_values;
use crate::expr::accumulator::{parse_top_bottom, AccumulatorOp};
use crate::expr::accumulator_n::{constant_n, parse_n_accumulator};
use crate::expr::{accumulator_argument, divide_decimal, parse_quantile_spec, Expr, TimeUnit};
use crate::numeric::{Decimal, Number};
use crate::pipeline::fail;
use crate::sort::{Direction, SortSpec};
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// Every window function mongod has.
const KNOWN_FUNCTIONS: &[&str] = &[
    "$addToSet",
    "$avg",
    "$bottom",
    "$bottomN",
    "$concatArrays",
    "$count",
    "$covariancePop",
    "$covarianceSamp",
    "$denseRank",
    "$derivative",
    "$documentNumber",
    "$expMovingAvg",
    "$first",
    "$firstN",
    "$integral",
    "$last",
    "$lastN",
    "$linearFill",
    "$locf",
    "$max",
    "$maxN",
    "$median",
    "$mergeObjects",
    "$min",
    "$minMaxScaler",
    "$minN",
    "$percentile",
    "$push",
    "$rank",
    "$setUnion",
    "$shift",
    "$stdDevPop",
    "$stdDevSamp",
    "$sum",
    "$top",
    "$topN",
];

/// One end of a `documents` window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Bound {
    Unbounded,
    Current,
    /// Documents after (positive) or before (negative) the current one.
    Offset(i64),
}

/// One end of a `range` window.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum RangeBound {
    Unbounded,
    Current,
    /// Added to the current document's sort value (a number, or with a unit an integer count).
    Delta(Bson),
}

/// The `unit` of a time range or of `$derivative`/`$integral`.
fn parse_unit(text: &str) -> CommandResult<TimeUnit> {
    TimeUnit::from_name(text).ok_or_else(|| parse_error(format!("unknown time unit value: {text}")))
}

/// The window of a function: mongod's `WindowBounds`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Window {
    Documents(Bound, Bound),
    Range {
        lower: RangeBound,
        upper: RangeBound,
        unit: Option<TimeUnit>,
    },
}

const WHOLE_PARTITION: Window = Window::Documents(Bound::Unbounded, Bound::Unbounded);

/// A constant bound expression's value (mongod optimizes it and requires a constant).
fn constant_bound(value: &Bson) -> CommandResult<Bson> {
    let constant = Expr::parse(value)?
        .evaluate_constant(DateTime::now())
        .map_err(|_| parse_error("Window bounds expression must be a constant."))?;
    Ok(constant.unwrap_or(Bson::Null))
}

/// A numeric value that is integral and fits an int (mongod's `Value::integral`).
fn integral_int(value: &Bson) -> Option<i64> {
    let number = Number::from_bson(value)?.to_exact_i64()?;
    i32::try_from(number).ok().map(i64::from)
}

impl Window {
    /// Whether the window starts at the partition's first document (mongod's non-removable
    /// windows).
    pub(super) fn left_unbounded(&self) -> bool {
        matches!(
            self,
            Window::Documents(Bound::Unbounded, _)
                | Window::Range {
                    lower: RangeBound::Unbounded,
                    ..
                }
        )
    }

    pub(super) fn is_range(&self) -> bool {
        matches!(self, Window::Range { .. })
    }

    fn parse(spec: &Bson, sort_by: Option<&SortSpec>) -> CommandResult<Window> {
        let Bson::Document(spec) = spec else {
            return Err(parse_error("'window' field must be an object"));
        };
        let (documents, range, unit) = (spec.get("documents"), spec.get("range"), spec.get("unit"));
        if documents.is_some() && range.is_some() {
            return Err(parse_error(
                "Window bounds can specify either 'documents' or 'unit', not both.",
            ));
        }
        if range.is_none() && unit.is_some() {
            return Err(parse_error(
                "Window bounds can only specify 'unit' with range-based bounds.",
            ));
        }
        let unpack = |name: &str, value: &Bson| -> CommandResult<(Bson, Bson)> {
            match value {
                Bson::Array(ends) if ends.len() == 2 => Ok((ends[0].clone(), ends[1].clone())),
                other => Err(parse_error(format!(
                    "Window bounds must be a 2-element array: {}",
                    element(name, other)
                ))),
            }
        };
        let keyword = |value: &Bson| -> CommandResult<Option<Bound>> {
            match value {
                Bson::String(text) if text == "unbounded" => Ok(Some(Bound::Unbounded)),
                Bson::String(text) if text == "current" => Ok(Some(Bound::Current)),
                Bson::String(_) => Err(parse_error(
                    "Window bounds must be 'unbounded', 'current', or a number.",
                )),
                _ => Ok(None),
            }
        };
        if let Some(documents) = documents {
            if spec.len() != 1 {
                return Err(parse_error(
                    "'window' field that specifies documents cannot have other fields",
                ));
            }
            let (lower, upper) = unpack("documents", documents)?;
            let bound = |value: &Bson| -> CommandResult<Bound> {
                if let Some(bound) = keyword(value)? {
                    return Ok(bound);
                }
                let constant = constant_bound(value)?;
                integral_int(&constant)
                    .map(Bound::Offset)
                    .ok_or_else(|| parse_error("Numeric document-based bounds must be an integer"))
            };
            let (lower, upper) = (bound(&lower)?, bound(&upper)?);
            let offset = |bound: Bound| match bound {
                Bound::Current => Some(0),
                Bound::Offset(offset) => Some(offset),
                Bound::Unbounded => None,
            };
            if let (Some(low), Some(high)) = (offset(lower), offset(upper)) {
                if low > high {
                    return Err(fail(
                        ErrorCode::Location5339900,
                        format!("Lower bound must not exceed upper bound: [{low}, {high}]"),
                    ));
                }
            }
            let window = Window::Documents(lower, upper);
            if window != WHOLE_PARTITION && sort_by.is_none() {
                return Err(fail(
                    ErrorCode::Location5339901,
                    "Document-based bounds require a sortBy",
                ));
            }
            return Ok(window);
        }
        let Some(range) = range else {
            if !spec.is_empty() {
                return Err(parse_error(
                    "'window' field can only contain 'documents' as the only argument or 'range' \
                     with an optional 'unit' field",
                ));
            }
            return Ok(WHOLE_PARTITION);
        };
        let (lower, upper) = unpack("range", range)?;
        let unit = match unit {
            Some(unit) => {
                if spec.len() != 2 {
                    return Err(parse_error(
                        "'window' field that specifies unit cannot have other fields besides \
                         'range'",
                    ));
                }
                let Bson::String(unit) = unit else {
                    return Err(parse_error("'unit' must be a string"));
                };
                Some(unit)
            }
            None => {
                if spec.len() != 1 {
                    return Err(parse_error(
                        "'window' field that specifies range cannot have other fields besides \
                         'unit'",
                    ));
                }
                None
            }
        };
        let bound = |value: &Bson| -> CommandResult<RangeBound> {
            match keyword(value)? {
                Some(Bound::Unbounded) => return Ok(RangeBound::Unbounded),
                Some(_) => return Ok(RangeBound::Current),
                None => {}
            }
            let constant = constant_bound(value)?;
            if unit.is_some() {
                if integral_int(&constant).is_none()
                    && Number::from_bson(&constant)
                        .and_then(Number::to_exact_i64)
                        .is_none()
                {
                    return Err(parse_error(
                        "With 'unit', range-based bounds must be an integer",
                    ));
                }
            } else if Number::from_bson(&constant).is_none() {
                return Err(parse_error(
                    "Range-based bounds expression must be a number",
                ));
            }
            Ok(RangeBound::Delta(constant))
        };
        let (lower, upper) = (bound(&lower)?, bound(&upper)?);
        let zero = Bson::Int32(0);
        let as_value = |bound: &RangeBound| match bound {
            RangeBound::Current => Some(zero.clone()),
            RangeBound::Delta(value) => Some(value.clone()),
            RangeBound::Unbounded => None,
        };
        if let (Some(low), Some(high)) = (as_value(&lower), as_value(&upper)) {
            if compare_values(&low, &high) == Ordering::Greater {
                return Err(fail(
                    ErrorCode::Location5339900,
                    format!(
                        "Lower bound must not exceed upper bound: [{}, {}]",
                        value_string(&low),
                        value_string(&high)
                    ),
                ));
            }
        }
        let unit = unit.map(|unit| parse_unit(unit)).transpose()?;
        let keys: Vec<(&str, Direction)> = sort_by
            .map(|spec| spec.keys().collect())
            .unwrap_or_default();
        if keys.len() != 1 {
            return Err(fail(
                ErrorCode::Location5339902,
                "Range-based bounds require sortBy a single field",
            ));
        }
        if keys[0].1 != Direction::Ascending {
            return Err(fail(
                ErrorCode::Location8947401,
                "Range-based bounds require an ascending sortBy",
            ));
        }
        Ok(Window::Range { lower, upper, unit })
    }
}

/// A parsed window function.
#[derive(Clone, Debug)]
pub(super) enum Function {
    /// An accumulator over a window (`$count` is `$count` over `1`).
    Accumulator {
        op: AccumulatorOp,
        input: Expr,
        window: Window,
    },
    /// `$first`/`$last`: the input at the window's first / last document, null if it is empty.
    Endpoint {
        last: bool,
        input: Expr,
        window: Window,
    },
    Rank(RankKind),
    Shift {
        output: Expr,
        by: i64,
        default: Bson,
    },
    Derivative {
        input: Expr,
        unit_millis: Option<i64>,
        window: Window,
    },
    Integral {
        input: Expr,
        unit_millis: Option<i64>,
        window: Window,
    },
    ExpMovingAvg {
        input: Expr,
        alpha: Decimal,
    },
    Covariance {
        sample: bool,
        input: Expr,
        window: Window,
    },
    Locf(Expr),
    LinearFill(Expr),
    /// `$minMaxScaler`: the input scaled from the window's [min, max] into `output_range`'s
    /// (numbers; the window always holds the current document).
    MinMaxScaler {
        input: Expr,
        output_range: Box<(Bson, Bson)>,
        window: Window,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RankKind {
    Rank,
    DenseRank,
    DocumentNumber,
}

/// The `window` argument and the function's own argument of a function spec
/// `{$fn: <argument>, window: {...}}`; any other field is `unknown`'s error.
fn split_spec<'s>(
    spec: &'s Document,
    name: &str,
    unknown: impl Fn(&str) -> String,
) -> CommandResult<(&'s Bson, Option<&'s Bson>)> {
    let (mut argument, mut window) = (None, None);
    for (field, value) in spec {
        if field == "window" {
            window = Some(value);
        } else if field == name {
            argument = Some(value);
        } else if KNOWN_FUNCTIONS.contains(&field.as_str()) {
            return Err(parse_error(
                "Cannot specify two functions in window function spec",
            ));
        } else {
            return Err(parse_error(unknown(field)));
        }
    }
    let argument = argument.ok_or_else(|| CommandError::internal("window function vanished"))?;
    Ok((argument, window))
}

fn unknown_argument(field: &str) -> String {
    format!("Window function found an unknown argument: {field}")
}

fn parse_window(window: Option<&Bson>, sort_by: Option<&SortSpec>) -> CommandResult<Window> {
    window.map_or(Ok(WHOLE_PARTITION), |window| Window::parse(window, sort_by))
}

/// The single `sortBy` field the rank functions and `$linearFill` require.
fn single_sort_field(sort_by: Option<&SortSpec>) -> bool {
    sort_by.is_some_and(|spec| spec.keys().count() == 1)
}

/// `$derivative`/`$integral`: a one-field `sortBy`, then `{$fn: {input, unit}, window}`.
fn parse_with_unit(
    spec: &Document,
    name: &str,
    sort_by: Option<&SortSpec>,
) -> CommandResult<(Expr, Option<i64>, Option<Window>)> {
    let Some(sort_by) = sort_by else {
        return Err(parse_error(format!("{name} requires a sortBy")));
    };
    if sort_by.keys().count() != 1 {
        return Err(parse_error(format!(
            "{name} requires a non-compound sortBy"
        )));
    }
    let mut window = None;
    let mut arguments = None;
    for (field, value) in spec {
        if field == "window" {
            window = Some(Window::parse(value, Some(sort_by))?);
        } else if field == name {
            arguments = Some(value);
        } else {
            return Err(parse_error(format!(
                "{name} got unexpected argument: {field}"
            )));
        }
    }
    let arguments = arguments.ok_or_else(|| CommandError::internal("window function vanished"))?;
    let Bson::Document(arguments) = arguments else {
        return Err(parse_error(format!(
            "{name} expects an object, but got a {}: {}",
            type_name(arguments),
            element(name, arguments)
        )));
    };
    let (mut input, mut unit_millis) = (None, None);
    for (field, value) in arguments {
        match field.as_str() {
            "input" => input = Some(Expr::parse(value)?),
            "unit" => {
                let Bson::String(unit) = value else {
                    return Err(parse_error(format!(
                        "unit' must be a string, but got {}",
                        type_name(value)
                    )));
                };
                let unit = parse_unit(unit)?;
                unit_millis = Some(unit.utc_millis().ok_or_else(|| {
                    fail(ErrorCode::Location5490710, "unit must be 'week' or smaller")
                })?);
            }
            other => {
                return Err(parse_error(format!(
                    "{name} got unexpected argument: {other}"
                )))
            }
        }
    }
    let input =
        input.ok_or_else(|| parse_error(format!("{name} requires an 'input' expression")))?;
    Ok((input, unit_millis, window))
}

impl Function {
    pub(super) fn parse(spec: &Document, sort_by: Option<&SortSpec>) -> CommandResult<Function> {
        let Some(name) = spec.keys().find(|key| key.starts_with('$')) else {
            return Err(parse_error(match spec.keys().next() {
                Some(first) => format!("Expected a $-prefixed window function, {first}"),
                None => "Expected a $-prefixed window function".to_string(),
            }));
        };
        let name = name.as_str();
        if !KNOWN_FUNCTIONS.contains(&name) {
            return Err(parse_error(format!("Unrecognized window function, {name}")));
        }
        match name {
            "$rank" | "$denseRank" | "$documentNumber" => {
                if spec.len() != 1 {
                    return Err(fail(
                        ErrorCode::Location5371601,
                        "Rank style window functions take no other arguments",
                    ));
                }
                if !matches!(spec.get(name), Some(Bson::Document(arguments)) if arguments.is_empty())
                {
                    return Err(fail(
                        ErrorCode::Location5371603,
                        format!("{name} must be specified with '{{}}' as the value"),
                    ));
                }
                if !single_sort_field(sort_by) {
                    return Err(fail(
                        ErrorCode::Location5371602,
                        format!(
                            "{name} must be specified with a top level sortBy expression with \
                             exactly one element"
                        ),
                    ));
                }
                Ok(Function::Rank(match name {
                    "$rank" => RankKind::Rank,
                    "$denseRank" => RankKind::DenseRank,
                    _ => RankKind::DocumentNumber,
                }))
            }
            "$shift" => parse_shift(spec, sort_by),
            "$minMaxScaler" => parse_min_max_scaler(spec, sort_by),
            "$expMovingAvg" => parse_exp_moving_avg(spec, sort_by),
            "$derivative" => {
                let (input, unit_millis, window) = parse_with_unit(spec, name, sort_by)?;
                let window = window
                    .ok_or_else(|| parse_error("$derivative requires explicit window bounds"))?;
                Ok(Function::Derivative {
                    input,
                    unit_millis,
                    window,
                })
            }
            "$integral" => {
                let (input, unit_millis, window) = parse_with_unit(spec, name, sort_by)?;
                Ok(Function::Integral {
                    input,
                    unit_millis,
                    window: window.unwrap_or(WHOLE_PARTITION),
                })
            }
            "$locf" | "$linearFill" => {
                let (argument, window) = split_spec(spec, name, unknown_argument)?;
                if window.is_some() {
                    return Err(parse_error(format!(
                        "'window' field is not allowed in {name}"
                    )));
                }
                let input = Expr::parse(argument)?;
                if name == "$locf" {
                    return Ok(Function::Locf(input));
                }
                if !single_sort_field(sort_by) {
                    return Err(fail(
                        ErrorCode::Location605001,
                        "$linearFill must be specified with a top level sortBy expression with \
                         exactly one element",
                    ));
                }
                Ok(Function::LinearFill(input))
            }
            "$first" | "$last" => {
                let (argument, window) = split_spec(spec, name, |field| {
                    format!("{name} got unexpected argument: {field}")
                })?;
                Ok(Function::Endpoint {
                    last: name == "$last",
                    input: Expr::parse(argument)?,
                    window: parse_window(window, sort_by)?,
                })
            }
            "$count" => {
                let (argument, window) = split_spec(spec, name, unknown_argument)?;
                if !matches!(argument, Bson::Document(arguments) if arguments.is_empty()) {
                    return Err(parse_error("$count only accepts an empty object as input"));
                }
                Ok(Function::Accumulator {
                    op: AccumulatorOp::Count,
                    input: Expr::Literal(Bson::Int32(1)),
                    window: parse_window(window, sort_by)?,
                })
            }
            "$covariancePop" | "$covarianceSamp" => {
                let (argument, window) = split_spec(spec, name, unknown_argument)?;
                Ok(Function::Covariance {
                    sample: name == "$covarianceSamp",
                    input: Expr::parse(argument)?,
                    window: parse_window(window, sort_by)?,
                })
            }
            "$median" | "$percentile" => {
                let (argument, window) = split_spec(spec, name, unknown_argument)?;
                let median = name == "$median";
                let code = if median {
                    ErrorCode::Location7436100
                } else {
                    ErrorCode::Location7429703
                };
                let quantile = parse_quantile_spec(name, argument, code)?;
                Ok(Function::Accumulator {
                    op: AccumulatorOp::Quantile { median },
                    input: accumulator_argument(&quantile)?,
                    window: parse_window(window, sort_by)?,
                })
            }
            "$firstN" | "$lastN" | "$minN" | "$maxN" | "$top" | "$bottom" | "$topN"
            | "$bottomN" => {
                let (argument, window) = split_spec(spec, name, |field| {
                    format!("{name} got unexpected argument: {field}")
                })?;
                let (op, n, input) = match AccumulatorOp::from_name(name) {
                    Some(op) => parse_n_accumulator(name, op, argument)?,
                    None => parse_top_bottom(name, argument)?,
                };
                Ok(Function::Accumulator {
                    op: op.with_n(constant_n(name, &n)?),
                    input,
                    window: parse_window(window, sort_by)?,
                })
            }
            _ => {
                let op = AccumulatorOp::from_name(name).ok_or_else(|| {
                    fail(
                        ErrorCode::NotImplemented,
                        format!("window function {name} is not supported by this server"),
                    )
                })?;
                let (argument, window) = split_spec(spec, name, unknown_argument)?;
                Ok(Function::Accumulator {
                    op,
                    input: Expr::parse(argument)?,
                    window: parse_window(window, sort_by)?,
                })
            }
        }
    }
}

fn parse_shift(spec: &Document, sort_by: Option<&SortSpec>) -> CommandResult<Function> {
    let mut shift = None;
    for (field, value) in spec {
        if field == "window" {
            return Err(parse_error("$shift does not accept a 'window' field"));
        } else if field == "$shift" {
            let Bson::Document(arguments) = value else {
                return Err(parse_error("Argument to $shift must be an object"));
            };
            shift = Some(parse_shift_arguments(arguments)?);
        } else if KNOWN_FUNCTIONS.contains(&field.as_str()) {
            return Err(parse_error(
                "Cannot specify multiple functions in window function spec",
            ));
        } else {
            return Err(parse_error(unknown_argument(field)));
        }
    }
    if sort_by.is_none() {
        return Err(parse_error("'$shift' requires a sortBy"));
    }
    shift.ok_or_else(|| CommandError::internal("$shift vanished"))
}

fn parse_shift_arguments(arguments: &Document) -> CommandResult<Function> {
    let (mut output, mut by, mut default) = (None, None, None);
    for (field, value) in arguments {
        match field.as_str() {
            "output" => output = Some(Expr::parse(value)?),
            "default" => {
                let constant = Expr::parse(value)?
                    .evaluate_constant(DateTime::now())
                    .map_err(|_| {
                        parse_error("'$shift:default' expression must yield a constant value.")
                    })?;
                default = Some(constant.unwrap_or(Bson::Null));
            }
            "by" => {
                by = Some(integral_int(value).ok_or_else(|| {
                    parse_error(format!(
                        "'$shift:by' field must be an integer, but found  {}",
                        element("by", value)
                    ))
                })?);
            }
            _ => return Err(parse_error("Unknown argument in $shift")),
        }
    }
    let output = output.ok_or_else(|| parse_error("$shift requires an 'output' expression."))?;
    let by = by.ok_or_else(|| parse_error("$shift requires 'by' as an integer value."))?;
    Ok(Function::Shift {
        output,
        by,
        default: default.unwrap_or(Bson::Null),
    })
}

fn parse_exp_moving_avg(spec: &Document, sort_by: Option<&SortSpec>) -> CommandResult<Function> {
    let arguments = match spec.get("$expMovingAvg") {
        Some(Bson::Document(arguments)) if spec.len() == 1 => arguments,
        _ => {
            return Err(parse_error(
                "$expMovingAvg must have exactly one argument that is an object",
            ))
        }
    };
    const SHAPE: &str = "$expMovingAvg sub object must have exactly two fields: An 'input' field, \
                         and either an 'N' field or an 'alpha' field";
    if arguments.len() != 2 || !arguments.contains_key("input") {
        return Err(parse_error(SHAPE));
    }
    if sort_by.is_none() {
        return Err(parse_error("$expMovingAvg requires an explicit 'sortBy'"));
    }
    let input = Expr::parse(arguments.get("input").unwrap_or(&Bson::Null))?;
    let alpha = if let Some(n) = arguments.get("N") {
        let number = Number::from_bson(n).ok_or_else(|| {
            parse_error(format!(
                "'N' field must be an integer, but found type {}",
                type_name(n)
            ))
        })?;
        let value = number.to_f64();
        if value != value.floor() {
            return Err(parse_error(format!(
                "'N' field must be an integer, but found  {}. To use a non-integer, use the \
                 'alpha' argument instead",
                element("N", n)
            )));
        }
        let n = number.to_i64_truncated().unwrap_or(i64::MAX);
        if n <= 0 {
            return Err(parse_error(format!(
                "'N' must be greater than zero. Got {n}"
            )));
        }
        divide_decimal(Decimal::from_i64(2), Decimal::from_i64(n.saturating_add(1)))
    } else if let Some(alpha) = arguments.get("alpha") {
        let number =
            Number::from_bson(alpha).ok_or_else(|| parse_error("'alpha' must be a number"))?;
        let value = number.to_decimal();
        let in_range = compare_values(alpha, &Bson::Int32(0)) == Ordering::Greater
            && compare_values(alpha, &Bson::Int32(1)) == Ordering::Less;
        if !in_range {
            return Err(parse_error(format!(
                "'alpha' must be between 0 and 1 (exclusive), found {}",
                element("alpha", alpha)
            )));
        }
        value
    } else {
        return Err(parse_error(format!(
            "Got unrecognized field in $expMovingAvg{SHAPE}"
        )));
    };
    Ok(Function::ExpMovingAvg { input, alpha })
}

/// `$minMaxScaler`: mongod's `MinMaxScalerSpec` IDL (`{$minMaxScaler: {input, min, max},
/// window}`; 40415 unknown field, 40414 missing `input`, 14 not an object), then the window,
/// which must hold the current document (a lower bound above 0 or an upper one below 0 is
/// FailedToParse), then `min`/`max`: both or neither, constant numbers, `min` < `max` (default
/// 0 and 1).
fn parse_min_max_scaler(spec: &Document, sort_by: Option<&SortSpec>) -> CommandResult<Function> {
    const NAME: &str = "$minMaxScaler";
    const ROOT: &str = "root";
    const ARGUMENTS: &str = "root.$minMaxScaler";
    let (mut arguments, mut window) = (None, None);
    for (field, value) in spec {
        match (field.as_str(), value) {
            (NAME, Bson::Document(fields)) => {
                let (mut input, mut min, mut max) = (None, None, None);
                for (argument, value) in fields {
                    match argument.as_str() {
                        "input" => input = Some(value),
                        "min" => min = Some(value),
                        "max" => max = Some(value),
                        other => return Err(CommandError::idl_unknown_field(ARGUMENTS, other)),
                    }
                }
                let input =
                    input.ok_or_else(|| CommandError::idl_missing_field(ARGUMENTS, "input"))?;
                arguments = Some((input, min, max));
            }
            ("window", Bson::Document(_)) => window = Some(value),
            (NAME | "window", other) => {
                return Err(CommandError::idl_wrong_type(
                    ROOT,
                    field,
                    type_name(other),
                    "object",
                ))
            }
            (other, _) => return Err(CommandError::idl_unknown_field(ROOT, other)),
        }
    }
    let (input, min, max) = arguments.ok_or_else(|| CommandError::idl_missing_field(ROOT, NAME))?;
    let window = parse_window(window, sort_by)?;
    let (lower, upper) = match &window {
        Window::Documents(lower, upper) => {
            let offset = |bound: &Bound| match bound {
                Bound::Offset(offset) => Some(*offset as f64),
                _ => None,
            };
            (offset(lower), offset(upper))
        }
        Window::Range { lower, upper, .. } => {
            let delta = |bound: &RangeBound| match bound {
                RangeBound::Delta(delta) => Number::from_bson(delta).map(Number::to_f64),
                _ => None,
            };
            (delta(lower), delta(upper))
        }
    };
    const WHY: &str = "(the current doc), as $minMaxScaler must ensure that the current document \
                       being processed is always within the configured window.";
    if let Some(lower) = lower.filter(|lower| *lower > 0.0) {
        return Err(parse_error(format!(
            "Lower specified bound cannot be greater than 0 {WHY} Lower specified bound = \
             {lower:.6}"
        )));
    }
    if let Some(upper) = upper.filter(|upper| *upper < 0.0) {
        return Err(parse_error(format!(
            "Upper specified bound cannot be less than 0 {WHY} Upper specified bound = \
             {upper:.6}"
        )));
    }
    let input = Expr::parse(input)?;
    let constant = |name: &str, value: &Bson| -> CommandResult<Bson> {
        let value = match Expr::parse(value)?.evaluate_constant(DateTime::now()) {
            Ok(value) => value,
            Err(error) if error.code == ErrorCode::Location4890500 => {
                return Err(parse_error(format!(
                    "'{name}' argument to $minMaxScaler must be a constant"
                )))
            }
            Err(error) => return Err(error),
        };
        value
            .filter(|value| Number::from_bson(value).is_some())
            .ok_or_else(|| {
                parse_error(format!(
                    "'{name}' argument to $minMaxScaler must be a numeric type"
                ))
            })
    };
    let (min, max) = match (min, max) {
        (None, None) => (Bson::Int32(0), Bson::Int32(1)),
        (Some(min), Some(max)) => {
            let (min, max) = (constant("min", min)?, constant("max", max)?);
            if compare_values(&min, &max) != Ordering::Less {
                return Err(parse_error(
                    "the 'max' must be strictly greater than 'min', as arguments to $minMaxScaler",
                ));
            }
            (min, max)
        }
        _ => {
            return Err(parse_error(
                "Only one of 'min' and 'max' were specified as an argument to $minMaxScaler. \
                 Neither or both must be specified",
            ))
        }
    };
    Ok(Function::MinMaxScaler {
        input,
        output_range: Box::new((min, max)),
        window,
    })
}
