//! The floor: a component of the `charm` world, built straight on the generated bindings
//! (no SDK), whose hooks do nothing. Instantiating it and calling `handle-hook` is the least
//! any hook can cost in this host's engine; the hook benchmarks report against it.
//!
//! One exception, for the benchmarks of single host calls: the actions `is-leader`,
//! `state-get` (the stored key `k`) and `leader-get-all` make that call as many times as
//! their parameters say (a bare number), and nothing else.

// The world `use`s `context`, `event` and `metadata`, so the bindings define them here.
// Their generated functions take as many arguments as the WIT's records have fields.
#![allow(clippy::too_many_arguments)]
wit_bindgen::generate!({ path: "../../../wit/0.2.0", world: "juju:charm/charm@0.2.0" });

struct Empty;

impl Guest for Empty {
    fn metadata() -> Metadata {
        Metadata {
            name: "empty".into(),
            summary: "Does nothing".into(),
            relations: Vec::new(),
            config: Vec::new(),
            actions: Vec::new(),
        }
    }

    fn handle_hook(_context: Context, event: Event) -> Result<(), String> {
        if let Event::Action(action) = &event {
            let calls: u32 = action.params.trim().parse().unwrap_or(0);
            for _ in 0..calls {
                match action.name.as_str() {
                    "is-leader" => {
                        std::hint::black_box(juju::charm::leadership::is_leader());
                    }
                    "state-get" => {
                        std::hint::black_box(juju::charm::state::get("k"));
                    }
                    "leader-get-all" => {
                        std::hint::black_box(juju::charm::leadership::leader_get_all());
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

export!(Empty);
