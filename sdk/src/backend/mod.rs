//! The seam between the typed API and whoever answers it.
//!
//! Compiled for WebAssembly, every call goes to the host through the generated WIT imports.
//! Natively there is no host: the calls go to the backend that [`crate::testing`] installs
//! on the current thread for the duration of one hook, so a charm's tests need no wasm.

// Natively the harness answers every call itself; the cache is exercised by its tests.
#[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
mod cache;

use crate::error::Result;
use crate::log::Level;
use crate::{ConfigValue, Network, Status};

/// A bag's entries, shared by the read cache and every [`crate::DataBag`] read from it: a
/// bag read again is not copied again.
pub(crate) type Entries = std::rc::Rc<std::collections::BTreeMap<String, String>>;

/// The keys of a bag whose values the host left out for their length ([`INLINE_MAX`]),
/// shared as [`Entries`] are.
pub(crate) type Deferred = std::rc::Rc<std::collections::BTreeSet<String>>;

/// The longest value a bag's read brings with it; a longer one is read when the charm asks
/// for it (`get` of its key, or every entry), so a charm reading a bag's other keys never
/// copies it. 4 KiB: a bag's usual values (addresses, credentials, a few names) are far
/// shorter, and a value of a few KiB costs less to copy than a second host call.
pub(crate) const INLINE_MAX: u32 = 4096;

/// A bag as the host gives it: its entries, less the long values that [`Deferred`] names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BagRead {
    pub entries: Entries,
    pub deferred: Deferred,
}

impl BagRead {
    /// `bag` with its values longer than `inline_max` left out, as the host gives it.
    pub(crate) fn inline(bag: impl IntoIterator<Item = (String, Option<String>)>) -> Self {
        let (mut entries, mut deferred) = (
            std::collections::BTreeMap::new(),
            std::collections::BTreeSet::new(),
        );
        for (key, value) in bag {
            match value {
                Some(value) => {
                    entries.insert(key, value);
                }
                None => {
                    deferred.insert(key);
                }
            }
        }
        BagRead {
            entries: Entries::new(entries),
            deferred: Deferred::new(deferred),
        }
    }
}

/// A relation as the host describes it, less its remote units ([`Backend::remote_units`]):
/// a hook that never lists them never copies them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationInfo {
    pub id: u32,
    pub name: String,
    pub remote_app: String,
}

/// Everything the charm may ask of the host: one method per WIT function, in SDK types.
pub(crate) trait Backend {
    fn is_leader(&mut self) -> bool;
    fn leader_get(&mut self, key: &str) -> Option<String>;
    fn leader_get_all(&mut self) -> Vec<(String, String)>;
    fn leader_set(&mut self, key: &str, value: Option<&str>) -> Result<()>;

    fn set_pod_spec(&mut self, spec: &str, k8s_resources: Option<&str>) -> Result<()>;

    fn config_get(&mut self, name: &str) -> Result<Option<ConfigValue>>;
    fn config_get_all(&mut self) -> Vec<(String, ConfigValue)>;

    fn relation_ids(&mut self, name: &str) -> Vec<u32>;
    fn relation_get(&mut self, id: u32) -> Result<RelationInfo>;
    /// A relation's remote units. Shared: the read cache hands the same list to every
    /// `Relation` of the hook, so a 10,000-unit relation's names are copied once at most.
    fn remote_units(&mut self, id: u32) -> Result<crate::RemoteUnits>;
    /// A unit's bag, its values longer than [`INLINE_MAX`] left out.
    fn unit_data(&mut self, id: u32, unit: &str) -> Result<BagRead>;
    /// An application's bag, its values longer than [`INLINE_MAX`] left out.
    fn app_data(&mut self, id: u32, app: &str) -> Result<BagRead>;
    fn unit_data_value(&mut self, id: u32, unit: &str, key: &str) -> Result<Option<String>>;
    fn app_data_value(&mut self, id: u32, app: &str, key: &str) -> Result<Option<String>>;
    fn set_unit_data(&mut self, id: u32, unit: &str, key: &str, value: Option<&str>) -> Result<()>;
    fn set_app_data(&mut self, id: u32, app: &str, key: &str, value: Option<&str>) -> Result<()>;

    fn unit_status(&mut self) -> Status;
    fn set_unit_status(&mut self, status: Status) -> Result<()>;
    fn app_status(&mut self) -> Result<Status>;
    fn set_app_status(&mut self, status: Status) -> Result<()>;
    fn set_workload_version(&mut self, version: &str);

    fn log(&mut self, level: Level, message: &str);

    fn state_get(&mut self, key: &str) -> Option<String>;
    fn state_set(&mut self, key: &str, value: Option<&str>);

    fn action_log(&mut self, message: &str);
    fn action_set_results(&mut self, results: &[(String, String)]) -> Result<()>;
    fn action_fail(&mut self, message: &str);

    fn network_get(&mut self, endpoint: &str) -> Result<Network>;
}

#[cfg(target_family = "wasm")]
mod wit_backend {
    use super::*;
    use crate::wit::juju::charm::{
        action, config, leadership, log, network, pod, relations, state, status,
    };

    /// The host, through the component's imports.
    pub(crate) struct WitBackend;

    impl Backend for WitBackend {
        fn is_leader(&mut self) -> bool {
            leadership::is_leader()
        }
        fn leader_get(&mut self, key: &str) -> Option<String> {
            leadership::leader_get(key)
        }
        fn leader_get_all(&mut self) -> Vec<(String, String)> {
            leadership::leader_get_all()
        }
        fn leader_set(&mut self, key: &str, value: Option<&str>) -> Result<()> {
            Ok(leadership::leader_set(key, value)?)
        }
        fn set_pod_spec(&mut self, spec: &str, k8s_resources: Option<&str>) -> Result<()> {
            Ok(pod::set_pod_spec(spec, k8s_resources)?)
        }
        fn config_get(&mut self, name: &str) -> Result<Option<ConfigValue>> {
            Ok(config::config_get(name)?.map(ConfigValue::from_wit))
        }
        fn config_get_all(&mut self) -> Vec<(String, ConfigValue)> {
            config::config_get_all()
                .into_iter()
                .map(|(k, v)| (k, ConfigValue::from_wit(v)))
                .collect()
        }
        fn relation_ids(&mut self, name: &str) -> Vec<u32> {
            relations::relation_ids(name)
        }
        fn relation_get(&mut self, id: u32) -> Result<RelationInfo> {
            let r = relations::relation_get_summary(id)?;
            Ok(RelationInfo {
                id: r.id,
                name: r.name,
                remote_app: r.remote_app,
            })
        }
        fn remote_units(&mut self, id: u32) -> Result<crate::RemoteUnits> {
            // Packed: one copy of the names into the charm, kept as it came.
            Ok(crate::RemoteUnits::from_packed(
                relations::relation_list_packed(id)?,
            ))
        }
        fn unit_data(&mut self, id: u32, unit: &str) -> Result<BagRead> {
            Ok(BagRead::inline(relations::unit_data_inline(
                id, unit, INLINE_MAX,
            )?))
        }
        fn app_data(&mut self, id: u32, app: &str) -> Result<BagRead> {
            Ok(BagRead::inline(relations::app_data_inline(
                id, app, INLINE_MAX,
            )?))
        }
        fn unit_data_value(&mut self, id: u32, unit: &str, key: &str) -> Result<Option<String>> {
            Ok(relations::unit_data_value(id, unit, key)?)
        }
        fn app_data_value(&mut self, id: u32, app: &str, key: &str) -> Result<Option<String>> {
            Ok(relations::app_data_value(id, app, key)?)
        }
        fn set_unit_data(
            &mut self,
            id: u32,
            unit: &str,
            key: &str,
            value: Option<&str>,
        ) -> Result<()> {
            Ok(relations::set_unit_data(id, unit, key, value)?)
        }
        fn set_app_data(
            &mut self,
            id: u32,
            app: &str,
            key: &str,
            value: Option<&str>,
        ) -> Result<()> {
            Ok(relations::set_app_data(id, app, key, value)?)
        }
        fn unit_status(&mut self) -> Status {
            Status::from_wit(status::unit_status())
        }
        fn set_unit_status(&mut self, s: Status) -> Result<()> {
            Ok(status::set_unit_status(&s.into_wit())?)
        }
        fn app_status(&mut self) -> Result<Status> {
            Ok(Status::from_wit(status::app_status()?))
        }
        fn set_app_status(&mut self, s: Status) -> Result<()> {
            Ok(status::set_app_status(&s.into_wit())?)
        }
        fn set_workload_version(&mut self, version: &str) {
            status::set_workload_version(version)
        }
        fn log(&mut self, level: Level, message: &str) {
            let level = match level {
                Level::Trace => log::Level::Trace,
                Level::Debug => log::Level::Debug,
                Level::Info => log::Level::Info,
                Level::Warning => log::Level::Warning,
                Level::Error => log::Level::Error,
            };
            log::log(level, message)
        }
        fn state_get(&mut self, key: &str) -> Option<String> {
            state::get(key)
        }
        fn state_set(&mut self, key: &str, value: Option<&str>) {
            state::set(key, value)
        }
        fn action_log(&mut self, message: &str) {
            action::log(message)
        }
        fn action_set_results(&mut self, results: &[(String, String)]) -> Result<()> {
            Ok(action::set_results(results)?)
        }
        fn action_fail(&mut self, message: &str) {
            action::fail(message)
        }
        fn network_get(&mut self, endpoint: &str) -> Result<Network> {
            let info = network::network_get(endpoint)?;
            Ok(Network {
                bind_addresses: info.bind_addresses,
                ingress_addresses: info.ingress_addresses,
                egress_subnets: info.egress_subnets,
            })
        }
    }
}

thread_local! {
    /// How many writes to the model this thread has made: a memo computed before the last
    /// write may be stale (see [`crate::Model::memo`]).
    static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, a write to the model (a bag, leader data, stored state, a status, the pod
/// spec): every memo computed before it is stale.
pub(crate) fn write<T>(f: impl FnOnce(&mut dyn Backend) -> T) -> T {
    WRITES.with(|w| w.set(w.get() + 1));
    with(f)
}

/// How many writes to the model this thread has made.
pub(crate) fn writes() -> u64 {
    WRITES.with(std::cell::Cell::get)
}

#[cfg(target_family = "wasm")]
thread_local! {
    /// The host, behind the hook's read cache. A charm's instance runs one thread.
    static HOST: std::cell::RefCell<cache::Cached<wit_backend::WitBackend>> =
        const { std::cell::RefCell::new(cache::Cached::new(wit_backend::WitBackend)) };
}

/// Runs `f` with the backend answering this hook.
#[cfg(target_family = "wasm")]
pub(crate) fn with<T>(f: impl FnOnce(&mut dyn Backend) -> T) -> T {
    HOST.with(|host| f(&mut *host.borrow_mut()))
}

/// A hook starts: nothing read before it holds (an instance runs one hook, but the cache
/// must not depend on that), and whether the unit leads is known already (the hook's
/// context says, and it holds for the whole hook).
#[cfg(target_family = "wasm")]
pub(crate) fn begin_hook(leader: bool) {
    HOST.with(|host| host.borrow_mut().begin(leader));
}

#[cfg(not(target_family = "wasm"))]
thread_local! {
    static NATIVE: std::cell::RefCell<Option<Box<dyn Backend>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the backend answering this hook.
///
/// # Panics
///
/// Natively, outside a hook run by [`crate::testing`]: there is no host to answer.
#[cfg(not(target_family = "wasm"))]
pub(crate) fn with<T>(f: impl FnOnce(&mut dyn Backend) -> T) -> T {
    NATIVE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let backend = slot.as_deref_mut().expect(
            "charm_sdk: no host to answer this call; natively, run the hook with \
             charm_sdk::testing::Context",
        );
        f(backend)
    })
}

/// Installs `backend` on this thread for the duration of `f`, even if `f` unwinds.
#[cfg(not(target_family = "wasm"))]
pub(crate) fn install<T>(backend: Box<dyn Backend>, f: impl FnOnce() -> T) -> T {
    /// Takes the backend out again however `f` ends, so the thread is left clean.
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            NATIVE.with(|cell| cell.borrow_mut().take());
        }
    }
    NATIVE.with(|cell| {
        let previous = cell.borrow_mut().replace(backend);
        assert!(
            previous.is_none(),
            "charm_sdk::testing: a hook is already running on this thread"
        );
    });
    let _guard = Guard;
    f()
}
