//! A charm that misbehaves on purpose: its `behaviour` option picks how, in config-changed
//! (`leader-loop`: in leader-elected). Every other hook, and every behaviour's other hooks,
//! succeed, so a misbehaviour is the unit's only failure.

use std::io::Write;

use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};

/// The hostile charm.
pub struct Hostile;

/// 32 MiB: far beyond any value the host accepts.
const HUGE: usize = 32 << 20;

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    // A frame the optimiser cannot fold away.
    let frame = std::hint::black_box([depth; 16]);
    recurse(depth + 1).wrapping_add(frame[depth as usize % 16])
}

fn misbehave(model: &Model, behaviour: &str) -> HookResult {
    match behaviour {
        "loop" | "leader-loop" => {
            let mut n = 0u64;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "stack-overflow" => {
            std::hint::black_box(recurse(0));
        }
        "memory-bomb" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "panic" => panic!("deliberate panic"),
        "huge-status" => model.unit().set_status(Status::active("x".repeat(HUGE)))?,
        "huge-leader-data" => {
            if model.is_leader() {
                model.leader_data().set("huge", &"x".repeat(HUGE))?;
            }
        }
        "many-keys" => {
            for i in 0..200_000u32 {
                model.stored().set(&format!("key-{i}"), &i)?;
            }
        }
        "log-flood" => {
            for i in 0..2_000_000u32 {
                charm_sdk::log::info(&format!("line {i}"));
            }
        }
        "stdout-flood" => {
            for i in 0..2_000_000u32 {
                println!("line {i}");
            }
        }
        "odd-output" => {
            // Multi-line, control characters, and bytes that are not UTF-8.
            let message = "line one\nline two\t\u{1b}[31mred\u{7}";
            model.unit().set_status(Status::active(message))?;
            let mut stdout = std::io::stdout();
            stdout.write_all(b"not utf-8: \xff\xfe\xc3(\n")?;
            stdout.write_all("\u{1b}[2J\r\n".as_bytes())?;
            stdout.flush()?;
        }
        _ => {}
    }
    Ok(())
}

impl Charm for Hostile {
    fn metadata() -> Metadata {
        Metadata::new("hostile")
            .summary("Misbehaves on purpose")
            .string_option("behaviour", Some("none"), "How to misbehave")
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        let behaviour: String = model.config().get("behaviour")?;
        match event {
            Event::LeaderElected if behaviour == "leader-loop" => misbehave(model, &behaviour),
            Event::ConfigChanged if behaviour != "leader-loop" => misbehave(model, &behaviour),
            _ => Ok(()),
        }
    }
}

charm_sdk::export_charm!(Hostile);
