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
//! on a connection of its own every [`WAKE_POLL`]; when it moved, it reads the hooks queued
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

mod statements;

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

/// How long an operation waits for another process's write transaction before it fails as
/// unavailable. Commits hold the lock for well under a millisecond; this covers a checkpoint
/// or a slow disk, and stays far below lease durations so a renewal can still be retried.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the wake-up thread asks whether another connection committed: each check is one
/// `PRAGMA data_version`, a read of shared memory, no disk.
pub const WAKE_POLL: Duration = Duration::from_millis(2);

/// The schema version this host writes: the number of migrations.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Migration `i` moves the schema from version `i` to `i + 1`. Append; never edit.
const MIGRATIONS: &[&str] = &[
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
];

/// Version 1: the model, leases and terms.
const SCHEMA_V1: &str = include_str!("schema/v1.sql");

/// Version 2: hook queues, `units.elected_term`, pod spec history.
const SCHEMA_V2: &str = include_str!("schema/v2.sql");

/// Version 3: `relation_apps`, each application's relations.
const SCHEMA_V3: &str = include_str!("schema/v3.sql");

/// Version 4: `dying` applications, units and relations; `unit_logs`.
const SCHEMA_V4: &str = include_str!("schema/v4.sql");

/// Version 5: `actions`.
const SCHEMA_V5: &str = include_str!("schema/v5.sql");

/// Version 6: `modules`, `applications.module`.
const SCHEMA_V6: &str = include_str!("schema/v6.sql");

/// Version 7: `hook_queue_by_hook`, queued hooks by their text.
const SCHEMA_V7: &str = include_str!("schema/v7.sql");

/// Version 8: generations of each application's units and of each application bag,
/// moved by triggers.
const SCHEMA_V8: &str = include_str!("schema/v8.sql");

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What a snapshot reads again and again, as last read, with the generation it was read
/// at (schema 8): each application's live units (`applications.units_generation`) and each
/// application bag of a relation (`app_bag_generations`). A snapshot reads the generation,
/// one row, and reads the thing again only when it moved: a database unit related to 10,000
/// units otherwise reads 10,000 names in every hook, and each of those units the database's
/// 150 KiB application bag. Right whoever wrote the file: a generation moves in the same
/// transaction as the change, by triggers, and is never given twice in the file's committed
/// history. Only steps that changed none of it consult or fill it
/// ([`SqliteTx::units_changed`], [`SqliteTx::app_bags_changed`]): a step's own changes may
/// roll back.
#[derive(Debug)]
struct Memo<K, V>(Mutex<HashMap<K, (i64, V)>>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + std::hash::Hash, V: Clone> Memo<K, V> {
    fn get(&self, key: &K, generation: i64) -> Option<V> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.get(key)
            .filter(|(g, _)| *g == generation)
            .map(|(_, value)| value.clone())
    }

    fn put(&self, key: K, generation: i64, value: V) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.insert(key, (generation, value));
    }
}

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

/// Each application's last committed pod spec write with its JSON texts: a charm that sets
/// the same spec every hook hands the commit the same shared write (see
/// [`crate::podspec::LastValid`]), whose texts are then not encoded again.
#[derive(Debug, Default)]
struct EncodedSpecs(Mutex<HashMap<String, EncodedSpec>>);

#[derive(Debug)]
struct EncodedSpec {
    write: Arc<PodSpecWrite>,
    spec: String,
    resources: Option<String>,
}

impl EncodedSpecs {
    /// `write`'s spec and resources as the store keeps them.
    fn texts(&self, app: &str, write: &Arc<PodSpecWrite>) -> (String, Option<String>) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = memo.get(app)
            && Arc::ptr_eq(&e.write, write)
        {
            return (e.spec.clone(), e.resources.clone());
        }
        let spec = encode(&write.spec);
        let resources = write.k8s_resources.as_ref().map(encode);
        memo.insert(
            app.to_string(),
            EncodedSpec {
                write: write.clone(),
                spec: spec.clone(),
                resources: resources.clone(),
            },
        );
        (spec, resources)
    }
}

/// Each application's effective config (the charm's declared defaults under the operator's
/// settings), kept with the stored texts it was computed from: a snapshot that reads the
/// same texts again, as nearly every one does, reuses it instead of parsing the charm's
/// metadata. Keyed by content, so it is right whoever wrote the file.
#[derive(Debug, Default)]
struct ConfigMemo(Mutex<HashMap<String, MemoizedConfig>>);

#[derive(Debug)]
struct MemoizedConfig {
    metadata: String,
    config: String,
    effective: SharedConfig,
}

impl ConfigMemo {
    /// `app`'s effective config, from its row's `metadata` and `config` texts.
    fn effective(
        &self,
        app: &str,
        metadata: String,
        config: String,
    ) -> Result<SharedConfig, StoreError> {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = memo.get(app)
            && m.metadata == metadata
            && m.config == config
        {
            return Ok(m.effective.clone());
        }
        let effective = Arc::new(
            app_from_row(app.to_string(), String::new(), &metadata, &config, None)?
                .effective_config(),
        );
        memo.insert(
            app.to_string(),
            MemoizedConfig {
                metadata,
                config,
                effective: effective.clone(),
            },
        );
        Ok(effective)
    }
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
    /// Opens (creating if missing) the store at `path` for model `model`, migrating an older
    /// schema. Refuses, without writing anything, a file that is not a SQLite database
    /// ([`StoreError::Corrupt`]), one written by a newer host, by another program or for
    /// another model ([`StoreError::Incompatible`]).
    ///
    /// A file it cannot write (a full disk, a read-only file system, no permission) is
    /// [`StoreError::Unavailable`] saying which, here and at any later write.
    pub fn open(path: &Path, model: &str) -> Result<Self, StoreError> {
        Self::open_file(path, model).map_err(|e| diagnosed(path, e))
    }

    /// Opens the existing store at `path` to read model `model`, writing nothing to it: no
    /// schema migration, no model record, no change of journal mode. Refuses a missing file
    /// ([`StoreError::NotFound`]), one without the model, and one whose schema is older than
    /// this host's (a command that changes the model moves it forward). A file a host killed
    /// while writing left with a log only a writer may recover is opened for writing, as any
    /// host would: recovery rewrites no data.
    pub fn open_read_only(path: &Path, model: &str) -> Result<Self, StoreError> {
        Self::open_file_read_only(path, model).map_err(|e| diagnosed(path, e))
    }

    fn open_file_read_only(path: &Path, model: &str) -> Result<Self, StoreError> {
        if !check_header(path)? {
            return Err(StoreError::NotFound(format!(
                "no model at {}: `charm-host deploy` or `charm-host run BUNDLE` creates one",
                path.display()
            )));
        }
        let flags = if probe(path)? {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_err(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT).db()?;
        // Opened for writing only to recover a crashed host's log: nothing else is written,
        // not even the checkpoint SQLite makes when the last connection closes.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .db()?;
        conn.pragma_update(None, "query_only", true).db()?;
        let (version, tables) = read_version(&conn).map_err(|e| open_err(path, e))?;
        check_version(path, version, tables)?;
        if version < SCHEMA_VERSION {
            return Err(StoreError::Incompatible(format!(
                "{} has schema version {version}, older than this host's {SCHEMA_VERSION}: \
                 a command that changes the model, or `charm-host run`, moves it forward; \
                 one that only reads it writes nothing",
                path.display()
            )));
        }
        let stored: Option<String> = conn
            .query_row("SELECT name FROM model WHERE id = 1", [], |r| r.get(0))
            .optional()
            .db()?;
        match stored {
            None => {
                return Err(StoreError::NotFound(format!(
                    "no model at {}: `charm-host deploy` or `charm-host run BUNDLE` creates one",
                    path.display()
                )));
            }
            Some(stored) if stored != model => {
                return Err(StoreError::Incompatible(format!(
                    "{} holds model {stored:?}, not {model:?}",
                    path.display()
                )));
            }
            Some(_) => {}
        }
        configure(&conn)?;
        let mut store = Self::over(conn, model);
        store.path = Some(path.to_owned());
        Ok(store)
    }

    fn open_file(path: &Path, model: &str) -> Result<Self, StoreError> {
        let checked = !check_header(path)? || probe(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_err(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT).db()?;
        if !checked {
            // Reading recovers the log's index; the database itself is not written before
            // the check passes.
            let (version, tables) = read_version(&conn).map_err(|e| open_err(path, e))?;
            check_version(path, version, tables)?;
        }
        let mode = write_ahead_logging(&conn)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "{}: cannot use write-ahead logging (journal mode is {mode})",
                path.display()
            )));
        }
        let mut store = Self::prepare(conn, model)?;
        store.path = Some(path.to_owned());
        Ok(store)
    }

    /// A store in this process's memory, with the same schema and transactions as a file.
    pub fn in_memory(model: &str) -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory().db()?;
        Self::prepare(conn, model)
    }

    fn prepare(mut conn: Connection, model: &str) -> Result<Self, StoreError> {
        configure(&conn)?;
        migrate(&mut conn)?;
        bind_model(&mut conn, model)?;
        Ok(Self::over(conn, model))
    }

    /// The store over `conn`, [`configure`]d.
    fn over(conn: Connection, model: &str) -> Self {
        SqliteStore {
            model: model.to_string(),
            path: None,
            conn: Mutex::new(Conn::new(conn)),
            configs: ConfigMemo::default(),
            units: Memo::default(),
            app_bags: Memo::default(),
            specs: EncodedSpecs::default(),
            signals: Mutex::new(HashMap::new()),
            watching: OnceLock::new(),
            queued_here: Mutex::new(BTreeSet::new()),
            lease_signals: LeaseSignals::default(),
        }
    }

    /// Starts the thread that wakes agents when another connection queued hooks for their
    /// units (see the module doc); it ends with the store. Not for a store in memory, which
    /// no other connection shares.
    fn start_wake_thread(self: &Arc<Self>) {
        let Some(path) = self.path.clone() else {
            return;
        };
        let store = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("sqlite-wake".into())
            .spawn(move || {
                if let Err(e) = wake_agents(&path, &store) {
                    tracing::warn!(
                        "{}: hooks other hosts queue are picked up at the agents' poll only: {e}",
                        path.display()
                    );
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the SQLite wake-up thread: {e}");
        }
    }

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

/// Whether `path` holds data to check; an error if those bytes cannot be a SQLite database.
/// A missing or empty file is a new database.
fn check_header(path: &Path) -> Result<bool, StoreError> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StoreError::Unavailable(format!("{}: {e}", path.display()))),
    };
    let mut header = Vec::with_capacity(SQLITE_HEADER.len());
    (&mut file)
        .take(SQLITE_HEADER.len() as u64)
        .read_to_end(&mut header)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    if header.is_empty() {
        return Ok(false);
    }
    if header != SQLITE_HEADER {
        return Err(StoreError::Corrupt(format!(
            "{} is not a SQLite database",
            path.display()
        )));
    }
    Ok(true)
}

/// Checks an existing file on a read-only connection, so that refusing it writes nothing
/// (a read-write connection would set WAL mode, and checkpoint on close). `Ok(false)`: a
/// read-only connection cannot read it, because a host killed while writing left a log
/// whose index only a writer may rebuild; the caller checks it once it has opened it.
fn probe(path: &Path) -> Result<bool, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_err(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT).db()?;
    match read_version(&conn) {
        Ok((version, tables)) => check_version(path, version, tables).map(|()| true),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ReadOnly) => {
            tracing::info!(path = %path.display(), error = %e, "recovering a crashed host's log");
            Ok(false)
        }
        Err(e) => Err(open_err(path, e)),
    }
}

/// The schema version, and how many tables there are; reading the schema makes SQLite
/// parse the whole header and the schema table.
fn read_version(conn: &Connection) -> rusqlite::Result<(i32, i64)> {
    let version: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
        [],
        |r| r.get(0),
    )?;
    Ok((version, tables))
}

fn check_version(path: &Path, version: i32, tables: i64) -> Result<(), StoreError> {
    if version > SCHEMA_VERSION {
        return Err(StoreError::Incompatible(format!(
            "{} has schema version {version}, but this host knows versions up to {SCHEMA_VERSION}: \
             it was written by a newer charm-host",
            path.display()
        )));
    }
    if version < 0 {
        return Err(StoreError::Incompatible(format!(
            "{} has schema version {version}, which no charm-host writes",
            path.display()
        )));
    }
    if version == 0 && tables > 0 {
        return Err(StoreError::Incompatible(format!(
            "{} is a SQLite database of another program (it has tables but no charm-host schema)",
            path.display()
        )));
    }
    Ok(())
}

/// `e` with its cause when SQLite's own words leave it out: SQLite says "disk I/O error"
/// for a full disk as often as "database or disk is full", and "attempt to write a
/// readonly database" whether the file, its directory or the file system is read-only.
/// Asked only once something has failed.
fn diagnosed(path: &Path, e: StoreError) -> StoreError {
    let StoreError::Unavailable(message) = &e else {
        return e;
    };
    // Only SQLite's words for a file it could not write: a lock held by another host
    // ("database is locked") is contention, and probing the disk for it would add I/O to
    // every busy retry.
    const UNWRITABLE: [&str; 4] = [
        "disk I/O error",
        "database or disk is full",
        "readonly database",
        "unable to open database file",
    ];
    if !UNWRITABLE.iter().any(|words| message.contains(words)) {
        return e;
    }
    let why = match std::fs::OpenOptions::new().append(true).open(path) {
        Err(e) if e.raw_os_error() == Some(EROFS) => "its file system is mounted read-only",
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            "this user may not write it (permission denied)"
        }
        _ if disk_is_full(path) => "the disk holding it is full (no space left on device)",
        _ => return e,
    };
    let shown = path.display().to_string();
    let message = message
        .strip_prefix(&shown)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message);
    StoreError::Unavailable(format!("{shown} cannot be written: {why}: {message}"))
}

/// Linux's "read-only file system".
const EROFS: i32 = 30;
/// Linux's "no space left on device".
const ENOSPC: i32 = 28;

/// Whether one more page beside `path` fails for want of space: the test SQLite would
/// have needed, without a statvfs binding. The probe file is removed.
fn disk_is_full(path: &Path) -> bool {
    use std::io::Write;
    let Some(dir) = path.parent() else {
        return false;
    };
    let probe = dir.join(format!(
        ".{}-space-probe-{}",
        path.file_name()
            .map_or_else(Default::default, |n| n.to_string_lossy()),
        std::process::id()
    ));
    let full = match std::fs::File::create(&probe) {
        Ok(mut file) => file
            .write_all(&[0; 4096])
            .and_then(|()| file.sync_all())
            .is_err_and(|e| e.raw_os_error() == Some(ENOSPC)),
        Err(e) => e.raw_os_error() == Some(ENOSPC),
    };
    let _ = std::fs::remove_file(&probe);
    full
}

fn open_err(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!("{}: {e}", path.display()))
        }
        _ => StoreError::Unavailable(format!("{}: {e}", path.display())),
    }
}

/// Puts the file in write-ahead-logging mode (a no-op once it is), and returns the mode it
/// is in. Switching takes the file's exclusive lock, and SQLite answers busy at once, not
/// after its busy timeout, while another connection holds a lock (hosts, or `status`,
/// opening a new file together): so it is tried again here, for as long.
fn write_ahead_logging(conn: &Connection) -> Result<String, StoreError> {
    let start = std::time::Instant::now();
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && start.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            mode => return mode.db(),
        }
    }
}

/// The connection's settings; none is written to the file.
fn configure(conn: &Connection) -> Result<(), StoreError> {
    // NORMAL in WAL mode: durable against process crashes (see the module doc).
    conn.pragma_update(None, "synchronous", "NORMAL").db()?;
    conn.pragma_update(None, "foreign_keys", "ON").db()?;
    // 64 MiB of pages (the default is 2 MiB): a large relation's bags are read by every
    // hook of its units, and read from the file (a system call per page) once they no
    // longer fit; 10,000 units each reading a 150 KiB application bag did.
    conn.pragma_update(None, "cache_size", -(64 << 10)).db()?;
    // Plans that do not depend on the values bound. Without this, SQLite (built with
    // STAT4) compiles a cached statement again each time a parameter that it compares
    // with an indexed column is bound, same value or not: two of a snapshot's queries,
    // on every hook.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .db()?;
    Ok(())
}

/// Brings the schema up to [`SCHEMA_VERSION`], under the write lock so that two processes
/// opening a new file at once migrate it once.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .db()?;
    let version: i32 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .db()?;
    let tables: i64 = tx
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .db()?;
    check_version(Path::new(tx.path().unwrap_or(":memory:")), version, tables)?;
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(migration).db()?;
        tx.pragma_update(None, "user_version", from as i32 + 1)
            .db()?;
    }
    tx.commit().db()
}

/// Records the model's name in a new file; refuses a file of another model.
fn bind_model(conn: &mut Connection, model: &str) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .db()?;
    tx.execute(
        "INSERT INTO model (id, name) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
        [model],
    )
    .db()?;
    let stored: String = tx
        .query_row("SELECT name FROM model WHERE id = 1", [], |r| r.get(0))
        .db()?;
    if stored != model {
        return Err(StoreError::Incompatible(format!(
            "{} holds model {stored:?}, not {model:?}",
            tx.path().unwrap_or(":memory:")
        )));
    }
    tx.commit().db()
}

/// Converts SQLite's errors: lock timeouts and I/O are transient, damage is corruption.
trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(|e| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt(e.to_string())
            }
            _ => StoreError::Unavailable(format!("sqlite: {e}")),
        })
    }
}

fn lease_err(e: StoreError) -> LeaseError {
    // Whatever went wrong, the claimant must not read it as a denial.
    LeaseError::Unavailable(match e {
        StoreError::Unavailable(message) => message,
        other => other.to_string(),
    })
}

fn encode(value: &impl Serialize) -> String {
    // The model types are plain data (string keys, no custom serialisers): this cannot fail.
    serde_json::to_string(value).expect("model types serialise to JSON")
}

/// `text` as JSON; `what` names it in the error (built only then).
fn decode<T: DeserializeOwned>(text: &str, what: impl FnOnce() -> String) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{}: {e}", what())))
}

fn now_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn floor_ms(t: Duration) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

fn ceil_ms(t: Duration) -> i64 {
    i64::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// A stored count (term, revision): never negative, as this module writes them.
fn to_u64(raw: i64) -> u64 {
    raw.max(0) as u64
}

#[derive(Debug)]
struct LeaseRow {
    holder: String,
    term: u64,
    expiry_ms: i64,
}

/// The lease on `app` that has not expired at `now_ms`.
fn live_lease(conn: &Conn, app: &str, now_ms: i64) -> Result<Option<LeaseRow>, StoreError> {
    conn.cached("SELECT holder, term, expiry_ms FROM leases WHERE app = ?1 AND expiry_ms > ?2")
        .db()?
        .query_row(rusqlite::params![app, now_ms], |r| {
            Ok(LeaseRow {
                holder: r.get(0)?,
                term: to_u64(r.get(1)?),
                expiry_ms: r.get(2)?,
            })
        })
        .optional()
        .db()
}

impl LeaseStore for SqliteStore {
    fn claim<'a>(&'a self, app: &'a str, holder: &'a str, ttl: Duration) -> LeaseFuture<'a, Claim> {
        Box::pin(async move {
            let conn = self.lock();
            let tx = HookTx::write(&conn).db().map_err(lease_err)?;
            // Taken under the write lock: the lease runs from when the store handles the claim.
            let now = now_since_epoch();
            let expiry_ms = ceil_ms(now.saturating_add(ttl));
            let claim = match live_lease(&tx, app, floor_ms(now)).map_err(lease_err)? {
                Some(live) if live.holder != holder => Claim::Denied {
                    holder: live.holder,
                    term: live.term,
                    // From the last whole millisecond: never before the lease ends.
                    expires_in: Some(Duration::from_millis(
                        (live.expiry_ms - floor_ms(now)).max(0) as u64,
                    )),
                },
                Some(live) => {
                    tx.cached("UPDATE leases SET expiry_ms = ?2 WHERE app = ?1")
                        .and_then(|mut s| s.execute(rusqlite::params![app, expiry_ms]))
                        .db()
                        .map_err(lease_err)?;
                    Claim::Held(Lease {
                        holder: live.holder,
                        term: live.term,
                        duration: ttl,
                    })
                }
                None => {
                    let last: Option<i64> = tx
                        .cached("SELECT term FROM last_terms WHERE app = ?1")
                        .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
                        .db()
                        .map_err(lease_err)?;
                    let term = last.unwrap_or(0) + 1;
                    tx.cached(
                        "INSERT INTO last_terms (app, term) VALUES (?1, ?2)
                         ON CONFLICT (app) DO UPDATE SET term = excluded.term",
                    )
                    .and_then(|mut s| s.execute(rusqlite::params![app, term]))
                    .db()
                    .map_err(lease_err)?;
                    tx.cached(
                        "INSERT INTO leases (app, holder, term, expiry_ms) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (app) DO UPDATE
                         SET holder = excluded.holder, term = excluded.term, expiry_ms = excluded.expiry_ms",
                    )
                    .and_then(|mut s| s.execute(rusqlite::params![app, holder, term, expiry_ms]))
                    .db()
                    .map_err(lease_err)?;
                    Claim::Held(Lease {
                        holder: holder.to_string(),
                        term: to_u64(term),
                        duration: ttl,
                    })
                }
            };
            tx.commit().db().map_err(lease_err)?;
            Ok(claim)
        })
    }

    fn release<'a>(&'a self, app: &'a str, holder: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            let released = {
                let conn = self.lock();
                // One statement is its own transaction; `last_terms` keeps the term.
                conn.cached("DELETE FROM leases WHERE app = ?1 AND holder = ?2")
                    .and_then(|mut s| s.execute([app, holder]))
                    .db()
                    .map_err(lease_err)?
            };
            // On a file, the wake-up thread sees this release as it sees another process's
            // (its connection is another): one wake-up, not two.
            if released > 0 && self.path.is_none() {
                self.lease_signals.bump(app);
            }
            Ok(())
        })
    }

    fn leader<'a>(&'a self, app: &'a str) -> LeaseFuture<'a, Option<Lease>> {
        Box::pin(async move {
            let conn = self.lock();
            let now = now_since_epoch();
            let lease = live_lease(&conn, app, floor_ms(now)).map_err(lease_err)?;
            // As the memory store does: the time the lease has left. Measured from the next
            // whole millisecond, so it never exceeds what was granted (for whole-millisecond
            // durations) and errs short, the safe side for anyone relying on it.
            Ok(lease.map(|l| Lease {
                holder: l.holder,
                term: l.term,
                duration: Duration::from_millis((l.expiry_ms - ceil_ms(now)).max(0) as u64),
            }))
        })
    }

    fn lease_signal(self: Arc<Self>, app: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
        let signal = self.lease_signals.subscribe(app);
        // Another process's release shows in the file: the wake-up thread looks for it.
        if self.path.is_some() {
            self.watching.get_or_init(|| self.start_wake_thread());
        }
        Some(signal)
    }
}

/// A data bag's table: the statements that write one key of one bag. The bag's owner is the
/// first parameters, then the key, then the value.
struct BagTable {
    upsert: &'static str,
    delete: &'static str,
}

static UNIT_BAGS: BagTable = BagTable {
    // The WHERE makes an unchanged value no change at all, so `execute` reports 0 rows.
    upsert: "INSERT INTO relation_unit_bags (relation, unit, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_unit_bags WHERE relation = ?1 AND unit = ?2 AND key = ?3",
};

static APP_BAGS: BagTable = BagTable {
    upsert: "INSERT INTO relation_app_bags (relation, app, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_app_bags WHERE relation = ?1 AND app = ?2 AND key = ?3",
};

static LEADER_DATA: BagTable = BagTable {
    upsert: "INSERT INTO leader_data (app, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM leader_data WHERE app = ?1 AND key = ?2",
};

static STORED_STATE: BagTable = BagTable {
    upsert: "INSERT INTO stored_state (unit, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM stored_state WHERE unit = ?1 AND key = ?2",
};

/// Applies `writes` to one bag, as [`crate::model::apply_writes`] does; whether anything
/// changed.
fn write_bag(
    conn: &Conn,
    table: &BagTable,
    owner: &[&dyn ToSql],
    writes: &BagWrites,
) -> Result<bool, StoreError> {
    let mut changed = false;
    for (key, value) in writes {
        let mut params: Vec<&dyn ToSql> = owner.to_vec();
        params.push(key);
        let rows = match value {
            Some(v) => {
                params.push(v);
                conn.cached(table.upsert)
                    .and_then(|mut s| s.execute(params.as_slice()))
                    .db()?
            }
            None => conn
                .cached(table.delete)
                .and_then(|mut s| s.execute(params.as_slice()))
                .db()?,
        };
        changed |= rows > 0;
    }
    Ok(changed)
}

fn read_bag(conn: &Conn, sql: &'static str, owner: &[&dyn ToSql]) -> Result<Bag, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let rows = stmt
        .query_map(owner, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .db()?;
    rows.collect::<rusqlite::Result<Bag>>().db()
}

/// Keyed bags of one relation: owner -> key -> value.
/// Up to how many owners' bags are read one owner at a time.
const FEW_BAGS: usize = 8;

/// The bags `sql` selects with `params`, as (owner, key, value) rows, by owner.
fn read_relation_bags(
    conn: &Conn,
    sql: &'static str,
    params: impl rusqlite::Params,
) -> Result<BTreeMap<String, Bag>, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let mut rows = stmt.query(params).db()?;
    let mut bags: BTreeMap<String, Bag> = BTreeMap::new();
    while let Some(r) = rows.next().db()? {
        let (owner, key, value): (String, String, String) =
            (r.get(0).db()?, r.get(1).db()?, r.get(2).db()?);
        bags.entry(owner).or_default().insert(key, value);
    }
    Ok(bags)
}

fn read_relations(conn: &Conn) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(
        conn,
        "SELECT id, interface, endpoints, dying FROM relations ORDER BY id",
        None,
    )
}

/// The relations `?1` is in, by id.
static RELATIONS_OF: &str = "SELECT r.id, r.interface, r.endpoints, r.dying FROM relation_apps a
         JOIN relations r ON r.id = a.relation WHERE a.app = ?1 ORDER BY r.id";

/// The relations `app` takes part in, by id.
fn relations_of(conn: &Conn, app: &str) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(conn, RELATIONS_OF, Some(app))
}

fn relations_where(
    conn: &Conn,
    sql: &'static str,
    app: Option<&str>,
) -> Result<Vec<RelationRecord>, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let params: Vec<&dyn rusqlite::ToSql> = app.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
    let rows = stmt
        .query_map(params.as_slice(), |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, bool>(3)?,
            ))
        })
        .db()?
        .collect::<rusqlite::Result<Vec<_>>>()
        .db()?;
    rows.into_iter()
        .map(|(id, interface, endpoints, dying)| relation_record(id, interface, &endpoints, dying))
        .collect()
}

fn relation_record(
    id: i64,
    interface: String,
    endpoints: &str,
    dying: bool,
) -> Result<RelationRecord, StoreError> {
    let id = RelationId::try_from(id)
        .map_err(|_| StoreError::Corrupt(format!("relation id {id} out of range")))?;
    let endpoints = decode(endpoints, || format!("endpoints of relation {id}"))?;
    Ok(RelationRecord {
        id,
        interface,
        endpoints,
        dying,
    })
}

/// The units of `?1`, by number.
static UNIT_NAMES: &str = "SELECT name FROM units WHERE app = ?1 ORDER BY number";

/// The units a hook's snapshot lists as remote units: those not being removed.
static LIVE_UNITS: &str = "SELECT name FROM units WHERE app = ?1 AND NOT dying ORDER BY number";
static UNITS_GENERATION: &str = "SELECT units_generation FROM applications WHERE name = ?1";
static APP_BAG_GENERATION: &str =
    "SELECT generation FROM app_bag_generations WHERE relation = ?1 AND app = ?2";

fn unit_names(conn: &Conn, app: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.cached(UNIT_NAMES).db()?;
    let names = stmt
        .query_map([app], |r| r.get(0))
        .db()?
        .collect::<rusqlite::Result<Vec<String>>>()
        .db()?;
    Ok(names)
}

fn app_exists(conn: &Conn, app: &str) -> Result<bool, StoreError> {
    conn.cached("SELECT 1 FROM applications WHERE name = ?1")
        .and_then(|mut s| s.exists([app]))
        .db()
}

fn application_record(conn: &Conn, name: &str) -> Result<Option<ApplicationRecord>, StoreError> {
    let row = conn
        .cached("SELECT charm, metadata, config, module FROM applications WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([name], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .optional()
        })
        .db()?;
    row.map(|(charm, metadata, config, module)| {
        app_from_row(name.to_string(), charm, &metadata, &config, module)
    })
    .transpose()
}

fn app_from_row(
    name: String,
    charm: String,
    metadata: &str,
    config: &str,
    module: Option<String>,
) -> Result<ApplicationRecord, StoreError> {
    let metadata: CharmMetadata = decode(metadata, || format!("metadata of {name}"))?;
    let config: BTreeMap<String, ConfigValue> = decode(config, || format!("config of {name}"))?;
    Ok(ApplicationRecord {
        name,
        charm,
        metadata,
        config,
        module,
    })
}

fn pod_spec_record(
    app: &str,
    revision: i64,
    spec: &str,
    resources: Option<String>,
) -> Result<PodSpecRecord, StoreError> {
    Ok(PodSpecRecord {
        revision: to_u64(revision),
        spec: decode(spec, || format!("pod spec of {app}"))?,
        k8s_resources: resources
            .map(|r| decode(&r, || format!("k8s resources of {app}")))
            .transpose()?,
    })
}

fn unit_exists(conn: &Conn, unit: &str) -> Result<bool, StoreError> {
    conn.cached("SELECT 1 FROM units WHERE name = ?1")
        .and_then(|mut s| s.exists([unit]))
        .db()
}

/// The pod spec row of `app`, if it has one: its revision, spec and resources as stored.
fn stored_pod_spec(
    conn: &Conn,
    app: &str,
) -> Result<Option<(i64, String, Option<String>)>, StoreError> {
    conn.cached("SELECT revision, spec, k8s_resources FROM pod_specs WHERE app = ?1")
        .and_then(|mut s| {
            s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .db()
}

/// The hooks queued on `unit`, in order.
fn queue_of(conn: &Conn, unit: &str) -> Result<Vec<QueuedHook>, StoreError> {
    let rows: Vec<(i64, String)> = conn
        .cached("SELECT seq, hook FROM hook_queue WHERE unit = ?1 ORDER BY seq")
        .and_then(|mut s| {
            s.query_map([unit], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .db()?;
    rows.into_iter()
        .map(|(seq, hook)| {
            Ok(QueuedHook {
                unit: unit.to_string(),
                seq: to_u64(seq),
                hook: decode(&hook, || format!("hook {seq} of {unit}"))?,
            })
        })
        .collect()
}

/// Whether a stored JSON text holds `value`. The text is compared first (the common, cheap
/// case); parsing is the fallback for texts that differ only in form.
fn same_json(stored: &str, text: &str, value: &serde_json::Value) -> bool {
    stored == text || serde_json::from_str::<serde_json::Value>(stored).is_ok_and(|v| v == *value)
}

/// One transaction on the SQLite store, as the model's operations read and write it.
struct SqliteTx<'c> {
    conn: &'c Conn,
    configs: &'c ConfigMemo,
    units: &'c Memo<String, UnitNames>,
    /// Whether this step added, removed or marked dying a unit: then its lists of live
    /// units are its own, not yet the file's, and stay out of [`Memo`] both ways.
    units_changed: bool,
    app_bag_memo: &'c Memo<(RelationId, String), SharedBag>,
    /// Whether this step wrote or removed a key of an application bag: as `units_changed`.
    app_bags_changed: bool,
    specs: &'c EncodedSpecs,
    /// The pod spec texts [`ModelTx::pod_spec_state`] encoded, for the write that follows.
    spec_texts: Option<(String, Option<String>)>,
    /// The seqs of the hooks this step queued.
    queued: Vec<i64>,
}

impl SqliteTx<'_> {
    fn exec(&self, sql: &'static str, params: impl rusqlite::Params) -> Result<usize, StoreError> {
        self.conn
            .cached(sql)
            .and_then(|mut s| s.execute(params))
            .db()
    }

    /// The bags of `owners` among one relation's bags, read with `sql`.
    /// The bags of `owners` in relation `id`: read with `all` (the relation's every bag)
    /// when they are many, else each with `one` (an owner's bag, `?2`), so that a unit
    /// with one remote unit reads two bags, not those of the relation's every unit.
    fn bags(
        &self,
        all: &'static str,
        one: &'static str,
        id: RelationId,
        owners: &[&str],
    ) -> Result<Vec<SharedBag>, StoreError> {
        let mut stored = if owners.len() > FEW_BAGS {
            read_relation_bags(self.conn, all, (id,))?
        } else {
            let mut stored = BTreeMap::new();
            for owner in owners {
                stored.extend(read_relation_bags(self.conn, one, (id, owner))?);
            }
            stored
        };
        let mut bags: Vec<SharedBag> = Vec::with_capacity(owners.len());
        for (i, owner) in owners.iter().enumerate() {
            let bag = match stored.remove(*owner) {
                Some(bag) => Arc::new(bag),
                // Asked twice (peers: both sides are this application): already read.
                None => match owners[..i].iter().position(|o| o == owner) {
                    Some(first) => bags[first].clone(),
                    None => SharedBag::default(),
                },
            };
            bags.push(bag);
        }
        Ok(bags)
    }
}

impl ModelTx for SqliteTx<'_> {
    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>> {
        application_record(self.conn, app)
    }

    fn app_dying(&mut self, app: &str) -> TxResult<bool> {
        let dying: Option<bool> = self
            .conn
            .cached("SELECT dying FROM applications WHERE name = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        Ok(dying.unwrap_or(false))
    }

    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>> {
        self.conn
            .cached("SELECT name FROM units WHERE app = ?1 AND dying ORDER BY number")
            .and_then(|mut s| s.query_map([app], |r| r.get(0))?.collect())
            .db()
    }

    fn unit_dying(&mut self, unit: &str) -> TxResult<bool> {
        // The unit's own row, not its application's dying units: a large application's
        // snapshots ask this of each unit.
        let dying: Option<bool> = self
            .conn
            .cached("SELECT dying FROM units WHERE name = ?1")
            .and_then(|mut s| s.query_row([unit], |r| r.get(0)).optional())
            .db()?;
        Ok(dying.unwrap_or(false))
    }

    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let hook: Option<String> = self
            .conn
            .cached("SELECT hook FROM hook_queue WHERE seq = ?1 AND unit = ?2")
            .and_then(|mut s| {
                s.query_row(rusqlite::params![seq, unit], |r| r.get(0))
                    .optional()
            })
            .db()?;
        hook.map(|h| decode(&h, || format!("hook {seq} of {unit}")))
            .transpose()
    }

    fn set_app_config(
        &mut self,
        app: &str,
        config: &BTreeMap<String, ConfigValue>,
    ) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET config = ?2 WHERE name = ?1",
            rusqlite::params![app, encode(config)],
        )?;
        Ok(())
    }

    fn set_app_charm(&mut self, record: &ApplicationRecord) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET charm = ?2, metadata = ?3, config = ?4, module = ?5
             WHERE name = ?1",
            rusqlite::params![
                record.name,
                record.charm,
                encode(&record.metadata),
                encode(&record.config),
                record.module
            ],
        )?;
        Ok(())
    }

    fn module_stored(&mut self, hash: &str) -> TxResult<bool> {
        self.conn
            .cached("SELECT 1 FROM modules WHERE hash = ?1")
            .and_then(|mut s| s.exists([hash]))
            .db()
    }

    fn set_app_dying(&mut self, app: &str) -> TxResult<()> {
        self.exec("UPDATE applications SET dying = 1 WHERE name = ?1", [app])?;
        Ok(())
    }

    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()> {
        self.units_changed = true;
        self.exec("UPDATE units SET dying = 1 WHERE name = ?1", [unit])?;
        Ok(())
    }

    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()> {
        self.exec("UPDATE relations SET dying = 1 WHERE id = ?1", [id])?;
        Ok(())
    }

    fn release_lease(&mut self, app: &str) -> TxResult<()> {
        // `last_terms` keeps the term, so the next leader's is higher.
        self.exec("DELETE FROM leases WHERE app = ?1", [app])?;
        Ok(())
    }

    fn delete_unit(&mut self, unit: &str) -> TxResult<()> {
        self.units_changed = true;
        for sql in [
            "DELETE FROM relation_unit_bags WHERE unit = ?1",
            "DELETE FROM stored_state WHERE unit = ?1",
            "DELETE FROM hook_queue WHERE unit = ?1",
            "DELETE FROM unit_logs WHERE unit = ?1",
            "DELETE FROM units WHERE name = ?1",
        ] {
            self.exec(sql, [unit])?;
        }
        Ok(())
    }

    fn delete_relation(&mut self, id: RelationId) -> TxResult<()> {
        self.app_bags_changed = true;
        for sql in [
            "DELETE FROM relation_unit_bags WHERE relation = ?1",
            "DELETE FROM relation_app_bags WHERE relation = ?1",
            "DELETE FROM app_bag_generations WHERE relation = ?1",
            "DELETE FROM relation_apps WHERE relation = ?1",
            "DELETE FROM relations WHERE id = ?1",
        ] {
            self.exec(sql, [id])?;
        }
        Ok(())
    }

    fn delete_application(&mut self, app: &str) -> TxResult<()> {
        self.app_bags_changed = true;
        for sql in [
            "DELETE FROM leader_data WHERE app = ?1",
            "DELETE FROM relation_app_bags WHERE app = ?1",
            "DELETE FROM app_bag_generations WHERE app = ?1",
            "DELETE FROM relation_apps WHERE app = ?1",
            "DELETE FROM pod_spec_history WHERE app = ?1",
            "DELETE FROM pod_specs WHERE app = ?1",
            "DELETE FROM applications WHERE name = ?1",
        ] {
            self.exec(sql, [app])?;
        }
        Ok(())
    }

    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>> {
        self.conn
            .cached("SELECT name, charm FROM applications ORDER BY name")
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .db()
    }

    fn app_exists(&mut self, app: &str) -> TxResult<bool> {
        app_exists(self.conn, app)
    }

    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>> {
        let row: Option<(String, String, String, Option<String>)> = self
            .conn
            .cached("SELECT metadata, config, status, module FROM applications WHERE name = ?1")
            .and_then(|mut s| {
                s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .db()?;
        let Some((metadata, config, status, module)) = row else {
            return Ok(None);
        };
        Ok(Some(AppView {
            config: self.configs.effective(app, metadata, config)?,
            leader_data: Arc::new(read_bag(
                self.conn,
                "SELECT key, value FROM leader_data WHERE app = ?1",
                &[&app],
            )?),
            status: decode(&status, || format!("status of {app}"))?,
            module,
        }))
    }

    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>> {
        unit_names(self.conn, app)
    }

    fn live_units(&mut self, app: &str) -> TxResult<UnitNames> {
        let read = |conn: &Conn| -> TxResult<UnitNames> {
            // One statement, not the units and then the dying ones.
            conn.cached(LIVE_UNITS)
                .and_then(|mut s| s.query_map([app], |r| r.get(0))?.collect())
                .db()
        };
        if self.units_changed {
            return read(self.conn);
        }
        let generation: Option<i64> = self
            .conn
            .cached(UNITS_GENERATION)
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        let Some(generation) = generation else {
            return Ok(UnitNames::default());
        };
        let key = app.to_string();
        if let Some(names) = self.units.get(&key, generation) {
            return Ok(names);
        }
        let names = read(self.conn)?;
        self.units.put(key, generation, names.clone());
        Ok(names)
    }

    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>> {
        let next: Option<i64> = self
            .conn
            .cached("SELECT next_unit FROM applications WHERE name = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        next.map(|n| {
            u32::try_from(n)
                .map_err(|_| StoreError::Corrupt(format!("next unit number of {app}: {n}")))
        })
        .transpose()
    }

    fn unit_exists(&mut self, unit: &str) -> TxResult<bool> {
        unit_exists(self.conn, unit)
    }

    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>> {
        type Row = (String, String, Option<String>, Option<i64>);
        let row: Option<Row> = self
            .conn
            .cached(
                "SELECT status, workload_version, hook_error, elected_term FROM units WHERE name = ?1",
            )
            .and_then(|mut s| {
                s.query_row([unit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .db()?;
        let Some((status, workload_version, hook_error, elected_term)) = row else {
            return Ok(None);
        };
        Ok(Some(UnitRecord {
            status: decode(&status, || format!("status of {unit}"))?,
            workload_version,
            hook_error,
            stored: Arc::new(read_bag(
                self.conn,
                "SELECT key, value FROM stored_state WHERE unit = ?1",
                &[&unit],
            )?),
            elected_term: elected_term.map(to_u64),
        }))
    }

    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>> {
        // Read under the step's lock, so no claim can slip in before its writes.
        let now_ms = floor_ms(now_since_epoch());
        Ok(live_lease(self.conn, app, now_ms)?.map(|l| LeaseHolder {
            holder: l.holder,
            term: l.term,
        }))
    }

    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>> {
        let row: Option<(String, String, bool)> = self
            .conn
            .cached("SELECT interface, endpoints, dying FROM relations WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .db()?;
        row.map(|(interface, endpoints, dying)| {
            relation_record(id.into(), interface, &endpoints, dying).map(Arc::new)
        })
        .transpose()
    }

    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(relations_of(self.conn, app)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    fn next_relation_id(&mut self) -> TxResult<RelationId> {
        // AUTOINCREMENT keeps the highest id ever given, so none is reused.
        let last: i64 = self
            .conn
            .cached(
                "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'relations'), 0)",
            )
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .db()?;
        RelationId::try_from(last + 1)
            .map_err(|_| StoreError::Corrupt(format!("relation id {} out of range", last + 1)))
    }

    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        self.bags(
            "SELECT unit, key, value FROM relation_unit_bags WHERE relation = ?1",
            "SELECT unit, key, value FROM relation_unit_bags WHERE relation = ?1 AND unit = ?2",
            id,
            of,
        )
    }

    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        static ALL: &str = "SELECT app, key, value FROM relation_app_bags WHERE relation = ?1";
        static ONE: &str =
            "SELECT app, key, value FROM relation_app_bags WHERE relation = ?1 AND app = ?2";
        if self.app_bags_changed {
            return self.bags(ALL, ONE, id, of);
        }
        let mut bags = Vec::with_capacity(of.len());
        for app in of {
            let generation: Option<i64> = self
                .conn
                .cached(APP_BAG_GENERATION)
                .and_then(|mut s| s.query_row((id, app), |r| r.get(0)).optional())
                .db()?;
            let Some(generation) = generation else {
                bags.push(SharedBag::default());
                continue;
            };
            let key = (id, app.to_string());
            let bag = match self.app_bag_memo.get(&key, generation) {
                Some(bag) => bag,
                None => {
                    let bag = self.bags(ALL, ONE, id, &[app])?.remove(0);
                    self.app_bag_memo.put(key, generation, bag.clone());
                    bag
                }
            };
            bags.push(bag);
        }
        Ok(bags)
    }

    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>> {
        let revision: Option<i64> = self
            .conn
            .cached("SELECT revision FROM pod_specs WHERE app = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        Ok(revision.map(to_u64))
    }

    fn pod_spec_state(&mut self, app: &str, write: &Arc<PodSpecWrite>) -> TxResult<PodSpecState> {
        let current = stored_pod_spec(self.conn, app)?;
        let (spec, resources) = self.specs.texts(app, write);
        let same = current
            .as_ref()
            .is_some_and(|(_, stored_spec, stored_resources)| {
                same_json(stored_spec, &spec, &write.spec)
                    && match (stored_resources, &resources, &write.k8s_resources) {
                        (None, None, None) => true,
                        (Some(stored), Some(text), Some(value)) => same_json(stored, text, value),
                        _ => false,
                    }
            });
        self.spec_texts = Some((spec, resources));
        Ok(PodSpecState {
            revision: current.map(|(revision, ..)| to_u64(revision)),
            same,
        })
    }

    fn queued_hooks(&mut self, unit: &str) -> TxResult<Option<Vec<Hook>>> {
        if !unit_exists(self.conn, unit)? {
            return Ok(None);
        }
        Ok(Some(
            queue_of(self.conn, unit)?
                .into_iter()
                .map(|q| q.hook)
                .collect(),
        ))
    }

    fn not_yet_seen(
        &mut self,
        unit: &str,
        runs: charm_model::lifecycle::Runs,
    ) -> TxResult<charm_model::lifecycle::NotYetSeen> {
        // Only the hooks that hide something, found by their text's prefix in the queue's
        // index by hook: a unit with thousands of relation-changed queued reads none of them.
        let rows: Vec<(bool, String)> = self
            .conn
            .cached(
                "SELECT seq = (SELECT MIN(seq) FROM hook_queue WHERE unit = ?1), hook
                 FROM hook_queue WHERE unit = ?1
                   AND (hook = '{\"hook\":\"install\"}'
                        OR (hook >= '{\"hook\":\"relation-created\"'
                            AND hook < '{\"hook\":\"relation-created\"~')
                        OR (hook >= '{\"hook\":\"relation-joined\"'
                            AND hook < '{\"hook\":\"relation-joined\"~')
                        OR (hook >= '{\"hook\":\"relation-broken\"'
                            AND hook < '{\"hook\":\"relation-broken\"~'))
                 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([unit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .db()?;
        let hooks = rows
            .into_iter()
            .map(|(head, text)| Ok((head, decode::<Hook>(&text, || format!("a hook of {unit}"))?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(charm_model::lifecycle::NotYetSeen::of_queued(
            hooks.iter().map(|(head, hook)| (*head, hook)),
            runs,
        ))
    }

    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        // Hooks are stored in one canonical encoding: equal hooks have equal texts, so the
        // queue is compared where it lies, without decoding it.
        let (exists, waiting): (bool, bool) = self
            .conn
            .cached(
                "SELECT EXISTS(SELECT 1 FROM units WHERE name = ?1),
                        EXISTS(SELECT 1 FROM hook_queue WHERE unit = ?1 AND hook = ?2
                               AND seq > (SELECT MIN(seq) FROM hook_queue WHERE unit = ?1))",
            )
            .and_then(|mut s| {
                s.query_row([unit, encode(hook).as_str()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .db()?;
        Ok(exists.then_some(waiting))
    }

    fn queue_of(&mut self, unit: &str) -> TxResult<Option<Vec<QueuedHook>>> {
        if !unit_exists(self.conn, unit)? {
            return Ok(None);
        }
        queue_of(self.conn, unit).map(Some)
    }

    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>> {
        type Row = (String, String, String, String, Option<String>);
        let rows: Vec<Row> = self
            .conn
            .cached("SELECT name, charm, metadata, config, module FROM applications ORDER BY name")
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect()
            })
            .db()?;
        rows.into_iter()
            .map(|(name, charm, metadata, config, module)| {
                app_from_row(name, charm, &metadata, &config, module)
            })
            .collect()
    }

    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(read_relations(self.conn)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>> {
        stored_pod_spec(self.conn, app)?
            .map(|(revision, spec, resources)| pod_spec_record(app, revision, &spec, resources))
            .transpose()
    }

    fn create_application(&mut self, app: ApplicationRecord) -> TxResult<()> {
        self.exec(
            "INSERT INTO applications (name, charm, metadata, config, status, next_unit, module)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
            rusqlite::params![
                app.name,
                app.charm,
                encode(&app.metadata),
                encode(&app.config),
                encode(&Status::default()),
                app.module
            ],
        )?;
        Ok(())
    }

    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> TxResult<()> {
        self.units_changed = true;
        self.exec(
            "INSERT INTO units (name, app, number, status, workload_version, hook_error)
             VALUES (?1, ?2, ?3, ?4, '', NULL)",
            rusqlite::params![name, app, number, encode(&Status::default())],
        )?;
        self.exec(
            "UPDATE applications SET next_unit = ?2 WHERE name = ?1",
            rusqlite::params![app, number + 1],
        )?;
        Ok(())
    }

    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()> {
        self.exec(
            "INSERT INTO relations (id, interface, endpoints) VALUES (?1, ?2, ?3)",
            rusqlite::params![record.id, record.interface, encode(&record.endpoints)],
        )?;
        for e in &record.endpoints {
            self.exec(
                "INSERT OR IGNORE INTO relation_apps (app, relation) VALUES (?1, ?2)",
                rusqlite::params![e.app, record.id],
            )?;
        }
        Ok(())
    }

    fn write_bag(&mut self, owner: BagOwner<'_>, writes: &BagWrites) -> TxResult<bool> {
        match owner {
            BagOwner::Unit(id, unit) => write_bag(self.conn, &UNIT_BAGS, &[&id, &unit], writes),
            BagOwner::App(id, app) => {
                self.app_bags_changed = true;
                write_bag(self.conn, &APP_BAGS, &[&id, &app], writes)
            }
            BagOwner::Leader(app) => write_bag(self.conn, &LEADER_DATA, &[&app], writes),
        }
    }

    fn set_app_status(&mut self, app: &str, status: &Status) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET status = ?2 WHERE name = ?1",
            rusqlite::params![app, encode(status)],
        )?;
        Ok(())
    }

    fn put_pod_spec(&mut self, app: &str, revision: u64, spec: &Arc<PodSpecWrite>) -> TxResult<()> {
        let write = spec;
        let (spec, resources) = match self.spec_texts.take() {
            Some(texts) => texts,
            None => self.specs.texts(app, write),
        };
        let revision = i64::try_from(revision)
            .map_err(|_| StoreError::Corrupt(format!("pod spec revision {revision} of {app}")))?;
        self.exec(
            "INSERT INTO pod_specs (app, revision, spec, k8s_resources) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (app) DO UPDATE
             SET revision = excluded.revision, spec = excluded.spec, k8s_resources = excluded.k8s_resources",
            rusqlite::params![app, revision, spec, resources],
        )?;
        // A plain INSERT: a revision written twice is an error, not a silent overwrite.
        self.exec(
            "INSERT INTO pod_spec_history (app, revision, spec, k8s_resources)
             VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![app, revision, spec, resources],
        )?;
        Ok(())
    }

    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> TxResult<()> {
        if let Some(status) = update.status {
            self.exec(
                "UPDATE units SET status = ?2 WHERE name = ?1",
                rusqlite::params![unit, encode(status)],
            )?;
        }
        if let Some(version) = update.workload_version {
            self.exec(
                "UPDATE units SET workload_version = ?2 WHERE name = ?1",
                [unit, version],
            )?;
        }
        write_bag(self.conn, &STORED_STATE, &[&unit], update.stored)?;
        match update.elected_term {
            ElectedTerm::Keep => {}
            ElectedTerm::Set(term) => {
                // Terms are issued by this store as SQLite integers, so every real one fits.
                let term = i64::try_from(term).unwrap_or(i64::MAX);
                self.exec(
                    "UPDATE units SET elected_term = ?2 WHERE name = ?1",
                    rusqlite::params![unit, term],
                )?;
            }
            ElectedTerm::Clear => {
                self.exec(
                    "UPDATE units SET elected_term = NULL WHERE name = ?1 AND elected_term IS NOT NULL",
                    [unit],
                )?;
            }
        }
        Ok(())
    }

    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> TxResult<()> {
        self.exec(
            "UPDATE units SET hook_error = ?2 WHERE name = ?1",
            rusqlite::params![unit, error],
        )?;
        Ok(())
    }

    fn dequeue(&mut self, unit: &str, seq: u64) -> TxResult<()> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        self.exec(
            "DELETE FROM hook_queue WHERE seq = ?1 AND unit = ?2",
            rusqlite::params![seq, unit],
        )?;
        Ok(())
    }

    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()> {
        for line in lines {
            let at_ms = i64::try_from(line.at_ms).unwrap_or(i64::MAX);
            self.exec(
                "INSERT INTO unit_logs (unit, hook, at_ms, level, message) VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![unit, line.hook, at_ms, line.level, line.message],
            )?;
        }
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.exec(
            "DELETE FROM unit_logs WHERE unit = ?1 AND seq <= (
                 SELECT seq FROM unit_logs WHERE unit = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            rusqlite::params![unit, keep],
        )?;
        Ok(())
    }

    fn next_action_id(&mut self) -> TxResult<u64> {
        // AUTOINCREMENT keeps the highest id ever given, so none is reused.
        let last: i64 = self
            .conn
            .cached("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'actions'), 0)")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .db()?;
        Ok(to_u64(last) + 1)
    }

    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>> {
        let Ok(key) = i64::try_from(id) else {
            return Ok(None);
        };
        let record: Option<String> = self
            .conn
            .cached("SELECT record FROM actions WHERE id = ?1")
            .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional())
            .db()?;
        record
            .map(|r| decode(&r, || format!("action {id}")))
            .transpose()
    }

    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()> {
        let id = i64::try_from(record.id)
            .map_err(|_| StoreError::Invalid(format!("action id {} is too large", record.id)))?;
        self.exec(
            "INSERT INTO actions (id, unit, state, record) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (id) DO UPDATE SET state = excluded.state, record = excluded.record",
            rusqlite::params![id, record.unit, record.state.as_str(), encode(record)],
        )?;
        Ok(())
    }

    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>> {
        type Row = (i64, String, i64, String, String);
        let rows: Vec<Row> = self
            .conn
            .cached(
                "SELECT seq, hook, at_ms, level, message FROM unit_logs WHERE unit = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([unit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect()
            })
            .db()?;
        Ok(rows
            .into_iter()
            .map(|(seq, hook, at_ms, level, message)| LogRecord {
                seq: to_u64(seq),
                unit: unit.to_string(),
                hook,
                at_ms: to_u64(at_ms),
                level,
                message,
            })
            .collect())
    }

    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64> {
        self.exec(
            "INSERT INTO hook_queue (unit, hook) VALUES (?1, ?2)",
            [unit, encode(hook).as_str()],
        )?;
        let seq = self.conn.last_insert_rowid();
        self.queued.push(seq);
        Ok(to_u64(seq))
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

/// The wake-up thread's loop: while `store` lives, every [`WAKE_POLL`] it checks whether
/// another connection committed, and wakes the agents of the units with hooks queued since,
/// and the followers of leases released or taken anew since.
fn wake_agents(path: &Path, store: &Weak<SqliteStore>) -> rusqlite::Result<()> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let version = |conn: &Connection| -> rusqlite::Result<i64> {
        conn.query_row("PRAGMA data_version", [], |r| r.get(0))
    };
    // Hooks queued before now are in the queues the agents loaded when they started.
    let mut seen: i64 =
        conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM hook_queue", [], |r| {
            r.get(0)
        })?;
    let mut last = version(&conn)?;
    let mut leases = lease_terms(&conn)?;
    loop {
        std::thread::sleep(WAKE_POLL);
        let Some(store) = store.upgrade() else {
            return Ok(());
        };
        let now = version(&conn)?;
        if now == last {
            continue;
        }
        last = now;
        let mut select =
            conn.prepare_cached("SELECT seq, unit FROM hook_queue WHERE seq > ?1 ORDER BY seq")?;
        let queued: Vec<(i64, String)> = select
            .query_map([seen], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut here = store.queued_here.lock().unwrap_or_else(|e| e.into_inner());
        let signals = store.signals.lock().unwrap_or_else(|e| e.into_inner());
        for (seq, unit) in queued {
            seen = seen.max(seq);
            if here.remove(&seq) {
                continue;
            }
            if let Some(signal) = signals.get(&unit) {
                signal.notify_one();
            }
        }
        // Those left behind were rolled back, or passed before they were noted here.
        *here = here.split_off(&(seen + 1));
        drop((here, signals));
        // A lease whose row went was released; one with another term was taken anew, perhaps
        // after a release between two looks. (A lapsed lease's row stays until claimed.)
        if !store.lease_signals.is_empty() {
            let now = lease_terms(&conn)?;
            for (app, term) in &leases {
                if now.get(app) != Some(term) {
                    store.lease_signals.bump(app);
                }
            }
            leases = now;
        }
    }
}

/// Each application's lease term in the file.
fn lease_terms(conn: &Connection) -> rusqlite::Result<HashMap<String, i64>> {
    conn.prepare_cached("SELECT app, term FROM leases")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
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
