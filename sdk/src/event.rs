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

    /// Sets one result. Keys are lowercase letters, digits and `-`, starting with a letter;
    /// a dot nests a key under another (`db.host`), as with Juju's `action-set`. The host
    /// refuses any other key, naming it.
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

    /// Sets the results from a value of the charm's own type: a struct or a map, serialised
    /// with serde and nested as Juju's `action-set` nests them. A nested struct or map
    /// becomes dotted keys (`db.host`); a string is the value as it is; a number, a
    /// boolean or a list is its JSON text (`42`, `true`, `["a","b"]`); `None` (JSON `null`)
    /// sets nothing. Each key, and each part of a nested one, follows
    /// [`set_result`](Self::set_result)'s rule and holds no dot of its own. A bad key is an
    /// [`Error::InvalidArgument`] naming it, and nothing is set.
    ///
    /// ```
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{ActionEvent, Charm, Event, HookResult, Metadata, Model};
    /// use serde::Serialize;
    ///
    /// #[derive(Serialize)]
    /// #[serde(rename_all = "kebab-case")]
    /// struct Backup { backup_id: String, size_mib: u64, compressed: bool, target: Target }
    ///
    /// #[derive(Serialize)]
    /// struct Target { host: &'static str, port: u16, path: Option<String> }
    ///
    /// struct Db;
    /// impl Charm for Db {
    ///     fn metadata() -> Metadata { Metadata::new("db").action("backup", "Dumps the data") }
    ///     fn handle(_: &Model, event: Event) -> HookResult {
    ///         if let Event::Action(action) = event {
    ///             let target = Target { host: "backup.local", port: 873, path: None };
    ///             let backup = Backup { backup_id: "b-1".into(), size_mib: 42, compressed: true, target };
    ///             action.set_results_from(&backup)?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Db>::new().run(Event::Action(ActionEvent::new("backup")), State::default());
    /// let results = out.action.expect("an action ran").results;
    /// assert_eq!(results["backup-id"], "b-1");
    /// assert_eq!(results["size-mib"], "42");
    /// assert_eq!(results["compressed"], "true");
    /// assert_eq!(results["target.host"], "backup.local");
    /// assert_eq!(results["target.port"], "873");
    /// assert!(!results.contains_key("target.path"), "None sets nothing");
    /// assert_eq!(results.len(), 5);
    /// ```
    ///
    /// A key Juju would refuse fails the call, and says which:
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{ActionEvent, Charm, Error, Event, HookResult, Metadata, Model};
    ///
    /// struct Bad;
    /// impl Charm for Bad {
    ///     fn metadata() -> Metadata { Metadata::new("bad").action("report", "") }
    ///     fn handle(_: &Model, event: Event) -> HookResult {
    ///         if let Event::Action(action) = event {
    ///             let db = BTreeMap::from([("Host", "x"), ("port", "1")]);
    ///             let err = action.set_results_from(&BTreeMap::from([("db", db)])).unwrap_err();
    ///             let Error::InvalidArgument(why) = &err else { panic!("{err}") };
    ///             assert!(why.starts_with(r#"action result key "db.Host": part "Host""#), "{why}");
    ///             // Not a struct or a map: no keys to set.
    ///             assert!(action.set_results_from(&[1, 2]).is_err());
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Bad>::new().run(Event::Action(ActionEvent::new("report")), State::default());
    /// assert!(out.committed(), "{:?}", out.outcome);
    /// assert!(out.action.expect("an action ran").results.is_empty(), "nothing is set");
    /// ```
    pub fn set_results_from<T: Serialize + ?Sized>(&self, results: &T) -> Result<()> {
        let flat = flatten_results(serde_json::to_value(results)?)?;
        backend::with(|b| b.action_set_results(&flat))
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

/// `value`'s results as `action-set` takes them: one dotted key per string, number,
/// boolean or list, checked against Juju's rule for result keys.
fn flatten_results(value: serde_json::Value) -> Result<Vec<(String, String)>> {
    let serde_json::Value::Object(map) = value else {
        return Err(Error::InvalidArgument(format!(
            "action results are a struct or a map of keys, not {}",
            json_kind(&value)
        )));
    };
    let mut flat = Vec::new();
    flatten_into(&mut flat, "", map)?;
    Ok(flat)
}

fn flatten_into(
    flat: &mut Vec<(String, String)>,
    prefix: &str,
    map: serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    use serde_json::Value;
    for (part, value) in map {
        let key = if prefix.is_empty() {
            part.clone()
        } else {
            format!("{prefix}.{part}")
        };
        if !valid_result_key_part(&part) {
            // The same words as the host's refusal of a key given as a string.
            let which = if part == key {
                String::new()
            } else {
                format!(": part {part:?}")
            };
            return Err(Error::InvalidArgument(format!(
                "action result key {key:?}{which}: use lowercase letters, digits and '-', \
                 starting with a letter"
            )));
        }
        match value {
            Value::Object(nested) => flatten_into(flat, &key, nested)?,
            // An absent optional field: Juju has no null result.
            Value::Null => {}
            Value::String(text) => flat.push((key, text)),
            other => flat.push((key, other.to_string())),
        }
    }
    Ok(())
}

/// One part of a result key, by Juju's rule (a dot would nest it: not part of a part).
fn valid_result_key_part(part: &str) -> bool {
    part.starts_with(|c: char| c.is_ascii_lowercase())
        && part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// What a JSON value is, for an error.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn flat(value: serde_json::Value) -> Vec<(String, String)> {
        flatten_results(value).unwrap()
    }

    fn refusal(value: serde_json::Value) -> String {
        match flatten_results(value) {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("not refused as an invalid argument: {other:?}"),
        }
    }

    #[test]
    fn nested_maps_become_dotted_keys_and_scalars_their_json_text() {
        let results = flat(json!({
            "name": "db-1",
            "size": 42,
            "ratio": 0.5,
            "ok": false,
            "tags": ["a", "b"],
            "gone": null,
            "empty": {},
            "target": {"host": "h", "tls": {"enabled": true, "ca": "x"}},
        }));
        let expected = [
            ("name", "db-1"),
            ("ok", "false"),
            ("ratio", "0.5"),
            ("size", "42"),
            ("tags", r#"["a","b"]"#),
            ("target.host", "h"),
            ("target.tls.ca", "x"),
            ("target.tls.enabled", "true"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(results, expected);
    }

    #[test]
    fn a_bad_key_is_named_with_its_path() {
        assert_eq!(
            refusal(json!({"Size": 1})),
            "action result key \"Size\": use lowercase letters, digits and '-', starting with a letter"
        );
        let why = refusal(json!({"target": {"tls": {"2nd": 1}}}));
        assert!(
            why.starts_with(r#"action result key "target.tls.2nd": part "2nd":"#),
            "{why}"
        );
        // A dot in a key of its own would read as nesting that is not there.
        let why = refusal(json!({"a.b": 1}));
        assert!(why.starts_with(r#"action result key "a.b""#), "{why}");
        let why = refusal(json!({"a": {"": 1}}));
        assert!(
            why.starts_with(r#"action result key "a.": part """#),
            "{why}"
        );
    }

    #[test]
    fn only_a_struct_or_a_map_has_keys() {
        for (value, kind) in [
            (json!([1]), "a list"),
            (json!("x"), "a string"),
            (json!(3), "a number"),
            (json!(null), "null"),
        ] {
            let why = refusal(value);
            assert!(why.ends_with(kind), "{why}");
        }
    }

    #[test]
    fn keys_agree_with_the_hosts_rule() {
        let parts = [
            "", "a", "a-", "-a", "a1", "1a", "A", "aB", "é", "a_b", "a b", "ab-cd-9", "a.b",
        ];
        for part in parts {
            let host = charm_model::access::action_result_keys([part]).is_ok();
            let ours = flatten_results(json!({ part: 1 })).is_ok();
            assert_eq!(ours, host && !part.contains('.'), "{part:?}");
        }
        let results = flat(json!({"db": {"primary": {"host": "h"}}, "n-1": 1}));
        let keys = results.iter().map(|(k, _)| k.as_str());
        assert!(charm_model::access::action_result_keys(keys).is_ok());
    }
}
