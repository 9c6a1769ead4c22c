//! `charm-host`: inspect charms, change a model with Juju's verbs, and run its units. Each
//! command is a file in `cli/`.

use std::io::IsTerminal;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

#[macro_use]
mod cli;

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
    /// lines, the charm's own included, carry its unit, hook, term, and for a relation hook
    /// its relation and remote unit, under `span`).
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

#[derive(Subcommand)]
enum Command {
    /// Shows the model: applications with their leaders, units with their status. Safe to
    /// run while a host is running on the same store.
    Status(cli::status::StatusArgs),
    /// Shows an application's pod spec (YAML; JSON with `--format json`).
    PodSpec(cli::status::PodSpecArgs),
    /// Simulations.
    #[command(subcommand)]
    Sim(cli::sim::SimCommand),
    /// Describes a charm: name, endpoints, config options, actions.
    Inspect(cli::inspect::InspectArgs),
    /// Builds a charm crate (default: the current directory) into its small, fast module
    /// (wasm32-wasip2, LTO, stripped; no edit of its Cargo.toml) and inspects it: the
    /// module's path and size, then what `inspect` prints.
    Build(cli::build::BuildArgs),
    /// Checks a bundle without deploying it: keys, charms, options, relations. Prints what
    /// would be deployed and what this host would not apply; exits 1 with every problem
    /// found otherwise.
    Check(cli::bundle::CheckArgs),
    /// Writes the model as a bundle (YAML; JSON with `--format json`) that `run` deploys
    /// into an empty store as the same model.
    ExportBundle(cli::bundle::ExportArgs),
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
    /// Runs the units of the model in the store (all, or those --units selects); given a
    /// bundle, deploys it first (what an earlier run of it already deployed is kept).
    Run(cli::run::RunArgs),
}

/// mimalloc serves the host's allocations (see [`charm_host::allocator`]).
#[global_allocator]
static ALLOCATOR: charm_host::allocator::Allocator = charm_host::allocator::Allocator;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An operator's error as anyhow words it, without the backtrace anyhow adds when
/// `RUST_BACKTRACE` is set: the error says what is wrong and where, the host's stack does not.
fn report(e: &anyhow::Error) -> String {
    let mut text = format!("Error: {e}");
    let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    match causes.as_slice() {
        [] => {}
        [cause] => text.push_str(&format!("\n\nCaused by:\n    {cause}")),
        _ => {
            text.push_str("\n\nCaused by:");
            for (n, cause) in causes.iter().enumerate() {
                text.push_str(&format!("\n    {n}: {cause}"));
            }
        }
    }
    text
}

fn run() -> Result<()> {
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
        Command::Inspect(args) => cli::inspect::inspect(&args),
        Command::Build(args) => cli::build::build(&args),
        Command::Check(args) => cli::bundle::check(&args),
        Command::ExportBundle(args) => block_on(cli::bundle::export(args)),
        Command::Status(args) => block_on(cli::status::status(args)),
        Command::PodSpec(args) => block_on(cli::status::pod_spec(args)),
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
        Command::Sim(command) => cli::sim::run(command),
        Command::Run(args) => args.run(),
    }
}

/// Runs an operator's command on a new runtime.
fn block_on(command: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(command)
}
