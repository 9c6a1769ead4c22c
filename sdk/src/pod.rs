//! Kubernetes pod specs (Juju's pod spec version 3), typed and built in Rust.
//!
//! ```
//! use charm_sdk::pod::{Container, PodSpec};
//!
//! let spec = PodSpec::new()
//!     .container(
//!         Container::new("discourse", "discourse/discourse:2.6")
//!             .port("http", 3000)
//!             .env("DISCOURSE_DB_HOST", "postgresql-0"),
//!     );
//! let json = spec.to_json();
//! assert!(json.contains(r#""imagePath":"discourse/discourse:2.6""#));
//! assert!(json.contains(r#""containerPort":3000"#));
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::wit::juju::charm::pod as host;

/// A pod spec, version 3.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSpec {
    /// Always 3.
    pub version: u32,
    /// The pod's containers; at least one.
    pub containers: Vec<Container>,
    /// A service account for the pod, as Kubernetes takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<serde_json::Value>,
    /// The application's Kubernetes service settings (annotations, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<serde_json::Value>,
    /// Config maps, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

impl Default for PodSpec {
    fn default() -> Self {
        Self::new()
    }
}

impl PodSpec {
    /// An empty version 3 spec; add at least one container.
    pub fn new() -> Self {
        PodSpec {
            version: 3,
            containers: Vec::new(),
            service_account: None,
            service: None,
            config_maps: BTreeMap::new(),
        }
    }

    /// Adds a container.
    pub fn container(mut self, container: Container) -> Self {
        self.containers.push(container);
        self
    }

    /// The spec as JSON, the form the host receives.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a pod spec always serialises")
    }
}

/// Where a container's image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageDetails {
    /// The image reference, such as `discourse/discourse:2.6`.
    pub image_path: String,
    /// The registry user, for private registries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The registry password, for private registries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// A container port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerPort {
    /// The port's name.
    pub name: String,
    /// The port number.
    pub container_port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// One container of the pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Container {
    /// The container's name, unique in the pod.
    pub name: String,
    /// Its image.
    pub image_details: ImageDetails,
    /// `Always`, `IfNotPresent` or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Its ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    /// The command, replacing the image's entry point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The command's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_config: BTreeMap<String, serde_json::Value>,
    /// Kubernetes-specific settings (probes, security context), as Kubernetes takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<serde_json::Value>,
}

impl Container {
    /// A container with this name and image.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        Container {
            name: name.into(),
            image_details: ImageDetails {
                image_path: image.into(),
                username: None,
                password: None,
            },
            image_pull_policy: None,
            ports: Vec::new(),
            command: Vec::new(),
            args: Vec::new(),
            working_dir: None,
            env_config: BTreeMap::new(),
            kubernetes: None,
        }
    }

    /// Adds a TCP port.
    pub fn port(mut self, name: impl Into<String>, port: u16) -> Self {
        self.ports.push(ContainerPort {
            name: name.into(),
            container_port: port,
            protocol: "TCP".into(),
        });
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env_config
            .insert(key.into(), serde_json::Value::String(value.into()));
        self
    }

    /// Sets the command.
    pub fn command<I: IntoIterator<Item = S>, S: Into<String>>(mut self, command: I) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }
}

/// The application's pod. Setting its spec is leader only.
#[derive(Debug, Clone, Copy)]
pub struct Pod {
    _private: (),
}

impl Pod {
    pub(crate) fn new() -> Self {
        Pod { _private: () }
    }

    /// Sets the pod spec. Leader only; validated by the host, which answers a bad spec with
    /// [`Error::InvalidPodSpec`](crate::Error::InvalidPodSpec) naming the field.
    ///
    /// ```no_run
    /// # use charm_sdk::pod::{Container, PodSpec};
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let spec = PodSpec::new().container(Container::new("app", "nginx:1.25").port("http", 80));
    /// model.pod().set_spec(&spec)?;
    /// # Ok(()) }
    /// ```
    pub fn set_spec(&self, spec: &PodSpec) -> Result<()> {
        self.set_spec_raw(&spec.to_json(), None)
    }

    /// Sets the pod spec from YAML or JSON text, with optional Kubernetes resources.
    pub fn set_spec_raw(&self, spec: &str, k8s_resources: Option<&str>) -> Result<()> {
        Ok(host::set_pod_spec(spec, k8s_resources)?)
    }
}
