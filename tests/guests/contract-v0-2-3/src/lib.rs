//! A charm built straight on the frozen `juju:charm@0.2.3` bindings (no SDK), as a charm
//! compiled with the SDK before 0.2.4 is: the host must link its `@0.2.3` imports to the
//! current ones and answer the calls that SDK made.
//!
//! On relation-changed it writes to its own unit bag `units` (the remote units as
//! `relation-get-packed` packs them, joined by commas), `app-data` (the remote
//! application's bag as `app-data-inline` gives it with values over 16 bytes left out: each
//! key and its value's length, or `-` for one left out) and `master` (that key's value, as
//! `app-data-value` gives it).

// The world `use`s `context`, `event` and `metadata`, so the bindings define them here.
// Their generated functions take as many arguments as the WIT's records have fields.
#![allow(clippy::too_many_arguments)]
wit_bindgen::generate!({ path: "../../../wit/0.2.3", world: "juju:charm/charm@0.2.3" });

use juju::charm::relations;
use juju::charm::types::{RelationMeta, RelationRole};

struct ContractV023;

impl Guest for ContractV023 {
    fn metadata() -> Metadata {
        Metadata {
            name: "contract-v0-2-3".into(),
            summary: "Built against juju:charm@0.2.3".into(),
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
            let relation = relations::relation_get_packed(rel.id).map_err(|e| format!("{e:?}"))?;
            let write = |key: &str, value: String| {
                relations::set_unit_data(rel.id, &context.unit, key, Some(&value))
                    .map_err(|e| format!("{e:?}"))
            };
            let units: Vec<&str> = relation.remote_units.lines().collect();
            write("units", units.join(","))?;
            let app = relations::app_data_inline(rel.id, &relation.remote_app, 16)
                .map_err(|e| format!("{e:?}"))?;
            let lens: Vec<String> = app
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => format!("{k}:{}", v.len()),
                    None => format!("{k}:-"),
                })
                .collect();
            write("app-data", lens.join(","))?;
            let master = relations::app_data_value(rel.id, &relation.remote_app, "master")
                .map_err(|e| format!("{e:?}"))?;
            write("master", master.unwrap_or_default())?;
        }
        Ok(())
    }
}

export!(ContractV023);
