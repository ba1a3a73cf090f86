//! tarn-vdev: the vdev tree. Top-level vdevs (disk, mirror, raidz1/2/3, dRAID) over leaf
//! devices, the raidz and dRAID column maps and parity math, reconstruction, self-healing and
//! per-leaf counters.
//!
//! # Purpose
//! The pool addresses blocks as (top-level vdev, offset, size). This crate turns such an
//! address into leaf I/O: copies on every mirror child, or parity and data columns on raidz
//! children; and back again on read, returning only bytes the caller's checksum accepts and
//! repairing what it finds wrong on the way, as OpenZFS's `vdev_mirror.c` and `vdev_raidz.c`
//! do.
//!
//! # Model
//! ```text
//!  TopVdev { id, guid, ashift, layout, asize }  Layout: Disk | Mirror | Raidz | Draid
//!     |-- Arc<Leaf> { guid, path, Option<Arc<dyn Device>>, LeafState, LeafStats }
//!     |-- Arc<Leaf> ...
//!
//!  leaf device:  | labels + boot (DATA_START = 4 MiB) | data area ............ | labels |
//!  a top-level byte offset o maps to leaf byte DATA_START + (child sector << ashift)
//!
//!  mirror: every child holds the block at child offset o.
//!  raidz (n children, parity p): top-level sector s lives on child s % n, child sector s / n.
//!  A block is written row by row, p parity sectors then up to n - p data sectors per row:
//!
//!   n = 6, p = 2, block of 7 data sectors at top-level sector 12 (child 0, child sector 2):
//!   child:            0     1     2     3     4     5
//!   child sector 2:  [P0]  [Q0]  [D0]  [D2]  [D4]  [D6]   row 0
//!   child sector 3:  [P1]  [Q1]  [D1]  [D3]  [D5] (pad)   row 1 (short: 3 data sectors)
//!   columns: P = c0, Q = c1, data c2 = D0 D1 (first bytes), c3 = D2 D3, c4 = D4 D5, c5 = D6
//!   allocated = 7 + 2 * 2 = 11 sectors, rounded up to a multiple of p + 1 = 3 -> 12
//! ```
//! dRAID (`draid_map`, docs/FORMAT.md "dRAID layout") cuts the children into slices of rows,
//! permutes the children per slice from a seed in the config, and lays fixed-width groups of
//! `d + p` columns over the first `n - s` positions (the last `s` are distributed spare
//! space). A block is padded to whole rows of `d` data sectors and is then a raidz block of
//! width `d + p` inside one group, so `raidz_io` reads, writes, scrubs and heals it through
//! the same code with a column map whose children come from the permutation.
//!
//! [`raidz_map`] computes these maps (with a larger diagram); [`raidz_math`] generates
//! P/Q/R over GF(2^8) and rebuilds up to `p` missing columns, with AVX2 kernels picked at
//! run time; `raidz_io` and `mirror` run the read, write and scrub state machines.
//!
//! # State
//! In memory: the tree of [`TopVdev`]s and [`Leaf`]s, each leaf's device handle, state,
//! counters, latency histograms ([`stats`]: log2 buckets, timed with the `Clock` the pool
//! gives each leaf) and its slow mark (set by the engine's detector). On disk: nothing of its
//! own; the tree is stored in the labels as `tarn_format::label::VdevTree` (see
//! [`TopVdev::to_tree`], [`TopVdev::from_tree`]), and the column layout above is part of the
//! format (docs/FORMAT.md, "Raidz layout").
//!
//! # Invariants
//! - I1: a read returns only bytes that passed the caller's `verify`; otherwise
//!   [`VdevError::Unrecoverable`]. There is no path that returns unverified data.
//! - I2: a raidz block has at most `parity` columns on unusable leaves when its write
//!   succeeds, and its parity columns are exactly P/Q/R of its data columns as written.
//! - I3: healing rewrites a leaf only with bytes derived from data that verified, and only at
//!   the column or copy's own location.
//! - I4: the columns of one raidz block sit on distinct children; every column of a block at
//!   a valid offset lies inside its leaf's data area.
//! - I5: every parity implementation produces the same bytes (exhaustively tested).
//! - I6: a leaf marked resilvering is never read (its position is reconstructed or read
//!   from the other member instead), and every write and heal of its position reaches it.
//! - I7: a leaf marked slow still takes every write and heal; only reads avoid it, and never
//!   at the price of a read that would otherwise succeed.
//!
//! # Concurrency and context
//! Everything takes `&self`; leaves are shared as `Arc<Leaf>`. A leaf's device and path sit
//! behind `RwLock`s that are held only to clone or replace the handle, never across I/O;
//! states and counters are atomics. Concurrent operations on different blocks are
//! independent. A healing write may race a read of the same block: both see either the old
//! (bad) or the new (correct) bytes, and the reader still verifies. Column I/O within one
//! block is issued together on devices with their own I/O thread
//! (`Device::reads_in_parallel`: every data column of a raidz read, then the parity columns
//! if reconstruction needs them, every column of a scrub, every side of a mirror scrub are
//! submitted before any is waited for) and inline, in column order, on synchronous devices,
//! so simulated runs draw their faults in the same order as ever. A block is written as
//! `tarn_device::SharedBytes` ([`TopVdev::write_shared`]): each data column a range of the
//! block's buffer, each parity column a buffer of its own, each mirror side the whole block;
//! a queued device keeps them until its I/O thread wrote them, which is safe because the
//! buffer sits behind an `Arc` and cannot change (`shared` I1). [`TopVdev::reads_in_parallel`]
//! tells callers (scrub, read-ahead) whether running blocks on several threads can help.
//!
//! # Failure model
//! Per leaf: I/O errors on read (counted in `read_errors`, column reconstructed, column
//! rewritten), on write (counted in `write_errors`, reported in [`WriteReport::missed`] for
//! resilver), on flush (`write_errors`); silent corruption (found by `verify` on the
//! assembled data, located by trying copies or combinations of up to `parity` columns,
//! counted in `checksum_errors`, rewritten); leaves missing or not online (skipped on write,
//! treated as lost columns on read); slow leaves (marked by the engine: read around, their
//! raidz column reconstructed while parity covers every slow column of the block and read
//! after all if no reconstruction verifies; a mirror reads them last). Beyond the budget
//! (more than `parity` bad raidz columns, no good mirror copy) the result is an error, never
//! wrong bytes.
//!
//! Two helpers of background work: `rebuild` copies raw ranges of a mirror to the leaves
//! being resilvered (sequential resilver, no checksums; the engine scrubs afterwards), and
//! `prefetch` turns a top-level range into leaf ranges to read ahead.
//!
//! # Not here
//! Distributed spares in use and dRAID's sequential rebuild, log/cache/special classes,
//! raidz expansion, resilver and scrub scheduling (the engine decides what to scrub or
//! resilver; this crate does one block when asked), when a leaf is faulted or a spare
//! activated (the engine), allocation (tarn-space), checksums (the caller's `verify`).
//! Replacing and spare nodes are here (`child`): a child position holds a leaf or two
//! leaves, one of them being resilvered.

pub mod child;
pub mod draid_map;
pub mod draid_spare;
pub mod error;
pub mod l2cache;
mod l2persist;
pub mod leaf;
mod mirror;
mod prefetch;
mod raidz_io;
pub mod raidz_map;
pub mod raidz_math;
pub mod rebuild;
pub mod stats;
pub mod top;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_draid;
#[cfg(test)]
mod tests_parallel;
#[cfg(test)]
mod tests_placement;

pub use child::{Child, ChildKind};
pub use draid_map::DraidGeometry;
pub use error::VdevError;
pub use l2cache::{L2Cache, L2Key, L2Rebuild, L2Stats};
pub use leaf::{Leaf, LeafState, LeafStats, LeafStatsSnapshot};
pub use raidz_io::ReadCounts;
pub use raidz_map::{RaidzColumn, RaidzMap};
pub use raidz_math::Impl;
pub use stats::{IoKind, IoStats, IoStatsSnapshot, LATENCY_BUCKETS};
pub use top::{
    Healing, Health, Layout, ReadReport, ScrubReport, StartedRead, TopVdev, WriteReport,
};
