//! Computing the window functions of `$setWindowFields` over one sorted partition: resolving each
//! document's window (documents or range bounds, mongod's `PartitionIterator` endpoints) and
//! folding each function over it.
//!
//! Invariants: a window is an inclusive index range of the partition or empty; accumulators reuse
//! [`AccumulatorState`] (an empty window is a fresh state's result: 0 for `$sum`, null for `$avg`,
//! `[]` for `$push`, ...); windows every document shares are computed once, windows that start at
//! the partition's first document are accumulated incrementally, others are recomputed per
//! document. Input expressions are evaluated once per document per function.

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};

use super::spec::{Bound, Function, RangeBound, RankKind, Window};
use crate::compare::{compare_values, compare_values_with};
use crate::expr::accumulator::{AccumulatorOp, AccumulatorState};
use crate::expr::PipelineContext;
use crate::expr::TimeUnit;
use crate::expr::{
    add_numbers, evaluate_add, evaluate_divide, evaluate_multiply, evaluate_subtract, is_nullish,
    number_bson, Expr, Value,
};
use crate::numeric::{apply_arithmetic, Arithmetic, Decimal, Number};
use crate::pipeline::fail;
use crate::sort::SortSpec;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// One sorted partition and what every function reads of it.
pub(super) struct Partition<'a> {
    documents: &'a [Document],
    context: &'a PipelineContext,
    /// Each document's first `sortBy` field value (`"$field"`), when there is a `sortBy`.
    sort_values: Vec<Value>,
    /// Each document's sort key of the first `sortBy` field (for the rank functions).
    rank_keys: Vec<Bson>,
}

impl<'a> Partition<'a> {
    pub(super) fn new(
        documents: &'a [Document],
        context: &'a PipelineContext,
        sort_by: Option<&SortSpec>,
        sort_field: Option<&Expr>,
    ) -> CommandResult<Partition<'a>> {
        let sort_values = match sort_field {
            Some(field) => documents
                .iter()
                .map(|document| field.evaluate_in(document, context))
                .collect::<CommandResult<Vec<_>>>()?,
            None => vec![None; documents.len()],
        };
        let rank_keys = match sort_by {
            Some(spec) => documents
                .iter()
                .map(|document| {
                    spec.sort_key(document)
                        .into_iter()
                        .next()
                        .unwrap_or(Bson::Null)
                })
                .collect(),
            None => Vec::new(),
        };
        Ok(Partition {
            documents,
            context,
            sort_values,
            rank_keys,
        })
    }

    fn len(&self) -> usize {
        self.documents.len()
    }

    fn evaluate_all(&self, input: &Expr) -> CommandResult<Vec<Value>> {
        self.documents
            .iter()
            .map(|document| input.evaluate_in(document, self.context))
            .collect()
    }

    /// Each document's window, as an inclusive index range (`None`: empty).
    fn windows(&self, window: &Window) -> CommandResult<Vec<Option<(usize, usize)>>> {
        let count = self.len();
        match window {
            Window::Documents(lower, upper) => Ok((0..count)
                .map(|current| document_window(current, count, *lower, *upper))
                .collect()),
            Window::Range { lower, upper, unit } => (0..count)
                .map(|current| self.range_window(current, lower, upper, *unit))
                .collect(),
        }
    }

    /// mongod's `getEndpointsRangeBased`: the documents whose sort value lies within the bounds
    /// around the current one's.
    fn range_window(
        &self,
        current: usize,
        lower: &RangeBound,
        upper: &RangeBound,
        unit: Option<TimeUnit>,
    ) -> CommandResult<Option<(usize, usize)>> {
        let base = self.sort_values[current].clone().unwrap_or(Bson::Null);
        if unit.is_some() {
            if !matches!(base, Bson::DateTime(_)) {
                return Err(fail(
                    ErrorCode::Location5429513,
                    format!(
                        "Invalid range: Expected the sortBy field to be a Date, but it was {}",
                        type_name(&base)
                    ),
                ));
            }
        } else {
            if matches!(base, Bson::DateTime(_)) {
                return Err(fail(
                    ErrorCode::Location5429413,
                    "Invalid range: For windows that involve date or time ranges, a unit must be \
                     provided.",
                ));
            }
            if Number::from_bson(&base).is_none() {
                return Err(fail(
                    ErrorCode::Location5429414,
                    format!(
                        "Invalid range: Expected the sortBy field to be a number, but it was {}",
                        type_name(&base)
                    ),
                ));
            }
        }
        let expected = |value: &Value| match (value, unit) {
            (Some(Bson::DateTime(_)), Some(_)) => true,
            (Some(value), None) => Number::from_bson(value).is_some(),
            _ => false,
        };
        let threshold = |delta: &Bson| -> Bson {
            match (&base, unit) {
                (Bson::DateTime(date), Some(unit)) => {
                    let amount = Number::from_bson(delta)
                        .and_then(Number::to_i64_truncated)
                        .unwrap_or(0);
                    Bson::DateTime(DateTime::from_millis(
                        unit.add_utc(date.timestamp_millis(), amount),
                    ))
                }
                _ => match (Number::from_bson(&base), Number::from_bson(delta)) {
                    (Some(base), Some(delta)) => number_bson(add_numbers(
                        Number::Decimal(base.to_decimal()),
                        Number::Decimal(delta.to_decimal()),
                    )),
                    _ => Bson::Null,
                },
            }
        };
        let value_at = |index: usize| self.sort_values[index].clone().unwrap_or(Bson::Null);
        let less = |a: &Bson, b: &Bson| compare_values(a, b) == Ordering::Less;
        let count = self.len();
        let lower = match lower {
            RangeBound::Current => current,
            RangeBound::Unbounded => {
                match (0..count).find(|&index| expected(&self.sort_values[index])) {
                    Some(index) => index,
                    None => return Ok(None),
                }
            }
            RangeBound::Delta(delta) => {
                let threshold = threshold(delta);
                // The values are sorted: the first one not below the threshold.
                let index = first_index(0, count, |index| !less(&value_at(index), &threshold));
                if index == count || !expected(&self.sort_values[index]) {
                    return Ok(None);
                }
                index
            }
        };
        let upper = match upper {
            RangeBound::Current => current,
            RangeBound::Unbounded => {
                let start = lower.max(current);
                let end = (start..count)
                    .find(|&index| !expected(&self.sort_values[index]))
                    .unwrap_or(count);
                end.saturating_sub(1)
            }
            RangeBound::Delta(delta) => {
                let threshold = threshold(delta);
                let above = first_index(lower, count, |index| less(&threshold, &value_at(index)));
                if above == lower {
                    return Ok(None);
                }
                above - 1
            }
        };
        if lower > upper {
            return Ok(None);
        }
        Ok(Some((lower, upper)))
    }
}

/// The first index in `from..to` where `found` holds, `found` being false then true along the
/// range (the sort values are sorted); `to` if none.
fn first_index(from: usize, to: usize, found: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (from, to);
    while low < high {
        let middle = low + (high - low) / 2;
        if found(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    low
}

/// mongod's `getEndpointsDocumentBased`: the bounds clamped to the partition.
fn document_window(
    current: usize,
    count: usize,
    lower: Bound,
    upper: Bound,
) -> Option<(usize, usize)> {
    let last = i64::try_from(count).ok()? - 1;
    let current = i64::try_from(current).ok()?;
    let resolve = |bound: Bound, unbounded: i64| match bound {
        Bound::Unbounded => unbounded,
        Bound::Current => current,
        Bound::Offset(offset) => current.saturating_add(offset),
    };
    let (low, high) = (resolve(lower, 0), resolve(upper, last));
    if low > last || high < 0 || low > high {
        return None;
    }
    let (low, high) = (low.max(0), high.min(last));
    Some((usize::try_from(low).ok()?, usize::try_from(high).ok()?))
}

/// Folds each document's window: computed once when every window is the same, incrementally when
/// every window starts at the partition's first document and grows, otherwise anew per document.
fn fold_windows<S: Clone, R: Clone>(
    windows: &[Option<(usize, usize)>],
    new: impl Fn() -> S,
    mut add: impl FnMut(&mut S, usize) -> CommandResult<()>,
    finish: impl Fn(S) -> CommandResult<R>,
) -> CommandResult<Vec<R>> {
    let mut results = Vec::with_capacity(windows.len());
    if let Some(first) = windows.first() {
        if windows.iter().all(|window| window == first) {
            let mut state = new();
            if let Some((low, high)) = *first {
                for index in low..=high {
                    add(&mut state, index)?;
                }
            }
            let result = finish(state)?;
            results.resize(windows.len(), result);
            return Ok(results);
        }
    }
    let growing = windows.windows(2).all(|pair| match (pair[0], pair[1]) {
        (Some((0, a)), Some((0, b))) => a <= b,
        (None, Some((0, _))) | (None, None) => true,
        _ => false,
    }) && windows.iter().flatten().all(|(low, _)| *low == 0);
    if growing {
        let mut state = new();
        let mut added = 0;
        for window in windows {
            match window {
                None => results.push(finish(new())?),
                Some((_, high)) => {
                    while added <= *high {
                        add(&mut state, added)?;
                        added += 1;
                    }
                    results.push(finish(state.clone())?);
                }
            }
        }
        return Ok(results);
    }
    for window in windows {
        let mut state = new();
        if let Some((low, high)) = *window {
            for index in low..=high {
                add(&mut state, index)?;
            }
        }
        results.push(finish(state)?);
    }
    Ok(results)
}

fn int_or_long(value: usize) -> Bson {
    i32::try_from(value).map_or_else(
        |_| Bson::Int64(i64::try_from(value).unwrap_or(i64::MAX)),
        Bson::Int32,
    )
}

fn is_nan(value: &Bson) -> bool {
    Number::from_bson(value).is_some_and(Number::is_nan)
}

impl Function {
    /// The function's value for every document of `partition`, in order.
    pub(super) fn compute(&self, partition: &Partition<'_>) -> CommandResult<Vec<Value>> {
        let collation = partition.context.collation.as_deref();
        match self {
            Function::Accumulator { op, input, window } => {
                let values = partition.evaluate_all(input)?;
                let windows = partition.windows(window)?;
                fold_windows(
                    &windows,
                    || AccumulatorState::new(*op),
                    |state, index| state.add(values[index].clone(), collation),
                    |state| Ok(state.finish()),
                )
            }
            Function::Endpoint {
                last,
                input,
                window,
            } => {
                let windows = partition.windows(window)?;
                windows
                    .iter()
                    .map(|window| match window {
                        None => Ok(Some(Bson::Null)),
                        Some((low, high)) => {
                            let index = if *last { *high } else { *low };
                            input.evaluate_in(&partition.documents[index], partition.context)
                        }
                    })
                    .collect()
            }
            Function::Rank(kind) => Ok(rank(*kind, partition)),
            Function::Shift {
                output,
                by,
                default,
            } => (0..partition.len())
                .map(|current| {
                    let target = i64::try_from(current)
                        .unwrap_or(i64::MAX)
                        .saturating_add(*by);
                    match usize::try_from(target)
                        .ok()
                        .and_then(|target| partition.documents.get(target))
                    {
                        Some(document) => output.evaluate_in(document, partition.context),
                        None => Ok(Some(default.clone())),
                    }
                })
                .collect(),
            Function::Derivative {
                input,
                unit_millis,
                window,
            } => derivative(partition, input, *unit_millis, window),
            Function::Integral {
                input,
                unit_millis,
                window,
            } => integral(partition, input, *unit_millis, window),
            Function::ExpMovingAvg { input, alpha } => {
                exp_moving_avg(&partition.evaluate_all(input)?, *alpha)
            }
            Function::Covariance {
                sample,
                input,
                window,
            } => {
                let values = partition.evaluate_all(input)?;
                let windows = partition.windows(window)?;
                fold_windows(
                    &windows,
                    Covariance::default,
                    |state, index| {
                        state.add(&values[index]);
                        Ok(())
                    },
                    |state| Ok(Some(state.value(*sample))),
                )
            }
            Function::Locf(input) => {
                let mut last = Bson::Null;
                Ok(partition
                    .evaluate_all(input)?
                    .into_iter()
                    .map(|value| {
                        if !is_nullish(&value) {
                            last = value.unwrap_or(Bson::Null);
                        }
                        Some(last.clone())
                    })
                    .collect())
            }
            Function::LinearFill(input) => linear_fill(partition, input),
            Function::MinMaxScaler {
                input,
                output_range,
                window,
            } => min_max_scaler(partition, input, output_range, window),
        }
    }
}

/// The lowest and highest numbers of a window, and the type of its first value that is not a
/// number (missing included).
#[derive(Clone, Default)]
struct Extremes {
    bounds: Option<(Bson, Bson)>,
    not_numeric: Option<&'static str>,
}

impl Extremes {
    fn add(&mut self, value: &Value) {
        let Some(value) = value
            .as_ref()
            .filter(|value| Number::from_bson(value).is_some())
        else {
            self.not_numeric = self.not_numeric.or(Some(value_type(value)));
            return;
        };
        self.bounds = Some(match self.bounds.take() {
            None => (value.clone(), value.clone()),
            Some((low, high)) => (
                if compare_values(value, &low) == Ordering::Less {
                    value.clone()
                } else {
                    low
                },
                if compare_values(value, &high) == Ordering::Greater {
                    value.clone()
                } else {
                    high
                },
            ),
        });
    }
}

/// mongod's `typeName`, `missing` for a missing value.
fn value_type(value: &Value) -> &'static str {
    value.as_ref().map_or("missing", type_name)
}

/// `$minMaxScaler`: `((x - min(X)) / (max(X) - min(X))) * (max - min) + min` over each document's
/// window X, `min` when the window's values are all equal (mongod's `min_max_scaler`).
///
/// Errors follow mongod's executors: a window starting at the partition's first document takes
/// every value in, and any that is not a number fails (10487001, 10487004 for a range window);
/// a sliding window checks the current value (10487000), then that its lowest and highest are
/// numbers (9522905).
fn min_max_scaler(
    partition: &Partition<'_>,
    input: &Expr,
    (min, max): &(Bson, Bson),
    window: &Window,
) -> CommandResult<Vec<Value>> {
    let values = partition.evaluate_all(input)?;
    let not_numeric = |code: ErrorCode, value: &Value| {
        fail(
            code,
            format!(
                "'input' argument to $minMaxScaler must evaluate to a numeric type, got: {}",
                value_type(value)
            ),
        )
    };
    if window.left_unbounded() {
        if let Some(value) = values
            .iter()
            .find(|value| value.as_ref().and_then(Number::from_bson).is_none())
        {
            let code = if window.is_range() {
                ErrorCode::Location10487004
            } else {
                ErrorCode::Location10487001
            };
            return Err(not_numeric(code, value));
        }
    }
    let windows = partition.windows(window)?;
    let extremes = fold_windows(
        &windows,
        Extremes::default,
        |state, index| {
            state.add(&values[index]);
            Ok(())
        },
        Ok,
    )?;
    let range = evaluate_subtract(Some(max.clone()), Some(min.clone()))?;
    let mut output = Vec::with_capacity(values.len());
    for (value, extremes) in values.iter().zip(extremes) {
        if value.as_ref().and_then(Number::from_bson).is_none() {
            return Err(not_numeric(ErrorCode::Location10487000, value));
        }
        if extremes.not_numeric.is_some() {
            return Err(fail(
                ErrorCode::Location9522905,
                "All provided arguments to min_max_scaler::computeResult must be numeric Value \
                 types.",
            ));
        }
        let Some((low, high)) = extremes.bounds else {
            return Err(CommandError::internal(
                "There must always be documents in the current window for $minMaxScaler",
            ));
        };
        if compare_values(&low, &high) == Ordering::Equal {
            output.push(Some(min.clone()));
            continue;
        }
        let unscaled = evaluate_divide(
            evaluate_subtract(value.clone(), Some(low.clone()))?,
            evaluate_subtract(Some(high), Some(low))?,
        )?;
        output.push(evaluate_add(vec![
            evaluate_multiply(vec![unscaled, range.clone()])?,
            Some(min.clone()),
        ])?);
    }
    Ok(output)
}

/// `$rank` (ties share the rank of their first, the next distinct value skips), `$denseRank` (no
/// gaps), `$documentNumber` (position): values compare as their sort keys (nullish values tie,
/// arrays by their sort key element), under the collation.
fn rank(kind: RankKind, partition: &Partition<'_>) -> Vec<Value> {
    let collation = partition.context.collation.clone();
    let mut output = Vec::with_capacity(partition.len());
    let mut rank = 0usize;
    for (index, key) in partition.rank_keys.iter().enumerate() {
        let same = index > 0
            && compare_values_with(&partition.rank_keys[index - 1], key, collation.as_deref())
                == Ordering::Equal;
        rank = match kind {
            RankKind::DocumentNumber => index + 1,
            RankKind::Rank if same => rank,
            RankKind::Rank => index + 1,
            RankKind::DenseRank if same => rank,
            RankKind::DenseRank => rank + 1,
        };
        output.push(Some(int_or_long(rank)));
    }
    output
}

/// `$derivative`: (input at the window's last document − at its first) / (their sort values'
/// difference), per `unit` when the sort values are dates; null for an empty window or no run.
fn derivative(
    partition: &Partition<'_>,
    input: &Expr,
    unit_millis: Option<i64>,
    window: &Window,
) -> CommandResult<Vec<Value>> {
    let windows = partition.windows(window)?;
    let mut output = Vec::with_capacity(windows.len());
    for window in windows {
        let Some((low, high)) = window else {
            output.push(Some(Bson::Null));
            continue;
        };
        let left_time = partition.sort_values[low].clone().unwrap_or(Bson::Null);
        let right_time = partition.sort_values[high].clone().unwrap_or(Bson::Null);
        let dates =
            matches!(left_time, Bson::DateTime(_)) && matches!(right_time, Bson::DateTime(_));
        if unit_millis.is_some() {
            if !dates {
                return Err(fail(
                    ErrorCode::Location5624900,
                    "$derivative with 'unit' expects the sortBy field to be a Date",
                ));
            }
        } else {
            if matches!(left_time, Bson::DateTime(_)) || matches!(right_time, Bson::DateTime(_)) {
                return Err(fail(
                    ErrorCode::Location5624901,
                    "$derivative where the sortBy is a Date requires an 'unit'",
                ));
            }
            if Number::from_bson(&left_time).is_none() || Number::from_bson(&right_time).is_none() {
                return Err(fail(
                    ErrorCode::Location5624902,
                    "$derivative (with no 'unit') expects the sortBy field to be numeric",
                ));
            }
        }
        let run = evaluate_subtract(Some(right_time), Some(left_time))?;
        let rise = evaluate_subtract(
            input.evaluate_in(&partition.documents[high], partition.context)?,
            input.evaluate_in(&partition.documents[low], partition.context)?,
        )?;
        if is_nullish(&rise) {
            return Err(fail(
                ErrorCode::Location5624903,
                "$derivative input must not be null or missing",
            ));
        }
        if run
            .as_ref()
            .and_then(Number::from_bson)
            .is_some_and(Number::is_zero)
        {
            output.push(Some(Bson::Null));
            continue;
        }
        let mut result = evaluate_divide(rise, run)?;
        if let Some(unit) = unit_millis {
            result = evaluate_multiply(vec![result, Some(Bson::Int64(unit))])?;
        }
        output.push(result);
    }
    Ok(output)
}

/// The running state of `$integral` over consecutive documents of a window.
#[derive(Clone)]
struct Integral {
    previous: Option<(Bson, Bson)>,
    total: AccumulatorState,
    nan: bool,
}

/// `$integral`: the trapezoidal rule over the window's (sort value, input) points; NaN if a point
/// is NaN, null for an empty window, divided by `unit` when the sort values are dates.
fn integral(
    partition: &Partition<'_>,
    input: &Expr,
    unit_millis: Option<i64>,
    window: &Window,
) -> CommandResult<Vec<Value>> {
    let values = partition.evaluate_all(input)?;
    let windows = partition.windows(window)?;
    let point = |index: usize| -> CommandResult<(Bson, Bson)> {
        let x = partition.sort_values[index].clone().unwrap_or(Bson::Null);
        let y = values[index].clone().unwrap_or(Bson::Null);
        let x_ok = Number::from_bson(&x).is_some() || matches!(x, Bson::DateTime(_));
        if Number::from_bson(&y).is_none() || !x_ok {
            return Err(fail(
                ErrorCode::Location5423900,
                "The input value of $integral window function must be a vector of 2 value, the \
                 first value must be numeric or date type and the second must be numeric.",
            ));
        }
        if unit_millis.is_some() {
            if !matches!(x, Bson::DateTime(_)) {
                return Err(fail(
                    ErrorCode::Location5423901,
                    "$integral with 'outputUnit' expects the sortBy field to be a Date",
                ));
            }
        } else if Number::from_bson(&x).is_none() {
            return Err(fail(
                ErrorCode::Location5423902,
                "$integral (with no 'outputUnit') expects the sortBy field to be numeric",
            ));
        }
        Ok((x, y))
    };
    fold_windows(
        &windows,
        || Integral {
            previous: None,
            total: AccumulatorState::new(AccumulatorOp::Sum),
            nan: false,
        },
        |state, index| {
            let (x, y) = point(index)?;
            state.nan |= is_nan(&x) || is_nan(&y);
            if let Some((px, py)) = &state.previous {
                let area = if is_nan(px) || is_nan(py) || is_nan(&x) || is_nan(&y) {
                    Some(Bson::Int32(0))
                } else {
                    let delta = evaluate_subtract(Some(x.clone()), Some(px.clone()))?;
                    let sum = evaluate_add(vec![Some(y.clone()), Some(py.clone())])?;
                    let product = evaluate_multiply(vec![sum, delta])?;
                    evaluate_divide(product, Some(Bson::Double(2.0)))?
                };
                state.total.add(area, None)?;
            }
            state.previous = Some((x, y));
            Ok(())
        },
        |state| {
            if state.previous.is_none() {
                return Ok(Some(Bson::Null));
            }
            if state.nan {
                return Ok(Some(Bson::Double(f64::NAN)));
            }
            let total = state.total.finish();
            match unit_millis {
                Some(unit) => evaluate_divide(total, Some(Bson::Int64(unit))),
                None => Ok(total),
            }
        },
    )
}

/// `$expMovingAvg`: each numeric input folds in as `alpha·x + (1−alpha)·previous` in decimal;
/// null until the first number; a double unless a decimal came in.
fn exp_moving_avg(values: &[Value], alpha: Decimal) -> CommandResult<Vec<Value>> {
    let decimal = |number: Option<Number>| match number {
        Some(Number::Decimal(value)) => value,
        Some(other) => other.to_decimal(),
        None => Decimal::NaN,
    };
    let one_minus_alpha = decimal(Some(add_numbers(
        Number::Decimal(Decimal::from_i64(1)),
        Number::Decimal(decimal(apply_arithmetic(
            Arithmetic::Multiply,
            Number::Decimal(alpha),
            Number::Decimal(Decimal::from_i64(-1)),
        ))),
    )));
    let mut current: Option<Decimal> = None;
    let mut saw_decimal = false;
    let mut output = Vec::with_capacity(values.len());
    for value in values {
        if let Some(number) = value.as_ref().and_then(Number::from_bson) {
            saw_decimal |= matches!(number, Number::Decimal(_));
            let x = number.to_decimal();
            current = Some(match current {
                None => x,
                Some(previous) => {
                    let weighted = decimal(apply_arithmetic(
                        Arithmetic::Multiply,
                        Number::Decimal(x),
                        Number::Decimal(alpha),
                    ));
                    let kept = decimal(apply_arithmetic(
                        Arithmetic::Multiply,
                        Number::Decimal(previous),
                        Number::Decimal(one_minus_alpha),
                    ));
                    decimal(Some(add_numbers(
                        Number::Decimal(weighted),
                        Number::Decimal(kept),
                    )))
                }
            });
        }
        output.push(Some(match current {
            None => Bson::Null,
            Some(value) if saw_decimal => number_bson(Number::Decimal(value)),
            Some(value) => Bson::Double(value.to_f64()),
        }));
    }
    Ok(output)
}

/// Running covariance of `[x, y]` pairs (mongod's online algorithm); non-numeric pairs are
/// ignored, non-finite ones make the result non-finite.
#[derive(Clone, Default)]
struct Covariance {
    count: u64,
    mean_x: f64,
    mean_y: f64,
    c_xy: f64,
    non_finite: Option<f64>,
}

impl Covariance {
    fn add(&mut self, value: &Value) {
        let Some(Bson::Array(pair)) = value else {
            return;
        };
        let numbers: Vec<Number> = pair.iter().filter_map(Number::from_bson).collect();
        if pair.len() != 2 || numbers.len() != 2 {
            return;
        }
        let (x, y) = (numbers[0].to_f64(), numbers[1].to_f64());
        if !x.is_finite() || !y.is_finite() {
            let converted = if x.is_nan()
                || y.is_nan()
                || (x.is_infinite() && y.is_infinite() && x.signum() != y.signum())
            {
                f64::NAN
            } else if x.is_infinite() {
                x.signum() * f64::INFINITY
            } else {
                y.signum() * f64::INFINITY
            };
            self.non_finite = Some(self.non_finite.map_or(converted, |sum| sum + converted));
            return;
        }
        self.count += 1;
        let delta_x = x - self.mean_x;
        self.mean_x += delta_x / self.count as f64;
        self.mean_y += (y - self.mean_y) / self.count as f64;
        let delta_y = y - self.mean_y;
        self.c_xy += delta_x * delta_y;
    }

    fn value(&self, sample: bool) -> Bson {
        if self.count == 1 && !sample {
            return Bson::Double(0.0);
        }
        let adjusted = if sample {
            self.count.saturating_sub(1)
        } else {
            self.count
        };
        if adjusted == 0 {
            return match self.non_finite {
                Some(value) => Bson::Double(value),
                None => Bson::Null,
            };
        }
        let total = self.c_xy + self.non_finite.unwrap_or(0.0);
        Bson::Double(total / adjusted as f64)
    }
}

/// `$linearFill`: a null or missing input is interpolated linearly between the nearest
/// documents before and after with a value (by their sort values); null without both.
fn linear_fill(partition: &Partition<'_>, input: &Expr) -> CommandResult<Vec<Value>> {
    let values = partition.evaluate_all(input)?;
    // For each document, the nearest later one with a value and a sort value.
    let mut next_known = vec![None; values.len()];
    let mut following = None;
    for index in (0..values.len()).rev() {
        next_known[index] = following;
        if !is_nullish(&values[index]) && !is_nullish(&partition.sort_values[index]) {
            following = Some(index);
        }
    }
    let mut output = Vec::with_capacity(values.len());
    let mut previous_sort: Option<Bson> = None;
    let mut known: Option<(Bson, Bson)> = None;
    for (index, value) in values.iter().enumerate() {
        if !(is_nullish(value) || value.as_ref().and_then(Number::from_bson).is_some()) {
            return Err(CommandError::type_mismatch(format!(
                "Value to be filled must be numeric or nullish, but found {}",
                value.as_ref().map_or("missing", type_name)
            )));
        }
        let sort = partition.sort_values[index].clone().unwrap_or(Bson::Null);
        let is_date = |value: &Bson| matches!(value, Bson::DateTime(_));
        if !(Number::from_bson(&sort).is_some() || is_date(&sort)) {
            return Err(CommandError::type_mismatch(format!(
                "Value of the sortBy field must be numeric or a date, but found {}",
                type_name(&sort)
            )));
        }
        if let Some(previous) = &previous_sort {
            if compare_values(previous, &sort) == Ordering::Equal {
                return Err(fail(
                    ErrorCode::Location6050106,
                    "There can be no repeated values in the sort field",
                ));
            }
            if is_date(previous) != is_date(&sort) {
                return Err(CommandError::type_mismatch(format!(
                    "Conflicting sort value types, previously received type {}, but found {}",
                    type_name(previous),
                    type_name(&sort)
                )));
            }
        }
        previous_sort = Some(sort.clone());
        if !is_nullish(value) {
            known = Some((sort, value.clone().unwrap_or(Bson::Null)));
            output.push(value.clone());
            continue;
        }
        let Some((x1, y1)) = &known else {
            output.push(Some(Bson::Null));
            continue;
        };
        let Some(later) = next_known[index] else {
            output.push(Some(Bson::Null));
            continue;
        };
        let x2 = partition.sort_values[later].clone();
        let y2 = values[later].clone();
        // y1 + (x - x1) * ((y2 - y1) / (x2 - x1))
        let slope = evaluate_divide(
            evaluate_subtract(y2, Some(y1.clone()))?,
            evaluate_subtract(x2, Some(x1.clone()))?,
        )?;
        let offset = evaluate_multiply(vec![
            evaluate_subtract(Some(sort), Some(x1.clone()))?,
            slope,
        ])?;
        output.push(evaluate_add(vec![Some(y1.clone()), offset])?);
    }
    Ok(output)
}
