//! A unit's agent: runs the unit's hooks one at a time from its queue, pins leadership for
//! each, commits each hook's writes (fenced when it ran as leader), and retries failures.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use charm_model::leadership::hook_may_continue;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tracing::Instrument;

use crate::context::{BagReader, HookOutcome, HookRun, Interruption};
pub use crate::executor::HookExecutor;
use crate::leadership::{Leadership, LeadershipConfig, LeadershipTracker};
use crate::metrics::UnitMetrics;
use crate::model::{Hook, LogRecord};
use crate::shared::Shared;
pub use crate::shared::{HookRecord, HookResultKind};
use crate::store::{CommitError, Committed, HookCommit, QueuedHook, Store, StoreError};

/// Up to how many remote units a relation has for a hook's snapshot to hold their bags;
/// in larger relations the hook reads each bag as it asks for it. Most relations are small,
/// and their bags cost no read of their own.
const REMOTE_BAGS_UP_FRONT: usize = 8;

/// How many conflicting commits in a row rerun their hook at once, before the reruns back
/// off ([`stale_backoff`]).
const STALE_AT_ONCE: u32 = 3;

/// The longest wait before a hook whose commits keep conflicting runs again.
const STALE_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The wait before the rerun of a hook after `conflicts` conflicting commits in a row: none
/// for the first few, then from 1 ms doubling to [`STALE_MAX_BACKOFF`], spread by the unit
/// so that units conflicting with each other do not rerun in step. A conflict means other
/// units' commits went through, not that the store is failing: the backoff of other
/// transient failures (seconds) would leave a unit that reads much of a busy model (a
/// database's leader with a thousand clients) idle while its queue grows.
fn stale_backoff(unit: &str, conflicts: u32) -> Duration {
    if conflicts <= STALE_AT_ONCE {
        return Duration::ZERO;
    }
    let base = Duration::from_millis(1)
        .saturating_mul(1 << (conflicts - STALE_AT_ONCE - 1).min(16))
        .min(STALE_MAX_BACKOFF);
    // A factor in [0.5, 1.5) from the unit's name.
    let hash = crate::shared::fnv1a(unit);
    base.mul_f64(0.5 + (hash % 1024) as f64 / 1024.0)
}

/// How often a unit in error looks whether the operator resolved it.
const RESOLVED_POLL: Duration = Duration::from_secs(1);

/// How soon an agent reads its queue again when the store did not answer a read it was
/// woken for.
const POLL_AGAIN: Duration = Duration::from_millis(250);

/// How failed hooks are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first wait after a failure; it doubles with each failure.
    pub initial_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// After this many failures of the same hook the unit stops, in error, awaiting the
    /// operator (as Juju does); `None` retries forever.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Juju waits 5 s, doubling to 5 min. A local host can retry much sooner.
        RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            max_attempts: Some(5),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self, failures: u32) -> Duration {
        self.initial_backoff
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(self.max_backoff)
    }
}

/// How a hook attempt that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    /// Committed, with `is_leader` true throughout.
    AsLeader,
    /// Committed, with `is_leader` false throughout.
    AsFollower,
    /// Not run: a leader-elected hook whose leadership was already gone.
    Skipped,
}

/// Why a hook attempt did not commit.
#[derive(Debug)]
enum Failure {
    /// The unit is no longer in the model: its remove hook committed (here, or on a host
    /// that crashed before it could tell), so its agent ends.
    Gone,
    /// The charm's fault: shown as the unit's error status.
    Charm(String),
    /// Not the charm's fault (store unavailable, leadership lost mid-way): retried quietly.
    Transient(HookResultKind, String),
}

pub(crate) struct UnitAgent {
    pub(crate) unit: String,
    /// This agent's lease holder ([`charm_model::agent_holder`]).
    pub(crate) holder: String,
    pub(crate) executor: Arc<dyn HookExecutor>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) inbox: mpsc::UnboundedReceiver<QueuedHook>,
    /// The unit's queue as loaded from the store, then as notified.
    pub(crate) queue: VecDeque<QueueEntry>,
    pub(crate) retry: RetryPolicy,
    pub(crate) leadership: LeadershipConfig,
    /// The last term for which leader-elected ran (from the store).
    pub(crate) elected_term: Option<u64>,
    /// How often an idle agent looks in the store for hooks other hosts queued.
    pub(crate) poll: Option<Duration>,
    /// This unit's hooks and queue, when the host keeps metrics.
    pub(crate) metrics: Option<UnitMetrics>,
    /// This agent's hold on the unit's ownership lease, when the host claims units: the
    /// agent ends when it no longer holds it.
    pub(crate) ownership: Option<tokio::sync::watch::Receiver<Leadership>>,
}

/// A hook in the agent's queue: one the store queued (`seq`), or one the agent generated
/// (leader-elected, `seq: None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueEntry {
    pub(crate) seq: Option<u64>,
    pub(crate) hook: Hook,
}

/// Where the hook the store queued as `seq` goes in `queue`, keeping the store's order
/// behind the head (which may be running); `None` if it is there already.
fn place(queue: &VecDeque<QueueEntry>, seq: u64) -> Option<usize> {
    // Hooks arrive in the store's order, so most go last: the stored hooks behind the head
    // are in that order, and one after the last of them is after all of them. A unit with
    // ten thousand hooks queued takes the next without reading them.
    let last = queue.back().and_then(|p| p.seq);
    if queue.is_empty()
        || (last.is_some_and(|s| s < seq) && queue.front().is_some_and(|p| p.seq != Some(seq)))
    {
        return Some(queue.len());
    }
    if queue.iter().any(|p| p.seq == Some(seq)) {
        return None;
    }
    Some(
        queue
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, p)| p.seq.is_some_and(|s| s > seq))
            .map_or(queue.len(), |(i, _)| i),
    )
}

impl From<QueuedHook> for QueueEntry {
    fn from(q: QueuedHook) -> Self {
        QueueEntry {
            seq: Some(q.seq),
            hook: q.hook,
        }
    }
}

impl UnitAgent {
    fn accept(&mut self, queued: QueuedHook) {
        match place(&self.queue, queued.seq) {
            Some(at) => self.queue.insert(at, queued.into()),
            // The store coalesced already; this only drops a notice of a hook loaded from
            // the store too.
            None => self.shared.pending.done(1),
        }
    }

    pub(crate) async fn run(mut self, tracker: LeadershipTracker) {
        let mut leadership = tracker.subscribe();
        // Know the first answer before the first hook, so leader-elected lands in Juju's
        // place (after install); a silent store does not hold the unit up for long.
        let _ = timeout(
            self.leadership.request_timeout,
            leadership.wait_for(|l| *l != Leadership::Unknown),
        )
        .await;
        // Stores that watch for changes wake the agent when another host queues a hook.
        let signal = self.store.clone().queue_signal(&self.unit);
        // Forgotten, as the store forgets it, once a hook commits as a follower's or
        // leader-elected is skipped: a unit that leads again in the same term (a lease that
        // outlived a store outage longer than the guarantee) must hear leader-elected to
        // catch up on what it handled as a follower; Juju's uniter does the same.
        let mut elected_term = self.elected_term;
        let mut failures = 0u32;
        let mut transient_failures = 0u32;
        let mut ownership = self.ownership.clone();
        // A deadline, not a sleep started anew at every wake-up: the leases' renewals wake
        // an idle agent more often than it polls, and must not put the poll off for ever.
        let mut next_poll = self.poll.map(|every| Instant::now() + every);
        loop {
            if let Some(owned) = &ownership
                && !matches!(*owned.borrow(), Leadership::Leader { .. })
            {
                // Another agent may run the unit once the lease lapses: this one stops,
                // and a new one claims the unit again.
                tracing::warn!(unit = %self.unit, "ownership of the unit not renewed in time: stopping its agent");
                self.shared.forget(&self.unit);
                return;
            }
            while let Ok(hook) = self.inbox.try_recv() {
                self.accept(hook);
            }
            if self.inbox.is_closed() {
                // The controller no longer routes hooks here: the host is stopping (or the
                // unit left), and the hook that ran last has committed.
                return;
            }
            self.report_queue();
            let current = leadership.borrow_and_update().clone();
            match current {
                // After install (Juju's order), once per term and again when owed: the store
                // records the term with the hook's commit, so a restarted host does not run
                // it twice. Only while the hook could run as leader: queued with too little
                // guarantee left it would be skipped, owed again and queued again at once.
                Leadership::Leader { term, .. }
                    if charm_model::leadership::owes_leader_elected(
                        elected_term,
                        term,
                        self.queue.iter().map(|p| &p.hook),
                    ) && tracker.can_pin(self.min_remaining()) =>
                {
                    elected_term = Some(term);
                    self.shared.pending.add(1);
                    // Before anything else queued, but never ahead of a hook being retried.
                    let at = if failures > 0 { 1 } else { 0 };
                    let elected = QueueEntry {
                        seq: None,
                        hook: Hook::LeaderElected,
                    };
                    self.queue.insert(at.min(self.queue.len()), elected);
                }
                _ => {}
            }
            if self.queue.front().is_some_and(|q| q.hook == Hook::Stop) {
                // The unit is leaving: it stops renewing its lease, so no renewal can
                // claim it again once its remove hook has released it.
                tracker.stop();
            }
            let Some(QueueEntry { seq, hook }) = self.queue.front().cloned() else {
                let poll_at = next_poll;
                let woken = signal.clone();
                tokio::select! {
                    hook = self.inbox.recv() => match hook {
                        Some(hook) => self.accept(hook),
                        None => return,
                    },
                    _ = leadership.changed() => {}
                    _ = async {
                        match ownership.as_mut() {
                            Some(owned) => {
                                let _ = owned.changed().await;
                            }
                            None => std::future::pending().await,
                        }
                    } => {}
                    // Hooks queued by another host sharing the store reach no mailbox here.
                    _ = async move {
                        match poll_at {
                            Some(at) => sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        next_poll = match self.poll_store().await {
                            true => self.poll.map(|every| Instant::now() + every),
                            false => Some(Instant::now() + POLL_AGAIN),
                        };
                    }
                    _ = async move {
                        match woken {
                            Some(signal) => signal.notified().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        // The wake-up that asked for this read is spent: look again soon.
                        if !self.poll_store().await {
                            next_poll = Some(Instant::now() + POLL_AGAIN);
                        }
                    }
                }
                continue;
            };
            let span = tracing::info_span!(
                "hook",
                unit = %self.unit,
                hook = %hook.name(),
                term = tracing::field::Empty,
                seq,
                relation = tracing::field::Empty,
                remote_unit = tracing::field::Empty,
            );
            // Which relation, and which remote unit, a relation hook is about: with its place
            // in the queue (`seq`), a log names the hook exactly, so a unit's history can be
            // read back from it.
            if let Some(r) = hook.relation() {
                span.record("relation", r.id);
                if let Some(remote) = &r.remote_unit {
                    span.record("remote_unit", remote.as_str());
                }
            }
            match self.attempt(seq, &hook, &tracker).instrument(span).await {
                Ok(_) if hook == Hook::Remove => {
                    tracing::info!(unit = %self.unit, "removed");
                    self.shared.forget(&self.unit);
                    return;
                }
                Err(Failure::Gone) => {
                    tracing::info!(unit = %self.unit, "no longer in the model");
                    self.shared.forget(&self.unit);
                    return;
                }
                Ok(ran) => {
                    // Run as a follower, or leader-elected skipped: owed should it lead again.
                    if ran != Ran::AsLeader {
                        elected_term = None;
                    }
                    self.queue.pop_front();
                    self.shared.pending.done(1);
                    if failures > 0 {
                        let _ = self.store.set_hook_error(&self.unit, None).await;
                    }
                    failures = 0;
                    transient_failures = 0;
                }
                Err(Failure::Transient(kind, why)) => {
                    // Not the charm's fault: no error status and no limit, but the same
                    // growing backoff, so a long outage does not rerun the hook in a loop.
                    transient_failures += 1;
                    // A store that refuses writes (a full disk, say) is news to the
                    // operator: said once at warning level, then quietly while it lasts.
                    let result = kind.as_str();
                    if kind == HookResultKind::Stale {
                        tracing::debug!(unit = %self.unit, hook = %hook.name(), seq, result, "hook runs again: {why}");
                    } else if transient_failures == 1 && kind == HookResultKind::StoreUnavailable {
                        tracing::warn!(unit = %self.unit, hook = %hook.name(), seq, result, "hook will be retried: {why}");
                    } else {
                        tracing::info!(unit = %self.unit, hook = %hook.name(), seq, result, "hook will be retried: {why}");
                    }
                    // A hook that read stale data runs again at once on fresh data; only
                    // a run of conflicts backs off, briefly.
                    if kind == HookResultKind::Stale {
                        let wait = stale_backoff(&self.unit, transient_failures);
                        if !wait.is_zero() {
                            sleep(wait).await;
                        }
                    } else {
                        sleep(self.retry.backoff(transient_failures)).await;
                    }
                }
                Err(Failure::Charm(why)) => {
                    failures += 1;
                    let message = format!("hook failed: {:?}: {why}", hook.name());
                    tracing::warn!(unit = %self.unit, attempt = failures, "{message}");
                    let _ = self.store.hook_failed(&self.unit, seq, message).await;
                    if self.retry.max_attempts.is_some_and(|max| failures >= max) {
                        tracing::error!(unit = %self.unit, hook = %hook.name(), "awaiting error resolution");
                        if !self.halt().await {
                            return;
                        }
                        tracing::info!(unit = %self.unit, "resolved");
                        failures = 0;
                        continue;
                    }
                    sleep(self.retry.backoff(failures)).await;
                }
            }
        }
    }

    /// Takes up hooks the store holds for this unit that this agent has not seen; whether
    /// the store answered.
    async fn poll_store(&mut self) -> bool {
        match self.store.queued(&self.unit).await {
            Ok(queued) => {
                for hook in queued {
                    self.shared.pending.add(1);
                    self.accept(hook);
                }
                true
            }
            Err(e) => {
                tracing::debug!(unit = %self.unit, "queue not read: {e}");
                false
            }
        }
    }

    /// Stops running hooks, in error, until the operator resolves the unit (`charm-host
    /// resolved`, which clears its error in the store): then the queue is taken up again
    /// from the store, and this returns true. What arrives meanwhile is dropped (the store
    /// keeps it). False when the agent is to end: the unit was removed, or the host stops.
    async fn halt(&mut self) -> bool {
        self.shared.pending.done(self.queue.len());
        self.queue.clear();
        self.report_queue();
        let every = self.poll.unwrap_or(RESOLVED_POLL).min(RESOLVED_POLL);
        loop {
            tokio::select! {
                hook = self.inbox.recv() => match hook {
                    Some(_) => self.shared.pending.done(1),
                    None => return false,
                },
                _ = sleep(every) => match self.store.unit_details(&self.unit).await {
                    Ok(details) if details.hook_error.is_none() => {
                        if self.poll_store().await {
                            return true;
                        }
                    }
                    Ok(_) => {}
                    Err(StoreError::NotFound(_)) => return false,
                    Err(e) => tracing::debug!(unit = %self.unit, "awaiting resolution: {e}"),
                },
            }
        }
    }

    async fn attempt(
        &mut self,
        seq: Option<u64>,
        hook: &Hook,
        tracker: &LeadershipTracker,
    ) -> Result<Ran, Failure> {
        // A leader whose renewal is due waits for it (at most until its guarantee ends)
        // rather than run this hook as a follower's for want of a few hundred ms.
        let min_remaining = self.min_remaining();
        tracker.renewed(min_remaining).await;
        // Held from the snapshot to the commit, unless a step of it runs long.
        let mut place = self.shared.admission.enter().await;
        let began = Instant::now();
        // A charm's hooks read remote units' bags as they ask for them: a unit related to
        // a thousand others reads the few it looks at, and its commit checks only those.
        let lazy = self.executor.reads_bags_as_asked();
        let bags = if lazy {
            charm_model::snapshot::BagsRead::UpTo(REMOTE_BAGS_UP_FRONT)
        } else {
            charm_model::snapshot::BagsRead::All
        };
        // Leader-elected is this agent's own, run before the queue's head: it sees nothing
        // the head is to bring (a relation-joined's remote unit).
        let runs = if seq.is_some() {
            charm_model::lifecycle::Runs::Head
        } else {
            charm_model::lifecycle::Runs::BeforeHead
        };
        let read = place
            .run(self.store.hook_read_as(&self.unit, bags, runs))
            .await;
        let mut read = match read {
            Ok(read) => read,
            Err(StoreError::NotFound(what)) if what == format!("unit {}", self.unit) => {
                return Err(Failure::Gone);
            }
            Err(e) => {
                return Err(Failure::Transient(
                    HookResultKind::StoreUnavailable,
                    e.to_string(),
                ));
            }
        };
        // Pin leadership for the whole hook: a leader hook needs room to run before its
        // guarantee would end.
        let pinned = tracker.pin(min_remaining);
        if *hook == Hook::LeaderElected && pinned.is_none() {
            // Leadership was lost before the hook could run: it no longer applies.
            self.finish(
                began,
                HookRecord {
                    unit: self.unit.clone(),
                    hook: hook.name(),
                    leader: false,
                    term: None,
                    result: HookResultKind::Skipped,
                    outcome: "skipped: no longer leader".into(),
                    pod_spec_revision: None,
                    refused_not_leader: false,
                    duration: Duration::ZERO,
                },
            );
            return Ok(Ran::Skipped);
        }
        let (fence, guarantee) = match pinned {
            Some((fence, guarantee)) => {
                tracing::Span::current().record("term", fence.term);
                (Some(fence), Some(guarantee))
            }
            None => (None, None),
        };
        let action = action_id(hook);
        if let Some(id) = action {
            // Best effort: the hook's commit records the action's end either way.
            if let Err(e) = self.store.start_action(id, now_ms()).await {
                tracing::debug!(unit = %self.unit, action = id, "action not marked running: {e}");
            }
        }
        let run = if lazy {
            let store = self.store.clone();
            let runtime = tokio::runtime::Handle::current();
            let reader: BagReader = Arc::new(move |relation, units: &[String]| {
                runtime
                    .block_on(async {
                        match units {
                            [unit] => store.unit_bag(relation, unit).await.map(|bag| vec![bag]),
                            _ => store.unit_bags(relation, units).await,
                        }
                    })
                    .map_err(|e| e.to_string())
            });
            self.executor.execute_reading(
                read.snapshot.clone(),
                fence.clone(),
                guarantee.clone(),
                hook.clone(),
                reader,
            )
        } else {
            self.executor.execute(
                read.snapshot.clone(),
                fence.clone(),
                guarantee.clone(),
                hook.clone(),
            )
        };
        let mut run = place.run(run).await;
        // What the hook read besides its snapshot is checked by its commit as well.
        for (relation, unit, bag) in std::mem::take(&mut run.bags_read) {
            if let Some(view) = read.snapshot.relations.get_mut(&relation) {
                view.unit_bags.insert(unit, bag);
            }
        }
        if *hook == Hook::LeaderElected {
            run.changes.elected_term = fence.as_ref().map(|f| f.term);
        }
        if action.is_some() {
            run.changes.action.get_or_insert_default().ended_ms = Some(now_ms());
        }
        self.keep_logs(hook, &run).await;
        let refused_not_leader = run.leadership_refusals > 0;
        let mut record = HookRecord {
            unit: self.unit.clone(),
            hook: hook.name(),
            leader: fence.is_some(),
            term: fence.as_ref().map(|f| f.term),
            result: HookResultKind::Committed,
            outcome: "ok".into(),
            pod_spec_revision: None,
            refused_not_leader,
            duration: Duration::ZERO,
        };
        // Refused as no longer queued: an earlier run's commit applied it (its answer lost),
        // or the relation it is about is being removed; this run's writes are not applied.
        let mut already_committed = false;
        let result = match run.outcome {
            HookOutcome::Succeeded => {
                // The same rule as the epoch deadline's, once more before the commit.
                let expired = guarantee.as_ref().is_some_and(|g| {
                    !hook_may_continue(g.valid_until(), Instant::now(), self.charm_margin())
                });
                if expired {
                    Err(Failure::Transient(
                        HookResultKind::Interrupted,
                        "leadership guarantee ended before the commit".into(),
                    ))
                } else {
                    // Even with nothing written, the commit takes the hook off the queue.
                    let commit = HookCommit {
                        unit: &self.unit,
                        hook: seq,
                        changes: &run.changes,
                        fence: fence.as_ref(),
                        read: Some(&read),
                        owner: self.ownership.is_some().then_some(self.holder.as_str()),
                    };
                    match place.run(self.store.commit_hook(commit)).await {
                        Ok(committed) => Ok(committed),
                        // A host that crashed after this commit applied it already.
                        Err(CommitError::NotQueued { .. }) => {
                            already_committed = true;
                            Ok(Committed::default())
                        }
                        Err(CommitError::Store(StoreError::NotFound(what)))
                            if what == format!("unit {}", self.unit) =>
                        {
                            return Err(Failure::Gone);
                        }
                        Err(e @ CommitError::Fenced { .. }) => {
                            Err(Failure::Transient(HookResultKind::Fenced, e.to_string()))
                        }
                        Err(e @ CommitError::NotOwner { .. }) => {
                            Err(Failure::Transient(HookResultKind::Fenced, e.to_string()))
                        }
                        Err(e @ CommitError::Stale { .. }) => {
                            Err(Failure::Transient(HookResultKind::Stale, e.to_string()))
                        }
                        Err(CommitError::Store(e)) => Err(Failure::Transient(
                            HookResultKind::StoreUnavailable,
                            e.to_string(),
                        )),
                        Err(e @ (CommitError::Unfenced | CommitError::Limit(_))) => {
                            Err(Failure::Charm(e.to_string()))
                        }
                    }
                }
            }
            HookOutcome::Failed(message) => Err(Failure::Charm(message)),
            // As the commit would refuse it.
            HookOutcome::OverLimit(limit) => {
                Err(Failure::Charm(CommitError::Limit(limit).to_string()))
            }
            HookOutcome::Trapped(message) => Err(Failure::Charm(format!("trapped: {message}"))),
            HookOutcome::Interrupted(why @ Interruption::StoreUnavailable) => {
                Err(Failure::Transient(
                    HookResultKind::StoreUnavailable,
                    format!("interrupted: {why}"),
                ))
            }
            HookOutcome::Interrupted(why @ Interruption::GuaranteeEnding) => Err(
                Failure::Transient(HookResultKind::Interrupted, format!("interrupted: {why}")),
            ),
            HookOutcome::Interrupted(why @ Interruption::TimedOut { .. }) => {
                Err(Failure::Charm(why.to_string()))
            }
        };
        // A failed action hook fails its action, as Juju's does, and leaves the queue: the
        // unit does not go into error, and none of the hook's writes apply, but what the
        // action reported before it failed is kept with the failure.
        let result = match (result, action) {
            (Err(Failure::Charm(why)), Some(_)) => {
                (record.result, record.outcome) = (HookResultKind::CharmFailed, why.clone());
                let mut output = run.changes.action.take().unwrap_or_default();
                output.failure = Some(why);
                let failed = crate::model::Changes {
                    action: Some(output),
                    ..Default::default()
                };
                // Under the hook's own fence, so the unit's leader-elected record stays.
                match self
                    .store
                    .commit(&self.unit, seq, &failed, fence.as_ref())
                    .await
                {
                    Ok(committed) => Ok(committed),
                    Err(CommitError::NotQueued { .. }) => {
                        already_committed = true;
                        Ok(Committed::default())
                    }
                    Err(e @ CommitError::Fenced { .. }) => {
                        Err(Failure::Transient(HookResultKind::Fenced, e.to_string()))
                    }
                    Err(e) => Err(Failure::Transient(
                        HookResultKind::StoreUnavailable,
                        e.to_string(),
                    )),
                }
            }
            (result, _) => result,
        };
        match result {
            Ok(_) if already_committed => {
                tracing::debug!(
                    unit = %self.unit,
                    hook = %record.hook,
                    "hook no longer queued: nothing applied (an earlier run committed it, or its relation is being removed)"
                );
                let ran = if record.leader {
                    Ran::AsLeader
                } else {
                    Ran::AsFollower
                };
                self.finish(began, record);
                Ok(ran)
            }
            Ok(committed) => {
                record.pod_spec_revision = committed.receipt.pod_spec_revision;
                tracing::debug!(
                    unit = %self.unit,
                    hook = %record.hook,
                    leader = record.leader,
                    term = record.term.unwrap_or(0),
                    pod_spec_revision = record.pod_spec_revision.unwrap_or(0),
                    refused_not_leader = record.refused_not_leader,
                    "hook committed"
                );
                let ran = if record.leader {
                    Ran::AsLeader
                } else {
                    Ran::AsFollower
                };
                self.finish(began, record);
                self.shared.notify(committed.queued);
                Ok(ran)
            }
            Err(failure) => {
                (record.result, record.outcome) = match &failure {
                    Failure::Charm(m) => (HookResultKind::CharmFailed, m.clone()),
                    Failure::Gone => (HookResultKind::StoreUnavailable, "unit removed".into()),
                    Failure::Transient(kind, m) => (*kind, m.clone()),
                };
                // A commit refused as stale is part of committing, not a failed hook: the
                // hook runs again on fresh data, and that run is the one recorded.
                if record.result != HookResultKind::Stale {
                    self.finish(began, record);
                }
                Err(failure)
            }
        }
    }

    /// Keeps what the hook logged, and its stdout and stderr, in the unit's ring in the
    /// store for `debug-log`, however the hook ended. Best effort: a line lost to a store
    /// outage is not worth a retry of the hook.
    async fn keep_logs(&self, hook: &Hook, run: &HookRun) {
        if run.logs.is_empty() && run.output.is_empty() {
            return;
        }
        let at_ms = now_ms();
        let line = |level: &str, message: &str| LogRecord {
            seq: 0,
            unit: self.unit.clone(),
            hook: hook.name(),
            at_ms,
            level: level.to_string(),
            message: message.to_string(),
        };
        let lines: Vec<LogRecord> = run
            .logs
            .iter()
            .map(|l| line(l.level, &l.message))
            .chain(run.output.lines().map(|l| line("stdout", l)))
            .collect();
        if let Err(e) = self.store.record_logs(&self.unit, lines).await {
            tracing::debug!(unit = %self.unit, "charm log lines not kept: {e}");
        }
    }

    /// Records a hook attempt that began (read its snapshot) at `began`: in the metrics,
    /// and with the controller's observer and history.
    fn finish(&mut self, began: Instant, mut record: HookRecord) {
        record.duration = began.elapsed();
        if let Some(metrics) = &mut self.metrics {
            metrics.hook_ended(&record.hook, record.result.as_str(), record.duration);
        }
        self.shared.record(record);
    }

    /// Tells the metrics this unit's queue length (hooks queued or running).
    fn report_queue(&mut self) {
        if let Some(metrics) = &mut self.metrics {
            metrics.queue_len(self.queue.len());
        }
    }

    fn charm_margin(&self) -> Duration {
        self.shared.guarantee_margin
    }

    /// The guarantee a hook needs left to start as leader: room to run before it ends.
    fn min_remaining(&self) -> Duration {
        self.charm_margin() * 2
    }
}

/// The id of the action whose hook `hook` is, if it is one the model recorded.
fn action_id(hook: &Hook) -> Option<u64> {
    match hook {
        Hook::Action { id, .. } => id.parse().ok(),
        _ => None,
    }
}

/// Now, in milliseconds since the UNIX epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Drop for UnitAgent {
    fn drop(&mut self) {
        // A stopped or crashed agent's hooks will not run: they are no longer pending.
        let mut dropped = self.queue.len();
        while self.inbox.try_recv().is_ok() {
            dropped += 1;
        }
        self.shared.pending.done(dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a hook goes by reading the whole queue, as before the shortcut for the usual
    /// case.
    fn place_by_reading(queue: &VecDeque<QueueEntry>, seq: u64) -> Option<usize> {
        if queue.iter().any(|p| p.seq == Some(seq)) {
            return None;
        }
        let mut after_head = queue.iter().enumerate().skip(1);
        Some(
            after_head
                .find(|(_, p)| p.seq.is_some_and(|s| s > seq))
                .map_or(queue.len(), |(i, _)| i),
        )
    }

    proptest::proptest! {
        /// Queues built as an agent builds them (stored hooks in any order, repeats,
        /// leader-elected slipped in, the head run): every hook lands where reading the
        /// whole queue puts it.
        #[test]
        fn a_hook_lands_where_reading_the_queue_puts_it(
            steps in proptest::collection::vec((0u64..40, 0u8..10), 0..60),
        ) {
            let mut queue = VecDeque::new();
            for (seq, what) in steps {
                match what {
                    0 => {
                        let at = 1.min(queue.len());
                        queue.insert(at, QueueEntry { seq: None, hook: Hook::LeaderElected });
                    }
                    1 => {
                        queue.pop_front();
                    }
                    _ => {
                        let expected = place_by_reading(&queue, seq);
                        proptest::prop_assert_eq!(place(&queue, seq), expected, "{:?}", queue);
                        if let Some(at) = expected {
                            queue.insert(at, QueueEntry { seq: Some(seq), hook: Hook::Install });
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn conflicting_commits_rerun_at_once_then_back_off_briefly() {
        for conflicts in 1..=STALE_AT_ONCE {
            assert_eq!(stale_backoff("db/0", conflicts), Duration::ZERO);
        }
        let waits: Vec<Duration> = (STALE_AT_ONCE + 1..STALE_AT_ONCE + 40)
            .map(|n| stale_backoff("db/0", n))
            .collect();
        assert!(waits[0] > Duration::ZERO && waits[0] < Duration::from_millis(2));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        // Never the seconds of other transient failures, however long the conflicts last.
        assert!(waits.iter().all(|w| *w < STALE_MAX_BACKOFF.mul_f64(1.5)));
        assert!(*waits.last().unwrap() >= STALE_MAX_BACKOFF / 2);
        // Units conflicting with each other do not all rerun in step.
        let spread: std::collections::BTreeSet<Duration> = (0..20)
            .map(|i| stale_backoff(&format!("forum/{i}"), STALE_AT_ONCE + 5))
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }
}
