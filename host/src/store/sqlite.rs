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
//! # Schema versions
//!
//! The schema's version is `PRAGMA user_version`; each migration (`schema/v<N>.sql`) moves
//! it up by one, in one transaction. A file written by a newer host, a SQLite file of another program, or a file
//! that is not SQLite at all is refused with [`StoreError::Incompatible`] or
//! [`StoreError::Corrupt`] before anything is written to it: these checks run on a read-only
//! connection.

use std::cell::RefCell;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::types::ToSql;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    AppStatusRow, BoxFuture, Claim, CommitError, CommitReceipt, Committed, Fence, Lease,
    LeaseError, LeaseStore, ModelStatus, QueuedHook, StateStore, StoreError, UnitStatusRow,
    routing,
};
use crate::model::{
    ApplicationRecord, Bag, BagWrites, Changes, CharmMetadata, ConfigValue, Hook, PodSpecRecord,
    PodSpecWrite, RelationEndpoint, RelationId, RelationRecord, RelationView, SharedConfig, Status,
    StatusKind, UnitSnapshot, app_of,
};

/// How long an operation waits for another process's write transaction before it fails as
/// unavailable. Commits hold the lock for well under a millisecond; this covers a checkpoint
/// or a slow disk, and stays far below lease durations so a renewal can still be retried.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema version this host writes: the number of migrations.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Migration `i` moves the schema from version `i` to `i + 1`. Append; never edit.
const MIGRATIONS: &[&str] = &[SCHEMA_V1, SCHEMA_V2, SCHEMA_V3];

/// Version 1: the model, leases and terms.
const SCHEMA_V1: &str = include_str!("schema/v1.sql");

/// Version 2: hook queues, `units.elected_term`, pod spec history.
const SCHEMA_V2: &str = include_str!("schema/v2.sql");

/// Version 3: `relation_apps`, each application's relations.
const SCHEMA_V3: &str = include_str!("schema/v3.sql");

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Leases and model state in one SQLite database.
#[derive(Debug)]
pub struct SqliteStore {
    model: String,
    conn: Mutex<Connection>,
    configs: ConfigMemo,
    specs: EncodedSpecs,
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
            app_from_row(app.to_string(), String::new(), &metadata, &config)?.effective_config(),
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
    conn: &'c Connection,
    open: bool,
}

impl<'c> HookTx<'c> {
    /// A read transaction: it sees one instant of the file from its first read.
    fn read(conn: &'c Connection) -> rusqlite::Result<Self> {
        Self::begin(conn, "BEGIN DEFERRED")
    }

    /// A write transaction: it holds the file's write lock from here to its end.
    fn write(conn: &'c Connection) -> rusqlite::Result<Self> {
        Self::begin(conn, "BEGIN IMMEDIATE")
    }

    fn begin(conn: &'c Connection, begin: &str) -> rusqlite::Result<Self> {
        conn.prepare_cached(begin)?.execute([])?;
        Ok(HookTx { conn, open: true })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for HookTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for HookTx<'_> {
    fn drop(&mut self) {
        if self.open {
            // As rusqlite's `Transaction`: a failed rollback leaves nothing to do here, and
            // SQLite rolls back what is left when the next transaction begins.
            let _ = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
        }
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the store at `path` for model `model`, migrating an older
    /// schema. Refuses, without writing anything, a file that is not a SQLite database
    /// ([`StoreError::Corrupt`]), one written by a newer host, by another program or for
    /// another model ([`StoreError::Incompatible`]).
    pub fn open(path: &Path, model: &str) -> Result<Self, StoreError> {
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
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .db()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "{}: cannot use write-ahead logging (journal mode is {mode})",
                path.display()
            )));
        }
        Self::prepare(conn, model)
    }

    /// A store in this process's memory, with the same schema and transactions as a file.
    pub fn in_memory(model: &str) -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory().db()?;
        Self::prepare(conn, model)
    }

    fn prepare(mut conn: Connection, model: &str) -> Result<Self, StoreError> {
        // NORMAL in WAL mode: durable against process crashes (see the module doc).
        conn.pragma_update(None, "synchronous", "NORMAL").db()?;
        conn.pragma_update(None, "foreign_keys", "ON").db()?;
        conn.set_prepared_statement_cache_capacity(64);
        // Plans that do not depend on the values bound. Without this, SQLite (built with
        // STAT4) compiles a cached statement again each time a parameter that it compares
        // with an indexed column is bound, same value or not: two of a snapshot's queries,
        // on every hook.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .db()?;
        migrate(&mut conn)?;
        bind_model(&mut conn, model)?;
        Ok(SqliteStore {
            model: model.to_string(),
            conn: Mutex::new(conn),
            configs: ConfigMemo::default(),
            specs: EncodedSpecs::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a transaction drops the `Transaction`, which rolls it back, so a
        // poisoned connection holds no half-applied commit.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every pod spec revision `app` has had, by revision: each commit that changes the spec
    /// adds one, in the same transaction, so the revisions have no gaps (a file migrated from
    /// schema version 1 kept only its revision of then, and its history starts there).
    pub fn pod_spec_history(&self, app: &str) -> Result<Vec<PodSpecRecord>, StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .db()?;
        if !app_exists(&tx, app)? {
            return Err(not_found(format!("application {app}")));
        }
        let rows: Vec<(i64, String, Option<String>)> = tx
            .prepare_cached(
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

fn open_err(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!("{}: {e}", path.display()))
        }
        _ => StoreError::Unavailable(format!("{}: {e}", path.display())),
    }
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

fn not_found(what: impl Into<String>) -> StoreError {
    StoreError::NotFound(what.into())
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
fn live_lease(conn: &Connection, app: &str, now_ms: i64) -> Result<Option<LeaseRow>, StoreError> {
    conn.prepare_cached(
        "SELECT holder, term, expiry_ms FROM leases WHERE app = ?1 AND expiry_ms > ?2",
    )
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
    fn claim<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Claim, LeaseError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .db()
                .map_err(lease_err)?;
            // Taken under the write lock: the lease runs from when the store handles the claim.
            let now = now_since_epoch();
            let expiry_ms = ceil_ms(now.saturating_add(duration));
            let claim = match live_lease(&tx, app, floor_ms(now)).map_err(lease_err)? {
                Some(live) if live.holder != holder => Claim::Denied {
                    holder: live.holder,
                    term: live.term,
                },
                Some(live) => {
                    tx.prepare_cached("UPDATE leases SET expiry_ms = ?2 WHERE app = ?1")
                        .and_then(|mut s| s.execute(rusqlite::params![app, expiry_ms]))
                        .db()
                        .map_err(lease_err)?;
                    Claim::Held(Lease {
                        holder: live.holder,
                        term: live.term,
                        duration,
                    })
                }
                None => {
                    let last: Option<i64> = tx
                        .prepare_cached("SELECT term FROM last_terms WHERE app = ?1")
                        .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
                        .db()
                        .map_err(lease_err)?;
                    let term = last.unwrap_or(0) + 1;
                    tx.prepare_cached(
                        "INSERT INTO last_terms (app, term) VALUES (?1, ?2)
                         ON CONFLICT (app) DO UPDATE SET term = excluded.term",
                    )
                    .and_then(|mut s| s.execute(rusqlite::params![app, term]))
                    .db()
                    .map_err(lease_err)?;
                    tx.prepare_cached(
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
                        duration,
                    })
                }
            };
            tx.commit().db().map_err(lease_err)?;
            Ok(claim)
        })
    }

    fn release<'a>(
        &'a self,
        app: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            let conn = self.lock();
            // One statement is its own transaction; `last_terms` keeps the term.
            conn.prepare_cached("DELETE FROM leases WHERE app = ?1 AND holder = ?2")
                .and_then(|mut s| s.execute([app, holder]))
                .db()
                .map_err(lease_err)?;
            Ok(())
        })
    }

    fn leader<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Option<Lease>, LeaseError>> {
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
}

/// A data bag's table: the statements that write one key of one bag. The bag's owner is the
/// first parameters, then the key, then the value.
struct BagTable {
    upsert: &'static str,
    delete: &'static str,
}

const UNIT_BAGS: BagTable = BagTable {
    // The WHERE makes an unchanged value no change at all, so `execute` reports 0 rows.
    upsert: "INSERT INTO relation_unit_bags (relation, unit, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_unit_bags WHERE relation = ?1 AND unit = ?2 AND key = ?3",
};

const APP_BAGS: BagTable = BagTable {
    upsert: "INSERT INTO relation_app_bags (relation, app, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_app_bags WHERE relation = ?1 AND app = ?2 AND key = ?3",
};

const LEADER_DATA: BagTable = BagTable {
    upsert: "INSERT INTO leader_data (app, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM leader_data WHERE app = ?1 AND key = ?2",
};

const STORED_STATE: BagTable = BagTable {
    upsert: "INSERT INTO stored_state (unit, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM stored_state WHERE unit = ?1 AND key = ?2",
};

/// Applies `writes` to one bag, as [`crate::model::apply_writes`] does; whether anything
/// changed.
fn write_bag(
    conn: &Connection,
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
                conn.prepare_cached(table.upsert)
                    .and_then(|mut s| s.execute(params.as_slice()))
                    .db()?
            }
            None => conn
                .prepare_cached(table.delete)
                .and_then(|mut s| s.execute(params.as_slice()))
                .db()?,
        };
        changed |= rows > 0;
    }
    Ok(changed)
}

fn read_bag(conn: &Connection, sql: &str, owner: &[&dyn ToSql]) -> Result<Bag, StoreError> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let rows = stmt
        .query_map(owner, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .db()?;
    rows.collect::<rusqlite::Result<Bag>>().db()
}

/// Keyed bags of one relation: owner -> key -> value.
fn read_relation_bags(
    conn: &Connection,
    sql: &str,
    relation: RelationId,
) -> Result<BTreeMap<String, Bag>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let mut rows = stmt.query([relation]).db()?;
    let mut bags: BTreeMap<String, Bag> = BTreeMap::new();
    while let Some(r) = rows.next().db()? {
        let (owner, key, value): (String, String, String) =
            (r.get(0).db()?, r.get(1).db()?, r.get(2).db()?);
        bags.entry(owner).or_default().insert(key, value);
    }
    Ok(bags)
}

fn read_relations(conn: &Connection) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(
        conn,
        "SELECT id, interface, endpoints FROM relations ORDER BY id",
        None,
    )
}

/// The relations `?1` is in, by id.
const RELATIONS_OF: &str = "SELECT r.id, r.interface, r.endpoints FROM relation_apps a
         JOIN relations r ON r.id = a.relation WHERE a.app = ?1 ORDER BY r.id";

/// The relations `app` takes part in, by id.
fn relations_of(conn: &Connection, app: &str) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(conn, RELATIONS_OF, Some(app))
}

fn relations_where(
    conn: &Connection,
    sql: &str,
    app: Option<&str>,
) -> Result<Vec<RelationRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let params: Vec<&dyn rusqlite::ToSql> = app.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
    let rows = stmt
        .query_map(params.as_slice(), |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .db()?
        .collect::<rusqlite::Result<Vec<_>>>()
        .db()?;
    rows.into_iter()
        .map(|(id, interface, endpoints)| relation_record(id, interface, &endpoints))
        .collect()
}

fn relation_record(
    id: i64,
    interface: String,
    endpoints: &str,
) -> Result<RelationRecord, StoreError> {
    let id = RelationId::try_from(id)
        .map_err(|_| StoreError::Corrupt(format!("relation id {id} out of range")))?;
    let endpoints = decode(endpoints, || format!("endpoints of relation {id}"))?;
    Ok(RelationRecord {
        id,
        interface,
        endpoints,
    })
}

/// The units of `?1`, by number.
const UNIT_NAMES: &str = "SELECT name FROM units WHERE app = ?1 ORDER BY number";

fn unit_names(conn: &Connection, app: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(UNIT_NAMES).db()?;
    let names = stmt
        .query_map([app], |r| r.get(0))
        .db()?
        .collect::<rusqlite::Result<Vec<String>>>()
        .db()?;
    Ok(names)
}

fn app_exists(conn: &Connection, app: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM applications WHERE name = ?1")
        .and_then(|mut s| s.exists([app]))
        .db()
}

fn application_record(
    conn: &Connection,
    name: &str,
) -> Result<Option<ApplicationRecord>, StoreError> {
    let row = conn
        .prepare_cached("SELECT charm, metadata, config FROM applications WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([name], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()
        })
        .db()?;
    row.map(|(charm, metadata, config)| app_from_row(name.to_string(), charm, &metadata, &config))
        .transpose()
}

fn app_from_row(
    name: String,
    charm: String,
    metadata: &str,
    config: &str,
) -> Result<ApplicationRecord, StoreError> {
    let metadata: CharmMetadata = decode(metadata, || format!("metadata of {name}"))?;
    let config: BTreeMap<String, ConfigValue> = decode(config, || format!("config of {name}"))?;
    Ok(ApplicationRecord {
        name,
        charm,
        metadata,
        config,
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

fn unit_exists(conn: &Connection, unit: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM units WHERE name = ?1")
        .and_then(|mut s| s.exists([unit]))
        .db()
}

/// The hooks queued on `unit`, in order.
fn queue_of(conn: &Connection, unit: &str) -> Result<Vec<QueuedHook>, StoreError> {
    let rows: Vec<(i64, String)> = conn
        .prepare_cached("SELECT seq, hook FROM hook_queue WHERE unit = ?1 ORDER BY seq")
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

/// Queues `hooks` in order, each on its unit, inside the caller's write transaction, and
/// returns those queued: a hook equal to one already waiting on its unit behind the first
/// (counting those this call queued) is coalesced ([`routing::coalesces`]). A unit that does
/// not exist fails the whole call; the caller's rollback then leaves nothing queued.
fn enqueue_in(
    conn: &Connection,
    hooks: impl IntoIterator<Item = (String, Hook)>,
) -> Result<Vec<QueuedHook>, StoreError> {
    // The queue of each unit touched so far, as it stands in this transaction.
    let mut queues: BTreeMap<String, Vec<Hook>> = BTreeMap::new();
    let mut queued = Vec::new();
    for (unit, hook) in hooks {
        let queue = match queues.entry(unit.clone()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                if !unit_exists(conn, e.key())? {
                    return Err(not_found(format!("unit {}", e.key())));
                }
                let current = queue_of(conn, e.key())?;
                e.insert(current.into_iter().map(|q| q.hook).collect())
            }
        };
        if routing::coalesces(&queue.iter().collect::<Vec<_>>(), &hook) {
            continue;
        }
        conn.prepare_cached("INSERT INTO hook_queue (unit, hook) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute([unit.as_str(), encode(&hook).as_str()]))
            .db()?;
        let seq = to_u64(conn.last_insert_rowid());
        queue.push(hook.clone());
        queued.push(QueuedHook { unit, seq, hook });
    }
    Ok(queued)
}

/// Runs `f` with `units_of` (an application's units, by number, as `conn` has them); a
/// failed read fails the result.
fn with_units_of<T>(
    conn: &Connection,
    f: impl FnOnce(&dyn Fn(&str) -> Vec<String>) -> T,
) -> Result<T, StoreError> {
    let failed = RefCell::new(None);
    let units_of = |app: &str| {
        unit_names(conn, app).unwrap_or_else(|e| {
            failed.borrow_mut().get_or_insert(e);
            Vec::new()
        })
    };
    let out = f(&units_of);
    match failed.into_inner() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Whether two relations relate the same endpoints, in either order.
fn same_endpoints(a: &[RelationEndpoint], b: &[RelationEndpoint]) -> bool {
    let key = |e: &RelationEndpoint| (e.app.clone(), e.endpoint.clone());
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// Whether a stored JSON text holds `value`. The text is compared first (the common, cheap
/// case); parsing is the fallback for texts that differ only in form.
fn same_json(stored: &str, text: &str, value: &serde_json::Value) -> bool {
    stored == text || serde_json::from_str::<serde_json::Value>(stored).is_ok_and(|v| v == *value)
}

/// A hook's commit, inside the caller's `BEGIN IMMEDIATE` transaction.
fn commit_in(
    conn: &Connection,
    specs: &EncodedSpecs,
    unit: &str,
    hook: Option<u64>,
    changes: &Changes,
    fence: Option<&Fence>,
) -> Result<Committed, CommitError> {
    let app = app_of(unit);
    // Validate everything first: once writing starts, only SQLite itself can fail, and then
    // the transaction is rolled back.
    if !unit_exists(conn, unit)? {
        return Err(not_found(format!("unit {unit}")).into());
    }
    match fence {
        Some(f) => {
            // Read under the write lock, so no claim can slip in before the writes below.
            let now_ms = floor_ms(now_since_epoch());
            let holds = f.app == app
                && f.holder == unit
                && live_lease(conn, &f.app, now_ms)?
                    .is_some_and(|l| l.holder == f.holder && l.term == f.term);
            if !holds {
                return Err(CommitError::Fenced { fence: f.clone() });
            }
        }
        None if changes.needs_fence() => return Err(CommitError::Unfenced),
        None => {}
    }
    for id in changes.unit_bags.keys().chain(changes.app_bags.keys()) {
        let endpoints: Option<String> = conn
            .prepare_cached("SELECT endpoints FROM relations WHERE id = ?1")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .db()?;
        let visible = match endpoints {
            Some(text) => {
                decode::<Vec<RelationEndpoint>>(&text, || format!("endpoints of relation {id}"))?
                    .iter()
                    .any(|e| e.app == app)
            }
            None => false,
        };
        if !visible {
            return Err(not_found(format!("relation {id}")).into());
        }
    }
    // Last: the hook leaves the queue, so a second commit of it applies nothing. This is the
    // first write; if it finds nothing to remove, nothing has been written.
    if let Some(seq) = hook {
        let removed = match i64::try_from(seq) {
            Ok(raw) => conn
                .prepare_cached("DELETE FROM hook_queue WHERE seq = ?1 AND unit = ?2")
                .and_then(|mut s| s.execute(rusqlite::params![raw, unit]))
                .db()?,
            Err(_) => 0,
        };
        if removed == 0 {
            return Err(CommitError::NotQueued {
                unit: unit.to_string(),
                seq,
            });
        }
    }

    let mut receipt = CommitReceipt::default();
    for (id, writes) in &changes.unit_bags {
        if write_bag(conn, &UNIT_BAGS, &[id, &unit], writes)? {
            receipt.unit_bags_changed.push(*id);
        }
    }
    for (id, writes) in &changes.app_bags {
        if write_bag(conn, &APP_BAGS, &[id, &app], writes)? {
            receipt.app_bags_changed.push(*id);
        }
    }
    receipt.leader_data_changed = write_bag(conn, &LEADER_DATA, &[&app], &changes.leader_data)?;
    if let Some(status) = &changes.app_status {
        conn.prepare_cached("UPDATE applications SET status = ?2 WHERE name = ?1")
            .and_then(|mut s| s.execute(rusqlite::params![app, encode(status)]))
            .db()?;
    }
    if let Some(write) = &changes.pod_spec {
        let current: Option<(i64, String, Option<String>)> = conn
            .prepare_cached("SELECT revision, spec, k8s_resources FROM pod_specs WHERE app = ?1")
            .and_then(|mut s| {
                s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .db()?;
        let (spec, resources) = specs.texts(app, write);
        let unchanged = current
            .as_ref()
            .is_some_and(|(_, stored_spec, stored_resources)| {
                same_json(stored_spec, &spec, &write.spec)
                    && match (stored_resources, &resources, &write.k8s_resources) {
                        (None, None, None) => true,
                        (Some(stored), Some(text), Some(value)) => same_json(stored, text, value),
                        _ => false,
                    }
            });
        if !unchanged {
            let revision = current.map_or(1, |(revision, ..)| revision + 1);
            conn.prepare_cached(
                "INSERT INTO pod_specs (app, revision, spec, k8s_resources) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (app) DO UPDATE
                 SET revision = excluded.revision, spec = excluded.spec, k8s_resources = excluded.k8s_resources",
            )
            .and_then(|mut s| s.execute(rusqlite::params![app, revision, spec, resources]))
            .db()?;
            // A plain INSERT: a revision written twice is an error, not a silent overwrite.
            conn.prepare_cached(
                "INSERT INTO pod_spec_history (app, revision, spec, k8s_resources)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| s.execute(rusqlite::params![app, revision, spec, resources]))
            .db()?;
            receipt.pod_spec_revision = Some(to_u64(revision));
        }
    }
    if let Some(status) = &changes.unit_status {
        conn.prepare_cached("UPDATE units SET status = ?2 WHERE name = ?1")
            .and_then(|mut s| s.execute(rusqlite::params![unit, encode(status)]))
            .db()?;
    }
    if let Some(version) = &changes.workload_version {
        conn.prepare_cached("UPDATE units SET workload_version = ?2 WHERE name = ?1")
            .and_then(|mut s| s.execute([unit, version.as_str()]))
            .db()?;
    }
    write_bag(conn, &STORED_STATE, &[&unit], &changes.stored)?;
    if let Some(term) = changes.elected_term {
        // Terms are issued by this store as SQLite integers, so every real one fits.
        let term = i64::try_from(term).unwrap_or(i64::MAX);
        conn.prepare_cached("UPDATE units SET elected_term = ?2 WHERE name = ?1")
            .and_then(|mut s| s.execute(rusqlite::params![unit, term]))
            .db()?;
    } else if fence.is_none() {
        // It ran as a follower: leader-elected is owed should it lead again.
        conn.prepare_cached(
            "UPDATE units SET elected_term = NULL WHERE name = ?1 AND elected_term IS NOT NULL",
        )
        .and_then(|mut s| s.execute([unit]))
        .db()?;
    }

    // The hooks the changes fire, queued in this transaction so none is lost.
    // A unit writes only its application's bags: their relations route the follow-ups.
    let relations = if receipt.unit_bags_changed.is_empty() && receipt.app_bags_changed.is_empty() {
        Vec::new()
    } else {
        relations_of(conn, app_of(unit))?
    };
    let follow_ups = with_units_of(conn, |units_of| {
        routing::follow_ups(unit, &receipt, &relations, units_of)
    })?;
    let queued = enqueue_in(conn, follow_ups)?;
    Ok(Committed { receipt, queued })
}

fn snapshot_in(
    conn: &Connection,
    configs: &ConfigMemo,
    model: &str,
    unit: &str,
) -> Result<UnitSnapshot, StoreError> {
    let app_name = app_of(unit);
    let (unit_status, elected_term): (String, Option<i64>) = conn
        .prepare_cached("SELECT status, elected_term FROM units WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([unit], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .db()?
        .ok_or_else(|| not_found(format!("unit {unit}")))?;
    let app_row: (String, String, String) = conn
        .prepare_cached("SELECT metadata, config, status FROM applications WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([app_name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .db()?
        .ok_or_else(|| not_found(format!("application {app_name}")))?;
    let (metadata, config, app_status) = app_row;
    let config = configs.effective(app_name, metadata, config)?;

    let mut relations = BTreeMap::new();
    for rel in relations_of(conn, app_name)? {
        let (Some(local), Some(remote)) = (rel.local(app_name), rel.remote(app_name)) else {
            continue;
        };
        let remote_units: Vec<String> = unit_names(conn, &remote.app)?
            .into_iter()
            .filter(|u| u.as_str() != unit)
            .collect();
        let mut stored_unit_bags = read_relation_bags(
            conn,
            "SELECT unit, key, value FROM relation_unit_bags WHERE relation = ?1",
            rel.id,
        )?;
        let mut stored_app_bags = read_relation_bags(
            conn,
            "SELECT app, key, value FROM relation_app_bags WHERE relation = ?1",
            rel.id,
        )?;
        let mut unit_bags = BTreeMap::new();
        for name in remote_units.iter().map(String::as_str).chain([unit]) {
            unit_bags.insert(
                name.to_string(),
                Arc::new(stored_unit_bags.remove(name).unwrap_or_default()),
            );
        }
        let mut app_bags = BTreeMap::new();
        for name in [app_name, remote.app.as_str()] {
            let bag = match stored_app_bags.remove(name) {
                Some(bag) => Arc::new(bag),
                // Peers: both sides are this application, already read.
                None => app_bags.get(name).cloned().unwrap_or_default(),
            };
            app_bags.insert(name.to_string(), bag);
        }
        relations.insert(
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
        model: model.to_string(),
        unit: unit.to_string(),
        app: app_name.to_string(),
        config,
        relations,
        leader_data: Arc::new(read_bag(
            conn,
            "SELECT key, value FROM leader_data WHERE app = ?1",
            &[&app_name],
        )?),
        unit_status: decode(&unit_status, || format!("status of {unit}"))?,
        app_status: decode(&app_status, || format!("status of {app_name}"))?,
        stored: Arc::new(read_bag(
            conn,
            "SELECT key, value FROM stored_state WHERE unit = ?1",
            &[&unit],
        )?),
        elected_term: elected_term.map(to_u64),
    })
}

fn status_in(conn: &Connection) -> Result<ModelStatus, StoreError> {
    let now_ms = floor_ms(now_since_epoch());
    type AppRow = (
        String,
        String,
        String,
        Option<i64>,
        Option<String>,
        Option<i64>,
        Option<i64>,
    );
    let apps: Vec<AppRow> = conn
        .prepare_cached(
            "SELECT a.name, a.charm, a.status, p.revision, l.holder, l.term, l.expiry_ms
             FROM applications a
             LEFT JOIN pod_specs p ON p.app = a.name
             LEFT JOIN leases l ON l.app = a.name
             ORDER BY a.name",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect()
        })
        .db()?;
    let mut status = ModelStatus::default();
    for (name, charm, app_status, revision, holder, term, expiry_ms) in apps {
        let lease = match (holder, term, expiry_ms) {
            (Some(holder), Some(term), Some(expiry_ms)) if expiry_ms > now_ms => {
                Some((holder, to_u64(term)))
            }
            _ => None,
        };
        type UnitRow = (String, String, String, Option<String>);
        let units: Vec<UnitRow> = conn
            .prepare_cached(
                "SELECT name, status, workload_version, hook_error FROM units WHERE app = ?1 ORDER BY number",
            )
            .and_then(|mut s| s.query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect())
            .db()?;
        for (unit, unit_status, workload_version, hook_error) in units {
            status.units.push(UnitStatusRow {
                leader: lease.as_ref().is_some_and(|(h, _)| *h == unit),
                status: match hook_error {
                    Some(e) => Status::new(StatusKind::Error, e),
                    None => decode(&unit_status, || format!("status of {unit}"))?,
                },
                name: unit,
                workload_version,
            });
        }
        status.applications.push(AppStatusRow {
            status: decode(&app_status, || format!("status of {name}"))?,
            name,
            charm,
            leader: lease.as_ref().map(|(h, _)| h.clone()),
            term: lease.map(|(_, t)| t),
            pod_spec_revision: revision.map(to_u64),
        });
    }
    Ok(status)
}

impl StateStore for SqliteStore {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn add_application<'a>(
        &'a self,
        app: ApplicationRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .db()?;
            if app_exists(&tx, &app.name)? {
                return Err(StoreError::AlreadyExists(format!(
                    "application {}",
                    app.name
                )));
            }
            tx.execute(
                "INSERT INTO applications (name, charm, metadata, config, status, next_unit)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0)",
                rusqlite::params![
                    app.name,
                    app.charm,
                    encode(&app.metadata),
                    encode(&app.config),
                    encode(&Status::default())
                ],
            )
            .db()?;
            tx.commit().db()
        })
    }

    fn application<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ApplicationRecord, StoreError>> {
        Box::pin(async move {
            let conn = self.lock();
            application_record(&conn, name)?.ok_or_else(|| not_found(format!("application {name}")))
        })
    }

    fn applications(&self) -> BoxFuture<'_, Result<Vec<ApplicationRecord>, StoreError>> {
        Box::pin(async move {
            let conn = self.lock();
            let rows: Vec<(String, String, String, String)> = conn
                .prepare_cached(
                    "SELECT name, charm, metadata, config FROM applications ORDER BY name",
                )
                .and_then(|mut s| {
                    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                        .collect()
                })
                .db()?;
            rows.into_iter()
                .map(|(name, charm, metadata, config)| {
                    app_from_row(name, charm, &metadata, &config)
                })
                .collect()
        })
    }

    fn add_unit<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .db()?;
            let number: i64 = tx
                .query_row(
                    "SELECT next_unit FROM applications WHERE name = ?1",
                    [app],
                    |r| r.get(0),
                )
                .optional()
                .db()?
                .ok_or_else(|| not_found(format!("application {app}")))?;
            let name = format!("{app}/{number}");
            tx.execute(
                "INSERT INTO units (name, app, number, status, workload_version, hook_error)
                 VALUES (?1, ?2, ?3, ?4, '', NULL)",
                rusqlite::params![name, app, number, encode(&Status::default())],
            )
            .db()?;
            tx.execute(
                "UPDATE applications SET next_unit = ?2 WHERE name = ?1",
                rusqlite::params![app, number + 1],
            )
            .db()?;
            enqueue_in(
                &tx,
                routing::deploy_hooks().map(|hook| (name.clone(), hook)),
            )?;
            tx.commit().db()?;
            Ok(name)
        })
    }

    fn units<'a>(&'a self, app: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .db()?;
            if !app_exists(&tx, app)? {
                return Err(not_found(format!("application {app}")));
            }
            unit_names(&tx, app)
        })
    }

    fn add_relation<'a>(
        &'a self,
        interface: &'a str,
        endpoints: Vec<RelationEndpoint>,
    ) -> BoxFuture<'a, Result<(RelationRecord, Vec<QueuedHook>), StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .db()?;
            for e in &endpoints {
                if !app_exists(&tx, &e.app)? {
                    return Err(not_found(format!("application {}", e.app)));
                }
            }
            let first = endpoints.first().map_or("", |e| e.app.as_str());
            if let Some(existing) = relations_of(&tx, first)?
                .into_iter()
                .find(|r| same_endpoints(&r.endpoints, &endpoints))
            {
                return Err(StoreError::AlreadyExists(format!(
                    "relation {}",
                    existing.id
                )));
            }
            tx.execute(
                "INSERT INTO relations (interface, endpoints) VALUES (?1, ?2)",
                [interface, encode(&endpoints).as_str()],
            )
            .db()?;
            let record = relation_record(
                tx.last_insert_rowid(),
                interface.to_string(),
                &encode(&endpoints),
            )?;
            for e in &endpoints {
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO relation_apps (app, relation) VALUES (?1, ?2)",
                )
                .and_then(|mut s| s.execute(rusqlite::params![e.app, record.id]))
                .db()?;
            }
            let hooks = with_units_of(&tx, |units_of| routing::relation_hooks(&record, units_of))?;
            let queued = enqueue_in(&tx, hooks)?;
            tx.commit().db()?;
            Ok((record, queued))
        })
    }

    fn enqueue<'a>(
        &'a self,
        hooks: Vec<(String, Hook)>,
    ) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .db()?;
            let queued = enqueue_in(&tx, hooks)?;
            tx.commit().db()?;
            Ok(queued)
        })
    }

    fn queued<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<Vec<QueuedHook>, StoreError>> {
        Box::pin(async move {
            let conn = self.lock();
            let tx = HookTx::read(&conn).db()?;
            if !unit_exists(&tx, unit)? {
                return Err(not_found(format!("unit {unit}")));
            }
            queue_of(&tx, unit)
        })
    }

    fn relations(&self) -> BoxFuture<'_, Result<Vec<RelationRecord>, StoreError>> {
        Box::pin(async move { read_relations(&self.lock()) })
    }

    fn snapshot<'a>(&'a self, unit: &'a str) -> BoxFuture<'a, Result<UnitSnapshot, StoreError>> {
        Box::pin(async move {
            let conn = self.lock();
            // One read transaction: the hook sees one instant of the model.
            let tx = HookTx::read(&conn).db()?;
            snapshot_in(&tx, &self.configs, &self.model, unit)
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
            let conn = self.lock();
            // IMMEDIATE: the write lock is held from the fence check to the commit, across
            // every process sharing the file. An error returns before `commit` and dropping
            // the transaction rolls back whatever was written.
            let tx = HookTx::write(&conn).db()?;
            let committed = commit_in(&tx, &self.specs, unit, hook, changes, fence)?;
            tx.commit().db()?;
            Ok(committed)
        })
    }

    fn set_hook_error<'a>(
        &'a self,
        unit: &'a str,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let conn = self.lock();
            let rows = conn
                .prepare_cached("UPDATE units SET hook_error = ?2 WHERE name = ?1")
                .and_then(|mut s| s.execute(rusqlite::params![unit, error]))
                .db()?;
            if rows == 0 {
                return Err(not_found(format!("unit {unit}")));
            }
            Ok(())
        })
    }

    fn pod_spec<'a>(
        &'a self,
        app: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodSpecRecord>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .db()?;
            if !app_exists(&tx, app)? {
                return Err(not_found(format!("application {app}")));
            }
            let row: Option<(i64, String, Option<String>)> = tx
                .prepare_cached(
                    "SELECT revision, spec, k8s_resources FROM pod_specs WHERE app = ?1",
                )
                .and_then(|mut s| {
                    s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .db()?;
            row.map(|(revision, spec, resources)| pod_spec_record(app, revision, &spec, resources))
                .transpose()
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<ModelStatus, StoreError>> {
        Box::pin(async move {
            let mut conn = self.lock();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .db()?;
            status_in(&tx)
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
            for unit in ["web/0", "db/0", "web/0", "db/0", "web/0"] {
                let snapshot = store.snapshot(unit).await.unwrap();
                assert_eq!(snapshot.relations.len(), 1, "{unit} sees the relation");
            }
        });
        let conn = store.lock();
        for sql in [RELATIONS_OF, UNIT_NAMES] {
            let stmt = conn.prepare_cached(sql).unwrap();
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
