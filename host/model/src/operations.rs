//! The model's changes other than a hook's commit: each checks, writes, and queues the
//! hooks it fires, in one atomic step of the store.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::endpoints::{Side, resolve, split};
use crate::error::{StoreError, invalid, not_found};
use crate::records::{
    ApplicationRecord, Hook, LOG_RING, LogRecord, QueuedHook, RelationEndpoint, RelationHook,
    RelationRecord, UnitNames,
};
use crate::routing::{deploy_hooks, relation_hooks};
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

/// What a deployment made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deployed {
    /// The units, by number.
    pub units: Vec<String>,
    /// Its peer relations.
    pub relations: Vec<RelationRecord>,
    /// The hooks its peer relations queued: none, as they are made before the units (each
    /// unit's first hooks, its relation-created among them, are queued with it).
    pub queued: Vec<QueuedHook>,
}

/// Whether `name` may name an application, as Juju allows: lowercase letters, digits and
/// `-`, starting with a letter.
///
/// ```
/// use charm_model::operations::is_app_name;
///
/// assert!(is_app_name("discourse-k8s"));
/// assert!(!is_app_name("Discourse"));
/// assert!(!is_app_name("9lives"));
/// ```
pub fn is_app_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Deploys an application in one step: its record, with each setting typed and checked
/// against its charm's options ([`crate::config::typed_setting`]), `units` units with
/// their first hooks, and its peer relations, as Juju makes them.
pub fn deploy<T: ModelTx + ?Sized>(
    tx: &mut T,
    mut record: ApplicationRecord,
    units: u32,
) -> Result<Deployed, StoreError> {
    if !is_app_name(&record.name) {
        return Err(invalid(format!(
            "application name {:?}: lowercase letters, digits and '-', starting with a letter",
            record.name
        )));
    }
    let mut settings = BTreeMap::new();
    for (key, value) in std::mem::take(&mut record.config) {
        let typed = crate::config::typed_setting(&record.name, &record.metadata, &key, value)?;
        settings.insert(key, typed);
    }
    record.config = settings;
    let name = record.name.clone();
    let peers: Vec<_> = record
        .metadata
        .relations
        .iter()
        .filter(|e| e.role == crate::records::RelationRole::Peers)
        .map(|e| (e.interface.clone(), e.name.clone()))
        .collect();
    add_application(tx, record)?;
    let mut deployed = Deployed::default();
    // The peer relations first: each unit then enters them as any unit joining an
    // existing relation does, relation-created after install and before start.
    for (interface, endpoint) in peers {
        let side = RelationEndpoint {
            app: name.clone(),
            endpoint,
        };
        let (relation, queued) = add_relation(tx, &interface, vec![side])?;
        deployed.relations.push(relation);
        deployed.queued.extend(queued);
    }
    for _ in 0..units {
        deployed.units.push(add_unit(tx, &name)?);
    }
    Ok(deployed)
}

/// Adds the next unit of `app` (`app/0`, `app/1`, ...; a number is never reused) and queues
/// its first hooks ([`deploy_hooks`]), and, for each relation the application is in, as
/// Juju does for a unit that joins: relation-created on it after install, then after start
/// relation-joined and -changed on it for each remote unit, and on each remote unit about
/// it. Returns its name.
pub fn add_unit<T: ModelTx + ?Sized>(tx: &mut T, app: &str) -> Result<String, StoreError> {
    let number = tx
        .next_unit_number(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    if tx.app_dying(app)? {
        return Err(invalid(format!("application {app} is being removed")));
    }
    let name = format!("{app}/{number}");
    let mut created = Vec::new();
    let mut joined = Vec::new();
    for rel in tx.relations_of(app)? {
        let (Some(local), Some(remote)) = (rel.local(app), rel.remote(app)) else {
            continue;
        };
        if rel.dying {
            continue;
        }
        let hook = |endpoint: &str, remote_app: &str, remote_unit: &str| RelationHook {
            id: rel.id,
            endpoint: endpoint.to_string(),
            remote_app: remote_app.to_string(),
            remote_unit: Some(remote_unit.to_string()),
        };
        created.push((
            name.clone(),
            Hook::RelationCreated(RelationHook {
                remote_unit: None,
                ..hook(&local.endpoint, &remote.app, "")
            }),
        ));
        for other in live_units(tx, &remote.app)?.iter().cloned() {
            let mine = hook(&local.endpoint, &remote.app, &other);
            let theirs = hook(&remote.endpoint, app, &name);
            joined.push((name.clone(), Hook::RelationJoined(mine.clone())));
            joined.push((name.clone(), Hook::RelationChanged(mine)));
            joined.push((other.clone(), Hook::RelationJoined(theirs.clone())));
            joined.push((other, Hook::RelationChanged(theirs)));
        }
    }
    tx.create_unit(app, number, &name)?;
    let [install, config_changed, start] = deploy_hooks();
    let mut hooks = vec![(name.clone(), install)];
    hooks.extend(created);
    hooks.push((name.clone(), config_changed));
    hooks.push((name.clone(), start));
    hooks.extend(joined);
    enqueue(tx, hooks)?;
    Ok(name)
}

/// Adds `count` units of `app` as [`add_unit`] does, all in this step. Returns their names.
pub fn add_units<T: ModelTx + ?Sized>(
    tx: &mut T,
    app: &str,
    count: u32,
) -> Result<Vec<String>, StoreError> {
    if count == 0 {
        return Err(invalid("the number of units to add must be at least 1"));
    }
    (0..count).map(|_| add_unit(tx, app)).collect()
}

/// Adds the next unit of `app`, as [`add_unit`] does, if it has had fewer than `wanted`
/// (counting every unit it ever had, removed ones too); returns it, or `None` if it has had
/// as many. Called until `None`, it brings a deployment to `wanted` units: one resumed, or
/// made by two hosts at once, adds each unit once, since the step that counts is the step
/// that adds; and a unit an operator removed since is not added back. One unit a step, so
/// that each step stays within a store's transaction limits however many units are wanted.
pub fn add_unit_up_to<T: ModelTx + ?Sized>(
    tx: &mut T,
    app: &str,
    wanted: u32,
) -> Result<Option<String>, StoreError> {
    let had = tx
        .next_unit_number(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    if had >= wanted {
        return Ok(None);
    }
    add_unit(tx, app).map(Some)
}

/// `app`'s units that are not being removed, by number: those the model's hooks reach.
pub fn live_units<T: ModelTx + ?Sized>(tx: &mut T, app: &str) -> Result<UnitNames, StoreError> {
    tx.live_units(app)
}

/// Relates the endpoints an operator names as `app[:endpoint]` (resolved as
/// [`crate::endpoints::resolve`] says) and queues the hooks that fires, as
/// [`add_relation`] does.
pub fn relate<T: ModelTx + ?Sized>(
    tx: &mut T,
    a: &str,
    b: &str,
) -> Result<(RelationRecord, Vec<QueuedHook>), StoreError> {
    let (app_a, ep_a) = split(a);
    let (app_b, ep_b) = split(b);
    let mut records = Vec::new();
    for app in [app_a, app_b] {
        let record = tx
            .application(app)?
            .ok_or_else(|| not_found(format!("application {app}")))?;
        if tx.app_dying(app)? {
            return Err(invalid(format!("application {app} is being removed")));
        }
        records.push(record);
    }
    let side = |i: usize, endpoint| Side {
        app: &records[i].name,
        endpoint,
        metadata: &records[i].metadata,
    };
    let (x, y, interface) = resolve(side(0, ep_a), side(1, ep_b))?;
    add_relation(tx, &interface, vec![x, y])
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
        // A relation joins live applications only (`lifecycle::Rule::LiveRelation`).
        if tx.app_dying(&e.app)? {
            return Err(invalid(format!("application {} is being removed", e.app)));
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
        dying: false,
    };
    tx.create_relation(record.clone())?;
    let units = units_by_app(tx, record.endpoints.iter().map(|e| e.app.as_str()))?;
    let hooks = relation_hooks(&record, |app| units.get(app).cloned().unwrap_or_default());
    let queued = enqueue(tx, hooks)?;
    Ok((record, queued))
}

/// The live units ([`live_units`]) of each of `apps`, read once each, for the routing rules
/// to look up.
pub(crate) fn units_by_app<'a, T: ModelTx + ?Sized>(
    tx: &mut T,
    apps: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<&'a str, UnitNames>, StoreError> {
    let mut units = BTreeMap::new();
    for app in apps {
        if let Entry::Vacant(e) = units.entry(app) {
            // A unit being removed has departed: changes no longer reach it.
            e.insert(live_units(tx, app)?);
        }
    }
    Ok(units)
}

/// Queues hooks in order, each on its unit, and returns those queued. A hook equal to one
/// already waiting on its unit behind the first, which may be running (counting those this
/// call queued), is not queued again: Juju coalesces the same way ([`coalesces`]). A unit
/// that does not exist fails the whole call. Hooks the store defers
/// ([`ModelTx::defers_queueing`]) are coalesced the same way as they reach their queues, and
/// are not returned.
pub fn enqueue<T: ModelTx + ?Sized>(
    tx: &mut T,
    hooks: impl IntoIterator<Item = (String, Hook)>,
) -> Result<Vec<QueuedHook>, StoreError> {
    let hooks: Vec<(String, Hook)> = hooks.into_iter().collect();
    let units: std::collections::BTreeSet<&str> = hooks.iter().map(|(u, _)| u.as_str()).collect();
    let deferred = tx.defers_queueing(units.len(), hooks.len())?;
    let mut queued = Vec::new();
    for (unit, hook) in hooks {
        // The queue as it stands in this step: with the hooks this call queued.
        match tx.coalesces(&unit, &hook)? {
            None => return Err(not_found(format!("unit {unit}"))),
            Some(true) => continue,
            Some(false) => {}
        }
        let seq = tx.enqueue(&unit, &hook)?;
        if !deferred {
            queued.push(QueuedHook { unit, seq, hook });
        }
    }
    Ok(queued)
}

/// Resolves a unit in error, as `juju resolved` does: its failing hook runs again, or with
/// `retry` false is skipped (taken off its queue). Returns the hook: the one recorded as
/// failing ([`hook_failed`]) where the store keeps that, else the head of its queue. A unit
/// not in error is [`StoreError::Invalid`].
pub fn resolve_unit<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    retry: bool,
) -> Result<Option<Hook>, StoreError> {
    let record = tx
        .unit(unit)?
        .ok_or_else(|| not_found(format!("unit {unit}")))?;
    if record.hook_error.is_none() {
        return Err(invalid(format!("unit {unit} is not in error")));
    }
    let recorded = match tx.failing_hook(unit)? {
        Some(seq) => tx.queued_hook(unit, seq)?.map(|hook| (seq, hook)),
        None => None,
    };
    let failed = match recorded {
        Some(failed) => Some(failed),
        None => tx
            .queue_of(unit)?
            .unwrap_or_default()
            .into_iter()
            .next()
            .map(|q| (q.seq, q.hook)),
    };
    set_hook_error(tx, unit, None)?;
    if !retry && let Some((seq, hook)) = &failed {
        tx.dequeue(unit, *seq)?;
        // A skipped hook counts as run (Juju's uniter commits it as done): the last steps
        // of a removal happen as they would after its commit.
        match hook {
            Hook::Remove => crate::removal::finish_unit(tx, unit)?,
            Hook::RelationBroken(r) => {
                crate::removal::reap_relation(tx, r.id)?;
            }
            _ => {}
        }
    }
    Ok(failed.map(|(_, hook)| hook))
}

/// Keeps what `unit`'s hook logged in its ring ([`LOG_RING`] lines), whether or not the
/// hook succeeded.
pub fn record_logs<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    lines: &[LogRecord],
) -> Result<(), StoreError> {
    if !tx.unit_exists(unit)? {
        return Err(not_found(format!("unit {unit}")));
    }
    tx.append_logs(unit, lines, LOG_RING)
}

/// The newest `lines` log lines of `unit`, or of every unit, oldest first.
pub fn debug_log<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: Option<&str>,
    lines: usize,
) -> Result<Vec<LogRecord>, StoreError> {
    let units = match unit {
        Some(unit) => {
            if !tx.unit_exists(unit)? {
                return Err(not_found(format!("unit {unit}")));
            }
            vec![unit.to_string()]
        }
        None => {
            let mut all = Vec::new();
            for (app, _) in tx.app_charms()? {
                all.extend(tx.units_of(&app)?);
            }
            all
        }
    };
    let mut records = Vec::new();
    for unit in units {
        records.extend(tx.unit_logs(&unit)?);
    }
    records.sort_by_key(|r| (r.at_ms, r.seq));
    let skip = records.len().saturating_sub(lines);
    Ok(records.split_off(skip))
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
    if error.is_none() {
        tx.note_failing(unit, None)?;
    }
    tx.set_hook_error(unit, error)
}

/// Records that `unit`'s hook queued as `seq` failed with `message` (`seq` is `None` for a
/// hook its agent made, leader-elected), so that resolving the unit without a retry skips
/// that very hook.
pub fn hook_failed<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    seq: Option<u64>,
    message: &str,
) -> Result<(), StoreError> {
    set_hook_error(tx, unit, Some(message))?;
    tx.note_failing(unit, seq)
}
