//! Builds the guest charms for wasm32-wasip2 into OUT_DIR, as wasmtime's test-programs
//! artifacts do, and writes one constant per guest plus `foreach_guest!`, so no test can
//! forget a guest.

use std::path::PathBuf;
use std::process::Command;

const GUESTS: &[&str] = &[
    "discourse",
    "postgresql",
    "kv",
    "probe",
    "other-world",
    "empty",
    "hostile",
    "contract-v0-1",
    "contract-v0-2-1",
    "contract-v0-2-3",
    "contract-unknown",
];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest.parent().expect("tests/ is in the workspace root");
    for dir in ["wit", "sdk", "charms", "tests/guests"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    // Our own target directory: the outer cargo holds the lock on the shared one.
    let target_dir = out.join("guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--profile", "charm", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target_dir)
        // The outer build's flags are for the host, not for wasm.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    // The next release of discourse first (built into the same place, so it is copied
    // out before the guests' build replaces it), to upgrade discourse to.
    let mut next = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    next.current_dir(root)
        .args(["build", "--profile", "charm", "--target", "wasm32-wasip2"])
        .args(["-p", "discourse", "--features", "discourse/next-release"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    assert!(
        next.status()
            .expect("cannot run cargo to build the guest charms")
            .success(),
        "building discourse's next release failed"
    );
    let discourse_next = out.join("discourse_next.wasm");
    std::fs::copy(
        target_dir.join("wasm32-wasip2/charm/discourse.wasm"),
        &discourse_next,
    )
    .expect("cannot copy discourse's next release");
    for guest in GUESTS {
        cmd.args(["-p", guest]);
    }
    let status = cmd
        .status()
        .expect("cannot run cargo to build the guest charms");
    assert!(
        status.success(),
        "building the guest charms failed; is the target installed? (rustup target add wasm32-wasip2)"
    );
    let mut consts = String::new();
    let mut names = String::new();
    for guest in GUESTS {
        let ident = guest.replace('-', "_");
        let path = target_dir
            .join("wasm32-wasip2/charm")
            .join(format!("{ident}.wasm"));
        assert!(
            path.is_file(),
            "guest {guest} was not built at {}",
            path.display()
        );
        consts.push_str(&format!(
            "/// The compiled `{guest}` guest.\npub const {}: &str = {:?};\n",
            ident.to_uppercase(),
            path.display().to_string()
        ));
        names.push_str(&format!("$m!({});\n", ident.to_uppercase()));
    }
    // Not in `foreach_guest!`: a release of discourse, not a guest of its own.
    consts.push_str(&format!(
        "/// The compiled `discourse` guest's next release: another image by default, and a \
         `plugins` option.\npub const DISCOURSE_NEXT: &str = {:?};\n",
        discourse_next.display().to_string()
    ));
    let foreach = format!(
        "/// Invokes `$m!(guest)` for every guest.\n#[macro_export]\nmacro_rules! foreach_guest {{\n($m:ident) => {{\n{names}}};\n}}\n"
    );
    std::fs::write(out.join("guests.rs"), consts + &foreach).expect("cannot write guests.rs");
}
