//! A unit's view of its application's leadership, and the decisions that change it: what a
//! claim's answer does, when the guarantee ends, whether a hook may pin leadership, and
//! whether a pinned hook may go on.
//!
//! These are the tracker's rules with the clock and the network taken out: the host's
//! renewal task calls them with its clock's instants, and the protocol's model calls them
//! with a model's ticks, so the two cannot disagree. Time is generic: an instant `I` that a
//! span `S` can be added to.
//!
//! The guarantee is counted from the instant taken *before* the claim was sent: the store
//! starts its lease later than that, so the holder's guarantee ends before the store's
//! lease does, by at least the drift margin the caller took off the lease duration.
//!
//! ```
//! use charm_model::leadership::{ClaimAnswer, Leadership, after_answer, pinnable_term};
//!
//! // Ticks as instants: the claim was sent at 10 and the store granted term 3; the
//! // guarantee is the lease duration minus the drift margin, here 4 ticks.
//! let view: Leadership<u32, &str> = Leadership::Unknown;
//! let view = after_answer(&view, ClaimAnswer::Held { term: 3 }, 10, 4);
//! assert_eq!(view, Leadership::Leader { term: 3, guarantee_until: 14 });
//! // A store that did not answer changes nothing.
//! assert_eq!(after_answer(&view, ClaimAnswer::Unavailable, 12, 4), view);
//! // A hook starting at 12 with 1 tick to spare pins term 3; at 13 it would not.
//! assert_eq!(pinnable_term(&view, 12, 1), Some(3));
//! assert_eq!(pinnable_term(&view, 13, 1), None);
//! ```

use std::ops::Add;

/// What a unit knows of its application's leadership. `I` is an instant on the unit's own
/// clock; `U` names a unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Leadership<I, U = String> {
    /// No answer from the store yet.
    Unknown,
    /// This unit leads with `term`, guaranteed until `guarantee_until`.
    Leader {
        /// The lease's term (the fencing token).
        term: u64,
        /// When the guarantee ends unless renewed.
        guarantee_until: I,
    },
    /// Another unit leads (or, with `None`, this unit's guarantee ran out with no answer
    /// from the store: it does not know who leads).
    Follower {
        /// The leader, when known.
        leader: Option<U>,
    },
}

/// The answer to one claim of the lease, as the tracker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClaimAnswer<U = String> {
    /// The claimant holds the lease with `term` (new, or extended with the same term).
    Held {
        /// The lease's term.
        term: u64,
    },
    /// Another unit holds an unexpired lease.
    Denied {
        /// The unit holding it.
        holder: U,
    },
    /// No answer: a timeout, a refused connection, a lost message. Never a denial.
    Unavailable,
}

/// The view after a claim sent at `sent_at` got `answer`, where `guarantee` is the lease
/// duration the store granted minus the drift margin.
///
/// Held: leader with the guarantee counted from `sent_at`. Denied: follower of the holder.
/// Unavailable: unchanged, so a leader stays leader until its guarantee ends
/// ([`after_guarantee_end`]), which is what Juju 2.9 got wrong.
pub fn after_answer<I, S, U>(
    current: &Leadership<I, U>,
    answer: ClaimAnswer<U>,
    sent_at: I,
    guarantee: S,
) -> Leadership<I, U>
where
    I: Add<S, Output = I>,
    Leadership<I, U>: Clone,
{
    match answer {
        ClaimAnswer::Held { term } => Leadership::Leader {
            term,
            guarantee_until: sent_at + guarantee,
        },
        ClaimAnswer::Denied { holder } => Leadership::Follower {
            leader: Some(holder),
        },
        ClaimAnswer::Unavailable => current.clone(),
    }
}

/// When the current guarantee ends, if this unit leads.
pub fn guarantee_end<I: Copy, U>(current: &Leadership<I, U>) -> Option<I> {
    match *current {
        Leadership::Leader {
            guarantee_until, ..
        } => Some(guarantee_until),
        _ => None,
    }
}

/// The view at `now` if the guarantee ended with no renewal: a follower that does not know
/// who leads. `None` while the guarantee holds, or if this unit does not lead.
pub fn after_guarantee_end<I: Copy + Ord, U>(
    current: &Leadership<I, U>,
    now: I,
) -> Option<Leadership<I, U>> {
    match guarantee_end(current) {
        Some(end) if end <= now => Some(Leadership::Follower { leader: None }),
        _ => None,
    }
}

/// The term a hook starting at `now` may pin: this unit leads with more than
/// `min_remaining` of guarantee left. `None`: the hook runs as a follower's, and its
/// `is_leader` answers false throughout.
pub fn pinnable_term<I, S, U>(current: &Leadership<I, U>, now: I, min_remaining: S) -> Option<u64>
where
    I: Copy + Ord + Add<S, Output = I>,
{
    match *current {
        Leadership::Leader {
            term,
            guarantee_until,
        } if now + min_remaining < guarantee_until => Some(term),
        _ => None,
    }
}

/// The end of the guarantee of `term`, the term a hook pinned: `None` once the unit leads
/// no more, or leads with another term.
pub fn term_guarantee<I: Copy, U>(current: &Leadership<I, U>, term: u64) -> Option<I> {
    match *current {
        Leadership::Leader {
            term: t,
            guarantee_until,
        } if t == term => Some(guarantee_until),
        _ => None,
    }
}

/// Whether a hook pinned as leader may go on at `now` (run, or commit) when its term's
/// guarantee ends at `valid_until`: it must stop `margin` before that end, so that its
/// commit reaches the store while the lease is still its own.
pub fn hook_may_continue<I, S>(valid_until: Option<I>, now: I, margin: S) -> bool
where
    I: Copy + Ord + Add<S, Output = I>,
{
    valid_until.is_some_and(|until| now + margin < until)
}

/// Whether a unit leading with `term` owes leader-elected now: once per term (the store
/// records the term leader-elected ran for with its commit, `elected_term`), and after
/// install and the relation-created hooks that wait at the head of its queue (Juju's
/// order: its uniter asks the created relations' resolver before the leadership one), so
/// not while install or leader-elected is queued, nor while a relation-created is next.
///
/// ```
/// use charm_model::Hook;
/// use charm_model::leadership::owes_leader_elected;
///
/// assert!(owes_leader_elected(None, 1, &[Hook::ConfigChanged, Hook::Start]));
/// assert!(!owes_leader_elected(None, 1, &[Hook::Install, Hook::ConfigChanged]));
/// let peers = charm_model::RelationHook {
///     id: 1,
///     endpoint: "peers".into(),
///     remote_app: "db".into(),
///     remote_unit: None,
/// };
/// assert!(!owes_leader_elected(None, 1, &[Hook::RelationCreated(peers.clone()), Hook::Start]));
/// // A relation related later waits its turn: leader-elected is not held back for it.
/// assert!(owes_leader_elected(None, 1, &[Hook::Start, Hook::RelationCreated(peers)]));
/// assert!(!owes_leader_elected(Some(1), 1, &[]), "once per term");
/// assert!(owes_leader_elected(Some(1), 2, &[]), "a new term");
/// ```
pub fn owes_leader_elected<'h>(
    elected_term: Option<u64>,
    term: u64,
    queue: impl IntoIterator<Item = &'h crate::records::Hook>,
) -> bool {
    use crate::records::Hook;
    let mut queue = queue.into_iter().peekable();
    let created_next = queue
        .peek()
        .is_some_and(|h| matches!(h, Hook::RelationCreated(_)));
    elected_term != Some(term)
        && !created_next
        && !queue.any(|h| *h == Hook::Install || *h == Hook::LeaderElected)
}

#[cfg(test)]
mod tests {
    use super::*;

    type View = Leadership<u32, u8>;

    #[test]
    fn a_denial_makes_a_follower_of_the_holder_and_an_unanswered_claim_changes_nothing() {
        let leader: View = Leadership::Leader {
            term: 2,
            guarantee_until: 9,
        };
        assert_eq!(
            after_answer(&leader, ClaimAnswer::Denied { holder: 1 }, 5, 4),
            Leadership::Follower { leader: Some(1) }
        );
        assert_eq!(
            after_answer(&leader, ClaimAnswer::Unavailable, 5, 4),
            leader
        );
        let unknown: View = Leadership::Unknown;
        assert_eq!(
            after_answer(&unknown, ClaimAnswer::Unavailable, 5, 4),
            unknown
        );
    }

    #[test]
    fn the_guarantee_ends_at_its_instant_and_not_before() {
        let leader: View = Leadership::Leader {
            term: 2,
            guarantee_until: 9,
        };
        assert_eq!(after_guarantee_end(&leader, 8), None);
        assert_eq!(
            after_guarantee_end(&leader, 9),
            Some(Leadership::Follower { leader: None })
        );
        assert_eq!(after_guarantee_end(&View::Unknown, 100), None);
    }

    #[test]
    fn a_pinned_hook_stops_a_margin_before_its_terms_guarantee_ends() {
        let leader: View = Leadership::Leader {
            term: 2,
            guarantee_until: 9,
        };
        assert_eq!(term_guarantee(&leader, 2), Some(9));
        assert_eq!(term_guarantee(&leader, 3), None, "another term");
        assert!(hook_may_continue(Some(9), 7, 1));
        assert!(!hook_may_continue(Some(9), 8, 1));
        assert!(!hook_may_continue(None, 0, 0), "leadership gone");
    }
}
