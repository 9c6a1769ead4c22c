//! The bundle parser: any text given as a bundle gets a verdict (a bundle, or problems
//! naming their lines), never a panic. Charms it names do not exist here, so every
//! bundle that names one is refused after its keys and values are checked.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use charm_host::bundle::{Bundle, BundleError};
use charm_host::charm::{CharmRuntime, RuntimeConfig};
use libfuzzer_sys::fuzz_target;

static RUNTIME: LazyLock<CharmRuntime> = LazyLock::new(|| {
    CharmRuntime::new(RuntimeConfig {
        compile_cache: None,
        ..RuntimeConfig::default()
    })
    .expect("a charm runtime")
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/nonexistent/fuzz/bundle.yaml");
    match Bundle::parse(path, text, &RUNTIME) {
        Ok(_) => {}
        Err(BundleError::Invalid { problems, .. }) => {
            assert!(!problems.is_empty(), "a refused bundle names its problems");
            // YAML's line breaks: LF, CRLF, and a CR alone.
            let lines = 1 + text.matches('\n').count()
                + text.matches('\r').count()
                - text.matches("\r\n").count();
            for problem in &problems {
                if let Some(line) = problem.line {
                    assert!(
                        (1..=lines + 1).contains(&line),
                        "{problem}: line {line} of a {lines}-line bundle"
                    );
                }
                // Rendered as the CLI prints it: must not panic either.
                let _ = problem.to_string();
            }
        }
        Err(other) => {
            let _ = other.to_string();
        }
    }
});
