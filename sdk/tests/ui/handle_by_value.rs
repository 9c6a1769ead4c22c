// `handle` borrows the model: taking it by value is refused at the parameter.
use charm_sdk::{Charm, Event, HookResult, Metadata, Model};

struct Owning;

impl Charm for Owning {
    fn metadata() -> Metadata {
        Metadata::new("owning")
    }

    fn handle(_model: Model, _event: Event) -> HookResult {
        Ok(())
    }
}

charm_sdk::export_charm!(Owning);

fn main() {}
