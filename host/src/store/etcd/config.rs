//! Where a store finds etcd: endpoints, prefix, TLS and login, from an `etcd://` address.

use super::*;

/// How to reach etcd, and where in its key space this model lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `host:port` of each etcd member.
    pub endpoints: Vec<String>,
    /// The key prefix, so several models can share one etcd (`charm-host/default` unless
    /// set).
    pub prefix: String,
    /// How long one request may take before it fails as unavailable. Keep it well under
    /// the lease duration so a renewal can be retried.
    pub request_timeout: Duration,
    /// TLS towards etcd; plaintext if `None`.
    pub tls: Option<EtcdTls>,
    /// The etcd user this host acts as, if etcd has authentication enabled.
    pub auth: Option<EtcdAuth>,
    /// How often this host compacts etcd's history (see
    /// [`COMPACTION_INTERVAL`](super::COMPACTION_INTERVAL)), if at all; `None`, as
    /// [`parse`](Self::parse) gives, leaves it to etcd. Compaction is cluster-wide, so it
    /// is skipped, with a warning, for an etcd user other than root.
    pub compaction: Option<Duration>,
}

impl EtcdConfig {
    /// The prefix used when none is given.
    pub const DEFAULT_PREFIX: &'static str = "charm-host/default";

    /// Parses `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`.
    pub fn parse(spec: &str) -> Result<EtcdConfig, StoreError> {
        let bad = |why: &str| {
            StoreError::Incompatible(format!(
                "{spec}: {why}; expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]"
            ))
        };
        let rest = spec
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("not an etcd address"))?;
        let (hosts, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // One spelling per prefix: `/models/a`, `models/a/` and `models//a` are `models/a`.
        let segments: Vec<&str> = prefix.split('/').filter(|s| !s.is_empty()).collect();
        if let Some(odd) = segments.iter().find(|s| matches!(**s, "." | "..")) {
            return Err(bad(&format!("the prefix has a `{odd}` segment")));
        }
        let prefix = segments.join("/");
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let Some((name, port)) = host.rsplit_once(':') else {
                return Err(bad(&format!("`{host}` has no port")));
            };
            if name.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad(&format!("`{host}` is not HOST:PORT")));
            }
            endpoints.push(host.to_string());
        }
        Ok(EtcdConfig {
            endpoints,
            prefix: if prefix.is_empty() {
                Self::DEFAULT_PREFIX.to_string()
            } else {
                prefix.to_string()
            },
            request_timeout: Duration::from_secs(1),
            tls: None,
            auth: None,
            compaction: None,
        })
    }
}
