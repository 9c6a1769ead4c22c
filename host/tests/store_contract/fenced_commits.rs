//! Commits fenced by a leadership term, and the limits a commit is held to.

use super::*;

pub(crate) async fn fenced_commit_with_current_term_is_applied(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let receipt = store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap()
        .receipt;
    assert_eq!(
        receipt,
        CommitReceipt {
            unit_bags_changed: vec![m.web_db.id],
            app_bags_changed: vec![m.web_db.id],
            leader_data_changed: true,
            pod_spec_revision: Some(1),
        }
    );
    let snap = store.snapshot("web/0").await.unwrap();
    let rel = &snap.relations[&m.web_db.id];
    assert_eq!(
        written(&rel.unit_bags["web/0"]),
        BTreeMap::from([("host".into(), "web-0".into())])
    );
    assert_eq!(
        *rel.app_bags["web"],
        BTreeMap::from([("database".into(), "web".into())])
    );
    assert_eq!(
        *snap.leader_data,
        BTreeMap::from([("secret".into(), "s3cret".into())])
    );
    assert_eq!(
        *snap.stored,
        BTreeMap::from([("installed".into(), "yes".into())])
    );
    assert_eq!(snap.unit_status, status(StatusKind::Active, "ready"));
    assert_eq!(snap.app_status, status(StatusKind::Active, "serving"));
    let spec = store.pod_spec("web").await.unwrap().unwrap();
    assert_eq!(
        (spec.revision, spec.spec),
        (1, json!({"containers": [{"name": "web"}]}))
    );
}

pub(crate) async fn stale_term_commit_is_rejected_and_applies_nothing(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let stale = hold(store, "web", "web/0", LONG).await;
    store.release("web", "web/0").await.unwrap();
    let current = hold(store, "web", "web/0", LONG).await;
    assert!(current.term > stale.term, "{current:?} after {stale:?}");
    let err = store
        .commit("web/0", None, &leader_hook(&m), Some(&stale))
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Fenced { fence: stale });
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn commit_fenced_by_another_holder_is_rejected(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let leader = hold(store, "web", "web/1", LONG).await;
    // web/0 presents web/1's fence: the fence must name the committing unit.
    let err = store
        .commit("web/0", None, &leader_hook(&m), Some(&leader))
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Fenced { .. }), "{err:?}");
    // A fence naming web/0 with web/1's term, while web/1 holds the lease.
    let forged = Fence {
        holder: "web/0".into(),
        ..leader.clone()
    };
    let err = store
        .commit("web/0", None, &leader_hook(&m), Some(&forged))
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Fenced { fence: forged });
    // A fence for another application.
    let db = hold(store, "db", "db/0", LONG).await;
    let wrong_app = Fence {
        app: "db".into(),
        holder: "web/0".into(),
        term: db.term,
    };
    let err = store
        .commit("web/0", None, &leader_hook(&m), Some(&wrong_app))
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Fenced { .. }), "{err:?}");
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn commit_after_expiry_is_rejected(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", short()).await;
    tokio::time::sleep(past_short()).await;
    // Nobody else claimed: the lease still names web/0 and its term, but it has expired.
    let err = store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Fenced { fence });
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn unfenced_leader_only_writes_are_refused(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let all = leader_hook(&m);
    let leader_only = [
        Changes {
            app_bags: all.app_bags.clone(),
            ..Changes::default()
        },
        Changes {
            leader_data: all.leader_data.clone(),
            ..Changes::default()
        },
        Changes {
            pod_spec: all.pod_spec.clone(),
            ..Changes::default()
        },
        Changes {
            app_status: all.app_status.clone(),
            ..Changes::default()
        },
    ];
    // Even the lease holder needs to present its fence.
    hold(store, "web", "web/0", LONG).await;
    for leader_write in leader_only {
        // Each with the unit's own writes beside it, which must not be applied either.
        let changes = Changes {
            unit_bags: all.unit_bags.clone(),
            unit_status: all.unit_status.clone(),
            workload_version: all.workload_version.clone(),
            stored: all.stored.clone(),
            ..leader_write
        };
        let err = store
            .commit("web/0", None, &changes, None)
            .await
            .unwrap_err();
        assert_eq!(err, CommitError::Unfenced, "{changes:?}");
    }
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn unit_writes_need_no_fence(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let changes = Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-1"))]))]),
        unit_status: Some(status(StatusKind::Waiting, "for db")),
        workload_version: Some("2.0".into()),
        stored: writes(&[("k", Some("v"))]),
        ..Changes::default()
    };
    let receipt = store
        .commit("web/1", None, &changes, None)
        .await
        .unwrap()
        .receipt;
    assert_eq!(receipt.unit_bags_changed, [m.web_db.id]);
    let snap = store.snapshot("web/1").await.unwrap();
    assert_eq!(
        snap.relations[&m.web_db.id].unit_bags["web/1"]["host"],
        "web-1"
    );
    assert_eq!(snap.unit_status, status(StatusKind::Waiting, "for db"));
    assert_eq!(snap.stored["k"], "v");
    let status = store.status().await.unwrap();
    assert_eq!(
        status
            .units
            .iter()
            .find(|u| u.name == "web/1")
            .unwrap()
            .workload_version,
        "2.0"
    );
}

/// The key and value [`full_values`] writes, in bytes: a quarter of the hook's writes, and
/// within the limit of one value.
pub(crate) const FULL_VALUE: usize = limits::HOOK_WRITES_MAX / 8;
const _: () = assert!(FULL_VALUE <= limits::VALUE_MAX);

/// `n` keys named `{prefix}{i}`, each with a value that fills the key and value up to
/// [`FULL_VALUE`] bytes.
pub(crate) fn full_values(prefix: &str, n: usize) -> BagWrites {
    (0..n)
        .map(|i| {
            let key = format!("{prefix}{i}");
            let value = "v".repeat(FULL_VALUE - key.len());
            (key, Some(value))
        })
        .collect()
}

/// Two commits, each as large as the model's limits allow (`charm_model::limits`), are
/// applied: what a store rewrites for them fits etcd's default request size.
pub(crate) async fn commits_at_the_limits_are_applied(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    // The leader settings and stored state filled first: the second commit rewrites them.
    let fill = Changes {
        leader_data: full_values("leader-", 3),
        stored: full_values("stored-", 5),
        ..Changes::default()
    };
    let bags = [(None, &fill.leader_data)];
    assert_eq!(
        limits::written_bags(bags, (&Bag::new(), &fill.stored)),
        Ok(())
    );
    assert_eq!(limits::check(&(&fill).into()), Ok(()));
    store
        .commit("web/0", None, &fill, Some(&fence))
        .await
        .unwrap();
    // A pod spec near its limit, the bags near the total of a hook's writes and, with what
    // they held, near the most written bags may hold.
    let spec = "s".repeat(limits::POD_SPEC_MAX - 256);
    let leader_data = writes(&[("one-more", Some("v"))]);
    let full = Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, full_values("unit-", 2))]),
        app_bags: BTreeMap::from([(m.web_db.id, full_values("app-", 1))]),
        leader_data,
        pod_spec: Some(Arc::new(PodSpecWrite::new(
            json!({"containers": [{"name": "web", "image": spec}]}),
            None,
        ))),
        unit_status: Some(status(
            StatusKind::Active,
            &"m".repeat(limits::STATUS_MESSAGE_MAX),
        )),
        ..Changes::default()
    };
    assert_eq!(limits::check(&(&full).into()), Ok(()));
    let snap = store.snapshot("web/0").await.unwrap();
    let rel = &snap.relations[&m.web_db.id];
    let bags = [
        (
            rel.unit_bags.get("web/0").map(|b| &**b),
            &full.unit_bags[&m.web_db.id],
        ),
        (
            rel.app_bags.get("web").map(|b| &**b),
            &full.app_bags[&m.web_db.id],
        ),
        (Some(&*snap.leader_data), &full.leader_data),
    ];
    assert_eq!(
        limits::written_bags(bags, (&snap.stored, &full.stored)),
        Ok(())
    );
    let receipt = store
        .commit("web/0", None, &full, Some(&fence))
        .await
        .unwrap()
        .receipt;
    assert_eq!(receipt.pod_spec_revision, Some(1));
    let snap = store.snapshot("web/0").await.unwrap();
    assert_eq!(snap.leader_data.len(), 4);
    assert_eq!(snap.stored.len(), 5);
    assert_eq!(snap.unit_status.message.len(), limits::STATUS_MESSAGE_MAX);
}

/// A commit past a limit is refused by every store, naming the limit, and applies nothing.
pub(crate) async fn a_commit_past_a_limit_applies_nothing(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let mut changes = leader_hook(&m);
    changes.leader_data = full_values("leader-", (limits::HOOK_WRITES_MAX / FULL_VALUE) + 1);
    let err = store
        .commit("web/0", None, &changes, Some(&fence))
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Limit(_)), "{err}");
    assert!(err.to_string().contains("the hook's writes is"), "{err}");
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn unknown_relation_applies_nothing(store: &dyn Store) {
    let m = deploy_at_rest(store).await;
    let fence = hold(store, "web", "web/0", LONG).await;
    let unknown = 9_999;
    let mut changes = leader_hook(&m);
    changes
        .unit_bags
        .insert(unknown, writes(&[("x", Some("y"))]));
    let err = store
        .commit("web/0", None, &changes, Some(&fence))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CommitError::Store(StoreError::NotFound(format!("relation {unknown}")))
    );
    assert_nothing_applied(store, &m).await;

    // A relation that exists but that web is not in.
    let mut changes = leader_hook(&m);
    changes
        .app_bags
        .insert(m.other_db.id, writes(&[("x", Some("y"))]));
    let err = store
        .commit("web/0", None, &changes, Some(&fence))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CommitError::Store(StoreError::NotFound(format!("relation {}", m.other_db.id)))
    );
    assert_nothing_applied(store, &m).await;
}

pub(crate) async fn commit_for_unknown_unit_is_not_found(store: &dyn Store) {
    deploy(store).await;
    let changes = Changes {
        stored: writes(&[("k", Some("v"))]),
        ..Changes::default()
    };
    let err = store
        .commit("web/7", None, &changes, None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CommitError::Store(StoreError::NotFound("unit web/7".into()))
    );
}
