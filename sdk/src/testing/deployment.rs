//! A whole model, natively: several applications and their units, related, their hooks
//! run until none is left.
//!
//! [`Context`] runs one hook on an arranged state. A [`Deployment`] keeps the model
//! instead, in the model core's own in-memory records ([`charm_model::memory`]), and
//! changes it with the model core's own operations, as the host does: deploying queues each
//! unit's first hooks and its peer relations, relating queues relation-created, -joined and
//! -changed on both sides, each hook's commit goes through the store's commit rule
//! ([`charm_model::commit`]: the leadership fence, the pod spec revision rule, and the
//! relation-changed and leader-settings-changed it fires on other units), and leader-elected
//! runs when the host's agent would run it ([`charm_model::leadership::owes_leader_elected`]).
//! Each hook itself runs as in [`Context`], with the host's access rules.
//!
//! Time does not pass: leases never expire. Each application's leader is its first unit
//! until [`Deployment::set_leader`] moves the lease (a new term) or the leader is removed.
//! Units take turns, one hook each per round, in name order, so a run is deterministic. A
//! hook that fails puts its unit in error, as in Juju: the unit runs nothing more until
//! [`Deployment::resolved`].
//!
//! ```
//! use charm_sdk::testing::Deployment;
//! use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
//!
//! /// Each unit publishes its name to its peers; the leader counts the peers it sees.
//! struct Counter;
//! impl Charm for Counter {
//!     fn metadata() -> Metadata {
//!         Metadata::new("counter").peers("cluster", "counter")
//!     }
//!     fn handle(model: &Model, event: Event) -> HookResult {
//!         if let Event::RelationJoined(rel) | Event::RelationChanged(rel) = event {
//!             let cluster = model.relation_by_id(rel.id)?;
//!             cluster.local_unit_data()?.set("name", model.unit().name())?;
//!             if model.is_leader() {
//!                 let peers = cluster.remote_units().len();
//!                 model.unit().set_status(Status::active(format!("{peers} peers")))?;
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let mut model = Deployment::new();
//! model.deploy::<Counter>("counter", 3).unwrap();
//! model.run_until_idle();
//!
//! assert_eq!(model.leader("counter").as_deref(), Some("counter/0"));
//! assert_eq!(model.unit("counter/0").unit_status, Status::active("2 peers"));
//! let cluster = &model.unit("counter/1").relations[0];
//! assert_eq!(cluster.remote_units["counter/2"]["name"], "counter/2");
//! ```

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use charm_model::commit::{HookCommit, commit};
use charm_model::memory::{HeldLeases, LeaseBook, MemoryRecords, MemoryTx};
use charm_model::tx::ModelTx;
use charm_model::{
    ApplicationRecord, Changes, Fence, Hook, LeaseHolder, StatusKind, StoreError, UnitSnapshot,
    app_of,
};

use super::host::{Writes, from_model, status_kind, to_model, to_model_metadata};
use super::{Context, Faults, Outcome, Output, PodSpecState, Relation, State, params_to_model};
use crate::{ActionEvent, Charm, ConfigValue, Event, RelationEvent, Status};

/// One hook a [`Deployment`] ran.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRan {
    /// The unit it ran on.
    pub unit: String,
    /// The hook's name, as Juju names it (`db-relation-changed`).
    pub hook: String,
    /// Whether the unit ran it as its application's leader.
    pub leader: bool,
    /// How it ended: [`Outcome::Committed`], or why its unit is now in error.
    pub outcome: Outcome,
}

/// One application's charm, run natively.
trait AppCharm {
    fn run(&self, unit: &str, event: Event, state: State) -> (Output, Option<Writes>);
}

struct Native<C>(PhantomData<fn() -> C>);

impl<C: Charm> AppCharm for Native<C> {
    fn run(&self, unit: &str, event: Event, state: State) -> (Output, Option<Writes>) {
        let mut ctx = Context::<C>::new().unit(unit);
        ctx.any_app_name = true;
        ctx.run_hook(event, state, &Faults::default())
    }
}

/// A model of several applications, run natively until idle. See the
/// [module documentation](self).
pub struct Deployment {
    model: String,
    records: MemoryRecords,
    leases: HeldLeases,
    /// The last term granted per application, so terms never repeat.
    terms: BTreeMap<String, u64>,
    charms: BTreeMap<String, Box<dyn AppCharm>>,
    ran: Vec<HookRan>,
    max_hooks: usize,
}

impl Default for Deployment {
    fn default() -> Self {
        Self::new()
    }
}

impl Deployment {
    /// An empty model named `test`.
    ///
    /// ```
    /// let model = charm_sdk::testing::Deployment::new();
    /// assert!(model.ran().is_empty());
    /// ```
    pub fn new() -> Self {
        Deployment {
            model: "test".into(),
            records: MemoryRecords::default(),
            leases: HeldLeases::default(),
            terms: BTreeMap::new(),
            charms: BTreeMap::new(),
            ran: Vec::new(),
            max_hooks: 10_000,
        }
    }

    /// The same model, stopping [`run_until_idle`](Self::run_until_idle) after `max` hooks
    /// (10 000 unless set): charms that keep firing hooks at each other never settle.
    ///
    /// ```
    /// let model = charm_sdk::testing::Deployment::new().max_hooks(100);
    /// # drop(model);
    /// ```
    pub fn max_hooks(mut self, max: usize) -> Self {
        self.max_hooks = max;
        self
    }

    fn step<T>(&mut self, op: impl FnOnce(&mut MemoryTx<'_, HeldLeases>) -> T) -> T {
        op(&mut MemoryTx {
            records: &mut self.records,
            leases: &mut self.leases,
        })
    }

    /// Deploys charm `C` as application `app` with `units` units and no config settings.
    /// See [`deploy_with`](Self::deploy_with).
    pub fn deploy<C: Charm + 'static>(
        &mut self,
        app: &str,
        units: u32,
    ) -> Result<Vec<String>, StoreError> {
        self.deploy_with::<C, &str, ConfigValue>(app, units, [])
    }

    /// Deploys charm `C` as application `app` with `units` units and these config
    /// settings, as `charm-host deploy` does: each setting checked against the charm's
    /// options, each unit's install, config-changed and start queued, its peer relations
    /// made. Returns the units. Its first unit leads.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Web;
    /// # impl Charm for Web {
    /// #     fn metadata() -> Metadata { Metadata::new("web").int_option("port", Some(80), "") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// let mut model = charm_sdk::testing::Deployment::new();
    /// let units = model.deploy_with::<Web, _, _>("web", 2, [("port", 8080)]).unwrap();
    /// assert_eq!(units, ["web/0", "web/1"]);
    /// // An option the charm does not declare is refused, naming it.
    /// let err = model.deploy_with::<Web, _, _>("api", 1, [("prot", 1)]).unwrap_err();
    /// assert!(err.to_string().contains("prot"), "{err}");
    /// ```
    pub fn deploy_with<C: Charm + 'static, K: Into<String>, V: Into<ConfigValue>>(
        &mut self,
        app: &str,
        units: u32,
        config: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Vec<String>, StoreError> {
        let metadata = C::metadata();
        let record = ApplicationRecord {
            name: app.to_string(),
            charm: metadata.name.clone(),
            metadata: to_model_metadata(&metadata),
            config: config
                .into_iter()
                .map(|(k, v)| (k.into(), to_model(&v.into())))
                .collect(),
            module: None,
        };
        let deployed = self.step(|tx| charm_model::operations::deploy(tx, record, units))?;
        self.charms
            .insert(app.to_string(), Box::new(Native::<C>(PhantomData)));
        self.elect();
        Ok(deployed.units)
    }

    /// Adds a unit to `app`, as `charm-host add-unit` does; returns its name.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Web;
    /// # impl Charm for Web {
    /// #     fn metadata() -> Metadata { Metadata::new("web") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// let mut model = charm_sdk::testing::Deployment::new();
    /// model.deploy::<Web>("web", 1).unwrap();
    /// assert_eq!(model.add_unit("web").unwrap(), "web/1");
    /// ```
    pub fn add_unit(&mut self, app: &str) -> Result<String, StoreError> {
        let unit = self.step(|tx| charm_model::operations::add_unit(tx, app))?;
        self.elect();
        Ok(unit)
    }

    /// Relates two applications (`app` or `app:endpoint` each), as `charm-host relate`
    /// does; returns the relation's id.
    ///
    /// ```
    /// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    /// # struct Web;
    /// # impl Charm for Web {
    /// #     fn metadata() -> Metadata { Metadata::new("web").requires("db", "pgsql") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// # struct Db;
    /// # impl Charm for Db {
    /// #     fn metadata() -> Metadata { Metadata::new("db").provides("db", "pgsql") }
    /// #     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
    /// # }
    /// let mut model = charm_sdk::testing::Deployment::new();
    /// model.deploy::<Web>("web", 1).unwrap();
    /// model.deploy::<Db>("db", 1).unwrap();
    /// let id = model.relate("web:db", "db").unwrap();
    /// // A unit sees the relation from its relation-created on.
    /// assert!(model.unit("web/0").relation_by_id(id).is_none());
    /// model.run_until_idle();
    /// assert_eq!(model.unit("web/0").relation_by_id(id).unwrap().remote_app, "db");
    /// ```
    pub fn relate(&mut self, a: &str, b: &str) -> Result<u32, StoreError> {
        let (relation, _) = self.step(|tx| charm_model::operations::relate(tx, a, b))?;
        Ok(relation.id)
    }

    /// Sets one config option of `app`, as `charm-host config` does: config-changed
    /// is queued on its units if the config their hooks see changed.
    pub fn config(
        &mut self,
        app: &str,
        key: &str,
        value: impl Into<ConfigValue>,
    ) -> Result<(), StoreError> {
        let set = BTreeMap::from([(key.to_string(), to_model(&value.into()))]);
        self.step(|tx| charm_model::config::set_config(tx, app, &set, &[]))?;
        Ok(())
    }

    /// Queues `action` on `unit`, its parameters checked against the charm's declaration
    /// first, as `charm-host run-action` does; returns the action's id, for
    /// [`action`](Self::action) once its hook ran.
    pub fn run_action(&mut self, unit: &str, action: ActionEvent) -> Result<u64, StoreError> {
        let given = params_to_model(&action.name, &action.params).map_err(StoreError::Invalid)?;
        let queued =
            self.step(|tx| charm_model::actions::enqueue_action(tx, unit, &action.name, given, 0))?;
        Ok(queued.action.id)
    }

    /// An action's record: its state, results, failure and log.
    pub fn action(&mut self, id: u64) -> Option<charm_model::ActionRecord> {
        self.step(|tx| tx.action(id)).ok().flatten()
    }

    /// Starts removing `unit`, as `charm-host remove-unit` does: relation-departed and
    /// relation-broken, stop and remove run as [`run_until_idle`](Self::run_until_idle)
    /// goes on, and a departing leader's lease goes to the next unit.
    pub fn remove_unit(&mut self, unit: &str) -> Result<(), StoreError> {
        self.step(|tx| charm_model::removal::remove_unit(tx, unit))?;
        Ok(())
    }

    /// Moves `app`'s lease to `unit`, under a new term: `unit` then runs leader-elected.
    pub fn set_leader(&mut self, unit: &str) -> Result<(), StoreError> {
        let app = app_of(unit).to_string();
        if !self.step(|tx| tx.unit_exists(unit))? {
            return Err(StoreError::NotFound(format!("unit {unit}")));
        }
        self.grant(&app, unit);
        Ok(())
    }

    /// Clears `unit`'s error and runs its failed hook again, as `juju resolved` does.
    ///
    /// ```
    /// use charm_sdk::testing::{Deployment, Outcome};
    /// use charm_sdk::{Charm, Event, HookError, HookResult, Metadata, Model};
    ///
    /// struct Picky;
    /// impl Charm for Picky {
    ///     fn metadata() -> Metadata { Metadata::new("picky").bool_option("broken", Some(true), "") }
    ///     fn handle(model: &Model, event: Event) -> HookResult {
    ///         if event == Event::ConfigChanged && model.config().get::<bool>("broken")? {
    ///             return Err(HookError::msg("broken"));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let mut model = Deployment::new();
    /// model.deploy::<Picky>("picky", 1).unwrap();
    /// let ran = model.run_until_idle().to_vec();
    /// // install, then config-changed fails: start waits behind it.
    /// assert_eq!(ran.len(), 3, "{ran:?}"); // install, leader-elected, config-changed
    /// assert_eq!(ran[2].outcome, Outcome::Failed("broken".into()));
    /// assert!(model.hook_error("picky/0").unwrap().contains("config-changed"));
    ///
    /// model.config("picky", "broken", false).unwrap();
    /// model.resolved("picky/0").unwrap();
    /// let ran = model.run_until_idle().to_vec();
    /// let hooks: Vec<&str> = ran.iter().map(|r| r.hook.as_str()).collect();
    /// assert_eq!(hooks, ["config-changed", "start", "config-changed"]);
    /// assert!(model.hook_error("picky/0").is_none());
    /// ```
    pub fn resolved(&mut self, unit: &str) -> Result<(), StoreError> {
        self.step(|tx| charm_model::operations::resolve_unit(tx, unit, true))?;
        Ok(())
    }

    fn grant(&mut self, app: &str, unit: &str) {
        let term = self.terms.get(app).copied().unwrap_or(0) + 1;
        self.terms.insert(app.to_string(), term);
        self.leases.0.insert(
            app.to_string(),
            LeaseHolder {
                holder: unit.to_string(),
                term,
            },
        );
    }

    /// Gives each application without a leader its first unit that is not leaving.
    fn elect(&mut self) {
        let apps: Vec<String> = self.charms.keys().cloned().collect();
        for app in apps {
            if self.leases.live(&app).is_some() {
                continue;
            }
            let candidate = self.step(|tx| -> Result<Option<String>, StoreError> {
                let dying = tx.dying_units(&app)?;
                Ok(tx.units_of(&app)?.into_iter().find(|u| !dying.contains(u)))
            });
            if let Ok(Some(unit)) = candidate {
                self.grant(&app, &unit);
            }
        }
    }

    /// Runs hooks until none is queued or owed on any unit that is not in error; returns
    /// those it ran, in order.
    ///
    /// # Panics
    ///
    /// When more than [`max_hooks`](Self::max_hooks) hooks run: the charms never settle.
    pub fn run_until_idle(&mut self) -> &[HookRan] {
        let first = self.ran.len();
        loop {
            let units: Vec<String> = self
                .step(|tx| -> Result<Vec<String>, StoreError> {
                    let mut all = Vec::new();
                    for (app, _) in tx.app_charms()? {
                        all.extend(tx.units_of(&app)?);
                    }
                    Ok(all)
                })
                .expect("the memory records answer");
            let mut ran_any = false;
            for unit in units {
                self.elect();
                if let Some((seq, hook)) = self.next_hook(&unit) {
                    self.run_hook(&unit, seq, hook);
                    ran_any = true;
                }
                if self.ran.len() - first > self.max_hooks {
                    let last: Vec<String> = (self.ran[self.ran.len().saturating_sub(10)..].iter())
                        .map(|r| format!("{} {}", r.unit, r.hook))
                        .collect();
                    panic!(
                        "not idle after {} hooks; the last ran: {}",
                        self.max_hooks,
                        last.join(", ")
                    );
                }
            }
            if !ran_any {
                return &self.ran[first..];
            }
        }
    }

    /// The unit's next hook: leader-elected when owed, else the first queued; none while
    /// the unit is in error.
    fn next_hook(&mut self, unit: &str) -> Option<(Option<u64>, Hook)> {
        let lease = self.leases.live(app_of(unit));
        self.step(|tx| {
            let record = tx.unit(unit).ok()??;
            if record.hook_error.is_some() {
                return None;
            }
            let queue = tx.queue_of(unit).ok()??;
            if let Some(lease) = lease.filter(|l| l.holder == unit)
                && charm_model::leadership::owes_leader_elected(
                    record.elected_term,
                    lease.term,
                    queue.iter().map(|q| &q.hook),
                )
            {
                return Some((None, Hook::LeaderElected));
            }
            queue.into_iter().next().map(|q| (Some(q.seq), q.hook))
        })
    }

    fn run_hook(&mut self, unit: &str, seq: Option<u64>, hook: Hook) {
        let app = app_of(unit).to_string();
        let lease = self.leases.live(&app).filter(|l| l.holder == unit);
        // Leader-elected runs before the queue's head, and sees nothing it is to bring.
        let runs = if seq.is_some() {
            charm_model::lifecycle::Runs::Head
        } else {
            charm_model::lifecycle::Runs::BeforeHead
        };
        let state = self.unit_state_for(unit, lease.is_some(), runs);
        let charm = &self.charms[&app];
        let (out, writes) = charm.run(unit, event_of(&hook), state);
        let fence = lease.map(|l| Fence {
            app: app.clone(),
            holder: unit.to_string(),
            term: l.term,
        });
        let mut outcome = out.outcome.clone();
        if let Some(writes) = writes {
            let mut changes = changes_of(writes, &out);
            if hook == Hook::LeaderElected {
                changes.elected_term = fence.as_ref().map(|f| f.term);
            }
            let request = HookCommit {
                unit,
                hook: seq,
                changes: &changes,
                fence: fence.as_ref(),
                // One hook at a time, one agent per unit: nothing can change under a hook.
                read: None,
                owner: None,
            };
            if let Err(e) = self.step(|tx| commit(tx, request)) {
                outcome = Outcome::Failed(e.to_string());
            }
        }
        if !outcome.is_committed() {
            let why = match &outcome {
                Outcome::Failed(m)
                | Outcome::Panicked(m)
                | Outcome::OverLimit(m)
                | Outcome::Refused(m) => m.clone(),
                other => format!("{other:?}"),
            };
            let error = format!("hook failed: {:?}: {why}", hook.name());
            self.step(|tx| charm_model::operations::set_hook_error(tx, unit, Some(&error)))
                .expect("the unit exists");
        }
        self.ran.push(HookRan {
            unit: unit.to_string(),
            hook: hook.name(),
            leader: fence.is_some(),
            outcome,
        });
    }

    fn unit_state(&mut self, unit: &str, leader: bool) -> State {
        self.unit_state_for(unit, leader, charm_model::lifecycle::Runs::Head)
    }

    fn unit_state_for(
        &mut self,
        unit: &str,
        leader: bool,
        runs: charm_model::lifecycle::Runs,
    ) -> State {
        let model = self.model.clone();
        let app = app_of(unit).to_string();
        let (snapshot, pod_spec, record) = self
            .step(|tx| -> Result<_, StoreError> {
                let bags = charm_model::snapshot::BagsRead::All;
                let snapshot = charm_model::snapshot::snapshot_for(tx, &model, unit, bags, runs)?;
                Ok((snapshot, tx.pod_spec(&app)?, tx.unit(unit)?))
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let mut state = state_of(&snapshot, leader);
        state.pod_spec = pod_spec.map(|p| PodSpecState {
            revision: p.revision,
            spec: p.spec,
            k8s_resources: p.k8s_resources,
        });
        state.workload_version = record.map(|r| r.workload_version).filter(|v| !v.is_empty());
        state
    }

    /// The unit as its next hook would see it: leadership, config, relations with every
    /// bag it may read, leader data, stored state, statuses, workload version and its
    /// application's pod spec.
    ///
    /// # Panics
    ///
    /// When there is no such unit.
    pub fn unit(&mut self, unit: &str) -> State {
        let leader = self
            .leases
            .live(app_of(unit))
            .is_some_and(|l| l.holder == unit);
        self.unit_state(unit, leader)
    }

    /// The unit that leads `app`, if one does.
    pub fn leader(&self, app: &str) -> Option<String> {
        self.leases.live(app).map(|l| l.holder)
    }

    /// `app`'s units, by number.
    pub fn units(&mut self, app: &str) -> Vec<String> {
        self.step(|tx| tx.units_of(app)).unwrap_or_default()
    }

    /// The error of the unit's failed hook, while it is in error.
    pub fn hook_error(&mut self, unit: &str) -> Option<String> {
        self.step(|tx| tx.unit(unit)).ok().flatten()?.hook_error
    }

    /// Every hook run so far, in order.
    pub fn ran(&self) -> &[HookRan] {
        &self.ran
    }
}

/// What a committed hook wrote, as the host's commit takes it.
fn changes_of(writes: Writes, out: &Output) -> Changes {
    let status = |s: Status| charm_model::Status {
        kind: status_kind(&s),
        message: s.message().to_string(),
    };
    Changes {
        unit_bags: writes.unit_bags,
        app_bags: writes.app_bags,
        leader_data: writes.leader_data,
        pod_spec: writes.pod_spec.map(Arc::new),
        unit_status: writes.unit_status.map(status),
        app_status: writes.app_status.map(status),
        workload_version: writes.workload_version,
        stored: writes.stored,
        elected_term: None,
        action: out.action.as_ref().map(|a| charm_model::ActionOutput {
            results: a.results.clone(),
            failure: a.failure.clone(),
            log: a.log.clone(),
            ended_ms: None,
        }),
    }
}

/// The event a queued hook is.
fn event_of(hook: &Hook) -> Event {
    let rel = |r: &charm_model::RelationHook| RelationEvent {
        id: r.id,
        name: r.endpoint.clone(),
        remote_app: r.remote_app.clone(),
        remote_unit: r.remote_unit.clone(),
    };
    match hook {
        Hook::Install => Event::Install,
        Hook::Start => Event::Start,
        Hook::ConfigChanged => Event::ConfigChanged,
        Hook::UpgradeCharm => Event::UpgradeCharm,
        Hook::UpdateStatus => Event::UpdateStatus,
        Hook::Stop => Event::Stop,
        Hook::Remove => Event::Remove,
        Hook::LeaderElected => Event::LeaderElected,
        Hook::LeaderSettingsChanged => Event::LeaderSettingsChanged,
        Hook::RelationCreated(r) => Event::RelationCreated(rel(r)),
        Hook::RelationJoined(r) => Event::RelationJoined(rel(r)),
        Hook::RelationChanged(r) => Event::RelationChanged(rel(r)),
        Hook::RelationDeparted(r) => Event::RelationDeparted(rel(r)),
        Hook::RelationBroken(r) => Event::RelationBroken(rel(r)),
        Hook::Action { id, name, params } => Event::Action(ActionEvent {
            id: id.clone(),
            name: name.clone(),
            // The model wrote these parameters itself, as a JSON object.
            params: serde_json::from_str(params).unwrap_or_default(),
        }),
    }
}

/// A unit's snapshot as the single-hook harness's [`State`].
fn state_of(snapshot: &UnitSnapshot, leader: bool) -> State {
    let bag = |b: Option<&charm_model::SharedBag>| b.map(|b| (**b).clone()).unwrap_or_default();
    let status = |s: &charm_model::Status| {
        let m = s.message.clone();
        match s.kind {
            StatusKind::Unknown => Status::Unknown,
            StatusKind::Active => Status::Active(m),
            StatusKind::Maintenance => Status::Maintenance(m),
            StatusKind::Waiting => Status::Waiting(m),
            StatusKind::Blocked => Status::Blocked(m),
            StatusKind::Error => Status::Error(m),
        }
    };
    let relations = snapshot
        .relations
        .values()
        .map(|view| {
            let peer = view.remote_app == snapshot.app;
            Relation {
                id: view.id,
                endpoint: view.endpoint.clone(),
                remote_app: view.remote_app.clone(),
                peer,
                remote_units: view
                    .remote_units
                    .iter()
                    .map(|u| (u.clone(), bag(view.unit_bags.get(u))))
                    .collect(),
                remote_app_data: if peer {
                    Default::default()
                } else {
                    bag(view.app_bags.get(&view.remote_app))
                },
                local_unit_data: bag(view.unit_bags.get(&snapshot.unit)),
                local_app_data: bag(view.app_bags.get(&snapshot.app)),
            }
        })
        .collect();
    State {
        leader,
        config: snapshot
            .config
            .iter()
            .map(|(k, v)| (k.clone(), from_model(v.clone())))
            .collect(),
        relations,
        leader_data: bag(Some(&snapshot.leader_data)),
        stored: bag(Some(&snapshot.stored)),
        unit_status: status(&snapshot.unit_status),
        app_status: status(&snapshot.app_status),
        workload_version: None,
        pod_spec: None,
    }
}
