use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::BoxFuture;
use crate::model::{
    ApplicationRecord, Changes, Hook, PodSpecRecord, RelationEndpoint, RelationId, RelationRecord,
    Status, UnitSnapshot,
};

/// The leadership a commit depends on: the application's lease must still have this holder
/// and this term when the commit is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The application.
    pub app: String,
    /// The unit that was leader when the hook started.
    pub holder: String,
    /// The lease's term then.
    pub term: u64,
}

/// What a commit changed, so the host can fire the hooks Juju would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReceipt {
    /// Relations whose bag of this unit changed.
    pub unit_bags_changed: Vec<RelationId>,
    /// Relations whose bag of this application changed.
    pub app_bags_changed: Vec<RelationId>,
    /// Whether the leader settings changed.
    pub leader_data_changed: bool,
    /// The pod spec's new revision, if the spec changed.
    pub pod_spec_revision: Option<u64>,
}

/// A hook waiting in a unit's queue. Queues are in the store, so a host that crashes loses
/// none: a restarted host runs every hook still queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedHook {
    /// The unit that will run it.
    pub unit: String,
    /// Its place in the model's queues: increasing, never reused.
    pub seq: u64,
    /// The hook.
    pub hook: Hook,
}

/// What a commit did: what changed, and the hooks it queued on other units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// What changed.
    pub receipt: CommitReceipt,
    /// The hooks the changes fired on other units (relation-changed,
    /// leader-settings-changed), queued in the same step.
    pub queued: Vec<QueuedHook>,
}

/// Why a model operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No such application, unit or relation.
    #[error("not found: {0}")]
    NotFound(String),
    /// It exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The store could not be reached or did not answer. Retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store's data cannot be read: the file is not a database, or is damaged. Nothing
    /// was written to it.
    #[error("store corrupt: {0}")]
    Corrupt(String),
    /// The store was written by a newer host, or for another model, or by another program.
    /// Nothing was written to it.
    #[error("store incompatible: {0}")]
    Incompatible(String),
}

/// Why a commit was not applied. Nothing of it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The fence no longer holds: the lease has another holder or term, or has expired.
    #[error("leadership fence failed for {}: term {} of {} is no longer current", fence.app, fence.term, fence.holder)]
    Fenced {
        /// The fence that failed.
        fence: Fence,
    },
    /// Leader-only writes without a fence.
    #[error("leader-only writes need a leadership fence")]
    Unfenced,
    /// The hook is no longer queued: its commit was applied already (by a host that crashed
    /// before it could tell), so this one applies nothing.
    #[error("hook {seq} of {unit} is not queued: already committed")]
    NotQueued {
        /// The unit.
        unit: String,
        /// The hook's sequence number.
        seq: u64,
    },
    /// The model changed under the hook (its unit or a relation was removed).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One unit's line in the model status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitStatusRow {
    /// The unit.
    pub name: String,
    /// Whether it holds its application's lease now.
    pub leader: bool,
    /// Its workload status (an error status while a hook is failing).
    pub status: Status,
    /// Its workload version.
    pub workload_version: String,
}

/// One application's line in the model status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStatusRow {
    /// The application.
    pub name: String,
    /// Its charm.
    pub charm: String,
    /// Its status, as set by its leader.
    pub status: Status,
    /// Its leader, if any.
    pub leader: Option<String>,
    /// Its lease's term.
    pub term: Option<u64>,
    /// Its pod spec's revision.
    pub pod_spec_revision: Option<u64>,
}

/// The model's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatus {
    /// Applications by name.
    pub applications: Vec<AppStatusRow>,
    /// Units by name.
    pub units: Vec<UnitStatusRow>,
}

/// Model state: what Juju's controller database holds for a model.
pub trait StateStore: Send + Sync {
    /// The model's name.
    fn model_name(&self) -> &str;

    /// Adds an application. An existing one with the same name is an error.
    fn add_application<'a>(
        &'a self,
        app: ApplicationRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The application with this name.
    fn application<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ApplicationRecord, StoreError>>;

    /// Every application, by name.
    fn applications(&self) -> BoxFuture<'_, Result<Vec<ApplicationRecord>, StoreError>>;

    /// Adds the next unit of `app` (`app/0`, `app/1`, ...) and, in the same step, queues
    /// its first hooks ([`deploy_hooks`](super::routing::deploy_hooks)). Returns its name.
    fn add_unit<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<String, StoreError>>;

    /// The units of `app`, by number.
    fn units<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;

    /// Relates two endpoints (or one, for peers) and, in the same step, queues the hooks
    /// that fires ([`relation_hooks`](super::routing::relation_hooks)). Returns the relation
    /// and those hooks.
    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> BoxFuture<'a, Result<(RelationRecord, Vec<QueuedHook>), StoreError>>;

    /// Queues hooks, each on its unit, and returns those queued. A hook equal to one already
    /// waiting on the unit (other than the first, which may be running) is not queued
    /// again: Juju coalesces the same way.
    fn enqueue<'a>(
        &'a self,
        hooks: Vec<(String, Hook)>,
    ) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>>;

    /// The hooks queued on `unit`, in order.
    fn queued<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>>;

    /// Every relation, by id.
    fn relations(&self) -> BoxFuture<'_, Result<Vec<RelationRecord>, StoreError>>;

    /// What a hook of `unit` may read, as of now.
    fn snapshot<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<UnitSnapshot, StoreError>>;

    /// Applies one hook's writes for `unit` in one atomic step: if `fence` is given, only
    /// while the application's lease still has its holder and term (and has not expired).
    /// Leader-only writes without a fence are refused. All or nothing.
    ///
    /// In the same step: `hook` (the hook's sequence number; `None` for hooks the host
    /// generates, such as leader-elected) leaves the unit's queue, and must still be in it,
    /// so a commit applies at most once ([`CommitError::NotQueued`]); `changes.elected_term`
    /// is recorded, or, on a commit without a fence, the unit's record cleared; and the hooks the changes fire on other units
    /// ([`follow_ups`](super::routing::follow_ups)) are queued.
    fn commit<'a>(
        &'a self,
        unit: &'a str,
        hook: Option<u64>,
        changes: &'a Changes,
        fence: Option<&'a Fence>,
    ) -> BoxFuture<'a, Result<Committed, CommitError>>;

    /// Records that `unit`'s hook is failing (`Some(message)`), or no longer is (`None`).
    fn set_hook_error<'a>(
        &'a self,
        unit: &'a str,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The application's pod spec, if it has one.
    fn pod_spec<'a>(
        &'a self,
        app: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodSpecRecord>, StoreError>>;

    /// The status of every application and unit.
    fn status(&self) -> BoxFuture<'_, Result<ModelStatus, StoreError>>;

    /// A wake-up for `unit`'s agent when another host may have queued hooks for it, from
    /// stores that push changes (etcd's watches). `None` (the default): the agent polls.
    fn queue_signal(self: Arc<Self>, _unit: &str) -> Option<Arc<Notify>> {
        None
    }
}
