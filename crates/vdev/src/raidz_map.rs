//! Raidz geometry: which child, which sectors and how many, for every column of a block.
//!
//! # Model
//! A raidz top-level vdev with `n` children and parity `p` has a sector-interleaved address
//! space: top-level sector `s` lives on child `s % n` at child sector `s / n`. A block of
//! `d` data sectors starting at top-level sector `b` fills consecutive top-level sectors
//! row by row; each row holds `p` parity sectors followed by up to `n - p` data sectors, so
//! every child is a column:
//! ```text
//!  n = 5, p = 1, block at top-level sector b = 7 (f = b % n = 2, base = b / n = 1),
//!  d = 9 data sectors: q = 9 / 4 = 2, r = 1, bc = r + p = 2 columns get q + 1 sectors
//!
//!  child:          0      1      2      3      4
//!  child sector 1               [P0]   [D0]   [D3]      col 0 = P on child 2 (3 sectors)
//!  child sector 2  [D5]  [D7]   [P1]   [D1]   [D4]      col 1 = D0..D2 on child 3 (3)
//!  child sector 3  [D6]  [D8]   [P2]   [D2]  (pad)      col 2 = D3 D4 on child 4 (2)
//!  child sector 4 (pad)  (pad)                          col 3 = D5 D6 on child 0 (2)
//!                                                       col 4 = D7 D8 on child 1 (2)
//!  columns 3 and 4 wrapped past the last child, so they start one child sector lower.
//!  written: d + p * rows = 9 + 3 = 12 sectors; allocated: rounded up to a multiple of
//!  p + 1 = 2 -> 12 (no padding here; with d = 10 it would be 10 + 3 = 13 -> 14).
//! ```
//! Column `c` row `j` is top-level sector `b + c + j * n`, so the written sectors are exactly
//! `b .. b + written` and the padding sectors follow them; padding is allocated (so freed
//! fragments stay usable by blocks of `p + 1` sectors or more) and never read. On devices
//! with a write-behind queue it is written with zeros (`raidz_io::write_padding`), so that
//! the columns of consecutive blocks are adjacent on every child and merge into one write.
//!
//! Columns `0..p` carry parity (P, Q, R, each as long as column 0); the rest carry the data in
//! order, the first data column holding the first bytes of the block.
//!
//! # Invariants
//! - I1: the columns of a map sit on distinct children.
//! - I2: the data columns hold exactly `d` sectors; parity columns are as long as the longest
//!   data column; `written <= allocated = allocation_size(psize) / S`.

use tarn_format::label::DATA_START;

/// One column of a raidz block: `sectors` sectors on child `child` from `child_sector`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzColumn {
    /// Index of the child (leaf) among the top-level vdev's children.
    pub child: usize,
    /// First sector of the column, counted from the start of the child's data area.
    pub child_sector: u64,
    /// Length of the column in sectors.
    pub sectors: u64,
}

/// Where every column of one raidz block lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzMap {
    /// Number of parity columns (the first `parity` entries of `columns`).
    pub parity: usize,
    /// Sector size shift.
    pub ashift: u8,
    /// Parity columns, then data columns in data order.
    pub columns: Vec<RaidzColumn>,
    /// Data sectors of the block.
    pub data_sectors: u64,
    /// Sectors written (data plus parity).
    pub written_sectors: u64,
    /// Sectors allocated (written plus padding to a multiple of `parity + 1`).
    pub allocated_sectors: u64,
}

fn check_geometry(children: usize, parity: usize, ashift: u8) {
    assert!(
        (1..=tarn_base::limits::RAIDZ_PARITY_MAX).contains(&parity),
        "raidz parity {parity} out of range"
    );
    assert!(
        children > parity,
        "raidz{parity} needs more than {parity} children, has {children}"
    );
    assert!(
        children <= tarn_base::limits::VDEV_CHILDREN_MAX,
        "{children} children is too many"
    );
    assert!(ashift < 32, "ashift {ashift} out of range");
}

/// Allocated size in bytes of a block of `psize` bytes (rounded up to sectors) on a raidz
/// vdev: data sectors, plus `parity` sectors per row, rounded up to a multiple of
/// `parity + 1` sectors.
#[must_use]
pub fn allocation_size(children: usize, parity: usize, ashift: u8, psize: u64) -> u64 {
    check_geometry(children, parity, ashift);
    let sector = 1u64 << ashift;
    let data = psize.div_ceil(sector).max(1);
    let width = (children - parity) as u64;
    let rows = data.div_ceil(width);
    let total = data + rows * parity as u64;
    let stride = parity as u64 + 1;
    total.div_ceil(stride) * stride * sector
}

impl RaidzMap {
    /// The map of a block of `psize` bytes (a positive multiple of the sector size) at
    /// top-level byte `offset` (a multiple of the sector size).
    #[must_use]
    pub fn new(children: usize, parity: usize, ashift: u8, offset: u64, psize: u64) -> RaidzMap {
        check_geometry(children, parity, ashift);
        let sector = 1u64 << ashift;
        assert!(
            offset.is_multiple_of(sector),
            "offset {offset} is not sector aligned"
        );
        assert!(
            psize > 0 && psize.is_multiple_of(sector),
            "psize {psize} is not a sector multiple"
        );
        let n = children as u64;
        let p = parity as u64;
        let b = offset >> ashift;
        let first = b % n;
        let base = b / n;
        let d = psize >> ashift;
        let q = d / (n - p);
        let r = d % (n - p);
        let big_columns = if r == 0 { 0 } else { r + p };
        let count = if q == 0 { big_columns } else { n };
        let columns: Vec<RaidzColumn> = (0..count)
            .map(|c| RaidzColumn {
                child: usize::try_from((first + c) % n).expect("child index < children"),
                child_sector: base + u64::from(first + c >= n),
                sectors: if c < big_columns { q + 1 } else { q },
            })
            .collect();
        let written: u64 = columns.iter().map(|c| c.sectors).sum();
        let allocated = allocation_size(children, parity, ashift, psize) >> ashift;
        let map = RaidzMap {
            parity,
            ashift,
            columns,
            data_sectors: d,
            written_sectors: written,
            allocated_sectors: allocated,
        };
        map.check();
        map
    }

    fn check(&self) {
        let data: u64 = self.columns[self.parity..].iter().map(|c| c.sectors).sum();
        assert_eq!(data, self.data_sectors, "data columns hold the data (I2)");
        let longest = self.columns[self.parity..]
            .iter()
            .map(|c| c.sectors)
            .max()
            .unwrap_or(0);
        for column in &self.columns[..self.parity] {
            assert_eq!(
                column.sectors, longest,
                "parity as long as the longest data column (I2)"
            );
        }
        assert!(
            self.written_sectors <= self.allocated_sectors,
            "written within allocation (I2)"
        );
        debug_assert!(
            {
                let mut children: Vec<usize> = self.columns.iter().map(|c| c.child).collect();
                children.sort_unstable();
                children.windows(2).all(|w| w[0] != w[1])
            },
            "columns on distinct children (I1)"
        );
    }

    /// Length of column `c` in bytes.
    #[must_use]
    pub fn column_bytes(&self, c: usize) -> usize {
        usize::try_from(self.columns[c].sectors << self.ashift).expect("column fits in memory")
    }

    /// Byte offset of column `c` on its leaf device (labels and boot area included).
    #[must_use]
    pub fn leaf_offset(&self, c: usize) -> u64 {
        DATA_START + (self.columns[c].child_sector << self.ashift)
    }

    /// Byte range of data column `c` (`c >= parity`) inside the block's data.
    #[must_use]
    pub fn data_range(&self, c: usize) -> std::ops::Range<usize> {
        assert!(
            c >= self.parity && c < self.columns.len(),
            "column {c} is not a data column"
        );
        let start: usize = (self.parity..c).map(|i| self.column_bytes(i)).sum();
        start..start + self.column_bytes(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_alloc(children: usize, parity: usize, sectors: u64, expected_sectors: u64) {
        assert_eq!(
            allocation_size(children, parity, 9, sectors * 512),
            expected_sectors * 512,
            "n {children} p {parity} d {sectors}"
        );
    }

    /// Goal: allocation sizes follow the OpenZFS rule. Method: hand-computed cases.
    #[test]
    fn allocation_size_examples() {
        check_alloc(5, 1, 1, 2); // 1 + 1 = 2, already a multiple of 2
        check_alloc(5, 1, 4, 6); // 4 + 1 = 5 -> 6
        check_alloc(5, 1, 9, 12); // 9 + 3 = 12
        check_alloc(5, 1, 10, 14); // 10 + 3 = 13 -> 14
        check_alloc(6, 2, 1, 3); // 1 + 2 = 3
        check_alloc(6, 2, 5, 9); // 5 + 2*2 = 9
        check_alloc(4, 3, 2, 8); // 2 + 3*2 = 8
        check_alloc(10, 2, 256, 321); // 256 + 2*32 = 320 -> 321 (a multiple of 3)
        assert_eq!(
            allocation_size(5, 1, 12, 100),
            2 * 4096,
            "partial sector rounds up"
        );
    }

    /// Goal: the diagram in the theory block is what `new` computes.
    #[test]
    fn map_matches_theory_diagram() {
        let map = RaidzMap::new(5, 1, 9, 7 * 512, 9 * 512);
        let got: Vec<(usize, u64, u64)> = map
            .columns
            .iter()
            .map(|c| (c.child, c.child_sector, c.sectors))
            .collect();
        assert_eq!(
            got,
            vec![(2, 1, 3), (3, 1, 3), (4, 1, 2), (0, 2, 2), (1, 2, 2)]
        );
        assert_eq!((map.written_sectors, map.allocated_sectors), (12, 12));
        assert_eq!(map.data_range(1), 0..1536);
        assert_eq!(map.data_range(4), 3584..4608);
        assert_eq!(map.leaf_offset(3), DATA_START + 1024);
    }

    /// Goal: for every small geometry and offset, the columns cover exactly the top-level
    /// sectors `b .. b + written` once each (I1, I2). Method: enumerate and mark sectors.
    #[test]
    fn columns_tile_the_written_range() {
        for parity in 1..=3usize {
            for children in parity + 1..=12 {
                for d in 1..=3 * children as u64 {
                    for b in 0..children as u64 * 2 {
                        let map = RaidzMap::new(children, parity, 9, b * 512, d * 512);
                        let mut seen = vec![false; map.written_sectors as usize];
                        for column in &map.columns {
                            for j in 0..column.sectors {
                                let top = (column.child_sector + j) * children as u64
                                    + column.child as u64;
                                let index = (top - b) as usize;
                                assert!(!seen[index], "sector {top} twice");
                                seen[index] = true;
                            }
                        }
                        assert!(
                            seen.iter().all(|&s| s),
                            "n {children} p {parity} d {d} b {b}"
                        );
                        let rows = d.div_ceil((children - parity) as u64);
                        assert_eq!(map.written_sectors, d + rows * parity as u64);
                        assert_eq!(map.allocated_sectors % (parity as u64 + 1), 0);
                    }
                }
            }
        }
    }
}
