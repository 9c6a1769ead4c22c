//! The unit's log, shown by the host with the unit's name.
//!
//! ```
//! use charm_sdk::testing::{Context, State};
//! # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
//! # struct Quiet;
//! # impl Charm for Quiet {
//! #     fn metadata() -> Metadata { Metadata::new("quiet") }
//! #     fn handle(_: &Model, _: Event) -> HookResult {
//! charm_sdk::log::info("configuring the pod");
//! #         Ok(())
//! #     }
//! # }
//! let out = Context::<Quiet>::new().run(Event::Install, State::default());
//! assert_eq!(out.logs[0].message, "configuring the pod");
//! ```

use serde::{Deserialize, Serialize};

/// How important a log line is.
///
/// ```
/// assert_eq!(charm_sdk::log::Level::Warning.as_str(), "warning");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Finest detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the charm handled.
    Warning,
    /// Something failed.
    Error,
}

impl Level {
    /// The level's name, as the host prints it.
    ///
    /// ```
    /// assert_eq!(charm_sdk::log::Level::Info.as_str(), "info");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// Logs at this level.
///
/// ```no_run
/// charm_sdk::log::log(charm_sdk::log::Level::Trace, "every detail");
/// ```
pub fn log(level: Level, message: &str) {
    crate::backend::with(|b| b.log(level, message))
}

/// Logs at debug level.
///
/// ```no_run
/// charm_sdk::log::debug("pod spec unchanged");
/// ```
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Logs at info level.
///
/// ```no_run
/// charm_sdk::log::info("configuring the pod");
/// ```
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Logs at warning level.
///
/// ```no_run
/// charm_sdk::log::warning("no database yet");
/// ```
pub fn warning(message: &str) {
    log(Level::Warning, message)
}

/// Logs at error level.
///
/// ```no_run
/// charm_sdk::log::error("cannot reach the workload");
/// ```
pub fn error(message: &str) {
    log(Level::Error, message)
}
