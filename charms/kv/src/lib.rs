//! kv, a small clustered key-value service: the example of peers, actions and stored state.
//!
//! - Peers: every unit publishes its address in its bag of the `cluster` peer relation; the
//!   leader publishes the member list in the application bag, which every unit reads, and
//!   sets the pod spec with it.
//! - Actions: `put` (leader only: the leader is the cluster's single writer) stores a key in
//!   the peer application bag and reports typed results; `get` reads one on any unit;
//!   `members` lists the cluster.
//! - Stored state: each unit remembers the members it last saw and how many writes it served.
//! - Defer: a `config-changed` that arrives before the peer relation exists waits for it.

use charm_sdk::pod::{Container, PodSpec};
use charm_sdk::{
    ActionEvent, ActionParam, Charm, Event, HookResult, Metadata, Model, Relation, Status,
};
use serde::{Deserialize, Serialize};

/// The kv charm.
pub struct Kv;

/// The peer endpoint.
pub const CLUSTER: &str = "cluster";
/// The key of the member list in the peer application bag.
pub const MEMBERS: &str = "members";
/// The prefix of stored keys in the peer application bag.
pub const DATA_PREFIX: &str = "data.";

impl Charm for Kv {
    fn metadata() -> Metadata {
        Metadata::new("kv")
            .summary("A small clustered key-value service")
            .peers(CLUSTER, "kv-cluster")
            .string_option("image", Some("kvd:1.0"), "The kv server image")
            .int_option("port", Some(7379), "The port kv listens on")
            .action_with(
                "put",
                "Stores a value. Run it on the leader.",
                [
                    ActionParam::string("key", "The key to store the value under.").required(),
                    ActionParam::string("value", "The value.").required(),
                ],
            )
            .action_with(
                "get",
                "Reads a value.",
                [ActionParam::string("key", "The key to read.").required()],
            )
            .action("members", "Lists the cluster's members.")
    }

    fn handle(model: &Model, event: Event) -> HookResult {
        match event {
            Event::Install => {
                model.unit().set_status(Status::maintenance("installing"))?;
            }
            Event::RelationCreated(rel)
            | Event::RelationJoined(rel)
            | Event::RelationChanged(rel)
                if rel.name == CLUSTER =>
            {
                publish_address(model)?;
                reconcile(model)?;
            }
            Event::RelationDeparted(rel) if rel.name == CLUSTER => reconcile(model)?,
            Event::ConfigChanged | Event::LeaderElected | Event::UpgradeCharm => {
                if model.relation(CLUSTER)?.is_none() {
                    // Juju creates the peer relation soon after install; configure then.
                    model
                        .unit()
                        .set_status(Status::waiting("waiting for the cluster relation"))?;
                    model.defer();
                    return Ok(());
                }
                publish_address(model)?;
                reconcile(model)?;
            }
            Event::Action(action) => run_action(model, &action)?,
            _ => {}
        }
        Ok(())
    }
}

/// This unit's address inside the cluster, as the host gives it (`network-get`), with the
/// port: `kv/1` in model `prod` is `kv-1.kv-endpoints.prod.svc.cluster.local:7379`.
pub fn address(model: &Model) -> HookResult<String> {
    let port: i64 = model.config().get("port")?;
    let network = model.network(CLUSTER)?;
    let host = network.ingress_address().unwrap_or_default();
    Ok(format!("{host}:{port}"))
}

fn publish_address(model: &Model) -> HookResult {
    if let Some(cluster) = model.relation(CLUSTER)? {
        let address = address(model)?;
        let bag = cluster.local_unit_data()?;
        if bag.get("address") != Some(address.as_str()) {
            bag.set("address", &address)?;
        }
    }
    Ok(())
}

/// The cluster's members: this unit and every peer that published an address, sorted.
fn members(model: &Model, cluster: &Relation) -> HookResult<Vec<String>> {
    let mut members = vec![address(model)?];
    for unit in cluster.remote_units() {
        if let Some(address) = cluster.unit_data(unit)?.get("address") {
            members.push(address.to_string());
        }
    }
    members.sort();
    Ok(members)
}

/// The leader publishes the members and the pod spec; every unit reports what it sees.
fn reconcile(model: &Model) -> HookResult {
    let Some(cluster) = model.relation(CLUSTER)? else {
        return Ok(());
    };
    if model.is_leader() {
        let members = members(model, &cluster)?.join(",");
        let app = cluster.local_app_data()?;
        if app.get(MEMBERS) != Some(members.as_str()) {
            app.set(MEMBERS, &members)?;
        }
        let image: String = model.config().get("image")?;
        let port: i64 = model.config().get("port")?;
        let spec = PodSpec::new().container(
            Container::new("kv", image)
                .port("kv", u16::try_from(port)?)
                .env("KV_MEMBERS", members),
        );
        model.pod().set_spec(&spec)?;
    }
    let seen: Vec<String> = cluster
        .local_app_data()?
        .get(MEMBERS)
        .map(|m| m.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    model.stored().set("members", &seen)?;
    if seen.is_empty() {
        model.unit().set_status(Status::waiting(
            "waiting for the leader to form the cluster",
        ))?;
    } else {
        model
            .unit()
            .set_status(Status::active(format!("{} members", seen.len())))?;
    }
    Ok(())
}

#[derive(Deserialize)]
struct Put {
    key: String,
    value: String,
}

/// What `put` reports to the operator.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Stored<'a> {
    key: &'a str,
    stored_by: &'a str,
    /// How many writes this unit has served, this one included.
    writes_served: u64,
}

#[derive(Deserialize)]
struct Get {
    key: String,
}

fn run_action(model: &Model, action: &ActionEvent) -> HookResult {
    let Some(cluster) = model.relation(CLUSTER)? else {
        action.fail("the cluster is not formed yet");
        return Ok(());
    };
    match action.name.as_str() {
        "put" => {
            let Put { key, value } = action.params_as()?;
            if !model.is_leader() {
                action.fail("put writes through the leader: run it on the leader unit");
                return Ok(());
            }
            action.log(&format!("storing {key}"));
            cluster
                .local_app_data()?
                .set(&format!("{DATA_PREFIX}{key}"), &value)?;
            let served = model.stored().get::<u64>("writes-served")?.unwrap_or(0) + 1;
            model.stored().set("writes-served", &served)?;
            action.set_results_from(&Stored {
                key: &key,
                stored_by: model.unit().name(),
                writes_served: served,
            })?;
        }
        "get" => {
            let Get { key } = action.params_as()?;
            match cluster
                .local_app_data()?
                .get(&format!("{DATA_PREFIX}{key}"))
            {
                Some(value) => action.set_result("value", value)?,
                None => action.fail(&format!("no key {key:?}")),
            }
        }
        "members" => {
            let members = cluster
                .local_app_data()?
                .get(MEMBERS)
                .unwrap_or_default()
                .to_string();
            action.set_result("members", &members)?;
        }
        other => action.fail(&format!("unknown action {other:?}")),
    }
    Ok(())
}

charm_sdk::export_charm!(Kv);
