//! The in-memory store: for tests, the simulation and `--store memory`. Leases and state
//! share one mutex, so a commit checks the fence and applies its writes in one step. The
//! records are the model's own in-memory ones ([`charm_model::memory`]); this store adds
//! the lock, the lease clock and the terms.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use charm_model::memory::{LeaseBook, MemoryRecords, MemoryTx};

use super::lease::LeaseSignals;
use super::{Claim, Lease, LeaseFuture, LeaseStore, StateStore, Step, StepOp, StoreFuture};
use crate::model::LeaseHolder;

#[derive(Debug, Clone)]
struct LeaseEntry {
    holder: String,
    term: u64,
    expiry: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    leases: BTreeMap<String, LeaseEntry>,
    /// The last term granted per application, kept after a lease expires so terms never repeat.
    last_term: BTreeMap<String, u64>,
    records: MemoryRecords,
}

impl Inner {
    fn live_lease(&self, app: &str, now: Instant) -> Option<&LeaseEntry> {
        self.leases.get(app).filter(|l| l.expiry > now)
    }
}

/// The leases as one step sees them, at the instant it began.
struct LiveLeases<'a> {
    leases: &'a mut BTreeMap<String, LeaseEntry>,
    now: Instant,
}

impl LeaseBook for LiveLeases<'_> {
    fn live(&self, app: &str) -> Option<LeaseHolder> {
        self.leases
            .get(app)
            .filter(|l| l.expiry > self.now)
            .map(|l| LeaseHolder {
                holder: l.holder.clone(),
                term: l.term,
            })
    }

    fn release(&mut self, app: &str) {
        // `last_term` keeps the term, so the next leader's is higher.
        self.leases.remove(app);
    }
}

/// Leases and model state in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    model: String,
    inner: Mutex<Inner>,
    /// Followers' wake-ups: bumped when a lease is released. A lapse needs none: a denial
    /// says when the lease ends.
    lease_signals: LeaseSignals,
}

impl MemoryStore {
    /// An empty store for model `model`.
    pub fn new(model: impl Into<String>) -> Self {
        MemoryStore {
            model: model.into(),
            inner: Mutex::new(Inner::default()),
            lease_signals: LeaseSignals::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied commit: every commit
        // validates before it mutates. So a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a model operation in one step, under the lock.
    fn locked<T>(&self, op: impl FnOnce(&mut MemoryTx<'_, LiveLeases<'_>>) -> T) -> T {
        let mut inner = self.lock();
        let Inner {
            leases, records, ..
        } = &mut *inner;
        op(&mut MemoryTx {
            records,
            leases: &mut LiveLeases {
                leases,
                now: Instant::now(),
            },
        })
    }
}

impl LeaseStore for MemoryStore {
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim> {
        Box::pin(async move {
            let now = Instant::now();
            let mut inner = self.lock();
            if let Some(live) = inner.live_lease(app, now).cloned() {
                if live.holder != holder {
                    return Ok(Claim::Denied {
                        holder: live.holder,
                        term: live.term,
                        expires_in: Some(live.expiry.saturating_duration_since(now)),
                    });
                }
                inner.leases.insert(
                    app.to_string(),
                    LeaseEntry {
                        expiry: now + ttl,
                        ..live.clone()
                    },
                );
                return Ok(Claim::Held(Lease {
                    holder: live.holder,
                    term: live.term,
                    duration: ttl,
                }));
            }
            let term = inner.last_term.get(app).copied().unwrap_or(0) + 1;
            inner.last_term.insert(app.to_string(), term);
            inner.leases.insert(
                app.to_string(),
                LeaseEntry {
                    holder: holder.to_string(),
                    term,
                    expiry: now + ttl,
                },
            );
            Ok(Claim::Held(Lease {
                holder: holder.to_string(),
                term,
                duration: ttl,
            }))
        })
    }

    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            let released = {
                let mut inner = self.lock();
                inner.leases.get(app).is_some_and(|l| l.holder == holder)
                    && inner.leases.remove(app).is_some()
            };
            if released {
                self.lease_signals.bump(app);
            }
            Ok(())
        })
    }

    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>> {
        Box::pin(async move {
            let now = Instant::now();
            let inner = self.lock();
            Ok(inner.live_lease(app, now).map(|l| Lease {
                holder: l.holder.clone(),
                term: l.term,
                duration: l.expiry.saturating_duration_since(now),
            }))
        })
    }

    fn lease_signal(
        self: std::sync::Arc<Self>,
        app: &str,
    ) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.lease_signals.subscribe(app))
    }
}

impl StateStore for MemoryStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn step<'a>(&'a self, _step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()> {
        // The model's operations check before they write: one that fails has written
        // nothing, so there is nothing to undo.
        Box::pin(async move {
            self.locked(|tx| op(tx));
            Ok(())
        })
    }

    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let hash = super::module_hash(bytes);
            self.lock().records.put_module(&hash, bytes);
            Ok(hash)
        })
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move { Ok(self.lock().records.module(hash)) })
    }
}
