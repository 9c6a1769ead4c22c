//! Leadership events through the host with real charms: leader-elected runs once, on the
//! leader, as leader; leader-settings-changed reaches the other units; a crashed leader's
//! lease lapses and another unit is elected and runs leader-elected; a leader that ran
//! hooks as a follower's during a lease store outage runs leader-elected again when it
//! leads again, even in the same term.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use charm_host::controller::Controller;
use charm_host::leadership::LeadershipConfig;
use charm_host::store::faults::{FaultPlan, FaultyStore};
use charm_host::store::{MemoryStore, Store};
use charm_tests::{controller, fast_config, guests, load, runtime, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_elected_and_leader_settings_changed_reach_the_right_units() {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    controller
        .deploy(
            "postgresql",
            load(&runtime, guests::POSTGRESQL),
            "pg",
            BTreeMap::new(),
            3,
        )
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;

    let history = controller.history();
    let elected: Vec<_> = history
        .iter()
        .filter(|r| r.hook == "leader-elected")
        .collect();
    assert_eq!(elected.len(), 1, "{elected:?}");
    assert!(elected[0].leader, "leader-elected runs as leader");
    let leader = elected[0].unit.clone();
    let status = store.status().await.unwrap();
    assert!(status.units.iter().any(|u| u.name == leader && u.leader));
    // The leader generated a password in the leader settings; every other unit heard.
    let snapshot = store.snapshot(&leader).await.unwrap();
    assert!(snapshot.leader_data.contains_key("password"));
    for unit in ["postgresql/0", "postgresql/1", "postgresql/2"] {
        let heard = history
            .iter()
            .any(|r| r.unit == unit && r.hook == "leader-settings-changed");
        let ran: Vec<(&str, bool)> = history
            .iter()
            .filter(|r| r.unit == unit)
            .map(|r| (r.hook.as_str(), r.leader))
            .collect();
        assert_eq!(
            heard,
            unit != leader,
            "{unit}: leader-settings-changed on followers only; it ran {ran:?}; leader {leader}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_and_the_new_leader_runs_leader_elected() {
    let runtime = runtime();
    let config = fast_config();
    let lease = config.leadership.lease_duration;
    let (controller, store) = controller(config);
    controller
        .deploy(
            "postgresql",
            load(&runtime, guests::POSTGRESQL),
            "pg",
            BTreeMap::new(),
            2,
        )
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;
    let first = store.status().await.unwrap().applications[0].clone();
    let old = first.leader.clone().expect("a leader");

    controller.crash_unit(&old);
    let deadline = tokio::time::Instant::now() + lease * 4;
    let new = loop {
        let app = store.status().await.unwrap().applications[0].clone();
        if let Some(l) = app.leader.clone().filter(|l| *l != old) {
            assert!(
                app.term > first.term,
                "a new leader has a new term: {app:?}"
            );
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader within {:?}",
            lease * 4
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    settle(&controller, Duration::from_secs(60)).await;
    let history = controller.history();
    assert!(
        history
            .iter()
            .any(|r| r.unit == new && r.hook == "leader-elected" && r.leader),
        "the new leader {new} ran leader-elected as leader: {history:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_ran_hooks_as_a_follower_runs_leader_elected_again_in_the_same_term() {
    let runtime = runtime();
    // A 2 s guarantee on a 20 s lease: an outage of a few seconds ends the guarantee (the
    // units run hooks as followers) but not the lease, which comes back in the same term.
    let config = charm_host::controller::ControllerConfig {
        leadership: LeadershipConfig {
            lease_duration: Duration::from_secs(20),
            drift_margin: Duration::from_secs(18),
            ..fast_config().leadership
        },
        ..fast_config()
    };
    let guarantee = config.leadership.guarantee();
    // Only lease calls fail, as in the seed's Juju 2.9 (leases in raft, state in mongo).
    let plan = FaultPlan {
        commit_faults: false,
        ..FaultPlan::none(7)
    };
    let faulty = Arc::new(FaultyStore::new(
        Arc::new(MemoryStore::new("test")),
        plan,
        None,
    ));
    let store: Arc<dyn Store> = faulty.clone();
    let controller = Controller::new(store.clone(), Duration::from_millis(100), config).unwrap();
    for (app, guest) in [
        ("discourse", guests::DISCOURSE),
        ("postgresql", guests::POSTGRESQL),
    ] {
        controller
            .deploy(app, load(&runtime, guest), app, BTreeMap::new(), 1)
            .await
            .unwrap();
    }
    settle(&controller, Duration::from_secs(60)).await;
    let terms = |status: charm_host::store::ModelStatus| {
        status
            .applications
            .iter()
            .map(|a| (a.name.clone(), a.term))
            .collect::<BTreeMap<_, _>>()
    };
    let before = terms(store.status().await.unwrap());

    faulty.set_unreachable(true);
    tokio::time::sleep(guarantee + Duration::from_secs(1)).await;
    controller
        .relate(("discourse", "db"), ("postgresql", "db"))
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;
    let during = controller.history().len();
    let followed: Vec<_> = controller
        .history()
        .into_iter()
        .filter(|r| r.hook == "db-relation-changed")
        .map(|r| (r.unit, r.leader))
        .collect();
    assert!(
        followed.iter().all(|(_, leader)| !leader) && followed.len() >= 2,
        "the relation's hooks ran while no unit could count on leading: {followed:?}"
    );
    assert!(store.pod_spec("discourse").await.unwrap().is_none());

    faulty.set_unreachable(false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let elected_again = |unit: &str| {
        controller.history()[during..]
            .iter()
            .any(|r| r.unit == unit && r.hook == "leader-elected" && r.leader)
    };
    while !(elected_again("discourse/0") && elected_again("postgresql/0")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader-elected after the outage: {:?}",
            &controller.history()[during..]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&controller, Duration::from_secs(60)).await;
    assert_eq!(
        terms(store.status().await.unwrap()),
        before,
        "the leases outlived the outage"
    );
    // Caught up as leader: postgresql published the connection, discourse set its pod spec.
    let spec = store
        .pod_spec("discourse")
        .await
        .unwrap()
        .expect("a pod spec");
    let text = serde_json::to_string(&spec.spec).unwrap();
    assert!(text.contains("postgresql-0.postgresql-endpoints"), "{text}");
}
