use charm_model::access::{self, Side};

use crate::bindings::juju::charm::relations::{Host, Relation, RelationPacked, RelationSummary};
use crate::bindings::types::Error;
use crate::context::{BagOf, HookContext};
use crate::model::{Bag, BagWrites, RelationView};

fn relation(ctx: &HookContext, id: u32) -> Result<&RelationView, Error> {
    ctx.snapshot
        .relations
        .get(&id)
        .ok_or(Error::RelationNotFound(id))
}

/// A bag as the hook reads it: the stored entries, and on its own side its writes over them.
struct Seen<'a> {
    stored: Option<&'a Bag>,
    writes: Option<&'a BagWrites>,
}

impl<'a> Seen<'a> {
    fn new(side: Side, stored: Option<&'a Bag>, writes: Option<&'a BagWrites>) -> Self {
        let writes = writes.filter(|_| side == Side::Local);
        Seen { stored, writes }
    }

    fn value(&self, key: &str) -> Option<&'a str> {
        match self.writes.and_then(|w| w.get(key)) {
            Some(written) => written.as_deref(),
            None => self.stored.and_then(|b| b.get(key)).map(String::as_str),
        }
    }

    /// Calls `f` with every entry, sorted by key: the stored entries and the writes (both
    /// sorted by key) merged in one pass, a write over the stored entry of its key, a
    /// deletion leaving it out. Without writes (a remote bag, or none made), the stored
    /// entries as they are.
    fn for_each(&self, mut f: impl FnMut(&'a str, &'a str)) {
        use std::cmp::Ordering;
        let Some(writes) = self.writes else {
            for (k, v) in self.stored.into_iter().flatten() {
                f(k, v);
            }
            return;
        };
        let mut stored = self.stored.into_iter().flatten().peekable();
        let mut writes = writes.iter().peekable();
        loop {
            let order = match (stored.peek(), writes.peek()) {
                (None, None) => return,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((s, _)), Some((w, _))) => s.cmp(w),
            };
            if order == Ordering::Less {
                if let Some((k, v)) = stored.next() {
                    f(k, v);
                }
                continue;
            }
            if order == Ordering::Equal {
                stored.next();
            }
            if let Some((k, Some(v))) = writes.next() {
                f(k, v);
            }
        }
    }

    /// At least as many entries as the bag has: the vectors below are sized once.
    fn len_bound(&self) -> usize {
        self.stored.map_or(0, Bag::len) + self.writes.map_or(0, BagWrites::len)
    }

    fn all(&self) -> Vec<(String, String)> {
        let mut all = Vec::with_capacity(self.len_bound());
        self.for_each(|k, v| all.push((k.to_owned(), v.to_owned())));
        all
    }

    /// Every entry, values longer than `inline_max` bytes left out.
    fn inline(&self, inline_max: u32) -> Vec<(String, Option<String>)> {
        let fits = |v: &str| u32::try_from(v.len()).is_ok_and(|n| n <= inline_max);
        let mut inline = Vec::with_capacity(self.len_bound());
        self.for_each(|k, v| inline.push((k.to_owned(), fits(v).then(|| v.to_owned()))));
        inline
    }
}

impl HookContext {
    /// `unit`'s bag in relation `id` as this hook may read it, or why not.
    fn unit_bag_seen(&mut self, id: u32, unit: &str) -> Result<Seen<'_>, Error> {
        let r = relation(self, id)?;
        let verdict = access::read_unit_bag(id, self.unit(), unit, r.remote_units.contains(unit));
        let side = self.allowed(verdict)?;
        if side == Side::Remote {
            self.fetch_unit_bag(id, unit);
        }
        let stored = relation(self, id)?.unit_bags.get(unit).map(|b| &**b);
        Ok(Seen::new(side, stored, self.changes.unit_bags.get(&id)))
    }

    /// `app`'s bag in relation `id` as this hook may read it, or why not.
    fn app_bag_seen(&mut self, id: u32, app: &str) -> Result<Seen<'_>, Error> {
        let r = relation(self, id)?;
        let verdict = access::read_app_bag(id, self.app(), app, &r.remote_app, self.is_leader());
        let side = self.allowed(verdict)?;
        let stored = relation(self, id)?.app_bags.get(app).map(|b| &**b);
        Ok(Seen::new(side, stored, self.changes.app_bags.get(&id)))
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

    fn relation_get_summary(&mut self, id: u32) -> Result<RelationSummary, Error> {
        let r = relation(self, id)?;
        Ok(RelationSummary {
            id,
            name: r.endpoint.clone(),
            remote_app: r.remote_app.clone(),
        })
    }

    fn relation_list_packed(&mut self, id: u32) -> Result<String, Error> {
        Ok(relation(self, id)?.remote_units.packed().to_owned())
    }

    fn unit_data(&mut self, id: u32, unit: String) -> Result<Vec<(String, String)>, Error> {
        Ok(self.unit_bag_seen(id, &unit)?.all())
    }

    fn app_data(&mut self, id: u32, app: String) -> Result<Vec<(String, String)>, Error> {
        Ok(self.app_bag_seen(id, &app)?.all())
    }

    fn unit_data_inline(
        &mut self,
        id: u32,
        unit: String,
        inline_max: u32,
    ) -> Result<Vec<(String, Option<String>)>, Error> {
        Ok(self.unit_bag_seen(id, &unit)?.inline(inline_max))
    }

    fn app_data_inline(
        &mut self,
        id: u32,
        app: String,
        inline_max: u32,
    ) -> Result<Vec<(String, Option<String>)>, Error> {
        Ok(self.app_bag_seen(id, &app)?.inline(inline_max))
    }

    fn unit_data_value(
        &mut self,
        id: u32,
        unit: String,
        key: String,
    ) -> Result<Option<String>, Error> {
        Ok(self
            .unit_bag_seen(id, &unit)?
            .value(&key)
            .map(str::to_owned))
    }

    fn app_data_value(
        &mut self,
        id: u32,
        app: String,
        key: String,
    ) -> Result<Option<String>, Error> {
        Ok(self.app_bag_seen(id, &app)?.value(&key).map(str::to_owned))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::UnitSnapshot;

    fn bag(entries: &[(&str, &str)]) -> Arc<Bag> {
        Arc::new(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// db/0, a follower, related to web/0, whose bags hold a long value.
    fn context() -> HookContext {
        let mut snapshot = UnitSnapshot {
            unit: "db/0".into(),
            app: "db".into(),
            ..UnitSnapshot::default()
        };
        let long = "u".repeat(100);
        snapshot.relations.insert(
            1,
            RelationView {
                id: 1,
                endpoint: "db".into(),
                remote_app: "web".into(),
                remote_units: vec!["web/0".to_string()].into(),
                unit_bags: [
                    ("web/0".to_string(), bag(&[("name", "w"), ("cert", &long)])),
                    ("db/0".to_string(), bag(&[("a", "1"), ("b", &long)])),
                ]
                .into(),
                app_bags: [
                    (
                        "web".to_string(),
                        bag(&[("allowed", &long), ("master", "m")]),
                    ),
                    ("db".to_string(), bag(&[("x", "1")])),
                ]
                .into(),
            },
        );
        HookContext::new(snapshot, None, Arc::default(), 1 << 20)
    }

    #[test]
    fn a_bag_read_inline_leaves_out_long_values_and_gives_them_one_by_one() {
        let mut ctx = context();
        let inline = ctx.app_data_inline(1, "web".into(), 10).unwrap();
        assert_eq!(
            inline,
            [
                ("allowed".to_string(), None),
                ("master".to_string(), Some("m".to_string()))
            ]
        );
        let long = ctx
            .app_data_value(1, "web".into(), "allowed".into())
            .unwrap();
        assert_eq!(long.as_deref(), Some(&*"u".repeat(100)));
        assert_eq!(
            ctx.app_data_value(1, "web".into(), "none".into()).unwrap(),
            None
        );
        let whole = ctx.app_data(1, "web".into()).unwrap();
        assert_eq!(whole.len(), 2);
        assert_eq!(
            ctx.app_data_inline(1, "web".into(), 100).unwrap()[0].1,
            long
        );

        let remote = ctx.unit_data_inline(1, "web/0".into(), 10).unwrap();
        assert_eq!(remote[0], ("cert".to_string(), None));
        let cert = ctx.unit_data_value(1, "web/0".into(), "cert".into());
        assert_eq!(cert.unwrap().map(|c| c.len()), Some(100));
    }

    #[test]
    fn a_units_own_bag_reads_with_its_writes_over_it() {
        let mut ctx = context();
        ctx.set_unit_data(1, "db/0".into(), "a".into(), None)
            .unwrap();
        ctx.set_unit_data(1, "db/0".into(), "c".into(), Some("3".into()))
            .unwrap();
        let inline = ctx.unit_data_inline(1, "db/0".into(), 10).unwrap();
        assert_eq!(
            inline,
            [
                ("b".to_string(), None),
                ("c".to_string(), Some("3".to_string()))
            ]
        );
        assert_eq!(
            ctx.unit_data_value(1, "db/0".into(), "a".into()).unwrap(),
            None
        );
        assert_eq!(
            ctx.unit_data_value(1, "db/0".into(), "c".into()).unwrap(),
            Some("3".into())
        );
        let whole = ctx.unit_data(1, "db/0".into()).unwrap();
        assert_eq!(
            whole.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
    }

    #[test]
    fn a_value_is_refused_as_its_bag_is() {
        let mut ctx = context();
        let whole = ctx.app_data(1, "db".into()).unwrap_err();
        let value = ctx.app_data_value(1, "db".into(), "x".into()).unwrap_err();
        let inline = ctx.app_data_inline(1, "db".into(), 10).unwrap_err();
        assert_eq!(format!("{whole:?}"), format!("{value:?}"));
        assert_eq!(format!("{whole:?}"), format!("{inline:?}"));
        assert!(matches!(
            ctx.unit_data_value(9, "db/0".into(), "a".into()),
            Err(Error::RelationNotFound(9))
        ));
    }

    #[test]
    fn a_bag_seen_merges_writes_over_stored_entries_in_key_order() {
        let stored: Bag = [("a", "1"), ("b", "2"), ("d", "4"), ("f", "6")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let writes: BagWrites = [
            ("b", Some("20")),
            ("c", Some("3")),
            ("d", None),
            ("e", Some("5")),
            ("g", None),
        ]
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .into();
        let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let local = Seen::new(Side::Local, Some(&stored), Some(&writes));
        assert_eq!(
            local.all(),
            owned(&[("a", "1"), ("b", "20"), ("c", "3"), ("e", "5"), ("f", "6")])
        );
        // The other side's bag shows no writes; writes alone show without a stored bag.
        let remote = Seen::new(Side::Remote, Some(&stored), Some(&writes));
        assert_eq!(
            remote.all(),
            owned(&[("a", "1"), ("b", "2"), ("d", "4"), ("f", "6")])
        );
        let fresh = Seen::new(Side::Local, None, Some(&writes));
        assert_eq!(fresh.all(), owned(&[("b", "20"), ("c", "3"), ("e", "5")]));
        // Inline: a value over the bound is left out, its key kept.
        assert_eq!(
            local.inline(1),
            [
                ("a", Some("1")),
                ("b", None),
                ("c", Some("3")),
                ("e", Some("5")),
                ("f", Some("6"))
            ]
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        );
    }
}
