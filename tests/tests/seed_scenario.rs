//! The seed's scenario end to end: Discourse (3 units) related to PostgreSQL (1 unit).
//! Exactly one leader per application; Discourse's pod spec carries PostgreSQL's
//! connection string; non-leaders never set one; no hook is refused for leadership.

use std::path::Path;
use std::time::Duration;

use charm_host::bundle::Bundle;
use charm_host::model::StatusKind;
use charm_tests::{controller, fast_config, guests, runtime, settle};

fn demo_bundle(dir: &Path) -> std::path::PathBuf {
    std::fs::copy(guests::DISCOURSE, dir.join("discourse.wasm")).unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.join("postgresql.wasm")).unwrap();
    let path = dir.join("bundle.yaml");
    std::fs::write(
        &path,
        r#"bundle: kubernetes
applications:
  discourse:
    charm: discourse.wasm
    num_units: 3
  postgresql:
    charm: postgresql.wasm
    num_units: 1
relations:
  - ["discourse:db", "postgresql:db"]
"#,
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discourse_leader_sets_the_pod_spec_with_postgresqls_connection_string() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let bundle = Bundle::load(&demo_bundle(dir.path()), &runtime).unwrap();
    let (controller, store) = controller(fast_config());
    bundle.deploy(&controller).await.unwrap();
    settle(&controller, Duration::from_secs(60)).await;

    let status = store.status().await.unwrap();
    for app in ["discourse", "postgresql"] {
        let leaders: Vec<_> = status
            .units
            .iter()
            .filter(|u| u.name.starts_with(app) && u.leader)
            .collect();
        assert_eq!(
            leaders.len(),
            1,
            "{app} must have exactly one leader: {status:?}"
        );
    }
    for unit in &status.units {
        assert_eq!(unit.status.kind, StatusKind::Active, "{unit:?}");
    }

    let master = {
        let pg = store.snapshot("discourse/0").await.unwrap();
        let rel = pg.relations.values().next().expect("discourse is related");
        rel.app_bags["postgresql"]["master"].clone()
    };
    assert!(master.starts_with("host=postgresql-0"), "{master}");
    // The pgsql interface, both sides through charm-pgsql: Discourse asked for its
    // database; PostgreSQL made it a user of its own and echoed the request, which is
    // what told Discourse's units the master was ready.
    assert!(
        master.contains("dbname=discourse user=juju_discourse password="),
        "{master}"
    );
    {
        let pg = store.snapshot("postgresql/0").await.unwrap();
        let rel = pg.relations.values().next().unwrap();
        let published = &rel.app_bags["postgresql"];
        assert_eq!(published["database"], "discourse");
        assert_eq!(published["user"], "juju_discourse");
        assert_eq!(
            published["allowed-units"],
            "discourse/0 discourse/1 discourse/2"
        );
        assert_eq!(rel.app_bags["discourse"]["database"], "discourse");
        for unit in ["discourse/0", "discourse/1", "discourse/2"] {
            assert_eq!(
                rel.unit_bags[unit]["database"], "discourse",
                "{unit} mirrors"
            );
        }
    }
    let spec = store
        .pod_spec("discourse")
        .await
        .unwrap()
        .expect("discourse has a pod spec");
    assert_eq!(
        spec.spec["containers"][0]["envConfig"]["DISCOURSE_DB"],
        master.as_str()
    );
    assert_eq!(spec.revision, 1, "an unchanged spec makes no new revision");

    let history = controller.history();
    let discourse_leader = status
        .units
        .iter()
        .find(|u| u.name.starts_with("discourse") && u.leader)
        .unwrap();
    for run in history.iter().filter(|r| r.pod_spec_revision.is_some()) {
        assert!(
            run.leader,
            "a pod spec was committed by a non-leader hook: {run:?}"
        );
    }
    for run in &history {
        assert!(
            !run.refused_not_leader,
            "a hook was refused for leadership: {run:?}"
        );
        assert_eq!(run.outcome, "ok", "{run:?}");
    }
    // Juju's order on the leader: install, leader-elected, config-changed, start.
    let first: Vec<&str> = history
        .iter()
        .filter(|r| r.unit == discourse_leader.name)
        .map(|r| r.hook.as_str())
        .take(4)
        .collect();
    assert_eq!(
        first,
        ["install", "leader-elected", "config-changed", "start"]
    );
    // Every discourse unit heard of the database.
    for unit in ["discourse/0", "discourse/1", "discourse/2"] {
        assert!(
            history
                .iter()
                .any(|r| r.unit == unit && r.hook == "db-relation-changed"),
            "{unit} ran no db-relation-changed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_bundle_is_refused_with_its_line_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = demo_bundle(dir.path());
    let runtime = runtime();
    let good = std::fs::read_to_string(&path).unwrap();
    let cases = [
        (
            good.replace("num_units: 1", "num_units: 1\n    colour: red"),
            ":9:",
            "unknown key `colour` in application postgresql",
        ),
        (
            good.replace("postgresql.wasm", "missing.wasm"),
            ":7:",
            "does not exist",
        ),
        (
            good.replace("postgresql:db\"", "postgresql:nope\""),
            ":10:",
            "no endpoint \"nope\"",
        ),
        (
            good.replace("postgresql:db\"", "discourse:db\""),
            ":10:",
            "an application is not related to itself",
        ),
        (
            good.replace(
                "num_units: 3",
                "num_units: 3\n    options:\n      external_hostname: 5",
            ),
            ":7:",
            "must be a string",
        ),
    ];
    for (text, line, reason) in cases {
        let err = Bundle::parse(&path, &text, &runtime)
            .err()
            .expect("the bundle must be refused")
            .to_string();
        assert!(
            err.contains(line) && err.contains(reason),
            "expected {line} and {reason:?} in: {err}"
        );
    }
}
