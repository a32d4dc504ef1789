//! The background reader: one thread, at the lowest CPU priority an unprivileged process may set,
//! that runs the read phase of background maintenance (reaping). That phase decodes many
//! documents; here it uses the CPU that request tasks and the writer leave idle instead of
//! competing with them, which is what keeps foreground latency flat while a large expiry is
//! reaped.
//!
//! Invariants: tasks run one at a time in submission order; a task that panics fails only itself;
//! dropping the reader lets queued tasks finish, then joins the thread.

use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::{StorageError, StorageResult};

type Task = Box<dyn FnOnce() + Send>;

pub(super) struct BackgroundReader {
    /// `None` once dropping.
    tasks: Option<mpsc::Sender<Task>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundReader {
    pub fn start() -> StorageResult<BackgroundReader> {
        let (tasks, receiver) = mpsc::channel::<Task>();
        let thread = std::thread::Builder::new()
            .name("tideway-bgread".to_string())
            .stack_size(tideway_base::limits::THREAD_STACK_BYTES)
            .spawn(move || {
                lower_priority();
                for task in receiver {
                    // A task that panics drops its reply (its caller gets an error); the thread
                    // stays up for the next one.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                }
            })
            .map_err(|error| {
                StorageError::Io(format!("cannot start the background reader: {error}"))
            })?;
        Ok(BackgroundReader {
            tasks: Some(tasks),
            thread: Some(thread),
        })
    }

    /// Queues `work` on the background thread; its result arrives through [`Pending::wait`].
    pub(crate) fn queue<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> StorageResult<Pending<T>> {
        let (reply, answer) = oneshot::channel();
        self.tasks
            .as_ref()
            .ok_or_else(stopped)?
            .send(Box::new(move || {
                // The caller may have gone away; nothing to do then.
                let _ = reply.send(work());
            }))
            .map_err(|_| stopped())?;
        Ok(Pending(answer))
    }

    /// Runs `work` on the background thread and returns its result.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> StorageResult<T> {
        self.queue(work)?.wait().await
    }
}

/// The result of work queued with [`BackgroundReader::queue`].
pub(super) struct Pending<T>(oneshot::Receiver<T>);

impl<T> Pending<T> {
    pub async fn wait(self) -> StorageResult<T> {
        self.0.await.map_err(|_| stopped())
    }
}

fn stopped() -> StorageError {
    StorageError::Io("the background reader has stopped".to_string())
}

impl Drop for BackgroundReader {
    fn drop(&mut self) {
        self.tasks = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sets the calling thread's nice value to 19: it yields to every normal thread and takes what
/// they leave idle (the idle scheduling class was measured too: it starves reaping whenever
/// requests keep the cores busy). Best effort, Linux only: there a thread id addresses one
/// thread; elsewhere the call would renice the whole process.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` and `setpriority` take and return plain integers and touch no memory of
    // ours; a failure only leaves the priority unchanged.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_fails_alone() {
        let reader = BackgroundReader::start().unwrap();
        let panicked = reader.run(|| -> u32 { panic!("task failure") }).await;
        assert!(matches!(panicked, Err(StorageError::Io(_))), "{panicked:?}");
        assert_eq!(reader.run(|| 7).await, Ok(7));
    }
}
