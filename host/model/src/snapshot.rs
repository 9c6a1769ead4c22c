//! What a hook may read: a unit's snapshot, built from the records a store holds.

use std::collections::BTreeMap;

use crate::error::{StoreError, not_found};
pub use crate::lifecycle::Runs;
use crate::network::{reads_as, with_network_keys};
use crate::operations::live_units;
use crate::records::{Hook, RelationId, RelationView, SharedBag, UnitNames, UnitSnapshot, app_of};
use crate::tx::ModelTx;

/// Which units' bags a snapshot holds, in each relation. The unit's own bag and both
/// applications' bags are always there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BagsRead<'a> {
    /// Every remote unit's bag.
    All,
    /// The remote units' bags only in relations with at most this many remote units: in
    /// larger ones a hook reads those it asks for as it runs ([`RelationView::unit_bags`]
    /// holds those read), so that a unit related to a thousand others reads and checks the
    /// few bags it looks at, not a thousand, while a small relation costs no more reads.
    UpTo(usize),
    /// The bags this snapshot holds: to check that what a hook read is unchanged.
    As(&'a UnitSnapshot),
}

/// Everything a hook of `unit` may read, as `tx` has it: its application's effective config,
/// leader settings and status; its own status, stored state and leader-elected record; and
/// each relation it is in, with the other side's live units (for peers, the other units), the
/// bags of those units and of this one, and both applications' bags.
pub fn snapshot<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
) -> Result<UnitSnapshot, StoreError> {
    snapshot_of(tx, model, unit, BagsRead::All)
}

/// [`snapshot`], with the remote units' bags `bags` says.
pub fn snapshot_of<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
    bags: BagsRead<'_>,
) -> Result<UnitSnapshot, StoreError> {
    snapshot_for(tx, model, unit, bags, Runs::Head)
}

/// [`snapshot_of`] for the hook that `runs`: the head of the unit's queue, or one its
/// agent runs before it.
pub fn snapshot_for<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
    bags: BagsRead<'_>,
    runs: Runs,
) -> Result<UnitSnapshot, StoreError> {
    let app = app_of(unit);
    let record = tx
        .unit(unit)?
        .ok_or_else(|| not_found(format!("unit {unit}")))?;
    let view = tx
        .app_view(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    // A unit being removed, or a relation being removed, has no remote units left: they
    // departed (Juju shows the departing unit in no relation's list either).
    let leaving = tx.unit_dying(unit)?;
    // Juju's order ([`crate::lifecycle`]): no relation during install, a relation from its
    // relation-created on, a remote unit from its relation-joined on.
    let not_yet = tx.not_yet_seen(unit, runs)?;
    let mut relations = BTreeMap::new();
    let related = if not_yet.installing {
        Vec::new()
    } else {
        tx.relations_of(app)?
    };
    for rel in related {
        let (Some(local), Some(remote)) = (rel.local(app), rel.remote(app)) else {
            continue;
        };
        if not_yet.relations.contains(&rel.id)
            || ((leaving || rel.dying) && !not_yet.still_in_scope(rel.id))
        {
            continue;
        }
        let mut remote_units = if leaving || rel.dying {
            UnitNames::default()
        } else {
            live_units(tx, &remote.app)?
        };
        if !not_yet.remote_units.is_empty()
            && remote_units
                .iter()
                .any(|u| not_yet.remote_units.contains(&(rel.id, u.clone())))
        {
            remote_units = remote_units
                .iter()
                .filter(|u| !not_yet.remote_units.contains(&(rel.id, (*u).clone())))
                .cloned()
                .collect();
        }
        if remote_units.contains(unit) {
            // A peer relation: the other units (a new list; the application's is shared).
            remote_units = remote_units
                .iter()
                .filter(|u| *u != unit)
                .cloned()
                .collect();
        }
        let mut names: Vec<&str> = match bags {
            BagsRead::All => remote_units.iter().map(String::as_str).collect(),
            BagsRead::UpTo(most) if remote_units.len() <= most => {
                remote_units.iter().map(String::as_str).collect()
            }
            BagsRead::UpTo(_) => Vec::new(),
            BagsRead::As(read) => read
                .relations
                .get(&rel.id)
                .map(|view| {
                    view.unit_bags
                        .keys()
                        .map(String::as_str)
                        .filter(|n| *n != unit)
                        .collect()
                })
                .unwrap_or_default(),
        };
        names.push(unit);
        let unit_bags = match bags {
            // Checking a hook's read: a bag it saw unchanged is that same bag.
            BagsRead::As(read) => {
                let seen = read.relations.get(&rel.id).map(|view| &view.unit_bags);
                names
                    .iter()
                    .zip(tx.unit_bags(rel.id, &names)?)
                    .map(|(name, stored)| {
                        let bag = match seen.and_then(|bags| bags.get(*name)) {
                            Some(seen) if reads_as(&stored, seen, model, name) => seen.clone(),
                            _ => with_network_keys(stored, model, name),
                        };
                        (name.to_string(), bag)
                    })
                    .collect()
            }
            _ => unit_bags_seen(tx, model, rel.id, &names)?,
        };
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
        module: view.module,
    })
}

/// The bags of `units` in relation `id`, as a hook reads them: with the network keys the
/// host sets ([`with_network_keys`]).
fn unit_bags_seen<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    id: RelationId,
    units: &[&str],
) -> Result<BTreeMap<String, SharedBag>, StoreError> {
    Ok(units
        .iter()
        .map(|unit| unit.to_string())
        .zip(unit_bags(tx, model, id, units)?)
        .collect())
}

/// The bags of `units` in relation `id` as a hook reads them, in the order of `units`: the
/// rest of a large relation's bags, for a hook reading them one after another.
pub fn unit_bags<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    id: RelationId,
    units: &[&str],
) -> Result<Vec<SharedBag>, StoreError> {
    tx.unit_bags_seen(model, id, units)
}

/// `unit`'s bag in relation `id` as a hook reads it (empty but for the network keys if it
/// has none): one bag a hook asks for as it runs ([`BagsRead::UpTo`]).
pub fn unit_bag<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    id: RelationId,
    unit: &str,
) -> Result<SharedBag, StoreError> {
    Ok(unit_bags_seen(tx, model, id, &[unit])?
        .remove(unit)
        .unwrap_or_default())
}

/// What a hook read: its unit's snapshot and its application's pod spec revision. Its
/// commit checks, in the commit's own atomic step, that the store would read the same now
/// ([`crate::commit::commit`]): only the unit's own inputs, so that a busy model's other
/// units do not make its commits conflict.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HookRead {
    /// The snapshot the hook ran on.
    pub snapshot: UnitSnapshot,
    /// The application's pod spec revision then.
    pub pod_spec_revision: Option<u64>,
}

/// What a hook of `unit` reads, as `tx` has it ([`snapshot`], and the pod spec revision).
pub fn hook_read<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
) -> Result<HookRead, StoreError> {
    hook_read_of(tx, model, unit, BagsRead::All)
}

/// [`hook_read`], with the remote units' bags `bags` says.
pub fn hook_read_of<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
    bags: BagsRead<'_>,
) -> Result<HookRead, StoreError> {
    hook_read_for(tx, model, unit, bags, Runs::Head)
}

/// [`hook_read_of`] for the hook that `runs` ([`snapshot_for`]).
pub fn hook_read_for<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
    bags: BagsRead<'_>,
    runs: Runs,
) -> Result<HookRead, StoreError> {
    let snapshot = snapshot_for(tx, model, unit, bags, runs)?;
    Ok(HookRead {
        snapshot,
        pod_spec_revision: tx.pod_spec_revision(app_of(unit))?,
    })
}

/// A unit as `charm-host show-unit` shows it: what its hooks see, and its agent's state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitDetails {
    /// What its next hook would see: relation bags, leader data, stored state, statuses.
    pub snapshot: UnitSnapshot,
    /// Its workload version.
    pub workload_version: String,
    /// The error of its failing hook, if one is failing.
    pub hook_error: Option<String>,
    /// Whether it is being removed.
    pub dying: bool,
    /// Whether it holds its application's lease now.
    pub leader: bool,
    /// The hooks queued on it, in order.
    pub queued: Vec<Hook>,
}

/// `unit` as `tx` has it, read in one step.
pub fn unit_details<T: ModelTx + ?Sized>(
    tx: &mut T,
    model: &str,
    unit: &str,
) -> Result<UnitDetails, StoreError> {
    let snapshot = snapshot(tx, model, unit)?;
    let app = app_of(unit);
    let record = tx
        .unit(unit)?
        .ok_or_else(|| not_found(format!("unit {unit}")))?;
    Ok(UnitDetails {
        snapshot,
        workload_version: record.workload_version,
        hook_error: record.hook_error,
        dying: tx.unit_dying(unit)?,
        leader: tx.live_lease(app)?.is_some_and(|l| l.unit() == unit),
        queued: tx.queued_hooks(unit)?.unwrap_or_default(),
    })
}
