//! The operator's commands through the `charm-host` binary, on a SQLite store and on etcd,
//! with no host running: each does what it says, in a table or as JSON, and each refused
//! command exits non-zero with an error naming what is wrong, leaving the store exactly as
//! it was.

use std::path::Path;
use std::process::{Command, Output};

use std::sync::Arc;

use charm_host::store::{SqliteStore, Store};
use charm_tests::guests;

struct Operator {
    bin: std::path::PathBuf,
    store: String,
    dir: tempfile::TempDir,
}

impl Operator {
    /// On a SQLite file in a new directory.
    fn sqlite() -> Self {
        let mut op = Self::new();
        op.store = format!("sqlite:{}", op.dir.path().join("model.db").display());
        op
    }

    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(guests::DISCOURSE, dir.path().join("discourse.wasm")).unwrap();
        std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
        std::fs::copy(guests::KV, dir.path().join("kv.wasm")).unwrap();
        std::fs::copy(
            guests::DISCOURSE_NEXT,
            dir.path().join("discourse-next.wasm"),
        )
        .unwrap();
        std::fs::write(dir.path().join("not-a-charm.wasm"), b"hello").unwrap();
        Operator {
            bin: charm_tests::charm_host_binary(),
            store: String::new(),
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .args(["--store", &self.store])
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// Runs a command that must succeed; its output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command with `--format json`; its output, parsed.
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Runs a command that must be refused: non-zero, its error naming each of `words`,
    /// and the store as it was.
    fn refused(&self, args: &[&str], words: &[&str]) {
        let before = self.fingerprint();
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was not refused");
        for word in words {
            assert!(stderr.contains(word), "{args:?}: {word:?} not in {stderr}");
        }
        assert_eq!(self.fingerprint(), before, "{args:?} changed the store");
    }

    /// Everything the store holds that an operator or a hook can read.
    fn fingerprint(&self) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store: Arc<dyn Store> = match self.store.strip_prefix("sqlite:") {
                Some(path) => Arc::new(SqliteStore::open(Path::new(path), "default").unwrap()),
                None => open_etcd(&self.store).await,
            };
            let mut out = format!(
                "{:?}\n{:?}\n{:?}\n",
                store.applications().await.unwrap(),
                store.relations().await.unwrap(),
                store.status().await.unwrap()
            );
            for row in store.status().await.unwrap().units {
                out += &format!("{:?}\n", store.unit_details(&row.name).await.unwrap());
            }
            out
        })
    }
}

#[cfg(feature = "etcd")]
async fn open_etcd(spec: &str) -> Arc<dyn Store> {
    use charm_host::store::{EtcdConfig, EtcdStore};
    let config = EtcdConfig::parse(spec).unwrap();
    Arc::new(EtcdStore::connect(config, "default").await.unwrap())
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(spec: &str) -> Arc<dyn Store> {
    panic!("{spec}: built without etcd")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn operator_commands_on_sqlite() {
    operator_commands_change_the_model_and_refusals_change_nothing(Operator::sqlite());
}

#[cfg(feature = "etcd")]
#[test]
fn operator_commands_on_etcd() {
    let etcd = charm_tests::etcd_server::EtcdServer::start();
    let mut op = Operator::new();
    op.store = etcd.store_spec("models/operated");
    operator_commands_change_the_model_and_refusals_change_nothing(op);
}

fn operator_commands_change_the_model_and_refusals_change_nothing(op: Operator) {
    let discourse = op.dir.path().join("discourse.wasm");
    let postgresql = op.dir.path().join("postgresql.wasm");

    let out = op.ok(&["deploy", path(&discourse), "-n", "2"]);
    assert!(
        out.contains("Deployed discourse") && out.contains("discourse/0, discourse/1"),
        "{out}"
    );
    let deployed = op.json(&["deploy", path(&postgresql), "db"]);
    assert_eq!(deployed["units"], serde_json::json!(["db/0"]));

    let related = op.json(&["relate", "discourse", "db"]);
    assert_eq!(
        related["relation"]["endpoints"],
        serde_json::json!(["discourse:db", "db:db"])
    );
    assert!(
        related["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["unit"] == "db/0" && h["hook"] == "db-relation-joined"),
        "{related}"
    );

    let table = op.ok(&["config", "discourse"]);
    assert!(
        table.contains("external_hostname") && table.contains("discourse.local"),
        "{table}"
    );
    let changed = op.json(&["config", "discourse", "external_hostname=forum.example.com"]);
    assert_eq!(changed["changed"], serde_json::json!(["external_hostname"]));
    // Each unit's config-changed from its deployment still waits: the change coalesces
    // into it, as in Juju.
    assert_eq!(changed["hooks"], serde_json::json!([]));
    for unit in ["discourse/0", "discourse/1"] {
        let queued = op.json(&["show-unit", unit])["queued_hooks"].clone();
        let config_changed = queued
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| *h == "config-changed")
            .count();
        assert_eq!(config_changed, 1, "{unit}: {queued}");
    }
    let shown = op.json(&["config", "discourse"]);
    assert_eq!(
        shown["settings"]["external_hostname"]["value"],
        "forum.example.com"
    );
    assert_eq!(shown["settings"]["external_hostname"]["source"], "user");
    let reset = op.ok(&["config", "discourse", "--reset", "external_hostname"]);
    assert!(reset.contains("changed external_hostname"), "{reset}");

    let added = op.json(&["add-unit", "discourse", "-n", "2"]);
    assert_eq!(
        added["units"],
        serde_json::json!(["discourse/2", "discourse/3"])
    );

    let unit = op.json(&["show-unit", "discourse/2"]);
    assert_eq!(unit["queued_hooks"][0], "install");
    assert_eq!(unit["hook_error"], serde_json::Value::Null);
    // What its next hook, install, sees: no relation yet (Juju's order).
    assert_eq!(unit["relations"], serde_json::json!([]), "{unit}");
    assert!(
        unit["queued_hooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "db-relation-created"),
        "{unit}"
    );
    let table = op.ok(&["show-unit", "discourse/2"]);
    assert!(
        table.contains("Queued hooks") && table.contains("install"),
        "{table}"
    );

    // Removing: once, then refused.
    let removing = op.ok(&["remove-unit", "discourse/3"]);
    assert!(
        removing.contains("discourse/3") && removing.contains("stop, remove"),
        "{removing}"
    );

    op.refused(&["config", "nope", "x=1"], &["application nope"]);
    op.refused(
        &["config", "discourse", "colour=red"],
        &["colour", "external_hostname"],
    );
    op.refused(
        &["config", "discourse", "external_hostname"],
        &["KEY=VALUE"],
    );
    op.refused(
        &["config", "discourse", "image=x", "--reset", "image"],
        &["image", "both"],
    );
    op.refused(&["deploy", path(&discourse)], &["discourse"]);
    op.refused(
        &["deploy", path(&discourse), "other", "--config", "nope=1"],
        &["nope"],
    );
    op.refused(
        &["deploy", path(&op.dir.path().join("not-a-charm.wasm"))],
        &["not-a-charm.wasm"],
    );
    op.refused(&["add-unit", "nope"], &["application nope"]);
    op.refused(&["add-unit", "discourse", "-n", "0"], &["at least 1"]);
    op.refused(&["remove-unit", "discourse/9"], &["discourse/9"]);
    op.refused(
        &["remove-unit", "discourse/3"],
        &["discourse/3", "already being removed"],
    );
    op.refused(
        &["remove-unit", "discourse/0", "discourse/9"],
        &["discourse/9"],
    );
    op.refused(&["relate", "discourse", "db"], &["already exists"]);
    op.refused(&["relate", "discourse:nope", "db"], &["\"nope\""]);
    op.refused(&["relate", "discourse", "discourse"], &["itself"]);
    op.refused(&["relate", "nope", "db"], &["application nope"]);
    op.refused(
        &["remove-relation", "discourse", "nope"],
        &["application nope"],
    );
    op.refused(&["remove-application", "db"], &["relations", "--force"]);
    op.refused(&["remove-application", "nope"], &["application nope"]);
    op.refused(
        &["resolved", "discourse/0"],
        &["discourse/0", "not in error"],
    );
    op.refused(&["show-unit", "discourse/9"], &["unit discourse/9"]);
    op.refused(
        &["debug-log", "--unit", "discourse/9"],
        &["unit discourse/9"],
    );
    // No host has run a hook: no charm has logged anything.
    assert_eq!(op.json(&["debug-log"]), serde_json::json!([]));

    actions_are_checked_before_anything_is_queued(&op);
    upgrades_are_checked_before_anything_is_written(&op);

    let removing = op.ok(&["remove-relation", "discourse", "db"]);
    assert!(removing.contains("discourse:db db:db"), "{removing}");
    op.refused(
        &["remove-relation", "discourse", "db"],
        &["already being removed"],
    );
    let removal = op.json(&["remove-application", "db"]);
    assert_eq!(removal["units"], serde_json::json!(["db/0"]));
    op.refused(
        &["remove-application", "db"],
        &["db", "already being removed"],
    );
}

/// `actions`, `run-action` and `show-action` with no host running: the action waits,
/// pending, with its hook queued; a refused one records and queues nothing.
fn actions_are_checked_before_anything_is_queued(op: &Operator) {
    op.ok(&["deploy", path(&op.dir.path().join("kv.wasm"))]);
    let table = op.ok(&["actions", "kv"]);
    assert!(
        table.contains("members") && table.contains("Lists the cluster's members."),
        "{table}"
    );
    let declared = op.json(&["actions", "kv"]);
    let names: Vec<&str> = declared["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["put", "get", "members"]);

    op.refused(
        &["run-action", "kv/0", "members", "all=true"],
        &["action members of application kv", "no parameter \"all\""],
    );
    op.refused(
        &["run-action", "kv/0", "backup"],
        &["no action \"backup\"", "put, get, members"],
    );
    op.refused(
        &["run-action", "kv/0", "put", "key=a"],
        &[
            "action put of application kv",
            "required parameter value not given",
        ],
    );
    op.refused(&["run-action", "kv/9", "members"], &["unit kv/9"]);
    op.refused(&["run-action", "kv/0", "members", "x"], &["KEY=VALUE"]);
    op.refused(
        &["run-action", "kv/0", "members", "--wait=-1"],
        &["--wait", "seconds"],
    );
    op.refused(&["show-action", "1"], &["action 1"]);
    op.refused(&["actions", "nope"], &["application nope"]);

    let out = op.ok(&["run-action", "kv/0", "members"]);
    assert!(out.contains("Action 1 queued on kv/0: members"), "{out}");
    let shown = op.json(&["show-action", "1"]);
    assert_eq!(shown["status"], "pending");
    assert_eq!(
        (shown["unit"].as_str(), shown["action"].as_str()),
        (Some("kv/0"), Some("members"))
    );
    let table = op.ok(&["show-action", "1"]);
    assert!(
        table.contains("pending") && table.contains("kv/0"),
        "{table}"
    );
    let queued = op.json(&["show-unit", "kv/0"])["queued_hooks"].clone();
    assert_eq!(queued.as_array().unwrap().last().unwrap(), "members-action");
    // No host runs it: --wait gives up, non-zero, saying where the action is.
    let waited = op.run(&["run-action", "kv/0", "members", "--wait", "0.3"]);
    assert!(!waited.status.success());
    let stderr = String::from_utf8_lossy(&waited.stderr);
    assert!(
        stderr.contains("action 2 on kv/0 is still pending"),
        "{stderr}"
    );
}

/// `upgrade-charm`: a file that is not a charm, an unknown application, and a charm that
/// drops an endpoint in use are refused and write nothing; an upgrade queues upgrade-charm
/// then config-changed on every unit, and says which options it added.
fn upgrades_are_checked_before_anything_is_written(op: &Operator) {
    let file = |name: &str| op.dir.path().join(name).to_str().unwrap().to_string();
    let (next, first, kv) = (
        file("discourse-next.wasm"),
        file("discourse.wasm"),
        file("kv.wasm"),
    );
    op.refused(
        &[
            "upgrade-charm",
            "discourse",
            "--path",
            &file("not-a-charm.wasm"),
        ],
        &["upgrade-charm discourse", "not-a-charm.wasm"],
    );
    op.refused(
        &["upgrade-charm", "nope", "--path", &next],
        &["application nope"],
    );
    // kv has no `db` endpoint, which discourse's relation to db uses.
    op.refused(
        &["upgrade-charm", "discourse", "--path", &kv],
        &["no endpoint \"db\"", "discourse:db db:db"],
    );
    op.refused(&["upgrade-charm", "discourse"], &["--path"]);

    let before = op.json(&["config", "discourse"]);
    assert!(before["settings"].get("plugins").is_none(), "{before}");
    let out = op.ok(&["upgrade-charm", "discourse", "--path", &next]);
    assert!(
        out.contains("Upgraded discourse")
            && out.contains("Options added (at their defaults): plugins.")
            && out.contains("upgrade-charm"),
        "{out}"
    );
    let after = op.json(&["config", "discourse"]);
    assert_eq!(
        after["settings"]["image"]["value"],
        "discourse/discourse:2.7"
    );
    assert_eq!(after["settings"]["plugins"]["source"], "default");
    for unit in ["discourse/0", "discourse/1", "discourse/2"] {
        let queued = op.json(&["show-unit", unit])["queued_hooks"].clone();
        let queued: Vec<&str> = queued
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert!(queued.contains(&"upgrade-charm"), "{unit}: {queued:?}");
    }

    // Back to the first module: the JSON names both, and nothing is added or dropped.
    let back = op.json(&["upgrade-charm", "discourse", "--path", &first]);
    let (old, new) = (
        back["old_module"].as_str().unwrap(),
        back["new_module"].as_str().unwrap(),
    );
    assert!(old.len() == 64 && new.len() == 64 && old != new, "{back}");
    assert_eq!(back["options_added"], serde_json::json!([]));
    assert_eq!(back["settings_dropped"], serde_json::json!([]));
    assert_eq!(back["application"], "discourse");
}

/// A model built with `deploy`, `relate` and `config` alone runs with `run` and no bundle:
/// every unit's hooks run, the relation's included, and the config it was given stays.
/// With no model at `--store`, `run` with no bundle is refused and makes none.
#[test]
fn a_model_made_by_commands_runs_without_a_bundle() {
    let op = Operator::sqlite();
    op.ok(&["deploy", "postgresql.wasm"]);
    op.ok(&["deploy", "discourse.wasm", "-n", "2"]);
    op.ok(&["relate", "discourse", "postgresql"]);
    op.ok(&[
        "config",
        "discourse",
        "external_hostname=changed.example.com",
    ]);
    let status = op.json(&["run", "--until-idle"]);
    let units = status["units"].as_array().unwrap();
    assert_eq!(units.len(), 3, "{status}");
    let config = op.json(&["config", "discourse"]);
    assert!(
        config.to_string().contains("changed.example.com"),
        "the config stays: {config}"
    );
    let spec = op.ok(&["pod-spec", "discourse"]);
    assert!(
        spec.contains("host=postgresql-0"),
        "the relation's hooks ran: {spec}"
    );

    let none = Operator::new();
    let missing = none.dir.path().join("nowhere.db");
    let out = Command::new(&none.bin)
        .args(["run", "--until-idle", "--store"])
        .arg(format!("sqlite:{}", missing.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nowhere.db"), "{stderr}");
    assert!(!missing.exists(), "no model made");
}

/// Lease flags that do not fit together are refused at once, every broken constraint named
/// by its flags, with a set that fits; nothing is opened or made.
#[test]
fn lease_flags_that_do_not_fit_are_refused_together() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("model.db").display());
    let out = std::process::Command::new(charm_tests::charm_host_binary())
        .args(["run", "--store", &store, "--lease-duration", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for named in [
        "--drift-margin 5 must be less than --lease-duration 3",
        "--renew-interval 2 must be less than the guarantee",
        "--lease-duration 3 --drift-margin 1 --renew-interval 0.4",
    ] {
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    assert!(
        !dir.path().join("model.db").exists(),
        "a refused host made the store"
    );
}

/// A host restarted with the bundle it was first given runs the model as it stands: a
/// `config` change and a `remove-unit` made since are kept, and what the bundle would
/// have changed is said, with the command that applies it.
#[test]
fn a_restart_with_the_bundle_undoes_no_change_made_since() {
    use charm_host::model::ConfigValue;
    use charm_host::store::{SqliteStore, StateStore};

    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::POSTGRESQL, dir.path().join("postgresql.wasm")).unwrap();
    std::fs::write(
        dir.path().join("bundle.yaml"),
        "applications:\n  postgresql: {charm: postgresql.wasm, num_units: 2, options: {port: 5433}}\n",
    )
    .unwrap();
    let db = dir.path().join("model.db");
    let store = format!("sqlite:{}", db.display());
    let charm_host = |args: &[&str]| {
        let out = std::process::Command::new(charm_tests::charm_host_binary())
            .args(args)
            .args(["--store", &store])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        stderr
    };
    let run = ["run", "bundle.yaml", "--until-idle", "--timeout", "60"];
    charm_host(&run);
    charm_host(&["config", "postgresql", "port=6000"]);
    charm_host(&["remove-unit", "postgresql/1"]);
    let stderr = charm_host(&run);
    assert!(
        stderr.contains("`charm-host config postgresql port=5433` applies the bundle's"),
        "{stderr}"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let model = SqliteStore::open_read_only(&db, "default").unwrap();
    let app = rt.block_on(model.application("postgresql")).unwrap();
    assert_eq!(app.config["port"], ConfigValue::Int(6000));
    assert_eq!(
        rt.block_on(model.units("postgresql")).unwrap(),
        ["postgresql/0"]
    );
}
