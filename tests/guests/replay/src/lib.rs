//! A component of the `charm` world, built straight on the generated bindings (no SDK),
//! that makes the host calls its action `replay` lists and does nothing else: the hook
//! benchmarks replay another charm's hook through it to time that hook's host calls
//! without the charm's logic. Every other hook does nothing.
//!
//! The action's parameters hold one call a line, the call's name and arguments separated
//! by tabs (`app-data\t3\tpostgresql`). A call the host refuses fails the hook. The
//! metadata declares discourse's `db` endpoint and options, so that a replay of discourse
//! is answered as discourse is.

// The world `use`s `context`, `event` and `metadata`, so the bindings define them here.
// Their generated functions take as many arguments as the WIT's records have fields.
#![allow(clippy::too_many_arguments)]
wit_bindgen::generate!({ path: "../../../wit/0.2.0", world: "juju:charm/charm@0.2.0" });

use std::hint::black_box;

use juju::charm::types::{
    ConfigOption, Error, OptionType, RelationMeta, RelationRole, Status, StatusKind,
};
use juju::charm::{config, leadership, pod, relations, state, status};

struct Replay;

impl Guest for Replay {
    fn metadata() -> Metadata {
        let option = |name: &str| ConfigOption {
            name: name.into(),
            kind: OptionType::String,
            default: None,
            description: String::new(),
        };
        Metadata {
            name: "replay".into(),
            summary: "Makes the host calls it is given".into(),
            relations: vec![RelationMeta {
                name: "db".into(),
                role: RelationRole::Requires,
                interface: "pgsql".into(),
                limit: Some(1),
            }],
            config: vec![option("image"), option("external_hostname")],
            actions: Vec::new(),
        }
    }

    fn handle_hook(_context: Context, event: Event) -> Result<(), String> {
        match &event {
            Event::Action(action) if action.name == "replay" => {
                action.params.lines().try_for_each(call)
            }
            _ => Ok(()),
        }
    }
}

/// Makes one call of a replay: `name\targ...`.
fn call(line: &str) -> Result<(), String> {
    let mut args = line.split('\t');
    let name = args.next().unwrap_or_default();
    let mut arg = || {
        args.next()
            .ok_or_else(|| format!("replay: {name} lacks an argument"))
    };
    let id = |text: &str| {
        text.parse::<u32>()
            .map_err(|_| format!("replay: {name}: bad relation id {text:?}"))
    };
    let refused = |e: Error| format!("replay: {name}: {e:?}");
    match name {
        "relation-get" => drop(black_box(
            relations::relation_get(id(arg()?)?).map_err(refused)?,
        )),
        "app-data" => {
            let id = id(arg()?)?;
            drop(black_box(relations::app_data(id, arg()?).map_err(refused)?));
        }
        "unit-data" => {
            let id = id(arg()?)?;
            drop(black_box(
                relations::unit_data(id, arg()?).map_err(refused)?,
            ));
        }
        "config-get" => drop(black_box(config::config_get(arg()?).map_err(refused)?)),
        "state-get" => drop(black_box(state::get(arg()?))),
        "leader-get" => drop(black_box(leadership::leader_get(arg()?))),
        "set-pod-spec" => pod::set_pod_spec(arg()?, None).map_err(refused)?,
        "set-unit-status" => {
            let status = Status {
                kind: StatusKind::Active,
                message: arg()?.into(),
            };
            status::set_unit_status(&status).map_err(refused)?;
        }
        other => return Err(format!("replay: no call {other:?}")),
    }
    Ok(())
}

export!(Replay);
