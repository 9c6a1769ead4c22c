//! Where each record lives: the keys under the model's prefix.

use super::*;

impl EtcdStore {
    pub(super) fn key(&self, path: impl std::fmt::Display) -> String {
        format!("{}{path}", self.prefix)
    }

    pub(super) fn module_key(&self, hash: &str) -> String {
        self.key(format_args!("modules/{hash}"))
    }

    pub(super) fn module_chunk_key(&self, hash: &str, n: usize) -> String {
        self.key(format_args!("modules/{hash}/{n:04}"))
    }

    pub(super) fn app_key(&self, app: &str) -> String {
        self.key(format_args!("apps/{app}"))
    }

    pub(super) fn unit_key(&self, unit: &str) -> String {
        self.key(format_args!("units/{unit}"))
    }

    /// The key of the hook queued on `unit` as `seq`.
    pub(super) fn hook_key(&self, unit: &str, seq: u64) -> String {
        self.key(format_args!("hooks/{unit}/{seq:020}"))
    }

    /// The prefix of the hooks queued on `unit`.
    pub(super) fn hooks_prefix(&self, unit: &str) -> String {
        self.key(format_args!("hooks/{unit}/"))
    }

    pub(super) fn logs_key(&self, unit: &str) -> String {
        self.key(format_args!("logs/{unit}"))
    }

    /// Which of the unit's queued hooks its agent failed ([`ModelTx::note_failing`]).
    pub(super) fn failing_key(&self, unit: &str) -> String {
        self.key(format_args!("failing/{unit}"))
    }

    pub(super) fn lease_key(&self, app: &str) -> String {
        self.key(format_args!("leases/{app}"))
    }

    pub(super) fn relation_key(&self, id: RelationId) -> String {
        self.key(format_args!("relations/{id:010}"))
    }

    pub(super) fn unit_bag_key(&self, id: RelationId, unit: &str) -> String {
        self.key(format_args!("bags/{id:010}/unit/{unit}"))
    }

    pub(super) fn app_bag_key(&self, id: RelationId, app: &str) -> String {
        self.key(format_args!("bags/{id:010}/app/{app}"))
    }

    pub(super) fn bags_prefix(&self, id: RelationId) -> String {
        self.key(format_args!("bags/{id:010}/"))
    }

    pub(super) fn leader_data_key(&self, app: &str) -> String {
        self.key(format_args!("leader-data/{app}"))
    }

    pub(super) fn app_status_key(&self, app: &str) -> String {
        self.key(format_args!("app-status/{app}"))
    }

    pub(super) fn action_key(&self, id: u64) -> String {
        self.key(format_args!("actions/{id:020}"))
    }

    pub(super) fn pod_spec_key(&self, app: &str) -> String {
        self.key(format_args!("pod-specs/{app}"))
    }

    pub(super) fn outbox_key(&self, seq: u64) -> String {
        self.key(format_args!("outbox/{seq:020}"))
    }

    pub(super) fn outbox_cursor_key(&self, outbox: &str) -> String {
        let id = outbox.rsplit('/').next().unwrap_or_default();
        self.key(format_args!("outbox-cursor/{id}"))
    }
}
