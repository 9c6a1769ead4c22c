//! The native harness and the host agree: the same charm, state and event give the same
//! output through `charm_sdk::testing::Context` and through the compiled `.wasm`; and the
//! harness refuses the pod specs the host refuses, at the same field (both run the model
//! core's validator).

use charm_sdk::testing::{Context, HookRunner, Relation, State};
use charm_sdk::{Event, RelationEvent};
use charm_tests::{WasmContext, guests, runtime};

/// Discourse's seed hook and PostgreSQL's leader hook, leader and not, on both backends.
#[test]
fn discourse_and_postgresql_give_the_same_output_on_both_backends() {
    let runtime = runtime();
    let db = Relation::new(1, "db", "postgresql")
        .remote_unit("postgresql/0", [("k", "v")])
        .remote_app_data([("master", "host=pg port=5432")]);
    let changed =
        Event::RelationChanged(RelationEvent::new(1, "db", "postgresql").unit("postgresql/0"));
    let discourse_native = Context::<discourse::Discourse>::new();
    let discourse_wasm = WasmContext::new(&runtime, guests::DISCOURSE).expect("the guest loads");
    for leader in [true, false] {
        let state = State::default().leader(leader).relation(db.clone());
        let native = discourse_native.run(changed.clone(), state.clone());
        let wasm = HookRunner::run(&discourse_wasm, changed.clone(), state);
        assert_eq!(native.outcome, wasm.outcome);
        assert_eq!(native.state, wasm.state, "leader: {leader}");
        assert_eq!(native.leadership_refusals, wasm.leadership_refusals);
        assert_eq!(native.state.pod_spec.is_some(), leader);
    }

    let clients = Relation::new(1, "db", "discourse").remote_unit("discourse/0", [("k", "v")]);
    let state = State::default()
        .leader(true)
        .leader_data([
            ("password", "fixed"),
            ("interface.pgsql.password.1", "fixed"),
        ])
        .relation(clients);
    let native = Context::<postgresql::Postgresql>::new().run(Event::ConfigChanged, state.clone());
    let wasm = HookRunner::run(
        &WasmContext::new(&runtime, guests::POSTGRESQL).expect("the guest loads"),
        Event::ConfigChanged,
        state,
    );
    assert_eq!(native.state, wasm.state);
    let master = &native.state.relation_by_id(1).unwrap().local_app_data["master"];
    assert!(
        master.contains("user=juju_discourse password=fixed"),
        "{master}"
    );
}

/// Writes past the host's limits (`charm_model::limits`) get the same verdict natively and
/// in wasm: refused at the call, or the hook over its limit when it returns.
#[test]
fn writes_past_the_limits_get_the_same_verdict_on_both_backends() {
    let runtime = runtime();
    let native = Context::<hostile::Hostile>::new();
    let wasm = WasmContext::new(&runtime, guests::HOSTILE).expect("the guest loads");
    for (behaviour, verdict) in [
        ("huge-status", "the status message is 8388608 bytes"),
        (
            "huge-leader-data",
            "is 8388608 bytes; the limit is 262144 bytes",
        ),
        ("many-keys", "the hook writes more than 1000 keys"),
    ] {
        let state = State::default().leader(true).config("behaviour", behaviour);
        let event = if hostile::LEADER_BEHAVIOURS.contains(&behaviour) {
            Event::LeaderElected
        } else {
            Event::ConfigChanged
        };
        let n = native.run(event.clone(), state.clone());
        let w = HookRunner::run(&wasm, event, state.clone());
        assert_eq!(n.outcome, w.outcome, "{behaviour}");
        assert!(
            format!("{:?}", n.outcome).contains(verdict),
            "{behaviour}: {:?}",
            n.outcome
        );
        assert_eq!(n.state, state, "{behaviour}: nothing applied");
        assert_eq!(w.state, state, "{behaviour}: nothing applied");
    }
}

/// Pod specs the host refuses (the probe's list and more), through the native harness:
/// the same field as the host's validator (`charm_model::podspec`) names.
#[test]
fn the_harness_refuses_pod_specs_as_the_host_does() {
    let specs = [
        r#"{"version": 3, "containers": []}"#,
        r#"{"version": 3, "containers": [{"imageDetails": {"imagePath": "x"}}]}"#,
        r#"{"version": 3, "containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}"#,
        r#"{"version": 3, "containers": [{"name": "a", "image": "x", "colour": "red"}]}"#,
        r#"{"version": 2, "containers": [{"name": "a", "image": "x"}]}"#,
        "version: 3\ncontainers: [{name: A, image: x}]",
        r#"{"version": 3, "containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 0}]}]}"#,
        "version: 3\ncontainers: [{name: a, image: x}]",
    ];
    for spec in specs {
        let host = charm_host::podspec::validate(spec, None)
            .err()
            .map(|e| match e {
                charm_host::podspec::PodSpecError::Spec(f)
                | charm_host::podspec::PodSpecError::K8sResources(f) => f.field,
            });
        let harness = harness_verdict(spec);
        assert_eq!(harness, host, "{spec}");
    }
}

/// The field the native harness names for `spec`, or `None` when it accepts it.
fn harness_verdict(spec: &str) -> Option<String> {
    use charm_sdk::{Charm, HookResult, Metadata, Model};
    thread_local!(static SPEC: std::cell::RefCell<String> = Default::default());
    struct Raw;
    impl Charm for Raw {
        fn metadata() -> Metadata {
            Metadata::new("raw")
        }
        fn handle(model: &Model, _: Event) -> HookResult {
            let spec = SPEC.with(|s| s.borrow().clone());
            let verdict = match model.pod().set_spec_raw(&spec, None) {
                Ok(()) => None,
                Err(charm_sdk::Error::InvalidPodSpec { field, .. }) => Some(field),
                Err(e) => panic!("unexpected {e}"),
            };
            model.stored().set("verdict", &verdict)?;
            Ok(())
        }
    }
    SPEC.with(|s| *s.borrow_mut() = spec.to_string());
    let out = Context::<Raw>::new().run(Event::Start, State::default().leader(true));
    out.state
        .stored_value::<Option<String>>("verdict")
        .expect("the hook recorded its verdict")
}
