use charm_model::access;

use crate::bindings::juju::charm::leadership::Host;
use crate::bindings::types::Error;
use crate::context::{BagOf, HookContext, overlay};

impl Host for HookContext {
    fn is_leader(&mut self) -> bool {
        // Pinned when the hook started; never a call to the lease store.
        self.fence.is_some()
    }

    fn leader_get(&mut self, key: String) -> Option<String> {
        match self.changes.leader_data.get(&key) {
            Some(written) => written.clone(),
            None => self.snapshot.leader_data.get(&key).cloned(),
        }
    }

    fn leader_get_all(&mut self) -> Vec<(String, String)> {
        overlay(
            Some(&*self.snapshot.leader_data),
            Some(&self.changes.leader_data),
        )
        .into_iter()
        .collect()
    }

    fn leader_set(&mut self, key: String, value: Option<String>) -> Result<(), Error> {
        let leader = self.is_leader();
        self.allowed(access::write_leader_data(&key, value.as_deref(), leader))?;
        self.write_key(BagOf::Leader, key, value);
        Ok(())
    }
}
