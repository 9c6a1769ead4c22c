//! Leadership: each unit's agent keeps a background task claiming and renewing its
//! application's lease, so that no hook ever waits on the lease store.
//!
//! # Timing
//!
//! A lease is claimed for `lease_duration` (D). The holder's *guarantee* runs from the
//! instant taken just before the claim was sent, for D minus `drift_margin`: the store
//! started its own D later than that instant, so the holder's view always ends before the
//! store's, even if the two clocks run at slightly different rates. (Python ops records the
//! time before calling `is-leader` for the same reason; Chubby's lease handling and
//! Kleppmann's fencing-token analysis are the references.)
//!
//! The holder renews every `renew_interval`. A claim that gets no answer within
//! `request_timeout` is retried after a backoff (exponential, with jitter, capped at
//! `retry_period`). A store that does not answer is never read as "not leader": the leader
//! stays leader until its guarantee ends, and only a denial or that end deposes it. This is
//! exactly where Juju 2.9 went wrong: a timed-out renewal answered `is-leader` with false
//! while the lease was still held.
//!
//! The margin also buys outage tolerance. Say the last renewal was sent at `s` and the store
//! then stops answering for less than the guarantee G = D - margin. The outage started by
//! `s + renew_interval` and so ended before `s + renew_interval + G`; the holder's next claim
//! lands at most `request_timeout + retry_period` after that. As long as
//! `renew_interval + request_timeout + retry_period <= margin`, that is before the store's
//! lease (`s + D`) lapses, so no other unit can take over: an outage shorter than the
//! guarantee never moves leadership. (A hook may still be interrupted if no renewal
//! succeeded for a whole guarantee; it commits nothing and runs again.)
//!
//! Defaults follow Kubernetes' client-go leader election: a 15 s lease, a 10 s guarantee
//! (client-go's renew deadline, so a 5 s margin), renewal every 2 s (client-go's retry
//! period), 1 s request timeout and retry cap (2 + 1 + 1 <= 5). Followers do not poll:
//! they watch the lease ([`LeaseStore::lease_signal`]) and claim within a tenth of a retry
//! period of seeing it go. On etcd its key goes when the lease is released or lapses; the
//! memory and SQLite stores signal a release (SQLite's, from any process on the file) and
//! say in each denial when the lease ends, so a follower claims again then. A crashed
//! leader is replaced within D plus a tenth of a retry period (15.2 s). A store that cannot
//! watch leaves its followers polling every `retry_period`.
//! Juju grants 60 s and guarantees 30 s, which tolerates longer outages but fails over
//! four times more slowly; pass `--lease-duration 60 --drift-margin 30` for that trade.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};

use charm_model::holder_unit;
use charm_model::leadership::{
    ClaimAnswer, after_answer, after_guarantee_end, guarantee_end, term_guarantee,
};

use crate::charm::GuaranteeWatch;
use crate::metrics::{HostMetrics, LeaseMetrics};
use crate::store::{Claim, Fence, LeaseError, LeaseStore};

/// The lease timings. See the module documentation for how they relate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadershipConfig {
    /// How long a lease is claimed for.
    pub lease_duration: Duration,
    /// How often the holder renews it.
    pub renew_interval: Duration,
    /// The longest wait between retries after a store error, and between claims by a
    /// unit that was denied.
    pub retry_period: Duration,
    /// How much of the lease the holder does not count on: for clock drift, and for the
    /// renewal round trip after an outage (see the module documentation).
    pub drift_margin: Duration,
    /// How long one lease request may take before it counts as unanswered.
    pub request_timeout: Duration,
}

impl Default for LeadershipConfig {
    fn default() -> Self {
        LeadershipConfig {
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(2),
            retry_period: Duration::from_secs(1),
            drift_margin: Duration::from_secs(5),
            request_timeout: Duration::from_secs(1),
        }
    }
}

/// Why a leadership configuration is unsafe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeadershipConfigError {
    /// The drift margin eats the whole lease.
    #[error("drift margin {margin:?} must be shorter than the lease duration {lease:?}")]
    MarginTooLarge {
        /// The margin.
        margin: Duration,
        /// The lease duration.
        lease: Duration,
    },
    /// Renewal would come after the guarantee ends.
    #[error(
        "renew interval {renew:?} must be shorter than the guarantee {guarantee:?} (lease minus drift margin)"
    )]
    RenewTooLate {
        /// The renew interval.
        renew: Duration,
        /// The guarantee.
        guarantee: Duration,
    },
}

impl LeadershipConfig {
    /// How long a successful claim guarantees leadership, from the instant before it was sent.
    pub fn guarantee(&self) -> Duration {
        self.lease_duration.saturating_sub(self.drift_margin)
    }

    /// Whether an outage shorter than the guarantee can never move leadership: the
    /// renewal round trip after it fits in the margin.
    pub fn tolerates_outages_shorter_than_guarantee(&self) -> bool {
        self.renew_interval + self.request_timeout + self.retry_period <= self.drift_margin
    }

    /// Checks that the timings can keep a leader leading.
    pub fn validate(&self) -> Result<(), LeadershipConfigError> {
        if self.drift_margin >= self.lease_duration {
            return Err(LeadershipConfigError::MarginTooLarge {
                margin: self.drift_margin,
                lease: self.lease_duration,
            });
        }
        if self.renew_interval >= self.guarantee() {
            return Err(LeadershipConfigError::RenewTooLate {
                renew: self.renew_interval,
                guarantee: self.guarantee(),
            });
        }
        Ok(())
    }
}

/// What a unit knows of its application's leadership, on this host's clock.
pub type Leadership = charm_model::leadership::Leadership<Instant>;

/// A handle on a unit's leadership task.
pub struct LeadershipTracker {
    app: String,
    holder: String,
    rx: watch::Receiver<Leadership>,
    task: JoinHandle<()>,
}

impl LeadershipTracker {
    /// Starts claiming and renewing `app`'s lease for `holder` in the background: a unit's
    /// agent ([`charm_model::agent_holder`]), or a bare unit name. `seed` seeds the retry
    /// jitter, so that a simulation replays exactly.
    pub fn spawn(
        store: Arc<dyn LeaseStore>,
        app: &str,
        holder: &str,
        config: LeadershipConfig,
        seed: u64,
    ) -> Self {
        Self::start(store, app, holder, config, seed, None)
    }

    /// [`spawn`](Self::spawn), counting renewals and leadership changes in `metrics`, which
    /// also reads this tracker's view at each scrape.
    pub fn spawn_measured(
        store: Arc<dyn LeaseStore>,
        app: &str,
        holder: &str,
        config: LeadershipConfig,
        seed: u64,
        metrics: &HostMetrics,
    ) -> Self {
        Self::start(store, app, holder, config, seed, Some(metrics))
    }

    fn start(
        store: Arc<dyn LeaseStore>,
        app: &str,
        holder: &str,
        config: LeadershipConfig,
        seed: u64,
        metrics: Option<&HostMetrics>,
    ) -> Self {
        let (tx, rx) = watch::channel(Leadership::Unknown);
        let rng = StdRng::seed_from_u64(seed);
        let metrics = metrics.map(|m| m.lease(app, rx.clone()));
        let task = tokio::spawn(renew_loop(
            store,
            app.to_string(),
            holder.to_string(),
            config,
            tx,
            rng,
            metrics,
        ));
        LeadershipTracker {
            app: app.to_string(),
            holder: holder.to_string(),
            rx,
            task,
        }
    }

    /// A receiver of every change of this unit's leadership.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.rx.clone()
    }

    /// Whether [`pin`](Self::pin) would pin leadership now.
    pub fn can_pin(&self, min_remaining: Duration) -> bool {
        pinnable_term(&self.rx.borrow(), min_remaining).is_some()
    }

    /// The leadership to pin for a hook starting now: a fence if this unit leads with at
    /// least `min_remaining` of guarantee left, and the watch on that guarantee.
    pub fn pin(&self, min_remaining: Duration) -> Option<(Fence, Arc<dyn GuaranteeWatch>)> {
        let term = pinnable_term(&self.rx.borrow(), min_remaining)?;
        let fence = Fence {
            app: self.app.clone(),
            holder: self.holder.clone(),
            term,
        };
        let watch = Arc::new(TermGuarantee {
            rx: self.rx.clone(),
            term,
        });
        Some((fence, watch))
    }

    /// When this unit leads with less than `min_remaining` of guarantee left, waits for
    /// the renewal, at most until the guarantee ends (when it gives leadership up);
    /// otherwise returns at once. A hook that starts just before a renewal is due then
    /// runs as the leader's rather than as a follower's.
    pub async fn renewed(&self, min_remaining: Duration) {
        let mut rx = self.rx.clone();
        let short = |l: &Leadership| match *l {
            Leadership::Leader {
                guarantee_until, ..
            } if pinnable_term(l, min_remaining).is_none() => Some(guarantee_until),
            _ => None,
        };
        let Some(deadline) = short(&rx.borrow_and_update()) else {
            return;
        };
        loop {
            match timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) if short(&rx.borrow_and_update()).is_some() => continue,
                _ => return,
            }
        }
    }

    /// Stops renewing (the lease then lapses after its duration, as when a host crashes).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for LeadershipTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The term a hook starting now may pin: this unit leads with more than `min_remaining` of
/// guarantee left.
fn pinnable_term(leadership: &Leadership, min_remaining: Duration) -> Option<u64> {
    charm_model::leadership::pinnable_term(leadership, Instant::now(), min_remaining)
}

/// The guarantee of one term: ends if the unit loses or changes term.
struct TermGuarantee {
    rx: watch::Receiver<Leadership>,
    term: u64,
}

impl GuaranteeWatch for TermGuarantee {
    fn valid_until(&self) -> Option<Instant> {
        term_guarantee(&self.rx.borrow(), self.term)
    }
}

/// Backoff after `failures` consecutive store errors: exponential from an eighth of the
/// retry period, capped at it, with jitter so that units do not retry in lockstep.
fn backoff(config: &LeadershipConfig, failures: u32, rng: &mut StdRng) -> Duration {
    let base = config.retry_period / 8;
    let exp = base
        .saturating_mul(1 << failures.min(16))
        .min(config.retry_period);
    let jitter = rng.random_range(0.5..=1.0);
    exp.mul_f64(jitter)
}

async fn renew_loop(
    store: Arc<dyn LeaseStore>,
    app: String,
    holder: String,
    config: LeadershipConfig,
    tx: watch::Sender<Leadership>,
    mut rng: StdRng,
    metrics: Option<LeaseMetrics>,
) {
    let unit = holder_unit(&holder).to_string();
    let mut failures = 0u32;
    // Where the store watches leases, a follower waits for the lease to go instead of
    // polling for it, with one claim a lease's length apart in case a wake-up is lost.
    let mut gone = store.clone().lease_signal(&app);
    loop {
        if let Some(gone) = &mut gone {
            // Seen as of this claim: a lease that goes from now on wakes the wait below.
            gone.borrow_and_update();
        }
        let sent_at = Instant::now();
        let answer = match timeout(
            config.request_timeout,
            store.claim(&app, &holder, config.lease_duration),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => Err(LeaseError::Unavailable(format!(
                "no answer within {:?}",
                config.request_timeout
            ))),
        };
        let now = Instant::now();
        // The transition itself is the shared rule; here only logging and the next claim.
        let (answer, guarantee, next) = match answer {
            Ok(Claim::Held(lease)) => {
                failures = 0;
                let was_leader =
                    matches!(*tx.borrow(), Leadership::Leader { term, .. } if term == lease.term);
                if !was_leader {
                    tracing::info!(%unit, term = lease.term, "became leader of {app}");
                }
                if let Some(m) = &metrics {
                    if was_leader {
                        m.renewed();
                    } else {
                        m.leadership_changed();
                    }
                }
                let guarantee = lease.duration.saturating_sub(config.drift_margin);
                let held = ClaimAnswer::Held { term: lease.term };
                (held, guarantee, sent_at + config.renew_interval)
            }
            Ok(Claim::Denied {
                holder, expires_in, ..
            }) => {
                failures = 0;
                if matches!(*tx.borrow(), Leadership::Leader { .. }) {
                    tracing::warn!(%unit, "deposed: {holder} holds the lease of {app}");
                    if let Some(m) = &metrics {
                        m.renewal_failed();
                        m.leadership_changed();
                    }
                }
                let next = match (&gone, expires_in) {
                    // Claim when the lease ends (the store answered before `now`, so not
                    // before), spread a little so the followers of one host do not all
                    // claim at the same instant. A release wakes the wait below sooner.
                    (Some(_), Some(left)) => {
                        let spread =
                            (config.retry_period / 10).mul_f64(rng.random_range(0.0..=1.0));
                        now + (left + spread).min(config.lease_duration)
                    }
                    // The store signals a lapse too: one claim a lease's length apart in
                    // case a wake-up is lost.
                    (Some(_), None) => {
                        now + config.lease_duration.mul_f64(rng.random_range(0.75..=1.0))
                    }
                    (None, _) => now + config.retry_period.mul_f64(rng.random_range(0.75..=1.0)),
                };
                (ClaimAnswer::Denied { holder }, Duration::ZERO, next)
            }
            Err(LeaseError::Unavailable(why)) => {
                failures += 1;
                // Not an answer: leadership stays as it is until its guarantee ends.
                tracing::debug!(%unit, failures, "lease store unavailable: {why}");
                if let Some(m) = &metrics
                    && matches!(*tx.borrow(), Leadership::Leader { .. })
                {
                    m.renewal_failed();
                }
                let next = now + backoff(&config, failures, &mut rng);
                (ClaimAnswer::Unavailable, Duration::ZERO, next)
            }
        };
        let denied = matches!(answer, ClaimAnswer::Denied { .. });
        tx.send_if_modified(|l| {
            let new = after_answer(l, answer, sent_at, guarantee);
            let changed = *l != new;
            *l = new;
            changed
        });
        // Sleep until the next claim, waking at the guarantee's end to give leadership up
        // if no renewal arrived in time.
        let guarantee_end = guarantee_end(&tx.borrow());
        match guarantee_end {
            Some(end) if end <= next => {
                sleep_until(end).await;
                tracing::warn!(%unit, "leadership guarantee of {app} ended with no renewal");
                let ended = tx.send_if_modified(|l| match after_guarantee_end(l, Instant::now()) {
                    Some(ended) => {
                        *l = ended;
                        true
                    }
                    None => false,
                });
                if ended && let Some(m) = &metrics {
                    m.leadership_changed();
                }
                sleep_until(next).await;
            }
            _ => match &mut gone {
                Some(gone) if denied => {
                    tokio::select! {
                        _ = sleep_until(next) => {}
                        changed = gone.changed() => {
                            if changed.is_ok() {
                                // Followers on every host hear it at once: spread their
                                // claims a little, so most find the new holder's key.
                                let spread = config.retry_period / 10;
                                sleep(spread.mul_f64(rng.random_range(0.0..=1.0))).await;
                            } else {
                                sleep_until(next).await;
                            }
                        }
                    }
                }
                _ => sleep_until(next).await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::faults::{FaultPlan, FaultyStore};
    use crate::store::{LeaseStore, MemoryStore};

    /// The defaults: a 15 s lease, a 10 s guarantee, renewed every 2 s.
    fn config() -> LeadershipConfig {
        LeadershipConfig::default()
    }

    async fn leading(tracker: &LeadershipTracker) {
        let mut rx = tracker.subscribe();
        rx.wait_for(|l| matches!(l, Leadership::Leader { .. }))
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewal_is_due_waits_for_it_and_then_pins() {
        let store = Arc::new(MemoryStore::new("test"));
        let tracker = LeadershipTracker::spawn(store, "app", "app/0", config(), 1);
        leading(&tracker).await;
        // 10 s of guarantee; 1.5 s on, 8.5 s are left, short of the 9 s asked for.
        let wanted = Duration::from_secs(9);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(tracker.pin(wanted).is_none());
        let before = Instant::now();
        tracker.renewed(wanted).await;
        // The renewal at 2 s gave a fresh 10 s: the wait ended there, not at the deadline.
        assert_eq!(before.elapsed(), Duration::from_millis(500));
        assert!(tracker.pin(wanted).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_measured_tracker_counts_its_renewals_and_shows_its_guarantee() {
        let metrics = crate::metrics::HostMetrics::new();
        let store = Arc::new(MemoryStore::new("test"));
        let tracker =
            LeadershipTracker::spawn_measured(store, "app", "app/0", config(), 1, &metrics);
        leading(&tracker).await;
        // Renewals every 2 s: at 2, 4 and 6 s; the last one left 10 s - 1 s of guarantee.
        tokio::time::sleep(Duration::from_secs(7)).await;
        let text = metrics.encode();
        for line in [
            r#"charm_host_lease_held{application="app"} 1.0"#,
            r#"charm_host_lease_term{application="app"} 1.0"#,
            r#"charm_host_lease_guarantee_remaining_seconds{application="app"} 9.0"#,
            r#"charm_host_lease_renewals_total{application="app"} 3"#,
            r#"charm_host_lease_renewal_failures_total{application="app"} 0"#,
            r#"charm_host_leadership_changes_total{application="app"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        // A tracker that ended is no longer shown.
        drop(tracker);
        tokio::task::yield_now().await;
        assert!(!metrics.encode().contains("charm_host_lease_held{"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_with_room_or_a_follower_does_not_wait() {
        let store: Arc<MemoryStore> = Arc::new(MemoryStore::new("test"));
        let leader = LeadershipTracker::spawn(store.clone(), "app", "app/0", config(), 1);
        leading(&leader).await;
        let follower = LeadershipTracker::spawn(store, "app", "app/1", config(), 2);
        let mut rx = follower.subscribe();
        rx.wait_for(|l| matches!(l, Leadership::Follower { .. }))
            .await
            .unwrap();
        let before = Instant::now();
        leader.renewed(Duration::from_secs(1)).await;
        follower.renewed(Duration::from_secs(1)).await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    /// A lease store that counts the claims each unit sends.
    struct CountedClaims {
        inner: Arc<MemoryStore>,
        claims: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    }

    impl CountedClaims {
        fn new(inner: Arc<MemoryStore>) -> Arc<Self> {
            Arc::new(CountedClaims {
                inner,
                claims: Default::default(),
            })
        }

        fn claims(&self, holder: &str) -> u32 {
            self.claims
                .lock()
                .unwrap()
                .get(holder)
                .copied()
                .unwrap_or(0)
        }
    }

    impl LeaseStore for CountedClaims {
        fn claim<'a>(
            &'a self,
            app: &'a str,
            holder: &'a str,
            ttl: Duration,
        ) -> crate::store::LeaseFuture<'a, Claim> {
            *self
                .claims
                .lock()
                .unwrap()
                .entry(holder.to_string())
                .or_default() += 1;
            self.inner.claim(app, holder, ttl)
        }

        fn release<'a>(
            &'a self,
            app: &'a str,
            holder: &'a str,
        ) -> crate::store::LeaseFuture<'a, ()> {
            self.inner.release(app, holder)
        }

        fn leader<'a>(
            &'a self,
            app: &'a str,
        ) -> crate::store::LeaseFuture<'a, Option<crate::store::Lease>> {
            self.inner.leader(app)
        }

        fn lease_signal(self: Arc<Self>, app: &str) -> Option<watch::Receiver<u64>> {
            self.inner.clone().lease_signal(app)
        }
    }

    async fn became_leader(tracker: &LeadershipTracker) -> Instant {
        leading(tracker).await;
        Instant::now()
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_claims_when_a_crashed_leaders_lease_ends_and_does_not_poll() {
        let memory = Arc::new(MemoryStore::new("test"));
        let store = CountedClaims::new(memory.clone());
        let leader = LeadershipTracker::spawn(store.clone(), "app", "app/0", config(), 1);
        leading(&leader).await;
        let start = Instant::now();
        let follower = LeadershipTracker::spawn(store.clone(), "app", "app/1", config(), 2);
        // Renewals at 2, 4, ... s; the host dies at 5 s, so the lease (15 s) ends at 19 s.
        tokio::time::sleep(Duration::from_secs(5)).await;
        leader.stop();
        let took_over = became_leader(&follower).await - start;
        assert!(
            took_over >= Duration::from_secs(19)
                && took_over <= Duration::from_secs(19) + config().retry_period / 10,
            "the follower took over {took_over:?} after the start, the lease ended at 19 s"
        );
        // Denied at 0 s (the lease ends at 15 s), at 15 s (renewed at 4 s: ends at 19 s),
        // granted at 19 s. Polling every retry period would have sent ten.
        assert_eq!(store.claims("app/1"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_claims_as_soon_as_the_lease_is_released() {
        let memory = Arc::new(MemoryStore::new("test"));
        let leader = LeadershipTracker::spawn(memory.clone(), "app", "app/0", config(), 1);
        leading(&leader).await;
        let follower = LeadershipTracker::spawn(memory.clone(), "app", "app/1", config(), 2);
        let mut rx = follower.subscribe();
        rx.wait_for(|l| matches!(l, Leadership::Follower { .. }))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        leader.stop();
        memory.release("app", "app/0").await.unwrap();
        let released = Instant::now();
        let took_over = became_leader(&follower).await - released;
        assert!(
            took_over <= config().retry_period / 10,
            "the follower took over {took_over:?} after the release"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewal_never_comes_waits_until_its_guarantee_ends() {
        let store = Arc::new(FaultyStore::new(
            Arc::new(MemoryStore::new("test")),
            FaultPlan::none(1),
            None,
        ));
        let tracker = LeadershipTracker::spawn(store.clone(), "app", "app/0", config(), 1);
        leading(&tracker).await;
        let started = Instant::now();
        // No renewal will come: the guarantee, 10 s from the claim, is the wait's limit.
        store.set_unreachable(true);
        tracker.renewed(Duration::from_secs(11)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(tracker.pin(Duration::ZERO).is_none());
    }
}
