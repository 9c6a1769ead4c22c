use crate::bindings::juju::charm::relations::{Host, Relation};
use crate::bindings::types::Error;
use crate::context::{HookContext, overlay};
use crate::model::RelationView;

fn relation(ctx: &HookContext, id: u32) -> Result<&RelationView, Error> {
    ctx.snapshot
        .relations
        .get(&id)
        .ok_or(Error::RelationNotFound(id))
}

impl Host for HookContext {
    fn relation_ids(&mut self, name: String) -> Vec<u32> {
        self.snapshot
            .relations
            .values()
            .filter(|r| r.endpoint == name)
            .map(|r| r.id)
            .collect()
    }

    fn relation_get(&mut self, id: u32) -> Result<Relation, Error> {
        let r = relation(self, id)?;
        Ok(Relation {
            id,
            name: r.endpoint.clone(),
            remote_app: r.remote_app.clone(),
            remote_units: r.remote_units.clone(),
        })
    }

    fn unit_data(&mut self, id: u32, unit: String) -> Result<Vec<(String, String)>, Error> {
        let r = relation(self, id)?;
        if unit == self.unit() {
            let bag = overlay(
                r.unit_bags.get(&unit).map(|b| &**b),
                self.changes.unit_bags.get(&id),
            );
            return Ok(bag.into_iter().collect());
        }
        if !r.remote_units.contains(&unit) {
            return Err(Error::PermissionDenied(format!(
                "unit {unit} is not in relation {id}"
            )));
        }
        Ok(r.unit_bags
            .get(&unit)
            .map(|b| b.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    fn app_data(&mut self, id: u32, app: String) -> Result<Vec<(String, String)>, Error> {
        let r = relation(self, id)?;
        let peer = r.remote_app == self.app();
        if app == self.app() {
            // As in Juju: only the leader reads its own application's bag, except on peers.
            if !peer && !self.is_leader() {
                return Err(Error::PermissionDenied(format!(
                    "only the leader of {app} may read its application bag in relation {id}"
                )));
            }
            let bag = overlay(
                r.app_bags.get(&app).map(|b| &**b),
                self.changes.app_bags.get(&id),
            );
            return Ok(bag.into_iter().collect());
        }
        if app != r.remote_app {
            return Err(Error::PermissionDenied(format!(
                "application {app} is not in relation {id}"
            )));
        }
        Ok(r.app_bags
            .get(&app)
            .map(|b| b.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    fn set_unit_data(
        &mut self,
        id: u32,
        unit: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), Error> {
        relation(self, id)?;
        if unit != self.unit() {
            return Err(Error::PermissionDenied(format!(
                "{} may write only its own unit bag, not {unit}'s",
                self.unit()
            )));
        }
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a relation setting's key must not be empty".into(),
            ));
        }
        self.changes
            .unit_bags
            .entry(id)
            .or_default()
            .insert(key, value);
        Ok(())
    }

    fn set_app_data(
        &mut self,
        id: u32,
        app: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), Error> {
        relation(self, id)?;
        if app != self.app() {
            return Err(Error::PermissionDenied(format!(
                "{} may write only its own application's bag, not {app}'s",
                self.unit()
            )));
        }
        super::require_leader(self)?;
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "a relation setting's key must not be empty".into(),
            ));
        }
        self.changes
            .app_bags
            .entry(id)
            .or_default()
            .insert(key, value);
        Ok(())
    }
}
