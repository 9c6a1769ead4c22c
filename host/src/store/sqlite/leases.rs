//! The lease store on SQLite: a lease is a row, its expiry wall-clock milliseconds.

use super::*;

pub(super) fn lease_err(e: StoreError) -> LeaseError {
    // Whatever went wrong, the claimant must not read it as a denial.
    LeaseError::Unavailable(match e {
        StoreError::Unavailable(message) => message,
        other => other.to_string(),
    })
}

pub(super) fn now_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

pub(super) fn floor_ms(t: Duration) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn ceil_ms(t: Duration) -> i64 {
    i64::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

#[derive(Debug)]
pub(super) struct LeaseRow {
    pub(super) holder: String,
    pub(super) term: u64,
    pub(super) expiry_ms: i64,
}

/// The lease on `app` that has not expired at `now_ms`.
pub(super) fn live_lease(
    conn: &Conn,
    app: &str,
    now_ms: i64,
) -> Result<Option<LeaseRow>, StoreError> {
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
