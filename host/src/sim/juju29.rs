//! The baseline: Juju 2.9's leadership semantics, as its tracker and hook tools behave
//! (worker/leadership/tracker.go, worker/uniter/runner/context):
//!
//! - the lease is claimed for twice the requested duration and `is-leader` answers true
//!   while the requested duration has not run out since the last claim;
//! - when it has, the renewal is done *synchronously*, inside whichever `is-leader` call
//!   arrives (callers wait for it);
//! - any renewal error other than a denial kills the tracker: the waiting `is-leader` is
//!   answered false, and so is every call until the tracker restarts;
//! - the charm (Python ops) asks `is-leader` in its handler, `pod.set_spec` asks again, and
//!   `pod-spec-set` checks leadership once more when the hook's writes are flushed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::metrics::Metrics;
use crate::leadership::LeadershipConfig;
use crate::model::{Changes, PodSpecWrite, Status, StatusKind};
use crate::store::{Claim, Fence, Store};

#[derive(Debug, Default)]
struct TrackerState {
    holding: bool,
    term: u64,
    last_sent: Option<Instant>,
    dead_until: Option<Instant>,
    generation: u64,
}

/// One unit's Juju 2.9 leadership tracker.
pub(crate) struct JujuTracker {
    store: Arc<dyn Store>,
    app: String,
    unit: String,
    config: LeadershipConfig,
    restart_delay: Duration,
    state: AsyncMutex<TrackerState>,
    metrics: Arc<Metrics>,
}

impl JujuTracker {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        app: &str,
        unit: &str,
        config: LeadershipConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        JujuTracker {
            store,
            app: app.into(),
            unit: unit.into(),
            // Juju's worker restarts a dead tracker after a few seconds.
            restart_delay: config.retry_period * 2,
            config,
            state: AsyncMutex::new(TrackerState::default()),
            metrics,
        }
    }

    /// The requested duration: half the granted lease, as Juju claims 60 s to promise 30 s.
    fn requested(&self) -> Duration {
        self.config.lease_duration / 2
    }

    /// `is-leader`, Juju 2.9 style. Holding the lock while renewing is what makes callers
    /// wait for an in-flight renewal.
    pub(crate) async fn is_leader(&self) -> bool {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if state.dead_until.is_some_and(|until| now < until) {
            return false;
        }
        if state.holding
            && state
                .last_sent
                .is_some_and(|sent| now < sent + self.requested())
        {
            return true;
        }
        let sent = Instant::now();
        let answer = timeout(
            self.config.request_timeout,
            self.store
                .claim(&self.app, &self.unit, self.config.lease_duration),
        )
        .await;
        match answer {
            Ok(Ok(Claim::Held(lease))) => {
                state.holding = true;
                state.term = lease.term;
                state.last_sent = Some(sent);
                state.dead_until = None;
                self.metrics.believe(&self.unit, sent + self.requested());
                true
            }
            Ok(Ok(Claim::Denied { .. })) => {
                state.holding = false;
                self.metrics.disbelieve(&self.unit);
                false
            }
            // "lease operation timed out": the tracker dies and the answer is false.
            Ok(Err(_)) | Err(_) => {
                state.holding = false;
                state.dead_until = Some(Instant::now() + self.restart_delay);
                self.metrics.disbelieve(&self.unit);
                false
            }
        }
    }

    /// The tracker's own loop: renew when due, and (not leading) claim every retry period.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            self.is_leader().await;
            let next = {
                let state = self.state.lock().await;
                match (state.holding, state.last_sent, state.dead_until) {
                    (_, _, Some(dead)) if dead > Instant::now() => dead,
                    (true, Some(sent), _) => sent + self.requested(),
                    _ => Instant::now() + self.config.retry_period,
                }
            };
            sleep_until(next).await;
        }
    }

    /// Stops leading, as a crash does (the lease is left to lapse).
    pub(crate) async fn crash(&self, down: Duration) {
        let mut state = self.state.lock().await;
        state.holding = false;
        state.dead_until = Some(Instant::now() + down);
    }

    /// One `db-relation-changed` of the discourse charm under Python ops: whether it saw
    /// `is_leader` true, and how it ended.
    pub(crate) async fn hook(&self, work: Duration) -> (bool, Result<(), String>) {
        const NOT_LEADER: &str = "cannot set a pod spec as this unit is not a leader";
        let saw_leader = self.is_leader().await;
        sleep(work).await;
        let mut changes = Changes {
            unit_status: Some(Status::new(StatusKind::Active, "")),
            ..Default::default()
        };
        let mut fence = None;
        if saw_leader {
            // ops' pod.set_spec: "cannot set a pod spec as this unit is not a leader".
            if !self.is_leader().await {
                self.metrics.hook(true, true, false, true);
                return (true, Err(NOT_LEADER.into()));
            }
            let generation = {
                let mut state = self.state.lock().await;
                state.generation += 1;
                fence = Some(Fence {
                    app: self.app.clone(),
                    holder: self.unit.clone(),
                    term: state.term,
                });
                state.generation
            };
            let spec = serde_json::json!({"version": 3, "containers": [{"name": "discourse",
                "imageDetails": {"imagePath": "discourse/discourse:2.6"},
                "envConfig": {"DISCOURSE_DB": "host=postgresql-0", "GENERATION": format!("{} {generation}", self.unit)}}]});
            changes.pod_spec = Some(Arc::new(PodSpecWrite::new(spec, None)));
            // pod-spec-set checks leadership again when the hook's writes are flushed.
            if !self.is_leader().await {
                self.metrics.hook(true, true, false, true);
                return (true, Err(NOT_LEADER.into()));
            }
        }
        let committed = self
            .store
            .commit(&self.unit, None, &changes, fence.as_ref())
            .await;
        let refused = matches!(committed, Err(crate::store::CommitError::Fenced { .. }));
        self.metrics
            .hook(saw_leader, refused, false, committed.is_err());
        (saw_leader, committed.map(|_| ()).map_err(|e| e.to_string()))
    }
}
