//! Moving an application to a new charm module (`charm-host upgrade-charm`): checked
//! against the relations it is in, its settings carried over, and upgrade-charm then
//! config-changed queued on every unit, in one step.
//!
//! A module's bytes are kept in the store by their SHA-256, written before the step that
//! points the application at it (a store whose steps are bounded in size, etcd, writes
//! them in separate requests): content-addressed, so a module written by an upgrade that
//! was then refused is harmless, and writing it again writes the same bytes. The step
//! checks the module is there ([`ModelTx::module_stored`]).

use crate::error::{StoreError, invalid, not_found};
use crate::operations::{enqueue, live_units};
use crate::records::{CharmMetadata, Hook, QueuedHook, RelationRole};
use crate::tx::ModelTx;

/// Juju's word for an endpoint's role, as metadata.yaml has it.
fn role(role: RelationRole) -> &'static str {
    match role {
        RelationRole::Provides => "provides",
        RelationRole::Requires => "requires",
        RelationRole::Peers => "peers",
    }
}

/// What an upgrade did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upgraded {
    /// The module the application ran before, if the store had it.
    pub old_module: Option<String>,
    /// The module it runs now.
    pub new_module: String,
    /// Options the new charm declares that the old one did not (they take their defaults).
    pub added: Vec<String>,
    /// Settings dropped: their option is gone, or its type changed and the value is not one.
    pub dropped: Vec<String>,
    /// The upgrade-charm and config-changed hooks queued.
    pub queued: Vec<QueuedHook>,
}

/// Moves `app` to the charm `metadata` describes, whose module (stored beforehand) has hash
/// `module` and came from `charm`. Refused, writing nothing, if the application is unknown
/// or being removed, the module is not stored, or a relation the application is in uses an
/// endpoint the new charm drops or declares with another interface or role.
pub fn upgrade_charm<T: ModelTx + ?Sized>(
    tx: &mut T,
    app: &str,
    charm: &str,
    metadata: CharmMetadata,
    module: &str,
) -> Result<Upgraded, StoreError> {
    let mut record = tx
        .application(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    if tx.app_dying(app)? {
        return Err(invalid(format!("application {app} is being removed")));
    }
    if !tx.module_stored(module)? {
        return Err(invalid(format!(
            "application {app}: module {module} is not in the store"
        )));
    }
    for relation in tx.relations_of(app)? {
        let Some(local) = relation.local(app) else {
            continue;
        };
        let sides: Vec<String> = relation
            .endpoints
            .iter()
            .map(|e| format!("{}:{}", e.app, e.endpoint))
            .collect();
        let named = format!("relation {} ({})", relation.id, sides.join(" "));
        let old = record
            .metadata
            .relations
            .iter()
            .find(|e| e.name == local.endpoint);
        let Some(new) = metadata.relations.iter().find(|e| e.name == local.endpoint) else {
            return Err(invalid(format!(
                "application {app}: charm {} has no endpoint {:?}, which {named} uses",
                metadata.name, local.endpoint
            )));
        };
        if let Some(old) = old
            && (old.interface != new.interface || old.role != new.role)
        {
            return Err(invalid(format!(
                "application {app}: endpoint {:?} changes from {} {} to {} {} while {named} uses it",
                local.endpoint,
                role(old.role),
                old.interface,
                role(new.role),
                new.interface
            )));
        }
    }
    let added = metadata
        .config
        .iter()
        .filter(|o| record.metadata.option(&o.name).is_none())
        .map(|o| o.name.clone())
        .collect();
    let mut dropped = Vec::new();
    let settings = std::mem::take(&mut record.config);
    for (key, value) in settings {
        match metadata.option(&key) {
            Some(option) => match value.clone().coerce(option.kind) {
                Some(typed) => {
                    record.config.insert(key, typed);
                }
                None => dropped.push(key),
            },
            None => dropped.push(key),
        }
    }
    let old_module = record.module.replace(module.to_string());
    record.charm = charm.to_string();
    record.metadata = metadata;
    tx.set_app_charm(&record)?;
    let units = live_units(tx, app)?;
    let hooks = units.iter().flat_map(|u| {
        [
            (u.clone(), Hook::UpgradeCharm),
            (u.clone(), Hook::ConfigChanged),
        ]
    });
    let queued = enqueue(tx, hooks)?;
    Ok(Upgraded {
        old_module,
        new_module: module.to_string(),
        added,
        dropped,
        queued,
    })
}
