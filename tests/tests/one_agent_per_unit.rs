//! Two `charm-host` processes on one model, both selecting every unit (an operator's
//! mistake, or overlapping globs): one agent runs each unit, the other host says so and
//! runs nothing of it, and `status` names the host that runs each unit. The probe charm's
//! leader counts every hook it runs in its leader data: the count equals the leader hooks
//! that committed (none lost). After kill -9 of the owning host, the other takes its units
//! over once their ownership leases lapse, and goes on counting. On SQLite and on etcd.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use charm_host::store::{ModelStatus, SqliteStore, Store};
use charm_tests::hosts::host_run;
use charm_tests::{guests, wait_until};

/// The hosts' lease, for leadership and for unit ownership alike.
const LEASE: Duration = Duration::from_secs(3);

fn host(dir: &Path, store: &str, log: &Path) -> Child {
    host_run(log)
        .arg(dir.join("bundle.yaml"))
        .args(["--store", store, "--units", "probe/*"])
        // Update-status every second keeps the leader counting.
        .args(["--update-status-interval", "1"])
        .env(
            "RUST_LOG",
            "warn,charm_host::agent=debug,charm_host::controller=info",
        )
        .spawn()
        .unwrap()
}

/// `wait_until`, showing the hosts' logs when `done` does not come.
fn wait_showing(limit: Duration, what: &str, logs: &[&Path], mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() >= limit {
            let logs: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            panic!(
                "{what}: not within {limit:?}; the hosts' logs:\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The leader commits a host's log shows that applied a count (each makes a pod spec
/// revision; a hook found committed already applies nothing and shows revision 0).
fn leader_commits(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("hook committed") && l.contains("leader=true"))
        .filter(|l| !l.contains("pod_spec_revision=0 "))
        .count()
}

/// The model as the test reads it, through its own handle on the store.
struct Reader {
    rt: tokio::runtime::Runtime,
    open: Box<dyn Fn() -> Option<Arc<dyn Store>>>,
}

impl Reader {
    fn status(&self) -> Option<ModelStatus> {
        let store = (self.open)()?;
        self.rt.block_on(store.status()).ok()
    }

    /// The leader's count and the pod spec's revision and count.
    fn counts(&self) -> Option<(u64, u64, u64)> {
        let store = (self.open)()?;
        let leader = self
            .rt
            .block_on(store.snapshot("probe/0"))
            .ok()?
            .leader_data;
        let counter = leader.get("counter")?.parse().ok()?;
        let spec = self.rt.block_on(store.pod_spec("probe")).ok()??;
        let published = spec.spec["containers"][0]["envConfig"]["COUNTER"]
            .as_str()?
            .parse()
            .ok()?;
        Some((counter, spec.revision, published))
    }

    /// The host running each unit, all units having one.
    fn hosts(&self) -> Option<Vec<String>> {
        let status = self.status()?;
        (status.units.len() == 2)
            .then(|| status.units.iter().map(|u| u.host.clone()).collect())
            .flatten()
    }
}

fn twin_hosts(store: &str, reader: Reader, dir: &Path) {
    std::fs::copy(guests::PROBE, dir.join("probe.wasm")).unwrap();
    std::fs::write(
        dir.join("bundle.yaml"),
        "applications:\n  probe: {charm: probe.wasm, num_units: 2, options: {mode: counter}}\n",
    )
    .unwrap();
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let mut a = host(dir, store, &log_a);
    let host_a = format!(":{}", a.id());
    wait_showing(
        Duration::from_secs(60),
        "the first host runs both units",
        &[&log_a],
        || {
            reader
                .hosts()
                .is_some_and(|h| h.iter().all(|h| h.ends_with(&host_a)))
        },
    );
    let mut b = host(dir, store, &log_b);
    let host_b = format!(":{}", b.id());
    // Both hosts select both units; the leader counts on.
    let counted = |at_least: u64| reader.counts().is_some_and(|(c, _, _)| c >= at_least);
    wait_until(
        Duration::from_secs(30),
        "the second host hears of both owners",
        || {
            let log = std::fs::read_to_string(&log_b).unwrap();
            log.matches("not running it here").count() >= 2
        },
    );
    let (before, _, _) = reader.counts().unwrap();
    wait_until(Duration::from_secs(30), "ten more leader hooks", || {
        counted(before + 10)
    });
    let hosts = reader.hosts().unwrap();
    assert!(
        hosts.iter().all(|h| h.ends_with(&host_a)),
        "a unit moved while its owner lived: {hosts:?}"
    );
    assert_eq!(
        leader_commits(&log_b),
        0,
        "the second host ran a leader hook"
    );

    // kill -9 of the owner: the other host takes both units once their leases lapse.
    a.kill().unwrap();
    a.wait().unwrap();
    let killed_at = Instant::now();
    wait_until(
        LEASE + Duration::from_secs(10),
        "the second host runs both units",
        || {
            reader
                .hosts()
                .is_some_and(|h| h.iter().all(|h| h.ends_with(&host_b)))
        },
    );
    let took_over = killed_at.elapsed();
    let (before, _, _) = reader.counts().unwrap();
    wait_until(Duration::from_secs(30), "the new owner counts on", || {
        counted(before + 5)
    });
    b.kill().unwrap();
    b.wait().unwrap();

    let (counter, revision, published) = reader.counts().unwrap();
    let committed = leader_commits(&log_a) + leader_commits(&log_b);
    // A kill -9 may leave one applied commit unlogged; a lost update would make the count
    // fall short of the commits.
    assert!(
        (committed as u64..=committed as u64 + 1).contains(&counter),
        "{committed} leader hooks committed, count {counter}:\n{}\n{}",
        std::fs::read_to_string(&log_a).unwrap(),
        std::fs::read_to_string(&log_b).unwrap(),
    );
    assert_eq!(published, counter, "the pod spec carries the last count");
    assert_eq!(revision, counter, "one pod spec revision per count");
    let log_b = std::fs::read_to_string(&log_b).unwrap();
    assert!(log_b.contains("taking the unit over"), "{log_b}");
    println!("takeover after kill -9: {took_over:?} (lease {LEASE:?}); {counter} counts");
}

#[test]
fn twin_hosts_on_sqlite_run_each_unit_once_and_take_over_after_kill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("model.db");
    let store = format!("sqlite:{}", db.display());
    let open_db = db.clone();
    let reader = Reader {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        open: Box::new(move || {
            let store = SqliteStore::open_read_only(&open_db, "default").ok()?;
            Some(Arc::new(store) as Arc<dyn Store>)
        }),
    };
    twin_hosts(&store, reader, dir.path());
}

#[cfg(feature = "etcd")]
#[test]
fn twin_hosts_on_etcd_run_each_unit_once_and_take_over_after_kill() {
    use charm_host::store::{EtcdConfig, EtcdStore};
    use charm_tests::etcd_server::EtcdServer;

    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let spec = etcd.store_spec("models/twins");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = EtcdConfig::parse(&spec).unwrap();
    let store: Arc<dyn Store> =
        Arc::new(rt.block_on(EtcdStore::connect(config, "default")).unwrap());
    let reader = Reader {
        rt,
        open: Box::new(move || Some(store.clone())),
    };
    twin_hosts(&spec, reader, dir.path());
}
