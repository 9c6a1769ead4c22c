//! PostgreSQL, as the seed's `cs:~postgresql-charmers/postgresql`: provides `db` (interface
//! `pgsql`); its leader publishes the `master` connection string in its application bag of
//! every `db` relation.

use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The PostgreSQL charm.
pub struct Postgresql;

const PASSWORD_KEY: &str = "password";

impl Charm for Postgresql {
    fn metadata() -> Metadata {
        Metadata::new("postgresql")
            .summary("PostgreSQL database")
            .provides("db", "pgsql")
            .string_option("image", Some("postgres:12"), "The PostgreSQL image")
            .int_option("port", Some(5432), "The port PostgreSQL listens on")
            .string_option(
                "database",
                Some("discourse"),
                "The database offered to clients",
            )
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::LeaderElected | Event::ConfigChanged | Event::UpgradeCharm => {
                if model.is_leader() {
                    ensure_password(model)?;
                    set_pod_spec(model)?;
                    publish_master(model)?;
                }
                model.unit().set_status(Status::active(""))?;
            }
            Event::RelationJoined(rel) | Event::RelationChanged(rel)
                if rel.name == "db" && model.is_leader() =>
            {
                publish_master(model)?;
            }
            Event::Start => {
                model.unit().set_workload_version("12");
                model.unit().set_status(Status::active(""))?;
            }
            _ => {}
        }
        Ok(())
    }
}

fn ensure_password(model: &Model) -> HookResult {
    let data = model.leader_data();
    if data.get(PASSWORD_KEY).is_none() {
        data.set(PASSWORD_KEY, &generate_password())?;
    }
    Ok(())
}

/// A fresh password from the host's random source (hash maps are seeded from it).
fn generate_password() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(0u8);
    let b = RandomState::new().hash_one(1u8);
    format!("{a:016x}{b:016x}")
}

fn connection_string(model: &Model) -> HookResult<String> {
    let port: i64 = model.config().get("port")?;
    let database: String = model.config().get("database")?;
    let password = model.leader_data().get(PASSWORD_KEY).unwrap_or_default();
    let host = format!("{}-0.{}-endpoints", model.app().name(), model.app().name());
    Ok(format!(
        "host={host} port={port} dbname={database} user={database} password={password}"
    ))
}

fn publish_master(model: &Model) -> HookResult {
    let master = connection_string(model)?;
    for rel in model.relations("db")? {
        let mut bag = rel.local_app_data()?;
        if bag.get("master") != Some(master.as_str()) {
            bag.set("master", &master)?;
        }
    }
    Ok(())
}

fn set_pod_spec(model: &Model) -> HookResult {
    let image: String = model.config().get("image")?;
    let port: i64 = model.config().get("port")?;
    let password = model.leader_data().get(PASSWORD_KEY).unwrap_or_default();
    let spec = PodSpec::new().container(
        Container::new("postgresql", image)
            .port("pgsql", u16::try_from(port)?)
            .env("POSTGRES_PASSWORD", password),
    );
    model.pod().set_spec(&spec)?;
    Ok(())
}

charm_sdk::export_charm!(Postgresql);
