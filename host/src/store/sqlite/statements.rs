//! The store's connection with the statements compiled on it, found by the address of their
//! SQL text.
//!
//! rusqlite's statement cache (`prepare_cached`) hashes a statement's whole text twice at
//! each use, to take it out of its LRU list and to put it back, and allocates a key for it:
//! 15.8k instructions of the 326k a hook on SQLite took (callgrind, `full_hook/sqlite`, 19
//! statements a hook). Every statement the store runs is a `&'static str`, so its address
//! and length name it: a lookup is a multiply and a probe.
//!
//! A text named by a `const` may be placed at several addresses (one per use, as the
//! compiler sees fit): each is then compiled once, which is still right, but not once in
//! all. Texts used from several places are therefore `static`, which has one address.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};

use rusqlite::{Connection, PrepFlags, Statement};

/// A statement's name: the address and length of its text.
type Key = (usize, usize);

/// A connection and the statements compiled on it. Derefs to the connection, shared only:
/// the compiled statements hold shared references to it.
pub(super) struct Conn {
    /// Declared before `conn`, so dropped (finalized) first, while the connection is open.
    /// A statement in use is out of the map (in its [`Cached`]).
    statements: RefCell<HashMap<Key, Statement<'static>, BuildHasherDefault<AddressHasher>>>,
    /// Boxed: the statements refer to the connection where it is, and a `Conn` moves.
    conn: Box<Connection>,
}

// SAFETY: `Statement` is not `Send` because it holds a raw SQLite handle and a reference to
// its `Connection` (which is `Send` but not `Sync`). Every statement here was compiled on,
// and refers to, the connection boxed in the same `Conn`: they move between threads together,
// and the store reaches a `Conn` only through its mutex, one thread at a time.
unsafe impl Send for Conn {}

impl Conn {
    pub(super) fn new(conn: Connection) -> Self {
        Conn {
            statements: RefCell::default(),
            conn: Box::new(conn),
        }
    }

    /// The statement for `sql`, compiled on its first use and kept for the next one, as
    /// `Connection::prepare_cached` does.
    pub(super) fn cached(&self, sql: &'static str) -> rusqlite::Result<Cached<'_>> {
        let key = (sql.as_ptr() as usize, sql.len());
        let stmt = match self.statements.borrow_mut().remove(&key) {
            Some(stmt) => stmt,
            // Taken out when it was kept, or in use further up (then this one replaces it
            // when put back).
            None => self
                .conn
                .prepare_with_flags(sql, PrepFlags::SQLITE_PREPARE_PERSISTENT)?,
        };
        Ok(Cached {
            db: self,
            key,
            stmt: Some(stmt),
        })
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("conn", &self.conn)
            .field("statements", &self.statements.borrow().len())
            .finish()
    }
}

impl Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// A kept statement in use: put back for the next use when dropped. rusqlite resets a
/// statement at the end of each `execute` and when its rows are dropped, and every use binds
/// all of its parameters again.
pub(super) struct Cached<'db> {
    db: &'db Conn,
    key: Key,
    /// `Some` until dropped.
    stmt: Option<Statement<'db>>,
}

impl<'db> Deref for Cached<'db> {
    type Target = Statement<'db>;

    fn deref(&self) -> &Statement<'db> {
        self.stmt.as_ref().expect("a statement in use")
    }
}

impl DerefMut for Cached<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.stmt.as_mut().expect("a statement in use")
    }
}

impl Drop for Cached<'_> {
    fn drop(&mut self) {
        if let Some(stmt) = self.stmt.take() {
            // SAFETY: the statement was compiled on `self.db.conn` (the store never swaps the
            // statements of two `Cached`, which could come from two stores), which is boxed (its
            // address does not change) and outlives every statement in the map (they are
            // finalized first when the `Conn` drops). Widening its lifetime to `'static` only
            // lets the map hold it; it is handed out again only as `Statement<'db>`, borrowed
            // from the `Conn`.
            let stmt = unsafe { std::mem::transmute::<Statement<'_>, Statement<'static>>(stmt) };
            self.db.statements.borrow_mut().insert(self.key, stmt);
        }
    }
}

/// Hashes a [`Key`]: an address and a length, mixed by one multiply each (Fibonacci
/// hashing); the high bits, which the table uses, depend on every bit of both.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    const COUNT: &str = "SELECT count(*) FROM t WHERE x = ?1";
    const INSERT: &str = "INSERT INTO t (x) VALUES (?1)";

    fn conn() -> Conn {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        Conn::new(conn)
    }

    #[test]
    fn a_statement_is_compiled_once_and_runs_again_with_new_parameters() {
        let db = conn();
        for x in [1, 2, 2] {
            db.cached(INSERT).unwrap().execute([x]).unwrap();
        }
        let count = |x: i64| -> i64 {
            db.cached(COUNT)
                .unwrap()
                .query_row([x], |r| r.get(0))
                .unwrap()
        };
        assert_eq!((count(1), count(2), count(3)), (1, 2, 0));
        // Each statement ran on one compilation: three inserts, three counts.
        let insert = db.cached(INSERT).unwrap();
        assert_eq!(insert.get_status(StatementStatus::Run), 3);
        assert_eq!(
            db.statements.borrow().len(),
            1,
            "COUNT is kept, INSERT in use"
        );
        drop(insert);
        assert_eq!(db.statements.borrow().len(), 2);
    }

    #[test]
    fn the_same_statement_in_use_twice_is_compiled_twice_and_kept_once() {
        let db = conn();
        db.cached(INSERT).unwrap().execute([7]).unwrap();
        let mut outer = db.cached(COUNT).unwrap();
        let mut rows = outer.query([7]).unwrap();
        let n: i64 = rows.next().unwrap().unwrap().get(0).unwrap();
        // While the outer one is stepping, the same text runs on its own compilation.
        let inner: i64 = db
            .cached(COUNT)
            .unwrap()
            .query_row([7], |r| r.get(0))
            .unwrap();
        assert_eq!((n, inner), (1, 1));
        drop(rows);
        drop(outer);
        assert_eq!(db.statements.borrow().len(), 2);
    }

    #[test]
    fn texts_at_one_address_with_other_lengths_are_other_statements() {
        let db = conn();
        let both: &'static str = "SELECT 1; SELECT 2";
        let first: &'static str = &both[..8];
        let one: i64 = db
            .cached(first)
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        assert_eq!(one, 1);
        assert!(
            db.cached(both).is_err(),
            "two statements in one text are refused"
        );
        assert_eq!(db.statements.borrow().len(), 1);
    }
}
