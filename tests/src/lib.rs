//! Shared pieces of the cross-crate tests: the compiled guests and a small deployment kit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use charm_host::agent::RetryPolicy;
use charm_host::charm::{Charm, CharmRuntime, RuntimeConfig};
use charm_host::controller::{Controller, ControllerConfig};
use charm_host::leadership::LeadershipConfig;
use charm_host::model::ConfigValue;
use charm_host::store::{MemoryStore, Store};

#[cfg(feature = "etcd")]
pub mod etcd_model;
#[cfg(feature = "etcd")]
pub mod etcd_pki;
pub mod etcd_server;
pub mod hosts;
pub mod linearizable;
pub use charm_test::WasmContext;

/// Paths of the compiled guest charms.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

/// Polls `done` every 100 ms until it holds; fails the test, naming `what`, once `limit`
/// has passed without it.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes, in `dir`, a bundle of discourse (`discourse_units` units) related to postgresql
/// (one unit), with both modules copied beside it; the bundle's path.
pub fn discourse_bundle(dir: &Path, discourse_units: u32) -> PathBuf {
    std::fs::copy(guests::DISCOURSE, dir.join("discourse.wasm")).unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.join("postgresql.wasm")).unwrap();
    let bundle = dir.join("bundle.yaml");
    std::fs::write(
        &bundle,
        format!(
            "applications:\n  discourse: {{charm: discourse.wasm, num_units: {discourse_units}}}\n  postgresql: {{charm: postgresql.wasm, num_units: 1}}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n"
        ),
    )
    .unwrap();
    bundle
}

/// A runtime with test-friendly limits.
pub fn runtime() -> CharmRuntime {
    runtime_with(RuntimeConfig {
        hook_timeout: Duration::from_secs(20),
        ..Default::default()
    })
}

/// A runtime with these limits.
pub fn runtime_with(config: RuntimeConfig) -> CharmRuntime {
    CharmRuntime::new(config).expect("the engine starts")
}

/// Loads a guest.
pub fn load(runtime: &CharmRuntime, path: &str) -> Charm {
    runtime
        .load_file(Path::new(path))
        .unwrap_or_else(|e| panic!("loading {path}: {e}"))
}

/// Fast leases and retries, so tests spend no time waiting.
pub fn fast_config() -> ControllerConfig {
    ControllerConfig {
        leadership: LeadershipConfig {
            lease_duration: Duration::from_secs(3),
            renew_interval: Duration::from_millis(500),
            retry_period: Duration::from_millis(200),
            drift_margin: Duration::from_millis(200),
            request_timeout: Duration::from_millis(200),
        },
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            max_attempts: Some(3),
        },
        record_history: true,
        ..Default::default()
    }
}

/// A controller over a fresh memory store.
pub fn controller(config: ControllerConfig) -> (Controller, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("test"));
    let controller =
        Controller::new(store.clone(), Duration::from_millis(100), config).expect("valid config");
    (controller, store)
}

/// String config settings.
pub fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, ConfigValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ConfigValue::String(v.to_string())))
        .collect()
}

/// Waits for idle, failing the test after `limit`.
pub async fn settle(controller: &Controller, limit: Duration) {
    tokio::time::timeout(limit, controller.wait_idle())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "not idle after {limit:?}: {} hooks pending",
                controller.pending()
            )
        });
}

/// The `charm-host` binary beside the running test (`target/<profile>/charm-host`), checked
/// to be fresh.
pub fn charm_host_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("a test knows its own path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps")
        .join("charm-host");
    assert_fresh_binary(&bin);
    bin
}

/// Fails the test when the `charm-host` binary is missing or older than the host's sources
/// (its own and its model core's): `cargo test --workspace` builds it, `cargo test -p
/// charm-tests` alone does not.
pub fn assert_fresh_binary(bin: &Path) {
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: build it with `cargo build --release -p charm-host`",
                bin.display()
            )
        });
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![
        manifest.join("../host/src"),
        manifest.join("../host/model/src"),
    ];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m > built)
            {
                panic!(
                    "{} is older than {}: run `cargo build --release -p charm-host`",
                    bin.display(),
                    path.display()
                );
            }
        }
    }
}
