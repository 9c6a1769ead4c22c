//! The model's rows: how bags, relations, applications, pod specs and queued hooks are
//! written to and read from their tables.

use super::*;

/// Converts SQLite's errors: lock timeouts and I/O are transient, damage is corruption.
pub(super) trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(|e| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt(e.to_string())
            }
            _ => StoreError::Unavailable(format!("sqlite: {e}")),
        })
    }
}

pub(super) fn encode(value: &impl Serialize) -> String {
    // The model types are plain data (string keys, no custom serialisers): this cannot fail.
    serde_json::to_string(value).expect("model types serialise to JSON")
}

/// `text` as JSON; `what` names it in the error (built only then).
pub(super) fn decode<T: DeserializeOwned>(
    text: &str,
    what: impl FnOnce() -> String,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{}: {e}", what())))
}

/// A stored count (term, revision): never negative, as this module writes them.
pub(super) fn to_u64(raw: i64) -> u64 {
    raw.max(0) as u64
}

/// A data bag's table: the statements that write one key of one bag. The bag's owner is the
/// first parameters, then the key, then the value.
pub(super) struct BagTable {
    pub(super) upsert: &'static str,
    pub(super) delete: &'static str,
}

pub(super) static UNIT_BAGS: BagTable = BagTable {
    // The WHERE makes an unchanged value no change at all, so `execute` reports 0 rows.
    upsert: "INSERT INTO relation_unit_bags (relation, unit, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_unit_bags WHERE relation = ?1 AND unit = ?2 AND key = ?3",
};

pub(super) static APP_BAGS: BagTable = BagTable {
    upsert: "INSERT INTO relation_app_bags (relation, app, key, value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (relation, app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM relation_app_bags WHERE relation = ?1 AND app = ?2 AND key = ?3",
};

pub(super) static LEADER_DATA: BagTable = BagTable {
    upsert: "INSERT INTO leader_data (app, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (app, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM leader_data WHERE app = ?1 AND key = ?2",
};

pub(super) static STORED_STATE: BagTable = BagTable {
    upsert: "INSERT INTO stored_state (unit, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (unit, key) DO UPDATE SET value = excluded.value
             WHERE value IS NOT excluded.value",
    delete: "DELETE FROM stored_state WHERE unit = ?1 AND key = ?2",
};

/// Applies `writes` to one bag, as [`crate::model::apply_writes`] does; whether anything
/// changed.
pub(super) fn write_bag(
    conn: &Conn,
    table: &BagTable,
    owner: &[&dyn ToSql],
    writes: &BagWrites,
) -> Result<bool, StoreError> {
    let mut changed = false;
    for (key, value) in writes {
        let mut params: Vec<&dyn ToSql> = owner.to_vec();
        params.push(key);
        let rows = match value {
            Some(v) => {
                params.push(v);
                conn.cached(table.upsert)
                    .and_then(|mut s| s.execute(params.as_slice()))
                    .db()?
            }
            None => conn
                .cached(table.delete)
                .and_then(|mut s| s.execute(params.as_slice()))
                .db()?,
        };
        changed |= rows > 0;
    }
    Ok(changed)
}

pub(super) fn read_bag(
    conn: &Conn,
    sql: &'static str,
    owner: &[&dyn ToSql],
) -> Result<Bag, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let rows = stmt
        .query_map(owner, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .db()?;
    rows.collect::<rusqlite::Result<Bag>>().db()
}

/// Keyed bags of one relation: owner -> key -> value.
/// Up to how many owners' bags are read one owner at a time.
pub(super) const FEW_BAGS: usize = 8;

/// The bags `sql` selects with `params`, as (owner, key, value) rows, by owner.
pub(super) fn read_relation_bags(
    conn: &Conn,
    sql: &'static str,
    params: impl rusqlite::Params,
) -> Result<BTreeMap<String, Bag>, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let mut rows = stmt.query(params).db()?;
    let mut bags: BTreeMap<String, Bag> = BTreeMap::new();
    while let Some(r) = rows.next().db()? {
        let (owner, key, value): (String, String, String) =
            (r.get(0).db()?, r.get(1).db()?, r.get(2).db()?);
        bags.entry(owner).or_default().insert(key, value);
    }
    Ok(bags)
}

pub(super) fn read_relations(conn: &Conn) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(
        conn,
        "SELECT id, interface, endpoints, dying FROM relations ORDER BY id",
        None,
    )
}

/// The relations `?1` is in, by id.
pub(super) static RELATIONS_OF: &str =
    "SELECT r.id, r.interface, r.endpoints, r.dying FROM relation_apps a
         JOIN relations r ON r.id = a.relation WHERE a.app = ?1 ORDER BY r.id";

/// The relations `app` takes part in, by id.
pub(super) fn relations_of(conn: &Conn, app: &str) -> Result<Vec<RelationRecord>, StoreError> {
    relations_where(conn, RELATIONS_OF, Some(app))
}

pub(super) fn relations_where(
    conn: &Conn,
    sql: &'static str,
    app: Option<&str>,
) -> Result<Vec<RelationRecord>, StoreError> {
    let mut stmt = conn.cached(sql).db()?;
    let params: Vec<&dyn rusqlite::ToSql> = app.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
    let rows = stmt
        .query_map(params.as_slice(), |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, bool>(3)?,
            ))
        })
        .db()?
        .collect::<rusqlite::Result<Vec<_>>>()
        .db()?;
    rows.into_iter()
        .map(|(id, interface, endpoints, dying)| relation_record(id, interface, &endpoints, dying))
        .collect()
}

pub(super) fn relation_record(
    id: i64,
    interface: String,
    endpoints: &str,
    dying: bool,
) -> Result<RelationRecord, StoreError> {
    let id = RelationId::try_from(id)
        .map_err(|_| StoreError::Corrupt(format!("relation id {id} out of range")))?;
    let endpoints = decode(endpoints, || format!("endpoints of relation {id}"))?;
    Ok(RelationRecord {
        id,
        interface,
        endpoints,
        dying,
    })
}

/// The units of `?1`, by number.
pub(super) static UNIT_NAMES: &str = "SELECT name FROM units WHERE app = ?1 ORDER BY number";

/// The units a hook's snapshot lists as remote units: those not being removed.
pub(super) static LIVE_UNITS: &str =
    "SELECT name FROM units WHERE app = ?1 AND NOT dying ORDER BY number";

pub(super) static UNITS_GENERATION: &str =
    "SELECT units_generation FROM applications WHERE name = ?1";

pub(super) static APP_BAG_GENERATION: &str =
    "SELECT generation FROM app_bag_generations WHERE relation = ?1 AND app = ?2";

pub(super) fn unit_names(conn: &Conn, app: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.cached(UNIT_NAMES).db()?;
    let names = stmt
        .query_map([app], |r| r.get(0))
        .db()?
        .collect::<rusqlite::Result<Vec<String>>>()
        .db()?;
    Ok(names)
}

pub(super) fn app_exists(conn: &Conn, app: &str) -> Result<bool, StoreError> {
    conn.cached("SELECT 1 FROM applications WHERE name = ?1")
        .and_then(|mut s| s.exists([app]))
        .db()
}

pub(super) fn application_record(
    conn: &Conn,
    name: &str,
) -> Result<Option<ApplicationRecord>, StoreError> {
    let row = conn
        .cached("SELECT charm, metadata, config, module FROM applications WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([name], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .optional()
        })
        .db()?;
    row.map(|(charm, metadata, config, module)| {
        app_from_row(name.to_string(), charm, &metadata, &config, module)
    })
    .transpose()
}

pub(super) fn app_from_row(
    name: String,
    charm: String,
    metadata: &str,
    config: &str,
    module: Option<String>,
) -> Result<ApplicationRecord, StoreError> {
    let metadata: CharmMetadata = decode(metadata, || format!("metadata of {name}"))?;
    let config: BTreeMap<String, ConfigValue> = decode(config, || format!("config of {name}"))?;
    Ok(ApplicationRecord {
        name,
        charm,
        metadata,
        config,
        module,
    })
}

pub(super) fn pod_spec_record(
    app: &str,
    revision: i64,
    spec: &str,
    resources: Option<String>,
) -> Result<PodSpecRecord, StoreError> {
    Ok(PodSpecRecord {
        revision: to_u64(revision),
        spec: decode(spec, || format!("pod spec of {app}"))?,
        k8s_resources: resources
            .map(|r| decode(&r, || format!("k8s resources of {app}")))
            .transpose()?,
    })
}

pub(super) fn unit_exists(conn: &Conn, unit: &str) -> Result<bool, StoreError> {
    conn.cached("SELECT 1 FROM units WHERE name = ?1")
        .and_then(|mut s| s.exists([unit]))
        .db()
}

/// The pod spec row of `app`, if it has one: its revision, spec and resources as stored.
pub(super) fn stored_pod_spec(
    conn: &Conn,
    app: &str,
) -> Result<Option<(i64, String, Option<String>)>, StoreError> {
    conn.cached("SELECT revision, spec, k8s_resources FROM pod_specs WHERE app = ?1")
        .and_then(|mut s| {
            s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .db()
}

/// The hooks queued on `unit`, in order.
pub(super) fn queue_of(conn: &Conn, unit: &str) -> Result<Vec<QueuedHook>, StoreError> {
    let rows: Vec<(i64, String)> = conn
        .cached("SELECT seq, hook FROM hook_queue WHERE unit = ?1 ORDER BY seq")
        .and_then(|mut s| {
            s.query_map([unit], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .db()?;
    rows.into_iter()
        .map(|(seq, hook)| {
            Ok(QueuedHook {
                unit: unit.to_string(),
                seq: to_u64(seq),
                hook: decode(&hook, || format!("hook {seq} of {unit}"))?,
            })
        })
        .collect()
}

/// Whether a stored JSON text holds `value`. The text is compared first (the common, cheap
/// case); parsing is the fallback for texts that differ only in form.
pub(super) fn same_json(stored: &str, text: &str, value: &serde_json::Value) -> bool {
    stored == text || serde_json::from_str::<serde_json::Value>(stored).is_ok_and(|v| v == *value)
}
