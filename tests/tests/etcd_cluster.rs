//! Three `charm-host` processes on a three-member etcd cluster on loopback, every host
//! given every member: hooks keep running when a follower member is killed with kill -9,
//! and when the leader member is; afterwards one leader per application, no two units
//! committed as leader in one term, no leader's write refused, terms never went back (the
//! checks of `etcd_hosts`).
//!
//! It prints how long hooks stalled after each loss: the longest pause between two hook
//! commits (any host, any unit) in the ten seconds after the kill, beside the longest pause
//! in the ten seconds before it (`--nocapture` shows them). Run it several times for a
//! median: `for i in $(seq 10); do cargo test --release -p charm-tests --features etcd
//! --test etcd_cluster -- --nocapture 2>&1 | grep stall; done`.

#![cfg(feature = "etcd")]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use charm_tests::etcd_model::{HOSTS, Model};
use charm_tests::etcd_server::EtcdCluster;

/// The window of commits looked at, before and after a loss.
const WINDOW: Duration = Duration::from_secs(10);

/// Seconds since midnight UTC, as the hosts' log lines stamp them.
fn now_of_day() -> f64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    since_epoch % 86_400.0
}

/// The time of day of every hook commit in the hosts' logs, sorted.
fn commits(model: &Model) -> Vec<f64> {
    let mut times = Vec::new();
    for log in model.logs() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("hook committed")) {
            // `2026-12-04T23:50:01.123456Z  DEBUG ...`
            let Some(clock) = line
                .split_whitespace()
                .next()
                .and_then(|stamp| stamp.split_once('T'))
                .map(|(_, clock)| clock.trim_end_matches('Z'))
            else {
                continue;
            };
            let parts: Vec<f64> = clock.split(':').filter_map(|p| p.parse().ok()).collect();
            if let [h, m, s] = parts[..] {
                times.push(h * 3600.0 + m * 60.0 + s);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    times
}

/// The longest pause without a hook commit in `[from, to]`, the ends included as pauses.
fn longest_pause(times: &[f64], from: f64, to: f64) -> f64 {
    let mut last = from;
    let mut longest: f64 = 0.0;
    for &t in times.iter().filter(|t| **t >= from && **t <= to) {
        longest = longest.max(t - last);
        last = t;
    }
    longest.max(to - last)
}

/// Kills member `victim` and waits for the hosts to commit `HOSTS * 4` hooks after it,
/// and for the window to pass; returns (longest pause before, longest pause after).
fn lose_member(cluster: &mut EtcdCluster, model: &Model, victim: usize, what: &str) -> (f64, f64) {
    let killed_at = now_of_day();
    let started = Instant::now();
    cluster.members[victim].kill();
    let limit = Duration::from_secs(30);
    loop {
        let after = commits(model).iter().filter(|t| **t > killed_at).count();
        if after >= HOSTS * 4 && started.elapsed() >= WINDOW {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {after} hooks committed in {limit:?} after member {victim} was killed\n{}",
            model.log_tails()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let times = commits(model);
    let window = WINDOW.as_secs_f64();
    (
        longest_pause(&times, killed_at - window, killed_at),
        longest_pause(&times, killed_at, killed_at + window),
    )
}

#[test]
fn hooks_run_on_when_a_follower_member_and_then_the_leader_member_is_killed() {
    let mut cluster = EtcdCluster::start(3);
    cluster.wait_leader(Duration::from_secs(30));
    let mut model = Model::new(cluster.store_spec("models/test"));
    // A steady stream of hooks to watch: update-status on every unit each second.
    model.host_args(&["--update-status-interval", "1"]);
    model.start_all();
    model.wait_settled(Duration::from_secs(90));
    let terms_before: Vec<u64> = ["discourse", "postgresql"]
        .iter()
        .map(|app| model.leader(app).expect("a leader").1)
        .collect();
    // A full window of steady hooks before the first loss.
    std::thread::sleep(WINDOW);

    let leader = cluster.wait_leader(Duration::from_secs(10));
    let follower = (leader + 1) % cluster.members.len();
    let (before, after) = lose_member(&mut cluster, &model, follower, "follower lost");
    eprintln!(
        "stall after kill -9 of a follower member: longest pause between hook commits {after:.2} s (before the kill: {before:.2} s)"
    );
    cluster.members[follower].restart();
    cluster.wait_leader(Duration::from_secs(30));
    model.wait_settled(Duration::from_secs(60));
    std::thread::sleep(WINDOW);

    let leader = cluster.wait_leader(Duration::from_secs(10));
    let (before, after) = lose_member(&mut cluster, &model, leader, "leader lost");
    eprintln!(
        "stall after kill -9 of the leader member: longest pause between hook commits {after:.2} s (before the kill: {before:.2} s)"
    );
    let new_leader = cluster.wait_leader(Duration::from_secs(30));
    assert_ne!(new_leader, leader, "the killed member still leads");
    cluster.members[leader].restart();

    model.wait_settled(Duration::from_secs(60));
    for (app, before) in ["discourse", "postgresql"].iter().zip(terms_before) {
        let (_, term) = model.leader(app).expect("a leader");
        assert!(term >= before, "{app}: term {term} after {before}");
    }
    // No two units committed as leader in one term, no leader-only write was refused.
    model.check_logs();
}
