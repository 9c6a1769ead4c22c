//! Loading charm components and running their hooks in the sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

use crate::bindings::{self, Charm as CharmBindings, CharmPre, types};
use crate::context::{HookContext, Interruption, LogLine};
use crate::model::{
    ActionMeta, Changes, CharmMetadata, ConfigOptionMeta, ConfigValue, EndpointMeta, OptionType,
    RelationRole, UnitSnapshot,
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
];
/// The package and version this host speaks.
pub const WIT_PACKAGE: &str = "juju:charm@0.1.0";
/// The functions a charm must export.
const EXPORTS: &[&str] = &["metadata", "handle-hook"];
/// How often the engine's epoch advances: the granularity of hook deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(10);

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
    /// The component is not a charm of our world.
    #[error("{path}: not a charm of world `{WIT_PACKAGE}/charm`: {reason}")]
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
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_limit: 256 << 20,
            hook_timeout: Duration::from_secs(300),
            guarantee_margin: Duration::from_millis(500),
        }
    }
}

/// A wasmtime engine and linker set up for charms, shared by every charm it loads.
#[derive(Clone)]
pub struct CharmRuntime {
    engine: Engine,
    linker: Arc<Linker<HookContext>>,
    config: RuntimeConfig,
}

impl CharmRuntime {
    /// A runtime with these limits. Starts the thread that drives hook deadlines.
    pub fn new(config: RuntimeConfig) -> Result<Self, wasmtime::Error> {
        let mut wasm = wasmtime::Config::new();
        wasm.epoch_interruption(true);
        let engine = Engine::new(&wasm)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        CharmBindings::add_to_linker::<HookContext, HasSelf<HookContext>>(&mut linker, |ctx| ctx)?;
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
        Ok(CharmRuntime {
            engine,
            linker: Arc::new(linker),
            config,
        })
    }

    /// The runtime's limits.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Loads the charm in `path`.
    pub fn load_file(&self, path: &Path) -> Result<Charm, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?;
        self.load(path, &bytes)
    }

    /// Loads a charm from its bytes; `path` names it in errors.
    pub fn load(&self, path: &Path, bytes: &[u8]) -> Result<Charm, LoadError> {
        let path = path.to_owned();
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => return Err(LoadError::CoreModule { path }),
            Some([0, b'a', b's', b'm', ..]) => {}
            _ => return Err(LoadError::NotWasm { path }),
        }
        let component = Component::new(&self.engine, bytes).map_err(|source| LoadError::Wasm {
            path: path.clone(),
            what: "cannot compile component",
            source,
        })?;
        check_world(&self.engine, &component).map_err(|reason| LoadError::WrongWorld {
            path: path.clone(),
            reason,
        })?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::WrongWorld {
                    path: path.clone(),
                    reason: format!("{e:#}"),
                })?;
        let pre = CharmPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
            path: path.clone(),
            reason: format!("{e:#}"),
        })?;
        let mut charm = Charm {
            runtime: self.clone(),
            pre,
            // Filled in from the charm's own `metadata` export just below.
            metadata: Arc::default(),
        };
        charm.metadata = Arc::new(charm.read_metadata(&path)?);
        Ok(charm)
    }
}

/// Checks a component's imports and exports against the `charm` world, naming what is
/// missing or foreign.
fn check_world(engine: &Engine, component: &Component) -> Result<(), String> {
    let ty = component.component_type();
    let mut problems = Vec::new();
    for name in EXPORTS {
        match ty.get_export(engine, name).map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(_)) => {}
            Some(_) => problems.push(format!("export `{name}` is not a function")),
            None => problems.push(format!("missing export `{name}`")),
        }
    }
    for (name, _) in ty.imports(engine) {
        let ours = name
            .strip_prefix("juju:charm/")
            .and_then(|rest| rest.split_once('@'))
            .is_some_and(|(iface, version)| {
                CHARM_INTERFACES.contains(&iface) && version == "0.1.0"
            });
        if !ours && !name.starts_with("wasi:") {
            problems.push(format!(
                "imports `{name}`, which this host does not provide"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// A loaded charm, ready to run hooks. Cheap to clone.
#[derive(Clone)]
pub struct Charm {
    runtime: CharmRuntime,
    pre: CharmPre<HookContext>,
    metadata: Arc<CharmMetadata>,
}

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// It returned `Ok`: its writes may be committed.
    Succeeded,
    /// It returned an error.
    Failed(String),
    /// It trapped (a panic, a stack overflow, memory exhausted, ...).
    Trapped(String),
    /// The host stopped it.
    Interrupted(Interruption),
}

/// The result of running one hook: how it ended and what it wrote.
#[derive(Debug, Clone)]
pub struct HookRun {
    /// How it ended.
    pub outcome: HookOutcome,
    /// What it wrote; to be committed only if it succeeded.
    pub changes: Changes,
    /// What it logged.
    pub logs: Vec<LogLine>,
    /// Its stdout and stderr.
    pub output: String,
    /// How many leader-only operations were refused because it did not run as leader.
    pub leadership_refusals: u32,
}

impl HookRun {
    /// A hook that could not be started at all.
    pub fn failed_to_run(reason: String) -> Self {
        HookRun {
            outcome: HookOutcome::Trapped(reason),
            changes: Changes::default(),
            logs: Vec::new(),
            output: String::new(),
            leadership_refusals: 0,
        }
    }
}

/// When a leader hook must stop: the current end of the leadership guarantee, which moves
/// forward with each renewal. `None` means the guarantee is gone.
pub trait GuaranteeWatch: Send + Sync + 'static {
    /// The instant the guarantee ends, as of now.
    fn valid_until(&self) -> Option<Instant>;
}

impl Charm {
    /// The charm's metadata.
    pub fn metadata(&self) -> &Arc<CharmMetadata> {
        &self.metadata
    }

    fn read_metadata(&self, path: &Path) -> Result<CharmMetadata, LoadError> {
        let snapshot = UnitSnapshot::default();
        let ctx = HookContext::new(
            snapshot,
            None,
            self.metadata.clone(),
            self.runtime.config.memory_limit,
        );
        let mut store = self.store(ctx, None);
        let wasm = |source| LoadError::Wasm {
            path: path.to_owned(),
            what: "metadata() failed",
            source,
        };
        let instance = self.pre.instantiate(&mut store).map_err(wasm)?;
        let meta = instance.call_metadata(&mut store).map_err(wasm)?;
        convert_metadata(meta).map_err(|reason| LoadError::Metadata {
            path: path.to_owned(),
            reason,
        })
    }

    fn store(
        &self,
        ctx: HookContext,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
    ) -> Store<HookContext> {
        let mut store = Store::new(&self.runtime.engine, ctx);
        store.limiter(|ctx| &mut ctx.limits);
        let timeout_at = Instant::now() + self.runtime.config.hook_timeout;
        let margin = self.runtime.config.guarantee_margin;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut ctx| {
            let now = Instant::now();
            let interruption = if now >= timeout_at {
                Some(Interruption::TimedOut)
            } else {
                // Each tick re-reads the guarantee: renewals move the deadline forward.
                guarantee.as_ref().and_then(|g| match g.valid_until() {
                    Some(until) if now + margin < until => None,
                    _ => Some(Interruption::GuaranteeEnding),
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
        let context = types::Context {
            model: snapshot.model.clone(),
            unit: snapshot.unit.clone(),
            app: snapshot.app.clone(),
        };
        let ctx = HookContext::new(
            snapshot,
            fence,
            self.metadata.clone(),
            self.runtime.config.memory_limit,
        );
        let mut store = self.store(ctx, guarantee);
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| instance.call_handle_hook(&mut store, &context, event));
        let data = store.into_data();
        let outcome = match result {
            Ok(Ok(())) => HookOutcome::Succeeded,
            Ok(Err(message)) => HookOutcome::Failed(message),
            Err(e) => match (data.interruption, e.downcast_ref::<wasmtime::Trap>()) {
                (Some(why), Some(wasmtime::Trap::Interrupt)) => HookOutcome::Interrupted(why),
                _ => HookOutcome::Trapped(trap_message(
                    &e,
                    &String::from_utf8_lossy(&data.output.contents()),
                )),
            },
        };
        data.finish(outcome)
    }
}

/// A trap's message, with the guest's panic message when it printed one.
fn trap_message(e: &wasmtime::Error, output: &str) -> String {
    let trap = match e.downcast_ref::<wasmtime::Trap>() {
        Some(t) => t.to_string(),
        None => format!("{e:#}"),
    };
    match output.lines().find(|l| l.contains("panicked at")) {
        Some(_) => {
            let panic: Vec<&str> = output
                .lines()
                .skip_while(|l| !l.contains("panicked at"))
                .take(2)
                .collect();
            format!("{trap}: {}", panic.join(" ").trim())
        }
        None => trap,
    }
}

fn convert_metadata(meta: bindings::types::Metadata) -> Result<CharmMetadata, String> {
    use bindings::types as t;
    if meta.name.is_empty() {
        return Err("the charm's name is empty".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut relations = Vec::new();
    for r in meta.relations {
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
    for o in meta.config {
        let kind = match o.kind {
            t::OptionType::String => OptionType::String,
            t::OptionType::Int => OptionType::Int,
            t::OptionType::Float => OptionType::Float,
            t::OptionType::Boolean => OptionType::Boolean,
        };
        let default = o.default.map(|d| match d {
            t::ConfigValue::String(s) => ConfigValue::String(s),
            t::ConfigValue::Int(i) => ConfigValue::Int(i),
            t::ConfigValue::Float(f) => ConfigValue::Float(f),
            t::ConfigValue::Boolean(b) => ConfigValue::Boolean(b),
        });
        if let Some(d) = &default
            && d.clone().coerce(kind).is_none()
        {
            return Err(format!(
                "config option {:?}: default is not a {}",
                o.name,
                kind.as_str()
            ));
        }
        config.push(ConfigOptionMeta {
            name: o.name,
            kind,
            default,
            description: o.description,
        });
    }
    let actions = meta
        .actions
        .into_iter()
        .map(|a| ActionMeta {
            name: a.name,
            description: a.description,
        })
        .collect();
    Ok(CharmMetadata {
        name: meta.name,
        summary: meta.summary,
        relations,
        config,
        actions,
    })
}
