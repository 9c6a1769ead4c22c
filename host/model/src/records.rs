//! The model's vocabulary: applications, units, relations, statuses, charm metadata, the
//! buffered writes of one hook, and what a hook sees of the model.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// A data bag: a relation's unit or application settings, leader data, stored state.
pub type Bag = BTreeMap<String, String>;

/// A bag as a snapshot holds it: shared with the store that read it (the memory store hands
/// out its own, so taking a snapshot copies no bag), never written through.
pub type SharedBag = Arc<Bag>;

/// An application's effective config, shared as [`SharedBag`] is.
pub type SharedConfig = Arc<BTreeMap<String, ConfigValue>>;

/// A relation's id, unique in the model.
pub type RelationId = u32;

/// The application part of a unit name: `discourse` for `discourse/0`.
pub fn app_of(unit: &str) -> &str {
    // A byte search: `split_once('/')` runs the general pattern searcher, about 100
    // instructions for a unit's name, and every hook asks five times.
    match unit.bytes().position(|b| b == b'/') {
        Some(slash) => &unit[..slash],
        None => unit,
    }
}

/// The kind of a workload status, as in Juju.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StatusKind {
    /// Nothing reported yet.
    #[default]
    Unknown,
    /// Ready.
    Active,
    /// Busy with work the operator need not act on.
    Maintenance,
    /// Waiting for something outside the operator's hands.
    Waiting,
    /// Needs the operator.
    Blocked,
    /// A hook failed.
    Error,
}

impl StatusKind {
    /// Juju's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::Unknown => "unknown",
            StatusKind::Active => "active",
            StatusKind::Maintenance => "maintenance",
            StatusKind::Waiting => "waiting",
            StatusKind::Blocked => "blocked",
            StatusKind::Error => "error",
        }
    }
}

/// A workload status and its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Status {
    /// Its kind.
    pub kind: StatusKind,
    /// Its message.
    pub message: String,
}

impl Status {
    /// A status of this kind with this message.
    pub fn new(kind: StatusKind, message: impl Into<String>) -> Self {
        Status {
            kind,
            message: message.into(),
        }
    }
}

/// The role of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelationRole {
    /// Provides the interface.
    Provides,
    /// Requires the interface.
    Requires,
    /// Peers of one application.
    Peers,
}

/// An endpoint a charm declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointMeta {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: RelationRole,
    /// The interface spoken on it.
    pub interface: String,
    /// The most relations it accepts.
    pub limit: Option<u32>,
}

/// The declared type of a config option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptionType {
    /// Text.
    String,
    /// 64-bit integer.
    Int,
    /// 64-bit float.
    Float,
    /// True or false.
    Boolean,
}

impl OptionType {
    /// Juju's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OptionType::String => "string",
            OptionType::Int => "int",
            OptionType::Float => "float",
            OptionType::Boolean => "boolean",
        }
    }
}

/// A config value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// A boolean.
    Boolean(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text.
    String(String),
}

impl ConfigValue {
    /// The value's type.
    pub fn kind(&self) -> OptionType {
        match self {
            ConfigValue::Boolean(_) => OptionType::Boolean,
            ConfigValue::Int(_) => OptionType::Int,
            ConfigValue::Float(_) => OptionType::Float,
            ConfigValue::String(_) => OptionType::String,
        }
    }

    /// An operator's text (`juju config app key=value`) as a value of `kind`; `None` if it
    /// does not read as one.
    ///
    /// ```
    /// use charm_model::{ConfigValue, OptionType};
    ///
    /// assert_eq!(ConfigValue::parse_as("8080", OptionType::Int), Some(ConfigValue::Int(8080)));
    /// assert_eq!(ConfigValue::parse_as("true", OptionType::Boolean), Some(ConfigValue::Boolean(true)));
    /// assert_eq!(ConfigValue::parse_as("80", OptionType::String), Some(ConfigValue::String("80".into())));
    /// assert_eq!(ConfigValue::parse_as("eighty", OptionType::Int), None);
    /// ```
    pub fn parse_as(text: &str, kind: OptionType) -> Option<ConfigValue> {
        match kind {
            OptionType::String => Some(ConfigValue::String(text.to_string())),
            OptionType::Int => text.trim().parse().ok().map(ConfigValue::Int),
            OptionType::Float => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(ConfigValue::Float),
            OptionType::Boolean => match text.trim() {
                "true" => Some(ConfigValue::Boolean(true)),
                "false" => Some(ConfigValue::Boolean(false)),
                _ => None,
            },
        }
    }

    /// The value converted to `kind` where Juju would accept it (an int for a float option);
    /// `None` when it is of another type.
    pub fn coerce(self, kind: OptionType) -> Option<ConfigValue> {
        match (self, kind) {
            (v, k) if v.kind() == k => Some(v),
            (ConfigValue::Int(i), OptionType::Float) => Some(ConfigValue::Float(i as f64)),
            _ => None,
        }
    }
}

/// A config option a charm declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigOptionMeta {
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: OptionType,
    /// Its default.
    pub default: Option<ConfigValue>,
    /// What it does.
    pub description: String,
}

/// An action a charm declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionMeta {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its parameters (none for a charm built before parameters were declared).
    #[serde(default)]
    pub params: Vec<ActionParamMeta>,
}

/// A parameter an action declares: typed, and either required or with a default (a
/// parameter that is neither may be left out, and the action then does without it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionParamMeta {
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: OptionType,
    /// What it is for.
    pub description: String,
    /// Its value when the operator gives none.
    pub default: Option<ConfigValue>,
    /// Whether the operator must give it (only meaningful without a default).
    pub required: bool,
}

/// What a charm declares, as read from its component.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CharmMetadata {
    /// The charm's name.
    pub name: String,
    /// One line saying what it runs.
    pub summary: String,
    /// Its endpoints.
    pub relations: Vec<EndpointMeta>,
    /// Its config options.
    pub config: Vec<ConfigOptionMeta>,
    /// Its actions.
    pub actions: Vec<ActionMeta>,
}

impl CharmMetadata {
    /// The endpoint with this name.
    pub fn endpoint(&self, name: &str) -> Option<&EndpointMeta> {
        self.relations.iter().find(|e| e.name == name)
    }

    /// The config option with this name.
    pub fn option(&self, name: &str) -> Option<&ConfigOptionMeta> {
        self.config.iter().find(|o| o.name == name)
    }
}

/// One side of a relation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationEndpoint {
    /// The application.
    pub app: String,
    /// Its endpoint's name.
    pub endpoint: String,
}

/// A relation between two endpoints, or a peer relation of one application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationRecord {
    /// Its id.
    pub id: RelationId,
    /// Its interface.
    pub interface: String,
    /// Its sides: two, or one for a peer relation.
    pub endpoints: Vec<RelationEndpoint>,
    /// Being removed: its units run relation-departed and relation-broken, and it goes
    /// with its bags after the last relation-broken.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dying: bool,
}

impl RelationRecord {
    /// This application's side.
    pub fn local(&self, app: &str) -> Option<&RelationEndpoint> {
        self.endpoints.iter().find(|e| e.app == app)
    }

    /// Whether it is a peer relation (one application's units among themselves).
    pub fn is_peer(&self) -> bool {
        self.endpoints.len() == 1
    }

    /// Its sides as `app:endpoint`, joined by a space, as an operator names it.
    pub fn describe(&self) -> String {
        self.endpoints
            .iter()
            .map(|e| format!("{}:{}", e.app, e.endpoint))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The other side as seen from `app` (`app` itself for a peer relation).
    pub fn remote(&self, app: &str) -> Option<&RelationEndpoint> {
        match self.endpoints.as_slice() {
            [only] if only.app == app => Some(only),
            [a, b] if a.app == app => Some(b),
            [a, b] if b.app == app => Some(a),
            _ => None,
        }
    }
}

/// An application as deployed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplicationRecord {
    /// Its name.
    pub name: String,
    /// Where its charm came from.
    pub charm: String,
    /// The charm's metadata.
    pub metadata: CharmMetadata,
    /// The operator's config settings (defaults are not copied here).
    pub config: BTreeMap<String, ConfigValue>,
    /// The SHA-256 (lowercase hex) of its charm's module, whose bytes the store keeps
    /// ([`crate::tx::ModelTx::module_stored`]) so that every host runs the same ones;
    /// `None` for an application whose hosts load its module from `charm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
}

impl ApplicationRecord {
    /// The config a hook sees: the charm's declared defaults, under the operator's settings
    /// ([`effective_config`]).
    pub fn effective_config(&self) -> BTreeMap<String, ConfigValue> {
        effective_config(&self.metadata.config, &self.config)
    }
}

/// The config a hook sees: the declared defaults, under the operator's settings, each
/// setting converted to its option's declared type where Juju would accept it (an int for
/// a float option).
///
/// ```
/// use std::collections::BTreeMap;
/// use charm_model::{effective_config, ConfigOptionMeta, ConfigValue, OptionType};
///
/// let option = |name: &str, kind, default| ConfigOptionMeta {
///     name: name.into(), kind, default, description: String::new(),
/// };
/// let options = [
///     option("port", OptionType::Int, Some(ConfigValue::Int(80))),
///     option("ratio", OptionType::Float, None),
///     option("name", OptionType::String, None),
/// ];
/// let settings = BTreeMap::from([("ratio".to_string(), ConfigValue::Int(2))]);
/// let config = effective_config(&options, &settings);
/// assert_eq!(config["port"], ConfigValue::Int(80), "a default");
/// assert_eq!(config["ratio"], ConfigValue::Float(2.0), "a setting, as its declared type");
/// assert!(!config.contains_key("name"), "no default, no setting");
/// ```
pub fn effective_config(
    options: &[ConfigOptionMeta],
    settings: &BTreeMap<String, ConfigValue>,
) -> BTreeMap<String, ConfigValue> {
    let mut config: BTreeMap<String, ConfigValue> = options
        .iter()
        .filter_map(|o| Some((o.name.clone(), o.default.clone()?)))
        .collect();
    for (name, value) in settings {
        let declared = options.iter().find(|o| &o.name == name);
        let value = match declared {
            Some(o) => value
                .clone()
                .coerce(o.kind)
                .unwrap_or_else(|| value.clone()),
            None => value.clone(),
        };
        config.insert(name.clone(), value);
    }
    config
}

/// A stored pod spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodSpecRecord {
    /// Starts at 1; grows only when the spec changes.
    pub revision: u64,
    /// The spec, normalised to JSON.
    pub spec: serde_json::Value,
    /// The Kubernetes resources, normalised to JSON.
    pub k8s_resources: Option<serde_json::Value>,
}

/// A validated pod spec write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodSpecWrite {
    /// The spec, normalised to JSON.
    pub spec: serde_json::Value,
    /// The Kubernetes resources, normalised to JSON.
    pub k8s_resources: Option<serde_json::Value>,
    /// Its size as JSON, counted once: a charm that sets the same spec every hook hands
    /// every commit the same shared write, and each commit checks its size.
    #[serde(skip)]
    encoded_len: EncodedLen,
}

impl PodSpecWrite {
    /// A write of `spec` and `k8s_resources`, both normalised to JSON.
    ///
    /// ```
    /// use charm_model::PodSpecWrite;
    /// use serde_json::json;
    ///
    /// let write = PodSpecWrite::new(json!({"version": 3}), None);
    /// assert_eq!(write.encoded_len(), r#"{"version":3}"#.len());
    /// ```
    pub fn new(spec: serde_json::Value, k8s_resources: Option<serde_json::Value>) -> Self {
        PodSpecWrite {
            spec,
            k8s_resources,
            encoded_len: EncodedLen::default(),
        }
    }

    /// The spec's and resources' size as JSON, as the stores keep them.
    pub fn encoded_len(&self) -> usize {
        *self
            .encoded_len
            .0
            .get_or_init(|| json_len(&self.spec) + self.k8s_resources.as_ref().map_or(0, json_len))
    }
}

/// A size counted once. Not part of the value it belongs to: any two are equal.
#[derive(Debug, Clone, Default)]
struct EncodedLen(std::sync::OnceLock<usize>);

impl PartialEq for EncodedLen {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// `value`'s size as JSON, counted as it is written rather than kept.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

/// Writes to one bag: `None` removes the key.
pub type BagWrites = BTreeMap<String, Option<String>>;

/// Everything one hook wrote, buffered until it ends and committed together (or not at all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Changes {
    /// Writes to this unit's bag, by relation.
    pub unit_bags: BTreeMap<RelationId, BagWrites>,
    /// Writes to this application's bag, by relation. Leader only.
    pub app_bags: BTreeMap<RelationId, BagWrites>,
    /// Writes to the leader settings. Leader only.
    pub leader_data: BagWrites,
    /// A new pod spec. Leader only. Shared with the validation that accepted it, which a
    /// charm setting the same spec every hook gets back without copying.
    pub pod_spec: Option<Arc<PodSpecWrite>>,
    /// A new unit status.
    pub unit_status: Option<Status>,
    /// A new application status. Leader only.
    pub app_status: Option<Status>,
    /// A new workload version.
    pub workload_version: Option<String>,
    /// Writes to the unit's stored state.
    pub stored: BagWrites,
    /// Set by the host on a leader-elected hook: the term it was elected for, recorded so a
    /// restarted host does not run leader-elected twice for one term. A commit without a
    /// fence (a hook run as a follower) clears the record: should the unit lead again,
    /// even in that term, leader-elected is owed.
    pub elected_term: Option<u64>,
    /// What an action hook reported for its operator, kept in the action's record by the
    /// hook's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionOutput>,
}

/// What an action reported: its results, whether it failed, and its progress messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionOutput {
    /// The results, by key.
    pub results: BTreeMap<String, String>,
    /// The failure message, if the action failed.
    pub failure: Option<String>,
    /// The progress messages, in order.
    pub log: Vec<String>,
    /// When the action's hook ended, in milliseconds since the UNIX epoch (the host's
    /// clock, set by the host as it commits the hook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
}

/// Where an action is in its life, as Juju names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    /// Queued on its unit, not yet started.
    Pending,
    /// Its hook is running.
    Running,
    /// Its hook ended and the action did not fail.
    Completed,
    /// The action failed: the charm said so, or its hook failed.
    Failed,
}

impl ActionState {
    /// Juju's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Running => "running",
            ActionState::Completed => "completed",
            ActionState::Failed => "failed",
        }
    }

    /// Whether the action has ended (completed or failed).
    pub fn is_final(self) -> bool {
        matches!(self, ActionState::Completed | ActionState::Failed)
    }
}

/// An action an operator started on a unit, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// Its id, unique in the model and never reused.
    pub id: u64,
    /// The unit it runs on.
    pub unit: String,
    /// The action's name.
    pub name: String,
    /// Its parameters, typed as the action declares them, defaults filled in.
    pub params: BTreeMap<String, ConfigValue>,
    /// Where it is.
    pub state: ActionState,
    /// What it reported, by key.
    pub results: BTreeMap<String, String>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// Its progress messages, in order.
    pub log: Vec<String>,
    /// When it was queued, in milliseconds since the UNIX epoch.
    pub enqueued_ms: u64,
    /// When its hook started.
    pub started_ms: Option<u64>,
    /// When its hook ended.
    pub completed_ms: Option<u64>,
}

impl Changes {
    /// Whether any write needs the leadership fence.
    pub fn needs_fence(&self) -> bool {
        !self.app_bags.is_empty()
            || !self.leader_data.is_empty()
            || self.pod_spec.is_some()
            || self.app_status.is_some()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// Applies `writes` to `bag`; whether anything changed.
pub fn apply_writes(bag: &mut Bag, writes: &BagWrites) -> bool {
    let mut changed = false;
    for (k, v) in writes {
        changed |= match v {
            Some(v) => bag.insert(k.clone(), v.clone()).as_ref() != Some(v),
            None => bag.remove(k).is_some(),
        };
    }
    changed
}

/// A list of unit names, shared: a 10,000-unit application's list is made once and held by
/// every snapshot that shows it, not copied into each, and two snapshots holding the same
/// list compare equal without comparing the names.
#[derive(Debug, Clone, Default, Eq)]
pub struct UnitNames(Arc<Names>);

#[derive(Debug, Default)]
struct Names {
    list: Box<[String]>,
    /// The names as one string, made the first time a hook asks for them so (contract
    /// 0.2.2's `relation-get-packed`), then shared like the list.
    packed: OnceLock<String>,
    /// The positions of the names in byte order, made the first time a long list is
    /// searched, then shared like the list: a hook reading bags of a 10,000-unit relation
    /// checks each unit in a few comparisons, not 10,000.
    by_name: OnceLock<Box<[u32]>>,
}

impl Eq for Names {}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl UnitNames {
    /// The names, each followed by a newline: how `relation-get-packed` hands them to a
    /// charm. Made once per list.
    ///
    /// ```
    /// let names: charm_model::records::UnitNames = vec!["db/0".to_string(), "db/1".to_string()].into();
    /// assert_eq!(names.packed(), "db/0\ndb/1\n");
    /// ```
    pub fn packed(&self) -> &str {
        self.0.packed.get_or_init(|| {
            let mut packed = String::with_capacity(self.0.list.iter().map(|n| n.len() + 1).sum());
            for name in &self.0.list {
                packed.push_str(name);
                packed.push('\n');
            }
            packed
        })
    }
}

impl UnitNames {
    /// Whether `unit` is one of the names.
    ///
    /// ```
    /// let names: charm_model::records::UnitNames = vec!["db/10".to_string(), "db/2".to_string()].into();
    /// assert!(names.contains("db/2"));
    /// assert!(!names.contains("db/1"));
    /// ```
    pub fn contains(&self, unit: &str) -> bool {
        let list = &self.0.list;
        // A short list is read through faster than an index is made.
        if list.len() < 32 {
            return list.iter().any(|n| n == unit);
        }
        let by_name = self.0.by_name.get_or_init(|| {
            let mut order: Vec<u32> =
                (0..u32::try_from(list.len()).expect("fewer than 4G units")).collect();
            order.sort_unstable_by(|&a, &b| list[a as usize].cmp(&list[b as usize]));
            order.into()
        });
        by_name
            .binary_search_by(|&i| list[i as usize].as_str().cmp(unit))
            .is_ok()
    }
}

impl PartialEq for UnitNames {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl std::ops::Deref for UnitNames {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0.list
    }
}

impl From<Vec<String>> for UnitNames {
    fn from(names: Vec<String>) -> Self {
        Self(Arc::new(Names {
            list: names.into(),
            packed: OnceLock::new(),
            by_name: OnceLock::new(),
        }))
    }
}

impl FromIterator<String> for UnitNames {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        names.into_iter().collect::<Vec<_>>().into()
    }
}

/// A relation as one unit sees it in a hook.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RelationView {
    /// The relation's id.
    pub id: RelationId,
    /// The local endpoint's name.
    pub endpoint: String,
    /// The other application (this one for peers).
    pub remote_app: String,
    /// The other side's units in the relation, sorted (for peers: the other units).
    pub remote_units: UnitNames,
    /// Unit bags of this unit and the remote units.
    pub unit_bags: BTreeMap<String, SharedBag>,
    /// Application bags of both sides.
    pub app_bags: BTreeMap<String, SharedBag>,
}

/// Everything a hook may read, taken when it starts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitSnapshot {
    /// The model's name.
    pub model: String,
    /// The unit.
    pub unit: String,
    /// Its application.
    pub app: String,
    /// The application's effective config: settings over declared defaults.
    pub config: SharedConfig,
    /// The relations the unit is in, by id.
    pub relations: BTreeMap<RelationId, RelationView>,
    /// The leader settings.
    pub leader_data: SharedBag,
    /// The unit's workload status.
    pub unit_status: Status,
    /// The application's status.
    pub app_status: Status,
    /// The unit's stored state.
    pub stored: SharedBag,
    /// The last term for which the unit ran leader-elected, unless it has run a hook as a
    /// follower since (host bookkeeping; hooks do not see it).
    pub elected_term: Option<u64>,
    /// The hash of the module the application runs ([`ApplicationRecord::module`]): a host
    /// whose loaded module differs loads this one before the hook runs (host bookkeeping;
    /// hooks do not see it).
    pub module: Option<String>,
}

/// The relation a relation hook is about, as the receiving unit sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelationHook {
    /// The relation's id.
    pub id: RelationId,
    /// The receiving unit's endpoint.
    pub endpoint: String,
    /// The application on the other side.
    pub remote_app: String,
    /// The remote unit it is about; `None` for a change of the remote application's bag.
    pub remote_unit: Option<String>,
}

/// A hook to run on a unit: Juju's hook set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "hook")]
pub enum Hook {
    /// The unit was deployed.
    Install,
    /// The workload may start.
    Start,
    /// The config changed (and once after install).
    ConfigChanged,
    /// The charm was upgraded.
    UpgradeCharm,
    /// Periodic status refresh.
    UpdateStatus,
    /// The unit is stopping.
    Stop,
    /// The unit is being removed.
    Remove,
    /// The unit became leader.
    LeaderElected,
    /// The leader changed the leader settings.
    LeaderSettingsChanged,
    /// A relation was created.
    RelationCreated(RelationHook),
    /// A remote unit joined.
    RelationJoined(RelationHook),
    /// Remote data changed.
    RelationChanged(RelationHook),
    /// A remote unit left.
    RelationDeparted(RelationHook),
    /// The relation is going away.
    RelationBroken(RelationHook),
    /// An action.
    Action {
        /// The action's id.
        id: String,
        /// Its name.
        name: String,
        /// Its parameters, a JSON object.
        params: String,
    },
}

impl Hook {
    /// The relation a relation hook is about.
    pub fn relation(&self) -> Option<&RelationHook> {
        match self {
            Hook::RelationCreated(r)
            | Hook::RelationJoined(r)
            | Hook::RelationChanged(r)
            | Hook::RelationDeparted(r)
            | Hook::RelationBroken(r) => Some(r),
            _ => None,
        }
    }

    /// Juju's name for the hook, such as `db-relation-changed`.
    pub fn name(&self) -> String {
        let rel = |r: &RelationHook, what: &str| format!("{}-relation-{what}", r.endpoint);
        match self {
            Hook::Install => "install".into(),
            Hook::Start => "start".into(),
            Hook::ConfigChanged => "config-changed".into(),
            Hook::UpgradeCharm => "upgrade-charm".into(),
            Hook::UpdateStatus => "update-status".into(),
            Hook::Stop => "stop".into(),
            Hook::Remove => "remove".into(),
            Hook::LeaderElected => "leader-elected".into(),
            Hook::LeaderSettingsChanged => "leader-settings-changed".into(),
            Hook::RelationCreated(r) => rel(r, "created"),
            Hook::RelationJoined(r) => rel(r, "joined"),
            Hook::RelationChanged(r) => rel(r, "changed"),
            Hook::RelationDeparted(r) => rel(r, "departed"),
            Hook::RelationBroken(r) => rel(r, "broken"),
            Hook::Action { name, .. } => format!("{name}-action"),
        }
    }
}

/// A unit's own record: what its hooks set of it, and the host's bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// Its workload status, as its charm set it.
    pub status: Status,
    /// Its workload version.
    pub workload_version: String,
    /// The error of its failing hook, if one is failing.
    pub hook_error: Option<String>,
    /// Its stored state.
    pub stored: SharedBag,
    /// The last term for which it ran leader-elected ([`UnitSnapshot::elected_term`]).
    pub elected_term: Option<u64>,
}

/// Who holds an application's unexpired lease, as a store reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holding agent ([`agent_holder`]), or a bare unit name.
    pub holder: String,
    /// The lease's term.
    pub term: u64,
}

impl LeaseHolder {
    /// The unit whose agent holds it ([`holder_unit`]).
    pub fn unit(&self) -> &str {
        holder_unit(&self.holder)
    }
}

/// The lease holder naming one agent of `unit`: `unit#agent`. Two agents of one unit (a
/// restart, or a second host selecting the same unit) hold leases as different holders,
/// so they never share a term.
///
/// ```
/// use charm_model::{agent_holder, holder_unit};
///
/// let holder = agent_holder("db/0", "host-a:41.9f3c");
/// assert_eq!(holder, "db/0#host-a:41.9f3c");
/// assert_eq!(holder_unit(&holder), "db/0");
/// assert_eq!(holder_unit("db/0"), "db/0", "a bare unit name holds as itself");
/// ```
pub fn agent_holder(unit: &str, agent: &str) -> String {
    format!("{unit}#{agent}")
}

/// The unit a lease holder acts for: the part of [`agent_holder`] before `#`.
pub fn holder_unit(holder: &str) -> &str {
    holder.split_once('#').map_or(holder, |(unit, _)| unit)
}

/// The lease that says which agent owns `unit`: only the agent holding it runs the unit's
/// hooks, and a commit of the unit's hook made under ownership is refused once another
/// agent holds it ([`crate::commit::HookCommit::owner`]). It lives among the applications'
/// leases under a name no application can take (application names have no `:`).
///
/// ```
/// assert_eq!(charm_model::ownership_lease("db/0"), "unit-owner:db/0");
/// ```
pub fn ownership_lease(unit: &str) -> String {
    format!("unit-owner:{unit}")
}

/// The host an agent id names: an agent id is `host.nonce` (the host's name, then a
/// number drawn at the agent's start).
///
/// ```
/// assert_eq!(charm_model::agent_host("node-1.example:812.00c0ffee"), "node-1.example:812");
/// ```
pub fn agent_host(agent: &str) -> &str {
    agent.rsplit_once('.').map_or(agent, |(host, _)| host)
}

/// The agent part of a lease holder ([`agent_holder`]), if it has one.
pub fn holder_agent(holder: &str) -> Option<&str> {
    holder.split_once('#').map(|(_, agent)| agent)
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

/// One line a charm logged (through the log import, or on its stdout or stderr), as kept
/// in its unit's bounded ring for `charm-host debug-log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Its place among the model's log lines: increasing, never reused.
    pub seq: u64,
    /// The unit whose hook logged it.
    pub unit: String,
    /// The hook, such as `db-relation-changed`.
    pub hook: String,
    /// When the hook ended, in milliseconds since the UNIX epoch (the host's clock).
    pub at_ms: u64,
    /// `trace`, `debug`, `info`, `warning` or `error`; `stdout` for a line the charm wrote
    /// on its stdout or stderr.
    pub level: String,
    /// The text.
    pub message: String,
}

/// How many log lines each unit keeps: older ones make way for new ones.
pub const LOG_RING: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_finds_exactly_its_names_in_any_order() {
        let names: Vec<String> = (0..100).rev().map(|n| format!("db/{n}")).collect();
        let list: UnitNames = names.clone().into();
        for name in &names {
            assert!(list.contains(name), "{name}");
        }
        for absent in ["db/100", "db/", "db/-1", "", "zz/0"] {
            assert!(!list.contains(absent), "{absent}");
        }
        let copy = list.clone();
        assert!(
            copy.0.by_name.get().is_some(),
            "the index is made once, for every copy"
        );
    }
}
