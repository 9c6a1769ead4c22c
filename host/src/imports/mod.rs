//! The host side of each WIT interface the charm imports, one file per interface.

mod action;
mod config;
mod leadership;
mod log;
mod pod;
mod relations;
mod state;
mod status;

use crate::bindings::types::Error;

/// A write of a leader-only thing by a hook that did not start as leader.
fn require_leader(ctx: &mut crate::context::HookContext) -> Result<(), Error> {
    if ctx.is_leader() {
        Ok(())
    } else {
        ctx.leadership_refusals += 1;
        Err(Error::NotLeader)
    }
}

impl crate::bindings::types::Host for crate::context::HookContext {}
