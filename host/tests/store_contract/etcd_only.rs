//! What only etcd can show: prefixes, access, its own transaction limits.

use std::sync::Arc;

use charm_host::store::{EtcdConfig, EtcdStore, LeaseError};

use super::etcd_server::EtcdServer;
use super::*;

/// etcd's leases are whole seconds, revoked on a half-second tick once lapsed.
pub(super) const TIMING: Timing = Timing {
    tick: Duration::from_secs(1),
    past_tick: Duration::from_millis(2600),
};

pub(super) async fn open(server: &EtcdServer, prefix: &str) -> EtcdStore {
    open_model(server, prefix, "test-model").await.unwrap()
}

async fn open_model(
    server: &EtcdServer,
    prefix: &str,
    model: &str,
) -> Result<EtcdStore, StoreError> {
    let config = EtcdConfig::parse(&server.store_spec(prefix))?;
    EtcdStore::connect(config, model).await
}

#[test]
fn store_addresses_parse() {
    let one = EtcdConfig::parse("etcd://10.0.0.1:2379").unwrap();
    assert_eq!(one.endpoints, ["10.0.0.1:2379"]);
    assert_eq!(one.prefix, EtcdConfig::DEFAULT_PREFIX);
    let many = EtcdConfig::parse("etcd://a:1,b:2,c:3/models/prod/").unwrap();
    assert_eq!(many.endpoints, ["a:1", "b:2", "c:3"]);
    assert_eq!(many.prefix, "models/prod");
    for bad in [
        "etcd://",
        "etcd://host",
        "etcd://host:port",
        "sqlite:x",
        "etcd://:1",
    ] {
        let err = EtcdConfig::parse(bad).unwrap_err().to_string();
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

/// A prefix has one spelling: leading, trailing and doubled slashes go; `.` and `..`
/// are refused.
#[test]
fn prefixes_are_normalised() {
    for spelling in [
        "etcd://h:1/models/a",
        "etcd://h:1//models/a",
        "etcd://h:1/models/a/",
        "etcd://h:1/models//a",
    ] {
        assert_eq!(
            EtcdConfig::parse(spelling).unwrap().prefix,
            "models/a",
            "{spelling}"
        );
    }
    for bad in ["etcd://h:1/models/../a", "etcd://h:1/./a"] {
        let err = EtcdConfig::parse(bad).unwrap_err().to_string();
        assert!(err.contains("segment"), "{bad}: {err}");
    }
}

/// A model is made only at a prefix with nothing under it and no model above it: a
/// prefix inside a model (`models/a/hooks/web/0`) or above one (`models`) is refused,
/// naming why, and nothing is written; one beside it (`models/b`) is a new model.
#[tokio::test]
async fn a_model_is_made_neither_inside_nor_above_another() {
    let server = EtcdServer::start();
    let a = open(&server, "models/a").await;
    deploy_at_rest(&a).await;
    let before = server.everything().await;
    for (prefix, why) in [
        ("models/a/hooks/web/0", "inside the model at models/a"),
        ("models/a/apps", "inside the model at models/a"),
        ("models", "holds keys but no model"),
        ("", "holds keys but no model"),
    ] {
        let spec = format!("etcd://{}/{prefix}", server.endpoint());
        let mut config = EtcdConfig::parse(&spec).unwrap();
        if prefix.is_empty() {
            config.prefix = "models".into();
        }
        let err = EtcdStore::connect(config, "test-model").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Incompatible(m) if m.contains(why)),
            "{prefix}: {err:?}"
        );
        assert_eq!(server.everything().await, before, "{prefix}: written");
    }
    let b = open(&server, "models/b").await;
    deploy_at_rest(&b).await;
    assert_eq!(b.status().await.unwrap().units.len(), 5);
    assert_eq!(a.status().await.unwrap().units.len(), 5);
}

/// Opening without creating: a prefix that holds no model is refused, naming the
/// address and what makes a model, and nothing is written; a read of a model that is
/// there writes nothing either.
#[tokio::test]
async fn opening_without_creating_writes_nothing() {
    use charm_host::store::OpenMode;
    let server = EtcdServer::start();
    let before = server.everything().await;
    for mode in [OpenMode::Existing, OpenMode::ReadOnly] {
        let config = EtcdConfig::parse(&server.store_spec("modelz-typo")).unwrap();
        let err = EtcdStore::connect_with(config, "test-model", mode)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(m) if m.contains("no model at etcd://") && m.contains("/modelz-typo") && m.contains("charm-host deploy")),
            "{mode:?}: {err:?}"
        );
        assert_eq!(server.everything().await, before, "{mode:?}: written");
    }
    let model = open(&server, "models/a").await;
    deploy_at_rest(&model).await;
    let before = server.everything().await;
    let config = EtcdConfig::parse(&server.store_spec("/models//a/")).unwrap();
    let reader = EtcdStore::connect_with(config, "test-model", OpenMode::ReadOnly)
        .await
        .unwrap();
    assert_eq!(reader.status().await.unwrap().units.len(), 5);
    reader.snapshot("web/0").await.unwrap();
    reader.debug_log(None, 10).await.unwrap();
    assert_eq!(server.everything().await, before, "a read wrote");
}

/// A host keeps each application's document as it last decoded it, by the key's
/// version: another host's new unit, its unit marked dying and its config change show
/// in the next snapshot all the same.
#[tokio::test]
async fn another_hosts_changes_show_in_the_next_snapshot() {
    let server = EtcdServer::start();
    let here = open(&server, "shared").await;
    let m = deploy_at_rest(&here).await;
    let there = open(&server, "shared").await;
    another_hosts_unit_changes_show(&here, &there, &m).await;

    let greeting = |snap: charm_host::model::UnitSnapshot| snap.config.get("greeting").cloned();
    let old = greeting(here.snapshot("web/0").await.unwrap());
    there
        .set_config("web", texts(&[("greeting", "hey")]), vec![])
        .await
        .unwrap();
    let new = greeting(here.snapshot("web/0").await.unwrap());
    assert_ne!(new, old);
    assert_eq!(new, Some(ConfigValue::String("hey".into())));
}

/// See [`super::a_removal_beside_the_last_relation_broken_leaves_no_relation`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_beside_the_last_relation_broken_leaves_no_relation() {
    let server = EtcdServer::start();
    let here = open(&server, "shared").await;
    deploy_at_rest(&here).await;
    let there = open(&server, "shared").await;
    super::a_removal_beside_the_last_relation_broken_leaves_no_relation(&here, &there).await;
}

/// See [`super::last_brokens_at_once_reap_the_relation`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_brokens_at_once_reap_the_relation() {
    let server = EtcdServer::start();
    let here = open(&server, "shared").await;
    deploy_at_rest(&here).await;
    let there = open(&server, "shared").await;
    super::last_brokens_at_once_reap_the_relation(&here, &there).await;
}

/// Two hosts' steps that read the same revision, one queueing a hook on a unit directly
/// and one through an outbox (as a change firing hooks on many units does), share no
/// key, so both commit. Each hook reaches the unit's queue, with a seq of its own: a
/// seq the delivery finds already queued is taken as delivered, and a commit dequeues by
/// seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_queued_directly_and_through_an_outbox_at_one_revision_both_arrive() {
    use charm_host::store::{Records, Step, Verdict};
    use charm_model::tx::ModelTx;
    use std::sync::Barrier;

    let server = EtcdServer::start();
    let a = Arc::new(open(&server, "m").await);
    deploy(a.as_ref()).await;
    let b = Arc::new(open(&server, "m").await);
    let before = a.queued("web/0").await.unwrap();
    // Both steps read before either writes, so both read the same revision.
    let both_read = Arc::new(Barrier::new(2));
    let queue_on_web0 = |store: Arc<EtcdStore>, hook: Hook, outbox: bool| {
        let both_read = both_read.clone();
        tokio::spawn(async move {
            let reads = [Records::Unit("web/0"), Records::Queue("web/0")];
            let mut first_run = true;
            let mut op = |tx: &mut dyn ModelTx| {
                if std::mem::take(&mut first_run) {
                    // Off the runtime's worker, whose other tasks move elsewhere.
                    tokio::task::block_in_place(|| both_read.wait());
                }
                if outbox {
                    assert!(tx.defers_queueing(100, 100).unwrap());
                }
                tx.enqueue("web/0", &hook).unwrap();
                Verdict::Apply
            };
            let step = Step::write("queue", "queueing on", "web/0", &reads);
            store.step(step, &mut op).await
        })
    };
    let direct = queue_on_web0(a.clone(), Hook::UpgradeCharm, false);
    let through_outbox = queue_on_web0(b.clone(), Hook::LeaderSettingsChanged, true);
    direct.await.unwrap().unwrap();
    through_outbox.await.unwrap().unwrap();

    let after = a.queued("web/0").await.unwrap();
    let added: Vec<&QueuedHook> = after.iter().filter(|q| !before.contains(q)).collect();
    let mut hooks: Vec<&Hook> = added.iter().map(|q| &q.hook).collect();
    hooks.sort_by_key(|h| h.name());
    assert_eq!(
        hooks,
        [&Hook::LeaderSettingsChanged, &Hook::UpgradeCharm],
        "{after:?}"
    );
    let mut seqs: Vec<u64> = after.iter().map(|q| q.seq).collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), after.len(), "seqs shared: {after:?}");
}

/// A model written by a host of format 1 (each unit's queue one key, a list) is moved to
/// a key per queued hook when a host of format 2 opens it: every queue as it was, in
/// order, the lists gone, the model marked format 2, and its hooks run as before.
#[tokio::test]
async fn a_format_1_model_moves_to_a_key_per_queued_hook() {
    use etcd_client::{Client, GetOptions, PutOptions};

    let server = EtcdServer::start();
    let a = open(&server, "m").await;
    let m = deploy(&a).await;
    let before = all_queues(&a, &ALL_UNITS).await;
    assert!(before.values().any(|q| q.len() > 1), "{before:?}");
    drop(a);

    // Back to format 1, as its hosts wrote it.
    let mut client = Client::connect([server.endpoint()], None).await.unwrap();
    let prefix = Some(GetOptions::new().with_prefix());
    for (unit, queue) in &before {
        let list: Vec<serde_json::Value> = queue
            .iter()
            .map(|q| serde_json::json!({"seq": q.seq, "hook": q.hook}))
            .collect();
        let list = serde_json::to_vec(&list).unwrap();
        client
            .put(format!("m/queues/{unit}"), list, None)
            .await
            .unwrap();
    }
    let hooks = Some(etcd_client::DeleteOptions::new().with_prefix());
    client.delete("m/hooks/", hooks).await.unwrap();
    let meta = client.get("m/meta", None).await.unwrap().kvs()[0]
        .value()
        .to_vec();
    let mut meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["format"], 2);
    meta["format"] = 1.into();
    let meta = serde_json::to_vec(&meta).unwrap();
    client
        .put("m/meta", meta, None::<PutOptions>)
        .await
        .unwrap();

    let b = open(&server, "m").await;
    assert_eq!(all_queues(&b, &ALL_UNITS).await, before);
    let lists = client.get("m/queues/", prefix.clone()).await.unwrap();
    assert_eq!(lists.kvs().len(), 0);
    let meta = client.get("m/meta", None).await.unwrap().kvs()[0]
        .value()
        .to_vec();
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["format"], 2);
    // The moved hooks are the queue: web/0's first commits and leaves it.
    let first = before["web/0"][0].clone();
    b.commit("web/0", Some(first.seq), &Changes::default(), None)
        .await
        .unwrap();
    assert_eq!(b.queued("web/0").await.unwrap(), before["web/0"][1..]);
    // Opened again, nothing moves twice.
    let c = open(&server, "m").await;
    assert_eq!(c.queued("web/0").await.unwrap(), before["web/0"][1..]);
    let _ = m;
}

/// Resolving a unit without a retry skips the hook its agent failed, even where another
/// sorts before it: one queued with a lower seq after the agent took the failing one up,
/// which etcd's queues allow (a change that read its seq earlier and committed later).
#[tokio::test]
async fn resolving_without_a_retry_skips_the_hook_that_failed() {
    use etcd_client::Client;

    let server = EtcdServer::start();
    let a = open(&server, "m").await;
    deploy(&a).await;
    drain(&a, &ALL_UNITS).await;
    let queued = a
        .enqueue(vec![on("web/1", Hook::ConfigChanged)])
        .await
        .unwrap();
    let failing = queued[0].seq;
    let message = "hook failed: \"config-changed\"".to_string();
    a.hook_failed("web/1", Some(failing), message)
        .await
        .unwrap();
    let mut client = Client::connect([server.endpoint()], None).await.unwrap();
    let earlier = serde_json::to_vec(&Hook::UpdateStatus).unwrap();
    let key = format!("m/hooks/web/1/{:020}", failing - 1);
    client.put(key, earlier, None).await.unwrap();
    let queue = a.queued("web/1").await.unwrap();
    assert_eq!(hooks_of(&queue), [Hook::UpdateStatus, Hook::ConfigChanged]);

    assert_eq!(
        a.resolve_unit("web/1", false).await.unwrap(),
        Some(Hook::ConfigChanged)
    );
    assert_eq!(a.queued("web/1").await.unwrap(), queue[..1]);
    // Resolving forgot which hook failed: in error with nothing recorded, the first.
    a.set_hook_error("web/1", Some("failed".into()))
        .await
        .unwrap();
    assert_eq!(
        a.resolve_unit("web/1", false).await.unwrap(),
        Some(Hook::UpdateStatus)
    );
    assert_eq!(a.queued("web/1").await.unwrap(), []);
}

/// Hosts' commits firing a hook on one unit at once (the clients of one database), each
/// queueing it as a key of its own whatever the others do: every hook arrives, once,
/// each with a seq of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_firing_hooks_on_one_unit_at_once_all_queue_them() {
    const UNITS: usize = 24;
    let server = EtcdServer::start();
    let a = Arc::new(open(&server, "m").await);
    let requires = vec![endpoint("db", RelationRole::Requires, "pgsql")];
    a.add_application(app("big", requires)).await.unwrap();
    let provides = vec![endpoint("db", RelationRole::Provides, "pgsql")];
    a.add_application(app("db", provides)).await.unwrap();
    let mut big = Vec::new();
    for _ in 0..UNITS {
        big.push(a.add_unit("big").await.unwrap());
    }
    a.add_unit("db").await.unwrap();
    let (rel, _) = a
        .add_relation("pgsql", vec![side("big", "db"), side("db", "db")])
        .await
        .unwrap();
    let mut units: Vec<&str> = big.iter().map(String::as_str).collect();
    units.push("db/0");
    drain(a.as_ref(), &units).await;

    // Three hosts, each committing a third of the units' bag writes at once.
    let hosts = [
        a.clone(),
        Arc::new(open(&server, "m").await),
        Arc::new(open(&server, "m").await),
    ];
    let mut commits = tokio::task::JoinSet::new();
    for (i, unit) in big.iter().enumerate() {
        let store = hosts[i % hosts.len()].clone();
        let unit = unit.clone();
        commits.spawn(async move {
            let changes = Changes {
                unit_bags: BTreeMap::from([(rel.id, writes(&[("database", Some("forum"))]))]),
                ..Changes::default()
            };
            store.commit(&unit, None, &changes, None).await
        });
    }
    while let Some(done) = commits.join_next().await {
        let done = done.unwrap().unwrap();
        assert_eq!(done.queued.len(), 1, "{done:?}");
    }
    let queue = a.queued("db/0").await.unwrap();
    assert_increasing(&queue);
    let mut about: Vec<String> = queue
        .iter()
        .map(|q| match &q.hook {
            Hook::RelationChanged(r) => r.remote_unit.clone().unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    about.sort();
    let mut expected = big.clone();
    expected.sort();
    assert_eq!(about, expected);
}

/// Hosts running a model compact etcd's history (etcd's defaults never do, and its
/// quota fills), taking turns: one compaction a turn between them, each to the revision
/// seen a turn before. The model and its recent history stay whole.
#[tokio::test]
async fn hosts_compact_etcds_history_taking_turns() {
    use etcd_client::{Client, GetOptions};

    let server = EtcdServer::start();
    let every = Duration::from_secs(2);
    let mut config = EtcdConfig::parse(&server.store_spec("m")).unwrap();
    config.compaction = Some(every);
    let a = EtcdStore::connect(config.clone(), "test-model")
        .await
        .unwrap();
    let m = deploy(&a).await;
    let b = EtcdStore::connect(config, "test-model").await.unwrap();
    let started = std::time::Instant::now();
    let mut client = Client::connect([server.endpoint()], None).await.unwrap();
    let at = |revision: i64| Some(GetOptions::new().with_revision(revision));
    // Compacted once a turn has passed since a host first looked.
    let compacted = loop {
        match client.get("m/meta", at(1)).await {
            Err(e) => break e.to_string(),
            Ok(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "never compacted"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(compacted.contains("compacted"), "{compacted}");
    // Two hosts, one turn every 2 s between them: not one each.
    tokio::time::sleep(
        (started + Duration::from_secs(9)).saturating_duration_since(std::time::Instant::now()),
    )
    .await;
    let turns = client.get("m/compaction", None).await.unwrap().kvs()[0].version();
    let elapsed = started.elapsed().as_secs() as i64;
    assert!(
        (2..=elapsed / 2 + 1).contains(&turns),
        "{turns} turns in {elapsed} s"
    );
    // The model is whole, and either host commits on it.
    let fence = hold(&b, "web", "web/0", LONG).await;
    b.commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    assert_eq!(a.pod_spec("web").await.unwrap().unwrap().revision, 1);
    assert!(
        a.snapshot("web/0")
            .await
            .unwrap()
            .stored
            .contains_key("installed")
    );
    // The last turn's history stays: a read at the revision just written is answered.
    let now = client.get("m/meta", None).await.unwrap();
    let now = now.header().unwrap().revision();
    let recent = client.get("m/meta", at(now)).await;
    assert!(recent.is_ok(), "{recent:?}");
}

#[tokio::test]
async fn prefixes_keep_models_apart_and_refuse_a_mismatch() {
    let server = EtcdServer::start();
    let prod = open_model(&server, "prod", "prod").await.unwrap();
    let staging = open_model(&server, "staging", "staging").await.unwrap();
    deploy(&prod).await;
    assert_eq!(staging.applications().await.unwrap(), []);
    assert_eq!(prod.applications().await.unwrap().len(), 3);
    // Another model's prefix is refused, and left as it was.
    let err = open_model(&server, "prod", "staging").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Incompatible(m) if m.contains("holds model prod")),
        "{err}"
    );
    assert_eq!(prod.applications().await.unwrap().len(), 3);
}

#[tokio::test]
async fn commits_survive_an_etcd_restart() {
    let mut server = EtcdServer::start();
    let store = open(&server, "m").await;
    let m = deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    let done = store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    assert_eq!(done.receipt.pod_spec_revision, Some(1));
    server.restart();
    let again = open(&server, "m").await;
    assert_eq!(again.pod_spec("web").await.unwrap().unwrap().revision, 1);
    let snapshot = again.snapshot("web/0").await.unwrap();
    assert_eq!(snapshot.stored["installed"], "yes");
    // The lease outlived the restart too: the same fence still admits a commit.
    again
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .expect("the leadership survived the restart");
}

#[tokio::test]
async fn a_frozen_etcd_is_unavailable_never_a_denial() {
    let server = EtcdServer::start();
    let store = open(&server, "m").await;
    deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    server.pause();
    let claim = store.claim("web", "web/0", LONG).await;
    let commit = store
        .commit("web/0", None, &Changes::default(), Some(&fence))
        .await;
    server.resume();
    assert!(
        matches!(claim, Err(LeaseError::Unavailable(_))),
        "{claim:?}"
    );
    assert!(
        matches!(commit, Err(CommitError::Store(StoreError::Unavailable(_)))),
        "{commit:?}"
    );
    // Once etcd answers again the lease is still ours, with the same term.
    assert_eq!(hold(&store, "web", "web/0", LONG).await, fence);
}

/// Another host's store tells the lease's followers when it goes: released by its
/// holder, and lapsed (its etcd lease not kept alive).
#[tokio::test]
async fn followers_hear_a_lease_go_when_released_and_when_it_lapses() {
    let server = EtcdServer::start();
    let a = Arc::new(open(&server, "m").await);
    let b = Arc::new(open(&server, "m").await);
    // The first follower starts the store's watch, which wakes every follower once as
    // it starts (a lease may have gone before it): that wake-up first.
    let started = Duration::from_secs(20);
    let mut gone = b.clone().lease_signal("web").expect("etcd watches leases");
    tokio::time::timeout(started, gone.changed())
        .await
        .unwrap()
        .unwrap();
    let mut gone_at_a = a.clone().lease_signal("web").unwrap();
    tokio::time::timeout(started, gone_at_a.changed())
        .await
        .unwrap()
        .unwrap();
    hold(a.as_ref(), "web", "web/0", LONG).await;
    assert!(matches!(
        b.claim("web", "web/1", LONG).await.unwrap(),
        Claim::Denied { .. }
    ));
    gone.borrow_and_update();
    a.release("web", "web/0").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), gone.changed())
        .await
        .expect("the release is heard")
        .unwrap();
    // Held for a second and never renewed: etcd lets it lapse and deletes its key.
    hold(b.as_ref(), "web", "web/1", Duration::from_secs(1)).await;
    gone_at_a.borrow_and_update();
    tokio::time::timeout(Duration::from_secs(20), gone_at_a.changed())
        .await
        .expect("the lapse is heard")
        .unwrap();
    assert!(matches!(
        a.claim("web", "web/0", LONG).await.unwrap(),
        Claim::Held(_)
    ));
}

/// A follower's tracker on etcd takes a released lease over at once, not at its next
/// poll (which, with the watch, comes only a lease's length after its last claim).
#[tokio::test]
async fn a_follower_takes_a_released_lease_over_without_waiting_for_its_poll() {
    use charm_host::leadership::{Leadership, LeadershipConfig, LeadershipTracker};
    let server = EtcdServer::start();
    let store: Arc<dyn Store> = Arc::new(open(&server, "m").await);
    hold(store.as_ref(), "web", "web/0", LONG).await;
    // Polling every minute (with the watch, every 2 minutes, the lease's length), a
    // follower would next claim 45 s or more from now.
    let config = LeadershipConfig {
        lease_duration: Duration::from_secs(120),
        drift_margin: Duration::from_secs(60),
        retry_period: Duration::from_secs(60),
        ..LeadershipConfig::default()
    };
    let follower = LeadershipTracker::spawn(store.clone(), "web", "web/1", config, 7);
    let mut seen = follower.subscribe();
    tokio::time::timeout(
        Duration::from_secs(20),
        seen.wait_for(|l| matches!(l, Leadership::Follower { leader: Some(_) })),
    )
    .await
    .expect("the follower claims once")
    .unwrap();
    store.release("web", "web/0").await.unwrap();
    let took_over = tokio::time::timeout(
        Duration::from_secs(30),
        seen.wait_for(|l| matches!(l, Leadership::Leader { .. })),
    )
    .await;
    assert!(took_over.is_ok(), "the follower did not hear the release");
}

/// Two stores on one etcd stand for two hosts.
#[tokio::test]
async fn two_hosts_contend_for_one_lease_and_see_each_others_hooks() {
    let server = EtcdServer::start();
    let a = Arc::new(open(&server, "m").await);
    let m = deploy(a.as_ref()).await;
    let b = Arc::new(open(&server, "m").await);
    for round in 0..20 {
        let app = format!("race{round}");
        let (x, y) = tokio::join!(a.claim(&app, "race/0", LONG), b.claim(&app, "race/1", LONG));
        match (x.unwrap(), y.unwrap()) {
            (Claim::Held(l), Claim::Denied { holder, term, .. })
            | (Claim::Denied { holder, term, .. }, Claim::Held(l)) => {
                assert_eq!((holder, term), (l.holder, l.term), "round {round}");
            }
            other => panic!("round {round}: not exactly one holder: {other:?}"),
        }
    }

    // b's agent for db/0 waits on its signal; a's commit of web/0's bag queues
    // relation-changed on db/0, and the watch wakes b.
    drain(a.as_ref(), &ALL_UNITS).await;
    let signal = b
        .clone()
        .queue_signal("db/0")
        .expect("etcd pushes queue changes");
    // The watch starts in the background; let it settle, then consume its first wake-up.
    tokio::time::timeout(Duration::from_secs(5), signal.notified())
        .await
        .expect("the first wake-up after the watch started");
    let changes = Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-0"))]))]),
        ..Changes::default()
    };
    let done = a.commit("web/0", None, &changes, None).await.unwrap();
    assert!(done.queued.iter().any(|q| q.unit == "db/0"), "{done:?}");
    tokio::time::timeout(Duration::from_secs(5), signal.notified())
        .await
        .expect("db/0's agent is woken by a's commit");
    assert_eq!(
        b.queued("db/0").await.unwrap(),
        a.queued("db/0").await.unwrap()
    );
}
