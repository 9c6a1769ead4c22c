//! Resident memory of one host holding 10,000 idle units of discourse.
//!
//! The host as `charm-host run` makes it: one runtime, the charm loaded once, a controller
//! on the memory store with the default lease timings, one agent and one background lease
//! task per unit. The units are deployed (install, config-changed, start and, on the leader,
//! leader-elected run through the agents), then left idle for a few lease renewal periods,
//! and the process's resident set is read from `/proc/self/status`. As a by-product it
//! reports how fast the agents ran the deployment's hooks.
//!
//! `cargo bench -p charm-host --bench idle_units`

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use charm_host::controller::{Controller, ControllerConfig, HookObserver};
use charm_host::store::{MemoryStore, Store};

const UNITS: u32 = 10_000;

/// `VmRSS` and `VmHWM` (peak) of this process, in MiB.
fn resident() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    common::on_two_workers(bench());
}

async fn bench() {
    let guests = common::guests();
    let runtime = common::runtime(None);
    let discourse = common::load(&runtime, &guests.discourse);
    let (before, _) = resident();

    let hooks = Arc::new(AtomicU64::new(0));
    let counter = hooks.clone();
    let config = ControllerConfig {
        observer: Some(HookObserver(Arc::new(move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
        }))),
        ..ControllerConfig::default()
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("bench"));
    let controller =
        Controller::new(store, runtime.config().guarantee_margin, config).expect("valid config");
    let started = Instant::now();
    controller
        .deploy(
            "discourse",
            discourse,
            "discourse.wasm",
            BTreeMap::new(),
            UNITS,
        )
        .await
        .expect("deployed");
    tokio::time::timeout(Duration::from_secs(600), controller.wait_idle())
        .await
        .expect("idle within 10 minutes");
    let deployed = started.elapsed();
    let ran = hooks.load(Ordering::Relaxed);
    // Idle through a few renewal periods (2 s by default): leases renewed, followers polling.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (idle, peak) = resident();
    let status = controller.status().await.expect("status");
    assert_eq!(status.units.len(), UNITS as usize);
    println!(
        "{UNITS} idle units: resident {idle:.0} MiB ({:.1} KiB per unit over the {before:.0} MiB of a host with the charm loaded), peak {peak:.0} MiB",
        (idle - before) * 1024.0 / f64::from(UNITS)
    );
    println!(
        "deploying them ran {ran} hooks through the agents in {:.2} s: {:.0} hooks/s",
        deployed.as_secs_f64(),
        ran as f64 / deployed.as_secs_f64()
    );
    controller.shutdown();
}
