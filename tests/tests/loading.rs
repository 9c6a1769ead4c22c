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
            Err(LoadError::WrongWorld { .. }) => assert_eq!(name, "other-world"),
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
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    let err = runtime()
        .load_file(Path::new("/nonexistent/charm.wasm"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/charm.wasm"), "{err}");
}
