//! Crash safety on the embedded SQLite store: `charm-host run` is killed with SIGKILL at
//! random moments during the demo bundle (plus a counting probe) and restarted on the same
//! store, again and again. Afterwards no acknowledged commit is missing, pod spec revisions
//! have no gap, no hook's commit applied twice or in part, and every pending hook ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use charm_host::store::{Claim, LeaseStore, SqliteStore, StateStore};
use charm_tests::guests;

fn write_bundle(dir: &Path) -> PathBuf {
    for (name, path) in [
        ("discourse", guests::DISCOURSE),
        ("postgresql", guests::POSTGRESQL),
        ("probe", guests::PROBE),
    ] {
        std::fs::copy(path, dir.join(format!("{name}.wasm"))).unwrap();
    }
    let bundle = dir.join("bundle.yaml");
    std::fs::write(
        &bundle,
        r#"applications:
  discourse:
    charm: discourse.wasm
    num_units: 3
  postgresql:
    charm: postgresql.wasm
    num_units: 1
  probe:
    charm: probe.wasm
    num_units: 2
    options:
      mode: count
relations:
  - ["discourse:db", "postgresql:db"]
  - ["probe:db", "postgresql:db"]
"#,
    )
    .unwrap();
    bundle
}

/// `charm-host run BUNDLE --until-idle` on the SQLite file `db`.
fn run_until_idle(bundle: &Path, db: &Path) -> Command {
    let mut run = Command::new(charm_tests::charm_host_binary());
    run.args([
        "run",
        bundle.to_str().unwrap(),
        "--until-idle",
        "--timeout",
        "60",
    ])
    .args([
        "--format",
        "json",
        "--store",
        &format!("sqlite:{}", db.display()),
    ])
    // A killed run's units are taken over once their leases lapse: short ones.
    .args(charm_tests::hosts::SHORT_LEASES);
    run
}

/// A tiny deterministic generator, so a failure can be replayed from its seed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Pod spec revisions the host acknowledged, by application, read from its debug log.
fn acknowledged(log: &str) -> Vec<(String, u64)> {
    log.lines()
        .filter(|l| l.contains("hook committed"))
        .filter_map(|l| {
            let field = |name: &str| {
                // The event's own fields, after the hook span's (`hook{unit=.. term=..}:`).
                let rest = &l[l.rfind(&format!(" {name}="))? + name.len() + 2..];
                Some(rest.split_whitespace().next()?.to_string())
            };
            let unit = field("unit")?;
            let revision: u64 = field("pod_spec_revision")?.parse().ok()?;
            (revision > 0).then(|| (unit.split('/').next().unwrap().to_string(), revision))
        })
        .collect()
}

#[test]
fn killed_at_random_moments_the_host_loses_nothing_and_applies_nothing_twice() {
    let kills_wanted: u32 = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(200);
    // Another seed draws other kill moments (`CRASH_SEED`); a failure names its seed.
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    eprintln!("CRASH_SEED={seed}");
    let mut rng = Lcg(seed);
    let mut kills = 0;
    let mut stores = 0;
    while kills < kills_wanted {
        stores += 1;
        let dir = tempfile::tempdir().unwrap();
        let bundle = write_bundle(dir.path());
        let db = dir.path().join("model.db");
        let mut acked = Vec::new();
        // Up to ten kills on this store, then one run to the end.
        for attempt in 0..=10 {
            let log_path = dir.path().join(format!("run-{attempt}.log"));
            let mut child = run_until_idle(&bundle, &db)
                .env("RUST_LOG", "charm_host::agent=debug")
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log_path).unwrap())
                .spawn()
                .unwrap();
            let last = attempt == 10 || kills >= kills_wanted;
            if !last {
                let delay = Duration::from_millis(rng.below(1500));
                let started = Instant::now();
                while started.elapsed() < delay && child.try_wait().unwrap().is_none() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let finished = if last || child.try_wait().unwrap().is_some() {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "run failed: {}",
                    std::fs::read_to_string(&log_path).unwrap()
                );
                true
            } else {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
                false
            };
            acked.extend(acknowledged(&std::fs::read_to_string(&log_path).unwrap()));
            if finished {
                break;
            }
        }
        check_store(&db, &acked);
    }
    eprintln!("{kills} kills over {stores} stores");
}

/// A host killed while one of its agents led an application leaves that lease to lapse. A
/// host run until idle on the same store must not call itself idle while the lease stands:
/// its units would have run their hooks as followers, and the pod spec, set by the leader,
/// would never be written. It waits the lease out, then a unit of its own leads and runs
/// leader-elected.
#[test]
fn a_leader_lease_left_by_a_killed_host_is_waited_out_before_idle() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = write_bundle(dir.path());
    let db = dir.path().join("model.db");
    let dead = "discourse/2#killed-host.0000dead";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = rt.block_on(async {
        let store = SqliteStore::open(&db, "default").unwrap();
        store
            .claim("discourse", dead, Duration::from_secs(2))
            .await
            .unwrap()
    });
    let Claim::Held(dead_lease) = held else {
        panic!("the empty store's lease was not granted: {held:?}")
    };
    let started = Instant::now();
    let out = run_until_idle(&bundle, &db).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waited = started.elapsed();
    let store = SqliteStore::open(&db, "default").unwrap();
    let spec = rt
        .block_on(store.pod_spec("discourse"))
        .unwrap()
        .unwrap_or_else(|| panic!("discourse has no pod spec after {waited:?}"));
    let db_env = spec.spec["containers"][0]["envConfig"]["DISCOURSE_DB"]
        .as_str()
        .unwrap_or_default();
    assert!(db_env.starts_with("host=postgresql-0"), "{db_env}");
    // The leader that wrote it ran leader-elected in a term after the killed host's.
    let elected: Vec<u64> = rt.block_on(async {
        let mut terms = Vec::new();
        for unit in store.units("discourse").await.unwrap() {
            terms.extend(store.snapshot(&unit).await.unwrap().elected_term);
        }
        terms
    });
    assert!(
        elected.iter().any(|t| *t > dead_lease.term),
        "no discourse unit ran leader-elected after term {}: {elected:?}",
        dead_lease.term
    );
}

fn check_store(db: &Path, acked: &[(String, u64)]) {
    let store = SqliteStore::open(db, "default").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Every pending hook ran.
        for app in ["discourse", "postgresql", "probe"] {
            for unit in store.units(app).await.unwrap() {
                assert_eq!(
                    store.queued(&unit).await.unwrap(),
                    vec![],
                    "{unit} still has hooks queued"
                );
            }
        }
        // Revisions strictly increasing with no gap, and every acknowledged one present.
        for app in ["discourse", "postgresql"] {
            let history = store.pod_spec_history(app).unwrap();
            let revisions: Vec<u64> = history.iter().map(|p| p.revision).collect();
            let expected: Vec<u64> = (1..=revisions.len() as u64).collect();
            assert_eq!(revisions, expected, "{app}: revisions with a gap");
            for (a, r) in acked.iter().filter(|(a, _)| a == app) {
                assert!(
                    revisions.contains(r),
                    "{a}: acknowledged revision {r} is missing: {revisions:?}"
                );
            }
        }
        let spec = store
            .pod_spec("discourse")
            .await
            .unwrap()
            .expect("discourse has a pod spec");
        let db_env = spec.spec["containers"][0]["envConfig"]["DISCOURSE_DB"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(db_env.starts_with("host=postgresql-0"), "{db_env}");
        // No hook applied twice, none in part.
        for unit in store.units("probe").await.unwrap() {
            let stored = store.snapshot(&unit).await.unwrap().stored;
            for hook in ["install", "config-changed", "start", "db-relation-created"] {
                assert_eq!(
                    stored.get(&format!("runs:{hook}")).map(String::as_str),
                    Some("1"),
                    "{unit}: {hook}"
                );
            }
            assert_eq!(
                stored.get("total-a"),
                stored.get("total-b"),
                "{unit}: a commit applied in part"
            );
        }
        let status = store.status().await.unwrap();
        for app in ["discourse", "postgresql", "probe"] {
            let leaders = status
                .units
                .iter()
                .filter(|u| u.name.starts_with(&format!("{app}/")) && u.leader)
                .count();
            assert!(leaders <= 1, "{app}: {leaders} leaders");
        }
    });
}
