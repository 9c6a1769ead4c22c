//! What a hook may read and write, as Juju allows it: the checks behind each import a charm
//! calls. The host's imports and the SDK's testing harness both apply these, so a charm's
//! native test is refused exactly where the host would refuse it.

use crate::limits::{self, LimitError};
use crate::records::{RelationId, StatusKind};

/// Why a hook's call was refused. The call changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// A leader-only call from a hook that did not start as leader.
    #[error("not the leader")]
    NotLeader,
    /// No relation with this id is visible to the unit.
    #[error("relation {0} not found")]
    RelationNotFound(RelationId),
    /// The unit may not read or write this bag.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The call's argument is not acceptable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Which side of a relation a bag read is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The reading unit's own (its bag, or its application's): the hook's writes show.
    Local,
    /// The other side's (for peers: another unit's bag).
    Remote,
}

/// Refuses a leader-only call from a follower.
pub fn require_leader(leader: bool) -> Result<(), AccessError> {
    if leader {
        Ok(())
    } else {
        Err(AccessError::NotLeader)
    }
}

/// Reading `unit`'s bag in relation `id` from a hook of `local_unit`; `in_relation` says
/// whether `unit` is one of the relation's remote units.
///
/// ```
/// use charm_model::access::{read_unit_bag, AccessError, Side};
///
/// assert_eq!(read_unit_bag(1, "web/0", "web/0", false), Ok(Side::Local));
/// assert_eq!(read_unit_bag(1, "web/0", "db/0", true), Ok(Side::Remote));
/// assert!(matches!(read_unit_bag(1, "web/0", "db/9", false), Err(AccessError::PermissionDenied(_))));
/// ```
pub fn read_unit_bag(
    id: RelationId,
    local_unit: &str,
    unit: &str,
    in_relation: bool,
) -> Result<Side, AccessError> {
    if unit == local_unit {
        Ok(Side::Local)
    } else if in_relation {
        Ok(Side::Remote)
    } else {
        Err(AccessError::PermissionDenied(format!(
            "unit {unit} is not in relation {id}"
        )))
    }
}

/// Reading `app`'s bag in relation `id` from a hook of an application `local_app` unit, the
/// relation's other side being `remote_app` (`local_app` itself for peers). As in Juju,
/// only the leader reads its own application's bag, except on peers.
///
/// ```
/// use charm_model::access::{read_app_bag, AccessError, Side};
///
/// assert_eq!(read_app_bag(1, "web", "db", "db", false), Ok(Side::Remote));
/// assert_eq!(read_app_bag(1, "web", "web", "db", true), Ok(Side::Local));
/// assert!(read_app_bag(1, "web", "web", "db", false).is_err(), "a follower, not peers");
/// assert_eq!(read_app_bag(1, "web", "web", "web", false), Ok(Side::Local), "peers");
/// ```
pub fn read_app_bag(
    id: RelationId,
    local_app: &str,
    app: &str,
    remote_app: &str,
    leader: bool,
) -> Result<Side, AccessError> {
    if app == local_app {
        if remote_app != local_app && !leader {
            return Err(AccessError::PermissionDenied(format!(
                "only the leader of {app} may read its application bag in relation {id}"
            )));
        }
        Ok(Side::Local)
    } else if app == remote_app {
        Ok(Side::Remote)
    } else {
        Err(AccessError::PermissionDenied(format!(
            "application {app} is not in relation {id}"
        )))
    }
}

/// Writing `key` (to `value`, or removing it) of `unit`'s bag from a hook of `local_unit`:
/// its own bag only, within the [`limits`].
pub fn write_unit_bag(
    local_unit: &str,
    unit: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), AccessError> {
    if unit != local_unit {
        return Err(AccessError::PermissionDenied(format!(
            "{local_unit} may write only its own unit bag, not {unit}'s"
        )));
    }
    setting_key(key)?;
    within_limits(limits::setting("unit bag setting", key, value))
}

/// Writing `key` (to `value`, or removing it) of `app`'s bag from a hook of `local_unit`:
/// its own application's bag, only as leader, within the [`limits`].
pub fn write_app_bag(
    local_unit: &str,
    app: &str,
    key: &str,
    value: Option<&str>,
    leader: bool,
) -> Result<(), AccessError> {
    if app != crate::records::app_of(local_unit) {
        return Err(AccessError::PermissionDenied(format!(
            "{local_unit} may write only its own application's bag, not {app}'s"
        )));
    }
    require_leader(leader)?;
    setting_key(key)?;
    within_limits(limits::setting("application bag setting", key, value))
}

/// Writing `key` (to `value`, or removing it) of the leader settings: the leader only,
/// within the [`limits`].
pub fn write_leader_data(key: &str, value: Option<&str>, leader: bool) -> Result<(), AccessError> {
    require_leader(leader)?;
    if key.is_empty() {
        return Err(AccessError::InvalidArgument(
            "a leader setting's key must not be empty".into(),
        ));
    }
    within_limits(limits::setting("leader setting", key, value))
}

/// A limit exceeded, as the charm's call sees it.
fn within_limits(verdict: Result<(), LimitError>) -> Result<(), AccessError> {
    verdict.map_err(|e| AccessError::InvalidArgument(e.to_string()))
}

fn setting_key(key: &str) -> Result<(), AccessError> {
    if key.is_empty() {
        return Err(AccessError::InvalidArgument(
            "a relation setting's key must not be empty".into(),
        ));
    }
    Ok(())
}

/// Setting a status of this kind with this message. As in Juju, error is the host's to
/// set, when a hook fails; the message is within [`limits::STATUS_MESSAGE_MAX`].
///
/// ```
/// use charm_model::access::set_status;
/// use charm_model::StatusKind;
///
/// assert!(set_status(StatusKind::Active, "ready").is_ok());
/// assert!(set_status(StatusKind::Error, "").is_err());
/// assert!(set_status(StatusKind::Active, &"x".repeat(32 << 20)).is_err());
/// ```
pub fn set_status(kind: StatusKind, message: &str) -> Result<(), AccessError> {
    if kind == StatusKind::Error {
        return Err(AccessError::InvalidArgument(
            "a charm cannot set an error status".into(),
        ));
    }
    within_limits(limits::status_message(message))
}

/// An action's result keys, by Juju's rule: lowercase letters, digits and `-`, starting
/// with a letter; a dot nests a key under another (`db.host`), as `action-set` nests it,
/// and each part between dots follows the same rule.
///
/// ```
/// use charm_model::access::action_result_keys;
///
/// assert!(action_result_keys(["password", "tls-cert2", "db.host"]).is_ok());
/// assert!(action_result_keys(["Password"]).is_err());
/// assert!(action_result_keys(["2fa"]).is_err());
/// let nested = action_result_keys(["db.Host"]).unwrap_err().to_string();
/// assert!(nested.contains(r#"key "db.Host": part "Host""#), "{nested}");
/// assert!(action_result_keys(["db."]).is_err());
/// ```
pub fn action_result_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<(), AccessError> {
    let valid = |part: &str| {
        part.starts_with(|c: char| c.is_ascii_lowercase())
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    for key in keys {
        if let Some(part) = key.split('.').find(|part| !valid(part)) {
            // In a nested key, name the part at fault.
            let which = if part == key {
                String::new()
            } else {
                format!(": part {part:?}")
            };
            return Err(AccessError::InvalidArgument(format!(
                "action result key {key:?}{which}: use lowercase letters, digits and '-', \
                 starting with a letter"
            )));
        }
    }
    Ok(())
}
