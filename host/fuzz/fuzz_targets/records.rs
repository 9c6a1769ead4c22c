//! Decoding the model's records as the stores keep them (JSON: etcd's values, SQLite's
//! JSON columns): any bytes get a verdict, never a panic; a record that decodes encodes to
//! the same record again, so nothing a store reads back changes by being written.
#![no_main]

use charm_model::{
    ApplicationRecord, CharmMetadata, ConfigValue, Hook, LogRecord, PodSpecRecord, QueuedHook,
    RelationEndpoint, RelationRecord, Status, UnitRecord,
};
use libfuzzer_sys::fuzz_target;
use serde::{Serialize, de::DeserializeOwned};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(record) = serde_json::from_slice::<T>(data) {
        let stored = serde_json::to_vec(&record).expect("a decoded record encodes");
        let again: T = serde_json::from_slice(&stored).unwrap_or_else(|e| {
            panic!(
                "{} written as {} does not read back: {e}",
                std::any::type_name::<T>(),
                String::from_utf8_lossy(&stored)
            )
        });
        assert_eq!(again, record, "{}", std::any::type_name::<T>());
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the record, as a store's key or column does.
    let Some((&kind, data)) = data.split_first() else {
        return;
    };
    match kind % 11 {
        0 => round_trip::<ApplicationRecord>(data),
        1 => round_trip::<UnitRecord>(data),
        2 => round_trip::<RelationRecord>(data),
        3 => round_trip::<Vec<RelationEndpoint>>(data),
        4 => round_trip::<Hook>(data),
        5 => round_trip::<QueuedHook>(data),
        6 => round_trip::<Status>(data),
        7 => round_trip::<CharmMetadata>(data),
        8 => round_trip::<std::collections::BTreeMap<String, ConfigValue>>(data),
        9 => round_trip::<PodSpecRecord>(data),
        _ => round_trip::<LogRecord>(data),
    }
});
