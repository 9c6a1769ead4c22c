//! [`ModelTx`] on etcd: a step reads at one revision, then commits its writes in one `Txn`
//! that compares everything it read unchanged, or is worked out again.

use super::*;

/// One read of a transaction: a key, or every key under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Read {
    Key(String),
    Prefix(String),
}

/// What a read transaction saw: the revision, and the key-values of each read in order.
pub(super) struct Seen {
    pub(super) revision: i64,
    pub(super) results: Vec<Vec<KeyValue>>,
}

/// Up to how many bags a step reads one key at a time rather than the relation's prefix.
pub(super) const FEW_BAGS: usize = 8;

/// A compare that holds while `key` is as it was read (`seen`: absent if `None`).
pub(super) fn unchanged(key: &str, seen: Option<&KeyValue>) -> Compare {
    Compare::mod_revision(
        key,
        CompareOp::Equal,
        seen.map_or(0, KeyValue::mod_revision),
    )
}

/// A compare that holds while nothing under `prefix` was created or changed after `revision`.
pub(super) fn none_newer(prefix: &str, revision: i64) -> Compare {
    Compare::mod_revision(prefix, CompareOp::Less, revision + 1).with_prefix()
}

/// A random offset for the indexes of the hooks a step queues directly, below
/// [`OUTBOX_INDEX`] once shifted by [`DIRECT_INDEX_BITS`].
pub(super) fn random_salt() -> usize {
    use std::hash::BuildHasher;
    // Each `RandomState` is keyed anew (randomly per thread, then counting up).
    let random = std::collections::hash_map::RandomState::new().hash_one(0u8);
    (random as usize) & ((1 << (SEQ_INDEX_BITS - 1 - DIRECT_INDEX_BITS)) - 1)
}

/// The seq of the `index`-th hook queued by a change that read at `revision`: above every
/// seq queued by a change that revision could see.
pub(super) fn seq_at(revision: i64, index: usize) -> u64 {
    assert!(index < 1 << SEQ_INDEX_BITS, "too many hooks in one change");
    ((revision as u64 + 1) << SEQ_INDEX_BITS) | index as u64
}

impl EtcdStore {
    /// The value of `key`, read on its own.
    pub(super) async fn get_value(&self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        let resp = self
            .client
            .kv_client()
            .get(key, None)
            .await
            .map_err(unavailable)?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Reads several keys and prefixes in one transaction, so they are one consistent view
    /// (at `revision`, if given; the latest otherwise).
    pub(super) async fn read(
        &self,
        reads: &[Read],
        revision: Option<i64>,
    ) -> Result<Seen, StoreError> {
        let ops: Vec<TxnOp> = reads
            .iter()
            .map(|r| {
                let mut options = GetOptions::new();
                if let Some(rev) = revision {
                    options = options.with_revision(rev);
                }
                match r {
                    Read::Key(k) => TxnOp::get(k.as_str(), Some(options)),
                    Read::Prefix(p) => TxnOp::get(p.as_str(), Some(options.with_prefix())),
                }
            })
            .collect();
        self.read_ops(ops).await
    }

    /// Runs the reads `ops` in one transaction: its revision, and the key-values of each.
    pub(super) async fn read_ops(&self, ops: Vec<TxnOp>) -> Result<Seen, StoreError> {
        let resp = self
            .client
            .kv_client()
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(unavailable)?;
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| StoreError::Unavailable("etcd: answer without a header".into()))?;
        let results = resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Get(mut g) => g.take_kvs(),
                _ => Vec::new(),
            })
            .collect();
        Ok(Seen { revision, results })
    }

    /// Applies `ops` if every compare holds; whether it did, and at which revision.
    pub(super) async fn write(
        &self,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<bool, StoreError> {
        let resp = self
            .client
            .kv_client()
            .txn(Txn::new().when(compares).and_then(ops))
            .await
            .map_err(unavailable)?;
        Ok(resp.succeeded())
    }

    /// What an operator's change of the model reads: applications, units, their queues,
    /// relations and leases (anything else is fetched as the change asks for it).
    pub(super) fn model_prefetch(&self) -> Vec<Read> {
        ["apps/", "units/", "hooks/", "relations/", "leases/"]
            .map(|p| Read::Prefix(self.key(p)))
            .to_vec()
    }

    pub(super) fn contended(what: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "{what}: other hosts kept changing the same keys ({MAX_ATTEMPTS} attempts)"
        ))
    }
}

/// A key's value as a step sees it.
pub(super) enum Found<'a> {
    /// What the step itself wrote.
    Written(&'a [u8]),
    /// What was fetched at the step's revision.
    Fetched(&'a KeyValue),
}

/// One optimistic step on etcd, as the model's operations read and write it. Every read is
/// of one revision; a read the step has not fetched yet is noted as missing (and answered
/// as absent meanwhile), and the operation runs again once it is fetched. Writes are
/// buffered, and applied in one `Txn` only while every key and prefix the operation used
/// is unchanged since that revision.
pub(super) struct EtcdTx<'s> {
    pub(super) store: &'s EtcdStore,
    pub(super) revision: i64,
    /// Every key fetched, with its value (absent keys under a fetched prefix are not here).
    pub(super) fetched: BTreeMap<String, Option<KeyValue>>,
    /// The prefixes fetched whole.
    pub(super) prefixes: BTreeSet<String>,
    /// Reads the operation asked for that were not fetched.
    pub(super) missing: Vec<Read>,
    /// The keys and prefixes the operation used: the compares of its `Txn`.
    pub(super) used_keys: BTreeSet<String>,
    pub(super) used_prefixes: BTreeSet<String>,
    /// Keys the operation creates: they must still be absent.
    pub(super) created: BTreeSet<String>,
    /// Keys whose existence the operation used, not their value: each must still have the
    /// create revision it was read with (0: still absent).
    pub(super) existing: BTreeMap<String, i64>,
    /// The fence's lease key and term, if the operation checked a lease.
    pub(super) lease_terms: BTreeMap<String, i64>,
    /// Buffered writes, by key: a value to put, or `None` to delete.
    pub(super) writes: BTreeMap<String, Option<Vec<u8>>>,
    /// Hooks put in the outbox and log lines kept so far in this run of the operation.
    pub(super) queued: usize,
    /// Hooks queued directly so far in this run of the operation.
    pub(super) direct: usize,
    /// The random offset of the indexes of the hooks this step queues directly.
    pub(super) salt: usize,
    /// Whether hooks queued from now on go to the outbox ([`ModelTx::defers_queueing`]).
    pub(super) defer: bool,
    /// The hooks for the outbox, in order.
    pub(super) deferred: Vec<OutboxEntry>,
    /// The outbox this run writes, once sealed.
    pub(super) outbox: Option<String>,
}

impl<'s> EtcdTx<'s> {
    pub(super) fn new(store: &'s EtcdStore, revision: i64) -> Self {
        EtcdTx {
            store,
            revision,
            fetched: BTreeMap::new(),
            prefixes: BTreeSet::new(),
            missing: Vec::new(),
            used_keys: BTreeSet::new(),
            used_prefixes: BTreeSet::new(),
            created: BTreeSet::new(),
            existing: BTreeMap::new(),
            lease_terms: BTreeMap::new(),
            writes: BTreeMap::new(),
            queued: 0,
            direct: 0,
            salt: random_salt(),
            defer: false,
            deferred: Vec::new(),
            outbox: None,
        }
    }

    /// Writes the outbox of the hooks deferred, if any: one key, created by this step. The
    /// key is the revision the step read, so of two steps that read one revision only one
    /// writes an outbox (the other runs again), and their deferred seqs cannot meet.
    pub(super) fn seal(&mut self) {
        if !self.deferred.is_empty() {
            let key = self.store.outbox_key(seq_at(self.revision, OUTBOX_INDEX));
            let value = encode(&self.deferred);
            self.created.insert(key.clone());
            self.writes.insert(key.clone(), Some(value));
            self.outbox = Some(key);
        }
    }

    /// Takes in what a read of `reads` saw.
    pub(super) fn absorb(&mut self, reads: &[Read], seen: Seen) {
        for (read, kvs) in reads.iter().zip(seen.results) {
            match read {
                Read::Key(k) => {
                    self.fetched.insert(k.clone(), kvs.into_iter().next());
                }
                Read::Prefix(p) => {
                    for kv in kvs {
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        self.fetched.insert(key, Some(kv));
                    }
                    self.prefixes.insert(p.clone());
                }
            }
        }
    }

    /// Forgets what the last run of the operation used and wrote, before it runs again.
    pub(super) fn restart(&mut self) {
        self.used_keys.clear();
        self.used_prefixes.clear();
        self.created.clear();
        self.existing.clear();
        self.lease_terms.clear();
        self.writes.clear();
        self.queued = 0;
        self.direct = 0;
        self.defer = false;
        self.deferred.clear();
        self.outbox = None;
    }

    pub(super) fn covering_prefix(&self, key: &str) -> Option<&String> {
        self.prefixes.iter().find(|p| key.starts_with(p.as_str()))
    }

    /// The value of `key` as this step sees it: its own write, or what was fetched.
    pub(super) fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.read(key)? {
            Found::Written(v) => Some(v.to_vec()),
            Found::Fetched(kv) => Some(kv.value().to_vec()),
        }
    }

    /// `key` as this step sees it, without copying it; the step now depends on it.
    pub(super) fn read(&mut self, key: &str) -> Option<Found<'_>> {
        if let Some(v) = self.writes.get(key) {
            return v.as_deref().map(Found::Written);
        }
        if let Some(p) = self.covering_prefix(key).cloned() {
            self.used_prefixes.insert(p);
        } else if self.fetched.contains_key(key) {
            self.used_keys.insert(key.to_string());
        } else {
            self.missing.push(Read::Key(key.to_string()));
            return None;
        }
        self.fetched.get(key)?.as_ref().map(Found::Fetched)
    }

    /// The key-values under `prefix`, by key, as this step sees them.
    pub(super) fn scan(&mut self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.scan_under(prefix, true)
    }

    /// [`scan`](Self::scan) without the step depending on what it finds: it depends on
    /// the keys it then uses ([`depend`](Self::depend)).
    pub(super) fn peek(&mut self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.scan_under(prefix, false)
    }

    pub(super) fn scan_under(&mut self, prefix: &str, depends: bool) -> Vec<(String, Vec<u8>)> {
        let Some(p) = self.covering_prefix(prefix).cloned() else {
            self.missing.push(Read::Prefix(prefix.to_string()));
            return Vec::new();
        };
        if depends {
            self.used_prefixes.insert(p);
        }
        let mut found: BTreeMap<String, Vec<u8>> = self
            .fetched
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, kv)| Some((k.clone(), kv.as_ref()?.value().to_vec())))
            .collect();
        for (k, v) in self
            .writes
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            match v {
                Some(v) => found.insert(k.clone(), v.clone()),
                None => found.remove(k),
            };
        }
        found.into_iter().collect()
    }

    pub(super) fn doc<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, StoreError> {
        self.get(key).map(|v| decode_value(key, &v)).transpose()
    }

    /// Makes the step depend on `key`, one it fetched, being unchanged (or still absent).
    pub(super) fn depend(&mut self, key: &str) {
        if !self.writes.contains_key(key) {
            self.used_keys.insert(key.to_string());
        }
    }

    /// Whether `key` was fetched, alone or under a prefix; if not, it is noted as missing.
    pub(super) fn was_fetched(&mut self, key: &str) -> bool {
        if self.fetched.contains_key(key) || self.covering_prefix(key).is_some() {
            return true;
        }
        self.missing.push(Read::Key(key.to_string()));
        false
    }

    /// `key`'s value as this step sees it, the step depending on that key alone even where
    /// it was fetched under a prefix.
    pub(super) fn get_key(&mut self, key: &str) -> Option<Vec<u8>> {
        if let Some(v) = self.writes.get(key) {
            return v.clone();
        }
        if !self.was_fetched(key) {
            return None;
        }
        self.used_keys.insert(key.to_string());
        Some(self.fetched.get(key)?.as_ref()?.value().to_vec())
    }

    /// Whether `key` exists as this step sees it; the step depends on that alone (a change
    /// of its value does not conflict with it).
    pub(super) fn exists(&mut self, key: &str) -> bool {
        if let Some(v) = self.writes.get(key) {
            return v.is_some();
        }
        if !self.was_fetched(key) {
            return false;
        }
        let created = self
            .fetched
            .get(key)
            .and_then(Option::as_ref)
            .map_or(0, KeyValue::create_revision);
        self.existing.insert(key.to_string(), created);
        created != 0
    }

    pub(super) fn put<T: Serialize>(&mut self, key: String, value: &T) {
        self.writes.insert(key, Some(encode(value)));
    }

    pub(super) fn delete(&mut self, key: String) {
        self.writes.insert(key, None);
    }

    /// Deletes every key under `prefix` this step sees.
    pub(super) fn delete_under(&mut self, prefix: &str) {
        for (key, _) in self.scan(prefix) {
            self.delete(key);
        }
    }

    pub(super) fn update_app_doc(
        &mut self,
        app: &str,
        update: impl FnOnce(&mut AppDoc),
    ) -> Result<(), StoreError> {
        let mut doc = self
            .app_doc(app)?
            .ok_or_else(|| not_found(format!("application {app}")))?;
        update(&mut doc);
        self.put(self.store.app_key(app), &doc);
        Ok(())
    }

    pub(super) fn create<T: Serialize>(&mut self, key: String, value: &T) {
        self.created.insert(key.clone());
        self.put(key, value);
    }

    pub(super) fn app_doc(&mut self, app: &str) -> Result<Option<AppDoc>, StoreError> {
        Ok(self.app_doc_read(app)?.map(|read| read.doc.clone()))
    }

    /// The application's document, decoded once per version of its key and shared (one
    /// this step wrote is decoded each time: the step may yet be rolled back).
    pub(super) fn app_doc_read(
        &mut self,
        app: &str,
    ) -> Result<Option<Arc<AppDocRead>>, StoreError> {
        let key = self.store.app_key(app);
        let store = self.store;
        let (version, value) = match self.read(&key) {
            None => return Ok(None),
            Some(Found::Written(v)) => {
                return Ok(Some(Arc::new(AppDocRead::new(
                    (0, 0, 0),
                    decode_value(&key, v)?,
                ))));
            }
            Some(Found::Fetched(kv)) => {
                let version = (kv.mod_revision(), kv.create_revision(), kv.value().len());
                let memo = store.app_docs.lock().expect("app docs lock");
                if let Some(read) = memo.get(&key).filter(|r| r.version == version) {
                    return Ok(Some(Arc::clone(read)));
                }
                (version, kv.value())
            }
        };
        let read = Arc::new(AppDocRead::new(version, decode_value(&key, value)?));
        store
            .app_docs
            .lock()
            .expect("app docs lock")
            .insert(key, Arc::clone(&read));
        Ok(Some(read))
    }

    /// `unit`'s queue, in order; the step depends on all of it.
    pub(super) fn queue(&mut self, unit: &str) -> Result<Vec<QueueEntry>, StoreError> {
        let prefix = self.store.hooks_prefix(unit);
        self.scan(&prefix)
            .iter()
            .map(|(k, v)| queue_entry(k, v))
            .collect()
    }

    /// `unit`'s queue, in order, with each hook's key; the step does not depend on it.
    pub(super) fn peek_queue(
        &mut self,
        unit: &str,
    ) -> Result<Vec<(String, QueueEntry)>, StoreError> {
        let prefix = self.store.hooks_prefix(unit);
        self.peek(&prefix)
            .into_iter()
            .map(|(k, v)| Ok((k.clone(), queue_entry(&k, &v)?)))
            .collect()
    }

    /// The bags under one relation's bags prefix of these keys, in order.
    /// The bags at `keys` in relation `id`: each read by its key when they are few, so
    /// that the step depends on those bags alone (a unit with one remote unit does not
    /// conflict with every other unit's bag write); else the relation's bags at once.
    pub(super) fn bags(
        &mut self,
        id: RelationId,
        keys: Vec<String>,
    ) -> Result<Vec<SharedBag>, StoreError> {
        if keys.len() <= FEW_BAGS {
            return keys
                .iter()
                .map(|k| {
                    let bag = self.get(k).map(|v| decode_value::<Bag>(k, &v));
                    Ok(Arc::new(bag.transpose()?.unwrap_or_default()))
                })
                .collect();
        }
        let stored: BTreeMap<String, Vec<u8>> =
            self.scan(&self.store.bags_prefix(id)).into_iter().collect();
        keys.iter()
            .map(|k| match stored.get(k) {
                Some(v) => decode_value::<Bag>(k, v).map(Arc::new),
                None => Ok(SharedBag::default()),
            })
            .collect()
    }

    pub(super) fn update_unit_doc(
        &mut self,
        unit: &str,
        update: impl FnOnce(&mut UnitRecord),
    ) -> Result<(), StoreError> {
        let key = self.store.unit_key(unit);
        let mut doc: UnitRecord = self
            .doc(&key)?
            .ok_or_else(|| not_found(format!("unit {unit}")))?;
        let before = doc.clone();
        update(&mut doc);
        if doc != before {
            self.put(key, &doc);
        }
        Ok(())
    }

    /// The `Txn`'s compares: every key and prefix used is unchanged, every key created is
    /// still absent, and every lease checked still has its term.
    pub(super) fn compares(&self) -> Vec<Compare> {
        let mut compares: Vec<Compare> = self
            .used_keys
            .iter()
            .map(|k| unchanged(k, self.fetched.get(k).and_then(Option::as_ref)))
            .collect();
        compares.extend(
            self.used_prefixes
                .iter()
                .map(|p| none_newer(p, self.revision)),
        );
        // A hook this step takes off a queue must still be there: a compare on the queue's
        // prefix does not see it deleted meanwhile (the unit's agent committed it while
        // `remove-relation` dropped it, say), and both steps would apply.
        let hooks = self.store.key("hooks/");
        compares.extend(
            self.writes
                .iter()
                .filter(|(k, v)| v.is_none() && k.starts_with(&hooks))
                .filter_map(|(k, _)| {
                    let seen = self.fetched.get(k)?.as_ref()?;
                    Some(unchanged(k, Some(seen)))
                }),
        );
        // So must a record this step rewrites after reading it under a prefix: deleted
        // meanwhile (the relation reaped by another unit's last relation-broken), the
        // prefix's compare would not see it, and the write would bring it back.
        compares.extend(
            self.writes
                .iter()
                .filter(|(k, v)| v.is_some() && !self.used_keys.contains(*k))
                .filter_map(|(k, _)| {
                    let seen = self.fetched.get(k)?.as_ref()?;
                    Some(unchanged(k, Some(seen)))
                }),
        );
        compares.extend(
            self.created
                .iter()
                .map(|k| Compare::create_revision(k.as_str(), CompareOp::Equal, 0)),
        );
        compares.extend(
            self.existing.iter().map(|(k, created)| {
                Compare::create_revision(k.as_str(), CompareOp::Equal, *created)
            }),
        );
        // The leadership key is recreated with a new create revision by every new
        // leadership, and deleted when the lease lapses: this is the fence.
        compares.extend(
            self.lease_terms
                .iter()
                .map(|(k, term)| Compare::create_revision(k.as_str(), CompareOp::Equal, *term)),
        );
        compares
    }

    pub(super) fn ops(&self) -> Vec<TxnOp> {
        self.writes
            .iter()
            .map(|(k, v)| match v {
                Some(v) => TxnOp::put(k.as_str(), v.clone(), None),
                None => TxnOp::delete(k.as_str(), None),
            })
            .collect()
    }
}

impl ModelTx for EtcdTx<'_> {
    fn queue_of(&mut self, unit: &str) -> TxResult<Option<Vec<QueuedHook>>> {
        if !self.unit_exists(unit)? {
            return Ok(None);
        }
        Ok(Some(
            self.queue(unit)?
                .into_iter()
                .map(|e| QueuedHook {
                    unit: unit.to_string(),
                    seq: e.seq,
                    hook: e.hook,
                })
                .collect(),
        ))
    }

    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>> {
        let apps = self.scan(&self.store.key("apps/"));
        apps.iter()
            .map(|(k, v)| Ok(decode_value::<AppDoc>(k, v)?.record))
            .collect()
    }

    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>> {
        // Keys hold zero-padded ids: key order is id order.
        let all = self.scan(&self.store.key("relations/"));
        all.iter()
            .map(|(k, v)| Ok(Arc::new(decode_value(k, v)?)))
            .collect()
    }

    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>> {
        self.doc(&self.store.pod_spec_key(app))
    }

    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>> {
        Ok(self.app_doc_read(app)?.map(|d| d.doc.record.clone()))
    }

    fn app_dying(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.app_doc_read(app)?.is_some_and(|d| d.doc.dying))
    }

    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>> {
        Ok(self
            .app_doc_read(app)?
            .map(|d| d.doc.dying_units.clone())
            .unwrap_or_default())
    }

    fn live_units(&mut self, app: &str) -> TxResult<UnitNames> {
        Ok(self
            .app_doc_read(app)?
            .map(|d| d.live.clone())
            .unwrap_or_default())
    }

    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>> {
        let key = self.store.hook_key(unit, seq);
        self.get_key(&key)
            .map(|v| decode_value(&key, &v))
            .transpose()
    }

    fn set_app_config(
        &mut self,
        app: &str,
        config: &BTreeMap<String, ConfigValue>,
    ) -> TxResult<()> {
        self.update_app_doc(app, |doc| doc.record.config = config.clone())
    }

    fn set_app_charm(&mut self, record: &ApplicationRecord) -> TxResult<()> {
        self.update_app_doc(&record.name, |doc| doc.record = record.clone())
    }

    fn module_stored(&mut self, hash: &str) -> TxResult<bool> {
        Ok(self.get(&self.store.module_key(hash)).is_some())
    }

    fn set_app_dying(&mut self, app: &str) -> TxResult<()> {
        self.update_app_doc(app, |doc| doc.dying = true)
    }

    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()> {
        self.update_app_doc(app_of(unit), |doc| {
            if !doc.dying_units.iter().any(|u| u == unit) {
                doc.dying_units.push(unit.to_string());
            }
        })
    }

    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()> {
        let key = self.store.relation_key(id);
        let mut record: RelationRecord = self
            .doc(&key)?
            .ok_or_else(|| not_found(format!("relation {id}")))?;
        record.dying = true;
        self.put(key, &record);
        Ok(())
    }

    fn release_lease(&mut self, app: &str) -> TxResult<()> {
        // The key's etcd lease lapses on its own; a later claim creates the key again
        // with a higher create revision, so terms still grow.
        self.delete(self.store.lease_key(app));
        Ok(())
    }

    fn delete_unit(&mut self, unit: &str) -> TxResult<()> {
        let app = app_of(unit);
        self.update_app_doc(app, |doc| {
            doc.units.retain(|u| u != unit);
            doc.dying_units.retain(|u| u != unit);
        })?;
        for rel in self.relations_of(app)? {
            self.delete(self.store.unit_bag_key(rel.id, unit));
        }
        self.delete(self.store.unit_key(unit));
        self.delete_under(&self.store.hooks_prefix(unit));
        self.delete(self.store.failing_key(unit));
        self.delete(self.store.logs_key(unit));
        Ok(())
    }

    fn delete_relation(&mut self, id: RelationId) -> TxResult<()> {
        self.delete_under(&self.store.bags_prefix(id));
        self.delete(self.store.relation_key(id));
        Ok(())
    }

    fn delete_application(&mut self, app: &str) -> TxResult<()> {
        for rel in self.relations_of(app)? {
            self.delete(self.store.app_bag_key(rel.id, app));
        }
        for key in [
            self.store.app_key(app),
            self.store.leader_data_key(app),
            self.store.app_status_key(app),
            self.store.pod_spec_key(app),
        ] {
            self.delete(key);
        }
        Ok(())
    }

    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>> {
        let apps = self.scan(&self.store.key("apps/"));
        apps.iter()
            .map(|(k, v)| {
                let doc: AppDoc = decode_value(k, v)?;
                Ok((doc.record.name, doc.record.charm))
            })
            .collect()
    }

    fn app_exists(&mut self, app: &str) -> TxResult<bool> {
        Ok(self.get(&self.store.app_key(app)).is_some())
    }

    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>> {
        let Some(read) = self.app_doc_read(app)? else {
            return Ok(None);
        };
        let doc = &read.doc;
        let leader_data: Bag = self
            .doc(&self.store.leader_data_key(app))?
            .unwrap_or_default();
        Ok(Some(AppView {
            config: Arc::new(doc.record.effective_config()),
            leader_data: Arc::new(leader_data),
            status: self
                .doc(&self.store.app_status_key(app))?
                .unwrap_or_default(),
            module: doc.record.module.clone(),
        }))
    }

    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>> {
        Ok(self
            .app_doc_read(app)?
            .map(|d| d.doc.units.clone())
            .unwrap_or_default())
    }

    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>> {
        Ok(self.app_doc_read(app)?.map(|d| d.doc.next_unit))
    }

    fn unit_exists(&mut self, unit: &str) -> TxResult<bool> {
        Ok(self.exists(&self.store.unit_key(unit)))
    }

    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>> {
        self.doc(&self.store.unit_key(unit))
    }

    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>> {
        let key = self.store.lease_key(app);
        let Some(value) = self.get(&key) else {
            return Ok(None);
        };
        let holder = decode_value::<LeaseDoc>(&key, &value)?.holder;
        // etcd deletes the key when its lease lapses: present is unexpired. The term is its
        // create revision.
        let term = self
            .fetched
            .get(&key)
            .and_then(Option::as_ref)
            .map_or(0, KeyValue::create_revision);
        self.lease_terms.insert(key, term);
        Ok(Some(LeaseHolder {
            holder,
            term: term as u64,
        }))
    }

    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>> {
        Ok(self.doc(&self.store.relation_key(id))?.map(Arc::new))
    }

    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>> {
        let all = self.scan(&self.store.key("relations/"));
        let mut relations = Vec::new();
        for (k, v) in all {
            let record: RelationRecord = decode_value(&k, &v)?;
            if record.local(app).is_some() {
                relations.push(Arc::new(record));
            }
        }
        relations.sort_by_key(|r| r.id);
        Ok(relations)
    }

    fn next_relation_id(&mut self) -> TxResult<RelationId> {
        let last: RelationId = self.doc(&self.store.key("next-relation"))?.unwrap_or(0);
        Ok(last + 1)
    }

    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        let keys = of.iter().map(|u| self.store.unit_bag_key(id, u)).collect();
        self.bags(id, keys)
    }

    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        let keys = of.iter().map(|a| self.store.app_bag_key(id, a)).collect();
        self.bags(id, keys)
    }

    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>> {
        Ok(self
            .doc::<PodSpecRecord>(&self.store.pod_spec_key(app))?
            .map(|p| p.revision))
    }

    fn pod_spec_state(&mut self, app: &str, write: &Arc<PodSpecWrite>) -> TxResult<PodSpecState> {
        let current: Option<PodSpecRecord> = self.doc(&self.store.pod_spec_key(app))?;
        Ok(PodSpecState {
            revision: current.as_ref().map(|p| p.revision),
            same: current
                .is_some_and(|p| p.spec == write.spec && p.k8s_resources == write.k8s_resources),
        })
    }

    fn not_yet_seen(
        &mut self,
        unit: &str,
        runs: charm_model::lifecycle::Runs,
    ) -> TxResult<charm_model::lifecycle::NotYetSeen> {
        // Not a dependency of the step: what a hook does not see yet grows only with hooks
        // queued by changes the step depends on already (a new unit, a new relation), and
        // shrinks only with this unit's own commits.
        let queue = self.peek_queue(unit)?;
        Ok(charm_model::lifecycle::NotYetSeen::of(
            queue.iter().map(|(_, e)| &e.hook),
            runs,
        ))
    }

    fn queued_hooks(&mut self, unit: &str) -> TxResult<Option<Vec<Hook>>> {
        if !self.unit_exists(unit)? {
            return Ok(None);
        }
        Ok(Some(
            self.queue(unit)?.into_iter().map(|e| e.hook).collect(),
        ))
    }

    fn create_application(&mut self, record: ApplicationRecord) -> TxResult<()> {
        let key = self.store.app_key(&record.name);
        let doc = AppDoc {
            record,
            next_unit: 0,
            units: Vec::new(),
            dying: false,
            dying_units: Vec::new(),
        };
        self.create(key, &doc);
        Ok(())
    }

    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> TxResult<()> {
        let mut doc = self
            .app_doc(app)?
            .ok_or_else(|| not_found(format!("application {app}")))?;
        doc.next_unit = number + 1;
        doc.units.push(name.to_string());
        self.put(self.store.app_key(app), &doc);
        self.create(self.store.unit_key(name), &UnitRecord::default());
        Ok(())
    }

    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()> {
        let counter = self.store.key("next-relation");
        // Read, so a concurrent relation's id conflicts with this one.
        self.get(&counter);
        self.put(counter, &record.id);
        self.create(self.store.relation_key(record.id), &record);
        Ok(())
    }

    fn write_bag(&mut self, owner: BagOwner<'_>, writes: &BagWrites) -> TxResult<bool> {
        let key = match owner {
            BagOwner::Unit(id, unit) => self.store.unit_bag_key(id, unit),
            BagOwner::App(id, app) => self.store.app_bag_key(id, app),
            BagOwner::Leader(app) => self.store.leader_data_key(app),
        };
        let mut bag: Bag = self.doc(&key)?.unwrap_or_default();
        let changed = apply_writes(&mut bag, writes);
        if changed {
            self.put(key, &bag);
        }
        Ok(changed)
    }

    fn set_app_status(&mut self, app: &str, status: &Status) -> TxResult<()> {
        self.put(self.store.app_status_key(app), status);
        Ok(())
    }

    fn put_pod_spec(&mut self, app: &str, revision: u64, spec: &Arc<PodSpecWrite>) -> TxResult<()> {
        let write = spec;
        let record = PodSpecRecord {
            revision,
            spec: write.spec.clone(),
            k8s_resources: write.k8s_resources.clone(),
        };
        self.put(self.store.pod_spec_key(app), &record);
        Ok(())
    }

    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> TxResult<()> {
        self.update_unit_doc(unit, |doc| {
            if let Some(status) = update.status {
                doc.status = status.clone();
            }
            if let Some(version) = update.workload_version {
                doc.workload_version = version.to_string();
            }
            if !update.stored.is_empty() {
                apply_writes(Arc::make_mut(&mut doc.stored), update.stored);
            }
            match update.elected_term {
                ElectedTerm::Keep => {}
                ElectedTerm::Set(term) => doc.elected_term = Some(term),
                ElectedTerm::Clear => doc.elected_term = None,
            }
        })
    }

    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> TxResult<()> {
        self.update_unit_doc(unit, |doc| doc.hook_error = error.map(str::to_string))
    }

    fn dequeue(&mut self, unit: &str, seq: u64) -> TxResult<()> {
        self.delete(self.store.hook_key(unit, seq));
        Ok(())
    }

    fn note_failing(&mut self, unit: &str, seq: Option<u64>) -> TxResult<()> {
        let key = self.store.failing_key(unit);
        match seq {
            Some(seq) => self.put(key, &seq),
            None => self.delete(key),
        }
        Ok(())
    }

    fn failing_hook(&mut self, unit: &str) -> TxResult<Option<u64>> {
        self.doc(&self.store.failing_key(unit))
    }

    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()> {
        let key = self.store.logs_key(unit);
        let mut ring: Vec<LogRecord> = self.doc(&key)?.unwrap_or_default();
        for line in lines {
            let seq = seq_at(self.revision, self.queued);
            self.queued += 1;
            ring.push(LogRecord {
                seq,
                ..line.clone()
            });
        }
        let excess = ring.len().saturating_sub(keep);
        ring.drain(..excess);
        self.put(key, &ring);
        Ok(())
    }

    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>> {
        Ok(self.doc(&self.store.logs_key(unit))?.unwrap_or_default())
    }

    fn next_action_id(&mut self) -> TxResult<u64> {
        let last: u64 = self.doc(&self.store.key("next-action"))?.unwrap_or(0);
        Ok(last + 1)
    }

    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>> {
        self.doc(&self.store.action_key(id))
    }

    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()> {
        // The last id given is kept apart from the actions, so an id is never reused.
        let key = self.store.key("next-action");
        let last: u64 = self.doc(&key)?.unwrap_or(0);
        if record.id > last {
            self.put(key, &record.id);
        }
        self.put(self.store.action_key(record.id), record);
        Ok(())
    }

    fn defers_queueing(&mut self, units: usize, hooks: usize) -> TxResult<bool> {
        self.defer |= units > DIRECT_QUEUES || hooks > DIRECT_QUEUES;
        Ok(self.defer)
    }

    fn undelivered_about(&mut self, id: RelationId) -> TxResult<bool> {
        let about = |e: &OutboxEntry| e.hook.relation().is_some_and(|r| r.id == id);
        let mut units: Vec<String> = self
            .deferred
            .iter()
            .filter(|e| about(e))
            .map(|e| e.unit.clone())
            .collect();
        // The step depends on the outboxes (one created meanwhile conflicts with it) and on
        // their cursors: a delivery meanwhile moves hooks into queues the step also read.
        for (key, value) in self.scan(&self.store.key("outbox/")) {
            let cursor_key = self.store.outbox_cursor_key(&key);
            let from: usize = match self.get(&cursor_key) {
                Some(v) => decode_value(&cursor_key, &v)?,
                None => 0,
            };
            let entries: Vec<OutboxEntry> = decode_value(&key, &value)?;
            units.extend(entries.into_iter().skip(from).filter(about).map(|e| e.unit));
        }
        units.sort();
        units.dedup();
        for unit in units {
            // A hook for a unit removed meanwhile is dropped as it is delivered.
            if self.unit_exists(&unit)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        if self.defer {
            // Decided as the hook reaches the queue, without reading it here.
            return Ok(Some(false));
        }
        if !self.unit_exists(unit)? {
            return Ok(None);
        }
        // Depending only on the hooks it coalesces with (see the module doc), so that
        // changes queueing on one unit at once do not conflict.
        let queue = self.peek_queue(unit)?;
        let hooks = queue.iter().map(|(_, e)| &e.hook);
        let Some(at) = crate::store::routing::coalesces_with(hooks, hook) else {
            return Ok(Some(false));
        };
        let (first, equal) = (queue[0].0.clone(), queue[at].0.clone());
        self.depend(&first);
        self.depend(&equal);
        Ok(Some(true))
    }

    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64> {
        assert!(self.queued < OUTBOX_INDEX, "too many hooks in one change");
        if self.defer {
            let seq = seq_at(self.revision, OUTBOX_INDEX | self.queued);
            self.queued += 1;
            self.deferred.push(OutboxEntry {
                unit: unit.to_string(),
                seq,
                hook: hook.clone(),
            });
            return Ok(seq);
        }
        assert!(
            self.direct < 1 << DIRECT_INDEX_BITS,
            "too many hooks in one change"
        );
        let seq = seq_at(self.revision, self.salt << DIRECT_INDEX_BITS | self.direct);
        self.direct += 1;
        // Created: a change that read this revision and picked this seq too conflicts.
        self.create(self.store.hook_key(unit, seq), hook);
        Ok(seq)
    }
}

impl EtcdStore {
    /// The keys and prefixes that hold `records`, to fetch in one round trip.
    pub(super) fn prefetch(&self, records: &[Records<'_>]) -> Vec<Read> {
        let mut reads = Vec::new();
        for record in records {
            match *record {
                Records::App(app) => reads.push(Read::Key(self.app_key(app))),
                Records::Apps => reads.push(Read::Prefix(self.key("apps/"))),
                Records::Unit(unit) => reads.push(Read::Key(self.unit_key(unit))),
                Records::Units => reads.push(Read::Prefix(self.key("units/"))),
                Records::Queue(unit) => reads.push(Read::Prefix(self.hooks_prefix(unit))),
                Records::Queues => reads.push(Read::Prefix(self.key("hooks/"))),
                Records::QueuedHook(unit, seq) => reads.push(Read::Key(self.hook_key(unit, seq))),
                Records::UnitsOf(hooks) => {
                    for (unit, _) in hooks {
                        reads.push(Read::Key(self.unit_key(unit)));
                        reads.push(Read::Prefix(self.hooks_prefix(unit)));
                    }
                }
                Records::Relations => reads.push(Read::Prefix(self.key("relations/"))),
                Records::NextRelation => reads.push(Read::Key(self.key("next-relation"))),
                Records::LeaderData(app) => reads.push(Read::Key(self.leader_data_key(app))),
                Records::AllLeaderData => reads.push(Read::Prefix(self.key("leader-data/"))),
                Records::AppStatus(app) => reads.push(Read::Key(self.app_status_key(app))),
                Records::AppStatuses => reads.push(Read::Prefix(self.key("app-status/"))),
                Records::PodSpec(app) => reads.push(Read::Key(self.pod_spec_key(app))),
                Records::PodSpecs => reads.push(Read::Prefix(self.key("pod-specs/"))),
                Records::Lease(app) => reads.push(Read::Key(self.lease_key(app))),
                Records::Leases => reads.push(Read::Prefix(self.key("leases/"))),
                Records::BagsWritten(changes, unit) => {
                    let app = app_of(unit);
                    reads.extend(
                        (changes.unit_bags.keys())
                            .map(|id| self.unit_bag_key(*id, unit))
                            .chain(changes.app_bags.keys().map(|id| self.app_bag_key(*id, app)))
                            .map(Read::Key),
                    );
                }
                Records::Logs(unit) => reads.push(Read::Key(self.logs_key(unit))),
                Records::AllLogs => reads.push(Read::Prefix(self.key("logs/"))),
                Records::Model => reads.extend(self.model_prefetch()),
            }
        }
        reads.sort();
        reads.dedup();
        reads
    }

    /// Runs a model operation as one optimistic step: reads `prefetch` (and whatever else
    /// the operation turns out to need, at the same revision), then applies its writes in
    /// one `Txn` guarded by what it used; if another host changed any of that meanwhile, the
    /// operation runs again from fresh reads. An operation that writes nothing is a read of
    /// one revision.
    pub(super) async fn optimistic_step(
        &self,
        step: &Step<'_>,
        prefetch: Vec<Read>,
        op: &mut StepOp<'_>,
    ) -> Result<(), StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let seen = self.read(&prefetch, None).await?;
            let mut tx = EtcdTx::new(self, seen.revision);
            tx.absorb(&prefetch, seen);
            loop {
                let verdict = op(&mut tx);
                if !tx.missing.is_empty() {
                    // The run saw absent what it had not fetched: fetch it and run again.
                    let mut missing = std::mem::take(&mut tx.missing);
                    missing.sort();
                    missing.dedup();
                    let seen = self.read(&missing, Some(tx.revision)).await?;
                    tx.absorb(&missing, seen);
                    tx.restart();
                    continue;
                }
                if matches!(verdict, Verdict::Abort(_)) {
                    return Ok(());
                }
                tx.seal();
                if tx.writes.is_empty() {
                    return Ok(());
                }
                if self.write(tx.compares(), tx.ops()).await? {
                    if let Some(outbox) = &tx.outbox
                        && let Err(e) = self.deliver(outbox).await
                    {
                        // Applied all the same: a host's sweep delivers it later.
                        tracing::debug!("{}: hooks left in {outbox}: {e}", step.describe());
                    }
                    return Ok(());
                }
                break;
            }
        }
        Err(Self::contended(&step.describe()))
    }
}
