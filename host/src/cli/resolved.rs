//! `resolved`: a unit in error runs its failed hook again, or skips it.

use anyhow::{Context, Result};
use serde_json::json;

use super::output::Format;
use super::{ModelArgs, print_json};

/// `charm-host resolved UNIT [--no-retry]`.
#[derive(clap::Args)]
pub struct ResolvedArgs {
    /// The unit in error.
    pub unit: String,
    /// Skip the failed hook instead of running it again.
    #[arg(long)]
    pub no_retry: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `resolved`: the unit's agent takes up its queue again within a second.
pub async fn run(args: ResolvedArgs) -> Result<()> {
    let store = args.model.open().await?;
    let hook = store
        .resolve_unit(&args.unit, !args.no_retry)
        .await
        .with_context(|| format!("resolved {}", args.unit))?;
    let hook = hook.map(|h| h.name());
    if args.model.format == Format::Json {
        return print_json(&json!({
            "unit": args.unit,
            "hook": hook,
            "retry": !args.no_retry,
        }));
    }
    match (hook, args.no_retry) {
        (Some(hook), false) => outln!("{}: {hook} will run again.", args.unit),
        (Some(hook), true) => outln!("{}: {hook} skipped.", args.unit),
        (None, _) => outln!("{}: resolved; no hook was waiting.", args.unit),
    }
    Ok(())
}
