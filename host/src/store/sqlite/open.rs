//! Opening a store's file: the checks that refuse a file before anything is written to it,
//! the connection's settings, and the schema's migrations.

use super::*;

/// How long an operation waits for another process's write transaction before it fails as
/// unavailable. Commits hold the lock for well under a millisecond; this covers a checkpoint
/// or a slow disk, and stays far below lease durations so a renewal can still be retried.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema version this host writes: the number of migrations.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Migration `i` moves the schema from version `i` to `i + 1`. Append; never edit.
pub(super) const MIGRATIONS: &[&str] = &[
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
];

/// Version 1: the model, leases and terms.
pub(super) const SCHEMA_V1: &str = include_str!("schema/v1.sql");

/// Version 2: hook queues, `units.elected_term`, pod spec history.
pub(super) const SCHEMA_V2: &str = include_str!("schema/v2.sql");

/// Version 3: `relation_apps`, each application's relations.
pub(super) const SCHEMA_V3: &str = include_str!("schema/v3.sql");

/// Version 4: `dying` applications, units and relations; `unit_logs`.
pub(super) const SCHEMA_V4: &str = include_str!("schema/v4.sql");

/// Version 5: `actions`.
pub(super) const SCHEMA_V5: &str = include_str!("schema/v5.sql");

/// Version 6: `modules`, `applications.module`.
pub(super) const SCHEMA_V6: &str = include_str!("schema/v6.sql");

/// Version 7: `hook_queue_by_hook`, queued hooks by their text.
pub(super) const SCHEMA_V7: &str = include_str!("schema/v7.sql");

/// Version 8: generations of each application's units and of each application bag,
/// moved by triggers.
pub(super) const SCHEMA_V8: &str = include_str!("schema/v8.sql");

/// The first bytes of every SQLite database file.
pub(super) const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

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

    pub(super) fn open_file_read_only(path: &Path, model: &str) -> Result<Self, StoreError> {
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

    pub(super) fn open_file(path: &Path, model: &str) -> Result<Self, StoreError> {
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

    pub(super) fn prepare(mut conn: Connection, model: &str) -> Result<Self, StoreError> {
        configure(&conn)?;
        migrate(&mut conn)?;
        bind_model(&mut conn, model)?;
        Ok(Self::over(conn, model))
    }

    /// The store over `conn`, [`configure`]d.
    pub(super) fn over(conn: Connection, model: &str) -> Self {
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
}

/// Whether `path` holds data to check; an error if those bytes cannot be a SQLite database.
/// A missing or empty file is a new database.
pub(super) fn check_header(path: &Path) -> Result<bool, StoreError> {
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
pub(super) fn probe(path: &Path) -> Result<bool, StoreError> {
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
pub(super) fn read_version(conn: &Connection) -> rusqlite::Result<(i32, i64)> {
    let version: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
        [],
        |r| r.get(0),
    )?;
    Ok((version, tables))
}

pub(super) fn check_version(path: &Path, version: i32, tables: i64) -> Result<(), StoreError> {
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
pub(super) fn diagnosed(path: &Path, e: StoreError) -> StoreError {
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
pub(super) const EROFS: i32 = 30;

/// Linux's "no space left on device".
pub(super) const ENOSPC: i32 = 28;

/// Whether one more page beside `path` fails for want of space: the test SQLite would
/// have needed, without a statvfs binding. The probe file is removed.
pub(super) fn disk_is_full(path: &Path) -> bool {
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

pub(super) fn open_err(path: &Path, e: rusqlite::Error) -> StoreError {
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
pub(super) fn write_ahead_logging(conn: &Connection) -> Result<String, StoreError> {
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
pub(super) fn configure(conn: &Connection) -> Result<(), StoreError> {
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
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
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
pub(super) fn bind_model(conn: &mut Connection, model: &str) -> Result<(), StoreError> {
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
