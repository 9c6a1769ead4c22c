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

use crate::backend;
use crate::error::Result;

/// A pod spec, version 3.
///
/// ```
/// use charm_sdk::pod::{Container, PodSpec};
///
/// let spec = PodSpec::new()
///     .container(Container::new("web", "nginx:1.25"))
///     .config_map("web-config", [("index.html", "<h1>hello</h1>")]);
/// assert_eq!(spec.version, 3);
/// assert_eq!(spec.config_maps["web-config"]["index.html"], "<h1>hello</h1>");
/// ```
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
    ///
    /// ```
    /// assert!(charm_sdk::pod::PodSpec::new().containers.is_empty());
    /// ```
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
    ///
    /// ```
    /// use charm_sdk::pod::{Container, PodSpec};
    /// let spec = PodSpec::new().container(Container::new("a", "busybox")).container(Container::new("b", "busybox"));
    /// assert_eq!(spec.containers.len(), 2);
    /// ```
    pub fn container(mut self, container: Container) -> Self {
        self.containers.push(container);
        self
    }

    /// Adds a config map with these entries.
    ///
    /// ```
    /// let spec = charm_sdk::pod::PodSpec::new().config_map("conf", [("a.conf", "x=1")]);
    /// assert_eq!(spec.config_maps["conf"].len(), 1);
    /// ```
    pub fn config_map<K: Into<String>, V: Into<String>>(
        mut self,
        name: impl Into<String>,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let entries = entries
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.config_maps.insert(name.into(), entries);
        self
    }

    /// Sets the pod's service account, as Kubernetes takes it (`automountServiceAccountToken`,
    /// `roles`, ...).
    ///
    /// ```
    /// let spec = charm_sdk::pod::PodSpec::new()
    ///     .service_account(serde_json::json!({"automountServiceAccountToken": true}));
    /// assert!(spec.service_account.is_some());
    /// ```
    pub fn service_account(mut self, account: serde_json::Value) -> Self {
        self.service_account = Some(account);
        self
    }

    /// The spec as JSON, the form the host receives.
    ///
    /// ```
    /// let json = charm_sdk::pod::PodSpec::new().to_json();
    /// assert_eq!(json, r#"{"version":3,"containers":[]}"#);
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a pod spec always serialises")
    }
}

/// Where a container's image comes from.
///
/// ```
/// let c = charm_sdk::pod::Container::new("web", "registry.local/web:1").registry_credentials("me", "pw");
/// assert_eq!(c.image_details.username.as_deref(), Some("me"));
/// ```
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
///
/// ```
/// let c = charm_sdk::pod::Container::new("dns", "coredns").udp_port("dns", 53);
/// assert_eq!(c.ports[0].protocol, "UDP");
/// ```
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
///
/// ```
/// use charm_sdk::pod::Container;
///
/// let c = Container::new("web", "nginx:1.25")
///     .port("http", 80)
///     .env("MODE", "production")
///     .args(["--verbose"])
///     .working_dir("/srv")
///     .image_pull_policy("IfNotPresent");
/// assert_eq!(c.ports[0].container_port, 80);
/// ```
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
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx:1.25");
    /// assert_eq!(c.image_details.image_path, "nginx:1.25");
    /// ```
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
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").port("http", 80);
    /// assert_eq!(c.ports[0].protocol, "TCP");
    /// ```
    pub fn port(mut self, name: impl Into<String>, port: u16) -> Self {
        self.ports.push(ContainerPort {
            name: name.into(),
            container_port: port,
            protocol: "TCP".into(),
        });
        self
    }

    /// Adds a UDP port.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("dns", "coredns").udp_port("dns", 53);
    /// assert_eq!(c.ports[0].container_port, 53);
    /// ```
    pub fn udp_port(mut self, name: impl Into<String>, port: u16) -> Self {
        self.ports.push(ContainerPort {
            name: name.into(),
            container_port: port,
            protocol: "UDP".into(),
        });
        self
    }

    /// Sets the credentials for a private registry.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "private/web").registry_credentials("u", "p");
    /// assert_eq!(c.image_details.password.as_deref(), Some("p"));
    /// ```
    pub fn registry_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.image_details.username = Some(username.into());
        self.image_details.password = Some(password.into());
        self
    }

    /// Sets the image pull policy: `Always`, `IfNotPresent` or `Never`.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").image_pull_policy("Always");
    /// assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    /// ```
    pub fn image_pull_policy(mut self, policy: impl Into<String>) -> Self {
        self.image_pull_policy = Some(policy.into());
        self
    }

    /// Sets the command's arguments.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").args(["-g", "daemon off;"]);
    /// assert_eq!(c.args.len(), 2);
    /// ```
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the working directory.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").working_dir("/srv");
    /// assert_eq!(c.working_dir.as_deref(), Some("/srv"));
    /// ```
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets Kubernetes-specific settings (probes, security context), as Kubernetes takes them.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx")
    ///     .kubernetes(serde_json::json!({"readinessProbe": {"httpGet": {"path": "/", "port": 80}}}));
    /// assert!(c.kubernetes.is_some());
    /// ```
    pub fn kubernetes(mut self, settings: serde_json::Value) -> Self {
        self.kubernetes = Some(settings);
        self
    }

    /// Sets an environment variable.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").env("MODE", "prod");
    /// assert_eq!(c.env_config["MODE"], "prod");
    /// ```
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env_config
            .insert(key.into(), serde_json::Value::String(value.into()));
        self
    }

    /// Sets the command.
    ///
    /// ```
    /// let c = charm_sdk::pod::Container::new("web", "nginx").command(["nginx", "-t"]);
    /// assert_eq!(c.command, ["nginx", "-t"]);
    /// ```
    pub fn command<I: IntoIterator<Item = S>, S: Into<String>>(mut self, command: I) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }
}

/// The application's pod. Setting its spec is leader only.
///
/// ```no_run
/// # use charm_sdk::pod::{Container, PodSpec};
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// let pod = model.pod();
/// pod.set_spec(&PodSpec::new().container(Container::new("web", "nginx:1.25")))?;
/// # Ok(()) }
/// ```
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

    /// Sets the pod spec and the application's Kubernetes resources. Leader only.
    ///
    /// ```no_run
    /// # use charm_sdk::pod::{Container, K8sResources, PodSpec, Secret};
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let spec = PodSpec::new().container(Container::new("app", "nginx:1.25"));
    /// let resources = K8sResources::new().secret(Secret::new("app-tls").string_data("tls.crt", "..."));
    /// model.pod().set_spec_with_resources(&spec, &resources)?;
    /// # Ok(()) }
    /// ```
    pub fn set_spec_with_resources(&self, spec: &PodSpec, resources: &K8sResources) -> Result<()> {
        self.set_spec_raw(&spec.to_json(), Some(&resources.to_json()))
    }

    /// Sets the pod spec from YAML or JSON text, with optional Kubernetes resources.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// model.pod().set_spec_raw("version: 3\ncontainers: [{name: web, image: nginx}]", None)?;
    /// # Ok(()) }
    /// ```
    pub fn set_spec_raw(&self, spec: &str, k8s_resources: Option<&str>) -> Result<()> {
        backend::write(|b| b.set_pod_spec(spec, k8s_resources))
    }
}

/// The application's Kubernetes resources, set with its pod spec (Juju's
/// `kubernetesResources`): secrets, services, custom resources, pod settings, ...
///
/// ```
/// use charm_sdk::pod::{K8sResources, Secret};
///
/// let res = K8sResources::new()
///     .secret(Secret::new("db-creds").string_data("password", "s3cret"))
///     .pod(serde_json::json!({"annotations": {"team": "data"}}));
/// let json = res.to_json();
/// assert!(json.starts_with(r#"{"kubernetesResources":{"#));
/// assert!(json.contains(r#""stringData":{"password":"s3cret"}"#));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K8sResources {
    /// Custom resource definitions, as Kubernetes takes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_resource_definitions: Vec<serde_json::Value>,
    /// Custom resources, by the definition's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_resources: BTreeMap<String, Vec<serde_json::Value>>,
    /// Ingress resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress_resources: Vec<serde_json::Value>,
    /// Secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<Secret>,
    /// Extra services.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<serde_json::Value>,
    /// Extra service accounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<serde_json::Value>,
    /// Pod settings: annotations, labels, restart policy, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<serde_json::Value>,
}

/// The document the host receives: Juju nests the resources under one key.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct K8sResourcesDocument<'a> {
    kubernetes_resources: &'a K8sResources,
}

impl K8sResources {
    /// No resources yet.
    ///
    /// ```
    /// assert!(charm_sdk::pod::K8sResources::new().secrets.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a secret.
    ///
    /// ```
    /// use charm_sdk::pod::{K8sResources, Secret};
    /// let res = K8sResources::new().secret(Secret::new("a"));
    /// assert_eq!(res.secrets[0].name, "a");
    /// ```
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Adds a service, as Kubernetes takes it.
    ///
    /// ```
    /// let res = charm_sdk::pod::K8sResources::new().service(serde_json::json!({"name": "metrics"}));
    /// assert_eq!(res.services.len(), 1);
    /// ```
    pub fn service(mut self, service: serde_json::Value) -> Self {
        self.services.push(service);
        self
    }

    /// Adds a custom resource of the definition `crd`.
    ///
    /// ```
    /// let res = charm_sdk::pod::K8sResources::new()
    ///     .custom_resource("tfjobs.kubeflow.org", serde_json::json!({"metadata": {"name": "job"}}));
    /// assert_eq!(res.custom_resources["tfjobs.kubeflow.org"].len(), 1);
    /// ```
    pub fn custom_resource(mut self, crd: impl Into<String>, resource: serde_json::Value) -> Self {
        self.custom_resources
            .entry(crd.into())
            .or_default()
            .push(resource);
        self
    }

    /// Sets the pod settings.
    ///
    /// ```
    /// let res = charm_sdk::pod::K8sResources::new().pod(serde_json::json!({"restartPolicy": "Always"}));
    /// assert!(res.pod.is_some());
    /// ```
    pub fn pod(mut self, pod: serde_json::Value) -> Self {
        self.pod = Some(pod);
        self
    }

    /// The resources as JSON, the form the host receives.
    ///
    /// ```
    /// assert_eq!(charm_sdk::pod::K8sResources::new().to_json(), r#"{"kubernetesResources":{}}"#);
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string(&K8sResourcesDocument {
            kubernetes_resources: self,
        })
        .expect("k8s resources always serialise")
    }
}

/// A Kubernetes secret.
///
/// ```
/// let s = charm_sdk::pod::Secret::new("creds").string_data("user", "admin");
/// assert_eq!(s.kind, "Opaque");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Secret {
    /// Its name.
    pub name: String,
    /// Its type, `Opaque` unless set.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its data as plain text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
}

impl Secret {
    /// An empty `Opaque` secret.
    ///
    /// ```
    /// assert!(charm_sdk::pod::Secret::new("s").string_data.is_empty());
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        Secret {
            name: name.into(),
            kind: "Opaque".into(),
            string_data: BTreeMap::new(),
        }
    }

    /// Adds an entry.
    ///
    /// ```
    /// let s = charm_sdk::pod::Secret::new("s").string_data("k", "v");
    /// assert_eq!(s.string_data["k"], "v");
    /// ```
    pub fn string_data(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.string_data.insert(key.into(), value.into());
        self
    }
}
