use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::sync::OnceLock;

use crate::backend::{self, BagRead, Deferred, Entries, RelationInfo};
use crate::error::Result;

/// A relation as this unit sees it.
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// if let Some(db) = model.relation("db")? {
///     charm_sdk::log::info(&format!("{} units of {} on relation {}", db.remote_units().len(), db.remote_app(), db.id()));
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Relation {
    id: u32,
    name: String,
    remote_app: String,
    /// Asked of the host the first time they are: a hook that never lists a relation's
    /// units never copies them (about 150 KiB for 10,000 units).
    remote_units: OnceLock<crate::RemoteUnits>,
    local_unit: String,
    local_app: String,
}

impl fmt::Debug for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relation")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("remote_app", &self.remote_app)
            // Not asked for here: printing a relation is no reason to copy its units.
            .field("remote_units", &self.remote_units.get())
            .field("local_unit", &self.local_unit)
            .field("local_app", &self.local_app)
            .finish()
    }
}

/// Two relations are equal when they are the same relation seen by the same unit: in one
/// hook, a relation's units follow from its id.
impl PartialEq for Relation {
    fn eq(&self, other: &Self) -> bool {
        (
            self.id,
            &self.name,
            &self.remote_app,
            &self.local_unit,
            &self.local_app,
        ) == (
            other.id,
            &other.name,
            &other.remote_app,
            &other.local_unit,
            &other.local_app,
        )
    }
}

impl Eq for Relation {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Unit(String),
    App(String),
}

impl Relation {
    pub(crate) fn new(r: RelationInfo, local_unit: String, local_app: String) -> Self {
        Relation {
            id: r.id,
            name: r.name,
            remote_app: r.remote_app,
            remote_units: OnceLock::new(),
            local_unit,
            local_app,
        }
    }

    /// The relation's id.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let ids: Vec<u32> = model.relations("db")?.iter().map(|r| r.id()).collect();
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The endpoint's name on this side.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// assert_eq!(rel.name(), "db");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The application on the other side (this one for a peer relation).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// assert_eq!(rel.remote_app(), "postgresql");
    /// # Ok(()) }
    /// ```
    pub fn remote_app(&self) -> &str {
        &self.remote_app
    }

    /// The remote units that have joined, in unit order (for peers: the other units). One
    /// string however many there are: read it like a slice of names. Asked of the host the
    /// first time: a hook that never calls this never copies the names.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let peers = model.relation("cluster")?.map(|r| r.remote_units().len()).unwrap_or(0);
    /// # Ok(()) }
    /// ```
    ///
    /// A `Relation` belongs to the hook that looked it up: kept for a later hook, it would
    /// answer with that hook's units, if any.
    ///
    /// # Panics
    ///
    /// When no hook is running to answer (natively, outside [`crate::testing`]), or the
    /// relation is no longer in the running hook's model. In the hook that looked it up,
    /// the host answers from the hook's snapshot, which holds the relation.
    pub fn remote_units(&self) -> &crate::RemoteUnits {
        self.remote_units.get_or_init(|| {
            backend::with(|b| b.remote_units(self.id)).unwrap_or_else(|e| {
                panic!(
                    "charm_sdk: the units of relation {} unreadable: {e}",
                    self.id
                )
            })
        })
    }

    /// A unit's bag: this unit's own (writable) or a remote unit's (read only).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// for unit in rel.remote_units() {
    ///     let address = rel.unit_data(unit)?.get("address").map(str::to_owned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unit_data(&self, unit: &str) -> Result<DataBag> {
        let read = backend::with(|b| b.unit_data(self.id, unit))?;
        Ok(DataBag::new(self.id, Owner::Unit(unit.to_string()), read))
    }

    /// An application's bag: this application's (leader only, except on a peer relation,
    /// where every unit reads it) or the remote one's (read only).
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let rel = model.relation_by_id(1)?;
    /// let theirs = rel.app_data(rel.remote_app())?;
    /// # Ok(()) }
    /// ```
    pub fn app_data(&self, app: &str) -> Result<DataBag> {
        let read = backend::with(|b| b.app_data(self.id, app))?;
        Ok(DataBag::new(self.id, Owner::App(app.to_string()), read))
    }

    /// This unit's own bag, which it alone writes.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     db.local_unit_data()?.set("database", "discourse")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn local_unit_data(&self) -> Result<DataBag> {
        self.unit_data(&self.local_unit)
    }

    /// This application's bag. Leader only, except on a peer relation, where every unit
    /// reads it and the leader writes it.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if model.is_leader() {
    ///     for rel in model.relations("db")? {
    ///         rel.local_app_data()?.set("master", "host=db-0")?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn local_app_data(&self) -> Result<DataBag> {
        self.app_data(&self.local_app)
    }

    /// The remote application's bag.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     let master = db.remote_app_data()?.get("master").map(str::to_owned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remote_app_data(&self) -> Result<DataBag> {
        self.app_data(&self.remote_app)
    }
}

/// One data bag of a relation: a unit's or an application's key/value settings.
///
/// Reads come from the hook's snapshot plus its own writes; `set` and `remove` are checked
/// by the host against Juju's access rules and buffered until the hook commits. A value
/// longer than 4 KiB is copied into the charm only when the charm asks for it (by its key,
/// or for every entry): reading a bag's short keys costs nothing for its long ones.
///
/// Like every bag of the SDK ([`LeaderData`](crate::LeaderData),
/// [`StoredState`](crate::StoredState)), it is written through a shared reference: `set`
/// and `remove` take `&self`. A value borrowed with [`get`](Self::get) stays as it was read
/// while the bag is written.
///
/// ```
/// use charm_sdk::testing::{Context, Relation, State};
/// use charm_sdk::{Charm, Event, HookResult, Metadata, Model};
///
/// struct Addressed;
/// impl Charm for Addressed {
///     fn metadata() -> Metadata { Metadata::new("addressed").requires("db", "pgsql") }
///     fn handle(model: &Model, _: Event) -> HookResult {
///         let bag = model.relation("db")?.expect("related").local_unit_data()?;
///         let before = bag.get("address");
///         bag.set("address", "10.0.0.7")?;
///         assert_eq!(before, Some("10.0.0.1"));
///         assert_eq!(bag.get("address"), Some("10.0.0.7"));
///         Ok(())
///     }
/// }
/// let db = Relation::new(1, "db", "postgresql").local_unit_data([("address", "10.0.0.1")]);
/// let out = Context::<Addressed>::new().run(Event::Start, State::default().relation(db));
/// assert!(out.committed(), "{:?}", out.outcome);
/// assert_eq!(out.state.relations[0].local_unit_data["address"], "10.0.0.7");
/// ```
pub struct DataBag {
    relation: u32,
    owner: Owner,
    /// The entries as this bag sees them; shared with the hook's read cache until written.
    entries: RefCell<Entries>,
    /// Earlier versions of `entries` that a reference handed out by `get` or `entries` may
    /// still point into, kept unchanged until the bag is dropped. In WebAssembly the hook
    /// arena would not take their memory back before the hook ends anyway.
    superseded: RefCell<Vec<Entries>>,
    /// Whether a reference into the current version of `entries` has been handed out.
    lent: Cell<bool>,
    /// The keys whose values the host left out for their length, not asked for yet.
    deferred: RefCell<Deferred>,
}

impl DataBag {
    fn new(relation: u32, owner: Owner, read: BagRead) -> Self {
        DataBag {
            relation,
            owner,
            entries: RefCell::new(read.entries),
            superseded: RefCell::new(Vec::new()),
            lent: Cell::new(false),
            deferred: RefCell::new(read.deferred),
        }
    }

    /// One value.
    ///
    /// ```no_run
    /// # fn f(bag: &charm_sdk::DataBag) {
    /// let master: Option<&str> = bag.get("master");
    /// # }
    /// ```
    pub fn get(&self, key: &str) -> Option<&str> {
        if self.deferred.borrow().contains(key) {
            self.fetch(key);
        }
        // One lookup. A miss hands nothing out, so a `set` after it writes in place (no
        // copy).
        let value: *const str = self.entries.borrow().get(key)?.as_str();
        self.lent.set(true);
        // SAFETY: as in `lend`: the value is in the current version of the entries, which
        // this bag keeps, unchanged, until it is dropped (`lent` is set before the reference
        // exists, so an edit copies the version first); the `Ref` is already let go.
        Some(unsafe { &*value })
    }

    /// Every entry, sorted by key.
    ///
    /// ```no_run
    /// # fn f(bag: &charm_sdk::DataBag) {
    /// let keys: Vec<&String> = bag.entries().keys().collect();
    /// # }
    /// ```
    pub fn entries(&self) -> &BTreeMap<String, String> {
        let deferred: Vec<String> = self.deferred.borrow().iter().cloned().collect();
        for key in deferred {
            self.fetch(&key);
        }
        self.lend()
    }

    /// Sets a value.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// if let Some(db) = model.relation("db")? {
    ///     db.local_unit_data()?.set("database", "discourse")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn set(&self, key: &str, value: &str) -> Result<()> {
        self.write(key, Some(value))?;
        self.undefer(key);
        self.edit(|entries| {
            entries.insert(key.to_string(), value.to_string());
        });
        Ok(())
    }

    /// Removes a value.
    ///
    /// ```no_run
    /// # fn f(bag: &charm_sdk::DataBag) -> charm_sdk::HookResult {
    /// bag.remove("address")?;
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, key: &str) -> Result<()> {
        self.write(key, None)?;
        self.undefer(key);
        self.edit(|entries| {
            entries.remove(key);
        });
        Ok(())
    }

    /// Asks the host for the value of `key`, one the bag's read left out for its length,
    /// and keeps it.
    ///
    /// # Panics
    ///
    /// If the host refuses it: it gave this bag in the same hook, whose snapshot does not
    /// change, so it cannot, but a charm must not read on as if the key were missing.
    fn fetch(&self, key: &str) {
        let value = backend::with(|b| match &self.owner {
            Owner::Unit(unit) => b.unit_data_value(self.relation, unit, key),
            Owner::App(app) => b.app_data_value(self.relation, app, key),
        })
        .unwrap_or_else(|e| panic!("the host refused the value of `{key}` in a bag it gave: {e}"));
        self.undefer(key);
        if let Some(value) = value {
            self.edit(|entries| {
                entries.insert(key.to_string(), value);
            });
        }
    }

    /// `key`'s value is in `entries` (or, removed, nowhere): not to be asked for.
    fn undefer(&self, key: &str) {
        let mut deferred = self.deferred.borrow_mut();
        if deferred.contains(key) {
            Rc::make_mut(&mut deferred).remove(key);
        }
    }

    /// The current version of the entries, for a reference that lives as long as `&self`.
    fn lend(&self) -> &BTreeMap<String, String> {
        self.lent.set(true);
        let map: *const BTreeMap<String, String> = Rc::as_ptr(&self.entries.borrow());
        // SAFETY: the map is inside an `Rc` that this bag holds, in `entries` or, once
        // superseded, in `superseded`, until it is dropped; a reference bounded by `&self`
        // cannot outlive that. Nobody changes it meanwhile: a shared `Rc` is never written,
        // and `edit` writes in place only to a version nothing was lent from (`lent` is
        // set here, before the reference exists). The `Ref` is let go at once, so `edit`
        // can borrow the cell again.
        unsafe { &*map }
    }

    /// Applies a write the host accepted to this bag's own view of its entries.
    fn edit(&self, change: impl FnOnce(&mut BTreeMap<String, String>)) {
        let mut entries = self.entries.borrow_mut();
        if self.lent.replace(false) {
            // Something may point into this version: keep it as it is. Now shared, it is
            // copied by `make_mut` below, and the copy has lent nothing yet.
            self.superseded.borrow_mut().push(Rc::clone(&entries));
        }
        // Copies the entries too while the read cache, or another bag, shares them.
        change(Rc::make_mut(&mut entries));
    }

    fn write(&self, key: &str, value: Option<&str>) -> Result<()> {
        match &self.owner {
            Owner::Unit(unit) => {
                backend::write(|b| b.set_unit_data(self.relation, unit, key, value))?
            }
            Owner::App(app) => backend::write(|b| b.set_app_data(self.relation, app, key, value))?,
        }
        Ok(())
    }
}

impl Clone for DataBag {
    /// The same bag, sharing the entries until either is written; the copy has lent nothing.
    fn clone(&self) -> Self {
        DataBag::new(
            self.relation,
            self.owner.clone(),
            BagRead {
                entries: Rc::clone(&self.entries.borrow()),
                deferred: Rc::clone(&self.deferred.borrow()),
            },
        )
    }
}

impl PartialEq for DataBag {
    fn eq(&self, other: &Self) -> bool {
        self.relation == other.relation
            && self.owner == other.owner
            && self.entries() == other.entries()
    }
}

impl Eq for DataBag {}

impl fmt::Debug for DataBag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataBag")
            .field("relation", &self.relation)
            .field("owner", &self.owner)
            .field("entries", &**self.entries.borrow())
            .field("deferred", &**self.deferred.borrow())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Context, Relation as TestRelation, State};
    use crate::{Charm, Event, HookResult, Metadata, Model};

    fn bag(entries: &[(&str, &str)]) -> DataBag {
        let entries = entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let read = BagRead {
            entries: Rc::new(entries),
            ..BagRead::default()
        };
        DataBag::new(1, Owner::Unit("app/0".into()), read)
    }

    fn set(bag: &DataBag, key: &str, value: &str) {
        bag.edit(|e| {
            e.insert(key.to_string(), value.to_string());
        });
    }

    #[test]
    fn what_was_lent_stays_as_it_was_read() {
        let bag = bag(&[("a", "1"), ("b", "2")]);
        let a = bag.get("a").unwrap();
        let all = bag.entries();
        set(&bag, "a", "changed");
        bag.edit(|e| {
            e.remove("b");
        });
        set(&bag, "c", "3");
        assert_eq!(a, "1");
        assert_eq!(all.len(), 2);
        assert_eq!(all["b"], "2");
        assert_eq!(bag.get("a"), Some("changed"));
        assert_eq!(bag.get("b"), None);
        assert_eq!(bag.entries().len(), 2);
    }

    #[test]
    fn a_version_is_kept_only_when_something_was_lent_from_it() {
        let bag = bag(&[("a", "1")]);
        set(&bag, "b", "2");
        assert_eq!(bag.get("missing"), None);
        set(&bag, "c", "3");
        assert!(bag.superseded.borrow().is_empty(), "nothing was lent");
        let _ = bag.get("a");
        set(&bag, "a", "2");
        set(&bag, "a", "3");
        assert_eq!(
            bag.superseded.borrow().len(),
            1,
            "one version was lent from"
        );
    }

    #[test]
    fn a_clone_shares_nothing_it_writes() {
        let original = bag(&[("a", "1")]);
        let copy = original.clone();
        let from_copy = copy.get("a").unwrap();
        set(&original, "a", "2");
        drop(original);
        assert_eq!(from_copy, "1");
        set(&copy, "b", "2");
        assert_eq!(from_copy, "1");
        assert_eq!(copy.get("a"), Some("1"));
        assert_eq!(copy, bag(&[("a", "1"), ("b", "2")]));
    }

    /// Reads, writes and removes interleaved on one bag, and a second bag of the same
    /// relation read afterwards, through the harness's host.
    struct Interleaved;
    impl Charm for Interleaved {
        fn metadata() -> Metadata {
            Metadata::new("interleaved").requires("db", "pgsql")
        }
        fn handle(model: &Model, _: Event) -> HookResult {
            let db = model.relation("db")?.expect("related");
            let bag = db.local_unit_data()?;
            let old = bag.get("a").expect("in the state");
            bag.set("a", "2")?;
            bag.remove("b")?;
            bag.set("c", "3")?;
            assert_eq!(old, "1");
            assert_eq!(bag.get("a"), Some("2"));
            assert_eq!(bag.get("b"), None);
            let again = db.local_unit_data()?;
            assert_eq!(again.entries(), bag.entries());
            Ok(())
        }
    }

    #[test]
    fn writes_reach_the_host_and_a_later_read() {
        let db = TestRelation::new(1, "db", "postgresql").local_unit_data([("a", "1"), ("b", "x")]);
        let out = Context::<Interleaved>::new().run(Event::Start, State::default().relation(db));
        assert!(out.committed(), "{:?}", out.outcome);
        let written = &out.state.relations[0].local_unit_data;
        assert_eq!(written.get("a").map(String::as_str), Some("2"));
        assert_eq!(written.get("b"), None);
        assert_eq!(written.get("c").map(String::as_str), Some("3"));
    }

    /// Reads of bags holding values longer than the host sends with a bag's read.
    struct LongValues;
    impl Charm for LongValues {
        fn metadata() -> Metadata {
            Metadata::new("long-values").requires("db", "pgsql")
        }
        fn handle(model: &Model, _: Event) -> HookResult {
            let db = model.relation("db")?.expect("related");
            let theirs = db.remote_app_data()?;
            let left_out = |bag: &DataBag| format!("{:?}", bag.deferred.borrow());
            assert_eq!(left_out(&theirs), r#"{"allowed-units", "standbys"}"#);
            assert_eq!(theirs.get("master"), Some("host=db-0"));
            assert_eq!(theirs.get("missing"), None);
            let units = theirs.get("allowed-units").expect("asked for");
            assert_eq!(units, long('u'));
            assert_eq!(left_out(&theirs), r#"{"standbys"}"#);
            assert_eq!(theirs.entries().len(), 3);
            assert_eq!(theirs.entries()["standbys"], long('s'));
            assert_eq!(left_out(&theirs), "{}");
            assert_eq!(units, long('u'), "what was lent stays");
            assert_eq!(theirs, db.remote_app_data()?);

            let mine = db.local_unit_data()?;
            mine.set("cert", "short")?;
            mine.remove("key")?;
            assert_eq!(left_out(&mine), "{}");
            assert_eq!(mine.get("cert"), Some("short"));
            assert_eq!(mine.get("key"), None);
            let again = db.local_unit_data()?;
            assert_eq!(again.entries(), mine.entries());
            assert_eq!(again.entries().len(), 1);
            Ok(())
        }
    }

    fn long(c: char) -> String {
        c.to_string().repeat(backend::INLINE_MAX as usize + 1)
    }

    #[test]
    fn long_values_are_read_when_asked_for_and_written_like_any() {
        let db = TestRelation::new(1, "db", "postgresql")
            .remote_app_data([
                ("master", "host=db-0".to_string()),
                ("allowed-units", long('u')),
                ("standbys", long('s')),
            ])
            .local_unit_data([("cert", long('c')), ("key", long('k'))]);
        let out = Context::<LongValues>::new().run(Event::Start, State::default().relation(db));
        assert!(out.committed(), "{:?}", out.outcome);
        let written = &out.state.relations[0].local_unit_data;
        assert_eq!(written.get("cert").map(String::as_str), Some("short"));
        assert_eq!(written.get("key"), None);
        assert_eq!(
            out.state.relations[0].remote_app_data["allowed-units"],
            long('u')
        );
    }
}
