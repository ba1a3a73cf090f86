//! `tarn clone` and the clone relationships the other verbs respect: thin checks and calls
//! into `tarn_dataset::clone`, which owns the space rules (blocks born up to the origin
//! snapshot's txg stay the origin's).
//!
//! A clone is made in open context like `create`: its node names the origin snapshot and
//! starts from the snapshot's committed object-set root, so nothing is copied and the txg
//! that commits the node is the whole change (a crash before it leaves no trace).
//! `clones` of a snapshot is derived from the tree (every node whose origin is it), so no
//! second record can disagree with the clone's header. Destroying an origin snapshot, or a
//! dataset one of whose snapshots is an origin, is refused while clones exist; with `-R`
//! the clones and everything depending on them go first, in the same txg.

use std::collections::BTreeSet;

use tarn_base::ObjectId;
use tarn_dataset::node;
use tarn_dataset::snapshot::{self, Snapshot};
use tarn_dataset::{clone, name as dsname};
use tarn_objects::ObjectSet;

use crate::dataset_ops::{check_applies, invalid, new_dataset_parent, pool_of, validate_prop};
use crate::datasets::{Node, Tree};
use crate::{DatasetId, Engine, EngineError, Imported};

impl Engine {
    /// `tarn clone [-p] [-o prop=val]... DS@SNAP NEWDS`: a dataset whose object set starts
    /// as the snapshot's (a volume's clone is a volume).
    pub fn clone_dataset(
        &self,
        origin: &str,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (source, snap) = snapshot::split_name(origin)?;
        dsname::validate_name(name)?;
        if pool_of(source) != pool_of(name) {
            return Err(invalid("source and target pools differ"));
        }
        let handle = self.pool(pool_of(name))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let source = inner.datasets.lookup(source)?;
        let (_, snapshot) = inner
            .datasets
            .node(source)
            .snapshot(snap)
            .ok_or_else(|| invalid(format!("snapshot '{origin}' does not exist")))?;
        let snapshot = snapshot.clone();
        let (parent, missing) = new_dataset_parent(&inner, name, parents)?;
        crate::limits::check_filesystems(&inner.datasets, parent, missing.len() as u64 + 1)?;
        let is_volume =
            inner.datasets.node(source).objset.kind() == tarn_objects::ObjsetKind::Volume;
        let mut values = Vec::new();
        for (property, value) in properties {
            check_applies(is_volume, property)?;
            if property == "volsize" {
                return Err(EngineError::InvalidProperty(
                    "'volsize' of a clone is its origin's (set it after the clone is made)".into(),
                ));
            }
            values.push((property.clone(), validate_prop(property, value)?));
        }
        // The snapshot's object set is read before anything changes: beyond parity the read
        // may fail, and a failed clone must leave nothing behind (not even `-p`'s parents).
        let objset = ObjectSet::open(&inner.pool.reader(), &snapshot.header.objset)?;
        let mut parent = parent;
        for full in &missing {
            parent = self.create_one(&mut inner, parent, full, &[], None)?;
        }
        self.clone_one(&mut inner, parent, name, &snapshot, objset, &values)?;
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// `tarn promote CLONE`: the origin's snapshots up to the clone's origin move to the
    /// clone, the origin becomes a clone of that snapshot (`tarn_dataset::clone::promote`),
    /// and the other clones of the moved snapshots follow them.
    pub fn promote(&self, name: &str, command: &str) -> Result<(), EngineError> {
        let _admin = self.admin();
        dsname::validate_name(name)?;
        let handle = self.pool(pool_of(name))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(name)?;
        let source = promote_check(&inner.datasets, id)?;
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = &mut *inner;
        let reader = pool.reader();
        let deflate = crate::datasets::deflate_table(pool);
        let origin_floor = datasets.node(source).floor();
        let (mut clone_head, mut origin_head) =
            (datasets.node(id).header, datasets.node(source).header);
        let mut clone_snaps = std::mem::take(&mut datasets.node_mut(id).snapshots);
        let mut origin_snaps = std::mem::take(&mut datasets.node_mut(source).snapshots);
        let result = clone::promote(
            mos.objset(),
            &reader,
            clone::Side {
                id: ObjectId(id.0),
                head: &mut clone_head,
                snapshots: &mut clone_snaps,
            },
            clone::Side {
                id: ObjectId(source.0),
                head: &mut origin_head,
                snapshots: &mut origin_snaps,
            },
            origin_floor,
            &|bp| crate::datasets::dsize(&deflate, bp),
        );
        for (at, header, snapshots) in [
            (id, clone_head, clone_snaps),
            (source, origin_head, origin_snaps),
        ] {
            let node = datasets.node_mut(at);
            (node.header, node.snapshots, node.header_dirty) = (header, snapshots, true);
        }
        result?;
        datasets.reload_origins(mos.objset(), &reader)?;
        self.commit(&mut inner, command)
    }

    /// Adds the clone `name` of `origin` under `parent` (its properties validated).
    pub(crate) fn clone_one(
        &self,
        inner: &mut Imported,
        parent: DatasetId,
        name: &str,
        origin: &Snapshot,
        objset: ObjectSet,
        values: &[(String, Option<String>)],
    ) -> Result<DatasetId, EngineError> {
        let base = self.new_header(&inner.pool, parent);
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = inner;
        let reader = pool.reader();
        let header = clone::header(mos.objset(), &reader, origin, base)?;
        let object = node::create_node(mos.objset(), &reader, None, header)?;
        let parent_header = datasets.node(parent).header;
        let leaf = dsname::leaf_name(name);
        node::set_child(mos.objset(), &reader, &parent_header, leaf, Some(object))?;
        let id = DatasetId(object.0);
        let header = node::read_header(mos.objset(), &reader, object)?;
        let mut node = Node::new(name.to_string(), Some(parent), header, objset);
        node.header_dirty = true;
        node.load_origin(mos.objset(), &reader)?;
        assert!(
            node.origin.is_some_and(|o| o.snapshot == origin.id),
            "C1: a new clone names its origin"
        );
        datasets.insert(id, node);
        for (property, value) in values {
            datasets.set_local(mos.objset(), &reader, id, property, value.as_deref())?;
        }
        datasets.apply_objset_config(id)?;
        Ok(id)
    }
}

/// The checks of `promote`: `id` is a clone none of whose snapshot names the origin's
/// snapshots up to its origin take. Returns the origin's dataset.
fn promote_check(tree: &Tree, id: DatasetId) -> Result<DatasetId, EngineError> {
    let node = tree.node(id);
    let origin = node
        .origin
        .ok_or_else(|| invalid("not a cloned filesystem"))?;
    let source = DatasetId(origin.dataset.0);
    let from = tree.node(source);
    let at = from
        .snapshots
        .iter()
        .position(|s| s.id == origin.snapshot)
        .expect("C1: a clone's origin snapshot is its dataset's");
    for snap in &from.snapshots[..=at] {
        if node.snapshot(&snap.name).is_some() {
            return Err(invalid(format!(
                "snapshot name '{}' from origin conflicts with '{}@{}' from target",
                snap.name, node.name, snap.name
            )));
        }
    }
    Ok(source)
}

/// The clones of snapshot node `snapshot`, sorted by name.
pub(crate) fn clones_of(tree: &Tree, snapshot: ObjectId) -> Vec<DatasetId> {
    let mut out: Vec<(String, DatasetId)> = tree
        .all()
        .into_iter()
        .filter(|id| {
            tree.node(*id)
                .origin
                .is_some_and(|o| o.snapshot == snapshot)
        })
        .map(|id| (tree.node(id).name.clone(), id))
        .collect();
    out.sort();
    out.into_iter().map(|(_, id)| id).collect()
}

/// `clones` of snapshot node `snapshot`: its clones' names, comma-separated.
pub(crate) fn clone_names(tree: &Tree, snapshot: ObjectId) -> String {
    let names: Vec<String> = clones_of(tree, snapshot)
        .into_iter()
        .map(|d| tree.node(d).name.clone())
        .collect();
    names.join(",")
}

/// `origin` of dataset `id`: `DS@SNAP` of its origin snapshot, `None` when it is no clone.
pub(crate) fn origin_name(tree: &Tree, id: DatasetId) -> Option<String> {
    let origin = tree.node(id).origin?;
    let dataset = DatasetId(origin.dataset.0);
    if !tree.contains(dataset) {
        return None;
    }
    let node = tree.node(dataset);
    let snap = node.snapshots.iter().find(|s| s.id == origin.snapshot)?;
    Some(format!("{}@{}", node.name, snap.name))
}

/// Every dataset that depends on the snapshots `roots` (dataset, snapshot node) through
/// clones, transitively: the clones, their descendants, and the clones of their snapshots.
pub(crate) fn dependents(tree: &Tree, roots: &[(DatasetId, ObjectId)]) -> BTreeSet<DatasetId> {
    let mut out = BTreeSet::new();
    let mut pending: Vec<ObjectId> = roots.iter().map(|(_, s)| *s).collect();
    while let Some(snapshot) = pending.pop() {
        for clone in clones_of(tree, snapshot) {
            for (at, _) in tree.subtree(clone) {
                if out.insert(at) {
                    pending.extend(tree.node(at).snapshots.iter().map(|s| s.id));
                }
            }
        }
    }
    out
}

/// The snapshots (dataset, node) of the datasets `ids`.
pub(crate) fn snapshots_of(tree: &Tree, ids: &[DatasetId]) -> Vec<(DatasetId, ObjectId)> {
    ids.iter()
        .flat_map(|id| tree.node(*id).snapshots.iter().map(move |s| (*id, s.id)))
        .collect()
}

/// The refusal of destroying what clones outside `doomed` depend on: names the first.
pub(crate) fn refuse_dependents(
    tree: &Tree,
    roots: &[(DatasetId, ObjectId)],
    doomed: &BTreeSet<DatasetId>,
    what: &str,
) -> Result<(), EngineError> {
    let outside: Vec<String> = dependents(tree, roots)
        .into_iter()
        .filter(|d| !doomed.contains(d))
        .map(|d| tree.node(d).name.clone())
        .collect();
    match outside.first() {
        None => Ok(()),
        Some(_) => Err(invalid(format!(
            "{what} has dependent clones (use -R to destroy {})",
            outside.join(", ")
        ))),
    }
}

/// `set`, in an order that destroys each dataset after its children and after the clones of
/// its snapshots. A promoted clone that lives inside its old origin makes a cycle (the
/// origin, now a clone of the inner dataset's snapshot, must go first; as its parent, it
/// must go last): such a set is refused, naming the two, before anything changes.
pub(crate) fn destroy_order(
    tree: &Tree,
    set: &BTreeSet<DatasetId>,
) -> Result<Vec<DatasetId>, EngineError> {
    let mut left: Vec<DatasetId> = set.iter().copied().collect();
    let mut out = Vec::with_capacity(left.len());
    let blocks = |o: &DatasetId, d: &DatasetId| {
        let node = tree.node(*o);
        node.parent == Some(*d) || node.origin.is_some_and(|x| x.dataset.0 == d.0)
    };
    while !left.is_empty() {
        let free = left.iter().position(|d| !left.iter().any(|o| blocks(o, d)));
        let Some(at) = free else {
            let stuck = &left[0];
            let other = left.iter().find(|o| blocks(o, stuck)).unwrap_or(stuck);
            return Err(invalid(format!(
                "'{}' and '{}' depend on each other (a clone promoted over the dataset that \
                 contains it); 'promote {}' first, then destroy",
                tree.node(*stuck).name,
                tree.node(*other).name,
                outermost(tree, &left)
            )));
        };
        out.push(left.remove(at));
    }
    Ok(out)
}

/// The name of the outermost dataset of `ids`: in a cycle, the old origin that became a
/// clone of its descendant; promoting it back breaks the cycle.
fn outermost(tree: &Tree, ids: &[DatasetId]) -> String {
    ids.iter()
        .map(|d| tree.node(*d).name.clone())
        .min_by_key(|name| name.matches('/').count())
        .unwrap_or_default()
}

/// Destroys the datasets `set` (a dependents closure), each with its snapshots, in
/// [`destroy_order`]. With `deferred`, an origin snapshot marked by `destroy -d` goes with
/// its last clone; callers that go on to destroy snapshots by index pass false (they
/// destroy those origins themselves).
pub(crate) fn destroy_set(
    inner: &mut Imported,
    set: &BTreeSet<DatasetId>,
    deferred: bool,
) -> Result<(), EngineError> {
    for doomed in destroy_order(&inner.datasets, set)? {
        let origin = inner.datasets.node(doomed).origin.filter(|_| deferred);
        crate::dataset_ops::destroy_with_snapshots(inner, doomed)?;
        if let Some(origin) = origin {
            destroy_deferred_origin(inner, origin)?;
        }
    }
    Ok(())
}

/// After a clone of `origin` went: the origin snapshot, if `destroy -d` marked it, no hold
/// keeps it and this was its last clone, goes too (as in ZFS).
fn destroy_deferred_origin(
    inner: &mut Imported,
    origin: tarn_dataset::clone::Origin,
) -> Result<(), EngineError> {
    let dataset = DatasetId(origin.dataset.0);
    if !inner.datasets.contains(dataset) || !clones_of(&inner.datasets, origin.snapshot).is_empty()
    {
        return Ok(());
    }
    let node = inner.datasets.node(dataset);
    let Some(index) = node.snapshots.iter().position(|s| s.id == origin.snapshot) else {
        return Ok(());
    };
    let snap = &node.snapshots[index];
    if snap.defer_destroy && snap.holds.is_empty() {
        crate::snapshot_ops::destroy_one_snapshot(inner, dataset, index)?;
    }
    Ok(())
}
