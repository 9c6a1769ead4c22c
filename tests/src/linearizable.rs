//! Checking recorded leader-only writes (leader data, pod spec) for linearizability: some
//! order of them, consistent with real time, is a run of a fenced leader state in which
//! accepted terms never go backwards and each new pod spec takes the next revision. A
//! commit that got no answer may or may not have taken effect; the checker tries both.
//!
//! The sequential object is a stateright `SequentialSpec`; the search is Porcupine's
//! (Wing and Gong's, with Lowe's cache of visited configurations), since stateright's own
//! tester, without a cache, is exponential in the hundreds of overlapping commits a run
//! records.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use charm_host::model::app_of;
use charm_host::store::faults::{TimedWriteEvent, WriteEvent};
use stateright::semantics::SequentialSpec;

/// The application's leader state as one sequential object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LeaderState {
    /// The highest term a write was accepted with.
    pub term: u64,
    /// The pod spec's revision.
    pub revision: u64,
}

/// A hook's leader-only commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Write {
    /// The fence's term.
    pub term: Option<u64>,
    /// Whether it sets the pod spec.
    pub pod_spec: bool,
}

/// What the store answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Applied, with the pod spec's new revision if it made one.
    Committed {
        /// The new revision.
        pod_spec_revision: Option<u64>,
    },
    /// Refused.
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
pub fn linearize(events: &[WriteEvent]) -> Result<Vec<(Write, Option<Answer>)>, String> {
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

/// The histories in `files` (one a host, JSON lines as `charm-host run --write-history`
/// writes them), merged in the order of their clock, one history an application. A line
/// cut short by a kill ends its file.
pub fn histories_from_files(files: &[impl AsRef<Path>]) -> BTreeMap<String, Vec<WriteEvent>> {
    let mut timed: Vec<(u64, usize, WriteEvent)> = Vec::new();
    for (host, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file.as_ref())
            .unwrap_or_else(|e| panic!("{}: {e}", file.as_ref().display()));
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<TimedWriteEvent>(line) else {
                break;
            };
            timed.push((event.at_ns, host, event.event));
        }
    }
    // One clock for every process on this machine; a file's own order breaks ties.
    timed.sort_by_key(|(at, host, _)| (*at, *host));
    // Operation numbers are each host's own: number them anew, and file them by application.
    let mut apps: BTreeMap<u64, String> = BTreeMap::new();
    let mut by_app: BTreeMap<String, Vec<WriteEvent>> = BTreeMap::new();
    let global = |host: usize, op: u64| ((host as u64) << 40) | op;
    for (_, host, event) in timed {
        let event = match event {
            WriteEvent::Invoked {
                op,
                unit,
                term,
                pod_spec,
            } => {
                apps.insert(global(host, op), app_of(&unit).to_string());
                WriteEvent::Invoked {
                    op: global(host, op),
                    unit,
                    term,
                    pod_spec,
                }
            }
            WriteEvent::Committed {
                op,
                pod_spec_revision,
            } => WriteEvent::Committed {
                op: global(host, op),
                pod_spec_revision,
            },
            WriteEvent::Refused { op } => WriteEvent::Refused {
                op: global(host, op),
            },
        };
        let op = match &event {
            WriteEvent::Invoked { op, .. }
            | WriteEvent::Committed { op, .. }
            | WriteEvent::Refused { op } => *op,
        };
        let app = apps.get(&op).expect("an answer follows its call").clone();
        by_app.entry(app).or_default().push(event);
    }
    by_app
}
