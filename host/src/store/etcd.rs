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
//! Each queued hook is one key, `hooks/<unit>/<seq>` (the seq zero-padded, so key order is
//! seq order), holding the hook. A hook's `seq` is made from the etcd revision the change
//! read at, so seqs grow across the model and are never reused; the low bits that tell
//! apart the hooks of one change start at a random offset, so two changes that read one
//! revision rarely pick one seq (the one that commits second would run again: every hook
//! key is created, never overwritten). Hooks put in an outbox, below, take theirs from
//! another half of the revision's, see [`OUTBOX_INDEX`].
//!
//! Queueing a hook is one created key, whatever the queue holds: a thousand units firing
//! relation-changed on one unit at once do not conflict over its queue, and a commit writes
//! and sends to the watchers the hook it queues, not the queue. A change depends on a
//! unit's queue only as far as it uses it: the hook it commits (still queued), and, when a
//! hook it fires coalesces with one already waiting ([`super::routing::coalesces`]), the
//! queue's first hook and that one, still queued. Taking a hook off is deleting its key.
//! The first hook of a unit's queue is the one its agent runs, but for a race: a change
//! that read its seq before the agent took up a later one, and committed after, sorts
//! first. A hook that coalesces into the one running then is not lost: that hook's commit
//! checks that what it read is unchanged ([`charm_model::snapshot::HookRead`]), so it
//! either ran on a model that holds the change or runs again.
//!
//! Every host watches `hooks/`: a hook queued by another host (relation-changed after a
//! remote unit wrote its bag, leader-settings-changed after a new leader wrote its
//! settings) wakes the unit's agent at once.
//!
//! Format 1 kept each queue in one key, `queues/<unit>`; a host opening a model of format
//! 1 moves its queues to format 2's keys first. Every host of a model runs one format:
//! stop the model's hosts before starting upgraded ones.
//!
//! # Actions
//!
//! Each action is one key, `actions/<id>` (the id zero-padded, so keys sort by id), and
//! `next-action` holds the last id given. Starting an action reads and compares that key,
//! so two operators starting actions at once never get the same id.
//!
//! # Charm modules
//!
//! A module is kept by the SHA-256 of its bytes: chunks of [`MODULE_CHUNK`] bytes under
//! `modules/<hash>/<n>`, then `modules/<hash>`, its manifest (size and number of chunks),
//! written last so that a manifest means every chunk is there. etcd bounds a request
//! (1.5 MiB by default) and a module is 0.5-2 MiB, so each chunk is its own put, made before
//! the step that points an application at the hash; that step only checks the manifest.
//! Content-addressed: chunks left by an upgrade that was then refused are harmless, and
//! writing them again writes the same bytes.
//!
//! # Outboxes: hooks on many units
//!
//! etcd refuses transactions of more than `--max-txn-ops` operations or compares (128 by
//! default). A change that queues more than [`DIRECT_QUEUES`] hooks (a commit firing
//! relation-changed on every unit of a large application, a relation between large
//! applications) does not write them in their queues: its `Txn` writes one key instead,
//! `outbox/<seq>`, listing the hooks with their seqs, and `outbox-cursor/<seq>`, how many
//! of them reached their queues, is advanced by follow-up transactions that each move at
//! most [`DELIVERY_HOOKS`] hooks of [`DELIVERY_UNITS`] units into their queues, compared against the
//! cursor so each hook is queued exactly once. The hooks are as durable as the change (one
//! `Txn`); the host that made the change delivers them at once, and every host with agents
//! looks for outboxes left behind (its host crashed) every [`OUTBOX_SWEEP`]. A hook
//! reaching a queue where an equal hook already waits behind the first is coalesced, as
//! one queued directly is; a hook for a unit removed meanwhile is dropped. So a
//! transaction's size does not grow with the number of units it fires hooks on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use charm_model::error::not_found;
use charm_model::tx::{
    AppView, BagOwner, ElectedTerm, ModelTx, PodSpecState, TxResult, UnitUpdate,
};

use super::lease::LeaseSignals;
use super::{
    Claim, Lease, LeaseError, LeaseFuture, LeaseStore, OpenMode, QueuedHook, Records, StateStore,
    Step, StepOp, StoreError, StoreFuture, Verdict,
};
use crate::model::{
    ActionRecord, ApplicationRecord, Bag, BagWrites, ConfigValue, Hook, LeaseHolder, LogRecord,
    PodSpecRecord, PodSpecWrite, RelationId, RelationRecord, SharedBag, Status, UnitNames,
    UnitRecord, app_of, apply_writes,
};

/// What the `meta` key says about the data under a prefix.
const PROGRAM: &str = "charm-host";
/// The layout of the keys this host writes: 2 since each queued hook is a key of its own.
const FORMAT: u32 = 2;
/// How many times a model change is worked out again when another host changed what it
/// read, before it fails as unavailable (transient: the caller retries later).
const MAX_ATTEMPTS: u32 = 64;
/// The size of a module's chunk: well under etcd's default request limit of 1.5 MiB.
pub const MODULE_CHUNK: usize = 512 * 1024;
/// Bits of a seq below the revision: the index of a hook among those one change queues.
const SEQ_INDEX_BITS: u32 = 20;
/// Set in the index of a hook a change puts in an outbox. Two changes that read one
/// revision can both commit when they share no key, as one queueing on a unit directly and
/// one sending it a hook through an outbox do: their seqs must differ all the same, for a
/// delivery takes a seq already queued as delivered, and a commit dequeues by seq. (Two
/// direct ones share the queue's key; two outboxes share their key, [`EtcdTx::seal`].)
const OUTBOX_INDEX: usize = 1 << (SEQ_INDEX_BITS - 1);
/// Bits of the index of a hook a change queues directly: its place among them. The bits
/// above, up to [`OUTBOX_INDEX`], hold the change's random offset.
const DIRECT_INDEX_BITS: u32 = 12;
/// A change queuing more hooks than this (or on more units) writes an outbox instead: each
/// hook queued directly is a put and a compare, or up to two compares where it coalesces,
/// and each unit a compare, against etcd's default limit of 128 operations and compares.
pub const DIRECT_QUEUES: usize = 24;
/// The units whose hooks one delivery transaction moves from an outbox into their queues:
/// a compare each, and up to two for the hooks it coalesces with.
pub const DELIVERY_UNITS: usize = 40;
/// The hooks one delivery transaction moves at most: a put each.
pub const DELIVERY_HOOKS: usize = 100;
/// etcd's default limit on the compares (and, apart, the operations) of one transaction.
const MAX_TXN_COMPARES: usize = 128;
/// How often a host with agents looks for outboxes whose host did not deliver them.
pub const OUTBOX_SWEEP: Duration = Duration::from_secs(1);

mod access;
mod compaction;
mod members;

pub use access::{EtcdAuth, EtcdIdentity, EtcdTls};

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

/// An application, as stored. Its status and the data its leader writes are separate keys,
/// so a leader's commit does not conflict with a unit being added.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AppDoc {
    record: ApplicationRecord,
    next_unit: u32,
    units: Vec<String>,
    /// Being removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    dying: bool,
    /// Its units being removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dying_units: Vec<String>,
}

/// A queued hook: as a step reads it from its key, and as format 1 kept it in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct QueueEntry {
    seq: u64,
    hook: Hook,
}

/// The hook queued at `key` (`hooks/<unit>/<seq>`), holding `value`.
fn queue_entry(key: &str, value: &[u8]) -> Result<QueueEntry, StoreError> {
    let seq = key
        .rsplit_once('/')
        .and_then(|(_, seq)| seq.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("etcd key {key}: not a queued hook's key")))?;
    Ok(QueueEntry {
        seq,
        hook: decode_value(key, value)?,
    })
}

/// An application's document as decoded from one version of its key.
#[derive(Debug)]
struct AppDocRead {
    /// The version of the key it was decoded from: etcd's revisions of its last change and
    /// of its creation, and the value's length.
    version: (i64, i64, usize),
    doc: AppDoc,
    /// Its units not being removed.
    live: UnitNames,
}

impl AppDocRead {
    fn new(version: (i64, i64, usize), doc: AppDoc) -> Self {
        let live = charm_model::tx::live_units_of(doc.units.clone(), &doc.dying_units);
        AppDocRead { version, doc, live }
    }
}

/// A hook an outbox holds for a unit's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OutboxEntry {
    unit: String,
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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Read {
    Key(String),
    Prefix(String),
}

/// What a read transaction saw: the revision, and the key-values of each read in order.
struct Seen {
    revision: i64,
    results: Vec<Vec<KeyValue>>,
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
    /// What followers of each lease watch, by lease name: bumped when its key goes.
    lease_signals: LeaseSignals,
    watching_leases: OnceLock<()>,
    /// Each application's document as last decoded, with its live units, by key: a
    /// 1,000-unit application's document is decoded once per change, not in every
    /// snapshot (it was two fifths of a host's time at 1,000 units).
    app_docs: Mutex<HashMap<String, Arc<AppDocRead>>>,
    /// Keeps members that do not answer out of the client's choice, while the store lives.
    _members: Option<members::MemberProbe>,
    /// Compacts etcd's history while the store lives, if its config asks.
    _compactor: Option<compaction::Compactor>,
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
            "{text}: a change wrote more keys than etcd's --max-txn-ops allows (deploy fewer units at once, or raise it)"
        ));
    }
    StoreError::Unavailable(format!("etcd: {text}"))
}

fn lease_unavailable(e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Unavailable(format!("etcd: {e}"))
}

fn decode_value<T: DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt(format!("etcd key {key}: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("store documents serialize")
}

/// Up to how many bags a step reads one key at a time rather than the relation's prefix.
const FEW_BAGS: usize = 8;

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

/// The meta keys a model at a prefix enclosing `prefix` would have: `a/meta` and `a/b/meta`
/// for `a/b/c`.
fn enclosing_metas(prefix: &str) -> Vec<String> {
    let segments: Vec<&str> = prefix.split('/').collect();
    (1..segments.len())
        .map(|n| format!("{}/meta", segments[..n].join("/")))
        .collect()
}

/// A random offset for the indexes of the hooks a step queues directly, below
/// [`OUTBOX_INDEX`] once shifted by [`DIRECT_INDEX_BITS`].
fn random_salt() -> usize {
    use std::hash::BuildHasher;
    // Each `RandomState` is keyed anew (randomly per thread, then counting up).
    let random = std::collections::hash_map::RandomState::new().hash_one(0u8);
    (random as usize) & ((1 << (SEQ_INDEX_BITS - 1 - DIRECT_INDEX_BITS)) - 1)
}

/// The seq of the `index`-th hook queued by a change that read at `revision`: above every
/// seq queued by a change that revision could see.
fn seq_at(revision: i64, index: usize) -> u64 {
    assert!(index < 1 << SEQ_INDEX_BITS, "too many hooks in one change");
    ((revision as u64 + 1) << SEQ_INDEX_BITS) | index as u64
}

impl EtcdStore {
    /// Connects to etcd and opens model `model` under `config.prefix`, creating it if the
    /// prefix is empty: [`connect_with`](Self::connect_with) and [`OpenMode::Create`].
    pub async fn connect(config: EtcdConfig, model: &str) -> Result<EtcdStore, StoreError> {
        Self::connect_with(config, model, OpenMode::Create).await
    }

    /// Connects to etcd and opens model `model` under `config.prefix`, as `mode` says. A
    /// model is created only at a prefix with nothing under it and no model above it
    /// (checked and created in one transaction); without [`OpenMode::Create`] a prefix that
    /// holds no model is [`StoreError::NotFound`], and nothing is written. Data of another
    /// program, a newer host or another model under the prefix is refused
    /// ([`StoreError::Incompatible`]) and left untouched. A certificate, password or role
    /// etcd refuses is [`StoreError::Denied`], naming which, and nothing is written.
    pub async fn connect_with(
        config: EtcdConfig,
        model: &str,
        mode: OpenMode,
    ) -> Result<EtcdStore, StoreError> {
        let options = access::connect_options(&config)?;
        let (answering, down) = members::survey(&config).await;
        for (member, why) in &down {
            tracing::warn!(%member, "etcd member not answering ({why}): sending it no requests until it does");
        }
        // An error names the members that did not answer, if any: the likely cause.
        let named = |e: StoreError| match e {
            StoreError::Unavailable(message) if !down.is_empty() => {
                let down: Vec<String> =
                    down.iter().map(|(m, why)| format!("{m} ({why})")).collect();
                StoreError::Unavailable(format!("{message}; not answering: {}", down.join(", ")))
            }
            other => other,
        };
        let client = match Client::connect(&answering, Some(options)).await {
            Ok(client) => client,
            Err(e) => return Err(named(access::explain(e, &config).await)),
        };
        let members = members::probe_members(client.clone(), &config, &answering);
        let mut store = EtcdStore {
            model: model.to_string(),
            prefix: format!("{}/", config.prefix),
            client,
            config,
            keepers: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            signals: Mutex::new(HashMap::new()),
            watching: OnceLock::new(),
            lease_signals: LeaseSignals::default(),
            watching_leases: OnceLock::new(),
            app_docs: Mutex::new(HashMap::new()),
            _members: members,
            _compactor: None,
        };
        store.open_model(mode).await.map_err(named)?;
        store._compactor = store
            .config
            .compaction
            .filter(|_| compaction::may_compact(&store.config))
            .map(|every| {
                compaction::compact_history(store.client.clone(), store.key("compaction"), every)
            });
        Ok(store)
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    fn key(&self, path: impl std::fmt::Display) -> String {
        format!("{}{path}", self.prefix)
    }

    fn module_key(&self, hash: &str) -> String {
        self.key(format_args!("modules/{hash}"))
    }
    fn module_chunk_key(&self, hash: &str, n: usize) -> String {
        self.key(format_args!("modules/{hash}/{n:04}"))
    }

    /// The value of `key`, read on its own.
    async fn get_value(&self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        let resp = self
            .client
            .kv_client()
            .get(key, None)
            .await
            .map_err(unavailable)?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    fn app_key(&self, app: &str) -> String {
        self.key(format_args!("apps/{app}"))
    }
    fn unit_key(&self, unit: &str) -> String {
        self.key(format_args!("units/{unit}"))
    }
    /// The key of the hook queued on `unit` as `seq`.
    fn hook_key(&self, unit: &str, seq: u64) -> String {
        self.key(format_args!("hooks/{unit}/{seq:020}"))
    }
    /// The prefix of the hooks queued on `unit`.
    fn hooks_prefix(&self, unit: &str) -> String {
        self.key(format_args!("hooks/{unit}/"))
    }
    fn logs_key(&self, unit: &str) -> String {
        self.key(format_args!("logs/{unit}"))
    }
    /// Which of the unit's queued hooks its agent failed ([`ModelTx::note_failing`]).
    fn failing_key(&self, unit: &str) -> String {
        self.key(format_args!("failing/{unit}"))
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
    fn action_key(&self, id: u64) -> String {
        self.key(format_args!("actions/{id:020}"))
    }
    fn pod_spec_key(&self, app: &str) -> String {
        self.key(format_args!("pod-specs/{app}"))
    }
    fn outbox_key(&self, seq: u64) -> String {
        self.key(format_args!("outbox/{seq:020}"))
    }
    fn outbox_cursor_key(&self, outbox: &str) -> String {
        let id = outbox.rsplit('/').next().unwrap_or_default();
        self.key(format_args!("outbox-cursor/{id}"))
    }

    /// Moves the hooks of outbox `key` into their units' queues, [`DELIVERY_UNITS`] units a
    /// transaction, then deletes it (see the module doc). Another host delivering the same
    /// outbox meanwhile is harmless: each transaction compares the cursor it advances.
    async fn deliver(&self, key: &str) -> Result<(), StoreError> {
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
                    let equal =
                        super::routing::coalesces_with(hooks, &entry.hook).map(|at| queue[at].0);
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
    async fn deliver_all(&self) -> Result<(), StoreError> {
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
    fn start_courier(self: &Arc<Self>) {
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

    async fn open_model(&self, mode: OpenMode) -> Result<(), StoreError> {
        let key = self.key("meta");
        // The first request: a refused certificate, password or permission shows here, and
        // is said as such rather than retried as etcd being away.
        let found = match mode {
            OpenMode::Create => self.create_model().await?,
            OpenMode::Existing | OpenMode::ReadOnly => {
                match self.client.kv_client().get(key.as_str(), None).await {
                    Ok(resp) => resp.kvs().first().cloned(),
                    Err(e) => return Err(access::explain(e, &self.config).await),
                }
            }
        };
        let Some(kv) = found else {
            if mode == OpenMode::Create {
                return Ok(());
            }
            return Err(StoreError::NotFound(format!(
                "no model at etcd://{}/{}: `charm-host deploy` or `charm-host run BUNDLE` creates one",
                self.config.endpoints.join(","),
                self.config.prefix
            )));
        };
        let kv = &kv;
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
        if theirs.format < 2 {
            if mode == OpenMode::ReadOnly {
                return Err(StoreError::Incompatible(format!(
                    "etcd prefix {}: format {}, older than this host's {FORMAT}: a command that \
                     changes the model, or `charm-host run`, moves it forward; one that only \
                     reads it writes nothing",
                    self.prefix, theirs.format
                )));
            }
            self.migrate_queues(kv).await?;
            tracing::info!(prefix = %self.prefix, "model moved to format {FORMAT}: a key per queued hook");
        }
        Ok(())
    }

    /// Creates the model's meta key if the prefix is free: nothing under it, and no model
    /// at a prefix above it (one transaction checks both and writes). `None` once created;
    /// the meta key found otherwise. A prefix above holding no model, or one this host's
    /// user may not read, is not a model's.
    async fn create_model(&self) -> Result<Option<KeyValue>, StoreError> {
        let key = self.key("meta");
        let mine = MetaDoc {
            program: PROGRAM.into(),
            format: FORMAT,
            model: self.model.clone(),
        };
        let above = enclosing_metas(&self.config.prefix);
        let attempt = |above: &[String]| {
            let mut compares = vec![
                Compare::create_revision(self.prefix.as_str(), CompareOp::Equal, 0).with_prefix(),
            ];
            compares.extend(
                above
                    .iter()
                    .map(|meta| Compare::create_revision(meta.as_str(), CompareOp::Equal, 0)),
            );
            let mut otherwise = vec![TxnOp::get(key.as_str(), None)];
            otherwise.extend(
                above.iter().map(|meta| {
                    TxnOp::get(meta.as_str(), Some(GetOptions::new().with_keys_only()))
                }),
            );
            otherwise.push(TxnOp::get(
                self.prefix.as_str(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_limit(1),
                ),
            ));
            Txn::new()
                .when(compares)
                .and_then([TxnOp::put(key.as_str(), encode(&mine), None)])
                .or_else(otherwise)
        };
        let mut checked_above = above.as_slice();
        let resp = loop {
            match self.client.kv_client().txn(attempt(checked_above)).await {
                Ok(resp) => break resp,
                // A user whose role covers only this prefix may not read above it: another
                // model there is not one its user could have made.
                Err(e)
                    if !checked_above.is_empty() && access::refusal(&e, &self.config).is_some() =>
                {
                    tracing::debug!(
                        "cannot look above etcd prefix {} for another model: {e}",
                        self.prefix
                    );
                    checked_above = &[];
                }
                Err(e) => return Err(access::explain(e, &self.config).await),
            }
        };
        if resp.succeeded() {
            return Ok(None);
        }
        let gets: Vec<_> = resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                _ => None,
            })
            .collect();
        if let Some(Some(meta)) = gets.first() {
            return Ok(Some(meta.clone()));
        }
        let shown = |kv: &KeyValue| String::from_utf8_lossy(kv.key()).into_owned();
        if let Some(meta) = gets[1..gets.len() - 1].iter().flatten().next() {
            let meta = shown(meta);
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: inside the model at {}; a model's prefix lies beside others, not inside one",
                self.config.prefix,
                meta.strip_suffix("/meta").unwrap_or(&meta)
            )));
        }
        match gets.last() {
            Some(Some(first)) => Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds keys but no model ({} among them): a model at a prefix above \
                 another's, or another program's data; choose a prefix with nothing under it",
                self.config.prefix,
                shown(first)
            ))),
            _ => Err(StoreError::Unavailable(format!(
                "etcd prefix {}: changed while the model was being created; try again",
                self.config.prefix
            ))),
        }
    }

    /// Moves format 1's queues (`queues/<unit>`, each a list) to a key per hook, then marks
    /// the model format 2. Each unit's hooks are written while its list is still there, the
    /// list deleted last: a migration cut short is taken up again from what is left, and
    /// two hosts migrating at once write the same keys, once.
    async fn migrate_queues(&self, meta: &KeyValue) -> Result<(), StoreError> {
        let prefix = self.key("queues/");
        let lists = self
            .client
            .kv_client()
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(unavailable)?;
        for kv in lists.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let unit = &key[prefix.len()..];
            let queue: Vec<QueueEntry> = decode_value(&key, kv.value())?;
            // Each write only while the list is as read: once another host has moved it
            // (and its agents perhaps run some of its hooks) nothing is written again.
            for batch in queue.chunks(DELIVERY_HOOKS) {
                let puts = batch
                    .iter()
                    .map(|e| TxnOp::put(self.hook_key(unit, e.seq), encode(&e.hook), None))
                    .collect();
                if !self.write(vec![unchanged(&key, Some(kv))], puts).await? {
                    break;
                }
            }
            let delete = vec![TxnOp::delete(key.as_str(), None)];
            self.write(vec![unchanged(&key, Some(kv))], delete).await?;
        }
        let meta_key = self.key("meta");
        let mine = MetaDoc {
            program: PROGRAM.into(),
            format: FORMAT,
            model: self.model.clone(),
        };
        let put = vec![TxnOp::put(meta_key.as_str(), encode(&mine), None)];
        self.write(vec![unchanged(&meta_key, Some(meta))], put)
            .await?;
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
        self.read_ops(ops).await
    }

    /// Runs the reads `ops` in one transaction: its revision, and the key-values of each.
    async fn read_ops(&self, ops: Vec<TxnOp>) -> Result<Seen, StoreError> {
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

    /// What an operator's change of the model reads: applications, units, their queues,
    /// relations and leases (anything else is fetched as the change asks for it).
    fn model_prefetch(&self) -> Vec<Read> {
        ["apps/", "units/", "hooks/", "relations/", "leases/"]
            .map(|p| Read::Prefix(self.key(p)))
            .to_vec()
    }

    fn contended(what: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "{what}: other hosts kept changing the same keys ({MAX_ATTEMPTS} attempts)"
        ))
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

    /// Watches `hooks/` for as long as the store lives, waking the agent of each unit whose
    /// queue grew. After a broken watch every agent is woken, so none misses a hook.
    fn start_watch(self: &Arc<Self>) {
        self.watch_prefix("hooks/", EtcdStore::wake_all, |store, hook, event| {
            if event == EventType::Put
                && let Some((unit, _seq)) = hook.rsplit_once('/')
                && let Some(signal) = store
                    .signals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(unit)
            {
                signal.notify_one();
            }
        });
    }

    /// Watches `leases/` for as long as the store lives: a lease key goes when its holder
    /// releases it or its etcd lease lapses, and the followers of that lease hear of it.
    /// After a broken watch all of them do, so none waits for a lease that went meanwhile.
    fn start_lease_watch(self: &Arc<Self>) {
        self.watch_prefix(
            "leases/",
            EtcdStore::bump_all_leases,
            |store, lease, event| {
                if event == EventType::Delete {
                    store.lease_signals.bump(lease);
                }
            },
        );
    }

    fn bump_all_leases(&self) {
        self.lease_signals.bump_all();
    }

    /// Watches the keys under `within` (relative to the model's prefix) for as long as the
    /// store lives, calling `on_event` with each event's key (relative to the watched prefix)
    /// and kind, and `on_restart` each time the watch (re)starts: events may have been
    /// missed before it.
    fn watch_prefix(
        self: &Arc<Self>,
        within: &str,
        on_restart: fn(&EtcdStore),
        on_event: fn(&EtcdStore, &str, EventType),
    ) {
        let weak = Arc::downgrade(self);
        let mut watch = self.client.watch_client();
        let prefix = self.key(within);
        tokio::spawn(async move {
            loop {
                let stream = watch
                    .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix()))
                    .await;
                let Some(store) = weak.upgrade() else { return };
                on_restart(&store);
                drop(store);
                let mut stream = match stream {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!("etcd watch on {prefix} failed: {e}; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                // A broken or cancelled watch ends the stream: start another.
                while let Ok(Some(resp)) = stream.message().await {
                    let Some(store) = weak.upgrade() else { return };
                    for event in resp.events() {
                        let Some(kv) = event.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key());
                        if let Some(name) = key.strip_prefix(prefix.as_str()) {
                            on_event(&store, name, event.event_type());
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

/// What `modules/<hash>` holds: the module's chunks are all written.
#[derive(Debug, Serialize, Deserialize)]
struct ModuleManifest {
    /// Its size in bytes.
    size: usize,
    /// How many chunks hold it.
    chunks: usize,
}

/// Whole seconds for an etcd TTL, rounded up: the store holds a lease at least as long as
/// asked.
fn ttl_secs(duration: Duration) -> i64 {
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

impl StateStore for EtcdStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn step<'a>(&'a self, step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.optimistic_step(&step, self.prefetch(step.reads), op)
                .await
        })
    }

    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let hash = super::module_hash(bytes);
            if self.get_value(self.module_key(&hash)).await?.is_some() {
                return Ok(hash);
            }
            // One put per chunk, each within etcd's request limit; the manifest last.
            let chunks: Vec<&[u8]> = bytes.chunks(MODULE_CHUNK).collect();
            let mut kv = self.client.kv_client();
            for (n, chunk) in chunks.iter().enumerate() {
                kv.put(self.module_chunk_key(&hash, n), chunk.to_vec(), None)
                    .await
                    .map_err(unavailable)?;
            }
            let manifest = ModuleManifest {
                size: bytes.len(),
                chunks: chunks.len(),
            };
            kv.put(self.module_key(&hash), encode(&manifest), None)
                .await
                .map_err(unavailable)?;
            Ok(hash)
        })
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let key = self.module_key(hash);
            let Some(manifest) = self.get_value(key.clone()).await? else {
                return Ok(None);
            };
            let manifest: ModuleManifest = decode_value(&key, &manifest)?;
            let mut bytes = Vec::with_capacity(manifest.size);
            for n in 0..manifest.chunks {
                let chunk_key = self.module_chunk_key(hash, n);
                let chunk = self.get_value(chunk_key.clone()).await?.ok_or_else(|| {
                    StoreError::Corrupt(format!("etcd: {chunk_key}: chunk of a module missing"))
                })?;
                bytes.extend_from_slice(&chunk);
            }
            if super::module_hash(&bytes) != hash {
                return Err(StoreError::Corrupt(format!(
                    "etcd: {key}: the module's bytes do not have its hash"
                )));
            }
            Ok(Some(bytes))
        })
    }

    fn queue_signal(self: Arc<Self>, unit: &str) -> Option<Arc<Notify>> {
        if self.watching.set(()).is_ok() {
            self.start_watch();
            self.start_courier();
        }
        Some(self.signal(unit))
    }
}

/// A key's value as a step sees it.
enum Found<'a> {
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
struct EtcdTx<'s> {
    store: &'s EtcdStore,
    revision: i64,
    /// Every key fetched, with its value (absent keys under a fetched prefix are not here).
    fetched: BTreeMap<String, Option<KeyValue>>,
    /// The prefixes fetched whole.
    prefixes: BTreeSet<String>,
    /// Reads the operation asked for that were not fetched.
    missing: Vec<Read>,
    /// The keys and prefixes the operation used: the compares of its `Txn`.
    used_keys: BTreeSet<String>,
    used_prefixes: BTreeSet<String>,
    /// Keys the operation creates: they must still be absent.
    created: BTreeSet<String>,
    /// Keys whose existence the operation used, not their value: each must still have the
    /// create revision it was read with (0: still absent).
    existing: BTreeMap<String, i64>,
    /// The fence's lease key and term, if the operation checked a lease.
    lease_terms: BTreeMap<String, i64>,
    /// Buffered writes, by key: a value to put, or `None` to delete.
    writes: BTreeMap<String, Option<Vec<u8>>>,
    /// Hooks put in the outbox and log lines kept so far in this run of the operation.
    queued: usize,
    /// Hooks queued directly so far in this run of the operation.
    direct: usize,
    /// The random offset of the indexes of the hooks this step queues directly.
    salt: usize,
    /// Whether hooks queued from now on go to the outbox ([`ModelTx::defers_queueing`]).
    defer: bool,
    /// The hooks for the outbox, in order.
    deferred: Vec<OutboxEntry>,
    /// The outbox this run writes, once sealed.
    outbox: Option<String>,
}

impl<'s> EtcdTx<'s> {
    fn new(store: &'s EtcdStore, revision: i64) -> Self {
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
    fn seal(&mut self) {
        if !self.deferred.is_empty() {
            let key = self.store.outbox_key(seq_at(self.revision, OUTBOX_INDEX));
            let value = encode(&self.deferred);
            self.created.insert(key.clone());
            self.writes.insert(key.clone(), Some(value));
            self.outbox = Some(key);
        }
    }

    /// Takes in what a read of `reads` saw.
    fn absorb(&mut self, reads: &[Read], seen: Seen) {
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
    fn restart(&mut self) {
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

    fn covering_prefix(&self, key: &str) -> Option<&String> {
        self.prefixes.iter().find(|p| key.starts_with(p.as_str()))
    }

    /// The value of `key` as this step sees it: its own write, or what was fetched.
    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.read(key)? {
            Found::Written(v) => Some(v.to_vec()),
            Found::Fetched(kv) => Some(kv.value().to_vec()),
        }
    }

    /// `key` as this step sees it, without copying it; the step now depends on it.
    fn read(&mut self, key: &str) -> Option<Found<'_>> {
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
    fn scan(&mut self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.scan_under(prefix, true)
    }

    /// [`scan`](Self::scan) without the step depending on what it finds: it depends on
    /// the keys it then uses ([`depend`](Self::depend)).
    fn peek(&mut self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.scan_under(prefix, false)
    }

    fn scan_under(&mut self, prefix: &str, depends: bool) -> Vec<(String, Vec<u8>)> {
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

    fn doc<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, StoreError> {
        self.get(key).map(|v| decode_value(key, &v)).transpose()
    }

    /// Makes the step depend on `key`, one it fetched, being unchanged (or still absent).
    fn depend(&mut self, key: &str) {
        if !self.writes.contains_key(key) {
            self.used_keys.insert(key.to_string());
        }
    }

    /// Whether `key` was fetched, alone or under a prefix; if not, it is noted as missing.
    fn was_fetched(&mut self, key: &str) -> bool {
        if self.fetched.contains_key(key) || self.covering_prefix(key).is_some() {
            return true;
        }
        self.missing.push(Read::Key(key.to_string()));
        false
    }

    /// `key`'s value as this step sees it, the step depending on that key alone even where
    /// it was fetched under a prefix.
    fn get_key(&mut self, key: &str) -> Option<Vec<u8>> {
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
    fn exists(&mut self, key: &str) -> bool {
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

    fn put<T: Serialize>(&mut self, key: String, value: &T) {
        self.writes.insert(key, Some(encode(value)));
    }

    fn delete(&mut self, key: String) {
        self.writes.insert(key, None);
    }

    /// Deletes every key under `prefix` this step sees.
    fn delete_under(&mut self, prefix: &str) {
        for (key, _) in self.scan(prefix) {
            self.delete(key);
        }
    }

    fn update_app_doc(
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

    fn create<T: Serialize>(&mut self, key: String, value: &T) {
        self.created.insert(key.clone());
        self.put(key, value);
    }

    fn app_doc(&mut self, app: &str) -> Result<Option<AppDoc>, StoreError> {
        Ok(self.app_doc_read(app)?.map(|read| read.doc.clone()))
    }

    /// The application's document, decoded once per version of its key and shared (one
    /// this step wrote is decoded each time: the step may yet be rolled back).
    fn app_doc_read(&mut self, app: &str) -> Result<Option<Arc<AppDocRead>>, StoreError> {
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
    fn queue(&mut self, unit: &str) -> Result<Vec<QueueEntry>, StoreError> {
        let prefix = self.store.hooks_prefix(unit);
        self.scan(&prefix)
            .iter()
            .map(|(k, v)| queue_entry(k, v))
            .collect()
    }

    /// `unit`'s queue, in order, with each hook's key; the step does not depend on it.
    fn peek_queue(&mut self, unit: &str) -> Result<Vec<(String, QueueEntry)>, StoreError> {
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
    fn bags(&mut self, id: RelationId, keys: Vec<String>) -> Result<Vec<SharedBag>, StoreError> {
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

    fn update_unit_doc(
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
    fn compares(&self) -> Vec<Compare> {
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

    fn ops(&self) -> Vec<TxnOp> {
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
        let Some(at) = super::routing::coalesces_with(hooks, hook) else {
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
    fn prefetch(&self, records: &[Records<'_>]) -> Vec<Read> {
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
    async fn optimistic_step(
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
