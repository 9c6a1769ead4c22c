// Stored state is serde: a type that cannot be serialised is refused where it is stored.
use charm_sdk::{Charm, Event, HookResult, Metadata, Model};

struct NotSerde;

struct Storing;

impl Charm for Storing {
    fn metadata() -> Metadata {
        Metadata::new("storing")
    }

    fn handle(model: &Model, _event: Event) -> HookResult {
        model.stored().set("value", &NotSerde)?;
        Ok(())
    }
}

charm_sdk::export_charm!(Storing);

fn main() {}
