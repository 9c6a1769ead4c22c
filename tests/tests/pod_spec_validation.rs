//! An invalid pod spec reaches the charm as the SDK's typed error, naming the field.

use std::time::Duration;

use charm_tests::{controller, fast_config, guests, load, options, runtime, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_pod_specs_come_back_as_typed_errors_naming_the_field() {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    let probe = load(&runtime, guests::PROBE);
    controller
        .deploy(
            "probe",
            probe,
            "probe",
            options(&[("mode", "pod-spec-errors")]),
            1,
        )
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(30)).await;

    let stored = store.snapshot("probe/0").await.unwrap().stored;
    let get = |k: &str| serde_json::from_str::<String>(&stored[k]).unwrap();
    assert_eq!(get("leader"), "true", "the only unit leads");
    let expected = [
        ("pod-spec-0", "containers\""),
        ("pod-spec-1", "containers[0].name\""),
        ("pod-spec-2", "containers[1].name\""),
        ("pod-spec-3", "containers[0].colour\""),
    ];
    for (key, field) in expected {
        let got = get(key);
        assert!(
            got.starts_with("Err(InvalidPodSpec { field: \""),
            "{key}: {got}"
        );
        assert!(
            got.contains(&format!("field: \"{field}")),
            "{key}: expected field {field} in {got}"
        );
    }
    assert_eq!(
        store.pod_spec("probe").await.unwrap(),
        None,
        "no invalid spec was stored"
    );
}
