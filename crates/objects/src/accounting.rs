//! Space accounting by owner at sync (ZFS's `dmu_objset_do_userquota_updates`): the sync
//! reports every object whose committed dnode changed (type, bonus, used bytes) to a
//! [`SyncHook`], which may then update objects it owns; those are written in a second pass
//! of the same sync, so the counts and the files they count commit in one txg.
//!
//! The object layer knows nothing of owners: the hook (the POSIX layer) reads uid, gid and
//! project from the bonus bytes it gets. The hook's own objects are *deferred*: changes made
//! to them in open context are written in the second pass with the hook's, never twice.

use tarn_base::ObjectId;
use tarn_format::dnode::Dnode;
use tarn_zio::BlockStore;

use crate::{ObjectError, ObjectSet};

/// What a committed dnode says about an object, for accounting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsedState {
    /// Object type.
    pub object_type: u8,
    /// Bonus bytes (the upper layer's inode).
    pub bonus: Vec<u8>,
    /// Allocated bytes of the object's tree (all copies), as the dnode counts them.
    pub used_bytes: u64,
}

impl UsedState {
    /// The accounting facts of `dnode` (`None` for a free slot).
    pub(crate) fn of(dnode: &Dnode) -> Option<UsedState> {
        (!dnode.is_free()).then(|| UsedState {
            object_type: dnode.object_type,
            bonus: dnode.bonus_bytes().to_vec(),
            used_bytes: dnode.used_bytes,
        })
    }
}

/// One object whose committed state changed in a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsedChange {
    /// The object.
    pub object: ObjectId,
    /// As the previous txg committed it (`None`: the slot was free).
    pub before: Option<UsedState>,
    /// As this txg commits it (`None`: freed).
    pub after: Option<UsedState>,
}

impl UsedChange {
    /// The change between two committed dnodes, or `None` when nothing counted differs.
    pub(crate) fn between(object: ObjectId, before: &Dnode, after: Option<&Dnode>) -> Option<Self> {
        let before = UsedState::of(before);
        let after = after.and_then(UsedState::of);
        (before != after).then_some(UsedChange {
            object,
            before,
            after,
        })
    }
}

/// Called by [`ObjectSet::sync_with`] after the first pass.
pub trait SyncHook {
    /// Objects the hook updates in [`SyncHook::account`]: the sync writes them in its second
    /// pass only (and reports no changes for them).
    fn is_deferred(&self, object: ObjectId) -> bool;

    /// Applies `changes` (every object written in the first pass whose type, bonus or used
    /// bytes changed) by changing deferred objects of `os` only.
    fn account(
        &mut self,
        os: &mut ObjectSet,
        store: &dyn BlockStore,
        changes: &[UsedChange],
    ) -> Result<(), ObjectError>;
}
