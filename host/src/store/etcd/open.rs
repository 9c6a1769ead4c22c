//! Connecting to etcd and opening a model at a prefix: made only where no model is, above
//! or below, and moved from an older format first.

use super::*;

/// The meta keys a model at a prefix enclosing `prefix` would have: `a/meta` and `a/b/meta`
/// for `a/b/c`.
pub(super) fn enclosing_metas(prefix: &str) -> Vec<String> {
    let segments: Vec<&str> = prefix.split('/').collect();
    (1..segments.len())
        .map(|n| format!("{}/meta", segments[..n].join("/")))
        .collect()
}

impl EtcdStore {
    /// Connects to etcd and opens model `model` under `config.prefix`, creating it if the
    /// prefix is empty: [`connect_with`](Self::connect_with) and [`OpenMode::Create`].
    pub async fn connect(config: EtcdConfig, model: &str) -> Result<EtcdStore, StoreError> {
        Self::connect_with(config, model, OpenMode::Create).await
    }

    /// Connects to etcd and opens model `model` under `config.prefix`, as `mode` says. A
    /// model is created only at a prefix with nothing under it and no model above it
    /// (checked and created in one transaction); without [`OpenMode::Create`] a prefix that
    /// holds no model is [`StoreError::NotFound`], and nothing is written. Data of another
    /// program, a newer host or another model under the prefix is refused
    /// ([`StoreError::Incompatible`]) and left untouched. A certificate, password or role
    /// etcd refuses is [`StoreError::Denied`], naming which, and nothing is written.
    pub async fn connect_with(
        config: EtcdConfig,
        model: &str,
        mode: OpenMode,
    ) -> Result<EtcdStore, StoreError> {
        let options = access::connect_options(&config)?;
        let (answering, down) = members::survey(&config).await;
        for (member, why) in &down {
            tracing::warn!(%member, "etcd member not answering ({why}): sending it no requests until it does");
        }
        // An error names the members that did not answer, if any: the likely cause.
        let named = |e: StoreError| match e {
            StoreError::Unavailable(message) if !down.is_empty() => {
                let down: Vec<String> =
                    down.iter().map(|(m, why)| format!("{m} ({why})")).collect();
                StoreError::Unavailable(format!("{message}; not answering: {}", down.join(", ")))
            }
            other => other,
        };
        let client = match Client::connect(&answering, Some(options)).await {
            Ok(client) => client,
            Err(e) => return Err(named(access::explain(e, &config).await)),
        };
        let members = members::probe_members(client.clone(), &config, &answering);
        let mut store = EtcdStore {
            model: model.to_string(),
            prefix: format!("{}/", config.prefix),
            client,
            config,
            keepers: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            signals: Mutex::new(HashMap::new()),
            watching: OnceLock::new(),
            lease_signals: LeaseSignals::default(),
            watching_leases: OnceLock::new(),
            app_docs: Mutex::new(HashMap::new()),
            _members: members,
            _compactor: None,
        };
        store.open_model(mode).await.map_err(named)?;
        store._compactor = store
            .config
            .compaction
            .filter(|_| compaction::may_compact(&store.config))
            .map(|every| {
                compaction::compact_history(store.client.clone(), store.key("compaction"), every)
            });
        Ok(store)
    }

    pub(super) async fn open_model(&self, mode: OpenMode) -> Result<(), StoreError> {
        let key = self.key("meta");
        // The first request: a refused certificate, password or permission shows here, and
        // is said as such rather than retried as etcd being away.
        let found = match mode {
            OpenMode::Create => self.create_model().await?,
            OpenMode::Existing | OpenMode::ReadOnly => {
                match self.client.kv_client().get(key.as_str(), None).await {
                    Ok(resp) => resp.kvs().first().cloned(),
                    Err(e) => return Err(access::explain(e, &self.config).await),
                }
            }
        };
        let Some(kv) = found else {
            if mode == OpenMode::Create {
                return Ok(());
            }
            return Err(StoreError::NotFound(format!(
                "no model at etcd://{}/{}: `charm-host deploy` or `charm-host run BUNDLE` creates one",
                self.config.endpoints.join(","),
                self.config.prefix
            )));
        };
        let kv = &kv;
        let theirs: MetaDoc = serde_json::from_slice(kv.value()).map_err(|_| {
            StoreError::Incompatible(format!(
                "etcd prefix {}: holds data of another program",
                self.prefix
            ))
        })?;
        if theirs.program != PROGRAM {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds data of {}",
                self.prefix, theirs.program
            )));
        }
        if theirs.format > FORMAT {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: written by a newer host (format {}, this host reads up to {FORMAT})",
                self.prefix, theirs.format
            )));
        }
        if theirs.model != self.model {
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds model {}, not {}",
                self.prefix, theirs.model, self.model
            )));
        }
        if theirs.format < 2 {
            if mode == OpenMode::ReadOnly {
                return Err(StoreError::Incompatible(format!(
                    "etcd prefix {}: format {}, older than this host's {FORMAT}: a command that \
                     changes the model, or `charm-host run`, moves it forward; one that only \
                     reads it writes nothing",
                    self.prefix, theirs.format
                )));
            }
            self.migrate_queues(kv).await?;
            tracing::info!(prefix = %self.prefix, "model moved to format {FORMAT}: a key per queued hook");
        }
        Ok(())
    }

    /// Creates the model's meta key if the prefix is free: nothing under it, and no model
    /// at a prefix above it (one transaction checks both and writes). `None` once created;
    /// the meta key found otherwise. A prefix above holding no model, or one this host's
    /// user may not read, is not a model's.
    pub(super) async fn create_model(&self) -> Result<Option<KeyValue>, StoreError> {
        let key = self.key("meta");
        let mine = MetaDoc {
            program: PROGRAM.into(),
            format: FORMAT,
            model: self.model.clone(),
        };
        let above = enclosing_metas(&self.config.prefix);
        let attempt = |above: &[String]| {
            let mut compares = vec![
                Compare::create_revision(self.prefix.as_str(), CompareOp::Equal, 0).with_prefix(),
            ];
            compares.extend(
                above
                    .iter()
                    .map(|meta| Compare::create_revision(meta.as_str(), CompareOp::Equal, 0)),
            );
            let mut otherwise = vec![TxnOp::get(key.as_str(), None)];
            otherwise.extend(
                above.iter().map(|meta| {
                    TxnOp::get(meta.as_str(), Some(GetOptions::new().with_keys_only()))
                }),
            );
            otherwise.push(TxnOp::get(
                self.prefix.as_str(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_limit(1),
                ),
            ));
            Txn::new()
                .when(compares)
                .and_then([TxnOp::put(key.as_str(), encode(&mine), None)])
                .or_else(otherwise)
        };
        let mut checked_above = above.as_slice();
        let resp = loop {
            match self.client.kv_client().txn(attempt(checked_above)).await {
                Ok(resp) => break resp,
                // A user whose role covers only this prefix may not read above it: another
                // model there is not one its user could have made.
                Err(e)
                    if !checked_above.is_empty() && access::refusal(&e, &self.config).is_some() =>
                {
                    tracing::debug!(
                        "cannot look above etcd prefix {} for another model: {e}",
                        self.prefix
                    );
                    checked_above = &[];
                }
                Err(e) => return Err(access::explain(e, &self.config).await),
            }
        };
        if resp.succeeded() {
            return Ok(None);
        }
        let gets: Vec<_> = resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                _ => None,
            })
            .collect();
        if let Some(Some(meta)) = gets.first() {
            return Ok(Some(meta.clone()));
        }
        let shown = |kv: &KeyValue| String::from_utf8_lossy(kv.key()).into_owned();
        if let Some(meta) = gets[1..gets.len() - 1].iter().flatten().next() {
            let meta = shown(meta);
            return Err(StoreError::Incompatible(format!(
                "etcd prefix {}: inside the model at {}; a model's prefix lies beside others, not inside one",
                self.config.prefix,
                meta.strip_suffix("/meta").unwrap_or(&meta)
            )));
        }
        match gets.last() {
            Some(Some(first)) => Err(StoreError::Incompatible(format!(
                "etcd prefix {}: holds keys but no model ({} among them): a model at a prefix above \
                 another's, or another program's data; choose a prefix with nothing under it",
                self.config.prefix,
                shown(first)
            ))),
            _ => Err(StoreError::Unavailable(format!(
                "etcd prefix {}: changed while the model was being created; try again",
                self.config.prefix
            ))),
        }
    }

    /// Moves format 1's queues (`queues/<unit>`, each a list) to a key per hook, then marks
    /// the model format 2. Each unit's hooks are written while its list is still there, the
    /// list deleted last: a migration cut short is taken up again from what is left, and
    /// two hosts migrating at once write the same keys, once.
    pub(super) async fn migrate_queues(&self, meta: &KeyValue) -> Result<(), StoreError> {
        let prefix = self.key("queues/");
        let lists = self
            .client
            .kv_client()
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(unavailable)?;
        for kv in lists.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let unit = &key[prefix.len()..];
            let queue: Vec<QueueEntry> = decode_value(&key, kv.value())?;
            // Each write only while the list is as read: once another host has moved it
            // (and its agents perhaps run some of its hooks) nothing is written again.
            for batch in queue.chunks(DELIVERY_HOOKS) {
                let puts = batch
                    .iter()
                    .map(|e| TxnOp::put(self.hook_key(unit, e.seq), encode(&e.hook), None))
                    .collect();
                if !self.write(vec![unchanged(&key, Some(kv))], puts).await? {
                    break;
                }
            }
            let delete = vec![TxnOp::delete(key.as_str(), None)];
            self.write(vec![unchanged(&key, Some(kv))], delete).await?;
        }
        let meta_key = self.key("meta");
        let mine = MetaDoc {
            program: PROGRAM.into(),
            format: FORMAT,
            model: self.model.clone(),
        };
        let put = vec![TxnOp::put(meta_key.as_str(), encode(&mine), None)];
        self.write(vec![unchanged(&meta_key, Some(meta))], put)
            .await?;
        Ok(())
    }
}
