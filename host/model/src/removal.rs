//! Removing units, relations and applications in Juju's order, each one planned change.
//!
//! A unit leaves in steps its own hooks take: the removal marks it dying and queues, in one
//! step, relation-departed on the remaining units of each relation about it, and on the
//! leaving unit relation-departed for each remote unit, relation-broken for each relation,
//! then stop and remove. The commit of its remove hook deletes it ([`finish_unit`]), with
//! its bags, and releases its lease if it leads, so another unit is elected at once. A
//! relation leaves the same way: departed, then broken, on every unit of both sides; after
//! the last broken it goes, with its bags ([`reap_relation`]). An application goes when its
//! last unit does.

use crate::error::{StoreError, invalid, not_found};
use crate::operations::{enqueue, live_units};
use crate::records::{Hook, QueuedHook, RelationHook, RelationId, RelationRecord, app_of};
use crate::tx::ModelTx;

/// The hook about relation `rel` for a unit of `app`, about `remote_unit`.
fn about(rel: &RelationRecord, app: &str, remote_unit: Option<&str>) -> Option<RelationHook> {
    let local = rel.local(app)?;
    let remote = rel.remote(app)?;
    Some(RelationHook {
        id: rel.id,
        endpoint: local.endpoint.clone(),
        remote_app: remote.app.clone(),
        remote_unit: remote_unit.map(str::to_string),
    })
}

/// Starts removing `unit` (see the module doc) and returns the hooks queued. A unit
/// already being removed is [`StoreError::Invalid`].
pub fn remove_unit<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
) -> Result<Vec<QueuedHook>, StoreError> {
    remove_units(tx, &[unit.to_string()])
}

/// Starts removing each of `units`, in order, as [`remove_unit`] does: all of them or, if
/// any is refused, none.
pub fn remove_units<T: ModelTx + ?Sized>(
    tx: &mut T,
    units: &[String],
) -> Result<Vec<QueuedHook>, StoreError> {
    for (i, unit) in units.iter().enumerate() {
        if !tx.unit_exists(unit)? {
            return Err(not_found(format!("unit {unit}")));
        }
        if units[..i].contains(unit) {
            return Err(invalid(format!("unit {unit} is named twice")));
        }
        if tx.unit_dying(unit)? {
            return Err(invalid(format!("unit {unit} is already being removed")));
        }
    }
    let mut queued = Vec::new();
    for unit in units {
        let hooks = leaving_hooks(tx, unit)?;
        tx.set_unit_dying(unit)?;
        queued.extend(enqueue(tx, hooks)?);
    }
    Ok(queued)
}

/// The hooks `unit`'s removal fires, in order (see the module doc). Relations already
/// being removed queued theirs.
fn leaving_hooks<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
) -> Result<Vec<(String, Hook)>, StoreError> {
    let app = app_of(unit);
    let mut departed = Vec::new();
    let mut own = Vec::new();
    let mut broken = Vec::new();
    for rel in tx.relations_of(app)? {
        if rel.dying {
            continue;
        }
        let Some(remote) = rel.remote(app) else {
            continue;
        };
        let remote_units: Vec<String> = live_units(tx, &remote.app)?
            .iter()
            .filter(|u| *u != unit)
            .cloned()
            .collect();
        for other in &remote_units {
            if let Some(hook) = about(&rel, &remote.app, Some(unit)) {
                departed.push((other.clone(), Hook::RelationDeparted(hook)));
            }
            if let Some(hook) = about(&rel, app, Some(other)) {
                own.push((unit.to_string(), Hook::RelationDeparted(hook)));
            }
        }
        if let Some(hook) = about(&rel, app, None) {
            broken.push((unit.to_string(), Hook::RelationBroken(hook)));
        }
    }
    let mut hooks = departed;
    hooks.extend(own);
    hooks.extend(broken);
    hooks.push((unit.to_string(), Hook::Stop));
    hooks.push((unit.to_string(), Hook::Remove));
    Ok(hooks)
}

/// The live relation between the endpoints `a` and `b` name (`app` or `app:endpoint`).
fn find_relation<T: ModelTx + ?Sized>(
    tx: &mut T,
    a: &str,
    b: &str,
) -> Result<std::sync::Arc<RelationRecord>, StoreError> {
    use crate::endpoints::split;
    let (app_a, ep_a) = split(a);
    let (app_b, ep_b) = split(b);
    for app in [app_a, app_b] {
        if !tx.app_exists(app)? {
            return Err(not_found(format!("application {app}")));
        }
    }
    let fits = |rel: &RelationRecord, app: &str, ep: Option<&str>| {
        rel.endpoints
            .iter()
            .any(|e| e.app == app && ep.is_none_or(|n| n == e.endpoint))
    };
    let found: Vec<_> = tx
        .relations_of(app_a)?
        .into_iter()
        .filter(|r| !r.is_peer() && fits(r, app_a, ep_a) && fits(r, app_b, ep_b))
        .collect();
    match found.as_slice() {
        [one] if one.dying => Err(invalid(format!(
            "relation {} is already being removed",
            one.describe()
        ))),
        [one] => Ok(one.clone()),
        [] => Err(not_found(format!("relation {a} {b}"))),
        many => {
            let names: Vec<String> = many.iter().map(|r| r.describe()).collect();
            Err(invalid(format!(
                "relation {a} {b}: ambiguous; name the endpoints, one of: {}",
                names.join(", ")
            )))
        }
    }
}

/// Starts removing the relation between `a` and `b` (`app` or `app:endpoint`): marks it
/// dying and queues relation-departed for each remote unit, then relation-broken, on every
/// unit of both sides. Returns the relation and the hooks queued.
pub fn remove_relation<T: ModelTx + ?Sized>(
    tx: &mut T,
    a: &str,
    b: &str,
) -> Result<(RelationRecord, Vec<QueuedHook>), StoreError> {
    let rel = find_relation(tx, a, b)?;
    let queued = break_relation(tx, &rel)?;
    Ok((
        RelationRecord {
            dying: true,
            ..(*rel).clone()
        },
        queued,
    ))
}

/// Takes off `unit`'s queue what a dying relation `id` no longer runs, as Juju's uniter
/// departs only the remote units a unit has joined, then breaks: relation-joined and
/// -changed, and relation-departed about a remote unit whose relation-joined had not run.
/// The failing hook of a unit in error stays, for `resolved` to retry or skip. Returns the
/// remote units that had not joined.
fn drop_unjoined<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    id: RelationId,
) -> Result<std::collections::BTreeSet<String>, StoreError> {
    let failing = tx.failing_hook(unit)?;
    let queue = tx.queue_of(unit)?.unwrap_or_default();
    let queue: Vec<&QueuedHook> = queue.iter().filter(|q| failing != Some(q.seq)).collect();
    let unjoined: std::collections::BTreeSet<String> = queue
        .iter()
        .filter_map(|q| match &q.hook {
            Hook::RelationJoined(r) if r.id == id => r.remote_unit.clone(),
            _ => None,
        })
        .collect();
    for q in queue {
        let goes = match &q.hook {
            Hook::RelationJoined(r) | Hook::RelationChanged(r) => r.id == id,
            Hook::RelationDeparted(r) => {
                r.id == id && r.remote_unit.as_ref().is_some_and(|u| unjoined.contains(u))
            }
            _ => false,
        };
        if goes {
            tx.dequeue(unit, q.seq)?;
        }
    }
    Ok(unjoined)
}

fn break_relation<T: ModelTx + ?Sized>(
    tx: &mut T,
    rel: &RelationRecord,
) -> Result<Vec<QueuedHook>, StoreError> {
    let mut hooks = Vec::new();
    for local in &rel.endpoints {
        let Some(remote) = rel.remote(&local.app) else {
            continue;
        };
        let remote_units = live_units(tx, &remote.app)?;
        let live = live_units(tx, &local.app)?;
        for unit in tx.units_of(&local.app)? {
            let unjoined = drop_unjoined(tx, &unit, rel.id)?;
            // A unit being removed queued its relation-departed and -broken already.
            if !live.contains(&unit) {
                continue;
            }
            let unit = &unit;
            for other in remote_units
                .iter()
                .filter(|o| *o != unit && !unjoined.contains(*o))
            {
                if let Some(hook) = about(rel, &local.app, Some(other)) {
                    hooks.push((unit.clone(), Hook::RelationDeparted(hook)));
                }
            }
            if let Some(hook) = about(rel, &local.app, None) {
                hooks.push((unit.clone(), Hook::RelationBroken(hook)));
            }
        }
    }
    tx.set_relation_dying(rel.id)?;
    let queued = enqueue(tx, hooks)?;
    reap_relation(tx, rel.id)?;
    Ok(queued)
}

/// What removing an application did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppRemoval {
    /// The relations it had with other applications, now being removed (`force` only).
    pub relations: Vec<RelationRecord>,
    /// The units now being removed.
    pub units: Vec<String>,
    /// The hooks queued.
    pub queued: Vec<QueuedHook>,
    /// Whether it is gone already (it had no units).
    pub gone: bool,
}

/// Starts removing `app`: each of its units as [`remove_unit`] does; it goes with the
/// last. Refused ([`StoreError::Invalid`]) while it has relations with other applications,
/// unless `force`, which removes them first.
pub fn remove_application<T: ModelTx + ?Sized>(
    tx: &mut T,
    app: &str,
    force: bool,
) -> Result<AppRemoval, StoreError> {
    if !tx.app_exists(app)? {
        return Err(not_found(format!("application {app}")));
    }
    if tx.app_dying(app)? {
        return Err(invalid(format!(
            "application {app} is already being removed"
        )));
    }
    let relations: Vec<_> = tx
        .relations_of(app)?
        .into_iter()
        .filter(|r| !r.is_peer() && !r.dying)
        .collect();
    if !relations.is_empty() && !force {
        let names: Vec<String> = relations.iter().map(|r| r.describe()).collect();
        return Err(invalid(format!(
            "application {app} has relations ({}): remove them first, or use --force",
            names.join(", ")
        )));
    }
    let mut removal = AppRemoval::default();
    for rel in &relations {
        removal.queued.extend(break_relation(tx, rel)?);
        removal.relations.push(RelationRecord {
            dying: true,
            ..(**rel).clone()
        });
    }
    tx.set_app_dying(app)?;
    let dying = tx.dying_units(app)?;
    for unit in tx.units_of(app)? {
        if dying.contains(&unit) {
            continue;
        }
        let hooks = leaving_hooks(tx, &unit)?;
        tx.set_unit_dying(&unit)?;
        removal.queued.extend(enqueue(tx, hooks)?);
        removal.units.push(unit);
    }
    removal.gone = reap_application(tx, app)?;
    Ok(removal)
}

/// Deletes `unit` once its remove hook has run: its records and bags go, its lease is
/// released if it leads, and its application goes too if it was the last unit of an
/// application being removed.
pub fn finish_unit<T: ModelTx + ?Sized>(tx: &mut T, unit: &str) -> Result<(), StoreError> {
    let app = app_of(unit);
    if tx
        .live_lease(app)?
        .is_some_and(|lease| lease.unit() == unit)
    {
        tx.release_lease(app)?;
    }
    tx.delete_unit(unit)?;
    // Hooks about a dying relation still on their way to this unit go with it
    // ([`ModelTx::undelivered_about`]): if they were all its relation waited for, it goes.
    for rel in tx.relations_of(app)? {
        if rel.dying {
            reap_relation(tx, rel.id)?;
        }
    }
    reap_application(tx, app)?;
    Ok(())
}

/// Deletes a dying application that has no units left, with its peer relations; whether
/// it did.
fn reap_application<T: ModelTx + ?Sized>(tx: &mut T, app: &str) -> Result<bool, StoreError> {
    if !tx.app_dying(app)? || !tx.units_of(app)?.is_empty() {
        return Ok(false);
    }
    for rel in tx.relations_of(app)? {
        if rel.is_peer() {
            tx.delete_relation(rel.id)?;
        }
    }
    if tx.live_lease(app)?.is_some() {
        tx.release_lease(app)?;
    }
    tx.delete_application(app)?;
    Ok(true)
}

/// Deletes a dying relation, with its bags, once no unit has a hook about it queued (its
/// last relation-broken has run); whether it did.
pub fn reap_relation<T: ModelTx + ?Sized>(tx: &mut T, id: RelationId) -> Result<bool, StoreError> {
    let Some(rel) = tx.relation(id)? else {
        return Ok(false);
    };
    if !rel.dying {
        return Ok(false);
    }
    for side in &rel.endpoints {
        for unit in tx.units_of(&side.app)? {
            let queue = tx.queued_hooks(&unit)?.unwrap_or_default();
            if queue
                .iter()
                .any(|h| h.relation().is_some_and(|r| r.id == id))
            {
                // Written again, unchanged: two last relation-brokens committed at once then
                // conflict on the relation, so the second runs again and reaps it. Each
                // alone saw the other's still queued, and a store whose transactions are
                // optimistic (etcd) does not see a hook deleted from a queue it read.
                tx.set_relation_dying(id)?;
                return Ok(false);
            }
        }
    }
    if tx.undelivered_about(id)? {
        return Ok(false);
    }
    tx.delete_relation(id)?;
    Ok(true)
}
