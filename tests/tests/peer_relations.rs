//! Deploying an application establishes its peer relations, as Juju does: kv's units find
//! each other on `cluster` without any bundle relation, and resuming adds no second one.

use std::collections::BTreeMap;
use std::time::Duration;

use charm_tests::{controller, fast_config, guests, load, runtime, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploying_kv_relates_its_units_on_the_peer_endpoint() {
    let runtime = runtime();
    let (controller, store) = controller(fast_config());
    let kv = load(&runtime, guests::KV);
    controller
        .deploy("kv", kv, "kv.wasm", BTreeMap::new(), 3)
        .await
        .unwrap();
    settle(&controller, Duration::from_secs(60)).await;

    let relations = store.relations().await.unwrap();
    assert_eq!(relations.len(), 1, "{relations:?}");
    let peers = &relations[0];
    assert_eq!(peers.interface, "kv-cluster");
    assert_eq!(peers.endpoints.len(), 1);
    assert_eq!(peers.endpoints[0].endpoint, "cluster");
    for unit in ["kv/0", "kv/1", "kv/2"] {
        let snapshot = store.snapshot(unit).await.unwrap();
        let view = &snapshot.relations[&peers.id];
        assert_eq!(view.remote_units.len(), 2, "{unit}: {view:?}");
        // Each unit published its address to its peers.
        assert!(!view.unit_bags[unit].is_empty(), "{unit}: {view:?}");
    }
    // The leader published the member list once it saw every peer.
    let leader = store.snapshot("kv/0").await.unwrap();
    let members = leader.relations[&peers.id].app_bags["kv"].get("members");
    assert!(members.is_some_and(|m| m.contains("kv-2")), "{members:?}");

    // Deploying again resumes: the peer relation is not added twice.
    let kv = load(&runtime, guests::KV);
    controller
        .deploy("kv", kv, "kv.wasm", BTreeMap::new(), 3)
        .await
        .unwrap();
    assert_eq!(store.relations().await.unwrap().len(), 1);
}
