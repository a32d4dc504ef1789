//! Command variables: a command's `let` (and a pipeline update's `c` constants) evaluated once,
//! before the command reads anything, and the parse scope in which the command's expressions
//! (`$expr` in filters, pipeline stages, pipeline updates) name them as `$$name` and read the
//! command's time as `$$NOW`. They belong to the expression engine: parsing an expression
//! resolves `$$name` against this scope, and computing a variable's value evaluates one.
//!
//! Invariants:
//! - Values are computed against no document: a field path or `$$ROOT` in one is mongod's 4890500;
//!   a later variable may use an earlier one; `$$NOW` is the command's time.
//! - Names follow mongod's user variable rules (16869/16870/16871), so no system variable
//!   (`ROOT`, `NOW`, ...) can be set.
//! - The scope is a thread-local set only while [`with_command_variables`] runs a synchronous
//!   parse, and restored when it returns or unwinds; parsing never awaits, so nothing else parsed
//!   on the thread can see another command's variables.

use std::cell::RefCell;
use std::sync::Arc;

use bson::{Bson, DateTime, Document};

use super::{validate_variable_name, Expr};
use tideway_base::error::{CommandError, CommandResult};

/// A command's time and its variables with their values (`None`: the expression evaluated to
/// missing), in definition order; a later binding of a name shadows an earlier one.
#[derive(Clone, Debug)]
pub struct CommandVariables {
    now: DateTime,
    bound: Arc<[(String, Option<Bson>)]>,
}

thread_local! {
    static IN_SCOPE: RefCell<Option<CommandVariables>> = const { RefCell::new(None) };
}

impl CommandVariables {
    /// No variables, for a command running at `now`.
    pub fn at(now: DateTime) -> CommandVariables {
        CommandVariables {
            now,
            bound: Arc::from(Vec::new()),
        }
    }

    /// These variables extended with `spec` (a `let` or `c` document) evaluated at their time.
    pub fn with(&self, spec: &Document) -> CommandResult<CommandVariables> {
        let mut extended = self.clone();
        for (name, value) in spec {
            validate_variable_name(name)
                .map_err(|error| error.caused("Invalid 'let' parameter"))?;
            let expression = with_command_variables(&extended, || Expr::parse(value))?;
            let value = expression.evaluate_constant(self.now)?;
            let mut bound = extended.bound.to_vec();
            bound.push((name.clone(), value));
            extended.bound = Arc::from(bound);
        }
        Ok(extended)
    }

    /// These variables extended with values already computed (a `$lookup`'s `let`, evaluated
    /// against its input document).
    pub(crate) fn with_values(&self, values: Vec<(String, Option<Bson>)>) -> CommandVariables {
        let mut bound = self.bound.to_vec();
        bound.extend(values);
        CommandVariables {
            now: self.now,
            bound: Arc::from(bound),
        }
    }

    /// The variables in scope of the parse in progress, if any.
    pub(crate) fn in_scope() -> Option<CommandVariables> {
        IN_SCOPE.with(|scope| scope.borrow().clone())
    }

    /// The bindings, oldest first.
    #[cfg(test)]
    pub(crate) fn bindings(&self) -> &[(String, Option<Bson>)] {
        &self.bound
    }
}

/// Runs `parse` with `variables` in scope for every expression it parses.
pub fn with_command_variables<T>(variables: &CommandVariables, parse: impl FnOnce() -> T) -> T {
    /// Puts back the scope that was there before, however `parse` ends.
    struct Restore(Option<CommandVariables>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            IN_SCOPE.with(|scope| *scope.borrow_mut() = previous);
        }
    }
    let previous = IN_SCOPE.with(|scope| scope.borrow_mut().replace(variables.clone()));
    let _restore = Restore(previous);
    parse()
}

/// The value of the command variable `name` in the current parse scope: `None` if there is no
/// such variable, `Some(None)` if it is missing.
pub(crate) fn lookup(name: &str) -> Option<Option<Bson>> {
    IN_SCOPE.with(|scope| {
        scope.borrow().as_ref().and_then(|variables| {
            variables
                .bound
                .iter()
                .rev()
                .find(|(bound, _)| bound == name)
                .map(|(_, value)| value.clone())
        })
    })
}

/// The time of the command whose parse is in progress (`$$NOW` of a filter's `$expr`), if any.
pub(crate) fn command_time() -> Option<DateTime> {
    IN_SCOPE.with(|scope| scope.borrow().as_ref().map(|variables| variables.now))
}

/// mongod's error for a command variable that reads the document.
pub(crate) fn reads_document() -> CommandError {
    CommandError::new(
        tideway_base::error::ErrorCode::Location4890500,
        "Command let Expression tried to access a field, but this is not allowed because \
         Command let Expressions run before the query examines any documents.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use tideway_base::error::ErrorCode;

    fn now() -> DateTime {
        DateTime::from_millis(1_000)
    }

    fn evaluate(spec: Document) -> CommandResult<CommandVariables> {
        CommandVariables::at(now()).with(&spec)
    }

    #[test]
    fn later_variables_see_earlier_ones_and_now() {
        let variables = evaluate(
            doc! {"a": 2, "b": {"$multiply": ["$$a", 10]}, "t": "$$NOW", "gone": "$$REMOVE"},
        )
        .unwrap();
        assert_eq!(
            variables.bindings().to_vec(),
            vec![
                ("a".to_string(), Some(Bson::Int32(2))),
                ("b".to_string(), Some(Bson::Int32(20))),
                ("t".to_string(), Some(Bson::DateTime(now()))),
                ("gone".to_string(), None),
            ]
        );
        let expression = with_command_variables(&variables, || Expr::parse(&Bson::from("$$b")));
        assert!(expression.is_ok());
        assert!(
            Expr::parse(&Bson::from("$$b")).is_err(),
            "out of scope again"
        );
    }

    #[test]
    fn names_and_document_reads_are_refused() {
        let error = evaluate(doc! {"Upper": 1}).unwrap_err();
        assert_eq!(error.code, ErrorCode::Location16870);
        assert!(error
            .errmsg
            .starts_with("Invalid 'let' parameter :: caused by :: "));
        for reads in [
            doc! {"x": "$a"},
            doc! {"x": "$$ROOT"},
            doc! {"x": "$$CURRENT.a"},
        ] {
            let error = evaluate(reads.clone()).unwrap_err();
            assert_eq!(error.code, ErrorCode::Location4890500, "{reads}");
        }
        let error = evaluate(doc! {"x": "$$undefined"}).unwrap_err();
        assert_eq!(error.code, ErrorCode::Location17276);
    }
}
