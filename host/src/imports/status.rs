use charm_model::access;

use crate::bindings::juju::charm::status::Host;
use crate::bindings::types::{Error, Status as WitStatus, StatusKind as WitKind};
use crate::context::HookContext;
use crate::model::{Status, StatusKind};

fn to_wit(status: &Status) -> WitStatus {
    let kind = match status.kind {
        StatusKind::Unknown => WitKind::Unknown,
        StatusKind::Active => WitKind::Active,
        StatusKind::Maintenance => WitKind::Maintenance,
        StatusKind::Waiting => WitKind::Waiting,
        StatusKind::Blocked => WitKind::Blocked,
        StatusKind::Error => WitKind::Error,
    };
    WitStatus {
        kind,
        message: status.message.clone(),
    }
}

fn from_wit(status: WitStatus) -> Status {
    let kind = match status.kind {
        WitKind::Unknown => StatusKind::Unknown,
        WitKind::Active => StatusKind::Active,
        WitKind::Maintenance => StatusKind::Maintenance,
        WitKind::Waiting => StatusKind::Waiting,
        WitKind::Blocked => StatusKind::Blocked,
        WitKind::Error => StatusKind::Error,
    };
    Status {
        kind,
        message: status.message,
    }
}

impl HookContext {
    /// A status the charm sets, as the model allows it.
    fn settable(&mut self, status: WitStatus) -> Result<Status, Error> {
        let status = from_wit(status);
        self.allowed(access::set_status(status.kind, &status.message))?;
        Ok(status)
    }
}

impl Host for HookContext {
    fn unit_status(&mut self) -> WitStatus {
        to_wit(
            self.changes
                .unit_status
                .as_ref()
                .unwrap_or(&self.snapshot.unit_status),
        )
    }

    fn set_unit_status(&mut self, status: WitStatus) -> Result<(), Error> {
        self.changes.unit_status = Some(self.settable(status)?);
        Ok(())
    }

    fn app_status(&mut self) -> Result<WitStatus, Error> {
        super::require_leader(self)?;
        Ok(to_wit(
            self.changes
                .app_status
                .as_ref()
                .unwrap_or(&self.snapshot.app_status),
        ))
    }

    fn set_app_status(&mut self, status: WitStatus) -> Result<(), Error> {
        super::require_leader(self)?;
        self.changes.app_status = Some(self.settable(status)?);
        Ok(())
    }

    fn set_workload_version(&mut self, version: String) {
        self.changes.workload_version = Some(version);
    }
}
