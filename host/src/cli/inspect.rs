//! `inspect`: what a charm module declares.

use std::path::PathBuf;

use anyhow::Result;

use charm_host::charm::{CharmRuntime, RuntimeConfig};
use charm_host::model::CharmMetadata;

use super::output::{Format, print_table};

/// `charm-host inspect CHARM`.
#[derive(clap::Args)]
pub struct InspectArgs {
    /// The charm's .wasm file.
    pub charm: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `inspect`.
pub fn inspect(args: &InspectArgs) -> Result<()> {
    let (path, format) = (args.charm.as_path(), args.format);
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
/// Prints what a charm declares: its name, endpoints, config options and actions.
pub fn print_charm(charm: &charm_host::charm::Charm) {
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
