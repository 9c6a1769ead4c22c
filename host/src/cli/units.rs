//! `deploy`, `add-unit`, `remove-unit` and `remove-application`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;

use charm_host::charm::{CharmRuntime, RuntimeConfig};
use charm_host::model::{ApplicationRecord, ConfigValue};
use charm_host::store::OpenMode;

use super::REQUEST_TIMEOUT;
use super::output::Format;
use super::{ModelArgs, hooks_json, print_hooks, print_json, settings};

/// `charm-host deploy CHARM.wasm [APP] [-n N] [--config KEY=VALUE...]`.
#[derive(clap::Args)]
pub struct DeployArgs {
    /// The charm's .wasm file.
    pub charm: PathBuf,
    /// The application's name; the charm's name if not given.
    pub app: Option<String>,
    /// How many units.
    #[arg(short = 'n', long = "num-units", default_value_t = 1)]
    pub units: u32,
    /// A config setting, read as the option's type; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `deploy`: the application, its units and its peer relations in one step. Hosts
/// running on the store start its units' agents.
pub async fn deploy(args: DeployArgs) -> Result<()> {
    let runtime = CharmRuntime::new(RuntimeConfig::default()).map_err(anyhow::Error::from)?;
    let charm = runtime
        .load_file(&args.charm)
        .with_context(|| format!("deploy {}", args.charm.display()))?;
    let metadata = charm.metadata().as_ref().clone();
    let name = args.app.clone().unwrap_or_else(|| metadata.name.clone());
    let path = std::fs::canonicalize(&args.charm)
        .with_context(|| format!("deploy {}", args.charm.display()))?;
    let config: BTreeMap<String, ConfigValue> = settings(&args.config)?
        .into_iter()
        .map(|(k, v)| (k, ConfigValue::String(v)))
        .collect();
    let record = ApplicationRecord {
        name: name.clone(),
        charm: path.display().to_string(),
        metadata,
        config,
        module: None,
    };
    let store = args
        .model
        .store
        .open(OpenMode::Create, REQUEST_TIMEOUT)
        .await?;
    // The store keeps the module, so every host runs these bytes wherever the file is.
    let module = store
        .put_module(charm.module())
        .await
        .with_context(|| format!("deploy {name}"))?;
    let record = ApplicationRecord {
        module: Some(module),
        ..record
    };
    let deployed = store
        .deploy(record, args.units)
        .await
        .with_context(|| format!("deploy {name}"))?;
    if args.model.format == Format::Json {
        return print_json(&json!({
            "application": name,
            "charm": path,
            "units": deployed.units,
            "peer_relations": deployed.relations.iter().map(|r| r.id).collect::<Vec<_>>(),
        }));
    }
    outln!(
        "Deployed {name} ({}) with {} unit{}: {}.",
        path.display(),
        deployed.units.len(),
        if deployed.units.len() == 1 { "" } else { "s" },
        deployed.units.join(", ")
    );
    Ok(())
}

/// `charm-host add-unit APP [-n N]`.
#[derive(clap::Args)]
pub struct AddUnitArgs {
    /// The application.
    pub app: String,
    /// How many units.
    #[arg(short = 'n', long = "num-units", default_value_t = 1)]
    pub units: u32,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `add-unit`: the units, their first hooks, and their relations' joins, in one step.
pub async fn add_unit(args: AddUnitArgs) -> Result<()> {
    let store = args.model.open().await?;
    let units = store
        .add_units(&args.app, args.units)
        .await
        .with_context(|| format!("add-unit {}", args.app))?;
    if args.model.format == Format::Json {
        return print_json(&json!({"application": args.app, "units": units}));
    }
    outln!("Added {}.", units.join(", "));
    Ok(())
}

/// `charm-host remove-unit UNIT...`.
#[derive(clap::Args)]
pub struct RemoveUnitArgs {
    /// The units, such as `discourse/2`.
    #[arg(required = true)]
    pub units: Vec<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `remove-unit`: relation-departed and relation-broken, stop and remove queued, in
/// Juju's order; each unit goes after its remove hook.
pub async fn remove_unit(args: RemoveUnitArgs) -> Result<()> {
    let store = args.model.open().await?;
    let queued = store
        .remove_units(args.units.clone())
        .await
        .with_context(|| format!("remove-unit {}", args.units.join(" ")))?;
    if args.model.format == Format::Json {
        return print_json(&json!({"removing": args.units, "hooks": hooks_json(&queued)}));
    }
    outln!("Removing {}.", args.units.join(", "));
    print_hooks(&queued);
    Ok(())
}

/// `charm-host remove-application APP [--force]`.
#[derive(clap::Args)]
pub struct RemoveApplicationArgs {
    /// The application.
    pub app: String,
    /// Remove its relations first, rather than refuse while it has any.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `remove-application`.
pub async fn remove_application(args: RemoveApplicationArgs) -> Result<()> {
    let store = args.model.open().await?;
    let removal = store
        .remove_application(&args.app, args.force)
        .await
        .with_context(|| format!("remove-application {}", args.app))?;
    if args.model.format == Format::Json {
        return print_json(&json!({
            "application": args.app,
            "units": removal.units,
            "relations": removal.relations.iter().map(|r| r.describe()).collect::<Vec<_>>(),
            "removed": removal.gone,
            "hooks": hooks_json(&removal.queued),
        }));
    }
    if removal.gone {
        outln!("Removed {}.", args.app);
        return Ok(());
    }
    for relation in &removal.relations {
        outln!("Removing relation {}.", relation.describe());
    }
    outln!(
        "Removing {} with {}; it goes with its last unit.",
        args.app,
        removal.units.join(", ")
    );
    print_hooks(&removal.queued);
    Ok(())
}
