//! A replication receive (`receive -R` of a stream with a manifest, without `-s`), or the
//! receive of a chain (`send -I` without `-R`, tarn-send `FEATURE_CHAIN`, without `-s`),
//! that changes the destination only when the whole stream has arrived: each substream is
//! received into a hidden dataset, its END only commits the hidden data; after the stream's
//! last record, every hidden dataset takes its place (published under its name, or adopted
//! with its snapshots by the existing dataset it is a hidden clone of) and the manifest's
//! prune (`receive_prune`) is applied, all in one txg (a chain has no manifest: its end is
//! [`Engine::receive_held_end`], the same checks and place-taking without the prune).
//!
//! ```text
//!  substream END:  hidden data committed, counts recounted (invisible)            [held]
//!                  its snapshot taken on its hidden dataset, still hidden
//!  stream end:     checks of every held one, then, in one txg: publish each new dataset
//!                  (parents first, with its snapshots), each existing dataset adopts its
//!                  hidden clone with the snapshots on it, destroy and rename what the
//!                  manifest says
//!  cut or refused: every held hidden dataset destroyed: the destination as it was
//! ```
//!
//! The hidden shapes ([`Within`]), all named with a `%` leaf (`datasets::is_hidden`):
//! - a dataset the stream makes (a full or clone stream): `PARENT/%LEAF`, a new dataset or a
//!   clone (`receive_new`); its snapshot is taken at its END, so what follows can use it;
//! - an incremental substream into an existing dataset: a hidden clone of its source
//!   (`PARENT/%LEAF`, as `receive_rollback` does); its snapshot is taken at its END on the
//!   hidden clone, too;
//! - an incremental substream whose source is the latest snapshot of a held hidden dataset
//!   (each dataset's second and later snapshots in a first full `-R`, a dataset made since
//!   the source in `-R -i|-I`, and each existing dataset's second and later snapshots in
//!   `-R -I`, or `-R -i` with intermediates): received into the same hidden head
//!   (`Destination::Chained`, with the existing dataset that adopts it, if any), its
//!   snapshot taken at its END: the snapshots keep the stream's order, txgs and GUIDs;
//! - a dataset below a new dataset the stream makes: below its parent's hidden dataset
//!   (`PARENT/%P/%LEAF`), published after it (a parent is held before its children);
//! - a clone whose origin the stream brings: a hidden clone of the hidden origin snapshot
//!   (of a new dataset's hidden dataset, or of an existing one's hidden clone).
//!
//! The adoption at the end (`receive_rollback::adopt`, `tarn_dataset::clone::adopt_clone`):
//! the existing dataset's snapshots after the source are destroyed (`-F`) and its head
//! rolled back to the source; then every snapshot of the hidden clone moves to it, after
//! the source, in order (node, GUID, txg, dead list: as `promote` moves snapshots the other
//! way), and its head takes the hidden clone's object set and head dead list. The moved
//! dead lists' buckets keyed at the source's txg (blocks of the source the clone let go
//! of) are filed again under the dataset's own snapshot txgs, exactly where its kill rule
//! would have filed them had the records been applied to it, so `used`, `written` and
//! `usedbysnapshots` are what a receive straight into it gives. The dataset keeps its node,
//! name, properties and children (unlike a promote and a rename of the hidden clone, which
//! would give the hidden clone's node the name and leave children and local properties to
//! move). A clone received of one of the hidden clone's snapshots was held after it, and
//! published after the adoption: its origin then names the adopted snapshot (its node is
//! the same; only its dataset changed), so `origin` and `clones` follow.
//!
//! So every substream is held until the stream's end: a first full `-R`, `-R -i|-I` with
//! intermediates onto existing datasets, with datasets added, renamed, moved or destroyed
//! meanwhile, and clones of the snapshots the stream brings, are atomic as a whole. A
//! substream that needs what a held one brings but cannot go on top of it (an order `send`
//! never makes: a source brought twice, a child before its parent) is refused
//! ([`check_order`]). `receive -s` keeps the old way (each substream commits at its END),
//! so its saved partial state is one substream, and a crash before the stream fails saves
//! none (the token is written when the stream stops).
//!
//! A chain (`send -I` of two or more snapshots without `-R`) is held the same way: its
//! first substream goes into a hidden clone of the destination's source (or, a clone
//! stream, a new hidden clone of its origin), the others are chained on top of it, and at
//! the end the destination adopts it (or it is published). The reader (tarn-send) refuses
//! an input that ends inside a chain, also at a substream boundary, so a cut chain is
//! discarded like a cut replication stream. Once a substream is held, every later one of
//! the input is held too (a chain concatenated with more), so nothing placed early can
//! stand on what is held. Under `-s` a chain is placed substream by substream, as a
//! replication stream is, and its token resumes one substream (`send -t`); the chain sent
//! again skips its leading substreams whose snapshots the destination has by GUID (only
//! before any other substream of the input was received: a skip after one would stand
//! beside what is held), so it finishes what was cut. A `send -I` stream of a build before
//! chains has no chain bit and is not held: each substream commits at its END into the
//! head.
//!
//! Failure model: a refusal at the end is found by checks that run before the first change;
//! beyond parity, a failed read comes before it too, and refuses the stream with what is
//! held discarded: every held adopted head's blocks ([`reads`]), the blocks of every dataset
//! the end destroys (walked once, [`read_ahead`], and not again by the destroy), the dead
//! lists of every snapshot it destroys and of the dead list each merges into, of every
//! head it rolls back, and of every snapshot and head of each hidden clone an existing
//! dataset adopts (filed again by the adoption, [`read_adopted`]). Those dead lists are
//! read into the MOS object set's own clean cache (64 MiB; only the pool lock's holder
//! reads the MOS), where the apply finds them: a dead
//! list read can still fail after a change only if the end's dead lists and the other MOS
//! blocks it reads outgrow that cache (millions of block pointers) and a block evicted
//! meanwhile went bad. The MOS's other small reads (a snapshot's node and properties, the
//! children and snapshot ZAPs) are not read ahead. A discard destroys the held hidden
//! datasets in the reverse of their order (a clone before its origin, a child before its
//! hidden parent), with their snapshots, so space returns to what it was. A crash (power
//! cut, SIGKILL) before the final txg leaves hidden datasets on disk, never listed: the
//! next writable import destroys every hidden dataset without a resume token
//! ([`discard_at_import`], each once nothing is below it and no clone of it is left), as
//! OpenZFS destroys an inconsistent dataset without resume state when it loads a pool. A
//! `receive -s` partial state (its token) stays, for `send -t` or `receive -A`. A read-only
//! import leaves them (they are not listed, mounted or counted in a dataset's space) for
//! the next writable one.

use std::collections::BTreeMap;

use tarn_base::Guid;
use tarn_dataset::deadlist;
use tarn_dataset::snapshot::{self, NewSnapshot};
use tarn_format::BlockPtr;
use tarn_send::Begin;

use crate::dataset_ops::invalid;
use crate::send_ops::{Destination, ReceiveSpec, TOKEN_KEY};
use crate::snapshot_ops::RollbackReads as Reads;
use crate::{DatasetId, Engine, EngineError, Imported};

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

/// Where a held substream goes, found from what is held ([`within`]).
#[derive(Debug, Default)]
pub(crate) struct Within {
    /// Its name is one a move vacates (`receive_moves`).
    pub(crate) vacated: bool,
    /// The held hidden dataset whose latest snapshot (taken at its END) is its source: it
    /// is received into that dataset's head (`Destination::Chained`); with the existing
    /// dataset that adopts it at the end, when it is the hidden clone of one.
    pub(crate) chain: Option<(DatasetId, Option<DatasetId>)>,
    /// The held hidden dataset of its parent, a new dataset the stream makes: it is
    /// received below it.
    pub(crate) parent: Option<DatasetId>,
}

/// The hidden dataset a held substream makes or continues, and the existing dataset that
/// adopts it at the end (a hidden clone of one of its snapshots); `None`: no hidden dataset.
fn made(h: &Held) -> Option<(DatasetId, Option<DatasetId>)> {
    match &h.into {
        Destination::New { id, .. } => Some((*id, None)),
        Destination::Chained { id, adopter } => Some((*id, *adopter)),
        Destination::Rollback { id, target, .. } => Some((*id, Some(*target))),
        Destination::Head { .. } => None,
    }
}

/// Where the substream `begin` into `target` goes when it is held ([`Within`]): on top of
/// the held hidden dataset whose latest snapshot (taken at its END) is its source, and
/// below the held hidden dataset of its parent.
pub(crate) fn within(
    inner: &Imported,
    held: &[Held],
    begin: &Begin,
    target: &str,
    vacated: bool,
) -> Within {
    let incremental = begin.from_guid != 0 && begin.features & tarn_send::FEATURE_CLONE == 0;
    let latest = |id: DatasetId| {
        let node = inner.datasets.node(id);
        node.snapshots.last().map(|s| s.header.guid.0)
    };
    let chain = held
        .iter()
        .rev()
        .filter(|h| incremental && h.spec.target == target && h.begin.to_guid == begin.from_guid)
        .find_map(made)
        .filter(|(id, _)| inner.datasets.contains(*id) && latest(*id) == Some(begin.from_guid));
    let parent_name = tarn_dataset::name::parent_name(target);
    let parent = held.iter().rev().find_map(|h| match &h.into {
        Destination::New { id, name, .. } if Some(name.as_str()) == parent_name => Some(*id),
        _ => None,
    });
    Within {
        vacated,
        chain,
        parent,
    }
}

/// Refuses the held substream `begin` into `target` (`within`, from [`within`]) when it
/// needs what `held` brings and that is not there for it: every snapshot a held substream
/// brings is taken at its END on its hidden dataset, so an incremental from one must go on
/// top of it (the latest snapshot of that hidden dataset, into the same target), and a new
/// dataset below a new dataset the stream makes must go below its held hidden dataset. A
/// clone stream finds its origin by GUID wherever it is, hidden or not. Only a stream in an
/// order `send` never makes fails here (a source brought twice, a child before its parent).
pub(crate) fn check_order(
    held: &[Held],
    begin: &Begin,
    target: &str,
    within: &Within,
) -> Result<(), EngineError> {
    let clone = begin.features & tarn_send::FEATURE_CLONE != 0;
    let brought = begin.from_guid != 0 && held.iter().any(|h| h.begin.to_guid == begin.from_guid);
    if brought && !clone && within.chain.is_none() {
        return Err(invalid(format!(
            "invalid stream: '{}' does not continue from the snapshot the stream brought",
            begin.to_name
        )));
    }
    let below = held.iter().any(|h| match &h.into {
        Destination::New { name, .. } => target.starts_with(&format!("{name}/")),
        _ => false,
    });
    if below && within.parent.is_none() {
        return Err(invalid(format!(
            "invalid stream: '{}' does not follow its parent",
            begin.to_name
        )));
    }
    Ok(())
}

/// The parent and hidden name of a new dataset `target` a held substream makes: below the
/// held hidden dataset `under` of its parent (`PARENT/%P/%LEAF`), or else below its parent
/// by name (`PARENT/%LEAF`); with `vacated`, `%%LEAF` (`receive_moves`).
pub(crate) fn place(
    inner: &Imported,
    target: &str,
    under: Option<DatasetId>,
    vacated: bool,
) -> Result<(DatasetId, String), EngineError> {
    let leaf = tarn_dataset::name::leaf_name(target);
    let (parent, at) = match under {
        Some(parent) => {
            let name = format!("{}/{leaf}", inner.datasets.node(parent).name);
            (Some(parent), name)
        }
        None => {
            let parent_name = tarn_dataset::name::parent_name(target).unwrap_or(target);
            (inner.datasets.by_name(parent_name), target.to_string())
        }
    };
    let parent = parent.ok_or_else(|| invalid(format!("parent of '{target}' does not exist")))?;
    let hidden = match vacated {
        true => crate::receive_moves::vacated_hidden_name(&at),
        false => crate::send_ops::hidden_name(&at),
    };
    Ok((parent, hidden))
}

/// The setup of a held incremental substream into the head of the held hidden dataset
/// `id`, which `adopter` adopts at the end if it is one's hidden clone (from [`within`]):
/// its source is still that dataset's latest snapshot, it holds what the stream holds, and
/// the received snapshot's name is free there.
pub(crate) fn chained(
    inner: &mut Imported,
    (id, adopter): (DatasetId, Option<DatasetId>),
    begin: &Begin,
    kind: tarn_objects::ObjsetKind,
    snap: &str,
) -> Result<Destination, EngineError> {
    let node = inner.datasets.node(id);
    if node.snapshots.last().map(|s| s.header.guid.0) != Some(begin.from_guid) {
        return Err(invalid(format!(
            "invalid stream: '{}' does not continue from the snapshot the stream brought",
            begin.to_name
        )));
    }
    if node.objset.kind() != kind {
        return Err(invalid(format!(
            "invalid stream: '{}' does not hold what its source holds",
            begin.to_name
        )));
    }
    if node.snapshot(snap).is_some() {
        return Err(invalid(format!(
            "invalid stream: it brings the snapshot '{}' twice",
            begin.to_name
        )));
    }
    // Not `receiving`: as in a plain incremental receive into a head, the per-owner counts
    // are kept at each sync, so END does not recount (a recount rewrites every count).
    Ok(Destination::Chained { id, adopter })
}

/// A substream's END when it is held: its hidden data committed, the counts of a received
/// filesystem recounted (a new one; an existing one's hidden clone and a chained one kept
/// them, `receive_rollback::recount_partial`), the properties of a dataset the stream
/// makes set (an existing dataset's are set when it adopts its hidden clone, at the end),
/// and its snapshot taken on the hidden dataset (still hidden: a later substream may be
/// received on top of it, or clone it).
pub(crate) fn end_held(
    inner: &mut Imported,
    into: &Destination,
    begin: &Begin,
    snap: &str,
    props: &[(String, String)],
    spec: &ReceiveSpec,
) -> Result<(), EngineError> {
    let id = match into {
        Destination::New { id, .. } => {
            inner.sync()?;
            crate::send_ops::apply_props(inner, *id, props, spec)?;
            crate::send_ops::recount(inner, *id)?;
            *id
        }
        Destination::Chained { id, adopter } => {
            inner.sync()?;
            if adopter.is_none() {
                crate::send_ops::apply_props(inner, *id, props, spec)?;
            }
            *id
        }
        Destination::Rollback { id, target, name } => {
            crate::receive_rollback::check_at_end(inner, *id, *target, name, snap)?;
            inner.sync()?;
            crate::receive_rollback::recount_partial(inner, *id)?;
            *id
        }
        Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
    };
    if inner.datasets.node(id).snapshot(snap).is_some() {
        return Err(invalid(format!(
            "invalid stream: it brings the snapshot '{}' twice",
            begin.to_name
        )));
    }
    inner.datasets.node_mut(id).snapshot_pending = Some(NewSnapshot {
        name: snap.to_string(),
        creation_time: begin.creation_time,
        guid: Guid(begin.to_guid),
        props: Vec::new(),
    });
    inner.sync().map(drop)
}

/// Into `change`: the hidden clone `id` of a snapshot of `target` is adopted as its head
/// (`receive_rollback::adopt`), which destroys the snapshots of `target` after the clone's
/// origin and brings the clone's snapshots (a held receive's), or one taken afterwards.
pub(crate) fn adopting(
    inner: &Imported,
    id: DatasetId,
    target: DatasetId,
    change: &mut crate::limits::Change,
) {
    let brought = inner.datasets.node(id).snapshots.len().max(1);
    change
        .snapshotted
        .extend(std::iter::repeat_n(target, brought));
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
            Destination::Chained { id, .. } if !inner.datasets.contains(*id) => {
                return Err(changed(&h.spec.target));
            }
            // Its snapshot goes to the adopter: its name must be free there too.
            Destination::Chained {
                id,
                adopter: Some(target),
            } => {
                let name = match inner.datasets.contains(*target) {
                    true => inner.datasets.node(*target).name.clone(),
                    false => return Err(changed(&h.spec.target)),
                };
                crate::receive_rollback::check_at_end(inner, *id, *target, &name, &h.snap)?;
            }
            Destination::Chained { adopter: None, .. } => {}
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
                let snapshots = inner.datasets.node(*id).snapshots.len();
                change.created.push((*id, name.clone(), snapshots));
            }
            Destination::Rollback { id, target, .. } => {
                adopting(inner, *id, *target, &mut change);
            }
            // Its snapshot is one of the new dataset's or the adopter's, counted with it.
            Destination::Chained { .. } => {}
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
        read_node(inner, (id, id), "destroy it", |mos, store, node| {
            snapshot::destroy_all_reads(mos, store, &node.header, &node.snapshots)
        })?;
    }
    let kept = |id: &DatasetId| !change.destroyed.contains(id);
    for (id, gone) in change.snapshots.iter().filter(|(id, _)| kept(id)) {
        read_node(
            inner,
            (*id, *id),
            "destroy its snapshots",
            |mos, store, node| {
                let (head, snapshots) = (&node.header, &node.snapshots);
                (snapshots.iter().enumerate())
                    .filter(|(_, s)| gone.contains(&s.id))
                    .try_for_each(|(index, _)| {
                        snapshot::destroy_reads(mos, store, head, snapshots, index)
                    })
            },
        )?;
    }
    // A dataset adopting several snapshots is listed once for each.
    let heads: std::collections::BTreeSet<DatasetId> = change.snapshotted.iter().copied().collect();
    for &id in heads.iter().filter(|id| kept(id)) {
        read_node(
            inner,
            (id, id),
            "take it back to the stream's source",
            |mos, store, node| {
                let snap = &node.header.snap;
                if !snap.is_present() {
                    return Ok(());
                }
                deadlist::entries(mos, store, snap.deadlist).map(drop)
            },
        )?;
    }
    Ok(walked)
}

/// The dead lists the adoptions of [`apply`] file again (those of every snapshot each held
/// hidden clone of an existing dataset took, and of its head), read before the first
/// change into the MOS object set's own clean cache, where the adoption finds them (module
/// doc, failure model): beyond parity a read fails here, with nothing changed.
pub(crate) fn read_adopted(inner: &mut Imported, held: &[Held]) -> Result<(), EngineError> {
    for h in held {
        let Destination::Rollback { id, target, .. } = &h.into else {
            continue;
        };
        read_node(
            inner,
            (*id, *target),
            "adopt what the stream brought",
            |mos, store, node| {
                (tarn_dataset::clone::dead_lists(&node.header, &node.snapshots).into_iter())
                    .try_for_each(|list| deadlist::entries(mos, store, list).map(drop))
            },
        )?;
    }
    Ok(())
}

/// Runs `read`, a read before the first change of dataset `id`'s on-disk state into the
/// MOS object set's own clean cache, with that object set, the pool's reader and `id`'s
/// node; a failure refuses as [`cannot_read`] says of `named` and `what`.
fn read_node<T>(
    inner: &mut Imported,
    (id, named): (DatasetId, DatasetId),
    what: &str,
    read: impl FnOnce(
        &mut tarn_objects::ObjectSet,
        &dyn tarn_zio::BlockStore,
        &crate::datasets::Node,
    ) -> Result<T, tarn_dataset::DatasetError>,
) -> Result<T, EngineError> {
    let cannot = cannot_read(inner, named, what);
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    read(mos.objset(), &pool.reader(), datasets.node(id)).map_err(|e| cannot(e.into()))
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

/// Every held substream takes its place, in the open txg, with `reads` from [`reads`] (the
/// caller ran [`check`] and commits): each new dataset is published (parents first: a
/// dataset below a new parent was held after it), with the snapshots it took at the ENDs;
/// each existing dataset adopts its hidden clone with the snapshots taken on it (before a
/// clone of one of them is published: it was held after), and takes the properties of each
/// of its substreams in order. Returns the new datasets whose names a dataset still has,
/// which a move takes away, and those below them (`receive_moves::publish_vacated` places
/// them after the moves, in this order): (hidden dataset, parent, name).
pub(crate) fn apply(
    inner: &mut Imported,
    held: &[Held],
    reads: Vec<Option<Reads>>,
) -> Result<Vec<(DatasetId, DatasetId, String)>, EngineError> {
    assert_eq!(reads.len(), held.len(), "one read per held substream");
    let mut after_moves: Vec<(DatasetId, DatasetId, String)> = Vec::new();
    for (h, read) in held.iter().zip(reads) {
        match &h.into {
            Destination::New {
                id,
                parent,
                name,
                replaces,
            } => {
                if let Some(old) = replaces {
                    crate::receive_new::replace_at_end(inner, *old, *id, name)?;
                }
                let later = after_moves.iter().any(|(hidden, _, _)| hidden == parent);
                match later || inner.datasets.by_name(name).is_some() {
                    true => after_moves.push((*id, *parent, name.clone())),
                    false => crate::send_ops::publish(inner, *id, *parent, name)?,
                }
            }
            Destination::Chained {
                adopter: Some(target),
                ..
            } => crate::send_ops::apply_props(inner, *target, &h.props, &h.spec)?,
            Destination::Chained { adopter: None, .. } => {}
            Destination::Rollback { id, target, .. } => {
                let read = read.expect("read for every adopted head");
                crate::send_ops::apply_props(inner, *target, &h.props, &h.spec)?;
                crate::receive_rollback::adopt(inner, *id, *target, read)?;
            }
            Destination::Head { .. } => unreachable!("a held receive goes into a hidden dataset"),
        }
    }
    Ok(after_moves)
}

/// A cut or refused stream: every held hidden dataset is destroyed (with the snapshots
/// taken on it), and that committed. One already placed is left as it is: a failure (a
/// write error) after the place-taking of [`apply`] began leaves the held list naming
/// datasets that are no longer hidden (or gone: adopted).
pub(crate) fn discard(inner: &mut Imported, held: &[Held]) -> Result<(), EngineError> {
    // Reversed: a clone before its origin, a dataset before its hidden parent.
    for h in held.iter().rev() {
        let id = match &h.into {
            Destination::New { id, .. } | Destination::Rollback { id, .. } => *id,
            // Its hidden dataset is another held one's.
            Destination::Chained { .. } => continue,
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

impl Engine {
    /// The end of a held stream without a manifest (a chain, `send -I`): the checks of
    /// every held substream and the limits of what they place, the reads, then every held
    /// one takes its place and that commits, in one txg; a refusal discards what is held,
    /// so nothing changed.
    pub(crate) fn receive_held_end(
        &self,
        spec: &ReceiveSpec,
        held: &[Held],
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(crate::dataset_ops::pool_of(&spec.target))?;
        let mut inner = handle.lock();
        let checked = held_end_checks(&mut inner, held);
        let (reads, walked) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                discard(&mut inner, held)?;
                return Err(invalid(format!("{error} (nothing was received)")));
            }
        };
        inner.check_writable()?;
        with_read_ahead(&mut inner, walked, |inner| {
            let after_moves = apply(inner, held, reads)?;
            assert!(after_moves.is_empty(), "a stream without moves places all");
            Ok(())
        })?;
        for h in held {
            let command = format!("receive {}@{}", h.spec.target, h.snap);
            inner.history.push(self.history_record(&command, false));
        }
        inner.sync()?;
        Ok(())
    }
}

/// What [`held_end_checks`] read: the adopted heads' reads ([`reads`]) and the walks of
/// what the end destroys ([`read_ahead`]).
type HeldEndReads = (Vec<Option<Reads>>, BTreeMap<DatasetId, Vec<BlockPtr>>);

/// What [`Engine::receive_held_end`] checks and reads before its first change.
fn held_end_checks(inner: &mut Imported, held: &[Held]) -> Result<HeldEndReads, EngineError> {
    check(inner, held, &[])?;
    let change = change(inner, held);
    crate::limits::check_change(&inner.datasets, &change)?;
    let reads = reads(inner, held)?;
    read_adopted(inner, held)?;
    let walked = read_ahead(inner, &change)?;
    Ok((reads, walked))
}

/// At a writable import, before anything else changes: every hidden dataset of a receive a
/// crash cut (one without a resume token: not a `receive -s` partial state) is destroyed,
/// in rounds: each once nothing is below it and no clone of its snapshots is left (a held
/// dataset below a held new parent, a held clone of a held origin); the caller commits.
/// Returns the names it destroyed (hidden names).
pub(crate) fn discard_at_import(inner: &mut Imported) -> Result<Vec<String>, EngineError> {
    let tree = &inner.datasets;
    let mut cut: Vec<DatasetId> = tree
        .all()
        .into_iter()
        .filter(|&id| {
            let node = tree.node(id);
            crate::datasets::is_hidden(&node.name) && !node.local.contains_key(TOKEN_KEY)
        })
        .collect();
    let mut names = Vec::new();
    while !cut.is_empty() {
        let tree = &inner.datasets;
        let free = |id: DatasetId| {
            let node = tree.node(id);
            let snapshots: Vec<_> = node.snapshots.iter().map(|s| (id, s.id)).collect();
            tree.children(id).is_empty()
                && tree.hidden_children(id).is_empty()
                && crate::clone_ops::dependents(tree, &snapshots).is_empty()
        };
        let (ready, rest): (Vec<DatasetId>, Vec<DatasetId>) = cut.iter().partition(|&&id| free(id));
        if ready.is_empty() {
            // Below a partial state kept for `receive -s` (none are made today): it stays.
            break;
        }
        for id in ready {
            names.push(inner.datasets.node(id).name.clone());
            crate::dataset_ops::destroy_hidden(inner, id)?;
        }
        cut = rest;
    }
    Ok(names)
}
