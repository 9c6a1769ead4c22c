//! Random walks through a model's lifecycle: operator commands interleaved with hooks run
//! in any order across units, as hosts would run them, with the [`crate::lifecycle`] rules
//! checked after every step and once every queue is empty. A test draws the [`Op`]s (a
//! property-testing strategy shrinks a failing walk to a few steps); [`Walk`] applies them
//! to any store that can run a step ([`WalkStore`]), as the host's agents and commands do.
//!
//! ```
//! use charm_model::walk::{MemoryModel, Op, Walk};
//!
//! let mut walk = Walk::new(MemoryModel::default());
//! for op in [
//!     Op::Deploy { app: 0, units: 2 },
//!     Op::Deploy { app: 1, units: 1 },
//!     Op::Relate { app: 1 },
//!     Op::Run { pick: 0, write: true, fail: false },
//!     Op::RemoveRelation { app: 1 },
//! ] {
//!     walk.apply(&op).unwrap();
//! }
//! walk.settle().unwrap();
//! assert!(walk.history.len() > 10);
//! ```

use std::collections::BTreeMap;

use crate::commit::{Fence, HookCommit, commit};
use crate::error::{CommitError, StoreError};
use crate::lifecycle::{
    Inventory, Ran, Violation, check_history, check_model, check_settled, seen,
};
use crate::memory::{HeldLeases, MemoryRecords, MemoryTx};
use crate::records::{
    ActionMeta, ActionOutput, ApplicationRecord, CharmMetadata, ConfigOptionMeta, ConfigValue,
    EndpointMeta, Hook, LeaseHolder, OptionType, RelationRole, app_of,
};
use crate::tx::ModelTx;

/// A store a walk runs on: one atomic step at a time, and the application leases.
pub trait WalkStore {
    /// Runs `op` in one atomic step; its writes apply only if it answers `true`. A store
    /// may run it more than once (etcd's, on a conflict); the last run's answer stands.
    fn step(&mut self, op: &mut (dyn FnMut(&mut dyn ModelTx) -> bool + Send));
    /// Claims `app`'s lease for `unit` if no unexpired lease is held; the term granted.
    fn claim(&mut self, app: &str, unit: &str) -> Option<u64>;
    /// Lets `app`'s lease expire.
    fn expire(&mut self, app: &str);
    /// Keeps a module's bytes; the hash the store keeps them under.
    fn put_module(&mut self, bytes: &[u8]) -> String;
}

/// The model core's own records as a [`WalkStore`]: a step that fails is not undone, so a
/// refused command that wrote anything shows in the walk's [`Inventory`] check.
#[derive(Debug, Default)]
pub struct MemoryModel {
    /// The records.
    pub records: MemoryRecords,
    /// The leases.
    pub leases: HeldLeases,
    /// The last term granted per application.
    pub terms: BTreeMap<String, u64>,
}

impl WalkStore for MemoryModel {
    fn step(&mut self, op: &mut (dyn FnMut(&mut dyn ModelTx) -> bool + Send)) {
        let mut tx = MemoryTx {
            records: &mut self.records,
            leases: &mut self.leases,
        };
        op(&mut tx);
    }

    fn claim(&mut self, app: &str, unit: &str) -> Option<u64> {
        if self.leases.0.contains_key(app) {
            return None;
        }
        let term = self.terms.entry(app.to_string()).or_default();
        *term += 1;
        self.leases.0.insert(
            app.to_string(),
            LeaseHolder {
                holder: unit.to_string(),
                term: *term,
            },
        );
        Some(*term)
    }

    fn expire(&mut self, app: &str) {
        self.leases.0.remove(app);
    }

    fn put_module(&mut self, bytes: &[u8]) -> String {
        // Named by their text: a walk's modules are their own names.
        let hash = String::from_utf8_lossy(bytes).into_owned();
        self.records.put_module(&hash, bytes);
        hash
    }
}

/// The applications a walk deploys, by index: name and charm. Two `web` applications can
/// each relate to `pg`.
pub const APPS: [(&str, &str); 3] = [("pg", "pg"), ("web", "web"), ("cache", "web")];

/// One step of a walk. Indices pick among what exists (modulo its count), so that any
/// sequence is a walk and a shrunk one still means something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `deploy` application `APPS[app]` with `units` units.
    Deploy {
        /// Index into [`APPS`].
        app: usize,
        /// How many units.
        units: u32,
    },
    /// `add-unit`.
    AddUnit {
        /// Index into [`APPS`].
        app: usize,
    },
    /// `remove-unit` of one of the application's units.
    RemoveUnit {
        /// Index into [`APPS`].
        app: usize,
        /// Which of its units.
        pick: usize,
    },
    /// `relate` a `web` application with `pg`.
    Relate {
        /// Index into [`APPS`] (1 or 2; 0 relates `cache`).
        app: usize,
    },
    /// `remove-relation` of a `web` application and `pg`.
    RemoveRelation {
        /// Index into [`APPS`], as for [`Op::Relate`].
        app: usize,
    },
    /// `config` with a new value.
    Config {
        /// Index into [`APPS`].
        app: usize,
        /// The value's seed.
        value: u8,
    },
    /// `upgrade-charm` to a new module of the same charm.
    Upgrade {
        /// Index into [`APPS`].
        app: usize,
    },
    /// `remove-application`.
    RemoveApplication {
        /// Index into [`APPS`].
        app: usize,
        /// With `--force`.
        force: bool,
    },
    /// `run-action` on one of the application's units.
    RunAction {
        /// Index into [`APPS`].
        app: usize,
        /// Which of its units.
        pick: usize,
    },
    /// One of the application's live units claims its lease (nothing if one is held).
    Elect {
        /// Index into [`APPS`].
        app: usize,
        /// Which of its units.
        pick: usize,
    },
    /// The application's lease expires.
    Expire {
        /// Index into [`APPS`].
        app: usize,
    },
    /// A unit's agent runs its next hook (leader-elected if owed, else its queue's head).
    Run {
        /// Which of the units with a hook to run.
        pick: usize,
        /// Whether the hook writes its bags (and, as leader, the application's and the
        /// leader settings).
        write: bool,
        /// Whether the hook fails (the unit goes into error).
        fail: bool,
    },
    /// `resolved` on a unit in error.
    Resolve {
        /// Which of the units in error.
        pick: usize,
        /// Run the failed hook again (else skip it).
        retry: bool,
    },
}

impl Op {
    /// The step three drawn numbers make: `kind` picks the operation, in proportions that
    /// keep a walk busy with hooks (about half its steps run one), `a` and `b` its
    /// arguments. A property-testing strategy draws the numbers, so that shrinking works on
    /// them and every test draws walks alike.
    ///
    /// ```
    /// use charm_model::walk::Op;
    ///
    /// assert_eq!(Op::drawn(0, 1, 2), Op::Deploy { app: 1, units: 2 });
    /// assert!(matches!(Op::drawn(35, 0, 0), Op::Run { .. }));
    /// ```
    pub fn drawn(kind: u8, a: u8, b: u8) -> Op {
        let app = usize::from(a % 3);
        let pick = usize::from(b % 8);
        // Weights out of 36: the operator's commands 18, leadership 3, hooks 14, resolved 1.
        match kind % 36 {
            0..=1 => Op::Deploy {
                app,
                units: u32::from(b % 3),
            },
            2..=3 => Op::AddUnit { app },
            4..=5 => Op::RemoveUnit { app, pick },
            6..=8 => Op::Relate { app },
            9..=10 => Op::RemoveRelation { app },
            11 => Op::Config { app, value: b },
            12 => Op::Upgrade { app },
            13 => Op::RemoveApplication {
                app,
                force: b.is_multiple_of(2),
            },
            14 => Op::RunAction { app, pick },
            15..=16 => Op::Elect { app, pick },
            17 => Op::Expire { app },
            18 => Op::Resolve {
                pick,
                retry: a.is_multiple_of(2),
            },
            _ => Op::Run {
                pick,
                write: a.is_multiple_of(2),
                // One hook in twenty fails.
                fail: b.is_multiple_of(20),
            },
        }
    }
}

/// Why a walk stopped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WalkError {
    /// A lifecycle rule was broken.
    #[error("after step {step} ({op}): {violations:?}")]
    Broken {
        /// The step's index (the walk's length for the settling at the end).
        step: usize,
        /// The step, in words.
        op: String,
        /// What was broken.
        violations: Vec<String>,
    },
    /// A refused command wrote something.
    #[error("step {step} ({op}) was refused ({error}) but changed the model")]
    RefusedWrote {
        /// The step's index.
        step: usize,
        /// The step, in words.
        op: String,
        /// Its refusal.
        error: String,
    },
    /// A hook's commit that must pass was refused.
    #[error("step {step}: the commit of {unit} {hook} was refused: {error}")]
    CommitRefused {
        /// The step's index.
        step: usize,
        /// The unit.
        unit: String,
        /// The hook.
        hook: String,
        /// The refusal.
        error: String,
    },
    /// The queues did not empty within the bound.
    #[error("the model did not settle within {0} hooks")]
    Unsettled(usize),
    /// The store failed.
    #[error("store: {0}")]
    Store(String),
}

/// A walk in progress: the store, the hooks run so far, and how many steps were taken.
pub struct Walk<S: WalkStore> {
    /// The store.
    pub store: S,
    /// Every hook run (or skipped by `resolved`), in order.
    pub history: Vec<Ran>,
    /// Steps taken.
    pub steps: usize,
    /// Modules made for upgrades.
    modules: u32,
    /// Actions started.
    actions: u64,
    /// Applications deployed once: a name is not deployed again, as this model numbers a
    /// redeployed application's units from 0 again (Juju does not), and a history names
    /// units.
    deployed: std::collections::BTreeSet<&'static str>,
}

/// A charm's metadata for the walk: `pg` provides `db` and has peers; `web` requires `db`
/// and has peers. Each has one string option and one action.
pub fn metadata(charm: &str) -> CharmMetadata {
    let endpoint = |name: &str, role, interface: &str| EndpointMeta {
        name: name.into(),
        role,
        interface: interface.into(),
        limit: None,
    };
    let relations = match charm {
        "pg" => vec![
            endpoint("db", RelationRole::Provides, "pgsql"),
            endpoint("replicas", RelationRole::Peers, "pg-peers"),
        ],
        _ => vec![
            endpoint("db", RelationRole::Requires, "pgsql"),
            endpoint("cluster", RelationRole::Peers, "web-peers"),
        ],
    };
    CharmMetadata {
        name: charm.into(),
        summary: String::new(),
        relations,
        config: vec![ConfigOptionMeta {
            name: "setting".into(),
            kind: OptionType::String,
            default: Some(ConfigValue::String("default".into())),
            description: String::new(),
        }],
        actions: vec![ActionMeta {
            name: "backup".into(),
            description: String::new(),
            params: Vec::new(),
        }],
    }
}

impl<S: WalkStore> Walk<S> {
    /// A walk on an empty `store`.
    pub fn new(store: S) -> Self {
        Walk {
            store,
            history: Vec::new(),
            steps: 0,
            modules: 0,
            actions: 0,
            deployed: Default::default(),
        }
    }

    /// Runs a model operation in one step; on refusal, checks it wrote nothing.
    fn operation<R>(
        &mut self,
        op: &Op,
        mut run: impl FnMut(&mut dyn ModelTx) -> Result<R, StoreError> + Send,
    ) -> Result<Option<R>, WalkError>
    where
        R: Send,
    {
        let step = self.steps;
        let mut out = None;
        self.store.step(&mut |tx| {
            let before = Inventory::read(tx);
            let result = run(tx);
            let ok = result.is_ok();
            out = Some((
                before,
                result.map_err(|e| e.to_string()),
                if ok { None } else { Some(Inventory::read(tx)) },
            ));
            ok
        });
        let Some((before, result, after)) = out else {
            return Err(WalkError::Store("the step did not run".into()));
        };
        match result {
            Ok(r) => Ok(Some(r)),
            Err(error) => {
                let (before, after) = (before.map_err(store)?, after.transpose().map_err(store)?);
                if after.as_ref() != Some(&before) {
                    return Err(WalkError::RefusedWrote {
                        step,
                        op: format!("{op:?}"),
                        error,
                    });
                }
                Ok(None)
            }
        }
    }

    /// Reads the whole model.
    pub fn inventory(&mut self) -> Result<Inventory, WalkError> {
        let mut out = None;
        self.store.step(&mut |tx| {
            out = Some(Inventory::read(tx));
            false
        });
        out.ok_or_else(|| WalkError::Store("the step did not run".into()))?
            .map_err(store)
    }

    /// Applies one step, then checks the rules that hold in every state.
    pub fn apply(&mut self, op: &Op) -> Result<(), WalkError> {
        self.act(op)?;
        let inventory = self.inventory()?;
        let found = check_model(&inventory);
        self.steps += 1;
        broken(self.steps - 1, op, found)
    }

    fn act(&mut self, op: &Op) -> Result<(), WalkError> {
        let inventory = self.inventory()?;
        let units_of = |app: usize| -> Vec<String> {
            inventory
                .apps
                .get(APPS[app % APPS.len()].0)
                .map(|a| a.units.clone())
                .unwrap_or_default()
        };
        let pick = |units: &[String], i: usize| units.get(i % units.len().max(1)).cloned();
        match *op {
            Op::Deploy { app, units } => {
                let (name, charm) = APPS[app % APPS.len()];
                if !self.deployed.insert(name) {
                    return Ok(());
                }
                let record = ApplicationRecord {
                    name: name.into(),
                    charm: charm.into(),
                    metadata: metadata(charm),
                    config: BTreeMap::new(),
                    module: None,
                };
                self.operation(op, |tx| {
                    crate::operations::deploy(tx, record.clone(), units)
                })?;
            }
            Op::AddUnit { app } => {
                let name = APPS[app % APPS.len()].0;
                self.operation(op, |tx| crate::operations::add_unit(tx, name))?;
            }
            Op::RemoveUnit { app, pick: i } => {
                if let Some(unit) = pick(&units_of(app), i) {
                    self.operation(op, |tx| crate::removal::remove_unit(tx, &unit))?;
                }
            }
            Op::Relate { app } => {
                let web = APPS[1 + app % 2].0;
                self.operation(op, |tx| crate::operations::relate(tx, web, "pg"))?;
            }
            Op::RemoveRelation { app } => {
                let web = APPS[1 + app % 2].0;
                self.operation(op, |tx| crate::removal::remove_relation(tx, web, "pg"))?;
            }
            Op::Config { app, value } => {
                let name = APPS[app % APPS.len()].0;
                let set = BTreeMap::from([(
                    "setting".to_string(),
                    ConfigValue::String(format!("v{}", value % 4)),
                )]);
                self.operation(op, |tx| crate::config::set_config(tx, name, &set, &[]))?;
            }
            Op::Upgrade { app } => {
                let (name, charm) = APPS[app % APPS.len()];
                self.modules += 1;
                let hash = self
                    .store
                    .put_module(format!("module-{}", self.modules).as_bytes());
                self.operation(op, |tx| {
                    crate::upgrade::upgrade_charm(tx, name, charm, metadata(charm), &hash)
                })?;
            }
            Op::RemoveApplication { app, force } => {
                let name = APPS[app % APPS.len()].0;
                self.operation(op, |tx| crate::removal::remove_application(tx, name, force))?;
            }
            Op::RunAction { app, pick: i } => {
                if let Some(unit) = pick(&units_of(app), i) {
                    self.actions += 1;
                    let at = self.actions;
                    self.operation(op, |tx| {
                        crate::actions::enqueue_action(tx, &unit, "backup", BTreeMap::new(), at)
                    })?;
                }
            }
            Op::Elect { app, pick: i } => {
                let name = APPS[app % APPS.len()].0;
                let live: Vec<String> = units_of(app)
                    .into_iter()
                    .filter(|u| inventory.units.get(u).is_some_and(|u| !u.dying))
                    .collect();
                if let Some(unit) = pick(&live, i) {
                    self.store.claim(name, &unit);
                }
            }
            Op::Expire { app } => self.store.expire(APPS[app % APPS.len()].0),
            Op::Run {
                pick: i,
                write,
                fail,
            } => {
                let ready = ready_units(&inventory);
                if let Some(unit) = pick(&ready, i) {
                    self.run_hook(&unit, write, fail)?;
                }
            }
            Op::Resolve { pick: i, retry } => {
                let failing: Vec<String> = inventory
                    .units
                    .iter()
                    .filter(|(_, u)| u.record.as_ref().is_some_and(|r| r.hook_error.is_some()))
                    .map(|(name, _)| name.clone())
                    .collect();
                if let Some(unit) = pick(&failing, i)
                    && let Some(Some(skipped)) =
                        self.operation(op, |tx| crate::operations::resolve_unit(tx, &unit, retry))?
                    && !retry
                {
                    self.history.push(Ran {
                        unit,
                        hook: skipped,
                        saw: None,
                    });
                }
            }
        }
        Ok(())
    }

    /// Runs `unit`'s next hook as its agent would: leader-elected when owed, else the head
    /// of its queue, on a snapshot, committed with the hook's writes (or failed).
    pub fn run_hook(&mut self, unit: &str, write: bool, fail: bool) -> Result<(), WalkError> {
        let step = self.steps;
        let mut out: Option<Result<Option<(Hook, Ran)>, WalkError>> = None;
        self.store.step(&mut |tx| {
            let result = run_in(tx, unit, write, fail, step);
            let ok = result.is_ok();
            out = Some(result);
            ok
        });
        let ran = out.ok_or_else(|| WalkError::Store("the step did not run".into()))??;
        if let Some((_, ran)) = ran {
            self.history.push(ran);
        }
        Ok(())
    }

    /// Runs every queue empty: each application with live units and no leader elects its
    /// first live unit, units in error are resolved with a retry, and hooks run (writing
    /// nothing, so that no relation answers another for ever) until none is left; then
    /// checks the settled model's rules and the whole history.
    pub fn settle(&mut self) -> Result<(), WalkError> {
        const BOUND: usize = 20_000;
        for _ in 0..BOUND {
            let inventory = self.inventory()?;
            for (app, a) in &inventory.apps {
                let live = a
                    .units
                    .iter()
                    .find(|u| inventory.units.get(*u).is_some_and(|u| !u.dying));
                if a.lease.is_none()
                    && let Some(unit) = live
                {
                    self.store.claim(app, unit);
                }
            }
            let failing = inventory
                .units
                .iter()
                .find(|(_, u)| u.record.as_ref().is_some_and(|r| r.hook_error.is_some()));
            if let Some((unit, _)) = failing {
                let unit = unit.clone();
                self.operation(
                    &Op::Resolve {
                        pick: 0,
                        retry: true,
                    },
                    |tx| crate::operations::resolve_unit(tx, &unit, true),
                )?;
                continue;
            }
            let inventory = self.inventory()?;
            let ready = ready_units(&inventory);
            let Some(unit) = ready.first() else {
                let mut found = check_settled(&inventory);
                found.extend(check_history(&self.history));
                return broken(self.steps, &"settle", found);
            };
            self.run_hook(unit, false, false)?;
        }
        Err(WalkError::Unsettled(BOUND))
    }
}

/// The units with a hook to run: not in error, with a queued hook or leader-elected owed.
fn ready_units(inventory: &Inventory) -> Vec<String> {
    inventory
        .units
        .iter()
        .filter(|(_, u)| u.record.as_ref().is_some_and(|r| r.hook_error.is_none()))
        .filter(|(name, u)| !u.queue.is_empty() || owes_elected(inventory, name).is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

/// The term `unit` owes leader-elected for, if it leads and owes it.
fn owes_elected(inventory: &Inventory, unit: &str) -> Option<u64> {
    let lease = inventory.apps.get(app_of(unit))?.lease.as_ref()?;
    let u = inventory.units.get(unit)?;
    let elected = u.record.as_ref()?.elected_term;
    // The agent stops renewing once stop is at the head: a leaving leader runs no more.
    let stopping = u.queue.first().is_some_and(|q| q.hook == Hook::Stop);
    (lease.unit() == unit
        && !stopping
        && crate::leadership::owes_leader_elected(
            elected,
            lease.term,
            u.queue.iter().map(|q| &q.hook),
        ))
    .then_some(lease.term)
}

/// One hook of `unit` in the step `tx`: what it ran, if it ran one.
fn run_in(
    tx: &mut dyn ModelTx,
    unit: &str,
    write: bool,
    fail: bool,
    step: usize,
) -> Result<Option<(Hook, Ran)>, WalkError> {
    let app = app_of(unit);
    let lease = tx.live_lease(app).map_err(store)?;
    let record = tx.unit(unit).map_err(store)?;
    let queue = tx.queue_of(unit).map_err(store)?.unwrap_or_default();
    let Some(record) = record else {
        return Ok(None);
    };
    let stopping = queue.first().is_some_and(|q| q.hook == Hook::Stop);
    let leads = lease.as_ref().filter(|l| l.unit() == unit);
    let elected = leads.filter(|l| {
        !stopping
            && crate::leadership::owes_leader_elected(
                record.elected_term,
                l.term,
                queue.iter().map(|q| &q.hook),
            )
    });
    let (seq, hook) = match elected {
        Some(_) => (None, Hook::LeaderElected),
        None => match queue.first() {
            Some(q) => (Some(q.seq), q.hook.clone()),
            None => return Ok(None),
        },
    };
    if fail && hook != Hook::LeaderElected {
        crate::operations::hook_failed(tx, unit, seq, "the walk failed it").map_err(store)?;
        return Ok(None);
    }
    let runs = if seq.is_some() {
        crate::lifecycle::Runs::Head
    } else {
        crate::lifecycle::Runs::BeforeHead
    };
    let read =
        crate::snapshot::hook_read_for(tx, "walk", unit, crate::snapshot::BagsRead::All, runs)
            .map_err(store)?;
    let fence = leads.map(|l| Fence {
        app: app.to_string(),
        holder: l.holder.clone(),
        term: l.term,
    });
    let mut changes = crate::records::Changes::default();
    if hook == Hook::LeaderElected {
        changes.elected_term = leads.map(|l| l.term);
    }
    if write {
        let value = format!("{step}");
        for id in read.snapshot.relations.keys() {
            changes.unit_bags.insert(
                *id,
                BTreeMap::from([("k".to_string(), Some(value.clone()))]),
            );
            if fence.is_some() {
                changes.app_bags.insert(
                    *id,
                    BTreeMap::from([("a".to_string(), Some(value.clone()))]),
                );
            }
        }
        if fence.is_some() {
            changes.leader_data = BTreeMap::from([("l".to_string(), Some(value))]);
        }
    }
    if matches!(hook, Hook::Action { .. }) {
        changes.action = Some(ActionOutput::default());
    }
    let request = HookCommit {
        unit,
        hook: seq,
        changes: &changes,
        fence: fence.as_ref(),
        read: Some(&read),
        owner: None,
    };
    match commit(tx, request) {
        Ok(_) => Ok(Some((
            hook.clone(),
            Ran {
                unit: unit.to_string(),
                hook,
                saw: Some(seen(&read.snapshot)),
            },
        ))),
        Err(error) => Err(WalkError::CommitRefused {
            step,
            unit: unit.to_string(),
            hook: hook.name(),
            error: error.to_string(),
        }),
    }
}

fn store(e: StoreError) -> WalkError {
    WalkError::Store(e.to_string())
}

fn broken(step: usize, op: &dyn std::fmt::Debug, found: Vec<Violation>) -> Result<(), WalkError> {
    if found.is_empty() {
        return Ok(());
    }
    Err(WalkError::Broken {
        step,
        op: format!("{op:?}"),
        violations: found.iter().map(ToString::to_string).collect(),
    })
}

impl From<CommitError> for WalkError {
    fn from(e: CommitError) -> Self {
        WalkError::Store(e.to_string())
    }
}
