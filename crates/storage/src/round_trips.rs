//! Round trips a command costs a remote engine's database, counted per command: the dispatcher
//! runs each command inside [`counted`], and an engine calls [`add`] for each statement it sends.
//! Outside a counted scope (background work, tests) [`add`] counts nothing.
//!
//! Invariant: the count belongs to the task that runs the command; work the command hands to
//! another task is not counted.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static TRIPS: Cell<u64>;
}

/// Runs `future`, returning its output and the round trips counted while it ran.
pub async fn counted<F: Future>(future: F) -> (F::Output, u64) {
    TRIPS
        .scope(Cell::new(0), async {
            let output = future.await;
            (output, TRIPS.with(Cell::get))
        })
        .await
}

/// Counts `trips` round trips for the command running on this task, if any.
pub fn add(trips: u64) {
    let _ = TRIPS.try_with(|count| count.set(count.get() + trips));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trips_are_counted_inside_a_scope_only() {
        add(5);
        let ((), trips) = counted(async {
            add(2);
            tokio::task::yield_now().await;
            add(1);
        })
        .await;
        assert_eq!(trips, 3);
    }
}
