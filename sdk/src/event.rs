use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::backend;
use crate::custom::CustomEvent;
use crate::error::{Error, Result};
use crate::wit::juju::charm::types as wit;

/// The relation an event is about.
///
/// ```
/// use charm_sdk::{Event, RelationEvent};
///
/// let joined = RelationEvent::new(3, "cluster", "kv").unit("kv/1");
/// assert_eq!(Event::RelationJoined(joined).hook_name(), "cluster-relation-joined");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationEvent {
    /// The relation's id, unique in the model.
    pub id: u32,
    /// The endpoint's name on this side, such as `db`.
    pub name: String,
    /// The application on the other side.
    pub remote_app: String,
    /// The remote unit the event is about; `None` when the remote application's bag changed.
    pub remote_unit: Option<String>,
}

impl RelationEvent {
    /// An event about relation `id` on endpoint `name`, with `remote_app` on the other side
    /// and no remote unit (a change of the remote application's bag).
    ///
    /// ```
    /// let ev = charm_sdk::RelationEvent::new(1, "db", "postgresql");
    /// assert_eq!(ev.remote_unit, None);
    /// ```
    pub fn new(id: u32, name: impl Into<String>, remote_app: impl Into<String>) -> Self {
        RelationEvent {
            id,
            name: name.into(),
            remote_app: remote_app.into(),
            remote_unit: None,
        }
    }

    /// The same event about this remote unit.
    ///
    /// ```
    /// let ev = charm_sdk::RelationEvent::new(1, "db", "postgresql").unit("postgresql/0");
    /// assert_eq!(ev.remote_unit.as_deref(), Some("postgresql/0"));
    /// ```
    pub fn unit(mut self, remote_unit: impl Into<String>) -> Self {
        self.remote_unit = Some(remote_unit.into());
        self
    }
}

/// An action invocation, and the way to answer it.
///
/// Results, the failure and progress messages go to the operator who ran the action.
///
/// ```
/// use charm_sdk::testing::{Context, State};
/// use charm_sdk::{ActionEvent, ActionParam, Charm, Event, HookResult, Metadata, Model};
///
/// #[derive(serde::Deserialize)]
/// struct Greet { name: String }
///
/// struct Greeter;
/// impl Charm for Greeter {
///     fn metadata() -> Metadata {
///         let name = ActionParam::string("name", "Who to greet").required();
///         Metadata::new("greeter").action_with("greet", "Says hello", [name])
///     }
///     fn handle(_: &Model, event: Event) -> HookResult {
///         if let Event::Action(action) = event {
///             let params: Greet = action.params_as()?;
///             action.log("greeting");
///             action.set_result("greeting", &format!("hello {}", params.name))?;
///         }
///         Ok(())
///     }
/// }
/// let run = ActionEvent::new("greet").param("name", "world");
/// let out = Context::<Greeter>::new().run(Event::Action(run), State::default());
/// let action = out.action.expect("an action ran");
/// assert_eq!(action.results["greeting"], "hello world");
/// assert_eq!(action.log, ["greeting"]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionEvent {
    /// The action's id.
    pub id: String,
    /// The action's name.
    pub name: String,
    /// The parameters given by the operator.
    pub params: serde_json::Map<String, serde_json::Value>,
}

impl ActionEvent {
    /// A run of action `name` with no parameters (id `1`).
    ///
    /// ```
    /// assert_eq!(charm_sdk::ActionEvent::new("backup").name, "backup");
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        ActionEvent {
            id: "1".into(),
            name: name.into(),
            params: serde_json::Map::new(),
        }
    }

    /// The same run with one more parameter.
    ///
    /// ```
    /// let run = charm_sdk::ActionEvent::new("put").param("key", "a").param("ttl", 30);
    /// assert_eq!(run.params["ttl"], 30);
    /// ```
    pub fn param(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }

    /// The parameters as the charm's own type.
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Put { key: String }
    /// let run = charm_sdk::ActionEvent::new("put").param("key", "a");
    /// let put: Put = run.params_as().unwrap();
    /// assert_eq!(put.key, "a");
    /// ```
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(serde_json::Value::Object(self.params.clone())).map_err(|e| {
            Error::InvalidArgument(format!("parameters of action {:?}: {e}", self.name))
        })
    }

    /// Sets one result. Keys are lowercase letters, digits and `-`, starting with a letter.
    ///
    /// ```no_run
    /// # fn f(action: &charm_sdk::ActionEvent) -> charm_sdk::HookResult {
    /// action.set_result("backup-id", "2024-01-01")?;
    /// # Ok(()) }
    /// ```
    pub fn set_result(&self, key: &str, value: &str) -> Result<()> {
        self.set_results([(key, value)])
    }

    /// Sets several results at once.
    ///
    /// ```no_run
    /// # fn f(action: &charm_sdk::ActionEvent) -> charm_sdk::HookResult {
    /// action.set_results([("size", "42"), ("unit", "MiB")])?;
    /// # Ok(()) }
    /// ```
    pub fn set_results<K: AsRef<str>, V: AsRef<str>>(
        &self,
        results: impl IntoIterator<Item = (K, V)>,
    ) -> Result<()> {
        let results: Vec<(String, String)> = results
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .collect();
        backend::with(|b| b.action_set_results(&results))
    }

    /// Marks the action failed. The hook still succeeds and its writes are applied; return
    /// an error from the hook to discard them too.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model, action: &charm_sdk::ActionEvent) {
    /// if !model.is_leader() {
    ///     action.fail("run this action on the leader");
    /// }
    /// # }
    /// ```
    pub fn fail(&self, message: &str) {
        backend::with(|b| b.action_fail(message))
    }

    /// A progress message for the operator.
    ///
    /// ```no_run
    /// # fn f(action: &charm_sdk::ActionEvent) {
    /// action.log("dumping the database");
    /// # }
    /// ```
    pub fn log(&self, message: &str) {
        backend::with(|b| b.action_log(message))
    }
}

/// The hook being run: one variant per Juju hook.
///
/// ```
/// use charm_sdk::{Event, RelationEvent};
///
/// let ev = Event::RelationChanged(RelationEvent {
///     id: 1, name: "db".into(), remote_app: "postgresql".into(),
///     remote_unit: Some("postgresql/0".into()),
/// });
/// assert_eq!(ev.hook_name(), "db-relation-changed");
/// assert_eq!(ev.relation().map(|r| r.id), Some(1));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// The unit was just deployed; the first hook a unit runs.
    Install,
    /// The workload may start; runs after `Install`, `LeaderElected` and `ConfigChanged`.
    Start,
    /// The application's config changed, and once after install.
    ConfigChanged,
    /// The charm was upgraded to a new revision.
    UpgradeCharm,
    /// Periodically, to refresh the workload's status.
    UpdateStatus,
    /// The unit is being stopped before removal.
    Stop,
    /// The unit is being removed; its last hook.
    Remove,
    /// This unit has just become its application's leader; it runs as leader. It runs
    /// once per lease term, and again in the same term if the unit ran any hook as a
    /// non-leader since (its leadership guarantee lapsed during a lease store outage and
    /// came back): a charm reconciles its leader duties here.
    LeaderElected,
    /// The leader changed the leader settings; runs on the other units.
    LeaderSettingsChanged,
    /// A relation was established, before any unit joined it.
    RelationCreated(RelationEvent),
    /// A remote unit joined the relation.
    RelationJoined(RelationEvent),
    /// A remote unit's or the remote application's data changed; also after each join.
    RelationChanged(RelationEvent),
    /// A remote unit left the relation.
    RelationDeparted(RelationEvent),
    /// The relation is being removed; after every remote unit departed.
    RelationBroken(RelationEvent),
    /// An operator ran an action.
    Action(ActionEvent),
    /// A library emitted this event during the hook, with [`Model::emit`](crate::Model::emit);
    /// never sent by the host. See [`CustomEvent`].
    Custom(CustomEvent),
}

impl Event {
    /// Juju's name for the hook, such as `install` or `db-relation-changed`.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Event::LeaderElected.hook_name(), "leader-elected");
    /// ```
    pub fn hook_name(&self) -> String {
        let rel = |r: &RelationEvent, what: &str| format!("{}-relation-{what}", r.name);
        match self {
            Event::Install => "install".into(),
            Event::Start => "start".into(),
            Event::ConfigChanged => "config-changed".into(),
            Event::UpgradeCharm => "upgrade-charm".into(),
            Event::UpdateStatus => "update-status".into(),
            Event::Stop => "stop".into(),
            Event::Remove => "remove".into(),
            Event::LeaderElected => "leader-elected".into(),
            Event::LeaderSettingsChanged => "leader-settings-changed".into(),
            Event::RelationCreated(r) => rel(r, "created"),
            Event::RelationJoined(r) => rel(r, "joined"),
            Event::RelationChanged(r) => rel(r, "changed"),
            Event::RelationDeparted(r) => rel(r, "departed"),
            Event::RelationBroken(r) => rel(r, "broken"),
            Event::Action(a) => format!("{}-action", a.name),
            Event::Custom(c) => format!("{}/{}", c.source, c.name),
        }
    }

    /// The relation this event is about, for relation events.
    ///
    /// ```
    /// assert!(charm_sdk::Event::Start.relation().is_none());
    /// ```
    pub fn relation(&self) -> Option<&RelationEvent> {
        match self {
            Event::RelationCreated(r)
            | Event::RelationJoined(r)
            | Event::RelationChanged(r)
            | Event::RelationDeparted(r)
            | Event::RelationBroken(r) => Some(r),
            _ => None,
        }
    }

    pub(crate) fn from_wit(event: wit::Event) -> Self {
        let rel = |r: wit::RelationEvent| RelationEvent {
            id: r.id,
            name: r.name,
            remote_app: r.remote_app,
            remote_unit: r.remote_unit,
        };
        match event {
            wit::Event::Install => Event::Install,
            wit::Event::Start => Event::Start,
            wit::Event::ConfigChanged => Event::ConfigChanged,
            wit::Event::UpgradeCharm => Event::UpgradeCharm,
            wit::Event::UpdateStatus => Event::UpdateStatus,
            wit::Event::Stop => Event::Stop,
            wit::Event::Remove => Event::Remove,
            wit::Event::LeaderElected => Event::LeaderElected,
            wit::Event::LeaderSettingsChanged => Event::LeaderSettingsChanged,
            wit::Event::RelationCreated(r) => Event::RelationCreated(rel(r)),
            wit::Event::RelationJoined(r) => Event::RelationJoined(rel(r)),
            wit::Event::RelationChanged(r) => Event::RelationChanged(rel(r)),
            wit::Event::RelationDeparted(r) => Event::RelationDeparted(rel(r)),
            wit::Event::RelationBroken(r) => Event::RelationBroken(rel(r)),
            wit::Event::Action(a) => Event::Action(ActionEvent {
                id: a.id,
                name: a.name,
                // The host sends a JSON object; anything else reads as no parameters.
                params: serde_json::from_str(&a.params).unwrap_or_default(),
            }),
        }
    }
}
