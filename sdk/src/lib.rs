//! Write Juju charms in Rust and compile them to WebAssembly components.
//!
//! A charm is a type implementing [`Charm`]: it declares its [`Metadata`] once and handles
//! each hook's [`Event`] with a [`Model`], the unit's view of the Juju model, shaped like
//! Python ops' `Model`. [`export_charm!`] turns it into a component for `charm-host`.
//!
//! ```no_run
//! use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
//!
//! struct Hello;
//!
//! impl Charm for Hello {
//!     fn metadata() -> Metadata {
//!         Metadata::new("hello").summary("Says hello")
//!     }
//!
//!     fn handle(model: &Model, event: Event) -> HookResult {
//!         if let Event::Start = event {
//!             model.unit().set_status(Status::active("hello"))?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! charm_sdk::export_charm!(Hello);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`; the `.wasm` file in
//! `target/wasm32-wasip2/release/` is the charm.
//!
//! Everything a hook writes (relation data, leader data, pod spec, status, stored state) is
//! buffered by the host and applied together when the hook returns `Ok`; an `Err` or a panic
//! applies nothing. [`Model::is_leader`] gives one answer for the whole hook, and a hook that
//! was told it leads is never refused a leader-only write for leadership.
//!
//! Every bag is read and written through a shared reference: a relation's unit and
//! application bags ([`DataBag`]), the leader settings ([`LeaderData`]) and the unit's
//! stored state ([`StoredState`]) all take `&self` in `get`, `set` and `remove`. A bag needs
//! no `mut` binding, and a helper takes it as `&DataBag`.
//!
//! ```
//! use charm_sdk::testing::{Context, Relation, State};
//! use charm_sdk::{Charm, DataBag, Event, HookResult, Metadata, Model};
//!
//! /// Writes `value` under `key` unless it is there already.
//! fn publish(bag: &DataBag, key: &str, value: &str) -> charm_sdk::Result<()> {
//!     if bag.get(key) == Some(value) { Ok(()) } else { bag.set(key, value) }
//! }
//!
//! struct Publisher;
//! impl Charm for Publisher {
//!     fn metadata() -> Metadata { Metadata::new("publisher").requires("db", "pgsql") }
//!     fn handle(model: &Model, _: Event) -> HookResult {
//!         let bag = model.relation("db")?.expect("related").local_unit_data()?;
//!         publish(&bag, "address", "10.0.0.7")?;
//!         let leader = model.leader_data();
//!         leader.set("address", "10.0.0.7")?;
//!         let stored = model.stored();
//!         stored.set("published", &true)?;
//!         Ok(())
//!     }
//! }
//! let state = State::default().leader(true).relation(Relation::new(1, "db", "postgresql"));
//! let out = Context::<Publisher>::new().run(Event::Start, state);
//! assert!(out.committed(), "{:?}", out.outcome);
//! assert_eq!(out.state.relations[0].local_unit_data["address"], "10.0.0.7");
//! assert_eq!(out.state.leader_data["address"], "10.0.0.7");
//! assert_eq!(out.state.stored["published"], "true");
//! ```

#![deny(missing_docs)]

pub mod arena;
mod backend;
mod config;
mod custom;
mod error;
mod event;
pub mod log;
pub mod mem;
mod metadata;
mod model;
mod network;
pub mod pod;
pub mod random;
mod relation;
mod status;
#[cfg(not(target_family = "wasm"))]
pub mod testing;
mod units;

/// In a charm's instance, the hook arena serves allocations (see [`arena`]).
#[cfg(all(target_family = "wasm", feature = "hook-arena"))]
#[global_allocator]
static HOOK_ARENA: arena::HookArena<{ arena::ARENA_BYTES }> = arena::HookArena::new();

#[doc(hidden)]
pub mod wit {
    //! The generated bindings. Charm code uses the typed API instead.
    #![allow(missing_docs, clippy::too_many_arguments)]
    wit_bindgen::generate!({
        path: "../wit/0.2.4",
        world: "juju:charm/charm@0.2.4",
        pub_export_macro: true,
        default_bindings_module: "charm_sdk::wit",
        generate_all,
    });
}

#[doc(hidden)]
pub use wit_bindgen;

pub use config::{Config, ConfigValue, FromConfigValue};
pub use custom::{CustomEvent, Emit};
pub use error::{Error, HookError, HookResult, Result};
pub use event::{ActionEvent, Event, RelationEvent};
pub use metadata::{
    ActionMeta, ActionParam, ConfigOption, Metadata, OptionType, RelationMeta, RelationRole,
};
pub use model::{Application, LeaderData, Model, StoredState, Unit};
pub use network::Network;
pub use pod::{Container, ContainerPort, K8sResources, PodSpec};
pub use relation::{DataBag, Relation};
pub use status::Status;
pub use units::{RemoteUnits, UnitsIter};

/// A charm: its metadata and its hook handler.
///
/// See the crate documentation for a complete charm.
///
/// ```
/// use charm_sdk::testing::{Context, State};
/// use charm_sdk::{Charm, Event, HookResult, Metadata, Model, Status};
///
/// struct Idle;
/// impl Charm for Idle {
///     fn metadata() -> Metadata { Metadata::new("idle") }
///     fn handle(model: &Model, _: Event) -> HookResult {
///         model.unit().set_status(Status::active("idle"))?;
///         Ok(())
///     }
/// }
/// let out = Context::<Idle>::new().run(Event::UpdateStatus, State::default());
/// assert_eq!(out.state.unit_status, Status::active("idle"));
/// ```
pub trait Charm {
    /// What the charm declares: name, endpoints, config options, actions. Read by
    /// `charm-host inspect` and checked by the host when a bundle is deployed.
    fn metadata() -> Metadata;

    /// Handles one hook's event, and each [`Event::Custom`] its libraries emitted. Return
    /// `Err` to fail the hook: nothing it wrote is applied and the host retries it later.
    fn handle(model: &Model, event: Event) -> HookResult;

    /// Lets the charm's libraries see the hook's event first, as ops' `framework.observe`
    /// does for a library created in the charm's `__init__`. What they emit with
    /// [`Model::emit`] is handled, in order, before the hook's event itself; all of it in
    /// this hook, under the same leadership answer and in the same commit. The default
    /// observes nothing.
    ///
    /// An event re-run because the charm deferred it is not observed again: the library has
    /// already seen it, and its own events were deferred on their own if need be.
    ///
    /// ```
    /// use charm_sdk::testing::{Context, State};
    /// use charm_sdk::{Charm, Emit, Event, HookResult, Metadata, Model, Status};
    ///
    /// /// A library: tells the charm when the unit has been installed.
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Installed;
    /// impl Emit for Installed { fn name(&self) -> &'static str { "installed" } }
    ///
    /// struct Watched;
    /// impl Charm for Watched {
    ///     fn metadata() -> Metadata { Metadata::new("watched") }
    ///     fn observe(model: &Model, event: &Event) -> HookResult {
    ///         if *event == Event::Install {
    ///             model.emit("lib:main", &Installed)?;
    ///         }
    ///         Ok(())
    ///     }
    ///     fn handle(model: &Model, event: Event) -> HookResult {
    ///         if let Event::Custom(ev) = event {
    ///             if let Some(Installed) = ev.decode("lib:main").transpose()? {
    ///                 model.unit().set_status(Status::active("installed"))?;
    ///             }
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let out = Context::<Watched>::new().run(Event::Install, State::default());
    /// assert_eq!(out.state.unit_status, Status::active("installed"));
    /// assert_eq!(out.emitted[0].name, "installed");
    /// ```
    fn observe(model: &Model, event: &Event) -> HookResult {
        let _ = (model, event);
        Ok(())
    }
}

/// Exports a [`Charm`] as the component's entry points. Use it once, at the crate root.
///
/// ```no_run
/// # use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
/// struct Noop;
/// impl Charm for Noop {
///     fn metadata() -> Metadata { Metadata::new("noop") }
///     fn handle(_: &Model, _: Event) -> HookResult { Ok(()) }
/// }
/// charm_sdk::export_charm!(Noop);
/// # fn main() {}
/// ```
///
/// The type must implement [`Charm`]; anything else is refused at compile time, pointing at
/// the type given:
///
/// ```compile_fail
/// struct NotACharm;
/// charm_sdk::export_charm!(NotACharm); // error: the trait `Charm` is not implemented
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_charm {
    ($charm:ty) => {
        // Checked first and alone, so a type that is not a charm gets one error about
        // `Charm`, at the type the author wrote, rather than errors inside the expansion.
        const _: () = {
            const fn __assert_charm<C: $crate::Charm>() {}
            __assert_charm::<$charm>();
        };

        // The component's entry points exist only in wasm: natively the testing harness
        // calls the charm directly, and several charms can then link into one test.
        #[cfg(target_family = "wasm")]
        const _: () = {
            struct __CharmExport;

            impl $crate::wit::Guest for __CharmExport {
                fn metadata() -> $crate::wit::juju::charm::types::Metadata {
                    $crate::__private::metadata::<$charm>()
                }

                fn handle_hook(
                    context: $crate::wit::juju::charm::types::Context,
                    event: $crate::wit::juju::charm::types::Event,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::handle_hook::<$charm>(context, event)
                }
            }

    $crate::wit::export!(__CharmExport with_types_in $crate::wit);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    //! What `export_charm!` expands to calls; not part of the API.
    use super::*;

    pub fn metadata<C: Charm>() -> wit::juju::charm::types::Metadata {
        C::metadata().into_wit()
    }

    pub fn handle_hook<C: Charm>(
        context: wit::juju::charm::types::Context,
        event: wit::juju::charm::types::Event,
    ) -> Result<(), String> {
        #[cfg(target_family = "wasm")]
        backend::begin_hook(context.leader);
        let model = Model::new(context.model, context.unit, context.app);
        dispatch::<C>(&model, Event::from_wit(event)).map_err(|e| e.to_string())
    }

    /// Where deferred events are kept, in the unit's stored state.
    pub const DEFERRED_KEY: &str = "charm-sdk.deferred";

    /// How many custom events one hook may emit: a library that emits in reply to its own
    /// events forever fails the hook instead of running until the deadline.
    pub const MAX_CUSTOM_EVENTS: usize = 1024;

    /// Runs the events deferred by earlier hooks, then `event`, as ops does; keeps those
    /// that defer again. The charm's libraries observe `event` first, and what they emit
    /// is handled before it. The list is written only when it changes, so a charm that
    /// never defers writes nothing for it.
    pub(crate) fn dispatch<C: Charm>(model: &Model, event: Event) -> HookResult {
        let deferred: Vec<Event> = model.stored().get(DEFERRED_KEY)?.unwrap_or_default();
        let mut still = Vec::new();
        for earlier in &deferred {
            handle::<C>(model, earlier.clone(), &mut still)?;
            drain::<C>(model, &mut still)?;
        }
        if !matches!(event, Event::Custom(_)) {
            C::observe(model, &event)?;
            drain::<C>(model, &mut still)?;
        }
        handle::<C>(model, event, &mut still)?;
        drain::<C>(model, &mut still)?;
        if still != deferred {
            if still.is_empty() {
                model.stored().remove(DEFERRED_KEY);
            } else {
                model.stored().set(DEFERRED_KEY, &still)?;
            }
        }
        Ok(())
    }

    /// Handles one event, keeping it in `still` if the charm defers it.
    fn handle<C: Charm>(model: &Model, event: Event, still: &mut Vec<Event>) -> HookResult {
        // As in Juju, an action is answered now or never: it is not deferred.
        let deferrable = !matches!(event, Event::Action(_));
        C::handle(model, event.clone())?;
        if model.take_deferred() && deferrable {
            still.push(event);
        }
        Ok(())
    }

    /// Handles what the libraries emitted, in order, including what those handlers emit.
    fn drain<C: Charm>(model: &Model, still: &mut Vec<Event>) -> HookResult {
        while let Some(custom) = model.next_emitted() {
            if model.emitted_count() > MAX_CUSTOM_EVENTS {
                return Err(crate::HookError::msg(format!(
                    "more than {MAX_CUSTOM_EVENTS} custom events in one hook; the last was \
                     {:?} from {:?}",
                    custom.name, custom.source
                )));
            }
            handle::<C>(model, Event::Custom(custom), still)?;
        }
        Ok(())
    }
}
