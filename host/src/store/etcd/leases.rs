//! The lease store on etcd: a leadership is a key attached to an etcd lease, its term the
//! key's create revision; renewals are keepalives.

use super::*;

impl EtcdStore {
    /// The remaining TTL of etcd lease `id` after one keepalive, or `None` if it expired.
    pub(super) async fn keep_alive(&self, id: i64) -> Result<Option<Duration>, LeaseError> {
        let cached = self
            .keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        // etcd answers a keepalive of a lease it no longer has with an error, not a TTL.
        let lapsed = |e: etcd_client::Error| match e.to_string().contains("lease not found") {
            true => Ok(None),
            false => Err(lease_unavailable(e)),
        };
        let (mut keeper, mut stream) = match cached {
            Some(open) => open,
            None => match self.client.lease_client().keep_alive(id).await {
                Ok(open) => open,
                Err(e) => return lapsed(e),
            },
        };
        keeper.keep_alive().await.map_err(lease_unavailable)?;
        let answer = tokio::time::timeout(self.config.request_timeout, stream.message())
            .await
            .map_err(|_| lease_unavailable("keepalive timed out"))?;
        let answer = match answer {
            Ok(Some(answer)) => answer,
            Ok(None) => return Err(lease_unavailable("keepalive stream closed")),
            Err(e) => return lapsed(e),
        };
        let ttl = answer.ttl();
        if ttl <= 0 {
            return Ok(None);
        }
        self.keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, (keeper, stream));
        Ok(Some(Duration::from_secs(ttl as u64)))
    }

    pub(super) fn held_lease(&self, key: &(String, String)) -> Option<(u64, i64)> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    pub(super) fn remember(&self, key: (String, String), term: u64, id: i64) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (term, id));
    }

    /// Forgets a leadership that lapsed or was given up, and its keepalive stream.
    pub(super) fn forget(&self, key: &(String, String), id: i64) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// The live leadership key of `app`: holder, term, etcd lease id.
    pub(super) async fn lease_key_of(
        &self,
        app: &str,
    ) -> Result<Option<(String, u64, i64)>, LeaseError> {
        let resp = self
            .client
            .kv_client()
            .get(self.lease_key(app), None)
            .await
            .map_err(lease_unavailable)?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(None);
        };
        let doc: LeaseDoc = serde_json::from_slice(kv.value()).map_err(lease_unavailable)?;
        Ok(Some((doc.holder, kv.create_revision() as u64, kv.lease())))
    }
}

/// Whole seconds for an etcd TTL, rounded up: the store holds a lease at least as long as
/// asked.
pub(super) fn ttl_secs(duration: Duration) -> i64 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    secs.max(1) as i64
}

impl LeaseStore for EtcdStore {
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim> {
        Box::pin(async move {
            let held_key = (app.to_string(), holder.to_string());
            let held = self.held_lease(&held_key);
            if let Some((term, id)) = held {
                match self.keep_alive(id).await? {
                    Some(ttl) => {
                        return Ok(Claim::Held(Lease {
                            holder: holder.to_string(),
                            term,
                            duration: ttl,
                        }));
                    }
                    None => {
                        self.forget(&held_key, id);
                    }
                }
            }
            for _ in 0..MAX_ATTEMPTS {
                match self.lease_key_of(app).await? {
                    Some((current, term, id)) if current == holder => {
                        // Ours: one keepalive extends it, same key, same term.
                        match self.keep_alive(id).await? {
                            Some(ttl) => {
                                self.remember(held_key, term, id);
                                return Ok(Claim::Held(Lease {
                                    holder: current,
                                    term,
                                    duration: ttl,
                                }));
                            }
                            None => {
                                // Lapsed, and etcd has not deleted the key yet: drop it so
                                // the claim below starts a new term.
                                self.forget(&held_key, id);
                                let _ = self.client.lease_client().revoke(id).await;
                                continue;
                            }
                        }
                    }
                    Some((current, term, _)) => {
                        return Ok(Claim::Denied {
                            holder: current,
                            term,
                            // The watch on the key tells followers when it lapses.
                            expires_in: None,
                        });
                    }
                    None => {}
                }
                let ttl = ttl_secs(ttl);
                let grant = self
                    .client
                    .lease_client()
                    .grant(ttl, None)
                    .await
                    .map_err(lease_unavailable)?;
                let key = self.lease_key(app);
                let doc = LeaseDoc {
                    holder: holder.to_string(),
                };
                let txn = Txn::new()
                    .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.as_str(),
                        encode(&doc),
                        Some(PutOptions::new().with_lease(grant.id())),
                    )]);
                let created = self.client.kv_client().txn(txn).await;
                match created {
                    Ok(resp) if resp.succeeded() => {
                        let term = resp
                            .header()
                            .map(|h| h.revision() as u64)
                            .ok_or_else(|| lease_unavailable("answer without a header"))?;
                        self.remember(held_key, term, grant.id());
                        return Ok(Claim::Held(Lease {
                            holder: holder.to_string(),
                            term,
                            duration: Duration::from_secs(grant.ttl().max(0) as u64),
                        }));
                    }
                    // Another unit created it first: see who, on the next turn.
                    Ok(_) => {
                        let _ = self.client.lease_client().revoke(grant.id()).await;
                    }
                    Err(e) => {
                        // Unknown whether the key was created: the granted lease, unused or
                        // not, lapses on its own; the next claim finds the key if it is ours.
                        return Err(lease_unavailable(e));
                    }
                }
            }
            Err(LeaseError::Unavailable(format!(
                "claim of {app}: the leadership key kept changing"
            )))
        })
    }

    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            if let Some((current, _, id)) = self.lease_key_of(app).await?
                && current == holder
            {
                self.forget(&(app.to_string(), holder.to_string()), id);
                self.client
                    .lease_client()
                    .revoke(id)
                    .await
                    .map_err(lease_unavailable)?;
            }
            Ok(())
        })
    }

    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>> {
        Box::pin(async move {
            let Some((holder, term, id)) = self.lease_key_of(app).await? else {
                return Ok(None);
            };
            let ttl = self
                .client
                .lease_client()
                .time_to_live(id, None)
                .await
                .map_err(lease_unavailable)?
                .ttl();
            // -1: lapsed. etcd rounds the time left down to whole seconds, so 0 is alive.
            if ttl < 0 {
                return Ok(None);
            }
            Ok(Some(Lease {
                holder,
                term,
                duration: Duration::from_secs(ttl as u64),
            }))
        })
    }

    fn lease_signal(self: Arc<Self>, app: &str) -> Option<watch::Receiver<u64>> {
        if self.watching_leases.set(()).is_ok() {
            self.start_lease_watch();
        }
        Some(self.lease_signals.subscribe(app))
    }
}
