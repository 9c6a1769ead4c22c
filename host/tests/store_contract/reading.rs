//! What a hook's snapshot, `status` and the model's records show.

use super::*;

pub(crate) async fn snapshot_shows_what_a_hook_may_read(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    // Data from every side, written by each unit's own commit.
    let web_fence = hold(store, "web", "web/0", LONG).await;
    let db_fence = hold(store, "db", "db/0", LONG).await;
    let web0 = Changes {
        unit_bags: BTreeMap::from([
            (m.web_db.id, writes(&[("host", Some("web-0"))])),
            (m.peers.id, writes(&[("peer", Some("0"))])),
        ]),
        app_bags: BTreeMap::from([(m.peers.id, writes(&[("cluster", Some("c1"))]))]),
        leader_data: writes(&[("secret", Some("s"))]),
        app_status: Some(status(StatusKind::Active, "web up")),
        stored: writes(&[("mine", Some("0"))]),
        ..Changes::default()
    };
    store
        .commit("web/0", None, &web0, Some(&web_fence))
        .await
        .unwrap();
    let web2 = Changes {
        unit_bags: BTreeMap::from([(m.peers.id, writes(&[("peer", Some("2"))]))]),
        unit_status: Some(status(StatusKind::Blocked, "needs db")),
        stored: writes(&[("mine", Some("2"))]),
        ..Changes::default()
    };
    store.commit("web/2", None, &web2, None).await.unwrap();
    let db0 = Changes {
        unit_bags: BTreeMap::from([
            (m.web_db.id, writes(&[("dsn", Some("host=db"))])),
            (m.other_db.id, writes(&[("dsn", Some("for other"))])),
        ]),
        app_bags: BTreeMap::from([(m.web_db.id, writes(&[("version", Some("12"))]))]),
        ..Changes::default()
    };
    store
        .commit("db/0", None, &db0, Some(&db_fence))
        .await
        .unwrap();

    let snap = store.snapshot("web/2").await.unwrap();
    assert_eq!(
        (snap.model.as_str(), snap.unit.as_str(), snap.app.as_str()),
        ("test-model", "web/2", "web")
    );
    // Settings over defaults; an option without default and unset is absent.
    assert_eq!(
        *snap.config,
        BTreeMap::from([
            ("greeting".to_string(), ConfigValue::String("hi".into())),
            ("port".to_string(), ConfigValue::Int(80)),
        ])
    );
    assert_eq!(snap.relations.keys().copied().collect::<Vec<_>>(), {
        let mut ids = vec![m.web_db.id, m.peers.id];
        ids.sort();
        ids
    });

    let db = &snap.relations[&m.web_db.id];
    assert_eq!(
        (db.id, db.endpoint.as_str(), db.remote_app.as_str()),
        (m.web_db.id, "db", "db")
    );
    assert_eq!(db.remote_units[..], ["db/0"]);
    let empty = BTreeMap::new();
    assert_eq!(
        plain(&db.unit_bags),
        BTreeMap::from([
            (
                "db/0".to_string(),
                BTreeMap::from([("dsn".to_string(), "host=db".to_string())])
            ),
            ("web/2".to_string(), empty.clone()),
        ]),
        "only the remote units' and the unit's own bags, and not another relation's"
    );
    assert_eq!(
        plain(&db.app_bags),
        BTreeMap::from([
            (
                "db".to_string(),
                BTreeMap::from([("version".to_string(), "12".to_string())])
            ),
            ("web".to_string(), empty.clone()),
        ])
    );

    let peers = &snap.relations[&m.peers.id];
    assert_eq!(
        (peers.endpoint.as_str(), peers.remote_app.as_str()),
        ("cluster", "web")
    );
    assert_eq!(peers.remote_units[..], ["web/0", "web/1"]);
    assert_eq!(
        plain(&peers.unit_bags),
        BTreeMap::from([
            (
                "web/0".to_string(),
                BTreeMap::from([("peer".to_string(), "0".to_string())])
            ),
            ("web/1".to_string(), empty.clone()),
            (
                "web/2".to_string(),
                BTreeMap::from([("peer".to_string(), "2".to_string())])
            ),
        ])
    );
    assert_eq!(
        plain(&peers.app_bags),
        BTreeMap::from([(
            "web".to_string(),
            BTreeMap::from([("cluster".to_string(), "c1".to_string())])
        )])
    );

    assert_eq!(
        *snap.leader_data,
        BTreeMap::from([("secret".to_string(), "s".to_string())])
    );
    assert_eq!(snap.unit_status, status(StatusKind::Blocked, "needs db"));
    assert_eq!(snap.app_status, status(StatusKind::Active, "web up"));
    assert_eq!(
        *snap.stored,
        BTreeMap::from([("mine".to_string(), "2".to_string())]),
        "another unit's stored state"
    );

    // db/0 sees all three web units, and the other relation too.
    let snap = store.snapshot("db/0").await.unwrap();
    assert_eq!(
        snap.relations[&m.web_db.id].remote_units[..],
        ["web/0", "web/1", "web/2"]
    );
    assert_eq!(
        snap.relations[&m.web_db.id].unit_bags["web/0"]["host"],
        "web-0"
    );
    assert_eq!(snap.relations[&m.other_db.id].remote_app, "other");
    assert_eq!(
        snap.config["greeting"],
        ConfigValue::String("hello".into()),
        "the default"
    );
    assert!(
        snap.leader_data.is_empty(),
        "another application's leader data"
    );

    assert_eq!(
        store.snapshot("web/9").await.unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );
}

pub(crate) async fn status_rows_show_leaders_and_hook_errors(store: &dyn Store) {
    let m = deploy(store).await;
    let fence = hold(store, "web", "web/1", LONG).await;
    let changes = Changes {
        unit_status: Some(status(StatusKind::Active, "ready")),
        app_status: Some(status(StatusKind::Maintenance, "upgrading")),
        workload_version: Some("9.1".into()),
        pod_spec: leader_hook(&m).pod_spec,
        ..Changes::default()
    };
    store
        .commit("web/1", None, &changes, Some(&fence))
        .await
        .unwrap();
    store
        .set_hook_error("web/1", Some("hook failed: db-relation-changed".into()))
        .await
        .unwrap();

    let status_now = store.status().await.unwrap();
    let apps: Vec<_> = status_now
        .applications
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                a.charm.as_str(),
                a.leader.as_deref(),
                a.term,
                a.pod_spec_revision,
            )
        })
        .collect();
    assert_eq!(
        apps,
        [
            ("db", "charms/db.wasm", None, None, None),
            ("other", "charms/other.wasm", None, None, None),
            (
                "web",
                "charms/web.wasm",
                Some("web/1"),
                Some(fence.term),
                Some(1)
            ),
        ]
    );
    assert_eq!(
        status_now.applications[2].status,
        status(StatusKind::Maintenance, "upgrading")
    );
    let units: Vec<_> = status_now
        .units
        .iter()
        .map(|u| (u.name.as_str(), u.leader))
        .collect();
    assert_eq!(
        units,
        [
            ("db/0", false),
            ("other/0", false),
            ("web/0", false),
            ("web/1", true),
            ("web/2", false)
        ]
    );
    let web1 = &status_now.units[3];
    assert_eq!(
        web1.status,
        status(StatusKind::Error, "hook failed: db-relation-changed")
    );
    assert_eq!(web1.workload_version, "9.1");

    // The hook recovers: the unit's own status shows again.
    store.set_hook_error("web/1", None).await.unwrap();
    let status_now = store.status().await.unwrap();
    assert_eq!(
        status_now.units[3].status,
        status(StatusKind::Active, "ready")
    );
    assert_eq!(
        store
            .set_hook_error("web/9", Some("x".into()))
            .await
            .unwrap_err(),
        StoreError::NotFound("unit web/9".into())
    );
}

pub(crate) async fn status_forgets_expired_leaders(store: &dyn Store) {
    deploy(store).await;
    let term = hold(store, "db", "db/0", short()).await.term;
    let row = |s: &charm_host::store::ModelStatus| {
        let a = s
            .applications
            .iter()
            .find(|a| a.name == "db")
            .unwrap()
            .clone();
        (a.leader, a.term)
    };
    assert_eq!(
        row(&store.status().await.unwrap()),
        (Some("db/0".into()), Some(term))
    );
    tokio::time::sleep(past_short()).await;
    let status = store.status().await.unwrap();
    assert_eq!(row(&status), (None, None));
    assert!(!status.units.iter().any(|u| u.leader));
}

pub(crate) async fn model_records_apps_units_and_relations(store: &dyn Store) {
    let m = deploy(store).await;
    assert_eq!(store.model_name(), "test-model");
    let names: Vec<_> = store
        .applications()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["db", "other", "web"]);
    let web = store.application("web").await.unwrap();
    assert_eq!(web.metadata.config.len(), 3);
    assert_eq!(web.config["greeting"], ConfigValue::String("hi".into()));
    assert_eq!(
        store.application("nope").await.unwrap_err(),
        StoreError::NotFound("application nope".into())
    );

    let dup = store.application("db").await.unwrap();
    assert_eq!(
        store.add_application(dup).await.unwrap_err(),
        StoreError::AlreadyExists("application db".into())
    );

    assert_eq!(
        store.units("web").await.unwrap(),
        ["web/0", "web/1", "web/2"]
    );
    assert_eq!(store.add_unit("web").await.unwrap(), "web/3");
    assert_eq!(
        store.units("web").await.unwrap(),
        ["web/0", "web/1", "web/2", "web/3"]
    );
    assert_eq!(
        store.add_unit("nope").await.unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
    assert_eq!(
        store.units("nope").await.unwrap_err(),
        StoreError::NotFound("application nope".into())
    );

    assert_eq!(
        store.relations().await.unwrap(),
        [m.web_db.clone(), m.peers.clone(), m.other_db.clone()]
    );
    assert!(
        m.web_db.id < m.peers.id && m.peers.id < m.other_db.id,
        "ids grow"
    );
    let err = store
        .add_relation("pgsql", m.web_db.endpoints.clone())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::AlreadyExists(format!("relation {}", m.web_db.id))
    );
    // The same endpoints in the other order are the same relation.
    let reversed: Vec<_> = m.web_db.endpoints.iter().rev().cloned().collect();
    let err = store.add_relation("pgsql", reversed).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::AlreadyExists(format!("relation {}", m.web_db.id))
    );
    let err = store
        .add_relation("pgsql", vec![side("web", "db"), side("ghost", "db")])
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::NotFound("application ghost".into()));
    assert_eq!(
        store.relations().await.unwrap().len(),
        3,
        "a refused relation was added"
    );
    let (next, _) = store
        .add_relation("other-peers", vec![side("other", "cluster")])
        .await
        .unwrap();
    assert_eq!(
        (next.id, next.interface.as_str()),
        (m.other_db.id + 1, "other-peers")
    );
}
