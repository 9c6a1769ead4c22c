//! The distributed store: leases and model state in etcd (v3 API), for applications whose
//! units run on several machines.
//!
//! # Leases
//!
//! An application's leadership is the key `leases/<app>`, holding the leader's unit name and
//! attached to an etcd lease with a TTL. A claim creates the key in a transaction only if it
//! is absent; the **term is the key's create revision**, which etcd never repeats and which
//! grows with every new leadership. The holder's renewals are keepalives of its etcd lease
//! (one request on an open stream); when the lease lapses etcd deletes the key, and the next
//! claim creates it again with a higher revision. A keepalive that gets no answer is an
//! [`LeaseError::Unavailable`], never a denial: the leadership tracker keeps the guarantee it
//! has and retries.
//!
//! # Fenced commits
//!
//! A hook's commit is one etcd `Txn`: it compares that `leases/<app>` still has the create
//! revision the hook was pinned to (so it exists, under the same leadership), that every key
//! the commit read is unchanged since it was read, and only then applies every write of the
//! hook and queues the hooks they fire. If any comparison fails, nothing is applied and the
//! commit is worked out again from fresh reads, which then report the fence failure or the
//! hook already committed ([`CommitError::NotQueued`]). Every model change is such an
//! optimistic transaction, so several hosts writing one model are serializable.
//!
//! # Hook queues and watches
//!
//! Each unit's queue is one key, `queues/<unit>`, so a change to it is one compare and one
//! put. A hook's `seq` is made from the etcd revision the change read at, so seqs grow
//! across the model and are never reused. Every host watches `queues/`: a hook queued by
//! another host (relation-changed after a remote unit wrote its bag, leader-settings-changed
//! after a new leader wrote its settings) wakes the unit's agent at once.
//!
//! # Limits
//!
//! etcd refuses transactions of more than `--max-txn-ops` operations (128 by default). A
//! commit writes one key per unit it queues hooks on, so relating two applications of more
//! than about sixty units each needs a larger limit; the error says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::routing::{coalesces, deploy_hooks, follow_ups, relation_hooks};
use super::{
    AppStatusRow, BoxFuture, Claim, CommitError, CommitReceipt, Committed, Fence, Lease,
    LeaseError, LeaseStore, ModelStatus, QueuedHook, StateStore, StoreError, UnitStatusRow,
};
use crate::model::{
    ApplicationRecord, Bag, Changes, Hook, PodSpecRecord, RelationEndpoint, RelationId,
    RelationRecord, RelationView, Status, StatusKind, UnitSnapshot, app_of, apply_writes,
};

/// What the `meta` key says about the data under a prefix.
const PROGRAM: &str = "charm-host";
/// The layout of the keys this host writes.
const FORMAT: u32 = 1;
/// How many times a model change is worked out again when another host changed what it
/// read, before it fails as unavailable (transient: the caller retries later).
const MAX_ATTEMPTS: u32 = 64;
/// Bits of a seq below the revision: the index of a hook among those one change queues.
const SEQ_INDEX_BITS: u32 = 20;

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
        let (hosts, prefix) = match rest.split_once('/') {
            Some((hosts, prefix)) => (hosts, prefix.trim_matches('/')),
            None => (rest, ""),
        };
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
        })
    }
}

/// An application, as stored. Its status and the data its leader writes are separate keys,
/// so a leader's commit does not conflict with a unit being added.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AppDoc {
    record: ApplicationRecord,
    next_unit: u32,
    units: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct UnitDoc {
    status: Status,
    workload_version: String,
    hook_error: Option<String>,
    stored: Bag,
    elected_term: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct QueueEntry {
    seq: u64,
    hook: Hook,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseDoc {
    holder: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct MetaDoc {
    program: String,
    format: u32,
    model: String,
}

/// One read of a transaction: a key, or every key under a prefix.
enum Read {
    Key(String),
    Prefix(String),
}

/// What a read transaction saw: the revision, and the key-values of each read in order.
struct Seen {
    revision: i64,
    results: Vec<Vec<KeyValue>>,
}

impl Seen {
    fn one(&self, i: usize) -> Option<&KeyValue> {
        self.results[i].first()
    }

    fn all(&self, i: usize) -> &[KeyValue] {
        &self.results[i]
    }
}

/// Leases and model state in etcd.
pub struct EtcdStore {
    model: String,
    /// Ends with `/`.
    prefix: String,
    client: Client,
    config: EtcdConfig,
    /// Open keepalive streams, by etcd lease id. A stream is taken out while in use and put
    /// back only after its answer arrived, so an answer never reaches a later renewal.
    keepers: Mutex<HashMap<i64, (LeaseKeeper, LeaseKeepAliveStream)>>,
    /// The leaderships this store claimed, by (application, holder): term and etcd lease
    /// id. While the etcd lease lives its key does too, so renewing is one keepalive.
    held: Mutex<HashMap<(String, String), (u64, i64)>>,
    /// Wake-ups for agents idle on a unit's queue, by unit.
    signals: Mutex<HashMap<String, Arc<Notify>>>,
    watching: OnceLock<()>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("model", &self.model)
            .field("prefix", &self.prefix)
            .field("endpoints", &self.config.endpoints)
            .finish()
    }
}

fn unavailable(e: etcd_client::Error) -> StoreError {
    let text = e.to_string();
    if text.contains("too many operations in txn request") {
        return StoreError::Unavailable(format!(
            "{text}: raise etcd's --max-txn-ops (a change queued hooks on more units than it allows)"
        ));
    }
    StoreError::Unavailable(format!("etcd: {text}"))
}

fn lease_unavailable(e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Unavailable(format!("etcd: {e}"))
}

fn not_found(what: impl Into<String>) -> StoreError {
    StoreError::NotFound(what.into())
}

fn decode<T: DeserializeOwned>(kv: &KeyValue) -> Result<T, StoreError> {
    serde_json::from_slice(kv.value()).map_err(|e| {
        StoreError::Corrupt(format!(
            "etcd key {}: {e}",
            String::from_utf8_lossy(kv.key())
        ))
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("store documents serialize")
}

/// A compare that holds while `key` is as it was read (`seen`: absent if `None`).
fn unchanged(key: &str, seen: Option<&KeyValue>) -> Compare {
    Compare::mod_revision(
        key,
        CompareOp::Equal,
        seen.map_or(0, KeyValue::mod_revision),
    )
}

/// A compare that holds while nothing under `prefix` was created or changed after `revision`.
fn none_newer(prefix: &str, revision: i64) -> Compare {
    Compare::mod_revision(prefix, CompareOp::Less, revision + 1).with_prefix()
}

/// The seq of the `index`-th hook queued by a change that read at `revision`: above every
/// seq queued by a change that revision could see.
fn seq_at(revision: i64, index: usize) -> u64 {
    assert!(index < 1 << SEQ_INDEX_BITS, "too many hooks in one change");
    ((revision as u64 + 1) << SEQ_INDEX_BITS) | index as u64
}

/// Queues `hooks` onto `queues` (each unit's queue as read), coalescing; returns what was
/// queued. Seqs come from `revision`.
fn enqueue_into(
    queues: &mut BTreeMap<String, Vec<QueueEntry>>,
    hooks: Vec<(String, Hook)>,
    revision: i64,
) -> Vec<QueuedHook> {
    let mut queued = Vec::new();
    for (unit, hook) in hooks {
        let Some(queue) = queues.get_mut(&unit) else {
            continue;
        };
        let current: Vec<&Hook> = queue.iter().map(|e| &e.hook).collect();
        if coalesces(&current, &hook) {
            continue;
        }
        let seq = seq_at(revision, queued.len());
        queue.push(QueueEntry {
            seq,
            hook: hook.clone(),
        });
        queued.push(QueuedHook { unit, seq, hook });
    }
    queued
}

impl EtcdStore {
    /// Connects to etcd and opens model `model` under `config.prefix`, creating it if the
    /// prefix is empty. Data of another program, a newer host or another model under the
    /// prefix is refused ([`StoreError::Incompatible`]) and left untouched.
    pub async fn connect(config: EtcdConfig, model: &str) -> Result<EtcdStore, StoreError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.request_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(2), config.request_timeout);
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!("etcd at {}: {e}", config.endpoints.join(",")))
            })?;
        let store = EtcdStore {
            model: model.to_string(),
            prefix: format!("{}/", config.prefix),
            client,
            config,
            keepers: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            signals: Mutex::new(HashMap::new()),
            watching: OnceLock::new(),
        };
        store.open_model().await?;
        Ok(store)
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    fn key(&self, path: impl std::fmt::Display) -> String {
        format!("{}{path}", self.prefix)
    }

    fn app_key(&self, app: &str) -> String {
        self.key(format_args!("apps/{app}"))
    }
    fn unit_key(&self, unit: &str) -> String {
        self.key(format_args!("units/{unit}"))
    }
    fn queue_key(&self, unit: &str) -> String {
        self.key(format_args!("queues/{unit}"))
    }
    fn lease_key(&self, app: &str) -> String {
        self.key(format_args!("leases/{app}"))
    }
    fn relation_key(&self, id: RelationId) -> String {
        self.key(format_args!("relations/{id:010}"))
    }
    fn unit_bag_key(&self, id: RelationId, unit: &str) -> String {
        self.key(format_args!("bags/{id:010}/unit/{unit}"))
    }
    fn app_bag_key(&self, id: RelationId, app: &str) -> String {
        self.key(format_args!("bags/{id:010}/app/{app}"))
    }
    fn bags_prefix(&self, id: RelationId) -> String {
        self.key(format_args!("bags/{id:010}/"))
    }
    fn leader_data_key(&self, app: &str) -> String {
        self.key(format_args!("leader-data/{app}"))
    }
    fn app_status_key(&self, app: &str) -> String {
        self.key(format_args!("app-status/{app}"))
    }
    fn pod_spec_key(&self, app: &str) -> String {
        self.key(format_args!("pod-specs/{app}"))
    }

    async fn open_model(&self) -> Result<(), StoreError> {
        let key = self.key("meta");
        let mine = MetaDoc {
            program: PROGRAM.into(),
            format: FORMAT,
            model: self.model.clone(),
        };
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), encode(&mine), None)])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(unavailable)?;
        if resp.succeeded() {
            return Ok(());
        }
        let Some(TxnOpResponse::Get(get)) = resp.op_responses().into_iter().next() else {
            return Err(StoreError::Unavailable(
                "etcd: empty transaction answer".into(),
            ));
        };
        let Some(kv) = get.kvs().first() else {
            return Err(StoreError::Unavailable(
                "etcd: the model's meta key vanished while opening".into(),
            ));
        };
        let theirs: MetaDoc = serde_json::from_slice(kv.value()).map_err(|_| {
            StoreError::Incompatible(format!(
                "etcd prefix {}: holds data of another program",
                self.prefix
            ))
        })?;
        if theirs.program != PROGRAM {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds data of {}",
                self.prefix, theirs.program
            )));
        }
        if theirs.format > FORMAT {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: written by a newer host (format {}, this host reads up to {FORMAT})",
                self.prefix, theirs.format
            )));
        }
        if theirs.model != self.model {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds model {}, not {}",
                self.prefix, theirs.model, self.model
            )));
        }
        Ok(())
    }

    /// Reads several keys and prefixes in one transaction, so they are one consistent view
    /// (at `revision`, if given; the latest otherwise).
    async fn read(&self, reads: &[Read], revision: Option<i64>) -> Result<Seen, StoreError> {
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
    async fn write(&self, compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<bool, StoreError> {
        let resp = self
            .client
            .kv_client()
            .txn(Txn::new().when(compares).and_then(ops))
            .await
            .map_err(unavailable)?;
        Ok(resp.succeeded())
    }

    fn contended(what: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "{what}: other hosts kept changing the same keys ({MAX_ATTEMPTS} attempts)"
        ))
    }

    /// Applications by name, from a read of `apps/`.
    fn apps_of(kvs: &[KeyValue]) -> Result<BTreeMap<String, AppDoc>, StoreError> {
        kvs.iter()
            .map(|kv| decode::<AppDoc>(kv).map(|a| (a.record.name.clone(), a)))
            .collect()
    }

    fn relations_of(kvs: &[KeyValue]) -> Result<Vec<RelationRecord>, StoreError> {
        kvs.iter().map(decode).collect()
    }

    fn queue_of(kv: Option<&KeyValue>) -> Result<Vec<QueueEntry>, StoreError> {
        kv.map_or(Ok(Vec::new()), decode)
    }

    /// Reads the queues of `units` at `revision`; with the compares that hold while they
    /// are unchanged.
    async fn read_queues(
        &self,
        units: &BTreeSet<String>,
        revision: i64,
        compares: &mut Vec<Compare>,
    ) -> Result<BTreeMap<String, Vec<QueueEntry>>, StoreError> {
        if units.is_empty() {
            return Ok(BTreeMap::new());
        }
        let reads: Vec<Read> = units.iter().map(|u| Read::Key(self.queue_key(u))).collect();
        let seen = self.read(&reads, Some(revision)).await?;
        let mut queues = BTreeMap::new();
        for (i, unit) in units.iter().enumerate() {
            compares.push(unchanged(&self.queue_key(unit), seen.one(i)));
            queues.insert(unit.clone(), Self::queue_of(seen.one(i))?);
        }
        Ok(queues)
    }

    fn put_queues(
        &self,
        before: &BTreeMap<String, Vec<QueueEntry>>,
        after: &BTreeMap<String, Vec<QueueEntry>>,
        ops: &mut Vec<TxnOp>,
    ) {
        for (unit, queue) in after {
            if before.get(unit) != Some(queue) {
                ops.push(TxnOp::put(self.queue_key(unit), encode(queue), None));
            }
        }
    }

    /// The wake-up for `unit`'s agent.
    fn signal(&self, unit: &str) -> Arc<Notify> {
        self.signals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(unit.to_string())
            .or_default()
            .clone()
    }

    fn wake_all(&self) {
        for signal in self
            .signals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            signal.notify_one();
        }
    }

    /// Watches `queues/` for as long as the store lives, waking the agent of each unit whose
    /// queue grew. After a broken watch every agent is woken, so none misses a hook.
    fn start_watch(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let mut watch = self.client.watch_client();
        let prefix = self.key("queues/");
        tokio::spawn(async move {
            loop {
                let stream = watch
                    .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix()))
                    .await;
                let Some(store) = weak.upgrade() else { return };
                store.wake_all();
                drop(store);
                let mut stream = match stream {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!("etcd watch on queues failed: {e}; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                // A broken or cancelled watch ends the stream: start another.
                while let Ok(Some(resp)) = stream.message().await {
                    let Some(store) = weak.upgrade() else { return };
                    for event in resp.events() {
                        if event.event_type() != EventType::Put {
                            continue;
                        }
                        let Some(kv) = event.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key());
                        if let Some(unit) = key.strip_prefix(prefix.as_str()) {
                            let signals = store.signals.lock().unwrap_or_else(|e| e.into_inner());
                            if let Some(signal) = signals.get(unit) {
                                signal.notify_one();
                            }
                        }
                    }
                }
                if weak.strong_count() == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }

    /// The remaining TTL of etcd lease `id` after one keepalive, or `None` if it expired.
    async fn keep_alive(&self, id: i64) -> Result<Option<Duration>, LeaseError> {
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

    fn held_lease(&self, key: &(String, String)) -> Option<(u64, i64)> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn remember(&self, key: (String, String), term: u64, id: i64) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (term, id));
    }

    /// Forgets a leadership that lapsed or was given up, and its keepalive stream.
    fn forget(&self, key: &(String, String), id: i64) {
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
    async fn lease_key_of(&self, app: &str) -> Result<Option<(String, u64, i64)>, LeaseError> {
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
fn ttl_secs(duration: Duration) -> i64 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    secs.max(1) as i64
}

impl LeaseStore for EtcdStore {
    fn claim<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Claim, LeaseError>> {
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
                        });
                    }
                    None => {}
                }
                let ttl = ttl_secs(duration);
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

    fn release<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
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

    fn leader<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Option<Lease>, LeaseError>> {
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
}

impl StateStore for EtcdStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn add_application<'a>(
        &'a self,
        app: ApplicationRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = self.app_key(&app.name);
            let name = app.name.clone();
            let doc = AppDoc {
                record: app,
                next_unit: 0,
                units: Vec::new(),
            };
            let created = self
                .write(
                    vec![Compare::create_revision(key.as_str(), CompareOp::Equal, 0)],
                    vec![TxnOp::put(key.as_str(), encode(&doc), None)],
                )
                .await?;
            if created {
                Ok(())
            } else {
                Err(StoreError::AlreadyExists(format!("application {name}")))
            }
        })
    }

    fn application<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ApplicationRecord, StoreError>> {
        Box::pin(async move {
            let seen = self.read(&[Read::Key(self.app_key(name))], None).await?;
            let kv = seen
                .one(0)
                .ok_or_else(|| not_found(format!("application {name}")))?;
            Ok(decode::<AppDoc>(kv)?.record)
        })
    }

    fn applications(&self) -> BoxFuture<'_, Result<Vec<ApplicationRecord>, StoreError>> {
        Box::pin(async move {
            let seen = self.read(&[Read::Prefix(self.key("apps/"))], None).await?;
            Ok(Self::apps_of(seen.all(0))?
                .into_values()
                .map(|a| a.record)
                .collect())
        })
    }

    fn add_unit<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(async move {
            for _ in 0..MAX_ATTEMPTS {
                let app_key = self.app_key(app);
                let seen = self.read(&[Read::Key(app_key.clone())], None).await?;
                let kv = seen
                    .one(0)
                    .ok_or_else(|| not_found(format!("application {app}")))?;
                let mut doc: AppDoc = decode(kv)?;
                let name = format!("{app}/{}", doc.next_unit);
                doc.next_unit += 1;
                doc.units.push(name.clone());
                let mut queues = BTreeMap::from([(name.clone(), Vec::new())]);
                let hooks = deploy_hooks()
                    .into_iter()
                    .map(|h| (name.clone(), h))
                    .collect();
                enqueue_into(&mut queues, hooks, seen.revision);
                let unit_key = self.unit_key(&name);
                let queue_key = self.queue_key(&name);
                let compares = vec![
                    unchanged(&app_key, Some(kv)),
                    Compare::create_revision(unit_key.as_str(), CompareOp::Equal, 0),
                ];
                let ops = vec![
                    TxnOp::put(app_key.as_str(), encode(&doc), None),
                    TxnOp::put(unit_key.as_str(), encode(&UnitDoc::default()), None),
                    TxnOp::put(queue_key.as_str(), encode(&queues[&name]), None),
                ];
                if self.write(compares, ops).await? {
                    return Ok(name);
                }
            }
            Err(Self::contended(&format!("adding a unit to {app}")))
        })
    }

    fn units<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let seen = self.read(&[Read::Key(self.app_key(app))], None).await?;
            let kv = seen
                .one(0)
                .ok_or_else(|| not_found(format!("application {app}")))?;
            Ok(decode::<AppDoc>(kv)?.units)
        })
    }

    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> BoxFuture<'a, Result<(RelationRecord, Vec<QueuedHook>), StoreError>> {
        Box::pin(async move {
            let apps_prefix = self.key("apps/");
            let relations_prefix = self.key("relations/");
            let counter = self.key("next-relation");
            for _ in 0..MAX_ATTEMPTS {
                let seen = self
                    .read(
                        &[
                            Read::Prefix(apps_prefix.clone()),
                            Read::Prefix(relations_prefix.clone()),
                            Read::Key(counter.clone()),
                        ],
                        None,
                    )
                    .await?;
                let apps = Self::apps_of(seen.all(0))?;
                for e in &endpoints {
                    if !apps.contains_key(&e.app) {
                        return Err(not_found(format!("application {}", e.app)));
                    }
                }
                let existing = Self::relations_of(seen.all(1))?;
                // The same endpoints in either order are the same relation.
                if let Some(same) = existing.iter().find(|r| {
                    r.endpoints.len() == endpoints.len()
                        && r.endpoints.iter().all(|e| endpoints.contains(e))
                }) {
                    return Err(StoreError::AlreadyExists(format!("relation {}", same.id)));
                }
                let last: RelationId = seen.one(2).map(decode).transpose()?.unwrap_or(0);
                let record = RelationRecord {
                    id: last + 1,
                    interface: interface.to_string(),
                    endpoints: endpoints.clone(),
                };
                let units_of =
                    |app: &str| apps.get(app).map(|a| a.units.clone()).unwrap_or_default();
                let hooks = relation_hooks(&record, units_of);
                let mut compares = vec![
                    none_newer(&apps_prefix, seen.revision),
                    none_newer(&relations_prefix, seen.revision),
                    unchanged(&counter, seen.one(2)),
                ];
                let targets = hooks.iter().map(|(u, _)| u.clone()).collect();
                let before = self
                    .read_queues(&targets, seen.revision, &mut compares)
                    .await?;
                let mut after = before.clone();
                let queued = enqueue_into(&mut after, hooks, seen.revision);
                let mut ops = vec![
                    TxnOp::put(self.relation_key(record.id), encode(&record), None),
                    TxnOp::put(counter.as_str(), encode(&record.id), None),
                ];
                self.put_queues(&before, &after, &mut ops);
                if self.write(compares, ops).await? {
                    return Ok((record, queued));
                }
            }
            Err(Self::contended("adding a relation"))
        })
    }

    fn enqueue<'a>(
        &'a self,
        hooks: Vec<(String, Hook)>,
    ) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let units: BTreeSet<String> = hooks.iter().map(|(u, _)| u.clone()).collect();
            for _ in 0..MAX_ATTEMPTS {
                let reads: Vec<Read> = units.iter().map(|u| Read::Key(self.unit_key(u))).collect();
                let seen = self.read(&reads, None).await?;
                let mut compares = Vec::new();
                for (i, unit) in units.iter().enumerate() {
                    let kv = seen
                        .one(i)
                        .ok_or_else(|| not_found(format!("unit {unit}")))?;
                    compares.push(unchanged(&self.unit_key(unit), Some(kv)));
                }
                let before = self
                    .read_queues(&units, seen.revision, &mut compares)
                    .await?;
                let mut after = before.clone();
                let queued = enqueue_into(&mut after, hooks.clone(), seen.revision);
                let mut ops = Vec::new();
                self.put_queues(&before, &after, &mut ops);
                if ops.is_empty() || self.write(compares, ops).await? {
                    return Ok(queued);
                }
            }
            Err(Self::contended("queueing hooks"))
        })
    }

    fn queued<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let seen = self
                .read(
                    &[
                        Read::Key(self.unit_key(unit)),
                        Read::Key(self.queue_key(unit)),
                    ],
                    None,
                )
                .await?;
            if seen.one(0).is_none() {
                return Err(not_found(format!("unit {unit}")));
            }
            Ok(Self::queue_of(seen.one(1))?
                .into_iter()
                .map(|e| QueuedHook {
                    unit: unit.to_string(),
                    seq: e.seq,
                    hook: e.hook,
                })
                .collect())
        })
    }

    fn relations(&self) -> BoxFuture<'_, Result<Vec<RelationRecord>, StoreError>> {
        Box::pin(async move {
            let seen = self
                .read(&[Read::Prefix(self.key("relations/"))], None)
                .await?;
            Self::relations_of(seen.all(0))
        })
    }

    fn snapshot<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<UnitSnapshot, StoreError>> {
        Box::pin(async move {
            let app_name = app_of(unit);
            let seen = self
                .read(
                    &[
                        Read::Key(self.unit_key(unit)),
                        Read::Prefix(self.key("apps/")),
                        Read::Prefix(self.key("relations/")),
                        Read::Key(self.leader_data_key(app_name)),
                        Read::Key(self.app_status_key(app_name)),
                    ],
                    None,
                )
                .await?;
            let u: UnitDoc = decode(
                seen.one(0)
                    .ok_or_else(|| not_found(format!("unit {unit}")))?,
            )?;
            let apps = Self::apps_of(seen.all(1))?;
            let app = apps
                .get(app_name)
                .ok_or_else(|| not_found(format!("application {app_name}")))?;
            let relations: Vec<RelationRecord> = Self::relations_of(seen.all(2))?
                .into_iter()
                .filter(|r| r.local(app_name).is_some() && r.remote(app_name).is_some())
                .collect();
            let bag_reads: Vec<Read> = relations
                .iter()
                .map(|r| Read::Prefix(self.bags_prefix(r.id)))
                .collect();
            let bags = if bag_reads.is_empty() {
                None
            } else {
                Some(self.read(&bag_reads, Some(seen.revision)).await?)
            };
            let config = app.record.effective_config();
            let mut views = BTreeMap::new();
            for (i, rel) in relations.iter().enumerate() {
                let local = rel.local(app_name).expect("filtered above");
                let remote = rel.remote(app_name).expect("filtered above");
                let mut stored: BTreeMap<String, Bag> = BTreeMap::new();
                for kv in bags.as_ref().map_or(&[][..], |b| b.all(i)) {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    stored.insert(key, decode(kv)?);
                }
                let remote_units: Vec<String> = apps
                    .get(&remote.app)
                    .map(|a| {
                        a.units
                            .iter()
                            .filter(|u| u.as_str() != unit)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let mut unit_bags = BTreeMap::new();
                for name in remote_units.iter().map(String::as_str).chain([unit]) {
                    let bag = stored
                        .get(&self.unit_bag_key(rel.id, name))
                        .cloned()
                        .unwrap_or_default();
                    unit_bags.insert(name.to_string(), Arc::new(bag));
                }
                let mut app_bags = BTreeMap::new();
                for name in [app_name, remote.app.as_str()] {
                    let bag = stored
                        .get(&self.app_bag_key(rel.id, name))
                        .cloned()
                        .unwrap_or_default();
                    app_bags.insert(name.to_string(), Arc::new(bag));
                }
                views.insert(
                    rel.id,
                    RelationView {
                        id: rel.id,
                        endpoint: local.endpoint.clone(),
                        remote_app: remote.app.clone(),
                        remote_units,
                        unit_bags,
                        app_bags,
                    },
                );
            }
            Ok(UnitSnapshot {
                model: self.model.clone(),
                unit: unit.to_string(),
                app: app_name.to_string(),
                config: Arc::new(config),
                relations: views,
                leader_data: Arc::new(seen.one(3).map(decode).transpose()?.unwrap_or_default()),
                unit_status: u.status,
                app_status: seen.one(4).map(decode).transpose()?.unwrap_or_default(),
                stored: Arc::new(u.stored),
                elected_term: u.elected_term,
            })
        })
    }

    fn commit<'a>(
        &'a self,
        unit: &'a str,
        hook: Option<u64>,
        changes: &'a Changes,
        fence: Option<&'a Fence>,
    ) -> BoxFuture<'a, Result<Committed, CommitError>> {
        Box::pin(async move {
            for _ in 0..MAX_ATTEMPTS {
                if let Some(done) = self.try_commit(unit, hook, changes, fence).await? {
                    return Ok(done);
                }
            }
            Err(Self::contended(&format!("commit of {unit}")).into())
        })
    }

    fn set_hook_error<'a>(
        &'a self,
        unit: &'a str,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = self.unit_key(unit);
            for _ in 0..MAX_ATTEMPTS {
                let seen = self.read(&[Read::Key(key.clone())], None).await?;
                let kv = seen
                    .one(0)
                    .ok_or_else(|| not_found(format!("unit {unit}")))?;
                let mut doc: UnitDoc = decode(kv)?;
                if doc.hook_error == error {
                    return Ok(());
                }
                doc.hook_error = error.clone();
                let put = TxnOp::put(key.as_str(), encode(&doc), None);
                if self
                    .write(vec![unchanged(&key, Some(kv))], vec![put])
                    .await?
                {
                    return Ok(());
                }
            }
            Err(Self::contended(&format!("error status of {unit}")))
        })
    }

    fn pod_spec<'a>(
        &'a self,
        app: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodSpecRecord>, StoreError>> {
        Box::pin(async move {
            let seen = self
                .read(
                    &[
                        Read::Key(self.app_key(app)),
                        Read::Key(self.pod_spec_key(app)),
                    ],
                    None,
                )
                .await?;
            if seen.one(0).is_none() {
                return Err(not_found(format!("application {app}")));
            }
            seen.one(1).map(decode).transpose()
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<ModelStatus, StoreError>> {
        Box::pin(async move {
            let seen = self
                .read(
                    &[
                        Read::Prefix(self.key("apps/")),
                        Read::Prefix(self.key("units/")),
                        Read::Prefix(self.key("app-status/")),
                        Read::Prefix(self.key("pod-specs/")),
                        Read::Prefix(self.key("leases/")),
                    ],
                    None,
                )
                .await?;
            let by_key = |i: usize| -> BTreeMap<String, &KeyValue> {
                seen.all(i)
                    .iter()
                    .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv))
                    .collect()
            };
            let (units, statuses, pods, leases) = (by_key(1), by_key(2), by_key(3), by_key(4));
            let mut status = ModelStatus::default();
            for (name, app) in Self::apps_of(seen.all(0))? {
                let lease = match leases.get(&self.lease_key(&name)) {
                    Some(kv) => Some((decode::<LeaseDoc>(kv)?.holder, kv.create_revision() as u64)),
                    None => None,
                };
                status.applications.push(AppStatusRow {
                    name: name.clone(),
                    charm: app.record.charm.clone(),
                    status: statuses
                        .get(&self.app_status_key(&name))
                        .map(|kv| decode(kv))
                        .transpose()?
                        .unwrap_or_default(),
                    leader: lease.as_ref().map(|l| l.0.clone()),
                    term: lease.as_ref().map(|l| l.1),
                    pod_spec_revision: pods
                        .get(&self.pod_spec_key(&name))
                        .map(|kv| decode::<PodSpecRecord>(kv).map(|p| p.revision))
                        .transpose()?,
                });
                for unit in &app.units {
                    let u: UnitDoc = units
                        .get(&self.unit_key(unit))
                        .map(|kv| decode(kv))
                        .transpose()?
                        .unwrap_or_default();
                    status.units.push(UnitStatusRow {
                        name: unit.clone(),
                        leader: lease.as_ref().is_some_and(|l| &l.0 == unit),
                        status: match u.hook_error {
                            Some(e) => Status::new(StatusKind::Error, e),
                            None => u.status,
                        },
                        workload_version: u.workload_version,
                    });
                }
            }
            Ok(status)
        })
    }

    fn queue_signal(self: Arc<Self>, unit: &str) -> Option<Arc<Notify>> {
        if self.watching.set(()).is_ok() {
            self.start_watch();
        }
        Some(self.signal(unit))
    }
}

impl EtcdStore {
    /// One attempt at a commit: `None` if another host changed what it read in the meantime.
    async fn try_commit(
        &self,
        unit: &str,
        hook: Option<u64>,
        changes: &Changes,
        fence: Option<&Fence>,
    ) -> Result<Option<Committed>, CommitError> {
        let app = app_of(unit);
        let unit_key = self.unit_key(unit);
        let queue_key = self.queue_key(unit);
        let apps_prefix = self.key("apps/");
        let relations_prefix = self.key("relations/");
        let leader_key = self.leader_data_key(app);
        let pod_key = self.pod_spec_key(app);
        let lease_key = self.lease_key(app);
        let seen = self
            .read(
                &[
                    Read::Key(unit_key.clone()),
                    Read::Key(queue_key.clone()),
                    Read::Prefix(apps_prefix.clone()),
                    Read::Prefix(relations_prefix.clone()),
                    Read::Key(leader_key.clone()),
                    Read::Key(pod_key.clone()),
                    Read::Key(lease_key.clone()),
                ],
                None,
            )
            .await?;
        // Validate everything first: the transaction below either applies all or nothing.
        let unit_kv = seen
            .one(0)
            .ok_or_else(|| not_found(format!("unit {unit}")))?;
        let mut compares = vec![
            unchanged(&unit_key, Some(unit_kv)),
            unchanged(&queue_key, seen.one(1)),
            none_newer(&apps_prefix, seen.revision),
            none_newer(&relations_prefix, seen.revision),
        ];
        match fence {
            Some(f) => {
                let lease = seen.one(6);
                let holds = f.app == app
                    && f.holder == unit
                    && lease.is_some_and(|kv| {
                        kv.create_revision() as u64 == f.term
                            && decode::<LeaseDoc>(kv).is_ok_and(|d| d.holder == f.holder)
                    });
                if !holds {
                    return Err(CommitError::Fenced { fence: f.clone() });
                }
                // The leadership key is recreated with a new create revision by every new
                // leadership, and deleted when the lease lapses: this is the fence.
                compares.push(Compare::create_revision(
                    lease_key.as_str(),
                    CompareOp::Equal,
                    f.term as i64,
                ));
            }
            None if changes.needs_fence() => return Err(CommitError::Unfenced),
            None => {}
        }
        let relations = Self::relations_of(seen.all(3))?;
        for id in changes.unit_bags.keys().chain(changes.app_bags.keys()) {
            let visible = relations
                .iter()
                .any(|r| r.id == *id && r.local(app).is_some());
            if !visible {
                return Err(not_found(format!("relation {id}")).into());
            }
        }
        let mut own_queue = Self::queue_of(seen.one(1))?;
        if let Some(seq) = hook {
            let before = own_queue.len();
            own_queue.retain(|e| e.seq != seq);
            if own_queue.len() == before {
                return Err(CommitError::NotQueued {
                    unit: unit.to_string(),
                    seq,
                });
            }
        }
        let apps = Self::apps_of(seen.all(2))?;

        // The bags the hook writes.
        let bag_keys: Vec<(RelationId, bool, String)> = changes
            .unit_bags
            .keys()
            .map(|id| (*id, false, self.unit_bag_key(*id, unit)))
            .chain(
                changes
                    .app_bags
                    .keys()
                    .map(|id| (*id, true, self.app_bag_key(*id, app))),
            )
            .collect();
        let mut ops = Vec::new();
        let mut receipt = CommitReceipt::default();
        if !bag_keys.is_empty() {
            let reads: Vec<Read> = bag_keys
                .iter()
                .map(|(_, _, k)| Read::Key(k.clone()))
                .collect();
            let bags = self.read(&reads, Some(seen.revision)).await?;
            for (i, (id, is_app, key)) in bag_keys.iter().enumerate() {
                compares.push(unchanged(key, bags.one(i)));
                let mut bag: Bag = bags.one(i).map(decode).transpose()?.unwrap_or_default();
                let writes = if *is_app {
                    &changes.app_bags[id]
                } else {
                    &changes.unit_bags[id]
                };
                if apply_writes(&mut bag, writes) {
                    ops.push(TxnOp::put(key.as_str(), encode(&bag), None));
                    if *is_app {
                        receipt.app_bags_changed.push(*id);
                    } else {
                        receipt.unit_bags_changed.push(*id);
                    }
                }
            }
        }
        if !changes.leader_data.is_empty() {
            compares.push(unchanged(&leader_key, seen.one(4)));
            let mut data: Bag = seen.one(4).map(decode).transpose()?.unwrap_or_default();
            if apply_writes(&mut data, &changes.leader_data) {
                receipt.leader_data_changed = true;
                ops.push(TxnOp::put(leader_key.as_str(), encode(&data), None));
            }
        }
        if let Some(status) = &changes.app_status {
            ops.push(TxnOp::put(self.app_status_key(app), encode(status), None));
        }
        if let Some(write) = &changes.pod_spec {
            compares.push(unchanged(&pod_key, seen.one(5)));
            let current: Option<PodSpecRecord> = seen.one(5).map(decode).transpose()?;
            let unchanged_spec = current
                .as_ref()
                .is_some_and(|p| p.spec == write.spec && p.k8s_resources == write.k8s_resources);
            if !unchanged_spec {
                let revision = current.as_ref().map_or(1, |p| p.revision + 1);
                let record = PodSpecRecord {
                    revision,
                    spec: write.spec.clone(),
                    k8s_resources: write.k8s_resources.clone(),
                };
                ops.push(TxnOp::put(pod_key.as_str(), encode(&record), None));
                receipt.pod_spec_revision = Some(revision);
            }
        }
        let mut doc: UnitDoc = decode(unit_kv)?;
        let before_doc = doc.clone();
        if let Some(status) = &changes.unit_status {
            doc.status = status.clone();
        }
        if let Some(version) = &changes.workload_version {
            doc.workload_version = version.clone();
        }
        apply_writes(&mut doc.stored, &changes.stored);
        if let Some(term) = changes.elected_term {
            doc.elected_term = Some(term);
        } else if fence.is_none() {
            // It ran as a follower: leader-elected is owed should it lead again.
            doc.elected_term = None;
        }
        if doc != before_doc {
            ops.push(TxnOp::put(unit_key.as_str(), encode(&doc), None));
        }
        if hook.is_some() {
            ops.push(TxnOp::put(queue_key.as_str(), encode(&own_queue), None));
        }

        // The hooks the changes fire on other units, queued in the same transaction.
        let units_of = |a: &str| apps.get(a).map(|d| d.units.clone()).unwrap_or_default();
        let hooks = follow_ups(unit, &receipt, &relations, units_of);
        let targets: BTreeSet<String> = hooks.iter().map(|(u, _)| u.clone()).collect();
        let before = self
            .read_queues(&targets, seen.revision, &mut compares)
            .await?;
        let mut after = before.clone();
        let queued = enqueue_into(&mut after, hooks, seen.revision);
        self.put_queues(&before, &after, &mut ops);

        if ops.is_empty() || self.write(compares, ops).await? {
            Ok(Some(Committed { receipt, queued }))
        } else {
            Ok(None)
        }
    }
}
