//! The in-memory store: for tests, the simulation and `--store memory`. Leases and state
//! share one mutex, so a commit checks the fence and applies its writes in one step.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use charm_model::error::not_found;
use charm_model::tx::{
    AppView, BagOwner, ElectedTerm, ModelTx, PodSpecState, TxResult, UnitUpdate,
};

use super::{
    Claim, Lease, LeaseFuture, LeaseStore, QueuedHook, StateStore, Step, StepOp, StoreError,
    StoreFuture,
};
use crate::model::{
    ActionRecord, ApplicationRecord, BagWrites, ConfigValue, Hook, LeaseHolder, LogRecord,
    PodSpecRecord, PodSpecWrite, RelationId, RelationRecord, SharedBag, SharedConfig, Status,
    UnitRecord, apply_writes,
};

#[derive(Debug, Clone)]
struct LeaseEntry {
    holder: String,
    term: u64,
    expiry: Instant,
}

#[derive(Debug, Default)]
struct UnitEntry {
    record: UnitRecord,
    /// Being removed.
    dying: bool,
    /// Queued hooks, by sequence number.
    queue: Vec<(u64, Hook)>,
    /// Its log ring, oldest first.
    logs: std::collections::VecDeque<LogRecord>,
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
    /// The pod spec's revision and the write it holds, shared with the commit that made it
    /// (not copied). A charm that sets the same spec every hook hands the commit this same
    /// shared write, which is then known unchanged without comparing the JSON trees.
    pod_spec: Option<(u64, Arc<PodSpecWrite>)>,
    /// Being removed.
    dying: bool,
}

#[derive(Debug)]
struct RelationEntry {
    record: Arc<RelationRecord>,
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
    next_log: u64,
    /// Actions, by id; kept after their unit goes, as Juju keeps them.
    actions: BTreeMap<u64, ActionRecord>,
    /// Charm modules, by hash.
    modules: BTreeMap<String, Arc<Vec<u8>>>,
}

impl Inner {
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

    /// Runs a model operation in one step, under the lock.
    fn locked<T>(&self, op: impl FnOnce(&mut MemoryTx<'_>) -> T) -> T {
        let mut inner = self.lock();
        op(&mut MemoryTx {
            inner: &mut inner,
            now: Instant::now(),
        })
    }
}

/// One step on the memory store: its records, under its lock.
struct MemoryTx<'a> {
    inner: &'a mut Inner,
    now: Instant,
}

impl MemoryTx<'_> {
    fn app_mut(&mut self, app: &str) -> Result<&mut AppEntry, StoreError> {
        self.inner
            .apps
            .get_mut(app)
            .ok_or_else(|| not_found(format!("application {app}")))
    }

    fn unit_mut(&mut self, unit: &str) -> Result<&mut UnitEntry, StoreError> {
        self.inner
            .units
            .get_mut(unit)
            .ok_or_else(|| not_found(format!("unit {unit}")))
    }

    fn relation_mut(&mut self, id: RelationId) -> Result<&mut RelationEntry, StoreError> {
        self.inner
            .relations
            .get_mut(&id)
            .ok_or_else(|| not_found(format!("relation {id}")))
    }

    fn bags(
        &self,
        id: RelationId,
        owners: &[&str],
        pick: impl Fn(&RelationEntry) -> &BTreeMap<String, SharedBag>,
    ) -> Vec<SharedBag> {
        let bags = self.inner.relations.get(&id).map(pick);
        owners
            .iter()
            .map(|o| bags.and_then(|b| b.get(*o)).cloned().unwrap_or_default())
            .collect()
    }
}

impl ModelTx for MemoryTx<'_> {
    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>> {
        Ok(self.inner.apps.get(app).map(|a| a.record.clone()))
    }

    fn app_dying(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.inner.apps.get(app).is_some_and(|a| a.dying))
    }

    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>> {
        let Some(a) = self.inner.apps.get(app) else {
            return Ok(Vec::new());
        };
        Ok(a.units
            .iter()
            .filter(|u| self.inner.units.get(*u).is_some_and(|e| e.dying))
            .cloned()
            .collect())
    }

    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>> {
        Ok(self.inner.units.get(unit).and_then(|u| {
            u.queue
                .iter()
                .find(|(s, _)| *s == seq)
                .map(|(_, h)| h.clone())
        }))
    }

    fn set_app_config(
        &mut self,
        app: &str,
        config: &BTreeMap<String, ConfigValue>,
    ) -> TxResult<()> {
        let a = self.app_mut(app)?;
        a.record.config = config.clone();
        a.config = Arc::new(a.record.effective_config());
        Ok(())
    }

    fn set_app_charm(&mut self, record: &ApplicationRecord) -> TxResult<()> {
        let a = self.app_mut(&record.name)?;
        a.record = record.clone();
        a.config = Arc::new(a.record.effective_config());
        Ok(())
    }

    fn module_stored(&mut self, hash: &str) -> TxResult<bool> {
        Ok(self.inner.modules.contains_key(hash))
    }

    fn set_app_dying(&mut self, app: &str) -> TxResult<()> {
        self.app_mut(app)?.dying = true;
        Ok(())
    }

    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()> {
        self.unit_mut(unit)?.dying = true;
        Ok(())
    }

    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()> {
        let rel = self.relation_mut(id)?;
        Arc::make_mut(&mut rel.record).dying = true;
        Ok(())
    }

    fn release_lease(&mut self, app: &str) -> TxResult<()> {
        // `last_term` keeps the term, so the next leader's is higher.
        self.inner.leases.remove(app);
        Ok(())
    }

    fn delete_unit(&mut self, unit: &str) -> TxResult<()> {
        let app = crate::model::app_of(unit).to_string();
        self.inner.units.remove(unit);
        self.app_mut(&app)?.units.retain(|u| u != unit);
        let ids = self
            .inner
            .app_relations
            .get(&app)
            .cloned()
            .unwrap_or_default();
        for id in ids {
            if let Some(rel) = self.inner.relations.get_mut(&id) {
                rel.unit_bags.remove(unit);
            }
        }
        Ok(())
    }

    fn delete_relation(&mut self, id: RelationId) -> TxResult<()> {
        if let Some(rel) = self.inner.relations.remove(&id) {
            for e in &rel.record.endpoints {
                if let Some(ids) = self.inner.app_relations.get_mut(&e.app) {
                    ids.retain(|i| *i != id);
                }
            }
        }
        Ok(())
    }

    fn delete_application(&mut self, app: &str) -> TxResult<()> {
        self.inner.apps.remove(app);
        for id in self.inner.app_relations.remove(app).unwrap_or_default() {
            if let Some(rel) = self.inner.relations.get_mut(&id) {
                rel.app_bags.remove(app);
            }
        }
        Ok(())
    }

    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>> {
        Ok(self
            .inner
            .apps
            .iter()
            .map(|(name, a)| (name.clone(), a.record.charm.clone()))
            .collect())
    }

    fn app_exists(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.inner.apps.contains_key(app))
    }

    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>> {
        Ok(self.inner.apps.get(app).map(|a| AppView {
            config: a.config.clone(),
            leader_data: a.leader_data.clone(),
            status: a.status.clone(),
            module: a.record.module.clone(),
        }))
    }

    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>> {
        Ok(self
            .inner
            .apps
            .get(app)
            .map(|a| a.units.clone())
            .unwrap_or_default())
    }

    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>> {
        Ok(self.inner.apps.get(app).map(|a| a.next_unit))
    }

    fn unit_exists(&mut self, unit: &str) -> TxResult<bool> {
        Ok(self.inner.units.contains_key(unit))
    }

    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>> {
        Ok(self.inner.units.get(unit).map(|u| u.record.clone()))
    }

    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>> {
        Ok(self.inner.live_lease(app, self.now).map(|l| LeaseHolder {
            holder: l.holder.clone(),
            term: l.term,
        }))
    }

    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>> {
        Ok(self.inner.relations.get(&id).map(|r| r.record.clone()))
    }

    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>> {
        let ids = self.inner.app_relations.get(app).into_iter().flatten();
        Ok(ids
            .map(|id| self.inner.relations[id].record.clone())
            .collect())
    }

    fn next_relation_id(&mut self) -> TxResult<RelationId> {
        Ok(self.inner.next_relation + 1)
    }

    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        Ok(self.bags(id, of, |r| &r.unit_bags))
    }

    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        Ok(self.bags(id, of, |r| &r.app_bags))
    }

    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>> {
        Ok(self
            .inner
            .apps
            .get(app)
            .and_then(|a| a.pod_spec.as_ref())
            .map(|(revision, _)| *revision))
    }

    fn pod_spec_state(&mut self, app: &str, write: &Arc<PodSpecWrite>) -> TxResult<PodSpecState> {
        let a = self.app_mut(app)?;
        let Some((revision, stored)) = &mut a.pod_spec else {
            return Ok(PodSpecState {
                revision: None,
                same: false,
            });
        };
        let same = Arc::ptr_eq(stored, write) || **stored == **write;
        if same {
            // The stored spec is this write's: the next commit of the same write is known
            // unchanged without comparing the trees.
            *stored = write.clone();
        }
        Ok(PodSpecState {
            revision: Some(*revision),
            same,
        })
    }

    fn queue_of(&mut self, unit: &str) -> TxResult<Option<Vec<QueuedHook>>> {
        Ok(self.inner.units.get(unit).map(|u| {
            u.queue
                .iter()
                .map(|(seq, hook)| QueuedHook {
                    unit: unit.to_string(),
                    seq: *seq,
                    hook: hook.clone(),
                })
                .collect()
        }))
    }

    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>> {
        Ok(self.inner.apps.values().map(|a| a.record.clone()).collect())
    }

    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(self
            .inner
            .relations
            .values()
            .map(|r| r.record.clone())
            .collect())
    }

    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>> {
        Ok(self
            .inner
            .apps
            .get(app)
            .and_then(|a| a.pod_spec.as_ref())
            .map(|(revision, write)| PodSpecRecord {
                revision: *revision,
                spec: write.spec.clone(),
                k8s_resources: write.k8s_resources.clone(),
            }))
    }

    fn queued_hooks(&mut self, unit: &str) -> TxResult<Option<Vec<Hook>>> {
        Ok(self
            .inner
            .units
            .get(unit)
            .map(|u| u.queue.iter().map(|(_, h)| h.clone()).collect()))
    }

    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        Ok(self
            .inner
            .units
            .get(unit)
            .map(|u| u.queue.iter().skip(1).any(|(_, queued)| queued == hook)))
    }

    fn create_application(&mut self, record: ApplicationRecord) -> TxResult<()> {
        self.inner.apps.insert(
            record.name.clone(),
            AppEntry {
                config: Arc::new(record.effective_config()),
                record,
                next_unit: 0,
                units: Vec::new(),
                leader_data: SharedBag::default(),
                status: Status::default(),
                pod_spec: None,
                dying: false,
            },
        );
        Ok(())
    }

    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> TxResult<()> {
        let entry = self.app_mut(app)?;
        entry.next_unit = number + 1;
        entry.units.push(name.to_string());
        self.inner
            .units
            .insert(name.to_string(), UnitEntry::default());
        Ok(())
    }

    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()> {
        let mut apps: Vec<String> = record.endpoints.iter().map(|e| e.app.clone()).collect();
        apps.dedup();
        for app in apps {
            self.inner
                .app_relations
                .entry(app)
                .or_default()
                .push(record.id);
        }
        self.inner.next_relation = self.inner.next_relation.max(record.id);
        self.inner.relations.insert(
            record.id,
            RelationEntry {
                record: Arc::new(record),
                unit_bags: BTreeMap::new(),
                app_bags: BTreeMap::new(),
            },
        );
        Ok(())
    }

    fn write_bag(&mut self, owner: BagOwner<'_>, writes: &BagWrites) -> TxResult<bool> {
        let bag = match owner {
            BagOwner::Unit(id, unit) => self.relation_mut(id)?.unit_bags.entry(unit.to_string()),
            BagOwner::App(id, app) => self.relation_mut(id)?.app_bags.entry(app.to_string()),
            BagOwner::Leader(app) => {
                return Ok(apply_shared(&mut self.app_mut(app)?.leader_data, writes));
            }
        };
        Ok(apply_shared(bag.or_default(), writes))
    }

    fn set_app_status(&mut self, app: &str, status: &Status) -> TxResult<()> {
        self.app_mut(app)?.status = status.clone();
        Ok(())
    }

    fn put_pod_spec(&mut self, app: &str, revision: u64, spec: &Arc<PodSpecWrite>) -> TxResult<()> {
        self.app_mut(app)?.pod_spec = Some((revision, spec.clone()));
        Ok(())
    }

    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> TxResult<()> {
        let u = &mut self.unit_mut(unit)?.record;
        if let Some(status) = update.status {
            u.status = status.clone();
        }
        if let Some(version) = update.workload_version {
            u.workload_version = version.to_string();
        }
        apply_shared(&mut u.stored, update.stored);
        match update.elected_term {
            ElectedTerm::Keep => {}
            ElectedTerm::Set(term) => u.elected_term = Some(term),
            ElectedTerm::Clear => u.elected_term = None,
        }
        Ok(())
    }

    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> TxResult<()> {
        self.unit_mut(unit)?.record.hook_error = error.map(str::to_string);
        Ok(())
    }

    fn dequeue(&mut self, unit: &str, seq: u64) -> TxResult<()> {
        self.unit_mut(unit)?.queue.retain(|(s, _)| *s != seq);
        Ok(())
    }

    fn drop_first_queued(&mut self, unit: &str) -> TxResult<()> {
        let queue = &mut self.unit_mut(unit)?.queue;
        if !queue.is_empty() {
            queue.remove(0);
        }
        Ok(())
    }

    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()> {
        let mut seq = self.inner.next_log;
        let ring = &mut self.unit_mut(unit)?.logs;
        for line in lines {
            seq += 1;
            ring.push_back(LogRecord {
                seq,
                ..line.clone()
            });
        }
        while ring.len() > keep {
            ring.pop_front();
        }
        self.inner.next_log = seq;
        Ok(())
    }

    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>> {
        Ok(self
            .inner
            .units
            .get(unit)
            .map(|u| u.logs.iter().cloned().collect())
            .unwrap_or_default())
    }

    fn next_action_id(&mut self) -> TxResult<u64> {
        Ok(self.inner.actions.keys().next_back().map_or(1, |id| id + 1))
    }

    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>> {
        Ok(self.inner.actions.get(&id).cloned())
    }

    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()> {
        self.inner.actions.insert(record.id, record.clone());
        Ok(())
    }

    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64> {
        let seq = self.inner.next_seq + 1;
        self.unit_mut(unit)?.queue.push((seq, hook.clone()));
        self.inner.next_seq = seq;
        Ok(seq)
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
            let mut inner = self.lock();
            if inner.leases.get(app).is_some_and(|l| l.holder == holder) {
                inner.leases.remove(app);
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
            self.lock()
                .modules
                .entry(hash.clone())
                .or_insert_with(|| Arc::new(bytes.to_vec()));
            Ok(hash)
        })
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move { Ok(self.lock().modules.get(hash).map(|m| m.as_ref().clone())) })
    }
}
