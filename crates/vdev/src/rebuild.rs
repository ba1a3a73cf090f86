//! Sequential rebuild (`tarn pool replace -s`, ZFS's "rebuild"): a range of a mirror's (or a
//! single disk's) address space is copied as raw bytes from a readable, complete child to the
//! members being resilvered. No block pointers and no checksums are involved: the caller
//! walks the allocated ranges of the space maps in address order, and a verifying scrub
//! afterwards finds (and repairs from the other copies) whatever a bad source sector spread.
//!
//! Raidz has no such copy: a column's bytes depend on where each block's stripe starts, which
//! only the block pointers know, so the engine refuses `-s` for raidz as ZFS does.

use crate::error::VdevError;
use crate::top::{Healing, Layout, TopVdev};

/// What one rebuilt range did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Bytes written to members being resilvered.
    pub written: u64,
    /// Leaves whose write failed.
    pub failed: Vec<tarn_base::Guid>,
}

impl TopVdev {
    /// Copies `[offset, offset + len)` of this vdev's address space from the first child that
    /// can read it to every member being resilvered (see the module doc). Mirror and disk
    /// layouts only; the range must be sector-aligned and inside the vdev.
    pub fn rebuild_range(&self, offset: u64, len: usize) -> Result<RebuildReport, VdevError> {
        assert!(
            matches!(self.layout(), Layout::Mirror | Layout::Disk),
            "sequential rebuild of a {:?} vdev",
            self.layout()
        );
        let sector = 1u64 << self.ashift();
        if !offset.is_multiple_of(sector) || !(len as u64).is_multiple_of(sector) {
            return Err(VdevError::Misaligned {
                guid: self.guid(),
                offset,
                len: len as u64,
                sector,
            });
        }
        let children = self.children();
        let targets: Vec<_> = children.iter().filter(|c| c.needs_resilver()).collect();
        if targets.is_empty() {
            return Ok(RebuildReport::default());
        }
        let mut buf = vec![0u8; len];
        let read = children.iter().filter_map(|c| c.read_leaf()).any(|leaf| {
            leaf.usable_device()
                .is_some_and(|device| leaf.read(device.as_ref(), offset, &mut buf).is_ok())
        });
        if !read {
            return Err(VdevError::Unrecoverable {
                guid: self.guid(),
                offset,
                len: len as u64,
                why: "no complete child could read the range",
            });
        }
        let mut healing = Healing::default();
        let written = targets
            .iter()
            .map(|child| child.resilver(offset, &buf, &mut healing))
            .sum();
        Ok(RebuildReport {
            written,
            failed: healing.heal_failed,
        })
    }
}
