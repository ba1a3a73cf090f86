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
            Layout::Draid(_) => {
                self.prefetch_draid(offset, len);
                return;
            }
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

    /// dRAID: each group the range touches has its rows on `w` children at one child range.
    fn prefetch_draid(&self, offset: u64, len: u64) {
        let Some(geometry) = self.draid_geometry() else {
            return;
        };
        let sector = 1u64 << self.ashift();
        let width = geometry.width() as u64;
        let group_bytes = geometry.group_sectors() * sector;
        let end = offset.saturating_add(len).min(self.asize());
        let children = self.children();
        let mut group_start = offset / group_bytes * group_bytes;
        while group_start < end {
            let first = offset.max(group_start) - group_start;
            let last = end.min(group_start + group_bytes) - group_start;
            let row_first = first / sector / width;
            let rows = (last / sector).div_ceil(width) - row_first;
            let row_bytes = geometry.data as u64 * sector;
            let map = geometry.map(group_start + row_first * width * sector, row_bytes);
            for column in &map.columns {
                for leaf in children[column.child].members() {
                    if let Some(device) = leaf.usable_device() {
                        let at = DATA_START + (column.child_sector << self.ashift());
                        device.prefetch(at, rows * sector);
                    }
                }
            }
            group_start += group_bytes;
        }
    }
}
