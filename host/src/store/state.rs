use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use super::BoxFuture;
pub use charm_model::config::ConfigApplied;
pub use charm_model::operations::Deployed;
pub use charm_model::removal::AppRemoval;
pub use charm_model::snapshot::UnitDetails;
pub use charm_model::status::{AppStatusRow, ModelStatus, UnitStatusRow};
use charm_model::{
    ApplicationRecord, Changes, ConfigValue, Hook, LogRecord, PodSpecRecord, QueuedHook,
    RelationEndpoint, RelationRecord, UnitSnapshot,
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

    /// Deploys an application with `units` units and its peer relations, its settings
    /// typed and checked against its charm's options, in one step
    /// ([`charm_model::operations::deploy`]).
    fn deploy<'a>(&'a self, app: ApplicationRecord, units: u32) -> StoreFuture<'a, Deployed>;

    /// A unit as `show-unit` shows it, read in one step
    /// ([`charm_model::snapshot::unit_details`]).
    fn unit_details<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitDetails>;

    /// Resolves a unit in error: its failed hook runs again, or is skipped unless `retry`
    /// ([`charm_model::operations::resolve_unit`]). Returns that hook.
    fn resolve_unit<'a>(&'a self, unit: &'a str, retry: bool) -> StoreFuture<'a, Option<Hook>>;

    /// Keeps what `unit`'s hook logged in its bounded ring
    /// ([`charm_model::operations::record_logs`]).
    fn record_logs<'a>(&'a self, unit: &'a str, lines: Vec<LogRecord>) -> StoreFuture<'a, ()>;

    /// The newest `lines` log lines of `unit`, or of every unit, oldest first
    /// ([`charm_model::operations::debug_log`]).
    fn debug_log<'a>(
        &'a self,
        unit: Option<&'a str>,
        lines: usize,
    ) -> StoreFuture<'a, Vec<LogRecord>>;

    /// Sets and resets options of `app`, typed and checked against its charm's, and queues
    /// config-changed on its units if its config changed, in one step
    /// ([`charm_model::config::set_config`]).
    fn set_config<'a>(
        &'a self,
        app: &'a str,
        set: BTreeMap<String, ConfigValue>,
        reset: Vec<String>,
    ) -> StoreFuture<'a, ConfigApplied>;

    /// Relates the endpoints `a` and `b` name (`app[:endpoint]`) and queues the hooks that
    /// fires, in one step ([`charm_model::operations::relate`]).
    fn relate<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)>;

    /// Adds `count` units of `app`, with their hooks, in one step
    /// ([`charm_model::operations::add_units`]).
    fn add_units<'a>(&'a self, app: &'a str, count: u32) -> StoreFuture<'a, Vec<String>>;

    /// Starts removing units (all or none), in one step
    /// ([`charm_model::removal::remove_units`]).
    fn remove_units<'a>(&'a self, units: Vec<String>) -> StoreFuture<'a, Vec<QueuedHook>>;

    /// Starts removing a unit: marks it dying and queues Juju's removal hooks, in one step
    /// ([`charm_model::removal::remove_unit`]).
    fn remove_unit<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>>;

    /// Starts removing the relation between `a` and `b` (`app[:endpoint]`), in one step
    /// ([`charm_model::removal::remove_relation`]).
    fn remove_relation<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)>;

    /// Starts removing an application, with its relations if `force`, in one step
    /// ([`charm_model::removal::remove_application`]).
    fn remove_application<'a>(&'a self, app: &'a str, force: bool) -> StoreFuture<'a, AppRemoval>;

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
