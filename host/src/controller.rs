//! A deployment: applications, their units' agents, relations, and the routing of the
//! hooks one unit's commit causes on others.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::agent::{HookExecutor, HookRecord, RetryPolicy, UnitAgent};
use crate::charm::Charm;
use crate::leadership::{Leadership, LeadershipConfig, LeadershipTracker};
use crate::model::{
    ApplicationRecord, CharmMetadata, ConfigValue, Hook, RelationEndpoint, RelationHook,
    RelationRecord, RelationRole, app_of,
};
use crate::store::{CommitReceipt, ModelStatus, Store, StoreError};

/// Called with every hook run, as it ends.
#[derive(Clone)]
pub struct HookObserver(pub Arc<dyn Fn(&HookRecord) + Send + Sync>);

impl std::fmt::Debug for HookObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookObserver")
    }
}

/// How a controller runs its units.
#[derive(Debug, Clone, Default)]
pub struct ControllerConfig {
    /// Called with every hook run.
    pub observer: Option<HookObserver>,
    /// Lease timings.
    pub leadership: LeadershipConfig,
    /// Retries of failed hooks.
    pub retry: RetryPolicy,
    /// Whether to keep a history of every hook run (for tests and reports).
    pub record_history: bool,
    /// Seeds the lease retry jitter; `None` seeds from the operating system.
    pub seed: Option<u64>,
}

/// A stable 64-bit hash (FNV-1a), to derive per-unit seeds.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why a deployment step was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A relation between endpoints that cannot be related.
    #[error("cannot relate {a} and {b}: {reason}")]
    BadRelation {
        /// One side, `app:endpoint`.
        a: String,
        /// The other side.
        b: String,
        /// Why not.
        reason: String,
    },
    /// A config setting the charm does not take.
    #[error("application {app}: option {option:?}: {reason}")]
    BadOption {
        /// The application.
        app: String,
        /// The option.
        option: String,
        /// Why.
        reason: String,
    },
    /// The leadership timings are unsafe.
    #[error(transparent)]
    Leadership(#[from] crate::leadership::LeadershipConfigError),
}

/// The number of hooks queued or running across all units; zero means idle.
pub(crate) struct Pending(watch::Sender<usize>);

impl Pending {
    pub(crate) fn add(&self, n: usize) {
        self.0.send_modify(|p| *p += n);
    }

    pub(crate) fn done(&self, n: usize) {
        self.0.send_modify(|p| *p = p.saturating_sub(n));
    }
}

/// What the controller and its agents share.
pub(crate) struct Shared {
    store: Arc<dyn Store>,
    mailboxes: Mutex<BTreeMap<String, mpsc::UnboundedSender<Hook>>>,
    pub(crate) pending: Pending,
    pub(crate) guarantee_margin: Duration,
    history: Option<Mutex<Vec<HookRecord>>>,
    observer: Option<HookObserver>,
}

impl Shared {
    pub(crate) fn record(&self, record: HookRecord) {
        if let Some(observer) = &self.observer {
            (observer.0)(&record);
        }
        if let Some(history) = &self.history {
            history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
        }
    }

    fn enqueue(&self, unit: &str, hook: Hook) {
        let mailboxes = self.mailboxes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = mailboxes.get(unit) {
            self.pending.add(1);
            if tx.send(hook).is_err() {
                self.pending.done(1);
            }
        }
    }

    /// Fires the hooks Juju fires on other units after `unit`'s commit.
    pub(crate) async fn route(&self, unit: &str, receipt: &CommitReceipt) {
        if receipt.unit_bags_changed.is_empty()
            && receipt.app_bags_changed.is_empty()
            && !receipt.leader_data_changed
        {
            return;
        }
        let app = app_of(unit);
        let relations = match self.store.relations().await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(%unit, "cannot route relation changes: {e}");
                return;
            }
        };
        let changed = receipt
            .unit_bags_changed
            .iter()
            .map(|id| (*id, Some(unit.to_string())))
            .chain(receipt.app_bags_changed.iter().map(|id| (*id, None)));
        for (id, remote_unit) in changed {
            let Some(rel) = relations.iter().find(|r| r.id == id) else {
                continue;
            };
            let Some(remote) = rel.remote(app) else {
                continue;
            };
            for target in self.units(&remote.app).await {
                if target == unit {
                    continue;
                }
                let hook = RelationHook {
                    id,
                    endpoint: remote.endpoint.clone(),
                    remote_app: app.to_string(),
                    remote_unit: remote_unit.clone(),
                };
                self.enqueue(&target, Hook::RelationChanged(hook));
            }
        }
        if receipt.leader_data_changed {
            for target in self.units(app).await {
                if target != unit {
                    self.enqueue(&target, Hook::LeaderSettingsChanged);
                }
            }
        }
    }

    async fn units(&self, app: &str) -> Vec<String> {
        self.store.units(app).await.unwrap_or_default()
    }
}

/// Runs the units of a model: one agent per unit, each with its hook queue and leadership
/// tracker, over one store.
pub struct Controller {
    shared: Arc<Shared>,
    config: ControllerConfig,
    trackers: Mutex<BTreeMap<String, tokio::task::AbortHandle>>,
    executors: Mutex<BTreeMap<String, Arc<dyn HookExecutor>>>,
    leadership: Mutex<BTreeMap<String, watch::Receiver<Leadership>>>,
    seed: u64,
    idle: watch::Receiver<usize>,
}

impl Controller {
    /// A controller over `store`. Must be created inside a tokio runtime.
    pub fn new(
        store: Arc<dyn Store>,
        guarantee_margin: Duration,
        config: ControllerConfig,
    ) -> Result<Self, ControllerError> {
        config.leadership.validate()?;
        let (tx, idle) = watch::channel(0);
        let shared = Arc::new(Shared {
            store,
            mailboxes: Mutex::new(BTreeMap::new()),
            pending: Pending(tx),
            guarantee_margin,
            history: config.record_history.then(|| Mutex::new(Vec::new())),
            observer: config.observer.clone(),
        });
        Ok(Controller {
            shared,
            trackers: Mutex::new(BTreeMap::new()),
            executors: Mutex::new(BTreeMap::new()),
            leadership: Mutex::new(BTreeMap::new()),
            seed: config.seed.unwrap_or_else(rand::random),
            config,
            idle,
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// Deploys `units` units of `app` running `charm`, with the operator's `config`. Each
    /// unit runs install, leader-elected (on the leader), config-changed and start.
    pub async fn deploy(
        &self,
        app: &str,
        charm: Charm,
        charm_ref: &str,
        config: BTreeMap<String, ConfigValue>,
        units: u32,
    ) -> Result<Vec<String>, ControllerError> {
        let metadata = charm.metadata().as_ref().clone();
        self.deploy_with(app, Arc::new(charm), metadata, charm_ref, config, units)
            .await
    }

    /// Deploys `units` units of `app` whose hooks `executor` runs; `metadata` is what the
    /// charm declares.
    pub async fn deploy_with(
        &self,
        app: &str,
        executor: Arc<dyn HookExecutor>,
        metadata: CharmMetadata,
        charm_ref: &str,
        config: BTreeMap<String, ConfigValue>,
        units: u32,
    ) -> Result<Vec<String>, ControllerError> {
        match self.shared.store.application(app).await {
            Ok(existing) => return self.resume(existing, executor).await,
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let mut settings = BTreeMap::new();
        for (name, value) in config {
            let option = metadata
                .option(&name)
                .ok_or_else(|| ControllerError::BadOption {
                    app: app.to_string(),
                    option: name.clone(),
                    reason: format!("charm {} has no such option", metadata.name),
                })?;
            let value = value
                .coerce(option.kind)
                .ok_or_else(|| ControllerError::BadOption {
                    app: app.to_string(),
                    option: name.clone(),
                    reason: format!("expected a {}", option.kind.as_str()),
                })?;
            settings.insert(name, value);
        }
        self.shared
            .store
            .add_application(ApplicationRecord {
                name: app.to_string(),
                charm: charm_ref.to_string(),
                metadata,
                config: settings,
            })
            .await?;
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(app.to_string(), executor.clone());
        let mut names = Vec::new();
        for _ in 0..units {
            let unit = self.shared.store.add_unit(app).await?;
            let initial = vec![Hook::Install, Hook::ConfigChanged, Hook::Start];
            self.start_agent(&unit, executor.clone(), initial, false, None);
            names.push(unit);
        }
        Ok(names)
    }

    /// Starts the agents of an application the store already has: nothing is deployed
    /// again and install does not run again.
    async fn resume(
        &self,
        app: ApplicationRecord,
        executor: Arc<dyn HookExecutor>,
    ) -> Result<Vec<String>, ControllerError> {
        tracing::info!(app = %app.name, "resuming from the store");
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(app.name.clone(), executor.clone());
        // A unit that still holds its lease already ran leader-elected for that term.
        let lease = self.shared.store.leader(&app.name).await.ok().flatten();
        let units = self.shared.store.units(&app.name).await?;
        for unit in &units {
            let elected = lease.as_ref().filter(|l| l.holder == *unit).map(|l| l.term);
            self.start_agent(unit, executor.clone(), Vec::new(), true, elected);
        }
        Ok(units)
    }

    fn start_agent(
        &self,
        unit: &str,
        executor: Arc<dyn HookExecutor>,
        initial: Vec<Hook>,
        installed: bool,
        elected_term: Option<u64>,
    ) {
        let (tx, inbox) = mpsc::unbounded_channel();
        self.shared.pending.add(initial.len());
        self.shared
            .mailboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unit.to_string(), tx);
        let lease_store: Arc<dyn crate::store::LeaseStore> = self.shared.store.clone();
        let seed = self.seed ^ fnv1a(unit);
        let tracker = LeadershipTracker::spawn(
            lease_store,
            app_of(unit),
            unit,
            self.config.leadership.clone(),
            seed,
        );
        self.leadership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unit.to_string(), tracker.subscribe());
        let agent = UnitAgent {
            unit: unit.to_string(),
            executor,
            store: self.shared.store.clone(),
            shared: self.shared.clone(),
            inbox,
            queue: VecDeque::from(initial),
            retry: self.config.retry.clone(),
            leadership: self.config.leadership.clone(),
            installed,
            elected_term,
        };
        let task = tokio::spawn(agent.run(tracker));
        self.trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unit.to_string(), task.abort_handle());
    }

    /// Relates two endpoints, given as `(app, endpoint)`, and fires relation-created,
    /// -joined and -changed on both sides as Juju does.
    pub async fn relate(
        &self,
        a: (&str, &str),
        b: (&str, &str),
    ) -> Result<RelationRecord, ControllerError> {
        let bad = |reason: String| ControllerError::BadRelation {
            a: format!("{}:{}", a.0, a.1),
            b: format!("{}:{}", b.0, b.1),
            reason,
        };
        let app_a = self.shared.store.application(a.0).await?;
        let app_b = self.shared.store.application(b.0).await?;
        let ep_a = app_a
            .metadata
            .endpoint(a.1)
            .ok_or_else(|| bad(format!("{} has no endpoint {:?}", a.0, a.1)))?;
        let ep_b = app_b
            .metadata
            .endpoint(b.1)
            .ok_or_else(|| bad(format!("{} has no endpoint {:?}", b.0, b.1)))?;
        if ep_a.interface != ep_b.interface {
            return Err(bad(format!(
                "interfaces differ: {} and {}",
                ep_a.interface, ep_b.interface
            )));
        }
        let compatible = matches!(
            (ep_a.role, ep_b.role),
            (RelationRole::Provides, RelationRole::Requires)
                | (RelationRole::Requires, RelationRole::Provides)
        );
        if !compatible {
            return Err(bad(format!(
                "roles {:?} and {:?} do not pair",
                ep_a.role, ep_b.role
            )));
        }
        let endpoints = vec![
            RelationEndpoint {
                app: a.0.to_string(),
                endpoint: a.1.to_string(),
            },
            RelationEndpoint {
                app: b.0.to_string(),
                endpoint: b.1.to_string(),
            },
        ];
        // Relating again what is already related (a resumed bundle) changes nothing.
        let existing =
            self.shared.store.relations().await?.into_iter().find(|r| {
                r.endpoints.len() == 2 && r.endpoints.iter().all(|e| endpoints.contains(e))
            });
        if let Some(existing) = existing {
            return Ok(existing);
        }
        let record = self
            .shared
            .store
            .add_relation(&ep_a.interface, endpoints)
            .await?;
        let sides = [(a, b), (b, a)];
        for ((local_app, local_ep), (remote_app, _)) in sides {
            let remote_units = self.shared.units(remote_app).await;
            for unit in self.shared.units(local_app).await {
                let hook = |remote_unit: Option<&String>| RelationHook {
                    id: record.id,
                    endpoint: local_ep.to_string(),
                    remote_app: remote_app.to_string(),
                    remote_unit: remote_unit.cloned(),
                };
                self.shared
                    .enqueue(&unit, Hook::RelationCreated(hook(None)));
                for remote in &remote_units {
                    self.shared
                        .enqueue(&unit, Hook::RelationJoined(hook(Some(remote))));
                    self.shared
                        .enqueue(&unit, Hook::RelationChanged(hook(Some(remote))));
                }
            }
        }
        Ok(record)
    }

    /// Waits until no hook is queued or running on any unit.
    pub async fn wait_idle(&self) {
        let mut idle = self.idle.clone();
        let _ = idle.wait_for(|pending| *pending == 0).await;
    }

    /// The hooks queued or running now.
    pub fn pending(&self) -> usize {
        *self.idle.borrow()
    }

    /// The model's status.
    pub async fn status(&self) -> Result<ModelStatus, StoreError> {
        self.shared.store.status().await
    }

    /// Every hook run so far, in order of completion (empty unless `record_history`).
    pub fn history(&self) -> Vec<HookRecord> {
        match &self.shared.history {
            Some(h) => h.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => Vec::new(),
        }
    }

    /// Stops a unit's agent and its lease renewal abruptly, as if its host crashed: its
    /// lease lapses after its duration and another unit takes over.
    pub fn crash_unit(&self, unit: &str) {
        if let Some(task) = self
            .trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(unit)
        {
            task.abort();
        }
        self.shared
            .mailboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(unit);
    }

    /// Starts a crashed unit's agent again, with nothing queued.
    pub fn restart_unit(&self, unit: &str) {
        let executor = self
            .executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(app_of(unit))
            .cloned();
        if let Some(executor) = executor {
            self.start_agent(unit, executor, Vec::new(), true, None);
        }
    }

    /// Queues a hook on a unit.
    pub fn enqueue(&self, unit: &str, hook: Hook) {
        self.shared.enqueue(unit, hook);
    }

    /// A watch on a unit's leadership, as its agent sees it.
    pub fn leadership(&self, unit: &str) -> Option<watch::Receiver<Leadership>> {
        self.leadership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(unit)
            .cloned()
    }

    /// Stops every agent.
    pub fn shutdown(&self) {
        for (_, task) in
            std::mem::take(&mut *self.trackers.lock().unwrap_or_else(|e| e.into_inner()))
        {
            task.abort();
        }
        self.shared
            .mailboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown();
    }
}
