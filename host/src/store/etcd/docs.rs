//! The documents the model is kept in: what each key holds, as JSON.

use super::*;

/// An application, as stored. Its status and the data its leader writes are separate keys,
/// so a leader's commit does not conflict with a unit being added.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct AppDoc {
    pub(super) record: ApplicationRecord,
    pub(super) next_unit: u32,
    pub(super) units: Vec<String>,
    /// Being removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) dying: bool,
    /// Its units being removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) dying_units: Vec<String>,
}

/// A queued hook: as a step reads it from its key, and as format 1 kept it in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct QueueEntry {
    pub(super) seq: u64,
    pub(super) hook: Hook,
}

/// The hook queued at `key` (`hooks/<unit>/<seq>`), holding `value`.
pub(super) fn queue_entry(key: &str, value: &[u8]) -> Result<QueueEntry, StoreError> {
    let seq = key
        .rsplit_once('/')
        .and_then(|(_, seq)| seq.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("etcd key {key}: not a queued hook's key")))?;
    Ok(QueueEntry {
        seq,
        hook: decode_value(key, value)?,
    })
}

/// An application's document as decoded from one version of its key.
#[derive(Debug)]
pub(super) struct AppDocRead {
    /// The version of the key it was decoded from: etcd's revisions of its last change and
    /// of its creation, and the value's length.
    pub(super) version: (i64, i64, usize),
    pub(super) doc: AppDoc,
    /// Its units not being removed.
    pub(super) live: UnitNames,
}

impl AppDocRead {
    pub(super) fn new(version: (i64, i64, usize), doc: AppDoc) -> Self {
        let live = charm_model::tx::live_units_of(doc.units.clone(), &doc.dying_units);
        AppDocRead { version, doc, live }
    }
}

/// A hook an outbox holds for a unit's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct OutboxEntry {
    pub(super) unit: String,
    pub(super) seq: u64,
    pub(super) hook: Hook,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LeaseDoc {
    pub(super) holder: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct MetaDoc {
    pub(super) program: String,
    pub(super) format: u32,
    pub(super) model: String,
}

pub(super) fn decode_value<T: DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt(format!("etcd key {key}: {e}")))
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("store documents serialize")
}

/// What `modules/<hash>` holds: the module's chunks are all written.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ModuleManifest {
    /// Its size in bytes.
    pub(super) size: usize,
    /// How many chunks hold it.
    pub(super) chunks: usize,
}
