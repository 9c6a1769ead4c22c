//! The native stand-in for the discourse charm: its `db-relation-changed` logic, run
//! through the real hook context and import implementations, with the hook's running time
//! simulated (and bounded by the leadership guarantee exactly as the epoch deadline bounds
//! a wasm hook).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{Instant, sleep_until};

use crate::agent::HookExecutor;
use crate::bindings::juju::charm::{leadership, pod, state, status};
use crate::bindings::types::{Status as WitStatus, StatusKind};
use crate::charm::{GuaranteeWatch, HookOutcome, HookRun};
use crate::context::{HookContext, Interruption};
use crate::model::{
    CharmMetadata, ConfigOptionMeta, EndpointMeta, Hook, OptionType, RelationRole, UnitSnapshot,
};
use crate::store::{BoxFuture, Fence};

/// The discourse charm's metadata, as its component declares it.
pub(crate) fn discourse_metadata() -> CharmMetadata {
    CharmMetadata {
        name: "discourse".into(),
        summary: "Discourse discussion forum".into(),
        relations: vec![EndpointMeta {
            name: "db".into(),
            role: RelationRole::Requires,
            interface: "pgsql".into(),
            limit: None,
        }],
        config: vec![ConfigOptionMeta {
            name: "image".into(),
            kind: OptionType::String,
            default: Some(crate::model::ConfigValue::String(
                "discourse/discourse:2.6".into(),
            )),
            description: "The Discourse image".into(),
        }],
        actions: vec![],
    }
}

/// How long a simulated hook runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WorkModel {
    /// Up to `short`; one hook in `long_every` up to `long`.
    Random {
        short: Duration,
        long: Duration,
        long_every: u32,
    },
    /// Always this long.
    Fixed(Duration),
}

impl WorkModel {
    pub(crate) fn draw(&self, rng: &mut StdRng) -> Duration {
        match *self {
            WorkModel::Random {
                short,
                long,
                long_every,
            } => {
                if rng.random_range(0..long_every) == 0 {
                    long.mul_f64(rng.random())
                } else {
                    short.mul_f64(rng.random())
                }
            }
            WorkModel::Fixed(d) => d,
        }
    }
}

pub(crate) struct DiscourseStandIn {
    metadata: Arc<CharmMetadata>,
    rng: Mutex<StdRng>,
    work: WorkModel,
    margin: Duration,
}

impl DiscourseStandIn {
    pub(crate) fn new(seed: u64, work: WorkModel, margin: Duration) -> Self {
        DiscourseStandIn {
            metadata: Arc::new(discourse_metadata()),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            work,
            margin,
        }
    }
}

/// Runs for `work`, unless the guarantee ends first: what the epoch deadline does to a
/// wasm hook, re-reading the guarantee so renewals extend it.
async fn bounded_work(
    work: Duration,
    guarantee: Option<&dyn GuaranteeWatch>,
    margin: Duration,
) -> Result<(), Interruption> {
    let done = Instant::now() + work;
    let Some(guarantee) = guarantee else {
        sleep_until(done).await;
        return Ok(());
    };
    loop {
        let Some(until) = guarantee.valid_until() else {
            return Err(Interruption::GuaranteeEnding);
        };
        let stop_at = until.checked_sub(margin).unwrap_or(until);
        if Instant::now() >= stop_at {
            return Err(Interruption::GuaranteeEnding);
        }
        if done <= stop_at {
            sleep_until(done).await;
            return Ok(());
        }
        // Sleep to the deadline, then look again: a renewal may have moved it.
        sleep_until(stop_at.min(Instant::now() + Duration::from_millis(10).max(margin / 4))).await;
    }
}

/// Discourse's configure-pod, through the host's imports.
fn configure_pod(ctx: &mut HookContext) -> Result<(), String> {
    let generation: u64 = state::Host::get(ctx, "generation".into())
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
        + 1;
    state::Host::set(ctx, "generation".into(), Some(generation.to_string()));
    // As Python ops does, `pod.set_spec` asks is-leader once more.
    if !leadership::Host::is_leader(ctx) {
        ctx.leadership_refusals += 1;
        return Err("cannot set a pod spec as this unit is not a leader".into());
    }
    // The unit and generation make every leader commit a new spec, so the revision count
    // tells whether every commit applied whole.
    let unit = ctx.unit().to_string();
    let spec = format!(
        r#"{{"version": 3, "containers": [{{"name": "discourse", "imageDetails": {{"imagePath": "discourse/discourse:2.6"}},
           "envConfig": {{"DISCOURSE_DB": "host=postgresql-0", "GENERATION": "{unit} {generation}"}}}}]}}"#
    );
    pod::Host::set_pod_spec(ctx, spec, None).map_err(|e| format!("{e:?}"))
}

impl HookExecutor for DiscourseStandIn {
    fn execute(
        &self,
        snapshot: UnitSnapshot,
        fence: Option<Fence>,
        guarantee: Option<Arc<dyn GuaranteeWatch>>,
        _hook: Hook,
    ) -> BoxFuture<'static, HookRun> {
        let work = self
            .work
            .draw(&mut self.rng.lock().unwrap_or_else(|e| e.into_inner()));
        let metadata = self.metadata.clone();
        let margin = self.margin;
        Box::pin(async move {
            let mut ctx = HookContext::new(snapshot, fence, metadata, 0);
            let leader = leadership::Host::is_leader(&mut ctx);
            if let Err(why) = bounded_work(work, guarantee.as_deref(), margin).await {
                return ctx.finish(HookOutcome::Interrupted(why));
            }
            if leader && let Err(e) = configure_pod(&mut ctx) {
                return ctx.finish(HookOutcome::Failed(e));
            }
            let active = WitStatus {
                kind: StatusKind::Active,
                message: String::new(),
            };
            if let Err(e) = status::Host::set_unit_status(&mut ctx, active) {
                return ctx.finish(HookOutcome::Failed(format!("{e:?}")));
            }
            ctx.finish(HookOutcome::Succeeded)
        })
    }
}
