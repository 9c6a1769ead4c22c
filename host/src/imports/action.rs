use crate::bindings::juju::charm::action::Host;
use crate::bindings::types::Error;
use crate::context::HookContext;

/// Juju's rule for result keys: lowercase letters, digits and `-`, starting with a letter.
fn valid_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl Host for HookContext {
    fn set_results(&mut self, results: Vec<(String, String)>) -> Result<(), Error> {
        if let Some((key, _)) = results.iter().find(|(k, _)| !valid_key(k)) {
            return Err(Error::InvalidArgument(format!(
                "action result key {key:?}: use lowercase letters, digits and '-', starting with a letter"
            )));
        }
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
