//! The leadership protocol as a model for exhaustive checking: units whose trackers claim
//! and renew one application's lease, pin leadership at hook start, run hooks under the
//! guarantee's deadline and commit with the fence, against a store holding the lease, the
//! hook queue, the leader data and the pod spec.
//!
//! Time is whole ticks. The store's clock is the true one; one unit's clock may run slow,
//! losing up to `max_drift` ticks (a fast clock only gives leadership up sooner; the units
//! are alike, so which one drifts is no matter). Until `faults_until`, every message
//! (claim, answer, commit, reply) may be delayed, and, within the fault budget, lost; the
//! store may answer a claim with a transient error; an agent may crash and restart. A claim
//! the store has not handled when its claimant stops waiting is never handled. From
//! `faults_until` on, messages arrive before the clock moves and crashed agents restart at
//! once, which is what the liveness property needs.
//!
//! Whatever the tracker and the commit decide, the model decides with the code the host
//! runs: `charm_model::leadership` for the tracker's view, its guarantee and pinning, and
//! `charm_model::Fence::admits` for the commit's fence. The model only adds the clock,
//! the network and the faults. A [`Variant`] other than [`Variant::Pinned`] swaps one
//! decision for a known mistake, so that a test can show the checker catches it.

use std::fmt;

use charm_model::leadership::{
    ClaimAnswer, Leadership, after_answer, after_guarantee_end, guarantee_end, hook_may_continue,
    pinnable_term, term_guarantee,
};
use charm_model::{Fence, LeaseHolder};
use stateright::{Model, Property};

/// The application whose leadership the units share.
const APP: &str = "discourse";

/// Whose protocol the model runs: this host's, or one with a known mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// This host: background renewal, answers pinned at hook start, guarantee counted from
    /// before the send, fenced commits, an unanswered claim is not a denial.
    Pinned,
    /// As Juju 2.9: `is_leader` is asked of the tracker at each call, waiting on a renewal
    /// in flight, and a leader-only write is checked again when the hook's writes flush.
    RenewInsideHook,
    /// The store applies a leader's commit without checking its fence.
    UnfencedCommit,
    /// The guarantee is counted from the instant the answer arrived.
    GuaranteeFromAnswer,
    /// A claim that got no answer makes the unit a follower, as Juju 2.9's tracker did.
    TimeoutIsNotLeader,
    /// An agent whose commit got no answer drops the hook from its own queue instead of
    /// retrying it: the store keeps it queued, and nothing runs it until the agent restarts.
    NoRetryAfterUnavailable,
}

/// Lease timings, in ticks. The defaults satisfy the host's own validation (renewal
/// before the guarantee ends) with a margin that covers the clock drift, and a request
/// timeout longer than the margin, so a guarantee counted from the answer would outlive
/// the lease.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// D: how long the store grants the lease for.
    pub lease: u8,
    /// How much of D the holder does not count on.
    pub drift_margin: u8,
    /// How often the holder renews.
    pub renew: u8,
    /// How long a claim may take before it counts as unanswered.
    pub request_timeout: u8,
    /// How long a denied or unanswered claimant waits before it claims again.
    pub retry: u8,
    /// How long before the guarantee ends a pinned hook stops.
    pub hook_margin: u8,
    /// The most ticks the slow unit's clock may lose against the store's.
    pub max_drift: u8,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease: 5,
            drift_margin: 1,
            renew: 2,
            request_timeout: 2,
            retry: 1,
            hook_margin: 1,
            max_drift: 1,
        }
    }
}

impl Timing {
    /// G: the holder's guarantee, D minus the margin.
    pub fn guarantee(&self) -> u8 {
        self.lease - self.drift_margin
    }

    /// The guarantee a hook needs left to start as leader (the agent's rule).
    pub fn min_remaining(&self) -> u8 {
        self.hook_margin * 2
    }
}

/// One configuration to check.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Whose protocol.
    pub variant: Variant,
    /// How many units the application has (each has one hook queued at the start).
    pub units: u8,
    /// The last tick explored.
    pub horizon: u8,
    /// No fault happens at or after this tick.
    pub faults_until: u8,
    /// How many faults (a lost message, a store error, a crash) one behaviour may have.
    pub fault_budget: u8,
    /// The timings.
    pub timing: Timing,
}

impl Protocol {
    /// 3 units, one fault, faults until tick 3 and the horizon at 6: small enough for
    /// every test run.
    pub fn bounded(variant: Variant) -> Self {
        Protocol {
            variant,
            units: 3,
            horizon: 6,
            faults_until: 3,
            fault_budget: 1,
            timing: Timing::default(),
        }
    }

    /// A larger configuration: faults until tick 4, the horizon at 7.
    pub fn larger(variant: Variant) -> Self {
        Protocol {
            horizon: 7,
            faults_until: 4,
            ..Protocol::bounded(variant)
        }
    }

    /// A configuration for finding counterexamples, which the breadth-first search stops
    /// at: two leases long, with delays and one fault all the way.
    pub fn for_counterexamples(variant: Variant) -> Self {
        Protocol {
            horizon: 10,
            faults_until: 10,
            fault_budget: 1,
            ..Protocol::bounded(variant)
        }
    }

    fn name(&self, unit: u8) -> String {
        format!("{APP}/{unit}")
    }
}

/// A hook being run by a unit's agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hook {
    /// The term pinned at the start: `is_leader` is true throughout iff `Some`.
    pub fence: Option<u64>,
    /// Whether an answer was true; whether one was false.
    pub saw: (bool, bool),
    /// Whether it buffered leader-only writes (leader data, pod spec).
    pub leader_writes: bool,
}

/// A commit on its way to the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommitRequest {
    /// The term of the fence, if the hook ran as leader.
    pub fence: Option<u64>,
    /// Whether it carries leader-only writes.
    pub leader_writes: bool,
    /// Whether the hook saw `is_leader` true.
    pub saw_leader: bool,
}

/// What the store answered to a commit, as the agent gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitReply {
    /// Applied (or applied already: the hook was no longer queued).
    Applied,
    /// Refused for leadership: the fence no longer held, or leader-only writes came
    /// with no fence.
    Fenced,
    /// No answer.
    Unavailable,
}

/// A unit: its agent, its tracker, and the messages it has in flight.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Unit {
    /// Whether its agent runs.
    pub up: bool,
    /// Ticks its clock has lost against the store's.
    pub lag: u8,
    /// Its tracker's view, on its own clock.
    pub view: Leadership<u8, u8>,
    /// When (its clock) the tracker claims next.
    pub next_claim: u8,
    /// When (its clock) it sent the claim it awaits.
    pub waiting: Option<u8>,
    /// A claim on its way to the store.
    pub request: bool,
    /// An answer on its way back.
    pub answer: Option<ClaimAnswer<u8>>,
    /// Whether the agent has a hook queued (loaded from the store when it starts).
    pub queued: bool,
    /// The hook running.
    pub hook: Option<Hook>,
    /// A commit on its way to the store.
    pub commit: Option<CommitRequest>,
    /// The store's reply on its way back.
    pub reply: Option<CommitReply>,
}

/// The store: the lease, the hook queue, the leader data and the pod spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Store {
    /// The lease: holder, term, expiry (store time).
    pub lease: Option<(u8, u64, u8)>,
    /// The last term granted.
    pub last_term: u64,
    /// Which units' hooks are still queued (bit per unit).
    pub queued: u8,
    /// The leader data: written by which unit, under which term.
    pub leader_data: Option<(u8, u64)>,
    /// The pod spec: written by which unit, under which term.
    pub pod_spec: Option<(u8, u64)>,
}

impl Store {
    fn live_lease(&self, now: u8) -> Option<(u8, u64, u8)> {
        self.lease.filter(|&(_, _, expiry)| now < expiry)
    }
}

/// What the properties need to know of the past (history variables).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// Bits of [`Broken`]: the invariants some step broke.
    pub broken: u8,
    /// The highest term of an accepted leader-only commit.
    pub max_accepted_term: u64,
    /// The unit whose leader-only commit was accepted for each term (index term - 1).
    pub writers: Vec<u8>,
    /// Hooks applied (bit per unit).
    pub applied: u8,
    /// Hooks whose commit the agent saw acknowledged (bit per unit).
    pub acked: u8,
    /// Faults left.
    pub faults_left: u8,
}

/// The invariants a step can break, as bits of [`History::broken`].
#[derive(Debug, Clone, Copy)]
pub enum Broken {
    /// I1: a hook got two answers.
    PinnedAnswer = 1,
    /// I2: a hook that saw `is_leader` true was refused for leadership while its
    /// guarantee held.
    Contradiction = 2,
    /// I3: a leader-only commit was accepted for a lease other than the live one, a term
    /// older than an accepted one, or a second writer of a term.
    SingleWriter = 4,
    /// I4: a hook's writes applied twice.
    AppliedTwice = 8,
    /// I5: something other than a denial or the guarantee's end deposed a leader.
    TransientLost = 16,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The store's clock.
    pub now: u8,
    /// The lowest unit that may still take a step touching only itself in this tick.
    pub turn: u8,
    /// The units.
    pub units: Vec<Unit>,
    /// The store.
    pub store: Store,
    /// History for the properties.
    pub history: History,
}

impl State {
    fn local(&self, u: u8) -> u8 {
        self.now - self.units[u as usize].lag
    }

    fn broken(&self, what: Broken) -> bool {
        self.history.broken & what as u8 != 0
    }
}

/// One step.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves on one tick.
    Tick,
    /// The clock moves on one tick, except the unit's, which runs slow.
    SlowTick(u8),
    /// The tracker sends a claim.
    Send(u8),
    /// The store handles the unit's claim.
    StoreClaim(u8),
    /// The store answers the unit's claim with a transient error.
    StoreUnavailable(u8),
    /// The answer reaches the tracker.
    Answer(u8),
    /// The tracker stops waiting for an answer.
    TimeOut(u8),
    /// The guarantee ends with no renewal.
    GuaranteeEnds(u8),
    /// The agent starts its queued hook, pinning leadership; the hook asks `is_leader`
    /// (and, told it leads, buffers leader data and a pod spec).
    StartHook(u8),
    /// The hook asks `is_leader` again, ends, and the agent sends its commit.
    Finish(u8),
    /// The deadline tied to the guarantee interrupts the hook.
    Interrupt(u8),
    /// The store applies the unit's commit, or refuses it.
    StoreCommit(u8),
    /// The commit's reply reaches the agent.
    Reply(u8),
    /// A message to or from the unit is lost (claim, answer, commit or reply).
    Lose(u8, Message),
    /// The unit's agent crashes.
    Crash(u8),
    /// The unit's agent starts again.
    Restart(u8),
}

/// A message in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    /// A claim to the store.
    Claim,
    /// The claim's answer.
    Answer,
    /// A commit to the store.
    Commit,
    /// The commit's reply.
    Reply,
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::Tick => write!(f, "tick"),
            Action::SlowTick(u) => write!(f, "tick, but u{u}'s clock stays"),
            Action::Send(u) => write!(f, "u{u}: sends a claim"),
            Action::StoreClaim(u) => write!(f, "u{u}: store handles the claim"),
            Action::StoreUnavailable(u) => write!(f, "u{u}: store answers unavailable"),
            Action::Answer(u) => write!(f, "u{u}: gets the answer"),
            Action::TimeOut(u) => write!(f, "u{u}: claim times out"),
            Action::GuaranteeEnds(u) => write!(f, "u{u}: guarantee ends"),
            Action::StartHook(u) => write!(f, "u{u}: hook starts, asks is_leader"),
            Action::Finish(u) => write!(f, "u{u}: hook asks is_leader, ends, sends its commit"),
            Action::Interrupt(u) => write!(f, "u{u}: hook interrupted"),
            Action::StoreCommit(u) => write!(f, "u{u}: store handles the commit"),
            Action::Reply(u) => write!(f, "u{u}: gets the commit's reply"),
            Action::Lose(u, m) => write!(f, "u{u}: {m:?} lost"),
            Action::Crash(u) => write!(f, "u{u}: agent crashes"),
            Action::Restart(u) => write!(f, "u{u}: agent restarts"),
        }
    }
}

impl Protocol {
    fn faults_allowed(&self, s: &State) -> bool {
        s.now < self.faults_until && s.history.faults_left > 0
    }

    fn calm(&self, s: &State) -> bool {
        s.now >= self.faults_until
    }

    /// The answer `is_leader` gives in the unit's running hook now.
    fn is_leader_answer(&self, s: &State, u: u8, hook: &Hook) -> bool {
        match self.variant {
            Variant::RenewInsideHook => {
                let unit = &s.units[u as usize];
                guarantee_end(&unit.view).is_some_and(|end| s.local(u) < end)
            }
            _ => hook.fence.is_some(),
        }
    }

    /// The step that must happen now, if any: it runs alone, before any choice.
    ///
    /// These steps happen at a fixed instant and touch only their own unit (a claim due,
    /// a timeout, the guarantee's end, the deadline's interruption, a reply arriving), so
    /// running them first in a fixed order loses no behaviour: every decision and every
    /// property compares instants strictly. Once faults stop, every step runs this way, in
    /// a fixed order, so time moves only when the system has nothing left to do.
    fn eager(&self, s: &State) -> Option<Action> {
        let calm = self.calm(s);
        for u in 0..self.units {
            let unit = &s.units[u as usize];
            let local = s.local(u);
            if !unit.up {
                if calm {
                    return Some(Action::Restart(u));
                }
                continue;
            }
            if unit.waiting.is_none() && local >= unit.next_claim {
                return Some(Action::Send(u));
            }
            if let Some(sent) = unit.waiting
                && local >= sent + self.timing.request_timeout
            {
                return Some(Action::TimeOut(u));
            }
            if after_guarantee_end(&unit.view, local).is_some() {
                return Some(Action::GuaranteeEnds(u));
            }
            if let Some(hook) = &unit.hook
                && let Some(term) = hook.fence
                && !hook_may_continue(
                    term_guarantee(&unit.view, term),
                    local,
                    self.timing.hook_margin,
                )
            {
                return Some(Action::Interrupt(u));
            }
            if unit.reply.is_some() {
                return Some(Action::Reply(u));
            }
            // An idle agent runs its next hook at once, once its tracker has an answer
            // (before that, the host waits a little for one: see `choices`).
            if self.may_start_hook(unit) && unit.view != Leadership::Unknown && u >= s.turn {
                return Some(Action::StartHook(u));
            }
            if calm {
                let mut steps = Vec::new();
                self.choices(s, u, &mut steps);
                if let Some(step) = steps.first() {
                    return Some(*step);
                }
            }
        }
        None
    }

    /// The unit's steps whose timing is free before faults stop: the store handling its
    /// messages, the answer arriving, and its hook starting and ending.
    fn choices(&self, s: &State, u: u8, out: &mut Vec<Action>) {
        let unit = &s.units[u as usize];
        if unit.request {
            out.push(Action::StoreClaim(u));
        }
        if unit.commit.is_some() {
            out.push(Action::StoreCommit(u));
        }
        // Steps that touch only this unit commute with other units' steps: within a tick
        // they run in the units' order (see `State::turn`).
        if u < s.turn {
            return;
        }
        if unit.answer.is_some() && unit.waiting.is_some() {
            out.push(Action::Answer(u));
        }
        match &unit.hook {
            None if self.may_start_hook(unit) => out.push(Action::StartHook(u)),
            // Juju 2.9's `is-leader` waits on a renewal in flight.
            Some(_) if self.variant == Variant::RenewInsideHook && unit.waiting.is_some() => {}
            Some(_) => out.push(Action::Finish(u)),
            None => {}
        }
    }

    fn may_start_hook(&self, unit: &Unit) -> bool {
        unit.up
            && unit.hook.is_none()
            && unit.queued
            && unit.commit.is_none()
            && unit.reply.is_none()
    }

    fn ask_is_leader(&self, s: &mut State, u: u8, hook: &mut Hook) {
        if self.is_leader_answer(s, u, hook) {
            hook.saw.0 = true;
        } else {
            hook.saw.1 = true;
        }
        if hook.saw.0 && hook.saw.1 {
            s.history.broken |= Broken::PinnedAnswer as u8;
        }
    }

    fn set_view(&self, s: &mut State, u: u8, view: Leadership<u8, u8>, denied: bool) {
        let local = s.local(u);
        let unit = &mut s.units[u as usize];
        let held = guarantee_end(&unit.view).is_some_and(|end| local < end);
        let still = matches!(
            (&unit.view, &view),
            (Leadership::Leader { term: a, .. }, Leadership::Leader { term: b, .. }) if a == b
        );
        if held && !still && !denied {
            s.history.broken |= Broken::TransientLost as u8;
        }
        s.units[u as usize].view = view;
    }

    fn store_claim(&self, s: &mut State, u: u8) {
        let now = s.now;
        let answer = match s.store.live_lease(now) {
            Some((holder, _, _)) if holder != u => ClaimAnswer::Denied { holder },
            Some((holder, term, _)) => {
                s.store.lease = Some((holder, term, now + self.timing.lease));
                ClaimAnswer::Held { term }
            }
            None => {
                s.store.last_term += 1;
                let term = s.store.last_term;
                s.store.lease = Some((u, term, now + self.timing.lease));
                ClaimAnswer::Held { term }
            }
        };
        let unit = &mut s.units[u as usize];
        unit.request = false;
        // Only an agent waiting for it reads it; an orphan claim's answer goes nowhere.
        unit.answer = unit.waiting.is_some().then_some(answer);
    }

    fn answer(&self, s: &mut State, u: u8, answer: ClaimAnswer<u8>) {
        // The store handles a claim within the request timeout or not at all.
        s.units[u as usize].request = false;
        let local = s.local(u);
        let t = self.timing;
        let unit = &s.units[u as usize];
        let sent = unit.waiting.expect("an answer is read only while waiting");
        let sent_at = match self.variant {
            Variant::GuaranteeFromAnswer => local,
            _ => sent,
        };
        let denied = matches!(answer, ClaimAnswer::Denied { .. });
        let (view, next) = match answer {
            ClaimAnswer::Held { .. } => (
                after_answer(&unit.view, answer, sent_at, t.guarantee()),
                sent + t.renew,
            ),
            ClaimAnswer::Denied { .. } => (
                after_answer(&unit.view, answer, sent_at, 0),
                local + t.retry,
            ),
            ClaimAnswer::Unavailable => {
                let view = match self.variant {
                    Variant::TimeoutIsNotLeader => Leadership::Follower { leader: None },
                    _ => after_answer(&unit.view, answer, sent_at, 0),
                };
                (view, local + t.retry)
            }
        };
        self.set_view(s, u, view, denied);
        let unit = &mut s.units[u as usize];
        unit.waiting = None;
        unit.answer = None;
        unit.next_claim = next;
    }

    fn store_commit(&self, s: &mut State, u: u8) {
        let now = s.now;
        let unit = &mut s.units[u as usize];
        let request = unit.commit.take().expect("a commit in flight");
        let live = s.store.live_lease(now);
        let fenced = match request.fence {
            // Leader-only writes with no fence are refused (`CommitError::Unfenced`).
            None => request.leader_writes,
            Some(term) if self.variant != Variant::UnfencedCommit => {
                let fence = Fence {
                    app: APP.into(),
                    holder: self.name(u),
                    term,
                };
                let lease = live.map(|(holder, term, _)| LeaseHolder {
                    holder: self.name(holder),
                    term,
                });
                !fence.admits(&self.name(u), lease.as_ref())
            }
            Some(_) => false,
        };
        let bit = 1u8 << u;
        let reply = if fenced {
            // Refused for leadership: a contradiction if the hook saw `is_leader` true and
            // its unit still holds the guarantee of that term.
            let local = s.local(u);
            let unit = &s.units[u as usize];
            let holds = match request.fence {
                Some(term) => {
                    unit.up && term_guarantee(&unit.view, term).is_some_and(|end| local < end)
                }
                None => true,
            };
            if request.saw_leader && holds {
                s.history.broken |= Broken::Contradiction as u8;
            }
            CommitReply::Fenced
        } else if s.store.queued & bit == 0 {
            // Applied already, by the run a crash or a lost reply interrupted.
            CommitReply::Applied
        } else {
            s.store.queued &= !bit;
            if s.history.applied & bit != 0 {
                s.history.broken |= Broken::AppliedTwice as u8;
            }
            s.history.applied |= bit;
            if request.leader_writes {
                let term = request.fence.expect("leader-only writes come with a fence");
                let current = live.is_some_and(|(holder, t, _)| holder == u && t == term);
                let idx = (term - 1) as usize;
                let h = &mut s.history;
                if h.writers.len() <= idx {
                    h.writers.resize(idx + 1, u8::MAX);
                }
                let other_writer = h.writers[idx] != u8::MAX && h.writers[idx] != u;
                if !current || term < h.max_accepted_term || other_writer {
                    h.broken |= Broken::SingleWriter as u8;
                }
                h.writers[idx] = u;
                h.max_accepted_term = h.max_accepted_term.max(term);
                // One step: both writes or neither.
                s.store.leader_data = Some((u, term));
                s.store.pod_spec = Some((u, term));
            }
            CommitReply::Applied
        };
        let unit = &mut s.units[u as usize];
        // A crashed agent is not there to hear it.
        if unit.up {
            unit.reply = Some(reply);
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let unit = Unit {
            up: true,
            lag: 0,
            view: Leadership::Unknown,
            next_claim: 0,
            waiting: None,
            request: false,
            answer: None,
            queued: true,
            hook: None,
            commit: None,
            reply: None,
        };
        vec![State {
            now: 0,
            turn: 0,
            units: vec![unit; self.units as usize],
            store: Store {
                lease: None,
                last_term: 0,
                queued: (1u8 << self.units) - 1,
                leader_data: None,
                pod_spec: None,
            },
            history: History {
                faults_left: self.fault_budget,
                ..History::default()
            },
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if let Some(step) = self.eager(s) {
            out.push(step);
            return;
        }
        if self.calm(s) {
            if s.now < self.horizon {
                out.push(Action::Tick);
            }
            return;
        }
        for u in 0..self.units {
            let unit = &s.units[u as usize];
            if !unit.up {
                out.push(Action::Restart(u));
                continue;
            }
            self.choices(s, u, out);
            if self.faults_allowed(s) {
                if unit.request && unit.waiting.is_some() {
                    // "lease operation timed out": the store answers, but not with a lease.
                    out.push(Action::StoreUnavailable(u));
                }
                if unit.request {
                    out.push(Action::Lose(u, Message::Claim));
                }
                if unit.answer.is_some() {
                    out.push(Action::Lose(u, Message::Answer));
                }
                if unit.commit.is_some() {
                    out.push(Action::Lose(u, Message::Commit));
                }
                if matches!(unit.reply, Some(r) if r != CommitReply::Unavailable) {
                    out.push(Action::Lose(u, Message::Reply));
                }
                out.push(Action::Crash(u));
            }
        }
        if s.now < self.horizon {
            out.push(Action::Tick);
            // One unit's clock may run slow; which one is no matter, as the units are
            // alike and any of them may come to lead.
            if s.units[0].lag < self.timing.max_drift {
                out.push(Action::SlowTick(0));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let t = self.timing;
        match action {
            Action::Tick => {
                s.now += 1;
                s.turn = 0;
            }
            Action::SlowTick(u) => {
                s.now += 1;
                s.turn = 0;
                s.units[u as usize].lag += 1;
            }
            Action::Send(u) => {
                let local = s.local(u);
                let unit = &mut s.units[u as usize];
                unit.waiting = Some(local);
                unit.request = true;
                unit.answer = None;
            }
            Action::StoreClaim(u) => self.store_claim(&mut s, u),
            Action::StoreUnavailable(u) => {
                s.history.faults_left -= 1;
                let unit = &mut s.units[u as usize];
                unit.request = false;
                unit.answer = Some(ClaimAnswer::Unavailable);
            }
            Action::Answer(u) => {
                s.turn = u;
                let answer = s.units[u as usize].answer.clone()?;
                self.answer(&mut s, u, answer);
            }
            Action::TimeOut(u) => self.answer(&mut s, u, ClaimAnswer::Unavailable),
            Action::GuaranteeEnds(u) => {
                let local = s.local(u);
                let ended = after_guarantee_end(&s.units[u as usize].view, local)?;
                self.set_view(&mut s, u, ended, false);
            }
            Action::StartHook(u) => {
                s.turn = u;
                let local = s.local(u);
                let unit = &s.units[u as usize];
                let fence = pinnable_term(&unit.view, local, t.min_remaining());
                let mut hook = Hook {
                    fence,
                    saw: (false, false),
                    leader_writes: false,
                };
                // The charm asks first thing; told it leads, it buffers leader data and
                // a pod spec.
                self.ask_is_leader(&mut s, u, &mut hook);
                hook.leader_writes = hook.saw.0;
                s.units[u as usize].hook = Some(hook);
            }
            Action::Finish(u) => {
                s.turn = u;
                let mut hook = s.units[u as usize].hook.take()?;
                // It asks again before setting the pod spec, as Python ops does.
                self.ask_is_leader(&mut s, u, &mut hook);
                let local = s.local(u);
                let unit = &s.units[u as usize];
                // Juju 2.9 checks leadership again when the pod spec flushes.
                let refused = self.variant == Variant::RenewInsideHook
                    && hook.leader_writes
                    && !self.is_leader_answer(&s, u, &hook);
                if refused {
                    if hook.saw.0 {
                        s.history.broken |= Broken::Contradiction as u8;
                    }
                    return Some(s);
                }
                // The agent's check before the commit: the epoch deadline's rule.
                let expired = hook.fence.is_some_and(|term| {
                    !hook_may_continue(term_guarantee(&unit.view, term), local, t.hook_margin)
                });
                if !expired {
                    s.units[u as usize].commit = Some(CommitRequest {
                        fence: hook.fence,
                        leader_writes: hook.leader_writes,
                        saw_leader: hook.saw.0,
                    });
                }
            }
            Action::Interrupt(u) => s.units[u as usize].hook = None,
            Action::StoreCommit(u) => self.store_commit(&mut s, u),
            Action::Reply(u) => {
                let unit = &mut s.units[u as usize];
                match unit.reply.take()? {
                    CommitReply::Applied => {
                        unit.queued = false;
                        s.history.acked |= 1 << u;
                    }
                    CommitReply::Unavailable
                        if self.variant == Variant::NoRetryAfterUnavailable =>
                    {
                        unit.queued = false;
                    }
                    _ => {}
                }
            }
            Action::Lose(u, message) => {
                s.history.faults_left -= 1;
                let unit = &mut s.units[u as usize];
                match message {
                    Message::Claim => unit.request = false,
                    Message::Answer => unit.answer = None,
                    // The agent hears of it as a store that did not answer.
                    Message::Commit => {
                        unit.commit = None;
                        unit.reply = Some(CommitReply::Unavailable);
                    }
                    Message::Reply => unit.reply = Some(CommitReply::Unavailable),
                }
            }
            Action::Crash(u) => {
                s.history.faults_left -= 1;
                let unit = &mut s.units[u as usize];
                // What was sent is still in flight; what the agent held is gone.
                unit.up = false;
                unit.view = Leadership::Unknown;
                unit.waiting = None;
                unit.answer = None;
                unit.hook = None;
                unit.reply = None;
                unit.queued = false;
            }
            Action::Restart(u) => {
                let local = s.local(u);
                let queued = s.store.queued & (1 << u) != 0;
                let unit = &mut s.units[u as usize];
                unit.up = true;
                unit.next_claim = local;
                unit.queued = queued;
            }
        }
        Some(s)
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.now <= self.horizon
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("I1 pinned answer", |_, s: &State| {
                !s.broken(Broken::PinnedAnswer)
            }),
            Property::always("I2 no contradiction", |_, s: &State| {
                !s.broken(Broken::Contradiction)
            }),
            Property::always("I3 guarantee within the lease", |_, s: &State| {
                guarantees_within_lease(s)
            }),
            Property::always("I3 single writer per term", |_, s: &State| {
                !s.broken(Broken::SingleWriter)
            }),
            Property::always("I4 all or nothing", |_, s: &State| {
                s.store.leader_data == s.store.pod_spec && !s.broken(Broken::AppliedTwice)
            }),
            Property::always("I5 transient is not lost", |_, s: &State| {
                !s.broken(Broken::TransientLost)
            }),
            Property::always("I6 durable", |_, s: &State| {
                s.history.acked & !s.history.applied == 0 && s.history.applied & s.store.queued == 0
            }),
            Property::eventually(
                "once faults stop, a unit leads and the hooks run",
                |m: &Protocol, s: &State| {
                    s.now >= m.faults_until && s.store.queued == 0 && some_unit_leads(s)
                },
            ),
            Property::sometimes("a leader's hook commits the pod spec", |_, s: &State| {
                s.store.pod_spec.is_some()
            }),
            Property::sometimes("leadership moves to another unit", |_, s: &State| {
                s.store.last_term >= 2
            }),
            Property::sometimes("a commit is refused by its fence", |_, s: &State| {
                s.units.iter().any(|u| u.reply == Some(CommitReply::Fenced))
            }),
        ]
    }
}

/// Every unit that holds a guarantee holds the store's live lease with that term: the
/// holder's view never outlives the store's, so no two units believe at once.
fn guarantees_within_lease(s: &State) -> bool {
    (0..s.units.len() as u8).all(|u| {
        let unit = &s.units[u as usize];
        match unit.view {
            Leadership::Leader {
                term,
                guarantee_until,
            } if unit.up && s.local(u) < guarantee_until => s
                .store
                .live_lease(s.now)
                .is_some_and(|(holder, t, _)| holder == u && t == term),
            _ => true,
        }
    })
}

fn some_unit_leads(s: &State) -> bool {
    (0..s.units.len() as u8).any(|u| {
        let unit = &s.units[u as usize];
        unit.up && guarantee_end(&unit.view).is_some_and(|end| s.local(u) < end)
    })
}
