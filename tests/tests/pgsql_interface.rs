//! The example charms speak `pgsql` through `charm-pgsql`, compiled to wasm and run by the
//! host: malformed data from PostgreSQL blocks Discourse with a message and never fails
//! the hook, the same natively and in the host.

use charm_sdk::testing::{Context, HookRunner, Relation, State};
use charm_sdk::{Event, Status};
use charm_tests::{WasmContext, guests, runtime};

#[test]
fn malformed_master_blocks_discourse_the_same_way_natively_and_in_the_host() {
    let runtime = runtime();
    let wasm = WasmContext::new(&runtime, guests::DISCOURSE).expect("the guest loads");
    let native = Context::<discourse::Discourse>::new();
    let db = Relation::new(1, "db", "postgresql")
        .remote_unit("postgresql/0", [("k", "v")])
        .remote_app_data([
            ("master", "host=postgresql-0 port=5432 password='open"),
            ("database", "discourse"),
        ]);
    let event = db.changed(Some("postgresql/0"));
    for leader in [true, false] {
        let state = State::default()
            .leader(leader)
            .relation(db.clone())
            .leader_data([("interface.pgsql", r#"{"1":{"database":"discourse"}}"#)]);
        let n = native.run(event.clone(), state.clone());
        let w = HookRunner::run(&wasm, event.clone(), state);
        assert!(w.committed(), "{:?}", w.outcome);
        assert_eq!(n.outcome, w.outcome);
        assert_eq!(n.state, w.state, "leader: {leader}");
        assert_eq!(
            w.state.unit_status,
            Status::blocked(
                "bad data from postgresql: at byte 37: the quoted value of \"password\" is not closed"
            )
        );
        assert!(w.state.pod_spec.is_none());
        assert!(
            w.logs.iter().any(|l| l.message.contains("malformed")),
            "{:?}",
            w.logs
        );
    }
}

#[test]
fn discourse_follows_a_master_that_moves_and_postgresql_republishes_on_config() {
    let runtime = runtime();
    let discourse = WasmContext::new(&runtime, guests::DISCOURSE).expect("the guest loads");
    let postgresql = WasmContext::new(&runtime, guests::POSTGRESQL).expect("the guest loads");

    // PostgreSQL's leader, port changed: the client's connection is republished.
    let clients = Relation::new(1, "db", "discourse")
        .remote_unit("discourse/0", [("database", "discourse")])
        .remote_app_data([("database", "discourse")]);
    let state = State::default()
        .leader(true)
        .config("port", 5433)
        .leader_data([("password", "su"), ("interface.pgsql.password.1", "pw")])
        .relation(clients);
    let out = HookRunner::run(&postgresql, Event::ConfigChanged, state);
    assert!(out.committed(), "{:?}", out.outcome);
    let published = out.state.relation_by_id(1).unwrap().local_app_data.clone();
    assert_eq!(
        published["master"],
        "host=postgresql-0.postgresql-endpoints.test.svc.cluster.local port=5433 dbname=discourse user=juju_discourse password=pw"
    );

    // Discourse's leader gets it and puts it in its pod spec.
    let db = Relation::new(1, "db", "postgresql")
        .remote_unit("postgresql/0", [("k", "v")])
        .remote_app_data(published.clone());
    let state = State::default()
        .leader(true)
        .relation(db.clone())
        .leader_data([("interface.pgsql", r#"{"1":{"database":"discourse"}}"#)]);
    let out = HookRunner::run(&discourse, db.changed(Some("postgresql/0")), state);
    assert!(out.committed(), "{:?}", out.outcome);
    let spec = out
        .state
        .pod_spec
        .as_ref()
        .expect("the leader set a pod spec");
    assert_eq!(
        spec.spec["containers"][0]["envConfig"]["DISCOURSE_DB"],
        published["master"].as_str()
    );
    assert_eq!(out.state.unit_status, Status::active(""));
}
