//! Relation data access rules, as in Juju: a unit writes only its own unit bag; only the
//! leader reads or writes its application's bag; the remote application's bag is read only.

use std::collections::BTreeMap;
use std::time::Duration;

use charm_tests::{controller, fast_config, guests, load, options, runtime, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_held_to_jujus_relation_data_rules() {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    controller
        .deploy(
            "probe",
            load(&runtime, guests::PROBE),
            "probe",
            options(&[("mode", "access")]),
            2,
        )
        .await
        .unwrap();
    controller
        .deploy(
            "postgresql",
            load(&runtime, guests::POSTGRESQL),
            "pg",
            BTreeMap::new(),
            1,
        )
        .await
        .unwrap();
    controller
        .relate(("probe", "db"), ("postgresql", "db"))
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;

    let status = store.status().await.unwrap();
    let leader = status
        .units
        .iter()
        .find(|u| u.name.starts_with("probe") && u.leader)
        .unwrap()
        .name
        .clone();
    for unit in ["probe/0", "probe/1"] {
        let stored = store.snapshot(unit).await.unwrap().stored;
        let get = |k: &str| serde_json::from_str::<String>(&stored[k]).unwrap();
        let is_leader = unit == leader;
        assert_eq!(get("leader"), is_leader.to_string(), "{unit}");
        assert!(
            get("write-remote-unit-bag").starts_with("Err(PermissionDenied"),
            "{unit}: {}",
            get("write-remote-unit-bag")
        );
        assert_eq!(get("write-own-unit-bag"), "Ok(())", "{unit}");
        assert!(
            get("write-remote-app-bag").starts_with("Err(PermissionDenied"),
            "{unit}"
        );
        if is_leader {
            assert_eq!(get("read-own-app-bag"), "Ok(())", "{unit}");
            assert_eq!(get("write-own-app-bag"), "Ok(())", "{unit}");
        } else {
            assert!(
                get("read-own-app-bag").starts_with("Err(PermissionDenied"),
                "{unit}"
            );
            assert_eq!(get("write-own-app-bag"), "Err(NotLeader)", "{unit}");
        }
        assert!(
            get("remote-master").starts_with("Some(\"host=postgresql-0"),
            "{unit}: {}",
            get("remote-master")
        );
    }
    // The allowed writes were committed, and only those.
    let pg = store.snapshot("postgresql/0").await.unwrap();
    let rel = pg.relations.values().next().unwrap();
    assert_eq!(
        rel.unit_bags["probe/0"].get("k").map(String::as_str),
        Some("v")
    );
    assert_eq!(
        rel.unit_bags["probe/1"].get("k").map(String::as_str),
        Some("v")
    );
    assert_eq!(
        rel.app_bags["probe"].get("k").map(String::as_str),
        Some("v")
    );
    assert_eq!(rel.app_bags["postgresql"].get("k"), None);
}
