//! Test a charm natively, with no wasm and no host: arrange a [`State`], run one [`Event`]
//! with a [`Context`], assert on the [`Output`] (Python ops' Scenario:
//! `ctx.run(ctx.on.<event>(), State(...)) -> State`).
//!
//! The harness answers the charm's calls as the host does, with the host's rules (the model
//! core, `charm-model`, which the host runs too): the
//! leadership answer is pinned for the hook; leader-only writes (leader data, the
//! application's bags, the pod spec, the application's status) are refused with
//! [`Error::NotLeader`](crate::Error::NotLeader) when the unit is not leader; a unit writes
//! only its own unit bag and reads only the bags Juju lets it; pod specs are validated by the
//! host's validator; and everything the hook wrote is applied only if it returns
//! `Ok`: an `Err` or a panic leaves the state as it was.
//!
//! Beyond Scenario: pod specs are first-class (set, validated, revisioned), and a test can
//! script the lease store's faults with [`Faults`] and see what the host guarantees.
//!
//! ```
//! use charm_sdk::pod::{Container, PodSpec};
//! use charm_sdk::testing::{Context, Relation, State};
//! use charm_sdk::{Charm, Event, HookResult, Metadata, Model, RelationEvent, Status};
//!
//! struct Web;
//! impl Charm for Web {
//!     fn metadata() -> Metadata {
//!         Metadata::new("web").requires("db", "pgsql").string_option("image", Some("nginx"), "")
//!     }
//!     fn handle(model: &Model, event: Event) -> HookResult {
//!         if let Event::RelationChanged(rel) = event {
//!             let db = model.relation_by_id(rel.id)?;
//!             let Some(master) = db.remote_app_data()?.get("master").map(str::to_owned) else {
//!                 model.unit().set_status(Status::waiting("waiting for database"))?;
//!                 return Ok(());
//!             };
//!             if model.is_leader() {
//!                 let image: String = model.config().get("image")?;
//!                 let spec = PodSpec::new().container(Container::new("web", image).env("DB", master));
//!                 model.pod().set_spec(&spec)?;
//!             }
//!             model.unit().set_status(Status::active(""))?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let db = Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]);
//! let event = Event::RelationChanged(RelationEvent::new(1, "db", "postgresql"));
//! let out = Context::<Web>::new().run(event, State::default().leader(true).relation(db));
//!
//! assert!(out.committed());
//! assert_eq!(out.state.unit_status, Status::active(""));
//! let spec = out.state.pod_spec.unwrap().typed().unwrap();
//! assert_eq!(spec.containers[0].env_config["DB"], "host=pg");
//! ```

mod deployment;
pub(crate) mod host;
mod state;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::rc::Rc;

pub use deployment::{Deployment, HookRan};
pub use state::{Bag, PodSpecState, Relation, State};

use crate::log::Level;
use crate::{Charm, CustomEvent, Event, Metadata, Model, RelationRole};
use charm_model::apply_writes;
use charm_model::tx::PodSpecState as StoredSpec;
use host::{Hook, HookBackend, Interrupted, Writes};

/// A line the charm logged.
///
/// ```
/// use charm_sdk::log::Level;
/// let line = charm_sdk::testing::LogLine { level: Level::Info, message: "hi".into() };
/// assert_eq!(line.level.as_str(), "info");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Its text.
    pub message: String,
}

/// What an action reported for the operator.
///
/// ```
/// let out = charm_sdk::testing::ActionOutput::default();
/// assert!(out.results.is_empty() && out.failure.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionOutput {
    /// The results, by key.
    pub results: BTreeMap<String, String>,
    /// Why it failed, if it did (its own `fail`, or the hook's error).
    pub failure: Option<String>,
    /// Its progress messages, in order.
    pub log: Vec<String>,
}

/// Faults of the lease store during the hook, scripted by the test. Each is what the host
/// guarantees in that situation, not a charm bug to handle.
///
/// ```
/// let faults = charm_sdk::testing::Faults { lease_lost_after: Some(2), ..Default::default() };
/// assert!(!faults.commit_unavailable);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// The unit's lease goes to another unit after the hook's `n`-th call to the host (the
    /// host's clock was paused past the guarantee, say). The hook keeps its answer:
    /// `is_leader` stays true and no leader-only write is refused. Its commit carries the
    /// old term and the store refuses it: [`Outcome::Fenced`], nothing applied.
    pub lease_lost_after: Option<u32>,
    /// The lease store stops answering after the hook's `n`-th call and stays down longer
    /// than the leadership guarantee. A leader hook is stopped there, before the guarantee
    /// ends: [`Outcome::Interrupted`], nothing applied. A non-leader hook is not affected.
    pub lease_store_down_after: Option<u32>,
    /// The state store cannot be reached when the hook commits:
    /// [`Outcome::StoreUnavailable`], nothing applied.
    pub commit_unavailable: bool,
}

/// How a hook ended. Anything but [`Outcome::Committed`] applied nothing; the host runs
/// the hook again later.
///
/// ```
/// use charm_sdk::testing::Outcome;
/// assert!(Outcome::Committed.is_committed());
/// assert!(!Outcome::Fenced.is_committed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The hook returned `Ok` and its writes were applied.
    Committed,
    /// The hook returned this error.
    Failed(String),
    /// The hook panicked with this message (a trap, in wasm).
    Panicked(String),
    /// The host stopped the hook: its leadership guarantee was ending with no renewal.
    Interrupted,
    /// The store refused the commit: the lease no longer had this unit's term.
    Fenced,
    /// The store could not be reached when the hook committed.
    StoreUnavailable,
    /// The hook returned `Ok`, but its writes exceed one of the host's limits
    /// ([`charm_model::limits`]), named here: the host fails the hook with this message.
    OverLimit(String),
    /// The hook never ran: the action's parameters do not match what the charm declares
    /// ([`charm_model::actions::checked_params`]), as the message says. The host refuses
    /// such a run when the operator asks for it.
    Refused(String),
}

impl Outcome {
    /// Whether the hook's writes were applied.
    ///
    /// ```
    /// assert!(!charm_sdk::testing::Outcome::Interrupted.is_committed());
    /// ```
    pub fn is_committed(&self) -> bool {
        *self == Outcome::Committed
    }
}

/// What one hook did.
///
/// ```
/// use charm_sdk::testing::{Context, State};
/// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
/// # struct Noop;
/// # impl Charm for Noop {
/// #     fn metadata() -> Metadata { Metadata::new("noop") }
/// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
/// # }
/// let out = Context::<Noop>::new().run(Event::Install, State::default());
/// assert!(out.committed());
/// assert_eq!(out.state, State::default());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// How it ended.
    pub outcome: Outcome,
    /// The state after the hook: with its writes if it committed, as before if not.
    pub state: State,
    /// What the charm logged, however the hook ended.
    pub logs: Vec<LogLine>,
    /// For an action, what it reported.
    pub action: Option<ActionOutput>,
    /// Every answer `is_leader` gave during the hook, in order.
    pub is_leader_answers: Vec<bool>,
    /// How many leader-only operations were refused because the unit was not leader.
    pub leadership_refusals: u32,
    /// The custom events the charm's libraries emitted, in order, however the hook ended.
    /// Empty when the hook ran in the host, which does not report them (they are in the
    /// debug log).
    pub emitted: Vec<CustomEvent>,
}

impl Output {
    /// Whether the hook's writes were applied.
    ///
    /// ```
    /// # use charm_sdk::testing::{Context, State};
    /// # use charm_sdk::{Charm, Event, HookError, HookResult, Metadata, Model};
    /// # struct Failing;
    /// # impl Charm for Failing {
    /// #     fn metadata() -> Metadata { Metadata::new("failing") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Err(HookError::msg("no")) }
    /// # }
    /// let out = Context::<Failing>::new().run(Event::Start, State::default());
    /// assert!(!out.committed());
    /// ```
    pub fn committed(&self) -> bool {
        self.outcome.is_committed()
    }
}

/// Runs one hook of a charm on an arranged state. Implemented natively by [`Context`]; the
/// same test can run against the compiled `.wasm` through the host with another
/// implementation (`charm_test::WasmContext`, in the `charm-test` crate).
///
/// ```
/// use charm_sdk::testing::{Context, HookRunner, State};
/// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
/// # struct Idle;
/// # impl Charm for Idle {
/// #     fn metadata() -> Metadata { Metadata::new("idle") }
/// #     fn handle(m: &Model, _: Event) -> HookResult { m.unit().set_status(Status::active(""))?; Ok(()) }
/// # }
/// fn starts_active(runner: &dyn HookRunner) {
///     let out = runner.run(Event::Start, State::default());
///     assert_eq!(out.state.unit_status, Status::active(""));
/// }
/// starts_active(&Context::<Idle>::new());
/// ```
pub trait HookRunner {
    /// Runs `event` on `state`, with no faults.
    fn run(&self, event: Event, state: State) -> Output {
        self.run_with(event, state, &Faults::default())
    }

    /// Runs `event` on `state` with these lease store faults.
    fn run_with(&self, event: Event, state: State, faults: &Faults) -> Output;
}

/// Runs a charm's hooks natively: Scenario's `Context`.
///
/// The unit is `<charm name>/0` of application `<charm name>` in model `test` unless set.
///
/// ```
/// use charm_sdk::testing::{Context, State};
/// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
/// # struct Named;
/// # impl Charm for Named {
/// #     fn metadata() -> Metadata { Metadata::new("named") }
/// #     fn handle(m: &Model, _: Event) -> HookResult { m.unit().set_status(Status::active(m.unit().name()))?; Ok(()) }
/// # }
/// let out = Context::<Named>::new().unit("named/3").run(Event::Start, State::default());
/// assert_eq!(out.state.unit_status, Status::active("named/3"));
/// ```
pub struct Context<C> {
    model: String,
    unit: String,
    metadata: Metadata,
    /// Whether the unit's application may be named other than the charm (a [`Deployment`]'s).
    any_app_name: bool,
    charm: PhantomData<fn() -> C>,
}

impl<C: Charm> Default for Context<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Charm> Context<C> {
    /// A context for unit 0 of the charm's application.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Noop;
    /// # impl Charm for Noop {
    /// #     fn metadata() -> Metadata { Metadata::new("noop") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// let ctx = charm_sdk::testing::Context::<Noop>::new();
    /// assert_eq!(ctx.unit_name(), "noop/0");
    /// ```
    pub fn new() -> Self {
        let metadata = C::metadata();
        Context {
            model: "test".into(),
            unit: format!("{}/0", metadata.name),
            metadata,
            any_app_name: false,
            charm: PhantomData,
        }
    }

    /// The same context for another unit of the application, such as `kv/1`.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Noop;
    /// # impl Charm for Noop {
    /// #     fn metadata() -> Metadata { Metadata::new("noop") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// let ctx = charm_sdk::testing::Context::<Noop>::new().unit("noop/2");
    /// assert_eq!(ctx.unit_name(), "noop/2");
    /// ```
    pub fn unit(mut self, unit: &str) -> Self {
        self.unit = unit.to_string();
        self
    }

    /// The unit's name.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Noop;
    /// # impl Charm for Noop {
    /// #     fn metadata() -> Metadata { Metadata::new("noop") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// assert_eq!(charm_sdk::testing::Context::<Noop>::new().unit_name(), "noop/0");
    /// ```
    pub fn unit_name(&self) -> &str {
        &self.unit
    }

    /// Runs `event` on `state` with no faults. See [`HookRunner::run`].
    ///
    /// # Panics
    ///
    /// When the state or event does not fit the charm's metadata (an undeclared option or
    /// endpoint, a relation event about a relation not in the state, ...): the test is wrong.
    ///
    /// ```should_panic
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Noop;
    /// # impl Charm for Noop {
    /// #     fn metadata() -> Metadata { Metadata::new("noop") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// use charm_sdk::testing::{Context, State};
    /// // `noop` declares no option `port`.
    /// Context::<Noop>::new().run(Event::ConfigChanged, State::default().config("port", 80));
    /// ```
    pub fn run(&self, event: Event, state: State) -> Output {
        self.run_with(event, state, &Faults::default())
    }

    /// Runs `event` on `state` with these lease store faults. See [`Faults`].
    ///
    /// ```
    /// use charm_sdk::testing::{Context, Faults, Outcome, State};
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Leader;
    /// # impl Charm for Leader {
    /// #     fn metadata() -> Metadata { Metadata::new("leader") }
    /// #     fn handle(m: &Model, _: Event) -> HookResult {
    /// #         if m.is_leader() { m.leader_data().set("k", "v")?; }
    /// #         Ok(())
    /// #     }
    /// # }
    /// let faults = Faults { commit_unavailable: true, ..Default::default() };
    /// let out = Context::<Leader>::new().run_with(Event::Start, State::default().leader(true), &faults);
    /// assert_eq!(out.outcome, Outcome::StoreUnavailable);
    /// assert!(out.state.leader_data.is_empty());
    /// ```
    pub fn run_with(&self, event: Event, state: State, faults: &Faults) -> Output {
        self.run_hook(event, state, faults).0
    }

    /// Runs one hook; with the output, what it wrote when it committed.
    pub(crate) fn run_hook(
        &self,
        mut event: Event,
        state: State,
        faults: &Faults,
    ) -> (Output, Option<Writes>) {
        fill_peer_app(&mut event, &state, app_of(&self.unit));
        if let Err(why) = self.check(&event, &state) {
            panic!("inconsistent test state for {}: {why}", self.metadata.name);
        }
        let app = crate::testing::app_of(&self.unit).to_string();
        if let Event::Action(action) = &mut event
            && let Err(why) = checked_action_params(&self.metadata, &app, action)
        {
            let refused = Output {
                outcome: Outcome::Refused(why),
                state,
                logs: Vec::new(),
                action: None,
                is_leader_answers: Vec::new(),
                leadership_refusals: 0,
                emitted: Vec::new(),
            };
            return (refused, None);
        }
        let hook = Rc::new(RefCell::new(Hook::new(
            &self.model,
            &self.unit,
            self.metadata.clone(),
            state.clone(),
            faults.clone(),
        )));
        let is_action = matches!(event, Event::Action(_));
        let model = Model::new(self.model.clone(), self.unit.clone(), app);
        let result = crate::backend::install(Box::new(HookBackend(hook.clone())), || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::__private::dispatch::<C>(&model, event)
            }))
        });
        let hook = Rc::try_unwrap(hook)
            .ok()
            .expect("the backend was dropped")
            .into_inner();
        let lease_lost = state.leader && faults.lease_lost_after.is_some_and(|n| hook.calls > n);
        let outcome = match result {
            Ok(Ok(())) if lease_lost => Outcome::Fenced,
            Ok(Ok(())) if faults.commit_unavailable => Outcome::StoreUnavailable,
            Ok(Ok(())) => match hook.check_limits() {
                Ok(()) => Outcome::Committed,
                Err(e) => Outcome::OverLimit(e.to_string()),
            },
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
            Err(payload) if payload.is::<Interrupted>() => Outcome::Interrupted,
            Err(payload) => Outcome::Panicked(panic_message(payload.as_ref())),
        };
        let mut action = hook.action;
        if is_action {
            let action = action.get_or_insert_default();
            if let Outcome::Failed(why) | Outcome::Panicked(why) = &outcome {
                action.failure.get_or_insert_with(|| why.clone());
            }
        }
        let (state, writes) = if outcome.is_committed() {
            (commit(state, &hook.writes), Some(hook.writes))
        } else {
            (state, None)
        };
        let out = Output {
            outcome,
            state,
            logs: hook.logs,
            action,
            is_leader_answers: hook.is_leader_answers,
            leadership_refusals: hook.leadership_refusals,
            emitted: model.emitted(),
        };
        (out, writes)
    }

    /// Whether the state and event fit the charm's metadata, as the host's bundle checks
    /// and relation bookkeeping guarantee they do.
    fn check(&self, event: &Event, state: &State) -> Result<(), String> {
        let meta = &self.metadata;
        if !self.any_app_name && crate::testing::app_of(&self.unit) != meta.name {
            // Not an error in Juju (an application may be named freely), but a test that
            // means another charm's unit has almost certainly picked the wrong context.
            return Err(format!(
                "unit {} is not a unit of application {}",
                self.unit, meta.name
            ));
        }
        for (name, value) in &state.config {
            let option = meta
                .config
                .iter()
                .find(|o| &o.name == name)
                .ok_or_else(|| format!("config option {name:?} is not declared"))?;
            if value.clone().coerce(option.kind).is_none() {
                return Err(format!(
                    "config option {name:?} is declared {:?}, set to {value:?}",
                    option.kind
                ));
            }
        }
        let mut ids = std::collections::BTreeSet::new();
        for r in &state.relations {
            if !ids.insert(r.id) {
                return Err(format!("relation id {} is used twice", r.id));
            }
            let endpoint = meta
                .relations
                .iter()
                .find(|e| e.name == r.endpoint)
                .ok_or_else(|| format!("endpoint {:?} is not declared", r.endpoint))?;
            if (endpoint.role == RelationRole::Peers) != r.peer {
                return Err(format!(
                    "relation {} on {:?}: use Relation::peer for a peer endpoint, and only for one",
                    r.id, r.endpoint
                ));
            }
        }
        if let Some(rel) = event.relation() {
            let r = state.relation_by_id(rel.id).ok_or_else(|| {
                format!("the event is about relation {}, not in the state", rel.id)
            })?;
            if r.endpoint != rel.name {
                return Err(format!(
                    "the event names endpoint {:?}, relation {} is on {:?}",
                    rel.name, rel.id, r.endpoint
                ));
            }
        }
        if let Event::Action(a) = event
            && !meta.actions.iter().any(|m| m.name == a.name)
        {
            return Err(format!("action {:?} is not declared", a.name));
        }
        Ok(())
    }
}

/// The native harness's check of an action run: [`check_action_params`] on the charm's
/// metadata as the host reads it.
fn checked_action_params(
    metadata: &Metadata,
    app: &str,
    action: &mut crate::ActionEvent,
) -> Result<(), String> {
    check_action_params(&host::to_model_metadata(metadata), app, action)
}

/// Checks an action run of `app` against what its charm declares, with the host's own rule
/// ([`charm_model::actions::checked_params`]), and replaces its parameters with what the
/// hook then gets: each typed as declared, plus the defaults of those left out. An error
/// names what is wrong: the run is refused, as the host refuses it. A [`HookRunner`] calls
/// it before running an action, so that every runner gives the same verdict.
///
/// ```
/// use charm_sdk::ActionEvent;
/// use charm_sdk::testing::check_action_params;
/// use charm_model::{ActionMeta, ActionParamMeta, CharmMetadata, OptionType};
///
/// let metadata = CharmMetadata {
///     name: "kv".into(),
///     actions: vec![ActionMeta {
///         name: "get".into(),
///         description: String::new(),
///         params: vec![ActionParamMeta {
///             name: "key".into(),
///             kind: OptionType::String,
///             description: String::new(),
///             default: None,
///             required: true,
///         }],
///     }],
///     ..Default::default()
/// };
/// let mut run = ActionEvent::new("get").param("key", "colour");
/// assert!(check_action_params(&metadata, "kv", &mut run).is_ok());
/// let mut missing = ActionEvent::new("get");
/// let why = check_action_params(&metadata, "kv", &mut missing).unwrap_err();
/// assert!(why.contains("key"), "{why}");
/// ```
pub fn check_action_params(
    metadata: &charm_model::CharmMetadata,
    app: &str,
    action: &mut crate::ActionEvent,
) -> Result<(), String> {
    let given = params_to_model(&action.name, &action.params)?;
    let checked = charm_model::actions::checked_params(app, metadata, &action.name, given)
        .map_err(|e| e.to_string())?;
    action.params = params_to_json(checked);
    Ok(())
}

/// An action run's JSON parameters as the model's values. Only text, numbers and booleans
/// are parameter values.
fn params_to_model(
    action: &str,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<BTreeMap<String, charm_model::ConfigValue>, String> {
    use charm_model::ConfigValue as V;
    params
        .iter()
        .map(|(key, value)| {
            let value = match value {
                serde_json::Value::String(s) => V::String(s.clone()),
                serde_json::Value::Bool(b) => V::Boolean(*b),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => V::Int(i),
                    None => V::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                other => {
                    return Err(format!(
                        "action {action}: parameter {key:?} is {other}, not a string, number or \
                         boolean"
                    ));
                }
            };
            Ok((key.clone(), value))
        })
        .collect()
}

/// Checked parameters as the JSON object the charm's hook receives.
fn params_to_json(
    params: BTreeMap<String, charm_model::ConfigValue>,
) -> serde_json::Map<String, serde_json::Value> {
    use charm_model::ConfigValue as V;
    params
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                V::String(s) => serde_json::Value::String(s),
                V::Int(i) => i.into(),
                V::Float(f) => f.into(),
                V::Boolean(b) => b.into(),
            };
            (key, value)
        })
        .collect()
}

impl<C: Charm> HookRunner for Context<C> {
    fn run_with(&self, event: Event, state: State, faults: &Faults) -> Output {
        Context::run_with(self, event, state, faults)
    }
}

/// A peer relation's events name this application on the other side, as the host's do;
/// [`Relation::changed`] and its siblings cannot know the application's name, so a
/// [`HookRunner`] fills it in from the unit's application `app`.
///
/// ```
/// use charm_sdk::testing::{fill_peer_app, Relation, State};
///
/// let cluster = Relation::peer(2, "cluster");
/// let state = State::default().relation(cluster.clone());
/// let mut event = cluster.changed(Some("kv/1"));
/// fill_peer_app(&mut event, &state, "kv");
/// assert_eq!(event.relation().unwrap().remote_app, "kv");
/// ```
pub fn fill_peer_app(event: &mut Event, state: &State, app: &str) {
    let rel = match event {
        Event::RelationCreated(r)
        | Event::RelationJoined(r)
        | Event::RelationChanged(r)
        | Event::RelationDeparted(r)
        | Event::RelationBroken(r) => r,
        _ => return,
    };
    if rel.remote_app.is_empty() && state.relation_by_id(rel.id).is_some_and(|r| r.peer) {
        rel.remote_app = app.to_string();
    }
}

/// The application part of a unit name: `kv` for `kv/0`.
///
/// ```
/// assert_eq!(charm_sdk::testing::app_of("kv/0"), "kv");
/// ```
pub fn app_of(unit: &str) -> &str {
    unit.split_once('/').map_or(unit, |(app, _)| app)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked".into()
    }
}

/// Applies a successful hook's writes, as the store's commit does.
fn commit(mut state: State, writes: &Writes) -> State {
    for (id, bag) in &writes.unit_bags {
        if let Some(r) = state.relation_mut(*id) {
            apply_writes(&mut r.local_unit_data, bag);
        }
    }
    for (id, bag) in &writes.app_bags {
        if let Some(r) = state.relation_mut(*id) {
            apply_writes(&mut r.local_app_data, bag);
        }
    }
    apply_writes(&mut state.leader_data, &writes.leader_data);
    apply_writes(&mut state.stored, &writes.stored);
    if let Some(status) = &writes.unit_status {
        state.unit_status = status.clone();
    }
    if let Some(status) = &writes.app_status {
        state.app_status = status.clone();
    }
    if let Some(version) = &writes.workload_version {
        state.workload_version = Some(version.clone());
    }
    if let Some(write) = &writes.pod_spec {
        // The store's revision rule: an unchanged spec makes no new revision.
        let stored = StoredSpec {
            revision: state.pod_spec.as_ref().map(|old| old.revision),
            same: state.pod_spec.as_ref().is_some_and(|old| {
                old.spec == write.spec && old.k8s_resources == write.k8s_resources
            }),
        };
        if let Some(revision) = stored.next_revision() {
            state.pod_spec = Some(PodSpecState {
                revision,
                spec: write.spec.clone(),
                k8s_resources: write.k8s_resources.clone(),
            });
        }
    }
    state
}
