//! The store contract: one suite of properties, run against every backend.
//!
//! Each property is an `async fn(&dyn Store)`, in a module by topic (`leases`,
//! `fenced_commits`, `receipts`, `reading`, `hook_queues`, `operating`, `actions`,
//! `upgrades`); `contract!` instantiates every property once per backend (`memory::*`,
//! `sqlite::*`, `etcd::*`), so a new backend joins by adding one module line. The fixtures
//! they share are here. `wake_ups`, `sqlite_only` and `etcd_only` hold what only some
//! backends can show: a file's durability across reopen and the files it must not touch,
//! two handles on one file, an etcd prefix's bounds and access.

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

/// A unit's remove hook and a relation's last relation-broken, on two hosts at once: the
/// relation goes and stays gone. (On etcd the removal, which looks for dying relations its
/// unit leaves reapable, read the relation under a prefix that does not see it deleted, so
/// its write brought it back, dying with no hook left to reap it.) `m` deployed at rest.
async fn a_removal_beside_the_last_relation_broken_leaves_no_relation(
    here: &dyn Store,
    there: &dyn Store,
) {
    for round in 0..8 {
        let leaving = here.add_unit("web").await.unwrap();
        let mut units = vec!["db/0".to_string(), leaving.clone()];
        units.extend(ALL_UNITS.iter().map(|u| u.to_string()));
        units.dedup();
        hooks_run(here, &units.iter().map(String::as_str).collect::<Vec<_>>()).await;
        here.remove_unit(&leaving).await.unwrap();
        let (rel, _) = here.remove_relation("web", "db").await.unwrap();
        // Every hook but db/0's relation-broken and the leaving unit's remove.
        for unit in &units {
            for queued in here.queued(unit).await.unwrap() {
                let last = match &queued.hook {
                    Hook::RelationBroken(_) => unit == "db/0",
                    Hook::Remove => unit == &leaving,
                    _ => false,
                };
                if !last {
                    here.commit(unit, Some(queued.seq), &Changes::default(), None)
                        .await
                        .unwrap();
                }
            }
        }
        tokio::join!(run_only_hook(here, "db/0"), run_only_hook(there, &leaving));
        let left: Vec<String> = here
            .relations()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.id == rel.id)
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

mod actions;
mod fenced_commits;
mod hook_queues;
mod leases;
mod operating;
mod reading;
mod receipts;
mod upgrades;
mod wake_ups;

#[cfg(feature = "etcd")]
#[path = "../../../tests/src/etcd_server.rs"]
// Shared with charm-tests, which starts TLS servers and clusters too.
#[allow(dead_code)]
mod etcd_server;

#[cfg(feature = "etcd")]
mod etcd_only;
mod sqlite_only;

// The properties, by name, for `contract!`.
use actions::*;
use fenced_commits::*;
use hook_queues::*;
use leases::*;
use operating::*;
use reading::*;
use receipts::*;
use upgrades::*;

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
    a_relation_of_many_units_stays_until_its_last_relation_broken,
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
