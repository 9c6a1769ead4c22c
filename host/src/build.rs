//! Building a charm crate into the module the host runs: `cargo build` for `wasm32-wasip2`
//! in the `charm` profile (optimised, LTO, one codegen unit, stripped), whatever the crate's
//! own `Cargo.toml` says.
//!
//! The profile is given to cargo through its environment (`CARGO_PROFILE_CHARM_*`, which
//! cargo reads as configuration and puts above `Cargo.toml`), so a charm outside this
//! repository needs no edit to get the small, fast module; the module lands in
//! `<target>/wasm32-wasip2/charm/`, apart from the crate's other builds. `charm-host build`
//! and `charm_test::WasmContext::build` both build through [`build`].
//!
//! ```no_run
//! use charm_host::build::{BuildRequest, build};
//!
//! let built = build(&BuildRequest::new("charms/template"))?;
//! println!("{} ({} bytes)", built.module.display(), built.size);
//! # Ok::<(), charm_host::build::BuildError>(())
//! ```

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target a charm is built for: WASI preview 2 makes a component directly.
pub const TARGET: &str = "wasm32-wasip2";

/// The cargo profile a charm is built in, defined by [`PROFILE_SETTINGS`].
pub const PROFILE: &str = "charm";

/// The `charm` profile, as cargo configuration keys and values: what makes the module small
/// and its hooks fast (the workspace's `[profile.charm]` has the same settings and the
/// measurements behind them).
pub const PROFILE_SETTINGS: &[(&str, &str)] = &[
    ("INHERITS", "release"),
    ("OPT_LEVEL", "3"),
    ("LTO", "true"),
    ("CODEGEN_UNITS", "1"),
    ("STRIP", "true"),
    ("DEBUG", "false"),
    ("INCREMENTAL", "false"),
];

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildRequest {
    /// The charm's crate: its directory or its `Cargo.toml`.
    pub path: PathBuf,
    /// Where cargo builds; `None`: where cargo would (`CARGO_TARGET_DIR`, or the
    /// workspace's `target/`).
    pub target_dir: Option<PathBuf>,
}

impl BuildRequest {
    /// The crate at `path` (a directory or a `Cargo.toml`), built where cargo would build it.
    ///
    /// ```
    /// let request = charm_host::build::BuildRequest::new("my-charm");
    /// assert!(request.target_dir.is_none());
    /// ```
    pub fn new(path: impl Into<PathBuf>) -> Self {
        BuildRequest {
            path: path.into(),
            target_dir: None,
        }
    }

    /// The same request, built in `dir`.
    ///
    /// ```
    /// let request = charm_host::build::BuildRequest::new("my-charm").target_dir("/tmp/t");
    /// assert_eq!(request.target_dir.unwrap(), std::path::Path::new("/tmp/t"));
    /// ```
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }
}

/// A built charm module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltCharm {
    /// The crate's library name (the module's file name without `.wasm`).
    pub name: String,
    /// The `.wasm` component.
    pub module: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// Why a charm could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The path has no `Cargo.toml`.
    #[error("{path}: no Cargo.toml here; give the charm crate's directory or its Cargo.toml")]
    NoManifest {
        /// The path given.
        path: PathBuf,
    },
    /// The Rust toolchain has no standard library for [`TARGET`].
    #[error(
        "the Rust toolchain for {dir} has no {TARGET} target; install it with `rustup target add {TARGET}`"
    )]
    TargetMissing {
        /// The crate's directory, whose toolchain was asked.
        dir: PathBuf,
    },
    /// `cargo` or `rustc` could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// cargo failed; its diagnostics went to standard error.
    #[error("cargo build of {manifest} failed ({status}); its errors are above")]
    Cargo {
        /// The crate's manifest.
        manifest: PathBuf,
        /// How cargo exited.
        status: std::process::ExitStatus,
    },
    /// The build succeeded but made no `.wasm` for the crate.
    #[error(
        "{manifest}: the build made no .wasm; a charm crate has `crate-type = [\"cdylib\", \"rlib\"]` under [lib] (and a virtual workspace manifest builds no charm: give the charm's own directory)"
    )]
    NoModule {
        /// The crate's manifest.
        manifest: PathBuf,
    },
    /// The module was built but cannot be read.
    #[error("{path}: cannot read the built module: {source}")]
    Module {
        /// The module.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Builds the charm crate `request.path` for [`TARGET`] in the [`PROFILE`] profile, and
/// returns its module. cargo's progress and diagnostics go to standard error.
///
/// The outer build's flags (`RUSTFLAGS`, `CARGO_BUILD_TARGET`) are not passed on: they are
/// for the host, not for wasm.
pub fn build(request: &BuildRequest) -> Result<BuiltCharm, BuildError> {
    let manifest = manifest_of(&request.path)?;
    let dir = manifest
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    check_target(&dir)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&dir)
        .args(["build", "--profile", PROFILE, "--target", TARGET])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--message-format", "json-render-diagnostics"])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in PROFILE_SETTINGS {
        cmd.env(format!("CARGO_PROFILE_CHARM_{key}"), value);
    }
    if let Some(target_dir) = &request.target_dir {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    let spawn = |source| BuildError::Spawn {
        program: cargo.to_string_lossy().into_owned(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut module = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(spawn)?;
        if let Some(found) = wasm_artifact(&line, &manifest) {
            module = Some(found);
        }
    }
    let status = child.wait().map_err(spawn)?;
    if !status.success() {
        return Err(BuildError::Cargo { manifest, status });
    }
    let (name, module) = module.ok_or_else(|| BuildError::NoModule {
        manifest: manifest.clone(),
    })?;
    let size = std::fs::metadata(&module)
        .map_err(|source| BuildError::Module {
            path: module.clone(),
            source,
        })?
        .len();
    Ok(BuiltCharm { name, module, size })
}

/// The crate's `Cargo.toml`, absolute.
fn manifest_of(path: &Path) -> Result<PathBuf, BuildError> {
    let manifest = if path.file_name().is_some_and(|n| n == "Cargo.toml") {
        path.to_path_buf()
    } else {
        path.join("Cargo.toml")
    };
    if !manifest.is_file() {
        return Err(BuildError::NoManifest {
            path: path.to_path_buf(),
        });
    }
    std::fs::canonicalize(&manifest).map_err(|_| BuildError::NoManifest {
        path: path.to_path_buf(),
    })
}

/// Whether the toolchain that builds in `dir` (rustup picks it by the directory's
/// `rust-toolchain.toml`) has the target's standard library.
fn check_target(dir: &Path) -> Result<(), BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .current_dir(dir)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|source| BuildError::Spawn {
            program: rustc.to_string_lossy().into_owned(),
            source,
        })?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && !sysroot.join("lib/rustlib").join(TARGET).is_dir() {
        return Err(BuildError::TargetMissing {
            dir: dir.to_path_buf(),
        });
    }
    // A rustc that cannot say where its sysroot is: cargo's own error will say more.
    Ok(())
}

/// The library name and `.wasm` of a cargo `compiler-artifact` message about the crate at
/// `manifest`, if `line` is one.
fn wasm_artifact(line: &str, manifest: &Path) -> Option<(String, PathBuf)> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact"
        || Path::new(message["manifest_path"].as_str()?) != manifest
    {
        return None;
    }
    let module = message["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))?;
    let name = message["target"]["name"].as_str()?.to_string();
    Some((name, PathBuf::from(module)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_a_manifest_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = build(&BuildRequest::new(dir.path())).unwrap_err();
        assert!(matches!(err, BuildError::NoManifest { .. }), "{err}");
        assert!(err.to_string().contains("no Cargo.toml"), "{err}");
    }

    #[test]
    fn the_crates_wasm_is_found_among_cargos_messages() {
        let manifest = Path::new("/c/Cargo.toml");
        let ours = r#"{"reason":"compiler-artifact","manifest_path":"/c/Cargo.toml","target":{"name":"hello"},"filenames":["/t/hello.wasm","/t/libhello.rlib"]}"#;
        let dep = r#"{"reason":"compiler-artifact","manifest_path":"/d/Cargo.toml","target":{"name":"dep"},"filenames":["/t/dep.wasm"]}"#;
        let rlib_only = r#"{"reason":"compiler-artifact","manifest_path":"/c/Cargo.toml","target":{"name":"hello"},"filenames":["/t/libhello.rlib"]}"#;
        assert_eq!(
            wasm_artifact(ours, manifest),
            Some(("hello".into(), PathBuf::from("/t/hello.wasm")))
        );
        assert_eq!(wasm_artifact(dep, manifest), None);
        assert_eq!(wasm_artifact(rlib_only, manifest), None);
        assert_eq!(wasm_artifact("not json", manifest), None);
    }
}
