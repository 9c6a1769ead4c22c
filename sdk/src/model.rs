use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backend;
use crate::config::Config;
use crate::custom::{CustomEvent, Emit};
use crate::error::{Error, Result};
use crate::pod::Pod;
use crate::relation::Relation;
use crate::status::Status;

/// The unit's view of the Juju model during one hook, in the shape of Python ops' `Model`.
///
/// Reads see the model as it was when the hook started plus the hook's own writes; writes
/// are buffered by the host and applied together when the hook succeeds.
///
/// ```
/// use charm_sdk::testing::{Context, State};
/// use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
///
/// struct Named;
/// impl Charm for Named {
///     fn metadata() -> Metadata { Metadata::new("named") }
///     fn handle(model: &Model, _: Event) -> HookResult {
///         let msg = format!("{} of {} in {}", model.unit().name(), model.app().name(), model.name());
///         model.unit().set_status(Status::active(msg))?;
///         Ok(())
///     }
/// }
/// let out = Context::<Named>::new().run(Event::Start, State::default());
/// assert_eq!(out.state.unit_status, Status::active("named/0 of named in test"));
/// ```
#[derive(Debug, Clone)]
pub struct Model {
    name: String,
    unit: Unit,
    app: Application,
    deferred: Cell<bool>,
    /// Every custom event emitted in this hook, and how many of them have been handled.
    emitted: RefCell<Vec<CustomEvent>>,
    handled: Cell<usize>,
    /// What [`Model::memo`] computed in this hook.
    memos: RefCell<Vec<Memo>>,
}

/// One value [`Model::memo`] keeps, and how many model writes had been made when it was
/// computed.
#[derive(Clone)]
struct Memo {
    key: String,
    writes: u64,
    value: Rc<dyn Any>,
}

impl fmt::Debug for Memo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memo")
            .field("key", &self.key)
            .field("writes", &self.writes)
            .finish_non_exhaustive()
    }
}

impl Model {
    pub(crate) fn new(model: String, unit: String, app: String) -> Self {
        Model {
            name: model,
            unit: Unit { name: unit },
            app: Application { name: app },
            deferred: Cell::new(false),
            emitted: RefCell::new(Vec::new()),
            handled: Cell::new(0),
            memos: RefCell::new(Vec::new()),
        }
    }

    /// A value worked out from the model, computed once per hook and shared by every caller
    /// that asks for `key` until the hook writes to the model.
    ///
    /// Libraries use it for what several handlers of one hook need: an interface crate
    /// reads and parses the other side's data as it observes the event, and the charm's
    /// handler asks for the same data again. `compute` runs the first time `key` is asked
    /// in a hook, and again after any write the hook makes (a bag, leader data, stored
    /// state, a status, the pod spec), since the write could change what it read. An error
    /// is returned and not kept. Name keys after the library, such as `pgsql:db.relation.3`,
    /// so that two libraries do not share one; a key asked with another type is computed
    /// again.
    ///
    /// ```
    /// use std::cell::Cell;
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    ///
    /// thread_local! { static RUNS: Cell<u32> = const { Cell::new(0) }; }
    ///
    /// /// The peers' count, as a library would work it out.
    /// fn peers(model: &Model) -> charm_sdk::Result<u32> {
    ///     let count = model.memo("counter.peers", || {
    ///         RUNS.with(|r| r.set(r.get() + 1));
    ///         Ok(model.leader_data().all().len() as u32)
    ///     })?;
    ///     Ok(*count)
    /// }
    ///
    /// struct Counter;
    /// impl Charm for Counter {
    ///     fn metadata() -> Metadata { Metadata::new("counter") }
    ///     fn handle(model: &Model, _: Event) -> HookResult {
    ///         assert_eq!(peers(model)?, 0);
    ///         assert_eq!(peers(model)?, 0); // kept: computed once
    ///         model.leader_data().set("a", "1")?;
    ///         assert_eq!(peers(model)?, 1); // a write: computed again
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Counter>::new().run(Event::ConfigChanged, State::default().leader(true));
    /// assert!(out.committed(), "{:?}", out.outcome);
    /// assert_eq!(RUNS.with(Cell::get), 2);
    /// ```
    pub fn memo<T: 'static>(
        &self,
        key: &str,
        compute: impl FnOnce() -> Result<T>,
    ) -> Result<Rc<T>> {
        let writes = backend::writes();
        let kept = self
            .memos
            .borrow()
            .iter()
            .find(|m| m.key == key && m.writes == writes)
            .and_then(|m| Rc::clone(&m.value).downcast::<T>().ok());
        if let Some(value) = kept {
            return Ok(value);
        }
        // Not borrowed while computing: `compute` may ask for other memos.
        let value = Rc::new(compute()?);
        // A write made by `compute` itself leaves the value stale: keep it only if none was.
        if backend::writes() == writes {
            let mut memos = self.memos.borrow_mut();
            memos.retain(|m| m.key != key);
            memos.push(Memo {
                key: key.to_string(),
                writes,
                value: Rc::clone(&value) as Rc<dyn Any>,
            });
        }
        Ok(value)
    }

    /// Emits a library's event for the charm to handle in this hook, after the handler
    /// running now returns: as [`Event::Custom`](crate::Event::Custom), from `source` (the
    /// library and its endpoint, such as `pgsql:db`). See [`Charm::observe`](crate::Charm::observe).
    ///
    /// ```
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{Charm, Emit, Event, HookResult, Metadata, Model};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Tick(u32);
    /// impl Emit for Tick { fn name(&self) -> &'static str { "tick" } }
    ///
    /// struct Clock;
    /// impl Charm for Clock {
    ///     fn metadata() -> Metadata { Metadata::new("clock") }
    ///     fn observe(model: &Model, event: &Event) -> HookResult {
    ///         if *event == Event::UpdateStatus {
    ///             model.emit("clock:tick", &Tick(1))?;
    ///             model.emit("clock:tick", &Tick(2))?;
    ///         }
    ///         Ok(())
    ///     }
    ///     fn handle(model: &Model, event: Event) -> HookResult {
    ///         if let Event::Custom(ev) = &event {
    ///             let Tick(n) = ev.decode("clock:tick").expect("ours")?;
    ///             model.stored().set("last-tick", &n)?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Clock>::new().run(Event::UpdateStatus, State::default());
    /// assert_eq!(out.emitted.len(), 2);
    /// assert_eq!(out.state.stored["last-tick"], "2");
    /// ```
    pub fn emit<E: Emit>(&self, source: &str, event: &E) -> Result<()> {
        let custom = CustomEvent::new(source, event)?;
        crate::log::debug(&format!("emitting {}/{}", custom.source, custom.name));
        self.emitted.borrow_mut().push(custom);
        Ok(())
    }

    /// The next emitted event not yet handled.
    pub(crate) fn next_emitted(&self) -> Option<CustomEvent> {
        let next = self.handled.get();
        let custom = self.emitted.borrow().get(next).cloned()?;
        self.handled.set(next + 1);
        Some(custom)
    }

    /// How many events have been emitted in this hook.
    pub(crate) fn emitted_count(&self) -> usize {
        self.emitted.borrow().len()
    }

    /// Every event emitted in this hook, in order.
    #[cfg(not(target_family = "wasm"))]
    pub(crate) fn emitted(&self) -> Vec<CustomEvent> {
        self.emitted.borrow().clone()
    }

    /// The model's name.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let host = format!("db.{}.svc", model.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This unit.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let me: &str = model.unit().name();
    /// # }
    /// ```
    pub fn unit(&self) -> &Unit {
        &self.unit
    }

    /// This unit's application.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let service = format!("{}-endpoints", model.app().name());
    /// # }
    /// ```
    pub fn app(&self) -> &Application {
        &self.app
    }

    /// Defers the event being handled, as ops' `event.defer()`: it is handled again, with
    /// the model as it is then, at the start of the unit's next hook, before that hook's
    /// own event; and again after that until a run does not defer it. Deferral is one of
    /// the hook's writes, kept in the unit's stored state: a failed hook defers nothing.
    ///
    /// Actions cannot be deferred (as in Juju): deferring one is ignored.
    ///
    /// ```
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    ///
    /// struct Patient;
    /// impl Charm for Patient {
    ///     fn metadata() -> Metadata { Metadata::new("patient").requires("db", "pgsql") }
    ///     fn handle(model: &Model, event: Event) -> HookResult {
    ///         if event == Event::ConfigChanged && model.relation("db")?.is_none() {
    ///             model.defer(); // configure once the database is there
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Patient>::new().run(Event::ConfigChanged, State::default());
    /// assert_eq!(out.state.deferred(), vec![Event::ConfigChanged]);
    /// ```
    pub fn defer(&self) {
        self.deferred.set(true);
    }

    /// Whether [`Model::defer`] was called during this event.
    pub(crate) fn take_deferred(&self) -> bool {
        self.deferred.replace(false)
    }

    /// Whether this unit is the application's leader.
    ///
    /// The same answer for the whole hook: the host takes it when the hook starts and hands
    /// it over with the hook, so asking costs no call to the host. When it is `true`, no
    /// leader-only write of this hook is refused for leadership.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if model.is_leader() {
    ///     model.leader_data().set("password", "s3cret")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        backend::with(|b| b.is_leader())
    }

    /// The application's config.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let image: String = model.config().get("image")?;
    /// # Ok(()) }
    /// ```
    pub fn config(&self) -> Config {
        Config::new()
    }

    /// The relations on endpoint `name`, by ascending id.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// for rel in model.relations("db")? {
    ///     let master = rel.remote_app_data()?.get("master").map(str::to_owned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn relations(&self, name: &str) -> Result<Vec<Relation>> {
        backend::with(|b| b.relation_ids(name))
            .into_iter()
            .map(|id| self.relation_by_id(id))
            .collect()
    }

    /// The single relation on endpoint `name`, if there is one.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let Some(db) = model.relation("db")? else {
    ///     model.unit().set_status(charm_sdk::Status::blocked("needs a db relation"))?;
    ///     return Ok(());
    /// };
    /// # Ok(()) }
    /// ```
    pub fn relation(&self, name: &str) -> Result<Option<Relation>> {
        Ok(self.relations(name)?.into_iter().next())
    }

    /// The relation with this id.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model, event: charm_sdk::Event) -> charm_sdk::HookResult {
    /// if let charm_sdk::Event::RelationChanged(rel) = event {
    ///     let relation = model.relation_by_id(rel.id)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn relation_by_id(&self, id: u32) -> Result<Relation> {
        let r = backend::with(|b| b.relation_get(id))?;
        Ok(Relation::new(
            r,
            self.unit.name.clone(),
            self.app.name.clone(),
        ))
    }

    /// The leader settings, shared by all units of the application and written by the leader.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let password = model.leader_data().get("password");
    /// # }
    /// ```
    pub fn leader_data(&self) -> LeaderData {
        LeaderData { _private: () }
    }

    /// The application's Kubernetes pod.
    ///
    /// ```no_run
    /// # use charm_sdk::pod::{Container, PodSpec};
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.pod().set_spec(&PodSpec::new().container(Container::new("web", "nginx:1.25")))?;
    /// # Ok(()) }
    /// ```
    pub fn pod(&self) -> Pod {
        Pod::new()
    }

    /// This unit's persistent state.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let installed: bool = model.stored().get("installed")?.unwrap_or(false);
    /// # Ok(()) }
    /// ```
    pub fn stored(&self) -> StoredState {
        StoredState { _private: () }
    }
}

/// A unit of an application.
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// let unit = model.unit();
/// unit.set_status(charm_sdk::Status::maintenance(format!("{} installing", unit.name())))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    name: String,
}

impl Unit {
    /// The unit's name, such as `discourse/0`.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let ordinal = model.unit().name().rsplit('/').next();
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The unit's status as the hook sees it.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let ready = matches!(model.unit().status(), charm_sdk::Status::Active(_));
    /// # }
    /// ```
    pub fn status(&self) -> Status {
        backend::with(|b| b.unit_status())
    }

    /// Sets the unit's status.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.unit().set_status(charm_sdk::Status::waiting("waiting for database"))?;
    /// # Ok(()) }
    /// ```
    pub fn set_status(&self, status: Status) -> Result<()> {
        backend::write(|b| b.set_unit_status(status))
    }

    /// Sets the workload version shown in status.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// model.unit().set_workload_version("12.4");
    /// # }
    /// ```
    pub fn set_workload_version(&self, version: &str) {
        backend::write(|b| b.set_workload_version(version))
    }
}

/// An application.
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// if model.is_leader() {
///     model.app().set_status(charm_sdk::Status::active("serving"))?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Application {
    name: String,
}

impl Application {
    /// The application's name.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let host = format!("{}-0.{}-endpoints", model.app().name(), model.app().name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The application's status. Leader only.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if model.is_leader() {
    ///     let status = model.app().status()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn status(&self) -> Result<Status> {
        backend::with(|b| b.app_status())
    }

    /// Sets the application's status. Leader only.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.app().set_status(charm_sdk::Status::blocked("needs a db relation"))?;
    /// # Ok(()) }
    /// ```
    pub fn set_status(&self, status: Status) -> Result<()> {
        backend::write(|b| b.set_app_status(status))
    }
}

/// The leader settings: read by every unit, written by the leader.
///
/// Written through a shared reference, as every bag is (see [`DataBag`](crate::DataBag)).
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// let data = model.leader_data();
/// if data.get("password").is_none() && model.is_leader() {
///     data.set("password", "generated")?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LeaderData {
    _private: (),
}

impl LeaderData {
    /// One setting.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let password: Option<String> = model.leader_data().get("password");
    /// # }
    /// ```
    pub fn get(&self, key: &str) -> Option<String> {
        backend::with(|b| b.leader_get(key))
    }

    /// Every setting, sorted by key.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// let count = model.leader_data().all().len();
    /// # }
    /// ```
    pub fn all(&self) -> Vec<(String, String)> {
        backend::with(|b| b.leader_get_all())
    }

    /// Sets a setting. Leader only.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.leader_data().set("password", "s3cret")?;
    /// # Ok(()) }
    /// ```
    pub fn set(&self, key: &str, value: &str) -> Result<()> {
        backend::write(|b| b.leader_set(key, Some(value)))
    }

    /// Removes a setting. Leader only.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.leader_data().remove("password")?;
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, key: &str) -> Result<()> {
        backend::write(|b| b.leader_set(key, None))
    }
}

/// The unit's persistent state, kept by the host across hooks (ops' `StoredState`).
///
/// Written through a shared reference, as every bag is (see [`DataBag`](crate::DataBag)).
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// let stored = model.stored();
/// let runs: u64 = stored.get("runs")?.unwrap_or(0);
/// stored.set("runs", &(runs + 1))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StoredState {
    _private: (),
}

impl StoredState {
    /// A stored value, deserialised from JSON.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let peers: Vec<String> = model.stored().get("peers")?.unwrap_or_default();
    /// # Ok(()) }
    /// ```
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        backend::with(|b| b.state_get(key))
            .map(|raw| serde_json::from_str(&raw).map_err(Error::from))
            .transpose()
    }

    /// Stores a value as JSON.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.stored().set("peers", &["kv/1", "kv/2"])?;
    /// # Ok(()) }
    /// ```
    pub fn set<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        let json = serde_json::to_string(value)?;
        backend::write(|b| b.state_set(key, Some(&json)));
        Ok(())
    }

    /// Removes a stored value.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// model.stored().remove("peers");
    /// # }
    /// ```
    pub fn remove(&self, key: &str) {
        backend::write(|b| b.state_set(key, None))
    }
}
