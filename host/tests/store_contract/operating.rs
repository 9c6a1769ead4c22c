//! Operating a live model: config, removals, relate, deploy, resolved, charm logs.

use super::*;

/// Everything an operator or a hook can read of the model, to compare before and after.
pub(crate) async fn fingerprint(store: &dyn Store) -> String {
    let mut out = format!(
        "{:?}\n{:?}\n{:?}\n",
        store.applications().await.unwrap(),
        store.relations().await.unwrap(),
        store.status().await.unwrap()
    );
    for app in store.applications().await.unwrap() {
        out += &format!("{:?}\n", store.pod_spec(&app.name).await.unwrap());
        for unit in store.units(&app.name).await.unwrap() {
            out += &format!(
                "{unit}: {:?}\n{:?}\n",
                store.queued(&unit).await.unwrap(),
                store.snapshot(&unit).await.unwrap()
            );
        }
    }
    out
}

/// Runs every queued hook of the model, in each unit's order, writing nothing, until no
/// hook is queued (a remove hook's commit deletes its unit).
pub(crate) async fn settle(store: &dyn Store) {
    loop {
        let mut ran = false;
        for row in store.status().await.unwrap().units {
            for q in store.queued(&row.name).await.unwrap_or_default() {
                store
                    .commit(&row.name, Some(q.seq), &Changes::default(), None)
                    .await
                    .unwrap();
                ran = true;
            }
        }
        if !ran {
            return;
        }
    }
}

pub(crate) fn texts(pairs: &[(&str, &str)]) -> BTreeMap<String, ConfigValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ConfigValue::String(v.to_string())))
        .collect()
}

pub(crate) async fn set_config_checks_types_and_fires_config_changed(store: &dyn Store) {
    deploy(store).await;
    settle(store).await;
    // Text reads as the option's type; a reset key goes back to its default.
    let applied = store
        .set_config(
            "web",
            texts(&[("port", "8080"), ("ratio", "0.5")]),
            vec!["greeting".into()],
        )
        .await
        .unwrap();
    assert_eq!(applied.changed, ["greeting", "port", "ratio"]);
    assert_eq!(
        units_and_hooks(&applied.queued),
        ["web/0", "web/1", "web/2"].map(|u| on(u, Hook::ConfigChanged))
    );
    let record = store.application("web").await.unwrap();
    assert_eq!(
        record.config,
        BTreeMap::from([
            ("port".to_string(), ConfigValue::Int(8080)),
            ("ratio".to_string(), ConfigValue::Float(0.5)),
        ])
    );
    let seen = store.snapshot("web/1").await.unwrap().config;
    assert_eq!(seen["port"], ConfigValue::Int(8080));
    assert_eq!(seen["greeting"], ConfigValue::String("hello".into()));
    for unit in ["db/0", "other/0"] {
        assert_eq!(
            store.queued(unit).await.unwrap(),
            [],
            "{unit} heard web's config"
        );
    }
    // Typed values are taken as they are; the same config again changes nothing.
    settle(store).await;
    let typed = BTreeMap::from([("port".to_string(), ConfigValue::Int(8080))]);
    let again = store.set_config("web", typed, vec![]).await.unwrap();
    assert_eq!(again, charm_host::store::ConfigApplied::default());
    assert_eq!(store.queued("web/0").await.unwrap(), []);
}

/// An application with two endpoints that each fit `db`'s: relating it to `db` without
/// naming one is ambiguous.
pub(crate) fn twin(name: &str) -> ApplicationRecord {
    app(
        name,
        vec![
            endpoint("primary", RelationRole::Requires, "pgsql"),
            endpoint("replica", RelationRole::Requires, "pgsql"),
        ],
    )
}

pub(crate) async fn refused_changes_change_nothing(store: &dyn Store) {
    deploy(store).await;
    store.add_application(twin("twin")).await.unwrap();
    store.add_unit("twin").await.unwrap();
    store.remove_unit("web/2").await.unwrap();
    store.remove_relation("other", "db").await.unwrap();
    let before = fingerprint(store).await;
    let invalid = |e: StoreError, words: &[&str]| match &e {
        StoreError::Invalid(m) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let missing = |e: StoreError, what: &str| assert_eq!(e, StoreError::NotFound(what.into()));

    let set = |pairs: &[(&str, &str)]| texts(pairs);
    missing(
        store
            .set_config("nope", set(&[("port", "1")]), vec![])
            .await
            .unwrap_err(),
        "application nope",
    );
    invalid(
        store
            .set_config("web", set(&[("colour", "red")]), vec![])
            .await
            .unwrap_err(),
        &["web", "colour", "greeting"],
    );
    invalid(
        store
            .set_config("web", set(&[("port", "eighty")]), vec![])
            .await
            .unwrap_err(),
        &["port", "int", "eighty"],
    );
    invalid(
        store
            .set_config("web", set(&[("port", "1")]), vec!["colour".into()])
            .await
            .unwrap_err(),
        &["colour"],
    );
    invalid(
        store
            .set_config("web", set(&[("port", "1")]), vec!["port".into()])
            .await
            .unwrap_err(),
        &["port", "both"],
    );
    let bool_for_int = BTreeMap::from([("port".to_string(), ConfigValue::Boolean(true))]);
    invalid(
        store
            .set_config("web", bool_for_int, vec![])
            .await
            .unwrap_err(),
        &["port", "int"],
    );

    missing(
        store.relate("nope", "db").await.unwrap_err(),
        "application nope",
    );
    invalid(
        store.relate("web:nope", "db").await.unwrap_err(),
        &["web", "\"nope\"", "db, cluster"],
    );
    invalid(
        store.relate("web", "other").await.unwrap_err(),
        &["no matching endpoints"],
    );
    invalid(
        store.relate("twin", "db").await.unwrap_err(),
        &["ambiguous", "twin:primary db:db", "twin:replica db:db"],
    );
    invalid(store.relate("web", "web").await.unwrap_err(), &["itself"]);
    assert!(matches!(
        store.relate("db", "web").await.unwrap_err(),
        StoreError::AlreadyExists(_)
    ));

    missing(store.remove_unit("web/9").await.unwrap_err(), "unit web/9");
    invalid(
        store.remove_unit("web/2").await.unwrap_err(),
        &["web/2", "already being removed"],
    );
    missing(
        store.remove_relation("web", "other").await.unwrap_err(),
        "relation web other",
    );
    missing(
        store.remove_relation("nope", "db").await.unwrap_err(),
        "application nope",
    );
    invalid(
        store.remove_relation("other:db", "db").await.unwrap_err(),
        &["other:db db:db", "already being removed"],
    );
    invalid(
        store.remove_application("db", false).await.unwrap_err(),
        &["db", "relations", "web:db db:db", "--force"],
    );
    missing(
        store.remove_application("nope", true).await.unwrap_err(),
        "application nope",
    );
    store.add_application(app("idle", vec![])).await.unwrap();
    let with_idle = fingerprint(store).await;
    store.remove_application("idle", false).await.unwrap();
    assert_eq!(
        fingerprint(store).await,
        before,
        "an application with no units goes at once"
    );
    missing(
        store.remove_application("idle", false).await.unwrap_err(),
        "application idle",
    );
    assert_ne!(with_idle, before);

    assert_eq!(
        fingerprint(store).await,
        before,
        "a refused change changed the model"
    );
}

pub(crate) async fn remove_unit_follows_juju_order_and_releases_its_lease(store: &dyn Store) {
    let m = deploy(store).await;
    settle(store).await;
    let fence = hold(store, "web", "web/1", LONG).await;
    let bag = Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-1"))]))]),
        ..Changes::default()
    };
    store
        .commit("web/1", None, &bag, Some(&fence))
        .await
        .unwrap();
    settle(store).await;

    let queued = store.remove_unit("web/1").await.unwrap();
    let (db, peers) = (m.web_db.id, m.peers.id);
    let departed = Hook::RelationDeparted;
    assert_eq!(
        units_and_hooks(&queued),
        [
            // The remaining units of each relation hear it depart...
            on("db/0", departed(about(db, "db", "web", Some("web/1")))),
            on(
                "web/0",
                departed(about(peers, "cluster", "web", Some("web/1")))
            ),
            on(
                "web/2",
                departed(about(peers, "cluster", "web", Some("web/1")))
            ),
            // ...and it hears each remote unit depart, then each relation break, then stops.
            on("web/1", departed(about(db, "db", "db", Some("db/0")))),
            on(
                "web/1",
                departed(about(peers, "cluster", "web", Some("web/0")))
            ),
            on(
                "web/1",
                departed(about(peers, "cluster", "web", Some("web/2")))
            ),
            on("web/1", Hook::RelationBroken(about(db, "db", "db", None))),
            on(
                "web/1",
                Hook::RelationBroken(about(peers, "cluster", "web", None))
            ),
            on("web/1", Hook::Stop),
            on("web/1", Hook::Remove),
        ]
    );
    // Departed units are gone from what hooks see, for the others and for itself.
    let web0 = store.snapshot("web/0").await.unwrap();
    assert_eq!(web0.relations[&peers].remote_units[..], ["web/2"]);
    let db0 = store.snapshot("db/0").await.unwrap();
    assert_eq!(db0.relations[&db].remote_units[..], ["web/0", "web/2"]);
    let leaving = store.snapshot("web/1").await.unwrap();
    assert!(
        leaving
            .relations
            .values()
            .all(|r| r.remote_units.is_empty())
    );
    // Changes no longer reach it: config-changed goes to the others.
    let applied = store
        .set_config("web", texts(&[("port", "81")]), vec![])
        .await
        .unwrap();
    assert_eq!(
        units_and_hooks(&applied.queued),
        ["web/0", "web/2"].map(|u| on(u, Hook::ConfigChanged))
    );
    // It still leads until its remove hook commits; then it is gone, and so is its lease.
    let mut hooks = store.queued("web/1").await.unwrap();
    let remove = hooks.pop().unwrap();
    for q in hooks {
        store
            .commit("web/1", Some(q.seq), &Changes::default(), None)
            .await
            .unwrap();
    }
    assert_eq!(store.leader("web").await.unwrap().unwrap().holder, "web/1");
    store
        .commit("web/1", Some(remove.seq), &Changes::default(), None)
        .await
        .unwrap();
    assert_eq!(
        store.leader("web").await.unwrap(),
        None,
        "its lease outlived it"
    );
    assert_eq!(store.units("web").await.unwrap(), ["web/0", "web/2"]);
    assert_eq!(
        store.queued("web/1").await.unwrap_err(),
        StoreError::NotFound("unit web/1".into())
    );
    assert!(
        !store.snapshot("db/0").await.unwrap().relations[&db]
            .unit_bags
            .contains_key("web/1")
    );
    match store.claim("web", "web/0", LONG).await.unwrap() {
        Claim::Held(lease) => assert!(lease.term > fence.term, "a term was reused"),
        denied => panic!("web/0 could not lead after web/1 left: {denied:?}"),
    }
    // A number is never reused.
    assert_eq!(store.add_unit("web").await.unwrap(), "web/3");
}

pub(crate) async fn remove_relation_departs_then_breaks_then_drops_its_bags(store: &dyn Store) {
    let m = deploy(store).await;
    settle(store).await;
    let bag = Changes {
        unit_bags: BTreeMap::from([(m.other_db.id, writes(&[("k", Some("v"))]))]),
        ..Changes::default()
    };
    store.commit("other/0", None, &bag, None).await.unwrap();

    let (rel, queued) = store.remove_relation("db:db", "other").await.unwrap();
    let r = m.other_db.id;
    assert_eq!(rel.id, r);
    assert!(rel.dying);
    assert_eq!(
        units_and_hooks(&queued),
        [
            on(
                "other/0",
                Hook::RelationDeparted(about(r, "db", "db", Some("db/0")))
            ),
            on("other/0", Hook::RelationBroken(about(r, "db", "db", None))),
            on(
                "db/0",
                Hook::RelationDeparted(about(r, "db", "other", Some("other/0")))
            ),
            on("db/0", Hook::RelationBroken(about(r, "db", "other", None))),
        ]
    );
    // Until the last broken its bags stay, though no remote unit is left in it.
    let seen = store.snapshot("other/0").await.unwrap();
    assert!(seen.relations[&r].remote_units.is_empty());
    assert_eq!(seen.relations[&r].unit_bags["other/0"]["k"], "v");
    for q in store.queued("other/0").await.unwrap() {
        store
            .commit("other/0", Some(q.seq), &Changes::default(), None)
            .await
            .unwrap();
    }
    assert!(store.relations().await.unwrap().iter().any(|x| x.id == r));
    settle(store).await;
    assert!(
        !store.relations().await.unwrap().iter().any(|x| x.id == r),
        "outlived its last broken"
    );
    assert!(
        !store
            .snapshot("other/0")
            .await
            .unwrap()
            .relations
            .contains_key(&r)
    );
    // Related again, it is a new relation with empty bags.
    let (again, _) = store.relate("other", "db").await.unwrap();
    assert!(again.id > r, "a relation id was reused");
    assert!(
        written(
            &store.snapshot("other/0").await.unwrap().relations[&again.id].unit_bags["other/0"]
        )
        .is_empty()
    );
}

pub(crate) async fn remove_application_refuses_relations_unless_forced(store: &dyn Store) {
    let m = deploy(store).await;
    settle(store).await;
    hold(store, "web", "web/0", LONG).await;
    let removal = store.remove_application("web", true).await.unwrap();
    assert_eq!(removal.units, ["web/0", "web/1", "web/2"]);
    assert_eq!(
        removal.relations.iter().map(|r| r.id).collect::<Vec<_>>(),
        [m.web_db.id]
    );
    assert!(!removal.gone);
    // The relation breaks first on every unit; each web unit then stops and goes.
    let web0 = hooks_of(&store.queued("web/0").await.unwrap());
    assert_eq!(web0.last(), Some(&Hook::Remove));
    assert_eq!(web0[web0.len() - 2], Hook::Stop);
    assert!(web0.contains(&Hook::RelationBroken(about(m.web_db.id, "db", "db", None))));
    assert!(web0.contains(&Hook::RelationBroken(about(
        m.peers.id, "cluster", "web", None
    ))));
    let err = store.add_unit("web").await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    settle(store).await;
    let apps: Vec<String> = store
        .applications()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(apps, ["db", "other"]);
    let ids: Vec<u32> = store
        .relations()
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [m.other_db.id], "web's relations outlived it");
    assert_eq!(store.leader("web").await.unwrap(), None);
    assert_eq!(
        store.application("web").await.unwrap_err(),
        StoreError::NotFound("application web".into())
    );
    // The name is free again.
    store.add_application(app("web", vec![])).await.unwrap();
    assert_eq!(store.add_unit("web").await.unwrap(), "web/0");
}

pub(crate) async fn relate_resolves_endpoints_by_interface_and_role(store: &dyn Store) {
    deploy(store).await;
    store.add_application(twin("twin")).await.unwrap();
    store.add_unit("twin").await.unwrap();
    settle(store).await;
    let (rel, queued) = store.relate("db", "twin:replica").await.unwrap();
    assert_eq!(rel.endpoints, [side("db", "db"), side("twin", "replica")]);
    assert_eq!(rel.interface, "pgsql");
    let r = rel.id;
    assert_eq!(
        units_and_hooks(&queued),
        [
            on("db/0", Hook::RelationCreated(about(r, "db", "twin", None))),
            on(
                "db/0",
                Hook::RelationJoined(about(r, "db", "twin", Some("twin/0")))
            ),
            on(
                "db/0",
                Hook::RelationChanged(about(r, "db", "twin", Some("twin/0")))
            ),
            on(
                "twin/0",
                Hook::RelationCreated(about(r, "replica", "db", None))
            ),
            on(
                "twin/0",
                Hook::RelationJoined(about(r, "replica", "db", Some("db/0")))
            ),
            on(
                "twin/0",
                Hook::RelationChanged(about(r, "replica", "db", Some("db/0")))
            ),
        ]
    );
}

pub(crate) async fn deploy_adds_units_and_peer_relations_in_one_step(store: &dyn Store) {
    let mut web = app(
        "web",
        vec![
            endpoint("db", RelationRole::Requires, "pgsql"),
            endpoint("cluster", RelationRole::Peers, "web-peers"),
        ],
    );
    web.config = texts(&[("port", "8080")]);
    let deployed = store.deploy(web.clone(), 2).await.unwrap();
    assert_eq!(deployed.units, ["web/0", "web/1"]);
    assert_eq!(deployed.relations.len(), 1);
    assert_eq!(deployed.relations[0].endpoints, [side("web", "cluster")]);
    // Settings are typed as the charm declares them.
    assert_eq!(
        store.application("web").await.unwrap().config,
        BTreeMap::from([("port".to_string(), ConfigValue::Int(8080))])
    );
    let queue = hooks_of(&store.queued("web/1").await.unwrap());
    let p = deployed.relations[0].id;
    // Juju's order: the peer relation is created after install, before start.
    assert_eq!(
        queue[..4],
        [
            Hook::Install,
            Hook::RelationCreated(about(p, "cluster", "web", None)),
            Hook::ConfigChanged,
            Hook::Start
        ]
    );
    assert!(queue.contains(&Hook::RelationJoined(about(
        p,
        "cluster",
        "web",
        Some("web/0")
    ))));

    let before = fingerprint(store).await;
    let refuse = |e: StoreError| {
        assert!(
            matches!(e, StoreError::Invalid(_) | StoreError::AlreadyExists(_)),
            "{e:?}"
        )
    };
    refuse(store.deploy(web.clone(), 1).await.unwrap_err());
    let mut bad = web.clone();
    bad.name = "Web".into();
    refuse(store.deploy(bad, 1).await.unwrap_err());
    let mut bad = web.clone();
    bad.name = "web2".into();
    bad.config = texts(&[("port", "eighty")]);
    refuse(store.deploy(bad, 1).await.unwrap_err());
    refuse(store.add_units("web", 0).await.unwrap_err());
    assert_eq!(
        store.add_units("nope", 1).await.unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
    // All the named units or none.
    assert_eq!(
        store
            .remove_units(vec!["web/0".into(), "web/7".into()])
            .await
            .unwrap_err(),
        StoreError::NotFound("unit web/7".into())
    );
    refuse(
        store
            .remove_units(vec!["web/0".into(), "web/0".into()])
            .await
            .unwrap_err(),
    );
    assert_eq!(
        fingerprint(store).await,
        before,
        "a refused change changed the model"
    );
    assert_eq!(store.add_units("web", 2).await.unwrap(), ["web/2", "web/3"]);
}

pub(crate) async fn show_unit_and_resolved(store: &dyn Store) {
    let m = deploy(store).await;
    settle(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    let details = store.unit_details("web/0").await.unwrap();
    assert!(details.leader);
    assert!(!details.dying);
    assert_eq!(details.workload_version, "1.2.3");
    assert_eq!(details.snapshot.leader_data["secret"], "s3cret");
    assert_eq!(details.snapshot.stored["installed"], "yes");
    assert_eq!(
        details.snapshot.relations[&m.web_db.id].unit_bags["web/0"]["host"],
        "web-0"
    );
    assert_eq!(details.hook_error, None);
    assert_eq!(
        store.unit_details("web/9").await.unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );

    // Not in error: nothing to resolve, and nothing changes.
    let before = fingerprint(store).await;
    let err = store.resolve_unit("web/1", true).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid(m) if m.contains("web/1") && m.contains("not in error")),
        "{err:?}"
    );
    assert_eq!(fingerprint(store).await, before);

    // In error on its first queued hook: retried, it stays queued; skipped, it goes.
    settle(store).await;
    store
        .enqueue(vec![
            on("web/1", Hook::UpdateStatus),
            on("web/1", Hook::ConfigChanged),
        ])
        .await
        .unwrap();
    store
        .set_hook_error("web/1", Some("hook failed: \"update-status\"".into()))
        .await
        .unwrap();
    let details = store.unit_details("web/1").await.unwrap();
    assert_eq!(details.queued, [Hook::UpdateStatus, Hook::ConfigChanged]);
    assert!(details.hook_error.unwrap().contains("update-status"));
    assert_eq!(
        store.resolve_unit("web/1", true).await.unwrap(),
        Some(Hook::UpdateStatus)
    );
    let details = store.unit_details("web/1").await.unwrap();
    assert_eq!(details.hook_error, None);
    assert_eq!(details.queued, [Hook::UpdateStatus, Hook::ConfigChanged]);
    store
        .set_hook_error("web/1", Some("failed again".into()))
        .await
        .unwrap();
    assert_eq!(
        store.resolve_unit("web/1", false).await.unwrap(),
        Some(Hook::UpdateStatus)
    );
    let details = store.unit_details("web/1").await.unwrap();
    assert_eq!(details.hook_error, None);
    assert_eq!(details.queued, [Hook::ConfigChanged]);
    // A unit being removed says so.
    store.remove_unit("web/2").await.unwrap();
    assert!(store.unit_details("web/2").await.unwrap().dying);
}

pub(crate) async fn charm_logs_are_kept_per_unit_in_a_bounded_ring(store: &dyn Store) {
    deploy(store).await;
    let line = |unit: &str, hook: &str, at_ms: u64, message: &str| LogRecord {
        seq: 0,
        unit: unit.into(),
        hook: hook.into(),
        at_ms,
        level: "info".into(),
        message: message.into(),
    };
    store
        .record_logs(
            "web/0",
            vec![
                line("web/0", "install", 10, "a"),
                line("web/0", "install", 10, "b"),
            ],
        )
        .await
        .unwrap();
    store
        .record_logs("db/0", vec![line("db/0", "start", 20, "c")])
        .await
        .unwrap();
    let all = store.debug_log(None, 10).await.unwrap();
    let messages: Vec<&str> = all.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages, ["a", "b", "c"]);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq), "{all:?}");
    assert_eq!(all[2].unit, "db/0");
    assert_eq!(all[2].hook, "start");
    let last = store.debug_log(Some("web/0"), 1).await.unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].message, "b");
    assert_eq!(
        store.debug_log(Some("web/9"), 5).await.unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );
    assert_eq!(
        store.record_logs("web/9", vec![]).await.unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );
    // The ring keeps the newest lines.
    let many: Vec<LogRecord> = (0..LOG_RING + 5)
        .map(|i| line("web/1", "update-status", 30, &i.to_string()))
        .collect();
    store.record_logs("web/1", many).await.unwrap();
    let kept = store.debug_log(Some("web/1"), usize::MAX).await.unwrap();
    assert_eq!(kept.len(), LOG_RING);
    assert_eq!(kept[0].message, "5");
    assert_eq!(kept.last().unwrap().message, (LOG_RING + 4).to_string());
    // A removed unit's lines go with it.
    store.remove_unit("web/0").await.unwrap();
    settle(store).await;
    let left: Vec<String> = store
        .debug_log(None, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.unit)
        .collect();
    assert!(!left.iter().any(|u| u == "web/0"), "{left:?}");
    assert!(left.iter().any(|u| u == "db/0"));
}
