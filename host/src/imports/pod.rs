use std::sync::Arc;

use crate::bindings::juju::charm::pod::Host;
use crate::bindings::types::{Error, FieldError};
use crate::context::HookContext;
use crate::podspec::{self, PodSpecError};

impl Host for HookContext {
    fn set_pod_spec(&mut self, spec: String, k8s_resources: Option<String>) -> Result<(), Error> {
        super::require_leader(self)?;
        let write = match &self.pod_specs {
            Some(last) => last.validate(&self.snapshot.app, &spec, k8s_resources.as_deref()),
            None => podspec::validate(&spec, k8s_resources.as_deref()).map(Arc::new),
        };
        let write = write.map_err(|e| match e {
            PodSpecError::Spec(f) => Error::InvalidPodSpec(FieldError {
                field: f.field,
                reason: f.reason,
            }),
            PodSpecError::K8sResources(f) => Error::InvalidK8sResources(FieldError {
                field: f.field,
                reason: f.reason,
            }),
        })?;
        self.changes.pod_spec = Some(write);
        Ok(())
    }
}
