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
    ApplicationRecord, BagWrites, ConfigValue, Hook, LeaseHolder, LogRecord, PodSpecWrite,
    RelationId, RelationRecord, SharedBag, SharedConfig, Status, UnitRecord,
};

/// An application as a hook sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AppView {
    /// Its effective config ([`ApplicationRecord::effective_config`]).
    pub config: SharedConfig,
    /// Its leader settings.
    pub leader_data: SharedBag,
    /// Its status, as its leader set it.
    pub status: Status,
}

/// What a store holds of an application's pod spec, against a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodSpecState {
    /// The stored spec's revision, if there is one.
    pub revision: Option<u64>,
    /// Whether the stored spec is the write's (same spec and resources).
    pub same: bool,
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
    fn app_charms(&mut self) -> Result<Vec<(String, String)>, StoreError>;

    /// The application's record; `None` if there is no such application.
    fn application(&mut self, app: &str) -> Result<Option<ApplicationRecord>, StoreError>;

    /// Whether the application is being removed.
    fn app_dying(&mut self, app: &str) -> Result<bool, StoreError>;

    /// The application's units that are being removed (none if there is no such
    /// application).
    fn dying_units(&mut self, app: &str) -> Result<Vec<String>, StoreError>;

    /// Whether the application exists.
    fn app_exists(&mut self, app: &str) -> Result<bool, StoreError>;

    /// The application as a hook sees it; `None` if there is no such application.
    fn app_view(&mut self, app: &str) -> Result<Option<AppView>, StoreError>;

    /// The application's units, by number (none if there is no such application).
    fn units_of(&mut self, app: &str) -> Result<Vec<String>, StoreError>;

    /// The number the application's next unit takes (numbers are never reused); `None` if
    /// there is no such application.
    fn next_unit_number(&mut self, app: &str) -> Result<Option<u32>, StoreError>;

    /// Whether the unit exists.
    fn unit_exists(&mut self, unit: &str) -> Result<bool, StoreError>;

    /// The unit's record; `None` if there is no such unit.
    fn unit(&mut self, unit: &str) -> Result<Option<UnitRecord>, StoreError>;

    /// The unexpired lease on the application, if any.
    fn live_lease(&mut self, app: &str) -> Result<Option<LeaseHolder>, StoreError>;

    /// The relation with this id.
    fn relation(&mut self, id: RelationId) -> Result<Option<Arc<RelationRecord>>, StoreError>;

    /// The relations the application takes part in, by id.
    fn relations_of(&mut self, app: &str) -> Result<Vec<Arc<RelationRecord>>, StoreError>;

    /// The id the next relation takes (ids are never reused).
    fn next_relation_id(&mut self) -> Result<RelationId, StoreError>;

    /// The unit bags of these units in the relation, in the order asked (empty where a unit
    /// has written nothing).
    fn unit_bags(&mut self, id: RelationId, units: &[&str]) -> Result<Vec<SharedBag>, StoreError>;

    /// The application bags of these applications in the relation, as
    /// [`unit_bags`](Self::unit_bags).
    fn app_bags(&mut self, id: RelationId, apps: &[&str]) -> Result<Vec<SharedBag>, StoreError>;

    /// The revision of the application's pod spec, if it has one.
    fn pod_spec_revision(&mut self, app: &str) -> Result<Option<u64>, StoreError>;

    /// The application's pod spec against `write`.
    fn pod_spec_state(
        &mut self,
        app: &str,
        write: &Arc<PodSpecWrite>,
    ) -> Result<PodSpecState, StoreError>;

    /// The hooks queued on the unit, in order; `None` if there is no such unit.
    fn queued_hooks(&mut self, unit: &str) -> Result<Option<Vec<Hook>>, StoreError>;

    /// Whether the hook with this sequence number is queued on the unit.
    fn is_queued(&mut self, unit: &str, seq: u64) -> Result<bool, StoreError>;

    /// The hook with this sequence number, if it is queued on the unit.
    fn queued_hook(&mut self, unit: &str, seq: u64) -> Result<Option<Hook>, StoreError>;

    /// Creates an application, with no units, leader settings, status or pod spec.
    fn create_application(&mut self, record: ApplicationRecord) -> Result<(), StoreError>;

    /// Creates unit `name`, number `number` of `app`, with a default record and no hooks.
    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> Result<(), StoreError>;

    /// Creates a relation, its bags empty.
    fn create_relation(&mut self, record: RelationRecord) -> Result<(), StoreError>;

    /// Applies writes to a unit's bag in a relation; whether the bag changed.
    fn write_unit_bag(
        &mut self,
        id: RelationId,
        unit: &str,
        writes: &BagWrites,
    ) -> Result<bool, StoreError>;

    /// Applies writes to an application's bag in a relation; whether the bag changed.
    fn write_app_bag(
        &mut self,
        id: RelationId,
        app: &str,
        writes: &BagWrites,
    ) -> Result<bool, StoreError>;

    /// Applies writes to the application's leader settings; whether they changed.
    fn write_leader_data(&mut self, app: &str, writes: &BagWrites) -> Result<bool, StoreError>;

    /// Sets the application's status.
    fn set_app_status(&mut self, app: &str, status: &Status) -> Result<(), StoreError>;

    /// Stores the application's pod spec at this revision.
    fn put_pod_spec(
        &mut self,
        app: &str,
        revision: u64,
        write: &Arc<PodSpecWrite>,
    ) -> Result<(), StoreError>;

    /// Updates the unit's record.
    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> Result<(), StoreError>;

    /// Records the unit's failing hook's error, or clears it.
    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> Result<(), StoreError>;

    /// Takes the hook with this sequence number off the unit's queue.
    fn dequeue(&mut self, unit: &str, seq: u64) -> Result<(), StoreError>;

    /// Takes the first hook off the unit's queue, if there is one.
    fn drop_first_queued(&mut self, unit: &str) -> Result<(), StoreError>;

    /// Puts a hook at the end of the unit's queue; its sequence number, above every one
    /// the model gave before.
    fn enqueue(&mut self, unit: &str, hook: &Hook) -> Result<u64, StoreError>;

    /// Replaces the application's config settings (the operator's; defaults are not
    /// copied in).
    fn set_app_config(
        &mut self,
        app: &str,
        config: &BTreeMap<String, ConfigValue>,
    ) -> Result<(), StoreError>;

    /// Marks the application as being removed.
    fn set_app_dying(&mut self, app: &str) -> Result<(), StoreError>;

    /// Marks the unit as being removed.
    fn set_unit_dying(&mut self, unit: &str) -> Result<(), StoreError>;

    /// Marks the relation as being removed ([`RelationRecord::dying`]).
    fn set_relation_dying(&mut self, id: RelationId) -> Result<(), StoreError>;

    /// Deletes the application's lease, whoever holds it (the term stays used).
    fn release_lease(&mut self, app: &str) -> Result<(), StoreError>;

    /// Deletes the unit: its record, queue, stored state, and its bags in every relation.
    fn delete_unit(&mut self, unit: &str) -> Result<(), StoreError>;

    /// Deletes the relation and every bag in it.
    fn delete_relation(&mut self, id: RelationId) -> Result<(), StoreError>;

    /// Deletes the application (which has no units left): its record, leader settings,
    /// status, pod spec, and its bags in relations that outlive it.
    fn delete_application(&mut self, app: &str) -> Result<(), StoreError>;

    /// Appends lines to the unit's log ring (their `seq` is the store's to give, above every
    /// one before), keeping its newest `keep` lines.
    fn append_logs(
        &mut self,
        unit: &str,
        lines: &[LogRecord],
        keep: usize,
    ) -> Result<(), StoreError>;

    /// The unit's log ring, oldest first.
    fn unit_logs(&mut self, unit: &str) -> Result<Vec<LogRecord>, StoreError>;
}
