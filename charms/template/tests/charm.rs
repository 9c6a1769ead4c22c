//! The template's tests: arrange a state, run one event, assert on the state after.

use charm_sdk::testing::{Context, Relation, State};
use charm_sdk::{ActionEvent, Error, Event, RelationEvent, Status};
use template::Template;

fn db_changed() -> Event {
    Event::RelationChanged(RelationEvent::new(1, "db", "postgresql").unit("postgresql/0"))
}

#[test]
fn waits_for_the_database() {
    let out = Context::<Template>::new().run(Event::ConfigChanged, State::default());
    assert_eq!(
        out.state.unit_status,
        Status::waiting("waiting for database")
    );
}

#[test]
fn leader_sets_the_pod_spec_from_config_and_relation() {
    let db = Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]);
    let state = State::default()
        .leader(true)
        .config("greeting", "bonjour")
        .relation(db);
    let out = Context::<Template>::new().run(db_changed(), state);
    assert!(out.committed());
    let spec = out.state.pod_spec.unwrap().typed().unwrap();
    assert_eq!(spec.containers[0].env_config["GREETING"], "bonjour");
    assert_eq!(spec.containers[0].env_config["DATABASE"], "host=pg");
    assert_eq!(out.state.unit_status, Status::active(""));
}

#[test]
fn followers_set_no_pod_spec() {
    let db = Relation::new(1, "db", "postgresql").remote_app_data([("master", "host=pg")]);
    let out = Context::<Template>::new().run(db_changed(), State::default().relation(db));
    assert!(out.state.pod_spec.is_none());
    assert_eq!(out.leadership_refusals, 0);
}

#[test]
fn greet_answers_with_the_default_greeting() {
    let out =
        Context::<Template>::new().run(Event::Action(ActionEvent::new("greet")), State::default());
    assert_eq!(out.action.unwrap().results["greeting"], "hello");
}

#[test]
fn sdk_calls_outside_a_hook_are_refused_as_the_host_would() {
    // The SDK's errors are plain values: a test can assert on them directly.
    assert_eq!(Error::NotLeader.to_string(), "this unit is not the leader");
}
