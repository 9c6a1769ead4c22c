//! What a running host tells an operator's monitoring: Prometheus metrics (hooks, leases,
//! store requests, charm loads, the process) and the health endpoints, served by
//! `charm-host run --metrics-addr`.
//!
//! Label sets are bounded: applications, hook names (bounded by each charm's endpoints and
//! actions), results, store operations and error kinds. No label names a unit or a hook's
//! sequence number, whose numbers grow while a model lives; per-unit figures are sums over
//! an application's units run here ([`HostMetrics`] says which).
//!
//! Updates on the hook path are atomic adds on handles resolved once per unit's agent
//! ([`UnitMetrics`]) or per application's lease ([`LeaseMetrics`]), and a lookup in a
//! small map per store request.

mod endpoints;
mod leases;
mod process;
mod registry;

pub use endpoints::{Readiness, serve};
pub use registry::{HostMetrics, LeaseMetrics, StoreMetrics, UnitMetrics};
