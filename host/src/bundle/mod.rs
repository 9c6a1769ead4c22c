//! Juju bundles, in Juju's own format: every key of it understood, each application's
//! charm found by path or by name, options typed and relations resolved against the charms,
//! overlays merged, and every problem reported at once with its line, before anything is
//! deployed. What this host cannot apply (machines, storage, trust, ...) is accepted with a
//! warning saying why. [`export`] writes a model back as a bundle.

mod charm_ref;
mod export;
mod spec;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_yaml::Value;

use crate::charm::{Charm, CharmRuntime};
use crate::controller::{Controller, ControllerError};
use crate::model::ConfigValue;
use charm_model::endpoints::{self, Side};
use charm_model::{OptionType, StoreError};

pub use charm_ref::{CharmRef, is_valid_name};
pub use export::{ExportedApp, ExportedBundle, export};

use spec::{Issue, Lines, Loc, Section, Spec};

/// Where charms named by name are looked up when no directory is given.
pub const DEFAULT_CHARM_DIR: &str = "charms/build";

/// The environment variable the command line reads charm directories from
/// (`:`-separated).
pub const CHARM_DIR_ENV: &str = "CHARM_HOST_CHARM_DIR";

/// One thing wrong with a bundle, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The bundle or overlay file.
    pub path: PathBuf,
    /// The line at fault (1-based), when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A key of the bundle this host accepts but does not apply, with where it is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The key, such as `trust` or `machines`.
    pub key: String,
    /// Where it is used: `application discourse`, `machine 0`, `the bundle`, ...
    pub used_by: Vec<String>,
    /// The file of its first use.
    pub path: PathBuf,
    /// The line of its first use.
    pub line: Option<usize>,
    /// Why this host does not apply it.
    pub reason: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(
            f,
            ": `{}` ({}) is not applied: {}",
            self.key,
            self.used_by.join(", "),
            self.reason
        )
    }
}

fn describe_problems(path: &Path, problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut text = format!("{} problems in {}:", many.len(), path.display());
            for p in many {
                text.push_str(&format!("\n  {p}"));
            }
            text
        }
    }
}

/// Why a bundle was refused. Nothing was deployed.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A bundle or overlay file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bundle is wrong: every problem found, in file order.
    #[error("{}", describe_problems(path, problems))]
    Invalid {
        /// The bundle.
        path: PathBuf,
        /// What is wrong, and where.
        problems: Vec<Problem>,
    },
    /// Deploying failed.
    #[error(transparent)]
    Deploy(#[from] ControllerError),
}

/// Where charms are found and which overlays apply.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Directories searched in order for `<name>.wasm` when a `charm:` is a name; the
    /// bundle's own directory is searched after them.
    pub charm_dirs: Vec<PathBuf>,
    /// Overlays merged over the bundle in order, as `juju deploy --overlay` does.
    pub overlays: Vec<PathBuf>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            charm_dirs: vec![PathBuf::from(DEFAULT_CHARM_DIR)],
            overlays: Vec::new(),
        }
    }
}

/// An application of a checked bundle.
#[derive(Clone)]
pub struct BundleApp {
    /// Its name.
    pub name: String,
    /// The charm as the model records it: the name as the bundle gives it, or the module
    /// file's absolute path.
    pub charm_ref: String,
    /// Its charm's module file.
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
    /// The interface both speak.
    pub interface: String,
}

/// A bundle, checked against its charms and ready to deploy.
pub struct Bundle {
    /// Where it was read from.
    pub path: PathBuf,
    /// The overlays merged over it.
    pub overlays: Vec<PathBuf>,
    /// Its description.
    pub description: Option<String>,
    /// Its applications, by name.
    pub applications: Vec<BundleApp>,
    /// Its relations, in order.
    pub relations: Vec<BundleRelation>,
    /// What it asks for that this host does not apply.
    pub warnings: Vec<Warning>,
}

/// Why this host does not apply `key`; `None` for keys it applies or that only describe.
fn not_applied(key: &str) -> Option<&'static str> {
    Some(match key {
        "series" | "base" | "default-base" => {
            "charms here are WebAssembly components, which run on no operating system series or base"
        }
        "channel" => "charms come from the charm directories, not from a store's channel",
        "revision" => "charms come from the charm directories, which hold one module per name",
        "machines" | "to" | "placement" => {
            "units run as pods on this host, which has no machines to place them on"
        }
        "constraints" => "this host sets no resource constraints on units",
        "storage" => "this host provisions no storage",
        "devices" => "this host attaches no devices",
        "resources" => "this host fetches no charm resources; a charm's pod spec names its images",
        "trust" => "this host gives charms no cloud credentials",
        "expose" | "exposed-endpoints" => "this host manages no ingress or firewall",
        "offers" | "saas" => "this host runs one model, so there are no cross-model relations",
        "bindings" => "this host has no network spaces",
        "annotations" => "this host keeps no annotations",
        "plan" => "this host meters no usage",
        "source" => "this host reads nothing from an application's source",
        _ => return None,
    })
}

/// Whether a value asks for anything: `trust: false` or `storage: {}` does not.
fn asks_for_something(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Mapping(m) => !m.is_empty(),
        Value::Sequence(s) => !s.is_empty(),
        _ => true,
    }
}

/// A YAML scalar as a config value; `None` for anything else.
fn yaml_to_config(value: &Value) -> Option<ConfigValue> {
    match value {
        Value::Bool(b) => Some(ConfigValue::Boolean(*b)),
        Value::Number(n) => n
            .as_i64()
            .map(ConfigValue::Int)
            // `.nan` and `.inf` are YAML floats, but JSON, which stores them, has neither.
            .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(ConfigValue::Float)),
        Value::String(s) => Some(ConfigValue::String(s.clone())),
        _ => None,
    }
}

/// A document of the bundle: its file and the lines of its keys.
struct Doc {
    path: PathBuf,
    lines: Lines,
}

/// Warnings gathered by key, in order of first use.
#[derive(Default)]
struct Warnings(Vec<(String, Vec<String>, Loc, &'static str)>);

impl Warnings {
    fn add(&mut self, key: &str, used_by: String, loc: Loc) {
        let Some(reason) = not_applied(key) else {
            return;
        };
        match self.0.iter_mut().find(|(k, ..)| k == key) {
            Some((_, users, first, _)) => {
                if !users.contains(&used_by) {
                    users.push(used_by);
                }
                if (loc.doc, loc.line) < (first.doc, first.line) {
                    *first = loc;
                }
            }
            None => self.0.push((key.to_string(), vec![used_by], loc, reason)),
        }
    }
}

/// What was checked so far: problems, warnings, and the documents they point into.
struct Checker<'a> {
    docs: Vec<Doc>,
    issues: Vec<Issue>,
    warnings: Warnings,
    options: &'a LoadOptions,
    runtime: &'a CharmRuntime,
    loaded: HashMap<PathBuf, Result<Charm, String>>,
}

impl Checker<'_> {
    fn issue(&mut self, loc: Loc, message: String) {
        self.issues.push(Issue { loc, message });
    }

    /// Reads `text` (the file at `path`), each YAML document of it merged into `spec`.
    fn read_file(&mut self, path: &Path, text: &str, spec: &mut Spec) {
        for (doc_text, offset) in spec::documents(text) {
            let index = self.docs.len();
            let lines = Lines::new(&doc_text, offset);
            let value = match serde_yaml::from_str::<Value>(&doc_text) {
                Ok(value) => Some(value),
                Err(e) => {
                    // serde_yaml appends "at line N column M"; the line goes in front.
                    let message = e.to_string();
                    let message = message
                        .split(" at line ")
                        .next()
                        .unwrap_or(&message)
                        .to_string();
                    self.issues.push(Issue {
                        loc: Loc {
                            doc: index,
                            line: e.location().map(|l| l.line() + offset),
                        },
                        message,
                    });
                    None
                }
            };
            if let Some(value) = value {
                let doc = spec::read_doc(value, index, &lines, &mut self.issues);
                spec::merge(spec, doc, index == 0, &mut self.issues);
            }
            self.docs.push(Doc {
                path: path.to_owned(),
                lines,
            });
        }
    }

    /// The directory a document's relative paths are relative to.
    fn base_dir(&self, doc: usize) -> PathBuf {
        self.docs[doc]
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned()
    }

    /// Loads the charm of application `name`; `None` (with its problem recorded) if it
    /// cannot be found or loaded.
    fn charm(&mut self, name: &str, app: &Section) -> Option<(String, PathBuf, Charm)> {
        let Some(field) = app.get("charm") else {
            self.issue(app.loc, format!("application {name} has no `charm`"));
            return None;
        };
        let loc = field.loc;
        let text = yaml_to_config(&field.value)
            .map(|v| match v {
                ConfigValue::String(s) => s,
                other => serde_json::to_string(&other).unwrap_or_default(),
            })
            .unwrap_or_default();
        let charm_ref = match CharmRef::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                self.issue(loc, format!("application {name}: {e}"));
                return None;
            }
        };
        let base = self.base_dir(loc.doc);
        let mut dirs = self.options.charm_dirs.clone();
        dirs.push(self.base_dir(0));
        let Some(path) = charm_ref.resolve(&base, &dirs) else {
            let message = match &charm_ref {
                CharmRef::Path(p) => format!(
                    "application {name}: charm file {} does not exist",
                    charm_ref::joined(&base, p).display()
                ),
                CharmRef::Name { name: charm, .. } => format!(
                    "application {name}: charm {text:?} not found: no {charm}.wasm in {} (give charm directories with --charm-dir or {CHARM_DIR_ENV})",
                    dirs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            self.issue(loc, message);
            return None;
        };
        if let CharmRef::Name {
            series, revision, ..
        } = &charm_ref
        {
            if revision.is_some() {
                self.warnings
                    .add("revision", format!("application {name}"), loc);
            }
            if series.is_some() {
                self.warnings
                    .add("series", format!("application {name}"), loc);
            }
        }
        let loaded = self
            .loaded
            .entry(path.clone())
            .or_insert_with(|| self.runtime.load_file(&path).map_err(|e| e.to_string()))
            .clone();
        let charm = match loaded {
            Ok(charm) => charm,
            Err(e) => {
                self.issue(loc, format!("application {name}: {}: {e}", path.display()));
                return None;
            }
        };
        let recorded = match charm_ref {
            CharmRef::Path(_) => std::fs::canonicalize(&path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string(),
            CharmRef::Name { .. } => text.trim().to_string(),
        };
        Some((recorded, path, charm))
    }

    /// The operator's settings of application `name`, typed by its charm's declarations.
    fn options(
        &mut self,
        name: &str,
        app: &Section,
        charm: &Charm,
    ) -> BTreeMap<String, ConfigValue> {
        let mut out = BTreeMap::new();
        let Some(field) = app.get("options") else {
            return out;
        };
        let Some(options) = field.value.as_mapping() else {
            return out;
        };
        let meta = charm.metadata().clone();
        let lines = &self.docs[field.loc.doc].lines;
        let mut issues = Vec::new();
        for (option, value) in options {
            let option = match option.as_str() {
                Some(o) => o.to_string(),
                None => serde_yaml::to_string(option)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            };
            let loc = Loc {
                doc: field.loc.doc,
                line: lines
                    .line(&["applications", name, "options", option.as_str()])
                    .or(field.loc.line),
            };
            if value.is_null() {
                // An overlay's `null` leaves the option at the charm's default.
                continue;
            }
            let Some(declared) = meta.option(&option) else {
                let known = meta.config.iter().map(|o| o.name.as_str());
                let hint = spec::suggest(&option, known)
                    .map(|k| format!("; did you mean {k:?}?"))
                    .unwrap_or_default();
                issues.push(Issue {
                    loc,
                    message: format!(
                        "application {name}: charm {} has no option {option:?}{hint}",
                        meta.name
                    ),
                });
                continue;
            };
            let value = match value
                .as_str()
                .and_then(|s| s.strip_prefix("include-file://"))
            {
                Some(file) => {
                    let file = self.base_dir(field.loc.doc).join(file);
                    match std::fs::read_to_string(&file) {
                        Ok(text) => Value::String(text),
                        Err(e) => {
                            issues.push(Issue {
                                loc,
                                message: format!(
                                    "application {name}: option {option:?}: cannot read {}: {e}",
                                    file.display()
                                ),
                            });
                            continue;
                        }
                    }
                }
                None => value.clone(),
            };
            match yaml_to_config(&value).and_then(|v| v.coerce(declared.kind)) {
                Some(typed) => {
                    out.insert(option, typed);
                }
                None => issues.push(Issue {
                    loc,
                    message: format!(
                        "application {name}: option {option:?} must be a {}{}",
                        declared.kind.as_str(),
                        if declared.kind == OptionType::Float {
                            " (a finite number)"
                        } else {
                            ""
                        }
                    ),
                }),
            }
        }
        self.issues.extend(issues);
        out
    }

    fn problem(&self, issue: &Issue) -> Problem {
        Problem {
            path: self.docs[issue.loc.doc].path.clone(),
            line: issue.loc.line,
            message: issue.message.clone(),
        }
    }
}

impl Bundle {
    /// Reads and checks the bundle at `path`, loading its charms with `runtime`; charm names
    /// are looked up in [`DEFAULT_CHARM_DIR`].
    pub fn load(path: &Path, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        Self::load_with(path, &LoadOptions::default(), runtime)
    }

    /// Reads and checks the bundle at `path` with its overlays.
    pub fn load_with(
        path: &Path,
        options: &LoadOptions,
        runtime: &CharmRuntime,
    ) -> Result<Bundle, BundleError> {
        let text = std::fs::read_to_string(path).map_err(|source| BundleError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse_with(path, &text, options, runtime)
    }

    /// Checks bundle `text`; `path` names it in problems and anchors relative charm paths.
    pub fn parse(path: &Path, text: &str, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        Self::parse_with(path, text, &LoadOptions::default(), runtime)
    }

    /// Checks bundle `text` with the overlays of `options` (read from their files).
    pub fn parse_with(
        path: &Path,
        text: &str,
        options: &LoadOptions,
        runtime: &CharmRuntime,
    ) -> Result<Bundle, BundleError> {
        let mut checker = Checker {
            docs: Vec::new(),
            issues: Vec::new(),
            warnings: Warnings::default(),
            options,
            runtime,
            loaded: HashMap::new(),
        };
        let mut spec = Spec::default();
        checker.read_file(path, text, &mut spec);
        for overlay in &options.overlays {
            let text = std::fs::read_to_string(overlay).map_err(|source| BundleError::Io {
                path: overlay.clone(),
                source,
            })?;
            checker.read_file(overlay, &text, &mut spec);
        }
        let bundle = check(&mut checker, spec, path, options);
        if !checker.issues.is_empty() {
            checker
                .issues
                .sort_by_key(|i| (i.loc.doc, i.loc.line.unwrap_or(0)));
            let problems = checker.issues.iter().map(|i| checker.problem(i)).collect();
            return Err(BundleError::Invalid {
                path: path.to_owned(),
                problems,
            });
        }
        Ok(bundle)
    }

    /// Deploys the bundle: applications with their units, then relations.
    pub async fn deploy(&self, controller: &Controller) -> Result<(), BundleError> {
        for app in &self.applications {
            controller
                .deploy(
                    &app.name,
                    app.charm.clone(),
                    &app.charm_ref,
                    app.options.clone(),
                    app.num_units,
                )
                .await?;
        }
        for rel in &self.relations {
            match controller
                .relate((&rel.a.0, &rel.a.1), (&rel.b.0, &rel.b.1))
                .await
            {
                Ok(_) => {}
                // Deploying again resumes: an application removed since (its removal
                // under way) is not related again.
                Err(ControllerError::Store(StoreError::Invalid(why))) => tracing::warn!(
                    "relation {}:{} {}:{} not made: {why}",
                    rel.a.0,
                    rel.a.1,
                    rel.b.0,
                    rel.b.1
                ),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Checks the merged bundle against its charms, recording problems and warnings in
/// `checker`; the result is meaningful only if no problem was recorded.
fn check(checker: &mut Checker<'_>, spec: Spec, path: &Path, options: &LoadOptions) -> Bundle {
    let text_of = |key: &str| {
        spec.top
            .get(key)
            .and_then(|f| yaml_to_config(&f.value))
            .map(|v| match v {
                ConfigValue::String(s) => s,
                other => serde_json::to_string(&other).unwrap_or_default(),
            })
    };
    if let Some(kind) = text_of("bundle")
        && kind != "kubernetes"
    {
        let loc = spec.top["bundle"].loc;
        checker.issue(
            loc,
            format!("bundle kind {kind:?}: Juju knows `kubernetes`, or no `bundle` key for a machine bundle"),
        );
    }
    for (key, field) in &spec.top {
        // A Kubernetes bundle's `series: kubernetes` asks for what this host does.
        let kubernetes = text_of(key).as_deref() == Some("kubernetes");
        if asks_for_something(&field.value) && !(key == "series" && kubernetes) {
            checker.warnings.add(key, "the bundle".into(), field.loc);
        }
    }
    for (name, machine) in &spec.machines {
        checker
            .warnings
            .add("machines", format!("machine {name}"), machine.loc);
    }
    for (name, saas) in &spec.saas {
        checker
            .warnings
            .add("saas", format!("saas {name}"), saas.loc);
    }
    if spec.applications.is_empty() && checker.issues.is_empty() {
        checker.issue(
            Loc { doc: 0, line: None },
            "the bundle has no applications".into(),
        );
    }
    let mut applications = Vec::new();
    for (name, app) in &spec.applications {
        if !is_valid_name(name) {
            checker.issue(
                app.loc,
                format!(
                    "application name {name:?}: lowercase letters, digits and '-', starting with a letter"
                ),
            );
        }
        let units = |key: &str| app.get(key).and_then(|f| f.value.as_u64());
        let num_units = match (units("num_units"), units("scale")) {
            (Some(_), Some(_)) => {
                checker.issue(
                    app.loc,
                    format!("application {name}: give num_units or scale, not both"),
                );
                0
            }
            (n, s) => n.or(s).unwrap_or(1),
        };
        let num_units = u32::try_from(num_units).unwrap_or_else(|_| {
            checker.issue(app.loc, format!("application {name}: too many units"));
            0
        });
        if let Some(to) = app.get("to") {
            for reason in placement_problems(&to.value, &spec) {
                checker.issue(to.loc, format!("application {name}: `to`: {reason}"));
            }
        }
        for (key, field) in &app.fields {
            let kubernetes = key == "series" && field.value.as_str() == Some("kubernetes");
            if asks_for_something(&field.value) && !kubernetes {
                checker
                    .warnings
                    .add(key, format!("application {name}"), field.loc);
            }
        }
        let Some((charm_ref, charm_path, charm)) = checker.charm(name, app) else {
            continue;
        };
        let options = checker.options(name, app, &charm);
        applications.push(BundleApp {
            name: name.clone(),
            charm_ref,
            charm_path,
            charm,
            num_units,
            options,
        });
    }
    let mut relations: Vec<BundleRelation> = Vec::new();
    for relation in &spec.relations {
        let loc = relation.loc;
        let [a, b] = relation.ends.as_slice() else {
            checker.issue(
                loc,
                format!("a relation has two endpoints, not {}", relation.ends.len()),
            );
            continue;
        };
        let app_of = |end: &str| end.split_once(':').map_or(end, |(app, _)| app).to_string();
        let (app_a, app_b) = (app_of(a), app_of(b));
        if spec.saas.contains_key(&app_a) || spec.saas.contains_key(&app_b) {
            checker
                .warnings
                .add("saas", format!("relation {a} {b}"), loc);
            continue;
        }
        // An application whose charm did not load has its problem reported already.
        let failed = |app: &str| {
            spec.applications.contains_key(app) && !applications.iter().any(|x| x.name == app)
        };
        if failed(&app_a) || failed(&app_b) {
            continue;
        }
        match resolve_relation(&applications, a, b) {
            Ok(resolved) if relations.contains(&resolved) => {
                checker.issue(loc, format!("relation {a} {b} appears twice"));
            }
            Ok(resolved) => relations.push(resolved),
            Err(reason) => checker.issue(loc, reason),
        }
    }
    let mut warnings = std::mem::take(&mut checker.warnings.0);
    // In the order of the files, as the operator reads them.
    warnings.sort_by_key(|(_, _, loc, _)| (loc.doc, loc.line.unwrap_or(0)));
    let warnings = warnings
        .into_iter()
        .map(|(key, used_by, loc, reason)| Warning {
            key,
            used_by,
            path: checker.docs[loc.doc].path.clone(),
            line: loc.line,
            reason: reason.to_string(),
        })
        .collect();
    Bundle {
        path: path.to_owned(),
        overlays: options.overlays.clone(),
        description: text_of("description"),
        applications,
        relations,
        warnings,
    }
}

/// What is wrong with a `to` list: units are not applied to machines here, but a
/// directive naming a machine or an application the bundle lacks is a mistake all the same.
fn placement_problems(to: &Value, spec: &Spec) -> Vec<String> {
    let values: Vec<ConfigValue> = match to {
        Value::Sequence(items) => items.iter().filter_map(yaml_to_config).collect(),
        other => yaml_to_config(other).into_iter().collect(),
    };
    let directives: Vec<String> = values
        .into_iter()
        .map(|v| match v {
            ConfigValue::String(s) => s,
            other => serde_json::to_string(&other).unwrap_or_default(),
        })
        .collect();
    let mut problems = Vec::new();
    for directive in directives {
        // `lxd:0`, `kvm:new`: a container on a machine.
        let target = directive
            .split_once(':')
            .map_or(directive.as_str(), |(_, t)| t);
        if target == "new" || target.contains('=') {
            continue;
        }
        if target.bytes().all(|b| b.is_ascii_digit()) {
            if !spec.machines.contains_key(target) {
                problems.push(format!(
                    "{directive:?} names machine {target}, which `machines` does not define"
                ));
            }
            continue;
        }
        let app = target.split_once('/').map_or(target, |(app, _)| app);
        if !spec.applications.contains_key(app) {
            problems.push(format!(
                "{directive:?} names application {app}, which the bundle does not have"
            ));
        }
    }
    problems
}

/// Resolves `app[:endpoint]` pairs to endpoints with the same interface and paired roles,
/// by the model's rule ([`charm_model::endpoints::resolve`]).
fn resolve_relation(apps: &[BundleApp], a: &str, b: &str) -> Result<BundleRelation, String> {
    let side = |spec| -> Result<Side<'_>, String> {
        let (app, endpoint) = endpoints::split(spec);
        let found = apps
            .iter()
            .find(|x| x.name == app)
            .ok_or_else(|| format!("relation {a} {b}: no application {app:?} in the bundle"))?;
        Ok(Side {
            app,
            endpoint,
            metadata: found.charm.metadata(),
        })
    };
    let (x, y, interface) = endpoints::resolve(side(a)?, side(b)?).map_err(|e| match e {
        StoreError::Invalid(why) => why,
        other => other.to_string(),
    })?;
    Ok(BundleRelation {
        a: (x.app, x.endpoint),
        b: (y.app, y.endpoint),
        interface,
    })
}
