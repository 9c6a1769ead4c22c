//! Juju's lifecycle on real hosts: two `charm-host run` processes share a store (SQLite;
//! etcd with the `etcd` feature) and run PostgreSQL, Discourse and probe charms, while a
//! driver issues random operator commands through the CLI (deploy, add-unit, remove-unit,
//! relate, remove-relation, config, upgrade-charm, remove-application --force) and stops and
//! restarts hosts, so units move between hosts and leadership changes hands. Once the model
//! settles, every unit's history is read back from the hosts' JSON logs (each committed hook,
//! and what a probe's hook saw of its relations) and checked with
//! [`charm_model::lifecycle::check_history`]; the settled store with `check_model` and
//! `check_settled`; and `export-bundle` must pass `check` and, run into an empty store, give
//! the same bundle back.
//!
//! `LIFECYCLE_HOST_WALKS` sets how many walks per store (2 by default, 1 on etcd),
//! `LIFECYCLE_HOST_STEPS` how many commands each (30), `LIFECYCLE_HOST_SEED` the first seed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use charm_host::model::{Hook, RelationHook};
use charm_host::store::{Records, SqliteStore, Step, Store, Verdict};
use charm_model::lifecycle::{Inventory, Ran, Seen, check_history, check_model, check_settled};
use charm_model::tx::ModelTx;
use charm_tests::guests;

/// Two hosts, so that stopping one moves its units and leases to the other.
const HOSTS: usize = 2;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small, seeded generator: a failing walk is replayed from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// One walk: the store, its hosts, and what the driver did.
struct Walk {
    bin: PathBuf,
    dir: tempfile::TempDir,
    spec: String,
    store: Arc<dyn Store>,
    rt: tokio::runtime::Runtime,
    hosts: Vec<Option<Child>>,
    logs: Vec<PathBuf>,
    rng: Rng,
    next_probe: u32,
    done: Vec<String>,
}

impl Walk {
    fn new(seed: u64, spec: String, store: Arc<dyn Store>, rt: tokio::runtime::Runtime) -> Walk {
        let dir = tempfile::tempdir().unwrap();
        for (from, to) in [
            (guests::POSTGRESQL, "postgresql.wasm"),
            (guests::DISCOURSE, "discourse.wasm"),
            (guests::PROBE, "probe.wasm"),
        ] {
            std::fs::copy(from, dir.path().join(to)).unwrap();
        }
        std::fs::write(
            dir.path().join("bundle.yaml"),
            "applications:\n  postgresql: {charm: postgresql.wasm, num_units: 2}\n  discourse: {charm: discourse.wasm, num_units: 2}\n  probe-a: {charm: probe.wasm, num_units: 2, options: {mode: history}}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n  - [\"probe-a:db\", \"postgresql:db\"]\n",
        )
        .unwrap();
        Walk {
            bin: charm_tests::charm_host_binary(),
            dir,
            spec,
            store,
            rt,
            hosts: (0..HOSTS).map(|_| None).collect(),
            logs: Vec::new(),
            rng: Rng(seed.max(1)),
            next_probe: 0,
            done: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// Starts host `i`: the first host deploys the bundle, every later one runs the model
    /// the store holds (a bundle given again would deploy again what was removed since).
    fn start(&mut self, i: usize) {
        let log = self
            .dir
            .path()
            .join(format!("host-{}.log", self.logs.len()));
        let bundle = self.path("bundle.yaml");
        let deploy: &[&str] = if self.logs.is_empty() {
            &[&bundle]
        } else {
            &[]
        };
        let child = Command::new(&self.bin)
            .arg("run")
            .args(deploy)
            .args(["--store", &self.spec])
            .args(["--log-format", "json"])
            .args(charm_tests::hosts::SHORT_LEASES)
            .env("RUST_LOG", "charm=info,charm_host::agent=debug")
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        self.logs.push(log);
        self.hosts[i] = Some(child);
        self.done.push(format!("start host {i}"));
    }

    /// Stops host `i` as an operator would (SIGINT), so every line it logged is written.
    fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.hosts[i].take() {
            // SAFETY: a plain signal to a child this walk started and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let start = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if start.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            self.done.push(format!("stop host {i}"));
        }
    }

    /// Runs an operator's command; refused ones are part of a walk too.
    fn operate(&mut self, args: &[&str]) -> (bool, String) {
        let out = Command::new(&self.bin)
            .args(args)
            .args(["--store", &self.spec])
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let ok = out.status.success();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.done.push(format!(
            "{} -> {}",
            args.join(" "),
            if ok { "ok" } else { "refused" }
        ));
        (ok, text)
    }

    /// The whole model, read in one step of the store.
    fn inventory(&self) -> Inventory {
        let reads = [
            Records::Model,
            Records::NextRelation,
            Records::AllLeaderData,
            Records::AppStatuses,
            Records::PodSpecs,
        ];
        let step = Step::read("walk", "a walk's look at", "", &reads);
        let mut read = None;
        let mut look = |tx: &mut dyn ModelTx| {
            read = Some(Inventory::read(tx).expect("the model reads"));
            Verdict::Abort("read only")
        };
        self.rt
            .block_on(self.store.step(step, &mut look))
            .expect("the store answers");
        read.unwrap()
    }

    /// One random command, or a host stopped or started.
    fn step(&mut self) {
        let model = self.inventory();
        let live = |name: &String| !model.apps[name].dying;
        let apps: Vec<String> = model.apps.keys().filter(|a| live(a)).cloned().collect();
        let probes: Vec<String> = apps
            .iter()
            .filter(|a| a.starts_with("probe-"))
            .cloned()
            .collect();
        let requirers: Vec<String> = apps
            .iter()
            .filter(|a| *a != "postgresql")
            .cloned()
            .collect();
        let units: Vec<String> = model
            .units
            .iter()
            .filter(|(_, u)| !u.dying)
            .map(|(n, _)| n.clone())
            .collect();
        match self.rng.below(10) {
            0 | 1 => {
                if let Some(app) = self.rng.pick(&apps).cloned() {
                    self.operate(&["add-unit", &app]);
                }
            }
            2 => {
                if let Some(unit) = self.rng.pick(&units).cloned() {
                    self.operate(&["remove-unit", &unit]);
                }
            }
            3 => {
                if let Some(app) = self.rng.pick(&requirers).cloned() {
                    self.operate(&["relate", &app, "postgresql"]);
                }
            }
            4 => {
                if let Some(app) = self.rng.pick(&requirers).cloned() {
                    self.operate(&["remove-relation", &app, "postgresql"]);
                }
            }
            5 => {
                if let Some(app) = self.rng.pick(&probes).cloned() {
                    let spin = format!("spin_ms={}", self.rng.below(3));
                    self.operate(&["config", &app, &spin]);
                }
            }
            6 => {
                // A new name each time: Juju numbers a redeployed application's units on
                // from its last, and the histories here are kept by unit name.
                self.next_probe += 1;
                let app = format!("probe-n{}", self.next_probe);
                let n = (1 + self.rng.below(2)).to_string();
                let charm = self.path("probe.wasm");
                self.operate(&["deploy", &charm, &app, "-n", &n, "--config", "mode=history"]);
                if self.rng.below(2) == 0 {
                    self.operate(&["relate", &app, "postgresql"]);
                }
            }
            7 => {
                if let Some(app) = self.rng.pick(&probes).cloned() {
                    self.operate(&["remove-application", &app, "--force"]);
                }
            }
            8 => {
                if let Some(app) = self.rng.pick(&probes).cloned() {
                    let charm = self.path("probe.wasm");
                    self.operate(&["upgrade-charm", &app, "--path", &charm]);
                }
            }
            _ => {
                let i = self.rng.below(HOSTS);
                match (&self.hosts[i], self.hosts.iter().flatten().count()) {
                    (Some(_), running) if running > 1 => self.stop(i),
                    (Some(_), _) => {}
                    (None, _) => self.start(i),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(self.rng.below(300) as u64));
    }

    /// Waits until every queue is empty, nothing is dying and every application has its
    /// leader, which has run leader-elected; the settled model.
    fn settle(&self, limit: Duration) -> Inventory {
        let start = Instant::now();
        loop {
            let model = self.inventory();
            let queued = model.units.values().any(|u| !u.queue.is_empty());
            let unsettled = check_settled(&model);
            if !queued && unsettled.is_empty() {
                return model;
            }
            assert!(
                start.elapsed() < limit,
                "the model does not settle within {limit:?}: {unsettled:?}\n{}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn report(&self) -> String {
        let mut out = format!("walk in {}:\n", self.dir.path().display());
        for line in &self.done {
            out.push_str(&format!("  {line}\n"));
        }
        out
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        for child in self.hosts.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            // Kept for a look: the hosts' logs and the store.
            let kept = self.dir.path().to_path_buf();
            std::mem::forget(std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().unwrap(),
            ));
            eprintln!("walk files kept in {}", kept.display());
        }
    }
}

/// A hook from its name in a log, with the relation and remote unit the log names.
fn hook_of(name: &str, relation: Option<u64>, remote_unit: Option<&str>) -> Hook {
    let simple = match name {
        "install" => Some(Hook::Install),
        "start" => Some(Hook::Start),
        "config-changed" => Some(Hook::ConfigChanged),
        "upgrade-charm" => Some(Hook::UpgradeCharm),
        "update-status" => Some(Hook::UpdateStatus),
        "stop" => Some(Hook::Stop),
        "remove" => Some(Hook::Remove),
        "leader-elected" => Some(Hook::LeaderElected),
        "leader-settings-changed" => Some(Hook::LeaderSettingsChanged),
        _ => None,
    };
    if let Some(hook) = simple {
        return hook;
    }
    let (endpoint, kind) = name
        .rsplit_once("-relation-")
        .unwrap_or_else(|| panic!("a hook's name: {name}"));
    let r = RelationHook {
        id: relation.unwrap_or_else(|| panic!("{name} names its relation")) as _,
        endpoint: endpoint.to_string(),
        remote_app: remote_unit
            .and_then(|u| u.split_once('/'))
            .map(|(app, _)| app.to_string())
            .unwrap_or_default(),
        remote_unit: remote_unit.map(str::to_string),
    };
    match kind {
        "created" => Hook::RelationCreated(r),
        "joined" => Hook::RelationJoined(r),
        "changed" => Hook::RelationChanged(r),
        "departed" => Hook::RelationDeparted(r),
        "broken" => Hook::RelationBroken(r),
        other => panic!("a relation hook's kind: {other}"),
    }
}

/// What a probe's `saw` line lists: `ID=UNIT,UNIT;` for each relation.
fn seen_of(text: &str) -> Seen {
    text.split(';')
        .filter(|r| !r.is_empty())
        .map(|r| {
            let (id, units) = r.split_once('=').expect("ID=UNITS");
            (
                id.parse().expect("a relation id"),
                units
                    .split(',')
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        })
        .collect()
}

/// Every unit's committed hooks, in order, from the hosts' JSON logs: a hook counts once it
/// logged "hook committed", or that it was no longer queued after an earlier run's commit
/// went unanswered (the store unavailable): that commit may have applied. A probe's hook
/// carries what its last run logged that it saw. A hook found no longer queued otherwise
/// applied nothing (committed before, or dropped by the removal of its relation), so it is
/// not part of the history.
fn histories(logs: &[PathBuf]) -> Vec<Ran> {
    let mut lines: Vec<(String, usize, serde_json::Value)> = Vec::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let at = value["timestamp"].as_str().unwrap_or_default().to_string();
            lines.push((at, lines.len(), value));
        }
    }
    // One unit is run by one host at a time, and hands over only after its ownership
    // lease lapses: the hosts' clocks (one machine's) order its lines.
    lines.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut saw: BTreeMap<String, Seen> = BTreeMap::new();
    let mut committed: std::collections::BTreeSet<(String, u64)> = Default::default();
    let mut unanswered: std::collections::BTreeSet<(String, u64)> = Default::default();
    let mut ran = Vec::new();
    for (_, _, line) in lines {
        // Logged by the agent after the attempt, outside the hook's span.
        if line["result"] == "store-unavailable"
            && let (Some(unit), Some(seq)) = (line["unit"].as_str(), line["seq"].as_u64())
        {
            unanswered.insert((unit.to_string(), seq));
            continue;
        }
        let span = &line["span"];
        let Some(unit) = span["unit"].as_str() else {
            continue;
        };
        let message = line["message"].as_str().unwrap_or_default();
        if line["target"] == "charm" {
            if let Some(list) = message.strip_prefix("saw ") {
                saw.insert(unit.to_string(), seen_of(list));
            }
            continue;
        }
        let no_longer_queued = message.starts_with("hook no longer queued");
        if message != "hook committed" && !no_longer_queued {
            continue;
        }
        if no_longer_queued
            && !span["seq"]
                .as_u64()
                .is_some_and(|seq| unanswered.contains(&(unit.to_string(), seq)))
        {
            saw.remove(unit);
            continue;
        }
        // leader-elected is the agent's own, not queued in the store: it has no seq.
        if let Some(seq) = span["seq"].as_u64()
            && !committed.insert((unit.to_string(), seq))
        {
            saw.remove(unit);
            continue;
        }
        let hook = hook_of(
            span["hook"].as_str().unwrap_or_default(),
            span["relation"].as_u64(),
            span["remote_unit"].as_str(),
        );
        ran.push(Ran {
            unit: unit.to_string(),
            hook,
            saw: saw.remove(unit),
        });
    }
    ran
}

fn run_walk(mut walk: Walk, steps: u64) -> (usize, usize) {
    walk.start(0);
    let start = Instant::now();
    while walk.inventory().units.len() < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the first host deploys the bundle"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    walk.start(1);
    for _ in 0..steps {
        walk.step();
    }
    for i in 0..HOSTS {
        if walk.hosts[i].is_none() {
            walk.start(i);
        }
    }
    let settled = walk.settle(Duration::from_secs(120));
    let report = walk.report();
    let found = check_model(&settled);
    assert!(found.is_empty(), "{found:#?}\n{report}");

    // The bundle the model exports deploys, into an empty store, as the same model.
    let out = Command::new(&walk.bin)
        .args(["export-bundle", "--store", &walk.spec])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{report}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported = String::from_utf8(out.stdout).unwrap();
    let bundle = walk.path("exported.yaml");
    std::fs::write(&bundle, &exported).unwrap();
    let again = format!("sqlite:{}", walk.path("again.db"));
    let check = Command::new(&walk.bin)
        .args(["check", &bundle])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "check of the exported bundle: {}\n{exported}\n{report}",
        String::from_utf8_lossy(&check.stderr)
    );
    let out = Command::new(&walk.bin)
        .args(["run", &bundle, "--until-idle", "--store", &again])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the exported bundle runs: {}\n{exported}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&walk.bin)
        .args(["export-bundle", "--store", &again])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        exported,
        "the exported bundle, deployed, exports the same bundle\n{report}"
    );

    for i in 0..HOSTS {
        walk.stop(i);
    }
    let history = histories(&walk.logs);
    let saw = history.iter().filter(|r| r.saw.is_some()).count();
    let found = check_history(&history);
    assert!(
        found.is_empty(),
        "{found:#?}\n{report}\nhistory:\n{}",
        history
            .iter()
            .map(|r| format!("  {} {:?} saw {:?}", r.unit, r.hook, r.saw))
            .collect::<Vec<_>>()
            .join("\n")
    );
    (history.len(), saw)
}

fn walks(
    store: &str,
    default: u64,
    mut open: impl FnMut() -> (String, Arc<dyn Store>, tokio::runtime::Runtime),
) {
    let count = env_or("LIFECYCLE_HOST_WALKS", default);
    let steps = env_or("LIFECYCLE_HOST_STEPS", 30);
    let first = env_or("LIFECYCLE_HOST_SEED", 0x5eed);
    let (mut hooks, mut seen) = (0, 0);
    for n in 0..count {
        let seed = first + n;
        let (spec, opened, rt) = open();
        eprintln!("{store}: walk with seed {seed}");
        let (h, s) = run_walk(Walk::new(seed, spec, opened, rt), steps);
        hooks += h;
        seen += s;
    }
    eprintln!(
        "{store}: {count} walks of {steps} commands, {hooks} hooks committed ({seen} with what they saw), 0 violations"
    );
    assert!(count == 0 || seen > 0, "the probes logged what they saw");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn hosts_on_sqlite_keep_jujus_lifecycle_under_random_commands() {
    let files = tempfile::tempdir().unwrap();
    let mut n = 0;
    walks("sqlite", 2, || {
        n += 1;
        let db = files.path().join(format!("model-{n}.db"));
        let spec = format!("sqlite:{}", db.display());
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db, "default").unwrap());
        (spec, store, runtime())
    });
}

#[cfg(feature = "etcd")]
#[test]
fn hosts_on_etcd_keep_jujus_lifecycle_under_random_commands() {
    use charm_host::store::{EtcdConfig, EtcdStore};
    let etcd = charm_tests::etcd_server::EtcdServer::start();
    let mut n = 0;
    walks("etcd", 1, || {
        n += 1;
        let spec = etcd.store_spec(&format!("walk-{n}"));
        let rt = runtime();
        let store: Arc<dyn Store> = Arc::new(
            rt.block_on(EtcdStore::connect(
                EtcdConfig::parse(&spec).unwrap(),
                "default",
            ))
            .unwrap(),
        );
        (spec, store, rt)
    });
}

#[test]
fn a_hook_is_read_back_from_its_name_and_span() {
    assert_eq!(hook_of("install", None, None), Hook::Install);
    let Hook::RelationJoined(r) = hook_of("db-relation-joined", Some(4), Some("postgresql/1"))
    else {
        panic!("a relation-joined hook");
    };
    assert_eq!((r.id, r.endpoint.as_str()), (4, "db"));
    assert_eq!(r.remote_app, "postgresql");
    let seen = seen_of("3=postgresql/0,postgresql/1;5=;");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[&3].len(), 2);
    assert!(seen[&5].is_empty());
}
