//! A test charm. Its `mode` option picks a behaviour; what it observes it records in its
//! stored state, which the tests read back from the store.

use charm_sdk::pod::PodSpec;
use charm_sdk::{Charm, Event, HookError, HookResult, Metadata, Model, Status};

/// The probe charm.
pub struct Probe;

const BAD_SPECS: &[&str] = &[
    r#"{"version": 3, "containers": []}"#,
    r#"{"version": 3, "containers": [{"imageDetails": {"imagePath": "x"}}]}"#,
    r#"{"version": 3, "containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}"#,
    r#"{"version": 3, "containers": [{"name": "a", "image": "x", "colour": "red"}]}"#,
];

fn record<T: std::fmt::Debug>(model: &Model, key: &str, value: &T) -> HookResult {
    model.stored().set(key, &format!("{value:?}"))?;
    Ok(())
}

/// Writes something of every kind, so a test can check that none of it is applied.
fn write_everything(model: &Model) -> HookResult {
    model.stored().set("written", &true)?;
    model
        .unit()
        .set_status(Status::active("must not be applied"))?;
    if model.is_leader() {
        model.leader_data().set("written", "yes")?;
        model
            .pod()
            .set_spec(&PodSpec::new().container(charm_sdk::Container::new("probe", "busybox")))?;
    }
    Ok(())
}

impl Charm for Probe {
    fn metadata() -> Metadata {
        Metadata::new("probe")
            .summary("Test charm")
            .requires("db", "pgsql")
            .string_option("mode", Some("ok"), "What to do")
            .int_option(
                "spin_ms",
                Some(0),
                "How long the spin mode keeps the CPU busy",
            )
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        let mode: String = model.config().get("mode")?;
        if event == Event::Install {
            let runs: u32 = model.stored().get("install-runs")?.unwrap_or(0);
            model.stored().set("install-runs", &(runs + 1))?;
        }
        if mode == "network" {
            // What `network-get` answers for a declared endpoint and for an undeclared one.
            let db = model.network("db")?;
            model.stored().set("network-db", &db.ingress_addresses)?;
            model.stored().set("network-bind", &db.bind_addresses)?;
            model.stored().set("network-egress", &db.egress_subnets)?;
            let undeclared = model.network("nope").map(|_| ()).map_err(|e| e.to_string());
            return record(model, "network-nope", &undeclared);
        }
        if mode == "units" {
            // The units of the db relation, as the SDK hands them to a charm.
            let units = model.relation("db")?.map(|db| db.remote_units().join(","));
            model.stored().set("units", &units.unwrap_or_default())?;
            if let Some(db) = model.relation("db")? {
                record(model, "has-pg-2", &db.remote_units().contains("pg/2"))?;
            }
            // And as the host's calls give them: 0.2.4's summary and list, and 0.2.2's
            // packed relation, which the SDK no longer asks for.
            use charm_sdk::wit::juju::charm::relations;
            for id in relations::relation_ids("db") {
                let summary =
                    relations::relation_get_summary(id).map_err(charm_sdk::Error::from)?;
                record(
                    model,
                    "summary",
                    &(summary.id, summary.name, summary.remote_app),
                )?;
                let listed = relations::relation_list_packed(id).map_err(charm_sdk::Error::from)?;
                let packed = relations::relation_get_packed(id).map_err(charm_sdk::Error::from)?;
                record(model, "listed", &listed)?;
                record(model, "packed", &packed.remote_units)?;
            }
            return Ok(());
        }
        if mode == "bags" {
            // Reads bags holding values longer than a bag's read brings (4 KiB): one by its
            // key, then every entry.
            if let Some(db) = model.relation("db")? {
                let theirs = db.remote_app_data()?;
                record(model, "master", &theirs.get("master"))?;
                record(
                    model,
                    "allowed-len",
                    &theirs.get("allowed-units").map(str::len),
                )?;
                let lens: Vec<(&String, usize)> =
                    theirs.entries().iter().map(|(k, v)| (k, v.len())).collect();
                record(model, "entries", &lens)?;
                let mine = db.local_unit_data()?;
                record(model, "cert-len", &mine.get("cert").map(str::len))?;
            }
            return Ok(());
        }
        if mode == "count" {
            // Every hook counts itself, twice in one commit: after any crash, each count
            // says how often the hook's commit applied, and the two must agree.
            let key = event.hook_name();
            let runs: u32 = model.stored().get(&format!("runs:{key}"))?.unwrap_or(0);
            model.stored().set(&format!("runs:{key}"), &(runs + 1))?;
            let total: u32 = model.stored().get("total-a")?.unwrap_or(0);
            model.stored().set("total-a", &(total + 1))?;
            let total: u32 = model.stored().get("total-b")?.unwrap_or(0);
            model.stored().set("total-b", &(total + 1))?;
            return Ok(());
        }
        if mode == "counter" {
            // The leader counts every hook it runs in its leader data and publishes the
            // count in its pod spec: an update lost between two agents of one unit shows
            // as a count short of the leader hooks that committed.
            if model.is_leader() {
                let counter: u64 = model
                    .leader_data()
                    .get("counter")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let next = (counter + 1).to_string();
                model.leader_data().set("counter", &next)?;
                model.pod().set_spec(&PodSpec::new().container(
                    charm_sdk::Container::new("probe", "busybox").env("COUNTER", &next),
                ))?;
            }
            return Ok(());
        }
        if mode == "history" {
            // What the hook sees of its relations (each relation's id, with its remote
            // units), logged: a test reads every unit's history back from the hosts' logs
            // and checks it against Juju's order of hooks.
            let mut saw = String::new();
            for db in model.relations("db")? {
                saw.push_str(&format!("{}={};", db.id(), db.remote_units().join(",")));
            }
            charm_sdk::log::info(&format!("saw {saw}"));
            return Ok(());
        }
        if mode == "log" {
            // Through the log import, and on stdout and stderr.
            charm_sdk::log::info(&format!("handling {}", event.hook_name()));
            println!("stdout of {}", event.hook_name());
            eprintln!("stderr of {}", event.hook_name());
            return Ok(());
        }
        match (mode.as_str(), event) {
            ("fail", Event::Start) => {
                write_everything(model)?;
                Err(HookError::msg("deliberate failure"))
            }
            ("trap", Event::Start) => {
                write_everything(model)?;
                panic!("deliberate panic")
            }
            ("spin", Event::Start) => {
                let leader = model.is_leader();
                let spin_ms: i64 = model.config().get("spin_ms")?;
                let until =
                    std::time::Instant::now() + std::time::Duration::from_millis(spin_ms as u64);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
                let runs: u32 = model.stored().get("spins")?.unwrap_or(0);
                model.stored().set("spins", &(runs + 1))?;
                record(model, "spun-as-leader", &leader)?;
                if leader {
                    model.leader_data().set("spun", "yes")?;
                }
                Ok(())
            }
            ("loop", Event::Start) => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            ("memory-bomb", Event::Start) => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            ("churn", Event::Start) => {
                // 256 MiB allocated and freed in all, at most 8 blocks alive at once, freed
                // out of order: more than the memory limit unless freed memory is reused.
                let mut window: std::collections::VecDeque<Vec<u8>> = Default::default();
                let (mut total, mut size) = (0usize, 1usize);
                while total < 256 << 20 {
                    size = size * 7 % (64 << 10) + 1;
                    window.push_back(vec![7u8; size]);
                    if window.len() > 8 {
                        window.swap_remove_front(3);
                    }
                    total += size;
                }
                let sum: usize = window
                    .iter()
                    .map(|b| b.iter().map(|&x| x as usize).sum::<usize>())
                    .sum();
                model.stored().set("churned", &total)?;
                record(model, "window-sum", &sum)?;
                Ok(())
            }
            ("pod-spec-errors", Event::Start) => {
                record(model, "leader", &model.is_leader())?;
                for (i, spec) in BAD_SPECS.iter().enumerate() {
                    record(
                        model,
                        &format!("pod-spec-{i}"),
                        &model.pod().set_spec_raw(spec, None),
                    )?;
                }
                Ok(())
            }
            ("access", Event::RelationChanged(rel)) => {
                let relation = model.relation_by_id(rel.id)?;
                let Some(remote) = relation.remote_units().first().map(str::to_owned) else {
                    return Ok(());
                };
                let leader = model.is_leader();
                record(model, "leader", &leader)?;
                record(
                    model,
                    "write-remote-unit-bag",
                    &relation.unit_data(&remote)?.set("k", "v"),
                )?;
                record(
                    model,
                    "write-own-unit-bag",
                    &relation.local_unit_data()?.set("k", "v"),
                )?;
                record(
                    model,
                    "write-remote-app-bag",
                    &relation.remote_app_data()?.set("k", "v"),
                )?;
                let own_app = relation.local_app_data();
                record(model, "read-own-app-bag", &own_app.as_ref().map(|_| ()))?;
                if let Ok(bag) = own_app {
                    record(model, "write-own-app-bag", &bag.set("k", "v"))?;
                } else {
                    // A non-leader cannot even read it: ask the host to write it directly.
                    let raw = charm_sdk::wit::juju::charm::relations::set_app_data(
                        rel.id,
                        model.app().name(),
                        "k",
                        Some("v"),
                    );
                    record(
                        model,
                        "write-own-app-bag",
                        &raw.map_err(charm_sdk::Error::from),
                    )?;
                }
                record(
                    model,
                    "remote-master",
                    &relation.remote_app_data()?.get("master").map(str::to_owned),
                )?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

charm_sdk::export_charm!(Probe);
