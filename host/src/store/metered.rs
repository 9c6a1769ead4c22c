//! A store decorator that measures every request: its duration and, when it fails, the
//! kind of failure, by operation; and the commits the fence refused, by application. One
//! place for every backend, so the figures mean the same on memory, SQLite and etcd.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use charm_model::tx::ModelTx;

use super::state::Failure;
use super::{
    BoxFuture, Claim, CommitError, CommitFuture, HookCommit, Lease, LeaseError, LeaseFuture,
    LeaseStore, StateStore, Step, StepOp, Store, StoreFuture, Verdict,
};
use crate::metrics::StoreMetrics;
use prometheus_client::metrics::histogram::Histogram;

/// Every operation the decorator measures, as its `operation` label.
const OPERATIONS: &[&str] = &[
    "claim",
    "release",
    "leader",
    "commit",
    "add_application",
    "application",
    "applications",
    "add_unit",
    "add_unit_up_to",
    "units",
    "add_relation",
    "deploy",
    "unit_details",
    "resolve_unit",
    "record_logs",
    "debug_log",
    "set_config",
    "relate",
    "add_units",
    "remove_units",
    "remove_unit",
    "remove_relation",
    "remove_application",
    "enqueue",
    "queued",
    "relations",
    "snapshot",
    "hook_read",
    "unit_bag",
    "unit_bags",
    "set_hook_error",
    "hook_failed",
    "pod_spec",
    "status",
    "run_action",
    "action",
    "start_action",
    "upgrade_charm",
    "put_module",
    "module",
];

/// A store whose requests are measured in [`StoreMetrics`]; otherwise the store it wraps.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    metrics: StoreMetrics,
    /// Each operation's histogram, resolved once: agents on several threads then share no
    /// lock of the metric family on every request, only the histogram's own.
    durations: HashMap<&'static str, Histogram>,
}

impl MeteredStore {
    /// Measures `inner`'s requests in `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: StoreMetrics) -> Self {
        let durations = OPERATIONS
            .iter()
            .map(|op| (*op, metrics.duration_of(op)))
            .collect();
        MeteredStore {
            inner,
            metrics,
            durations,
        }
    }

    /// Runs `request`, then counts it as `operation`.
    fn timed<'a, T: Send + 'a, E: Failure + Send + 'a>(
        &'a self,
        operation: &'static str,
        request: BoxFuture<'a, Result<T, E>>,
    ) -> BoxFuture<'a, Result<T, E>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = request.await;
            self.record(operation, started.elapsed(), answer.as_ref().err());
            answer
        })
    }

    fn record<E: Failure>(&self, operation: &'static str, took: Duration, error: Option<&E>) {
        match self.durations.get(operation) {
            Some(histogram) => histogram.observe(took.as_secs_f64()),
            None => self
                .metrics
                .duration_of(operation)
                .observe(took.as_secs_f64()),
        }
        if let Some(error) = error {
            self.metrics.failed(operation, error.kind());
        }
    }
}

impl Failure for LeaseError {
    fn kind(&self) -> &'static str {
        match self {
            LeaseError::Unavailable(_) => "unavailable",
        }
    }
}

/// An operation that failed, by the kind its verdict gave.
struct Aborted(&'static str);

impl Failure for Aborted {
    fn kind(&self) -> &'static str {
        self.0
    }
}

impl LeaseStore for MeteredStore {
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim> {
        self.timed("claim", self.inner.claim(app, holder, ttl))
    }

    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()> {
        self.timed("release", self.inner.release(app, holder))
    }

    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>> {
        self.timed("leader", self.inner.leader(app))
    }

    fn lease_signal(self: Arc<Self>, app: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let inner: Arc<dyn LeaseStore> = self.inner.clone();
        inner.lease_signal(app)
    }
}

impl StateStore for MeteredStore {
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }

    /// Every operation but the commit: timed by its name, failed by its store's error or
    /// its own.
    fn step<'a>(&'a self, step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let operation = step.operation;
            let started = Instant::now();
            let mut verdict = Verdict::Apply;
            let mut watched = |tx: &mut dyn ModelTx| {
                verdict = op(tx);
                verdict
            };
            let answer = self.inner.step(step, &mut watched).await;
            let took = started.elapsed();
            match (&answer, verdict) {
                (Err(e), _) => self.record(operation, took, Some(e)),
                (Ok(()), Verdict::Abort(kind)) => {
                    self.record(operation, took, Some(&Aborted(kind)))
                }
                (Ok(()), Verdict::Apply) => self.record::<Aborted>(operation, took, None),
            }
            answer
        })
    }

    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String> {
        self.timed("put_module", self.inner.put_module(bytes))
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.timed("module", self.inner.module(hash))
    }

    fn commit_hook<'a>(&'a self, request: HookCommit<'a>) -> CommitFuture<'a> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.inner.commit_hook(request).await;
            self.record("commit", started.elapsed(), answer.as_ref().err());
            if let Err(CommitError::Fenced { fence }) = &answer {
                self.metrics.fenced(&fence.app);
            }
            answer
        })
    }

    fn queue_signal(self: Arc<Self>, unit: &str) -> Option<Arc<Notify>> {
        let inner: Arc<dyn StateStore> = self.inner.clone();
        inner.queue_signal(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::HostMetrics;
    use std::collections::BTreeMap;

    use crate::model::{ApplicationRecord, Changes, CharmMetadata};
    use crate::store::{Fence, MemoryStore, StoreError};

    #[tokio::test]
    async fn requests_are_timed_and_failures_counted_by_operation() {
        let metrics = HostMetrics::new();
        let store = MeteredStore::new(Arc::new(MemoryStore::new("test")), metrics.store());
        let app = ApplicationRecord {
            name: "app".into(),
            charm: "app.wasm".into(),
            metadata: CharmMetadata {
                name: "app".into(),
                ..Default::default()
            },
            config: BTreeMap::new(),
            module: None,
        };
        store.add_application(app).await.unwrap();
        let unit = store.add_unit("app").await.unwrap();
        let Claim::Held(lease) = store
            .claim("app", &unit, Duration::from_secs(60))
            .await
            .unwrap()
        else {
            panic!("the only unit is denied the lease");
        };
        let stale = Fence {
            app: "app".into(),
            holder: unit.clone(),
            term: lease.term + 1,
        };
        let changes = Changes {
            leader_data: BTreeMap::from([("k".into(), Some("v".into()))]),
            ..Default::default()
        };
        let refused = store.commit(&unit, None, &changes, Some(&stale)).await;
        assert!(
            matches!(refused, Err(CommitError::Fenced { .. })),
            "{refused:?}"
        );
        let missing = store.snapshot("app/9").await;
        assert!(
            matches!(missing, Err(StoreError::NotFound(_))),
            "{missing:?}"
        );
        let text = metrics.encode();
        for line in [
            r#"charm_host_commits_fenced_total{application="app"} 1"#,
            r#"charm_host_store_errors_total{operation="commit",kind="fenced"} 1"#,
            r#"charm_host_store_errors_total{operation="snapshot",kind="not-found"} 1"#,
            r#"charm_host_store_request_duration_seconds_count{operation="claim"} 1"#,
            r#"charm_host_store_request_duration_seconds_count{operation="add_unit"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }

    #[test]
    fn every_operation_is_resolved() {
        let source = include_str!("state.rs").to_string() + include_str!("lease.rs");
        let metered = include_str!("metered.rs");
        for op in OPERATIONS {
            assert!(
                source.contains(&format!("fn {op}")),
                "{op} is no store operation"
            );
        }
        for timed in metered.split("self.timed(\"").skip(1) {
            let op = timed.split('"').next().unwrap();
            assert!(OPERATIONS.contains(&op), "{op} is not in OPERATIONS");
        }
        // Each step names its operation first.
        let steps = include_str!("state.rs");
        for marker in ["Step::write(\"", "Step::read(\""] {
            for step in steps.split(marker).skip(1) {
                let op = step.split('"').next().unwrap();
                assert!(OPERATIONS.contains(&op), "{op} is not in OPERATIONS");
            }
        }
    }
}
