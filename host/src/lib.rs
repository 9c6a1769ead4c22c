//! `charm-host` runs Juju charms compiled to WebAssembly components.
//!
//! It loads each charm with wasmtime in a sandbox (no filesystem, network or environment),
//! runs each unit's hooks one at a time from its queue, answers the charm's imports from a
//! snapshot taken when the hook starts, buffers every write and commits them together when
//! the hook succeeds. Leadership is a lease per application, renewed in the background by
//! each unit's agent; a hook's `is_leader` is pinned when it starts, and its leader-only
//! writes are committed only if the lease still has the same holder and term (the fence).
//!
//! Layers, from no I/O up: [`model`] (vocabulary), [`podspec`] (validation), [`store`]
//! (leases and state), [`leadership`] (renewal policy), [`charm`] (components and hooks),
//! [`agent`] (a unit's hook queue), [`controller`] (a deployment), [`bundle`] (Juju bundles).

#![deny(missing_docs)]

#[allow(missing_docs)]
pub mod bindings;

pub mod admission;
pub mod agent;
pub mod allocator;
mod blocking;
pub mod build;
pub mod bundle;
pub mod charm;
pub mod context;
pub mod controller;
pub mod executor;

mod imports;
pub mod leadership;
pub mod metrics;
pub mod model;
mod module_switch;
mod output;
pub mod podspec;
pub mod shared;
pub mod sim;
pub mod store;
