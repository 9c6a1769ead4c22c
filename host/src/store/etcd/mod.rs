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

mod access;
mod compaction;
mod config;
mod docs;
mod keys;
mod leases;
mod members;
mod open;
mod outbox;
mod tx;
mod watches;

use docs::*;
use tx::*;

pub use access::{EtcdAuth, EtcdIdentity, EtcdTls};
pub use config::EtcdConfig;

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

impl EtcdStore {
    /// The configuration it was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
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
