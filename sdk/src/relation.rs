use std::collections::BTreeMap;
use std::rc::Rc;

use crate::backend::{self, Entries, RelationInfo};
use crate::error::Result;

/// A relation as this unit sees it.
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// if let Some(db) = model.relation("db")? {
///     charm_sdk::log::info(&format!("{} units of {} on relation {}", db.remote_units().len(), db.remote_app(), db.id()));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    id: u32,
    name: String,
    remote_app: String,
    remote_units: Vec<String>,
    local_unit: String,
    local_app: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Unit(String),
    App(String),
}

impl Relation {
    pub(crate) fn new(r: RelationInfo, local_unit: String, local_app: String) -> Self {
        Relation {
            id: r.id,
            name: r.name,
            remote_app: r.remote_app,
            remote_units: r.remote_units,
            local_unit,
            local_app,
        }
    }

    /// The relation's id.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let ids: Vec<u32> = model.relations("db")?.iter().map(|r| r.id()).collect();
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The endpoint's name on this side.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// assert_eq!(rel.name(), "db");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The application on the other side (this one for a peer relation).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// assert_eq!(rel.remote_app(), "postgresql");
    /// # Ok(()) }
    /// ```
    pub fn remote_app(&self) -> &str {
        &self.remote_app
    }

    /// The remote units that have joined, sorted (for peers: the other units).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let peers = model.relation("cluster")?.map(|r| r.remote_units().len()).unwrap_or(0);
    /// # Ok(()) }
    /// ```
    pub fn remote_units(&self) -> &[String] {
        &self.remote_units
    }

    /// A unit's bag: this unit's own (writable) or a remote unit's (read only).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// for unit in rel.remote_units() {
    ///     let address = rel.unit_data(unit)?.get("address").map(str::to_owned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unit_data(&self, unit: &str) -> Result<DataBag> {
        let entries = backend::with(|b| b.unit_data(self.id, unit))?;
        Ok(DataBag {
            relation: self.id,
            owner: Owner::Unit(unit.to_string()),
            entries,
        })
    }

    /// An application's bag: this application's (leader only, except on a peer relation,
    /// where every unit reads it) or the remote one's (read only).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// let theirs = rel.app_data(rel.remote_app())?;
    /// # Ok(()) }
    /// ```
    pub fn app_data(&self, app: &str) -> Result<DataBag> {
        let entries = backend::with(|b| b.app_data(self.id, app))?;
        Ok(DataBag {
            relation: self.id,
            owner: Owner::App(app.to_string()),
            entries,
        })
    }

    /// This unit's own bag, which it alone writes.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     db.local_unit_data()?.set("database", "discourse")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn local_unit_data(&self) -> Result<DataBag> {
        self.unit_data(&self.local_unit)
    }

    /// This application's bag. Leader only, except on a peer relation, where every unit
    /// reads it and the leader writes it.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if model.is_leader() {
    ///     for rel in model.relations("db")? {
    ///         rel.local_app_data()?.set("master", "host=db-0")?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn local_app_data(&self) -> Result<DataBag> {
        self.app_data(&self.local_app)
    }

    /// The remote application's bag.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     let master = db.remote_app_data()?.get("master").map(str::to_owned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remote_app_data(&self) -> Result<DataBag> {
        self.app_data(&self.remote_app)
    }
}

/// One data bag of a relation: a unit's or an application's key/value settings.
///
/// Reads come from the hook's snapshot plus its own writes; `set` and `remove` are checked
/// by the host against Juju's access rules and buffered until the hook commits.
///
/// ```
/// use charm_sdk::testing::{Context, Relation, State};
/// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
///
/// struct Addressed;
/// impl Charm for Addressed {
///     fn metadata() -> Metadata { Metadata::new("addressed").requires("db", "pgsql") }
///     fn handle(model: &Model, _: Event) -> HookResult {
///         let mut bag = model.relation("db")?.expect("related").local_unit_data()?;
///         bag.set("address", "10.0.0.7")?;
///         Ok(())
///     }
/// }
/// let state = State::default().relation(Relation::new(1, "db", "postgresql"));
/// let out = Context::<Addressed>::new().run(Event::Start, state);
/// assert_eq!(out.state.relations[0].local_unit_data["address"], "10.0.0.7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataBag {
    relation: u32,
    owner: Owner,
    /// Shared with the hook's read cache until this bag is written.
    entries: Entries,
}

impl DataBag {
    /// One value.
    ///
    /// ```no_run
    /// # fn f(bag: &charm_sdk::DataBag) {
    /// let master: Option<&str> = bag.get("master");
    /// # }
    /// ```
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// Every entry, sorted by key.
    ///
    /// ```no_run
    /// # fn f(bag: &charm_sdk::DataBag) {
    /// let keys: Vec<&String> = bag.entries().keys().collect();
    /// # }
    /// ```
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.entries
    }

    /// Sets a value.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     db.local_unit_data()?.set("database", "discourse")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        self.write(key, Some(value))?;
        Rc::make_mut(&mut self.entries).insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Removes a value.
    ///
    /// ```no_run
    /// # fn f(bag: &mut charm_sdk::DataBag) -> charm_sdk::HookResult {
    /// bag.remove("address")?;
    /// # Ok(()) }
    /// ```
    pub fn remove(&mut self, key: &str) -> Result<()> {
        self.write(key, None)?;
        Rc::make_mut(&mut self.entries).remove(key);
        Ok(())
    }

    fn write(&self, key: &str, value: Option<&str>) -> Result<()> {
        match &self.owner {
            Owner::Unit(unit) => {
                backend::write(|b| b.set_unit_data(self.relation, unit, key, value))?
            }
            Owner::App(app) => backend::write(|b| b.set_app_data(self.relation, app, key, value))?,
        }
        Ok(())
    }
}
