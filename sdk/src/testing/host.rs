//! The native stand-in for the host during one hook: it answers from the arranged state,
//! applies the host's access rules, and buffers the writes, as `host/src/imports/` does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::podspec::{self, PodSpecError};
use super::state::{Bag, State};
use super::{ActionOutput, Faults, LogLine};
use crate::backend::{Backend, Entries, RelationInfo};
use crate::error::{Error, Result};
use crate::log::Level;
use crate::{ConfigValue, Metadata, Status};

/// Writes to one bag: `None` removes the key.
pub(crate) type BagWrites = BTreeMap<String, Option<String>>;

/// Everything one hook wrote, applied together only if it succeeds.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    pub unit_bags: BTreeMap<u32, BagWrites>,
    pub app_bags: BTreeMap<u32, BagWrites>,
    pub leader_data: BagWrites,
    pub pod_spec: Option<podspec::PodSpecWrite>,
    pub unit_status: Option<Status>,
    pub app_status: Option<Status>,
    pub workload_version: Option<String>,
    pub stored: BagWrites,
}

/// The payload with which the stand-in stops a hook, as the host's epoch deadline does.
pub(crate) struct Interrupted;

/// One hook's view and buffer.
pub(crate) struct Hook {
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
        apply(&mut bag, writes);
    }
    bag
}

pub(crate) fn apply(bag: &mut Bag, writes: &BagWrites) {
    for (k, v) in writes {
        match v {
            Some(v) => bag.insert(k.clone(), v.clone()),
            None => bag.remove(k),
        };
    }
}

/// Juju's rule for action result keys, as the host applies it.
fn valid_result_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl Hook {
    /// A hook of `unit` starting from `snapshot`, with nothing written yet.
    pub fn new(unit: &str, metadata: Metadata, snapshot: State, faults: Faults) -> Self {
        Hook {
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

    fn require_leader(&mut self) -> Result<()> {
        if self.snapshot.leader {
            Ok(())
        } else {
            self.leadership_refusals += 1;
            Err(Error::NotLeader)
        }
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

    fn effective_config(&self) -> BTreeMap<String, ConfigValue> {
        let mut config: BTreeMap<String, ConfigValue> = self
            .metadata
            .config
            .iter()
            .filter_map(|o| Some((o.name.clone(), o.default.clone()?)))
            .collect();
        for (name, value) in &self.snapshot.config {
            let kind = self.metadata.config.iter().find(|o| &o.name == name);
            let value = match kind {
                Some(o) => value
                    .clone()
                    .coerce(o.kind)
                    .unwrap_or_else(|| value.clone()),
                None => value.clone(),
            };
            config.insert(name.clone(), value);
        }
        config
    }
}

/// The [`Backend`] the harness installs: a shared handle, so the harness reads the buffer
/// back after the hook, however it ended.
pub(crate) struct HookBackend(pub Rc<RefCell<Hook>>);

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
        h.require_leader()?;
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a leader setting's key must not be empty".into(),
            ));
        }
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
            remote_units: r.remote_units.keys().cloned().collect(),
        })
    }

    fn unit_data(&mut self, id: u32, unit: &str) -> Result<Entries> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        if unit == h.unit {
            let bag = overlay(&r.local_unit_data, h.writes.unit_bags.get(&id));
            return Ok(Entries::new(bag));
        }
        match r.remote_units.get(unit) {
            Some(bag) => Ok(Entries::new(bag.clone())),
            None => Err(Error::PermissionDenied(format!(
                "unit {unit} is not in relation {id}"
            ))),
        }
    }

    fn app_data(&mut self, id: u32, app: &str) -> Result<Entries> {
        let mut h = self.0.borrow_mut();
        h.call();
        let r = h.relation(id)?;
        if app == h.app {
            // As in Juju: only the leader reads its own application's bag, except on peers.
            if !r.peer && !h.snapshot.leader {
                return Err(Error::PermissionDenied(format!(
                    "only the leader of {app} may read its application bag in relation {id}"
                )));
            }
            let bag = overlay(&r.local_app_data, h.writes.app_bags.get(&id));
            return Ok(Entries::new(bag));
        }
        if app != r.remote_app {
            return Err(Error::PermissionDenied(format!(
                "application {app} is not in relation {id}"
            )));
        }
        Ok(Entries::new(r.remote_app_data.clone()))
    }

    fn set_unit_data(&mut self, id: u32, unit: &str, key: &str, value: Option<&str>) -> Result<()> {
        let mut h = self.0.borrow_mut();
        h.call();
        h.relation(id)?;
        if unit != h.unit {
            return Err(Error::PermissionDenied(format!(
                "{} may write only its own unit bag, not {unit}'s",
                h.unit
            )));
        }
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a relation setting's key must not be empty".into(),
            ));
        }
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
        if app != h.app {
            return Err(Error::PermissionDenied(format!(
                "{} may write only its own application's bag, not {app}'s",
                h.unit
            )));
        }
        h.require_leader()?;
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a relation setting's key must not be empty".into(),
            ));
        }
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
        refuse_error_status(&status)?;
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
        refuse_error_status(&status)?;
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
        if let Some((key, _)) = results.iter().find(|(k, _)| !valid_result_key(k)) {
            return Err(Error::InvalidArgument(format!(
                "action result key {key:?}: use lowercase letters, digits and '-', starting with a letter"
            )));
        }
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
}

/// As in Juju, error is the host's to set, when a hook fails.
fn refuse_error_status(status: &Status) -> Result<()> {
    match status {
        Status::Error(_) => Err(Error::InvalidArgument(
            "a charm cannot set an error status".into(),
        )),
        _ => Ok(()),
    }
}
