//! The model as a bundle, as `juju export-bundle` writes it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::ConfigValue;
use crate::store::{StateStore, StoreError};

/// An application of an exported bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedApp {
    /// Its charm, as the model records it: a name, or the module file's absolute path.
    pub charm: String,
    /// Its units.
    pub scale: u32,
    /// The operator's settings; the charm's defaults are not repeated.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, ConfigValue>,
}

/// A model written as a Kubernetes bundle: deploying it into an empty store gives the same
/// applications, units, settings and relations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedBundle {
    /// Always `kubernetes`: units run as pods.
    pub bundle: String,
    /// The applications, by name.
    pub applications: BTreeMap<String, ExportedApp>,
    /// The relations between applications, as `app:endpoint` pairs. Peer relations are
    /// not listed: deploying establishes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<[String; 2]>,
}

/// Reads the model in `store` as a bundle.
pub async fn export<S: StateStore + ?Sized>(store: &S) -> Result<ExportedBundle, StoreError> {
    let mut applications = BTreeMap::new();
    for app in store.applications().await? {
        let units = store.units(&app.name).await?;
        applications.insert(
            app.name.clone(),
            ExportedApp {
                charm: app.charm.clone(),
                scale: u32::try_from(units.len()).unwrap_or(u32::MAX),
                options: app.config.clone(),
            },
        );
    }
    let mut relations = store.relations().await?;
    relations.sort_by_key(|r| r.id);
    let relations = relations
        .iter()
        .filter_map(|r| match r.endpoints.as_slice() {
            [a, b] => Some([
                format!("{}:{}", a.app, a.endpoint),
                format!("{}:{}", b.app, b.endpoint),
            ]),
            _ => None,
        })
        .collect();
    Ok(ExportedBundle {
        bundle: "kubernetes".into(),
        applications,
        relations,
    })
}
