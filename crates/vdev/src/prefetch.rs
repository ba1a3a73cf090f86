//! Read-ahead for scrub and resilver: a range of a top-level vdev's address space is turned
//! into the range of every leaf that holds part of it, and each leaf's device is told
//! (`Device::prefetch`) so that all leaves read in parallel while blocks are then verified
//! one after another. Purely advisory: nothing here changes data or fails.

use tarn_format::label::DATA_START;

use crate::top::{Layout, TopVdev};

impl TopVdev {
    /// Announces that `[offset, offset + len)` of this vdev's address space will be read
    /// soon. Mirror and disk children hold the same offsets; a raidz child holds sector
    /// `s / n` of top-level sector `s` (see `raidz_map`), so it gets `1 / n` of the range.
    pub fn prefetch(&self, offset: u64, len: u64) {
        let children = self.children();
        let sector = 1u64 << self.ashift();
        let width = children.len().max(1) as u64;
        let (start, end) = match self.layout() {
            Layout::Mirror | Layout::Disk => (offset, offset.saturating_add(len)),
            Layout::Raidz { .. } => (
                offset / sector / width * sector,
                (offset.saturating_add(len) / sector).div_ceil(width) * sector + sector,
            ),
        };
        for leaf in children.iter().flat_map(|child| child.members()) {
            let end = end.min(leaf.asize());
            if let Some(device) = leaf.usable_device()
                && start < end
            {
                device.prefetch(DATA_START + start, end - start);
            }
        }
    }
}
