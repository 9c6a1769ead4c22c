//! A hook's commit: the fence, the checks, the writes, the pod spec revision rule, and the
//! hooks its changes fire, all in one atomic step of the store.

use serde::{Deserialize, Serialize};

use crate::error::{CommitError, not_found};
use crate::operations::{enqueue, units_by_app};
use crate::records::{
    Changes, Hook, LeaseHolder, QueuedHook, RelationId, app_of, holder_unit, ownership_lease,
};
use crate::removal::{finish_unit, reap_relation};
use crate::routing::follow_ups;
use crate::snapshot::{BagsRead, HookRead, Runs, hook_read_for};
use crate::tx::{BagOwner, ElectedTerm, ModelTx, UnitUpdate};

/// The leadership a commit depends on: the application's lease must still have this holder
/// and this term when the commit is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The application.
    pub app: String,
    /// The lease holder (the unit's agent, [`crate::agent_holder`]) that led when the hook
    /// started.
    pub holder: String,
    /// The lease's term then.
    pub term: u64,
}

impl Fence {
    /// Whether a commit of `unit` may pass this fence while `lease` is the application's
    /// unexpired lease: the fence is the unit's own, for its application, and the lease
    /// still has the fence's holder (the same agent of the unit) and term.
    ///
    /// ```
    /// use charm_model::{Fence, LeaseHolder};
    ///
    /// let fence = Fence { app: "db".into(), holder: "db/0".into(), term: 3 };
    /// let lease = |holder: &str, term| Some(LeaseHolder { holder: holder.into(), term });
    /// assert!(fence.admits("db/0", lease("db/0", 3).as_ref()));
    /// assert!(!fence.admits("db/0", lease("db/0", 4).as_ref()), "a later term");
    /// assert!(!fence.admits("db/0", lease("db/1", 3).as_ref()), "another holder");
    /// assert!(!fence.admits("db/0", None), "the lease lapsed");
    /// assert!(!fence.admits("db/1", lease("db/0", 3).as_ref()), "another unit's fence");
    ///
    /// // Two agents of one unit are two holders.
    /// let fence = Fence { app: "db".into(), holder: "db/0#a".into(), term: 3 };
    /// assert!(fence.admits("db/0", lease("db/0#a", 3).as_ref()));
    /// assert!(!fence.admits("db/0", lease("db/0#b", 3).as_ref()), "the unit's other agent");
    /// ```
    pub fn admits(&self, unit: &str, lease: Option<&LeaseHolder>) -> bool {
        self.app == app_of(unit)
            && holder_unit(&self.holder) == unit
            && lease.is_some_and(|l| l.holder == self.holder && l.term == self.term)
    }
}

/// What a commit changed, so the host can fire the hooks Juju would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReceipt {
    /// Relations whose bag of this unit changed.
    pub unit_bags_changed: Vec<RelationId>,
    /// Relations whose bag of this application changed.
    pub app_bags_changed: Vec<RelationId>,
    /// Whether the leader settings changed.
    pub leader_data_changed: bool,
    /// The pod spec's new revision, if the spec changed.
    pub pod_spec_revision: Option<u64>,
}

/// What a commit did: what changed, and the hooks it queued on other units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// What changed.
    pub receipt: CommitReceipt,
    /// The hooks the changes fired on other units (relation-changed,
    /// leader-settings-changed), queued in the same step.
    pub queued: Vec<QueuedHook>,
}

/// One hook's commit, as a store is asked to apply it.
#[derive(Debug, Clone, Copy)]
pub struct HookCommit<'a> {
    /// The unit whose hook it is.
    pub unit: &'a str,
    /// The hook's sequence number; `None` for hooks the host generates, such as
    /// leader-elected.
    pub hook: Option<u64>,
    /// Everything the hook wrote.
    pub changes: &'a Changes,
    /// The leadership the hook ran under, if it ran as leader.
    pub fence: Option<&'a Fence>,
    /// What the hook read; the commit is refused ([`CommitError::Stale`]) unless the
    /// store still holds the same. `None`: not checked (hooks the host writes for itself).
    pub read: Option<&'a HookRead>,
    /// The agent that ran the hook as the unit's owner ([`crate::ownership_lease`]); the
    /// commit is refused ([`CommitError::NotOwner`]) unless it still holds the unit's
    /// ownership lease. `None`: not checked (hosts that do not claim units).
    pub owner: Option<&'a str>,
}

/// Applies one hook's writes in the step `tx`: if it has a fence, only while the
/// application's lease still has its holder and term; leader-only writes without a fence
/// are refused. All or nothing: every check comes before the first write, and a store
/// error after it makes the store abandon the step.
///
/// What the hook read must be what the store holds now ([`HookRead`]): no write lands on
/// data the hook did not see ([`CommitError::Stale`]).
///
/// In the same step the hook leaves its unit's queue, and must still be in it, so a commit
/// applies at most once ([`CommitError::NotQueued`]); the leader-elected record is set, or,
/// on a commit without a fence, cleared; and the hooks the changes fire on other units
/// ([`follow_ups`]) are queued. A remove hook's commit deletes its unit
/// ([`finish_unit`]); a relation-broken hook's commit deletes its relation if it was the
/// last hook about it ([`reap_relation`]); an action hook's commit records what the action
/// reported ([`crate::actions::finish_action`]).
pub fn commit<T: ModelTx + ?Sized>(
    tx: &mut T,
    request: HookCommit<'_>,
) -> Result<Committed, CommitError> {
    let HookCommit {
        unit,
        hook,
        changes,
        fence,
        read,
        owner,
    } = request;
    let app = app_of(unit);
    crate::limits::check(&changes.into())?;
    if !tx.unit_exists(unit)? {
        return Err(not_found(format!("unit {unit}")).into());
    }
    match fence {
        Some(f) if !f.admits(unit, tx.live_lease(app)?.as_ref()) => {
            return Err(CommitError::Fenced { fence: f.clone() });
        }
        None if changes.needs_fence() => return Err(CommitError::Unfenced),
        _ => {}
    }
    if let Some(owner) = owner
        && tx
            .live_lease(&ownership_lease(unit))?
            .is_none_or(|l| l.holder != owner)
    {
        return Err(CommitError::NotOwner {
            unit: unit.to_string(),
            holder: owner.to_string(),
        });
    }
    // A unit writes only its application's bags, in relations it is in; those relations
    // route the follow-ups.
    let mut relations = Vec::new();
    for id in changes.unit_bags.keys().chain(changes.app_bags.keys()) {
        match tx.relation(*id)? {
            Some(r) if r.local(app).is_some() => relations.push(r),
            _ => return Err(not_found(format!("relation {id}")).into()),
        }
    }
    let mut ran = None;
    if let Some(seq) = hook {
        ran = tx.queued_hook(unit, seq)?;
        if ran.is_none() {
            return Err(CommitError::NotQueued {
                unit: unit.to_string(),
                seq,
            });
        }
    }
    // Last of the checks: a hook committed already is refused as such above, not rerun.
    // A hook the host made for itself (leader-elected) ran before the queue's head.
    let runs = if hook.is_some() {
        Runs::Head
    } else {
        Runs::BeforeHead
    };
    if let Some(read) = read
        && hook_read_for(
            tx,
            &read.snapshot.model,
            unit,
            BagsRead::As(&read.snapshot),
            runs,
        )? != *read
    {
        return Err(CommitError::Stale {
            unit: unit.to_string(),
        });
    }
    if let Some(seq) = hook {
        tx.dequeue(unit, seq)?;
    }

    let mut receipt = CommitReceipt::default();
    for (id, writes) in &changes.unit_bags {
        if tx.write_bag(BagOwner::Unit(*id, unit), writes)? {
            receipt.unit_bags_changed.push(*id);
        }
    }
    for (id, writes) in &changes.app_bags {
        if tx.write_bag(BagOwner::App(*id, app), writes)? {
            receipt.app_bags_changed.push(*id);
        }
    }
    receipt.leader_data_changed = !changes.leader_data.is_empty()
        && tx.write_bag(BagOwner::Leader(app), &changes.leader_data)?;
    if let Some(status) = &changes.app_status {
        tx.set_app_status(app, status)?;
    }
    if let Some(write) = &changes.pod_spec
        && let Some(revision) = tx.pod_spec_state(app, write)?.next_revision()
    {
        tx.put_pod_spec(app, revision, write)?;
        receipt.pod_spec_revision = Some(revision);
    }
    let elected_term = match (changes.elected_term, fence) {
        (Some(term), _) => ElectedTerm::Set(term),
        // It ran as a follower: leader-elected is owed should it lead again.
        (None, None) => ElectedTerm::Clear,
        (None, Some(_)) => ElectedTerm::Keep,
    };
    tx.update_unit(
        unit,
        UnitUpdate {
            status: changes.unit_status.as_ref(),
            workload_version: changes.workload_version.as_deref(),
            stored: &changes.stored,
            elected_term,
        },
    )?;

    // The applications whose units the changes reach: the other side of each bag that
    // changed, and this one when the leader settings did.
    let changed = |id: &RelationId| {
        receipt.unit_bags_changed.contains(id) || receipt.app_bags_changed.contains(id)
    };
    let reached = relations
        .iter()
        .filter(|r| changed(&r.id))
        .filter_map(|r| r.remote(app))
        .map(|e| e.app.as_str())
        .chain(receipt.leader_data_changed.then_some(app));
    let units = units_by_app(tx, reached)?;
    // A leaving unit has departed, or is about to depart, from every other unit's view:
    // its bag's changes reach no one (a relation-changed about it would come after, or
    // without, their relation-joined about it).
    let leaving = !receipt.unit_bags_changed.is_empty() && tx.unit_dying(unit)?;
    let routed;
    let receipt_routed = if leaving {
        routed = CommitReceipt {
            unit_bags_changed: Vec::new(),
            ..receipt.clone()
        };
        &routed
    } else {
        &receipt
    };
    let hooks = follow_ups(unit, receipt_routed, &relations, |a| {
        units.get(a).map_or(&[][..], |u| &u[..])
    });
    let queued = enqueue(tx, hooks)?;
    // The last steps of a removal are the hooks' own: after remove the unit goes, after
    // the last relation-broken the relation does.
    if let Some(hook) = &ran {
        crate::actions::finish_action(tx, hook, changes.action.as_ref())?;
    }
    match &ran {
        Some(Hook::Remove) => finish_unit(tx, unit)?,
        Some(Hook::RelationBroken(r)) => {
            reap_relation(tx, r.id)?;
        }
        _ => {}
    }
    Ok(Committed { receipt, queued })
}
