//! Watches: a hook queued or a lease gone on another host wakes the agents here.

use super::*;

impl EtcdStore {
    /// The wake-up for `unit`'s agent.
    pub(super) fn signal(&self, unit: &str) -> Arc<Notify> {
        self.signals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(unit.to_string())
            .or_default()
            .clone()
    }

    pub(super) fn wake_all(&self) {
        for signal in self
            .signals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            signal.notify_one();
        }
    }

    /// Watches `hooks/` for as long as the store lives, waking the agent of each unit whose
    /// queue grew. After a broken watch every agent is woken, so none misses a hook.
    pub(super) fn start_watch(self: &Arc<Self>) {
        self.watch_prefix("hooks/", EtcdStore::wake_all, |store, hook, event| {
            if event == EventType::Put
                && let Some((unit, _seq)) = hook.rsplit_once('/')
                && let Some(signal) = store
                    .signals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(unit)
            {
                signal.notify_one();
            }
        });
    }

    /// Watches `leases/` for as long as the store lives: a lease key goes when its holder
    /// releases it or its etcd lease lapses, and the followers of that lease hear of it.
    /// After a broken watch all of them do, so none waits for a lease that went meanwhile.
    pub(super) fn start_lease_watch(self: &Arc<Self>) {
        self.watch_prefix(
            "leases/",
            EtcdStore::bump_all_leases,
            |store, lease, event| {
                if event == EventType::Delete {
                    store.lease_signals.bump(lease);
                }
            },
        );
    }

    pub(super) fn bump_all_leases(&self) {
        self.lease_signals.bump_all();
    }

    /// Watches the keys under `within` (relative to the model's prefix) for as long as the
    /// store lives, calling `on_event` with each event's key (relative to the watched prefix)
    /// and kind, and `on_restart` each time the watch (re)starts: events may have been
    /// missed before it.
    pub(super) fn watch_prefix(
        self: &Arc<Self>,
        within: &str,
        on_restart: fn(&EtcdStore),
        on_event: fn(&EtcdStore, &str, EventType),
    ) {
        let weak = Arc::downgrade(self);
        let mut watch = self.client.watch_client();
        let prefix = self.key(within);
        tokio::spawn(async move {
            loop {
                let stream = watch
                    .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix()))
                    .await;
                let Some(store) = weak.upgrade() else { return };
                on_restart(&store);
                drop(store);
                let mut stream = match stream {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!("etcd watch on {prefix} failed: {e}; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                // A broken or cancelled watch ends the stream: start another.
                while let Ok(Some(resp)) = stream.message().await {
                    let Some(store) = weak.upgrade() else { return };
                    for event in resp.events() {
                        let Some(kv) = event.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key());
                        if let Some(name) = key.strip_prefix(prefix.as_str()) {
                            on_event(&store, name, event.event_type());
                        }
                    }
                }
                if weak.strong_count() == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}
