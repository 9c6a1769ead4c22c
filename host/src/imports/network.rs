use charm_model::network::unit_network;

use crate::bindings::juju::charm::network::{Host, NetworkInfo};
use crate::bindings::types::Error;
use crate::context::HookContext;

impl Host for HookContext {
    fn network_get(&mut self, endpoint: String) -> Result<NetworkInfo, Error> {
        if self.metadata.endpoint(&endpoint).is_none() {
            return Err(Error::InvalidArgument(format!(
                "network-get: charm {} declares no endpoint {endpoint:?}",
                self.metadata.name
            )));
        }
        let net = unit_network(&self.snapshot.model, &self.snapshot.unit);
        Ok(NetworkInfo {
            bind_addresses: net.bind_addresses,
            ingress_addresses: net.ingress_addresses,
            egress_subnets: net.egress_subnets,
        })
    }
}
