//! Loading: every guest charm loads and describes itself; files that are not charms of our
//! world are refused with errors that say what is wrong.

use std::path::Path;

use charm_host::charm::LoadError;
use charm_tests::{guests, runtime};

macro_rules! loads_or_is_refused {
    ($guest:ident) => {{
        let path = guests::$guest;
        let name = stringify!($guest).to_lowercase().replace('_', "-");
        match runtime().load_file(Path::new(path)) {
            Ok(charm) => assert_eq!(charm.metadata().name, name),
            Err(LoadError::WrongWorld { .. }) => assert!(
                ["other-world", "contract-unknown"].contains(&name.as_str()),
                "{name} was refused"
            ),
            Err(e) => panic!("{name}: {e}"),
        }
    }};
}

#[test]
fn every_guest_charm_loads_with_its_metadata() {
    charm_tests::foreach_guest!(loads_or_is_refused);
}

#[test]
fn discourse_declares_what_the_seed_needs() {
    let charm = runtime().load_file(Path::new(guests::DISCOURSE)).unwrap();
    let db = charm
        .metadata()
        .endpoint("db")
        .expect("discourse has a db endpoint");
    assert_eq!(db.interface, "pgsql");
    assert_eq!(format!("{:?}", db.role), "Requires");
}

#[test]
fn a_core_module_is_refused_as_not_a_component() {
    let core = [0u8, b'a', b's', b'm', 1, 0, 0, 0];
    let err = runtime().load(Path::new("core.wasm"), &core).err().unwrap();
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err}");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
}

#[test]
fn a_file_that_is_not_wasm_is_refused() {
    let err = runtime()
        .load(Path::new("charm.txt"), b"#!/bin/sh\necho hi\n")
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err}");
}

#[test]
fn a_component_of_another_world_is_refused_naming_what_is_missing() {
    let err = runtime()
        .load_file(Path::new(guests::OTHER_WORLD))
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{text}");
    assert!(text.contains("missing export `metadata`"), "{text}");
    assert!(text.contains("missing export `handle-hook`"), "{text}");
    assert!(
        text.contains("imports `test:other/salutations@0.1.0`, which this host does not provide"),
        "{text}"
    );
}

#[test]
fn a_truncated_charm_is_refused_when_it_compiles() {
    let bytes = std::fs::read(guests::EMPTY).unwrap();
    let err = runtime()
        .load(Path::new("truncated.wasm"), &bytes[..bytes.len() / 2])
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, LoadError::Wasm { .. }), "{text}");
    assert!(
        text.starts_with("truncated.wasm: cannot compile component: "),
        "{text}"
    );
}

#[test]
fn random_bytes_are_refused_with_or_without_a_wasm_header() {
    // A fixed sequence (xorshift), so a failure can be replayed.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..64 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let err = runtime()
        .load(Path::new("noise.wasm"), &noise)
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err}");
    // With a component's header, the rest is still noise.
    let mut headed = vec![0u8, b'a', b's', b'm', 0x0d, 0, 1, 0];
    headed.extend_from_slice(&noise);
    let err = runtime()
        .load(Path::new("noise.wasm"), &headed)
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::Wasm { .. }), "{err}");
}

#[test]
fn a_charm_larger_than_the_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.wasm");
    // Sparse: 100 MiB that take no disk.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(100 << 20).unwrap();
    let err = runtime().load_file(&path).err().unwrap();
    assert!(matches!(err, LoadError::TooLarge { .. }), "{err}");
    assert!(
        err.to_string()
            .ends_with("huge.wasm: 104857600 bytes; a charm may be at most 33554432 bytes"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    let err = runtime()
        .load_file(Path::new("/nonexistent/charm.wasm"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/charm.wasm"), "{err}");
}
