//! `receive -F` of an incremental stream onto a destination that must first go back to the
//! stream's source snapshot: it has snapshots later than the source, or changes since the
//! source that are more than access times. OpenZFS rolls the destination back and destroys
//! the later snapshots; so does tarn, but only at the stream's END.
//!
//! Model (OpenZFS's `%recv` clone and clone swap):
//!
//! ```text
//!  prepare:  tank/dst@a (source) @b @c + head      tank/%dst = hidden clone of @a
//!  records:  applied to tank/%dst (committed as they come, the destination untouched)
//!  END, one txg:  @b @c destroyed, the head rolled back to @a, the head takes the hidden
//!                 clone's object set (tarn_dataset::clone::adopt_clone), the hidden
//!                 clone destroyed, the received snapshot taken
//! ```
//!
//! Rules, as OpenZFS's kernel applies them when it destroys the later snapshots at the end
//! of a forced receive: a later snapshot with a user hold or with clones refuses the receive
//! (OpenZFS: EBUSY, EEXIST), checked before the first record (nothing changes) and again at
//! END (a hold or clone made meanwhile refuses then, and the hidden clone is discarded);
//! bookmarks stay (they hold no blocks); the received snapshot's name may be one of the
//! destroyed snapshots' but not one of those that stay. `-R` streams take the same path per
//! dataset; what OpenZFS's `-R -F` also destroys (snapshots and datasets the sender no
//! longer has) goes after the last substream, by the stream's manifest (`receive_prune`).
//!
//! Failure model: a refusal, a cut or bad stream, or a failed read at END before the first
//! change leaves the destination exactly as it was (the hidden clone is destroyed); a cut
//! stream under `-s` keeps the hidden clone with the resume token, which `send -t` resumes
//! and `receive -A` discards. A crash before END's txg commits leaves the destination as it
//! was; the hidden clone left behind (without a token) is destroyed by the next writable
//! import (`receive_atomic::discard_at_import`), as a full receive's hidden dataset is.
//!
//! Not here: the stream reading and END's snapshot (`send_ops`).

use tarn_base::ObjectId;
use tarn_dataset::clone;
use tarn_objects::ObjectSet;
use tarn_send::Begin;

use crate::dataset_ops::invalid;
use crate::send_ops::{Destination, hidden_name};
use crate::snapshot_ops::RollbackReads;
use crate::{DatasetId, Engine, EngineError, Imported};

/// The refusal of a later snapshot a forced receive would have to destroy, or `None` when
/// every snapshot after `index` of `target` can go. `snap` is the received snapshot's name,
/// which must not be one of those that stay.
fn check_later(
    inner: &Imported,
    target: DatasetId,
    index: usize,
    snap: &str,
) -> Result<(), EngineError> {
    let node = inner.datasets.node(target);
    let later = &node.snapshots[index + 1..];
    if let Some(held) = later.iter().find(|s| !s.holds.is_empty()) {
        return Err(invalid(format!(
            "destination snapshot '{}@{}' more recent than the stream's source is held \
             (dataset is busy): release its holds to receive",
            node.name, held.name
        )));
    }
    let roots: Vec<(DatasetId, ObjectId)> = later.iter().map(|s| (target, s.id)).collect();
    let dependents = crate::clone_ops::dependents(&inner.datasets, &roots);
    if let Some(clone) = dependents.first() {
        return Err(invalid(format!(
            "destination snapshots more recent than the stream's source have dependent \
             clones (eg. '{}'): destroy or promote them to receive",
            inner.datasets.node(*clone).name
        )));
    }
    if node.snapshots[..=index].iter().any(|s| s.name == snap) {
        return Err(invalid(format!(
            "destination already has a snapshot '{snap}'"
        )));
    }
    Ok(())
}

/// The index of the stream's source among the snapshots of `target`.
fn source_index(inner: &Imported, target: DatasetId, from_guid: u64) -> Option<usize> {
    let node = inner.datasets.node(target);
    node.snapshots
        .iter()
        .position(|s| s.header.guid.0 == from_guid)
}

impl Engine {
    /// Prepare: checks the later snapshots of `target` can go and makes the hidden clone of
    /// the stream's source the records are applied to (module doc). Nothing changes on a
    /// refusal.
    pub(crate) fn receive_rollback_prepare(
        &self,
        inner: &mut Imported,
        target: DatasetId,
        begin: &Begin,
        snap: &str,
    ) -> Result<Destination, EngineError> {
        let index = source_index(inner, target, begin.from_guid).expect("checked: the source");
        check_later(inner, target, index, snap)?;
        let name = inner.datasets.node(target).name.clone();
        let hidden = hidden_name(&name);
        if inner.datasets.by_name(&hidden).is_some() {
            return Err(invalid(format!("a receive into '{name}' is in progress")));
        }
        let parent = inner.datasets.node(target).parent.unwrap_or(target);
        let source = inner.datasets.node(target).snapshots[index].clone();
        // Read before anything changes: a failed read must leave nothing behind.
        let objset = ObjectSet::open(&inner.pool.reader(), &source.header.objset)?;
        // Not `receiving`: a clone of a consistent snapshot, so as in an incremental receive
        // into a head its per-owner counts are kept at each sync and END does not recount
        // (a recount rewrites every count object, tens of KiB `written` in each snapshot
        // that the sender's does not have). One loaded partial (`receive -s`, an import
        // since) is `receiving` and is recounted at END ([`recount_partial`]).
        let id = self.clone_one(inner, parent, &hidden, &source, objset, &[])?;
        Ok(Destination::Rollback { id, target, name })
    }
}

/// At END: the hidden clone `id` is recounted only when an import loaded it partial (a
/// `receive -s` resumed since), whose counts its syncs did not keep until then.
pub(crate) fn recount_partial(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    match inner.datasets.node(id).receiving {
        true => crate::send_ops::recount(inner, id),
        false => Ok(()),
    }
}

/// The partial receive `hidden` resumes into: `Some(target)` when it is a forced receive's
/// hidden clone of a snapshot of `target` (module doc).
pub(crate) fn resumed_target(
    inner: &Imported,
    hidden: DatasetId,
    target: &str,
) -> Option<DatasetId> {
    let origin = inner.datasets.node(hidden).origin?;
    let id = inner.datasets.by_name(target)?;
    (DatasetId(origin.dataset.0) == id).then_some(id)
}

/// END's checks, before anything changes: `target` is still there under its name, the
/// stream's source is still its snapshot, the later snapshots can still go.
pub(crate) fn check_at_end(
    inner: &Imported,
    id: DatasetId,
    target: DatasetId,
    name: &str,
    snap: &str,
) -> Result<(), EngineError> {
    let changed = || invalid(format!("destination '{name}' changed during the receive"));
    if !inner.datasets.contains(target) || inner.datasets.node(target).name != name {
        return Err(changed());
    }
    let origin = inner.datasets.node(id).origin.ok_or_else(changed)?;
    let node = inner.datasets.node(target);
    let index = node
        .snapshots
        .iter()
        .position(|s| s.id == origin.snapshot)
        .ok_or_else(changed)?;
    check_later(inner, target, index, snap)
}

/// What [`adopt`] reads from the devices, read before anything changes: beyond parity a
/// read may fail, and then nothing has changed (the caller discards the hidden clone).
/// The caller ran [`check_at_end`].
pub(crate) fn adopt_reads(
    inner: &Imported,
    id: DatasetId,
    target: DatasetId,
) -> Result<RollbackReads, EngineError> {
    let index = source_of(inner, id, target);
    crate::snapshot_ops::rollback_reads(inner, target, index).map_err(|error| {
        let name = &inner.datasets.node(target).name;
        invalid(format!(
            "cannot read '{name}' to take it back to the stream's source: {error}"
        ))
    })
}

/// The index of the hidden clone `id`'s origin among the snapshots of `target`.
fn source_of(inner: &Imported, id: DatasetId, target: DatasetId) -> usize {
    let origin = inner.datasets.node(id).origin.expect("checked: a clone");
    inner
        .datasets
        .node(target)
        .snapshots
        .iter()
        .position(|s| s.id == origin.snapshot)
        .expect("checked: the source is a snapshot of the target")
}

/// END (module doc): the received hidden clone `id` becomes the head of `target`, whose
/// later snapshots are destroyed and whose head is rolled back first, all in the open txg
/// (the caller takes the snapshot and commits), with `reads` from [`adopt_reads`].
pub(crate) fn adopt(
    inner: &mut Imported,
    id: DatasetId,
    target: DatasetId,
    reads: RollbackReads,
) -> Result<(), EngineError> {
    let index = source_of(inner, id, target);
    let later = inner.datasets.node(target).snapshots.len() - 1 - index;
    for _ in 0..later {
        let last = inner.datasets.node(target).snapshots.len() - 1;
        crate::snapshot_ops::destroy_one_snapshot(inner, target, last)?;
    }
    crate::snapshot_ops::rollback_apply(inner, target, reads)?;
    swap_heads(inner, id, target)?;
    crate::dataset_ops::destroy_hidden(inner, id)
}

/// The header and object-set half of [`adopt`]: `tarn_dataset::clone::adopt_clone` (the
/// hidden clone's snapshots, if a held receive took any, move to `target` with its head),
/// then the in-memory object sets trade places, and a clone of a moved snapshot (received
/// in the same stream) names `target` as its origin's dataset.
fn swap_heads(inner: &mut Imported, id: DatasetId, target: DatasetId) -> Result<(), EngineError> {
    let index = source_of(inner, id, target);
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    let deflate = crate::datasets::deflate_table(pool);
    let floor = datasets.node(target).floor();
    let mut clone_head = datasets.node(id).header;
    let mut head = datasets.node(target).header;
    let mut snapshots = std::mem::take(&mut datasets.node_mut(target).snapshots);
    let mut clone_snapshots = std::mem::take(&mut datasets.node_mut(id).snapshots);
    let result = clone::adopt_clone(
        mos.objset(),
        &reader,
        clone::Side {
            id: ObjectId(target.0),
            head: &mut head,
            snapshots: &mut snapshots,
        },
        clone::Side {
            id: ObjectId(id.0),
            head: &mut clone_head,
            snapshots: &mut clone_snapshots,
        },
        floor,
        &|bp| crate::datasets::dsize(&deflate, bp),
    );
    let node = datasets.node_mut(target);
    (node.header, node.snapshots, node.header_dirty) = (head, snapshots, true);
    let node = datasets.node_mut(id);
    (node.header, node.snapshots, node.header_dirty) = (clone_head, clone_snapshots, true);
    result?;
    let kind = datasets.node(id).objset.kind();
    let received = std::mem::replace(&mut datasets.node_mut(id).objset, ObjectSet::create(kind));
    let former = std::mem::replace(&mut datasets.node_mut(target).objset, received);
    datasets.node_mut(id).objset = former;
    let pending = std::mem::take(&mut datasets.node_mut(id).pending);
    datasets.node_mut(target).pending = pending;
    // A clone of a moved snapshot keeps its dead lists and origin txg: only the dataset
    // its origin belongs to changes, set here without a read (nothing may fail after the
    // first change but a write).
    let moved: Vec<ObjectId> = datasets.node(target).snapshots[index + 1..]
        .iter()
        .map(|s| s.id)
        .collect();
    for clone in datasets.all() {
        let node = datasets.node_mut(clone);
        if let Some(origin) = node.origin.as_mut().filter(|o| moved.contains(&o.snapshot)) {
            origin.dataset = ObjectId(target.0);
        }
    }
    for at in [target, id] {
        datasets.node_mut(at).load_origin(mos.objset(), &reader)?;
        datasets.apply_objset_config(at)?;
    }
    Ok(())
}
