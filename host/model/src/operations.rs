//! The model's changes other than a hook's commit: each checks, writes, and queues the
//! hooks it fires, in one atomic step of the store.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::error::{StoreError, not_found};
use crate::records::{ApplicationRecord, Hook, QueuedHook, RelationEndpoint, RelationRecord};
use crate::routing::{coalesces, deploy_hooks, relation_hooks};
use crate::tx::ModelTx;

/// Adds an application. An existing one with the same name is an error.
pub fn add_application<T: ModelTx + ?Sized>(
    tx: &mut T,
    record: ApplicationRecord,
) -> Result<(), StoreError> {
    if tx.app_exists(&record.name)? {
        return Err(StoreError::AlreadyExists(format!(
            "application {}",
            record.name
        )));
    }
    tx.create_application(record)
}

/// Adds the next unit of `app` (`app/0`, `app/1`, ...; a number is never reused) and queues
/// its first hooks ([`deploy_hooks`]). Returns its name.
pub fn add_unit<T: ModelTx + ?Sized>(tx: &mut T, app: &str) -> Result<String, StoreError> {
    let number = tx
        .next_unit_number(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    let name = format!("{app}/{number}");
    tx.create_unit(app, number, &name)?;
    enqueue(tx, deploy_hooks().map(|h| (name.clone(), h)))?;
    Ok(name)
}

/// Relates two endpoints (or one, for peers) and queues the hooks that fires
/// ([`relation_hooks`]). The same endpoints in either order are the same relation, which
/// exists at most once. Returns the relation and the hooks queued.
pub fn add_relation<T: ModelTx + ?Sized>(
    tx: &mut T,
    interface: &str,
    endpoints: Vec<RelationEndpoint>,
) -> Result<(RelationRecord, Vec<QueuedHook>), StoreError> {
    for e in &endpoints {
        if !tx.app_exists(&e.app)? {
            return Err(not_found(format!("application {}", e.app)));
        }
    }
    // Every relation of these endpoints is one of the first application's.
    let first = endpoints.first().map_or("", |e| e.app.as_str());
    let same = |r: &RelationRecord| {
        r.endpoints.len() == endpoints.len() && r.endpoints.iter().all(|e| endpoints.contains(e))
    };
    if let Some(existing) = tx.relations_of(first)?.iter().find(|r| same(r)) {
        return Err(StoreError::AlreadyExists(format!(
            "relation {}",
            existing.id
        )));
    }
    let record = RelationRecord {
        id: tx.next_relation_id()?,
        interface: interface.to_string(),
        endpoints,
    };
    tx.create_relation(record.clone())?;
    let units = units_by_app(tx, record.endpoints.iter().map(|e| e.app.as_str()))?;
    let hooks = relation_hooks(&record, |app| units.get(app).cloned().unwrap_or_default());
    let queued = enqueue(tx, hooks)?;
    Ok((record, queued))
}

/// The units of each of `apps`, read once each, for the routing rules to look up.
pub(crate) fn units_by_app<'a, T: ModelTx + ?Sized>(
    tx: &mut T,
    apps: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<&'a str, Vec<String>>, StoreError> {
    let mut units = BTreeMap::new();
    for app in apps {
        if let Entry::Vacant(e) = units.entry(app) {
            e.insert(tx.units_of(app)?);
        }
    }
    Ok(units)
}

/// Queues hooks in order, each on its unit, and returns those queued. A hook equal to one
/// already waiting on its unit behind the first, which may be running (counting those this
/// call queued), is not queued again: Juju coalesces the same way ([`coalesces`]). A unit
/// that does not exist fails the whole call.
pub fn enqueue<T: ModelTx + ?Sized>(
    tx: &mut T,
    hooks: impl IntoIterator<Item = (String, Hook)>,
) -> Result<Vec<QueuedHook>, StoreError> {
    // Each unit's queue as it stands in this step, read once.
    let mut queues: BTreeMap<String, Vec<Hook>> = BTreeMap::new();
    let mut queued = Vec::new();
    for (unit, hook) in hooks {
        let queue = match queues.entry(unit.clone()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let current = tx
                    .queued_hooks(&unit)?
                    .ok_or_else(|| not_found(format!("unit {unit}")))?;
                e.insert(current)
            }
        };
        if coalesces(queue, &hook) {
            continue;
        }
        let seq = tx.enqueue(&unit, &hook)?;
        queue.push(hook.clone());
        queued.push(QueuedHook { unit, seq, hook });
    }
    Ok(queued)
}

/// Records that `unit`'s hook is failing (`Some(message)`), or no longer is (`None`).
pub fn set_hook_error<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    error: Option<&str>,
) -> Result<(), StoreError> {
    if !tx.unit_exists(unit)? {
        return Err(not_found(format!("unit {unit}")));
    }
    tx.set_hook_error(unit, error)
}
