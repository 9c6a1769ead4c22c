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

/// Starts probing the members of `config` for `client`; `None` for a single member,
/// which stays whatever happens.
pub(super) fn probe_members(client: Client, config: &EtcdConfig) -> Option<MemberProbe> {
    if config.endpoints.len() < 2 {
        return None;
    }
    let endpoints = config.endpoints.clone();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let timeout = config.request_timeout.min(PROBE_EVERY);
    let task = tokio::spawn(async move {
        let mut in_use: BTreeSet<String> = endpoints.iter().cloned().collect();
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
    let mut probes = JoinSet::new();
    for endpoint in endpoints {
        let endpoint = endpoint.clone();
        probes.spawn(async move {
            let connect = tokio::net::TcpStream::connect(endpoint.as_str());
            let up = matches!(tokio::time::timeout(timeout, connect).await, Ok(Ok(_)));
            (endpoint, up)
        });
    }
    let mut up = BTreeSet::new();
    while let Some(probe) = probes.join_next().await {
        if let Ok((endpoint, true)) = probe {
            up.insert(endpoint);
        }
    }
    up
}
