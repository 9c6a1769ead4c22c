//! Three `charm-host` processes on loopback share one real etcd, each hosting one unit of
//! discourse and one of postgresql: exactly one unit leads each application; killing the
//! leader's process hands leadership to a unit of another, whose leader-elected hook runs;
//! a frozen etcd never lets a stale term commit nor refuses a leader's write inside a hook;
//! an etcd restarted in the middle of hooks loses none of them. In each, the leader-only
//! writes every host recorded (`--write-history`) are linearizable
//! ([`charm_tests::linearizable`]).
//!
//! The failover test prints the failover times it measured (`--nocapture` shows them).

#![cfg(feature = "etcd")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use charm_host::store::{EtcdConfig, EtcdStore, ModelStatus, StateStore};
use charm_tests::etcd_server::EtcdServer;
use charm_tests::{guests, linearizable};

/// The hosts' lease: 3 s, renewed every 0.5 s, retried every 0.25 s, 1.5 s guarantee.
const LEASE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(250);
const HOSTS: usize = 3;

/// Each test runs nine processes; one test at a time keeps the two cores' scheduling fair.
static SERIAL: Mutex<()> = Mutex::new(());

struct Model {
    dir: tempfile::TempDir,
    bundle: PathBuf,
    etcd: EtcdServer,
    spec: String,
    rt: tokio::runtime::Runtime,
    store: EtcdStore,
    hosts: Vec<Option<Child>>,
    starts: usize,
}

impl Model {
    fn new() -> Model {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(guests::DISCOURSE, dir.path().join("discourse.wasm")).unwrap();
        std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
        let bundle = dir.path().join("bundle.yaml");
        std::fs::write(
            &bundle,
            "applications:\n  discourse: {charm: discourse.wasm, num_units: 3}\n  postgresql: {charm: postgresql.wasm, num_units: 3}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n",
        )
        .unwrap();
        let etcd = EtcdServer::start();
        let spec = etcd.store_spec("models/test");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut config = EtcdConfig::parse(&spec).unwrap();
        config.request_timeout = Duration::from_secs(2);
        let store = rt.block_on(EtcdStore::connect(config, "default")).unwrap();
        Model {
            dir,
            bundle,
            etcd,
            spec,
            rt,
            store,
            hosts: (0..HOSTS).map(|_| None).collect(),
            starts: 0,
        }
    }

    fn log(&self, host: usize, start: usize) -> PathBuf {
        self.dir.path().join(format!("host{host}.{start}.log"))
    }

    fn logs(&self) -> Vec<PathBuf> {
        self.files("log")
    }

    /// The files of this run with the extension `ext`, in order.
    fn files(&self, ext: &str) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        files.sort();
        files
    }

    /// The last lines of every host's log, for a failure's message.
    fn log_tails(&self) -> String {
        let mut out = String::new();
        for log in self.logs() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("--- {}\n", log.display());
            for line in &lines[lines.len().saturating_sub(12)..] {
                out += line;
                out += "\n";
            }
        }
        out
    }

    /// Starts host `i`, running discourse/i and postgresql/i.
    fn start(&mut self, i: usize) {
        self.starts += 1;
        let log = self.log(i, self.starts);
        let writes = log.with_extension("writes");
        let child = Command::new(charm_tests::charm_host_binary())
            .args(["run", self.bundle.to_str().unwrap(), "--store", &self.spec])
            .arg("--write-history")
            .arg(&writes)
            .args(["--units", &format!("discourse/{i},postgresql/{i}")])
            .args(["--lease-duration", &LEASE.as_secs_f64().to_string()])
            .args(["--renew-interval", "0.5"])
            .args(["--retry-period", &RETRY.as_secs_f64().to_string()])
            .args(["--drift-margin", "1.5"])
            .env(
                "RUST_LOG",
                "charm_host::agent=debug,charm_host::leadership=info",
            )
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        self.hosts[i] = Some(child);
    }

    /// Starts every host: the first deploys the bundle, the others resume it.
    fn start_all(&mut self) {
        self.start(0);
        self.wait_until(Duration::from_secs(60), "the first host deploys", |s| {
            s.units.len() == 6
        });
        for i in 1..HOSTS {
            self.start(i);
        }
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.hosts[i].take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn status(&self) -> Option<ModelStatus> {
        self.rt.block_on(self.store.status()).ok()
    }

    fn wait_until(&self, limit: Duration, what: &str, mut done: impl FnMut(&ModelStatus) -> bool) {
        let start = Instant::now();
        loop {
            if self.status().is_some_and(|s| done(&s)) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?}; status {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The application's leader and term, as etcd has them.
    fn leader(&self, app: &str) -> Option<(String, u64)> {
        let status = self.status()?;
        let row = status.applications.iter().find(|a| a.name == app)?;
        Some((row.leader.clone()?, row.term?))
    }

    /// Whether `unit` ran leader-elected for `term` (its commit records the term).
    fn elected(&self, unit: &str, term: u64) -> bool {
        self.rt
            .block_on(self.store.snapshot(unit))
            .is_ok_and(|s| s.elected_term == Some(term))
    }

    /// Waits for the model to be settled: one leader per application that ran
    /// leader-elected for its term, discourse's pod spec, every unit active, no queue left.
    fn wait_settled(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let settled = self.status().is_some_and(|s| {
                s.units.len() == 6
                    && s.units.iter().all(|u| u.status.kind.as_str() == "active")
                    && ["discourse", "postgresql"].iter().all(|app| {
                        self.leader(app)
                            .is_some_and(|(unit, term)| self.elected(&unit, term))
                    })
                    && s.applications
                        .iter()
                        .any(|a| a.name == "discourse" && a.pod_spec_revision.is_some())
            }) && s_queues_empty(self);
            if settled {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "not settled within {limit:?}: {:?}\n{}\n{}",
                self.status(),
                self.unsettled(),
                self.log_tails()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What each leader last ran leader-elected for, and what each unit has queued.
    fn unsettled(&self) -> String {
        let mut out = String::new();
        for app in ["discourse", "postgresql"] {
            let leader = self.leader(app);
            let elected = leader.as_ref().map(|(unit, _)| {
                self.rt
                    .block_on(self.store.snapshot(unit))
                    .map(|s| s.elected_term)
            });
            out +=
                &format!("{app}: leader and term {leader:?}, leader-elected ran for {elected:?}\n");
            for i in 0..HOSTS {
                let unit = format!("{app}/{i}");
                let queued = self
                    .rt
                    .block_on(self.store.queued(&unit))
                    .map(|q| q.iter().map(|h| h.hook.name()).collect::<Vec<_>>());
                out += &format!("  {unit} queued: {queued:?}\n");
            }
        }
        out
    }

    /// Leader commits by (application, term), from every host's log; fails if two units
    /// committed as leader in one term, or a hook's leader-only write was refused, or the
    /// leader-only writes the hosts recorded are not linearizable.
    fn check_logs(&self) -> BTreeMap<(String, u64), String> {
        self.check_write_histories();
        let mut by_term: BTreeMap<(String, u64), String> = BTreeMap::new();
        for log in self.logs() {
            let text = std::fs::read_to_string(&log).unwrap();
            for line in text.lines() {
                assert!(
                    !line.contains("refused_not_leader=true") && !line.contains("not a leader"),
                    "{}: a leader-only write was refused: {line}",
                    log.display()
                );
                if !(line.contains("hook committed") && line.contains("leader=true")) {
                    continue;
                }
                let field = |name: &str| {
                    // The event's own fields, after the hook span's (`hook{unit=.. term=..}:`).
                    let rest = &line[line.rfind(&format!(" {name}="))? + name.len() + 2..];
                    Some(rest.split_whitespace().next()?.to_string())
                };
                let (Some(unit), Some(term)) = (field("unit"), field("term")) else {
                    continue;
                };
                let app = unit.split('/').next().unwrap().to_string();
                let term: u64 = term.parse().unwrap();
                let holder = by_term.entry((app, term)).or_insert_with(|| unit.clone());
                assert_eq!(
                    *holder, unit,
                    "two units committed as leader in term {term}"
                );
            }
        }
        by_term
    }
}

impl Model {
    /// Every application's leader-only writes, as the hosts recorded their calls and
    /// answers across kills and restarts, have a linearization.
    fn check_write_histories(&self) {
        let files = self.files("writes");
        assert!(!files.is_empty(), "no host recorded its writes");
        let histories = linearizable::histories_from_files(&files);
        let discourse = histories.get("discourse").map_or(0, Vec::len);
        assert!(
            discourse > 0,
            "discourse's leader wrote nothing: {histories:?}"
        );
        for (app, events) in &histories {
            let order = linearizable::linearize(events)
                .unwrap_or_else(|e| panic!("{app}'s leader writes: {e}"));
            let terms: std::collections::BTreeSet<u64> =
                order.iter().filter_map(|(w, _)| w.term).collect();
            eprintln!(
                "{app}: {} leader writes from {} files linearizable, terms {terms:?}",
                order.len(),
                files.len()
            );
        }
    }
}

fn s_queues_empty(model: &Model) -> bool {
    (0..HOSTS).all(|i| {
        ["discourse", "postgresql"].iter().all(|app| {
            model
                .rt
                .block_on(model.store.queued(&format!("{app}/{i}")))
                .is_ok_and(|q| q.is_empty())
        })
    })
}

impl Drop for Model {
    fn drop(&mut self) {
        for i in 0..HOSTS {
            self.kill(i);
        }
    }
}

fn host_of(unit: &str) -> usize {
    unit.rsplit('/').next().unwrap().parse().unwrap()
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

#[test]
fn three_hosts_one_leader_each_and_failover_after_kill() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut model = Model::new();
    model.start_all();
    model.wait_settled(Duration::from_secs(90));
    for app in ["discourse", "postgresql"] {
        let status = model.status().unwrap();
        let leaders: Vec<_> = status
            .units
            .iter()
            .filter(|u| u.name.starts_with(&format!("{app}/")) && u.leader)
            .collect();
        assert_eq!(leaders.len(), 1, "{app}: {status:?}");
    }

    // Kill the process of discourse's leader; a unit on another host leads and runs
    // leader-elected. Then start the killed host again, and do it over.
    const KILLS: usize = 10;
    let mut failovers = Vec::new();
    for round in 0..KILLS {
        let (old, old_term) = model.leader("discourse").expect("a discourse leader");
        let victim = host_of(&old);
        let killed_at = Instant::now();
        model.kill(victim);
        let limit = LEASE + RETRY + Duration::from_secs(10);
        let (new, new_term) = loop {
            if let Some((unit, term)) = model.leader("discourse")
                && term != old_term
                && model.elected(&unit, term)
            {
                break (unit, term);
            }
            assert!(
                killed_at.elapsed() < limit,
                "round {round}: no new leader within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        failovers.push(killed_at.elapsed());
        assert_ne!(
            host_of(&new),
            victim,
            "round {round}: the killed host leads"
        );
        assert!(
            new_term > old_term,
            "round {round}: term {new_term} after {old_term}"
        );
        model.start(victim);
        model.wait_settled(Duration::from_secs(60));
    }
    let by_term = model.check_logs();
    let discourse_terms = by_term.keys().filter(|(app, _)| app == "discourse").count();
    assert!(
        discourse_terms > KILLS,
        "every failover's leader committed under its own term: {by_term:?}"
    );

    failovers.sort();
    eprintln!(
        "failover after kill -9 of the leader's host ({KILLS} kills, lease {LEASE:?}, retry {RETRY:?}): median {:.2} s, max {:.2} s, min {:.2} s",
        median(&failovers).as_secs_f64(),
        failovers.last().unwrap().as_secs_f64(),
        failovers[0].as_secs_f64(),
    );
}

#[test]
fn frozen_etcd_admits_no_stale_term_and_refuses_no_leader_write() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut model = Model::new();
    model.start_all();
    model.wait_settled(Duration::from_secs(90));
    let before: Vec<_> = ["discourse", "postgresql"]
        .iter()
        .map(|app| model.leader(app).unwrap())
        .collect();

    // Frozen for twice the lease: every lease lapses meanwhile, in etcd's eyes.
    model.etcd.pause();
    std::thread::sleep(LEASE * 2);
    model.etcd.resume();

    model.wait_settled(Duration::from_secs(60));
    for (app, (_, old_term)) in ["discourse", "postgresql"].iter().zip(&before) {
        let (_, term) = model.leader(app).unwrap();
        assert!(term >= *old_term, "{app}: term went back");
    }
    // No two units committed as leader in one term (a stale term's commit would be one),
    // and no hook had a leader-only write refused.
    model.check_logs();
}

#[test]
fn etcd_restarted_during_hooks_loses_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut model = Model::new();
    model.start(0);
    // Kill etcd while the first host's hooks are running: deployed, not yet settled.
    model.wait_until(Duration::from_secs(60), "the first host deploys", |s| {
        s.units.len() == 6
    });
    for i in 1..HOSTS {
        model.start(i);
    }
    model.etcd.kill();
    std::thread::sleep(Duration::from_secs(2));
    model.etcd.restart();
    model.wait_settled(Duration::from_secs(90));
    // Every unit ran its deploy hooks and the relation's: discourse's pod spec carries
    // postgresql's connection string, and every unit's bag on the relation is there.
    let spec = model
        .rt
        .block_on(model.store.pod_spec("discourse"))
        .unwrap()
        .unwrap();
    let text = serde_json::to_string(&spec.spec).unwrap();
    assert!(text.contains("postgresql"), "{text}");
    for i in 0..HOSTS {
        let snapshot = model
            .rt
            .block_on(model.store.snapshot(&format!("discourse/{i}")))
            .unwrap();
        let relation = snapshot.relations.values().next().expect("the db relation");
        assert_eq!(relation.remote_units.len(), 3, "{relation:?}");
    }
    model.check_logs();
}
