//! Removing a relation while a host runs the model, as an operator would: the relation goes
//! once its last relation-broken has run, and relating the same applications again works
//! and settles. (It used to
//! stay dying for good: PostgreSQL's relation-departed rewrote its bags, relation-changed
//! was queued on Discourse's units after their relation-broken, and nothing reaped it.)

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use charm_host::store::{SqliteStore, StateStore};
use charm_tests::wait_until;

/// Runs an operator's command against the store; its stdout, and whether it succeeded.
fn operate(bin: &Path, store: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .args(["--store", store])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Kills the host when the test ends, passing or not, showing its log's end on a failure.
struct Host(Child, std::path::PathBuf);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.1).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- host log\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

#[test]
fn a_relation_removed_under_a_running_host_goes_and_can_be_made_again() {
    let bin = charm_tests::charm_host_binary();
    let dir = tempfile::tempdir().unwrap();
    let bundle = charm_tests::discourse_bundle(dir.path(), 2);
    let db = dir.path().join("model.db");
    let store = format!("sqlite:{}", db.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let relations = || {
        let s = SqliteStore::open(&db, "default").ok()?;
        rt.block_on(s.relations()).ok()
    };
    let queues_empty = || {
        let Ok(s) = SqliteStore::open(&db, "default") else {
            return false;
        };
        ["discourse/0", "discourse/1", "postgresql/0"]
            .iter()
            .all(|u| rt.block_on(s.queued(u)).is_ok_and(|q| q.is_empty()))
    };

    let (ok, out) = operate(
        &bin,
        &store,
        &["run", bundle.to_str().unwrap(), "--until-idle"],
    );
    assert!(ok, "{out}");
    let log = dir.path().join("host.log");
    let _host = Host(
        Command::new(&bin)
            .args(["run", bundle.to_str().unwrap(), "--store", &store])
            .env("RUST_LOG", "charm_host=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
        log,
    );

    let (ok, out) = operate(
        &bin,
        &store,
        &["remove-relation", "discourse", "postgresql"],
    );
    assert!(ok, "{out}");
    wait_until(Duration::from_secs(30), "the relation is reaped", || {
        relations().is_some_and(|r| r.iter().all(|r| r.is_peer()))
    });

    let (ok, out) = operate(&bin, &store, &["relate", "discourse", "postgresql"]);
    assert!(ok, "relate again: {out}");
    wait_until(
        Duration::from_secs(60),
        "the new relation's hooks run",
        queues_empty,
    );
    let related = relations().unwrap();
    let live: Vec<_> = related.iter().filter(|r| !r.is_peer()).collect();
    assert_eq!(live.len(), 1, "{related:?}");
    assert!(!live[0].dying, "{related:?}");
}
