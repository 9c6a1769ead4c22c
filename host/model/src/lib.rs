//! The Juju model's rules, with no I/O, shared by every store of `charm-host` and by the
//! SDK's testing harness.
//!
//! - [`records`]: the vocabulary (applications, units, relations, bags, hooks, a hook's
//!   buffered [`Changes`], what a hook sees: [`UnitSnapshot`]).
//! - [`access`]: what a hook may read and write; [`actions`]: what an action may be given, and its record; [`podspec`]: what a pod spec may be;
//!   [`limits`]: how much a hook may write.
//! - [`snapshot`], [`commit`], [`operations`], [`config`], [`removal`], [`status`]: each
//!   model operation ([`upgrade`]: moving an application to a new module), written once against [`ModelTx`], the records a store reads and
//!   writes in one atomic step; [`endpoints`]: which endpoints `app[:endpoint]` names.
//! - [`routing`]: which hooks each change fires; [`network`]: a unit's addresses.
//! - [`lifecycle`]: Juju's order of hooks and what a model holds between them, checked on
//!   any history and any store's model.
//! - [`walk`]: random walks of operator commands and hooks, checked against [`lifecycle`].
//!
//! A new rule goes here; a store only keeps records and makes a step atomic.

#![deny(missing_docs)]

pub mod access;
pub mod actions;
pub mod commit;
pub mod config;
pub mod endpoints;
pub mod error;
pub mod leadership;
pub mod lifecycle;
pub mod limits;
pub mod memory;
pub mod network;
pub mod operations;
pub mod podspec;
pub mod records;
pub mod removal;
pub mod routing;
pub mod snapshot;
pub mod status;
pub mod tx;
pub mod upgrade;
pub mod walk;

pub use commit::{CommitReceipt, Committed, Fence, HookCommit};
pub use error::{CommitError, StoreError};
pub use records::*;
pub use snapshot::HookRead;
pub use status::{AppStatusRow, ModelStatus, UnitStatusRow};
pub use tx::ModelTx;
