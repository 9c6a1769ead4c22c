use crate::bindings::juju::charm::config::Host;
use crate::bindings::types::{ConfigValue as WitValue, Error};
use crate::context::HookContext;
use crate::model::ConfigValue;

fn to_wit(value: &ConfigValue) -> WitValue {
    match value {
        ConfigValue::String(s) => WitValue::String(s.clone()),
        ConfigValue::Int(i) => WitValue::Int(*i),
        ConfigValue::Float(f) => WitValue::Float(*f),
        ConfigValue::Boolean(b) => WitValue::Boolean(*b),
    }
}

impl Host for HookContext {
    fn config_get(&mut self, name: String) -> Result<Option<WitValue>, Error> {
        if self.metadata.option(&name).is_none() {
            return Err(Error::UnknownConfigOption(name));
        }
        Ok(self.snapshot.config.get(&name).map(to_wit))
    }

    fn config_get_all(&mut self) -> Vec<(String, WitValue)> {
        self.snapshot
            .config
            .iter()
            .map(|(k, v)| (k.clone(), to_wit(v)))
            .collect()
    }
}
