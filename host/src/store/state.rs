use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use super::BoxFuture;
pub use charm_model::actions::ActionQueued;
pub use charm_model::config::ConfigApplied;
use charm_model::error::not_found;
pub use charm_model::operations::Deployed;
pub use charm_model::removal::AppRemoval;
pub use charm_model::snapshot::UnitDetails;
pub use charm_model::status::{AppStatusRow, ModelStatus, UnitStatusRow};
use charm_model::tx::ModelTx;
pub use charm_model::upgrade::Upgraded;
use charm_model::{
    ActionRecord, ApplicationRecord, Changes, CharmMetadata, ConfigValue, Hook, LogRecord,
    PodSpecRecord, QueuedHook, RelationEndpoint, RelationRecord, UnitSnapshot, actions, app_of,
    commit, config, operations, removal, snapshot, status, upgrade,
};
pub use charm_model::{
    CommitError, CommitReceipt, Committed, Fence, HookCommit, HookRead, StoreError,
};

/// The answer of a model operation, to come.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// The answer of a commit, to come.
pub type CommitFuture<'a> = BoxFuture<'a, Result<Committed, CommitError>>;

/// The records a model operation reads, in the model's terms. A store that fetches
/// records before it runs an operation (etcd) fetches these in one round trip, and anything
/// else the operation turns out to read afterwards; the other stores read as they go.
#[derive(Debug, Clone, Copy)]
pub enum Records<'a> {
    /// The application's record.
    App(&'a str),
    /// Every application's record.
    Apps,
    /// The unit's record.
    Unit(&'a str),
    /// Every unit's record.
    Units,
    /// The unit's hook queue.
    Queue(&'a str),
    /// Every hook queue.
    Queues,
    /// One hook queued on the unit, by its seq (a commit's: the rest of the queue may be
    /// long, and it needs only that hook).
    QueuedHook(&'a str, u64),
    /// The records and queues of the units these hooks are for.
    UnitsOf(&'a [(String, Hook)]),
    /// Every relation.
    Relations,
    /// The next relation id.
    NextRelation,
    /// The application's leader settings.
    LeaderData(&'a str),
    /// Every application's leader settings.
    AllLeaderData,
    /// The application's status.
    AppStatus(&'a str),
    /// Every application's status.
    AppStatuses,
    /// The application's pod spec.
    PodSpec(&'a str),
    /// Every pod spec.
    PodSpecs,
    /// The application's lease.
    Lease(&'a str),
    /// Every lease.
    Leases,
    /// The bags these changes of this unit's write.
    BagsWritten(&'a Changes, &'a str),
    /// The unit's log ring.
    Logs(&'a str),
    /// Every log ring.
    AllLogs,
    /// Everything a change to the model's shape reads: applications, units, queues,
    /// relations and leases.
    Model,
}

/// One model operation, as its store runs it: what it is (for errors), whether it writes,
/// and what it reads.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The operation, by its method's name: "commit", "add_units".
    pub operation: &'static str,
    /// What the operation does, for errors: "commit of", "adding units to".
    pub doing: &'static str,
    /// What it does it to (a unit, an application), or "".
    pub subject: &'a str,
    /// Whether it may write; one that does not is a read of one instant.
    pub writes: bool,
    /// What it reads ([`Records`]).
    pub reads: &'a [Records<'a>],
}

impl<'a> Step<'a> {
    /// An operation that may write.
    pub fn write(
        operation: &'static str,
        doing: &'static str,
        subject: &'a str,
        reads: &'a [Records<'a>],
    ) -> Self {
        Step {
            operation,
            doing,
            subject,
            writes: true,
            reads,
        }
    }

    /// An operation that only reads.
    pub fn read(
        operation: &'static str,
        doing: &'static str,
        subject: &'a str,
        reads: &'a [Records<'a>],
    ) -> Self {
        Step {
            writes: false,
            ..Step::write(operation, doing, subject, reads)
        }
    }

    /// What it does, in words: "commit of web/0".
    pub fn describe(&self) -> String {
        if self.subject.is_empty() {
            self.doing.to_string()
        } else {
            format!("{} {}", self.doing, self.subject)
        }
    }
}

/// What an operation tells its store once it has run: whether its writes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It succeeded: apply its writes.
    Apply,
    /// It failed, with an error of this kind ([`StoreError::kind`], [`CommitError::kind`]):
    /// drop its writes.
    Abort(&'static str),
}

/// A model operation over a store's records, its answer kept by its caller.
pub type StepOp<'a> = dyn FnMut(&mut dyn ModelTx) -> Verdict + Send + 'a;

/// Model state: what Juju's controller database holds for a model.
///
/// A store implements [`step`](Self::step), running one model operation atomically over its
/// records ([`ModelTx`]); every operation below is the model core's, run in one step, and
/// written once, here.
pub trait StateStore: Send + Sync {
    /// The model's name.
    fn model_name(&self) -> &str;

    /// Runs `op` in one atomic step: all its writes apply if it answers
    /// [`Verdict::Apply`], none if [`Verdict::Abort`]. The store may run it more than once
    /// (etcd, when another host changed what it read); the last run's writes are the ones
    /// applied. Errors are the store's own (unreachable, contended); the operation's are
    /// its caller's to keep.
    fn step<'a>(&'a self, step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()>;

    /// Keeps a charm's module: its bytes, under their SHA-256 ([`module_hash`]), which it
    /// returns. Content-addressed, so writing a module already kept changes nothing; done
    /// before (and apart from) the step that points an application at it
    /// ([`charm_model::upgrade`]).
    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String>;

    /// The bytes of the module with this hash, `None` if the store holds none (or not all
    /// of them).
    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>>;

    /// Moves `app` to a new charm module, kept first ([`put_module`](Self::put_module)):
    /// checked against the relations it is in, with upgrade-charm and config-changed queued
    /// on every unit in the same step ([`charm_model::upgrade::upgrade_charm`]).
    fn upgrade_charm<'a>(
        &'a self,
        app: &'a str,
        charm: &'a str,
        metadata: CharmMetadata,
        bytes: &'a [u8],
    ) -> StoreFuture<'a, Upgraded> {
        Box::pin(async move {
            let module = self.put_module(bytes).await?;
            let reads = [
                Records::App(app),
                Records::Units,
                Records::Relations,
                Records::Queues,
            ];
            run(
                self,
                Step::write("upgrade_charm", "upgrading", app, &reads),
                |tx| upgrade::upgrade_charm(tx, app, charm, metadata.clone(), &module),
            )
            .await
        })
    }

    /// Adds an application. An existing one with the same name is an error.
    fn add_application<'a>(&'a self, app: ApplicationRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let name = app.name.clone();
            let reads = [Records::App(&name)];
            let step = Step::write("add_application", "adding application", &name, &reads);
            run(self, step, |tx| {
                operations::add_application(tx, app.clone())
            })
            .await
        })
    }

    /// The application with this name.
    fn application<'a>(&'a self, name: &'a str) -> StoreFuture<'a, ApplicationRecord> {
        Box::pin(async move {
            let reads = [Records::App(name)];
            run(
                self,
                Step::read("application", "reading application", name, &reads),
                |tx| {
                    tx.application(name)?
                        .ok_or_else(|| not_found(format!("application {name}")))
                },
            )
            .await
        })
    }

    /// Every application, by name.
    fn applications(&self) -> StoreFuture<'_, Vec<ApplicationRecord>> {
        Box::pin(async move {
            let step = Step::read("applications", "reading applications", "", &[Records::Apps]);
            run(self, step, |tx| tx.all_applications()).await
        })
    }

    /// Adds the next unit of `app` and, in the same step, queues its first hooks
    /// ([`charm_model::operations::add_unit`]). Returns its name.
    fn add_unit<'a>(&'a self, app: &'a str) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let reads = [Records::App(app)];
            run(
                self,
                Step::write("add_unit", "adding a unit to", app, &reads),
                |tx| operations::add_unit(tx, app),
            )
            .await
        })
    }

    /// Adds the next unit of `app`, with its hooks, if it has had fewer than `wanted`, in
    /// one step ([`charm_model::operations::add_unit_up_to`]). Returns it.
    fn add_unit_up_to<'a>(&'a self, app: &'a str, wanted: u32) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let reads = [Records::App(app)];
            run(
                self,
                Step::write("add_unit_up_to", "adding a unit to", app, &reads),
                |tx| operations::add_unit_up_to(tx, app, wanted),
            )
            .await
        })
    }

    /// The units of `app`, by number.
    fn units<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            let reads = [Records::App(app)];
            run(
                self,
                Step::read("units", "reading the units of", app, &reads),
                |tx| {
                    if !tx.app_exists(app)? {
                        return Err(not_found(format!("application {app}")));
                    }
                    tx.units_of(app)
                },
            )
            .await
        })
    }

    /// Relates two endpoints (or one, for peers) and, in the same step, queues the hooks
    /// that fires ([`charm_model::operations::add_relation`]). Returns the relation and
    /// those hooks.
    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        Box::pin(async move {
            let reads = [Records::Apps, Records::Relations, Records::NextRelation];
            run(
                self,
                Step::write("add_relation", "adding a relation", "", &reads),
                |tx| operations::add_relation(tx, interface, endpoints.clone()),
            )
            .await
        })
    }

    /// Deploys an application with `units` units and its peer relations, its settings
    /// typed and checked against its charm's options, in one step
    /// ([`charm_model::operations::deploy`]).
    fn deploy<'a>(&'a self, app: ApplicationRecord, units: u32) -> StoreFuture<'a, Deployed> {
        Box::pin(async move {
            let name = app.name.clone();
            let reads = [Records::Model, Records::NextRelation];
            run(
                self,
                Step::write("deploy", "deploying", &name, &reads),
                |tx| operations::deploy(tx, app.clone(), units),
            )
            .await
        })
    }

    /// A unit as `show-unit` shows it, read in one step
    /// ([`charm_model::snapshot::unit_details`]).
    fn unit_details<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitDetails> {
        Box::pin(async move {
            let model = self.model_name();
            let reads = [Records::Model];
            run(
                self,
                Step::read("unit_details", "details of", unit, &reads),
                |tx| snapshot::unit_details(tx, model, unit),
            )
            .await
        })
    }

    /// Resolves a unit in error: its failed hook runs again, or is skipped unless `retry`
    /// ([`charm_model::operations::resolve_unit`]). Returns that hook.
    fn resolve_unit<'a>(&'a self, unit: &'a str, retry: bool) -> StoreFuture<'a, Option<Hook>> {
        Box::pin(async move {
            let reads = [Records::Unit(unit), Records::Queue(unit)];
            run(
                self,
                Step::write("resolve_unit", "resolving", unit, &reads),
                |tx| operations::resolve_unit(tx, unit, retry),
            )
            .await
        })
    }

    /// Keeps what `unit`'s hook logged in its bounded ring
    /// ([`charm_model::operations::record_logs`]).
    fn record_logs<'a>(&'a self, unit: &'a str, lines: Vec<LogRecord>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let reads = [Records::Unit(unit), Records::Logs(unit)];
            run(
                self,
                Step::write("record_logs", "logs of", unit, &reads),
                |tx| operations::record_logs(tx, unit, &lines),
            )
            .await
        })
    }

    /// The newest `lines` log lines of `unit`, or of every unit, oldest first
    /// ([`charm_model::operations::debug_log`]).
    fn debug_log<'a>(
        &'a self,
        unit: Option<&'a str>,
        lines: usize,
    ) -> StoreFuture<'a, Vec<LogRecord>> {
        Box::pin(async move {
            let reads = [Records::Model, Records::AllLogs];
            run(
                self,
                Step::read("debug_log", "reading logs", "", &reads),
                |tx| operations::debug_log(tx, unit, lines),
            )
            .await
        })
    }

    /// Sets and resets options of `app`, typed and checked against its charm's, and queues
    /// config-changed on its units if its config changed, in one step
    /// ([`charm_model::config::set_config`]).
    fn set_config<'a>(
        &'a self,
        app: &'a str,
        set: BTreeMap<String, ConfigValue>,
        reset: Vec<String>,
    ) -> StoreFuture<'a, ConfigApplied> {
        Box::pin(async move {
            let reads = [Records::App(app), Records::Units, Records::Queues];
            run(
                self,
                Step::write("set_config", "config of", app, &reads),
                |tx| config::set_config(tx, app, &set, &reset),
            )
            .await
        })
    }

    /// Starts action `action` on `unit` with the parameters given (checked and typed against
    /// the charm's declaration before anything is written), at `now_ms`: its record and its
    /// hook, in one step ([`charm_model::actions::enqueue_action`]).
    fn run_action<'a>(
        &'a self,
        unit: &'a str,
        action: &'a str,
        params: BTreeMap<String, ConfigValue>,
        now_ms: u64,
    ) -> StoreFuture<'a, ActionQueued> {
        Box::pin(async move {
            let app = app_of(unit);
            let reads = [Records::App(app), Records::Unit(unit), Records::Queue(unit)];
            run(
                self,
                Step::write("run_action", "running an action on", unit, &reads),
                |tx| actions::enqueue_action(tx, unit, action, params.clone(), now_ms),
            )
            .await
        })
    }

    /// The action with this id ([`charm_model::actions::show_action`]).
    fn action<'a>(&'a self, id: u64) -> StoreFuture<'a, ActionRecord> {
        Box::pin(async move {
            run(
                self,
                Step::read("action", "reading an action", "", &[]),
                |tx| actions::show_action(tx, id),
            )
            .await
        })
    }

    /// Records that the hook of action `id` started at `now_ms`
    /// ([`charm_model::actions::start_action`]).
    fn start_action<'a>(&'a self, id: u64, now_ms: u64) -> StoreFuture<'a, ActionRecord> {
        Box::pin(async move {
            run(
                self,
                Step::write("start_action", "starting an action", "", &[]),
                |tx| actions::start_action(tx, id, now_ms),
            )
            .await
        })
    }

    /// Relates the endpoints `a` and `b` name (`app[:endpoint]`) and queues the hooks that
    /// fires, in one step ([`charm_model::operations::relate`]).
    fn relate<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        Box::pin(async move {
            let reads = [Records::Model, Records::NextRelation];
            run(self, Step::write("relate", "relating", a, &reads), |tx| {
                operations::relate(tx, a, b)
            })
            .await
        })
    }

    /// Adds `count` units of `app`, with their hooks, in one step
    /// ([`charm_model::operations::add_units`]).
    fn add_units<'a>(&'a self, app: &'a str, count: u32) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            let reads = [Records::Model];
            run(
                self,
                Step::write("add_units", "adding units to", app, &reads),
                |tx| operations::add_units(tx, app, count),
            )
            .await
        })
    }

    /// Starts removing units (all or none), in one step
    /// ([`charm_model::removal::remove_units`]).
    fn remove_units<'a>(&'a self, units: Vec<String>) -> StoreFuture<'a, Vec<QueuedHook>> {
        Box::pin(async move {
            let reads = [Records::Model];
            run(
                self,
                Step::write("remove_units", "removing units", "", &reads),
                |tx| removal::remove_units(tx, &units),
            )
            .await
        })
    }

    /// Starts removing a unit: marks it dying and queues Juju's removal hooks, in one step
    /// ([`charm_model::removal::remove_unit`]).
    fn remove_unit<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>> {
        Box::pin(async move {
            let reads = [Records::Model];
            run(
                self,
                Step::write("remove_unit", "removing", unit, &reads),
                |tx| removal::remove_unit(tx, unit),
            )
            .await
        })
    }

    /// Starts removing the relation between `a` and `b` (`app[:endpoint]`), in one step
    /// ([`charm_model::removal::remove_relation`]).
    fn remove_relation<'a>(
        &'a self,
        a: &'a str,
        b: &'a str,
    ) -> StoreFuture<'a, (RelationRecord, Vec<QueuedHook>)> {
        Box::pin(async move {
            let reads = [Records::Model];
            run(
                self,
                Step::write("remove_relation", "removing a relation of", a, &reads),
                |tx| removal::remove_relation(tx, a, b),
            )
            .await
        })
    }

    /// Starts removing an application, with its relations if `force`, in one step
    /// ([`charm_model::removal::remove_application`]).
    fn remove_application<'a>(&'a self, app: &'a str, force: bool) -> StoreFuture<'a, AppRemoval> {
        Box::pin(async move {
            let reads = [Records::Model];
            run(
                self,
                Step::write("remove_application", "removing", app, &reads),
                |tx| removal::remove_application(tx, app, force),
            )
            .await
        })
    }

    /// Queues hooks, each on its unit, and returns those queued, coalescing as
    /// [`charm_model::operations::enqueue`] does. A unit that does not exist queues
    /// nothing at all.
    fn enqueue<'a>(&'a self, hooks: Vec<(String, Hook)>) -> StoreFuture<'a, Vec<QueuedHook>> {
        Box::pin(async move {
            let reads = [Records::UnitsOf(&hooks)];
            run(
                self,
                Step::write("enqueue", "queueing hooks", "", &reads),
                |tx| {
                    // Checked before anything is queued: a store that writes as it goes (memory)
                    // then has nothing to undo.
                    for (unit, _) in &hooks {
                        if !tx.unit_exists(unit)? {
                            return Err(not_found(format!("unit {unit}")));
                        }
                    }
                    operations::enqueue(tx, hooks.iter().cloned())
                },
            )
            .await
        })
    }

    /// The hooks queued on `unit`, in order.
    fn queued<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, Vec<QueuedHook>> {
        Box::pin(async move {
            let reads = [Records::Unit(unit), Records::Queue(unit)];
            run(
                self,
                Step::read("queued", "reading the queue of", unit, &reads),
                |tx| {
                    tx.queue_of(unit)?
                        .ok_or_else(|| not_found(format!("unit {unit}")))
                },
            )
            .await
        })
    }

    /// Every relation, by id.
    fn relations(&self) -> StoreFuture<'_, Vec<RelationRecord>> {
        Box::pin(async move {
            let step = Step::read("relations", "reading relations", "", &[Records::Relations]);
            run(self, step, |tx| {
                Ok(tx
                    .all_relations()?
                    .into_iter()
                    .map(|r| RelationRecord::clone(&r))
                    .collect())
            })
            .await
        })
    }

    /// What a hook of `unit` may read, as of now.
    fn snapshot<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, UnitSnapshot> {
        Box::pin(async move {
            let app = app_of(unit);
            let model = self.model_name();
            let reads = [
                Records::Unit(unit),
                Records::Apps,
                Records::Relations,
                Records::LeaderData(app),
                Records::AppStatus(app),
            ];
            run(
                self,
                Step::read("snapshot", "snapshot of", unit, &reads),
                |tx| snapshot::snapshot(tx, model, unit),
            )
            .await
        })
    }

    /// What a hook of `unit` reads, as of now: its snapshot and what its commit checks
    /// is unchanged ([`charm_model::snapshot::hook_read`], [`HookCommit::read`]).
    fn hook_read<'a>(&'a self, unit: &'a str) -> StoreFuture<'a, HookRead> {
        self.hook_read_as(unit, snapshot::BagsRead::All, snapshot::Runs::Head)
    }

    /// What a hook of `unit` that `runs` (the queue's head, or one its agent runs before
    /// it) reads, with the remote units' bags `bags` says.
    fn hook_read_as<'a>(
        &'a self,
        unit: &'a str,
        bags: snapshot::BagsRead<'static>,
        runs: snapshot::Runs,
    ) -> StoreFuture<'a, HookRead> {
        Box::pin(read_for_hook(self, unit, bags, runs))
    }

    /// [`hook_read`](Self::hook_read) without the remote units' bags of relations with
    /// more than `up_to` remote units, which the hook reads as it asks for them
    /// ([`unit_bag`](Self::unit_bag)); its commit checks those it read.
    fn hook_read_lazily<'a>(&'a self, unit: &'a str, up_to: usize) -> StoreFuture<'a, HookRead> {
        self.hook_read_as(unit, snapshot::BagsRead::UpTo(up_to), snapshot::Runs::Head)
    }

    /// `unit`'s bag in relation `relation`, as of now (empty if it has none).
    fn unit_bag<'a>(
        &'a self,
        relation: charm_model::RelationId,
        unit: &'a str,
    ) -> StoreFuture<'a, charm_model::SharedBag> {
        Box::pin(async move {
            run(
                self,
                Step::read("unit_bag", "relation bag of", unit, &[]),
                |tx| snapshot::unit_bag(tx, self.model_name(), relation, unit),
            )
            .await
        })
    }

    /// The bags of `units` in relation `relation`, as of now, in one step and in the order of
    /// `units`.
    fn unit_bags<'a>(
        &'a self,
        relation: charm_model::RelationId,
        units: &'a [String],
    ) -> StoreFuture<'a, Vec<charm_model::SharedBag>> {
        Box::pin(async move {
            let names: Vec<&str> = units.iter().map(String::as_str).collect();
            run(
                self,
                Step::read("unit_bags", "relation bags of", "", &[]),
                |tx| snapshot::unit_bags(tx, self.model_name(), relation, &names),
            )
            .await
        })
    }

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
            read: None,
            owner: None,
        })
    }

    /// [`commit`](Self::commit), its arguments in one.
    fn commit_hook<'a>(&'a self, request: HookCommit<'a>) -> CommitFuture<'a> {
        Box::pin(async move {
            let unit = request.unit;
            let app = app_of(unit);
            // The ownership lease's name is made only for a commit that names an owner, and
            // the read set is built in place: both are on every hook's path.
            let owner_lease = request.owner.map(|_| charm_model::ownership_lease(unit));
            let mut reads = [
                Records::Unit(unit),
                Records::Apps,
                Records::Relations,
                Records::LeaderData(app),
                Records::PodSpec(app),
                Records::Lease(app),
                Records::AppStatus(app),
                Records::BagsWritten(request.changes, unit),
                // Room for the two optional reads below, sliced off unless filled.
                Records::Apps,
                Records::Apps,
            ];
            let mut len = reads.len() - 2;
            if let Some(lease) = &owner_lease {
                reads[len] = Records::Lease(lease);
                len += 1;
            }
            if let Some(seq) = request.hook {
                reads[len] = Records::QueuedHook(unit, seq);
                len += 1;
            }
            let reads = &reads[..len];
            run(
                self,
                Step::write("commit", "commit of", unit, reads),
                |tx| commit::commit(tx, request),
            )
            .await
        })
    }

    /// Records that `unit`'s hook is failing (`Some(message)`), or no longer is (`None`).
    fn set_hook_error<'a>(&'a self, unit: &'a str, error: Option<String>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let reads = [Records::Unit(unit)];
            run(
                self,
                Step::write("set_hook_error", "error status of", unit, &reads),
                |tx| operations::set_hook_error(tx, unit, error.as_deref()),
            )
            .await
        })
    }

    /// Records that the unit's hook queued as `seq` (`None`: one its agent made) failed
    /// with `message` ([`operations::hook_failed`]): resolving the unit without a retry
    /// skips that hook.
    fn hook_failed<'a>(
        &'a self,
        unit: &'a str,
        seq: Option<u64>,
        message: String,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let reads = [Records::Unit(unit)];
            run(
                self,
                Step::write("hook_failed", "error status of", unit, &reads),
                |tx| operations::hook_failed(tx, unit, seq, &message),
            )
            .await
        })
    }

    /// The application's pod spec, if it has one.
    fn pod_spec<'a>(&'a self, app: &'a str) -> StoreFuture<'a, Option<PodSpecRecord>> {
        Box::pin(async move {
            let reads = [Records::App(app), Records::PodSpec(app)];
            run(
                self,
                Step::read("pod_spec", "pod spec of", app, &reads),
                |tx| {
                    if !tx.app_exists(app)? {
                        return Err(not_found(format!("application {app}")));
                    }
                    tx.pod_spec(app)
                },
            )
            .await
        })
    }

    /// The status of every application and unit.
    fn status(&self) -> StoreFuture<'_, ModelStatus> {
        Box::pin(async move {
            let reads = [
                Records::Apps,
                Records::Units,
                Records::AppStatuses,
                Records::AllLeaderData,
                Records::PodSpecs,
                Records::Leases,
            ];
            run(self, Step::read("status", "status", "", &reads), |tx| {
                status::status(tx)
            })
            .await
        })
    }

    /// A wake-up for `unit`'s agent when another host may have queued hooks for it, from
    /// stores that push changes (etcd's watches). `None` (the default): the agent polls.
    fn queue_signal(self: Arc<Self>, _unit: &str) -> Option<Arc<Notify>> {
        None
    }
}

/// Runs `op` in one step of `store` ([`StateStore::step`]) and gives its answer: the store's
/// error, or the last run's.
/// What a hook of `unit` reads, with the remote units' bags `bags` says, in one step.
async fn read_for_hook<S: StateStore + ?Sized>(
    store: &S,
    unit: &str,
    bags: snapshot::BagsRead<'static>,
    runs: snapshot::Runs,
) -> Result<HookRead, StoreError> {
    let app = app_of(unit);
    let model = store.model_name();
    let reads = [
        Records::Unit(unit),
        Records::Apps,
        Records::Relations,
        Records::LeaderData(app),
        Records::AppStatus(app),
        Records::PodSpec(app),
    ];
    run(
        store,
        Step::read("hook_read", "snapshot of", unit, &reads),
        |tx| snapshot::hook_read_for(tx, model, unit, bags, runs),
    )
    .await
}

async fn run<S, T, E>(
    store: &S,
    step: Step<'_>,
    mut op: impl FnMut(&mut dyn ModelTx) -> Result<T, E> + Send,
) -> Result<T, E>
where
    S: StateStore + ?Sized,
    T: Send,
    E: From<StoreError> + Failure + Send,
{
    let mut answer = None;
    let mut erased = |tx: &mut dyn ModelTx| {
        let out = op(tx);
        let verdict = match &out {
            Ok(_) => Verdict::Apply,
            Err(e) => Verdict::Abort(e.kind()),
        };
        answer = Some(out);
        verdict
    };
    store.step(step, &mut erased).await?;
    answer.expect("a store's step runs its operation")
}

/// The name a module is kept under: the SHA-256 of its bytes, in lowercase hex.
pub fn module_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An error, by its kind in a word: a metric's label.
pub(crate) trait Failure {
    /// The kind.
    fn kind(&self) -> &'static str;
}

impl Failure for StoreError {
    fn kind(&self) -> &'static str {
        StoreError::kind(self)
    }
}

impl Failure for CommitError {
    fn kind(&self) -> &'static str {
        CommitError::kind(self)
    }
}
