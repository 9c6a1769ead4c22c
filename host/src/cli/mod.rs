//! The commands, a file per verb group. Those that change a model are each one planned
//! change of the store (written once, in `charm_model`); every answer is shown as a table
//! or as JSON (`output`).

#[macro_use]
pub mod output;

pub mod actions;
pub mod build;
pub mod bundle;
pub mod config;
pub mod debug_log;
pub mod inspect;
pub mod relations;
pub mod resolved;
pub mod run;
pub mod show_unit;
pub mod sim;
pub mod status;
pub mod store;
pub mod units;
pub mod upgrade;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use charm_host::store::{OpenMode, QueuedHook, Store};

use output::{Format, print_table};

/// How long a command waits for one etcd request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the model is, and how to print the answer.
#[derive(clap::Args)]
pub struct ModelArgs {
    #[command(flatten)]
    pub store: store::StoreArgs,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

impl ModelArgs {
    /// The store, which must hold the model already (`deploy` and `run` create one).
    pub async fn open(&self) -> Result<Arc<dyn Store>> {
        self.store.open(OpenMode::Existing, REQUEST_TIMEOUT).await
    }

    /// The store, to read the model it must hold: nothing is written to it.
    pub async fn open_read_only(&self) -> Result<Arc<dyn Store>> {
        self.store.open(OpenMode::ReadOnly, REQUEST_TIMEOUT).await
    }
}

/// `KEY=VALUE` split in two.
pub fn key_value(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => bail!("{text:?}: expected KEY=VALUE"),
    }
}

/// Each `KEY=VALUE`, by key; a key given twice is refused.
pub fn settings(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let (key, value) = key_value(pair)?;
        if out.insert(key.clone(), value).is_some() {
            bail!("{key:?} is given twice");
        }
    }
    Ok(out)
}

/// Hooks as JSON: unit, hook name, sequence number.
pub fn hooks_json(queued: &[QueuedHook]) -> serde_json::Value {
    json!(
        queued
            .iter()
            .map(|q| json!({"unit": q.unit, "hook": q.hook.name(), "seq": q.seq}))
            .collect::<Vec<_>>()
    )
}

/// Hooks as a table: each unit with the hooks queued on it, in order.
pub fn print_hooks(queued: &[QueuedHook]) {
    if queued.is_empty() {
        outln!("No hooks queued.");
        return;
    }
    let mut by_unit: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for q in queued {
        by_unit.entry(&q.unit).or_default().push(q.hook.name());
    }
    let mut rows = vec![vec!["Unit".to_string(), "Hooks queued".into()]];
    for (unit, hooks) in by_unit {
        rows.push(vec![unit.to_string(), hooks.join(", ")]);
    }
    print_table(&rows);
}

/// Prints `value` as pretty JSON.
pub fn print_json(value: &serde_json::Value) -> Result<()> {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).context("printing JSON")?
    );
    Ok(())
}
