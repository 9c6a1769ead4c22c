//! [`ModelTx`] on SQLite: one transaction, as the model's operations read and write it.

use super::*;

/// One transaction on the SQLite store, as the model's operations read and write it.
pub(super) struct SqliteTx<'c> {
    pub(super) conn: &'c Conn,
    pub(super) configs: &'c ConfigMemo,
    pub(super) units: &'c Memo<String, UnitNames>,
    /// Whether this step added, removed or marked dying a unit: then its lists of live
    /// units are its own, not yet the file's, and stay out of [`Memo`] both ways.
    pub(super) units_changed: bool,
    pub(super) app_bag_memo: &'c Memo<(RelationId, String), SharedBag>,
    /// Whether this step wrote or removed a key of an application bag: as `units_changed`.
    pub(super) app_bags_changed: bool,
    pub(super) specs: &'c EncodedSpecs,
    /// The pod spec texts [`ModelTx::pod_spec_state`] encoded, for the write that follows.
    pub(super) spec_texts: Option<(String, Option<String>)>,
    /// The seqs of the hooks this step queued.
    pub(super) queued: Vec<i64>,
}

impl SqliteTx<'_> {
    pub(super) fn exec(
        &self,
        sql: &'static str,
        params: impl rusqlite::Params,
    ) -> Result<usize, StoreError> {
        self.conn
            .cached(sql)
            .and_then(|mut s| s.execute(params))
            .db()
    }

    /// The bags of `owners` among one relation's bags, read with `sql`.
    /// The bags of `owners` in relation `id`: read with `all` (the relation's every bag)
    /// when they are many, else each with `one` (an owner's bag, `?2`), so that a unit
    /// with one remote unit reads two bags, not those of the relation's every unit.
    pub(super) fn bags(
        &self,
        all: &'static str,
        one: &'static str,
        id: RelationId,
        owners: &[&str],
    ) -> Result<Vec<SharedBag>, StoreError> {
        let mut stored = if owners.len() > FEW_BAGS {
            read_relation_bags(self.conn, all, (id,))?
        } else {
            let mut stored = BTreeMap::new();
            for owner in owners {
                stored.extend(read_relation_bags(self.conn, one, (id, owner))?);
            }
            stored
        };
        let mut bags: Vec<SharedBag> = Vec::with_capacity(owners.len());
        for (i, owner) in owners.iter().enumerate() {
            let bag = match stored.remove(*owner) {
                Some(bag) => Arc::new(bag),
                // Asked twice (peers: both sides are this application): already read.
                None => match owners[..i].iter().position(|o| o == owner) {
                    Some(first) => bags[first].clone(),
                    None => SharedBag::default(),
                },
            };
            bags.push(bag);
        }
        Ok(bags)
    }
}

impl ModelTx for SqliteTx<'_> {
    fn application(&mut self, app: &str) -> TxResult<Option<ApplicationRecord>> {
        application_record(self.conn, app)
    }

    fn app_dying(&mut self, app: &str) -> TxResult<bool> {
        let dying: Option<bool> = self
            .conn
            .cached("SELECT dying FROM applications WHERE name = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        Ok(dying.unwrap_or(false))
    }

    fn dying_units(&mut self, app: &str) -> TxResult<Vec<String>> {
        self.conn
            .cached("SELECT name FROM units WHERE app = ?1 AND dying ORDER BY number")
            .and_then(|mut s| s.query_map([app], |r| r.get(0))?.collect())
            .db()
    }

    fn unit_dying(&mut self, unit: &str) -> TxResult<bool> {
        // The unit's own row, not its application's dying units: a large application's
        // snapshots ask this of each unit.
        let dying: Option<bool> = self
            .conn
            .cached("SELECT dying FROM units WHERE name = ?1")
            .and_then(|mut s| s.query_row([unit], |r| r.get(0)).optional())
            .db()?;
        Ok(dying.unwrap_or(false))
    }

    fn queued_hook(&mut self, unit: &str, seq: u64) -> TxResult<Option<Hook>> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let hook: Option<String> = self
            .conn
            .cached("SELECT hook FROM hook_queue WHERE seq = ?1 AND unit = ?2")
            .and_then(|mut s| {
                s.query_row(rusqlite::params![seq, unit], |r| r.get(0))
                    .optional()
            })
            .db()?;
        hook.map(|h| decode(&h, || format!("hook {seq} of {unit}")))
            .transpose()
    }

    fn set_app_config(
        &mut self,
        app: &str,
        config: &BTreeMap<String, ConfigValue>,
    ) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET config = ?2 WHERE name = ?1",
            rusqlite::params![app, encode(config)],
        )?;
        Ok(())
    }

    fn set_app_charm(&mut self, record: &ApplicationRecord) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET charm = ?2, metadata = ?3, config = ?4, module = ?5
             WHERE name = ?1",
            rusqlite::params![
                record.name,
                record.charm,
                encode(&record.metadata),
                encode(&record.config),
                record.module
            ],
        )?;
        Ok(())
    }

    fn module_stored(&mut self, hash: &str) -> TxResult<bool> {
        self.conn
            .cached("SELECT 1 FROM modules WHERE hash = ?1")
            .and_then(|mut s| s.exists([hash]))
            .db()
    }

    fn set_app_dying(&mut self, app: &str) -> TxResult<()> {
        self.exec("UPDATE applications SET dying = 1 WHERE name = ?1", [app])?;
        Ok(())
    }

    fn set_unit_dying(&mut self, unit: &str) -> TxResult<()> {
        self.units_changed = true;
        self.exec("UPDATE units SET dying = 1 WHERE name = ?1", [unit])?;
        Ok(())
    }

    fn set_relation_dying(&mut self, id: RelationId) -> TxResult<()> {
        self.exec("UPDATE relations SET dying = 1 WHERE id = ?1", [id])?;
        Ok(())
    }

    fn release_lease(&mut self, app: &str) -> TxResult<()> {
        // `last_terms` keeps the term, so the next leader's is higher.
        self.exec("DELETE FROM leases WHERE app = ?1", [app])?;
        Ok(())
    }

    fn delete_unit(&mut self, unit: &str) -> TxResult<()> {
        self.units_changed = true;
        for sql in [
            "DELETE FROM relation_unit_bags WHERE unit = ?1",
            "DELETE FROM stored_state WHERE unit = ?1",
            "DELETE FROM hook_queue WHERE unit = ?1",
            "DELETE FROM unit_logs WHERE unit = ?1",
            "DELETE FROM units WHERE name = ?1",
        ] {
            self.exec(sql, [unit])?;
        }
        Ok(())
    }

    fn delete_relation(&mut self, id: RelationId) -> TxResult<()> {
        self.app_bags_changed = true;
        for sql in [
            "DELETE FROM relation_unit_bags WHERE relation = ?1",
            "DELETE FROM relation_app_bags WHERE relation = ?1",
            "DELETE FROM app_bag_generations WHERE relation = ?1",
            "DELETE FROM relation_apps WHERE relation = ?1",
            "DELETE FROM relations WHERE id = ?1",
        ] {
            self.exec(sql, [id])?;
        }
        Ok(())
    }

    fn delete_application(&mut self, app: &str) -> TxResult<()> {
        self.app_bags_changed = true;
        for sql in [
            "DELETE FROM leader_data WHERE app = ?1",
            "DELETE FROM relation_app_bags WHERE app = ?1",
            "DELETE FROM app_bag_generations WHERE app = ?1",
            "DELETE FROM relation_apps WHERE app = ?1",
            "DELETE FROM pod_spec_history WHERE app = ?1",
            "DELETE FROM pod_specs WHERE app = ?1",
            "DELETE FROM applications WHERE name = ?1",
        ] {
            self.exec(sql, [app])?;
        }
        Ok(())
    }

    fn app_charms(&mut self) -> TxResult<Vec<(String, String)>> {
        self.conn
            .cached("SELECT name, charm FROM applications ORDER BY name")
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .db()
    }

    fn app_exists(&mut self, app: &str) -> TxResult<bool> {
        app_exists(self.conn, app)
    }

    fn app_view(&mut self, app: &str) -> TxResult<Option<AppView>> {
        let row: Option<(String, String, String, Option<String>)> = self
            .conn
            .cached("SELECT metadata, config, status, module FROM applications WHERE name = ?1")
            .and_then(|mut s| {
                s.query_row([app], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .db()?;
        let Some((metadata, config, status, module)) = row else {
            return Ok(None);
        };
        Ok(Some(AppView {
            config: self.configs.effective(app, metadata, config)?,
            leader_data: Arc::new(read_bag(
                self.conn,
                "SELECT key, value FROM leader_data WHERE app = ?1",
                &[&app],
            )?),
            status: decode(&status, || format!("status of {app}"))?,
            module,
        }))
    }

    fn units_of(&mut self, app: &str) -> TxResult<Vec<String>> {
        unit_names(self.conn, app)
    }

    fn live_units(&mut self, app: &str) -> TxResult<UnitNames> {
        let read = |conn: &Conn| -> TxResult<UnitNames> {
            // One statement, not the units and then the dying ones.
            conn.cached(LIVE_UNITS)
                .and_then(|mut s| s.query_map([app], |r| r.get(0))?.collect())
                .db()
        };
        if self.units_changed {
            return read(self.conn);
        }
        let generation: Option<i64> = self
            .conn
            .cached(UNITS_GENERATION)
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        let Some(generation) = generation else {
            return Ok(UnitNames::default());
        };
        let key = app.to_string();
        if let Some(names) = self.units.get(&key, generation) {
            return Ok(names);
        }
        let names = read(self.conn)?;
        self.units.put(key, generation, names.clone());
        Ok(names)
    }

    fn next_unit_number(&mut self, app: &str) -> TxResult<Option<u32>> {
        let next: Option<i64> = self
            .conn
            .cached("SELECT next_unit FROM applications WHERE name = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        next.map(|n| {
            u32::try_from(n)
                .map_err(|_| StoreError::Corrupt(format!("next unit number of {app}: {n}")))
        })
        .transpose()
    }

    fn unit_exists(&mut self, unit: &str) -> TxResult<bool> {
        unit_exists(self.conn, unit)
    }

    fn unit(&mut self, unit: &str) -> TxResult<Option<UnitRecord>> {
        type Row = (String, String, Option<String>, Option<i64>);
        let row: Option<Row> = self
            .conn
            .cached(
                "SELECT status, workload_version, hook_error, elected_term FROM units WHERE name = ?1",
            )
            .and_then(|mut s| {
                s.query_row([unit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .db()?;
        let Some((status, workload_version, hook_error, elected_term)) = row else {
            return Ok(None);
        };
        Ok(Some(UnitRecord {
            status: decode(&status, || format!("status of {unit}"))?,
            workload_version,
            hook_error,
            stored: Arc::new(read_bag(
                self.conn,
                "SELECT key, value FROM stored_state WHERE unit = ?1",
                &[&unit],
            )?),
            elected_term: elected_term.map(to_u64),
        }))
    }

    fn live_lease(&mut self, app: &str) -> TxResult<Option<LeaseHolder>> {
        // Read under the step's lock, so no claim can slip in before its writes.
        let now_ms = floor_ms(now_since_epoch());
        Ok(live_lease(self.conn, app, now_ms)?.map(|l| LeaseHolder {
            holder: l.holder,
            term: l.term,
        }))
    }

    fn relation(&mut self, id: RelationId) -> TxResult<Option<Arc<RelationRecord>>> {
        let row: Option<(String, String, bool)> = self
            .conn
            .cached("SELECT interface, endpoints, dying FROM relations WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .db()?;
        row.map(|(interface, endpoints, dying)| {
            relation_record(id.into(), interface, &endpoints, dying).map(Arc::new)
        })
        .transpose()
    }

    fn relations_of(&mut self, app: &str) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(relations_of(self.conn, app)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    fn next_relation_id(&mut self) -> TxResult<RelationId> {
        // AUTOINCREMENT keeps the highest id ever given, so none is reused.
        let last: i64 = self
            .conn
            .cached(
                "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'relations'), 0)",
            )
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .db()?;
        RelationId::try_from(last + 1)
            .map_err(|_| StoreError::Corrupt(format!("relation id {} out of range", last + 1)))
    }

    fn unit_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        self.bags(
            "SELECT unit, key, value FROM relation_unit_bags WHERE relation = ?1",
            "SELECT unit, key, value FROM relation_unit_bags WHERE relation = ?1 AND unit = ?2",
            id,
            of,
        )
    }

    fn app_bags(&mut self, id: RelationId, of: &[&str]) -> TxResult<Vec<SharedBag>> {
        static ALL: &str = "SELECT app, key, value FROM relation_app_bags WHERE relation = ?1";
        static ONE: &str =
            "SELECT app, key, value FROM relation_app_bags WHERE relation = ?1 AND app = ?2";
        if self.app_bags_changed {
            return self.bags(ALL, ONE, id, of);
        }
        let mut bags = Vec::with_capacity(of.len());
        for app in of {
            let generation: Option<i64> = self
                .conn
                .cached(APP_BAG_GENERATION)
                .and_then(|mut s| s.query_row((id, app), |r| r.get(0)).optional())
                .db()?;
            let Some(generation) = generation else {
                bags.push(SharedBag::default());
                continue;
            };
            let key = (id, app.to_string());
            let bag = match self.app_bag_memo.get(&key, generation) {
                Some(bag) => bag,
                None => {
                    let bag = self.bags(ALL, ONE, id, &[app])?.remove(0);
                    self.app_bag_memo.put(key, generation, bag.clone());
                    bag
                }
            };
            bags.push(bag);
        }
        Ok(bags)
    }

    fn pod_spec_revision(&mut self, app: &str) -> TxResult<Option<u64>> {
        let revision: Option<i64> = self
            .conn
            .cached("SELECT revision FROM pod_specs WHERE app = ?1")
            .and_then(|mut s| s.query_row([app], |r| r.get(0)).optional())
            .db()?;
        Ok(revision.map(to_u64))
    }

    fn pod_spec_state(&mut self, app: &str, write: &Arc<PodSpecWrite>) -> TxResult<PodSpecState> {
        let current = stored_pod_spec(self.conn, app)?;
        let (spec, resources) = self.specs.texts(app, write);
        let same = current
            .as_ref()
            .is_some_and(|(_, stored_spec, stored_resources)| {
                same_json(stored_spec, &spec, &write.spec)
                    && match (stored_resources, &resources, &write.k8s_resources) {
                        (None, None, None) => true,
                        (Some(stored), Some(text), Some(value)) => same_json(stored, text, value),
                        _ => false,
                    }
            });
        self.spec_texts = Some((spec, resources));
        Ok(PodSpecState {
            revision: current.map(|(revision, ..)| to_u64(revision)),
            same,
        })
    }

    fn queued_hooks(&mut self, unit: &str) -> TxResult<Option<Vec<Hook>>> {
        if !unit_exists(self.conn, unit)? {
            return Ok(None);
        }
        Ok(Some(
            queue_of(self.conn, unit)?
                .into_iter()
                .map(|q| q.hook)
                .collect(),
        ))
    }

    fn not_yet_seen(
        &mut self,
        unit: &str,
        runs: charm_model::lifecycle::Runs,
    ) -> TxResult<charm_model::lifecycle::NotYetSeen> {
        // Only the hooks that hide something, found by their text's prefix in the queue's
        // index by hook: a unit with thousands of relation-changed queued reads none of them.
        let rows: Vec<(bool, String)> = self
            .conn
            .cached(
                "SELECT seq = (SELECT MIN(seq) FROM hook_queue WHERE unit = ?1), hook
                 FROM hook_queue WHERE unit = ?1
                   AND (hook = '{\"hook\":\"install\"}'
                        OR (hook >= '{\"hook\":\"relation-created\"'
                            AND hook < '{\"hook\":\"relation-created\"~')
                        OR (hook >= '{\"hook\":\"relation-joined\"'
                            AND hook < '{\"hook\":\"relation-joined\"~')
                        OR (hook >= '{\"hook\":\"relation-broken\"'
                            AND hook < '{\"hook\":\"relation-broken\"~'))
                 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([unit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .db()?;
        let hooks = rows
            .into_iter()
            .map(|(head, text)| Ok((head, decode::<Hook>(&text, || format!("a hook of {unit}"))?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(charm_model::lifecycle::NotYetSeen::of_queued(
            hooks.iter().map(|(head, hook)| (*head, hook)),
            runs,
        ))
    }

    fn coalesces(&mut self, unit: &str, hook: &Hook) -> TxResult<Option<bool>> {
        // Hooks are stored in one canonical encoding: equal hooks have equal texts, so the
        // queue is compared where it lies, without decoding it.
        let (exists, waiting): (bool, bool) = self
            .conn
            .cached(
                "SELECT EXISTS(SELECT 1 FROM units WHERE name = ?1),
                        EXISTS(SELECT 1 FROM hook_queue WHERE unit = ?1 AND hook = ?2
                               AND seq > (SELECT MIN(seq) FROM hook_queue WHERE unit = ?1))",
            )
            .and_then(|mut s| {
                s.query_row([unit, encode(hook).as_str()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .db()?;
        Ok(exists.then_some(waiting))
    }

    fn queue_of(&mut self, unit: &str) -> TxResult<Option<Vec<QueuedHook>>> {
        if !unit_exists(self.conn, unit)? {
            return Ok(None);
        }
        queue_of(self.conn, unit).map(Some)
    }

    fn all_applications(&mut self) -> TxResult<Vec<ApplicationRecord>> {
        type Row = (String, String, String, String, Option<String>);
        let rows: Vec<Row> = self
            .conn
            .cached("SELECT name, charm, metadata, config, module FROM applications ORDER BY name")
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect()
            })
            .db()?;
        rows.into_iter()
            .map(|(name, charm, metadata, config, module)| {
                app_from_row(name, charm, &metadata, &config, module)
            })
            .collect()
    }

    fn all_relations(&mut self) -> TxResult<Vec<Arc<RelationRecord>>> {
        Ok(read_relations(self.conn)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    fn pod_spec(&mut self, app: &str) -> TxResult<Option<PodSpecRecord>> {
        stored_pod_spec(self.conn, app)?
            .map(|(revision, spec, resources)| pod_spec_record(app, revision, &spec, resources))
            .transpose()
    }

    fn create_application(&mut self, app: ApplicationRecord) -> TxResult<()> {
        self.exec(
            "INSERT INTO applications (name, charm, metadata, config, status, next_unit, module)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
            rusqlite::params![
                app.name,
                app.charm,
                encode(&app.metadata),
                encode(&app.config),
                encode(&Status::default()),
                app.module
            ],
        )?;
        Ok(())
    }

    fn create_unit(&mut self, app: &str, number: u32, name: &str) -> TxResult<()> {
        self.units_changed = true;
        self.exec(
            "INSERT INTO units (name, app, number, status, workload_version, hook_error)
             VALUES (?1, ?2, ?3, ?4, '', NULL)",
            rusqlite::params![name, app, number, encode(&Status::default())],
        )?;
        self.exec(
            "UPDATE applications SET next_unit = ?2 WHERE name = ?1",
            rusqlite::params![app, number + 1],
        )?;
        Ok(())
    }

    fn create_relation(&mut self, record: RelationRecord) -> TxResult<()> {
        self.exec(
            "INSERT INTO relations (id, interface, endpoints) VALUES (?1, ?2, ?3)",
            rusqlite::params![record.id, record.interface, encode(&record.endpoints)],
        )?;
        for e in &record.endpoints {
            self.exec(
                "INSERT OR IGNORE INTO relation_apps (app, relation) VALUES (?1, ?2)",
                rusqlite::params![e.app, record.id],
            )?;
        }
        Ok(())
    }

    fn write_bag(&mut self, owner: BagOwner<'_>, writes: &BagWrites) -> TxResult<bool> {
        match owner {
            BagOwner::Unit(id, unit) => write_bag(self.conn, &UNIT_BAGS, &[&id, &unit], writes),
            BagOwner::App(id, app) => {
                self.app_bags_changed = true;
                write_bag(self.conn, &APP_BAGS, &[&id, &app], writes)
            }
            BagOwner::Leader(app) => write_bag(self.conn, &LEADER_DATA, &[&app], writes),
        }
    }

    fn set_app_status(&mut self, app: &str, status: &Status) -> TxResult<()> {
        self.exec(
            "UPDATE applications SET status = ?2 WHERE name = ?1",
            rusqlite::params![app, encode(status)],
        )?;
        Ok(())
    }

    fn put_pod_spec(&mut self, app: &str, revision: u64, spec: &Arc<PodSpecWrite>) -> TxResult<()> {
        let write = spec;
        let (spec, resources) = match self.spec_texts.take() {
            Some(texts) => texts,
            None => self.specs.texts(app, write),
        };
        let revision = i64::try_from(revision)
            .map_err(|_| StoreError::Corrupt(format!("pod spec revision {revision} of {app}")))?;
        self.exec(
            "INSERT INTO pod_specs (app, revision, spec, k8s_resources) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (app) DO UPDATE
             SET revision = excluded.revision, spec = excluded.spec, k8s_resources = excluded.k8s_resources",
            rusqlite::params![app, revision, spec, resources],
        )?;
        // A plain INSERT: a revision written twice is an error, not a silent overwrite.
        self.exec(
            "INSERT INTO pod_spec_history (app, revision, spec, k8s_resources)
             VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![app, revision, spec, resources],
        )?;
        Ok(())
    }

    fn update_unit(&mut self, unit: &str, update: UnitUpdate<'_>) -> TxResult<()> {
        if let Some(status) = update.status {
            self.exec(
                "UPDATE units SET status = ?2 WHERE name = ?1",
                rusqlite::params![unit, encode(status)],
            )?;
        }
        if let Some(version) = update.workload_version {
            self.exec(
                "UPDATE units SET workload_version = ?2 WHERE name = ?1",
                [unit, version],
            )?;
        }
        write_bag(self.conn, &STORED_STATE, &[&unit], update.stored)?;
        match update.elected_term {
            ElectedTerm::Keep => {}
            ElectedTerm::Set(term) => {
                // Terms are issued by this store as SQLite integers, so every real one fits.
                let term = i64::try_from(term).unwrap_or(i64::MAX);
                self.exec(
                    "UPDATE units SET elected_term = ?2 WHERE name = ?1",
                    rusqlite::params![unit, term],
                )?;
            }
            ElectedTerm::Clear => {
                self.exec(
                    "UPDATE units SET elected_term = NULL WHERE name = ?1 AND elected_term IS NOT NULL",
                    [unit],
                )?;
            }
        }
        Ok(())
    }

    fn set_hook_error(&mut self, unit: &str, error: Option<&str>) -> TxResult<()> {
        self.exec(
            "UPDATE units SET hook_error = ?2 WHERE name = ?1",
            rusqlite::params![unit, error],
        )?;
        Ok(())
    }

    fn dequeue(&mut self, unit: &str, seq: u64) -> TxResult<()> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        self.exec(
            "DELETE FROM hook_queue WHERE seq = ?1 AND unit = ?2",
            rusqlite::params![seq, unit],
        )?;
        Ok(())
    }

    fn append_logs(&mut self, unit: &str, lines: &[LogRecord], keep: usize) -> TxResult<()> {
        for line in lines {
            let at_ms = i64::try_from(line.at_ms).unwrap_or(i64::MAX);
            self.exec(
                "INSERT INTO unit_logs (unit, hook, at_ms, level, message) VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![unit, line.hook, at_ms, line.level, line.message],
            )?;
        }
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.exec(
            "DELETE FROM unit_logs WHERE unit = ?1 AND seq <= (
                 SELECT seq FROM unit_logs WHERE unit = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            rusqlite::params![unit, keep],
        )?;
        Ok(())
    }

    fn next_action_id(&mut self) -> TxResult<u64> {
        // AUTOINCREMENT keeps the highest id ever given, so none is reused.
        let last: i64 = self
            .conn
            .cached("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'actions'), 0)")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .db()?;
        Ok(to_u64(last) + 1)
    }

    fn action(&mut self, id: u64) -> TxResult<Option<ActionRecord>> {
        let Ok(key) = i64::try_from(id) else {
            return Ok(None);
        };
        let record: Option<String> = self
            .conn
            .cached("SELECT record FROM actions WHERE id = ?1")
            .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional())
            .db()?;
        record
            .map(|r| decode(&r, || format!("action {id}")))
            .transpose()
    }

    fn put_action(&mut self, record: &ActionRecord) -> TxResult<()> {
        let id = i64::try_from(record.id)
            .map_err(|_| StoreError::Invalid(format!("action id {} is too large", record.id)))?;
        self.exec(
            "INSERT INTO actions (id, unit, state, record) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (id) DO UPDATE SET state = excluded.state, record = excluded.record",
            rusqlite::params![id, record.unit, record.state.as_str(), encode(record)],
        )?;
        Ok(())
    }

    fn unit_logs(&mut self, unit: &str) -> TxResult<Vec<LogRecord>> {
        type Row = (i64, String, i64, String, String);
        let rows: Vec<Row> = self
            .conn
            .cached(
                "SELECT seq, hook, at_ms, level, message FROM unit_logs WHERE unit = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([unit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect()
            })
            .db()?;
        Ok(rows
            .into_iter()
            .map(|(seq, hook, at_ms, level, message)| LogRecord {
                seq: to_u64(seq),
                unit: unit.to_string(),
                hook,
                at_ms: to_u64(at_ms),
                level,
                message,
            })
            .collect())
    }

    fn enqueue(&mut self, unit: &str, hook: &Hook) -> TxResult<u64> {
        self.exec(
            "INSERT INTO hook_queue (unit, hook) VALUES (?1, ?2)",
            [unit, encode(hook).as_str()],
        )?;
        let seq = self.conn.last_insert_rowid();
        self.queued.push(seq);
        Ok(to_u64(seq))
    }
}
