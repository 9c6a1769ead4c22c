//! The PostgreSQL side: reads what each client asks for and publishes its connections.

use charm_sdk::{CustomEvent, Emit, Event, HookResult, Model, Relation};
use serde::{Deserialize, Serialize};

use crate::{ConnectionString, DatabaseRequest, InvalidData, same, set_if_changed};

/// What the PostgreSQL side emits for the charm. Only the leader gets these: only it may
/// publish.
///
/// ```
/// use charm_pgsql::{DatabaseRequest, ProviderEvent};
/// use charm_sdk::Emit;
///
/// let ev = ProviderEvent::DatabaseRequested {
///     relation: 1,
///     remote_app: "discourse".into(),
///     request: DatabaseRequest::database("discourse"),
/// };
/// assert_eq!(ev.name(), "database-requested");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderEvent {
    /// A client needs (re)publishing: its request is new or changed, its units changed, or
    /// nothing was published for it yet. Answer with [`Provider::publish`].
    DatabaseRequested {
        /// The relation's id.
        relation: u32,
        /// The client application.
        remote_app: String,
        /// What it asks for.
        request: DatabaseRequest,
    },
    /// The client's request does not follow the interface. Nothing is published for it
    /// until it does.
    InvalidRequest(InvalidData),
}

impl Emit for ProviderEvent {
    fn name(&self) -> &'static str {
        match self {
            ProviderEvent::DatabaseRequested { .. } => "database-requested",
            ProviderEvent::InvalidRequest(_) => "invalid-request",
        }
    }
}

/// A client's own user and password, for one relation.
///
/// ```
/// let c = charm_pgsql::Credentials { user: "juju_discourse".into(), password: "pw".into() };
/// assert_eq!(c.user, "juju_discourse");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user's name: `juju_<client application>`.
    pub user: String,
    /// Its password, generated once and kept in leader data.
    pub password: String,
}

/// What PostgreSQL publishes on one relation.
///
/// ```
/// use charm_pgsql::{ConnectionString, Publication};
///
/// let master = ConnectionString::new().host("pg-0").port(5432).dbname("app");
/// let publication = Publication::new(master).version("12");
/// assert_eq!(publication.version.as_deref(), Some("12"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The master's connection string, with the client's database, user and password.
    pub master: ConnectionString,
    /// The hot standbys' connection strings.
    pub standbys: Vec<ConnectionString>,
    /// The PostgreSQL version.
    pub version: Option<String>,
}

impl Publication {
    /// A master and no standbys.
    ///
    /// ```
    /// let p = charm_pgsql::Publication::new(charm_pgsql::ConnectionString::new().host("pg-0"));
    /// assert!(p.standbys.is_empty());
    /// ```
    pub fn new(master: ConnectionString) -> Self {
        Publication {
            master,
            standbys: Vec::new(),
            version: None,
        }
    }

    /// The same, with these standbys.
    ///
    /// ```
    /// use charm_pgsql::{ConnectionString, Publication};
    /// let p = Publication::new(ConnectionString::new().host("pg-0"))
    ///     .standbys([ConnectionString::new().host("pg-1")]);
    /// assert_eq!(p.standbys.len(), 1);
    /// ```
    pub fn standbys(mut self, standbys: impl IntoIterator<Item = ConnectionString>) -> Self {
        self.standbys = standbys.into_iter().collect();
        self
    }

    /// The same, with the PostgreSQL version.
    ///
    /// ```
    /// let p = charm_pgsql::Publication::new(charm_pgsql::ConnectionString::new()).version("12");
    /// assert_eq!(p.version.as_deref(), Some("12"));
    /// ```
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }
}

/// The PostgreSQL side of `pgsql` on one endpoint.
///
/// Make it in a `const`, observe every hook with it in
/// [`Charm::observe`](charm_sdk::Charm::observe), and answer
/// [`ProviderEvent::DatabaseRequested`] with [`Provider::publish`].
///
/// ```
/// use charm_pgsql::{ConnectionString, Provider, ProviderEvent, Publication};
/// use charm_sdk::testing::{Context, Relation, State};
/// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
///
/// const DB: Provider = Provider::new("db");
///
/// struct Postgres;
/// impl Charm for Postgres {
///     fn metadata() -> Metadata { Metadata::new("postgres").provides("db", "pgsql") }
///     fn observe(model: &Model, event: &Event) -> HookResult { DB.observe(model, event) }
///     fn handle(model: &Model, event: Event) -> HookResult {
///         let Event::Custom(custom) = event else { return Ok(()) };
///         if let Some(ProviderEvent::DatabaseRequested { relation, request, .. }) =
///             DB.event(&custom).transpose()?
///         {
///             let creds = DB.credentials(model, relation, || "generated".into())?;
///             let master = ConnectionString::new()
///                 .host("postgres-0")
///                 .port(5432)
///                 .dbname(request.database.clone().unwrap_or("postgres".into()))
///                 .user(creds.user)
///                 .password(creds.password);
///             DB.publish(model, relation, &request, &Publication::new(master))?;
///         }
///         Ok(())
///     }
/// }
///
/// let db = Relation::new(4, "db", "forum")
///     .remote_unit("forum/0", [("ingress-address", "10.0.0.9")])
///     .remote_app_data([("database", "forum")]);
/// let state = State::default().leader(true).relation(db);
/// let event = state.relation_by_id(4).unwrap().changed(None);
/// let out = Context::<Postgres>::new().run(event, state);
/// let published = &out.state.relation_by_id(4).unwrap().local_app_data;
/// assert_eq!(
///     published["master"],
///     "host=postgres-0 port=5432 dbname=forum user=juju_forum password=generated"
/// );
/// assert_eq!(published["database"], "forum");
/// assert_eq!(published["allowed-units"], "forum/0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provider {
    endpoint: &'static str,
}

impl Provider {
    /// The PostgreSQL side on `endpoint` (declared `provides` with interface `pgsql`).
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Provider::new("db").endpoint(), "db");
    /// ```
    pub const fn new(endpoint: &'static str) -> Self {
        Provider { endpoint }
    }

    /// The endpoint's name.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Provider::new("db-admin").endpoint(), "db-admin");
    /// ```
    pub fn endpoint(&self) -> &'static str {
        self.endpoint
    }

    /// The [`CustomEvent::source`] of this side's events: `pgsql:<endpoint>`.
    ///
    /// ```
    /// assert_eq!(charm_pgsql::Provider::new("db").source(), "pgsql:db");
    /// ```
    pub fn source(&self) -> String {
        format!("pgsql:{}", self.endpoint)
    }

    /// The typed event, when `custom` is one of this side's; `None` for other events.
    ///
    /// ```
    /// use charm_pgsql::{InvalidData, Provider, ProviderEvent};
    /// let bad = InvalidData { relation: 1, owner: "c".into(), key: "roles".into(), reason: "x".into() };
    /// let custom = charm_sdk::CustomEvent::new("pgsql:db", &ProviderEvent::InvalidRequest(bad)).unwrap();
    /// assert!(matches!(Provider::new("db").event(&custom), Some(Ok(ProviderEvent::InvalidRequest(_)))));
    /// ```
    pub fn event(&self, custom: &CustomEvent) -> Option<charm_sdk::Result<ProviderEvent>> {
        custom.decode(&self.source())
    }

    /// Observes a hook's event. On the leader, a client's relation joining, changing or a
    /// unit departing, and leadership arriving, emit [`ProviderEvent::DatabaseRequested`]
    /// for each client whose publication is missing or out of date, and
    /// [`ProviderEvent::InvalidRequest`] for a malformed request. A broken relation's
    /// password is forgotten.
    ///
    /// The client units let in (`allowed-units`) are compared on a unit joining or
    /// departing, on leadership arriving, on upgrade-charm and on update-status: a
    /// relation's units change with the first two, and the others catch what a skipped hook
    /// missed. A relation-changed compares the request and the master alone, so that its
    /// cost does not grow with the number of client units (the list is about 150 KiB at
    /// 10,000 units), unless an earlier check's comparison is still owed: it found the
    /// request malformed, or asked for a publication that was not made in its hook (the
    /// charm deferred or ignored [`ProviderEvent::DatabaseRequested`]), or a unit joined or
    /// departed in a hook run without the lease (on a follower, or on the leader in a hook
    /// that started too close to its guarantee's end). The unit's stored state keeps that,
    /// per relation, until a publication or a comparison settles it, or the relation is
    /// broken.
    pub fn observe(&self, model: &Model, event: &Event) -> HookResult {
        let leader = model.is_leader();
        match event {
            Event::RelationJoined(r) | Event::RelationDeparted(r) if r.name == self.endpoint => {
                if leader {
                    self.check(model, &model.relation_by_id(r.id)?, Units::Compare)?;
                } else {
                    // Compared by this unit's first check once it leads.
                    set_owed(model, r.id, true)?;
                }
            }
            Event::RelationChanged(r) if leader && r.name == self.endpoint => {
                self.check(model, &model.relation_by_id(r.id)?, Units::Unchanged)?;
            }
            Event::RelationBroken(r) if r.name == self.endpoint => {
                set_owed(model, r.id, false)?;
                let key = password_key(r.id);
                if leader && model.leader_data().get(&key).is_some() {
                    model.leader_data().remove(&key)?;
                }
            }
            Event::LeaderElected | Event::UpgradeCharm | Event::UpdateStatus if leader => {
                for relation in model.relations(self.endpoint)? {
                    self.check(model, &relation, Units::Compare)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// What a client asks for: its application bag, or, from clients that only write unit
    /// bags, the first of its units' bags that has a request.
    ///
    /// # Errors
    ///
    /// [`InvalidData`] naming the bag and key, for a request that does not follow the
    /// interface; [`charm_sdk::Error`] when the model cannot be read, inside.
    pub fn request(
        &self,
        relation: &Relation,
    ) -> charm_sdk::Result<Result<DatabaseRequest, InvalidData>> {
        let app = relation.remote_app_data()?;
        let has_request = |bag: &charm_sdk::DataBag| {
            ["database", "roles", "extensions"]
                .iter()
                .any(|k| bag.get(k).is_some_and(|v| !v.is_empty()))
        };
        if has_request(&app) || relation.remote_units().is_empty() {
            return Ok(DatabaseRequest::from_fields(
                relation.id(),
                relation.remote_app(),
                |k| app.get(k).map(str::to_string),
            ));
        }
        for unit in relation.remote_units() {
            let bag = relation.unit_data(unit)?;
            if has_request(&bag) {
                return Ok(DatabaseRequest::from_fields(relation.id(), unit, |k| {
                    bag.get(k).map(str::to_string)
                }));
            }
        }
        Ok(Ok(DatabaseRequest::default()))
    }

    /// The client's user and password on a relation: `juju_<client>` and a password made
    /// by `generate` the first time, kept in leader data until the relation is broken.
    /// Leader only.
    pub fn credentials(
        &self,
        model: &Model,
        relation: u32,
        generate: impl FnOnce() -> String,
    ) -> charm_sdk::Result<Credentials> {
        let rel = model.relation_by_id(relation)?;
        let key = password_key(relation);
        let password = match model.leader_data().get(&key) {
            Some(password) => password,
            None => {
                let password = generate();
                model.leader_data().set(&key, &password)?;
                password
            }
        };
        Ok(Credentials {
            user: user_name(rel.remote_app()),
            password,
        })
    }

    /// Publishes a client's connections on its relation: the master and standbys, the
    /// connection details, the client units let in, and the request echoed, which tells
    /// the client it was applied. Keys whose value is unchanged are not rewritten, so
    /// publishing the same thing again wakes nobody. Leader only.
    pub fn publish(
        &self,
        model: &Model,
        relation: u32,
        request: &DatabaseRequest,
        publication: &Publication,
    ) -> charm_sdk::Result<()> {
        let rel = model.relation_by_id(relation)?;
        let master = &publication.master;
        let standbys: Vec<String> = publication
            .standbys
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut fields: Vec<(&str, String)> = vec![
            ("master", master.to_string()),
            ("standbys", standbys.join("\n")),
            ("host", master.host_name().unwrap_or_default().to_string()),
            ("port", master.get("port").unwrap_or_default().to_string()),
            ("user", master.get("user").unwrap_or_default().to_string()),
            (
                "password",
                master.get("password").unwrap_or_default().to_string(),
            ),
            ("allowed-units", rel.remote_units().join(" ")),
            ("version", publication.version.clone().unwrap_or_default()),
        ];
        fields.extend(request.to_fields());
        let bag = rel.local_app_data()?;
        for (key, value) in &fields {
            set_if_changed(&bag, key, value)?;
        }
        // Published with the units of the moment: no comparison is owed.
        set_owed(model, relation, false)
    }

    /// Emits what one client needs, if anything.
    fn check(&self, model: &Model, relation: &Relation, units: Units) -> HookResult {
        let compare = units == Units::Compare || is_owed(model, relation.id())?;
        let request = match self.request(relation)? {
            Ok(request) => request,
            Err(bad) => {
                charm_sdk::log::warning(&bad.to_string());
                // The units were not compared: the next relation-changed compares them.
                if compare {
                    set_owed(model, relation.id(), true)?;
                }
                return Ok(model.emit(&self.source(), &ProviderEvent::InvalidRequest(bad))?);
            }
        };
        let published = relation.local_app_data()?;
        let echoed = request
            .to_fields()
            .into_iter()
            .all(|(k, v)| published.get(k).unwrap_or_default() == v);
        let current = published.get("master").is_some()
            && echoed
            && (!compare
                || same(
                    published.get("allowed-units").unwrap_or_default(),
                    &relation.remote_units().join(" "),
                ));
        // Owed until `publish` answers (in this hook, or later for a deferred event).
        if compare {
            set_owed(model, relation.id(), !current)?;
        }
        if !current {
            model.emit(
                &self.source(),
                &ProviderEvent::DatabaseRequested {
                    relation: relation.id(),
                    remote_app: relation.remote_app().to_string(),
                    request,
                },
            )?;
        }
        Ok(())
    }
}

/// Whether a check compares the client units let in with the relation's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Units {
    /// The relation's units may have changed, or a missed change is caught up (a unit
    /// joined or departed, leadership arrived, upgrade-charm, update-status): compare them
    /// with what was published.
    Compare,
    /// A relation-changed: a unit that comes or goes has a joined or departed hook of its
    /// own, which compares (the hook's snapshot may already show it, before that hook).
    /// Compared anyway while an earlier comparison is owed.
    Unchanged,
}

/// The unit's stored-state key, per relation, set while a comparison of the client units
/// is owed (see [`Provider::observe`]).
fn units_owed_key(relation: u32) -> String {
    format!("interface.pgsql.units-owed.{relation}")
}

/// Whether a comparison of `relation`'s client units is owed.
fn is_owed(model: &Model, relation: u32) -> charm_sdk::Result<bool> {
    Ok(model
        .stored()
        .get::<bool>(&units_owed_key(relation))?
        .is_some())
}

/// Marks a comparison of `relation`'s client units owed or settled, writing only a change.
fn set_owed(model: &Model, relation: u32, owed: bool) -> charm_sdk::Result<()> {
    match (is_owed(model, relation)?, owed) {
        (false, true) => model.stored().set(&units_owed_key(relation), &true)?,
        (true, false) => model.stored().remove(&units_owed_key(relation)),
        _ => {}
    }
    Ok(())
}

/// The user PostgreSQL's charm makes for a client application.
fn user_name(app: &str) -> String {
    let safe: String = app
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("juju_{safe}")
}

fn password_key(relation: u32) -> String {
    format!("interface.pgsql.password.{relation}")
}
