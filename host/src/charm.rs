//! Loading charm components and running their hooks in the sandbox.
//!
//! What makes a hook cheap: the component is compiled once (and cached on disk, see
//! [`cache`]), linked once per charm (`CharmPre`), and each hook's fresh instance comes from
//! wasmtime's pooling allocator, whose slots keep their mappings between hooks and map the
//! charm's initial memory copy-on-write instead of copying it.

pub mod cache;
mod executor;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use charm_model::leadership::hook_may_continue;
use tokio::time::Instant;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    Component, ComponentExportIndex, HasSelf, InstancePre, Linker, TypedFunc,
};
use wasmtime::{
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline,
};

use crate::bindings::{self, Charm as CharmBindings, CharmPre, types};
use crate::context::{HookContext, Interruption};
pub use crate::context::{HookOutcome, HookRun};
pub use crate::executor::GuaranteeWatch;
use crate::model::{
    ActionMeta, ActionParamMeta, CharmMetadata, ConfigOptionMeta, ConfigValue, EndpointMeta,
    OptionType, RelationRole, UnitSnapshot,
};
use crate::store::Fence;

/// The interfaces of our package a charm may import.
const CHARM_INTERFACES: &[&str] = &[
    "types",
    "leadership",
    "pod",
    "config",
    "relations",
    "status",
    "log",
    "state",
    "action",
    "network",
];
/// The package and version of the current contract, which the SDK builds charms against.
pub const WIT_PACKAGE: &str = "juju:charm@0.2.4";
/// Every contract version this host runs, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.2.1", "0.2.2", "0.2.3", "0.2.4"];

/// The version of the contract a charm was built against; it decides which world's
/// bindings read its metadata and which imports it links to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ContractVersion {
    /// `juju:charm@0.1.0`, frozen: actions without declared parameters.
    V0_1,
    /// `juju:charm@0.2.0`, frozen: actions declare typed parameters. Its imports are
    /// 0.2.4's less what the later patches added, so its charms link to 0.2.4's as semver
    /// says (`juju:charm/relations@0.2.0` is satisfied by `@0.2.4`).
    V0_2,
    /// `juju:charm@0.2.1`, frozen: adds `network` (Juju's `network-get`).
    V0_2_1,
    /// `juju:charm@0.2.2`, frozen: adds `relation-get-packed`, a relation's unit names in
    /// one string.
    V0_2_2,
    /// `juju:charm@0.2.3`, frozen: adds `unit-data-inline` and `app-data-inline`, a bag
    /// with its long values left out, and `unit-data-value` and `app-data-value`, one value
    /// of a bag.
    V0_2_3,
    /// `juju:charm@0.2.4`, the current one: adds `relation-get-summary`, a relation without
    /// its units, and `relation-list-packed`, its units alone.
    V0_2_4,
}

impl ContractVersion {
    /// The version as the WIT package spells it, such as `0.2.0`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContractVersion::V0_1 => "0.1.0",
            ContractVersion::V0_2 => "0.2.0",
            ContractVersion::V0_2_1 => "0.2.1",
            ContractVersion::V0_2_2 => "0.2.2",
            ContractVersion::V0_2_3 => "0.2.3",
            ContractVersion::V0_2_4 => "0.2.4",
        }
    }

    fn parse(version: &str) -> Option<Self> {
        match version {
            "0.1.0" => Some(ContractVersion::V0_1),
            "0.2.0" => Some(ContractVersion::V0_2),
            "0.2.1" => Some(ContractVersion::V0_2_1),
            "0.2.2" => Some(ContractVersion::V0_2_2),
            "0.2.3" => Some(ContractVersion::V0_2_3),
            "0.2.4" => Some(ContractVersion::V0_2_4),
            _ => None,
        }
    }
}

impl std::fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
/// The largest charm file loaded: a Rust charm is a few hundred KiB to a few MiB, and
/// compiling one costs memory and time in proportion.
pub const CHARM_SIZE_MAX: u64 = 32 << 20;
/// The functions a charm must export.
const EXPORTS: &[&str] = &["metadata", "handle-hook"];
/// How often the engine's epoch advances: the granularity of hook deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// What one hook's instance may hold of the pool: a Rust charm built for `wasm32-wasip2` has
/// one memory, a few tables and a few core instances (its module and the component's shims).
/// A charm needing more is refused when it loads, as its metadata runs in an instance too.
const CORE_INSTANCES_PER_HOOK: u32 = 16;
const MEMORIES_PER_HOOK: u32 = 2;
const TABLES_PER_HOOK: u32 = 8;
/// How much of a slot's memory stays resident between hooks (reset by copying, not
/// unmapping): a charm's hook dirties a few hundred KiB at most.
const KEEP_RESIDENT: usize = 1 << 20;

/// Why a charm could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than any charm may be.
    #[error("{path}: {size} bytes; a charm may be at most {limit} bytes", limit = CHARM_SIZE_MAX)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The file is not WebAssembly.
    #[error("{path}: not a WebAssembly file (no \\0asm header)")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// The file is a core module, not a component.
    #[error(
        "{path}: a core WebAssembly module, not a component; build the charm with `--target wasm32-wasip2`"
    )]
    CoreModule {
        /// The file.
        path: PathBuf,
    },
    /// The component is not a charm of our world, at any version this host runs.
    #[error(
        "{path}: not a charm of world `juju:charm/charm` at a version this host runs ({}): {reason}",
        SUPPORTED_VERSIONS.join(", ")
    )]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// What is missing or unexpected.
        reason: String,
    },
    /// The component failed to compile or link.
    #[error("{path}: {what}: {source:#}")]
    Wasm {
        /// The file.
        path: PathBuf,
        /// What the host was doing.
        what: &'static str,
        /// wasmtime's error.
        source: wasmtime::Error,
    },
    /// The charm's metadata is unusable.
    #[error("{path}: bad metadata: {reason}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// How long a hook may run by default. A charm has no network or filesystem: a hook is
/// computation alone, which takes microseconds to milliseconds (the demo's hooks, 60 us), so
/// a minute only ever stops a charm that will not finish.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// The runtime's limits.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The most linear memory one hook may use.
    pub memory_limit: usize,
    /// The longest one hook may run, whatever its leadership.
    pub hook_timeout: Duration,
    /// A leader hook stops this long before its leadership guarantee ends, so that it
    /// never acts on leadership the lease store may already have given away.
    pub guarantee_margin: Duration,
    /// The most hooks that run at once in this runtime; more wait for a free slot. The
    /// pooling allocator reserves address space (not memory) for this many instances.
    pub max_concurrent_hooks: u32,
    /// Where compiled charms are cached ([`cache`]); `None` compiles every load.
    pub compile_cache: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_limit: 256 << 20,
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
            guarantee_margin: Duration::from_millis(500),
            max_concurrent_hooks: 64,
            compile_cache: cache::default_dir(),
        }
    }
}

/// Where a charm's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadedFrom {
    /// Compiled from its WebAssembly now.
    Compiled,
    /// Read from the compiled-charm cache.
    Cache,
}

/// Counts the hooks running at once, so they never ask the pool for more slots than it has
/// (the pool would fail the instantiation instead of waiting).
struct HookSlots {
    state: Mutex<SlotCount>,
    freed: Condvar,
}

/// The slots free, and the hooks waiting for one.
struct SlotCount {
    free: u32,
    waiting: u32,
}

/// A hook's claim on a slot; gives it back when dropped.
struct HookSlot<'a>(&'a HookSlots);

impl HookSlots {
    fn new(slots: u32) -> Self {
        HookSlots {
            state: Mutex::new(SlotCount {
                free: slots,
                waiting: 0,
            }),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) -> HookSlot<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.free == 0 {
            state.waiting += 1;
            state = self.freed.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiting -= 1;
        }
        state.free -= 1;
        HookSlot(self)
    }
}

impl Drop for HookSlot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        state.free += 1;
        // A notification is a system call (a futex wake) even with nobody waiting: made
        // only when a hook waits, which is rare, instead of after every hook.
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.0.freed.notify_one();
        }
    }
}

/// A wasmtime engine and linker set up for charms, shared by every charm it loads.
#[derive(Clone)]
pub struct CharmRuntime {
    engine: Engine,
    linker: Arc<Linker<HookContext>>,
    config: Arc<RuntimeConfig>,
    slots: Arc<HookSlots>,
    cache: Option<cache::CompileCache>,
}

impl CharmRuntime {
    /// A runtime with these limits. Starts the thread that drives hook deadlines.
    pub fn new(config: RuntimeConfig) -> Result<Self, wasmtime::Error> {
        let hooks = config.max_concurrent_hooks.max(1);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(hooks)
            .total_core_instances(hooks * CORE_INSTANCES_PER_HOOK)
            .total_memories(hooks * MEMORIES_PER_HOOK)
            .total_tables(hooks * TABLES_PER_HOOK)
            .total_stacks(hooks)
            .max_core_instances_per_component(CORE_INSTANCES_PER_HOOK)
            .max_memories_per_component(MEMORIES_PER_HOOK)
            .max_tables_per_component(TABLES_PER_HOOK)
            // The pool's own cap; the store's limiter enforces the configured one exactly.
            .max_memory_size(config.memory_limit.min(1 << 32))
            // Between hooks, put back only the pages a hook dirtied (found with Linux's
            // PAGEMAP_SCAN where the kernel has it) by copying, instead of unmapping them:
            // the next hook in the slot then takes no page faults on them.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut wasm = wasmtime::Config::new();
        wasm.epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            // A fresh instance maps the charm's initial memory copy-on-write (the default;
            // stated because hook cost depends on it).
            .memory_init_cow(true);
        #[cfg(feature = "profiling")]
        wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        let engine = Engine::new(&wasm)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // Every supported version's imports, side by side: their instance names differ by
        // version, and each component links to the ones it was built against.
        CharmBindings::add_to_linker::<HookContext, HasSelf<HookContext>>(&mut linker, |ctx| ctx)?;
        bindings::v0_1::Charm::add_to_linker::<HookContext, HasSelf<HookContext>>(
            &mut linker,
            |ctx| ctx,
        )?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })?;
        let cache = config
            .compile_cache
            .clone()
            .map(|dir| cache::CompileCache::new(&engine, dir));
        Ok(CharmRuntime {
            engine,
            linker: Arc::new(linker),
            config: Arc::new(config),
            slots: Arc::new(HookSlots::new(hooks)),
            cache,
        })
    }

    /// The wasmtime engine charms are compiled for.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The runtime's limits.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Loads the charm in `path`.
    pub fn load_file(&self, path: &Path) -> Result<Charm, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        if size > CHARM_SIZE_MAX {
            return Err(LoadError::TooLarge {
                path: path.to_owned(),
                size,
            });
        }
        let mut bytes = Vec::new();
        // Read no more than the limit, even if the file grows meanwhile.
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, CHARM_SIZE_MAX + 1),
            &mut bytes,
        )
        .map_err(io)?;
        self.load(path, &bytes)
    }

    /// Loads a charm from its bytes; `path` names it in errors.
    pub fn load(&self, path: &Path, bytes: &[u8]) -> Result<Charm, LoadError> {
        let path = path.to_owned();
        let size = bytes.len() as u64;
        if size > CHARM_SIZE_MAX {
            return Err(LoadError::TooLarge { path, size });
        }
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => return Err(LoadError::CoreModule { path }),
            Some([0, b'a', b's', b'm', ..]) => {}
            _ => return Err(LoadError::NotWasm { path }),
        }
        let (component, loaded_from, entry) = self.compile(&path, bytes)?;
        let wrong_world = |reason| LoadError::WrongWorld {
            path: path.clone(),
            reason,
        };
        let imported = check_world(&self.engine, &component).map_err(wrong_world)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| wrong_world(format!("{e:#}")))?;
        let contract = contract_of(imported, &pre).map_err(wrong_world)?;
        let handle_hook = pre
            .component()
            .get_export_index(None, "handle-hook")
            .ok_or_else(|| LoadError::WrongWorld {
                path: path.clone(),
                reason: "it does not export handle-hook".into(),
            })?;
        let mut charm = Charm {
            runtime: self.clone(),
            pre,
            contract,
            handle_hook,
            // Filled in from the charm's own `metadata` export just below.
            metadata: Arc::default(),
            loaded_from,
            pod_specs: Arc::default(),
            module: Arc::from(bytes),
            module_hash: Arc::from(crate::store::module_hash(bytes)),
        };
        charm.metadata = Arc::new(charm.read_metadata(&path)?);
        // Only a charm that loaded is worth keeping.
        if let (Some(cache), Some(entry)) = (&self.cache, entry) {
            match cache.put(&entry, &component) {
                Ok(()) => {
                    tracing::debug!(charm = %path.display(), entry = %entry.display(), "cached compiled charm")
                }
                Err(e) => {
                    tracing::warn!(charm = %path.display(), "cannot cache compiled charm: {e}")
                }
            }
        }
        Ok(charm)
    }

    /// The compiled component: from the cache when it has a sound entry, else compiled (with
    /// the entry to write once the charm has loaded).
    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Component, LoadedFrom, Option<PathBuf>), LoadError> {
        let entry = self.cache.as_ref().map(|cache| cache.entry(bytes));
        if let (Some(cache), Some(entry)) = (&self.cache, &entry) {
            match cache.get(&self.engine, entry) {
                Ok(Some(component)) => return Ok((component, LoadedFrom::Cache, None)),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(charm = %path.display(), "compiled-charm cache entry unusable, compiling: {e}")
                }
            }
        }
        let component = Component::new(&self.engine, bytes).map_err(|source| LoadError::Wasm {
            path: path.to_owned(),
            what: "cannot compile component",
            source,
        })?;
        Ok((component, LoadedFrom::Compiled, entry))
    }
}

/// Checks a component's imports and exports against the `charm` world, naming what is
/// missing or foreign. The answer is the contract version its imports name, if they name
/// one: a charm built against one version imports only that version's interfaces.
fn check_world(engine: &Engine, component: &Component) -> Result<Option<ContractVersion>, String> {
    let ty = component.component_type();
    let mut problems = Vec::new();
    for name in EXPORTS {
        match ty.get_export(engine, name).map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(_)) => {}
            Some(_) => problems.push(format!("export `{name}` is not a function")),
            None => problems.push(format!("missing export `{name}`")),
        }
    }
    let mut versions = std::collections::BTreeSet::new();
    for (name, _) in ty.imports(engine) {
        if let Some(rest) = name.strip_prefix("juju:charm/") {
            let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
            match ContractVersion::parse(version) {
                Some(v) if CHARM_INTERFACES.contains(&iface) => {
                    versions.insert(v);
                }
                Some(_) => problems.push(format!(
                    "imports `{name}`, which this host does not provide"
                )),
                None => problems.push(format!(
                    "imports `{name}`: contract version {version:?} is not one this host runs"
                )),
            }
        } else if !name.starts_with("wasi:") {
            problems.push(format!(
                "imports `{name}`, which this host does not provide"
            ));
        }
    }
    if versions.len() > 1 {
        problems.push(format!(
            "imports interfaces of more than one contract version ({}); a charm is built \
             against one",
            versions
                .iter()
                .map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(versions.into_iter().next())
    } else {
        Err(problems.join("; "))
    }
}

/// The contract version of a component: the one its imports name, else (a charm that
/// imports nothing of ours) the newest whose exports it matches. Either way its exports are
/// checked against that version's world.
fn contract_of(
    imported: Option<ContractVersion>,
    pre: &InstancePre<HookContext>,
) -> Result<ContractVersion, String> {
    let matches = |version| match version {
        ContractVersion::V0_2
        | ContractVersion::V0_2_1
        | ContractVersion::V0_2_2
        | ContractVersion::V0_2_3
        | ContractVersion::V0_2_4 => CharmPre::new(pre.clone()).map(drop),
        ContractVersion::V0_1 => bindings::v0_1::CharmPre::new(pre.clone()).map(drop),
    };
    match imported {
        Some(version) => matches(version)
            .map(|()| version)
            .map_err(|e| format!("its exports do not match contract {version}: {e:#}")),
        None => [ContractVersion::V0_2_4, ContractVersion::V0_1]
            .into_iter()
            .find(|&v| matches(v).is_ok())
            .ok_or_else(|| {
                format!(
                    "its exports match the world of no contract version this host runs ({})",
                    SUPPORTED_VERSIONS.join(", ")
                )
            }),
    }
}

/// A loaded charm, ready to run hooks. Cheap to clone.
#[derive(Clone)]
pub struct Charm {
    runtime: CharmRuntime,
    pre: InstancePre<HookContext>,
    /// The contract version the charm was built against.
    contract: ContractVersion,
    /// Where `handle-hook` is among the component's exports. Its type is checked once, by
    /// the instance that reads the metadata when the charm loads; a hook's call then looks
    /// it up by index and checks nothing (see [`Charm::run_hook`]).
    handle_hook: ComponentExportIndex,
    metadata: Arc<CharmMetadata>,
    loaded_from: LoadedFrom,
    /// The pod spec each of its applications last set, validated.
    pod_specs: Arc<crate::podspec::LastValid>,
    /// Its module's bytes, as kept in the store, and their hash
    /// ([`crate::store::module_hash`]).
    module: Arc<[u8]>,
    module_hash: Arc<str>,
}

impl Charm {
    /// Its module's bytes.
    pub fn module(&self) -> &[u8] {
        &self.module
    }

    /// The hash its module is kept under in the store ([`crate::store::module_hash`]).
    pub fn module_hash(&self) -> &str {
        &self.module_hash
    }

    /// Loads another module with this charm's runtime (its engine, limits and cache);
    /// `path` names it in errors.
    pub fn load_sibling(&self, path: &Path, bytes: &[u8]) -> Result<Charm, LoadError> {
        self.runtime.load(path, bytes)
    }

    /// The charm's metadata.
    pub fn metadata(&self) -> &Arc<CharmMetadata> {
        &self.metadata
    }

    /// The contract version the charm was built against.
    pub fn contract_version(&self) -> ContractVersion {
        self.contract
    }

    /// Whether the charm was compiled when it loaded or read from the cache.
    pub fn loaded_from(&self) -> LoadedFrom {
        self.loaded_from
    }

    fn read_metadata(&self, path: &Path) -> Result<CharmMetadata, LoadError> {
        let snapshot = UnitSnapshot::default();
        let ctx = HookContext::new(
            snapshot,
            None,
            self.metadata.clone(),
            self.runtime.config.memory_limit,
        );
        let _slot = self.runtime.slots.acquire();
        let mut store = self.store(ctx, None);
        let wasm = |source| LoadError::Wasm {
            path: path.to_owned(),
            what: "metadata() failed",
            source,
        };
        let wrong_world = |e: wasmtime::Error| LoadError::WrongWorld {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        };
        let instance = self.pre.instantiate(&mut store).map_err(wasm)?;
        let meta = match self.contract {
            ContractVersion::V0_2
            | ContractVersion::V0_2_1
            | ContractVersion::V0_2_2
            | ContractVersion::V0_2_3
            | ContractVersion::V0_2_4 => CharmBindings::new(&mut store, &instance)
                .map_err(wrong_world)?
                .call_metadata(&mut store)
                .map_err(wasm)?,
            ContractVersion::V0_1 => metadata_from_v0_1(
                bindings::v0_1::Charm::new(&mut store, &instance)
                    .map_err(wrong_world)?
                    .call_metadata(&mut store)
                    .map_err(wasm)?,
            ),
        };
        // Each version's `handle-hook` takes the same context and event (0.2.0 changed
        // neither), so one typed call serves them all: checked here, once, structurally.
        instance
            .get_typed_func::<(&types::Context, &types::Event), (Result<(), String>,)>(
                &mut store,
                self.handle_hook,
            )
            .map_err(wrong_world)?;
        metadata_from_contract(meta).map_err(|reason| LoadError::Metadata {
            path: path.to_owned(),
            reason,
        })
    }

    /// A fresh instance's `handle-hook`, called. Instantiating through the generated
    /// `CharmPre::instantiate` would check both exports' types against the world on every
    /// hook (a few thousand instructions); they were checked when the charm loaded.
    fn call_handle_hook(
        &self,
        store: &mut Store<HookContext>,
        context: &types::Context,
        event: &types::Event,
    ) -> wasmtime::Result<Result<(), String>> {
        let instance = self.pre.instantiate(&mut *store)?;
        let func = instance
            .get_func(&mut *store, self.handle_hook)
            .ok_or_else(|| wasmtime::format_err!("the instance has no handle-hook export"))?;
        // SAFETY: every instance comes from the same `InstancePre`, and `read_metadata`
        // checked `handle-hook` against this signature when the charm loaded.
        let typed = unsafe {
            TypedFunc::<(&types::Context, &types::Event), (Result<(), String>,)>::new_unchecked(
                func,
            )
        };
        let (result,) = typed.call(&mut *store, (context, event))?;
        Ok(result)
    }

    fn store(
        &self,
        ctx: HookContext,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
    ) -> Store<HookContext> {
        let mut store = Store::new(&self.runtime.engine, ctx);
        store.limiter(|ctx| &mut ctx.limits);
        let timeout = self.runtime.config.hook_timeout;
        let timeout_at = Instant::now() + timeout;
        let margin = self.runtime.config.guarantee_margin;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut ctx| {
            let now = Instant::now();
            let interruption = if now >= timeout_at {
                Some(Interruption::TimedOut { limit: timeout })
            } else {
                // Each tick re-reads the guarantee: renewals move the deadline forward.
                guarantee.as_ref().and_then(|g| {
                    (!hook_may_continue(g.valid_until(), now, margin))
                        .then_some(Interruption::GuaranteeEnding)
                })
            };
            match interruption {
                None => Ok(UpdateDeadline::Continue(1)),
                Some(why) => {
                    ctx.data_mut().interruption = Some(why);
                    Ok(UpdateDeadline::Interrupt)
                }
            }
        });
        store
    }

    /// Runs one hook in a fresh instance. Blocking: call it off the async runtime.
    ///
    /// `fence` is the leadership pinned for the hook (`Some`: `is_leader` answers true), and
    /// `guarantee` the watch on that leadership's guarantee, which bounds the hook.
    pub fn run_hook(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        event: &types::Event,
    ) -> HookRun {
        self.run_hook_reading(snapshot, fence, guarantee, event, None)
    }

    /// [`run_hook`](Self::run_hook), reading the remote units' bags `snapshot` leaves out
    /// through `bags` as the hook asks for them ([`HookRun::bags_read`]).
    pub fn run_hook_reading(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        event: &types::Event,
        bags: Option<crate::context::BagReader>,
    ) -> HookRun {
        let context = types::Context {
            model: snapshot.model.clone(),
            unit: snapshot.unit.clone(),
            app: snapshot.app.clone(),
            // What `is-leader` answers for the whole hook: leader exactly when fenced.
            leader: fence.is_some(),
        };
        let mut ctx = HookContext::new(
            snapshot,
            fence,
            self.metadata.clone(),
            self.runtime.config.memory_limit,
        );
        ctx.pod_specs = Some(self.pod_specs.clone());
        if let Some(reader) = bags {
            ctx.read_bags_with(reader);
        }
        let slot = self.runtime.slots.acquire();
        let mut store = self.store(ctx, guarantee);
        let result = self.call_handle_hook(&mut store, &context, event);
        // Dropping the store gives its instance back to the pool, then the slot back.
        let data = store.into_data();
        drop(slot);
        let outcome = match result {
            Ok(Ok(())) => HookOutcome::Succeeded,
            Ok(Err(message)) => HookOutcome::Failed(message),
            Err(e) => match (data.interruption, e.downcast_ref::<wasmtime::Trap>()) {
                (Some(why), Some(wasmtime::Trap::Interrupt)) => HookOutcome::Interrupted(why),
                _ => HookOutcome::Trapped(trap_message(&e, &data.output(), &data.limits)),
            },
        };
        data.finish(outcome)
    }
}

/// The longest trap message kept: it becomes the unit's error status.
const TRAP_MESSAGE_MAX: usize = 1024;

/// A trap's message, by its cause: the guest's panic (`panicked at FILE:LINE:COL: MESSAGE`,
/// as Rust's standard library prints it), memory refused by the limiter, or a stack
/// overflow; else wasmtime's description of the trap.
fn trap_message(e: &wasmtime::Error, output: &str, limits: &crate::context::HookLimits) -> String {
    let trap = e.downcast_ref::<wasmtime::Trap>();
    let mut lines = output.lines();
    let message = if let Some(at) = lines.find_map(|l| l.find("panicked at").map(|i| &l[i..])) {
        match lines.next() {
            Some(why) => format!("{} {}", at.trim(), why.trim()),
            None => at.trim().to_string(),
        }
    } else if limits.memory_refused {
        format!("out of memory (limit {} MiB)", limits.memory_limit >> 20)
    } else if trap == Some(&wasmtime::Trap::StackOverflow) || shadow_stack_overflow(e, trap) {
        "stack overflow".to_string()
    } else {
        match trap {
            Some(t) => t.to_string(),
            None => format!("{e:#}"),
        }
    };
    truncate(message, TRAP_MESSAGE_MAX)
}

/// Whether an out-of-bounds access is a Rust charm's stack overflowing: its stack lives in
/// linear memory, below its data, so overflowing it reads below address 0 instead of
/// reaching wasmtime's guard. Safe Rust has no other way to access memory out of bounds;
/// the backtrace must show the recursion too (few functions, repeated).
fn shadow_stack_overflow(e: &wasmtime::Error, trap: Option<&wasmtime::Trap>) -> bool {
    if trap != Some(&wasmtime::Trap::MemoryOutOfBounds) {
        return false;
    }
    let Some(backtrace) = e.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return false;
    };
    let frames = backtrace.frames();
    let distinct: std::collections::BTreeSet<u32> = frames.iter().map(|f| f.func_index()).collect();
    frames.len() >= 16 && distinct.len() * 4 <= frames.len()
}

/// `s` cut to at most `max` bytes on a character boundary, with an ellipsis when cut.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// A 0.1.0 charm's metadata as 0.2.0 spells it: its actions declare no parameters.
fn metadata_from_v0_1(meta: bindings::v0_1::types::Metadata) -> types::Metadata {
    use bindings::v0_1::types as then;
    let option_type = |kind| match kind {
        then::OptionType::String => types::OptionType::String,
        then::OptionType::Int => types::OptionType::Int,
        then::OptionType::Float => types::OptionType::Float,
        then::OptionType::Boolean => types::OptionType::Boolean,
    };
    let value = |v| match v {
        then::ConfigValue::String(s) => types::ConfigValue::String(s),
        then::ConfigValue::Int(i) => types::ConfigValue::Int(i),
        then::ConfigValue::Float(f) => types::ConfigValue::Float(f),
        then::ConfigValue::Boolean(b) => types::ConfigValue::Boolean(b),
    };
    types::Metadata {
        name: meta.name,
        summary: meta.summary,
        relations: meta
            .relations
            .into_iter()
            .map(|r| types::RelationMeta {
                name: r.name,
                role: match r.role {
                    then::RelationRole::Provides => types::RelationRole::Provides,
                    then::RelationRole::Requires => types::RelationRole::Requires,
                    then::RelationRole::Peers => types::RelationRole::Peers,
                },
                interface: r.interface,
                limit: r.limit,
            })
            .collect(),
        config: meta
            .config
            .into_iter()
            .map(|o| types::ConfigOption {
                name: o.name,
                kind: option_type(o.kind),
                default: o.default.map(value),
                description: o.description,
            })
            .collect(),
        actions: meta
            .actions
            .into_iter()
            .map(|a| types::ActionMeta {
                name: a.name,
                description: a.description,
                params: Vec::new(),
            })
            .collect(),
    }
}

fn option_type(kind: types::OptionType) -> OptionType {
    match kind {
        types::OptionType::String => OptionType::String,
        types::OptionType::Int => OptionType::Int,
        types::OptionType::Float => OptionType::Float,
        types::OptionType::Boolean => OptionType::Boolean,
    }
}

/// A declared default, which must be of the declared type; `what` names it in the error.
fn typed_default(
    default: Option<types::ConfigValue>,
    kind: OptionType,
    what: impl FnOnce() -> String,
) -> Result<Option<ConfigValue>, String> {
    let default = default.map(|d| match d {
        types::ConfigValue::String(s) => ConfigValue::String(s),
        types::ConfigValue::Int(i) => ConfigValue::Int(i),
        types::ConfigValue::Float(f) => ConfigValue::Float(f),
        types::ConfigValue::Boolean(b) => ConfigValue::Boolean(b),
    });
    match default {
        // Stored as JSON, which has no NaN or infinity: it would come back as null.
        Some(ConfigValue::Float(f)) if !f.is_finite() => {
            Err(format!("{}: default {f} is not a finite number", what()))
        }
        Some(d) => match d.coerce(kind) {
            Some(d) => Ok(Some(d)),
            None => Err(format!("{}: default is not a {}", what(), kind.as_str())),
        },
        None => Ok(None),
    }
}

/// A charm's metadata, as its component declares it in the current contract, converted to
/// the model's and checked: names present and declared once, defaults of their option's or
/// parameter's type. `Err` says what is wrong, for [`LoadError::Metadata`].
pub fn metadata_from_contract(meta: bindings::types::Metadata) -> Result<CharmMetadata, String> {
    use bindings::types as t;
    if meta.name.is_empty() {
        return Err("the charm's name is empty".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut relations = Vec::new();
    for r in meta.relations {
        if r.name.is_empty() {
            return Err("an endpoint has an empty name".into());
        }
        if !seen.insert(r.name.clone()) {
            return Err(format!("endpoint {:?} is declared twice", r.name));
        }
        relations.push(EndpointMeta {
            name: r.name,
            role: match r.role {
                t::RelationRole::Provides => RelationRole::Provides,
                t::RelationRole::Requires => RelationRole::Requires,
                t::RelationRole::Peers => RelationRole::Peers,
            },
            interface: r.interface,
            limit: r.limit,
        });
    }
    let mut config = Vec::new();
    let mut seen_options = std::collections::BTreeSet::new();
    for o in meta.config {
        if o.name.is_empty() {
            return Err("a config option has an empty name".into());
        }
        if !seen_options.insert(o.name.clone()) {
            return Err(format!("config option {:?} is declared twice", o.name));
        }
        let kind = option_type(o.kind);
        let default = typed_default(o.default, kind, || format!("config option {:?}", o.name))?;
        config.push(ConfigOptionMeta {
            name: o.name,
            kind,
            default,
            description: o.description,
        });
    }
    let mut actions = Vec::new();
    let mut seen_actions = std::collections::BTreeSet::new();
    for a in meta.actions {
        if a.name.is_empty() {
            return Err("an action has an empty name".into());
        }
        if !seen_actions.insert(a.name.clone()) {
            return Err(format!("action {:?} is declared twice", a.name));
        }
        let mut params = Vec::new();
        let mut seen_params = std::collections::BTreeSet::new();
        for p in a.params {
            let what = || format!("action {:?} parameter {:?}", a.name, p.name);
            if p.name.is_empty() {
                return Err(format!(
                    "action {:?}: a parameter has an empty name",
                    a.name
                ));
            }
            if !seen_params.insert(p.name.clone()) {
                return Err(format!("{} is declared twice", what()));
            }
            let kind = option_type(p.kind);
            let default = typed_default(p.default, kind, what)?;
            params.push(ActionParamMeta {
                name: p.name,
                kind,
                description: p.description,
                default,
                required: p.required,
            });
        }
        actions.push(ActionMeta {
            name: a.name,
            description: a.description,
            params,
        });
    }
    Ok(CharmMetadata {
        name: meta.name,
        summary: meta.summary,
        relations,
        config,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(slots: &HookSlots) -> (u32, u32) {
        let state = slots.state.lock().unwrap();
        (state.free, state.waiting)
    }

    #[test]
    fn a_hook_waits_for_a_slot_and_gets_the_one_given_back() {
        let slots = Arc::new(HookSlots::new(1));
        let held = slots.acquire();
        assert_eq!(count(&slots), (0, 0));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || {
                let _slot = slots.acquire();
                tx.send(()).unwrap();
            })
        };
        // The second hook waits: it is counted as waiting and has no slot.
        while count(&slots).1 == 0 {
            std::thread::yield_now();
        }
        assert!(rx.try_recv().is_err(), "a hook ran without a free slot");
        // Giving the slot back wakes it.
        drop(held);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the waiting hook was not woken");
        waiter.join().unwrap();
        assert_eq!(count(&slots), (1, 0));
    }

    fn with_params(params: Vec<types::ActionParam>) -> types::Metadata {
        types::Metadata {
            name: "kv".into(),
            summary: String::new(),
            relations: Vec::new(),
            config: Vec::new(),
            actions: vec![types::ActionMeta {
                name: "put".into(),
                description: String::new(),
                params,
            }],
        }
    }

    fn param(
        name: &str,
        kind: types::OptionType,
        default: Option<types::ConfigValue>,
    ) -> types::ActionParam {
        types::ActionParam {
            name: name.into(),
            kind,
            description: format!("the {name}"),
            default,
            required: false,
        }
    }

    #[test]
    fn action_parameters_are_read_typed_with_their_defaults() {
        let meta = with_params(vec![
            types::ActionParam {
                required: true,
                ..param("key", types::OptionType::String, None)
            },
            // An int default of a float parameter is widened, as for config options.
            param(
                "ratio",
                types::OptionType::Float,
                Some(types::ConfigValue::Int(1)),
            ),
        ]);
        let meta = metadata_from_contract(meta).unwrap();
        let params = &meta.actions[0].params;
        assert_eq!(
            params[0],
            ActionParamMeta {
                name: "key".into(),
                kind: OptionType::String,
                description: "the key".into(),
                default: None,
                required: true,
            }
        );
        assert_eq!(params[1].kind, OptionType::Float);
        assert_eq!(params[1].default, Some(ConfigValue::Float(1.0)));
    }

    #[test]
    fn bad_action_parameters_refuse_the_metadata_naming_them() {
        let mistyped = with_params(vec![param(
            "ttl",
            types::OptionType::Int,
            Some(types::ConfigValue::String("soon".into())),
        )]);
        let why = metadata_from_contract(mistyped).unwrap_err();
        assert_eq!(
            why,
            "action \"put\" parameter \"ttl\": default is not a int"
        );
        let twice = with_params(vec![
            param("key", types::OptionType::String, None),
            param("key", types::OptionType::Int, None),
        ]);
        let why = metadata_from_contract(twice).unwrap_err();
        assert_eq!(why, "action \"put\" parameter \"key\" is declared twice");
        let unnamed = with_params(vec![param("", types::OptionType::String, None)]);
        let why = metadata_from_contract(unnamed).unwrap_err();
        assert_eq!(why, "action \"put\": a parameter has an empty name");
    }

    /// Found by the `metadata` fuzz target: each was accepted, and a NaN default was
    /// stored as JSON `null`, which no store could read back.
    #[test]
    fn unnamed_twice_declared_or_non_finite_declarations_refuse_the_metadata() {
        let option = |name: &str, default: Option<types::ConfigValue>| types::ConfigOption {
            name: name.into(),
            kind: types::OptionType::Float,
            default,
            description: String::new(),
        };
        let mut endpoint = with_params(Vec::new());
        endpoint.relations.push(types::RelationMeta {
            name: String::new(),
            role: types::RelationRole::Peers,
            interface: "kv".into(),
            limit: None,
        });
        let mut unnamed_option = with_params(Vec::new());
        unnamed_option.config.push(option("", None));
        let mut option_twice = with_params(Vec::new());
        option_twice.config = vec![option("ratio", None), option("ratio", None)];
        let mut nan = with_params(Vec::new());
        nan.config
            .push(option("ratio", Some(types::ConfigValue::Float(f64::NAN))));
        let mut unnamed_action = with_params(Vec::new());
        unnamed_action.actions[0].name.clear();
        let infinite = with_params(vec![param(
            "ttl",
            types::OptionType::Float,
            Some(types::ConfigValue::Float(f64::INFINITY)),
        )]);
        for (meta, why) in [
            (endpoint, "an endpoint has an empty name"),
            (unnamed_option, "a config option has an empty name"),
            (option_twice, "config option \"ratio\" is declared twice"),
            (
                nan,
                "config option \"ratio\": default NaN is not a finite number",
            ),
            (unnamed_action, "an action has an empty name"),
            (
                infinite,
                "action \"put\" parameter \"ttl\": default inf is not a finite number",
            ),
        ] {
            assert_eq!(metadata_from_contract(meta).unwrap_err(), why);
        }
    }

    #[test]
    fn a_0_1_0_charms_actions_declare_no_parameters() {
        use bindings::v0_1::types as then;
        let meta = metadata_from_v0_1(then::Metadata {
            name: "old".into(),
            summary: "s".into(),
            relations: vec![then::RelationMeta {
                name: "db".into(),
                role: then::RelationRole::Requires,
                interface: "pgsql".into(),
                limit: Some(1),
            }],
            config: vec![then::ConfigOption {
                name: "port".into(),
                kind: then::OptionType::Int,
                default: Some(then::ConfigValue::Int(5432)),
                description: "d".into(),
            }],
            actions: vec![then::ActionMeta {
                name: "ping".into(),
                description: "p".into(),
            }],
        });
        let meta = metadata_from_contract(meta).unwrap();
        assert_eq!(meta.relations[0].role, RelationRole::Requires);
        assert_eq!(meta.relations[0].limit, Some(1));
        assert_eq!(meta.config[0].default, Some(ConfigValue::Int(5432)));
        assert_eq!(meta.actions[0].name, "ping");
        assert!(meta.actions[0].params.is_empty());
    }

    #[test]
    fn slots_given_back_with_nobody_waiting_are_free_again() {
        let slots = HookSlots::new(2);
        let a = slots.acquire();
        let b = slots.acquire();
        assert_eq!(count(&slots), (0, 0));
        drop(a);
        drop(b);
        assert_eq!(count(&slots), (2, 0));
    }
}
