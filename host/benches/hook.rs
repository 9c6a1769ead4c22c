//! What one hook costs, against the least wasmtime allows in the same engine.
//!
//! - `floor`: the runtime's engine and a linker like the runtime's, a fresh `Store`,
//!   instantiating the empty charm (`tests/guests/empty`, our world, no work) from its
//!   `InstancePre` and calling `handle-hook`. Nothing of ours but the store's data.
//! - `run_hook/empty`: the same through `Charm::run_hook`: our per-hook overhead.
//! - `instantiate/discourse`: a fresh instance of discourse, no call.
//! - `run_hook/discourse`: discourse's first `db-relation-changed` as leader, from a
//!   snapshot taken before anything was committed, so every run sees a new master (the
//!   pgsql library emits master-changed and writes its stored state) and configures twice.
//! - `full_hook/memory`, `full_hook/sqlite`: what a unit's agent does per hook: the
//!   snapshot read from the store, the hook in a fresh instance, the fenced commit.
//! - `checked_full_hook/memory`, `checked_full_hook/sqlite`: `full_hook/*` as agents run
//!   it since hosts may share units: the snapshot read with the pod spec revision, and the
//!   commit checked against both and against the unit's ownership lease; against
//!   `full_hook/*` in the same run, what those checks cost.
//! - `io_hook/memory`: `full_hook/memory` with `tests/guests/replay` in discourse's place,
//!   replaying discourse's host calls (the same eleven calls, arguments and answers, the
//!   same pod spec and status written and committed) without discourse's logic. Between
//!   the floor and it: the host's side of the hook; between it and `full_hook/memory`: the
//!   charm's own code (discourse, the pgsql library, the SDK).
//! - `is_leader`: one `is-leader` host call, from the empty charm calling it 10,000 times
//!   in one hook, less that hook with no calls, divided by 10,000. `state-get` (a 64-byte
//!   value back) and `leader-get-all` (four key/value pairs back) are timed the same way:
//!   what a call costs by the shape of its answer.
//! - `load/compile`, `load/cache`: loading discourse (compile or read the compiled-charm
//!   cache, check the world, link, read its metadata).
//!
//! Before criterion runs, plain loops time each case one by one and print p50 and p99 and
//! the ratios against the floor of this same run, which criterion's summary does not give;
//! they are also written to `target/bench-results/hook.json` (for `peer/run.sh`). With
//! `HOOK_BENCH_PLAIN_ONLY=1` only the plain loops run. `HOOK_BENCH_PROFILE=<case>` runs
//! just that case 2,000 times (`HOOK_BENCH_PROFILE_RUNS` to change) and exits, for a profiler:
//! `HOOK_BENCH_PROFILE=full_hook/memory BENCH_HOOK_SLOTS=2 valgrind --tool=callgrind target/release/deps/hook-*`
//! (`host/benches/instructions.sh` turns that into instructions per hook). The profiling
//! mode also has `store/memory`, the memory store's snapshot and fenced commit alone (the
//! plain table's `store snapshot + commit (memory)`).
//!
//! `HOOK_BENCH_B_GUESTS=<dir>` compares charms built another way (another target, linker
//! flags or toolchain, or an older revision's discourse on an older contract the host
//! still runs): `<dir>` holds `empty.wasm` (of today's world) and `discourse.wasm`, and the
//! plain table gains `B/floor`, `B/instantiate/empty` and `B/full_hook/memory`, timed in
//! the same interleaved rounds and reported against the same floor; the profiling mode
//! gains the cases `B/floor` and `B/full_hook/memory`. `host/benches/guest_builds.sh`
//! builds the variants measured so far and runs this.
//!
//! `cargo bench -p charm-host --bench hook`

mod common;

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use charm_host::bindings::types::{ActionEvent, Context, Event};
use charm_host::bindings::{Charm as CharmBindings, CharmPre};
use charm_host::charm::{Charm, CharmRuntime, HookOutcome, HookRun, LoadedFrom};
use charm_host::context::HookContext;
use charm_host::metrics::HostMetrics;
use charm_host::model::UnitSnapshot;
use charm_host::store::{MemoryStore, SqliteStore, Store};
use common::{Unit, micros, percentiles};
use criterion::Criterion;
use tokio::runtime::Runtime;
use wasmtime::Store as WasmStore;
use wasmtime::component::{Component, ComponentExportIndex, HasSelf, Linker, TypedFunc};

/// Iterations of each plain timing loop.
const SAMPLES: usize = 10_000;
/// Host calls per hook in the per-call cases (`is_leader` and the others).
const IS_LEADER_CALLS: u32 = 10_000;
/// The empty charm's actions that time one host call, with how the results name them.
const HOST_CALLS: &[(&str, &str)] = &[
    ("is-leader", "is_leader"),
    ("state-get", "state-get (64-byte value)"),
    ("leader-get-all", "leader-get-all (4 pairs)"),
];
/// The pod spec discourse sets in the bench's hook, as its SDK writes it.
const DISCOURSE_SPEC: &str = r#"{"version":3,"containers":[{"name":"discourse","imageDetails":{"imagePath":"discourse/discourse:2.6"},"ports":[{"name":"http","containerPort":3000,"protocol":"TCP"}],"envConfig":{"DISCOURSE_DB":"host=postgresql-0.postgresql-endpoints port=5432 dbname=discourse user=discourse password=secret","DISCOURSE_HOSTNAME":"discourse.local"}}]}"#;
/// Rounds of the interleaved timing loops.
const ROUNDS: usize = 10;

/// The floor's pieces: wasmtime alone, with the runtime's engine.
struct Floor {
    pre: CharmPre<HookContext>,
    /// `handle-hook`'s export, found once.
    handle_hook: ComponentExportIndex,
    context: Context,
    event: Event,
}

impl Floor {
    fn new(runtime: &CharmRuntime, wasm: &Path) -> Self {
        let engine = runtime.engine();
        let component = Component::from_file(engine, wasm).expect("the guest compiles");
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
        CharmBindings::add_to_linker::<HookContext, HasSelf<HookContext>>(&mut linker, |ctx| ctx)
            .unwrap();
        let pre = CharmPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        let handle_hook = component.get_export_index(None, "handle-hook").unwrap();
        let floor = Floor {
            pre,
            handle_hook,
            context: Context {
                model: "bench".into(),
                unit: "empty/0".into(),
                app: "empty".into(),
                leader: false,
            },
            event: Event::Install,
        };
        // The generated instantiate checks the exports' types against the world, once.
        floor.pre.instantiate(&mut floor.store()).unwrap();
        floor
    }

    fn store(&self) -> WasmStore<HookContext> {
        let ctx = HookContext::new(UnitSnapshot::default(), None, Arc::default(), 256 << 20);
        let mut store = WasmStore::new(self.pre.engine(), ctx);
        // The runtime's engine interrupts on epochs: a store must have a deadline.
        store.set_epoch_deadline(u64::MAX / 2);
        store
    }

    /// A fresh instance of the empty charm, and one call of `handle-hook`, its type taken
    /// as checked (as `Charm::run_hook` does): the generated `CharmPre::instantiate` would
    /// check both exports' types on every call.
    fn hook(&self) {
        let mut store = self.store();
        let instance = self.pre.instance_pre().instantiate(&mut store).unwrap();
        let func = instance.get_func(&mut store, self.handle_hook).unwrap();
        // SAFETY: `new` checked the export's type; every instance comes from the same
        // `InstancePre`.
        let typed =
            unsafe { TypedFunc::<(&Context, &Event), (Result<(), String>,)>::new_unchecked(func) };
        let (result,) = typed
            .call(&mut store, (&self.context, &self.event))
            .unwrap();
        result.unwrap();
        black_box(&store);
    }

    /// A fresh instance, no call.
    fn instantiate(&self) {
        let mut store = self.store();
        black_box(self.pre.instance_pre().instantiate(&mut store).unwrap());
    }
}

/// The empty charm's action `name`, making its host call `calls` times.
fn host_call_event(name: &str, calls: u32) -> Event {
    Event::Action(ActionEvent {
        id: "1".into(),
        name: name.into(),
        params: calls.to_string(),
    })
}

/// The empty charm's unit, with a stored value and leader settings shaped like the pgsql
/// interface's for the per-call cases to read.
fn empty_snapshot() -> UnitSnapshot {
    let pairs = |pairs: &[(&str, &str)]| {
        std::sync::Arc::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    };
    UnitSnapshot {
        model: "bench".into(),
        unit: "empty/0".into(),
        app: "empty".into(),
        stored: pairs(&[("k", &"v".repeat(64))]),
        leader_data: pairs(&[
            ("database", "discourse"),
            ("egress-subnets", "10.1.2.3/32"),
            ("extensions", ""),
            ("roles", "admin,reader"),
        ]),
        ..UnitSnapshot::default()
    }
}

/// Discourse's host calls in its `db-relation-changed` as leader, once its stored state
/// has seen the master: the script of the replay charm's `replay` action.
fn discourse_calls(snapshot: &UnitSnapshot, event: &Event, spec: &str) -> String {
    let Event::RelationChanged(rel) = event else {
        panic!("discourse's bench hook is a relation change");
    };
    let remote_unit = &snapshot.relations[&rel.id].remote_units[0];
    let (id, app, unit) = (rel.id, &rel.remote_app, &snapshot.unit);
    [
        "state-get\tcharm-sdk.deferred".to_string(),
        format!("relation-get\t{id}"),
        "leader-get\tinterface.pgsql".to_string(),
        format!("unit-data\t{id}\t{unit}"),
        format!("app-data\t{id}\t{app}"),
        format!("unit-data\t{id}\t{remote_unit}"),
        "state-get\tcharm-pgsql.db".to_string(),
        "config-get\timage".to_string(),
        "config-get\texternal_hostname".to_string(),
        format!("set-pod-spec\t{spec}"),
        "set-unit-status\t".to_string(),
    ]
    .join("\n")
}

/// Discourse's hook in `deployed`, from `snapshot`, checked to be the seed's: it succeeds
/// and, as leader, sets the pod spec; and its full hook commits.
fn seed_hook(
    rt: &Runtime,
    discourse: &Charm,
    deployed: &Deployed,
    snapshot: UnitSnapshot,
) -> HookRun {
    let unit = &deployed.unit;
    let run = discourse.run_hook(snapshot, Some(unit.fence.clone()), None, &unit.event);
    assert_eq!(run.outcome, HookOutcome::Succeeded, "{}", run.output);
    assert!(run.changes.pod_spec.is_some(), "discourse set no pod spec");
    assert!(common::full_hook(
        rt,
        deployed.store.as_ref(),
        discourse,
        unit
    ));
    run
}

/// The same guests built another way (`HOOK_BENCH_B_GUESTS`): the floor, and discourse
/// deployed alone on a memory store.
struct BGuests {
    floor: Floor,
    discourse: Charm,
    memory: Deployed,
}

impl BGuests {
    /// Loads the guests in `dir`; their discourse must write the pod spec `spec` (the one
    /// discourse built as usual writes) and commit.
    fn load(
        rt: &Runtime,
        runtime: &CharmRuntime,
        dir: &Path,
        spec: Option<&serde_json::Value>,
    ) -> Self {
        let floor = Floor::new(runtime, &dir.join("empty.wasm"));
        floor.hook();
        let discourse = common::load(runtime, &dir.join("discourse.wasm"));
        let memory = deployed(rt, &discourse, false);
        let snapshot = rt
            .block_on(memory.store.snapshot(&memory.unit.name))
            .unwrap();
        let run = seed_hook(rt, &discourse, &memory, snapshot);
        let written = run.changes.pod_spec.as_ref().map(|w| &w.spec);
        assert_eq!(written, spec, "B's discourse wrote another pod spec");
        BGuests {
            floor,
            discourse,
            memory,
        }
    }

    fn full_hook(&self, rt: &Runtime) {
        let unit = &self.memory.unit;
        common::full_hook(rt, self.memory.store.as_ref(), &self.discourse, unit);
    }
}

/// `deployed` with its store's requests measured in `metrics`.
fn metered(deployed: Deployed, metrics: &HostMetrics) -> Deployed {
    Deployed {
        store: common::metered(deployed.store, metrics),
        ..deployed
    }
}

/// A store with one discourse unit ready for `db-relation-changed`.
struct Deployed {
    store: Box<dyn Store>,
    unit: Unit,
    _dir: Option<tempfile::TempDir>,
}

fn deployed(rt: &Runtime, charm: &Charm, sqlite: bool) -> Deployed {
    let (store, dir): (Box<dyn Store>, _) = if sqlite {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("bench.db"), "bench").unwrap();
        (Box::new(store), Some(dir))
    } else {
        (Box::new(MemoryStore::new("bench")), None)
    };
    let unit = rt
        .block_on(common::deploy(store.as_ref(), charm.metadata(), 1))
        .pop()
        .unwrap();
    Deployed {
        store,
        unit,
        _dir: dir,
    }
}

/// A named case: one run per call.
type Case<'a, 'f> = (&'a str, Box<dyn FnMut() + 'f>);

/// p50 and p99 of `SAMPLES` runs of each case, timed one by one, the cases taking turns in
/// `ROUNDS` rounds so that a change in the machine's load affects them all alike.
fn time_interleaved<'a>(cases: &mut [Case<'a, '_>]) -> Vec<(&'a str, (Duration, Duration))> {
    let mut times = vec![Vec::with_capacity(SAMPLES); cases.len()];
    for _ in 0..ROUNDS {
        for ((_, f), times) in cases.iter_mut().zip(&mut times) {
            for _ in 0..SAMPLES / ROUNDS / 10 {
                f();
            }
            for _ in 0..SAMPLES / ROUNDS {
                let start = Instant::now();
                f();
                times.push(start.elapsed());
            }
        }
    }
    cases
        .iter()
        .zip(&mut times)
        .map(|((name, _), times)| (*name, percentiles(times)))
        .collect()
}

/// p50 and p99 of `SAMPLES` runs of `f`, timed one by one.
fn time(mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..SAMPLES / 10 {
        f();
    }
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        f();
        times.push(start.elapsed());
    }
    percentiles(&mut times)
}

fn main() {
    charm_host::allocator::configure();
    let guests = common::guests();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let runtime = common::runtime(None);
    let discourse = common::load(&runtime, &guests.discourse);
    let empty = common::load(&runtime, &guests.empty);
    let replay_charm = common::load(&runtime, &guests.replay);
    let floor = Floor::new(&runtime, &guests.empty);
    let floor_discourse = Floor::new(&runtime, &guests.discourse);
    let memory = deployed(&rt, &discourse, false);
    let sqlite = deployed(&rt, &discourse, true);
    // The same hooks as agents run them now: checked against what they read and against
    // their unit's ownership.
    let memory_c = deployed(&rt, &discourse, false);
    let sqlite_c = deployed(&rt, &discourse, true);
    common::own(&rt, memory_c.store.as_ref(), &memory_c.unit);
    common::own(&rt, sqlite_c.store.as_ref(), &sqlite_c.unit);
    // The same hooks with the host's metrics on: the store measured, the hook counted.
    let metrics = HostMetrics::new();
    let memory_m = metered(deployed(&rt, &discourse, false), &metrics);
    let sqlite_m = metered(deployed(&rt, &discourse, true), &metrics);
    let mut memory_unit_m = metrics.unit("discourse");
    let mut sqlite_unit_m = metrics.unit("discourse");
    let snapshot = rt
        .block_on(memory.store.snapshot(&memory.unit.name))
        .unwrap();

    let run = seed_hook(&rt, &discourse, &memory, snapshot.clone());
    let fence = Some(memory.unit.fence.clone());
    // The replay charm making discourse's calls in discourse's unit: it must be answered as
    // discourse is, and write the same pod spec.
    let replay = common::Unit {
        name: memory.unit.name.clone(),
        fence: memory.unit.fence.clone(),
        event: Event::Action(ActionEvent {
            id: "1".into(),
            name: "replay".into(),
            params: discourse_calls(&snapshot, &memory.unit.event, DISCOURSE_SPEC),
        }),
    };
    let replayed = replay_charm.run_hook(snapshot.clone(), fence.clone(), None, &replay.event);
    assert_eq!(
        replayed.outcome,
        HookOutcome::Succeeded,
        "{}",
        replayed.output
    );
    assert_eq!(
        replayed.changes.pod_spec, run.changes.pod_spec,
        "the replay wrote another pod spec than discourse"
    );
    assert!(common::full_hook(
        &rt,
        memory.store.as_ref(),
        &replay_charm,
        &replay
    ));

    let b = std::env::var_os("HOOK_BENCH_B_GUESTS").map(|dir| {
        let spec = run.changes.pod_spec.as_ref().map(|w| &w.spec);
        BGuests::load(&rt, &runtime, Path::new(&dir), spec)
    });

    let run_discourse = || {
        black_box(discourse.run_hook(snapshot.clone(), fence.clone(), None, &memory.unit.event));
    };
    // The memory store's part of a hook: its snapshot and fenced commit.
    let store_memory = || {
        let s = rt
            .block_on(memory.store.snapshot(&memory.unit.name))
            .unwrap();
        black_box(&s);
        let (unit, fence) = (&memory.unit.name, Some(&memory.unit.fence));
        rt.block_on(memory.store.commit(unit, None, &run.changes, fence))
            .unwrap();
    };
    let run_empty = || {
        black_box(empty.run_hook(empty_snapshot(), None, None, &Event::Install));
    };
    let host_call = |name: &str, calls: u32| {
        let event = host_call_event(name, calls);
        let (empty, fence) = (&empty, &fence);
        move || {
            black_box(empty.run_hook(empty_snapshot(), fence.clone(), None, &event));
        }
    };

    if let Ok(case) = std::env::var("HOOK_BENCH_PROFILE") {
        let mut f: Box<dyn FnMut()> = match case.as_str() {
            "floor" => Box::new(|| floor.hook()),
            "instantiate/discourse" => Box::new(|| floor_discourse.instantiate()),
            "run_hook/empty" => Box::new(run_empty),
            "run_hook/discourse" => Box::new(run_discourse),
            "full_hook/memory" => Box::new(|| {
                common::full_hook(&rt, memory.store.as_ref(), &discourse, &memory.unit);
            }),
            "full_hook/sqlite" => Box::new(|| {
                common::full_hook(&rt, sqlite.store.as_ref(), &discourse, &sqlite.unit);
            }),
            "checked_full_hook/memory" => Box::new(|| {
                common::checked_full_hook(&rt, memory_c.store.as_ref(), &discourse, &memory_c.unit);
            }),
            "checked_full_hook/sqlite" => Box::new(|| {
                common::checked_full_hook(&rt, sqlite_c.store.as_ref(), &discourse, &sqlite_c.unit);
            }),
            "store/memory" => Box::new(store_memory),
            "io_hook/memory" => Box::new(|| {
                common::full_hook(&rt, memory.store.as_ref(), &replay_charm, &replay);
            }),
            "is_leader" => Box::new(host_call("is-leader", IS_LEADER_CALLS)),
            "B/floor" => {
                let b = b.as_ref().expect("HOOK_BENCH_B_GUESTS names the B guests");
                Box::new(|| b.floor.hook())
            }
            "B/full_hook/memory" => {
                let b = b.as_ref().expect("HOOK_BENCH_B_GUESTS names the B guests");
                Box::new(|| b.full_hook(&rt))
            }
            other => panic!("no case {other}"),
        };
        let runs: u32 = std::env::var("HOOK_BENCH_PROFILE_RUNS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2_000);
        for _ in 0..runs {
            f();
        }
        return;
    }
    let mut results = serde_json::Map::new();
    let mut cases: Vec<Case> = vec![
        (
            "floor (wasmtime: instantiate empty + call)",
            Box::new(|| floor.hook()),
        ),
        ("instantiate/empty", Box::new(|| floor.instantiate())),
        (
            "instantiate/discourse",
            Box::new(|| floor_discourse.instantiate()),
        ),
        ("run_hook/empty", Box::new(run_empty)),
        ("run_hook/discourse", Box::new(run_discourse)),
        (
            "full_hook/memory",
            Box::new(|| {
                common::full_hook(&rt, memory.store.as_ref(), &discourse, &memory.unit);
            }),
        ),
        (
            "full_hook/memory+metrics",
            Box::new(|| {
                let unit = &memory_m.unit;
                let m = &mut memory_unit_m;
                common::measured_full_hook(&rt, memory_m.store.as_ref(), &discourse, unit, m);
            }),
        ),
        (
            "full_hook/sqlite",
            Box::new(|| {
                common::full_hook(&rt, sqlite.store.as_ref(), &discourse, &sqlite.unit);
            }),
        ),
        (
            "checked_full_hook/memory",
            Box::new(|| {
                let unit = &memory_c.unit;
                common::checked_full_hook(&rt, memory_c.store.as_ref(), &discourse, unit);
            }),
        ),
        (
            "checked_full_hook/sqlite",
            Box::new(|| {
                let unit = &sqlite_c.unit;
                common::checked_full_hook(&rt, sqlite_c.store.as_ref(), &discourse, unit);
            }),
        ),
        (
            "full_hook/sqlite+metrics",
            Box::new(|| {
                let unit = &sqlite_m.unit;
                let m = &mut sqlite_unit_m;
                common::measured_full_hook(&rt, sqlite_m.store.as_ref(), &discourse, unit, m);
            }),
        ),
        (
            "io_hook/memory (discourse's calls, no logic)",
            Box::new(|| {
                common::full_hook(&rt, memory.store.as_ref(), &replay_charm, &replay);
            }),
        ),
    ];
    // The host's side of `set-pod-spec`: parsing and validating the spec the charm sent.
    let spec = DISCOURSE_SPEC;
    cases.push((
        "podspec::validate (host side of set_pod_spec)",
        Box::new(move || {
            black_box(charm_host::podspec::validate(spec, None).unwrap());
        }),
    ));
    cases.push(("store snapshot + commit (memory)", Box::new(store_memory)));
    if let Some(b) = &b {
        cases.push(("B/floor", Box::new(|| b.floor.hook())));
        cases.push(("B/instantiate/empty", Box::new(|| b.floor.instantiate())));
        cases.push(("B/full_hook/memory", Box::new(|| b.full_hook(&rt))));
    }
    let rows = time_interleaved(&mut cases);
    let floor_t = rows[0].1;
    println!(
        "{SAMPLES} runs each, timed one by one in {ROUNDS} interleaved rounds; ratio = p50 / floor p50"
    );
    println!(
        "{:<44} {:>10} {:>10} {:>7}",
        "case", "p50 µs", "p99 µs", "ratio"
    );
    for (name, (p50, p99)) in &rows {
        let key = name.split(' ').next().unwrap_or(name);
        results.insert(
            key.into(),
            serde_json::json!({"p50_us": micros(*p50), "p99_us": micros(*p99)}),
        );
        println!(
            "{name:<44} {:>10.2} {:>10.2} {:>6.2}x",
            micros(*p50),
            micros(*p99),
            p50.as_secs_f64() / floor_t.0.as_secs_f64()
        );
    }
    let (without, _) = time(host_call("is-leader", 0));
    for (action, name) in HOST_CALLS {
        let (with_calls, _) = time(host_call(action, IS_LEADER_CALLS));
        let per_call =
            with_calls.saturating_sub(without).as_secs_f64() * 1e9 / f64::from(IS_LEADER_CALLS);
        let key = name.split(' ').next().unwrap_or(name);
        results.insert(key.into(), serde_json::json!({"ns_per_call": per_call}));
        println!(
            "{name:<44} {per_call:>10.1} ns per call ({IS_LEADER_CALLS} calls in one hook: p50 {:.1} µs, none: {:.1} µs)",
            micros(with_calls),
            micros(without),
        );
    }

    // Loading: compiling discourse every time, against reading it from a warm cache.
    let cache_dir = tempfile::tempdir().unwrap();
    let cached = common::runtime(Some(cache_dir.path().to_owned()));
    let wasm = std::fs::read(&guests.discourse).unwrap();
    let load = |runtime: &CharmRuntime, expect: LoadedFrom| {
        let charm = runtime.load(&guests.discourse, &wasm).unwrap();
        assert_eq!(charm.loaded_from(), expect);
        black_box(charm);
    };
    load(&cached, LoadedFrom::Compiled);
    let loads = |runtime: &CharmRuntime, expect, n| {
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let start = Instant::now();
                load(runtime, expect);
                start.elapsed()
            })
            .collect();
        percentiles(&mut times)
    };
    let (compile, _) = loads(&runtime, LoadedFrom::Compiled, 20);
    let (from_cache, _) = loads(&cached, LoadedFrom::Cache, 200);
    println!(
        "{:<44} {:>10.2} ms from cache, {:.2} ms compiling ({:.0}x)",
        "load discourse (p50)",
        from_cache.as_secs_f64() * 1e3,
        compile.as_secs_f64() * 1e3,
        compile.as_secs_f64() / from_cache.as_secs_f64()
    );
    results.insert(
        "load".into(),
        serde_json::json!({
            "cache_ms": from_cache.as_secs_f64() * 1e3,
            "compile_ms": compile.as_secs_f64() * 1e3,
        }),
    );
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("hook.json"),
        serde_json::to_string_pretty(&results).unwrap(),
    )
    .unwrap();
    if std::env::var_os("HOOK_BENCH_PLAIN_ONLY").is_some_and(|v| v == "1") {
        return;
    }

    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("hook");
        group.bench_function("floor", |b| b.iter(|| floor.hook()));
        group.bench_function("instantiate/empty", |b| b.iter(|| floor.instantiate()));
        group.bench_function("instantiate/discourse", |b| {
            b.iter(|| floor_discourse.instantiate())
        });
        group.bench_function("run_hook/empty", |b| b.iter(run_empty));
        group.bench_function("run_hook/discourse", |b| b.iter(run_discourse));
        group.bench_function("full_hook/memory", |b| {
            b.iter(|| common::full_hook(&rt, memory.store.as_ref(), &discourse, &memory.unit))
        });
        group.bench_function("full_hook/sqlite", |b| {
            b.iter(|| common::full_hook(&rt, sqlite.store.as_ref(), &discourse, &sqlite.unit))
        });
        group.bench_function("checked_full_hook/memory", |b| {
            let unit = &memory_c.unit;
            b.iter(|| common::checked_full_hook(&rt, memory_c.store.as_ref(), &discourse, unit))
        });
        group.bench_function("checked_full_hook/sqlite", |b| {
            let unit = &sqlite_c.unit;
            b.iter(|| common::checked_full_hook(&rt, sqlite_c.store.as_ref(), &discourse, unit))
        });
        group.bench_function("io_hook/memory", |b| {
            b.iter(|| common::full_hook(&rt, memory.store.as_ref(), &replay_charm, &replay))
        });
        group.bench_function("is_leader_x10000", |b| {
            b.iter(host_call("is-leader", IS_LEADER_CALLS))
        });
        group.finish();
    }
    {
        let mut group = c.benchmark_group("load");
        group.sample_size(10);
        group.bench_function("compile", |b| {
            b.iter(|| load(&runtime, LoadedFrom::Compiled))
        });
        group.bench_function("cache", |b| b.iter(|| load(&cached, LoadedFrom::Cache)));
        group.finish();
    }
    c.final_summary();
}
