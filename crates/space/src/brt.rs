//! The block reference table (BRT): OpenZFS 2.2's block cloning, kept by the space layer.
//!
//! # Purpose
//! `copy_file_range` clones a file's block pointers instead of copying its data, so one
//! allocated block may be named by several block pointers that no snapshot relation ties
//! together. The BRT counts, per allocated extent (a DVA), the references beyond the first;
//! a free of a DVA with an entry drops one reference instead of giving the space back, and
//! only the free of the last reference frees it.
//!
//! # Model
//! ```text
//!  Brt: (vdev, offset) -> { asize, refs }      refs >= 1: references beyond the first
//!  clone of a block in txg T    SpaceManager::clone_ref   refs += 1   (record op 3)
//!  free of a DVA with an entry  Allocator::free           refs -= 1   (record op 4)
//!  free of a DVA without one    Allocator::free           the space is freed (op 2)
//! ```
//! Keyed by DVA, as OpenZFS keys its table by vdev and offset: every copy of a block has
//! its own entry, and every free path (overwrite, truncate, unlink, snapshot and dataset
//! destroy, rollback) reaches the table because every one of them ends in
//! `Allocator::free` of each DVA, the one door to the free trees.
//!
//! # State
//! In memory: the map. On disk: the space log's records (docs/FORMAT.md "Space log" and
//! "Block cloning"): a delta carries the references added (op 3) and dropped (op 4) in its
//! txg, in order with the allocations and frees; a base carries each entry as `refs` add
//! records after the extents. Replaying the chain reproduces the table exactly, as it
//! reproduces the allocated set.
//!
//! # Invariants
//! - B1: an entry names an allocated extent, and `refs >= 1` (an entry whose count reaches
//!   zero is removed: the DVA has one reference, as an uncloned block).
//! - B2: the extent of a DVA with an entry is never in a free tree nor deferred: a free of
//!   it only drops a reference.
//! - B3: `used` is the sum of the entries' sizes and `saved` the sum of size x refs (ZFS's
//!   `bcloneused` and `bclonesaved`), kept exact at every change.
//!
//! # Not here
//! Which block pointers exist (the object layer makes the clones); the space accounting of
//! datasets (each dataset is charged the whole of every block it references, as in
//! OpenZFS).

use std::collections::BTreeMap;

use tarn_base::VdevId;
use tarn_format::Dva;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    asize: u64,
    refs: u64,
}

/// Reference counts of the blocks cloned more than once (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Brt {
    entries: BTreeMap<(VdevId, u64), Entry>,
    used: u64,
    saved: u64,
}

impl Brt {
    /// Adds one reference to `dva` (which the caller checked is allocated).
    pub(crate) fn add(&mut self, dva: &Dva) {
        assert!(dva.asize > 0, "B1: a clone of an empty DVA");
        let entry = self.entries.entry((dva.vdev, dva.offset)).or_insert(Entry {
            asize: dva.asize,
            refs: 0,
        });
        assert_eq!(
            entry.asize, dva.asize,
            "B1: a clone of {dva:?} names another size than its entry"
        );
        if entry.refs == 0 {
            self.used += dva.asize;
        }
        entry.refs += 1;
        self.saved += dva.asize;
    }

    /// Drops one reference of `dva`: `true` when it had an entry (the free stops here),
    /// `false` when the DVA has no other reference (the caller frees its space).
    pub(crate) fn drop_ref(&mut self, dva: &Dva) -> bool {
        let key = (dva.vdev, dva.offset);
        let Some(entry) = self.entries.get_mut(&key) else {
            return false;
        };
        assert_eq!(
            entry.asize, dva.asize,
            "B1: a free of {dva:?} names another size than its entry"
        );
        assert!(entry.refs >= 1, "B1: an entry without references");
        entry.refs -= 1;
        self.saved -= dva.asize;
        if entry.refs == 0 {
            self.entries.remove(&key);
            self.used -= dva.asize;
        }
        true
    }

    /// References of `dva` beyond the first (0: not cloned).
    #[must_use]
    pub fn refs(&self, dva: &Dva) -> u64 {
        self.entries
            .get(&(dva.vdev, dva.offset))
            .filter(|entry| entry.asize == dva.asize)
            .map_or(0, |entry| entry.refs)
    }

    /// Whether an entry at `dva`'s address has another size (damage when read from disk).
    #[must_use]
    pub(crate) fn conflicts(&self, dva: &Dva) -> bool {
        self.entries
            .get(&(dva.vdev, dva.offset))
            .is_some_and(|entry| entry.asize != dva.asize)
    }

    /// Whether no block is cloned.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Allocated bytes of the blocks with an entry, each once (ZFS's `bcloneused`).
    #[must_use]
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Bytes the clones would have taken as copies: size x refs (ZFS's `bclonesaved`).
    #[must_use]
    pub fn saved(&self) -> u64 {
        self.saved
    }

    /// Records a base needs to carry the table (one add per reference).
    pub(crate) fn record_count(&self) -> u64 {
        self.entries.values().map(|entry| entry.refs).sum()
    }

    /// Every entry as `(dva, refs)`, in DVA order.
    pub fn entries(&self) -> impl Iterator<Item = (Dva, u64)> + '_ {
        self.entries.iter().map(|(&(vdev, offset), entry)| {
            (
                Dva {
                    vdev,
                    offset,
                    asize: entry.asize,
                },
                entry.refs,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dva(offset: u64) -> Dva {
        Dva {
            vdev: VdevId(0),
            offset,
            asize: 4096,
        }
    }

    #[test]
    fn counts_and_space_follow_adds_and_drops() {
        let mut brt = Brt::default();
        assert!(!brt.drop_ref(&dva(0)), "an uncloned DVA has no entry");
        brt.add(&dva(0));
        brt.add(&dva(0));
        brt.add(&dva(8192));
        assert_eq!((brt.refs(&dva(0)), brt.refs(&dva(8192))), (2, 1));
        assert_eq!((brt.used(), brt.saved()), (8192, 3 * 4096));
        assert_eq!(brt.record_count(), 3);
        assert!(brt.drop_ref(&dva(0)));
        assert!(brt.drop_ref(&dva(0)));
        assert_eq!(brt.refs(&dva(0)), 0, "the last clone reference went");
        assert!(!brt.drop_ref(&dva(0)), "the next free frees the space");
        assert_eq!((brt.used(), brt.saved()), (4096, 4096));
        assert!(brt.drop_ref(&dva(8192)));
        assert!(brt.is_empty());
        assert_eq!((brt.used(), brt.saved()), (0, 0));
    }
}
