//! What the simulation measures, and the checks of the invariants over it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::Changes;
use crate::store::faults::{FaultPlan, StoreObserver};
use crate::store::{CommitReceipt, Fence, Lease};

/// One unit's belief that it leads: from `start` to `end`, seconds from the run's start.
#[derive(Debug, Clone, Copy)]
struct Belief {
    unit: usize,
    start: f64,
    end: f64,
}

#[derive(Debug, Default)]
struct Inner {
    units: Vec<String>,
    open: BTreeMap<usize, (f64, f64)>,
    beliefs: Vec<Belief>,
    hooks_run: u64,
    leader_hooks: u64,
    inconsistent_hooks: u64,
    interrupted_hooks: u64,
    failed_hooks: u64,
    commits_accepted: u64,
    pod_spec_commits: u64,
    last_revision: u64,
    stale_commits_accepted: u64,
    max_term: BTreeMap<String, u64>,
    current: BTreeMap<String, (String, u64)>,
    last_grant: BTreeMap<String, f64>,
    leadership_changes: u64,
    spurious_changes: u64,
    crashes: Vec<(f64, usize)>,
    down: BTreeSet<usize>,
    failovers: Vec<f64>,
    pending_failover: Option<(f64, usize)>,
}

/// Collects the simulation's measurements. Times are virtual.
pub(crate) struct Metrics {
    start: Instant,
    guarantee: Duration,
    /// Outages closer together than this are one for I5: a holder may make no claim in so
    /// short a gap (its retry period, plus the time a claim may take).
    bridge: Duration,
    plan: FaultPlan,
    inner: Mutex<Inner>,
}

impl Metrics {
    pub(crate) fn new(
        start: Instant,
        units: Vec<String>,
        leadership: &crate::leadership::LeadershipConfig,
        plan: FaultPlan,
    ) -> Self {
        Metrics {
            start,
            guarantee: leadership.guarantee(),
            bridge: leadership.retry_period + leadership.request_timeout,
            plan,
            inner: Mutex::new(Inner {
                units,
                ..Default::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64()
    }

    fn index(inner: &Inner, holder: &str) -> usize {
        let unit = charm_model::holder_unit(holder);
        inner
            .units
            .iter()
            .position(|u| u == unit)
            .expect("a simulated unit")
    }

    /// `unit` believes it leads until `until` (opening or extending its belief).
    pub(crate) fn believe(&self, unit: &str, until: Instant) {
        let now = self.secs(Instant::now());
        let until = self.secs(until);
        let mut inner = self.lock();
        let i = Self::index(&inner, unit);
        match inner.open.get_mut(&i) {
            // A belief that already lapsed is a new one.
            Some((_, end)) if *end >= now => *end = end.max(until),
            _ => {
                if let Some((start, end)) = inner.open.remove(&i) {
                    inner.beliefs.push(Belief {
                        unit: i,
                        start,
                        end,
                    });
                }
                inner.open.insert(i, (now, until));
                if let Some((crashed_at, crashed)) = inner.pending_failover
                    && crashed != i
                {
                    inner.failovers.push(now - crashed_at);
                    inner.pending_failover = None;
                }
            }
        }
    }

    /// `unit` no longer believes it leads.
    pub(crate) fn disbelieve(&self, unit: &str) {
        let now = self.secs(Instant::now());
        let mut inner = self.lock();
        let i = Self::index(&inner, unit);
        if let Some((start, end)) = inner.open.remove(&i) {
            inner.beliefs.push(Belief {
                unit: i,
                start,
                end: end.min(now),
            });
        }
    }

    /// `unit` crashed (its agent and lease renewal stopped).
    pub(crate) fn crashed(&self, unit: &str) {
        let now = self.secs(Instant::now());
        self.disbelieve(unit);
        let mut inner = self.lock();
        let i = Self::index(&inner, unit);
        inner.crashes.push((now, i));
        inner.down.insert(i);
        inner.pending_failover = Some((now, i));
    }

    /// `unit` is back.
    pub(crate) fn restarted(&self, unit: &str) {
        let mut inner = self.lock();
        let i = Self::index(&inner, unit);
        inner.down.remove(&i);
    }

    /// The unit that believes it leads now, if any.
    pub(crate) fn believed_leader(&self) -> Option<String> {
        let now = self.secs(Instant::now());
        let inner = self.lock();
        inner
            .open
            .iter()
            .find(|(_, (_, end))| *end > now)
            .map(|(i, _)| inner.units[*i].clone())
    }

    /// A hook ended: whether it saw `is_leader == true`, whether a leader-only operation
    /// was then refused for leadership, whether it was interrupted, whether it failed.
    pub(crate) fn hook(&self, saw_leader: bool, refused: bool, interrupted: bool, failed: bool) {
        let mut inner = self.lock();
        inner.hooks_run += 1;
        inner.leader_hooks += u64::from(saw_leader);
        inner.inconsistent_hooks += u64::from(saw_leader && refused);
        inner.interrupted_hooks += u64::from(interrupted);
        inner.failed_hooks += u64::from(failed);
    }

    /// Closes every open belief and computes the report's measurements.
    pub(crate) fn finish(&self) -> Measurements {
        let now = self.secs(Instant::now());
        let mut inner = self.lock();
        let open: Vec<_> = std::mem::take(&mut inner.open).into_iter().collect();
        for (unit, (start, end)) in open {
            inner.beliefs.push(Belief {
                unit,
                start,
                end: end.min(now),
            });
        }
        let mut beliefs = inner.beliefs.clone();
        beliefs.retain(|b| b.end > b.start);
        beliefs.sort_by(|a, b| a.start.total_cmp(&b.start));
        // Split brain: two units' beliefs overlapping in time.
        let mut overlaps = 0u64;
        let mut latest_end: BTreeMap<usize, f64> = BTreeMap::new();
        for b in &beliefs {
            if latest_end
                .iter()
                .any(|(u, end)| *u != b.unit && *end > b.start)
            {
                overlaps += 1;
            }
            let e = latest_end.entry(b.unit).or_insert(b.end);
            *e = e.max(b.end);
        }
        // Leaderless time: the run minus the union of beliefs.
        let mut covered = 0.0;
        let mut cursor = 0.0f64;
        for b in &beliefs {
            let start = b.start.max(cursor);
            if b.end > start {
                covered += b.end - start;
                cursor = b.end;
            }
        }
        let mut failovers = inner.failovers.clone();
        failovers.sort_by(f64::total_cmp);
        Measurements {
            virtual_seconds: now,
            hooks_run: inner.hooks_run,
            leader_hooks: inner.leader_hooks,
            inconsistent_hooks: inner.inconsistent_hooks,
            interrupted_hooks: inner.interrupted_hooks,
            failed_hooks: inner.failed_hooks,
            overlapping_guarantees: overlaps,
            stale_commits_accepted: inner.stale_commits_accepted,
            commits_accepted: inner.commits_accepted,
            pod_spec_commits: inner.pod_spec_commits,
            pod_spec_revision: inner.last_revision,
            leadership_changes: inner.leadership_changes,
            spurious_leadership_changes: inner.spurious_changes,
            leaderless_seconds: (now - covered).max(0.0),
            crashes: inner.crashes.len() as u64,
            failover_seconds: failovers,
        }
    }
}

impl StoreObserver for Metrics {
    fn claim_granted(&self, app: &str, lease: &Lease, sent_at: Instant) {
        let sent = self.secs(sent_at);
        let now = self.secs(Instant::now());
        let mut inner = self.lock();
        let previous = inner
            .current
            .insert(app.to_string(), (lease.holder.clone(), lease.term));
        if let Some((holder, term)) = previous
            && term != lease.term
        {
            inner.leadership_changes += 1;
            let since = inner.last_grant.get(&holder).copied().unwrap_or(0.0);
            let i = Self::index(&inner, &holder);
            let crashed = inner.crashes.iter().any(|(at, u)| *u == i && *at >= since);
            let outage = self.plan.longest_outage_between(
                Duration::from_secs_f64(since),
                Duration::from_secs_f64(now),
                self.bridge,
            );
            if !crashed && outage < self.guarantee {
                inner.spurious_changes += 1;
            }
        }
        inner.last_grant.insert(lease.holder.clone(), sent);
    }

    fn commit_accepted(
        &self,
        _unit: &str,
        changes: &Changes,
        fence: Option<&Fence>,
        receipt: &CommitReceipt,
    ) {
        let mut inner = self.lock();
        inner.commits_accepted += 1;
        inner.pod_spec_commits += u64::from(changes.pod_spec.is_some());
        if let Some(revision) = receipt.pod_spec_revision {
            inner.last_revision = inner.last_revision.max(revision);
        }
        if let Some(f) = fence {
            let max = inner.max_term.entry(f.app.clone()).or_insert(0);
            if f.term < *max {
                inner.stale_commits_accepted += 1;
            } else {
                *max = f.term;
            }
        }
    }
}

/// The measurements of one run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measurements {
    /// Simulated time, in seconds.
    pub virtual_seconds: f64,
    /// Hook attempts, retries included.
    pub hooks_run: u64,
    /// Hooks that saw `is_leader == true`.
    pub leader_hooks: u64,
    /// Hooks that saw `is_leader == true` and then had a leader-only operation refused for
    /// leadership (I2 broken).
    pub inconsistent_hooks: u64,
    /// Hooks the host stopped because the guarantee was ending with no renewal.
    pub interrupted_hooks: u64,
    /// Hooks that failed for any reason.
    pub failed_hooks: u64,
    /// Times a unit started believing it leads while another's belief still held (I3 broken).
    pub overlapping_guarantees: u64,
    /// Commits accepted with a term older than one already accepted (I3 broken).
    pub stale_commits_accepted: u64,
    /// Commits accepted.
    pub commits_accepted: u64,
    /// Accepted commits that carried a pod spec (each a new one).
    pub pod_spec_commits: u64,
    /// The pod spec's final revision: equal to `pod_spec_commits` when every commit applied
    /// whole and no failed hook applied anything (I4).
    pub pod_spec_revision: u64,
    /// Times the lease went to a new term.
    pub leadership_changes: u64,
    /// Changes with the old holder alive and no outage as long as the guarantee (I5 broken).
    pub spurious_leadership_changes: u64,
    /// Seconds in which no unit believed it leads.
    pub leaderless_seconds: f64,
    /// Leader crashes.
    pub crashes: u64,
    /// Seconds from each leader crash to a new leader, sorted.
    pub failover_seconds: Vec<f64>,
}
