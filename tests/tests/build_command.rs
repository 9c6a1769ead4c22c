//! `charm-host build` through the binary: the template charm built into its small module
//! (wasm32-wasip2, the `charm` profile given through cargo's environment, no edit of its
//! Cargo.toml), inspected, in a table and as JSON; a directory with no crate and a
//! toolchain without the target refused, naming what to do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charms/template")
}

/// Where these builds go: the directory `charm_test::WasmContext::build` uses too, so the
/// template is compiled once for both.
fn target_dir() -> PathBuf {
    charm_test::build_dir(&template())
}

fn build(args: &[&str]) -> Output {
    Command::new(charm_tests::charm_host_binary())
        .arg("build")
        .args(args)
        // The test's own toolchain and flags are not the charm's.
        .env_remove("RUSTC")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("charm-host runs")
}

fn ok(args: &[&str]) -> String {
    let out = build(args);
    assert!(
        out.status.success(),
        "build {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn builds_the_template_into_a_stripped_module_and_inspects_it() {
    let template = template();
    let dir = target_dir();
    let args = [
        template.to_str().unwrap(),
        "--target-dir",
        dir.to_str().unwrap(),
        "--format",
        "json",
    ];
    let out: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let module = PathBuf::from(out["module"].as_str().unwrap());
    assert_eq!(module, dir.join("wasm32-wasip2/charm/template.wasm"));
    let bytes = std::fs::read(&module).unwrap();
    assert_eq!(out["size"], bytes.len() as u64);
    assert_eq!(&bytes[..4], b"\0asm");
    // Stripped: no DWARF section (the workspace's release profile keeps line tables).
    assert!(
        !bytes.windows(7).any(|w| w == b".debug_"),
        "{} still has debug sections",
        module.display()
    );
    assert_eq!(out["contract"], "juju:charm@0.2.4");
    assert_eq!(out["metadata"]["name"], "template");
    assert_eq!(out["metadata"]["relations"][0]["name"], "db");
    assert_eq!(out["metadata"]["actions"][0]["name"], "greet");

    // The same as a table, from the Cargo.toml's path this time.
    let manifest = template.join("Cargo.toml");
    let table = ok(&[
        manifest.to_str().unwrap(),
        "--target-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(
        table.contains(&format!("Module    {}", module.display())),
        "{table}"
    );
    assert!(
        table.contains(&format!("Size      {} bytes", bytes.len())),
        "{table}"
    );
    assert!(table.contains("Charm     template"), "{table}");
    assert!(table.contains("greeting  string  \"hello\""), "{table}");
}

#[test]
fn a_directory_with_no_crate_is_refused_by_name() {
    let empty = tempfile::tempdir().unwrap();
    let out = build(&[empty.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: no Cargo.toml here", empty.path().display())),
        "{stderr}"
    );
}

#[test]
fn a_toolchain_without_the_target_is_refused_with_the_rustup_command() {
    // A crate whose toolchain file names a toolchain without wasm32-wasip2: nightly, which
    // the fuzzing set-up installs, when it lacks the target.
    let has_target = Command::new("rustup")
        .args(["+nightly", "target", "list", "--installed"])
        .output();
    let Ok(listed) = has_target else {
        eprintln!("no rustup: nothing to check");
        return;
    };
    let listed = String::from_utf8_lossy(&listed.stdout);
    if !listed.lines().any(|l| !l.is_empty()) || listed.lines().any(|l| l == "wasm32-wasip2") {
        eprintln!("nightly is missing or has wasm32-wasip2: nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
    std::fs::write(
        dir.path().join("rust-toolchain.toml"),
        "[toolchain]\nchannel = \"nightly\"\n",
    )
    .unwrap();
    let out = Command::new(charm_tests::charm_host_binary())
        .arg("build")
        .arg(dir.path())
        // The toolchain rustup chose for this test would override the crate's file.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rustup target add wasm32-wasip2"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("target").exists(),
        "nothing is built when the target is missing"
    );
}
