//! `run-action`, `show-action`, `actions`: an operator's actions on units, and the actions
//! a charm declares.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use charm_host::model::{ActionRecord, ActionState, ConfigValue};

use super::debug_log::timestamp;
use super::output::{Format, print_table};
use super::{ModelArgs, print_json, settings};

/// `charm-host run-action UNIT ACTION [KEY=VALUE...] [--wait SECONDS]`.
#[derive(clap::Args)]
pub struct RunActionArgs {
    /// The unit, such as `kv/0`.
    pub unit: String,
    /// The action, as the charm declares it (`charm-host actions APP` lists them).
    pub action: String,
    /// Parameters. Values are read as the parameter's declared type.
    #[arg(value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Wait up to this many seconds for the action to end and print its results; exits
    /// non-zero if it failed or did not end in time.
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `charm-host show-action ID`.
#[derive(clap::Args)]
pub struct ShowActionArgs {
    /// The action's id, as `run-action` printed it.
    pub id: u64,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `charm-host actions APP`.
#[derive(clap::Args)]
pub struct ActionsArgs {
    /// The application.
    pub app: String,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// How often `run-action --wait` looks at the action.
const WAIT_INTERVAL: Duration = Duration::from_millis(200);

/// Runs `run-action`.
pub async fn run_action(args: RunActionArgs) -> Result<()> {
    let wait = match args.wait {
        Some(secs) if !(secs.is_finite() && secs >= 0.0) => {
            bail!("--wait {secs}: expected a number of seconds, 0 or more")
        }
        wait => wait.map(Duration::from_secs_f64),
    };
    let store = args.model.open().await?;
    let params: BTreeMap<String, ConfigValue> = settings(&args.params)?
        .into_iter()
        .map(|(k, v)| (k, ConfigValue::String(v)))
        .collect();
    let doing = || format!("run-action {} {}", args.unit, args.action);
    let queued = store
        .run_action(&args.unit, &args.action, params, now_ms())
        .await
        .with_context(doing)?;
    let id = queued.action.id;
    let Some(wait) = wait else {
        if args.model.format == Format::Json {
            return print_json(&action_json(&queued.action));
        }
        outln!(
            "Action {id} queued on {}: {}. See it with: charm-host show-action {id}",
            args.unit,
            args.action
        );
        return Ok(());
    };
    let deadline = Instant::now() + wait;
    let action = loop {
        let action = store.action(id).await.with_context(doing)?;
        if action.state.is_final() || Instant::now() >= deadline {
            break action;
        }
        tokio::time::sleep(WAIT_INTERVAL.min(deadline - Instant::now())).await;
    };
    print_action(&action, args.model.format)?;
    match action.state {
        ActionState::Completed => Ok(()),
        ActionState::Failed => bail!(
            "action {id} on {} failed: {}",
            action.unit,
            action.failure.as_deref().unwrap_or("no reason given")
        ),
        state => bail!(
            "action {id} on {} is still {} after {}s",
            action.unit,
            state.as_str(),
            wait.as_secs_f64()
        ),
    }
}

/// Runs `show-action`.
pub async fn show_action(args: ShowActionArgs) -> Result<()> {
    let store = args.model.open_read_only().await?;
    let action = store
        .action(args.id)
        .await
        .with_context(|| format!("show-action {}", args.id))?;
    print_action(&action, args.model.format)
}

/// Runs `actions`.
pub async fn actions(args: ActionsArgs) -> Result<()> {
    let store = args.model.open_read_only().await?;
    let record = store
        .application(&args.app)
        .await
        .with_context(|| format!("actions {}", args.app))?;
    let actions = &record.metadata.actions;
    if args.model.format == Format::Json {
        return print_json(&json!({
            "application": record.name,
            "actions": actions,
        }));
    }
    if actions.is_empty() {
        outln!("{}: its charm declares no actions.", record.name);
        return Ok(());
    }
    let mut rows = vec![
        ["Action", "Parameters", "Description"]
            .map(String::from)
            .to_vec(),
    ];
    for action in actions {
        let params: Vec<String> = action
            .params
            .iter()
            .map(|p| {
                let how = match (&p.default, p.required) {
                    (Some(default), _) => format!(", default {}", shown(default)),
                    (None, true) => ", required".to_string(),
                    (None, false) => String::new(),
                };
                format!("{} ({}{how})", p.name, p.kind.as_str())
            })
            .collect();
        rows.push(vec![
            action.name.clone(),
            if params.is_empty() {
                "-".to_string()
            } else {
                params.join(", ")
            },
            action.description.clone(),
        ]);
    }
    print_table(&rows);
    Ok(())
}

fn shown(value: &ConfigValue) -> String {
    match value {
        ConfigValue::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn action_json(action: &ActionRecord) -> serde_json::Value {
    let at = |ms: Option<u64>| ms.map(timestamp);
    json!({
        "id": action.id,
        "unit": action.unit,
        "action": action.name,
        "params": action.params,
        "status": action.state.as_str(),
        "results": action.results,
        "failure": action.failure,
        "log": action.log,
        "enqueued": timestamp(action.enqueued_ms),
        "started": at(action.started_ms),
        "completed": at(action.completed_ms),
    })
}

/// An action as a table of its fields, then its results and log; or as JSON.
fn print_action(action: &ActionRecord, format: Format) -> Result<()> {
    if format == Format::Json {
        return print_json(&action_json(action));
    }
    let params: Vec<String> = action
        .params
        .iter()
        .map(|(k, v)| format!("{k}={}", shown(v)))
        .collect();
    let at = |ms: Option<u64>| ms.map_or_else(|| "-".to_string(), timestamp);
    let mut rows = vec![
        vec!["Id".to_string(), action.id.to_string()],
        vec!["Unit".into(), action.unit.clone()],
        vec!["Action".into(), action.name.clone()],
        vec!["Params".into(), params.join(" ")],
        vec!["Status".into(), action.state.as_str().into()],
        vec!["Enqueued".into(), timestamp(action.enqueued_ms)],
        vec!["Started".into(), at(action.started_ms)],
        vec!["Completed".into(), at(action.completed_ms)],
    ];
    if let Some(failure) = &action.failure {
        rows.push(vec!["Failure".into(), failure.clone()]);
    }
    print_table(&rows);
    if !action.results.is_empty() {
        outln!();
        let mut rows = vec![vec!["Result".to_string(), "Value".into()]];
        rows.extend(
            action
                .results
                .iter()
                .map(|(k, v)| vec![k.clone(), v.clone()]),
        );
        print_table(&rows);
    }
    if !action.log.is_empty() {
        outln!();
        outln!("Log:");
        for line in &action.log {
            outln!("  {line}");
        }
    }
    Ok(())
}

/// Now, in milliseconds since the UNIX epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
