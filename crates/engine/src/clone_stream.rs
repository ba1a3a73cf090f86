//! Clones in send streams (as OpenZFS does): `send -i ORIGIN CLONE@SNAP` (and `-I`) sends
//! a clone relative to its origin snapshot, a snapshot of another dataset, with the CLONE
//! feature (docs/FORMAT.md 21.4); `receive` of such a stream into a dataset that does not
//! exist makes it a clone of the receiving pool's snapshot with the stream's source GUID,
//! then applies the records to it like any incremental; `send -R` of a tree with clones
//! sends each clone that way after its origin's dataset, so the receiving side has clones
//! too (sharing their origin's blocks) rather than full copies.
//!
//! The sending side only picks the source: the walk is the incremental one of
//! `tarn_dataset::send` (the clone's blocks born after the origin's txg), exactly as for a
//! snapshot of the same dataset. The receiving side writes into a hidden clone
//! `PARENT/%LEAF` that END publishes, as a full receive does with its hidden dataset, so a
//! refusal or a cut stream leaves nothing (or, under `-s`, the partial clone to resume).
//!
//! In `send -R -i|-I FROM`, a clone made since FROM (it lacks that snapshot) goes from its
//! origin, which the receiver has from an earlier stream or this one.
//!
//! In a full `send -R`, every clone goes from its origin, also when the origin is not in
//! the stream (outside the tree sent, or later than the snapshot sent), as OpenZFS's
//! `zfs send -R` does: the receiving pool must have the origin (by GUID) from an earlier
//! receive, else that substream is refused ("local origin ... does not exist") and the
//! datasets before it stay received. A stream that must stand alone is sent without the
//! clone, or the clone is promoted or sent by itself in full (`send CLONE@SNAP`).
//!
//! Not here: promote across the wire.

use std::collections::BTreeSet;

use tarn_dataset::snapshot::Snapshot;
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_send::Begin;

use crate::dataset_ops::invalid;
use crate::datasets::Node;
use crate::send_ops::{Destination, SendSpec};
use crate::{DatasetId, Engine, EngineError, Imported};

/// (source, snapshot) pairs of substreams, oldest first.
pub(crate) type Pairs = Vec<(Option<Snapshot>, Snapshot)>;

/// The origin snapshot of the clone `node` (`None`: not a clone).
pub(crate) fn origin_of(inner: &Imported, node: &Node) -> Option<(String, Snapshot)> {
    let origin = node.origin?;
    let dataset = inner.datasets.node(DatasetId(origin.dataset.0));
    let snapshot = dataset.snapshots.iter().find(|s| s.id == origin.snapshot)?;
    Some((dataset.name.clone(), snapshot.clone()))
}

/// Whether `from` is the origin snapshot of the clone `node`: its substream carries the
/// CLONE feature.
pub(crate) fn is_origin(node: &Node, from: Option<&Snapshot>) -> bool {
    from.is_some_and(|from| {
        !from.header.objset.is_hole() && node.origin.is_some_and(|o| o.snapshot == from.id)
    })
}

/// `send -i|-I FROM DS@SNAP` where FROM (`pool/ds@snap`) names a snapshot of another
/// dataset: the pairs to send when FROM is `DS`'s origin (oldest first; with `-I` the
/// clone's own snapshots up to `to_index` follow the first), else the refusal.
pub(crate) fn origin_pairs(
    inner: &Imported,
    node: &Node,
    from: &str,
    to_index: usize,
    intermediates: bool,
) -> Result<Pairs, EngineError> {
    let origin =
        origin_of(inner, node).filter(|(dataset, snap)| from == format!("{dataset}@{}", snap.name));
    let Some((_, origin)) = origin else {
        return Err(invalid(
            "incremental source must be in same filesystem, or be its origin snapshot",
        ));
    };
    let snaps = &node.snapshots;
    if !intermediates {
        return Ok(vec![(Some(origin), snaps[to_index].clone())]);
    }
    let mut pairs = vec![(Some(origin), snaps[0].clone())];
    pairs.extend((0..to_index).map(|i| (Some(snaps[i].clone()), snaps[i + 1].clone())));
    Ok(pairs)
}

/// In a `send -R -i|-I FROM`: for the clone `node` made since FROM (it lacks that
/// snapshot), every pair from its origin up to its snapshot `to_index` (a clone stream,
/// then its own snapshots); `None` for any other dataset, which goes from FROM as usual.
pub(crate) fn new_clone_pairs(
    inner: &Imported,
    node: &Node,
    spec: &SendSpec,
    to_index: usize,
) -> Result<Option<Pairs>, EngineError> {
    let Some(from) = spec.from.as_deref().filter(|from| !from.contains('#')) else {
        return Ok(None);
    };
    let from_snap = from.rsplit('@').next().unwrap_or(from);
    if node.snapshot(from_snap).is_some() {
        return Ok(None);
    }
    let Some((dataset, origin)) = origin_of(inner, node) else {
        return Ok(None);
    };
    let origin = format!("{dataset}@{}", origin.name);
    origin_pairs(inner, node, &origin, to_index, true).map(Some)
}

/// The datasets of a `send -R` of `root`'s subtree that have snapshot `snap`, in the order
/// they are sent: parents before children (as the subtree lists them) and a clone after
/// the dataset of its origin when that is sent too.
pub(crate) fn replication_order(inner: &Imported, root: DatasetId, snap: &str) -> Vec<DatasetId> {
    let tree: Vec<DatasetId> = inner
        .datasets
        .subtree(root)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let members: BTreeSet<DatasetId> = tree.iter().copied().collect();
    let mut placed: BTreeSet<DatasetId> = BTreeSet::new();
    let mut order = Vec::new();
    // Each pass places every dataset whose parent and origin dataset are placed (or not
    // sent); a pass that places nothing ends it (a cycle cannot happen: an origin is older).
    while order.len() < tree.len() {
        let before = order.len();
        for &id in &tree {
            let node = inner.datasets.node(id);
            let waits = |other: Option<DatasetId>| {
                other.is_some_and(|o| members.contains(&o) && !placed.contains(&o))
            };
            let origin = node.origin.map(|o| DatasetId(o.dataset.0));
            if placed.contains(&id) || waits(node.parent) || waits(origin) {
                continue;
            }
            placed.insert(id);
            order.push(id);
        }
        if order.len() == before {
            order.extend(tree.iter().filter(|id| !placed.contains(id)));
            break;
        }
    }
    order.retain(|&id| inner.datasets.node(id).snapshot(snap).is_some());
    order
}

/// In a full `send -R`: the origin snapshot of the clone `node`, from which its oldest
/// snapshot goes as a clone stream whether or not the origin is in the stream (as OpenZFS
/// does: the receiver finds it by GUID, sent earlier in the stream or received before).
pub(crate) fn replicated_origin(inner: &Imported, node: &Node) -> Option<Snapshot> {
    origin_of(inner, node).map(|(_, snapshot)| snapshot)
}

/// The snapshot of this pool whose GUID is `guid`, and its dataset.
fn snapshot_by_guid(inner: &Imported, guid: u64) -> Option<(DatasetId, Snapshot)> {
    inner.datasets.all().into_iter().find_map(|id| {
        let node = inner.datasets.node(id);
        let found = node.snapshots.iter().find(|s| s.header.guid.0 == guid)?;
        Some((id, found.clone()))
    })
}

impl Engine {
    /// A clone stream (`begin` has the CLONE feature, or `-o origin=` names the origin)
    /// into `target` (with the existing dataset it replaces at END, `receive -F`): the
    /// hidden clone `name` under `parent` (`PARENT/%LEAF`, or below a held new parent's
    /// hidden dataset: `receive_atomic::place`) of the named origin, or else of this pool's
    /// snapshot with the stream's source GUID (a held hidden dataset's too), under the same
    /// checks as a full receive (the caller checks the limits).
    pub(crate) fn receive_clone_prepare(
        &self,
        inner: &mut Imported,
        begin: &Begin,
        (target, replaces, (parent, name)): (&str, Option<DatasetId>, (DatasetId, String)),
        kind: ObjsetKind,
        named: Option<&str>,
    ) -> Result<Destination, EngineError> {
        let (origin_dataset, origin) = match named {
            Some(name) => crate::receive_new::named_origin(inner, name, begin, target)?,
            None => snapshot_by_guid(inner, begin.from_guid).ok_or_else(|| {
                invalid(format!(
                    "local origin for clone '{target}' does not exist: no snapshot has the \
                     guid {} of '{}' (receive the origin first)",
                    begin.from_guid, begin.from_name
                ))
            })?,
        };
        let have = inner.datasets.node(origin_dataset).objset.kind();
        if have != kind {
            return Err(invalid(format!(
                "the stream's origin '{}@{}' does not hold what the stream does",
                inner.datasets.node(origin_dataset).name,
                origin.name
            )));
        }
        if inner.datasets.by_name(&name).is_some() {
            return Err(invalid(format!("a receive into '{target}' is in progress")));
        }
        // Read before anything changes: a failed read must leave nothing behind.
        let objset = ObjectSet::open(&inner.pool.reader(), &origin.header.objset)?;
        let id = self.clone_one(inner, parent, &name, &origin, objset, &[])?;
        inner.datasets.node_mut(id).receiving = true;
        Ok(Destination::New {
            id,
            parent,
            name: target.to_string(),
            replaces,
        })
    }
}
