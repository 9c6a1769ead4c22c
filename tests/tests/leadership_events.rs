//! Leadership events through the host with real charms: leader-elected runs once, on the
//! leader, as leader; leader-settings-changed reaches the other units; a crashed leader's
//! lease lapses and another unit is elected and runs leader-elected.

use std::collections::BTreeMap;
use std::time::Duration;

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
