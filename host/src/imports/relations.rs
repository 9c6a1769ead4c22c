use charm_model::access::{self, Side};

use crate::bindings::juju::charm::relations::{Host, Relation, RelationPacked};
use crate::bindings::types::Error;
use crate::context::{BagOf, HookContext, overlay};
use crate::model::{Bag, BagWrites, RelationView};

fn relation(ctx: &HookContext, id: u32) -> Result<&RelationView, Error> {
    ctx.snapshot
        .relations
        .get(&id)
        .ok_or(Error::RelationNotFound(id))
}

/// A bag as the hook reads it: its own side with its writes over it.
fn read(side: Side, stored: Option<&Bag>, writes: Option<&BagWrites>) -> Vec<(String, String)> {
    match side {
        Side::Local => overlay(stored, writes).into_iter().collect(),
        Side::Remote => stored
            .map(|b| b.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
    }
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
            remote_units: r.remote_units.to_vec(),
        })
    }

    fn relation_get_packed(&mut self, id: u32) -> Result<RelationPacked, Error> {
        let r = relation(self, id)?;
        Ok(RelationPacked {
            id,
            name: r.endpoint.clone(),
            remote_app: r.remote_app.clone(),
            remote_units: r.remote_units.packed().to_owned(),
        })
    }

    fn unit_data(&mut self, id: u32, unit: String) -> Result<Vec<(String, String)>, Error> {
        let r = relation(self, id)?;
        let verdict = access::read_unit_bag(id, self.unit(), &unit, r.remote_units.contains(&unit));
        let side = self.allowed(verdict)?;
        if side == Side::Remote {
            self.fetch_unit_bag(id, &unit);
        }
        let stored = relation(self, id)?.unit_bags.get(&unit).map(|b| &**b);
        Ok(read(side, stored, self.changes.unit_bags.get(&id)))
    }

    fn app_data(&mut self, id: u32, app: String) -> Result<Vec<(String, String)>, Error> {
        let r = relation(self, id)?;
        let verdict = access::read_app_bag(id, self.app(), &app, &r.remote_app, self.is_leader());
        let side = self.allowed(verdict)?;
        let stored = relation(self, id)?.app_bags.get(&app).map(|b| &**b);
        Ok(read(side, stored, self.changes.app_bags.get(&id)))
    }

    fn set_unit_data(
        &mut self,
        id: u32,
        unit: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), Error> {
        relation(self, id)?;
        let verdict = access::write_unit_bag(self.unit(), &unit, &key, value.as_deref());
        self.allowed(verdict)?;
        self.write_key(BagOf::Unit(id), key, value);
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
        let verdict =
            access::write_app_bag(self.unit(), &app, &key, value.as_deref(), self.is_leader());
        self.allowed(verdict)?;
        self.write_key(BagOf::App(id), key, value);
        Ok(())
    }
}
