//! [`Handles`]: open-handle counts per inode and the inodes waiting for their last close
//! before they are reclaimed (I2 of the crate block), and the inodes being reclaimed right
//! now, which no open may catch (requests run on several threads).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tarn_engine::posix::Ino;

#[derive(Debug, Default)]
struct Table {
    open: HashMap<Ino, u64>,
    orphans: HashSet<Ino>,
    /// Decided to be reclaimed: an open arriving now is refused (ENOENT) rather than given a
    /// handle to an inode about to be freed.
    reclaiming: HashSet<Ino>,
    next_handle: u64,
}

/// The only per-mount state: how many handles hold each inode open, and which open inodes
/// have no links left.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    table: Mutex<Table>,
}

impl Handles {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table holds plain counts; a panic elsewhere cannot leave it half-changed.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one more open handle of `ino` and returns its handle number; `None` when
    /// `ino` is being reclaimed.
    pub(crate) fn open(&self, ino: Ino) -> Option<u64> {
        let mut table = self.lock();
        if table.reclaiming.contains(&ino) {
            return None;
        }
        *table.open.entry(ino).or_insert(0) += 1;
        table.next_handle = table.next_handle.wrapping_add(1);
        Some(table.next_handle)
    }

    /// The reclaim that `release` or `unlinked` asked for is done (or failed).
    pub(crate) fn reclaimed(&self, ino: Ino) {
        self.lock().reclaiming.remove(&ino);
    }

    /// Drops one handle of `ino`. True when that was the last one and the inode has no links
    /// left: the caller reclaims it now.
    pub(crate) fn release(&self, ino: Ino) -> bool {
        let mut table = self.lock();
        let Some(count) = table.open.get_mut(&ino) else {
            // A release without an open (a mount older than this table): nothing to count.
            return false;
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return false;
        }
        table.open.remove(&ino);
        let reclaim = table.orphans.remove(&ino);
        if reclaim {
            table.reclaiming.insert(ino);
        }
        reclaim
    }

    /// `ino` lost its last link. True when nothing holds it open: the caller reclaims it
    /// now; otherwise the last release will say so.
    pub(crate) fn unlinked(&self, ino: Ino) -> bool {
        let mut table = self.lock();
        if table.open.contains_key(&ino) {
            table.orphans.insert(ino);
            false
        } else {
            table.reclaiming.insert(ino);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlinked_inode_is_reclaimed_at_its_last_release() {
        let handles = Handles::default();
        let (first, second) = (handles.open(7), handles.open(7));
        assert_ne!(first, second);
        assert!(!handles.unlinked(7));
        assert!(!handles.release(7));
        assert!(handles.release(7));
        assert!(!handles.release(7), "a stray release counts nothing");
        assert_eq!(handles.open(7), None, "no open while it is reclaimed");
        handles.reclaimed(7);
        assert!(handles.open(7).is_some());
    }

    #[test]
    fn an_unlinked_inode_without_handles_is_reclaimed_at_once() {
        let handles = Handles::default();
        assert!(handles.unlinked(9));
        assert_eq!(handles.open(9), None);
        handles.reclaimed(9);
        assert!(handles.open(9).is_some());
        assert!(!handles.release(9), "no longer an orphan once reclaimed");
    }
}
