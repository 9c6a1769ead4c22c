//! Two `charm-host` processes share one SQLite file, each running some units of the same
//! applications: exactly one unit leads each application, leader commits of one term all
//! come from one unit, and when the leader's process is killed a unit of the other process
//! takes over and finishes the work.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use charm_host::store::{SqliteStore, StateStore};
use charm_tests::hosts::host_run;
use charm_tests::wait_until;

fn host(bundle: &Path, store: &str, units: &str, log: &Path) -> Child {
    // Short leases, so the takeover is quick.
    host_run(log)
        .arg(bundle)
        .args(["--store", store, "--units", units])
        .env("RUST_LOG", "charm_host::agent=debug")
        .spawn()
        .unwrap()
}

/// (unit, term) of every leader commit in a host's log.
fn leader_commits(log: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("hook committed") && l.contains("leader=true"))
        .filter_map(|l| {
            let field = |name: &str| {
                // The event's own fields, after the hook span's (`hook{unit=.. term=..}:`).
                let rest = &l[l.rfind(&format!(" {name}="))? + name.len() + 2..];
                Some(rest.split_whitespace().next()?.to_string())
            };
            Some((field("unit")?, field("term")?.parse().ok()?))
        })
        .collect()
}

#[test]
fn two_hosts_sharing_a_store_never_both_lead() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = charm_tests::discourse_bundle(dir.path(), 3);
    let db = dir.path().join("model.db");
    let store_arg = format!("sqlite:{}", db.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = || {
        let store = SqliteStore::open(&db, "default").ok()?;
        rt.block_on(store.status()).ok()
    };

    let (log_a, log_b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let mut a = host(&bundle, &store_arg, "discourse/0,postgresql/0", &log_a);
    // The second host starts once the first has deployed the bundle, and resumes it.
    wait_until(Duration::from_secs(30), "the first host deploys", || {
        status().is_some_and(|s| s.units.len() == 4)
    });
    let mut b = host(&bundle, &store_arg, "discourse/1,discourse/2", &log_b);
    wait_until(Duration::from_secs(30), "discourse's pod spec", || {
        db.exists()
            && rt
                .block_on(
                    SqliteStore::open(&db, "default")
                        .unwrap()
                        .pod_spec("discourse"),
                )
                .unwrap()
                .is_some()
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = status().unwrap();
    let leader = before
        .applications
        .iter()
        .find(|a| a.name == "discourse")
        .unwrap()
        .leader
        .clone()
        .unwrap();
    for app in ["discourse", "postgresql"] {
        let leaders = before
            .units
            .iter()
            .filter(|u| u.name.starts_with(&format!("{app}/")) && u.leader)
            .count();
        assert_eq!(leaders, 1, "{app}: {before:?}");
    }

    // Kill the process hosting discourse's leader; a unit of the other takes over.
    let (victim, survivor) = if leader == "discourse/0" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let killed = Instant::now();
    victim.kill().unwrap();
    victim.wait().unwrap();
    wait_until(Duration::from_secs(20), "a new discourse leader", || {
        status().is_some_and(|s| {
            s.applications
                .iter()
                .any(|a| a.name == "discourse" && a.leader.as_ref().is_some_and(|l| *l != leader))
        })
    });
    // A figure, not a check (`--nocapture` shows it): the lease is 3 s; the follower claims
    // when it ends, and the status is looked at every 0.1 s.
    eprintln!(
        "failover after kill -9, two hosts on one SQLite file: {:.2} s",
        killed.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(2));
    survivor.kill().unwrap();
    survivor.wait().unwrap();

    // Leader commits of one term all came from one unit, across both hosts.
    let mut by_term: BTreeMap<(String, u64), String> = BTreeMap::new();
    for (unit, term) in leader_commits(&log_a)
        .into_iter()
        .chain(leader_commits(&log_b))
    {
        let app = unit.split('/').next().unwrap().to_string();
        let holder = by_term.entry((app, term)).or_insert_with(|| unit.clone());
        assert_eq!(*holder, unit, "two units committed as leader in one term");
    }
    let discourse_terms: Vec<_> = by_term
        .keys()
        .filter(|(app, _)| app == "discourse")
        .collect();
    assert!(
        discourse_terms.len() >= 2,
        "the takeover's leader committed under a new term: {by_term:?}"
    );
}
