//! Several hundred units across three `charm-host` processes on one etcd run with etcd's
//! default limits (128 operations a transaction): discourse's units, related to one
//! PostgreSQL unit, settle. Every commit of postgresql/0 fires relation-changed on every
//! discourse unit, and relating the applications fires relation-joined and -changed on all
//! of them: more queues than one transaction may write, so the hooks go through the etcd
//! store's outboxes. Settled means every unit active with nothing queued, every outbox
//! delivered, one leader per application, discourse's pod spec set.
//!
//! `ETCD_MANY_UNITS=1000` runs it with another number of discourse units (300 by default)
//! and prints how long they took to settle (`-- --nocapture`); `ETCD_MANY_UNITS_LOG` sets
//! the hosts' `RUST_LOG` (`warn` by default) and `ETCD_MANY_UNITS_KEEP=<dir>` keeps their
//! logs there.

#![cfg(feature = "etcd")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use charm_host::store::{EtcdConfig, EtcdStore, StateStore};
use charm_tests::etcd_server::EtcdServer;
use charm_tests::guests;

/// discourse's units; postgresql has one.
fn units() -> usize {
    std::env::var("ETCD_MANY_UNITS")
        .ok()
        .map(|n| n.parse().expect("ETCD_MANY_UNITS: a number of units"))
        .unwrap_or(300)
}
const HOSTS: usize = 3;

/// The units host `i` runs: discourse's by their number's last digit, postgresql/0 on the
/// first.
fn hosted(i: usize) -> String {
    let digits: Vec<usize> = (0..10).filter(|d| d % HOSTS == i).collect();
    let mut units: Vec<String> = digits.iter().map(|d| format!("discourse/*{d}")).collect();
    if i == 0 {
        units.push("postgresql/0".into());
    }
    units.join(",")
}

struct Hosts(Vec<Child>);

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn several_hundred_units_across_hosts_settle_on_etcd_defaults() {
    let units = units();
    let etcd = EtcdServer::start();
    let spec = etcd.store_spec("models/many");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::DISCOURSE, dir.path().join("discourse.wasm")).unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
    let bundle = dir.path().join("bundle.yaml");
    std::fs::write(
        &bundle,
        format!(
            "applications:\n  discourse: {{charm: discourse.wasm, num_units: {units}}}\n  postgresql: {{charm: postgresql.wasm, num_units: 1}}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n"
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut config = EtcdConfig::parse(&spec).unwrap();
    config.request_timeout = Duration::from_secs(5);
    let store = rt.block_on(EtcdStore::connect(config, "default")).unwrap();

    let mut hosts = Hosts(Vec::new());
    let start = |i: usize| {
        let log = std::fs::File::create(dir.path().join(format!("host{i}.log"))).unwrap();
        Command::new(charm_tests::charm_host_binary())
            .args(["run", bundle.to_str().unwrap(), "--store", &spec])
            .args(["--units", &hosted(i)])
            .env(
                "RUST_LOG",
                std::env::var("ETCD_MANY_UNITS_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let log_tails = || {
        (0..HOSTS)
            .map(|i| {
                let log = std::fs::read_to_string(dir.path().join(format!("host{i}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                if let Ok(keep) = std::env::var("ETCD_MANY_UNITS_KEEP") {
                    let _ = std::fs::write(format!("{keep}/host{i}.log"), &log);
                }
                format!(
                    "host {i}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The first host deploys the bundle; the others resume it once it is in the store.
    hosts.0.push(start(0));
    let began = Instant::now();
    let limit = Duration::from_secs(240.max(units as u64 / 2));
    loop {
        let status = rt.block_on(store.status());
        if status.is_ok_and(|s| s.units.len() == units + 1) {
            break;
        }
        assert!(
            began.elapsed() < limit,
            "not deployed within {limit:?}\n{}",
            log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 1..HOSTS {
        hosts.0.push(start(i));
    }

    // Settled twice, further apart than a host's sweep for outboxes left behind.
    let mut settled_at: Option<Instant> = None;
    loop {
        let unsettled = what_is_unsettled(&rt, &store, units);
        if !unsettled.is_empty() {
            settled_at = None;
        } else if settled_at.is_some_and(|t| t.elapsed() > Duration::from_millis(1500)) {
            break;
        } else if settled_at.is_none() {
            settled_at = Some(Instant::now());
        }
        for (i, child) in hosts.0.iter_mut().enumerate() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "host {i} exited\n{}",
                log_tails()
            );
        }
        assert!(
            began.elapsed() < limit,
            "not settled within {limit:?}: {unsettled}\n{}",
            log_tails()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let settled = settled_at.map_or(began.elapsed(), |t| t - began);
    log_tails();
    eprintln!(
        "{} units on {HOSTS} hosts settled in {:.1} s on etcd's default limits",
        units + 1,
        settled.as_secs_f64()
    );
}

/// What keeps the model from being settled, or "" if it is.
fn what_is_unsettled(rt: &tokio::runtime::Runtime, store: &EtcdStore, units: usize) -> String {
    let status = match rt.block_on(store.status()) {
        Ok(status) => status,
        Err(e) => return format!("no status: {e}"),
    };
    if status.units.len() != units + 1 {
        return format!("{} units", status.units.len());
    }
    let inactive: Vec<&str> = status
        .units
        .iter()
        .filter(|u| u.status.kind.as_str() != "active")
        .map(|u| u.name.as_str())
        .collect();
    if !inactive.is_empty() {
        return format!("{} units not active, first {}", inactive.len(), inactive[0]);
    }
    for app in &status.applications {
        if app.leader.is_none() {
            return format!("{} has no leader", app.name);
        }
        if app.name == "discourse" && app.pod_spec_revision.is_none() {
            return "discourse has no pod spec".into();
        }
    }
    for unit in &status.units {
        match rt.block_on(store.queued(&unit.name)) {
            Ok(q) if q.is_empty() => {}
            Ok(q) => {
                let first = &q[0];
                return format!(
                    "{} has {} hooks queued, first {} (seq {})",
                    unit.name,
                    q.len(),
                    first.hook.name(),
                    first.seq
                );
            }
            Err(e) => return format!("{}: {e}", unit.name),
        }
    }
    String::new()
}
