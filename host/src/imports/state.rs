use crate::bindings::juju::charm::state::Host;
use crate::context::{BagOf, HookContext};

impl Host for HookContext {
    fn get(&mut self, key: String) -> Option<String> {
        match self.changes.stored.get(&key) {
            Some(written) => written.clone(),
            None => self.snapshot.stored.get(&key).cloned(),
        }
    }

    fn set(&mut self, key: String, value: Option<String>) {
        self.write_key(BagOf::Stored, key, value);
    }
}
