//! The compiled-charm cache: a charm compiled once is read back from the cache by the next
//! runtime; a damaged or foreign entry is never fatal (the charm is compiled again and the
//! entry rewritten); a runtime without a cache writes nothing.

use std::path::{Path, PathBuf};

use charm_host::charm::{LoadedFrom, RuntimeConfig};
use charm_tests::{guests, runtime_with};

fn cached_runtime(dir: &Path) -> charm_host::charm::CharmRuntime {
    runtime_with(RuntimeConfig {
        compile_cache: Some(dir.to_owned()),
        ..Default::default()
    })
}

/// The cache's entries (temporary files excluded).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = read
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    found.sort();
    found
}

fn load_discourse(dir: &Path) -> charm_host::charm::Charm {
    cached_runtime(dir)
        .load_file(Path::new(guests::DISCOURSE))
        .expect("discourse loads")
}

#[test]
fn a_second_runtime_reads_the_compiled_charm_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let first = load_discourse(dir.path());
    assert_eq!(first.loaded_from(), LoadedFrom::Compiled);
    assert_eq!(entries(dir.path()).len(), 1, "one entry written");

    let second = load_discourse(dir.path());
    assert_eq!(second.loaded_from(), LoadedFrom::Cache);
    assert_eq!(second.metadata(), first.metadata());
    assert_eq!(entries(dir.path()).len(), 1, "nothing more written");
}

#[test]
fn a_charm_from_the_cache_runs_hooks() {
    let dir = tempfile::tempdir().unwrap();
    load_discourse(dir.path());
    let charm = load_discourse(dir.path());
    assert_eq!(charm.loaded_from(), LoadedFrom::Cache);
    let snapshot = charm_host::model::UnitSnapshot {
        model: "m".into(),
        unit: "discourse/0".into(),
        app: "discourse".into(),
        ..Default::default()
    };
    let run = charm.run_hook(
        snapshot,
        None,
        None,
        &charm_host::bindings::types::Event::ConfigChanged,
    );
    assert_eq!(
        run.outcome,
        charm_host::charm::HookOutcome::Succeeded,
        "{}",
        run.output
    );
    // Without a db relation discourse waits for its database.
    let status = run.changes.unit_status.expect("it sets a status");
    assert_eq!(status.message, "waiting for database");
}

#[test]
fn each_kind_of_damaged_entry_is_compiled_again_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    load_discourse(dir.path());
    let entry = entries(dir.path()).pop().expect("an entry");
    let sound = std::fs::read(&entry).unwrap();
    let middle = sound.len() / 2;
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", sound[..middle].to_vec()),
        ("one byte flipped", {
            let mut b = sound.clone();
            b[middle] ^= 0x40;
            b
        }),
        (
            "not an artifact",
            b"#!/bin/sh\necho not a component\n".to_vec(),
        ),
    ];
    for (damage, bytes) in damages {
        std::fs::write(&entry, &bytes).unwrap();
        let charm = load_discourse(dir.path());
        assert_eq!(charm.loaded_from(), LoadedFrom::Compiled, "{damage}");
        assert_eq!(charm.metadata().name, "discourse", "{damage}");
        assert_eq!(
            std::fs::read(&entry).unwrap().len(),
            sound.len(),
            "{damage}: the entry is rewritten"
        );
        assert_eq!(
            load_discourse(dir.path()).loaded_from(),
            LoadedFrom::Cache,
            "{damage}: the rewritten entry is used"
        );
    }
}

#[test]
fn an_unwritable_cache_still_loads_the_charm() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the cache directory should be: nothing can be written under it.
    let blocked = dir.path().join("cache");
    std::fs::write(&blocked, b"").unwrap();
    let charm = load_discourse(&blocked);
    assert_eq!(charm.loaded_from(), LoadedFrom::Compiled);
    assert_eq!(charm.metadata().name, "discourse");
}

#[test]
fn a_runtime_without_a_cache_compiles_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_with(RuntimeConfig {
        compile_cache: None,
        ..Default::default()
    });
    for _ in 0..2 {
        let charm = runtime.load_file(Path::new(guests::DISCOURSE)).unwrap();
        assert_eq!(charm.loaded_from(), LoadedFrom::Compiled);
    }
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn each_charm_has_its_own_entry_and_a_swapped_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = cached_runtime(dir.path());
    let load = |path: &str| runtime.load_file(Path::new(path)).unwrap();
    load(guests::DISCOURSE);
    let discourse_entry = entries(dir.path()).pop().unwrap();
    load(guests::EMPTY);
    let both = entries(dir.path());
    assert_eq!(both.len(), 2, "one entry per charm");
    let empty_entry = both.into_iter().find(|e| *e != discourse_entry).unwrap();

    // A sound artifact under another charm's name must not load as that charm.
    std::fs::copy(&discourse_entry, &empty_entry).unwrap();
    let empty = load(guests::EMPTY);
    assert_eq!(empty.loaded_from(), LoadedFrom::Compiled);
    assert_eq!(empty.metadata().name, "empty");
    let discourse = load(guests::DISCOURSE);
    assert_eq!(discourse.loaded_from(), LoadedFrom::Cache);
    assert_eq!(discourse.metadata().name, "discourse");
}
