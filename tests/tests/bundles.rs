//! Bundles in Juju's published format (tests/bundles/): every key accepted, what this host
//! does not apply warned about, charms found by name, overlays merged, every problem of a
//! broken bundle reported at once, and an exported model deployed again as the same model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use charm_host::bundle::{Bundle, BundleError, LoadOptions, Problem};
use charm_host::charm::CharmRuntime;
use charm_host::model::ConfigValue;
use charm_host::store::Store;
use charm_tests::{controller, fast_config, guests, runtime, settle};

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("bundles")
        .join(name)
}

/// A charm directory holding the guests under the names the corpus uses.
fn charm_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("discourse-k8s", guests::DISCOURSE),
        ("postgresql-k8s", guests::POSTGRESQL),
        ("discourse", guests::DISCOURSE),
        ("postgresql", guests::POSTGRESQL),
        ("kv", guests::KV),
        ("probe", guests::PROBE),
    ] {
        std::fs::copy(path, dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    dir
}

fn options(dir: &Path, overlays: &[&str]) -> LoadOptions {
    LoadOptions {
        charm_dirs: vec![dir.to_owned()],
        overlays: overlays.iter().map(|o| corpus(o)).collect(),
    }
}

/// Loads a corpus bundle with its overlays, charms from `dir`.
fn load(
    file: &str,
    dir: &Path,
    overlays: &[&str],
    runtime: &CharmRuntime,
) -> Result<Bundle, BundleError> {
    Bundle::load_with(&corpus(file), &options(dir, overlays), runtime)
}

fn warned_keys(bundle: &Bundle) -> BTreeSet<&str> {
    bundle.warnings.iter().map(|w| w.key.as_str()).collect()
}

#[test]
fn the_corpus_uses_every_key_of_the_format() {
    let mut top = BTreeSet::new();
    let mut app = BTreeSet::new();
    let mut machine = BTreeSet::new();
    for file in ["k8s-discourse.yaml", "machines.yaml", "juju3-bases.yaml"] {
        let text = std::fs::read_to_string(corpus(file)).unwrap();
        let value: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let map = value.as_mapping().unwrap();
        for (k, v) in map {
            let k = k.as_str().unwrap();
            top.insert(k.to_string());
            let keys_of = |v: &serde_yaml::Value| -> Vec<String> {
                v.as_mapping()
                    .into_iter()
                    .flat_map(|m| m.values())
                    .filter_map(|entry| entry.as_mapping())
                    .flat_map(|m| m.keys().map(|k| k.as_str().unwrap().to_string()))
                    .collect()
            };
            match k {
                "applications" => app.extend(keys_of(v)),
                "machines" => machine.extend(keys_of(v)),
                _ => {}
            }
        }
    }
    let want = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
    assert!(top.is_superset(&want(&[
        "description",
        "series",
        "default-base",
        "bundle",
        "applications",
        "machines",
        "relations",
        "saas"
    ])));
    let app_keys = want(&[
        "charm",
        "channel",
        "revision",
        "series",
        "base",
        "num_units",
        "scale",
        "to",
        "options",
        "annotations",
        "constraints",
        "storage",
        "devices",
        "resources",
        "trust",
        "expose",
        "exposed-endpoints",
        "offers",
        "bindings",
        "source",
        "placement",
        "plan",
    ]);
    assert_eq!(
        app_keys.difference(&app).collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
    let machine_keys = want(&["series", "base", "constraints", "annotations"]);
    assert_eq!(
        machine_keys.difference(&machine).collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
}

#[test]
fn each_bundle_of_the_corpus_is_accepted_with_the_warnings_it_should_give() {
    let dir = charm_dir();
    let runtime = runtime();
    let cases: [(&str, &[&str]); 3] = [
        (
            "k8s-discourse.yaml",
            &[
                "annotations",
                "channel",
                "placement",
                "resources",
                "revision",
                "storage",
                "trust",
            ],
        ),
        (
            "machines.yaml",
            &[
                "bindings",
                "constraints",
                "devices",
                "expose",
                "exposed-endpoints",
                "machines",
                "offers",
                "plan",
                "revision",
                "saas",
                "series",
                "source",
                "storage",
                "to",
            ],
        ),
        (
            "juju3-bases.yaml",
            &["base", "channel", "default-base", "machines", "to"],
        ),
    ];
    for (file, expected) in cases {
        let bundle =
            load(file, dir.path(), &[], &runtime).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            warned_keys(&bundle),
            expected.iter().copied().collect(),
            "{file}: {:#?}",
            bundle.warnings
        );
        for warning in &bundle.warnings {
            assert!(warning.line.is_some(), "{file}: no line: {warning}");
            assert!(!warning.reason.is_empty());
        }
    }
}

#[test]
fn warnings_name_every_user_of_a_key_and_its_first_line() {
    let dir = charm_dir();
    let bundle = load("machines.yaml", dir.path(), &[], &runtime()).unwrap();
    let warning = |key: &str| bundle.warnings.iter().find(|w| w.key == key).unwrap();
    let series = warning("series");
    // The bundle's `series: focal`, and the series in discourse's charm URL.
    assert_eq!(series.used_by, ["the bundle", "application discourse"]);
    assert_eq!(series.line, Some(3));
    assert_eq!(warning("machines").used_by, ["machine 0", "machine 1"]);
    // `expose: false` asks for nothing, so only discourse is named.
    assert_eq!(warning("expose").used_by, ["application discourse"]);
    assert_eq!(
        warning("saas").used_by,
        ["saas remote-pg", "relation probe:db remote-pg:db"]
    );
    let text = warning("constraints").to_string();
    assert!(
        text.contains("machines.yaml:18: `constraints` (application postgresql) is not applied"),
        "{text}"
    );
}

#[test]
fn charms_named_by_name_are_found_and_relations_inferred() {
    let dir = charm_dir();
    let bundle = load("k8s-discourse.yaml", dir.path(), &[], &runtime()).unwrap();
    let apps: Vec<(&str, &str, u32)> = bundle
        .applications
        .iter()
        .map(|a| (a.name.as_str(), a.charm_ref.as_str(), a.num_units))
        .collect();
    assert_eq!(
        apps,
        [
            (
                "discourse-k8s",
                "cs:~discourse-charmers/discourse-k8s-12",
                3
            ),
            ("postgresql-k8s", "postgresql-k8s", 1),
        ]
    );
    assert_eq!(
        bundle.applications[0].charm_path,
        dir.path().join("discourse-k8s.wasm")
    );
    assert_eq!(bundle.relations.len(), 1);
    let r = &bundle.relations[0];
    assert_eq!(
        (r.a.1.as_str(), r.b.1.as_str(), r.interface.as_str()),
        ("db", "db", "pgsql")
    );
}

#[test]
fn overlays_override_options_and_units_add_and_remove_applications() {
    let dir = charm_dir();
    let runtime = runtime();
    let bundle = load(
        "k8s-discourse.yaml",
        dir.path(),
        &["k8s-overlay.yaml"],
        &runtime,
    )
    .unwrap();
    let names: Vec<&str> = bundle
        .applications
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["discourse-k8s", "postgresql-k8s", "probe"]);
    let discourse = &bundle.applications[0];
    assert_eq!(discourse.num_units, 2);
    assert_eq!(
        discourse.options["external_hostname"],
        ConfigValue::String("talk.example.com".into())
    );
    // Options the overlay does not mention are kept.
    assert!(discourse.options.contains_key("developer_emails"));
    assert_eq!(bundle.relations.len(), 2);

    let bundle = load(
        "k8s-discourse.yaml",
        dir.path(),
        &["k8s-overlay.yaml", "k8s-overlay-remove.yaml"],
        &runtime,
    )
    .unwrap();
    let names: Vec<&str> = bundle
        .applications
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["discourse-k8s", "postgresql-k8s"]);
    assert_eq!(
        bundle.applications[1].options["port"],
        ConfigValue::Int(6000)
    );
    assert_eq!(
        bundle.relations.len(),
        1,
        "the probe's relation went with it"
    );
}

#[test]
fn a_problem_in_an_overlay_names_the_overlay_and_its_line() {
    let dir = charm_dir();
    let overlay = dir.path().join("bad-overlay.yaml");
    std::fs::write(
        &overlay,
        "applications:\n  discourse-k8s:\n    options:\n      external_hostname: 5\n",
    )
    .unwrap();
    let mut opts = options(dir.path(), &[]);
    opts.overlays.push(overlay.clone());
    let err = Bundle::load_with(&corpus("k8s-discourse.yaml"), &opts, &runtime())
        .err()
        .expect("refused");
    let BundleError::Invalid { problems, .. } = err else {
        panic!("{err}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, overlay);
    assert_eq!(problems[0].line, Some(4));
    assert!(problems[0].message.contains("must be a string"));
}

#[test]
fn every_problem_of_a_broken_bundle_is_reported_at_once_with_its_line() {
    let dir = charm_dir();
    let err = load("broken.yaml", dir.path(), &[], &runtime())
        .err()
        .expect("refused");
    let BundleError::Invalid { problems, .. } = err else {
        panic!("{err}");
    };
    let found: Vec<(Option<usize>, &str)> = problems
        .iter()
        .map(|p: &Problem| (p.line, p.message.as_str()))
        .collect();
    let expected: &[(usize, &str)] = &[
        (
            3,
            "unknown key `descripton` at the top level; did you mean `description`?",
        ),
        (6, "charm \"forum-k8s\" not found: no forum-k8s.wasm in"),
        (7, "did you mean `num_units`?"),
        (
            9,
            "charm \"cs:~me/pgsql-k8s\" not found: no pgsql-k8s.wasm in",
        ),
        (11, "`trust` must be true or false"),
        (13, "missing.wasm does not exist"),
        (
            14,
            "`to`: \"0\" names machine 0, which `machines` does not define",
        ),
        (
            14,
            "`to`: \"nosuch\" names application nosuch, which the bundle does not have",
        ),
        (18, "has no option \"prot\"; did you mean \"port\"?"),
        (19, "option \"image\" must be a string"),
        (21, "no application \"nosuch\""),
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for ((line, message), (want_line, want)) in found.iter().zip(expected) {
        assert_eq!(*line, Some(*want_line), "{message}");
        assert!(message.contains(want), "expected {want:?} in {message:?}");
    }
    // Unresolved charms name the directories searched.
    let searched = dir.path().display().to_string();
    assert!(problems[1].message.contains(&searched), "{}", problems[1]);
}

/// What a model is, ids aside: applications with their records, units, and relations.
async fn model_of(store: &dyn Store) -> (Vec<String>, BTreeSet<(String, Vec<String>)>) {
    let mut apps = Vec::new();
    for app in store.applications().await.unwrap() {
        let units = store.units(&app.name).await.unwrap();
        apps.push(format!("{app:?} {units:?}"));
    }
    let relations = store
        .relations()
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let mut ends: Vec<String> = r
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.app, e.endpoint))
                .collect();
            ends.sort();
            (r.interface, ends)
        })
        .collect();
    (apps, relations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_model_deploys_into_an_empty_store_as_the_same_model() {
    let dir = charm_dir();
    let runtime = runtime();
    let bundle = load(
        "k8s-discourse.yaml",
        dir.path(),
        &["k8s-overlay.yaml"],
        &runtime,
    )
    .unwrap();
    let (first, first_store) = controller(fast_config());
    bundle.deploy(&first).await.unwrap();
    settle(&first, Duration::from_secs(60)).await;
    let exported = charm_host::bundle::export(first_store.as_ref())
        .await
        .unwrap();
    assert_eq!(exported.applications.len(), 3);
    assert_eq!(exported.applications["discourse-k8s"].scale, 2);
    // Peer relations are not listed; the two bundle relations are.
    assert_eq!(exported.relations.len(), 2);

    let path = dir.path().join("exported.yaml");
    std::fs::write(&path, serde_yaml::to_string(&exported).unwrap()).unwrap();
    let again = Bundle::load_with(&path, &options(dir.path(), &[]), &runtime).unwrap();
    // The charm URL's revision is all the exported bundle asks for that is not applied.
    assert_eq!(warned_keys(&again), BTreeSet::from(["revision"]));
    let (second, second_store) = controller(fast_config());
    again.deploy(&second).await.unwrap();
    settle(&second, Duration::from_secs(60)).await;

    let (apps_a, relations_a) = model_of(first_store.as_ref()).await;
    let (apps_b, relations_b) = model_of(second_store.as_ref()).await;
    assert_eq!(apps_a, apps_b);
    assert_eq!(relations_a, relations_b);
    assert_eq!(
        charm_host::bundle::export(second_store.as_ref())
            .await
            .unwrap(),
        exported
    );
    // The settings survive typed: an int stays an int.
    let config: BTreeMap<String, ConfigValue> = second_store
        .application("postgresql-k8s")
        .await
        .unwrap()
        .config;
    assert_eq!(config["port"], ConfigValue::Int(5432));
}

#[test]
fn the_check_command_prints_the_plan_and_warnings_or_every_problem_and_exits_1() {
    let bin = charm_tests::charm_host_binary();
    let dir = charm_dir();
    let check = |bundle: &str| {
        std::process::Command::new(&bin)
            .args(["check", "--format", "json"])
            .arg(corpus(bundle))
            .env("CHARM_HOST_CHARM_DIR", dir.path())
            .output()
            .unwrap()
    };
    let ok = check("machines.yaml");
    assert!(ok.status.success(), "{ok:?}");
    let out: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(out["ok"], true);
    assert_eq!(out["applications"].as_array().unwrap().len(), 3);
    assert_eq!(out["relations"][0]["interface"], "pgsql");
    assert_eq!(out["warnings"].as_array().unwrap().len(), 14);

    let bad = check("broken.yaml");
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let out: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(out["ok"], false);
    let problems = out["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 11);
    assert_eq!(problems[0]["line"], 3);
}
