//! The client side: asks for a database and follows the master and the standbys.

use std::collections::BTreeMap;
use std::rc::Rc;

use charm_sdk::{CustomEvent, DataBag, Emit, Event, HookResult, Model, Relation};
use serde::{Deserialize, Serialize};

use crate::{ConnectionString, DatabaseRequest, InvalidData, LEADER_KEY, set_if_changed};

/// What the client side emits for the charm, as ops' `pgsql` library does.
///
/// ```
/// use charm_pgsql::RequirerEvent;
/// use charm_sdk::Emit;
///
/// let ev = RequirerEvent::MasterChanged { relation: 1, master: None };
/// assert_eq!(ev.name(), "master-changed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequirerEvent {
    /// A PostgreSQL unit joined: the time for the leader to call [`Requirer::request`].
    DatabaseJoined {
        /// The relation's id.
        relation: u32,
        /// The PostgreSQL application.
        remote_app: String,
    },
    /// The master's connection string changed; `None` when there is no master ready for
    /// this client any more (or the relation is gone).
    MasterChanged {
        /// The relation's id.
        relation: u32,
        /// The master, ready for use.
        master: Option<ConnectionString>,
    },
    /// The hot standbys changed.
    StandbysChanged {
        /// The relation's id.
        relation: u32,
        /// The standbys, ready for use (read only).
        standbys: Vec<ConnectionString>,
    },
    /// PostgreSQL published data that does not follow the interface; what could be read is
    /// still used, and the rest is ignored.
    InvalidData(InvalidData),
}

impl Emit for RequirerEvent {
    fn name(&self) -> &'static str {
        match self {
            RequirerEvent::DatabaseJoined { .. } => "database-joined",
            RequirerEvent::MasterChanged { .. } => "master-changed",
            RequirerEvent::StandbysChanged { .. } => "standbys-changed",
            RequirerEvent::InvalidData(_) => "invalid-data",
        }
    }
}

/// One relation's databases as this unit sees them now.
///
/// ```
/// let db = charm_pgsql::Database { relation: 1, remote_app: "pg".into(), ..Default::default() };
/// assert!(db.master.is_none() && db.problems.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Database {
    /// The relation's id.
    pub relation: u32,
    /// The PostgreSQL application.
    pub remote_app: String,
    /// The master, once PostgreSQL has applied this client's request and published it.
    pub master: Option<ConnectionString>,
    /// The hot standbys, on the same condition.
    pub standbys: Vec<ConnectionString>,
    /// What PostgreSQL published that does not follow the interface.
    pub problems: Vec<InvalidData>,
}

/// What the unit last told the charm about one relation, kept in its stored state: the
/// connection strings as PostgreSQL published them, so that a hook in which they did not
/// change compares text and parses nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    master: Option<String>,
    standbys: Vec<String>,
}

impl Seen {
    /// What a unit that reads `db` says.
    fn of(db: &Database) -> Seen {
        Seen {
            master: db.master.as_ref().map(|m| m.as_str().to_string()),
            standbys: db.standbys.iter().map(|s| s.as_str().to_string()).collect(),
        }
    }

    /// How `db` differs from this. Each text is compared once: comparing a connection
    /// string costs about 22 instructions a byte in WebAssembly (libc's `memcmp`).
    fn compare(&self, db: &Database) -> Difference {
        let master_text =
            self.master.as_deref() != db.master.as_ref().map(ConnectionString::as_str);
        let standbys_text = !self
            .standbys
            .iter()
            .map(String::as_str)
            .eq(db.standbys.iter().map(ConnectionString::as_str));
        Difference {
            text: master_text || standbys_text,
            // The same text is the same master; other text (another spelling of it, or
            // text stored by an older version) is parsed.
            master: master_text && parse(self.master.as_deref()) != db.master,
            standbys: standbys_text
                && self
                    .standbys
                    .iter()
                    .map(|s| s.parse::<ConnectionString>().ok())
                    .collect::<Option<Vec<_>>>()
                    .as_ref()
                    != Some(&db.standbys),
        }
    }
}

/// How a relation's databases differ from what a unit last said ([`Seen::compare`]).
struct Difference {
    /// The master's or the standbys' text differs: what is stored needs writing.
    text: bool,
    /// The master differs: another server, or one appeared or went.
    master: bool,
    /// The standbys differ.
    standbys: bool,
}

/// A stored connection string; one that no longer parses is none.
fn parse(text: Option<&str>) -> Option<ConnectionString> {
    text.and_then(|t| t.parse().ok())
}

/// The client side of `pgsql` on one endpoint.
///
/// Make it in a `const`, observe every hook with it in
/// [`Charm::observe`](charm_sdk::Charm::observe), and read its events with
/// [`Requirer::event`]. See the crate documentation for a whole charm.
///
/// ```
/// const DB: charm_pgsql::Requirer = charm_pgsql::Requirer::new("db");
/// assert_eq!(DB.source(), "pgsql:db");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirer {
    endpoint: &'static str,
}

impl Requirer {
    /// The client side on `endpoint` (declared `requires` with interface `pgsql`).
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Requirer::new("db").endpoint(), "db");
    /// ```
    pub const fn new(endpoint: &'static str) -> Self {
        Requirer { endpoint }
    }

    /// The endpoint's name.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Requirer::new("db-admin").endpoint(), "db-admin");
    /// ```
    pub fn endpoint(&self) -> &'static str {
        self.endpoint
    }

    /// The [`CustomEvent::source`] of this side's events: `pgsql:<endpoint>`.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Requirer::new("db").source(), "pgsql:db");
    /// ```
    pub fn source(&self) -> String {
        ["pgsql:", self.endpoint].concat()
    }

    /// The typed event, when `custom` is one of this side's; `None` for other events.
    ///
    /// ```
    /// use charm_pgsql::{Requirer, RequirerEvent};
    /// let ev = RequirerEvent::MasterChanged { relation: 1, master: None };
    /// let custom = charm_sdk::CustomEvent::new("pgsql:db", &ev).unwrap();
    /// assert_eq!(Requirer::new("db").event(&custom).unwrap().unwrap(), ev);
    /// assert!(Requirer::new("replica").event(&custom).is_none());
    /// ```
    pub fn event(&self, custom: &CustomEvent) -> Option<charm_sdk::Result<RequirerEvent>> {
        custom.decode(&self.source())
    }

    /// Observes a hook's event and emits what it means for this endpoint:
    /// - a relation joined: [`RequirerEvent::DatabaseJoined`];
    /// - a relation changed, a unit departed, leadership or leader data changed, the charm
    ///   was upgraded: [`RequirerEvent::MasterChanged`] and
    ///   [`RequirerEvent::StandbysChanged`] for what changed since this unit last said, and
    ///   [`RequirerEvent::InvalidData`] for what does not parse;
    /// - a relation broken: the master and standbys gone, if there were any.
    ///
    /// It also keeps this unit's bag mirroring the leader's request.
    pub fn observe(&self, model: &Model, event: &Event) -> HookResult {
        match event {
            Event::RelationJoined(r) if r.name == self.endpoint => {
                self.mirror(model, &model.relation_by_id(r.id)?)?;
                model.emit(
                    &self.source(),
                    &RequirerEvent::DatabaseJoined {
                        relation: r.id,
                        remote_app: r.remote_app.clone(),
                    },
                )?;
                // The first change after the join reports what is already there.
                self.follow(model, &model.relation_by_id(r.id)?)?;
            }
            Event::RelationChanged(r) | Event::RelationDeparted(r) if r.name == self.endpoint => {
                let relation = model.relation_by_id(r.id)?;
                self.mirror(model, &relation)?;
                self.follow(model, &relation)?;
            }
            Event::RelationBroken(r) if r.name == self.endpoint => self.forget(model, r.id)?,
            Event::LeaderElected | Event::LeaderSettingsChanged | Event::UpgradeCharm => {
                for relation in model.relations(self.endpoint)? {
                    self.mirror(model, &relation)?;
                    self.follow(model, &relation)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Asks PostgreSQL for a database on a relation. Leader only: it writes the
    /// application's bag, keeps a copy in leader data for the other units and mirrors it in
    /// this unit's bag. Asking again for the same thing changes nothing.
    ///
    /// # Errors
    ///
    /// [`charm_sdk::Error::NotLeader`] on a unit that is not the leader, and
    /// [`charm_sdk::Error::InvalidArgument`] for a name PostgreSQL cannot take.
    pub fn request(
        &self,
        model: &Model,
        relation: u32,
        request: &DatabaseRequest,
    ) -> charm_sdk::Result<()> {
        let fields = request.to_fields();
        DatabaseRequest::from_fields(relation, "this request", |k| fields.get(k).cloned())
            .map_err(|bad| charm_sdk::Error::InvalidArgument(bad.to_string()))?;
        let rel = model.relation_by_id(relation)?;
        let app = rel.local_app_data()?;
        for (key, value) in &fields {
            set_if_changed(&app, key, value)?;
        }
        let copies = requests(model)?;
        if copies.get(&relation) != Some(request) {
            let mut copies = (*copies).clone();
            copies.insert(relation, request.clone());
            write_requests(model, &copies)?;
        }
        self.mirror(model, &rel)
    }

    /// What the leader asked for on a relation, as every unit can read it.
    pub fn requested(&self, model: &Model, relation: u32) -> charm_sdk::Result<DatabaseRequest> {
        Ok(requests(model)?.get(&relation).cloned().unwrap_or_default())
    }

    /// One relation's databases as they are now, without waiting for an event: for hooks
    /// such as config-changed that need the master too.
    pub fn database(&self, model: &Model, relation: u32) -> charm_sdk::Result<Database> {
        Ok((*self.read(model, &model.relation_by_id(relation)?)?).clone())
    }

    /// Every relation's databases on this endpoint, by relation id. Shared with the
    /// library's own reading in the same hook, not copied.
    pub fn databases(&self, model: &Model) -> charm_sdk::Result<Vec<Rc<Database>>> {
        model
            .relations(self.endpoint)?
            .iter()
            .map(|r| self.read(model, r))
            .collect()
    }

    /// Reads PostgreSQL's side of a relation: the first bag (the application's, then the
    /// units' by name) with a master that has applied this client's request wins, as in
    /// ops' library. Read once per hook (until the hook writes): the library reads as it
    /// observes the event, and the charm reads again as it configures.
    fn read(&self, model: &Model, relation: &Relation) -> charm_sdk::Result<Rc<Database>> {
        let key = [
            "pgsql:",
            self.endpoint,
            ".relation.",
            &relation.id().to_string(),
        ]
        .concat();
        model.memo(&key, || self.read_now(model, relation))
    }

    fn read_now(&self, model: &Model, relation: &Relation) -> charm_sdk::Result<Database> {
        let want = self.requested(model, relation.id())?.to_fields();
        let egress = subnets(relation.local_unit_data()?.get("egress-subnets"));
        let mut bags = vec![relation.remote_app_data()?];
        for unit in relation.remote_units() {
            bags.push(relation.unit_data(unit)?);
        }
        let owners = std::iter::once(relation.remote_app().to_string())
            .chain(relation.remote_units().iter().map(str::to_owned));
        let mut db = Database {
            relation: relation.id(),
            remote_app: relation.remote_app().to_string(),
            ..Default::default()
        };
        let mut standbys_found = false;
        for (bag, owner) in bags.iter().zip(owners) {
            let invalid = |key: &str, reason: String| InvalidData {
                relation: relation.id(),
                owner: owner.clone(),
                key: key.to_string(),
                reason,
            };
            let ready = is_ready(bag, &want, &egress);
            if let Some(raw) = bag.get("master").filter(|m| !m.trim().is_empty()) {
                match raw.parse::<ConnectionString>() {
                    Ok(master) if ready && db.master.is_none() => db.master = Some(master),
                    Ok(_) => {}
                    Err(e) => db.problems.push(invalid("master", e.to_string())),
                }
            }
            if let Some(raw) = bag.get("standbys").filter(|s| !s.trim().is_empty()) {
                let mut parsed = Vec::new();
                for (n, line) in raw
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                {
                    match line.parse::<ConnectionString>() {
                        Ok(standby) => parsed.push(standby),
                        Err(e) => db
                            .problems
                            .push(invalid("standbys", format!("line {}: {e}", n + 1))),
                    }
                }
                if ready && !standbys_found {
                    db.standbys = parsed;
                    standbys_found = true;
                }
            }
        }
        Ok(db)
    }

    /// Emits what changed on a relation since this unit last said, and what is malformed.
    fn follow(&self, model: &Model, relation: &Relation) -> HookResult {
        let db = self.read(model, relation)?;
        let mut seen = self.seen(model)?;
        let difference = match seen.get(&db.relation) {
            Some(before) => before.compare(&db),
            None => Seen::default().compare(&db),
        };
        let source = self.source();
        if difference.master {
            model.emit(
                &source,
                &RequirerEvent::MasterChanged {
                    relation: db.relation,
                    master: db.master.clone(),
                },
            )?;
        }
        if difference.standbys {
            model.emit(
                &source,
                &RequirerEvent::StandbysChanged {
                    relation: db.relation,
                    standbys: db.standbys.clone(),
                },
            )?;
        }
        for problem in &db.problems {
            charm_sdk::log::warning(&problem.to_string());
            model.emit(&source, &RequirerEvent::InvalidData(problem.clone()))?;
        }
        if difference.text {
            seen.insert(db.relation, Seen::of(&db));
            model.stored().set(&self.stored_key(), &seen)?;
        }
        Ok(())
    }

    /// A broken relation: says its databases are gone, and forgets it.
    fn forget(&self, model: &Model, relation: u32) -> HookResult {
        let mut seen = self.seen(model)?;
        if let Some(before) = seen.remove(&relation) {
            let source = self.source();
            if before.master.is_some() {
                let gone = RequirerEvent::MasterChanged {
                    relation,
                    master: None,
                };
                model.emit(&source, &gone)?;
            }
            if !before.standbys.is_empty() {
                let gone = RequirerEvent::StandbysChanged {
                    relation,
                    standbys: Vec::new(),
                };
                model.emit(&source, &gone)?;
            }
            model.stored().set(&self.stored_key(), &seen)?;
        }
        if model.is_leader() {
            let copies = requests(model)?;
            if copies.contains_key(&relation) {
                let mut copies = (*copies).clone();
                copies.remove(&relation);
                write_requests(model, &copies)?;
            }
        }
        Ok(())
    }

    /// Keeps this unit's bag equal to the leader's request, for providers that read unit
    /// bags (as the PostgreSQL charm did before Juju had application bags).
    fn mirror(&self, model: &Model, relation: &Relation) -> charm_sdk::Result<()> {
        let fields = self.requested(model, relation.id())?.to_fields();
        let bag = relation.local_unit_data()?;
        for (key, value) in &fields {
            set_if_changed(&bag, key, value)?;
        }
        Ok(())
    }

    fn stored_key(&self) -> String {
        ["charm-pgsql.", self.endpoint].concat()
    }

    fn seen(&self, model: &Model) -> charm_sdk::Result<BTreeMap<u32, Seen>> {
        Ok(model.stored().get(&self.stored_key())?.unwrap_or_default())
    }
}

/// Whether PostgreSQL has applied the request in this bag: it echoes `database`, `roles`
/// and `extensions` once it has, and lists the client's egress subnets it has let in.
fn is_ready(bag: &DataBag, want: &BTreeMap<&'static str, String>, egress: &[String]) -> bool {
    let applied = want
        .iter()
        .all(|(key, value)| bag.get(key).unwrap_or_default().trim() == value);
    // Compared where they lie in the bag's text, not copied out.
    let allowed = bag.get("allowed-subnets").unwrap_or_default();
    applied
        && egress
            .iter()
            .all(|s| allowed.split(',').any(|a| a.trim() == s))
}

fn subnets(raw: Option<&str>) -> Vec<String> {
    raw.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The leader's requests, from leader data: `{"<relation id>": {"database": ..., "roles":
/// "a,b", "extensions": ...}}`. Parsed once per hook (until the hook writes).
fn requests(model: &Model) -> charm_sdk::Result<Rc<BTreeMap<u32, DatabaseRequest>>> {
    model.memo("pgsql.requests", || requests_now(model))
}

fn requests_now(model: &Model) -> charm_sdk::Result<BTreeMap<u32, DatabaseRequest>> {
    let Some(raw) = model.leader_data().get(LEADER_KEY) else {
        return Ok(BTreeMap::new());
    };
    let copies: BTreeMap<u32, BTreeMap<String, String>> = serde_json::from_str(&raw)?;
    copies
        .into_iter()
        .map(|(id, fields)| {
            DatabaseRequest::from_fields(id, "leader data", |k| fields.get(k).cloned())
                .map(|r| (id, r))
                .map_err(|bad| charm_sdk::Error::Serde(bad.to_string()))
        })
        .collect()
}

fn write_requests(model: &Model, copies: &BTreeMap<u32, DatabaseRequest>) -> charm_sdk::Result<()> {
    if copies.is_empty() {
        return model.leader_data().remove(LEADER_KEY);
    }
    let as_fields: BTreeMap<u32, BTreeMap<&str, String>> =
        copies.iter().map(|(id, r)| (*id, r.to_fields())).collect();
    model
        .leader_data()
        .set(LEADER_KEY, &serde_json::to_string(&as_fields)?)
}
