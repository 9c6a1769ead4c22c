//! The hook context: what one hook may read (a snapshot taken when it starts, plus its own
//! writes), its pinned leadership answer, and the buffer of its writes.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::model::{Bag, BagWrites, Changes, CharmMetadata, RelationId, SharedBag, UnitSnapshot};
use crate::store::Fence;

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
    /// It returned `Ok`, but its writes exceed a limit the calls could not refuse.
    OverLimit(charm_model::limits::LimitError),
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
    /// The remote units' bags it read from the store as it ran (relation, unit, bag), when
    /// its snapshot left them out: what its commit checks besides the snapshot.
    pub bags_read: Vec<(crate::model::RelationId, String, crate::model::SharedBag)>,
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
            bags_read: Vec::new(),
        }
    }
}

/// How much of a hook's stdout and stderr is kept (a panic message, say); the rest is
/// dropped and counted.
const OUTPUT_CAPACITY: usize = 64 * 1024;
/// The most log lines one hook keeps, in lines and in bytes; the rest are dropped and
/// counted. The unit's ring in the store keeps 1,000 lines anyway, and a flood of
/// `tracing` events would cost the host more than the hook.
pub const LOG_LINES_PER_HOOK: usize = 1_000;
/// See [`LOG_LINES_PER_HOOK`].
pub const LOG_BYTES_PER_HOOK: usize = 256 << 10;
/// The longest log line kept; a longer one is cut with an ellipsis.
pub const LOG_LINE_MAX: usize = 4 << 10;

/// A line a charm logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warning` or `error`.
    pub level: &'static str,
    /// The text.
    pub message: String,
}

/// Reads remote units' bags in a relation from the store, in the order asked, for a hook
/// whose snapshot left them out ([`charm_model::snapshot::BagsRead::UpTo`]). Called from
/// the hook's thread, off the async runtime.
pub type BagReader =
    Arc<dyn Fn(RelationId, &[String]) -> Result<Vec<SharedBag>, String> + Send + Sync + 'static>;

/// After this many remote bags of one relation read one by one, a hook asking for another
/// gets all the rest in the same step: a charm looping over a large relation's units (as
/// pgsql's provider does while it looks for a request) costs a few reads, not one per unit.
const ONE_BY_ONE: usize = 4;

/// Why the host stopped a hook before it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// The hook started as leader and the leadership guarantee was about to end with no
    /// renewal: it had to stop before it could act on leadership it no longer held.
    GuaranteeEnding,
    /// The hook ran past its time limit, this long.
    TimedOut {
        /// The limit (the runtime's `hook_timeout`).
        limit: std::time::Duration,
    },
    /// A relation bag the hook asked for could not be read from the store: it runs again.
    StoreUnavailable,
}

impl std::fmt::Display for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interruption::GuaranteeEnding => {
                write!(f, "leadership guarantee ending with no renewal")
            }
            Interruption::TimedOut { limit } => {
                write!(f, "exceeded its time limit of {} s", limit.as_secs_f64())
            }
            Interruption::StoreUnavailable => {
                write!(
                    f,
                    "a relation bag it asked for could not be read from the store"
                )
            }
        }
    }
}

/// The store's resource limiter: wasmtime's, which also records whether it refused memory,
/// so that the trap that follows (an allocator's abort, typically `unreachable`) is
/// reported by its cause.
pub(crate) struct HookLimits {
    inner: wasmtime::StoreLimits,
    /// The most linear memory the hook may use.
    pub(crate) memory_limit: usize,
    /// Whether a memory growth was refused.
    pub(crate) memory_refused: bool,
}

impl wasmtime::ResourceLimiter for HookLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        self.memory_refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }
}

/// The state of one hook: the wasmtime store's data.
pub struct HookContext {
    pub(crate) snapshot: UnitSnapshot,
    /// The leadership pinned for this hook: `Some` iff `is_leader` answers true.
    pub(crate) fence: Option<Fence>,
    pub(crate) changes: Changes,
    pub(crate) logs: Vec<LogLine>,
    /// The bytes of `logs`, and the lines dropped past the hook's bounds.
    pub(crate) log_bytes: usize,
    pub(crate) logs_dropped: u64,
    pub(crate) metadata: Arc<CharmMetadata>,
    pub(crate) interruption: Option<Interruption>,
    /// How many distinct keys the hook has written to bags and stored state.
    keys_written: usize,
    /// A limit the hook's writes exceeded where the call could not refuse it: what it
    /// writes past it is not buffered, and the hook fails when it returns.
    pub(crate) over_limit: Option<charm_model::limits::LimitError>,
    /// How many leader-only operations were refused because the hook is not leader.
    pub(crate) leadership_refusals: u32,
    pub(crate) limits: HookLimits,
    /// The charm's last accepted pod specs, shared by its hooks; `None` validates every time.
    pub(crate) pod_specs: Option<Arc<crate::podspec::LastValid>>,
    /// Built on the hook's first WASI call: most hooks make none, and building one costs
    /// more than the rest of the context.
    wasi: Option<Wasi>,
    /// Where remote units' bags left out of the snapshot are read; `None`: the snapshot
    /// holds every bag the hook may read.
    bag_reader: Option<BagReader>,
    /// The remote units' bags read from the store as the hook ran, added to its snapshot.
    bags_read: Vec<(RelationId, String)>,
}

/// A hook's WASI context, its resource table, and the pipe that keeps its stdout and stderr.
struct Wasi {
    ctx: WasiCtx,
    table: ResourceTable,
    output: crate::output::HookOutput,
}

impl Wasi {
    fn new() -> Self {
        let output = crate::output::HookOutput::new(OUTPUT_CAPACITY);
        // The sandbox: no filesystem, network, environment or arguments. Clocks and random
        // stay, as a charm's standard library needs them.
        let ctx = WasiCtx::builder()
            .stdout(output.clone())
            .stderr(output.clone())
            .build();
        Wasi {
            ctx,
            table: ResourceTable::new(),
            output,
        }
    }
}

impl HookContext {
    /// A context for a hook of `snapshot.unit`; `fence` is the leadership it runs under.
    pub fn new(
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        metadata: Arc<CharmMetadata>,
        memory_limit: usize,
    ) -> Self {
        HookContext {
            snapshot,
            fence,
            changes: Changes::default(),
            logs: Vec::new(),
            log_bytes: 0,
            logs_dropped: 0,
            metadata,
            interruption: None,
            keys_written: 0,
            over_limit: None,
            leadership_refusals: 0,
            limits: HookLimits {
                inner: wasmtime::StoreLimitsBuilder::new()
                    .memory_size(memory_limit)
                    .build(),
                memory_limit,
                memory_refused: false,
            },
            pod_specs: None,
            wasi: None,
            bag_reader: None,
            bags_read: Vec::new(),
        }
    }

    /// Reads the remote units' bags the snapshot leaves out through `reader`, as the hook
    /// asks for them.
    pub fn read_bags_with(&mut self, reader: BagReader) {
        self.bag_reader = Some(reader);
    }

    /// Whether `unit`'s bag in relation `id` is in the snapshot, reading it from the store
    /// into the snapshot if it is left out and there is a reader. A failed read interrupts
    /// the hook ([`Interruption::StoreUnavailable`]).
    pub(crate) fn fetch_unit_bag(&mut self, id: RelationId, unit: &str) -> bool {
        let Some(view) = self.snapshot.relations.get(&id) else {
            return false;
        };
        if view.unit_bags.contains_key(unit) {
            return true;
        }
        let Some(reader) = &self.bag_reader else {
            return false;
        };
        let one_by_one = self.bags_read.iter().filter(|(r, _)| *r == id).count();
        let wanted: Vec<String> = if one_by_one < ONE_BY_ONE {
            vec![unit.to_string()]
        } else {
            view.remote_units
                .iter()
                .filter(|u| !view.unit_bags.contains_key(*u))
                .cloned()
                .collect()
        };
        match reader(id, &wanted) {
            Ok(bags) => {
                if let Some(view) = self.snapshot.relations.get_mut(&id) {
                    for (unit, bag) in wanted.iter().zip(bags) {
                        view.unit_bags.insert(unit.clone(), bag);
                    }
                }
                self.bags_read
                    .extend(wanted.into_iter().map(|unit| (id, unit)));
                true
            }
            Err(why) => {
                tracing::info!(unit = %self.snapshot.unit, relation = id, remote = %unit, "relation bag not read: {why}");
                self.interruption
                    .get_or_insert(Interruption::StoreUnavailable);
                false
            }
        }
    }

    /// The hook's result: how it ended, with what it wrote and logged.
    pub fn finish(mut self, outcome: HookOutcome) -> HookRun {
        let output = self.output();
        // Only what would be committed is checked.
        let outcome = match outcome {
            HookOutcome::Succeeded => {
                match self
                    .over_limit
                    .take()
                    .map_or_else(|| self.check_limits(), Err)
                {
                    Ok(()) => HookOutcome::Succeeded,
                    Err(limit) => HookOutcome::OverLimit(limit),
                }
            }
            outcome => outcome,
        };
        if self.logs_dropped > 0 {
            self.logs.push(LogLine {
                level: "warning",
                message: format!(
                    "{} lines dropped: a hook keeps at most {LOG_LINES_PER_HOOK} log lines and {} KiB",
                    self.logs_dropped,
                    LOG_BYTES_PER_HOOK >> 10
                ),
            });
        }
        // A bag that could not be read: whatever the charm made of its absence is not kept.
        let outcome = match (outcome, self.interruption) {
            (_, Some(Interruption::StoreUnavailable)) => {
                HookOutcome::Interrupted(Interruption::StoreUnavailable)
            }
            (outcome, _) => outcome,
        };
        let bags_read = self
            .bags_read
            .iter()
            .filter_map(|(id, unit)| {
                let bag = self.snapshot.relations.get(id)?.unit_bags.get(unit)?;
                Some((*id, unit.clone(), bag.clone()))
            })
            .collect();
        HookRun {
            outcome,
            bags_read,
            changes: self.changes,
            logs: self.logs,
            output,
            leadership_refusals: self.leadership_refusals,
        }
    }

    /// What the hook wrote to stdout and stderr (a panic message, say).
    pub fn output(&self) -> String {
        match &self.wasi {
            Some(wasi) => wasi.output.contents(),
            None => String::new(),
        }
    }

    /// The hook's writes within the model's limits ([`charm_model::limits`]), the bags it
    /// writes counted as they will stand.
    fn check_limits(&self) -> Result<(), charm_model::limits::LimitError> {
        // What the commit checks first, so the first limit named is the same.
        charm_model::limits::check(&(&self.changes).into())?;
        let snapshot = &self.snapshot;
        let changes = &self.changes;
        let unit = snapshot.unit.as_str();
        let app = snapshot.app.as_str();
        let relation = |id: &u32| snapshot.relations.get(id);
        let unit_bags = changes.unit_bags.iter().map(|(id, writes)| {
            let base = relation(id).and_then(|r| r.unit_bags.get(unit));
            (base.map(|b| &**b), writes)
        });
        let app_bags = changes.app_bags.iter().map(|(id, writes)| {
            let base = relation(id).and_then(|r| r.app_bags.get(app));
            (base.map(|b| &**b), writes)
        });
        charm_model::limits::written_bags(
            unit_bags
                .chain(app_bags)
                .chain([(Some(&*snapshot.leader_data), &changes.leader_data)]),
            (&*snapshot.stored, &changes.stored),
        )
    }

    /// Buffers the write of `key` to `bag`, unless it is a key past the most one hook may
    /// write ([`charm_model::limits::KEYS_PER_HOOK`]): that write is dropped and the hook
    /// will fail, so a hook writing keys without end costs the host no more than the limit.
    pub(crate) fn write_key(&mut self, bag: BagOf, key: String, value: Option<String>) {
        let writes = match bag {
            BagOf::Unit(id) => self.changes.unit_bags.entry(id).or_default(),
            BagOf::App(id) => self.changes.app_bags.entry(id).or_default(),
            BagOf::Leader => &mut self.changes.leader_data,
            BagOf::Stored => &mut self.changes.stored,
        };
        if !writes.contains_key(&key) {
            if self.keys_written >= charm_model::limits::KEYS_PER_HOOK {
                self.over_limit
                    .get_or_insert(charm_model::limits::LimitError::TooManyKeys {
                        limit: charm_model::limits::KEYS_PER_HOOK,
                    });
                return;
            }
            self.keys_written += 1;
        }
        writes.insert(key, value);
    }

    /// Whether this hook runs as leader.
    pub fn is_leader(&self) -> bool {
        self.fence.is_some()
    }

    pub(crate) fn unit(&self) -> &str {
        &self.snapshot.unit
    }

    pub(crate) fn app(&self) -> &str {
        &self.snapshot.app
    }
}

impl WasiView for HookContext {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = self.wasi.get_or_insert_with(Wasi::new);
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut wasi.table,
        }
    }
}

/// A bag a hook writes.
pub(crate) enum BagOf {
    /// Its unit's bag in this relation.
    Unit(u32),
    /// Its application's bag in this relation.
    App(u32),
    /// The leader settings.
    Leader,
    /// Its stored state.
    Stored,
}

/// A bag as the hook sees it: the snapshot's, with the hook's own writes over it.
pub(crate) fn overlay(base: Option<&Bag>, writes: Option<&BagWrites>) -> Bag {
    let mut bag = base.cloned().unwrap_or_default();
    if let Some(writes) = writes {
        crate::model::apply_writes(&mut bag, writes);
    }
    bag
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::RelationView;

    #[test]
    fn a_hook_reading_a_large_relations_bags_one_by_one_gets_the_rest_in_one_read() {
        let remote: Vec<String> = (0..10).map(|n| format!("web/{n}")).collect();
        let mut snapshot = UnitSnapshot {
            unit: "db/0".into(),
            app: "db".into(),
            ..UnitSnapshot::default()
        };
        snapshot.relations.insert(
            1,
            RelationView {
                id: 1,
                endpoint: "db".into(),
                remote_app: "web".into(),
                remote_units: remote.clone().into(),
                ..RelationView::default()
            },
        );
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let reader: BagReader = Arc::new(move |_, units: &[String]| {
            log.lock().unwrap().push(units.to_vec());
            Ok(units
                .iter()
                .map(|u| Arc::new(Bag::from([("name".to_string(), u.clone())])))
                .collect())
        });
        let mut ctx = HookContext::new(snapshot, None, Arc::default(), 1 << 20);
        ctx.read_bags_with(reader);
        for unit in &remote {
            assert!(ctx.fetch_unit_bag(1, unit), "{unit}");
        }
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), ONE_BY_ONE + 1, "{asked:?}");
        for (n, units) in asked[..ONE_BY_ONE].iter().enumerate() {
            assert_eq!(units, &[remote[n].clone()]);
        }
        assert_eq!(asked[ONE_BY_ONE], remote[ONE_BY_ONE..]);
        // Each bag is its unit's, and each is listed as read, for the commit's check.
        let view = &ctx.snapshot.relations[&1];
        for unit in &remote {
            assert_eq!(view.unit_bags[unit]["name"], *unit);
        }
        assert_eq!(ctx.bags_read.len(), remote.len());
    }
}
