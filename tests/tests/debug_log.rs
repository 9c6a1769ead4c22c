//! What a charm logs, through the log import and on its stdout and stderr, is kept per unit
//! with the hook's name and a time, for `charm-host debug-log`: through the agents and the
//! store, for a charm compiled to WebAssembly; `charm-host debug-log --follow` prints the
//! lines kept after it started.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use charm_host::model::LogRecord;
use charm_host::store::{SqliteStore, StateStore};

use charm_tests::{controller, fast_config, guests, load, options, runtime, settle};

#[tokio::test(flavor = "multi_thread")]
async fn charm_log_lines_reach_the_units_ring() {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    let probe = load(&runtime, guests::PROBE);
    controller
        .deploy("probe", probe, "probe.wasm", options(&[("mode", "log")]), 2)
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(30)).await;

    let lines = store.debug_log(Some("probe/1"), 1000).await.unwrap();
    let seen: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| (l.hook.clone(), l.level.clone(), l.message.clone()))
        .collect();
    for (level, message) in [
        ("info", "handling install"),
        ("stdout", "stdout of install"),
        ("stdout", "stderr of install"),
        ("info", "handling start"),
    ] {
        let hook = message.rsplit(' ').next().unwrap();
        assert!(
            seen.contains(&(hook.to_string(), level.to_string(), message.to_string())),
            "{level} {message:?} missing from {seen:?}"
        );
    }
    assert!(lines.iter().all(|l| l.unit == "probe/1"), "{lines:?}");
    assert!(lines.iter().all(|l| l.at_ms > 0), "{lines:?}");
    let all = store.debug_log(None, 1000).await.unwrap();
    assert!(all.iter().any(|l| l.unit == "probe/0"));
    let newest = store.debug_log(None, 2).await.unwrap();
    assert_eq!(newest.len(), 2);
    assert_eq!(newest[..], all[all.len() - 2..]);
}

#[test]
fn debug_log_follow_prints_lines_kept_after_it_started() {
    let bin = charm_tests::charm_host_binary();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("model.db");
    let store = format!("sqlite:{}", db.display());
    let deployed = Command::new(&bin)
        .args(["deploy", guests::PROBE, "probe", "--store", &store])
        .output()
        .unwrap();
    assert!(deployed.status.success(), "{deployed:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Kept as a host keeps what a hook logged.
    let keep = |message: &str| {
        let line = LogRecord {
            seq: 0,
            unit: "probe/0".into(),
            hook: "update-status".into(),
            at_ms: 1_700_000_000_000,
            level: "info".into(),
            message: message.into(),
        };
        let s = SqliteStore::open(&db, "default").unwrap();
        rt.block_on(s.record_logs("probe/0", vec![line])).unwrap();
    };
    keep("before following");

    let mut follow = Command::new(&bin)
        .args(["debug-log", "--follow", "--store", &store])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("debug-log --follow printed nothing more")
    };
    // What was kept before it started comes first; then what is kept while it follows.
    let first = next();
    assert!(
        first.contains("probe/0 update-status INFO: before following"),
        "{first}"
    );
    keep("while following 1");
    keep("while following 2");
    let (second, third) = (next(), next());
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(second.ends_with("INFO: while following 1"), "{second}");
    assert!(third.ends_with("INFO: while following 2"), "{third}");
}
