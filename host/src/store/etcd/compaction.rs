//! Compacting etcd's history.
//!
//! etcd keeps every revision of every key until its history is compacted, and its defaults
//! (no auto-compaction, a 2 GiB quota) let a busy model fill the quota: etcd then answers
//! every write with "database space exceeded". A host running a model compacts, as
//! Kubernetes' API server does: every interval the model's hosts take a turn through one
//! key (a compare on its version, so one host a turn), and the host whose turn it is
//! compacts to the revision it saw one turn before. About an interval of history stays,
//! for reads at a recent revision and watches running behind.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::task::AbortHandle;

/// Compacts while it lives.
pub(super) struct Compactor {
    task: AbortHandle,
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a host of `config` may compact etcd's history, which is every key's on that
/// etcd: with no etcd user (no authentication), or as root. etcd lets any user compact,
/// needing no permission on any key, so a user whose role covers one model's prefix could
/// drop the history other models and programs rely on: such a host says so and does not.
/// A login by client certificate alone is a user named by the certificate, unknown here.
pub(super) fn may_compact(config: &super::EtcdConfig) -> bool {
    let by_certificate = config
        .tls
        .as_ref()
        .is_some_and(|tls| tls.identity.is_some());
    let why_not = match &config.auth {
        Some(auth) if auth.user != "root" => format!("etcd user `{}` is not root", auth.user),
        None if by_certificate => {
            "this host logs in by client certificate, as a user it cannot name".to_string()
        }
        _ => return true,
    };
    tracing::warn!(
        "not compacting etcd's history (--etcd-compaction-interval): {why_not}, and compaction drops every model's and program's history on that etcd; compact it as root, or with etcd's --auto-compaction-retention"
    );
    false
}

/// Starts compacting the history of `client`'s etcd every `every`, taking turns with other
/// hosts through `turn_key`.
pub(super) fn compact_history(client: Client, turn_key: String, every: Duration) -> Compactor {
    let task = tokio::spawn(async move {
        let mut kv = client.kv_client();
        // The turn key's version when this host last looked, and etcd's revision then.
        let mut turn = 0;
        let mut seen = 0;
        let mut refused = false;
        loop {
            tokio::time::sleep(every).await;
            let txn = Txn::new()
                .when([Compare::version(turn_key.as_str(), CompareOp::Equal, turn)])
                .and_then([TxnOp::put(turn_key.as_str(), seen.to_string(), None)])
                .or_else([TxnOp::get(turn_key.as_str(), None)]);
            let resp = match kv.txn(txn).await {
                Ok(resp) => resp,
                Err(e) => {
                    tracing::debug!("etcd history not compacted this turn: {e}");
                    continue;
                }
            };
            let now = resp.header().map_or(seen, |h| h.revision());
            if !resp.succeeded() {
                // Another host took this turn: the next is an interval from now.
                turn = resp
                    .op_responses()
                    .into_iter()
                    .find_map(|op| match op {
                        TxnOpResponse::Get(get) => {
                            Some(get.kvs().first().map_or(0, |kv| kv.version()))
                        }
                        _ => None,
                    })
                    .unwrap_or(0);
                seen = now;
                continue;
            }
            turn += 1;
            let upto = std::mem::replace(&mut seen, now);
            if upto == 0 {
                // A first turn only marks where the history to keep starts.
                continue;
            }
            match kv.compact(upto, None).await {
                Ok(_) => tracing::debug!("compacted etcd's history up to revision {upto}"),
                // Already compacted further (by etcd's own auto-compaction, say).
                Err(e) if e.to_string().contains("compacted") => {}
                Err(e) if !refused && e.to_string().contains("permission denied") => {
                    refused = true;
                    tracing::warn!(
                        "etcd refuses to compact its history for this host's user ({e}): compact it otherwise (etcd's --auto-compaction-retention), or its quota fills"
                    );
                }
                Err(e) => tracing::debug!("etcd history not compacted this turn: {e}"),
            }
        }
    });
    Compactor {
        task: task.abort_handle(),
    }
}
