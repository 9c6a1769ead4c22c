//! The model's vocabulary: the records of [`charm_model`], the model core that every store
//! and the SDK's testing harness share.

pub use charm_model::records::*;
