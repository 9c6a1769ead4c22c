//! Juju's lifecycle holds under any sequence of operator commands interleaved with hooks
//! run in any order across units ([`charm_model::walk`]): random walks on the model core's
//! own records, each checked after every step and once settled, failures shrunk to a
//! minimal walk. `LIFECYCLE_WALKS` sets how many walks (10,000 by default).
//!
//! Each walk that a shrink ever found stays below as a named regression test.

use charm_model::walk::{MemoryModel, Op, Walk};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    any::<(u8, u8, u8)>().prop_map(|(kind, a, b)| Op::drawn(kind, a, b))
}

fn walks() -> u32 {
    std::env::var("LIFECYCLE_WALKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// Runs `ops` and settles; the first broken rule, if any.
fn walk(ops: &[Op]) -> Result<Walk<MemoryModel>, String> {
    let mut walk = Walk::new(MemoryModel::default());
    for op in ops {
        walk.apply(op).map_err(|e| e.to_string())?;
    }
    walk.settle().map_err(|e| e.to_string())?;
    Ok(walk)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: walks(),
        max_shrink_iters: 20_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_walk_keeps_the_lifecycle(ops in prop::collection::vec(op(), 0..60)) {
        if let Err(broken) = walk(&ops) {
            prop_assert!(false, "{broken}");
        }
    }
}

fn run(pick: usize, write: bool) -> Op {
    Op::Run {
        pick,
        write,
        fail: false,
    }
}

/// The walk must keep the lifecycle; the history it ran, for a test to look at.
fn keeps(ops: &[Op]) -> Vec<charm_model::lifecycle::Ran> {
    match walk(ops) {
        Ok(walk) => walk.history,
        Err(broken) => panic!("{broken}"),
    }
}

/// Found first: a relation removed while PostgreSQL's side still wrote its bags. Its
/// relation-departed wrote, relation-changed was queued on the other side after that
/// side's relation-broken, and the relation was never reaped.
#[test]
fn a_relation_being_removed_fires_no_relation_changed_and_is_reaped() {
    let history = keeps(&[
        Op::Deploy { app: 2, units: 1 },
        Op::Deploy { app: 0, units: 1 },
        Op::AddUnit { app: 2 },
        Op::RemoveRelation { app: 0 },
        run(2, false),
        run(2, false),
        run(2, false),
        Op::Elect { app: 0, pick: 0 },
        run(2, false),
        Op::Deploy { app: 1, units: 2 },
        run(7, false),
        Op::Relate { app: 0 },
        Op::RemoveRelation { app: 2 },
        run(7, true),
    ]);
    let broken = history
        .iter()
        .filter(|r| matches!(r.hook, charm_model::Hook::RelationBroken(_)))
        .count();
    assert!(
        broken >= 3,
        "every unit of both sides broke the relation: {history:?}"
    );
}

/// Found second: leader-elected, which the agent runs before the head of the queue, saw
/// the remote unit that the head's relation-joined was to bring.
#[test]
fn leader_elected_does_not_see_a_unit_before_its_relation_joined() {
    keeps(&[
        Op::Deploy { app: 2, units: 1 },
        run(0, false),
        run(0, false),
        Op::AddUnit { app: 2 },
        run(0, false),
        run(6, false),
    ]);
}

/// Found third: stop and remove still saw the relations the leaving unit had broken.
#[test]
fn a_leaving_unit_sees_no_relation_after_its_relation_broken() {
    keeps(&[
        Op::Deploy { app: 0, units: 1 },
        Op::RemoveUnit { app: 0, pick: 0 },
    ]);
}

/// Found fourth: a leaving unit's bag writes queued relation-changed about it on a unit
/// added after it began leaving, which never joined it.
#[test]
fn a_leaving_units_writes_reach_no_one() {
    keeps(&[
        Op::Deploy { app: 2, units: 1 },
        Op::AddUnit { app: 2 },
        run(0, false),
        Op::RemoveUnit { app: 2, pick: 1 },
        run(6, false),
        run(2, false),
        run(2, false),
        run(1, false),
        run(2, false),
        run(1, true),
    ]);
}

/// A new unit runs install, then relation-created for every relation that exists (peers
/// included), leader-elected if it leads, config-changed and start, and only then
/// relation-joined; a peer relation made at deploy time is no exception.
#[test]
fn a_unit_starts_in_jujus_order() {
    let history = keeps(&[
        Op::Deploy { app: 0, units: 0 },
        Op::Deploy { app: 1, units: 1 },
        Op::Relate { app: 0 },
        Op::AddUnit { app: 0 },
        Op::AddUnit { app: 0 },
        Op::Elect { app: 0, pick: 0 },
    ]);
    let names: Vec<String> = history
        .iter()
        .filter(|r| r.unit == "pg/0")
        .map(|r| r.hook.name())
        .collect();
    assert_eq!(
        names[..6],
        [
            "install",
            "replicas-relation-created",
            "db-relation-created",
            "leader-elected",
            "config-changed",
            "start"
        ],
        "{names:?}"
    );
    assert!(
        names[6..]
            .iter()
            .all(|n| n.contains("-relation-joined") || n.contains("-relation-changed")),
        "{names:?}"
    );
}

/// Found on hosts: a relation removed right after it was made ran the relation-joined and
/// -changed still queued (each seeing no remote unit, the relation being dying), then
/// departed every remote unit. Juju departs only the units a unit has joined: nothing of
/// the relation runs here but relation-created and relation-broken.
#[test]
fn a_relation_removed_before_its_units_joined_runs_no_relation_joined() {
    let history = keeps(&[
        Op::Deploy { app: 0, units: 2 },
        Op::Deploy { app: 1, units: 1 },
        Op::Relate { app: 0 },
        Op::RemoveRelation { app: 0 },
    ]);
    let about_db: Vec<String> = history
        .iter()
        .filter(|r| r.hook.relation().is_some_and(|rel| rel.endpoint == "db"))
        .map(|r| format!("{} {}", r.unit, r.hook.name()))
        .collect();
    assert!(
        about_db
            .iter()
            .all(|h| h.ends_with("-created") || h.ends_with("-broken")),
        "{about_db:?}"
    );
    assert_eq!(
        about_db.len(),
        6,
        "created and broken on pg/0, pg/1, web/0: {about_db:?}"
    );
}
