//! The QuickJS runtime behind server-side JavaScript: one runtime per server thread, one fresh
//! context per [`super::JsProgram`] (so no two commands' programs ever share globals), and the
//! budgets every call runs under.
//!
//! Invariants:
//! - A call runs with an interrupt handler that stops it once the per-invocation time cap or the
//!   command's deadline (`maxTimeMS`, `killOp`) passes; the runtime has a memory limit and a
//!   native stack limit. Any of the three ending a call drops the whole runtime, so the next call
//!   starts clean.
//! - At most [`CACHED_CONTEXTS`] contexts live per thread; the least recently used is dropped.
//! - Nothing here awaits: a call runs to completion (or to its budget) on the calling thread.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use rquickjs::function::{Rest, This};
use rquickjs::{Array, Context, Ctx, Function, Object, Runtime, Value};

use super::convert::{bson_to_js, document_to_js, engine_error, js_to_bson};
use super::JsProgram;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_base::limits::Deadline;

/// Contexts kept per thread (a filter with two `$where`s alternates between two).
const CACHED_CONTEXTS: usize = 4;
/// The native stack JavaScript may use (server threads have `limits::THREAD_STACK_BYTES`).
pub(crate) const MAX_STACK_BYTES: usize = 1024 * 1024;
/// The global holding a program's compiled functions, in order.
const FUNCTIONS_GLOBAL: &str = "__tideway_functions";

const PRELUDE: &str = include_str!("prelude.js");

/// Why the interrupt handler stopped a call.
enum Interrupt {
    TimeCap(u64),
    Command(CommandError),
}

thread_local! {
    /// Bytes the thread's runtime holds, its limit, and whether an allocation was refused.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    static ALLOCATION_LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    static ALLOCATION_REFUSED: Cell<bool> = const { Cell::new(false) };
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// When the call in progress must stop: its cap, and the command's deadline.
    static INVOCATION: Cell<Option<(Instant, u64, Deadline)>> = const { Cell::new(None) };
    static INTERRUPTED: RefCell<Option<Interrupt>> = const { RefCell::new(None) };
}

struct CachedContext {
    program_id: u64,
    context: Context,
}

/// Field order matters: contexts drop before the runtime they live in.
struct Engine {
    contexts: VecDeque<CachedContext>,
    memory_limit_bytes: usize,
    runtime: Runtime,
}

/// The Rust allocator with a per-thread byte budget: an allocation past it fails (QuickJS then
/// throws), and the refusal is remembered so the failure is reported as memory exhaustion.
struct BudgetAllocator;

fn reserve(bytes: usize) -> bool {
    let used = ALLOCATED.with(Cell::get);
    if used.saturating_add(bytes) > ALLOCATION_LIMIT.with(Cell::get) {
        ALLOCATION_REFUSED.with(|refused| refused.set(true));
        return false;
    }
    ALLOCATED.with(|allocated| allocated.set(used + bytes));
    true
}

fn release(bytes: usize) {
    // try_with: the runtime may be dropped while the thread's locals are torn down.
    let _ = ALLOCATED.try_with(|allocated| allocated.set(allocated.get().saturating_sub(bytes)));
}

// SAFETY: every pointer comes from `RustAllocator`, whose guarantees this wrapper keeps; it only
// refuses requests (returns null) and keeps a count of usable bytes.
unsafe impl rquickjs::allocator::Allocator for BudgetAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !reserve(size) {
            return std::ptr::null_mut();
        }
        let pointer = rquickjs::allocator::RustAllocator.alloc(size);
        if pointer.is_null() {
            release(size);
        } else {
            // SAFETY: allocated just above by RustAllocator.
            let usable = unsafe { rquickjs::allocator::RustAllocator::usable_size(pointer) };
            ALLOCATED.with(|allocated| allocated.set(allocated.get() + usable - size));
        }
        pointer
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if total == 0 || !reserve(total) {
            return std::ptr::null_mut();
        }
        let pointer = rquickjs::allocator::RustAllocator.calloc(count, size);
        if pointer.is_null() {
            release(total);
        } else {
            // SAFETY: allocated just above by RustAllocator.
            let usable = unsafe { rquickjs::allocator::RustAllocator::usable_size(pointer) };
            ALLOCATED.with(|allocated| allocated.set(allocated.get() + usable - total));
        }
        pointer
    }

    unsafe fn dealloc(&mut self, pointer: *mut u8) {
        if pointer.is_null() {
            return;
        }
        release(rquickjs::allocator::RustAllocator::usable_size(pointer));
        rquickjs::allocator::RustAllocator.dealloc(pointer);
    }

    unsafe fn realloc(&mut self, pointer: *mut u8, new_size: usize) -> *mut u8 {
        if pointer.is_null() {
            return self.alloc(new_size);
        }
        if new_size == 0 {
            self.dealloc(pointer);
            return std::ptr::null_mut();
        }
        let old = rquickjs::allocator::RustAllocator::usable_size(pointer);
        let grow = new_size.saturating_sub(old);
        if grow > 0 && !reserve(grow) {
            return std::ptr::null_mut();
        }
        let moved = rquickjs::allocator::RustAllocator.realloc(pointer, new_size);
        if moved.is_null() {
            release(grow);
            return moved;
        }
        let usable = rquickjs::allocator::RustAllocator::usable_size(moved);
        let accounted = old + grow;
        if usable >= accounted {
            ALLOCATED.with(|allocated| allocated.set(allocated.get() + usable - accounted));
        } else {
            release(accounted - usable);
        }
        moved
    }

    unsafe fn usable_size(pointer: *mut u8) -> usize {
        rquickjs::allocator::RustAllocator::usable_size(pointer)
    }
}

fn should_interrupt() -> bool {
    let Some((ends_at, cap_ms, deadline)) = INVOCATION.with(Cell::get) else {
        return false;
    };
    let reason = if let Err(error) = deadline.check() {
        Interrupt::Command(error)
    } else if Instant::now() >= ends_at {
        Interrupt::TimeCap(cap_ms)
    } else {
        return false;
    };
    INTERRUPTED.with(|cell| *cell.borrow_mut() = Some(reason));
    true
}

impl Engine {
    fn new(memory_limit_bytes: usize) -> CommandResult<Engine> {
        ALLOCATION_LIMIT.with(|limit| limit.set(memory_limit_bytes));
        let runtime = Runtime::new_with_alloc(BudgetAllocator).map_err(engine_error)?;
        runtime.set_max_stack_size(MAX_STACK_BYTES);
        runtime.set_interrupt_handler(Some(Box::new(should_interrupt)));
        Ok(Engine {
            contexts: VecDeque::new(),
            memory_limit_bytes,
            runtime,
        })
    }

    /// The context of `program`, created (prelude, scope, compiled functions) on first use.
    fn context_for(&mut self, program: &JsProgram) -> CommandResult<Context> {
        if let Some(position) = self
            .contexts
            .iter()
            .position(|cached| cached.program_id == program.id)
        {
            let cached = self
                .contexts
                .remove(position)
                .expect("position is in range");
            let context = cached.context.clone();
            self.contexts.push_front(cached);
            return Ok(context);
        }
        let context = Context::full(&self.runtime).map_err(engine_error)?;
        context.with(|ctx| initialize(&ctx, program))?;
        self.contexts.push_front(CachedContext {
            program_id: program.id,
            context: context.clone(),
        });
        if self.contexts.len() > CACHED_CONTEXTS {
            self.contexts.pop_back();
            self.runtime.run_gc();
        }
        Ok(context)
    }
}

/// Prelude, native helpers, the program's scope as globals, and its functions compiled.
fn initialize(ctx: &Ctx<'_>, program: &JsProgram) -> CommandResult<()> {
    eval_sloppy::<()>(ctx, PRELUDE).map_err(|error| exception(ctx, error))?;
    let globals = ctx.globals();
    let hex_md5 = Function::new(ctx.clone(), |text: String| {
        use md5::{Digest, Md5};
        Md5::digest(text.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    })
    .map_err(engine_error)?;
    globals.set("hex_md5", hex_md5).map_err(engine_error)?;
    if let Some(scope) = &program.scope {
        for (name, value) in scope.iter() {
            let value = match value {
                // mongod compiles Code values in a scope into functions.
                Bson::JavaScriptCode(code) => compile(ctx, code)?.into_value(),
                other => bson_to_js(ctx, other)?,
            };
            globals.set(name.as_str(), value).map_err(engine_error)?;
        }
    }
    let functions = Array::new(ctx.clone()).map_err(engine_error)?;
    for (index, source) in program.functions.iter().enumerate() {
        functions
            .set(index, compile(ctx, source)?)
            .map_err(engine_error)?;
    }
    globals
        .set(FUNCTIONS_GLOBAL, functions)
        .map_err(engine_error)?;
    Ok(())
}

/// Evaluates `source` as sloppy-mode global code, as mongod's engine runs user functions
/// (assigning an undeclared name makes a global).
fn eval_sloppy<'js, V: rquickjs::FromJs<'js>>(ctx: &Ctx<'js>, source: &str) -> rquickjs::Result<V> {
    let mut options = rquickjs::context::EvalOptions::default();
    options.strict = false;
    ctx.eval_with_options(source, options)
}

/// A function from its source: a function expression as given, or else a body (`this.a == 1`,
/// `return this.a == 1`) wrapped into one, as mongod reads `$where` strings.
fn compile<'js>(ctx: &Ctx<'js>, source: &str) -> CommandResult<Function<'js>> {
    let trimmed = source.trim();
    let attempts = [
        format!("({trimmed}\n)"),
        format!("(function() {{ return ({trimmed}\n); }})"),
        format!("(function() {{ {trimmed}\n}})"),
    ];
    let mut first_error = None;
    for attempt in &attempts {
        match eval_sloppy::<Value>(ctx, attempt) {
            Ok(value) if value.is_function() => {
                return value
                    .into_function()
                    .ok_or_else(|| CommandError::internal("compiled value is not a function"))
            }
            Ok(_) => {}
            Err(error) => {
                let error = exception(ctx, error);
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        CommandError::new(
            ErrorCode::JSInterpreterFailure,
            "The function source did not compile to a function",
        )
    }))
}

/// The pending JS exception (or engine failure) as mongod's JSInterpreterFailure.
fn exception(ctx: &Ctx<'_>, error: rquickjs::Error) -> CommandError {
    if matches!(error, rquickjs::Error::Allocation) {
        return out_of_memory();
    }
    if !matches!(error, rquickjs::Error::Exception) {
        return engine_error(error);
    }
    let thrown = ctx.catch();
    let text = if let Some(exception) = thrown.as_exception() {
        let name: String = exception
            .get::<_, Option<String>>("name")
            .ok()
            .flatten()
            .unwrap_or_else(|| "Error".into());
        let message = exception.message().unwrap_or_default();
        if message.contains("out of memory") {
            return out_of_memory();
        }
        let stack = exception.stack().unwrap_or_default();
        format!("{name}: {message} :\n{stack}")
    } else {
        thrown
            .as_string()
            .and_then(|text| text.to_string().ok())
            .or_else(|| {
                ctx.globals()
                    .get::<_, Function>("String")
                    .and_then(|to_string| to_string.call::<_, String>((thrown.clone(),)))
                    .ok()
            })
            .unwrap_or_else(|| "uncaught exception".into())
    };
    CommandError::new(ErrorCode::JSInterpreterFailure, text)
}

fn out_of_memory() -> CommandError {
    let limit = super::limits().memory_limit_bytes;
    CommandError::new(
        ErrorCode::JSInterpreterFailure,
        format!(
            "Out of memory: JavaScript execution exceeded the memory limit of {} MiB",
            limit / (1024 * 1024)
        ),
    )
}

/// What a call hands back.
pub(super) enum Outcome {
    Value(Bson),
    Truthy(bool),
    /// The `(key, value)` pairs the function passed to `emit`.
    Emitted(Vec<(Bson, Bson)>),
}

#[derive(Clone, Copy)]
pub(super) enum Want {
    Value,
    Truthy,
    Emitted,
}

/// Calls function `index` of `program` with `this` (also the global `obj` when given, as
/// `$where` and `map` see it) and `args`, under the budgets.
pub(super) fn call(
    program: &JsProgram,
    index: usize,
    this: Option<&Document>,
    args: &[Bson],
    want: Want,
) -> CommandResult<Outcome> {
    let limits = super::limits();
    let deadline = super::deadline();
    deadline.check()?;
    let started = Instant::now();
    INVOCATION.with(|cell| {
        cell.set(Some((
            started + Duration::from_millis(limits.time_limit_ms),
            limits.time_limit_ms,
            deadline,
        )));
    });
    INTERRUPTED.with(|cell| cell.borrow_mut().take());
    ALLOCATION_REFUSED.with(|refused| refused.set(false));
    let result = ENGINE.with(|cell| -> CommandResult<Outcome> {
        let mut slot = cell.borrow_mut();
        let engine = match slot.as_mut() {
            Some(engine) => engine,
            None => slot.insert(Engine::new(limits.memory_limit_bytes)?),
        };
        if engine.memory_limit_bytes != limits.memory_limit_bytes {
            ALLOCATION_LIMIT.with(|limit| limit.set(limits.memory_limit_bytes));
            engine.memory_limit_bytes = limits.memory_limit_bytes;
        }
        let context = engine.context_for(program)?;
        context.with(|ctx| invoke(&ctx, index, this, args, want))
    });
    INVOCATION.with(|cell| cell.set(None));
    let interrupt = INTERRUPTED.with(|cell| cell.borrow_mut().take());
    let refused = ALLOCATION_REFUSED.with(|refused| refused.replace(false));
    let result = match (result, interrupt) {
        (Err(_), _) if refused => Err(out_of_memory()),
        (Err(_), Some(Interrupt::Command(error))) => Err(error),
        (Err(_), Some(Interrupt::TimeCap(cap_ms))) => Err(CommandError::new(
            ErrorCode::JSInterpreterFailure,
            format!("JavaScript execution terminated: it ran longer than the limit of {cap_ms} ms per invocation"),
        )),
        (result, _) => result,
    };
    if let Err(error) = &result {
        if error.code != ErrorCode::JSInterpreterFailure
            || error.errmsg.starts_with("Out of memory")
            || error.errmsg.starts_with("JavaScript execution terminated")
            || error.errmsg.contains("stack overflow")
            || error.errmsg.contains("Maximum call stack")
        {
            // Budgets exhausted: start the next call on a fresh runtime.
            ENGINE.with(|cell| cell.borrow_mut().take());
        }
    }
    result
}

fn invoke<'js>(
    ctx: &Ctx<'js>,
    index: usize,
    this: Option<&Document>,
    args: &[Bson],
    want: Want,
) -> CommandResult<Outcome> {
    let globals = ctx.globals();
    let functions: Array = globals.get(FUNCTIONS_GLOBAL).map_err(engine_error)?;
    let function: Function = functions.get(index).map_err(engine_error)?;
    let this_value = match this {
        Some(document) => {
            let value = document_to_js(ctx, document)?;
            globals.set("obj", value.clone()).map_err(engine_error)?;
            value
        }
        None => Value::new_undefined(ctx.clone()),
    };
    let mut arguments = Vec::with_capacity(args.len());
    for arg in args {
        arguments.push(bson_to_js(ctx, arg)?);
    }
    let returned: Value = function
        .call((This(this_value), Rest(arguments)))
        .map_err(|error| exception(ctx, error))?;
    match want {
        Want::Value => Ok(Outcome::Value(js_to_bson(ctx, &returned)?)),
        Want::Truthy => {
            let boolean: Function = globals.get("Boolean").map_err(engine_error)?;
            let truthy: bool = boolean.call((returned,)).map_err(engine_error)?;
            Ok(Outcome::Truthy(truthy))
        }
        Want::Emitted => {
            let emits: Array = globals.get("__emits").map_err(engine_error)?;
            let mut pairs = Vec::with_capacity(emits.len());
            for entry in emits.iter::<Array>() {
                let entry = entry.map_err(engine_error)?;
                let key: Value = entry.get(0).map_err(engine_error)?;
                let value: Value = entry.get(1).map_err(engine_error)?;
                pairs.push((js_to_bson(ctx, &key)?, js_to_bson(ctx, &value)?));
            }
            let fresh = Array::new(ctx.clone()).map_err(engine_error)?;
            let emits_holder: Object = globals.clone();
            emits_holder.set("__emits", fresh).map_err(engine_error)?;
            Ok(Outcome::Emitted(pairs))
        }
    }
}

/// Runs `test` in a fresh context with the prelude loaded (unit tests of the conversions).
#[cfg(test)]
pub(super) fn with_test_context<R>(test: impl FnOnce(&Ctx<'_>) -> R) -> R {
    let runtime = Runtime::new().expect("runtime");
    let context = Context::full(&runtime).expect("context");
    context.with(|ctx| {
        ctx.eval::<(), _>(PRELUDE).expect("prelude");
        test(&ctx)
    })
}
