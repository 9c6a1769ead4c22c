//! The store contract: one suite of properties, run against every backend.
//!
//! Each property is an `async fn(&dyn Store)`; `contract!` instantiates every property once
//! per backend (`memory::*`, `sqlite::*`), so a new backend joins by adding one module line.
//! After the suite, `sqlite_only` holds what only a file-backed store can show: durability
//! across reopen, refusal of files it must not touch, and two handles on one file.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use charm_host::model::{
    ActionMeta, ActionOutput, ActionParamMeta, ActionState, ApplicationRecord, Bag, BagWrites,
    Changes, CharmMetadata, ConfigOptionMeta, ConfigValue, EndpointMeta, Hook, LOG_RING, LogRecord,
    OptionType, PodSpecWrite, RelationEndpoint, RelationHook, RelationRecord, RelationRole, Status,
    StatusKind,
};
use charm_host::store::{
    Claim, CommitError, CommitReceipt, Committed, Fence, HookCommit, HookRead, Lease, LeaseStore,
    MemoryStore, QueuedHook, SqliteStore, StateStore, Store, StoreError, module_hash, routing,
};
use charm_model::limits;
use serde_json::json;

/// Long enough to outlast any test.
const LONG: Duration = Duration::from_secs(600);

/// The time scale of a backend's leases: milliseconds in memory and SQLite, whole seconds
/// in etcd (its TTLs are seconds, and it revokes lapsed leases on a half-second tick).
#[derive(Clone, Copy)]
struct Timing {
    /// The unit every lease test's durations are multiples of.
    tick: Duration,
    /// How long after a one-tick lease was granted it is surely gone from the store.
    past_tick: Duration,
}

const FAST: Timing = Timing {
    tick: Duration::from_millis(50),
    past_tick: Duration::from_millis(100),
};

thread_local! {
    /// The timing of the backend the current test runs on (each test has its own thread).
    static TIMING: std::cell::Cell<Timing> = const { std::cell::Cell::new(FAST) };
}

/// A short lease, for tests that wait for expiry.
fn short() -> Duration {
    TIMING.with(|t| t.get().tick)
}

/// How long to sleep for a `short()` lease to be surely expired.
fn past_short() -> Duration {
    TIMING.with(|t| t.get().past_tick)
}

// ---------------------------------------------------------------- fixtures

fn metadata(name: &str, relations: Vec<EndpointMeta>) -> CharmMetadata {
    CharmMetadata {
        name: name.into(),
        summary: format!("{name} for tests"),
        relations,
        config: vec![
            ConfigOptionMeta {
                name: "port".into(),
                kind: OptionType::Int,
                default: Some(ConfigValue::Int(80)),
                description: "listen port".into(),
            },
            ConfigOptionMeta {
                name: "greeting".into(),
                kind: OptionType::String,
                default: Some(ConfigValue::String("hello".into())),
                description: "what to say".into(),
            },
            ConfigOptionMeta {
                name: "ratio".into(),
                kind: OptionType::Float,
                default: None,
                description: "no default".into(),
            },
        ],
        actions: vec![],
    }
}

fn endpoint(name: &str, role: RelationRole, interface: &str) -> EndpointMeta {
    EndpointMeta {
        name: name.into(),
        role,
        interface: interface.into(),
        limit: None,
    }
}

fn side(app: &str, endpoint: &str) -> RelationEndpoint {
    RelationEndpoint {
        app: app.into(),
        endpoint: endpoint.into(),
    }
}

fn writes(pairs: &[(&str, Option<&str>)]) -> BagWrites {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .collect()
}

fn status(kind: StatusKind, message: &str) -> Status {
    Status::new(kind, message)
}

/// `web` (3 units, greeting set to "hi") related to `db` (1 unit) over `pgsql`, `web` with a
/// peer relation, and `other` (1 unit) related to `db` too.
struct Model {
    web_db: RelationRecord,
    peers: RelationRecord,
    other_db: RelationRecord,
}

/// Runs every hook queued on `units`, in order, each writing nothing: the units as their
/// agents leave them once idle. A hook sees a relation only from its relation-created on,
/// and a remote unit from its relation-joined on.
async fn hooks_run(store: &dyn Store, units: &[&str]) {
    for unit in units {
        for queued in store.queued(unit).await.unwrap() {
            store
                .commit(unit, Some(queued.seq), &Changes::default(), None)
                .await
                .unwrap();
        }
    }
}

/// [`deploy`], with every hook the deployment queued run: the model at rest, each unit
/// seeing its relations and their remote units.
async fn deploy_at_rest(store: &dyn Store) -> Model {
    let m = deploy(store).await;
    hooks_run(store, &ALL_UNITS).await;
    m
}

/// Adding units up to a number counts every unit the application has had: it adds the
/// shortfall once, nothing when asked again, and does not add back a unit removed since.
async fn units_are_added_up_to_a_number_once(store: &dyn Store) {
    deploy_at_rest(store).await;
    assert_eq!(
        store.units("web").await.unwrap(),
        ["web/0", "web/1", "web/2"]
    );
    assert_eq!(
        store.add_unit_up_to("web", 4).await.unwrap().as_deref(),
        Some("web/3")
    );
    assert_eq!(store.add_unit_up_to("web", 4).await.unwrap(), None);
    assert_eq!(store.add_unit_up_to("web", 2).await.unwrap(), None);
    store.remove_unit("web/3").await.unwrap();
    assert_eq!(store.add_unit_up_to("web", 4).await.unwrap(), None);
    // web/3 is dying, not replaced by a web/4.
    assert_eq!(
        store.units("web").await.unwrap(),
        ["web/0", "web/1", "web/2", "web/3"]
    );
    let err = store.add_unit_up_to("nope", 1).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

/// Two hosts on one store (`here` and `there`, `m` deployed): `there` adds a unit and
/// marks one dying, and `here`'s next snapshot of `db/0` lists web's units as they are
/// now, whatever it kept from its last read; so does `there`'s.
async fn another_hosts_unit_changes_show(here: &dyn Store, there: &dyn Store, m: &Model) {
    let units =
        |snap: charm_host::model::UnitSnapshot| snap.relations[&m.web_db.id].remote_units.to_vec();
    let before = here.snapshot("db/0").await.unwrap();
    assert_eq!(units(before.clone()), ["web/0", "web/1", "web/2"]);
    assert_eq!(here.snapshot("db/0").await.unwrap(), before);

    assert_eq!(there.add_unit("web").await.unwrap(), "web/3");
    let after = here.snapshot("db/0").await.unwrap();
    // db/0's next hook is web/3's relation-joined, which sees it.
    assert_eq!(units(after), ["web/0", "web/1", "web/2", "web/3"]);

    there.remove_unit("web/1").await.unwrap();
    let after = here.snapshot("db/0").await.unwrap();
    assert_eq!(units(after), ["web/0", "web/2", "web/3"]);
    // And the other way round, on the host that made the changes.
    let after = there.snapshot("db/0").await.unwrap();
    assert_eq!(units(after), ["web/0", "web/2", "web/3"]);
}

/// Two hosts commit the last relation-brokens of a relation at once, each for its own
/// units: whichever commits second sees the other's, and the relation goes. (On etcd each
/// used to see the other's still queued, so neither reaped it: a hook deleted from a queue
/// is invisible to a compare on the queue's prefix.) `m` deployed at rest.
async fn last_brokens_at_once_reap_the_relation(here: &dyn Store, there: &dyn Store) {
    let units = ["db/0", "web/0", "web/1", "web/2"];
    for round in 0..8 {
        here.remove_relation("web", "db").await.unwrap();
        // Every hook but the brokens, so that the last four hooks about it run at once.
        for unit in units {
            for queued in here.queued(unit).await.unwrap() {
                if !matches!(queued.hook, Hook::RelationBroken(_)) {
                    here.commit(unit, Some(queued.seq), &Changes::default(), None)
                        .await
                        .unwrap();
                }
            }
        }
        tokio::join!(
            run_only_hook(here, "db/0"),
            run_only_hook(there, "web/0"),
            run_only_hook(here, "web/1"),
            run_only_hook(there, "web/2"),
        );
        let left: Vec<String> = here
            .relations()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.endpoints.iter().any(|e| e.app == "web") && !r.is_peer())
            .map(|r| format!("{} dying: {}", r.describe(), r.dying))
            .collect();
        assert!(left.is_empty(), "round {round}: {left:?}");
        here.relate("web", "db").await.unwrap();
        hooks_run(here, &ALL_UNITS).await;
    }
}

/// Commits the one hook queued on `unit`, writing nothing.
async fn run_only_hook(store: &dyn Store, unit: &str) {
    let queued = store.queued(unit).await.unwrap();
    let [only] = queued.as_slice() else {
        panic!("{unit}: one hook queued: {queued:?}");
    };
    store
        .commit(unit, Some(only.seq), &Changes::default(), None)
        .await
        .unwrap();
}

async fn deploy(store: &dyn Store) -> Model {
    let web = ApplicationRecord {
        name: "web".into(),
        charm: "charms/web.wasm".into(),
        metadata: metadata(
            "web",
            vec![
                endpoint("db", RelationRole::Requires, "pgsql"),
                endpoint("cluster", RelationRole::Peers, "web-peers"),
            ],
        ),
        config: BTreeMap::from([("greeting".to_string(), ConfigValue::String("hi".into()))]),
        module: None,
    };
    let db = ApplicationRecord {
        name: "db".into(),
        charm: "charms/db.wasm".into(),
        metadata: metadata("db", vec![endpoint("db", RelationRole::Provides, "pgsql")]),
        config: BTreeMap::new(),
        module: None,
    };
    let other = ApplicationRecord {
        name: "other".into(),
        charm: "charms/other.wasm".into(),
        metadata: metadata(
            "other",
            vec![endpoint("db", RelationRole::Requires, "pgsql")],
        ),
        config: BTreeMap::new(),
        module: None,
    };
    for app in [web, db, other] {
        store.add_application(app).await.unwrap();
    }
    for _ in 0..3 {
        store.add_unit("web").await.unwrap();
    }
    store.add_unit("db").await.unwrap();
    store.add_unit("other").await.unwrap();
    let (web_db, _) = store
        .add_relation("pgsql", vec![side("web", "db"), side("db", "db")])
        .await
        .unwrap();
    let (peers, _) = store
        .add_relation("web-peers", vec![side("web", "cluster")])
        .await
        .unwrap();
    let (other_db, _) = store
        .add_relation("pgsql", vec![side("other", "db"), side("db", "db")])
        .await
        .unwrap();
    Model {
        web_db,
        peers,
        other_db,
    }
}

async fn hold(store: &dyn Store, app: &str, unit: &str, duration: Duration) -> Fence {
    match store.claim(app, unit, duration).await.unwrap() {
        Claim::Held(lease) => Fence {
            app: app.into(),
            holder: unit.into(),
            term: lease.term,
        },
        denied => panic!("{unit} could not take {app}'s lease: {denied:?}"),
    }
}

/// Every kind of write a leader's hook makes.
fn leader_hook(m: &Model) -> Changes {
    Changes {
        unit_bags: BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-0"))]))]),
        app_bags: BTreeMap::from([(m.web_db.id, writes(&[("database", Some("web"))]))]),
        leader_data: writes(&[("secret", Some("s3cret"))]),
        pod_spec: Some(Arc::new(PodSpecWrite::new(
            json!({"containers": [{"name": "web"}]}),
            None,
        ))),
        unit_status: Some(status(StatusKind::Active, "ready")),
        app_status: Some(status(StatusKind::Active, "serving")),
        workload_version: Some("1.2.3".into()),
        stored: writes(&[("installed", Some("yes"))]),
        elected_term: None,
        action: None,
    }
}

/// Asserts that none of `leader_hook`'s writes are in the store.
async fn assert_nothing_applied(store: &dyn Store, m: &Model) {
    let snap = store.snapshot("web/0").await.unwrap();
    let rel = &snap.relations[&m.web_db.id];
    assert!(
        written(&rel.unit_bags["web/0"]).is_empty(),
        "unit bag written: {:?}",
        rel.unit_bags
    );
    assert!(
        rel.app_bags["web"].is_empty(),
        "app bag written: {:?}",
        rel.app_bags
    );
    assert!(
        snap.leader_data.is_empty(),
        "leader data written: {:?}",
        snap.leader_data
    );
    assert!(
        snap.stored.is_empty(),
        "stored state written: {:?}",
        snap.stored
    );
    assert_eq!(snap.unit_status, Status::default());
    assert_eq!(snap.app_status, Status::default());
    assert_eq!(store.pod_spec("web").await.unwrap(), None);
    let status = store.status().await.unwrap();
    let row = status.units.iter().find(|u| u.name == "web/0").unwrap();
    assert_eq!(row.workload_version, "");
}

// ---------------------------------------------------------------- leases

async fn first_claim_gets_a_term(store: &dyn Store) {
    let claim = store.claim("web", "web/0", LONG).await.unwrap();
    let Claim::Held(lease) = claim else {
        panic!("the first claim was denied: {claim:?}");
    };
    assert_eq!((lease.holder.as_str(), lease.duration), ("web/0", LONG));
    assert!(lease.term >= 1, "terms start above zero: {lease:?}");
    let leader = store.leader("web").await.unwrap().expect("a live lease");
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", lease.term));
    assert!(
        leader.duration <= LONG && leader.duration > LONG - Duration::from_secs(5),
        "{leader:?}"
    );
    assert_eq!(store.leader("db").await.unwrap(), None);
}

async fn holder_claim_extends_and_keeps_term(store: &dyn Store) {
    let lease = short() * 3;
    let term = hold(store, "web", "web/0", lease).await.term;
    tokio::time::sleep(short() * 2).await;
    let again = store.claim("web", "web/0", lease).await.unwrap();
    assert_eq!(
        again,
        Claim::Held(Lease {
            holder: "web/0".into(),
            term,
            duration: lease
        })
    );
    // Four ticks after the first claim: only the extension keeps it alive.
    tokio::time::sleep(short() * 2).await;
    let leader = store
        .leader("web")
        .await
        .unwrap()
        .expect("the extension keeps the lease");
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", term));
}

async fn other_claim_denied_while_lease_live(store: &dyn Store) {
    let term = hold(store, "web", "web/0", LONG).await.term;
    let claim = store.claim("web", "web/1", LONG).await.unwrap();
    let Claim::Denied {
        holder,
        term: denied_term,
        expires_in,
    } = claim
    else {
        panic!("a live lease's claim by another unit is denied, got {claim:?}");
    };
    assert_eq!((holder.as_str(), denied_term), ("web/0", term));
    // Where the store says when the lease ends, it is the lease's own end (rounded up to
    // the store's millisecond: a follower must not claim before it).
    if let Some(left) = expires_in {
        assert!(
            left <= LONG + Duration::from_millis(2) && left > LONG - Duration::from_secs(60),
            "the denial says the lease ends in {left:?}, granted for {LONG:?}"
        );
    }
    let leader = store.leader("web").await.unwrap().unwrap();
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", term));
}

async fn expired_lease_goes_to_next_claimant_with_a_greater_term(store: &dyn Store) {
    let first = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    assert_eq!(
        store.leader("web").await.unwrap(),
        None,
        "the lease outlived its duration"
    );
    let claim = store.claim("web", "web/1", LONG).await.unwrap();
    let Claim::Held(lease) = claim else {
        panic!("the lapsed lease was not granted: {claim:?}");
    };
    assert_eq!((lease.holder.as_str(), lease.duration), ("web/1", LONG));
    assert!(lease.term > first, "term {} after {first}", lease.term);
}

async fn holder_reclaiming_after_expiry_gets_new_term(store: &dyn Store) {
    let first = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    let again = hold(store, "web", "web/0", LONG).await.term;
    assert!(again > first, "term {again} after {first}");
}

async fn release_frees_lease_and_terms_never_repeat(store: &dyn Store) {
    let first = hold(store, "web", "web/0", LONG).await.term;
    // Only the holder can release.
    store.release("web", "web/1").await.unwrap();
    assert_eq!(
        store.leader("web").await.unwrap().map(|l| l.holder),
        Some("web/0".into())
    );
    store.release("web", "web/0").await.unwrap();
    assert_eq!(store.leader("web").await.unwrap(), None);
    let mut terms = vec![first];
    for unit in ["web/1", "web/0", "web/0", "web/2"] {
        let fence = hold(store, "web", unit, LONG).await;
        terms.push(fence.term);
        store.release("web", unit).await.unwrap();
    }
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "a term was reused: {terms:?}"
    );
}

async fn terms_are_per_application(store: &dyn Store) {
    deploy(store).await;
    let web = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    assert!(hold(store, "web", "web/0", LONG).await.term > web);
    // db's leadership is its own: web's new term does not fence db's commits.
    let db = hold(store, "db", "db/0", LONG).await;
    let changes = Changes {
        app_status: Some(status(StatusKind::Active, "leading")),
        ..Changes::default()
    };
    store
        .commit("db/0", None, &changes, Some(&db))
        .await
        .expect("db's own term fences db's commit");
}

// ---------------------------------------------------------------- fenced commits

async fn fenced_commit_with_current_term_is_applied(store: &dyn Store) {
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

async fn stale_term_commit_is_rejected_and_applies_nothing(store: &dyn Store) {
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

async fn commit_fenced_by_another_holder_is_rejected(store: &dyn Store) {
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

async fn commit_after_expiry_is_rejected(store: &dyn Store) {
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

async fn unfenced_leader_only_writes_are_refused(store: &dyn Store) {
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

async fn unit_writes_need_no_fence(store: &dyn Store) {
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
const FULL_VALUE: usize = limits::HOOK_WRITES_MAX / 8;
const _: () = assert!(FULL_VALUE <= limits::VALUE_MAX);

/// `n` keys named `{prefix}{i}`, each with a value that fills the key and value up to
/// [`FULL_VALUE`] bytes.
fn full_values(prefix: &str, n: usize) -> BagWrites {
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
async fn commits_at_the_limits_are_applied(store: &dyn Store) {
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
async fn a_commit_past_a_limit_applies_nothing(store: &dyn Store) {
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

async fn unknown_relation_applies_nothing(store: &dyn Store) {
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

async fn commit_for_unknown_unit_is_not_found(store: &dyn Store) {
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

// ---------------------------------------------------------------- pod specs and receipts

async fn pod_spec_revision_grows_only_on_change(store: &dyn Store) {
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

async fn receipt_lists_only_what_changed(store: &dyn Store) {
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

// ---------------------------------------------------------------- reading the model

async fn snapshot_shows_what_a_hook_may_read(store: &dyn Store) {
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

async fn status_rows_show_leaders_and_hook_errors(store: &dyn Store) {
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

async fn status_forgets_expired_leaders(store: &dyn Store) {
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

async fn model_records_apps_units_and_relations(store: &dyn Store) {
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

// ---------------------------------------------------------------- hook queues

/// Every unit `deploy` adds.
const ALL_UNITS: [&str; 5] = ["db/0", "other/0", "web/0", "web/1", "web/2"];

fn on(unit: &str, hook: Hook) -> (String, Hook) {
    (unit.to_string(), hook)
}

fn about(id: u32, endpoint: &str, remote_app: &str, remote_unit: Option<&str>) -> RelationHook {
    RelationHook {
        id,
        endpoint: endpoint.into(),
        remote_app: remote_app.into(),
        remote_unit: remote_unit.map(str::to_string),
    }
}

/// Each queued hook's unit and hook, without its seq.
fn units_and_hooks(queue: &[QueuedHook]) -> Vec<(String, Hook)> {
    queue
        .iter()
        .map(|q| (q.unit.clone(), q.hook.clone()))
        .collect()
}

fn hooks_of(queue: &[QueuedHook]) -> Vec<Hook> {
    queue.iter().map(|q| q.hook.clone()).collect()
}

fn assert_increasing(queue: &[QueuedHook]) {
    assert!(
        queue.windows(2).all(|w| w[0].seq < w[1].seq),
        "seqs do not increase: {queue:?}"
    );
}

/// Every unit's queue, by unit.
async fn all_queues(store: &dyn Store, units: &[&str]) -> BTreeMap<String, Vec<QueuedHook>> {
    let mut queues = BTreeMap::new();
    for unit in units {
        queues.insert(unit.to_string(), store.queued(unit).await.unwrap());
    }
    queues
}

/// Commits every hook queued on `units`, writing nothing, so their queues are empty.
async fn drain(store: &dyn Store, units: &[&str]) {
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
async fn hooks_on_many_units_are_all_queued_and_coalesced(store: &dyn Store) {
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

fn app(name: &str, relations: Vec<EndpointMeta>) -> ApplicationRecord {
    ApplicationRecord {
        name: name.into(),
        charm: format!("charms/{name}.wasm"),
        metadata: metadata(name, relations),
        config: BTreeMap::new(),
        module: None,
    }
}

async fn add_unit_queues_deploy_hooks(store: &dyn Store) {
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

async fn add_relation_queues_relation_hooks(store: &dyn Store) {
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

async fn enqueue_coalesces_behind_the_head(store: &dyn Store) {
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

async fn committing_a_queued_hook_applies_it_once(store: &dyn Store) {
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

async fn commits_queue_the_hooks_they_fire(store: &dyn Store) {
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

async fn fenced_out_commit_keeps_its_hook_queued(store: &dyn Store) {
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
fn checked<'a>(
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
type ChangeUnderTheHook<'a> = Box<dyn Fn(u32) -> Changes + 'a>;

async fn a_commit_whose_hook_read_changed_is_stale_and_applies_nothing(store: &dyn Store) {
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

async fn unit_bags_carry_the_network_keys_juju_sets(store: &dyn Store) {
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

async fn a_hook_reads_remote_bags_as_it_asks_and_its_commit_checks_those_alone(store: &dyn Store) {
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

async fn what_a_hook_did_not_read_does_not_make_its_commit_stale(store: &dyn Store) {
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

async fn elected_term_round_trips(store: &dyn Store) {
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

// ---------------------------------------------------------------- operating a live model

/// Everything an operator or a hook can read of the model, to compare before and after.
async fn fingerprint(store: &dyn Store) -> String {
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
async fn settle(store: &dyn Store) {
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

fn texts(pairs: &[(&str, &str)]) -> BTreeMap<String, ConfigValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ConfigValue::String(v.to_string())))
        .collect()
}

async fn set_config_checks_types_and_fires_config_changed(store: &dyn Store) {
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
fn twin(name: &str) -> ApplicationRecord {
    app(
        name,
        vec![
            endpoint("primary", RelationRole::Requires, "pgsql"),
            endpoint("replica", RelationRole::Requires, "pgsql"),
        ],
    )
}

async fn refused_changes_change_nothing(store: &dyn Store) {
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

async fn remove_unit_follows_juju_order_and_releases_its_lease(store: &dyn Store) {
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

async fn remove_relation_departs_then_breaks_then_drops_its_bags(store: &dyn Store) {
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

async fn remove_application_refuses_relations_unless_forced(store: &dyn Store) {
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

async fn relate_resolves_endpoints_by_interface_and_role(store: &dyn Store) {
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

async fn deploy_adds_units_and_peer_relations_in_one_step(store: &dyn Store) {
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

async fn show_unit_and_resolved(store: &dyn Store) {
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

async fn charm_logs_are_kept_per_unit_in_a_bounded_ring(store: &dyn Store) {
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

// ---------------------------------------------------------------- actions

/// `kv`, two units, with typed actions: `put` (key: string, required; ttl: float, default
/// 2.5; note: string, optional) and `members` (no parameters), its first hooks run.
async fn deploy_kv(store: &dyn Store) {
    let param = |name: &str, kind, default, required| ActionParamMeta {
        name: name.into(),
        kind,
        description: format!("the {name}"),
        default,
        required,
    };
    let mut metadata = metadata("kv", vec![]);
    metadata.actions = vec![
        ActionMeta {
            name: "put".into(),
            description: "Stores a key.".into(),
            params: vec![
                param("key", OptionType::String, None, true),
                param(
                    "ttl",
                    OptionType::Float,
                    Some(ConfigValue::Float(2.5)),
                    false,
                ),
                param("note", OptionType::String, None, false),
            ],
        },
        ActionMeta {
            name: "members".into(),
            description: "Lists the members.".into(),
            params: vec![],
        },
    ];
    let kv = ApplicationRecord {
        name: "kv".into(),
        charm: "charms/kv.wasm".into(),
        metadata,
        config: BTreeMap::new(),
        module: None,
    };
    store.deploy(kv, 2).await.unwrap();
    settle(store).await;
}

async fn actions_are_recorded_with_their_hook_and_end_in_its_commit(store: &dyn Store) {
    deploy_kv(store).await;
    let queued = store
        .run_action("kv/0", "put", texts(&[("key", "a"), ("ttl", "3")]), 1_000)
        .await
        .unwrap();
    let action = queued.action.clone();
    assert_eq!(action.id, 1);
    assert_eq!(
        (action.unit.as_str(), action.name.as_str()),
        ("kv/0", "put")
    );
    assert_eq!(
        action.params,
        BTreeMap::from([
            ("key".to_string(), ConfigValue::String("a".into())),
            ("ttl".to_string(), ConfigValue::Float(3.0)),
        ]),
        "typed, and an optional parameter without a default left out"
    );
    assert_eq!(action.state, ActionState::Pending);
    assert_eq!(action.enqueued_ms, 1_000);
    // The hook is queued in the same step, its parameters the typed JSON object.
    assert_eq!(
        store.queued("kv/0").await.unwrap(),
        std::slice::from_ref(&queued.queued)
    );
    let Hook::Action { id, name, params } = &queued.queued.hook else {
        panic!("not an action hook: {:?}", queued.queued);
    };
    assert_eq!((id.as_str(), name.as_str()), ("1", "put"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(params).unwrap(),
        json!({"key": "a", "ttl": 3.0})
    );
    assert_eq!(store.action(1).await.unwrap(), action);

    let running = store.start_action(1, 2_000).await.unwrap();
    assert_eq!(
        (running.state, running.started_ms),
        (ActionState::Running, Some(2_000))
    );
    // A retried hook starting again keeps the first start.
    assert_eq!(
        store.start_action(1, 2_500).await.unwrap().started_ms,
        Some(2_000)
    );
    let output = ActionOutput {
        results: BTreeMap::from([("stored".to_string(), "a".to_string())]),
        failure: None,
        log: vec!["storing a".into()],
        ended_ms: Some(3_000),
    };
    let changes = Changes {
        action: Some(output),
        stored: writes(&[("writes", Some("1"))]),
        ..Changes::default()
    };
    store
        .commit("kv/0", Some(queued.queued.seq), &changes, None)
        .await
        .unwrap();
    let done = store.action(1).await.unwrap();
    assert_eq!(done.state, ActionState::Completed);
    assert_eq!(done.results["stored"], "a");
    assert_eq!(done.log, ["storing a"]);
    assert_eq!((done.failure, done.completed_ms), (None, Some(3_000)));
    assert_eq!(store.queued("kv/0").await.unwrap(), []);

    // A failure is kept with what the action reported; ids keep growing.
    let second = store
        .run_action("kv/1", "members", BTreeMap::new(), 4_000)
        .await
        .unwrap();
    assert_eq!(second.action.id, 2);
    assert_eq!(second.action.params, BTreeMap::new());
    let failed = Changes {
        action: Some(ActionOutput {
            failure: Some("the cluster is not formed yet".into()),
            log: vec!["looking".into()],
            ..ActionOutput::default()
        }),
        ..Changes::default()
    };
    store
        .commit("kv/1", Some(second.queued.seq), &failed, None)
        .await
        .unwrap();
    let failed = store.action(2).await.unwrap();
    assert_eq!(failed.state, ActionState::Failed);
    assert_eq!(
        failed.failure.as_deref(),
        Some("the cluster is not formed yet")
    );
    assert_eq!(failed.log, ["looking"]);
    // The first is as it was.
    assert_eq!(store.action(1).await.unwrap().state, ActionState::Completed);
    assert_eq!(
        store.action(3).await.unwrap_err(),
        StoreError::NotFound("action 3".into())
    );
    assert_eq!(
        store.start_action(3, 1).await.unwrap_err(),
        StoreError::NotFound("action 3".into())
    );
}

async fn refused_actions_change_nothing(store: &dyn Store) {
    deploy_kv(store).await;
    store.remove_unit("kv/1").await.unwrap();
    let before = fingerprint(store).await;
    let refused = |e: StoreError, words: &[&str]| match &e {
        StoreError::Invalid(m) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let put = |pairs: &[(&str, &str)]| texts(pairs);
    refused(
        store
            .run_action("kv/0", "get", put(&[]), 1)
            .await
            .unwrap_err(),
        &["no action \"get\"", "put, members"],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("key", "a"), ("tll", "1")]), 1)
            .await
            .unwrap_err(),
        &["no parameter \"tll\"", "key, ttl, note"],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("key", "a"), ("ttl", "soon")]), 1)
            .await
            .unwrap_err(),
        &["\"ttl\" is a float", "\"soon\""],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("ttl", "1")]), 1)
            .await
            .unwrap_err(),
        &["required parameter key not given"],
    );
    refused(
        store
            .run_action("kv/0", "members", put(&[("all", "true")]), 1)
            .await
            .unwrap_err(),
        &["no parameter \"all\"", "(it has: none)"],
    );
    refused(
        store
            .run_action("kv/1", "members", put(&[]), 1)
            .await
            .unwrap_err(),
        &["unit kv/1 is being removed"],
    );
    assert_eq!(
        store
            .run_action("kv/7", "members", put(&[]), 1)
            .await
            .unwrap_err(),
        StoreError::NotFound("unit kv/7".into())
    );
    assert_eq!(
        fingerprint(store).await,
        before,
        "a refused action changed the model"
    );
    assert_eq!(
        store.action(1).await.unwrap_err(),
        StoreError::NotFound("action 1".into()),
        "a refused action was recorded"
    );
    // No id was used up by the refusals.
    let first = store
        .run_action("kv/0", "members", put(&[]), 1)
        .await
        .unwrap();
    assert_eq!(first.action.id, 1);
}

// ---------------------------------------------------------------- upgrade-charm

/// A module's bytes: over two of etcd's chunks, so a store that splits them joins them.
fn module_bytes(tag: &str) -> Vec<u8> {
    let mut bytes = format!("\0asm module {tag}\n").into_bytes();
    bytes.extend((0..1_300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    bytes
}

async fn modules_are_kept_by_content_hash(store: &dyn Store) {
    let bytes = module_bytes("a");
    let hash = store.put_module(&bytes).await.unwrap();
    assert_eq!(hash, module_hash(&bytes));
    assert_eq!(hash.len(), 64, "SHA-256 in hex: {hash}");
    // Content-addressed: the same bytes again are the same module.
    assert_eq!(store.put_module(&bytes).await.unwrap(), hash);
    assert_eq!(
        store.module(&hash).await.unwrap().as_deref(),
        Some(&bytes[..])
    );
    let other = module_bytes("b");
    let other_hash = store.put_module(&other).await.unwrap();
    assert_ne!(other_hash, hash);
    assert_eq!(store.module(&other_hash).await.unwrap(), Some(other));
    assert_eq!(
        store.module(&module_hash(b"never kept")).await.unwrap(),
        None
    );
}

/// `web`'s next release: the same endpoints, `greeting` gone, `colour` new, `port` kept.
fn web_next(relations: Vec<EndpointMeta>) -> CharmMetadata {
    let mut next = metadata("web", relations);
    next.config.retain(|o| o.name != "greeting");
    next.config.push(ConfigOptionMeta {
        name: "colour".into(),
        kind: OptionType::String,
        default: Some(ConfigValue::String("blue".into())),
        description: "new in this release".into(),
    });
    next
}

fn web_endpoints() -> Vec<EndpointMeta> {
    vec![
        endpoint("db", RelationRole::Requires, "pgsql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ]
}

async fn upgrade_charm_carries_settings_over_and_fires_upgrade_then_config_changed(
    store: &dyn Store,
) {
    deploy(store).await;
    store
        .set_config("web", texts(&[("port", "8080")]), vec![])
        .await
        .unwrap();
    settle(store).await;
    let v2 = module_bytes("web v2");
    let upgraded = store
        .upgrade_charm("web", "charms/web-v2.wasm", web_next(web_endpoints()), &v2)
        .await
        .unwrap();
    assert_eq!(upgraded.old_module, None, "deployed without a kept module");
    assert_eq!(upgraded.new_module, module_hash(&v2));
    assert_eq!(upgraded.added, ["colour"]);
    assert_eq!(upgraded.dropped, ["greeting"], "its option is gone");
    assert_eq!(
        units_and_hooks(&upgraded.queued),
        ["web/0", "web/1", "web/2"]
            .iter()
            .flat_map(|u| [on(u, Hook::UpgradeCharm), on(u, Hook::ConfigChanged)])
            .collect::<Vec<_>>()
    );
    assert_increasing(&upgraded.queued);
    let record = store.application("web").await.unwrap();
    assert_eq!(record.charm, "charms/web-v2.wasm");
    assert_eq!(record.module.as_deref(), Some(upgraded.new_module.as_str()));
    assert_eq!(record.metadata, web_next(web_endpoints()));
    assert_eq!(
        record.config,
        BTreeMap::from([("port".to_string(), ConfigValue::Int(8080))])
    );
    // The next hook sees the new module and config: the new option at its default.
    let seen = store.snapshot("web/1").await.unwrap();
    assert_eq!(seen.module, record.module);
    assert_eq!(seen.config["colour"], ConfigValue::String("blue".into()));
    assert_eq!(seen.config["port"], ConfigValue::Int(8080));
    assert!(!seen.config.contains_key("greeting"));
    for unit in ["db/0", "other/0"] {
        assert_eq!(
            store.queued(unit).await.unwrap(),
            [],
            "{unit} heard web's upgrade"
        );
    }
    assert_eq!(store.module(&upgraded.new_module).await.unwrap(), Some(v2));
    // The next upgrade starts from this module.
    settle(store).await;
    let v3 = module_bytes("web v3");
    let again = store
        .upgrade_charm("web", "charms/web-v3.wasm", web_next(web_endpoints()), &v3)
        .await
        .unwrap();
    assert_eq!(again.old_module, Some(upgraded.new_module));
    assert_eq!((again.added.len(), again.dropped.len()), (0, 0));
    assert_eq!(again.queued.len(), 6);
}

async fn refused_upgrades_change_nothing(store: &dyn Store) {
    deploy(store).await;
    store
        .set_config("web", texts(&[("port", "8080")]), vec![])
        .await
        .unwrap();
    store.remove_application("other", true).await.unwrap();
    let before = fingerprint(store).await;
    let invalid = |e: StoreError, words: &[&str]| match &e {
        StoreError::Invalid(m) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let next = module_bytes("next");
    assert_eq!(
        store
            .upgrade_charm("nope", "n.wasm", web_next(web_endpoints()), &next)
            .await
            .unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
    // An endpoint in use disappears: the relation using it is named.
    let without_db = vec![endpoint("cluster", RelationRole::Peers, "web-peers")];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(without_db), &next)
            .await
            .unwrap_err(),
        &["web", "no endpoint \"db\"", "web:db db:db"],
    );
    let without_peers = vec![endpoint("db", RelationRole::Requires, "pgsql")];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(without_peers), &next)
            .await
            .unwrap_err(),
        &["\"cluster\"", "web:cluster"],
    );
    // An endpoint in use changes its interface, or its role.
    let mysql = vec![
        endpoint("db", RelationRole::Requires, "mysql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(mysql), &next)
            .await
            .unwrap_err(),
        &["\"db\"", "pgsql", "mysql", "web:db db:db"],
    );
    let provides = vec![
        endpoint("db", RelationRole::Provides, "pgsql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(provides), &next)
            .await
            .unwrap_err(),
        &["\"db\"", "from requires pgsql to provides pgsql"],
    );
    invalid(
        store
            .upgrade_charm("other", "n.wasm", metadata("other", vec![]), &next)
            .await
            .unwrap_err(),
        &["other", "being removed"],
    );
    assert_eq!(fingerprint(store).await, before, "a refused upgrade wrote");
    // The module written ahead of the refused step is harmless, and kept by its hash.
    assert_eq!(store.module(&module_hash(&next)).await.unwrap(), Some(next));
}

// ---------------------------------------------------------------- the suite, per backend

macro_rules! contract {
    ($($property:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $property() {
                    let store = super::MemoryStore::new("test-model");
                    super::$property(&store).await;
                }
            )*
        }

        mod sqlite {
            $(
                #[tokio::test]
                async fn $property() {
                    // A real file, so WAL mode and the file's locking are what is tested.
                    let dir = tempfile::tempdir().unwrap();
                    let store = super::sqlite_store(dir.path());
                    super::$property(&store).await;
                }
            )*
        }

        #[cfg(feature = "etcd")]
        mod etcd {
            $(
                #[tokio::test]
                async fn $property() {
                    super::TIMING.with(|t| t.set(super::etcd_only::TIMING));
                    // A real etcd per test, so tests cannot see each other's keys or leases.
                    let server = super::etcd_server::EtcdServer::start();
                    let store = super::etcd_only::open(&server, "test").await;
                    super::$property(&store).await;
                }
            )*
        }
    };
}

fn sqlite_store(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(&dir.join("model.db"), "test-model").unwrap()
}

contract! {
    units_are_added_up_to_a_number_once,
    first_claim_gets_a_term,
    holder_claim_extends_and_keeps_term,
    other_claim_denied_while_lease_live,
    expired_lease_goes_to_next_claimant_with_a_greater_term,
    holder_reclaiming_after_expiry_gets_new_term,
    release_frees_lease_and_terms_never_repeat,
    terms_are_per_application,
    fenced_commit_with_current_term_is_applied,
    stale_term_commit_is_rejected_and_applies_nothing,
    commit_fenced_by_another_holder_is_rejected,
    commit_after_expiry_is_rejected,
    unfenced_leader_only_writes_are_refused,
    unit_writes_need_no_fence,
    commits_at_the_limits_are_applied,
    a_commit_past_a_limit_applies_nothing,
    unknown_relation_applies_nothing,
    commit_for_unknown_unit_is_not_found,
    pod_spec_revision_grows_only_on_change,
    receipt_lists_only_what_changed,
    snapshot_shows_what_a_hook_may_read,
    status_rows_show_leaders_and_hook_errors,
    status_forgets_expired_leaders,
    model_records_apps_units_and_relations,
    add_unit_queues_deploy_hooks,
    add_relation_queues_relation_hooks,
    enqueue_coalesces_behind_the_head,
    committing_a_queued_hook_applies_it_once,
    commits_queue_the_hooks_they_fire,
    hooks_on_many_units_are_all_queued_and_coalesced,
    fenced_out_commit_keeps_its_hook_queued,
    a_commit_whose_hook_read_changed_is_stale_and_applies_nothing,
    what_a_hook_did_not_read_does_not_make_its_commit_stale,
    a_hook_reads_remote_bags_as_it_asks_and_its_commit_checks_those_alone,
    unit_bags_carry_the_network_keys_juju_sets,
    elected_term_round_trips,
    set_config_checks_types_and_fires_config_changed,
    refused_changes_change_nothing,
    remove_unit_follows_juju_order_and_releases_its_lease,
    remove_relation_departs_then_breaks_then_drops_its_bags,
    remove_application_refuses_relations_unless_forced,
    relate_resolves_endpoints_by_interface_and_role,
    deploy_adds_units_and_peer_relations_in_one_step,
    show_unit_and_resolved,
    charm_logs_are_kept_per_unit_in_a_bounded_ring,
    actions_are_recorded_with_their_hook_and_end_in_its_commit,
    refused_actions_change_nothing,
    modules_are_kept_by_content_hash,
    upgrade_charm_carries_settings_over_and_fires_upgrade_then_config_changed,
    refused_upgrades_change_nothing,
}

// ------------------------------------------- followers' wake-ups on memory and SQLite

/// Whether `signal` moves within a second.
async fn woken(signal: &mut tokio::sync::watch::Receiver<u64>) -> bool {
    tokio::time::timeout(Duration::from_secs(1), signal.changed())
        .await
        .is_ok_and(|r| r.is_ok())
}

/// A release wakes the lease's followers; a claim, a renewal and a release by another unit
/// (which releases nothing) do not.
async fn a_release_wakes_the_followers(holder: Arc<dyn Store>, follower: Arc<dyn Store>) {
    let mut gone = follower
        .clone()
        .lease_signal("web")
        .expect("the store signals");
    hold(holder.as_ref(), "web", "web/0", LONG).await;
    hold(holder.as_ref(), "web", "web/0", LONG).await;
    holder.release("web", "web/1").await.unwrap();
    assert!(!woken(&mut gone).await, "woken with the lease still held");
    holder.release("web", "web/0").await.unwrap();
    assert!(woken(&mut gone).await, "the release was not heard");
    // Others' leases are theirs.
    hold(holder.as_ref(), "db", "db/0", LONG).await;
    holder.release("db", "db/0").await.unwrap();
    assert!(
        !woken(&mut gone).await,
        "woken by another application's release"
    );
}

#[tokio::test]
async fn memory_a_release_wakes_the_followers() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("m"));
    a_release_wakes_the_followers(store.clone(), store).await;
}

#[tokio::test]
async fn sqlite_a_release_wakes_the_followers_here() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    a_release_wakes_the_followers(store.clone(), store).await;
}

#[tokio::test]
async fn sqlite_a_release_by_another_connection_on_the_file_wakes_the_followers() {
    // Each handle has its own connection, as another process on the file would.
    let dir = tempfile::tempdir().unwrap();
    let holder: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    let follower: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    a_release_wakes_the_followers(holder, follower).await;
}

// ---------------------------------------------------------------- etcd only

#[cfg(feature = "etcd")]
#[path = "../../tests/src/etcd_server.rs"]
// Shared with charm-tests, which starts TLS servers and clusters too.
#[allow(dead_code)]
mod etcd_server;

#[cfg(feature = "etcd")]
mod etcd_only {
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
}

// ---------------------------------------------------------------- SQLite only

mod sqlite_only {
    use std::path::Path;
    use std::sync::{Arc, Barrier};

    use super::*;

    fn bytes(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap()
    }

    /// Hosts (and `status`) started at once on a file that does not exist yet all open it:
    /// one creates the schema, the others wait for it and find it whole.
    #[test]
    fn hosts_opening_a_new_file_at_once_all_open_it() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.db");
            let start = Arc::new(Barrier::new(4));
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        SqliteStore::open(&path, "test-model").map(|_| ())
                    })
                })
                .collect();
            for opener in openers {
                let opened = opener.join().unwrap();
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
        }
    }

    /// A host keeps each application's list of live units, and each application bag,
    /// between snapshots while the file's generation for it stands (schema 8): another
    /// host's new unit, its unit marked dying and its write to an application bag show in
    /// the next snapshot all the same.
    #[tokio::test]
    async fn another_hosts_changes_show_in_the_next_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let here = SqliteStore::open(&path, "test-model").unwrap();
        let m = deploy_at_rest(&here).await;
        let there = SqliteStore::open(&path, "test-model").unwrap();
        another_hosts_unit_changes_show(&here, &there, &m).await;

        let web_bag = |snap: charm_host::model::UnitSnapshot| {
            (*snap.relations[&m.web_db.id].app_bags["web"]).clone()
        };
        assert!(web_bag(here.snapshot("db/0").await.unwrap()).is_empty());
        let fence = hold(&there, "web", "web/0", LONG).await;
        there
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        let bag = web_bag(here.snapshot("db/0").await.unwrap());
        assert_eq!(bag.get("database").map(String::as_str), Some("web"));
        // A key removed moves the generation too.
        let mut removal = Changes::default();
        removal
            .app_bags
            .insert(m.web_db.id, writes(&[("database", None)]));
        there
            .commit("web/0", None, &removal, Some(&fence))
            .await
            .unwrap();
        assert!(web_bag(here.snapshot("db/0").await.unwrap()).is_empty());
    }

    /// See [`super::last_brokens_at_once_reap_the_relation`].
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn last_brokens_at_once_reap_the_relation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let here = SqliteStore::open(&path, "test-model").unwrap();
        deploy_at_rest(&here).await;
        let there = SqliteStore::open(&path, "test-model").unwrap();
        super::last_brokens_at_once_reap_the_relation(&here, &there).await;
    }

    #[tokio::test]
    async fn commits_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let (m, fence, snap, status, spec, relations) = {
            let store = SqliteStore::open(&path, "test-model").unwrap();
            let m = deploy(&store).await;
            let fence = hold(&store, "web", "web/0", LONG).await;
            store
                .commit("web/0", None, &leader_hook(&m), Some(&fence))
                .await
                .unwrap();
            store
                .set_hook_error("web/2", Some("boom".into()))
                .await
                .unwrap();
            (
                m,
                fence,
                store.snapshot("web/0").await.unwrap(),
                store.status().await.unwrap(),
                store.pod_spec("web").await.unwrap(),
                store.relations().await.unwrap(),
            )
        };
        let store = SqliteStore::open(&path, "test-model").unwrap();
        assert_eq!(store.snapshot("web/0").await.unwrap(), snap);
        assert_eq!(store.status().await.unwrap(), status);
        assert_eq!(store.pod_spec("web").await.unwrap(), spec);
        assert_eq!(store.relations().await.unwrap(), relations);
        assert_eq!(
            store.units("web").await.unwrap(),
            ["web/0", "web/1", "web/2"]
        );
        assert_eq!(
            store.add_unit("web").await.unwrap(),
            "web/3",
            "unit numbers continue"
        );
        // The lease and its term survive: the old holder can still commit with its fence.
        store
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        store.release("web", "web/0").await.unwrap();
        assert_eq!(
            hold(&store, "web", "web/1", LONG).await.term,
            fence.term + 1,
            "terms continue"
        );
        let (next, _) = store
            .add_relation("other-peers", vec![side("other", "cluster")])
            .await
            .unwrap();
        assert_eq!(next.id, m.other_db.id + 1, "relation ids continue");
    }

    const CRASH_DB: &str = "STORE_CONTRACT_CRASH_DB";

    /// I6: a commit the store acknowledged survives the process dying at once after it (no
    /// close, no checkpoint: the commit is only in the WAL).
    #[tokio::test]
    async fn acknowledged_commit_survives_process_crash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sqlite_only::commit_then_abort",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DB, &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(!child.status.success(), "the child did not crash: {stdout}");
        assert!(
            stdout.contains("acknowledged"),
            "the child crashed before its commit: {stdout}"
        );
        let wal = std::fs::metadata(dir.path().join("model.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(
            wal > 0,
            "the commit was checkpointed, so the WAL is not what is being tested"
        );

        let line = |prefix: &str| {
            stdout
                .lines()
                // The test harness may print on the same line before the child does.
                .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
                .unwrap_or_else(|| panic!("no {prefix:?} line: {stdout}"))
                .to_string()
        };
        let committed: u64 = line("committed ").parse().unwrap();
        let acknowledged: BTreeMap<String, Vec<QueuedHook>> =
            serde_json::from_str(&line("queues ")).unwrap();

        let store = SqliteStore::open(&path, "test-model").unwrap();
        // The queues are as the child left them: the committed hook gone, the rest in order.
        let queues = all_queues(&store, &ALL_UNITS).await;
        assert_eq!(queues, acknowledged);
        let web0 = &queues["web/0"];
        assert!(
            web0.iter().all(|q| q.seq != committed),
            "the committed hook is still queued: {web0:?}"
        );
        assert_eq!(web0[0].hook, Hook::ConfigChanged, "{web0:?}");
        assert_eq!(web0.last().unwrap().hook, Hook::UpdateStatus);
        assert_increasing(web0);
        let web1 = hooks_of(&queues["web/1"]);
        assert_eq!(web1[0], Hook::Install);
        assert_eq!(
            web1[web1.len() - 2..],
            [Hook::UpdateStatus, Hook::LeaderSettingsChanged],
            "the commit's follow-up was lost"
        );
        // A restarted host running the committed hook again applies nothing.
        let rerun = Changes {
            stored: writes(&[("installed", Some("twice"))]),
            ..Changes::default()
        };
        assert_eq!(
            store
                .commit("web/0", Some(committed), &rerun, None)
                .await
                .unwrap_err(),
            CommitError::NotQueued {
                unit: "web/0".into(),
                seq: committed
            }
        );

        let snap = store.snapshot("web/0").await.unwrap();
        assert_eq!(snap.leader_data["secret"], "s3cret");
        assert_eq!(snap.stored["installed"], "yes");
        assert_eq!(
            store.pod_spec("web").await.unwrap().map(|p| p.revision),
            Some(1)
        );
        assert_eq!(
            store
                .leader("web")
                .await
                .unwrap()
                .map(|l| (l.holder, l.term)),
            Some(("web/0".into(), 1))
        );
    }

    /// The child of `acknowledged_commit_survives_process_crash`.
    #[tokio::test]
    #[ignore = "run as a child process by acknowledged_commit_survives_process_crash"]
    async fn commit_then_abort() {
        let path =
            std::env::var_os(CRASH_DB).expect("run by acknowledged_commit_survives_process_crash");
        let store = SqliteStore::open(Path::new(&path), "test-model").unwrap();
        let m = deploy(&store).await;
        let fence = hold(&store, "web", "web/0", LONG).await;
        store
            .enqueue(vec![
                on("web/0", Hook::UpdateStatus),
                on("web/1", Hook::UpdateStatus),
            ])
            .await
            .unwrap();
        // web/0 runs the first hook in its queue (install) and commits it.
        let head = store.queued("web/0").await.unwrap()[0].seq;
        store
            .commit("web/0", Some(head), &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        // What the parent must find after the crash.
        let queues = all_queues(&store, &ALL_UNITS).await;
        use std::io::Write;
        println!("committed {head}");
        println!("queues {}", serde_json::to_string(&queues).unwrap());
        println!("acknowledged");
        std::io::stdout().flush().unwrap();
        std::process::abort();
    }

    #[tokio::test]
    async fn pod_spec_history_has_every_revision() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let store = SqliteStore::open(&path, "test-model").unwrap();
        deploy(&store).await;
        let fence = hold(&store, "web", "web/0", LONG).await;
        let mut written = Vec::new();
        for i in 0..6u64 {
            let write = PodSpecWrite::new(
                json!({"containers": [{"name": "web", "image": format!("nginx:1.{i}")}]}),
                (i % 2 == 1).then(|| json!({"secrets": [{"name": format!("s{i}")}]})),
            );
            let changes = Changes {
                pod_spec: Some(Arc::new(write.clone())),
                ..Changes::default()
            };
            let done = store
                .commit("web/0", None, &changes, Some(&fence))
                .await
                .unwrap();
            assert_eq!(done.receipt.pod_spec_revision, Some(i + 1));
            // The same spec again makes no revision, and no history row.
            let again = store
                .commit("web/0", None, &changes, Some(&fence))
                .await
                .unwrap();
            assert_eq!(again.receipt.pod_spec_revision, None);
            written.push(write);
        }
        let check = |store: &SqliteStore| {
            let history = store.pod_spec_history("web").unwrap();
            assert_eq!(
                history.iter().map(|r| r.revision).collect::<Vec<_>>(),
                (1..=6).collect::<Vec<_>>(),
                "a revision is missing or repeated"
            );
            for (record, write) in history.iter().zip(&written) {
                assert_eq!(
                    (&record.spec, &record.k8s_resources),
                    (&write.spec, &write.k8s_resources)
                );
            }
            history
        };
        let history = check(&store);
        assert_eq!(
            store.pod_spec("web").await.unwrap().as_ref(),
            history.last(),
            "the current spec is the last revision"
        );
        assert_eq!(store.pod_spec_history("db").unwrap(), []);
        assert_eq!(
            store.pod_spec_history("nope").unwrap_err(),
            StoreError::NotFound("application nope".into())
        );
        drop(store);
        check(&SqliteStore::open(&path, "test-model").unwrap());
    }

    /// The first schema, exactly as hosts of version 1 wrote it.
    const SCHEMA_V1: &str = include_str!("../src/store/schema/v1.sql");

    fn user_version(path: &Path) -> i32 {
        rusqlite::Connection::open(path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    #[tokio::test]
    async fn version_1_file_migrates_to_the_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let spec = json!({"containers": [{"name": "web"}]});
        {
            // A file a version 1 host wrote: one application, one unit, a pod spec at
            // revision 3, some stored state.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            let status = serde_json::to_string(&Status::default()).unwrap();
            conn.execute("INSERT INTO model (id, name) VALUES (1, 'test-model')", [])
                .unwrap();
            conn.execute(
                "INSERT INTO applications (name, charm, metadata, config, status, next_unit)
                 VALUES ('web', 'charms/web.wasm', ?1, '{}', ?2, 1)",
                [
                    serde_json::to_string(&metadata("web", vec![])).unwrap(),
                    status.clone(),
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO units (name, app, number, status, workload_version, hook_error)
                 VALUES ('web/0', 'web', 0, ?1, '1.0', NULL)",
                [&status],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO pod_specs (app, revision, spec, k8s_resources)
                 VALUES ('web', 3, ?1, NULL)",
                [spec.to_string()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO stored_state (unit, key, value) VALUES ('web/0', 'k', 'v')",
                [],
            )
            .unwrap();
        }
        assert_eq!(user_version(&path), 1);

        let store = SqliteStore::open(&path, "test-model").unwrap();
        assert_eq!(user_version(&path), 8);
        let snap = store.snapshot("web/0").await.unwrap();
        assert_eq!(snap.stored["k"], "v", "version 1 data was lost");
        assert_eq!(
            store.application("web").await.unwrap().module,
            None,
            "a migrated application names no kept module"
        );
        assert_eq!(
            store.action(1).await.unwrap_err(),
            StoreError::NotFound("action 1".into()),
            "a migrated file has no actions"
        );
        assert_eq!(snap.elected_term, None);
        assert_eq!(store.queued("web/0").await.unwrap(), []);
        assert_eq!(
            store.pod_spec_history("web").unwrap(),
            [charm_host::model::PodSpecRecord {
                revision: 3,
                spec: spec.clone(),
                k8s_resources: None
            }],
            "the history starts at the revision the file had"
        );

        // Queues work.
        let queued = store
            .enqueue(vec![
                on("web/0", Hook::UpdateStatus),
                on("web/0", Hook::ConfigChanged),
            ])
            .await
            .unwrap();
        assert_eq!(hooks_of(&queued), [Hook::UpdateStatus, Hook::ConfigChanged]);
        assert_eq!(store.queued("web/0").await.unwrap(), queued);
        let changes = Changes {
            elected_term: Some(2),
            ..Changes::default()
        };
        store
            .commit("web/0", Some(queued[0].seq), &changes, None)
            .await
            .unwrap();
        assert_eq!(store.queued("web/0").await.unwrap(), queued[1..]);
        assert!(matches!(
            store
                .commit("web/0", Some(queued[0].seq), &changes, None)
                .await,
            Err(CommitError::NotQueued { .. })
        ));
        assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, Some(2));
        assert_eq!(store.add_unit("web").await.unwrap(), "web/1");
        let deployed = store.queued("web/1").await.unwrap();
        assert_eq!(
            hooks_of(&deployed),
            [Hook::Install, Hook::ConfigChanged, Hook::Start]
        );
        assert!(deployed[0].seq > queued[1].seq);
        // New revisions continue the history.
        let fence = hold(&store, "web", "web/0", LONG).await;
        let new_spec = Changes {
            pod_spec: Some(Arc::new(PodSpecWrite::new(
                json!({"containers": [{"name": "web", "image": "new"}]}),
                None,
            ))),
            ..Changes::default()
        };
        store
            .commit("web/0", None, &new_spec, Some(&fence))
            .await
            .unwrap();
        let revisions: Vec<_> = store
            .pod_spec_history("web")
            .unwrap()
            .iter()
            .map(|r| r.revision)
            .collect();
        assert_eq!(revisions, [3, 4]);

        // Reopening a current file migrates nothing and keeps the queues.
        drop(store);
        let store = SqliteStore::open(&path, "test-model").unwrap();
        assert_eq!(user_version(&path), 8);
        assert_eq!(store.queued("web/0").await.unwrap(), queued[1..]);
        assert_eq!(store.queued("web/1").await.unwrap(), deployed);
    }

    /// A version 2 file's relations are indexed by application when it migrates (to 3):
    /// snapshots, commits' follow-ups and the duplicate check find them.
    #[tokio::test]
    async fn version_2_relations_are_indexed_by_application_on_migration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let (m, before) = {
            let store = SqliteStore::open(&path, "test-model").unwrap();
            let m = deploy_at_rest(&store).await;
            (m, store.snapshot("web/0").await.unwrap())
        };
        assert!(!before.relations.is_empty());
        {
            // What a version 2 host left: no index, no `dying` columns and no logs (version 4),
            // no actions (version 5), no modules (version 6), no queue index by hook (7),
            // no unit generations (8).
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "DROP TRIGGER unit_added;
                 DROP TRIGGER unit_deleted;
                 DROP TRIGGER unit_dying;
                 DROP TRIGGER app_bag_key_added;
                 DROP TRIGGER app_bag_key_changed;
                 DROP TRIGGER app_bag_key_removed;
                 DROP TABLE app_bag_generations;
                 DROP TABLE generation_counter;
                 ALTER TABLE applications DROP COLUMN units_generation;
                 DROP INDEX hook_queue_by_hook;
                 DROP TABLE relation_apps;
                 DROP TABLE modules;
                 ALTER TABLE applications DROP COLUMN module;
                 ALTER TABLE applications DROP COLUMN dying;
                 ALTER TABLE units DROP COLUMN dying;
                 ALTER TABLE relations DROP COLUMN dying;
                 DROP TABLE unit_logs;
                 DROP TABLE actions;
                 PRAGMA user_version = 2;",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path, "test-model").unwrap();
        assert_eq!(user_version(&path), 8);
        assert_eq!(store.snapshot("web/0").await.unwrap(), before);
        let fence = hold(&store, "web", "web/0", LONG).await;
        let committed = store
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        assert!(
            committed
                .queued
                .iter()
                .any(|q| matches!(&q.hook, Hook::RelationChanged(r) if r.id == m.web_db.id)),
            "the commit's follow-ups reach the other side: {:?}",
            committed.queued
        );
        let again = store.add_relation("pgsql", before_endpoints(&store, m.web_db.id).await);
        assert!(matches!(again.await, Err(StoreError::AlreadyExists(_))));
    }

    async fn before_endpoints(
        store: &SqliteStore,
        id: charm_host::model::RelationId,
    ) -> Vec<RelationEndpoint> {
        let relations = store.relations().await.unwrap();
        relations
            .into_iter()
            .find(|r| r.id == id)
            .unwrap()
            .endpoints
    }

    /// A host killed while it held the file leaves its write-ahead log and shared-memory
    /// index behind; the next host must open it with the logged commits. The crash is the
    /// files copied while the writer has them open, the index's header torn.
    #[tokio::test]
    async fn a_file_left_by_a_killed_host_opens_with_its_logged_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let crashed = dir.path().join("crashed");
        std::fs::create_dir(&crashed).unwrap();
        let store = SqliteStore::open(&path, "test-model").unwrap();
        let m = deploy(&store).await;
        let fence = hold(&store, "web", "web/0", LONG).await;
        store
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let from = dir.path().join(format!("model.db{suffix}"));
            std::fs::copy(&from, crashed.join(format!("model.db{suffix}"))).unwrap();
        }
        drop(store);
        let shm = crashed.join("model.db-shm");
        let len = std::fs::metadata(&shm).unwrap().len() as usize;
        std::fs::write(&shm, vec![0u8; len]).unwrap();
        let reopened = SqliteStore::open(&crashed.join("model.db"), "test-model")
            .expect("a crashed host's file opens");
        let snapshot = reopened.snapshot("web/0").await.unwrap();
        assert_eq!(
            snapshot.leader_data["secret"], "s3cret",
            "the logged commit is there"
        );
    }

    /// A host killed inside a rollback-journal transaction (as when it dies while first
    /// switching a new file to write-ahead logging) leaves a hot journal that a read-only
    /// connection may not roll back: the file must still open, rolled back, not be
    /// reported unavailable for ever.
    #[tokio::test]
    async fn a_hot_journal_left_by_a_killed_host_is_rolled_back_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let crashed = dir.path().join("crashed");
        std::fs::create_dir(&crashed).unwrap();
        let units = {
            let store = SqliteStore::open(&path, "test-model").unwrap();
            deploy(&store).await;
            store.units("web").await.unwrap()
        };
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        // A small cache spills the transaction's pages into the file before it commits.
        conn.execute_batch(
            "PRAGMA cache_size = 1; BEGIN IMMEDIATE;
             CREATE TABLE scratch (b BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
             INSERT INTO scratch SELECT randomblob(4000) FROM n;",
        )
        .unwrap();
        let journal = dir.path().join("model.db-journal");
        assert!(journal.exists(), "the transaction has a journal");
        for suffix in ["", "-journal"] {
            let from = dir.path().join(format!("model.db{suffix}"));
            std::fs::copy(&from, crashed.join(format!("model.db{suffix}"))).unwrap();
        }
        conn.execute_batch("ROLLBACK").unwrap();
        drop(conn);
        let reopened = SqliteStore::open(&crashed.join("model.db"), "test-model")
            .expect("a file with a hot journal opens");
        assert_eq!(reopened.units("web").await.unwrap(), units);
        assert!(!crashed.join("model.db-journal").exists(), "rolled back");
    }

    /// A store opened to read writes nothing: not the database, not its log, whatever it
    /// is asked; a write through it is refused. A missing file, and a file of another
    /// model, are refused and nothing is created.
    #[tokio::test]
    async fn a_store_opened_to_read_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let err = SqliteStore::open_read_only(&path, "test-model").unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(m) if m.contains("no model at")),
            "{err:?}"
        );
        assert!(!path.exists(), "a read made the file");

        let writer = SqliteStore::open(&path, "test-model").unwrap();
        deploy_at_rest(&writer).await;
        let log = dir.path().join("model.db-wal");
        let (db_before, log_before) = (bytes(&path), bytes(&log));
        let reader = SqliteStore::open_read_only(&path, "test-model").unwrap();
        let status = reader.status().await.unwrap();
        assert_eq!(status.units.len(), 5, "{status:?}");
        reader.snapshot("web/0").await.unwrap();
        reader.debug_log(None, 10).await.unwrap();
        reader.relations().await.unwrap();
        let refused = reader.add_unit("web").await.unwrap_err();
        assert!(matches!(refused, StoreError::Unavailable(_)), "{refused:?}");
        drop(reader);
        assert_eq!(bytes(&path), db_before, "a read wrote the database");
        assert_eq!(bytes(&log), log_before, "a read wrote the log");
        assert_eq!(writer.units("web").await.unwrap().len(), 3);

        let err = SqliteStore::open_read_only(&path, "other-model").unwrap_err();
        assert!(
            matches!(&err, StoreError::Incompatible(m) if m.contains("other-model")),
            "{err:?}"
        );
    }

    /// A file of an older schema is not moved forward by a read: refused, naming what
    /// moves it, and left as it was.
    #[tokio::test]
    async fn a_read_does_not_migrate_an_older_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        drop(SqliteStore::open(&path, "test-model").unwrap());
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
        }
        let before = bytes(&path);
        let err = SqliteStore::open_read_only(&path, "test-model").unwrap_err();
        assert!(
            matches!(&err, StoreError::Incompatible(m) if m.contains("schema version 1") && m.contains("moves it forward")),
            "{err:?}"
        );
        assert_eq!(bytes(&path), before, "a read migrated the file");
    }

    #[tokio::test]
    async fn newer_schema_is_refused_and_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        drop(SqliteStore::open(&path, "test-model").unwrap());
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let before = bytes(&path);
        let err = SqliteStore::open(&path, "test-model").unwrap_err();
        let StoreError::Incompatible(message) = &err else {
            panic!("expected Incompatible, got {err:?}")
        };
        assert!(
            message.contains("schema version 99") && message.contains("newer"),
            "unclear: {message}"
        );
        assert_eq!(bytes(&path), before, "the refused file was modified");
    }

    #[tokio::test]
    async fn garbage_file_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        // Not SQLite at all; and a SQLite header followed by garbage.
        let mut noise: Vec<u8> = (0..8192u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (name, contents) in [
            ("noise.db", noise.clone()),
            ("damaged.db", {
                noise[..16].copy_from_slice(b"SQLite format 3\0");
                noise
            }),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &contents).unwrap();
            let err = SqliteStore::open(&path, "test-model").unwrap_err();
            assert!(
                matches!(&err, StoreError::Corrupt(m) if m.contains(name)),
                "{name}: expected Corrupt naming the file, got {err:?}"
            );
            assert_eq!(bytes(&path), contents, "{name} was modified");
        }
    }

    #[tokio::test]
    async fn another_programs_database_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, data BLOB)")
                .unwrap();
        }
        let before = bytes(&path);
        let err = SqliteStore::open(&path, "test-model").unwrap_err();
        assert!(
            matches!(&err, StoreError::Incompatible(m) if m.contains("another program")),
            "{err:?}"
        );
        assert_eq!(bytes(&path), before);
    }

    #[tokio::test]
    async fn another_models_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        drop(SqliteStore::open(&path, "prod").unwrap());
        let err = SqliteStore::open(&path, "staging").unwrap_err();
        assert!(
            matches!(&err, StoreError::Incompatible(m) if m.contains("prod")),
            "{err:?}"
        );
        assert!(SqliteStore::open(&path, "prod").is_ok());
    }

    #[tokio::test]
    async fn in_memory_store_keeps_the_contract() {
        let store = SqliteStore::in_memory("test-model").unwrap();
        let m = deploy(&store).await;
        let fence = hold(&store, "web", "web/0", LONG).await;
        assert_eq!(
            store
                .commit("web/0", None, &leader_hook(&m), Some(&fence))
                .await
                .unwrap()
                .receipt
                .pod_spec_revision,
            Some(1)
        );
    }

    /// Two handles on one file stand for two host processes: each has its own connection,
    /// and only SQLite's file locks keep them apart.
    #[tokio::test]
    async fn two_handles_contend_for_one_lease() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let a = Arc::new(SqliteStore::open(&path, "test-model").unwrap());
        let m = deploy_at_rest(a.as_ref()).await;
        let b = Arc::new(SqliteStore::open(&path, "test-model").unwrap());

        // Both claim at once, many times over, for fresh applications. Enough rounds that
        // the two transactions overlap (a claim not under the write lock from its first read
        // fails this test within a few hundred rounds). Errors are collected, not unwrapped,
        // so one thread's failure cannot leave the other waiting at the barrier.
        const ROUNDS: usize = 500;
        let barrier = Arc::new(Barrier::new(2));
        let contend = |store: Arc<SqliteStore>, unit: &'static str| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                (0..ROUNDS)
                    .map(|round| {
                        barrier.wait();
                        rt.block_on(store.claim(&format!("race{round}"), unit, LONG))
                    })
                    .collect::<Vec<_>>()
            })
        };
        let (ta, tb) = (contend(a.clone(), "race/0"), contend(b.clone(), "race/1"));
        let (ca, cb) = (ta.join().unwrap(), tb.join().unwrap());
        for (round, (x, y)) in ca.iter().zip(&cb).enumerate() {
            let (x, y) = match (x, y) {
                (Ok(x), Ok(y)) => (x, y),
                other => panic!("round {round}: a claim failed: {other:?}"),
            };
            let (winner, denied) = match (x, y) {
                (Claim::Held(l), Claim::Denied { holder, term, .. })
                | (Claim::Denied { holder, term, .. }, Claim::Held(l)) => (l, (holder, *term)),
                other => panic!("round {round}: not exactly one holder: {other:?}"),
            };
            assert_eq!(winner.term, 1);
            assert_eq!(
                denied,
                (&winner.holder, 1),
                "round {round}: the denial names another holder"
            );
        }

        // The web lease: a takes it; b is denied, and b's commit under a fence of its own
        // making is rejected and applies nothing, seen from either handle.
        let fence = hold(a.as_ref(), "web", "web/0", LONG).await;
        assert!(matches!(
            b.claim("web", "web/1", LONG).await.unwrap(),
            Claim::Denied { holder, term: 1, .. } if holder == "web/0"
        ));
        let loser = Fence {
            app: "web".into(),
            holder: "web/1".into(),
            term: fence.term,
        };
        let mut changes = leader_hook(&m);
        changes.unit_bags = BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-1"))]))]);
        let err = b
            .commit("web/1", None, &changes, Some(&loser))
            .await
            .unwrap_err();
        assert_eq!(err, CommitError::Fenced { fence: loser });
        assert_eq!(a.pod_spec("web").await.unwrap(), None);
        assert!(
            written(&a.snapshot("web/1").await.unwrap().relations[&m.web_db.id].unit_bags["web/1"])
                .is_empty()
        );
        // The winner's commit through the other handle is accepted and visible to both.
        b.commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        assert_eq!(
            a.pod_spec("web").await.unwrap().map(|p| p.revision),
            Some(1)
        );
    }
}

/// A snapshot's shared bags, as plain bags to compare.
/// The bags as the charms wrote them: without the network keys the host shows in every unit
/// bag ([`unit_bags_carry_the_network_keys_juju_sets`]).
fn plain(bags: &BTreeMap<String, std::sync::Arc<Bag>>) -> BTreeMap<String, Bag> {
    bags.iter().map(|(k, v)| (k.clone(), written(v))).collect()
}

/// A unit bag as its charm wrote it: without the network keys the host shows.
fn written(bag: &Bag) -> Bag {
    let mut bag = bag.clone();
    for key in charm_host::model::network::NETWORK_KEYS {
        bag.remove(key);
    }
    bag
}
