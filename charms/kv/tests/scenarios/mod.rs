//! kv's scenarios, each written once against `HookRunner`: `tests/harness.rs` runs them
//! natively, and the workspace's `tests/tests/kv_wasm.rs` runs them against the compiled
//! `kv.wasm` through the host.

use charm_sdk::testing::{Faults, HookRunner, Outcome, Relation, State};
use charm_sdk::{ActionEvent, Event, RelationEvent, Status};

/// Unit 0's cluster relation, with units 1 and 2 joined and their addresses published.
pub fn cluster() -> Relation {
    Relation::peer(1, "cluster")
        .remote_unit(
            "kv/1",
            [("address", "kv-1.kv-endpoints.test.svc.cluster.local:7379")],
        )
        .remote_unit(
            "kv/2",
            [("address", "kv-2.kv-endpoints.test.svc.cluster.local:7379")],
        )
}

fn changed() -> Event {
    Event::RelationChanged(RelationEvent::new(1, "cluster", "kv").unit("kv/1"))
}

const MEMBERS: &str = "kv-0.kv-endpoints.test.svc.cluster.local:7379,kv-1.kv-endpoints.test.svc.cluster.local:7379,kv-2.kv-endpoints.test.svc.cluster.local:7379";

/// The leader publishes the member list to its peers and sets the pod spec with it.
pub fn leader_forms_the_cluster(runner: &dyn HookRunner) {
    let out = runner.run(changed(), State::default().leader(true).relation(cluster()));
    assert_eq!(out.outcome, Outcome::Committed);
    let cluster = out.state.relation_by_id(1).unwrap();
    assert_eq!(cluster.local_app_data["members"], MEMBERS);
    assert_eq!(
        cluster.local_unit_data["address"],
        "kv-0.kv-endpoints.test.svc.cluster.local:7379"
    );
    let spec = out
        .state
        .pod_spec
        .as_ref()
        .expect("a pod spec")
        .typed()
        .unwrap();
    assert_eq!(spec.containers[0].env_config["KV_MEMBERS"], MEMBERS);
    assert_eq!(spec.containers[0].ports[0].container_port, 7379);
    assert_eq!(out.state.unit_status, Status::active("3 members"));
    assert_eq!(
        out.state
            .stored_value::<Vec<String>>("members")
            .unwrap()
            .len(),
        3
    );
}

/// A follower reads the member list the leader published, and writes nothing leader-only.
pub fn follower_reads_the_members(runner: &dyn HookRunner) {
    let state = State::default().relation(cluster().local_app_data([("members", MEMBERS)]));
    let out = runner.run(changed(), state);
    assert_eq!(out.outcome, Outcome::Committed);
    assert_eq!(out.leadership_refusals, 0);
    assert!(out.state.pod_spec.is_none());
    assert_eq!(out.state.unit_status, Status::active("3 members"));
}

/// config-changed before the peer relation exists is deferred, and runs again first in
/// the next hook, once the relation is there.
pub fn config_waits_for_the_cluster(runner: &dyn HookRunner) {
    let out = runner.run(Event::ConfigChanged, State::default().leader(true));
    assert_eq!(out.outcome, Outcome::Committed);
    assert_eq!(out.state.deferred(), vec![Event::ConfigChanged]);
    assert_eq!(
        out.state.unit_status,
        Status::waiting("waiting for the cluster relation")
    );

    let next = out.state.relation(cluster());
    let created = Event::RelationCreated(RelationEvent::new(1, "cluster", "kv"));
    let out = runner.run(created, next);
    assert_eq!(out.outcome, Outcome::Committed);
    assert!(out.state.deferred().is_empty());
    assert!(out.state.pod_spec.is_some());
}

/// `put` on the leader stores the value for every unit to read, counts the write in its
/// stored state, and reports what it did.
pub fn put_on_the_leader(runner: &dyn HookRunner) {
    let put = ActionEvent::new("put")
        .param("key", "colour")
        .param("value", "blue");
    let state = State::default()
        .leader(true)
        .relation(cluster())
        .stored("writes-served", &41u64);
    let out = runner.run(Event::Action(put), state);
    assert_eq!(out.outcome, Outcome::Committed);
    let action = out.action.expect("action output");
    assert_eq!(action.failure, None);
    assert_eq!(action.results["key"], "colour");
    assert_eq!(action.results["stored-by"], "kv/0");
    assert_eq!(action.results["writes-served"], "42");
    assert_eq!(action.log, ["storing colour"]);
    let cluster = out.state.relation_by_id(1).unwrap();
    assert_eq!(cluster.local_app_data["data.colour"], "blue");
    assert_eq!(out.state.stored_value::<u64>("writes-served"), Some(42));
}

/// `put` on a follower fails the action, and writes nothing.
pub fn put_on_a_follower_fails(runner: &dyn HookRunner) {
    let put = ActionEvent::new("put")
        .param("key", "colour")
        .param("value", "blue");
    let state = State::default().relation(cluster());
    let out = runner.run(Event::Action(put), state.clone());
    assert_eq!(out.outcome, Outcome::Committed);
    let failure = out
        .action
        .expect("action output")
        .failure
        .expect("a failure");
    assert!(failure.contains("leader"), "{failure}");
    assert_eq!(out.state, state);
}

/// `get` reads the shared bag on any unit; a missing key fails the action.
pub fn get_on_any_unit(runner: &dyn HookRunner) {
    let state = State::default().relation(cluster().local_app_data([("data.colour", "blue")]));
    let get = ActionEvent::new("get").param("key", "colour");
    let out = runner.run(Event::Action(get), state.clone());
    assert_eq!(out.action.unwrap().results["value"], "blue");

    let missing = ActionEvent::new("get").param("key", "size");
    let out = runner.run(Event::Action(missing), state);
    assert_eq!(
        out.action.unwrap().failure.as_deref(),
        Some("no key \"size\"")
    );
}

/// Bad parameters refuse the run before the hook starts, as the host refuses it: nothing is
/// applied, and the refusal names the parameter at fault.
pub fn bad_params_apply_nothing(runner: &dyn HookRunner) {
    let state = State::default().leader(true).relation(cluster());
    let missing = ActionEvent::new("put").param("key", "colour");
    let undeclared = ActionEvent::new("get")
        .param("key", "colour")
        .param("colour", "blue");
    let mistyped = ActionEvent::new("get").param("key", 7);
    for (run, named) in [
        (missing, "value"),
        (undeclared, "colour"),
        (mistyped, "key"),
    ] {
        let out = runner.run(Event::Action(run), state.clone());
        match &out.outcome {
            Outcome::Refused(why) => assert!(why.contains(named), "{why}"),
            other => panic!("{named}: {other:?}"),
        }
        assert_eq!(out.state, state);
        assert_eq!(out.action, None, "the hook ran");
    }
}

/// The lease moves to another unit while the leader's hook runs: the hook is not refused
/// anything (it keeps its answer), and the store refuses its commit, which applies nothing.
pub fn lease_lost_mid_hook_is_fenced(runner: &dyn HookRunner) {
    let state = State::default().leader(true).relation(cluster());
    let faults = Faults {
        lease_lost_after: Some(2),
        ..Default::default()
    };
    let out = runner.run_with(changed(), state.clone(), &faults);
    assert_eq!(out.outcome, Outcome::Fenced);
    assert_eq!(out.leadership_refusals, 0);
    assert_eq!(out.state, state);
}

/// The lease store is down for longer than the guarantee: the leader's hook is stopped and
/// applies nothing.
pub fn lease_store_outage_interrupts(runner: &dyn HookRunner) {
    let state = State::default().leader(true).relation(cluster());
    let faults = Faults {
        lease_store_down_after: Some(3),
        ..Default::default()
    };
    let out = runner.run_with(changed(), state.clone(), &faults);
    assert_eq!(out.outcome, Outcome::Interrupted);
    assert_eq!(out.state, state);
}

/// A scenario: arrange, run and assert through whichever backend it is given.
pub type Scenario = fn(&dyn HookRunner);

/// Every scenario, by name, for a runner to go through.
pub const ALL: &[(&str, Scenario)] = &[
    ("leader_forms_the_cluster", leader_forms_the_cluster),
    ("follower_reads_the_members", follower_reads_the_members),
    ("config_waits_for_the_cluster", config_waits_for_the_cluster),
    ("put_on_the_leader", put_on_the_leader),
    ("put_on_a_follower_fails", put_on_a_follower_fails),
    ("get_on_any_unit", get_on_any_unit),
    ("bad_params_apply_nothing", bad_params_apply_nothing),
    (
        "lease_lost_mid_hook_is_fenced",
        lease_lost_mid_hook_is_fenced,
    ),
    (
        "lease_store_outage_interrupts",
        lease_store_outage_interrupts,
    ),
];
