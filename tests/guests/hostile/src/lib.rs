//! A charm that misbehaves on purpose: its `behaviour` option picks how, in config-changed
//! (those in [`LEADER_BEHAVIOURS`]: in leader-elected). Every other hook, and every behaviour's other hooks,
//! succeed, so a misbehaviour is the unit's only failure.

use std::io::Write;

use charm_sdk::{Charm, Event, HookError, HookResult, Metadata, Model, Status};

/// The hostile charm.
pub struct Hostile;

/// 8 MiB: far beyond any value the host accepts, and well within a hook's memory.
const HUGE: usize = 8 << 20;
/// How many lines the floods write: far beyond what the host keeps of a hook's output.
const FLOOD_LINES: u32 = 100_000;
/// The behaviours of a leader, in leader-elected.
pub const LEADER_BEHAVIOURS: &[&str] = &["leader-loop", "huge-leader-data"];

// On purpose: the stack overflow is the behaviour.
#[allow(unconditional_recursion)]
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
        "long-status" => model.unit().set_status(Status::active("x".repeat(4096)))?,
        "huge-status" => model.unit().set_status(Status::active("x".repeat(HUGE)))?,
        "huge-leader-data" => {
            model.leader_data().set("huge", &"x".repeat(HUGE))?;
        }
        "many-keys" => {
            for i in 0..200_000u32 {
                model.stored().set(&format!("key-{i}"), &i)?;
            }
        }
        "log-flood" => {
            for i in 0..FLOOD_LINES {
                charm_sdk::log::info(&format!("line {i}"));
            }
        }
        "stdout-flood" => {
            for i in 0..FLOOD_LINES {
                println!("line {i}");
            }
        }
        "odd-output" => {
            // Multi-line, control characters, and bytes that are not UTF-8.
            let message = "line one\nline two\t\u{1b}[31mred\u{7}";
            model.unit().set_status(Status::active(message))?;
            let mut stdout = std::io::stdout();
            let written = stdout
                .write_all(b"not utf-8: \xff\xfe\xc3(\n")
                .and_then(|()| stdout.write_all("\u{1b}[2J\r\n".as_bytes()))
                .and_then(|()| stdout.flush());
            written.map_err(|e| HookError::msg(e.to_string()))?;
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
        let as_leader = LEADER_BEHAVIOURS.contains(&behaviour.as_str());
        match event {
            Event::LeaderElected if as_leader => misbehave(model, &behaviour),
            Event::ConfigChanged if !as_leader => misbehave(model, &behaviour),
            _ => Ok(()),
        }
    }
}

charm_sdk::export_charm!(Hostile);
