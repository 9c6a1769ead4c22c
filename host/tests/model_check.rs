//! The leadership protocol, checked exhaustively: every interleaving of 3 units' claims,
//! renewals, hooks and commits, with lost and delayed messages, crashes and restarts and
//! clock drift, up to a bound (see `model_check/protocol.rs` for the model).
//!
//! The bounded configuration runs with every test run. The larger one takes longer:
//!
//! ```text
//! cargo test --release -p charm-host --test model_check -- --ignored --nocapture
//! ```
//!
//! Each known mistake (Juju 2.9's renewal inside the hook, a commit without the fence, a
//! guarantee counted from the answer, a timeout read as "not leader", a hook not retried
//! after a commit that got no answer) is a variant of the model, and a test shows the
//! checker finds a counterexample to the property it breaks: the safety invariants, and
//! liveness.

#[path = "model_check/protocol.rs"]
mod protocol;

use std::collections::BTreeSet;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

use protocol::{Action, Protocol, Variant};

/// The properties that must hold (the rest are examples the checker must find).
const INVARIANTS: [&str; 8] = [
    "I1 pinned answer",
    "I2 no contradiction",
    "I3 guarantee within the lease",
    "I3 single writer per term",
    "I4 all or nothing",
    "I5 transient is not lost",
    "I6 durable",
    "once faults stop, a unit leads and the hooks run",
];

/// Behaviours that must be reachable, so that the invariants do not hold vacuously.
const EXAMPLES: [&str; 2] = [
    "a leader's hook commits the pod spec",
    "leadership moves to another unit",
];

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Checks `protocol` exhaustively and asserts every invariant and example.
fn check_exhaustively(protocol: Protocol) {
    let started = Instant::now();
    let checker = protocol
        .clone()
        .checker()
        .threads(threads())
        .spawn_bfs()
        .join();
    let elapsed = started.elapsed();
    eprintln!(
        "{protocol:?}: {} states ({} unique), depth {}, in {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        elapsed.as_secs_f64()
    );
    for name in INVARIANTS {
        if let Some(path) = checker.discovery(name) {
            panic!(
                "{name} is broken:\n{}",
                trace(&protocol, path.into_actions())
            );
        }
    }
    for name in EXAMPLES {
        assert!(
            checker.discovery(name).is_some(),
            "no behaviour reaches {name:?}: the model lost its reach"
        );
    }
}

/// The counterexample the checker finds to `property` under `variant`, as the steps that
/// lead to it.
fn counterexample(variant: Variant, property: &'static str) -> Vec<Action> {
    discover(Protocol::for_counterexamples(variant), property)
}

/// The first behaviour the checker finds that reaches `property`: a counterexample to
/// an invariant, or an example of a behaviour.
fn discover(protocol: Protocol, property: &'static str) -> Vec<Action> {
    let variant = protocol.variant;
    let checker = protocol
        .clone()
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!(
            "{variant:?}: no counterexample to {property:?} in {} states",
            checker.unique_state_count()
        )
    });
    let actions = path.into_actions();
    eprintln!(
        "{variant:?} reaches {property:?}:\n{}",
        trace(&protocol, actions.clone())
    );
    actions
}

/// The steps of a behaviour, one a line, with the store's clock.
fn trace(protocol: &Protocol, actions: Vec<Action>) -> String {
    let mut state = protocol.init_states().remove(0);
    let mut lines = Vec::new();
    for action in actions {
        lines.push(format!("  t={:<2} {action:?}", state.now));
        state = protocol
            .next_state(&state, action)
            .expect("a step of the trace");
    }
    lines.join("\n")
}

#[test]
fn the_protocol_keeps_every_invariant_for_3_units() {
    check_exhaustively(Protocol::bounded(Variant::Pinned));
}

#[test]
#[ignore = "minutes: the larger configuration"]
fn the_protocol_keeps_every_invariant_for_3_units_with_more_faults_and_time() {
    check_exhaustively(Protocol::larger(Variant::Pinned));
}

#[test]
fn a_commit_that_reaches_the_store_after_the_lease_lapsed_is_refused_by_its_fence() {
    let protocol = Protocol::for_counterexamples(Variant::Pinned);
    let steps = discover(protocol.clone(), "a commit is refused by its fence");
    // On the way there, no invariant broke: the refused hook had stopped believing.
    let mut state = protocol.init_states().remove(0);
    for step in &steps {
        state = protocol
            .next_state(&state, *step)
            .expect("a step of the trace");
    }
    assert_eq!(state.history.broken, 0, "{steps:?}");
    assert!(
        matches!(steps.last(), Some(Action::StoreCommit(_))),
        "{steps:?}"
    );
}

#[test]
fn renewing_inside_the_hook_as_juju_29_does_changes_the_answer_mid_hook() {
    let steps = counterexample(Variant::RenewInsideHook, "I1 pinned answer");
    // The second answer, as the hook ends, differed from the first.
    assert!(matches!(steps.last(), Some(Action::Finish(_))), "{steps:?}");
    counterexample(Variant::RenewInsideHook, "I2 no contradiction");
}

#[test]
fn a_commit_without_the_fence_lets_a_deposed_leader_write() {
    let steps = counterexample(Variant::UnfencedCommit, "I3 single writer per term");
    // The stale commit lands after a lease changed hands.
    assert_eq!(steps.last(), Some(&steps_last_commit(&steps)), "{steps:?}");
}

fn steps_last_commit(steps: &[Action]) -> Action {
    *steps
        .iter()
        .rev()
        .find(|a| matches!(a, Action::StoreCommit(_)))
        .expect("a commit in the trace")
}

#[test]
fn a_guarantee_counted_from_the_answer_outlives_the_lease() {
    let steps = counterexample(
        Variant::GuaranteeFromAnswer,
        "I3 guarantee within the lease",
    );
    assert!(
        steps.iter().any(|a| matches!(a, Action::Answer(_))),
        "{steps:?}"
    );
}

#[test]
fn a_timeout_read_as_not_leader_deposes_a_leader_whose_guarantee_holds() {
    let steps = counterexample(Variant::TimeoutIsNotLeader, "I5 transient is not lost");
    assert!(
        steps
            .iter()
            .any(|a| matches!(a, Action::TimeOut(_) | Action::Lose(..))),
        "{steps:?}"
    );
}

/// Liveness can fail, and the checker sees it: an agent that drops a hook whose commit got
/// no answer, instead of retrying it, leaves it queued in the store for good once faults
/// stop. Every safety invariant still holds; only liveness breaks.
#[test]
fn a_hook_not_retried_after_an_unanswered_commit_never_runs() {
    // Liveness is judged at the horizon: the bounded configuration reaches it soonest.
    let steps = discover(
        Protocol::bounded(Variant::NoRetryAfterUnavailable),
        "once faults stop, a unit leads and the hooks run",
    );
    assert!(
        steps.iter().any(|s| matches!(
            s,
            Action::Lose(_, protocol::Message::Commit | protocol::Message::Reply)
        )),
        "the counterexample loses a commit or its reply: {steps:?}"
    );
}
