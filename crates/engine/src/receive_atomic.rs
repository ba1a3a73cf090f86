//! A replication receive (`receive -R` of a stream with a manifest) that changes the
//! destination only when the whole stream has arrived: each substream is received into a
//! hidden dataset (`PARENT/%LEAF`: a new one for a full stream, a hidden clone of the source
//! for an incremental one, as `receive_new` and `receive_rollback` do), its END only commits
//! the hidden data; after the stream's last record, every hidden dataset takes its place
//! (published under its name, or adopted as the destination's head), every received
//! snapshot is taken and the manifest's prune (`receive_prune`) is applied, all in one txg.
//!
//! ```text
//!  substream END:  hidden data committed, counts recounted (invisible)         [held]
//!  stream end:     checks of every held one, then, in one txg: publish / adopt each,
//!                  take each snapshot, destroy and rename what the manifest says
//!  cut or refused: every held hidden dataset destroyed: the destination as it was
//! ```
//!
//! Where atomicity stops ([`needs_held`]): a substream that needs what a held one brings
//! first makes every held one take its place, in one txg (after the same checks as at the
//! end), so the stream is atomic only from the last such point on. Exactly two conditions:
//! - its source snapshot's GUID is the snapshot a held substream brings: each snapshot of a
//!   dataset after the first in `-I` (or `-R`, which sends intermediates) of several
//!   snapshots, each dataset's second and later snapshots in a first full `-R` (its oldest
//!   goes full, the others from it), a dataset made since the source in `-R -i|-I` with
//!   more than one snapshot (the same), and a clone whose origin snapshot the stream
//!   brings (a clone stream from it);
//! - its dataset is below a new dataset a held substream makes (children of datasets the
//!   stream creates).
//!
//! A stream with neither (an `-R -i` of one step onto a tree that has every dataset, with
//! datasets added, renamed, moved or destroyed meanwhile) is atomic as a whole. A cut,
//! refusal or crash after such a point leaves what was placed there (each placed substream
//! whole, with its snapshot); the prune (destroys, snapshot renames, dataset moves) always
//! comes only after the last record. `receive -s` keeps the old way (each substream commits
//! at its END), so its saved partial state is one substream, and a crash before the stream
//! fails saves none (the token is written when the stream stops).
//!
//! Failure model: a refusal at the end is found by checks that run before the first change;
//! beyond parity, a failed read comes before it too, and refuses the stream with what is
//! held discarded: every held adopted head's blocks ([`reads`]), the blocks of every dataset
//! the end destroys (walked once, [`read_ahead`], and not again by the destroy), the dead
//! lists of every snapshot it destroys and of the dead list each merges into, and of every
//! head it rolls back. Those dead lists are read into the MOS object set's own clean cache
//! (64 MiB; only the pool lock's holder reads the MOS), where the apply finds them: a dead
//! list read can still fail after a change only if the end's dead lists and the other MOS
//! blocks it reads outgrow that cache (millions of block pointers) and a block evicted
//! meanwhile went bad. The MOS's other small reads (a snapshot's node and properties, the
//! children and snapshot ZAPs) are not read ahead. A crash (power cut, SIGKILL) before the
//! final txg leaves hidden datasets on disk, never listed: the next writable import destroys every
//! hidden dataset without a resume token ([`discard_at_import`]), as OpenZFS destroys an
//! inconsistent dataset without resume state when it loads a pool, so space returns to what
//! it was before the receive. A `receive -s` partial state (its token) stays, for `send -t`
//! or `receive -A`. A read-only import leaves them (they are not listed, mounted or counted
//! in a dataset's space) for the next writable one.

use std::collections::BTreeMap;

use tarn_base::Guid;
use tarn_dataset::deadlist;
use tarn_dataset::snapshot::{self, NewSnapshot};
use tarn_format::BlockPtr;
use tarn_send::Begin;

use crate::dataset_ops::invalid;
use crate::send_ops::{Destination, ReceiveSpec, TOKEN_KEY};
use crate::snapshot_ops::RollbackReads as Reads;
use crate::{DatasetId, EngineError, Imported};

/// A substream received into its hidden dataset, waiting for the stream's end.
pub(crate) struct Held {
    pub(crate) into: Destination,
    pub(crate) begin: Begin,
    /// The received snapshot's short name.
    pub(crate) snap: String,
    /// Its PROPERTY records.
    pub(crate) props: Vec<(String, String)>,
    /// Its receive (target, `-o`, `-x`).
    pub(crate) spec: ReceiveSpec,
}

/// Whether a substream with `begin` into `target` needs what `held` brings (module doc).
pub(crate) fn needs_held(held: &[Held], begin: &Begin, target: &str) -> bool {
    held.iter().any(|h| {
        let parent = match &h.into {
            Destination::New { name, .. } => target.starts_with(&format!("{name}/")),
            _ => false,
        };
        parent || (begin.from_guid != 0 && h.begin.to_guid == begin.from_guid)
    })
}

/// A substream's END when it is held: its hidden data committed, the counts of a received
/// filesystem recounted, a new dataset's properties set (it is still hidden).
pub(crate) fn end_held(
    inner: &mut Imported,
    into: &Destination,
    snap: &str,
    props: &[(String, String)],
    spec: &ReceiveSpec,
) -> Result<(), EngineError> {
    match into {
        Destination::New { id, .. } => {
            inner.sync()?;
            crate::send_ops::apply_props(inner, *id, props, spec)?;
            crate::send_ops::recount(inner, *id)
        }
        Destination::Rollback { id, target, name } => {
            crate::receive_rollback::check_at_end(inner, *id, *target, name, snap)?;
            inner.sync()?;
            crate::send_ops::recount(inner, *id)
        }
        Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
    }
}

/// Into `change`: the hidden clone `id` of a snapshot of `target` is adopted as its head
/// (`receive_rollback::adopt`), which destroys the snapshots of `target` after the clone's
/// origin and takes one snapshot.
pub(crate) fn adopting(
    inner: &Imported,
    id: DatasetId,
    target: DatasetId,
    change: &mut crate::limits::Change,
) {
    change.snapshotted.push(target);
    let origin = inner.datasets.node(id).origin.map(|o| o.snapshot);
    let snapshots = &inner.datasets.node(target).snapshots;
    let later = snapshots
        .iter()
        .skip_while(|s| Some(s.id) != origin)
        .skip(1);
    let doomed = change.snapshots.entry(target).or_default();
    doomed.extend(later.map(|s| s.id));
}

/// The checks of every held substream before the first change (a refusal changes nothing),
/// but the limits ([`change`]). A new dataset may take a name in `vacated`: a move takes its
/// dataset away first.
pub(crate) fn check(
    inner: &Imported,
    held: &[Held],
    vacated: &[String],
) -> Result<(), EngineError> {
    for h in held {
        let changed =
            |name: &str| invalid(format!("destination '{name}' changed during the receive"));
        match &h.into {
            Destination::New {
                id,
                parent,
                name,
                replaces,
            } => {
                if !inner.datasets.contains(*id) || !inner.datasets.contains(*parent) {
                    return Err(changed(name));
                }
                match replaces {
                    Some(old) if inner.datasets.contains(*old) => {
                        crate::receive_new::check_overwrite(inner, *old, name, true)?;
                    }
                    Some(_) => return Err(changed(name)),
                    None if inner.datasets.by_name(name).is_some() && !vacated.contains(name) => {
                        return Err(invalid(format!("destination '{name}' exists")));
                    }
                    None => {}
                }
            }
            Destination::Rollback { id, target, name } => {
                crate::receive_rollback::check_at_end(inner, *id, *target, name, &h.snap)?;
            }
            Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
        }
    }
    Ok(())
}

/// What placing every held substream changes, for the limits (`limits::check_change`):
/// each was not checked when it began (its hidden dataset is not counted, and what the
/// stream's end destroys and moves is known only then), so they are checked together here.
/// A forced one destroys the destination's snapshots after its source; a new one replacing
/// a dataset destroys it. The caller adds what its end destroys and moves.
pub(crate) fn change(inner: &Imported, held: &[Held]) -> crate::limits::Change {
    let mut change = crate::limits::Change::default();
    for h in held {
        match &h.into {
            Destination::New {
                id, name, replaces, ..
            } => {
                change.destroyed.extend(*replaces);
                change.created.push((*id, name.clone()));
            }
            Destination::Rollback { id, target, .. } => {
                adopting(inner, *id, *target, &mut change);
            }
            Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
        }
    }
    change
}

/// What [`apply`] reads from the devices, for every held substream, before the first
/// change (the adopted heads' blocks born since their sources): beyond parity a read may
/// fail, and then nothing has changed and the caller discards what is held. One entry per
/// held substream (`None`: nothing to read). The caller ran [`check`].
pub(crate) fn reads(inner: &Imported, held: &[Held]) -> Result<Vec<Option<Reads>>, EngineError> {
    let read = |h: &Held| match &h.into {
        Destination::Rollback { id, target, .. } => {
            crate::receive_rollback::adopt_reads(inner, *id, *target).map(Some)
        }
        _ => Ok(None),
    };
    held.iter().map(read).collect()
}

/// What the end of a receive that makes `change` reads beyond [`reads`], read before its
/// first change (module doc, failure model): the blocks of every dataset it destroys
/// (walked here; their destroy takes the walk from `Imported::read_ahead`, see
/// [`with_read_ahead`]), and the dead lists of every snapshot it destroys, of the one after
/// each and of every head it rolls back (left in the MOS object set's own clean cache, which
/// only the holder of the pool lock reads, where the destroy finds them). Beyond parity a
/// read fails here, with nothing changed. Returns the walks.
pub(crate) fn read_ahead(
    inner: &mut Imported,
    change: &crate::limits::Change,
) -> Result<BTreeMap<DatasetId, Vec<BlockPtr>>, EngineError> {
    let mut walked = BTreeMap::new();
    let mut doomed: Vec<DatasetId> = Vec::new();
    for &id in &change.destroyed {
        doomed.extend(inner.datasets.hidden_children(id));
        doomed.push(id);
    }
    for id in doomed {
        let cannot = cannot_read(inner, id, "destroy it");
        walked.insert(
            id,
            crate::dataset_ops::destroy_walk(inner, id).map_err(&cannot)?,
        );
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = inner;
        let node = datasets.node(id);
        let (head, snapshots) = (&node.header, &node.snapshots);
        snapshot::destroy_all_reads(mos.objset(), &pool.reader(), head, snapshots)
            .map_err(|e| cannot(e.into()))?;
    }
    let kept = |id: &DatasetId| !change.destroyed.contains(id);
    for (id, gone) in change.snapshots.iter().filter(|(id, _)| kept(id)) {
        let cannot = cannot_read(inner, *id, "destroy its snapshots");
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = inner;
        let node = datasets.node(*id);
        let (head, snapshots) = (&node.header, &node.snapshots);
        for (index, _) in snapshots
            .iter()
            .enumerate()
            .filter(|(_, s)| gone.contains(&s.id))
        {
            snapshot::destroy_reads(mos.objset(), &pool.reader(), head, snapshots, index)
                .map_err(|e| cannot(e.into()))?;
        }
    }
    for &id in change.snapshotted.iter().filter(|id| kept(id)) {
        let cannot = cannot_read(inner, id, "take it back to the stream's source");
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = inner;
        let head = &datasets.node(id).header;
        if head.snap.is_present() {
            deadlist::entries(mos.objset(), &pool.reader(), head.snap.deadlist)
                .map_err(|e| cannot(e.into()))?;
        }
    }
    Ok(walked)
}

/// The refusal of a read of `id` before what it is for (`what`).
fn cannot_read(
    inner: &Imported,
    id: DatasetId,
    what: &str,
) -> impl Fn(EngineError) -> EngineError + use<> {
    let name = inner.datasets.node(id).name.clone();
    let what = what.to_string();
    move |error| invalid(format!("cannot read '{name}' to {what}: {error}"))
}

/// Runs `apply` (a receive's end) with `walked` from [`read_ahead`] in
/// `Imported::read_ahead`, which is empty again afterwards, however `apply` ends: a walk
/// must never outlive the state it was read from.
pub(crate) fn with_read_ahead<T>(
    inner: &mut Imported,
    walked: BTreeMap<DatasetId, Vec<BlockPtr>>,
    apply: impl FnOnce(&mut Imported) -> Result<T, EngineError>,
) -> Result<T, EngineError> {
    assert!(
        inner.read_ahead.is_empty(),
        "no read-ahead outlives its receive"
    );
    inner.read_ahead = walked;
    let result = apply(inner);
    inner.read_ahead.clear();
    result
}

/// Every held substream takes its place and its snapshot, in the open txg, with `reads`
/// from [`reads`] (the caller ran [`check`] and commits). Returns the new datasets whose
/// names a dataset still has, which a move takes away (`receive_moves::publish_vacated`
/// places them after the moves): (hidden dataset, parent, name).
pub(crate) fn apply(
    inner: &mut Imported,
    held: &[Held],
    reads: Vec<Option<Reads>>,
) -> Result<Vec<(DatasetId, DatasetId, String)>, EngineError> {
    assert_eq!(reads.len(), held.len(), "one read per held substream");
    let mut after_moves = Vec::new();
    for (h, read) in held.iter().zip(reads) {
        let id = match &h.into {
            Destination::New {
                id,
                parent,
                name,
                replaces,
            } => {
                if let Some(old) = replaces {
                    crate::receive_new::replace_at_end(inner, *old, *id, name)?;
                }
                match inner.datasets.by_name(name) {
                    Some(_) => after_moves.push((*id, *parent, name.clone())),
                    None => crate::send_ops::publish(inner, *id, *parent, name)?,
                }
                *id
            }
            Destination::Rollback { id, target, .. } => {
                let read = read.expect("read for every adopted head");
                crate::send_ops::apply_props(inner, *target, &h.props, &h.spec)?;
                crate::receive_rollback::adopt(inner, *id, *target, read)?;
                *target
            }
            Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
        };
        inner.datasets.node_mut(id).snapshot_pending = Some(NewSnapshot {
            name: h.snap.clone(),
            creation_time: h.begin.creation_time,
            guid: Guid(h.begin.to_guid),
            props: Vec::new(),
        });
    }
    Ok(after_moves)
}

/// A cut or refused stream: every held hidden dataset is destroyed, and that committed.
/// One already placed is left as it is: a failure (a write error, a power cut) after the
/// place-taking of [`apply`] began, as in `receive_flush`'s commit, leaves the held list
/// naming datasets that are no longer hidden (or gone: adopted).
pub(crate) fn discard(inner: &mut Imported, held: &[Held]) -> Result<(), EngineError> {
    for h in held.iter().rev() {
        let id = match &h.into {
            Destination::New { id, .. } | Destination::Rollback { id, .. } => *id,
            Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
        };
        let hidden = inner.datasets.contains(id)
            && crate::datasets::is_hidden(&inner.datasets.node(id).name);
        if hidden {
            crate::send_ops::receive_undo(inner, &h.into)?;
        }
    }
    Ok(())
}

/// At a writable import, before anything else changes: every hidden dataset of a receive a
/// crash cut (one without a resume token: not a `receive -s` partial state) is destroyed,
/// deepest first; the caller commits. Returns the names it destroyed (hidden names).
pub(crate) fn discard_at_import(inner: &mut Imported) -> Result<Vec<String>, EngineError> {
    let tree = &inner.datasets;
    let mut cut: Vec<(usize, DatasetId, String)> = tree
        .all()
        .into_iter()
        .map(|id| (id, tree.node(id)))
        .filter(|(_, n)| crate::datasets::is_hidden(&n.name) && !n.local.contains_key(TOKEN_KEY))
        .map(|(id, n)| (n.name.matches('/').count(), id, n.name.clone()))
        .collect();
    cut.sort_by_key(|(depth, _, _)| std::cmp::Reverse(*depth));
    let mut names = Vec::new();
    for (_, id, name) in cut {
        // A partial state's own hidden descendants go with it (none are made today).
        if inner.datasets.contains(id) {
            crate::dataset_ops::destroy_hidden(inner, id)?;
            names.push(name);
        }
    }
    Ok(names)
}
