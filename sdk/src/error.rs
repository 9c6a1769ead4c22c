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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A leader-only operation by a unit that was not the leader when its hook started.
    #[error("this unit is not the leader")]
    NotLeader,
    /// The pod spec is invalid at `field`.
    #[error("invalid pod spec: {field}: {reason}")]
    InvalidPodSpec {
        /// The path of the offending field, such as `containers[1].name`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The Kubernetes resources are invalid at `field`.
    #[error("invalid k8s resources: {field}: {reason}")]
    InvalidK8sResources {
        /// The path of the offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No relation with this id is visible to this unit.
    #[error("relation {0} not found")]
    RelationNotFound(u32),
    /// The unit may not read or write this data bag.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The charm did not declare this config option.
    #[error("unknown config option {0:?}")]
    UnknownConfigOption(String),
    /// A config option's value does not have the type asked for.
    #[error("config option {name:?} is not {expected}")]
    ConfigType {
        /// The option's name.
        name: String,
        /// The type asked for.
        expected: &'static str,
    },
    /// An argument was malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A stored or relation value could not be (de)serialised.
    #[error("serialisation: {0}")]
    Serde(String),
}

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
    ///
    /// ```
    /// let e = charm_sdk::HookError::msg("no database");
    /// assert!(e.as_sdk_error().is_none());
    /// ```
    pub fn msg(message: impl Into<String>) -> Self {
        HookError(message.into().into())
    }

    /// The SDK error inside, if this is one.
    ///
    /// ```
    /// let e = charm_sdk::HookError::from(charm_sdk::Error::NotLeader);
    /// assert_eq!(e.as_sdk_error(), Some(&charm_sdk::Error::NotLeader));
    /// ```
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
///
/// ```
/// fn port(text: &str) -> charm_sdk::HookResult<u16> {
///     Ok(text.parse()?)
/// }
/// assert_eq!(port("80").unwrap(), 80);
/// ```
pub type HookResult<T = ()> = Result<T, HookError>;

/// The result of a call into the host: refused calls are an [`Error`].
///
/// ```
/// fn database(model: &charm_sdk::Model) -> charm_sdk::Result<Option<String>> {
///     Ok(model.relation("db")?.map(|r| r.remote_app().to_string()))
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
