//! What a hook may read: a unit's snapshot, built from the records a store holds.

use std::collections::BTreeMap;

use crate::error::{StoreError, not_found};
use crate::records::{RelationView, UnitSnapshot, app_of};
use crate::tx::ModelTx;

/// Everything a hook of `unit` may read, as `tx` has it: its application's effective config,
/// leader settings and status; its own status, stored state and leader-elected record; and
/// each relation it is in, with the other side's units (for peers, the other units), the
/// bags of those units and of this one, and both applications' bags.
pub fn snapshot<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
) -> Result<UnitSnapshot, StoreError> {
    let app = app_of(unit);
    let record = tx
        .unit(unit)?
        .ok_or_else(|| not_found(format!("unit {unit}")))?;
    let view = tx
        .app_view(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    let mut relations = BTreeMap::new();
    for rel in tx.relations_of(app)? {
        let (Some(local), Some(remote)) = (rel.local(app), rel.remote(app)) else {
            continue;
        };
        let mut remote_units = tx.units_of(&remote.app)?;
        remote_units.retain(|u| u != unit);
        let mut names: Vec<&str> = remote_units.iter().map(String::as_str).collect();
        names.push(unit);
        let unit_bags = names
            .iter()
            .map(|n| n.to_string())
            .zip(tx.unit_bags(rel.id, &names)?)
            .collect();
        let apps = [app, remote.app.as_str()];
        let app_bags = apps
            .iter()
            .map(|a| a.to_string())
            .zip(tx.app_bags(rel.id, &apps)?)
            .collect();
        relations.insert(
            rel.id,
            RelationView {
                id: rel.id,
                endpoint: local.endpoint.clone(),
                remote_app: remote.app.clone(),
                remote_units,
                unit_bags,
                app_bags,
            },
        );
    }
    Ok(UnitSnapshot {
        model: model.to_string(),
        unit: unit.to_string(),
        app: app.to_string(),
        config: view.config,
        relations,
        leader_data: view.leader_data,
        unit_status: record.status,
        app_status: view.status,
        stored: record.stored,
        elected_term: record.elected_term,
    })
}
