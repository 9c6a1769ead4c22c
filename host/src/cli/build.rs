//! `charm-host build [PATH]`: a charm crate built into its module, then inspected.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;

use charm_host::build::{BuildRequest, build as build_charm};
use charm_host::charm::{CharmRuntime, RuntimeConfig};

use super::output::Format;

/// Which crate, where to build it, and how to print the answer.
#[derive(clap::Args)]
pub struct BuildArgs {
    /// The charm crate: its directory or its Cargo.toml.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Where cargo builds (default: where cargo would, CARGO_TARGET_DIR or the workspace's
    /// target/); the module is under wasm32-wasip2/charm/.
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Builds, loads the module as `run` would, and prints it.
pub fn build(args: &BuildArgs) -> Result<()> {
    let mut request = BuildRequest::new(&args.path);
    if let Some(dir) = &args.target_dir {
        request = request.target_dir(dir);
    }
    let built = build_charm(&request)?;
    let runtime = CharmRuntime::new(RuntimeConfig::default()).map_err(anyhow::Error::from)?;
    let charm = runtime
        .load_file(&built.module)
        .with_context(|| format!("the built module of {} does not load", args.path.display()))?;
    if args.format == Format::Json {
        let out = json!({
            "module": built.module,
            "size": built.size,
            "contract": format!("juju:charm@{}", charm.contract_version().as_str()),
            "metadata": charm.metadata().as_ref(),
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!("Module    {}", built.module.display());
    outln!(
        "Size      {} bytes ({:.1} KiB)",
        built.size,
        built.size as f64 / 1024.0
    );
    super::inspect::print_charm(&charm);
    Ok(())
}
