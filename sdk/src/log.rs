//! The unit's log, shown by the host with the unit's name.
//!
//! ```no_run
//! charm_sdk::log::info("configuring the pod");
//! ```

use crate::wit::juju::charm::log::{Level, log};

/// Logs at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Logs at info level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Logs at warning level.
pub fn warning(message: &str) {
    log(Level::Warning, message)
}

/// Logs at error level.
pub fn error(message: &str) {
    log(Level::Error, message)
}
