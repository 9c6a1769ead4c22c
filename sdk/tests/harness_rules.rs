//! The native harness applies the host's rules: Juju's relation data access, leader-only
//! writes, all-or-nothing hooks, pod spec validation, config defaults, defer and actions.

use std::cell::RefCell;

use charm_sdk::pod::{Container, K8sResources, PodSpec, Secret};
use charm_sdk::testing::{Context, Outcome, Relation, State};
use charm_sdk::{
    ActionEvent, ActionParam, Charm, ConfigValue, Error, Event, HookError, HookResult, Metadata,
    Model, RelationEvent, Status,
};

type Probe = fn(&Model, &Event) -> HookResult;

thread_local! {
    /// What the test charm does in its hook: each test sets its own.
    static BODY: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

/// A charm whose hook is the test's closure.
struct Scripted;

impl Charm for Scripted {
    fn metadata() -> Metadata {
        Metadata::new("scripted")
            .requires("db", "pgsql")
            .peers("cluster", "scripted-peers")
            .string_option("image", Some("nginx:1.25"), "")
            .int_option("port", None, "")
            .float_option("ratio", Some(0.5), "")
            .action("dump", "")
            .action_with(
                "resize",
                "",
                [
                    ActionParam::int("replicas", "").required(),
                    ActionParam::boolean("force", "").default(false),
                ],
            )
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        let body = BODY.with(|b| b.borrow().expect("the test set a body"));
        body(model, &event)
    }
}

fn run(body: Probe, event: Event, state: State) -> charm_sdk::testing::Output {
    BODY.with(|b| *b.borrow_mut() = Some(body));
    Context::<Scripted>::new().run(event, state)
}

fn db() -> Relation {
    Relation::new(1, "db", "postgresql")
        .remote_unit("postgresql/0", [("host", "10.0.0.5")])
        .remote_app_data([("master", "host=10.0.0.5")])
}

fn db_changed() -> Event {
    Event::RelationChanged(RelationEvent::new(1, "db", "postgresql").unit("postgresql/0"))
}

/// Records a call's result in stored state, so the test can read it back.
fn record<T: std::fmt::Debug>(model: &Model, key: &str, value: T) -> HookResult {
    model.stored().set(key, &format!("{value:?}"))?;
    Ok(())
}

fn recorded(out: &charm_sdk::testing::Output, key: &str) -> String {
    out.state
        .stored_value::<String>(key)
        .unwrap_or_else(|| panic!("nothing recorded under {key}: {:?}", out.outcome))
}

#[test]
fn a_follower_writes_its_own_unit_bag_and_reads_the_remote_bags() {
    let out = run(
        |model, _| {
            let db = model.relation("db")?.expect("related");
            db.local_unit_data()?.set("database", "web")?;
            record(
                model,
                "remote-unit",
                db.unit_data("postgresql/0")?.get("host").map(str::to_owned),
            )?;
            record(
                model,
                "remote-app",
                db.remote_app_data()?.get("master").map(str::to_owned),
            )?;
            record(
                model,
                "write-remote-unit",
                db.unit_data("postgresql/0")?.set("k", "v"),
            )?;
            record(
                model,
                "write-remote-app",
                db.remote_app_data()?.set("k", "v"),
            )?;
            record(model, "read-own-app", db.local_app_data().map(|_| ()))?;
            record(
                model,
                "unknown-unit",
                db.unit_data("postgresql/9").map(|_| ()),
            )?;
            Ok(())
        },
        db_changed(),
        State::default().relation(db()),
    );
    assert!(out.committed());
    assert_eq!(
        out.state.relation_by_id(1).unwrap().local_unit_data["database"],
        "web"
    );
    assert_eq!(recorded(&out, "remote-unit"), r#"Some("10.0.0.5")"#);
    assert_eq!(recorded(&out, "remote-app"), r#"Some("host=10.0.0.5")"#);
    assert!(recorded(&out, "write-remote-unit").contains("PermissionDenied"));
    assert!(recorded(&out, "write-remote-app").contains("PermissionDenied"));
    assert!(recorded(&out, "read-own-app").contains("PermissionDenied"));
    assert!(recorded(&out, "unknown-unit").contains("PermissionDenied"));
}

#[test]
fn leader_only_writes_are_refused_to_a_follower_and_accepted_from_the_leader() {
    let body: Probe = |model, _| {
        let spec = PodSpec::new().container(Container::new("web", "nginx"));
        record(model, "pod", model.pod().set_spec(&spec))?;
        record(model, "leader-set", model.leader_data().set("k", "v"))?;
        record(
            model,
            "app-status",
            model.app().set_status(Status::active("up")),
        )?;
        let peers = model.relation("cluster")?.expect("peers");
        record(
            model,
            "read-peer-app",
            peers
                .local_app_data()
                .map(|b| b.get("members").map(str::to_owned)),
        )?;
        record(
            model,
            "write-peer-app",
            peers.local_app_data()?.set("members", "two"),
        )?;
        Ok(())
    };
    let peers = Relation::peer(2, "cluster").local_app_data([("members", "one")]);
    let follower = run(body, Event::Start, State::default().relation(peers.clone()));
    assert_eq!(recorded(&follower, "pod"), "Err(NotLeader)");
    assert_eq!(recorded(&follower, "leader-set"), "Err(NotLeader)");
    assert_eq!(recorded(&follower, "app-status"), "Err(NotLeader)");
    assert_eq!(recorded(&follower, "read-peer-app"), r#"Ok(Some("one"))"#);
    assert_eq!(recorded(&follower, "write-peer-app"), "Err(NotLeader)");
    assert_eq!(follower.leadership_refusals, 4);
    assert!(follower.state.pod_spec.is_none());

    let leader = run(
        body,
        Event::Start,
        State::default().leader(true).relation(peers),
    );
    assert_eq!(leader.leadership_refusals, 0);
    assert_eq!(leader.state.pod_spec.as_ref().unwrap().revision, 1);
    assert_eq!(leader.state.leader_data["k"], "v");
    assert_eq!(leader.state.app_status, Status::active("up"));
    assert_eq!(
        leader.state.relation_by_id(2).unwrap().local_app_data["members"],
        "two"
    );
}

#[test]
fn an_error_or_a_panic_applies_nothing_but_keeps_the_logs() {
    let failing: Probe = |model, _| {
        model.stored().set("written", &true)?;
        model
            .unit()
            .set_status(Status::active("must not be applied"))?;
        model.leader_data().set("written", "yes")?;
        charm_sdk::log::warning("about to fail");
        Err(HookError::msg("deliberate failure"))
    };
    let state = State::default().leader(true);
    let out = run(failing, Event::Start, state.clone());
    assert_eq!(out.outcome, Outcome::Failed("deliberate failure".into()));
    assert_eq!(out.state, state);
    assert_eq!(out.logs[0].message, "about to fail");

    let panicking: Probe = |model, _| {
        model.stored().set("written", &true)?;
        panic!("deliberate panic")
    };
    let out = run(panicking, Event::Start, state.clone());
    assert_eq!(out.outcome, Outcome::Panicked("deliberate panic".into()));
    assert_eq!(out.state, state);
}

#[test]
fn invalid_pod_specs_are_refused_naming_the_field() {
    let out = run(
        |model, _| {
            let unnamed = PodSpec::new().container(Container::new("", "nginx"));
            record(model, "unnamed", model.pod().set_spec(&unnamed))?;
            record(model, "empty", model.pod().set_spec(&PodSpec::new()))?;
            let bad_resources = r#"{"kubernetesResources": {"deployments": []}}"#;
            let spec = PodSpec::new()
                .container(Container::new("web", "nginx"))
                .to_json();
            record(
                model,
                "resources",
                model.pod().set_spec_raw(&spec, Some(bad_resources)),
            )?;
            Ok(())
        },
        Event::Start,
        State::default().leader(true),
    );
    assert!(recorded(&out, "unnamed").contains(r#"field: "containers[0].name""#));
    assert!(recorded(&out, "empty").contains(r#"field: "containers""#));
    assert!(recorded(&out, "resources").contains("InvalidK8sResources"));
    assert!(out.state.pod_spec.is_none());
}

#[test]
fn pod_spec_revisions_grow_only_when_the_spec_changes() {
    let body: Probe = |model, _| {
        let image: String = model.config().get("image")?;
        let spec = PodSpec::new().container(Container::new("web", image));
        let resources = K8sResources::new().secret(Secret::new("tls").string_data("crt", "x"));
        model.pod().set_spec_with_resources(&spec, &resources)?;
        Ok(())
    };
    let first = run(body, Event::ConfigChanged, State::default().leader(true));
    let same = run(body, Event::ConfigChanged, first.state.clone());
    assert_eq!(same.state.pod_spec.as_ref().unwrap().revision, 1);
    let changed = run(
        body,
        Event::ConfigChanged,
        same.state.config("image", "nginx:1.27"),
    );
    let kept = changed.state.pod_spec.unwrap();
    assert_eq!(kept.revision, 2);
    assert_eq!(
        kept.typed().unwrap().containers[0].image_details.image_path,
        "nginx:1.27"
    );
    assert_eq!(kept.resources().unwrap().unwrap().secrets[0].name, "tls");
}

#[test]
fn config_reads_settings_over_declared_defaults() {
    let out = run(
        |model, _| {
            let config = model.config();
            record(model, "image", config.get::<String>("image"))?;
            record(model, "port", config.get_opt::<i64>("port"))?;
            record(model, "ratio", config.get::<f64>("ratio"))?;
            record(model, "wrong-type", config.get::<bool>("image"))?;
            record(model, "undeclared", config.get::<String>("colour"))?;
            record(model, "all", config.all().len())?;
            Ok(())
        },
        Event::ConfigChanged,
        State::default().config("port", 8080).config("ratio", 2),
    );
    assert_eq!(recorded(&out, "image"), r#"Ok("nginx:1.25")"#);
    assert_eq!(recorded(&out, "port"), "Ok(Some(8080))");
    // An int setting of a float option reads as a float, as Juju accepts it.
    assert_eq!(recorded(&out, "ratio"), "Ok(2.0)");
    assert!(recorded(&out, "wrong-type").contains("ConfigType"));
    assert!(recorded(&out, "undeclared").contains("UnknownConfigOption"));
    assert_eq!(recorded(&out, "all"), "3");
}

#[test]
fn a_deferred_event_runs_again_first_until_it_is_not_deferred() {
    // Defers config-changed until the db relation exists.
    let body: Probe = |model, event| {
        let seen: Vec<String> = model.stored().get("seen")?.unwrap_or_default();
        let mut seen = seen;
        seen.push(event.hook_name());
        model.stored().set("seen", &seen)?;
        if *event == Event::ConfigChanged && model.relation("db")?.is_none() {
            model.defer();
        }
        Ok(())
    };
    let out = run(body, Event::ConfigChanged, State::default());
    assert_eq!(out.state.deferred(), [Event::ConfigChanged]);

    let out = run(body, Event::UpdateStatus, out.state);
    assert_eq!(out.state.deferred(), [Event::ConfigChanged]);

    let related = out.state.relation(db());
    let out = run(body, db().changed(Some("postgresql/0")), related);
    assert!(out.state.deferred().is_empty());
    let seen: Vec<String> = out.state.stored_value("seen").unwrap();
    assert_eq!(
        seen,
        [
            "config-changed",
            "config-changed",
            "update-status",
            "config-changed",
            "db-relation-changed"
        ]
    );
}

#[test]
fn a_failed_hook_defers_nothing_and_actions_are_never_deferred() {
    let deferring_failure: Probe = |model, _| {
        model.defer();
        Err(HookError::msg("no"))
    };
    let out = run(deferring_failure, Event::ConfigChanged, State::default());
    assert!(out.state.deferred().is_empty());

    let deferring_action: Probe = |model, _| {
        model.defer();
        Ok(())
    };
    let out = run(
        deferring_action,
        Event::Action(ActionEvent::new("dump")),
        State::default(),
    );
    assert!(out.committed());
    assert!(out.state.deferred().is_empty());
}

#[test]
fn action_results_keys_follow_juju_and_failures_are_reported() {
    let out = run(
        |model, event| {
            let Event::Action(action) = event else {
                unreachable!()
            };
            record(model, "bad-key", action.set_result("Bad_Key", "x"))?;
            record(model, "bad-part", action.set_result("disk.Free", "x"))?;
            action.set_results([("size", "42"), ("unit", "MiB")])?;
            // A dot nests a key, as with Juju's action-set.
            action.set_result("disk.free", "3")?;
            action.fail("disk full");
            Ok(())
        },
        Event::Action(ActionEvent::new("dump")),
        State::default(),
    );
    assert!(recorded(&out, "bad-key").contains("InvalidArgument"));
    let bad_part = recorded(&out, "bad-part");
    assert!(bad_part.contains(r#"part \"Free\""#), "{bad_part}");
    let action = out.action.clone().unwrap();
    assert_eq!(action.results.len(), 3);
    assert_eq!(action.results["disk.free"], "3");
    assert_eq!(action.failure.as_deref(), Some("disk full"));
    // A failed action still commits its hook's writes.
    assert!(out.committed());
}

#[test]
fn the_unit_cannot_set_an_error_status() {
    let out = run(
        |model, _| {
            record(
                model,
                "error",
                model.unit().set_status(Status::Error("x".into())),
            )?;
            model.unit().set_workload_version("1.2");
            Ok(())
        },
        Event::Start,
        State::default(),
    );
    assert!(recorded(&out, "error").contains("InvalidArgument"));
    assert_eq!(out.state.workload_version.as_deref(), Some("1.2"));
}

#[test]
#[should_panic(expected = "endpoint \"website\" is not declared")]
fn a_state_the_charm_cannot_have_is_refused() {
    run(
        |_, _| Ok(()),
        Event::Start,
        State::default().relation(Relation::new(3, "website", "x")),
    );
}

#[test]
#[should_panic(expected = "no host to answer this call")]
fn calling_the_sdk_outside_a_hook_panics_with_directions() {
    Context::<Scripted>::new();
    let model_less_call = || charm_sdk::log::info("outside");
    model_less_call();
}

#[test]
fn sdk_errors_read_well() {
    assert_eq!(
        Error::RelationNotFound(4).to_string(),
        "relation 4 not found"
    );
    assert_eq!(ConfigValue::from(true), ConfigValue::Boolean(true));
}

#[test]
fn events_built_from_a_peer_relation_name_this_application() {
    let peers = Relation::peer(2, "cluster").remote_unit("scripted/1", [("a", "b")]);
    let out = run(
        |model, event| {
            let rel = event.relation().expect("a relation event");
            record(model, "remote-app", &rel.remote_app)?;
            record(
                model,
                "seen-app",
                model.relation_by_id(rel.id)?.remote_app(),
            )?;
            Ok(())
        },
        peers.joined("scripted/1"),
        State::default().relation(peers),
    );
    assert_eq!(recorded(&out, "remote-app"), r#""scripted""#);
    assert_eq!(recorded(&out, "seen-app"), r#""scripted""#);
}

#[test]
fn a_status_message_past_its_limit_is_refused_at_the_call() {
    let out = run(
        |model, _| {
            let huge = model
                .unit()
                .set_status(Status::active("x".repeat(32 << 20)));
            record(model, "refused", huge.is_err())?;
            model.unit().set_status(Status::active("ready"))?;
            Ok(())
        },
        Event::Install,
        State::default(),
    );
    assert!(out.committed(), "{:?}", out.outcome);
    assert_eq!(out.state.stored["refused"], "\"true\"");
    assert_eq!(out.state.unit_status, Status::active("ready"));
}

#[test]
fn a_hook_writing_more_keys_than_the_limit_commits_nothing() {
    let out = run(
        |model, _| {
            for i in 0..1_001 {
                model.stored().set(&format!("key-{i}"), &i)?;
            }
            Ok(())
        },
        Event::Install,
        State::default(),
    );
    assert_eq!(
        out.outcome,
        Outcome::OverLimit("the hook writes more than 1000 keys".into())
    );
    assert!(out.state.stored.is_empty());
}

#[test]
fn bags_that_would_hold_too_much_once_written_commit_nothing() {
    // The write is within every limit of its own; the bag it fills is not.
    let mut state = State::default().leader(true);
    state.leader_data = (0..12)
        .map(|i| (format!("k{i}"), "x".repeat(60 << 10)))
        .collect();
    let out = run(
        |model, _| {
            model.leader_data().set("k12", &"x".repeat(60 << 10))?;
            Ok(())
        },
        Event::Install,
        state.clone(),
    );
    let Outcome::OverLimit(why) = &out.outcome else {
        panic!("{:?}", out.outcome);
    };
    assert!(
        why.starts_with("what the bags the hook writes hold once written is"),
        "{why}"
    );
    assert_eq!(out.state, state);
}

#[test]
fn an_action_runs_with_its_parameters_typed_and_defaulted_as_declared() {
    fn echo(_: &Model, event: &Event) -> HookResult {
        if let Event::Action(action) = event {
            let params = serde_json::Value::Object(action.params.clone()).to_string();
            action.set_result("params", &params)?;
        }
        Ok(())
    }
    // Text is read as the declared type, as `KEY=VALUE` on a command line gives it; the
    // default of a parameter left out is filled in.
    let run = ActionEvent::new("resize").param("replicas", "3");
    let out = run_action(echo, run);
    assert_eq!(out.outcome, Outcome::Committed);
    let results = out.action.expect("the action ran").results;
    assert_eq!(results["params"], r#"{"force":false,"replicas":3}"#);
}

#[test]
fn an_action_whose_parameters_do_not_match_is_refused_before_its_hook() {
    fn ran(model: &Model, _: &Event) -> HookResult {
        model.stored().set("ran", &true)?;
        Ok(())
    }
    for (run, named) in [
        (ActionEvent::new("resize"), "replicas"),
        (
            ActionEvent::new("resize").param("replicas", "many"),
            "replicas",
        ),
        (
            ActionEvent::new("resize")
                .param("replicas", 2)
                .param("colour", "red"),
            "colour",
        ),
        (ActionEvent::new("dump").param("all", true), "all"),
    ] {
        let out = run_action(ran, run);
        match &out.outcome {
            Outcome::Refused(why) => assert!(why.contains(named), "{why}"),
            other => panic!("{named}: {other:?}"),
        }
        assert_eq!(out.action, None);
        assert!(out.state.stored.is_empty(), "the hook ran");
    }
}

fn run_action(body: Probe, action: ActionEvent) -> charm_sdk::testing::Output {
    run(body, Event::Action(action), State::default())
}
