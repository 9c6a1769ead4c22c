//! What a charm logs, through the log import and on its stdout and stderr, is kept per unit
//! with the hook's name and a time, for `charm-host debug-log`: through the agents and the
//! store, for a charm compiled to WebAssembly.

use std::time::Duration;

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
