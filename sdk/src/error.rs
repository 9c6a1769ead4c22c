use std::fmt;

use crate::wit::juju::charm::types::Error as WitError;

/// Why the host refused a call. A refused call changes nothing.
///
/// ```
/// use charm_sdk::Error;
///
/// let e = Error::InvalidPodSpec { field: "containers[0].image".into(), reason: "missing".into() };
/// assert_eq!(e.to_string(), "invalid pod spec: containers[0].image: missing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A leader-only operation by a unit that was not the leader when its hook started.
    NotLeader,
    /// The pod spec is invalid at `field`.
    InvalidPodSpec {
        /// The path of the offending field, such as `containers[1].name`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The Kubernetes resources are invalid at `field`.
    InvalidK8sResources {
        /// The path of the offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No relation with this id is visible to this unit.
    RelationNotFound(u32),
    /// The unit may not read or write this data bag.
    PermissionDenied(String),
    /// The charm did not declare this config option.
    UnknownConfigOption(String),
    /// A config option's value does not have the type asked for.
    ConfigType {
        /// The option's name.
        name: String,
        /// The type asked for.
        expected: &'static str,
    },
    /// An argument was malformed.
    InvalidArgument(String),
    /// A stored or relation value could not be (de)serialised.
    Serde(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotLeader => f.write_str("this unit is not the leader"),
            Error::InvalidPodSpec { field, reason } => {
                write!(f, "invalid pod spec: {field}: {reason}")
            }
            Error::InvalidK8sResources { field, reason } => {
                write!(f, "invalid k8s resources: {field}: {reason}")
            }
            Error::RelationNotFound(id) => write!(f, "relation {id} not found"),
            Error::PermissionDenied(why) => write!(f, "permission denied: {why}"),
            Error::UnknownConfigOption(name) => write!(f, "unknown config option {name:?}"),
            Error::ConfigType { name, expected } => {
                write!(f, "config option {name:?} is not {expected}")
            }
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::Serde(why) => write!(f, "serialisation: {why}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<WitError> for Error {
    fn from(e: WitError) -> Self {
        match e {
            WitError::NotLeader => Error::NotLeader,
            WitError::InvalidPodSpec(f) => Error::InvalidPodSpec {
                field: f.field,
                reason: f.reason,
            },
            WitError::InvalidK8sResources(f) => Error::InvalidK8sResources {
                field: f.field,
                reason: f.reason,
            },
            WitError::RelationNotFound(id) => Error::RelationNotFound(id),
            WitError::PermissionDenied(why) => Error::PermissionDenied(why),
            WitError::UnknownConfigOption(name) => Error::UnknownConfigOption(name),
            WitError::InvalidArgument(why) => Error::InvalidArgument(why),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Serde(e.to_string())
    }
}

/// Why a hook failed: any error, carried to the host as its message.
///
/// Every `std::error::Error` converts into it, so `?` works on the SDK's [`Error`] and on
/// the charm's own errors alike.
///
/// ```
/// use charm_sdk::{HookError, HookResult};
///
/// fn parse(port: &str) -> HookResult<u16> {
///     Ok(port.parse::<u16>()?)
/// }
/// assert!(parse("http").is_err());
/// assert_eq!(HookError::msg("no database").to_string(), "no database");
/// ```
pub struct HookError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl HookError {
    /// A hook error with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        HookError(message.into().into())
    }

    /// The SDK error inside, if this is one.
    pub fn as_sdk_error(&self) -> Option<&Error> {
        self.0.downcast_ref()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HookError {
    fn from(e: E) -> Self {
        HookError(Box::new(e))
    }
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What a hook handler returns.
pub type HookResult<T = ()> = Result<T, HookError>;

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
