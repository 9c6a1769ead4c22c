//! Operating a live model: three `charm-host` processes share one SQLite store while an
//! operator scales discourse from 3 units to 5 and then to 2 (removing its leader on the
//! way), changes its `external_hostname`, upgrades it to a module whose image differs, and
//! runs actions on kv. Hosts adopt the units
//! added while they run and stop the agents of removed ones; the model settles with one
//! leader per application, and discourse's pod spec shows the change.

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::Duration;

use charm_host::store::{ModelStatus, SqliteStore, StateStore};
use charm_tests::hosts::host_run;
use charm_tests::{guests, wait_until};

fn host(bundle: &Path, store: &str, units: &str, log: &Path) -> Child {
    host_run(log)
        .arg(bundle)
        .args(["--store", store, "--units", units])
        .env("RUST_LOG", "charm_host=info,charm_host::agent=debug")
        .spawn()
        .unwrap()
}

/// Runs an operator's command against the store; it must succeed.
fn operate(bin: &Path, store: &str, args: &[&str]) -> String {
    let out: Output = Command::new(bin)
        .args(args)
        .args(["--store", store])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "charm-host {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Kills the hosts when the test ends, passing or not; a failed test shows the end of
/// each host's log (in the directory held) to say why.
struct Hosts(Vec<Child>, std::path::PathBuf);

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for log in ["a.log", "b.log", "c.log"] {
                let text = std::fs::read_to_string(self.1.join(log)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(40)..];
                eprintln!("--- {log} (last {} lines)\n{}", tail.len(), tail.join("\n"));
            }
        }
    }
}

fn units_of<'s>(status: &'s ModelStatus, app: &str) -> Vec<&'s str> {
    status
        .units
        .iter()
        .filter(|u| u.name.starts_with(&format!("{app}/")))
        .map(|u| u.name.as_str())
        .collect()
}

/// Every unit of `app` active, exactly `n` of them, one of them leading.
fn settled(status: &ModelStatus, app: &str, n: usize) -> bool {
    let rows: Vec<_> = status
        .units
        .iter()
        .filter(|u| u.name.starts_with(&format!("{app}/")))
        .collect();
    rows.len() == n
        && rows.iter().all(|u| u.status.kind.as_str() == "active")
        && rows.iter().filter(|u| u.leader).count() == 1
}

#[test]
fn three_hosts_follow_scale_and_config_changes() {
    let bin = charm_tests::charm_host_binary();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::DISCOURSE, dir.path().join("discourse.wasm")).unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
    std::fs::copy(guests::KV, dir.path().join("kv.wasm")).unwrap();
    let next = dir.path().join("discourse-next.wasm");
    std::fs::copy(guests::DISCOURSE_NEXT, &next).unwrap();
    let bundle = dir.path().join("bundle.yaml");
    std::fs::write(
        &bundle,
        "applications:\n  discourse: {charm: discourse.wasm, num_units: 3}\n  postgresql: {charm: postgresql.wasm, num_units: 1}\n  kv: {charm: kv.wasm, num_units: 2}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n",
    )
    .unwrap();
    let db = dir.path().join("model.db");
    let store = format!("sqlite:{}", db.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = || {
        let s = SqliteStore::open(&db, "default").ok()?;
        rt.block_on(s.status()).ok()
    };
    let pod_spec = || {
        let s = SqliteStore::open(&db, "default").ok()?;
        rt.block_on(s.pod_spec("discourse")).ok().flatten()
    };

    // Each host runs its share, by name or glob, including units added later.
    let mut hosts = Hosts(Vec::new(), dir.path().to_path_buf());
    hosts.0.push(host(
        &bundle,
        &store,
        "postgresql,kv,discourse/0,discourse/3",
        &dir.path().join("a.log"),
    ));
    wait_until(Duration::from_secs(60), "the first host deploys", || {
        status().is_some_and(|s| s.units.len() == 6)
    });
    for (units, log) in [
        ("discourse/1,discourse/4", "b.log"),
        ("discourse/2", "c.log"),
    ] {
        hosts
            .0
            .push(host(&bundle, &store, units, &dir.path().join(log)));
    }
    wait_until(
        Duration::from_secs(60),
        "three discourse units settle",
        || status().is_some_and(|s| settled(&s, "discourse", 3)) && pod_spec().is_some(),
    );

    operate(&bin, &store, &["add-unit", "discourse", "-n", "2"]);
    wait_until(
        Duration::from_secs(60),
        "five discourse units settle",
        || status().is_some_and(|s| settled(&s, "discourse", 5)),
    );

    // Down to two, the leader among those removed.
    let now = status().unwrap();
    let leader = now
        .applications
        .iter()
        .find(|a| a.name == "discourse")
        .and_then(|a| a.leader.clone())
        .unwrap();
    let mut leaving: Vec<String> = units_of(&now, "discourse")
        .into_iter()
        .filter(|u| *u != leader)
        .take(2)
        .map(str::to_string)
        .collect();
    leaving.push(leader.clone());
    let mut args = vec!["remove-unit"];
    args.extend(leaving.iter().map(String::as_str));
    operate(&bin, &store, &args);
    wait_until(
        Duration::from_secs(60),
        "two discourse units settle",
        || status().is_some_and(|s| settled(&s, "discourse", 2)),
    );
    let after = status().unwrap();
    for gone in &leaving {
        assert!(
            !units_of(&after, "discourse").contains(&gone.as_str()),
            "{gone} stayed"
        );
    }
    let new_leader = after
        .applications
        .iter()
        .find(|a| a.name == "discourse")
        .and_then(|a| a.leader.clone())
        .unwrap();
    assert_ne!(new_leader, leader, "the removed leader still leads");

    operate(
        &bin,
        &store,
        &["config", "discourse", "external_hostname=forum.example.com"],
    );
    wait_until(
        Duration::from_secs(60),
        "the pod spec shows the new host name",
        || pod_spec().is_some_and(|p| p.spec.to_string().contains("forum.example.com")),
    );
    let shown = operate(&bin, &store, &["config", "discourse", "--format", "json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        shown["settings"]["external_hostname"]["value"],
        "forum.example.com"
    );

    // Upgraded to the next release: only its module sets DISCOURSE_PLUGINS, so the pod
    // spec shows the hosts run it, with the image its new default names.
    let upgraded = operate(
        &bin,
        &store,
        &[
            "upgrade-charm",
            "discourse",
            "--path",
            next.to_str().unwrap(),
        ],
    );
    assert!(upgraded.contains("plugins"), "{upgraded}");
    wait_until(
        Duration::from_secs(60),
        "the pod spec shows the next release's image",
        || {
            pod_spec().is_some_and(|p| {
                let spec = p.spec.to_string();
                spec.contains("discourse/discourse:2.7") && spec.contains("DISCOURSE_PLUGINS")
            })
        },
    );
    wait_until(
        Duration::from_secs(60),
        "two discourse units settle on the next release",
        || status().is_some_and(|s| settled(&s, "discourse", 2)),
    );
    let spec = pod_spec().unwrap().spec.to_string();
    assert!(
        spec.contains("forum.example.com"),
        "the operator's setting was lost: {spec}"
    );

    // An action on kv, waited for: its results come back from the unit's hook.
    wait_until(Duration::from_secs(60), "kv's cluster forms", || {
        status().is_some_and(|s| {
            settled(&s, "kv", 2)
                && units_of(&s, "kv").len() == 2
                && s.units
                    .iter()
                    .filter(|u| u.name.starts_with("kv/"))
                    .all(|u| u.status.message == "2 members")
        })
    });
    let done = operate(
        &bin,
        &store,
        &[
            "run-action",
            "kv/1",
            "members",
            "--wait",
            "60",
            "--format",
            "json",
        ],
    );
    let done: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["results"]["members"],
        "kv-0.kv-endpoints.default.svc.cluster.local:7379,kv-1.kv-endpoints.default.svc.cluster.local:7379",
        "{done}"
    );
    assert!(
        done["started"].is_string() && done["completed"].is_string(),
        "{done}"
    );
    // Parameters are checked before anything is queued: a required one left out is refused
    // at once, and no action is recorded for it.
    let refused = Command::new(&bin)
        .args(["run-action", "kv/0", "get", "--store", &store])
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "a missing parameter was accepted"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("required parameter key"), "{stderr}");
    // An action the charm fails is failed, and the unit is not in error for it.
    let failed = Command::new(&bin)
        .args([
            "run-action",
            "kv/0",
            "get",
            "key=missing",
            "--wait",
            "60",
            "--store",
            &store,
        ])
        .output()
        .unwrap();
    assert!(!failed.status.success(), "a failed action exited 0");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("failed") && stderr.contains("missing"),
        "{stderr}"
    );
    let shown = operate(&bin, &store, &["show-action", "2", "--format", "json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["status"], "failed", "{shown}");
    let unit = operate(&bin, &store, &["show-unit", "kv/0", "--format", "json"]);
    let unit: serde_json::Value = serde_json::from_str(&unit).unwrap();
    assert_eq!(unit["hook_error"], serde_json::Value::Null, "{unit}");

    let last = status().unwrap();
    for app in ["discourse", "postgresql", "kv"] {
        let leaders = last
            .units
            .iter()
            .filter(|u| u.name.starts_with(&format!("{app}/")) && u.leader)
            .count();
        assert_eq!(leaders, 1, "{app}: {last:?}");
    }
}
