use crate::bindings::juju::charm::log::{Host, Level};
use crate::context::{HookContext, LogLine};

impl Host for HookContext {
    fn log(&mut self, level: Level, message: String) {
        let unit = self.snapshot.unit.as_str();
        let level = match level {
            Level::Trace => {
                tracing::trace!(target: "charm", unit, "{message}");
                "trace"
            }
            Level::Debug => {
                tracing::debug!(target: "charm", unit, "{message}");
                "debug"
            }
            Level::Info => {
                tracing::info!(target: "charm", unit, "{message}");
                "info"
            }
            Level::Warning => {
                tracing::warn!(target: "charm", unit, "{message}");
                "warning"
            }
            Level::Error => {
                tracing::error!(target: "charm", unit, "{message}");
                "error"
            }
        };
        self.logs.push(LogLine { level, message });
    }
}
