//! Custom events: what a library emits for the charm, between the hook's event and the
//! charm's handler.
//!
//! A library (an interface crate such as `charm-pgsql`) observes the hook's event in
//! [`Charm::observe`](crate::Charm::observe), works out what it means for its endpoint and
//! emits its own typed events with [`Model::emit`](crate::Model::emit). The charm handles
//! them in [`Charm::handle`](crate::Charm::handle) as [`Event::Custom`](crate::Event::Custom),
//! in the same hook: the same pinned leadership, the same snapshot, and the same buffered
//! commit, so a hook whose custom event handler fails applies nothing at all.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A library's typed event. Implement it on the library's event type (usually an enum) to
/// emit it with [`Model::emit`](crate::Model::emit) and read it back with
/// [`CustomEvent::decode`].
///
/// ```
/// use charm_sdk::Emit;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// enum CacheEvent { Ready { address: String }, Gone }
///
/// impl Emit for CacheEvent {
///     fn name(&self) -> &'static str {
///         match self { CacheEvent::Ready { .. } => "ready", CacheEvent::Gone => "gone" }
///     }
/// }
/// assert_eq!(CacheEvent::Gone.name(), "gone");
/// ```
pub trait Emit: Serialize + DeserializeOwned {
    /// The event's name in logs and in [`CustomEvent::name`], such as `master-changed`.
    fn name(&self) -> &'static str;
}

/// An event a library emitted during this hook, as the charm receives it in
/// [`Event::Custom`](crate::Event::Custom).
///
/// It carries the library's typed event serialised, so that it can be deferred like any
/// other event; [`CustomEvent::decode`] gives the typed event back.
///
/// ```
/// use charm_sdk::{CustomEvent, Emit};
///
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// struct Rotated { generation: u32 }
/// impl Emit for Rotated { fn name(&self) -> &'static str { "rotated" } }
///
/// let ev = CustomEvent::new("secrets:tls", &Rotated { generation: 2 }).unwrap();
/// assert_eq!(ev.name, "rotated");
/// assert_eq!(ev.decode::<Rotated>("secrets:tls").unwrap().unwrap(), Rotated { generation: 2 });
/// assert!(ev.decode::<Rotated>("secrets:other").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomEvent {
    /// Who emitted it: the library and the endpoint it serves, such as `pgsql:db`. Two
    /// instances of one library (on two endpoints) have two sources.
    pub source: String,
    /// The event's name, from [`Emit::name`].
    pub name: String,
    /// The typed event, serialised.
    pub data: serde_json::Value,
}

impl CustomEvent {
    /// Wraps a typed event from `source`.
    ///
    /// ```
    /// # use charm_sdk::{CustomEvent, Emit};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Ping;
    /// # impl Emit for Ping { fn name(&self) -> &'static str { "ping" } }
    /// let ev = CustomEvent::new("echo:peer", &Ping).unwrap();
    /// assert_eq!(ev.source, "echo:peer");
    /// ```
    pub fn new<E: Emit>(source: &str, event: &E) -> Result<Self> {
        let data = serde_json::to_value(event).map_err(|e| {
            Error::InvalidArgument(format!(
                "custom event {:?} from {source:?} cannot be serialised: {e}",
                event.name()
            ))
        })?;
        Ok(CustomEvent {
            source: source.to_string(),
            name: event.name().to_string(),
            data,
        })
    }

    /// The typed event, when this event came from `source`; `None` when it came from
    /// another library or another instance of it.
    ///
    /// An event that came from `source` but does not decode as `E` (a deferred event stored
    /// by an older version of the library) is an error naming it.
    ///
    /// ```
    /// # use charm_sdk::{CustomEvent, Emit};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// # struct Ping;
    /// # impl Emit for Ping { fn name(&self) -> &'static str { "ping" } }
    /// #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// struct Pong { at: u64 }
    /// # impl Emit for Pong { fn name(&self) -> &'static str { "pong" } }
    /// let ev = CustomEvent::new("echo:peer", &Ping).unwrap();
    /// assert!(ev.decode::<Pong>("echo:peer").unwrap().is_err());
    /// ```
    pub fn decode<E: Emit>(&self, source: &str) -> Option<Result<E>> {
        if self.source != source {
            return None;
        }
        Some(serde_json::from_value(self.data.clone()).map_err(|e| {
            Error::InvalidArgument(format!(
                "custom event {:?} from {source:?} does not decode: {e}",
                self.name
            ))
        }))
    }
}
