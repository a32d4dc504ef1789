//! What a remote engine keeps per command, on the task that runs it: the round trips the command
//! cost the database, and whether the engine's cached catalog has been found current for it. The
//! dispatcher runs each command inside [`run`]; an engine calls [`add_round_trips`] for each
//! statement it sends, [`consulted`] when it answers from its cached catalog, [`checked`] once a
//! statement of the command found that catalog current, and [`request_restart`] when it found it
//! stale before the command changed anything (the dispatcher then runs the command again).
//! Outside a scope (background work, tests) nothing is recorded and no check is asked for.
//!
//! Invariant: the state belongs to the task that runs the command; work the command hands to
//! another task is outside it.

use std::cell::{Cell, RefCell};
use std::future::Future;

#[derive(Default)]
struct Scope {
    trips: Cell<u64>,
    /// Engines (by [`EngineTag`]) whose cached catalog the command used, and whether a
    /// statement of the command found it current.
    catalogs: RefCell<Vec<(EngineTag, bool)>>,
    restart: Cell<bool>,
    /// Whether the command may run again: if not, no check is asked for.
    restartable: bool,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Names one engine instance (several may live in one process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineTag(u64);

impl EngineTag {
    /// A tag no other engine of this process has.
    pub fn unique() -> EngineTag {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        EngineTag(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// How a command ran.
#[derive(Debug)]
pub struct Ran<T> {
    pub output: T,
    /// Statements sent to a remote engine's database.
    pub round_trips: u64,
    /// An engine found its cached catalog stale before the command changed anything: the
    /// output is not to be used, the command is to run again.
    pub restart: bool,
    /// An engine answered from its cached catalog without any statement finding it current:
    /// the output stands only if the catalog is still current (`Storage::catalog_current`).
    pub unchecked: bool,
}

/// Runs `future` as one command; `restartable`: whether it may run again when an engine finds
/// its cached catalog stale (a statement of a multi-document transaction may not: its snapshot
/// holds its own catalog).
pub async fn run<F: Future>(future: F, restartable: bool) -> Ran<F::Output> {
    let scope = Scope {
        restartable,
        ..Scope::default()
    };
    SCOPE
        .scope(scope, async {
            let output = future.await;
            SCOPE.with(|scope| Ran {
                output,
                round_trips: scope.trips.get(),
                restart: scope.restart.get(),
                unchecked: scope.restartable
                    && scope.catalogs.borrow().iter().any(|(_, checked)| !checked),
            })
        })
        .await
}

/// Counts `trips` round trips for the command running on this task, if any.
pub fn add_round_trips(trips: u64) {
    let _ = SCOPE.try_with(|scope| scope.trips.set(scope.trips.get() + trips));
}

/// Records that engine `tag` answered from its cached catalog in this command.
pub fn consulted(tag: EngineTag) {
    let _ = SCOPE.try_with(|scope| {
        let mut catalogs = scope.catalogs.borrow_mut();
        if !catalogs.iter().any(|(seen, _)| *seen == tag) {
            catalogs.push((tag, false));
        }
    });
}

/// Whether engine `tag` should have its next statement check the catalog: inside a command that
/// may run again, until one has.
pub fn needs_check(tag: EngineTag) -> bool {
    SCOPE
        .try_with(|scope| {
            scope.restartable
                && !scope
                    .catalogs
                    .borrow()
                    .iter()
                    .any(|(seen, checked)| *seen == tag && *checked)
        })
        .unwrap_or(false)
}

/// Records that a statement of this command found engine `tag`'s cached catalog current (or
/// that the command has changed something, after which it is never run again).
pub fn checked(tag: EngineTag) {
    let _ = SCOPE.try_with(|scope| {
        let mut catalogs = scope.catalogs.borrow_mut();
        match catalogs.iter_mut().find(|(seen, _)| *seen == tag) {
            Some((_, checked)) => *checked = true,
            None => catalogs.push((tag, true)),
        }
    });
}

/// Asks the dispatcher to run the command again (see [`Ran::restart`]).
pub fn request_restart() {
    let _ = SCOPE.try_with(|scope| scope.restart.set(true));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trips_are_counted_inside_a_scope_only() {
        add_round_trips(5);
        let ran = run(
            async {
                add_round_trips(2);
                tokio::task::yield_now().await;
                add_round_trips(1);
            },
            true,
        )
        .await;
        assert_eq!(ran.round_trips, 3);
        assert!(!ran.restart && !ran.unchecked);
    }

    #[tokio::test]
    async fn a_consulted_catalog_is_unchecked_until_a_statement_checks_it() {
        let (first, second) = (EngineTag::unique(), EngineTag::unique());
        assert!(!needs_check(first), "nothing is asked outside a command");
        let ran = run(
            async {
                consulted(first);
                consulted(second);
                let before = needs_check(first);
                checked(first);
                (before, needs_check(first), needs_check(second))
            },
            true,
        )
        .await;
        assert_eq!(ran.output, (true, false, true));
        assert!(
            ran.unchecked,
            "the second engine's catalog was never checked"
        );
        let ran = run(
            async {
                consulted(first);
                checked(first);
                request_restart();
            },
            true,
        )
        .await;
        assert!(!ran.unchecked && ran.restart);
        let ran = run(
            async {
                consulted(first);
                needs_check(first)
            },
            false,
        )
        .await;
        assert!(
            !ran.output && !ran.unchecked,
            "a command that may not run again checks nothing"
        );
    }
}
