//! A hook that returns an error or traps commits nothing (I4); the unit shows an error
//! status; the hook is retried with backoff.

use std::time::Duration;

use charm_host::model::StatusKind;
use charm_tests::{controller, fast_config, guests, load, options, runtime, settle};

async fn nothing_applied_after(mode: &str, expected_error: &str) {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    let probe = load(&runtime, guests::PROBE);
    controller
        .deploy("probe", probe, "probe", options(&[("mode", mode)]), 1)
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(30)).await;

    let snapshot = store.snapshot("probe/0").await.unwrap();
    assert_eq!(
        snapshot.stored.get("written"),
        None,
        "a failed hook's stored state was applied"
    );
    assert_eq!(
        snapshot.leader_data.get("written"),
        None,
        "a failed hook's leader data was applied"
    );
    assert_ne!(snapshot.unit_status.message, "must not be applied");
    assert_eq!(
        store.pod_spec("probe").await.unwrap(),
        None,
        "a failed hook's pod spec was applied"
    );
    // Install succeeded once and was not re-run; start failed on every attempt.
    assert_eq!(
        snapshot.stored.get("install-runs").map(String::as_str),
        Some("1")
    );
    let history = controller.history();
    let starts: Vec<_> = history.iter().filter(|r| r.hook == "start").collect();
    assert_eq!(
        starts.len(),
        3,
        "start is retried up to max_attempts: {starts:?}"
    );
    assert!(
        starts.iter().all(|r| r.outcome.contains(expected_error)),
        "{starts:?}"
    );

    let status = store.status().await.unwrap();
    let unit = &status.units[0];
    assert_eq!(unit.status.kind, StatusKind::Error);
    assert!(
        unit.status.message.contains("hook failed: \"start\""),
        "{}",
        unit.status.message
    );
    assert!(
        unit.status.message.contains(expected_error),
        "{}",
        unit.status.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_returning_an_error_commits_nothing() {
    nothing_applied_after("fail", "deliberate failure").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_hook_commits_nothing_and_reports_the_panic() {
    nothing_applied_after("trap", "deliberate panic").await;
}
