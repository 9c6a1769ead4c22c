//! Juju bundles: `applications` (charm, num_units, options) and `relations`, checked in
//! full (charms loaded, options typed, endpoints resolved) before anything is deployed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::charm::{Charm, CharmRuntime};
use crate::controller::{Controller, ControllerError};
use crate::model::{ConfigValue, RelationRole};

/// Why a bundle was refused. Nothing was deployed.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The bundle.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bundle is wrong at a line.
    #[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        /// The bundle.
        path: PathBuf,
        /// The line at fault (1-based), when known.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// Deploying failed.
    #[error(transparent)]
    Deploy(#[from] ControllerError),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBundle {
    #[serde(default)]
    #[allow(dead_code)]
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    /// `kubernetes` for Kubernetes bundles; the only kind this host runs.
    #[serde(default)]
    bundle: Option<String>,
    applications: BTreeMap<String, RawApp>,
    #[serde(default)]
    relations: Vec<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    charm: String,
    #[serde(default)]
    num_units: Option<u32>,
    /// Kubernetes bundles say `scale` for `num_units`.
    #[serde(default)]
    scale: Option<u32>,
    #[serde(default)]
    options: BTreeMap<String, serde_yaml::Value>,
}

/// An application of a checked bundle.
#[derive(Clone)]
pub struct BundleApp {
    /// Its name.
    pub name: String,
    /// Its charm file, resolved against the bundle's directory.
    pub charm_path: PathBuf,
    /// The loaded charm.
    pub charm: Charm,
    /// How many units.
    pub num_units: u32,
    /// The operator's settings, typed by the charm's declarations.
    pub options: BTreeMap<String, ConfigValue>,
}

/// A relation of a checked bundle, endpoints resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleRelation {
    /// One side: application and endpoint.
    pub a: (String, String),
    /// The other side.
    pub b: (String, String),
}

/// A bundle, checked against its charms and ready to deploy.
pub struct Bundle {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its applications, by name.
    pub applications: Vec<BundleApp>,
    /// Its relations, in order.
    pub relations: Vec<BundleRelation>,
}

/// The 1-based line of the key at `path` (a chain of nested mapping keys), found by
/// indentation. Good enough for bundles, which are plain block mappings.
fn line_of_key(text: &str, path: &[&str]) -> Option<usize> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(d, _)| *d >= indent) {
            stack.pop();
        }
        stack.push((indent, key.trim().trim_matches(['"', '\'']).to_string()));
        if stack.len() == path.len() && stack.iter().zip(path).all(|((_, k), p)| k == p) {
            return Some(i + 1);
        }
    }
    None
}

/// The 1-based line of the first line after `relations:` containing `needle`.
fn line_in_relations(text: &str, needle: &str) -> Option<usize> {
    let start = line_of_key(text, &["relations"])?;
    text.lines()
        .enumerate()
        .skip(start)
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
}

fn yaml_to_config(value: &serde_yaml::Value) -> Option<ConfigValue> {
    match value {
        serde_yaml::Value::Bool(b) => Some(ConfigValue::Boolean(*b)),
        serde_yaml::Value::Number(n) => n
            .as_i64()
            .map(ConfigValue::Int)
            .or_else(|| n.as_f64().map(ConfigValue::Float)),
        serde_yaml::Value::String(s) => Some(ConfigValue::String(s.clone())),
        _ => None,
    }
}

impl Bundle {
    /// Reads and checks the bundle at `path`, loading its charms with `runtime`.
    pub fn load(path: &Path, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        let text = std::fs::read_to_string(path).map_err(|source| BundleError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text, runtime)
    }

    /// Checks bundle `text`; `path` names it in errors and anchors relative charm paths.
    pub fn parse(path: &Path, text: &str, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        let invalid = |line: Option<usize>, reason: String| BundleError::Invalid {
            path: path.to_owned(),
            line,
            reason,
        };
        let raw: RawBundle = serde_yaml::from_str(text).map_err(|e| {
            let line = e.location().map(|l| l.line());
            // serde_yaml appends "at line N column M"; the line is already in front.
            let reason = e.to_string();
            let reason = reason
                .split(" at line ")
                .next()
                .unwrap_or(&reason)
                .to_string();
            invalid(line, reason)
        })?;
        if let Some(kind) = raw.bundle.as_deref()
            && kind != "kubernetes"
        {
            return Err(invalid(
                line_of_key(text, &["bundle"]),
                format!("bundle kind {kind:?}: this host runs kubernetes bundles"),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut applications = Vec::new();
        for (name, app) in &raw.applications {
            let app_line = line_of_key(text, &["applications", name]);
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(invalid(
                    app_line,
                    format!("application name {name:?}: lowercase letters, digits and '-' only"),
                ));
            }
            let num_units = match (app.num_units, app.scale) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        app_line,
                        format!("application {name}: give num_units or scale, not both"),
                    ));
                }
                (n, s) => n.or(s).unwrap_or(1),
            };
            let charm_line = line_of_key(text, &["applications", name, "charm"]).or(app_line);
            let charm_path = base.join(&app.charm);
            if !charm_path.is_file() {
                return Err(invalid(
                    charm_line,
                    format!(
                        "application {name}: charm file {} does not exist",
                        charm_path.display()
                    ),
                ));
            }
            let charm = runtime
                .load_file(&charm_path)
                .map_err(|e| invalid(charm_line, format!("application {name}: {e}")))?;
            let mut options = BTreeMap::new();
            for (option, value) in &app.options {
                let line = line_of_key(text, &["applications", name, "options", option]);
                let meta = charm.metadata();
                let declared = meta.option(option).ok_or_else(|| {
                    invalid(
                        line,
                        format!(
                            "application {name}: charm {} has no option {option:?}",
                            meta.name
                        ),
                    )
                })?;
                let typed = yaml_to_config(value)
                    .and_then(|v| v.coerce(declared.kind))
                    .ok_or_else(|| {
                        invalid(
                            line,
                            format!(
                                "application {name}: option {option:?} must be a {}",
                                declared.kind.as_str()
                            ),
                        )
                    })?;
                options.insert(option.clone(), typed);
            }
            applications.push(BundleApp {
                name: name.clone(),
                charm_path,
                charm,
                num_units,
                options,
            });
        }
        let mut relations = Vec::new();
        for pair in &raw.relations {
            let first = pair.first().map(String::as_str).unwrap_or("");
            let line = line_in_relations(text, first);
            let [a, b] = pair.as_slice() else {
                return Err(invalid(
                    line,
                    format!("a relation has two endpoints, not {}", pair.len()),
                ));
            };
            let relation =
                resolve_relation(&applications, a, b).map_err(|reason| invalid(line, reason))?;
            if relations.contains(&relation) {
                return Err(invalid(line, format!("relation {a} {b} appears twice")));
            }
            relations.push(relation);
        }
        Ok(Bundle {
            path: path.to_owned(),
            applications,
            relations,
        })
    }

    /// Deploys the bundle: applications with their units, then relations.
    pub async fn deploy(&self, controller: &Controller) -> Result<(), BundleError> {
        for app in &self.applications {
            let charm_ref = app.charm_path.display().to_string();
            controller
                .deploy(
                    &app.name,
                    app.charm.clone(),
                    &charm_ref,
                    app.options.clone(),
                    app.num_units,
                )
                .await?;
        }
        for rel in &self.relations {
            controller
                .relate((&rel.a.0, &rel.a.1), (&rel.b.0, &rel.b.1))
                .await?;
        }
        Ok(())
    }
}

/// Resolves `app[:endpoint]` pairs to endpoints with the same interface and paired roles.
fn resolve_relation(apps: &[BundleApp], a: &str, b: &str) -> Result<BundleRelation, String> {
    let split = |s: &str| -> Result<(&BundleApp, Option<String>), String> {
        let (app, endpoint) = match s.split_once(':') {
            Some((app, ep)) => (app, Some(ep.to_string())),
            None => (s, None),
        };
        let found = apps
            .iter()
            .find(|x| x.name == app)
            .ok_or_else(|| format!("relation {a} {b}: no application {app:?} in the bundle"))?;
        if let Some(ep) = &endpoint
            && found.charm.metadata().endpoint(ep).is_none()
        {
            let names: Vec<&str> = found
                .charm
                .metadata()
                .relations
                .iter()
                .map(|r| r.name.as_str())
                .collect();
            return Err(format!(
                "relation {a} {b}: application {app} has no endpoint {ep:?} (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
        Ok((found, endpoint))
    };
    let (app_a, ep_a) = split(a)?;
    let (app_b, ep_b) = split(b)?;
    let pairs = |x: RelationRole, y: RelationRole| {
        matches!(
            (x, y),
            (RelationRole::Provides, RelationRole::Requires)
                | (RelationRole::Requires, RelationRole::Provides)
        )
    };
    let mut candidates = Vec::new();
    for ea in &app_a.charm.metadata().relations {
        if ep_a.as_ref().is_some_and(|n| *n != ea.name) {
            continue;
        }
        for eb in &app_b.charm.metadata().relations {
            if ep_b.as_ref().is_some_and(|n| *n != eb.name) {
                continue;
            }
            if ea.interface == eb.interface && pairs(ea.role, eb.role) {
                candidates.push((ea.name.clone(), eb.name.clone()));
            }
        }
    }
    match candidates.as_slice() {
        [(x, y)] => Ok(BundleRelation {
            a: (app_a.name.clone(), x.clone()),
            b: (app_b.name.clone(), y.clone()),
        }),
        [] => {
            let describe = |app: &BundleApp, ep: &Option<String>| match ep
                .as_ref()
                .and_then(|e| app.charm.metadata().endpoint(e))
            {
                Some(e) => {
                    format!("{}:{} ({:?} {})", app.name, e.name, e.role, e.interface).to_lowercase()
                }
                None => app.name.clone(),
            };
            Err(format!(
                "relation {a} {b}: no matching endpoints: {} and {} need the same interface, one providing and one requiring it",
                describe(app_a, &ep_a),
                describe(app_b, &ep_b)
            ))
        }
        _ => Err(format!(
            "relation {a} {b}: ambiguous; name the endpoints (app:endpoint)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_key_lines() {
        let text = "applications:\n  discourse:\n    charm: ./d.wasm\n    options:\n      port: 1\n  pg:\n    charm: x\nrelations:\n  - [\"a:db\", \"pg:db\"]\n";
        assert_eq!(
            line_of_key(text, &["applications", "discourse", "charm"]),
            Some(3)
        );
        assert_eq!(
            line_of_key(text, &["applications", "discourse", "options", "port"]),
            Some(5)
        );
        assert_eq!(line_of_key(text, &["applications", "pg", "charm"]), Some(7));
        assert_eq!(line_in_relations(text, "pg:db"), Some(9));
        assert_eq!(line_of_key(text, &["applications", "nope"]), None);
    }
}
