//! charm-sdk's testing API with the compiled `.wasm` behind it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use charm_host::bindings::types as wit;
use charm_host::build::BuildRequest;
use charm_host::charm::{Charm, CharmRuntime, GuaranteeWatch, HookOutcome, HookRun, RuntimeConfig};
use charm_host::model::{Changes, RelationView, UnitSnapshot, app_of};
use charm_host::store::Fence;
use charm_sdk::log::Level;
use charm_sdk::testing::{
    ActionOutput, Faults, HookRunner, LogLine, Outcome, Output, PodSpecState, State,
    check_action_params, fill_peer_app,
};
use charm_sdk::{ConfigValue, Event};

use crate::Error;

/// Runs one hook of a compiled charm on an arranged [`State`]: the same arrange/act/assert
/// test that runs natively with `charm_sdk::testing::Context` runs here through the host's
/// loader, sandbox, hook context and imports.
///
/// One hook at a time, as the native harness: the [`State`] becomes the unit's snapshot, the
/// hook runs in the host, and a successful hook's writes are applied to the state as the
/// store's commit applies them. The commit itself does not go through a store (there is no
/// model to commit into); the faults are mapped onto the host's own mechanisms where there is
/// one, as [`WasmContext::run_with`] says.
///
/// The unit is `<charm name>/0` of application `<charm name>` in model `test` unless set.
pub struct WasmContext {
    charm: Charm,
    model: String,
    unit: String,
}

impl WasmContext {
    /// The charm module at `path`, loaded by `runtime` (shared by the contexts of one test,
    /// so the engine starts once).
    ///
    /// ```no_run
    /// use charm_host::charm::{CharmRuntime, RuntimeConfig};
    ///
    /// let runtime = CharmRuntime::new(RuntimeConfig::default()).unwrap();
    /// let ctx = charm_test::WasmContext::new(&runtime, "target/wasm32-wasip2/charm/kv.wasm")?;
    /// assert_eq!(ctx.unit_name(), "kv/0");
    /// # Ok::<(), charm_test::Error>(())
    /// ```
    pub fn new(runtime: &CharmRuntime, path: impl AsRef<Path>) -> Result<Self, Error> {
        let charm = runtime.load_file(path.as_ref())?;
        let unit = format!("{}/0", charm.metadata().name);
        Ok(WasmContext {
            charm,
            model: "test".into(),
            unit,
        })
    }

    /// The charm module at `path`, in a runtime of its own with the host's default limits.
    ///
    /// ```no_run
    /// let ctx = charm_test::WasmContext::load("target/wasm32-wasip2/charm/hello.wasm")?;
    /// # Ok::<(), charm_test::Error>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let runtime = CharmRuntime::new(RuntimeConfig::default())
            .map_err(|e| Error::Runtime(e.to_string()))?;
        Self::new(&runtime, path)
    }

    /// Builds the charm crate in `crate_dir` as `charm-host build` does (in
    /// [`build_dir`](crate::build_dir)), and loads its module. cargo's output goes to the
    /// test's standard error; a second build with nothing changed takes a moment.
    ///
    /// ```no_run
    /// // In a charm's tests/: the module of the crate under test.
    /// let ctx = charm_test::WasmContext::build(env!("CARGO_MANIFEST_DIR"))?;
    /// # Ok::<(), charm_test::Error>(())
    /// ```
    pub fn build(crate_dir: impl AsRef<Path>) -> Result<Self, Error> {
        let crate_dir = crate_dir.as_ref();
        let request = BuildRequest::new(crate_dir).target_dir(crate::build_dir(crate_dir));
        let built = charm_host::build::build(&request)?;
        Self::load(&built.module)
    }

    /// The same context for another unit of the application, such as `kv/1`.
    ///
    /// ```no_run
    /// let ctx = charm_test::WasmContext::load("kv.wasm")?.unit("kv/1");
    /// assert_eq!(ctx.unit_name(), "kv/1");
    /// # Ok::<(), charm_test::Error>(())
    /// ```
    pub fn unit(mut self, unit: &str) -> Self {
        self.unit = unit.to_string();
        self
    }

    /// The unit's name.
    pub fn unit_name(&self) -> &str {
        &self.unit
    }

    /// The charm's metadata, as the host read it from the module.
    pub fn metadata(&self) -> &charm_host::model::CharmMetadata {
        self.charm.metadata()
    }

    fn snapshot(&self, state: &State) -> UnitSnapshot {
        let app = app_of(&self.unit).to_string();
        let meta = self.charm.metadata();
        // The effective config, as the store builds it: settings over declared defaults.
        let mut config: BTreeMap<String, charm_host::model::ConfigValue> = meta
            .config
            .iter()
            .filter_map(|o| Some((o.name.clone(), o.default.clone()?)))
            .collect();
        for (name, value) in &state.config {
            let value = host_value(value);
            let value = match meta.option(name) {
                Some(o) => value.clone().coerce(o.kind).unwrap_or(value),
                None => value,
            };
            config.insert(name.clone(), value);
        }
        let relations = state
            .relations
            .iter()
            .map(|r| {
                let remote_app = if r.peer {
                    app.clone()
                } else {
                    r.remote_app.clone()
                };
                let mut unit_bags: BTreeMap<String, Arc<BTreeMap<String, String>>> = r
                    .remote_units
                    .iter()
                    .map(|(unit, bag)| (unit.clone(), Arc::new(bag.clone())))
                    .collect();
                unit_bags.insert(self.unit.clone(), Arc::new(r.local_unit_data.clone()));
                let mut app_bags =
                    BTreeMap::from([(app.clone(), Arc::new(r.local_app_data.clone()))]);
                if !r.peer {
                    app_bags.insert(remote_app.clone(), Arc::new(r.remote_app_data.clone()));
                }
                let view = RelationView {
                    id: r.id,
                    endpoint: r.endpoint.clone(),
                    remote_app,
                    // In unit order (`pg/2` before `pg/10`), as a host's stores give them
                    // and the SDK's `RemoteUnits` searches them.
                    remote_units: charm_sdk::RemoteUnits::from_names(r.remote_units.keys())
                        .to_vec()
                        .into(),
                    unit_bags,
                    app_bags,
                };
                (r.id, view)
            })
            .collect();
        UnitSnapshot {
            model: self.model.clone(),
            unit: self.unit.clone(),
            app,
            config: Arc::new(config),
            relations,
            leader_data: Arc::new(state.leader_data.clone()),
            unit_status: host_status(&state.unit_status),
            app_status: host_status(&state.app_status),
            stored: Arc::new(state.stored.clone()),
            elected_term: None,
            module: None,
        }
    }
}

/// A guarantee that has already ended: the lease store has been silent for too long.
struct Lapsed;

impl GuaranteeWatch for Lapsed {
    fn valid_until(&self) -> Option<tokio::time::Instant> {
        None
    }
}

/// A guarantee with plenty of time left.
struct Held(tokio::time::Instant);

impl GuaranteeWatch for Held {
    fn valid_until(&self) -> Option<tokio::time::Instant> {
        Some(self.0)
    }
}

impl HookRunner for WasmContext {
    /// Runs `event` in the host. The faults map onto the host as follows:
    /// - `lease_store_down_after`: the hook runs under a guarantee that has ended, so the
    ///   host's epoch deadline stops it, or, if it returns before the next tick, the agent's
    ///   check before committing refuses it (the call count is not observable in wasm: the
    ///   outage covers the whole hook);
    /// - `lease_lost_after` and `commit_unavailable`: the commit is refused as the store
    ///   would refuse it (the store's own fence check is covered by its contract tests).
    fn run_with(&self, mut event: Event, state: State, faults: &Faults) -> Output {
        let app = app_of(&self.unit).to_string();
        fill_peer_app(&mut event, &state, &app);
        // The host checks an action's parameters against the charm's declaration before
        // queueing it, with the rule the native harness applies.
        if let Event::Action(action) = &mut event
            && let Err(why) = check_action_params(self.charm.metadata(), &app, action)
        {
            return Output {
                outcome: Outcome::Refused(why),
                state,
                logs: Vec::new(),
                action: None,
                is_leader_answers: Vec::new(),
                leadership_refusals: 0,
                emitted: Vec::new(),
            };
        }
        let fence = state.leader.then(|| Fence {
            app,
            holder: self.unit.clone(),
            term: 1,
        });
        let outage = state.leader && faults.lease_store_down_after.is_some();
        let guarantee: Option<Arc<dyn GuaranteeWatch>> = match (state.leader, outage) {
            (false, _) => None,
            (true, true) => Some(Arc::new(Lapsed)),
            (true, false) => Some(Arc::new(Held(
                tokio::time::Instant::now() + std::time::Duration::from_secs(60),
            ))),
        };
        let is_action = matches!(event, Event::Action(_));
        let run: HookRun =
            self.charm
                .run_hook(self.snapshot(&state), fence, guarantee, &wit_event(&event));
        let outcome = match run.outcome {
            HookOutcome::Succeeded if outage => Outcome::Interrupted,
            HookOutcome::Succeeded if state.leader && faults.lease_lost_after.is_some() => {
                Outcome::Fenced
            }
            HookOutcome::Succeeded if faults.commit_unavailable => Outcome::StoreUnavailable,
            // The store's commit checks the limits first, as the harness does.
            HookOutcome::Succeeded => match charm_model::limits::check(&(&run.changes).into()) {
                Ok(()) => Outcome::Committed,
                Err(e) => Outcome::OverLimit(e.to_string()),
            },
            HookOutcome::OverLimit(e) => Outcome::OverLimit(e.to_string()),
            HookOutcome::Failed(m) => Outcome::Failed(m),
            HookOutcome::Trapped(m) => Outcome::Panicked(m),
            HookOutcome::Interrupted(_) => Outcome::Interrupted,
        };
        let mut action = run.changes.action.clone().map(|a| ActionOutput {
            results: a.results,
            failure: a.failure,
            log: a.log,
        });
        if is_action {
            let action = action.get_or_insert_default();
            if let Outcome::Failed(why) | Outcome::Panicked(why) = &outcome {
                action.failure.get_or_insert_with(|| why.clone());
            }
        }
        let logs = run
            .logs
            .iter()
            .map(|l| LogLine {
                level: match l.level {
                    "trace" => Level::Trace,
                    "debug" => Level::Debug,
                    "info" => Level::Info,
                    "warning" => Level::Warning,
                    _ => Level::Error,
                },
                message: l.message.clone(),
            })
            .collect();
        let state = if outcome.is_committed() {
            commit(state, &run.changes)
        } else {
            state
        };
        Output {
            outcome,
            state,
            logs,
            action,
            // The host does not report each answer; it pins one per hook.
            is_leader_answers: Vec::new(),
            leadership_refusals: run.leadership_refusals,
            // The host keeps custom events inside the guest; they are in its debug log.
            emitted: Vec::new(),
        }
    }
}

fn host_value(v: &ConfigValue) -> charm_host::model::ConfigValue {
    use charm_host::model::ConfigValue as H;
    match v {
        ConfigValue::String(s) => H::String(s.clone()),
        ConfigValue::Int(i) => H::Int(*i),
        ConfigValue::Float(f) => H::Float(*f),
        ConfigValue::Boolean(b) => H::Boolean(*b),
    }
}

fn host_status(s: &charm_sdk::Status) -> charm_host::model::Status {
    use charm_host::model::{Status, StatusKind};
    let kind = match s {
        charm_sdk::Status::Unknown => StatusKind::Unknown,
        charm_sdk::Status::Active(_) => StatusKind::Active,
        charm_sdk::Status::Maintenance(_) => StatusKind::Maintenance,
        charm_sdk::Status::Waiting(_) => StatusKind::Waiting,
        charm_sdk::Status::Blocked(_) => StatusKind::Blocked,
        charm_sdk::Status::Error(_) => StatusKind::Error,
    };
    Status::new(kind, s.message())
}

fn sdk_status(s: &charm_host::model::Status) -> charm_sdk::Status {
    use charm_host::model::StatusKind;
    let m = s.message.clone();
    match s.kind {
        StatusKind::Unknown => charm_sdk::Status::Unknown,
        StatusKind::Active => charm_sdk::Status::Active(m),
        StatusKind::Maintenance => charm_sdk::Status::Maintenance(m),
        StatusKind::Waiting => charm_sdk::Status::Waiting(m),
        StatusKind::Blocked => charm_sdk::Status::Blocked(m),
        StatusKind::Error => charm_sdk::Status::Error(m),
    }
}

fn wit_event(event: &Event) -> wit::Event {
    let rel = |r: &charm_sdk::RelationEvent| wit::RelationEvent {
        id: r.id,
        name: r.name.clone(),
        remote_app: r.remote_app.clone(),
        remote_unit: r.remote_unit.clone(),
    };
    match event {
        Event::Install => wit::Event::Install,
        Event::Start => wit::Event::Start,
        Event::ConfigChanged => wit::Event::ConfigChanged,
        Event::UpgradeCharm => wit::Event::UpgradeCharm,
        Event::UpdateStatus => wit::Event::UpdateStatus,
        Event::Stop => wit::Event::Stop,
        Event::Remove => wit::Event::Remove,
        Event::LeaderElected => wit::Event::LeaderElected,
        Event::LeaderSettingsChanged => wit::Event::LeaderSettingsChanged,
        Event::RelationCreated(r) => wit::Event::RelationCreated(rel(r)),
        Event::RelationJoined(r) => wit::Event::RelationJoined(rel(r)),
        Event::RelationChanged(r) => wit::Event::RelationChanged(rel(r)),
        Event::RelationDeparted(r) => wit::Event::RelationDeparted(rel(r)),
        Event::RelationBroken(r) => wit::Event::RelationBroken(rel(r)),
        Event::Action(a) => wit::Event::Action(wit::ActionEvent {
            id: a.id.clone(),
            name: a.name.clone(),
            params: serde_json::Value::Object(a.params.clone()).to_string(),
        }),
        Event::Custom(c) => panic!(
            "{}/{} is a custom event: the host only sends hook events; run the hook event \
             that makes the library emit it",
            c.source, c.name
        ),
    }
}

/// Applies a successful hook's writes to the state, as the store's commit does.
fn commit(mut state: State, changes: &Changes) -> State {
    let apply = |bag: &mut BTreeMap<String, String>, writes: &BTreeMap<String, Option<String>>| {
        charm_host::model::apply_writes(bag, writes);
    };
    for (id, writes) in &changes.unit_bags {
        if let Some(r) = state.relations.iter_mut().find(|r| r.id == *id) {
            apply(&mut r.local_unit_data, writes);
        }
    }
    for (id, writes) in &changes.app_bags {
        if let Some(r) = state.relations.iter_mut().find(|r| r.id == *id) {
            apply(&mut r.local_app_data, writes);
        }
    }
    apply(&mut state.leader_data, &changes.leader_data);
    apply(&mut state.stored, &changes.stored);
    if let Some(s) = &changes.unit_status {
        state.unit_status = sdk_status(s);
    }
    if let Some(s) = &changes.app_status {
        state.app_status = sdk_status(s);
    }
    if let Some(v) = &changes.workload_version {
        state.workload_version = Some(v.clone());
    }
    if let Some(write) = &changes.pod_spec {
        let revision = match &state.pod_spec {
            Some(old) if old.spec == write.spec && old.k8s_resources == write.k8s_resources => {
                old.revision
            }
            Some(old) => old.revision + 1,
            None => 1,
        };
        state.pod_spec = Some(PodSpecState {
            revision,
            spec: write.spec.clone(),
            k8s_resources: write.k8s_resources.clone(),
        });
    }
    state
}
