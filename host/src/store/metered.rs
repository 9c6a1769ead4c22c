//! A store decorator that measures every request: its duration and, when it fails, the
//! kind of failure, by operation; and the commits the fence refused, by application. One
//! place for every backend, so the figures mean the same on memory, SQLite and etcd.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{
    AppRemoval, BoxFuture, Claim, CommitError, CommitFuture, ConfigApplied, Deployed, HookCommit,
    Lease, LeaseError, LeaseFuture, LeaseStore, ModelStatus, StateStore, Store, StoreError,
    StoreFuture, UnitDetails,
};
use crate::metrics::StoreMetrics;
use crate::model::{
    ApplicationRecord, ConfigValue, Hook, LogRecord, PodSpecRecord, QueuedHook, RelationEndpoint,
    RelationRecord, UnitSnapshot,
};
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
    "set_hook_error",
    "pod_spec",
    "status",
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
    fn timed<'a, T: Send + 'a, E: FailureKind + Send + 'a>(
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

    fn record<E: FailureKind>(&self, operation: &'static str, took: Duration, error: Option<&E>) {
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

/// A failure's kind, as a label value.
trait FailureKind {
    fn kind(&self) -> &'static str;
}

impl FailureKind for StoreError {
    fn kind(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "not-found",
            StoreError::AlreadyExists(_) => "already-exists",
            StoreError::Invalid(_) => "invalid",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Incompatible(_) => "incompatible",
        }
    }
}

impl FailureKind for CommitError {
    fn kind(&self) -> &'static str {
        match self {
            CommitError::Fenced { .. } => "fenced",
            CommitError::Unfenced => "unfenced",
            CommitError::NotQueued { .. } => "not-queued",
            CommitError::Store(e) => e.kind(),
        }
    }
}

impl FailureKind for LeaseError {
    fn kind(&self) -> &'static str {
        match self {
            LeaseError::Unavailable(_) => "unavailable",
        }
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
}

impl StateStore for MeteredStore {
    fn model_name(&self) -> &str {
        self.inner.model_name()
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
        self.inner.clone().queue_signal(unit)
    }

    fn add_application<'a>(&'a self, app: ApplicationRecord) -> StoreFuture<'a, ()> {
        self.timed("add_application", self.inner.add_application(app))
    }

    fn application<'a>(&'a self, name: &'a str) -> StoreFuture<'a, ApplicationRecord> {
        self.timed("application", self.inner.application(name))
    }

    fn applications(&self) -> StoreFuture<'_, Vec<ApplicationRecord>> {
        self.timed("applications", self.inner.applications())
    }

    fn add_unit<'a>(&'a self, app: &'a str) -> StoreFuture<'a, String> {
        self.timed("add_unit", self.inner.add_unit(app))
    }

    fn units<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Vec<String>> {
        self.timed("units", self.inner.units(app))
    }

    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        self.timed(
            "add_relation",
            self.inner.add_relation(interface, endpoints),
        )
    }

    fn deploy<'a>(&'a self, app: ApplicationRecord, units: u32) -> StoreFuture<'a, Deployed> {
        self.timed("deploy", self.inner.deploy(app, units))
    }

    fn unit_details<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitDetails> {
        self.timed("unit_details", self.inner.unit_details(unit))
    }

    fn resolve_unit<'a>(&'a self, unit: &'a str, retry: bool) -> StoreFuture<'a, Option<Hook>> {
        self.timed("resolve_unit", self.inner.resolve_unit(unit, retry))
    }

    fn record_logs<'a>(&'a self, unit: &'a str, lines: Vec<LogRecord>) -> StoreFuture<'a, ()> {
        self.timed("record_logs", self.inner.record_logs(unit, lines))
    }

    fn debug_log<'a>(
        &'a self,
        unit: Option<&'a str>,
        lines: usize,
    ) -> StoreFuture<'a, Vec<LogRecord>> {
        self.timed("debug_log", self.inner.debug_log(unit, lines))
    }

    fn set_config<'a>(
        &'a self,
        app: &'a str,
        set: BTreeMap<String, ConfigValue>,
        reset: Vec<String>,
    ) -> StoreFuture<'a, ConfigApplied> {
        self.timed("set_config", self.inner.set_config(app, set, reset))
    }

    fn relate<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        self.timed("relate", self.inner.relate(a, b))
    }

    fn add_units<'a>(&'a self, app: &'a str, count: u32) -> StoreFuture<'a, Vec<String>> {
        self.timed("add_units", self.inner.add_units(app, count))
    }

    fn remove_units<'a>(&'a self, units: Vec<String>) -> StoreFuture<'a, Vec<QueuedHook>> {
        self.timed("remove_units", self.inner.remove_units(units))
    }

    fn remove_unit<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>> {
        self.timed("remove_unit", self.inner.remove_unit(unit))
    }

    fn remove_relation<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        self.timed("remove_relation", self.inner.remove_relation(a, b))
    }

    fn remove_application<'a>(&'a self, app: &'a str, force: bool) -> StoreFuture<'a, AppRemoval> {
        self.timed(
            "remove_application",
            self.inner.remove_application(app, force),
        )
    }

    fn enqueue<'a>(&'a self, hooks: Vec<(String, Hook)>) -> StoreFuture<'a, Vec<QueuedHook>> {
        self.timed("enqueue", self.inner.enqueue(hooks))
    }

    fn queued<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>> {
        self.timed("queued", self.inner.queued(unit))
    }

    fn relations(&self) -> StoreFuture<'_, Vec<RelationRecord>> {
        self.timed("relations", self.inner.relations())
    }

    fn snapshot<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitSnapshot> {
        self.timed("snapshot", self.inner.snapshot(unit))
    }

    fn set_hook_error<'a>(&'a self, unit: &'a str, error: Option<String>) -> StoreFuture<'a, ()> {
        self.timed("set_hook_error", self.inner.set_hook_error(unit, error))
    }

    fn pod_spec<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Option<PodSpecRecord>> {
        self.timed("pod_spec", self.inner.pod_spec(app))
    }

    fn status(&self) -> StoreFuture<'_, ModelStatus> {
        self.timed("status", self.inner.status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::HostMetrics;
    use crate::model::{Changes, CharmMetadata};
    use crate::store::{Fence, MemoryStore};

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
    }
}
