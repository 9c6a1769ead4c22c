//! Actions: what an action may be given (the parameters its charm declares, typed,
//! required or with a default), and its record from `run-action` to its hook's commit.
//! Parameters are checked before anything is queued, so a refused `run-action` leaves the
//! model as it was; the record and the action's hook are written in one step.

use std::collections::BTreeMap;

use crate::error::{StoreError, invalid, not_found};
use crate::operations::enqueue;
use crate::records::{
    ActionMeta, ActionOutput, ActionRecord, ActionState, CharmMetadata, ConfigValue, Hook,
    OptionType, QueuedHook, app_of,
};
use crate::tx::ModelTx;

/// What `run-action` did: the action's record, and its hook, queued on its unit.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionQueued {
    /// The action, pending.
    pub action: ActionRecord,
    /// Its hook.
    pub queued: QueuedHook,
}

/// Starts action `action` on `unit` with the parameters an operator gave (checked and typed
/// by [`checked_params`]), at `now_ms` (milliseconds since the UNIX epoch): its record,
/// pending, and its hook queued on the unit, in one step. An unknown or departing unit, or
/// a refused parameter, writes nothing.
pub fn enqueue_action<T: ModelTx + ?Sized>(
    tx: &mut T,
    unit: &str,
    action: &str,
    given: BTreeMap<String, ConfigValue>,
    now_ms: u64,
) -> Result<ActionQueued, StoreError> {
    let app = app_of(unit);
    if !tx.unit_exists(unit)? {
        return Err(not_found(format!("unit {unit}")));
    }
    if tx.unit_dying(unit)? {
        return Err(invalid(format!("unit {unit} is being removed")));
    }
    let record = tx
        .application(app)?
        .ok_or_else(|| not_found(format!("application {app}")))?;
    let params = checked_params(app, &record.metadata, action, given)?;
    let id = tx.next_action_id()?;
    let hook = Hook::Action {
        id: id.to_string(),
        name: action.to_string(),
        params: serde_json::to_string(&params)
            .map_err(|e| invalid(format!("action {action}: parameters: {e}")))?,
    };
    let action = ActionRecord {
        id,
        unit: unit.to_string(),
        name: action.to_string(),
        params,
        state: ActionState::Pending,
        results: BTreeMap::new(),
        failure: None,
        log: Vec::new(),
        enqueued_ms: now_ms,
        started_ms: None,
        completed_ms: None,
    };
    // An action's hook carries its own id: it never coalesces with another.
    let queued = enqueue(tx, [(unit.to_string(), hook)])?
        .pop()
        .ok_or_else(|| invalid(format!("action {id} on {unit} was not queued")))?;
    tx.put_action(&action)?;
    Ok(ActionQueued { action, queued })
}

/// The action with this id, or [`StoreError::NotFound`] naming it.
pub fn show_action<T: ModelTx + ?Sized>(tx: &mut T, id: u64) -> Result<ActionRecord, StoreError> {
    tx.action(id)?
        .ok_or_else(|| not_found(format!("action {id}")))
}

/// Records that the hook of action `id` started at `now_ms`: a pending action is running.
/// One that is running already (its hook is being retried) or has ended stays as it is.
pub fn start_action<T: ModelTx + ?Sized>(
    tx: &mut T,
    id: u64,
    now_ms: u64,
) -> Result<ActionRecord, StoreError> {
    let mut record = show_action(tx, id)?;
    if record.state == ActionState::Pending {
        record.state = ActionState::Running;
        record.started_ms = Some(now_ms);
        tx.put_action(&record)?;
    }
    Ok(record)
}

/// Records what the action hook `hook` reported, in its commit: completed with its results,
/// or failed with its failure message, and its progress messages. A hook that is not an
/// action's, or an action with no record (queued by the host's own tests), records nothing.
pub fn finish_action<T: ModelTx + ?Sized>(
    tx: &mut T,
    hook: &Hook,
    output: Option<&ActionOutput>,
) -> Result<(), StoreError> {
    let Hook::Action { id, .. } = hook else {
        return Ok(());
    };
    let Some(mut record) = id
        .parse()
        .ok()
        .map(|id| tx.action(id))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    let output = output.cloned().unwrap_or_default();
    record.state = if output.failure.is_some() {
        ActionState::Failed
    } else {
        ActionState::Completed
    };
    record.results = output.results;
    record.failure = output.failure;
    record.log = output.log;
    record.completed_ms = output.ended_ms;
    if record.started_ms.is_none() {
        record.started_ms = output.ended_ms;
    }
    tx.put_action(&record)
}

/// The action `action` of `app`'s charm, or [`StoreError::Invalid`] naming it and listing
/// the charm's actions.
pub fn declared<'m>(
    app: &str,
    metadata: &'m CharmMetadata,
    action: &str,
) -> Result<&'m ActionMeta, StoreError> {
    metadata
        .actions
        .iter()
        .find(|a| a.name == action)
        .ok_or_else(|| {
            invalid(format!(
                "application {app}: charm {} has no action {action:?} (it has: {})",
                metadata.name,
                listed(metadata.actions.iter().map(|a| a.name.as_str()))
            ))
        })
}

/// The parameters an action of `app` runs with: each given value typed as its parameter
/// declares (text is read as the type, as `KEY=VALUE` on a command line gives it), then
/// the defaults of those left out. An unknown action or parameter, a value of another
/// type, or a required parameter left out is [`StoreError::Invalid`] naming it.
///
/// ```
/// use std::collections::BTreeMap;
/// use charm_model::actions::checked_params;
/// use charm_model::{ActionMeta, ActionParamMeta, CharmMetadata, ConfigValue, OptionType};
///
/// let metadata = CharmMetadata {
///     name: "kv".into(),
///     actions: vec![ActionMeta {
///         name: "get".into(),
///         description: "Reads a key.".into(),
///         params: vec![
///             ActionParamMeta {
///                 name: "key".into(),
///                 kind: OptionType::String,
///                 description: "The key.".into(),
///                 default: None,
///                 required: true,
///             },
///             ActionParamMeta {
///                 name: "retries".into(),
///                 kind: OptionType::Int,
///                 description: "How often to try.".into(),
///                 default: Some(ConfigValue::Int(3)),
///                 required: false,
///             },
///         ],
///     }],
///     ..CharmMetadata::default()
/// };
/// let given = BTreeMap::from([("key".to_string(), ConfigValue::String("a".into()))]);
/// let params = checked_params("kv", &metadata, "get", given).unwrap();
/// assert_eq!(params["retries"], ConfigValue::Int(3));
///
/// let wrong = BTreeMap::from([("retries".to_string(), ConfigValue::String("x".into()))]);
/// let error = checked_params("kv", &metadata, "get", wrong).unwrap_err();
/// assert!(error.to_string().contains("\"retries\" is a int"), "{error}");
/// ```
pub fn checked_params(
    app: &str,
    metadata: &CharmMetadata,
    action: &str,
    given: BTreeMap<String, ConfigValue>,
) -> Result<BTreeMap<String, ConfigValue>, StoreError> {
    let meta = declared(app, metadata, action)?;
    let mut params = BTreeMap::new();
    for (key, value) in given {
        let Some(param) = meta.params.iter().find(|p| p.name == key) else {
            return Err(invalid(format!(
                "action {action} of application {app}: no parameter {key:?} (it has: {})",
                listed(meta.params.iter().map(|p| p.name.as_str()))
            )));
        };
        let shown = match &value {
            ConfigValue::String(s) => format!("{s:?}"),
            other => serde_json::to_string(other).unwrap_or_default(),
        };
        let typed = match value {
            ConfigValue::String(text) if param.kind != OptionType::String => {
                ConfigValue::parse_as(&text, param.kind)
            }
            other => other.coerce(param.kind),
        };
        let typed = typed.ok_or_else(|| {
            invalid(format!(
                "action {action} of application {app}: parameter {key:?} is a {}, and {shown} \
                 is not one",
                param.kind.as_str()
            ))
        })?;
        params.insert(key, typed);
    }
    let mut missing = Vec::new();
    for param in &meta.params {
        if params.contains_key(&param.name) {
            continue;
        }
        match &param.default {
            Some(default) => {
                params.insert(param.name.clone(), default.clone());
            }
            None if param.required => missing.push(param.name.as_str()),
            None => {}
        }
    }
    if !missing.is_empty() {
        return Err(invalid(format!(
            "action {action} of application {app}: required parameter{} {} not given",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )));
    }
    Ok(params)
}

fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ActionParamMeta;

    fn kv() -> CharmMetadata {
        CharmMetadata {
            name: "kv".into(),
            actions: vec![ActionMeta {
                name: "put".into(),
                description: String::new(),
                params: vec![
                    ActionParamMeta {
                        name: "key".into(),
                        kind: OptionType::String,
                        description: String::new(),
                        default: None,
                        required: true,
                    },
                    ActionParamMeta {
                        name: "ttl".into(),
                        kind: OptionType::Float,
                        description: String::new(),
                        default: None,
                        required: false,
                    },
                ],
            }],
            ..CharmMetadata::default()
        }
    }

    fn given(pairs: &[(&str, ConfigValue)]) -> BTreeMap<String, ConfigValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn an_unknown_action_is_refused_listing_the_charms_actions() {
        let error = checked_params("kv", &kv(), "get", BTreeMap::new()).unwrap_err();
        assert_eq!(
            error.to_string(),
            StoreError::Invalid(
                "application kv: charm kv has no action \"get\" (it has: put)".into()
            )
            .to_string()
        );
    }

    #[test]
    fn an_unknown_parameter_and_a_missing_required_one_are_named() {
        let unknown = given(&[
            ("key", ConfigValue::String("a".into())),
            ("tll", ConfigValue::Int(1)),
        ]);
        let error = checked_params("kv", &kv(), "put", unknown).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("no parameter \"tll\" (it has: key, ttl)"),
            "{error}"
        );
        let error = checked_params("kv", &kv(), "put", BTreeMap::new()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("required parameter key not given"),
            "{error}"
        );
    }

    #[test]
    fn values_are_typed_and_optional_parameters_may_be_left_out() {
        let params = checked_params(
            "kv",
            &kv(),
            "put",
            given(&[
                ("key", ConfigValue::String("a".into())),
                ("ttl", ConfigValue::String("2".into())),
            ]),
        )
        .unwrap();
        assert_eq!(params["ttl"], ConfigValue::Float(2.0));
        let params = checked_params(
            "kv",
            &kv(),
            "put",
            given(&[("key", ConfigValue::String("a".into()))]),
        )
        .unwrap();
        assert!(!params.contains_key("ttl"));
    }
}
