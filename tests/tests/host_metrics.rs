//! `charm-host run --metrics-addr`: a running host's `/metrics` passes `promtool check
//! metrics`, a real Prometheus scraping it has the host's series in its query API, and
//! `--log-format json` writes one JSON object per line, a hook's lines (the charm's own
//! included) carrying its unit, hook and term. With etcd: `/readyz` is unready while the
//! store does not answer, and ready again after; `/healthz` stays ok.
//!
//! Needs Debian's `prometheus` package (`prometheus` and `promtool` on the PATH).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use charm_tests::guests;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A plain HTTP/1.0 GET on loopback: the status code and the body.
fn get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: no header end in {answer:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("GET {path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes a query parameter's value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `probe` every 100 ms until it gives `Some`, failing after `limit` with `what` and
/// the last answer.
fn wait_for<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Result<Option<T>>) -> T {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        match probe() {
            Ok(Some(found)) => return found,
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not after {limit:?} (last error: {last})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `charm-host run` serving its endpoints on a free loopback port, its stderr in `log`.
struct Host {
    process: Process,
    port: u16,
    log: PathBuf,
}

impl Host {
    fn start(dir: &Path, bundle: &Path, store: &str, args: &[&str]) -> Host {
        let port = free_port();
        let log = dir.join(format!("host-{port}.log"));
        let child = Command::new(charm_tests::charm_host_binary())
            .args(["run", bundle.to_str().unwrap(), "--store", store])
            .args(["--metrics-addr", &port.to_string()])
            .args(args)
            .env_remove("RUST_LOG")
            .env("CHARM_HOST_CACHE", dir.join("cache"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("charm-host starts");
        Host {
            process: Process(child),
            port,
            log,
        }
    }

    fn get(&mut self, path: &str) -> Result<(u16, String)> {
        if let Some(status) = self.process.0.try_wait()? {
            bail!(
                "charm-host exited with {status}: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        get(self.port, path)
    }

    /// Waits for `/readyz` to answer `status`; returns its body.
    fn wait_ready(&mut self, status: u16, limit: Duration) -> String {
        wait_for(limit, &format!("/readyz answers {status}"), || {
            let (got, body) = self.get("/readyz")?;
            Ok((got == status).then_some(body))
        })
    }
}

/// A discourse related to a PostgreSQL, and a probe charm that logs in every hook; one unit
/// each, so each leads.
fn model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (guest, file) in [
        (guests::DISCOURSE, "discourse.wasm"),
        (guests::POSTGRESQL, "postgresql.wasm"),
        (guests::PROBE, "probe.wasm"),
    ] {
        std::fs::copy(guest, dir.path().join(file)).unwrap();
    }
    std::fs::write(
        dir.path().join("bundle.yaml"),
        "applications:\n  discourse: {charm: discourse.wasm, num_units: 1}\n  postgresql: {charm: postgresql.wasm, num_units: 1}\n  probe: {charm: probe.wasm, num_units: 1, options: {mode: log}}\nrelations:\n  - [\"discourse:db\", \"postgresql:db\"]\n",
    )
    .unwrap();
    dir
}

/// The series every scrape of this model must have once its hooks ran, as PromQL.
const EXPECTED: &[&str] = &[
    r#"charm_host_hooks_total{application="discourse",hook="db-relation-changed",result="committed"}"#,
    r#"charm_host_hooks_total{application="probe",hook="leader-elected",result="committed"}"#,
    r#"charm_host_hook_duration_seconds_count{application="postgresql",hook="install"}"#,
    r#"charm_host_queued_hooks{application="discourse"}"#,
    r#"charm_host_units{application="discourse"}"#,
    r#"charm_host_lease_held{application="discourse"}"#,
    r#"charm_host_lease_term{application="discourse"}"#,
    r#"charm_host_lease_guarantee_remaining_seconds{application="discourse"}"#,
    r#"charm_host_lease_renewals_total{application="discourse"}"#,
    r#"charm_host_leadership_changes_total{application="discourse"}"#,
    r#"charm_host_store_request_duration_seconds_count{operation="commit"}"#,
    r#"charm_host_store_request_duration_seconds_count{operation="claim"}"#,
    r#"charm_host_charm_loads_total{source="compiled"}"#,
    r#"process_cpu_seconds_total"#,
    r#"process_resident_memory_bytes"#,
];

/// The value of the one sample of `series` (a metric name with its labels, as written in
/// the exposition) in `exposition`.
fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn prometheus_scrapes_a_running_host_and_its_logs_are_json() {
    let dir = model_dir();
    let store = format!("sqlite:{}", dir.path().join("model.db").display());
    let mut host = Host::start(
        dir.path(),
        &dir.path().join("bundle.yaml"),
        &store,
        &["--log-format", "json", "-v"],
    );
    host.wait_ready(200, Duration::from_secs(60));
    assert_eq!(host.get("/healthz").unwrap(), (200, "ok\n".to_string()));
    // The model settles: discourse read PostgreSQL's connection string and leads.
    let exposition = wait_for(Duration::from_secs(60), "the model's hooks ran", || {
        let (_, body) = host.get("/metrics")?;
        let related = sample(
            &body,
            r#"charm_host_hooks_total{application="discourse",hook="db-relation-changed",result="committed"}"#,
        )
        .is_some();
        let leads = sample(&body, r#"charm_host_lease_held{application="discourse"}"#) == Some(1.0);
        Ok((related && leads).then_some(body))
    });
    assert!(
        sample(
            &exposition,
            r#"charm_host_lease_term{application="discourse"}"#
        )
        .is_some_and(|term| term >= 1.0),
        "{exposition}"
    );
    let remaining = sample(
        &exposition,
        r#"charm_host_lease_guarantee_remaining_seconds{application="discourse"}"#,
    );
    // The default lease: 15 s, 5 s of it not counted on.
    assert!(
        remaining.is_some_and(|r| r > 0.0 && r <= 10.0),
        "{remaining:?}"
    );
    assert_eq!(
        sample(&exposition, r#"charm_host_units{application="discourse"}"#),
        Some(1.0)
    );
    // No label names a unit.
    assert!(!exposition.contains("unit=\""), "{exposition}");

    // promtool's own parser and lint.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs: install Debian's prometheus package");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{exposition}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // A real Prometheus scraping the host every second.
    let prometheus_port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: charm-host\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            host.port
        ),
    )
    .unwrap();
    let prometheus_log = dir.path().join("prometheus.log");
    let _prometheus = Process(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&prometheus_log).unwrap())
            .spawn()
            .expect("prometheus runs: install Debian's prometheus package"),
    );
    let query = |promql: &str| -> Result<Option<String>> {
        let (status, body) = get(
            prometheus_port,
            &format!("/api/v1/query?query={}", encode(promql)),
        )?;
        if status != 200 {
            bail!("query {promql}: {status} {body}");
        }
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        let result = &answer["data"]["result"];
        Ok(result
            .as_array()
            .is_some_and(|r| !r.is_empty())
            .then(|| result.to_string()))
    };
    let up = wait_for(
        Duration::from_secs(60),
        "Prometheus scraped the host",
        || query(r#"up{job="charm-host"} == 1"#),
    );
    assert!(up.contains(&format!("127.0.0.1:{}", host.port)), "{up}");
    for series in EXPECTED {
        let found = query(series).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            found.is_some(),
            "Prometheus has no {series}; log: {}",
            std::fs::read_to_string(&prometheus_log).unwrap_or_default()
        );
    }

    // --log-format json: every line an object; the probe's own log line from its
    // leader-elected hook carries the hook's unit, hook and term.
    drop(host.process);
    let log = std::fs::read_to_string(&host.log).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let charm_line = lines
        .iter()
        .find(|l| l["target"] == "charm" && l["message"] == "handling leader-elected")
        .unwrap_or_else(|| panic!("no charm log line from leader-elected in {log}"));
    let span = &charm_line["span"];
    assert_eq!(span["unit"], "probe/0", "{charm_line}");
    assert_eq!(span["hook"], "leader-elected", "{charm_line}");
    assert!(
        span["term"].as_u64().is_some_and(|t| t >= 1),
        "{charm_line}"
    );
}

#[test]
fn bad_metrics_addr_is_refused_naming_the_flag() {
    let dir = model_dir();
    let out = Command::new(charm_tests::charm_host_binary())
        .args(["run", "bundle.yaml", "--store", "memory", "--until-idle"])
        .args(["--metrics-addr", "no such host:port"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--metrics-addr no such host:port"),
        "{stderr}"
    );
}

#[cfg(feature = "etcd")]
#[test]
fn readyz_is_unready_while_the_store_does_not_answer() {
    use charm_tests::etcd_server::EtcdServer;

    let dir = model_dir();
    let etcd = EtcdServer::start();
    let mut host = Host::start(
        dir.path(),
        &dir.path().join("bundle.yaml"),
        &etcd.store_spec("models/metrics"),
        &[],
    );
    host.wait_ready(200, Duration::from_secs(60));
    // Frozen: connections stay open and nothing is answered.
    etcd.pause();
    let why = host.wait_ready(503, Duration::from_secs(30));
    assert!(why.contains("store"), "{why}");
    assert_eq!(host.get("/healthz").unwrap().0, 200);
    etcd.resume();
    host.wait_ready(200, Duration::from_secs(30));
}
