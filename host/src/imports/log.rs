use crate::bindings::juju::charm::log::{Host, Level};
use crate::context::{HookContext, LOG_BYTES_PER_HOOK, LOG_LINE_MAX, LOG_LINES_PER_HOOK, LogLine};

impl Host for HookContext {
    fn log(&mut self, level: Level, mut message: String) {
        if self.logs.len() >= LOG_LINES_PER_HOOK
            || self.log_bytes + message.len().min(LOG_LINE_MAX) > LOG_BYTES_PER_HOOK
        {
            self.logs_dropped += 1;
            return;
        }
        if message.len() > LOG_LINE_MAX {
            let mut end = LOG_LINE_MAX;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        self.log_bytes += message.len();
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
