//! The frozen `juju:charm@0.1.0` imports, each delegating to its current counterpart: one
//! implementation of the model's rules serves every contract version. Only the types are
//! converted; 0.2.0 changed no import, so every call maps one to one.

use crate::bindings::juju::charm as current;
use crate::bindings::types as now;
use crate::bindings::v0_1::juju::charm as old;
use crate::bindings::v0_1::types as then;
use crate::context::HookContext;

fn error(e: now::Error) -> then::Error {
    let field = |f: now::FieldError| then::FieldError {
        field: f.field,
        reason: f.reason,
    };
    match e {
        now::Error::NotLeader => then::Error::NotLeader,
        now::Error::InvalidPodSpec(f) => then::Error::InvalidPodSpec(field(f)),
        now::Error::InvalidK8sResources(f) => then::Error::InvalidK8sResources(field(f)),
        now::Error::RelationNotFound(id) => then::Error::RelationNotFound(id),
        now::Error::PermissionDenied(why) => then::Error::PermissionDenied(why),
        now::Error::UnknownConfigOption(name) => then::Error::UnknownConfigOption(name),
        now::Error::InvalidArgument(why) => then::Error::InvalidArgument(why),
    }
}

fn config_value(v: now::ConfigValue) -> then::ConfigValue {
    match v {
        now::ConfigValue::String(s) => then::ConfigValue::String(s),
        now::ConfigValue::Int(i) => then::ConfigValue::Int(i),
        now::ConfigValue::Float(f) => then::ConfigValue::Float(f),
        now::ConfigValue::Boolean(b) => then::ConfigValue::Boolean(b),
    }
}

fn status_to_old(s: now::Status) -> then::Status {
    let kind = match s.kind {
        now::StatusKind::Unknown => then::StatusKind::Unknown,
        now::StatusKind::Active => then::StatusKind::Active,
        now::StatusKind::Maintenance => then::StatusKind::Maintenance,
        now::StatusKind::Waiting => then::StatusKind::Waiting,
        now::StatusKind::Blocked => then::StatusKind::Blocked,
        now::StatusKind::Error => then::StatusKind::Error,
    };
    then::Status {
        kind,
        message: s.message,
    }
}

fn status_to_current(s: then::Status) -> now::Status {
    let kind = match s.kind {
        then::StatusKind::Unknown => now::StatusKind::Unknown,
        then::StatusKind::Active => now::StatusKind::Active,
        then::StatusKind::Maintenance => now::StatusKind::Maintenance,
        then::StatusKind::Waiting => now::StatusKind::Waiting,
        then::StatusKind::Blocked => now::StatusKind::Blocked,
        then::StatusKind::Error => now::StatusKind::Error,
    };
    now::Status {
        kind,
        message: s.message,
    }
}

impl then::Host for HookContext {}

impl old::leadership::Host for HookContext {
    fn is_leader(&mut self) -> bool {
        current::leadership::Host::is_leader(self)
    }

    fn leader_get(&mut self, key: String) -> Option<String> {
        current::leadership::Host::leader_get(self, key)
    }

    fn leader_get_all(&mut self) -> Vec<(String, String)> {
        current::leadership::Host::leader_get_all(self)
    }

    fn leader_set(&mut self, key: String, value: Option<String>) -> Result<(), then::Error> {
        current::leadership::Host::leader_set(self, key, value).map_err(error)
    }
}

impl old::pod::Host for HookContext {
    fn set_pod_spec(
        &mut self,
        spec: String,
        k8s_resources: Option<String>,
    ) -> Result<(), then::Error> {
        current::pod::Host::set_pod_spec(self, spec, k8s_resources).map_err(error)
    }
}

impl old::config::Host for HookContext {
    fn config_get(&mut self, name: String) -> Result<Option<then::ConfigValue>, then::Error> {
        current::config::Host::config_get(self, name)
            .map(|v| v.map(config_value))
            .map_err(error)
    }

    fn config_get_all(&mut self) -> Vec<(String, then::ConfigValue)> {
        current::config::Host::config_get_all(self)
            .into_iter()
            .map(|(k, v)| (k, config_value(v)))
            .collect()
    }
}

impl old::relations::Host for HookContext {
    fn relation_ids(&mut self, name: String) -> Vec<u32> {
        current::relations::Host::relation_ids(self, name)
    }

    fn relation_get(&mut self, id: u32) -> Result<old::relations::Relation, then::Error> {
        let r = current::relations::Host::relation_get(self, id).map_err(error)?;
        Ok(old::relations::Relation {
            id: r.id,
            name: r.name,
            remote_app: r.remote_app,
            remote_units: r.remote_units,
        })
    }

    fn unit_data(&mut self, id: u32, unit: String) -> Result<Vec<(String, String)>, then::Error> {
        current::relations::Host::unit_data(self, id, unit).map_err(error)
    }

    fn app_data(&mut self, id: u32, app: String) -> Result<Vec<(String, String)>, then::Error> {
        current::relations::Host::app_data(self, id, app).map_err(error)
    }

    fn set_unit_data(
        &mut self,
        id: u32,
        unit: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), then::Error> {
        current::relations::Host::set_unit_data(self, id, unit, key, value).map_err(error)
    }

    fn set_app_data(
        &mut self,
        id: u32,
        app: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), then::Error> {
        current::relations::Host::set_app_data(self, id, app, key, value).map_err(error)
    }
}

impl old::status::Host for HookContext {
    fn unit_status(&mut self) -> then::Status {
        status_to_old(current::status::Host::unit_status(self))
    }

    fn set_unit_status(&mut self, status: then::Status) -> Result<(), then::Error> {
        current::status::Host::set_unit_status(self, status_to_current(status)).map_err(error)
    }

    fn app_status(&mut self) -> Result<then::Status, then::Error> {
        current::status::Host::app_status(self)
            .map(status_to_old)
            .map_err(error)
    }

    fn set_app_status(&mut self, status: then::Status) -> Result<(), then::Error> {
        current::status::Host::set_app_status(self, status_to_current(status)).map_err(error)
    }

    fn set_workload_version(&mut self, version: String) {
        current::status::Host::set_workload_version(self, version)
    }
}

impl old::log::Host for HookContext {
    fn log(&mut self, level: old::log::Level, message: String) {
        let level = match level {
            old::log::Level::Trace => current::log::Level::Trace,
            old::log::Level::Debug => current::log::Level::Debug,
            old::log::Level::Info => current::log::Level::Info,
            old::log::Level::Warning => current::log::Level::Warning,
            old::log::Level::Error => current::log::Level::Error,
        };
        current::log::Host::log(self, level, message)
    }
}

impl old::state::Host for HookContext {
    fn get(&mut self, key: String) -> Option<String> {
        current::state::Host::get(self, key)
    }

    fn set(&mut self, key: String, value: Option<String>) {
        current::state::Host::set(self, key, value)
    }
}

impl old::action::Host for HookContext {
    fn set_results(&mut self, results: Vec<(String, String)>) -> Result<(), then::Error> {
        current::action::Host::set_results(self, results).map_err(error)
    }

    fn fail(&mut self, message: String) {
        current::action::Host::fail(self, message)
    }

    fn log(&mut self, message: String) {
        current::action::Host::log(self, message)
    }
}
