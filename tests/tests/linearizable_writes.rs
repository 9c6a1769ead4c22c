//! The leader-only writes (leader data, pod spec) of simulated runs under faults, as their
//! callers saw them, are linearizable ([`charm_tests::linearizable`]); and the checker
//! refuses histories that are not.

use charm_host::sim::{self, Policy, Profile, SimConfig};
use charm_host::store::faults::WriteEvent;
use charm_tests::linearizable::{self, linearize};

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

/// Two hosts' files merge by their clock, each host's operation numbers kept apart: a
/// stale term accepted on one host after a newer one on the other is caught.
#[test]
fn histories_of_several_hosts_merge_in_real_time_order() {
    use charm_host::store::faults::TimedWriteEvent;

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, events: &[(u64, WriteEvent)]| {
        let path = dir.path().join(name);
        let text: String = events
            .iter()
            .map(|(at_ns, event)| {
                let timed = TimedWriteEvent {
                    at_ns: *at_ns,
                    event: event.clone(),
                };
                serde_json::to_string(&timed).unwrap() + "\n"
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    // Host a commits term 2 at 10-20; host b, with the same operation number, commits
    // term 1 at 30-40, strictly after: not linearizable.
    let a = write("a", &[(10, invoked(0, 2)), (20, committed(0, 1))]);
    let stale = write("b", &[(30, invoked(0, 1)), (40, committed(0, 2))]);
    let histories = linearizable::histories_from_files(&[&a, &stale]);
    assert_eq!(histories["discourse"].len(), 4, "{histories:?}");
    assert!(linearize(&histories["discourse"]).is_err());
    // Overlapping in time, b's write may have gone first; a cut-short last line is ignored.
    let overlapping = write("c", &[(15, invoked(0, 1)), (18, committed(0, 1))]);
    std::fs::write(
        &overlapping,
        std::fs::read_to_string(&overlapping).unwrap() + "{\"at_ns\":19,\"ev",
    )
    .unwrap();
    let histories = linearizable::histories_from_files(&[&a, &overlapping]);
    assert_eq!(histories["discourse"].len(), 4);
    let a_first = write("d", &[(10, invoked(0, 2)), (20, committed(0, 2))]);
    let histories = linearizable::histories_from_files(&[&a_first, &overlapping]);
    assert!(linearize(&histories["discourse"]).is_ok(), "{histories:?}");
}
