//! A misbehaving charm fails its own hook with a clear error, and nothing else notices.

use std::time::Duration;

use charm_host::charm::RuntimeConfig;
use charm_host::model::StatusKind;
use charm_tests::{controller, fast_config, guests, load, options, runtime_with, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_and_a_memory_bomb_fail_only_their_own_hooks() {
    let runtime = runtime_with(RuntimeConfig {
        hook_timeout: Duration::from_millis(300),
        memory_limit: 64 << 20,
        ..Default::default()
    });
    let (controller, store) = controller(fast_config());
    controller
        .deploy(
            "looper",
            load(&runtime, guests::PROBE),
            "probe",
            options(&[("mode", "loop")]),
            1,
        )
        .await
        .unwrap();
    controller
        .deploy(
            "bomber",
            load(&runtime, guests::PROBE),
            "probe",
            options(&[("mode", "memory-bomb")]),
            1,
        )
        .await
        .unwrap();
    controller
        .deploy(
            "calm",
            load(&runtime, guests::PROBE),
            "probe",
            options(&[("mode", "ok")]),
            1,
        )
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;

    let status = store.status().await.unwrap();
    let unit = |name: &str| {
        status
            .units
            .iter()
            .find(|u| u.name == name)
            .unwrap()
            .clone()
    };
    let looper = unit("looper/0");
    assert_eq!(looper.status.kind, StatusKind::Error);
    assert!(
        looper
            .status
            .message
            .ends_with("exceeded its time limit of 0.3 s"),
        "{}",
        looper.status.message
    );
    let bomber = unit("bomber/0");
    assert_eq!(bomber.status.kind, StatusKind::Error);
    assert!(
        bomber
            .status
            .message
            .ends_with("trapped: out of memory (limit 64 MiB)"),
        "{}",
        bomber.status.message
    );
    let calm = unit("calm/0");
    assert_ne!(calm.status.kind, StatusKind::Error, "{calm:?}");
    assert!(
        controller
            .history()
            .iter()
            .any(|r| r.unit == "calm/0" && r.hook == "start" && r.outcome == "ok")
    );
}

/// A hook that allocates and frees far more than its memory limit in all succeeds: the SDK's
/// hook arena hands allocations to the standard allocator once it is used up, and that one
/// reuses what is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_allocates_and_frees_more_than_its_memory_limit_succeeds() {
    let runtime = runtime_with(RuntimeConfig {
        memory_limit: 64 << 20,
        ..Default::default()
    });
    let (controller, store) = controller(fast_config());
    controller
        .deploy(
            "churner",
            load(&runtime, guests::PROBE),
            "probe",
            options(&[("mode", "churn")]),
            1,
        )
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;
    let snapshot = store.snapshot("churner/0").await.unwrap();
    let churned: usize = snapshot.stored["churned"].parse().unwrap();
    assert!(churned >= 256 << 20, "{churned}");
    assert!(
        controller
            .history()
            .iter()
            .any(|r| r.unit == "churner/0" && r.hook == "start" && r.outcome == "ok"),
        "{:?}",
        controller.history()
    );
}
