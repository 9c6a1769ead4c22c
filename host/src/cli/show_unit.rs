//! `show-unit`: a unit's relation bags, leader data, stored state, queued hooks and last
//! hook error.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::json;

use charm_host::model::Bag;

use super::output::{Format, print_table};
use super::{ModelArgs, print_json};

/// `charm-host show-unit UNIT`.
#[derive(clap::Args)]
pub struct ShowUnitArgs {
    /// The unit, such as `discourse/0`.
    pub unit: String,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `show-unit`.
pub async fn run(args: ShowUnitArgs) -> Result<()> {
    let store = args.model.open_read_only().await?;
    let details = store
        .unit_details(&args.unit)
        .await
        .with_context(|| format!("show-unit {}", args.unit))?;
    let snap = &details.snapshot;
    let plain = |bag: &Bag| -> BTreeMap<String, String> { bag.clone() };
    if args.model.format == Format::Json {
        let relations: Vec<_> = snap
            .relations
            .values()
            .map(|r| {
                json!({
                    "id": r.id,
                    "endpoint": r.endpoint,
                    "remote_application": r.remote_app,
                    "remote_units": &r.remote_units[..],
                    "unit_data": r.unit_bags.iter().map(|(k, v)| (k.clone(), plain(v))).collect::<BTreeMap<_, _>>(),
                    "application_data": r.app_bags.iter().map(|(k, v)| (k.clone(), plain(v))).collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        return print_json(&json!({
            "unit": args.unit,
            "leader": details.leader,
            "dying": details.dying,
            "status": snap.unit_status.kind.as_str(),
            "message": snap.unit_status.message,
            "workload_version": details.workload_version,
            "hook_error": details.hook_error,
            "queued_hooks": details.queued.iter().map(|h| h.name()).collect::<Vec<_>>(),
            "leader_data": plain(&snap.leader_data),
            "stored_state": plain(&snap.stored),
            "relations": relations,
        }));
    }
    let mut rows = vec![vec!["Unit".to_string(), args.unit.clone()]];
    rows.push(vec![
        "Workload".into(),
        format!(
            "{} {}",
            snap.unit_status.kind.as_str(),
            snap.unit_status.message
        )
        .trim_end()
        .to_string(),
    ]);
    rows.push(vec!["Leader".into(), yes_no(details.leader)]);
    rows.push(vec!["Being removed".into(), yes_no(details.dying)]);
    rows.push(vec!["Version".into(), details.workload_version.clone()]);
    rows.push(vec![
        "Hook error".into(),
        details.hook_error.clone().unwrap_or_else(|| "-".into()),
    ]);
    let queued: Vec<String> = details.queued.iter().map(|h| h.name()).collect();
    rows.push(vec![
        "Queued hooks".into(),
        if queued.is_empty() {
            "-".into()
        } else {
            queued.join(", ")
        },
    ]);
    print_table(&rows);
    print_bag("Leader data", &snap.leader_data);
    print_bag("Stored state", &snap.stored);
    for r in snap.relations.values() {
        outln!();
        outln!(
            "Relation {} ({} with {}; remote units: {})",
            r.id,
            r.endpoint,
            r.remote_app,
            if r.remote_units.is_empty() {
                "none".to_string()
            } else {
                r.remote_units.join(", ")
            }
        );
        let mut rows = vec![["Bag", "Key", "Value"].map(String::from).to_vec()];
        for (owner, bag) in r.app_bags.iter().chain(&r.unit_bags) {
            for (k, v) in bag.iter() {
                rows.push(vec![owner.clone(), k.clone(), v.clone()]);
            }
        }
        if rows.len() == 1 {
            outln!("  (no data)");
        } else {
            print_table(&rows);
        }
    }
    Ok(())
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

fn print_bag(title: &str, bag: &Bag) {
    outln!();
    if bag.is_empty() {
        outln!("{title}: none");
        return;
    }
    outln!("{title}:");
    let mut rows = vec![["Key", "Value"].map(String::from).to_vec()];
    rows.extend(bag.iter().map(|(k, v)| vec![k.clone(), v.clone()]));
    print_table(&rows);
}
