//! The template's tests: arrange a state, run one event, assert on the state after. Each
//! scenario is written once against `HookRunner` and runs twice: natively (`Context`) and
//! against the crate's own compiled `.wasm` through the host (`charm_test::WasmContext`).

use charm_sdk::testing::{Context, HookRunner, Relation, State};
use charm_sdk::{ActionEvent, Error, Event, RelationEvent, Status};
use template::Template;

fn db_changed() -> Event {
    Event::RelationChanged(RelationEvent::new(1, "db", "postgresql").unit("postgresql/0"))
}

fn waits_for_the_database(runner: &dyn HookRunner) {
    let out = runner.run(Event::ConfigChanged, State::default());
    assert_eq!(
        out.state.unit_status,
        Status::waiting("waiting for database")
    );
}

fn leader_sets_the_pod_spec_from_config_and_relation(runner: &dyn HookRunner) {
    let db = Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]);
    let state = State::default()
        .leader(true)
        .config("greeting", "bonjour")
        .relation(db);
    let out = runner.run(db_changed(), state);
    assert!(out.committed(), "{:?}", out.outcome);
    let spec = out.state.pod_spec.unwrap().typed().unwrap();
    assert_eq!(spec.containers[0].env_config["GREETING"], "bonjour");
    assert_eq!(spec.containers[0].env_config["DATABASE"], "host=pg");
    assert_eq!(out.state.unit_status, Status::active(""));
}

fn followers_set_no_pod_spec(runner: &dyn HookRunner) {
    let db = Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]);
    let out = runner.run(db_changed(), State::default().relation(db));
    assert!(out.committed(), "{:?}", out.outcome);
    assert!(out.state.pod_spec.is_none());
    assert_eq!(out.leadership_refusals, 0);
}

fn greet_answers_with_the_default_greeting(runner: &dyn HookRunner) {
    let out = runner.run(Event::Action(ActionEvent::new("greet")), State::default());
    assert_eq!(out.action.unwrap().results["greeting"], "hello");
}

/// A scenario: it runs a hook on the runner it is given and asserts on the output.
type Scenario = fn(&dyn HookRunner);

/// Every scenario, by name.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("waits_for_the_database", waits_for_the_database),
    (
        "leader_sets_the_pod_spec_from_config_and_relation",
        leader_sets_the_pod_spec_from_config_and_relation,
    ),
    ("followers_set_no_pod_spec", followers_set_no_pod_spec),
    (
        "greet_answers_with_the_default_greeting",
        greet_answers_with_the_default_greeting,
    ),
];

#[test]
fn scenarios_pass_natively() {
    for (name, scenario) in SCENARIOS {
        eprintln!("scenario {name}");
        scenario(&Context::<Template>::new());
    }
}

/// Builds this crate for wasm32-wasip2 (as `charm-host build` does) and runs the same
/// scenarios against the module.
#[test]
fn scenarios_pass_against_the_wasm() {
    let wasm = charm_test::WasmContext::build(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("building the template's module: {e}"));
    assert_eq!(wasm.metadata().name, "template");
    for (name, scenario) in SCENARIOS {
        eprintln!("scenario {name} in wasm");
        scenario(&wasm);
    }
}

#[test]
fn sdk_errors_are_plain_values() {
    // The SDK's errors are plain values: a test can assert on them directly.
    assert_eq!(Error::NotLeader.to_string(), "this unit is not the leader");
}
