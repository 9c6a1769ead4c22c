//! Test a charm's compiled `.wasm` with the scenarios its native tests already run.
//!
//! `charm_sdk::testing` runs a hook natively: no wasm, no host. A scenario written against
//! [`HookRunner`](charm_sdk::testing::HookRunner) also runs here, against the module built
//! from the same crate, through `charm-host`'s loader, sandbox, hook context and imports:
//! the component's embedded metadata, its contract version, the host's limits and its
//! traps are then part of the test.
//!
//! Add it as a dev-dependency only (it brings wasmtime, which the charm's own build never
//! needs), then run a scenario both ways:
//!
//! ```no_run
//! use charm_sdk::testing::{Context, HookRunner, State};
//! use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
//! use charm_test::WasmContext;
//!
//! # struct Hello;
//! # impl Charm for Hello {
//! #     fn metadata() -> Metadata { Metadata::new("hello") }
//! #     fn handle(m: &Model, _: Event) -> HookResult { m.unit().set_status(Status::active(""))?; Ok(()) }
//! # }
//! fn starts_active(runner: &dyn HookRunner) {
//!     let out = runner.run(Event::Start, State::default());
//!     assert_eq!(out.state.unit_status, Status::active(""));
//! }
//!
//! // Natively:
//! starts_active(&Context::<Hello>::new());
//! // Against the module `charm-host build` would make of this crate:
//! starts_active(&WasmContext::build(env!("CARGO_MANIFEST_DIR"))?);
//! # Ok::<(), charm_test::Error>(())
//! ```
//!
//! [`WasmContext::build`] builds the crate with [`charm_host::build`] (target
//! `wasm32-wasip2`, profile `charm`) in a directory of its own under the test's target
//! directory, so the test's cargo and the charm's build never wait on each other's lock;
//! [`WasmContext::load`] takes a module built already.

#![deny(missing_docs)]

mod wasm_context;

use std::path::{Path, PathBuf};

pub use charm_host::build::BuildError;
pub use wasm_context::WasmContext;

/// Why a [`WasmContext`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The charm crate did not build.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The module did not load: not a component, another world, bad metadata, ...
    #[error(transparent)]
    Load(#[from] charm_host::charm::LoadError),
    /// The host's engine did not start.
    #[error("the charm runtime does not start: {0}")]
    Runtime(String),
}

/// Where [`WasmContext::build`] builds a charm: `charm-test/` in the target directory of
/// the running test (cargo runs tests from `<target>/<profile>/deps/`), or in the crate's
/// `target/` when the test does not run from one.
///
/// ```
/// let dir = charm_test::build_dir(std::path::Path::new("my-charm"));
/// assert!(dir.ends_with("charm-test"));
/// ```
pub fn build_dir(crate_dir: &Path) -> PathBuf {
    let target = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps")
            .then(|| deps.parent()?.parent().map(Path::to_path_buf))
            .flatten()
    });
    target
        .unwrap_or_else(|| crate_dir.join("target"))
        .join("charm-test")
}
