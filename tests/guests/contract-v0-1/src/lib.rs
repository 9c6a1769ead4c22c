//! A charm as it was built against `juju:charm@0.1.0`, straight on that contract's generated
//! bindings: the host must keep running it, through the same model rules as a charm of the
//! current contract. Each hook touches a few imports whose types 0.2.0 re-declared (status,
//! config values, errors, relations), so a wrong conversion shows in what it writes.

// The world `use`s `context`, `event` and `metadata`, so the bindings define them here.
// Their generated functions take as many arguments as the WIT's records have fields.
#![allow(clippy::too_many_arguments)]
wit_bindgen::generate!({ path: "../../../wit/0.1.0", world: "juju:charm/charm@0.1.0" });

use juju::charm::types::{
    ActionMeta, ConfigOption, ConfigValue, Error, OptionType, RelationMeta, RelationRole, Status,
    StatusKind,
};
use juju::charm::{action, config, log, relations, state, status};

struct ContractV01;

impl Guest for ContractV01 {
    fn metadata() -> Metadata {
        Metadata {
            name: "contract-v0-1".into(),
            summary: "Built against juju:charm@0.1.0".into(),
            relations: vec![RelationMeta {
                name: "db".into(),
                role: RelationRole::Requires,
                interface: "pgsql".into(),
                limit: Some(1),
            }],
            config: vec![ConfigOption {
                name: "greeting".into(),
                kind: OptionType::String,
                default: Some(ConfigValue::String("hello".into())),
                description: "What the unit writes in its relation bag".into(),
            }],
            actions: vec![ActionMeta {
                name: "ping".into(),
                description: "Answers pong".into(),
            }],
        }
    }

    fn handle_hook(context: Context, event: Event) -> Result<(), String> {
        match event {
            Event::Install => {
                log::log(log::Level::Info, "installing under 0.1.0");
                state::set("installed", Some("yes"));
                status::set_unit_status(&Status {
                    kind: StatusKind::Active,
                    message: "installed under 0.1.0".into(),
                })
                .map_err(|e| format!("{e:?}"))?;
            }
            Event::RelationChanged(rel) => {
                let greeting = match config::config_get("greeting") {
                    Ok(Some(ConfigValue::String(s))) => s,
                    other => return Err(format!("greeting: {other:?}")),
                };
                let relation = relations::relation_get(rel.id).map_err(|e| format!("{e:?}"))?;
                let remote = rel.remote_unit.unwrap_or_default();
                let remote_bag =
                    relations::unit_data(rel.id, &remote).map_err(|e| format!("{e:?}"))?;
                let host = remote_bag
                    .into_iter()
                    .find(|(k, _)| k == "host")
                    .map(|(_, v)| v)
                    .unwrap_or_default();
                // A follower's write to its application bag: refused, with 0.1.0's error.
                let app_write = match relations::set_app_data(rel.id, &context.app, "k", Some("v"))
                {
                    Err(Error::NotLeader) => "not-leader".to_string(),
                    other => format!("{other:?}"),
                };
                // An undeclared option: refused, naming it.
                let unknown = match config::config_get("colour") {
                    Err(Error::UnknownConfigOption(name)) => name,
                    other => format!("{other:?}"),
                };
                for (key, value) in [
                    ("greeting", greeting),
                    ("remote-app", relation.remote_app),
                    ("remote-host", host),
                    ("app-write", app_write),
                    ("unknown-option", unknown),
                ] {
                    relations::set_unit_data(rel.id, &context.unit, key, Some(&value))
                        .map_err(|e| format!("{key}: {e:?}"))?;
                }
            }
            Event::Action(run) if run.name == "ping" => {
                action::log("pinged");
                action::set_results(&[("pong".to_string(), context.unit.clone())])
                    .map_err(|e| format!("{e:?}"))?;
            }
            _ => {}
        }
        Ok(())
    }
}

export!(ContractV01);
