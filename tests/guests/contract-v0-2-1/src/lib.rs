//! A charm built straight on the frozen `juju:charm@0.2.1` bindings (no SDK), as a charm
//! compiled before 0.2.2 is: the host must link its `@0.2.1` imports to the current ones and
//! hand it a relation's units as 0.2.1 did, a list of names (`relation-get`).
//!
//! On relation-changed it writes to its own unit bag `units` (the remote units, joined by
//! commas, as `relation-get` listed them), `app-data` (the remote application's bag as
//! `app-data` gives it, whole: each key and its value's length, joined by commas) and
//! `address` (its `network-get` for the relation's endpoint, a 0.2.1 import: its ingress
//! addresses, joined by commas).

// The world `use`s `context`, `event` and `metadata`, so the bindings define them here.
// Their generated functions take as many arguments as the WIT's records have fields.
#![allow(clippy::too_many_arguments)]
wit_bindgen::generate!({ path: "../../../wit/0.2.1", world: "juju:charm/charm@0.2.1" });

use juju::charm::types::{RelationMeta, RelationRole};
use juju::charm::{network, relations};

struct ContractV021;

impl Guest for ContractV021 {
    fn metadata() -> Metadata {
        Metadata {
            name: "contract-v0-2-1".into(),
            summary: "Built against juju:charm@0.2.1".into(),
            relations: vec![RelationMeta {
                name: "db".into(),
                role: RelationRole::Requires,
                interface: "pgsql".into(),
                limit: None,
            }],
            config: Vec::new(),
            actions: Vec::new(),
        }
    }

    fn handle_hook(context: Context, event: Event) -> Result<(), String> {
        if let Event::RelationChanged(rel) = event {
            let relation = relations::relation_get(rel.id).map_err(|e| format!("{e:?}"))?;
            let write = |key: &str, value: String| {
                relations::set_unit_data(rel.id, &context.unit, key, Some(&value))
                    .map_err(|e| format!("{e:?}"))
            };
            write("units", relation.remote_units.join(","))?;
            let app =
                relations::app_data(rel.id, &relation.remote_app).map_err(|e| format!("{e:?}"))?;
            let lens: Vec<String> = app
                .iter()
                .map(|(k, v)| format!("{k}:{}", v.len()))
                .collect();
            write("app-data", lens.join(","))?;
            let address = network::network_get(&rel.name).map_err(|e| format!("{e:?}"))?;
            write("address", address.ingress_addresses.join(","))?;
        }
        Ok(())
    }
}

export!(ContractV021);
