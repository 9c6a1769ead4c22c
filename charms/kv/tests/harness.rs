//! kv tested natively with charm-sdk's harness: the shared scenarios, and what only the
//! native harness observes (every answer `is_leader` gave).

mod scenarios;

use charm_sdk::testing::{Context, Faults, Outcome, State};
use charm_sdk::{Event, RelationEvent};
use kv::Kv;

fn ctx() -> Context<Kv> {
    Context::new()
}

#[test]
fn leader_forms_the_cluster() {
    scenarios::leader_forms_the_cluster(&ctx());
}

#[test]
fn follower_reads_the_members() {
    scenarios::follower_reads_the_members(&ctx());
}

#[test]
fn config_waits_for_the_cluster() {
    scenarios::config_waits_for_the_cluster(&ctx());
}

#[test]
fn put_on_the_leader() {
    scenarios::put_on_the_leader(&ctx());
}

#[test]
fn put_on_a_follower_fails() {
    scenarios::put_on_a_follower_fails(&ctx());
}

#[test]
fn get_on_any_unit() {
    scenarios::get_on_any_unit(&ctx());
}

#[test]
fn bad_params_apply_nothing() {
    scenarios::bad_params_apply_nothing(&ctx());
}

#[test]
fn lease_lost_mid_hook_is_fenced() {
    scenarios::lease_lost_mid_hook_is_fenced(&ctx());
}

#[test]
fn lease_store_outage_interrupts() {
    scenarios::lease_store_outage_interrupts(&ctx());
}

#[test]
fn every_scenario_has_a_test() {
    // The list the wasm run goes through is the list tested here.
    assert_eq!(scenarios::ALL.len(), 9);
}

/// The seed's situation: leadership goes away after the hook asked `is_leader` once. The
/// hook keeps being told it leads (I1), is refused nothing (I2), and the commit is fenced.
#[test]
fn is_leader_stays_true_after_the_lease_is_lost() {
    let state = State::default().leader(true).relation(scenarios::cluster());
    let faults = Faults {
        lease_lost_after: Some(1),
        ..Default::default()
    };
    let changed = Event::RelationChanged(RelationEvent::new(1, "cluster", "kv").unit("kv/1"));
    let out = ctx().run_with(changed, state, &faults);
    // kv asks after looking up its relation, so after the lease was gone.
    assert!(!out.is_leader_answers.is_empty());
    assert!(out.is_leader_answers.iter().all(|&leader| leader));
    assert_eq!(out.leadership_refusals, 0);
    assert_eq!(out.outcome, Outcome::Fenced);
}

/// A follower is not stopped by a lease store outage: it holds no guarantee to lose.
#[test]
fn lease_store_outage_does_not_stop_a_follower() {
    let state = State::default().relation(scenarios::cluster());
    let faults = Faults {
        lease_store_down_after: Some(1),
        ..Default::default()
    };
    let changed = Event::RelationChanged(RelationEvent::new(1, "cluster", "kv").unit("kv/1"));
    let out = ctx().run_with(changed, state, &faults);
    assert_eq!(out.outcome, Outcome::Committed);
}
