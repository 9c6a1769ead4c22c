//! Changing an application's config: settings typed and checked against its charm's
//! options, and config-changed queued on every unit, in one step.

use std::collections::BTreeMap;

use crate::error::{StoreError, invalid, not_found};
use crate::operations::{enqueue, live_units};
use crate::records::{CharmMetadata, ConfigValue, Hook, QueuedHook};
use crate::tx::ModelTx;

/// What a config change did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigApplied {
    /// The options whose effective value changed, by name.
    pub changed: Vec<String>,
    /// The config-changed hooks queued (none when nothing changed).
    pub queued: Vec<QueuedHook>,
}

/// `value` as the type option `key` of `metadata` declares, for application `app`: an
/// unknown option, or a value of another type (text that does not read as one), is
/// [`StoreError::Invalid`] naming it.
pub fn typed_setting(
    app: &str,
    metadata: &CharmMetadata,
    key: &str,
    value: ConfigValue,
) -> Result<ConfigValue, StoreError> {
    let option = known_option(app, metadata, key)?;
    let shown = match &value {
        ConfigValue::String(s) => format!("{s:?}"),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    let typed = match value {
        ConfigValue::String(text) if option.kind != crate::records::OptionType::String => {
            ConfigValue::parse_as(&text, option.kind)
        }
        other => other.coerce(option.kind),
    };
    typed.ok_or_else(|| {
        invalid(format!(
            "application {app}: option {key:?} is a {}, and {shown} is not one",
            option.kind.as_str()
        ))
    })
}

fn known_option<'m>(
    app: &str,
    metadata: &'m CharmMetadata,
    key: &str,
) -> Result<&'m crate::records::ConfigOptionMeta, StoreError> {
    metadata.option(key).ok_or_else(|| {
        let names: Vec<&str> = metadata.config.iter().map(|o| o.name.as_str()).collect();
        invalid(format!(
            "application {app}: charm {} has no option {key:?} (it has: {})",
            metadata.name,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ))
    })
}

/// Sets options of `app` (each checked by [`typed_setting`]) and resets others to their
/// defaults, then queues config-changed on each of its units if the config a hook sees
/// changed. Nothing is written if any key is refused.
pub fn set_config<T: ModelTx + ?Sized>(
    tx: &mut T,
    app: &str,
    set: &BTreeMap<String, ConfigValue>,
    reset: &[String],
) -> Result<ConfigApplied, StoreError> {
    let mut record = tx
        .application(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    if tx.app_dying(app)? {
        return Err(invalid(format!("application {app} is being removed")));
    }
    let mut settings = record.config.clone();
    for key in reset {
        known_option(app, &record.metadata, key)?;
        if set.contains_key(key) {
            return Err(invalid(format!(
                "application {app}: option {key:?} is both set and reset"
            )));
        }
        settings.remove(key);
    }
    for (key, value) in set {
        let typed = typed_setting(app, &record.metadata, key, value.clone())?;
        settings.insert(key.clone(), typed);
    }
    let before = record.effective_config();
    record.config = settings;
    let after = record.effective_config();
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if changed.is_empty() {
        return Ok(ConfigApplied::default());
    }
    tx.set_app_config(app, &record.config)?;
    let units = live_units(tx, app)?;
    let queued = enqueue(tx, units.iter().map(|u| (u.clone(), Hook::ConfigChanged)))?;
    Ok(ConfigApplied { changed, queued })
}
