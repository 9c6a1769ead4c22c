//! What a snapshot reads again and again, kept with the generation it was read at.

use super::*;

/// What a snapshot reads again and again, as last read, with the generation it was read
/// at (schema 8): each application's live units (`applications.units_generation`) and each
/// application bag of a relation (`app_bag_generations`). A snapshot reads the generation,
/// one row, and reads the thing again only when it moved: a database unit related to 10,000
/// units otherwise reads 10,000 names in every hook, and each of those units the database's
/// 150 KiB application bag. Right whoever wrote the file: a generation moves in the same
/// transaction as the change, by triggers, and is never given twice in the file's committed
/// history. Only steps that changed none of it consult or fill it
/// ([`SqliteTx::units_changed`], [`SqliteTx::app_bags_changed`]): a step's own changes may
/// roll back.
#[derive(Debug)]
pub(super) struct Memo<K, V>(Mutex<HashMap<K, (i64, V)>>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + std::hash::Hash, V: Clone> Memo<K, V> {
    pub(super) fn get(&self, key: &K, generation: i64) -> Option<V> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.get(key)
            .filter(|(g, _)| *g == generation)
            .map(|(_, value)| value.clone())
    }

    pub(super) fn put(&self, key: K, generation: i64, value: V) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        memo.insert(key, (generation, value));
    }
}

/// Each application's last committed pod spec write with its JSON texts: a charm that sets
/// the same spec every hook hands the commit the same shared write (see
/// [`crate::podspec::LastValid`]), whose texts are then not encoded again.
#[derive(Debug, Default)]
pub(super) struct EncodedSpecs(Mutex<HashMap<String, EncodedSpec>>);

#[derive(Debug)]
pub(super) struct EncodedSpec {
    pub(super) write: Arc<PodSpecWrite>,
    pub(super) spec: String,
    pub(super) resources: Option<String>,
}

impl EncodedSpecs {
    /// `write`'s spec and resources as the store keeps them.
    pub(super) fn texts(&self, app: &str, write: &Arc<PodSpecWrite>) -> (String, Option<String>) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = memo.get(app)
            && Arc::ptr_eq(&e.write, write)
        {
            return (e.spec.clone(), e.resources.clone());
        }
        let spec = encode(&write.spec);
        let resources = write.k8s_resources.as_ref().map(encode);
        memo.insert(
            app.to_string(),
            EncodedSpec {
                write: write.clone(),
                spec: spec.clone(),
                resources: resources.clone(),
            },
        );
        (spec, resources)
    }
}

/// Each application's effective config (the charm's declared defaults under the operator's
/// settings), kept with the stored texts it was computed from: a snapshot that reads the
/// same texts again, as nearly every one does, reuses it instead of parsing the charm's
/// metadata. Keyed by content, so it is right whoever wrote the file.
#[derive(Debug, Default)]
pub(super) struct ConfigMemo(Mutex<HashMap<String, MemoizedConfig>>);

#[derive(Debug)]
pub(super) struct MemoizedConfig {
    pub(super) metadata: String,
    pub(super) config: String,
    pub(super) effective: SharedConfig,
}

impl ConfigMemo {
    /// `app`'s effective config, from its row's `metadata` and `config` texts.
    pub(super) fn effective(
        &self,
        app: &str,
        metadata: String,
        config: String,
    ) -> Result<SharedConfig, StoreError> {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = memo.get(app)
            && m.metadata == metadata
            && m.config == config
        {
            return Ok(m.effective.clone());
        }
        let effective = Arc::new(
            app_from_row(app.to_string(), String::new(), &metadata, &config, None)?
                .effective_config(),
        );
        memo.insert(
            app.to_string(),
            MemoizedConfig {
                metadata,
                config,
                effective: effective.clone(),
            },
        );
        Ok(effective)
    }
}
