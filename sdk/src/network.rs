//! The unit's network addresses: Juju's `network-get`.

use crate::Model;
use crate::backend;
use crate::error::Result;

/// A unit's addresses for one of its endpoints, as Juju's `network-get` gives them.
///
/// The host also sets them in each of the unit's relation bags, as Juju does:
/// `ingress-address` and `private-address` (the first ingress address), and
/// `egress-subnets` (comma-separated) when there are any. A unit's address is its pod's
/// DNS name, `<app>-<n>.<app>-endpoints.<model>.svc.cluster.local`; a DNS name gives no
/// egress subnets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Network {
    /// The addresses the workload listens on.
    pub bind_addresses: Vec<String>,
    /// The addresses other units reach this unit at.
    pub ingress_addresses: Vec<String>,
    /// The subnets this unit's traffic comes from, in CIDR form.
    pub egress_subnets: Vec<String>,
}

impl Network {
    /// The address other units reach this unit at: the first ingress address.
    ///
    /// ```
    /// let net = charm_sdk::Network {
    ///     ingress_addresses: vec!["10.0.0.7".into()],
    ///     ..Default::default()
    /// };
    /// assert_eq!(net.ingress_address(), Some("10.0.0.7"));
    /// ```
    pub fn ingress_address(&self) -> Option<&str> {
        self.ingress_addresses.first().map(String::as_str)
    }

    /// The address the workload should listen on: the first bind address.
    ///
    /// ```
    /// let net = charm_sdk::Network {
    ///     bind_addresses: vec!["db-0.db-endpoints.m.svc.cluster.local".into()],
    ///     ..Default::default()
    /// };
    /// assert_eq!(net.bind_address(), Some("db-0.db-endpoints.m.svc.cluster.local"));
    /// ```
    pub fn bind_address(&self) -> Option<&str> {
        self.bind_addresses.first().map(String::as_str)
    }
}

impl Model {
    /// This unit's addresses for `endpoint`, one of the endpoints its charm declares
    /// (Juju's `network-get`); [`crate::Error::InvalidArgument`] for any other name.
    ///
    /// ```
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
    ///
    /// struct Db;
    /// impl Charm for Db {
    ///     fn metadata() -> Metadata {
    ///         Metadata::new("db").provides("db", "pgsql")
    ///     }
    ///     fn handle(model: &Model, _: Event) -> HookResult {
    ///         let net = model.network("db")?;
    ///         let address = net.ingress_address().unwrap_or_default();
    ///         model.stored().set("address", address)?;
    ///         assert!(model.network("nope").is_err());
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let out = Context::<Db>::new().unit("db/1").run(Event::Start, State::default());
    /// assert_eq!(
    ///     out.state.stored["address"],
    ///     "\"db-1.db-endpoints.test.svc.cluster.local\""
    /// );
    /// ```
    pub fn network(&self, endpoint: &str) -> Result<Network> {
        backend::with(|b| b.network_get(endpoint))
    }
}
