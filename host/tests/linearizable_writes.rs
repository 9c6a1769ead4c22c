//! The leader-only writes (leader data, pod spec) of simulated runs under faults, as their
//! callers saw them, are linearizable: some order of them, consistent with real time,
//! is a run of a fenced leader state in which accepted terms never go backwards and each
//! new pod spec takes the next revision. A commit that got no answer may or may not have
//! taken effect; the checker tries both.
//!
//! The sequential object is a stateright `SequentialSpec`; the search is Porcupine's
//! (Wing and Gong's, with Lowe's cache of visited configurations), since stateright's own
//! tester, without a cache, is exponential in the hundreds of overlapping commits a run
//! records.

use std::collections::HashSet;

use charm_host::sim::{self, Policy, Profile, SimConfig};
use charm_host::store::faults::WriteEvent;
use stateright::semantics::SequentialSpec;

/// The application's leader state as one sequential object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct LeaderState {
    /// The highest term a write was accepted with.
    term: u64,
    /// The pod spec's revision.
    revision: u64,
}

/// A hook's leader-only commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Write {
    term: Option<u64>,
    pod_spec: bool,
}

/// What the store answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Answer {
    Committed { pod_spec_revision: Option<u64> },
    Refused,
}

impl SequentialSpec for LeaderState {
    type Op = Write;
    type Ret = Answer;

    /// The store's answer while the fence holds: accepted, with a new revision for a spec.
    fn invoke(&mut self, op: &Write) -> Answer {
        match op.term {
            Some(term) if term >= self.term => {
                self.term = term;
                let revision = op.pod_spec.then(|| {
                    self.revision += 1;
                    self.revision
                });
                Answer::Committed {
                    pod_spec_revision: revision,
                }
            }
            _ => Answer::Refused,
        }
    }

    fn is_valid_step(&mut self, op: &Write, ret: &Answer) -> bool {
        match *ret {
            // The lease may have moved on in between: the spec cannot tell, so a refusal
            // is always allowed. What must never happen is the acceptance of a stale write.
            Answer::Refused => true,
            Answer::Committed { pod_spec_revision } => {
                let Some(term) = op.term else {
                    return false;
                };
                if term < self.term {
                    return false;
                }
                match pod_spec_revision {
                    Some(r) if op.pod_spec && r == self.revision + 1 => self.revision = r,
                    // An unchanged spec makes no new revision.
                    None => {}
                    Some(_) => return false,
                }
                self.term = term;
                true
            }
        }
    }
}

/// One recorded commit: when it was called and answered (event indices), and how.
struct Operation {
    invoked: usize,
    answered: Option<usize>,
    write: Write,
    answer: Option<Answer>,
}

fn operations(events: &[WriteEvent]) -> Vec<Operation> {
    let mut ops: Vec<Operation> = Vec::new();
    let mut index = std::collections::BTreeMap::new();
    for (at, event) in events.iter().enumerate() {
        match event {
            WriteEvent::Invoked {
                op, term, pod_spec, ..
            } => {
                index.insert(*op, ops.len());
                ops.push(Operation {
                    invoked: at,
                    answered: None,
                    write: Write {
                        term: *term,
                        pod_spec: *pod_spec,
                    },
                    answer: None,
                });
            }
            WriteEvent::Committed {
                op,
                pod_spec_revision,
            } => {
                let o = &mut ops[index[op]];
                o.answered = Some(at);
                o.answer = Some(Answer::Committed {
                    pod_spec_revision: *pod_spec_revision,
                });
            }
            WriteEvent::Refused { op } => {
                let o = &mut ops[index[op]];
                o.answered = Some(at);
                o.answer = Some(Answer::Refused);
            }
        }
    }
    ops
}

/// The search: extend a linearization by an operation called before every pending
/// answered one returned, if the spec allows its answer; an unanswered operation may be
/// placed anywhere after its call, or nowhere. `done` and the spec's state are cached once
/// they led nowhere.
fn search(
    ops: &[Operation],
    done: &mut Vec<bool>,
    state: &LeaderState,
    order: &mut Vec<usize>,
    dead_ends: &mut HashSet<(Vec<bool>, LeaderState)>,
) -> bool {
    let pending = |i: usize| !done[i] && ops[i].answered.is_some();
    let Some(first_answer) = (0..ops.len())
        .filter(|&i| pending(i))
        .filter_map(|i| ops[i].answered)
        .min()
    else {
        return true;
    };
    if dead_ends.contains(&(done.clone(), state.clone())) {
        return false;
    }
    // Answered operations first, in the order they returned; unanswered ones last.
    let mut candidates: Vec<usize> = (0..ops.len())
        .filter(|&i| !done[i] && ops[i].invoked < first_answer)
        .collect();
    candidates.sort_by_key(|&i| ops[i].answered.unwrap_or(usize::MAX));
    for i in candidates {
        let mut next = state.clone();
        let allowed = match &ops[i].answer {
            Some(answer) => next.is_valid_step(&ops[i].write, answer),
            None => {
                next.invoke(&ops[i].write);
                true
            }
        };
        if !allowed {
            continue;
        }
        done[i] = true;
        order.push(i);
        if search(ops, done, &next, order, dead_ends) {
            return true;
        }
        done[i] = false;
        order.pop();
    }
    dead_ends.insert((done.clone(), state.clone()));
    false
}

/// A linearization of `events` (the operations in order), or why there is none.
fn linearize(events: &[WriteEvent]) -> Result<Vec<(Write, Option<Answer>)>, String> {
    let ops = operations(events);
    let mut done = vec![false; ops.len()];
    let mut order = Vec::new();
    let mut dead_ends = HashSet::new();
    if search(
        &ops,
        &mut done,
        &LeaderState::default(),
        &mut order,
        &mut dead_ends,
    ) {
        Ok(order
            .into_iter()
            .map(|i| (ops[i].write.clone(), ops[i].answer.clone()))
            .collect())
    } else {
        Err(format!("no linearization of {events:#?}"))
    }
}

fn invoked(op: u64, term: u64) -> WriteEvent {
    WriteEvent::Invoked {
        op,
        unit: "discourse/0".into(),
        term: Some(term),
        pod_spec: true,
    }
}

fn committed(op: u64, revision: u64) -> WriteEvent {
    WriteEvent::Committed {
        op,
        pod_spec_revision: Some(revision),
    }
}

#[test]
fn the_leader_writes_of_simulated_runs_under_faults_are_linearizable() {
    for profile in [
        Profile::Timeouts,
        Profile::Partition,
        Profile::LeaderCrash,
        Profile::RaftFlux,
    ] {
        let config = SimConfig::new(7, 3, 600, profile, Policy::Pinned);
        let (report, events) = sim::run_recording_writes(&config);
        let commits = events
            .iter()
            .filter(|e| matches!(e, WriteEvent::Committed { .. }))
            .count();
        assert!(commits > 0, "{profile:?}: no leader write committed");
        let order = linearize(&events).unwrap_or_else(|e| panic!("{profile:?}: {e}"));
        // The linearization accounts for every write that was answered.
        let answered = events
            .iter()
            .filter(|e| !matches!(e, WriteEvent::Invoked { .. }))
            .count();
        assert!(order.len() >= answered, "{profile:?}");
        let terms: std::collections::BTreeSet<u64> =
            order.iter().filter_map(|(w, _)| w.term).collect();
        eprintln!(
            "{profile:?}: {} writes, {commits} committed, terms {terms:?}, pod spec at {}",
            order.len(),
            report.measured.pod_spec_revision
        );
    }
}

#[test]
fn leadership_moves_in_the_recorded_runs_so_the_terms_are_put_to_the_test() {
    let config = SimConfig::new(7, 3, 600, Profile::Partition, Policy::Pinned);
    let (_, events) = sim::run_recording_writes(&config);
    let terms: std::collections::BTreeSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            WriteEvent::Invoked { term, .. } => *term,
            _ => None,
        })
        .collect();
    assert!(terms.len() >= 2, "{terms:?}");
}

#[test]
fn a_stale_term_accepted_after_a_newer_one_is_not_linearizable() {
    // Term 2 committed, then, strictly after, term 1 committed too.
    let history = [
        invoked(0, 2),
        committed(0, 1),
        invoked(1, 1),
        committed(1, 2),
    ];
    assert!(linearize(&history).is_err());
    // Overlapping in time, the older term may have gone first: that is linearizable.
    let overlapping = [
        invoked(0, 2),
        invoked(1, 1),
        committed(0, 2),
        committed(1, 1),
    ];
    assert!(linearize(&overlapping).is_ok());
}

#[test]
fn a_revision_skipped_or_repeated_is_not_linearizable() {
    let skipped = [invoked(0, 1), committed(0, 2)];
    assert!(linearize(&skipped).is_err());
    let repeated = [
        invoked(0, 1),
        committed(0, 1),
        invoked(1, 1),
        committed(1, 1),
    ];
    assert!(linearize(&repeated).is_err());
    // A write that got no answer may have taken effect: revision 2 may follow it.
    let unanswered = [invoked(0, 1), invoked(1, 1), committed(1, 2)];
    assert!(linearize(&unanswered).is_ok());
}
