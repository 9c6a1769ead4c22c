//! The leader-only writes (leader data, pod spec) of simulated runs under faults, as their
//! callers saw them, are linearizable ([`charm_tests::linearizable`]); and the checker
//! refuses histories that are not.

use charm_host::sim::{self, Policy, Profile, SimConfig};
use charm_host::store::faults::WriteEvent;
use charm_tests::linearizable::linearize;

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
