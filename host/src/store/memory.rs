//! The in-memory store: for tests, the simulation and `--store memory`. Leases and state
//! share one mutex, so a commit checks the fence and applies its writes in one step.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::routing::{coalesces, deploy_hooks, follow_ups, relation_hooks};
use super::{
    AppStatusRow, BoxFuture, Claim, CommitError, CommitReceipt, Committed, Fence, Lease,
    LeaseError, LeaseStore, ModelStatus, QueuedHook, StateStore, StoreError, UnitStatusRow,
};
use crate::model::{
    ApplicationRecord, BagWrites, Changes, PodSpecRecord, PodSpecWrite, RelationEndpoint,
    RelationId, RelationRecord, RelationView, SharedBag, SharedConfig, Status, StatusKind,
    UnitSnapshot, app_of, apply_writes,
};

#[derive(Debug, Clone)]
struct LeaseEntry {
    holder: String,
    term: u64,
    expiry: Instant,
}

#[derive(Debug, Default)]
struct UnitEntry {
    status: Status,
    workload_version: String,
    hook_error: Option<String>,
    stored: SharedBag,
    elected_term: Option<u64>,
    /// Queued hooks, by sequence number.
    queue: Vec<(u64, crate::model::Hook)>,
}

#[derive(Debug)]
struct AppEntry {
    record: ApplicationRecord,
    next_unit: u32,
    units: Vec<String>,
    /// The effective config, made once: the record's config does not change.
    config: SharedConfig,
    leader_data: SharedBag,
    status: Status,
    pod_spec: Option<PodSpecRecord>,
    /// The write `pod_spec` was last committed from. A charm that sets the same spec every
    /// hook hands the commit this same shared write, which is then known unchanged without
    /// comparing the JSON trees.
    pod_spec_write: Option<Arc<PodSpecWrite>>,
}

#[derive(Debug)]
struct RelationEntry {
    record: RelationRecord,
    unit_bags: BTreeMap<String, SharedBag>,
    app_bags: BTreeMap<String, SharedBag>,
}

/// Applies `writes` to a bag that snapshots may share, copying it only if one still holds it
/// and there is something to write; whether the bag changed.
fn apply_shared(bag: &mut SharedBag, writes: &BagWrites) -> bool {
    !writes.is_empty() && apply_writes(Arc::make_mut(bag), writes)
}

#[derive(Debug, Default)]
struct Inner {
    leases: BTreeMap<String, LeaseEntry>,
    /// The last term granted per application, kept after a lease expires so terms never repeat.
    last_term: BTreeMap<String, u64>,
    apps: BTreeMap<String, AppEntry>,
    units: BTreeMap<String, UnitEntry>,
    relations: BTreeMap<RelationId, RelationEntry>,
    /// Each application's relations, so a hook's snapshot and commit cost what the unit's
    /// relations cost, not what the whole model's do.
    app_relations: BTreeMap<String, Vec<RelationId>>,
    next_relation: RelationId,
    next_seq: u64,
}

impl Inner {
    fn units_of(&self, app: &str) -> Vec<String> {
        self.apps
            .get(app)
            .map(|a| a.units.clone())
            .unwrap_or_default()
    }

    /// Queues `hooks` (all units must exist: checked by the caller), coalescing.
    fn enqueue(&mut self, hooks: Vec<(String, crate::model::Hook)>) -> Vec<QueuedHook> {
        let mut queued = Vec::new();
        for (unit, hook) in hooks {
            let Some(entry) = self.units.get_mut(&unit) else {
                continue;
            };
            let current: Vec<&crate::model::Hook> = entry.queue.iter().map(|(_, h)| h).collect();
            if coalesces(&current, &hook) {
                continue;
            }
            self.next_seq += 1;
            entry.queue.push((self.next_seq, hook.clone()));
            queued.push(QueuedHook {
                unit,
                seq: self.next_seq,
                hook,
            });
        }
        queued
    }

    fn live_lease(&self, app: &str, now: Instant) -> Option<&LeaseEntry> {
        self.leases.get(app).filter(|l| l.expiry > now)
    }
}

/// Leases and model state in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    model: String,
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store for model `model`.
    pub fn new(model: impl Into<String>) -> Self {
        MemoryStore {
            model: model.into(),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied commit: every commit
        // validates before it mutates. So a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LeaseStore for MemoryStore {
    fn claim<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Claim, LeaseError>> {
        Box::pin(async move {
            let now = Instant::now();
            let mut inner = self.lock();
            if let Some(live) = inner.live_lease(app, now).cloned() {
                if live.holder != holder {
                    return Ok(Claim::Denied {
                        holder: live.holder,
                        term: live.term,
                    });
                }
                inner.leases.insert(
                    app.to_string(),
                    LeaseEntry {
                        expiry: now + duration,
                        ..live.clone()
                    },
                );
                return Ok(Claim::Held(Lease {
                    holder: live.holder,
                    term: live.term,
                    duration,
                }));
            }
            let term = inner.last_term.get(app).copied().unwrap_or(0) + 1;
            inner.last_term.insert(app.to_string(), term);
            inner.leases.insert(
                app.to_string(),
                LeaseEntry {
                    holder: holder.to_string(),
                    term,
                    expiry: now + duration,
                },
            );
            Ok(Claim::Held(Lease {
                holder: holder.to_string(),
                term,
                duration,
            }))
        })
    }

    fn release<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            if inner.leases.get(app).is_some_and(|l| l.holder == holder) {
                inner.leases.remove(app);
            }
            Ok(())
        })
    }

    fn leader<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Option<Lease>, LeaseError>> {
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
}

fn not_found(what: impl Into<String>) -> StoreError {
    StoreError::NotFound(what.into())
}

impl StateStore for MemoryStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn add_application<'a>(
        &'a self,
        app: ApplicationRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            if inner.apps.contains_key(&app.name) {
                return Err(StoreError::AlreadyExists(format!(
                    "application {}",
                    app.name
                )));
            }
            inner.apps.insert(
                app.name.clone(),
                AppEntry {
                    config: Arc::new(app.effective_config()),
                    record: app,
                    next_unit: 0,
                    units: Vec::new(),
                    leader_data: SharedBag::default(),
                    status: Status::default(),
                    pod_spec: None,
                    pod_spec_write: None,
                },
            );
            Ok(())
        })
    }

    fn application<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ApplicationRecord, StoreError>> {
        Box::pin(async move {
            let inner = self.lock();
            inner
                .apps
                .get(name)
                .map(|a| a.record.clone())
                .ok_or_else(|| not_found(format!("application {name}")))
        })
    }

    fn applications(&self) -> BoxFuture<'_, Result<Vec<ApplicationRecord>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .lock()
                .apps
                .values()
                .map(|a| a.record.clone())
                .collect())
        })
    }

    fn add_unit<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let entry = inner
                .apps
                .get_mut(app)
                .ok_or_else(|| not_found(format!("application {app}")))?;
            let name = format!("{app}/{}", entry.next_unit);
            entry.next_unit += 1;
            entry.units.push(name.clone());
            inner.units.insert(name.clone(), UnitEntry::default());
            inner.enqueue(
                deploy_hooks()
                    .into_iter()
                    .map(|h| (name.clone(), h))
                    .collect(),
            );
            Ok(name)
        })
    }

    fn units<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let inner = self.lock();
            inner
                .apps
                .get(app)
                .map(|a| a.units.clone())
                .ok_or_else(|| not_found(format!("application {app}")))
        })
    }

    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> BoxFuture<'a, Result<(RelationRecord, Vec<QueuedHook>), StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            for e in &endpoints {
                if !inner.apps.contains_key(&e.app) {
                    return Err(not_found(format!("application {}", e.app)));
                }
            }
            // The same endpoints in either order are the same relation.
            let same = |r: &RelationEntry| {
                r.record.endpoints.len() == endpoints.len()
                    && r.record.endpoints.iter().all(|e| endpoints.contains(e))
            };
            let existing = inner
                .app_relations
                .get(endpoints.first().map_or("", |e| e.app.as_str()))
                .into_iter()
                .flatten()
                .map(|id| &inner.relations[id])
                .find(|r| same(r));
            if let Some(existing) = existing {
                return Err(StoreError::AlreadyExists(format!(
                    "relation {}",
                    existing.record.id
                )));
            }
            inner.next_relation += 1;
            let record = RelationRecord {
                id: inner.next_relation,
                interface: interface.to_string(),
                endpoints,
            };
            inner.relations.insert(
                record.id,
                RelationEntry {
                    record: record.clone(),
                    unit_bags: BTreeMap::new(),
                    app_bags: BTreeMap::new(),
                },
            );
            let mut apps: Vec<&str> = record.endpoints.iter().map(|e| e.app.as_str()).collect();
            apps.dedup();
            for app in apps {
                inner
                    .app_relations
                    .entry(app.to_string())
                    .or_default()
                    .push(record.id);
            }
            let hooks = relation_hooks(&record, |app| inner.units_of(app));
            let queued = inner.enqueue(hooks);
            Ok((record, queued))
        })
    }

    fn relations(&self) -> BoxFuture<'_, Result<Vec<RelationRecord>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .lock()
                .relations
                .values()
                .map(|r| r.record.clone())
                .collect())
        })
    }

    fn snapshot<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<UnitSnapshot, StoreError>> {
        Box::pin(async move {
            let inner = self.lock();
            let app_name = app_of(unit);
            let u = inner
                .units
                .get(unit)
                .ok_or_else(|| not_found(format!("unit {unit}")))?;
            let app = inner
                .apps
                .get(app_name)
                .ok_or_else(|| not_found(format!("application {app_name}")))?;
            let config = app.config.clone();
            let mut relations = BTreeMap::new();
            let ids = inner.app_relations.get(app_name).into_iter().flatten();
            for rel in ids.map(|id| &inner.relations[id]) {
                let (Some(local), Some(remote)) =
                    (rel.record.local(app_name), rel.record.remote(app_name))
                else {
                    continue;
                };
                let remote_units: Vec<String> = inner
                    .apps
                    .get(&remote.app)
                    .map(|a| {
                        a.units
                            .iter()
                            .filter(|u| u.as_str() != unit)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let mut unit_bags = BTreeMap::new();
                for name in remote_units.iter().map(String::as_str).chain([unit]) {
                    unit_bags.insert(
                        name.to_string(),
                        rel.unit_bags.get(name).cloned().unwrap_or_default(),
                    );
                }
                let mut app_bags = BTreeMap::new();
                for name in [app_name, remote.app.as_str()] {
                    app_bags.insert(
                        name.to_string(),
                        rel.app_bags.get(name).cloned().unwrap_or_default(),
                    );
                }
                relations.insert(
                    rel.record.id,
                    RelationView {
                        id: rel.record.id,
                        endpoint: local.endpoint.clone(),
                        remote_app: remote.app.clone(),
                        remote_units,
                        unit_bags,
                        app_bags,
                    },
                );
            }
            Ok(UnitSnapshot {
                model: self.model.clone(),
                unit: unit.to_string(),
                app: app_name.to_string(),
                config,
                relations,
                leader_data: app.leader_data.clone(),
                unit_status: u.status.clone(),
                app_status: app.status.clone(),
                stored: u.stored.clone(),
                elected_term: u.elected_term,
            })
        })
    }

    fn enqueue<'a>(
        &'a self,
        hooks: Vec<(String, crate::model::Hook)>,
    ) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            if let Some((unit, _)) = hooks.iter().find(|(u, _)| !inner.units.contains_key(u)) {
                return Err(not_found(format!("unit {unit}")));
            }
            Ok(inner.enqueue(hooks))
        })
    }

    fn queued<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let inner = self.lock();
            let u = inner
                .units
                .get(unit)
                .ok_or_else(|| not_found(format!("unit {unit}")))?;
            Ok(u.queue
                .iter()
                .map(|(seq, hook)| QueuedHook {
                    unit: unit.to_string(),
                    seq: *seq,
                    hook: hook.clone(),
                })
                .collect())
        })
    }

    fn commit<'a>(
        &'a self,
        unit: &'a str,
        hook: Option<u64>,
        changes: &'a Changes,
        fence: Option<&'a Fence>,
    ) -> BoxFuture<'a, Result<Committed, CommitError>> {
        Box::pin(async move {
            let now = Instant::now();
            let mut inner = self.lock();
            let app_name = app_of(unit).to_string();
            // Validate everything first: from here on nothing may fail.
            if !inner.units.contains_key(unit) {
                return Err(not_found(format!("unit {unit}")).into());
            }
            match fence {
                Some(f) => {
                    let holds = f.app == app_name
                        && f.holder == unit
                        && inner
                            .live_lease(&f.app, now)
                            .is_some_and(|l| l.holder == f.holder && l.term == f.term);
                    if !holds {
                        return Err(CommitError::Fenced { fence: f.clone() });
                    }
                }
                None if changes.needs_fence() => return Err(CommitError::Unfenced),
                None => {}
            }
            for id in changes.unit_bags.keys().chain(changes.app_bags.keys()) {
                let visible = inner
                    .relations
                    .get(id)
                    .is_some_and(|r| r.record.local(&app_name).is_some());
                if !visible {
                    return Err(not_found(format!("relation {id}")).into());
                }
            }
            if let Some(seq) = hook
                && !inner.units[unit].queue.iter().any(|(s, _)| *s == seq)
            {
                return Err(CommitError::NotQueued {
                    unit: unit.to_string(),
                    seq,
                });
            }

            let mut receipt = CommitReceipt::default();
            for (id, writes) in &changes.unit_bags {
                let rel = inner.relations.get_mut(id).expect("validated above");
                if apply_shared(rel.unit_bags.entry(unit.to_string()).or_default(), writes) {
                    receipt.unit_bags_changed.push(*id);
                }
            }
            for (id, writes) in &changes.app_bags {
                let rel = inner.relations.get_mut(id).expect("validated above");
                if apply_shared(rel.app_bags.entry(app_name.clone()).or_default(), writes) {
                    receipt.app_bags_changed.push(*id);
                }
            }
            let app = inner
                .apps
                .get_mut(&app_name)
                .expect("a unit's application exists");
            receipt.leader_data_changed = apply_shared(&mut app.leader_data, &changes.leader_data);
            if let Some(status) = &changes.app_status {
                app.status = status.clone();
            }
            if let Some(write) = &changes.pod_spec {
                let same_write = app
                    .pod_spec_write
                    .as_ref()
                    .is_some_and(|last| Arc::ptr_eq(last, write));
                let unchanged = same_write
                    || app.pod_spec.as_ref().is_some_and(|p| {
                        p.spec == write.spec && p.k8s_resources == write.k8s_resources
                    });
                app.pod_spec_write = Some(write.clone());
                if !unchanged {
                    let revision = app.pod_spec.as_ref().map_or(1, |p| p.revision + 1);
                    app.pod_spec = Some(PodSpecRecord {
                        revision,
                        spec: write.spec.clone(),
                        k8s_resources: write.k8s_resources.clone(),
                    });
                    receipt.pod_spec_revision = Some(revision);
                }
            }
            let u = inner.units.get_mut(unit).expect("validated above");
            if let Some(status) = &changes.unit_status {
                u.status = status.clone();
            }
            if let Some(version) = &changes.workload_version {
                u.workload_version = version.clone();
            }
            apply_shared(&mut u.stored, &changes.stored);
            if let Some(term) = changes.elected_term {
                u.elected_term = Some(term);
            } else if fence.is_none() {
                // It ran as a follower: leader-elected is owed should it lead again.
                u.elected_term = None;
            }
            if let Some(seq) = hook {
                u.queue.retain(|(s, _)| *s != seq);
            }
            // Only the relations whose bags changed can route follow-ups.
            let relations: Vec<RelationRecord> = receipt
                .unit_bags_changed
                .iter()
                .chain(&receipt.app_bags_changed)
                .filter_map(|id| inner.relations.get(id))
                .map(|r| r.record.clone())
                .collect();
            let hooks = follow_ups(unit, &receipt, &relations, |app| inner.units_of(app));
            let queued = inner.enqueue(hooks);
            Ok(Committed { receipt, queued })
        })
    }

    fn set_hook_error<'a>(
        &'a self,
        unit: &'a str,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let u = inner
                .units
                .get_mut(unit)
                .ok_or_else(|| not_found(format!("unit {unit}")))?;
            u.hook_error = error;
            Ok(())
        })
    }

    fn pod_spec<'a>(
        &'a self,
        app: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodSpecRecord>, StoreError>> {
        Box::pin(async move {
            let inner = self.lock();
            let a = inner
                .apps
                .get(app)
                .ok_or_else(|| not_found(format!("application {app}")))?;
            Ok(a.pod_spec.clone())
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<ModelStatus, StoreError>> {
        Box::pin(async move {
            let now = Instant::now();
            let inner = self.lock();
            let mut status = ModelStatus::default();
            for (name, app) in &inner.apps {
                let lease = inner.live_lease(name, now);
                status.applications.push(AppStatusRow {
                    name: name.clone(),
                    charm: app.record.charm.clone(),
                    status: app.status.clone(),
                    leader: lease.map(|l| l.holder.clone()),
                    term: lease.map(|l| l.term),
                    pod_spec_revision: app.pod_spec.as_ref().map(|p| p.revision),
                });
                for unit in &app.units {
                    let u = &inner.units[unit];
                    status.units.push(UnitStatusRow {
                        name: unit.clone(),
                        leader: lease.is_some_and(|l| &l.holder == unit),
                        status: match &u.hook_error {
                            Some(e) => Status::new(StatusKind::Error, e.clone()),
                            None => u.status.clone(),
                        },
                        workload_version: u.workload_version.clone(),
                    });
                }
            }
            Ok(status)
        })
    }
}
