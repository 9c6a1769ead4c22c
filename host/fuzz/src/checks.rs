//! What each fuzz target checks, one function per target, taking the fuzzer's input.
//! Kept apart from the targets so that `charm-tests` replays every committed corpus with
//! the same checks on the stable toolchain (`tests/tests/fuzz_corpora.rs`).
//!
//! A check returns normally for any input, or panics with what went wrong.

#![allow(clippy::missing_panics_doc)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use arbitrary::Arbitrary;
use charm_host::bindings::types as t;
use charm_host::bundle::{Bundle, BundleError};
use charm_host::charm::{CharmRuntime, RuntimeConfig, metadata_from_contract};
use charm_host::store::{SqliteStore, StateStore};
use charm_model::{
    ApplicationRecord, CharmMetadata, ConfigOptionMeta, ConfigValue, EndpointMeta, Hook, LogRecord,
    OptionType, PodSpecRecord, QueuedHook, RelationEndpoint, RelationRecord, RelationRole, Status,
    UnitRecord,
};
use charm_pgsql::ConnectionString;
use serde::{Serialize, de::DeserializeOwned};

static RUNTIME: LazyLock<CharmRuntime> = LazyLock::new(|| {
    CharmRuntime::new(RuntimeConfig {
        compile_cache: None,
        ..RuntimeConfig::default()
    })
    .expect("a charm runtime")
});

/// The bundle parser: any text given as a bundle gets a verdict (a bundle, or problems
/// naming their lines), never a panic. Charms it names do not exist here, so every
/// bundle that names one is refused after its keys and values are checked.
pub fn bundle(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/nonexistent/fuzz/bundle.yaml");
    match Bundle::parse(path, text, &RUNTIME) {
        Ok(_) => {}
        Err(BundleError::Invalid { problems, .. }) => {
            assert!(!problems.is_empty(), "a refused bundle names its problems");
            // YAML's line breaks: LF, CRLF, and a CR alone.
            let lines = 1 + text.matches('\n').count() + text.matches('\r').count()
                - text.matches("\r\n").count();
            for problem in &problems {
                if let Some(line) = problem.line {
                    assert!(
                        (1..=lines + 1).contains(&line),
                        "{problem}: line {line} of a {lines}-line bundle"
                    );
                }
                // Rendered as the CLI prints it: must not panic either.
                let _ = problem.to_string();
            }
        }
        Err(other) => {
            let _ = other.to_string();
        }
    }
}

/// The pod spec validator: any text a charm passes to `set-pod-spec` gets a verdict, never
/// a panic; and a spec it accepts is accepted again as it was stored.
pub fn pod_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A NUL splits the spec from the k8s resources, which a charm may pass beside it.
    let (spec, resources) = match text.split_once('\0') {
        Some((spec, resources)) => (spec, Some(resources)),
        None => (text, None),
    };
    if let Ok(write) = charm_model::podspec::validate(spec, resources) {
        let stored = serde_json::to_string(&write).expect("an accepted pod spec encodes");
        let again: charm_model::PodSpecWrite =
            serde_json::from_str(&stored).expect("a stored pod spec decodes");
        assert_eq!(again, write, "a stored pod spec reads back as written");
    }
}

/// The pgsql interface's libpq connection-string parser: any text a remote unit writes in
/// its bag gets a verdict, never a panic; what parses keeps its keywords when written back
/// through the builder.
pub fn connection_string(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = text.parse::<ConnectionString>() else {
        return;
    };
    let params = parsed.params().clone();
    let _ = (parsed.host_name(), parsed.port_number(), parsed.database());
    let mut built = ConnectionString::new();
    for (keyword, value) in &params {
        built = built.param(keyword.clone(), value.clone());
    }
    let reparsed: ConnectionString = built
        .as_str()
        .parse()
        .unwrap_or_else(|e| panic!("{:?} (from {text:?}) does not parse: {e}", built.as_str()));
    assert_eq!(reparsed.params(), &params, "written back from {text:?}");
}

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

/// Decoding the model's records as the stores keep them (JSON: etcd's values, SQLite's
/// JSON columns): any bytes get a verdict, never a panic; a record that decodes encodes to
/// the same record again, so nothing a store reads back changes by being written.
pub fn records(data: &[u8]) {
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
}

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
    ("applications", "module"),
];

/// Where the `sqlite_records` check writes its model files (in memory where `/dev/shm` is),
/// one directory per process; the caller removes it when done.
pub fn scratch() -> PathBuf {
    dir()
}

fn dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("charm-host-fuzz-{}", std::process::id()))
}

/// A model with a row in every table: app `kv` (two units on a peer relation, config set,
/// a pod spec, leader data, bags and stored state).
static TEMPLATE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    std::fs::create_dir_all(dir()).unwrap();
    let path = dir().join("template.db");
    let _ = std::fs::remove_file(&path);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
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
                    module: None,
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

/// The SQLite store's decoding of its own rows: a model file whose rows were changed
/// behind the store's back (any text in any JSON or text column) gets a clear error on
/// the read that meets it, never a panic; and a store that reads it writes nothing.
pub fn sqlite_records(data: &[u8]) {
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

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
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
}

/// A charm's metadata as a component may declare it: anything the contract's types can hold.
#[derive(Debug, Arbitrary)]
pub struct Declared {
    name: String,
    summary: String,
    relations: Vec<(String, u8, String, Option<u32>)>,
    config: Vec<(String, u8, Option<Value>, String)>,
    actions: Vec<DeclaredAction>,
}

/// An action: name, description, parameters.
type DeclaredAction = (String, String, Vec<DeclaredParam>);
/// A parameter: name, type, description, default, required.
type DeclaredParam = (String, u8, String, Option<Value>, bool);

/// A declared default.
#[derive(Debug, Arbitrary)]
pub enum Value {
    String(String),
    Int(i64),
    Float(f64),
    Boolean(bool),
}

fn kind(k: u8) -> t::OptionType {
    [
        t::OptionType::String,
        t::OptionType::Int,
        t::OptionType::Float,
        t::OptionType::Boolean,
    ][k as usize % 4]
}

fn value(v: Value) -> t::ConfigValue {
    match v {
        Value::String(s) => t::ConfigValue::String(s),
        Value::Int(i) => t::ConfigValue::Int(i),
        Value::Float(f) => t::ConfigValue::Float(f),
        Value::Boolean(b) => t::ConfigValue::Boolean(b),
    }
}

fn declared(d: Declared) -> t::Metadata {
    t::Metadata {
        name: d.name,
        summary: d.summary,
        relations: d
            .relations
            .into_iter()
            .map(|(name, role, interface, limit)| t::RelationMeta {
                name,
                role: [
                    t::RelationRole::Provides,
                    t::RelationRole::Requires,
                    t::RelationRole::Peers,
                ][role as usize % 3],
                interface,
                limit,
            })
            .collect(),
        config: d
            .config
            .into_iter()
            .map(|(name, k, default, description)| t::ConfigOption {
                name,
                kind: kind(k),
                default: default.map(value),
                description,
            })
            .collect(),
        actions: d
            .actions
            .into_iter()
            .map(|(name, description, params)| t::ActionMeta {
                name,
                description,
                params: params
                    .into_iter()
                    .map(|(name, k, description, default, required)| t::ActionParam {
                        name,
                        kind: kind(k),
                        description,
                        default: default.map(value),
                        required,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn once<'a>(what: &str, names: impl Iterator<Item = &'a str>) {
    let mut seen = BTreeSet::new();
    for name in names {
        assert!(!name.is_empty(), "an accepted {what} has no name");
        assert!(seen.insert(name), "{what} {name:?} accepted twice");
    }
}

/// Converting a charm's metadata, as any component may declare it, into the model's: any
/// declaration gets a verdict, never a panic; what is accepted has every name present and
/// declared once, every default of its declared type, and is stored and read back (as the
/// stores keep it, JSON) unchanged.
pub fn metadata(d: Declared) {
    let Ok(meta) = metadata_from_contract(declared(d)) else {
        return;
    };
    assert!(!meta.name.is_empty());
    once("endpoint", meta.relations.iter().map(|r| r.name.as_str()));
    once("config option", meta.config.iter().map(|o| o.name.as_str()));
    once("action", meta.actions.iter().map(|a| a.name.as_str()));
    for option in &meta.config {
        if let Some(default) = &option.default {
            assert_eq!(default.kind(), option.kind, "option {:?}", option.name);
        }
    }
    for action in &meta.actions {
        once(
            "action parameter",
            action.params.iter().map(|p| p.name.as_str()),
        );
        for param in &action.params {
            if let Some(default) = &param.default {
                assert_eq!(default.kind(), param.kind, "parameter {:?}", param.name);
            }
        }
    }
    let stored = serde_json::to_string(&meta).expect("accepted metadata encodes");
    let again: CharmMetadata = serde_json::from_str(&stored)
        .unwrap_or_else(|e| panic!("accepted metadata stored as {stored} does not read back: {e}"));
    assert_eq!(again, meta, "stored as {stored}");
}
