//! Leadership under injected faults, simulated in virtual time: the invariants I1-I5 hold
//! for this host over random fault schedules, Juju 2.9's semantics break on the same
//! faults, and the seed's report replays as reported.

use std::time::Duration;

use charm_host::sim::{self, Policy, Profile, SeedReplay, SimConfig};
use charm_host::store::faults::Outage;
use proptest::prelude::*;

#[test]
fn the_seeds_hook_succeeds_when_pinned_and_fails_as_reported_under_juju29() {
    let pinned = sim::replay_seed(Policy::Pinned);
    assert!(pinned.saw_leader, "{pinned:?}");
    assert!(
        matches!(pinned.outcome, Ok(revision) if revision > 0),
        "{pinned:?}"
    );

    let juju = sim::replay_seed(Policy::Juju29);
    assert_eq!(
        juju,
        SeedReplay {
            saw_leader: true,
            outcome: Err("cannot set a pod spec as this unit is not a leader".into())
        }
    );
}

#[test]
fn the_same_seed_gives_the_same_report_byte_for_byte() {
    for policy in [Policy::Pinned, Policy::Juju29] {
        let config = SimConfig::new(42, 3, 2_000, Profile::RaftFlux, policy);
        let a = serde_json::to_string(&sim::run(&config)).unwrap();
        let b = serde_json::to_string(&sim::run(&config)).unwrap();
        assert_eq!(a, b, "{policy:?}");
    }
}

#[test]
fn juju29_contradicts_itself_under_raft_flux_and_pinned_does_not() {
    let juju = sim::run(&SimConfig::new(
        1,
        3,
        20_000,
        Profile::RaftFlux,
        Policy::Juju29,
    ));
    assert!(juju.measured.inconsistent_hooks > 0, "{juju:?}");
    let pinned = sim::run(&SimConfig::new(
        1,
        3,
        20_000,
        Profile::RaftFlux,
        Policy::Pinned,
    ));
    assert_eq!(pinned.measured.inconsistent_hooks, 0, "{pinned:?}");
    assert!(
        sim::invariant_violations(&pinned).is_empty(),
        "{:?}",
        sim::invariant_violations(&pinned)
    );
}

#[test]
fn a_crashed_leader_is_replaced_within_the_lease_plus_one_retry_period() {
    let report = sim::run(&SimConfig::new(
        3,
        3,
        10_000,
        Profile::LeaderCrash,
        Policy::Pinned,
    ));
    assert!(report.measured.crashes > 0, "{report:?}");
    // The last crash may come too close to the end of the run for its failover to finish.
    assert!(
        report.measured.failover_seconds.len() as u64 + 1 >= report.measured.crashes,
        "{report:?}"
    );
    let limit = report.lease_seconds
        + charm_host::leadership::LeadershipConfig::default()
            .retry_period
            .as_secs_f64();
    let worst = report.failover_max_seconds.unwrap();
    assert!(
        worst <= limit,
        "failover took {worst} s, more than {limit} s"
    );
}

#[test]
fn the_split_brain_check_catches_clock_drift_beyond_the_margin() {
    // The store's clock runs 60% fast: its leases lapse long before the holders' guarantees.
    let mut config = SimConfig::new(5, 3, 10_000, Profile::RaftFlux, Policy::Pinned);
    config.drift_override = Some(0.6);
    let report = sim::run(&config);
    assert!(
        report.measured.overlapping_guarantees + report.measured.stale_commits_accepted > 0,
        "the checker must see the split brain this drift causes: {report:?}"
    );
}

fn profile() -> impl Strategy<Value = Profile> {
    prop::sample::select(Profile::ALL.to_vec())
}

fn outages() -> impl Strategy<Value = Vec<Outage>> {
    prop::collection::vec((0u64..1_200_000, 0u64..30_000), 0..6).prop_map(|windows| {
        windows
            .into_iter()
            .map(|(start, len)| Outage {
                start: Duration::from_millis(start),
                end: Duration::from_millis(start + len),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn pinned_leadership_keeps_i1_to_i5_over_random_fault_schedules(
        seed in any::<u64>(),
        units in 2u32..5,
        hooks in 300u64..1_500,
        profile in profile(),
        extra in outages(),
    ) {
        let mut config = SimConfig::new(seed, units, hooks, profile, Policy::Pinned);
        config.extra_outages = extra;
        let report = sim::run(&config);
        let violations = sim::invariant_violations(&report);
        prop_assert!(violations.is_empty(), "{violations:?}\n{report:?}");
        prop_assert!(report.measured.hooks_run > 0);
    }
}
