//! Every lifecycle hook the host fires on a live model reaches a charm compiled to
//! WebAssembly, through the host's loader, hook context and imports: stop and remove (a
//! unit leaving), relation-departed and relation-broken (a unit or a relation leaving),
//! upgrade-charm and update-status. The probe charm in `count` mode records each hook it
//! handles in its stored state, which the hook's commit carries back.

use charm_sdk::Event;
use charm_sdk::testing::{HookRunner, Relation, State};
use charm_tests::{WasmContext, guests, runtime};

#[test]
fn every_lifecycle_hook_reaches_the_charm() {
    let runtime = runtime();
    let ctx = WasmContext::new(&runtime, guests::PROBE).expect("the guest loads");
    let db = Relation::new(4, "db", "postgresql");
    let events = [
        Event::Stop,
        Event::Remove,
        Event::UpgradeCharm,
        Event::UpdateStatus,
        db.departed("postgresql/1"),
        db.broken(),
    ];
    for event in events {
        let name = event.hook_name();
        let state = State::default()
            .config("mode", "count")
            .relation(Relation::new(4, "db", "postgresql"));
        let out = ctx.run(event, state);
        assert!(out.committed(), "{name}: {:?}", out.outcome);
        assert_eq!(
            out.state.stored_value::<u32>(&format!("runs:{name}")),
            Some(1),
            "{name} did not reach the charm: {:?}",
            out.state.stored
        );
    }
}
