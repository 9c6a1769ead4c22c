//! An application's hook executor that follows the module its record names: when a hook's
//! snapshot (taken as the hook starts) names a module other than the one loaded, that one
//! is read from the store, loaded through the compiled-charm cache, and runs the hook and
//! every later one. A hook already running keeps the executor it started on, so it
//! finishes on the old module (`charm-host upgrade-charm`).

use std::sync::{Arc, RwLock};

use crate::context::{BagReader, HookRun};
use crate::executor::{GuaranteeWatch, HookExecutor};
use crate::model::{Hook, UnitSnapshot};
use crate::store::{BoxFuture, Fence, Store};

/// The executor of one application's units on this host, switched to a new module when
/// the application's record names one.
#[derive(Clone)]
pub(crate) struct ModuleSwitch(Arc<Switch>);

struct Switch {
    app: String,
    store: Arc<dyn Store>,
    current: RwLock<Arc<dyn HookExecutor>>,
    /// One load at a time: the units of the application that start a hook together wait
    /// for the first one's load rather than compile the module again.
    loading: tokio::sync::Mutex<()>,
}

impl ModuleSwitch {
    /// `executor`, following `app`'s module in `store` from now on.
    pub(crate) fn wrap(
        app: &str,
        store: Arc<dyn Store>,
        executor: Arc<dyn HookExecutor>,
    ) -> Arc<dyn HookExecutor> {
        Arc::new(ModuleSwitch(Arc::new(Switch {
            app: app.to_string(),
            store,
            current: RwLock::new(executor),
            loading: tokio::sync::Mutex::new(()),
        })))
    }
}

impl Switch {
    /// The executor for a hook whose snapshot names `module`.
    async fn executor_for(&self, module: Option<&str>) -> Result<Arc<dyn HookExecutor>, String> {
        let current = self.current();
        match module {
            // A native stand-in runs no module: nothing to follow.
            Some(hash) if current.module_hash().is_some_and(|h| h != hash) => {
                self.follow(hash).await
            }
            _ => Ok(current),
        }
    }

    fn current(&self) -> Arc<dyn HookExecutor> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The executor for module `hash`: the current one if it runs it, else the module
    /// read from the store and loaded.
    async fn follow(&self, hash: &str) -> Result<Arc<dyn HookExecutor>, String> {
        let _one = self.loading.lock().await;
        let current = self.current();
        if current.module_hash() == Some(hash) {
            return Ok(current);
        }
        let bytes = self
            .store
            .module(hash)
            .await
            .map_err(|e| format!("reading module {hash}: {e}"))?
            .ok_or_else(|| format!("module {hash} is not in the store"))?;
        let name = format!("{} (module {})", self.app, &hash[..hash.len().min(12)]);
        let from = current.clone();
        // Compiling a module is seconds of CPU: keep it off the runtime.
        let loaded = crate::blocking::off_runtime(move || from.load_module(&name, &bytes))
            .await
            .map_err(|e| format!("loading module {hash}: {e}"))?;
        let next = match loaded {
            Some(Ok(next)) => next,
            Some(Err(e)) => return Err(format!("loading module {hash}: {e}")),
            None => return Ok(current),
        };
        tracing::info!(
            app = %self.app,
            from = current.module_hash().unwrap_or("none"),
            to = hash,
            "running the application's new module"
        );
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next.clone();
        Ok(next)
    }
}

impl HookExecutor for ModuleSwitch {
    fn execute(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
    ) -> BoxFuture<'static, HookRun> {
        let switch = self.0.clone();
        Box::pin(async move {
            match switch.executor_for(snapshot.module.as_deref()).await {
                Ok(executor) => executor.execute(snapshot, fence, guarantee, hook).await,
                Err(e) => HookRun::failed_to_run(e),
            }
        })
    }

    fn execute_reading(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        hook: Hook,
        bags: BagReader,
    ) -> BoxFuture<'static, HookRun> {
        let switch = self.0.clone();
        Box::pin(async move {
            // A module is loaded into an executor of the current one's kind, which reads
            // bags as asked just as the current one does.
            match switch.executor_for(snapshot.module.as_deref()).await {
                Ok(executor) => {
                    executor
                        .execute_reading(snapshot, fence, guarantee, hook, bags)
                        .await
                }
                Err(e) => HookRun::failed_to_run(e),
            }
        })
    }

    fn reads_bags_as_asked(&self) -> bool {
        self.0.current().reads_bags_as_asked()
    }

    fn module_hash(&self) -> Option<&str> {
        // The switch follows whatever module its application names.
        None
    }
}
