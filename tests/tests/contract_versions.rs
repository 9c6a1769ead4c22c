//! Contract versions: the host runs charms built against every version it supports (the
//! frozen `juju:charm@0.1.0` and `0.2.0` to `0.2.3`, and the current 0.2.4) through the
//! same model rules, and refuses a component of any other version naming the versions it
//! runs.

use std::path::Path;

use charm_host::charm::{ContractVersion, LoadError, SUPPORTED_VERSIONS};
use charm_host::model::{OptionType, RelationRole};
use charm_sdk::testing::{HookRunner, Outcome, Relation, State};
use charm_sdk::{ActionEvent, Event, Status};
use charm_tests::{WasmContext, guests, runtime};

/// A unit bag with nothing in it.
const NO_DATA: [(&str, &str); 0] = [];

#[test]
fn a_charm_built_against_0_1_0_loads_with_its_metadata() {
    let charm = runtime()
        .load_file(Path::new(guests::CONTRACT_V0_1))
        .unwrap();
    assert_eq!(charm.contract_version(), ContractVersion::V0_1);
    let meta = charm.metadata();
    assert_eq!(meta.name, "contract-v0-1");
    assert_eq!(meta.summary, "Built against juju:charm@0.1.0");
    let db = meta.endpoint("db").expect("the db endpoint");
    assert_eq!(db.role, RelationRole::Requires);
    assert_eq!(db.interface, "pgsql");
    assert_eq!(db.limit, Some(1));
    let greeting = meta.option("greeting").expect("the greeting option");
    assert_eq!(greeting.kind, OptionType::String);
    assert_eq!(
        greeting.default,
        Some(charm_host::model::ConfigValue::String("hello".into()))
    );
    assert_eq!(meta.actions.len(), 1);
    assert_eq!(meta.actions[0].name, "ping");
    // 0.1.0 has no parameter declarations.
    assert!(meta.actions[0].params.is_empty());
}

#[test]
fn a_charm_built_against_0_1_0_runs_its_hooks_under_the_current_rules() {
    let ctx = WasmContext::new(&runtime(), guests::CONTRACT_V0_1).expect("the guest loads");

    let out = ctx.run(Event::Install, State::default());
    assert_eq!(out.outcome, Outcome::Committed);
    assert_eq!(
        out.state.unit_status,
        Status::active("installed under 0.1.0")
    );
    assert_eq!(out.state.stored["installed"], "yes");
    assert_eq!(out.logs.len(), 1);
    assert_eq!(out.logs[0].message, "installing under 0.1.0");

    let db = Relation::new(3, "db", "pg").remote_unit("pg/0", [("host", "pg-0.pg")]);
    let changed = db.changed(Some("pg/0"));
    let out = ctx.run(changed, State::default().relation(db));
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    let bag = &out.state.relation_by_id(3).unwrap().local_unit_data;
    assert_eq!(bag["greeting"], "hello");
    assert_eq!(bag["remote-app"], "pg");
    assert_eq!(bag["remote-host"], "pg-0.pg");
    // The model's refusals reach the old charm as 0.1.0's errors.
    assert_eq!(bag["app-write"], "not-leader");
    assert_eq!(bag["unknown-option"], "colour");

    let out = ctx.run(Event::Action(ActionEvent::new("ping")), State::default());
    assert_eq!(out.outcome, Outcome::Committed);
    let action = out.action.expect("the action's output");
    assert_eq!(action.results["pong"], "contract-v0-1/0");
    assert_eq!(action.log, ["pinged"]);
}

#[test]
fn a_charm_of_the_current_contract_declares_typed_action_parameters() {
    let charm = runtime().load_file(Path::new(guests::KV)).unwrap();
    assert_eq!(charm.contract_version(), ContractVersion::V0_2_4);
    let put = charm
        .metadata()
        .actions
        .iter()
        .find(|a| a.name == "put")
        .expect("kv's put action");
    let params: Vec<_> = put
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.kind, p.required))
        .collect();
    assert_eq!(
        params,
        [
            ("key", OptionType::String, true),
            ("value", OptionType::String, true)
        ]
    );
}

#[test]
fn a_component_of_an_unknown_contract_version_is_refused_naming_the_versions_run() {
    let err = runtime()
        .load_file(Path::new(guests::CONTRACT_UNKNOWN))
        .err()
        .expect("a 9.9.9 component is refused");
    let text = err.to_string();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{text}");
    assert!(text.contains("`juju:charm/log@9.9.9`"), "{text}");
    assert!(text.contains("\"9.9.9\""), "{text}");
    assert!(
        text.contains("0.1.0, 0.2.0, 0.2.1, 0.2.2, 0.2.3, 0.2.4"),
        "{text}"
    );
    assert_eq!(
        SUPPORTED_VERSIONS,
        ["0.1.0", "0.2.0", "0.2.1", "0.2.2", "0.2.3", "0.2.4"]
    );
}

#[test]
fn a_component_of_neither_world_is_refused_naming_the_versions_run() {
    let err = runtime()
        .load_file(Path::new(guests::OTHER_WORLD))
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.contains(
            "not a charm of world `juju:charm/charm` at a version this host runs (0.1.0, 0.2.0, 0.2.1, 0.2.2, 0.2.3, 0.2.4)"
        ),
        "{text}"
    );
}

#[test]
fn the_postgresql_leader_draws_its_password_from_the_hosts_secure_source() {
    let ctx = WasmContext::new(&runtime(), guests::POSTGRESQL).expect("the guest loads");
    let password = || {
        let out = ctx.run(Event::LeaderElected, State::default().leader(true));
        assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
        out.state.leader_data["password"].clone()
    };
    let (first, second) = (password(), password());
    for p in [&first, &second] {
        assert_eq!(p.len(), 32, "{p}");
        assert!(p.bytes().all(|b| b.is_ascii_hexdigit()), "{p}");
    }
    // 128 bits each: equal only if the source repeats itself.
    assert_ne!(first, second);
}

#[test]
fn inspect_shows_the_contract_version_and_the_action_parameters() {
    let inspect = |path: &str| {
        let out = std::process::Command::new(charm_tests::charm_host_binary())
            .args(["inspect", path])
            .output()
            .expect("charm-host runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let (ok, kv, stderr) = inspect(guests::KV);
    assert!(ok, "{stderr}");
    assert!(kv.contains("Contract  juju:charm@0.2.4"), "{kv}");
    let rows: Vec<Vec<&str>> = kv
        .lines()
        .skip_while(|l| !l.starts_with("Action  Parameter"))
        .map(|l| l.split_whitespace().take(5).collect())
        .collect();
    assert_eq!(
        rows[..3],
        [
            vec!["Action", "Parameter", "Type", "Default", "Required"],
            vec!["put", "key", "string", "yes", "The"],
            vec!["put", "value", "string", "yes", "The"],
        ],
        "{kv}"
    );

    let (ok, old, stderr) = inspect(guests::CONTRACT_V0_1);
    assert!(ok, "{stderr}");
    assert!(old.contains("Contract  juju:charm@0.1.0"), "{old}");
    assert!(old.contains("ping    Answers pong"), "{old}");
    assert!(!old.contains("Parameter"), "{old}");

    let (ok, _, stderr) = inspect(guests::CONTRACT_UNKNOWN);
    assert!(!ok, "a 9.9.9 component was inspected");
    assert!(
        stderr.contains("at a version this host runs (0.1.0, 0.2.0, 0.2.1, 0.2.2, 0.2.3, 0.2.4)")
            && stderr.contains("contract version \"9.9.9\" is not one this host runs"),
        "{stderr}"
    );
}

#[test]
fn a_charm_built_against_0_2_0_links_to_the_current_imports_and_runs() {
    // The empty guest is built straight on the 0.2.0 bindings: it instantiates only if each
    // of its `@0.2.0` imports links to the host's `@0.2.4` one.
    let charm = runtime().load_file(Path::new(guests::EMPTY)).unwrap();
    assert_eq!(charm.contract_version(), ContractVersion::V0_2);
    let ctx = WasmContext::new(&runtime(), guests::EMPTY).expect("the guest loads");
    let out = ctx.run(Event::Install, State::default());
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
}

#[test]
fn a_charm_built_against_0_2_1_gets_a_relations_units_as_a_list() {
    // Built straight on the 0.2.1 bindings: `relation-get` hands it the names one by one,
    // as before 0.2.2 packed them; `app-data` hands it a bag whole, long values too, as
    // before 0.2.3 left them out; and `network-get`, 0.2.1's addition, still answers.
    let charm = runtime()
        .load_file(Path::new(guests::CONTRACT_V0_2_1))
        .unwrap();
    assert_eq!(charm.contract_version(), ContractVersion::V0_2_1);
    let ctx = WasmContext::new(&runtime(), guests::CONTRACT_V0_2_1)
        .expect("the guest loads")
        .unit("contract-v0-2-1/0");
    let db = Relation::new(7, "db", "pg")
        .remote_unit("pg/10", [("k", "v")])
        .remote_unit("pg/0", NO_DATA)
        .remote_unit("pg/2", NO_DATA)
        .remote_app_data([("allowed-units", "u".repeat(5000)), ("master", "m".into())]);
    let changed = db.changed(Some("pg/2"));
    let out = ctx.run(changed, State::default().relation(db));
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    let bag = &out.state.relation_by_id(7).unwrap().local_unit_data;
    assert_eq!(bag["units"], "pg/0,pg/2,pg/10");
    assert_eq!(bag["app-data"], "allowed-units:5000,master:1");
    assert_eq!(
        bag["address"],
        "contract-v0-2-1-0.contract-v0-2-1-endpoints.test.svc.cluster.local"
    );
}

#[test]
fn a_charm_built_against_0_2_3_gets_a_relations_units_packed_and_long_values_when_it_asks() {
    // Built straight on the 0.2.3 bindings, as the SDK before 0.2.4 made charms: its
    // `relation-get-packed`, `app-data-inline` and `app-data-value` still answer.
    let charm = runtime()
        .load_file(Path::new(guests::CONTRACT_V0_2_3))
        .unwrap();
    assert_eq!(charm.contract_version(), ContractVersion::V0_2_3);
    let ctx = WasmContext::new(&runtime(), guests::CONTRACT_V0_2_3)
        .expect("the guest loads")
        .unit("contract-v0-2-3/0");
    let db = Relation::new(7, "db", "pg")
        .remote_unit("pg/10", NO_DATA)
        .remote_unit("pg/2", NO_DATA)
        .remote_app_data([
            ("allowed-units", "u".repeat(17)),
            ("master", "host=pg-0".into()),
        ]);
    let out = ctx.run(db.changed(Some("pg/2")), State::default().relation(db));
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    let bag = &out.state.relation_by_id(7).unwrap().local_unit_data;
    assert_eq!(bag["units"], "pg/2,pg/10");
    assert_eq!(bag["app-data"], "allowed-units:-,master:9");
    assert_eq!(bag["master"], "host=pg-0");
}

#[test]
fn a_charm_of_the_current_contract_gets_the_same_units_packed() {
    // The SDK asks with 0.2.4's `relation-list-packed` when the charm lists the units; what
    // the charm sees is the same list, as 0.2.2's `relation-get-packed` gives it too.
    let ctx = WasmContext::new(&runtime(), guests::PROBE)
        .expect("the guest loads")
        .unit("probe/0");
    let units = ["pg/1", "pg/10", "pg/2"];
    let mut db = Relation::new(5, "db", "pg");
    for unit in units {
        db = db.remote_unit(unit, NO_DATA);
    }
    let out = ctx.run(
        Event::Start,
        State::default().config("mode", "units").relation(db),
    );
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    // In unit order, as a host's stores give them, so the SDK's search finds each.
    assert_eq!(out.state.stored["units"], "\"pg/1,pg/2,pg/10\"");
    assert_eq!(out.state.stored["has-pg-2"], "\"true\"");
    // Each recorded as its `Debug` text, in JSON.
    let listed = r#""\"pg/1\\npg/2\\npg/10\\n\"""#;
    assert_eq!(out.state.stored["listed"], listed);
    assert_eq!(out.state.stored["packed"], listed);
    assert_eq!(out.state.stored["summary"], r#""(5, \"db\", \"pg\")""#);

    // And a relation no unit has joined yet: no names, not one empty name.
    let out = ctx.run(
        Event::Start,
        State::default()
            .config("mode", "units")
            .relation(Relation::new(5, "db", "pg")),
    );
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    assert_eq!(out.state.stored["units"], "\"\"");
}

#[test]
fn a_charm_of_the_current_contract_reads_long_values_when_it_asks() {
    // 0.2.3's `app-data-inline` leaves values over 4 KiB out of the bag's read; the SDK
    // asks for each with `app-data-value` (`unit-data-value` for a unit's bag) as the charm
    // reads it: the charm sees the same bag.
    let ctx = WasmContext::new(&runtime(), guests::PROBE)
        .expect("the guest loads")
        .unit("probe/0");
    let db = Relation::new(5, "db", "pg")
        .remote_unit("pg/0", NO_DATA)
        .remote_app_data([
            ("master", "host=pg-0".to_string()),
            ("allowed-units", "probe/0 ".repeat(1000)),
            ("standbys", "s".repeat(5000)),
            ("version", "16".to_string()),
        ])
        .local_unit_data([("cert", "c".repeat(4097))]);
    let out = ctx.run(
        Event::Start,
        State::default().config("mode", "bags").relation(db),
    );
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    let stored = &out.state.stored;
    // Each recorded as its `Debug` text, in JSON.
    assert_eq!(stored["master"], r#""Some(\"host=pg-0\")""#);
    assert_eq!(stored["allowed-len"], r#""Some(8000)""#);
    assert_eq!(
        stored["entries"],
        r#""[(\"allowed-units\", 8000), (\"master\", 9), (\"standbys\", 5000), (\"version\", 2)]""#
    );
    assert_eq!(stored["cert-len"], r#""Some(4097)""#);
}

#[test]
fn a_charm_of_0_2_1_asks_the_host_for_its_addresses() {
    let ctx = WasmContext::new(&runtime(), guests::PROBE)
        .expect("the guest loads")
        .unit("probe/3");
    assert_eq!(ctx.metadata().name, "probe");
    let out = ctx.run(Event::Start, State::default().config("mode", "network"));
    assert_eq!(out.outcome, Outcome::Committed, "{:?}", out.logs);
    let address = "probe-3.probe-endpoints.test.svc.cluster.local";
    assert_eq!(out.state.stored["network-db"], format!("[\"{address}\"]"));
    assert_eq!(out.state.stored["network-bind"], format!("[\"{address}\"]"));
    assert_eq!(out.state.stored["network-egress"], "[]");
    let nope = &out.state.stored["network-nope"];
    assert!(
        nope.contains("declares no endpoint") && nope.contains("nope"),
        "{nope}"
    );
}
