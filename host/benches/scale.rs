//! How the host scales with the number of units: settle time, hooks per second and peak
//! resident memory of one relation of N discourse units with one PostgreSQL unit, on each
//! store; and the latency of one hop of relation-changed between two hosts on one store.
//!
//! Settling: one host (one controller, every unit's agent, the charms in wasm) deploys
//! PostgreSQL (1 unit) and discourse (N units), relates them, and waits until no hook is
//! queued or running. The figures are from the deploy to idle: the hooks run, the seconds,
//! hooks per second, the process's peak resident set (reset before each case through
//! `/proc/self/clear_refs`), and the p50 of the relation-changed hooks of `postgresql/0`,
//! the unit every discourse unit's commit fires a hook on: the cost of one of its hooks
//! (snapshot, hook, commit, as the agent records it) as the model grows. A small model runs
//! a dozen such hooks, so its case settles again, in a new model each time, until the p50
//! has 500 samples (on etcd, five settles at most); the other columns are the first
//! settle's.
//!
//! Hops: two units of a native charm (`ping`, no wasm) in a peer relation take turns
//! writing a counter one above the other's into their unit bags, so each write fires
//! relation-changed on the other unit. A hop is from the end of the hook that wrote a
//! value to the start of the other unit's hook that read it: the commit, the wake-up of
//! the other unit's agent, its snapshot. Measured with both units on one host, and with
//! one host (controller, store handle) per unit on one store.
//!
//! With `--features etcd`, the same on an etcd started by the bench (`/usr/bin/etcd`, or
//! `ETCD_BIN`) on loopback with a temporary data directory and etcd's default limits
//! (`--max-txn-ops` 128, 1.5 MiB a request).
//!
//! `cargo bench -p charm-host --bench scale [--features etcd]`; `SCALE_UNITS=10,100` picks
//! the sizes (10, 100 and 1,000 by default; `SCALE_UNITS=10000` is long on SQLite),
//! `SCALE_STORES=sqlite,etcd` the stores (memory, sqlite, and with the feature etcd),
//! `SCALE_HOPS=N` the hops per case (100), `SCALE_TIMEOUT=S` how long a case may
//! take to settle (600 s; 120 s on etcd), `SCALE_HOOKS_AT_ONCE=N` how many hooks the host
//! admits at once (eight per core by default).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use charm_host::agent::{HookExecutor, HookResultKind};
use charm_host::charm::{Charm, GuaranteeWatch, HookOutcome, HookRun};
use charm_host::controller::{Controller, ControllerConfig, HookObserver};
use charm_host::model::{
    Changes, CharmMetadata, ConfigValue, EndpointMeta, Hook, RelationRole, UnitSnapshot,
};
use charm_host::store::{BoxFuture, Fence, MemoryStore, SqliteStore, Store};

/// The process's peak resident set since the last reset, in MiB.
fn peak_rss() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Resets the peak resident set to the current one (Linux: `5` to `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A list from an environment variable, or the default.
fn list<T: std::str::FromStr + Clone>(var: &str, default: &[T]) -> Vec<T> {
    match std::env::var(var) {
        Ok(v) => v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{var}: `{s}` is not valid"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// An etcd server of the bench's own, stopped when dropped.
#[cfg(feature = "etcd")]
struct EtcdProcess {
    child: std::process::Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

#[cfg(feature = "etcd")]
impl EtcdProcess {
    /// Starts etcd on free loopback ports, with its default limits.
    fn start() -> EtcdProcess {
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        };
        let (client, peer) = (port(), port());
        let dir = tempfile::tempdir().unwrap();
        let binary = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let mut command = std::process::Command::new(&binary);
        command
            .arg("--name=bench")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=bench=http://127.0.0.1:{peer}"));
        let child = command
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}; set ETCD_BIN"));
        EtcdProcess {
            child,
            endpoint: format!("127.0.0.1:{client}"),
            _dir: dir,
        }
    }

    /// A store on it, waiting (up to 20 s) for etcd to answer.
    async fn store(&self, model: &str) -> Arc<dyn Store> {
        use charm_host::store::{EtcdConfig, EtcdStore};
        let config = EtcdConfig {
            endpoints: vec![self.endpoint.clone()],
            prefix: format!("bench/{model}"),
            request_timeout: Duration::from_secs(2),
            tls: None,
            auth: None,
            compaction: None,
        };
        let began = Instant::now();
        loop {
            match EtcdStore::connect(config.clone(), model).await {
                Ok(store) => return Arc::new(store),
                Err(e) if began.elapsed() > Duration::from_secs(20) => {
                    panic!("etcd at {} does not answer: {e}", self.endpoint)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

#[cfg(feature = "etcd")]
impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stores a case runs on, and what keeps them: a temporary directory, an etcd.
struct Place {
    kind: String,
    dir: tempfile::TempDir,
    #[cfg(feature = "etcd")]
    etcd: Option<EtcdProcess>,
}

impl Place {
    fn new(kind: &str) -> Place {
        let known: &[&str] = if cfg!(feature = "etcd") {
            &["memory", "sqlite", "etcd"]
        } else {
            &["memory", "sqlite"]
        };
        assert!(
            known.contains(&kind),
            "SCALE_STORES: {kind:?} is not one of {known:?}"
        );
        Place {
            kind: kind.to_string(),
            dir: tempfile::tempdir().unwrap(),
            #[cfg(feature = "etcd")]
            etcd: match kind {
                "etcd" => Some(EtcdProcess::start()),
                _ => None,
            },
        }
    }

    /// A handle on the place's store, as one host opens it.
    async fn open(&self) -> Arc<dyn Store> {
        match self.kind.as_str() {
            "memory" => Arc::new(MemoryStore::new("bench")),
            "sqlite" => Arc::new(
                SqliteStore::open(&self.dir.path().join("model.db"), "bench")
                    .expect("the SQLite store opens"),
            ),
            #[cfg(feature = "etcd")]
            _ => self.etcd.as_ref().expect("an etcd").store("bench").await,
            #[cfg(not(feature = "etcd"))]
            other => unreachable!("{other}"),
        }
    }
}

/// How many postgresql/0 relation-changed hooks a case's p50 is taken from, at least:
/// small cases settle again (up to [`MAX_SETTLES`] times) to reach it.
const CHANGED_SAMPLES: usize = 500;
/// How many times a case settles at most for its p50's samples (five on etcd).
const MAX_SETTLES: usize = 100;

/// One settle case's figures.
struct Settled {
    hooks: u64,
    seconds: f64,
    idle: bool,
    pending: usize,
    peak_mib: f64,
    /// How long each relation-changed hook of postgresql/0 took.
    changed: Vec<Duration>,
    /// Hooks the charm failed, and the first of them: a unit in error stops its queue, so
    /// idle then is not settled.
    failed: (u64, Option<String>),
}

async fn settle(
    kind: &str,
    units: u32,
    discourse: &Charm,
    postgresql: &Charm,
    limit: Duration,
) -> Result<Settled, String> {
    let place = Place::new(kind);
    let store = place.open().await;
    let hooks = Arc::new(AtomicU64::new(0));
    // How long each relation-changed on postgresql/0 took.
    let durations: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let failed: Arc<Mutex<(u64, Option<String>)>> = Arc::default();
    let (counter, took, failures) = (hooks.clone(), durations.clone(), failed.clone());
    let config = ControllerConfig {
        observer: Some(HookObserver(Arc::new(move |record| {
            counter.fetch_add(1, Ordering::Relaxed);
            if record.result == HookResultKind::CharmFailed {
                let mut failures = failures.lock().unwrap_or_else(|e| e.into_inner());
                failures.0 += 1;
                failures.1.get_or_insert_with(|| {
                    format!("{} {}: {}", record.unit, record.hook, record.outcome)
                });
            }
            if record.unit == "postgresql/0" && record.hook.ends_with("-relation-changed") {
                took.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(record.duration);
            }
        }))),
        // As `charm-host run` sets it.
        ownership: std::env::var("SCALE_OWNERSHIP").is_ok_and(|v| v == "1"),
        hooks_at_once: std::env::var("SCALE_HOOKS_AT_ONCE")
            .ok()
            .map(|v| v.parse().expect("SCALE_HOOKS_AT_ONCE: a number")),
        ..ControllerConfig::default()
    };
    reset_peak_rss();
    let margin = Duration::from_millis(500);
    let controller = Controller::new(store, margin, config).expect("valid config");
    let started = Instant::now();
    controller
        .deploy(
            "postgresql",
            postgresql.clone(),
            "postgresql.wasm",
            BTreeMap::new(),
            1,
        )
        .await
        .map_err(|e| format!("deploying postgresql: {e}"))?;
    let options = BTreeMap::from([(
        "external_hostname".to_string(),
        ConfigValue::String("forum.example.com".into()),
    )]);
    controller
        .deploy(
            "discourse",
            discourse.clone(),
            "discourse.wasm",
            options,
            units,
        )
        .await
        .map_err(|e| format!("deploying discourse: {e}"))?;
    controller
        .relate(("discourse", "db"), ("postgresql", "db"))
        .await
        .map_err(|e| format!("relating: {e}"))?;
    // On etcd a hook another change queued reaches its agent through etcd's watch, a moment
    // after the change: idle counts once it held for a while after (from its start).
    let confirm = kind
        .starts_with("etcd")
        .then_some(Duration::from_millis(500));
    let settled = async {
        loop {
            controller.wait_idle().await;
            let idle_at = started.elapsed();
            match confirm {
                None => return idle_at,
                Some(wait) => {
                    tokio::time::sleep(wait).await;
                    if controller.pending() == 0 {
                        return idle_at;
                    }
                }
            }
        }
    };
    let (idle, seconds) = match tokio::time::timeout(limit, settled).await {
        Ok(at) => (true, at.as_secs_f64()),
        Err(_) => (false, started.elapsed().as_secs_f64()),
    };
    let pending = controller.pending();
    controller.shutdown();
    let changed = durations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Settled {
        hooks: hooks.load(Ordering::Relaxed),
        seconds,
        idle,
        pending,
        peak_mib: peak_rss(),
        changed,
        failed: failed.lock().unwrap_or_else(|e| e.into_inner()).clone(),
    })
}

/// The bag key the ping units write their counter under.
const COUNTER: &str = "n";

/// When each counter value was written, and the hops measured so far.
#[derive(Default)]
struct HopClock {
    written: Mutex<HashMap<u64, Instant>>,
    hops: Mutex<Vec<Duration>>,
}

/// A native charm of two units in a peer relation taking turns: unit 0 writes odd values,
/// unit 1 even ones, each one above the value the other unit wrote, until `rounds`.
struct Ping {
    rounds: u64,
    clock: Arc<HopClock>,
}

impl HookExecutor for Ping {
    fn execute(
        &self,
        snapshot: UnitSnapshot,
        _fence: Option<Fence>,
        _guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
    ) -> BoxFuture<'static, HookRun> {
        let started = Instant::now();
        let (rounds, clock) = (self.rounds, self.clock.clone());
        Box::pin(async move {
            let mut changes = Changes::default();
            if let Hook::RelationChanged(r) = &hook
                && let Some(remote) = &r.remote_unit
                && let Some(view) = snapshot.relations.get(&r.id)
            {
                let value = |unit: &str| -> u64 {
                    view.unit_bags
                        .get(unit)
                        .and_then(|b| b.get(COUNTER))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                let (theirs, mine) = (value(remote), value(&snapshot.unit));
                if theirs > 0
                    && let Some(at) = clock
                        .written
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&theirs)
                {
                    clock
                        .hops
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(started - at);
                }
                let first = snapshot.unit.ends_with("/0");
                let my_turn = (theirs % 2 == 0) == first;
                if my_turn && theirs < rounds && mine <= theirs {
                    let next = theirs + 1;
                    changes.unit_bags.insert(
                        r.id,
                        BTreeMap::from([(COUNTER.to_string(), Some(next.to_string()))]),
                    );
                    clock
                        .written
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(next, Instant::now());
                }
            }
            HookRun {
                outcome: HookOutcome::Succeeded,
                changes,
                logs: Vec::new(),
                output: String::new(),
                leadership_refusals: 0,
                bags_read: Vec::new(),
            }
        })
    }
}

fn ping_metadata() -> CharmMetadata {
    CharmMetadata {
        name: "ping".into(),
        summary: String::new(),
        relations: vec![EndpointMeta {
            name: "ring".into(),
            role: RelationRole::Peers,
            interface: "ping".into(),
            limit: None,
        }],
        config: vec![],
        actions: vec![],
    }
}

/// The p50 and p99 hop between two ping units, on one host or one host per unit.
async fn hops(kind: &str, hosts: usize, rounds: u64) -> Option<(Duration, Duration)> {
    let place = Place::new(kind);
    let clock = Arc::new(HopClock::default());
    let hosted: Vec<Option<Vec<String>>> = match hosts {
        1 => vec![None],
        _ => vec![Some(vec!["ping/0".into()]), Some(vec!["ping/1".into()])],
    };
    let first = place.open().await;
    let mut controllers = Vec::new();
    for hosted_units in hosted {
        // Each host its own handle on the store, as separate processes have.
        let store = if controllers.is_empty() {
            first.clone()
        } else {
            place.open().await
        };
        let config = ControllerConfig {
            // As `charm-host run` sets it when hosts share a file.
            poll_interval: (hosts > 1 && kind == "sqlite").then(|| Duration::from_millis(500)),
            hosted_units,
            ..ControllerConfig::default()
        };
        let controller =
            Controller::new(store, Duration::from_millis(500), config).expect("valid config");
        let ping = Arc::new(Ping {
            rounds,
            clock: clock.clone(),
        });
        controller
            .deploy_with("ping", ping, ping_metadata(), "ping", BTreeMap::new(), 2)
            .await
            .expect("ping deployed");
        controllers.push(controller);
    }
    let done = async {
        loop {
            if clock.hops.lock().unwrap_or_else(|e| e.into_inner()).len() as u64 >= rounds - 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(rounds * 2 + 30), done)
        .await
        .is_ok();
    for c in &controllers {
        c.shutdown();
    }
    let mut hops = clock.hops.lock().unwrap_or_else(|e| e.into_inner()).clone();
    (finished && !hops.is_empty()).then(|| common::percentiles(&mut hops))
}

fn main() {
    common::on_two_workers(bench());
}

async fn bench() {
    let guests = common::guests();
    let runtime = common::runtime(None);
    let discourse = common::load(&runtime, &guests.discourse);
    let postgresql = common::load(&runtime, &guests.postgresql);
    let sizes: Vec<u32> = list("SCALE_UNITS", &[10, 100, 1_000]);
    let default_stores: &[&str] = if cfg!(feature = "etcd") {
        &["memory", "sqlite", "etcd"]
    } else {
        &["memory", "sqlite"]
    };
    let default_stores: Vec<String> = default_stores.iter().map(|s| s.to_string()).collect();
    let stores: Vec<String> = list("SCALE_STORES", &default_stores);
    let hop_count: u64 = list("SCALE_HOPS", &[100])[0].max(1);
    // A hop is from one value to the next: one more value than hops.
    let rounds = hop_count + 1;
    let limit = Duration::from_secs(list("SCALE_TIMEOUT", &[600])[0]);
    println!(
        "discourse (N units) related to postgresql (1 unit), one host; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| store | units | hooks | settle s | hooks/s | peak RSS MiB | postgresql/0 relation-changed p50 ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for kind in &stores {
        let limit = if kind.starts_with("etcd") {
            limit.min(Duration::from_secs(120))
        } else {
            limit
        };
        for &units in &sizes {
            let mut s = match settle(kind, units, &discourse, &postgresql, limit).await {
                Ok(s) => s,
                Err(why) => {
                    println!("| {kind} | {units} | refused: {why} | | | | |");
                    continue;
                }
            };
            // A small model's settle runs a dozen postgresql/0 hooks, the first of the
            // process among them: settled again until the p50 has enough samples.
            // On etcd each settle starts an etcd of its own: fewer.
            let settles = if kind.starts_with("etcd") {
                5
            } else {
                MAX_SETTLES
            };
            for _ in 1..settles {
                if s.changed.len() >= CHANGED_SAMPLES || !s.idle || s.failed.0 > 0 {
                    break;
                }
                match settle(kind, units, &discourse, &postgresql, limit).await {
                    Ok(again) if again.idle && again.failed.0 == 0 => {
                        s.changed.extend(again.changed);
                    }
                    _ => break,
                }
            }
            let changed_p50_ms = (!s.changed.is_empty())
                .then(|| common::percentiles(&mut s.changed).0.as_secs_f64() * 1e3);
            let seconds = if let (n @ 1.., Some(first)) = &s.failed {
                format!("{n} hooks failed, first {first}")
            } else if s.idle {
                format!("{:.2}", s.seconds)
            } else {
                format!("not idle after {:.0} ({} pending)", s.seconds, s.pending)
            };
            println!(
                "| {kind} | {units} | {} | {seconds} | {:.0} | {:.0} | {} |",
                s.hooks,
                s.hooks as f64 / s.seconds,
                s.peak_mib,
                changed_p50_ms.map_or("-".to_string(), |ms| format!("{ms:.2}"))
            );
        }
    }
    println!();
    println!("relation-changed hops between two units, {hop_count} hops");
    println!("| store | hosts | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    for kind in &stores {
        let host_counts: &[usize] = if kind != "memory" { &[1, 2] } else { &[1] };
        for &hosts in host_counts {
            match hops(kind, hosts, rounds).await {
                Some((p50, p99)) => println!(
                    "| {kind} | {hosts} | {:.3} | {:.3} |",
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                ),
                None => println!("| {kind} | {hosts} | did not finish | |"),
            }
        }
    }
}
