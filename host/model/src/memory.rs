//! The model's records in memory: what a store that keeps nothing on disk holds, and how
//! one step reads and writes them ([`MemoryTx`], a [`ModelTx`]). `charm-host`'s memory
//! store keeps its model here, behind its lock, and the SDK's whole-model test harness
//! keeps its own; the rules stay in the operations.
//!
//! ```
//! use charm_model::memory::{HeldLeases, MemoryRecords, MemoryTx};
//! use charm_model::operations::add_application;
//! use charm_model::tx::ModelTx;
//! use charm_model::{ApplicationRecord, CharmMetadata};
//!
//! let mut records = MemoryRecords::default();
//! let mut leases = HeldLeases::default();
//! let mut tx = MemoryTx { records: &mut records, leases: &mut leases };
//! let metadata = CharmMetadata { name: "kv".into(), ..Default::default() };
//! let app = ApplicationRecord {
//!     name: "kv".into(),
//!     charm: "kv".into(),
//!     metadata,
//!     config: Default::default(),
//!     module: None,
//! };
//! add_application(&mut tx, app).unwrap();
//! assert!(tx.app_exists("kv").unwrap());
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use crate::error::{StoreError, not_found};
use crate::network::with_network_keys;
use crate::records::{
    ActionRecord, ApplicationRecord, Bag, BagWrites, ConfigValue, Hook, LeaseHolder, LogRecord,
    PodSpecRecord, PodSpecWrite, QueuedHook, RelationId, RelationRecord, SharedBag, SharedConfig,
    Status, UnitNames, UnitRecord, apply_writes,
};
use crate::tx::{AppView, BagOwner, ElectedTerm, ModelTx, PodSpecState, TxResult, UnitUpdate};

/// The application leases a step sees: which are live now, and releasing one. Expiry is
/// the store's business (its clock), so it answers here.
pub trait LeaseBook {
    /// The application's unexpired lease, if any.
    fn live(&self, app: &str) -> Option<LeaseHolder>;
    /// Deletes the application's lease, whoever holds it.
    fn release(&mut self, app: &str);
}

/// Leases that never expire, by application: a model whose time does not pass (a test's).
///
/// ```
/// use charm_model::LeaseHolder;
/// use charm_model::memory::{HeldLeases, LeaseBook};
///
/// let mut leases = HeldLeases::default();
/// leases.0.insert("kv".into(), LeaseHolder { holder: "kv/0".into(), term: 1 });
/// assert_eq!(leases.live("kv").unwrap().holder, "kv/0");
/// leases.release("kv");
/// assert!(leases.live("kv").is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldLeases(pub BTreeMap<String, LeaseHolder>);

impl LeaseBook for HeldLeases {
    fn live(&self, app: &str) -> Option<LeaseHolder> {
        self.0.get(app).cloned()
    }

    fn release(&mut self, app: &str) {
        self.0.remove(app);
    }
}

#[derive(Debug, Default)]
struct UnitEntry {
    record: UnitRecord,
    /// Being removed.
    dying: bool,
    /// Queued hooks.
    queue: HookQueue,
    /// Its log ring, oldest first.
    logs: std::collections::VecDeque<LogRecord>,
}

/// A unit's queued hooks, by sequence number, with how many of each wait: a database unit
/// in a 10,000-unit relation has 20,000 queued, and every hook queued on it asks whether an
/// equal one waits already (coalescing), which must not walk the queue.
#[derive(Debug, Default)]
struct HookQueue {
    hooks: BTreeMap<u64, Hook>,
    counts: HashMap<Hook, usize>,
    /// The queued hooks that hide something from a hook's snapshot (install, and
    /// relation-created, -joined and -broken: [`NotYetSeen`](crate::lifecycle::NotYetSeen)),
    /// so that a snapshot does not walk a long queue of relation-changed to find them.
    scope: BTreeMap<u64, Hook>,
}

impl HookQueue {
    fn push(&mut self, seq: u64, hook: &Hook) {
        *self.counts.entry(hook.clone()).or_default() += 1;
        self.hooks.insert(seq, hook.clone());
        if crate::lifecycle::NotYetSeen::depends_on(hook) {
            self.scope.insert(seq, hook.clone());
        }
    }

    fn remove(&mut self, seq: u64) {
        let Some(hook) = self.hooks.remove(&seq) else {
            return;
        };
        self.scope.remove(&seq);
        if let Some(n) = self.counts.get_mut(&hook) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&hook);
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &Hook)> {
        self.hooks.iter().map(|(seq, hook)| (*seq, hook))
    }

    /// Whether a hook equal to `hook` waits behind the first (which may be running).
    fn waits_behind_first(&self, hook: &Hook) -> bool {
        let equal = self.counts.get(hook).copied().unwrap_or(0);
        let first_is = self.hooks.first_key_value().is_some_and(|(_, h)| h == hook);
        equal > usize::from(first_is)
    }
}

#[derive(Debug)]
struct AppEntry {
    record: ApplicationRecord,
    next_unit: u32,
    units: Vec<String>,
    /// The units not being removed, made when first asked after a change to `units` or to
    /// one's `dying` ([`AppEntry::units_changed`]): every snapshot of a unit related to this
    /// application shares it.
    live: Option<UnitNames>,
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
    /// Each unit bag as a hook reads it, with the network keys, and the stored bag it was
    /// made from (none: the unit had written nothing): made again only once that bag
    /// changed, so a snapshot shares it rather than copying the bag to add the keys. The
    /// stored bag is held weakly, which keeps its address from being reused while letting a
    /// write change it in place of a copy (it then moves, so its address tells).
    seen: BTreeMap<String, (Option<Weak<Bag>>, SharedBag)>,
}

impl AppEntry {
    /// Forgets the live units: one was added, removed or began dying.
    fn units_changed(&mut self) {
        self.live = None;
    }
}

/// Applies `writes` to a bag that snapshots may share, copying it only if one still holds it
/// and there is something to write; whether the bag changed.
fn apply_shared(bag: &mut SharedBag, writes: &BagWrites) -> bool {
    !writes.is_empty() && apply_writes(Arc::make_mut(bag), writes)
}

/// Every record of one model: applications, units, relations and their bags, queues,
/// logs, actions and modules.
#[derive(Debug, Default)]
pub struct MemoryRecords {
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

impl MemoryRecords {
    /// Keeps a module's bytes under `hash`, once.
    pub fn put_module(&mut self, hash: &str, bytes: &[u8]) {
        self.modules
            .entry(hash.to_string())
            .or_insert_with(|| Arc::new(bytes.to_vec()));
    }

    /// The module kept under `hash`.
    pub fn module(&self, hash: &str) -> Option<Vec<u8>> {
        self.modules.get(hash).map(|m| m.as_ref().clone())
    }
}

/// One step on [`MemoryRecords`], with the leases `leases` says are live.
pub struct MemoryTx<'a, L: LeaseBook + ?Sized> {
    /// The records.
    pub records: &'a mut MemoryRecords,
    /// The leases.
    pub leases: &'a mut L,
}

impl<L: LeaseBook + ?Sized> MemoryTx<'_, L> {
    fn app_mut(&mut self, app: &str) -> Result<&mut AppEntry, StoreError> {
        self.records
            .apps
            .get_mut(app)
            .ok_or_else(|| not_found(format!("application {app}")))
    }

    fn unit_mut(&mut self, unit: &str) -> Result<&mut UnitEntry, StoreError> {
        self.records
            .units
            .get_mut(unit)
            .ok_or_else(|| not_found(format!("unit {unit}")))
    }

    fn relation_mut(&mut self, id: RelationId) -> Result<&mut RelationEntry, StoreError> {
        self.records
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
        let bags = self.records.relations.get(&id).map(pick);
        owners
            .iter()
            .map(|o| bags.and_then(|b| b.get(*o)).cloned().unwrap_or_default())
            .collect()
    }
}

impl<L: LeaseBook + ?Sized> ModelTx for MemoryTx<'_, L> {
    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>> {
        Ok(self.records.apps.get(app).map(|a| a.record.clone()))
    }

    fn app_dying(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.records.apps.get(app).is_some_and(|a| a.dying))
    }

    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>> {
        let Some(a) = self.records.apps.get(app) else {
            return Ok(Vec::new());
        };
        Ok(a.units
            .iter()
            .filter(|u| self.records.units.get(*u).is_some_and(|e| e.dying))
            .cloned()
            .collect())
    }

    fn unit_dying(&mut self, unit: &str) -> TxResult<bool> {
        Ok(self.records.units.get(unit).is_some_and(|u| u.dying))
    }

    fn not_yet_seen(
        &mut self,
        unit: &str,
        runs: crate::lifecycle::Runs,
    ) -> TxResult<crate::lifecycle::NotYetSeen> {
        Ok(self
            .records
            .units
            .get(unit)
            .map(|u| {
                let head = u.queue.hooks.first_key_value().map(|(seq, _)| *seq);
                let scope = u.queue.scope.iter();
                crate::lifecycle::NotYetSeen::of_queued(
                    scope.map(|(seq, hook)| (Some(*seq) == head, hook)),
                    runs,
                )
            })
            .unwrap_or_default())
    }

    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>> {
        Ok(self
            .records
            .units
            .get(unit)
            .and_then(|u| u.queue.hooks.get(&seq).cloned()))
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
        Ok(self.records.modules.contains_key(hash))
    }

    fn set_app_dying(&mut self, app: &str) -> TxResult<()> {
        self.app_mut(app)?.dying = true;
        Ok(())
    }

    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()> {
        self.unit_mut(unit)?.dying = true;
        self.app_mut(crate::records::app_of(unit))?.units_changed();
        Ok(())
    }

    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()> {
        let rel = self.relation_mut(id)?;
        Arc::make_mut(&mut rel.record).dying = true;
        Ok(())
    }

    fn release_lease(&mut self, app: &str) -> TxResult<()> {
        self.leases.release(app);
        Ok(())
    }

    fn delete_unit(&mut self, unit: &str) -> TxResult<()> {
        let app = crate::records::app_of(unit).to_string();
        self.records.units.remove(unit);
        let entry = self.app_mut(&app)?;
        entry.units.retain(|u| u != unit);
        entry.units_changed();
        let ids = self
            .records
            .app_relations
            .get(&app)
            .cloned()
            .unwrap_or_default();
        for id in ids {
            if let Some(rel) = self.records.relations.get_mut(&id) {
                rel.unit_bags.remove(unit);
                rel.seen.remove(unit);
            }
        }
        Ok(())
    }

    fn delete_relation(&mut self, id: RelationId) -> TxResult<()> {
        if let Some(rel) = self.records.relations.remove(&id) {
            for e in &rel.record.endpoints {
                if let Some(ids) = self.records.app_relations.get_mut(&e.app) {
                    ids.retain(|i| *i != id);
                }
            }
        }
        Ok(())
    }

    fn delete_application(&mut self, app: &str) -> TxResult<()> {
        self.records.apps.remove(app);
        for id in self.records.app_relations.remove(app).unwrap_or_default() {
            if let Some(rel) = self.records.relations.get_mut(&id) {
                rel.app_bags.remove(app);
            }
        }
        Ok(())
    }

    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>> {
        Ok(self
            .records
            .apps
            .iter()
            .map(|(name, a)| (name.clone(), a.record.charm.clone()))
            .collect())
    }

    fn app_exists(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.records.apps.contains_key(app))
    }

    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>> {
        Ok(self.records.apps.get(app).map(|a| AppView {
            config: a.config.clone(),
            leader_data: a.leader_data.clone(),
            status: a.status.clone(),
            module: a.record.module.clone(),
        }))
    }

    fn live_units(&mut self, app: &str) -> TxResult<UnitNames> {
        let Some(entry) = self.records.apps.get(app) else {
            return Ok(UnitNames::default());
        };
        if let Some(live) = &entry.live {
            return Ok(live.clone());
        }
        let units = &self.records.units;
        let live: UnitNames = entry
            .units
            .iter()
            .filter(|u| !units.get(*u).is_some_and(|e| e.dying))
            .cloned()
            .collect();
        if let Some(entry) = self.records.apps.get_mut(app) {
            entry.live = Some(live.clone());
        }
        Ok(live)
    }

    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>> {
        Ok(self
            .records
            .apps
            .get(app)
            .map(|a| a.units.clone())
            .unwrap_or_default())
    }

    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>> {
        Ok(self.records.apps.get(app).map(|a| a.next_unit))
    }

    fn unit_exists(&mut self, unit: &str) -> TxResult<bool> {
        Ok(self.records.units.contains_key(unit))
    }

    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>> {
        Ok(self.records.units.get(unit).map(|u| u.record.clone()))
    }

    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>> {
        Ok(self.leases.live(app))
    }

    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>> {
        Ok(self.records.relations.get(&id).map(|r| r.record.clone()))
    }

    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>> {
        let ids = self.records.app_relations.get(app).into_iter().flatten();
        Ok(ids
            .map(|id| self.records.relations[id].record.clone())
            .collect())
    }

    fn next_relation_id(&mut self) -> TxResult<RelationId> {
        Ok(self.records.next_relation + 1)
    }

    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        Ok(self.bags(id, of, |r| &r.unit_bags))
    }

    fn unit_bags_seen(
        &mut self,
        model: &str,
        id: RelationId,
        of: &[&str],
    ) -> TxResult<Vec<SharedBag>> {
        let Some(rel) = self.records.relations.get_mut(&id) else {
            return Ok(of
                .iter()
                .map(|unit| with_network_keys(SharedBag::default(), model, unit))
                .collect());
        };
        Ok(of
            .iter()
            .map(|unit| {
                let stored = rel.unit_bags.get(*unit);
                let made_from = |from: &Option<Weak<Bag>>| match (from, stored) {
                    (Some(from), Some(stored)) => std::ptr::eq(from.as_ptr(), Arc::as_ptr(stored)),
                    (None, None) => true,
                    _ => false,
                };
                match rel.seen.get(*unit) {
                    Some((from, seen)) if made_from(from) => seen.clone(),
                    _ => {
                        let seen =
                            with_network_keys(stored.cloned().unwrap_or_default(), model, unit);
                        let from = stored.map(Arc::downgrade);
                        rel.seen.insert(unit.to_string(), (from, seen.clone()));
                        seen
                    }
                }
            })
            .collect())
    }

    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        Ok(self.bags(id, of, |r| &r.app_bags))
    }

    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>> {
        Ok(self
            .records
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
        Ok(self.records.units.get(unit).map(|u| {
            u.queue
                .iter()
                .map(|(seq, hook)| QueuedHook {
                    unit: unit.to_string(),
                    seq,
                    hook: hook.clone(),
                })
                .collect()
        }))
    }

    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>> {
        Ok(self
            .records
            .apps
            .values()
            .map(|a| a.record.clone())
            .collect())
    }

    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(self
            .records
            .relations
            .values()
            .map(|r| r.record.clone())
            .collect())
    }

    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>> {
        Ok(self
            .records
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
            .records
            .units
            .get(unit)
            .map(|u| u.queue.iter().map(|(_, h)| h.clone()).collect()))
    }

    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        Ok(self
            .records
            .units
            .get(unit)
            .map(|u| u.queue.waits_behind_first(hook)))
    }

    fn create_application(&mut self, record: ApplicationRecord) -> TxResult<()> {
        self.records.apps.insert(
            record.name.clone(),
            AppEntry {
                config: Arc::new(record.effective_config()),
                record,
                next_unit: 0,
                units: Vec::new(),
                live: None,
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
        entry.units_changed();
        self.records
            .units
            .insert(name.to_string(), UnitEntry::default());
        Ok(())
    }

    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()> {
        let mut apps: Vec<String> = record.endpoints.iter().map(|e| e.app.clone()).collect();
        apps.dedup();
        for app in apps {
            self.records
                .app_relations
                .entry(app)
                .or_default()
                .push(record.id);
        }
        self.records.next_relation = self.records.next_relation.max(record.id);
        self.records.relations.insert(
            record.id,
            RelationEntry {
                record: Arc::new(record),
                unit_bags: BTreeMap::new(),
                app_bags: BTreeMap::new(),
                seen: BTreeMap::new(),
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
        self.unit_mut(unit)?.queue.remove(seq);
        Ok(())
    }

    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()> {
        let mut seq = self.records.next_log;
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
        self.records.next_log = seq;
        Ok(())
    }

    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>> {
        Ok(self
            .records
            .units
            .get(unit)
            .map(|u| u.logs.iter().cloned().collect())
            .unwrap_or_default())
    }

    fn next_action_id(&mut self) -> TxResult<u64> {
        Ok(self
            .records
            .actions
            .keys()
            .next_back()
            .map_or(1, |id| id + 1))
    }

    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>> {
        Ok(self.records.actions.get(&id).cloned())
    }

    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()> {
        self.records.actions.insert(record.id, record.clone());
        Ok(())
    }

    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64> {
        let seq = self.records.next_seq + 1;
        self.unit_mut(unit)?.queue.push(seq, hook);
        self.records.next_seq = seq;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::{add_application, add_relation, add_unit};
    use crate::records::{CharmMetadata, RelationEndpoint};
    use crate::snapshot::snapshot;

    /// The counts answer what walking the queue behind its first hook would.
    #[test]
    fn a_queue_knows_which_hooks_wait_behind_its_first() {
        let mut queue = HookQueue::default();
        let (a, b) = (Hook::Install, Hook::ConfigChanged);
        queue.push(1, &a);
        assert!(!queue.waits_behind_first(&a), "the first may be running");
        queue.push(2, &b);
        assert!(queue.waits_behind_first(&b));
        assert!(!queue.waits_behind_first(&a));
        queue.push(3, &a);
        assert!(queue.waits_behind_first(&a), "a second one waits");
        queue.remove(1);
        assert_eq!(queue.iter().next(), Some((2, &b)));
        assert!(queue.waits_behind_first(&a));
        queue.remove(3);
        assert!(!queue.waits_behind_first(&a));
        assert!(
            !queue.counts.contains_key(&a),
            "nothing kept for a hook gone"
        );
        queue.remove(2);
        assert_eq!(queue.iter().next(), None);
        assert!(queue.counts.is_empty());
    }

    /// A snapshot's remote units are the application's shared list, made again only after
    /// a unit is added or begins dying.
    #[test]
    fn snapshots_share_the_live_units_until_they_change() {
        let mut records = MemoryRecords::default();
        let mut leases = HeldLeases::default();
        let mut tx = MemoryTx {
            records: &mut records,
            leases: &mut leases,
        };
        let first = tx.live_units("none").unwrap();
        assert!(first.is_empty());
        let record = ApplicationRecord {
            name: "web".into(),
            charm: "web".into(),
            metadata: CharmMetadata {
                name: "web".into(),
                ..Default::default()
            },
            config: Default::default(),
            module: None,
        };
        add_application(&mut tx, record).unwrap();
        for _ in 0..3 {
            add_unit(&mut tx, "web").unwrap();
        }
        let before = tx.live_units("web").unwrap();
        assert_eq!(before[..], ["web/0", "web/1", "web/2"]);
        let again = tx.live_units("web").unwrap();
        assert!(
            std::ptr::eq(before.as_ptr(), again.as_ptr()),
            "shared, not made again"
        );
        tx.set_unit_dying("web/1").unwrap();
        assert_eq!(tx.live_units("web").unwrap()[..], ["web/0", "web/2"]);
        add_unit(&mut tx, "web").unwrap();
        assert_eq!(
            tx.live_units("web").unwrap()[..],
            ["web/0", "web/2", "web/3"]
        );
        tx.delete_unit("web/0").unwrap();
        assert_eq!(tx.live_units("web").unwrap()[..], ["web/2", "web/3"]);
    }

    #[test]
    fn snapshots_share_a_units_bag_as_read_until_it_changes() {
        let mut records = MemoryRecords::default();
        let mut leases = HeldLeases::default();
        let mut tx = MemoryTx {
            records: &mut records,
            leases: &mut leases,
        };
        for app in ["db", "web"] {
            let record = ApplicationRecord {
                name: app.into(),
                charm: app.into(),
                metadata: CharmMetadata {
                    name: app.into(),
                    ..Default::default()
                },
                config: Default::default(),
                module: None,
            };
            add_application(&mut tx, record).unwrap();
            add_unit(&mut tx, app).unwrap();
        }
        let endpoints = ["db", "web"].map(|app| RelationEndpoint {
            app: app.into(),
            endpoint: "db".into(),
        });
        let (rel, _) = add_relation(&mut tx, "pgsql", endpoints.into()).unwrap();
        // web/0 has run its hooks: it sees the relation and db/0 in it.
        for queued in tx.queue_of("web/0").unwrap().unwrap() {
            tx.dequeue("web/0", queued.seq).unwrap();
        }
        let bag = |tx: &mut MemoryTx<'_, HeldLeases>, unit: &str| {
            snapshot(tx, "m", "web/0").unwrap().relations[&rel.id].unit_bags[unit].clone()
        };

        // A bag nobody wrote, and one written: each read twice is one bag.
        let writes = BTreeMap::from([("host".to_string(), Some("db-0".to_string()))]);
        tx.write_bag(BagOwner::Unit(rel.id, "db/0"), &writes)
            .unwrap();
        for unit in ["web/0", "db/0"] {
            let (first, again) = (bag(&mut tx, unit), bag(&mut tx, unit));
            assert!(Arc::ptr_eq(&first, &again), "{unit}: {first:?}");
            assert!(first.contains_key("ingress-address"), "{unit}: {first:?}");
        }

        // A write shows at once, the network keys kept.
        let before = bag(&mut tx, "db/0");
        let writes = BTreeMap::from([("host".to_string(), Some("db-1".to_string()))]);
        tx.write_bag(BagOwner::Unit(rel.id, "db/0"), &writes)
            .unwrap();
        let after = bag(&mut tx, "db/0");
        assert_eq!(before["host"], "db-0");
        assert_eq!(after["host"], "db-1");
        assert_eq!(after["ingress-address"], before["ingress-address"]);
        // A charm's own value for a network key wins, and removing it shows the host's.
        let own = BTreeMap::from([("ingress-address".to_string(), Some("10.0.0.9".to_string()))]);
        tx.write_bag(BagOwner::Unit(rel.id, "db/0"), &own).unwrap();
        assert_eq!(bag(&mut tx, "db/0")["ingress-address"], "10.0.0.9");
        let removed = BTreeMap::from([("ingress-address".to_string(), None)]);
        tx.write_bag(BagOwner::Unit(rel.id, "db/0"), &removed)
            .unwrap();
        assert_eq!(
            bag(&mut tx, "db/0")["ingress-address"],
            before["ingress-address"]
        );
    }
}
