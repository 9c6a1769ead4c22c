//! `status` and `pod-spec`: the model as it is, safe to read while hosts run on it.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::json;

use charm_host::store::{ModelStatus, OpenMode, Store};

use super::REQUEST_TIMEOUT;
use super::output::{Format, print_table};
use super::store::StoreArgs;

/// `charm-host status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `charm-host pod-spec APP`.
#[derive(clap::Args)]
pub struct PodSpecArgs {
    /// The application.
    pub app: String,
    #[command(flatten)]
    pub store: StoreArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `status`.
pub async fn status(args: StatusArgs) -> Result<()> {
    let store = args.store.open(OpenMode::ReadOnly, REQUEST_TIMEOUT).await?;
    print_status(&store, args.format).await
}

/// Runs `pod-spec`.
pub async fn pod_spec(args: PodSpecArgs) -> Result<()> {
    let store = args.store.open(OpenMode::ReadOnly, REQUEST_TIMEOUT).await?;
    print_pod_spec(&store, &args.app, args.format).await
}

async fn print_pod_spec(store: &Arc<dyn Store>, app: &str, format: Format) -> Result<()> {
    let Some(spec) = store
        .pod_spec(app)
        .await
        .with_context(|| format!("application {app}"))?
    else {
        bail!("application {app} has no pod spec yet");
    };
    if format == Format::Json {
        let out = json!({"application": app, "revision": spec.revision, "spec": spec.spec, "k8s_resources": spec.k8s_resources});
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        outln!("# {app}, revision {}", spec.revision);
        out!("{}", serde_yaml::to_string(&spec.spec)?);
        if let Some(res) = &spec.k8s_resources {
            outln!("---\n# k8s resources");
            out!("{}", serde_yaml::to_string(res)?);
        }
    }
    Ok(())
}

/// Prints the model's applications, units and pod specs.
pub async fn print_status(store: &Arc<dyn Store>, format: Format) -> Result<()> {
    let status: ModelStatus = store.status().await?;
    let mut pod_specs = BTreeMap::new();
    for app in &status.applications {
        if let Some(spec) = store.pod_spec(&app.name).await? {
            pod_specs.insert(app.name.clone(), spec);
        }
    }
    if format == Format::Json {
        let units: Vec<_> = status
            .units
            .iter()
            .map(|u| {
                json!({
                    "name": u.name,
                    "leader": u.leader,
                    "host": u.host,
                    "status": u.status.kind.as_str(),
                    "message": u.status.message,
                    "workload_version": u.workload_version,
                })
            })
            .collect();
        let apps: Vec<_> = status
            .applications
            .iter()
            .map(|a| {
                json!({
                    "name": a.name,
                    "charm": a.charm,
                    "leader": a.leader,
                    "term": a.term,
                    "status": a.status.kind.as_str(),
                    "message": a.status.message,
                    "pod_spec_revision": a.pod_spec_revision,
                })
            })
            .collect();
        let specs: BTreeMap<_, _> = pod_specs
            .iter()
            .map(|(app, p)| (app.clone(), json!({"revision": p.revision, "spec": p.spec, "k8s_resources": p.k8s_resources})))
            .collect();
        let out = json!({"applications": apps, "units": units, "pod_specs": specs});
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut rows = vec![vec![
        "App".to_string(),
        "Leader".into(),
        "Term".into(),
        "Pod spec".into(),
        "Charm".into(),
    ]];
    for a in &status.applications {
        rows.push(vec![
            a.name.clone(),
            a.leader.clone().unwrap_or_else(|| "-".into()),
            a.term.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            a.pod_spec_revision
                .map(|r| format!("revision {r}"))
                .unwrap_or_else(|| "-".into()),
            a.charm.clone(),
        ]);
    }
    print_table(&rows);
    outln!();
    let mut rows = vec![vec![
        "Unit".to_string(),
        "Workload".into(),
        "Leader".into(),
        "Host".into(),
        "Version".into(),
        "Message".into(),
    ]];
    for u in &status.units {
        rows.push(vec![
            u.name.clone(),
            u.status.kind.as_str().into(),
            if u.leader { "*".into() } else { String::new() },
            u.host.clone().unwrap_or_else(|| "-".into()),
            u.workload_version.clone(),
            u.status.message.clone(),
        ]);
    }
    print_table(&rows);
    for (app, spec) in &pod_specs {
        outln!();
        outln!("Pod spec of {app} (revision {}):", spec.revision);
        out!("{}", serde_yaml::to_string(&spec.spec)?);
        if let Some(res) = &spec.k8s_resources {
            outln!("k8s resources of {app}:");
            out!("{}", serde_yaml::to_string(res)?);
        }
    }
    Ok(())
}
