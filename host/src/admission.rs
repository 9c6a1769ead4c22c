//! Admission of hooks: how many of a host's units run a hook at once.
//!
//! Every unit has an agent, and on one host thousands of agents can have a hook to run at
//! the same moment (a relation of 10,000 units fires hooks on all of them). Left to the
//! runtime, they would all start at once: hundreds of blocking threads taking turns on a
//! few cores, each hook waiting behind all the others at every step, the machine's time
//! going to switching between them. Here a few hooks run at once, in the order their units
//! asked, and the rest wait without a thread.
//!
//! A step of a hook that runs long (a charm that loops, a store that answers slowly) gives
//! the hook's place up after [`HOLD_MAX`], and the hook finishes outside the count: a slow
//! hook does not hold the others back, and the count stays a matter of throughput, never
//! of correctness.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a step of a hook keeps its place before the hook runs on outside the count.
pub const HOLD_MAX: Duration = Duration::from_millis(10);

/// How many places per core a host has by default: enough that a hook's store steps
/// overlap others' runs, few enough that a hook is not kept waiting behind hundreds.
pub const PLACES_PER_CORE: usize = 8;

/// The default number of places: [`PLACES_PER_CORE`] per core of this machine.
pub fn places_for_this_machine() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    PLACES_PER_CORE * cores
}

/// The places for hooks on one host, given in the order asked (first come, first served).
pub struct Admission(Arc<Semaphore>);

impl Admission {
    /// `places` hooks at once (at least one).
    pub fn new(places: usize) -> Self {
        Admission(Arc::new(Semaphore::new(places.max(1))))
    }

    /// [`places_for_this_machine`] places.
    pub fn for_this_machine() -> Self {
        Admission::new(places_for_this_machine())
    }

    /// Waits for a place for a hook.
    pub async fn enter(&self) -> Admitted {
        let place = self.0.clone().acquire_owned().await;
        // The semaphore is never closed.
        Admitted(place.ok())
    }
}

/// A hook's place; given back when dropped, or by [`Admitted::run`] when a step runs long.
pub struct Admitted(Option<OwnedSemaphorePermit>);

impl Admitted {
    /// Runs `work`, a step of the hook, in this place, giving the place back if it takes
    /// longer than [`HOLD_MAX`]: the hook then finishes outside the count. Once given back,
    /// only runs `work`.
    pub async fn run<T>(&mut self, work: impl Future<Output = T>) -> T {
        if self.0.is_none() {
            return work.await;
        }
        tokio::pin!(work);
        tokio::select! {
            done = &mut work => done,
            () = tokio::time::sleep(HOLD_MAX) => {
                self.0 = None;
                work.await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// Whether `enter` has finished, without waiting.
    fn admitted_now(f: &mut (impl Future<Output = Admitted> + Unpin)) -> Option<Admitted> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(a) => Some(a),
            std::task::Poll::Pending => None,
        }
    }

    #[tokio::test]
    async fn places_are_given_in_the_order_asked() {
        let admission = Admission::new(1);
        let first = admission.enter().await;
        let mut second = Box::pin(admission.enter());
        let mut third = Box::pin(admission.enter());
        assert!(admitted_now(&mut second).is_none(), "no place free");
        assert!(admitted_now(&mut third).is_none());
        drop(first);
        assert!(admitted_now(&mut third).is_none(), "second asked first");
        let second = admitted_now(&mut second).expect("the first to ask");
        drop(second);
        assert!(admitted_now(&mut third).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_step_gives_its_place_up_and_finishes_outside_the_count() {
        let admission = Admission::new(1);
        let mut long = admission.enter().await;
        let mut short = Box::pin(admission.enter());
        let (done, finished) = oneshot::channel::<()>();
        let long_hook = tokio::spawn(async move {
            let step = long
                .run(async {
                    finished.await.ok();
                    "finished"
                })
                .await;
            // Given up already: a later step runs without one.
            (step, long.run(async { "next step" }).await)
        });
        tokio::time::sleep(HOLD_MAX / 2).await;
        assert!(admitted_now(&mut short).is_none(), "held while short");
        tokio::time::sleep(HOLD_MAX).await;
        let short = admitted_now(&mut short).expect("given up when long");
        done.send(()).unwrap();
        assert_eq!(long_hook.await.unwrap(), ("finished", "next step"));
        drop(short);
        assert_eq!(admission.0.available_permits(), 1, "nothing lost");
    }
}
