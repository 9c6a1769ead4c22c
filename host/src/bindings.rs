//! The generated bindings of the `charm` world, one module per contract version this host
//! runs: the current version at the root (the host's own code speaks it), and each older
//! frozen version in a module of its own, whose imports delegate to the current ones (see
//! `imports::v0_1`), as Spin keeps its older `fermyon:spin` worlds. A version that only adds
//! to the one before it (0.2.1 to 0.2.0, and so on to 0.2.4) needs no module: the linker
//! gives a charm importing `@0.2.0` to `@0.2.3` the `@0.2.4` imports, as semver allows.

wasmtime::component::bindgen!({
    path: "../wit/0.2.4",
    world: "juju:charm/charm@0.2.4",
});

pub use juju::charm::types;

/// The frozen `juju:charm@0.1.0` contract, for charms built before 0.2.0.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "juju:charm/charm@0.1.0",
    });

    pub use juju::charm::types;
}
