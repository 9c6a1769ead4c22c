//! Work that must not run on the async runtime's threads (a hook, a module's compilation),
//! run on its blocking pool.

use tokio::task::JoinError;

/// Runs `work` on the runtime's blocking pool and gives back what it returned, or the panic
/// it raised, as text. A blocking task is cancelled only before it starts, as the runtime
/// shuts down: nothing ran, so there is no outcome to record (a hook recorded as failed
/// would put its unit in error for the next host), and the caller never resumes: its task
/// goes with the runtime.
pub(crate) async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match finished(tokio::task::spawn_blocking(work).await) {
        Some(outcome) => outcome,
        None => std::future::pending().await,
    }
}

/// What the end of a blocking task says: its value, its panic as text, or `None` if it was
/// cancelled before it ran.
fn finished<T>(joined: Result<T, JoinError>) -> Option<Result<T, String>> {
    match joined {
        Ok(done) => Some(Ok(done)),
        Err(e) if e.is_cancelled() => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::{finished, off_runtime};

    #[test]
    fn work_cancelled_before_it_ran_has_no_outcome() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        runtime.block_on(async {
            // The pool's one thread is busy, so the work waits in its queue.
            let _sleeper =
                tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(200)));
            let work = {
                let ran = ran.clone();
                tokio::task::spawn_blocking(move || ran.store(true, Ordering::SeqCst))
            };
            work.abort();
            assert_eq!(finished(work.await), None);
        });
        drop(runtime);
        assert!(!ran.load(Ordering::SeqCst), "cancelled work ran");
    }

    #[tokio::test]
    async fn a_panic_is_an_error_naming_it() {
        let err = off_runtime(|| -> u8 { panic!("the charm's host call") })
            .await
            .unwrap_err();
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(off_runtime(|| 7).await, Ok(7));
    }
}
