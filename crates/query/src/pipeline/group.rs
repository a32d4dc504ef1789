//! `$group`: grouping documents by an `_id` expression and folding each group through the
//! accumulators of [`crate::expr::accumulator`] (the rules of each accumulator live there, shared
//! with the expressions and window functions of those names), and the table of groups a run
//! holds, with its memory estimate.
//!
//! Invariants:
//! - Group keys are equal exactly when [`values_equal`] says so (so `1`, `1.0` and
//!   `NumberLong(1)` share a group, and the first key seen is the one reported); a missing `_id`
//!   value groups as null. Groups are emitted in the order their first document arrived.
//! - The `n` of `$firstN`/`$lastN`/`$minN`/`$maxN`/`$topN`/`$bottomN` (and `$accumulator`'s
//!   `initArgs`) is evaluated when a group starts, against the group key's fields
//!   ([`key_fields`]), as mongod's `startNewGroup`; a bad `n` fails then (57879xx).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bson::{Bson, Document};

use crate::collation::{Collation, CollationChoice};
use crate::compare::values_equal_with;
use crate::expr::accumulator::{parse_top_bottom, AccumulatorOp, AccumulatorState};
use crate::expr::accumulator_js::{parse_js_accumulator, JsAccumulator};
use crate::expr::accumulator_n::{key_fields, n_value, parse_n_accumulator};
use crate::expr::{accumulator_argument, parse_quantile_spec, Expr, PipelineContext, Value};
use crate::numeric::Number;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// What one `$group` field folds with: a built-in accumulator, one with an `n` (its `n`
/// expression, evaluated when a group starts), or `$accumulator` (whose argument is
/// `accumulateArgs`).
#[derive(Clone, Debug)]
enum FieldOp {
    Builtin(AccumulatorOp),
    /// `$firstN $lastN $minN $maxN $topN $bottomN` (`$top`/`$bottom`: `n` is 1); the op's own `n`
    /// is a placeholder.
    WithN(AccumulatorOp, Expr),
    Js(Arc<JsAccumulator>),
}

impl FieldOp {
    /// A new group's state. `key_fields` is what the initializers (`n`, `initArgs`) read: the
    /// group key's fields in `$group` ([`key_fields`]), an empty document in `$bucketAuto`.
    fn new_state(
        &self,
        key_fields: &Document,
        context: &PipelineContext,
    ) -> CommandResult<AccumulatorState> {
        Ok(match self {
            FieldOp::Builtin(op) => AccumulatorState::new(*op),
            FieldOp::WithN(op, n) => {
                let n = n_value(&n.evaluate_in(key_fields, context)?)?;
                AccumulatorState::new(op.with_n(n))
            }
            FieldOp::Js(accumulator) => AccumulatorState::Js {
                accumulator: accumulator.clone(),
                init_args: accumulator.init_args(key_fields, context)?,
                state: None,
            },
        })
    }
}

/// A parsed `$group` stage.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    id: Expr,
    fields: Vec<(String, FieldOp, Expr)>,
}

fn group_error(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

impl Group {
    /// Whether the `_id` and every accumulator argument are literals: the result then depends
    /// only on how many documents come in.
    pub(crate) fn is_constant(&self) -> bool {
        matches!(self.id, Expr::Literal(_))
            && self.fields.iter().all(|(_, op, argument)| {
                matches!(argument, Expr::Literal(_))
                    && matches!(op, FieldOp::Builtin(_) | FieldOp::WithN(..))
            })
    }

    /// Parses `{_id: expr, field: {$accumulator: expr}, ...}`.
    pub(crate) fn parse(spec: &Bson) -> CommandResult<Group> {
        let Bson::Document(spec) = spec else {
            return Err(group_error(
                ErrorCode::Location15947,
                "a group's fields must be specified in an object",
            ));
        };
        let mut id = None;
        let mut fields = Vec::new();
        for (name, value) in spec {
            if name == "_id" {
                id = Some(Expr::parse(value)?);
                continue;
            }
            if name.starts_with('$') {
                return Err(group_error(
                    ErrorCode::Location40236,
                    format!("The field name '{name}' cannot be an operator name"),
                ));
            }
            if name.contains('.') {
                return Err(group_error(
                    ErrorCode::Location40235,
                    format!("The field name '{name}' cannot contain '.'"),
                ));
            }
            let Bson::Document(accumulator) = value else {
                return Err(group_error(
                    ErrorCode::Location40234,
                    format!("The field '{name}' must be an accumulator object"),
                ));
            };
            if accumulator.len() != 1 {
                return Err(group_error(
                    ErrorCode::Location40238,
                    format!("The field '{name}' must specify one accumulator"),
                ));
            }
            let Some((operator, operand)) = accumulator.iter().next() else {
                return Err(CommandError::internal("accumulator vanished"));
            };
            if matches!(operator.as_str(), "$median" | "$percentile") {
                let median = operator == "$median";
                let code = if median {
                    ErrorCode::Location7436100
                } else {
                    ErrorCode::Location7429703
                };
                let spec = parse_quantile_spec(operator, operand, code)?;
                fields.push((
                    name.clone(),
                    FieldOp::Builtin(AccumulatorOp::Quantile { median }),
                    accumulator_argument(&spec)?,
                ));
                continue;
            }
            if matches!(operator.as_str(), "$top" | "$bottom" | "$topN" | "$bottomN") {
                let (op, n, argument) = parse_top_bottom(operator, operand)?;
                fields.push((name.clone(), FieldOp::WithN(op, n), argument));
                continue;
            }
            if operator == "$accumulator" {
                let (accumulator, accumulate_args) = parse_js_accumulator(operand)?;
                fields.push((name.clone(), FieldOp::Js(accumulator), accumulate_args));
                continue;
            }
            let Some(op) = AccumulatorOp::from_name(operator) else {
                return Err(group_error(
                    ErrorCode::Location15952,
                    format!("unknown group operator '{operator}'"),
                ));
            };
            if op == AccumulatorOp::Count {
                if !matches!(operand, Bson::Document(arguments) if arguments.is_empty()) {
                    return Err(group_error(
                        ErrorCode::Location40237,
                        "$count takes no arguments, i.e. $count:{}",
                    ));
                }
                fields.push((
                    name.clone(),
                    FieldOp::Builtin(op),
                    Expr::Literal(Bson::Int32(1)),
                ));
                continue;
            }
            if matches!(
                op,
                AccumulatorOp::FirstN(_)
                    | AccumulatorOp::LastN(_)
                    | AccumulatorOp::MinN(_)
                    | AccumulatorOp::MaxN(_)
            ) {
                let (op, n, input) = parse_n_accumulator(operator, op, operand)?;
                fields.push((name.clone(), FieldOp::WithN(op, n), input));
                continue;
            }
            if matches!(operand, Bson::Array(_)) {
                return Err(group_error(
                    ErrorCode::Location40237,
                    format!("The {operator} accumulator is a unary operator"),
                ));
            }
            fields.push((name.clone(), FieldOp::Builtin(op), Expr::parse(operand)?));
        }
        let id = id.ok_or_else(|| {
            group_error(
                ErrorCode::Location15955,
                "a group specification must include an _id",
            )
        })?;
        Ok(Group { id, fields })
    }

    /// A `$group` equivalent to `{_id: id, field: {$sum: 1}}` (for `$sortByCount`).
    pub(crate) fn counting(id: Expr, field: &str) -> Group {
        Group {
            id,
            fields: vec![(
                field.to_string(),
                FieldOp::Builtin(AccumulatorOp::Sum),
                Expr::Literal(Bson::Int32(1)),
            )],
        }
    }

    /// Groups `input` and returns one document per group: `_id` first, then the accumulator
    /// fields in specification order.
    /// [`Group::run`] over `count` documents, for a group that [`Group::is_constant`]: the key
    /// and every accumulator argument are evaluated once, and each argument is accumulated
    /// `count` times, without the documents.
    pub(crate) fn run_on_copies(
        &self,
        count: u64,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let empty = Document::new();
        let key = self.id.evaluate_in(&empty, context)?.unwrap_or(Bson::Null);
        let mut states = self.new_states(&key_fields(&key), context)?;
        for ((_, _, expr), state) in self.fields.iter().zip(states.iter_mut()) {
            let value = expr.evaluate_in(&empty, context)?;
            for _ in 0..count {
                state.add(value.clone(), context.collation.as_deref())?;
            }
        }
        let mut output = Document::new();
        output.insert("_id", key);
        for ((name, _, _), state) in self.fields.iter().zip(states) {
            output.insert(name.clone(), state.finish().unwrap_or(Bson::Null));
        }
        Ok(vec![output])
    }

    pub(crate) fn run(
        &self,
        input: Vec<Document>,
        context: &PipelineContext,
    ) -> CommandResult<Vec<Document>> {
        let mut table = GroupTable::new(self.clone(), context.collation.clone());
        for document in &input {
            let (key, values) = self.evaluate(document, context)?;
            table.add(key, values, context)?;
        }
        table.finish().into_iter().collect()
    }

    /// The group key of `document` and the argument of each accumulator.
    pub(crate) fn evaluate(
        &self,
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<(Bson, Vec<Value>)> {
        let key = self
            .id
            .evaluate_in(document, context)?
            .unwrap_or(Bson::Null);
        let values = self
            .fields
            .iter()
            .map(|(_, _, expr)| expr.evaluate_in(document, context))
            .collect::<CommandResult<Vec<_>>>()?;
        Ok((key, values))
    }

    /// Folds `document`'s accumulator arguments into `states`.
    pub(crate) fn accumulate(
        &self,
        states: &mut [AccumulatorState],
        document: &Document,
        context: &PipelineContext,
    ) -> CommandResult<()> {
        for ((_, _, expr), state) in self.fields.iter().zip(states.iter_mut()) {
            state.add(
                expr.evaluate_in(document, context)?,
                context.collation.as_deref(),
            )?;
        }
        Ok(())
    }

    /// The states of a group that starts now, its initializers (`n`, `initArgs`) evaluated
    /// against `key_fields` ([`FieldOp::new_state`]).
    pub(crate) fn new_states(
        &self,
        key_fields: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Vec<AccumulatorState>> {
        self.fields
            .iter()
            .map(|(_, op, _)| op.new_state(key_fields, context))
            .collect()
    }

    /// The output document of one group.
    pub(crate) fn output(
        &self,
        key: Bson,
        states: Vec<AccumulatorState>,
    ) -> CommandResult<Document> {
        let mut output = Document::new();
        output.insert("_id", key);
        for ((name, _, _), state) in self.fields.iter().zip(states) {
            output.insert(name.clone(), state.try_finish()?.unwrap_or(Bson::Null));
        }
        Ok(output)
    }
}

fn add_all(
    states: &mut [AccumulatorState],
    values: Vec<Value>,
    collation: Option<&Collation>,
) -> CommandResult<()> {
    for (state, value) in states.iter_mut().zip(values) {
        state.add(value, collation)?;
    }
    Ok(())
}

/// Bytes a group is assumed to hold beyond its key and collected values.
const GROUP_OVERHEAD_BYTES: usize = 96;

fn value_bytes(value: &Value) -> usize {
    value.as_ref().map_or(0, |value| {
        tideway_base::bsonutil::encoded_size(&bson::doc! {"": value.clone()})
    })
}

/// The groups of one `$group` run so far, in first-seen order, with an estimate of the memory
/// they hold (keys, and the values `$push`, `$addToSet` and `$mergeObjects` collect).
pub(crate) struct GroupTable {
    group: Group,
    /// Keys equal under it are one group; accumulators compare under it.
    collation: CollationChoice,
    keys: Vec<Bson>,
    /// `None` once taken out with [`GroupTable::take`].
    states: Vec<Option<Vec<AccumulatorState>>>,
    buckets: HashMap<u64, Vec<usize>>,
    memory_bytes: usize,
}

impl GroupTable {
    pub(crate) fn new(group: Group, collation: CollationChoice) -> GroupTable {
        GroupTable {
            group,
            collation,
            keys: Vec::new(),
            states: Vec::new(),
            buckets: HashMap::new(),
            memory_bytes: 0,
        }
    }

    pub(crate) fn group(&self) -> &Group {
        &self.group
    }

    pub(crate) fn collation(&self) -> &CollationChoice {
        &self.collation
    }

    fn position(&self, key: &Bson, hash: u64) -> Option<usize> {
        self.buckets.get(&hash).and_then(|bucket| {
            bucket
                .iter()
                .copied()
                .find(|index| values_equal_with(&self.keys[*index], key, self.collation.as_deref()))
        })
    }

    /// Folds one document's accumulator arguments into the group of `key`, creating it if new
    /// (its initializers evaluated in `context`).
    pub(crate) fn add(
        &mut self,
        key: Bson,
        values: Vec<Value>,
        context: &PipelineContext,
    ) -> CommandResult<()> {
        let hash = key_hash(&key, self.collation.as_deref());
        let index = match self.position(&key, hash) {
            Some(index) => index,
            None => {
                let states = self.group.new_states(&key_fields(&key), context)?;
                self.memory_bytes += value_bytes(&Some(key.clone())) + GROUP_OVERHEAD_BYTES;
                self.keys.push(key);
                self.states.push(Some(states));
                self.buckets
                    .entry(hash)
                    .or_default()
                    .push(self.keys.len() - 1);
                self.keys.len() - 1
            }
        };
        for ((_, op, _), value) in self.group.fields.iter().zip(&values) {
            if matches!(
                op,
                FieldOp::Builtin(
                    AccumulatorOp::Push
                        | AccumulatorOp::AddToSet
                        | AccumulatorOp::MergeObjects
                        | AccumulatorOp::ConcatArrays
                        | AccumulatorOp::SetUnion
                ) | FieldOp::Js(_)
            ) {
                self.memory_bytes += value_bytes(value);
            }
        }
        match &mut self.states[index] {
            Some(states) => add_all(states, values, self.collation.as_deref()),
            None => Err(CommandError::internal("a $group group was folded twice")),
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// Folds the rest of the group of `key` (`arguments`, in input order) onto what the table
    /// holds of it, takes it out of the table and returns its output.
    pub(crate) fn fold_rest(
        &mut self,
        key: Bson,
        arguments: impl IntoIterator<Item = Vec<Value>>,
        context: &PipelineContext,
    ) -> CommandResult<Document> {
        let held = self
            .position(&key, key_hash(&key, self.collation.as_deref()))
            .and_then(|index| self.states[index].take());
        let mut states = match held {
            Some(states) => states,
            None => self.group.new_states(&key_fields(&key), context)?,
        };
        for values in arguments {
            add_all(&mut states, values, self.collation.as_deref())?;
        }
        self.group.output(key, states)
    }

    /// The output of every group still in the table, in first-seen order.
    pub(crate) fn finish(self) -> Vec<CommandResult<Document>> {
        let group = self.group;
        self.keys
            .into_iter()
            .zip(self.states)
            .filter_map(|(key, states)| Some(group.output(key, states?)))
            .collect()
    }
}

/// A hash consistent with [`values_equal_with`] under `collation`: numbers hash by their
/// double value (equal numbers of any type map to the same double), strings and symbols alike
/// (by their comparison key under a collation), containers recursively.
fn key_hash(value: &Bson, collation: Option<&Collation>) -> u64 {
    let mut hasher = DefaultHasher::new();
    hash_value(value, collation, &mut hasher);
    hasher.finish()
}

fn hash_value(value: &Bson, collation: Option<&Collation>, hasher: &mut DefaultHasher) {
    crate::compare::canonical_type_rank(value).hash(hasher);
    match value {
        Bson::String(text) | Bson::Symbol(text) => match collation {
            Some(collation) => collation.comparison_key(text).hash(hasher),
            None => text.hash(hasher),
        },
        Bson::Document(document) => {
            for (name, field) in document {
                name.hash(hasher);
                hash_value(field, collation, hasher);
            }
        }
        Bson::Array(elements) => elements
            .iter()
            .for_each(|element| hash_value(element, collation, hasher)),
        Bson::Boolean(flag) => flag.hash(hasher),
        Bson::ObjectId(id) => id.bytes().hash(hasher),
        Bson::DateTime(moment) => moment.timestamp_millis().hash(hasher),
        other => {
            if let Some(number) = Number::from_bson(other) {
                let double = number.to_f64();
                // -0.0 == 0.0 and every NaN is equal: normalise before hashing the bits.
                let normalised = if double == 0.0 || double.is_nan() {
                    0.0f64
                } else {
                    double
                };
                normalised.to_bits().hash(hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::run;
    use super::*;
    use crate::compare::fixtures::decimal;
    use bson::doc;

    /// The `gamescores` collection of the `$firstN`/`$lastN`/`$minN`/`$maxN` reference pages.
    fn gamescores() -> Vec<Document> {
        [
            ("PlayerA", "G1", 31),
            ("PlayerB", "G1", 33),
            ("PlayerC", "G1", 99),
            ("PlayerD", "G1", 1),
            ("PlayerA", "G2", 10),
            ("PlayerB", "G2", 14),
            ("PlayerC", "G2", 66),
            ("PlayerD", "G2", 80),
        ]
        .into_iter()
        .map(|(player, game, score)| doc! {"playerId": player, "gameId": game, "score": score})
        .collect()
    }

    #[test]
    fn n_accumulators_answer_the_reference_pages_examples() {
        let grouped = |accumulator: Document| {
            run(
                vec![
                    doc! {"$match": {"gameId": "G1"}},
                    doc! {"$group": {"_id": "$gameId", "out": accumulator}},
                ],
                gamescores(),
            )
            .expect("runs")
        };
        assert_eq!(
            grouped(doc! {"$firstN": {"input": ["$playerId", "$score"], "n": 3}}),
            vec![doc! {"_id": "G1", "out": [["PlayerA", 31], ["PlayerB", 33], ["PlayerC", 99]]}]
        );
        assert_eq!(
            grouped(doc! {"$lastN": {"input": ["$playerId", "$score"], "n": 3}}),
            vec![doc! {"_id": "G1", "out": [["PlayerB", 33], ["PlayerC", 99], ["PlayerD", 1]]}]
        );
        assert_eq!(
            grouped(doc! {"$maxN": {"input": ["$score", "$playerId"], "n": 3}}),
            vec![doc! {"_id": "G1", "out": [[99, "PlayerC"], [33, "PlayerB"], [31, "PlayerA"]]}]
        );
        assert_eq!(
            grouped(doc! {"$minN": {"input": ["$score", "$playerId"], "n": 3}}),
            vec![doc! {"_id": "G1", "out": [[1, "PlayerD"], [31, "PlayerA"], [33, "PlayerB"]]}]
        );
        // `$minN`/`$maxN` skip null and missing; `$firstN` keeps missing as null.
        let sparse = vec![
            doc! {"v": 3},
            doc! {},
            doc! {"v": Bson::Null},
            doc! {"v": 1},
        ];
        let over = |accumulator: Document| {
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "out": accumulator}}],
                sparse.clone(),
            )
            .expect("runs")[0]
                .get_array("out")
                .unwrap()
                .clone()
        };
        assert_eq!(
            over(doc! {"$minN": {"input": "$v", "n": 5}}),
            vec![Bson::Int32(1), Bson::Int32(3)]
        );
        assert_eq!(
            over(doc! {"$firstN": {"input": "$v", "n": 2}}),
            vec![Bson::Int32(3), Bson::Null]
        );
    }

    #[test]
    fn top_and_bottom_answer_the_reference_pages_examples() {
        let grouped = |accumulator: Document| {
            run(
                vec![
                    doc! {"$match": {"gameId": "G1"}},
                    doc! {"$group": {"_id": "$gameId", "playerId": accumulator}},
                ],
                gamescores(),
            )
            .expect("runs")
        };
        let by_score = doc! {"score": -1};
        assert_eq!(
            grouped(doc! {"$top": {"output": ["$playerId", "$score"], "sortBy": by_score.clone()}}),
            vec![doc! {"_id": "G1", "playerId": ["PlayerC", 99]}]
        );
        assert_eq!(
            grouped(
                doc! {"$topN": {"output": ["$playerId", "$score"], "sortBy": by_score.clone(), "n": 3}}
            ),
            vec![
                doc! {"_id": "G1", "playerId": [["PlayerC", 99], ["PlayerB", 33], ["PlayerA", 31]]}
            ]
        );
        assert_eq!(
            grouped(
                doc! {"$bottom": {"output": ["$playerId", "$score"], "sortBy": by_score.clone()}}
            ),
            vec![doc! {"_id": "G1", "playerId": ["PlayerD", 1]}]
        );
        assert_eq!(
            grouped(
                doc! {"$bottomN": {"output": ["$playerId", "$score"], "sortBy": by_score, "n": 3}}
            ),
            vec![
                doc! {"_id": "G1", "playerId": [["PlayerB", 33], ["PlayerA", 31], ["PlayerD", 1]]}
            ]
        );
        // mongod's argument errors.
        let code = |accumulator: Document| {
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "out": accumulator}}],
                vec![],
            )
            .expect_err("refused")
            .code
        };
        assert_eq!(code(doc! {"$top": 1}), ErrorCode::Location5788001);
        assert_eq!(
            code(doc! {"$top": {"output": "$a", "sortBy": {"a": 1}, "n": 2}}),
            ErrorCode::Location5788002
        );
        assert_eq!(
            code(doc! {"$topN": {"output": "$a", "sortBy": {"a": 1}}}),
            ErrorCode::Location5788003
        );
        assert_eq!(
            code(doc! {"$top": {"sortBy": {"a": 1}}}),
            ErrorCode::Location5788004
        );
        assert_eq!(
            code(doc! {"$bottom": {"output": "$a"}}),
            ErrorCode::Location5788005
        );
    }

    #[test]
    fn n_accumulators_refuse_bad_arguments_with_mongods_codes() {
        // The shape of the arguments is checked when the stage is parsed.
        let code = |accumulator: Document| {
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "out": accumulator}}],
                vec![],
            )
            .expect_err("refused")
            .code
        };
        assert_eq!(code(doc! {"$firstN": 1}), ErrorCode::Location5787801);
        assert_eq!(code(doc! {"$maxN": 1}), ErrorCode::Location5787900);
        assert_eq!(
            code(doc! {"$firstN": {"input": "$a", "n": 1, "x": 1}}),
            ErrorCode::Location5787901
        );
        assert_eq!(
            code(doc! {"$firstN": {"input": "$a"}}),
            ErrorCode::Location5787906
        );
        assert_eq!(code(doc! {"$firstN": {"n": 2}}), ErrorCode::Location5787907);
        // `n` is evaluated when a group starts (mongod's `startNewGroup`): over no documents no
        // group starts and nothing fails; over one, first_n_last_n.js's codes.
        for n in [
            Bson::String("string".into()),
            Bson::Double(3.2),
            Bson::Int32(-1),
        ] {
            let pipeline = vec![
                doc! {"$group": {"_id": Bson::Null, "out": {"$lastN": {"input": "$a", "n": n}}}},
            ];
            assert_eq!(run(pipeline, vec![]).expect("no group starts"), vec![]);
        }
        let run_code = |accumulator: Document| {
            run(
                vec![doc! {"$group": {"_id": {"st": "$state"}, "out": accumulator}}],
                vec![doc! {"state": "AZ", "sales": 10, "n": 3}],
            )
            .expect_err("refused")
        };
        let cases: Vec<(Document, ErrorCode)> = vec![
            (
                doc! {"$firstN": {"input": "$sales", "n": "string"}},
                ErrorCode::Location5787902,
            ),
            (
                doc! {"$firstN": {"input": "$sales", "n": 3.2}},
                ErrorCode::Location5787903,
            ),
            (
                doc! {"$firstN": {"input": "$sales", "n": -1}},
                ErrorCode::Location5787908,
            ),
            (
                doc! {"$firstN": {"input": "$sales", "n": decimal("9223372036854775808")}},
                ErrorCode::Location5787903,
            ),
            (
                doc! {"$topN": {"output": "$sales", "sortBy": {"sales": 1}, "n": 0}},
                ErrorCode::Location5787908,
            ),
            // A field outside the group key reads as missing.
            (
                doc! {"$maxN": {"input": "$sales", "n": "$n"}},
                ErrorCode::Location5787902,
            ),
        ];
        for (accumulator, code) in cases {
            let error = run_code(accumulator.clone());
            assert_eq!(error.code, code, "{accumulator}: {}", error.errmsg);
        }
        assert_eq!(
            run_code(doc! {"$maxN": {"input": "$sales", "n": "$n"}}).errmsg,
            "Value for 'n' must be of integral type, but found MISSING"
        );
    }

    #[test]
    fn n_accumulators_compute_n_from_the_group_key() {
        // The reference pages' "n computed from the group key" examples over `gamescores`:
        // three for G1, one for G2.
        let n = || bson::bson!({"$cond": {"if": {"$eq": ["$gameId", "G2"]}, "then": 1, "else": 3}});
        let cases: Vec<(Document, Bson, Bson)> = vec![
            (
                doc! {"$firstN": {"input": "$score", "n": n()}},
                bson::bson!([31, 33, 99]),
                bson::bson!([10]),
            ),
            (
                doc! {"$lastN": {"input": "$score", "n": n()}},
                bson::bson!([33, 99, 1]),
                bson::bson!([80]),
            ),
            (
                doc! {"$maxN": {"input": ["$score", "$playerId"], "n": n()}},
                bson::bson!([[99, "PlayerC"], [33, "PlayerB"], [31, "PlayerA"]]),
                bson::bson!([[80, "PlayerD"]]),
            ),
            (
                doc! {"$minN": {"input": ["$score", "$playerId"], "n": n()}},
                bson::bson!([[1, "PlayerD"], [31, "PlayerA"], [33, "PlayerB"]]),
                bson::bson!([[10, "PlayerA"]]),
            ),
            (
                doc! {"$topN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": n()}},
                bson::bson!([["PlayerC", 99], ["PlayerB", 33], ["PlayerA", 31]]),
                bson::bson!([["PlayerD", 80]]),
            ),
            (
                doc! {"$bottomN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": n()}},
                bson::bson!([["PlayerB", 33], ["PlayerA", 31], ["PlayerD", 1]]),
                bson::bson!([["PlayerA", 10]]),
            ),
        ];
        for (accumulator, g1, g2) in cases {
            let output = run(
                vec![
                    doc! {"$group": {"_id": {"gameId": "$gameId"}, "gamescores": accumulator.clone()}},
                    doc! {"$sort": {"_id.gameId": 1}},
                ],
                gamescores(),
            )
            .expect("runs");
            assert_eq!(
                output,
                vec![
                    doc! {"_id": {"gameId": "G1"}, "gamescores": g1},
                    doc! {"_id": {"gameId": "G2"}, "gamescores": g2},
                ],
                "{accumulator}"
            );
        }
        // first_n_last_n.js: a key that is a field holding a document is read the same way;
        // a key that is not a document leaves `n` nothing to read.
        let keyed = gamescores()
            .into_iter()
            .map(|mut score| {
                let game = score.get_str("gameId").unwrap_or_default().to_string();
                score.insert("game", doc! {"gameId": game});
                score
            })
            .collect::<Vec<_>>();
        let output = run(
            vec![
                doc! {"$group": {"_id": "$game", "scores": {"$firstN": {"input": "$score", "n": n()}}}},
                doc! {"$sort": {"_id.gameId": 1}},
            ],
            keyed,
        )
        .expect("runs");
        assert_eq!(
            output,
            vec![
                doc! {"_id": {"gameId": "G1"}, "scores": [31, 33, 99]},
                doc! {"_id": {"gameId": "G2"}, "scores": [10]},
            ]
        );
        let error = run(
            vec![doc! {"$group": {"_id": "$gameId", "scores": {"$firstN": {"input": "$score", "n": "$gameId"}}}}],
            gamescores(),
        )
        .expect_err("a scalar key has no fields");
        assert_eq!(error.code, ErrorCode::Location5787902);
        // `$bucketAuto` evaluates `n` against an empty document (mongod's
        // document_source_bucket_auto.cpp): its `{min, max}` key is not read.
        let error = run(
            vec![doc! {"$bucketAuto": {"groupBy": "$score", "buckets": 1,
            "output": {"scores": {"$firstN": {"input": "$score", "n": "$min"}}}}}],
            gamescores(),
        )
        .expect_err("a bucket has no key");
        assert_eq!(error.code, ErrorCode::Location5787902);
    }

    #[test]
    fn a_group_first_seen_after_spilling_takes_n_from_its_key() {
        // A spilled `$group` folds a group the table never held from its arguments alone: its
        // states start from the key as the table's do.
        let group = Group::parse(&Bson::Document(doc! {"_id": {"gameId": "$gameId"}, "s":
        {"$firstN": {"input": "$score", "n": {"$cond": [{"$eq": ["$gameId", "G2"]}, 1, 3]}}}}))
        .expect("parses");
        let context = crate::expr::fixtures::context();
        let mut table = GroupTable::new(group, context.collation.clone());
        let arguments = [10, 14, 66]
            .into_iter()
            .map(|score| vec![Some(Bson::Int32(score))]);
        let output = table
            .fold_rest(Bson::Document(doc! {"gameId": "G2"}), arguments, &context)
            .expect("folds");
        assert_eq!(output, doc! {"_id": {"gameId": "G2"}, "s": [10]});
    }

    /// concat_arrays.js's books.
    fn books() -> Vec<Document> {
        vec![
            doc! {"_id": 0, "author": "Adrian", "publisher": "Pub1", "books": ["Adrian Book 0", "Adrian Book 1"]},
            doc! {"_id": 1, "author": "Militsa", "publisher": "Pub1", "books": ["Militsa Book 0"]},
            doc! {"_id": 2, "author": "Hana", "publisher": "Pub1", "books": ["Hana Book 0", "Hana Book 1"]},
            doc! {"_id": 3, "author": "Ben", "publisher": "Pub2", "books": [["Ben Series 0 Book 0", "Ben Series 0 Book 1"], ["Ben Series 1 Book 0"], "Ben Book 4"]},
            doc! {"_id": 4, "author": "Nick", "publisher": "Pub3", "books": ["Smile :)"]},
            doc! {"_id": 5, "author": "Santiago", "publisher": "Pub3"},
            doc! {"_id": 6, "author": "Matt", "publisher": "Pub3", "books": ["Happy!"]},
        ]
    }

    #[test]
    fn concat_arrays_accumulator_follows_mongods_tests() {
        let concat = |ids: &[i32], sort: i32| {
            run(
                vec![
                    doc! {"$match": {"_id": {"$in": ids.to_vec()}}},
                    doc! {"$sort": {"_id": sort}},
                    doc! {"$group": {"_id": Bson::Null, "allBooks": {"$concatArrays": "$books"}}},
                ],
                books(),
            )
            .expect("runs")
        };
        // Arrival order, each array's order kept.
        assert_eq!(
            concat(&[0, 1, 2], 1),
            vec![
                doc! {"_id": Bson::Null, "allBooks": ["Adrian Book 0", "Adrian Book 1", "Militsa Book 0", "Hana Book 0", "Hana Book 1"]}
            ]
        );
        assert_eq!(
            concat(&[0, 1, 2], -1),
            vec![
                doc! {"_id": Bson::Null, "allBooks": ["Hana Book 0", "Hana Book 1", "Militsa Book 0", "Adrian Book 0", "Adrian Book 1"]}
            ]
        );
        // Nested arrays stay arrays; a missing field adds nothing.
        assert_eq!(
            concat(&[1, 3], 1),
            vec![
                doc! {"_id": Bson::Null, "allBooks": ["Militsa Book 0", ["Ben Series 0 Book 0", "Ben Series 0 Book 1"], ["Ben Series 1 Book 0"], "Ben Book 4"]}
            ]
        );
        assert_eq!(
            concat(&[4, 5, 6], 1),
            vec![doc! {"_id": Bson::Null, "allBooks": ["Smile :)", "Happy!"]}]
        );
        let by_publisher = run(
            vec![
                doc! {"$match": {"_id": {"$in": [0, 1, 3]}}},
                doc! {"$group": {"_id": "$publisher", "booksByPublisher": {"$concatArrays": "$books"}}},
                doc! {"$sort": {"_id": 1}},
            ],
            books(),
        )
        .expect("runs");
        assert_eq!(
            by_publisher,
            vec![
                doc! {"_id": "Pub1", "booksByPublisher": ["Adrian Book 0", "Adrian Book 1", "Militsa Book 0"]},
                doc! {"_id": "Pub2", "booksByPublisher": [["Ben Series 0 Book 0", "Ben Series 0 Book 1"], ["Ben Series 1 Book 0"], "Ben Book 4"]},
            ]
        );
    }

    #[test]
    fn set_union_accumulator_follows_mongods_tests() {
        // set_union.js compares after `$sortArray`; this server answers in BSON order already.
        let union = |arrays: Vec<Bson>| {
            let input = arrays
                .into_iter()
                .map(|vals| doc! {"vals": vals})
                .collect::<Vec<_>>();
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "n": {"$setUnion": "$vals"}}}],
                input,
            )
            .expect("runs")[0]
                .get("n")
                .cloned()
        };
        let cases: Vec<(Vec<Bson>, Bson)> = vec![
            (
                vec![bson::bson!([1, 2, 3]), bson::bson!([4, 5, 6])],
                bson::bson!([1, 2, 3, 4, 5, 6]),
            ),
            (
                vec![
                    bson::bson!([1, 2, 3]),
                    bson::bson!([2, 3, 4]),
                    bson::bson!([3, 4, 5, 6]),
                ],
                bson::bson!([1, 2, 3, 4, 5, 6]),
            ),
            (
                vec![bson::bson!([1, 1, 2, 2, 3, 3])],
                bson::bson!([1, 2, 3]),
            ),
            (
                vec![
                    bson::bson!([["nested"], 1, 2]),
                    bson::bson!([3, 4, ["nested"]]),
                    bson::bson!([4, ["nested", "extra"]]),
                ],
                bson::bson!([1, 2, 3, 4, ["nested"], ["nested", "extra"]]),
            ),
            // Documents differing in field order are distinct.
            (
                vec![
                    bson::bson!([{"a": 1, "b": 2}]),
                    bson::bson!([{"b": 2, "a": 1}]),
                    bson::bson!([{"a": 1, "b": 2}]),
                ],
                bson::bson!([{"a": 1, "b": 2}, {"b": 2, "a": 1}]),
            ),
        ];
        for (arrays, expected) in cases {
            assert_eq!(union(arrays.clone()), Some(expected), "{arrays:?}");
        }
        let by_publisher = run(
            vec![
                doc! {"$match": {"_id": {"$in": [0, 1, 4, 5, 6]}}},
                doc! {"$group": {"_id": "$publisher", "books": {"$setUnion": "$books"}}},
                doc! {"$sort": {"_id": 1}},
            ],
            books(),
        )
        .expect("runs");
        assert_eq!(
            by_publisher,
            vec![
                doc! {"_id": "Pub1", "books": ["Adrian Book 0", "Adrian Book 1", "Militsa Book 0"]},
                doc! {"_id": "Pub3", "books": ["Happy!", "Smile :)"]},
            ]
        );
    }

    #[test]
    fn array_accumulators_refuse_what_is_not_an_array() {
        // concat_arrays.js / set_union.js: numbers, strings, objects and null are TypeMismatch.
        for operator in ["$concatArrays", "$setUnion"] {
            for value in [
                Bson::Int32(1),
                Bson::String("string".into()),
                Bson::Document(doc! {"object": "object"}),
                Bson::Null,
            ] {
                let error = run(
                    vec![doc! {"$group": {"_id": Bson::Null, "v": {operator: "$vals"}}}],
                    vec![doc! {"vals": value.clone()}],
                )
                .expect_err("refused");
                assert_eq!(error.code, ErrorCode::TypeMismatch, "{operator} {value}");
            }
        }
        let error = run(
            vec![doc! {"$group": {"_id": Bson::Null, "v": {"$concatArrays": "$vals"}}}],
            vec![doc! {"vals": "a"}],
        )
        .expect_err("refused");
        assert_eq!(
            error.errmsg,
            "$concatArrays requires array inputs, but input \"a\" is of type string"
        );
        // An array operand is the unary-operator error every accumulator gives.
        assert_eq!(
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "v": {"$setUnion": ["$a", "$b"]}}}],
                vec![]
            )
            .expect_err("refused")
            .code,
            ErrorCode::Location40237
        );
    }

    #[test]
    fn median_and_percentile_accumulators_answer_the_reference_pages() {
        // The `$median`/`$percentile` pages' testScores: test01 is 62, 60, 67, 64, 60.
        let scores = [62, 60, 67, 64, 60]
            .into_iter()
            .map(|score| doc! {"test01": score, "other": "x"})
            .collect::<Vec<_>>();
        let output = run(
            vec![doc! {"$group": {"_id": Bson::Null,
            "median": {"$median": {"input": "$test01", "method": "approximate"}},
            "percentiles": {"$percentile": {"input": "$test01", "p": [0.5, 0.75, 0.9, 0.95],
                "method": "approximate"}},
            "none": {"$percentile": {"input": "$other", "p": [0.5, 1], "method": "approximate"}},
            "noneMedian": {"$median": {"input": "$other", "method": "approximate"}}}}],
            scores,
        )
        .expect("runs");
        assert_eq!(
            output,
            vec![doc! {"_id": Bson::Null, "median": 62.0,
            "percentiles": [62.0, 64.0, 67.0, 67.0],
            "none": [Bson::Null, Bson::Null], "noneMedian": Bson::Null}]
        );
        let error = |accumulator: Bson| {
            run(
                vec![doc! {"$group": {"_id": Bson::Null, "v": accumulator}}],
                vec![doc! {}],
            )
            .expect_err("refused")
            .code
            .code()
        };
        assert_eq!(error(bson::bson!({"$median": 1})), 7436100);
        assert_eq!(error(bson::bson!({"$percentile": 1})), 7429703);
        assert_eq!(
            error(bson::bson!({"$percentile": {"input": 1, "p": [0.5]}})),
            40414
        );
        assert_eq!(
            error(bson::bson!({"$median": {"input": 1, "method": "discrete"}})),
            2
        );
    }

    #[test]
    fn standard_deviations_follow_the_reference_pages() {
        // `$stdDevPop`'s example: quiz 1 scores 85, 90, 71 and quiz 2 scores 96, 77, 82 both
        // have a population standard deviation of 8.04155872120988.
        let users = vec![
            doc! {"quiz": 1, "score": 85},
            doc! {"quiz": 1, "score": 90},
            doc! {"quiz": 1, "score": 71},
            doc! {"quiz": 2, "score": 96},
            doc! {"quiz": 2, "score": 77},
            doc! {"quiz": 2, "score": 82},
            doc! {"quiz": 2, "score": "n/a"},
        ];
        let output = run(
            vec![
                doc! {"$group": {"_id": "$quiz", "pop": {"$stdDevPop": "$score"},
                "samp": {"$stdDevSamp": "$score"}}},
                doc! {"$sort": {"_id": 1}},
            ],
            users,
        )
        .expect("runs");
        for group in &output {
            let pop = group.get_f64("pop").unwrap();
            assert!((pop - 8.04155872120988).abs() < 1e-12, "{group}");
            // The sample deviation divides by n - 1: sqrt(194 / 2).
            let samp = group.get_f64("samp").unwrap();
            assert!((samp - 97f64.sqrt()).abs() < 1e-12, "{group}");
        }
        // No numbers: null; one number: 0 for the population, null for a sample.
        let single = run(
            vec![
                doc! {"$group": {"_id": Bson::Null, "pop": {"$stdDevPop": "$v"},
                "samp": {"$stdDevSamp": "$v"}, "none": {"$stdDevPop": "$w"}}},
            ],
            vec![doc! {"v": 5}],
        )
        .expect("runs");
        assert_eq!(
            single,
            vec![doc! {"_id": Bson::Null, "pop": 0.0, "samp": Bson::Null, "none": Bson::Null}]
        );
    }

    #[test]
    fn equal_numbers_of_different_types_hash_alike() {
        assert_eq!(
            key_hash(&Bson::Int32(1), None),
            key_hash(&Bson::Double(1.0), None)
        );
        assert_eq!(
            key_hash(&Bson::Int64(1), None),
            key_hash(&decimal("1.00"), None)
        );
        assert_eq!(
            key_hash(&Bson::Double(-0.0), None),
            key_hash(&Bson::Int32(0), None)
        );
    }
}
