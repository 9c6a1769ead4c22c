//! The stores behind the host: leases (who leads each application, with which term) and
//! model state (applications, units, relations, their data, pod specs, statuses).
//!
//! One trait each, so backends are interchangeable; a backend implements both over one
//! storage so that a commit can check the leadership fence and apply a hook's writes in one
//! atomic step.

#[cfg(feature = "etcd")]
mod etcd;
pub mod faults;
mod lease;
mod memory;
mod metered;
mod sqlite;
mod state;

pub use charm_model::{QueuedHook, routing};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdAuth, EtcdConfig, EtcdIdentity, EtcdStore, EtcdTls};
pub use lease::{Claim, Lease, LeaseError, LeaseFuture, LeaseStore};
pub use memory::MemoryStore;
pub use metered::MeteredStore;
pub use sqlite::SqliteStore;
pub use state::{
    AppRemoval, AppStatusRow, CommitError, CommitFuture, CommitReceipt, Committed, ConfigApplied,
    Deployed, Fence, HookCommit, HookRead, ModelStatus, Records, StateStore, Step, StepOp,
    StoreError, StoreFuture, UnitDetails, UnitStatusRow, Upgraded, Verdict, module_hash,
};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A sensible interval for a host to compact etcd's history, when asked to, keeping about
/// this much of it (Kubernetes' API server's default): etcd's defaults never compact, and a
/// busy model fills etcd's 2 GiB quota, after which etcd refuses every write.
pub const COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// What opening a store may do to the model it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Creates the model where the store holds none (`deploy`, `run BUNDLE`).
    Create,
    /// The model must be there; the command may change it.
    Existing,
    /// The model must be there; the command only reads it, and writes nothing.
    ReadOnly,
}

/// A boxed future, so the store traits can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend holding both leases and model state.
pub trait Store: LeaseStore + StateStore {}

impl<T: LeaseStore + StateStore> Store for T {}
