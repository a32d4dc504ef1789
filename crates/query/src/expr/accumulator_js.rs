//! `$accumulator`: a user-defined accumulator in JavaScript (mongod's `AccumulatorJs`), parsed
//! with mongod's checks (4544701–4544712) and run through `crate::js` under the command's
//! budgets and the scripting switch (31264 when it is off).
//!
//! Invariants:
//! - `init`, `accumulate`, `merge` and `finalize` are constant strings or Code; `merge` is
//!   required (as mongod's parser does) but never called: one node never merges partial states.
//! - `initArgs` is evaluated once, when a group starts, against what the group's initializers
//!   read (`accumulator_n::key_fields`: in `$group` the key when it is a document, so `"$city"` reads
//!   the key's `city`, else an empty document, mongod's `expandId`; in `$bucketAuto` an empty
//!   document); `accumulateArgs` against each document. Both must evaluate to arrays, checked
//!   when used (4544711, 4544712).
//! - The group's state starts as `init(...initArgs)` at its first document, becomes
//!   `accumulate(state, ...accumulateArgs)` for each document, and the group's value is
//!   `finalize(state)`, or the state when there is no `finalize`. Groups are never empty.
//! - The state crosses to and from JavaScript as BSON at every call (mongod batches calls; the
//!   values are the same).

use std::sync::Arc;

use bson::{Bson, Document};

use super::{Expr, PipelineContext, Value};
use crate::js::JsProgram;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

const INIT: usize = 0;
const ACCUMULATE: usize = 1;
const FINALIZE: usize = 3;

/// A parsed `$accumulator`: its functions and its `initArgs` expression (the `accumulateArgs`
/// expression is the field's argument, as for every accumulator).
#[derive(Debug)]
pub(crate) struct JsAccumulator {
    /// `[init, accumulate, merge, finalize?]`.
    program: JsProgram,
    init_args: Expr,
}

impl PartialEq for JsAccumulator {
    fn eq(&self, other: &JsAccumulator) -> bool {
        self.program.sources() == other.program.sources()
    }
}

impl Eq for JsAccumulator {}

fn fail(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// A constant String or Code function source (mongod's 4544701, 4544702).
fn function_source(field: &str, value: &Bson) -> CommandResult<String> {
    match Expr::parse(value)? {
        Expr::Literal(Bson::String(source) | Bson::JavaScriptCode(source)) => Ok(source),
        Expr::Literal(_) => Err(fail(
            ErrorCode::Location4544702,
            format!("$accumulator '{field}' must be a String or Code"),
        )),
        _ => Err(fail(
            ErrorCode::Location4544701,
            format!("$accumulator '{field}' must be a constant expression"),
        )),
    }
}

/// Parses the operand of `$accumulator` into the accumulator and its `accumulateArgs`.
pub(crate) fn parse_js_accumulator(operand: &Bson) -> CommandResult<(Arc<JsAccumulator>, Expr)> {
    let Bson::Document(spec) = operand else {
        return Err(fail(
            ErrorCode::Location4544703,
            format!(
                "$accumulator expects an object as an argument; found: {}",
                type_name(operand)
            ),
        ));
    };
    let (mut init, mut accumulate, mut merge) = (String::new(), String::new(), String::new());
    let mut finalize = None;
    let (mut init_args, mut accumulate_args) = (None, None);
    for (name, value) in spec {
        match name.as_str() {
            "init" => init = function_source(name, value)?,
            "accumulate" => accumulate = function_source(name, value)?,
            "merge" => merge = function_source(name, value)?,
            "finalize" => finalize = Some(function_source(name, value)?),
            "initArgs" => init_args = Some(Expr::parse(value)?),
            "accumulateArgs" => accumulate_args = Some(Expr::parse(value)?),
            "lang" => {
                let Bson::String(lang) = value else {
                    return Err(fail(
                        ErrorCode::Location4544704,
                        format!(
                            "$accumulator lang must be a string; found: {}",
                            type_name(value)
                        ),
                    ));
                };
                if lang != "js" {
                    return Err(fail(
                        ErrorCode::Location4544705,
                        "$accumulator only supports lang: 'js'",
                    ));
                }
            }
            _ => {
                return Err(fail(
                    ErrorCode::Location4544706,
                    format!("$accumulator got an unexpected field: {name}"),
                ))
            }
        }
    }
    for (source, code, field) in [
        (&init, ErrorCode::Location4544707, "init"),
        (&accumulate, ErrorCode::Location4544708, "accumulate"),
        (&merge, ErrorCode::Location4544709, "merge"),
    ] {
        if source.is_empty() {
            return Err(fail(
                code,
                format!("$accumulator missing required argument '{field}'"),
            ));
        }
    }
    let accumulate_args = accumulate_args.ok_or_else(|| {
        fail(
            ErrorCode::Location4544710,
            "$accumulator missing required argument 'accumulateArgs'",
        )
    })?;
    let mut functions = vec![init, accumulate, merge];
    functions.extend(finalize);
    let accumulator = JsAccumulator {
        program: JsProgram::new(functions, None),
        init_args: init_args.unwrap_or(Expr::Literal(Bson::Array(Vec::new()))),
    };
    Ok((Arc::new(accumulator), accumulate_args))
}

impl JsAccumulator {
    /// `initArgs` evaluated against `key_fields` when a group starts (missing when it is).
    pub(crate) fn init_args(
        &self,
        key_fields: &Document,
        context: &PipelineContext,
    ) -> CommandResult<Value> {
        self.init_args.evaluate_in(key_fields, context)
    }

    /// Folds one document's `accumulateArgs` into `state`, starting the state with
    /// `init(...init_args)` at the group's first document.
    pub(crate) fn add(
        &self,
        state: &mut Option<Bson>,
        init_args: &Value,
        accumulate_args: Value,
    ) -> CommandResult<()> {
        crate::js::check_enabled(ErrorCode::Location31264, crate::js::DISABLED_MESSAGE)?;
        let current = match state.take() {
            Some(current) => current,
            None => {
                let init_args = array_argument(
                    init_args.as_ref(),
                    ErrorCode::Location4544711,
                    "$accumulator initArgs must evaluate to an array",
                )?;
                self.program.call(INIT, None, &init_args)?
            }
        };
        let mut arguments = vec![current];
        arguments.extend(array_argument(
            accumulate_args.as_ref(),
            ErrorCode::Location4544712,
            "$accumulator accumulateArgs must evaluate to an array",
        )?);
        *state = Some(self.program.call(ACCUMULATE, None, &arguments)?);
        Ok(())
    }

    /// The group's value: `finalize(state)`, or the state itself.
    pub(crate) fn finish(&self, state: Option<Bson>) -> CommandResult<Value> {
        let Some(state) = state else {
            return Ok(None);
        };
        if self.program.sources().len() > FINALIZE {
            crate::js::check_enabled(ErrorCode::Location31264, crate::js::DISABLED_MESSAGE)?;
            return self.program.call(FINALIZE, None, &[state]).map(Some);
        }
        Ok(Some(state))
    }
}

fn array_argument(
    value: Option<&Bson>,
    code: ErrorCode,
    message: &str,
) -> CommandResult<Vec<Bson>> {
    match value {
        Some(Bson::Array(values)) => Ok(values.clone()),
        Some(other) => Err(fail(code, format!("{message}: {}", value_string(other)))),
        None => Err(fail(code, format!("{message}: MISSING"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::js::{with_limits, JsLimits};
    use crate::pipeline::fixtures::{parse_error, run, run_ok};
    use bson::{doc, Bson, Document};
    use tideway_base::error::ErrorCode;
    use tideway_base::limits::Deadline;

    /// The `books` collection of the `$accumulator` reference page.
    fn books() -> Vec<Document> {
        vec![
            doc! {"_id": 8751, "title": "The Banquet", "author": "Dante", "copies": 2},
            doc! {"_id": 8752, "title": "Divine Comedy", "author": "Dante", "copies": 1},
            doc! {"_id": 8645, "title": "Eclogues", "author": "Dante", "copies": 2},
            doc! {"_id": 7000, "title": "The Odyssey", "author": "Homer", "copies": 10},
            doc! {"_id": 7020, "title": "Iliad", "author": "Homer", "copies": 10},
        ]
    }

    fn average_copies() -> Document {
        doc! {"$accumulator": {
            "init": "function() { return { count: 0, sum: 0 } }",
            "accumulate": Bson::JavaScriptCode(
                "function(state, numCopies) { return { count: state.count + 1, sum: state.sum + numCopies } }".into()),
            "accumulateArgs": ["$copies"],
            "merge": "function(state1, state2) { return { count: state1.count + state2.count, sum: state1.sum + state2.sum } }",
            "finalize": "function(state) { return (state.sum / state.count) }",
            "lang": "js",
        }}
    }

    #[test]
    fn the_reference_pages_average_copies_example() {
        let output = run_ok(
            vec![
                doc! {"$group": {"_id": "$author", "avgCopies": average_copies()}},
                doc! {"$sort": {"_id": 1}},
            ],
            books(),
        );
        assert_eq!(
            output,
            vec![
                doc! {"_id": "Dante", "avgCopies": 5.0 / 3.0},
                doc! {"_id": "Homer", "avgCopies": 10.0},
            ]
        );
    }

    #[test]
    fn init_args_read_the_group_key() {
        // The reference page's restaurants example: at most three restaurants in the user's
        // city, one elsewhere.
        let restaurants = [
            (1, "Food Fury", "Bettles"),
            (2, "Meal Macro", "Bettles"),
            (3, "Big Crisp", "Bettles"),
            (4, "The Wrap", "Onida"),
            (5, "Spice Attack", "Onida"),
            (6, "Soup City", "Onida"),
            (7, "Crave", "Pyote"),
            (8, "The Gladiator", "Pyote"),
        ]
        .into_iter()
        .map(|(id, name, city)| doc! {"_id": id, "name": name, "city": city})
        .collect();
        let output = run_ok(
            vec![
                doc! {"$group": {"_id": {"city": "$city"}, "restaurants": {"$accumulator": {
                    "init": "function(city, userProfileCity) { return { max: city === userProfileCity ? 3 : 1, restaurants: [] } }",
                    "initArgs": ["$city", "Bettles"],
                    "accumulate": "function(state, restaurantName) { if (state.restaurants.length < state.max) { state.restaurants.push(restaurantName); } return state; }",
                    "accumulateArgs": ["$name"],
                    "merge": "function(state1, state2) { return { max: state1.max, restaurants: state1.restaurants.concat(state2.restaurants).slice(0, state1.max) } }",
                    "finalize": "function(state) { return state.restaurants }",
                    "lang": "js",
                }}}},
                doc! {"$sort": {"_id.city": 1}},
            ],
            restaurants,
        );
        assert_eq!(
            output,
            vec![
                doc! {"_id": {"city": "Bettles"}, "restaurants": ["Food Fury", "Meal Macro", "Big Crisp"]},
                doc! {"_id": {"city": "Onida"}, "restaurants": ["The Wrap"]},
                doc! {"_id": {"city": "Pyote"}, "restaurants": ["Crave"]},
            ]
        );
    }

    #[test]
    fn without_finalize_the_state_is_the_value_and_bucket_auto_accepts_it() {
        let output = run_ok(
            vec![
                doc! {"$bucketAuto": {"groupBy": "$copies", "buckets": 1, "output": {"total": {"$accumulator": {
                    "init": "function() { return 0 }",
                    "accumulate": "function(state, n) { return state + n }",
                    "accumulateArgs": ["$copies"],
                    "merge": "function(a, b) { return a + b }",
                }}}}},
            ],
            books(),
        );
        assert_eq!(
            output,
            vec![doc! {"_id": {"min": 1, "max": 10}, "total": 25.0}]
        );
    }

    #[test]
    fn parse_errors_have_mongods_codes() {
        let base = doc! {
            "init": "function() { return 0 }",
            "accumulate": "function(s) { return s }",
            "accumulateArgs": [],
            "merge": "function(a, b) { return a }",
        };
        let with = |field: &str, value: Bson| {
            let mut spec = base.clone();
            spec.insert(field, value);
            spec
        };
        let without = |field: &str| {
            let mut spec = base.clone();
            spec.remove(field);
            spec
        };
        let cases: Vec<(Bson, ErrorCode)> = vec![
            (Bson::Int32(1), ErrorCode::Location4544703),
            (
                with("init", Bson::Document(doc! {"$concat": ["$a"]})).into(),
                ErrorCode::Location4544701,
            ),
            (
                with("init", Bson::Int32(3)).into(),
                ErrorCode::Location4544702,
            ),
            (
                with("lang", Bson::Int32(3)).into(),
                ErrorCode::Location4544704,
            ),
            (
                with("lang", Bson::String("python".into())).into(),
                ErrorCode::Location4544705,
            ),
            (
                with("extra", Bson::Int32(1)).into(),
                ErrorCode::Location4544706,
            ),
            (without("init").into(), ErrorCode::Location4544707),
            (without("accumulate").into(), ErrorCode::Location4544708),
            (without("merge").into(), ErrorCode::Location4544709),
            (without("accumulateArgs").into(), ErrorCode::Location4544710),
        ];
        for (spec, code) in cases {
            let error = parse_error(vec![
                doc! {"$group": {"_id": null, "out": {"$accumulator": spec.clone()}}},
            ]);
            assert_eq!(error.code, code, "{spec}: {error:?}");
        }
    }

    #[test]
    fn arguments_that_are_not_arrays_fail_at_run_time() {
        let spec = |init_args: Bson, accumulate_args: Bson| {
            vec![doc! {"$group": {"_id": null, "out": {"$accumulator": {
                "init": "function() { return 0 }",
                "initArgs": init_args,
                "accumulate": "function(s) { return s }",
                "accumulateArgs": accumulate_args,
                "merge": "function(a, b) { return a }",
            }}}}]
        };
        let input = vec![doc! {"a": 1}];
        let error = run(spec(Bson::Int32(1), Bson::Array(vec![])), input.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::Location4544711);
        let error = run(spec(Bson::Array(vec![]), "$a".into()), input).unwrap_err();
        assert_eq!(error.code, ErrorCode::Location4544712);
    }

    #[test]
    fn scripting_off_refuses_at_run_time() {
        let limits = JsLimits {
            enabled: false,
            ..JsLimits::default()
        };
        let error = with_limits(limits, Deadline::none(), || {
            run(
                vec![doc! {"$group": {"_id": "$author", "avgCopies": average_copies()}}],
                books(),
            )
        })
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::Location31264);
    }

    #[test]
    fn javascript_exceptions_fail_the_group() {
        let error = run(
            vec![doc! {"$group": {"_id": null, "out": {"$accumulator": {
                "init": "function() { return 0 }",
                "accumulate": "function(s) { throw new Error('nope') }",
                "accumulateArgs": [],
                "merge": "function(a, b) { return a }",
            }}}}],
            books(),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::JSInterpreterFailure);
    }
}
