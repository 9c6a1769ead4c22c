//! Deterministic simulation of leadership under faults, in virtual time.
//!
//! The `pinned` policy runs the real host path: the controller, each unit's agent and its
//! background lease renewal, the hook context and import implementations, the fenced
//! commit, over the memory store wrapped in seeded faults. Only the charm itself is a
//! native stand-in for the discourse charm's `db-relation-changed` (see `standin`), because
//! wasm execution cannot run in virtual time; its running time is simulated and bounded by
//! the leadership guarantee exactly as the epoch deadline bounds a wasm hook.
//!
//! The `juju29` policy replays Juju 2.9's tracker semantics over the same store and faults
//! (see `juju29`), as the baseline.
//!
//! Time is tokio's paused clock on a single thread, and every random draw comes from
//! generators seeded by `--seed`: the same seed gives the same report, byte for byte.

mod juju29;
mod metrics;
mod standin;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{Instant, sleep};

pub use metrics::Measurements;

use crate::agent::{HookRecord, HookResultKind, RetryPolicy};
use crate::controller::{Controller, ControllerConfig, HookObserver};
use crate::leadership::{Leadership, LeadershipConfig};
use crate::model::{Hook, RelationHook};
use crate::store::faults::{FaultPlan, FaultyStore, Outage, WriteEvent, WriteHistory};
use crate::store::{BoxFuture, MemoryStore, Store};
use metrics::Metrics;
use standin::{DiscourseStandIn, WorkModel};

/// Whose leadership semantics to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// This host: background renewal, pinned answers, guarantee-bounded hooks, fences.
    Pinned,
    /// Juju 2.9's tracker, the baseline.
    Juju29,
}

impl Policy {
    /// The policy's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Pinned => "pinned",
            Policy::Juju29 => "juju29",
        }
    }
}

/// A named fault profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// No faults.
    None,
    /// Short outages (shorter than the guarantee) in which every call times out, as
    /// during a raft leader election: the seed's "lease operation timed out".
    RaftFlux,
    /// Random timeouts (some of them applied with the answer lost) and refused calls.
    Timeouts,
    /// Outages longer than the guarantee: leadership may legitimately move.
    Partition,
    /// The leader's agent crashes now and then, and comes back later.
    LeaderCrash,
    /// Each claimant's clock drifts against the store's by up to 5%.
    ClockDrift,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 6] = [
        Profile::None,
        Profile::RaftFlux,
        Profile::Timeouts,
        Profile::Partition,
        Profile::LeaderCrash,
        Profile::ClockDrift,
    ];

    /// The profile's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Profile::None => "none",
            Profile::RaftFlux => "raft-flux",
            Profile::Timeouts => "timeouts",
            Profile::Partition => "partition",
            Profile::LeaderCrash => "leader-crash",
            Profile::ClockDrift => "clock-drift",
        }
    }

    /// The profile with this name.
    pub fn parse(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// One simulation run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seeds everything.
    pub seed: u64,
    /// Units of the application.
    pub units: u32,
    /// Hooks to fire, across all units.
    pub hooks: u64,
    /// The faults.
    pub profile: Profile,
    /// The leadership semantics.
    pub policy: Policy,
    /// Lease timings.
    pub leadership: LeadershipConfig,
    /// Outages to add to the profile's (tests use this for exact schedules).
    pub extra_outages: Vec<Outage>,
    /// Every claimant's clock drift against the store, replacing the profile's (tests use
    /// it to drive drift past the margin).
    pub drift_override: Option<f64>,
}

impl SimConfig {
    /// A run with the default lease timings.
    pub fn new(seed: u64, units: u32, hooks: u64, profile: Profile, policy: Policy) -> Self {
        SimConfig {
            seed,
            units,
            hooks,
            profile,
            policy,
            leadership: LeadershipConfig::default(),
            extra_outages: vec![],
            drift_override: None,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// The policy.
    pub policy: Policy,
    /// The fault profile.
    pub profile: Profile,
    /// The seed.
    pub seed: u64,
    /// Units.
    pub units: u32,
    /// Hooks fired.
    pub hooks_fired: u64,
    /// The lease duration, in seconds.
    pub lease_seconds: f64,
    /// The guarantee (lease minus drift margin), in seconds.
    pub guarantee_seconds: f64,
    /// The outages the profile scheduled.
    pub outages: usize,
    /// The longest outage, in seconds.
    pub longest_outage_seconds: f64,
    /// The measurements.
    #[serde(flatten)]
    pub measured: Measurements,
    /// Median failover time after a leader crash, in seconds.
    pub failover_median_seconds: Option<f64>,
    /// Longest failover time after a leader crash, in seconds.
    pub failover_max_seconds: Option<f64>,
}

/// Mean seconds between hooks on one unit.
const THINK_MEAN: f64 = 2.0;
/// Hooks run up to 0.5 s; one in 50 up to 10 s.
const WORK: WorkModel = WorkModel::Random {
    short: Duration::from_millis(500),
    long: Duration::from_secs(10),
    long_every: 50,
};

fn plan_for(config: &SimConfig, horizon: Duration, rng: &mut StdRng) -> FaultPlan {
    let mut plan = FaultPlan::none(rng.random());
    plan.hang = config.leadership.lease_duration * 2;
    let guarantee = config.leadership.guarantee();
    let secs = |d: Duration| d.as_secs_f64();
    let mut windows = |gap: (f64, f64), length: (f64, f64)| {
        let mut out = Vec::new();
        let mut at = rng.random_range(gap.0..gap.1);
        while at < secs(horizon) {
            let len = rng.random_range(length.0..length.1);
            out.push(Outage {
                start: Duration::from_secs_f64(at),
                end: Duration::from_secs_f64(at + len),
            });
            at += len + rng.random_range(gap.0..gap.1);
        }
        out
    };
    match config.profile {
        Profile::None => {}
        Profile::RaftFlux => {
            // Every outage shorter than the guarantee.
            let longest = (secs(guarantee) - 0.1).max(0.5);
            plan.outages = windows((20.0, 80.0), (0.5, longest));
        }
        Profile::Partition => {
            let lease = secs(config.leadership.lease_duration);
            plan.outages = windows((60.0, 180.0), (secs(guarantee) + 1.0, lease * 2.0));
        }
        Profile::Timeouts => {
            plan.timeout_rate = 0.05;
            plan.lost_answer_rate = 0.5;
            plan.error_rate = 0.05;
        }
        Profile::LeaderCrash => {}
        Profile::ClockDrift => {
            for i in 0..config.units {
                plan.drift
                    .insert(format!("discourse/{i}"), rng.random_range(-0.05..0.05));
            }
        }
    }
    if config.profile != Profile::None {
        plan.latency_min = Duration::from_millis(1);
        plan.latency_jitter = Duration::from_millis(if config.profile == Profile::Timeouts {
            50
        } else {
            10
        });
    }
    plan.outages.extend(config.extra_outages.iter().copied());
    if let Some(drift) = config.drift_override {
        for i in 0..config.units {
            plan.drift.insert(format!("discourse/{i}"), drift);
        }
    }
    plan.outages.sort_by_key(|o| o.start);
    plan
}

/// Runs one simulation on its own single-threaded runtime with a paused clock.
pub fn run(config: &SimConfig) -> Report {
    run_recording(config, None)
}

/// Runs one simulation as [`run`] does, and returns with its report every leader-only
/// commit's call and answer (leader data, pod spec, with the fence's term), in the order
/// they happened, for a linearizability check.
pub fn run_recording_writes(config: &SimConfig) -> (Report, Vec<WriteEvent>) {
    let history = Arc::new(WriteHistory::default());
    let report = run_recording(config, Some(history.clone()));
    (report, history.events())
}

fn run_recording(config: &SimConfig, writes: Option<Arc<WriteHistory>>) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    runtime.block_on(simulate(config, writes))
}

async fn simulate(config: &SimConfig, writes: Option<Arc<WriteHistory>>) -> Report {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let per_unit = config.hooks.div_ceil(u64::from(config.units.max(1)));
    let horizon = Duration::from_secs_f64(per_unit as f64 * (THINK_MEAN + 0.5) + 120.0);
    let plan = plan_for(config, horizon, &mut rng);
    let units: Vec<String> = (0..config.units)
        .map(|i| format!("discourse/{i}"))
        .collect();
    let start = Instant::now();
    let metrics = Arc::new(Metrics::new(
        start,
        units.clone(),
        &config.leadership,
        plan.clone(),
    ));
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new("sim"));
    let observer: Arc<dyn crate::store::faults::StoreObserver> = metrics.clone();
    let mut faulty = FaultyStore::new(memory, plan.clone(), Some(observer));
    if let Some(writes) = writes {
        faulty = faulty.with_write_history(writes);
    }
    let store: Arc<dyn Store> = Arc::new(faulty);
    let crash_seed: u64 = rng.random();
    let measured = match config.policy {
        Policy::Pinned => {
            simulate_pinned(
                config, &store, &metrics, &units, per_unit, &mut rng, crash_seed,
            )
            .await
        }
        Policy::Juju29 => {
            simulate_juju29(
                config, &store, &metrics, &units, per_unit, &mut rng, crash_seed,
            )
            .await
        }
    };
    let median = (!measured.failover_seconds.is_empty())
        .then(|| measured.failover_seconds[measured.failover_seconds.len() / 2]);
    let max = measured.failover_seconds.last().copied();
    Report {
        policy: config.policy,
        profile: config.profile,
        seed: config.seed,
        units: config.units,
        hooks_fired: per_unit * u64::from(config.units),
        lease_seconds: config.leadership.lease_duration.as_secs_f64(),
        guarantee_seconds: config.leadership.guarantee().as_secs_f64(),
        outages: plan.outages.len(),
        longest_outage_seconds: plan
            .outages
            .iter()
            .map(|o| o.length().as_secs_f64())
            .fold(0.0, f64::max),
        measured,
        failover_median_seconds: median,
        failover_max_seconds: max,
    }
}

fn think(rng: &mut StdRng) -> Duration {
    Duration::from_secs_f64(rng.random_range(0.0..2.0 * THINK_MEAN))
}

/// The leader-crash profile: every 30 to 90 s the unit that believes it leads crashes, and
/// comes back after twice the lease duration. `crash` and `restart` do it to the policy's
/// unit; the metrics hear of both.
fn spawn_crashes(
    config: &SimConfig,
    seed: u64,
    metrics: Arc<Metrics>,
    crash: impl Fn(String) -> BoxFuture<'static, ()> + Send + 'static,
    restart: impl Fn(String) -> BoxFuture<'static, ()> + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    if config.profile != Profile::LeaderCrash {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let down = config.leadership.lease_duration * 2;
    Some(tokio::spawn(async move {
        loop {
            sleep(Duration::from_secs_f64(rng.random_range(30.0..90.0))).await;
            let Some(leader) = metrics.believed_leader() else {
                continue;
            };
            crash(leader.clone()).await;
            metrics.crashed(&leader);
            sleep(down).await;
            restart(leader.clone()).await;
            metrics.restarted(&leader);
        }
    }))
}

async fn watch_beliefs(
    mut rx: tokio::sync::watch::Receiver<Leadership>,
    metrics: Arc<Metrics>,
    unit: String,
) {
    loop {
        let current = rx.borrow_and_update().clone();
        match current {
            Leadership::Leader {
                guarantee_until, ..
            } => metrics.believe(&unit, guarantee_until),
            _ => metrics.disbelieve(&unit),
        }
        if rx.changed().await.is_err() {
            metrics.disbelieve(&unit);
            return;
        }
    }
}

async fn simulate_pinned(
    config: &SimConfig,
    store: &Arc<dyn Store>,
    metrics: &Arc<Metrics>,
    units: &[String],
    per_unit: u64,
    rng: &mut StdRng,
    crash_seed: u64,
) -> Measurements {
    let m = metrics.clone();
    let observer = HookObserver(Arc::new(move |r: &HookRecord| {
        let refused = r.refused_not_leader || r.result == HookResultKind::Fenced;
        let failed = !matches!(
            r.result,
            HookResultKind::Committed | HookResultKind::Skipped
        );
        if r.result != HookResultKind::Skipped {
            m.hook(
                r.leader,
                r.leader && refused,
                r.result == HookResultKind::Interrupted,
                failed,
            );
        }
    }));
    let margin = crate::charm::RuntimeConfig::default().guarantee_margin;
    let controller_config = ControllerConfig {
        leadership: config.leadership.clone(),
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            max_attempts: None,
        },
        record_history: false,
        seed: Some(rng.random()),
        observer: Some(observer),
        ..Default::default()
    };
    let controller = Arc::new(
        Controller::new(store.clone(), margin, controller_config).expect("valid leadership config"),
    );
    let standin = Arc::new(DiscourseStandIn::new(rng.random(), WORK, margin));
    controller
        .deploy_with(
            "discourse",
            standin,
            standin::discourse_metadata(),
            "discourse (native stand-in)",
            BTreeMap::new(),
            config.units,
        )
        .await
        .expect("the simulated deployment");
    for unit in units {
        let rx = controller.leadership(unit).expect("a deployed unit");
        tokio::spawn(watch_beliefs(rx, metrics.clone(), unit.clone()));
    }
    let mut drivers = Vec::new();
    for unit in units {
        let mut unit_rng = StdRng::seed_from_u64(rng.random());
        let controller = controller.clone();
        let unit = unit.clone();
        drivers.push(tokio::spawn(async move {
            for _ in 0..per_unit {
                sleep(think(&mut unit_rng)).await;
                let hook = RelationHook {
                    id: 1,
                    endpoint: "db".into(),
                    remote_app: "postgresql".into(),
                    remote_unit: Some("postgresql/0".into()),
                };
                // A unit that is down finds the hook in the store when it comes back.
                let _ = controller.enqueue(&unit, Hook::RelationChanged(hook)).await;
            }
        }));
    }
    let crasher = {
        let (c, m) = (controller.clone(), metrics.clone());
        let restarter = controller.clone();
        spawn_crashes(
            config,
            crash_seed,
            metrics.clone(),
            move |leader| {
                c.crash_unit(&leader);
                Box::pin(async {})
            },
            move |leader| {
                let (c, m) = (restarter.clone(), m.clone());
                Box::pin(async move {
                    c.restart_unit(&leader)
                        .await
                        .expect("the memory store is up");
                    let rx = c.leadership(&leader).expect("a restarted unit");
                    tokio::spawn(watch_beliefs(rx, m, leader));
                })
            },
        )
    };
    for d in drivers {
        let _ = d.await;
    }
    if let Some(c) = crasher {
        c.abort();
    }
    controller.wait_idle().await;
    let measured = metrics.finish();
    controller.shutdown();
    measured
}

async fn simulate_juju29(
    config: &SimConfig,
    store: &Arc<dyn Store>,
    metrics: &Arc<Metrics>,
    units: &[String],
    per_unit: u64,
    rng: &mut StdRng,
    crash_seed: u64,
) -> Measurements {
    let metadata = standin::discourse_metadata();
    store
        .add_application(crate::model::ApplicationRecord {
            name: "discourse".into(),
            charm: "discourse (juju 2.9 model)".into(),
            metadata,
            config: BTreeMap::new(),
            module: None,
        })
        .await
        .expect("a fresh store");
    let mut trackers = Vec::new();
    let mut loops = Vec::new();
    for unit in units {
        store.add_unit("discourse").await.expect("a fresh store");
        let tracker = Arc::new(juju29::JujuTracker::new(
            store.clone(),
            "discourse",
            unit,
            config.leadership.clone(),
            metrics.clone(),
        ));
        loops.push(tokio::spawn(tracker.clone().run()));
        trackers.push(tracker);
    }
    let mut drivers = Vec::new();
    for tracker in &trackers {
        let mut unit_rng = StdRng::seed_from_u64(rng.random());
        let tracker = tracker.clone();
        drivers.push(tokio::spawn(async move {
            for _ in 0..per_unit {
                sleep(think(&mut unit_rng)).await;
                let _ = tracker.hook(WORK.draw(&mut unit_rng)).await;
            }
        }));
    }
    let crasher = {
        let (trackers, units) = (trackers.clone(), units.to_vec());
        let down = config.leadership.lease_duration * 2;
        spawn_crashes(
            config,
            crash_seed,
            metrics.clone(),
            move |leader| {
                let i = units
                    .iter()
                    .position(|u| *u == leader)
                    .expect("a simulated unit");
                let tracker = trackers[i].clone();
                Box::pin(async move { tracker.crash(down).await })
            },
            |_| Box::pin(async {}),
        )
    };
    for d in drivers {
        let _ = d.await;
    }
    if let Some(c) = crasher {
        c.abort();
    }
    for l in loops {
        l.abort();
    }
    metrics.finish()
}

/// Whether `report` meets the invariants this host promises (for the tests and the CLI's
/// exit status): no inconsistent hook, no split brain, no spurious leadership change.
pub fn invariant_violations(report: &Report) -> Vec<String> {
    let m = &report.measured;
    let mut v = Vec::new();
    if m.inconsistent_hooks > 0 {
        v.push(format!(
            "I2: {} hooks saw is_leader true and were then refused",
            m.inconsistent_hooks
        ));
    }
    if m.overlapping_guarantees > 0 {
        v.push(format!(
            "I3: {} overlapping leadership guarantees",
            m.overlapping_guarantees
        ));
    }
    if m.stale_commits_accepted > 0 {
        v.push(format!(
            "I3: {} commits accepted with a stale term",
            m.stale_commits_accepted
        ));
    }
    if m.pod_spec_revision != m.pod_spec_commits {
        v.push(format!(
            "I4: {} pod spec commits accepted but the spec is at revision {}",
            m.pod_spec_commits, m.pod_spec_revision
        ));
    }
    if m.spurious_leadership_changes > 0 {
        v.push(format!(
            "I5: {} leadership changes with no outage as long as the guarantee",
            m.spurious_leadership_changes
        ));
    }
    v
}

/// How the seed's hook ended under a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedReplay {
    /// Whether the hook's first `is_leader` answered true.
    pub saw_leader: bool,
    /// How the hook ended: `Ok` with the pod spec revision it committed, or the error.
    pub outcome: Result<u64, String>,
}

/// Replays the seed's report: the sole discourse unit leads; `db-relation-changed` starts 7 s
/// after its last claim, asks `is_leader`, works for a second and sets the pod spec; from
/// 7.2 s the lease store answers nothing for 5 s ("lease operation timed out" during raft
/// flux), while the state store stays up, as Juju 2.9's mongo did.
pub fn replay_seed(policy: Policy) -> SeedReplay {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    runtime.block_on(async move {
        let unit = "discourse/0";
        let t0 = Instant::now();
        let mut plan = FaultPlan::none(0);
        plan.commit_faults = false;
        plan.hang = Duration::from_secs(30);
        plan.outages.push(Outage {
            start: Duration::from_millis(7200),
            end: Duration::from_millis(12200),
        });
        let leadership = LeadershipConfig::default();
        let metrics = Arc::new(Metrics::new(
            Instant::now(),
            vec![unit.to_string()],
            &leadership,
            plan.clone(),
        ));
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new("seed"));
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(memory, plan, None));
        let hook_at = Duration::from_secs(7);
        let work = Duration::from_secs(1);
        match policy {
            Policy::Juju29 => {
                store
                    .add_application(crate::model::ApplicationRecord {
                        name: "discourse".into(),
                        charm: "discourse".into(),
                        metadata: standin::discourse_metadata(),
                        config: BTreeMap::new(),
                        module: None,
                    })
                    .await
                    .expect("a fresh store");
                store.add_unit("discourse").await.expect("a fresh store");
                let tracker = Arc::new(juju29::JujuTracker::new(
                    store.clone(),
                    "discourse",
                    unit,
                    leadership,
                    metrics,
                ));
                let renewals = tokio::spawn(tracker.clone().run());
                tokio::time::sleep_until(t0 + hook_at).await;
                let (saw_leader, result) = tracker.hook(work).await;
                renewals.abort();
                let revision = store
                    .pod_spec("discourse")
                    .await
                    .ok()
                    .flatten()
                    .map(|p| p.revision);
                SeedReplay {
                    saw_leader,
                    outcome: result.map(|()| revision.unwrap_or(0)),
                }
            }
            Policy::Pinned => {
                let records = Arc::new(std::sync::Mutex::new(Vec::new()));
                let sink = records.clone();
                let config = ControllerConfig {
                    leadership,
                    observer: Some(HookObserver(Arc::new(move |r: &HookRecord| {
                        sink.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(r.clone())
                    }))),
                    seed: Some(0),
                    ..Default::default()
                };
                let margin = crate::charm::RuntimeConfig::default().guarantee_margin;
                let controller =
                    Controller::new(store.clone(), margin, config).expect("valid config");
                let standin = Arc::new(DiscourseStandIn::new(0, WorkModel::Fixed(work), margin));
                controller
                    .deploy_with(
                        "discourse",
                        standin,
                        standin::discourse_metadata(),
                        "discourse",
                        BTreeMap::new(),
                        1,
                    )
                    .await
                    .expect("a fresh store");
                controller.wait_idle().await;
                tokio::time::sleep_until(t0 + hook_at).await;
                let hook = RelationHook {
                    id: 1,
                    endpoint: "db".into(),
                    remote_app: "postgresql".into(),
                    remote_unit: Some("postgresql/0".into()),
                };
                controller
                    .enqueue(unit, Hook::RelationChanged(hook))
                    .await
                    .expect("a deployed unit");
                controller.wait_idle().await;
                let records = records.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let run = records
                    .iter()
                    .rev()
                    .find(|r| r.hook == "db-relation-changed")
                    .expect("the hook ran");
                let first = records
                    .iter()
                    .find(|r| r.hook == "db-relation-changed")
                    .expect("the hook ran");
                let outcome = match (run.result, run.pod_spec_revision) {
                    (HookResultKind::Committed, Some(revision)) => Ok(revision),
                    _ => Err(run.outcome.clone()),
                };
                controller.shutdown();
                SeedReplay {
                    saw_leader: first.leader,
                    outcome,
                }
            }
        }
    })
}
