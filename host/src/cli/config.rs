//! `config`: shows an application's settings, or changes them.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::json;

use charm_host::model::ConfigValue;

use super::output::{Format, print_table};
use super::{ModelArgs, hooks_json, print_hooks, print_json, settings};

/// `charm-host config APP [KEY=VALUE...] [--reset KEY...]`.
#[derive(clap::Args)]
pub struct ConfigArgs {
    /// The application.
    pub app: String,
    /// Settings to change. Values are read as the option's type (int, float, boolean,
    /// string).
    #[arg(value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Options to reset to the charm's default; repeatable.
    #[arg(long = "reset", value_name = "KEY")]
    pub reset: Vec<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

fn shown(value: Option<&ConfigValue>) -> String {
    match value {
        Some(ConfigValue::String(s)) => s.clone(),
        Some(other) => serde_json::to_string(other).unwrap_or_default(),
        None => String::new(),
    }
}

/// Runs `config`.
pub async fn run(args: ConfigArgs) -> Result<()> {
    if args.settings.is_empty() && args.reset.is_empty() {
        let store = args.model.open_read_only().await?;
        return show(&args, store.as_ref()).await;
    }
    let store = args.model.open().await?;
    let set: BTreeMap<String, ConfigValue> = settings(&args.settings)?
        .into_iter()
        .map(|(k, v)| (k, ConfigValue::String(v)))
        .collect();
    let applied = store
        .set_config(&args.app, set, args.reset.clone())
        .await
        .with_context(|| format!("config {}", args.app))?;
    if args.model.format == Format::Json {
        return print_json(&json!({
            "application": args.app,
            "changed": applied.changed,
            "hooks": hooks_json(&applied.queued),
        }));
    }
    if applied.changed.is_empty() {
        outln!("{}: config unchanged.", args.app);
        return Ok(());
    }
    outln!("{}: changed {}.", args.app, applied.changed.join(", "));
    if applied.queued.is_empty() {
        // Coalesced into the config-changed already waiting on each unit.
        outln!("config-changed is already queued on every unit.");
    } else {
        print_hooks(&applied.queued);
    }
    Ok(())
}

async fn show(args: &ConfigArgs, store: &dyn charm_host::store::Store) -> Result<()> {
    let record = store
        .application(&args.app)
        .await
        .with_context(|| format!("config {}", args.app))?;
    let effective = record.effective_config();
    if args.model.format == Format::Json {
        let options: BTreeMap<_, _> = record
            .metadata
            .config
            .iter()
            .map(|o| {
                let source = if record.config.contains_key(&o.name) {
                    "user"
                } else {
                    "default"
                };
                (
                    o.name.clone(),
                    json!({
                        "type": o.kind.as_str(),
                        "value": effective.get(&o.name),
                        "default": o.default,
                        "source": source,
                        "description": o.description,
                    }),
                )
            })
            .collect();
        return print_json(&json!({
            "application": record.name,
            "charm": record.charm,
            "settings": options,
        }));
    }
    let mut rows = vec![
        ["Option", "Type", "Value", "Source", "Description"]
            .map(String::from)
            .to_vec(),
    ];
    for o in &record.metadata.config {
        let source = if record.config.contains_key(&o.name) {
            "user"
        } else if o.default.is_some() {
            "default"
        } else {
            "unset"
        };
        rows.push(vec![
            o.name.clone(),
            o.kind.as_str().into(),
            shown(effective.get(&o.name)),
            source.into(),
            o.description.clone(),
        ]);
    }
    print_table(&rows);
    Ok(())
}
