//! The inode numbers of `.tarn/snapshot` (the snapshot directory of a mount, ZFS's `.zfs`):
//! a namespace of its own beside the head's, so that no number of a snapshot's inode is ever
//! one the head uses or will use (I1c of the crate block).
//!
//! ```text
//!   bit 63 | bits 62..40: slot | bits 39..0: dataset inode
//!     0    |       0           | head inode (InoMap)
//!     1    |       0           | 1 = `.tarn`, 2 = `.tarn/snapshot`
//!     1    |   1 ..= SLOT_MAX  | that inode in the snapshot the slot names
//! ```
//! A slot is given to a snapshot (by GUID) the first time it is looked up and is never
//! given to another for the life of the mount, so a destroyed snapshot's numbers go stale
//! (ENOENT) rather than showing a later snapshot that took its name.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tarn_base::Guid;
use tarn_engine::posix::Ino;

/// Marks a kernel inode number of the snapshot directory.
const SNAP_BIT: u64 = 1 << 63;
/// Where the slot starts.
const SLOT_SHIFT: u32 = 40;
/// Dataset inodes that fit beside a slot.
const INO_MASK: u64 = (1 << SLOT_SHIFT) - 1;
/// The last slot.
const SLOT_MAX: u64 = (1 << (63 - SLOT_SHIFT)) - 1;

/// `.tarn`, in the root directory.
pub(crate) const CONTROL: u64 = SNAP_BIT | 1;
/// `.tarn/snapshot`.
pub(crate) const SNAPSHOTS: u64 = SNAP_BIT | 2;
/// The name of the control directory in the root.
pub(crate) const CONTROL_NAME: &[u8] = b".tarn";
/// The name of the snapshot list in the control directory.
pub(crate) const SNAPSHOTS_NAME: &[u8] = b"snapshot";

/// The snapshot list's path from a mount's root, as other parts of tarn name files in it
/// (`tarn checksum /tank/fs/.tarn/snapshot/SNAP/file`).
pub const SNAPSHOT_DIR: &str = ".tarn/snapshot";
const _: () = {
    let dir = SNAPSHOT_DIR.as_bytes();
    assert!(dir.len() == CONTROL_NAME.len() + 1 + SNAPSHOTS_NAME.len());
};

/// What a kernel inode number names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// A number of the head (mapped by `InoMap`).
    Head,
    /// `.tarn` or `.tarn/snapshot` (the number).
    Control(u64),
    /// `ino` of the snapshot in `slot`.
    Snapshot {
        /// Its slot.
        slot: u64,
        /// The dataset inode inside the snapshot.
        ino: Ino,
    },
}

/// Where `kernel` lives.
pub(crate) fn place(kernel: u64) -> Place {
    if kernel & SNAP_BIT == 0 {
        return Place::Head;
    }
    let slot = (kernel & !SNAP_BIT) >> SLOT_SHIFT;
    if slot == 0 {
        return Place::Control(kernel);
    }
    Place::Snapshot {
        slot,
        ino: kernel & INO_MASK,
    }
}

/// Whether `kernel` is in the snapshot directory (read-only: every change is EROFS).
pub(crate) fn is_snapshot_dir(kernel: u64) -> bool {
    kernel & SNAP_BIT != 0
}

/// The kernel number of `ino` of the snapshot in `slot`; `None` when `ino` does not fit.
pub(crate) fn kernel_of(slot: u64, ino: Ino) -> Option<u64> {
    assert!(
        (1..=SLOT_MAX).contains(&slot),
        "I1c: slot {slot} out of range"
    );
    (ino != 0 && ino <= INO_MASK).then_some(SNAP_BIT | (slot << SLOT_SHIFT) | ino)
}

/// The slots given out so far: slot `i + 1` is `guids[i]`.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    guids: Mutex<Vec<Guid>>,
}

impl Slots {
    fn lock(&self) -> MutexGuard<'_, Vec<Guid>> {
        self.guids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of snapshot `guid`, given now if it has none; `None` when every slot is
    /// taken.
    pub(crate) fn slot_of(&self, guid: Guid) -> Option<u64> {
        let mut guids = self.lock();
        let index = match guids.iter().position(|g| *g == guid) {
            Some(index) => index,
            None => {
                guids.push(guid);
                guids.len() - 1
            }
        };
        let slot = u64::try_from(index).ok()? + 1;
        if slot > SLOT_MAX {
            guids.pop();
            return None;
        }
        Some(slot)
    }

    /// The snapshot in `slot`, if it was given out.
    pub(crate) fn guid_of(&self, slot: u64) -> Option<Guid> {
        let index = usize::try_from(slot.checked_sub(1)?).ok()?;
        self.lock().get(index).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_never_meet() {
        assert_eq!(place(1), Place::Head);
        assert_eq!(place(INO_MASK), Place::Head);
        assert_eq!(place(CONTROL), Place::Control(CONTROL));
        assert_eq!(place(SNAPSHOTS), Place::Control(SNAPSHOTS));
        let kernel = kernel_of(3, 34).expect("fits");
        assert!(is_snapshot_dir(kernel) && !is_snapshot_dir(34));
        assert_eq!(place(kernel), Place::Snapshot { slot: 3, ino: 34 });
        assert_ne!(kernel_of(1, 34), kernel_of(2, 34));
        assert_eq!(kernel_of(1, INO_MASK + 1), None);
        assert_eq!(kernel_of(1, 0), None);
    }

    #[test]
    fn a_slot_is_never_given_twice() {
        let slots = Slots::default();
        assert_eq!(slots.slot_of(Guid(7)), Some(1));
        assert_eq!(slots.slot_of(Guid(9)), Some(2));
        assert_eq!(slots.slot_of(Guid(7)), Some(1));
        assert_eq!(slots.guid_of(2), Some(Guid(9)));
        assert_eq!(slots.guid_of(3), None);
        assert_eq!(slots.guid_of(0), None);
    }
}
