//! The generated bindings of the `charm` world: the only `bindgen!` in the host.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "juju:charm/charm",
});

pub use juju::charm::types;
