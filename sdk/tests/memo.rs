//! `Model::memo`: a value computed once per hook, again after any write to the model, and
//! never carried from one hook to the next.

use std::cell::Cell;

use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::testing::{Context, Relation, State};
use charm_sdk::{Charm, Error, Event, HookResult, Metadata, Model, Status};

thread_local! {
    /// How many times the memo below was computed on this thread.
    static COMPUTED: Cell<u32> = const { Cell::new(0) };
}

fn computed() -> u32 {
    COMPUTED.with(Cell::get)
}

/// The memo under test: counts its computations and reads stored state `n`.
fn stored_n(model: &Model) -> charm_sdk::Result<String> {
    let n = model.memo("test.n", || {
        COMPUTED.with(|c| c.set(c.get() + 1));
        Ok(model.stored().get::<String>("n")?.unwrap_or_default())
    })?;
    Ok((*n).clone())
}

/// Each model write, by name.
fn write(model: &Model, what: &str) -> HookResult {
    match what {
        "stored" => model.stored().set("other", "x")?,
        "stored-remove" => model.stored().remove("other"),
        "leader-set" => model.leader_data().set("k", "v")?,
        "leader-remove" => model.leader_data().remove("k")?,
        "unit-bag" => model.relation_by_id(1)?.local_unit_data()?.set("k", "v")?,
        "app-bag" => model.relation_by_id(1)?.local_app_data()?.set("k", "v")?,
        "unit-status" => model.unit().set_status(Status::active("ok"))?,
        "app-status" => model.app().set_status(Status::active("ok"))?,
        "workload-version" => model.unit().set_workload_version("1.0"),
        "pod-spec" => model
            .pod()
            .set_spec(&PodSpec::new().container(Container::new("web", "nginx")))?,
        other => panic!("no write named {other}"),
    }
    Ok(())
}

const WRITES: [&str; 10] = [
    "stored",
    "stored-remove",
    "leader-set",
    "leader-remove",
    "unit-bag",
    "app-bag",
    "unit-status",
    "app-status",
    "workload-version",
    "pod-spec",
];

/// Asks for the memo, makes the write named in config `write`, and asks again.
struct AroundAWrite;
impl Charm for AroundAWrite {
    fn metadata() -> Metadata {
        Metadata::new("memo").requires("db", "pgsql").string_option(
            "write",
            None,
            "the write to make",
        )
    }
    fn handle(model: &Model, _: Event) -> HookResult {
        stored_n(model)?;
        stored_n(model)?;
        let what: String = model.config().get("write")?;
        write(model, &what)?;
        stored_n(model)?;
        Ok(())
    }
}

fn state(write: &str) -> State {
    State::default()
        .leader(true)
        .config("write", write)
        .relation(Relation::new(1, "db", "postgresql"))
}

#[test]
fn every_write_to_the_model_makes_the_memo_compute_again() {
    for what in WRITES {
        let before = computed();
        let out = Context::<AroundAWrite>::new().run(Event::ConfigChanged, state(what));
        assert!(out.committed(), "{what}: {:?}", out.outcome);
        assert_eq!(computed() - before, 2, "after a {what} write");
    }
}

/// Asks twice with no write between, in the observer and in the handler.
struct Twice;
impl Charm for Twice {
    fn metadata() -> Metadata {
        Metadata::new("memo")
    }
    fn observe(model: &Model, _: &Event) -> HookResult {
        stored_n(model)?;
        Ok(())
    }
    fn handle(model: &Model, _: Event) -> HookResult {
        stored_n(model)?;
        model.stored().set("n", &stored_n(model)?)?;
        Ok(())
    }
}

#[test]
fn one_hook_computes_once_and_the_next_hook_computes_again() {
    let before = computed();
    let out = Context::<Twice>::new().run(Event::UpdateStatus, State::default().stored("n", "1"));
    assert!(out.committed(), "{:?}", out.outcome);
    assert_eq!(computed() - before, 1);
    let out = Context::<Twice>::new().run(Event::UpdateStatus, out.state);
    assert!(out.committed(), "{:?}", out.outcome);
    assert_eq!(computed() - before, 2, "a new hook starts with no memo");
}

/// A memo whose computation fails the first time.
struct Flaky;
impl Charm for Flaky {
    fn metadata() -> Metadata {
        Metadata::new("memo")
    }
    fn handle(model: &Model, _: Event) -> HookResult {
        let calls = Cell::new(0);
        let ask = || {
            model.memo("test.flaky", || {
                calls.set(calls.get() + 1);
                if calls.get() == 1 {
                    Err(Error::InvalidArgument("not yet".into()))
                } else {
                    Ok(calls.get())
                }
            })
        };
        assert!(ask().is_err());
        assert_eq!(*ask()?, 2, "an error is not kept");
        assert_eq!(*ask()?, 2, "a value is");
        // The same key asked with another type is another value, computed afresh.
        let other = model.memo("test.flaky", || Ok("text"))?;
        assert_eq!(*other, "text");
        Ok(())
    }
}

#[test]
fn an_error_is_not_kept_and_a_key_of_another_type_is_computed_again() {
    let out = Context::<Flaky>::new().run(Event::Start, State::default());
    assert!(out.committed(), "{:?}", out.outcome);
}

/// A memo that writes while computing, and memos that nest.
struct Nested;
impl Charm for Nested {
    fn metadata() -> Metadata {
        Metadata::new("memo")
    }
    fn handle(model: &Model, _: Event) -> HookResult {
        let runs = Cell::new(0);
        let writes_as_it_computes = || {
            model.memo("test.writer", || {
                runs.set(runs.get() + 1);
                model.stored().set("touched", &true)?;
                Ok(())
            })
        };
        writes_as_it_computes()?;
        writes_as_it_computes()?;
        assert_eq!(runs.get(), 2, "a value computed across a write is not kept");

        let outer = model.memo("test.outer", || {
            let inner = model.memo("test.inner", || Ok(20))?;
            Ok(*inner + 1)
        })?;
        assert_eq!(*outer, 21);
        assert_eq!(
            *model.memo("test.inner", || Ok(0))?,
            20,
            "the inner one is kept"
        );
        Ok(())
    }
}

#[test]
fn a_memo_that_writes_is_not_kept_and_memos_nest() {
    let out = Context::<Nested>::new().run(Event::Start, State::default());
    assert!(out.committed(), "{:?}", out.outcome);
}
