//! A deployment: applications, their units' agents, relations, and the routing of the
//! hooks one unit's commit causes on others.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use charm_model::endpoints::{self, Side};

use crate::admission::Admission;
use crate::agent::{RetryPolicy, UnitAgent};
use crate::charm::Charm;
use crate::executor::HookExecutor;
use crate::leadership::{Leadership, LeadershipConfig, LeadershipTracker};
use crate::metrics::HostMetrics;
use crate::model::{
    ApplicationRecord, CharmMetadata, ConfigValue, Hook, RelationEndpoint, RelationRecord,
    RelationRole, agent_holder, agent_host, app_of, holder_agent, holder_unit, ownership_lease,
};
use crate::module_switch::ModuleSwitch;
pub use crate::shared::HookObserver;
use crate::shared::{HookRecord, Pending, Shared, fnv1a};
use crate::store::{Lease, ModelStatus, QueuedHook, Store, StoreError};

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
    /// The units this controller runs agents for, each a unit's name, an application's
    /// name (all its units) or a glob (`discourse/*`, `kv/1?`); `None` for all. Several
    /// hosts sharing a store each run some units of the same applications.
    pub hosted_units: Option<Vec<String>>,
    /// How often idle agents look in the store for hooks queued by other hosts; `None`
    /// when this controller is the store's only host.
    pub poll_interval: Option<Duration>,
    /// Where agents and leadership trackers count their hooks, queues and leases; `None`
    /// keeps no metrics.
    pub metrics: Option<Arc<HostMetrics>>,
    /// This host's name in its agents' lease holders ([`charm_model::agent_holder`]) and so
    /// in `status`; `None`: the machine's host name and this process's id.
    pub host: Option<String>,
    /// Whether each agent claims its unit's ownership lease ([`charm_model::ownership_lease`])
    /// before it runs the unit, renews it while it runs, and commits only while it holds
    /// it: one agent runs a unit at a time, whichever hosts select it. Hosts sharing a
    /// store (`charm-host run`) claim; a controller alone on its store need not.
    pub ownership: bool,
    /// How many of this host's units run a hook at once, in the order they asked
    /// ([`crate::admission`]); `None`: [`crate::admission::PLACES_PER_CORE`] per core.
    pub hooks_at_once: Option<usize>,
}

/// The machine's host name and this process's id: `name:pid`. Two hosts on one machine
/// are two names.
pub fn default_host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{name}:{}", std::process::id())
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters and `?`
/// for one.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match with backtracking to the last `*`.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Whether `selector` (a unit, an application, or a glob of units) selects `unit`.
pub fn selects(selector: &str, unit: &str) -> bool {
    selector == unit || selector == app_of(unit) || glob_matches(selector, unit)
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

/// How long a host stopping cleanly lets its agents' running hooks finish (a hook commits
/// within milliseconds; one that runs longer is stopped as if the host had crashed, and
/// runs again on the next host).
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often a stopping host looks whether its agents have stopped.
const STOP_POLL: Duration = Duration::from_millis(10);

/// How often [`Controller::wait_settled`] looks at the leases again while idle.
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// How much more time left a lease must show than it could have had with no renewal since
/// it was first seen, to count as renewed: etcd reports a lease's time left in whole
/// seconds, rounded down.
const RENEWAL_EVIDENCE: Duration = Duration::from_millis(1100);

/// Leases held by agents this host does not run, as first seen: a holder whose lease later
/// shows more time left than it could have without a renewal is alive. One that never
/// renews (its host gone) is never taken for alive; its lease lapses instead.
#[derive(Debug, Default)]
struct LeaseSightings(BTreeMap<String, Sighting>);

#[derive(Debug)]
struct Sighting {
    holder: String,
    term: u64,
    at: tokio::time::Instant,
    left: Duration,
}

impl Sighting {
    fn of(lease: &Lease, at: tokio::time::Instant) -> Self {
        Sighting {
            holder: lease.holder.clone(),
            term: lease.term,
            at,
            left: lease.duration,
        }
    }
}

impl LeaseSightings {
    /// Whether `app`'s `lease`, seen `now`, was renewed since first seen.
    fn renewed(&mut self, app: &str, lease: &Lease, now: tokio::time::Instant) -> bool {
        let first = self
            .0
            .entry(app.to_string())
            .or_insert_with(|| Sighting::of(lease, now));
        if first.holder != lease.holder || first.term != lease.term {
            *first = Sighting::of(lease, now);
            return false;
        }
        lease.duration + now.saturating_duration_since(first.at) > first.left + RENEWAL_EVIDENCE
    }
}

/// What gives a host the executor of an application first seen in the store: from the
/// application's record and the module the store keeps for it (`None` for one deployed
/// before the store kept modules); `None` leaves its units for later.
pub type LoadCharm =
    dyn Fn(&ApplicationRecord, Option<&[u8]>) -> Option<Arc<dyn HookExecutor>> + Send + Sync;

/// What a unit's agent is started with, so that it can start once it owns its unit.
struct Launch {
    unit: String,
    /// The agent's lease holder ([`charm_model::agent_holder`]).
    holder: String,
    executor: Arc<dyn HookExecutor>,
    shared: Arc<Shared>,
    config: ControllerConfig,
    seed: u64,
    leadership: Arc<Mutex<BTreeMap<String, watch::Receiver<Leadership>>>>,
}

/// Hooks counted as pending until this is dropped.
struct PendingWhile(Arc<Shared>, usize);

impl Drop for PendingWhile {
    fn drop(&mut self) {
        self.0.pending.done(self.1);
    }
}

/// A unit's queue and its last leader-elected term, as the store holds them.
type Loaded = (VecDeque<crate::agent::QueueEntry>, Option<u64>);

impl Launch {
    /// The unit's queue and leader-elected record.
    async fn load(&self) -> Result<Loaded, StoreError> {
        let store = &self.shared.store;
        // Listening before reading: a hook another host queues once the queue is read
        // wakes the agent, which reads it again.
        let _ = store.clone().queue_signal(&self.unit);
        let queue = store
            .queued(&self.unit)
            .await?
            .into_iter()
            .map(Into::into)
            .collect();
        let elected_term = store.snapshot(&self.unit).await?.elected_term;
        Ok((queue, elected_term))
    }

    /// Waits until this agent holds the unit's ownership lease (`owner` claims and renews
    /// it), then runs the unit. Hooks notified meanwhile are left to the store, which
    /// keeps them for whichever agent runs the unit; they and `waiting`, the hooks it held
    /// at the start, count as pending until the queue is loaded.
    async fn when_owned(
        self,
        owner: LeadershipTracker,
        mut inbox: mpsc::UnboundedReceiver<QueuedHook>,
        waiting: usize,
    ) {
        let mut waiting = PendingWhile(self.shared.clone(), waiting);
        let mut owned = owner.subscribe();
        let mut told = None;
        loop {
            match &*owned.borrow_and_update() {
                Leadership::Leader { .. } => break,
                Leadership::Follower {
                    leader: Some(other),
                } if told.as_ref() != Some(other) => {
                    let host = holder_agent(other).map_or(other.as_str(), agent_host);
                    tracing::info!(
                        unit = %self.unit,
                        %host,
                        "run by a live agent on another host: not running it here"
                    );
                    told = Some(other.clone());
                }
                _ => {}
            }
            tokio::select! {
                changed = owned.changed() => if changed.is_err() { return },
                // Left to the store, which keeps it for whichever agent runs the unit, but
                // still pending here: a host run until idle must not stop with it unrun.
                hook = inbox.recv() => match hook {
                    Some(_) => waiting.1 += 1,
                    None => return,
                },
            }
        }
        if told.is_some() {
            tracing::info!(unit = %self.unit, "taking the unit over: its owner's lease lapsed");
        }
        let loaded = loop {
            match self.load().await {
                Ok(loaded) => break loaded,
                Err(StoreError::NotFound(_)) => {
                    self.shared.forget(&self.unit);
                    return;
                }
                Err(e) => {
                    tracing::debug!(unit = %self.unit, "loading its queue: {e}");
                    tokio::time::sleep(self.config.leadership.retry_period).await;
                }
            }
        };
        // Counted as loaded now, before the count as waiting goes: never zero meanwhile.
        self.shared.pending.add(loaded.0.len());
        drop(waiting);
        let tracker = self.tracker();
        self.run(tracker, inbox, loaded, Some(owner)).await;
    }

    /// Starts the unit's leadership tracker, and lists it for
    /// [`Controller::leadership`] at once (before the agent's task first runs).
    fn tracker(&self) -> LeadershipTracker {
        let unit = self.unit.as_str();
        let lease_store: Arc<dyn crate::store::LeaseStore> = self.shared.store.clone();
        let tracker = match &self.config.metrics {
            Some(metrics) => LeadershipTracker::spawn_measured(
                lease_store,
                app_of(unit),
                &self.holder,
                self.config.leadership.clone(),
                self.seed,
                metrics,
            ),
            None => LeadershipTracker::spawn(
                lease_store,
                app_of(unit),
                &self.holder,
                self.config.leadership.clone(),
                self.seed,
            ),
        };
        self.leadership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unit.to_string(), tracker.subscribe());
        tracker
    }

    /// Runs the unit's agent with its leadership tracker; `owner`, if any, keeps renewing
    /// the unit's ownership lease while it runs. The caller counted the loaded queue as
    /// pending.
    async fn run(
        self,
        tracker: LeadershipTracker,
        inbox: mpsc::UnboundedReceiver<QueuedHook>,
        (queue, elected_term): Loaded,
        owner: Option<LeadershipTracker>,
    ) {
        let unit = self.unit.as_str();
        let agent = UnitAgent {
            unit: unit.to_string(),
            holder: self.holder.clone(),
            executor: self.executor,
            store: self.shared.store.clone(),
            shared: self.shared.clone(),
            inbox,
            queue,
            retry: self.config.retry.clone(),
            leadership: self.config.leadership.clone(),
            elected_term,
            poll: self.config.poll_interval,
            metrics: self.config.metrics.as_ref().map(|m| m.unit(app_of(unit))),
            ownership: owner.as_ref().map(LeadershipTracker::subscribe),
        };
        agent.run(tracker).await;
        // Dropped only now: ownership is renewed for as long as the agent runs.
        drop(owner);
    }
}

/// Runs the units of a model: one agent per unit, each with its hook queue and leadership
/// tracker, over one store.
pub struct Controller {
    shared: Arc<Shared>,
    config: ControllerConfig,
    trackers: Mutex<BTreeMap<String, tokio::task::AbortHandle>>,
    /// Set, under `trackers`' lock, once [`Controller::shutdown`] stopped every agent: an
    /// agent started after (the host's model watch, a step behind) is stopped at once.
    stopped: std::sync::atomic::AtomicBool,
    executors: Mutex<BTreeMap<String, Arc<dyn HookExecutor>>>,
    leadership: Arc<Mutex<BTreeMap<String, watch::Receiver<Leadership>>>>,
    /// The lease holder of each unit's running agent ([`charm_model::agent_holder`]).
    holders: Mutex<BTreeMap<String, String>>,
    /// This host's name, the first part of its agents' ids.
    host: String,
    seed: u64,
    idle: watch::Receiver<usize>,
    /// Why leadership was not settled when [`Controller::wait_settled`] last looked.
    unsettled: Mutex<Vec<String>>,
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
            admission: config
                .hooks_at_once
                .map_or_else(Admission::for_this_machine, Admission::new),
        });
        Ok(Controller {
            shared,
            trackers: Mutex::new(BTreeMap::new()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            executors: Mutex::new(BTreeMap::new()),
            leadership: Arc::new(Mutex::new(BTreeMap::new())),
            holders: Mutex::new(BTreeMap::new()),
            host: config.host.clone().unwrap_or_else(default_host_name),
            seed: config.seed.unwrap_or_else(rand::random),
            config,
            idle,
            unsettled: Mutex::new(Vec::new()),
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
        // The store keeps the module, so every host runs these bytes wherever the file is.
        let module = self.shared.store.put_module(charm.module()).await?;
        self.deploy_module(
            app,
            Arc::new(charm),
            metadata,
            charm_ref,
            config,
            units,
            Some(module),
        )
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
        self.deploy_module(app, executor, metadata, charm_ref, config, units, None)
            .await
    }

    /// [`deploy_with`](Self::deploy_with), the application's record naming `module`, kept
    /// in the store already.
    #[allow(clippy::too_many_arguments)]
    async fn deploy_module(
        &self,
        app: &str,
        executor: Arc<dyn HookExecutor>,
        metadata: CharmMetadata,
        charm_ref: &str,
        config: BTreeMap<String, ConfigValue>,
        units: u32,
        module: Option<String>,
    ) -> Result<Vec<String>, ControllerError> {
        let executor = ModuleSwitch::wrap(app, self.shared.store.clone(), executor);
        match self.shared.store.application(app).await {
            Ok(existing) => {
                // The model as it stands wins: a restarted host does not undo what
                // `config` changed since. What differs is said, with the command that
                // applies it.
                let differing: Vec<String> = config
                    .iter()
                    .filter(|(name, value)| {
                        // As `config` would store it: typed by the charm's option.
                        let typed = metadata
                            .option(name)
                            .and_then(|option| (*value).clone().coerce(option.kind));
                        existing.config.get(*name) != typed.as_ref()
                    })
                    .map(|(name, value)| match value {
                        ConfigValue::String(text) => format!("{name}={text}"),
                        other => format!(
                            "{name}={}",
                            serde_json::to_string(other).unwrap_or_default()
                        ),
                    })
                    .collect();
                if !differing.is_empty() {
                    tracing::warn!(
                        app,
                        "the model's config differs from the bundle's, and is kept: `charm-host config {app} {}` applies the bundle's",
                        differing.join(" ")
                    );
                }
                return self.resume(existing, executor, units).await;
            }
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
        let record = ApplicationRecord {
            name: app.to_string(),
            charm: charm_ref.to_string(),
            metadata,
            config: settings,
            module,
        };
        match self.shared.store.add_application(record.clone()).await {
            Ok(()) => {}
            // Another host sharing the store deployed it first.
            Err(StoreError::AlreadyExists(_)) => return self.resume(record, executor, units).await,
            Err(e) => return Err(e.into()),
        }
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(app.to_string(), executor.clone());
        // The peer relations first, as the model core's deploy makes them: each unit then
        // runs their relation-created after install and before start (Juju's order).
        self.ensure_peer_relations(&record).await?;
        // Every unit is in the store before any agent runs, so the first leader's
        // leader-settings-changed reaches all of its followers. Each step counts and adds
        // one (queueing its install, config-changed and start), so another host resuming
        // this deployment at the same moment adds none again.
        while self
            .shared
            .store
            .add_unit_up_to(app, units)
            .await?
            .is_some()
        {}
        let names = self.shared.store.units(app).await?;
        for unit in &names {
            self.start_agent(unit, executor.clone()).await?;
        }
        Ok(names)
    }

    /// Establishes the application's peer relations, as Juju does when it deploys one: a
    /// relation per `peers` endpoint, which queues relation-created on every unit and
    /// relation-joined and -changed between them. Ones the store has already are kept.
    async fn ensure_peer_relations(&self, app: &ApplicationRecord) -> Result<(), ControllerError> {
        let peers = app
            .metadata
            .relations
            .iter()
            .filter(|e| e.role == RelationRole::Peers);
        let mut existing = None;
        for endpoint in peers {
            let side = RelationEndpoint {
                app: app.name.clone(),
                endpoint: endpoint.name.clone(),
            };
            let relations = match &existing {
                Some(relations) => relations,
                None => existing.insert(self.shared.store.relations().await?),
            };
            if relations
                .iter()
                .any(|r| r.endpoints.as_slice() == std::slice::from_ref(&side))
            {
                continue;
            }
            match self
                .shared
                .store
                .add_relation(&endpoint.interface, vec![side])
                .await
            {
                Ok((_, queued)) => self.shared.notify(queued),
                // Another host sharing the store related it first.
                Err(StoreError::AlreadyExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Starts the agents of an application the store already has: nothing is deployed
    /// again and install does not run again. Units a crashed deployment did not get to add
    /// are added now.
    async fn resume(
        &self,
        app: ApplicationRecord,
        executor: Arc<dyn HookExecutor>,
        wanted: u32,
    ) -> Result<Vec<String>, ControllerError> {
        tracing::info!(app = %app.name, "resuming from the store");
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(app.name.clone(), executor.clone());
        while self
            .shared
            .store
            .add_unit_up_to(&app.name, wanted)
            .await?
            .is_some()
        {}
        let units = self.shared.store.units(&app.name).await?;
        for unit in &units {
            self.start_agent(unit, executor.clone()).await?;
        }
        self.ensure_peer_relations(&app).await?;
        Ok(units)
    }

    /// Starts a unit's agent on the queue the store holds for it. With
    /// [`ControllerConfig::ownership`], the agent first claims the unit's ownership lease,
    /// and runs nothing while another host's live agent holds it.
    async fn start_agent(
        &self,
        unit: &str,
        executor: Arc<dyn HookExecutor>,
    ) -> Result<(), StoreError> {
        if !self.hosts(unit) {
            return Ok(());
        }
        let (tx, inbox) = mpsc::unbounded_channel();
        // The mailbox first, so no hook queued from now on is missed; one also loaded
        // below is dropped by the agent as a duplicate. A unit with a mailbox has its agent
        // already (a deployment resumed after the store failed half-way).
        {
            let mut mailboxes = self
                .shared
                .mailboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if mailboxes.contains_key(unit) {
                return Ok(());
            }
            mailboxes.insert(unit.to_string(), tx);
        }
        // A new agent id at every start: a restarted agent, or another host's agent of the
        // same unit, never holds the unit's leases as this one.
        let holder = agent_holder(
            unit,
            &format!("{}.{:08x}", self.host, rand::random::<u32>()),
        );
        self.holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unit.to_string(), holder.clone());
        let launch = Launch {
            unit: unit.to_string(),
            holder,
            executor,
            shared: self.shared.clone(),
            config: self.config.clone(),
            seed: self.seed ^ fnv1a(unit),
            leadership: self.leadership.clone(),
        };
        let task = if self.config.ownership {
            // Its stored queue counts as pending while it waits: a host run until idle
            // does not call itself idle with its units' hooks not run.
            let waiting = match self.shared.store.queued(unit).await {
                Ok(queue) => queue.len(),
                Err(e) => {
                    self.shared.forget(unit);
                    return Err(e);
                }
            };
            self.shared.pending.add(waiting);
            let owner = LeadershipTracker::spawn(
                self.shared.store.clone(),
                &ownership_lease(unit),
                &launch.holder,
                self.config.leadership.clone(),
                launch.seed.rotate_left(1),
            );
            tokio::spawn(launch.when_owned(owner, inbox, waiting))
        } else {
            let loaded = match launch.load().await {
                Ok(loaded) => loaded,
                Err(e) => {
                    // No agent: let a retry start it.
                    self.shared.forget(unit);
                    return Err(e);
                }
            };
            // Counted before this returns, so that a caller waiting for idle waits for them.
            self.shared.pending.add(loaded.0.len());
            let tracker = launch.tracker();
            tokio::spawn(launch.run(tracker, inbox, loaded, None))
        };
        let mut trackers = self.trackers.lock().unwrap_or_else(|e| e.into_inner());
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            // The host is stopping: a hook this agent ran could outlive the unit's leases.
            task.abort();
            return Ok(());
        }
        trackers.insert(unit.to_string(), task.abort_handle());
        Ok(())
    }

    /// Whether this controller runs `unit`'s agent ([`ControllerConfig::hosted_units`]).
    pub fn hosts(&self, unit: &str) -> bool {
        self.config
            .hosted_units
            .as_ref()
            .is_none_or(|hosted| hosted.iter().any(|s| selects(s, unit)))
    }

    /// Brings this host's agents in line with the store, for units other hosts or the
    /// operator added or removed while it runs: starts an agent for each hosted unit that
    /// runs none here (the first time an application is seen, `load` gives what runs its
    /// hooks; `None` leaves its units for later), and stops the agent of each unit the
    /// store no longer has. Returns the units it started.
    pub async fn adopt(&self, load: &LoadCharm) -> Result<Vec<String>, StoreError> {
        let store = &self.shared.store;
        let mut present = Vec::new();
        let mut started = Vec::new();
        let apps = store.applications().await?;
        let names: Vec<String> = apps.iter().map(|a| a.name.clone()).collect();
        for app in apps {
            let units = match store.units(&app.name).await {
                Ok(units) => units,
                // Removed since it was listed.
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            present.extend(units.iter().cloned());
            let hosted: Vec<String> = units.into_iter().filter(|u| self.hosts(u)).collect();
            let running = |u: &String| {
                self.shared
                    .mailboxes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(u)
            };
            let new: Vec<String> = hosted.into_iter().filter(|u| !running(u)).collect();
            if new.is_empty() {
                continue;
            }
            let known = self
                .executors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&app.name)
                .cloned();
            let executor = match known {
                Some(known) => Some(known),
                None => {
                    // The module the store keeps, if the record names one.
                    let bytes = match &app.module {
                        Some(hash) => match store.module(hash).await? {
                            Some(bytes) => Some(bytes),
                            None => {
                                tracing::warn!(app = %app.name, module = %hash, "its module is not in the store");
                                continue;
                            }
                        },
                        None => None,
                    };
                    load(&app, bytes.as_deref())
                        .map(|e| ModuleSwitch::wrap(&app.name, store.clone(), e))
                }
            };
            let Some(executor) = executor else {
                continue;
            };
            self.executors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(app.name.clone(), executor.clone());
            for unit in new {
                match self.start_agent(&unit, executor.clone()).await {
                    Ok(()) => started.push(unit),
                    // Removed since it was listed.
                    Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let gone: Vec<String> = self
            .trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|u| !present.contains(u))
            .cloned()
            .collect();
        for unit in gone {
            tracing::info!(%unit, "no longer in the model: stopping its agent");
            self.crash_unit(&unit);
        }
        self.executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|app, _| names.contains(app));
        Ok(started)
    }

    /// Queues update-status on every unit whose agent runs here, as Juju's uniter does on
    /// its timer. Returns the units it was queued on (a hook already waiting is not queued
    /// twice).
    pub async fn update_status(&self) -> Vec<String> {
        let units = self.running_units();
        let mut fired = Vec::new();
        for unit in units {
            // One unit at a time: one removed meanwhile does not hold up the others.
            match self
                .shared
                .store
                .enqueue(vec![(unit.clone(), Hook::UpdateStatus)])
                .await
            {
                Ok(queued) => {
                    if !queued.is_empty() {
                        fired.push(unit);
                    }
                    self.shared.notify(queued);
                }
                Err(e) => tracing::debug!(%unit, "update-status not queued: {e}"),
            }
        }
        fired
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
        // The model's rule: both named, the same interface, one providing and one requiring.
        let side_a = Side {
            app: a.0,
            endpoint: Some(a.1),
            metadata: &app_a.metadata,
        };
        let side_b = Side {
            app: b.0,
            endpoint: Some(b.1),
            metadata: &app_b.metadata,
        };
        let (ep_a, ep_b, interface) = endpoints::resolve(side_a, side_b).map_err(|e| match e {
            StoreError::Invalid(why) => bad(why),
            other => other.into(),
        })?;
        let endpoints = vec![ep_a, ep_b];
        // Relating again what is already related (a resumed bundle) changes nothing.
        if let Some(existing) = self.relation_between(&endpoints).await? {
            return Ok(existing);
        }
        // The store queues relation-created, -joined and -changed with the relation.
        match self
            .shared
            .store
            .add_relation(&interface, endpoints.clone())
            .await
        {
            Ok((record, queued)) => {
                self.shared.notify(queued);
                Ok(record)
            }
            // Another host sharing the store related them since we looked, or an earlier
            // attempt of ours did and its answer was lost with the connection.
            Err(StoreError::AlreadyExists(what)) => self
                .relation_between(&endpoints)
                .await?
                .ok_or(ControllerError::Store(StoreError::AlreadyExists(what))),
            Err(e) => Err(e.into()),
        }
    }

    /// The relation between exactly these two endpoints, if the store has it.
    async fn relation_between(
        &self,
        endpoints: &[RelationEndpoint],
    ) -> Result<Option<RelationRecord>, ControllerError> {
        Ok(self
            .shared
            .store
            .relations()
            .await?
            .into_iter()
            .find(|r| r.endpoints.len() == 2 && r.endpoints.iter().all(|e| endpoints.contains(e))))
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

    /// Waits until this host is settled: idle ([`Controller::wait_idle`]), and every
    /// application it runs units of led by a live agent that has run leader-elected for its
    /// term (or waits in error for the operator, as a unit's other failed hooks do). A
    /// lease held by an agent that no longer runs (its host killed before it could release
    /// it) lapses, then one of this host's units takes over and runs leader-elected: a host
    /// run until idle waits for that, rather than stop with the application's last hooks
    /// run by followers and no leader to act on them. A leader on another host counts once
    /// its lease is seen renewed.
    pub async fn wait_settled(&self) {
        let mut sightings = LeaseSightings::default();
        loop {
            self.wait_idle().await;
            let unsettled = self.unsettled_leadership(&mut sightings).await;
            let settled = unsettled.is_empty() && self.pending() == 0;
            *self.unsettled.lock().unwrap_or_else(|e| e.into_inner()) = unsettled;
            if settled {
                return;
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Why leadership was not settled when [`Controller::wait_settled`] last looked, an
    /// application a line: empty once settled, or before it looked.
    pub fn unsettled(&self) -> Vec<String> {
        self.unsettled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The units whose agents run here (or wait to own their unit), in order.
    fn running_units(&self) -> Vec<String> {
        self.shared
            .mailboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// The applications this host runs units of whose leadership is not settled (see
    /// [`Controller::wait_settled`]), each with why.
    async fn unsettled_leadership(&self, sightings: &mut LeaseSightings) -> Vec<String> {
        let running: BTreeSet<String> = self.running_units().into_iter().collect();
        let holders = self
            .holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let apps: BTreeSet<&str> = running.iter().map(|u| app_of(u)).collect();
        let store = &self.shared.store;
        let mut unsettled = Vec::new();
        for app in apps {
            let lease = match store.leader(app).await {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    unsettled.push(format!("{app}: no leader yet"));
                    continue;
                }
                Err(e) => {
                    unsettled.push(format!("{app}: {e}"));
                    continue;
                }
            };
            let unit = holder_unit(&lease.holder);
            if running.contains(unit) && holders.get(unit) == Some(&lease.holder) {
                // Led from here: settled once its leader-elected for this term committed.
                match store.unit_details(unit).await {
                    Ok(details) if details.snapshot.elected_term == Some(lease.term) => {}
                    // In error, it waits for the operator, as its queued hooks do: idle.
                    Ok(details) if details.hook_error.is_some() => {}
                    Ok(_) => unsettled.push(format!(
                        "{app}: {unit} leads (term {}), its leader-elected not yet run",
                        lease.term
                    )),
                    Err(e) => unsettled.push(format!("{app}: {unit}: {e}")),
                }
            } else if !sightings.renewed(app, &lease, tokio::time::Instant::now()) {
                unsettled.push(format!(
                    "{app}: led by {} (term {}), a lease not seen renewed, {:.1} s left",
                    lease.holder,
                    lease.term,
                    lease.duration.as_secs_f64()
                ));
            }
        }
        unsettled
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

    /// Starts a crashed unit's agent again, on the queue the store kept for it.
    pub async fn restart_unit(&self, unit: &str) -> Result<(), StoreError> {
        let executor = self
            .executors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(app_of(unit))
            .cloned();
        match executor {
            Some(executor) => self.start_agent(unit, executor).await,
            None => Err(StoreError::NotFound(format!("application of {unit}"))),
        }
    }

    /// Queues a hook on a unit.
    pub async fn enqueue(&self, unit: &str, hook: Hook) -> Result<(), StoreError> {
        let queued = self
            .shared
            .store
            .enqueue(vec![(unit.to_string(), hook)])
            .await?;
        self.shared.notify(queued);
        Ok(())
    }

    /// A watch on a unit's leadership, as its agent sees it. `None` for a unit this
    /// controller runs no agent of, and, with [`ControllerConfig::ownership`], for a unit
    /// whose agent still waits for the unit's ownership lease (held by an agent on
    /// another host): its leadership is tracked only once the unit is owned here.
    pub fn leadership(&self, unit: &str) -> Option<watch::Receiver<Leadership>> {
        self.leadership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(unit)
            .cloned()
    }

    /// Stops every agent and gives up the leases its units hold, so other hosts' units
    /// take over without waiting for them to lapse. A hook running is let finish, its
    /// commit and its log line (for up to [`STOP_GRACE`]); no agent starts another.
    pub async fn release_leases(&self) {
        let running: Vec<String> = self
            .trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        self.finish_hooks_running(STOP_GRACE).await;
        self.shutdown();
        let holders = self
            .holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (unit, holder) in running
            .iter()
            .filter_map(|u| holders.get(u).map(|h| (u, h)))
        {
            if let Err(e) = self.shared.store.release(app_of(unit), holder).await {
                tracing::warn!(%unit, "could not release the lease: {e}");
            }
            // Last, so that no other host runs the unit while this one still leads.
            if self.config.ownership
                && let Err(e) = self
                    .shared
                    .store
                    .release(&ownership_lease(unit), holder)
                    .await
            {
                tracing::warn!(%unit, "could not release its ownership: {e}");
            }
        }
    }

    /// Tells every agent to stop once its hook running (if any) has ended, and waits up to
    /// `grace` for them all to have stopped: an agent learns it when its mailbox closes.
    async fn finish_hooks_running(&self, grace: Duration) {
        let agents: Vec<tokio::task::AbortHandle> = {
            let trackers = self.trackers.lock().unwrap_or_else(|e| e.into_inner());
            self.shared
                .mailboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            trackers.values().cloned().collect()
        };
        if agents.is_empty() {
            return;
        }
        let started = tokio::time::Instant::now();
        while agents.iter().any(|a| !a.is_finished()) && started.elapsed() < grace {
            tokio::time::sleep(STOP_POLL).await;
        }
        tracing::info!(
            agents = agents.len(),
            still_running = agents.iter().filter(|a| !a.is_finished()).count(),
            waited_ms = started.elapsed().as_millis() as u64,
            "agents stopped"
        );
    }

    /// Stops every agent, and any started from now on.
    pub fn shutdown(&self) {
        let running = {
            let mut trackers = self.trackers.lock().unwrap_or_else(|e| e.into_inner());
            self.stopped
                .store(true, std::sync::atomic::Ordering::SeqCst);
            std::mem::take(&mut *trackers)
        };
        for (_, task) in running {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, term: u64, left_ms: u64) -> Lease {
        Lease {
            holder: holder.to_string(),
            term,
            duration: Duration::from_millis(left_ms),
        }
    }

    #[test]
    fn a_lease_counts_as_renewed_only_with_more_time_left_than_it_could_keep_alone() {
        let start = tokio::time::Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut seen = LeaseSightings::default();
        // First seen with 2 s left, etcd's rounding down of 2.99 s.
        assert!(!seen.renewed("db", &lease("db/0#a.1", 4, 2000), at(0)));
        // Running down as a lease nobody renews does, the later reading rounded less.
        assert!(!seen.renewed("db", &lease("db/0#a.1", 4, 2000), at(990)));
        assert!(!seen.renewed("db", &lease("db/0#a.1", 4, 1000), at(1000)));
        assert!(!seen.renewed("db", &lease("db/0#a.1", 4, 0), at(2900)));
        // Extended: more left than the first sighting allows.
        assert!(seen.renewed("db", &lease("db/0#a.1", 4, 2000), at(1200)));
        // Another holder, or a new term of the same: seen afresh.
        assert!(!seen.renewed("db", &lease("db/1#b.2", 5, 3000), at(2000)));
        assert!(!seen.renewed("db", &lease("db/1#b.2", 5, 3000), at(2500)));
        assert!(seen.renewed("db", &lease("db/1#b.2", 5, 3000), at(3200)));
        assert!(!seen.renewed("db", &lease("db/1#b.2", 6, 3000), at(3300)));
        // Each application on its own.
        assert!(!seen.renewed("web", &lease("web/0#a.1", 1, 3000), at(5000)));
    }
}
