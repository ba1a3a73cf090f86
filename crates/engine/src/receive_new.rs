//! Streams that make a new dataset: a full stream, a clone stream (the CLONE feature), and
//! any incremental stream received with `-o origin=POOL/FS@SNAP` (OpenZFS's "receive as a
//! clone of the named snapshot"). Which snapshot a clone is made of, and what `-F` does when
//! the destination already exists.
//!
//! - `-o origin=SNAP` names the origin instead of the lookup by the stream's source GUID
//!   (`clone_stream`), so a stream whose source exists in several places (or only under
//!   another name) lands on the snapshot the admin chose. The named snapshot must exist in
//!   the destination's pool, be a snapshot, hold what the stream holds, and be the stream's
//!   source (its GUID is the stream's `from_guid`): a clone of any other snapshot would
//!   not end as the sender's snapshot. A full stream is refused with it: OpenZFS receives a
//!   full stream as a clone only when it carries free records for everything it does not
//!   hold (FREERECORDS), and tarn's full streams do not (FORMAT.md 21), so the origin's
//!   other objects would survive under the received tree. A replication stream (`-R`) is
//!   refused with it too: its substreams name their own origins (OpenZFS ignores it there).
//! - `-F` over an existing destination, for every stream that makes a new dataset, follows
//!   libzfs's rules: without `-F` "destination exists, must specify -F"; with `-F` the
//!   destination must have no snapshots (they would be lost: the admin destroys them) and,
//!   tarn's own rule, no children (OpenZFS swaps the contents under the same directory
//!   entry and so keeps them; tarn replaces the dataset) and must not be the pool's root.
//!   The stream is received into the hidden dataset as when nothing existed; only at END,
//!   in the same txg as the snapshot, the destination is destroyed and the received
//!   dataset takes its name and the local properties the stream and `-o` did not set. A
//!   refusal or a cut stream leaves the destination as it was. (OpenZFS's kernel refuses a
//!   clone stream onto an existing file system even with `-F`; tarn replaces it as it does
//!   for a full stream.)
//!
//! Invariant: nothing here changes the pool before the stream's first record is taken: every
//! refusal comes from checks only.

use tarn_dataset::snapshot::Snapshot;
use tarn_send::Begin;

use crate::dataset_ops::{invalid, pool_of};
use crate::send_ops::ReceiveSpec;
use crate::{DatasetId, EngineError, Imported};

/// `spec` with an `-o origin=SNAP` moved from the properties to set into `origin`.
pub(crate) fn with_origin(spec: &ReceiveSpec) -> ReceiveSpec {
    let mut spec = spec.clone();
    if let Some(at) = spec.set.iter().rposition(|(name, _)| name == "origin") {
        let (_, origin) = spec.set.remove(at);
        spec.set.retain(|(name, _)| name != "origin");
        spec.origin = Some(origin);
    }
    spec
}

/// Refuses `-o origin=` on a replication stream (module doc).
pub(crate) fn check_origin_for(spec: &ReceiveSpec, begin: &Begin) -> Result<(), EngineError> {
    if spec.origin.is_some() && begin.features & tarn_send::FEATURE_REPLICATED != 0 {
        return Err(invalid(
            "-o origin= takes one stream, not a replication stream (send -R): its clones \
             name their own origins",
        ));
    }
    Ok(())
}

/// The snapshot `-o origin=NAME` names, checked against the stream (module doc).
pub(crate) fn named_origin(
    inner: &Imported,
    name: &str,
    begin: &Begin,
    target: &str,
) -> Result<(DatasetId, Snapshot), EngineError> {
    let Some((dataset, snap)) = name.split_once('@') else {
        return Err(invalid(format!(
            "origin '{name}' is not a snapshot (origin=POOL/FS@SNAP)"
        )));
    };
    if pool_of(dataset) != pool_of(target) {
        return Err(invalid(format!(
            "origin '{name}' is not in the destination's pool '{}'",
            pool_of(target)
        )));
    }
    let found = inner
        .datasets
        .by_name(dataset)
        .filter(|_| !crate::datasets::is_hidden(dataset))
        .and_then(|id| Some((id, inner.datasets.node(id).snapshot(snap)?.1.clone())));
    let Some((id, origin)) = found else {
        return Err(invalid(format!("origin '{name}' does not exist")));
    };
    if begin.from_guid == 0 {
        return Err(invalid(
            "a full stream cannot be received as a clone (-o origin=): it carries no frees \
             for what the origin holds; send it incrementally from the origin (send -i)",
        ));
    }
    if origin.header.guid.0 != begin.from_guid {
        return Err(invalid(format!(
            "origin '{name}' (guid {}) is not the stream's source '{}' (guid {}): an \
             incremental stream is received as a clone of its own source",
            origin.header.guid.0, begin.from_name, begin.from_guid
        )));
    }
    Ok((id, origin))
}

/// `-F` over the existing destination `id` for a stream that makes a new dataset (module
/// doc): returns `id`, the dataset END replaces.
pub(crate) fn check_overwrite(
    inner: &Imported,
    id: DatasetId,
    target: &str,
    force: bool,
) -> Result<DatasetId, EngineError> {
    if !force {
        return Err(invalid(format!(
            "destination '{target}' exists (must specify -F to overwrite it)"
        )));
    }
    let node = inner.datasets.node(id);
    if node.parent.is_none() {
        return Err(invalid(format!(
            "destination '{target}' is the pool's root dataset: it cannot be overwritten"
        )));
    }
    if let Some(snapshot) = node.snapshots.first() {
        return Err(invalid(format!(
            "destination has snapshots (eg. '{target}@{}'): must destroy them to \
             overwrite it",
            snapshot.name
        )));
    }
    let mut children = inner.datasets.children(id);
    children.extend(inner.datasets.hidden_children(id));
    if let Some(child) = children.first() {
        return Err(invalid(format!(
            "destination has children (eg. '{}'): must destroy them to overwrite it",
            inner.datasets.node(*child).name
        )));
    }
    Ok(id)
}

/// At END of a receive that replaces `old` (`-F`): checks it is still replaceable, gives
/// the received dataset `new` the local properties of `old` it did not get from the stream
/// or `-o`, and destroys `old`; the caller then publishes `new` under the name.
pub(crate) fn replace_at_end(
    inner: &mut Imported,
    old: DatasetId,
    new: DatasetId,
    target: &str,
) -> Result<(), EngineError> {
    if !inner.datasets.contains(old) || inner.datasets.node(old).name != target {
        return Err(invalid(format!(
            "destination '{target}' changed during the receive"
        )));
    }
    check_overwrite(inner, old, target, true)?;
    let kept: Vec<(String, String)> = {
        let (had, got) = (
            &inner.datasets.node(old).local,
            &inner.datasets.node(new).local,
        );
        had.iter()
            .filter(|(name, _)| !name.starts_with('%') && !got.contains_key(*name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    };
    for (name, value) in kept {
        inner.set_local(new, &name, Some(&value))?;
    }
    crate::dataset_ops::destroy_replaced(inner, old)
}
