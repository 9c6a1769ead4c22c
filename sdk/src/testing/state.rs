use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::__private::DEFERRED_KEY;
use crate::pod::{K8sResources, PodSpec};
use crate::{ConfigValue, Event, RelationEvent, Status};

/// A data bag: a relation's unit or application settings, leader data, stored state.
///
/// ```
/// let bag: charm_sdk::testing::Bag = [("k".to_string(), "v".to_string())].into();
/// assert_eq!(bag["k"], "v");
/// ```
pub type Bag = BTreeMap<String, String>;

fn bag<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Bag {
    pairs
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// What the unit sees of the model before a hook, and what it sees after (Scenario's
/// `State`): leadership, config, relations and their bags, leader data, stored state,
/// statuses, workload version and the application's pod spec.
///
/// Fields are public for asserting; the builder methods make arranging short.
///
/// ```
/// use charm_sdk::testing::{Relation, State};
/// use charm_sdk::Status;
///
/// let state = State::default()
///     .leader(true)
///     .config("port", 8080)
///     .relation(Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]))
///     .stored("installed", &true)
///     .unit_status(Status::active(""));
/// assert!(state.leader);
/// assert_eq!(state.stored_value::<bool>("installed"), Some(true));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct State {
    /// Whether the unit is its application's leader when the hook starts.
    pub leader: bool,
    /// The operator's config settings; declared defaults apply to the rest.
    pub config: BTreeMap<String, ConfigValue>,
    /// The relations the unit is in.
    pub relations: Vec<Relation>,
    /// The leader settings.
    pub leader_data: Bag,
    /// The unit's stored state, each value as JSON text (as the host keeps it).
    pub stored: Bag,
    /// The unit's status.
    pub unit_status: Status,
    /// The application's status.
    pub app_status: Status,
    /// The workload version.
    pub workload_version: Option<String>,
    /// The application's pod spec.
    pub pod_spec: Option<PodSpecState>,
}

impl State {
    /// The same state with this leadership.
    ///
    /// ```
    /// assert!(charm_sdk::testing::State::default().leader(true).leader);
    /// ```
    pub fn leader(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    /// The same state with the operator's setting of one option.
    ///
    /// ```
    /// use charm_sdk::ConfigValue;
    /// let state = charm_sdk::testing::State::default().config("image", "nginx");
    /// assert_eq!(state.config["image"], ConfigValue::String("nginx".into()));
    /// ```
    pub fn config(mut self, name: &str, value: impl Into<ConfigValue>) -> Self {
        self.config.insert(name.to_string(), value.into());
        self
    }

    /// The same state with one more relation.
    ///
    /// ```
    /// use charm_sdk::testing::{Relation, State};
    /// let state = State::default().relation(Relation::peer(2, "cluster"));
    /// assert_eq!(state.relations.len(), 1);
    /// ```
    pub fn relation(mut self, relation: Relation) -> Self {
        self.relations.push(relation);
        self
    }

    /// The same state with these leader settings added.
    ///
    /// ```
    /// let state = charm_sdk::testing::State::default().leader_data([("password", "s3cret")]);
    /// assert_eq!(state.leader_data["password"], "s3cret");
    /// ```
    pub fn leader_data<K: Into<String>, V: Into<String>>(
        mut self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.leader_data.extend(bag(pairs));
        self
    }

    /// The same state with one stored value, serialised as the SDK stores it.
    ///
    /// ```
    /// let state = charm_sdk::testing::State::default().stored("runs", &3u32);
    /// assert_eq!(state.stored["runs"], "3");
    /// ```
    pub fn stored<T: Serialize + ?Sized>(mut self, key: &str, value: &T) -> Self {
        let json = serde_json::to_string(value).expect("a test's stored value serialises");
        self.stored.insert(key.to_string(), json);
        self
    }

    /// The same state with this unit status.
    ///
    /// ```
    /// use charm_sdk::Status;
    /// let state = charm_sdk::testing::State::default().unit_status(Status::blocked("no db"));
    /// assert_eq!(state.unit_status.kind_name(), "blocked");
    /// ```
    pub fn unit_status(mut self, status: Status) -> Self {
        self.unit_status = status;
        self
    }

    /// The same state with this application status.
    ///
    /// ```
    /// use charm_sdk::Status;
    /// let state = charm_sdk::testing::State::default().app_status(Status::active("serving"));
    /// assert_eq!(state.app_status.message(), "serving");
    /// ```
    pub fn app_status(mut self, status: Status) -> Self {
        self.app_status = status;
        self
    }

    /// The same state with `event` deferred by an earlier hook: it runs again first.
    ///
    /// ```
    /// use charm_sdk::Event;
    /// let state = charm_sdk::testing::State::default().defer(Event::ConfigChanged);
    /// assert_eq!(state.deferred(), vec![Event::ConfigChanged]);
    /// ```
    pub fn defer(mut self, event: Event) -> Self {
        let mut deferred = self.deferred();
        deferred.push(event);
        let json = serde_json::to_string(&deferred).expect("events serialise");
        self.stored.insert(DEFERRED_KEY.to_string(), json);
        self
    }

    /// The events deferred and not yet handled, oldest first.
    ///
    /// ```
    /// assert!(charm_sdk::testing::State::default().deferred().is_empty());
    /// ```
    pub fn deferred(&self) -> Vec<Event> {
        self.stored
            .get(DEFERRED_KEY)
            .map(|json| serde_json::from_str(json).expect("the SDK wrote the deferred events"))
            .unwrap_or_default()
    }

    /// One stored value, deserialised; `None` when absent or of another type.
    ///
    /// ```
    /// let state = charm_sdk::testing::State::default().stored("peers", &["kv/1"]);
    /// assert_eq!(state.stored_value::<Vec<String>>("peers"), Some(vec!["kv/1".to_string()]));
    /// ```
    pub fn stored_value<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.stored
            .get(key)
            .and_then(|json| serde_json::from_str(json).ok())
    }

    /// The relation with this id.
    ///
    /// ```
    /// use charm_sdk::testing::{Relation, State};
    /// let state = State::default().relation(Relation::new(4, "db", "postgresql"));
    /// assert_eq!(state.relation_by_id(4).unwrap().endpoint, "db");
    /// ```
    pub fn relation_by_id(&self, id: u32) -> Option<&Relation> {
        self.relations.iter().find(|r| r.id == id)
    }

    pub(crate) fn relation_mut(&mut self, id: u32) -> Option<&mut Relation> {
        self.relations.iter_mut().find(|r| r.id == id)
    }
}

/// A relation as the unit sees it, with every bag it can see.
///
/// ```
/// use charm_sdk::testing::Relation;
///
/// let db = Relation::new(1, "db", "postgresql")
///     .remote_unit("postgresql/0", [("address", "10.0.0.5")])
///     .remote_app_data([("master", "host=10.0.0.5")]);
/// assert_eq!(db.remote_units["postgresql/0"]["address"], "10.0.0.5");
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Relation {
    /// The relation's id, unique in the model.
    pub id: u32,
    /// The endpoint's name on this side.
    pub endpoint: String,
    /// The application on the other side; for a peer relation, this application.
    pub remote_app: String,
    /// Whether this is a peer relation (the application's units with each other).
    pub peer: bool,
    /// The remote units that have joined, with their bags (for peers: the other units).
    pub remote_units: BTreeMap<String, Bag>,
    /// The remote application's bag (unused for peers: the application bag is shared).
    pub remote_app_data: Bag,
    /// This unit's bag.
    pub local_unit_data: Bag,
    /// This application's bag.
    pub local_app_data: Bag,
}

impl Relation {
    /// A relation on `endpoint` to `remote_app`, with no units joined and empty bags.
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// assert!(!r.peer && r.remote_units.is_empty());
    /// ```
    pub fn new(id: u32, endpoint: &str, remote_app: &str) -> Self {
        Relation {
            id,
            endpoint: endpoint.to_string(),
            remote_app: remote_app.to_string(),
            ..Default::default()
        }
    }

    /// The peer relation on `endpoint`. Its other units are added with
    /// [`remote_unit`](Self::remote_unit); its application bag is
    /// [`local_app_data`](Self::local_app_data).
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::peer(2, "cluster").remote_unit("kv/1", [("address", "10.0.0.2")]);
    /// assert!(r.peer);
    /// ```
    pub fn peer(id: u32, endpoint: &str) -> Self {
        Relation {
            id,
            endpoint: endpoint.to_string(),
            peer: true,
            ..Default::default()
        }
    }

    /// The same relation with one more remote unit joined, with this bag.
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::new(1, "db", "pg").remote_unit("pg/0", [("k", "v")]);
    /// assert_eq!(r.remote_units.len(), 1);
    /// ```
    pub fn remote_unit<K: Into<String>, V: Into<String>>(
        mut self,
        unit: &str,
        data: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.remote_units.insert(unit.to_string(), bag(data));
        self
    }

    /// The same relation with these entries in the remote application's bag.
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::new(1, "db", "pg").remote_app_data([("master", "x")]);
    /// assert_eq!(r.remote_app_data["master"], "x");
    /// ```
    pub fn remote_app_data<K: Into<String>, V: Into<String>>(
        mut self,
        data: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.remote_app_data.extend(bag(data));
        self
    }

    /// The same relation with these entries in this unit's bag.
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::new(1, "db", "pg").local_unit_data([("database", "d")]);
    /// assert_eq!(r.local_unit_data["database"], "d");
    /// ```
    pub fn local_unit_data<K: Into<String>, V: Into<String>>(
        mut self,
        data: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.local_unit_data.extend(bag(data));
        self
    }

    /// The same relation with these entries in this application's bag.
    ///
    /// ```
    /// let r = charm_sdk::testing::Relation::peer(2, "cluster").local_app_data([("members", "kv/0")]);
    /// assert_eq!(r.local_app_data["members"], "kv/0");
    /// ```
    pub fn local_app_data<K: Into<String>, V: Into<String>>(
        mut self,
        data: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.local_app_data.extend(bag(data));
        self
    }
}

impl Relation {
    /// The relation's side of an event about it, as Juju would send it to this unit.
    fn event(&self, remote_unit: Option<&str>) -> RelationEvent {
        RelationEvent {
            id: self.id,
            name: self.endpoint.clone(),
            // Empty for peers: `Context` fills in the application, as the host names it.
            remote_app: self.remote_app.clone(),
            remote_unit: remote_unit.map(str::to_string),
        }
    }

    /// `<endpoint>-relation-created` for this relation (Scenario's `ctx.on.relation_created`).
    ///
    /// ```
    /// let db = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// assert_eq!(db.created().hook_name(), "db-relation-created");
    /// ```
    pub fn created(&self) -> Event {
        Event::RelationCreated(self.event(None))
    }

    /// `<endpoint>-relation-joined` for `remote_unit` of this relation.
    ///
    /// ```
    /// let db = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// let joined = db.joined("postgresql/0");
    /// assert_eq!(joined.relation().unwrap().remote_unit.as_deref(), Some("postgresql/0"));
    /// ```
    pub fn joined(&self, remote_unit: &str) -> Event {
        Event::RelationJoined(self.event(Some(remote_unit)))
    }

    /// `<endpoint>-relation-changed` for `remote_unit`'s bag, or for the remote
    /// application's bag with `None`.
    ///
    /// ```
    /// let db = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// assert_eq!(db.changed(None).hook_name(), "db-relation-changed");
    /// ```
    pub fn changed(&self, remote_unit: Option<&str>) -> Event {
        Event::RelationChanged(self.event(remote_unit))
    }

    /// `<endpoint>-relation-departed` for `remote_unit`. Arrange the state without it.
    ///
    /// ```
    /// let db = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// assert_eq!(db.departed("postgresql/1").hook_name(), "db-relation-departed");
    /// ```
    pub fn departed(&self, remote_unit: &str) -> Event {
        Event::RelationDeparted(self.event(Some(remote_unit)))
    }

    /// `<endpoint>-relation-broken` for this relation.
    ///
    /// ```
    /// let db = charm_sdk::testing::Relation::new(1, "db", "postgresql");
    /// assert_eq!(db.broken().hook_name(), "db-relation-broken");
    /// ```
    pub fn broken(&self) -> Event {
        Event::RelationBroken(self.event(None))
    }
}

/// The application's pod spec as the host keeps it: normalised to JSON, with a revision
/// that grows only when the spec changes.
///
/// ```
/// use charm_sdk::pod::{Container, PodSpec};
/// use charm_sdk::testing::PodSpecState;
///
/// let spec = PodSpec::new().container(Container::new("web", "nginx"));
/// let kept = PodSpecState::new(&spec);
/// assert_eq!(kept.revision, 1);
/// assert_eq!(kept.typed().unwrap(), spec);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PodSpecState {
    /// Starts at 1; grows only when the spec or the resources change.
    pub revision: u64,
    /// The spec.
    pub spec: serde_json::Value,
    /// The Kubernetes resources.
    pub k8s_resources: Option<serde_json::Value>,
}

impl PodSpecState {
    /// Revision 1 of this spec, with no Kubernetes resources.
    ///
    /// ```
    /// let kept = charm_sdk::testing::PodSpecState::new(&charm_sdk::pod::PodSpec::new());
    /// assert!(kept.k8s_resources.is_none());
    /// ```
    pub fn new(spec: &PodSpec) -> Self {
        PodSpecState {
            revision: 1,
            spec: serde_json::to_value(spec).expect("a pod spec serialises"),
            k8s_resources: None,
        }
    }

    /// The spec as the SDK's type.
    ///
    /// ```
    /// # use charm_sdk::pod::{Container, PodSpec};
    /// let kept = charm_sdk::testing::PodSpecState::new(&PodSpec::new().container(Container::new("a", "b")));
    /// assert_eq!(kept.typed().unwrap().containers[0].name, "a");
    /// ```
    pub fn typed(&self) -> Result<PodSpec, serde_json::Error> {
        serde_json::from_value(self.spec.clone())
    }

    /// The Kubernetes resources as the SDK's type, if any were set.
    ///
    /// ```
    /// let kept = charm_sdk::testing::PodSpecState::new(&charm_sdk::pod::PodSpec::new());
    /// assert!(kept.resources().is_none());
    /// ```
    pub fn resources(&self) -> Option<Result<K8sResources, serde_json::Error>> {
        self.k8s_resources.as_ref().map(|doc| {
            let inner = doc
                .get("kubernetesResources")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({}));
            serde_json::from_value(inner)
        })
    }
}
