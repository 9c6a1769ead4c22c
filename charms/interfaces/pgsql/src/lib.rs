//! The `pgsql` relation interface, for Rust charms: the PostgreSQL side ([`Provider`]) and
//! the client side ([`Requirer`]), both typed, with custom events.
//!
//! It speaks the interface as the PostgreSQL charm and ops' `pgsql` library do:
//!
//! | Bag | Key | Written by | Meaning |
//! |---|---|---|---|
//! | client app | `database`, `roles`, `extensions` | client leader | what the client asks for (roles and extensions comma-separated, sorted) |
//! | client units | the same three | every client unit | a mirror of the request, for providers that read unit bags |
//! | PostgreSQL app | `master` | PostgreSQL leader | the master's libpq connection string |
//! | PostgreSQL app | `standbys` | PostgreSQL leader | hot standbys' connection strings, one per line |
//! | PostgreSQL app | `database`, `roles`, `extensions` | PostgreSQL leader | the request echoed once it is applied: the client waits for it |
//! | PostgreSQL app | `user`, `password`, `host`, `port`, `allowed-units`, `version` | PostgreSQL leader | the connection details and the client units granted access |
//!
//! The client's leader also keeps a copy of its requests in leader data (key
//! `interface.pgsql`), because in Juju only the leader may read its own application bag:
//! the other units learn what was asked from there.
//!
//! Each side is a small value naming its endpoint, made in a `const`. The charm lets it
//! observe every hook in [`Charm::observe`](charm_sdk::Charm::observe) and handles what it
//! emits as [`Event::Custom`](charm_sdk::Event::Custom): the client gets
//! [`RequirerEvent::MasterChanged`] when the master's connection string changes, with the
//! string parsed, as the seed's Discourse got `master_changed` from ops' library. Data
//! from the other side that does not parse is an [`RequirerEvent::InvalidData`] (or
//! [`ProviderEvent::InvalidRequest`]) event, never a panic or a failed hook.
//!
//! ```
//! use charm_pgsql::{DatabaseRequest, Requirer, RequirerEvent};
//! use charm_sdk::testing::{Context, Relation, State};
//! use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
//!
//! const DB: Requirer = Requirer::new("db");
//!
//! struct Forum;
//! impl Charm for Forum {
//!     fn metadata() -> Metadata { Metadata::new("forum").requires("db", "pgsql") }
//!     fn observe(model: &Model, event: &Event) -> HookResult {
//!         DB.observe(model, event)
//!     }
//!     fn handle(model: &Model, event: Event) -> HookResult {
//!         let Event::Custom(custom) = event else { return Ok(()) };
//!         match DB.event(&custom).transpose()? {
//!             Some(RequirerEvent::DatabaseJoined { relation, .. }) if model.is_leader() => {
//!                 DB.request(model, relation, &DatabaseRequest::database("forum"))?;
//!             }
//!             Some(RequirerEvent::MasterChanged { master: Some(master), .. }) => {
//!                 let db = master.database().unwrap_or_default();
//!                 model.unit().set_status(Status::active(format!("using {db}")))?;
//!             }
//!             _ => {}
//!         }
//!         Ok(())
//!     }
//! }
//!
//! // PostgreSQL has applied the request (it echoes `database`) and published the master.
//! let db = Relation::new(1, "db", "postgresql").remote_app_data([
//!     ("database", "forum"),
//!     ("master", "host=pg-0 port=5432 dbname=forum user=juju_forum password=pw"),
//! ]);
//! let state = State::default().leader(true).relation(db).leader_data([(
//!     "interface.pgsql",
//!     r#"{"1":{"database":"forum"}}"#,
//! )]);
//! let rel = state.relation_by_id(1).unwrap().changed(None);
//! let out = Context::<Forum>::new().run(rel, state);
//! assert_eq!(out.state.unit_status, Status::active("using forum"));
//! ```

#![deny(missing_docs)]

mod connstr;
mod provider;
mod requirer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use connstr::{ConnectionString, ConnectionStringError};
pub use provider::{Credentials, Provider, ProviderEvent, Publication};
pub use requirer::{Database, Requirer, RequirerEvent};

/// Leader data key under which the client's leader keeps its requests, as ops' library does.
pub const LEADER_KEY: &str = "interface.pgsql";

/// What a client asks PostgreSQL for on one relation.
///
/// ```
/// use charm_pgsql::DatabaseRequest;
///
/// let req = DatabaseRequest::database("discourse").roles(["reader", "admin"]);
/// assert_eq!(req.database.as_deref(), Some("discourse"));
/// assert_eq!(req.roles, ["admin", "reader"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseRequest {
    /// The database to connect to, created if need be; `None` for the provider's default.
    pub database: Option<String>,
    /// Roles to grant the client's user, sorted.
    pub roles: Vec<String>,
    /// Extensions to install in the database, sorted.
    pub extensions: Vec<String>,
}

impl DatabaseRequest {
    /// A request for this database, with no roles or extensions.
    ///
    /// ```
    /// let req = charm_pgsql::DatabaseRequest::database("app");
    /// assert!(req.roles.is_empty());
    /// ```
    pub fn database(name: impl Into<String>) -> Self {
        DatabaseRequest {
            database: Some(name.into()),
            ..Default::default()
        }
    }

    /// The same request with these roles.
    ///
    /// ```
    /// let req = charm_pgsql::DatabaseRequest::default().roles(["b", "a"]);
    /// assert_eq!(req.roles, ["a", "b"]);
    /// ```
    pub fn roles<S: Into<String>>(mut self, roles: impl IntoIterator<Item = S>) -> Self {
        self.roles = sorted(roles);
        self
    }

    /// The same request with these extensions.
    ///
    /// ```
    /// let req = charm_pgsql::DatabaseRequest::default().extensions(["pg_trgm", "hstore"]);
    /// assert_eq!(req.extensions, ["hstore", "pg_trgm"]);
    /// ```
    pub fn extensions<S: Into<String>>(mut self, extensions: impl IntoIterator<Item = S>) -> Self {
        self.extensions = sorted(extensions);
        self
    }

    /// The request as relation data: `database`, `roles`, `extensions`, empty when unset.
    pub(crate) fn to_fields(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("database", self.database.clone().unwrap_or_default()),
            ("roles", self.roles.join(",")),
            ("extensions", self.extensions.join(",")),
        ])
    }

    /// Reads a request from relation data, checking each name. `owner` names the bag, for
    /// errors.
    pub(crate) fn from_fields(
        relation: u32,
        owner: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, InvalidData> {
        let invalid = |key: &str, reason: String| InvalidData {
            relation,
            owner: owner.to_string(),
            key: key.to_string(),
            reason,
        };
        let database = get("database").filter(|d| !d.is_empty());
        if let Some(name) = &database {
            check_name(name).map_err(|why| invalid("database", why))?;
        }
        let list = |key: &str| -> Result<Vec<String>, InvalidData> {
            let raw = get(key).unwrap_or_default();
            let names: Vec<String> = raw
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect();
            for name in &names {
                check_name(name).map_err(|why| invalid(key, why))?;
            }
            Ok(sorted(names))
        };
        Ok(DatabaseRequest {
            database,
            roles: list("roles")?,
            extensions: list("extensions")?,
        })
    }
}

/// PostgreSQL's limits on a name: at most 63 bytes, no NUL, no control characters.
fn check_name(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!("{name:?} is longer than PostgreSQL's 63 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{name:?} holds a control character"));
    }
    Ok(())
}

fn sorted<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut v: Vec<String> = items.into_iter().map(Into::into).collect();
    v.sort();
    v.dedup();
    v
}

/// Relation data from the other side that does not follow the interface: which relation,
/// whose bag, which key and why.
///
/// ```
/// let bad = charm_pgsql::InvalidData {
///     relation: 3,
///     owner: "postgresql".into(),
///     key: "master".into(),
///     reason: "the connection string is empty".into(),
/// };
/// assert_eq!(
///     bad.to_string(),
///     "relation 3: postgresql's \"master\" is malformed: the connection string is empty"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("relation {relation}: {owner}'s {key:?} is malformed: {reason}")]
pub struct InvalidData {
    /// The relation's id.
    pub relation: u32,
    /// The bag's owner: a unit or an application.
    pub owner: String,
    /// The key.
    pub key: String,
    /// What is wrong with its value.
    pub reason: String,
}

/// Writes `value` to a bag only when it differs, so that republishing the same thing makes
/// no change and wakes nobody; an empty value removes the key.
pub(crate) fn set_if_changed(
    bag: &charm_sdk::DataBag,
    key: &str,
    value: &str,
) -> charm_sdk::Result<()> {
    match (bag.get(key), value.is_empty()) {
        (None, true) => Ok(()),
        (Some(_), true) => bag.remove(key),
        (Some(old), false) if same(old, value) => Ok(()),
        _ => bag.set(key, value),
    }
}

/// Whether two strings are equal, compared eight bytes at a time. `==` calls the C
/// library's `memcmp`, which in WebAssembly looks at one byte per step: about 22
/// instructions a byte, 3 million for the 150 KiB `allowed-units` of 10,000 clients.
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (mut aw, mut bw) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("8 bytes"));
    (&mut aw).zip(&mut bw).all(|(x, y)| word(x) == word(y))
        && aw
            .remainder()
            .iter()
            .zip(bw.remainder())
            .all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn same_finds_a_difference_at_any_byte() {
        for len in 0..20 {
            let a = "x".repeat(len);
            assert!(same(&a, &a.clone()), "len {len}");
            assert!(!same(&a, &format!("{a}y")), "len {len} against one longer");
            for at in 0..len {
                let mut b = a.clone().into_bytes();
                b[at] = b'y';
                assert!(
                    !same(&a, std::str::from_utf8(&b).unwrap()),
                    "len {len}, at {at}"
                );
            }
        }
    }
}
