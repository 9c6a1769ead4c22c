//! Juju's lifecycle, stated once: the order of hooks a unit's agent guarantees, and what a
//! model holds between and after them. Any test checks a hook history with
//! [`check_history`], a model in any state with [`check_model`], and a model whose queues
//! are empty with [`check_settled`]; each answers the [`Violation`]s it found, none when the
//! rules hold. `docs/lifecycle.md` gives each rule with the place in Juju's unit agent (the
//! uniter) that makes it.
//!
//! ```
//! use charm_model::lifecycle::{Ran, Rule, check_history};
//! use charm_model::{Hook, RelationHook};
//!
//! let db = |remote_unit: Option<&str>| RelationHook {
//!     id: 1,
//!     endpoint: "db".into(),
//!     remote_app: "pg".into(),
//!     remote_unit: remote_unit.map(str::to_string),
//! };
//! let ran = |hook| Ran { unit: "web/0".into(), hook, saw: None };
//! let history = [
//!     ran(Hook::Install),
//!     ran(Hook::RelationCreated(db(None))),
//!     ran(Hook::ConfigChanged),
//!     ran(Hook::Start),
//!     ran(Hook::RelationJoined(db(Some("pg/0")))),
//!     ran(Hook::RelationBroken(db(None))),
//!     ran(Hook::RelationChanged(db(Some("pg/0")))),
//! ];
//! let found = check_history(&history);
//! // Broken before pg/0 departed, then a hook after broken.
//! assert_eq!(found.len(), 2);
//! assert_eq!(found[0].rule, Rule::BrokenBeforeDeparted);
//! assert_eq!(found[1].rule, Rule::AfterBroken);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::error::StoreError;
use crate::records::{
    ActionRecord, ApplicationRecord, Hook, LeaseHolder, PodSpecRecord, QueuedHook, RelationId,
    RelationRecord, SharedBag, UnitRecord, UnitSnapshot,
};
use crate::tx::{AppView, ModelTx};

/// What a hook saw of its unit's relations: each relation's id, with the remote units it
/// listed.
pub type Seen = BTreeMap<RelationId, BTreeSet<String>>;

/// What a unit's hook saw of its relations ([`Seen`]), from its snapshot.
pub fn seen(snapshot: &UnitSnapshot) -> Seen {
    snapshot
        .relations
        .iter()
        .map(|(id, view)| (*id, view.remote_units.iter().cloned().collect()))
        .collect()
}

/// One hook a unit ran (or that `resolved` skipped, which counts as run), in the order of
/// the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The unit.
    pub unit: String,
    /// The hook.
    pub hook: Hook,
    /// What it saw of the unit's relations; `None` where that was not recorded (a skipped
    /// hook, a history read from a log).
    pub saw: Option<Seen>,
}

/// A lifecycle rule ([`check_history`], [`check_model`], [`check_settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A unit's first hook is install.
    InstallFirst,
    /// Nothing runs on a unit after its remove hook.
    AfterRemove,
    /// After stop, only remove.
    AfterStop,
    /// Stop runs only once every relation the unit entered is broken on it.
    StopBeforeBroken,
    /// Before start a unit runs only install, relation-created, leader-elected,
    /// config-changed, upgrade-charm and actions: no relation-joined, -changed, -departed
    /// or -broken.
    BeforeStart,
    /// A relation's first hook on a unit is relation-created.
    CreatedFirst,
    /// Per remote unit: relation-joined once, before any relation-changed about it.
    JoinedFirst,
    /// Per remote unit: nothing about it after its relation-departed.
    AfterDeparted,
    /// relation-broken only after every joined remote unit departed.
    BrokenBeforeDeparted,
    /// Nothing about a relation on a unit after its relation-broken there.
    AfterBroken,
    /// No relation is visible during install; a relation is visible from its
    /// relation-created on, a remote unit from its relation-joined on, until it departs.
    Visibility,
    /// A queued relation hook names a relation that exists.
    QueuedForGone,
    /// A dying relation has a hook about it queued (its relation-departed or -broken still
    /// to run); one without is never reaped.
    DyingRelationStuck,
    /// A dying relation has no relation-joined or -changed queued about it (but the
    /// failing hook of a unit in error, which `resolved` retries or skips).
    DyingRelationJoins,
    /// A relation that is not dying joins applications that exist and are not dying.
    LiveRelation,
    /// A dying application has no unit that is not dying.
    DyingAppLiveUnit,
    /// A dying unit has its remove hook queued, last.
    RemoveLast,
    /// An application's lease is held by one of its units that exists.
    LeaseHolder,
    /// Once every queue is empty: nothing is dying.
    SettledDying,
    /// Once every queue is empty: every application with units has one leader among them,
    /// and leader-elected ran on it for its term.
    SettledLeader,
    /// Once every queue is empty: no unit is in error.
    SettledError,
}

/// A rule broken: which, where in a history (an index into it), and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The index of the offending hook in the history checked, if it is a history's.
    pub at: Option<usize>,
    /// What was found, naming units, hooks and relations.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{:?} at hook #{at}: {}", self.rule, self.detail),
            None => write!(f, "{:?}: {}", self.rule, self.detail),
        }
    }
}

/// A unit's lifecycle as its history so far shows it.
#[derive(Debug, Default)]
struct UnitLife {
    installed: bool,
    started: bool,
    stopped: bool,
    removed: bool,
    relations: BTreeMap<RelationId, RelationLife>,
}

/// One relation on one unit, as its history so far shows it.
#[derive(Debug, Default)]
struct RelationLife {
    broken: bool,
    /// Remote units joined and not departed.
    joined: BTreeSet<String>,
    /// Remote units departed.
    departed: BTreeSet<String>,
}

/// The violations of the lifecycle rules in `history` (every unit's hooks, in the order they
/// ran). A history may start at any unit's install; a unit whose install is not in it is
/// checked from its first hook on as if it were.
pub fn check_history(history: &[Ran]) -> Vec<Violation> {
    let mut units: BTreeMap<&str, UnitLife> = BTreeMap::new();
    let mut found = Vec::new();
    for (at, ran) in history.iter().enumerate() {
        let mut bad = |rule, detail: String| {
            found.push(Violation {
                rule,
                at: Some(at),
                detail: format!("{} {}: {detail}", ran.unit, ran.hook.name()),
            })
        };
        let life = units.entry(ran.unit.as_str()).or_default();
        if life.removed {
            bad(Rule::AfterRemove, "after its remove hook".into());
            continue;
        }
        if !life.installed && ran.hook != Hook::Install {
            bad(Rule::InstallFirst, "before install".into());
        }
        if life.stopped && ran.hook != Hook::Remove {
            bad(Rule::AfterStop, "after stop".into());
        }
        if let Some(saw) = &ran.saw {
            check_visible(life, &ran.hook, saw, &mut bad);
        }
        match &ran.hook {
            Hook::Install => life.installed = true,
            Hook::Start => life.started = true,
            Hook::Stop => {
                let open: Vec<String> = life
                    .relations
                    .iter()
                    .filter(|(_, r)| !r.broken)
                    .map(|(id, _)| id.to_string())
                    .collect();
                if !open.is_empty() {
                    bad(
                        Rule::StopBeforeBroken,
                        format!("relations {} not broken", open.join(", ")),
                    );
                }
                life.stopped = true;
            }
            Hook::Remove => {
                if !life.stopped {
                    bad(Rule::AfterStop, "remove before stop".into());
                }
                life.removed = true;
            }
            Hook::RelationCreated(r) => {
                if life.relations.contains_key(&r.id) {
                    bad(
                        Rule::CreatedFirst,
                        format!("relation {} created again", r.id),
                    );
                }
                life.relations.insert(r.id, RelationLife::default());
            }
            Hook::RelationJoined(r)
            | Hook::RelationChanged(r)
            | Hook::RelationDeparted(r)
            | Hook::RelationBroken(r) => {
                if !life.started {
                    bad(Rule::BeforeStart, "before start".into());
                }
                let Some(rel) = life.relations.get_mut(&r.id) else {
                    bad(
                        Rule::CreatedFirst,
                        format!("relation {} before its relation-created", r.id),
                    );
                    continue;
                };
                if rel.broken {
                    bad(Rule::AfterBroken, format!("relation {} is broken", r.id));
                    continue;
                }
                let remote = r.remote_unit.clone();
                match (&ran.hook, remote) {
                    (Hook::RelationJoined(_), Some(x)) => {
                        if rel.departed.contains(&x) {
                            bad(Rule::AfterDeparted, format!("{x} departed"));
                        } else if !rel.joined.insert(x.clone()) {
                            bad(Rule::JoinedFirst, format!("{x} joined twice"));
                        }
                    }
                    (Hook::RelationChanged(_), Some(x)) => {
                        if rel.departed.contains(&x) {
                            bad(Rule::AfterDeparted, format!("{x} departed"));
                        } else if !rel.joined.contains(&x) {
                            bad(Rule::JoinedFirst, format!("{x} not joined"));
                        }
                    }
                    (Hook::RelationDeparted(_), Some(x)) => {
                        if !rel.joined.remove(&x) {
                            bad(Rule::JoinedFirst, format!("{x} departed, not joined"));
                        }
                        rel.departed.insert(x);
                    }
                    (Hook::RelationBroken(_), _) => {
                        if !rel.joined.is_empty() {
                            let left: Vec<&str> = rel.joined.iter().map(String::as_str).collect();
                            bad(
                                Rule::BrokenBeforeDeparted,
                                format!("{} not departed", left.join(", ")),
                            );
                        }
                        rel.broken = true;
                    }
                    // relation-changed about the remote application's bag.
                    _ => {}
                }
            }
            Hook::ConfigChanged
            | Hook::UpgradeCharm
            | Hook::UpdateStatus
            | Hook::LeaderElected
            | Hook::LeaderSettingsChanged
            | Hook::Action { .. } => {}
        }
    }
    found
}

/// The visibility rule ([`Rule::Visibility`]) for one hook, against its unit's life before
/// it.
fn check_visible(life: &UnitLife, hook: &Hook, saw: &Seen, bad: &mut impl FnMut(Rule, String)) {
    if *hook == Hook::Install && !saw.is_empty() {
        bad(Rule::Visibility, "saw relations during install".into());
        return;
    }
    for (id, remote_units) in saw {
        let entered = life.relations.get(id).filter(|r| !r.broken);
        let creating = matches!(hook, Hook::RelationCreated(r) if r.id == *id);
        if entered.is_none() && !creating {
            let when = if life.relations.contains_key(id) {
                "after its relation-broken"
            } else {
                "before its relation-created"
            };
            bad(Rule::Visibility, format!("saw relation {id} {when}"));
            continue;
        }
        for x in remote_units {
            let joined = entered.is_some_and(|r| r.joined.contains(x));
            let joining = matches!(hook, Hook::RelationJoined(r)
                if r.id == *id && r.remote_unit.as_deref() == Some(x.as_str()));
            if !joined && !joining {
                bad(
                    Rule::Visibility,
                    format!("saw {x} in relation {id} before its relation-joined"),
                );
            }
        }
    }
}

/// Everything a model holds that the lifecycle rules speak of, read through [`ModelTx`] so
/// that every store can be compared with every other, and with itself before and after a
/// refused command.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inventory {
    /// Each application: its record, whether it is dying, its view, its lease and pod spec.
    pub apps: BTreeMap<String, AppInventory>,
    /// Each unit: its record, whether it is dying, its queue.
    pub units: BTreeMap<String, UnitInventory>,
    /// Each relation, with every bag of its applications and their units.
    pub relations: BTreeMap<RelationId, RelationInventory>,
    /// Each action, by id.
    pub actions: BTreeMap<u64, ActionRecord>,
    /// The id the next relation takes.
    pub next_relation: RelationId,
}

/// An application in an [`Inventory`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AppInventory {
    /// Its record.
    pub record: Option<ApplicationRecord>,
    /// Whether it is being removed.
    pub dying: bool,
    /// What its hooks see of it.
    pub view: Option<AppView>,
    /// Its unexpired lease.
    pub lease: Option<LeaseHolder>,
    /// Its pod spec.
    pub pod_spec: Option<PodSpecRecord>,
    /// Its units, by number.
    pub units: Vec<String>,
    /// The number its next unit takes.
    pub next_unit: Option<u32>,
}

/// A unit in an [`Inventory`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitInventory {
    /// Its record.
    pub record: Option<UnitRecord>,
    /// Whether it is being removed.
    pub dying: bool,
    /// Its queue, in order.
    pub queue: Vec<QueuedHook>,
}

/// A relation in an [`Inventory`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RelationInventory {
    /// Its record.
    pub record: Option<RelationRecord>,
    /// The bags of its applications' units (empty where a unit wrote nothing).
    pub unit_bags: BTreeMap<String, SharedBag>,
    /// The bags of its applications.
    pub app_bags: BTreeMap<String, SharedBag>,
}

impl Inventory {
    /// Reads everything in one step of `tx`.
    pub fn read<T: ModelTx + ?Sized>(tx: &mut T) -> Result<Inventory, StoreError> {
        let mut inventory = Inventory::default();
        for record in tx.all_applications()? {
            let app = record.name.clone();
            let units = tx.units_of(&app)?;
            for unit in &units {
                inventory.units.insert(
                    unit.clone(),
                    UnitInventory {
                        record: tx.unit(unit)?,
                        dying: tx.unit_dying(unit)?,
                        queue: tx.queue_of(unit)?.unwrap_or_default(),
                    },
                );
            }
            let entry = AppInventory {
                dying: tx.app_dying(&app)?,
                view: tx.app_view(&app)?,
                lease: tx.live_lease(&app)?,
                pod_spec: tx.pod_spec(&app)?,
                next_unit: tx.next_unit_number(&app)?,
                units,
                record: Some(record),
            };
            inventory.apps.insert(app, entry);
        }
        for record in tx.all_relations()? {
            let apps: Vec<&str> = record.endpoints.iter().map(|e| e.app.as_str()).collect();
            let mut units = Vec::new();
            for app in &apps {
                units.extend(tx.units_of(app)?);
            }
            let names: Vec<&str> = units.iter().map(String::as_str).collect();
            let unit_bags = names
                .iter()
                .map(|n| n.to_string())
                .zip(tx.unit_bags(record.id, &names)?)
                .collect();
            let app_bags = apps
                .iter()
                .map(|a| a.to_string())
                .zip(tx.app_bags(record.id, &apps)?)
                .collect();
            inventory.relations.insert(
                record.id,
                RelationInventory {
                    record: Some((*record).clone()),
                    unit_bags,
                    app_bags,
                },
            );
        }
        let next_action = tx.next_action_id()?;
        for id in 1..next_action {
            if let Some(action) = tx.action(id)? {
                inventory.actions.insert(id, action);
            }
        }
        inventory.next_relation = tx.next_relation_id()?;
        Ok(inventory)
    }
}

/// The violations of the rules that hold in every state of a model, whatever is queued.
pub fn check_model(inventory: &Inventory) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut bad = |rule, detail: String| {
        found.push(Violation {
            rule,
            at: None,
            detail,
        })
    };
    let exists = |app: &str| inventory.apps.contains_key(app);
    for (id, rel) in &inventory.relations {
        let Some(record) = &rel.record else { continue };
        if record.dying {
            let queued = inventory.units.values().any(|u| {
                u.queue
                    .iter()
                    .any(|q| q.hook.relation().is_some_and(|r| r.id == *id))
            });
            for (unit, u) in &inventory.units {
                let failing = u.record.as_ref().is_some_and(|r| r.hook_error.is_some());
                for (at, q) in u.queue.iter().enumerate() {
                    if let Hook::RelationJoined(r) | Hook::RelationChanged(r) = &q.hook
                        && r.id == *id
                        && !(failing && at == 0)
                    {
                        bad(
                            Rule::DyingRelationJoins,
                            format!(
                                "{unit} has {} queued for relation {}, which is dying",
                                q.hook.name(),
                                record.describe()
                            ),
                        );
                    }
                }
            }
            if !queued {
                bad(
                    Rule::DyingRelationStuck,
                    format!(
                        "relation {} is dying with no hook queued about it",
                        record.describe()
                    ),
                );
            }
        } else {
            for e in &record.endpoints {
                let dying = inventory.apps.get(&e.app).is_some_and(|a| a.dying);
                if !exists(&e.app) || (dying && !record.is_peer()) {
                    bad(
                        Rule::LiveRelation,
                        format!(
                            "relation {} joins {}, which is gone or dying",
                            record.describe(),
                            e.app
                        ),
                    );
                }
            }
        }
    }
    for (unit, u) in &inventory.units {
        for q in &u.queue {
            if let Some(r) = q.hook.relation()
                && !inventory.relations.contains_key(&r.id)
            {
                bad(
                    Rule::QueuedForGone,
                    format!(
                        "{unit} has {} queued for relation {}, which is gone",
                        q.hook.name(),
                        r.id
                    ),
                );
            }
        }
        let removes: Vec<usize> = u
            .queue
            .iter()
            .enumerate()
            .filter(|(_, q)| q.hook == Hook::Remove)
            .map(|(at, _)| at)
            .collect();
        let last_is_remove = removes == [u.queue.len().saturating_sub(1)] && !u.queue.is_empty();
        if u.dying && !last_is_remove {
            bad(
                Rule::RemoveLast,
                format!("{unit} is dying without remove queued last"),
            );
        }
        if !u.dying && !removes.is_empty() {
            bad(
                Rule::RemoveLast,
                format!("{unit} has remove queued but is not dying"),
            );
        }
    }
    for (app, a) in &inventory.apps {
        if a.dying
            && let Some(live) = a
                .units
                .iter()
                .find(|u| inventory.units.get(*u).is_some_and(|u| !u.dying))
        {
            bad(
                Rule::DyingAppLiveUnit,
                format!("{app} is dying but {live} is not"),
            );
        }
        if let Some(lease) = &a.lease
            && !a.units.iter().any(|u| u == lease.unit())
        {
            bad(
                Rule::LeaseHolder,
                format!(
                    "{app}'s lease is held by {}, not one of its units",
                    lease.holder
                ),
            );
        }
    }
    found
}

/// The violations of the rules that hold once every queue of the model is empty (with
/// [`check_model`]'s): nothing is dying, no unit is in error, and every application with
/// units has one of them as its leader, on which leader-elected ran for the lease's term.
pub fn check_settled(inventory: &Inventory) -> Vec<Violation> {
    let mut found = check_model(inventory);
    let mut bad = |rule, detail: String| {
        found.push(Violation {
            rule,
            at: None,
            detail,
        })
    };
    for (app, a) in &inventory.apps {
        if a.dying {
            bad(Rule::SettledDying, format!("application {app} is dying"));
        }
        if a.units.is_empty() {
            continue;
        }
        match &a.lease {
            None => bad(
                Rule::SettledLeader,
                format!("{app} has units and no leader"),
            ),
            Some(lease) => {
                let elected = inventory
                    .units
                    .get(lease.unit())
                    .and_then(|u| u.record.as_ref())
                    .and_then(|r| r.elected_term);
                if elected != Some(lease.term) {
                    bad(
                        Rule::SettledLeader,
                        format!(
                            "{} leads {app} for term {} but ran leader-elected for {elected:?}",
                            lease.unit(),
                            lease.term
                        ),
                    );
                }
            }
        }
    }
    for (unit, u) in &inventory.units {
        if u.dying {
            bad(Rule::SettledDying, format!("unit {unit} is dying"));
        }
        if let Some(error) = u.record.as_ref().and_then(|r| r.hook_error.as_ref()) {
            bad(
                Rule::SettledError,
                format!("unit {unit} is in error: {error}"),
            );
        }
        if !u.queue.is_empty() {
            bad(Rule::SettledDying, format!("unit {unit} has hooks queued"));
        }
    }
    for rel in inventory.relations.values() {
        if let Some(record) = rel.record.as_ref().filter(|r| r.dying) {
            bad(
                Rule::SettledDying,
                format!("relation {} is dying", record.describe()),
            );
        }
    }
    found
}

/// Which hook a snapshot is for: the head of its unit's queue, or one its agent runs before
/// the head (leader-elected), which sees nothing the head's hook is to bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runs {
    /// The queue's head.
    #[default]
    Head,
    /// A hook the agent runs before the head.
    BeforeHead,
}

/// The remote units of `unit`'s relations that its queue still owes relation-joined about,
/// behind the hook at its head, and the relations it still owes relation-created for
/// there: what a hook of the unit does not yet see ([`crate::snapshot`]). A unit whose
/// install is queued sees no relation at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotYetSeen {
    /// Install is still queued: no relation is visible.
    pub installing: bool,
    /// Relations whose relation-created waits behind the head.
    pub relations: BTreeSet<RelationId>,
    /// Remote units, by relation, whose relation-joined waits behind the head.
    pub remote_units: BTreeSet<(RelationId, String)>,
    /// Relations whose relation-broken is still queued (at the head or behind it): a unit
    /// leaving, or a relation being removed, sees the relation only until it is broken.
    pub breaking: BTreeSet<RelationId>,
}

impl NotYetSeen {
    /// What a unit whose queue is `queue` (in order) does not see yet in a hook that
    /// `runs`. Each relation is seen from its own relation-created on (Juju enters the
    /// scope of every relation that exists at once after install, then runs their
    /// relation-created hooks one by one: here a relation-created hook sees the relations
    /// created before it, not those after).
    pub fn of<'h>(queue: impl IntoIterator<Item = &'h Hook>, runs: Runs) -> NotYetSeen {
        Self::of_queued(
            queue
                .into_iter()
                .enumerate()
                .map(|(at, hook)| (at == 0, hook)),
            runs,
        )
    }

    /// [`of`](Self::of) from some of a queue's hooks, in order, each with whether it is the
    /// queue's head: a store may leave out every hook that is not install or a
    /// relation-created, -joined or -broken ([`depends_on`](Self::depends_on)).
    pub fn of_queued<'h>(
        queue: impl IntoIterator<Item = (bool, &'h Hook)>,
        runs: Runs,
    ) -> NotYetSeen {
        let mut not = NotYetSeen::default();
        for (head, hook) in queue {
            let behind = !head || runs == Runs::BeforeHead;
            match hook {
                Hook::Install => not.installing = true,
                Hook::RelationCreated(r) if behind => {
                    not.relations.insert(r.id);
                }
                Hook::RelationJoined(r) if behind => {
                    if let Some(x) = &r.remote_unit {
                        not.remote_units.insert((r.id, x.clone()));
                    }
                }
                Hook::RelationBroken(r) => {
                    not.breaking.insert(r.id);
                }
                _ => {}
            }
        }
        not
    }

    /// Whether a queued `hook` can hide anything ([`of_queued`](Self::of_queued) needs only
    /// these): install, relation-created, -joined and -broken.
    pub fn depends_on(hook: &Hook) -> bool {
        matches!(
            hook,
            Hook::Install
                | Hook::RelationCreated(_)
                | Hook::RelationJoined(_)
                | Hook::RelationBroken(_)
        )
    }

    /// Whether a relation that is being removed, or of a unit that is leaving, is still in
    /// the unit's scope: its relation-broken has not run.
    pub fn still_in_scope(&self, id: RelationId) -> bool {
        self.breaking.contains(&id)
    }
}
