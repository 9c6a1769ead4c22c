use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::leases::LeaseViews;
use super::process::ProcessCollector;
use crate::leadership::Leadership;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApplicationLabel {
    application: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    application: String,
    hook: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookNameLabels {
    application: String,
    hook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreErrorLabels {
    operation: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Hooks take from a fraction of a millisecond (a fresh instance, a store read and a
/// commit) to the hook timeout.
fn hook_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// Store requests take microseconds in memory, milliseconds with a disk or a network, and
/// up to the request timeout when the store does not answer.
fn store_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

/// Every metric of one host, and the registry `/metrics` encodes. Made once per process
/// and shared; the controller, its agents and trackers, and the store decorator take
/// handles from it.
///
/// | metric | labels | what it tells |
/// |---|---|---|
/// | `charm_host_hooks_total` | application, hook, result | hook attempts and how they ended |
/// | `charm_host_hook_duration_seconds` | application, hook | from the snapshot read to the commit |
/// | `charm_host_queued_hooks` | application | hooks queued or running on its units run here |
/// | `charm_host_units` | application | its units whose agents run here |
/// | `charm_host_lease_held` | application | 1 while a unit run here leads it |
/// | `charm_host_lease_term` | application | the term it leads with (0 when not held here) |
/// | `charm_host_lease_guarantee_remaining_seconds` | application | leadership guaranteed for this much longer |
/// | `charm_host_lease_renewals_total` | application | leases extended |
/// | `charm_host_lease_renewal_failures_total` | application | renewals unanswered or denied while leading |
/// | `charm_host_leadership_changes_total` | application | times a unit here became or stopped being leader |
/// | `charm_host_store_request_duration_seconds` | operation | store latency |
/// | `charm_host_store_errors_total` | operation, kind | store requests that failed |
/// | `charm_host_commits_fenced_total` | application | leader commits refused by the fence |
/// | `charm_host_charm_loads_total` | source | charms loaded from the cache or compiled |
/// | `process_*` | | CPU, memory, file descriptors, threads, start time |
#[derive(Debug)]
pub struct HostMetrics {
    registry: Registry,
    hooks: Family<HookLabels, Counter>,
    hook_seconds: HistogramFamily<HookNameLabels>,
    queued: Family<ApplicationLabel, Gauge>,
    units: Family<ApplicationLabel, Gauge>,
    renewals: Family<ApplicationLabel, Counter>,
    renewal_failures: Family<ApplicationLabel, Counter>,
    leadership_changes: Family<ApplicationLabel, Counter>,
    leases: Arc<LeaseViews>,
    store: StoreMetrics,
    charm_loads: Family<SourceLabel, Counter>,
}

impl HostMetrics {
    /// A host's metrics, registered, all at zero.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let hooks = Family::<HookLabels, Counter>::default();
        registry.register(
            "charm_host_hooks",
            "Hook attempts, by how they ended: committed, skipped, charm-failed, interrupted, fenced, store-unavailable",
            hooks.clone(),
        );
        let hook_seconds: HistogramFamily<HookNameLabels> =
            Family::new_with_constructor(hook_histogram);
        registry.register_with_unit(
            "charm_host_hook_duration",
            "Hook attempts' duration, from the snapshot read to the commit",
            Unit::Seconds,
            hook_seconds.clone(),
        );
        let queued = Family::<ApplicationLabel, Gauge>::default();
        registry.register(
            "charm_host_queued_hooks",
            "Hooks queued or running on the application's units whose agents run on this host",
            queued.clone(),
        );
        let units = Family::<ApplicationLabel, Gauge>::default();
        registry.register(
            "charm_host_units",
            "The application's units whose agents run on this host",
            units.clone(),
        );
        let leases = Arc::new(LeaseViews::default());
        registry.register_collector(Box::new(leases.clone()));
        let renewals = Family::<ApplicationLabel, Counter>::default();
        registry.register(
            "charm_host_lease_renewals",
            "Leases of the application extended by a unit on this host",
            renewals.clone(),
        );
        let renewal_failures = Family::<ApplicationLabel, Counter>::default();
        registry.register(
            "charm_host_lease_renewal_failures",
            "Renewals by the leading unit on this host that the store did not answer or denied",
            renewal_failures.clone(),
        );
        let leadership_changes = Family::<ApplicationLabel, Counter>::default();
        registry.register(
            "charm_host_leadership_changes",
            "Times a unit on this host became leader of the application or stopped being it",
            leadership_changes.clone(),
        );
        let store = StoreMetrics {
            durations: Family::new_with_constructor(store_histogram),
            errors: Family::default(),
            fenced: Family::default(),
        };
        registry.register_with_unit(
            "charm_host_store_request_duration",
            "Store requests' duration, by operation",
            Unit::Seconds,
            store.durations.clone(),
        );
        registry.register(
            "charm_host_store_errors",
            "Store requests that failed, by operation and kind (unavailable, not-found, ...)",
            store.errors.clone(),
        );
        registry.register(
            "charm_host_commits_fenced",
            "Leader commits the store refused because the lease had another holder or term",
            store.fenced.clone(),
        );
        let charm_loads = Family::<SourceLabel, Counter>::default();
        registry.register(
            "charm_host_charm_loads",
            "Charms loaded, from the compiled-charm cache or compiled",
            charm_loads.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        Arc::new(HostMetrics {
            registry,
            hooks,
            hook_seconds,
            queued,
            units,
            renewals,
            renewal_failures,
            leadership_changes,
            leases,
            store,
            charm_loads,
        })
    }

    /// Everything, in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String fails only if a metric's own encoding does.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
        {
            tracing::warn!("encoding the metrics: {e}");
        }
        text
    }

    /// The handles a unit's agent updates, for a unit of `application`. The unit counts in
    /// `charm_host_units` until the handles are dropped.
    pub fn unit(&self, application: &str) -> UnitMetrics {
        let label = ApplicationLabel {
            application: application.to_string(),
        };
        let units = self.units.get_or_create(&label).clone();
        units.inc();
        UnitMetrics {
            application: application.to_string(),
            hooks: self.hooks.clone(),
            hook_seconds: self.hook_seconds.clone(),
            queued: self.queued.get_or_create(&label).clone(),
            units,
            reported_queue: 0,
            resolved_hooks: Vec::new(),
            resolved_durations: Vec::new(),
        }
    }

    /// The handles a unit's leadership tracker updates for `application`'s lease; `leadership`
    /// is that tracker's view, read at each scrape for the lease gauges.
    pub fn lease(
        &self,
        application: &str,
        leadership: tokio::sync::watch::Receiver<Leadership>,
    ) -> LeaseMetrics {
        self.leases.watch(application, leadership);
        let label = ApplicationLabel {
            application: application.to_string(),
        };
        LeaseMetrics {
            renewals: self.renewals.get_or_create(&label).clone(),
            renewal_failures: self.renewal_failures.get_or_create(&label).clone(),
            changes: self.leadership_changes.get_or_create(&label).clone(),
        }
    }

    /// The handles the store decorator updates.
    pub fn store(&self) -> StoreMetrics {
        self.store.clone()
    }

    /// Counts a charm loaded: `compiled` or read from the cache.
    pub fn charm_loaded(&self, from: crate::charm::LoadedFrom) {
        let source = match from {
            crate::charm::LoadedFrom::Cache => "cache",
            crate::charm::LoadedFrom::Compiled => "compiled",
        };
        self.charm_loads
            .get_or_create(&SourceLabel { source })
            .inc();
    }
}

/// What one unit's agent updates: its hooks, and its share of its application's queue and
/// unit gauges.
#[derive(Debug)]
pub struct UnitMetrics {
    application: String,
    hooks: Family<HookLabels, Counter>,
    hook_seconds: HistogramFamily<HookNameLabels>,
    queued: Gauge,
    units: Gauge,
    /// This unit's part of `queued`.
    reported_queue: i64,
    resolved_hooks: Vec<(String, &'static str, Counter)>,
    resolved_durations: Vec<(String, Histogram)>,
}

impl UnitMetrics {
    /// Counts a hook attempt of this unit that ended with `result` after `took`.
    pub fn hook_ended(&mut self, hook: &str, result: &'static str, took: Duration) {
        // A unit runs a few dozen distinct hooks at most: the handles are looked up once
        // each, then found here without building labels.
        let counter = match self
            .resolved_hooks
            .iter()
            .find(|(h, r, _)| h == hook && *r == result)
        {
            Some((_, _, counter)) => counter,
            None => {
                let counter = self
                    .hooks
                    .get_or_create(&HookLabels {
                        application: self.application.clone(),
                        hook: hook.to_string(),
                        result,
                    })
                    .clone();
                self.resolved_hooks
                    .push((hook.to_string(), result, counter));
                &self.resolved_hooks[self.resolved_hooks.len() - 1].2
            }
        };
        counter.inc();
        let histogram = match self.resolved_durations.iter().find(|(h, _)| h == hook) {
            Some((_, histogram)) => histogram,
            None => {
                let histogram = self
                    .hook_seconds
                    .get_or_create(&HookNameLabels {
                        application: self.application.clone(),
                        hook: hook.to_string(),
                    })
                    .clone();
                self.resolved_durations.push((hook.to_string(), histogram));
                &self.resolved_durations[self.resolved_durations.len() - 1].1
            }
        };
        histogram.observe(took.as_secs_f64());
    }

    /// Sets this unit's queue length (queued or running), its part of the application's.
    pub fn queue_len(&mut self, len: usize) {
        let len = i64::try_from(len).unwrap_or(i64::MAX);
        if len != self.reported_queue {
            self.queued.inc_by(len - self.reported_queue);
            self.reported_queue = len;
        }
    }
}

impl Drop for UnitMetrics {
    fn drop(&mut self) {
        self.queued.dec_by(self.reported_queue);
        self.units.dec();
    }
}

/// What a unit's leadership tracker updates for its application.
#[derive(Debug, Clone)]
pub struct LeaseMetrics {
    renewals: Counter,
    renewal_failures: Counter,
    changes: Counter,
}

impl LeaseMetrics {
    /// The lease was extended, same term.
    pub fn renewed(&self) {
        self.renewals.inc();
    }

    /// A renewal while leading got no answer, or was denied.
    pub fn renewal_failed(&self) {
        self.renewal_failures.inc();
    }

    /// The unit became leader, or stopped being it.
    pub fn leadership_changed(&self) {
        self.changes.inc();
    }
}

/// What the store decorator ([`crate::store::MeteredStore`]) updates.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    durations: HistogramFamily<OperationLabel>,
    errors: Family<StoreErrorLabels, Counter>,
    fenced: Family<ApplicationLabel, Counter>,
}

impl StoreMetrics {
    /// The histogram of `operation`'s durations, to keep and observe.
    pub fn duration_of(&self, operation: &'static str) -> Histogram {
        self.durations
            .get_or_create(&OperationLabel { operation })
            .clone()
    }

    /// Counts a request of `operation` that failed with an error of `kind`.
    pub fn failed(&self, operation: &'static str, kind: &'static str) {
        self.errors
            .get_or_create(&StoreErrorLabels { operation, kind })
            .inc();
    }

    /// Counts a commit of `application`'s leader refused by the fence.
    pub fn fenced(&self, application: &str) {
        self.fenced
            .get_or_create(&ApplicationLabel {
                application: application.to_string(),
            })
            .inc();
    }
}
