//! `relate` and `remove-relation`.

use anyhow::{Context, Result};
use serde_json::json;

use super::output::Format;
use super::{ModelArgs, hooks_json, print_hooks, print_json};

/// `charm-host relate A[:ENDPOINT] B[:ENDPOINT]` and `remove-relation`, the same shape.
#[derive(clap::Args)]
pub struct RelationArgs {
    /// One side: an application, or `app:endpoint`.
    pub a: String,
    /// The other side.
    pub b: String,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `relate`: created, joined and changed queued on both sides.
pub async fn relate(args: RelationArgs) -> Result<()> {
    let store = args.model.open().await?;
    let (relation, queued) = store
        .relate(&args.a, &args.b)
        .await
        .with_context(|| format!("relate {} {}", args.a, args.b))?;
    report("related", &relation, &queued, args.model.format)
}

/// Runs `remove-relation`: departed, then broken, queued on both sides; the relation and
/// its bags go after the last broken.
pub async fn remove(args: RelationArgs) -> Result<()> {
    let store = args.model.open().await?;
    let (relation, queued) = store
        .remove_relation(&args.a, &args.b)
        .await
        .with_context(|| format!("remove-relation {} {}", args.a, args.b))?;
    report("removing", &relation, &queued, args.model.format)
}

fn report(
    what: &str,
    relation: &charm_host::model::RelationRecord,
    queued: &[charm_host::store::QueuedHook],
    format: Format,
) -> Result<()> {
    if format == Format::Json {
        return print_json(&json!({
            "relation": {
                "id": relation.id,
                "interface": relation.interface,
                "endpoints": relation.endpoints.iter().map(|e| format!("{}:{}", e.app, e.endpoint)).collect::<Vec<_>>(),
                "dying": relation.dying,
            },
            "hooks": hooks_json(queued),
        }));
    }
    outln!(
        "Relation {} ({}, {}): {what}.",
        relation.id,
        relation.describe(),
        relation.interface
    );
    print_hooks(queued);
    Ok(())
}
