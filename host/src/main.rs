//! `charm-host`: inspect charms and run bundles of them.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
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
use charm_host::metrics::HostMetrics;
use charm_host::model::CharmMetadata;
use charm_host::store::faults::{FaultPlan, FaultyStore, WriteHistory};
use charm_host::store::{MeteredStore, ModelStatus, Store, StoreError};

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
    /// How log lines are written to stderr: text, or one JSON object per line (a hook's
    /// lines, the charm's own included, carry its unit, hook and term under `span`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum LogFormat {
    /// For people.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
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
    /// Builds a charm crate (default: the current directory) into its small, fast module
    /// (wasm32-wasip2, LTO, stripped; no edit of its Cargo.toml) and inspects it: the
    /// module's path and size, then what `inspect` prints.
    Build(cli::build::BuildArgs),
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
    /// Moves an application to a new charm module: checked against its relations;
    /// upgrade-charm, then config-changed, run on every unit.
    UpgradeCharm(cli::upgrade::UpgradeCharmArgs),
    /// Relates two applications (`app` or `app:endpoint` each).
    Relate(cli::relations::RelationArgs),
    /// Removes a relation: relation-departed, then relation-broken, on both sides.
    RemoveRelation(cli::relations::RelationArgs),
    /// Shows a unit: relation bags, leader data, stored state, queued hooks, hook error.
    ShowUnit(cli::show_unit::ShowUnitArgs),
    /// Retries a unit's failed hook (or skips it with --no-retry), as `juju resolved`.
    Resolved(cli::resolved::ResolvedArgs),
    /// Runs an action on a unit, its parameters checked against the charm's declaration
    /// first; --wait prints its results.
    RunAction(cli::actions::RunActionArgs),
    /// Shows an action: its parameters, status, results, failure and log.
    ShowAction(cli::actions::ShowActionArgs),
    /// Lists the actions an application's charm declares, with their parameters.
    Actions(cli::actions::ActionsArgs),
    /// Prints what charms logged (the log import, stdout and stderr), with unit, hook and
    /// time; --follow keeps printing.
    DebugLog(cli::debug_log::DebugLogArgs),
    /// Deploys a bundle and runs its units' hooks.
    Run {
        #[command(flatten)]
        bundle: BundleArgs,
        /// Stop when no hook is queued or running and every application with units here
        /// has a live leader that has run leader-elected (a lease left by a killed host is
        /// waited out), and print the status.
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
        /// How many of this host's units run a hook at once, in the order they asked; the
        /// others wait without a thread. A step of a hook that takes over 10 ms gives its
        /// place up, so this bounds throughput, never correctness. The pool of sandboxes
        /// holds at least this many hooks (64 at least). Default: eight per core.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
        hooks_at_once: Option<u32>,
        /// Record this host's leader-only commits (leader data, pod spec), each call and
        /// answer with its term and the system clock's time, as JSON lines appended to
        /// FILE: an audit of the leadership fence, to check for linearizability.
        #[arg(long, value_name = "FILE")]
        write_history: Option<PathBuf>,
        /// Seconds one hook may run; a hook still running then fails ("exceeded its time
        /// limit") and is retried like any failed hook. A leader's hook is also bounded by
        /// its leadership guarantee.
        #[arg(long, default_value_t = charm_host::charm::DEFAULT_HOOK_TIMEOUT.as_secs_f64())]
        hook_timeout: f64,
        /// MiB of linear memory one hook may use; a hook that asks for more fails ("out of
        /// memory").
        #[arg(long, default_value_t = RuntimeConfig::default().memory_limit >> 20)]
        hook_memory: usize,
        /// Serve /metrics (Prometheus), /healthz and /readyz on this address: `HOST:PORT`,
        /// or `PORT` alone for 127.0.0.1. Off by default.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
        /// With an etcd store: seconds between compactions of etcd's history, which keep
        /// about that much of it (the model's hosts take turns). 0: never, for an etcd
        /// that compacts itself (--auto-compaction-retention); an etcd that never compacts
        /// fills its quota and then refuses every write.
        #[arg(long, default_value_t = charm_host::store::COMPACTION_INTERVAL.as_secs_f64())]
        etcd_compaction_interval: f64,
    },
}

fn seconds(name: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("--{name} {s}: not a duration in seconds"))
}

/// `--hook-timeout`: a positive number of seconds.
fn hook_timeout_arg(s: f64) -> Result<Duration> {
    let timeout = seconds("hook-timeout", s)?;
    if timeout.is_zero() {
        bail!("--hook-timeout {s}: must be more than 0 seconds");
    }
    Ok(timeout)
}

/// `--hook-memory`: MiB, at least 1 and within wasm32's 4 GiB.
fn hook_memory_arg(mib: usize) -> Result<usize> {
    if !(1..=4096).contains(&mib) {
        bail!("--hook-memory {mib}: must be from 1 to 4096 MiB");
    }
    Ok(mib << 20)
}

/// mimalloc serves the host's allocations (see [`charm_host::allocator`]).
#[global_allocator]
static ALLOCATOR: charm_host::allocator::Allocator = charm_host::allocator::Allocator;

fn main() -> Result<()> {
    charm_host::allocator::configure();
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
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    match cli.log_format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
    }
    match cli.command {
        Command::Inspect { charm, format } => inspect(&charm, format),
        Command::Build(args) => cli::build::build(&args),
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
        Command::UpgradeCharm(args) => block_on(cli::upgrade::run(args)),
        Command::Relate(args) => block_on(cli::relations::relate(args)),
        Command::RemoveRelation(args) => block_on(cli::relations::remove(args)),
        Command::DebugLog(args) => block_on(cli::debug_log::run(args)),
        Command::ShowUnit(args) => block_on(cli::show_unit::run(args)),
        Command::Resolved(args) => block_on(cli::resolved::run(args)),
        Command::RunAction(args) => block_on(cli::actions::run_action(args)),
        Command::ShowAction(args) => block_on(cli::actions::show_action(args)),
        Command::Actions(args) => block_on(cli::actions::actions(args)),
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
            mut store,
            units,
            lease_duration,
            renew_interval,
            retry_period,
            drift_margin,
            update_status_interval,
            hooks_at_once,
            write_history,
            hook_timeout,
            hook_memory,
            metrics_addr,
            etcd_compaction_interval,
        } => {
            let leadership = LeadershipConfig {
                lease_duration: seconds("lease-duration", lease_duration)?,
                renew_interval: seconds("renew-interval", renew_interval)?,
                retry_period: seconds("retry-period", retry_period)?,
                drift_margin: seconds("drift-margin", drift_margin)?,
                request_timeout: seconds("retry-period", retry_period)?,
            };
            leadership.validate()?;
            let compaction = seconds("etcd-compaction-interval", etcd_compaction_interval)?;
            let places = hooks_at_once
                .map_or_else(charm_host::admission::places_for_this_machine, |n| {
                    n as usize
                });
            store.etcd_compaction = Some(compaction).filter(|every| !every.is_zero());
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(run(
                bundle,
                RunOptions {
                    until_idle: until_idle
                        .then(|| seconds("timeout", timeout))
                        .transpose()?,
                    format,
                    store,
                    units,
                    leadership,
                    update_status_interval: seconds(
                        "update-status-interval",
                        update_status_interval,
                    )?,
                    hooks_at_once: places,
                    write_history,
                    metrics_addr: metrics_addr.as_deref().map(metrics_addr_of).transpose()?,
                    runtime_config: RuntimeConfig {
                        hook_timeout: hook_timeout_arg(hook_timeout)?,
                        memory_limit: hook_memory_arg(hook_memory)?,
                        // Every admitted hook has a sandbox: none waits for one in its place.
                        max_concurrent_hooks: u32::try_from(places)
                            .unwrap_or(u32::MAX)
                            .max(RuntimeConfig::default().max_concurrent_hooks),
                        ..RuntimeConfig::default()
                    },
                },
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
    print_charm(&charm);
    Ok(())
}

/// A loaded charm as `inspect` shows it: name, contract, endpoints, options, actions.
fn print_charm(charm: &charm_host::charm::Charm) {
    let meta: &CharmMetadata = charm.metadata();
    outln!("Charm     {}", meta.name);
    outln!("Summary   {}", meta.summary);
    outln!("Contract  juju:charm@{}", charm.contract_version().as_str());
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
    if meta.actions.iter().any(|a| !a.params.is_empty()) {
        outln!();
        let mut rows = vec![vec![
            "Action".to_string(),
            "Parameter".into(),
            "Type".into(),
            "Default".into(),
            "Required".into(),
            "Description".into(),
        ]];
        for a in &meta.actions {
            for p in &a.params {
                let default = p
                    .default
                    .as_ref()
                    .map(|d| serde_json::to_string(d).unwrap_or_default())
                    .unwrap_or_default();
                rows.push(vec![
                    a.name.clone(),
                    p.name.clone(),
                    p.kind.as_str().into(),
                    default,
                    if p.required { "yes" } else { "no" }.into(),
                    p.description.clone(),
                ]);
            }
        }
        print_table(&rows);
    }
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

/// How `run` runs, from its flags.
struct RunOptions {
    /// With --until-idle: how long to wait for it.
    until_idle: Option<Duration>,
    format: Format,
    store: StoreArgs,
    units: Vec<String>,
    leadership: LeadershipConfig,
    update_status_interval: Duration,
    /// --hooks-at-once: how many units run a hook at once (default: eight per core).
    hooks_at_once: usize,
    write_history: Option<PathBuf>,
    metrics_addr: Option<SocketAddr>,
    /// The hooks' sandbox: --hook-timeout and --hook-memory.
    runtime_config: RuntimeConfig,
}

async fn run(bundle_args: BundleArgs, options: RunOptions) -> Result<()> {
    let RunOptions {
        until_idle,
        format,
        store,
        units,
        leadership,
        update_status_interval,
        hooks_at_once,
        write_history,
        metrics_addr,
        runtime_config,
    } = options;
    // Other hosts sharing a SQLite file queue hooks for our units unseen: look every half
    // second. etcd's watches wake the agents instead.
    let poll_interval = store.is_sqlite().then(|| Duration::from_millis(500));
    let margin = runtime_config.guarantee_margin;
    let runtime = CharmRuntime::new(runtime_config).map_err(anyhow::Error::from)?;
    // Served from the start: /healthz while the store is waited for, /readyz says why not.
    let observed = match metrics_addr {
        Some(addr) => Some(serve_metrics(addr, leadership.request_timeout).await?),
        None => None,
    };
    let metrics = observed.as_ref().map(|(metrics, _)| metrics.clone());
    // Everything is checked before anything is deployed.
    let bundle = bundle_args.load(&runtime)?;
    for warning in &bundle.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(metrics) = &metrics {
        let loaded: BTreeMap<_, _> = bundle
            .applications
            .iter()
            .map(|a| (&a.charm_path, a.charm.loaded_from()))
            .collect();
        loaded
            .into_values()
            .for_each(|from| metrics.charm_loaded(from));
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
    let store: Arc<dyn Store> = match write_history {
        Some(path) => {
            let history = WriteHistory::to_file(&path)
                .with_context(|| format!("--write-history {}", path.display()))?;
            Arc::new(
                FaultyStore::new(store, FaultPlan::none(0), None)
                    .with_write_history(Arc::new(history)),
            )
        }
        None => store,
    };
    let store: Arc<dyn Store> = match &metrics {
        Some(metrics) => Arc::new(MeteredStore::new(store, metrics.store())),
        None => store,
    };
    let config = ControllerConfig {
        leadership,
        hosted_units: (!units.is_empty()).then_some(units),
        poll_interval,
        metrics: metrics.clone(),
        // Hosts sharing the store may select the same units: one agent runs each.
        ownership: true,
        hooks_at_once: Some(hooks_at_once),
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
        metrics,
    ));
    if let Some((_, readiness)) = &observed {
        readiness.running(store.clone(), watching.abort_handle());
    }
    let progress = std::io::stderr().is_terminal();
    if let Some(timeout) = until_idle {
        let deadline = tokio::time::Instant::now() + timeout;
        // One wait throughout: it remembers the leases it has seen, to tell a live leader
        // on another host from a lease left by a killed one.
        let settled = controller.wait_settled();
        tokio::pin!(settled);
        loop {
            tokio::select! {
                _ = &mut settled => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    let pending = controller.pending();
                    let unsettled = controller.unsettled();
                    if progress {
                        match (pending, unsettled.first()) {
                            (0, Some(why)) => eprintln!("waiting for leadership: {why}"),
                            _ => eprintln!("running: {pending} hooks queued or running"),
                        }
                    }
                    if tokio::time::Instant::now() >= deadline {
                        print_status(&store, format).await?;
                        if pending == 0 && !unsettled.is_empty() {
                            bail!("not idle after {timeout:?}: leadership not settled: {}", unsettled.join("; "));
                        }
                        bail!("not idle after {timeout:?}: {pending} hooks still queued or running");
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
    let printed = print_status(&store, format).await;
    // A clean stop: the next host to run these units (or this one, run again) has them at
    // once, not after their leases lapse.
    controller.release_leases().await;
    printed
}

/// How often a running host looks for units added or removed while it runs.
const MODEL_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the host's agents in line with the model while it runs: units that operators add
/// (`add-unit`, `deploy`) get agents here if this host runs them; removed units' agents
/// stop. An application this host has no charm for is loaded from the module the store
/// keeps for it (from its record's path, for one deployed before the store kept modules).
/// Every `update_status`, update-status is queued on the units this host runs.
async fn watch_model(
    controller: Arc<Controller>,
    runtime: CharmRuntime,
    update_status: Duration,
    metrics: Option<Arc<HostMetrics>>,
) {
    let mut status_due = tokio::time::Instant::now() + update_status;
    let unloadable = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let load = move |app: &charm_host::model::ApplicationRecord, module: Option<&[u8]>| {
        let path = std::path::Path::new(&app.charm);
        let loaded = match module {
            Some(bytes) => runtime.load(path, bytes),
            None => runtime.load_file(path),
        };
        match loaded {
            Ok(charm) => {
                if let Some(metrics) = &metrics {
                    metrics.charm_loaded(charm.loaded_from());
                }
                Some(Arc::new(charm) as Arc<dyn charm_host::agent::HookExecutor>)
            }
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

/// `--metrics-addr`'s address: `HOST:PORT`, or a port alone (`9464`, `:9464`) for loopback.
fn metrics_addr_of(text: &str) -> Result<SocketAddr> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    use std::net::ToSocketAddrs as _;
    text.to_socket_addrs()
        .with_context(|| {
            format!("--metrics-addr {text}: not HOST:PORT or PORT (such as 127.0.0.1:9464)")
        })?
        .next()
        .with_context(|| format!("--metrics-addr {text}: names no address"))
}

/// Starts serving /metrics, /healthz and /readyz on `addr`; /readyz is unready until the
/// host runs ([`HostReadiness::running`]).
async fn serve_metrics(
    addr: SocketAddr,
    request_timeout: Duration,
) -> Result<(Arc<HostMetrics>, Arc<HostReadiness>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let metrics = HostMetrics::new();
    let readiness = Arc::new(HostReadiness {
        running: std::sync::OnceLock::new(),
        request_timeout,
    });
    tokio::spawn(charm_host::metrics::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
    ));
    tracing::info!("serving /metrics, /healthz and /readyz on http://{addr}");
    Ok((metrics, readiness))
}

/// Ready: the bundle is deployed, the task that keeps the agents in line with the model
/// runs, and the store answers within a request timeout.
struct HostReadiness {
    running: std::sync::OnceLock<(Arc<dyn Store>, tokio::task::AbortHandle)>,
    request_timeout: Duration,
}

impl HostReadiness {
    /// The host runs: its agents started on `store`; `watching` keeps them in line.
    fn running(&self, store: Arc<dyn Store>, watching: tokio::task::AbortHandle) {
        let _ = self.running.set((store, watching));
    }
}

impl charm_host::metrics::Readiness for HostReadiness {
    fn check(&self) -> charm_host::store::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let Some((store, watching)) = self.running.get() else {
                return Err("the bundle is not deployed yet".into());
            };
            if watching.is_finished() {
                return Err("the agents are no longer kept in line with the model".into());
            }
            match tokio::time::timeout(self.request_timeout, store.applications()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("the store: {e}")),
                Err(_) => Err(format!(
                    "the store did not answer within {:?}",
                    self.request_timeout
                )),
            }
        })
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

/// The most characters a table cell shows; `--format json` carries the whole value.
const TABLE_CELL_MAX: usize = 100;

/// A cell as a table shows it: on one line, control characters escaped (`\n`, `\u{1b}`),
/// cut with an ellipsis past [`TABLE_CELL_MAX`] characters.
fn table_cell(s: &str) -> String {
    let mut cell = String::new();
    let mut count = 0;
    for c in s.chars() {
        let shown: String = if c.is_control() {
            c.escape_debug().collect()
        } else {
            c.to_string()
        };
        let n = shown.chars().count();
        if count + n > TABLE_CELL_MAX {
            cell.push('…');
            break;
        }
        count += n;
        cell.push_str(&shown);
    }
    cell
}

fn print_table(rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| table_cell(c)).collect())
        .collect();
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
    for row in &rows {
        // Padded by hand: `format!`'s width is a u16, too small for no cell.
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let pad = widths[i].saturating_sub(cell.chars().count());
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        outln!("{}", cells.join("  ").trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_cell_is_one_line_and_cut_with_an_ellipsis() {
        assert_eq!(table_cell("ok"), "ok");
        assert_eq!(table_cell("a\nb\t\u{1b}[31m"), "a\\nb\\t\\u{1b}[31m");
        let long = table_cell(&"x".repeat(32 << 20));
        assert_eq!(long.chars().count(), TABLE_CELL_MAX + 1);
        assert!(long.ends_with('…'));
        // Cut on a character, never inside one.
        let wide = table_cell(&"é".repeat(1000));
        assert_eq!(wide.chars().count(), TABLE_CELL_MAX + 1);
    }
}
