//! What runs a hook: the executor an agent hands each hook to, and the guarantee a leader
//! hook is bounded by.

use std::sync::Arc;

use tokio::time::Instant;

use crate::context::{BagReader, HookRun};
use crate::model::{Hook, UnitSnapshot};
use crate::store::{BoxFuture, Fence};

/// What runs a hook: a compiled charm in wasmtime, or (in the simulation) a native
/// stand-in that goes through the same hook context and imports.
pub trait HookExecutor: Send + Sync + 'static {
    /// Runs `hook` with `snapshot` to read, pinned to `fence` (leader iff `Some`), bounded
    /// by `guarantee` while leader.
    fn execute(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
    ) -> BoxFuture<'static, HookRun>;

    /// Runs `hook` as [`execute`](Self::execute) does, reading the remote units' bags
    /// `snapshot` leaves out through `bags` as the hook asks for them, and reporting them
    /// in [`HookRun::bags_read`]. Only called on an executor that
    /// [`reads_bags_as_asked`](Self::reads_bags_as_asked).
    fn execute_reading(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
        bags: BagReader,
    ) -> BoxFuture<'static, HookRun> {
        let _ = bags;
        self.execute(snapshot, fence, guarantee, hook)
    }

    /// Whether its hooks read remote units' bags as they ask for them
    /// ([`execute_reading`](Self::execute_reading)); if not, each snapshot it gets holds
    /// them all.
    fn reads_bags_as_asked(&self) -> bool {
        false
    }

    /// The hash of the module it runs ([`crate::store::module_hash`]); `None` for one that
    /// runs no module kept in a store (a native stand-in).
    fn module_hash(&self) -> Option<&str> {
        None
    }

    /// Loads the module `bytes` into an executor of its own kind (same engine, limits and
    /// cache); `name` names it in errors. `None` if it runs no modules.
    fn load_module(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Option<Result<Arc<dyn HookExecutor>, String>> {
        let _ = (name, bytes);
        None
    }
}

/// When a leader hook must stop: the current end of the leadership guarantee, which moves
/// forward with each renewal. `None` means the guarantee is gone.
pub trait GuaranteeWatch: Send + Sync + 'static {
    /// The instant the guarantee ends, as of now.
    fn valid_until(&self) -> Option<Instant>;
}
