//! The native stand-in for the host during one hook: it answers from the arranged state,
//! applies the host's rules (the model core's, [`charm_model`]), and buffers the writes, as
//! `host/src/imports/` does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use charm_model::PodSpecWrite;
use charm_model::access::{self, AccessError, Side};
use charm_model::podspec::{self, PodSpecError};
use charm_model::{BagWrites, StatusKind, apply_writes};

use super::state::{Bag, State};
use super::{ActionOutput, Faults, LogLine};
use crate::backend::{Backend, BagRead, INLINE_MAX, RelationInfo};
use crate::error::{Error, Result};
use crate::log::Level;
use crate::{ConfigValue, Metadata, Status};

/// Everything one hook wrote, applied together only if it succeeds.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    pub unit_bags: BTreeMap<u32, BagWrites>,
    pub app_bags: BTreeMap<u32, BagWrites>,
    pub leader_data: BagWrites,
    pub pod_spec: Option<PodSpecWrite>,
    pub unit_status: Option<Status>,
    pub app_status: Option<Status>,
    pub workload_version: Option<String>,
    pub stored: BagWrites,
}

impl Hook {
    /// The host's limits on what one hook writes, checked as its commit checks them.
    pub(crate) fn check_limits(&self) -> std::result::Result<(), charm_model::limits::LimitError> {
        use charm_model::limits::{HookBags, HookWrites, check};
        let w = &self.writes;
        check(&HookWrites::of(
            HookBags {
                unit_bags: &w.unit_bags,
                app_bags: &w.app_bags,
                leader_data: &w.leader_data,
                stored: &w.stored,
            },
            HookWrites {
                bags: Vec::new(),
                status_messages: (w.unit_status.iter().chain(&w.app_status))
                    .map(Status::message)
                    .collect(),
                workload_version: w.workload_version.as_deref(),
                pod_spec: w.pod_spec.as_ref(),
                action_results: self.action.as_ref().map(|a| &a.results),
                action_messages: (self.action.iter())
                    .flat_map(|a| a.failure.iter().chain(&a.log).map(String::as_str))
                    .collect(),
            },
        ))?;
        let state = &self.snapshot;
        let relation = |id: &u32| state.relations.iter().find(|r| r.id == *id);
        let unit_bags = w
            .unit_bags
            .iter()
            .map(|(id, writes)| (relation(id).map(|r| &r.local_unit_data), writes));
        let app_bags = w
            .app_bags
            .iter()
            .map(|(id, writes)| (relation(id).map(|r| &r.local_app_data), writes));
        charm_model::limits::written_bags(
            unit_bags
                .chain(app_bags)
                .chain([(Some(&state.leader_data), &w.leader_data)]),
            (&state.stored, &w.stored),
        )
    }
}

/// The payload with which the stand-in stops a hook, as the host's epoch deadline does.
pub(crate) struct Interrupted;

/// One hook's view and buffer.
pub(crate) struct Hook {
    pub model: String,
    pub unit: String,
    pub app: String,
    pub metadata: Metadata,
    pub snapshot: State,
    pub faults: Faults,
    pub writes: Writes,
    pub logs: Vec<LogLine>,
    pub action: Option<ActionOutput>,
    pub calls: u32,
    pub is_leader_answers: Vec<bool>,
    pub leadership_refusals: u32,
}

pub(crate) fn overlay(base: &Bag, writes: Option<&BagWrites>) -> Bag {
    let mut bag = base.clone();
    if let Some(writes) = writes {
        apply_writes(&mut bag, writes);
    }
    bag
}

/// A refusal by the model's access rules, as the charm sees it.
fn refused(e: AccessError) -> Error {
    match e {
        AccessError::NotLeader => Error::NotLeader,
        AccessError::RelationNotFound(id) => Error::RelationNotFound(id),
        AccessError::PermissionDenied(why) => Error::PermissionDenied(why),
        AccessError::InvalidArgument(why) => Error::InvalidArgument(why),
    }
}

/// The model's kind of a charm's status.
pub(super) fn status_kind(status: &Status) -> StatusKind {
    match status {
        Status::Unknown => StatusKind::Unknown,
        Status::Active(_) => StatusKind::Active,
        Status::Maintenance(_) => StatusKind::Maintenance,
        Status::Waiting(_) => StatusKind::Waiting,
        Status::Blocked(_) => StatusKind::Blocked,
        Status::Error(_) => StatusKind::Error,
    }
}

pub(super) fn to_model_type(kind: crate::OptionType) -> charm_model::OptionType {
    match kind {
        crate::OptionType::String => charm_model::OptionType::String,
        crate::OptionType::Int => charm_model::OptionType::Int,
        crate::OptionType::Float => charm_model::OptionType::Float,
        crate::OptionType::Boolean => charm_model::OptionType::Boolean,
    }
}

pub(super) fn to_model(value: &ConfigValue) -> charm_model::ConfigValue {
    match value {
        ConfigValue::String(s) => charm_model::ConfigValue::String(s.clone()),
        ConfigValue::Int(i) => charm_model::ConfigValue::Int(*i),
        ConfigValue::Float(f) => charm_model::ConfigValue::Float(*f),
        ConfigValue::Boolean(b) => charm_model::ConfigValue::Boolean(*b),
    }
}

/// The charm's metadata as the host reads it from the component.
pub(super) fn to_model_metadata(metadata: &Metadata) -> charm_model::CharmMetadata {
    charm_model::CharmMetadata {
        name: metadata.name.clone(),
        summary: metadata.summary.clone(),
        relations: metadata
            .relations
            .iter()
            .map(|e| charm_model::EndpointMeta {
                name: e.name.clone(),
                role: match e.role {
                    crate::RelationRole::Provides => charm_model::RelationRole::Provides,
                    crate::RelationRole::Requires => charm_model::RelationRole::Requires,
                    crate::RelationRole::Peers => charm_model::RelationRole::Peers,
                },
                interface: e.interface.clone(),
                limit: e.limit,
            })
            .collect(),
        config: metadata
            .config
            .iter()
            .map(|o| charm_model::ConfigOptionMeta {
                name: o.name.clone(),
                kind: to_model_type(o.kind),
                default: o.default.as_ref().map(to_model),
                description: o.description.clone(),
            })
            .collect(),
        actions: metadata
            .actions
            .iter()
            .map(|a| charm_model::ActionMeta {
                name: a.name.clone(),
                description: a.description.clone(),
                params: a
                    .params
                    .iter()
                    .map(|p| charm_model::ActionParamMeta {
                        name: p.name.clone(),
                        kind: to_model_type(p.kind),
                        description: p.description.clone(),
                        default: p.default.as_ref().map(to_model),
                        required: p.required,
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(super) fn from_model(value: charm_model::ConfigValue) -> ConfigValue {
    match value {
        charm_model::ConfigValue::String(s) => ConfigValue::String(s),
        charm_model::ConfigValue::Int(i) => ConfigValue::Int(i),
        charm_model::ConfigValue::Float(f) => ConfigValue::Float(f),
        charm_model::ConfigValue::Boolean(b) => ConfigValue::Boolean(b),
    }
}

impl Hook {
    /// A hook of `unit` starting from `snapshot`, with nothing written yet.
    pub fn new(
        model: &str,
        unit: &str,
        metadata: Metadata,
        snapshot: State,
        faults: Faults,
    ) -> Self {
        Hook {
            model: model.to_string(),
            unit: unit.to_string(),
            app: crate::testing::app_of(unit).to_string(),
            metadata,
            snapshot,
            faults,
            writes: Writes::default(),
            logs: Vec::new(),
            action: None,
            calls: 0,
            is_leader_answers: Vec::new(),
            leadership_refusals: 0,
        }
    }

    /// Counts a call, and stops the hook where the test scripted an outage longer than the
    /// leadership guarantee: the host interrupts such a hook before the guarantee ends.
    fn call(&mut self) {
        self.calls += 1;
        if self.snapshot.leader
            && self
                .faults
                .lease_store_down_after
                .is_some_and(|n| self.calls > n)
        {
            std::panic::resume_unwind(Box::new(Interrupted));
        }
    }

    /// The verdict of one of the model's access rules; a leadership refusal is counted.
    fn allowed<T>(&mut self, verdict: std::result::Result<T, AccessError>) -> Result<T> {
        if matches!(verdict, Err(AccessError::NotLeader)) {
            self.leadership_refusals += 1;
        }
        verdict.map_err(refused)
    }

    fn require_leader(&mut self) -> Result<()> {
        let leader = self.snapshot.leader;
        self.allowed(access::require_leader(leader))
    }

    fn relation(&self, id: u32) -> Result<&super::Relation> {
        self.snapshot
            .relation_by_id(id)
            .ok_or(Error::RelationNotFound(id))
    }

    fn remote_app_of(&self, r: &super::Relation) -> String {
        if r.peer {
            self.app.clone()
        } else {
            r.remote_app.clone()
        }
    }

    /// The config the hook sees, by the host's rule ([`charm_model::effective_config`]).
    fn effective_config(&self) -> BTreeMap<String, ConfigValue> {
        let options: Vec<charm_model::ConfigOptionMeta> = self
            .metadata
            .config
            .iter()
            .map(|o| charm_model::ConfigOptionMeta {
                name: o.name.clone(),
                kind: to_model_type(o.kind),
                default: o.default.as_ref().map(to_model),
                description: String::new(),
            })
            .collect();
        let settings = self
            .snapshot
            .config
            .iter()
            .map(|(k, v)| (k.clone(), to_model(v)))
            .collect();
        charm_model::effective_config(&options, &settings)
            .into_iter()
            .map(|(k, v)| (k, from_model(v)))
            .collect()
    }
}

/// The [`Backend`] the harness installs: a shared handle, so the harness reads the buffer
/// back after the hook, however it ended.
pub(crate) struct HookBackend(pub Rc<RefCell<Hook>>);

impl HookBackend {
    /// `unit`'s bag in relation `id` as the hook reads it, whole, or the refusal.
    fn unit_bag(&mut self, id: u32, unit: &str) -> Result<Bag> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        let verdict = access::read_unit_bag(id, &h.unit, unit, r.remote_units.contains_key(unit));
        let side = h.allowed(verdict)?;
        let r = h.relation(id)?;
        Ok(match side {
            Side::Local => overlay(&r.local_unit_data, h.writes.unit_bags.get(&id)),
            Side::Remote => r.remote_units[unit].clone(),
        })
    }

    /// `app`'s bag in relation `id` as the hook reads it, whole, or the refusal.
    fn app_bag(&mut self, id: u32, app: &str) -> Result<Bag> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        let remote_app = h.remote_app_of(r);
        let verdict = access::read_app_bag(id, &h.app, app, &remote_app, h.snapshot.leader);
        let side = h.allowed(verdict)?;
        let r = h.relation(id)?;
        Ok(match side {
            Side::Local => overlay(&r.local_app_data, h.writes.app_bags.get(&id)),
            Side::Remote => r.remote_app_data.clone(),
        })
    }
}

/// A bag as the host gives it to a charm: its values longer than [`INLINE_MAX`] left out,
/// for the charm to ask for one by one, so a charm's tests take the same path.
fn deferring_long_values(bag: Bag) -> BagRead {
    let fits = |v: &String| u32::try_from(v.len()).is_ok_and(|n| n <= INLINE_MAX);
    BagRead::inline(bag.into_iter().map(|(k, v)| {
        let v = fits(&v).then_some(v);
        (k, v)
    }))
}

impl Backend for HookBackend {
    fn is_leader(&mut self) -> bool {
        let mut h = self.0.borrow_mut();
        h.call();
        // Pinned when the hook started, whatever the lease does meanwhile (I1).
        let answer = h.snapshot.leader;
        h.is_leader_answers.push(answer);
        answer
    }

    fn leader_get(&mut self, key: &str) -> Option<String> {
        let mut h = self.0.borrow_mut();
        h.call();
        match h.writes.leader_data.get(key) {
            Some(written) => written.clone(),
            None => h.snapshot.leader_data.get(key).cloned(),
        }
    }

    fn leader_get_all(&mut self) -> Vec<(String, String)> {
        let mut h = self.0.borrow_mut();
        h.call();
        overlay(&h.snapshot.leader_data, Some(&h.writes.leader_data))
            .into_iter()
            .collect()
    }

    fn leader_set(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        let leader = h.snapshot.leader;
        h.allowed(access::write_leader_data(key, value, leader))?;
        h.writes
            .leader_data
            .insert(key.to_string(), value.map(str::to_string));
        Ok(())
    }

    fn set_pod_spec(&mut self, spec: &str, k8s_resources: Option<&str>) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.require_leader()?;
        let write = podspec::validate(spec, k8s_resources).map_err(|e| match e {
            PodSpecError::Spec(f) => Error::InvalidPodSpec {
                field: f.field,
                reason: f.reason,
            },
            PodSpecError::K8sResources(f) => Error::InvalidK8sResources {
                field: f.field,
                reason: f.reason,
            },
        })?;
        h.writes.pod_spec = Some(write);
        Ok(())
    }

    fn config_get(&mut self, name: &str) -> Result<Option<ConfigValue>> {
        let mut h = self.0.borrow_mut();
        h.call();
        if !h.metadata.config.iter().any(|o| o.name == name) {
            return Err(Error::UnknownConfigOption(name.to_string()));
        }
        Ok(h.effective_config().remove(name))
    }

    fn config_get_all(&mut self) -> Vec<(String, ConfigValue)> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.effective_config().into_iter().collect()
    }

    fn relation_ids(&mut self, name: &str) -> Vec<u32> {
        let mut h = self.0.borrow_mut();
        h.call();
        let mut ids: Vec<u32> = h
            .snapshot
            .relations
            .iter()
            .filter(|r| r.endpoint == name)
            .map(|r| r.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn relation_get(&mut self, id: u32) -> Result<RelationInfo> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        Ok(RelationInfo {
            id,
            name: r.endpoint.clone(),
            remote_app: h.remote_app_of(r),
        })
    }

    fn remote_units(&mut self, id: u32) -> Result<crate::RemoteUnits> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        Ok(crate::RemoteUnits::from_names(r.remote_units.keys()))
    }

    fn unit_data(&mut self, id: u32, unit: &str) -> Result<BagRead> {
        Ok(deferring_long_values(self.unit_bag(id, unit)?))
    }

    fn app_data(&mut self, id: u32, app: &str) -> Result<BagRead> {
        Ok(deferring_long_values(self.app_bag(id, app)?))
    }

    fn unit_data_value(&mut self, id: u32, unit: &str, key: &str) -> Result<Option<String>> {
        Ok(self.unit_bag(id, unit)?.remove(key))
    }

    fn app_data_value(&mut self, id: u32, app: &str, key: &str) -> Result<Option<String>> {
        Ok(self.app_bag(id, app)?.remove(key))
    }

    fn set_unit_data(&mut self, id: u32, unit: &str, key: &str, value: Option<&str>) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.relation(id)?;
        let verdict = access::write_unit_bag(&h.unit, unit, key, value);
        h.allowed(verdict)?;
        h.writes
            .unit_bags
            .entry(id)
            .or_default()
            .insert(key.to_string(), value.map(str::to_string));
        Ok(())
    }

    fn set_app_data(&mut self, id: u32, app: &str, key: &str, value: Option<&str>) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.relation(id)?;
        let verdict = access::write_app_bag(&h.unit, app, key, value, h.snapshot.leader);
        h.allowed(verdict)?;
        h.writes
            .app_bags
            .entry(id)
            .or_default()
            .insert(key.to_string(), value.map(str::to_string));
        Ok(())
    }

    fn unit_status(&mut self) -> Status {
        let mut h = self.0.borrow_mut();
        h.call();
        h.writes
            .unit_status
            .clone()
            .unwrap_or_else(|| h.snapshot.unit_status.clone())
    }

    fn set_unit_status(&mut self, status: Status) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.allowed(access::set_status(status_kind(&status), status.message()))?;
        h.writes.unit_status = Some(status);
        Ok(())
    }

    fn app_status(&mut self) -> Result<Status> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.require_leader()?;
        Ok(h.writes
            .app_status
            .clone()
            .unwrap_or_else(|| h.snapshot.app_status.clone()))
    }

    fn set_app_status(&mut self, status: Status) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.require_leader()?;
        h.allowed(access::set_status(status_kind(&status), status.message()))?;
        h.writes.app_status = Some(status);
        Ok(())
    }

    fn set_workload_version(&mut self, version: &str) {
        let mut h = self.0.borrow_mut();
        h.call();
        h.writes.workload_version = Some(version.to_string());
    }

    fn log(&mut self, level: Level, message: &str) {
        let mut h = self.0.borrow_mut();
        h.call();
        h.logs.push(LogLine {
            level,
            message: message.to_string(),
        });
    }

    fn state_get(&mut self, key: &str) -> Option<String> {
        let mut h = self.0.borrow_mut();
        h.call();
        match h.writes.stored.get(key) {
            Some(written) => written.clone(),
            None => h.snapshot.stored.get(key).cloned(),
        }
    }

    fn state_set(&mut self, key: &str, value: Option<&str>) {
        let mut h = self.0.borrow_mut();
        h.call();
        h.writes
            .stored
            .insert(key.to_string(), value.map(str::to_string));
    }

    fn action_log(&mut self, message: &str) {
        let mut h = self.0.borrow_mut();
        h.call();
        h.action
            .get_or_insert_default()
            .log
            .push(message.to_string());
    }

    fn action_set_results(&mut self, results: &[(String, String)]) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.allowed(access::action_result_keys(
            results.iter().map(|(k, _)| k.as_str()),
        ))?;
        h.action
            .get_or_insert_default()
            .results
            .extend(results.iter().cloned());
        Ok(())
    }

    fn action_fail(&mut self, message: &str) {
        let mut h = self.0.borrow_mut();
        h.call();
        h.action.get_or_insert_default().failure = Some(message.to_string());
    }

    fn network_get(&mut self, endpoint: &str) -> Result<crate::Network> {
        let mut h = self.0.borrow_mut();
        h.call();
        if !h.metadata.relations.iter().any(|r| r.name == endpoint) {
            return Err(Error::InvalidArgument(format!(
                "network-get: charm {} declares no endpoint {endpoint:?}",
                h.metadata.name
            )));
        }
        let net = charm_model::network::unit_network(&h.model, &h.unit);
        Ok(crate::Network {
            bind_addresses: net.bind_addresses,
            ingress_addresses: net.ingress_addresses,
            egress_subnets: net.egress_subnets,
        })
    }
}
