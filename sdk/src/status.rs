use crate::wit::juju::charm::types as wit;

/// A unit's or application's workload status, as in Juju.
///
/// ```
/// use charm_sdk::Status;
///
/// let s = Status::waiting("waiting for database");
/// assert_eq!(s.message(), "waiting for database");
/// assert_eq!(s.kind_name(), "waiting");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Nothing has been reported yet.
    Unknown,
    /// The workload is ready.
    Active(String),
    /// The charm is doing work the operator need not act on.
    Maintenance(String),
    /// The workload waits for something outside the operator's hands, such as a relation's data.
    Waiting(String),
    /// The operator must act (a missing relation, bad config).
    Blocked(String),
    /// A hook failed (set by the host, never by a charm).
    Error(String),
}

impl Default for Status {
    /// `Unknown`: what a unit shows before its charm reports anything.
    fn default() -> Self {
        Status::Unknown
    }
}

impl Status {
    /// `Active` with this message.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::active("ready").kind_name(), "active");
    /// ```
    pub fn active(message: impl Into<String>) -> Self {
        Status::Active(message.into())
    }
    /// `Maintenance` with this message.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::maintenance("installing").message(), "installing");
    /// ```
    pub fn maintenance(message: impl Into<String>) -> Self {
        Status::Maintenance(message.into())
    }
    /// `Waiting` with this message.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::waiting("no db").kind_name(), "waiting");
    /// ```
    pub fn waiting(message: impl Into<String>) -> Self {
        Status::Waiting(message.into())
    }
    /// `Blocked` with this message.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::blocked("needs a db relation").kind_name(), "blocked");
    /// ```
    pub fn blocked(message: impl Into<String>) -> Self {
        Status::Blocked(message.into())
    }

    /// The message.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::Unknown.message(), "");
    /// ```
    pub fn message(&self) -> &str {
        match self {
            Status::Unknown => "",
            Status::Active(m)
            | Status::Maintenance(m)
            | Status::Waiting(m)
            | Status::Blocked(m)
            | Status::Error(m) => m,
        }
    }

    /// Juju's name for the kind: `active`, `waiting`, ...
    ///
    /// ```
    /// assert_eq!(charm_sdk::Status::Unknown.kind_name(), "unknown");
    /// ```
    pub fn kind_name(&self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Active(_) => "active",
            Status::Maintenance(_) => "maintenance",
            Status::Waiting(_) => "waiting",
            Status::Blocked(_) => "blocked",
            Status::Error(_) => "error",
        }
    }

    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    pub(crate) fn into_wit(self) -> wit::Status {
        let kind = match self {
            Status::Unknown => wit::StatusKind::Unknown,
            Status::Active(_) => wit::StatusKind::Active,
            Status::Maintenance(_) => wit::StatusKind::Maintenance,
            Status::Waiting(_) => wit::StatusKind::Waiting,
            Status::Blocked(_) => wit::StatusKind::Blocked,
            Status::Error(_) => wit::StatusKind::Error,
        };
        wit::Status {
            kind,
            message: self.message().to_string(),
        }
    }

    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    pub(crate) fn from_wit(status: wit::Status) -> Self {
        let m = status.message;
        match status.kind {
            wit::StatusKind::Unknown => Status::Unknown,
            wit::StatusKind::Active => Status::Active(m),
            wit::StatusKind::Maintenance => Status::Maintenance(m),
            wit::StatusKind::Waiting => Status::Waiting(m),
            wit::StatusKind::Blocked => Status::Blocked(m),
            wit::StatusKind::Error => Status::Error(m),
        }
    }
}
