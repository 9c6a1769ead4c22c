//! Bundles: the arguments that name one, `check`, and `export-bundle`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use serde_json::json;

use charm_host::bundle::{Bundle, BundleError, CHARM_DIR_ENV, DEFAULT_CHARM_DIR, LoadOptions};
use charm_host::charm::{CharmRuntime, RuntimeConfig};
use charm_host::store::OpenMode;

use super::REQUEST_TIMEOUT;
use super::output::{Format, print_table};
use super::store::StoreArgs;

/// The bundle, its overlays and where its charms are.
#[derive(clap::Args)]
pub struct BundleArgs {
    /// The bundle (Juju bundle YAML). Charm paths are relative to it; charm names are
    /// looked up in the charm directories.
    pub bundle: PathBuf,
    /// An overlay merged over the bundle, as `juju deploy --overlay` does; repeatable,
    /// merged in order.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    /// A directory of charm modules (`<name>.wasm`), for charms the bundle names by name;
    /// repeatable, searched in order, then the bundle's own directory.
    #[arg(long = "charm-dir", value_name = "DIR", env = CHARM_DIR_ENV, value_delimiter = ':', default_value = DEFAULT_CHARM_DIR)]
    pub charm_dirs: Vec<PathBuf>,
}

impl BundleArgs {
    pub fn load(&self, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        let options = LoadOptions {
            charm_dirs: self.charm_dirs.clone(),
            overlays: self.overlays.clone(),
        };
        Bundle::load_with(&self.bundle, &options, runtime)
    }
}

/// `run`'s bundle, which may be left out to run the model the store holds.
#[derive(clap::Args)]
pub struct RunBundleArgs {
    /// A bundle to deploy first (Juju bundle YAML); without one, the host runs the model
    /// the store already holds, as `deploy` and `relate` made it.
    pub bundle: Option<PathBuf>,
    /// An overlay merged over the bundle, as `juju deploy --overlay` does; repeatable,
    /// merged in order.
    #[arg(long = "overlay", value_name = "FILE", requires = "bundle")]
    pub overlays: Vec<PathBuf>,
    /// A directory of charm modules (`<name>.wasm`), for charms the bundle names by name;
    /// repeatable, searched in order, then the bundle's own directory.
    #[arg(long = "charm-dir", value_name = "DIR", env = CHARM_DIR_ENV, value_delimiter = ':', default_value = DEFAULT_CHARM_DIR)]
    pub charm_dirs: Vec<PathBuf>,
}

impl RunBundleArgs {
    /// The bundle's arguments, when a bundle is given.
    pub fn bundle(self) -> Option<BundleArgs> {
        let charm_dirs = self.charm_dirs;
        let overlays = self.overlays;
        self.bundle.map(|bundle| BundleArgs {
            bundle,
            overlays,
            charm_dirs,
        })
    }
}

/// `charm-host check BUNDLE`.
#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub bundle: BundleArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `charm-host export-bundle`.
#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `check`.
pub fn check(args: &CheckArgs) -> Result<()> {
    let (args, format) = (&args.bundle, args.format);
    let runtime = CharmRuntime::new(RuntimeConfig::default()).map_err(anyhow::Error::from)?;
    let bundle = match args.load(&runtime) {
        Ok(bundle) => bundle,
        Err(BundleError::Invalid { path, problems }) if format == Format::Json => {
            let out = json!({"bundle": path, "ok": false, "problems": problems});
            outln!("{}", serde_json::to_string_pretty(&out)?);
            bail!("{}: {} problems", path.display(), problems.len());
        }
        Err(e) => return Err(e.into()),
    };
    let units: u32 = bundle.applications.iter().map(|a| a.num_units).sum();
    if format == Format::Json {
        let apps: Vec<_> = bundle
            .applications
            .iter()
            .map(|a| {
                json!({
                    "name": a.name,
                    "charm": a.charm_ref,
                    "module": a.charm_path,
                    "charm_name": a.charm.metadata().name,
                    "units": a.num_units,
                    "options": a.options,
                })
            })
            .collect();
        let relations: Vec<_> = bundle
            .relations
            .iter()
            .map(|r| {
                json!({
                    "a": format!("{}:{}", r.a.0, r.a.1),
                    "b": format!("{}:{}", r.b.0, r.b.1),
                    "interface": r.interface,
                })
            })
            .collect();
        let out = json!({
            "bundle": bundle.path,
            "overlays": bundle.overlays,
            "ok": true,
            "applications": apps,
            "relations": relations,
            "warnings": bundle.warnings,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut rows = vec![
        ["App", "Charm", "Module", "Units", "Options"]
            .map(String::from)
            .to_vec(),
    ];
    for a in &bundle.applications {
        let options: Vec<String> = a
            .options
            .iter()
            .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
            .collect();
        rows.push(vec![
            a.name.clone(),
            a.charm_ref.clone(),
            a.charm_path.display().to_string(),
            a.num_units.to_string(),
            options.join(" "),
        ]);
    }
    print_table(&rows);
    if !bundle.relations.is_empty() {
        outln!();
        let mut rows = vec![["Relation", "", "Interface"].map(String::from).to_vec()];
        for r in &bundle.relations {
            rows.push(vec![
                format!("{}:{}", r.a.0, r.a.1),
                format!("{}:{}", r.b.0, r.b.1),
                r.interface.clone(),
            ]);
        }
        print_table(&rows);
    }
    if !bundle.warnings.is_empty() {
        outln!();
        outln!("Not applied by this host:");
        for w in &bundle.warnings {
            outln!("  {w}");
        }
    }
    outln!();
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    outln!(
        "{}: {}, {}, {}; {} not applied",
        bundle.path.display(),
        count(bundle.applications.len(), "application"),
        count(units as usize, "unit"),
        count(bundle.relations.len(), "relation"),
        count(bundle.warnings.len(), "key"),
    );
    Ok(())
}

/// Runs `export-bundle`.
pub async fn export(args: ExportArgs) -> Result<()> {
    let (store, format) = (
        args.store.open(OpenMode::ReadOnly, REQUEST_TIMEOUT).await?,
        args.format,
    );
    let bundle = charm_host::bundle::export(store.as_ref()).await?;
    if format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&bundle)?);
    } else {
        out!("{}", serde_yaml::to_string(&bundle)?);
    }
    Ok(())
}
