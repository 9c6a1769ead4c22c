//! The hook's read cache: a host call is made once per question, and asked again only after
//! the hook wrote something that could change the answer.
//!
//! What a hook reads is fixed when it starts (the snapshot) plus its own writes, so an
//! answer stays right until the hook writes. Every write goes through here, and forgets the
//! answers it could change; the next read asks the host again. Refusals are not kept: the
//! host answers them every time.
//!
//! A host call that returns data costs far more than the data: every string it returns is
//! allocated in the charm's memory by a call back into the charm. Libraries that each read
//! what they need (an interface crate, then the charm) ask the same questions several times
//! in one hook; here they cost one host call.

use std::collections::BTreeMap;

use super::{Backend, BagRead, RelationInfo};
use crate::error::Result;
use crate::log::Level;
use crate::{ConfigValue, Network, Status};

/// Whose bag in a relation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Unit(String),
    App(String),
}

/// `B` with its answers kept for the rest of the hook.
pub(crate) struct Cached<B> {
    inner: B,
    is_leader: Option<bool>,
    leader_data: BTreeMap<String, Option<String>>,
    leader_data_all: Option<Vec<(String, String)>>,
    config: BTreeMap<String, Option<ConfigValue>>,
    config_all: Option<Vec<(String, ConfigValue)>>,
    relation_ids: BTreeMap<String, Vec<u32>>,
    relations: BTreeMap<u32, RelationInfo>,
    remote_units: BTreeMap<u32, crate::RemoteUnits>,
    bags: BTreeMap<(u32, Owner), BagRead>,
    unit_status: Option<Status>,
    app_status: Option<Status>,
    stored: BTreeMap<String, Option<String>>,
}

impl<B> Cached<B> {
    /// `inner`, with nothing known yet.
    pub(crate) const fn new(inner: B) -> Self {
        Cached {
            inner,
            is_leader: None,
            leader_data: BTreeMap::new(),
            leader_data_all: None,
            config: BTreeMap::new(),
            config_all: None,
            relation_ids: BTreeMap::new(),
            relations: BTreeMap::new(),
            remote_units: BTreeMap::new(),
            bags: BTreeMap::new(),
            unit_status: None,
            app_status: None,
            stored: BTreeMap::new(),
        }
    }

    /// A new hook starts, the unit leading in it or not: every other answer is forgotten.
    pub(crate) fn begin(&mut self, leader: bool) {
        self.clear();
        self.is_leader = Some(leader);
    }

    /// Forgets every answer: a new hook starts.
    pub(crate) fn clear(&mut self) {
        let Cached {
            inner: _,
            is_leader,
            leader_data,
            leader_data_all,
            config,
            config_all,
            relation_ids,
            relations,
            remote_units,
            bags,
            unit_status,
            app_status,
            stored,
        } = self;
        *is_leader = None;
        leader_data.clear();
        *leader_data_all = None;
        config.clear();
        *config_all = None;
        relation_ids.clear();
        relations.clear();
        remote_units.clear();
        bags.clear();
        *unit_status = None;
        *app_status = None;
        stored.clear();
    }
}

/// The answer kept under `key`, asking `ask` the first time.
fn kept<K: Ord, V: Clone>(map: &mut BTreeMap<K, V>, key: K, ask: impl FnOnce() -> V) -> V {
    map.entry(key).or_insert_with(ask).clone()
}

/// As [`kept`], for a question the host may refuse; refusals are not kept.
fn kept_unless_refused<K: Ord, V: Clone>(
    map: &mut BTreeMap<K, V>,
    key: K,
    ask: impl FnOnce() -> Result<V>,
) -> Result<V> {
    if let Some(v) = map.get(&key) {
        return Ok(v.clone());
    }
    let v = ask()?;
    map.insert(key, v.clone());
    Ok(v)
}

impl<B: Backend> Backend for Cached<B> {
    fn is_leader(&mut self) -> bool {
        // Pinned for the whole hook by the host (I1): one question is enough.
        *self.is_leader.get_or_insert_with(|| self.inner.is_leader())
    }

    fn leader_get(&mut self, key: &str) -> Option<String> {
        let inner = &mut self.inner;
        kept(&mut self.leader_data, key.to_string(), || {
            inner.leader_get(key)
        })
    }

    fn leader_get_all(&mut self) -> Vec<(String, String)> {
        self.leader_data_all
            .get_or_insert_with(|| self.inner.leader_get_all())
            .clone()
    }

    fn leader_set(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        self.leader_data.remove(key);
        self.leader_data_all = None;
        self.inner.leader_set(key, value)
    }

    fn set_pod_spec(&mut self, spec: &str, k8s_resources: Option<&str>) -> Result<()> {
        self.inner.set_pod_spec(spec, k8s_resources)
    }

    fn config_get(&mut self, name: &str) -> Result<Option<ConfigValue>> {
        let inner = &mut self.inner;
        kept_unless_refused(&mut self.config, name.to_string(), || {
            inner.config_get(name)
        })
    }

    fn config_get_all(&mut self) -> Vec<(String, ConfigValue)> {
        self.config_all
            .get_or_insert_with(|| self.inner.config_get_all())
            .clone()
    }

    fn relation_ids(&mut self, name: &str) -> Vec<u32> {
        let inner = &mut self.inner;
        kept(&mut self.relation_ids, name.to_string(), || {
            inner.relation_ids(name)
        })
    }

    fn relation_get(&mut self, id: u32) -> Result<RelationInfo> {
        let inner = &mut self.inner;
        kept_unless_refused(&mut self.relations, id, || inner.relation_get(id))
    }

    fn remote_units(&mut self, id: u32) -> Result<crate::RemoteUnits> {
        let inner = &mut self.inner;
        kept_unless_refused(&mut self.remote_units, id, || inner.remote_units(id))
    }

    fn unit_data(&mut self, id: u32, unit: &str) -> Result<BagRead> {
        let inner = &mut self.inner;
        kept_unless_refused(&mut self.bags, (id, Owner::Unit(unit.to_string())), || {
            inner.unit_data(id, unit)
        })
    }

    fn app_data(&mut self, id: u32, app: &str) -> Result<BagRead> {
        let inner = &mut self.inner;
        kept_unless_refused(&mut self.bags, (id, Owner::App(app.to_string())), || {
            inner.app_data(id, app)
        })
    }

    // A long value is asked for by the bag that wants it, which keeps it: not kept here
    // too, which would copy it twice.
    fn unit_data_value(&mut self, id: u32, unit: &str, key: &str) -> Result<Option<String>> {
        self.inner.unit_data_value(id, unit, key)
    }

    fn app_data_value(&mut self, id: u32, app: &str, key: &str) -> Result<Option<String>> {
        self.inner.app_data_value(id, app, key)
    }

    fn set_unit_data(&mut self, id: u32, unit: &str, key: &str, value: Option<&str>) -> Result<()> {
        self.bags.remove(&(id, Owner::Unit(unit.to_string())));
        self.inner.set_unit_data(id, unit, key, value)
    }

    fn set_app_data(&mut self, id: u32, app: &str, key: &str, value: Option<&str>) -> Result<()> {
        self.bags.remove(&(id, Owner::App(app.to_string())));
        self.inner.set_app_data(id, app, key, value)
    }

    fn unit_status(&mut self) -> Status {
        self.unit_status
            .get_or_insert_with(|| self.inner.unit_status())
            .clone()
    }

    fn set_unit_status(&mut self, status: Status) -> Result<()> {
        self.unit_status = None;
        self.inner.set_unit_status(status)
    }

    fn app_status(&mut self) -> Result<Status> {
        if let Some(status) = &self.app_status {
            return Ok(status.clone());
        }
        let status = self.inner.app_status()?;
        self.app_status = Some(status.clone());
        Ok(status)
    }

    fn set_app_status(&mut self, status: Status) -> Result<()> {
        self.app_status = None;
        self.inner.set_app_status(status)
    }

    fn set_workload_version(&mut self, version: &str) {
        self.inner.set_workload_version(version)
    }

    fn log(&mut self, level: Level, message: &str) {
        self.inner.log(level, message)
    }

    fn state_get(&mut self, key: &str) -> Option<String> {
        let inner = &mut self.inner;
        kept(&mut self.stored, key.to_string(), || inner.state_get(key))
    }

    fn state_set(&mut self, key: &str, value: Option<&str>) {
        self.stored.remove(key);
        self.inner.state_set(key, value)
    }

    fn action_log(&mut self, message: &str) {
        self.inner.action_log(message)
    }

    fn action_set_results(&mut self, results: &[(String, String)]) -> Result<()> {
        self.inner.action_set_results(results)
    }

    fn action_fail(&mut self, message: &str) {
        self.inner.action_fail(message)
    }

    fn network_get(&mut self, endpoint: &str) -> Result<Network> {
        // Asked once or twice in a hook, if at all: not worth a cache.
        self.inner.network_get(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;
    use crate::Metadata;
    use crate::testing::host::{Hook, HookBackend};
    use crate::testing::{Faults, Relation, State};

    /// A question or a write, with arguments from small pools so that reads meet writes.
    #[derive(Debug, Clone)]
    enum Op {
        IsLeader,
        LeaderGet(&'static str),
        LeaderGetAll,
        LeaderSet(&'static str, Option<&'static str>),
        ConfigGet(&'static str),
        ConfigGetAll,
        RelationIds(&'static str),
        RelationGet(u32),
        RemoteUnits(u32),
        UnitData(u32, &'static str),
        AppData(u32, &'static str),
        UnitDataValue(u32, &'static str, &'static str),
        AppDataValue(u32, &'static str, &'static str),
        SetUnitData(u32, &'static str, &'static str, Option<&'static str>),
        SetAppData(u32, &'static str, &'static str, Option<&'static str>),
        UnitStatus,
        SetUnitStatus(&'static str),
        AppStatus,
        SetAppStatus(&'static str),
        StateGet(&'static str),
        StateSet(&'static str, Option<&'static str>),
    }

    const KEYS: &[&str] = &["a", "a", "b", ""];
    const VALUES: &[Option<&str>] = &[Some("1"), Some("2"), None, Some(LONG)];
    /// Stands for a value longer than [`super::super::INLINE_MAX`], which a bag's read
    /// leaves out ([`long`] makes it).
    const LONG: &str = "long";

    /// The value `v` stands for.
    fn long(v: Option<&str>) -> Option<String> {
        v.map(|v| match v {
            LONG => "x".repeat(super::super::INLINE_MAX as usize + 1),
            v => v.to_string(),
        })
    }
    const UNITS: &[&str] = &["app/0", "app/0", "db/0", "app/1", "db/1"];
    const APPS: &[&str] = &["app", "app", "db", "other"];

    fn op() -> impl Strategy<Value = Op> {
        let key = proptest::sample::select(KEYS);
        let value = proptest::sample::select(VALUES);
        let id = proptest::sample::select(&[1u32, 1, 2, 3][..]);
        let unit = proptest::sample::select(UNITS);
        let app = proptest::sample::select(APPS);
        let message = proptest::sample::select(&["x", "y"][..]);
        prop_oneof![
            Just(Op::IsLeader),
            key.clone().prop_map(Op::LeaderGet),
            Just(Op::LeaderGetAll),
            (key.clone(), value.clone()).prop_map(|(k, v)| Op::LeaderSet(k, v)),
            proptest::sample::select(&["name", "n", "undeclared"][..]).prop_map(Op::ConfigGet),
            Just(Op::ConfigGetAll),
            proptest::sample::select(&["db", "peers", "none"][..]).prop_map(Op::RelationIds),
            id.clone().prop_map(Op::RelationGet),
            id.clone().prop_map(Op::RemoteUnits),
            (id.clone(), unit.clone()).prop_map(|(i, u)| Op::UnitData(i, u)),
            (id.clone(), app.clone()).prop_map(|(i, a)| Op::AppData(i, a)),
            (id.clone(), unit.clone(), key.clone())
                .prop_map(|(i, u, k)| Op::UnitDataValue(i, u, k)),
            (id.clone(), app.clone(), key.clone()).prop_map(|(i, a, k)| Op::AppDataValue(i, a, k)),
            (id.clone(), unit, key.clone(), value.clone())
                .prop_map(|(i, u, k, v)| Op::SetUnitData(i, u, k, v)),
            (id, app, key.clone(), value.clone())
                .prop_map(|(i, a, k, v)| Op::SetAppData(i, a, k, v)),
            Just(Op::UnitStatus),
            message.clone().prop_map(Op::SetUnitStatus),
            Just(Op::AppStatus),
            message.prop_map(Op::SetAppStatus),
            key.clone().prop_map(Op::StateGet),
            (key, value).prop_map(|(k, v)| Op::StateSet(k, v)),
        ]
    }

    /// What `op` answers, as text to compare.
    fn apply(b: &mut dyn Backend, op: &Op) -> String {
        match op {
            Op::IsLeader => format!("{:?}", b.is_leader()),
            Op::LeaderGet(k) => format!("{:?}", b.leader_get(k)),
            Op::LeaderGetAll => format!("{:?}", b.leader_get_all()),
            Op::LeaderSet(k, v) => format!("{:?}", b.leader_set(k, *v)),
            Op::ConfigGet(n) => format!("{:?}", b.config_get(n)),
            Op::ConfigGetAll => format!("{:?}", b.config_get_all()),
            Op::RelationIds(n) => format!("{:?}", b.relation_ids(n)),
            Op::RelationGet(id) => format!("{:?}", b.relation_get(*id)),
            Op::RemoteUnits(id) => format!("{:?}", b.remote_units(*id).map(|u| u.to_vec())),
            Op::UnitData(id, u) => format!("{:?}", b.unit_data(*id, u)),
            Op::AppData(id, a) => format!("{:?}", b.app_data(*id, a)),
            Op::UnitDataValue(id, u, k) => format!("{:?}", b.unit_data_value(*id, u, k)),
            Op::AppDataValue(id, a, k) => format!("{:?}", b.app_data_value(*id, a, k)),
            Op::SetUnitData(id, u, k, v) => {
                format!("{:?}", b.set_unit_data(*id, u, k, long(*v).as_deref()))
            }
            Op::SetAppData(id, a, k, v) => {
                format!("{:?}", b.set_app_data(*id, a, k, long(*v).as_deref()))
            }
            Op::UnitStatus => format!("{:?}", b.unit_status()),
            Op::SetUnitStatus(m) => {
                format!("{:?}", b.set_unit_status(Status::active(*m)))
            }
            Op::AppStatus => format!("{:?}", b.app_status()),
            Op::SetAppStatus(m) => {
                format!("{:?}", b.set_app_status(Status::blocked(*m)))
            }
            Op::StateGet(k) => format!("{:?}", b.state_get(k)),
            Op::StateSet(k, v) => {
                b.state_set(k, *v);
                String::new()
            }
        }
    }

    /// The harness's stand-in for the host, over a state with a relation, a peer relation,
    /// config, leader data and stored state.
    fn host(leader: bool) -> Rc<RefCell<Hook>> {
        let metadata = Metadata::new("app")
            .requires("db", "pgsql")
            .peers("peers", "app-peers")
            .string_option("name", Some("x"), "")
            .int_option("n", None, "");
        let state = State::default()
            .leader(leader)
            .config("n", 3)
            .leader_data([("a", "0")])
            .stored("a", &"s")
            .relation(
                Relation::new(1, "db", "db")
                    .remote_unit("db/0", [("a", "r")])
                    .remote_app_data([("a", long(Some(LONG)).unwrap().as_str()), ("b", "r")])
                    .local_unit_data([("a", "l")])
                    .local_app_data([("a", "l")]),
            )
            .relation(Relation::peer(2, "peers").remote_unit("app/1", [("b", "p")]));
        Rc::new(RefCell::new(Hook::new(
            "test",
            "app/0",
            metadata,
            state,
            Faults::default(),
        )))
    }

    proptest! {
        /// Whatever a hook asks and writes, in any order, the cache answers as the host
        /// does, the host receives the same writes, and it is asked no more often.
        #[test]
        fn answers_as_the_host_does(leader: bool, ops in proptest::collection::vec(op(), 0..100)) {
            let (plain, behind) = (host(leader), host(leader));
            let mut direct = HookBackend(plain.clone());
            let mut cached = Cached::new(HookBackend(behind.clone()));
            for op in &ops {
                prop_assert_eq!(apply(&mut direct, op), apply(&mut cached, op), "{:?}", op);
            }
            let (plain, behind) = (plain.borrow(), behind.borrow());
            prop_assert_eq!(format!("{:?}", plain.writes), format!("{:?}", behind.writes));
            prop_assert!(behind.calls <= plain.calls);
        }
    }

    #[test]
    fn a_relations_units_are_asked_for_when_listed_and_once() {
        let hook = host(true);
        let info = HookBackend(hook.clone()).relation_get(1).unwrap();
        let before = hook.borrow().calls;
        let backend = Box::new(Cached::new(HookBackend(hook.clone())));
        crate::backend::install(backend, || {
            let relation = crate::Relation::new(info, "app/0".into(), "app".into());
            let copy = relation.clone();
            assert_eq!((relation.id(), relation.name()), (1, "db"));
            assert!(format!("{relation:?}").contains("remote_units: None"));
            assert_eq!(relation, copy);
            assert_eq!(
                hook.borrow().calls,
                before,
                "looked at, not listed: no call"
            );
            assert_eq!(relation.remote_units().to_vec(), ["db/0"]);
            assert_eq!(copy.remote_units().to_vec(), ["db/0"]);
            assert_eq!(hook.borrow().calls, before + 1, "listed twice, asked once");
        });
    }

    #[test]
    fn a_repeated_question_is_asked_once_and_again_after_a_write() {
        let hook = host(true);
        let mut cached = Cached::new(HookBackend(hook.clone()));
        for _ in 0..3 {
            cached.unit_data(1, "db/0").unwrap();
            cached.leader_get("a");
            assert!(cached.is_leader());
        }
        assert_eq!(hook.borrow().calls, 3);
        cached.leader_set("a", Some("9")).unwrap();
        assert_eq!(cached.leader_get("a").as_deref(), Some("9"));
        assert_eq!(hook.borrow().calls, 5);
        cached.clear();
        cached.unit_data(1, "db/0").unwrap();
        assert_eq!(hook.borrow().calls, 6, "a new hook asks again");
        // The hook's context says whether the unit leads: nobody asks.
        for leader in [false, true] {
            cached.begin(leader);
            assert_eq!(cached.is_leader(), leader);
        }
        assert_eq!(hook.borrow().calls, 6, "is_leader asked the host");
    }
}
