//! `sim`: the leadership protocol under injected faults, in virtual time.

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use super::output::{Format, print_table};

/// The simulations.
#[derive(Subcommand)]
pub enum SimCommand {
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

/// Runs a simulation.
pub fn run(command: SimCommand) -> Result<()> {
    match command {
        SimCommand::Leadership {
            seed,
            units,
            hooks,
            faults,
            policy,
            format,
        } => sim_leadership(seed, units, hooks, &faults, &policy, format),
    }
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
