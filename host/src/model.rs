//! The model's vocabulary: the records of [`charm_model`], the model core that every store
//! and the SDK's testing harness share.

/// A unit's network addresses ([`charm_model::network`]).
pub use charm_model::network;
pub use charm_model::records::*;
