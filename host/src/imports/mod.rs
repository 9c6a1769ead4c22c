//! The host side of each WIT interface the charm imports, one file per interface.

mod action;
mod config;
mod leadership;
mod log;
mod network;
mod pod;
mod relations;
mod state;
mod status;
mod v0_1;

use charm_model::access::{self, AccessError};

use crate::bindings::types::Error;
use crate::context::HookContext;

impl HookContext {
    /// The verdict of one of the model's access rules ([`charm_model::access`]), as the
    /// charm sees it; a leadership refusal is counted.
    fn allowed<T>(&mut self, verdict: Result<T, AccessError>) -> Result<T, Error> {
        verdict.map_err(|e| match e {
            AccessError::NotLeader => {
                self.leadership_refusals += 1;
                Error::NotLeader
            }
            AccessError::RelationNotFound(id) => Error::RelationNotFound(id),
            AccessError::PermissionDenied(why) => Error::PermissionDenied(why),
            AccessError::InvalidArgument(why) => Error::InvalidArgument(why),
        })
    }
}

/// A leader-only call from a hook that did not start as leader.
fn require_leader(ctx: &mut HookContext) -> Result<(), Error> {
    let leader = ctx.is_leader();
    ctx.allowed(access::require_leader(leader))
}

impl crate::bindings::types::Host for crate::context::HookContext {}
