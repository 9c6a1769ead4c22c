use charm_model::access;

use crate::bindings::juju::charm::action::Host;
use crate::bindings::types::Error;
use crate::context::HookContext;

impl Host for HookContext {
    fn set_results(&mut self, results: Vec<(String, String)>) -> Result<(), Error> {
        self.allowed(access::action_result_keys(
            results.iter().map(|(k, _)| k.as_str()),
        ))?;
        let output = self.changes.action.get_or_insert_default();
        output.results.extend(results);
        Ok(())
    }

    fn fail(&mut self, message: String) {
        self.changes.action.get_or_insert_default().failure = Some(message);
    }

    fn log(&mut self, message: String) {
        tracing::info!(target: "charm", unit = %self.snapshot.unit, "action: {message}");
        self.changes
            .action
            .get_or_insert_default()
            .log
            .push(message);
    }
}
