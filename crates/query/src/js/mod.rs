//! Server-side JavaScript (`$where`, `$function`, `$accumulator`, `mapReduce`) on an embedded
//! QuickJS engine, under mongod's switch (`security.javascriptEnabled`, `--noscripting`) and
//! tideway's budgets: a time cap per invocation, the command's `maxTimeMS`/`killOp`, a memory limit
//! per runtime and a native stack limit.
//!
//! Invariants:
//! - A [`JsProgram`] is plain data (`Send + Sync`, cheap to clone): source text, a scope, and an
//!   id unique to the parse that created it. The engine ([`engine`]) gives each id its own
//!   context, so commands never see each other's globals.
//! - The switch and the budgets reach the engine through [`scoped`], which dispatch wraps around
//!   every command's future: they are set on the polling thread for the duration of each poll,
//!   and restored after it. Outside any command (unit tests) the defaults apply.
//! - Every failure is a `CommandError` with mongod's code: JSInterpreterFailure (139) for
//!   exceptions, syntax errors, the time cap and memory exhaustion; MaxTimeMSExpired (50) or
//!   Interrupted (11601) when the command's deadline or kill ends a call.
//!
//! This module knows nothing of filters, pipelines or commands: they parse their own syntax and
//! call [`JsProgram::call`] and friends.

mod convert;
mod engine;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bson::{Bson, Document};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;

/// Default cap on one invocation's wall time (mongod has none; a runaway function would otherwise
/// hold a server thread until `maxTimeMS`).
pub const DEFAULT_TIME_LIMIT_MS: u64 = 10_000;
/// Default memory limit of the JavaScript runtime on each server thread.
pub(crate) const DEFAULT_MEMORY_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// The switch and budgets in force for the command being polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsLimits {
    pub enabled: bool,
    pub time_limit_ms: u64,
    pub memory_limit_bytes: usize,
}

impl Default for JsLimits {
    fn default() -> Self {
        JsLimits {
            enabled: true,
            time_limit_ms: DEFAULT_TIME_LIMIT_MS,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
        }
    }
}

thread_local! {
    static SCOPE: Cell<Option<(JsLimits, Deadline)>> = const { Cell::new(None) };
}

/// The limits of the command being polled on this thread (the defaults outside any command).
pub fn limits() -> JsLimits {
    SCOPE
        .with(Cell::get)
        .map(|(limits, _)| limits)
        .unwrap_or_default()
}

/// The deadline of the command being polled on this thread.
pub fn deadline() -> Deadline {
    SCOPE
        .with(Cell::get)
        .map(|(_, deadline)| deadline)
        .unwrap_or_default()
}

/// Runs `f` with `limits` and `deadline` in force (tests, and synchronous callers).
pub(crate) fn with_limits<R>(limits: JsLimits, deadline: Deadline, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<(JsLimits, Deadline)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPE.with(|scope| scope.set(self.0));
        }
    }
    let _restore = Restore(SCOPE.with(|scope| scope.replace(Some((limits, deadline)))));
    f()
}

/// A future polled with the JavaScript limits and deadline of its command in force.
pub struct Scoped<F> {
    inner: F,
    limits: JsLimits,
    deadline: Deadline,
}

/// Wraps a command's future so that JavaScript it runs sees `limits` and `deadline`.
pub fn scoped<F: Future + Unpin>(limits: JsLimits, deadline: Deadline, inner: F) -> Scoped<F> {
    Scoped {
        inner,
        limits,
        deadline,
    }
}

impl<F: Future + Unpin> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let (limits, deadline) = (this.limits, this.deadline);
        with_limits(limits, deadline, || Pin::new(&mut this.inner).poll(cx))
    }
}

/// mongod's answer when scripting is off, for the feature that needs it.
pub fn check_enabled(code: ErrorCode, message: &str) -> CommandResult<()> {
    if limits().enabled {
        Ok(())
    } else {
        Err(CommandError::new(code, message))
    }
}

/// mongod's message when scripting is off for `$function` and `$accumulator` (31264) and for
/// mapReduce's map (31246).
pub const DISABLED_MESSAGE: &str =
    "Cannot run server-side javascript without the javascript engine enabled";

static NEXT_PROGRAM_ID: AtomicU64 = AtomicU64::new(1);

/// One or more JavaScript functions that run in one context, with the globals of `scope`.
#[derive(Clone, Debug)]
pub struct JsProgram {
    id: u64,
    functions: Arc<[String]>,
    scope: Option<Arc<Document>>,
}

impl JsProgram {
    /// A program of `functions` (sources, in the order [`JsProgram::call`] indexes them).
    /// Compilation happens on first call.
    pub fn new(functions: Vec<String>, scope: Option<Document>) -> JsProgram {
        JsProgram {
            id: NEXT_PROGRAM_ID.fetch_add(1, Ordering::Relaxed),
            functions: Arc::from(functions),
            scope: scope.map(Arc::new),
        }
    }

    /// The sources, for explain and serialisation.
    pub fn sources(&self) -> &[String] {
        &self.functions
    }

    /// Function `index` called with `this` bound to `this` and `args`; its return value.
    pub fn call(
        &self,
        index: usize,
        this: Option<&Document>,
        args: &[Bson],
    ) -> CommandResult<Bson> {
        match engine::call(self, index, this, args, engine::Want::Value)? {
            engine::Outcome::Value(value) => Ok(value),
            _ => Err(CommandError::internal("unexpected JavaScript outcome")),
        }
    }

    /// Whether function `index`, called on `document` (as `this` and `obj`), returns a truthy
    /// value (JavaScript's truthiness), as `$where` decides.
    pub(crate) fn call_truthy(&self, index: usize, document: &Document) -> CommandResult<bool> {
        match engine::call(self, index, Some(document), &[], engine::Want::Truthy)? {
            engine::Outcome::Truthy(truthy) => Ok(truthy),
            _ => Err(CommandError::internal("unexpected JavaScript outcome")),
        }
    }

    /// The `(key, value)` pairs function `index` emits when called on `document` (mapReduce's
    /// map).
    pub fn call_emitting(
        &self,
        index: usize,
        document: &Document,
    ) -> CommandResult<Vec<(Bson, Bson)>> {
        match engine::call(self, index, Some(document), &[], engine::Want::Emitted)? {
            engine::Outcome::Emitted(pairs) => Ok(pairs),
            _ => Err(CommandError::internal("unexpected JavaScript outcome")),
        }
    }
}

/// The source of a JavaScript value as mongod takes it: a string or Code, or the code of a
/// CodeWithScope (with its scope).
pub(crate) fn code_source(value: &Bson) -> Option<(String, Option<Document>)> {
    match value {
        Bson::String(source) | Bson::JavaScriptCode(source) => Some((source.clone(), None)),
        Bson::JavaScriptCodeWithScope(code) => Some((code.code.clone(), Some(code.scope.clone()))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn program(source: &str) -> JsProgram {
        JsProgram::new(vec![source.to_string()], None)
    }

    fn fast(limits_ms: u64, memory: usize) -> JsLimits {
        JsLimits {
            enabled: true,
            time_limit_ms: limits_ms,
            memory_limit_bytes: memory,
        }
    }

    #[test]
    fn functions_bodies_and_expressions_all_compile() {
        let document = doc! {"a": 2, "b": 2};
        for (source, expected) in [
            ("function() { return this.a == this.b }", true),
            ("this.a == this.b", true),
            ("return obj.a != obj.b", false),
            ("function() { return obj.a > 1 }", true),
            ("this.a + this.b == 5", false),
        ] {
            assert_eq!(
                program(source).call_truthy(0, &document).unwrap(),
                expected,
                "{source}"
            );
        }
    }

    #[test]
    fn arguments_and_results_cross_as_bson() {
        let result = program("function(a, b) { return {sum: a + b, list: [a, b], s: 'x' + b} }")
            .call(0, None, &[Bson::Int32(2), Bson::Double(0.5)])
            .unwrap();
        assert_eq!(
            result,
            Bson::Document(doc! {"sum": 2.5, "list": [2.0, 0.5], "s": "x0.5"})
        );
    }

    #[test]
    fn shell_helpers_exist() {
        let cases = [
            (
                "function() { return hex_md5('Anya') }",
                Bson::String("9b53e667f30cd329dca1ec9e6a83e994".into()),
            ),
            (
                "function() { return Array.sum([1, 2, 3.5]) }",
                Bson::Double(6.5),
            ),
            ("function() { return NumberLong(5) }", Bson::Int64(5)),
            ("function() { return NumberInt(5) }", Bson::Int32(5)),
            (
                "function() { return new ObjectId('5f1e1e1e1e1e1e1e1e1e1e1e').str }",
                Bson::String("5f1e1e1e1e1e1e1e1e1e1e1e".into()),
            ),
        ];
        for (source, expected) in cases {
            assert_eq!(
                program(source).call(0, None, &[]).unwrap(),
                expected,
                "{source}"
            );
        }
    }

    #[test]
    fn exceptions_and_syntax_errors_are_js_interpreter_failures() {
        for source in [
            "function() { throw new Error('boom') }",
            "function() { return undefinedName + 1 }",
            "function( { ",
            "function() { throw 'plain string' }",
        ] {
            let error = program(source).call(0, None, &[]).unwrap_err();
            assert_eq!(
                error.code,
                ErrorCode::JSInterpreterFailure,
                "{source}: {error:?}"
            );
        }
        let error = program("function() { throw new Error('boom') }")
            .call(0, None, &[])
            .unwrap_err();
        assert!(error.errmsg.starts_with("Error: boom"), "{}", error.errmsg);
    }

    #[test]
    fn an_infinite_loop_ends_at_the_time_cap() {
        let started = std::time::Instant::now();
        let error = with_limits(
            fast(200, DEFAULT_MEMORY_LIMIT_BYTES),
            Deadline::none(),
            || program("function() { while (true) {} }").call(0, None, &[]),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::JSInterpreterFailure);
        assert!(error.errmsg.contains("200 ms"), "{}", error.errmsg);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // The thread's engine still works afterwards.
        assert_eq!(
            program("1 + 1").call(0, None, &[]).unwrap(),
            Bson::Double(2.0)
        );
    }

    #[test]
    fn an_infinite_loop_ends_at_the_command_deadline() {
        let deadline =
            Deadline::at(std::time::Instant::now() + std::time::Duration::from_millis(100));
        let error = with_limits(JsLimits::default(), deadline, || {
            program("function() { while (true) {} }").call(0, None, &[])
        })
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::MaxTimeMSExpired);
    }

    #[test]
    fn an_allocation_bomb_ends_at_the_memory_limit() {
        let error = with_limits(fast(20_000, 16 * 1024 * 1024), Deadline::none(), || {
            program("function() { var a = []; while (true) a.push(new Array(1e6)); }").call(
                0,
                None,
                &[],
            )
        })
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::JSInterpreterFailure);
        assert!(error.errmsg.contains("Out of memory"), "{}", error.errmsg);
        assert_eq!(program("2").call(0, None, &[]).unwrap(), Bson::Double(2.0));
    }

    #[test]
    fn unbounded_recursion_ends_with_a_stack_error() {
        let error = program("function() { function f(n) { return f(n + 1) + 1 } return f(0) }")
            .call(0, None, &[])
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::JSInterpreterFailure);
    }

    #[test]
    fn programs_do_not_share_globals() {
        let writer = program("function() { leaked = 42; return leaked }");
        assert_eq!(writer.call(0, None, &[]).unwrap(), Bson::Double(42.0));
        let reader = program("function() { return typeof leaked }");
        assert_eq!(
            reader.call(0, None, &[]).unwrap(),
            Bson::String("undefined".into())
        );
    }

    #[test]
    fn scope_values_are_globals() {
        let scoped = JsProgram::new(
            vec!["function() { return limit * 2 + twice(1) }".into()],
            Some(
                doc! {"limit": 5, "twice": Bson::JavaScriptCode("function(x) { return 2 * x }".into())},
            ),
        );
        assert_eq!(scoped.call(0, None, &[]).unwrap(), Bson::Double(12.0));
    }

    #[test]
    fn emit_collects_pairs() {
        let map = program("function() { emit(this.k, this.v); emit('all', 1) }");
        let pairs = map.call_emitting(0, &doc! {"k": "a", "v": 3}).unwrap();
        assert_eq!(
            pairs,
            vec![
                (Bson::String("a".into()), Bson::Double(3.0)),
                (Bson::String("all".into()), Bson::Double(1.0))
            ]
        );
        assert_eq!(
            map.call_emitting(0, &doc! {"k": "b", "v": 1})
                .unwrap()
                .len(),
            2
        );
    }
}
