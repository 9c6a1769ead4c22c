//! The SQLite store's decoding of its own rows: a model file whose rows were changed
//! behind the store's back (any text in any JSON or text column) gets a clear error on
//! the read that meets it, never a panic; and a store that reads it writes nothing.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use charm_host::store::{SqliteStore, StateStore};
use charm_model::{
    ApplicationRecord, CharmMetadata, ConfigOptionMeta, ConfigValue, EndpointMeta, OptionType,
    RelationRole,
};
use libfuzzer_sys::fuzz_target;

/// Each column a store decodes, and a row of it to change.
const COLUMNS: &[(&str, &str)] = &[
    ("applications", "metadata"),
    ("applications", "config"),
    ("applications", "status"),
    ("applications", "charm"),
    ("units", "status"),
    ("units", "hook_error"),
    ("units", "workload_version"),
    ("relations", "endpoints"),
    ("relations", "interface"),
    ("relation_unit_bags", "value"),
    ("relation_app_bags", "value"),
    ("leader_data", "value"),
    ("pod_specs", "spec"),
    ("pod_specs", "k8s_resources"),
    ("stored_state", "value"),
    ("hook_queue", "hook"),
    ("leases", "holder"),
];

fn dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("charm-host-fuzz-{}", std::process::id()))
}

/// A model with a row in every table: app `kv` (two units on a peer relation, config set,
/// a pod spec, leader data, bags and stored state).
static TEMPLATE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    std::fs::create_dir_all(dir()).unwrap();
    let path = dir().join("template.db");
    let _ = std::fs::remove_file(&path);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path, "fuzz").unwrap();
        let metadata = CharmMetadata {
            name: "kv".into(),
            summary: "A key-value store.".into(),
            relations: vec![EndpointMeta {
                name: "cluster".into(),
                role: RelationRole::Peers,
                interface: "kv-peers".into(),
                limit: None,
            }],
            config: vec![ConfigOptionMeta {
                name: "port".into(),
                kind: OptionType::Int,
                default: Some(ConfigValue::Int(6379)),
                description: String::new(),
            }],
            actions: Vec::new(),
        };
        store
            .deploy(
                ApplicationRecord {
                    name: "kv".into(),
                    charm: "kv.wasm".into(),
                    metadata,
                    config: BTreeMap::from([("port".into(), ConfigValue::Int(7000))]),
                },
                2,
            )
            .await
            .unwrap();
    });
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "INSERT INTO relation_unit_bags VALUES (1, 'kv/0', 'addr', 'kv-0');
         INSERT INTO relation_app_bags VALUES (1, 'kv', 'members', '2');
         INSERT INTO leader_data VALUES ('kv', 'password', 'secret');
         INSERT INTO stored_state VALUES ('kv/0', 'seen', '1');
         INSERT INTO pod_specs VALUES ('kv', 1, '{\"containers\":[]}', '{}');
         INSERT INTO leases VALUES ('kv', 'kv/0', 1, 0);",
    )
    .unwrap();
    drop(conn);
    std::fs::read(&path).unwrap()
});

fuzz_target!(|data: &[u8]| {
    let Some((&column, text)) = data.split_first() else {
        return;
    };
    let (table, column) = COLUMNS[column as usize % COLUMNS.len()];
    let text = String::from_utf8_lossy(text);
    let path = dir().join("model.db");
    std::fs::write(&path, &*TEMPLATE).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(&format!("UPDATE {table} SET {column} = ?1"), [&*text])
        .unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let Ok(store) = SqliteStore::open(&path, "fuzz") else {
            return;
        };
        let _ = store.status().await;
        let _ = store.applications().await;
        let _ = store.relations().await;
        let _ = store.pod_spec("kv").await;
        for unit in ["kv/0", "kv/1"] {
            let _ = store.snapshot(unit).await;
            let _ = store.queued(unit).await;
            let _ = store.unit_details(unit).await;
        }
    });
    assert!(
        std::fs::read(&path).unwrap() == before,
        "reading {table}.{column} = {text:?} changed the model file"
    );
});
