//! Strict validation of Juju pod spec version 3, so a charm hears about a bad field from
//! `set_pod_spec` itself (naming the field) rather than from Kubernetes later.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};

use crate::records::PodSpecWrite;

/// A validation failure located at one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// The path of the offending field, such as `containers[1].name`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Which document a [`FieldError`] is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodSpecError {
    /// The pod spec.
    #[error("invalid pod spec: {0}")]
    Spec(FieldError),
    /// The Kubernetes resources.
    #[error("invalid k8s resources: {0}")]
    K8sResources(FieldError),
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        reason: reason.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn parse(text: &str) -> Result<Value, FieldError> {
    // The SDK sends JSON, which a JSON parser reads several times faster than a YAML one;
    // JSON is YAML, so anything else (and any error message) is the YAML parser's.
    if text.trim_start().starts_with('{')
        && let Ok(value) = serde_json::from_str::<Value>(text)
    {
        return Ok(value);
    }
    serde_yaml::from_str::<Value>(text)
        .map_err(|e| err("(document)", format!("not valid YAML or JSON: {e}")))
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, FieldError> {
    value.as_object().ok_or_else(|| {
        err(
            if path.is_empty() { "(document)" } else { path },
            "must be a mapping",
        )
    })
}

fn only_known(map: &Map<String, Value>, path: &str, known: &[&str]) -> Result<(), FieldError> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(
            join(path, k),
            format!("unknown field; expected one of: {}", known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn string<'a>(
    map: &'a Map<String, Value>,
    path: &str,
    key: &str,
    required: bool,
) -> Result<Option<&'a str>, FieldError> {
    match map.get(key) {
        None | Some(Value::Null) if required => Err(err(join(path, key), "required")),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if required && s.trim().is_empty() => {
            Err(err(join(path, key), "must not be empty"))
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(err(join(path, key), "must be a string")),
    }
}

fn string_list(map: &Map<String, Value>, path: &str, key: &str) -> Result<(), FieldError> {
    match map.get(key) {
        None => Ok(()),
        Some(Value::Array(items)) => items.iter().enumerate().try_for_each(|(i, v)| match v {
            Value::String(_) => Ok(()),
            _ => Err(err(format!("{}[{i}]", join(path, key)), "must be a string")),
        }),
        Some(_) => Err(err(join(path, key), "must be a list of strings")),
    }
}

fn one_of(
    map: &Map<String, Value>,
    path: &str,
    key: &str,
    allowed: &[&str],
) -> Result<(), FieldError> {
    match string(map, path, key, false)? {
        Some(v) if !allowed.contains(&v) => Err(err(
            join(path, key),
            format!("{v:?} is not one of: {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

/// Kubernetes names: a DNS-1123 label.
fn dns_label(name: &str, field: &str) -> Result<(), FieldError> {
    let ok = name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(err(
            field,
            format!("{name:?} is not a valid name: lowercase letters, digits and '-', at most 63"),
        ))
    }
}

const SPEC_FIELDS: &[&str] = &[
    "version",
    "containers",
    "serviceAccount",
    "service",
    "configMaps",
];
const CONTAINER_FIELDS: &[&str] = &[
    "name",
    "init",
    "image",
    "imageDetails",
    "imagePullPolicy",
    "ports",
    "command",
    "args",
    "workingDir",
    "envConfig",
    "volumeConfig",
    "kubernetes",
];
const IMAGE_DETAILS_FIELDS: &[&str] = &["imagePath", "username", "password"];
const PORT_FIELDS: &[&str] = &["name", "containerPort", "protocol"];
const K8S_FIELDS: &[&str] = &["kubernetesResources"];
const K8S_RESOURCE_FIELDS: &[&str] = &[
    "customResourceDefinitions",
    "customResources",
    "mutatingWebhookConfigurations",
    "validatingWebhookConfigurations",
    "ingressResources",
    "secrets",
    "services",
    "serviceAccounts",
    "pod",
];

fn container(value: &Value, path: &str) -> Result<String, FieldError> {
    let c = object(value, path)?;
    only_known(c, path, CONTAINER_FIELDS)?;
    let name = string(c, path, "name", true)?
        .expect("required")
        .to_string();
    dns_label(&name, &join(path, "name"))?;
    match (c.get("image"), c.get("imageDetails")) {
        (None, None) => {
            return Err(err(
                join(path, "imageDetails"),
                "required: a container needs an image",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(err(
                join(path, "image"),
                "give either image or imageDetails, not both",
            ));
        }
        (Some(_), None) => {
            string(c, path, "image", true)?;
        }
        (None, Some(details)) => {
            let p = join(path, "imageDetails");
            let d = object(details, &p)?;
            only_known(d, &p, IMAGE_DETAILS_FIELDS)?;
            string(d, &p, "imagePath", true)?;
            string(d, &p, "username", false)?;
            string(d, &p, "password", false)?;
        }
    }
    one_of(
        c,
        path,
        "imagePullPolicy",
        &["Always", "IfNotPresent", "Never"],
    )?;
    if let Some(init) = c.get("init")
        && !init.is_boolean()
    {
        return Err(err(join(path, "init"), "must be true or false"));
    }
    if let Some(ports) = c.get("ports") {
        let ports_path = join(path, "ports");
        let ports = ports
            .as_array()
            .ok_or_else(|| err(&ports_path, "must be a list"))?;
        let mut names = BTreeSet::new();
        for (i, port) in ports.iter().enumerate() {
            let p = format!("{ports_path}[{i}]");
            let port = object(port, &p)?;
            only_known(port, &p, PORT_FIELDS)?;
            match port.get("containerPort") {
                None => return Err(err(join(&p, "containerPort"), "required")),
                Some(n) if n.as_u64().is_some_and(|n| (1..=65535).contains(&n)) => {}
                Some(_) => {
                    return Err(err(
                        join(&p, "containerPort"),
                        "must be a port number, 1 to 65535",
                    ));
                }
            }
            one_of(port, &p, "protocol", &["TCP", "UDP", "SCTP"])?;
            if let Some(name) = string(port, &p, "name", false)?
                && !names.insert(name.to_string())
            {
                return Err(err(
                    join(&p, "name"),
                    format!("duplicate port name {name:?}"),
                ));
            }
        }
    }
    string_list(c, path, "command")?;
    string_list(c, path, "args")?;
    string(c, path, "workingDir", false)?;
    if let Some(env) = c.get("envConfig") {
        object(env, &join(path, "envConfig"))?;
    }
    if let Some(volumes) = c.get("volumeConfig") {
        let vp = join(path, "volumeConfig");
        let volumes = volumes
            .as_array()
            .ok_or_else(|| err(&vp, "must be a list"))?;
        for (i, v) in volumes.iter().enumerate() {
            let p = format!("{vp}[{i}]");
            let v = object(v, &p)?;
            string(v, &p, "name", true)?;
            string(v, &p, "mountPath", true)?;
        }
    }
    if let Some(k) = c.get("kubernetes") {
        object(k, &join(path, "kubernetes"))?;
    }
    Ok(name)
}

fn validate_spec(text: &str) -> Result<Value, FieldError> {
    let spec = parse(text)?;
    let top = object(&spec, "")?;
    only_known(top, "", SPEC_FIELDS)?;
    match top.get("version") {
        None => {
            return Err(err(
                "version",
                "required: this host takes pod spec version 3",
            ));
        }
        Some(v) if v.as_u64() == Some(3) => {}
        Some(v) => {
            return Err(err(
                "version",
                format!("{v} is not supported: this host takes version 3"),
            ));
        }
    }
    let containers = match top.get("containers") {
        None => {
            return Err(err(
                "containers",
                "required: a pod needs at least one container",
            ));
        }
        Some(Value::Array(c)) if c.is_empty() => {
            return Err(err(
                "containers",
                "must not be empty: a pod needs at least one container",
            ));
        }
        Some(Value::Array(c)) => c,
        Some(_) => return Err(err("containers", "must be a list")),
    };
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let path = format!("containers[{i}]");
        let name = container(c, &path)?;
        if !names.insert(name.clone()) {
            return Err(err(
                format!("{path}.name"),
                format!("duplicate container name {name:?}"),
            ));
        }
    }
    for key in ["serviceAccount", "service", "configMaps"] {
        if let Some(v) = top.get(key) {
            object(v, key)?;
        }
    }
    Ok(spec)
}

fn validate_k8s_resources(text: &str) -> Result<Value, FieldError> {
    let doc = parse(text)?;
    let top = object(&doc, "")?;
    only_known(top, "", K8S_FIELDS)?;
    if let Some(res) = top.get("kubernetesResources") {
        let r = object(res, "kubernetesResources")?;
        only_known(r, "kubernetesResources", K8S_RESOURCE_FIELDS)?;
    }
    Ok(doc)
}

/// Validates a pod spec (version 3) and optional Kubernetes resources, given as YAML or
/// JSON, and normalises both to JSON values.
///
/// ```
/// use charm_model::podspec::{validate, PodSpecError};
///
/// let ok = validate("version: 3\ncontainers: [{name: app, image: nginx}]", None).unwrap();
/// assert_eq!(ok.spec["containers"][0]["image"], "nginx");
///
/// let bad = validate(r#"{"version": 3, "containers": [{"name": "app"}]}"#, None).unwrap_err();
/// let PodSpecError::Spec(e) = bad else { panic!() };
/// assert_eq!(e.field, "containers[0].imageDetails");
/// ```
pub fn validate(spec: &str, k8s_resources: Option<&str>) -> Result<PodSpecWrite, PodSpecError> {
    let spec = validate_spec(spec).map_err(PodSpecError::Spec)?;
    let k8s_resources = k8s_resources
        .map(validate_k8s_resources)
        .transpose()
        .map_err(PodSpecError::K8sResources)?;
    Ok(PodSpecWrite::new(spec, k8s_resources))
}

/// The pod spec each application of a charm last set, validated: [`validate`] remembered
/// for the text it last accepted, per application.
///
/// Charms reconcile by setting their whole pod spec again on every hook, and it is mostly
/// the same text as last time. Validation is a function of the text alone, so a repeat
/// reuses the last result instead of parsing and checking the text again. One per loaded
/// charm, shared by its units' hooks; it holds one spec per application, as the store does.
///
/// ```
/// use charm_model::podspec::{validate, LastValid};
///
/// let last = LastValid::default();
/// let spec = "version: 3\ncontainers: [{name: app, image: nginx}]";
/// assert_eq!(*last.validate("web", spec, None).unwrap(), validate(spec, None).unwrap());
/// assert!(last.holds("web", spec, None), "the accepted text is remembered");
/// assert!(!last.holds("db", spec, None), "for its application only");
/// assert!(last.validate("web", "version: 2", None).is_err());
/// assert!(last.holds("web", spec, None), "a refused text replaces nothing");
/// let other = "version: 3\ncontainers: [{name: app, image: redis}]";
/// let write = last.validate("web", other, None).unwrap();
/// assert_eq!(write.spec["containers"][0]["image"], "redis");
/// assert!(last.holds("web", other, None) && !last.holds("web", spec, None));
/// ```
#[derive(Debug, Default)]
// By application, in a B-tree: a hook's lookup compares a few names, where hashing one
// with the default hasher cost more.
pub struct LastValid(Mutex<BTreeMap<String, Arc<Accepted>>>);

#[derive(Debug)]
struct Accepted {
    spec: String,
    k8s_resources: Option<String>,
    write: Arc<PodSpecWrite>,
}

impl Accepted {
    fn is(&self, spec: &str, k8s_resources: Option<&str>) -> bool {
        self.spec == spec && self.k8s_resources.as_deref() == k8s_resources
    }
}

impl LastValid {
    /// What [`validate`] answers for this text, from memory when it is the text `app` last
    /// had accepted: then the very write it answered last time, shared.
    pub fn validate(
        &self,
        app: &str,
        spec: &str,
        k8s_resources: Option<&str>,
    ) -> Result<Arc<PodSpecWrite>, PodSpecError> {
        if let Some(last) = self.last(app)
            && last.is(spec, k8s_resources)
        {
            return Ok(last.write.clone());
        }
        let write = Arc::new(validate(spec, k8s_resources)?);
        let accepted = Arc::new(Accepted {
            spec: spec.to_string(),
            k8s_resources: k8s_resources.map(str::to_string),
            write: write.clone(),
        });
        self.lock().insert(app.to_string(), accepted);
        Ok(write)
    }

    /// Whether this is the text `app` last had accepted.
    pub fn holds(&self, app: &str, spec: &str, k8s_resources: Option<&str>) -> bool {
        self.last(app)
            .is_some_and(|last| last.is(spec, k8s_resources))
    }

    fn last(&self, app: &str) -> Option<Arc<Accepted>> {
        // Cloned out so the lock is held for a lookup, not for the comparison.
        self.lock().get(app).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Accepted>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_read_the_same_and_bad_json_gets_the_yaml_error() {
        let json = r#"{"version": 3, "containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}]}"#;
        let yaml = "version: 3\ncontainers:\n- name: web\n  image: nginx\n  ports: [{containerPort: 80}]\n";
        assert_eq!(parse(json).unwrap(), parse(yaml).unwrap());
        assert_eq!(validate(json, None).unwrap(), validate(yaml, None).unwrap());
        let broken = parse(r#"{"version": 3, "containers": ["#).unwrap_err();
        assert_eq!(broken.field, "(document)");
        assert!(
            broken.reason.starts_with("not valid YAML or JSON"),
            "{}",
            broken.reason
        );
    }

    fn field(spec: &str) -> String {
        match validate(spec, None) {
            Err(PodSpecError::Spec(e)) => e.field,
            other => panic!("expected a spec error, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_full_container() {
        let spec = r#"
version: 3
containers:
  - name: discourse
    imageDetails: {imagePath: "discourse:2.6", username: u, password: p}
    imagePullPolicy: Always
    ports: [{name: http, containerPort: 3000, protocol: TCP}]
    envConfig: {A: "1", B: {secret: {name: s, key: k}}}
    command: [sh, -c]
    kubernetes: {readinessProbe: {httpGet: {path: /, port: 3000}}}
"#;
        let w = validate(spec, Some("kubernetesResources: {secrets: []}")).unwrap();
        assert_eq!(w.spec["containers"][0]["ports"][0]["containerPort"], 3000);
        assert!(w.k8s_resources.is_some());
    }

    #[test]
    fn names_the_field_at_fault() {
        assert_eq!(field("version: 3\ncontainers: []"), "containers");
        assert_eq!(field("version: 3"), "containers");
        assert_eq!(field("containers: [{name: a, image: b}]"), "version");
        assert_eq!(
            field("version: 2\ncontainers: [{name: a, image: b}]"),
            "version"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{image: b}]"),
            "containers[0].name"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: a, image: b}, {name: a, image: c}]"),
            "containers[1].name"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: a, image: b, colour: red}]"),
            "containers[0].colour"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: a, image: b}]\nextra: 1"),
            "extra"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: a, image: b, ports: [{containerPort: 0}]}]"),
            "containers[0].ports[0].containerPort"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: A_b, image: b}]"),
            "containers[0].name"
        );
        assert_eq!(
            field("version: 3\ncontainers: [{name: a, imageDetails: {}}]"),
            "containers[0].imageDetails.imagePath"
        );
        assert_eq!(field("[1, 2]"), "(document)");
        assert_eq!(field("{{{"), "(document)");
    }

    #[test]
    fn k8s_resources_are_checked_too() {
        let r = validate(
            "version: 3\ncontainers: [{name: a, image: b}]",
            Some("services: []"),
        );
        assert!(matches!(r, Err(PodSpecError::K8sResources(e)) if e.field == "services"));
    }
}
