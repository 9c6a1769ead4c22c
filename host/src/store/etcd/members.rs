//! Which etcd members the client may send requests to.
//!
//! The client spreads requests over every endpoint it was given. A member that died keeps
//! its place there: each request sent to it fails at once with a connect error, and as a
//! failed member carries no load the balancer goes on choosing it. Hooks and renewals then
//! fail far more often than one member in three would explain, for as long as the member
//! stays down. So the store probes each member in the background and keeps only those
//! that answer in the balancer, putting a member back once it answers again. If none
//! answers, all stay: nothing is gained by leaving the client with no member at all.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::Client;
use tokio::task::{AbortHandle, JoinSet};

use super::EtcdConfig;

/// How often each member is probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Stops the probing when the store goes.
pub(super) struct MemberProbe {
    task: AbortHandle,
}

impl Drop for MemberProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The members of `config` that accept a connection now, and why each other does not: a
/// client given only the first sends a command's first request to a member that answers
/// (one given every member may send it to the one that is down, and fail at once). All of
/// them if there is one, or none answers.
pub(super) async fn survey(config: &EtcdConfig) -> (Vec<String>, Vec<(String, String)>) {
    if config.endpoints.len() < 2 {
        return (config.endpoints.clone(), Vec::new());
    }
    let timeout = config.request_timeout.min(PROBE_EVERY);
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for (endpoint, answer) in probe(&config.endpoints, timeout).await {
        match answer {
            Ok(()) => up.push(endpoint),
            Err(why) => down.push((endpoint, why)),
        }
    }
    if up.is_empty() {
        up = config.endpoints.clone();
    }
    (up, down)
}

/// Starts probing the members of `config` for `client`, which was given `in_use` of them;
/// `None` for a single member, which stays whatever happens.
pub(super) fn probe_members(
    client: Client,
    config: &EtcdConfig,
    in_use: &[String],
) -> Option<MemberProbe> {
    if config.endpoints.len() < 2 {
        return None;
    }
    let endpoints = config.endpoints.clone();
    let in_use: BTreeSet<String> = in_use.iter().cloned().collect();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let timeout = config.request_timeout.min(PROBE_EVERY);
    let task = tokio::spawn(async move {
        let mut in_use = in_use;
        let mut every = tokio::time::interval(PROBE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let answering = answering(&endpoints, timeout).await;
            let wanted = if answering.is_empty() {
                endpoints.iter().cloned().collect()
            } else {
                answering
            };
            for gone in in_use.difference(&wanted) {
                // The balancer knows the member by the URI it was added under.
                match client.remove_endpoint(format!("{scheme}://{gone}")).await {
                    Ok(()) => {
                        tracing::info!(member = %gone, "etcd member not answering: sending it no requests")
                    }
                    Err(e) => {
                        tracing::warn!(member = %gone, "could not set aside an etcd member that does not answer: {e}")
                    }
                }
            }
            for back in wanted.difference(&in_use) {
                match client.add_endpoint(back).await {
                    Ok(()) => {
                        tracing::info!(member = %back, "etcd member answers again: sending it requests")
                    }
                    Err(e) => {
                        tracing::warn!(member = %back, "could not take back an etcd member: {e}")
                    }
                }
            }
            in_use = wanted;
        }
    });
    Some(MemberProbe {
        task: task.abort_handle(),
    })
}

/// The endpoints that accept a connection within `timeout`, probed at once.
async fn answering(endpoints: &[String], timeout: Duration) -> BTreeSet<String> {
    probe(endpoints, timeout)
        .await
        .into_iter()
        .filter_map(|(endpoint, answer)| answer.is_ok().then_some(endpoint))
        .collect()
}

/// Each endpoint, in order, and whether it accepts a connection within `timeout` (why not,
/// if not); probed at once.
async fn probe(endpoints: &[String], timeout: Duration) -> Vec<(String, Result<(), String>)> {
    let mut probes = JoinSet::new();
    for (n, endpoint) in endpoints.iter().enumerate() {
        let endpoint = endpoint.clone();
        probes.spawn(async move {
            let connect = tokio::net::TcpStream::connect(endpoint.as_str());
            let answer = match tokio::time::timeout(timeout, connect).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no connection within {timeout:?}")),
            };
            (n, endpoint, answer)
        });
    }
    let mut answers = Vec::new();
    while let Some(probe) = probes.join_next().await {
        if let Ok(answer) = probe {
            answers.push(answer);
        }
    }
    answers.sort_by_key(|(n, _, _)| *n);
    answers.into_iter().map(|(_, e, a)| (e, a)).collect()
}
