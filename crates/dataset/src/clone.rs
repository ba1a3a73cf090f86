//! Clones (ZFS's `dsl_dataset` clone half): a writable dataset whose object set starts as a
//! snapshot's, sharing every block with it until either side writes.
//!
//! ```text
//!  tank/a@s (origin snapshot, txg T) ── objset root R ──► blocks born <= T
//!                                                            ▲
//!  tank/c (clone): header.objset = R at first, header.snap.origin = node of tank/a@s
//!                  head dead list bucket T: the origin's blocks the clone let go of
//! ```
//! Model (T = the origin snapshot's txg):
//! - A block born at or before T is the origin's: the clone references it but never frees
//!   it. When the clone kills one, the kill rule ([`crate::deadlist::KillStore`] over
//!   [`kill_txgs`], which lists T before the clone's own snapshot txgs) files it in a bucket
//!   keyed T in the clone's dead list, and `usedbysnapshots` does not count it.
//! - A block born after T is the clone's own, under the ordinary snapshot rules with T
//!   standing in for "the previous snapshot" of the clone's first one (the `floor` the
//!   functions of [`crate::snapshot`] take).
//! - The clone's `usedbydataset` is `referenced` minus what it still shares with the origin:
//!   `shared = origin.referenced - origin_dead`, where `origin_dead` is the space of every
//!   bucket keyed at or below T in the clone's dead lists ([`origin_dead`]), so it is derived
//!   from the dead lists, never stored, and stays exact across crashes.
//! - The origin snapshot cannot be destroyed while a clone names it (the engine refuses, or
//!   with `-R` destroys the clones first). Destroying a clone frees only blocks born after T.
//! - `clones` of a snapshot is derived: every dataset whose header names it as origin.
//!
//! Invariants:
//! - C1: a clone's header has its snapshot fields (snapshots ZAP, dead list) from creation.
//! - C2: every dead-list bucket key of a clone at or below T holds only blocks born at or
//!   below T, and no other dataset frees them while the origin snapshot exists.
//! - C3: [`adopt_clone`] moves a clone's head and snapshots into the dataset of its origin
//!   only when that origin is the dataset's latest snapshot and its head equals it, so the
//!   moved dead lists refiled under the dataset's txgs are exactly what its kill rule would
//!   have filed.
//!
//! Not here: the engine's verbs check names, holds and dependent clones before anything
//! changes.

use tarn_base::{ObjectId, Txg};
use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::DatasetError;
use crate::deadlist;
use crate::node::{DatasetHeader, SnapHead};
use crate::snapshot::{Snapshot, SnapshotHeader};

/// A clone's origin, as its dataset keeps it in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The origin snapshot's node.
    pub snapshot: ObjectId,
    /// The node of the dataset that snapshot belongs to.
    pub dataset: ObjectId,
    /// The origin snapshot's txg: blocks born at or before it are the origin's.
    pub txg: Txg,
    /// The origin snapshot's `referenced` (what the clone shared at creation).
    pub referenced: u64,
}

/// The origin a header names, read from its snapshot node (`None`: not a clone).
pub fn load_origin(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
) -> Result<Option<Origin>, DatasetError> {
    if head.snap.origin.0 == 0 {
        return Ok(None);
    }
    let snap = SnapshotHeader::decode(&mos.bonus(store, head.snap.origin)?)?;
    Ok(Some(Origin {
        snapshot: head.snap.origin,
        dataset: snap.dataset,
        txg: snap.txg,
        referenced: snap.referenced,
    }))
}

/// The header of a new clone of `origin`: `base` (parent, creation, GUID) with the
/// snapshot's object-set root and counters, and snapshot fields naming the origin (C1).
pub fn header(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    origin: &Snapshot,
    base: DatasetHeader,
) -> Result<DatasetHeader, DatasetError> {
    assert!(
        !origin.header.objset.is_hole(),
        "C1: an origin snapshot has a committed object set"
    );
    Ok(DatasetHeader {
        objset: origin.header.objset,
        referenced: origin.header.referenced,
        logical: origin.header.logical,
        physical: origin.header.physical,
        snap: SnapHead {
            snapshots: mos.zap_create(store, tarn_format::dnode::OBJECT_TYPE_ZAP)?,
            deadlist: deadlist::create(mos, store)?,
            used: 0,
            origin: origin.id,
        },
        ..base
    })
}

/// The kill rule's txgs for a dataset: a clone's origin txg first, then its snapshots'.
#[must_use]
pub fn kill_txgs(origin: Option<&Origin>, snapshots: &[Snapshot]) -> Vec<Txg> {
    let mut txgs: Vec<Txg> = origin.map(|o| o.txg).into_iter().collect();
    txgs.extend(snapshots.iter().map(|s| s.header.txg));
    assert!(
        txgs.windows(2).all(|w| w[0] < w[1]),
        "C2: a clone's snapshots are younger than its origin"
    );
    txgs
}

/// The dead lists of a dataset: its snapshots' and the head's.
#[must_use]
pub fn dead_lists(head: &DatasetHeader, snapshots: &[Snapshot]) -> Vec<ObjectId> {
    let mut lists: Vec<ObjectId> = snapshots.iter().map(|s| s.header.deadlist).collect();
    if head.snap.is_present() {
        lists.push(head.snap.deadlist);
    }
    lists
}

/// Deflated space of the origin's blocks a clone let go of: the buckets keyed at or below
/// `floor` (the origin's txg) in every dead list of the clone.
pub fn origin_dead(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshots: &[Snapshot],
    floor: Txg,
) -> Result<u64, DatasetError> {
    let mut total = 0;
    for list in dead_lists(head, snapshots) {
        total += deadlist::space_in(mos, store, list, 0, floor.0)?.used;
    }
    Ok(total)
}

/// What a clone still shares with its origin (deflated bytes): not its own `used`.
#[must_use]
pub fn shared(origin: &Origin, origin_dead: u64) -> u64 {
    origin.referenced.saturating_sub(origin_dead)
}

/// One side of a promote: a dataset's node, header and snapshots (oldest first).
pub struct Side<'a> {
    /// Its node in the MOS.
    pub id: ObjectId,
    /// Its header.
    pub head: &'a mut DatasetHeader,
    /// Its snapshots.
    pub snapshots: &'a mut Vec<Snapshot>,
}

/// Space of a dataset's dead lists above `floor`: its `usedbysnapshots`.
pub fn counted_space(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshots: &[Snapshot],
    floor: u64,
) -> Result<u64, DatasetError> {
    let mut total = 0;
    for list in dead_lists(head, snapshots) {
        total += deadlist::space_in(mos, store, list, floor, u64::MAX)?.used;
    }
    Ok(total)
}

/// `tarn promote` (ZFS's `dsl_dataset_promote`): the origin's snapshots up to and including
/// the clone's origin snapshot move to the clone, which takes the origin's own origin (if
/// any); the origin becomes a clone of that snapshot. `origin_floor` is the origin dataset's
/// own origin txg (0 when it is no clone). The clone's dead-list buckets up to the origin
/// snapshot's txg held the origin's blocks; they are filed again by the moved snapshots'
/// txgs, since those snapshots are now the clone's (time proportional to the blocks the
/// clone let go of, not to the data). `usedbysnapshots` of both is counted again. The caller
/// checked the snapshot names do not collide and reloads every dataset's origin; `sizer`
/// gives a block's deflated size.
pub fn promote(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    clone: Side<'_>,
    origin: Side<'_>,
    origin_floor: u64,
    sizer: &dyn Fn(&tarn_format::BlockPtr) -> u64,
) -> Result<(), DatasetError> {
    let at = origin
        .snapshots
        .iter()
        .position(|s| s.id == clone.head.snap.origin)
        .ok_or_else(|| DatasetError::Corrupt("a clone's origin is not its dataset's".into()))?;
    let cut = origin.snapshots[at].header.txg;
    let moved: Vec<Snapshot> = origin.snapshots.drain(..=at).collect();
    for mut snap in moved.into_iter().rev() {
        mos.zap_remove(store, origin.head.snap.snapshots, &snap.name)?;
        mos.zap_insert_u64(store, clone.head.snap.snapshots, &snap.name, snap.id.0)?;
        snap.header.dataset = clone.id;
        mos.set_bonus(store, snap.id, &snap.header.encode())?;
        clone.snapshots.insert(0, snap);
    }
    clone.head.snap.origin = origin.head.snap.origin;
    origin.head.snap.origin = clone.snapshots[at].id;
    let txgs: Vec<Txg> = std::iter::once(Txg(origin_floor))
        .filter(|t| t.0 > 0)
        .chain(clone.snapshots.iter().map(|s| s.header.txg))
        .collect();
    for list in dead_lists(clone.head, &clone.snapshots[at + 1..]) {
        refile(mos, store, list, cut, &txgs, sizer)?;
    }
    clone.head.snap.used = counted_space(mos, store, clone.head, clone.snapshots, origin_floor)?;
    origin.head.snap.used = counted_space(mos, store, origin.head, origin.snapshots, cut.0)?;
    Ok(())
}

/// The end of a receive over a destination taken back to the stream's source (`receive -F`
/// of an incremental stream when the destination has later snapshots or changes: OpenZFS's
/// clone swap; and every incremental substream of an existing dataset in a held `receive
/// -R`, chained on one hidden clone). `target`'s head equals its latest snapshot (the caller
/// destroyed the later ones and rolled it back); `clone` is a clone of that snapshot
/// holding what was received, with the snapshots the receive took on it (none for a plain
/// `-F`, whose caller takes the one snapshot afterwards).
///
/// The clone's snapshots move to `target`, after its latest, in order, with their nodes,
/// GUIDs, txgs and dead lists (as [`promote`] moves snapshots the other way); the target's
/// head takes the clone's object set and counters and the clone's head dead list. Every
/// moved dead list's buckets keyed at or below the origin's txg (the origin's blocks the
/// clone let go of, all keyed at the origin's txg) are filed again under the target's kill
/// txgs (`floor` is the target's own origin txg, 0 when it is no clone): exactly what the
/// kill rule would have filed had the records been applied to the target itself, so every
/// snapshot's `used`, `written` and the target's `usedbysnapshots` are what they would be.
/// The clone takes the target's former head (the snapshot's root, an empty dead list) and
/// no snapshots, so destroying it frees nothing the target holds. Time proportional to the
/// blocks the clone let go of and the snapshots moved, not to the data. The caller checked
/// that no moved snapshot's name is one of the target's, and reloads the origins of the
/// clones of the moved snapshots (their snapshot nodes now name `target`).
pub fn adopt_clone(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    target: Side<'_>,
    clone: Side<'_>,
    floor: u64,
    sizer: &dyn Fn(&tarn_format::BlockPtr) -> u64,
) -> Result<(), DatasetError> {
    let latest = target
        .snapshots
        .last()
        .ok_or_else(|| DatasetError::Corrupt("a rolled-back head without snapshots".into()))?;
    assert_eq!(
        clone.head.snap.origin, latest.id,
        "C3: the adopted clone is a clone of the target's latest snapshot"
    );
    assert_eq!(
        target.head.objset, latest.header.objset,
        "C3: the target's head was rolled back to its latest snapshot"
    );
    let cut = latest.header.txg;
    let moved_from = target.snapshots.len();
    for mut snap in std::mem::take(clone.snapshots) {
        assert!(
            snap.header.txg > cut,
            "C3: a clone's snapshots follow its origin"
        );
        mos.zap_remove(store, clone.head.snap.snapshots, &snap.name)?;
        mos.zap_insert_u64(store, target.head.snap.snapshots, &snap.name, snap.id.0)?;
        snap.header.dataset = target.id;
        mos.set_bonus(store, snap.id, &snap.header.encode())?;
        target.snapshots.push(snap);
    }
    std::mem::swap(
        &mut target.head.snap.deadlist,
        &mut clone.head.snap.deadlist,
    );
    let txgs: Vec<Txg> = std::iter::once(Txg(floor))
        .filter(|t| t.0 > 0)
        .chain(target.snapshots.iter().map(|s| s.header.txg))
        .collect();
    let moved: Vec<ObjectId> = target.snapshots[moved_from..]
        .iter()
        .map(|s| s.header.deadlist)
        .chain(std::iter::once(target.head.snap.deadlist))
        .collect();
    for list in moved {
        refile(mos, store, list, cut, &txgs, sizer)?;
    }
    std::mem::swap(&mut target.head.objset, &mut clone.head.objset);
    std::mem::swap(&mut target.head.referenced, &mut clone.head.referenced);
    std::mem::swap(&mut target.head.logical, &mut clone.head.logical);
    std::mem::swap(&mut target.head.physical, &mut clone.head.physical);
    target.head.snap.used = counted_space(mos, store, target.head, target.snapshots, floor)?;
    // The target's former head dead list, emptied by the rollback: nothing counted.
    clone.head.snap.used = 0;
    Ok(())
}

/// Files the blocks of `list`'s buckets keyed up to `cut` again under `txgs` (the kill
/// rule's buckets: the first txg at or after each block's birth).
fn refile(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
    cut: Txg,
    txgs: &[Txg],
    sizer: &dyn Fn(&tarn_format::BlockPtr) -> u64,
) -> Result<(), DatasetError> {
    let (blocks, _) = deadlist::take_range(mos, store, list, 0, cut.0)?;
    let mut by_key: std::collections::BTreeMap<u64, Vec<tarn_format::BlockPtr>> =
        std::collections::BTreeMap::new();
    for bp in blocks {
        let key = deadlist::bucket_of(txgs, bp.birth).ok_or_else(|| {
            DatasetError::Corrupt(format!("dead block born in {} past its bucket", bp.birth.0))
        })?;
        by_key.entry(key).or_default().push(bp);
    }
    for (key, bps) in by_key {
        deadlist::insert(mos, store, list, key, &bps, sizer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(txg: u64) -> Snapshot {
        Snapshot {
            id: ObjectId(txg),
            name: format!("s{txg}"),
            header: SnapshotHeader {
                txg: Txg(txg),
                ..SnapshotHeader::default()
            },
            props: Default::default(),
            holds: Default::default(),
            defer_destroy: false,
        }
    }

    #[test]
    fn a_clone_files_the_origins_blocks_under_the_origin_txg() {
        let origin = Origin {
            snapshot: ObjectId(9),
            dataset: ObjectId(4),
            txg: Txg(10),
            referenced: 1000,
        };
        let txgs = kill_txgs(Some(&origin), &[snap(12), snap(20)]);
        assert_eq!(txgs, vec![Txg(10), Txg(12), Txg(20)]);
        assert_eq!(deadlist::bucket_of(&txgs, Txg(3)), Some(10));
        assert_eq!(deadlist::bucket_of(&txgs, Txg(10)), Some(10));
        assert_eq!(deadlist::bucket_of(&txgs, Txg(11)), Some(12));
        assert_eq!(deadlist::bucket_of(&txgs, Txg(21)), None);
        assert_eq!(kill_txgs(None, &[snap(12)]), vec![Txg(12)]);
        assert_eq!(shared(&origin, 300), 700);
        assert_eq!(shared(&origin, 3000), 0);
    }
}
