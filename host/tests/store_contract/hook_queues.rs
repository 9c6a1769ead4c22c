//! Hook queues: what each change queues, coalescing, and a queued hook committed once;
//! what a hook read, and what makes its commit stale.

use super::*;

/// Every unit `deploy` adds.
pub(crate) const ALL_UNITS: [&str; 5] = ["db/0", "other/0", "web/0", "web/1", "web/2"];

pub(crate) fn on(unit: &str, hook: Hook) -> (String, Hook) {
    (unit.to_string(), hook)
}

pub(crate) fn about(
    id: u32,
    endpoint: &str,
    remote_app: &str,
    remote_unit: Option<&str>,
) -> RelationHook {
    RelationHook {
        id,
        endpoint: endpoint.into(),
        remote_app: remote_app.into(),
        remote_unit: remote_unit.map(str::to_string),
    }
}

/// Each queued hook's unit and hook, without its seq.
pub(crate) fn units_and_hooks(queue: &[QueuedHook]) -> Vec<(String, Hook)> {
    queue
        .iter()
        .map(|q| (q.unit.clone(), q.hook.clone()))
        .collect()
}

pub(crate) fn hooks_of(queue: &[QueuedHook]) -> Vec<Hook> {
    queue.iter().map(|q| q.hook.clone()).collect()
}

pub(crate) fn assert_increasing(queue: &[QueuedHook]) {
    assert!(
        queue.windows(2).all(|w| w[0].seq < w[1].seq),
        "seqs do not increase: {queue:?}"
    );
}

/// Every unit's queue, by unit.
pub(crate) async fn all_queues(
    store: &dyn Store,
    units: &[&str],
) -> BTreeMap<String, Vec<QueuedHook>> {
    let mut queues = BTreeMap::new();
    for unit in units {
        queues.insert(unit.to_string(), store.queued(unit).await.unwrap());
    }
    queues
}

/// Commits every hook queued on `units`, writing nothing, so their queues are empty.
pub(crate) async fn drain(store: &dyn Store, units: &[&str]) {
    for unit in units {
        for q in store.queued(unit).await.unwrap() {
            let done = store
                .commit(unit, Some(q.seq), &Changes::default(), None)
                .await
                .unwrap();
            assert_eq!(done, Committed::default(), "an empty commit did something");
        }
        assert_eq!(store.queued(unit).await.unwrap(), [], "{unit} not drained");
    }
}

/// A change that fires hooks on many units (more than the etcd store queues within the
/// change's own transaction: it leaves them in an outbox, moved into the queues by bounded
/// follow-up transactions) queues every one of them, coalesced as hooks on a few units are:
/// relation-joined and the first relation-changed about each remote unit always; a
/// relation-changed equal to one already waiting behind the head of the queue is not
/// queued again.
pub(crate) async fn hooks_on_many_units_are_all_queued_and_coalesced(store: &dyn Store) {
    const UNITS: usize = 100;
    let requires = vec![endpoint("db", RelationRole::Requires, "pgsql")];
    store.add_application(app("big", requires)).await.unwrap();
    let provides = vec![endpoint("db", RelationRole::Provides, "pgsql")];
    store.add_application(app("db", provides)).await.unwrap();
    let mut big = Vec::new();
    for _ in 0..UNITS {
        big.push(store.add_unit("big").await.unwrap());
    }
    store.add_unit("db").await.unwrap();
    let (rel, _) = store
        .add_relation("pgsql", vec![side("big", "db"), side("db", "db")])
        .await
        .unwrap();
    let joined_db0 = Hook::RelationJoined(about(rel.id, "db", "db", Some("db/0")));
    let changed_db0 = Hook::RelationChanged(about(rel.id, "db", "db", Some("db/0")));
    let count = |hooks: &[Hook], hook: &Hook| hooks.iter().filter(|h| *h == hook).count();
    for unit in &big {
        let queue = store.queued(unit).await.unwrap();
        assert_increasing(&queue);
        let hooks = hooks_of(&queue);
        assert_eq!(count(&hooks, &joined_db0), 1, "{unit}: {hooks:?}");
        assert_eq!(count(&hooks, &changed_db0), 1, "{unit}: {hooks:?}");
    }
    let db0 = hooks_of(&store.queued("db/0").await.unwrap());
    for unit in &big {
        let joined = Hook::RelationJoined(about(rel.id, "db", "big", Some(unit)));
        let changed = Hook::RelationChanged(about(rel.id, "db", "big", Some(unit)));
        assert_eq!(count(&db0, &joined), 1, "db/0 on {unit}");
        assert_eq!(count(&db0, &changed), 1, "db/0 on {unit}");
    }

    // db/0's bag changes three times: each unit of big hears of it once at its head, then
    // once behind it; the third change coalesces with the second.
    let mut units: Vec<&str> = big.iter().map(String::as_str).collect();
    units.push("db/0");
    drain(store, &units).await;
    let mut seqs = BTreeMap::new();
    for value in ["a", "b", "c"] {
        let changes = Changes {
            unit_bags: BTreeMap::from([(rel.id, writes(&[("host", Some(value))]))]),
            ..Changes::default()
        };
        let done = store.commit("db/0", None, &changes, None).await.unwrap();
        assert_eq!(done.receipt.unit_bags_changed, [rel.id]);
        for q in &done.queued {
            assert_eq!(q.hook, changed_db0);
        }
        for unit in &big {
            let queue = store.queued(unit).await.unwrap();
            assert_increasing(&queue);
            assert!(
                queue.iter().all(|q| q.hook == changed_db0),
                "{unit}: {queue:?}"
            );
            let was = seqs.insert(unit.clone(), queue.clone());
            match value {
                "a" => assert_eq!(queue.len(), 1, "{unit}"),
                "b" => {
                    assert_eq!(queue.len(), 2, "{unit}");
                    assert_eq!(queue[0], was.unwrap()[0], "{unit}: the head moved");
                }
                _ => assert_eq!(Some(queue), was, "{unit}: not coalesced"),
            }
        }
    }
}

/// A relation between applications of many units, removed (the etcd store queues its
/// relation-departed and -broken hooks through an outbox), stays until the last unit's
/// relation-broken has run, and goes then: so does one removed with an application by
/// `remove-application --force`. No unit is left with a hook about a relation that is gone.
pub(crate) async fn a_relation_of_many_units_stays_until_its_last_relation_broken(
    store: &dyn Store,
) {
    const BIG: usize = 12;
    let requires = vec![endpoint("db", RelationRole::Requires, "pgsql")];
    store.add_application(app("big", requires)).await.unwrap();
    let provides = vec![endpoint("db", RelationRole::Provides, "pgsql")];
    store.add_application(app("db", provides)).await.unwrap();
    let mut units = Vec::new();
    for _ in 0..BIG {
        units.push(store.add_unit("big").await.unwrap());
    }
    for _ in 0..3 {
        units.push(store.add_unit("db").await.unwrap());
    }
    let units: Vec<&str> = units.iter().map(String::as_str).collect();
    let exists = async |id| store.relations().await.unwrap().iter().any(|r| r.id == id);
    // Runs a unit's queue out, until it is empty or the unit is gone (its remove ran).
    let run_out = async |unit: &str| {
        loop {
            let queue = match store.queued(unit).await {
                Err(StoreError::NotFound(_)) => return,
                queue => queue.unwrap(),
            };
            let Some(q) = queue.first() else { return };
            store
                .commit(unit, Some(q.seq), &Changes::default(), None)
                .await
                .unwrap();
        }
    };

    for force in [false, true] {
        let (rel, _) = store.relate("big", "db").await.unwrap();
        drain(store, &units).await;
        let id = if force {
            let removal = store.remove_application("big", true).await.unwrap();
            assert_eq!(removal.relations.len(), 1);
            removal.relations[0].id
        } else {
            store.remove_relation("big:db", "db").await.unwrap().0.id
        };
        assert_eq!(id, rel.id);
        assert!(
            exists(id).await,
            "gone before any relation-broken ran (force: {force})"
        );
        for unit in &units {
            let queue = hooks_of(&store.queued(unit).await.unwrap());
            assert!(
                queue
                    .iter()
                    .any(|h| matches!(h, Hook::RelationBroken(r) if r.id == id)),
                "{unit} has no relation-broken queued: {queue:?}"
            );
        }
        // Every unit but the last runs its queue: the relation stays for the last.
        let (last, others) = units.split_last().unwrap();
        for unit in others {
            run_out(unit).await;
        }
        assert!(
            exists(id).await,
            "gone before {last}'s relation-broken (force: {force})"
        );
        run_out(last).await;
        assert!(
            !exists(id).await,
            "outlived its last relation-broken (force: {force})"
        );
    }
    assert!(
        !store
            .applications()
            .await
            .unwrap()
            .iter()
            .any(|a| a.name == "big"),
        "big outlived its last unit"
    );
}

pub(crate) fn app(name: &str, relations: Vec<EndpointMeta>) -> ApplicationRecord {
    ApplicationRecord {
        name: name.into(),
        charm: format!("charms/{name}.wasm"),
        metadata: metadata(name, relations),
        config: BTreeMap::new(),
        module: None,
    }
}

pub(crate) async fn add_unit_queues_deploy_hooks(store: &dyn Store) {
    deploy(store).await;
    let before = all_queues(store, &ALL_UNITS).await;
    for queue in before.values() {
        assert_eq!(
            hooks_of(&queue[..3]),
            [Hook::Install, Hook::ConfigChanged, Hook::Start],
            "a deployed unit's first hooks"
        );
        assert_increasing(queue);
    }
    let highest = before.values().flatten().map(|q| q.seq).max().unwrap();

    assert_eq!(store.add_unit("other").await.unwrap(), "other/1");
    let queue = store.queued("other/1").await.unwrap();
    // As Juju: relation-created before config-changed, joined and changed after start.
    let mine = |u: Option<&str>| about(3, "db", "db", u);
    assert_eq!(
        hooks_of(&queue),
        [
            Hook::Install,
            Hook::RelationCreated(mine(None)),
            Hook::ConfigChanged,
            Hook::Start,
            Hook::RelationJoined(mine(Some("db/0"))),
            Hook::RelationChanged(mine(Some("db/0"))),
        ],
        "a new unit of a related application"
    );
    assert!(queue.iter().all(|q| q.unit == "other/1"), "{queue:?}");
    assert_increasing(&queue);
    assert!(queue[0].seq > highest, "a seq was reused: {queue:?}");
    let mut after = all_queues(store, &ALL_UNITS).await;
    let db_got: Vec<_> = after
        .get_mut("db/0")
        .unwrap()
        .split_off(before["db/0"].len());
    assert_eq!(
        after, before,
        "a queue changed other than the new unit's remote units"
    );
    assert!(
        db_got.iter().all(|q| q.seq > highest),
        "a seq was reused: {db_got:?}"
    );
    let about_new = about(3, "db", "other", Some("other/1"));
    assert_eq!(
        hooks_of(&db_got),
        [
            Hook::RelationJoined(about_new.clone()),
            Hook::RelationChanged(about_new)
        ],
        "the remote side hears the new unit join"
    );
    assert_eq!(
        store.queued("web/9").await.unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );
}

pub(crate) async fn add_relation_queues_relation_hooks(store: &dyn Store) {
    store
        .add_application(app(
            "a",
            vec![
                endpoint("db", RelationRole::Requires, "x"),
                endpoint("peer", RelationRole::Peers, "a-peers"),
            ],
        ))
        .await
        .unwrap();
    store
        .add_application(app(
            "b",
            vec![endpoint("server", RelationRole::Provides, "x")],
        ))
        .await
        .unwrap();
    for unit in ["a", "a", "b"] {
        store.add_unit(unit).await.unwrap();
    }
    drain(store, &["a/0", "a/1", "b/0"]).await;

    let (rel, queued) = store
        .add_relation("x", vec![side("a", "db"), side("b", "server")])
        .await
        .unwrap();
    let r = rel.id;
    let (created, joined, changed) = (
        Hook::RelationCreated,
        Hook::RelationJoined,
        Hook::RelationChanged,
    );
    // By hand: on each unit of each side, created, then joined and changed per remote unit.
    let a_side = |u: Option<&str>| about(r, "db", "b", u);
    let b_side = |u: Option<&str>| about(r, "server", "a", u);
    assert_eq!(
        units_and_hooks(&queued),
        [
            on("a/0", created(a_side(None))),
            on("a/0", joined(a_side(Some("b/0")))),
            on("a/0", changed(a_side(Some("b/0")))),
            on("a/1", created(a_side(None))),
            on("a/1", joined(a_side(Some("b/0")))),
            on("a/1", changed(a_side(Some("b/0")))),
            on("b/0", created(b_side(None))),
            on("b/0", joined(b_side(Some("a/0")))),
            on("b/0", changed(b_side(Some("a/0")))),
            on("b/0", joined(b_side(Some("a/1")))),
            on("b/0", changed(b_side(Some("a/1")))),
        ]
    );
    // And as routing says.
    let units = BTreeMap::from([
        ("a".to_string(), vec!["a/0".to_string(), "a/1".to_string()]),
        ("b".to_string(), vec!["b/0".to_string()]),
    ]);
    let units_of = |app: &str| units.get(app).cloned().unwrap_or_default().into();
    assert_eq!(
        units_and_hooks(&queued),
        routing::relation_hooks(&rel, units_of)
    );
    assert_increasing(&queued);
    for unit in ["a/0", "a/1", "b/0"] {
        let mine: Vec<_> = queued.iter().filter(|q| q.unit == unit).cloned().collect();
        assert_eq!(store.queued(unit).await.unwrap(), mine, "{unit}");
    }

    // The same endpoints in the other order are the same relation: refused, nothing queued.
    let before = all_queues(store, &["a/0", "a/1", "b/0"]).await;
    let err = store
        .add_relation("x", vec![side("b", "server"), side("a", "db")])
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::AlreadyExists(format!("relation {r}")));
    assert_eq!(all_queues(store, &["a/0", "a/1", "b/0"]).await, before);
    assert_eq!(store.relations().await.unwrap(), [rel]);

    // A peer relation: each unit joins the others, not itself; b hears nothing.
    drain(store, &["a/0", "a/1", "b/0"]).await;
    let (peers, queued) = store
        .add_relation("a-peers", vec![side("a", "peer")])
        .await
        .unwrap();
    let p = |u: Option<&str>| about(peers.id, "peer", "a", u);
    assert_eq!(
        units_and_hooks(&queued),
        [
            on("a/0", created(p(None))),
            on("a/0", joined(p(Some("a/1")))),
            on("a/0", changed(p(Some("a/1")))),
            on("a/1", created(p(None))),
            on("a/1", joined(p(Some("a/0")))),
            on("a/1", changed(p(Some("a/0")))),
        ]
    );
    assert_eq!(store.queued("b/0").await.unwrap(), []);
}

pub(crate) async fn enqueue_coalesces_behind_the_head(store: &dyn Store) {
    store.add_application(app("solo", vec![])).await.unwrap();
    store.add_unit("solo").await.unwrap();
    let deployed = store.queued("solo/0").await.unwrap();
    assert_eq!(
        hooks_of(&deployed),
        [Hook::Install, Hook::ConfigChanged, Hook::Start]
    );

    let queued = store
        .enqueue(vec![
            // Equal only to the head, which may be running already: queued.
            on("solo/0", Hook::Install),
            // Equal to one waiting behind the head: coalesced.
            on("solo/0", Hook::ConfigChanged),
            on("solo/0", Hook::UpdateStatus),
            // Equal to the one this call just queued: coalesced.
            on("solo/0", Hook::UpdateStatus),
        ])
        .await
        .unwrap();
    assert_eq!(hooks_of(&queued), [Hook::Install, Hook::UpdateStatus]);
    assert!(queued.iter().all(|q| q.unit == "solo/0"));
    let queue = store.queued("solo/0").await.unwrap();
    assert_eq!(
        hooks_of(&queue),
        [
            Hook::Install,
            Hook::ConfigChanged,
            Hook::Start,
            Hook::Install,
            Hook::UpdateStatus
        ]
    );
    assert_eq!(queue[..3], deployed[..]);
    assert_eq!(
        queue[3..],
        queued[..],
        "the returned hooks are the ones queued"
    );
    assert_increasing(&queue);

    // An unknown unit anywhere in the call: nothing of it is queued.
    let err = store
        .enqueue(vec![on("solo/0", Hook::Stop), on("ghost/0", Hook::Stop)])
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::NotFound("unit ghost/0".into()));
    assert_eq!(store.queued("solo/0").await.unwrap(), queue);
    assert_eq!(store.enqueue(vec![]).await.unwrap(), []);

    // Once install is done, config-changed is the head: an equal hook is queued behind it.
    store
        .commit("solo/0", Some(queue[0].seq), &Changes::default(), None)
        .await
        .unwrap();
    let queued = store
        .enqueue(vec![on("solo/0", Hook::ConfigChanged)])
        .await
        .unwrap();
    assert_eq!(hooks_of(&queued), [Hook::ConfigChanged]);
    assert!(queued[0].seq > queue[4].seq, "a seq was reused");
}

pub(crate) async fn committing_a_queued_hook_applies_it_once(store: &dyn Store) {
    deploy(store).await;
    let queue = store.queued("web/1").await.unwrap();
    let (install, config) = (queue[0].seq, queue[1].seq);
    let runs = |n: &str| Changes {
        stored: writes(&[("runs", Some(n))]),
        ..Changes::default()
    };

    let done = store
        .commit("web/1", Some(install), &runs("1"), None)
        .await
        .unwrap();
    assert_eq!(done, Committed::default(), "stored state fires nothing");
    assert_eq!(store.queued("web/1").await.unwrap(), queue[1..]);

    // The same hook again, as a host that crashed before it saw its commit would run it.
    let err = store
        .commit("web/1", Some(install), &runs("2"), None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CommitError::NotQueued {
            unit: "web/1".into(),
            seq: install
        }
    );
    assert_eq!(store.snapshot("web/1").await.unwrap().stored["runs"], "1");
    assert_eq!(store.queued("web/1").await.unwrap(), queue[1..]);

    // Another unit's hook, and a seq never issued.
    for (unit, seq) in [("web/2", config), ("web/1", u64::MAX)] {
        let err = store
            .commit(unit, Some(seq), &runs("x"), None)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            CommitError::NotQueued {
                unit: unit.into(),
                seq
            }
        );
    }
    assert!(store.snapshot("web/2").await.unwrap().stored.is_empty());
    assert_eq!(store.snapshot("web/1").await.unwrap().stored["runs"], "1");
    assert_eq!(store.queued("web/1").await.unwrap(), queue[1..]);

    // A hook that wrote nothing: its commit only takes it off the queue.
    let done = store
        .commit("web/1", Some(config), &Changes::default(), None)
        .await
        .unwrap();
    assert_eq!(done, Committed::default());
    assert_eq!(store.queued("web/1").await.unwrap(), queue[2..]);
}

pub(crate) async fn commits_queue_the_hooks_they_fire(store: &dyn Store) {
    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let host = |v: &str| Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("host", Some(v))]))]),
        ..Changes::default()
    };
    let about_web0 = Hook::RelationChanged(about(m.web_db.id, "db", "web", Some("web/0")));

    // web/0's bag in web-db changed: db/0 hears of it, and nobody else.
    let first = store.commit("web/0", None, &host("a"), None).await.unwrap();
    assert_eq!(first.receipt.unit_bags_changed, [m.web_db.id]);
    assert_eq!(
        units_and_hooks(&first.queued),
        [on("db/0", about_web0.clone())]
    );
    assert_eq!(store.queued("db/0").await.unwrap(), first.queued);
    for unit in ["other/0", "web/0", "web/1", "web/2"] {
        assert_eq!(store.queued(unit).await.unwrap(), [], "{unit}");
    }

    // The same value again: no bag changed, no hook queued.
    let same = store.commit("web/0", None, &host("a"), None).await.unwrap();
    assert_eq!(same, Committed::default());
    assert_eq!(store.queued("db/0").await.unwrap(), first.queued);

    // A new value while db/0's relation-changed is at the head: queued behind it. Another:
    // coalesced with that one, though the bag changed.
    let second = store.commit("web/0", None, &host("b"), None).await.unwrap();
    assert_eq!(
        units_and_hooks(&second.queued),
        [on("db/0", about_web0.clone())]
    );
    assert!(second.queued[0].seq > first.queued[0].seq);
    let third = store.commit("web/0", None, &host("c"), None).await.unwrap();
    assert_eq!(third.receipt.unit_bags_changed, [m.web_db.id]);
    assert_eq!(third.queued, []);
    assert_eq!(
        store.queued("db/0").await.unwrap(),
        [first.queued[0].clone(), second.queued[0].clone()]
    );

    // The leader writes both application bags and the leader settings: db/0 hears of web's
    // bag, the other web units of the peer bag and of the settings.
    drain(store, &ALL_UNITS).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let leader = Changes {
        app_bags: BTreeMap::from([
            (m.web_db.id, writes(&[("database", Some("web"))])),
            (m.peers.id, writes(&[("cluster", Some("c1"))])),
        ]),
        leader_data: writes(&[("secret", Some("s"))]),
        ..Changes::default()
    };
    let done = store
        .commit("web/0", None, &leader, Some(&fence))
        .await
        .unwrap();
    let peers_changed = Hook::RelationChanged(about(m.peers.id, "cluster", "web", None));
    assert!(m.web_db.id < m.peers.id);
    assert_eq!(
        units_and_hooks(&done.queued),
        [
            on(
                "db/0",
                Hook::RelationChanged(about(m.web_db.id, "db", "web", None))
            ),
            on("web/1", peers_changed.clone()),
            on("web/2", peers_changed.clone()),
            on("web/1", Hook::LeaderSettingsChanged),
            on("web/2", Hook::LeaderSettingsChanged),
        ]
    );
    assert_increasing(&done.queued);
    for unit in ALL_UNITS {
        let mine: Vec<_> = done
            .queued
            .iter()
            .filter(|q| q.unit == unit)
            .cloned()
            .collect();
        assert_eq!(store.queued(unit).await.unwrap(), mine, "{unit}");
    }

    // A peer's unit bag: the other peers hear of it, not the writer.
    drain(store, &ALL_UNITS).await;
    let peer = Changes {
        unit_bags: BTreeMap::from([(m.peers.id, writes(&[("peer", Some("1"))]))]),
        ..Changes::default()
    };
    let done = store.commit("web/1", None, &peer, None).await.unwrap();
    let about_web1 = Hook::RelationChanged(about(m.peers.id, "cluster", "web", Some("web/1")));
    assert_eq!(
        units_and_hooks(&done.queued),
        [on("web/0", about_web1.clone()), on("web/2", about_web1)]
    );
    assert_eq!(store.queued("web/1").await.unwrap(), []);
}

pub(crate) async fn fenced_out_commit_keeps_its_hook_queued(store: &dyn Store) {
    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let queued = store
        .enqueue(vec![on("web/0", Hook::UpdateStatus)])
        .await
        .unwrap();
    let seq = queued[0].seq;
    let stale = hold(store, "web", "web/0", LONG).await;
    store.release("web", "web/0").await.unwrap();
    let current = hold(store, "web", "web/0", LONG).await;
    let before = all_queues(store, &ALL_UNITS).await;

    let err = store
        .commit("web/0", Some(seq), &leader_hook(&m), Some(&stale))
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Fenced { fence: stale });
    let err = store
        .commit("web/0", Some(seq), &leader_hook(&m), None)
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Unfenced);
    assert_eq!(
        all_queues(store, &ALL_UNITS).await,
        before,
        "a refused commit dequeued its hook or queued others"
    );
    assert_nothing_applied(store, &m).await;

    // Under the current fence the same hook commits, and fires what its writes fire.
    let done = store
        .commit("web/0", Some(seq), &leader_hook(&m), Some(&current))
        .await
        .unwrap();
    assert!(done.receipt.leader_data_changed);
    assert_eq!(store.queued("web/0").await.unwrap(), []);
    // db/0 hears of web/0's bag and of web's; the other web units of the settings.
    assert_eq!(
        units_and_hooks(&done.queued),
        [
            on(
                "db/0",
                Hook::RelationChanged(about(m.web_db.id, "db", "web", Some("web/0")))
            ),
            on(
                "db/0",
                Hook::RelationChanged(about(m.web_db.id, "db", "web", None))
            ),
            on("web/1", Hook::LeaderSettingsChanged),
            on("web/2", Hook::LeaderSettingsChanged),
        ]
    );
}

/// A commit checked against what its hook read ([`HookCommit::read`]).
pub(crate) fn checked<'a>(
    unit: &'a str,
    hook: Option<u64>,
    changes: &'a Changes,
    fence: Option<&'a Fence>,
    read: &'a HookRead,
) -> HookCommit<'a> {
    HookCommit {
        unit,
        hook,
        changes,
        fence,
        read: Some(read),
        owner: None,
    }
}

/// A change made between a hook's snapshot and its commit, the `n`th of the test.
pub(crate) type ChangeUnderTheHook<'a> = Box<dyn Fn(u32) -> Changes + 'a>;

pub(crate) async fn a_commit_whose_hook_read_changed_is_stale_and_applies_nothing(
    store: &dyn Store,
) {
    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let (web_db, peers) = (m.web_db.id, m.peers.id);
    let counter = |n: &str| Changes {
        leader_data: writes(&[("counter", Some(n))]),
        stored: writes(&[("seen", Some(n))]),
        ..Changes::default()
    };
    let spec = |n: u32| {
        Arc::new(PodSpecWrite::new(
            json!({"containers": [{"name": "web", "n": n}]}),
            None,
        ))
    };
    // Each input of web/0's hooks, changed by another commit or by the operator between
    // the hook's snapshot and its commit.
    let changes_under_the_hook: Vec<(&str, ChangeUnderTheHook<'_>, &str)> = vec![
        (
            "leader data",
            Box::new(|n| counter(&n.to_string())),
            "web/0",
        ),
        (
            "a remote unit's bag",
            Box::new(move |n| Changes {
                unit_bags: BTreeMap::from([(web_db, writes(&[("n", Some(&n.to_string()))]))]),
                ..Changes::default()
            }),
            "db/0",
        ),
        (
            "a peer's bag",
            Box::new(move |n| Changes {
                unit_bags: BTreeMap::from([(peers, writes(&[("n", Some(&n.to_string()))]))]),
                ..Changes::default()
            }),
            "web/2",
        ),
        (
            "its own stored state",
            Box::new(|n| Changes {
                stored: writes(&[("by-twin", Some(&n.to_string()))]),
                ..Changes::default()
            }),
            "web/0",
        ),
        (
            "the pod spec",
            Box::new(move |n| Changes {
                pod_spec: Some(spec(n)),
                ..Changes::default()
            }),
            "web/0",
        ),
    ];
    for (n, (what, change, by)) in changes_under_the_hook.iter().enumerate() {
        let n = n as u32 + 1;
        let seq = store
            .enqueue(vec![on("web/0", Hook::UpdateStatus)])
            .await
            .unwrap()[0]
            .seq;
        let read = store.hook_read("web/0").await.unwrap();
        let between = change(n);
        let by_fence = (*by == "web/0").then_some(&fence);
        store.commit(by, None, &between, by_fence).await.unwrap();
        let before = store.hook_read("web/0").await.unwrap();

        let late = counter("late");
        let err = store
            .commit_hook(checked("web/0", Some(seq), &late, Some(&fence), &read))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            CommitError::Stale {
                unit: "web/0".into()
            },
            "{what}"
        );
        assert_eq!(
            store.hook_read("web/0").await.unwrap(),
            before,
            "{what}: applied"
        );
        assert_eq!(store.queued("web/0").await.unwrap()[0].seq, seq, "{what}");

        // Run again on fresh data, the hook commits.
        let fresh = store.hook_read("web/0").await.unwrap();
        store
            .commit_hook(checked("web/0", Some(seq), &late, Some(&fence), &fresh))
            .await
            .unwrap();
        assert_eq!(
            store.snapshot("web/0").await.unwrap().leader_data["counter"],
            "late"
        );
        drain(store, &ALL_UNITS).await;
    }

    // The operator's config change is read too.
    let read = store.hook_read("web/0").await.unwrap();
    store
        .set_config("web", texts(&[("greeting", "hey")]), vec![])
        .await
        .unwrap();
    let err = store
        .commit_hook(checked("web/0", None, &counter("cfg"), Some(&fence), &read))
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Stale { .. }), "config: {err:?}");
}

pub(crate) async fn unit_bags_carry_the_network_keys_juju_sets(store: &dyn Store) {
    use charm_host::model::network::unit_address;

    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let model = store.model_name().to_string();
    let snapshot = store.snapshot("web/0").await.unwrap();
    let view = &snapshot.relations[&m.web_db.id];
    for unit in ["web/0", "db/0"] {
        let bag = &view.unit_bags[unit];
        let address = unit_address(&model, unit);
        assert_eq!(bag["ingress-address"], address, "{unit}");
        assert_eq!(bag["private-address"], address, "{unit}");
        // A DNS name gives no egress subnets.
        assert!(!bag.contains_key("egress-subnets"), "{unit}: {bag:?}");
    }
    assert_eq!(
        view.unit_bags["db/0"]["ingress-address"],
        format!("db-0.db-endpoints.{model}.svc.cluster.local")
    );
    // A bag read as the hook asks carries them too, so that its commit's check agrees.
    let bag = store.unit_bag(m.web_db.id, "db/0").await.unwrap();
    assert_eq!(bag["ingress-address"], unit_address(&model, "db/0"));

    // A charm's own value stays; the keys it did not write keep the host's.
    let publish = Changes {
        unit_bags: BTreeMap::from([(
            m.web_db.id,
            writes(&[("ingress-address", Some("10.0.0.5"))]),
        )]),
        ..Changes::default()
    };
    store.commit("db/0", None, &publish, None).await.unwrap();
    let snapshot = store.snapshot("web/0").await.unwrap();
    let bag = &snapshot.relations[&m.web_db.id].unit_bags["db/0"];
    assert_eq!(bag["ingress-address"], "10.0.0.5");
    assert_eq!(bag["private-address"], unit_address(&model, "db/0"));
    // And a hook that read it commits: what it read is what the store reads now.
    let read = store.hook_read_lazily("web/0", 0).await.unwrap();
    let mut read = read;
    read.snapshot
        .relations
        .get_mut(&m.web_db.id)
        .unwrap()
        .unit_bags
        .insert(
            "db/0".into(),
            store.unit_bag(m.web_db.id, "db/0").await.unwrap(),
        );
    let fence = hold(store, "web", "web/0", LONG).await;
    store
        .commit_hook(checked(
            "web/0",
            None,
            &leader_hook(&m),
            Some(&fence),
            &read,
        ))
        .await
        .unwrap();
}

pub(crate) async fn a_hook_reads_remote_bags_as_it_asks_and_its_commit_checks_those_alone(
    store: &dyn Store,
) {
    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let db_writes = |n: &str| Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("n", Some(n))]))]),
        ..Changes::default()
    };
    store
        .commit("db/0", None, &db_writes("1"), None)
        .await
        .unwrap();

    // Without the remote units' bags; the remote units, its own bag and the applications'
    // bags are there.
    let read = store.hook_read_lazily("web/0", 0).await.unwrap();
    let full = store.hook_read("web/0").await.unwrap();
    let view = &read.snapshot.relations[&m.web_db.id];
    assert_eq!(view.unit_bags.keys().collect::<Vec<_>>(), ["web/0"]);
    assert_eq!(
        view.remote_units,
        full.snapshot.relations[&m.web_db.id].remote_units
    );
    assert_eq!(
        view.app_bags,
        full.snapshot.relations[&m.web_db.id].app_bags
    );
    assert_eq!(read.snapshot.leader_data, full.snapshot.leader_data);

    // A bag it did not read changes: its commit goes through.
    store
        .commit("db/0", None, &db_writes("2"), None)
        .await
        .unwrap();
    store
        .commit_hook(checked(
            "web/0",
            None,
            &leader_hook(&m),
            Some(&fence),
            &read,
        ))
        .await
        .unwrap();

    // A bag it read as it ran changes: its commit is stale, and applies nothing.
    let mut read2 = store.hook_read_lazily("web/0", 0).await.unwrap();
    let bag = store.unit_bag(m.web_db.id, "db/0").await.unwrap();
    assert_eq!(bag.get("n").map(String::as_str), Some("2"));
    // As the agent adds what the hook read to its snapshot.
    let with_bag = |read: &mut HookRead, bag| {
        let view = read.snapshot.relations.get_mut(&m.web_db.id).unwrap();
        view.unit_bags.insert("db/0".to_string(), bag);
    };
    with_bag(&mut read2, bag);
    store
        .commit("db/0", None, &db_writes("3"), None)
        .await
        .unwrap();
    let late = Changes {
        stored: writes(&[("late", Some("yes"))]),
        ..Changes::default()
    };
    let err = store
        .commit_hook(checked("web/0", None, &late, Some(&fence), &read2))
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Stale { .. }), "{err:?}");
    assert!(
        !store
            .snapshot("web/0")
            .await
            .unwrap()
            .stored
            .contains_key("late")
    );

    // Read again, with the bag as it is now, the same commit goes through.
    let mut fresh = store.hook_read_lazily("web/0", 0).await.unwrap();
    let bag = store.unit_bag(m.web_db.id, "db/0").await.unwrap();
    assert_eq!(bag.get("n").map(String::as_str), Some("3"));
    with_bag(&mut fresh, bag);
    store
        .commit_hook(checked("web/0", None, &late, Some(&fence), &fresh))
        .await
        .unwrap();
    assert_eq!(store.snapshot("web/0").await.unwrap().stored["late"], "yes");
    // A relation with as many remote units as `up_to`, or fewer, has their bags up front
    // (web/0 has one in `db`, two peers).
    let small = store.hook_read_lazily("web/0", 2).await.unwrap();
    assert_eq!(small, store.hook_read("web/0").await.unwrap());
    // A unit with no bag in the relation reads an empty one (but for the network keys).
    assert!(written(&store.unit_bag(m.web_db.id, "web/1").await.unwrap()).is_empty());
}

pub(crate) async fn what_a_hook_did_not_read_does_not_make_its_commit_stale(store: &dyn Store) {
    let m = deploy(store).await;
    drain(store, &ALL_UNITS).await;
    let web = hold(store, "web", "web/0", LONG).await;
    let db = hold(store, "db", "db/0", LONG).await;
    let read = store.hook_read("web/0").await.unwrap();
    // Another application's leader settings, a bag in a relation web is not in, another
    // unit's stored state, and the unit's own log ring.
    let elsewhere = [
        (
            "db/0",
            Some(&db),
            Changes {
                leader_data: writes(&[("other", Some("1"))]),
                ..Changes::default()
            },
        ),
        (
            "other/0",
            None,
            Changes {
                unit_bags: BTreeMap::from([(m.other_db.id, writes(&[("n", Some("1"))]))]),
                ..Changes::default()
            },
        ),
        (
            "web/1",
            None,
            Changes {
                stored: writes(&[("n", Some("1"))]),
                ..Changes::default()
            },
        ),
    ];
    for (unit, fence, changes) in &elsewhere {
        store.commit(unit, None, changes, *fence).await.unwrap();
    }
    let line = LogRecord {
        seq: 0,
        unit: "web/0".into(),
        hook: "update-status".into(),
        at_ms: 0,
        level: "info".into(),
        message: "hello".into(),
    };
    store.record_logs("web/0", vec![line]).await.unwrap();
    store
        .commit_hook(checked("web/0", None, &leader_hook(&m), Some(&web), &read))
        .await
        .unwrap();
    assert_eq!(
        store.snapshot("web/0").await.unwrap().leader_data["secret"],
        "s3cret"
    );
}

pub(crate) async fn elected_term_round_trips(store: &dyn Store) {
    deploy(store).await;
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, None);
    let fence = hold(store, "web", "web/0", Duration::from_secs(30)).await;
    let elected = |term: u64| Changes {
        elected_term: Some(term),
        ..Changes::default()
    };
    let done = store
        .commit("web/0", None, &elected(fence.term), Some(&fence))
        .await
        .unwrap();
    assert_eq!(done, Committed::default());
    let term = Some(fence.term);
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, term);
    assert_eq!(store.snapshot("web/1").await.unwrap().elected_term, None);
    // A leader's commit that does not set it keeps it.
    let other = Changes {
        stored: writes(&[("k", Some("v"))]),
        ..Changes::default()
    };
    store
        .commit("web/0", None, &other, Some(&fence))
        .await
        .unwrap();
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, term);
    // A hook run as a follower clears it: leader-elected is owed, even in this term.
    store.commit("web/0", None, &other, None).await.unwrap();
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, None);
    store
        .commit("web/0", None, &elected(fence.term), Some(&fence))
        .await
        .unwrap();
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, term);
}
