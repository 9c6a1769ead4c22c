//! Waking agents of other processes: a thread watches the file's `data_version` and wakes
//! the agents of units with hooks queued since, and the followers of leases released since.

use super::*;

/// How often the wake-up thread asks whether another connection committed: each check is one
/// `PRAGMA data_version`, a read of shared memory, no disk.
pub const WAKE_POLL: Duration = Duration::from_millis(2);

impl SqliteStore {
    /// Starts the thread that wakes agents when another connection queued hooks for their
    /// units (see the module doc); it ends with the store. Not for a store in memory, which
    /// no other connection shares.
    pub(super) fn start_wake_thread(self: &Arc<Self>) {
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
}

/// The wake-up thread's loop: while `store` lives, every [`WAKE_POLL`] it checks whether
/// another connection committed, and wakes the agents of the units with hooks queued since,
/// and the followers of leases released or taken anew since.
pub(super) fn wake_agents(path: &Path, store: &Weak<SqliteStore>) -> rusqlite::Result<()> {
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
pub(super) fn lease_terms(conn: &Connection) -> rusqlite::Result<HashMap<String, i64>> {
    conn.prepare_cached("SELECT app, term FROM leases")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}
