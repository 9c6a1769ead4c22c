//! Discourse, as the seed's `cs:~discourse-charmers/discourse`: requires `db` (interface
//! `pgsql`) through the `charm-pgsql` library, as the seed's charm used ops' `pgsql`
//! library. The library observes `db-relation-*` and emits `master-changed`; the leader
//! then sets a pod spec whose environment carries the master's connection string. While
//! there is no master, the unit waits.
//!
//! This is the hook that failed in Juju 2.9: `is-leader` answered true, then `set_pod_spec`
//! was refused with "not a leader" because a lease renewal timed out in between.

use charm_pgsql::{DatabaseRequest, Requirer, RequirerEvent};
use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The Discourse charm.
pub struct Discourse;

/// The `db` endpoint's client side.
const DB: Requirer = Requirer::new("db");

/// The database Discourse asks PostgreSQL for.
const DATABASE: &str = "discourse";

/// The image run unless the operator sets `image`.
const DEFAULT_IMAGE: &str = if cfg!(feature = "next-release") {
    "discourse/discourse:2.7"
} else {
    "discourse/discourse:2.6"
};

impl Charm for Discourse {
    fn metadata() -> Metadata {
        let metadata = Metadata::new("discourse")
            .summary("Discourse discussion forum")
            // One forum, one database: the pod spec carries a single master.
            .requires("db", "pgsql")
            .limit(1)
            .string_option("image", Some(DEFAULT_IMAGE), "The Discourse image")
            .string_option(
                "external_hostname",
                Some("discourse.local"),
                "The forum's public host name",
            )
            .string_option("developer_emails", None, "Comma-separated admin e-mails");
        if cfg!(feature = "next-release") {
            metadata.string_option("plugins", Some(""), "Comma-separated plugin names")
        } else {
            metadata
        }
    }

    fn observe(model: &Model, event: &Event) -> HookResult {
        DB.observe(model, event)
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::Custom(custom) => match DB.event(&custom).transpose()? {
                Some(RequirerEvent::DatabaseJoined { relation, .. }) if model.is_leader() => {
                    DB.request(model, relation, &DatabaseRequest::database(DATABASE))?;
                }
                Some(RequirerEvent::MasterChanged { .. } | RequirerEvent::InvalidData(_)) => {
                    configure(model)?
                }
                _ => {}
            },
            Event::LeaderElected | Event::UpgradeCharm if model.is_leader() => {
                // A new leader makes sure the request stands (idempotent), then reconciles.
                for db in model.relations("db")? {
                    DB.request(model, db.id(), &DatabaseRequest::database(DATABASE))?;
                }
                configure(model)?
            }
            // The leader reconciles on every change, not only when the master moved: a unit
            // that became leader within a term it already held gets no leader-elected.
            Event::ConfigChanged | Event::LeaderElected | Event::UpgradeCharm => configure(model)?,
            Event::RelationChanged(rel) if rel.name == "db" && model.is_leader() => {
                configure(model)?
            }
            Event::RelationBroken(rel) if rel.name == "db" => {
                model
                    .unit()
                    .set_status(Status::blocked("needs a db relation"))?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Sets the pod spec (as leader) and the status from PostgreSQL's master, once it is ready
/// for this forum; blocked on data from PostgreSQL that does not parse.
fn configure(model: &Model) -> HookResult {
    let databases = DB.databases(model)?;
    let Some(master) = databases.iter().find_map(|db| db.master.as_ref()) else {
        let status = match databases.iter().flat_map(|db| &db.problems).next() {
            Some(bad) => Status::blocked(format!("bad data from {}: {}", bad.owner, bad.reason)),
            None => Status::waiting("waiting for database"),
        };
        model.unit().set_status(status)?;
        return Ok(());
    };
    if model.is_leader() {
        let image: String = model.config().get("image")?;
        let hostname: String = model.config().get("external_hostname")?;
        let mut container = Container::new("discourse", image)
            .port("http", 3000)
            .env("DISCOURSE_HOSTNAME", hostname)
            .env("DISCOURSE_DB", master.as_str());
        if cfg!(feature = "next-release") {
            let plugins: String = model.config().get("plugins")?;
            container = container.env("DISCOURSE_PLUGINS", plugins);
        }
        let spec = PodSpec::new().container(container);
        // In Juju 2.9 this is where "cannot set a pod spec as this unit is not a leader"
        // came from. Here a hook told it leads is never refused.
        model.pod().set_spec(&spec)?;
    }
    model.unit().set_status(Status::active(""))?;
    Ok(())
}

charm_sdk::export_charm!(Discourse);
