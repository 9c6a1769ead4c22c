//! Juju's lifecycle on each of the host's stores: the model core's random walks
//! ([`charm_model::walk`]) run through `StateStore::step` and `LeaseStore` on memory, SQLite
//! and etcd, each walk on a fresh store, checked after every step and once settled, and the
//! settled model read the same from the store as from the model core's own records given
//! the same walk. `LIFECYCLE_STORE_WALKS` sets how many walks per store (64 by default;
//! etcd runs a quarter of them, each on a fresh prefix of one server).

use std::sync::Arc;
use std::time::Duration;

use charm_host::store::{Claim, MemoryStore, SqliteStore, Step, Store, Verdict};
use charm_model::lifecycle::Inventory;
use charm_model::tx::ModelTx;
use charm_model::walk::{MemoryModel, Op, Walk, WalkStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A store of the host as a walk's store: each step one `StateStore::step` that reads the
/// whole model, leases claimed for as long as a walk lasts.
struct HostModel {
    store: Arc<dyn Store>,
    rt: tokio::runtime::Handle,
}

const FOREVER: Duration = Duration::from_secs(3600);

impl WalkStore for HostModel {
    fn step(&mut self, op: &mut (dyn FnMut(&mut dyn ModelTx) -> bool + Send)) {
        let reads = [
            charm_host::store::Records::Model,
            charm_host::store::Records::NextRelation,
            charm_host::store::Records::AllLeaderData,
            charm_host::store::Records::AppStatuses,
            charm_host::store::Records::PodSpecs,
        ];
        let step = Step::write("walk", "a walk's step on", "", &reads);
        let mut erased = |tx: &mut dyn ModelTx| {
            if op(tx) {
                Verdict::Apply
            } else {
                Verdict::Abort("invalid")
            }
        };
        self.rt
            .block_on(self.store.step(step, &mut erased))
            .expect("the store answers");
    }

    fn claim(&mut self, app: &str, unit: &str) -> Option<u64> {
        match self.rt.block_on(self.store.claim(app, unit, FOREVER)) {
            Ok(Claim::Held(lease)) => Some(lease.term),
            _ => None,
        }
    }

    fn expire(&mut self, app: &str) {
        let holder = self
            .rt
            .block_on(self.store.leader(app))
            .ok()
            .flatten()
            .map(|l| l.holder);
        if let Some(holder) = holder {
            self.rt
                .block_on(self.store.release(app, &holder))
                .expect("the store answers");
        }
    }

    fn put_module(&mut self, bytes: &[u8]) -> String {
        self.rt
            .block_on(self.store.put_module(bytes))
            .expect("the store answers")
    }
}

fn op() -> impl Strategy<Value = Op> {
    any::<(u8, u8, u8)>().prop_map(|(kind, a, b)| Op::drawn(kind, a, b))
}

fn walks() -> u32 {
    std::env::var("LIFECYCLE_STORE_WALKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// The model as a walk leaves it, without what differs by store and not by rule: the
/// module hashes (content hashes here, names there) and the terms' numbers (etcd's are its
/// revisions; that leader-elected ran for the lease's term the settled check asserts).
fn comparable(mut inventory: Inventory) -> Inventory {
    for unit in inventory.units.values_mut() {
        if let Some(record) = unit.record.as_mut() {
            record.elected_term = record.elected_term.map(|_| 0);
        }
    }
    for app in inventory.apps.values_mut() {
        if let Some(lease) = app.lease.as_mut() {
            lease.term = 0;
        }
        if let Some(record) = app.record.as_mut() {
            record.module = None;
        }
        if let Some(view) = app.view.as_mut() {
            view.module = None;
        }
    }
    inventory
}

/// Runs walks on stores `open` makes, each against the model core's own records.
fn walks_on(cases: u32, open: impl Fn() -> Arc<dyn Store>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 500,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 0..40), |ops| {
        let _guard = rt.enter();
        let mut on_store = Walk::new(HostModel {
            store: open(),
            rt: rt.handle().clone(),
        });
        let mut in_core = Walk::new(MemoryModel::default());
        for op in &ops {
            on_store
                .apply(op)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            in_core
                .apply(op)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        on_store
            .settle()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        in_core
            .settle()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (store, core) = (
            on_store
                .inventory()
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            in_core
                .inventory()
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
        );
        prop_assert_eq!(&on_store.history, &in_core.history);
        prop_assert_eq!(comparable(store), comparable(core));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn walks_keep_the_lifecycle_on_the_memory_store() {
    walks_on(walks(), || Arc::new(MemoryStore::new("walk")));
}

#[test]
fn walks_keep_the_lifecycle_on_the_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicU32::new(0);
    walks_on(walks(), || {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Arc::new(SqliteStore::open(&dir.path().join(format!("walk-{i}.db")), "walk").unwrap())
    });
}

#[cfg(feature = "etcd")]
#[path = "../../tests/src/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;

#[cfg(feature = "etcd")]
#[test]
fn walks_keep_the_lifecycle_on_the_etcd_store() {
    use charm_host::store::{EtcdConfig, EtcdStore};
    let server = etcd_server::EtcdServer::start();
    let n = std::sync::atomic::AtomicU32::new(0);
    walks_on(walks().div_ceil(4), || {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let config = EtcdConfig::parse(&server.store_spec(&format!("walk-{i}"))).unwrap();
        let store = tokio::runtime::Handle::current().block_on(EtcdStore::connect(config, "walk"));
        Arc::new(store.unwrap())
    });
}
