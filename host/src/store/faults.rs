//! Fault injection around any store: seeded latency, timeouts, transient errors, outage
//! windows in which every call times out (raft flux), and clock drift between a claimant
//! and the store. Used by the tests, `charm-host sim` and `charm-host run --faults`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep};

use super::{
    Claim, CommitError, CommitFuture, CommitReceipt, Committed, Fence, HookCommit, Lease,
    LeaseError, LeaseFuture, LeaseStore, StateStore, Step, StepOp, Store, StoreError, StoreFuture,
};
use crate::model::Changes;

/// A window, from the start of the run, in which the store answers nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Outage {
    /// When it starts.
    pub start: Duration,
    /// When it ends.
    pub end: Duration,
}

impl Outage {
    /// How long it lasts.
    pub fn length(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// What goes wrong, and how often. Every draw comes from one generator seeded by `seed`.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Seeds every random draw.
    pub seed: u64,
    /// Every answered call takes `latency_min` plus up to `latency_jitter` more.
    pub latency_min: Duration,
    /// See `latency_min`.
    pub latency_jitter: Duration,
    /// The chance that a call is never answered (it hangs for `hang`, then fails).
    pub timeout_rate: f64,
    /// Of the claims never answered, the chance the store applied them anyway (the answer
    /// was lost on the way back).
    pub lost_answer_rate: f64,
    /// The chance that a call fails at once (connection refused).
    pub error_rate: f64,
    /// Windows in which every lease and commit call times out.
    pub outages: Vec<Outage>,
    /// How long an unanswered call hangs before failing; longer than callers' timeouts.
    pub hang: Duration,
    /// Whether commits suffer the faults too (as when leases and state share one store), or
    /// only lease calls do (as in Juju 2.9, whose leases lived in raft and state in mongo).
    pub commit_faults: bool,
    /// Per claimant: how much faster the store's clock runs than the claimant's (0.05 is
    /// 5%: the store lets a lease lapse 5% sooner than the claimant counts).
    pub drift: BTreeMap<String, f64>,
}

impl FaultPlan {
    /// No faults at all.
    pub fn none(seed: u64) -> Self {
        FaultPlan {
            seed,
            latency_min: Duration::ZERO,
            latency_jitter: Duration::ZERO,
            timeout_rate: 0.0,
            lost_answer_rate: 0.0,
            error_rate: 0.0,
            outages: Vec::new(),
            hang: Duration::from_secs(30),
            commit_faults: true,
            drift: BTreeMap::new(),
        }
    }

    /// Whether `at` (from the start of the run) falls in an outage.
    pub fn in_outage(&self, at: Duration) -> bool {
        self.outages.iter().any(|o| o.start <= at && at < o.end)
    }

    /// The longest outage overlapping `[from, to]`, counting windows that overlap or are
    /// less than `bridge` apart as one.
    pub fn longest_outage_between(
        &self,
        from: Duration,
        to: Duration,
        bridge: Duration,
    ) -> Duration {
        // Windows that overlap, or leave too short a gap to get a call through, are one
        // outage: the store is unreachable from the first start to the last end.
        let mut windows: Vec<&Outage> = self
            .outages
            .iter()
            .filter(|o| o.start <= to && o.end >= from)
            .collect();
        windows.sort_by_key(|o| o.start);
        let mut longest = Duration::ZERO;
        let mut merged: Option<(Duration, Duration)> = None;
        for o in windows {
            merged = match merged {
                Some((start, end)) if o.start < end + bridge => Some((start, end.max(o.end))),
                _ => Some((o.start, o.end)),
            };
            if let Some((start, end)) = merged {
                longest = longest.max(end - start);
            }
        }
        longest
    }
}

/// What the fault injector saw the store accept, for the simulation's checks.
pub trait StoreObserver: Send + Sync {
    /// A claim was granted (new or extended).
    fn claim_granted(&self, app: &str, lease: &Lease, sent_at: Instant);
    /// A commit was applied.
    fn commit_accepted(
        &self,
        unit: &str,
        changes: &Changes,
        fence: Option<&Fence>,
        receipt: &CommitReceipt,
    );
}

/// One event of a hook's leader-only commit as its caller saw it: the call, or its answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum WriteEvent {
    /// A commit with leader data or a pod spec was sent.
    Invoked {
        /// The commit's number in the run: its answer carries the same.
        op: u64,
        /// The unit whose hook it is.
        unit: String,
        /// The fence's term.
        term: Option<u64>,
        /// Whether it sets the pod spec.
        pod_spec: bool,
    },
    /// The store applied it; the pod spec's new revision, if the spec changed.
    Committed {
        /// The commit's number.
        op: u64,
        /// The new revision.
        pod_spec_revision: Option<u64>,
    },
    /// The store refused it (the fence no longer held, or another check failed).
    Refused {
        /// The commit's number.
        op: u64,
    },
    // A commit that got no answer has no event: it may or may not have been applied.
}

/// A [`WriteEvent`] as a history file holds it, one JSON object a line: with the instant
/// it happened, in nanoseconds since the Unix epoch by the system clock, so that the
/// histories of several processes on one machine merge in real-time order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimedWriteEvent {
    /// When it happened.
    pub at_ns: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: WriteEvent,
}

/// The leader-only writes of a run, in the order their calls and answers happened, for a
/// linearizability check; kept in memory, and written through to a file if given one.
#[derive(Debug, Default)]
pub struct WriteHistory {
    events: Mutex<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    events: Vec<WriteEvent>,
    file: Option<std::fs::File>,
}

impl WriteHistory {
    /// A history also written to `path` (created, or appended to), a line an event as it
    /// happens ([`TimedWriteEvent`]): what was written survives the process being killed.
    pub fn to_file(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(WriteHistory {
            events: Mutex::new(Recorded {
                events: Vec::new(),
                file: Some(file),
            }),
        })
    }

    /// The events so far.
    pub fn events(&self) -> Vec<WriteEvent> {
        self.lock().events.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(recorded: &mut Recorded, event: WriteEvent) {
        if let Some(file) = &mut recorded.file {
            let at_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            let timed = TimedWriteEvent {
                at_ns,
                event: event.clone(),
            };
            let mut line = serde_json::to_string(&timed).expect("a write event serialises");
            line.push('\n');
            // One write a line: a kill leaves whole lines, at most the last one cut short.
            if let Err(e) = std::io::Write::write_all(file, line.as_bytes()) {
                tracing::warn!("write history: {e}");
            }
        }
        recorded.events.push(event);
    }

    fn invoked(&self, request: &HookCommit<'_>) -> Option<u64> {
        let changes = request.changes;
        if changes.leader_data.is_empty() && changes.pod_spec.is_none() {
            return None;
        }
        let mut recorded = self.lock();
        let op = recorded.events.len() as u64;
        let event = WriteEvent::Invoked {
            op,
            unit: request.unit.to_string(),
            term: request.fence.map(|f| f.term),
            pod_spec: changes.pod_spec.is_some(),
        };
        Self::record(&mut recorded, event);
        Some(op)
    }

    fn answered(&self, op: Option<u64>, answer: &Result<Committed, CommitError>) {
        let Some(op) = op else { return };
        let event = match answer {
            Ok(committed) => WriteEvent::Committed {
                op,
                pod_spec_revision: committed.receipt.pod_spec_revision,
            },
            Err(CommitError::Store(_)) => return,
            Err(_) => WriteEvent::Refused { op },
        };
        Self::record(&mut self.lock(), event);
    }
}

/// A store wrapped in faults.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    plan: FaultPlan,
    rng: Mutex<StdRng>,
    start: Instant,
    observer: Option<Arc<dyn StoreObserver>>,
    /// An outage the caller starts and ends (`set_unreachable`), besides the plan's.
    unreachable: AtomicBool,
    /// Where leader-only commits are recorded, if anywhere.
    writes: Option<Arc<WriteHistory>>,
}

enum Fate {
    Answer(Duration),
    Hang,
    HangButApply,
    Refuse,
}

impl FaultyStore {
    /// Wraps `inner`; the plan's windows count from now.
    pub fn new(
        inner: Arc<dyn Store>,
        plan: FaultPlan,
        observer: Option<Arc<dyn StoreObserver>>,
    ) -> Self {
        let rng = Mutex::new(StdRng::seed_from_u64(plan.seed));
        FaultyStore {
            inner,
            plan,
            rng,
            start: Instant::now(),
            observer,
            unreachable: AtomicBool::new(false),
            writes: None,
        }
    }

    /// Records every leader-only commit's call and answer in `history`.
    pub fn with_write_history(mut self, history: Arc<WriteHistory>) -> Self {
        self.writes = Some(history);
        self
    }

    /// Starts (`true`) or ends an outage now, whatever the plan says: every call the
    /// plan's outages would cover hangs until it ends.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.unreachable.store(unreachable, Ordering::SeqCst);
    }

    /// The plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// When the run started.
    pub fn started(&self) -> Instant {
        self.start
    }

    fn fate(&self) -> Fate {
        if self.unreachable.load(Ordering::SeqCst) || self.plan.in_outage(self.start.elapsed()) {
            return Fate::Hang;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let roll: f64 = rng.random();
        if roll < self.plan.timeout_rate {
            if rng.random::<f64>() < self.plan.lost_answer_rate {
                Fate::HangButApply
            } else {
                Fate::Hang
            }
        } else if roll < self.plan.timeout_rate + self.plan.error_rate {
            Fate::Refuse
        } else {
            let jitter = self.plan.latency_jitter.mul_f64(rng.random());
            Fate::Answer(self.plan.latency_min + jitter)
        }
    }

    async fn hang(&self) -> String {
        sleep(self.plan.hang).await;
        "lease operation timed out".to_string()
    }
}

impl LeaseStore for FaultyStore {
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim> {
        Box::pin(async move {
            let sent_at = Instant::now();
            // The store counts the lease on its own clock; a faster store clock is a
            // shorter lease in the claimant's time.
            let drift = (self.plan.drift.get(charm_model::holder_unit(holder)))
                .copied()
                .unwrap_or(0.0);
            let store_duration = ttl.mul_f64((1.0 - drift).max(0.0));
            let apply = || async {
                let claim = self.inner.claim(app, holder, store_duration).await?;
                Ok::<_, LeaseError>(match claim {
                    Claim::Held(lease) => {
                        let lease = Lease {
                            duration: ttl,
                            ..lease
                        };
                        if let Some(o) = &self.observer {
                            o.claim_granted(app, &lease, sent_at);
                        }
                        Claim::Held(lease)
                    }
                    denied => denied,
                })
            };
            match self.fate() {
                Fate::Answer(latency) => {
                    // Half the latency on the way there, half back.
                    sleep(latency / 2).await;
                    let answer = apply().await;
                    sleep(latency / 2).await;
                    answer
                }
                Fate::Hang => Err(LeaseError::Unavailable(self.hang().await)),
                Fate::HangButApply => {
                    let _ = apply().await;
                    Err(LeaseError::Unavailable(self.hang().await))
                }
                Fate::Refuse => Err(LeaseError::Unavailable("connection refused".into())),
            }
        })
    }

    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()> {
        self.inner.release(app, holder)
    }

    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>> {
        self.inner.leader(app)
    }

    fn lease_signal(self: Arc<Self>, app: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let inner: Arc<dyn LeaseStore> = self.inner.clone();
        inner.lease_signal(app)
    }
}

impl StateStore for FaultyStore {
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }

    fn step<'a>(&'a self, step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()> {
        self.inner.step(step, op)
    }

    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String> {
        self.inner.put_module(bytes)
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.inner.module(hash)
    }

    fn queue_signal(self: Arc<Self>, unit: &str) -> Option<Arc<Notify>> {
        let inner: Arc<dyn StateStore> = self.inner.clone();
        inner.queue_signal(unit)
    }

    /// A commit suffers the plan's faults, and goes into the write history.
    fn commit_hook<'a>(&'a self, request: HookCommit<'a>) -> CommitFuture<'a> {
        Box::pin(async move {
            let op = self.writes.as_ref().and_then(|w| w.invoked(&request));
            let answer = self.faulty_commit(request).await;
            if let Some(writes) = &self.writes {
                writes.answered(op, &answer);
            }
            answer
        })
    }
}

impl FaultyStore {
    /// A commit, through the plan's faults.
    async fn faulty_commit(&self, request: HookCommit<'_>) -> Result<Committed, CommitError> {
        let fate = if self.plan.commit_faults {
            self.fate()
        } else {
            Fate::Answer(Duration::ZERO)
        };
        match fate {
            Fate::Answer(latency) => {
                sleep(latency / 2).await;
                let answer = self.inner.commit_hook(request).await;
                if let (Ok(committed), Some(o)) = (&answer, &self.observer) {
                    o.commit_accepted(
                        request.unit,
                        request.changes,
                        request.fence,
                        &committed.receipt,
                    );
                }
                sleep(latency / 2).await;
                answer
            }
            // A commit that times out is not applied here. (Were it applied with the
            // answer lost, the retried hook would find itself no longer queued and
            // apply nothing: commits are idempotent.)
            Fate::Hang | Fate::HangButApply => {
                Err(StoreError::Unavailable(self.hang().await).into())
            }
            Fate::Refuse => Err(StoreError::Unavailable("connection refused".into()).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: f64, end: f64) -> Outage {
        Outage {
            start: Duration::from_secs_f64(start),
            end: Duration::from_secs_f64(end),
        }
    }

    #[test]
    fn overlapping_outages_count_as_one() {
        let mut plan = FaultPlan::none(1);
        plan.outages = vec![
            window(98.0, 105.0),
            window(93.0, 102.0),
            window(200.0, 201.0),
        ];
        let none = Duration::ZERO;
        let longest = plan.longest_outage_between(Duration::ZERO, Duration::from_secs(300), none);
        assert_eq!(longest, Duration::from_secs(12));
        // A gap shorter than the bridge joins two windows.
        plan.outages.push(window(106.0, 110.0));
        let all = Duration::from_secs(300);
        assert_eq!(
            plan.longest_outage_between(none, all, none),
            Duration::from_secs(12)
        );
        let joined = plan.longest_outage_between(none, all, Duration::from_secs(2));
        assert_eq!(joined, Duration::from_secs(17));
        // Only the windows overlapping the interval count.
        let later =
            plan.longest_outage_between(Duration::from_secs(150), Duration::from_secs(300), none);
        assert_eq!(later, Duration::from_secs(1));
    }
}
