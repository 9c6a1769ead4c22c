//! Which endpoints an operator means by `app[:endpoint]`, as `juju integrate` resolves them:
//! the same interface, one side providing it and the other requiring it, and exactly one
//! such pair.

use crate::error::{StoreError, invalid};
use crate::records::{CharmMetadata, RelationEndpoint, RelationRole};

/// `app[:endpoint]` split in two.
///
/// ```
/// use charm_model::endpoints::split;
///
/// assert_eq!(split("discourse:db"), ("discourse", Some("db")));
/// assert_eq!(split("discourse"), ("discourse", None));
/// ```
pub fn split(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((app, endpoint)) => (app, Some(endpoint)),
        None => (spec, None),
    }
}

/// One side as the operator named it, with its charm's metadata.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The application.
    pub app: &'a str,
    /// The endpoint, if named.
    pub endpoint: Option<&'a str>,
    /// What its charm declares.
    pub metadata: &'a CharmMetadata,
}

/// The two endpoints `a` and `b` name, and the interface they speak. An endpoint named
/// that the charm lacks, no pair that fits, or more than one, is [`StoreError::Invalid`]
/// naming it.
pub fn resolve(
    a: Side<'_>,
    b: Side<'_>,
) -> Result<(RelationEndpoint, RelationEndpoint, String), StoreError> {
    let named = format!(
        "{} {}",
        a.endpoint
            .map_or(a.app.to_string(), |e| format!("{}:{e}", a.app)),
        b.endpoint
            .map_or(b.app.to_string(), |e| format!("{}:{e}", b.app)),
    );
    if a.app == b.app {
        return Err(invalid(format!(
            "relation {named}: an application is not related to itself (its peer relations are made when it is deployed)"
        )));
    }
    for side in [a, b] {
        if let Some(ep) = side.endpoint
            && side.metadata.endpoint(ep).is_none()
        {
            let names: Vec<&str> = side
                .metadata
                .relations
                .iter()
                .map(|r| r.name.as_str())
                .collect();
            return Err(invalid(format!(
                "relation {named}: application {} has no endpoint {ep:?} (it has: {})",
                side.app,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
    }
    let pairs = |x: RelationRole, y: RelationRole| {
        matches!(
            (x, y),
            (RelationRole::Provides, RelationRole::Requires)
                | (RelationRole::Requires, RelationRole::Provides)
        )
    };
    let mut candidates = Vec::new();
    for ea in &a.metadata.relations {
        if a.endpoint.is_some_and(|n| n != ea.name) {
            continue;
        }
        for eb in &b.metadata.relations {
            if b.endpoint.is_some_and(|n| n != eb.name) {
                continue;
            }
            if ea.interface == eb.interface && pairs(ea.role, eb.role) {
                candidates.push((ea, eb));
            }
        }
    }
    match candidates.as_slice() {
        [(ea, eb)] => Ok((
            RelationEndpoint {
                app: a.app.to_string(),
                endpoint: ea.name.clone(),
            },
            RelationEndpoint {
                app: b.app.to_string(),
                endpoint: eb.name.clone(),
            },
            ea.interface.clone(),
        )),
        [] => {
            let describe =
                |side: Side<'_>| match side.endpoint.and_then(|e| side.metadata.endpoint(e)) {
                    Some(e) => format!(
                        "{}:{} ({} {})",
                        side.app,
                        e.name,
                        role_name(e.role),
                        e.interface
                    ),
                    None => side.app.to_string(),
                };
            Err(invalid(format!(
                "relation {named}: no matching endpoints: {} and {} need the same interface, one providing and one requiring it",
                describe(a),
                describe(b)
            )))
        }
        many => {
            let options: Vec<String> = many
                .iter()
                .map(|(ea, eb)| format!("{}:{} {}:{}", a.app, ea.name, b.app, eb.name))
                .collect();
            Err(invalid(format!(
                "relation {named}: ambiguous; name the endpoints (app:endpoint), one of: {}",
                options.join(", ")
            )))
        }
    }
}

fn role_name(role: RelationRole) -> &'static str {
    match role {
        RelationRole::Provides => "provides",
        RelationRole::Requires => "requires",
        RelationRole::Peers => "peers",
    }
}
