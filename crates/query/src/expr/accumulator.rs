//! The accumulators (`$sum`, `$avg`, `$min`, `$max`, `$first`, `$last`, `$push`, `$addToSet`,
//! `$count`, `$mergeObjects`, `$stdDevPop`, `$stdDevSamp`, `$firstN`, `$lastN`, `$minN`,
//! `$maxN`, `$top`, `$bottom`, `$topN`, `$bottomN`, `$median`, `$percentile`, `$concatArrays`,
//! `$setUnion`, and `$accumulator`'s state): what each op is ([`AccumulatorOp`]) and its running
//! state over a sequence of values ([`AccumulatorState`]). `$group` and `$bucketAuto` fold groups
//! through them, `$setWindowFields` windows, and the expressions of those names (`{$sum: [..]}`,
//! `$maxN`, ...) arrays, so all of them keep one set of rules.
//!
//! Invariants:
//! - `$sum`/`$avg` ignore non-numeric values; integer sums are exact (i128) and reported as int
//!   when they fit, else long, else double; double sums are compensated (mongod's
//!   double-double summation), and any decimal makes the result decimal.
//! - `$min`/`$max` ignore null, undefined and missing; `$push`/`$addToSet` ignore missing.
//! - `$stdDevPop`/`$stdDevSamp` take numbers only (Welford's running mean and squared
//!   deviations, as mongod), null without enough of them.
//! - `$firstN`/`$lastN` keep missing values as null, `$minN`/`$maxN` skip null and missing and
//!   answer in ascending / descending order; the `$top` family keeps the first of equal keys.
//! - `$concatArrays`/`$setUnion` skip missing values and refuse anything but an array (14);
//!   `$setUnion` answers its distinct values in BSON order under the collation (mongod's `$group`
//!   leaves the order unspecified; its window function answers this order). Each holds at most
//!   100 MiB of values (146, mongod's `internalQueryMaxConcatArraysBytes` /
//!   `internalQueryMaxSetUnionBytes`).
//! - Nothing else fails on data except `$mergeObjects` on a non-document (40400). A state knows
//!   nothing of groups, windows or documents: it folds the values it is given.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{Bson, Document};

use super::accumulator_js::JsAccumulator;
use super::{
    add_numbers, compare_optional, divide_decimal, fail, is_nullish, merge_object_into,
    number_bson, quantile_result, Expr, Samples, Value,
};
use crate::collation::Collation;
use crate::compare::{compare_values_with, values_equal_with};
use crate::numeric::{Decimal, Number};
use crate::sort::{Direction, SortSpec};
use tideway_base::bsonutil::value_size;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The accumulators this server implements (besides `$accumulator`, whose state is
/// [`AccumulatorState::Js`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccumulatorOp {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    FirstN(usize),
    LastN(usize),
    MinN(usize),
    MaxN(usize),
    /// `$top`/`$bottom` (`single`) and `$topN`/`$bottomN`: the argument is
    /// `{output, sortFields: [...]}`; bit `i` of `descending` is sort field `i`'s direction.
    TopBottom {
        n: usize,
        bottom: bool,
        single: bool,
        descending: u32,
    },
    /// `$median` / `$percentile`: the argument is `{input, p}`.
    Quantile {
        median: bool,
    },
    ConcatArrays,
    SetUnion,
}

/// Most `sortBy` fields a `$top`/`$bottom` accumulator takes (mongod's sort pattern limit).
const MAX_SORT_FIELDS: usize = 32;

impl AccumulatorOp {
    pub(crate) fn from_name(name: &str) -> Option<AccumulatorOp> {
        Some(match name {
            "$sum" => AccumulatorOp::Sum,
            "$avg" => AccumulatorOp::Avg,
            "$min" => AccumulatorOp::Min,
            "$max" => AccumulatorOp::Max,
            "$first" => AccumulatorOp::First,
            "$last" => AccumulatorOp::Last,
            "$push" => AccumulatorOp::Push,
            "$addToSet" => AccumulatorOp::AddToSet,
            "$count" => AccumulatorOp::Count,
            "$mergeObjects" => AccumulatorOp::MergeObjects,
            "$stdDevPop" => AccumulatorOp::StdDevPop,
            "$stdDevSamp" => AccumulatorOp::StdDevSamp,
            // `n` is filled in when the arguments are parsed.
            "$firstN" => AccumulatorOp::FirstN(0),
            "$lastN" => AccumulatorOp::LastN(0),
            "$minN" => AccumulatorOp::MinN(0),
            "$maxN" => AccumulatorOp::MaxN(0),
            "$concatArrays" => AccumulatorOp::ConcatArrays,
            "$setUnion" => AccumulatorOp::SetUnion,
            _ => return None,
        })
    }

    /// The op with `n` (for the N ops, `$top`/`$bottom`/`$topN`/`$bottomN`; others unchanged).
    pub(crate) fn with_n(self, n: usize) -> AccumulatorOp {
        match self {
            AccumulatorOp::FirstN(_) => AccumulatorOp::FirstN(n),
            AccumulatorOp::LastN(_) => AccumulatorOp::LastN(n),
            AccumulatorOp::MinN(_) => AccumulatorOp::MinN(n),
            AccumulatorOp::MaxN(_) => AccumulatorOp::MaxN(n),
            AccumulatorOp::TopBottom {
                bottom,
                single,
                descending,
                ..
            } => AccumulatorOp::TopBottom {
                n,
                bottom,
                single,
                descending,
            },
            other => other,
        }
    }
}

/// Most bytes of values one `$concatArrays` or `$setUnion` holds (mongod's
/// `internalQueryMaxConcatArraysBytes` and `internalQueryMaxSetUnionBytes` defaults).
const MAX_ARRAY_ACCUMULATOR_BYTES: usize = 100 * 1024 * 1024;

/// mongod's `DoubleDoubleSummation` reduced to a compensated (Neumaier) sum.
#[derive(Clone, Copy, Debug, Default)]
struct CompensatedSum {
    sum: f64,
    compensation: f64,
}

impl CompensatedSum {
    fn add(&mut self, value: f64) {
        let total = self.sum + value;
        if !total.is_finite() {
            // Infinities and NaN: plain IEEE arithmetic, compensation no longer meaningful.
            self.sum = total;
            self.compensation = 0.0;
            return;
        }
        if self.sum.abs() >= value.abs() {
            self.compensation += (self.sum - total) + value;
        } else {
            self.compensation += (value - total) + self.sum;
        }
        self.sum = total;
    }

    fn value(&self) -> f64 {
        if self.sum.is_finite() {
            self.sum + self.compensation
        } else {
            self.sum
        }
    }
}

/// Running numeric total: exact integers, compensated doubles, exact decimals.
#[derive(Clone, Debug, Default)]
pub(crate) struct NumericTotal {
    /// Widest type seen: 0 none, 1 int, 2 long, 3 double, 4 decimal.
    widest: u8,
    integers: i128,
    doubles: CompensatedSum,
    decimal: Option<Decimal>,
    count: u64,
}

impl NumericTotal {
    fn add(&mut self, value: &Bson) {
        let Some(number) = Number::from_bson(value) else {
            return;
        };
        self.count += 1;
        match number {
            Number::Int32(v) => {
                self.widest = self.widest.max(1);
                self.integers += i128::from(v);
            }
            Number::Int64(v) => {
                self.widest = self.widest.max(2);
                self.integers += i128::from(v);
            }
            Number::Double(v) => {
                self.widest = self.widest.max(3);
                self.doubles.add(v);
            }
            Number::Decimal(v) => {
                self.widest = 4;
                self.decimal = Some(match self.decimal {
                    None => v,
                    Some(total) => decimal_sum(total, v),
                });
            }
        }
    }

    fn as_double(&self) -> f64 {
        let mut total = self.doubles;
        total.add(self.integers as f64);
        total.value()
    }

    fn as_decimal(&self) -> Decimal {
        let integers = i64::try_from(self.integers)
            .map(Decimal::from_i64)
            .unwrap_or_else(|_| Decimal::from_f64(self.integers as f64));
        let mut total = decimal_sum(integers, Decimal::from_f64(self.doubles.value()));
        if let Some(decimal) = self.decimal {
            total = decimal_sum(total, decimal);
        }
        total
    }

    /// The `$sum` result.
    fn sum(&self) -> Bson {
        match self.widest {
            0 | 1 => match i32::try_from(self.integers) {
                Ok(v) => Bson::Int32(v),
                Err(_) => i64::try_from(self.integers)
                    .map_or(Bson::Double(self.integers as f64), Bson::Int64),
            },
            2 => {
                i64::try_from(self.integers).map_or(Bson::Double(self.integers as f64), Bson::Int64)
            }
            3 => Bson::Double(self.as_double()),
            _ => number_bson(Number::Decimal(self.as_decimal())),
        }
    }

    /// The `$avg` result: null without numeric input, decimal if any decimal, else double.
    fn average(&self) -> Bson {
        if self.count == 0 {
            return Bson::Null;
        }
        if self.widest == 4 {
            let total = self.as_decimal();
            let count = Decimal::from_i64(i64::try_from(self.count).unwrap_or(i64::MAX));
            return number_bson(Number::Decimal(divide_decimal(total, count)));
        }
        let total = if self.widest <= 2 {
            self.integers as f64
        } else {
            self.as_double()
        };
        Bson::Double(total / self.count as f64)
    }
}

fn decimal_sum(a: Decimal, b: Decimal) -> Decimal {
    match add_numbers(Number::Decimal(a), Number::Decimal(b)) {
        Number::Decimal(total) => total,
        other => other.to_decimal(),
    }
}

/// The running state of one accumulator over one group.
#[derive(Clone, Debug)]
pub(crate) enum AccumulatorState {
    Sum(NumericTotal),
    Avg(NumericTotal),
    Min(Value),
    Max(Value),
    /// `None` until the first document; then that document's value (possibly missing).
    First(Option<Value>),
    Last(Value),
    Push(Vec<Bson>),
    AddToSet(Vec<Bson>),
    Count(i64),
    MergeObjects(Document),
    StdDev {
        sample: bool,
        count: u64,
        mean: f64,
        /// Sum of squared deviations from the running mean.
        m2: f64,
    },
    /// `$firstN` (`last: false`) / `$lastN`: at most `n` values, oldest first.
    FirstLastN {
        n: usize,
        last: bool,
        values: std::collections::VecDeque<Bson>,
    },
    /// `$minN` (`max: false`) / `$maxN`: the `n` lowest / highest values, in that order.
    MinMaxN {
        n: usize,
        max: bool,
        values: Vec<Bson>,
    },
    /// `$top`/`$bottom`/`$topN`/`$bottomN`: (sort key, output) pairs in sort order; ties keep
    /// the first seen, as mongod's.
    TopBottom {
        n: usize,
        bottom: bool,
        single: bool,
        descending: u32,
        kept: Vec<(Vec<Bson>, Bson)>,
    },
    /// `$median` / `$percentile`: the `p` values (from the first argument) and the samples.
    Quantile {
        median: bool,
        ps: Vec<f64>,
        samples: Samples,
    },
    /// `$accumulator`: `initArgs` as evaluated when the group started, and the JavaScript
    /// state, `None` before the group's first document.
    Js {
        accumulator: Arc<JsAccumulator>,
        init_args: Value,
        state: Option<Bson>,
    },
    /// `$concatArrays`: the elements of every array, in arrival order, and their size.
    ConcatArrays {
        values: Vec<Bson>,
        bytes: usize,
    },
    /// `$setUnion`: the distinct elements in BSON order (under the collation), and their size.
    SetUnion {
        values: Vec<Bson>,
        bytes: usize,
    },
}

impl AccumulatorState {
    pub(crate) fn new(op: AccumulatorOp) -> AccumulatorState {
        match op {
            AccumulatorOp::Sum => AccumulatorState::Sum(NumericTotal::default()),
            AccumulatorOp::Avg => AccumulatorState::Avg(NumericTotal::default()),
            AccumulatorOp::Min => AccumulatorState::Min(None),
            AccumulatorOp::Max => AccumulatorState::Max(None),
            AccumulatorOp::First => AccumulatorState::First(None),
            AccumulatorOp::Last => AccumulatorState::Last(None),
            AccumulatorOp::Push => AccumulatorState::Push(Vec::new()),
            AccumulatorOp::AddToSet => AccumulatorState::AddToSet(Vec::new()),
            AccumulatorOp::Count => AccumulatorState::Count(0),
            AccumulatorOp::MergeObjects => AccumulatorState::MergeObjects(Document::new()),
            AccumulatorOp::StdDevPop | AccumulatorOp::StdDevSamp => AccumulatorState::StdDev {
                sample: op == AccumulatorOp::StdDevSamp,
                count: 0,
                mean: 0.0,
                m2: 0.0,
            },
            AccumulatorOp::FirstN(n) | AccumulatorOp::LastN(n) => AccumulatorState::FirstLastN {
                n,
                last: matches!(op, AccumulatorOp::LastN(_)),
                values: std::collections::VecDeque::new(),
            },
            AccumulatorOp::MinN(n) | AccumulatorOp::MaxN(n) => AccumulatorState::MinMaxN {
                n,
                max: matches!(op, AccumulatorOp::MaxN(_)),
                values: Vec::new(),
            },
            AccumulatorOp::TopBottom {
                n,
                bottom,
                single,
                descending,
            } => AccumulatorState::TopBottom {
                n,
                bottom,
                single,
                descending,
                kept: Vec::new(),
            },
            AccumulatorOp::Quantile { median } => AccumulatorState::Quantile {
                median,
                ps: Vec::new(),
                samples: Samples::default(),
            },
            AccumulatorOp::ConcatArrays => AccumulatorState::ConcatArrays {
                values: Vec::new(),
                bytes: 0,
            },
            AccumulatorOp::SetUnion => AccumulatorState::SetUnion {
                values: Vec::new(),
                bytes: 0,
            },
        }
    }

    /// Folds one value in.
    pub(crate) fn add(&mut self, value: Value, collation: Option<&Collation>) -> CommandResult<()> {
        match self {
            AccumulatorState::Sum(total) | AccumulatorState::Avg(total) => {
                if let Some(value) = &value {
                    total.add(value);
                }
            }
            AccumulatorState::Min(best) => {
                if !is_nullish(&value)
                    && (best.is_none()
                        || compare_optional(&value, best, collation) == Ordering::Less)
                {
                    *best = value;
                }
            }
            AccumulatorState::Max(best) => {
                if !is_nullish(&value)
                    && (best.is_none()
                        || compare_optional(&value, best, collation) == Ordering::Greater)
                {
                    *best = value;
                }
            }
            AccumulatorState::First(first) => {
                if first.is_none() {
                    *first = Some(value);
                }
            }
            AccumulatorState::Last(last) => *last = value,
            AccumulatorState::Push(values) => values.extend(value),
            AccumulatorState::AddToSet(values) => {
                if let Some(value) = value {
                    if !values
                        .iter()
                        .any(|existing| values_equal_with(existing, &value, collation))
                    {
                        values.push(value);
                    }
                }
            }
            AccumulatorState::Count(count) => *count = count.saturating_add(1),
            AccumulatorState::MergeObjects(output) => merge_object_into(output, value)?,
            AccumulatorState::StdDev {
                count, mean, m2, ..
            } => {
                if let Some(number) = value.as_ref().and_then(Number::from_bson) {
                    let x = number.to_f64();
                    *count += 1;
                    let delta = x - *mean;
                    *mean += delta / *count as f64;
                    *m2 += delta * (x - *mean);
                }
            }
            AccumulatorState::FirstLastN { n, last, values } => {
                if values.len() == *n {
                    if !*last {
                        return Ok(());
                    }
                    values.pop_front();
                }
                values.push_back(value.unwrap_or(Bson::Null));
            }
            AccumulatorState::MinMaxN { n, max, values } => {
                if is_nullish(&value) {
                    return Ok(());
                }
                let Some(value) = value else {
                    return Ok(());
                };
                // Kept in answer order: ascending for `$minN`, descending for `$maxN`; equal
                // values keep their arrival order.
                let before = |kept: &Bson| {
                    let order = compare_values_with(&value, kept, collation);
                    if *max {
                        order == Ordering::Greater
                    } else {
                        order == Ordering::Less
                    }
                };
                let at = values.iter().position(before).unwrap_or(values.len());
                if at < *n {
                    values.insert(at, value);
                    values.truncate(*n);
                }
            }
            AccumulatorState::Quantile { ps, samples, .. } => {
                if let Some(Bson::Document(argument)) = &value {
                    if ps.is_empty() {
                        if let Some(Bson::Array(values)) = argument.get("p") {
                            ps.extend(values.iter().filter_map(|p| p.as_f64()));
                        }
                    }
                    if let Some(input) = argument.get("input") {
                        samples.add(input);
                    }
                }
            }
            AccumulatorState::Js {
                accumulator,
                init_args,
                state,
            } => accumulator.add(state, init_args, value)?,
            AccumulatorState::ConcatArrays { values, bytes } => {
                let Some(elements) = array_input("$concatArrays", value)? else {
                    return Ok(());
                };
                *bytes = bytes.saturating_add(elements.iter().map(value_size).sum());
                check_array_bytes("$concatArrays", *bytes)?;
                values.extend(elements);
            }
            AccumulatorState::SetUnion { values, bytes } => {
                let Some(elements) = array_input("$setUnion", value)? else {
                    return Ok(());
                };
                for element in elements {
                    let at = values
                        .binary_search_by(|kept| compare_values_with(kept, &element, collation));
                    if let Err(at) = at {
                        *bytes = bytes.saturating_add(value_size(&element));
                        check_array_bytes("$setUnion", *bytes)?;
                        values.insert(at, element);
                    }
                }
            }
            AccumulatorState::TopBottom {
                n,
                bottom,
                descending,
                kept,
                ..
            } => {
                let (key, output) = top_bottom_entry(value, *descending, collation);
                let order =
                    |a: &[Bson], b: &[Bson]| compare_sort_keys(a, b, *descending, collation);
                if *bottom && kept.len() == *n {
                    // Full: only a key above the lowest kept one enters (ties keep the first).
                    if kept
                        .first()
                        .is_none_or(|(lowest, _)| order(&key, lowest) != Ordering::Greater)
                    {
                        return Ok(());
                    }
                    kept.remove(0);
                }
                // After every equal key: the first seen stays first.
                let at = kept
                    .partition_point(|(kept_key, _)| order(kept_key, &key) != Ordering::Greater);
                kept.insert(at, (key, output));
                kept.truncate(*n);
            }
        }
        Ok(())
    }

    /// The accumulated result, where computing it can fail (`$accumulator`'s `finalize`).
    pub(crate) fn try_finish(self) -> CommandResult<Value> {
        match self {
            AccumulatorState::Js {
                accumulator, state, ..
            } => accumulator.finish(state),
            other => Ok(other.finish()),
        }
    }

    /// The accumulated result; `None` (missing) only for `$first`/`$last`/`$min`/`$max` over
    /// missing values, which `$group` reports as null. `$accumulator` states need
    /// [`AccumulatorState::try_finish`] (here they answer their unfinalized state).
    pub(crate) fn finish(self) -> Value {
        match self {
            AccumulatorState::Js { state, .. } => state,
            AccumulatorState::Sum(total) => Some(total.sum()),
            AccumulatorState::Avg(total) => Some(total.average()),
            AccumulatorState::Min(best) | AccumulatorState::Max(best) => {
                Some(best.unwrap_or(Bson::Null))
            }
            AccumulatorState::First(first) => first.flatten(),
            AccumulatorState::Last(last) => last,
            AccumulatorState::Push(values)
            | AccumulatorState::AddToSet(values)
            | AccumulatorState::ConcatArrays { values, .. }
            | AccumulatorState::SetUnion { values, .. } => Some(Bson::Array(values)),
            AccumulatorState::Count(count) => {
                Some(i32::try_from(count).map_or(Bson::Int64(count), Bson::Int32))
            }
            AccumulatorState::MergeObjects(output) => Some(Bson::Document(output)),
            AccumulatorState::StdDev {
                sample, count, m2, ..
            } => {
                let divisor = if sample {
                    count.saturating_sub(1)
                } else {
                    count
                };
                Some(if divisor == 0 {
                    Bson::Null
                } else {
                    Bson::Double((m2 / divisor as f64).sqrt())
                })
            }
            AccumulatorState::FirstLastN { values, .. } => {
                Some(Bson::Array(values.into_iter().collect()))
            }
            AccumulatorState::MinMaxN { values, .. } => Some(Bson::Array(values)),
            AccumulatorState::Quantile {
                median,
                ps,
                samples,
            } => Some(quantile_result(median, ps.len(), samples.percentiles(&ps))),
            AccumulatorState::TopBottom { single, kept, .. } => {
                let mut outputs = kept.into_iter().map(|(_, output)| output);
                Some(if single {
                    outputs.next().unwrap_or(Bson::Null)
                } else {
                    Bson::Array(outputs.collect())
                })
            }
        }
    }
}

/// The elements `$concatArrays`/`$setUnion` take from one value: none when it is missing, an
/// array's elements, else mongod's TypeMismatch.
fn array_input(operator: &str, value: Value) -> CommandResult<Option<Vec<Bson>>> {
    match value {
        None => Ok(None),
        Some(Bson::Array(elements)) => Ok(Some(elements)),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "{operator} requires array inputs, but input {} is of type {}",
            tideway_base::display::value_string(&other),
            tideway_base::display::type_name(&other)
        ))),
    }
}

/// mongod's ExceededMemoryLimit (146) for a `$concatArrays`/`$setUnion` over its limit.
fn check_array_bytes(operator: &str, bytes: usize) -> CommandResult<()> {
    if bytes > MAX_ARRAY_ACCUMULATOR_BYTES {
        return Err(CommandError::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "{operator} used too much memory and cannot spill to disk. Memory limit: \
                 {MAX_ARRAY_ACCUMULATOR_BYTES} bytes"
            ),
        ));
    }
    Ok(())
}

/// The sort key and output of one `$top`-family argument (`{output, sortFields}`): a missing
/// output is null; an array sort value stands for its lowest element ascending, its highest
/// descending (an empty one for undefined), as sort keys of documents do.
fn top_bottom_entry(
    value: Value,
    descending: u32,
    collation: Option<&Collation>,
) -> (Vec<Bson>, Bson) {
    let Some(Bson::Document(mut argument)) = value else {
        return (Vec::new(), Bson::Null);
    };
    let output = argument.remove("output").unwrap_or(Bson::Null);
    let fields = match argument.remove("sortFields") {
        Some(Bson::Array(fields)) => fields,
        _ => Vec::new(),
    };
    let key = fields
        .into_iter()
        .enumerate()
        .map(|(index, field)| match field {
            Bson::Array(elements) => {
                let wanted = if descending & (1 << index) != 0 {
                    Ordering::Greater
                } else {
                    Ordering::Less
                };
                elements
                    .into_iter()
                    .reduce(|best, element| {
                        if compare_values_with(&element, &best, collation) == wanted {
                            element
                        } else {
                            best
                        }
                    })
                    .unwrap_or(Bson::Undefined)
            }
            other => other,
        })
        .collect();
    (key, output)
}

/// Orders two `$top`-family sort keys field by field in each field's direction.
fn compare_sort_keys(
    a: &[Bson],
    b: &[Bson],
    descending: u32,
    collation: Option<&Collation>,
) -> Ordering {
    for (index, (x, y)) in a.iter().zip(b).enumerate() {
        let order = compare_values_with(x, y, collation);
        let order = if descending & (1 << index) != 0 {
            order.reverse()
        } else {
            order
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

/// `$top`/`$bottom` (`{sortBy, output}`) and `$topN`/`$bottomN` (`{n, sortBy, output}`): the op
/// (its `n` still 0), the `n` expression (1 for `$top`/`$bottom`) and the argument expression,
/// `{output, sortFields: ["$field", ...]}` (mongod's rewrite).
pub(crate) fn parse_top_bottom(
    operator: &str,
    operand: &Bson,
) -> CommandResult<(AccumulatorOp, Expr, Expr)> {
    let single = matches!(operator, "$top" | "$bottom");
    let bottom = operator.starts_with("$bottom");
    let Bson::Document(arguments) = operand else {
        return Err(fail(
            ErrorCode::Location5788001,
            format!(
                "specification must be an object; found {}",
                tideway_base::display::element_string(operator, operand)
            ),
        ));
    };
    let (mut n, mut output, mut sort_by) = (None, None, None);
    for (name, value) in arguments {
        match name.as_str() {
            "n" if !single => n = Some(value),
            "output" => output = Some(value),
            "sortBy" => sort_by = Some(value),
            other => {
                return Err(fail(
                    ErrorCode::Location5788002,
                    format!("Unknown argument to {operator} '{other}'"),
                ))
            }
        }
    }
    let n = match (single, n) {
        (true, _) => Expr::Literal(Bson::Int32(1)),
        (false, Some(n)) => Expr::parse(n)?,
        (false, None) => return Err(fail(ErrorCode::Location5788003, "Missing value for 'n'")),
    };
    let output =
        output.ok_or_else(|| fail(ErrorCode::Location5788004, "Missing value for 'output'"))?;
    let sort_by =
        sort_by.ok_or_else(|| fail(ErrorCode::Location5788005, "Missing value for 'sortBy'"))?;
    let Bson::Document(sort_by) = sort_by else {
        return Err(fail(
            ErrorCode::Location10065,
            format!(
                "invalid parameter: expected an object (sortBy), found {}",
                tideway_base::display::type_name(sort_by)
            ),
        ));
    };
    let spec = SortSpec::parse(sort_by)?;
    let keys: Vec<(&str, Direction)> = spec.keys().collect();
    if keys.len() > MAX_SORT_FIELDS {
        return Err(fail(
            ErrorCode::BadValue,
            format!("{operator} takes at most {MAX_SORT_FIELDS} sort fields"),
        ));
    }
    let descending = keys
        .iter()
        .enumerate()
        .filter(|(_, (_, direction))| *direction == Direction::Descending)
        .fold(0u32, |mask, (index, _)| mask | (1 << index));
    let sort_fields: Vec<Bson> = keys
        .iter()
        .map(|(field, _)| Bson::String(format!("${field}")))
        .collect();
    let mut argument = Document::new();
    argument.insert("output", output.clone());
    argument.insert("sortFields", sort_fields);
    let op = AccumulatorOp::TopBottom {
        n: 0,
        bottom,
        single,
        descending,
    };
    Ok((op, n, Expr::parse(&Bson::Document(argument))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::fixtures::decimal;
    use crate::expr::fixtures::assert_value;

    #[test]
    fn array_accumulators_are_bounded_like_mongods() {
        // 146 past internalQueryMaxConcatArraysBytes / internalQueryMaxSetUnionBytes (100 MiB).
        let big = Bson::String("x".repeat(1024 * 1024));
        for op in [AccumulatorOp::ConcatArrays, AccumulatorOp::SetUnion] {
            let mut state = AccumulatorState::new(op);
            let mut outcome = Ok(());
            for index in 0..101 {
                let element = Bson::Array(vec![Bson::String(format!("{index}")), big.clone()]);
                outcome = state.add(Some(Bson::Array(vec![element])), None);
                if outcome.is_err() {
                    break;
                }
            }
            let error = outcome.expect_err("over the limit");
            assert_eq!(error.code, ErrorCode::ExceededMemoryLimit, "{op:?}");
        }
    }

    fn accumulate(op: AccumulatorOp, values: Vec<Bson>) -> Value {
        let mut state = AccumulatorState::new(op);
        for value in values {
            state.add(Some(value), None).expect("accumulates");
        }
        state.finish()
    }

    #[test]
    fn sum_keeps_the_narrowest_type_that_holds_the_total() {
        assert_value(accumulate(AccumulatorOp::Sum, vec![]), Bson::Int32(0));
        assert_value(
            accumulate(AccumulatorOp::Sum, vec![Bson::Int32(1), Bson::Int32(2)]),
            Bson::Int32(3),
        );
        assert_value(
            accumulate(
                AccumulatorOp::Sum,
                vec![Bson::Int32(i32::MAX), Bson::Int32(1)],
            ),
            Bson::Int64(2_147_483_648),
        );
        assert_value(
            accumulate(AccumulatorOp::Sum, vec![Bson::Int64(1), Bson::Int32(1)]),
            Bson::Int64(2),
        );
        assert_value(
            accumulate(
                AccumulatorOp::Sum,
                vec![Bson::Int64(i64::MAX), Bson::Int64(1)],
            ),
            Bson::Double(i64::MAX as f64 + 1.0),
        );
        assert_value(
            accumulate(
                AccumulatorOp::Sum,
                vec![Bson::Int32(1), "x".into(), Bson::Null],
            ),
            Bson::Int32(1),
        );
        assert_value(
            accumulate(AccumulatorOp::Sum, vec![Bson::Int32(1), decimal("0.5")]),
            decimal("1.5"),
        );
    }

    #[test]
    fn double_sums_are_compensated_like_mongod() {
        // Naive summation loses the 1.0 (1e16 + 1 rounds back to 1e16).
        assert_value(
            accumulate(
                AccumulatorOp::Sum,
                vec![Bson::Double(1e16), Bson::Double(1.0), Bson::Double(-1e16)],
            ),
            Bson::Double(1.0),
        );
        assert_value(
            accumulate(
                AccumulatorOp::Sum,
                vec![Bson::Double(0.1), Bson::Double(0.2)],
            ),
            Bson::Double(0.1 + 0.2),
        );
    }

    #[test]
    fn avg_ignores_non_numbers_and_is_null_without_numbers() {
        assert_value(
            accumulate(
                AccumulatorOp::Avg,
                vec![Bson::Int32(1), Bson::Int64(2), "x".into()],
            ),
            Bson::Double(1.5),
        );
        assert_value(accumulate(AccumulatorOp::Avg, vec!["x".into()]), Bson::Null);
        assert_value(
            accumulate(AccumulatorOp::Avg, vec![decimal("1"), Bson::Int32(2)]),
            decimal("1.5"),
        );
    }

    #[test]
    fn min_max_ignore_nulls_and_compare_across_types() {
        let values = vec![Bson::Null, Bson::Int32(3), "a".into(), Bson::Double(1.5)];
        assert_value(
            accumulate(AccumulatorOp::Min, values.clone()),
            Bson::Double(1.5),
        );
        assert_value(accumulate(AccumulatorOp::Max, values), "a".into());
        assert_value(accumulate(AccumulatorOp::Min, vec![Bson::Null]), Bson::Null);
    }

    #[test]
    fn add_to_set_deduplicates_by_value_and_push_skips_missing() {
        assert_value(
            accumulate(
                AccumulatorOp::AddToSet,
                vec![Bson::Int32(1), Bson::Double(1.0), Bson::Int32(2)],
            ),
            bson::bson!([1, 2]),
        );
        let mut push = AccumulatorState::new(AccumulatorOp::Push);
        push.add(None, None).expect("accumulates");
        push.add(Some(Bson::Null), None).expect("accumulates");
        assert_value(push.finish(), bson::bson!([null]));
    }

    #[test]
    fn first_and_last_keep_missing_as_missing() {
        let mut first = AccumulatorState::new(AccumulatorOp::First);
        first.add(None, None).expect("accumulates");
        first.add(Some(Bson::Int32(1)), None).expect("accumulates");
        assert_eq!(first.finish(), None);
        assert_value(
            accumulate(AccumulatorOp::Last, vec![Bson::Int32(1), Bson::Int32(2)]),
            Bson::Int32(2),
        );
    }
}
