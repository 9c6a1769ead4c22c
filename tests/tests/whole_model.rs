//! Whole models run natively with `charm_sdk::testing::Deployment`: applications deployed,
//! related and changed through the model core's operations, every follow-up hook run until
//! idle, and any unit's state read after. Discourse with PostgreSQL (the seed), and kv's
//! peers with its actions and a departing unit.

use charm_sdk::testing::{Deployment, Outcome};
use charm_sdk::{ActionEvent, Status};
use discourse::Discourse;
use kv::Kv;
use postgresql::Postgresql;

fn seed() -> Deployment {
    let mut model = Deployment::new();
    model
        .deploy_with::<Discourse, _, _>(
            "discourse",
            3,
            [("external_hostname", "forum.example.com")],
        )
        .unwrap();
    model.deploy::<Postgresql>("postgresql", 1).unwrap();
    model.relate("discourse", "postgresql").unwrap();
    model
}

fn all_committed(model: &Deployment) {
    for run in model.ran() {
        assert_eq!(run.outcome, Outcome::Committed, "{run:?}");
    }
}

#[test]
fn discourse_gets_postgresqls_connection_string_in_its_pod_spec() {
    let mut model = seed();
    let ran = model.run_until_idle().to_vec();
    all_committed(&model);

    assert_eq!(model.leader("discourse").as_deref(), Some("discourse/0"));
    assert_eq!(model.leader("postgresql").as_deref(), Some("postgresql/0"));
    for unit in ["discourse/0", "discourse/1", "discourse/2", "postgresql/0"] {
        let state = model.unit(unit);
        assert!(
            matches!(state.unit_status, Status::Active(_)),
            "{unit}: {:?}",
            state.unit_status
        );
    }
    // What a follower reads of PostgreSQL's application bag is what the leader put in
    // the application's pod spec.
    let follower = model.unit("discourse/2");
    assert!(!follower.leader);
    let master = follower.relations[0].remote_app_data["master"].clone();
    assert!(
        master.starts_with("host=postgresql-0") && master.contains("dbname=discourse"),
        "{master}"
    );
    let spec = follower.pod_spec.expect("discourse has a pod spec");
    assert_eq!(
        spec.spec["containers"][0]["envConfig"]["DISCOURSE_DB"],
        master.as_str()
    );
    assert_eq!(spec.revision, 1, "an unchanged spec makes no new revision");

    // Juju's order on each unit: install first; leader-elected on the leader only, right
    // after install; relation-created before any other hook of the relation.
    for unit in ["discourse/0", "discourse/1", "postgresql/0"] {
        let hooks: Vec<&str> = ran
            .iter()
            .filter(|r| r.unit == unit)
            .map(|r| r.hook.as_str())
            .collect();
        assert_eq!(hooks[0], "install", "{unit}: {hooks:?}");
        let leads = unit.ends_with("/0");
        assert_eq!(hooks[1] == "leader-elected", leads, "{unit}: {hooks:?}");
        let created = hooks
            .iter()
            .position(|h| *h == "db-relation-created")
            .unwrap();
        let first_db = hooks
            .iter()
            .position(|h| h.starts_with("db-relation"))
            .unwrap();
        assert_eq!(created, first_db, "{unit}: {hooks:?}");
    }
    for run in ran.iter().filter(|r| r.hook == "leader-elected") {
        assert!(run.leader, "{run:?}");
    }
}

#[test]
fn a_config_change_reaches_the_pod_spec_and_a_new_leader_changes_nothing() {
    let mut model = seed();
    model.run_until_idle();
    model
        .config("discourse", "external_hostname", "talk.example.com")
        .unwrap();
    let ran = model.run_until_idle().to_vec();
    let changed: Vec<&str> = ran
        .iter()
        .filter(|r| r.hook == "config-changed")
        .map(|r| r.unit.as_str())
        .collect();
    assert_eq!(changed, ["discourse/0", "discourse/1", "discourse/2"]);
    let spec = model.unit("discourse/1").pod_spec.unwrap();
    assert_eq!(spec.revision, 2);
    assert_eq!(
        spec.spec["containers"][0]["envConfig"]["DISCOURSE_HOSTNAME"],
        "talk.example.com"
    );

    // A new term: the new leader runs leader-elected and sets the same spec again, which
    // makes no new revision.
    model.set_leader("discourse/1").unwrap();
    let ran = model.run_until_idle().to_vec();
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(
        (ran[0].unit.as_str(), ran[0].hook.as_str()),
        ("discourse/1", "leader-elected")
    );
    assert!(ran[0].leader);
    assert!(!model.unit("discourse/0").leader);
    assert_eq!(model.unit("discourse/0").pod_spec.unwrap().revision, 2);
    all_committed(&model);
}

#[test]
fn kvs_peers_form_a_cluster_serve_actions_and_see_a_unit_leave() {
    let mut model = Deployment::new();
    model.deploy::<Kv>("kv", 3).unwrap();
    model.run_until_idle();
    all_committed(&model);
    let members = "kv-0.kv-endpoints.test.svc.cluster.local:7379,kv-1.kv-endpoints.test.svc.cluster.local:7379,kv-2.kv-endpoints.test.svc.cluster.local:7379";
    for unit in ["kv/0", "kv/1", "kv/2"] {
        let state = model.unit(unit);
        assert_eq!(state.unit_status, Status::active("3 members"), "{unit}");
        assert_eq!(
            state.relations[0].local_app_data["members"], members,
            "{unit}"
        );
        assert_eq!(
            state.stored_value::<Vec<String>>("members").unwrap().len(),
            3
        );
    }

    // put through the leader, get from another unit: the peers' application bag.
    let put = ActionEvent::new("put")
        .param("key", "colour")
        .param("value", "blue");
    let put = model.run_action("kv/0", put).unwrap();
    let get = model
        .run_action("kv/2", ActionEvent::new("get").param("key", "colour"))
        .unwrap();
    let on_follower = model
        .run_action(
            "kv/1",
            ActionEvent::new("put")
                .param("key", "k")
                .param("value", "v"),
        )
        .unwrap();
    model.run_until_idle();
    let put = model.action(put).unwrap();
    assert_eq!(put.results["stored-by"], "kv/0", "{put:?}");
    assert_eq!(model.action(get).unwrap().results["value"], "blue");
    let refused = model.action(on_follower).unwrap();
    assert!(
        refused.failure.as_deref().unwrap_or("").contains("leader"),
        "{refused:?}"
    );
    // A parameter the charm does not declare is refused before anything is queued.
    let err = model
        .run_action("kv/0", ActionEvent::new("get").param("ky", "colour"))
        .unwrap_err();
    assert!(err.to_string().contains("ky"), "{err}");

    // A unit leaves: the others see it depart and the leader shrinks the cluster.
    model.remove_unit("kv/2").unwrap();
    let ran = model.run_until_idle().to_vec();
    all_committed(&model);
    assert_eq!(model.units("kv"), ["kv/0", "kv/1"]);
    assert!(
        ran.iter()
            .any(|r| r.unit == "kv/0" && r.hook == "cluster-relation-departed"),
        "{ran:?}"
    );
    for unit in ["kv/0", "kv/1"] {
        assert_eq!(
            model.unit(unit).unit_status,
            Status::active("2 members"),
            "{unit}"
        );
    }
}
