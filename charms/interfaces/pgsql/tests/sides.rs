//! Both sides of `pgsql` through the native harness: what each emits and writes, malformed
//! data from the other side, and the two sides talking through relation data.

use charm_pgsql::{
    ConnectionString, DatabaseRequest, InvalidData, LEADER_KEY, Provider, ProviderEvent,
    Publication, Requirer, RequirerEvent,
};
use charm_sdk::testing::{Context, Output, Relation, State};
use charm_sdk::{Charm, Event, HookResult, Metadata, Model};

const CLIENT_DB: Requirer = Requirer::new("db");
const SERVER_DB: Provider = Provider::new("db");

/// A client: asks for database `client` with role `reader` when PostgreSQL joins.
struct Client;
impl Charm for Client {
    fn metadata() -> Metadata {
        Metadata::new("client").requires("db", "pgsql")
    }
    fn observe(model: &Model, event: &Event) -> HookResult {
        CLIENT_DB.observe(model, event)
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        if let Event::Custom(custom) = event
            && let Some(RequirerEvent::DatabaseJoined { relation, .. }) =
                CLIENT_DB.event(&custom).transpose()?
            && model.is_leader()
        {
            let request = DatabaseRequest::database("client").roles(["reader"]);
            CLIENT_DB.request(model, relation, &request)?;
        }
        Ok(())
    }
}

/// A PostgreSQL: publishes each request with password `pw-<relation>`.
struct Server;
impl Charm for Server {
    fn metadata() -> Metadata {
        Metadata::new("pg").provides("db", "pgsql")
    }
    fn observe(model: &Model, event: &Event) -> HookResult {
        SERVER_DB.observe(model, event)
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        if let Event::Custom(custom) = event
            && let Some(ProviderEvent::DatabaseRequested {
                relation, request, ..
            }) = SERVER_DB.event(&custom).transpose()?
        {
            let creds = SERVER_DB.credentials(model, relation, || format!("pw-{relation}"))?;
            let master = ConnectionString::new()
                .host("pg-0.pg-endpoints")
                .port(5432)
                .dbname(request.database.clone().unwrap_or("postgres".into()))
                .user(creds.user)
                .password(creds.password);
            let standby = master.clone().host("pg-1.pg-endpoints");
            let publication = Publication::new(master).standbys([standby]).version("12");
            SERVER_DB.publish(model, relation, &request, &publication)?;
        }
        Ok(())
    }
}

fn client_events(out: &Output) -> Vec<RequirerEvent> {
    assert!(out.committed(), "{:?}", out.outcome);
    out.emitted
        .iter()
        .filter_map(|e| CLIENT_DB.event(e))
        .map(Result::unwrap)
        .collect()
}

fn server_events(out: &Output) -> Vec<ProviderEvent> {
    assert!(out.committed(), "{:?}", out.outcome);
    out.emitted
        .iter()
        .filter_map(|e| SERVER_DB.event(e))
        .map(Result::unwrap)
        .collect()
}

const MASTER: &str = "host=pg-0 port=5432 dbname=client user=juju_client password=pw";

/// What PostgreSQL publishes once it applied `client`'s request.
fn applied() -> [(&'static str, &'static str); 3] {
    [
        ("master", MASTER),
        ("database", "client"),
        ("roles", "reader"),
    ]
}

fn requested() -> (&'static str, &'static str) {
    (
        LEADER_KEY,
        r#"{"1":{"database":"client","extensions":"","roles":"reader"}}"#,
    )
}

#[test]
fn the_client_leader_asks_when_postgresql_joins_and_every_unit_can_read_the_request() {
    let db = Relation::new(1, "db", "pg").remote_unit("pg/0", [("ingress-address", "10.1.0.4")]);
    let state = State::default().leader(true).relation(db.clone());
    let out = Context::<Client>::new().run(db.joined("pg/0"), state);
    assert_eq!(
        client_events(&out)[0],
        RequirerEvent::DatabaseJoined {
            relation: 1,
            remote_app: "pg".into()
        }
    );
    let rel = out.state.relation_by_id(1).unwrap();
    assert_eq!(rel.local_app_data["database"], "client");
    assert_eq!(rel.local_app_data["roles"], "reader");
    assert!(
        !rel.local_app_data.contains_key("extensions"),
        "empty is unset"
    );
    // The mirror, for providers reading unit bags, and the copy other units read.
    assert_eq!(rel.local_unit_data["database"], "client");
    assert_eq!(out.state.leader_data[LEADER_KEY], requested().1);

    // Asking again for the same thing writes nothing.
    let again = Context::<Client>::new().run(db.joined("pg/0"), out.state.clone());
    assert_eq!(again.state, out.state);

    // A non-leader's unit mirrors the leader's copy.
    let state = State::default()
        .relation(db.clone())
        .leader_data([requested()]);
    let out = Context::<Client>::new()
        .unit("client/1")
        .run(db.changed(Some("pg/0")), state);
    let rel = out.state.relation_by_id(1).unwrap();
    assert_eq!(rel.local_unit_data["database"], "client");
    assert!(rel.local_app_data.is_empty());
}

#[test]
fn master_changed_fires_once_postgresql_has_applied_the_request() {
    let ctx = Context::<Client>::new().unit("client/1");
    // Published, but not yet for this request: not ready.
    let early = Relation::new(1, "db", "pg").remote_app_data([("master", MASTER)]);
    let state = State::default()
        .relation(early.clone())
        .leader_data([requested()]);
    let out = ctx.run(early.changed(None), state);
    assert_eq!(client_events(&out), []);

    let ready = early.remote_app_data(applied());
    let state = out.state.relation(ready.clone());
    let state = State {
        relations: vec![ready.clone()],
        ..state
    };
    let out = ctx.run(ready.changed(None), state);
    let master: ConnectionString = MASTER.parse().unwrap();
    assert_eq!(
        client_events(&out),
        [RequirerEvent::MasterChanged {
            relation: 1,
            master: Some(master.clone())
        }]
    );
    assert_eq!(master.database(), Some("client"));

    // The same data again: nothing new to say.
    let out = ctx.run(ready.changed(None), out.state);
    assert_eq!(client_events(&out), []);

    // The master moves: said once.
    let moved = MASTER.replace("pg-0", "pg-2");
    let relation = ready.remote_app_data([("master", moved.as_str())]);
    let state = State {
        relations: vec![relation.clone()],
        ..out.state
    };
    let out = ctx.run(relation.changed(None), state);
    assert!(matches!(
        &client_events(&out)[..],
        [RequirerEvent::MasterChanged { master: Some(m), .. }] if m.host_name() == Some("pg-2")
    ));

    // The relation goes: the master is gone, and the leader forgets the request.
    let out = Context::<Client>::new().run(
        relation.broken(),
        State {
            leader: true,
            ..out.state
        },
    );
    assert_eq!(
        client_events(&out),
        [RequirerEvent::MasterChanged {
            relation: 1,
            master: None
        }]
    );
    assert!(!out.state.leader_data.contains_key(LEADER_KEY));
}

#[test]
fn the_same_master_in_other_words_is_not_a_change() {
    let ctx = Context::<Client>::new().unit("client/1");
    // What this unit last said, as stored state holds it.
    let said = |master: &str| serde_json::json!({ "1": { "master": master, "standbys": [] } });
    let reordered = "password=pw user=juju_client dbname=client port=5432 host=pg-0";
    let relation = Relation::new(1, "db", "pg")
        .remote_app_data(applied())
        .remote_app_data([("master", reordered)]);
    let state = State::default()
        .relation(relation.clone())
        .leader_data([requested()])
        .stored("charm-pgsql.db", &said(MASTER));
    let out = ctx.run(relation.changed(None), state);
    assert_eq!(
        client_events(&out),
        [],
        "the same master, spelled otherwise"
    );
    assert_eq!(
        out.state
            .stored_value::<serde_json::Value>("charm-pgsql.db"),
        Some(said(reordered)),
        "the text as published is kept, so the next hook compares text"
    );
    let again = ctx.run(relation.changed(None), out.state.clone());
    assert_eq!(client_events(&again), []);
    assert_eq!(again.state, out.state);

    // What was said no longer parses: the master is said again.
    let state = State {
        stored: Default::default(),
        ..out.state
    }
    .stored("charm-pgsql.db", &said("host"));
    let out = ctx.run(relation.changed(None), state);
    assert_eq!(
        client_events(&out),
        [RequirerEvent::MasterChanged {
            relation: 1,
            master: Some(reordered.parse().unwrap())
        }]
    );
}

#[test]
fn the_client_waits_until_its_egress_subnets_are_let_in() {
    let ctx = Context::<Client>::new().unit("client/1");
    let relation = Relation::new(1, "db", "pg")
        .local_unit_data([("egress-subnets", "10.2.0.0/24")])
        .remote_app_data(applied());
    let state = State::default()
        .relation(relation.clone())
        .leader_data([requested()]);
    let out = ctx.run(relation.changed(None), state.clone());
    assert_eq!(client_events(&out), []);

    let allowed = relation.remote_app_data([("allowed-subnets", "10.1.0.0/24, 10.2.0.0/24")]);
    let state = State {
        relations: vec![allowed.clone()],
        ..state
    };
    let out = ctx.run(allowed.changed(None), state);
    assert!(matches!(
        &client_events(&out)[..],
        [RequirerEvent::MasterChanged {
            master: Some(_),
            ..
        }]
    ));
}

#[test]
fn malformed_data_from_postgresql_is_an_event_not_a_panic() {
    let ctx = Context::<Client>::new().unit("client/1");
    let relation = Relation::new(1, "db", "pg")
        .remote_app_data([
            ("master", "host=pg-0 port=fifty"),
            (
                "standbys",
                "host=pg-1 port=5432\nhost=pg-2 password='unterminated\n",
            ),
            ("database", "client"),
            ("roles", "reader"),
        ])
        .remote_unit("pg/0", [("master", "postgresql://pg-0/client")]);
    let state = State::default()
        .relation(relation.clone())
        .leader_data([requested()]);
    let out = ctx.run(relation.changed(None), state);
    let events = client_events(&out);
    // What did parse is still used: the first standby.
    assert_eq!(
        events[0],
        RequirerEvent::StandbysChanged {
            relation: 1,
            standbys: vec!["host=pg-1 port=5432".parse().unwrap()]
        }
    );
    let problems: Vec<&InvalidData> = events
        .iter()
        .filter_map(|e| match e {
            RequirerEvent::InvalidData(bad) => Some(bad),
            _ => None,
        })
        .collect();
    assert_eq!(problems.len(), 3, "{events:?}");
    assert_eq!(
        (problems[0].owner.as_str(), problems[0].key.as_str()),
        ("pg", "master")
    );
    assert!(problems[0].reason.contains("\"fifty\""), "{}", problems[0]);
    assert_eq!(problems[1].key, "standbys");
    assert!(problems[1].reason.starts_with("line 2:"), "{}", problems[1]);
    assert_eq!(
        (problems[2].owner.as_str(), problems[2].key.as_str()),
        ("pg/0", "master")
    );
    assert!(problems[2].reason.contains("URI"), "{}", problems[2]);
    // No master, never a garbled one, and the problems reached the log.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, RequirerEvent::MasterChanged { .. }))
    );
    assert_eq!(
        out.logs
            .iter()
            .filter(|l| l.message.contains("malformed"))
            .count(),
        3
    );
}

/// The stored-state key of a comparison of relation 3's units owed (see `Provider::observe`).
const OWED: &str = "interface.pgsql.units-owed.3";

#[test]
fn postgresql_publishes_each_request_once_and_only_as_leader() {
    let ctx = Context::<Server>::new();
    let clients = Relation::new(3, "db", "client")
        .remote_unit("client/0", [("database", "client")])
        .remote_unit("client/1", [("database", "client")])
        .remote_app_data([("database", "client"), ("roles", "reader")]);
    let out = ctx.run(
        clients.changed(Some("client/0")),
        State::default().relation(clients.clone()),
    );
    assert_eq!(server_events(&out), [], "only the leader publishes");
    assert_eq!(out.state.relation_by_id(3).unwrap().local_app_data.len(), 0);

    let out = ctx.run(
        clients.changed(Some("client/0")),
        State::default().leader(true).relation(clients.clone()),
    );
    assert_eq!(
        server_events(&out),
        [ProviderEvent::DatabaseRequested {
            relation: 3,
            remote_app: "client".into(),
            request: DatabaseRequest::database("client").roles(["reader"]),
        }]
    );
    let published = &out.state.relation_by_id(3).unwrap().local_app_data;
    assert_eq!(
        published["master"],
        "host=pg-0.pg-endpoints port=5432 dbname=client user=juju_client password=pw-3"
    );
    assert_eq!(
        published["standbys"],
        published["master"].replace("pg-0", "pg-1")
    );
    assert_eq!(published["database"], "client");
    assert_eq!(published["roles"], "reader");
    assert_eq!(published["user"], "juju_client");
    assert_eq!(published["port"], "5432");
    assert_eq!(published["allowed-units"], "client/0 client/1");
    assert_eq!(published["version"], "12");
    assert_eq!(out.state.leader_data["interface.pgsql.password.3"], "pw-3");

    // Published and current: the next change asks for nothing.
    let again = ctx.run(clients.changed(Some("client/1")), out.state.clone());
    assert_eq!(server_events(&again), []);
    assert_eq!(again.state, out.state);

    // The units let in are compared when a unit joins, not on every change: a change
    // costs the same at two client units or ten thousand.
    let mut more = out.state.clone();
    more.relations[0]
        .remote_units
        .insert("client/2".into(), Default::default());
    let rel = more.relations[0].clone();
    let changed = ctx.run(rel.changed(Some("client/0")), more.clone());
    assert_eq!(server_events(&changed), []);
    let joined = ctx.run(rel.joined("client/2"), more.clone());
    assert_eq!(server_events(&joined).len(), 1, "republished on joining");
    assert_eq!(
        joined.state.relation_by_id(3).unwrap().local_app_data["allowed-units"],
        "client/0 client/1 client/2"
    );
    // Published in the hook that asked: no comparison is owed.
    assert_eq!(joined.state.stored.get(OWED), None);

    // A unit joins while the request is malformed: nothing is published, and the units
    // are compared again by the first change after the request is mended.
    let mut malformed = more;
    malformed.relations[0]
        .remote_app_data
        .insert("roles".into(), "reader,ad\u{7}min".into());
    let bad = ctx.run(malformed.relations[0].joined("client/2"), malformed);
    assert!(matches!(
        server_events(&bad)[..],
        [ProviderEvent::InvalidRequest(_)]
    ));
    assert_eq!(bad.state.stored.get(OWED).map(String::as_str), Some("true"));
    let mut mended = bad.state.clone();
    mended.relations[0]
        .remote_app_data
        .insert("roles".into(), "reader".into());
    let rel = mended.relations[0].clone();
    let changed = ctx.run(rel.changed(Some("client/0")), mended);
    assert_eq!(
        server_events(&changed).len(),
        1,
        "the owed comparison found a unit"
    );
    assert_eq!(
        changed.state.relation_by_id(3).unwrap().local_app_data["allowed-units"],
        "client/0 client/1 client/2"
    );
    assert_eq!(changed.state.stored.get(OWED), None);

    // A relation broken forgets a comparison owed on it.
    let broken = ctx.run(rel.broken(), bad.state.clone());
    assert_eq!(broken.state.stored.get(OWED), None);

    // A unit that joins while this unit runs without the lease is owed a comparison: the
    // first check once it leads publishes it.
    let mut follower = out.state.clone().leader(false);
    follower.relations[0]
        .remote_units
        .insert("client/3".into(), Default::default());
    let rel = follower.relations[0].clone();
    let joined = ctx.run(rel.joined("client/3"), follower);
    assert_eq!(server_events(&joined), []);
    assert_eq!(
        joined.state.stored.get(OWED).map(String::as_str),
        Some("true")
    );
    let leading = joined.state.clone().leader(true);
    let changed = ctx.run(rel.changed(Some("client/0")), leading);
    assert_eq!(
        server_events(&changed).len(),
        1,
        "the owed comparison found a unit"
    );
    assert_eq!(
        changed.state.relation_by_id(3).unwrap().local_app_data["allowed-units"],
        "client/0 client/1 client/3"
    );
    assert_eq!(changed.state.stored.get(OWED), None);

    // A client unit leaves: republished with the units let in now.
    let mut fewer = out.state.clone();
    fewer.relations[0].remote_units.remove("client/1");
    let rel = fewer.relations[0].clone();
    let out = ctx.run(rel.departed("client/1"), fewer);
    let published = &out.state.relation_by_id(3).unwrap().local_app_data;
    assert_eq!(published["allowed-units"], "client/0");
    assert_eq!(
        published["master"].matches("password=pw-3").count(),
        1,
        "same password"
    );

    // The relation goes: its password is forgotten.
    let out = ctx.run(rel.broken(), out.state);
    assert!(
        !out.state
            .leader_data
            .contains_key("interface.pgsql.password.3")
    );
}

#[test]
fn a_malformed_request_is_an_event_and_nothing_is_published() {
    let long = "d".repeat(64);
    for (key, value, reason) in [
        (
            "database",
            long.as_str(),
            "longer than PostgreSQL's 63 bytes",
        ),
        ("roles", "reader,ad\u{7}min", "control character"),
    ] {
        let clients = Relation::new(3, "db", "client")
            .remote_unit("client/0", [("k", "v")])
            .remote_app_data([(key, value)]);
        let state = State::default().leader(true).relation(clients.clone());
        let out = Context::<Server>::new().run(clients.changed(None), state);
        match &server_events(&out)[..] {
            [ProviderEvent::InvalidRequest(bad)] => {
                assert_eq!((bad.relation, bad.owner.as_str()), (3, "client"));
                assert_eq!(bad.key, key);
                assert!(bad.reason.contains(reason), "{bad}");
            }
            other => panic!("expected one invalid request, got {other:?}"),
        }
        assert!(
            out.state
                .relation_by_id(3)
                .unwrap()
                .local_app_data
                .is_empty()
        );
    }
}

#[test]
fn a_request_only_in_unit_bags_is_read_from_the_first_unit_that_has_one() {
    use std::cell::RefCell;
    thread_local!(static READ: RefCell<Option<Result<DatabaseRequest, InvalidData>>> =
        const { RefCell::new(None) });
    /// Reads the client's request inside a hook, as only a hook can.
    struct Reader;
    impl Charm for Reader {
        fn metadata() -> Metadata {
            Metadata::new("pg").provides("db", "pgsql")
        }
        fn handle(model: &Model, _: Event) -> HookResult {
            let rel = model.relation("db")?.expect("related");
            let request = SERVER_DB.request(&rel)?;
            READ.with(|r| *r.borrow_mut() = Some(request));
            Ok(())
        }
    }
    let clients = Relation::new(3, "db", "client")
        .remote_unit("client/0", [("ingress-address", "10.0.0.1")])
        .remote_unit(
            "client/1",
            [("database", "legacy"), ("extensions", "hstore")],
        );
    Context::<Reader>::new().run(Event::UpdateStatus, State::default().relation(clients));
    let request = READ.with(|r| r.borrow_mut().take()).expect("the hook ran");
    assert_eq!(
        request,
        Ok(DatabaseRequest::database("legacy").extensions(["hstore"]))
    );
}

/// The two sides talking through relation data, each hook fed what the other wrote.
#[test]
fn client_and_postgresql_agree_through_relation_data() {
    let client = Context::<Client>::new();
    let server = Context::<Server>::new();

    // PostgreSQL joins the client's relation; the client leader asks.
    let on_client = Relation::new(1, "db", "pg").remote_unit("pg/0", [("k", "v")]);
    let c = client.run(
        on_client.joined("pg/0"),
        State::default().leader(true).relation(on_client.clone()),
    );
    let asked = c.state.relation_by_id(1).unwrap().clone();

    // PostgreSQL sees the request (relation 1 from its side too) and publishes.
    let on_server = Relation::new(1, "db", "client")
        .remote_unit("client/0", asked.local_unit_data.clone())
        .remote_app_data(asked.local_app_data.clone());
    let s = server.run(
        on_server.changed(None),
        State::default().leader(true).relation(on_server),
    );
    let published = s.state.relation_by_id(1).unwrap().local_app_data.clone();

    // The client sees the publication: the master is ready, with its database and user.
    let seen = Relation {
        remote_app_data: published,
        ..asked
    };
    let state = State {
        relations: vec![seen.clone()],
        ..c.state
    };
    let c = client.run(seen.changed(None), state);
    let events = client_events(&c);
    let master = events
        .iter()
        .find_map(|e| match e {
            RequirerEvent::MasterChanged {
                master: Some(m), ..
            } => Some(m.clone()),
            _ => None,
        })
        .expect("master-changed");
    assert_eq!(master.database(), Some("client"));
    assert_eq!(master.get("user"), Some("juju_client"));
    assert_eq!(master.get("password"), Some("pw-1"));
    assert!(events.iter().any(|e| matches!(
        e,
        RequirerEvent::StandbysChanged { standbys, .. } if standbys.len() == 1
    )));
}
