//! Pod spec revisions and what a commit's receipt lists.

use super::*;

pub(crate) async fn pod_spec_revision_grows_only_on_change(store: &dyn Store) {
    deploy(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let set = |spec: serde_json::Value, resources: Option<serde_json::Value>| Changes {
        pod_spec: Some(Arc::new(PodSpecWrite::new(spec, resources))),
        ..Changes::default()
    };
    let spec = json!({"containers": [{"name": "web", "image": "nginx:1.25", "ports": [80, 443]}]});
    let revision = |c: Committed| c.receipt.pod_spec_revision;

    assert_eq!(
        revision(
            store
                .commit("web/0", None, &set(spec.clone(), None), Some(&fence))
                .await
                .unwrap()
        ),
        Some(1)
    );
    assert_eq!(
        revision(
            store
                .commit("web/0", None, &set(spec.clone(), None), Some(&fence))
                .await
                .unwrap()
        ),
        None
    );
    assert_eq!(
        store.pod_spec("web").await.unwrap().unwrap().revision,
        1,
        "an unchanged spec made a revision"
    );

    let resources = json!({"kubernetesResources": {"secrets": [{"name": "s"}]}});
    let with_resources = set(spec.clone(), Some(resources.clone()));
    assert_eq!(
        revision(
            store
                .commit("web/0", None, &with_resources, Some(&fence))
                .await
                .unwrap()
        ),
        Some(2)
    );
    assert_eq!(
        revision(
            store
                .commit("web/0", None, &with_resources, Some(&fence))
                .await
                .unwrap()
        ),
        None
    );

    let changed =
        json!({"containers": [{"name": "web", "image": "nginx:1.26", "ports": [80, 443]}]});
    let receipt = store
        .commit(
            "web/0",
            None,
            &set(changed.clone(), Some(resources.clone())),
            Some(&fence),
        )
        .await
        .unwrap();
    assert_eq!(revision(receipt), Some(3));
    // Dropping the resources is a change too.
    assert_eq!(
        revision(
            store
                .commit("web/0", None, &set(changed.clone(), None), Some(&fence))
                .await
                .unwrap()
        ),
        Some(4)
    );

    let stored = store.pod_spec("web").await.unwrap().unwrap();
    assert_eq!(
        (stored.revision, stored.spec, stored.k8s_resources),
        (4, changed.clone(), None)
    );

    // One shared write committed again and again, as a charm's repeated spec is: a revision
    // when it differs from what is stored, whichever write was committed in between.
    let shared = set(spec.clone(), Some(resources.clone()));
    let other = set(changed.clone(), None);
    for (changes, expected) in [
        (&shared, Some(5)),
        (&shared, None),
        (&other, Some(6)),
        (&shared, Some(7)),
        (&shared, None),
    ] {
        let receipt = store
            .commit("web/0", None, changes, Some(&fence))
            .await
            .unwrap();
        assert_eq!(revision(receipt), expected);
    }
    let stored = store.pod_spec("web").await.unwrap().unwrap();
    assert_eq!(
        (stored.revision, stored.spec, stored.k8s_resources),
        (7, spec, Some(resources))
    );
    assert_eq!(store.pod_spec("db").await.unwrap(), None);
    assert_eq!(
        store.pod_spec("nope").await.unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
}

pub(crate) async fn receipt_lists_only_what_changed(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let both = |w: BagWrites| BTreeMap::from([(m.web_db.id, w.clone()), (m.peers.id, w)]);
    let changes = Changes {
        unit_bags: both(writes(&[("a", Some("1")), ("b", Some("2"))])),
        app_bags: BTreeMap::from([(m.peers.id, writes(&[("a", Some("1"))]))]),
        leader_data: writes(&[("a", Some("1"))]),
        ..Changes::default()
    };
    let receipt = store
        .commit("web/0", None, &changes, Some(&fence))
        .await
        .unwrap()
        .receipt;
    let mut ids = vec![m.web_db.id, m.peers.id];
    ids.sort();
    assert_eq!(receipt.unit_bags_changed, ids);
    assert_eq!(receipt.app_bags_changed, [m.peers.id]);
    assert!(receipt.leader_data_changed);

    // The same values again, and deletions of absent keys: nothing changed.
    let same = Changes {
        unit_bags: both(writes(&[("a", Some("1")), ("zz", None)])),
        app_bags: BTreeMap::from([(m.peers.id, writes(&[("a", Some("1")), ("zz", None)]))]),
        leader_data: writes(&[("a", Some("1")), ("zz", None)]),
        ..Changes::default()
    };
    assert_eq!(
        store
            .commit("web/0", None, &same, Some(&fence))
            .await
            .unwrap()
            .receipt,
        CommitReceipt::default()
    );

    // One changed value in one relation; a deletion in leader data.
    let one = Changes {
        unit_bags: BTreeMap::from([
            (m.web_db.id, writes(&[("a", Some("1"))])),
            (m.peers.id, writes(&[("b", Some("3"))])),
        ]),
        leader_data: writes(&[("a", None)]),
        ..Changes::default()
    };
    let receipt = store
        .commit("web/0", None, &one, Some(&fence))
        .await
        .unwrap()
        .receipt;
    assert_eq!(
        receipt,
        CommitReceipt {
            unit_bags_changed: vec![m.peers.id],
            app_bags_changed: vec![],
            leader_data_changed: true,
            pod_spec_revision: None,
        }
    );
    let snap = store.snapshot("web/0").await.unwrap();
    assert!(snap.leader_data.is_empty());
    assert_eq!(snap.relations[&m.peers.id].unit_bags["web/0"]["b"], "3");
}
