//! A unit's network addresses, as Juju gives them to Kubernetes units: in each of its
//! relation bags (`ingress-address`, `private-address`, `egress-subnets`) and through
//! `network-get`.
//!
//! A unit's address is the DNS name of its pod behind the application's headless service,
//! `<app>-<n>.<app>-endpoints.<model>.svc.cluster.local`, the name a StatefulSet's pod has
//! in Kubernetes: every host derives the same one from the unit's name, so no store keeps
//! it. Juju derives `egress-subnets` from the ingress addresses that are IPs (each as a
//! `/32` or `/128`); a DNS name gives none, so a unit addressed by name has no
//! `egress-subnets` key.

use std::net::IpAddr;
use std::sync::Arc;

use crate::records::{SharedBag, app_of};

/// The keys the host sets in every unit's relation bags, as Juju does.
pub const NETWORK_KEYS: [&str; 3] = ["egress-subnets", "ingress-address", "private-address"];

/// A unit's addresses, for every endpoint of its charm (this host has no network spaces,
/// so every endpoint binds alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitNetwork {
    /// The addresses its workload listens on.
    pub bind_addresses: Vec<String>,
    /// The addresses other units reach it at.
    pub ingress_addresses: Vec<String>,
    /// The subnets its traffic comes from, in CIDR form.
    pub egress_subnets: Vec<String>,
}

/// The address of `unit` in model `model`: its pod's DNS name.
///
/// ```
/// assert_eq!(
///     charm_model::network::unit_address("prod", "discourse/3"),
///     "discourse-3.discourse-endpoints.prod.svc.cluster.local"
/// );
/// ```
pub fn unit_address(model: &str, unit: &str) -> String {
    let app = app_of(unit);
    format!(
        "{}.{app}-endpoints.{model}.svc.cluster.local",
        unit.replace('/', "-")
    )
}

/// The subnets traffic from `address` comes from: the address itself as a CIDR if it is an
/// IP, none for a DNS name.
///
/// ```
/// use charm_model::network::egress_subnets;
///
/// assert_eq!(egress_subnets("10.1.2.3"), ["10.1.2.3/32"]);
/// assert_eq!(egress_subnets("fd00::7"), ["fd00::7/128"]);
/// assert!(egress_subnets("db-0.db-endpoints.m.svc.cluster.local").is_empty());
/// ```
pub fn egress_subnets(address: &str) -> Vec<String> {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => vec![format!("{ip}/32")],
        Ok(IpAddr::V6(ip)) => vec![format!("{ip}/128")],
        Err(_) => Vec::new(),
    }
}

/// What `network-get` answers `unit` for any of its endpoints.
///
/// ```
/// let net = charm_model::network::unit_network("m", "db/0");
/// assert_eq!(net.ingress_addresses, ["db-0.db-endpoints.m.svc.cluster.local"]);
/// assert_eq!(net.bind_addresses, net.ingress_addresses);
/// assert!(net.egress_subnets.is_empty());
/// ```
pub fn unit_network(model: &str, unit: &str) -> UnitNetwork {
    let address = unit_address(model, unit);
    UnitNetwork {
        bind_addresses: vec![address.clone()],
        egress_subnets: egress_subnets(&address),
        ingress_addresses: vec![address],
    }
}

/// The network keys whose value is the unit's address.
const ADDRESS_KEYS: [&str; 2] = ["ingress-address", "private-address"];

/// `bag`, the bag of `unit` in a relation, as a hook reads it: with the network keys the
/// host sets, each unless the unit's charm wrote its own value. Juju writes them into the
/// bag as the unit enters the relation; deriving them where a bag is read gives a hook the
/// same view without a write per unit and relation (a relation with 10,000 units would
/// otherwise write 10,000 bags as it is made). A charm that removes one of these keys
/// sees the host's value again.
///
/// ```
/// use std::sync::Arc;
/// use charm_model::network::with_network_keys;
///
/// let bag = with_network_keys(Arc::default(), "m", "db/0");
/// assert_eq!(bag["ingress-address"], "db-0.db-endpoints.m.svc.cluster.local");
/// assert_eq!(bag["private-address"], bag["ingress-address"]);
/// assert!(!bag.contains_key("egress-subnets"));
///
/// // A charm's own value stays.
/// let own = Arc::new([("ingress-address".to_string(), "10.0.0.5".to_string())].into());
/// assert_eq!(with_network_keys(own, "m", "db/0")["ingress-address"], "10.0.0.5");
/// ```
pub fn with_network_keys(mut bag: SharedBag, model: &str, unit: &str) -> SharedBag {
    if ADDRESS_KEYS.iter().all(|key| bag.contains_key(*key)) {
        return bag;
    }
    // The address is a DNS name, never an IP, so it gives no `egress-subnets`.
    let address = unit_address(model, unit);
    let entries = Arc::make_mut(&mut bag);
    for key in ADDRESS_KEYS {
        entries
            .entry(key.to_string())
            .or_insert_with(|| address.clone());
    }
    bag
}

/// Whether `seen` is what [`with_network_keys`] makes of `stored` (the bag of `unit` in
/// model `model`), without making it: a commit checks that a hook's bags are unchanged by
/// comparing the stored bags with what the hook saw, and copying each to add the keys only
/// to compare would cost more than the check.
///
/// ```
/// use std::sync::Arc;
/// use charm_model::network::{reads_as, with_network_keys};
///
/// let stored: charm_model::SharedBag = Arc::new([("k".to_string(), "v".to_string())].into());
/// let seen = with_network_keys(stored.clone(), "m", "db/0");
/// assert!(reads_as(&stored, &seen, "m", "db/0"));
/// assert!(!reads_as(&stored, &seen, "m", "db/1"));
/// assert!(!reads_as(&Arc::default(), &seen, "m", "db/0"));
/// assert!(!reads_as(&stored, &stored, "m", "db/0"));
/// ```
pub fn reads_as(stored: &SharedBag, seen: &SharedBag, model: &str, unit: &str) -> bool {
    if !ADDRESS_KEYS.iter().all(|key| seen.contains_key(*key)) {
        return false;
    }
    if Arc::ptr_eq(stored, seen) {
        return true;
    }
    let mut address = None;
    let mut added = 0;
    for (key, value) in seen.iter() {
        match stored.get(key) {
            Some(stored) if stored == value => {}
            Some(_) => return false,
            None if ADDRESS_KEYS.contains(&key.as_str()) => {
                let address = address.get_or_insert_with(|| unit_address(model, unit));
                if value != address {
                    return false;
                }
                added += 1;
            }
            None => return false,
        }
    }
    stored.len() + added == seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bag(entries: &[(&str, &str)]) -> SharedBag {
        Arc::new(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_bag_reads_as_its_view_with_the_network_keys_and_as_nothing_else() {
        let address = unit_address("m", "db/0");
        let stored_bags = [
            bag(&[]),
            bag(&[("k", "v")]),
            bag(&[("ingress-address", "10.0.0.5")]),
            bag(&[("ingress-address", "a"), ("private-address", "b")]),
        ];
        for stored in &stored_bags {
            let seen = with_network_keys(stored.clone(), "m", "db/0");
            assert!(reads_as(stored, &seen, "m", "db/0"), "{stored:?}");
            // Any other view differs: a value changed, a key added or gone.
            let mut changed = (*seen).clone();
            changed.insert("private-address".into(), "elsewhere".into());
            let mut added = (*seen).clone();
            added.insert("new".into(), "1".into());
            let mut gone = (*seen).clone();
            gone.remove("ingress-address");
            for other in [changed, added, gone] {
                let other = Arc::new(other);
                assert_eq!(
                    reads_as(stored, &other, "m", "db/0"),
                    *other == *seen,
                    "{stored:?} as {other:?}"
                );
            }
        }
        // The stored bag with a key the view lacks.
        let seen = with_network_keys(bag(&[]), "m", "db/0");
        let more = bag(&[("k", "v"), ("ingress-address", &address)]);
        assert!(!reads_as(&more, &seen, "m", "db/0"));
    }
}
