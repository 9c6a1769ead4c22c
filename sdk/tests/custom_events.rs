//! Custom events: emitted by a library observing the hook's event, handled by the charm in
//! the same hook, under the same leadership answer and in the same all-or-nothing commit.

use charm_sdk::testing::{Context, Faults, Outcome, State};
use charm_sdk::{Charm, Emit, Event, HookError, HookResult, Metadata, Model};
use serde::{Deserialize, Serialize};

/// A library's event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Lib {
    Seen(String),
    Again(u32),
}

impl Emit for Lib {
    fn name(&self) -> &'static str {
        match self {
            Lib::Seen(_) => "seen",
            Lib::Again(_) => "again",
        }
    }
}

const SOURCE: &str = "lib:main";

/// Appends what it handles to stored state `order`, so tests can read the order back.
fn record(model: &Model, what: String) -> HookResult {
    let mut order: Vec<String> = model.stored().get("order")?.unwrap_or_default();
    order.push(what);
    model.stored().set("order", &order)?;
    Ok(())
}

struct Ordered;
impl Charm for Ordered {
    fn metadata() -> Metadata {
        Metadata::new("ordered")
    }
    fn observe(model: &Model, event: &Event) -> HookResult {
        model.emit(SOURCE, &Lib::Seen(event.hook_name()))?;
        Ok(())
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        match &event {
            Event::Custom(c) => match c.decode::<Lib>(SOURCE).expect("ours")? {
                Lib::Seen(hook) => {
                    record(model, format!("lib saw {hook}"))?;
                    // Emitted from a handler: handled after it, in the same hook.
                    model.emit(SOURCE, &Lib::Again(1))?;
                }
                Lib::Again(n) => {
                    record(model, format!("again {n}"))?;
                    if model.is_leader() {
                        model.leader_data().set("again", &n.to_string())?;
                    }
                }
            },
            other => record(model, other.hook_name())?,
        }
        Ok(())
    }
}

#[test]
fn library_events_are_handled_in_order_before_the_hook_event() {
    let out = Context::<Ordered>::new().run(Event::Start, State::default());
    assert!(out.committed(), "{:?}", out.outcome);
    let order: Vec<String> = out.state.stored_value("order").unwrap();
    assert_eq!(order, ["lib saw start", "again 1", "start"]);
    let names: Vec<&str> = out.emitted.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["seen", "again"]);
    assert!(out.emitted.iter().all(|e| e.source == SOURCE));
}

#[test]
fn custom_event_writes_share_the_hooks_commit() {
    // The lease is lost after the hook started: nothing the custom handlers wrote lands.
    let faults = Faults {
        lease_lost_after: Some(0),
        ..Default::default()
    };
    let out =
        Context::<Ordered>::new().run_with(Event::Start, State::default().leader(true), &faults);
    assert_eq!(out.outcome, Outcome::Fenced);
    assert!(out.state.leader_data.is_empty());
    assert_eq!(out.state.stored_value::<Vec<String>>("order"), None);
    // Leadership stayed pinned for every handler in the hook.
    assert!(
        out.is_leader_answers.iter().all(|&a| a),
        "{:?}",
        out.is_leader_answers
    );
    assert!(!out.is_leader_answers.is_empty());

    let out = Context::<Ordered>::new().run(Event::Start, State::default().leader(true));
    assert_eq!(out.state.leader_data["again"], "1");
}

struct FailsOnCustom;
impl Charm for FailsOnCustom {
    fn metadata() -> Metadata {
        Metadata::new("fails")
    }
    fn observe(model: &Model, _: &Event) -> HookResult {
        model.emit(SOURCE, &Lib::Again(7))?;
        Ok(())
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        if let Event::Custom(_) = event {
            return Err(HookError::msg("cannot handle it"));
        }
        model.stored().set("handled", &true)?;
        Ok(())
    }
}

#[test]
fn a_failing_custom_handler_fails_the_whole_hook() {
    let out = Context::<FailsOnCustom>::new().run(Event::Start, State::default());
    assert_eq!(out.outcome, Outcome::Failed("cannot handle it".into()));
    assert!(out.state.stored.is_empty());
}

/// Defers the library's event until a relation-free `update-status`.
struct Defers;
impl Charm for Defers {
    fn metadata() -> Metadata {
        Metadata::new("defers")
    }
    fn observe(model: &Model, event: &Event) -> HookResult {
        if *event == Event::Install {
            model.emit(SOURCE, &Lib::Again(3))?;
        }
        Ok(())
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        if let Event::Custom(c) = &event {
            let Lib::Again(n) = c.decode::<Lib>(SOURCE).expect("ours")? else {
                return Ok(());
            };
            if model.stored().get::<bool>("ready")?.is_none() {
                model.defer();
                return Ok(());
            }
            model.stored().set("handled", &n)?;
        }
        if event == Event::ConfigChanged {
            model.stored().set("ready", &true)?;
        }
        Ok(())
    }
}

#[test]
fn a_deferred_custom_event_runs_again_in_a_later_hook_without_observing_twice() {
    let ctx = Context::<Defers>::new();
    let out = ctx.run(Event::Install, State::default());
    assert_eq!(out.state.deferred().len(), 1);
    assert!(matches!(&out.state.deferred()[0], Event::Custom(c) if c.name == "again"));

    // Not ready yet: deferred again, and the library did not emit another.
    let out = ctx.run(Event::UpdateStatus, out.state);
    assert_eq!(out.state.deferred().len(), 1);
    assert!(out.emitted.is_empty());

    // config-changed makes it ready after the deferred event ran; the next hook handles it.
    let out = ctx.run(Event::ConfigChanged, out.state);
    let out = ctx.run(Event::UpdateStatus, out.state);
    assert!(out.state.deferred().is_empty());
    assert_eq!(out.state.stored_value::<u32>("handled"), Some(3));
}

struct Runaway;
impl Charm for Runaway {
    fn metadata() -> Metadata {
        Metadata::new("runaway")
    }
    fn observe(model: &Model, _: &Event) -> HookResult {
        model.emit(SOURCE, &Lib::Again(0))?;
        Ok(())
    }
    fn handle(model: &Model, event: Event) -> HookResult {
        if let Event::Custom(_) = event {
            model.emit(SOURCE, &Lib::Again(0))?;
        }
        Ok(())
    }
}

#[test]
fn a_library_that_emits_forever_fails_the_hook_with_a_message() {
    let out = Context::<Runaway>::new().run(Event::Start, State::default());
    match &out.outcome {
        Outcome::Failed(why) => assert!(why.contains("custom events in one hook"), "{why}"),
        other => panic!("expected a failed hook, got {other:?}"),
    }
}
