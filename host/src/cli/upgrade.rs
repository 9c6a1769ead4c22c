//! `upgrade-charm`: moves an application to a new module.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;

use charm_host::charm::{CharmRuntime, RuntimeConfig};

use super::output::Format;
use super::{ModelArgs, hooks_json, print_hooks, print_json};

/// `charm-host upgrade-charm APP --path NEW.wasm`.
#[derive(clap::Args)]
pub struct UpgradeCharmArgs {
    /// The application.
    pub app: String,
    /// The new charm's .wasm file.
    #[arg(long)]
    pub path: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// A module's hash as shown in a table: its first 12 hex digits, as git shortens.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// Runs `upgrade-charm`: the new module kept in the store, then, in one step, checked
/// against the application's relations, its settings carried over, and upgrade-charm and
/// config-changed queued on every unit. Running hosts run each unit's next hook on it.
pub async fn run(args: UpgradeCharmArgs) -> Result<()> {
    let what = || format!("upgrade-charm {}", args.app);
    // A file that is not a charm is refused here, before anything is written.
    let runtime = CharmRuntime::new(RuntimeConfig::default()).map_err(anyhow::Error::from)?;
    let charm = runtime.load_file(&args.path).with_context(what)?;
    let path = std::fs::canonicalize(&args.path).with_context(what)?;
    let store = args.model.open().await?;
    // An unknown application is refused before its module is kept.
    store.application(&args.app).await.with_context(what)?;
    let upgraded = store
        .upgrade_charm(
            &args.app,
            &path.display().to_string(),
            charm.metadata().as_ref().clone(),
            charm.module(),
        )
        .await
        .with_context(what)?;
    if args.model.format == Format::Json {
        return print_json(&json!({
            "application": args.app,
            "charm": path,
            "old_module": upgraded.old_module,
            "new_module": upgraded.new_module,
            "options_added": upgraded.added,
            "settings_dropped": upgraded.dropped,
            "hooks": hooks_json(&upgraded.queued),
        }));
    }
    let old = upgraded.old_module.as_deref().map_or("none", short);
    outln!(
        "Upgraded {} to {}: module {old} -> {}.",
        args.app,
        path.display(),
        short(&upgraded.new_module)
    );
    if !upgraded.added.is_empty() {
        outln!(
            "Options added (at their defaults): {}.",
            upgraded.added.join(", ")
        );
    }
    if !upgraded.dropped.is_empty() {
        outln!(
            "Settings dropped (their option is gone or changed type): {}.",
            upgraded.dropped.join(", ")
        );
    }
    print_hooks(&upgraded.queued);
    Ok(())
}
