//! Which hooks a model change fires, as Juju fires them. The model's operations call them
//! inside the same atomic step as the change, so no fired hook is ever lost.

use crate::commit::CommitReceipt;
use crate::records::{Hook, RelationHook, RelationRecord, app_of};

/// The hooks a new unit runs first, in Juju's order (leader-elected, when the unit leads,
/// is put after install by its agent).
pub fn deploy_hooks() -> [Hook; 3] {
    [Hook::Install, Hook::ConfigChanged, Hook::Start]
}

/// The hooks a new relation fires: on every unit of each side, relation-created, then for
/// each remote unit relation-joined and relation-changed. `units_of` gives an application's
/// units in order.
pub fn relation_hooks(
    record: &RelationRecord,
    units_of: impl Fn(&str) -> crate::records::UnitNames,
) -> Vec<(String, Hook)> {
    let mut hooks = Vec::new();
    let sides: Vec<_> = record.endpoints.iter().collect();
    for local in &sides {
        let Some(remote) = record.remote(&local.app) else {
            continue;
        };
        let remote_units = units_of(&remote.app);
        for unit in units_of(&local.app).iter() {
            let hook = |remote_unit: Option<&String>| RelationHook {
                id: record.id,
                endpoint: local.endpoint.clone(),
                remote_app: remote.app.clone(),
                remote_unit: remote_unit.cloned(),
            };
            hooks.push((unit.clone(), Hook::RelationCreated(hook(None))));
            for remote_unit in remote_units.iter().filter(|r| *r != unit) {
                hooks.push((unit.clone(), Hook::RelationJoined(hook(Some(remote_unit)))));
                hooks.push((unit.clone(), Hook::RelationChanged(hook(Some(remote_unit)))));
            }
        }
        if sides.len() == 1 {
            break;
        }
    }
    hooks
}

/// The hooks `unit`'s commit fires on other units: relation-changed on the other side of
/// each bag that changed (about `unit` for its unit bag, about no unit for its application
/// bag), and leader-settings-changed on the application's other units when the leader
/// settings changed. A relation being removed fires nothing: its units are owed only their
/// relation-departed and relation-broken (Juju's uniter drops its pending changes).
pub fn follow_ups<'u, R: std::borrow::Borrow<RelationRecord>>(
    unit: &str,
    receipt: &CommitReceipt,
    relations: &[R],
    units_of: impl Fn(&str) -> &'u [String],
) -> Vec<(String, Hook)> {
    let app = app_of(unit);
    let mut hooks = Vec::new();
    let changed = receipt
        .unit_bags_changed
        .iter()
        .map(|id| (*id, Some(unit.to_string())))
        .chain(receipt.app_bags_changed.iter().map(|id| (*id, None)));
    for (id, remote_unit) in changed {
        let Some(rel) = relations
            .iter()
            .map(|r| r.borrow())
            .find(|r| r.id == id && !r.dying)
        else {
            continue;
        };
        let Some(remote) = rel.remote(app) else {
            continue;
        };
        for target in units_of(&remote.app) {
            if target == unit {
                continue;
            }
            let target = target.clone();
            let hook = RelationHook {
                id,
                endpoint: remote.endpoint.clone(),
                remote_app: app.to_string(),
                remote_unit: remote_unit.clone(),
            };
            hooks.push((target, Hook::RelationChanged(hook)));
        }
    }
    if receipt.leader_data_changed {
        for target in units_of(app) {
            if target != unit {
                hooks.push((target.clone(), Hook::LeaderSettingsChanged));
            }
        }
    }
    hooks
}

/// Whether `hook` coalesces into `queue` (the unit's queued hooks, in order) and so need not
/// be queued: an equal hook already waits there behind the first, which may be running.
pub fn coalesces(queue: &[Hook], hook: &Hook) -> bool {
    coalesces_with(queue, hook).is_some()
}

/// Where in `queue` (a unit's queued hooks, in order) the hook is that `hook` coalesces
/// with ([`coalesces`]), if any: a store that must check that hook is still queued when the
/// change applies (etcd's) depends on it, and on the first.
pub fn coalesces_with<'q>(queue: impl IntoIterator<Item = &'q Hook>, hook: &Hook) -> Option<usize> {
    queue
        .into_iter()
        .enumerate()
        .skip(1)
        .find(|(_, h)| *h == hook)
        .map(|(at, _)| at)
}
