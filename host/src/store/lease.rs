use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::BoxFuture;

/// A lease on an application's leadership, as the store granted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The unit holding it.
    pub holder: String,
    /// The fencing token: strictly increasing per application, unchanged by extensions.
    pub term: u64,
    /// How long the store will hold it from the moment it granted it.
    pub duration: Duration,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The claimant holds the lease (newly, with a new term, or extended, same term).
    Held(Lease),
    /// Another unit holds an unexpired lease.
    Denied {
        /// The unit holding it.
        holder: String,
        /// Its term.
        term: u64,
    },
}

/// A lease operation that got no answer. Never a denial: a claimant that sees this does not
/// know who leads, and must not conclude that it does not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The store did not answer in time, or could not be reached. Retry.
    #[error("lease store unavailable: {0}")]
    Unavailable(String),
}

/// The answer of a lease operation, to come.
pub type LeaseFuture<'a, T> = BoxFuture<'a, Result<T, LeaseError>>;

/// Leases on application leadership.
///
/// Contract: a lease is granted for `duration` from the moment the store handles the claim.
/// A claim by the current holder before expiry extends it and keeps its term; a claim by
/// another unit is denied until the lease expires, and then granted with the term plus one.
pub trait LeaseStore: Send + Sync {
    /// Claims or extends `app`'s lease for `holder`, to last `ttl` from the store's answer.
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim>;

    /// Gives the lease up early, if `holder` holds it, so another unit can take over at once.
    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()>;

    /// The unexpired lease on `app`, if any; its `duration` is the time it has left.
    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>>;

    /// What followers of `app`'s lease watch: its value changes when the store sees the
    /// lease go (released, or lapsed), so a follower claims at once rather than at its next
    /// poll. `None` where the store cannot watch: followers then poll every retry period.
    fn lease_signal(self: Arc<Self>, _app: &str) -> Option<watch::Receiver<u64>> {
        None
    }
}
