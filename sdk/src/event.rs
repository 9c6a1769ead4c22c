use crate::wit::juju::charm::types as wit;

/// The relation an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// An action invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionEvent {
    /// The action's id.
    pub id: String,
    /// The action's name.
    pub name: String,
    /// The parameters given by the operator.
    pub params: serde_json::Map<String, serde_json::Value>,
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
#[derive(Debug, Clone, PartialEq)]
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
    /// This unit has just become its application's leader; it runs as leader.
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
}

impl Event {
    /// Juju's name for the hook, such as `install` or `db-relation-changed`.
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
        }
    }

    /// The relation this event is about, for relation events.
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
