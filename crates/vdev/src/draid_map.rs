//! dRAID geometry: fixed-width redundancy groups laid over permuted rows of the children,
//! with distributed spare space (docs/FORMAT.md "dRAID layout" is the byte-level contract).
//!
//! # Model
//! `n` children, `p` parity and `d` data columns per group (width `w = d + p`), `s`
//! distributed spares, `u = n - s` columns of each row for groups. Every child's data area
//! is cut into rows of `H` sectors (`H = ceil(BLOCK_SIZE_MAX / (d * S))`, so one group holds
//! the largest block), and rows into slices of `R = lcm(w, u) / u` rows, which hold exactly
//! `G = lcm(w, u) / w` groups. Each slice has its own permutation `perm` of the children:
//! ```text
//!  slice i, u = 10, w = 6, s = 1 (n = 11): R = 3 rows, G = 5 groups; slots q = 0..30
//!  position:   0   1   2   3   4   5   6   7   8   9 | 10
//!  child:    perm[0] ...                     perm[9] | perm[10] (spare space, all R rows)
//!  row 0:     g0  g0  g0  g0  g0  g0  g1  g1  g1  g1 |  S0
//!  row 1:     g1  g1  g2  g2  g2  g2  g2  g2  g3  g3 |  S0
//!  row 2:     g3  g3  g3  g3  g4  g4  g4  g4  g4  g4 |  S0
//! ```
//! Group `g` takes slots `g*w .. g*w + w`; slot `q` is position `q % u` of row `q / u`, so
//! a group's columns sit on `w` distinct children even when it wraps to the next row. The
//! top-level address space is the groups in order, each one a raidz of width `w` whose
//! columns are `H` sectors tall: within a group, sector `o` is group column `o % w`, group
//! row `o / w`. A block is aligned to `w` sectors, never crosses a group, and is padded with
//! zero sectors to whole rows of `d` data sectors (as OpenZFS pads), so every block is
//! `w` columns of equal length: parity first, then data in order, as raidz.
//!
//! `perm` of slice `i` is base permutation `i % B` (a Fisher-Yates shuffle driven by
//! SplitMix64 from the stored seed) with every entry rotated by `i / B` modulo `n`. Over
//! `n * B` slices every child stands at every position exactly `B` times, so each holds
//! data, parity and spare space in equal shares, and a failed child's columns have their
//! group partners spread over all the others.
//!
//! # Invariants
//! - I1: the `w` columns of a group sit on distinct children, none in a spare position.
//! - I2: the layout is a pure function of (n, p, d, s, seed, ashift): same config, same
//!   bytes on any machine.
//! - I3: spare `k` of slice `i` is all `R * H` sectors of the slice on child `perm[u + k]`;
//!   no group column is ever there.

use crate::raidz_map::RaidzMap;
use tarn_base::limits::{BLOCK_SIZE_MAX, RAIDZ_PARITY_MAX, VDEV_CHILDREN_MAX};

/// Base permutations per layout (`B` in the module docs).
pub const DRAID_BASE_PERMUTATIONS: usize = 64;

/// Why a dRAID geometry is not valid.
pub fn check_config(
    children: usize,
    parity: usize,
    data: usize,
    spares: usize,
) -> Result<(), &'static str> {
    if !(1..=RAIDZ_PARITY_MAX).contains(&parity) {
        return Err("draid parity must be 1, 2 or 3");
    }
    if data == 0 {
        return Err("draid needs at least 1 data column");
    }
    if children > VDEV_CHILDREN_MAX {
        return Err("a vdev has at most 255 children");
    }
    if children < data + parity + spares {
        return Err("draid needs at least data + parity + spares children");
    }
    Ok(())
}

/// SplitMix64, the generator of the base permutations (docs/FORMAT.md gives its constants).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The layout of one dRAID top-level vdev (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraidGeometry {
    /// Children (`n`).
    pub children: usize,
    /// Parity columns per group (`p`).
    pub parity: usize,
    /// Data columns per group (`d`).
    pub data: usize,
    /// Distributed spares (`s`).
    pub spares: usize,
    /// Sector size shift.
    pub ashift: u8,
    /// Seed of the base permutations.
    pub seed: u64,
    /// Sectors per row on each child (`H`).
    pub row_sectors: u64,
    /// Rows per slice (`R`).
    pub rows_per_slice: u64,
    /// Groups per slice (`G`).
    pub groups_per_slice: u64,
    base: Vec<Vec<u8>>,
}

impl DraidGeometry {
    /// The geometry of a valid configuration ([`check_config`]); panics otherwise, as the
    /// caller checked.
    #[must_use]
    pub fn new(
        children: usize,
        parity: usize,
        data: usize,
        spares: usize,
        ashift: u8,
        seed: u64,
    ) -> DraidGeometry {
        if let Err(why) = check_config(children, parity, data, spares) {
            panic!("draid geometry {children}c {parity}p {data}d {spares}s: {why}");
        }
        assert!(ashift < 32, "ashift {ashift} out of range");
        let width = (data + parity) as u64;
        let usable = (children - spares) as u64;
        let lcm = width / gcd(width, usable) * usable;
        let sector = 1u64 << ashift;
        let row_sectors = BLOCK_SIZE_MAX.div_ceil(data as u64 * sector);
        let base = (0..DRAID_BASE_PERMUTATIONS)
            .map(|b| base_permutation(children, seed, b as u64))
            .collect();
        DraidGeometry {
            children,
            parity,
            data,
            spares,
            ashift,
            seed,
            row_sectors,
            rows_per_slice: lcm / usable,
            groups_per_slice: lcm / width,
            base,
        }
    }

    /// Columns per group (`w = d + p`).
    #[must_use]
    pub fn width(&self) -> usize {
        self.data + self.parity
    }

    /// Group columns per row (`u = n - s`).
    #[must_use]
    pub fn usable(&self) -> usize {
        self.children - self.spares
    }

    /// Sectors of one child's data area a slice takes.
    #[must_use]
    pub fn slice_child_sectors(&self) -> u64 {
        self.rows_per_slice * self.row_sectors
    }

    /// Top-level sectors of one group.
    #[must_use]
    pub fn group_sectors(&self) -> u64 {
        self.width() as u64 * self.row_sectors
    }

    /// Bytes of address space over children whose smallest data area is `child_bytes`:
    /// whole slices only (0 when not even one fits).
    #[must_use]
    pub fn asize(&self, child_bytes: u64) -> u64 {
        let slices = (child_bytes >> self.ashift) / self.slice_child_sectors();
        (slices * self.groups_per_slice * self.group_sectors()) << self.ashift
    }

    /// Bytes a block of `psize` bytes occupies: whole rows of `d` data and `p` parity
    /// sectors (small blocks pad to a full row, as in OpenZFS).
    #[must_use]
    pub fn allocation_size(&self, psize: u64) -> u64 {
        self.padded_size(psize) / self.data as u64 * self.width() as u64
    }

    /// The data bytes a block of `psize` bytes is written as: rounded up to whole rows of
    /// `d` sectors, the tail zero.
    #[must_use]
    pub fn padded_size(&self, psize: u64) -> u64 {
        let sectors = psize.div_ceil(1 << self.ashift).max(1);
        sectors.div_ceil(self.data as u64) * self.data as u64 * (1u64 << self.ashift)
    }

    /// The permutation of slice `slice`: child at each position (spare positions last).
    #[must_use]
    pub fn permutation(&self, slice: u64) -> Vec<usize> {
        let n = self.children as u64;
        let count = DRAID_BASE_PERMUTATIONS as u64;
        let base = &self.base[(slice % count) as usize];
        let rotation = (slice / count) % n;
        base.iter()
            .map(|&c| ((u64::from(c) + rotation) % n) as usize)
            .collect()
    }

    /// Child at position `position` of slice `slice`'s permutation.
    #[must_use]
    pub fn child_at(&self, slice: u64, position: usize) -> usize {
        let n = self.children as u64;
        let count = DRAID_BASE_PERMUTATIONS as u64;
        let base = &self.base[(slice % count) as usize];
        let rotation = (slice / count) % n;
        ((u64::from(base[position]) + rotation) % n) as usize
    }

    /// The child holding distributed spare `spare` for child sector `child_sector` (every
    /// sector of a slice's spare column is on one child).
    #[must_use]
    pub fn spare_child(&self, spare: usize, child_sector: u64) -> usize {
        assert!(spare < self.spares, "spare {spare} of {}", self.spares);
        let slice = child_sector / self.slice_child_sectors();
        self.child_at(slice, self.usable() + spare)
    }

    /// Why an access of `len` bytes at top-level `offset` does not fit the layout (a
    /// corrupt block pointer is input, not a bug): not aligned to a row, or across groups.
    pub fn check_block(&self, offset: u64, len: u64) -> Result<(), &'static str> {
        let sector = 1u64 << self.ashift;
        let row = self.width() as u64 * sector;
        if !offset.is_multiple_of(row) {
            return Err("not aligned to a draid row");
        }
        let group = self.group_sectors() * sector;
        let asize = self.allocation_size(len);
        if offset / group != (offset + asize - 1) / group {
            return Err("crosses a draid group");
        }
        Ok(())
    }

    /// The columns of a block of `len` bytes (already padded: a multiple of `d` sectors) at
    /// top-level `offset` ([`DraidGeometry::check_block`] holds): a [`RaidzMap`] whose
    /// columns name real children and child sectors.
    #[must_use]
    pub fn map(&self, offset: u64, len: u64) -> RaidzMap {
        let sector = 1u64 << self.ashift;
        assert!(
            len.is_multiple_of(self.data as u64 * sector),
            "draid block of {len} bytes is not padded to rows"
        );
        assert_eq!(
            self.check_block(offset, len),
            Ok(()),
            "draid block at {offset}"
        );
        let group_bytes = self.group_sectors() * sector;
        let group = offset / group_bytes;
        let in_group = offset % group_bytes;
        let mut map = RaidzMap::new(self.width(), self.parity, self.ashift, in_group, len);
        let slice = group / self.groups_per_slice;
        let first_slot = (group % self.groups_per_slice) * self.width() as u64;
        let usable = self.usable() as u64;
        for column in &mut map.columns {
            assert!(
                column.child_sector < self.row_sectors,
                "group row inside the group"
            );
            let slot = first_slot + column.child as u64;
            let row = slice * self.rows_per_slice + slot / usable;
            column.child = self.child_at(slice, (slot % usable) as usize);
            column.child_sector += row * self.row_sectors;
        }
        map.allocated_sectors = map.written_sectors;
        let mut children: Vec<usize> = map.columns.iter().map(|c| c.child).collect();
        children.sort_unstable();
        children.dedup();
        assert_eq!(
            children.len(),
            self.width(),
            "I1: columns on distinct children"
        );
        assert_eq!(
            map.columns.len(),
            self.width(),
            "a padded block fills every column of its group"
        );
        map
    }
}

fn base_permutation(children: usize, seed: u64, index: u64) -> Vec<u8> {
    let mut rng = SplitMix64(seed ^ index.wrapping_mul(0x0000_0001_0000_0001));
    let mut perm: Vec<u8> = (0..children)
        .map(|c| u8::try_from(c).expect("children <= 255"))
        .collect();
    for i in (1..children).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    perm
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every child stands at every position equally often over a full period, so
    /// data, parity and spare space are shared equally (module docs). Method: count.
    #[test]
    fn permutations_are_balanced_and_deterministic() {
        for (n, s) in [(11usize, 1usize), (7, 0), (30, 2), (90, 2)] {
            let geometry = DraidGeometry::new(n, 2, 4, s, 12, 42);
            let period = (n * DRAID_BASE_PERMUTATIONS) as u64;
            let mut counts = vec![vec![0u32; n]; n];
            for slice in 0..period {
                let perm = geometry.permutation(slice);
                let mut sorted = perm.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "a permutation");
                for (position, &child) in perm.iter().enumerate() {
                    counts[child][position] += 1;
                    assert_eq!(geometry.child_at(slice, position), child);
                }
            }
            for row in &counts {
                assert!(
                    row.iter().all(|&c| c == DRAID_BASE_PERMUTATIONS as u32),
                    "{row:?}"
                );
            }
            let again = DraidGeometry::new(n, 2, 4, s, 12, 42);
            assert_eq!(again, geometry, "same config, same layout");
            let other = DraidGeometry::new(n, 2, 4, s, 12, 43);
            assert_ne!(
                other.permutation(0),
                geometry.permutation(0),
                "the seed matters"
            );
        }
    }

    /// Goal: the columns of every group are on distinct children outside the spare
    /// positions, and when one child fails its group partners are spread over all other
    /// children (no child carries more than twice the mean rebuild reads). Method: map the
    /// first row of every group of many slices.
    #[test]
    fn groups_are_distinct_and_rebuild_reads_spread() {
        let geometry = DraidGeometry::new(30, 2, 8, 2, 9, 7);
        let sector = 512u64;
        let group_bytes = geometry.group_sectors() * sector;
        let slices = 30 * DRAID_BASE_PERMUTATIONS as u64;
        let mut partners = vec![0u64; 30];
        let failed = 5usize;
        for group in 0..slices * geometry.groups_per_slice {
            let map = geometry.map(group * group_bytes, 8 * sector);
            let mut children: Vec<usize> = map.columns.iter().map(|c| c.child).collect();
            let slice = group / geometry.groups_per_slice;
            for spare in 0..2 {
                let child = geometry.spare_child(spare, map.columns[0].child_sector);
                assert_eq!(child, geometry.child_at(slice, 28 + spare));
                assert!(!children.contains(&child), "I3: no column in spare space");
            }
            if children.contains(&failed) {
                for &c in children.iter().filter(|&&c| c != failed) {
                    partners[c] += 1;
                }
            }
            children.sort_unstable();
            children.dedup();
            assert_eq!(children.len(), 10, "I1: distinct children");
        }
        let total: u64 = partners.iter().sum();
        let mean = total / 29;
        for (child, &count) in partners.iter().enumerate() {
            if child != failed {
                assert!(
                    count > mean / 2 && count < mean * 2,
                    "{child}: {count} vs {mean}"
                );
            }
        }
    }

    /// Goal: allocation pads small blocks to whole rows and a block never crosses a group.
    #[test]
    fn padding_and_group_bounds() {
        let geometry = DraidGeometry::new(11, 2, 4, 1, 12, 1);
        let sector = 4096u64;
        assert_eq!(geometry.allocation_size(4096), 6 * sector);
        assert_eq!(geometry.allocation_size(16 << 10), 6 * sector);
        assert_eq!(geometry.allocation_size(128 << 10), 8 * 6 * sector);
        assert_eq!(
            geometry.allocation_size(BLOCK_SIZE_MAX),
            geometry.group_sectors() * sector
        );
        let group = geometry.group_sectors() * sector;
        assert!(geometry.check_block(group - 6 * sector, 4096).is_ok());
        assert!(geometry.check_block(group - 6 * sector, 5 * 4096).is_err());
        assert!(geometry.check_block(sector, 4096).is_err());
        assert_eq!(
            geometry.asize(geometry.slice_child_sectors() * sector - 1),
            0
        );
    }
}
