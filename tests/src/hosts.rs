//! Starting `charm-host` processes and running its commands, as the process tests do.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::charm_host_binary;

/// The lease flags of hosts in process tests: 3 s leases renewed every 0.5 s, with a 1.5 s
/// guarantee, so the units and leaderships of a host stopped or killed move within seconds.
pub const SHORT_LEASES: [&str; 8] = [
    "--lease-duration",
    "3",
    "--renew-interval",
    "0.5",
    "--retry-period",
    "0.25",
    "--drift-margin",
    "1.5",
];

/// `charm-host run` with [`SHORT_LEASES`], its standard output dropped and its log (standard
/// error) written to `log`; the caller adds the bundle, the store and the rest.
pub fn host_run(log: &Path) -> Command {
    let mut run = Command::new(charm_host_binary());
    run.arg("run")
        .args(SHORT_LEASES)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("the host's log can be created"));
    run
}

/// Runs `charm-host ARGS` in `dir` to its end. `RUST_BACKTRACE` is set, as an operator's
/// shell may have it: an error must still read as one.
pub fn charm_host(dir: &Path, args: &[&str]) -> Output {
    Command::new(charm_host_binary())
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("charm-host runs")
}

/// Runs `charm-host ARGS` in `dir`, which must succeed; its standard output.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = charm_host(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `charm-host ARGS` in `dir`, which must fail with an error saying `why`, and no
/// backtrace.
pub fn refused(dir: &Path, args: &[&str], why: &str) {
    let out = charm_host(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(stderr.contains(why), "{args:?}: {stderr}");
    assert!(!stderr.contains("backtrace"), "{args:?}: {stderr}");
}
