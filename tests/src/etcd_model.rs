//! Three `charm-host` processes on loopback sharing one etcd model, each hosting one unit
//! of discourse and one of postgresql, with the test's own view of the model: its status,
//! leaders and terms, and the checks for leadership anomalies read from the hosts' logs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use charm_host::store::{EtcdConfig, EtcdStore, ModelStatus, StateStore};

use crate::guests;

/// The hosts' lease: 3 s, renewed every 0.5 s, retried every 0.25 s, 1.5 s guarantee.
pub const LEASE: Duration = Duration::from_secs(3);
pub const RETRY: Duration = Duration::from_millis(250);
pub const HOSTS: usize = 3;

/// A model of discourse and postgresql, three units each, run by [`HOSTS`] `charm-host`
/// processes on one etcd (a member or a cluster); every host is killed when dropped.
pub struct Model {
    dir: tempfile::TempDir,
    bundle: PathBuf,
    spec: String,
    /// The test's own view of the model, to read status, snapshots and queues.
    pub rt: tokio::runtime::Runtime,
    /// The test's own connection to the model's store.
    pub store: EtcdStore,
    hosts: Vec<Option<Child>>,
    starts: usize,
    host_args: Vec<String>,
}

impl Model {
    /// The model's files, and a connection to `spec` (an `etcd://` store).
    pub fn new(spec: String) -> Model {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(guests::DISCOURSE, dir.path().join("discourse.wasm")).unwrap();
        std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
        let bundle = dir.path().join("bundle.yaml");
        std::fs::write(
            &bundle,
            "applications:\n  discourse: {charm: discourse.wasm, num_units: 3}\n  postgresql: {charm: postgresql.wasm, num_units: 3}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n",
        )
        .unwrap();
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
            spec,
            rt,
            store,
            hosts: (0..HOSTS).map(|_| None).collect(),
            starts: 0,
            host_args: Vec::new(),
        }
    }

    pub fn log(&self, host: usize, start: usize) -> PathBuf {
        self.dir.path().join(format!("host{host}.{start}.log"))
    }

    pub fn logs(&self) -> Vec<PathBuf> {
        self.files("log")
    }

    /// The files of this run with the extension `ext`, in order.
    pub fn files(&self, ext: &str) -> Vec<PathBuf> {
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
    pub fn log_tails(&self) -> String {
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

    /// Adds `args` to every host's command line from now on.
    pub fn host_args(&mut self, args: &[&str]) {
        self.host_args.extend(args.iter().map(|a| a.to_string()));
    }

    /// Starts host `i`, running discourse/i and postgresql/i.
    pub fn start(&mut self, i: usize) {
        self.starts += 1;
        let log = self.log(i, self.starts);
        let writes = log.with_extension("writes");
        let child = Command::new(crate::charm_host_binary())
            .args(["run", self.bundle.to_str().unwrap(), "--store", &self.spec])
            .arg("--write-history")
            .arg(&writes)
            .args(["--units", &format!("discourse/{i},postgresql/{i}")])
            .args(["--lease-duration", &LEASE.as_secs_f64().to_string()])
            .args(["--renew-interval", "0.5"])
            .args(["--retry-period", &RETRY.as_secs_f64().to_string()])
            .args(["--drift-margin", "1.5"])
            .args(&self.host_args)
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
    pub fn start_all(&mut self) {
        self.start(0);
        self.wait_until(Duration::from_secs(60), "the first host deploys", |s| {
            s.units.len() == 6
        });
        for i in 1..HOSTS {
            self.start(i);
        }
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.hosts[i].take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn status(&self) -> Option<ModelStatus> {
        self.rt.block_on(self.store.status()).ok()
    }

    pub fn wait_until(
        &self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&ModelStatus) -> bool,
    ) {
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
    pub fn leader(&self, app: &str) -> Option<(String, u64)> {
        let status = self.status()?;
        let row = status.applications.iter().find(|a| a.name == app)?;
        Some((row.leader.clone()?, row.term?))
    }

    /// Whether `unit` ran leader-elected for `term` (its commit records the term).
    pub fn elected(&self, unit: &str, term: u64) -> bool {
        self.rt
            .block_on(self.store.snapshot(unit))
            .is_ok_and(|s| s.elected_term == Some(term))
    }

    /// Waits for the model to be settled: one leader per application that ran
    /// leader-elected for its term, discourse's pod spec, every unit active, no queue left.
    pub fn wait_settled(&self, limit: Duration) {
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
            }) && queues_empty(self);
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
    pub fn unsettled(&self) -> String {
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
    /// leader-only writes the hosts recorded (`--write-history`) are not linearizable.
    pub fn check_logs(&self) -> BTreeMap<(String, u64), String> {
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

fn queues_empty(model: &Model) -> bool {
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

/// The host running `unit`: host `i` runs the units numbered `i`.
impl Model {
    /// Every application's leader-only writes, as the hosts recorded their calls and
    /// answers across kills and restarts, have a linearization ([`crate::linearizable`]).
    pub fn check_write_histories(&self) {
        let files = self.files("writes");
        assert!(!files.is_empty(), "no host recorded its writes");
        let histories = crate::linearizable::histories_from_files(&files);
        let discourse = histories.get("discourse").map_or(0, Vec::len);
        assert!(
            discourse > 0,
            "discourse's leader wrote nothing: {histories:?}"
        );
        for (app, events) in &histories {
            let order = crate::linearizable::linearize(events)
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

pub fn host_of(unit: &str) -> usize {
    unit.rsplit('/').next().unwrap().parse().unwrap()
}

/// The median of sorted durations.
pub fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}
