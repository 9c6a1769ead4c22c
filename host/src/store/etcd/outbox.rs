//! Outboxes: hooks a change queued on many units, moved into their queues in transactions
//! small enough for etcd.

use super::*;

impl EtcdStore {
    /// Moves the hooks of outbox `key` into their units' queues, [`DELIVERY_UNITS`] units a
    /// transaction, then deletes it (see the module doc). Another host delivering the same
    /// outbox meanwhile is harmless: each transaction compares the cursor it advances.
    pub(super) async fn deliver(&self, key: &str) -> Result<(), StoreError> {
        let cursor_key = self.outbox_cursor_key(key);
        let mut conflicts = 0;
        // An outbox is written once, never changed, and its key (a seq) never reused: read
        // and decoded once, then only looked at (without its value) to see it is still there.
        let seen = self.read(&[Read::Key(key.to_string())], None).await?;
        let Some(first) = seen.results.into_iter().flatten().next() else {
            return Ok(());
        };
        let entries: Vec<OutboxEntry> = decode_value(key, first.value())?;
        loop {
            let seen = self
                .read_ops(vec![
                    TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                    TxnOp::get(cursor_key.as_str(), None),
                ])
                .await?;
            let revision = seen.revision;
            let mut results = seen.results.into_iter();
            let Some(outbox) = results.next().and_then(|kvs| kvs.into_iter().next()) else {
                return Ok(());
            };
            let cursor_kv = results.next().and_then(|kvs| kvs.into_iter().next());
            let from: usize = match &cursor_kv {
                Some(kv) => decode_value(&cursor_key, kv.value())?,
                None => 0,
            };
            // The next entries, up to the first of a unit beyond the batch's, or the
            // batch's last hook.
            let mut units: Vec<&str> = Vec::new();
            let mut to = from;
            for entry in &entries[from.min(entries.len())..] {
                if to - from == DELIVERY_HOOKS {
                    break;
                }
                if !units.contains(&entry.unit.as_str()) {
                    if units.len() == DELIVERY_UNITS {
                        break;
                    }
                    units.push(&entry.unit);
                }
                to += 1;
            }
            let unit_reads: Vec<Read> = units
                .iter()
                .flat_map(|u| {
                    [
                        Read::Key(self.unit_key(u)),
                        Read::Prefix(self.hooks_prefix(u)),
                    ]
                })
                .collect();
            let got = self.read(&unit_reads, Some(revision)).await?;
            let mut compares = vec![
                unchanged(key, Some(&outbox)),
                unchanged(&cursor_key, cursor_kv.as_ref()),
            ];
            // The hooks coalesced with, which must still be queued (module doc).
            let mut coalesced_with: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
            let mut ops = Vec::new();
            let mut got = got.results.into_iter();
            for unit in &units {
                let unit_kv = got.next().and_then(|kvs| kvs.into_iter().next());
                let stored = got.next().unwrap_or_default();
                let unit_key = self.unit_key(unit);
                let created = unit_kv.as_ref().map_or(0, KeyValue::create_revision);
                compares.push(Compare::create_revision(
                    unit_key.as_str(),
                    CompareOp::Equal,
                    created,
                ));
                if unit_kv.is_none() {
                    // Removed since: changes no longer reach it.
                    continue;
                }
                // The queue as this delivery leaves it, each hook with its stored key-value.
                let mut queue: Vec<(Option<&KeyValue>, QueueEntry)> = Vec::new();
                for kv in &stored {
                    let entry = queue_entry(&String::from_utf8_lossy(kv.key()), kv.value())?;
                    queue.push((Some(kv), entry));
                }
                for entry in entries[from..to].iter().filter(|e| e.unit == *unit) {
                    if queue.iter().any(|(_, q)| q.seq == entry.seq) {
                        continue;
                    }
                    let hooks = queue.iter().map(|(_, q)| &q.hook);
                    let equal = crate::store::routing::coalesces_with(hooks, &entry.hook)
                        .map(|at| queue[at].0);
                    // Within etcd's limit on compares; past it the hook is queued instead.
                    if let Some(equal) = equal
                        && compares.len() + coalesced_with.len() + 2 <= MAX_TXN_COMPARES
                    {
                        for kv in [queue[0].0, equal].into_iter().flatten() {
                            coalesced_with.insert(kv.key().to_vec(), kv.mod_revision());
                        }
                        continue;
                    }
                    // In seq order behind the head, which may be running.
                    let at = queue
                        .iter()
                        .enumerate()
                        .skip(1)
                        .find(|(_, (_, q))| q.seq > entry.seq)
                        .map_or(queue.len(), |(i, _)| i);
                    let hook = QueueEntry {
                        seq: entry.seq,
                        hook: entry.hook.clone(),
                    };
                    queue.insert(at, (None, hook));
                    ops.push(TxnOp::put(
                        self.hook_key(unit, entry.seq),
                        encode(&entry.hook),
                        None,
                    ));
                }
            }
            compares.extend(
                coalesced_with
                    .into_iter()
                    .map(|(key, revision)| Compare::mod_revision(key, CompareOp::Equal, revision)),
            );
            let done = to >= entries.len();
            if done {
                ops.push(TxnOp::delete(key, None));
                ops.push(TxnOp::delete(cursor_key.as_str(), None));
            } else {
                ops.push(TxnOp::put(cursor_key.as_str(), encode(&to), None));
            }
            if self.write(compares, ops).await? {
                if done {
                    return Ok(());
                }
            } else {
                conflicts += 1;
                if conflicts >= MAX_ATTEMPTS {
                    return Err(Self::contended("delivering hooks"));
                }
            }
        }
    }

    /// Delivers every outbox left in the store (see [`deliver`](Self::deliver)).
    pub(super) async fn deliver_all(&self) -> Result<(), StoreError> {
        let prefix = self.key("outbox/");
        let resp = self
            .client
            .kv_client()
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(unavailable)?;
        for kv in resp.kvs() {
            self.deliver(&String::from_utf8_lossy(kv.key())).await?;
        }
        Ok(())
    }

    /// Looks for outboxes left behind every [`OUTBOX_SWEEP`], for as long as the store lives.
    pub(super) fn start_courier(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(OUTBOX_SWEEP).await;
                let Some(store) = weak.upgrade() else { return };
                if let Err(e) = store.deliver_all().await {
                    tracing::debug!("outboxes not delivered yet: {e}");
                }
            }
        });
    }
}
