//! Every committed fuzz corpus (`host/fuzz/corpus/<target>/`), replayed through the same
//! checks the fuzz targets run (`host/fuzz/src/checks.rs`), on the stable toolchain: the
//! seeds, and each input that once found a bug, stay fixed. Fuzzing itself is
//! `cargo +nightly fuzz run <target>` in `host/` (see docs/fuzzing.md).

use std::path::{Path, PathBuf};

#[path = "../../host/fuzz/src/checks.rs"]
#[allow(dead_code)]
mod checks;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../host/fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} has no inputs", dir.display());
    inputs
}

fn replay(target: &str, check: impl Fn(&[u8])) {
    for (path, input) in corpus(target) {
        let replayed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        assert!(replayed.is_ok(), "{} fails its check", path.display());
    }
}

#[test]
fn the_bundle_corpus_passes() {
    replay("bundle", checks::bundle);
}

#[test]
fn the_pod_spec_corpus_passes() {
    replay("pod_spec", checks::pod_spec);
}

#[test]
fn the_connection_string_corpus_passes() {
    replay("connection_string", checks::connection_string);
}

#[test]
fn the_records_corpus_passes() {
    replay("records", checks::records);
}

#[test]
fn the_sqlite_records_corpus_passes() {
    replay("sqlite_records", checks::sqlite_records);
    std::fs::remove_dir_all(checks::scratch()).unwrap();
}

#[test]
fn the_metadata_corpus_passes() {
    use arbitrary::Arbitrary;
    replay("metadata", |input| {
        // As libFuzzer hands a structured target its input.
        let bytes = arbitrary::Unstructured::new(input);
        if let Ok(declared) = checks::Declared::arbitrary_take_rest(bytes) {
            checks::metadata(declared);
        }
    });
}
