//! Through a running `charm-host`: update-status reaches every unit on the host's timer,
//! and a unit in error takes its queue up again once the operator runs `resolved`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use charm_tests::{guests, wait_until};

struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn operate(bin: &Path, store: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(bin)
        .args(args)
        .args(["--store", store, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn update_status_fires_and_resolved_resumes_a_unit_in_error() {
    let bin = charm_tests::charm_host_binary();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::PROBE, dir.path().join("probe.wasm")).unwrap();
    let bundle = dir.path().join("bundle.yaml");
    std::fs::write(
        &bundle,
        "applications:\n  counter: {charm: probe.wasm, num_units: 1, options: {mode: count}}\n  failing: {charm: probe.wasm, num_units: 1, options: {mode: fail}}\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("model.db").display());
    let _host = Host(
        Command::new(&bin)
            .args(["run", bundle.to_str().unwrap(), "--store", &store])
            .args(["--update-status-interval", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let unit = |name: &str| operate(&bin, &store, &["show-unit", name]);

    wait_until(
        Duration::from_secs(60),
        "update-status on counter/0",
        || {
            dir.path().join("model.db").exists()
                && unit("counter/0")["stored_state"]["runs:update-status"].is_string()
        },
    );

    // start fails every time: after its attempts the unit waits in error.
    wait_until(Duration::from_secs(60), "failing/0 in error", || {
        dir.path().join("model.db").exists()
            && unit("failing/0")["hook_error"]
                .as_str()
                .is_some_and(|e| e.contains("start"))
    });
    operate(&bin, &store, &["config", "failing", "mode=ok"]);
    let resolved = operate(&bin, &store, &["resolved", "failing/0"]);
    assert_eq!(resolved["hook"], "start");
    wait_until(
        Duration::from_secs(60),
        "failing/0 runs its queue again",
        || {
            let shown = unit("failing/0");
            shown["hook_error"].is_null()
                && shown["queued_hooks"]
                    .as_array()
                    .is_some_and(|q| !q.iter().any(|h| h == "start" || h == "config-changed"))
        },
    );
}
