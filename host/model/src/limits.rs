//! How much one hook may write: the same limits on every store and in the SDK's testing
//! harness, so a charm is refused alike wherever it runs.
//!
//! The limits are chosen so that any commit within them fits etcd's default request size
//! (1.5 MiB, `--max-request-bytes`): a hook writes at most [`HOOK_WRITES_MAX`] bytes, each
//! string counted as the stores encode it (JSON, so a control character counts 2 to 6
//! bytes), which leaves room for the records and queued hooks the commit also writes.
//! Single items are bounded
//! on their own so a charm learns which write is at fault, at the call that made it where
//! the call can fail ([`crate::access`]) and at the commit otherwise ([`check`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::records::{Bag, BagWrites, Changes, PodSpecWrite, RelationId};

/// The longest status message, in bytes.
pub const STATUS_MESSAGE_MAX: usize = 4 << 10;
/// The longest workload version, in bytes.
pub const WORKLOAD_VERSION_MAX: usize = 1 << 10;
/// The longest key of a relation bag, the leader settings or stored state, in bytes.
pub const KEY_MAX: usize = 256;
/// The longest value of a relation bag, the leader settings or stored state, in bytes.
/// Large enough for a list of every unit of a 10,000-unit application (a database's
/// `allowed-units`, about 150 KiB), small enough that a hook may write two of them.
pub const VALUE_MAX: usize = 256 << 10;
/// The most keys one hook may write, over every bag and stored state.
pub const KEYS_PER_HOOK: usize = 1_000;
/// The largest pod spec with its Kubernetes resources, in bytes of JSON.
pub const POD_SPEC_MAX: usize = 256 << 10;
/// The most an action may report: results, failure and messages, in bytes.
pub const ACTION_OUTPUT_MAX: usize = 64 << 10;
/// The most one hook may write in all, in bytes: every key and value, status message,
/// workload version, pod spec and action output.
pub const HOOK_WRITES_MAX: usize = 512 << 10;

/// The most the bags one hook writes (relation bags, leader settings) and the unit's stored
/// state may hold in all once written, in bytes: a store may rewrite each whole in the
/// commit (etcd's does), so this, not only what the hook wrote, must fit one request.
pub const WRITTEN_BAGS_MAX: usize = 768 << 10;

/// A limit a hook's writes exceed. Nothing of the hook is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// One item, or the hook's writes in all, are too large.
    #[error("{what} is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// What is too large, such as `the value of leader setting "huge"`.
        what: String,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The hook writes too many keys. (How many is not said: the host stops counting
    /// past the limit.)
    #[error("the hook writes more than {limit} keys")]
    TooManyKeys {
        /// The limit.
        limit: usize,
    },
}

/// `size` within `limit`, or what exceeds it.
/// `s`'s size as the stores keep it: JSON-escaped, without the quotes.
///
/// ```
/// use charm_model::limits::stored_len;
///
/// assert_eq!(stored_len("abc"), 3);
/// assert_eq!(stored_len("é\n\u{1}"), 2 + 2 + 6);
/// ```
pub fn stored_len(s: &str) -> usize {
    // Most text escapes nothing: a branch-free count (which the compiler vectorizes) finds
    // that, before the byte-by-byte sizes.
    let escaped = s.bytes().fold(0usize, |n, b| {
        n + usize::from(b < 0x20 || b == b'"' || b == b'\\')
    });
    if escaped == 0 {
        return s.len();
    }
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\t' | b'\r' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum()
}

fn within(what: impl FnOnce() -> String, size: usize, limit: usize) -> Result<(), LimitError> {
    if size > limit {
        Err(LimitError::TooLarge {
            what: what(),
            size,
            limit,
        })
    } else {
        Ok(())
    }
}

/// A status message within [`STATUS_MESSAGE_MAX`].
///
/// ```
/// use charm_model::limits::{status_message, STATUS_MESSAGE_MAX};
///
/// assert!(status_message("ready").is_ok());
/// assert!(status_message(&"x".repeat(STATUS_MESSAGE_MAX + 1)).is_err());
/// ```
pub fn status_message(message: &str) -> Result<(), LimitError> {
    status_message_by(message, stored_len)
}

/// [`status_message`], `len` counting its size.
fn status_message_by(message: &str, len: impl Fn(&str) -> usize) -> Result<(), LimitError> {
    within(
        || "the status message".into(),
        len(message),
        STATUS_MESSAGE_MAX,
    )
}

/// At least [`stored_len`]: escaping makes a byte six at the most. Counted in no time, so
/// that writes within every limit at that size, nearly all, need no exact count.
fn at_most_stored_len(s: &str) -> usize {
    s.len().saturating_mul(6)
}

/// A key and value of `bag` (such as `leader setting`) within [`KEY_MAX`] and
/// [`VALUE_MAX`].
///
/// ```
/// use charm_model::limits::{setting, VALUE_MAX};
///
/// assert!(setting("leader setting", "k", Some("v")).is_ok());
/// let err = setting("leader setting", "k", Some(&"x".repeat(VALUE_MAX + 1))).unwrap_err();
/// assert_eq!(err.to_string(), "the value of leader setting \"k\" is 262145 bytes; the limit is 262144 bytes");
/// ```
pub fn setting(bag: &str, key: &str, value: Option<&str>) -> Result<(), LimitError> {
    setting_len(bag, key, value, stored_len).map(drop)
}

/// [`setting`], and the key's and value's size, `len` counting them.
fn setting_len(
    bag: impl fmt::Display,
    key: &str,
    value: Option<&str>,
    len: impl Fn(&str) -> usize + Copy,
) -> Result<usize, LimitError> {
    let key_len = len(key);
    within(
        || format!("the key of {bag} {:?}…", cut(key, 32)),
        key_len,
        KEY_MAX,
    )?;
    let value_len = value.map_or(0, len);
    within(
        || format!("the value of {bag} {key:?}"),
        value_len,
        VALUE_MAX,
    )?;
    Ok(key_len + value_len)
}

/// `s`'s first `max` bytes at most, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What one hook wrote, as the limits count it: the host's [`Changes`] or the testing
/// harness's buffer, seen alike.
#[derive(Debug, Default)]
pub struct HookWrites<'a> {
    /// Each bag written, with its name.
    pub bags: Vec<(BagName, &'a BagWrites)>,
    /// The messages of the statuses set.
    pub status_messages: Vec<&'a str>,
    /// The workload version set.
    pub workload_version: Option<&'a str>,
    /// The pod spec set.
    pub pod_spec: Option<&'a PodSpecWrite>,
    /// The action's results.
    pub action_results: Option<&'a BTreeMap<String, String>>,
    /// The action's failure message and progress messages.
    pub action_messages: Vec<&'a str>,
}

impl<'a> HookWrites<'a> {
    /// The writes of a hook, from its bags (each relation's unit and application bags, the
    /// leader settings, the stored state) and the rest, as [`HookWrites`] has them.
    pub fn of(bags: HookBags<'a>, rest: HookWrites<'a>) -> Self {
        let mut named: Vec<(BagName, &BagWrites)> =
            Vec::with_capacity(bags.unit_bags.len() + bags.app_bags.len() + 2);
        named.extend((bags.unit_bags.iter()).map(|(id, w)| (BagName::Unit(*id), w)));
        named.extend((bags.app_bags.iter()).map(|(id, w)| (BagName::App(*id), w)));
        named.push((BagName::Leader, bags.leader_data));
        named.push((BagName::Stored, bags.stored));
        HookWrites {
            bags: named,
            ..rest
        }
    }
}

/// A bag a hook writes, as a limit it exceeds names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BagName {
    /// The unit's bag in a relation.
    Unit(RelationId),
    /// The application's bag in a relation.
    App(RelationId),
    /// The leader settings.
    Leader,
    /// The unit's stored state.
    Stored,
}

impl fmt::Display for BagName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BagName::Unit(id) => write!(f, "relation {id} unit bag setting"),
            BagName::App(id) => write!(f, "relation {id} application bag setting"),
            BagName::Leader => f.write_str("leader setting"),
            BagName::Stored => f.write_str("stored state"),
        }
    }
}

/// The bags one hook writes.
#[derive(Debug, Clone, Copy)]
pub struct HookBags<'a> {
    /// Its unit's bag in each relation.
    pub unit_bags: &'a BTreeMap<RelationId, BagWrites>,
    /// Its application's bag in each relation.
    pub app_bags: &'a BTreeMap<RelationId, BagWrites>,
    /// The leader settings.
    pub leader_data: &'a BagWrites,
    /// The unit's stored state.
    pub stored: &'a BagWrites,
}

impl<'a> From<&'a Changes> for HookWrites<'a> {
    fn from(changes: &'a Changes) -> Self {
        let action = changes.action.as_ref();
        HookWrites::of(
            HookBags {
                unit_bags: &changes.unit_bags,
                app_bags: &changes.app_bags,
                leader_data: &changes.leader_data,
                stored: &changes.stored,
            },
            HookWrites {
                bags: Vec::new(),
                status_messages: (changes.unit_status.iter().chain(&changes.app_status))
                    .map(|s| s.message.as_str())
                    .collect(),
                workload_version: changes.workload_version.as_deref(),
                pod_spec: changes.pod_spec.as_deref(),
                action_results: action.map(|a| &a.results),
                action_messages: (action.into_iter())
                    .flat_map(|a| a.failure.iter().chain(&a.log).map(String::as_str))
                    .collect(),
            },
        )
    }
}

/// Checks a hook's writes against every limit: each item, the number of keys, and the
/// total. The first limit exceeded is named.
///
/// ```
/// use charm_model::limits::{check, HookWrites, KEYS_PER_HOOK};
/// use charm_model::{BagWrites, Changes};
///
/// let mut changes = Changes::default();
/// changes.stored.insert("k".into(), Some("v".into()));
/// assert!(check(&HookWrites::from(&changes)).is_ok());
///
/// for i in 0..=KEYS_PER_HOOK {
///     changes.stored.insert(format!("k{i}"), Some("v".into()));
/// }
/// assert!(check(&HookWrites::from(&changes)).is_err());
/// ```
pub fn check(writes: &HookWrites<'_>) -> Result<(), LimitError> {
    // Within every limit at the most their sizes can be, the writes are within them at
    // their exact sizes; only past that are the strings counted exactly.
    check_by(writes, at_most_stored_len).or_else(|_| check_by(writes, stored_len))
}

/// [`check`], `len` counting each string's size.
fn check_by(writes: &HookWrites<'_>, len: impl Fn(&str) -> usize + Copy) -> Result<(), LimitError> {
    let mut total = 0usize;
    let mut keys = 0usize;
    for (bag, bag_writes) in &writes.bags {
        for (key, value) in bag_writes.iter() {
            total += setting_len(bag, key, value.as_deref(), len)?;
        }
        keys += bag_writes.len();
    }
    if keys > KEYS_PER_HOOK {
        return Err(LimitError::TooManyKeys {
            limit: KEYS_PER_HOOK,
        });
    }
    for message in &writes.status_messages {
        status_message_by(message, len)?;
        total += len(message);
    }
    if let Some(version) = writes.workload_version {
        within(
            || "the workload version".into(),
            len(version),
            WORKLOAD_VERSION_MAX,
        )?;
        total += len(version);
    }
    if let Some(spec) = writes.pod_spec {
        let size = spec.encoded_len();
        within(|| "the pod spec".into(), size, POD_SPEC_MAX)?;
        total += size;
    }
    let action = writes
        .action_results
        .iter()
        .flat_map(|r| r.iter())
        .map(|(k, v)| len(k) + len(v))
        .chain(writes.action_messages.iter().map(|m| len(m)))
        .sum::<usize>();
    within(|| "the action's output".into(), action, ACTION_OUTPUT_MAX)?;
    total += action;
    within(|| "the hook's writes".into(), total, HOOK_WRITES_MAX)
}

/// The bags a hook writes (relation bags, leader settings), each as it stands before the
/// hook (`None`: empty) with the hook's writes to it, and the unit's stored state likewise,
/// within [`WRITTEN_BAGS_MAX`] in all once written. Stored state counts even when the hook
/// does not write it: the unit's record that holds it is rewritten by most commits.
///
/// ```
/// use charm_model::limits::{written_bags, WRITTEN_BAGS_MAX};
/// use charm_model::{Bag, BagWrites};
///
/// let full: Bag = [("old".to_string(), "x".repeat(WRITTEN_BAGS_MAX))].into();
/// let none = BagWrites::new();
/// let add: BagWrites = [("new".to_string(), Some("y".into()))].into();
/// assert!(written_bags([(Some(&full), &add)], (&Bag::new(), &none)).is_err());
/// let drop: BagWrites = [("old".to_string(), None)].into();
/// assert!(written_bags([(Some(&full), &drop)], (&Bag::new(), &none)).is_ok());
/// // Stored state as it stands counts, written to or not.
/// assert!(written_bags([(None, &add)], (&full, &none)).is_err());
/// ```
pub fn written_bags<'a>(
    bags: impl IntoIterator<Item = (Option<&'a Bag>, &'a BagWrites)> + Clone,
    stored: (&'a Bag, &'a BagWrites),
) -> Result<(), LimitError> {
    if written_size(bags.clone(), stored, at_most_stored_len) <= WRITTEN_BAGS_MAX {
        return Ok(());
    }
    within(
        || "what the bags the hook writes hold once written".into(),
        written_size(bags, stored, stored_len),
        WRITTEN_BAGS_MAX,
    )
}

/// What [`written_bags`] counts, `len` counting each string's size.
fn written_size<'a>(
    bags: impl IntoIterator<Item = (Option<&'a Bag>, &'a BagWrites)>,
    stored: (&'a Bag, &'a BagWrites),
    len: impl Fn(&str) -> usize + Copy,
) -> usize {
    let size = |base: Option<&Bag>, writes: &BagWrites| -> usize {
        let kept = base
            .into_iter()
            .flatten()
            .filter(|(k, _)| !writes.contains_key(*k))
            .map(|(k, v)| len(k) + len(v));
        let written = writes
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| len(k) + len(v)));
        kept.chain(written).sum::<usize>()
    };
    bags.into_iter()
        .filter(|(_, writes)| !writes.is_empty())
        .map(|(base, writes)| size(base, writes))
        .sum::<usize>()
        + size(Some(stored.0), stored.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Status;

    fn status(message: String) -> Status {
        Status {
            kind: crate::records::StatusKind::Active,
            message,
        }
    }

    #[test]
    fn the_sixfold_bound_passes_only_what_the_exact_count_passes() {
        let one = |value: String| {
            let changes = Changes {
                stored: [("k".to_string(), Some(value))].into(),
                ..Default::default()
            };
            let stored = changes.stored.clone();
            (
                check(&HookWrites::from(&changes)),
                written_bags([], (&Bag::new(), &stored)),
            )
        };
        // Plain text up to the limit: past the bound, counted exactly, accepted.
        let (hook, bags) = one("x".repeat(VALUE_MAX));
        assert_eq!((hook, bags), (Ok(()), Ok(())));
        // Control characters: within the bound at a sixth of the limit, refused past it.
        assert_eq!(one("\u{1}".repeat(VALUE_MAX / 6)).0, Ok(()));
        let err = one("\u{1}".repeat(VALUE_MAX / 6 + 1)).0.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the value of stored state \"k\""),
            "{err}"
        );
        // Two bytes each: past the bound, and refused by the exact count.
        assert!(one("\n".repeat(VALUE_MAX / 2 + 1)).0.is_err());
        let big = "\n".repeat(WRITTEN_BAGS_MAX / 4);
        let stored: Bag = [("a".into(), big.clone()), ("b".into(), big)].into();
        let writes: BagWrites = [("c".into(), Some("d".into()))].into();
        assert!(written_bags([], (&stored, &writes)).is_err());
        let writes: BagWrites = [("b".into(), None)].into();
        assert_eq!(written_bags([], (&stored, &writes)), Ok(()));
    }

    #[test]
    fn each_limit_names_what_exceeds_it() {
        let mut changes = Changes {
            unit_status: Some(status("x".repeat(STATUS_MESSAGE_MAX + 1))),
            ..Default::default()
        };
        let err = check(&HookWrites::from(&changes)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the status message is 4097 bytes"),
            "{err}"
        );

        changes.unit_status = None;
        changes
            .leader_data
            .insert("huge".into(), Some("x".repeat(32 << 20)));
        let err = check(&HookWrites::from(&changes)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the value of leader setting \"huge\" is 33554432 bytes; the limit is 262144 bytes"
        );

        changes.leader_data.clear();
        changes.workload_version = Some("v".repeat(WORKLOAD_VERSION_MAX + 1));
        assert!(check(&HookWrites::from(&changes)).is_err());
    }

    #[test]
    fn values_each_within_their_limit_may_still_exceed_the_total() {
        let mut changes = Changes::default();
        for i in 0..(HOOK_WRITES_MAX / VALUE_MAX) {
            changes
                .stored
                .insert(format!("k{i}"), Some("x".repeat(VALUE_MAX)));
        }
        let err = check(&HookWrites::from(&changes)).unwrap_err();
        assert!(
            matches!(&err, LimitError::TooLarge { what, .. } if what == "the hook's writes"),
            "{err}"
        );
        changes.stored.pop_first();
        assert_eq!(check(&HookWrites::from(&changes)), Ok(()));
    }

    #[test]
    fn removing_a_key_counts_as_a_key_written() {
        let mut changes = Changes::default();
        for i in 0..=KEYS_PER_HOOK {
            changes.stored.insert(format!("k{i}"), None);
        }
        assert_eq!(
            check(&HookWrites::from(&changes)),
            Err(LimitError::TooManyKeys {
                limit: KEYS_PER_HOOK
            })
        );
    }
}
