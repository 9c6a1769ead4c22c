//! A SQLite model on a full disk, and on a read-only file system: each command that would
//! write is refused with an error that says which, exits non-zero, and the model is
//! exactly as it was once space returns or the file system is writable again.
//!
//! The small disk is a tmpfs mounted in a mount namespace of the test's own (`unshare`),
//! so the test needs neither a spare disk nor the host's root.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use charm_host::store::{SqliteStore, StateStore};
use charm_tests::guests;

const CHILD: &str = "CHARM_HOST_BAD_STORE_CHILD";

#[test]
fn a_full_disk_and_a_read_only_file_system_get_clear_errors_and_lose_nothing() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["--map-root-user", "--mount"])
        .arg(&exe)
        .args([
            "--exact",
            "bad_store_in_its_own_mount_namespace",
            "--ignored",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .expect("unshare (util-linux) runs the test in its own mount namespace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the test in its own mount namespace failed:\n{stdout}\n{stderr}"
    );
}

/// Run by the test above, inside its own mount namespace: never on its own, since it
/// mounts file systems.
#[test]
#[ignore = "run by a_full_disk_and_a_read_only_file_system_get_clear_errors_and_lose_nothing"]
fn bad_store_in_its_own_mount_namespace() {
    assert!(
        std::env::var_os(CHILD).is_some(),
        "mounts file systems: run only in the mount namespace the parent test makes"
    );
    let scratch = tempfile::tempdir().unwrap();
    let disk = scratch.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    mount(&["-t", "tmpfs", "-o", "size=4m", "tmpfs"], &disk);
    let model = Model::new(&disk);
    model.ok(&["deploy", "discourse.wasm", "-n", "2"]);
    model.ok(&["deploy", "postgresql.wasm"]);
    model.ok(&["relate", "discourse", "postgresql"]);
    let before = model.fingerprint();

    // A full disk: the filler takes every block left.
    let filler = disk.join("filler");
    fill(&filler);
    for args in [
        &["config", "discourse", "external_hostname=full.example"][..],
        &["add-unit", "discourse", "-n", "3"],
        &["remove-relation", "discourse", "postgresql"],
    ] {
        model.refused(args, "full");
    }
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(
        model.fingerprint(),
        before,
        "a refused write on a full disk left a trace"
    );
    model.ok(&["config", "discourse", "external_hostname=space.example"]);
    let before = model.fingerprint();

    // A read-only file system.
    mount(&["-o", "remount,ro"], &disk);
    for args in [
        &["config", "discourse", "external_hostname=ro.example"][..],
        &["add-unit", "discourse"],
    ] {
        model.refused(args, "read-only");
    }
    mount(&["-o", "remount,rw"], &disk);
    assert_eq!(
        model.fingerprint(),
        before,
        "a refused write on a read-only disk left a trace"
    );
}

struct Model {
    bin: PathBuf,
    dir: PathBuf,
    store: String,
}

impl Model {
    fn new(dir: &Path) -> Self {
        std::fs::copy(guests::DISCOURSE, dir.join("discourse.wasm")).unwrap();
        std::fs::copy(guests::POSTGRESQL, dir.join("postgresql.wasm")).unwrap();
        Model {
            bin: charm_tests::charm_host_binary(),
            dir: dir.to_owned(),
            store: format!("sqlite:{}", dir.join("model.db").display()),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .args(["--store", &self.store])
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `args` must exit non-zero with an error that says `why`.
    fn refused(&self, args: &[&str], why: &str) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was not refused");
        assert!(stderr.contains(why), "{args:?}: {why:?} not in {stderr}");
        println!("{args:?}: {}", stderr.trim());
    }

    /// Everything an operator or a hook can read, and SQLite's own check of the file.
    fn fingerprint(&self) -> String {
        let path = self.dir.join("model.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "the model file is damaged");
        drop(conn);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = SqliteStore::open(&path, "default").unwrap();
            let mut out = format!(
                "{:?}\n{:?}\n{:?}\n",
                store.applications().await.unwrap(),
                store.relations().await.unwrap(),
                store.status().await.unwrap()
            );
            for row in store.status().await.unwrap().units {
                out += &format!("{:?}\n", store.unit_details(&row.name).await.unwrap());
            }
            out
        })
    }
}

fn mount(args: &[&str], target: &Path) {
    let out = Command::new("mount")
        .args(args)
        .arg(target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount {args:?} {}: {}",
        target.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `path` until the file system has no block left.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 << 10];
    loop {
        if let Err(e) = file.write_all(&block).and_then(|()| file.sync_all()) {
            assert_eq!(e.raw_os_error(), Some(28), "filling the disk: {e}"); // ENOSPC
            break;
        }
    }
    // The last partial block too.
    while file
        .write_all(&[0u8; 512])
        .and_then(|()| file.sync_all())
        .is_ok()
    {}
}
