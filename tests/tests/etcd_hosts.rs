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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use charm_host::store::StateStore;
use charm_tests::etcd_model::{HOSTS, LEASE, Model, RETRY, host_of, median};
use charm_tests::etcd_server::EtcdServer;

/// Each test runs nine processes; one test at a time keeps the two cores' scheduling fair.
static SERIAL: Mutex<()> = Mutex::new(());

/// How many compaction turns the hosts of the model under `prefix` took, and what etcd
/// answers a read at its first revision.
fn compaction_of(etcd: &EtcdServer, prefix: &str) -> (i64, String) {
    use etcd_client::{Client, GetOptions};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = Client::connect([etcd.endpoint()], None).await.unwrap();
        let turn = client
            .get(format!("{prefix}/compaction"), None)
            .await
            .unwrap();
        let turns = turn.kvs().first().map_or(0, |kv| kv.version());
        let first = Some(GetOptions::new().with_revision(1));
        let oldest = client.get(format!("{prefix}/meta"), first).await;
        (turns, format!("{oldest:?}"))
    })
}

#[test]
fn three_hosts_one_leader_each_and_failover_after_kill() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = EtcdServer::start();
    let mut model = Model::new(etcd.store_spec("models/test"));
    // The hosts compact etcd's history every second, through the kills and restarts.
    model.host_args(&["--etcd-compaction-interval", "1"]);
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

    let (turns, oldest) = compaction_of(&etcd, "models/test");
    assert!(turns >= 10, "{turns} compaction turns");
    assert!(oldest.contains("compacted"), "the first revision: {oldest}");

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
    let etcd = EtcdServer::start();
    let mut model = Model::new(etcd.store_spec("models/test"));
    model.start_all();
    model.wait_settled(Duration::from_secs(90));
    let before: Vec<_> = ["discourse", "postgresql"]
        .iter()
        .map(|app| model.leader(app).unwrap())
        .collect();

    // Frozen for twice the lease: every lease lapses meanwhile, in etcd's eyes.
    etcd.pause();
    std::thread::sleep(LEASE * 2);
    etcd.resume();

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
    let mut etcd = EtcdServer::start();
    let mut model = Model::new(etcd.store_spec("models/test"));
    model.start(0);
    // Kill etcd while the first host's hooks are running: deployed, not yet settled.
    model.wait_until(Duration::from_secs(60), "the first host deploys", |s| {
        s.units.len() == 6
    });
    for i in 1..HOSTS {
        model.start(i);
    }
    etcd.kill();
    std::thread::sleep(Duration::from_secs(2));
    etcd.restart();
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
