use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::pod::Pod;
use crate::relation::Relation;
use crate::status::Status;
use crate::wit::juju::charm::{leadership, relations, state, status, types};

/// The unit's view of the Juju model during one hook, in the shape of Python ops' `Model`.
///
/// Reads see the model as it was when the hook started plus the hook's own writes; writes
/// are buffered by the host and applied together when the hook succeeds.
#[derive(Debug, Clone)]
pub struct Model {
    name: String,
    unit: Unit,
    app: Application,
}

impl Model {
    pub(crate) fn from_context(ctx: types::Context) -> Self {
        Model {
            name: ctx.model,
            unit: Unit { name: ctx.unit },
            app: Application { name: ctx.app },
        }
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This unit.
    pub fn unit(&self) -> &Unit {
        &self.unit
    }

    /// This unit's application.
    pub fn app(&self) -> &Application {
        &self.app
    }

    /// Whether this unit is the application's leader.
    ///
    /// The same answer for the whole hook: the host takes it when the hook starts. When it
    /// is `true`, no leader-only write of this hook is refused for leadership.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if model.is_leader() {
    ///     model.leader_data().set("password", "s3cret")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        leadership::is_leader()
    }

    /// The application's config.
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
        relations::relation_ids(name)
            .into_iter()
            .map(|id| self.relation_by_id(id))
            .collect()
    }

    /// The single relation on endpoint `name`, if there is one.
    pub fn relation(&self, name: &str) -> Result<Option<Relation>> {
        Ok(self.relations(name)?.into_iter().next())
    }

    /// The relation with this id.
    pub fn relation_by_id(&self, id: u32) -> Result<Relation> {
        let r = relations::relation_get(id)?;
        Ok(Relation::new(
            r,
            self.unit.name.clone(),
            self.app.name.clone(),
        ))
    }

    /// The leader settings, shared by all units of the application and written by the leader.
    pub fn leader_data(&self) -> LeaderData {
        LeaderData { _private: () }
    }

    /// The application's Kubernetes pod.
    pub fn pod(&self) -> Pod {
        Pod::new()
    }

    /// This unit's persistent state.
    pub fn stored(&self) -> StoredState {
        StoredState { _private: () }
    }
}

/// A unit of an application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    name: String,
}

impl Unit {
    /// The unit's name, such as `discourse/0`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The unit's status as the hook sees it.
    pub fn status(&self) -> Status {
        Status::from_wit(status::unit_status())
    }

    /// Sets the unit's status.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.unit().set_status(charm_sdk::Status::waiting("waiting for database"))?;
    /// # Ok(()) }
    /// ```
    pub fn set_status(&self, status: Status) -> Result<()> {
        Ok(status::set_unit_status(&status.into_wit())?)
    }

    /// Sets the workload version shown in status.
    pub fn set_workload_version(&self, version: &str) {
        status::set_workload_version(version)
    }
}

/// An application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Application {
    name: String,
}

impl Application {
    /// The application's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The application's status. Leader only.
    pub fn status(&self) -> Result<Status> {
        Ok(Status::from_wit(status::app_status()?))
    }

    /// Sets the application's status. Leader only.
    pub fn set_status(&self, status: Status) -> Result<()> {
        Ok(status::set_app_status(&status.into_wit())?)
    }
}

/// The leader settings: read by every unit, written by the leader.
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
    pub fn get(&self, key: &str) -> Option<String> {
        leadership::leader_get(key)
    }

    /// Every setting, sorted by key.
    pub fn all(&self) -> Vec<(String, String)> {
        leadership::leader_get_all()
    }

    /// Sets a setting. Leader only.
    pub fn set(&self, key: &str, value: &str) -> Result<()> {
        Ok(leadership::leader_set(key, Some(value))?)
    }

    /// Removes a setting. Leader only.
    pub fn remove(&self, key: &str) -> Result<()> {
        Ok(leadership::leader_set(key, None)?)
    }
}

/// The unit's persistent state, kept by the host across hooks (ops' `StoredState`).
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
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        state::get(key)
            .map(|raw| serde_json::from_str(&raw).map_err(Error::from))
            .transpose()
    }

    /// Stores a value as JSON.
    pub fn set<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        state::set(key, Some(&serde_json::to_string(value)?));
        Ok(())
    }

    /// Removes a stored value.
    pub fn remove(&self, key: &str) {
        state::set(key, None)
    }
}
