//! What only a file-backed store can show: durability across reopen, refusal of files it
//! must not touch, and two handles on one file.

use std::path::Path;
use std::sync::{Arc, Barrier};

use super::*;

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Hosts (and `status`) started at once on a file that does not exist yet all open it:
/// one creates the schema, the others wait for it and find it whole.
#[test]
fn hosts_opening_a_new_file_at_once_all_open_it() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let start = Arc::new(Barrier::new(4));
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path, "test-model").map(|_| ())
                })
            })
            .collect();
        for opener in openers {
            let opened = opener.join().unwrap();
            assert!(opened.is_ok(), "round {round}: {opened:?}");
        }
    }
}

/// A host keeps each application's list of live units, and each application bag,
/// between snapshots while the file's generation for it stands (schema 8): another
/// host's new unit, its unit marked dying and its write to an application bag show in
/// the next snapshot all the same.
#[tokio::test]
async fn another_hosts_changes_show_in_the_next_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let here = SqliteStore::open(&path, "test-model").unwrap();
    let m = deploy_at_rest(&here).await;
    let there = SqliteStore::open(&path, "test-model").unwrap();
    another_hosts_unit_changes_show(&here, &there, &m).await;

    let web_bag = |snap: charm_host::model::UnitSnapshot| {
        (*snap.relations[&m.web_db.id].app_bags["web"]).clone()
    };
    assert!(web_bag(here.snapshot("db/0").await.unwrap()).is_empty());
    let fence = hold(&there, "web", "web/0", LONG).await;
    there
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    let bag = web_bag(here.snapshot("db/0").await.unwrap());
    assert_eq!(bag.get("database").map(String::as_str), Some("web"));
    // A key removed moves the generation too.
    let mut removal = Changes::default();
    removal
        .app_bags
        .insert(m.web_db.id, writes(&[("database", None)]));
    there
        .commit("web/0", None, &removal, Some(&fence))
        .await
        .unwrap();
    assert!(web_bag(here.snapshot("db/0").await.unwrap()).is_empty());
}

/// See [`super::a_removal_beside_the_last_relation_broken_leaves_no_relation`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_beside_the_last_relation_broken_leaves_no_relation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let here = SqliteStore::open(&path, "test-model").unwrap();
    deploy_at_rest(&here).await;
    let there = SqliteStore::open(&path, "test-model").unwrap();
    super::a_removal_beside_the_last_relation_broken_leaves_no_relation(&here, &there).await;
}

/// See [`super::last_brokens_at_once_reap_the_relation`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_brokens_at_once_reap_the_relation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let here = SqliteStore::open(&path, "test-model").unwrap();
    deploy_at_rest(&here).await;
    let there = SqliteStore::open(&path, "test-model").unwrap();
    super::last_brokens_at_once_reap_the_relation(&here, &there).await;
}

#[tokio::test]
async fn commits_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let (m, fence, snap, status, spec, relations) = {
        let store = SqliteStore::open(&path, "test-model").unwrap();
        let m = deploy(&store).await;
        let fence = hold(&store, "web", "web/0", LONG).await;
        store
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap();
        store
            .set_hook_error("web/2", Some("boom".into()))
            .await
            .unwrap();
        (
            m,
            fence,
            store.snapshot("web/0").await.unwrap(),
            store.status().await.unwrap(),
            store.pod_spec("web").await.unwrap(),
            store.relations().await.unwrap(),
        )
    };
    let store = SqliteStore::open(&path, "test-model").unwrap();
    assert_eq!(store.snapshot("web/0").await.unwrap(), snap);
    assert_eq!(store.status().await.unwrap(), status);
    assert_eq!(store.pod_spec("web").await.unwrap(), spec);
    assert_eq!(store.relations().await.unwrap(), relations);
    assert_eq!(
        store.units("web").await.unwrap(),
        ["web/0", "web/1", "web/2"]
    );
    assert_eq!(
        store.add_unit("web").await.unwrap(),
        "web/3",
        "unit numbers continue"
    );
    // The lease and its term survive: the old holder can still commit with its fence.
    store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    store.release("web", "web/0").await.unwrap();
    assert_eq!(
        hold(&store, "web", "web/1", LONG).await.term,
        fence.term + 1,
        "terms continue"
    );
    let (next, _) = store
        .add_relation("other-peers", vec![side("other", "cluster")])
        .await
        .unwrap();
    assert_eq!(next.id, m.other_db.id + 1, "relation ids continue");
}

const CRASH_DB: &str = "STORE_CONTRACT_CRASH_DB";

/// I6: a commit the store acknowledged survives the process dying at once after it (no
/// close, no checkpoint: the commit is only in the WAL).
#[tokio::test]
async fn acknowledged_commit_survives_process_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sqlite_only::commit_then_abort",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DB, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(!child.status.success(), "the child did not crash: {stdout}");
    assert!(
        stdout.contains("acknowledged"),
        "the child crashed before its commit: {stdout}"
    );
    let wal = std::fs::metadata(dir.path().join("model.db-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        wal > 0,
        "the commit was checkpointed, so the WAL is not what is being tested"
    );

    let line = |prefix: &str| {
        stdout
            .lines()
            // The test harness may print on the same line before the child does.
            .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("no {prefix:?} line: {stdout}"))
            .to_string()
    };
    let committed: u64 = line("committed ").parse().unwrap();
    let acknowledged: BTreeMap<String, Vec<QueuedHook>> =
        serde_json::from_str(&line("queues ")).unwrap();

    let store = SqliteStore::open(&path, "test-model").unwrap();
    // The queues are as the child left them: the committed hook gone, the rest in order.
    let queues = all_queues(&store, &ALL_UNITS).await;
    assert_eq!(queues, acknowledged);
    let web0 = &queues["web/0"];
    assert!(
        web0.iter().all(|q| q.seq != committed),
        "the committed hook is still queued: {web0:?}"
    );
    assert_eq!(web0[0].hook, Hook::ConfigChanged, "{web0:?}");
    assert_eq!(web0.last().unwrap().hook, Hook::UpdateStatus);
    assert_increasing(web0);
    let web1 = hooks_of(&queues["web/1"]);
    assert_eq!(web1[0], Hook::Install);
    assert_eq!(
        web1[web1.len() - 2..],
        [Hook::UpdateStatus, Hook::LeaderSettingsChanged],
        "the commit's follow-up was lost"
    );
    // A restarted host running the committed hook again applies nothing.
    let rerun = Changes {
        stored: writes(&[("installed", Some("twice"))]),
        ..Changes::default()
    };
    assert_eq!(
        store
            .commit("web/0", Some(committed), &rerun, None)
            .await
            .unwrap_err(),
        CommitError::NotQueued {
            unit: "web/0".into(),
            seq: committed
        }
    );

    let snap = store.snapshot("web/0").await.unwrap();
    assert_eq!(snap.leader_data["secret"], "s3cret");
    assert_eq!(snap.stored["installed"], "yes");
    assert_eq!(
        store.pod_spec("web").await.unwrap().map(|p| p.revision),
        Some(1)
    );
    assert_eq!(
        store
            .leader("web")
            .await
            .unwrap()
            .map(|l| (l.holder, l.term)),
        Some(("web/0".into(), 1))
    );
}

/// The child of `acknowledged_commit_survives_process_crash`.
#[tokio::test]
#[ignore = "run as a child process by acknowledged_commit_survives_process_crash"]
async fn commit_then_abort() {
    let path =
        std::env::var_os(CRASH_DB).expect("run by acknowledged_commit_survives_process_crash");
    let store = SqliteStore::open(Path::new(&path), "test-model").unwrap();
    let m = deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    store
        .enqueue(vec![
            on("web/0", Hook::UpdateStatus),
            on("web/1", Hook::UpdateStatus),
        ])
        .await
        .unwrap();
    // web/0 runs the first hook in its queue (install) and commits it.
    let head = store.queued("web/0").await.unwrap()[0].seq;
    store
        .commit("web/0", Some(head), &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    // What the parent must find after the crash.
    let queues = all_queues(&store, &ALL_UNITS).await;
    use std::io::Write;
    println!("committed {head}");
    println!("queues {}", serde_json::to_string(&queues).unwrap());
    println!("acknowledged");
    std::io::stdout().flush().unwrap();
    std::process::abort();
}

#[tokio::test]
async fn pod_spec_history_has_every_revision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let store = SqliteStore::open(&path, "test-model").unwrap();
    deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    let mut written = Vec::new();
    for i in 0..6u64 {
        let write = PodSpecWrite::new(
            json!({"containers": [{"name": "web", "image": format!("nginx:1.{i}")}]}),
            (i % 2 == 1).then(|| json!({"secrets": [{"name": format!("s{i}")}]})),
        );
        let changes = Changes {
            pod_spec: Some(Arc::new(write.clone())),
            ..Changes::default()
        };
        let done = store
            .commit("web/0", None, &changes, Some(&fence))
            .await
            .unwrap();
        assert_eq!(done.receipt.pod_spec_revision, Some(i + 1));
        // The same spec again makes no revision, and no history row.
        let again = store
            .commit("web/0", None, &changes, Some(&fence))
            .await
            .unwrap();
        assert_eq!(again.receipt.pod_spec_revision, None);
        written.push(write);
    }
    let check = |store: &SqliteStore| {
        let history = store.pod_spec_history("web").unwrap();
        assert_eq!(
            history.iter().map(|r| r.revision).collect::<Vec<_>>(),
            (1..=6).collect::<Vec<_>>(),
            "a revision is missing or repeated"
        );
        for (record, write) in history.iter().zip(&written) {
            assert_eq!(
                (&record.spec, &record.k8s_resources),
                (&write.spec, &write.k8s_resources)
            );
        }
        history
    };
    let history = check(&store);
    assert_eq!(
        store.pod_spec("web").await.unwrap().as_ref(),
        history.last(),
        "the current spec is the last revision"
    );
    assert_eq!(store.pod_spec_history("db").unwrap(), []);
    assert_eq!(
        store.pod_spec_history("nope").unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
    drop(store);
    check(&SqliteStore::open(&path, "test-model").unwrap());
}

/// The first schema, exactly as hosts of version 1 wrote it.
const SCHEMA_V1: &str = include_str!("../../src/store/sqlite/schema/v1.sql");

fn user_version(path: &Path) -> i32 {
    rusqlite::Connection::open(path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn version_1_file_migrates_to_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let spec = json!({"containers": [{"name": "web"}]});
    {
        // A file a version 1 host wrote: one application, one unit, a pod spec at
        // revision 3, some stored state.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        let status = serde_json::to_string(&Status::default()).unwrap();
        conn.execute("INSERT INTO model (id, name) VALUES (1, 'test-model')", [])
            .unwrap();
        conn.execute(
            "INSERT INTO applications (name, charm, metadata, config, status, next_unit)
             VALUES ('web', 'charms/web.wasm', ?1, '{}', ?2, 1)",
            [
                serde_json::to_string(&metadata("web", vec![])).unwrap(),
                status.clone(),
            ],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO units (name, app, number, status, workload_version, hook_error)
             VALUES ('web/0', 'web', 0, ?1, '1.0', NULL)",
            [&status],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO pod_specs (app, revision, spec, k8s_resources)
             VALUES ('web', 3, ?1, NULL)",
            [spec.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO stored_state (unit, key, value) VALUES ('web/0', 'k', 'v')",
            [],
        )
        .unwrap();
    }
    assert_eq!(user_version(&path), 1);

    let store = SqliteStore::open(&path, "test-model").unwrap();
    assert_eq!(user_version(&path), 8);
    let snap = store.snapshot("web/0").await.unwrap();
    assert_eq!(snap.stored["k"], "v", "version 1 data was lost");
    assert_eq!(
        store.application("web").await.unwrap().module,
        None,
        "a migrated application names no kept module"
    );
    assert_eq!(
        store.action(1).await.unwrap_err(),
        StoreError::NotFound("action 1".into()),
        "a migrated file has no actions"
    );
    assert_eq!(snap.elected_term, None);
    assert_eq!(store.queued("web/0").await.unwrap(), []);
    assert_eq!(
        store.pod_spec_history("web").unwrap(),
        [charm_host::model::PodSpecRecord {
            revision: 3,
            spec: spec.clone(),
            k8s_resources: None
        }],
        "the history starts at the revision the file had"
    );

    // Queues work.
    let queued = store
        .enqueue(vec![
            on("web/0", Hook::UpdateStatus),
            on("web/0", Hook::ConfigChanged),
        ])
        .await
        .unwrap();
    assert_eq!(hooks_of(&queued), [Hook::UpdateStatus, Hook::ConfigChanged]);
    assert_eq!(store.queued("web/0").await.unwrap(), queued);
    let changes = Changes {
        elected_term: Some(2),
        ..Changes::default()
    };
    store
        .commit("web/0", Some(queued[0].seq), &changes, None)
        .await
        .unwrap();
    assert_eq!(store.queued("web/0").await.unwrap(), queued[1..]);
    assert!(matches!(
        store
            .commit("web/0", Some(queued[0].seq), &changes, None)
            .await,
        Err(CommitError::NotQueued { .. })
    ));
    assert_eq!(store.snapshot("web/0").await.unwrap().elected_term, Some(2));
    assert_eq!(store.add_unit("web").await.unwrap(), "web/1");
    let deployed = store.queued("web/1").await.unwrap();
    assert_eq!(
        hooks_of(&deployed),
        [Hook::Install, Hook::ConfigChanged, Hook::Start]
    );
    assert!(deployed[0].seq > queued[1].seq);
    // New revisions continue the history.
    let fence = hold(&store, "web", "web/0", LONG).await;
    let new_spec = Changes {
        pod_spec: Some(Arc::new(PodSpecWrite::new(
            json!({"containers": [{"name": "web", "image": "new"}]}),
            None,
        ))),
        ..Changes::default()
    };
    store
        .commit("web/0", None, &new_spec, Some(&fence))
        .await
        .unwrap();
    let revisions: Vec<_> = store
        .pod_spec_history("web")
        .unwrap()
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revisions, [3, 4]);

    // Reopening a current file migrates nothing and keeps the queues.
    drop(store);
    let store = SqliteStore::open(&path, "test-model").unwrap();
    assert_eq!(user_version(&path), 8);
    assert_eq!(store.queued("web/0").await.unwrap(), queued[1..]);
    assert_eq!(store.queued("web/1").await.unwrap(), deployed);
}

/// A version 2 file's relations are indexed by application when it migrates (to 3):
/// snapshots, commits' follow-ups and the duplicate check find them.
#[tokio::test]
async fn version_2_relations_are_indexed_by_application_on_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let (m, before) = {
        let store = SqliteStore::open(&path, "test-model").unwrap();
        let m = deploy_at_rest(&store).await;
        (m, store.snapshot("web/0").await.unwrap())
    };
    assert!(!before.relations.is_empty());
    {
        // What a version 2 host left: no index, no `dying` columns and no logs (version 4),
        // no actions (version 5), no modules (version 6), no queue index by hook (7),
        // no unit generations (8).
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TRIGGER unit_added;
             DROP TRIGGER unit_deleted;
             DROP TRIGGER unit_dying;
             DROP TRIGGER app_bag_key_added;
             DROP TRIGGER app_bag_key_changed;
             DROP TRIGGER app_bag_key_removed;
             DROP TABLE app_bag_generations;
             DROP TABLE generation_counter;
             ALTER TABLE applications DROP COLUMN units_generation;
             DROP INDEX hook_queue_by_hook;
             DROP TABLE relation_apps;
             DROP TABLE modules;
             ALTER TABLE applications DROP COLUMN module;
             ALTER TABLE applications DROP COLUMN dying;
             ALTER TABLE units DROP COLUMN dying;
             ALTER TABLE relations DROP COLUMN dying;
             DROP TABLE unit_logs;
             DROP TABLE actions;
             PRAGMA user_version = 2;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, "test-model").unwrap();
    assert_eq!(user_version(&path), 8);
    assert_eq!(store.snapshot("web/0").await.unwrap(), before);
    let fence = hold(&store, "web", "web/0", LONG).await;
    let committed = store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    assert!(
        committed
            .queued
            .iter()
            .any(|q| matches!(&q.hook, Hook::RelationChanged(r) if r.id == m.web_db.id)),
        "the commit's follow-ups reach the other side: {:?}",
        committed.queued
    );
    let again = store.add_relation("pgsql", before_endpoints(&store, m.web_db.id).await);
    assert!(matches!(again.await, Err(StoreError::AlreadyExists(_))));
}

async fn before_endpoints(
    store: &SqliteStore,
    id: charm_host::model::RelationId,
) -> Vec<RelationEndpoint> {
    let relations = store.relations().await.unwrap();
    relations
        .into_iter()
        .find(|r| r.id == id)
        .unwrap()
        .endpoints
}

/// A host killed while it held the file leaves its write-ahead log and shared-memory
/// index behind; the next host must open it with the logged commits. The crash is the
/// files copied while the writer has them open, the index's header torn.
#[tokio::test]
async fn a_file_left_by_a_killed_host_opens_with_its_logged_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).unwrap();
    let store = SqliteStore::open(&path, "test-model").unwrap();
    let m = deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    store
        .commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let from = dir.path().join(format!("model.db{suffix}"));
        std::fs::copy(&from, crashed.join(format!("model.db{suffix}"))).unwrap();
    }
    drop(store);
    let shm = crashed.join("model.db-shm");
    let len = std::fs::metadata(&shm).unwrap().len() as usize;
    std::fs::write(&shm, vec![0u8; len]).unwrap();
    let reopened = SqliteStore::open(&crashed.join("model.db"), "test-model")
        .expect("a crashed host's file opens");
    let snapshot = reopened.snapshot("web/0").await.unwrap();
    assert_eq!(
        snapshot.leader_data["secret"], "s3cret",
        "the logged commit is there"
    );
}

/// A host killed inside a rollback-journal transaction (as when it dies while first
/// switching a new file to write-ahead logging) leaves a hot journal that a read-only
/// connection may not roll back: the file must still open, rolled back, not be
/// reported unavailable for ever.
#[tokio::test]
async fn a_hot_journal_left_by_a_killed_host_is_rolled_back_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).unwrap();
    let units = {
        let store = SqliteStore::open(&path, "test-model").unwrap();
        deploy(&store).await;
        store.units("web").await.unwrap()
    };
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    // A small cache spills the transaction's pages into the file before it commits.
    conn.execute_batch(
        "PRAGMA cache_size = 1; BEGIN IMMEDIATE;
         CREATE TABLE scratch (b BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
         INSERT INTO scratch SELECT randomblob(4000) FROM n;",
    )
    .unwrap();
    let journal = dir.path().join("model.db-journal");
    assert!(journal.exists(), "the transaction has a journal");
    for suffix in ["", "-journal"] {
        let from = dir.path().join(format!("model.db{suffix}"));
        std::fs::copy(&from, crashed.join(format!("model.db{suffix}"))).unwrap();
    }
    conn.execute_batch("ROLLBACK").unwrap();
    drop(conn);
    let reopened = SqliteStore::open(&crashed.join("model.db"), "test-model")
        .expect("a file with a hot journal opens");
    assert_eq!(reopened.units("web").await.unwrap(), units);
    assert!(!crashed.join("model.db-journal").exists(), "rolled back");
}

/// A store opened to read writes nothing: not the database, not its log, whatever it
/// is asked; a write through it is refused. A missing file, and a file of another
/// model, are refused and nothing is created.
#[tokio::test]
async fn a_store_opened_to_read_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let err = SqliteStore::open_read_only(&path, "test-model").unwrap_err();
    assert!(
        matches!(&err, StoreError::NotFound(m) if m.contains("no model at")),
        "{err:?}"
    );
    assert!(!path.exists(), "a read made the file");

    let writer = SqliteStore::open(&path, "test-model").unwrap();
    deploy_at_rest(&writer).await;
    let log = dir.path().join("model.db-wal");
    let (db_before, log_before) = (bytes(&path), bytes(&log));
    let reader = SqliteStore::open_read_only(&path, "test-model").unwrap();
    let status = reader.status().await.unwrap();
    assert_eq!(status.units.len(), 5, "{status:?}");
    reader.snapshot("web/0").await.unwrap();
    reader.debug_log(None, 10).await.unwrap();
    reader.relations().await.unwrap();
    let refused = reader.add_unit("web").await.unwrap_err();
    assert!(matches!(refused, StoreError::Unavailable(_)), "{refused:?}");
    drop(reader);
    assert_eq!(bytes(&path), db_before, "a read wrote the database");
    assert_eq!(bytes(&log), log_before, "a read wrote the log");
    assert_eq!(writer.units("web").await.unwrap().len(), 3);

    let err = SqliteStore::open_read_only(&path, "other-model").unwrap_err();
    assert!(
        matches!(&err, StoreError::Incompatible(m) if m.contains("other-model")),
        "{err:?}"
    );
}

/// A file of an older schema is not moved forward by a read: refused, naming what
/// moves it, and left as it was.
#[tokio::test]
async fn a_read_does_not_migrate_an_older_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    drop(SqliteStore::open(&path, "test-model").unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    let before = bytes(&path);
    let err = SqliteStore::open_read_only(&path, "test-model").unwrap_err();
    assert!(
        matches!(&err, StoreError::Incompatible(m) if m.contains("schema version 1") && m.contains("moves it forward")),
        "{err:?}"
    );
    assert_eq!(bytes(&path), before, "a read migrated the file");
}

#[tokio::test]
async fn newer_schema_is_refused_and_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    drop(SqliteStore::open(&path, "test-model").unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let before = bytes(&path);
    let err = SqliteStore::open(&path, "test-model").unwrap_err();
    let StoreError::Incompatible(message) = &err else {
        panic!("expected Incompatible, got {err:?}")
    };
    assert!(
        message.contains("schema version 99") && message.contains("newer"),
        "unclear: {message}"
    );
    assert_eq!(bytes(&path), before, "the refused file was modified");
}

#[tokio::test]
async fn garbage_file_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // Not SQLite at all; and a SQLite header followed by garbage.
    let mut noise: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (name, contents) in [
        ("noise.db", noise.clone()),
        ("damaged.db", {
            noise[..16].copy_from_slice(b"SQLite format 3\0");
            noise
        }),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &contents).unwrap();
        let err = SqliteStore::open(&path, "test-model").unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains(name)),
            "{name}: expected Corrupt naming the file, got {err:?}"
        );
        assert_eq!(bytes(&path), contents, "{name} was modified");
    }
}

#[tokio::test]
async fn another_programs_database_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, data BLOB)")
            .unwrap();
    }
    let before = bytes(&path);
    let err = SqliteStore::open(&path, "test-model").unwrap_err();
    assert!(
        matches!(&err, StoreError::Incompatible(m) if m.contains("another program")),
        "{err:?}"
    );
    assert_eq!(bytes(&path), before);
}

#[tokio::test]
async fn another_models_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    drop(SqliteStore::open(&path, "prod").unwrap());
    let err = SqliteStore::open(&path, "staging").unwrap_err();
    assert!(
        matches!(&err, StoreError::Incompatible(m) if m.contains("prod")),
        "{err:?}"
    );
    assert!(SqliteStore::open(&path, "prod").is_ok());
}

#[tokio::test]
async fn in_memory_store_keeps_the_contract() {
    let store = SqliteStore::in_memory("test-model").unwrap();
    let m = deploy(&store).await;
    let fence = hold(&store, "web", "web/0", LONG).await;
    assert_eq!(
        store
            .commit("web/0", None, &leader_hook(&m), Some(&fence))
            .await
            .unwrap()
            .receipt
            .pod_spec_revision,
        Some(1)
    );
}

/// Two handles on one file stand for two host processes: each has its own connection,
/// and only SQLite's file locks keep them apart.
#[tokio::test]
async fn two_handles_contend_for_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let a = Arc::new(SqliteStore::open(&path, "test-model").unwrap());
    let m = deploy_at_rest(a.as_ref()).await;
    let b = Arc::new(SqliteStore::open(&path, "test-model").unwrap());

    // Both claim at once, many times over, for fresh applications. Enough rounds that
    // the two transactions overlap (a claim not under the write lock from its first read
    // fails this test within a few hundred rounds). Errors are collected, not unwrapped,
    // so one thread's failure cannot leave the other waiting at the barrier.
    const ROUNDS: usize = 500;
    let barrier = Arc::new(Barrier::new(2));
    let contend = |store: Arc<SqliteStore>, unit: &'static str| {
        let barrier = barrier.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            (0..ROUNDS)
                .map(|round| {
                    barrier.wait();
                    rt.block_on(store.claim(&format!("race{round}"), unit, LONG))
                })
                .collect::<Vec<_>>()
        })
    };
    let (ta, tb) = (contend(a.clone(), "race/0"), contend(b.clone(), "race/1"));
    let (ca, cb) = (ta.join().unwrap(), tb.join().unwrap());
    for (round, (x, y)) in ca.iter().zip(&cb).enumerate() {
        let (x, y) = match (x, y) {
            (Ok(x), Ok(y)) => (x, y),
            other => panic!("round {round}: a claim failed: {other:?}"),
        };
        let (winner, denied) = match (x, y) {
            (Claim::Held(l), Claim::Denied { holder, term, .. })
            | (Claim::Denied { holder, term, .. }, Claim::Held(l)) => (l, (holder, *term)),
            other => panic!("round {round}: not exactly one holder: {other:?}"),
        };
        assert_eq!(winner.term, 1);
        assert_eq!(
            denied,
            (&winner.holder, 1),
            "round {round}: the denial names another holder"
        );
    }

    // The web lease: a takes it; b is denied, and b's commit under a fence of its own
    // making is rejected and applies nothing, seen from either handle.
    let fence = hold(a.as_ref(), "web", "web/0", LONG).await;
    assert!(matches!(
        b.claim("web", "web/1", LONG).await.unwrap(),
        Claim::Denied { holder, term: 1, .. } if holder == "web/0"
    ));
    let loser = Fence {
        app: "web".into(),
        holder: "web/1".into(),
        term: fence.term,
    };
    let mut changes = leader_hook(&m);
    changes.unit_bags = BTreeMap::from([(m.web_db.id, writes(&[("host", Some("web-1"))]))]);
    let err = b
        .commit("web/1", None, &changes, Some(&loser))
        .await
        .unwrap_err();
    assert_eq!(err, CommitError::Fenced { fence: loser });
    assert_eq!(a.pod_spec("web").await.unwrap(), None);
    assert!(
        written(&a.snapshot("web/1").await.unwrap().relations[&m.web_db.id].unit_bags["web/1"])
            .is_empty()
    );
    // The winner's commit through the other handle is accepted and visible to both.
    b.commit("web/0", None, &leader_hook(&m), Some(&fence))
        .await
        .unwrap();
    assert_eq!(
        a.pod_spec("web").await.unwrap().map(|p| p.revision),
        Some(1)
    );
}
