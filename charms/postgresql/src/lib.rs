//! PostgreSQL, as the seed's `cs:~postgresql-charmers/postgresql`: provides `db` (interface
//! `pgsql`) through the `charm-pgsql` library. Its leader gives each client application
//! its own user and password, and publishes the `master` connection string to the
//! database the client asked for (the `database` option by default).

use charm_pgsql::{ConnectionString, DatabaseRequest, Provider, ProviderEvent, Publication};
use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The PostgreSQL charm.
pub struct Postgresql;

/// The `db` endpoint's PostgreSQL side.
const DB: Provider = Provider::new("db");

/// Leader data key of the superuser's password.
const PASSWORD_KEY: &str = "password";

/// The PostgreSQL version the image runs.
const VERSION: &str = "12";

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
                "The database offered to clients that ask for none",
            )
    }

    fn observe(model: &Model, event: &Event) -> HookResult {
        DB.observe(model, event)
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::Custom(custom) => match DB.event(&custom).transpose()? {
                Some(ProviderEvent::DatabaseRequested {
                    relation, request, ..
                }) => publish(model, relation, &request)?,
                // The library has logged it; the client's next change is checked again.
                Some(ProviderEvent::InvalidRequest(_)) | None => {}
            },
            Event::LeaderElected | Event::ConfigChanged | Event::UpgradeCharm => {
                if model.is_leader() {
                    ensure_password(model)?;
                    set_pod_spec(model)?;
                    // A new port or default database reaches every client.
                    for relation in model.relations("db")? {
                        if let Ok(request) = DB.request(&relation)? {
                            publish(model, relation.id(), &request)?;
                        }
                    }
                }
                model.unit().set_status(Status::active(""))?;
            }
            Event::Start => {
                model.unit().set_workload_version(VERSION);
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

/// A fresh password: 128 bits from the host's secure random source.
fn generate_password() -> String {
    charm_sdk::random::hex(16)
}

/// Publishes a client's connection: its database, its own user and password.
fn publish(model: &Model, relation: u32, request: &DatabaseRequest) -> HookResult {
    let port: i64 = model.config().get("port")?;
    let default_db: String = model.config().get("database")?;
    let credentials = DB.credentials(model, relation, generate_password)?;
    // The leader publishes, and runs the one database: its own address is the master's.
    let network = model.network("db")?;
    let master = ConnectionString::new()
        .host(network.ingress_address().unwrap_or_default())
        .port(u16::try_from(port)?)
        .dbname(request.database.clone().unwrap_or(default_db))
        .user(credentials.user)
        .password(credentials.password);
    DB.publish(
        model,
        relation,
        request,
        &Publication::new(master).version(VERSION),
    )?;
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
