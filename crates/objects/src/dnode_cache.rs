//! Decoded dnodes of an object set's clean objects, so that a warm read does not walk the
//! meta-dnode's tree and decode its object's dnode again.
//!
//! Why: every request on a file asks for its dnode several times (the read plan, the
//! inode, the read itself, the access time), and an object not changed since the last
//! sync is read from the meta-dnode's blocks and decoded and validated each time: about
//! 19% of a warm 4K random read's CPU (docs/PERFORMANCE.md, "Random reads (issue 18,
//! session 28)").
//!
//! # Model
//! A direct-mapped table of [`SLOTS`] entries, slot `id % SLOTS`, each holding one object
//! id and the dnode [`crate::ObjectSet`] read for it from the meta-dnode (free slots
//! included). Two objects that share a slot push each other out; a miss costs what every
//! lookup cost before. The table is allocated at the first insert, so an object set
//! nobody reads (a snapshot held only for its space) costs one empty `Vec`.
//!
//! # Invariants
//! - D1: an entry equals what decoding the meta-dnode's bytes of its object gives now.
//!   The meta-dnode's bytes change only when a sync writes a changed object's dnode into
//!   them (`ObjectSet::sync_slot`): that object's entry goes right there, and the whole
//!   table at the start and the end of every sync (a failed sync included), so nothing
//!   read while a sync was under way outlives it. Objects changed since the last sync are
//!   not served from here at all: their dnode in memory wins (`ObjectSet::current_dnode`
//!   looks there first). Object sets opened anew (a rollback, a clone, a remount) start
//!   with an empty table.
//! - D2: at most [`SLOTS`] dnodes per object set.
//!
//! # Failure model
//! Nothing here fails: a lookup that misses decodes as before, and decoding errors are
//! never cached (only dnodes that decoded and validated are inserted).

use tarn_base::ObjectId;
use tarn_format::dnode::Dnode;

/// Entries per object set: more than the files a program or a benchmark reads at once
/// (fs-peers' 16 jobs), small enough (about 30 KiB) to keep per object set.
pub(crate) const SLOTS: usize = 64;

/// The table (module doc).
#[derive(Debug, Default)]
pub(crate) struct DnodeCache {
    slots: Vec<Option<(u64, Dnode)>>,
}

impl DnodeCache {
    fn slot(id: ObjectId) -> usize {
        (id.0 % SLOTS as u64) as usize
    }

    /// The dnode of `id` if its slot holds it.
    pub(crate) fn get(&self, id: ObjectId) -> Option<&Dnode> {
        match self.slots.get(Self::slot(id)) {
            Some(Some((held, dnode))) if *held == id.0 => Some(dnode),
            _ => None,
        }
    }

    /// Keeps `dnode` as the one of `id` read from the meta-dnode now (D1).
    pub(crate) fn insert(&mut self, id: ObjectId, dnode: &Dnode) {
        if self.slots.is_empty() {
            self.slots.resize(SLOTS, None);
        }
        self.slots[Self::slot(id)] = Some((id.0, dnode.clone()));
    }

    /// Forgets the dnode of `id` (its bytes in the meta-dnode are about to change).
    pub(crate) fn forget(&mut self, id: ObjectId) {
        if let Some(slot) = self.slots.get_mut(Self::slot(id))
            && matches!(slot, Some((held, _)) if *held == id.0)
        {
            *slot = None;
        }
    }

    /// Forgets every dnode.
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|slot| *slot = None);
    }
}
