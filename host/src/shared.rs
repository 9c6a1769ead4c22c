//! What a host's controller and its units' agents share: the store, the agents'
//! mailboxes, the count of pending hooks, the record of every hook run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::admission::Admission;
use crate::store::{QueuedHook, Store};

/// Called with every hook run, as it ends.
#[derive(Clone)]
pub struct HookObserver(pub Arc<dyn Fn(&HookRecord) + Send + Sync>);

impl std::fmt::Debug for HookObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookObserver")
    }
}

/// One hook run, as recorded in the controller's history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookRecord {
    /// The unit.
    pub unit: String,
    /// Juju's name for the hook.
    pub hook: String,
    /// Whether it ran as leader (what `is_leader` answered in it).
    pub leader: bool,
    /// The lease term it ran under, if leader.
    pub term: Option<u64>,
    /// How it ended.
    pub result: HookResultKind,
    /// `ok`, or why it failed.
    pub outcome: String,
    /// The pod spec revision its commit created, if any.
    pub pod_spec_revision: Option<u64>,
    /// Whether a leader-only operation was refused for leadership in it.
    pub refused_not_leader: bool,
    /// How long it took, from reading its snapshot to the end of its commit (or of its
    /// failure). In JSON, `duration_ms`.
    #[serde(rename = "duration_ms", serialize_with = "as_millis")]
    pub duration: Duration,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// How a hook attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookResultKind {
    /// Committed (or had nothing to commit).
    Committed,
    /// Not run: a leader-elected hook whose leadership was already gone.
    Skipped,
    /// The charm returned an error, trapped or ran out of time.
    CharmFailed,
    /// Stopped because the leadership guarantee was ending with no renewal.
    Interrupted,
    /// Its commit met a fence that no longer held.
    Fenced,
    /// What it read changed before its commit: it runs again on fresh data.
    Stale,
    /// The store could not be reached.
    StoreUnavailable,
}

impl HookResultKind {
    /// Its name, as in the history and the `result` label of the hook metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HookResultKind::Committed => "committed",
            HookResultKind::Skipped => "skipped",
            HookResultKind::CharmFailed => "charm-failed",
            HookResultKind::Interrupted => "interrupted",
            HookResultKind::Fenced => "fenced",
            HookResultKind::Stale => "stale",
            HookResultKind::StoreUnavailable => "store-unavailable",
        }
    }
}

/// The number of hooks queued or running across all units; zero means idle.
pub(crate) struct Pending(pub(crate) watch::Sender<usize>);

impl Pending {
    pub(crate) fn add(&self, n: usize) {
        self.0.send_modify(|p| *p += n);
    }

    pub(crate) fn done(&self, n: usize) {
        self.0.send_modify(|p| *p = p.saturating_sub(n));
    }
}

/// What the controller and its agents share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) mailboxes: Mutex<BTreeMap<String, mpsc::UnboundedSender<QueuedHook>>>,
    pub(crate) pending: Pending,
    pub(crate) guarantee_margin: Duration,
    pub(crate) history: Option<Mutex<Vec<HookRecord>>>,
    pub(crate) observer: Option<HookObserver>,
    /// The places for this host's hooks.
    pub(crate) admission: Admission,
}

impl Shared {
    pub(crate) fn record(&self, record: HookRecord) {
        if let Some(observer) = &self.observer {
            (observer.0)(&record);
        }
        if let Some(history) = &self.history {
            history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
        }
    }

    /// Forgets a unit whose agent ended because the unit left the model.
    pub(crate) fn forget(&self, unit: &str) {
        self.mailboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(unit);
    }

    /// Hands hooks the store queued to their units' agents.
    pub(crate) fn notify(&self, queued: Vec<QueuedHook>) {
        let mailboxes = self.mailboxes.lock().unwrap_or_else(|e| e.into_inner());
        for hook in queued {
            // A unit with no agent here (crashed, or run by another host) finds the hook
            // in the store when its agent starts.
            if let Some(tx) = mailboxes.get(&hook.unit) {
                self.pending.add(1);
                if tx.send(hook).is_err() {
                    self.pending.done(1);
                }
            }
        }
    }
}

/// A stable 64-bit hash (FNV-1a), to derive per-unit seeds.
pub(crate) fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
