//! Strict validation of Juju pod spec version 3, from the model core
//! ([`charm_model::podspec`]): a charm hears about a bad field from `set_pod_spec` itself,
//! naming the field, rather than from Kubernetes later.

pub use charm_model::podspec::*;
