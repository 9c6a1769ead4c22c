use std::sync::Arc;

use tokio::sync::Notify;

use super::BoxFuture;
pub use charm_model::status::{AppStatusRow, ModelStatus, UnitStatusRow};
use charm_model::{
    ApplicationRecord, Changes, Hook, PodSpecRecord, QueuedHook, RelationEndpoint, RelationRecord,
    UnitSnapshot,
};
pub use charm_model::{CommitError, CommitReceipt, Committed, Fence, HookCommit, StoreError};

/// The answer of a model operation, to come.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// The answer of a commit, to come.
pub type CommitFuture<'a> = BoxFuture<'a, Result<Committed, CommitError>>;

/// Model state: what Juju's controller database holds for a model.
pub trait StateStore: Send + Sync {
    /// The model's name.
    fn model_name(&self) -> &str;

    /// Adds an application. An existing one with the same name is an error.
    fn add_application<'a>(&'a self, app: ApplicationRecord) -> StoreFuture<'a, ()>;

    /// The application with this name.
    fn application<'a>(&'a self, name: &'a str) -> StoreFuture<'a, ApplicationRecord>;

    /// Every application, by name.
    fn applications(&self) -> StoreFuture<'_, Vec<ApplicationRecord>>;

    /// Adds the next unit of `app` and, in the same step, queues its first hooks
    /// ([`charm_model::operations::add_unit`]). Returns its name.
    fn add_unit<'a>(&'a self, app: &'a str) -> StoreFuture<'a, String>;

    /// The units of `app`, by number.
    fn units<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Vec<String>>;

    /// Relates two endpoints (or one, for peers) and, in the same step, queues the hooks
    /// that fires ([`charm_model::operations::add_relation`]). Returns the relation and
    /// those hooks.
    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)>;

    /// Queues hooks, each on its unit, and returns those queued, coalescing as
    /// [`charm_model::operations::enqueue`] does.
    fn enqueue<'a>(&'a self, hooks: Vec<(String, Hook)>) -> StoreFuture<'a, Vec<QueuedHook>>;

    /// The hooks queued on `unit`, in order.
    fn queued<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>>;

    /// Every relation, by id.
    fn relations(&self) -> StoreFuture<'_, Vec<RelationRecord>>;

    /// What a hook of `unit` may read, as of now.
    fn snapshot<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitSnapshot>;

    /// Applies one hook's writes for `unit` in one atomic step, as
    /// [`charm_model::commit::commit`] says: fenced, all or nothing, at most once, with the
    /// hooks the changes fire queued in the same step.
    fn commit<'a>(
        &'a self,
        unit: &'a str,
        hook: Option<u64>,
        changes: &'a Changes,
        fence: Option<&'a Fence>,
    ) -> CommitFuture<'a> {
        self.commit_hook(HookCommit {
            unit,
            hook,
            changes,
            fence,
        })
    }

    /// [`commit`](Self::commit), its arguments in one.
    fn commit_hook<'a>(&'a self, request: HookCommit<'a>) -> CommitFuture<'a>;

    /// Records that `unit`'s hook is failing (`Some(message)`), or no longer is (`None`).
    fn set_hook_error<'a>(&'a self, unit: &'a str, error: Option<String>) -> StoreFuture<'a, ()>;

    /// The application's pod spec, if it has one.
    fn pod_spec<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Option<PodSpecRecord>>;

    /// The status of every application and unit.
    fn status(&self) -> StoreFuture<'_, ModelStatus>;

    /// A wake-up for `unit`'s agent when another host may have queued hooks for it, from
    /// stores that push changes (etcd's watches). `None` (the default): the agent polls.
    fn queue_signal(self: Arc<Self>, _unit: &str) -> Option<Arc<Notify>> {
        None
    }
}
