//! A compiled charm as a hook executor: each hook runs off the async runtime, its model
//! hook given to the charm as the contract's event.

use std::sync::Arc;

use super::Charm;
use crate::bindings::types as wit;
use crate::context::{BagReader, HookRun};
use crate::executor::{GuaranteeWatch, HookExecutor};
use crate::model::{Hook, RelationHook, UnitSnapshot};
use crate::store::{BoxFuture, Fence};

impl HookExecutor for Charm {
    fn execute(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
    ) -> BoxFuture<'static, HookRun> {
        self.run_off_runtime(snapshot, fence, guarantee, hook, None)
    }

    fn execute_reading(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
        bags: BagReader,
    ) -> BoxFuture<'static, HookRun> {
        self.run_off_runtime(snapshot, fence, guarantee, hook, Some(bags))
    }

    fn reads_bags_as_asked(&self) -> bool {
        true
    }

    fn module_hash(&self) -> Option<&str> {
        Some(Charm::module_hash(self))
    }

    fn load_module(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Option<Result<Arc<dyn HookExecutor>, String>> {
        Some(
            self.load_sibling(std::path::Path::new(name), bytes)
                .map(|charm| Arc::new(charm) as Arc<dyn HookExecutor>)
                .map_err(|e| e.to_string()),
        )
    }
}

impl Charm {
    /// Runs `hook` on a blocking thread: wasmtime runs synchronously (and WASI blocks on
    /// tokio), and a bag read from the store blocks the hook until it arrives.
    fn run_off_runtime(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
        bags: Option<BagReader>,
    ) -> BoxFuture<'static, HookRun> {
        let charm = self.clone();
        // The hook's span (unit, hook, term) goes along, so that what the charm logs says
        // which hook it came from.
        let span = tracing::Span::current();
        Box::pin(async move {
            let event = to_event(&hook);
            crate::blocking::off_runtime(move || {
                let _in_hook = span.enter();
                charm.run_hook_reading(snapshot, fence, guarantee, &event, bags)
            })
            .await
            .unwrap_or_else(|e| HookRun::failed_to_run(format!("hook task failed: {e}")))
        })
    }
}

/// The contract's event for a model hook.
pub(crate) fn to_event(hook: &Hook) -> wit::Event {
    let rel = |r: &RelationHook| wit::RelationEvent {
        id: r.id,
        name: r.endpoint.clone(),
        remote_app: r.remote_app.clone(),
        remote_unit: r.remote_unit.clone(),
    };
    match hook {
        Hook::Install => wit::Event::Install,
        Hook::Start => wit::Event::Start,
        Hook::ConfigChanged => wit::Event::ConfigChanged,
        Hook::UpgradeCharm => wit::Event::UpgradeCharm,
        Hook::UpdateStatus => wit::Event::UpdateStatus,
        Hook::Stop => wit::Event::Stop,
        Hook::Remove => wit::Event::Remove,
        Hook::LeaderElected => wit::Event::LeaderElected,
        Hook::LeaderSettingsChanged => wit::Event::LeaderSettingsChanged,
        Hook::RelationCreated(r) => wit::Event::RelationCreated(rel(r)),
        Hook::RelationJoined(r) => wit::Event::RelationJoined(rel(r)),
        Hook::RelationChanged(r) => wit::Event::RelationChanged(rel(r)),
        Hook::RelationDeparted(r) => wit::Event::RelationDeparted(rel(r)),
        Hook::RelationBroken(r) => wit::Event::RelationBroken(rel(r)),
        Hook::Action { id, name, params } => wit::Event::Action(wit::ActionEvent {
            id: id.clone(),
            name: name.clone(),
            params: params.clone(),
        }),
    }
}
