//! The model's status, as `charm-host status` shows it.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::records::{Status, StatusKind};
use crate::tx::ModelTx;

/// One unit's line in the model status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitStatusRow {
    /// The unit.
    pub name: String,
    /// Whether it holds its application's lease now.
    pub leader: bool,
    /// The host whose agent runs it, as its ownership lease says
    /// ([`crate::ownership_lease`]); `None` while no live agent owns it.
    pub host: Option<String>,
    /// Its workload status (an error status while a hook is failing).
    pub status: Status,
    /// Its workload version.
    pub workload_version: String,
}

/// One application's line in the model status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStatusRow {
    /// The application.
    pub name: String,
    /// Its charm.
    pub charm: String,
    /// Its status, as set by its leader.
    pub status: Status,
    /// Its leader, if any.
    pub leader: Option<String>,
    /// Its lease's term.
    pub term: Option<u64>,
    /// Its pod spec's revision.
    pub pod_spec_revision: Option<u64>,
}

/// The model's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatus {
    /// Applications by name.
    pub applications: Vec<AppStatusRow>,
    /// Units by name.
    pub units: Vec<UnitStatusRow>,
}

/// The status of every application and unit, as `tx` has them. A unit whose hook is
/// failing shows an error status with the hook's error, whatever its charm set.
pub fn status<T: ModelTx + ?Sized>(tx: &mut T) -> Result<ModelStatus, StoreError> {
    let mut status = ModelStatus::default();
    for (name, charm) in tx.app_charms()? {
        let lease = tx.live_lease(&name)?;
        for unit in tx.units_of(&name)? {
            let record = tx.unit(&unit)?.unwrap_or_default();
            status.units.push(UnitStatusRow {
                leader: lease.as_ref().is_some_and(|l| l.unit() == unit),
                host: tx.live_lease(&crate::ownership_lease(&unit))?.map(|l| {
                    crate::holder_agent(&l.holder)
                        .map_or(l.holder.as_str(), crate::agent_host)
                        .to_string()
                }),
                status: match record.hook_error {
                    Some(e) => Status::new(StatusKind::Error, e),
                    None => record.status,
                },
                name: unit,
                workload_version: record.workload_version,
            });
        }
        status.applications.push(AppStatusRow {
            status: tx.app_view(&name)?.unwrap_or_default().status,
            pod_spec_revision: tx.pod_spec_revision(&name)?,
            leader: lease.as_ref().map(|l| l.unit().to_string()),
            term: lease.map(|l| l.term),
            name,
            charm,
        });
    }
    Ok(status)
}
