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
