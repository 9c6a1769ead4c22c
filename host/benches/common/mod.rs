//! What the hook benchmarks share: the guest charms they run, and a deployed discourse unit
//! related to PostgreSQL, whose `db-relation-changed` is the seed's hook.

#![allow(dead_code)] // Each bench uses its own part of this module.

/// The benches allocate as the `charm-host` binary does (see `charm_host::allocator`); each
/// bench's `main` calls `charm_host::allocator::configure` first.
#[global_allocator]
static ALLOCATOR: charm_host::allocator::Allocator = charm_host::allocator::Allocator;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use charm_host::bindings::types::{Event, RelationEvent};
use charm_host::charm::{Charm, CharmRuntime, RuntimeConfig};
use charm_host::metrics::{HostMetrics, UnitMetrics};
use charm_host::model::{
    ApplicationRecord, Changes, CharmMetadata, EndpointMeta, RelationEndpoint, RelationId,
    RelationRole, UnitSnapshot,
};
use charm_host::store::{Claim, Fence, HookCommit, MeteredStore, Store};
use tokio::runtime::Runtime;

/// The compiled guests: the discourse charm and the empty charm (the floor).
pub struct Guests {
    /// `charms/discourse`, built as `make demo` builds it.
    pub discourse: PathBuf,
    /// `tests/guests/empty`: a charm of our world that does nothing.
    pub empty: PathBuf,
    /// `tests/guests/replay`: a charm of our world that makes the host calls it is given.
    pub replay: PathBuf,
    /// `charms/postgresql`, built as `make demo` builds it.
    pub postgresql: PathBuf,
}

/// Builds the guests for `wasm32-wasip2` with the `charm` profile, in a target directory of
/// their own (the one `cargo bench` uses is locked while it runs).
pub fn guests() -> Guests {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ is in the workspace");
    let target = root.join("target/bench-guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "--quiet",
            "--profile",
            "charm",
            "--target",
            "wasm32-wasip2",
        ])
        .args([
            "-p",
            "discourse",
            "-p",
            "postgresql",
            "-p",
            "empty",
            "-p",
            "replay",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("cannot run cargo to build the guest charms");
    assert!(status.success(), "building the guest charms failed");
    let built = target.join("wasm32-wasip2/charm");
    Guests {
        discourse: built.join("discourse.wasm"),
        empty: built.join("empty.wasm"),
        replay: built.join("replay.wasm"),
        postgresql: built.join("postgresql.wasm"),
    }
}

/// A runtime as the host's defaults make it, without the on-disk cache unless given one.
/// `BENCH_HOOK_SLOTS=N` sizes its pool for `N` hooks at once: under valgrind, whose address
/// space cannot hold the default pool's reservation, `BENCH_HOOK_SLOTS=2`.
pub fn runtime(compile_cache: Option<PathBuf>) -> CharmRuntime {
    let defaults = RuntimeConfig::default();
    let max_concurrent_hooks = std::env::var("BENCH_HOOK_SLOTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(defaults.max_concurrent_hooks);
    CharmRuntime::new(RuntimeConfig {
        compile_cache,
        max_concurrent_hooks,
        ..defaults
    })
    .expect("the engine starts")
}

/// Loads a charm.
pub fn load(runtime: &CharmRuntime, path: &Path) -> Charm {
    runtime
        .load_file(path)
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn postgresql() -> ApplicationRecord {
    ApplicationRecord {
        name: "postgresql".into(),
        charm: "postgresql.wasm".into(),
        metadata: CharmMetadata {
            name: "postgresql".into(),
            summary: String::new(),
            relations: vec![EndpointMeta {
                name: "db".into(),
                role: RelationRole::Provides,
                interface: "pgsql".into(),
                limit: None,
            }],
            config: vec![],
            actions: vec![],
        },
        config: BTreeMap::new(),
        module: None,
    }
}

/// The leadership of `unit`'s application, claimed for an hour (longer than any run).
pub async fn lead(store: &dyn Store, app: &str, unit: &str) -> Fence {
    let Claim::Held(lease) = store
        .claim(app, unit, Duration::from_secs(3600))
        .await
        .expect("the store answers")
    else {
        panic!("{unit} cannot lead {app}");
    };
    Fence {
        app: app.into(),
        holder: unit.into(),
        term: lease.term,
    }
}

/// One discourse unit, leader of its application, related to a PostgreSQL that published
/// its `master` connection string: what its `db-relation-changed` reads.
pub struct Unit {
    /// The unit's name.
    pub name: String,
    /// Its leadership.
    pub fence: Fence,
    /// The hook: `db-relation-changed` for PostgreSQL's application bag.
    pub event: Event,
}

/// Deploys `count` discourse applications of one unit each (so every unit leads and sets a
/// pod spec), each related to its own PostgreSQL, in `store`.
pub async fn deploy(store: &dyn Store, discourse: &CharmMetadata, count: usize) -> Vec<Unit> {
    let mut units = Vec::with_capacity(count);
    for n in 0..count {
        let (app, db) = if count == 1 {
            ("discourse".to_string(), "postgresql".to_string())
        } else {
            (format!("discourse-{n}"), format!("postgresql-{n}"))
        };
        store
            .add_application(ApplicationRecord {
                name: app.clone(),
                charm: "discourse.wasm".into(),
                metadata: discourse.clone(),
                config: BTreeMap::new(),
                module: None,
            })
            .await
            .unwrap();
        store
            .add_application(ApplicationRecord {
                name: db.clone(),
                ..postgresql()
            })
            .await
            .unwrap();
        let unit = store.add_unit(&app).await.unwrap();
        let db_unit = store.add_unit(&db).await.unwrap();
        let endpoints = [&app, &db].map(|a| RelationEndpoint {
            app: a.clone(),
            endpoint: "db".into(),
        });
        let relation: RelationId = store
            .add_relation("pgsql", endpoints.to_vec())
            .await
            .unwrap()
            .0
            .id;
        // Their first hooks run, writing nothing: a unit sees a relation from its
        // relation-created on, so the hook measured runs on a model at rest, as the seed's.
        for u in [&unit, &db_unit] {
            for queued in store.queued(u).await.unwrap() {
                store
                    .commit(u, Some(queued.seq), &Changes::default(), None)
                    .await
                    .unwrap();
            }
        }
        let db_fence = lead(store, &db, &db_unit).await;
        let published = Changes {
            app_bags: BTreeMap::from([(
                relation,
                BTreeMap::from([(
                    "master".to_string(),
                    Some(format!(
                        "host={db}-0.{db}-endpoints port=5432 dbname=discourse user=discourse password=secret"
                    )),
                )]),
            )]),
            ..Changes::default()
        };
        store
            .commit(&db_unit, None, &published, Some(&db_fence))
            .await
            .unwrap();
        let fence = lead(store, &app, &unit).await;
        units.push(Unit {
            event: Event::RelationChanged(RelationEvent {
                id: relation,
                name: "db".into(),
                remote_app: db.clone(),
                remote_unit: None,
            }),
            name: unit,
            fence,
        });
    }
    units
}

/// One full hook of `unit`: its snapshot read from the store, `charm` run in a fresh
/// instance, its writes committed under its fence. Returns whether it set a pod spec.
pub fn full_hook(rt: &Runtime, store: &dyn Store, charm: &Charm, unit: &Unit) -> bool {
    let snapshot: UnitSnapshot = rt.block_on(store.snapshot(&unit.name)).unwrap();
    let run = charm.run_hook(snapshot, Some(unit.fence.clone()), None, &unit.event);
    debug_assert_eq!(run.outcome, charm_host::charm::HookOutcome::Succeeded);
    let set_spec = run.changes.pod_spec.is_some();
    rt.block_on(store.commit(&unit.name, None, &run.changes, Some(&unit.fence)))
        .expect("the commit is accepted");
    set_spec
}

/// [`full_hook`] as a unit's agent runs it now: the hook's read set taken with its
/// snapshot, and the commit checked against it and against the unit's ownership lease,
/// which `unit`'s fence holder must hold ([`own`]). Returns whether it set a pod spec.
#[allow(dead_code)] // Not every bench that shares this module runs it.
pub fn checked_full_hook(rt: &Runtime, store: &dyn Store, charm: &Charm, unit: &Unit) -> bool {
    let read = rt.block_on(store.hook_read(&unit.name)).unwrap();
    let run = charm.run_hook(
        read.snapshot.clone(),
        Some(unit.fence.clone()),
        None,
        &unit.event,
    );
    debug_assert_eq!(run.outcome, charm_host::charm::HookOutcome::Succeeded);
    let set_spec = run.changes.pod_spec.is_some();
    let commit = HookCommit {
        unit: &unit.name,
        hook: None,
        changes: &run.changes,
        fence: Some(&unit.fence),
        read: Some(&read),
        owner: Some(&unit.fence.holder),
    };
    rt.block_on(store.commit_hook(commit))
        .expect("the commit is accepted");
    set_spec
}

/// Claims `unit`'s ownership lease for its fence's holder, for [`checked_full_hook`].
#[allow(dead_code)] // Not every bench that shares this module runs it.
pub fn own(rt: &Runtime, store: &dyn Store, unit: &Unit) {
    let lease = charm_host::model::ownership_lease(&unit.name);
    let claim = rt.block_on(store.claim(&lease, &unit.fence.holder, Duration::from_secs(3600)));
    assert!(matches!(claim, Ok(Claim::Held(_))), "{claim:?}");
}

/// `store` with its requests measured, as `run --metrics-addr` wraps it.
pub fn metered(store: Box<dyn Store>, metrics: &HostMetrics) -> Box<dyn Store> {
    Box::new(MeteredStore::new(
        std::sync::Arc::from(store),
        metrics.store(),
    ))
}

/// [`full_hook`] with the hook counted and timed in `metrics`, as a unit's agent does when
/// the host keeps metrics.
pub fn measured_full_hook(
    rt: &Runtime,
    store: &dyn Store,
    charm: &Charm,
    unit: &Unit,
    metrics: &mut UnitMetrics,
) -> bool {
    let started = tokio::time::Instant::now();
    let set_spec = full_hook(rt, store, charm, unit);
    metrics.hook_ended("db-relation-changed", "committed", started.elapsed());
    set_spec
}

/// The median and the 99th percentile of `times`, sorting them.
pub fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    (at(0.50), at(0.99))
}

/// `d` in microseconds, for tables.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `bench` on a two-worker tokio runtime, the allocator configured before the runtime
/// starts its threads.
pub fn on_two_workers<F: std::future::Future>(bench: F) -> F::Output {
    charm_host::allocator::configure();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(bench)
}
