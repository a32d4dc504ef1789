//! The retryable-write sessions of a replica set: per session, the newest `txnNumber` a
//! retryable write started and the lock its commands run under (`commands::retryable` runs
//! the writes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Sessions that ran retryable writes since the start: their newest `txnNumber` (a command
/// that wrote nothing leaves no record, but still makes older numbers too old) and their lock.
#[derive(Debug, Default)]
pub struct Sessions {
    slots: Mutex<HashMap<Vec<u8>, SessionSlot>>,
}

impl Sessions {
    /// Drops the slots of `keys` no command holds (sessions whose logical session expired:
    /// their stored records still answer retries, as after a restart).
    pub(crate) fn forget(&self, keys: &[Vec<u8>]) {
        let mut slots = lock(&self.slots);
        for key in keys {
            if slots
                .get(key)
                .is_some_and(|slot| Arc::strong_count(slot) == 1)
            {
                slots.remove(key);
            }
        }
    }

    /// The slot of the session `key`, created if new. Past [`MAX_IDLE_SLOTS`], the slots no
    /// command holds are dropped first: their newest txnNumber is in the stored record whenever
    /// a statement wrote, and a statement that wrote nothing may run again harmlessly.
    pub(crate) fn slot(&self, key: &[u8]) -> SessionSlot {
        let mut slots = lock(&self.slots);
        if slots.len() >= MAX_IDLE_SLOTS {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        slots.entry(key.to_vec()).or_default().clone()
    }
}

/// Slots kept before the idle ones are dropped (each a key and a lock: the map stays small however
/// many sessions come and go).
const MAX_IDLE_SLOTS: usize = 10_000;

/// One session's newest `txnNumber`, locked for the whole of each of its retryable writes.
pub(crate) type SessionSlot = Arc<tokio::sync::Mutex<Option<i64>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
