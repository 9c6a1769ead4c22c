//! Why a model operation or a commit was refused.

use crate::commit::Fence;

/// Why a model operation failed. Nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No such application, unit or relation.
    #[error("not found: {0}")]
    NotFound(String),
    /// It exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The model as it stands does not allow it: a value of the wrong type, an ambiguous
    /// endpoint, a unit already being removed. The message names what is wrong.
    #[error("{0}")]
    Invalid(String),
    /// The store could not be reached or did not answer. Retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store's data cannot be read: the file is not a database, or is damaged. Nothing
    /// was written to it.
    #[error("store corrupt: {0}")]
    Corrupt(String),
    /// The store was written by a newer host, or for another model, or by another program.
    /// Nothing was written to it.
    #[error("store incompatible: {0}")]
    Incompatible(String),
    /// The store refused this host's credentials: a TLS certificate, a user or password, or
    /// a role without access to the model's keys. The message names which. Retrying does
    /// not help; nothing was written.
    #[error("store refused access: {0}")]
    Denied(String),
}

impl StoreError {
    /// Its kind, in a word (a metric's label): `not-found`, `unavailable`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "not-found",
            StoreError::AlreadyExists(_) => "already-exists",
            StoreError::Invalid(_) => "invalid",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Incompatible(_) => "incompatible",
            StoreError::Denied(_) => "denied",
        }
    }
}

/// A [`StoreError::NotFound`] naming what is missing, such as `unit discourse/3`.
pub fn not_found(what: impl Into<String>) -> StoreError {
    StoreError::NotFound(what.into())
}

/// A [`StoreError::Invalid`] saying what is wrong.
pub fn invalid(why: impl Into<String>) -> StoreError {
    StoreError::Invalid(why.into())
}

/// Why a commit was not applied. Nothing of it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The fence no longer holds: the lease has another holder or term, or has expired.
    #[error("leadership fence failed for {}: term {} of {} is no longer current", fence.app, fence.term, fence.holder)]
    Fenced {
        /// The fence that failed.
        fence: Fence,
    },
    /// Leader-only writes without a fence.
    #[error("leader-only writes need a leadership fence")]
    Unfenced,
    /// The hook is no longer queued: its commit was applied already (by a host that crashed
    /// before it could tell), so this one applies nothing.
    #[error("hook {seq} of {unit} is not queued: already committed")]
    NotQueued {
        /// The unit.
        unit: String,
        /// The hook's sequence number.
        seq: u64,
    },
    /// What the hook read changed since its snapshot ([`crate::snapshot::HookRead`]):
    /// another commit came between. Its writes would land on data it did not see, so none
    /// applies; the hook runs again on fresh data.
    #[error("what the hook of {unit} read changed since its snapshot")]
    Stale {
        /// The unit.
        unit: String,
    },
    /// The unit's ownership lease has another holder, or lapsed: another agent may run
    /// the unit now, so this one applies nothing.
    #[error("{holder} no longer owns {unit}")]
    NotOwner {
        /// The unit.
        unit: String,
        /// The agent that committed ([`crate::agent_holder`]).
        holder: String,
    },
    /// The hook's writes exceed a limit ([`crate::limits`]).
    #[error("the hook's writes exceed a limit: {0}")]
    Limit(#[from] crate::limits::LimitError),
    /// The model changed under the hook (its unit or a relation was removed).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CommitError {
    /// Its kind, in a word (a metric's label): `fenced`, `not-queued`, `stale`, or the store
    /// error's ([`StoreError::kind`]).
    pub fn kind(&self) -> &'static str {
        match self {
            CommitError::Fenced { .. } => "fenced",
            CommitError::Unfenced => "unfenced",
            CommitError::NotQueued { .. } => "not-queued",
            CommitError::Stale { .. } => "stale",
            CommitError::NotOwner { .. } => "not-owner",
            CommitError::Limit(_) => "limit",
            CommitError::Store(e) => e.kind(),
        }
    }
}
