//! Discourse, as the seed's `cs:~discourse-charmers/discourse`: requires `db` (interface
//! `pgsql`). On `db-relation-changed` the leader sets a pod spec whose environment carries
//! PostgreSQL's `master` connection string; other units do not. While the string is missing,
//! the unit waits.
//!
//! This is the hook that failed in Juju 2.9: `is-leader` answered true, then `set_pod_spec`
//! was refused with "not a leader" because a lease renewal timed out in between.

use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The Discourse charm.
pub struct Discourse;

impl Charm for Discourse {
    fn metadata() -> Metadata {
        Metadata::new("discourse")
            .summary("Discourse discussion forum")
            .requires("db", "pgsql")
            .string_option(
                "image",
                Some("discourse/discourse:2.6"),
                "The Discourse image",
            )
            .string_option(
                "external_hostname",
                Some("discourse.local"),
                "The forum's public host name",
            )
            .string_option("developer_emails", None, "Comma-separated admin e-mails")
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::RelationChanged(rel) if rel.name == "db" => configure_pod(model),
            Event::ConfigChanged | Event::LeaderElected | Event::UpgradeCharm => {
                configure_pod(model)
            }
            Event::RelationBroken(rel) if rel.name == "db" => {
                model
                    .unit()
                    .set_status(Status::blocked("needs a db relation"))?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// PostgreSQL's connection string, once its leader has published it.
fn master(model: &Model) -> HookResult<Option<String>> {
    let Some(db) = model.relation("db")? else {
        return Ok(None);
    };
    Ok(db.remote_app_data()?.get("master").map(str::to_owned))
}

fn configure_pod(model: &Model) -> HookResult {
    let Some(master) = master(model)? else {
        model
            .unit()
            .set_status(Status::waiting("waiting for database"))?;
        return Ok(());
    };
    if model.is_leader() {
        let image: String = model.config().get("image")?;
        let hostname: String = model.config().get("external_hostname")?;
        let spec = PodSpec::new().container(
            Container::new("discourse", image)
                .port("http", 3000)
                .env("DISCOURSE_HOSTNAME", hostname)
                .env("DISCOURSE_DB", master),
        );
        // In Juju 2.9 this is where "cannot set a pod spec as this unit is not a leader"
        // came from. Here a hook told it leads is never refused.
        model.pod().set_spec(&spec)?;
    }
    model.unit().set_status(Status::active(""))?;
    Ok(())
}

charm_sdk::export_charm!(Discourse);
