//! The embedded durable store: leases and model state in one SQLite file, so a commit checks
//! the leadership fence and applies a hook's writes in one SQLite transaction.
//!
//! # Durability (invariant I6)
//!
//! The file is in WAL mode with `synchronous = NORMAL`. A transaction is committed when its
//! frames have been appended to the `-wal` file with `write(2)`; the data is then in the
//! operating system's page cache, which outlives the host *process*. So a commit the host
//! acknowledged survives a crash or `kill -9` of the host. What `NORMAL` gives up, compared
//! with `FULL`, is the `fsync` on every commit: after a power loss or kernel crash the last
//! few commits may be rolled back (never torn: the WAL is checksummed, and the database stays
//! consistent). The WAL is synced at each checkpoint. Process crashes are the failure the host
//! promises to survive; `FULL` would cost an `fsync` (milliseconds on most disks) per hook.
//!
//! # Several processes on one file
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction, which takes the file's write lock
//! before reading anything, so the fence check of a commit (or the liveness check of a claim)
//! and its writes are one atomic step across processes. A process that finds the lock taken
//! waits up to [`BUSY_TIMEOUT`]; after that the operation fails as unavailable (transient,
//! retry), never as a denial. Reads run in a deferred transaction and see one consistent
//! snapshot.
//!
//! # Time
//!
//! A lease's expiry is wall-clock milliseconds since the UNIX epoch, so every process sharing
//! the file agrees on it (a monotonic `Instant` means nothing to another process). The expiry
//! is rounded *up* and the current time *down*, so the store holds a lease at least as long
//! as it granted it: the holder's own guarantee, measured from before its claim and shortened
//! by a drift margin, ends first. Processes sharing a file must share a clock; a wall clock
//! stepped backwards lengthens leases, stepped forwards shortens them.
//!
//! # Hook queues
//!
//! Each unit's queued hooks are rows of `hook_queue`, numbered by a never-reused `seq`. Every
//! change that fires hooks queues them in its own transaction: a new unit its deploy hooks, a
//! new relation its relation hooks, a commit the hooks its changes fire on other units. A
//! commit naming its hook's `seq` removes that row in the transaction that applies the
//! hook's writes, so a host that crashes after the commit and runs the hook again has its
//! second commit refused ([`CommitError::NotQueued`]) instead of applied twice.
//!
//! # Waking agents of other processes
//!
//! SQLite tells no connection about another's commits, but `PRAGMA data_version` on a
//! connection changes when any other connection has committed to the file. While agents
//! wait on a file's queues ([`StateStore::queue_signal`]), a thread of the store checks it
//! on a connection of its own every [`WAKE_POLL`](wake::WAKE_POLL); when it moved, it reads the hooks queued
//! since it last looked (`seq` only grows) and wakes the agents of their units. A hook
//! another host queued is picked up within milliseconds, not at the agents' own poll. The
//! same thread compares the leases' terms, so a lease another host releases wakes the
//! followers here ([`LeaseStore::lease_signal`]).
//!
//! # Schema versions
//!
//! The schema's version is `PRAGMA user_version`; each migration (`schema/v<N>.sql`) moves
//! it up by one, in one transaction. A file written by a newer host, a SQLite file of another program, or a file
//! that is not SQLite at all is refused with [`StoreError::Incompatible`] or
//! [`StoreError::Corrupt`] before anything is written to it: these checks run on a read-only
//! connection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::types::ToSql;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

mod leases;
mod memo;
mod open;
mod rows;
mod statements;
mod tx;
mod wake;

use charm_model::error::not_found;
use charm_model::tx::{
    AppView, BagOwner, ElectedTerm, ModelTx, PodSpecState, TxResult, UnitUpdate,
};

use super::lease::LeaseSignals;
use super::{
    Claim, Lease, LeaseError, LeaseFuture, LeaseStore, QueuedHook, StateStore, Step, StepOp,
    StoreError, StoreFuture, Verdict,
};
use crate::model::{
    ActionRecord, ApplicationRecord, Bag, BagWrites, CharmMetadata, ConfigValue, Hook, LeaseHolder,
    LogRecord, PodSpecRecord, PodSpecWrite, RelationId, RelationRecord, SharedBag, SharedConfig,
    Status, UnitNames, UnitRecord,
};
use statements::Conn;

use leases::*;
use memo::*;
use open::*;
use rows::*;
use tx::*;

/// Leases and model state in one SQLite database.
#[derive(Debug)]
pub struct SqliteStore {
    model: String,
    /// The file; `None` in memory.
    path: Option<PathBuf>,
    conn: Mutex<Conn>,
    configs: ConfigMemo,
    units: Memo<String, UnitNames>,
    app_bags: Memo<(RelationId, String), SharedBag>,
    specs: EncodedSpecs,
    /// Wake-ups for agents idle on a unit's queue, by unit.
    signals: Mutex<HashMap<String, Arc<Notify>>>,
    /// Set once the wake-up thread runs.
    watching: OnceLock<()>,
    /// Seqs of hooks this handle queued that the wake-up thread has not passed yet.
    queued_here: Mutex<BTreeSet<i64>>,
    /// Followers' wake-ups, by application: bumped when the wake-up thread sees a release
    /// (of any connection, this one's too), or at once by a release here in memory. A lapse
    /// needs none: a denial says when the lease ends.
    lease_signals: LeaseSignals,
}

/// A transaction on the hook path (snapshot, commit, queue), begun and ended through the
/// connection's statement cache: `BEGIN`, `COMMIT` and `ROLLBACK` are compiled once, where
/// rusqlite's `Transaction` compiles each of them every time. Dropped without
/// [`HookTx::commit`], it rolls back.
struct HookTx<'c> {
    conn: &'c Conn,
    open: bool,
}

impl<'c> HookTx<'c> {
    /// A read transaction: it sees one instant of the file from its first read.
    fn read(conn: &'c Conn) -> rusqlite::Result<Self> {
        Self::begin(conn, "BEGIN DEFERRED")
    }

    /// A write transaction: it holds the file's write lock from here to its end.
    fn write(conn: &'c Conn) -> rusqlite::Result<Self> {
        Self::begin(conn, "BEGIN IMMEDIATE")
    }

    fn begin(conn: &'c Conn, begin: &'static str) -> rusqlite::Result<Self> {
        conn.cached(begin)?.execute([])?;
        Ok(HookTx { conn, open: true })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for HookTx<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Drop for HookTx<'_> {
    fn drop(&mut self) {
        if self.open {
            // As rusqlite's `Transaction`: a failed rollback leaves nothing to do here, and
            // SQLite rolls back what is left when the next transaction begins.
            let _ = self.conn.cached("ROLLBACK").and_then(|mut s| s.execute([]));
        }
    }
}

impl SqliteStore {
    fn lock(&self) -> MutexGuard<'_, Conn> {
        // A panic inside a transaction drops its `HookTx`, which rolls it back, so a
        // poisoned connection holds no half-applied commit.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every pod spec revision `app` has had, by revision: each commit that changes the spec
    /// adds one, in the same transaction, so the revisions have no gaps (a file migrated from
    /// schema version 1 kept only its revision of then, and its history starts there).
    pub fn pod_spec_history(&self, app: &str) -> Result<Vec<PodSpecRecord>, StoreError> {
        let conn = self.lock();
        let tx = HookTx::read(&conn).db()?;
        if !app_exists(&tx, app)? {
            return Err(not_found(format!("application {app}")));
        }
        let rows: Vec<(i64, String, Option<String>)> = tx
            .cached(
                "SELECT revision, spec, k8s_resources FROM pod_spec_history
                 WHERE app = ?1 ORDER BY revision",
            )
            .and_then(|mut s| {
                s.query_map([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .db()?;
        rows.into_iter()
            .map(|(revision, spec, resources)| pod_spec_record(app, revision, &spec, resources))
            .collect()
    }
}

impl SqliteStore {
    /// Runs a model operation in one transaction: a write transaction (`BEGIN IMMEDIATE`,
    /// holding the file's write lock from the first check to the commit, across every
    /// process sharing the file) committed if the operation succeeds, or a read
    /// transaction, which sees one instant of the file. Otherwise nothing is written.
    fn transaction(&self, write: bool, op: &mut StepOp<'_>) -> Result<(), StoreError> {
        let conn = self.lock();
        let tx = if write {
            HookTx::write(&conn)
        } else {
            HookTx::read(&conn)
        }
        .db()?;
        let mut step = SqliteTx {
            conn: &tx,
            configs: &self.configs,
            units: &self.units,
            units_changed: false,
            app_bag_memo: &self.app_bags,
            app_bags_changed: false,
            specs: &self.specs,
            spec_texts: None,
            queued: Vec::new(),
        };
        let verdict = op(&mut step);
        let queued = std::mem::take(&mut step.queued);
        if write && verdict == Verdict::Apply {
            tx.commit().db()?;
            // This process's agents hear of these from the commit's answer: the wake-up
            // thread need not wake them again.
            if !queued.is_empty() && self.watching.get().is_some() {
                self.queued_here
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(queued);
            }
        }
        Ok(())
    }
}

impl StateStore for SqliteStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn queue_signal(self: Arc<Self>, unit: &str) -> Option<Arc<Notify>> {
        self.path.as_ref()?;
        let signal = self
            .signals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(unit.to_string())
            .or_default()
            .clone();
        self.watching.get_or_init(|| self.start_wake_thread());
        Some(signal)
    }

    fn step<'a>(&'a self, step: Step<'a>, op: &'a mut StepOp<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.transaction(step.writes, op)
                .map_err(|e| match (&self.path, step.writes) {
                    (Some(path), true) => diagnosed(path, e),
                    _ => e,
                })
        })
    }

    fn put_module<'a>(&'a self, bytes: &'a [u8]) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let hash = super::module_hash(bytes);
            self.lock()
                .execute(
                    "INSERT OR IGNORE INTO modules (hash, bytes) VALUES (?1, ?2)",
                    rusqlite::params![hash, bytes],
                )
                .db()?;
            Ok(hash)
        })
    }

    fn module<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            self.lock()
                .cached("SELECT bytes FROM modules WHERE hash = ?1")
                .and_then(|mut s| s.query_row([hash], |r| r.get(0)).optional())
                .db()
        })
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;
    use crate::model::{EndpointMeta, RelationEndpoint, RelationRole};

    fn app(name: &str) -> ApplicationRecord {
        ApplicationRecord {
            name: name.into(),
            charm: format!("{name}.wasm"),
            metadata: CharmMetadata {
                name: name.into(),
                relations: vec![EndpointMeta {
                    name: "db".into(),
                    role: if name == "web" {
                        RelationRole::Requires
                    } else {
                        RelationRole::Provides
                    },
                    interface: "pgsql".into(),
                    limit: None,
                }],
                ..CharmMetadata::default()
            },
            config: BTreeMap::new(),
            module: None,
        }
    }

    /// An empty store in memory, and a runtime to drive it.
    fn store_and_runtime() -> (SqliteStore, tokio::runtime::Runtime) {
        let store = SqliteStore::in_memory("m").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        (store, rt)
    }

    /// A snapshot reuses the effective config it computed last only while the application's
    /// row holds the same texts: settings written since (by another handle on the file, say)
    /// are seen at once.
    #[test]
    fn snapshots_see_the_config_the_row_holds_now() {
        let (store, rt) = store_and_runtime();
        let mut web = app("web");
        web.metadata.config = vec![crate::model::ConfigOptionMeta {
            name: "greeting".into(),
            kind: crate::model::OptionType::String,
            default: Some(ConfigValue::String("hello".into())),
            description: String::new(),
        }];
        let greeting = |store: &SqliteStore| {
            let snapshot = rt.block_on(store.snapshot("web/0")).unwrap();
            snapshot.config["greeting"].clone()
        };
        rt.block_on(async {
            store.add_application(web).await.unwrap();
            store.add_unit("web").await.unwrap();
        });
        assert_eq!(greeting(&store), ConfigValue::String("hello".into()));
        assert_eq!(greeting(&store), ConfigValue::String("hello".into()));
        store
            .lock()
            .execute(
                "UPDATE applications SET config = ?1 WHERE name = 'web'",
                [r#"{"greeting":"hi"}"#],
            )
            .unwrap();
        assert_eq!(greeting(&store), ConfigValue::String("hi".into()));
    }

    /// A snapshot's queries are compiled once: binding their parameters again, hook after
    /// hook, does not make SQLite compile them again.
    #[test]
    fn snapshots_reuse_their_compiled_queries() {
        let (store, rt) = store_and_runtime();
        rt.block_on(async {
            for name in ["web", "db"] {
                store.add_application(app(name)).await.unwrap();
                store.add_unit(name).await.unwrap();
            }
            let endpoints = ["web", "db"].map(|app| RelationEndpoint {
                app: app.into(),
                endpoint: "db".into(),
            });
            store
                .add_relation("pgsql", endpoints.to_vec())
                .await
                .unwrap();
            // Their hooks have run: each sees the relation and the other in it.
            for unit in ["web/0", "db/0"] {
                for queued in store.queued(unit).await.unwrap() {
                    let none = charm_model::Changes::default();
                    store
                        .commit(unit, Some(queued.seq), &none, None)
                        .await
                        .unwrap();
                }
            }
            for unit in ["web/0", "db/0", "web/0", "db/0", "web/0"] {
                let snapshot = store.snapshot(unit).await.unwrap();
                assert_eq!(snapshot.relations.len(), 1, "{unit} sees the relation");
            }
        });
        let conn = store.lock();
        // The live units are read once for each application; then their generation stands
        // and the memo answers.
        let live_units = conn.cached(LIVE_UNITS).unwrap();
        assert_eq!(live_units.get_status(StatementStatus::Run), 2);
        drop(live_units);
        for sql in [RELATIONS_OF, UNITS_GENERATION] {
            let stmt = conn.cached(sql).unwrap();
            assert_eq!(
                stmt.get_status(StatementStatus::RePrepare),
                0,
                "compiled again after a new binding: {sql}"
            );
            assert!(
                stmt.get_status(StatementStatus::Run) >= 5,
                "{sql} was not the one run"
            );
        }
    }
}
