//! Models on a shared etcd, driven through the binary as an operator would: a model is made
//! only by `deploy` or `run BUNDLE`, at a prefix inside no other model and above none; a
//! command that only reads writes nothing, and one naming a prefix that holds no model is
//! refused; errors say what is wrong without a backtrace; two hosts started together on an
//! empty prefix deploy their bundle once.

#![cfg(feature = "etcd")]

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use charm_host::store::{EtcdConfig, EtcdStore, OpenMode, StateStore};
use charm_tests::etcd_server::EtcdServer;
use charm_tests::hosts::{charm_host, host_run, ok, refused};
use charm_tests::{guests, wait_until};

/// Every key in etcd and its revision: what a refused or read-only command leaves as it was.
fn everything(etcd: &EtcdServer) -> (i64, Vec<String>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(etcd.everything())
}

#[test]
fn models_neither_nest_nor_appear_where_commands_only_read() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::copy(guests::POSTGRESQL, dir.join("postgresql.wasm")).unwrap();
    let store = |prefix: &str| etcd.store_spec(prefix);
    ok(
        dir,
        &[
            "deploy",
            "postgresql.wasm",
            "pg",
            "--store",
            &store("models/a"),
        ],
    );
    let before = everything(&etcd);

    let inside = store("models/a/hooks/pg/0");
    let deploy = |at: &str| ["deploy", "postgresql.wasm", "pgx", "--store", at].map(String::from);
    let args = deploy(&inside);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(dir, &args, "inside the model at models/a");
    let above = store("models");
    let args = deploy(&above);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(dir, &args, "holds keys but no model");
    let missing = store("modelz-typo");
    for command in [
        vec!["status"],
        vec!["show-unit", "pg/0"],
        vec!["add-unit", "pg"],
        vec!["config", "pg"],
    ] {
        let mut args = command.clone();
        args.extend(["--store", &missing]);
        refused(dir, &args, "no model at etcd://");
    }
    assert_eq!(everything(&etcd), before, "a refused command wrote");

    // The same model however its prefix is spelled; reading it writes nothing.
    let spelled = store("/models//a/");
    for command in [
        vec!["status", "--format", "json"],
        vec!["show-unit", "pg/0"],
        vec!["config", "pg"],
        vec!["debug-log"],
        vec!["export-bundle"],
        vec!["actions", "pg"],
    ] {
        let mut args = command.clone();
        args.extend(["--store", &spelled]);
        let out = ok(dir, &args);
        if command[0] == "status" {
            assert!(out.contains("\"pg/0\""), "{out}");
        }
    }
    assert_eq!(everything(&etcd), before, "a read wrote");
}

fn host(dir: &Path, spec: &str, log: &Path) -> Child {
    host_run(log)
        .args(["bundle.yaml", "--store", spec])
        .current_dir(dir)
        .env("RUST_LOG", "warn,charm_host=info")
        .spawn()
        .unwrap()
}

#[test]
fn hosts_started_together_on_an_empty_prefix_deploy_the_bundle_once() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    charm_tests::discourse_bundle(dir, 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rounds: usize = std::env::var("ETCD_TWIN_DEPLOYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    for round in 0..rounds {
        let spec = etcd.store_spec(&format!("models/round-{round}"));
        let logs = [0, 1].map(|i| dir.join(format!("host-{round}-{i}.log")));
        let mut hosts = logs.each_ref().map(|log| host(dir, &spec, log));
        let read = |log: &Path| std::fs::read_to_string(log).unwrap_or_default();
        wait_until(Duration::from_secs(60), "both hosts deployed", || {
            logs.iter().all(|log| read(log).contains("bundle deployed"))
        });
        let config = EtcdConfig::parse(&spec).unwrap();
        let store = rt
            .block_on(EtcdStore::connect_with(
                config,
                "default",
                OpenMode::ReadOnly,
            ))
            .unwrap();
        let status = rt.block_on(store.status()).unwrap();
        let units: Vec<&str> = status.units.iter().map(|u| u.name.as_str()).collect();
        let relations = rt.block_on(store.relations()).unwrap();
        for host in &mut hosts {
            host.kill().unwrap();
            host.wait().unwrap();
        }
        assert_eq!(
            units,
            ["discourse/0", "discourse/1", "discourse/2", "postgresql/0"],
            "round {round}:\n{}\n{}",
            read(&logs[0]),
            read(&logs[1])
        );
        assert_eq!(relations.len(), 1, "round {round}: {relations:?}");
    }
}

/// With one member of three down, one-shot commands go to the members that answer, as
/// etcdctl's do: 100 of them (reads and changes) all succeed, and a command given only the
/// member that is down fails naming it.
#[test]
fn one_shot_commands_fail_over_when_a_member_is_down() {
    use charm_tests::etcd_server::EtcdCluster;

    let mut cluster = EtcdCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::copy(guests::POSTGRESQL, dir.join("postgresql.wasm")).unwrap();
    let spec = cluster.store_spec("models/prod");
    ok(dir, &["deploy", "postgresql.wasm", "pg", "--store", &spec]);
    // Each member's id is known before one goes, to tell the leader afterwards.
    let leader = cluster.wait_leader(Duration::from_secs(30));
    let victim = (leader + 1) % 3;
    let down = cluster.members[victim].endpoint();
    cluster.members[victim].kill();
    cluster.wait_leader(Duration::from_secs(30));
    let mut failed = Vec::new();
    for n in 0..100 {
        let setting = format!("port={}", 5000 + n);
        let args: Vec<&str> = match n % 4 {
            0 => vec!["config", "pg", &setting],
            1 => vec!["status"],
            2 => vec!["config", "pg"],
            _ => vec!["show-unit", "pg/0"],
        };
        let mut args = args;
        args.extend(["--store", &spec]);
        let out = charm_host(dir, &args);
        if !out.status.success() {
            failed.push(format!(
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 100 failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    let only_down = format!("etcd://{down}/models/prod");
    refused(dir, &["status", "--store", &only_down], &down);
}
