use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
        /// The time its lease had left when the store answered, where the store knows it
        /// without asking again (the memory and SQLite stores; not etcd, which watches the
        /// lease's key instead). A follower claims again when it is up, not before.
        expires_in: Option<Duration>,
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
    /// lease go (released; on etcd, lapsed too), so a follower claims at once rather than
    /// at its next poll. A lease that lapses where the store does not signal it is known by
    /// the denial's `expires_in`. `None` where the store cannot watch: followers then poll
    /// every retry period.
    fn lease_signal(self: Arc<Self>, _app: &str) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// The wake-ups a store hands to followers ([`LeaseStore::lease_signal`]), by
/// application: bumped when the store sees that application's lease go.
#[derive(Debug, Default)]
pub(crate) struct LeaseSignals(Mutex<HashMap<String, watch::Sender<u64>>>);

impl LeaseSignals {
    fn senders(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // Each operation leaves the map whole: a poisoned lock is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver for `app`'s wake-ups.
    pub(crate) fn subscribe(&self, app: &str) -> watch::Receiver<u64> {
        self.senders()
            .entry(app.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes `app`'s followers, if any watch.
    pub(crate) fn bump(&self, app: &str) {
        if let Some(signal) = self.senders().get(app) {
            signal.send_modify(|n| *n += 1);
        }
    }

    /// Wakes every follower: after a gap in which a lease may have gone unseen.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn bump_all(&self) {
        for signal in self.senders().values() {
            signal.send_modify(|n| *n += 1);
        }
    }

    /// Whether anyone has asked for wake-ups.
    pub(crate) fn is_empty(&self) -> bool {
        self.senders().is_empty()
    }
}
