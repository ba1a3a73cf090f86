//! Sequential rebuild (`tarn pool replace -s`, ZFS's "rebuild"): a range of a mirror's (or a
//! single disk's) address space is copied as raw bytes from a readable, complete child to the
//! members being resilvered. No block pointers and no checksums are involved: the caller
//! walks the allocated ranges of the space maps in address order, and a verifying scrub
//! afterwards finds (and repairs from the other copies) whatever a bad source sector spread.
//!
//! Raidz has no such copy: a column's bytes depend on where each block's stripe starts, which
//! only the block pointers know, so the engine refuses `-s` for raidz as ZFS does.
//!
//! dRAID has one (why OpenZFS built its sequential rebuild for it): every block fills whole
//! rows of its group with parity first, so each group row is a stripe of its own whatever
//! block it belongs to. A range is rebuilt row by row: the rows it touches (rounded out to
//! whole rows, so a range that splits a row still rebuilds it whole) are read from every
//! readable child of each group they lie in, the columns of children being resilvered (and
//! any unreadable ones, up to parity) are reconstructed, and written to the members being
//! resilvered. Every child reads and writes its share in parallel over the whole rebuild, as
//! the permutations spread a failed child's partners over all the others.

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
        if matches!(self.layout(), Layout::Draid(_)) {
            return self.rebuild_draid(offset, len as u64);
        }
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
        let mut buf = tarn_base::buf::zeroed(len);
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

impl TopVdev {
    /// dRAID: rebuilds every group row `[offset, offset + len)` touches (module doc).
    fn rebuild_draid(&self, offset: u64, len: u64) -> Result<RebuildReport, VdevError> {
        let geometry = self.draid();
        let sector = 1u64 << self.ashift();
        let row = geometry.width() as u64 * sector;
        let group = geometry.group_sectors() * sector;
        let end = offset
            .saturating_add(len)
            .next_multiple_of(row)
            .min(self.asize());
        let mut at = offset / row * row;
        let mut report = RebuildReport::default();
        while at < end {
            // At most one group at a time, and a bounded buffer per column.
            let piece_end = end.min((at / group + 1) * group).min(at + 256 * row);
            let rows = (piece_end - at) / row;
            assert!(rows > 0, "a piece holds whole rows");
            self.rebuild_rows(at, rows, &mut report)?;
            at = piece_end;
        }
        Ok(report)
    }

    /// Rebuilds `rows` group rows from top-level `offset` (row-aligned, inside one group).
    fn rebuild_rows(
        &self,
        offset: u64,
        rows: u64,
        report: &mut RebuildReport,
    ) -> Result<(), VdevError> {
        let geometry = self.draid();
        let sector = 1u64 << self.ashift();
        let map = geometry.map(offset, rows * geometry.data as u64 * sector);
        let children = self.children();
        let targets: Vec<usize> = (0..map.columns.len())
            .filter(|&c| children[map.columns[c].child].needs_resilver())
            .collect();
        if targets.is_empty() {
            return Ok(());
        }
        let len = usize::try_from(rows * sector).expect("a piece fits in memory");
        let mut columns: Vec<Vec<u8>> = vec![tarn_base::buf::zeroed(len); map.columns.len()];
        // Every child's column is in flight at once on devices with their own I/O thread, so
        // all children read in parallel; synchronous (simulated) devices read in order.
        let mut missing = Vec::new();
        let mut in_flight = Vec::new();
        for (c, column) in map.columns.iter().enumerate() {
            let at = column.child_sector << self.ashift();
            let source = (!targets.contains(&c))
                .then(|| children[column.child].read_leaf().cloned())
                .flatten()
                .and_then(|leaf| leaf.usable_device().map(|device| (leaf, device)));
            let read = match source {
                Some((leaf, device)) if device.reads_in_parallel() => {
                    let read = leaf.submit_read(device.as_ref(), at, len);
                    in_flight.push((c, leaf, read));
                    true
                }
                Some((leaf, device)) => leaf.read(device.as_ref(), at, &mut columns[c]).is_ok(),
                None => false,
            };
            if !read {
                missing.push(c);
            }
        }
        for (c, leaf, read) in in_flight {
            match leaf.finish_read(read) {
                Ok(bytes) => columns[c].copy_from_slice(&bytes),
                Err(_) => missing.push(c),
            }
        }
        missing.sort_unstable();
        if missing.len() > map.parity {
            return Err(VdevError::Unrecoverable {
                guid: self.guid(),
                offset,
                len: rows * geometry.width() as u64 * sector,
                why: "more columns unreadable than parity",
            });
        }
        let mut slices: Vec<&mut [u8]> = columns.iter_mut().map(Vec::as_mut_slice).collect();
        crate::raidz_math::reconstruct(self.parity_impl(), map.parity, &mut slices, &missing);
        let mut healing = Healing::default();
        for &c in &targets {
            let column = map.columns[c];
            let at = column.child_sector << self.ashift();
            report.written += children[column.child].resilver(at, &columns[c], &mut healing);
        }
        report.failed.extend(healing.heal_failed);
        Ok(())
    }
}
