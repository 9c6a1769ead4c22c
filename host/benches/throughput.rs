//! Hooks per second: 100,000 full hooks across 1,000 units, on one and on two threads.
//!
//! Each unit is the only unit of its own discourse application (so every hook runs as
//! leader and sets a pod spec), related to its own PostgreSQL. A full hook is what a unit's
//! agent does: the snapshot read from the store, discourse's `db-relation-changed` in a
//! fresh instance, the fenced commit. The units are split between the threads; each thread
//! runs its units' hooks round-robin, one hook per unit at a time, as agents do. The
//! agents' scheduling (tokio tasks, queues in the store) is not part of it; the
//! `idle_units` bench reports hooks per second through the agents.
//!
//! Before the runs it times the three parts of a hook (snapshot, hook, commit) one by one
//! on the memory store with all 1,000 units deployed, to show where the time goes (each
//! unit's first hook: the heavier one, where the master appears);
//! `THROUGHPUT_SPLIT_ONLY=1` stops after that; `THROUGHPUT_STORE=memory` (or `sqlite`) runs
//! one store only, for a profiler; `THROUGHPUT_UNITS=N` spreads the hooks over N units
//! instead (a divisor of 100,000), to see how the number of units held changes the rate.
//! Every run is followed by the same with the host's metrics on; `THROUGHPUT_ROUNDS=N`
//! alternates the two N times and prints each one's median.
//!
//! `cargo bench -p charm-host --bench throughput`

mod common;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use charm_host::charm::Charm;
use charm_host::metrics::HostMetrics;
use charm_host::store::{MemoryStore, SqliteStore, Store};

const HOOKS: usize = 100_000;

/// How many units the hooks are spread across: 1,000 unless `THROUGHPUT_UNITS` says.
fn units() -> usize {
    let units = std::env::var("THROUGHPUT_UNITS")
        .ok()
        .map_or(1_000, |n| n.parse().expect("THROUGHPUT_UNITS: a number"));
    assert!(
        units > 0 && HOOKS.is_multiple_of(units),
        "THROUGHPUT_UNITS must divide {HOOKS}"
    );
    units
}

/// How many times each run is repeated: 1 unless `THROUGHPUT_ROUNDS` says.
fn rounds() -> usize {
    std::env::var("THROUGHPUT_ROUNDS")
        .ok()
        .map_or(1, |n| n.parse().expect("THROUGHPUT_ROUNDS: a number"))
        .max(1)
}

/// Runs `HOOKS` hooks on `threads` threads; returns the wall-clock time they took. With
/// `metrics`, each hook is also counted and timed there, as agents do.
fn run(
    store: &dyn Store,
    charm: &Charm,
    units: &[common::Unit],
    threads: usize,
    metrics: Option<&HostMetrics>,
) -> Duration {
    let start = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let start = &start;
            scope.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let mine: Vec<&common::Unit> = units.iter().skip(t).step_by(threads).collect();
                // Each agent resolves its handles once, when it starts.
                let mut measured: Vec<_> = mine
                    .iter()
                    .map(|u| metrics.map(|m| m.unit(&u.fence.app)))
                    .collect();
                start.wait();
                for _ in 0..HOOKS / units.len() {
                    for (unit, metrics) in mine.iter().zip(&mut measured) {
                        assert!(match metrics {
                            Some(m) => common::measured_full_hook(&rt, store, charm, unit, m),
                            None => common::full_hook(&rt, store, charm, unit),
                        });
                    }
                }
            });
        }
        start.wait();
        let began = Instant::now();
        // The scope joins the threads before returning.
        began
    })
    .elapsed()
}

/// p50 of each part of a full hook, over one hook per unit, on the memory store.
fn split(rt: &tokio::runtime::Runtime, charm: &Charm) {
    let store: Box<dyn Store> = Box::new(MemoryStore::new("bench"));
    let units = rt.block_on(common::deploy(store.as_ref(), charm.metadata(), units()));
    let (mut snapshots, mut hooks, mut commits) = (Vec::new(), Vec::new(), Vec::new());
    for unit in &units {
        let start = Instant::now();
        let snapshot = rt.block_on(store.snapshot(&unit.name)).unwrap();
        snapshots.push(start.elapsed());
        let start = Instant::now();
        let run = charm.run_hook(snapshot, Some(unit.fence.clone()), None, &unit.event);
        hooks.push(start.elapsed());
        let start = Instant::now();
        rt.block_on(store.commit(&unit.name, None, &run.changes, Some(&unit.fence)))
            .unwrap();
        commits.push(start.elapsed());
    }
    let p50 = |t: &mut Vec<Duration>| common::micros(common::percentiles(t).0);
    println!(
        "memory store, {} units: p50 snapshot {:.1} µs, hook {:.1} µs, commit {:.1} µs",
        units.len(),
        p50(&mut snapshots),
        p50(&mut hooks),
        p50(&mut commits)
    );
}

fn main() {
    charm_host::allocator::configure();
    let guests = common::guests();
    let runtime = common::runtime(None);
    let discourse = common::load(&runtime, &guests.discourse);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    println!(
        "{HOOKS} full hooks (snapshot, db-relation-changed as leader, fenced commit) across {} units; {} cores",
        units(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    split(&rt, &discourse);
    if std::env::var_os("THROUGHPUT_SPLIT_ONLY").is_some_and(|v| v == "1") {
        return;
    }
    println!(
        "{:<16} {:>8} {:>10} {:>12}",
        "store", "threads", "seconds", "hooks/s"
    );
    let only = std::env::var("THROUGHPUT_STORE").ok();
    if let Some(only) = &only {
        assert!(
            ["memory", "sqlite"].contains(&only.as_str()),
            "THROUGHPUT_STORE: {only:?} is not a store; memory or sqlite"
        );
    }
    for store_kind in ["memory", "sqlite"] {
        if only.as_deref().is_some_and(|only| only != store_kind) {
            continue;
        }
        // Each run without metrics is followed by the same run with the host's metrics on
        // (the store measured, each hook counted and timed), to show what they cost;
        // `THROUGHPUT_ROUNDS=N` alternates them N times and reports each one's median, so
        // that a change in the machine's load affects both alike.
        for threads in [1, 2] {
            let mut took: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..rounds() {
                for (measured, took) in [false, true].into_iter().zip(&mut took) {
                    let dir = tempfile::tempdir().unwrap();
                    let store: Box<dyn Store> = match store_kind {
                        "memory" => Box::new(MemoryStore::new("bench")),
                        _ => Box::new(
                            SqliteStore::open(&dir.path().join("bench.db"), "bench").unwrap(),
                        ),
                    };
                    let metrics = measured.then(HostMetrics::new);
                    let store = match &metrics {
                        Some(metrics) => common::metered(store, metrics),
                        None => store,
                    };
                    let units = rt.block_on(common::deploy(
                        store.as_ref(),
                        discourse.metadata(),
                        units(),
                    ));
                    took.push(run(
                        store.as_ref(),
                        &discourse,
                        &units,
                        threads,
                        metrics.as_deref(),
                    ));
                }
            }
            for (measured, took) in [false, true].into_iter().zip(&mut took) {
                let (median, _) = common::percentiles(took);
                let name = if measured {
                    format!("{store_kind}+metrics")
                } else {
                    store_kind.to_string()
                };
                println!(
                    "{name:<16} {threads:>8} {:>10.2} {:>12.0}",
                    median.as_secs_f64(),
                    HOOKS as f64 / median.as_secs_f64()
                );
            }
        }
    }
}
