//! What a store does for the model's operations: read and write records inside one atomic
//! step. The rules (what a change checks, what it writes, which hooks it fires) are the
//! operations' ([`crate::snapshot`], [`crate::commit`], [`crate::operations`],
//! [`crate::status`]); a store only keeps the records and makes the step atomic (a SQLite
//! transaction, an etcd `Txn` guarded by the revisions it read, the memory store's lock).
//!
//! Every method may fail with the store's own error ([`StoreError::Unavailable`],
//! [`StoreError::Corrupt`]); the model's errors ([`StoreError::NotFound`] and the like) are
//! the operations' to give. A read sees the step's own writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::StoreError;
use crate::records::{
    ActionRecord, ApplicationRecord, BagWrites, ConfigValue, Hook, LeaseHolder, LogRecord,
    PodSpecRecord, PodSpecWrite, QueuedHook, RelationId, RelationRecord, SharedBag, SharedConfig,
    Status, UnitNames, UnitRecord,
};

/// What a step's reads and writes answer: the store's own errors only.
pub type TxResult<T> = Result<T, StoreError>;

/// Whose data bag a write is to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BagOwner<'a> {
    /// A unit's bag in a relation.
    Unit(RelationId, &'a str),
    /// An application's bag in a relation.
    App(RelationId, &'a str),
    /// An application's leader settings.
    Leader(&'a str),
}

/// An application as a hook sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AppView {
    /// Its effective config ([`ApplicationRecord::effective_config`]).
    pub config: SharedConfig,
    /// Its leader settings.
    pub leader_data: SharedBag,
    /// Its status, as its leader set it.
    pub status: Status,
    /// The hash of its module ([`ApplicationRecord::module`]).
    pub module: Option<String>,
}

/// What a store holds of an application's pod spec, against a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodSpecState {
    /// The stored spec's revision, if there is one.
    pub revision: Option<u64>,
    /// Whether the stored spec is the write's (same spec and resources).
    pub same: bool,
}

impl PodSpecState {
    /// The revision rule: a write of the spec already stored makes no new revision; any
    /// other write makes the next one, the first being 1. `None`: no new revision.
    ///
    /// ```
    /// use charm_model::tx::PodSpecState;
    ///
    /// assert_eq!(PodSpecState { revision: None, same: false }.next_revision(), Some(1));
    /// assert_eq!(PodSpecState { revision: Some(4), same: false }.next_revision(), Some(5));
    /// assert_eq!(PodSpecState { revision: Some(4), same: true }.next_revision(), None);
    /// ```
    pub fn next_revision(self) -> Option<u64> {
        (!self.same).then(|| self.revision.map_or(1, |r| r + 1))
    }
}

/// What a commit does to its leader-elected record ([`crate::records::Changes::elected_term`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectedTerm {
    /// Left as it is.
    Keep,
    /// Recorded: leader-elected ran for this term.
    Set(u64),
    /// Cleared: the unit ran a hook as a follower.
    Clear,
}

/// The writes a commit makes to its unit's own record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitUpdate<'a> {
    /// A new workload status.
    pub status: Option<&'a Status>,
    /// A new workload version.
    pub workload_version: Option<&'a str>,
    /// Writes to its stored state.
    pub stored: &'a BagWrites,
    /// Its leader-elected record.
    pub elected_term: ElectedTerm,
}

/// One atomic step on a store's records.
pub trait ModelTx {
    /// Every application's name and charm, by name.
    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>>;

    /// The application's record; `None` if there is no such application.
    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>>;

    /// Whether the application is being removed.
    fn app_dying(&mut self, app: &str) -> TxResult<bool>;

    /// The application's units that are being removed (none if there is no such
    /// application).
    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>>;

    /// Whether the unit is being removed. A store that can tell for one unit without
    /// listing its application's dying units answers here: a hook's snapshot asks.
    fn unit_dying(&mut self, unit: &str) -> TxResult<bool> {
        Ok(self
            .dying_units(crate::records::app_of(unit))?
            .iter()
            .any(|u| u == unit))
    }

    /// Whether the application exists.
    fn app_exists(&mut self, app: &str) -> TxResult<bool>;

    /// The application as a hook sees it; `None` if there is no such application.
    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>>;

    /// The application's units, by number (none if there is no such application).
    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>>;

    /// The application's units that are not being removed, by number (none if there is no
    /// such application): the remote units every hook's snapshot lists. A store that keeps
    /// the list between steps answers here, so a large application's list is shared by its
    /// snapshots rather than made again for each.
    fn live_units(&mut self, app: &str) -> TxResult<UnitNames> {
        let units = self.units_of(app)?;
        let dying = self.dying_units(app)?;
        Ok(live_units_of(units, &dying))
    }

    /// The number the application's next unit takes (numbers are never reused); `None` if
    /// there is no such application.
    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>>;

    /// Whether the unit exists.
    fn unit_exists(&mut self, unit: &str) -> TxResult<bool>;

    /// The unit's record; `None` if there is no such unit.
    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>>;

    /// The unexpired lease on the application, if any.
    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>>;

    /// The relation with this id.
    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>>;

    /// The relations the application takes part in, by id.
    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>>;

    /// The id the next relation takes (ids are never reused).
    fn next_relation_id(&mut self) -> TxResult<RelationId>;

    /// The unit bags of these units in the relation, in the order asked (empty where a unit
    /// has written nothing).
    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>>;

    /// The unit bags of these units in the relation as a hook reads them, in the order
    /// asked: with the network keys the host sets
    /// ([`with_network_keys`](crate::network::with_network_keys)). A store may keep what it
    /// made for the next read of the same unchanged bag.
    fn unit_bags_seen(
        &mut self,
        model: &str,
        id: RelationId,
        of: &[&str],
    ) -> TxResult<Vec<SharedBag>> {
        Ok(of
            .iter()
            .zip(self.unit_bags(id, of)?)
            .map(|(unit, bag)| crate::network::with_network_keys(bag, model, unit))
            .collect())
    }

    /// The application bags of these applications in the relation, as
    /// [`unit_bags`](Self::unit_bags).
    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>>;

    /// The revision of the application's pod spec, if it has one.
    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>>;

    /// The application's pod spec against `spec`, a write of one.
    fn pod_spec_state(&mut self, app: &str, spec: &Arc<PodSpecWrite>) -> TxResult<PodSpecState>;

    /// The hooks queued on the unit, in order; `None` if there is no such unit.
    fn queued_hooks(&mut self, unit: &str) -> TxResult<Option<Vec<Hook>>>;

    /// What `unit`'s hook that `runs` does not see yet, from its queue
    /// ([`NotYetSeen::of`](crate::lifecycle::NotYetSeen::of)); nothing hidden if there is no
    /// such unit. A store that can answer without reading the queue out answers here.
    fn not_yet_seen(
        &mut self,
        unit: &str,
        runs: crate::lifecycle::Runs,
    ) -> TxResult<crate::lifecycle::NotYetSeen> {
        Ok(self
            .queued_hooks(unit)?
            .map(|queue| crate::lifecycle::NotYetSeen::of(&queue, runs))
            .unwrap_or_default())
    }

    /// The hook with this sequence number, if it is queued on the unit.
    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>>;

    /// `unit`'s queue, in order, `None` if there is no such unit.
    fn queue_of(&mut self, unit: &str) -> TxResult<Option<Vec<QueuedHook>>>;

    /// Every application's record, by name.
    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>>;

    /// Every relation, by id.
    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>>;

    /// The application's pod spec, if it has one.
    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>>;

    /// Whether `hook` coalesces into `unit`'s queue as it stands in this step
    /// ([`crate::routing::coalesces`]), `None` if there is no such unit. A store may answer
    /// without reading the queue out.
    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        Ok(self
            .queued_hooks(unit)?
            .map(|queue| crate::routing::coalesces(&queue, hook)))
    }

    /// Whether the `hooks` hooks this step is about to queue on `units` units go into the
    /// queues after the step, from one record the step writes, rather than into each unit's
    /// queue within it; once a step defers, the rest of its hooks are deferred too. A store
    /// whose steps are bounded in size (etcd's transactions) defers when there are many; a
    /// deferred hook is queued as surely as the step is applied, but it is not in the step's
    /// answer: the store wakes the unit's agent when it reaches the queue.
    fn defers_queueing(&mut self, units: usize, hooks: usize) -> TxResult<bool> {
        let _ = (units, hooks);
        Ok(false)
    }

    /// Whether a hook about relation `id` is on its way to a live unit's queue but not in it
    /// yet: deferred by this step or by an earlier one ([`defers_queueing`](Self::defers_queueing))
    /// and not delivered. A relation stays while any is ([`crate::removal::reap_relation`]):
    /// its relation-broken still has to run. A store that never defers has none.
    fn undelivered_about(&mut self, id: RelationId) -> TxResult<bool> {
        let _ = id;
        Ok(false)
    }

    /// Creates an application, with no units, leader settings, status or pod spec.
    fn create_application(&mut self, record: ApplicationRecord) -> TxResult<()>;

    /// Creates unit `name`, number `number` of `app`, with a default record and no hooks.
    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> TxResult<()>;

    /// Creates a relation, its bags empty.
    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()>;

    /// Applies writes to a bag; whether the bag changed.
    fn write_bag(&mut self, owner: BagOwner<'_>, writes: &BagWrites) -> TxResult<bool>;

    /// Sets the application's status.
    fn set_app_status(&mut self, app: &str, status: &Status) -> TxResult<()>;

    /// Stores the application's pod spec at this revision.
    fn put_pod_spec(&mut self, app: &str, revision: u64, spec: &Arc<PodSpecWrite>) -> TxResult<()>;

    /// Updates the unit's record.
    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> TxResult<()>;

    /// Records the unit's failing hook's error, or clears it.
    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> TxResult<()>;

    /// Takes the hook with this sequence number off the unit's queue.
    fn dequeue(&mut self, unit: &str, seq: u64) -> TxResult<()>;

    /// Records which of the unit's queued hooks is failing (`None`: none of them), for a
    /// store whose queue's first hook is not always the one its agent runs (etcd's, in a
    /// race, see its docs); others keep nothing and answer the queue's first.
    fn note_failing(&mut self, unit: &str, seq: Option<u64>) -> TxResult<()> {
        let _ = (unit, seq);
        Ok(())
    }

    /// The queued hook recorded as failing on the unit ([`note_failing`](Self::note_failing)),
    /// if the store keeps that.
    fn failing_hook(&mut self, unit: &str) -> TxResult<Option<u64>> {
        let _ = unit;
        Ok(None)
    }

    /// Puts a hook at the end of the unit's queue; its sequence number, above every one
    /// the model gave before.
    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64>;

    /// Replaces the application's config settings (the operator's; defaults are not
    /// copied in).
    fn set_app_config(&mut self, app: &str, config: &BTreeMap<String, ConfigValue>)
    -> TxResult<()>;

    /// Replaces the application's charm: its `charm`, `metadata`, `config` and `module`
    /// become `record`'s (units, relations and the rest stay).
    fn set_app_charm(&mut self, record: &ApplicationRecord) -> TxResult<()>;

    /// Whether the store holds every byte of the module with this hash (content-addressed:
    /// see [`crate::upgrade`]).
    fn module_stored(&mut self, hash: &str) -> TxResult<bool>;

    /// Marks the application as being removed.
    fn set_app_dying(&mut self, app: &str) -> TxResult<()>;

    /// Marks the unit as being removed.
    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()>;

    /// Marks the relation as being removed ([`RelationRecord::dying`]). Over a dying
    /// relation it is still a write, which concurrent steps that read the relation
    /// conflict with ([`reap_relation`](crate::removal::reap_relation) relies on it).
    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()>;

    /// Deletes the application's lease, whoever holds it (the term stays used).
    fn release_lease(&mut self, app: &str) -> TxResult<()>;

    /// Deletes the unit: its record, queue, stored state, and its bags in every relation.
    fn delete_unit(&mut self, unit: &str) -> TxResult<()>;

    /// Deletes the relation and every bag in it.
    fn delete_relation(&mut self, id: RelationId) -> TxResult<()>;

    /// Deletes the application (which has no units left): its record, leader settings,
    /// status, pod spec, and its bags in relations that outlive it.
    fn delete_application(&mut self, app: &str) -> TxResult<()>;

    /// Appends lines to the unit's log ring (their `seq` is the store's to give, above every
    /// one before), keeping its newest `keep` lines.
    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()>;

    /// The unit's log ring, oldest first.
    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>>;

    /// The id the next action takes: above every one given before (ids are never reused).
    fn next_action_id(&mut self) -> TxResult<u64>;

    /// The action with this id, if there is one.
    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>>;

    /// Stores an action's record, replacing the one with its id.
    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()>;
}

/// An application's units without those being removed: the remote units every hook's
/// snapshot lists.
pub fn live_units_of(mut units: Vec<String>, dying: &[String]) -> UnitNames {
    if !dying.is_empty() {
        units.retain(|u| !dying.contains(u));
    }
    units.into()
}
