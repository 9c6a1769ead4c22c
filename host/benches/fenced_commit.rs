//! The cost of committing one hook's writes under the leadership fence: a relation bag write,
//! a new pod spec and a unit status, on SQLite (a temporary file, WAL, `synchronous = NORMAL`,
//! as `SqliteStore::open` sets it) with the in-memory store as the baseline.
//!
//! Every commit changes all three, so each one really writes (and makes a pod spec revision).
//! Before criterion runs, a plain loop of 10,000 commits per store prints p50 and p99, which
//! criterion's summary does not give.
//!
//! `cargo bench -p charm-host --bench fenced_commit`

/// The bench allocates as the `charm-host` binary does (see `charm_host::allocator`).
#[global_allocator]
static ALLOCATOR: charm_host::allocator::Allocator = charm_host::allocator::Allocator;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use charm_host::model::{
    ApplicationRecord, Changes, CharmMetadata, EndpointMeta, PodSpecWrite, RelationEndpoint,
    RelationId, RelationRole, Status, StatusKind,
};
use charm_host::store::{Claim, Fence, MemoryStore, SqliteStore, Store};
use criterion::{BatchSize, Criterion};
use serde_json::json;
use tokio::runtime::Runtime;

const SAMPLES: usize = 10_000;

/// A deployed `web` (the committing unit `web/0` holds the lease) related to `db`.
struct Fixture {
    store: Box<dyn Store>,
    fence: Fence,
    relation: RelationId,
    _dir: Option<tempfile::TempDir>,
}

fn app(name: &str, role: RelationRole) -> ApplicationRecord {
    ApplicationRecord {
        name: name.into(),
        charm: format!("charms/{name}.wasm"),
        metadata: CharmMetadata {
            name: name.into(),
            summary: String::new(),
            relations: vec![EndpointMeta {
                name: "db".into(),
                role,
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

fn fixture(rt: &Runtime, store: Box<dyn Store>, dir: Option<tempfile::TempDir>) -> Fixture {
    rt.block_on(async {
        store
            .add_application(app("web", RelationRole::Requires))
            .await
            .unwrap();
        store
            .add_application(app("db", RelationRole::Provides))
            .await
            .unwrap();
        let unit = store.add_unit("web").await.unwrap();
        store.add_unit("db").await.unwrap();
        let endpoints = ["web", "db"].map(|a| RelationEndpoint {
            app: a.into(),
            endpoint: "db".into(),
        });
        let relation = store
            .add_relation("pgsql", endpoints.to_vec())
            .await
            .unwrap()
            .0
            .id;
        let Claim::Held(lease) = store
            .claim("web", &unit, Duration::from_secs(3600))
            .await
            .unwrap()
        else {
            panic!("no lease");
        };
        let fence = Fence {
            app: "web".into(),
            holder: unit,
            term: lease.term,
        };
        Fixture {
            store,
            fence,
            relation,
            _dir: dir,
        }
    })
}

fn sqlite(rt: &Runtime) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("bench.db"), "bench").unwrap();
    fixture(rt, Box::new(store), Some(dir))
}

fn memory(rt: &Runtime) -> Fixture {
    fixture(rt, Box::new(MemoryStore::new("bench")), None)
}

/// A typical leader hook's writes, different for every `n`.
fn hook_writes(relation: RelationId, n: u64) -> Changes {
    Changes {
        unit_bags: BTreeMap::from([(
            relation,
            BTreeMap::from([
                ("host".to_string(), Some(format!("web-0.web-endpoints.{n}"))),
                ("port".to_string(), Some("80".to_string())),
            ]),
        )]),
        pod_spec: Some(Arc::new(PodSpecWrite::new(
            json!({
                "version": 3,
                "containers": [{
                    "name": "web",
                    "imageDetails": {"imagePath": "discourse/discourse:2.8"},
                    "ports": [{"containerPort": 3000, "protocol": "TCP"}],
                    "envConfig": {"DISCOURSE_DB": format!("host=db-0 port=5432 dbname=web password={n}")},
                }],
            }),
            None,
        ))),
        unit_status: Some(Status::new(StatusKind::Active, format!("ready ({n})"))),
        ..Changes::default()
    }
}

fn commit(rt: &Runtime, f: &Fixture, changes: &Changes) {
    let receipt = rt
        .block_on(
            f.store
                .commit(&f.fence.holder, None, changes, Some(&f.fence)),
        )
        .unwrap();
    black_box(receipt);
}

/// p50 and p99 of `SAMPLES` commits, timed one by one.
fn percentiles(rt: &Runtime, name: &str, f: &Fixture) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES as u64 {
        let changes = hook_writes(f.relation, n);
        let start = Instant::now();
        commit(rt, f, &changes);
        times.push(start.elapsed());
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let (p50, p99) = (at(0.50), at(0.99));
    println!(
        "{name:>8}: {SAMPLES} fenced commits: p50 {p50:?}  p99 {p99:?}  max {:?}",
        times[times.len() - 1]
    );
    (p50, p99)
}

fn main() {
    charm_host::allocator::configure();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    let (sqlite_p50, _) = percentiles(&rt, "sqlite", &sqlite(&rt));
    let (memory_p50, _) = percentiles(&rt, "memory", &memory(&rt));
    println!(
        "  sqlite/memory p50 ratio: {:.1}x",
        sqlite_p50.as_secs_f64() / memory_p50.as_secs_f64()
    );

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("fenced_commit");
    for (name, f) in [("sqlite", sqlite(&rt)), ("memory", memory(&rt))] {
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    n += 1;
                    hook_writes(f.relation, n)
                },
                |changes| commit(&rt, &f, &changes),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    c.final_summary();
}
