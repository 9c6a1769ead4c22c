//! A wasm hook that starts as leader runs under a deadline tied to the leadership
//! guarantee: renewals move it forward, so a leader hook may outlast the first guarantee;
//! when the lease store stops answering for longer than the guarantee, the hook is
//! interrupted before the guarantee ends, commits nothing, and runs again later.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use charm_host::agent::HookResultKind;
use charm_host::controller::Controller;
use charm_host::model::ConfigValue;
use charm_host::store::faults::{FaultPlan, FaultyStore, Outage};
use charm_host::store::{MemoryStore, Store};
use charm_tests::{fast_config, guests, load, runtime, settle};

fn spin(ms: i64) -> BTreeMap<String, ConfigValue> {
    BTreeMap::from([
        ("mode".to_string(), ConfigValue::String("spin".into())),
        ("spin_ms".to_string(), ConfigValue::Int(ms)),
    ])
}

async fn deploy_spinner(plan: FaultPlan) -> (Controller, Arc<dyn Store>) {
    let config = fast_config();
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new("test"));
    let store: Arc<dyn Store> = Arc::new(FaultyStore::new(memory, plan, None));
    let controller = Controller::new(store.clone(), Duration::from_millis(100), config).unwrap();
    let spin_ms = 4_000; // longer than the 2.8 s guarantee of fast_config
    controller
        .deploy(
            "spinner",
            load(&runtime(), guests::PROBE),
            "probe",
            spin(spin_ms),
            1,
        )
        .await
        .unwrap();
    (controller, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_carry_a_leader_hook_past_its_first_guarantee() {
    let (controller, store) = deploy_spinner(FaultPlan::none(1)).await;
    settle(&controller, Duration::from_secs(60)).await;
    let runs: Vec<_> = controller
        .history()
        .into_iter()
        .filter(|r| r.hook == "start")
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].result, HookResultKind::Committed);
    assert!(runs[0].leader);
    let snapshot = store.snapshot("spinner/0").await.unwrap();
    assert_eq!(
        snapshot.leader_data.get("spun").map(String::as_str),
        Some("yes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_hook_is_interrupted_before_its_guarantee_ends_when_renewals_fail() {
    // From 1.5 s to 6 s every lease call times out: longer than the 2.8 s guarantee,
    // while the first start hook spins for 4 s.
    let mut plan = FaultPlan::none(2);
    plan.commit_faults = false;
    plan.hang = Duration::from_secs(5);
    plan.outages.push(Outage {
        start: Duration::from_millis(1500),
        end: Duration::from_secs(6),
    });
    let (controller, store) = deploy_spinner(plan).await;
    settle(&controller, Duration::from_secs(60)).await;

    let runs: Vec<_> = controller
        .history()
        .into_iter()
        .filter(|r| r.hook == "start")
        .collect();
    let interrupted: Vec<_> = runs
        .iter()
        .filter(|r| r.result == HookResultKind::Interrupted)
        .collect();
    assert!(
        !interrupted.is_empty(),
        "the leader hook must have been interrupted: {runs:?}"
    );
    assert!(interrupted.iter().all(|r| r.leader), "{interrupted:?}");
    assert_eq!(
        runs.last().unwrap().result,
        HookResultKind::Committed,
        "it ran again and committed: {runs:?}"
    );
    for r in &runs {
        assert!(
            !r.refused_not_leader,
            "no leader-only write was refused: {r:?}"
        );
    }
    // The interrupted attempts committed nothing: the stored counter counts one spin.
    let snapshot = store.snapshot("spinner/0").await.unwrap();
    assert_eq!(
        snapshot.stored.get("spins").map(String::as_str),
        Some("1"),
        "{snapshot:?}"
    );
}
