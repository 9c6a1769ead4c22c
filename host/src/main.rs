//! `charm-host`: inspect charms and run bundles of them.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use charm_host::bundle::{Bundle, BundleError, CHARM_DIR_ENV, DEFAULT_CHARM_DIR, LoadOptions};
use charm_host::charm::{CharmRuntime, RuntimeConfig};
use charm_host::controller::{Controller, ControllerConfig, ControllerError};
use charm_host::leadership::LeadershipConfig;
use charm_host::model::CharmMetadata;
use charm_host::store::{ModelStatus, Store, StoreError};

/// Writes to stdout; a reader that went away (`| head`) ends the program quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

/// `out!` with a newline.
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{ out!($($arg)*); out!("\n"); }};
}

mod cli;

use cli::store::StoreArgs;

#[derive(Parser)]
#[command(
    name = "charm-host",
    version,
    about = "Runs Juju charms compiled to WebAssembly components"
)]
struct Cli {
    /// More logging (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    /// A human table.
    Table,
    /// One JSON object.
    Json,
}

/// The bundle, its overlays and where its charms are.
#[derive(clap::Args)]
struct BundleArgs {
    /// The bundle (Juju bundle YAML). Charm paths are relative to it; charm names are
    /// looked up in the charm directories.
    bundle: PathBuf,
    /// An overlay merged over the bundle, as `juju deploy --overlay` does; repeatable,
    /// merged in order.
    #[arg(long = "overlay", value_name = "FILE")]
    overlays: Vec<PathBuf>,
    /// A directory of charm modules (`<name>.wasm`), for charms the bundle names by name;
    /// repeatable, searched in order, then the bundle's own directory.
    #[arg(long = "charm-dir", value_name = "DIR", env = CHARM_DIR_ENV, value_delimiter = ':', default_value = DEFAULT_CHARM_DIR)]
    charm_dirs: Vec<PathBuf>,
}

impl BundleArgs {
    fn load(&self, runtime: &CharmRuntime) -> Result<Bundle, BundleError> {
        let options = LoadOptions {
            charm_dirs: self.charm_dirs.clone(),
            overlays: self.overlays.clone(),
        };
        Bundle::load_with(&self.bundle, &options, runtime)
    }
}

#[derive(Subcommand)]
enum SimCommand {
    /// Leadership under injected faults, in virtual time: this host (`pinned`) against
    /// Juju 2.9's semantics (`juju29`).
    Leadership {
        /// Seeds everything: the same seed prints the same report.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Units of the application.
        #[arg(long, default_value_t = 3)]
        units: u32,
        /// Hooks to fire across all units (per profile and policy).
        #[arg(long, default_value_t = 10_000)]
        hooks: u64,
        /// none, raft-flux, timeouts, partition, leader-crash, clock-drift, or all.
        #[arg(long, default_value = "raft-flux")]
        faults: String,
        /// pinned, juju29, or both.
        #[arg(long, default_value = "pinned")]
        policy: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

/// The embedded default: a SQLite file under the current directory.
const DEFAULT_STORE: &str = "sqlite:.charm-host/model.db";

#[derive(Subcommand)]
enum Command {
    /// Shows the model: applications with their leaders, units with their status. Safe to
    /// run while a host is running on the same store.
    Status {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Shows an application's pod spec (YAML; JSON with `--format json`).
    PodSpec {
        /// The application.
        app: String,
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Simulations.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Describes a charm: name, endpoints, config options, actions.
    Inspect {
        /// The charm's .wasm file.
        charm: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Checks a bundle without deploying it: keys, charms, options, relations. Prints what
    /// would be deployed and what this host would not apply; exits 1 with every problem
    /// found otherwise.
    Check {
        #[command(flatten)]
        bundle: BundleArgs,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Writes the model as a bundle (YAML; JSON with `--format json`) that `run` deploys
    /// into an empty store as the same model.
    ExportBundle {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Shows an application's config, or changes it (`KEY=VALUE`, `--reset KEY`):
    /// config-changed runs on every unit.
    Config(cli::config::ConfigArgs),
    /// Deploys a charm as an application with its units; running hosts start them.
    Deploy(cli::units::DeployArgs),
    /// Adds units to an application.
    AddUnit(cli::units::AddUnitArgs),
    /// Removes units, in Juju's order: relation-departed, relation-broken, stop, remove.
    RemoveUnit(cli::units::RemoveUnitArgs),
    /// Removes an application; refused while it has relations, unless --force.
    RemoveApplication(cli::units::RemoveApplicationArgs),
    /// Relates two applications (`app` or `app:endpoint` each).
    Relate(cli::relations::RelationArgs),
    /// Removes a relation: relation-departed, then relation-broken, on both sides.
    RemoveRelation(cli::relations::RelationArgs),
    /// Shows a unit: relation bags, leader data, stored state, queued hooks, hook error.
    ShowUnit(cli::show_unit::ShowUnitArgs),
    /// Retries a unit's failed hook (or skips it with --no-retry), as `juju resolved`.
    Resolved(cli::resolved::ResolvedArgs),
    /// Prints what charms logged (the log import, stdout and stderr), with unit, hook and
    /// time; --follow keeps printing.
    DebugLog(cli::debug_log::DebugLogArgs),
    /// Deploys a bundle and runs its units' hooks.
    Run {
        #[command(flatten)]
        bundle: BundleArgs,
        /// Stop when no hook is queued or running, and print the status.
        #[arg(long)]
        until_idle: bool,
        /// With --until-idle: give up (exit 1) if not idle after this many seconds.
        #[arg(long, default_value_t = 120.0)]
        timeout: f64,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[command(flatten)]
        store: StoreArgs,
        /// Run agents only for these units (comma-separated: unit names such as `discourse/0`,
        /// application names, or globs such as `discourse/*`), so several hosts can share one
        /// store; the default is every unit, including units added while it runs.
        #[arg(long, value_delimiter = ',')]
        units: Vec<String>,
        /// Seconds a leadership lease is claimed for.
        #[arg(long, default_value_t = 15.0)]
        lease_duration: f64,
        /// Seconds between lease renewals.
        #[arg(long, default_value_t = 2.0)]
        renew_interval: f64,
        /// Longest seconds between retries of a lease claim; also how long one claim may
        /// take before it counts as unanswered.
        #[arg(long, default_value_t = 1.0)]
        retry_period: f64,
        /// Seconds of each lease not counted on, for clock drift and the renewal round trip.
        #[arg(long, default_value_t = 5.0)]
        drift_margin: f64,
        /// Seconds between update-status hooks on every unit this host runs (Juju's
        /// default: 5 minutes).
        #[arg(long, default_value_t = 300.0)]
        update_status_interval: f64,
    },
}

fn seconds(name: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("--{name} {s}: not a duration in seconds"))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // A simulation's warnings (deposed leaders, lapsed guarantees) are its subject, not news.
    let quiet = if matches!(cli.command, Command::Sim(_)) {
        "error"
    } else {
        "warn"
    };
    let default = match cli.verbose {
        0 => quiet,
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
        Command::Inspect { charm, format } => inspect(&charm, format),
        Command::Check { bundle, format } => check(&bundle, format),
        Command::ExportBundle { store, format } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                export_bundle(&store.open(false, REQUEST_TIMEOUT).await?, format).await
            })
        }
        Command::Status { store, format } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                print_status(&store.open(false, REQUEST_TIMEOUT).await?, format).await
            })
        }
        Command::PodSpec { app, store, format } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                print_pod_spec(&store.open(false, REQUEST_TIMEOUT).await?, &app, format).await
            })
        }
        Command::Config(args) => block_on(cli::config::run(args)),
        Command::Deploy(args) => block_on(cli::units::deploy(args)),
        Command::AddUnit(args) => block_on(cli::units::add_unit(args)),
        Command::RemoveUnit(args) => block_on(cli::units::remove_unit(args)),
        Command::RemoveApplication(args) => block_on(cli::units::remove_application(args)),
        Command::Relate(args) => block_on(cli::relations::relate(args)),
        Command::RemoveRelation(args) => block_on(cli::relations::remove(args)),
        Command::DebugLog(args) => block_on(cli::debug_log::run(args)),
        Command::ShowUnit(args) => block_on(cli::show_unit::run(args)),
        Command::Resolved(args) => block_on(cli::resolved::run(args)),
        Command::Sim(SimCommand::Leadership {
            seed,
            units,
            hooks,
            faults,
            policy,
            format,
        }) => sim_leadership(seed, units, hooks, &faults, &policy, format),
        Command::Run {
            bundle,
            until_idle,
            timeout,
            format,
            store,
            units,
            lease_duration,
            renew_interval,
            retry_period,
            drift_margin,
            update_status_interval,
        } => {
            let leadership = LeadershipConfig {
                lease_duration: seconds("lease-duration", lease_duration)?,
                renew_interval: seconds("renew-interval", renew_interval)?,
                retry_period: seconds("retry-period", retry_period)?,
                drift_margin: seconds("drift-margin", drift_margin)?,
                request_timeout: seconds("retry-period", retry_period)?,
            };
            leadership.validate()?;
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(run(
                bundle,
                until_idle
                    .then(|| seconds("timeout", timeout))
                    .transpose()?,
                format,
                &store,
                units,
                leadership,
                seconds("update-status-interval", update_status_interval)?,
            ))
        }
    }
}

/// Runs an operator's command on a new runtime.
fn block_on(command: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(command)
}

fn sim_leadership(
    seed: u64,
    units: u32,
    hooks: u64,
    faults: &str,
    policy: &str,
    format: Format,
) -> Result<()> {
    use charm_host::sim::{self, Policy, Profile, SimConfig};
    let profiles: Vec<Profile> = match faults {
        "all" => Profile::ALL.to_vec(),
        name => vec![Profile::parse(name).with_context(|| {
            format!("--faults {name}: unknown profile; one of none, raft-flux, timeouts, partition, leader-crash, clock-drift, all")
        })?],
    };
    let policies = match policy {
        "pinned" => vec![Policy::Pinned],
        "juju29" => vec![Policy::Juju29],
        "both" => vec![Policy::Pinned, Policy::Juju29],
        other => bail!("--policy {other}: one of pinned, juju29, both"),
    };
    if units == 0 {
        bail!("--units must be at least 1");
    }
    let mut reports = Vec::new();
    let mut violations = Vec::new();
    for policy in &policies {
        for profile in &profiles {
            let started = std::time::Instant::now();
            let report = sim::run(&SimConfig::new(seed, units, hooks, *profile, *policy));
            let wall = started.elapsed().as_secs_f64();
            // Wall time goes to stderr: the report itself is the same for the same seed.
            eprintln!(
                "{} {}: {} hooks in {:.2} s ({:.0} hooks/s)",
                policy.name(),
                profile.name(),
                report.measured.hooks_run,
                wall,
                report.measured.hooks_run as f64 / wall.max(1e-9)
            );
            if *policy == Policy::Pinned {
                violations.extend(
                    sim::invariant_violations(&report)
                        .into_iter()
                        .map(|v| format!("{}: {v}", profile.name())),
                );
            }
            reports.push(report);
        }
    }
    if format == Format::Json {
        if reports.len() == 1 {
            outln!("{}", serde_json::to_string_pretty(&reports[0])?);
        } else {
            outln!("{}", serde_json::to_string_pretty(&reports)?);
        }
    } else {
        let mut rows = vec![
            [
                "Policy",
                "Faults",
                "Hooks",
                "Leader hooks",
                "Inconsistent",
                "Interrupted",
                "Split brain",
                "Stale commits",
                "Changes",
                "Spurious",
                "Leaderless s",
                "Failover s (median/max)",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for r in &reports {
            let m = &r.measured;
            let failover = match (r.failover_median_seconds, r.failover_max_seconds) {
                (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
                _ => "-".into(),
            };
            rows.push(vec![
                r.policy.name().into(),
                r.profile.name().into(),
                m.hooks_run.to_string(),
                m.leader_hooks.to_string(),
                m.inconsistent_hooks.to_string(),
                m.interrupted_hooks.to_string(),
                m.overlapping_guarantees.to_string(),
                m.stale_commits_accepted.to_string(),
                m.leadership_changes.to_string(),
                m.spurious_leadership_changes.to_string(),
                format!("{:.1}", m.leaderless_seconds),
                failover,
            ]);
        }
        print_table(&rows);
    }
    if !violations.is_empty() {
        bail!(
            "the pinned policy broke its invariants:\n  {}",
            violations.join("\n  ")
        );
    }
    Ok(())
}

fn inspect(path: &std::path::Path, format: Format) -> Result<()> {
    let runtime = CharmRuntime::new(RuntimeConfig::default()).map_err(anyhow::Error::from)?;
    let charm = runtime.load_file(path)?;
    let meta: &CharmMetadata = charm.metadata();
    if format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(meta)?);
        return Ok(());
    }
    outln!("Charm    {}", meta.name);
    outln!("Summary  {}", meta.summary);
    outln!();
    let mut rows = vec![vec![
        "Endpoint".to_string(),
        "Role".into(),
        "Interface".into(),
    ]];
    for e in &meta.relations {
        rows.push(vec![
            e.name.clone(),
            format!("{:?}", e.role).to_lowercase(),
            e.interface.clone(),
        ]);
    }
    print_table(&rows);
    outln!();
    let mut rows = vec![vec![
        "Option".to_string(),
        "Type".into(),
        "Default".into(),
        "Description".into(),
    ]];
    for o in &meta.config {
        let default = o
            .default
            .as_ref()
            .map(|d| serde_json::to_string(d).unwrap_or_default())
            .unwrap_or_default();
        rows.push(vec![
            o.name.clone(),
            o.kind.as_str().into(),
            default,
            o.description.clone(),
        ]);
    }
    print_table(&rows);
    if !meta.actions.is_empty() {
        outln!();
        let mut rows = vec![vec!["Action".to_string(), "Description".into()]];
        for a in &meta.actions {
            rows.push(vec![a.name.clone(), a.description.clone()]);
        }
        print_table(&rows);
    }
    Ok(())
}

/// How long `status` and `pod-spec` wait for an etcd request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

fn check(args: &BundleArgs, format: Format) -> Result<()> {
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

async fn export_bundle(store: &Arc<dyn Store>, format: Format) -> Result<()> {
    let bundle = charm_host::bundle::export(store.as_ref()).await?;
    if format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&bundle)?);
    } else {
        out!("{}", serde_yaml::to_string(&bundle)?);
    }
    Ok(())
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

async fn run(
    bundle_args: BundleArgs,
    // With --until-idle: how long to wait for it.
    until_idle: Option<Duration>,
    format: Format,
    store: &StoreArgs,
    units: Vec<String>,
    leadership: LeadershipConfig,
    update_status_interval: Duration,
) -> Result<()> {
    // Other hosts sharing a SQLite file queue hooks for our units unseen: look every half
    // second. etcd's watches wake the agents instead.
    let poll_interval = store.is_sqlite().then(|| Duration::from_millis(500));
    let runtime_config = RuntimeConfig::default();
    let margin = runtime_config.guarantee_margin;
    let runtime = CharmRuntime::new(runtime_config).map_err(anyhow::Error::from)?;
    // Everything is checked before anything is deployed.
    let bundle = bundle_args.load(&runtime)?;
    for warning in &bundle.warnings {
        tracing::warn!("{warning}");
    }
    // A store that cannot be reached yet (etcd restarting, say) is waited for: the host
    // comes up with it rather than exit. With --until-idle, for --timeout at most.
    let mut waiting = StoreWait::new(until_idle);
    let request_timeout = leadership.request_timeout;
    let store = loop {
        match store.open(true, request_timeout).await {
            Ok(store) => break store,
            Err(e) => waiting.retry(e).await?,
        }
    };
    let config = ControllerConfig {
        leadership,
        hosted_units: (!units.is_empty()).then_some(units),
        poll_interval,
        ..Default::default()
    };
    let controller = Arc::new(Controller::new(store.clone(), margin, config)?);
    // Deploying again resumes what an interrupted attempt did.
    while let Err(e) = bundle.deploy(&controller).await {
        waiting.retry(e.into()).await?;
    }
    let watching = tokio::spawn(watch_model(
        controller.clone(),
        runtime.clone(),
        update_status_interval,
    ));
    let progress = std::io::stderr().is_terminal();
    if let Some(timeout) = until_idle {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            tokio::select! {
                _ = controller.wait_idle() => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if progress {
                        eprintln!("running: {} hooks queued or running", controller.pending());
                    }
                    if tokio::time::Instant::now() >= deadline {
                        print_status(&store, format).await?;
                        bail!("not idle after {timeout:?}: {} hooks still queued or running", controller.pending());
                    }
                }
            }
        }
    } else {
        if progress {
            eprintln!("running; Ctrl-C to stop");
        }
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = terminate.recv() => {}
        }
        // Hand leadership over at once rather than after the lease lapses.
        controller.release_leases().await;
    }
    watching.abort();
    controller.shutdown();
    print_status(&store, format).await
}

/// How often a running host looks for units added or removed while it runs.
const MODEL_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the host's agents in line with the model while it runs: units that operators add
/// (`add-unit`, `deploy`) get agents here if this host runs them; removed units' agents
/// stop. An application this host has no charm for is loaded from its record's module path.
/// Every `update_status`, update-status is queued on the units this host runs.
async fn watch_model(controller: Arc<Controller>, runtime: CharmRuntime, update_status: Duration) {
    let mut status_due = tokio::time::Instant::now() + update_status;
    let unloadable = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let load = move |app: &charm_host::model::ApplicationRecord| {
        match runtime.load_file(std::path::Path::new(&app.charm)) {
            Ok(charm) => Some(Arc::new(charm) as Arc<dyn charm_host::agent::HookExecutor>),
            Err(e) => {
                // Said once per application, not every second.
                if unloadable
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(app.name.clone())
                {
                    tracing::warn!(app = %app.name, "cannot load its charm here: {e}");
                }
                None
            }
        }
    };
    loop {
        tokio::time::sleep(MODEL_WATCH_INTERVAL).await;
        match controller.adopt(&load).await {
            Ok(started) if !started.is_empty() => {
                tracing::info!(?started, "started agents for new units");
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("looking for new units: {e}"),
        }
        if tokio::time::Instant::now() >= status_due {
            status_due += update_status;
            let fired = controller.update_status().await;
            tracing::debug!(?fired, "update-status queued");
        }
    }
}

/// Retries while the store is unavailable, with a growing pause, until an optional limit.
struct StoreWait {
    started: tokio::time::Instant,
    limit: Option<Duration>,
    pause: Duration,
}

impl StoreWait {
    fn new(limit: Option<Duration>) -> Self {
        StoreWait {
            started: tokio::time::Instant::now(),
            limit,
            pause: Duration::from_millis(250),
        }
    }

    /// Returns after a pause if `error` is the store being unavailable and time is left;
    /// returns `error` otherwise.
    async fn retry(&mut self, error: anyhow::Error) -> Result<()> {
        let unavailable = error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<StoreError>(),
                Some(StoreError::Unavailable(_))
            ) || matches!(
                cause.downcast_ref::<ControllerError>(),
                Some(ControllerError::Store(StoreError::Unavailable(_)))
            ) || matches!(
                cause.downcast_ref::<BundleError>(),
                Some(BundleError::Deploy(ControllerError::Store(
                    StoreError::Unavailable(_)
                )))
            )
        });
        let out_of_time = self
            .limit
            .is_some_and(|limit| self.started.elapsed() + self.pause > limit);
        if !unavailable || out_of_time {
            return Err(error);
        }
        tracing::warn!("{error:#}; retrying in {:?}", self.pause);
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_secs(5));
        Ok(())
    }
}

async fn print_status(store: &Arc<dyn Store>, format: Format) -> Result<()> {
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
        "Version".into(),
        "Message".into(),
    ]];
    for u in &status.units {
        rows.push(vec![
            u.name.clone(),
            u.status.kind.as_str().into(),
            if u.leader { "*".into() } else { String::new() },
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

fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        outln!("{}", cells.join("  ").trim_end());
    }
}
