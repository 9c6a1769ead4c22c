//! A charm to copy. It runs one web container whose greeting comes from config, waits for
//! a database on `db`, and answers a `greet` action.

use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The charm. Its metadata is declared once, here, and embedded in the `.wasm`.
pub struct Template;

impl Charm for Template {
    fn metadata() -> Metadata {
        Metadata::new("template")
            .summary("A charm to copy")
            .requires("db", "pgsql")
            .string_option("greeting", Some("hello"), "What the web page says")
            .action("greet", "Answers with the greeting")
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::Action(action) if action.name == "greet" => {
                let greeting: String = model.config().get("greeting")?;
                action.set_result("greeting", &greeting)?;
            }
            Event::ConfigChanged
            | Event::LeaderElected
            | Event::RelationChanged(_)
            | Event::RelationBroken(_) => configure(model)?,
            _ => {}
        }
        Ok(())
    }
}

fn configure(model: &Model) -> HookResult {
    let master = match model.relation("db")? {
        Some(db) => db.remote_app_data()?.get("master").map(str::to_owned),
        None => None,
    };
    let Some(master) = master else {
        model
            .unit()
            .set_status(Status::waiting("waiting for database"))?;
        return Ok(());
    };
    if model.is_leader() {
        let greeting: String = model.config().get("greeting")?;
        let spec = PodSpec::new().container(
            Container::new("web", "nginx:1.25")
                .port("http", 80)
                .env("GREETING", greeting)
                .env("DATABASE", master),
        );
        // Never refused for leadership once is_leader() said true in this hook.
        model.pod().set_spec(&spec)?;
    }
    model.unit().set_status(Status::active(""))?;
    Ok(())
}

charm_sdk::export_charm!(Template);
